/* The semantics table of README.md ("Golden semantics"), row by row: what
 * the golden (the exact generator, runner/golden/exact.h) and the
 * reference give where the exact result is undefined or conventional —
 * rounding into each format with its subnormals and overflow, NaN
 * propagation, signed zeros, IEEE 754-2019 maximum/minimum, float -> int
 * of NaN and out-of-range values, complex special values — and the three
 * reference bugs of issue 14. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "runner/golden/exact.h"
#include "test_util.h"

/* ---- rounding into a format ---- */

static double round_to(double v, kv_dtype dt) {
    mpfr_t y;
    mpfr_init2(y, 64);
    mpfr_set_d(y, v, MPFR_RNDN);
    const double r = kv_exact_round(y, dt);
    mpfr_clear(y);
    return r;
}

static void test_round_formats(void **state) {
    (void)state;
    /* f16: 65504 is the largest finite, 65520 the midpoint to 2^16: ties
     * to even round up to infinity, below it down. */
    assert_true(round_to(65519.0, KV_F16) == 65504.0);
    assert_true(isinf(round_to(65520.0, KV_F16)));
    /* f16 subnormals: 2^-24 is the smallest; half of it ties to +0,
     * three quarters round up to it; the sign survives underflow. */
    assert_true(round_to(0x1p-25, KV_F16) == 0.0);
    assert_true(round_to(0x1.8p-25, KV_F16) == 0x1p-24);
    assert_true(signbit(round_to(-0x1p-26, KV_F16)) && round_to(-0x1p-26, KV_F16) == 0.0);
    /* f32 and f64 smallest subnormals. */
    assert_true(round_to(0x1.8p-150, KV_F32) == 0x1p-149);
    assert_true(round_to(0x1p-150, KV_F32) == 0.0);
    /* bf16: 8 bits; 1 + 2^-8 ties to 1, 1 + 3*2^-9 rounds up. */
    assert_true(round_to(1.0 + 0x1p-8, KV_BF16) == 1.0);
    assert_true(round_to(1.0 + 0x1.8p-8, KV_BF16) == 1.0 + 0x1p-7);
    /* f64 keeps every double; NaN stays NaN. */
    assert_true(round_to(DBL_TRUE_MIN, KV_F64) == DBL_TRUE_MIN);
    assert_true(isnan(round_to(NAN, KV_F32)));
}

/* ---- family functions on explicit values ---- */

typedef struct fixture {
    kv_case c;
    kv_case_inputs in;
    kv_case_outputs out;
} fixture;

static kv_tensor *f64_tensor(const double *v, int64_t n) {
    int64_t sz[1] = { n };
    kv_tensor *t = kv_tensor_from_data(v, sz, 1, KV_F64);
    assert_non_null(t);
    return t;
}

/* Runs family `fn` of op on inputs a (and b) with scalar argument `s` at
 * index `si` (or none when si < 0); the output starts as a copy of
 * `ref` (the reference's values, whose NaNs the golden keeps). */
static kv_tensor *run_family(kv_status (*fn)(const kv_exact_call *), const char *op, kv_tensor *a, kv_tensor *b,
                             int si, kv_scalar s, const double *ref, int64_t n) {
    fixture f;
    memset(&f, 0, sizeof f);
    kv_case_init(&f.c);
    strcpy(f.c.op, op);
    f.in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a };
    f.in.nargs = 1;
    if (b) f.in.args[f.in.nargs++] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = b };
    if (si >= 0) {
        while (f.in.nargs < si) f.in.args[f.in.nargs++] = (kv_ivalue){ .tag = KV_IV_NONE };
        f.in.args[si] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = s };
        f.in.nargs = si + 1;
    }
    f.out.n = 1;
    f.out.t[0] = f64_tensor(ref, n);
    const kv_op *kop = kv_op_find(op);
    assert_non_null(kop);
    const kv_exact_call x = { &f.c, kop, op, &f.in, &f.out, NULL };
    KV_TEST_OKS(fn(&x));
    return f.out.t[0];
}

