/* dtypes, f16/bf16 conversions and scalars.
 *
 * Every conversion is checked against references written here from the
 * format definitions (ldexp decoding, nearest-value search with exact
 * midpoints in double), never against libkv's own output. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/dtype.h"
#include "kv/scalar.h"
#include "kv/status.h"

/* ---- helpers ---- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint64_t f64_bits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double f64_from_bits(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* xorshift64*: deterministic samples, same on every machine. */
static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

/* Magnitude of a non-NaN narrow pattern, from the format definition:
 * `mbits` fraction bits, `ebits` exponent bits. */
static double narrow_decode(uint32_t bits, int mbits, int ebits) {
    const int bias = (1 << (ebits - 1)) - 1;
    const uint32_t e = (bits >> mbits) & ((1u << ebits) - 1u);
    const uint32_t f = bits & ((1u << mbits) - 1u);
    const double sign = (bits >> (mbits + ebits)) & 1u ? -1.0 : 1.0;
    if (e == (1u << ebits) - 1u) return sign * INFINITY;
    if (e == 0) return sign * ldexp((double)f, 1 - bias - mbits);
    return sign * ldexp((double)((1u << mbits) | f), (int)e - bias - mbits);
}

/* Reference narrowing of a finite double: find the two neighbouring
 * representable magnitudes by binary search over the positive patterns
 * (which are ordered like their values), compare with their exact
 * midpoint, break ties to the even pattern. The pattern just past the
 * largest finite value stands for 2^(emax+1), which rounds to infinity. */
static uint32_t narrow_reference(double x, int mbits, int ebits) {
    const uint32_t sign = signbit(x) ? 1u << (mbits + ebits) : 0u;
    const double ax = fabs(x);
    const uint32_t inf = ((1u << ebits) - 1u) << mbits;
    const double top = ldexp(1.0, (1 << (ebits - 1)));  /* 2^(emax+1) */
    /* lo = largest pattern with value <= ax, within [0, inf-1]. */
    uint32_t lo = 0, hi = inf - 1u;
    if (ax >= narrow_decode(inf - 1u, mbits, ebits)) {
        lo = inf - 1u;
    } else {
        while (lo < hi) {
            const uint32_t mid = lo + (hi - lo + 1u) / 2u;
            if (narrow_decode(mid, mbits, ebits) <= ax) lo = mid; else hi = mid - 1u;
        }
    }
    const double vlo = narrow_decode(lo, mbits, ebits);
    if (vlo == ax) return sign | lo;
    const double vhi = lo + 1u == inf ? top : narrow_decode(lo + 1u, mbits, ebits);
    const double midpoint = (vlo + vhi) / 2.0; /* exact: few significant bits */
    uint32_t r;
    if (ax < midpoint) r = lo;
    else if (ax > midpoint) r = lo + 1u;
    else r = (lo & 1u) ? lo + 1u : lo;
    if (r >= inf) r = inf;
    return sign | r;
}

static bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
static bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

/* ---- dtype table ---- */

static void test_dtype_names_sizes(void **state) {
    (void)state;
    static const struct { kv_dtype dt; const char *name; size_t size; kv_dtype_category cat; } rows[] = {
        { KV_BOOL, "bool", 1, KV_CAT_BOOL },   { KV_U8, "u8", 1, KV_CAT_INT },
        { KV_I8, "i8", 1, KV_CAT_INT },        { KV_I16, "i16", 2, KV_CAT_INT },
        { KV_I32, "i32", 4, KV_CAT_INT },      { KV_I64, "i64", 8, KV_CAT_INT },
        { KV_F16, "f16", 2, KV_CAT_FLOAT },    { KV_BF16, "bf16", 2, KV_CAT_FLOAT },
        { KV_F32, "f32", 4, KV_CAT_FLOAT },    { KV_F64, "f64", 8, KV_CAT_FLOAT },
        { KV_C64, "c64", 8, KV_CAT_COMPLEX },  { KV_C128, "c128", 16, KV_CAT_COMPLEX },
    };
    assert_int_equal(sizeof rows / sizeof rows[0], KV_DTYPE_COUNT);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        assert_string_equal(kv_dtype_name(rows[i].dt), rows[i].name);
        assert_int_equal(kv_dtype_size(rows[i].dt), rows[i].size);
        assert_int_equal(kv_dtype_category_of(rows[i].dt), rows[i].cat);
        kv_dtype parsed = KV_DTYPE_COUNT;
        assert_int_equal(kv_dtype_parse(rows[i].name, &parsed), 0);
        assert_int_equal(parsed, rows[i].dt);
    }
}

