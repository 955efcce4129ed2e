/* perf_dispatch (kv/tune.h): the force grammar and its errors, discovery,
 * tuning with a fake clock (choice, per-geometry cache, re-tuning), the
 * log format, pins, reference mode and a thread-safety smoke test; each
 * perf_dispatch rule: the geometry (tensors plus declared values only),
 * re-tuning by calls and by time, the first evaluation's own warm-up,
 * per-op settings (API and environment), forcing ops registered late, an
 * unknown op's entry failing nothing, and "?" returning to its caller.
 *
 * Test ops are kvtt_* (registered at run time, so they never clash with
 * ops.schema). Their variants A, B, C advance a fake clock by a cost the
 * test sets, which makes the tuner's decision exact and repeatable. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/kv.h"

/* ---- the fake clock and the test variants ---- */

static uint64_t g_now;
static uint64_t fake_clock(void *ctx) {
    (void)ctx;
    return g_now;
}

enum { VA, VB, VC, VN };
static uint64_t g_cost[VN];
/* Per-variant costs by call number, so one run can be an outlier. */
static uint64_t g_cost_seq[VN][32];
static int g_seq_len[VN];
static int g_runs[VN];
/* What the machine does to a run, beyond its own cost: a variant that is
 * slow unless the previous run was its own (g_cold: a threaded kernel
 * whose helper core went cold), and a variant whose every run makes the
 * next g_disturb_runs runs of the others g_disturb_extra slower (a
 * reference kernel that ran long enough for the caches to be lost). */
static uint64_t g_cold[VN];
static int g_last_variant = -1;
static int g_disturber = -1, g_disturb_runs, g_disturb_left;
static uint64_t g_disturb_extra;
/* Costs by dtype (index 0: f32, 1: f64), used when g_dtype_costs is set:
 * the same sizes and strides in another dtype is another geometry. */
static bool g_dtype_costs;
static uint64_t g_dtype_cost[VN][2];

static void variants_reset(uint64_t a, uint64_t b, uint64_t c) {
    g_cost[VA] = a;
    g_cost[VB] = b;
    g_cost[VC] = c;
    memset(g_runs, 0, sizeof g_runs);
    memset(g_seq_len, 0, sizeof g_seq_len);
    memset(g_cold, 0, sizeof g_cold);
    g_last_variant = g_disturber = -1;
    g_disturb_runs = g_disturb_left = 0;
    g_dtype_costs = false;
}

static kv_status run_variant(int v, kv_stack *stack) {
    uint64_t cost = g_cost[v];
    if (g_seq_len[v] > 0) cost = g_cost_seq[v][g_runs[v] % g_seq_len[v]];
    if (g_cold[v] > 0 && g_last_variant != v) cost = g_cold[v];
    if (g_dtype_costs) cost = g_dtype_cost[v][kv_arg_tensor(stack, 0)->dtype == KV_F64];
    if (v == g_disturber) {
        g_disturb_left = g_disturb_runs;
    } else if (g_disturb_left > 0) {
        cost += g_disturb_extra;
        g_disturb_left--;
    }
    g_last_variant = v;
    g_runs[v]++;
    g_now += cost;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *out = kv_tensor_empty(self->sizes, self->ndim, self->dtype, KV_DEVICE_CPU0);
    if (out == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

static kv_status var_a(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    return run_variant(VA, s);
}
static kv_status var_b(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    return run_variant(VB, s);
}
static kv_status var_c(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    return run_variant(VC, s);
}
/* C only takes f32. */
static bool pred_f32(const kv_op *op, const kv_stack *s) {
    (void)op;
    const kv_tensor *t = kv_arg_tensor(s, 0);
    return t && t->dtype == KV_F32;
}

/* An in-place op whose variants add 1 to every element of self. */
static int g_inplace_runs;
static kv_status add_one(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    g_inplace_runs++;
    g_now += 10;
    kv_tensor *self = kv_arg_tensor(s, 0);
    float *p = kv_tensor_data(self);
    for (int64_t i = 0; i < kv_tensor_numel(self); i++) p[i] += 1.0f;
    kv_tensor_retain(self);
    kv_stack_return_tensor(s, self);
    return KV_OK;
}

static const kv_op *g_op;    /* kvtt.a: variants A, B, C(f32 only) */
static const kv_op *g_op_ip; /* kvtt_: in-place, variants x, y */

static int setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    if (kv_op_register("kvtt.a(Tensor self) -> Tensor", &g_op) != KV_OK) return -1;
    if (kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "A", var_a, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "B", var_b, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "C", var_c, pred_f32) != KV_OK) return -1;
    if (kv_op_register("kvtt_(Tensor(a!) self) -> Tensor(a!)", &g_op_ip) != KV_OK) return -1;
    if (kv_tune_register_variant("kvtt_", KV_KEY_CPU, "x", add_one, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvtt_", KV_KEY_CPU, "y", add_one, NULL) != KV_OK) return -1;
    kv_tune_set_clock(fake_clock, NULL);
    return 0;
}

/* Each test starts from defaults: no force map, fresh cache, no log. */
static int reset(void **state) {
    (void)state;
    kv_tune_set_clock(fake_clock, NULL);
    kv_tune_config c = { 1, 5, 0, true, 0, 1, 0 };
    if (kv_tune_config_set(&c) != KV_OK) return -1;
    if (kv_tune_force_set(NULL) != KV_OK) return -1;
    if (kv_tune_op_config_set(g_op, NULL) != KV_OK || kv_tune_op_config_set(g_op_ip, NULL) != KV_OK) return -1;
    kv_tune_log_set_enabled(false);
    kv_tune_set_log_sink(NULL, NULL);
    kv_tune_pin(NULL, KV_KEY_CPU, NULL);
    kv_tune_reference_mode_set(false);
    kv_tune_untimed_mode_set(false);
    kv_tune_cache_clear();
    variants_reset(100, 10, 50);
    return 0;
}

static kv_tensor *tensor2(int64_t r, int64_t c, kv_dtype dt) {
    const int64_t sizes[2] = { r, c };
    kv_tensor *t = kv_tensor_empty(sizes, 2, dt, KV_DEVICE_CPU0);
    assert_non_null(t);
    return t;
}

/* Calls kvtt.a on t through the dispatcher; returns the status. */
static kv_status call_a(kv_tensor *t) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    assert_int_equal(kv_push_tensor(&s, t), KV_OK);
    kv_status st = kv_call(g_op, &s);
    if (st == KV_OK) kv_stack_clear_returns(&s);
    return st;
}

static const char *choice_for(kv_tensor *t) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    assert_int_equal(kv_push_tensor(&s, t), KV_OK);
    const char *name = NULL;
    kv_status st = kv_tune_choice(g_op, KV_KEY_CPU, &s, &name, NULL);
    if (st != KV_OK) fail_msg("kv_tune_choice: %s", kv_last_error_message());
    return name;
}

static void expect_force_error(const char *spec, const char *const *needles) {
    kv_status st = kv_tune_force_set(spec);
    assert_int_equal(st, KV_ERR_INVALID_ARG);
    const char *m = kv_last_error_message();
    for (int i = 0; needles[i]; i++)
        if (strstr(m, needles[i]) == NULL) fail_msg("force '%s': message lacks '%s': %s", spec, needles[i], m);
}

/* ---- the force grammar ---- */

