/* Reference native_layer_norm and native_group_norm.
 *
 * Statistics are two-pass in f64 over each normalized group, elements
 * visited row-major (layer norm: over the normalized trailing dims; group
 * norm: channel ascending, then the spatial dims row-major):
 *   mean = (sum of x) / count
 *   var  = (sum of (x - mean)^2) / count      (biased)
 *   rstd = 1 / sqrt(var + eps)
 *   out  = ((x - mean) * rstd) * w + b        (w and b when given)
 * all in f64 with the unrounded mean and rstd, rounded once on store. An
 * empty group gives mean = rstd = NaN (0/0); its outputs are empty anyway.
 *
 * Dtypes. Floating inputs only (PyTorch's CPU kernels have no integral or
 * complex variant). out has the input's dtype. mean and rstd have the
 * input's dtype too -- for f16/bf16 as well, which is what PyTorch's CPU
 * layer_norm_cpu / native_group_norm do: they allocate the statistics with
 * param_scalar_type(input, mixed_type), which is the input's dtype unless
 * the call is "mixed". Mixed means a f16/bf16 input with f32 weight/bias;
 * then mean and rstd are f32, as in PyTorch. Any other dtype mix is
 * KV_ERR_DTYPE with PyTorch's "mixed dtype (CPU)" wording. */
#include "ref/ref.h"
#include "ref/ref_shared.h"
#include "ref/ref_kernels.h"

#include <math.h>

static int64_t nm_offset(int64_t lin, int n, const int64_t *sizes, const int64_t *strides) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (lin % sizes[d]) * strides[d];
        lin /= sizes[d];
    }
    return off;
}

static kv_status nm_alloc_failed(const char *op) {
    kv_status st = kv_last_error();
    return st != KV_OK ? st : kv_error(KV_ERR_OOM, "%s: could not allocate the results", op);
}

/* Checks the device of weight/bias and the dtype mix; *stat_dt gets the
 * dtype of mean and rstd. */
static kv_status nm_check_dtypes(const char *op, const kv_tensor *x, const kv_tensor *w, const kv_tensor *b,
                                 kv_dtype *stat_dt) {
    kv_status st = kv_ref_check_cpu(op, "input", x);
    if (st == KV_OK) st = kv_ref_check_dtype(op, "input", x->dtype, KV_DTYPES_FLOATING);
    if (st == KV_OK && w) st = kv_ref_check_cpu(op, "weight", w);
    if (st == KV_OK && b) st = kv_ref_check_cpu(op, "bias", b);
    if (st != KV_OK) return st;
    const kv_tensor *first = w ? w : b;
    const bool mixed = first && first->dtype != x->dtype;
    *stat_dt = mixed ? KV_F32 : x->dtype;
    if (!mixed) {
        if (b && b->dtype != x->dtype)
            return kv_error(KV_ERR_DTYPE, "%s: argument 'bias': mixed dtype (CPU): all inputs must share same datatype "
                            "(input %s, bias %s)", op, kv_dtype_name(x->dtype), kv_dtype_name(b->dtype));
        return KV_OK;
    }
    if (x->dtype != KV_F16 && x->dtype != KV_BF16)
        return kv_error(KV_ERR_DTYPE, "%s: argument '%s': mixed dtype (CPU): all inputs must share same datatype "
                        "(input %s, %s %s)", op, w ? "weight" : "bias", kv_dtype_name(x->dtype),
                        w ? "weight" : "bias", kv_dtype_name(first->dtype));
    if ((w && w->dtype != KV_F32) || (b && b->dtype != KV_F32))
        return kv_error(KV_ERR_DTYPE, "%s: argument '%s': mixed dtype (CPU): expect parameter to have scalar type of "
                        "Float", op, (w && w->dtype != KV_F32) ? "weight" : "bias");
    return KV_OK;
}

/* The parts of one normalization shared by both ops: a group is `count`
 * input elements reached through `elem`, with an optional per-element
 * weight/bias reached through `param`. */
typedef struct nm_group {
    const kv_tensor *x, *w, *b;
    kv_tensor *out;
    int64_t count;
    double eps;
    /* element j of the group: offsets in elements of x and out, and the
     * logical (row-major) index of its weight/bias element; weight and bias
     * each have strides of their own, so the offset is taken per tensor */
    void (*elem)(const void *ctx, int64_t j, int64_t *xo, int64_t *oo, int64_t *po);
    const void *ctx;
} nm_group;