/* PyTorch's ScalarType names, as torch prints them in messages. */
static void test_dtype_torch_names(void **state) {
    (void)state;
    static const char *const names[] = { "Bool", "Byte",     "Char",  "Short",  "Int",          "Long",
                                         "Half", "BFloat16", "Float", "Double", "ComplexFloat", "ComplexDouble" };
    assert_int_equal(sizeof names / sizeof names[0], KV_DTYPE_COUNT);
    for (int i = 0; i < (int)KV_DTYPE_COUNT; i++) assert_string_equal(kv_dtype_torch_name((kv_dtype)i), names[i]);
    assert_string_equal(kv_dtype_torch_name(KV_DTYPE_COUNT), "?");
}

static void test_dtype_parse_bad(void **state) {
    (void)state;
    kv_dtype out = KV_F32;
    assert_int_equal(kv_dtype_parse("float32", &out), -1);
    assert_int_equal(kv_dtype_parse("F32", &out), -1);
    assert_int_equal(kv_dtype_parse("", &out), -1);
    assert_int_equal(kv_dtype_parse("f3", &out), -1);
    assert_int_equal(kv_dtype_parse("f32 ", &out), -1);
    assert_int_equal(kv_dtype_parse(NULL, &out), -1);
    assert_int_equal(out, KV_F32); /* untouched on failure */
}

static void test_dtype_real_complex(void **state) {
    (void)state;
    assert_int_equal(kv_dtype_to_real(KV_C64), KV_F32);
    assert_int_equal(kv_dtype_to_real(KV_C128), KV_F64);
    assert_int_equal(kv_dtype_to_real(KV_F16), KV_F16);
    assert_int_equal(kv_dtype_to_real(KV_I32), KV_I32);
    assert_int_equal(kv_dtype_to_complex(KV_F32), KV_C64);
    assert_int_equal(kv_dtype_to_complex(KV_F64), KV_C128);
    assert_int_equal(kv_dtype_to_complex(KV_F16), KV_C64);
    assert_int_equal(kv_dtype_to_complex(KV_BF16), KV_C64);
    assert_int_equal(kv_dtype_to_complex(KV_C128), KV_C128);
    assert_true(kv_dtype_is_complex(KV_C64));
    assert_false(kv_dtype_is_complex(KV_F64));
    assert_true(kv_dtype_is_floating(KV_BF16));
    assert_false(kv_dtype_is_floating(KV_C64));
    assert_true(kv_dtype_is_integral(KV_U8, false));
    assert_false(kv_dtype_is_integral(KV_BOOL, false));
    assert_true(kv_dtype_is_integral(KV_BOOL, true));
}

/* ---- f16 ---- */

static void test_f16_widen_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536u; h++) {
        const float f = kv_f16_to_f32((kv_f16)h);
        if (f16_is_nan((uint16_t)h)) {
            assert_true(isnan(f));
            /* Sign and payload kept on widening. */
            assert_int_equal(f32_bits(f) >> 31, h >> 15);
            assert_int_equal((f32_bits(f) >> 13) & 0x3ffu, h & 0x3ffu);
            continue;
        }
        const double want = narrow_decode(h, 10, 5);
        if ((double)f != want) fail_msg("f16 0x%04x widened to %a, want %a", h, (double)f, want);
        assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
    }
}

