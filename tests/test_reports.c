/* Reports, shard merge and baselines (src/runner/result.c, report*.c,
 * merge.c, baseline.c). Expected texts are written out by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runner/report/baseline.h"
#include "runner/report/merge.h"
#include "runner/report/report.h"
#include "runner/report/report_agg.h"
#include "runner/check/result.h"
#include "runner/check/tolerance.h"

/* ---- helpers ---- */

static kv_check_result mk(const char *case_id, const char *op, const char *check, const char *backend, kv_dtype dt,
                          kv_result_status st, const char *msg) {
    kv_check_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.case_id, sizeof r.case_id, "%s", case_id);
    snprintf(r.op, sizeof r.op, "%s", op);
    snprintf(r.check, sizeof r.check, "%s", check);
    snprintf(r.backend, sizeof r.backend, "%s", backend);
    r.dtype = dt;
    r.status = st;
    snprintf(r.message, sizeof r.message, "%s", msg);
    r.max_ulps = -1;
    return r;
}

static void push(kv_result_list *l, kv_check_result r) { assert_int_equal(kv_result_list_push(l, &r), KV_OK); }

static char *make_tmpdir(void) {
    char *d = strdup("/tmp/kv_test_reports.XXXXXX");
    assert_non_null(d);
    assert_non_null(mkdtemp(d));
    return d;
}

