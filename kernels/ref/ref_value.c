/* Loading, storing and converting single elements of every dtype.
 *
 * Reals widen to double, complexes to a double pair, integers and bool to
 * int64; a store narrows exactly once, so a f16/bf16/f32 result is the
 * correctly rounded value of the double (f16/bf16 go straight from double,
 * never through f32, to avoid double rounding).
 *
 * Floating -> integer. In range, this is C's cast: truncate toward zero,
 * then wrap to the destination width (a store into u8 of -1.0 gives 255, as
 * PyTorch's cast through int64 does). PyTorch leaves the rest undefined
 * (C++ UB); kvsuite defines it so results are the same on every machine:
 *   - NaN and +-Inf store 0;
 *   - any other value is truncated and reduced modulo 2^64 exactly (fmod is
 *     exact), then wrapped to the width, i.e. the two's-complement low bits
 *     of the mathematical integer.
 * Integer -> f16/bf16 rounds once from the double of the integer, exact
 * for |v| <= 2^53. Integer -> f32 is C's single rounding from int64. */
#include "ref/ref.h"

#include <math.h>
#include <string.h>

/* The low 64 bits of trunc(v) as a two's-complement integer (see top). */
static uint64_t ref_f64_to_bits64(double v) {
    if (!isfinite(v)) return 0;
    const double two64 = 18446744073709551616.0;
    const double m = fmod(trunc(v), two64); /* exact, |m| < 2^64 */
    if (m < 0) return (uint64_t)0 - (uint64_t)(-m);
    return (uint64_t)m;
}

double kv_ref_load_f64(kv_dtype dt, const void *p) {
    switch (dt) {
    case KV_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    case KV_U8: return (double)*(const uint8_t *)p;
    case KV_I8: return (double)*(const int8_t *)p;
    case KV_I16: return (double)*(const int16_t *)p;
    case KV_I32: return (double)*(const int32_t *)p;
    case KV_I64: return (double)*(const int64_t *)p;
    case KV_F16: return (double)kv_f16_to_f32(*(const kv_f16 *)p);
    case KV_BF16: return (double)kv_bf16_to_f32(*(const kv_bf16 *)p);
    case KV_F32: return (double)*(const float *)p;
    case KV_F64: return *(const double *)p;
    case KV_C64: return (double)((const float *)p)[0];
    case KV_C128: return ((const double *)p)[0];
    case KV_DTYPE_COUNT: break;
    }
    return 0.0;
}

void kv_ref_load_c128(kv_dtype dt, const void *p, double *re, double *im) {
    switch (dt) {
    case KV_C64:
        *re = (double)((const float *)p)[0];
        *im = (double)((const float *)p)[1];
        return;
    case KV_C128:
        *re = ((const double *)p)[0];
        *im = ((const double *)p)[1];
        return;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64:
    case KV_DTYPE_COUNT: break;
    }
    *re = kv_ref_load_f64(dt, p);
    *im = 0.0;
}

int64_t kv_ref_load_i64(kv_dtype dt, const void *p) {
    switch (dt) {
    case KV_BOOL: return *(const uint8_t *)p ? 1 : 0;
    case KV_U8: return *(const uint8_t *)p;
    case KV_I8: return *(const int8_t *)p;
    case KV_I16: return *(const int16_t *)p;
    case KV_I32: return *(const int32_t *)p;
    case KV_I64: return *(const int64_t *)p;
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64:
    case KV_C64:
    case KV_C128: return (int64_t)ref_f64_to_bits64(kv_ref_load_f64(dt, p));
    case KV_DTYPE_COUNT: break;
    }
    return 0;
}