static double at(const kv_tensor *t, int64_t i) { return ((const double *)kv_tensor_data(t))[i]; }

static void test_unary_specials(void **state) {
    (void)state;
    const double x[6] = { -0.0, 0.0, -1.0, INFINITY, -INFINITY, NAN };
    const double zero[6] = { 0 };
    kv_tensor *a = f64_tensor(x, 6);
    kv_tensor *o = run_family(kv_exact_unary, "sqrt", a, NULL, -1, kv_scalar_int(0), zero, 6);
    assert_true(at(o, 0) == 0.0 && signbit(at(o, 0)));      /* sqrt(-0) = -0 */
    assert_true(isnan(at(o, 2)) && isinf(at(o, 3)) && isnan(at(o, 4)) && isnan(at(o, 5)));
    kv_tensor_release(o);
    o = run_family(kv_exact_unary, "rsqrt", a, NULL, -1, kv_scalar_int(0), zero, 6);
    assert_true(at(o, 0) == -INFINITY && at(o, 1) == INFINITY); /* 1/sqrt(-0) = -inf */
    assert_true(at(o, 3) == 0.0 && !signbit(at(o, 3)));
    kv_tensor_release(o);
    o = run_family(kv_exact_unary, "log", a, NULL, -1, kv_scalar_int(0), zero, 6);
    assert_true(at(o, 0) == -INFINITY && at(o, 1) == -INFINITY && isnan(at(o, 2)) && at(o, 3) == INFINITY);
    kv_tensor_release(o);
    o = run_family(kv_exact_unary, "gelu", a, NULL, -1, kv_scalar_int(0), zero, 6);
    assert_true(at(o, 3) == INFINITY && isnan(at(o, 4)));    /* -inf * 0: NaN, as the formula */
    assert_true(at(o, 0) == 0.0 && signbit(at(o, 0)));      /* gelu(-0) = -0 */
    kv_tensor_release(o);
    o = run_family(kv_exact_unary, "sigmoid", a, NULL, -1, kv_scalar_int(0), zero, 6);
    assert_true(at(o, 3) == 1.0 && at(o, 4) == 0.0 && at(o, 1) == 0.5);
    kv_tensor_release(o);
    kv_tensor_release(a);
    /* exp overflows to inf and underflows to +0 in the output format. */
    const double big[2] = { 1000.0, -1000.0 };
    a = f64_tensor(big, 2);
    o = run_family(kv_exact_unary, "exp", a, NULL, -1, kv_scalar_int(0), zero, 2);
    assert_true(at(o, 0) == INFINITY && at(o, 1) == 0.0 && !signbit(at(o, 1)));
    kv_tensor_release(o);
    kv_tensor_release(a);
}

static void test_nan_keeps_reference_payload(void **state) {
    (void)state;
    const double x[1] = { NAN };
    uint64_t bits = 0x7ff8000000000123u;
    double payload;
    memcpy(&payload, &bits, sizeof payload);
    const double ref[1] = { payload };
    kv_tensor *a = f64_tensor(x, 1);
    kv_tensor *o = run_family(kv_exact_unary, "exp", a, NULL, -1, kv_scalar_int(0), ref, 1);
    uint64_t got;
    memcpy(&got, kv_tensor_data(o), sizeof got);
    assert_true(got == bits);
    kv_tensor_release(o);
    kv_tensor_release(a);
}

