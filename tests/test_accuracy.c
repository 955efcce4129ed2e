/* The accuracy check and report (check_accuracy.c, report_accuracy.c,
 * ulp_hist.c) and the sweep fill: a deliberately 3-ulp-off exp variant is
 * measured as 3 ulp (max and 99.9%) and fails against exp's 2-ulp rule,
 * the correct variants measure 0, the report's table shows both, and the
 * sweep walks the bit patterns stratum by stratum. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv.h"
#include "kv/tune.h"
#include "ref/ref_kernels.h"
#include "runner/check/check.h"
#include "runner/check/ulp_hist.h"
#include "runner/exec/fill.h"
#include "runner/report/report.h"
#include "test_util.h"

static int group_setup(void **state) {
    (void)state;
    return kv_init() == KV_OK ? 0 : -1;
}

static const kv_shape S45[1] = { { 2, { 4, 5 } } };

static kv_result_list run(const kv_case *c) {
    kv_run_env env = { .golden = NULL, .regen_golden = false, .dump_dir = NULL, .golden_mode = KV_GOLDEN_MODE_AUTO };
    kv_result_list res = { 0 };
    kv_case_run(c, &env, &res);
    return res;
}

static const kv_check_result *find(const kv_result_list *l, const char *check) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->items[i].check, check) == 0) return &l->items[i];
    fail_msg("no result row '%s'", check);
    return NULL;
}

/* ---- histograms ---- */

static void test_hist_bins(void **state) {
    (void)state;
    assert_int_equal(kv_ulp_bin(0), 0);
    assert_int_equal(kv_ulp_bin(15), 15);
    assert_int_equal(kv_ulp_bin(16), 16);
    assert_int_equal(kv_ulp_bin(31), 16);
    assert_int_equal(kv_ulp_bin(32), 17);
    assert_int_equal(kv_ulp_bin(-1), KV_ULP_NAN_BIN);
    assert_int_equal(kv_ulp_bin(0x1p70), KV_ULP_NAN_BIN - 1);
    assert_true(kv_ulp_bin_upper(3) == 3.0);
    assert_true(kv_ulp_bin_upper(16) == 31.0);
    assert_true(isinf(kv_ulp_bin_upper(KV_ULP_NAN_BIN)));
}

static void test_hist_quantile(void **state) {
    (void)state;
    int64_t h[KV_ULP_BINS] = { 0 };
    h[0] = 998;
    h[1] = 1;
    h[5] = 1;
    /* 99.9% of 1000 = the 999th element: 1 ulp; the max is 5. */
    assert_true(kv_ulp_quantile(h, 0.999, 5.0) == 1.0);
    assert_true(kv_ulp_quantile(h, 1.0, 5.0) == 5.0);
    h[0] = 997;
    h[17] = 1; /* one error in [32, 63], at most the max 40 */
    assert_true(kv_ulp_quantile(h, 1.0, 40.0) == 40.0);
    int64_t z[KV_ULP_BINS] = { 0 };
    assert_true(kv_ulp_quantile(z, 0.999, 0.0) == 0.0);
    char b[32];
    kv_ulp_format(INFINITY, b, sizeof b);
    assert_string_equal(b, "inf");
    kv_ulp_format(3, b, sizeof b);
    assert_string_equal(b, "3");
}

/* ---- a kernel 3 ulps off ---- */

static kv_status exp_off3(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_status st = kv_ref_exp(op, ks, stack);
    if (st != KV_OK) return st;
    kv_tensor *t = stack->slots[0].v.tensor;
    uint32_t *p = kv_tensor_data(t);
    for (int64_t i = 0; i < kv_tensor_numel(t); i++) p[i] += 3;
    return KV_OK;
}

static bool only_f32(const kv_op *op, const kv_stack *stack) {
    (void)op;
    return stack->size > 0 && stack->slots[0].tag == KV_IV_TENSOR && stack->slots[0].v.tensor->dtype == KV_F32;
}

