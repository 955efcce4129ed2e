/* Comparing two runs (report/compare_runs.c, compare_perf.c): each status
 * transition gets its kind, changed bits and accuracy drift are told
 * apart, the identity policy names its rows, the Mann-Whitney test tells
 * a 2x slowdown from noise, and the per-output facts survive the
 * results.jsonl round trip the comparison reads. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/check/out_facts.h"
#include "runner/report/compare_runs.h"
#include "runner/report/merge.h"
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

static kv_runcmp_row row(kv_result_status st, uint64_t hash, double max_ulp, int64_t not_cr) {
    kv_runcmp_row r;
    memset(&r, 0, sizeof r);
    r.status = st;
    r.nouts = 1;
    r.outs[0] = (kv_output_facts){ hash, true, 100, not_cr, max_ulp, max_ulp };
    return r;
}

static kv_runcmp_finding classify(kv_result_status a, kv_result_status b) {
    kv_runcmp_policy p;
    kv_runcmp_policy_init(&p);
    kv_runcmp_row o = row(a, 1, 0, 0), n = row(b, 1, 0, 0);
    kv_runcmp_finding f;
    kv_runcmp_classify(&o, &n, "golden", "cpu", &p, &f);
    return f;
}

static void test_transitions(void **state) {
    (void)state;
    kv_runcmp_finding f = classify(KV_RESULT_PASS, KV_RESULT_PASS);
    assert_int_equal(f.kind, KV_RUNCMP_SAME);
    assert_false(f.regression);
    f = classify(KV_RESULT_PASS, KV_RESULT_FAIL);
    assert_int_equal(f.kind, KV_RUNCMP_REGRESSION);
    assert_true(f.regression);
    f = classify(KV_RESULT_PASS, KV_RESULT_CRASH);
    assert_int_equal(f.kind, KV_RUNCMP_REGRESSION);
    f = classify(KV_RESULT_PASS, KV_RESULT_UNSUPPORTED);
    assert_int_equal(f.kind, KV_RUNCMP_SUPPORT_REGRESSION);
    assert_true(f.regression);
    f = classify(KV_RESULT_PASS, KV_RESULT_SKIP);
    assert_int_equal(f.kind, KV_RUNCMP_SUPPORT_REGRESSION);
    f = classify(KV_RESULT_FAIL, KV_RESULT_PASS);
    assert_int_equal(f.kind, KV_RUNCMP_FIX);
    assert_false(f.regression);
    f = classify(KV_RESULT_UNSUPPORTED, KV_RESULT_PASS);
    assert_int_equal(f.kind, KV_RUNCMP_NEW_SUPPORT);
    f = classify(KV_RESULT_FAIL, KV_RESULT_ERROR);
    assert_int_equal(f.kind, KV_RUNCMP_OTHER);
    assert_false(f.regression);
    kv_runcmp_policy p;
    kv_runcmp_policy_init(&p);
    kv_runcmp_row o = row(KV_RESULT_PASS, 1, 0, 0);
    kv_runcmp_classify(NULL, &o, "golden", "cpu", &p, &f);
    assert_int_equal(f.kind, KV_RUNCMP_ADDED);
    kv_runcmp_classify(&o, NULL, "golden", "cpu", &p, &f);
    assert_int_equal(f.kind, KV_RUNCMP_REMOVED);
    assert_string_equal(kv_runcmp_kind_name(KV_RUNCMP_SUPPORT_REGRESSION), "support-regression");
}

static void test_bits_and_drift(void **state) {
    (void)state;
    kv_runcmp_policy p;
    kv_runcmp_policy_init(&p);
    kv_runcmp_finding f;
    /* Other bits, same accuracy: a change, not drift, not a regression. */
    kv_runcmp_row a = row(KV_RESULT_PASS, 1, 1, 10), b = row(KV_RESULT_PASS, 2, 1, 10);
    kv_runcmp_classify(&a, &b, "variants:CPU/gen_v2", "cpu", &p, &f);
    assert_true(f.any_bits_changed);
    assert_false(f.any_drift);
    assert_false(f.regression);
    /* Worse accuracy, still passing: drift, not a regression. */
    b = row(KV_RESULT_PASS, 2, 2, 40);
    kv_runcmp_classify(&a, &b, "variants:CPU/gen_v2", "cpu", &p, &f);
    assert_true(f.outs[0].drift);
    assert_false(f.regression);
    /* The identity policy turns changed bits into a regression, for the
     * rows it names only. */
    char why[256];
    assert_int_equal(kv_runcmp_policy_set_identical(&p, "CPU/gen_v2,opencl", why, sizeof why), 0);
    kv_runcmp_classify(&a, &b, "variants:CPU/gen_v2", "cpu", &p, &f);
    assert_true(f.identity_required);
    assert_true(f.regression);
    kv_runcmp_classify(&a, &b, "variants:CPU/avx2", "cpu", &p, &f);
    assert_false(f.regression);
    kv_runcmp_classify(&a, &b, "variants:OPENCL", "opencl", &p, &f);
    assert_true(f.regression);
    /* Same bits under the policy: nothing. */
    b = row(KV_RESULT_PASS, 1, 1, 10);
    kv_runcmp_classify(&a, &b, "variants:CPU/gen_v2", "cpu", &p, &f);
    assert_false(f.regression);
    assert_false(f.any_bits_changed);
    /* A key names its variants. */
    assert_int_equal(kv_runcmp_policy_set_identical(&p, "CPU", why, sizeof why), 0);
    assert_true(kv_runcmp_identity_required(&p, "variants:CPU/avx2", "cpu"));
    assert_true(kv_runcmp_identity_required(&p, "golden", "cpu"));
    assert_false(kv_runcmp_identity_required(&p, "variants:SIM", "sim"));
    assert_int_equal(kv_runcmp_policy_set_identical(&p, "*", why, sizeof why), 0);
    assert_true(kv_runcmp_identity_required(&p, "memory", "sim"));
    /* Bad lists are named. */
    assert_int_equal(kv_runcmp_policy_set_identical(&p, "cpu,,sim", why, sizeof why), -1);
    assert_non_null(strstr(why, "empty item"));
    assert_int_equal(kv_runcmp_policy_set_identical(&p, "cpu|sim", why, sizeof why), -1);
    assert_non_null(strstr(why, "'|'"));
}

