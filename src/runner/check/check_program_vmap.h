/* The vmap row of a program case with --mode=vmap
 * (check_program_vmap.c): `program:vmap`, on the case's device, the whole
 * program under one vmap level over a leading dimension of
 * KV_CASE_VMAP_BATCH samples; every step's sample b equals that step in the
 * program run on sample b alone (bit for bit on reference kernels, else
 * within the step op's tolerance). FAIL names the first step, output and
 * sample that differ, or the step whose batched call failed. */
#ifndef KV_RUNNER_CHECK_PROGRAM_VMAP_H
#define KV_RUNNER_CHECK_PROGRAM_VMAP_H

#include "runner/check/check.h"
#include "runner/program/program.h"

void kv_check_program_vmap(const kv_check_ctx *ctx, const kv_program *p);

#endif