static void remove_tree(char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static char *path_in(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    assert_non_null(p);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    int c;
    while ((c = fgetc(f)) != EOF) fputc(c, mem);
    fclose(f);
    fclose(mem);
    return buf;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static const char *after(const char *hay, const char *needle) {
    const char *p = strstr(hay, needle);
    if (p == NULL) fail_msg("missing in output: \"%s\"\n--- output ---\n%s", needle, hay);
    return p;
}

/* The mul.Tensor failure every test uses: two of six elements differ. */
static kv_check_result mul_failure(void) {
    kv_check_result r = mk("mul.Tensor(dtype=f32,shape=[2,3])", "mul.Tensor", "golden", "cpu", KV_F32,
                           KV_RESULT_FAIL, "mul.Tensor: output 0 differs from golden");
    snprintf(r.repro, sizeof r.repro, "kvrun --op=mul.Tensor --dtype=f32 --shape=2x3");
    r.seconds = 0.25;
    r.compared = 6;
    r.mismatched = 2;
    r.max_abs_err = 0.5;
    r.max_ulps = 4194304;
    r.nmismatches = 1;
    r.mismatches[0] = (kv_mismatch){ .index = { 1, 2 }, .ndim = 2, .expected = 1, .got = 1.5, .abs_err = 0.5,
                                     .rel_err = 0.5, .ulps = 4194304 };
    /* [0,0] and [1,2] wrong: a cell per element of the 2 x 3 output. */
    r.heat = (kv_heat){ .rows = 2, .cols = 3, .grows = 2, .gcols = 3 };
    r.heat.cells[0] = 1;
    r.heat.cells[1 * 3 + 2] = 1;
    return r;
}

/* ---- result.c ---- */

static void test_status_names(void **state) {
    (void)state;
    static const char *const names[] = { "PASS", "FAIL", "ERROR", "UNSUPPORTED", "SKIP",
                                         "CRASH", "TIMEOUT", "XFAIL", "XPASS", "FLAKY" };
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) {
        assert_string_equal(kv_result_status_name((kv_result_status)s), names[s]);
        kv_result_status back = KV_RESULT_STATUS_COUNT;
        assert_int_equal(kv_result_status_parse(names[s], &back), 0);
        assert_int_equal(back, s);
    }
    assert_int_equal(kv_result_status_parse("pass", NULL), -1);
    assert_int_equal(kv_result_status_parse("", NULL), -1);
    /* bad = the statuses that make the exit code non-zero */
    static const bool bad[] = { false, true, true, false, false, true, true, false, true, false };
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        assert_int_equal(kv_result_status_is_bad((kv_result_status)s), bad[s]);
    assert_true(kv_result_status_severity(KV_RESULT_CRASH) > kv_result_status_severity(KV_RESULT_FAIL));
    assert_true(kv_result_status_severity(KV_RESULT_FAIL) > kv_result_status_severity(KV_RESULT_PASS));
    assert_true(kv_result_status_severity(KV_RESULT_PASS) > kv_result_status_severity(KV_RESULT_UNSUPPORTED));
}

static void test_list_push_counts(void **state) {
    (void)state;
    kv_result_list l = { 0 };
    /* 150 results: past the first growth step; statuses cycle 0..8. */
    for (int i = 0; i < 150; i++) {
        char id[32];
        snprintf(id, sizeof id, "case%d", i);
        push(&l, mk(id, "op", "golden", "cpu", KV_F32, (kv_result_status)(i % 9), ""));
    }
    assert_int_equal(l.n, 150);
    assert_string_equal(l.items[149].case_id, "case149");
    int64_t c[KV_RESULT_STATUS_COUNT];
    kv_result_list_counts(&l, c);
    /* 150 = 16*9 + 6: statuses 0..5 occur 17 times, 6..8 16 times. */
    for (int s = 0; s < 9; s++) assert_int_equal(c[s], s < 6 ? 17 : 16);
    /* push of an element of the list itself while it grows */
    l.n = l.cap;
    assert_int_equal(kv_result_list_push(&l, &l.items[0]), KV_OK);
    assert_string_equal(l.items[l.n - 1].case_id, "case0");
    kv_result_list_free(&l);
    assert_null(l.items);
    assert_int_equal(l.n, 0);
}

/* ---- console ---- */

static kv_result_list console_list(void) {
    kv_result_list l = { 0 };
    push(&l, mk("add.Tensor(dtype=f32)", "add.Tensor", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
    push(&l, mul_failure());
    push(&l, mk("cat(dtype=f32)", "cat", "golden", "cpu", KV_F32, KV_RESULT_SKIP, "skipped"));
    push(&l, mk("add.Tensor(dtype=c64,device=sim)", "add.Tensor", "variants:sim", "sim", KV_C64,
                KV_RESULT_UNSUPPORTED, "no kernel"));
    push(&l, mk("div.Tensor(dtype=f16)", "div.Tensor", "golden", "cpu", KV_F16, KV_RESULT_XFAIL, "known"));
    kv_check_result crash = mk("sum(dtype=f64)", "sum", "memory", "cpu", KV_F64, KV_RESULT_CRASH,
                               "worker died on signal 11 (SIGSEGV)\x01");
    snprintf(crash.repro, sizeof crash.repro, "kvrun --op=sum --dtype=f64 --check=memory");
    push(&l, crash);
    push(&l, mk("neg(dtype=i32)", "neg", "golden", "cpu", KV_I32, KV_RESULT_XPASS, ""));
    push(&l, mk("neg(dtype=i64)", "neg", "golden", "cpu", KV_I64, KV_RESULT_PASS, ""));
    return l;
}

/* The short summary groups failing rows by (op, check, backend) and
 * folds their layouts and dtypes; an element whose sign is wrong says so
 * instead of an ulp count through zero. */
static void test_console_short_summary(void **state) {
    (void)state;
    kv_result_list l = { 0 };
    kv_check_result a = mul_failure();
    snprintf(a.case_id, sizeof a.case_id, "mul.Tensor(dtype=f32,shape=[2,3],layout=t)");
    a.mismatches[0].got = -1;
    a.mismatches[0].ulps = 2130706432;
    push(&l, a);
    kv_check_result b = mul_failure();
    snprintf(b.case_id, sizeof b.case_id, "mul.Tensor(dtype=f64,shape=[2,3],layout=b)");
    b.dtype = KV_F64;
    push(&l, b);
    push(&l, mk("neg(dtype=i32)", "neg", "variants:sim", "sim", KV_I32, KV_RESULT_CRASH, "signal 11"));
    push(&l, mk("neg(dtype=i64)", "neg", "golden", "cpu", KV_I64, KV_RESULT_PASS, ""));
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    kv_report_console(f, &l, NULL);
    fclose(f);
    after(out, "at [1,2]: expected 1, got -1 (abs err 0.5, rel err 0.5, sign differs)\n");
    after(out, "at [1,2]: expected 1, got 1.5 (abs err 0.5, rel err 0.5, ulp 4194304)\n");
    const char *head = after(out, "== short summary: 3 problems in 2 groups (op, check, backend):\n"
                                  "FAIL  mul.Tensor golden on cpu: 2 cases; layouts t b; dtypes f32 f64\n"
                                  "CRASH neg variants:sim: 1 case; layout c; dtype i32\n"
                                  "== failed cases:\n"
                                  "FAIL  mul.Tensor(dtype=f32,shape=[2,3],layout=t) golden on cpu\n"
                                  "FAIL  mul.Tensor(dtype=f64,shape=[2,3],layout=b) golden on cpu\n"
                                  "CRASH neg(dtype=i32) variants:sim\n"
                                  "PASS 1, FAIL 2,");
    assert_non_null(head);
    assert_null(strchr(out, '\033')); /* not a terminal: no colour */
    free(out);
    kv_result_list_free(&l);
}

static void test_console_summary(void **state) {
    (void)state;
    kv_result_list l = console_list();
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    snprintf(meta.run_name, sizeof meta.run_name, "cases/smoke.case");
    meta.seed = 7;
    meta.ncases = 7;
    meta.shard_k = 2;
    meta.shard_n = 3;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    kv_report_console(f, &l, &meta);
    fclose(f);

    /* PASS 2 + XFAIL 1 passed; FAIL + CRASH + XPASS failed; SKIP + UNSUPPORTED skipped. */
    const char *tail = "PASS 2, FAIL 1, ERROR 0, UNSUPPORTED 1, SKIP 1, CRASH 1, TIMEOUT 0, XFAIL 1, XPASS 1\n"
                       "3 passed, 3 failed, 2 skipped\n";
    assert_true(len >= strlen(tail));
    assert_string_equal(out + len - strlen(tail), tail);

    const char *header = after(out, "== kvrun cases/smoke.case: 8 results of 7 cases, seed 7, shard 2/3");
    assert_ptr_equal(header, out);
    /* the problems, in list order, between the header and the counts */
    const char *p_mul = after(out, "FAIL    mul.Tensor(dtype=f32,shape=[2,3])\n");
    const char *p_diff = after(out, "at [1,2]: expected 1, got 1.5 (abs err 0.5, rel err 0.5, ulp 4194304)\n");
    const char *p_summary = after(out, "2 of 6 elements differ; max abs err 0.5, max ulp 4194304\n");
    const char *p_repro = after(out, "repro: kvrun --op=mul.Tensor --dtype=f32 --shape=2x3\n");
    const char *p_crash = after(out, "CRASH   sum(dtype=f64)\n");
    const char *p_crash_msg = after(out, "worker died on signal 11 (SIGSEGV)\\x01\n");
    const char *p_crash_repro = after(out, "repro: kvrun --op=sum --dtype=f64 --check=memory\n");
    const char *p_xpass = after(out, "XPASS   neg(dtype=i32)\n");
    const char *p_stale = after(out, "the baseline is stale: 1 unexpected pass (XPASS)");
    const char *p_counts = out + len - strlen(tail);
    assert_true(header < p_mul && p_mul < p_summary && p_summary < p_diff && p_diff < p_repro);
    assert_true(p_repro < p_crash && p_crash < p_crash_msg && p_crash_msg < p_crash_repro);
    assert_true(p_crash_repro < p_xpass && p_xpass < p_stale && p_stale < p_counts);
    /* only problems are listed: no passing, skipped or expected-failure case */
    assert_null(strstr(out, "add.Tensor(dtype=f32)"));
    assert_null(strstr(out, "div.Tensor(dtype=f16)"));
    assert_null(strstr(out, "cat(dtype=f32)"));
    assert_null(strchr(out, '\x01'));
    free(out);
    kv_result_list_free(&l);
}

static void test_console_empty(void **state) {
    (void)state;
    kv_result_list l = { 0 };
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    kv_report_console(f, &l, NULL);
    fclose(f);
    const char *tail = "PASS 0, FAIL 0, ERROR 0, UNSUPPORTED 0, SKIP 0, CRASH 0, TIMEOUT 0, XFAIL 0, XPASS 0\n"
                       "0 passed, 0 failed, 0 skipped\n";
    assert_true(len >= strlen(tail));
    assert_string_equal(out + len - strlen(tail), tail);
    after(out, "no results: the run selected no cases");
    free(out);
    assert_int_equal(kv_report_exit_code(&l), 1);
}

static void test_exit_code(void **state) {
    (void)state;
    static const int expect[] = {
        [KV_RESULT_PASS] = 0,    [KV_RESULT_FAIL] = 1,  [KV_RESULT_ERROR] = 1,
        [KV_RESULT_UNSUPPORTED] = 0, [KV_RESULT_SKIP] = 0, [KV_RESULT_CRASH] = 1,
        [KV_RESULT_TIMEOUT] = 1, [KV_RESULT_XFAIL] = 0, [KV_RESULT_XPASS] = 1,
        [KV_RESULT_FLAKY] = 0,
    };
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) {
        kv_result_list l = { 0 };
        push(&l, mk("a(dtype=f32)", "a", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
        push(&l, mk("b(dtype=f32)", "b", "golden", "cpu", KV_F32, (kv_result_status)s, ""));
        assert_int_equal(kv_report_exit_code(&l), expect[s]);
        kv_report_totals t = kv_report_totals_of(&l);
        assert_int_equal(t.passed + t.failed + t.skipped + t.flaky, 2);
        assert_int_equal(t.failed, expect[s]);
        /* --flaky=fail: a FLAKY row fails the run, nothing else changes. */
        assert_int_equal(kv_report_exit_code_flaky(&l, true), s == KV_RESULT_FLAKY ? 1 : expect[s]);
        kv_result_list_free(&l);
    }
    kv_result_list all_ok = { 0 };
    push(&all_ok, mk("a", "a", "golden", "cpu", KV_F32, KV_RESULT_SKIP, ""));
    push(&all_ok, mk("b", "b", "golden", "cpu", KV_F32, KV_RESULT_UNSUPPORTED, ""));
    push(&all_ok, mk("c", "c", "golden", "cpu", KV_F32, KV_RESULT_XFAIL, ""));
    assert_int_equal(kv_report_exit_code(&all_ok), 0);
    kv_result_list_free(&all_ok);
    assert_int_equal(kv_report_exit_code(NULL), 1);
}

/* ---- JUnit ---- */

static int run_xmllint(const char *path) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "xmllint --noout '%s' 2>/dev/null", path);
    return system(cmd);
}

/* FLAKY (--retry): counted apart on the console, a passing testcase with
 * Surefire's <flakyFailure> in JUnit, a failure under --flaky=fail; and an
 * incomplete run is said so in every report. */
static void test_flaky_and_incomplete(void **state) {
    (void)state;
    kv_result_list l = { 0 };
    push(&l, mk("add.Tensor(dtype=f32)", "add.Tensor", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
    push(&l, mk("mul.Tensor(dtype=f32)", "mul.Tensor", "variants:sim", "sim", KV_F32, KV_RESULT_FLAKY,
                "FAIL on the first attempt, then passed on retry 1 of 2: wrong"));
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    meta.ncases = 2;
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    kv_report_console(f, &l, &meta);
    fclose(f);
    const char *tail = "PASS 1, FAIL 0, ERROR 0, UNSUPPORTED 0, SKIP 0, CRASH 0, TIMEOUT 0, XFAIL 0, XPASS 0, FLAKY 1\n"
                       "1 passed, 0 failed, 0 skipped, 1 flaky\n";
    assert_true(len >= strlen(tail));
    assert_string_equal(out + len - strlen(tail), tail);
    after(out, "== 1 flaky (failed, then passed on a retry; --flaky=fail would fail the run):\nFLAKY   mul.Tensor");
    free(out);
    assert_int_equal(kv_report_exit_code(&l), 0);
    assert_int_equal(kv_report_exit_code_flaky(&l, true), 1);

    char *dir = make_tmpdir();
    char *path = path_in(dir, "junit.xml");
    assert_int_equal(kv_report_write_junit(&l, &meta, path), KV_OK);
    char *xml = slurp(path);
    after(xml, "tests=\"2\" failures=\"0\" errors=\"0\" time=");
    after(xml, "<testsuite name=\"add.Tensor\" tests=\"1\" failures=\"0\" errors=\"0\" skipped=\"0\"");
    after(xml, "<flakyFailure type=\"FLAKY\" message=\"FAIL on the first attempt");
    free(xml);
    meta.flaky_fail = true;
    meta.incomplete = true;
    meta.ncases_done = 1;
    snprintf(meta.interrupted, sizeof meta.interrupted, "SIGINT");
    assert_int_equal(kv_report_write_junit(&l, &meta, path), KV_OK);
    xml = slurp(path);
    after(xml, "tests=\"2\" failures=\"1\"");
    after(xml, "<failure type=\"FLAKY\"");
    after(xml, "<property name=\"incomplete\" value=\"INCOMPLETE: interrupted by SIGINT after 1 of 2 cases");
    free(xml);
    free(path);
    remove_tree(dir);
    kv_result_list_free(&l);
}

static void test_junit_valid(void **state) {
    (void)state;
    /* Not a skip: CI installs libxml2-utils, and a missing xmllint must
     * not turn this check green. */
    assert_int_equal(system("command -v xmllint >/dev/null 2>&1"), 0);
    char *dir = make_tmpdir();
    char *path = path_in(dir, "junit.xml");

    /* xmllint must reject what we must not write, or the check proves nothing. */
    char *bad = path_in(dir, "bad.xml");
    spit(bad, "<?xml version=\"1.0\"?><a m=\"x\x01y\">&</a>\n");
    assert_int_not_equal(run_xmllint(bad), 0);

    kv_result_list l = { 0 };
    kv_check_result f = mul_failure();
    snprintf(f.message, sizeof f.message, "a < b && \"c\" 'd' ]]> \x01\x1f bad byte \xff end");
    push(&l, f);
    /* A passing row's repro line stays out of junit.xml. */
    kv_check_result pass = mk("add.Tensor(dtype=f32)", "add.Tensor", "golden", "cpu", KV_F32, KV_RESULT_PASS, "");
    snprintf(pass.repro, sizeof pass.repro, "kvrun --op=add.Tensor --dtype=f32");
    push(&l, pass);
    push(&l, mk("add.Tensor(dtype=c64,device=sim)", "add.Tensor", "variants:sim", "sim", KV_C64,
                KV_RESULT_UNSUPPORTED, "no <kernel>"));
    push(&l, mk("sum(dtype=f64)", "sum", "memory", "cpu", KV_F64, KV_RESULT_TIMEOUT, "took > 10 s"));
    push(&l, mk("neg(dtype=i32)", "neg", "golden", "cpu", KV_I32, KV_RESULT_XPASS, ""));
    push(&l, mk("neg(dtype=i64)", "neg", "golden", "cpu", KV_I64, KV_RESULT_XFAIL, "expected by baseline"));
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    snprintf(meta.run_name, sizeof meta.run_name, "run <1> & \"x\"");
    snprintf(meta.options, sizeof meta.options, "--gate=exact\t--filter='*'");
    meta.start_time = 1700000000;
    assert_int_equal(kv_report_write_junit(&l, &meta, path), KV_OK);
    assert_int_equal(run_xmllint(path), 0);
    /* and against the Jenkins xUnit plugin's schema, which must reject a
     * <testsuites skipped=...> (or the check proves nothing) */
    char cmd[900];
    snprintf(cmd, sizeof cmd, "xmllint --noout --schema tests/junit-10.xsd '%s' 2>/dev/null", path);
    assert_int_equal(system(cmd), 0);
    spit(bad, "<testsuites skipped=\"0\"><testsuite name=\"a\" tests=\"0\" failures=\"0\" errors=\"0\"/></testsuites>\n");
    snprintf(cmd, sizeof cmd, "xmllint --noout --schema tests/junit-10.xsd '%s' 2>/dev/null", bad);
    assert_int_not_equal(system(cmd), 0);

    char *xml = slurp(path);
    /* totals: 6 tests; FAIL + XPASS failures; TIMEOUT error; UNSUPPORTED
     * and XFAIL skipped (a known failure, with the baseline's reason) */
    after(xml, "<testsuites name=\"kvsuite run &lt;1&gt; &amp; &quot;x&quot;\" tests=\"6\" failures=\"2\" "
               "errors=\"1\" time=");
    /* junit-10.xsd allows skipped= on <testsuite> only */
    assert_null(strstr(xml, "<testsuites name=\"kvsuite run &lt;1&gt; &amp; &quot;x&quot;\" tests=\"6\" failures=\"2\" "
                            "errors=\"1\" skipped="));
    after(xml, "<skipped type=\"XFAIL\" message=\"expected by baseline\"/>");
    after(xml, "<testsuite name=\"add.Tensor\" tests=\"2\" failures=\"0\" errors=\"0\" skipped=\"1\"");
    after(xml, "<testcase name=\"mul.Tensor(dtype=f32,shape=[2,3])\" classname=\"mul.Tensor.golden\" time=\"0.250\"");
    /* a row under half a millisecond has no time= (the suite's keeps it) */
    after(xml, "<testcase name=\"add.Tensor(dtype=f32)\" classname=\"add.Tensor.golden\"/>");
    after(xml, "<failure type=\"FAIL\" message=\"a &lt; b &amp;&amp; &quot;c&quot; &#39;d&#39; ]]&gt; \\x01\\x1F bad "
               "byte \\xFF end\">");
    after(xml, "<error type=\"TIMEOUT\" message=\"took &gt; 10 s\">");
    after(xml, "<skipped type=\"UNSUPPORTED\" message=\"no &lt;kernel&gt;\"/>");
    after(xml, "<failure type=\"XPASS\"");
    after(xml, "repro: kvrun --op=mul.Tensor --dtype=f32 --shape=2x3");
    assert_null(strstr(xml, "repro: kvrun --op=add.Tensor --dtype=f32"));
    after(xml, "<testcase name=\"add.Tensor(dtype=f32)\" classname=\"add.Tensor.golden\"/>");
    after(xml, "<property name=\"options\" value=\"--gate=exact&#9;--filter=&#39;*&#39;\"/>");
    assert_null(strchr(xml, '\x01'));
    assert_null(strchr(xml, '\xff'));
    free(xml);

    /* and the whole folder, via write_all */
    char *sub = path_in(dir, "a/b/c");
    assert_int_equal(kv_report_write_all(&l, &meta, sub), KV_OK);
    char *junit2 = path_in(sub, KV_REPORT_JUNIT);
    assert_int_equal(run_xmllint(junit2), 0);
    free(junit2);
    free(sub);

    kv_result_list_free(&l);
    free(bad);
    free(path);
    remove_tree(dir);
}

/* ---- JSONL and merge ---- */

static bool same_double(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0; /* -0.0 and 0.0 differ */
}

static void assert_same_result(const kv_check_result *a, const kv_check_result *b) {
    assert_string_equal(a->case_id, b->case_id);
    assert_string_equal(a->op, b->op);
    assert_string_equal(a->check, b->check);
    assert_string_equal(a->backend, b->backend);
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->status, b->status);
    assert_string_equal(a->message, b->message);
    assert_string_equal(a->repro, b->repro);
    assert_true(same_double(a->seconds, b->seconds));
    assert_int_equal(a->compared, b->compared);
    assert_int_equal(a->mismatched, b->mismatched);
    assert_true(same_double(a->max_abs_err, b->max_abs_err));
    assert_true(same_double(a->max_ulps, b->max_ulps));
    assert_int_equal(a->nmismatches, b->nmismatches);
    for (int i = 0; i < a->nmismatches; i++) {
        const kv_mismatch *x = &a->mismatches[i], *y = &b->mismatches[i];
        assert_int_equal(x->ndim, y->ndim);
        for (int d = 0; d < x->ndim; d++) assert_int_equal(x->index[d], y->index[d]);
        assert_true(same_double(x->expected, y->expected));
        assert_true(same_double(x->got, y->got));
        assert_true(same_double(x->abs_err, y->abs_err));
        assert_true(same_double(x->rel_err, y->rel_err));
        assert_true(same_double(x->ulps, y->ulps));
    }
    assert_memory_equal(&a->heat, &b->heat, sizeof a->heat);
}

static kv_result_list rich_list(void) {
    kv_result_list l = { 0 };
    kv_check_result a = mul_failure();
    snprintf(a.message, sizeof a.message, "line one\nline \"two\"\twith tab, é and ✓ and a \\ backslash");
    a.seconds = 0.1;
    a.compared = INT64_C(1) << 40;
    a.mismatched = 8;
    a.max_abs_err = INFINITY;
    a.max_ulps = NAN;
    a.nmismatches = KV_RESULT_MAX_MISMATCHES;
    for (int i = 0; i < KV_RESULT_MAX_MISMATCHES; i++) {
        kv_mismatch *m = &a.mismatches[i];
        m->ndim = i; /* 0-dim up to 7 dims */
        for (int d = 0; d < i; d++) m->index[d] = (int64_t)d * 1000003 + i;
        m->expected = i == 0 ? NAN : i == 1 ? -INFINITY : i == 2 ? -0.0 : 1.0 / (i + 3);
        m->got = i == 3 ? 1e-310 : i == 4 ? 1.7976931348623157e308 : -1.0 / 3;
        m->abs_err = 0.1 * i;
        m->rel_err = 1e-300 * i;
        m->ulps = i == 5 ? -1 : (double)(INT64_C(1) << 52) + i;
    }
    /* A heat grid with its first, last and a saturated cell. */
    a.heat = (kv_heat){ .rows = INT64_C(1) << 33, .cols = 40, .grows = 32, .gcols = 32 };
    a.heat.cells[0] = 1;
    a.heat.cells[33] = 7;
    a.heat.cells[32 * 32 - 1] = UINT16_MAX;
    push(&l, a);
    kv_check_result b = mk("add.Tensor(dtype=bf16,shape=[],device=accel,lazy=conj@0)", "add.Tensor",
                           "variants:accel/fast", "accel", KV_BF16, KV_RESULT_XPASS, "");
    b.seconds = 12.5;
    push(&l, b);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) {
        char id[64];
        snprintf(id, sizeof id, "op%d(dtype=%s)", s, kv_dtype_name((kv_dtype)(s % KV_DTYPE_COUNT)));
        push(&l, mk(id, "op", "memory", "cpu", (kv_dtype)(s % KV_DTYPE_COUNT), (kv_result_status)s, "m"));
    }
    return l;
}

static void test_jsonl_round_trip(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    kv_result_list l = rich_list();
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    snprintf(meta.run_name, sizeof meta.run_name, "round trip");
    snprintf(meta.options, sizeof meta.options, "--gate=seed --jobs=2");
    meta.seed = UINT64_C(0xFFFFFFFFFFFFFFF0); /* past INT64_MAX */
    meta.start_time = 1700000000;
    meta.wall_seconds = 3.5;
    meta.ncases = 5;
    assert_int_equal(kv_report_write_all(&l, &meta, dir), KV_OK);

    /* one line per result */
    char *jsonl_path = path_in(dir, KV_REPORT_JSONL);
    char *text = slurp(jsonl_path);
    int lines = 0;
    for (char *p = text; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, l.n);
    after(text, "{\"case_id\":\"mul.Tensor(dtype=f32,shape=[2,3])\",\"op\":\"mul.Tensor\",\"check\":\"golden\","
                "\"backend\":\"cpu\",\"dtype\":\"f32\",\"status\":\"FAIL\",");
    after(text, "\"max_abs_err\":\"inf\",\"max_ulps\":\"nan\"");
    free(text);

    kv_result_list back = { 0 };
    kv_report_meta mback;
    const char *dirs[] = { dir };
    assert_int_equal(kv_merge_dirs(dirs, 1, &back, &mback), KV_OK);
    assert_int_equal(back.n, l.n);
    for (int i = 0; i < l.n; i++) assert_same_result(&l.items[i], &back.items[i]);
    assert_string_equal(mback.run_name, "round trip");
    assert_string_equal(mback.options, "--gate=seed --jobs=2");
    assert_true(mback.seed == UINT64_C(0xFFFFFFFFFFFFFFF0));
    assert_int_equal(mback.start_time, 1700000000);
    assert_true(mback.wall_seconds == 3.5);
    assert_int_equal(mback.ncases, 5);
    assert_int_equal(mback.merged_from, 1);
    assert_int_equal(mback.shard_n, 0);

    /* a non-UTF-8 byte is replaced one for one; everything else stays */
    kv_result_list one = { 0 };
    push(&one, mk("bad(dtype=f32)", "bad", "golden", "cpu", KV_F32, KV_RESULT_ERROR, "x\xff\xc3y\xe2\x9c\x93"));
    assert_int_equal(kv_report_write_jsonl(&one, jsonl_path), KV_OK);
    kv_result_list got = { 0 };
    assert_int_equal(kv_merge_read_jsonl(jsonl_path, &got), KV_OK);
    assert_int_equal(got.n, 1);
    assert_string_equal(got.items[0].message, "x??y\xe2\x9c\x93");
    kv_result_list_free(&got);
    kv_result_list_free(&one);

    kv_result_list_free(&back);
    kv_result_list_free(&l);
    free(jsonl_path);
    remove_tree(dir);
}

static void write_shard(const char *dir, int k, int n, uint64_t seed, const kv_check_result *rs, int nr,
                        double wall, int64_t start) {
    kv_result_list l = { 0 };
    for (int i = 0; i < nr; i++) push(&l, rs[i]);
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    snprintf(meta.run_name, sizeof meta.run_name, "ci");
    meta.seed = seed;
    meta.shard_k = k;
    meta.shard_n = n;
    meta.ncases = nr;
    meta.wall_seconds = wall;
    meta.start_time = start;
    assert_int_equal(kv_report_write_all(&l, &meta, dir), KV_OK);
    kv_result_list_free(&l);
}

static void test_merge_shards(void **state) {
    (void)state;
    char *root = make_tmpdir();
    char *s1 = path_in(root, "shard1"), *s2 = path_in(root, "shard2"), *s3 = path_in(root, "shard3");
    kv_check_result a = mk("a(dtype=f32)", "a", "golden", "cpu", KV_F32, KV_RESULT_PASS, "");
    kv_check_result b = mul_failure();
    kv_check_result c = mk("c(dtype=f64)", "c", "golden", "cpu", KV_F64, KV_RESULT_SKIP, "");
    kv_check_result a_mem = mk("a(dtype=f32)", "a", "memory", "cpu", KV_F32, KV_RESULT_PASS, "");
    const kv_check_result first[] = { a, b };
    const kv_check_result second[] = { c, a_mem }; /* same case as `a`, other check: no duplicate */
    write_shard(s1, 1, 2, 42, first, 2, 10.0, 2000);
    write_shard(s2, 2, 2, 42, second, 2, 12.5, 1000);

    kv_result_list out = { 0 };
    kv_report_meta meta;
    const char *both[] = { s1, s2 };
    assert_int_equal(kv_merge_dirs(both, 2, &out, &meta), KV_OK);
    assert_int_equal(out.n, 4);
    assert_string_equal(out.items[0].case_id, "a(dtype=f32)");
    assert_string_equal(out.items[1].case_id, "mul.Tensor(dtype=f32,shape=[2,3])");
    assert_string_equal(out.items[2].case_id, "c(dtype=f64)");
    assert_string_equal(out.items[3].check, "memory");
    assert_same_result(&out.items[1], &b);
    assert_int_equal(meta.ncases, 4);
    assert_true(meta.wall_seconds == 12.5);
    assert_int_equal(meta.start_time, 1000);
    assert_int_equal(meta.merged_from, 2);
    assert_int_equal(meta.shard_n, 0);
    assert_int_equal(meta.seed, 42);
    assert_int_equal(kv_report_exit_code(&out), 1);

    /* a duplicate (case, check) across shards names the case, the check and both folders */
    const kv_check_result dup[] = { c, b };
    write_shard(s3, 2, 2, 42, dup, 2, 1.0, 1000);
    const char *overlap[] = { s1, s3 };
    assert_int_equal(kv_merge_dirs(overlap, 2, &out, NULL), KV_ERR_INVALID_ARG);
    const char *msg = kv_last_error_message();
    after(msg, "duplicate result for case 'mul.Tensor(dtype=f32,shape=[2,3])' check 'golden'");
    after(msg, s1);
    after(msg, s3);
    assert_int_equal(out.n, 4); /* left as it was */

    /* the same folder twice is caught as well */
    const char *twice[] = { s1, s1 };
    assert_int_equal(kv_merge_dirs(twice, 2, &out, NULL), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "shard 1/2 given twice");

    /* a missing shard */
    const char *half[] = { s1 };
    assert_int_equal(kv_merge_dirs(half, 1, &out, NULL), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "incomplete shard set: 1 of 2 shards given");

    /* another run's shard */
    write_shard(s3, 2, 2, 43, second, 2, 1.0, 1000);
    const char *mixed[] = { s1, s3 };
    assert_int_equal(kv_merge_dirs(mixed, 2, &out, NULL), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "seed 43");

    /* a folder without a report */
    char *none = path_in(root, "nothing");
    const char *missing[] = { none };
    assert_int_equal(kv_merge_dirs(missing, 1, &out, NULL), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), none);
    assert_int_equal(out.n, 4);

    kv_result_list_free(&out);
    free(none);
    free(s1);
    free(s2);
    free(s3);
    remove_tree(root);
}

/* kvrun --merge holds no rows (README "Sharding on CI"): merging two
 * shards of 8 passing rows and two of 64 holds the same number of row
 * slots at its peak (none: the rows go to the new folder as they are
 * read), while every row arrives. A merge that collects the rows in a
 * list first fails this. The backend row each shard repeats is written
 * once; a failing row keeps the exit code 1. */
static int64_t merge_write_peak(const char *root, int per_shard, int64_t *rows_out, int *code) {
    char name[64];
    char *s[2];
    kv_check_result *rs = calloc((size_t)per_shard + 1, sizeof *rs);
    assert_non_null(rs);
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < per_shard; i++) {
            char id[64];
            snprintf(id, sizeof id, "neg(dtype=f32,shape=[%d])", 2 * i + k + 1);
            rs[i] = mk(id, "neg", "golden", "cpu", KV_F32, KV_RESULT_PASS, "");
        }
        rs[per_shard] = mk("backend(sim)", "", "load", "sim", KV_F32, KV_RESULT_PASS, "loaded");
        if (k == 1) rs[0] = mul_failure();
        snprintf(name, sizeof name, "flat%d-%d", per_shard, k + 1);
        s[k] = path_in(root, name);
        write_shard(s[k], k + 1, 2, 7, rs, per_shard + 1, 1.0, 1000);
    }
    snprintf(name, sizeof name, "flat%d-merged", per_shard);
    char *out = path_in(root, name);
    const char *dirs[] = { s[0], s[1] };
    FILE *console = tmpfile();
    assert_non_null(console);
    kv_result_rows_peak_reset();
    const int64_t before = kv_result_rows_held();
    assert_int_equal(kv_merge_write(dirs, 2, out, false, console, code), KV_OK);
    const int64_t peak = kv_result_rows_peak() - before;
    assert_int_equal(kv_result_rows_held(), before);
    fclose(console);
    char *jsonl = path_in(out, KV_REPORT_JSONL);
    kv_result_list back = { 0 };
    assert_int_equal(kv_merge_read_jsonl(jsonl, &back), KV_OK);
    *rows_out = back.n;
    int loads = 0;
    for (int i = 0; i < back.n; i++) loads += strcmp(back.items[i].check, "load") == 0;
    assert_int_equal(loads, 1);
    kv_result_list_free(&back);
    free(jsonl);
    free(out);
    free(s[0]);
    free(s[1]);
    free(rs);
    return peak;
}

