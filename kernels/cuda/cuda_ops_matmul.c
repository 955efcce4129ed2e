/* CUDA matrix products: mm, bmm, addmm. One thread per output element,
 * k ascending in f64 as kernels/ref/ref_matmul.c, whose checks these
 * mirror (rank and broadcast problems are KV_ERR_SHAPE, dtype problems
 * KV_ERR_DTYPE, bad beta/alpha KV_ERR_INVALID_ARG). f32/f64. */
#include <string.h>

#include "cuda/cuda_shim.h"
#include "ref/ref_shared.h"

static kv_status mm_check_rank(const char *op, const char *arg, const kv_tensor *t, int ndim) {
    if (t->ndim == ndim) return KV_OK;
    char buf[KV_CUDA_SHAPE_BUF];
    return kv_cuda_host->error(KV_ERR_SHAPE, "%s: argument '%s': expected a %d-D tensor, got a %d-D tensor of shape %s",
                               op, arg, ndim, t->ndim, kv_cuda_shape(t->sizes, t->ndim, buf, sizeof buf));
}

static kv_status mm_check_dtypes(const char *op, const kv_tensor *a, const kv_tensor *b) {
    const kv_host_api *h = kv_cuda_host;
    if (a->dtype != b->dtype)
        return h->error(KV_ERR_DTYPE, "%s: argument 'mat2': expected m1 and m2 to have the same dtype, but got: %s != %s",
                        op, h->dtype_name(a->dtype), h->dtype_name(b->dtype));
    if (a->dtype == KV_BOOL) return h->error(KV_ERR_DTYPE, "%s: argument 'self': dtype bool is not supported", op);
    return KV_OK;
}

static kv_status mm_check_inner(const char *op, const kv_tensor *a, const kv_tensor *b, int da, int db) {
    if (a->sizes[da] == b->sizes[db]) return KV_OK;
    char sa[KV_CUDA_SHAPE_BUF], sb[KV_CUDA_SHAPE_BUF];
    return kv_cuda_host->error(KV_ERR_SHAPE, "%s: argument 'mat2': mat1 and mat2 shapes cannot be multiplied (%s and %s)",
                               op, kv_cuda_shape(a->sizes, a->ndim, sa, sizeof sa),
                               kv_cuda_shape(b->sizes, b->ndim, sb, sizeof sb));
}

/* beta/alpha as the reference takes them (mm_scalar). */
static kv_status mm_scalar(const char *op, const char *arg, kv_dtype dt, kv_scalar s, double *out) {
    const kv_host_api *h = kv_cuda_host;
    const bool integral = dt <= KV_I64, complex = dt == KV_C64 || dt == KV_C128;
    if (integral && (s.kind == KV_SCALAR_DOUBLE || s.kind == KV_SCALAR_COMPLEX))
        return h->error(KV_ERR_INVALID_ARG, "%s: argument '%s': for integral input tensors, %s must not be a floating "
                                            "point number", op, arg, arg);
    if (!complex && s.kind == KV_SCALAR_COMPLEX && s.v.c.im != 0.0)
        return h->error(KV_ERR_INVALID_ARG, "%s: argument '%s': a complex value cannot be used with a real (%s) tensor",
                        op, arg, h->dtype_name(dt));
    *out = h->scalar_to_double(s);
    return KV_OK;
}

/* The product a @ b (2-d, or 3-d batched: the leading dim is the batch)
 * as kernel arguments: shapes, device addresses and element strides. The
 * caller adds addmm's self. */
static kvc_mm_args mm_args_of(int code, const kv_tensor *a, const kv_tensor *b) {
    const int o = a->ndim - 2; /* 1 when batched */
    kvc_mm_args m;
    memset(&m, 0, sizeof m);
    m.dtype = code;
    m.batch = o ? a->sizes[0] : 1;
    m.n = a->sizes[o];
    m.k = a->sizes[o + 1];
    m.m = b->sizes[o + 1];
    m.a = a->storage->data;
    m.a_off = a->offset;
    m.as_b = o ? a->strides[0] : 0;
    m.as0 = a->strides[o];
    m.as1 = a->strides[o + 1];
    m.b = b->storage->data;
    m.b_off = b->offset;
    m.bs_b = o ? b->strides[0] : 0;
    m.bs0 = b->strides[o];
    m.bs1 = b->strides[o + 1];
    return m;
}

static kv_status mm_launch(const char *op, kvc_mm_args *a, kv_tensor *out, kv_stack *stack) {
    a->out = out->storage->data;
    if (kvc_mm(a) != 0) {
        kv_cuda_host->tensor_release(out);
        return kv_cuda_device_error(op);
    }
    return kv_cuda_return(stack, out);
}

