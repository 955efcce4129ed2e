/* The fastpath check (src/runner/check_fastpath.c) and the runner's accel
 * integration, end to end on real cases on device=accel (on SIM when its
 * plugin is built, as in the suite, else on the CPU target):
 *   - a plain case passes and its counters show the fast (or, for a
 *     metadata op, the manual) path fired exactly once per gate;
 *   - with the kill switch forced on for every run, a plain case fails
 *     with "fast path never fired";
 *   - a layer the seed gate does not know (a kernel at BackendSelect,
 *     registered inside the test only) makes ON differ from OFF under the
 *     seed gate;
 *   - lazy-bit and mode cases pass and show the slow path ran;
 *   - with the gate forced to always allow the fast path (a test-only hook
 *     in src/boxing/gate.c), every lazy/mode case of cases/lazy.case and
 *     cases/modes.case that needs the slow path fails under both gates,
 *     and so does the lazy check on the lazy-bit cases; with the hook off
 *     they pass again;
 *   - the lean fast path refuses a kernel that keeps a reference to one
 *     of its arguments (headers in the lean path's frame);
 *   - the hit rates reported over a run, the --gate= set, cases/accel.case
 *     naming every case file, and --reset inside a batched file keeping
 *     the --batch line's --device=accel. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/accel.h"
#include "kv/backend.h"
#include "kv/kv.h"
#include "runner/check/check.h"
#include "runner/check/check_fastpath.h"
#include "runner/case/expand.h"
#include "runner/golden/golden.h"
#include "runner/report/merge.h"
#include "runner/report/report.h"

static kv_golden_store *store;

static int group_setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    /* What kvrun does: the built plugins (SIM) become the accel target. */
    kv_backend_load_default(NULL, 0, NULL);
    store = kv_golden_open("golden");
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    kv_golden_close(store);
    return 0;
}

/* ---- helpers ---- */

/* The cases of one case line (or file text); `name` sets where --batch
 * paths are relative to. */
static void cases_of(const char *name, const char *text, kv_case_list *out) {
    memset(out, 0, sizeof *out);
    kv_status st = kv_cases_from_text(name, text, out);
    if (st != KV_OK) fprintf(stderr, "%s\n", kv_last_error_message());
    assert_int_equal(st, KV_OK);
    assert_true(out->n > 0);
}

static void run_case(const kv_case *c, kv_result_list *res) {
    const kv_run_env env = { store, false, NULL, KV_GOLDEN_MODE_AUTO };
    memset(res, 0, sizeof *res);
    kv_case_run(c, &env, res);
}

/* The one case of `line`, run; its results in `res`. */
static void run_line(const char *line, kv_result_list *res) {
    kv_case_list cl;
    cases_of("t.case", line, &cl);
    assert_int_equal(cl.n, 1);
    run_case(&cl.items[0], res);
    kv_case_list_free(&cl);
}

static const kv_check_result *row(const kv_result_list *res, const char *check) {
    for (int i = 0; i < res->n; i++)
        if (strcmp(res->items[i].check, check) == 0) return &res->items[i];
    fail_msg("no '%s' row", check);
    static const kv_check_result none; /* not reached: fail_msg ends the test */
    return &none;
}

static void expect_status(const kv_check_result *r, kv_result_status st) {
    if (r->status != st)
        fail_msg("%s %s: expected %s, got %s: %s", r->case_id, r->check, kv_result_status_name(st),
                 kv_result_status_name(r->status), r->message);
}

/* ---- plain cases ---- */

static void test_plain_case_fires(void **state) {
    (void)state;
    kv_result_list res;
    run_line("--op=add.Tensor --dtype=f32 --shape=4x5 --device=accel --check=fastpath", &res);
    assert_int_equal(res.n, 2); /* one row per gate */
    const char *gates[2] = { "fastpath:seed", "fastpath:exact" };
    for (int g = 0; g < 2; g++) {
        const kv_check_result *r = row(&res, gates[g]);
        expect_status(r, KV_RESULT_PASS);
        /* One boxed call of add.Tensor, and it took the fast path. */
        assert_int_equal(r->fast_calls, 1);
        assert_int_equal(r->manual_calls, 0);
        assert_int_equal(r->slow_calls, 0);
        assert_non_null(strstr(r->message, "fast path fired"));
        assert_non_null(strstr(r->message, "no-cache"));
        assert_string_equal(r->backend, "accel");
    }
    kv_result_list_free(&res);
}

