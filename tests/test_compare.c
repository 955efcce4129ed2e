/* The comparison code (src/runner/compare.c), the tolerance table
 * (tolerance.c) and the error bounds (tol_bounds.c), against hand-computed
 * expectations: bit patterns, ULP distances, mismatch listings and
 * gamma_n bounds worked out on paper. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/check/check.h"
#include "runner/check/compare.h"
#include "runner/check/tol_backend.h"
#include "runner/check/tolerance.h"

/* ---- helpers ---- */

static kv_tensor *mk_f32(const float *v, const int64_t *sizes, int nd) {
    kv_tensor *t = kv_tensor_from_data(v, sizes, nd, KV_F32);
    assert_non_null(t);
    return t;
}

static kv_tensor *mk_bits(kv_dtype dt, const void *bits, const int64_t *sizes, int nd) {
    kv_tensor *t = kv_tensor_from_data(bits, sizes, nd, dt);
    assert_non_null(t);
    return t;
}

static float f32_of_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static const kv_cmp_rule BITWISE = { KV_CMP_BITWISE, 0, false, false };

/* ---- ULP distance ---- */

static void test_ulp_distance_f32(void **state) {
    (void)state;
    assert_true(kv_ulp_distance_bits(KV_F32, 0x3F800000u, 0x3F800001u) == 1.0); /* 1 and nextafter */
    assert_true(kv_ulp_distance_bits(KV_F32, 0x3F800001u, 0x3F800000u) == 1.0);
    assert_true(kv_ulp_distance_bits(KV_F32, 0x00000000u, 0x80000000u) == 0.0); /* +0, -0 */
    /* Across zero: the smallest subnormals of each sign are 2 apart. */
    assert_true(kv_ulp_distance_bits(KV_F32, 0x00000001u, 0x80000001u) == 2.0);
    assert_true(kv_ulp_distance_bits(KV_F32, 0x00000003u, 0x80000002u) == 5.0);
    /* Largest finite to +Inf is one step. */
    assert_true(kv_ulp_distance_bits(KV_F32, 0x7F7FFFFFu, 0x7F800000u) == 1.0);
    /* 1.0 and 2.0: 2^23 steps. */
    assert_true(kv_ulp_distance_bits(KV_F32, 0x3F800000u, 0x40000000u) == 8388608.0);
    assert_true(kv_ulp_distance_bits(KV_F32, 0x7FC00000u, 0x3F800000u) == -1.0); /* NaN */
}

static void test_ulp_distance_half(void **state) {
    (void)state;
    assert_true(kv_ulp_distance_bits(KV_F16, 0x3C00u, 0x3C01u) == 1.0);
    assert_true(kv_ulp_distance_bits(KV_F16, 0x0001u, 0x8001u) == 2.0);
    assert_true(kv_ulp_distance_bits(KV_F16, 0x3C00u, 0x4000u) == 1024.0); /* 1 -> 2: 2^10 */
    assert_true(kv_ulp_distance_bits(KV_F16, 0x7E00u, 0x3C00u) == -1.0);
    assert_true(kv_ulp_distance_bits(KV_BF16, 0x3F80u, 0x3F82u) == 2.0);
    assert_true(kv_ulp_distance_bits(KV_BF16, 0x3F80u, 0x4000u) == 128.0); /* 1 -> 2: 2^7 */
    assert_true(kv_ulp_distance_bits(KV_BF16, 0x8000u, 0x0000u) == 0.0);
    assert_true(kv_ulp_distance_bits(KV_BF16, 0x7FC1u, 0x7FC1u) == -1.0);
    /* Only the low 16 bits count for 16-bit types. */
    assert_true(kv_ulp_distance_bits(KV_F16, 0xFFFF3C00u, 0x3C01u) == 1.0);
}

static void test_ulp_distance_f64(void **state) {
    (void)state;
    const double one = 1.0, next = nextafter(1.0, 2.0);
    uint64_t a, b;
    memcpy(&a, &one, 8);
    memcpy(&b, &next, 8);
    assert_true(kv_ulp_distance_bits(KV_F64, a, b) == 1.0);
    assert_true(kv_ulp_distance_bits(KV_F64, 1u, 0x8000000000000001ull) == 2.0);
}

/* ---- bitwise ---- */