static kv_status cuda_mm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    static const char *const name = "mm";
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_status st = mm_check_rank(name, "self", a, 2);
    if (st == KV_OK) st = mm_check_rank(name, "mat2", b, 2);
    if (st == KV_OK) st = mm_check_dtypes(name, a, b);
    if (st == KV_OK) st = mm_check_inner(name, a, b, 1, 0);
    if (st != KV_OK) return st;
    const int code = kv_cuda_dtype_code(a->dtype);
    if (code < 0) return kv_cuda_decline(name, "dtype %s", kv_cuda_host->dtype_name(a->dtype));
    const int64_t sizes[2] = { a->sizes[0], b->sizes[1] };
    kv_tensor *out = kv_cuda_empty(sizes, 2, a->dtype);
    if (out == NULL) return kv_cuda_host->last_error();
    kvc_mm_args m = mm_args_of(code, a, b);
    return mm_launch(name, &m, out, stack);
}

static kv_status cuda_bmm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "bmm";
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_status st = mm_check_rank(name, "self", a, 3);
    if (st == KV_OK) st = mm_check_rank(name, "mat2", b, 3);
    if (st == KV_OK) st = mm_check_dtypes(name, a, b);
    if (st != KV_OK) return st;
    if (a->sizes[0] != b->sizes[0])
        return h->error(KV_ERR_SHAPE, "%s: argument 'mat2': batch1 and batch2 must have the same number of batches", name);
    st = mm_check_inner(name, a, b, 2, 1);
    if (st != KV_OK) return st;
    const int code = kv_cuda_dtype_code(a->dtype);
    if (code < 0) return kv_cuda_decline(name, "dtype %s", h->dtype_name(a->dtype));
    const int64_t sizes[3] = { a->sizes[0], a->sizes[1], b->sizes[2] };
    kv_tensor *out = kv_cuda_empty(sizes, 3, a->dtype);
    if (out == NULL) return h->last_error();
    kvc_mm_args m = mm_args_of(code, a, b);
    return mm_launch(name, &m, out, stack);
}

static kv_status cuda_addmm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "addmm";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_tensor *a = kv_arg_tensor(stack, 1), *b = kv_arg_tensor(stack, 2);
    kv_status st = mm_check_rank(name, "mat1", a, 2);
    if (st == KV_OK) st = mm_check_rank(name, "mat2", b, 2);
    if (st == KV_OK) st = mm_check_dtypes(name, a, b);
    if (st == KV_OK && self->dtype != a->dtype)
        st = h->error(KV_ERR_DTYPE, "%s: argument 'self': self and mat2 must have the same dtype, but got %s and %s", name,
                      h->dtype_name(self->dtype), h->dtype_name(a->dtype));
    if (st == KV_OK) st = mm_check_inner(name, a, b, 1, 0);
    if (st != KV_OK) return st;
    const int64_t n = a->sizes[0], m = b->sizes[1];
    int64_t ss[2];
    if (!kv_ref_addmm_self_strides(self, n, m, ss)) {
        char s1[KV_CUDA_SHAPE_BUF], s2[KV_CUDA_SHAPE_BUF];
        const int64_t want[2] = { n, m };
        return h->error(KV_ERR_SHAPE, "%s: argument 'self': shape %s does not broadcast to %s", name,
                        kv_cuda_shape(self->sizes, self->ndim, s1, sizeof s1), kv_cuda_shape(want, 2, s2, sizeof s2));
    }
    double beta, alpha;
    st = mm_scalar(name, "beta", a->dtype, kv_arg_scalar(stack, 3), &beta);
    if (st == KV_OK) st = mm_scalar(name, "alpha", a->dtype, kv_arg_scalar(stack, 4), &alpha);
    if (st != KV_OK) return st;
    const int code = kv_cuda_dtype_code(a->dtype);
    if (code < 0) return kv_cuda_decline(name, "dtype %s", h->dtype_name(a->dtype));
    kv_tensor *tmp = NULL;
    kv_tensor *s = kv_cuda_operand(self, &tmp);
    if (s == NULL) return h->last_error();
    const int64_t sizes[2] = { n, m };
    kv_tensor *out = kv_cuda_empty(sizes, 2, a->dtype);
    if (out == NULL) {
        h->tensor_release(tmp);
        return h->last_error();
    }
    kvc_mm_args j = mm_args_of(code, a, b);
    j.self = s->storage->data;
    j.s_off = s->offset;
    j.ss0 = ss[0];
    j.ss1 = ss[1];
    j.use_self = beta != 0.0;
    j.scale = 1;
    j.beta = beta;
    j.alpha = alpha;
    st = mm_launch(name, &j, out, stack);
    h->tensor_release(tmp);
    return st;
}

kv_status kv_cuda_register_matmul(kv_key key) {
    kv_status st = kv_cuda_host->register_kernel("mm", key, cuda_mm);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("bmm", key, cuda_bmm);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("addmm", key, cuda_addmm);
    return st;
}
