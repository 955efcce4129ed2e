/* The checks (src/runner/check*.c) end to end on hand-built cases and a
 * temporary golden store: a golden pass on a real op, and deliberately bad
 * CPU kernels (registered only inside this test, the reference restored
 * afterwards) caught as FAIL with mismatch details, memory failures for an
 * out-of-bounds write, an unwritten element, a leak and a modified input,
 * and the error check passing and failing as it should. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/kv.h"
#include "kv/npy.h"
#include "ref/ref_kernels.h"
#include "runner/check/check.h"
#include "runner/check/check_meta.h"
#include "runner/report/dump.h"
#include "runner/golden/golden.h"
#include "test_util.h"

/* ---- fixture: one golden store in a temp dir for the whole file ---- */

static char golden_dir[64];
static kv_golden_store *store;

static int group_setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    strcpy(golden_dir, "/tmp/kv_test_checks_XXXXXX");
    if (mkdtemp(golden_dir) == NULL) return -1;
    store = kv_golden_open(golden_dir);
    return store ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    kv_golden_close(store);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", golden_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- helpers ---- */

/* kv_test_case_of, running only `checks`. */
static kv_case mk_case(const char *op, kv_dtype dt, int n, const kv_shape *shapes, unsigned checks) {
    kv_case c = kv_test_case_of(op, dt, n, shapes);
    c.checks = checks;
    return c;
}

#define CK(k) (1u << (k))

/* Runs the case once with regeneration and saves, so later runs verify. */
static void record(const kv_case *c) {
    kv_run_env env = { store, true, NULL, KV_GOLDEN_MODE_AUTO };
    kv_result_list res = { 0 };
    kv_case *g = malloc(sizeof *g);
    *g = *c;
    g->checks = CK(KV_CHECK_GOLDEN);
    kv_case_run(g, &env, &res);
    assert_int_equal(res.n, 1);
    if (res.items[0].status != KV_RESULT_PASS) fail_msg("record: %s", res.items[0].message);
    kv_result_list_free(&res);
    free(g);
    assert_int_equal(kv_golden_save(store, false, NULL), KV_OK);
}

static kv_result_list run(const kv_case *c) {
    kv_run_env env = { store, false, NULL, KV_GOLDEN_MODE_AUTO };
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

static void expect_status(const kv_result_list *l, const char *check, kv_result_status st) {
    const kv_check_result *r = find(l, check);
    if (r->status != st)
        fail_msg("%s: expected %s, got %s: %s", check, kv_result_status_name(st), kv_result_status_name(r->status),
                 r->message);
}

static const kv_shape S45[2] = { { 2, { 4, 5 } }, { 2, { 4, 5 } } };

/* ---- bad kernels, each wrapping the reference ---- */

/* neg, but element 7 ([1, 2] of a [4, 5] output) is off by 1. */
static kv_status wrong_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_status st = kv_ref_neg(op, ks, stack);
    if (st != KV_OK) return st;
    kv_tensor *out = stack->slots[0].v.tensor;
    float *p = kv_tensor_data(out);
    if (kv_tensor_numel(out) > 7) p[7] += 1.0f;
    return KV_OK;
}

/* neg that also writes one element past the end of its output. */
static kv_status oob_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_status st = kv_ref_neg(op, ks, stack);
    if (st != KV_OK) return st;
    kv_tensor *out = stack->slots[0].v.tensor;
    unsigned char *end = (unsigned char *)out->storage->data + out->storage->nbytes;
    end[0] = 0x42;
    return KV_OK;
}

/* neg that never writes its last element. */
static kv_status unwritten_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *out = kv_tensor_empty(self->sizes, self->ndim, self->dtype, self->device);
    if (out == NULL) return kv_last_error();
    const int64_t n = kv_tensor_numel(self);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k + 1 < n; k++) {
        int64_t r = k;
        for (int d = self->ndim - 1; d >= 0; d--) {
            idx[d] = r % self->sizes[d];
            r /= self->sizes[d];
        }
        kv_tensor_set_f64(out, idx, -kv_tensor_get_f64(self, idx));
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

/* neg that leaks a scratch tensor. */
static kv_status leaky_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const int64_t n = 16;
    kv_tensor *scratch = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    (void)scratch;
    return kv_ref_neg(op, ks, stack);
}

/* neg that scribbles on its input after computing. */
static kv_status modifying_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = kv_ref_neg(op, ks, stack);
    if (st != KV_OK) return st;
    float *p = kv_tensor_data(self);
    p[0] = 12345.0f;
    return KV_OK;
}

/* exp nudged by `exp_nudge` ulps on element 0. */
static int exp_nudge;
static kv_status nudged_exp(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_status st = kv_ref_exp(op, ks, stack);
    if (st != KV_OK) return st;
    uint32_t *p = kv_tensor_data(stack->slots[0].v.tensor);
    p[0] += (uint32_t)exp_nudge;
    return KV_OK;
}

