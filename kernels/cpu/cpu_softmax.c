/* Optimized _softmax and _log_softmax, f32 and f64, any dim and strides:
 *   "vec"    three vectorized passes per slice (max, exp and sum, scale)
 *            over a contiguous f64 copy of the slice;
 *   "fused"  one pass computes max and sum together (online softmax:
 *            when the running max grows, the sum so far is rescaled by
 *            exp(old - new)), a second writes the outputs: the input is
 *            read twice instead of three times, with no copy.
 * Both compute in f64 with cpu_vmath.h's exp (relative error ~4e-16),
 * then round once. The result is within gamma_{n+6}*|e| (the table's
 * bound) for f32 and for f64: exp's few f64 ulps, the sum's gamma_n and
 * one division. log_softmax is (x - max) - log(sum), as the reference.
 * NaN anywhere in a slice makes the whole slice NaN, +Inf gives NaN, a
 * slice of all -Inf gives NaN: the reference's rules. half_to_float=true,
 * other dtypes and bad dims go to the reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"
#include "ref/ref_shared.h"

#define CPU_TARGET
#include "cpu/cpu_vmath.h"

#define LANES 8

typedef struct sm_call {
    const kv_tensor *x;
    int dim;
    bool log_form;
} sm_call;

static bool sm_analyze(const kv_op *op, const kv_stack *s, sm_call *c) {
    const int id = kv_op_builtin_id(op);
    if (id != KV_OP__SOFTMAX && id != KV_OP__LOG_SOFTMAX) return false;
    if (s->size < 3 || s->slots[0].tag != KV_IV_TENSOR || s->slots[1].tag != KV_IV_INT || s->slots[2].tag != KV_IV_BOOL)
        return false;
    const kv_tensor *x = s->slots[0].v.tensor;
    if (!kv_cpu_plain(x) || (x->dtype != KV_F32 && x->dtype != KV_F64) || s->slots[2].v.b) return false;
    const int lim = x->ndim > 0 ? x->ndim : 1;
    int64_t d = s->slots[1].v.i;
    if (d < -lim || d >= lim) return false;
    if (d < 0) d += lim;
    c->x = x;
    c->dim = (int)d;
    c->log_form = id == KV_OP__LOG_SOFTMAX;
    return true;
}

bool kv_cpu_softmax_pred(const kv_op *op, const kv_stack *stack) {
    sm_call c;
    return sm_analyze(op, stack, &c);
}

static double sm_load(kv_dtype dt, const char *p) { return dt == KV_F32 ? (double)*(const float *)p : *(const double *)p; }
static void sm_store(kv_dtype dt, char *p, double v) {
    if (dt == KV_F32) *(float *)p = (float)v;
    else *(double *)p = v;
}

/* Max of b[0..n) (NaN when one is NaN). */
static double sm_max(const double *b, int64_t n) {
    double m[LANES];
    int nan[LANES];
    for (int l = 0; l < LANES; l++) {
        m[l] = -INFINITY;
        nan[l] = 0;
    }
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            nan[l] |= b[i + l] != b[i + l];
            m[l] = b[i + l] > m[l] ? b[i + l] : m[l];
        }
    for (; i < n; i++) {
        nan[0] |= b[i] != b[i];
        m[0] = b[i] > m[0] ? b[i] : m[0];
    }
    double r = -INFINITY;
    for (int l = 0; l < LANES; l++) {
        if (nan[l]) return NAN;
        r = m[l] > r ? m[l] : r;
    }
    return r;
}

/* "vec": one slice through a contiguous f64 buffer. */
static void sm_slice_vec(const sm_call *c, const char *in, int64_t len, int64_t is, char *o, int64_t os, double *b) {
    const kv_dtype dt = c->x->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    if (dt == KV_F32 && is == 1) {
        const float *x = (const float *)in;
        for (int64_t i = 0; i < len; i++) b[i] = (double)x[i];
    } else {
        for (int64_t i = 0; i < len; i++) b[i] = sm_load(dt, in + i * is * es);
    }
    const double m = sm_max(b, len);
    double lane[LANES] = { 0 };
    int64_t i = 0;
    if (!c->log_form) {
        for (; i + LANES <= len; i += LANES)
            for (int l = 0; l < LANES; l++) {
                b[i + l] = vm_exp(b[i + l] - m);
                lane[l] += b[i + l];
            }
        for (; i < len; i++) {
            b[i] = vm_exp(b[i] - m);
            lane[0] += b[i];
        }
    } else {
        for (; i + LANES <= len; i += LANES)
            for (int l = 0; l < LANES; l++) lane[l] += vm_exp(b[i + l] - m);
        for (; i < len; i++) lane[0] += vm_exp(b[i] - m);
    }
    const double s = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    if (c->log_form) {
        const double ls = log(s);
        for (int64_t j = 0; j < len; j++) b[j] = (b[j] - m) - ls;
    } else {
        const double inv = s;
        for (int64_t j = 0; j < len; j++) b[j] = b[j] / inv;
    }
    if (dt == KV_F32 && os == 1) {
        float *y = (float *)o;
        for (int64_t j = 0; j < len; j++) y[j] = (float)b[j];
    } else {
        for (int64_t j = 0; j < len; j++) sm_store(dt, o + j * os * es, b[j]);
    }
}

