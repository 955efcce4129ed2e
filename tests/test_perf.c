/* kvrun --mode=perf (runner/perf.h): structure, never speed. Test ops
 * kvpt.* (registered at run time) have variants that advance a fake clock
 * by costs the test sets, so medians, minimums, speedups, the tuner's
 * choice and the within-5% verdict are known exactly. Also: the case
 * grammar refuses mode=perf, and kvrun's flag handling. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/kv.h"
#include "runner/case/expand.h"
#include "runner/exec/perf.h"

/* ---- the fake clock and the variants ---- */

static uint64_t g_now;
static uint64_t fake_clock(void *ctx) {
    (void)ctx;
    return g_now;
}

enum { V_REF, V_FAST, V_SLOW, V_F64, V_N };
/* Costs by call number, period 5: with reps a multiple of 5 the timed
 * calls are whole periods wherever they start, so the tuner's runs and
 * the warm-up before them do not change the median. */
static const uint64_t k_cost[V_N][5] = {
    { 400, 400, 400, 400, 400 },
    { 300, 100, 200, 50, 900 }, /* sorted 50 100 200 300 900: median 200, min 50 */
    { 800, 800, 800, 800, 800 },
    { 1, 1, 1, 1, 1 },
};
static int g_runs[V_N];

static kv_status run_variant(int v, kv_stack *stack) {
    g_now += k_cost[v][g_runs[v]++ % 5];
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *out = kv_tensor_empty(self->sizes, self->ndim, self->dtype, KV_DEVICE_CPU0);
    if (out == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

#define VARIANT(fn, v)                                                \
    static kv_status fn(const kv_op *op, kv_keyset ks, kv_stack *s) { \
        (void)op;                                                     \
        (void)ks;                                                     \
        return run_variant(v, s);                                     \
    }
VARIANT(var_ref, V_REF)
VARIANT(var_fast, V_FAST)
VARIANT(var_slow, V_SLOW)
VARIANT(var_f64, V_F64)

static bool pred_f64(const kv_op *op, const kv_stack *s) {
    (void)op;
    const kv_tensor *t = kv_arg_tensor(s, 0);
    return t && t->dtype == KV_F64;
}

/* kvpt.b's second variant accepts every call and fails. */
static kv_status var_broken(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    (void)s;
    g_now += 5;
    return kv_error(KV_ERR_INTERNAL, "kvpt.b: variant 'broken' always fails");
}

/* kvpt.c: two variants with costs a test sets, for the 5% boundary. */
static uint64_t g_c_cost[2];
/* A stretch of kvpt.c calls (by number) during which the machine runs 3
 * times slower, as when another process takes the core. */
static int g_c_calls, g_c_slow_from, g_c_slow_to;
static char g_c_order[128];
static kv_status c_run(int v, kv_stack *s) {
    g_c_calls++;
    const bool slow = g_c_calls >= g_c_slow_from && g_c_calls <= g_c_slow_to;
    g_now += slow ? 3 * g_c_cost[v] : g_c_cost[v];
    if (g_c_calls < (int)sizeof g_c_order) g_c_order[g_c_calls - 1] = v ? 'x' : 'r';
    kv_tensor *self = kv_arg_tensor(s, 0);
    kv_tensor_retain(self);
    kv_stack_return_tensor(s, self);
    return KV_OK;
}
static kv_status var_c_ref(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    return c_run(0, s);
}
static kv_status var_c_x(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    return c_run(1, s);
}

static int setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    const kv_op *op;
    if (kv_op_register("kvpt.a(Tensor self) -> Tensor", &op) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.a", KV_KEY_CPU, "ref", var_ref, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.a", KV_KEY_CPU, "fast", var_fast, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.a", KV_KEY_CPU, "slow", var_slow, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.a", KV_KEY_CPU, "f64only", var_f64, pred_f64) != KV_OK) return -1;
    if (kv_op_register("kvpt.b(Tensor self) -> Tensor", &op) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.b", KV_KEY_CPU, "ref", var_ref, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.b", KV_KEY_CPU, "broken", var_broken, NULL) != KV_OK) return -1;
    if (kv_op_register("kvpt.c(Tensor self) -> Tensor", &op) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.c", KV_KEY_CPU, "ref", var_c_ref, NULL) != KV_OK) return -1;
    if (kv_tune_register_variant("kvpt.c", KV_KEY_CPU, "x", var_c_x, NULL) != KV_OK) return -1;
    return 0;
}

