/* Batched wrappers: making and unmaking them, their record, and the scan
 * that finds a call's level and batch size.
 *
 * Why the record lives on kv_tensor.batched (one pointer at the end of the
 * struct) rather than in a side table keyed by the wrapper pointer: the
 * record must go exactly when the wrapper does, and only core's release
 * knows that moment (a freed pointer may be reused by the next tensor, so
 * a side table would need the same hook anyway). */
#include <inttypes.h>
#include <stdlib.h>

#include "kv/ops.h"
#include "modes/vmap_internal.h"

void kv_vmap_batched_free(struct kv_batched_info *bi) {
    kv_tensor_release(bi->value);
    free(bi);
}

kv_status kv_vmap_failed(const char *op) {
    kv_status st = kv_last_error();
    if (st == KV_OK) st = kv_error(KV_ERR_INTERNAL, "%s: vmap: a call failed without setting an error", op);
    return st;
}

kv_tensor *kv_vmap_wrap_owned(kv_tensor *physical, int64_t bdim, int level) {
    if (physical == NULL) return NULL;
    if (physical->ndim < 1 || bdim < 0 || bdim >= physical->ndim) {
        kv_error(KV_ERR_INTERNAL, "vmap: wrap: batch dim %" PRId64 " of a %d-dim physical tensor", bdim,
                 physical->ndim);
        kv_tensor_release(physical);
        return NULL;
    }
    struct kv_batched_info *bi = malloc(sizeof *bi);
    if (bi == NULL) {
        kv_error(KV_ERR_OOM, "vmap: out of host memory for a batched tensor");
        kv_tensor_release(physical);
        return NULL;
    }
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < physical->ndim; d++) {
        if (d == bdim) continue;
        sizes[n] = physical->sizes[d];
        strides[n] = physical->strides[d];
        n++;
    }
    /* A view of sample 0: the wrapper keeps the physical storage alive and
     * has the logical geometry that promotion, shape checks and the
     * runner read, while kernels never reach it as a plain tensor. */
    kv_tensor *w = kv_tensor_view(physical, sizes, strides, n, physical->offset);
    if (w == NULL) {
        free(bi);
        kv_tensor_release(physical);
        return NULL;
    }
    bi->value = physical;
    bi->bdim = bdim;
    bi->level = level;
    w->keys = kv_keyset_add(w->keys, KV_KEY_BATCHED);
    w->batched = bi;
    return w;
}

kv_tensor *kv_vmap_movedim(kv_tensor *t, int64_t from, int64_t to) {
    if (from == to) {
        kv_tensor_retain(t);
        return t;
    }
    int64_t perm[KV_MAX_DIMS];
    int k = 0;
    for (int j = 0; j < t->ndim; j++) {
        if (j == to) {
            perm[j] = from;
            continue;
        }
        if (k == from) k++;
        perm[j] = k++;
    }
    return kv_permute(t, (kv_int_list){ perm, t->ndim });
}

kv_tensor *kv_vmap_front(const struct kv_batched_info *bi) { return kv_vmap_movedim(bi->value, bi->bdim, 0); }

kv_tensor *kv_vmap_add_batch_dim(kv_tensor *physical, int64_t bdim, int level) {
    if (kv_dispatch_init() != KV_OK) return NULL;
    if (physical == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "vmap: add_batch_dim: argument 'physical': is NULL");
        return NULL;
    }
    if (level < 1) {
        kv_error(KV_ERR_INVALID_ARG, "vmap: add_batch_dim: argument 'level': %d, expected a level >= 1", level);
        return NULL;
    }
    if (physical->ndim == 0) {
        kv_error(KV_ERR_DIM, "vmap: add_batch_dim: argument 'bdim': a 0-dim tensor has no dim %" PRId64
                             " to map over", bdim);
        return NULL;
    }
    if (bdim < -physical->ndim || bdim >= physical->ndim) {
        kv_error(KV_ERR_DIM,
                 "vmap: add_batch_dim: argument 'bdim': Got in_dim=%" PRId64
                 " for an input, but that input is a Tensor of dimensionality %d so expected in_dim to satisfy "
                 "-%d <= in_dim < %d",
                 bdim, physical->ndim, physical->ndim, physical->ndim);
        return NULL;
    }
    if (bdim < 0) bdim += physical->ndim;
    if (physical->batched == NULL && kv_keyset_has(physical->keys, KV_KEY_BATCHED)) {
        kv_error(KV_ERR_INVALID_ARG,
                 "vmap: add_batch_dim: argument 'physical': carries the Batched key but is not a batched tensor "
                 "(a view or alias of one made outside vmap)");
        return NULL;
    }
    if (physical->batched != NULL && physical->batched->level >= level) {
        kv_error(KV_ERR_INVALID_ARG,
                 "vmap: add_batch_dim: argument 'level': %d, but the physical tensor is already batched at level %d "
                 "(nested levels must increase inwards)",
                 level, physical->batched->level);
        return NULL;
    }
    kv_tensor_retain(physical);
    return kv_vmap_wrap_owned(physical, bdim, level);
}

static kv_status wrap_out_dim(int64_t *out_dim, int ndim, const char *what) {
    if (*out_dim < -ndim || *out_dim >= ndim)
        return kv_error(KV_ERR_DIM,
                        "vmap: %s: argument 'out_dim': %" PRId64
                        " is out of range for a result of dimensionality %d with the batch dim (expected -%d <= "
                        "out_dim < %d)",
                        what, *out_dim, ndim, ndim, ndim);
    if (*out_dim < 0) *out_dim += ndim;
    return KV_OK;
}

