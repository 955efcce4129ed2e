/* native_layer_norm on oneDNN's layer_normalization primitive
 * (forward_training, for its mean and variance; rstd = (var + eps)^-0.5 by
 * two eltwise passes).
 *
 * f32 and bf16 (oneDNN computes bf16 in f32 and rounds once: inside the
 * table's NORM bound). The primitive has one descriptor for source and
 * destination in 2.6, so a strided input is first copied into a dense
 * buffer. Left out: f16 (not measured; no CPU kernel without
 * AVX512-FP16), weight/bias of another dtype than the input (the
 * reference's "mixed" case), zero-size inputs, native_group_norm (oneDNN
 * 2.6 has no group normalization primitive).
 *
 * _softmax and _log_softmax are not here although oneDNN has primitives
 * for them (kernels/onednn/README.md): its softmax takes the slice maximum
 * without NaN, so a slice holding a NaN gives 0 (log: -Inf) where PyTorch
 * gives NaN; and logsoftmax's log is off by up to 3.3e-6 absolute (log of
 * a one-element slice is 1.4e-6, not 0), beyond the table's bound. */
#include <stdlib.h>
#include <string.h>

#include "onednn/onednn.h"

static bool norm_dtype_ok(const kv_tensor *t) {
    return t != NULL && kv_dnnl_on_device(t) && (t->dtype == KV_F32 || t->dtype == KV_BF16);
}

static void *norm_alloc(size_t nbytes) { return aligned_alloc(64, (nbytes + 63u) & ~(size_t)63u); }

/* ---- native_layer_norm ---- */

/* A weight/bias as the dense f32 vector oneDNN's scale/shift take (a
 * reorder: a copy for f32, an exact widening for bf16). */
static kv_status ln_param(const char *name, const kv_tensor *p, float **out) {
    const kv_host_api *h = kv_dnnl_host;
    *out = NULL;
    if (p == NULL) return KV_OK;
    *out = norm_alloc((size_t)h->tensor_numel(p) * sizeof(float));
    if (*out == NULL) return h->error(KV_ERR_OOM, "%s: onednn: out of memory", name);
    dnnl_data_type_t dt;
    kv_dnnl_dtype(p->dtype, &dt);
    dnnl_memory_desc_t smd, dmd;
    kv_status st = kv_dnnl_md_of(name, p, dt, &smd);
    if (st == KV_OK) st = kv_dnnl_md_dense(name, p->sizes, p->ndim, dnnl_f32, &dmd);
    if (st == KV_OK) st = kv_dnnl_reorder(name, &smd, kv_dnnl_ptr(p), &dmd, *out);
    return st;
}

/* v <- (v + eps)^-0.5 in place: rstd from oneDNN's variance, two eltwise
 * passes (linear, then pow with beta = -0.5, 1 ulp). */
static kv_status ln_rstd(const char *name, float *v, int64_t n, double eps) {
    dnnl_memory_desc_t md;
    kv_status st = kv_dnnl_md_dense(name, &n, 1, dnnl_f32, &md);
    const kv_dnnl_arg args[2] = { { DNNL_ARG_SRC, &md, v }, { DNNL_ARG_DST, &md, v } };
    dnnl_eltwise_desc_t ed;
    dnnl_status_t ds = dnnl_success;
    if (st == KV_OK)
        ds = dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, dnnl_eltwise_linear, &md, 1.f, (float)eps);
    if (st == KV_OK && ds == dnnl_success) st = kv_dnnl_run(name, "eltwise_linear", &ed, NULL, args, 2);
    if (st == KV_OK && ds == dnnl_success)
        ds = dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, dnnl_eltwise_pow, &md, 1.f, -0.5f);
    if (st == KV_OK && ds == dnnl_success) st = kv_dnnl_run(name, "eltwise_pow", &ed, NULL, args, 2);
    if (st == KV_OK && ds != dnnl_success) st = kv_dnnl_fail(name, "dnnl_eltwise_forward_desc_init", ds);
    return st;
}

/* A statistic (n f32 values) into a result tensor of dtype dt. */
static kv_status ln_store(const char *name, const float *v, int64_t n, kv_tensor *t) {
    dnnl_data_type_t dt;
    kv_dnnl_dtype(t->dtype, &dt);
    dnnl_memory_desc_t smd, dmd;
    kv_status st = kv_dnnl_md_dense(name, &n, 1, dnnl_f32, &smd);
    if (st == KV_OK) st = kv_dnnl_md_dense(name, &n, 1, dt, &dmd);
    if (st == KV_OK) st = kv_dnnl_reorder(name, &smd, (void *)v, &dmd, t->storage->data);
    return st;
}

static bool ln_param_ok(const kv_tensor *p, const kv_tensor *x, kv_int_list ns) {
    if (p == NULL) return true;
    if (!norm_dtype_ok(p) || p->dtype != x->dtype || p->ndim != ns.n) return false;
    return memcmp(p->sizes, ns.items, sizeof(int64_t) * (size_t)ns.n) == 0;
}

