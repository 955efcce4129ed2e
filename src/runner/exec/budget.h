/* --deadline=SEC and --max-failures=N: limits that end a run early
 * (README "Interrupted runs and --resume", "Limits").
 *
 * The driver checks them as cases finish (and several times a second
 * while cases run, for the deadline) and stops the pool the way a signal
 * does (runner/exec/isolate.h, cfg->stop); running workers are killed.
 * Unlike a signal, the run is then complete by its own rule: every
 * selected case that did not finish gets one row (check "case"):
 *   deadline      ERROR "not run: the run's --deadline of SEC s had passed"
 *                 (a run that checked only part of the suite must not look
 *                 green);
 *   max-failures  SKIP "not run: --max-failures=N failing rows reached"
 *                 (the run fails already, on the rows that reached N).
 * No retries run after either. */
#ifndef KV_RUNNER_BUDGET_H
#define KV_RUNNER_BUDGET_H

#include "kv/status.h"
#include "runner/case/case.h"
#include "runner/check/result.h"
#include "runner/report/report.h"

/* The values of the driver's stop flag beside a signal number. */
#define KV_STOP_DEADLINE (-1)
#define KV_STOP_MAX_FAILURES (-2)

/* Gives each case of cases[0..n) that has no rows in `s` (indexed by
 * the same positions) one not-run row, with `status` and `message`;
 * *filled gets how many. */
kv_status kv_budget_fill_not_run(const kv_case *const *cases, int n, kv_report_stream *s, kv_result_status status,
                                 const char *message, int *filled);

#endif
