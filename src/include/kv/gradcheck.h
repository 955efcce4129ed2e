/* gradcheck: analytical gradients (kv_backward) against central finite
 * differences in f64, on any device. It sits above the backends and the
 * accel device (it places its perturbed inputs on the tested device), so
 * it is not part of the autograd mode itself. */
#ifndef KV_GRADCHECK_H
#define KV_GRADCHECK_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/autograd.h"
#include "kv/dispatch.h"
#include "kv/stack.h"
#include "kv/tensor.h"

/* Compares the analytical gradient with central finite differences in
 * f64. The check is a vector-Jacobian product: with fixed pseudo-random
 * weights w_k (one per element of each differentiable output k),
 *   L(x) = sum_k sum(Re(conj(w_k) * out_k))
 * the analytical dL/dx comes from kv_backward, the numerical one from
 * (L(x + eps e_j) - L(x - eps e_j)) / (2 eps) per input element j (real
 * and imaginary parts separately for complex inputs), and each pair must
 * satisfy |a - n| <= atol + rtol * |n|. PyTorch's gradcheck defaults:
 * eps 1e-6, atol 1e-5, rtol 1e-3. */
typedef struct kv_gradcheck_options {
    double eps;
    double atol;
    double rtol;
    uint64_t seed;          /* for the weights */
    /* Bit i set: stack slot i (a Tensor, Tensor? or Tensor[] argument) is
     * differentiable. 0 means every floating or complex tensor argument. */
    uint32_t differentiable;
} kv_gradcheck_options;

#define KV_GRADCHECK_DEFAULT_OPTIONS ((kv_gradcheck_options){ 1e-6, 1e-5, 1e-3, 0x6b76677261646368ull, 0 })

typedef struct kv_gradcheck_result {
    bool ran;                /* forward and backward completed; the comparison was made */
    bool passed;
    int slot;                /* first mismatch: stack slot of the input */
    int list_index;          /* its element in a Tensor[] argument, else -1 */
    int64_t element;         /* row-major element index in that input */
    bool imag;               /* the mismatch is in the imaginary part */
    double analytical;
    double numerical;
    int64_t elements_checked;
    char message[512];       /* "" when passed */
} kv_gradcheck_result;

/* Runs the gradient check for `op` on the arguments of `args` (a full
 * stack for op's schema; borrowed, not modified). Floating tensors are
 * converted to f64 and complex ones to c128 first (on their device; the
 * perturbed copies live on the CPU and are copied to that device for
 * each evaluation). An in-place op is checked on a clone of its mutable
 * argument, so the op's leaves are never written. Returns KV_OK when the
 * gradients match; KV_ERR_INVALID_ARG with a message naming op, input,
 * element and both values when they do not (result->ran true); any other
 * failure (the op or the backward failed) is returned as such with
 * result->ran false. `opts` NULL means KV_GRADCHECK_DEFAULT_OPTIONS;
 * `result` may be NULL. */
kv_status kv_gradcheck(const kv_op *op, const kv_stack *args, const kv_gradcheck_options *opts,
                       kv_gradcheck_result *result);

/* The same for any function of tensors: `fn` gets the current inputs
 * (f64/c128, requiring grad during the analytical pass) and returns new
 * references to its outputs in outs[0 .. *nout) (at most 8). `name`
 * stands for the op in messages. Inputs are borrowed; every input is
 * differentiable. */
typedef kv_status (*kv_gradcheck_fn)(void *ctx, kv_tensor *const *inputs, int ninputs, kv_tensor **outs,
                                     int *nout);
#define KV_GRADCHECK_MAX_OUTPUTS 8
kv_status kv_gradcheck_fn_run(const char *name, kv_gradcheck_fn fn, void *ctx, kv_tensor *const *inputs,
                              int ninputs, const kv_gradcheck_options *opts, kv_gradcheck_result *result);

#endif
