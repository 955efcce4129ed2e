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

/* The values of the driver's stop flag beside a signal number. */
#define KV_STOP_DEADLINE (-1)
#define KV_STOP_MAX_FAILURES (-2)

/* Inserts, in the order of cases[0..n), a not-run row for each case that
 * has no row in `rows` (rows in case order, each case's together), with
 * `status` and `message`. */
kv_status kv_budget_fill_not_run(const kv_case *const *cases, int n, kv_result_list *rows, kv_result_status status,
                                 const char *message);

#endif
