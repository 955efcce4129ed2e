/* Faults in a backend plugin's kernels are caught and attributed
 * (README "Faults in backend kernels"). tests/plugins/faulty.c misbehaves
 * one way at a time (KV_TEST_FAULT); each test runs build/kvrun against it
 * on a small add.Tensor slice and asserts, from results.jsonl, the status,
 * the check, the backend it is attributed to, the message, and kvrun's
 * exit code. Tests run from the repository root. The runner is
 * build/kvrun, or $KVRUN, so the instrumented builds (tests/configs.sh)
 * test their own; the plugin is the one built next to it. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/wait.h>

#define REPORTS "build/tests/faulty-report"

static const char *kvrun(void) {
    const char *p = getenv("KVRUN");
    return p && p[0] ? p : "build/kvrun";
}

/* tests/faulty/libfaulty.so in the folder of the runner. */
static const char *faulty(void) {
    static char path[1024];
    const char *k = kvrun(), *slash = strrchr(k, '/');
    snprintf(path, sizeof path, "%.*s/tests/faulty/libfaulty.so", slash ? (int)(slash - k) : 1, slash ? k : ".");
    return path;
}

/* One kvrun over the faulty plugin; its exit code, its console output in
 * `console` and its rows in *rows (a JSON array, to json_decref). `fault`
 * may be followed by more VAR=value settings for kvrun's environment. */
static int run_fault(const char *fault, const char *args, char *console, size_t cap, json_t **rows) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf " REPORTS " && KV_TEST_FAULT=%s %s --backend=%s %s --report-dir=" REPORTS " >" REPORTS ".txt 2>&1",
             fault, kvrun(), faulty(), args);
    const int rc = system(cmd);
    FILE *f = fopen(REPORTS ".txt", "r");
    const size_t n = f ? fread(console, 1, cap - 1, f) : 0;
    console[n] = '\0';
    if (f) fclose(f);
    *rows = json_array();
    f = fopen(REPORTS "/results.jsonl", "r");
    if (f != NULL) {
        char line[1 << 16];
        while (fgets(line, sizeof line, f)) {
            json_t *row = json_loads(line, 0, NULL);
            if (row == NULL) fail_msg("results.jsonl: unparseable line: %s", line);
            json_array_append_new(*rows, row);
        }
        fclose(f);
    }
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static const char *str_of(const json_t *row, const char *key) {
    const char *s = json_string_value(json_object_get(row, key));
    return s ? s : "";
}

/* The only row that is not PASS/SKIP/UNSUPPORTED; fails the test unless
 * there is exactly one. */
static const json_t *the_problem(const json_t *rows, const char *console) {
    const json_t *found = NULL;
    int n = 0;
    size_t i;
    const json_t *row;
    json_array_foreach(rows, i, row) {
        const char *st = str_of(row, "status");
        if (strcmp(st, "PASS") && strcmp(st, "SKIP") && strcmp(st, "UNSUPPORTED")) {
            found = row;
            n++;
        }
    }
    if (n != 1) fail_msg("expected exactly one problem row, got %d:\n%s", n, console);
    return found;
}

static void assert_contains(const char *text, const char *needle) {
    if (strstr(text, needle) == NULL) fail_msg("expected \"%s\" in \"%s\"", needle, text);
}

/* The row of check `check` with backend `backend`, or NULL. */
static const json_t *row_of(const json_t *rows, const char *check, const char *backend) {
    size_t i;
    const json_t *row;
    json_array_foreach(rows, i, row) {
        if (strcmp(str_of(row, "check"), check) == 0 && strcmp(str_of(row, "backend"), backend) == 0) return row;
    }
    return NULL;
}

static json_t *g_rows; /* the last expect_problem's rows, for more asserts */

/* A problem row on the plugin's backend (not cpu) with this status, a
 * check starting with `check` and a message holding every `needles`. */