static void test_metadata_op_manual_path(void **state) {
    (void)state;
    kv_result_list res;
    run_line("--op=transpose.int --dtype=f32 --shape=3x4 --args=dim0=0,dim1=1 --device=accel --check=fastpath", &res);
    const kv_check_result *r = row(&res, "fastpath:exact");
    expect_status(r, KV_RESULT_PASS);
    assert_int_equal(r->manual_calls, 1);
    assert_int_equal(r->fast_calls, 0);
    /* The metadata switch and the kill switch were both compared. */
    assert_non_null(strstr(r->message, "no-metadata"));
    assert_non_null(strstr(r->message, "kill"));
    kv_result_list_free(&res);
}

static void test_error_case_same_error(void **state) {
    (void)state;
    kv_result_list res;
    run_line("--op=add.Tensor --dtype=f32 --shape=4x5:3 --device=accel --expect=shape", &res);
    /* Defaults on accel for an expected error: error and fastpath. */
    expect_status(row(&res, "error"), KV_RESULT_PASS);
    expect_status(row(&res, "fastpath:seed"), KV_RESULT_PASS);
    expect_status(row(&res, "fastpath:exact"), KV_RESULT_PASS);
    kv_result_list_free(&res);
}

static void test_kill_switch_everywhere_never_fired(void **state) {
    (void)state;
    kv_check_fastpath_kill_all_for_tests(true);
    kv_result_list res;
    run_line("--op=add.Tensor --dtype=f32 --shape=4x5 --device=accel --check=fastpath", &res);
    kv_check_fastpath_kill_all_for_tests(false);
    for (int i = 0; i < res.n; i++) {
        expect_status(&res.items[i], KV_RESULT_FAIL);
        assert_non_null(strstr(res.items[i].message, "fast path never fired"));
        assert_int_equal(res.items[i].fast_calls, 0);
        assert_int_equal(res.items[i].slow_calls, 1);
    }
    kv_result_list_free(&res);
    /* And it passes again. */
    run_line("--op=add.Tensor --dtype=f32 --shape=4x5 --device=accel --check=fastpath", &res);
    expect_status(row(&res, "fastpath:seed"), KV_RESULT_PASS);
    kv_result_list_free(&res);
}

/* A layer the seed gate's list does not name: a kernel at BackendSelect
 * (registered and included in TLS inside this test only) that refuses the
 * call. The slow path runs it; the seed gate's fast path skips it, and the
 * check sees ON differ from OFF. The exact gate sees the key and takes the
 * slow path on both runs. */
static kv_status refusing_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    (void)stack;
    return kv_error(KV_ERR_INVALID_ARG, "%s: the test's BackendSelect layer refuses the call", kv_op_name(op));
}

/* The comparison of output strides (issue 22 item 6): a target kernel
 * that returns the right values, but on every other call with another
 * stride on the size-1 dim of a [3,1] output (a view, so the values stay
 * the same), makes the runs differ in their strides only. A check that
 * compared values, sizes and dtype alone would pass it. */
static kv_kernel_fn g_neg_fn;
static int g_neg_calls;
static kv_status alternating_strides_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_status st = g_neg_fn(op, ks, stack);
    if (st != KV_OK || g_neg_calls++ % 2 == 0) return st;
    kv_tensor *r = stack->slots[0].v.tensor;
    const int64_t strides[2] = { 1, 5 };
    kv_tensor *v = kv_tensor_view(r, r->sizes, strides, r->ndim, r->offset);
    if (v == NULL) return kv_last_error();
    kv_tensor_release(r);
    stack->slots[0].v.tensor = v;
    return KV_OK;
}

