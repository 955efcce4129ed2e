/* The tolerance table restated against the correctly rounded truth
 * (src/runner/check/tolerance.c, issue 14 item 2): one test per kind of
 * rule. Elementwise ops carry N ulp per dtype (CUDA's documented bound, or
 * glibc's, never below what the accuracy sweep measures); exact ops are
 * bitwise; fill=exact is bitwise only where the fill really keeps every
 * partial result on the output dtype's grid (addmm's scalings, long sums
 * and scatters into narrow dtypes fall back to the bound); and an
 * overflowing alpha*b fails a kernel that makes NaN of it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/check/check.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"
#include "test_util.h"

static int group_setup(void **state) {
    (void)state;
    return kv_init() == KV_OK ? 0 : -1;
}

static kv_cmp_rule rule_of(const kv_case *c, kv_dtype out, kv_bound_kind *bk) {
    return kv_tol_rule_for(c, out, bk, NULL);
}

/* The ulp bound of a unary op for a dtype (the case's input dtype). */
static double ulp_of(const char *op, kv_dtype dt) {
    const kv_shape sh[1] = { { 1, { 8 } } };
    kv_case c = kv_test_case_of(op, dt, 1, sh);
    kv_bound_kind bk;
    const kv_cmp_rule r = rule_of(&c, dt, &bk);
    assert_int_equal(r.kind, KV_CMP_ULP);
    return r.value;
}

static void test_elementwise_ulps(void **state) {
    (void)state;
    static const struct {
        const char *op;
        double f32, f64;
    } rows[] = {
        { "exp", 2, 1 },  { "log", 1, 1 },  { "sin", 2, 2 },     { "cos", 2, 2 },  { "tanh", 2, 2 },
        { "rsqrt", 2, 2 }, { "sigmoid", 4, 4 }, { "silu", 4, 4 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (ulp_of(rows[i].op, KV_F32) != rows[i].f32) fail_msg("%s f32: %g", rows[i].op, ulp_of(rows[i].op, KV_F32));
        if (ulp_of(rows[i].op, KV_F64) != rows[i].f64) fail_msg("%s f64: %g", rows[i].op, ulp_of(rows[i].op, KV_F64));
        /* f16/bf16: computed wider and rounded once: 1 ulp. */
        assert_true(ulp_of(rows[i].op, KV_F16) == 1.0);
        assert_true(ulp_of(rows[i].op, KV_BF16) == 1.0);
    }
}

static void test_pow_rules(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 1, { 8 } } };
    kv_case c = kv_test_case_of("pow.Tensor_Scalar", KV_F32, 1, sh);
    kv_test_case_add_arg(&c, "exponent", "0.5");
    kv_bound_kind bk;
    kv_cmp_rule r = rule_of(&c, KV_F32, &bk);
    assert_int_equal(r.kind, KV_CMP_ULP);
    assert_true(r.value == 4.0); /* CUDA's powf */
    assert_true(rule_of(&c, KV_F64, &bk).value == 2.0);
    assert_true(rule_of(&c, KV_BF16, &bk).value == 1.0);
    r = rule_of(&c, KV_C64, &bk);
    assert_int_equal(r.kind, KV_CMP_REL);
    assert_true(r.value == 8 * 0x1p-24);
    assert_int_equal(rule_of(&c, KV_I32, &bk).kind, KV_CMP_BITWISE);
}

static void test_exact_ops_bitwise(void **state) {
    (void)state;
    static const char *const ops[] = { "sqrt", "neg", "relu", "mul.Tensor", "div.Tensor", "add.Tensor", "clamp" };
    const kv_shape sh[2] = { { 1, { 8 } }, { 1, { 8 } } };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        kv_case c = kv_test_case_of(ops[i], KV_F32, strcmp(ops[i], "sqrt") == 0 ? 1 : 2, sh);
        kv_bound_kind bk;
        if (rule_of(&c, KV_F32, &bk).kind != KV_CMP_BITWISE) fail_msg("%s is not bitwise", ops[i]);
        const kv_tol_entry *e = NULL;
        kv_tol_rule_for(&c, KV_F32, &bk, &e);
        assert_non_null(e);
        assert_non_null(strstr(e->reason, "bitwise"));
    }
}

/* Every row states its reason against the truth: no row still speaks of
 * the reference rounding the golden. */
static void test_reasons_against_truth(void **state) {
    (void)state;
    for (int i = 0; i < kv_tol_count(); i++) {
        const kv_tol_entry *e = kv_tol_at(i);
        if (strstr(e->reason, "the reference rounds") != NULL) fail_msg("%s: %s", e->op, e->reason);
        assert_true(strlen(e->reason) > 10);
    }
}

/* ---- fill=exact shortcuts ---- */

static kv_cmp_kind exact_kind(kv_case *c, kv_dtype out) {
    c->fill = KV_FILL_EXACT;
    kv_bound_kind bk;
    return rule_of(c, out, &bk).kind;
}