static void test_force_whitespace_and_empty_entries(void **state) {
    (void)state;
    assert_int_equal(kv_tune_force_set("  kvtt.a : B ,, , neg:sse2 ,"), KV_OK);
    assert_string_equal(kv_tune_forced(g_op), "B");
    assert_string_equal(kv_tune_forced(kv_op_find("neg")), "sse2");
    assert_null(kv_tune_forced(kv_op_find("exp")));
    /* Forced: B runs without any tuning, though A... are compatible. */
    kv_tensor *t = tensor2(2, 3, KV_F32);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VB], 1);
    assert_int_equal(g_runs[VA] + g_runs[VC], 0);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 0);
    kv_tensor_release(t);
    /* Only separators is an empty map. */
    assert_int_equal(kv_tune_force_set(" , ,"), KV_OK);
    assert_null(kv_tune_forced(g_op));
}

static void test_force_missing_colon(void **state) {
    (void)state;
    const char *n[] = { "entry 'kvtt.a'", "exactly one", NULL };
    expect_force_error("neg:ref, kvtt.a ,exp:ref", n);
    /* A failed set leaves the previous map in place. */
    assert_int_equal(kv_tune_force_set("neg:ref"), KV_OK);
    expect_force_error("neg", (const char *[]){ "entry 'neg'", "0 ':'", NULL });
    assert_string_equal(kv_tune_forced(kv_op_find("neg")), "ref");
}

static void test_force_two_colons(void **state) {
    (void)state;
    const char *n[] = { "entry 'kvtt.a:A:B'", "2 ':'", NULL };
    expect_force_error("kvtt.a:A:B", n);
}

static void test_force_unknown_op(void **state) {
    (void)state;
    /* The message names the entry and lists ops that have variants. */
    const char *n[] = { "entry 'nosuch.op:ref'", "unknown op 'nosuch.op'", "ops with variants:", "abs", NULL };
    expect_force_error("nosuch.op:ref", n);
    expect_force_error(":ref", (const char *[]){ "entry ':ref'", "unknown op ''", NULL });
}

static void test_force_unknown_variant(void **state) {
    (void)state;
    const char *n[] = { "entry 'kvtt.a:D'", "no variant 'D'", "CPU[A, B, C]", NULL };
    expect_force_error("kvtt.a:D", n);
    const char *n2[] = { "entry 'neg:avx9'", "CPU[ref, sse2, avx2, avx512, threads]", NULL };
    expect_force_error("neg:avx9", n2);
    expect_force_error("neg:", (const char *[]){ "entry 'neg:'", "no variant ''", NULL });
    /* Forcing one op twice is ambiguous. */
    expect_force_error("neg:ref,neg:sse2", (const char *[]){ "entry 'neg:sse2'", "already forced", NULL });
    /* "?" lists; it is not a map. */
    expect_force_error("?", (const char *[]){ "lists", NULL });
}

static void test_forced_incompatible_is_call_error(void **state) {
    (void)state;
    assert_int_equal(kv_tune_force_set("kvtt.a:C"), KV_OK);
    kv_tensor *f64 = tensor2(2, 3, KV_F64), *f32 = tensor2(2, 3, KV_F32);
    /* C refuses f64: an error for this call, nothing ran. */
    assert_int_equal(call_a(f64), KV_ERR_INVALID_ARG);
    const char *m = kv_last_error_message();
    assert_non_null(strstr(m, "kvtt.a"));
    assert_non_null(strstr(m, "KV_PERFDISPATCH_FORCE"));
    assert_non_null(strstr(m, "'C'"));
    assert_non_null(strstr(m, "not compatible"));
    assert_non_null(strstr(m, "compatible: A, B"));
    assert_int_equal(g_runs[VA] + g_runs[VB] + g_runs[VC], 0);
    /* Again (the error is not cached away), and a compatible call works. */
    assert_int_equal(call_a(f64), KV_ERR_INVALID_ARG);
    assert_int_equal(call_a(f32), KV_OK);
    assert_int_equal(g_runs[VC], 1);
    kv_tensor_release(f64);
    kv_tensor_release(f32);
}

/* The environment is read once per process: each case runs in a fresh
 * process (this binary re-executed with --env-child NAME). */

/* kv_exp / kv_neg on a small tensor: whether the call worked. */
static bool unary_ok(kv_tensor *(*fn)(kv_tensor *)) {
    const int64_t n = 4;
    kv_tensor *t = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    kv_tensor *r = fn(t);
    const bool ok = r != NULL;
    kv_tensor_release(r);
    kv_tensor_release(t); /* LeakSanitizer checks this child too (ninja asan) */
    return ok;
}

/* A malformed map (a duplicate op) is an error for every dispatch: no
 * silent tuning. */
static int env_expect_error(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_ERROR) return 1;
    if (strstr(kv_last_error_message(), "entry 'neg:avx9'") == NULL) return 2;
    const bool failed = !unary_ok(kv_exp) && strstr(kv_last_error_message(), "KV_PERFDISPATCH_FORCE") != NULL;
    if (!failed) return 3;
    /* Every later dispatch too: the loaded-environment flag a dispatch
     * reads instead of pthread_once is never set by a failed load. */
    if (unary_ok(kv_exp) || unary_ok(kv_neg)) return 4;
    return strstr(kv_last_error_message(), "KV_PERFDISPATCH_FORCE") ? 0 : 5;
}
/* neg:avx9 names a variant neg has on no backend: judged at neg's first
 * dispatch, which fails naming the entry; exp is not touched by it. */
static int env_expect_op_error(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_OK) return 1;
    if (!unary_ok(kv_exp)) return 2;
    if (unary_ok(kv_neg)) return 3;
    if (strstr(kv_last_error_message(), "entry 'neg:avx9'") == NULL) return 4;
    if (strstr(kv_last_error_message(), "no variant 'avx9'") == NULL) return 5;
    if (unary_ok(kv_neg)) return 6; /* every call, not only the first */
    return kv_tune_force_check() == KV_ERR_INVALID_ARG ? 0 : 7;
}
/* nosuch.op:x matches no op: nothing can judge it at dispatch, so nothing
 * fails, and exp is forced as its entry says; kv_tune_force_check (what
 * kvrun runs after loading everything) reports the entry. */
static int env_expect_unknown_op_harmless(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_OK) return 1;
    if (!unary_ok(kv_exp) || !unary_ok(kv_neg)) return 2;
    const char *f = kv_tune_forced(kv_op_find("exp"));
    if (f == NULL || strcmp(f, "sse2") != 0) return 3;
    if (kv_tune_force_check() != KV_ERR_INVALID_ARG) return 4;
    if (strstr(kv_last_error_message(), "entry 'nosuch.op:x'") == NULL) return 5;
    return 0;
}
/* An op and variants registered after the map was read can be forced. */
static int g_late_b_runs;
static kv_status late_a(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    kv_tensor *self = kv_arg_tensor(s, 0);
    kv_tensor_retain(self);
    kv_stack_return_tensor(s, self);
    return KV_OK;
}
static kv_status late_b(const kv_op *op, kv_keyset ks, kv_stack *s) {
    g_late_b_runs++;
    return late_a(op, ks, s);
}
static int env_expect_late_forced(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_OK) return 1;
    if (!unary_ok(kv_exp)) return 2; /* dispatches before the op exists */
    const kv_op *op = NULL;
    if (kv_op_register("kvtt.late(Tensor self) -> Tensor", &op) != KV_OK) return 3;
    if (kv_tune_register_variant("kvtt.late", KV_KEY_CPU, "A", late_a, NULL) != KV_OK) return 4;
    if (kv_tune_register_variant("kvtt.late", KV_KEY_CPU, "B", late_b, NULL) != KV_OK) return 5;
    if (kv_tune_register_variant("kvtt.late", KV_KEY_CPU, "C", late_a, NULL) != KV_OK) return 6;
    const int64_t n = 4;
    kv_tensor *t = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    kv_ivalue slots[KV_STACK_MAX];
    for (int i = 0; i < 3; i++) {
        kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
        kv_push_tensor(&st, t);
        if (kv_call(op, &st) != KV_OK) return 7;
        kv_stack_clear_returns(&st);
    }
    kv_tensor_release(t);
    if (g_late_b_runs != 3) return 8; /* forced: B every time, never timed */
    if (kv_tune_stats_of(op, KV_KEY_CPU).tunings != 0) return 9;
    return kv_tune_force_check() == KV_OK ? 0 : 10;
}
/* "?": kv_tune_env_load says so (kvrun lists and exits); a dispatch that
 * reads it first lists once and returns to its caller. */