static void expect_problem(const char *fault, const char *args, const char *status, const char *check,
                           const char *const *needles) {
    static char console[1 << 16];
    json_t *rows;
    json_decref(g_rows);
    const int rc = run_fault(fault, args, console, sizeof console, &rows);
    g_rows = rows; /* freed by the next call or at the end, also after a failure */
    if (rc != 1) fail_msg("KV_TEST_FAULT=%s: kvrun exited %d, expected 1:\n%s", fault, rc, console);
    const json_t *p = the_problem(rows, console);
    if (strcmp(str_of(p, "status"), status) != 0)
        fail_msg("KV_TEST_FAULT=%s: status %s, expected %s: %s", fault, str_of(p, "status"), status,
                 str_of(p, "message"));
    if (strncmp(str_of(p, "check"), check, strlen(check)) != 0)
        fail_msg("KV_TEST_FAULT=%s: check %s, expected %s...", fault, str_of(p, "check"), check);
    if (strcmp(str_of(p, "backend"), "cpu") == 0)
        fail_msg("KV_TEST_FAULT=%s: attributed to cpu: %s", fault, str_of(p, "message"));
    for (; *needles; needles++) assert_contains(str_of(p, "message"), *needles);
}

/* After a crash in the plugin, the rerun without it kept the cpu rows. */
static void expect_cpu_rows_survived(void) {
    const json_t *v = row_of(g_rows, "variants:CPU", "cpu"), *m = row_of(g_rows, "memory", "cpu");
    assert_non_null(v);
    assert_non_null(m);
    assert_string_equal(str_of(v, "status"), "PASS");
    assert_string_equal(str_of(m, "status"), "PASS");
}

#define SLICE "--op=add.Tensor --dtype=f32 --shape=4x5"

/* Sanitizer builds run their workers uncapped (isolate.h): nothing to
 * test there. Their runtime also reports a crash itself and exits 1, so
 * a crash reads "exited with status 1" instead of the signal. */
static bool workers_capped(void) {
    static char console[1 << 16];
    json_t *rows;
    run_fault("", SLICE " --check=golden", console, sizeof console, &rows);
    json_decref(rows);
    return strstr(console, "worker-mem=none") == NULL;
}

static void test_correct_plugin_passes(void **state) {
    (void)state;
    static char console[1 << 16];
    json_t *rows;
    const int rc = run_fault("", SLICE " --check=variants,memory", console, sizeof console, &rows);
    if (rc != 0) fail_msg("a correct plugin failed:\n%s", console);
    json_decref(rows);
}

static void test_strides(void **state) {
    (void)state;
    const char *n[] = { "add.Tensor", "wrong metadata", "strides [1, 4]", "contiguous", NULL };
    expect_problem("strides", SLICE " --check=variants", "FAIL", "variants:", n);
}

static void test_offset(void **state) {
    (void)state;
    const char *n[] = { "add.Tensor", "wrong metadata", "storage offset 1", NULL };
    expect_problem("offset", SLICE " --check=variants", "FAIL", "variants:", n);
}

static void test_view_that_copies(void **state) {
    (void)state;
    const char *n[] = { "transpose.int on", "wrong metadata",
                        "a new tensor, but the reference returns it over input 0's storage", NULL };
    expect_problem("copyview KV_TEST_FAULT_OP=transpose.int",
                   "--op=transpose.int --dtype=f32 --shape=3x4 --layout=t --args=dim0=0,dim1=1 --check=variants",
                   "FAIL", "variants:", n);
}

static void test_write_input(void **state) {
    (void)state;
    const char *n[] = { "add.Tensor on", "input 0 ('self') was modified by the call", NULL };
    expect_problem("write_input", SLICE " --check=variants,memory", "FAIL", "memory:", n);
}

static void test_out_of_bounds_write(void **state) {
    (void)state;
    const char *n[] = { "add.Tensor on", "output 0: back redzone of a 80-byte", "written at byte 0 past its end", NULL };
    expect_problem("oob", SLICE " --check=variants,memory", "FAIL", "memory:", n);
}

static void test_unwritten_element(void **state) {
    (void)state;
    const char *n[] = { "add.Tensor on", "1 element not written by the kernel", "first at [3, 4]", NULL };
    expect_problem("unwritten", SLICE " --check=memory", "FAIL", "memory:", n);
}

static void test_device_leak(void **state) {
    (void)state;
    const char *n[] = { "add.Tensor on", "memory leaked: 2 blocks (8192 bytes) allocated through the backend's ABI",
                        NULL };
    expect_problem("leak", SLICE " --check=variants,memory", "FAIL", "memory:", n);
}

