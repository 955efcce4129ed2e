/* Inputs with lazy bits, leaves that require grad, and vmap's physical
 * inputs (runner/lazy_inputs.h). */
#include "runner/exec/lazy_inputs.h"

#include <string.h>

#include "kv/autograd.h"
#include "kv/backend.h"
#include "kv/lazy.h"
#include "kv/ops.h"
#include "runner/check/check_util.h"
#include "runner/exec/inputs.h"

void kv_case_inputs_replace(kv_case_inputs *in, int i, kv_tensor *t) {
    kv_tensor *old = in->tensors[i];
    for (int a = 0; a < in->nargs; a++)
        if (in->args[a].tag == KV_IV_TENSOR && in->args[a].v.tensor == old) in->args[a].v.tensor = t;
    for (int k = 0; k < KV_CASE_MAX_INPUTS; k++)
        if (in->list_items[k] == old && old != NULL) in->list_items[k] = t;
    in->tensors[i] = t;
    kv_tensor_release(old);
}

static kv_tensor *zeros_like_cpu(const kv_tensor *t) {
    kv_tensor *z = kv_tensor_empty(t->sizes, t->ndim, t->dtype, KV_DEVICE_CPU0);
    if (z != NULL && z->storage->nbytes > 0) memset(z->storage->data, 0, z->storage->nbytes);
    return z;
}

kv_status kv_lazy_logical_inputs(const kv_case *c, const kv_op *op, int sample, kv_case_inputs *out) {
    kv_case cs = *c;
    cs.seed = c->seed + (uint64_t)sample;
    kv_status st = kv_case_inputs_make(&cs, op, KV_DEVICE_CPU0, true, out);
    if (st != KV_OK) return st;
    for (int i = 0; i < c->ninputs; i++) {
        if (!(c->lazy[i] & KV_CASE_LAZY_ZERO) || out->tensors[i] == NULL) continue;
        kv_tensor *z = zeros_like_cpu(out->tensors[i]);
        if (z == NULL) {
            st = kv_last_error();
            kv_case_inputs_free(out);
            return st;
        }
        kv_case_inputs_replace(out, i, z);
    }
    return KV_OK;
}

bool kv_lazy_input_wants_grad(const kv_case *c, int i) {
    if (i < 0 || i >= c->ninputs || c->absent[i] || (c->lazy[i] & KV_CASE_LAZY_ZERO)) return false;
    return kv_dtype_is_floating(c->dtypes[i]) || kv_dtype_is_complex(c->dtypes[i]);
}

/* A contiguous tensor (same device as `logical`) whose stored values,
 * read through `bits`, are logical's values, carrying those bits. */
static kv_tensor *lazy_stored(const kv_tensor *logical, unsigned bits) {
    if (bits & KV_CASE_LAZY_ZERO) return kv_lazy_make(logical, KV_KEY_ZERO_TENSOR);
    const bool conj = bits & KV_CASE_LAZY_CONJ, neg = bits & KV_CASE_LAZY_NEG;
    if (conj && !neg) return kv_lazy_make(logical, KV_KEY_CONJUGATE);
    if (neg && !conj) return kv_lazy_make(logical, KV_KEY_NEGATIVE);
    /* Both: neg-lazy conj(x), then a conj view: logical conj(conj(x)) = x. */
    kv_tensor *cx = kv_conj_physical((kv_tensor *)logical);
    if (cx == NULL) return NULL;
    kv_tensor *u = kv_lazy_make(cx, KV_KEY_NEGATIVE);
    kv_tensor_release(cx);
    if (u == NULL) return NULL;
    kv_tensor *v = kv_conj(u);
    kv_tensor_release(u);
    return v;
}

/* The chain of dispatched lazy views that autograd records, from a tensor
 * of stored values to one that reads them back as the logical values. */
static kv_tensor *lazy_view_chain(kv_tensor *base, unsigned bits) {
    kv_tensor_retain(base);
    kv_tensor *v = base;
    if (bits & KV_CASE_LAZY_CONJ) {
        kv_tensor *n = kv_conj(v);
        kv_tensor_release(v);
        if ((v = n) == NULL) return NULL;
    }
    if (bits & KV_CASE_LAZY_NEG) {
        kv_tensor *n = kv__neg_view(v);
        kv_tensor_release(v);
        if ((v = n) == NULL) return NULL;
    }
    return v;
}

/* The non-leaf an in-place op gets for a leaf in an overlapping layout
 * (b, w), which copy_ cannot write: the leaf's whole storage as a 1-D
 * view (as_strided, recorded), cloned, and viewed again with the leaf's
 * exact sizes, strides and offset (as_strided, recorded). It holds the
 * storage's values and overlaps as the leaf does, so a write into it is
 * refused exactly as without the mode (fill_ and zero_ still run), and
 * gradients map back through as_strided's backward. */