static kv_status od_layer_norm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_dnnl_host;
    const char *name = "native_layer_norm";
    kv_tensor *x = kv_arg_tensor(stack, 0);
    const kv_int_list ns = kv_arg_ints(stack, 1);
    const kv_tensor *w = kv_arg_is_none(stack, 2) ? NULL : kv_arg_tensor(stack, 2);
    const kv_tensor *b = kv_arg_is_none(stack, 3) ? NULL : kv_arg_tensor(stack, 3);
    const double eps = kv_arg_double(stack, 4);
    const int axis = x ? x->ndim - ns.n : -1;
    bool ok = norm_dtype_ok(x) && ns.n >= 1 && axis >= 0 && ln_param_ok(w, x, ns) && ln_param_ok(b, x, ns);
    for (int i = 0; ok && i < ns.n; i++) ok = x->sizes[axis + i] == ns.items[i];
    if (!ok) return kv_dnnl_decline(op, stack, "these arguments (f32/bf16, weight and bias of the input's dtype)");
    if (h->tensor_numel(x) == 0) return kv_dnnl_decline(op, stack, "a zero-size input");
    /* The variance is a mean of squares in f32: |x| past 2^63 squares
     * past FLT_MAX (rstd 0, outputs 0) where the reference, in f64, gives
     * +-1. */
    if (kv_dnnl_max_finite_abs(x) >= 0x1p63)
        return kv_dnnl_decline(op, stack, "inputs whose squares overflow f32 (|x| >= 2^63)");
    int64_t rows = 1, cols = 1, stat_sizes[KV_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) rows *= x->sizes[d];
        else cols *= x->sizes[d];
        stat_sizes[d] = d < axis ? x->sizes[d] : 1;
    }
    dnnl_data_type_t dt;
    kv_dnnl_dtype(x->dtype, &dt);
    kv_tensor *out = kv_dnnl_empty(x->sizes, x->ndim, x->dtype);
    kv_tensor *mean = out ? kv_dnnl_empty(stat_sizes, x->ndim, x->dtype) : NULL;
    kv_tensor *rstd = mean ? kv_dnnl_empty(stat_sizes, x->ndim, x->dtype) : NULL;
    float *mv = norm_alloc((size_t)rows * sizeof(float)), *vv = norm_alloc((size_t)rows * sizeof(float));
    float *wv = NULL, *bv = NULL;
    void *dense = NULL;
    kv_status st = KV_OK;
    if (rstd == NULL) st = h->last_error();
    else if (mv == NULL || vv == NULL) st = h->error(KV_ERR_OOM, "%s: onednn: out of memory", name);
    if (st == KV_OK) st = ln_param(name, w, &wv);
    if (st == KV_OK) st = ln_param(name, b, &bv);
    void *src = st == KV_OK ? kv_dnnl_ptr(x) : NULL;
    if (st == KV_OK && !h->tensor_is_contiguous(x)) {
        dense = norm_alloc((size_t)h->tensor_numel(x) * h->dtype_size(x->dtype));
        st = dense ? kv_dnnl_copy_dense(name, x, dense) : h->error(KV_ERR_OOM, "%s: onednn: out of memory", name);
        src = dense;
    }
    const int64_t dsz[2] = { rows, cols };
    dnnl_memory_desc_t dmd, smd, pmd;
    if (st == KV_OK) st = kv_dnnl_md_dense(name, dsz, 2, dt, &dmd);
    if (st == KV_OK) st = kv_dnnl_md_dense(name, &rows, 1, dnnl_f32, &smd);
    if (st == KV_OK) st = kv_dnnl_md_dense(name, &cols, 1, dnnl_f32, &pmd);
    const unsigned flags = (wv ? (unsigned)dnnl_use_scale : 0u) | (bv ? (unsigned)dnnl_use_shift : 0u);
    dnnl_layer_normalization_desc_t ld;
    if (st == KV_OK && dnnl_layer_normalization_forward_desc_init(&ld, dnnl_forward_training, &dmd, &smd, (float)eps,
                                                                   flags) != dnnl_success)
        st = h->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for this shape", name);
    kv_dnnl_arg args[6] = { { DNNL_ARG_SRC, &dmd, src },
                            { DNNL_ARG_DST, &dmd, st == KV_OK ? out->storage->data : NULL },
                            { DNNL_ARG_MEAN, &smd, mv },
                            { DNNL_ARG_VARIANCE, &smd, vv } };
    int nargs = 4;
    if (wv) args[nargs++] = (kv_dnnl_arg){ DNNL_ARG_SCALE, &pmd, wv };
    if (bv) args[nargs++] = (kv_dnnl_arg){ DNNL_ARG_SHIFT, &pmd, bv };
    if (st == KV_OK) st = kv_dnnl_run(name, "layer_normalization", &ld, NULL, args, nargs);
    if (st == KV_OK) st = ln_rstd(name, vv, rows, eps);
    if (st == KV_OK) st = ln_store(name, mv, rows, mean);
    if (st == KV_OK) st = ln_store(name, vv, rows, rstd);
    free(mv);
    free(vv);
    free(wv);
    free(bv);
    free(dense);
    if (st != KV_OK) {
        h->tensor_release(out);
        h->tensor_release(mean);
        h->tensor_release(rstd);
        return st;
    }
    kv_tensor *res[3] = { out, mean, rstd };
    h->stack_return_tensors(stack, res, 3);
    return KV_OK;
}

static const kv_dnnl_reg norm_kernels[] = {
    { "native_layer_norm", od_layer_norm },
};

kv_status kv_dnnl_register_norm(kv_key key) {
    return kv_dnnl_register_table(key, norm_kernels, (int)(sizeof norm_kernels / sizeof norm_kernels[0]));
}
