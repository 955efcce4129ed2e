/* The elementwise inner loops, compiled once per ISA level.
 *
 * The including file defines CPU_TARGET (a target attribute, e.g.
 * __attribute__((target("avx2")))), CPU_SFX (a name suffix) and
 * CPU_TABLE (the cpu_ew_table to define), then includes this file. Every
 * function below carries CPU_TARGET, so the same C becomes SSE2, AVX2 or
 * AVX-512 code while the rest of libkv stays baseline x86-64.
 *
 * Each loop has a contiguous path (all strides 1), a broadcast path for
 * binary ops (one operand of stride 0) and a strided path. Contiguous
 * loops carry `#pragma GCC ivdep`: iterations are independent, and the
 * only aliasing the predicates allow is an in-place output that IS an
 * input element for element (distance 0, not a loop-carried dependence).
 * Numerics are documented in cpu_ew.h. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/cpu_ew.h"
#include "cpu/cpu_vmath.h"

#define EW_CAT2(a, b) a##b
#define EW_CAT(a, b) EW_CAT2(a, b)
#define EW_FN(name) EW_CAT(name, CPU_SFX)

/* ---- element functions: float and double forms ---- */

static inline CPU_TARGET float ew_bits_f32_and(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    x &= y;
    memcpy(&a, &x, 4);
    return a;
}
static inline CPU_TARGET float ew_bits_f32_or(float a, float b) {
    uint32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    x |= y;
    memcpy(&a, &x, 4);
    return a;
}
static inline CPU_TARGET double ew_bits_f64_and(double a, double b) {
    return vm_double(vm_bits(a) & vm_bits(b));
}
static inline CPU_TARGET double ew_bits_f64_or(double a, double b) { return vm_double(vm_bits(a) | vm_bits(b)); }

/* IEEE maximum/minimum: the first NaN wins, +0 beats -0 (and vice versa). */
static inline CPU_TARGET float ew_max_f32(float a, float b) {
    float r = a == b ? ew_bits_f32_and(a, b) : (a > b ? a : b);
    r = b != b ? b : r;
    return a != a ? a : r;
}
static inline CPU_TARGET float ew_min_f32(float a, float b) {
    float r = a == b ? ew_bits_f32_or(a, b) : (a < b ? a : b);
    r = b != b ? b : r;
    return a != a ? a : r;
}
static inline CPU_TARGET double ew_max_f64(double a, double b) {
    double r = a == b ? ew_bits_f64_and(a, b) : (a > b ? a : b);
    r = b != b ? b : r;
    return a != a ? a : r;
}
static inline CPU_TARGET double ew_min_f64(double a, double b) {
    double r = a == b ? ew_bits_f64_or(a, b) : (a < b ? a : b);
    r = b != b ? b : r;
    return a != a ? a : r;
}

static inline CPU_TARGET double ew_gelu_d(double v) { return v * 0.5 * vm_one_plus_erf(v * 0.70710678118654752440); }
static inline CPU_TARGET double ew_gelu_tanh_d(double v) {
    return 0.5 * v * (1.0 + vm_tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v)));
}
static inline CPU_TARGET double ew_gelu_bwd_d(double g, double v) {
    const double cdf = 0.5 * vm_one_plus_erf(v * 0.70710678118654752440);
    const double pdf = vm_exp(-0.5 * v * v) * 0.39894228040143267794;
    return g * (cdf + v * pdf);
}
static inline CPU_TARGET double ew_gelu_tanh_bwd_d(double g, double v) {
    const double k = 0.79788456080286535588, c = 0.044715;
    const double t = vm_tanh(k * (v + c * v * v * v));
    const double dinner = k * (1.0 + 3.0 * c * v * v);
    return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner);
}

/* The reference's f64 formulas with libm, for f64 tensors (bitwise). */
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
static inline CPU_TARGET double ew_ref_gelu(double v) { return v * 0.5 * (1.0 + erf(v / sqrt(2.0))); }
static inline CPU_TARGET double ew_ref_gelu_tanh(double v) {
    return 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}