static void with_neg_kernel(kv_kernel_fn fn) { assert_int_equal(kv_register_kernel("neg", KV_KEY_CPU, fn), KV_OK); }
static void restore_neg(void) { assert_int_equal(kv_register_kernel("neg", KV_KEY_CPU, kv_ref_neg), KV_OK); }

/* ---- golden ---- */

static void test_golden_pass_real_op(void **state) {
    (void)state;
    kv_case c = mk_case("add.Tensor", KV_F32, 2, S45, 0);
    record(&c);
    kv_result_list res = run(&c);
    /* Default checks for expect=pass: golden, variants, memory (plus an
     * UNSUPPORTED variants row per other available backend). */
    assert_true(res.n >= 3);
    expect_status(&res, "golden", KV_RESULT_PASS);
    expect_status(&res, "variants:CPU", KV_RESULT_PASS);
    expect_status(&res, "memory", KV_RESULT_PASS);
    const kv_check_result *g = find(&res, "golden");
    assert_non_null(strstr(g->case_id, "add.Tensor("));
    assert_non_null(strstr(g->repro, "kvrun"));
    assert_non_null(strstr(g->repro, "--op=add.Tensor"));
    assert_int_equal(find(&res, "variants:CPU")->compared, 20);
    kv_result_list_free(&res);

    /* The same problem in other layouts uses the same golden. */
    const kv_layout lays[3] = { KV_LAYOUT_TRANSPOSED, KV_LAYOUT_STRIDED, KV_LAYOUT_OFFSET };
    for (int l = 0; l < 3; l++) {
        kv_case t = c;
        t.layouts[0] = lays[l];
        t.layouts[1] = lays[(l + 1) % 3];
        res = run(&t);
        expect_status(&res, "golden", KV_RESULT_PASS);
        expect_status(&res, "variants:CPU", KV_RESULT_PASS);
        expect_status(&res, "memory", KV_RESULT_PASS);
        kv_result_list_free(&res);
    }
}

static void test_golden_missing_is_error(void **state) {
    (void)state;
    kv_case c = mk_case("add.Tensor", KV_F32, 2, S45, CK(KV_CHECK_GOLDEN));
    c.seed = 999; /* never recorded */
    kv_result_list res = run(&c);
    expect_status(&res, "golden", KV_RESULT_ERROR);
    assert_non_null(strstr(res.items[0].message, "missing"));
    kv_result_list_free(&res);
    /* No store at all is an ERROR too, never a pass. */
    kv_run_env none = { NULL, false, NULL, KV_GOLDEN_MODE_AUTO };
    kv_case_run(&c, &none, &res);
    expect_status(&res, "golden", KV_RESULT_ERROR);
    kv_result_list_free(&res);
}

static void test_wrong_kernel_fails_with_mismatches(void **state) {
    (void)state;
    kv_case c = mk_case("neg", KV_F32, 1, S45, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_VARIANTS));
    record(&c);
    with_neg_kernel(wrong_neg);
    kv_result_list res = run(&c);
    restore_neg();
    expect_status(&res, "golden", KV_RESULT_FAIL);
    expect_status(&res, "variants:CPU", KV_RESULT_FAIL);
    const kv_check_result *g = find(&res, "golden");
    assert_int_equal(g->mismatched, 1);
    assert_int_equal(g->compared, 20);
    assert_int_equal(g->nmismatches, 1);
    assert_int_equal(g->mismatches[0].ndim, 2);
    assert_int_equal(g->mismatches[0].index[0], 1);
    assert_int_equal(g->mismatches[0].index[1], 2);
    assert_true(fabs(g->mismatches[0].got - g->mismatches[0].expected - 1.0) < 1e-6);
    assert_true(fabs(g->mismatches[0].abs_err - 1.0) < 1e-6);
    /* The message is the summary; the elements live in the row (and every
     * report prints them once, from there). */
    assert_non_null(strstr(g->message, "1 of 20 elements differ"));
    assert_null(strstr(g->message, "[1, 2] expected"));
    assert_non_null(strstr(g->repro, "--op=neg"));
    /* The variant is compared against the stored golden, not the (wrong)
     * live reference. */
    const kv_check_result *v = find(&res, "variants:CPU");
    assert_int_equal(v->mismatched, 1);
    assert_int_equal(v->mismatches[0].index[1], 2);
    kv_result_list_free(&res);
    /* Restored: everything passes again. */
    res = run(&c);
    expect_status(&res, "golden", KV_RESULT_PASS);
    expect_status(&res, "variants:CPU", KV_RESULT_PASS);
    kv_result_list_free(&res);
}

