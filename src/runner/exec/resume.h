/* --resume: continue an incomplete run from its report folder (README
 * "Interrupted runs and --resume").
 *
 * The folder's meta.json must say the run is incomplete (interrupted, or
 * killed while it ran) and carry the same fingerprint and seed as this
 * run (the same cases, options, gates, backends and KV_* settings):
 * otherwise the rows on disk are another run's, and resuming would mix
 * them. Its results.jsonl gives the rows of every case that finished
 * (whole cases only: the last group of rows, which a kill or a full disk
 * may have cut, and every case found twice run again; report.h,
 * kv_report_stream_scan); the other
 * selected cases run now, and the reports list every case's rows in case
 * order, so the finished run's reports and totals are those of an
 * uninterrupted run. */
#ifndef KV_RUNNER_RESUME_H
#define KV_RUNNER_RESUME_H

#include "kv/status.h"
#include "runner/report/report.h"

/* Checks that `dir` holds an interrupted run of this one: the checks
 * above against `now` (this run's meta, fingerprint filled in). Errors
 * name the folder and what differs: a configuration error (kvrun exits
 * 2). Its rows stay in its results.jsonl: kvrun indexes them there
 * (kv_report_stream_scan) and reads each back when it writes the reports,
 * so a resumed run holds no more rows than an uninterrupted one. */
kv_status kv_resume_check(const char *dir, const kv_report_meta *now);

#endif