static int reset(void **state) {
    (void)state;
    kv_tune_set_clock(fake_clock, NULL);
    kv_tune_config c = { 1, 5, 0, true, 0, 1, 0 };
    if (kv_tune_config_set(&c) != KV_OK) return -1;
    if (kv_tune_force_set(NULL) != KV_OK) return -1;
    kv_tune_cache_clear();
    memset(g_runs, 0, sizeof g_runs);
    return 0;
}

static void fake_options(kv_perf_options *o, int warmup, int reps) {
    kv_perf_options_init(o);
    o->warmup = warmup;
    o->reps = reps;
    o->clock = fake_clock;
}

static void load_cases(const char *text, kv_case_list *out) {
    memset(out, 0, sizeof *out);
    if (kv_cases_from_text("test_perf", text, out) != KV_OK) fail_msg("%s", kv_last_error_message());
}

static const kv_perf_row *row_named(const kv_perf_report *r, const char *variant) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->rows[i].variant, variant) == 0) return &r->rows[i];
    return NULL;
}

/* ---- measurement ---- */

static void test_defaults(void **state) {
    (void)state;
    kv_perf_options o;
    kv_perf_options_init(&o);
    assert_int_equal(o.warmup, 3);
    assert_int_equal(o.reps, 15);
    assert_null(o.clock);
    assert_null(o.report_dir);
}

static void test_rows_exact(void **state) {
    (void)state;
    kv_case_list cases;
    load_cases("--op=kvpt.a --dtype=f32 --shape=4x5\n", &cases);
    assert_int_equal(cases.n, 1);
    kv_perf_options o;
    fake_options(&o, 2, 10);
    kv_perf_report r = { 0 };
    assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_OK);
    /* f64only refuses f32: three rows, in registration order. */
    assert_int_equal(r.n, 3);
    assert_string_equal(r.rows[0].variant, "ref");
    assert_string_equal(r.rows[1].variant, "fast");
    assert_string_equal(r.rows[2].variant, "slow");
    assert_null(row_named(&r, "f64only"));
    assert_int_equal(g_runs[V_F64], 0);
    /* Perf calls per variant: 2 warm-up + 10 timed, after the tuner's
     * 1 warm-up + 5 samples of a lead-in and a timed run (kv_tune_choice
     * tunes the uncached geometry; no variant is 8 times the best, and
     * the samples' quartiles do not meet: no close call). */
    assert_int_equal(g_runs[V_REF], 11 + 12);
    assert_int_equal(g_runs[V_SLOW], 11 + 12);
    const kv_perf_row *ref = row_named(&r, "ref"), *fast = row_named(&r, "fast"), *slow = row_named(&r, "slow");
    assert_int_equal(ref->median_ns, 400);
    assert_int_equal(ref->min_ns, 400);
    assert_int_equal(fast->median_ns, 200);
    assert_int_equal(fast->min_ns, 50);
    assert_int_equal(slow->median_ns, 800);
    assert_int_equal(fast->reps, 10);
    assert_true(ref->speedup == 1.0);
    assert_true(fast->speedup == 2.0);
    assert_true(slow->speedup == 0.5);
    /* Bytes: a 20-element f32 input and a 20-element f32 output. */
    assert_false(fast->is_flops);
    assert_true(fast->work == 160.0);
    /* The tuner (same clock, same costs) picks fast: within 5%. */
    assert_true(fast->chosen && fast->fastest);
    assert_false(ref->chosen || ref->fastest || slow->chosen || slow->fastest);
    for (int i = 0; i < r.n; i++) assert_true(r.rows[i].judged && r.rows[i].within);
    assert_int_equal(r.pairs, 1);
    assert_int_equal(r.judged, 1);
    assert_int_equal(r.within, 1);
    assert_int_equal(r.errors, 0);
    assert_string_equal(r.rows[0].case_id, "kvpt.a(dtype=f32,shape=[4,5])");
    assert_string_equal(r.rows[0].op, "kvpt.a");
    assert_int_equal(r.rows[0].backend, KV_KEY_CPU);
    kv_perf_report_free(&r);
    kv_case_list_free(&cases);
}