static void test_golden_libm_ulp_allowance(void **state) {
    (void)state;
    kv_case c = mk_case("exp", KV_F32, 1, S45, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_VARIANTS));
    record(&c);
    exp_nudge = 1;
    assert_int_equal(kv_register_kernel("exp", KV_KEY_CPU, nudged_exp), KV_OK);
    kv_result_list res = run(&c);
    /* 1 ulp: within the golden's libm allowance and the variants' 2 ulp. */
    expect_status(&res, "golden", KV_RESULT_PASS);
    assert_non_null(strstr(find(&res, "golden")->message, "ulp"));
    expect_status(&res, "variants:CPU", KV_RESULT_PASS);
    kv_result_list_free(&res);
    exp_nudge = 3;
    res = run(&c);
    expect_status(&res, "golden", KV_RESULT_FAIL);
    expect_status(&res, "variants:CPU", KV_RESULT_FAIL);
    assert_true(find(&res, "variants:CPU")->mismatches[0].ulps == 3.0);
    kv_result_list_free(&res);
    assert_int_equal(kv_register_kernel("exp", KV_KEY_CPU, kv_ref_exp), KV_OK);
}

/* Regeneration holds the reference to the exact golden it records, with
 * the rule a normal run applies, so it never reports a pass for a store
 * whose own golden check then fails. */
static kv_result_list regen(const kv_case *c) {
    kv_run_env env = { store, true, NULL, KV_GOLDEN_MODE_AUTO };
    kv_result_list res = { 0 };
    kv_case_run(c, &env, &res);
    return res;
}

static void test_regen_checks_what_it_records(void **state) {
    (void)state;
    /* exp 3 ulp off (the f32 rule is 2): the regeneration FAILs, naming
     * the case and the elements, and the truth is recorded all the same. */
    kv_case c = mk_case("exp", KV_F32, 1, S45, CK(KV_CHECK_GOLDEN));
    c.seed = 41;
    exp_nudge = 3;
    assert_int_equal(kv_register_kernel("exp", KV_KEY_CPU, nudged_exp), KV_OK);
    kv_result_list res = regen(&c);
    assert_int_equal(kv_register_kernel("exp", KV_KEY_CPU, kv_ref_exp), KV_OK);
    expect_status(&res, "golden", KV_RESULT_FAIL);
    const kv_check_result *g = find(&res, "golden");
    if (g == NULL) return;
    if (strstr(g->message, "differs from the exact golden it records") == NULL) fail_msg("message: %s", g->message);
    if (strncmp(g->case_id, "exp(", 4) != 0) fail_msg("case id: %s", g->case_id);
    assert_int_equal(g->mismatched, 1);
    kv_result_list_free(&res);
    assert_int_equal(kv_golden_save(store, false, NULL), KV_OK);
    res = run(&c);
    expect_status(&res, "golden", KV_RESULT_PASS);
    kv_result_list_free(&res);

    /* f64 mm on NaN, +-Inf and +-DBL_MAX: products overflow with opposite
     * signs where the exact sum is +-Inf (the plain f64 sum gave NaN). The
     * reference now recomputes such sums, so the regeneration passes and
     * so does the golden check on what it wrote. */
    const kv_shape mm[2] = { { 2, { 26, 9 } }, { 2, { 9, 33 } } };
    kv_case m = mk_case("mm", KV_F64, 2, mm, CK(KV_CHECK_GOLDEN));
    m.fill = KV_FILL_SPECIAL;
    res = regen(&m);
    expect_status(&res, "golden", KV_RESULT_PASS);
    kv_result_list_free(&res);
    assert_int_equal(kv_golden_save(store, false, NULL), KV_OK);
    res = run(&m);
    expect_status(&res, "golden", KV_RESULT_PASS);
    kv_result_list_free(&res);
}

/* A regeneration records and checks nothing else (check.c): a case with
 * golden and variants gets its golden row alone; a case without golden
 * gets one SKIP row naming the checks a normal run gives it. */
static void test_regen_runs_only_the_golden_check(void **state) {
    (void)state;
    kv_case c = mk_case("neg", KV_F32, 1, S45, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_VARIANTS) | CK(KV_CHECK_MEMORY));
    kv_result_list res = regen(&c);
    assert_int_equal(res.n, 1);
    expect_status(&res, "golden", KV_RESULT_PASS);
    kv_result_list_free(&res);
    kv_case v = mk_case("neg", KV_F32, 1, S45, CK(KV_CHECK_VARIANTS) | CK(KV_CHECK_MEMORY));
    res = regen(&v);
    assert_int_equal(res.n, 1);
    expect_status(&res, "variants+memory", KV_RESULT_SKIP);
    if (res.n == 1 && strstr(res.items[0].message, "--regen-golden runs only the golden check") == NULL)
        fail_msg("message: %s", res.items[0].message);
    kv_result_list_free(&res);
    /* A normal run still runs both. */
    res = run(&v);
    assert_true(res.n >= 2);
    kv_result_list_free(&res);
}

/* ---- memory ---- */

