/* The failure classifier (src/runner/check/classify.c): synthetic
 * expected/got patterns, one per diagnosis, each also broken by one
 * element that does not fit, which must silence it (the classifier is
 * conservative); and the tensor front end (classify_tensors.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "kv/kv.h"
#include "runner/case/expand.h"
#include "runner/check/classify.h"

#define N 64

typedef struct fixture {
    uint64_t e[N], g[N];
    uint8_t m[N], sub[N];
    kv_classify_in in;
    char buf[512];
} fixture;

/* f16 values 1.0 + k ulps for even k (even mantissas), the output of a
 * [8, 8] op with contiguous inputs. */
static void fx_init(fixture *f, kv_dtype dt) {
    memset(f, 0, sizeof *f);
    for (int k = 0; k < N; k++) f->e[k] = f->g[k] = (dt == KV_F32 ? 0x3F800000u : 0x3C00u) + 2u * (uint64_t)k;
    f->in = (kv_classify_in){ .dtype = dt, .ndim = 2, .sizes = { 8, 8 }, .numel = N, .expected = f->e,
                              .got = f->g, .mismatched = f->m, .ninputs = 2 };
}

static void fx_set(fixture *f, int k, uint64_t e, uint64_t g) {
    f->e[k] = e;
    f->g[k] = g;
    f->m[k] = e != g;
}

static const char *fx_run(fixture *f) {
    kv_classify(&f->in, f->buf, (int)sizeof f->buf);
    return f->buf;
}

/* The diagnosis must start with `want`, and one unrelated big error at
 * element `odd` must leave no diagnosis. */
static void expect_then_silence(fixture *f, const char *want, int odd) {
    const char *d = fx_run(f);
    if (strncmp(d, want, strlen(want)) != 0) fail_msg("want '%s', got '%s'", want, d);
    fx_set(f, odd, f->e[odd], f->e[odd] ^ 0x0300u);
    assert_string_equal(fx_run(f), "");
}

static void test_nothing_mismatched(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    assert_int_equal(kv_classify(&f.in, f.buf, (int)sizeof f.buf), 0);
    assert_string_equal(f.buf, "");
}

static void test_no_pattern(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    fx_set(&f, 3, f.e[3], f.e[3] + 5);
    fx_set(&f, 40, f.e[40], f.e[40] - 7);
    assert_int_equal(kv_classify(&f.in, f.buf, (int)sizeof f.buf), 0);
}

static void test_toward_zero(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    for (int k = 0; k < N; k += 3) fx_set(&f, k, f.e[k], f.e[k] - 1);
    fx_set(&f, 1, 0xBC02u, 0xBC01u); /* negative: one nearer zero */
    assert_string_equal(fx_run(&f), "rounds toward zero (23 of 64, every error toward zero)");
    expect_then_silence(&f, "rounds toward zero", 2);
}

static void test_half_away(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    for (int k = 0; k < N; k += 5) fx_set(&f, k, f.e[k], f.e[k] + 1);
    expect_then_silence(&f, "rounds half away from zero (13 of 64", 2);
    /* Away from zero at one tie, toward zero at another: no rounding
     * mode does both. */
    fx_init(&f, KV_F16);
    fx_set(&f, 4, 0x3C02u, 0x3C03u);
    fx_set(&f, 6, 0x3C04u, 0x3C03u);
    assert_string_equal(fx_run(&f), "");
}

static void test_double_rounding(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    fx_set(&f, 5, 0x3C01u, 0x3C02u);
    fx_set(&f, 9, 0x3C03u, 0x3C02u);
    expect_then_silence(&f, "double rounding (2 of 64", 2);
}

static void test_nan_not_propagated(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    fx_set(&f, 7, 0x7FC00000u, 0x3F800000u);
    fx_set(&f, 20, 0x7FC00000u, 0u);
    expect_then_silence(&f, "NaN not propagated (2 of 64", 2);
}

/* The same NaN truth over an empty input is the op's value there (a mean
 * of no elements), not a NaN operand lost: the row says which. */