static void test_off_by_three_is_measured(void **state) {
    (void)state;
    assert_int_equal(kv_tune_register_variant("exp", KV_KEY_CPU, "off3", exp_off3, only_f32), KV_OK);
    kv_case c = kv_test_case_of("exp", KV_F32, 1, S45);
    c.checks = 1u << KV_CHECK_ACCURACY;
    kv_result_list res = run(&c);
    const kv_check_result *bad = find(&res, "accuracy:CPU/off3");
    assert_int_equal(bad->status, KV_RESULT_FAIL);
    assert_true(bad->ulp_max == 3.0);
    assert_int_equal(bad->ulp_elements, 20);
    assert_int_equal(bad->ulp_hist[3], 20);
    assert_true(kv_ulp_quantile(bad->ulp_hist, 0.999, bad->ulp_max) == 3.0);
    assert_non_null(strstr(bad->message, "max 3 ulp, 99.9% 3 ulp"));
    assert_non_null(strstr(bad->message, "tolerance of 2 ulp"));
    /* Counted like every row: all 20 differ from the correctly rounded
     * value, and the message says so (no generic "0 of 20" line). */
    assert_int_equal(bad->mismatched, 20);
    assert_int_equal(bad->compared, 20);
    assert_non_null(strstr(bad->message, "20 of 20 elements differ from the correctly rounded value"));
    /* The reference computes in double and rounds once: correctly
     * rounded on these inputs. */
    const kv_check_result *ref = find(&res, "accuracy:CPU/ref");
    assert_int_equal(ref->status, KV_RESULT_PASS);
    assert_true(ref->ulp_max == 0.0);
    assert_int_equal(ref->ulp_hist[0], 20);
    assert_int_equal(ref->mismatched, 0);

    /* The report's table says so. */
    char path[] = "/tmp/kv_test_accuracy_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(kv_report_write_accuracy(&res, NULL, path), KV_OK);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char text[8192];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "| exp | f32 | CPU/off3 | 1 | 20 | 3 ✗ | 3 | 0.0000% |"));
    assert_non_null(strstr(text, "| exp | f32 | CPU/ref | 1 | 20 | 0 | 0 | 100.0000% |"));
    assert_int_equal(kv_report_write_accuracy_jsonl(&res, NULL, path), KV_OK);
    f = fopen(path, "r");
    assert_non_null(f);
    const size_t m = fread(text, 1, sizeof text - 1, f);
    text[m] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "\"variant\":\"CPU/off3\""));
    assert_non_null(strstr(text, "\"max_ulp\":3.0"));
    unlink(path);
    kv_result_list_free(&res);
}

/* A run without accuracy rows writes no accuracy report. */
static void test_no_rows_no_file(void **state) {
    (void)state;
    kv_result_list res = { 0 };
    char path[] = "/tmp/kv_test_accuracy_none_XXXXXX";
    assert_non_null(mkdtemp(path));
    char file[128];
    snprintf(file, sizeof file, "%s/accuracy.md", path);
    assert_int_equal(kv_report_write_accuracy(&res, NULL, file), KV_OK);
    assert_int_equal(access(file, F_OK), -1);
    rmdir(path);
}

/* An integer-only output is not measured. */
static void test_integer_output_skipped(void **state) {
    (void)state;
    kv_case c = kv_test_case_of("neg", KV_I32, 1, S45);
    c.checks = 1u << KV_CHECK_ACCURACY;
    kv_result_list res = run(&c);
    assert_int_equal(find(&res, "accuracy")->status, KV_RESULT_SKIP);
    kv_result_list_free(&res);
}

/* ---- the sweep fill ---- */

static void sweep_bits(kv_dtype dt, const char *op, int64_t n, uint64_t *out) {
    const kv_shape sh[1] = { { 1, { n } } };
    kv_case c = kv_test_case_of(op, dt, 1, sh);
    c.fill = KV_FILL_SWEEP;
    kv_tensor *t = kv_tensor_empty(&n, 1, dt, KV_DEVICE_CPU0);
    assert_non_null(t);
    assert_int_equal(kv_fill_case_input(&c, kv_op_schema(kv_op_find(op)), 0, t), KV_OK);
    for (int64_t i = 0; i < n; i++) {
        if (dt == KV_F32) out[i] = ((const uint32_t *)kv_tensor_data(t))[i];
        else out[i] = ((const uint16_t *)kv_tensor_data(t))[i];
    }
    kv_tensor_release(t);
}

static void test_sweep_strata(void **state) {
    (void)state;
    uint64_t b[64];
    /* 16 strata of the 2^32 f32 patterns: element k in [k 2^28, (k+1) 2^28). */
    sweep_bits(KV_F32, "exp", 16, b);
    for (int k = 0; k < 16; k++) assert_true(b[k] >> 28 == (uint64_t)k);
    /* log's domain is positive: 16 strata of the 2^31 sign-clear patterns. */
    sweep_bits(KV_F32, "log", 16, b);
    for (int k = 0; k < 16; k++) assert_true(b[k] >> 27 == (uint64_t)k);
    /* 7 strata: floor(2^32 / 7) each, none past the end. */
    sweep_bits(KV_F32, "exp", 7, b);
    for (int k = 0; k < 7; k++) assert_true(b[k] / (0x100000000ull / 7) == (uint64_t)k);
}

static void test_sweep_every_half_pattern(void **state) {
    (void)state;
    /* 2^16 elements of f16: every pattern exactly once, in order. */
    uint64_t *b = malloc(65536 * sizeof *b);
    assert_non_null(b);
    sweep_bits(KV_F16, "exp", 65536, b);
    for (uint64_t k = 0; k < 65536; k++) {
        /* NaN patterns are stored as a NaN; the rest as themselves. */
        const bool nan = (k & 0x7C00u) == 0x7C00u && (k & 0x03FFu) != 0;
        if (!nan) assert_true(b[k] == k);
    }
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_bins),
        cmocka_unit_test(test_hist_quantile),
        cmocka_unit_test(test_off_by_three_is_measured),
        cmocka_unit_test(test_no_rows_no_file),
        cmocka_unit_test(test_integer_output_skipped),
        cmocka_unit_test(test_sweep_strata),
        cmocka_unit_test(test_sweep_every_half_pattern),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
