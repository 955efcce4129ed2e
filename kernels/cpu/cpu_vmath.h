/* Branch-free double-precision math for the vectorized f32 kernels.
 *
 * Included by cpu_ew_impl.h (and the softmax/norm variants) after
 * CPU_TARGET is defined, so every function carries the including file's
 * target attribute and inlines into its loops, which the compiler then
 * vectorizes. Inputs are f32 values widened to double (no double
 * subnormals, |x| <= 3.4e38) except for vm_exp, which takes any double.
 *
 * Accuracy (relative, in double): exp, log, sin, cos, tanh below 1e-15
 * (a few double ulps: Cody-Waite reduction with fdlibm's split constants,
 * Taylor polynomials far past the f32 need); erfc 1.2e-7 (Numerical
 * Recipes' Chebyshev fit), which is why gelu uses it only where its
 * tolerance is an absolute bound in |x|. sin/cos reduce arguments up to
 * VM_TRIG_LIMIT; callers recompute larger ones with libm. */
#ifndef KV_CPU_VMATH_H
#define KV_CPU_VMATH_H

#include <stdint.h>
#include <string.h>

#ifndef CPU_TARGET
#error "define CPU_TARGET before including cpu_vmath.h"
#endif

#define VM_SHIFTER 0x1.8p52
#define VM_TRIG_LIMIT 524288.0