static void test_empty_reduction(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    fx_set(&f, 0, 0x7FC00000u, 0u);
    fx_set(&f, 1, 0x7FC00000u, 0u);
    f.in.empty_input = true;
    assert_string_equal(fx_run(&f), "a number where the op over no elements is NaN (2 of 64: an input is empty, and the "
                                    "truth there is NaN, as a mean's 0/0)");
    f.in.empty_input = false;
    assert_string_equal(fx_run(&f), "NaN not propagated (2 of 64: a number where the truth is NaN)");
    f.in.empty_input = true;
    expect_then_silence(&f, "a number where the op over no elements is NaN", 2);
}

static void test_overflow(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    fx_set(&f, 6, f.e[6], 0x7F800000u);
    fx_set(&f, 8, f.e[8], 0x7FC00000u);
    expect_then_silence(&f, "overflows in an intermediate (2 of 64", 2);
}

static void test_signed_zero(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    fx_set(&f, 10, 0x8000u, 0x0000u);
    fx_set(&f, 11, 0x0000u, 0x8000u);
    expect_then_silence(&f, "sign of zero wrong (2 of 64", 2);
}

/* A kernel that loses a negative input's sign (pow(|x|, e) for an odd
 * e): every mismatch is the truth negated, Inf included; ints too. */
static void test_negated(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    fx_set(&f, 5, 0xC1000000u, 0x41000000u); /* -8 for 8 */
    fx_set(&f, 9, 0xFF800000u, 0x7F800000u); /* -Inf for +Inf */
    assert_string_equal(fx_run(&f), "sign wrong (2 of 64: each the truth negated)");
    expect_then_silence(&f, "sign wrong (2 of 64", 2);
    fx_init(&f, KV_I64);
    for (int k = 0; k < N; k++) f.e[k] = f.g[k] = (uint64_t)k;
    fx_set(&f, 7, 7u, (uint64_t)(int64_t)-7);
    fx_set(&f, 8, (uint64_t)(int64_t)-8, 8u);
    assert_string_equal(fx_run(&f), "sign wrong (2 of 64: each the truth negated)");
    fx_set(&f, 9, 9u, 10u);
    assert_string_equal(fx_run(&f), "");
    /* A NaN truth has no sign to flip: not this pattern. */
    fx_init(&f, KV_F32);
    fx_set(&f, 5, 0x7FC00000u, 0xFFC00000u);
    fx_set(&f, 6, 0x41000000u, 0xC1000000u);
    assert_string_equal(fx_run(&f), "");
}

/* A blocked loop off by one at its block starts: mismatches every g
 * elements only; fewer than three, a scattered one, or too few of the
 * sites wrong say nothing. */
#define PN 1024
static void test_periodic(void **state) {
    (void)state;
    static uint64_t e[PN], g[PN];
    static uint8_t m[PN];
    char buf[512];
    for (int k = 0; k < PN; k++) e[k] = g[k] = 0x3F800000u + (uint64_t)k, m[k] = 0;
    kv_classify_in in = { .dtype = KV_F32, .ndim = 1, .sizes = { PN }, .numel = PN, .expected = e, .got = g,
                          .mismatched = m, .ninputs = 2 };
    for (int k = 256; k < PN; k += 256) g[k] = e[k - 1] + 7, m[k] = 1;
    kv_classify(&in, buf, (int)sizeof buf);
    assert_string_equal(buf, "wrong only every 256 elements (3 of the 4 elements at 0 + j*256 wrong, every other "
                             "element right: a block or thread-chunk boundary)");
    g[768] = e[768], m[768] = 0; /* two: a gcd of anything */
    kv_classify(&in, buf, (int)sizeof buf);
    assert_string_equal(buf, "");
    g[768] = e[767] + 7, m[768] = 1;
    g[100] = e[100] + 9, m[100] = 1; /* a stray one: gcd 4 */
    kv_classify(&in, buf, (int)sizeof buf);
    assert_string_equal(buf, "");
    g[100] = e[100], m[100] = 0;
    for (int k = 0; k < PN; k++) g[k] = e[k], m[k] = 0;
    for (int k = 64; k <= 192; k += 64) g[k] = e[k] + 3, m[k] = 1; /* 3 of 16 sites */
    kv_classify(&in, buf, (int)sizeof buf);
    assert_string_equal(buf, "");
}

static void test_flush_subnormals(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    fx_set(&f, 12, 0x00000123u, 0u);
    fx_set(&f, 13, 0x80400000u, 0x80000000u);
    expect_then_silence(&f, "flushes subnormals (2 of 64", 2);
}

