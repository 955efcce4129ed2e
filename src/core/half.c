/* f16 and bf16 conversions, by integer bit manipulation.
 *
 * Why not _Float16 or the FPU: the result must be the same on every
 * machine and compiler (golden files depend on it), narrowing from f64
 * must round once (going through f32 rounds twice and is wrong just above
 * a tie), and NaN handling must be explicit.
 *
 * NaN policy: widening keeps every bit (sign and payload). Narrowing keeps
 * the sign and the top payload bits that fit and forces the quiet bit, so
 * a NaN never turns into an infinity and never becomes signalling. */
#include "kv/dtype.h"

#include <string.h>

/* A narrow IEEE-like format: `mbits` stored fraction bits, `ebits`
 * exponent bits, bias 2^(ebits-1)-1. */
typedef struct kv_narrow_fmt {
    int mbits;
    int ebits;
} kv_narrow_fmt;

static const kv_narrow_fmt kv_fmt_f16 = { 10, 5 };
static const kv_narrow_fmt kv_fmt_bf16 = { 7, 8 };

/* Rounds the finite nonzero value mant * 2^exp2 (mant < 2^63) to the
 * narrow format, ties to even, and returns its magnitude bits (no sign);
 * overflow gives infinity. */
static uint16_t kv_round_to_narrow(uint64_t mant, int exp2, kv_narrow_fmt fmt) {
    const int bias = (1 << (fmt.ebits - 1)) - 1;
    const int emin = 1 - bias;                 /* exponent of the smallest normal */
    const uint32_t inf_bits = (uint32_t)((1u << fmt.ebits) - 1u) << fmt.mbits;
    const int p = 63 - __builtin_clzll(mant); /* position of the leading 1 */
    const int e = exp2 + p;                   /* unbiased exponent of the value */
    /* The weight of the last kept bit: normals keep mbits+1 significant
     * bits, subnormals have the fixed quantum 2^(emin - mbits). */
    int q = e - fmt.mbits;
    if (q < emin - fmt.mbits) q = emin - fmt.mbits;
    const int shift = q - exp2;

    uint64_t r;
    if (shift <= 0) {
        /* Exact: only for values with few significant bits. Large shifts
         * left mean a huge value, which overflows below. */
        if (-shift >= 40) return (uint16_t)inf_bits;
        r = mant << -shift;
    } else if (shift >= 64) {
        /* mant < 2^63 <= half a quantum: rounds to zero. */
        r = 0;
    } else {
        r = mant >> shift;
        const uint64_t rem = mant & ((UINT64_C(1) << shift) - 1u);
        const uint64_t half = UINT64_C(1) << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) r++;
    }
    /* r counts quanta of 2^q. Adding the exponent field just below r's
     * implicit bit makes the encoding work for subnormals (field 0) and
     * lets a carry out of the fraction bump the exponent by itself. */
    const uint64_t field = (uint64_t)(q + fmt.mbits - emin);
    const uint64_t bits = (field << fmt.mbits) + r;
    if (bits >= inf_bits) return (uint16_t)inf_bits;
    return (uint16_t)bits;
}

/* Narrows a NaN: sign, quiet bit, then as many top payload bits as fit.
 * `frac` holds the source's `src_mbits` fraction bits. */
static uint16_t kv_narrow_nan(uint16_t sign, uint64_t frac, int src_mbits, kv_narrow_fmt fmt) {
    const uint32_t exp_all = (uint32_t)((1u << fmt.ebits) - 1u) << fmt.mbits;
    const uint32_t quiet = 1u << (fmt.mbits - 1);
    const uint32_t payload = (uint32_t)(frac >> (src_mbits - fmt.mbits));
    return (uint16_t)(sign | exp_all | quiet | payload);
}

static uint32_t kv_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float kv_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t kv_f32_to_narrow(float f, kv_narrow_fmt fmt) {
    const uint32_t u = kv_f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t e = (u >> 23) & 0xffu;
    const uint32_t frac = u & 0x7fffffu;
    if (e == 0xffu) {
        if (frac != 0) return kv_narrow_nan(sign, frac, 23, fmt);
        return (uint16_t)(sign | (((1u << fmt.ebits) - 1u) << fmt.mbits));
    }
    if (e == 0 && frac == 0) return sign;
    const uint64_t mant = e ? (frac | 0x800000u) : frac;
    const int exp2 = (e ? (int)e : 1) - 127 - 23;
    return (uint16_t)(sign | kv_round_to_narrow(mant, exp2, fmt));
}

static uint16_t kv_f64_to_narrow(double d, kv_narrow_fmt fmt) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
    const uint32_t e = (uint32_t)((u >> 52) & 0x7ffu);
    const uint64_t frac = u & UINT64_C(0xfffffffffffff);
    if (e == 0x7ffu) {
        if (frac != 0) return kv_narrow_nan(sign, frac, 52, fmt);
        return (uint16_t)(sign | (((1u << fmt.ebits) - 1u) << fmt.mbits));
    }
    if (e == 0 && frac == 0) return sign;
    const uint64_t mant = e ? (frac | (UINT64_C(1) << 52)) : frac;
    const int exp2 = (e ? (int)e : 1) - 1023 - 52;
    return (uint16_t)(sign | kv_round_to_narrow(mant, exp2, fmt));
}

float kv_f16_to_f32(kv_f16 h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    uint32_t frac = h & 0x3ffu;
    if (e == 0x1fu) return kv_f32_from_bits(sign | 0x7f800000u | (frac << 13));
    if (e == 0) {
        if (frac == 0) return kv_f32_from_bits(sign);
        /* Subnormal f16: normalize; every f16 subnormal is an f32 normal. */
        int exp = -14; /* unbiased exponent of the subnormal quantum's 2^10 unit */
        while ((frac & 0x400u) == 0) {
            frac <<= 1;
            exp--;
        }
        frac &= 0x3ffu;
        return kv_f32_from_bits(sign | ((uint32_t)(exp + 127) << 23) | (frac << 13));
    }
    return kv_f32_from_bits(sign | ((e - 15u + 127u) << 23) | (frac << 13));
}

kv_f16 kv_f32_to_f16(float f) { return kv_f32_to_narrow(f, kv_fmt_f16); }

/* bf16 is the top half of an f32, so widening is a shift. */
float kv_bf16_to_f32(kv_bf16 b) { return kv_f32_from_bits((uint32_t)b << 16); }

kv_bf16 kv_f32_to_bf16(float f) { return kv_f32_to_narrow(f, kv_fmt_bf16); }

kv_f16 kv_f64_to_f16(double d) { return kv_f64_to_narrow(d, kv_fmt_f16); }

kv_bf16 kv_f64_to_bf16(double d) { return kv_f64_to_narrow(d, kv_fmt_bf16); }