static int env_expect_list(void) { return kv_tune_env_load() == KV_TUNE_ENV_LIST ? 0 : 1; }
static int env_expect_list_returns(void) {
    if (!unary_ok(kv_exp)) return 1; /* the first dispatch reads "?" */
    if (!unary_ok(kv_neg)) return 2;
    return kv_tune_env_load() == KV_TUNE_ENV_LIST ? 0 : 3;
}
/* Per-op settings from the environment: "N" for all, "op:N" for one. */
static int env_expect_settings(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_OK) return 1;
    const kv_tune_config g = kv_tune_config_get();
    if (g.retune_after != 7 || g.rewarmup != 0) return 2;
    const kv_tune_config n = kv_tune_op_config_get(kv_op_find("neg"));
    if (n.retune_after != 3 || n.retune_ms != 5 || n.rewarmup != 0) return 3;
    const kv_tune_config e = kv_tune_op_config_get(kv_op_find("exp"));
    if (e.retune_after != 7 || e.retune_ms != 60000) return 4;
    return unary_ok(kv_neg) ? 0 : 5;
}
static int env_expect_settings_error(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_ERROR) return 1;
    return strstr(kv_last_error_message(), "KV_PERFDISPATCH_RETUNE: entry 'neg:x'") ? 0 : 2;
}
static int env_expect_forced(void) {
    if (kv_tune_env_load() != KV_TUNE_ENV_OK) return 1;
    const char *f = kv_tune_forced(kv_op_find("exp"));
    return f && strcmp(f, "sse2") == 0 ? 0 : 2;
}

static int env_child(const char *name) {
    if (kv_init() != KV_OK) return 90;
    if (strcmp(name, "error") == 0) return env_expect_error();
    if (strcmp(name, "op_error") == 0) return env_expect_op_error();
    if (strcmp(name, "unknown_op") == 0) return env_expect_unknown_op_harmless();
    if (strcmp(name, "late") == 0) return env_expect_late_forced();
    if (strcmp(name, "list_returns") == 0) return env_expect_list_returns();
    if (strcmp(name, "settings") == 0) return env_expect_settings();
    if (strcmp(name, "settings_error") == 0) return env_expect_settings_error();
    if (strcmp(name, "list") == 0) return env_expect_list();
    if (strcmp(name, "forced") == 0) return env_expect_forced();
    return 91;
}

static const char *g_self = "/proc/self/exe";

static int child_env_var(const char *var, const char *value, const char *name) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (freopen("/dev/null", "w", stdout) == NULL) _exit(101); /* "?" lists there */
        setenv(var, value, 1);
        if (strcmp(var, "KV_PERFDISPATCH_RETUNE") == 0) {
            setenv("KV_PERFDISPATCH_RETUNE_MS", "neg:5", 1);
            setenv("KV_PERFDISPATCH_REWARMUP", "0", 1);
        }
        execl(g_self, "test_tune", "--env-child", name, (char *)NULL);
        _exit(100);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

static int child_env(const char *value, const char *name) {
    return child_env_var("KV_PERFDISPATCH_FORCE", value, name);
}

static void test_force_environment(void **state) {
    (void)state;
    assert_int_equal(child_env("neg:ref, neg:avx9", "error"), 0);
    assert_int_equal(child_env("neg:avx9", "op_error"), 0);
    assert_int_equal(child_env(" ? ", "list"), 0);
    assert_int_equal(child_env(" exp : sse2 ", "forced"), 0);
}

static void test_force_unknown_op_does_not_poison(void **state) {
    (void)state;
    assert_int_equal(child_env("nosuch.op:x, exp:sse2", "unknown_op"), 0);
}

static void test_force_late_registration(void **state) {
    (void)state;
    assert_int_equal(child_env("kvtt.late:B", "late"), 0);
}

static void test_force_question_mark_returns(void **state) {
    (void)state;
    assert_int_equal(child_env("?", "list_returns"), 0);
}

static void test_settings_environment(void **state) {
    (void)state;
    assert_int_equal(child_env_var("KV_PERFDISPATCH_RETUNE", "7, neg:3", "settings"), 0);
    assert_int_equal(child_env_var("KV_PERFDISPATCH_RETUNE", "7,neg:x", "settings_error"), 0);
}

/* kvrun: a bad value exits 2 naming the entry; "?" lists and exits 0. */
static int run_kvrun(const char *env, char *out, size_t cap) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "KV_PERFDISPATCH_FORCE='%s' build/kvrun --op=neg --shape=4 2>&1", env);
    FILE *p = popen(cmd, "r");
    if (p == NULL) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_kvrun_force(void **state) {
    (void)state;
    if (access("build/kvrun", X_OK) != 0) skip();
    static char out[1 << 16];
    assert_int_equal(run_kvrun("neg:avx9", out, sizeof out), 2);
    assert_non_null(strstr(out, "entry 'neg:avx9'"));
    assert_int_equal(run_kvrun("neg", out, sizeof out), 2);
    assert_non_null(strstr(out, "entry 'neg'"));
    /* Matching no op is judged once kvrun has loaded everything. */
    assert_int_equal(run_kvrun("nosuch.op:ref", out, sizeof out), 2);
    assert_non_null(strstr(out, "entry 'nosuch.op:ref'"));
    assert_int_equal(run_kvrun("?", out, sizeof out), 0);
    assert_non_null(strstr(out, "neg: CPU[ref, sse2, avx2, avx512, threads]"));
    assert_non_null(strstr(out, "mm: CPU[ref"));
}

/* ---- discovery ---- */

static void test_discovery(void **state) {
    (void)state;
    assert_int_equal(kv_tune_variant_count(g_op, KV_KEY_CPU), 3);
    assert_string_equal(kv_tune_variant_name(g_op, KV_KEY_CPU, 0), "A");
    assert_string_equal(kv_tune_variant_name(g_op, KV_KEY_CPU, 2), "C");
    assert_null(kv_tune_variant_name(g_op, KV_KEY_CPU, 3));
    assert_int_equal(kv_tune_variant_find(g_op, KV_KEY_CPU, "B"), 1);
    assert_int_equal(kv_tune_variant_find(g_op, KV_KEY_CPU, "Z"), -1);
    assert_int_equal(kv_tune_variant_count(g_op, KV_KEY_SIM), 0);
    assert_true(kv_tune_is_dispatching(g_op, KV_KEY_CPU));
    /* Every op of ops.schema has "ref" first and at least one more. */
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (kv_op_builtin_id(op) < 0) continue;
        if (kv_tune_variant_count(op, KV_KEY_CPU) < 2) fail_msg("%s has %d CPU variants", kv_op_name(op),
                                                                 kv_tune_variant_count(op, KV_KEY_CPU));
        assert_string_equal(kv_tune_variant_name(op, KV_KEY_CPU, 0), "ref");
    }
    /* The listing: one line per op, sorted, backend[variants]. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    kv_tune_list(f);
    fclose(f);
    assert_non_null(strstr(buf, "kvtt.a: CPU[A, B, C]\n"));
    assert_non_null(strstr(buf, "kvtt_: CPU[x, y]\n"));
    assert_non_null(strstr(buf, "\nneg: CPU[ref, sse2, avx2, avx512, threads]\n"));
    assert_true(strstr(buf, "\nabs: ") < strstr(buf, "\nneg: "));
    free(buf);
    /* Registration errors. */
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "A", var_a, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "already registered"));
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "bad name", var_a, NULL), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_AUTOGRAD, "D", var_a, NULL), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tune_register_variant("kvtt.nope", KV_KEY_CPU, "D", var_a, NULL), KV_ERR_UNKNOWN_OP);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "D", NULL, NULL), KV_ERR_INVALID_ARG);
}