/* A forced choice is the tuner's answer: slow is 4x the fastest median. */
static void test_choice_not_within(void **state) {
    (void)state;
    assert_int_equal(kv_tune_force_set("kvpt.a:slow"), KV_OK);
    kv_case_list cases;
    load_cases("--op=kvpt.a --dtype=f64 --shape=3\n", &cases);
    kv_perf_options o;
    fake_options(&o, 0, 5);
    kv_perf_report r = { 0 };
    assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_OK);
    assert_int_equal(r.n, 4); /* f64: f64only takes part, and is fastest (1 ns) */
    const kv_perf_row *slow = row_named(&r, "slow"), *f64 = row_named(&r, "f64only");
    assert_true(slow->chosen && !slow->fastest);
    assert_true(f64->fastest && !f64->chosen);
    assert_int_equal(f64->median_ns, 1);
    assert_true(f64->speedup == 400.0);
    assert_true(slow->judged && !slow->within);
    assert_int_equal(r.judged, 1);
    assert_int_equal(r.within, 0);
    assert_true(row_named(&r, "ref")->work == 48.0); /* 3 f64 in, 3 out */
    kv_perf_report_free(&r);
    kv_case_list_free(&cases);
}

/* Within 5% means chosen <= 1.05 * fastest: 5% slower still counts,
 * 6% does not. The choice is forced to the slower "ref". */
static void test_within_boundary(void **state) {
    (void)state;
    static const struct {
        uint64_t ref, x;
        bool within;
    } k[] = {
        { 105, 100, true }, { 106, 100, false }, { 100, 100, true }, { 2100, 2000, true }, { 2101, 2000, false },
    };
    kv_case_list cases;
    load_cases("--op=kvpt.c --dtype=f32 --shape=2\n", &cases);
    kv_perf_options o;
    fake_options(&o, 0, 3);
    assert_int_equal(kv_tune_force_set("kvpt.c:ref"), KV_OK);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        g_c_cost[0] = k[i].ref;
        g_c_cost[1] = k[i].x;
        kv_perf_report r = { 0 };
        assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_OK);
        assert_int_equal(r.n, 2);
        assert_true(r.rows[0].chosen);
        assert_int_equal(r.judged, 1);
        if (r.within != (int)k[i].within) fail_msg("ref %d vs x %d: within %d", (int)k[i].ref, (int)k[i].x, r.within);
        /* On a tie the earlier variant is the fastest. */
        assert_true(r.rows[k[i].ref == k[i].x ? 0 : 1].fastest);
        kv_perf_report_free(&r);
    }
    kv_case_list_free(&cases);
}

/* --perf-interleave: the variants in rounds, so a slow stretch of the
 * machine hits all of them alike (a hopeless one is timed in a row). Both variants cost 100; calls 13 to 24
 * run 3 times slower. In a row (2 warm-up + 10 timed calls each), ref
 * takes calls 1-12 and x 13-24: x reads 300 and the pair is judged a
 * miss. In rounds (each an untimed and a timed call per variant), the
 * stretch covers 3 timed calls of each: both medians 100, within 5%. */
