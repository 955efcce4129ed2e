/* What one CUDA thread computes: one output element (or one slice, one
 * row). Valid C17 and CUDA C++, compiled into the .cu kernels by nvcc and
 * into the emulation (cuda_emu.c) by gcc, so the arithmetic that runs on
 * the GPU is the arithmetic the tests check here.
 *
 * Every formula, accumulation order and NaN rule is the reference's
 * (kernels/ref): values widen to double, accumulate in index order,
 * round once on store. Built without FMA contraction (nvcc --fmad=false,
 * gcc -ffp-contract=off) so a + alpha*b rounds as the reference does: once, through fma. */
#ifndef KV_CUDA_ELEM_H
#define KV_CUDA_ELEM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda/cuda_api.h"
#include "ref/ref_dot_rescue.h"

#ifdef __CUDACC__
#define KVC_HD __host__ __device__ static inline
#else
#define KVC_HD static inline
#endif

#define KVC_PI 3.14159265358979323846

KVC_HD int64_t kvc_offset(const kvc_geom *g, int64_t i) {
    int64_t off = g->offset;
    for (int d = g->ndim - 1; d >= 0; d--) {
        const int64_t s = g->sizes[d];
        off += (i % s) * g->strides[d];
        i /= s;
    }
    return off;
}

KVC_HD double kvc_ld(int dt, const void *base, int64_t off) {
    return dt == KVC_F32 ? (double)((const float *)base)[off] : ((const double *)base)[off];
}

KVC_HD void kvc_st(int dt, void *base, int64_t off, double v) {
    if (dt == KVC_F32) ((float *)base)[off] = (float)v;
    else ((double *)base)[off] = v;
}

/* An element moved as it is (NaN payloads, signed zeros, any dtype). */
KVC_HD void kvc_move(int esize, void *dst, int64_t doff, const void *src, int64_t soff) {
    switch (esize) {
    case 1: ((uint8_t *)dst)[doff] = ((const uint8_t *)src)[soff]; break;
    case 2: ((uint16_t *)dst)[doff] = ((const uint16_t *)src)[soff]; break;
    case 4: ((uint32_t *)dst)[doff] = ((const uint32_t *)src)[soff]; break;
    case 8: ((uint64_t *)dst)[doff] = ((const uint64_t *)src)[soff]; break;
    default: /* 16: complex128 */
        ((uint64_t *)dst)[2 * doff] = ((const uint64_t *)src)[2 * soff];
        ((uint64_t *)dst)[2 * doff + 1] = ((const uint64_t *)src)[2 * soff + 1];
        break;
    }
}

/* ---- elementwise ---- */

KVC_HD double kvc_unary_value(const kvc_unary_args *a, double v) {
    switch (a->op) {
    case KVC_NEG: return -v;
    case KVC_ABS: return fabs(v);
    case KVC_EXP: return exp(v);
    case KVC_LOG: return log(v);
    case KVC_SQRT: return sqrt(v);
    case KVC_RSQRT: return 1.0 / sqrt(v);
    case KVC_SIN: return sin(v);
    case KVC_COS: return cos(v);
    case KVC_TANH: return tanh(v);
    /* Below 0, e^v/(1 + e^v): exp(-v) overflows below -709.78 (ref_unary.c). */
    case KVC_SIGMOID: return v >= 0.0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v));
    case KVC_RELU: return v < 0.0 ? 0.0 : v;
    /* Below -708 e^v is subnormal: (v e^(v/2)) e^(v/2) keeps its digits. */
    case KVC_SILU:
        if (v >= 0.0) return v / (1.0 + exp(-v));
        if (v < -708.0) return (v * exp(0.5 * v)) * exp(0.5 * v);
        return v * exp(v) / (1.0 + exp(v));
    case KVC_GELU: return v * 0.5 * (1.0 + erf(v / sqrt(2.0)));
    case KVC_GELU_TANH: return 0.5 * v * (1.0 + tanh(sqrt(2.0 / KVC_PI) * (v + 0.044715 * v * v * v)));
    case KVC_POW: return pow(v, a->p0);
    case KVC_CLAMP:
        /* A NaN input or a NaN bound that is present gives NaN. */
        if (isnan(v)) return v;
        if (a->has_lo && isnan(a->p0)) return a->p0;
        if (a->has_hi && isnan(a->p1)) return a->p1;
        if (a->has_lo && v < a->p0) v = a->p0;
        if (a->has_hi && a->p1 < v) v = a->p1;
        return v;
    default: return v;
    }
}

KVC_HD void kvc_unary_one(const kvc_unary_args *a, int64_t i) {
    const double v = kvc_ld(a->dtype, a->in, kvc_offset(&a->ig, i));
    kvc_st(a->dtype, a->out, kvc_offset(&a->og, i), kvc_unary_value(a, v));
}