static void test_output_strides_compared(void **state) {
    (void)state;
    const kv_key target = kv_accel_target();
    const kv_op *neg = kv_op_find("neg");
    g_neg_fn = kv_op_entry_fn(neg, target);
    assert_non_null(g_neg_fn);
    g_neg_calls = 0;
    assert_int_equal(kv_register_kernel("neg", target, alternating_strides_neg), KV_OK);
    kv_result_list res;
    run_line("--op=neg --dtype=f32 --shape=3x1 --device=accel --check=fastpath", &res);
    assert_int_equal(kv_register_kernel("neg", target, g_neg_fn), KV_OK);
    assert_true(g_neg_calls >= 2);
    const kv_check_result *r = row(&res, "fastpath:exact");
    expect_status(r, KV_RESULT_FAIL);
    if (strstr(r->message, "strides [1, 1] vs [1, 5]") == NULL && strstr(r->message, "strides [1, 5] vs [1, 1]") == NULL)
        fail_msg("the row does not name the strides: %s", r->message);
    kv_result_list_free(&res);
    /* The kernel back: both pass. */
    run_line("--op=neg --dtype=f32 --shape=3x1 --device=accel --check=fastpath", &res);
    expect_status(row(&res, "fastpath:exact"), KV_RESULT_PASS);
    kv_result_list_free(&res);
}

/* The lean fast path's per-thread memo is keyed by the accel target too
 * (issue 22 item 6): kv_accel_select_target does not advance the dispatch
 * epoch, so only that key sends the second call below, under another
 * target, to that target's kernel. Counting wrappers at both keys; the
 * CPU one refuses a call made under another target (a memo that kept its
 * kernel would run it on SIM memory). */
static kv_kernel_fn g_cpu_neg, g_sim_neg;
static int g_cpu_neg_calls, g_sim_neg_calls;
static kv_status counting_cpu_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    g_cpu_neg_calls++;
    if (kv_accel_target() != KV_KEY_CPU)
        return kv_error(KV_ERR_INTERNAL, "neg: the CPU kernel was called under the %s target", kv_accel_target_name());
    return g_cpu_neg(op, ks, stack);
}
static kv_status counting_sim_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    g_sim_neg_calls++;
    return g_sim_neg(op, ks, stack);
}

static void test_lean_memo_keyed_by_target(void **state) {
    (void)state;
    const kv_op *neg = kv_op_find("neg");
    g_cpu_neg = kv_op_entry_fn(neg, KV_KEY_CPU);
    g_sim_neg = kv_op_entry_fn(neg, KV_KEY_SIM);
    if (g_sim_neg == NULL) skip(); /* SIM not built: one target only */
    assert_non_null(g_cpu_neg);
    assert_int_equal(kv_register_kernel("neg", KV_KEY_CPU, counting_cpu_neg), KV_OK);
    assert_int_equal(kv_register_kernel("neg", KV_KEY_SIM, counting_sim_neg), KV_OK);
    g_cpu_neg_calls = g_sim_neg_calls = 0;
    const float x[3] = { 1, -2, 3 };
    const int64_t n = 3;
    kv_tensor *c = kv_tensor_from_data(x, &n, 1, KV_F32);
    assert_non_null(c);
    assert_int_equal(kv_accel_select_target("cpu"), KV_OK);
    kv_tensor *A = kv_accel_to(c);
    assert_non_null(A);
    kv_tensor *r = kv_neg(A);
    assert_non_null(r);
    kv_tensor_release(r);
    assert_int_equal(g_cpu_neg_calls, 1);
    assert_int_equal(kv_accel_select_target("sim"), KV_OK);
    kv_tensor *s = kv_backend_copy_to_device(c, (kv_device){ KV_DEVICE_SIM, 0 });
    assert_non_null(s);
    kv_tensor *B = kv_accel_to(s);
    assert_non_null(B);
    r = kv_neg(B);
    const bool failed = r == NULL;
    char why[512];
    snprintf(why, sizeof why, "%s", failed ? kv_last_error_message() : "");
    kv_tensor_release(r);
    assert_int_equal(kv_register_kernel("neg", KV_KEY_CPU, g_cpu_neg), KV_OK);
    assert_int_equal(kv_register_kernel("neg", KV_KEY_SIM, g_sim_neg), KV_OK);
    assert_int_equal(kv_accel_select_target(NULL), KV_OK);
    if (failed) fail_msg("neg under the sim target failed: %s", why);
    assert_int_equal(g_sim_neg_calls, 1);
    assert_int_equal(g_cpu_neg_calls, 1);
    kv_tensor *all[] = { A, B, s, c };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

/* The lean fast path's kept-reference check (issue 22 item 6): the
 * kernel's tensor arguments are headers in the lean path's own frame, so
 * a kernel that keeps a reference to one would hold a pointer into a dead
 * stack frame. The check refuses the call; without it the call returns
 * the kernel's result as if nothing happened. The wrapper keeps (retains
 * and forgets) its argument: the reference dies with the frame, there is
 * nothing to release. Counted fast, so the lean path (not the boxed one,
 * whose own check is kv_accel_box_end's) is the path under test. */
static kv_kernel_fn g_keep_neg;
static int g_keep_calls;
static kv_status keeping_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    g_keep_calls++;
    kv_tensor_retain(stack->slots[0].v.tensor);
    return g_keep_neg(op, ks, stack);
}

