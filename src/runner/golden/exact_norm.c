/* Exact goldens of _softmax, _log_softmax, native_layer_norm and
 * native_group_norm (runner/golden/exact.h).
 *
 * One Ziv group per slice (softmax) or per normalized group (norms): the
 * statistics are computed once per evaluation at the working precision
 * and every output of the group is rounded from them, so a group is
 * accepted only when all its outputs agree at two precisions. The
 * formulas are the reference's, evaluated without its double rounding or
 * its overflow: a row holding +-DBL_MAX has a variance near 1e616, which
 * MPFR's exponent range holds, so y = +-1 and rstd ~ 1.1e-308 come out as
 * they are mathematically. A slice with a NaN, or with infinities that
 * make x - max or x - mean NaN, gives NaN as in the reference. */
#include "runner/golden/exact.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- softmax ---- */

typedef struct sm_ctx {
    int64_t n;
    const double *x;
    bool log;
} sm_ctx;

static int sm_eval(void *vctx, mpfr_prec_t p, mpfr_t *outs, int n) {
    const sm_ctx *s = vctx;
    (void)n;
    double m = -INFINITY;
    bool nan = false;
    for (int64_t i = 0; i < s->n; i++) {
        if (isnan(s->x[i])) nan = true;
        else if (s->x[i] > m) m = s->x[i];
    }
    mpfr_t *e = malloc(sizeof(mpfr_t) * (size_t)s->n);
    mpfr_ptr *ptr = malloc(sizeof(mpfr_ptr) * (size_t)s->n);
    if (e == NULL || ptr == NULL) {
        free(e);
        free(ptr);
        return -1;
    }
    mpfr_t mm, sum, d;
    mpfr_inits2(p, mm, sum, d, (mpfr_ptr)0);
    if (nan) mpfr_set_nan(mm);
    else mpfr_set_d(mm, m, MPFR_RNDN);
    for (int64_t i = 0; i < s->n; i++) {
        mpfr_init2(e[i], p);
        ptr[i] = e[i];
        mpfr_set_d(d, s->x[i], MPFR_RNDN);
        mpfr_sub(d, d, mm, MPFR_RNDN); /* exact at p >= 128 unless the gap is huge */
        mpfr_exp(e[i], d, MPFR_RNDN);
    }
    mpfr_sum(sum, ptr, (unsigned long)s->n, MPFR_RNDN);
    if (s->log) mpfr_log(sum, sum, MPFR_RNDN);
    for (int64_t i = 0; i < s->n; i++) {
        if (s->log) {
            mpfr_set_d(d, s->x[i], MPFR_RNDN);
            mpfr_sub(d, d, mm, MPFR_RNDN);
            mpfr_sub(outs[i], d, sum, MPFR_RNDN);
        } else {
            mpfr_div(outs[i], e[i], sum, MPFR_RNDN);
        }
        mpfr_clear(e[i]);
    }
    mpfr_clears(mm, sum, d, (mpfr_ptr)0);
    free(e);
    free(ptr);
    return 0;
}

kv_status kv_exact_softmax(const kv_exact_call *x) {
    const kv_tensor *a = x->in->args[0].v.tensor;
    kv_tensor *o = x->out->t[0];
    if (!kv_dtype_is_floating(o->dtype) || x->in->args[1].tag != KV_IV_INT) return KV_OK;
    int64_t dim = x->in->args[1].v.i;
    const int nd = a->ndim;
    if (dim < 0) dim += nd ? nd : 1;
    int64_t outer = 1, len = 1, inner = 1;
    for (int d = 0; d < nd; d++) {
        if (d < dim) outer *= a->sizes[d];
        else if (d == dim) len = a->sizes[d];
        else inner *= a->sizes[d];
    }
    if (len == 0) return KV_OK;
    double *xs = malloc(sizeof(double) * (size_t)len * 2);
    if (xs == NULL) return kv_error(KV_ERR_OOM, "exact golden: out of memory");
    double *r = xs + len;
    kv_status st = KV_OK;
    for (int64_t io = 0; io < outer && st == KV_OK; io++) {
        for (int64_t ii = 0; ii < inner && st == KV_OK; ii++) {
            for (int64_t k = 0; k < len; k++) xs[k] = kv_exact_load_d(a, (io * len + k) * inner + ii, 0);
            sm_ctx s = { len, xs, strcmp(x->name, "_log_softmax") == 0 };
            st = kv_exact_ziv(&s, sm_eval, (int)len, o->dtype, r);
            for (int64_t k = 0; k < len && st == KV_OK; k++) kv_exact_store(o, (io * len + k) * inner + ii, 0, r[k], x->stats);
        }
    }
    free(xs);
    return st;
}

