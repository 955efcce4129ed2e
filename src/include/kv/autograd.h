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

/* Makes dst a non-leaf whose history is a copy of src (which requires
 * grad): its grad_fn ("CopyBackwards") passes dst's gradient to src
 * unchanged. dst must already hold src's values (the caller copied them,
 * e.g. through a backend's copy ABI), have src's dtype and sizes and no
 * autograd history. Nothing is dispatched forward or backward, so no op
 * runs on dst's device: the runner gives an in-place op under grad this
 * non-leaf in place of a leaf on a device whose backend has no copy_ or
 * clone kernel. KV_ERR_INVALID_ARG (NULL, src without grad, dst with
 * history) or KV_ERR_SHAPE (dtype or sizes differ) otherwise. */
kv_status kv_autograd_record_copy(kv_tensor *dst, kv_tensor *src);

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

#endif