static void test_f16_round_trip_all_patterns(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536u; h++) {
        const kv_f16 back = kv_f32_to_f16(kv_f16_to_f32((kv_f16)h));
        const kv_f16 back64 = kv_f64_to_f16((double)kv_f16_to_f32((kv_f16)h));
        if (f16_is_nan((uint16_t)h)) {
            assert_true(f16_is_nan(back));
            assert_true(f16_is_nan(back64));
            assert_true(back & 0x200u); /* quiet */
            assert_int_equal(back >> 15, h >> 15);
        } else {
            if (back != h) fail_msg("f16 0x%04x round-tripped to 0x%04x", h, back);
            assert_int_equal(back64, h);
        }
    }
}

/* Checks one f32 value against the reference. */
static void check_f32_to_f16(float x) {
    const kv_f16 got = kv_f32_to_f16(x);
    if (isnan(x)) {
        assert_true(f16_is_nan(got));
        assert_true(got & 0x200u);
        return;
    }
    const uint32_t want = isinf(x) ? (signbit(x) ? 0xfc00u : 0x7c00u) : narrow_reference(x, 10, 5);
    if (got != want) fail_msg("f32 %a (0x%08x) -> f16 0x%04x, want 0x%04x", (double)x, f32_bits(x), got, want);
}

