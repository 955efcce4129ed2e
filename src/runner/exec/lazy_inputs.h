/* Inputs of cases with lazy bits and modes (lazy=, mode=): what the lazy
 * and grad checks build on top of kv_case_inputs_make.
 *
 * Values. The LOGICAL values of every input are the case's normal fill,
 * so a conj or neg case has the plain case's golden key and golden
 * output. `zero` is the exception: it replaces the input by a zero tensor,
 * so the logical problem is the case with that input all zeros; its
 * expected output is computed live by the reference kernel on those
 * materialized inputs (kv_lazy_logical_inputs), not stored in the golden
 * store, whose key for the case stays that of the plain problem.
 *
 * Representation. An input with bits is made by kv_lazy_make from its
 * logical values (conj+neg on one input: the Negative bit by kv_lazy_make
 * on conj(x), then a `conj` view adds the Conjugate bit) and its stored
 * values are then placed in the case layout on the case device, carrying
 * the bits. Under mode=grad (and no_grad) the leaf that requires grad is
 * the tensor of STORED values, and the input is made from it by the
 * dispatched view ops conj and _neg_view, so autograd sees the lazy views
 * and gradients flow through them to the leaf. A mutated input (in-place
 * self) is a clone of its leaf, as autograd forbids writing to a leaf.
 *
 * Off the host (a backend or the accel device's target) every input is
 * built on the host, reference kernels only, and its storage moved whole
 * with the backend's copy operations; layout, bits and requires_grad are
 * then set as metadata, so the target runs no op to get its inputs. The
 * exception is grad history, which only ops on the target can record: a
 * leaf that requires grad under lazy bits is there the input itself,
 * carrying its bits (as a detached lazy view is in PyTorch), and its
 * gradient is mapped back to the stored values on the host
 * (kv_lazy_leaf_grad); only a mutated input that requires grad, a
 * non-leaf by necessity, still has its history made on the target
 * (copy_, or as_strided and clone, then conj and _neg_view), which a
 * plugin without those ops (no kernel, no fallback) gets UNSUPPORTED.
 *
 * vmap. Each input becomes a physical tensor of KV_CASE_VMAP_BATCH
 * samples stacked along a new dim 0: sample b is the input of the case
 * with seed+b, so the samples differ and a rule that mixed them up would
 * show. Bits and layouts apply to the physical tensor. */
#ifndef KV_RUNNER_LAZY_INPUTS_H
#define KV_RUNNER_LAZY_INPUTS_H

#include <stdbool.h>

#include "runner/check/check.h"

/* Replaces tensor input i of `in` by `t` (ownership passes to `in`; the
 * old tensor is released), updating the boxed argument or Tensor[] entry
 * that pointed at the old one. */
void kv_case_inputs_replace(kv_case_inputs *in, int i, kv_tensor *t);

/* The contiguous CPU inputs of sample `sample` of the case (the case
 * itself for 0, seed+sample otherwise) with every zero-flagged input
 * replaced by zeros: the logical problem the lazy check's expected
 * outputs come from. */
kv_status kv_lazy_logical_inputs(const kv_case *c, const kv_op *op, int sample, kv_case_inputs *out);

/* Whether input i of the case requires grad under mode=grad / no_grad:
 * present, floating or complex, and not zero. */
bool kv_lazy_input_wants_grad(const kv_case *c, int i);

/* How kv_lazy_inputs_make builds the inputs. */
typedef struct kv_lazy_build {
    kv_device device;   /* where the inputs live (the case device) */
    bool requires_grad; /* mode=grad or no_grad: leaves that require grad */
    int batch;          /* 0, or KV_CASE_VMAP_BATCH for vmap's physical inputs */
} kv_lazy_build;

/* The case's inputs with its lazy bits, in its layouts, on b->device.
 * leaves[i] (new references, NULL where none) are the tensors that
 * require grad, for reading gradients after kv_backward. */
kv_status kv_lazy_inputs_make(const kv_case *c, const kv_op *op, const kv_lazy_build *b, kv_case_inputs *out,
                              kv_tensor *leaves[KV_CASE_MAX_INPUTS]);

/* One input with `bits` (KV_CASE_LAZY_*) whose logical values are those
 * of `logical` (host-addressable, no bits), placed in `layout` on
 * `device`. With requires_grad, *leaf gets the leaf (a new reference) and
 * the input is a view chain of it (a clone first when `mutated`). */
kv_tensor *kv_lazy_input_build(const kv_tensor *logical, unsigned bits, kv_layout layout, kv_device device,
                               bool requires_grad, bool mutated, kv_tensor **leaf);

/* The gradient that reached `leaf` (from kv_lazy_input_build) with
 * respect to the values it stores: *out a new reference (NULL when the
 * leaf has no gradient). A leaf off the host may carry the input's lazy
 * bits; its gradient is then mapped on the host (a host tensor). Every
 * other leaf's is its .grad itself, where it lies. */
kv_status kv_lazy_leaf_grad(const kv_tensor *leaf, kv_tensor **out);

#endif