static void test_lean_kept_reference_refused(void **state) {
    (void)state;
    assert_int_equal(kv_accel_select_target("cpu"), KV_OK);
    const kv_op *neg = kv_op_find("neg");
    g_keep_neg = kv_op_entry_fn(neg, KV_KEY_CPU);
    assert_non_null(g_keep_neg);
    const float x[3] = { 1, -2, 3 };
    const int64_t n = 3;
    kv_tensor *c = kv_tensor_from_data(x, &n, 1, KV_F32);
    assert_non_null(c);
    kv_tensor *A = kv_accel_to(c);
    assert_non_null(A);
    /* The honest kernel first: the same call passes on the fast path. */
    kv_accel_counters_reset();
    kv_tensor *r = kv_neg(A);
    assert_non_null(r);
    kv_tensor_release(r);
    assert_int_equal(kv_accel_counters_of("neg").fast, 1);
    assert_int_equal(kv_register_kernel("neg", KV_KEY_CPU, keeping_neg), KV_OK);
    g_keep_calls = 0;
    kv_accel_counters_reset();
    r = kv_neg(A);
    char why[512];
    snprintf(why, sizeof why, "%s", r == NULL ? kv_last_error_message() : "");
    const kv_accel_counters k = kv_accel_counters_of("neg");
    assert_int_equal(kv_register_kernel("neg", KV_KEY_CPU, g_keep_neg), KV_OK);
    assert_int_equal(kv_accel_select_target(NULL), KV_OK);
    if (r != NULL) {
        kv_tensor_release(r);
        fail_msg("a kernel that kept a reference to its argument was accepted");
    }
    assert_int_equal(g_keep_calls, 1);
    assert_int_equal(k.fast, 1);
    assert_int_equal(k.slow, 0);
    if (strstr(why, "neg: the CPU kernel kept a reference to a boxed argument") == NULL)
        fail_msg("the error does not name the kernel and the kept reference: %s", why);
    kv_tensor_release(A);
    kv_tensor_release(c);
}

static void test_unlisted_layer_caught(void **state) {
    (void)state;
    assert_int_equal(kv_register_kernel("neg", KV_KEY_BACKEND_SELECT, refusing_layer), KV_OK);
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_BACKEND_SELECT));
    kv_result_list res;
    run_line("--op=neg --dtype=f32 --shape=3 --device=accel --check=fastpath", &res);
    kv_tls_pop(saved);
    assert_int_equal(kv_register_kernel("neg", KV_KEY_BACKEND_SELECT, NULL), KV_OK);
    const kv_check_result *seed = row(&res, "fastpath:seed");
    expect_status(seed, KV_RESULT_FAIL);
    assert_non_null(strstr(seed->message, "differs from OFF"));
    assert_non_null(strstr(seed->message, "status 'ok' vs 'invalid_arg'"));
    const kv_check_result *exact = row(&res, "fastpath:exact");
    /* Exact runs the layer on both paths: they agree, and the case fails
     * because the call does (what every other check would say too). */
    expect_status(exact, KV_RESULT_FAIL);
    assert_non_null(strstr(exact->message, "fails the same way on every path"));
    assert_int_equal(exact->fast_calls, 0);
    assert_int_equal(exact->slow_calls, 1);
    kv_result_list_free(&res);
    /* Layer gone: both pass. */
    run_line("--op=neg --dtype=f32 --shape=3 --device=accel --check=fastpath", &res);
    expect_status(row(&res, "fastpath:seed"), KV_RESULT_PASS);
    expect_status(row(&res, "fastpath:exact"), KV_RESULT_PASS);
    kv_result_list_free(&res);
}

