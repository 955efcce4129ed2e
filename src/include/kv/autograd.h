/* Autograd (DESIGN.md section 4): PyTorch's reverse-mode model in C.
 *
 * A tensor that requires grad carries KV_KEY_AUTOGRAD in its key set and
 * an autograd record (t->autograd): requires_grad, the accumulated .grad
 * of a leaf, and for a non-leaf the node (grad_fn) that made it and which
 * of the node's outputs it is. One boxed kernel at the Autograd key runs
 * every differentiable op: when an input requires grad it saves what the
 * op's backward formula needs (with the version counter of each saved
 * tensor), runs the layers below with Autograd excluded, and attaches a
 * node to the outputs. kv_backward walks the nodes in topological order
 * and accumulates .grad on the leaves.
 *
 * Gradients follow PyTorch's conventions: the gradient of a broadcast
 * input is reduced back to its shape; a real input of a complex op gets
 * the real part; complex gradients are conjugate Wirtinger derivatives
 * (the gradient of a*b with respect to a is grad * conj(b)).
 *
 * Records are refcounted, so an alias (kv_tensor_alias) may share one
 * with its source through kv_autograd_share: the boxing layer does that,
 * and gradients accumulated through either tensor are the same .grad. */
#ifndef KV_AUTOGRAD_H
#define KV_AUTOGRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/keys.h"
#include "kv/stack.h"
#include "kv/status.h"
#include "kv/tensor.h"

/* Registers the Autograd kernel, the non-differentiable fallthroughs and
 * the Autograd fallback (called from kv_modes_register_all). */
kv_status kv_autograd_register(void);

/* ---- requires_grad, .grad, grad_fn ---- */

/* Sets or clears requires_grad (and KV_KEY_AUTOGRAD in t->keys). Only
 * floating and complex tensors may require grad (else KV_ERR_DTYPE);
 * clearing it on a non-leaf is KV_ERR_INVALID_ARG, as in PyTorch. */
kv_status kv_tensor_set_requires_grad(kv_tensor *t, bool requires_grad);
bool kv_tensor_requires_grad(const kv_tensor *t);
/* A leaf has no grad_fn: every tensor that does not require grad, and
 * every tensor that requires grad but was not made by a recorded op. */
bool kv_tensor_is_leaf(const kv_tensor *t);
/* The accumulated gradient of a leaf (borrowed; NULL when none yet, and
 * always NULL for non-leaves, which do not retain their gradient). */
kv_tensor *kv_tensor_grad(const kv_tensor *t);
/* Drops the accumulated gradient (PyTorch's grad = None). */
void kv_tensor_clear_grad(kv_tensor *t);
/* The name of t's grad_fn, PyTorch style ("AddBackward0", "CopySlices");
 * NULL for leaves. A view whose base was modified in place since it was
 * made reports its regenerated node ("AsStridedBackward0"). */
const char *kv_tensor_grad_fn_name(kv_tensor *t);
/* Which output of its grad_fn t is (0 for leaves). */
int kv_tensor_output_nr(const kv_tensor *t);

/* Shares src's autograd record with dst (an alias of src, typically made
 * by kv_tensor_alias): dst->autograd = src->autograd with one more
 * reference, and dst gets src's KV_KEY_AUTOGRAD bit. Any record dst held
 * before is released. */
void kv_autograd_share(kv_tensor *dst, const kv_tensor *src);

/* ---- backward ---- */

/* Computes the gradient of `root` with respect to every leaf that
 * requires grad and accumulates it into the leaves' .grad. grad_output
 * NULL means ones for a one-element root; for any other root it is
 * KV_ERR_INVALID_ARG ("grad can be implicitly created only for scalar
 * outputs"). grad_output must have root's shape (else KV_ERR_SHAPE).
 * The saved tensors of every node that ran are freed afterwards, so a
 * second backward through a node that saved tensors is
 * KV_ERR_INVALID_ARG with PyTorch's "Trying to backward through the graph
 * a second time" message. A saved tensor modified in place since it was
 * saved is KV_ERR_INVALID_ARG ("one of the variables needed for gradient
 * computation has been modified by an inplace operation: ..."). The
 * backward formulas run with grad mode off (no double backward). */
kv_status kv_backward(kv_tensor *root, kv_tensor *grad_output);

/* ---- grad mode ----
 * Grad mode off is KV_KEY_AUTOGRAD in the thread-local excluded set, so
 * the dispatcher never selects the Autograd kernel and nothing is
 * recorded. Guards are values, paired like kv_tls_exclude_push/pop. */
bool kv_grad_mode_enabled(void);
kv_tls_keys kv_no_grad_push(void);     /* disables grad mode */
kv_tls_keys kv_enable_grad_push(void); /* enables it (inside a no-grad region) */
void kv_grad_mode_pop(kv_tls_keys saved);

/* ---- counters (process wide, for the runner) ---- */
typedef struct kv_autograd_counters {
    int64_t nodes_created;   /* grad_fn nodes recorded (CopySlices and regenerated views included) */
    int64_t nodes_executed;  /* backward formula runs */
    int64_t backward_calls;  /* kv_backward calls that got past argument checks */
    int64_t kernel_calls;    /* times the Autograd kernel ran */
    int64_t kernel_recorded; /* ... and recorded a node */
} kv_autograd_counters;

kv_autograd_counters kv_autograd_counters_get(void);
void kv_autograd_counters_reset(void);

/* ---- the formula table ---- */
/* Rows of the backward formula table, in table order. A row names an op
 * of ops.schema; rows whose op is not registered are skipped (and
 * reported by kv_autograd_has_formula as false). */
int kv_autograd_formula_count(void);
const char *kv_autograd_formula_op(int i);        /* "add.Tensor"; NULL if out of range */
const char *kv_autograd_formula_node_name(int i); /* "AddBackward0" */
bool kv_autograd_has_formula(const kv_op *op);
/* Whether the op is registered as non-differentiable (a fallthrough at
 * the Autograd key: factories, comparisons, argmax, detach, is_*). */
bool kv_autograd_is_nondifferentiable(const kv_op *op);

/* ---- gradcheck ----
 * Compares the analytical gradient with central finite differences in
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