kv_tensor *kv_vmap_remove_batch_dim(kv_tensor *wrapper, int level, int64_t out_dim) {
    if (wrapper == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "vmap: remove_batch_dim: argument 'self': is NULL");
        return NULL;
    }
    const struct kv_batched_info *bi = wrapper->batched;
    if (bi == NULL || bi->level != level) {
        if (bi == NULL)
            kv_error(KV_ERR_INVALID_ARG,
                     "vmap: remove_batch_dim: argument 'level': the tensor is not batched (asked for level %d)", level);
        else
            kv_error(KV_ERR_INVALID_ARG,
                     "vmap: remove_batch_dim: argument 'level': the tensor is batched at level %d, not at level %d",
                     bi->level, level);
        return NULL;
    }
    if (wrap_out_dim(&out_dim, bi->value->ndim, "remove_batch_dim") != KV_OK) return NULL;
    return kv_vmap_movedim(bi->value, bi->bdim, out_dim);
}

kv_tensor *kv_vmap_unwrap_result(kv_tensor *t, int level, int64_t batch_size, int64_t out_dim) {
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "vmap: unwrap_result: argument 'self': is NULL");
        return NULL;
    }
    if (t->batched != NULL && t->batched->level == level) return kv_vmap_remove_batch_dim(t, level, out_dim);
    if (t->batched != NULL && t->batched->level > level) {
        kv_error(KV_ERR_INVALID_ARG,
                 "vmap: unwrap_result: argument 'level': the tensor is batched at level %d, inside level %d "
                 "(a batched tensor escaped its vmap)",
                 t->batched->level, level);
        return NULL;
    }
    if (batch_size < 0) {
        kv_error(KV_ERR_INVALID_ARG, "vmap: unwrap_result: argument 'batch_size': %" PRId64 " is negative",
                 batch_size);
        return NULL;
    }
    if (wrap_out_dim(&out_dim, t->ndim + 1, "unwrap_result") != KV_OK) return NULL;
    /* A result that does not depend on the batch: every sample sees the
     * same value, so broadcast it (PyTorch expands too). */
    kv_tensor *u = kv_unsqueeze(t, out_dim);
    if (u == NULL) return NULL;
    int64_t sizes[KV_MAX_DIMS];
    for (int d = 0; d < u->ndim; d++) sizes[d] = d == out_dim ? batch_size : u->sizes[d];
    kv_tensor *e = kv_expand(u, (kv_int_list){ sizes, u->ndim }, false);
    kv_tensor_release(u);
    return e;
}

bool kv_vmap_is_batched(const kv_tensor *t) { return t != NULL && t->batched != NULL; }

kv_status kv_vmap_batch_info(const kv_tensor *t, kv_tensor **physical, int64_t *bdim, int *level) {
    if (t == NULL || t->batched == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "vmap: batch_info: argument 'self': %s",
                        t == NULL ? "is NULL" : "is not a batched tensor");
    if (physical) *physical = t->batched->value;
    if (bdim) *bdim = t->batched->bdim;
    if (level) *level = t->batched->level;
    return KV_OK;
}

/* ---- the scan ---- */

kv_status kv_vmap_size_mismatch(const char *op, int64_t a, int64_t b) {
    return kv_error(KV_ERR_SHAPE,
                    "%s: vmap: Expected all tensors to have the same size in the mapped dimension, got sizes %" PRId64
                    " and %" PRId64 " for the mapped dimension",
                    op, a, b);
}

static const char *slot_name(const kv_op *op, int i) {
    const kv_schema *s = kv_op_schema(op);
    return (s && i < s->nargs) ? s->args[i].name : "?";
}

/* First pass: the level; second pass (level known): the batch size. */
static kv_status scan_tensor(const kv_op *op, int slot, const kv_tensor *t, bool sizes_pass, kv_vmap_ctx *ctx) {
    if (!sizes_pass) {
        if (t->batched == NULL) {
            if (kv_keyset_has(t->keys, KV_KEY_BATCHED))
                return kv_error(KV_ERR_INTERNAL,
                                "%s: vmap: argument '%s': carries the Batched key but is not a batched tensor (a "
                                "view or alias of one made outside vmap)",
                                kv_op_name(op), slot_name(op, slot));
            return KV_OK;
        }
        if (t->batched->level > ctx->level) ctx->level = t->batched->level;
        return KV_OK;
    }
    const struct kv_batched_info *bi = kv_vmap_info_at(t, ctx->level);
    if (bi == NULL) return KV_OK;
    const int64_t size = bi->value->sizes[bi->bdim];
    if (ctx->batch_size < 0) ctx->batch_size = size;
    else if (ctx->batch_size != size) return kv_vmap_size_mismatch(kv_op_name(op), ctx->batch_size, size);
    return KV_OK;
}

kv_status kv_vmap_scan_args(const kv_op *op, const kv_stack *stack, kv_vmap_ctx *ctx) {
    ctx->level = 0;
    ctx->batch_size = -1;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && ctx->level == 0) break;
        for (int i = 0; i < stack->size; i++) {
            const kv_ivalue *v = &stack->slots[i];
            kv_status st = KV_OK;
            if (v->tag == KV_IV_TENSOR) {
                st = scan_tensor(op, i, v->v.tensor, pass == 1, ctx);
            } else if (v->tag == KV_IV_TENSOR_LIST) {
                for (int e = 0; e < v->v.tensors.n && st == KV_OK; e++)
                    st = scan_tensor(op, i, v->v.tensors.items[e], pass == 1, ctx);
            }
            if (st != KV_OK) return st;
        }
    }
    return KV_OK;
}