static void test_gate_selection(void **state) {
    (void)state;
    unsigned g = 0;
    assert_int_equal(kv_fastpath_gates_parse("seed", &g), 0);
    assert_int_equal(g, KV_FASTPATH_GATE_BIT(KV_ACCEL_GATE_SEED));
    assert_int_equal(kv_fastpath_gates_parse("both", &g), 0);
    assert_int_equal(g, KV_FASTPATH_GATES_BOTH);
    assert_int_equal(kv_fastpath_gates_parse("fast", &g), -1);
    assert_string_equal(kv_fastpath_gates_name(0), "both");
    kv_check_fastpath_set_gates(KV_FASTPATH_GATE_BIT(KV_ACCEL_GATE_EXACT));
    kv_result_list res;
    run_line("--op=neg --dtype=f32 --shape=3 --device=accel --check=fastpath", &res);
    kv_check_fastpath_set_gates(KV_FASTPATH_GATES_BOTH);
    assert_int_equal(res.n, 1);
    assert_string_equal(res.items[0].check, "fastpath:exact");
    kv_result_list_free(&res);
}

/* ---- lazy bits and modes ---- */

/* Each needs the slow path: a lazy bit or a mode is live for the op. */
static const char *const k_live_lines[] = {
    "--op=add.Tensor --dtype=c64 --shape=3x4 --fill=exact --lazy=conj@0 --device=accel",
    "--op=mm --dtype=f32 --shape=3x4:4x2 --fill=exact --lazy=neg@1 --device=accel",
    "--op=mul.Tensor --dtype=f32 --shape=3x4 --fill=exact --lazy=zero@1 --device=accel",
    "--op=mul.Tensor --dtype=f32 --shape=3x4 --mode=grad --device=accel",
    "--op=mm --dtype=f32 --shape=3x4:4x2 --mode=autocast_f16 --device=accel",
    "--op=add_.Tensor --dtype=f32 --shape=3x4 --fill=exact --mode=functionalize --device=accel",
    "--op=exp --dtype=f32 --shape=3x4 --mode=trace --device=accel",
};
#define N_LIVE (sizeof k_live_lines / sizeof k_live_lines[0])

static void run_fastpath_only(const char *line, kv_result_list *res) {
    char text[512];
    snprintf(text, sizeof text, "%s --check=fastpath", line);
    run_line(text, res);
}

static void test_lazy_and_mode_cases_take_slow_path(void **state) {
    (void)state;
    for (size_t k = 0; k < N_LIVE; k++) {
        kv_result_list res;
        run_fastpath_only(k_live_lines[k], &res);
        assert_int_equal(res.n, 2);
        for (int i = 0; i < res.n; i++) {
            const kv_check_result *r = &res.items[i];
            expect_status(r, KV_RESULT_PASS);
            assert_int_equal(r->fast_calls + r->manual_calls, 0);
            assert_true(r->slow_calls >= 1);
            assert_non_null(strstr(r->message, "slow path ran"));
            assert_non_null(strstr(r->message, "live: "));
        }
        kv_result_list_free(&res);
    }
}

static void test_forced_gate_fails_lazy_and_mode_cases(void **state) {
    (void)state;
    kv_accel_gate_force_for_tests(true);
    for (size_t k = 0; k < N_LIVE; k++) {
        kv_result_list res;
        run_fastpath_only(k_live_lines[k], &res);
        for (int i = 0; i < res.n; i++) {
            const kv_check_result *r = &res.items[i];
            if (r->status != KV_RESULT_FAIL)
                fail_msg("forced gate not caught: %s %s: %s", r->case_id, r->check, r->message);
            /* Either the paths differ (the lazy bit reached the kernel,
             * autograd recorded nothing, ...) or the counters say so. */
            assert_true(strstr(r->message, "differs from OFF") != NULL ||
                        strstr(r->message, "fast path fired where a functionality key was live") != NULL);
        }
        kv_result_list_free(&res);
    }
    kv_accel_gate_force_for_tests(false);
}

