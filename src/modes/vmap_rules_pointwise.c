/* Batching rules of the elementwise ops.
 *
 * Unary: the op runs on the physical tensor as it is; the batch dim stays
 * where it was (the result has the physical shape).
 *
 * Broadcasting (binary, where): batched operands get their batch dim moved
 * to the front and size-1 dims inserted after it up to the largest logical
 * rank R among the operands, so their physical shape is [B, 1.., s..] of
 * rank R + 1; unbatched operands stay as they are (rank <= R), so numpy
 * broadcasting lines the logical dims up from the right, exactly as the
 * per-sample op would, and the batch dim meets nothing but its own kind.
 *
 * Type promotion looks at rank (0-dim tensors rank below dimensioned
 * ones), and a logically 0-dim batched operand is physically 1-dim, so
 * when the promoted type of the physical operands differs from that of the
 * logical ones the rule declines and the fallback runs the op per sample
 * with the true logical ranks. */
#include <string.h>

#include "kv/ops.h"
#include "modes/vmap_internal.h"

static bool other_tensor_batched(const kv_stack *stack, int except, const kv_vmap_ctx *ctx) {
    for (int i = 0; i < stack->size; i++) {
        if (i == except) continue;
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_TENSOR && kv_vmap_info_at(v->v.tensor, ctx->level)) return true;
        for (int e = 0; v->tag == KV_IV_TENSOR_LIST && e < v->v.tensors.n; e++)
            if (kv_vmap_info_at(v->v.tensors.items[e], ctx->level)) return true;
    }
    return false;
}

kv_status kv_vmap_rule_unary(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = kv_vmap_info_at(kv_arg_tensor(stack, 0), ctx->level);
    if (bi == NULL || other_tensor_batched(stack, 0, ctx)) {
        *declined = true;
        return KV_OK;
    }
    kv_ivalue slots[KV_STACK_MAX];
    for (int i = 0; i < stack->size; i++) slots[i] = stack->slots[i];
    slots[0].v.tensor = bi->value;
    kv_tensor *r = kv_vmap_call_physical(op, slots, stack->size);
    if (r == NULL) return kv_vmap_failed(kv_op_name(op));
    return kv_vmap_return_wrapped(stack, r, bi->bdim, ctx);
}

/* where.self's condition selects, it does not take part in promotion. */
static bool promotes(const kv_op *op, int slot) {
    const kv_schema *s = kv_op_schema(op);
    return !(slot < s->nargs && strcmp(s->args[slot].name, "condition") == 0);
}

/* The physical operand of a batched tensor: batch dim first, padded with
 * size-1 dims to logical rank `rank`. */
static kv_tensor *padded(const struct kv_batched_info *bi, int logical_ndim, int rank) {
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL || logical_ndim == rank) return f;
    int64_t sizes[KV_MAX_DIMS + 1];
    int n = 0;
    sizes[n++] = f->sizes[0];
    for (int d = logical_ndim; d < rank; d++) sizes[n++] = 1;
    for (int d = 1; d < f->ndim; d++) sizes[n++] = f->sizes[d];
    if (n > KV_MAX_DIMS) {
        kv_tensor_release(f);
        kv_error(KV_ERR_INVALID_ARG, "vmap: broadcasting would need %d dims, at most %d are supported", n,
                 KV_MAX_DIMS);
        return NULL;
    }
    kv_tensor *p = kv_reshape(f, (kv_int_list){ sizes, n });
    kv_tensor_release(f);
    return p;
}

kv_status kv_vmap_rule_pointwise(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const int n = stack->size;
    int rank = 0;
    for (int i = 0; i < n; i++) {
        kv_tensor *t = kv_arg_tensor(stack, i);
        if (t && t->ndim > rank) rank = t->ndim;
    }
    if (rank + 1 > KV_MAX_DIMS) {
        *declined = true;
        return KV_OK;
    }
    kv_ivalue slots[KV_STACK_MAX];
    kv_tensor *owned[KV_STACK_MAX];
    const kv_tensor *logical[KV_STACK_MAX], *physical[KV_STACK_MAX];
    int nowned = 0, npromo = 0;
    kv_status st = KV_OK;
    for (int i = 0; i < n && st == KV_OK; i++) {
        slots[i] = stack->slots[i];
        kv_tensor *t = kv_arg_tensor(stack, i);
        if (t == NULL) continue;
        const struct kv_batched_info *bi = kv_vmap_info_at(t, ctx->level);
        if (bi != NULL) {
            kv_tensor *p = padded(bi, t->ndim, rank);
            if (p == NULL) {
                st = kv_vmap_failed(kv_op_name(op));
                break;
            }
            owned[nowned++] = p;
            slots[i].v.tensor = p;
        }
        if (promotes(op, i)) {
            logical[npromo] = t;
            physical[npromo] = slots[i].v.tensor;
            npromo++;
        }
    }
    if (st == KV_OK && npromo > 1 &&
        kv_result_type(logical, npromo, NULL, 0) != kv_result_type(physical, npromo, NULL, 0)) {
        for (int i = 0; i < nowned; i++) kv_tensor_release(owned[i]);
        *declined = true;
        return KV_OK;
    }
    kv_tensor *r = st == KV_OK ? kv_vmap_call_physical(op, slots, n) : NULL;
    if (st == KV_OK && r == NULL) st = kv_vmap_failed(kv_op_name(op));
    for (int i = 0; i < nowned; i++) kv_tensor_release(owned[i]);
    if (st != KV_OK) return st;
    return kv_vmap_return_wrapped(stack, r, 0, ctx);
}
