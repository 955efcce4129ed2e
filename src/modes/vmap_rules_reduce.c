/* Batching rules of the reductions and softmax: the batch dim goes first
 * and every logical dim argument is shifted by one; "all dims" (None or
 * []) means every LOGICAL dim, never the batch dim.
 *
 * A logically 0-dim input is physically [B]: reducing "dim 0" or "all
 * dims" of a 0-dim tensor reduces nothing (the value comes back, with the
 * op's dtype rule applied), so the physical input is viewed as [B, 1] and
 * dim 1 reduced without keepdim, which gives exactly that and the 0-dim
 * logical result (keepdim on a 0-dim tensor is still 0-dim).
 *
 * A dim out of range declines, so the per-sample fallback reports the op's
 * own error against the logical rank. */
#include "kv/ops.h"
#include "modes/vmap_internal.h"

static void decline(bool *declined) { *declined = true; }

/* The physical self for a reduction: batch dim first; [B, 1] for a
 * logically 0-dim self. */
static kv_tensor *reduce_input(const struct kv_batched_info *bi, int logical_ndim) {
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL || logical_ndim > 0) return f;
    kv_tensor *u = kv_unsqueeze(f, 1);
    kv_tensor_release(f);
    return u;
}

/* Calls op with slot 0 replaced by p (borrowed) and wraps its result. */
static kv_status finish(const kv_op *op, kv_stack *stack, kv_ivalue *slots, kv_tensor *p, const kv_vmap_ctx *ctx) {
    slots[0].v.tensor = p;
    kv_tensor *r = kv_vmap_call_physical(op, slots, stack->size);
    kv_tensor_release(p);
    if (r == NULL) return kv_vmap_failed(kv_op_name(op));
    return kv_vmap_return_wrapped(stack, r, 0, ctx);
}

static void copy_slots(kv_ivalue *slots, const kv_stack *stack) {
    for (int i = 0; i < stack->size; i++) slots[i] = stack->slots[i];
}

/* sum.dim_IntList, mean.dim (int[1]? dim), amax (int[1] dim): slot 1 the
 * dims, slot 2 keepdim. */
kv_status kv_vmap_rule_reduce_dims(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const struct kv_batched_info *bi = kv_vmap_info_at(self, ctx->level);
    if (bi == NULL) {
        decline(declined);
        return KV_OK;
    }
    const int r = self->ndim;
    const bool all = kv_arg_is_none(stack, 1) || kv_arg_ints(stack, 1).n == 0;
    int64_t dims[KV_MAX_DIMS];
    int nd = 0;
    if (!all) {
        kv_int_list given = kv_arg_ints(stack, 1);
        if (given.n > KV_MAX_DIMS || (r == 0 && given.n > 1)) {
            decline(declined);
            return KV_OK;
        }
        for (int i = 0; i < given.n; i++) {
            int d = kv_vmap_logical_dim(given.items[i], r);
            if (d < 0) {
                decline(declined);
                return KV_OK;
            }
            dims[nd++] = d + 1;
        }
    } else {
        for (int d = 0; d < r; d++) dims[nd++] = d + 1;
    }
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    if (r == 0) {
        dims[0] = 1;
        nd = 1;
        slots[2] = (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = false };
    }
    slots[1] = (kv_ivalue){ .tag = KV_IV_INT_LIST, .v.ints = { dims, nd } };
    kv_tensor *p = reduce_input(bi, r);
    if (p == NULL) return kv_vmap_failed(kv_op_name(op));
    return finish(op, stack, slots, p, ctx);
}

/* prod.dim_int (int dim) and argmax with a dim: slot 1 the dim, slot 2
 * keepdim. */
static kv_status reduce_one_dim(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined,
                                const struct kv_batched_info *bi, int64_t dim) {
    const int r = kv_arg_tensor(stack, 0)->ndim;
    const int d = kv_vmap_logical_dim(dim, r);
    if (d < 0) {
        decline(declined);
        return KV_OK;
    }
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1] = (kv_ivalue){ .tag = KV_IV_INT, .v.i = d + 1 };
    if (r == 0) slots[2] = (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = false };
    kv_tensor *p = reduce_input(bi, r);
    if (p == NULL) return kv_vmap_failed(kv_op_name(op));
    return finish(op, stack, slots, p, ctx);
}

