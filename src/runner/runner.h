/* The case runner's interface to the tools (kvrun): running case files
 * (exec/driver.h), perf mode (exec/perf.h), reports and shard merges
 * (report/), and the fast-path check's switches (check/check_fastpath.h).
 *
 * The runner is split by concern, one folder each:
 *   case/    the case grammar, expansion, options and canonical case IDs
 *   exec/    the driver, forked isolation, inputs and fill, mode sessions
 *   check/   one file per check, comparison, tolerances and error bounds
 *   golden/  the golden store: MANIFEST, .npy files, hashes
 *   report/  console, JSONL, JUnit, HTML, matrix, baselines, merge, dumps
 * Tools include this header only; the unit tests reach inside. */
#ifndef KV_RUNNER_H
#define KV_RUNNER_H

#include "runner/check/check_fastpath.h"
#include "runner/exec/driver.h"
#include "runner/exec/perf.h"
#include "runner/exec/retry.h"
#include "runner/report/merge.h"
#include "runner/report/report.h"

#endif