static inline CPU_TARGET uint64_t vm_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline CPU_TARGET double vm_double(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* 2^k for an integral double k in [-1022, 1023]. */
static inline CPU_TARGET double vm_pow2(double k) {
    const uint64_t ki = vm_bits(k + VM_SHIFTER) - vm_bits(VM_SHIFTER);
    return vm_double((ki + 1023u) << 52);
}

static inline CPU_TARGET double vm_exp(double x) {
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    /* Past these the result is 0 or Inf anyway; NaN fails both tests. */
    const double xc = x < -746.0 ? -746.0 : (x > 710.0 ? 710.0 : x);
    const double k = (xc * 1.44269504088896338700e+00 + VM_SHIFTER) - VM_SHIFTER;
    const double r = (xc - k * ln2_hi) - k * ln2_lo;
    double p = 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    /* Two scalings keep each factor normal down to 2^-1076 and up to 2^1024. */
    const double k1 = (k * 0.5 + VM_SHIFTER) - VM_SHIFTER;
    return p * vm_pow2(k1) * vm_pow2(k - k1);
}

/* log of a positive normal double; 0, negatives, Inf and NaN follow C. */
static inline CPU_TARGET double vm_log(double x) {
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const uint64_t b = vm_bits(x);
    /* The exponent field as a double, without an int64 conversion (none
     * before AVX-512): OR it into the shifter's low mantissa bits. */
    double e = (vm_double(vm_bits(VM_SHIFTER) | ((b >> 52) & 0x7ffu)) - VM_SHIFTER) - 1023.0;
    double m = vm_double((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    const int big = m > 1.41421356237309504880;
    m = big ? m * 0.5 : m;
    e = big ? e + 1.0 : e;
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 19.0;
    p = p * s2 + 1.0 / 17.0;
    p = p * s2 + 1.0 / 15.0;
    p = p * s2 + 1.0 / 13.0;
    p = p * s2 + 1.0 / 11.0;
    p = p * s2 + 1.0 / 9.0;
    p = p * s2 + 1.0 / 7.0;
    p = p * s2 + 1.0 / 5.0;
    p = p * s2 + 1.0 / 3.0;
    p = p * s2 + 1.0;
    const double lm = 2.0 * s * p;
    const double r = e * ln2_hi + (lm + e * ln2_lo);
    const double special = x == 0.0 ? -__builtin_inf() : (x > 0.0 ? x : __builtin_nan(""));
    return (x > 0.0 && x < __builtin_inf()) ? r : (x != x ? x : special);
}

/* sin and cos on [-pi/4, pi/4]. */
static inline CPU_TARGET double vm_sin_poly(double r) {
    const double r2 = r * r;
    double p = -1.0 / 1307674368000.0;
    p = p * r2 + 1.0 / 6227020800.0;
    p = p * r2 - 1.0 / 39916800.0;
    p = p * r2 + 1.0 / 362880.0;
    p = p * r2 - 1.0 / 5040.0;
    p = p * r2 + 1.0 / 120.0;
    p = p * r2 - 1.0 / 6.0;
    return r + r * r2 * p;
}

static inline CPU_TARGET double vm_cos_poly(double r) {
    const double r2 = r * r;
    double p = 1.0 / 20922789888000.0;
    p = p * r2 - 1.0 / 87178291200.0;
    p = p * r2 + 1.0 / 479001600.0;
    p = p * r2 - 1.0 / 3628800.0;
    p = p * r2 + 1.0 / 40320.0;
    p = p * r2 - 1.0 / 720.0;
    p = p * r2 + 1.0 / 24.0;
    p = p * r2 - 0.5;
    return 1.0 + r2 * p;
}

/* x = q*pi/2 + r with |r| <= pi/4; valid for |x| <= VM_TRIG_LIMIT. */
static inline CPU_TARGET double vm_reduce(double x, uint64_t *quadrant) {
    const double p1 = 1.57079632673412561417e+00, p2 = 6.07710050630396597660e-11,
                 p3 = 2.02226624871116645580e-21, p3t = 8.47842766036889956997e-32;
    const double t = x * 6.36619772367581382433e-01 + VM_SHIFTER;
    const double q = t - VM_SHIFTER;
    *quadrant = vm_bits(t) & 3u;
    return (((x - q * p1) - q * p2) - q * p3) - q * p3t;
}

static inline CPU_TARGET double vm_sin(double x) {
    uint64_t n;
    const double r = vm_reduce(x, &n);
    const double s = vm_sin_poly(r), c = vm_cos_poly(r);
    const double v = (n & 1u) ? c : s;
    return (n & 2u) ? -v : v;
}

static inline CPU_TARGET double vm_cos(double x) {
    uint64_t n;
    const double r = vm_reduce(x, &n);
    const double s = vm_sin_poly(r), c = vm_cos_poly(r);
    const double v = (n & 1u) ? s : c;
    return ((n + 1u) & 2u) ? -v : v;
}

static inline CPU_TARGET double vm_tanh(double x) {
    const double ax0 = x < 0.0 ? -x : x;
    const double ax = ax0 > 20.0 ? 20.0 : ax0;
    const double t = vm_exp(2.0 * ax);
    const double big = (t - 1.0) / (t + 1.0);
    /* Below 1/4 the series avoids the cancellation in t - 1. */
    const double a2 = ax * ax;
    double p = -929569.0 / 638512875.0;
    p = p * a2 + 21844.0 / 6081075.0;
    p = p * a2 - 1382.0 / 155925.0;
    p = p * a2 + 62.0 / 2835.0;
    p = p * a2 - 17.0 / 315.0;
    p = p * a2 + 2.0 / 15.0;
    p = p * a2 - 1.0 / 3.0;
    const double small = ax + ax * a2 * p;
    const double r = ax < 0.25 ? small : big;
    const double sr = vm_double(vm_bits(r) | (vm_bits(x) & 0x8000000000000000ull));
    return x != x ? x : sr;
}

/* erfc(z) for z >= 0, relative error below 1.2e-7. */
static inline CPU_TARGET double vm_erfc_pos(double z) {
    const double t = 1.0 / (1.0 + 0.5 * z);
    double p = 0.17087277;
    p = p * t - 0.82215223;
    p = p * t + 1.48851587;
    p = p * t - 1.13520398;
    p = p * t + 0.27886807;
    p = p * t - 0.18628806;
    p = p * t + 0.09678418;
    p = p * t + 0.37409196;
    p = p * t + 1.00002368;
    p = p * t - 1.26551223;
    return t * vm_exp(-z * z + p);
}

/* 1 + erf(v), without cancellation for negative v. */
static inline CPU_TARGET double vm_one_plus_erf(double v) {
    const double z = v < 0.0 ? -v : v;
    const double c = vm_erfc_pos(z);
    return v < 0.0 ? c : 2.0 - c;
}

#endif