static void test_exact_fill_addmm_scalings(void **state) {
    (void)state;
    /* f32, K = 5: every scaling of the small integers stays exact. */
    const kv_shape s32[3] = { { 2, { 4, 3 } }, { 2, { 4, 5 } }, { 2, { 5, 3 } } };
    kv_case c = kv_test_case_of("addmm", KV_F32, 3, s32);
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
    kv_test_case_add_arg(&c, "beta", "2");
    kv_test_case_add_arg(&c, "alpha", "-3");
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
    /* f16, K = 128: the fill takes R = 4 so that R^2 K = 2048 = 2^11, and
     * beta*c on top (2047 + 4 = 2051) leaves f16's grid: the bound. */
    const kv_shape s16[3] = { { 2, { 4, 3 } }, { 2, { 4, 128 } }, { 2, { 128, 3 } } };
    c = kv_test_case_of("addmm", KV_F16, 3, s16);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BOUND);
    kv_test_case_add_arg(&c, "beta", "0");
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BITWISE);
    /* A non-integral scaling never keeps the grid. */
    c = kv_test_case_of("addmm", KV_F32, 3, s32);
    kv_test_case_add_arg(&c, "alpha", "0.5");
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BOUND);
}

static void test_exact_fill_long_sum(void **state) {
    (void)state;
    /* 1024 integers in [-2, 2] fit f16's 2^11; 4096 values (R = 1) do not. */
    kv_shape sh[1] = { { 1, { 1024 } } };
    kv_case c = kv_test_case_of("sum.dim_IntList", KV_F16, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BITWISE);
    sh[0].sizes[0] = 4096;
    c = kv_test_case_of("sum.dim_IntList", KV_F16, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BOUND);
    c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
    /* mean divides: never bitwise. */
    sh[0].sizes[0] = 8;
    c = kv_test_case_of("mean.dim", KV_F32, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BOUND);
    /* prod of +-1: always exact. */
    c = kv_test_case_of("prod.dim_int", KV_F16, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BITWISE);
}

static void test_exact_fill_scatter_narrow(void **state) {
    (void)state;
    /* Quarters up to 4: a sum of n is at most 16n quarters; bf16 holds 2^8. */
    const kv_shape small[2] = { { 2, { 3, 4 } }, { 1, { 3 } } };
    kv_case c = kv_test_case_of("index_select_backward", KV_BF16, 2, small);
    c.dtypes[1] = KV_I64;
    assert_int_equal(exact_kind(&c, KV_BF16), KV_CMP_BITWISE);
    const kv_shape big[2] = { { 2, { 32, 4 } }, { 1, { 32 } } };
    c = kv_test_case_of("index_select_backward", KV_BF16, 2, big);
    c.dtypes[1] = KV_I64;
    assert_int_equal(exact_kind(&c, KV_BF16), KV_CMP_BOUND);
    c = kv_test_case_of("index_select_backward", KV_F32, 2, big);
    c.dtypes[1] = KV_I64;
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
}

/* ---- overflow: alpha*b past the range ---- */

static void test_axpy_overflow(void **state) {
    (void)state;
    /* inf + (-2.5)*DBL_MAX: the truth is +inf; a kernel that rounds
     * alpha*b first makes inf - inf = NaN and must fail. */
    const int64_t sz[1] = { 1 };
    const double av[1] = { INFINITY }, bv[1] = { DBL_MAX };
    const kv_shape sh[2] = { { 1, { 1 } }, { 1, { 1 } } };
    kv_case c = kv_test_case_of("add.Tensor", KV_F64, 2, sh);
    kv_test_case_add_arg(&c, "alpha", "-2.5");
    kv_bound_kind bk;
    const kv_tol_entry *e = NULL;
    const kv_cmp_rule r = kv_tol_rule_for(&c, KV_F64, &bk, &e);
    assert_int_equal(r.kind, KV_CMP_BOUND);
    assert_int_equal(bk, KV_BOUND_AXPY);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 2;
    in.tensors[0] = kv_tensor_from_data(av, sz, 1, KV_F64);
    in.tensors[1] = kv_tensor_from_data(bv, sz, 1, KV_F64);
    in.nargs = 3;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[1] };
    in.args[2] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = kv_scalar_double(-2.5) };
    const double tv[1] = { INFINITY }, nv[1] = { NAN };
    kv_tensor *truth = kv_tensor_from_data(tv, sz, 1, KV_F64);
    kv_tensor *bad = kv_tensor_from_data(nv, sz, 1, KV_F64);
    double *bound = NULL;
    assert_int_equal(kv_tol_bounds(bk, e->value, &c, &in, truth, 0, &bound), KV_OK);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(truth, bad, &r, bound, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(kv_compare(truth, truth, &r, bound, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    free(bound);
    kv_tensor_release(truth);
    kv_tensor_release(bad);
    kv_case_inputs_free(&in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_ulps),
        cmocka_unit_test(test_pow_rules),
        cmocka_unit_test(test_exact_ops_bitwise),
        cmocka_unit_test(test_reasons_against_truth),
        cmocka_unit_test(test_exact_fill_addmm_scalings),
        cmocka_unit_test(test_exact_fill_long_sum),
        cmocka_unit_test(test_exact_fill_scatter_narrow),
        cmocka_unit_test(test_axpy_overflow),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
