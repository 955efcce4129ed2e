/* The modes row of a program case with --mode= other than vmap
 * (check_program_modes.c): `program:modes`, on the case's device, every
 * step teacher-forced through kv_call inside a session of the case's
 * modes; each step must leave the mode's trace (as the one-op lazy check
 * asks) and be within its op's tolerance of its truth (under autocast, the
 * truth of the op on the policy's cast inputs). FAIL names the step. */
#ifndef KV_RUNNER_CHECK_PROGRAM_MODES_H
#define KV_RUNNER_CHECK_PROGRAM_MODES_H

#include "runner/check/check.h"
#include "runner/program/program.h"

void kv_check_program_modes(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *truth);

/* Step k on `vals` through kv_call inside a session of `modes` (on
 * device `dev`), its outputs stored into vals. With `zero`, each tensor
 * argument carrying the ZeroTensor bit counts as a lazy=zero input of the
 * step. KV_OK when the call ran; *evidence then says whether every mode
 * and bit left its trace as the one-op lazy check asks
 * (kv_mode_session_verdict), `why` naming the one that did not. On a
 * failed call `why` holds the error. The vmap row runs its batched steps
 * this way, inside its vmap level; the fastpath rows the steps that read
 * a ZeroTensor. */
kv_status kv_prog_step_under_modes(const kv_program *p, int k, kv_prog_values *vals, unsigned modes, unsigned zero,
                                   kv_device dev, bool *evidence, char *why, int cap);

/* The truth of step k under autocast `ac`: its inputs in `truth` cast as
 * the policy casts them (sc: the step as a one-op case) and the exact
 * result of the op on them: `cin`, `csc` and `exp` are the cast problem,
 * owned by the caller on KV_OK. */
kv_status kv_prog_autocast_truth(const kv_program *p, int k, const kv_op *op, const kv_prog_values *truth,
                                 const kv_case *sc, kv_dtype ac, kv_case_inputs *cin, kv_case *csc,
                                 kv_case_outputs *exp);

#endif