static void expect_memory_fail_on(kv_kernel_fn fn, const kv_shape *shape, const char *words) {
    kv_case c = mk_case("neg", KV_F32, 1, shape, CK(KV_CHECK_MEMORY));
    with_neg_kernel(fn);
    kv_result_list res = run(&c);
    restore_neg();
    expect_status(&res, "memory", KV_RESULT_FAIL);
    if (strstr(res.items[0].message, words) == NULL) fail_msg("'%s' not in: %s", words, res.items[0].message);
    kv_result_list_free(&res);
}

static void expect_memory_fail(kv_kernel_fn fn, const char *words) { expect_memory_fail_on(fn, S45, words); }

/* neg that keeps a 64 KiB scratch tensor (a large cache class). */
static kv_status leaky_big_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const int64_t n = 16384;
    kv_tensor *scratch = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    (void)scratch;
    return kv_ref_neg(op, ks, stack);
}

/* The caching CPU allocator and one-block small tensors hide nothing
 * from the memory check: with the cache on and warm (blocks of the
 * classes the cases use already held), faults on a small (80-byte, a
 * one-block tensor outside the guard) and a large (64 KiB, a large-cache
 * class) output are still caught, since the guard allocator takes every
 * CPU allocation while it is installed. */
static void test_memory_faults_with_cpu_cache(void **state) {
    (void)state;
    const bool was = kv_cpu_cache_enabled();
    kv_cpu_cache_set_enabled(true);
    static const kv_shape BIG[1] = { { 2, { 128, 128 } } };
    const int64_t big = 128 * 128, small = 20;
    kv_tensor_release(kv_tensor_empty(&big, 1, KV_F32, KV_DEVICE_CPU0));
    kv_tensor_release(kv_tensor_empty(&small, 1, KV_F32, KV_DEVICE_CPU0));
    assert_true(kv_cpu_cache_stats_get().cached_blocks > 0);
    const kv_shape *shapes[2] = { S45, BIG };
    for (int i = 0; i < 2; i++) {
        expect_memory_fail_on(oob_neg, shapes[i], "back redzone");
        expect_memory_fail_on(unwritten_neg, shapes[i], "1 element not written");
        expect_memory_fail_on(leaky_neg, shapes[i], "leaked");
        expect_memory_fail_on(leaky_big_neg, shapes[i], "leaked");
        expect_memory_fail_on(modifying_neg, shapes[i], "input 0 ('self') was modified");
    }
    kv_cpu_cache_set_enabled(was);
}

static void test_memory_oob_write(void **state) {
    (void)state;
    expect_memory_fail(oob_neg, "output 0");
    expect_memory_fail(oob_neg, "back redzone");
}

static void test_memory_unwritten(void **state) {
    (void)state;
    expect_memory_fail(unwritten_neg, "1 element not written");
    expect_memory_fail(unwritten_neg, "[3, 4]");
}

static void test_memory_leak(void **state) {
    (void)state;
    expect_memory_fail(leaky_neg, "leaked");
}

static void test_memory_input_modified(void **state) {
    (void)state;
    expect_memory_fail(modifying_neg, "input 0 ('self') was modified");
}

static void test_memory_pass_cases(void **state) {
    (void)state;
    const int64_t live = kv_allocator_stats_of(KV_DEVICE_CPU).live_count;
    /* A view aliasing its input, an in-place op (self may change) and an
     * op whose values are unspecified. */
    kv_case t = mk_case("transpose.int", KV_F32, 1, S45, CK(KV_CHECK_MEMORY));
    kv_test_case_add_arg(&t, "dim0", "0");
    kv_test_case_add_arg(&t, "dim1", "1");
    kv_result_list res = run(&t);
    expect_status(&res, "memory", KV_RESULT_PASS);
    kv_result_list_free(&res);
    kv_case a = mk_case("add_.Tensor", KV_F32, 2, S45, CK(KV_CHECK_MEMORY));
    res = run(&a);
    expect_status(&res, "memory", KV_RESULT_PASS);
    kv_result_list_free(&res);
    kv_case e = mk_case("empty.memory_format", KV_F32, 0, NULL, CK(KV_CHECK_MEMORY));
    kv_test_case_add_arg(&e, "size", "[3,4]");
    res = run(&e);
    expect_status(&res, "memory", KV_RESULT_PASS);
    kv_result_list_free(&res);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, live);
}

/* ---- error ---- */

static void test_error_expected_shape(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 2, 3 } }, { 2, { 4, 5 } } };
    kv_case c = mk_case("add.Tensor", KV_F32, 2, sh, 0);
    c.expect = KV_ERR_SHAPE;
    kv_result_list res = run(&c);
    /* Default checks for an expected error: error and memory. */
    assert_int_equal(res.n, 2);
    expect_status(&res, "error", KV_RESULT_PASS);
    expect_status(&res, "memory", KV_RESULT_PASS);
    assert_non_null(strstr(find(&res, "error")->message, "'shape'"));
    assert_non_null(strstr(find(&res, "error")->message, "CPU"));
    kv_result_list_free(&res);
}

