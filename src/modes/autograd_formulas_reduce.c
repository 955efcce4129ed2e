/* Backward formulas of reductions, matrix products, softmax and the
 * normalizations, composed from dispatched ops. Argument slots follow
 * ops.schema. */
#include "kv/ops.h"
#include "modes/autograd_internal.h"

static const kv_int_list *dims_arg(const kv_ag_fctx *c, int slot) {
    const kv_ivalue *v = kv_ag_arg(c, slot);
    return v->tag == KV_IV_INT_LIST ? &v->v.ints : NULL;
}

/* sum.dim_IntList (self, dim, keepdim, dtype): grad broadcast back. */
kv_status kv_ag_f_sum(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_restore_dims(c, kv_ag_grad(c, 0), dims_arg(c, 1), kv_ag_arg(c, 2)->v.b, kv_ag_in(c, 0)));
    return KV_OK;
}

/* mean.dim: the same, divided by the number of elements averaged. */
kv_status kv_ag_f_mean(kv_ag_fctx *c) {
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    bool reduce[KV_MAX_DIMS];
    kv_status st = kv_ag_reduced_dims(dims_arg(c, 1), in->ndim, c->node->name, reduce);
    if (st != KV_OK) return st;
    double count = 1.0;
    for (int d = 0; d < in->ndim; d++)
        if (reduce[d]) count *= (double)in->sizes[d];
    kv_tensor *g = kv_ag_restore_dims(c, kv_ag_grad(c, 0), dims_arg(c, 1), kv_ag_arg(c, 2)->v.b, in);
    if (g == NULL) return KV_OK;
    kv_tensor *n = kv_ag_scalar(c, kv_scalar_double(count), kv_dtype_to_real(g->dtype), g->device);
    kv_ag_set(c, 0, kv_ag_keep(c, kv_div(g, n)));
    return KV_OK;
}

/* amax (self, dim, keepdim): the gradient is shared evenly by the
 * elements equal to the maximum (PyTorch's scale_grad_by_count). */
kv_status kv_ag_f_amax(kv_ag_fctx *c) {
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    const kv_int_list *dims = dims_arg(c, 1);
    const bool keepdim = kv_ag_arg(c, 2)->v.b;
    kv_tensor *x = kv_ag_saved(c, 0);
    kv_tensor *r = kv_ag_restore_dims(c, kv_ag_result(c, 0), dims, keepdim, in);
    kv_tensor *g = kv_ag_restore_dims(c, kv_ag_grad(c, 0), dims, keepdim, in);
    if (x == NULL || r == NULL || g == NULL) return KV_OK;
    kv_tensor *mask = kv_ag_keep(c, kv_eq(x, r));
    kv_int_list all = { NULL, 0 };
    kv_tensor *count = kv_ag_keep(c, kv_sum(mask, dims ? dims : &all, true, &g->dtype));
    kv_ag_set(c, 0, kv_ag_mask(c, mask, kv_ag_keep(c, kv_div(g, count))));
    return KV_OK;
}

/* prod.dim_int (self, dim, keepdim, dtype): d/dx_i = prod of the others,
 * computed without dividing (so zeros are handled) as the product over a
 * new dim j of x_j with the diagonal j == i replaced by one. */