static inline CPU_TARGET double ew_ref_gelu_bwd(double g, double v) {
    const double cdf = 0.5 * (1.0 + erf(v / sqrt(2.0)));
    const double pdf = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
    return g * (cdf + v * pdf);
}
static inline CPU_TARGET double ew_ref_gelu_tanh_bwd(double g, double v) {
    const double k = sqrt(2.0 / M_PI), c = 0.044715;
    const double t = tanh(k * (v + c * v * v * v));
    const double dinner = k * (1.0 + 3.0 * c * v * v);
    return g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner);
}

/* ---- loop shapes ---- */

/* out = EXPR(a, b) with a = x[i], b = y[i]. */
#define EW_BINARY(name, TO, TI, EXPR)                                                             \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        (void)A;                                                                                  \
        TO *o = (TO *)p[0];                                                                       \
        const TI *x = (const TI *)p[1], *y = (const TI *)p[2];                                    \
        const int64_t so = s[0], sx = s[1], sy = s[2];                                            \
        if (so == 1 && sx == 1 && sy == 1) {                                                      \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                \
                const TI a = x[i], b = y[i];                                                      \
                o[i] = (EXPR);                                                                    \
            }                                                                                     \
        } else if (so == 1 && sx == 1 && sy == 0) {                                               \
            const TI b = y[0];                                                                    \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                \
                const TI a = x[i];                                                                \
                o[i] = (EXPR);                                                                    \
            }                                                                                     \
        } else if (so == 1 && sx == 0 && sy == 1) {                                               \
            const TI a = x[0];                                                                    \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                \
                const TI b = y[i];                                                                \
                o[i] = (EXPR);                                                                    \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                const TI a = x[i * sx], b = y[i * sy];                                            \
                o[i * so] = (EXPR);                                                               \
            }                                                                                     \
        }                                                                                         \
    }

/* out = EXPR(a) with a = x[i]. */
#define EW_UNARY(name, TO, TI, EXPR)                                                              \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        (void)A;                                                                                  \
        TO *o = (TO *)p[0];                                                                       \
        const TI *x = (const TI *)p[1];                                                           \
        const int64_t so = s[0], sx = s[1];                                                       \
        if (so == 1 && sx == 1) {                                                                 \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                \
                const TI a = x[i];                                                                \
                o[i] = (EXPR);                                                                    \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                const TI a = x[i * sx];                                                           \
                o[i * so] = (EXPR);                                                               \
            }                                                                                     \
        }                                                                                         \
    }