static void test_direct_call_and_compat(void **state) {
    (void)state;
    kv_tensor *f64 = tensor2(1, 2, KV_F64);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, f64);
    assert_true(kv_tune_variant_compatible(g_op, KV_KEY_CPU, 0, &s));
    assert_false(kv_tune_variant_compatible(g_op, KV_KEY_CPU, 2, &s));
    assert_int_equal(kv_tune_call_variant(g_op, KV_KEY_CPU, "C", &s), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "not compatible"));
    assert_int_equal(kv_tune_call_variant(g_op, KV_KEY_CPU, "Q", &s), KV_ERR_INVALID_ARG);
    assert_int_equal(g_runs[VC], 0);
    assert_int_equal(kv_tune_call_variant(g_op, KV_KEY_CPU, "B", &s), KV_OK);
    assert_int_equal(g_runs[VB], 1);
    kv_stack_clear_returns(&s);
    kv_tensor_release(f64);
}

/* ---- tuning with the fake clock ---- */

static void test_tuning_picks_fastest_and_caches(void **state) {
    (void)state;
    kv_tensor *t = tensor2(2, 3, KV_F32);
    assert_string_equal(choice_for(t), "B");
    /* A (100) is more than 8 times B (10) after two screening rounds and
     * stops; B and C drop those two samples, settle with one untimed run
     * and get 5 rounds, each a lead-in run and a timed one: 1 warm-up +
     * 2 x 2 + 1 + 5 x 2 runs each. C (50) is not close to B: no more. */
    assert_int_equal(g_runs[VA], 1 + 2 * 2);
    assert_int_equal(g_runs[VB], 16);
    assert_int_equal(g_runs[VC], 16);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    /* Cached: calls run B once each, no more tuning. */
    memset(g_runs, 0, sizeof g_runs);
    for (int i = 0; i < 5; i++) assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VB], 5);
    assert_int_equal(g_runs[VA] + g_runs[VC], 0);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).cache_hits, 5);
    /* Per geometry: another shape tunes again, with C now fastest. */
    variants_reset(100, 60, 5);
    kv_tensor *u = tensor2(3, 2, KV_F32);
    assert_string_equal(choice_for(u), "C");
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 2);
    /* ... while the first shape keeps its cached choice. */
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VB], 1);
    /* Strides are geometry too: a transposed view of t is a new one. */
    const int64_t sz[2] = { 3, 2 }, st[2] = { 1, 3 };
    kv_tensor *tt = kv_tensor_view(t, sz, st, 2, 0);
    assert_string_equal(choice_for(tt), "C");
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 3);
    /* f64: C is not compatible, so the faster of A and B. */
    kv_tensor *d = tensor2(2, 3, KV_F64);
    assert_string_equal(choice_for(d), "B");
    kv_tensor_release(t);
    kv_tensor_release(u);
    kv_tensor_release(tt);
    kv_tensor_release(d);
}

/* The cache key covers every property of a geometry, the dtype included
 * (issue 22 item 6): with costs that depend on the dtype only, f32 and
 * f64 tensors of one shape and stride each get their own tuning and
 * their own fastest variant. A key without the dtype would hand f64 the
 * f32 choice from the cache. */
static void test_cache_key_has_the_dtype(void **state) {
    (void)state;
    g_dtype_costs = true;
    const uint64_t costs[VN][2] = { { 100, 10 }, { 10, 100 }, { 1000, 1000 } };
    memcpy(g_dtype_cost, costs, sizeof costs);
    kv_tensor *f32 = tensor2(2, 3, KV_F32), *f64 = tensor2(2, 3, KV_F64);
    assert_string_equal(choice_for(f32), "B");
    assert_string_equal(choice_for(f64), "A");
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 2);
    /* And each keeps its own: calls run the cached choice. */
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(f32), KV_OK);
    assert_int_equal(call_a(f64), KV_OK);
    assert_int_equal(g_runs[VB], 1);
    assert_int_equal(g_runs[VA], 1);
    kv_tensor_release(f32);
    kv_tensor_release(f64);
}

/* Untimed mode (what kvrun's checks run in): the last compatible variant,
 * whatever the timings, the cache or the force map say; a pin still wins.
 * B is the fastest here, so a timed pick would differ. */
static void test_untimed_mode_ignores_timing_cache_and_force(void **state) {
    (void)state;
    kv_tensor *f32 = tensor2(2, 3, KV_F32), *f64 = tensor2(2, 3, KV_F64);
    assert_string_equal(choice_for(f32), "B"); /* tuned and cached */
    assert_false(kv_tune_untimed_mode_set(true));
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(f32), KV_OK);
    assert_int_equal(g_runs[VC], 1);            /* C: the last, accepts f32 */
    assert_int_equal(g_runs[VA] + g_runs[VB], 0);
    assert_int_equal(call_a(f64), KV_OK);       /* C refuses f64: B */
    assert_int_equal(g_runs[VB], 1);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1); /* never timed again */
    /* The force map names a variant: ignored, even an incompatible one. */
    assert_int_equal(kv_tune_force_set("kvtt.a:A"), KV_OK);
    assert_string_equal(choice_for(f32), "C");
    assert_int_equal(kv_tune_force_set("kvtt.a:C"), KV_OK);
    assert_int_equal(call_a(f64), KV_OK);
    /* A pin comes first. */
    assert_int_equal(kv_tune_pin(g_op, KV_KEY_CPU, "A"), KV_OK);
    assert_string_equal(choice_for(f32), "A");
    kv_tune_pin(NULL, KV_KEY_CPU, NULL);
    assert_true(kv_tune_untimed_mode_set(false));
    /* Out of the mode the force map is back. */
    assert_int_equal(call_a(f64), KV_ERR_INVALID_ARG);
    kv_tensor_release(f32);
    kv_tensor_release(f64);
}

static void test_tuning_median_and_ties(void **state) {
    (void)state;
    /* A: one outlier of 1000, else 5 (median 5); B: a steady 8. */
    variants_reset(0, 8, 1000);
    const uint64_t seq[6] = { 5, 1000, 5, 5, 5, 5 };
    memcpy(g_cost_seq[VA], seq, sizeof seq);
    g_seq_len[VA] = 6;
    kv_tensor *t = tensor2(4, 4, KV_F32);
    assert_string_equal(choice_for(t), "A");
    kv_tensor_release(t);
    /* Ties go to the earlier registered variant. */
    kv_tune_cache_clear();
    variants_reset(7, 7, 7);
    t = tensor2(5, 5, KV_F32);
    assert_string_equal(choice_for(t), "A");
    /* Deterministic: the same clock gives the same choice every time. */
    for (int i = 0; i < 3; i++) {
        kv_tune_cache_clear();
        variants_reset(30, 20, 25);
        assert_string_equal(choice_for(t), "B");
    }
    kv_tensor_release(t);
}

