/* --retry=N: flake detection (README "Flakes: --retry and FLAKY").
 *
 * After the run, every case with a row that FAILed, ERRORed, CRASHed or
 * TIMEd OUT runs again (same workers, same isolation), up to `retries`
 * more times, until one attempt has no such row. A case that passes on a
 * retry is flaky: its rows are those of the passing attempt, except that
 * each row that failed on the first attempt stays in the report as that
 * first row (message, mismatches, repro) with the status FLAKY and the
 * message "failed, then passed on retry K of N: ..."; a first-attempt row
 * with no counterpart in the passing attempt (a crash's "case" row) is
 * kept as FLAKY too. A case that fails every attempt keeps its first
 * attempt's rows (what a run without --retry reports), each failing row's
 * message ending "(failed again on all N retries)".
 *
 * The first attempt's rows are the baseline's business afterwards, as
 * without retries: retrying happens before the baseline is applied, so a
 * known failure (an XFAIL to be) is retried like any other. */
#ifndef KV_RUNNER_RETRY_H
#define KV_RUNNER_RETRY_H

#include "kv/status.h"
#include "runner/exec/isolate.h"

/* The most --retry accepts: more attempts than this say nothing new. */
#define KV_RETRY_MAX 100

/* `results` holds the rows of cases[0..n), case by case in order (what
 * kv_isolate_run appends); they are rewritten by the rule above. *nflaky
 * (may be NULL) gets the number of flaky cases, *nretried the number of
 * cases that were run again. Errors only for bad arguments, rows out of
 * case order, or no memory. */
kv_status kv_retry_failing(const kv_case *const *cases, int n, const kv_run_env *env, const kv_isolate_config *cfg,
                           int retries, kv_result_list *results, int *nflaky, int *nretried);

#endif