static void test_interleave_rounds(void **state) {
    (void)state;
    kv_case_list cases;
    load_cases("--op=kvpt.c --dtype=f32 --shape=3\n", &cases);
    const kv_op *op = kv_op_find("kvpt.c");
    kv_tune_config off = kv_tune_config_get();
    off.tuning = false; /* no timed runs before the measurement: the choice is x, the last */
    assert_int_equal(kv_tune_op_config_set(op, &off), KV_OK);
    g_c_cost[0] = g_c_cost[1] = 100;
    kv_perf_options o;
    fake_options(&o, 2, 10);
    for (int interleave = 0; interleave < 2; interleave++) {
        o.interleave = interleave;
        g_c_calls = 0;
        g_c_slow_from = 13;
        g_c_slow_to = 24;
        memset(g_c_order, 0, sizeof g_c_order);
        kv_perf_report r = { 0 };
        assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_OK);
        assert_int_equal(r.n, 2);
        assert_true(r.rows[1].chosen);
        assert_int_equal(r.rows[0].reps, 10);
        assert_int_equal(r.rows[1].reps, 10);
        assert_int_equal(r.rows[0].median_ns, 100);
        assert_int_equal(r.rows[1].median_ns, interleave ? 100 : 300);
        assert_int_equal(r.within, interleave);
        assert_int_equal(g_c_calls, interleave ? 2 * (2 + 2 * 10) : 2 * (2 + 10));
        /* Warm-ups first, then per round: ref untimed, timed, x untimed, timed. */
        assert_memory_equal(g_c_order, interleave ? "rrxxrrxxrr" : "rrrrrrrrrrrrxx", interleave ? 10 : 14);
        kv_perf_report_free(&r);
    }
    /* A variant more than 8 times the fastest (in its last warm-up call)
     * is timed in a row after the rounds, not between the others' calls. */
    g_c_slow_from = g_c_slow_to = 0;
    g_c_cost[0] = 1000;
    g_c_calls = 0;
    memset(g_c_order, 0, sizeof g_c_order);
    o.interleave = true;
    kv_perf_report r = { 0 };
    assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_OK);
    assert_int_equal(r.rows[0].median_ns, 1000);
    assert_int_equal(r.rows[1].median_ns, 100);
    assert_int_equal(r.rows[0].reps, 10);
    assert_memory_equal(g_c_order, "rrxxxxxxxxxxxxxxxxxxxxxxrrrrrrrrrr", 34);
    kv_perf_report_free(&r);
    assert_int_equal(kv_tune_op_config_set(op, NULL), KV_OK);
    kv_case_list_free(&cases);
}

static char *read_all(FILE *f) {
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)n + 1, 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    return buf;
}

static void test_skips(void **state) {
    (void)state;
    kv_case_list cases;
    load_cases("--op=kvpt.a --dtype=f32 --shape=4 --device=accel\n"
               "--op=add.Tensor --dtype=f32 --shape=2x3:4x5 --expect=shape\n",
               &cases);
    assert_int_equal(cases.n, 2);
    kv_perf_options o;
    fake_options(&o, 0, 1);
    kv_perf_report r = { 0 };
    FILE *notes = tmpfile();
    assert_non_null(notes);
    for (int i = 0; i < cases.n; i++) assert_int_equal(kv_perf_case(&o, &cases.items[i], &r, notes), KV_OK);
    char *text = read_all(notes);
    assert_int_equal(r.n, 0);
    assert_int_equal(r.skipped, 2);
    assert_non_null(strstr(text, "perf: SKIP kvpt.a(dtype=f32,shape=[4],device=accel): device=accel"));
    assert_non_null(strstr(text, "expect=shape"));
    free(text);
    fclose(notes);
    /* Options out of range are an error, not a run. */
    o.reps = 0;
    assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_ERR_INVALID_ARG);
    kv_perf_report_free(&r);
    kv_case_list_free(&cases);
}

/* ---- kv_perf_run: the reports, the console, the exit code ---- */

static char g_dir[64];

static int make_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/kv_test_perf_XXXXXX");
    return mkdtemp(g_dir) ? reset(state) : -1;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static json_t *jsonl_line(const char *path, int want, int *count) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    json_t *hit = NULL;
    *count = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *o = json_loads(line, 0, &e);
        if (o == NULL) fail_msg("%s: line %d is not JSON: %s", path, *count + 1, e.text);
        if ((*count)++ == want) hit = o;
        else json_decref(o);
    }
    fclose(f);
    return hit;
}