/* ---- what a timed run is: the call a cache hit makes, in a loop ---- */

/* A timed run is the predicate and the kernel, as on a cache hit: P's
 * kernel is the faster (10 against 30) but its predicate costs 50, so a
 * dispatched call of P costs 60. Timing the kernels alone picked P. */
static uint64_t g_pred_cost;
static bool pred_costly(const kv_op *op, const kv_stack *s) {
    (void)op;
    (void)s;
    g_now += g_pred_cost;
    return true;
}

static void test_timed_run_includes_the_predicate(void **state) {
    (void)state;
    static const kv_op *op;
    if (op == NULL) {
        assert_int_equal(kv_op_register("kvtt.p(Tensor self) -> Tensor", &op), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.p", KV_KEY_CPU, "P", var_a, pred_costly), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.p", KV_KEY_CPU, "Q", var_b, NULL), KV_OK);
    }
    variants_reset(10, 30, 0);
    g_pred_cost = 50;
    kv_tensor *t = tensor2(2, 6, KV_F32);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    const char *name = NULL;
    assert_int_equal(kv_tune_choice(op, KV_KEY_CPU, &s, &name, NULL), KV_OK);
    assert_string_equal(name, "Q");
    /* A cheap predicate: P wins again. */
    kv_tune_cache_clear();
    g_pred_cost = 5;
    assert_int_equal(kv_tune_choice(op, KV_KEY_CPU, &s, &name, NULL), KV_OK);
    assert_string_equal(name, "P");
    g_pred_cost = 0;
    kv_tensor_release(t);
}

/* Each timed run follows a run of the same variant (an untimed lead-in),
 * as in a program's loop and in kvrun's perf mode: A costs 10 right after
 * itself and 100 after another variant (a threaded kernel whose second
 * core went cold meanwhile). In plain rounds A always followed B and
 * measured 100, so B (40) won, though a loop of A costs 10 a call. */
static void test_timed_run_follows_its_own_variant(void **state) {
    (void)state;
    variants_reset(10, 40, 0);
    g_cold[VA] = 100;
    kv_tensor *t = tensor2(3, 7, KV_F64); /* C refuses f64 */
    assert_string_equal(choice_for(t), "A");
    kv_tensor_release(t);
}

/* A hopeless variant (A, 10000) runs long enough in the two screening
 * rounds to slow the next runs of the others (+100 each, for 3 or 6 runs
 * after each of its runs). Once it stops, the survivors' screening
 * samples are dropped and one untimed run each settles the machine, so B
 * (30) wins over C (33). Before, B, timed right after A, kept 3 slow
 * samples of 5 (3 runs) and lost to C; with lead-ins but the screening
 * samples kept, 6 runs do the same. */
static void test_hopeless_variant_screening_samples_dropped(void **state) {
    (void)state;
    const int spans[2] = { 3, 6 };
    for (int k = 0; k < 2; k++) {
        kv_tune_cache_clear();
        variants_reset(10000, 30, 33);
        g_disturber = VA;
        g_disturb_runs = spans[k];
        g_disturb_extra = 100;
        kv_tensor *t = tensor2(2, 9, KV_F32);
        assert_string_equal(choice_for(t), "B");
        /* A stopped after its 2 screening samples (lead-in and timed run
         * each, after 1 warm-up run); B's 5 samples were all clean, so B
         * and C were clearly apart and needed no second look (had the
         * screening samples stayed, only the close call's 5 more rounds
         * would have saved B). */
        assert_int_equal(g_runs[VA], 1 + 2 * 2);
        assert_int_equal(g_runs[VB], 1 + 2 * 2 + 1 + 5 * 2);
        kv_tensor_release(t);
    }
}

/* A close call is timed again: A's first 5 samples (110, 110, 110, 90,
 * 90: median 110) lose to B's steady 100, but A's lower quartile (90) is
 * under B's upper one (100), so the two get 5 more rounds, in which A
 * takes 90, and the medians of all 10 samples (90 against 100) decide.
 * One look at 5 samples picked B. */
static void test_close_call_timed_again(void **state) {
    (void)state;
    variants_reset(0, 100, 0);
    /* A's runs in order: 1 warm-up, then a lead-in (odd) and a timed run
     * (even) per round; the timed runs 2..10 are the first 5 samples. */
    for (int i = 0; i < 32; i++) g_cost_seq[VA][i] = 90;
    g_cost_seq[VA][2] = g_cost_seq[VA][4] = g_cost_seq[VA][6] = 110;
    g_cost_seq[VA][1] = g_cost_seq[VA][3] = g_cost_seq[VA][5] = 110;
    g_seq_len[VA] = 32;
    kv_tensor *t = tensor2(4, 7, KV_F64); /* C refuses f64 */
    assert_string_equal(choice_for(t), "A");
    assert_int_equal(g_runs[VA], 1 + 10 * 2);
    assert_int_equal(g_runs[VB], 1 + 10 * 2);
    /* Clearly apart (quartiles do not meet): no second look. */
    kv_tune_cache_clear();
    variants_reset(50, 100, 0);
    assert_string_equal(choice_for(t), "A");
    assert_int_equal(g_runs[VB], 1 + 5 * 2);
    kv_tensor_release(t);
}

static void test_retune_after_n_calls(void **state) {
    (void)state;
    kv_tune_config c = kv_tune_config_get();
    c.retune_after = 3;
    assert_int_equal(kv_tune_config_set(&c), KV_OK);
    kv_tensor *t = tensor2(2, 2, KV_F32);
    assert_int_equal(call_a(t), KV_OK); /* call 1: tunes, B */
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    variants_reset(100, 10, 1); /* C becomes fastest */
    assert_int_equal(call_a(t), KV_OK); /* calls 2 and 3: cached B */
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VB], 2);
    assert_int_equal(g_runs[VC], 0);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    assert_int_equal(call_a(t), KV_OK); /* call 4: re-tunes, C */
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 2);
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VC], 1);
    assert_int_equal(g_runs[VA] + g_runs[VB], 0);
    /* 0 = never: many calls, one tuning. */
    c.retune_after = 0;
    assert_int_equal(kv_tune_config_set(&c), KV_OK);
    for (int i = 0; i < 20; i++) assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    /* Bad settings are refused. */
    c.reps = 0;
    assert_int_equal(kv_tune_config_set(&c), KV_ERR_INVALID_ARG);
    c.reps = 5;
    c.retune_after = -1;
    assert_int_equal(kv_tune_config_set(&c), KV_ERR_INVALID_ARG);
    kv_tensor_release(t);
}

/* ---- the geometry: tensors, plus only the declared values ---- */

static kv_status call_scalar(const kv_op *op, kv_tensor *t, int64_t alpha) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    kv_push_scalar(&s, kv_scalar_int(alpha));
    kv_status st = kv_call(op, &s);
    if (st == KV_OK) kv_stack_clear_returns(&s);
    return st;
}