static void test_error_not_raised_fails(void **state) {
    (void)state;
    kv_case c = mk_case("add.Tensor", KV_F32, 2, S45, CK(KV_CHECK_ERROR));
    c.expect = KV_ERR_SHAPE;
    kv_result_list res = run(&c);
    expect_status(&res, "error", KV_RESULT_FAIL);
    assert_non_null(strstr(res.items[0].message, "succeeded"));
    kv_result_list_free(&res);
    /* Another code than the expected one names both. */
    const kv_shape sh[2] = { { 2, { 2, 3 } }, { 2, { 4, 5 } } };
    c = mk_case("add.Tensor", KV_F32, 2, sh, CK(KV_CHECK_ERROR));
    c.expect = KV_ERR_DIM;
    res = run(&c);
    expect_status(&res, "error", KV_RESULT_FAIL);
    assert_non_null(strstr(res.items[0].message, "expected error 'dim', got 'shape'"));
    kv_result_list_free(&res);
}

/* neg that fails with a code but no message. */
static kv_status silent_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    (void)stack;
    return KV_ERR_SHAPE;
}

static void test_error_without_message_fails(void **state) {
    (void)state;
    kv_case c = mk_case("neg", KV_F32, 1, S45, CK(KV_CHECK_ERROR));
    c.expect = KV_ERR_SHAPE;
    with_neg_kernel(silent_neg);
    kv_result_list res = run(&c);
    restore_neg();
    expect_status(&res, "error", KV_RESULT_FAIL);
    assert_non_null(strstr(res.items[0].message, "without a message"));
    kv_result_list_free(&res);
}

/* ---- robustness and the rest ---- */

static void test_bad_cases_are_error_rows(void **state) {
    (void)state;
    kv_case c = mk_case("add.Tensor", KV_F32, 2, S45, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_MEMORY));
    strcpy(c.op, "no_such_op");
    kv_result_list res = run(&c);
    assert_int_equal(res.n, 2);
    expect_status(&res, "golden", KV_RESULT_ERROR);
    expect_status(&res, "memory", KV_RESULT_ERROR);
    kv_result_list_free(&res);
    c = mk_case("sum.dim_IntList", KV_F32, 1, S45, 0);
    kv_test_case_add_arg(&c, "dim", "abc");
    res = run(&c);
    assert_int_equal(res.n, 3);
    for (int i = 0; i < res.n; i++) {
        assert_int_equal(res.items[i].status, KV_RESULT_ERROR);
        assert_non_null(strstr(res.items[i].message, "dim"));
    }
    kv_result_list_free(&res);
}

static void test_bool_output(void **state) {
    (void)state;
    kv_case b = mk_case("is_conj", KV_F32, 1, S45, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_VARIANTS));
    record(&b);
    kv_result_list res = run(&b);
    expect_status(&res, "golden", KV_RESULT_PASS);
    expect_status(&res, "variants:CPU", KV_RESULT_PASS);
    kv_result_list_free(&res);
}

static void test_multi_output(void **state) {
    (void)state;
    const kv_shape sh[3] = { { 2, { 3, 8 } }, { 1, { 8 } }, { 1, { 8 } } };
    kv_case n = mk_case("native_layer_norm", KV_F32, 3, sh, 0);
    kv_test_case_add_arg(&n, "normalized_shape", "[8]");
    kv_test_case_add_arg(&n, "eps", "1e-05");
    record(&n);
    kv_result_list res = run(&n);
    expect_status(&res, "golden", KV_RESULT_PASS);
    expect_status(&res, "variants:CPU", KV_RESULT_PASS);
    expect_status(&res, "memory", KV_RESULT_PASS);
    kv_result_list_free(&res);
}

