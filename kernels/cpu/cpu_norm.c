/* Optimized native_layer_norm and native_group_norm, f32 and f64:
 *   "fused"  (both ops) one pass over each group accumulates the sum and
 *            the sum of squares together, var = E[x^2] - mean^2, then one
 *            pass writes the outputs;
 *   "vec"    (layer norm) the reference's two-pass statistics, with the
 *            sums in 8 vectorizable lanes.
 * Everything is computed in f64 like the reference: mean, rstd =
 * 1/sqrt(var + eps), y = ((x - mean) * rstd) * w + b, rounded once. The
 * one-pass variance loses about log2(E[x^2]/var) bits to cancellation,
 * a relative error about 2^-53 * n * q, q = (Q + eps)/(v + eps); the
 * table's bound (tol_bounds.c) allows a two-pass or Welford variance,
 * gamma_{2n+8} * sqrt(q) with u = 2^-24 for f32 inputs: f64 sums keep an
 * f32 group within it up to q of about 2^58 (data that differ in their
 * last f32 bits stay far below). For f64 inputs u is 2^-53 and E[x^2] -
 * m^2 would leave it wherever the mean is large against the spread
 * (fill=shifted), so the f64 pass updates Welford's running mean and sum
 * of squared deviations instead (one pass still, 8 lanes merged by Chan's
 * formula). Statistics have the input's dtype (the reference's non-mixed
 * case). Mixed f16/bf16 inputs, other dtypes and every error go to the
 * reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"
#include "ref/ref_shared.h"

#define LANES 8

static double nm_load(kv_dtype dt, const char *p) { return dt == KV_F32 ? (double)*(const float *)p : *(const double *)p; }
static void nm_store(kv_dtype dt, char *p, int64_t i, double v) {
    if (dt == KV_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = v;
}

/* A weight or bias as contiguous doubles (NULL when absent). */
static double *nm_param(const kv_tensor *p, bool *oom) {
    if (p == NULL) return NULL;
    const int64_t n = kv_tensor_numel(p);
    double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (v == NULL) {
        *oom = true;
        return NULL;
    }
    const int64_t es = (int64_t)kv_dtype_size(p->dtype);
    char *tmp = malloc((size_t)(n > 0 ? n : 1) * (size_t)es);
    if (tmp == NULL) {
        free(v);
        *oom = true;
        return NULL;
    }
    kv_cpu_gather(p, tmp);
    for (int64_t i = 0; i < n; i++) v[i] = nm_load(p->dtype, tmp + i * es);
    free(tmp);
    return v;
}

/* A group of finite values whose sums of squares overflow f64 (a row
 * holding +-DBL_MAX: variance near 1e616) is normalized as the reference
 * does it, in a copy scaled by s = 2^-e (exact), two-pass: mean and rstd
 * of x*s, with eps*s^2. Returns false (nothing changed) when the group
 * holds a NaN or an infinity: those propagate as before. */
static bool nm_stats_scaled(kv_dtype dt, const char *x, int64_t n, double eps, double *mean, double *rstd,
                            double *scale) {
    double big = 0.0;
    for (int64_t j = 0; j < n; j++) {
        const double v = fabs(nm_load(dt, x + j * (int64_t)kv_dtype_size(dt)));
        if (!isfinite(v)) return false;
        if (v > big) big = v;
    }
    int e;
    frexp(big, &e);
    const double s = ldexp(1.0, -e);
    double sum = 0.0, sq = 0.0;
    for (int64_t j = 0; j < n; j++) sum += nm_load(dt, x + j * (int64_t)kv_dtype_size(dt)) * s;
    const double m = sum / (double)n;
    for (int64_t j = 0; j < n; j++) {
        const double t = nm_load(dt, x + j * (int64_t)kv_dtype_size(dt)) * s - m;
        sq += t * t;
    }
    *mean = m;
    *rstd = 1.0 / sqrt(sq / (double)n + eps * s * s);
    *scale = s;
    return true;
}

/* Statistics of x[0..n) (contiguous, dtype dt): mean and rstd of x*scale
 * (scale is 1 unless nm_stats_scaled had to step in). */