static void test_merge_holds_no_rows(void **state) {
    (void)state;
    char *root = make_tmpdir();
    int64_t rows_small = 0, rows_big = 0;
    int code_small = -1, code_big = -1;
    const int64_t small = merge_write_peak(root, 8, &rows_small, &code_small);
    const int64_t big = merge_write_peak(root, 64, &rows_big, &code_big);
    assert_int_equal(rows_small, 2 * 8 + 1);
    assert_int_equal(rows_big, 2 * 64 + 1);
    assert_int_equal(code_small, 1);
    assert_int_equal(code_big, 1);
    assert_int_equal(small, big);
    assert_true(big < rows_big);
    remove_tree(root);
}

static void test_merge_malformed(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    kv_check_result a = mk("a(dtype=f32)", "a", "golden", "cpu", KV_F32, KV_RESULT_PASS, "");
    kv_check_result b = mk("b(dtype=f32)", "b", "golden", "cpu", KV_F32, KV_RESULT_PASS, "");
    kv_check_result c = mk("c(dtype=f32)", "c", "golden", "cpu", KV_F32, KV_RESULT_PASS, "");
    const kv_check_result rs[] = { a, b, c };
    write_shard(dir, 0, 0, 1, rs, 3, 1.0, 1);
    char *path = path_in(dir, KV_REPORT_JSONL);
    char *good = slurp(path);
    char *l2 = strchr(good, '\n') + 1;
    char *l3 = strchr(l2, '\n') + 1;
    const size_t n1 = (size_t)(l2 - good);
    /* line 2 replaced by each of these */
    static const struct {
        const char *line;
        const char *why;
    } bad[] = {
        { "{not json\n", "not JSON" },
        { "\n", "empty line" },
        { "[1,2]\n", "expected a JSON object" },
        { "{\"case_id\":\"b\"}\n", "missing key \"op\"" },
        { "{\"case_id\":\"b\",\"case_id\":\"b\"}\n", "not JSON" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"BOGUS\",\"message\":\"\",\"repro\":\"\",\"seconds\":0,\"compared\":0,\"mismatched\":0,"
          "\"max_abs_err\":0,\"max_ulps\":-1,\"mismatches\":[]}\n",
          "unknown status \"BOGUS\"" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f33\","
          "\"status\":\"PASS\",\"message\":\"\",\"repro\":\"\",\"seconds\":0,\"compared\":0,\"mismatched\":0,"
          "\"max_abs_err\":0,\"max_ulps\":-1,\"mismatches\":[]}\n",
          "unknown dtype \"f33\"" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"PASS\",\"message\":\"\",\"repro\":\"\",\"seconds\":\"soon\",\"compared\":0,\"mismatched\":0,"
          "\"max_abs_err\":0,\"max_ulps\":-1,\"mismatches\":[]}\n",
          "\"seconds\": expected a number" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"PASS\",\"message\":\"\",\"repro\":\"\",\"seconds\":0,\"compared\":0,\"mismatched\":0,"
          "\"max_abs_err\":0,\"max_ulps\":-1,\"mismatches\":[{\"index\":[0]}]}\n",
          "mismatches[0]: missing key \"expected\"" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"PASS\",\"message\":\"\",\"repro\":\"\",\"seconds\":0,\"compared\":0,\"mismatched\":0,"
          "\"max_abs_err\":0,\"max_ulps\":-1,\"mismatches\":[],\"extra\":1}\n",
          "unknown key \"extra\"" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"FAIL\",\"message\":\"\",\"seconds\":0,\"compared\":20,\"mismatched\":1,"
          "\"max_abs_err\":1,\"max_ulps\":1,\"mismatches\":[],\"heat\":[4,5,3,5,0,1]}\n",
          "a 3x5 grid does not fit an output of 4 x 5" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"FAIL\",\"message\":\"\",\"seconds\":0,\"compared\":20,\"mismatched\":1,"
          "\"max_abs_err\":1,\"max_ulps\":1,\"mismatches\":[],\"heat\":[4,5,4,5,20,1]}\n",
          "\"heat\"[4]: cell 20 of 20" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"FAIL\",\"message\":\"\",\"seconds\":0,\"compared\":20,\"mismatched\":1,"
          "\"max_abs_err\":1,\"max_ulps\":1,\"mismatches\":[],\"heat\":[4,5,4,5,2,0]}\n",
          "count 0 (1..65535)" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"FAIL\",\"message\":\"\",\"seconds\":0,\"compared\":20,\"mismatched\":1,"
          "\"max_abs_err\":1,\"max_ulps\":1,\"mismatches\":[],\"heat\":[4,5,4,5,2]}\n",
          "expected [rows, cols, grows, gcols, cell, count, ...], got 5 numbers" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"FAIL\",\"message\":\"\",\"seconds\":0,\"compared\":20,\"mismatched\":1,"
          "\"max_abs_err\":1,\"max_ulps\":1,\"mismatches\":[],\"heat\":[4,5,4,-5]}\n",
          "\"heat\"[3]: expected an integer >= 0" },
        { "{\"case_id\":\"b\",\"op\":\"b\",\"check\":\"golden\",\"backend\":\"cpu\",\"dtype\":\"f32\","
          "\"status\":\"FAIL\",\"message\":\"\",\"seconds\":0,\"compared\":20,\"mismatched\":1,"
          "\"max_abs_err\":1,\"max_ulps\":1,\"mismatches\":[],\"heat\":{}}\n",
          "\"heat\": expected an array, got an object" },
    };
    kv_result_list out = { 0 };
    push(&out, a);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fwrite(good, 1, n1, f);
        fputs(bad[i].line, f);
        fputs(l3, f);
        fclose(f);
        assert_int_equal(kv_merge_read_jsonl(path, &out), KV_ERR_INVALID_ARG);
        const char *msg = kv_last_error_message();
        char where[600];
        snprintf(where, sizeof where, "%s:2: ", path);
        after(msg, where);
        after(msg, bad[i].why);
        assert_int_equal(out.n, 1); /* nothing appended */
    }

    /* a truncated last line */
    FILE *f = fopen(path, "wb");
    fwrite(good, 1, strlen(good) - 1, f);
    fclose(f);
    assert_int_equal(kv_merge_read_jsonl(path, &out), KV_ERR_INVALID_ARG);
    char where[600];
    snprintf(where, sizeof where, "%s:3: the last line has no newline", path);
    after(kv_last_error_message(), where);

    /* a whole line lost: the count in meta.json no longer matches */
    f = fopen(path, "wb");
    fwrite(good, 1, (size_t)(l3 - good), f);
    fclose(f);
    const char *dirs[] = { dir };
    assert_int_equal(kv_merge_dirs(dirs, 1, &out, NULL), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "has 2 results but");
    after(kv_last_error_message(), "records 3");

    /* a valid, untouched file reads */
    spit(path, good);
    assert_int_equal(kv_merge_read_jsonl(path, &out), KV_OK);
    assert_int_equal(out.n, 4);

    /* a malformed meta.json */
    char *mpath = path_in(dir, KV_REPORT_META);
    spit(mpath, "{\"format\":\"kvsuite-report\",\"version\":2}\n");
    assert_int_equal(kv_merge_dirs(dirs, 1, &out, NULL), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "version 2");

    free(mpath);
    kv_result_list_free(&out);
    free(good);
    free(path);
    remove_tree(dir);
}