/* Writes the low bits of u into an integral (non-bool) element. */
static void ref_store_bits(kv_dtype dt, void *p, uint64_t u) {
    switch (dt) {
    case KV_U8: *(uint8_t *)p = (uint8_t)u; return;
    case KV_I8: *(int8_t *)p = (int8_t)(uint8_t)u; return;
    case KV_I16: *(int16_t *)p = (int16_t)(uint16_t)u; return;
    case KV_I32: *(int32_t *)p = (int32_t)(uint32_t)u; return;
    case KV_I64: *(int64_t *)p = (int64_t)u; return;
    case KV_BOOL: *(uint8_t *)p = u != 0; return;
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
}

void kv_ref_store_c128(kv_dtype dt, void *p, double re, double im) {
    switch (dt) {
    case KV_BOOL: *(uint8_t *)p = (re != 0.0 || im != 0.0); return;
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64: ref_store_bits(dt, p, ref_f64_to_bits64(re)); return;
    case KV_F16: *(kv_f16 *)p = kv_f64_to_f16(re); return;
    case KV_BF16: *(kv_bf16 *)p = kv_f64_to_bf16(re); return;
    case KV_F32: *(float *)p = (float)re; return;
    case KV_F64: *(double *)p = re; return;
    case KV_C64:
        ((float *)p)[0] = (float)re;
        ((float *)p)[1] = (float)im;
        return;
    case KV_C128:
        ((double *)p)[0] = re;
        ((double *)p)[1] = im;
        return;
    case KV_DTYPE_COUNT: break;
    }
}

void kv_ref_store_f64(kv_dtype dt, void *p, double v) { kv_ref_store_c128(dt, p, v, 0.0); }

/* int64 -> float rounded once, to nearest even, in integer arithmetic.
 * `(float)v` does the same on x86-64 and aarch64, but an emulator may
 * convert through double (Valgrind does), which rounds twice: 2^60 +
 * 2^36 + 1 would become the tie 2^60 + 2^36 and then 2^60. The reference
 * must not depend on where it runs. */
static float ref_i64_to_f32(int64_t v) {
    const uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (mag < (UINT64_C(1) << 24)) return (float)v; /* exact */
    const int shift = 64 - __builtin_clzll(mag) - 24; /* keep 24 significant bits */
    uint64_t keep = mag >> shift;
    const uint64_t rest = mag & ((UINT64_C(1) << shift) - 1), half = UINT64_C(1) << (shift - 1);
    if (rest > half || (rest == half && (keep & 1))) keep++; /* 2^24 after carrying is still exact */
    const float r = ldexpf((float)keep, shift);
    return v < 0 ? -r : r;
}

void kv_ref_store_i64(kv_dtype dt, void *p, int64_t v) {
    switch (dt) {
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64: ref_store_bits(dt, p, (uint64_t)v); return;
    case KV_F16: *(kv_f16 *)p = kv_f64_to_f16((double)v); return;
    case KV_BF16: *(kv_bf16 *)p = kv_f64_to_bf16((double)v); return;
    case KV_F32: *(float *)p = ref_i64_to_f32(v); return;
    case KV_F64: *(double *)p = (double)v; return;
    case KV_C64:
        ((float *)p)[0] = ref_i64_to_f32(v);
        ((float *)p)[1] = 0.0f;
        return;
    case KV_C128:
        ((double *)p)[0] = (double)v;
        ((double *)p)[1] = 0.0;
        return;
    case KV_DTYPE_COUNT: break;
    }
}

void kv_ref_convert(kv_dtype to, void *dst, kv_dtype from, const void *src) {
    if (to == from) {
        memmove(dst, src, kv_dtype_size(to));
        return;
    }
    /* bool is "nonzero" whatever the source: NaN and (0, 1j) are true. */
    if (to == KV_BOOL) {
        if (kv_dtype_is_integral(from, true)) {
            *(uint8_t *)dst = kv_ref_load_i64(from, src) != 0;
        } else {
            double re, im;
            kv_ref_load_c128(from, src, &re, &im);
            *(uint8_t *)dst = (re != 0.0 || im != 0.0);
        }
        return;
    }
    /* Integer sources stay in int64 so i64 -> f32 rounds once. */
    if (kv_dtype_is_integral(from, true)) {
        kv_ref_store_i64(to, dst, kv_ref_load_i64(from, src));
        return;
    }
    double re, im;
    kv_ref_load_c128(from, src, &re, &im);
    kv_ref_store_c128(to, dst, re, im);
}

void kv_ref_store_scalar(kv_dtype dt, void *p, kv_scalar s) {
    switch (s.kind) {
    case KV_SCALAR_BOOL: kv_ref_store_i64(dt, p, s.v.b ? 1 : 0); return;
    case KV_SCALAR_INT: kv_ref_store_i64(dt, p, s.v.i); return;
    case KV_SCALAR_DOUBLE: kv_ref_store_f64(dt, p, s.v.d); return;
    case KV_SCALAR_COMPLEX: kv_ref_store_c128(dt, p, s.v.c.re, s.v.c.im); return;
    }
}