kv_status kv_vmap_rule_reduce_dim(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = kv_vmap_info_at(kv_arg_tensor(stack, 0), ctx->level);
    if (bi == NULL) {
        decline(declined);
        return KV_OK;
    }
    return reduce_one_dim(op, stack, ctx, declined, bi, kv_arg_int(stack, 1));
}

/* argmax(self, int? dim, keepdim). With dim None the index is into the
 * flattened logical tensor: the physical one is viewed as [B, numel] and
 * reduced over dim 1; keepdim then gives all-ones logical dims. */
kv_status kv_vmap_rule_argmax(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const struct kv_batched_info *bi = kv_vmap_info_at(self, ctx->level);
    if (bi == NULL) {
        decline(declined);
        return KV_OK;
    }
    if (!kv_arg_is_none(stack, 1)) return reduce_one_dim(op, stack, ctx, declined, bi, kv_arg_int(stack, 1));
    const int r = self->ndim;
    const int64_t numel = kv_tensor_numel(self);
    if (numel == 0) { /* the op's own "empty" error, per sample */
        decline(declined);
        return KV_OK;
    }
    const bool keepdim = kv_arg_bool(stack, 2);
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL) return kv_vmap_failed(kv_op_name(op));
    int64_t flat[2] = { ctx->batch_size, numel };
    kv_tensor *p = kv_reshape(f, (kv_int_list){ flat, 2 });
    kv_tensor_release(f);
    if (p == NULL) return kv_vmap_failed(kv_op_name(op));
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[0].v.tensor = p;
    slots[1] = (kv_ivalue){ .tag = KV_IV_INT, .v.i = 1 };
    slots[2] = (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = false };
    kv_tensor *idx = kv_vmap_call_physical(op, slots, stack->size);
    kv_tensor_release(p);
    if (idx == NULL) return kv_vmap_failed(kv_op_name(op));
    if (keepdim && r > 0) {
        int64_t sizes[KV_MAX_DIMS];
        sizes[0] = ctx->batch_size;
        for (int d = 0; d < r; d++) sizes[d + 1] = 1;
        kv_tensor *k = kv_reshape(idx, (kv_int_list){ sizes, r + 1 });
        kv_tensor_release(idx);
        if (k == NULL) return kv_vmap_failed(kv_op_name(op));
        idx = k;
    }
    return kv_vmap_return_wrapped(stack, idx, 0, ctx);
}

/* _softmax / _log_softmax(self, int dim, bool half_to_float): the shape is
 * kept, so a 0-dim input's [B, 1] result is viewed back as [B]. */
kv_status kv_vmap_rule_softmax(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const struct kv_batched_info *bi = kv_vmap_info_at(self, ctx->level);
    const int r = self ? self->ndim : 0;
    const int d = kv_vmap_logical_dim(kv_arg_int(stack, 1), r);
    if (bi == NULL || d < 0) {
        decline(declined);
        return KV_OK;
    }
    kv_tensor *p = reduce_input(bi, r);
    if (p == NULL) return kv_vmap_failed(kv_op_name(op));
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[0].v.tensor = p;
    slots[1] = (kv_ivalue){ .tag = KV_IV_INT, .v.i = d + 1 };
    kv_tensor *out = kv_vmap_call_physical(op, slots, stack->size);
    kv_tensor_release(p);
    if (out == NULL) return kv_vmap_failed(kv_op_name(op));
    if (r == 0) {
        kv_tensor *s = kv_squeeze_dim(out, 1);
        kv_tensor_release(out);
        if (s == NULL) return kv_vmap_failed(kv_op_name(op));
        out = s;
    }
    return kv_vmap_return_wrapped(stack, out, 0, ctx);
}