kv_status kv_ag_f_prod(kv_ag_fctx *c) {
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *x = kv_ag_saved(c, 0);
    if (x == NULL) return KV_OK;
    if (in->ndim == 0) {
        kv_ag_set(c, 0, g);
        return KV_OK;
    }
    const int d = kv_wrap_dim(kv_ag_arg(c, 1)->v.i, in->ndim, c->node->name, "dim");
    if (d < 0) return kv_last_error();
    const int64_t n = in->sizes[d];
    int64_t esz[KV_MAX_DIMS + 1];
    for (int i = 0, j = 0; i <= in->ndim; i++) esz[i] = (i == d) ? n : in->sizes[j++];
    if (in->ndim + 1 > KV_MAX_DIMS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: backward of a %d-dim prod needs %d dims, at most %d are supported",
                        c->node->name, in->ndim, in->ndim + 1, KV_MAX_DIMS);
    kv_tensor *xe = kv_ag_keep(c, kv_expand(kv_ag_keep(c, kv_unsqueeze(x, d)), (kv_int_list){ esz, in->ndim + 1 }, false));
    const kv_dtype i64 = KV_I64;
    kv_tensor *ar = kv_ag_keep(c, kv_arange(kv_scalar_int(n), &i64, NULL, &x->device, NULL));
    const int64_t col[2] = { n, 1 }, row[2] = { 1, n };
    kv_tensor *eye = kv_ag_keep(c, kv_eq(kv_ag_keep(c, kv_view(ar, (kv_int_list){ col, 2 })),
                                         kv_ag_keep(c, kv_view(ar, (kv_int_list){ row, 2 }))));
    int64_t msz[KV_MAX_DIMS + 1];
    int mnd = 0;
    msz[mnd++] = n;
    msz[mnd++] = n;
    for (int i = d + 1; i < in->ndim; i++) msz[mnd++] = 1;
    kv_tensor *mask = kv_ag_keep(c, kv_reshape(eye, (kv_int_list){ msz, mnd }));
    kv_tensor *one = kv_ag_scalar(c, kv_scalar_int(1), x->dtype, x->device);
    kv_tensor *others = kv_ag_keep(c, kv_prod(kv_ag_keep(c, kv_where(mask, one, xe)), d + 1, false, NULL));
    kv_tensor *gk = kv_ag_arg(c, 2)->v.b ? g : kv_ag_keep(c, kv_unsqueeze(g, d));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(gk, kv_ag_conj(c, others))));
    return KV_OK;
}

/* mm: grad @ mat2^H and self^H @ grad. */
kv_status kv_ag_f_mm(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_keep(c, kv_mm(g, kv_ag_conj(c, kv_ag_keep(c, kv_t(kv_ag_saved(c, 1)))))));
    if (kv_ag_needs(c, 1)) kv_ag_set(c, 1, kv_ag_keep(c, kv_mm(kv_ag_conj(c, kv_ag_keep(c, kv_t(kv_ag_saved(c, 0)))), g)));
    return KV_OK;
}

kv_status kv_ag_f_bmm(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (kv_ag_needs(c, 0))
        kv_ag_set(c, 0, kv_ag_keep(c, kv_bmm(g, kv_ag_conj(c, kv_ag_keep(c, kv_transpose(kv_ag_saved(c, 1), 1, 2))))));
    if (kv_ag_needs(c, 1))
        kv_ag_set(c, 1, kv_ag_keep(c, kv_bmm(kv_ag_conj(c, kv_ag_keep(c, kv_transpose(kv_ag_saved(c, 0), 1, 2))), g)));
    return KV_OK;
}

/* addmm (self, mat1, mat2, beta, alpha) = beta*self + alpha*(mat1 @ mat2). */
kv_status kv_ag_f_addmm(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_scalar beta = kv_ag_arg(c, 3)->v.scalar, alpha = kv_ag_arg(c, 4)->v.scalar;
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_scale_scalar(c, g, beta, true));
    if (kv_ag_needs(c, 1)) {
        kv_tensor *m = kv_ag_keep(c, kv_mm(g, kv_ag_conj(c, kv_ag_keep(c, kv_t(kv_ag_saved(c, 2))))));
        kv_ag_set(c, 1, kv_ag_scale_scalar(c, m, alpha, true));
    }
    if (kv_ag_needs(c, 2)) {
        kv_tensor *m = kv_ag_keep(c, kv_mm(kv_ag_conj(c, kv_ag_keep(c, kv_t(kv_ag_saved(c, 1)))), g));
        kv_ag_set(c, 2, kv_ag_scale_scalar(c, m, alpha, true));
    }
    return KV_OK;
}

