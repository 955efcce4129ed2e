/* The gradient row of a program case with `backward LOSS`
 * (check_program_grad.c): `grad:gradcheck`, on the case's device (cpu or
 * accel), the program as a function of its floating inputs in f64, the
 * gradient of LOSS from kv_backward against central differences of the
 * whole program (PyTorch's gradcheck defaults, as the one-op grad check),
 * each input carrying its lazy= bits on the cpu too. FAIL names the input
 * and element, or the step whose f64 call failed. */
#ifndef KV_RUNNER_CHECK_PROGRAM_GRAD_H
#define KV_RUNNER_CHECK_PROGRAM_GRAD_H

#include "runner/check/check.h"
#include "runner/program/program.h"

void kv_check_program_grad(const kv_check_ctx *ctx, const kv_program *p);

/* Under autocast (check_program_grad_cast.c): `grad:autocast`, kv_backward's
 * gradient after the program ran under the case's modes on its device
 * against the cast problem's gradient in f64 (the inputs autocast casts
 * rounded to its dtype, every step teacher-forced to the run's values),
 * within (2 N + 1) u of the largest gradient, N the steps with an output in
 * the autocast dtype, u its unit roundoff. FAIL names the input, element
 * and both values. */
void kv_check_program_grad_autocast(const kv_check_ctx *ctx, const kv_program *p);

#endif