static void test_bitwise_equal_and_one_off(void **state) {
    (void)state;
    const int64_t sz[2] = { 2, 3 };
    const float e[6] = { 0, 1, 2, 3, 4, 5 };
    float g[6];
    memcpy(g, e, sizeof g);
    g[5] = f32_of_bits(0x40A00001u); /* 5 + 1 ulp, at [1, 2] */
    kv_tensor *te = mk_f32(e, sz, 2), *tg = mk_f32(g, sz, 2);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, te, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.compared, 6);
    assert_int_equal(rep.mismatched, 0);
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(rep.nmismatches, 1);
    const kv_mismatch *m = &rep.mismatches[0];
    assert_int_equal(m->ndim, 2);
    assert_int_equal(m->index[0], 1);
    assert_int_equal(m->index[1], 2);
    assert_true(m->expected == 5.0);
    assert_true(m->got == (double)f32_of_bits(0x40A00001u));
    assert_true(m->ulps == 1.0);
    assert_true(fabs(m->abs_err - 4.76837158203125e-07) < 1e-20); /* 2^-21: ulp of 5 */
    assert_true(fabs(m->rel_err - 4.76837158203125e-07 / 5.0) < 1e-20);
    assert_true(rep.max_ulps == 1.0);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

static void test_bitwise_nan_payloads(void **state) {
    (void)state;
    const int64_t sz[1] = { 3 };
    const uint32_t e[3] = { 0x7FC00000u, 0x7FC00000u, 0x3F800000u };
    const uint32_t g[3] = { 0x7FC00001u, 0xFFC00000u, 0x7FC00000u };
    kv_tensor *te = mk_bits(KV_F32, e, sz, 1), *tg = mk_bits(KV_F32, g, sz, 1);
    kv_cmp_report rep;
    /* Any NaN matches any NaN; a number never matches NaN. */
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(rep.mismatches[0].index[0], 2);
    assert_true(rep.mismatches[0].ulps == -1.0);
    /* With payloads significant, the two differing NaNs fail too. */
    kv_cmp_rule strict = BITWISE;
    strict.nan_payload_matters = true;
    assert_int_equal(kv_compare(te, tg, &strict, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 3);
    /* Identical payloads still match under the strict rule. */
    assert_int_equal(kv_compare(te, te, &strict, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

static void test_signed_zero(void **state) {
    (void)state;
    const int64_t sz[1] = { 2 };
    const uint32_t e[2] = { 0x00000000u, 0x80000000u };
    const uint32_t g[2] = { 0x80000000u, 0x80000000u };
    kv_tensor *te = mk_bits(KV_F32, e, sz, 1), *tg = mk_bits(KV_F32, g, sz, 1);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(rep.mismatches[0].index[0], 0);
    assert_true(rep.mismatches[0].ulps == 0.0);
    kv_cmp_rule zeq = BITWISE;
    zeq.signed_zero_equal = true;
    assert_int_equal(kv_compare(te, tg, &zeq, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    const kv_cmp_rule ulp0 = { KV_CMP_ULP, 0, false, false };
    assert_int_equal(kv_compare(te, tg, &ulp0, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

/* ---- ULP, abs, rel, bound ---- */

static void test_ulp_rule_half(void **state) {
    (void)state;
    const int64_t sz[1] = { 4 };
    /* f16: 1, 1+ulp, 1+2ulp, Inf vs 1, 1, 1, 65504 (max finite, 1 step below Inf). */
    const uint16_t e[4] = { 0x3C00u, 0x3C00u, 0x3C00u, 0x7C00u };
    const uint16_t g[4] = { 0x3C00u, 0x3C01u, 0x3C02u, 0x7BFFu };
    kv_tensor *te = mk_bits(KV_F16, e, sz, 1), *tg = mk_bits(KV_F16, g, sz, 1);
    kv_cmp_report rep;
    const kv_cmp_rule u1 = { KV_CMP_ULP, 1, false, false };
    assert_int_equal(kv_compare(te, tg, &u1, NULL, &rep), KV_OK);
    /* 2 ulp fails; an infinity only matches itself whatever the distance. */
    assert_int_equal(rep.mismatched, 2);
    assert_int_equal(rep.mismatches[0].index[0], 2);
    assert_true(rep.mismatches[0].ulps == 2.0);
    assert_int_equal(rep.mismatches[1].index[0], 3);
    assert_true(rep.mismatches[1].ulps == -1.0);
    const kv_cmp_rule u2 = { KV_CMP_ULP, 2, false, false };
    assert_int_equal(kv_compare(te, tg, &u2, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_true(rep.max_ulps == 2.0);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

static void test_abs_rel_rules(void **state) {
    (void)state;
    const int64_t sz[1] = { 3 };
    const double e[3] = { 1.0, 100.0, 0.0 };
    const double g[3] = { 1.1, 100.5, -0.0 };
    kv_tensor *te = kv_tensor_from_data(e, sz, 1, KV_F64), *tg = kv_tensor_from_data(g, sz, 1, KV_F64);
    kv_cmp_report rep;
    const kv_cmp_rule a = { KV_CMP_ABS, 0.2, false, false };
    assert_int_equal(kv_compare(te, tg, &a, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1); /* |0.5| > 0.2 */
    assert_int_equal(rep.mismatches[0].index[0], 1);
    assert_true(fabs(rep.mismatches[0].abs_err - 0.5) < 1e-12);
    assert_true(fabs(rep.mismatches[0].rel_err - 0.005) < 1e-12);
    assert_true(fabs(rep.max_abs_err - 0.5) < 1e-12);
    const kv_cmp_rule r = { KV_CMP_REL, 0.01, false, false };
    assert_int_equal(kv_compare(te, tg, &r, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1); /* 0.1/1 > 0.01; 0.5/100 passes; -0 == 0 */
    assert_int_equal(rep.mismatches[0].index[0], 0);
    assert_true(fabs(rep.mismatches[0].rel_err - 0.1) < 1e-12);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

static void test_bound_rule(void **state) {
    (void)state;
    const int64_t sz[1] = { 3 };
    const float e[3] = { 1, 2, 3 }, g[3] = { 1.5f, 2, 3.125f };
    const double bound[3] = { 1.0, 0.0, 0.0625 };
    kv_tensor *te = mk_f32(e, sz, 1), *tg = mk_f32(g, sz, 1);
    kv_cmp_report rep;
    const kv_cmp_rule b = { KV_CMP_BOUND, 0, false, false };
    assert_int_equal(kv_compare(te, tg, &b, bound, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(rep.mismatches[0].index[0], 2);
    assert_true(rep.mismatches[0].abs_err == 0.125);
    /* A bound rule without bounds is a caller error, not a pass. */
    assert_int_equal(kv_compare(te, tg, &b, NULL, &rep), KV_ERR_INVALID_ARG);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

static void test_integers_and_bool(void **state) {
    (void)state;
    const int64_t sz[1] = { 3 };
    const int32_t e[3] = { 5, -7, 2147483647 }, g[3] = { 5, -5, -2147483647 - 1 };
    kv_tensor *te = kv_tensor_from_data(e, sz, 1, KV_I32), *tg = kv_tensor_from_data(g, sz, 1, KV_I32);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 2);
    assert_true(rep.mismatches[0].abs_err == 2.0);
    assert_true(rep.mismatches[1].abs_err == 4294967295.0); /* no overflow in the difference */
    const kv_cmp_rule u2 = { KV_CMP_ULP, 2, false, false };
    assert_int_equal(kv_compare(te, tg, &u2, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    kv_tensor_release(te);
    kv_tensor_release(tg);
    const uint8_t be[2] = { 1, 0 }, bg[2] = { 1, 1 };
    const int64_t bs[1] = { 2 };
    kv_tensor *xe = kv_tensor_from_data(be, bs, 1, KV_BOOL), *xg = kv_tensor_from_data(bg, bs, 1, KV_BOOL);
    const kv_cmp_rule loose = { KV_CMP_ABS, 10, false, false };
    assert_int_equal(kv_compare(xe, xg, &loose, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1); /* bools are always exact */
    kv_tensor_release(xe);
    kv_tensor_release(xg);
}

static void test_complex(void **state) {
    (void)state;
    const int64_t sz[1] = { 2 };
    /* (3+4i): |e| = 5, so rel 0.01 allows 0.05 per component. */
    const float e[4] = { 3, 4, 1, 0 }, g[4] = { 3.04f, 4, 1, 0.5f };
    kv_tensor *te = kv_tensor_from_data(e, sz, 1, KV_C64), *tg = kv_tensor_from_data(g, sz, 1, KV_C64);
    kv_cmp_report rep;
    const kv_cmp_rule r = { KV_CMP_REL, 0.01, false, false };
    assert_int_equal(kv_compare(te, tg, &r, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(rep.mismatches[0].index[0], 1);
    assert_true(rep.mismatches[0].expected == 1.0); /* the real part */
    assert_true(rep.mismatches[0].abs_err == 0.5);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

static void test_dtype_shape_mismatch(void **state) {
    (void)state;
    const int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 };
    const float v[6] = { 0 };
    const double d[6] = { 0 };
    kv_tensor *a = mk_f32(v, s23, 2), *b = mk_f32(v, s32, 2), *c = kv_tensor_from_data(d, s23, 2, KV_F64);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(a, b, &BITWISE, NULL, &rep), KV_ERR_SHAPE);
    assert_non_null(strstr(kv_last_error_message(), "[2, 3]"));
    assert_int_equal(kv_compare(a, c, &BITWISE, NULL, &rep), KV_ERR_DTYPE);
    assert_non_null(strstr(kv_last_error_message(), "f64"));
    kv_tensor_release(a);
    kv_tensor_release(b);
    kv_tensor_release(c);
}

static void test_strided_got(void **state) {
    (void)state;
    /* got is the transpose of a [3,2] buffer: logically equal to e. */
    const int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 };
    const float e[6] = { 0, 1, 2, 3, 4, 5 };
    const float buf[6] = { 0, 3, 1, 4, 2, 5 };
    kv_tensor *te = mk_f32(e, s23, 2), *base = mk_f32(buf, s32, 2);
    const int64_t st[2] = { 1, 2 };
    kv_tensor *tg = kv_tensor_view(base, s23, st, 2, 0);
    assert_non_null(tg);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    kv_tensor_release(te);
    kv_tensor_release(tg);
    kv_tensor_release(base);
}

static void test_mismatch_listing(void **state) {
    (void)state;
    const int64_t sz[3] = { 2, 3, 4 };
    float e[24], g[24];
    for (int i = 0; i < 24; i++) e[i] = g[i] = (float)i;
    /* 10 mismatches starting at linear 6 = [0, 1, 2]. */
    for (int i = 6; i < 16; i++) g[i] = (float)i + 0.5f;
    kv_tensor *te = mk_f32(e, sz, 3), *tg = mk_f32(g, sz, 3);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 10);
    assert_int_equal(rep.nmismatches, KV_RESULT_MAX_MISMATCHES);
    assert_int_equal(rep.mismatches[0].ndim, 3);
    assert_int_equal(rep.mismatches[0].index[0], 0);
    assert_int_equal(rep.mismatches[0].index[1], 1);
    assert_int_equal(rep.mismatches[0].index[2], 2);
    /* linear 13 = [1, 0, 1] */
    assert_int_equal(rep.mismatches[7].index[0], 1);
    assert_int_equal(rep.mismatches[7].index[1], 0);
    assert_int_equal(rep.mismatches[7].index[2], 1);
    char text[2048];
    kv_cmp_report_format(&rep, "output 0", text, (int)sizeof text);
    assert_non_null(strstr(text, "output 0: 10 of 24 elements differ"));
    assert_non_null(strstr(text, "[0, 1, 2] expected 6 got 6.5"));
    kv_check_result r;
    memset(&r, 0, sizeof r);
    kv_cmp_report_to_result(&rep, &r);
    assert_int_equal(r.mismatched, 10);
    assert_int_equal(r.nmismatches, KV_RESULT_MAX_MISMATCHES);
    assert_int_equal(r.mismatches[0].index[2], 2);
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

/* The heat grid counts every wrong element, not the first few: 39 spread
 * over a [3, 50, 40] output (150 folded rows x 40 columns, so 32 x 32
 * cells of 4-5 rows by 1-2 columns) land each in the cell worked out
 * here by hand, and a small output gets a cell per element. */
static void test_heat_grid(void **state) {
    (void)state;
    const int64_t sz[3] = { 3, 50, 40 };
    enum { N = 3 * 50 * 40 };
    float *e = calloc(N, sizeof *e), *g = calloc(N, sizeof *g);
    assert_non_null(e);
    assert_non_null(g);
    /* Every 151st element from 0: rows 0, 3, 7, ... across the output. */
    int wrong = 0;
    for (int k = 0; k < N; k += 151, wrong++) g[k] = 1.0f;
    assert_int_equal(wrong, 40);
    g[0] = 0.0f; /* 39 wrong: the first one is right again */
    kv_tensor *te = mk_f32(e, sz, 3), *tg = mk_f32(g, sz, 3);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 39);
    assert_int_equal(rep.nmismatches, KV_RESULT_MAX_MISMATCHES);
    assert_int_equal(rep.heat.rows, 150);
    assert_int_equal(rep.heat.cols, 40);
    assert_int_equal(rep.heat.grows, 32);
    assert_int_equal(rep.heat.gcols, 32);
    int sum = 0, cells = 0;
    for (int c = 0; c < 32 * 32; c++) {
        sum += rep.heat.cells[c];
        cells += rep.heat.cells[c] != 0;
    }
    assert_int_equal(sum, 39);
    assert_int_equal(cells, 39);
    /* Element 151 is row 3, column 31: cell row 3*32/150 = 0, column
     * 31*32/40 = 24. Element 5889 (39 * 151), row 147, column 9: cell
     * row 4704/150 = 31, column 288/40 = 7. */
    assert_int_equal(rep.heat.cells[0 * 32 + 24], 1);
    assert_int_equal(rep.heat.cells[31 * 32 + 7], 1);
    assert_int_equal(rep.heat.cells[0], 0);
    kv_check_result r;
    memset(&r, 0, sizeof r);
    kv_cmp_report_to_result(&rep, &r);
    assert_memory_equal(&r.heat, &rep.heat, sizeof r.heat);
    kv_tensor_release(te);
    kv_tensor_release(tg);
    /* [4, 5]: a cell per element, the wrong one where it is. */
    const int64_t small[2] = { 4, 5 };
    for (int k = 0; k < 20; k++) g[k] = 0.0f;
    g[13] = 2.0f;
    te = mk_f32(e, small, 2);
    tg = mk_f32(g, small, 2);
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.heat.grows, 4);
    assert_int_equal(rep.heat.gcols, 5);
    assert_int_equal(rep.heat.cells[2 * 5 + 3], 1);
    kv_tensor_release(te);
    kv_tensor_release(tg);
    free(e);
    free(g);
}

/* Mismatches that are all Inf or NaN leave the finite-pair maxima at 0:
 * the summary must say how many there are rather than read "max abs err
 * 0" beside a count of differing elements. */
static void test_nonfinite_mismatches_named(void **state) {
    (void)state;
    const int64_t sz[1] = { 4 };
    const float e[4] = { 1.0f, INFINITY, INFINITY, 2.0f };
    const float g[4] = { 1.0f, NAN, -INFINITY, 2.5f };
    kv_tensor *te = mk_f32(e, sz, 1), *tg = mk_f32(g, sz, 1);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 3);
    assert_int_equal(rep.nonfinite_mismatched, 2);
    char text[2048];
    kv_cmp_report_summary(&rep, NULL, text, (int)sizeof text);
    assert_string_equal(text, "3 of 4 elements differ (max abs err 0.5, max ulp 2.09715e+06 over finite pairs; 2 with Inf or NaN)");
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

/* A value negated is 2^31-odd ulps away through zero, a number that says
 * nothing: max ulp covers the pairs whose signs agree, and the summary
 * counts the others. A zero on either side is no sign error. */
static void test_sign_mismatches_named(void **state) {
    (void)state;
    const int64_t sz[1] = { 4 };
    const float e[4] = { 1.0f, 2.0f, -3.0f, 0.0f };
    const float g[4] = { 1.0f, -2.0f, 3.0f, -0.5f };
    kv_tensor *te = mk_f32(e, sz, 1), *tg = mk_f32(g, sz, 1);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(te, tg, &BITWISE, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 3);
    assert_int_equal(rep.sign_mismatched, 2);
    char text[2048];
    kv_cmp_report_summary(&rep, NULL, text, (int)sizeof text);
    assert_string_equal(text, "3 of 4 elements differ (max abs err 6, max ulp 1.05696e+09 where the signs agree; 2 with "
                              "the sign wrong)");
    kv_tensor_release(te);
    kv_tensor_release(tg);
}

/* ---- tolerance table ---- */

static void test_unit_roundoff_and_gamma(void **state) {
    (void)state;
    assert_true(kv_unit_roundoff(KV_F16) == 0x1p-11);
    assert_true(kv_unit_roundoff(KV_BF16) == 0x1p-8);
    assert_true(kv_unit_roundoff(KV_F32) == 0x1p-24);
    assert_true(kv_unit_roundoff(KV_C128) == 0x1p-53);
    assert_true(kv_unit_roundoff(KV_I32) == 0.0);
    /* gamma_3 for u = 2^-8: 3/256 / (1 - 3/256) = 3/253. */
    assert_true(fabs(kv_gamma(3, 0x1p-8) - 3.0 / 253.0) < 1e-15);
    assert_true(isinf(kv_gamma(256, 0x1p-8)));
}

static void test_table_covers_every_op(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    for (int i = 0; i < kv_op_count(); i++) {
        const char *name = kv_op_name(kv_op_at(i));
        if (!kv_tol_has_op(name)) fail_msg("no tolerance row for op %s", name);
    }
    for (int i = 0; i < kv_tol_count(); i++) {
        const kv_tol_entry *e = kv_tol_at(i);
        assert_non_null(e->reason);
        assert_true(strlen(e->reason) > 10);
    }
}

/* Per-backend overrides (runner/tol_backend.h): oneDNN's shipped file
 * (kernels/onednn/tolerances.txt) reads, each row has a reason and widens
 * only BOUND rows of the table (never an exact one). */
static void test_backend_overrides(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    kv_tol_override_truncate(0);
    const char *const onednn[] = { "onednn" };
    assert_int_equal(kv_tol_file_load("kernels/onednn/tolerances.txt", onednn, 1), KV_OK);
    assert_true(kv_tol_override_count() > 0);
    for (int i = 0; i < kv_tol_override_count(); i++) {
        const kv_tol_override *o = kv_tol_override_at(i);
        assert_true(strlen(o->reason) > 10);
        assert_true(o->abs_slack > 0.0);
        assert_non_null(strstr(o->source, "tolerances.txt:"));
        if (kv_op_find(o->op) == NULL) fail_msg("override for unknown op %s", o->op);
        for (int dt = 0; dt < KV_DTYPE_COUNT; dt++) {
            if (!(o->dtypes & (1u << dt))) continue;
            const kv_tol_entry *e = kv_tol_lookup(o->op, (kv_dtype)dt, NULL);
            if (e == NULL || e->kind != KV_CMP_BOUND)
                fail_msg("override %s/%s widens a %s rule that is not a bound", o->backend, o->op,
                         kv_dtype_name((kv_dtype)dt));
        }
        assert_int_equal(kv_tol_override_find(o->backend, o->op, "variants:onednn",
                                              (kv_dtype)__builtin_ctz(o->dtypes)),
                         i);
    }
    assert_int_equal(kv_tol_override_find(NULL, "mm", "variants:onednn", KV_BF16), -1);
    assert_int_equal(kv_tol_override_find("onednn", "mm", "variants:onednn", KV_F64), -1);
    assert_int_equal(kv_tol_override_find("onednn", "mm", "golden", KV_BF16), -1);
    assert_int_equal(kv_tol_override_find("no-such-backend", "mm", "variants:onednn", KV_BF16), -1);
    kv_tol_override_truncate(0);
}

/* A tolerances file's grammar: globs and dtype lists match, and every
 * malformed line is an error naming FILE:LINE that adds nothing. */
static void test_tolerances_file(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    kv_tol_override_truncate(0);
    const char *const be[] = { "sim", "zoo" };
    assert_int_equal(kv_tol_file_parse("# c\n\n  mul.*  f32,bf16 variants* zoo abs+0.5  a reason  \n", "t", be, 2),
                     KV_OK);
    assert_int_equal(kv_tol_override_count(), 1);
    const kv_tol_override *o = kv_tol_override_at(0);
    assert_string_equal(o->reason, "a reason");
    assert_string_equal(o->source, "t:3");
    assert_true(o->abs_slack == 0.5);
    assert_int_equal(kv_tol_override_find("zoo", "mul.Tensor", "variants:zoo", KV_BF16), 0);
    assert_int_equal(kv_tol_override_find("zoo", "mul.Tensor", "variants:zoo", KV_F16), -1);
    assert_int_equal(kv_tol_override_find("sim", "mul.Tensor", "variants:sim", KV_F32), -1);
    static const struct {
        const char *text, *want;
    } bad[] = {
        { "mm bf16 variants* nope abs+1 r\n", "t:1: unknown backend 'nope' (the loaded plugins: sim, zoo)" },
        { "\nmm bf16 variants* sim rel+1 r\n", "t:2: bad rule 'rel+1'" },
        { "mm bf16 variants* sim abs+-1 r\n", "t:1: bad rule" },
        { "mm bf16 variants* sim abs+inf r\n", "t:1: bad rule" },
        { "mm bf16 variants* sim abs+0x1p-126\n", "t:1: no reason" },
        { "mm bf16 variants* sim abs+0x1p-126   \n", "t:1: no reason" },
        { "mm bq16 variants* sim abs+1 r\n", "t:1: unknown dtype 'bq16'" },
        { "mmm bf16 variants* sim abs+1 r\n", "t:1: OP_GLOB 'mmm' matches no op" },
        { "mm bf16\n", "t:1: no CHECK_GLOB" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(kv_tol_file_parse(bad[i].text, "t", be, 2), KV_ERR_INVALID_ARG);
        if (strstr(kv_last_error_message(), bad[i].want) == NULL)
            fail_msg("%s: got '%s', want '%s'", bad[i].text, kv_last_error_message(), bad[i].want);
        assert_int_equal(kv_tol_override_count(), 1);
    }
    /* A bad line after good ones: the file adds nothing. */
    assert_int_equal(kv_tol_file_parse("mm bf16 * sim abs+1 r\nmm bf16 * sim abs+1\n", "t", be, 2),
                     KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tol_override_count(), 1);
    assert_int_equal(kv_tol_file_load("/nonexistent/tol.txt", be, 2), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tol_file_load("tests", be, 2), KV_ERR_INVALID_ARG);
    kv_tol_override_truncate(0);
}

static kv_case mk_case(const char *op, kv_dtype dt) {
    kv_case c;
    kv_case_init(&c);
    strcpy(c.op, op);
    c.ninputs = 1;
    c.dtypes[0] = dt;
    return c;
}

/* Issue 14, bug c: embedding_dense_backward divides by the index count
 * under scale_grad_by_freq, so fill=exact must not make it bitwise; without
 * it the sums of an exact fill are exact and bitwise stays. */
static void test_rule_scale_grad_by_freq(void **state) {
    (void)state;
    kv_bound_kind bk;
    kv_case c = mk_case("embedding_dense_backward", KV_F64);
    c.fill = KV_FILL_EXACT;
    c.nargs = 1;
    strcpy(c.args[0].name, "scale_grad_by_freq");
    strcpy(c.args[0].value, "1");
    kv_cmp_rule r = kv_tol_rule_for(&c, KV_F64, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BOUND);
    assert_int_equal(bk, KV_BOUND_LINEAR);
    strcpy(c.args[0].value, "true");
    assert_int_equal(kv_tol_rule_for(&c, KV_F32, &bk, NULL).kind, KV_CMP_BOUND);
    strcpy(c.args[0].value, "0");
    r = kv_tol_rule_for(&c, KV_F64, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BITWISE);
    c.fill = KV_FILL_REAL;
    r = kv_tol_rule_for(&c, KV_F64, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BOUND);
}

static void test_table_rules(void **state) {
    (void)state;
    kv_bound_kind bk;
    kv_case c = mk_case("exp", KV_F32);
    kv_cmp_rule r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_ULP);
    assert_true(r.value == 2.0);
    r = kv_tol_rule_for(&c, KV_F16, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_ULP);
    assert_true(r.value == 1.0);
    r = kv_tol_golden_rule(&c, KV_F32);
    assert_int_equal(r.kind, KV_CMP_ULP);
    assert_true(r.value == 1.0);
    /* tol= overrides the table. */
    c.tol = (kv_tolerance){ KV_TOL_ULP, 3.0 };
    r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_ULP);
    assert_true(r.value == 3.0);

    c = mk_case("add.Tensor", KV_F32);
    r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BITWISE);
    assert_int_equal(kv_tol_golden_rule(&c, KV_F32).kind, KV_CMP_BITWISE);
    c.nargs = 1;
    strcpy(c.args[0].name, "alpha");
    strcpy(c.args[0].value, "2");
    r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BOUND);
    assert_int_equal(bk, KV_BOUND_AXPY);
    r = kv_tol_rule_for(&c, KV_I32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BITWISE);

    c = mk_case("sum.dim_IntList", KV_F32);
    r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BOUND);
    assert_int_equal(bk, KV_BOUND_SUM);
    c.fill = KV_FILL_EXACT;
    r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_BITWISE);
    assert_true(r.signed_zero_equal);

    c = mk_case("abs", KV_C64);
    r = kv_tol_rule_for(&c, KV_F32, &bk, NULL);
    assert_int_equal(r.kind, KV_CMP_ULP);
    c = mk_case("abs", KV_F32);
    assert_int_equal(kv_tol_rule_for(&c, KV_F32, &bk, NULL).kind, KV_CMP_BITWISE);

    c = mk_case("empty.memory_format", KV_F32);
    c.tol = (kv_tolerance){ KV_TOL_BITWISE, 0 };
    assert_int_equal(kv_tol_rule_for(&c, KV_F32, &bk, NULL).kind, KV_CMP_META);
}

/* ---- error bounds ---- */

static void test_bound_mm(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    const int64_t sz[2] = { 2, 2 };
    const float a[4] = { 1, -2, 3, 4 }, b[4] = { 1, 1, -1, 2 };
    kv_case c = mk_case("mm", KV_F32);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 2;
    in.tensors[0] = mk_f32(a, sz, 2);
    in.tensors[1] = mk_f32(b, sz, 2);
    in.nargs = 2;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[1] };
    const float ev[4] = { 3, -3, -1, 11 };
    kv_tensor *e = mk_f32(ev, sz, 2);
    double *bound = NULL;
    assert_int_equal(kv_tol_bounds(KV_BOUND_MATMUL, 0, &c, &in, e, 0, &bound), KV_OK);
    /* sum_k |a_ik||b_kj|: [[1+2, 1+4], [3+4, 3+8]] times gamma_3 (K = 2). */
    const double g = kv_gamma(3, 0x1p-24);
    const double s[4] = { 3, 5, 7, 11 };
    for (int i = 0; i < 4; i++) {
        assert_true(bound[i] >= g * s[i]);
        assert_true(bound[i] < g * s[i] * 1.0001 + 1e-40);
    }
    free(bound);
    kv_tensor_release(e);
    kv_case_inputs_free(&in);
}

static void test_bound_sum(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    const int64_t sz[2] = { 2, 3 }, osz[1] = { 2 };
    const float x[6] = { 1, -2, 3, 4, 5, -6 };
    kv_case c = mk_case("sum.dim_IntList", KV_F32);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 1;
    in.tensors[0] = mk_f32(x, sz, 2);
    static const int64_t dims[1] = { -1 };
    in.nargs = 4;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_INT_LIST, .v.ints = { dims, 1 } };
    in.args[2] = (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = false };
    in.args[3] = (kv_ivalue){ .tag = KV_IV_NONE };
    const float ev[2] = { 2, 3 };
    kv_tensor *e = mk_f32(ev, osz, 1);
    double *bound = NULL;
    assert_int_equal(kv_tol_bounds(KV_BOUND_SUM, 0, &c, &in, e, 0, &bound), KV_OK);
    /* n = 3: gamma_4 * [6, 15]. */
    const double g = kv_gamma(4, 0x1p-24);
    assert_true(bound[0] >= g * 6 && bound[0] < g * 6 * 1.0001);
    assert_true(bound[1] >= g * 15 && bound[1] < g * 15 * 1.0001);
    free(bound);
    kv_tensor_release(e);
    kv_case_inputs_free(&in);
}


static void test_equal_values_pass_with_nan_scale(void **state) {
    (void)state;
    /* Equal values pass numeric rules even where the bound or the
     * complex magnitude is NaN (a sum over infinities, a NaN component). */
    const int64_t sz[1] = { 2 };
    const float e[2] = { 1.5f, -0.0f };
    const double nanb[2] = { NAN, NAN };
    kv_tensor *te = mk_f32(e, sz, 1);
    kv_cmp_report rep;
    const kv_cmp_rule b = { KV_CMP_BOUND, 0, false, false };
    assert_int_equal(kv_compare(te, te, &b, nanb, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    const float ce[2] = { 0.0f, NAN };
    kv_tensor *tc = kv_tensor_from_data(ce, (const int64_t[]){ 1 }, 1, KV_C64);
    const kv_cmp_rule r = { KV_CMP_REL, 1e-6, false, false };
    assert_int_equal(kv_compare(tc, tc, &r, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    /* ... but a different value against a NaN bound fails. */
    const float g[2] = { 1.75f, -0.0f };
    kv_tensor *tg = mk_f32(g, sz, 1);
    assert_int_equal(kv_compare(te, tg, &b, nanb, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    kv_tensor_release(te);
    kv_tensor_release(tc);
    kv_tensor_release(tg);
}

static void test_bound_linear_scatter(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    /* index_select_backward: grad [3, 2] scattered into [5, 2] rows 0, 0, 4. */
    const int64_t gs[2] = { 3, 2 }, is[1] = { 3 }, os[2] = { 5, 2 };
    const float g[6] = { 1, -2, 3, 4, -5, 6 };
    const int64_t idx[3] = { 0, 0, 4 };
    static const int64_t self_sizes[2] = { 5, 2 };
    kv_case c = mk_case("index_select_backward", KV_F32);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 2;
    in.tensors[0] = mk_f32(g, gs, 2);
    in.tensors[1] = kv_tensor_from_data(idx, is, 1, KV_I64);
    in.nargs = 4;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_INT_LIST, .v.ints = { self_sizes, 2 } };
    in.args[2] = (kv_ivalue){ .tag = KV_IV_INT, .v.i = 0 };
    in.args[3] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[1] };
    const float ev[10] = { 4, 2, 0, 0, 0, 0, 0, 0, -5, 6 };
    kv_tensor *e = mk_f32(ev, os, 2);
    double *bound = NULL;
    if (kv_tol_bounds(KV_BOUND_LINEAR, 0, &c, &in, e, 0, &bound) != KV_OK) fail_msg("%s", kv_last_error_message());
    /* Row 0 adds |1|+|3| and |-2|+|4|; row 4 holds |-5|, |6|; n = 6 terms. */
    const double gm = kv_gamma(7, 0x1p-24);
    const double s[10] = { 4, 6, 0, 0, 0, 0, 0, 0, 5, 6 };
    for (int i = 0; i < 10; i++) {
        assert_true(bound[i] >= gm * s[i]);
        assert_true(bound[i] <= gm * s[i] * 1.0001 + 1e-40);
    }
    free(bound);
    kv_tensor_release(e);
    kv_case_inputs_free(&in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ulp_distance_f32),
        cmocka_unit_test(test_ulp_distance_half),
        cmocka_unit_test(test_ulp_distance_f64),
        cmocka_unit_test(test_bitwise_equal_and_one_off),
        cmocka_unit_test(test_bitwise_nan_payloads),
        cmocka_unit_test(test_signed_zero),
        cmocka_unit_test(test_ulp_rule_half),
        cmocka_unit_test(test_abs_rel_rules),
        cmocka_unit_test(test_bound_rule),
        cmocka_unit_test(test_integers_and_bool),
        cmocka_unit_test(test_complex),
        cmocka_unit_test(test_dtype_shape_mismatch),
        cmocka_unit_test(test_strided_got),
        cmocka_unit_test(test_mismatch_listing),
        cmocka_unit_test(test_heat_grid),
        cmocka_unit_test(test_unit_roundoff_and_gamma),
        cmocka_unit_test(test_table_covers_every_op),
        cmocka_unit_test(test_backend_overrides),
        cmocka_unit_test(test_tolerances_file),
        cmocka_unit_test(test_table_rules),
        cmocka_unit_test(test_rule_scale_grad_by_freq),
        cmocka_unit_test(test_bound_mm),
        cmocka_unit_test(test_bound_sum),
        cmocka_unit_test(test_equal_values_pass_with_nan_scale),
        cmocka_unit_test(test_bound_linear_scatter),
        cmocka_unit_test(test_nonfinite_mismatches_named),
        cmocka_unit_test(test_sign_mismatches_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