/* _softmax (self, dim, half_to_float): y * (grad - sum(grad * y, dim)). */
kv_status kv_ag_f_softmax(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *y = kv_ag_result(c, 0);
    int64_t dim = kv_ag_arg(c, 1)->v.i;
    kv_int_list dl = { &dim, 1 };
    kv_tensor *s = kv_ag_keep(c, kv_sum(kv_ag_keep(c, kv_mul(g, y)), &dl, true, NULL));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(y, kv_ag_keep(c, kv_sub(g, s, kv_scalar_int(1))))));
    return KV_OK;
}

/* _log_softmax: grad - exp(y) * sum(grad, dim). */
kv_status kv_ag_f_log_softmax(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *y = kv_ag_result(c, 0);
    int64_t dim = kv_ag_arg(c, 1)->v.i;
    kv_int_list dl = { &dim, 1 };
    kv_tensor *s = kv_ag_keep(c, kv_sum(g, &dl, true, NULL));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_sub(g, kv_ag_keep(c, kv_mul(kv_ag_keep(c, kv_exp(y)), s)), kv_scalar_int(1))));
    return KV_OK;
}

/* The input gradient of a normalization, over the dims `dims` of the
 * (reshaped) tensors: rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)). */
static kv_tensor *norm_input_grad(kv_ag_fctx *c, kv_tensor *dxhat, kv_tensor *xhat, kv_tensor *rstd,
                                  const int64_t *dims, int nd) {
    kv_int_list dl = { dims, nd };
    kv_tensor *m1 = kv_ag_keep(c, kv_mean(dxhat, &dl, true, NULL));
    kv_tensor *m2 = kv_ag_keep(c, kv_mean(kv_ag_keep(c, kv_mul(dxhat, xhat)), &dl, true, NULL));
    kv_tensor *inner = kv_ag_keep(c, kv_sub(kv_ag_keep(c, kv_sub(dxhat, m1, kv_scalar_int(1))),
                                            kv_ag_keep(c, kv_mul(xhat, m2)), kv_scalar_int(1)));
    return kv_ag_keep(c, kv_mul(rstd, inner));
}

/* Sums t over dims (none: t itself). */
static kv_tensor *sum_dims(kv_ag_fctx *c, kv_tensor *t, const int64_t *dims, int nd) {
    if (nd == 0 || t == NULL) return t;
    kv_int_list dl = { dims, nd };
    return kv_ag_keep(c, kv_sum(t, &dl, false, NULL));
}

/* native_layer_norm (input, normalized_shape, weight?, bias?, eps) ->
 * (out, mean, rstd); only out is differentiable. mean and rstd keep the
 * input's rank (size 1 over the normalized dims), so they broadcast. */
kv_status kv_ag_f_layer_norm(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (g == NULL) return KV_OK;
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    const int nnorm = kv_ag_arg(c, 1)->v.ints.n;
    const int axis = in->ndim - nnorm;
    int64_t lead[KV_MAX_DIMS], norm[KV_MAX_DIMS];
    for (int d = 0; d < axis; d++) lead[d] = d;
    for (int d = axis; d < in->ndim; d++) norm[d - axis] = d;
    kv_tensor *x = kv_ag_saved(c, 0);
    kv_tensor *rstd = kv_ag_result(c, 2);
    kv_tensor *xhat = kv_ag_keep(c, kv_mul(kv_ag_keep(c, kv_sub(x, kv_ag_result(c, 1), kv_scalar_int(1))), rstd));
    if (kv_ag_needs(c, 3)) kv_ag_set(c, 3, sum_dims(c, g, lead, axis));
    if (kv_ag_needs(c, 2)) kv_ag_set(c, 2, sum_dims(c, kv_ag_keep(c, kv_mul(g, xhat)), lead, axis));
    if (kv_ag_needs(c, 0)) {
        if (nnorm == 0) {
            /* Normalizing over no dims gives a constant 0 * rstd. */
            kv_ag_set(c, 0, kv_ag_zeros_meta(c, in, g->dtype));
            return KV_OK;
        }
        const kv_ag_tmeta *w = kv_ag_in(c, 2);
        kv_tensor *dxhat = (w && w->present) ? kv_ag_keep(c, kv_mul(g, kv_ag_saved(c, 2))) : g;
        kv_ag_set(c, 0, norm_input_grad(c, dxhat, xhat, rstd, norm, nnorm));
    }
    return KV_OK;
}