/* The lazy check too: a lazy bit that reaches the backend kernel. */
static void test_forced_gate_fails_lazy_check(void **state) {
    (void)state;
    for (int forced = 0; forced < 2; forced++) {
        kv_accel_gate_force_for_tests(forced != 0);
        for (size_t k = 0; k < 3; k++) { /* the lazy-bit lines */
            char text[512];
            snprintf(text, sizeof text, "%s --check=lazy", k_live_lines[k]);
            kv_result_list res;
            run_line(text, &res);
            const kv_check_result *r = row(&res, "lazy");
            if (forced) {
                if (r->status != KV_RESULT_FAIL) fail_msg("lazy check missed the forced gate: %s: %s", r->case_id, r->message);
            } else {
                expect_status(r, KV_RESULT_PASS);
            }
            kv_result_list_free(&res);
        }
    }
    kv_accel_gate_force_for_tests(false);
}

/* The whole lazy/mode part of the suite on accel: every case that needs
 * the slow path (a live key in its fastpath rows) fails when the gate
 * always allows the fast path: its fastpath rows under both gates, or,
 * where the op's own counters cannot show it (vmap's batching rule for mm
 * calls bmm), its lazy check, which passed without the hook. */
static void suite_run(const kv_case *base, unsigned checks, bool *fp_pass, int *fp_failed, bool *lazy_pass,
                      bool *needs) {
    kv_case c = *base;
    c.checks = checks;
    kv_result_list res;
    run_case(&c, &res);
    *fp_pass = true;
    *lazy_pass = true;
    *fp_failed = 0;
    int nfp = 0;
    for (int j = 0; j < res.n; j++) {
        const kv_check_result *r = &res.items[j];
        if (strncmp(r->check, "fastpath:", 9) == 0) {
            nfp++;
            *fp_pass &= r->status == KV_RESULT_PASS;
            *fp_failed += r->status == KV_RESULT_FAIL;
            /* A vmap-only case lists just Batched: its batching rules
             * call the op on plain tensors. */
            const char *live = strstr(r->message, "live: ");
            if (needs && live && strcmp(live, "live: Batched") != 0) *needs = true;
        } else if (strcmp(r->check, "lazy") == 0) {
            *lazy_pass &= r->status == KV_RESULT_PASS;
        }
    }
    *fp_pass &= nfp == 2;
    kv_result_list_free(&res);
}

static void test_suite_lazy_cases_catch_forced_gate(void **state) {
    (void)state;
    kv_case_list cl;
    cases_of("cases/accel_lazy_test.case", "--device=accel\n--batch=lazy.case\n--batch=modes.case\n", &cl);
    const unsigned checks = (1u << KV_CHECK_FASTPATH) | (1u << KV_CHECK_LAZY);
    int nneeds = 0, fp_ok = 0, by_fp = 0, by_lazy = 0, missed = 0;
    for (int i = 0; i < cl.n; i++) {
        bool fp_pass, lazy_pass, needs = false;
        int fp_failed;
        suite_run(&cl.items[i], checks, &fp_pass, &fp_failed, &lazy_pass, &needs);
        if (!fp_pass) fprintf(stderr, "fastpath fails without the hook: %s\n", cl.items[i].op);
        fp_ok += fp_pass;
        if (!needs) continue;
        nneeds++;
        kv_accel_gate_force_for_tests(true);
        bool ffp, flazy;
        int ffailed;
        suite_run(&cl.items[i], checks, &ffp, &ffailed, &flazy, NULL);
        kv_accel_gate_force_for_tests(false);
        if (ffailed == 2) by_fp++; /* both gates' rows */
        else if (lazy_pass && !flazy) by_lazy++;
        else {
            missed++;
            char id[KV_CASE_ID_MAX];
            kv_case_id(&cl.items[i], id, sizeof id);
            fprintf(stderr, "missed: %s (lazy check %s without the hook)\n", id, lazy_pass ? "passes" : "fails");
        }
    }
    fprintf(stderr,
            "lazy/mode cases on accel: %d (fastpath passes on %d); %d need the slow path; with the gate forced open "
            "%d fail the fastpath check, %d more the lazy check, %d missed\n",
            cl.n, fp_ok, nneeds, by_fp, by_lazy, missed);
    assert_int_equal(fp_ok, cl.n);
    assert_true(nneeds > 100);
    assert_int_equal(missed, 0);
    kv_case_list_free(&cl);
}

/* ---- reports ---- */