static void test_mann_whitney(void **state) {
    (void)state;
    /* Reference value: scipy.stats.mannwhitneyu([1..10], [11..20],
     * method='asymptotic', use_continuity=True) gives p = 0.00018267. */
    double a[10], b[10];
    for (int i = 0; i < 10; i++) {
        a[i] = i + 1;
        b[i] = i + 11;
    }
    assert_true(fabs(kv_runcmp_mann_whitney_p(a, 10, b, 10) - 0.00018267) < 1e-7);
    /* Identical samples: no evidence at all. */
    assert_true(kv_runcmp_mann_whitney_p(a, 10, a, 10) > 0.9);
    double c[3] = { 5, 5, 5 };
    assert_true(kv_runcmp_mann_whitney_p(c, 3, c, 3) == 1.0);
    assert_true(kv_runcmp_mann_whitney_p(a, 1, b, 10) == 1.0);
    /* A 2x slowdown under 5% jitter is significant; two draws of the same
     * jitter are not. */
    double x[15], y[15], z[15];
    for (int i = 0; i < 15; i++) {
        const double jitter = 1.0 + 0.05 * ((i * 7) % 15) / 15.0;
        x[i] = 1000.0 * jitter;
        y[i] = 1000.0 * (1.0 + 0.05 * ((i * 11) % 15) / 15.0);
        z[i] = 2000.0 * jitter;
    }
    assert_true(kv_runcmp_mann_whitney_p(x, 15, z, 15) < 1e-4);
    assert_true(kv_runcmp_mann_whitney_p(x, 15, y, 15) > 0.5);
    assert_true(fabs(kv_runcmp_median(z, 15) / kv_runcmp_median(x, 15) - 2.0) < 1e-12);
}

/* The facts a check records, through a results.jsonl line and back. */
static void test_facts_round_trip(void **state) {
    (void)state;
    const int64_t sizes[1] = { 5 };
    kv_tensor *e = kv_tensor_empty(sizes, 1, KV_F32, KV_DEVICE_CPU0);
    kv_tensor *g = kv_tensor_empty(sizes, 1, KV_F32, KV_DEVICE_CPU0);
    assert_non_null(e);
    assert_non_null(g);
    float *pe = kv_tensor_data(e), *pg = kv_tensor_data(g);
    for (int i = 0; i < 5; i++) pe[i] = pg[i] = 1.0f + (float)i;
    pg[3] = nextafterf(nextafterf(pe[3], 10.0f), 10.0f); /* 2 ulp */
    pg[4] = nanf("");                                    /* NaN where a number belongs */
    kv_check_result *r = calloc(2, sizeof *r);
    assert_non_null(r);
    snprintf(r->case_id, sizeof r->case_id, "add(dtype=f32)");
    snprintf(r->check, sizeof r->check, "golden");
    snprintf(r->backend, sizeof r->backend, "cpu");
    kv_out_facts_record(r, 0, e, g);
    assert_int_equal(r->nouts, 1);
    assert_true(r->outs[0].hash_set);
    assert_int_equal(r->outs[0].elements, 5);
    assert_int_equal(r->outs[0].not_cr, 2);
    assert_true(isinf(r->outs[0].max_ulp));
    /* The truth itself: 0 everywhere, and another hash. */
    kv_out_facts_record(r, 1, e, e);
    assert_int_equal(r->outs[1].not_cr, 0);
    assert_true(r->outs[1].max_ulp == 0.0);
    assert_true(r->outs[0].hash != r->outs[1].hash);
    r->ulp_elements = 7;
    r->ulp_hist[0] = 5;
    r->ulp_hist[2] = 2;
    r->ulp_max = 2;
    char *line = kv_report_result_line(r);
    assert_non_null(line);
    char why[256];
    assert_int_equal(kv_merge_parse_line(line, &r[1], why, sizeof why), 0);
    assert_int_equal(r[1].nouts, 2);
    assert_memory_equal(&r[1].outs[0], &r->outs[0], sizeof r->outs[0]);
    assert_true(r[1].outs[1].hash == r->outs[1].hash);
    assert_int_equal(r[1].ulp_elements, 7);
    assert_int_equal(r[1].ulp_hist[2], 2);
    assert_true(r[1].ulp_max == 2.0);
    free(line);
    /* A malformed facts array is named. */
    assert_int_equal(kv_merge_parse_line("{\"case_id\":\"a\",\"outs\":[[1]]}", &r[1], why, sizeof why), -1);
    free(r);
    kv_tensor_release(e);
    kv_tensor_release(g);
}

static int group_setup(void **state) {
    (void)state;
    return kv_init() == KV_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transitions),
        cmocka_unit_test(test_bits_and_drift),
        cmocka_unit_test(test_mann_whitney),
        cmocka_unit_test(test_facts_round_trip),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
