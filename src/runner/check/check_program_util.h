/* What the rows of a program case share (check_program.c): the label of
 * a step in messages and the per-step comparison with a truth. */
#ifndef KV_RUNNER_CHECK_PROGRAM_UTIL_H
#define KV_RUNNER_CHECK_PROGRAM_UTIL_H

#include <stdbool.h>

#include "runner/check/check.h"
#include "runner/golden/exact.h"
#include "runner/program/program.h"

/* The truth of every step of program p for case c (its seed): each step's
 * correctly rounded result on the truths before it. `stats` may be NULL.
 * On failure `why` names the step. */
kv_status kv_prog_truth(const kv_program *p, const kv_case *c, kv_exact_stats *stats, kv_prog_values *truth,
                        int *steps_run, char *why, int cap);

/* "step 3 (gelu, cases/programs/mlp.prog:7) -> a" (out >= 0) or
 * "step 3 (gelu, cases/programs/mlp.prog:7)" (out < 0). */
void kv_prog_step_label(const kv_program *p, int k, int out, char *buf, int cap);

/* Step k output i (`got`, host-readable) against `expected` by the
 * tolerance table's rule for the step as a one-op case `sc` (bounds from
 * its inputs `tin`); false with r set to FAIL naming the step. */
bool kv_prog_compare(const kv_program *p, int k, int i, const kv_case *sc, const kv_case_inputs *tin,
                     const kv_tensor *expected, const kv_tensor *got, kv_check_result *r);

#endif
