/* --resume: continue an incomplete run from its report folder (README
 * "Interrupted runs and --resume").
 *
 * The folder's meta.json must say the run is incomplete (interrupted, or
 * killed while it ran) and carry the same fingerprint and seed as this
 * run (the same cases, options, gates, backends and KV_* settings):
 * otherwise the rows on disk are another run's, and resuming would mix
 * them. Its results.jsonl gives the rows of every case that finished (a
 * last line cut by a kill is dropped, so that case runs again); the other
 * selected cases run now, and the rows are joined in case order, so the
 * finished run's reports and totals are those of an uninterrupted run. */
#ifndef KV_RUNNER_RESUME_H
#define KV_RUNNER_RESUME_H

#include "kv/status.h"
#include "runner/case/case.h"
#include "runner/check/result.h"
#include "runner/report/report.h"

/* The rows the interrupted run in `dir` left, after the checks above
 * against `now` (this run's meta, fingerprint filled in). Errors name the
 * folder and what differs: a configuration error (kvrun exits 2). */
kv_status kv_resume_load(const char *dir, const kv_report_meta *now, kv_result_list *prior);

/* The selected cases without rows in `prior`: *todo (malloc'd) and *ntodo;
 * *nresumed the number that have them. */
kv_status kv_resume_split(const kv_case *const *sel, int nsel, const kv_result_list *prior, const kv_case ***todo,
                          int *ntodo, int *nresumed);

/* Appends, in the order of sel, each case's rows: from `prior` when it has
 * them, else from `fresh` (the rows of the cases kv_resume_split left, in
 * their order; a case without rows there did not finish). */
kv_status kv_resume_join(const kv_case *const *sel, int nsel, const kv_result_list *prior,
                         const kv_result_list *fresh, kv_result_list *out);

#endif