static void test_crash_is_attributed(void **state) {
    (void)state;
    /* The plugin's key name is not spelled out: plugin names may change. */
    const char *n[] = { "in the add.Tensor kernel of ", "the case was run again without ", NULL };
    const char *sig[] = { "worker killed by SIGSEGV (signal 11", NULL };
    expect_problem("crash", SLICE " --check=variants,memory", "CRASH", "case", workers_capped() ? sig : n);
    const json_t *p = the_problem(g_rows, "");
    for (const char *const *s = n; *s; s++) assert_contains(str_of(p, "message"), *s);
    expect_cpu_rows_survived();
}

static void test_hang_is_attributed(void **state) {
    (void)state;
    const char *n[] = { "timed out in the add.Tensor kernel of ", "the case was run again without ", NULL };
    expect_problem("hang", SLICE " --check=variants,memory --timeout=2", "TIMEOUT", "case", n);
    expect_cpu_rows_survived();
}

static void test_crash_inside_another_op(void **state) {
    (void)state;
    /* div's backward calls mul: the crash is mul's, on the plugin (in
     * SIM's slot), under the grad check of a div case on its device. */
    const char *n[] = { "in the mul.Tensor kernel of SIM, check grad", NULL };
    expect_problem("crash KV_TEST_FAULT_OP=mul.Tensor KV_TEST_FAULT_SLOT=sim",
                   "--op=div.Tensor --dtype=f32 --shape=4x5 --mode=grad --device=sim", "CRASH", "case", n);
    assert_string_equal(str_of(the_problem(g_rows, ""), "backend"), "sim");
}

static void test_host_leak_hits_the_worker_cap(void **state) {
    (void)state;
    if (!workers_capped()) skip();
    const char *n[] = { "worker out of memory (cap 128 MiB", "in the add.Tensor kernel of ", NULL };
    expect_problem("hostleak KV_WORKER_MEM=128", SLICE " --check=variants,memory", "CRASH", "case", n);
    expect_cpu_rows_survived();
}

static void test_host_leak_below_the_cap_is_reported(void **state) {
    (void)state;
    if (!workers_capped()) skip();
    static char console[1 << 16];
    json_t *rows;
    /* Three cases on one worker: each one leaks past half the cap, says
     * so, and the worker is replaced before the next (no case lands on a
     * worker on its way out). */
    const int rc = run_fault("hostleak KV_WORKER_MEM=256", "--op=add.Tensor --dtype=f32 --shape=4x5,3x4,2x2 "
                             "--check=memory --jobs=1", console, sizeof console, &rows);
    assert_int_equal(rc, 1);
    int nerr = 0, nleak = 0;
    size_t i;
    const json_t *row;
    json_array_foreach(rows, i, row) {
        const char *st = str_of(row, "status");
        if (strcmp(st, "PASS") == 0) continue;
        /* The memory row itself sees the heap grow per call. */
        if (strcmp(st, "FAIL") == 0 && strstr(str_of(row, "message"), "host memory leaked") != NULL) {
            nleak++;
            continue;
        }
        if (strcmp(st, "ERROR") != 0) fail_msg("unexpected %s row: %s", st, str_of(row, "message"));
        assert_contains(str_of(row, "message"), "past half its cap (256 MiB, KV_WORKER_MEM)");
        assert_contains(str_of(row, "message"), "The worker is replaced");
        nerr++;
    }
    assert_int_equal(nerr, 3);
    assert_int_equal(nleak, 3);
    json_decref(rows);
}

