/* Matrix products on oneDNN's matmul primitive: mm, bmm, addmm.
 *
 * f32 and bf16 (all operands of one dtype). oneDNN accumulates bf16
 * products in f32 and rounds once to bf16: well inside the table's
 * gamma_{K+1} bound in bf16's unit roundoff, and exact under fill=exact
 * (small integer sums are exact in f32). addmm is alpha as the output
 * scale and beta as a sum post-op over dst pre-filled with self broadcast
 * to (M, N): dst = alpha*(mat1 @ mat2) + beta*self. beta = 0 skips both
 * the fill and the post-op, so self's NaN/Inf are ignored as PyTorch
 * ignores them. Left out: integer dtypes (oneDNN's int8 matmul saturates
 * into s32/s8 where PyTorch wraps; i32/i64 have no matmul), f16 (no
 * oneDNN CPU matmul without AVX512-FP16, and not measured), and an empty
 * inner dimension (K = 0: oneDNN leaves dst unwritten). */
#include <stdlib.h>
#include <string.h>

#include "onednn/onednn.h"

/* One operand as oneDNN reads it: its own strides when one of the two
 * innermost is 1 (a plain or transposed matrix, oneDNN's GEMM layouts),
 * else a dense copy (sliced/strided in both, or broadcast). */
typedef struct mm_operand {
    int64_t strides[3];
    void *ptr;
    void *tmp; /* owned dense copy, or NULL */
} mm_operand;

static kv_status mm_operand_make(const char *op, const kv_tensor *t, mm_operand *o) {
    const int n = t->ndim;
    o->tmp = NULL;
    o->ptr = kv_dnnl_ptr(t);
    memcpy(o->strides, t->strides, sizeof(int64_t) * (size_t)n);
    const bool plain = (t->strides[n - 1] == 1 || t->strides[n - 2] == 1) && !kv_dnnl_has_broadcast_dim(t);
    if (plain) return KV_OK;
    const kv_host_api *h = kv_dnnl_host;
    const size_t nbytes = ((size_t)h->tensor_numel(t) * h->dtype_size(t->dtype) + 63u) & ~(size_t)63u;
    o->tmp = aligned_alloc(64, nbytes ? nbytes : 64);
    if (o->tmp == NULL) return h->error(KV_ERR_OOM, "%s: onednn: out of memory", op);
    int64_t s = 1;
    for (int d = n - 1; d >= 0; d--) {
        o->strides[d] = s;
        s *= t->sizes[d];
    }
    o->ptr = o->tmp;
    return kv_dnnl_copy_dense(op, t, o->tmp);
}

/* out = alpha * (a @ b) [+ beta * out], a (.., M, K), b (.., K, N). */
static kv_status mm_run(const char *op, const kv_tensor *a, const kv_tensor *b, kv_tensor *out, float alpha,
                        float beta) {
    const kv_host_api *h = kv_dnnl_host;
    dnnl_data_type_t dt;
    kv_dnnl_dtype(a->dtype, &dt);
    mm_operand oa, ob;
    kv_status st = mm_operand_make(op, a, &oa);
    ob.tmp = NULL;
    if (st == KV_OK) st = mm_operand_make(op, b, &ob);
    dnnl_memory_desc_t ma, mb, mo;
    if (st == KV_OK) st = kv_dnnl_md(op, a->sizes, oa.strides, a->ndim, dt, &ma);
    if (st == KV_OK) st = kv_dnnl_md(op, b->sizes, ob.strides, b->ndim, dt, &mb);
    if (st == KV_OK) st = kv_dnnl_md_of(op, out, dt, &mo);
    dnnl_matmul_desc_t md;
    if (st == KV_OK && dnnl_matmul_desc_init(&md, &ma, &mb, NULL, &mo) != dnnl_success)
        st = h->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for these layouts", op);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    if (st == KV_OK && (alpha != 1.0f || beta != 0.0f)) {
        dnnl_status_t ds = dnnl_primitive_attr_create(&attr);
        if (ds == dnnl_success && alpha != 1.0f) ds = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha);
        if (ds == dnnl_success && beta != 0.0f) {
            ds = dnnl_post_ops_create(&po);
            if (ds == dnnl_success) ds = dnnl_post_ops_append_sum(po, beta);
            if (ds == dnnl_success) ds = dnnl_primitive_attr_set_post_ops(attr, po);
        }
        if (ds != dnnl_success) st = kv_dnnl_fail(op, "matmul attributes", ds);
    }
    const kv_dnnl_arg args[3] = { { DNNL_ARG_SRC, &ma, oa.ptr },
                                  { DNNL_ARG_WEIGHTS, &mb, ob.ptr },
                                  { DNNL_ARG_DST, &mo, out->storage->data } };
    if (st == KV_OK) st = kv_dnnl_run(op, "matmul", &md, attr, args, 3);
    if (po != NULL) dnnl_post_ops_destroy(po);
    if (attr != NULL) dnnl_primitive_attr_destroy(attr);
    free(oa.tmp);
    free(ob.tmp);
    return st;
}