static kv_tensor *overlapping_nonleaf(kv_tensor *leaf) {
    const int64_t whole = (int64_t)(leaf->storage->nbytes / kv_dtype_size(leaf->dtype));
    const int64_t one = 1, zero = 0, offset = leaf->offset;
    kv_tensor *flat = kv_as_strided(leaf, (kv_int_list){ &whole, 1 }, (kv_int_list){ &one, 1 }, &zero);
    kv_tensor *copy = flat ? kv_clone(flat, NULL) : NULL;
    kv_tensor_release(flat);
    if (copy == NULL) return NULL;
    kv_tensor *v = kv_as_strided(copy, (kv_int_list){ leaf->sizes, leaf->ndim },
                                 (kv_int_list){ leaf->strides, leaf->ndim }, &offset);
    kv_tensor_release(copy);
    return v;
}

kv_tensor *kv_lazy_input_build(const kv_tensor *logical, unsigned bits, kv_layout layout, kv_device device,
                               bool requires_grad, bool mutated, kv_tensor **leaf) {
    if (leaf) *leaf = NULL;
    kv_tensor *stored = NULL;
    if (bits) {
        stored = lazy_stored(logical, bits);
        if (stored == NULL) return NULL;
    }
    /* kv_layout_place copies the stored bytes element by element; the
     * bits are put back on the placed tensor. */
    kv_tensor *placed = kv_layout_place(stored ? stored : logical, layout, device);
    const kv_keyset lazy = stored ? stored->keys & KV_KEYSET_LAZY : 0;
    kv_tensor_release(stored);
    if (placed == NULL) return NULL;
    if (!requires_grad || (bits & KV_CASE_LAZY_ZERO)) {
        placed->keys |= lazy;
        return placed;
    }
    kv_status st;
    if (device.type != KV_DEVICE_CPU && bits && !mutated) {
        /* Off the host the view chain below would need the target to run
         * conj and _neg_view forward and backward, ops a partial backend
         * need not have. The input is instead the leaf itself, its bits
         * set as metadata like a detached lazy view's: the op sees the
         * same values and bits, and kv_lazy_leaf_grad maps the gradient
         * with respect to them back to the stored values on the host. */
        placed->keys |= lazy;
        if ((st = kv_tensor_set_requires_grad(placed, true)) != KV_OK) {
            kv_tensor_release(placed);
            return NULL;
        }
        if (leaf) {
            kv_tensor_retain(placed);
            *leaf = placed;
        }
        return placed;
    }
    st = kv_tensor_set_requires_grad(placed, true);
    kv_tensor *base = NULL;
    if (st == KV_OK) {
        if (mutated) {
            /* A leaf that requires grad takes no in-place op: the op gets
             * a non-leaf copy. Placed again in the case's layout and
             * written from the leaf by copy_ (recorded), it keeps the
             * strides the case asks about, where a clone would be
             * contiguous. An overlapping layout (b, w) cannot be the
             * destination of copy_: there the non-leaf is
             * overlapping_nonleaf's view, in the same strides. */
            const bool overlapping = kv_tensor_internal_overlap(placed, NULL) != KV_OVERLAP_NO;
            if (device.type != KV_DEVICE_CPU && !bits && !overlapping) {
                /* Off the host copy_ and clone would run on the target,
                 * forward and backward, and a partial backend need not
                 * have them: the non-leaf is placed from the host values
                 * with the copy ABI, as the leaf was, and its history
                 * recorded without an op (kv_autograd_record_copy), so
                 * its gradient reaches the leaf unchanged. */
                base = kv_layout_place(logical, layout, device);
                if (base != NULL && kv_autograd_record_copy(base, placed) != KV_OK) {
                    kv_tensor_release(base);
                    base = NULL;
                }
                if (base == NULL) st = kv_last_error();
            } else if (overlapping) {
                base = overlapping_nonleaf(placed);
                if (base == NULL) st = kv_last_error();
            } else {
                base = kv_layout_place(placed, layout, device);
                if (base != NULL && kv_copy_(base, placed, false) != KV_OK) {
                    kv_tensor_release(base);
                    base = NULL;
                    kv_error_clear(); /* the clone below is the old way, not a failure */
                }
                if (base == NULL) base = kv_clone(placed, NULL);
            }
        } else {
            kv_tensor_retain(placed);
            base = placed;
        }
    }
    kv_tensor *input = base ? lazy_view_chain(base, bits) : NULL;
    kv_tensor_release(base);
    if (input == NULL || leaf == NULL) {
        kv_tensor_release(placed);
        return input;
    }
    *leaf = placed;
    return input;
}