/* ---- baseline ---- */

static void test_baseline_apply(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    char *path = path_in(dir, "baseline.txt");
    spit(path, "# known failures of the sim bring-up\n"
               "mul.Tensor(dtype=f32,shape=[2,3])   golden   # exact ID: brackets are literal\n"
               "\n"
               "div.Tensor(*\n"
               "\tsum(dtype=f16*)\tvariants:*\n"
               "lit\\*star(dtype=f32)\n");
    kv_baseline *b = kv_baseline_load(path);
    assert_non_null(b);
    assert_int_equal(kv_baseline_count(b), 4);
    assert_int_equal(kv_baseline_match(b, "mul.Tensor(dtype=f32,shape=[2,3])", "golden"), 2);
    /* fnmatch would read [2,3] as a character class and match this one */
    assert_int_equal(kv_baseline_match(b, "mul.Tensor(dtype=f32,shape=2)", "golden"), 0);
    assert_int_equal(kv_baseline_match(b, "mul.Tensor(dtype=f32,shape=x2,3])", "golden"), 0);
    assert_int_equal(kv_baseline_match(b, "div.Tensor(dtype=f64)", "anything"), 4);
    assert_int_equal(kv_baseline_match(b, "div.Tensor", "golden"), 0);
    assert_int_equal(kv_baseline_match(b, "sum(dtype=f16,shape=[3])", "variants:cpu/ref"), 5);
    assert_int_equal(kv_baseline_match(b, "sum(dtype=f16,shape=[3])", "golden"), 0);
    assert_int_equal(kv_baseline_match(b, "lit*star(dtype=f32)", "golden"), 6);
    assert_int_equal(kv_baseline_match(b, "litXstar(dtype=f32)", "golden"), 0);

    kv_result_list l = { 0 };
    push(&l, mul_failure());                                                                               /* 0 -> XFAIL */
    push(&l, mk("mul.Tensor(dtype=f32,shape=[2,3])", "mul.Tensor", "memory", "cpu", KV_F32, KV_RESULT_FAIL, "")); /* other check */
    push(&l, mk("div.Tensor(dtype=f32)", "div.Tensor", "golden", "cpu", KV_F32, KV_RESULT_CRASH, "signal 11")); /* -> XFAIL */
    push(&l, mk("div.Tensor(dtype=f64)", "div.Tensor", "golden", "cpu", KV_F64, KV_RESULT_PASS, ""));      /* stays: its entry still excuses a failure */
    push(&l, mk("div.Tensor(dtype=i32)", "div.Tensor", "golden", "cpu", KV_I32, KV_RESULT_ERROR, "golden missing")); /* stays */
    push(&l, mk("div.Tensor(dtype=i64)", "div.Tensor", "golden", "sim", KV_I64, KV_RESULT_UNSUPPORTED, "")); /* stays */
    push(&l, mk("sum(dtype=f16)", "sum", "variants:sim/x", "sim", KV_F16, KV_RESULT_PASS, ""));             /* -> XPASS */
    push(&l, mk("sum(dtype=f16)", "sum", "golden", "cpu", KV_F16, KV_RESULT_FAIL, ""));                    /* stays */
    push(&l, mk("add.Tensor(dtype=f32)", "add.Tensor", "golden", "cpu", KV_F32, KV_RESULT_FAIL, ""));       /* stays */
    int nx = -1, np = -1;
    kv_baseline_apply(b, &l, &nx, &np);
    assert_int_equal(nx, 2);
    assert_int_equal(np, 1);
    static const kv_result_status want[] = { KV_RESULT_XFAIL, KV_RESULT_FAIL,        KV_RESULT_XFAIL,
                                             KV_RESULT_PASS,  KV_RESULT_ERROR,       KV_RESULT_UNSUPPORTED,
                                             KV_RESULT_XPASS, KV_RESULT_FAIL,        KV_RESULT_FAIL };
    for (int i = 0; i < l.n; i++) assert_int_equal(l.items[i].status, want[i]);
    char expect[700];
    snprintf(expect, sizeof expect, "expected by baseline %s:2 (was FAIL): mul.Tensor: output 0 differs from golden",
             path);
    assert_string_equal(l.items[0].message, expect);
    after(l.items[2].message, "(was CRASH): signal 11");
    snprintf(expect, sizeof expect, "baseline %s:5 expects a failure", path);
    after(l.items[6].message, expect);
    /* applying again changes nothing: XFAIL/XPASS are final */
    kv_baseline_apply(b, &l, &nx, &np);
    assert_int_equal(nx, 0);
    assert_int_equal(np, 0);

    kv_result_list ok = { 0 };
    push(&ok, mul_failure());
    kv_baseline_apply(b, &ok, NULL, NULL);
    assert_int_equal(kv_report_exit_code(&ok), 0); /* the only failure is expected */
    kv_result_list_free(&ok);

    kv_baseline_free(b);
    kv_result_list_free(&l);
    free(path);
    remove_tree(dir);
}