/* native_group_norm (input, weight?, bias?, N, C, HxW, group, eps) ->
 * (out, mean [N, group], rstd [N, group]); only out is differentiable.
 * Statistics are per (n, group), over C/group channels times HxW. */
kv_status kv_ag_f_group_norm(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (g == NULL) return KV_OK;
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    const int64_t N = kv_ag_arg(c, 3)->v.i, C = kv_ag_arg(c, 4)->v.i, HxW = kv_ag_arg(c, 5)->v.i;
    const int64_t G = kv_ag_arg(c, 6)->v.i;
    if (G <= 0 || C % G != 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'group': %lld does not divide C = %lld", c->node->name,
                        (long long)G, (long long)C);
    const int64_t r3[3] = { N, G, (C / G) * HxW }, s3[3] = { N, G, 1 };
    int64_t pdims[KV_MAX_DIMS];
    int np = 0;
    pdims[np++] = 0;
    for (int d = 2; d < in->ndim; d++) pdims[np++] = d;
    kv_tensor *x = kv_ag_saved(c, 0);
    kv_tensor *mean3 = kv_ag_keep(c, kv_reshape(kv_ag_result(c, 1), (kv_int_list){ s3, 3 }));
    kv_tensor *rstd3 = kv_ag_keep(c, kv_reshape(kv_ag_result(c, 2), (kv_int_list){ s3, 3 }));
    kv_tensor *xr = kv_ag_keep(c, kv_reshape(x, (kv_int_list){ r3, 3 }));
    kv_tensor *xhat_r = kv_ag_keep(c, kv_mul(kv_ag_keep(c, kv_sub(xr, mean3, kv_scalar_int(1))), rstd3));
    kv_tensor *xhat = kv_ag_keep(c, kv_reshape(xhat_r, kv_ag_tmeta_sizes(in)));
    if (kv_ag_needs(c, 2)) kv_ag_set(c, 2, sum_dims(c, g, pdims, np));
    if (kv_ag_needs(c, 1)) kv_ag_set(c, 1, sum_dims(c, kv_ag_keep(c, kv_mul(g, xhat)), pdims, np));
    if (kv_ag_needs(c, 0)) {
        const kv_ag_tmeta *w = kv_ag_in(c, 1);
        kv_tensor *dxhat = g;
        if (w && w->present) {
            int64_t wsz[KV_MAX_DIMS];
            wsz[0] = C;
            for (int d = 2; d < in->ndim; d++) wsz[d - 1] = 1;
            kv_tensor *wv = kv_ag_keep(c, kv_reshape(kv_ag_saved(c, 1), (kv_int_list){ wsz, in->ndim - 1 }));
            dxhat = kv_ag_keep(c, kv_mul(g, wv));
        }
        kv_tensor *dxhat_r = kv_ag_keep(c, kv_reshape(dxhat, (kv_int_list){ r3, 3 }));
        const int64_t d2 = 2;
        kv_tensor *dx_r = norm_input_grad(c, dxhat_r, xhat_r, rstd3, &d2, 1);
        kv_ag_set(c, 0, kv_ag_keep(c, kv_reshape(dx_r, kv_ag_tmeta_sizes(in))));
    }
    return KV_OK;
}