static void nm_stats(kv_dtype dt, const char *x, int64_t n, bool fused, double eps, double *mean, double *rstd,
                     double *scale) {
    *scale = 1.0;
    double s[LANES] = { 0 }, q[LANES] = { 0 }, c[LANES] = { 0 }, w[LANES] = { 0 };
    int64_t i = 0;
    if (dt == KV_F32) {
        const float *f = (const float *)x;
        if (fused) {
            for (; i + LANES <= n; i += LANES)
                for (int l = 0; l < LANES; l++) {
                    const double v = (double)f[i + l];
                    s[l] += v;
                    q[l] += v * v;
                }
            for (; i < n; i++) {
                s[0] += (double)f[i];
                q[0] += (double)f[i] * (double)f[i];
            }
        } else {
            for (; i + LANES <= n; i += LANES)
                for (int l = 0; l < LANES; l++) s[l] += (double)f[i + l];
            for (; i < n; i++) s[0] += (double)f[i];
        }
    } else {
        const double *f = (const double *)x;
        if (fused) {
            /* Welford per lane: c counts, w the running mean, q the sum of
             * squared deviations from it. */
            for (; i + LANES <= n; i += LANES)
                for (int l = 0; l < LANES; l++) {
                    s[l] += f[i + l];
                    c[l] += 1.0;
                    const double d = f[i + l] - w[l];
                    w[l] += d / c[l];
                    q[l] += d * (f[i + l] - w[l]);
                }
            for (; i < n; i++) {
                s[0] += f[i];
                c[0] += 1.0;
                const double d = f[i] - w[0];
                w[0] += d / c[0];
                q[0] += d * (f[i] - w[0]);
            }
        } else {
            for (; i + LANES <= n; i += LANES)
                for (int l = 0; l < LANES; l++) s[l] += f[i + l];
            for (; i < n; i++) s[0] += f[i];
        }
    }
    const double cnt = (double)n;
    const double sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    const double m = sum / cnt;
    double var;
    if (fused && dt == KV_F64) {
        /* Chan, Golub and LeVeque's merge of the lanes' (count, mean, M2). */
        double cm = c[0], wm = w[0], m2 = q[0];
        for (int l = 1; l < LANES; l++) {
            if (c[l] == 0.0) continue;
            const double t = cm + c[l], d = w[l] - wm;
            wm += d * (c[l] / t);
            m2 += q[l] + d * d * (cm * c[l] / t);
            cm = t;
        }
        var = m2 / cnt;
    } else if (fused) {
        const double sq = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
        var = sq / cnt - m * m;
        if (var < 0.0) var = 0.0;
    } else {
        double d[LANES] = { 0 };
        int64_t j = 0;
        if (dt == KV_F32) {
            const float *f = (const float *)x;
            for (; j + LANES <= n; j += LANES)
                for (int l = 0; l < LANES; l++) {
                    const double t = (double)f[j + l] - m;
                    d[l] += t * t;
                }
            for (; j < n; j++) d[0] += ((double)f[j] - m) * ((double)f[j] - m);
        } else {
            const double *f = (const double *)x;
            for (; j + LANES <= n; j += LANES)
                for (int l = 0; l < LANES; l++) {
                    const double t = f[j + l] - m;
                    d[l] += t * t;
                }
            for (; j < n; j++) d[0] += (f[j] - m) * (f[j] - m);
        }
        var = (((d[0] + d[1]) + (d[2] + d[3])) + ((d[4] + d[5]) + (d[6] + d[7]))) / cnt;
    }
    /* NaN/Inf inputs: keep the reference's propagation (var of them is NaN). */
    if ((!isfinite(sum) || !isfinite(var)) && n > 0 && nm_stats_scaled(dt, x, n, eps, mean, rstd, scale)) return;
    if (isnan(sum) || isinf(sum)) var = NAN;
    *mean = m;
    *rstd = 1.0 / sqrt(var + eps);
}

/* y[j] = ((x[j] - mean) * rstd) * w[pj] + b[pj], pj = j / per_param. */
static void nm_apply(kv_dtype dt, const char *x, char *y, int64_t n, double mean, double rstd, double scale,
                     const double *w, const double *b, int64_t per) {
    const bool f = dt == KV_F32;
    for (int64_t j = 0; j < n; j++) {
        double v = ((f ? (double)((const float *)x)[j] : ((const double *)x)[j]) * scale - mean) * rstd;
        if (w) v = v * w[j / per];
        if (b) v = v + b[j / per];
        nm_store(dt, y, j, v);
    }
}