/* Comparisons write bool (one byte, 0 or 1) for the four real dtypes. */
#define EW_CMP4(name, OP)                                          \
    EW_BINARY(name##_f32, uint8_t, float, (uint8_t)(a OP b))       \
    EW_BINARY(name##_f64, uint8_t, double, (uint8_t)(a OP b))      \
    EW_BINARY(name##_i32, uint8_t, int32_t, (uint8_t)(a OP b))     \
    EW_BINARY(name##_i64, uint8_t, int64_t, (uint8_t)(a OP b))

/* ---- arithmetic ---- */

#define U32(v) ((uint32_t)(v))
#define U64(v) ((uint64_t)(v))

EW_BINARY(add_f32, float, float, A->alpha_one ? a + b : (float)((double)a + A->alpha * (double)b))
EW_BINARY(add_f64, double, double, A->alpha_one ? a + b : fma(A->alpha, b, a))
EW_BINARY(add_i32, int32_t, int32_t, (int32_t)(U32(a) + U32(A->ialpha) * U32(b)))
EW_BINARY(add_i64, int64_t, int64_t, (int64_t)(U64(a) + U64(A->ialpha) * U64(b)))
EW_BINARY(sub_f32, float, float, A->alpha_one ? a - b : (float)((double)a - A->alpha * (double)b))
EW_BINARY(sub_f64, double, double, A->alpha_one ? a - b : fma(-A->alpha, b, a))
EW_BINARY(sub_i32, int32_t, int32_t, (int32_t)(U32(a) - U32(A->ialpha) * U32(b)))
EW_BINARY(sub_i64, int64_t, int64_t, (int64_t)(U64(a) - U64(A->ialpha) * U64(b)))
EW_BINARY(mul_f32, float, float, a * b)
EW_BINARY(mul_f64, double, double, a * b)
EW_BINARY(mul_i32, int32_t, int32_t, (int32_t)(U32(a) * U32(b)))
EW_BINARY(mul_i64, int64_t, int64_t, (int64_t)(U64(a) * U64(b)))
EW_BINARY(div_f32, float, float, a / b)
EW_BINARY(div_f64, double, double, a / b)
EW_BINARY(max_f32, float, float, ew_max_f32(a, b))
EW_BINARY(max_f64, double, double, ew_max_f64(a, b))
EW_BINARY(max_i32, int32_t, int32_t, a > b ? a : b)
EW_BINARY(max_i64, int64_t, int64_t, a > b ? a : b)
EW_BINARY(min_f32, float, float, ew_min_f32(a, b))
EW_BINARY(min_f64, double, double, ew_min_f64(a, b))
EW_BINARY(min_i32, int32_t, int32_t, a < b ? a : b)
EW_BINARY(min_i64, int64_t, int64_t, a < b ? a : b)
EW_CMP4(eq, ==)
EW_CMP4(lt, <)
EW_BINARY(gelu_bwd_f32, float, float, (float)ew_gelu_bwd_d((double)a, (double)b))
EW_BINARY(gelu_bwd_f64, double, double, ew_ref_gelu_bwd(a, b))
EW_BINARY(gelu_tanh_bwd_f32, float, float, (float)ew_gelu_tanh_bwd_d((double)a, (double)b))
EW_BINARY(gelu_tanh_bwd_f64, double, double, ew_ref_gelu_tanh_bwd(a, b))

/* ---- unary ---- */

EW_UNARY(neg_f32, float, float, -a)
EW_UNARY(neg_f64, double, double, -a)
EW_UNARY(neg_i32, int32_t, int32_t, (int32_t)(0u - U32(a)))
EW_UNARY(neg_i64, int64_t, int64_t, (int64_t)(0u - U64(a)))
EW_UNARY(abs_f32, float, float, fabsf(a))
EW_UNARY(abs_f64, double, double, fabs(a))
EW_UNARY(abs_i32, int32_t, int32_t, a < 0 ? (int32_t)(0u - U32(a)) : a)
EW_UNARY(abs_i64, int64_t, int64_t, a < 0 ? (int64_t)(0u - U64(a)) : a)
EW_UNARY(relu_f32, float, float, a < 0.0f ? 0.0f : a)
EW_UNARY(relu_f64, double, double, a < 0.0 ? 0.0 : a)
EW_UNARY(relu_i32, int32_t, int32_t, a < 0 ? 0 : a)
EW_UNARY(relu_i64, int64_t, int64_t, a < 0 ? 0 : a)
EW_UNARY(sqrt_f32, float, float, sqrtf(a))
EW_UNARY(sqrt_f64, double, double, sqrt(a))
EW_UNARY(rsqrt_f32, float, float, (float)(1.0 / sqrt((double)a)))
EW_UNARY(rsqrt_f64, double, double, 1.0 / sqrt(a))
EW_UNARY(exp_f32, float, float, (float)vm_exp((double)a))
EW_UNARY(exp_f64, double, double, exp(a))
EW_UNARY(log_f32, float, float, (float)vm_log((double)a))
EW_UNARY(log_f64, double, double, log(a))
EW_UNARY(tanh_f32, float, float, (float)vm_tanh((double)a))
EW_UNARY(tanh_f64, double, double, tanh(a))
EW_UNARY(sigmoid_f32, float, float, (float)(1.0 / (1.0 + vm_exp(-(double)a))))
/* f64: e^a/(1 + e^a) below 0, where exp(-a) would overflow (ref_unary.c). */
EW_UNARY(sigmoid_f64, double, double, a >= 0.0 ? 1.0 / (1.0 + exp(-a)) : exp(a) / (1.0 + exp(a)))
EW_UNARY(silu_f32, float, float, (float)((double)a / (1.0 + vm_exp(-(double)a))))
/* Below -708 e^a is subnormal: (a e^(a/2)) e^(a/2) keeps its digits (ref_unary.c). */
static inline CPU_TARGET double EW_FN(silu_neg)(double a) {
    if (a < -708.0) {
        const double h = exp(0.5 * a);
        return (a * h) * h;
    }
    return a * exp(a) / (1.0 + exp(a));
}
EW_UNARY(silu_f64, double, double, a >= 0.0 ? a / (1.0 + exp(-a)) : EW_FN(silu_neg)(a))
EW_UNARY(gelu_f32, float, float, (float)ew_gelu_d((double)a))
EW_UNARY(gelu_f64, double, double, ew_ref_gelu(a))
EW_UNARY(gelu_tanh_f32, float, float, (float)ew_gelu_tanh_d((double)a))
EW_UNARY(gelu_tanh_f64, double, double, ew_ref_gelu_tanh(a))
EW_UNARY(sin_f64, double, double, sin(a))
EW_UNARY(cos_f64, double, double, cos(a))

/* sin/cos f32: the vector pass, then libm for the rare huge arguments. */
#define EW_TRIG_F32(name, VM, LIBM)                                                              \
    EW_UNARY(name##_vec, float, float, (float)VM((double)a))                                      \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        EW_FN(name##_vec)(n, p, s, A);                                                            \
        float *o = (float *)p[0];                                                                 \
        const float *x = (const float *)p[1];                                                     \
        for (int64_t i = 0; i < n; i++) {                                                         \
            const float a = x[i * s[1]];                                                          \
            if (fabsf(a) > (float)VM_TRIG_LIMIT) o[i * s[0]] = (float)LIBM((double)a);            \
        }                                                                                         \
    }
EW_TRIG_F32(sin_f32, vm_sin, sin)
EW_TRIG_F32(cos_f32, vm_cos, cos)

/* pow with a Scalar exponent. */
static inline CPU_TARGET float ew_pow_f32(float a, const cpu_ew_args *A) {
    const double d = (double)a;
    switch (A->pow_mode) {
    case CPU_POW_ZERO: return 1.0f;
    case CPU_POW_ONE: return a;
    case CPU_POW_TWO: return (float)(d * d);
    case CPU_POW_HALF: return d == 0.0 ? 0.0f : (d == -__builtin_inf() ? __builtin_inff() : (float)sqrt(d));
    case CPU_POW_MINUS_ONE: return (float)(1.0 / d);
    case CPU_POW_LIBM: return (float)pow(d, A->expo);
    }
    return 0.0f;
}
static inline CPU_TARGET double ew_pow_f64(double a, const cpu_ew_args *A) {
    switch (A->pow_mode) {
    case CPU_POW_ZERO: return 1.0;
    case CPU_POW_ONE: return a;
    case CPU_POW_TWO: return a * a;
    case CPU_POW_HALF: return a == 0.0 ? 0.0 : (a == -__builtin_inf() ? __builtin_inf() : sqrt(a));
    case CPU_POW_MINUS_ONE: return 1.0 / a;
    case CPU_POW_LIBM: return pow(a, A->expo);
    }
    return 0.0;
}
/* Square and multiply modulo 2^64, as the reference. */
static inline CPU_TARGET uint64_t ew_ipow(uint64_t base, uint64_t e) {
    uint64_t r = 1;
    for (; e != 0; e >>= 1) {
        if (e & 1u) r *= base;
        base *= base;
    }
    return r;
}
/* The mode is loop-invariant: one loop per mode keeps each one simple
 * enough to vectorize. */
#define EW_POW_MODES(name, T, FN)                                                                 \
    EW_UNARY(name##_two, T, T, (T)((double)a * (double)a))                                        \
    EW_UNARY(name##_other, T, T, FN(a, A))                                                        \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        if (A->pow_mode == CPU_POW_TWO) EW_FN(name##_two)(n, p, s, A);                            \
        else EW_FN(name##_other)(n, p, s, A);                                                     \
    }
EW_POW_MODES(pow_f32, float, ew_pow_f32)
EW_POW_MODES(pow_f64, double, ew_pow_f64)
EW_UNARY(pow_i32, int32_t, int32_t, (int32_t)ew_ipow(U64(a), U64(A->iexpo)))
EW_UNARY(pow_i64, int64_t, int64_t, (int64_t)ew_ipow(U64(a), U64(A->iexpo)))

/* ---- clamp ---- */

/* Scalar bounds: the NaN rules of the reference, then max with lo and
 * min with hi (lo > hi gives hi). */
#define EW_CLAMP_S_FLOAT(name, T)                                                                 \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        T *o = (T *)p[0];                                                                         \
        const T *x = (const T *)p[1];                                                             \
        const T lo = (T)A->lo, hi = (T)A->hi;                                                     \
        const bool hl = A->has_lo, hh = A->has_hi;                                                \
        /* A NaN bound makes every result that bound (after a NaN x). */                          \
        const bool lo_nan = hl && lo != lo, hi_nan = hh && hi != hi;                              \
        const T nanb = lo_nan ? lo : hi;                                                          \
        if (lo_nan || hi_nan) {                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                     \
                const T a = x[i * s[1]];                                                          \
                o[i * s[0]] = a != a ? a : nanb;                                                  \
            }                                                                                     \
            return;                                                                               \
        }                                                                                         \
        const T l = hl ? lo : -__builtin_inf(), h = hh ? hi : __builtin_inf();                    \
        if (s[0] == 1 && s[1] == 1) {                                                             \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                \
                const T a = x[i];                                                                 \
                T v = a < l ? l : a;                                                              \
                v = h < v ? h : v;                                                                \
                o[i] = a != a ? a : v;                                                            \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                const T a = x[i * s[1]];                                                          \
                T v = a < l ? l : a;                                                              \
                v = h < v ? h : v;                                                                \
                o[i * s[0]] = a != a ? a : v;                                                     \
            }                                                                                     \
        }                                                                                         \
    }
EW_CLAMP_S_FLOAT(clamp_s_f32, float)
EW_CLAMP_S_FLOAT(clamp_s_f64, double)

#define EW_CLAMP_S_INT(name, T, MINV, MAXV)                                                       \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        T *o = (T *)p[0];                                                                         \
        const T *x = (const T *)p[1];                                                             \
        const T l = A->has_lo ? (T)A->ilo : (MINV), h = A->has_hi ? (T)A->ihi : (MAXV);           \
        if (s[0] == 1 && s[1] == 1) {                                                             \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) {                                \
                T v = x[i] < l ? l : x[i];                                                        \
                o[i] = h < v ? h : v;                                                             \
            }                                                                                     \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T v = x[i * s[1]] < l ? l : x[i * s[1]];                                          \
                o[i * s[0]] = h < v ? h : v;                                                      \
            }                                                                                     \
        }                                                                                         \
    }