static kv_check_result hit_row(const char *id, const char *check, kv_result_status st, int64_t fast, int64_t manual,
                               int64_t slow) {
    kv_check_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.case_id, sizeof r.case_id, "%s", id);
    snprintf(r.check, sizeof r.check, "%s", check);
    r.status = st;
    r.fast_calls = fast;
    r.manual_calls = manual;
    r.slow_calls = slow;
    return r;
}

static void test_hit_rates(void **state) {
    (void)state;
    kv_result_list l = { 0 };
    kv_check_result rows[] = {
        hit_row("add.Tensor(device=accel)", "fastpath:seed", KV_RESULT_PASS, 1, 0, 0),
        hit_row("add.Tensor(device=accel)", "fastpath:exact", KV_RESULT_PASS, 1, 0, 0),
        hit_row("view(device=accel)", "fastpath:seed", KV_RESULT_PASS, 0, 1, 0),
        hit_row("view(device=accel)", "fastpath:exact", KV_RESULT_PASS, 0, 1, 0),
        hit_row("view(dtype=c64,device=accel,lazy=conj@0)", "fastpath:seed", KV_RESULT_PASS, 0, 0, 1),
        hit_row("view(dtype=c64,device=accel,lazy=conj@0)", "fastpath:exact", KV_RESULT_PASS, 0, 1, 0),
        hit_row("add.Tensor(device=accel,mode=grad)", "fastpath:seed", KV_RESULT_FAIL, 0, 0, 2),
        hit_row("add.Tensor(device=accel,mode=grad)", "fastpath:exact", KV_RESULT_PASS, 0, 0, 2),
        /* Not counted: an ERROR row, another check. */
        hit_row("neg(device=accel)", "fastpath:exact", KV_RESULT_ERROR, 5, 0, 0),
        hit_row("neg(device=accel)", "variants:Accel", KV_RESULT_PASS, 5, 0, 0),
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) assert_int_equal(kv_result_list_push(&l, &rows[i]), KV_OK);
    kv_report_hits h[KV_REPORT_GATES];
    assert_int_equal(kv_report_hit_rates(&l, h), 2);
    assert_string_equal(h[0].gate, "seed");
    assert_int_equal(h[0].cases, 4);
    assert_int_equal(h[0].cases_hit, 2);
    assert_int_equal(h[0].plain_cases, 2);
    assert_int_equal(h[0].plain_hit, 2);
    assert_int_equal(h[0].fast, 1);
    assert_int_equal(h[0].manual, 1);
    assert_int_equal(h[0].slow, 3);
    assert_string_equal(h[1].gate, "exact");
    assert_int_equal(h[1].cases, 4);
    assert_int_equal(h[1].cases_hit, 3);
    assert_int_equal(h[1].plain_hit, 2);
    assert_int_equal(h[1].slow, 2);
    char line[512];
    kv_report_hits_format(&h[1], line, (int)sizeof line);
    assert_string_equal(line, "gate exact: fast path fired in 3 of 4 cases (75.0%; plain 2/2, lazy/mode 1/2), "
                              "3 of 5 boxed calls (60.0%: 1 fast, 2 manual, 2 slow)");
    /* The console shows both lines. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kv_report_console(f, &l, NULL);
    fclose(f);
    assert_non_null(strstr(buf, "== fast-path hit rate, gate seed: fast path fired in 2 of 4 cases (50.0%"));
    assert_non_null(strstr(buf, "== fast-path hit rate, gate exact: fast path fired in 3 of 4 cases (75.0%"));
    free(buf);
    kv_result_list_free(&l);
    /* No fastpath rows, no hit-rate line. */
    kv_result_list none = { 0 };
    assert_int_equal(kv_report_hit_rates(&none, h), 0);
}