static void test_run_reports(void **state) {
    (void)state;
    kv_case_list cases;
    load_cases("--op=kvpt.a --dtype=f32 --shape=4x5\n--op=kvpt.b --dtype=f32 --shape=8\n", &cases);
    const kv_case *sel[2] = { &cases.items[0], &cases.items[1] };
    kv_perf_options o;
    fake_options(&o, 1, 5);
    o.report_dir = g_dir;
    FILE *out = tmpfile();
    assert_non_null(out);
    /* kvpt.b's broken variant accepted the call and failed: exit 1. */
    assert_int_equal(kv_perf_run(&o, sel, 2, out), 1);
    char *text = read_all(out);
    fclose(out);
    assert_non_null(strstr(text, "variant 'broken' accepted the call and failed"));
    assert_non_null(strstr(text, "tuner picked within 5% of the fastest in 1 of 1 cases (100%)"));
    assert_non_null(strstr(text, "  * fast "));
    free(text);

    char path[128];
    snprintf(path, sizeof path, "%s/perf.jsonl", g_dir);
    int n = 0;
    json_t *fast = jsonl_line(path, 1, &n);
    assert_int_equal(n, 5); /* kvpt.a: ref, fast, slow; kvpt.b: ref, broken */
    static const char *const fields[] = { "case_id", "op",     "backend", "variant", "median_ns",  "min_ns",
                                          "reps",    "gbps",   "speedup", "chosen",  "fastest",    "within_5pct" };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (json_object_get(fast, fields[i]) == NULL) fail_msg("perf.jsonl: no field '%s'", fields[i]);
    assert_string_equal(json_string_value(json_object_get(fast, "variant")), "fast");
    assert_string_equal(json_string_value(json_object_get(fast, "backend")), "CPU");
    assert_string_equal(json_string_value(json_object_get(fast, "case_id")), "kvpt.a(dtype=f32,shape=[4,5])");
    assert_int_equal(json_integer_value(json_object_get(fast, "median_ns")), 200);
    assert_int_equal(json_integer_value(json_object_get(fast, "min_ns")), 50);
    assert_int_equal(json_integer_value(json_object_get(fast, "reps")), 5);
    assert_true(json_real_value(json_object_get(fast, "gbps")) == 0.8); /* 160 bytes / 200 ns */
    assert_true(json_real_value(json_object_get(fast, "speedup")) == 2.0);
    assert_true(json_is_true(json_object_get(fast, "chosen")));
    assert_true(json_is_true(json_object_get(fast, "fastest")));
    assert_true(json_is_true(json_object_get(fast, "within_5pct")));
    assert_null(json_object_get(fast, "gflops"));
    assert_null(json_object_get(fast, "error"));
    json_decref(fast);
    json_t *broken = jsonl_line(path, 4, &n);
    assert_string_equal(json_string_value(json_object_get(broken, "variant")), "broken");
    assert_non_null(strstr(json_string_value(json_object_get(broken, "error")), "always fails"));
    assert_true(json_is_null(json_object_get(broken, "median_ns")));
    assert_true(json_is_null(json_object_get(broken, "speedup")));
    assert_true(json_is_false(json_object_get(broken, "chosen")));
    /* One timed variant: no choice to judge. */
    assert_true(json_is_null(json_object_get(broken, "within_5pct")));
    json_decref(broken);

    snprintf(path, sizeof path, "%s/perf.html", g_dir);
    FILE *h = fopen(path, "r");
    assert_non_null(h);
    fseek(h, 0, SEEK_END);
    char *html = read_all(h);
    fclose(h);
    assert_non_null(strstr(html, "<h2>kvpt.a</h2>"));
    assert_non_null(strstr(html, "<h2>kvpt.b</h2>"));
    /* the plots are gnuplot's, or say that gnuplot is missing */
    assert_true(strstr(html, "<svg") != NULL || strstr(html, "gnuplot is not installed") != NULL);
    /* absolute times and the verdict in the table, not only in a plot */
    assert_non_null(strstr(html, "<th>median</th><th>fastest</th><th>slowest</th><th>spread</th>"));
    assert_non_null(strstr(html, "<td class=\"num\">2.00x</td><td>chosen, fastest</td>"));
    /* the machine and the repetitions; no roofs under a fake clock */
    assert_non_null(strstr(html, "<tr><th>machine</th>"));
    assert_non_null(strstr(html, "timed calls per variant"));
    assert_non_null(strstr(html, "Not measured in this run (a fake clock"));
    assert_null(strstr(html, "<script"));
    free(html);
    kv_case_list_free(&cases);
}