EW_CLAMP_S_INT(clamp_s_i32, int32_t, INT32_MIN, INT32_MAX)
EW_CLAMP_S_INT(clamp_s_i64, int64_t, INT64_MIN, INT64_MAX)

/* Tensor bounds: operands x, lo (if present), hi (if present). */
#define EW_CLAMP_T(name, T, ISF)                                                                  \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        T *o = (T *)p[0];                                                                         \
        const T *x = (const T *)p[1];                                                             \
        const int il = A->has_lo ? 2 : 0, ih = A->has_hi ? (A->has_lo ? 3 : 2) : 0;               \
        const T *lo = il ? (const T *)p[il] : x, *hi = ih ? (const T *)p[ih] : x;                 \
        const int64_t sl = il ? s[il] : 0, sh = ih ? s[ih] : 0;                                   \
        for (int64_t i = 0; i < n; i++) {                                                         \
            const T a = x[i * s[1]];                                                              \
            const T l = lo[i * sl], h = hi[i * sh];                                               \
            T r;                                                                                  \
            if (ISF && a != a) r = a;                                                             \
            else if (il && ISF && l != l) r = l;                                                  \
            else if (ih && ISF && h != h) r = h;                                                  \
            else {                                                                                \
                r = a;                                                                            \
                if (il && r < l) r = l;                                                           \
                if (ih && h < r) r = h;                                                           \
            }                                                                                     \
            o[i * s[0]] = r;                                                                      \
        }                                                                                         \
    }