static void test_subnormal_inputs_as_zero(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    fx_set(&f, 14, 0x3F800000u, 0x3F000000u);
    f.sub[14] = 1;
    f.sub[30] = 1;
    /* Without the input flags there is no evidence. */
    assert_string_equal(fx_run(&f), "");
    f.in.input_subnormal = f.sub;
    expect_then_silence(&f, "treats subnormal inputs as zero (1 of 64", 2);
}

/* numel 45 = 16*2 + 13: the last 1, 5 and 13 elements are the tails at
 * widths 4, 8 and 16, so each bug names its own width. */
static void tail_case(int bad, const char *want) {
    fixture f;
    fx_init(&f, KV_F16);
    f.in.numel = 45;
    f.in.sizes[0] = 5;
    f.in.sizes[1] = 9;
    for (int k = 45 - bad; k < 45; k++) fx_set(&f, k, f.e[k], f.e[k] ^ 0x0200u);
    const char *d = fx_run(&f);
    if (strncmp(d, want, strlen(want)) != 0) fail_msg("want '%s', got '%s'", want, d);
    /* One wrong element before the tail: not a tail bug. */
    fx_set(&f, 2, f.e[2], f.e[2] ^ 0x0200u);
    assert_string_equal(fx_run(&f), "");
}

static void test_tails(void **state) {
    (void)state;
    tail_case(1, "wrong only in the last numel % 4 elements (numel 45, 1 of the last 1");
    tail_case(5, "wrong only in the last numel % 8 elements (numel 45, 5 of the last 5");
    tail_case(13, "wrong only in the last numel % 16 elements (numel 45, 13 of the last 13");
    /* The last 2 of a [13, 2] output are its last row: a row-wise op
     * (a norm) wrong in that row looks the same, so no tail is named. */
    fixture f;
    fx_init(&f, KV_F16);
    f.in.numel = 26;
    f.in.sizes[0] = 13;
    f.in.sizes[1] = 2;
    for (int k = 24; k < 26; k++) fx_set(&f, k, f.e[k], f.e[k] ^ 0x0200u);
    assert_string_equal(fx_run(&f), "");
    f.in.ndim = 1;
    f.in.sizes[0] = 26;
    assert_string_equal(fx_run(&f), "wrong only in the last numel % 4 elements (numel 26, 2 of the last 2 wrong, every element "
                                    "before them right)");
}

static void test_stride0(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    for (int k = 8; k < N; k += 2) fx_set(&f, k, f.e[k], f.e[k] ^ 0x0100u);
    /* The same pattern without a broadcast input: no layout evidence. */
    assert_string_equal(fx_run(&f), "");
    f.in.layouts[1] = KV_LAYOUT_BROADCAST;
    assert_string_equal(fx_run(&f), "wrong only for stride-0 inputs (input 1 is broadcast along dim 0; row 0 is "
                                    "right, 28 of 64 wrong past it: strides ignored)");
    /* The broadcast input is not the output's shape (a norm's weight
     * row): its stride 0 says nothing about the output's rows. */
    f.in.input_other_shape[1] = true;
    assert_string_equal(fx_run(&f), "");
    f.in.input_other_shape[1] = false;
    fx_set(&f, 3, f.e[3], f.e[3] ^ 0x0100u);
    assert_string_equal(fx_run(&f), "");
}

static void test_transposed(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    f.in.layouts[0] = KV_LAYOUT_TRANSPOSED;
    /* 8x8: storage and view positions coincide on the diagonal only. */
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            if (i != j) fx_set(&f, i * 8 + j, f.e[i * 8 + j], f.e[i * 8 + j] ^ 0x0100u);
    expect_then_silence(&f, "wrong only for transposed inputs (input 0;", 9);
}

static void test_storage_offset(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    /* Distinct values, the output shifted by 3 as when every input is
     * read from its storage's start instead of its offset. */
    for (int k = 0; k < N; k++) f.e[k] = 0x3C00u + 7u * (uint64_t)k;
    for (int k = 0; k < N; k++) fx_set(&f, k, f.e[k], k >= 3 ? f.e[k - 3] : 0x1234u);
    assert_string_equal(fx_run(&f), "");
    f.in.layouts[1] = KV_LAYOUT_OFFSET;
    assert_string_equal(fx_run(&f), "wrong only for storage-offset inputs (input 1; the output is the truth shifted "
                                    "by 3 elements, 64 of 64 wrong: the storage offset ignored)");
    expect_then_silence(&f, "wrong only for storage-offset inputs", 40);
}