/* The counts survive results.jsonl and a merge (other rows carry none). */
static void test_counts_round_trip(void **state) {
    (void)state;
    kv_result_list l = { 0 };
    kv_check_result a = hit_row("view(device=accel)", "fastpath:exact", KV_RESULT_PASS, 2, 3, 4);
    kv_check_result b = hit_row("view(device=accel)", "variants:Accel", KV_RESULT_PASS, 0, 0, 0);
    a.max_ulps = b.max_ulps = -1;
    assert_int_equal(kv_result_list_push(&l, &a), KV_OK);
    assert_int_equal(kv_result_list_push(&l, &b), KV_OK);
    char path[] = "/tmp/kv_test_fastpath_jsonl_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(kv_report_write_jsonl(&l, path), KV_OK);
    FILE *f = fopen(path, "r");
    char line[4096];
    assert_non_null(fgets(line, sizeof line, f));
    assert_non_null(strstr(line, "\"fast_calls\":2,\"manual_calls\":3,\"slow_calls\":4"));
    assert_non_null(fgets(line, sizeof line, f));
    assert_null(strstr(line, "fast_calls"));
    fclose(f);
    kv_result_list back = { 0 };
    assert_int_equal(kv_merge_read_jsonl(path, &back), KV_OK);
    assert_int_equal(back.n, 2);
    assert_int_equal(back.items[0].fast_calls, 2);
    assert_int_equal(back.items[0].manual_calls, 3);
    assert_int_equal(back.items[0].slow_calls, 4);
    assert_int_equal(back.items[1].fast_calls, 0);
    unlink(path);
    kv_result_list_free(&back);
    kv_result_list_free(&l);
}

/* ---- the suite's files ---- */

static void test_accel_case_batches_every_file(void **state) {
    (void)state;
    FILE *f = fopen("cases/accel.case", "r");
    assert_non_null(f);
    char text[8192];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    assert_non_null(strstr(text, "\n--device=accel\n"));
    DIR *d = opendir("cases");
    assert_non_null(d);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".case") != 0 || strcmp(e->d_name, "accel.case") == 0) continue;
        char want[300];
        snprintf(want, sizeof want, "\n--batch=%s\n", e->d_name);
        if (strstr(text, want) == NULL) fail_msg("cases/accel.case does not run cases/%s on accel (add '--batch=%s')",
                                                 e->d_name, e->d_name);
        files++;
    }
    closedir(d);
    assert_true(files >= 10);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* --reset inside a batched file goes back to what the file was included
 * with, so accel.case's --device=accel survives lazy.case's --reset. */
static void test_reset_keeps_batch_options(void **state) {
    (void)state;
    char dir[] = "/tmp/kv_test_fastpath_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char inner[128], outer[128];
    snprintf(inner, sizeof inner, "%s/inner.case", dir);
    snprintf(outer, sizeof outer, "%s/outer.case", dir);
    write_file(inner, "--dtype=f64\n--op=neg --shape=3\n--reset\n--op=neg --shape=4\n");
    write_file(outer, "--batch=inner.case --device=accel\n");
    kv_case_list cl = { 0 };
    assert_int_equal(kv_cases_from_file(outer, &cl), KV_OK);
    assert_int_equal(cl.n, 2);
    assert_int_equal(cl.items[0].device.type, KV_DEVICE_ACCEL);
    assert_int_equal(cl.items[0].dtypes[0], KV_F64);
    assert_int_equal(cl.items[1].device.type, KV_DEVICE_ACCEL); /* kept */
    assert_int_equal(cl.items[1].dtypes[0], KV_F32);            /* the file's own default went */
    /* On accel the fastpath check is a default, also next to --check=. */
    assert_true(cl.items[1].checks & (1u << KV_CHECK_FASTPATH));
    kv_case_list_free(&cl);
    unlink(inner);
    unlink(outer);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_case_fires),
        cmocka_unit_test(test_metadata_op_manual_path),
        cmocka_unit_test(test_error_case_same_error),
        cmocka_unit_test(test_kill_switch_everywhere_never_fired),
        cmocka_unit_test(test_output_strides_compared),
        cmocka_unit_test(test_lean_memo_keyed_by_target),
        cmocka_unit_test(test_lean_kept_reference_refused),
        cmocka_unit_test(test_unlisted_layer_caught),
        cmocka_unit_test(test_gate_selection),
        cmocka_unit_test(test_lazy_and_mode_cases_take_slow_path),
        cmocka_unit_test(test_forced_gate_fails_lazy_and_mode_cases),
        cmocka_unit_test(test_forced_gate_fails_lazy_check),
        cmocka_unit_test(test_suite_lazy_cases_catch_forced_gate),
        cmocka_unit_test(test_hit_rates),
        cmocka_unit_test(test_counts_round_trip),
        cmocka_unit_test(test_accel_case_batches_every_file),
        cmocka_unit_test(test_reset_keeps_batch_options),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