EW_CLAMP_T(clamp_t_f32, float, 1)
EW_CLAMP_T(clamp_t_f64, double, 1)
EW_CLAMP_T(clamp_t_i32, int32_t, 0)
EW_CLAMP_T(clamp_t_i64, int64_t, 0)

#define EW_CLAMP_DISPATCH(dt)                                                                     \
    static CPU_TARGET void EW_FN(clamp_##dt)(int64_t n, char *const *p, const int64_t *s,          \
                                             const cpu_ew_args *A) {                              \
        if (A->bounds_are_tensors) EW_FN(clamp_t_##dt)(n, p, s, A);                               \
        else EW_FN(clamp_s_##dt)(n, p, s, A);                                                     \
    }
EW_CLAMP_DISPATCH(f32)
EW_CLAMP_DISPATCH(f64)
EW_CLAMP_DISPATCH(i32)
EW_CLAMP_DISPATCH(i64)

/* ---- where (condition bool, then self, other) ---- */

#define EW_WHERE(name, T)                                                                         \
    static CPU_TARGET void EW_FN(name)(int64_t n, char *const *p, const int64_t *s,                \
                                       const cpu_ew_args *A) {                                    \
        (void)A;                                                                                  \
        T *o = (T *)p[0];                                                                         \
        const uint8_t *c = (const uint8_t *)p[1];                                                 \
        const T *x = (const T *)p[2], *y = (const T *)p[3];                                       \
        if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {                                   \
            _Pragma("GCC ivdep") for (int64_t i = 0; i < n; i++) o[i] = c[i] ? x[i] : y[i];       \
        } else {                                                                                  \
            for (int64_t i = 0; i < n; i++) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]]; \
        }                                                                                         \
    }