/* --perf-metric=instructions with a stand-in counter (the fake clock's
 * costs read as instruction counts): the same statistics, perf.jsonl
 * says what was counted and by which source, no rate, no roofs, and the
 * tuner's choice (made by time) is marked but not judged. */
static void test_run_instructions(void **state) {
    (void)state;
    kv_case_list cases;
    load_cases("--op=kvpt.a --dtype=f32 --shape=4x5\n", &cases);
    const kv_case *sel[1] = { &cases.items[0] };
    kv_perf_options o;
    fake_options(&o, 1, 5);
    o.report_dir = g_dir;
    o.metric = KV_PERF_METRIC_INSTRUCTIONS;
    FILE *out = tmpfile();
    assert_non_null(out);
    assert_int_equal(kv_perf_run(&o, sel, 1, out), 0);
    char *text = read_all(out);
    fclose(out);
    assert_non_null(strstr(text, "perf: instructions per call (retired, user space), counted by test"));
    assert_non_null(strstr(text, "not judged"));
    assert_null(strstr(text, "tuner picked within"));
    assert_non_null(strstr(text, "instructions         fewest"));
    free(text);
    char path[128];
    snprintf(path, sizeof path, "%s/perf.jsonl", g_dir);
    int n = 0;
    json_t *fast = jsonl_line(path, 1, &n);
    assert_int_equal(n, 3);
    assert_string_equal(json_string_value(json_object_get(fast, "variant")), "fast");
    assert_string_equal(json_string_value(json_object_get(fast, "metric")), "instructions");
    assert_string_equal(json_string_value(json_object_get(fast, "counter")), "test");
    assert_int_equal(json_integer_value(json_object_get(fast, "median_instructions")), 200);
    assert_int_equal(json_integer_value(json_object_get(fast, "min_instructions")), 50);
    assert_int_equal(json_integer_value(json_object_get(fast, "max_instructions")), 900);
    assert_int_equal(json_array_size(json_object_get(fast, "samples_instructions")), 5);
    assert_null(json_object_get(fast, "median_ns"));
    assert_null(json_object_get(fast, "samples_ns"));
    assert_null(json_object_get(fast, "gbps"));
    assert_true(json_is_null(json_object_get(fast, "within_5pct")));
    assert_true(json_is_true(json_object_get(fast, "fastest")));
    json_decref(fast);
    snprintf(path, sizeof path, "%s/perf.html", g_dir);
    FILE *h = fopen(path, "r");
    assert_non_null(h);
    fseek(h, 0, SEEK_END);
    char *html = read_all(h);
    fclose(h);
    assert_non_null(strstr(html, "instructions per call (retired, user space), counted by test"));
    assert_non_null(strstr(html, "<th>instructions (median)</th>"));
    assert_non_null(strstr(html, "<td class=\"num\">200</td><td class=\"num\">50</td><td class=\"num\">900</td>"));
    assert_null(strstr(html, "<svg"));
    free(html);
    /* Without a stand-in, kv_perf_case needs kv_perf_run's open counter. */
    o.clock = NULL;
    kv_perf_report r = { 0 };
    assert_int_equal(kv_perf_case(&o, &cases.items[0], &r, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "needs an open counter"));
    kv_perf_report_free(&r);
    kv_case_list_free(&cases);
}