static void test_plugin_output_is_captured(void **state) {
    (void)state;
    static char console[1 << 16];
    json_t *rows;
    const int rc = run_fault("noise", SLICE " --check=variants", console, sizeof console, &rows);
    assert_int_equal(rc, 0);
    /* Not on kvrun's console as printed (a line of its own): in the
     * case's rows, and named in the console's summary. */
    assert_null(strstr(console, "\nfaulty: a vendor"));
    assert_true(strncmp(console, "faulty:", 7) != 0);
    assert_contains(console, "== 1 case printed to stdout/stderr");
    assert_contains(console, "add.Tensor(dtype=f32,shape=[4,5],check=variants): faulty: a vendor debug line on stdout ...");
    const json_t *v = row_of(rows, "variants:CPU", "cpu");
    assert_non_null(v);
    assert_contains(str_of(v, "output"), "faulty: a vendor debug line on stdout");
    assert_contains(str_of(v, "output"), "faulty: a vendor warning on stderr");
    json_decref(rows);
    /* JUnit carries it too, in the testcase's system-out. */
    FILE *f = fopen(REPORTS "/junit.xml", "r");
    assert_non_null(f);
    static char junit[1 << 20];
    const size_t n = fread(junit, 1, sizeof junit - 1, f);
    junit[n] = '\0';
    fclose(f);
    assert_contains(junit, "output:\nfaulty: a vendor debug line on stdout\nfaulty: a vendor warning on stderr");
}

static void test_nondeterminism(void **state) {
    (void)state;
    const char *v[] = { "add.Tensor on", "is nondeterministic: two identical calls gave different results", NULL };
    expect_problem("nondet", SLICE " --check=variants", "FAIL", "variants:", v);
    /* Not "elements not written": the memory check tells the two apart. */
    const char *m[] = { "nondeterministic: two identical calls", NULL };
    expect_problem("nondet", SLICE " --check=memory", "FAIL", "memory:", m);
    /* As the accel target (the plugin in SIM's slot): not a fast-path bug. */
    const char *f[] = { "add.Tensor is nondeterministic on the accel target", "ON vs OFF cannot be judged", NULL };
    expect_problem("nondet KV_TEST_FAULT_SLOT=sim", SLICE " --device=accel --check=fastpath --gate=exact", "FAIL",
                   "fastpath:exact", f);
}

static void test_lazy_tolerance_per_backend(void **state) {
    (void)state;
    static char console[1 << 16];
    json_t *rows;
    /* exp one ulp off on the accel target: within its table row (2 ulp),
     * so variants and lazy agree that it passes. */
    const int rc = run_fault("ulp KV_TEST_FAULT_OP=exp KV_TEST_FAULT_SLOT=sim",
                             "--op=exp --dtype=f32 --shape=4x5 --device=accel --lazy=neg --mode=none,trace "
                             "--check=variants,lazy",
                             console, sizeof console, &rows);
    if (rc != 0) fail_msg("exp 1 ulp off failed a check:\n%s", console);
    const json_t *l = row_of(rows, "lazy", "accel");
    assert_non_null(l);
    assert_contains(str_of(l, "message"), "within the op's tolerance");
    json_decref(rows);
    /* add one ulp off: its row says bitwise, so lazy fails as variants. */
    const char *n[] = { "differs from the expected values (bitwise", NULL };
    expect_problem("ulp KV_TEST_FAULT_SLOT=sim", SLICE " --device=accel --lazy=neg --check=lazy", "FAIL", "lazy", n);
}

static void test_bad_worker_mem_is_a_usage_error(void **state) {
    (void)state;
    static char console[1 << 16];
    json_t *rows;
    const int rc = run_fault("\"\" KV_WORKER_MEM=lots", SLICE, console, sizeof console, &rows);
    json_decref(rows);
    assert_int_equal(rc, 2);
    assert_contains(console, "KV_WORKER_MEM=lots: must be a worker memory cap in MiB");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_correct_plugin_passes),
        cmocka_unit_test(test_strides),
        cmocka_unit_test(test_offset),
        cmocka_unit_test(test_view_that_copies),
        cmocka_unit_test(test_write_input),
        cmocka_unit_test(test_out_of_bounds_write),
        cmocka_unit_test(test_unwritten_element),
        cmocka_unit_test(test_device_leak),
        cmocka_unit_test(test_crash_is_attributed),
        cmocka_unit_test(test_hang_is_attributed),
        cmocka_unit_test(test_crash_inside_another_op),
        cmocka_unit_test(test_host_leak_hits_the_worker_cap),
        cmocka_unit_test(test_host_leak_below_the_cap_is_reported),
        cmocka_unit_test(test_plugin_output_is_captured),
        cmocka_unit_test(test_nondeterminism),
        cmocka_unit_test(test_lazy_tolerance_per_backend),
        cmocka_unit_test(test_bad_worker_mem_is_a_usage_error),
    };
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(g_rows);
    return failed;
}