/* ---- layer and group norm ---- */

typedef struct norm_ctx {
    int64_t n;
    const double *x, *w, *b;     /* w, b: per element of the group, or NULL */
    double eps;
    bool stats;                  /* evaluate (mean, rstd) instead of y */
} norm_ctx;

static int norm_eval(void *vctx, mpfr_prec_t p, mpfr_t *outs, int nout) {
    const norm_ctx *g = vctx;
    (void)nout;
    const int64_t n = g->n;
    mpfr_t *v = malloc(sizeof(mpfr_t) * (size_t)(n ? n : 1));
    mpfr_ptr *ptr = malloc(sizeof(mpfr_ptr) * (size_t)(n ? n : 1));
    if (v == NULL || ptr == NULL) {
        free(v);
        free(ptr);
        return -1;
    }
    mpfr_t mean, var, rstd, t;
    mpfr_inits2(p, mean, var, rstd, t, (mpfr_ptr)0);
    for (int64_t i = 0; i < n; i++) {
        mpfr_init2(v[i], 2 * p);
        mpfr_set_d(v[i], g->x[i], MPFR_RNDN);
        ptr[i] = v[i];
    }
    mpfr_sum(mean, ptr, (unsigned long)n, MPFR_RNDN);
    mpfr_div_si(mean, mean, (long)n, MPFR_RNDN); /* n = 0: 0/0 = NaN, as the reference */
    for (int64_t i = 0; i < n; i++) {
        mpfr_sub(v[i], v[i], mean, MPFR_RNDN);
        mpfr_sqr(v[i], v[i], MPFR_RNDN);
    }
    mpfr_sum(var, ptr, (unsigned long)n, MPFR_RNDN);
    mpfr_div_si(var, var, (long)n, MPFR_RNDN);
    mpfr_add_d(var, var, g->eps, MPFR_RNDN);
    mpfr_sqrt(rstd, var, MPFR_RNDN);
    mpfr_ui_div(rstd, 1, rstd, MPFR_RNDN);
    if (g->stats) {
        mpfr_set(outs[0], mean, MPFR_RNDN);
        mpfr_set(outs[1], rstd, MPFR_RNDN);
    } else {
        for (int64_t i = 0; i < n; i++) {
            mpfr_set_d(t, g->x[i], MPFR_RNDN);
            mpfr_sub(t, t, mean, MPFR_RNDN);
            mpfr_mul(t, t, rstd, MPFR_RNDN);
            if (g->w) mpfr_mul_d(t, t, g->w[i], MPFR_RNDN);
            if (g->b) mpfr_add_d(t, t, g->b[i], MPFR_RNDN);
            mpfr_set(outs[i], t, MPFR_RNDN);
        }
    }
    for (int64_t i = 0; i < n; i++) mpfr_clear(v[i]);
    mpfr_clears(mean, var, rstd, t, (mpfr_ptr)0);
    free(v);
    free(ptr);
    return 0;
}

static const kv_tensor *opt_tensor(const kv_exact_call *x, int i) {
    return (i < x->in->nargs && x->in->args[i].tag == KV_IV_TENSOR) ? x->in->args[i].v.tensor : NULL;
}

/* One group: elements idx[0..n) of the input, parameter index pidx[k]
 * into w/b, statistics at index s of outputs 1 and 2. */