static void test_dump(void **state) {
    (void)state;
    char dir[64];
    strcpy(dir, "/tmp/kv_test_dump_XXXXXX");
    assert_non_null(mkdtemp(dir));
    kv_case c = mk_case("add.Tensor", KV_F32, 2, S45, CK(KV_CHECK_VARIANTS));
    c.layouts[1] = KV_LAYOUT_TRANSPOSED;
    kv_run_env env = { store, false, dir, KV_GOLDEN_MODE_AUTO };
    kv_result_list res = { 0 };
    kv_case_run(&c, &env, &res);
    expect_status(&res, "variants:CPU", KV_RESULT_PASS);
    kv_result_list_free(&res);
    char sub[512], path[640];
    kv_case_dump_dir(&c, dir, sub, (int)sizeof sub);
    snprintf(path, sizeof path, "%s/case.json", sub);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (root == NULL) fail_msg("%s: %s", path, jerr.text);
    assert_string_equal(json_string_value(json_object_get(root, "op")), "add.Tensor");
    json_t *in1 = json_array_get(json_object_get(root, "inputs"), 1);
    assert_string_equal(json_string_value(json_object_get(in1, "layout")), "t");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(in1, "strides"), 0)), 1);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(in1, "strides"), 1)), 4);
    assert_int_equal(json_array_size(json_object_get(root, "outputs")), 1);
    json_decref(root);
    /* The .npy files hold the logical values: output = input0 + input1. */
    snprintf(path, sizeof path, "%s/input0.npy", sub);
    kv_tensor *a = kv_npy_read(path, KV_F32);
    snprintf(path, sizeof path, "%s/input1.npy", sub);
    kv_tensor *b = kv_npy_read(path, KV_F32);
    snprintf(path, sizeof path, "%s/output0.npy", sub);
    kv_tensor *o = kv_npy_read(path, KV_F32);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(o);
    const float *pa = kv_tensor_data(a), *pb = kv_tensor_data(b), *po = kv_tensor_data(o);
    for (int k = 0; k < 20; k++) assert_true(po[k] == pa[k] + pb[k]);
    kv_tensor_release(a);
    kv_tensor_release(b);
    kv_tensor_release(o);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}


/* ---- derived tolerances against real float implementations ----
 *
 * Each op gets a CPU "variant" that computes in f32 the way a fast kernel
 * would (float libm, float accumulation in reverse order, two roundings
 * for a + alpha*b). It calls the reference first for the output tensors'
 * shapes, then overwrites their data. The variants check must PASS under
 * the table's derived tolerance, and tol=bitwise must show the variant
 * really differs from the reference (so the PASS is not vacuous). */

static float fget(const kv_tensor *t, int64_t k) {
    return ((const float *)kv_tensor_data(t))[k];
}
static void fset(kv_tensor *t, int64_t k, float v) { ((float *)kv_tensor_data(t))[k] = v; }

static kv_kernel_fn float_ref_of(const char *name) {
    static const struct { const char *op; kv_kernel_fn fn; } refs[] = {
        { "exp", kv_ref_exp }, { "log", kv_ref_log }, { "sin", kv_ref_sin }, { "cos", kv_ref_cos },
        { "tanh", kv_ref_tanh }, { "sigmoid", kv_ref_sigmoid }, { "silu", kv_ref_silu }, { "gelu", kv_ref_gelu },
        { "rsqrt", kv_ref_rsqrt }, { "sum.dim_IntList", kv_ref_sum }, { "mean.dim", kv_ref_mean },
        { "prod.dim_int", kv_ref_prod }, { "mm", kv_ref_mm }, { "_softmax", kv_ref__softmax },
        { "_log_softmax", kv_ref__log_softmax }, { "native_layer_norm", kv_ref_native_layer_norm },
        { "add.Tensor", kv_ref_add },
    };
    for (size_t i = 0; i < sizeof refs / sizeof refs[0]; i++)
        if (strcmp(refs[i].op, name) == 0) return refs[i].fn;
    return NULL;
}

static float float_unary(const char *op, float x) {
    if (!strcmp(op, "exp")) return expf(x);
    if (!strcmp(op, "log")) return logf(x);
    if (!strcmp(op, "sin")) return sinf(x);
    if (!strcmp(op, "cos")) return cosf(x);
    if (!strcmp(op, "tanh")) return tanhf(x);
    if (!strcmp(op, "sigmoid")) return 1.0f / (1.0f + expf(-x));
    if (!strcmp(op, "silu")) return x / (1.0f + expf(-x));
    if (!strcmp(op, "gelu")) return x * 0.5f * (1.0f + erff(x * 0.70710678f));
    return 1.0f / sqrtf(x); /* rsqrt */
}