/* IEEE 754-2019 maximum/minimum: the first NaN wins, -0 < +0. */
KVC_HD double kvc_binary_value(int op, double x, double y, double alpha) {
    switch (op) {
    case KVC_ADD: return alpha == 1.0 ? x + y : fma(alpha, y, x);
    case KVC_SUB: return alpha == 1.0 ? x - y : fma(-alpha, y, x);
    case KVC_MUL: return x * y;
    case KVC_DIV: return x / y;
    case KVC_MAXIMUM:
        if (isnan(x)) return x;
        if (isnan(y)) return y;
        if (x == y) return signbit(x) ? y : x;
        return x > y ? x : y;
    case KVC_MINIMUM:
        if (isnan(x)) return x;
        if (isnan(y)) return y;
        if (x == y) return signbit(x) ? x : y;
        return x < y ? x : y;
    default: return x;
    }
}

KVC_HD void kvc_binary_one(const kvc_binary_args *a, int64_t i) {
    const double x = kvc_ld(a->dtype, a->a, kvc_offset(&a->ga, i));
    const double y = kvc_ld(a->dtype, a->b, kvc_offset(&a->gb, i));
    kvc_st(a->dtype, a->out, kvc_offset(&a->og, i), kvc_binary_value(a->op, x, y, a->alpha));
}

KVC_HD void kvc_copy_one(const kvc_copy_args *a, int64_t i) {
    const int64_t oo = kvc_offset(&a->og, i), io = kvc_offset(&a->ig, i);
    if (a->out_kind == KVC_RAW) kvc_move(a->esize, a->out, oo, a->in, io);
    else kvc_st(a->out_kind, a->out, oo, kvc_ld(a->in_kind, a->in, io));
}

/* ---- masked_fill and bernoulli ---- */

KVC_HD void kvc_masked_fill_one(const kvc_masked_fill_args *a, int64_t i) {
    const int64_t oo = kvc_offset(&a->og, i);
    if (((const uint8_t *)a->mask)[kvc_offset(&a->gm, i)]) memcpy((char *)a->out + oo * a->esize, a->value, (size_t)a->esize);
    else if (a->src) kvc_move(a->esize, a->out, oo, a->src, kvc_offset(&a->gs, i));
}

/* kv_rng_u64 of src/core/rng.c, restated for the device (a plugin links
 * nothing of libkv): SplitMix64's finalizer twice, the counter folded in
 * between. The emulation tests compare every value with the reference,
 * so the two cannot drift apart unnoticed. */
KVC_HD uint64_t kvc_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

KVC_HD uint64_t kvc_rng_u64(uint64_t key, uint64_t counter) {
    const uint64_t k = kvc_mix64(key * 0xD1B54A32D192ED03ull + 0x9E3779B97F4A7C15ull);
    return kvc_mix64(k ^ kvc_mix64((counter + 1u) * 0x9E3779B97F4A7C15ull));
}

KVC_HD void kvc_bernoulli_one(const kvc_bernoulli_args *a, int64_t i) {
    const uint64_t bits = kvc_rng_u64(a->seed, a->first + (uint64_t)i) >> 11;
    memcpy((char *)a->out + i * a->esize, (double)bits < a->limit ? a->one : a->zero, (size_t)a->esize);
}

/* ---- reductions ---- */

KVC_HD void kvc_reduce_one(const kvc_reduce_args *a, int64_t o) {
    const int64_t base = kvc_offset(&a->kept, o);
    if (a->op == KVC_AMAX) {
        /* A later element wins only when strictly greater; NaN beats
         * everything and the first NaN stays. Its bytes are copied. */
        int64_t best = base + kvc_offset(&a->reduced, 0);
        double bv = kvc_ld(a->in_dtype, a->in, best);
        for (int64_t r = 1; r < a->nred; r++) {
            const int64_t off = base + kvc_offset(&a->reduced, r);
            const double x = kvc_ld(a->in_dtype, a->in, off);
            if (!isnan(bv) && (isnan(x) || x > bv)) {
                best = off;
                bv = x;
            }
        }
        kvc_move(a->in_dtype == KVC_F32 ? 4 : 8, a->out, o, a->in, best);
        return;
    }
    double acc = 0.0;
    for (int64_t r = 0; r < a->nred; r++) {
        double x = kvc_ld(a->in_dtype, a->in, base + kvc_offset(&a->reduced, r));
        if (a->out_dtype == KVC_F32 && a->in_dtype == KVC_F64) x = (double)(float)x; /* converted first */
        acc += x;
    }
    if (a->op == KVC_MEAN) acc = acc / (double)a->nred;
    kvc_st(a->out_dtype, a->out, o, acc);
}