/* Issue 14, bug a: inf + (-2.5 * DBL_MAX) rounds once: +inf. */
static void test_add_alpha_rounds_once(void **state) {
    (void)state;
    const double x[2] = { INFINITY, 1.0 }, y[2] = { DBL_MAX, 0x1p-60 };
    const double zero[2] = { 0 };
    kv_tensor *a = f64_tensor(x, 2), *b = f64_tensor(y, 2);
    kv_tensor *o = run_family(kv_exact_binary, "add.Tensor", a, b, 2, kv_scalar_double(-2.5), zero, 2);
    assert_true(at(o, 0) == INFINITY);
    assert_true(at(o, 1) == 1.0 - 2.5 * 0x1p-60);
    kv_tensor_release(o);
    /* The reference agrees now (fma). */
    kv_scalar alpha = kv_scalar_double(-2.5);
    kv_tensor *r = KV_TEST_OK(kv_add(a, b, alpha));
    assert_true(((const double *)kv_tensor_data(r))[0] == INFINITY);
    kv_tensor_release(r);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static void test_div_signed_zero(void **state) {
    (void)state;
    const double x[3] = { 1.0, 0.0, -1.0 }, y[3] = { -0.0, 0.0, INFINITY };
    const double zero[3] = { 0 };
    kv_tensor *a = f64_tensor(x, 3), *b = f64_tensor(y, 3);
    kv_tensor *o = run_family(kv_exact_binary, "div.Tensor", a, b, -1, kv_scalar_int(0), zero, 3);
    assert_true(at(o, 0) == -INFINITY && isnan(at(o, 1)) && at(o, 2) == 0.0 && signbit(at(o, 2)));
    kv_tensor_release(o);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* IEEE 754-2019 maximum/minimum (the reference's values are the golden's):
 * NaN propagates, -0 < +0. */
static void test_maximum_minimum(void **state) {
    (void)state;
    const double x[3] = { NAN, -0.0, 1.0 }, y[3] = { 1.0, 0.0, NAN };
    kv_tensor *a = f64_tensor(x, 3), *b = f64_tensor(y, 3);
    kv_tensor *mx = KV_TEST_OK(kv_maximum(a, b)), *mn = KV_TEST_OK(kv_minimum(a, b));
    assert_true(isnan(at(mx, 0)) && isnan(at(mx, 2)) && at(mx, 1) == 0.0 && !signbit(at(mx, 1)));
    assert_true(isnan(at(mn, 0)) && isnan(at(mn, 2)) && at(mn, 1) == 0.0 && signbit(at(mn, 1)));
    kv_tensor_release(mx);
    kv_tensor_release(mn);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* float -> int: NaN and +-inf store 0; out of range wraps the
 * two's-complement low bits of the truncated integer. */
static void test_float_to_int(void **state) {
    (void)state;
    const double x[5] = { NAN, INFINITY, -INFINITY, 300.7, -1.5 };
    kv_tensor *a = f64_tensor(x, 5);
    const kv_dtype u8 = KV_U8;
    kv_tensor *o = KV_TEST_OK(kv__to_copy(a, &u8, NULL, NULL, NULL, false, NULL));
    const uint8_t *p = kv_tensor_data(o);
    assert_int_equal(p[0], 0);
    assert_int_equal(p[1], 0);
    assert_int_equal(p[2], 0);
    assert_int_equal(p[3], 300 % 256);
    assert_int_equal(p[4], 255);
    kv_tensor_release(o);
    kv_tensor_release(a);
}

/* Complex: exact components (a zero component of an exact product is
 * +0), and Annex G values for non-finite inputs come from the reference. */
static void test_complex(void **state) {
    (void)state;
    const double z[4] = { 1.0, 1.0, INFINITY, 0.0 }; /* 1+1i, inf+0i */
    int64_t sz[1] = { 2 };
    kv_tensor *a = kv_tensor_from_data(z, sz, 1, KV_C128);
    assert_non_null(a);
    kv_tensor *ref = KV_TEST_OK(kv_pow(a, kv_scalar_int(2)));
    fixture f;
    memset(&f, 0, sizeof f);
    kv_case_init(&f.c);
    strcpy(f.c.op, "pow.Tensor_Scalar");
    f.in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a };
    f.in.args[1] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = kv_scalar_int(2) };
    f.in.nargs = 2;
    f.out.n = 1;
    f.out.t[0] = ref;
    const double ref_inf_re = ((const double *)kv_tensor_data(ref))[2];
    const kv_exact_call x = { &f.c, kv_op_find("pow.Tensor_Scalar"), "pow.Tensor_Scalar", &f.in, &f.out, NULL };
    KV_TEST_OKS(kv_exact_unary(&x));
    const double *o = kv_tensor_data(ref);
    assert_true(o[0] == 0.0 && !signbit(o[0]) && o[1] == 2.0); /* (1+i)^2 = 0 + 2i exactly */
    assert_true(memcmp(&o[2], &ref_inf_re, sizeof(double)) == 0 || (isnan(o[2]) && isnan(ref_inf_re)));
    kv_tensor_release(ref);
    kv_tensor_release(a);
}

/* ---- at the range's ends (issue 22 item 4) ---- */

/* Runs unary `op` on n c128 values (re, im pairs) through the exact
 * generator; the output's components. */
static kv_tensor *run_complex(const char *op, const double *z, int64_t n) {
    int64_t sz[1] = { n };
    kv_tensor *a = kv_tensor_from_data(z, sz, 1, KV_C128);
    assert_non_null(a);
    fixture f;
    memset(&f, 0, sizeof f);
    kv_case_init(&f.c);
    strcpy(f.c.op, op);
    f.in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a };
    f.in.nargs = 1;
    f.out.n = 1;
    f.out.t[0] = kv_tensor_empty(sz, 1, KV_C128, KV_DEVICE_CPU0);
    assert_non_null(f.out.t[0]);
    memset(kv_tensor_data(f.out.t[0]), 0, (size_t)n * 16);
    const kv_exact_call x = { &f.c, kv_op_find(op), op, &f.in, &f.out, NULL };
    KV_TEST_OKS(kv_exact_unary(&x));
    kv_tensor_release(a);
    return f.out.t[0];
}