static void test_geometry_scalars_only_when_declared(void **state) {
    (void)state;
    static const kv_op *plain, *declared;
    if (plain == NULL) {
        assert_int_equal(kv_op_register("kvtt.s(Tensor self, Scalar alpha) -> Tensor", &plain), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.s", KV_KEY_CPU, "A", var_a, NULL), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.s", KV_KEY_CPU, "B", var_b, NULL), KV_OK);
        assert_int_equal(kv_op_register("kvtt.sd(Tensor self, Scalar alpha) -> Tensor", &declared), KV_OK);
        assert_int_equal(kv_tune_register_variant_args("kvtt.sd", KV_KEY_CPU, "A", var_a, NULL, "alpha"), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.sd", KV_KEY_CPU, "B", var_b, NULL), KV_OK);
    }
    kv_tensor *t = tensor2(2, 3, KV_F32);
    /* Nobody declared alpha: alpha = 1..100 is one geometry, tuned once. */
    for (int a = 1; a <= 100; a++) assert_int_equal(call_scalar(plain, t, a), KV_OK);
    assert_int_equal(kv_tune_stats_of(plain, KV_KEY_CPU).tunings, 1);
    assert_int_equal(kv_tune_stats_of(plain, KV_KEY_CPU).cache_hits, 99);
    /* A declared it: every value is a geometry of its own. */
    for (int a = 1; a <= 10; a++) assert_int_equal(call_scalar(declared, t, a), KV_OK);
    for (int a = 1; a <= 10; a++) assert_int_equal(call_scalar(declared, t, a), KV_OK);
    assert_int_equal(kv_tune_stats_of(declared, KV_KEY_CPU).tunings, 10);
    /* Declaring what is not a non-tensor argument is an error. */
    assert_int_equal(kv_tune_register_variant_args("kvtt.sd", KV_KEY_CPU, "C", var_c, NULL, "self"),
                     KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "'self'"));
    assert_int_equal(kv_tune_register_variant_args("kvtt.sd", KV_KEY_CPU, "C", var_c, NULL, "beta"),
                     KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tune_variant_count(declared, KV_KEY_CPU), 2);
    kv_tensor_release(t);
}

/* A cached choice the call's predicate refuses goes to the next fastest
 * compatible variant of that geometry's timings: no tuning per call. */
static bool g_c_refuses;
static bool pred_c_switch(const kv_op *op, const kv_stack *s) {
    (void)op;
    (void)s;
    return !g_c_refuses;
}

static void test_cached_choice_refused_uses_ranking(void **state) {
    (void)state;
    static const kv_op *op;
    if (op == NULL) {
        assert_int_equal(kv_op_register("kvtt.r(Tensor self) -> Tensor", &op), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.r", KV_KEY_CPU, "A", var_a, NULL), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.r", KV_KEY_CPU, "B", var_b, NULL), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.r", KV_KEY_CPU, "C", var_c, pred_c_switch), KV_OK);
    }
    g_c_refuses = false;
    variants_reset(30, 20, 10); /* C, then B, then A */
    kv_tensor *t = tensor2(2, 2, KV_F32);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    assert_int_equal(kv_call(op, &s), KV_OK);
    kv_stack_clear_returns(&s);
    assert_int_equal(kv_tune_stats_of(op, KV_KEY_CPU).tunings, 1);
    g_c_refuses = true;
    memset(g_runs, 0, sizeof g_runs);
    for (int i = 0; i < 5; i++) {
        s = kv_stack_on(slots, KV_STACK_MAX);
        kv_push_tensor(&s, t);
        assert_int_equal(kv_call(op, &s), KV_OK);
        kv_stack_clear_returns(&s);
    }
    assert_int_equal(g_runs[VB], 5);
    assert_int_equal(g_runs[VA] + g_runs[VC], 0);
    assert_int_equal(kv_tune_stats_of(op, KV_KEY_CPU).tunings, 1);
    g_c_refuses = false;
    kv_tensor_release(t);
}

/* ---- analyse once: the predicate's analysis reaches the kernel ---- */

static int g_analyses, g_stash_taken;
static const char g_stash_kind = 0;
typedef struct fake_analysis {
    int64_t numel;
} fake_analysis;

static bool stash_pred(const kv_op *op, const kv_stack *s) {
    fake_analysis local, *a = kv_tune_stash_buffer(op, s, sizeof *a);
    if (a == NULL) a = &local;
    g_analyses++;
    a->numel = kv_tensor_numel(kv_arg_tensor(s, 0));
    if (a != &local) kv_tune_stash_fill(op, s, &g_stash_kind);
    return true;
}

static kv_status stash_kernel(const kv_op *op, kv_keyset ks, kv_stack *s) {
    const fake_analysis *a = kv_tune_stash_take(op, s, &g_stash_kind);
    if (a != NULL) {
        g_stash_taken++;
        if (a->numel != kv_tensor_numel(kv_arg_tensor(s, 0))) return KV_ERR_INTERNAL;
    } else {
        g_analyses++;
    }
    return ks == 0 ? KV_ERR_INTERNAL : var_b(op, ks, s);
}

static void test_analyse_once_on_cache_hit(void **state) {
    (void)state;
    static const kv_op *op;
    if (op == NULL) {
        assert_int_equal(kv_op_register("kvtt.once(Tensor self) -> Tensor", &op), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.once", KV_KEY_CPU, "A", var_a, NULL), KV_OK);
        assert_int_equal(kv_tune_register_variant("kvtt.once", KV_KEY_CPU, "S", stash_kernel, stash_pred), KV_OK);
    }
    variants_reset(100, 10, 10); /* S (which runs B's cost) wins */
    kv_tensor *t = tensor2(3, 4, KV_F32);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    assert_int_equal(kv_call(op, &s), KV_OK);
    kv_stack_clear_returns(&s);
    /* Tuning: every run the tuner makes of S is the call a cache hit
     * makes (the predicate's analysis taken by the kernel); the deciding
     * call itself, whose predicates all ran, finds no stash. */
    assert_true(g_runs[VB] > 2);
    assert_int_equal(g_stash_taken, g_runs[VB] - 1);
    g_stash_taken = 0;
    g_analyses = 0;
    for (int i = 0; i < 4; i++) {
        s = kv_stack_on(slots, KV_STACK_MAX);
        kv_push_tensor(&s, t);
        assert_int_equal(kv_call(op, &s), KV_OK);
        kv_stack_clear_returns(&s);
    }
    /* Cache hits: one analysis per call (the predicate's), taken by the kernel. */
    assert_int_equal(g_analyses, 4);
    assert_int_equal(g_stash_taken, 4);
    /* Called directly, the same call: one analysis, taken by the kernel
     * (what kvrun's perf mode times is what a dispatch pays). */
    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    assert_int_equal(kv_tune_call_variant(op, KV_KEY_CPU, "S", &s), KV_OK);
    kv_stack_clear_returns(&s);
    assert_int_equal(g_stash_taken, 5);
    assert_int_equal(g_analyses, 5);
    kv_tensor_release(t);
}

/* ---- re-tuning: by calls, by time, and its own warm-up ---- */

static void test_retune_by_elapsed_time(void **state) {
    (void)state;
    kv_tune_config c = { 1, 5, 0, true, 1000, 1, 0 }; /* no count trigger; 1 s */
    assert_int_equal(kv_tune_config_set(&c), KV_OK);
    kv_tensor *t = tensor2(3, 3, KV_F32);
    assert_int_equal(call_a(t), KV_OK); /* call 1 tunes */
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    /* Calls up to the 63rd do not look at the clock, however late. */
    g_now += 5000000000ull;
    for (int i = 2; i <= 63; i++) assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    /* The 64th does, and 5 s > 1 s: re-tuned, and the count starts over. */
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 2);
    /* Soon after, 64 more calls (the fake clock moves by the runs' costs
     * only, far less than 1 s): no re-tuning. */
    for (int i = 0; i < 64; i++) assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 2);
    c.retune_ms = -1;
    assert_int_equal(kv_tune_config_set(&c), KV_ERR_INVALID_ARG);
    kv_tensor_release(t);
}