/* ---- matmul ---- */

KVC_HD void kvc_mm_one(const kvc_mm_args *a, int64_t idx) {
    const int64_t per = a->n * a->m;
    const int64_t bb = idx / per, rem = idx - bb * per;
    const int64_t i = rem / a->m, j = rem - i * a->m;
    const int64_t ab = a->a_off + bb * a->as_b + i * a->as0, bbase = a->b_off + bb * a->bs_b + j * a->bs1;
    double acc = 0.0;
    for (int64_t p = 0; p < a->k; p++)
        acc += kvc_ld(a->dtype, a->a, ab + p * a->as1) * kvc_ld(a->dtype, a->b, bbase + p * a->bs0);
    /* An f64 sum that overflowed is recomputed as the reference does. */
    if (a->dtype == KVC_F64 && !isfinite(acc))
        acc = kv_ref_dot_f64_rescued((const double *)a->a + ab, a->as1, (const double *)a->b + bbase, a->bs0, a->k);
    if (a->scale) acc = a->alpha * acc;
    if (a->use_self) acc = a->beta * kvc_ld(a->dtype, a->self, a->s_off + i * a->ss0 + j * a->ss1) + acc;
    kvc_st(a->dtype, a->out, idx, acc);
}

/* ---- softmax over one slice ---- */

KVC_HD void kvc_softmax_one(const kvc_softmax_args *a, int64_t s) {
    const int64_t ib = kvc_offset(&a->islices, s), ob = kvc_offset(&a->oslices, s);
    double m = -(double)INFINITY;
    for (int64_t i = 0; i < a->len; i++) {
        const double x = kvc_ld(a->dtype, a->in, ib + i * a->in_stride);
        if (isnan(x) || x > m) m = isnan(m) ? m : x;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < a->len; i++) sum += exp(kvc_ld(a->dtype, a->in, ib + i * a->in_stride) - m);
    const double log_sum = log(sum);
    for (int64_t i = 0; i < a->len; i++) {
        const double x = kvc_ld(a->dtype, a->in, ib + i * a->in_stride);
        const double v = a->log_form ? (x - m) - log_sum : exp(x - m) / sum;
        kvc_st(a->dtype, a->out, ob + i * a->out_stride, v);
    }
}

/* ---- layer norm over one row: two passes in f64 ---- */

/* A row whose largest finite |x| is above 2^500 is normalized scaled by
 * s = 2^-e (exact), as the reference does: its squares would overflow. */
KVC_HD double kvc_layer_norm_scale(const kvc_layer_norm_args *a, int64_t xb) {
    double big = 0.0;
    for (int64_t j = 0; j < a->cols; j++) {
        const double v = fabs(kvc_ld(a->dtype, a->x, xb + kvc_offset(&a->xcol, j)));
        if (isfinite(v) && v > big) big = v;
    }
    if (big <= 0x1p500) return 1.0;
    int e;
    frexp(big, &e);
    return ldexp(1.0, -e);
}

KVC_HD void kvc_layer_norm_one(const kvc_layer_norm_args *a, int64_t r) {
    const int64_t xb = kvc_offset(&a->xrow, r), ob = kvc_offset(&a->orow, r);
    const double n = (double)a->cols;
    const double s = kvc_layer_norm_scale(a, xb);
    double sum = 0.0;
    for (int64_t j = 0; j < a->cols; j++) sum += kvc_ld(a->dtype, a->x, xb + kvc_offset(&a->xcol, j)) * s;
    const double mean_s = sum / n;
    double sq = 0.0;
    for (int64_t j = 0; j < a->cols; j++) {
        const double d = kvc_ld(a->dtype, a->x, xb + kvc_offset(&a->xcol, j)) * s - mean_s;
        sq += d * d;
    }
    const double rstd_s = 1.0 / sqrt(sq / n + a->eps * s * s);
    const double mean = mean_s / s, rstd = rstd_s * s;
    for (int64_t j = 0; j < a->cols; j++) {
        double v = (kvc_ld(a->dtype, a->x, xb + kvc_offset(&a->xcol, j)) * s - mean_s) * rstd_s;
        if (a->has_w) v = v * kvc_ld(a->dtype, a->w, kvc_offset(&a->wg, j));
        if (a->has_b) v = v + kvc_ld(a->dtype, a->b, kvc_offset(&a->bg, j));
        kvc_st(a->dtype, a->out, ob + kvc_offset(&a->ocol, j), v);
    }
    kvc_st(a->dtype, a->mean, r, mean);
    kvc_st(a->dtype, a->rstd, r, rstd);
}

#endif