/* Entries per (case, check, backend): the backend field, names checked,
 * entries that match nothing and stale ones named (issue 13, item 4). */
static void test_baseline_backend_and_notes(void **state) {
    (void)state;
    kv_baseline *b = kv_baseline_parse("neg(*) variants:SIM sim\n"  /* 1: excuses the sim failure */
                                       "neg(*) golden cpu\n"        /* 2: stale: golden passes */
                                       "nope(*) golden\n"           /* 3: matches nothing */
                                       "neg(*) variants:* accel\n", /* 4: no accel row failed or passed */
                                       "bl.txt");
    assert_non_null(b);
    const char *names[] = { "cpu", "accel", "sim" };
    assert_int_equal(kv_baseline_validate(b, names, 3), KV_OK);
    kv_result_list l = { 0 };
    push(&l, mk("neg(dtype=f32)", "neg", "variants:SIM", "sim", KV_F32, KV_RESULT_FAIL, "wrong"));
    push(&l, mk("neg(dtype=f32)", "neg", "variants:SIM", "cpu", KV_F32, KV_RESULT_FAIL, "other backend"));
    push(&l, mk("neg(dtype=f32)", "neg", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
    kv_baseline_apply(b, &l, NULL, NULL);
    assert_int_equal(l.items[0].status, KV_RESULT_XFAIL);
    assert_int_equal(l.items[1].status, KV_RESULT_FAIL); /* the backend field differs */
    assert_int_equal(l.items[2].status, KV_RESULT_XPASS);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    assert_int_equal(kv_baseline_notes(b, mem), 3);
    fclose(mem);
    after(text, "bl.txt:2: entry 'neg(*) golden cpu' is stale");
    after(text, "bl.txt:3: entry 'nope(*) golden' matches no row");
    after(text, "bl.txt:4: entry 'neg(*) variants:* accel' matches no row");
    free(text);
    kv_result_list_free(&l);
    kv_baseline_free(b);

    b = kv_baseline_parse("neg(*) golde\n", "bl.txt");
    assert_int_equal(kv_baseline_validate(b, names, 3), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "bl.txt:1: unknown check 'golde'");
    kv_baseline_free(b);
    b = kv_baseline_parse("neg(*) variants:* simm\n", "bl.txt");
    assert_int_equal(kv_baseline_validate(b, names, 3), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "bl.txt:1: unknown backend 'simm'");
    kv_baseline_free(b);
}

static void test_baseline_malformed(void **state) {
    (void)state;
    assert_null(kv_baseline_parse("ok(dtype=f32)\n# fine\nfour fields here now\n", "bl.txt"));
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "baseline: bl.txt:3: column 18: a fourth field");
    assert_null(kv_baseline_parse("a\nb golden\nends\\\n", "bl.txt"));
    after(kv_last_error_message(), "bl.txt:3:");
    assert_null(kv_baseline_parse("a\x01" "b\n", "bl.txt"));
    after(kv_last_error_message(), "bl.txt:1: column 2: control character 0x01");
    /* comments and blank lines only: an empty baseline, not an error */
    kv_baseline *b = kv_baseline_parse("# nothing\n\n   \t\n", "empty");
    assert_non_null(b);
    assert_int_equal(kv_baseline_count(b), 0);
    kv_baseline_free(b);
    assert_null(kv_baseline_load("/nonexistent/kv-baseline.txt"));
    after(kv_last_error_message(), "'/nonexistent/kv-baseline.txt': No such file or directory");
}

/* ---- HTML ---- */

static void test_html(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    char *path = path_in(dir, "report.html");
    kv_result_list l = { 0 };
    push(&l, mk("pass.case(dtype=f32)", "pass.case", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
    kv_check_result f = mul_failure();
    snprintf(f.message, sizeof f.message, "<script>alert('x')</script> & more");
    push(&l, f);
    push(&l, mk("pass.case(dtype=f64)", "pass.case", "golden", "cpu", KV_F64, KV_RESULT_PASS, ""));
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    snprintf(meta.run_name, sizeof meta.run_name, "<script>run</script>");
    assert_int_equal(kv_report_write_html(&l, &meta, path), KV_OK);
    char *html = slurp(path);
    const char *fail_pos = after(html, "mul.Tensor(dtype=f32,shape=[2,3])");
    /* failures first, with their diff table, before every summary */
    const char *diff_pos = after(html, "<td><code>[1,2]</code></td>");
    assert_true(diff_pos < after(html, "<h2 id=\"matrix\">"));
    assert_true(fail_pos < after(html, "<h2 id=\"matrix\">"));
    /* the support matrix (op x backend) and the per-op counts */
    const char *support = after(html, "<h2 id=\"support\">");
    after(support, "<tr><th>op</th><th>cpu</th></tr>");
    after(support, "<tr><th><code>mul.Tensor</code></th><td class=\"st-FAIL\">FAIL</td></tr>");
    const char *ops = after(html, "<h2 id=\"ops\">");
    after(ops, "<tr><th><code>pass.case</code></th><td class=\"num st-PASS\">2</td>");
    /* the full row list stays in results.jsonl, not on the page */
    const char *all = after(html, "<h2 id=\"results\">");
    after(all, "All 3 rows");
    assert_null(strstr(html, "pass.case(dtype=f32)"));
    assert_null(strstr(html, "<script"));
    after(html, "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more");
    after(html, "&lt;script&gt;run&lt;/script&gt;");
    /* the diff table of the failure */
    after(fail_pos, "<td><code>[1,2]</code></td><td class=\"num\">1</td><td class=\"num\">1.5</td>");
    /* the index of groups links to the first card, which names its layout */
    const char *groups = after(html, "<h3 id=\"groups\">By op, check and backend: 1 failing rows in 1 groups</h3>");
    assert_true(groups < fail_pos);
    after(groups, "<tr><td class=\"st-FAIL\">FAIL</td><td><code>mul.Tensor</code></td><td>golden</td><td>cpu</td>"
                  "<td class=\"num\">1</td><td>c</td><td>f32</td><td><a href=\"#f0\">card</a></td></tr>");
    after(html, "<div class=\"problem\" id=\"f0\">");
    after(fail_pos, "<th>layout</th><th>dtype</th>");
    after(html, "<p class=\"final\">2 passed, 1 failed, 0 skipped</p>");
    /* matrix: worst status per op x dtype */
    const char *matrix = after(html, "<h2 id=\"matrix\">");
    after(matrix, "<tr><th>op</th><th>f32</th><th>f64</th></tr>");
    after(matrix, "<tr><th><code>mul.Tensor</code></th><td class=\"st-FAIL\"");
    after(matrix, "<tr><th><code>pass.case</code></th><td class=\"st-PASS\"");
    /* a plot, inline: gnuplot's SVG, or where gnuplot is missing (CI
     * installs it) the sentence saying so; the failure gets its heat map */
    const char *plots = after(html, "<h2 id=\"errors\">");
    if (strstr(plots, "<svg") == NULL) after(plots, "gnuplot is not installed");
    const char *heat = after(fail_pos, "<svg class=\"heat\"");
    assert_true(heat < after(html, "<h2 id=\"matrix\">"));
    /* both wrong elements, each in its cell, all of each cell wrong */
    after(heat, "<path fill=\"#4a148c\" d=\"M0 0h1v1h-1zM2 1h1v1h-1z\"/>");
    after(heat, "2 of 6 elements differ. The whole output, 2 rows");
    assert_null(strstr(html, "<link"));
    assert_null(strstr(html, "src="));
    free(html);
    kv_result_list_free(&l);
    free(path);
    remove_tree(dir);
}

/* A run with 10,000 failing rows, each as large as a row gets (a full
 * message ending in a tolerance rationale, a full repro line, 8
 * mismatches, a wholly wrong 32 x 32 heat grid; 250 groups), still gives a
 * report.html within 1 MiB, the limit tests/html_render.sh holds pages
 * to: the writer's card count and byte budget (report_html.c) keep it
 * there. The rationale is given once, each card names its rule. */
static void test_html_many_failures(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    char *path = path_in(dir, "report.html");
    const kv_tol_entry *e = kv_tol_lookup("exp", KV_F32, NULL);
    assert_non_null(e);
    kv_report_agg a;
    kv_report_agg_init(&a);
    kv_check_result *r = calloc(1, sizeof *r);
    assert_non_null(r);
    enum { ROWS = 10000 };
    for (int i = 0; i < ROWS; i++) {
        memset(r, 0, sizeof *r);
        snprintf(r->op, sizeof r->op, "op%03d", i % 250);
        int n = snprintf(r->case_id, sizeof r->case_id, "%s(dtype=f32,shape=[64,64],layout=t,", r->op);
        while (n < (int)sizeof r->case_id - 8) n += snprintf(r->case_id + n, sizeof r->case_id - (size_t)n, "x%d,", i);
        snprintf(r->check, sizeof r->check, "variants:npu");
        snprintf(r->backend, sizeof r->backend, "npu");
        r->dtype = KV_F32;
        r->status = KV_RESULT_FAIL;
        n = snprintf(r->message, sizeof r->message, "output 0: 4096 of 4096 elements differ (max abs err 1, max ulp 9) ");
        while (n < (int)sizeof r->message - (int)strlen(e->reason) - 20) n += snprintf(r->message + n, sizeof r->message - (size_t)n, "<&>");
        snprintf(r->message + n, sizeof r->message - (size_t)n, " [ulp:2: %s]", e->reason);
        memset(r->repro, 'r', sizeof r->repro - 1);
        r->compared = r->mismatched = 4096;
        r->max_abs_err = 1;
        r->max_ulps = 9;
        r->nmismatches = KV_RESULT_MAX_MISMATCHES;
        for (int k = 0; k < KV_RESULT_MAX_MISMATCHES; k++)
            r->mismatches[k] = (kv_mismatch){ .index = { k, 63 - k }, .ndim = 2, .expected = 1.0 / 3, .got = -2.0 / 3,
                                              .abs_err = 1, .rel_err = 3, .ulps = 9 };
        r->heat = (kv_heat){ .rows = 64, .cols = 64, .grows = 32, .gcols = 32 };
        for (int k = 0; k < 32 * 32; k++) r->heat.cells[k] = 4;
        assert_int_equal(kv_report_agg_add(&a, r), KV_OK);
    }
    kv_report_agg_finish(&a);
    assert_int_equal(kv_report_html_agg(&a, NULL, path), KV_OK);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    if (st.st_size > 1024 * 1024) fail_msg("report.html of %d failing rows: %lld bytes, over 1 MiB", ROWS, (long long)st.st_size);
    char *html = slurp(path);
    /* some cards with heat maps, the rest counted; the rationale once */
    after(html, "<div class=\"problem\" id=\"f0\">");
    after(html, "<svg class=\"heat\"");
    after(html, "more failing rows: every one is in");
    /* its tail: the page escapes an apostrophe the rationale may have */
    const char *tail = strrchr(e->reason, '\'') ? strrchr(e->reason, '\'') + 1 : e->reason;
    const char *why = after(html, tail);
    assert_null(strstr(why + 1, tail));
    after(html, "<td><a href=\"#tol0\">ulp:2</a></td>");
    after(html, "<dt id=\"tol0\"><b>ulp:2</b>");
    free(html);
    kv_report_agg_free(&a);
    free(r);
    free(path);
    remove_tree(dir);
}

/* ---- matrix.md ---- */

static void test_matrix_md(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    char *path = path_in(dir, "matrix.md");
    kv_result_list l = { 0 };
    /* inserted out of order: rows come out sorted by op, then backend */
    push(&l, mk("mul(dtype=f32)", "mul", "golden", "cpu", KV_F32, KV_RESULT_XFAIL, ""));
    push(&l, mk("add(dtype=f32)", "add", "golden", "sim", KV_F32, KV_RESULT_UNSUPPORTED, ""));
    push(&l, mk("add(dtype=f32)", "add", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
    push(&l, mk("add(dtype=f32)", "add", "memory", "cpu", KV_F32, KV_RESULT_FAIL, ""));
    push(&l, mk("add(dtype=f64)", "add", "golden", "cpu", KV_F64, KV_RESULT_PASS, ""));
    push(&l, mk("add(dtype=f64)", "add", "golden", "sim", KV_F64, KV_RESULT_SKIP, ""));
    push(&l, mk("mul(dtype=f64)", "mul", "golden", "cpu", KV_F64, KV_RESULT_XPASS, ""));
    push(&l, mk("_to|copy(dtype=f64)", "_to|copy", "golden", "cpu", KV_F64, KV_RESULT_ERROR, ""));
    assert_int_equal(kv_report_write_matrix(&l, NULL, path), KV_OK);
    char *md = slurp(path);
    const char *table = after(md, "| op | backend | f32 | f64 |\n|---|---|:-:|:-:|\n");
    const char *rows = "| \\_to\\|copy | cpu |   | ✗ |\n"
                       "| add | cpu | ✗ | ✓ |\n"
                       "| add | sim | – |   |\n"
                       "| mul | cpu | ✗ | ✓ |\n";
    assert_string_equal(table + strlen("| op | backend | f32 | f64 |\n|---|---|:-:|:-:|\n"), rows);
    free(md);
    kv_result_list_free(&l);
    free(path);
    remove_tree(dir);
}

/* ---- write errors ---- */

static void test_write_errors(void **state) {
    (void)state;
    char *dir = make_tmpdir();
    char *file = path_in(dir, "plain");
    spit(file, "x");
    char *under = path_in(file, "sub");
    kv_result_list l = { 0 };
    push(&l, mk("a(dtype=f32)", "a", "golden", "cpu", KV_F32, KV_RESULT_PASS, ""));
    assert_int_equal(kv_report_write_all(&l, NULL, under), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), under);
    assert_int_equal(kv_report_write_jsonl(&l, "/nonexistent-kv-dir/results.jsonl"), KV_ERR_INVALID_ARG);
    after(kv_last_error_message(), "cannot write '/nonexistent-kv-dir/results.jsonl'");
    after(kv_last_error_message(), "No such file or directory");
    /* a failed writer leaves no file behind */
    struct stat sb;
    assert_int_not_equal(stat("/nonexistent-kv-dir/results.jsonl", &sb), 0);
    /* an existing report folder is fine, files are replaced */
    assert_int_equal(kv_report_write_all(&l, NULL, dir), KV_OK);
    assert_int_equal(kv_report_write_all(&l, NULL, dir), KV_OK);
    char *tmp = path_in(dir, "results.jsonl.tmp");
    assert_int_not_equal(stat(tmp, &sb), 0);
    free(tmp);
    kv_result_list_free(&l);
    free(under);
    free(file);
    remove_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names),    cmocka_unit_test(test_list_push_counts),
        cmocka_unit_test(test_console_summary), cmocka_unit_test(test_console_empty),
        cmocka_unit_test(test_console_short_summary),
        cmocka_unit_test(test_exit_code),       cmocka_unit_test(test_flaky_and_incomplete),
        cmocka_unit_test(test_junit_valid),
        cmocka_unit_test(test_jsonl_round_trip), cmocka_unit_test(test_merge_shards), cmocka_unit_test(test_merge_holds_no_rows),
        cmocka_unit_test(test_merge_malformed), cmocka_unit_test(test_baseline_apply),
        cmocka_unit_test(test_baseline_backend_and_notes),
        cmocka_unit_test(test_baseline_malformed), cmocka_unit_test(test_html),
        cmocka_unit_test(test_html_many_failures),
        cmocka_unit_test(test_matrix_md),       cmocka_unit_test(test_write_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