/* The callgrind dump's count, and what is refused (runner/exec/icount.h). */
static void test_icount_dump(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/cg.out.1", g_dir);
    static const char *const texts[] = {
        /* valgrind 3.19's dump by client request: summary 0, the count on totals */
        "# callgrind format\nversion: 1\nevents: Ir\nsummary: 0\nfn=(1) f\n0 5\n\ntotals: 30288\n",
        "# callgrind format\nevents: Ir\nsummary: 1234\n",
        "# callgrind format\nevents: Ir\nfn=(1) f\n",
        "not a dump\ntotals: 7\n",
        "# callgrind format\ntotals: 12 34\n",
    };
    static const uint64_t want[] = { 30288, 1234, 0, 0, 0 };
    for (int i = 0; i < 5; i++) {
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(texts[i], f);
        fclose(f);
        uint64_t got = 99;
        const kv_status st = kv_icount_read_dump(path, &got);
        if (want[i] != 0) {
            assert_int_equal(st, KV_OK);
            assert_int_equal(got, want[i]);
        } else {
            assert_int_equal(st, KV_ERR_INVALID_ARG);
            assert_non_null(strstr(kv_last_error_message(), path));
        }
    }
    unlink(path);
    uint64_t got = 0;
    assert_int_equal(kv_icount_read_dump(path, &got), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "callgrind wrote no dump"));
    kv_icount_source s = KV_ICOUNT_AUTO;
    assert_int_equal(kv_icount_source_parse("callgrind", &s), 0);
    assert_int_equal(s, KV_ICOUNT_CALLGRIND);
    assert_int_equal(kv_icount_source_parse("hardware", &s), 0);
    assert_int_equal(s, KV_ICOUNT_HARDWARE);
    assert_int_equal(kv_icount_source_parse("Hardware", &s), -1);
    /* Callgrind counts only under Valgrind: not this test (run natively
     * or under memcheck, which answers no callgrind request). */
    kv_icount c;
    if (getenv(KV_ICOUNT_CALLGRIND_ENV) == NULL) {
        assert_int_equal(kv_icount_open(&c, KV_ICOUNT_CALLGRIND), KV_ERR_INVALID_ARG);
        assert_non_null(strstr(kv_last_error_message(), KV_ICOUNT_CALLGRIND_ENV " is not set"));
    }
    assert_int_equal(kv_icount_open(&c, KV_ICOUNT_AUTO), KV_ERR_INTERNAL);
    /* The hardware counter opens and counts, or says why it cannot. */
    if (kv_icount_open(&c, KV_ICOUNT_HARDWARE) == KV_OK) {
        kv_icount_start(&c);
        uint64_t n = 0;
        assert_int_equal(kv_icount_stop(&c, &n), KV_OK);
        kv_icount_close(&c);
    } else {
        assert_non_null(strstr(kv_last_error_message(), "perf_event_open"));
    }
}

/* ---- the machine limits (runner/exec/limits.h) ----
 * Not a speed goal (those live in kvbench): each limit this CPU supports
 * is measured, its rounds ordered, its rate a positive number; one the
 * CPU lacks is left unmeasured; the machine line names the CPU count. */
static void test_limits_measured(void **state) {
    (void)state;
    kv_limit_stat lim[KV_LIMIT_COUNT];
    assert_int_equal(kv_limits_measure(2, lim), KV_OK);
    for (int w = 0; w < KV_LIMIT_COUNT; w++) {
        assert_int_equal(lim[w].measured, kv_limit_supported((kv_limit)w));
        if (!lim[w].measured) continue;
        assert_int_equal(lim[w].rounds, 2);
        assert_true(lim[w].min > 0 && lim[w].min <= lim[w].median && lim[w].median <= lim[w].max);
        assert_true(strlen(kv_limit_name((kv_limit)w)) > 0);
    }
    assert_true(lim[KV_LIMIT_COPY].measured); /* memcpy needs nothing of the CPU */
    char machine[300];
    kv_limits_machine(machine, (int)sizeof machine);
    assert_non_null(strstr(machine, " online)"));
}

/* ---- the grammar and kvrun ---- */

static void test_grammar_refuses_perf(void **state) {
    (void)state;
    static const char *const lines[] = { "--op=neg --mode=perf\n", "--op=neg --mode=grad+perf\n" };
    for (int i = 0; i < 2; i++) {
        kv_case_list cases = { 0 };
        assert_int_not_equal(kv_cases_from_text("t.case", lines[i], &cases), KV_OK);
        const char *m = kv_last_error_message();
        assert_non_null(strstr(m, "'perf' is not a case mode"));
        assert_non_null(strstr(m, "--mode=perf on the command line"));
        kv_case_list_free(&cases);
    }
}