static void test_first_warmup_separate_from_rewarmup(void **state) {
    (void)state;
    kv_tune_config c = { 3, 1, 2, true, 0, 0, 0 }; /* first: 3 warm-up runs; re-tune: none */
    assert_int_equal(kv_tune_config_set(&c), KV_OK);
    kv_tensor *t = tensor2(4, 3, KV_F32);
    /* First evaluation: 3 warm-up runs, then a lead-in and a timed run
     * each; then B runs the call. */
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VA], 5);
    assert_int_equal(g_runs[VC], 5);
    assert_int_equal(g_runs[VB], 6);
    assert_int_equal(call_a(t), KV_OK); /* call 2: cached */
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(t), KV_OK); /* call 3: re-evaluation, 0 + 2 runs each */
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 2);
    assert_int_equal(g_runs[VA], 2);
    assert_int_equal(g_runs[VC], 2);
    assert_int_equal(g_runs[VB], 3);
    c.rewarmup = -1;
    assert_int_equal(kv_tune_config_set(&c), KV_ERR_INVALID_ARG);
    kv_tensor_release(t);
}

static void test_per_op_settings(void **state) {
    (void)state;
    /* Global: never re-tune; kvtt.a alone re-tunes after 2 calls. */
    kv_tune_config c = { 1, 5, 0, true, 0, 1, 0 }, mine = c;
    assert_int_equal(kv_tune_config_set(&c), KV_OK);
    mine.retune_after = 2;
    assert_int_equal(kv_tune_op_config_set(g_op, &mine), KV_OK);
    assert_int_equal(kv_tune_op_config_get(g_op).retune_after, 2);
    assert_int_equal(kv_tune_op_config_get(g_op_ip).retune_after, 0);
    kv_tensor *t = tensor2(2, 5, KV_F32);
    for (int i = 0; i < 5; i++) assert_int_equal(call_a(t), KV_OK); /* tunes at calls 1, 3 and 5 */
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 3);
    kv_ivalue slots[KV_STACK_MAX];
    for (int i = 0; i < 5; i++) {
        kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
        kv_push_tensor(&s, t);
        assert_int_equal(kv_call(g_op_ip, &s), KV_OK);
        kv_stack_clear_returns(&s);
    }
    assert_int_equal(kv_tune_stats_of(g_op_ip, KV_KEY_CPU).tunings, 1);
    /* An op registered after its setting gets it too. */
    const kv_op *late = NULL;
    assert_int_equal(kv_op_register("kvtt.lateset(Tensor self) -> Tensor", &late), KV_OK);
    mine.reps = 3;
    assert_int_equal(kv_tune_op_config_set(late, &mine), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.lateset", KV_KEY_CPU, "A", var_a, NULL), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.lateset", KV_KEY_CPU, "B", var_b, NULL), KV_OK);
    variants_reset(20, 10, 50); /* A within 8 times B: timed every round */
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    assert_int_equal(kv_call(late, &s), KV_OK);
    kv_stack_clear_returns(&s);
    assert_int_equal(g_runs[VA], 1 + 3 * 2); /* its own reps (lead-in + timed), not the global 5 */
    /* NULL puts an op back on the global settings; bad ones are refused. */
    assert_int_equal(kv_tune_op_config_set(g_op, NULL), KV_OK);
    assert_int_equal(kv_tune_op_config_get(g_op).retune_after, 0);
    mine.reps = 0;
    assert_int_equal(kv_tune_op_config_set(g_op, &mine), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tune_op_config_set(NULL, &c), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tune_op_config_set(late, NULL), KV_OK);
    kv_tensor_release(t);
}

static void test_tuning_off_and_single_compatible(void **state) {
    (void)state;
    kv_tune_config c = kv_tune_config_get();
    c.tuning = false;
    assert_int_equal(kv_tune_config_set(&c), KV_OK);
    kv_tensor *t = tensor2(2, 2, KV_F32), *d = tensor2(2, 2, KV_F64);
    /* No timing: the last-registered compatible variant. */
    assert_string_equal(choice_for(t), "C");
    assert_string_equal(choice_for(d), "B");
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 0);
    kv_tensor_release(t);
    kv_tensor_release(d);
}

static void test_tuning_never_touches_mutable_args(void **state) {
    (void)state;
    kv_tensor *t = tensor2(1, 3, KV_F32);
    float *p = kv_tensor_data(t);
    p[0] = p[1] = p[2] = 0.0f;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    g_inplace_runs = 0;
    assert_int_equal(kv_call(g_op_ip, &s), KV_OK);
    kv_stack_clear_returns(&s);
    /* Two variants were timed on copies; the caller's tensor was written once. */
    assert_true(g_inplace_runs > 2);
    assert_true(p[0] == 1.0f && p[1] == 1.0f && p[2] == 1.0f);
    kv_tensor_release(t);
}

/* ---- the log ---- */

#define LOG_MAX 8
static char g_lines[LOG_MAX][512];
static int g_nlines;
static void sink(void *ctx, const char *line) {
    (void)ctx;
    if (g_nlines < LOG_MAX) snprintf(g_lines[g_nlines], sizeof g_lines[0], "%s", line);
    g_nlines++;
}

static void test_log_format(void **state) {
    (void)state;
    g_nlines = 0;
    kv_tune_set_log_sink(sink, NULL);
    kv_tune_log_set_enabled(true);
    kv_tensor *t = tensor2(2, 3, KV_F32), *d = tensor2(2, 3, KV_F64);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(call_a(t), KV_OK); /* cached: no new line */
    assert_int_equal(g_nlines, 1);
    assert_string_equal(g_lines[0],
                        "perf_dispatch: kvtt.a CPU (f32[2,3]:[3,1]) -> B [tuned, 3 of 3 compatible: A=100ns B=10ns "
                        "C=50ns]");
    assert_int_equal(kv_tune_force_set("kvtt.a:A"), KV_OK);
    assert_int_equal(call_a(d), KV_OK);
    assert_string_equal(g_lines[1], "perf_dispatch: kvtt.a CPU (f64[2,3]:[3,1]) -> A [forced, 2 of 3 compatible]");
    /* One compatible variant is used at once. */
    assert_int_equal(kv_tune_force_set(NULL), KV_OK);
    assert_int_equal(kv_tune_unregister_all("kvtt.a", KV_KEY_CPU), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "A", var_a, NULL), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "C", var_c, pred_f32), KV_OK);
    assert_int_equal(call_a(d), KV_OK);
    assert_string_equal(g_lines[2], "perf_dispatch: kvtt.a CPU (f64[2,3]:[3,1]) -> A [only, 1 of 2 compatible]");
    /* Lazy bits and lists print too. */
    kv_tensor *n = kv__neg_view(t);
    assert_non_null(n);
    char geo[256];
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, n);
    kv_push_none(&s);
    kv_tune_geometry_format(kv_op_find("clamp.Tensor"), &s, geo, sizeof geo);
    assert_string_equal(geo, "(f32[2,3]:[3,1]+neg, None)");
    kv_tensor_release(n);
    /* Restore kvtt.a's three variants for the other tests. */
    assert_int_equal(kv_tune_unregister_all("kvtt.a", KV_KEY_CPU), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "A", var_a, NULL), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "B", var_b, NULL), KV_OK);
    assert_int_equal(kv_tune_register_variant("kvtt.a", KV_KEY_CPU, "C", var_c, pred_f32), KV_OK);
    kv_tensor_release(t);
    kv_tensor_release(d);
}