/* "fused": online max and sum in chunks of LANES, then the outputs. */
static void sm_slice_fused(const sm_call *c, const char *in, int64_t len, int64_t is, char *o, int64_t os) {
    const kv_dtype dt = c->x->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    double m = -INFINITY, s = 0.0;
    bool nan = false;
    double v[LANES];
    for (int64_t i = 0; i < len; i += LANES) {
        const int n = len - i < LANES ? (int)(len - i) : LANES;
        if (dt == KV_F32 && is == 1) {
            const float *x = (const float *)in + i;
            for (int l = 0; l < n; l++) v[l] = (double)x[l];
        } else {
            for (int l = 0; l < n; l++) v[l] = sm_load(dt, in + (i + l) * is * es);
        }
        double cm = -INFINITY;
        for (int l = 0; l < n; l++) {
            nan = nan || v[l] != v[l];
            cm = v[l] > cm ? v[l] : cm;
        }
        const double mn = cm > m ? cm : m;
        /* All -Inf so far: nothing to add yet (and -Inf - -Inf is NaN). */
        if (mn == -INFINITY) continue;
        double add = 0.0;
        for (int l = 0; l < n; l++) add += vm_exp(v[l] - mn);
        s = s * vm_exp(m - mn) + add;
        m = mn;
    }
    if (nan) m = s = NAN;
    if (m == -INFINITY) m = s = NAN; /* every element -Inf: the reference's 0/0 */
    const double ls = c->log_form ? log(s) : 0.0;
    if (dt == KV_F32 && is == 1 && os == 1) {
        const float *x = (const float *)in;
        float *y = (float *)o;
        if (c->log_form)
            for (int64_t j = 0; j < len; j++) y[j] = (float)(((double)x[j] - m) - ls);
        else
            for (int64_t j = 0; j < len; j++) y[j] = (float)(vm_exp((double)x[j] - m) / s);
        return;
    }
    for (int64_t j = 0; j < len; j++) {
        const double xv = sm_load(dt, in + j * is * es);
        sm_store(dt, o + j * os * es, c->log_form ? (xv - m) - ls : vm_exp(xv - m) / s);
    }
}

static kv_status sm_run(const kv_op *op, kv_stack *stack, bool fused) {
    sm_call c;
    if (!sm_analyze(op, stack, &c))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the softmax variant does not cover this call", kv_op_name(op));
    const kv_tensor *x = c.x;
    kv_tensor *out = kv_cpu_new(x->sizes, x->ndim, x->dtype);
    if (out == NULL) return kv_last_error();
    const int nd = x->ndim;
    const int64_t len = nd ? x->sizes[c.dim] : 1;
    const int64_t is = nd ? x->strides[c.dim] : 0, os = nd ? out->strides[c.dim] : 0;
    int64_t nslices = 1;
    for (int d = 0; d < nd; d++)
        if (d != c.dim) nslices *= x->sizes[d];
    if (len == 0) nslices = 0;
    double *buf = NULL;
    if (!fused && nslices > 0) {
        buf = malloc(sizeof(double) * (size_t)len);
        if (buf == NULL) {
            kv_tensor_release(out);
            return kv_error(KV_ERR_OOM, "%s: no memory for a slice of %lld elements", kv_op_name(op), (long long)len);
        }
    }
    const int64_t es = (int64_t)kv_dtype_size(x->dtype);
    const char *src = kv_tensor_data(x);
    char *dst = kv_tensor_data(out);
    for (int64_t sl = 0; sl < nslices; sl++) {
        const char *in = src + kv_ref_linear_offset(sl, nd, x->sizes, x->strides, c.dim) * es;
        char *o = dst + kv_ref_linear_offset(sl, nd, out->sizes, out->strides, c.dim) * es;
        if (fused) sm_slice_fused(&c, in, len, is, o, os);
        else sm_slice_vec(&c, in, len, is, o, os, buf);
    }
    free(buf);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

kv_status kv_cpu_softmax_vec_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return sm_run(op, stack, false);
}

kv_status kv_cpu_softmax_fused_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return sm_run(op, stack, true);
}