static int sh(const char *cmd, char *out, size_t cap) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_kvrun(void **state) {
    (void)state;
    if (access("build/kvrun", X_OK) != 0) skip();
    static char out[1 << 16];
    char cmd[512];
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --perf-reps=3 --op=neg 2>&1", out, sizeof out), 2);
    assert_non_null(strstr(out, "--perf-reps needs --mode=perf"));
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --perf-interleave --op=neg 2>&1", out, sizeof out), 2);
    assert_non_null(strstr(out, "--perf-interleave needs --mode=perf"));
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --mode=perf --jobs=2 --op=neg 2>&1", out, sizeof out), 2);
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --mode=perf --perf-reps=0 --op=neg 2>&1", out, sizeof out), 2);
    /* The case option is still a case option; mode=perf in a line is not. */
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --op=neg --shape=3 --mode=grad --list 2>&1", out, sizeof out), 0);
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --op=neg --shape=3 --mode=no_grad+perf 2>&1", out, sizeof out),
                     2);
    assert_non_null(strstr(out, "not a case mode"));
    /* The perf cases are outside the default collection. */
    assert_int_equal(sh("KV_BACKEND_PATH= build/kvrun --mode=perf cases/perf/large.perf --list", out, sizeof out), 0);
    assert_non_null(strstr(out, "mm(dtype=f32,shape=[256,256])"));
    snprintf(cmd, sizeof cmd, "KV_BACKEND_PATH= build/kvrun cases/ --list >%s/all 2>/dev/null; echo rc=$?; %s %s/all",
             g_dir, "grep -c 1048576", g_dir);
    sh(cmd, out, sizeof out);
    assert_string_equal(out, "rc=0\n0\n");
    /* One real (tiny) run: rows for neg on the CPU, ref among them. */
    snprintf(cmd, sizeof cmd,
             "KV_BACKEND_PATH= build/kvrun --mode=perf --op=neg --shape=8 --perf-reps=1 --report-dir=%s/cli", g_dir);
    assert_int_equal(sh(cmd, out, sizeof out), 0);
    assert_non_null(strstr(out, "tuner picked within 5% of the fastest in "));
    char path[128];
    snprintf(path, sizeof path, "%s/cli/perf.jsonl", g_dir);
    int n = 0;
    json_t *ref = jsonl_line(path, 0, &n);
    assert_true(n >= 1);
    assert_string_equal(json_string_value(json_object_get(ref, "variant")), "ref");
    assert_string_equal(json_string_value(json_object_get(ref, "op")), "neg");
    assert_int_equal(json_integer_value(json_object_get(ref, "reps")), 1);
    json_decref(ref);
    /* In rounds: the same rows. */
    snprintf(cmd, sizeof cmd,
             "KV_BACKEND_PATH= build/kvrun --mode=perf --perf-interleave --op=neg --shape=8 --perf-reps=2 "
             "--report-dir=%s/cli2",
             g_dir);
    assert_int_equal(sh(cmd, out, sizeof out), 0);
    snprintf(path, sizeof path, "%s/cli2/perf.jsonl", g_dir);
    ref = jsonl_line(path, 0, &n);
    assert_true(n >= 2);
    assert_string_equal(json_string_value(json_object_get(ref, "variant")), "ref");
    assert_int_equal(json_integer_value(json_object_get(ref, "reps")), 2);
    json_decref(ref);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, reset),
        cmocka_unit_test_setup(test_rows_exact, reset),
        cmocka_unit_test_setup(test_choice_not_within, reset),
        cmocka_unit_test_setup(test_within_boundary, reset),
        cmocka_unit_test_setup(test_interleave_rounds, reset),
        cmocka_unit_test_setup(test_skips, reset),
        cmocka_unit_test_setup_teardown(test_run_reports, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_run_instructions, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_icount_dump, make_dir, remove_dir),
        cmocka_unit_test_setup(test_grammar_refuses_perf, reset),
        cmocka_unit_test(test_limits_measured),
        cmocka_unit_test_setup_teardown(test_kvrun, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