static double nm_load(const kv_tensor *t, int64_t off) {
    return kv_ref_load_f64(t->dtype, (const char *)kv_tensor_data(t) + off * (int64_t)kv_dtype_size(t->dtype));
}

/* Element `index` (row-major over the parameter's own shape) of weight or bias. */
static double nm_load_param(const kv_tensor *t, int64_t index) {
    return nm_load(t, nm_offset(index, t->ndim, t->sizes, t->strides));
}

/* 2^-e for a group whose largest finite |x| is above 2^500, else 1: the
 * squares of (x - mean) and their sum would overflow f64 (a row holding
 * +-DBL_MAX has a variance near 1e616), so such a group is normalized in
 * a scaled copy x*s (exact: s is a power of two) and rstd scaled back:
 * rstd = s / sqrt(var(x*s) + eps*s^2) (issue 14, bug b). */
static double nm_scale(const nm_group *g) {
    int64_t xo, oo, po;
    double big = 0.0;
    for (int64_t j = 0; j < g->count; j++) {
        g->elem(g->ctx, j, &xo, &oo, &po);
        const double v = fabs(nm_load(g->x, xo));
        if (isfinite(v) && v > big) big = v;
    }
    if (big <= 0x1p500) return 1.0;
    int e;
    frexp(big, &e);
    return ldexp(1.0, -e);
}