/* Component k of the output is exactly v, the sign of a zero included. */
static void expect_component(const char *op, const kv_tensor *o, int k, double v) {
    const double got = ((const double *)kv_tensor_data(o))[k];
    if (!(got == v && signbit(got) == signbit(v)))
        fail_msg("%s: element %d %s: got %a, the exact value rounds to %a", op, k / 2, k % 2 ? "im" : "re", got, v);
}

/* Finite inputs whose exact values are finite or ±inf, where e^x, sinh
 * and cosh leave MPFR's exponent range: the values follow from the
 * identities in exact_ew.c (never NaN). */
static void test_complex_extremes(void **state) {
    (void)state;
    const double M = DBL_MAX;
    const double ez[6] = { M, 0.0, M, -0.0, -M, 1.0 };
    kv_tensor *o = run_complex("exp", ez, 3);
    expect_component("exp", o, 0, INFINITY); /* e^max · cos 0 */
    expect_component("exp", o, 1, 0.0);      /* e^max · sin(+0) = +0 exactly */
    expect_component("exp", o, 3, -0.0);
    expect_component("exp", o, 4, 0.0);      /* e^-max · cos 1: +tiny */
    expect_component("exp", o, 5, 0.0);
    kv_tensor_release(o);
    /* tanh(±max + iy) = ±1 + i·sin(2y)·tiny */
    const double tz[8] = { M, 1.0, -M, -1.0, M, 2.0, -M, 0.0 };
    o = run_complex("tanh", tz, 4);
    const double tv[8] = { 1.0, 0.0, -1.0, -0.0, 1.0, -0.0 /* sin 4 < 0 */, -1.0, 0.0 };
    for (int k = 0; k < 8; k++) expect_component("tanh", o, k, tv[k]);
    kv_tensor_release(o);
    /* sin(±0 + i·max) = sin(±0)·cosh(max) + i·cos(0)·sinh(max) */
    const double sz[6] = { 0.0, M, -0.0, M, 0.0, -M };
    o = run_complex("sin", sz, 3);
    const double sv[6] = { 0.0, INFINITY, -0.0, INFINITY, 0.0, -INFINITY };
    for (int k = 0; k < 6; k++) expect_component("sin", o, k, sv[k]);
    kv_tensor_release(o);
    /* cos(±0 + i·max) = cosh(max) − i·sin(±0)·sinh(max) */
    o = run_complex("cos", sz, 3);
    const double cv[6] = { INFINITY, -0.0, INFINITY, 0.0, INFINITY, 0.0 };
    for (int k = 0; k < 6; k++) expect_component("cos", o, k, cv[k]);
    kv_tensor_release(o);
    /* sigmoid(−max + iy) = e^z (1 − e^z ...): the signs of cos y, sin y;
     * sigmoid(max + iy) = 1 − e^-z ...: 1 and the sign of sin y. */
    const double gz[10] = { -M, 1.0, -M, 2.0, -M, -0.0, M, -1.0, M, 0.0 };
    o = run_complex("sigmoid", gz, 5);
    const double gv[10] = { 0.0, 0.0, -0.0, 0.0, 0.0, -0.0, 1.0, -0.0, 1.0, 0.0 };
    for (int k = 0; k < 10; k++) expect_component("sigmoid", o, k, gv[k]);
    kv_tensor_release(o);
}

