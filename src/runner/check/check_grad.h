/* The grad check (check_grad.c) and the gradient runs other checks
 * compare between paths.
 *
 * Rows:
 *   grad:gradcheck       kv_gradcheck (central differences in f64 against
 *                        kv_backward) on the case's inputs widened to
 *                        f64/c128; with lazy bits, kv_gradcheck_fn_run on a
 *                        function that rebuilds the lazy inputs (conj and
 *                        _neg_view views; zero inputs stay ZeroTensors and
 *                        are not differentiated). PASS / FAIL (gradients
 *                        differ) / ERROR (the check could not run).
 *   grad:dispatch_cache  the gradients of every leaf computed through the
 *                        normal dispatch path equal, bit for bit, those
 *                        computed with the typed wrappers' op-handle cache
 *                        disabled (kv_dispatch_cache_set_enabled(false)),
 *                        which the backward formulas go through.
 * A gradient run (kv_check_grad_compute) builds the case's inputs in its
 * dtypes and layouts with leaves that require grad (runner/lazy_inputs.h),
 * calls the op, and runs kv_backward from the first output that requires
 * grad with fixed dyadic weights as grad_output, so two runs of the same
 * case get the same gradients unless a path differs. */
#ifndef KV_RUNNER_CHECK_GRAD_H
#define KV_RUNNER_CHECK_GRAD_H

#include <stdbool.h>

#include "runner/check/check.h"

typedef struct kv_grad_set {
    int n;                                 /* the case's inputs */
    kv_tensor *grad[KV_CASE_MAX_INPUTS];   /* .grad of input i's leaf, on the CPU; NULL when none */
    bool leaf[KV_CASE_MAX_INPUTS];         /* input i had a leaf that requires grad */
    int root;                              /* the output backward started from */
} kv_grad_set;

/* The gradients of the case on `device` (inputs there, host-addressable).
 * Errors when the case has no leaf, the call fails, no output requires
 * grad, or kv_backward fails. */
kv_status kv_check_grad_compute(const kv_check_ctx *ctx, kv_device device, kv_grad_set *out);
void kv_grad_set_free(kv_grad_set *g);

/* Bitwise comparison of two gradient runs (sizes, dtype, bytes, signed
 * zeros; any NaN matches any NaN). True when equal; false with r set to a
 * FAIL naming the input and the first mismatches. `a_name` and `b_name`
 * say which runs ("dispatch cache on"). */
bool kv_grad_set_compare(const kv_grad_set *a, const kv_grad_set *b, const char *a_name, const char *b_name,
                         kv_check_result *r);

#endif
