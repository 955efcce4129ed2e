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

#endif