static kv_status norm_group(const kv_exact_call *x, const int64_t *idx, const int64_t *pidx, int64_t n, int64_t s,
                            double eps, double *buf) {
    const kv_tensor *a = x->in->args[0].v.tensor;
    const bool layer = strcmp(x->name, "native_layer_norm") == 0;
    const kv_tensor *w = opt_tensor(x, layer ? 2 : 1), *b = opt_tensor(x, layer ? 3 : 2);
    double *xs = buf, *ws = buf + n, *bs = buf + 2 * n, *r = buf + 3 * n;
    for (int64_t k = 0; k < n; k++) {
        xs[k] = kv_exact_load_d(a, idx[k], 0);
        if (w) ws[k] = kv_exact_load_d(w, pidx[k], 0);
        if (b) bs[k] = kv_exact_load_d(b, pidx[k], 0);
    }
    norm_ctx g = { n, xs, w ? ws : NULL, b ? bs : NULL, eps, false };
    kv_tensor *y = x->out->t[0];
    kv_status st = kv_exact_ziv(&g, norm_eval, (int)n, y->dtype, r);
    for (int64_t k = 0; k < n && st == KV_OK; k++) kv_exact_store(y, idx[k], 0, r[k], x->stats);
    if (st != KV_OK || x->out->n < 3) return st;
    g.stats = true;
    double mr[2];
    st = kv_exact_ziv(&g, norm_eval, 2, x->out->t[1]->dtype, mr);
    if (st == KV_OK && kv_tensor_numel(x->out->t[1]) > s) kv_exact_store(x->out->t[1], s, 0, mr[0], x->stats);
    if (st == KV_OK && x->out->t[2]->dtype != x->out->t[1]->dtype)
        st = kv_exact_ziv(&g, norm_eval, 2, x->out->t[2]->dtype, mr);
    if (st == KV_OK && kv_tensor_numel(x->out->t[2]) > s) kv_exact_store(x->out->t[2], s, 0, mr[1], x->stats);
    return st;
}

kv_status kv_exact_norm(const kv_exact_call *x) {
    const kv_tensor *a = x->in->args[0].v.tensor;
    if (!kv_dtype_is_floating(x->out->t[0]->dtype)) return KV_OK;
    const bool layer = strcmp(x->name, "native_layer_norm") == 0;
    int64_t groups, n;
    int64_t gN = 0, gC = 0, gHW = 0, gG = 1;
    double eps;
    if (layer) {
        const kv_int_list ns = x->in->args[1].v.ints;
        n = 1;
        for (int i = 0; i < ns.n; i++) n *= ns.items[i];
        const int64_t total = kv_tensor_numel(a);
        groups = n ? total / n : 0;
        eps = x->in->args[4].v.d;
    } else {
        gN = x->in->args[3].v.i;
        gC = x->in->args[4].v.i;
        gHW = x->in->args[5].v.i;
        gG = x->in->args[6].v.i;
        eps = x->in->args[7].v.d;
        if (gG <= 0) return KV_OK;
        groups = gN * gG;
        n = gC / gG * gHW;
    }
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(2 * n + 1));
    double *buf = malloc(sizeof(double) * (size_t)(4 * n + 4));
    if (idx == NULL || buf == NULL) {
        free(idx);
        free(buf);
        return kv_error(KV_ERR_OOM, "exact golden: out of memory");
    }
    int64_t *pidx = idx + n;
    kv_status st = KV_OK;
    for (int64_t gi = 0; gi < groups && st == KV_OK; gi++) {
        if (layer) {
            for (int64_t k = 0; k < n; k++) {
                idx[k] = gi * n + k;
                pidx[k] = k;
            }
        } else {
            const int64_t ni = gi / gG, g = gi % gG, cpg = gC / gG;
            int64_t k = 0;
            for (int64_t c = g * cpg; c < (g + 1) * cpg; c++) {
                for (int64_t s = 0; s < gHW; s++, k++) {
                    idx[k] = (ni * gC + c) * gHW + s;
                    pidx[k] = c;
                }
            }
        }
        st = norm_group(x, idx, pidx, n, gi, eps, buf);
    }
    free(idx);
    free(buf);
    return st;
}