EW_WHERE(where_f32, float)
EW_WHERE(where_f64, double)
EW_WHERE(where_i32, int32_t)
EW_WHERE(where_i64, int64_t)

/* ---- the table ---- */

#define EW_ROW4(kind, name) \
    [kind] = { EW_FN(name##_f32), EW_FN(name##_f64), EW_FN(name##_i32), EW_FN(name##_i64) }
#define EW_ROWF(kind, name) [kind] = { EW_FN(name##_f32), EW_FN(name##_f64), NULL, NULL }

const cpu_ew_table CPU_TABLE = {
    .isa = CPU_ISA_NAME,
    .loop = {
        EW_ROW4(CPU_EW_ADD, add),
        EW_ROW4(CPU_EW_SUB, sub),
        EW_ROW4(CPU_EW_MUL, mul),
        EW_ROWF(CPU_EW_DIV, div),
        EW_ROW4(CPU_EW_MAX, max),
        EW_ROW4(CPU_EW_MIN, min),
        EW_ROW4(CPU_EW_POW, pow),
        EW_ROW4(CPU_EW_NEG, neg),
        EW_ROW4(CPU_EW_ABS, abs),
        EW_ROW4(CPU_EW_RELU, relu),
        EW_ROWF(CPU_EW_SQRT, sqrt),
        EW_ROWF(CPU_EW_RSQRT, rsqrt),
        EW_ROWF(CPU_EW_EXP, exp),
        EW_ROWF(CPU_EW_LOG, log),
        EW_ROWF(CPU_EW_SIN, sin),
        EW_ROWF(CPU_EW_COS, cos),
        EW_ROWF(CPU_EW_TANH, tanh),
        EW_ROWF(CPU_EW_SIGMOID, sigmoid),
        EW_ROWF(CPU_EW_SILU, silu),
        EW_ROWF(CPU_EW_GELU, gelu),
        EW_ROWF(CPU_EW_GELU_TANH, gelu_tanh),
        EW_ROW4(CPU_EW_CLAMP, clamp),
        EW_ROW4(CPU_EW_WHERE, where),
        EW_ROW4(CPU_EW_EQ, eq),
        EW_ROW4(CPU_EW_LT, lt),
        EW_ROWF(CPU_EW_GELU_BWD, gelu_bwd),
        EW_ROWF(CPU_EW_GELU_TANH_BWD, gelu_tanh_bwd),
    },
};