/* ---- pins and reference mode ---- */

/* A dispatch checks one thread-local flag for "a pin or a mode is on"
 * before the tuner's cache: a mode or pin set after a cached hit must be
 * seen by the next call, and clearing them must bring the cached choice
 * back without re-tuning. */
static void test_modes_seen_after_cached_hit(void **state) {
    (void)state;
    kv_tensor *t = tensor2(2, 2, KV_F32);
    assert_int_equal(call_a(t), KV_OK); /* tuned: B */
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(t), KV_OK); /* a cache hit */
    assert_int_equal(g_runs[VB], 1);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).cache_hits, 1);
    assert_false(kv_tune_reference_mode_set(true));
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VA], 1);
    assert_true(kv_tune_reference_mode_set(false));
    assert_int_equal(kv_tune_pin(g_op, KV_KEY_CPU, "C"), KV_OK);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VC], 1);
    assert_int_equal(kv_tune_pin(NULL, KV_KEY_CPU, NULL), KV_OK);
    assert_false(kv_tune_untimed_mode_set(true));
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VC], 2); /* untimed: the last compatible one */
    assert_true(kv_tune_untimed_mode_set(false));
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VB], 2); /* the cached choice again */
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 1);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).cache_hits, 2);
    kv_tensor_release(t);
}

static void test_pin_and_reference_mode(void **state) {
    (void)state;
    kv_tensor *t = tensor2(2, 2, KV_F32), *d = tensor2(2, 2, KV_F64);
    assert_int_equal(kv_tune_pin(g_op, KV_KEY_CPU, "C"), KV_OK);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VC], 1);
    assert_int_equal(kv_tune_stats_of(g_op, KV_KEY_CPU).tunings, 0);
    assert_int_equal(call_a(d), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "pinned"));
    assert_int_equal(kv_tune_pin(g_op, KV_KEY_CPU, "nope"), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_tune_pin(NULL, KV_KEY_CPU, NULL), KV_OK);
    /* Reference mode: "ref" where there is one, else the first variant. */
    assert_false(kv_tune_reference_mode_set(true));
    memset(g_runs, 0, sizeof g_runs);
    assert_int_equal(call_a(t), KV_OK);
    assert_int_equal(g_runs[VA], 1);
    const int64_t n = 3;
    const float v[3] = { 1.0f, -2.0f, 0.5f };
    kv_tensor *x = kv_tensor_from_data(v, &n, 1, KV_F32);
    kv_tensor *y = kv_neg(x);
    assert_non_null(y);
    assert_true(((float *)kv_tensor_data(y))[1] == 2.0f);
    assert_true(kv_tune_reference_mode_set(false));
    kv_tensor_release(x);
    kv_tensor_release(y);
    kv_tensor_release(t);
    kv_tensor_release(d);
}

/* ---- thread safety ---- */

static void *thread_body(void *arg) {
    const int id = (int)(intptr_t)arg;
    const int64_t n = 64 + id;
    float buf[80];
    for (int i = 0; i < n; i++) buf[i] = (float)(i - id);
    kv_tensor *x = kv_tensor_from_data(buf, &n, 1, KV_F32);
    intptr_t bad = 0;
    for (int it = 0; it < 200 && x; it++) {
        kv_tensor *y = it % 2 ? kv_relu(x) : kv_neg(x);
        if (y == NULL) {
            bad++;
            continue;
        }
        const float *p = kv_tensor_data(y);
        for (int i = 0; i < n; i++) {
            const float want = it % 2 ? (buf[i] < 0 ? 0.0f : buf[i]) : -buf[i];
            if (p[i] != want) bad++;
        }
        kv_tensor_release(y);
    }
    kv_tensor_release(x);
    return (void *)bad;
}

static void test_threads_smoke(void **state) {
    (void)state;
    /* Real timing here: the fake clock is not thread-safe by design. */
    kv_tune_set_clock(NULL, NULL);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_body, (void *)(intptr_t)i), 0);
    for (int i = 0; i < 4; i++) {
        void *bad = NULL;
        pthread_join(th[i], &bad);
        assert_int_equal((intptr_t)bad, 0);
    }
    const kv_tune_stats st = kv_tune_stats_of(kv_op_find("neg"), KV_KEY_CPU);
    assert_int_equal(st.calls, 400);
    assert_true(st.tunings >= 4 && st.tunings <= 8);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--env-child") == 0) return env_child(argv[2]);
    /* Re-executed for the environment tests (argv[0] also works under valgrind). */
    if (argc > 0 && strchr(argv[0], '/') != NULL) g_self = argv[0];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_force_whitespace_and_empty_entries, reset),
        cmocka_unit_test_setup(test_force_missing_colon, reset),
        cmocka_unit_test_setup(test_force_two_colons, reset),
        cmocka_unit_test_setup(test_force_unknown_op, reset),
        cmocka_unit_test_setup(test_force_unknown_variant, reset),
        cmocka_unit_test_setup(test_forced_incompatible_is_call_error, reset),
        cmocka_unit_test_setup(test_force_environment, reset),
        cmocka_unit_test_setup(test_force_unknown_op_does_not_poison, reset),
        cmocka_unit_test_setup(test_force_late_registration, reset),
        cmocka_unit_test_setup(test_force_question_mark_returns, reset),
        cmocka_unit_test_setup(test_settings_environment, reset),
        cmocka_unit_test_setup(test_kvrun_force, reset),
        cmocka_unit_test_setup(test_discovery, reset),
        cmocka_unit_test_setup(test_direct_call_and_compat, reset),
        cmocka_unit_test_setup(test_tuning_picks_fastest_and_caches, reset),
        cmocka_unit_test_setup(test_untimed_mode_ignores_timing_cache_and_force, reset),
        cmocka_unit_test_setup(test_tuning_median_and_ties, reset),
        cmocka_unit_test_setup(test_timed_run_includes_the_predicate, reset),
        cmocka_unit_test_setup(test_timed_run_follows_its_own_variant, reset),
        cmocka_unit_test_setup(test_hopeless_variant_screening_samples_dropped, reset),
        cmocka_unit_test_setup(test_close_call_timed_again, reset),
        cmocka_unit_test_setup(test_retune_after_n_calls, reset),
        cmocka_unit_test_setup(test_geometry_scalars_only_when_declared, reset),
        cmocka_unit_test_setup(test_cache_key_has_the_dtype, reset),
        cmocka_unit_test_setup(test_cached_choice_refused_uses_ranking, reset),
        cmocka_unit_test_setup(test_analyse_once_on_cache_hit, reset),
        cmocka_unit_test_setup(test_retune_by_elapsed_time, reset),
        cmocka_unit_test_setup(test_first_warmup_separate_from_rewarmup, reset),
        cmocka_unit_test_setup(test_per_op_settings, reset),
        cmocka_unit_test_setup(test_tuning_off_and_single_compatible, reset),
        cmocka_unit_test_setup(test_tuning_never_touches_mutable_args, reset),
        cmocka_unit_test_setup(test_log_format, reset),
        cmocka_unit_test_setup(test_modes_seen_after_cached_hit, reset),
        cmocka_unit_test_setup(test_pin_and_reference_mode, reset),
        cmocka_unit_test_setup(test_threads_smoke, reset),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