static bool mm_dtype_ok(const kv_tensor *a, const kv_tensor *b) {
    return a->dtype == b->dtype && (a->dtype == KV_F32 || a->dtype == KV_BF16) && kv_dnnl_on_device(a) &&
           kv_dnnl_on_device(b);
}

static kv_status mm_finish(const char *op, kv_stack *stack, const kv_tensor *a, const kv_tensor *b, kv_tensor *out) {
    const kv_host_api *h = kv_dnnl_host;
    if (out == NULL) return h->last_error();
    if (h->tensor_numel(out) > 0) {
        const kv_status st = mm_run(op, a, b, out, 1.0f, 0.0f);
        if (st != KV_OK) {
            h->tensor_release(out);
            return st;
        }
    }
    return kv_dnnl_return(stack, out);
}

static kv_status od_mm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!mm_dtype_ok(a, b) || a->ndim != 2 || b->ndim != 2 || a->sizes[1] != b->sizes[0])
        return kv_dnnl_decline(op, stack, "these operands (f32/bf16 matrices of one dtype only)");
    if (a->sizes[1] == 0) return kv_dnnl_decline(op, stack, "an empty inner dimension");
    const int64_t sizes[2] = { a->sizes[0], b->sizes[1] };
    return mm_finish("mm", stack, a, b, kv_dnnl_empty(sizes, 2, a->dtype));
}

static kv_status od_bmm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!mm_dtype_ok(a, b) || a->ndim != 3 || b->ndim != 3 || a->sizes[0] != b->sizes[0] ||
        a->sizes[2] != b->sizes[1])
        return kv_dnnl_decline(op, stack, "these operands (f32/bf16 batches of one dtype only)");
    if (a->sizes[2] == 0) return kv_dnnl_decline(op, stack, "an empty inner dimension");
    const int64_t sizes[3] = { a->sizes[0], a->sizes[1], b->sizes[2] };
    return mm_finish("bmm", stack, a, b, kv_dnnl_empty(sizes, 3, a->dtype));
}

static kv_status od_addmm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_dnnl_host;
    const char *name = "addmm";
    const kv_tensor *self = kv_arg_tensor(stack, 0), *a = kv_arg_tensor(stack, 1), *b = kv_arg_tensor(stack, 2);
    float beta, alpha;
    if (!mm_dtype_ok(a, b) || !mm_dtype_ok(self, a) || a->ndim != 2 || b->ndim != 2 || a->sizes[1] != b->sizes[0])
        return kv_dnnl_decline(op, stack, "these operands (f32/bf16 matrices of one dtype only)");
    if (!kv_dnnl_scalar_f32(kv_arg_scalar(stack, 3), &beta) || !kv_dnnl_scalar_f32(kv_arg_scalar(stack, 4), &alpha))
        return kv_dnnl_decline(op, stack, "a bool or complex beta/alpha");
    const int64_t sizes[2] = { a->sizes[0], b->sizes[1] };
    int64_t cs[2];
    if (!kv_dnnl_broadcast_strides(self, sizes, 2, cs)) return kv_dnnl_decline(op, stack, "a self that does not broadcast");
    if (a->sizes[1] == 0) return kv_dnnl_decline(op, stack, "an empty inner dimension");
    kv_tensor *out = kv_dnnl_empty(sizes, 2, a->dtype);
    if (out == NULL) return h->last_error();
    kv_status st = KV_OK;
    if (h->tensor_numel(out) > 0) {
        if (beta != 0.0f) {
            dnnl_memory_desc_t src, dst;
            st = kv_dnnl_md_raw(name, self->dtype, sizes, cs, 2, &src);
            if (st == KV_OK) st = kv_dnnl_md_raw(name, out->dtype, sizes, out->strides, 2, &dst);
            if (st == KV_OK) st = kv_dnnl_reorder(name, &src, kv_dnnl_ptr(self), &dst, out->storage->data);
        }
        if (st == KV_OK) st = mm_run(name, a, b, out, alpha, beta);
    }
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    return kv_dnnl_return(stack, out);
}

static const kv_dnnl_reg matmul_kernels[] = {
    { "mm", od_mm },
    { "bmm", od_bmm },
    { "addmm", od_addmm },
};

kv_status kv_dnnl_register_matmul(kv_key key) {
    return kv_dnnl_register_table(key, matmul_kernels, (int)(sizeof matmul_kernels / sizeof matmul_kernels[0]));
}