/* ---- analysis ---- */

static bool nm_opt_param(const kv_stack *s, int i, kv_dtype dt, const kv_tensor **out) {
    if (i >= s->size) return false;
    if (s->slots[i].tag == KV_IV_NONE) {
        *out = NULL;
        return true;
    }
    if (s->slots[i].tag != KV_IV_TENSOR) return false;
    *out = s->slots[i].v.tensor;
    return kv_cpu_plain(*out) && (*out)->dtype == dt;
}

typedef struct nm_call {
    bool group;
    const kv_tensor *x, *w, *b;
    double eps;
    int axis;             /* layer norm: first normalized dim */
    int64_t N, C, HxW, G; /* group norm */
} nm_call;

static bool nm_analyze(const kv_op *op, const kv_stack *s, nm_call *c) {
    memset(c, 0, sizeof *c);
    const int id = kv_op_builtin_id(op);
    if (id != KV_OP_NATIVE_LAYER_NORM && id != KV_OP_NATIVE_GROUP_NORM) return false;
    if (s->size < 5 || s->slots[0].tag != KV_IV_TENSOR) return false;
    const kv_tensor *x = s->slots[0].v.tensor;
    if (!kv_cpu_plain(x) || (x->dtype != KV_F32 && x->dtype != KV_F64)) return false;
    c->x = x;
    if (id == KV_OP_NATIVE_LAYER_NORM) {
        if (s->slots[1].tag != KV_IV_INT_LIST || s->slots[4].tag != KV_IV_DOUBLE) return false;
        const kv_int_list ns = s->slots[1].v.ints;
        if (ns.n < 1 || !kv_ref_ln_trailing_match(x, ns)) return false;
        c->axis = x->ndim - ns.n;
        if (!nm_opt_param(s, 2, x->dtype, &c->w) || !nm_opt_param(s, 3, x->dtype, &c->b)) return false;
        const kv_tensor *ps[2] = { c->w, c->b };
        for (int k = 0; k < 2; k++) {
            if (ps[k] != NULL && !kv_ref_sizes_are(ps[k], ns)) return false;
        }
        c->eps = s->slots[4].v.d;
        return true;
    }
    c->group = true;
    if (s->size < 8) return false;
    for (int i = 3; i <= 6; i++)
        if (s->slots[i].tag != KV_IV_INT) return false;
    if (s->slots[7].tag != KV_IV_DOUBLE) return false;
    c->N = s->slots[3].v.i;
    c->C = s->slots[4].v.i;
    c->HxW = s->slots[5].v.i;
    c->G = s->slots[6].v.i;
    c->eps = s->slots[7].v.d;
    if (c->N < 0 || c->C < 0 || c->HxW < 0 || c->G <= 0 || c->C % c->G != 0) return false;
    int64_t spatial = 1;
    for (int d = 2; d < x->ndim; d++) spatial *= x->sizes[d];
    if (x->ndim < 2 || x->sizes[0] != c->N || x->sizes[1] != c->C || spatial != c->HxW) return false;
    if (!nm_opt_param(s, 1, x->dtype, &c->w) || !nm_opt_param(s, 2, x->dtype, &c->b)) return false;
    if (c->w && (c->w->ndim != 1 || c->w->sizes[0] != c->C)) return false;
    if (c->b && (c->b->ndim != 1 || c->b->sizes[0] != c->C)) return false;
    return true;
}

static bool nm_layer_only(const kv_op *op, const kv_stack *s) {
    nm_call c;
    return nm_analyze(op, s, &c) && !c.group;
}

bool kv_cpu_norm_fused_pred(const kv_op *op, const kv_stack *stack) {
    nm_call c;
    return nm_analyze(op, stack, &c);
}

bool kv_cpu_norm_vec_pred(const kv_op *op, const kv_stack *stack) { return nm_layer_only(op, stack); }

/* ---- the kernel ---- */

