/* Batching rules of mm and bmm: one matrix product on reshaped physical
 * tensors instead of one per sample.
 *
 * Each output element of the reference mm/bmm is the sum over k in
 * ascending order of a[i][k] * b[k][j], whatever the other dims are, so
 * folding the batch into the rows (a batched), into the columns (b
 * batched) or into bmm's batch (both) gives the per-sample values bit for
 * bit:
 *   mm,  a [B,n,k] only:   [B*n,k] @ [k,m]            -> [B,n,m]   (bdim 0)
 *   mm,  b [k,B,m] only:   [n,k] @ [k,B*m]            -> [n,B,m]   (bdim 1)
 *   mm,  both:             bmm([B,n,k], [B,k,m])      -> [B,n,m]   (bdim 0)
 *   bmm, a [b,B,n,k] only: bmm([b,B*n,k], [b,k,m])    -> [b,B,n,m] (bdim 1)
 *   bmm, b [b,k,B,m] only: bmm([b,n,k], [b,k,B*m])    -> [b,n,B,m] (bdim 2)
 *   bmm, both:             bmm([B*b,n,k], [B*b,k,m])  -> [B,b,n,m] (bdim 0)
 * Logical ranks, inner sizes and dtypes are checked first; when they are
 * wrong the rule declines and the per-sample op reports its own error. */
#include "kv/ops.h"
#include "modes/vmap_internal.h"

static bool matmul_ok(const kv_tensor *a, const kv_tensor *b, int rank) {
    if (a == NULL || b == NULL || a->ndim != rank || b->ndim != rank) return false;
    if (a->dtype != b->dtype || a->dtype == KV_BOOL) return false;
    if (rank == 3 && a->sizes[0] != b->sizes[0]) return false;
    return a->sizes[rank - 1] == b->sizes[rank - 2];
}

/* The physical tensor with its batch dim at `at`, then reshaped. */
static kv_tensor *arrange(const struct kv_batched_info *bi, int64_t at, const int64_t *sizes, int n) {
    kv_tensor *m = kv_vmap_movedim(bi->value, bi->bdim, at);
    if (m == NULL) return NULL;
    kv_tensor *r = kv_reshape(m, (kv_int_list){ sizes, n });
    kv_tensor_release(m);
    return r;
}

/* Reshapes the product (reference taken over) and makes it the return. */
static kv_status finish(kv_stack *stack, kv_tensor *prod, const int64_t *sizes, int n, int64_t bdim,
                        const kv_vmap_ctx *ctx, const char *op) {
    if (prod == NULL) return kv_vmap_failed(op);
    kv_tensor *r = kv_reshape(prod, (kv_int_list){ sizes, n });
    kv_tensor_release(prod);
    if (r == NULL) return kv_vmap_failed(op);
    return kv_vmap_return_wrapped(stack, r, bdim, ctx);
}

kv_status kv_vmap_rule_mm(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!matmul_ok(a, b, 2)) {
        *declined = true;
        return KV_OK;
    }
    const struct kv_batched_info *ia = kv_vmap_info_at(a, ctx->level), *ib = kv_vmap_info_at(b, ctx->level);
    if (ia == NULL && ib == NULL) {
        *declined = true;
        return KV_OK;
    }
    const char *name = kv_op_name(op);
    const int64_t B = ctx->batch_size, n = a->sizes[0], k = a->sizes[1], m = b->sizes[1];
    if (ia && ib) {
        kv_tensor *pa = kv_vmap_front(ia);
        kv_tensor *pb = pa ? kv_vmap_front(ib) : NULL;
        kv_tensor *prod = pb ? kv_bmm(pa, pb) : NULL;
        kv_tensor_release(pa);
        kv_tensor_release(pb);
        if (prod == NULL) return kv_vmap_failed(name);
        return kv_vmap_return_wrapped(stack, prod, 0, ctx);
    }
    if (ia) {
        const int64_t rows[2] = { B * n, k }, out[3] = { B, n, m };
        kv_tensor *pa = arrange(ia, 0, rows, 2);
        if (pa == NULL) return kv_vmap_failed(name);
        kv_tensor *prod = kv_mm(pa, b);
        kv_tensor_release(pa);
        return finish(stack, prod, out, 3, 0, ctx, name);
    }
    const int64_t cols[2] = { k, B * m }, out[3] = { n, B, m };
    kv_tensor *pb = arrange(ib, 1, cols, 2);
    if (pb == NULL) return kv_vmap_failed(name);
    kv_tensor *prod = kv_mm(a, pb);
    kv_tensor_release(pb);
    return finish(stack, prod, out, 3, 1, ctx, name);
}

kv_status kv_vmap_rule_bmm(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!matmul_ok(a, b, 3)) {
        *declined = true;
        return KV_OK;
    }
    const struct kv_batched_info *ia = kv_vmap_info_at(a, ctx->level), *ib = kv_vmap_info_at(b, ctx->level);
    if (ia == NULL && ib == NULL) {
        *declined = true;
        return KV_OK;
    }
    const char *name = kv_op_name(op);
    const int64_t B = ctx->batch_size, nb = a->sizes[0], n = a->sizes[1], k = a->sizes[2], m = b->sizes[2];
    if (ia && ib) {
        const int64_t sa[3] = { B * nb, n, k }, sb[3] = { B * nb, k, m }, out[4] = { B, nb, n, m };
        kv_tensor *pa = arrange(ia, 0, sa, 3);
        kv_tensor *pb = pa ? arrange(ib, 0, sb, 3) : NULL;
        kv_tensor *prod = pb ? kv_bmm(pa, pb) : NULL;
        kv_tensor_release(pa);
        kv_tensor_release(pb);
        return finish(stack, prod, out, 4, 0, ctx, name);
    }
    if (ia) {
        const int64_t sa[3] = { nb, B * n, k }, out[4] = { nb, B, n, m };
        kv_tensor *pa = arrange(ia, 1, sa, 3);
        if (pa == NULL) return kv_vmap_failed(name);
        kv_tensor *prod = kv_bmm(pa, b);
        kv_tensor_release(pa);
        return finish(stack, prod, out, 4, 1, ctx, name);
    }
    const int64_t sb[3] = { nb, k, B * m }, out[4] = { nb, n, B, m };
    kv_tensor *pb = arrange(ib, 2, sb, 3);
    if (pb == NULL) return kv_vmap_failed(name);
    kv_tensor *prod = kv_bmm(a, pb);
    kv_tensor_release(pb);
    return finish(stack, prod, out, 4, 2, ctx, name);
}