/* Inputs are contiguous [rows, cols] f32 in every use below. */
static kv_status float_variant(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const char *name = kv_op_name(op);
    kv_ivalue a[KV_STACK_MAX];
    memcpy(a, stack->slots, sizeof(kv_ivalue) * (size_t)stack->size);
    kv_status st = float_ref_of(name)(op, ks, stack);
    if (st != KV_OK) return st;
    kv_tensor *x = a[0].v.tensor, *y = stack->slots[0].v.tensor;
    const int64_t rows = x->ndim == 2 ? x->sizes[0] : 1, cols = x->sizes[x->ndim - 1];
    if (!strcmp(name, "sum.dim_IntList") || !strcmp(name, "mean.dim") || !strcmp(name, "prod.dim_int")) {
        for (int64_t i = 0; i < rows; i++) {
            float acc = !strcmp(name, "prod.dim_int") ? 1.0f : 0.0f;
            for (int64_t j = cols - 1; j >= 0; j--) {
                if (!strcmp(name, "prod.dim_int")) acc *= fget(x, i * cols + j);
                else acc += fget(x, i * cols + j);
            }
            fset(y, i, !strcmp(name, "mean.dim") ? acc / (float)cols : acc);
        }
    } else if (!strcmp(name, "mm")) {
        kv_tensor *b = a[1].v.tensor;
        const int64_t n = b->sizes[1];
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < n; j++) {
                float acc = 0.0f;
                for (int64_t k = cols - 1; k >= 0; k--) acc += fget(x, i * cols + k) * fget(b, k * n + j);
                fset(y, i * n + j, acc);
            }
    } else if (!strcmp(name, "_softmax") || !strcmp(name, "_log_softmax")) {
        for (int64_t i = 0; i < rows; i++) {
            float m = -INFINITY, s = 0.0f;
            for (int64_t j = 0; j < cols; j++) m = fmaxf(m, fget(x, i * cols + j));
            for (int64_t j = 0; j < cols; j++) s += expf(fget(x, i * cols + j) - m);
            for (int64_t j = 0; j < cols; j++) {
                const float v = fget(x, i * cols + j) - m;
                fset(y, i * cols + j, !strcmp(name, "_softmax") ? expf(v) / s : v - logf(s));
            }
        }
    } else if (!strcmp(name, "native_layer_norm")) {
        kv_tensor *w = a[2].v.tensor, *bias = a[3].v.tensor;
        kv_tensor *mean_t = stack->slots[1].v.tensor, *rstd_t = stack->slots[2].v.tensor;
        for (int64_t i = 0; i < rows; i++) {
            float m = 0.0f, v = 0.0f;
            for (int64_t j = 0; j < cols; j++) m += fget(x, i * cols + j);
            m /= (float)cols;
            for (int64_t j = 0; j < cols; j++) {
                const float d = fget(x, i * cols + j) - m;
                v += d * d;
            }
            const float r = 1.0f / sqrtf(v / (float)cols + (float)a[4].v.d);
            for (int64_t j = 0; j < cols; j++)
                fset(y, i * cols + j, (fget(x, i * cols + j) - m) * r * fget(w, j) + fget(bias, j));
            fset(mean_t, i, m);
            fset(rstd_t, i, r);
        }
    } else if (!strcmp(name, "add.Tensor")) {
        kv_tensor *b = a[1].v.tensor;
        const float alpha = (float)kv_scalar_to_double(a[2].v.scalar);
        for (int64_t k = 0; k < rows * cols; k++) {
            const volatile float t = alpha * fget(b, k); /* a rounding of its own */
            fset(y, k, fget(x, k) + t);
        }
    } else {
        for (int64_t k = 0; k < rows * cols; k++) fset(y, k, float_unary(name, fget(x, k)));
    }
    return KV_OK;
}

static void check_float_variant(kv_case *c, bool must_differ) {
    c->checks = CK(KV_CHECK_VARIANTS);
    record(c);
    assert_int_equal(kv_register_kernel(c->op, KV_KEY_CPU, float_variant), KV_OK);
    kv_result_list res = run(c);
    const kv_check_result r = *find(&res, "variants:CPU");
    kv_result_list_free(&res);
    kv_case strict = *c;
    strict.tol = (kv_tolerance){ KV_TOL_BITWISE, 0 };
    res = run(&strict);
    const kv_result_status bitwise = find(&res, "variants:CPU")->status;
    kv_result_list_free(&res);
    assert_int_equal(kv_register_kernel(c->op, KV_KEY_CPU, float_ref_of(c->op)), KV_OK);
    if (r.status != KV_RESULT_PASS) fail_msg("%s: %s", c->op, r.message);
    if (must_differ && bitwise != KV_RESULT_FAIL) fail_msg("%s: the float variant equals the reference bitwise", c->op);
    if (getenv("KV_TEST_VERBOSE")) print_message("%s: %s; bitwise %s\n", c->op, r.message, kv_result_status_name(bitwise));
}