static void test_ignores_alpha(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    uint64_t alt[N];
    memcpy(alt, f.e, sizeof alt);
    for (int k = 0; k < N; k += 2) {
        alt[k] = f.e[k] + 0x00100000u;
        fx_set(&f, k, f.e[k], alt[k]);
    }
    /* No result with alpha 1 to hold it against: no evidence. */
    assert_string_equal(fx_run(&f), "");
    f.in.alt = alt;
    f.in.alt_what = "alpha";
    assert_string_equal(fx_run(&f), "ignores alpha (32 of 64: each equals the result with alpha = 1)");
    expect_then_silence(&f, "ignores alpha", 3);
}

static void test_out_alias(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    /* mm(a, b, out=a) written row by row: element (i, 0) reads row i of a
     * before anything overwrote it, every later one reads a stored
     * product. */
    for (int k = 1; k < N; k++)
        if (k % 8 != 0) fx_set(&f, k, f.e[k], f.e[k] ^ 0x0500u);
    /* Out a tensor of its own: no aliasing to blame. */
    assert_string_equal(fx_run(&f), "");
    f.in.out_alias = 1;
    assert_string_equal(fx_run(&f), "wrong only where out aliases input 0 (out=@0: the first element right, 56 of "
                                    "the 63 after it wrong: the kernel reads input elements it has already "
                                    "overwritten)");
    /* Fewer than half of the rest wrong: a scattered bug, not aliasing. */
    for (int k = 1; k < N; k++)
        if (k % 8 > 3) fx_set(&f, k, f.e[k], f.e[k]);
    assert_string_equal(fx_run(&f), "");
    for (int k = 1; k < N; k++)
        if (k % 8 != 0) fx_set(&f, k, f.e[k], f.e[k] ^ 0x0500u);
    /* Out names no input of the case: no evidence either. */
    f.in.out_alias = 3;
    assert_string_equal(fx_run(&f), "");
    f.in.out_alias = 2;
    expect_then_silence(&f, "wrong only where out aliases input 1 (out=@1:", 0);
}

static void test_narrow_accumulator(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F16);
    uint8_t within[N];
    memset(within, 1, sizeof within);
    /* Errors of several ulps both ways, as rounding every partial sum gives. */
    fx_set(&f, 5, f.e[5], f.e[5] + 3);
    fx_set(&f, 17, f.e[17], f.e[17] - 4);
    fx_set(&f, 40, f.e[40], f.e[40] + 6);
    /* No working-precision bound (an op without a wider accumulator). */
    assert_string_equal(fx_run(&f), "");
    f.in.within_working = within;
    assert_string_equal(fx_run(&f), "accumulates in f16, not f32 (3 of 64 past the bound of an f32 accumulator, "
                                    "every one within the bound of a sum kept in f16)");
    /* A mismatch even an f16 accumulator could not make silences it. */
    within[17] = 0;
    assert_string_equal(fx_run(&f), "");
    within[17] = 1;
    f.in.dtype = KV_BF16;
    assert_string_equal(fx_run(&f), "accumulates in bf16, not f32 (3 of 64 past the bound of an f32 accumulator, "
                                    "every one within the bound of a sum kept in bf16)");
    /* A more exact pattern wins: every error one ulp toward zero. */
    f.in.dtype = KV_F16;
    fx_init(&f, KV_F16);
    f.in.within_working = within;
    fx_set(&f, 5, f.e[5], f.e[5] - 1);
    assert_string_equal(fx_run(&f), "rounds toward zero (1 of 64, every error toward zero)");
}