static kv_status nm_run(const kv_op *op, kv_stack *stack, bool fused) {
    nm_call c;
    if (!nm_analyze(op, stack, &c))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the normalization variant does not cover this call", kv_op_name(op));
    const kv_tensor *x = c.x;
    const kv_dtype dt = x->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    int64_t stat_sizes[KV_MAX_DIMS];
    int stat_nd;
    int64_t groups, count, per_param, sub_nd;
    int64_t sub_sizes[KV_MAX_DIMS], sub_strides[KV_MAX_DIMS];
    if (c.group) {
        stat_sizes[0] = c.N;
        stat_sizes[1] = c.G;
        stat_nd = 2;
        groups = c.N * c.G;
        per_param = c.HxW;
        count = (c.C / c.G) * c.HxW;
        sub_nd = x->ndim - 1;
        sub_sizes[0] = c.C / c.G;
        sub_strides[0] = x->strides[1];
        for (int d = 2; d < x->ndim; d++) {
            sub_sizes[d - 1] = x->sizes[d];
            sub_strides[d - 1] = x->strides[d];
        }
    } else {
        stat_nd = x->ndim;
        kv_ref_ln_split(x, c.axis, stat_sizes, &groups, &count);
        per_param = 1;
        sub_nd = x->ndim - c.axis;
        for (int d = 0; d < sub_nd; d++) {
            sub_sizes[d] = x->sizes[c.axis + d];
            sub_strides[d] = x->strides[c.axis + d];
        }
    }
    kv_tensor *out = kv_cpu_new(x->sizes, x->ndim, dt);
    kv_tensor *mean = out ? kv_cpu_new(stat_sizes, stat_nd, dt) : NULL;
    kv_tensor *rstd = mean ? kv_cpu_new(stat_sizes, stat_nd, dt) : NULL;
    bool oom = rstd == NULL;
    double *w = oom ? NULL : nm_param(c.w, &oom);
    double *b = oom ? NULL : nm_param(c.b, &oom);
    const bool contig = kv_cpu_contig(x);
    char *buf = (!oom && !contig) ? malloc((size_t)(count > 0 ? count : 1) * (size_t)es) : NULL;
    if (oom || (!contig && buf == NULL)) {
        kv_tensor_release(out);
        kv_tensor_release(mean);
        kv_tensor_release(rstd);
        free(w);
        free(b);
        free(buf);
        return kv_error(KV_ERR_OOM, "%s: could not allocate the results", kv_op_name(op));
    }
    const char *src = kv_tensor_data(x);
    char *dst = kv_tensor_data(out);
    int64_t cs[KV_MAX_DIMS];
    kv_contiguous_strides(sub_sizes, (int)sub_nd, cs);
    for (int64_t g = 0; g < groups; g++) {
        const char *gx;
        if (contig) {
            gx = src + g * count * es;
        } else {
            int64_t off;
            if (c.group) {
                off = (g / c.G) * x->strides[0] + (g % c.G) * (c.C / c.G) * x->strides[1];
            } else {
                off = 0;
                int64_t lin = g;
                for (int d = c.axis - 1; d >= 0; d--) {
                    off += (lin % x->sizes[d]) * x->strides[d];
                    lin /= x->sizes[d];
                }
            }
            kv_cpu_copy_strided(buf, cs, src + off * es, sub_strides, sub_sizes, (int)sub_nd, (size_t)es);
            gx = buf;
        }
        double mu, rs, sc;
        nm_stats(dt, gx, count, fused, c.eps, &mu, &rs, &sc);
        const int64_t pbase = c.group ? (g % c.G) * (c.C / c.G) : 0;
        nm_apply(dt, gx, dst + g * count * es, count, mu, rs, sc, w ? w + pbase : NULL, b ? b + pbase : NULL,
                 per_param);
        nm_store(dt, kv_tensor_data(mean), g, mu / sc);
        nm_store(dt, kv_tensor_data(rstd), g, rs * sc);
    }
    free(w);
    free(b);
    free(buf);
    kv_tensor *res[3] = { out, mean, rstd };
    kv_stack_return_tensors(stack, res, 3);
    return KV_OK;
}

kv_status kv_cpu_norm_fused_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return nm_run(op, stack, true);
}

kv_status kv_cpu_norm_vec_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return nm_run(op, stack, false);
}