static void test_float_variants_within_tolerance(void **state) {
    (void)state;
    const kv_shape s1[1] = { { 2, { 16, 300 } } };
    static const char *const unary[] = { "exp", "log", "sin", "cos", "tanh", "sigmoid", "silu", "gelu", "rsqrt" };
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
        kv_case c = mk_case(unary[i], KV_F32, 1, s1, 0);
        /* glibc's float functions are often correctly rounded here, so
         * equality with the reference is allowed. */
        check_float_variant(&c, false);
    }
    kv_case c = mk_case("sum.dim_IntList", KV_F32, 1, s1, 0);
    kv_test_case_add_arg(&c, "dim", "1");
    check_float_variant(&c, true);
    c = mk_case("mean.dim", KV_F32, 1, s1, 0);
    kv_test_case_add_arg(&c, "dim", "1");
    check_float_variant(&c, true);
    const kv_shape sp[1] = { { 2, { 16, 24 } } };
    c = mk_case("prod.dim_int", KV_F32, 1, sp, 0);
    kv_test_case_add_arg(&c, "dim", "1");
    check_float_variant(&c, true);
    const kv_shape sm[2] = { { 2, { 16, 300 } }, { 2, { 300, 8 } } };
    c = mk_case("mm", KV_F32, 2, sm, 0);
    check_float_variant(&c, true);
    /* Under fill=exact the same float kernel is bitwise exact. */
    c.fill = KV_FILL_EXACT;
    check_float_variant(&c, false);
    c = mk_case("_softmax", KV_F32, 1, s1, 0);
    kv_test_case_add_arg(&c, "dim", "1");
    kv_test_case_add_arg(&c, "half_to_float", "0");
    check_float_variant(&c, true);
    c = mk_case("_log_softmax", KV_F32, 1, s1, 0);
    kv_test_case_add_arg(&c, "dim", "1");
    kv_test_case_add_arg(&c, "half_to_float", "0");
    check_float_variant(&c, true);
    const kv_shape sl[3] = { { 2, { 16, 300 } }, { 1, { 300 } }, { 1, { 300 } } };
    c = mk_case("native_layer_norm", KV_F32, 3, sl, 0);
    kv_test_case_add_arg(&c, "normalized_shape", "[300]");
    kv_test_case_add_arg(&c, "eps", "1e-05");
    check_float_variant(&c, true);
    const kv_shape sa[2] = { { 2, { 16, 300 } }, { 2, { 16, 300 } } };
    c = mk_case("add.Tensor", KV_F32, 2, sa, 0);
    kv_test_case_add_arg(&c, "alpha", "0.3");
    check_float_variant(&c, true);
}

/* The metadata check on views compares every stride, a size-1 dim's
 * included (issue 22 item 6): a backend's view with another stride there
 * reads the same elements today, but a later as_strided, an expand or a
 * kernel that trusts strides sees another tensor. A check that skipped
 * size-1 dims (as contiguity tests do) would pass it. */
static void test_meta_view_stride_of_size1_dim(void **state) {
    (void)state;
    const int64_t sizes[] = { 1, 4 }, ref_strides[] = { 4, 1 }, other[] = { 7, 1 };
    kv_tensor *base = kv_tensor_empty(sizes, 2, KV_F32, KV_DEVICE_CPU0);
    assert_non_null(base);
    kv_case_inputs *in = calloc(1, sizeof *in);
    assert_non_null(in);
    in->ntensors = 1;
    in->tensors[0] = base;
    kv_meta_expect m;
    memset(&m, 0, sizeof m);
    m.valid = true;
    m.inputs_contiguous = true;
    m.n = 1;
    m.o[0] = (kv_meta_output){ .ndim = 2, .sizes = { 1, 4 }, .strides = { 4, 1 }, .offset = 0, .dtype = KV_F32,
                               .moved = false, .alias = 0, .contiguous = true };
    kv_case_outputs out;
    memset(&out, 0, sizeof out);
    out.n = 1;
    char msg[512] = "";
    /* The reference's own view passes: the check is not failing everything. */
    out.t[0] = kv_tensor_view(base, sizes, ref_strides, 2, 0);
    assert_non_null(out.t[0]);
    assert_true(kv_meta_check(&m, in, &out, KV_DEVICE_CPU0, msg, (int)sizeof msg));
    kv_tensor_release(out.t[0]);
    out.t[0] = kv_tensor_view(base, sizes, other, 2, 0);
    assert_non_null(out.t[0]);
    assert_false(kv_meta_check(&m, in, &out, KV_DEVICE_CPU0, msg, (int)sizeof msg));
    if (strstr(msg, "a view with strides") == NULL) fail_msg("unexpected message: %s", msg);
    kv_tensor_release(out.t[0]);
    kv_tensor_release(base);
    free(in);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_pass_real_op),
        cmocka_unit_test(test_golden_missing_is_error),
        cmocka_unit_test(test_wrong_kernel_fails_with_mismatches),
        cmocka_unit_test(test_golden_libm_ulp_allowance),
        cmocka_unit_test(test_regen_checks_what_it_records),
        cmocka_unit_test(test_regen_runs_only_the_golden_check),
        cmocka_unit_test(test_memory_oob_write),
        cmocka_unit_test(test_memory_unwritten),
        cmocka_unit_test(test_memory_leak),
        cmocka_unit_test(test_memory_input_modified),
        cmocka_unit_test(test_memory_faults_with_cpu_cache),
        cmocka_unit_test(test_memory_pass_cases),
        cmocka_unit_test(test_error_expected_shape),
        cmocka_unit_test(test_error_not_raised_fails),
        cmocka_unit_test(test_error_without_message_fails),
        cmocka_unit_test(test_bad_cases_are_error_rows),
        cmocka_unit_test(test_bool_output),
        cmocka_unit_test(test_multi_output),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_float_variants_within_tolerance),
        cmocka_unit_test(test_meta_view_stride_of_size1_dim),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