static void test_one_pass_variance(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_F32);
    uint8_t within[N];
    memset(within, 1, sizeof within);
    /* A whole group off by a few percent, as a cancelled variance makes
     * every element of its row: errors both ways, many ulps. */
    for (int k = 8; k < 16; k++) fx_set(&f, k, f.e[k], f.e[k] + (k % 2 ? 300000u : -(uint64_t)200000u));
    /* No one-pass bound (an op without a variance). */
    assert_string_equal(fx_run(&f), "");
    f.in.within_one_pass = within;
    assert_string_equal(fx_run(&f), "variance by E[x^2] - E[x]^2 (8 of 64 past the bound of a two-pass variance, "
                                    "every one within the bound of a one-pass variance: error grows with "
                                    "mean^2/variance)");
    /* A mismatch even a one-pass variance could not make silences it. */
    within[11] = 0;
    assert_string_equal(fx_run(&f), "");
    within[11] = 1;
    /* A more exact pattern wins: every error one ulp toward zero. */
    fx_init(&f, KV_F32);
    f.in.within_one_pass = within;
    fx_set(&f, 5, f.e[5], f.e[5] - 1);
    assert_string_equal(fx_run(&f), "rounds toward zero (1 of 64, every error toward zero)");
}

static void test_int_wraps(void **state) {
    (void)state;
    fixture f;
    fx_init(&f, KV_I64);
    for (int k = 0; k < N; k++) f.e[k] = f.g[k] = (uint64_t)k;
    const int64_t big = (int64_t)1 << 40 | 5;
    fx_set(&f, 3, (uint64_t)big, 5u);
    assert_string_equal(fx_run(&f), "wraps to 32 bits (1 of 64, each the truth modulo 2^32)");
    fx_set(&f, 4, 4u, 9u);
    assert_string_equal(fx_run(&f), "");
}

/* The tensor front end: the comparison's mask, row-major reads of a
 * transposed view, the subnormal flags from a same-shape input. */
static void test_from_tensors(void **state) {
    (void)state;
    kv_case c;
    kv_case_init(&c);
    c.ninputs = 1;
    const int64_t sizes[2] = { 2, 3 };
    const float ev[6] = { 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f };
    float gv[6];
    memcpy(gv, ev, sizeof gv);
    uint32_t bits;
    memcpy(&bits, &gv[4], 4);
    bits -= 1; /* one ulp toward zero */
    memcpy(&gv[4], &bits, 4);
    kv_tensor *e = kv_tensor_from_data(ev, sizes, 2, KV_F32), *g = kv_tensor_from_data(gv, sizes, 2, KV_F32);
    assert_non_null(e);
    assert_non_null(g);
    const kv_cmp_rule exact = { KV_CMP_BITWISE, 0, false, true };
    char buf[256];
    assert_true(kv_classify_compare(&c, NULL, e, g, NULL, NULL, &exact, NULL, NULL, NULL, buf, (int)sizeof buf) > 0);
    assert_string_equal(buf, "rounds toward zero (1 of 6, every error toward zero)");
    /* Equal tensors: nothing to say. */
    assert_int_equal(kv_classify_compare(&c, NULL, e, e, NULL, NULL, &exact, NULL, NULL, NULL, buf, (int)sizeof buf), 0);
    /* A subnormal input at the wrong element turns it into DAZ. */
    const float iv[6] = { 1.0f, 1.0f, 1.0f, 1.0f, 1e-40f, 1.0f };
    kv_tensor *x = kv_tensor_from_data(iv, sizes, 2, KV_F32);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 1;
    in.tensors[0] = x;
    gv[4] = 0.0f;
    kv_tensor *g2 = kv_tensor_from_data(gv, sizes, 2, KV_F32);
    assert_true(kv_classify_compare(&c, &in, e, g2, NULL, NULL, &exact, NULL, NULL, NULL, buf, (int)sizeof buf) > 0);
    assert_string_equal(buf, "treats subnormal inputs as zero (1 of 6, each fed by a subnormal input)");
    /* Past a per-element bound, within the one-pass variance's bound. */
    const float fv[6] = { 1.0f, 2.1f, 3.0f, 3.9f, 5.0f, 6.0f };
    kv_tensor *g3 = kv_tensor_from_data(fv, sizes, 2, KV_F32);
    const kv_cmp_rule bound = { KV_CMP_BOUND, 0, false, false };
    const double tight[6] = { 0.01, 0.01, 0.01, 0.01, 0.01, 0.01 }, loose[6] = { 1, 1, 1, 1, 1, 1 };
    const double mid[6] = { 1, 0.05, 1, 1, 1, 1 };
    assert_true(kv_classify_compare(&c, NULL, e, g3, NULL, NULL, &bound, tight, NULL, loose, buf, (int)sizeof buf) > 0);
    assert_string_equal(buf, "variance by E[x^2] - E[x]^2 (2 of 6 past the bound of a two-pass variance, every one "
                             "within the bound of a one-pass variance: error grows with mean^2/variance)");
    assert_int_equal(kv_classify_compare(&c, NULL, e, g3, NULL, NULL, &bound, tight, NULL, mid, buf, (int)sizeof buf), 0);
    assert_int_equal(kv_classify_compare(&c, NULL, e, g3, NULL, NULL, &bound, tight, NULL, NULL, buf, (int)sizeof buf), 0);
    kv_tensor_release(g3);
    /* Complex outputs are not classified. */
    kv_tensor *z = kv_tensor_from_data(ev, (const int64_t[]){ 3 }, 1, KV_C64);
    assert_int_equal(kv_classify_compare(&c, NULL, z, z, NULL, NULL, &exact, NULL, NULL, NULL, buf, (int)sizeof buf), 0);
    kv_tensor_release(z);
    kv_tensor_release(x);
    kv_tensor_release(g2);
    kv_tensor_release(e);
    kv_tensor_release(g);
}