/* Normalizes one group; returns mean and rstd (f64, unrounded). */
static void nm_run_group(const nm_group *g, double *mean_out, double *rstd_out) {
    int64_t xo, oo, po;
    const double n = (double)g->count;
    const double s = nm_scale(g);
    double sum = 0.0;
    for (int64_t j = 0; j < g->count; j++) {
        g->elem(g->ctx, j, &xo, &oo, &po);
        sum += nm_load(g->x, xo) * s;
    }
    const double mean_s = sum / n;
    double sq = 0.0;
    for (int64_t j = 0; j < g->count; j++) {
        g->elem(g->ctx, j, &xo, &oo, &po);
        const double dlt = nm_load(g->x, xo) * s - mean_s;
        sq += dlt * dlt;
    }
    const double rstd_s = 1.0 / sqrt(sq / n + g->eps * s * s);
    const double mean = mean_s / s, rstd = rstd_s * s;
    const kv_dtype odt = g->out->dtype;
    char *dst = kv_tensor_data(g->out);
    for (int64_t j = 0; j < g->count; j++) {
        g->elem(g->ctx, j, &xo, &oo, &po);
        double v = (nm_load(g->x, xo) * s - mean_s) * rstd_s;
        if (g->w) v = v * nm_load_param(g->w, po);
        if (g->b) v = v + nm_load_param(g->b, po);
        kv_ref_store_f64(odt, dst + oo * (int64_t)kv_dtype_size(odt), v);
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

static void nm_store_stat(kv_tensor *t, int64_t i, double v) {
    kv_ref_store_f64(t->dtype, (char *)kv_tensor_data(t) + i * (int64_t)kv_dtype_size(t->dtype), v);
}

static kv_status nm_return3(kv_stack *stack, kv_tensor *out, kv_tensor *mean, kv_tensor *rstd) {
    kv_tensor *res[3] = { out, mean, rstd };
    kv_stack_return_tensors(stack, res, 3);
    return KV_OK;
}

/* ---- native_layer_norm ---- */

typedef struct ln_ctx {
    const kv_tensor *x, *w, *b;
    const kv_tensor *out;
    int axis, nnorm;
    int64_t xbase, obase;
} ln_ctx;

static void ln_elem(const void *vctx, int64_t j, int64_t *xo, int64_t *oo, int64_t *po) {
    const ln_ctx *c = vctx;
    *xo = c->xbase + nm_offset(j, c->nnorm, c->x->sizes + c->axis, c->x->strides + c->axis);
    *oo = c->obase + nm_offset(j, c->nnorm, c->out->sizes + c->axis, c->out->strides + c->axis);
    *po = j;
}

static kv_status ln_check_param(const char *op, const char *arg, const kv_tensor *p, kv_int_list ns) {
    if (!p || kv_ref_sizes_are(p, ns)) return KV_OK;
    char s1[KV_REF_SHAPE_BUF], s2[KV_REF_SHAPE_BUF];
    return kv_error(KV_ERR_SHAPE, "%s: argument '%s': Expected %s to be of same shape as normalized_shape, but got "
                    "%s of shape %s and normalized_shape = %s", op, arg, arg, arg,
                    kv_ref_format_shape(p->sizes, p->ndim, s1, sizeof s1),
                    kv_ref_format_shape(ns.items, ns.n, s2, sizeof s2));
}

KV_REF_KERNEL(native_layer_norm) {
    (void)op;
    (void)ks;
    const char *name = "native_layer_norm";
    kv_tensor *x = kv_arg_tensor(stack, 0);
    kv_tensor *w = kv_arg_tensor(stack, 2), *b = kv_arg_tensor(stack, 3);
    const kv_int_list ns = kv_arg_ints(stack, 1);
    const double eps = kv_arg_double(stack, 4);
    if (!x) return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'input': expected a tensor, got None", name);
    kv_dtype stat_dt;
    kv_status st = nm_check_dtypes(name, x, w, b, &stat_dt);
    if (st != KV_OK) return st;
    char s1[KV_REF_SHAPE_BUF], s2[KV_REF_SHAPE_BUF];
    if (ns.n < 1)
        return kv_error(KV_ERR_SHAPE, "%s: argument 'normalized_shape': Expected normalized_shape to be at least "
                        "1-dimensional, i.e., containing at least one element, but got normalized_shape = []", name);
    const bool match = kv_ref_ln_trailing_match(x, ns);
    const int axis = x->ndim - ns.n;
    if (!match) {
        /* PyTorch's "[*, 4, 5]": the list without its opening bracket. */
        char s3[KV_REF_SHAPE_BUF];
        kv_ref_format_shape(ns.items, ns.n, s2, sizeof s2);
        return kv_error(KV_ERR_SHAPE, "%s: argument 'normalized_shape': Given normalized_shape=%s, expected input "
                        "with shape [*, %s, but got input of size %s", name,
                        kv_ref_format_shape(ns.items, ns.n, s1, sizeof s1), s2 + 1,
                        kv_ref_format_shape(x->sizes, x->ndim, s3, sizeof s3));
    }
    st = ln_check_param(name, "weight", w, ns);
    if (st == KV_OK) st = ln_check_param(name, "bias", b, ns);
    if (st != KV_OK) return st;

    int64_t stat_sizes[KV_MAX_DIMS];
    int64_t rows, cols;
    kv_ref_ln_split(x, axis, stat_sizes, &rows, &cols);
    kv_tensor *out = kv_ref_new_output(x->sizes, x->ndim, x->dtype);
    kv_tensor *mean = out ? kv_ref_new_output(stat_sizes, x->ndim, stat_dt) : NULL;
    kv_tensor *rstd = mean ? kv_ref_new_output(stat_sizes, x->ndim, stat_dt) : NULL;
    if (!rstd) {
        st = nm_alloc_failed(name);
        kv_tensor_release(out);
        kv_tensor_release(mean);
        return st;
    }
    ln_ctx c = { .x = x, .w = w, .b = b, .out = out, .axis = axis, .nnorm = ns.n };
    nm_group g = { .x = x, .w = w, .b = b, .out = out, .count = cols, .eps = eps, .elem = ln_elem, .ctx = &c };
    for (int64_t r = 0; r < rows; r++) {
        c.xbase = nm_offset(r, axis, x->sizes, x->strides);
        c.obase = nm_offset(r, axis, out->sizes, out->strides);
        double mu, rs;
        nm_run_group(&g, &mu, &rs);
        nm_store_stat(mean, r, mu);
        nm_store_stat(rstd, r, rs);
    }
    return nm_return3(stack, out, mean, rstd);
}

/* ---- native_group_norm ---- */

typedef struct gn_ctx {
    const kv_tensor *x, *w, *b, *out;
    int64_t n, c0, hxw;
} gn_ctx;

static void gn_elem(const void *vctx, int64_t j, int64_t *xo, int64_t *oo, int64_t *po) {
    const gn_ctx *c = vctx;
    const int64_t ch = c->c0 + j / c->hxw, s = j % c->hxw;
    const int sp = c->x->ndim - 2;
    *xo = c->n * c->x->strides[0] + ch * c->x->strides[1] + nm_offset(s, sp, c->x->sizes + 2, c->x->strides + 2);
    *oo = c->n * c->out->strides[0] + ch * c->out->strides[1] +
          nm_offset(s, sp, c->out->sizes + 2, c->out->strides + 2);
    *po = ch;
}

static kv_status gn_check_param(const char *op, const char *arg, const kv_tensor *p, int64_t C,
                                const kv_tensor *x) {
    if (!p || (p->ndim == 1 && p->sizes[0] == C)) return KV_OK;
    char s1[KV_REF_SHAPE_BUF], s2[KV_REF_SHAPE_BUF];
    return kv_error(KV_ERR_SHAPE, "%s: argument '%s': Expected %s to be a vector of size equal to the number of "
                    "channels in input, but got %s of shape %s and input of shape %s", op, arg, arg, arg,
                    kv_ref_format_shape(p->sizes, p->ndim, s1, sizeof s1),
                    kv_ref_format_shape(x->sizes, x->ndim, s2, sizeof s2));
}

KV_REF_KERNEL(native_group_norm) {
    (void)op;
    (void)ks;
    const char *name = "native_group_norm";
    kv_tensor *x = kv_arg_tensor(stack, 0);
    kv_tensor *w = kv_arg_tensor(stack, 1), *b = kv_arg_tensor(stack, 2);
    const int64_t N = kv_arg_int(stack, 3), C = kv_arg_int(stack, 4), HxW = kv_arg_int(stack, 5);
    const int64_t group = kv_arg_int(stack, 6);
    const double eps = kv_arg_double(stack, 7);
    if (!x) return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'input': expected a tensor, got None", name);
    kv_dtype stat_dt;
    kv_status st = nm_check_dtypes(name, x, w, b, &stat_dt);
    if (st != KV_OK) return st;
    if (N < 0 || C < 0 || HxW < 0)
        return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument '%s': negative size %lld", name,
                        N < 0 ? "N" : C < 0 ? "C" : "HxW", (long long)(N < 0 ? N : C < 0 ? C : HxW));
    char s1[KV_REF_SHAPE_BUF];
    if (group <= 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'group': expected a positive number of groups, got %lld",
                        name, (long long)group);
    if (C % group != 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'group': Expected number of channels in input to be "
                        "divisible by num_groups, but got input of shape %s and num_groups=%lld", name,
                        kv_ref_format_shape(x->sizes, x->ndim, s1, sizeof s1), (long long)group);
    int64_t spatial = 1;
    for (int d = 2; d < x->ndim; d++) spatial *= x->sizes[d];
    if (x->ndim < 2 || x->sizes[0] != N || x->sizes[1] != C || spatial != HxW)
        return kv_error(KV_ERR_SHAPE, "%s: argument 'input': expected shape [N, C, *] with N=%lld, C=%lld and "
                        "HxW=%lld, got %s", name, (long long)N, (long long)C, (long long)HxW,
                        kv_ref_format_shape(x->sizes, x->ndim, s1, sizeof s1));
    st = gn_check_param(name, "weight", w, C, x);
    if (st == KV_OK) st = gn_check_param(name, "bias", b, C, x);
    if (st != KV_OK) return st;

    const int64_t stat_sizes[2] = { N, group };
    kv_tensor *out = kv_ref_new_output(x->sizes, x->ndim, x->dtype);
    kv_tensor *mean = out ? kv_ref_new_output(stat_sizes, 2, stat_dt) : NULL;
    kv_tensor *rstd = mean ? kv_ref_new_output(stat_sizes, 2, stat_dt) : NULL;
    if (!rstd) {
        st = nm_alloc_failed(name);
        kv_tensor_release(out);
        kv_tensor_release(mean);
        return st;
    }
    const int64_t per = C / group;
    gn_ctx c = { .x = x, .w = w, .b = b, .out = out, .hxw = HxW };
    nm_group g = { .x = x, .w = w, .b = b, .out = out, .count = per * HxW, .eps = eps, .elem = gn_elem, .ctx = &c };
    for (int64_t n = 0; n < N; n++) {
        for (int64_t gi = 0; gi < group; gi++) {
            c.n = n;
            c.c0 = gi * per;
            double mu, rs;
            nm_run_group(&g, &mu, &rs);
            nm_store_stat(mean, n * group + gi, mu);
            nm_store_stat(rstd, n * group + gi, rs);
        }
    }
    return nm_return3(stack, out, mean, rstd);
}