/* Stacks the samples of every present input into vmap's physical inputs. */
static kv_status stack_samples(const kv_case *c, const kv_op *op, int batch, kv_case_inputs *out) {
    kv_case_inputs samples[KV_CASE_VMAP_BATCH];
    if (batch > KV_CASE_VMAP_BATCH) return kv_error(KV_ERR_INTERNAL, "vmap inputs: batch %d is too large", batch);
    memset(samples, 0, sizeof samples);
    kv_status st = KV_OK;
    for (int b = 1; b < batch && st == KV_OK; b++) {
        kv_case cs = *c;
        cs.seed = c->seed + (uint64_t)b;
        st = kv_case_inputs_make(&cs, op, KV_DEVICE_CPU0, true, &samples[b]);
    }
    for (int i = 0; i < c->ninputs && st == KV_OK; i++) {
        if (out->tensors[i] == NULL) continue;
        kv_tensor *items[KV_CASE_VMAP_BATCH];
        items[0] = out->tensors[i];
        for (int b = 1; b < batch; b++) items[b] = samples[b].tensors[i];
        kv_tensor *phys = kv_stack_op((kv_tensor_list){ items, batch }, 0);
        if (phys == NULL) {
            st = kv_error_prefix(kv_last_error(), "%s: vmap: cannot stack the samples of input %d", kv_op_name(op), i);
            break;
        }
        kv_case_inputs_replace(out, i, phys);
    }
    for (int b = 1; b < batch; b++) kv_case_inputs_free(&samples[b]);
    return st;
}

kv_status kv_lazy_inputs_make(const kv_case *c, const kv_op *op, const kv_lazy_build *b, kv_case_inputs *out,
                              kv_tensor *leaves[KV_CASE_MAX_INPUTS]) {
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) leaves[i] = NULL;
    kv_status st = kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, out);
    if (st != KV_OK) return st;
    if (b->batch > 0 && (st = stack_samples(c, op, b->batch, out)) != KV_OK) {
        kv_case_inputs_free(out);
        return st;
    }
    const kv_schema *s = kv_op_schema(op);
    for (int i = 0; i < c->ninputs; i++) {
        if (out->tensors[i] == NULL) continue;
        const int a = c->input_arg[i];
        const bool mutated = a >= 0 && a < s->nargs && s->args[a].alias.is_write;
        const bool rg = b->requires_grad && kv_lazy_input_wants_grad(c, i);
        kv_tensor *t = kv_lazy_input_build(out->tensors[i], c->lazy[i], c->layouts[i], b->device, rg, mutated,
                                           &leaves[i]);
        if (t == NULL) {
            /* Only a written input that requires grad asks the device for
             * ops (kv_lazy_input_build): the row says so. */
            if (rg && mutated && b->device.type != KV_DEVICE_CPU)
                st = kv_error_prefix(kv_last_error(),
                                     "%s: input %d: cannot make the non-leaf an in-place op needs in place of a leaf "
                                     "that requires grad (its history is recorded by ops on the device)",
                                     kv_op_name(op), i);
            else
                st = kv_error_prefix(kv_last_error(), "%s: input %d: cannot give it its lazy bits / grad",
                                     kv_op_name(op), i);
            kv_case_inputs_free(out);
            for (int j = 0; j <= i; j++) {
                kv_tensor_release(leaves[j]);
                leaves[j] = NULL;
            }
            return st;
        }
        kv_case_inputs_replace(out, i, t);
    }
    return KV_OK;
}

kv_status kv_lazy_leaf_grad(const kv_tensor *leaf, kv_tensor **out) {
    *out = NULL;
    kv_tensor *g = leaf ? kv_tensor_grad(leaf) : NULL;
    if (g == NULL) return KV_OK;
    const bool conj = kv_keyset_has(leaf->keys, KV_KEY_CONJUGATE), neg = kv_keyset_has(leaf->keys, KV_KEY_NEGATIVE);
    if (!conj && !neg) {
        kv_tensor_retain(g);
        *out = g;
        return KV_OK;
    }
    /* The leaf carries its bits (kv_lazy_input_build off the host): g is
     * the gradient with respect to its logical values. The stored values
     * are their conj and/or negation, so the gradient with respect to
     * them is g through ConjBackward and NegViewBackward: conj(g) and -g,
     * both exact, so it equals bitwise what the view chain gives. */
    kv_tensor *h = kv_backend_copy_to_host(g);
    kv_tls_keys ng = kv_no_grad_push();
    if (h != NULL && conj) {
        kv_tensor *c = kv_conj_physical(h);
        kv_tensor_release(h);
        h = c;
    }
    if (h != NULL && neg) {
        kv_tensor *n = kv_neg(h);
        kv_tensor_release(h);
        h = n;
    }
    kv_grad_mode_pop(ng);
    if (h == NULL)
        return kv_error_prefix(kv_last_error(), "the gradient of a leaf with lazy bits: cannot map it to its "
                                                "stored values on the host");
    *out = h;
    return KV_OK;
}