/* The truth with alpha 1, from the reference on the case's own inputs;
 * none where there is no alpha, it is already 1, or the op writes an
 * input. */
static kv_tensor *alpha_one_of(const char *line, kv_case_inputs *in, const kv_op **op) {
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("test", line, &l), KV_OK);
    assert_int_equal(l.n, 1);
    *op = kv_op_find(l.items[0].op);
    assert_non_null(*op);
    assert_int_equal(kv_case_inputs_make(&l.items[0], *op, KV_DEVICE_CPU0, true, in), KV_OK);
    kv_case_list_free(&l);
    return kv_classify_alpha_one(*op, in, 0);
}

static void test_alpha_one(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    kv_case_inputs in;
    const kv_op *op;
    kv_tensor *t = alpha_one_of("--op=add.Tensor --dtype=f32 --shape=4x5 --args=alpha=2.5 --fill=exact\n", &in, &op);
    assert_non_null(t);
    const float *a = kv_tensor_data(in.tensors[0]), *b = kv_tensor_data(in.tensors[1]), *r = kv_tensor_data(t);
    for (int k = 0; k < 20; k++) assert_true(r[k] == a[k] + b[k]);
    /* The case's own alpha is back in place. */
    assert_true(in.args[2].v.scalar.kind == KV_SCALAR_DOUBLE && in.args[2].v.scalar.v.d == 2.5);
    kv_tensor_release(t);
    kv_case_inputs_free(&in);
    const char *none[] = {
        "--op=add.Tensor --dtype=f32 --shape=4x5 --fill=exact\n",
        "--op=add_.Tensor --dtype=f32 --shape=4x5 --args=alpha=2 --fill=exact\n",
        "--op=neg --dtype=f32 --shape=4x5\n",
    };
    for (int i = 0; i < 3; i++) {
        assert_null(alpha_one_of(none[i], &in, &op));
        kv_case_inputs_free(&in);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_mismatched),
        cmocka_unit_test(test_no_pattern),
        cmocka_unit_test(test_toward_zero),
        cmocka_unit_test(test_half_away),
        cmocka_unit_test(test_double_rounding),
        cmocka_unit_test(test_nan_not_propagated),
        cmocka_unit_test(test_empty_reduction),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_signed_zero),
        cmocka_unit_test(test_negated),
        cmocka_unit_test(test_periodic),
        cmocka_unit_test(test_flush_subnormals),
        cmocka_unit_test(test_subnormal_inputs_as_zero),
        cmocka_unit_test(test_tails),
        cmocka_unit_test(test_stride0),
        cmocka_unit_test(test_transposed),
        cmocka_unit_test(test_storage_offset),
        cmocka_unit_test(test_ignores_alpha),
        cmocka_unit_test(test_out_alias),
        cmocka_unit_test(test_narrow_accumulator),
        cmocka_unit_test(test_one_pass_variance),
        cmocka_unit_test(test_int_wraps),
        cmocka_unit_test(test_from_tensors),
        cmocka_unit_test(test_alpha_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