/* gelu_backward(g, x) = g·(Phi(x) + x·phi(x)), negative for x < −1: at
 * x = −max both terms leave MPFR's range, the exact value is −g·tiny. */
static void test_gelu_backward_sign_at_max(void **state) {
    (void)state;
    const double g[3] = { 1.0, -1.0, 1.0 }, x[3] = { -DBL_MAX, -DBL_MAX, DBL_MAX };
    const double zero[3] = { 0 };
    kv_tensor *a = f64_tensor(g, 3), *b = f64_tensor(x, 3);
    kv_tensor *o = run_family(kv_exact_gelu_backward, "gelu_backward", a, b, -1, kv_scalar_int(0), zero, 3);
    assert_true(at(o, 0) == 0.0 && signbit(at(o, 0)));
    assert_true(at(o, 1) == 0.0 && !signbit(at(o, 1)));
    assert_true(at(o, 2) == 1.0);
    kv_tensor_release(o);
    /* The tanh form: (1 + tanh u)/2 + x/2·sech²(u)·k(1 + 3cx²), likewise. */
    fixture f;
    memset(&f, 0, sizeof f);
    kv_case_init(&f.c);
    strcpy(f.c.op, "gelu_backward");
    f.in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a };
    f.in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = b };
    f.in.args[2] = (kv_ivalue){ .tag = KV_IV_STR, .v.str = "tanh" };
    f.in.nargs = 3;
    f.out.n = 1;
    f.out.t[0] = f64_tensor(zero, 3);
    const kv_exact_call c = { &f.c, kv_op_find("gelu_backward"), "gelu_backward", &f.in, &f.out, NULL };
    KV_TEST_OKS(kv_exact_gelu_backward(&c));
    o = f.out.t[0];
    assert_true(at(o, 0) == 0.0 && signbit(at(o, 0)));
    assert_true(at(o, 1) == 0.0 && !signbit(at(o, 1)));
    assert_true(at(o, 2) == 1.0);
    kv_tensor_release(o);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_formats),
        cmocka_unit_test(test_unary_specials),
        cmocka_unit_test(test_nan_keeps_reference_payload),
        cmocka_unit_test(test_add_alpha_rounds_once),
        cmocka_unit_test(test_div_signed_zero),
        cmocka_unit_test(test_maximum_minimum),
        cmocka_unit_test(test_float_to_int),
        cmocka_unit_test(test_complex),
        cmocka_unit_test(test_complex_extremes),
        cmocka_unit_test(test_gelu_backward_sign_at_max),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