static void test_f32_to_f16_rounding(void **state) {
    (void)state;
    /* Around every positive f16 value: itself, its midpoint with the next
     * value, and the f32 neighbours of that midpoint, both signs. */
    for (uint32_t h = 0; h < 0x7c00u; h++) {
        const double v = narrow_decode(h, 10, 5);
        const double next = h + 1u == 0x7c00u ? 65536.0 : narrow_decode(h + 1u, 10, 5);
        const float mid = (float)((v + next) / 2.0); /* exact in f32 */
        const float probes[] = { (float)v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY) };
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            check_f32_to_f16(probes[i]);
            check_f32_to_f16(-probes[i]);
        }
    }
    /* Random f32 bit patterns, and random patterns with exponents in and
     * around f16's range (where rounding actually happens). */
    for (int i = 0; i < 300000; i++) {
        const uint64_t r = rng_next();
        check_f32_to_f16(f32_from_bits((uint32_t)r));
        const uint32_t exp = 127u - 28u + (uint32_t)((r >> 32) % 46u); /* 2^-28 .. 2^17 */
        check_f32_to_f16(f32_from_bits(((uint32_t)(r >> 40) & 0x807fffffu) | (exp << 23)));
    }
    /* Named cases. */
    assert_int_equal(kv_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(kv_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(kv_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(kv_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(kv_f32_to_f16(65504.0f), 0x7bff);      /* largest finite */
    assert_int_equal(kv_f32_to_f16(65519.99f), 0x7bff);     /* below the overflow tie */
    assert_int_equal(kv_f32_to_f16(65520.0f), 0x7c00);      /* tie, rounds to even = inf */
    assert_int_equal(kv_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(kv_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(kv_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(kv_f32_to_f16(0x1p-24f), 0x0001);      /* smallest subnormal */
    assert_int_equal(kv_f32_to_f16(0x1p-25f), 0x0000);      /* tie with 0, to even */
    assert_int_equal(kv_f32_to_f16(0x1.000002p-25f), 0x0001); /* just above the tie */
    assert_int_equal(kv_f32_to_f16(0x3p-25f), 0x0002);      /* 1.5 quanta, tie to even 2 */
    assert_int_equal(kv_f32_to_f16(0x1.ff8p-15f), 0x03ff);  /* largest subnormal, 1023 * 2^-24 */
    assert_int_equal(kv_f32_to_f16(0x1.ffap-15f), 0x03ff);  /* below the tie with 2^-14 */
    assert_int_equal(kv_f32_to_f16(0x1.ffcp-15f), 0x0400);  /* tie: to even, the smallest normal */
    assert_int_equal(kv_f32_to_f16(0x1.002p0f), 0x3c00);    /* 1 + 2^-11: tie, to even 1.0 */
    assert_int_equal(kv_f32_to_f16(0x1.006p0f), 0x3c02);    /* 1 + 3*2^-11: tie, to even */
    assert_int_equal(kv_f32_to_f16(0x1p-30f), 0x0000);      /* underflow to zero */
    assert_int_equal(kv_f32_to_f16(-0x1p-30f), 0x8000);     /* keeps the sign */
}

static void test_f32_to_f16_nan(void **state) {
    (void)state;
    const uint32_t nans[] = { 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu, 0xff800001u, 0x7fffe000u };
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        const kv_f16 h = kv_f32_to_f16(f32_from_bits(nans[i]));
        assert_true(f16_is_nan(h));          /* signalling 0x7f800001 must not become inf */
        assert_true(h & 0x200u);             /* quiet */
        assert_int_equal(h >> 15, nans[i] >> 31);
    }
    assert_true(f16_is_nan(kv_f64_to_f16(NAN)));
    assert_true(f16_is_nan(kv_f64_to_f16(f64_from_bits(0x7ff0000000000001u))));
}

/* ---- bf16 ---- */

static void test_bf16_widen_and_round_trip_all_patterns(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 65536u; b++) {
        const float f = kv_bf16_to_f32((kv_bf16)b);
        /* bf16 is the top half of an f32, exactly. */
        assert_int_equal(f32_bits(f), b << 16);
        const kv_bf16 back = kv_f32_to_bf16(f);
        const kv_bf16 back64 = kv_f64_to_bf16((double)f);
        if (bf16_is_nan((uint16_t)b)) {
            assert_true(isnan(f));
            assert_true(bf16_is_nan(back));
            assert_true(back & 0x40u);
            assert_int_equal(back >> 15, b >> 15);
            assert_true(bf16_is_nan(back64));
        } else {
            assert_true((double)f == narrow_decode(b, 7, 8));
            if (back != b) fail_msg("bf16 0x%04x round-tripped to 0x%04x", b, back);
            assert_int_equal(back64, b);
        }
    }
}

static void check_f32_to_bf16(float x) {
    const kv_bf16 got = kv_f32_to_bf16(x);
    if (isnan(x)) {
        assert_true(bf16_is_nan(got));
        assert_true(got & 0x40u);
        /* Quiet NaNs keep their payload bits that fit, like truncation. */
        if (f32_bits(x) & 0x400000u) assert_int_equal(got, (f32_bits(x) >> 16) | 0x40u);
        return;
    }
    const uint32_t want = isinf(x) ? (signbit(x) ? 0xff80u : 0x7f80u) : narrow_reference(x, 7, 8);
    if (got != want) fail_msg("f32 %a (0x%08x) -> bf16 0x%04x, want 0x%04x", (double)x, f32_bits(x), got, want);
}

static void test_f32_to_bf16_rounding(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0x7f80u; b += 1u) {
        const double v = narrow_decode(b, 7, 8);
        const double next = b + 1u == 0x7f80u ? ldexp(1.0, 128) : narrow_decode(b + 1u, 7, 8);
        const double mid = (v + next) / 2.0;
        if (mid >= ldexp(1.0, 128)) continue; /* not an f32 */
        const float fm = (float)mid;
        const float probes[] = { (float)v, fm, nextafterf(fm, 0.0f), nextafterf(fm, INFINITY) };
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            check_f32_to_bf16(probes[i]);
            check_f32_to_bf16(-probes[i]);
        }
    }
    for (int i = 0; i < 300000; i++) check_f32_to_bf16(f32_from_bits((uint32_t)rng_next()));
    assert_int_equal(kv_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(kv_f32_to_bf16(0x1.01p0f), 0x3f80);    /* 1 + 2^-8: tie, to even */
    assert_int_equal(kv_f32_to_bf16(0x1.03p0f), 0x3f82);    /* 1 + 3*2^-8: tie, to even */
    assert_int_equal(kv_f32_to_bf16(0x1.010002p0f), 0x3f81); /* just above the tie */
    assert_int_equal(kv_f32_to_bf16(0x1.fffffep127f), 0x7f80); /* FLT_MAX rounds up past the max */
    assert_int_equal(kv_f32_to_bf16(0x1.ffp127f), 0x7f80);   /* overflow tie, odd max: to inf */
    assert_int_equal(kv_f32_to_bf16(0x1.fep127f), 0x7f7f);  /* largest finite bf16 */
    assert_int_equal(kv_f32_to_bf16(0x1p-149f), 0x0000);    /* f32 subnormal far below bf16's */
    assert_int_equal(kv_f32_to_bf16(0x1p-133f), 0x0001);    /* smallest bf16 subnormal */
    assert_int_equal(kv_f32_to_bf16(-0.0f), 0x8000);
}

static void test_f32_to_bf16_nan(void **state) {
    (void)state;
    assert_int_equal(kv_f32_to_bf16(f32_from_bits(0x7fc00000u)), 0x7fc0);
    assert_int_equal(kv_f32_to_bf16(f32_from_bits(0xffc00000u)), 0xffc0);
    assert_int_equal(kv_f32_to_bf16(f32_from_bits(0x7fd50000u)), 0x7fd5); /* payload kept */
    /* Signalling NaN whose payload lies below bit 16: truncation would give
     * inf; it must stay a (quiet) NaN. */
    const kv_bf16 s = kv_f32_to_bf16(f32_from_bits(0x7f800001u));
    assert_true(bf16_is_nan(s));
    assert_true(s & 0x40u);
    assert_true(bf16_is_nan(kv_f64_to_bf16(-NAN)));
}

/* ---- f64 narrowing: one rounding ---- */

static void test_f64_single_rounding(void **state) {
    (void)state;
    /* 1 + 2^-11 + 2^-40 is just above the f16 tie between 1 and 1+2^-10.
     * Via f32 it first rounds to the tie itself (2^-40 < half an f32 ulp),
     * then ties to even give 1.0: wrong. One rounding gives 1 + 2^-10. */
    const double d = 1.0 + 0x1p-11 + 0x1p-40;
    assert_int_equal(kv_f32_to_f16((float)d), 0x3c00); /* shows the double rounding */
    assert_int_equal(kv_f64_to_f16(d), 0x3c01);
    assert_int_equal(kv_f64_to_f16(-d), 0xbc01);
    /* The same for bf16 around 1 + 2^-8. */
    const double e = 1.0 + 0x1p-8 + 0x1p-40;
    assert_int_equal(kv_f32_to_bf16((float)e), 0x3f80);
    assert_int_equal(kv_f64_to_bf16(e), 0x3f81);
    /* Just below a tie as well: rounds down either way. */
    assert_int_equal(kv_f64_to_f16(1.0 + 0x1p-11 - 0x1p-40), 0x3c00);
    /* In the subnormal range: half the smallest subnormal plus a hair. */
    assert_int_equal(kv_f64_to_f16(0x1p-25 + 0x1p-60), 0x0001);
    assert_int_equal(kv_f64_to_f16(0x1p-25), 0x0000);
    /* Overflow and underflow from double range. */
    assert_int_equal(kv_f64_to_f16(1e300), 0x7c00);
    assert_int_equal(kv_f64_to_f16(65520.0 - 0x1p-30), 0x7bff);
    assert_int_equal(kv_f64_to_f16(65520.0), 0x7c00);
    assert_int_equal(kv_f64_to_f16(1e-300), 0x0000);
    assert_int_equal(kv_f64_to_f16(f64_from_bits(1)), 0x0000); /* f64 subnormal */
    assert_int_equal(kv_f64_to_bf16(1e300), 0x7f80);
    assert_int_equal(kv_f64_to_bf16(-1e300), 0xff80);
    assert_int_equal(kv_f64_to_bf16(-INFINITY), 0xff80);
}

static void test_f64_narrowing_random(void **state) {
    (void)state;
    for (int i = 0; i < 200000; i++) {
        const uint64_t r = rng_next();
        /* Exponents 2^-30 .. 2^20 (f16) and the whole bf16 range. */
        const uint64_t exp16 = 1023u - 30u + (r >> 58) % 51u;
        const double d16 = f64_from_bits((r & 0x800fffffffffffffu) | (exp16 << 52));
        const uint32_t want16 = narrow_reference(d16, 10, 5);
        if (kv_f64_to_f16(d16) != want16) fail_msg("f64 %a -> f16 0x%04x, want 0x%04x", d16, kv_f64_to_f16(d16), want16);
        const uint64_t exp32 = 1023u - 140u + (r >> 54) % 270u;
        const double d32 = f64_from_bits((r & 0x800fffffffffffffu) | (exp32 << 52));
        const uint32_t want32 = narrow_reference(d32, 7, 8);
        if (kv_f64_to_bf16(d32) != want32) fail_msg("f64 %a -> bf16 0x%04x, want 0x%04x", d32, kv_f64_to_bf16(d32), want32);
    }
}

/* ---- scalars ---- */

static void test_scalar_parse(void **state) {
    (void)state;
    kv_scalar s;
    assert_int_equal(kv_scalar_parse("1", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_INT);
    assert_int_equal(s.v.i, 1);
    assert_int_equal(kv_scalar_parse("-42", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_INT);
    assert_int_equal(s.v.i, -42);
    assert_int_equal(kv_scalar_parse("-2.5", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_DOUBLE);
    assert_true(s.v.d == -2.5);
    assert_int_equal(kv_scalar_parse("1e-3", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_DOUBLE);
    assert_true(s.v.d == 1e-3);
    assert_int_equal(kv_scalar_parse("1.0", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_DOUBLE);
    assert_true(s.v.d == 1.0);
    assert_int_equal(kv_scalar_parse("true", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_BOOL);
    assert_true(s.v.b);
    assert_int_equal(kv_scalar_parse("false", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_BOOL);
    assert_false(s.v.b);
    assert_int_equal(kv_scalar_parse("nan", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_DOUBLE);
    assert_true(isnan(s.v.d));
    assert_int_equal(kv_scalar_parse("inf", &s), 0);
    assert_true(isinf(s.v.d) && s.v.d > 0);
    assert_int_equal(kv_scalar_parse("-inf", &s), 0);
    assert_true(isinf(s.v.d) && s.v.d < 0);
    assert_int_equal(kv_scalar_parse("1+2j", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_COMPLEX);
    assert_true(s.v.c.re == 1.0 && s.v.c.im == 2.0);
    assert_int_equal(kv_scalar_parse("1.5-2e-3j", &s), 0);
    assert_true(s.v.c.re == 1.5 && s.v.c.im == -2e-3);
    assert_int_equal(kv_scalar_parse("-0.5j", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_COMPLEX);
    assert_true(s.v.c.re == 0.0 && s.v.c.im == -0.5);
    assert_int_equal(kv_scalar_parse("3j", &s), 0);
    assert_true(s.v.c.re == 0.0 && s.v.c.im == 3.0);
    assert_int_equal(kv_scalar_parse("1e-3j", &s), 0); /* exponent sign is not the split */
    assert_true(s.v.c.re == 0.0 && s.v.c.im == 1e-3);
    assert_int_equal(kv_scalar_parse("9223372036854775807", &s), 0);
    assert_int_equal(s.kind, KV_SCALAR_INT);
    assert_true(s.v.i == INT64_MAX);
}

static void test_scalar_parse_bad(void **state) {
    (void)state;
    const char *bad[] = { "", "abc", "1.5x", " 1", "1 ", "j", "+j", "1+j", "1+2", "--1", "1e", "tru",
                          "True", "9223372036854775808", "1e999", "1+2jj", "0x" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kv_scalar s = kv_scalar_int(77);
        if (kv_scalar_parse(bad[i], &s) != -1) fail_msg("'%s' parsed", bad[i]);
    }
    kv_scalar s;
    assert_int_equal(kv_scalar_parse(NULL, &s), -1);
}

static void check_format(kv_scalar s, const char *want) {
    char buf[96];
    const int n = kv_scalar_format(s, buf, (int)sizeof buf);
    assert_int_equal(n, (int)strlen(want));
    assert_string_equal(buf, want);
}

static void test_scalar_format(void **state) {
    (void)state;
    check_format(kv_scalar_int(-7), "-7");
    check_format(kv_scalar_bool(true), "true");
    check_format(kv_scalar_bool(false), "false");
    check_format(kv_scalar_double(1.0), "1.0");     /* must not read back as an int */
    check_format(kv_scalar_double(-0.0), "-0.0");
    check_format(kv_scalar_double(100.0), "100.0");
    check_format(kv_scalar_double(2.5), "2.5");
    check_format(kv_scalar_double(0.1), "0.1");     /* shortest round-trip text */
    check_format(kv_scalar_double(1e-5), "1e-05");
    check_format(kv_scalar_double(1e300), "1e+300");
    check_format(kv_scalar_double(INFINITY), "inf");
    check_format(kv_scalar_double(-INFINITY), "-inf");
    check_format(kv_scalar_double(NAN), "nan");
    check_format(kv_scalar_complex(1.0, 2.0), "1+2j");
    check_format(kv_scalar_complex(0.0, -0.5), "0-0.5j");
    /* Truncation is snprintf-like: the needed length comes back. */
    char small[4];
    assert_int_equal(kv_scalar_format(kv_scalar_int(123456), small, (int)sizeof small), 6);
    assert_string_equal(small, "123");
}

static void round_trip(kv_scalar s) {
    char buf[96];
    kv_scalar_format(s, buf, (int)sizeof buf);
    kv_scalar back;
    if (kv_scalar_parse(buf, &back) != 0) fail_msg("'%s' does not parse", buf);
    assert_int_equal(back.kind, s.kind);
    switch (s.kind) {
    case KV_SCALAR_BOOL: assert_int_equal(back.v.b, s.v.b); break;
    case KV_SCALAR_INT: assert_true(back.v.i == s.v.i); break;
    case KV_SCALAR_DOUBLE:
        if (isnan(s.v.d)) assert_true(isnan(back.v.d));
        else if (f64_bits(back.v.d) != f64_bits(s.v.d)) fail_msg("'%s' read back as %a, want %a", buf, back.v.d, s.v.d);
        break;
    case KV_SCALAR_COMPLEX:
        assert_true(f64_bits(back.v.c.re) == f64_bits(s.v.c.re) || (isnan(back.v.c.re) && isnan(s.v.c.re)));
        assert_true(f64_bits(back.v.c.im) == f64_bits(s.v.c.im) || (isnan(back.v.c.im) && isnan(s.v.c.im)));
        break;
    }
}

static void test_scalar_round_trip(void **state) {
    (void)state;
    const double ds[] = { 0.0, -0.0, 1.0, -1.0, 0.1, 1.0 / 3.0, 1e-310, 5e-324, 1.7976931348623157e308,
                          9007199254740993.0, 123456789012345680.0, 2.5e-8, -3e20, INFINITY, -INFINITY, NAN };
    for (size_t i = 0; i < sizeof ds / sizeof ds[0]; i++) {
        round_trip(kv_scalar_double(ds[i]));
        round_trip(kv_scalar_complex(ds[i], ds[(i + 3) % (sizeof ds / sizeof ds[0])]));
    }
    for (int i = 0; i < 20000; i++) {
        const uint64_t r = rng_next();
        const double d = f64_from_bits(r);
        round_trip(kv_scalar_double(d));
        round_trip(kv_scalar_int((int64_t)r));
    }
    round_trip(kv_scalar_int(INT64_MIN));
    round_trip(kv_scalar_int(INT64_MAX));
    round_trip(kv_scalar_bool(true));
    round_trip(kv_scalar_bool(false));
}

static void test_scalar_conversions(void **state) {
    (void)state;
    assert_true(kv_scalar_to_double(kv_scalar_int(-3)) == -3.0);
    assert_true(kv_scalar_to_double(kv_scalar_bool(true)) == 1.0);
    assert_true(kv_scalar_to_double(kv_scalar_complex(2.5, 9.0)) == 2.5);
    assert_true(kv_scalar_to_int(kv_scalar_double(-2.9)) == -2);  /* truncates */
    assert_true(kv_scalar_to_int(kv_scalar_double(2.9)) == 2);
    assert_true(kv_scalar_to_int(kv_scalar_double(NAN)) == 0);   /* defined, not UB */
    assert_true(kv_scalar_to_int(kv_scalar_double(1e300)) == INT64_MAX);
    assert_true(kv_scalar_to_int(kv_scalar_double(-1e300)) == INT64_MIN);
    assert_false(kv_scalar_to_bool(kv_scalar_double(0.0)));
    assert_true(kv_scalar_to_bool(kv_scalar_double(-0.5)));
    assert_true(kv_scalar_to_bool(kv_scalar_complex(0.0, 1.0)));
    assert_false(kv_scalar_to_bool(kv_scalar_int(0)));
    double re = -1, im = -1;
    kv_scalar_to_complex(kv_scalar_int(4), &re, &im);
    assert_true(re == 4.0 && im == 0.0);
    kv_scalar_to_complex(kv_scalar_complex(1.5, -2.0), &re, &im);
    assert_true(re == 1.5 && im == -2.0);
    assert_int_equal(kv_scalar_dtype(kv_scalar_bool(true)), KV_BOOL);
    assert_int_equal(kv_scalar_dtype(kv_scalar_int(1)), KV_I64);
    assert_int_equal(kv_scalar_dtype(kv_scalar_double(1)), KV_F64);
    assert_int_equal(kv_scalar_dtype(kv_scalar_complex(1, 0)), KV_C128);
    assert_int_equal(kv_scalar_category(kv_scalar_int(1)), KV_CAT_INT);
    assert_int_equal(kv_scalar_category(kv_scalar_complex(1, 0)), KV_CAT_COMPLEX);
}

/* ---- status names ---- */

static void test_status_names(void **state) {
    (void)state;
    static const char *names[] = { "ok", "invalid_arg", "shape", "dim", "index", "negative_size", "dtype",
                                   "device", "oom", "schema", "unknown_op", "missing_kernel", "internal" };
    assert_int_equal(sizeof names / sizeof names[0], KV_STATUS_COUNT);
    for (int i = 0; i < (int)KV_STATUS_COUNT; i++) {
        assert_string_equal(kv_status_name((kv_status)i), names[i]);
        kv_status s = KV_STATUS_COUNT;
        assert_int_equal(kv_status_parse(names[i], &s), 0);
        assert_int_equal(s, i);
    }
    kv_status s = KV_OK;
    assert_int_equal(kv_status_parse("Shape", &s), -1);
    assert_int_equal(kv_status_parse("", &s), -1);
    assert_int_equal(kv_status_parse(NULL, &s), -1);
}

static void test_status_error_state(void **state) {
    (void)state;
    kv_error_clear();
    assert_int_equal(kv_last_error(), KV_OK);
    assert_string_equal(kv_last_error_message(), "");
    assert_int_equal(kv_error(KV_ERR_DIM, "select.int: argument 'dim': dimension %d out of range", 5), KV_ERR_DIM);
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    assert_string_equal(kv_last_error_message(), "select.int: argument 'dim': dimension 5 out of range");
    /* Long messages are cut, not overflowed. */
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    kv_error(KV_ERR_INTERNAL, "%s", big);
    assert_true(strlen(kv_last_error_message()) < sizeof big - 1);
    assert_true(strlen(kv_last_error_message()) >= 256);
    kv_error_clear();
    assert_int_equal(kv_last_error(), KV_OK);
    assert_string_equal(kv_last_error_message(), "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_names_sizes),
        cmocka_unit_test(test_dtype_torch_names),
        cmocka_unit_test(test_dtype_parse_bad),
        cmocka_unit_test(test_dtype_real_complex),
        cmocka_unit_test(test_f16_widen_all_patterns),
        cmocka_unit_test(test_f16_round_trip_all_patterns),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_f32_to_f16_nan),
        cmocka_unit_test(test_bf16_widen_and_round_trip_all_patterns),
        cmocka_unit_test(test_f32_to_bf16_rounding),
        cmocka_unit_test(test_f32_to_bf16_nan),
        cmocka_unit_test(test_f64_single_rounding),
        cmocka_unit_test(test_f64_narrowing_random),
        cmocka_unit_test(test_scalar_parse),
        cmocka_unit_test(test_scalar_parse_bad),
        cmocka_unit_test(test_scalar_format),
        cmocka_unit_test(test_scalar_round_trip),
        cmocka_unit_test(test_scalar_conversions),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_status_error_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
