/* The runner pipeline end to end (runner/driver.h, runner/isolate.h,
 * src/tools/kvrun.c): collection, selection, shards, --list, golden
 * regeneration and verification, forked isolation with a wrong, a
 * crashing, a hanging and an out-of-bounds-writing kernel, baselines and
 * the command line's usage errors.
 *
 * The test ops and their kernels are registered here only (kv_op_register
 * + kv_register_kernel at CPU). Goldens are generated once with correct
 * kernels; then the bad kernels are swapped in, so every expectation
 * below is what a correct runner must report for a known defect. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/kv.h"
#include "runner/exec/driver.h"
#include "runner/golden/golden.h"
#include "runner/report/merge.h"
#include "runner/report/report.h"
#include "test_util.h"

/* ---- test kernels: y = 2 * x, f32, any strides ---- */

typedef enum kvt_mode { KVT_GOOD, KVT_WRONG, KVT_CRASH, KVT_HANG, KVT_OOB } kvt_mode;

static kv_status kvt_kernel(kv_stack *s, kvt_mode mode) {
    kv_tensor *x = kv_arg_tensor(s, 0);
    if (x == NULL || x->dtype != KV_F32) return kv_error(KV_ERR_DTYPE, "kvt: argument 'self': f32 only");
    if (mode == KVT_CRASH) raise(SIGSEGV);
    if (mode == KVT_HANG) {
        for (;;) sleep(1);
    }
    kv_tensor *y = kv_tensor_empty(x->sizes, x->ndim, KV_F32, x->device);
    if (y == NULL) return kv_last_error();
    const int64_t n = kv_tensor_numel(x);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t e = 0; e < n; e++) {
        double v = 2.0 * kv_tensor_get_f64(x, idx);
        if (mode == KVT_WRONG && e == 0) v += 1.0;
        kv_tensor_set_f64(y, idx, v);
        kv_test_next_index(x, idx);
    }
    if (mode == KVT_OOB) {
        /* One element past the end: inside the slack of the default CPU
         * allocator (which rounds 80 bytes up to 128), inside the redzone
         * of the memory check's guarded allocator. */
        volatile float *p = kv_tensor_data(y);
        p[n] = 12345.0f;
    }
    kv_stack_return_tensor(s, y);
    return KV_OK;
}

static kv_status kvt_good(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op, (void)ks;
    return kvt_kernel(s, KVT_GOOD);
}
static kv_status kvt_wrong(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op, (void)ks;
    return kvt_kernel(s, KVT_WRONG);
}
static kv_status kvt_crash(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op, (void)ks;
    return kvt_kernel(s, KVT_CRASH);
}
static kv_status kvt_hang(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op, (void)ks;
    return kvt_kernel(s, KVT_HANG);
}
static kv_status kvt_oob(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op, (void)ks;
    return kvt_kernel(s, KVT_OOB);
}

static const char *const kvt_ops[] = { "kvt_good", "kvt_wrong", "kvt_crash", "kvt_hang", "kvt_oob" };
#define KVT_NOPS 5

/* Case order of the suite file, as expansion gives it. */
static const char *const kvt_ids[] = {
    "kvt_good(dtype=f32,shape=[4,5],check=golden+memory)", "kvt_good(dtype=f32,shape=[3],check=golden+memory)",
    "kvt_wrong(dtype=f32,shape=[4,5],check=golden+memory)", "kvt_crash(dtype=f32,shape=[4,5],check=golden+memory)",
    "kvt_hang(dtype=f32,shape=[4,5],check=golden+memory)",  "kvt_oob(dtype=f32,shape=[4,5],check=golden+memory)",
};
#define KVT_NCASES 6

static const char kvt_suite[] = "# the driver test suite\n"
                                "--dtype=f32 --check=golden,memory\n"
                                "--op=kvt_good --shape=4x5,3\n"
                                "--op=kvt_wrong --shape=4x5\n"
                                "--op=kvt_crash --shape=4x5\n"
                                "--op=kvt_hang --shape=4x5\n"
                                "--op=kvt_oob --shape=4x5\n";

static char g_tmp[256];
static char g_suite[300];
static char g_golden[300];
static int g_runs;

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t k;
    while (b != NULL && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) b = realloc(b, cap *= 2);
    }
    fclose(f);
    if (b) b[n] = '\0';
    if (len) *len = n;
    return b;
}

static void load_suite(kv_case_list *cases) {
    memset(cases, 0, sizeof *cases);
    kv_status st = kv_cases_from_file(g_suite, cases);
    if (st != KV_OK) fail_msg("loading %s: %s", g_suite, kv_last_error_message());
    assert_int_equal(cases->n, KVT_NCASES);
}

static void set_kernels(bool bad) {
    kv_kernel_fn good[KVT_NOPS] = { kvt_good, kvt_good, kvt_good, kvt_good, kvt_good };
    kv_kernel_fn badk[KVT_NOPS] = { kvt_good, kvt_wrong, kvt_crash, kvt_hang, kvt_oob };
    for (int i = 0; i < KVT_NOPS; i++) {
        assert_int_equal(kv_register_kernel(kvt_ops[i], KV_KEY_CPU, bad ? badk[i] : good[i]), KV_OK);
    }
}

/* A fresh report folder per run, so no run reads another's results. */
static void next_report_dir(char *buf, size_t cap) { snprintf(buf, cap, "%s/reports-%d", g_tmp, ++g_runs); }

typedef struct run_out {
    int rc;
    char *out, *err;
    kv_result_list rows;
} run_out;

static void run_driver(kv_driver_options *o, const kv_case_list *cases, run_out *r) {
    char rdir[400];
    next_report_dir(rdir, sizeof rdir);
    o->report_dir = rdir;
    if (o->golden_dir == NULL) o->golden_dir = g_golden;
    FILE *out = tmpfile(), *err = tmpfile();
    assert_non_null(out);
    assert_non_null(err);
    o->err = err;
    memset(r, 0, sizeof *r);
    r->rc = kv_driver_run(o, cases, out);
    r->out = kv_test_slurp_stream(out);
    r->err = kv_test_slurp_stream(err);
    fclose(out);
    fclose(err);
    o->err = NULL;
    char path[500];
    snprintf(path, sizeof path, "%s/%s", rdir, KV_REPORT_JSONL);
    struct stat sb;
    if (stat(path, &sb) == 0 && kv_merge_read_jsonl(path, &r->rows) != KV_OK) {
        fail_msg("reading %s: %s", path, kv_last_error_message());
    }
}

static void run_free(run_out *r) {
    free(r->out);
    free(r->err);
    kv_result_list_free(&r->rows);
}

static int rows_of(const run_out *r, const char *id, const kv_check_result **first) {
    int n = 0;
    *first = NULL;
    for (int i = 0; i < r->rows.n; i++) {
        if (strcmp(r->rows.items[i].case_id, id) != 0) continue;
        if (n++ == 0) *first = &r->rows.items[i];
    }
    return n;
}

static bool has_row(const run_out *r, const char *id, const char *check_prefix, kv_result_status st) {
    for (int i = 0; i < r->rows.n; i++) {
        const kv_check_result *x = &r->rows.items[i];
        if (strcmp(x->case_id, id) == 0 && strncmp(x->check, check_prefix, strlen(check_prefix)) == 0 &&
            x->status == st)
            return true;
    }
    return false;
}

static void assert_all_pass(const run_out *r, const char *id) {
    const kv_check_result *first;
    const int n = rows_of(r, id, &first);
    if (n == 0) fail_msg("no results for %s", id);
    for (int i = 0; i < r->rows.n; i++) {
        const kv_check_result *x = &r->rows.items[i];
        if (strcmp(x->case_id, id) == 0 && x->status != KV_RESULT_PASS)
            fail_msg("%s [%s]: %s: %s", id, x->check, kv_result_status_name(x->status), x->message);
    }
}

/* "N passed, N failed, N skipped" as the last line of the console. */
static void last_line_counts(const char *out, long *p, long *f, long *s) {
    const char *end = out + strlen(out);
    while (end > out && end[-1] == '\n') end--;
    const char *line = end;
    while (line > out && line[-1] != '\n') line--;
    char buf[200];
    snprintf(buf, sizeof buf, "%.*s", (int)(end - line), line);
    if (sscanf(buf, "%ld passed, %ld failed, %ld skipped", p, f, s) != 3) fail_msg("last line: '%s'", buf);
}

/* Golden file of case kvt_good(shape=[4,5]), for the corruption tests. */
static void good_golden_path(char *buf, size_t cap) {
    kv_golden_store *s = kv_golden_open(g_golden);
    assert_non_null(s);
    const kv_golden_entry *hit = NULL;
    for (int i = 0; i < kv_golden_count(s); i++) {
        const kv_golden_entry *e = kv_golden_entry_at(s, i);
        if (strncmp(e->key, "kvt_good(", 9) == 0 && e->ndim == 2 && e->sizes[0] == 4 && e->sizes[1] == 5) hit = e;
    }
    assert_non_null(hit);
    assert_non_null(hit->file);
    snprintf(buf, cap, "%s/%s", g_golden, hit->file);
    kv_golden_close(s);
}

/* ---- setup: ops, suite file, goldens from the good kernels ---- */

static int group_setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    for (int i = 0; i < KVT_NOPS; i++) {
        char schema[128];
        snprintf(schema, sizeof schema, "%s(Tensor self) -> Tensor", kvt_ops[i]);
        if (kv_op_register(schema, NULL) != KV_OK) {
            fprintf(stderr, "register %s: %s\n", schema, kv_last_error_message());
            return -1;
        }
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kv_test_driver_XXXXXX");
    if (mkdtemp(g_tmp) == NULL) return -1;
    snprintf(g_suite, sizeof g_suite, "%s/suite.case", g_tmp);
    snprintf(g_golden, sizeof g_golden, "%s/golden", g_tmp);
    FILE *f = fopen(g_suite, "w");
    if (f == NULL) return -1;
    fputs(kvt_suite, f);
    fclose(f);
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    char cmd[400];
    /* Only our own mkdtemp folder. */
    if (strncmp(g_tmp, "/tmp/kv_test_driver_", 20) == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) return -1;
    }
    return 0;
}

/* ---- tests ---- */

static void test_regen_creates_goldens(void **state) {
    (void)state;
    set_kernels(false);
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.regen_golden = true;
    o.regen_full = true;
    run_out r;
    run_driver(&o, &cases, &r);
    if (r.rc != 0) fail_msg("regen rc %d\nout:\n%s\nerr:\n%s", r.rc, r.out, r.err);
    /* Regeneration runs in-process: it says so, and the summary names the
     * six new keys (each op's one output). */
    assert_non_null(strstr(r.err, "--isolate=none"));
    assert_non_null(strstr(r.out, "6 added, 0 changed, 0 unchanged, 0 removed"));
    kv_golden_store *s = kv_golden_open(g_golden);
    assert_non_null(s);
    assert_true(kv_golden_has_manifest(s));
    assert_int_equal(kv_golden_count(s), 6);
    kv_golden_close(s);
    run_free(&r);

    /* A second regeneration changes nothing. */
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(r.out, "0 added, 0 changed, 6 unchanged, 0 removed"));
    run_free(&r);

    /* With the good kernels a normal run is green. */
    kv_driver_options_init(&o);
    o.jobs = 2;
    o.timeout_seconds = 5;
    run_driver(&o, &cases, &r);
    if (r.rc != 0) fail_msg("good run rc %d\nout:\n%s\nerr:\n%s", r.rc, r.out, r.err);
    for (int i = 0; i < KVT_NCASES; i++) assert_all_pass(&r, kvt_ids[i]);
    run_free(&r);
    kv_case_list_free(&cases);
}

static void test_isolation_statuses(void **state) {
    (void)state;
    set_kernels(true);
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.jobs = 2;
    o.timeout_seconds = 2;
    run_out r;
    run_driver(&o, &cases, &r);
    set_kernels(false);
    assert_int_equal(r.rc, 1);

    /* Every case has rows, in case order (whatever finished first). */
    int at = 0;
    for (int i = 0; i < r.rows.n; i++) {
        while (at < KVT_NCASES && strcmp(r.rows.items[i].case_id, kvt_ids[at]) != 0) at++;
        if (at == KVT_NCASES) fail_msg("row %d (%s) out of case order", i, r.rows.items[i].case_id);
    }
    const kv_check_result *x;
    for (int i = 0; i < KVT_NCASES; i++) {
        if (rows_of(&r, kvt_ids[i], &x) == 0) fail_msg("no rows for %s", kvt_ids[i]);
    }

    assert_all_pass(&r, kvt_ids[0]);
    assert_all_pass(&r, kvt_ids[1]);
    assert_true(has_row(&r, kvt_ids[2], "golden", KV_RESULT_FAIL));

    assert_int_equal(rows_of(&r, kvt_ids[3], &x), 1);
    assert_int_equal(x->status, KV_RESULT_CRASH);
    assert_string_equal(x->check, "case");
    assert_non_null(strstr(x->message, "SIGSEGV"));
    assert_non_null(strstr(x->message, strsignal(SIGSEGV)));
    assert_non_null(strstr(x->repro, "--op=kvt_crash"));

    assert_int_equal(rows_of(&r, kvt_ids[4], &x), 1);
    assert_int_equal(x->status, KV_RESULT_TIMEOUT);
    assert_non_null(strstr(x->message, "2 s timeout"));
    assert_true(x->seconds >= 2.0);

    assert_true(has_row(&r, kvt_ids[5], "memory", KV_RESULT_FAIL));

    long p, f, s;
    last_line_counts(r.out, &p, &f, &s);
    assert_int_equal(p + f + s, r.rows.n);
    assert_true(f >= 4);
    run_free(&r);
    kv_case_list_free(&cases);
}

static void test_isolate_none_in_process(void **state) {
    (void)state;
    /* Only the wrong kernel: the others would take this process down. */
    assert_int_equal(kv_register_kernel("kvt_wrong", KV_KEY_CPU, kvt_wrong), KV_OK);
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.isolate = KV_ISOLATE_NONE;
    const char *flt[] = { "kvt_good*", "kvt_wrong*" };
    o.filters = flt;
    o.nfilters = 2;
    run_out r;
    run_driver(&o, &cases, &r);
    set_kernels(false);
    assert_int_equal(r.rc, 1);
    assert_all_pass(&r, kvt_ids[0]);
    assert_all_pass(&r, kvt_ids[1]);
    assert_true(has_row(&r, kvt_ids[2], "golden", KV_RESULT_FAIL));
    const kv_check_result *x;
    assert_int_equal(rows_of(&r, kvt_ids[3], &x), 0);
    run_free(&r);
    kv_case_list_free(&cases);
}

/* kvrun keeps counts and failures, never every row (README "Performance":
 * its memory is flat in the number of cases): the row slots this process
 * holds at its peak must be the same for 8 and for 32 passing cases, and
 * fewer than the rows the bigger run wrote. A driver that collects every
 * row again fails this. */
static int64_t rows_peak_of_run(int ncases, int64_t *nrows) {
    char path[400];
    snprintf(path, sizeof path, "%s/flat-%d.case", g_tmp, ncases);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("--dtype=f32 --check=memory,variants --fill=exact\n", f); /* no golden: the store has none */
    for (int k = 1; k <= ncases; k++) fprintf(f, "--op=neg --shape=%d\n", k);
    fclose(f);
    kv_case_list cases = { 0 };
    assert_int_equal(kv_cases_from_file(path, &cases), KV_OK);
    assert_int_equal(cases.n, ncases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.jobs = 1;
    char rdir[400];
    next_report_dir(rdir, sizeof rdir);
    o.report_dir = rdir;
    o.golden_dir = g_golden;
    FILE *out = tmpfile(), *err = tmpfile();
    o.err = err;
    kv_result_rows_peak_reset();
    const int64_t before = kv_result_rows_held();
    const int rc = kv_driver_run(&o, &cases, out);
    const int64_t peak = kv_result_rows_peak() - before;
    assert_int_equal(kv_result_rows_held(), before); /* nothing left behind */
    fclose(out);
    fclose(err);
    kv_case_list_free(&cases);
    assert_int_equal(rc, 0);
    char jpath[600];
    snprintf(jpath, sizeof jpath, "%s/%s", rdir, KV_REPORT_JSONL);
    kv_result_list rows = { 0 };
    assert_int_equal(kv_merge_read_jsonl(jpath, &rows), KV_OK);
    *nrows = rows.n;
    kv_result_list_free(&rows);
    return peak;
}

static void test_rows_held_flat(void **state) {
    (void)state;
    int64_t small_rows, big_rows;
    const int64_t small = rows_peak_of_run(8, &small_rows);
    const int64_t big = rows_peak_of_run(32, &big_rows);
    assert_true(big_rows >= 4 * small_rows);
    if (big > small || big >= big_rows)
        fail_msg("row slots held at the peak: %lld for 8 cases (%lld rows), %lld for 32 cases (%lld rows): "
                 "the runner's memory grows with the number of cases",
                 (long long)small, (long long)small_rows, (long long)big, (long long)big_rows);
}

static void test_baseline_xfail_xpass(void **state) {
    (void)state;
    assert_int_equal(kv_register_kernel("kvt_wrong", KV_KEY_CPU, kvt_wrong), KV_OK);
    kv_case_list cases;
    load_suite(&cases);
    char bl[400];
    snprintf(bl, sizeof bl, "%s/baseline.txt", g_tmp);
    const char *known = "kvt_wrong(*) golden  # known bad\n";
    write_file(bl, known, strlen(known));
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.jobs = 2;
    o.timeout_seconds = 5;
    const char *flt[] = { "kvt_good*", "kvt_wrong*" };
    o.filters = flt;
    o.nfilters = 2;
    o.baseline_path = bl;
    run_out r;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 0);
    assert_true(has_row(&r, kvt_ids[2], "golden", KV_RESULT_XFAIL));
    run_free(&r);

    /* An entry for a passing case is stale: XPASS fails the run. */
    const char *stale = "kvt_wrong(*) golden\nkvt_good(dtype=f32,shape=[3],check=golden+memory) golden\n";
    write_file(bl, stale, strlen(stale));
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 1);
    assert_true(has_row(&r, kvt_ids[1], "golden", KV_RESULT_XPASS));
    run_free(&r);

    /* A baseline that cannot be read is a usage error before anything runs. */
    char missing[420];
    snprintf(missing, sizeof missing, "%s/no-such-baseline", g_tmp);
    o.baseline_path = missing;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "--baseline="));
    assert_int_equal(r.rows.n, 0);
    run_free(&r);
    set_kernels(false);
    kv_case_list_free(&cases);
}

static void run_good_case_expect_error(const char *what) {
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.jobs = 1;
    o.timeout_seconds = 5;
    const char *flt[] = { "kvt_good(dtype=f32,shape=[4,5],check=golden+memory)" };
    o.filters = flt;
    o.nfilters = 1;
    run_out r;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 1);
    if (!has_row(&r, kvt_ids[0], "golden", KV_RESULT_ERROR)) {
        fail_msg("%s golden: no golden ERROR row\n%s", what, r.out);
    }
    run_free(&r);
    kv_case_list_free(&cases);
}

static void test_corrupt_golden_is_error(void **state) {
    (void)state;
    char path[700];
    good_golden_path(path, sizeof path);
    size_t n;
    char *orig = read_file(path, &n);
    assert_non_null(orig);
    assert_true(n > 0);
    char *bad = malloc(n);
    memcpy(bad, orig, n);
    bad[n - 1] ^= 0x01; /* one data bit of the last element */
    write_file(path, bad, n);
    run_good_case_expect_error("corrupt");
    write_file(path, orig, n);
    free(bad);
    free(orig);
}

static void test_deleted_golden_is_error(void **state) {
    (void)state;
    char path[700];
    good_golden_path(path, sizeof path);
    size_t n;
    char *orig = read_file(path, &n);
    assert_non_null(orig);
    assert_int_equal(unlink(path), 0);
    run_good_case_expect_error("deleted");
    write_file(path, orig, n);
    free(orig);
}

static void test_shards_partition(void **state) {
    (void)state;
    kv_case_list cases;
    load_suite(&cases);
    /* j % 3 == K-1 over the six cases in file order. */
    const int expect[3][2] = { { 0, 3 }, { 1, 4 }, { 2, 5 } };
    int seen[KVT_NCASES] = { 0 };
    for (int k = 1; k <= 3; k++) {
        kv_driver_options o;
        kv_driver_options_init(&o);
        o.shard_k = k;
        o.shard_n = 3;
        int *sel, nsel;
        assert_int_equal(kv_driver_select(&o, &cases, &sel, &nsel, NULL), KV_OK);
        assert_int_equal(nsel, 2);
        assert_int_equal(sel[0], expect[k - 1][0]);
        assert_int_equal(sel[1], expect[k - 1][1]);
        for (int i = 0; i < nsel; i++) seen[sel[i]]++;
        free(sel);
    }
    for (int i = 0; i < KVT_NCASES; i++) assert_int_equal(seen[i], 1);

    /* Shards apply after the filter: 4 cases left, 2 shards of 2. */
    kv_driver_options o;
    kv_driver_options_init(&o);
    const char *flt[] = { "re:^kvt_(good|hang)" , "kvt_oob*" };
    o.filters = flt;
    o.nfilters = 2;
    o.shard_k = 2;
    o.shard_n = 2;
    int *sel, nsel;
    assert_int_equal(kv_driver_select(&o, &cases, &sel, &nsel, NULL), KV_OK);
    /* filtered: 0 good, 1 good, 4 hang, 5 oob -> j = 1, 3 */
    assert_int_equal(nsel, 2);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 5);
    free(sel);

    /* More shards than cases: the last ones are empty, and a run of an
     * empty shard is an error. */
    o.nfilters = 0;
    o.shard_k = 7;
    o.shard_n = 7;
    o.list_only = true;
    run_out r;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "no cases selected"));
    run_free(&r);
    kv_case_list_free(&cases);
}

/* Shard report folders of one run merge back into the unsharded result. */
static void test_shard_reports_merge(void **state) {
    (void)state;
    set_kernels(false);
    kv_case_list cases;
    load_suite(&cases);
    const char *flt[] = { "kvt_good*", "kvt_wrong*", "kvt_oob*" };
    char dirs[2][400];
    int total = 0;
    for (int k = 1; k <= 2; k++) {
        kv_driver_options o;
        kv_driver_options_init(&o);
        o.jobs = 2;
        o.timeout_seconds = 5;
        o.filters = flt;
        o.nfilters = 3;
        o.shard_k = k;
        o.shard_n = 2;
        run_out r;
        run_driver(&o, &cases, &r);
        assert_int_equal(r.rc, 0);
        /* 4 cases: shard 1 has cases 0 and 2, shard 2 has 1 and 3 */
        const kv_check_result *x;
        assert_true(rows_of(&r, kvt_ids[k == 1 ? 0 : 1], &x) > 0);
        assert_true(rows_of(&r, kvt_ids[k == 1 ? 2 : 5], &x) > 0);
        assert_int_equal(rows_of(&r, kvt_ids[k == 1 ? 1 : 0], &x), 0);
        total += r.rows.n;
        snprintf(dirs[k - 1], sizeof dirs[k - 1], "%s/reports-%d", g_tmp, g_runs);
        run_free(&r);
    }
    const char *d[2] = { dirs[0], dirs[1] };
    kv_result_list merged = { 0 };
    kv_report_meta meta;
    if (kv_merge_dirs(d, 2, &merged, &meta) != KV_OK) fail_msg("merge: %s", kv_last_error_message());
    assert_int_equal(merged.n, total);
    assert_int_equal(meta.ncases, 4);
    assert_int_equal(meta.merged_from, 2);
    kv_result_list_free(&merged);
    kv_case_list_free(&cases);
}

static void test_list_prints_ids(void **state) {
    (void)state;
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    o.list_only = true;
    run_out r;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 0);
    char expect[1024] = "";
    for (int i = 0; i < KVT_NCASES; i++) {
        strcat(expect, kvt_ids[i]);
        strcat(expect, "\n");
    }
    assert_string_equal(r.out, expect);
    assert_int_equal(r.rows.n, 0); /* nothing ran, no report */
    run_free(&r);

    const char *flt[] = { "*shape=[3],*" };
    o.filters = flt;
    o.nfilters = 1;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.out, "kvt_good(dtype=f32,shape=[3],check=golden+memory)\n");
    run_free(&r);
    kv_case_list_free(&cases);
}

static void test_zero_selected_is_error(void **state) {
    (void)state;
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    kv_driver_options_init(&o);
    const char *flt[] = { "nothing_matches*" };
    o.filters = flt;
    o.nfilters = 1;
    run_out r;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "no cases selected"));
    assert_int_equal(r.rows.n, 0);
    run_free(&r);

    kv_case_list empty = { 0 };
    kv_driver_options_init(&o);
    run_driver(&o, &empty, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "no cases selected"));
    run_free(&r);

    /* A bad regex is a usage error too. */
    const char *bad[] = { "re:([" };
    kv_driver_options_init(&o);
    o.filters = bad;
    o.nfilters = 1;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    run_free(&r);
    kv_case_list_free(&cases);
}

static void test_bad_option_values(void **state) {
    (void)state;
    kv_case_list cases;
    load_suite(&cases);
    kv_driver_options o;
    run_out r;

    kv_driver_options_init(&o);
    o.jobs = -1;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "--jobs=-1"));
    run_free(&r);

    kv_driver_options_init(&o);
    o.shard_k = 3;
    o.shard_n = 2;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "--shard=3/2"));
    run_free(&r);

    kv_driver_options_init(&o);
    o.timeout_seconds = -1;
    run_driver(&o, &cases, &r);
    assert_int_equal(r.rc, 2);
    assert_non_null(strstr(r.err, "--timeout=-1"));
    run_free(&r);
    kv_case_list_free(&cases);
}

static void test_duplicates_run_once(void **state) {
    (void)state;
    char path[400];
    snprintf(path, sizeof path, "%s/dup.case", g_tmp);
    const char *text = "--op=kvt_good --shape=4x5\n--op=kvt_good,kvt_wrong --shape=4x5\n";
    write_file(path, text, strlen(text));
    kv_case_list cases = { 0 };
    assert_int_equal(kv_cases_from_file(path, &cases), KV_OK);
    assert_int_equal(cases.n, 3);
    kv_driver_options o;
    kv_driver_options_init(&o);
    FILE *err = tmpfile();
    int *sel, nsel;
    assert_int_equal(kv_driver_select(&o, &cases, &sel, &nsel, err), KV_OK);
    assert_int_equal(nsel, 2);
    assert_int_equal(sel[0], 0); /* the first occurrence stays */
    assert_int_equal(sel[1], 2);
    free(sel);
    char *msg = kv_test_slurp_stream(err);
    fclose(err);
    char where[1000];
    snprintf(where, sizeof where, "%s:2: duplicate case kvt_good(dtype=f32,shape=[4,5]) (first at %s:1)", path,
             path);
    if (strstr(msg, where) == NULL) fail_msg("warning: '%s'", msg);
    free(msg);
    kv_case_list_free(&cases);
}

static void test_collect_sorted_recursive(void **state) {
    (void)state;
    char d[400], p[500];
    snprintf(d, sizeof d, "%s/tree", g_tmp);
    assert_int_equal(mkdir(d, 0777), 0);
    const char *dirs[] = { "b", "b/deep", "a" };
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", d, dirs[i]);
        assert_int_equal(mkdir(p, 0777), 0);
    }
    const char *files[] = { "z.case", "b/deep/x.case", "b/m.case", "a/n.case", "notes.txt", ".hidden.case",
                            "b/readme" };
    for (int i = 0; i < 7; i++) {
        snprintf(p, sizeof p, "%s/%s", d, files[i]);
        write_file(p, "# empty\n", 8);
    }
    kv_path_list l = { 0 };
    char arg[420];
    snprintf(arg, sizeof arg, "%s/", d); /* a trailing slash joins without doubling */
    assert_int_equal(kv_driver_collect(arg, &l), KV_OK);
    assert_int_equal(l.n, 4);
    const char *expect[] = { "a/n.case", "b/deep/x.case", "b/m.case", "z.case" };
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", d, expect[i]);
        assert_string_equal(l.items[i], p);
    }
    /* A file named directly is taken as is, whatever its name. */
    snprintf(p, sizeof p, "%s/notes.txt", d);
    assert_int_equal(kv_driver_collect(p, &l), KV_OK);
    assert_int_equal(l.n, 5);
    assert_string_equal(l.items[4], p);
    kv_path_list_free(&l);

    snprintf(p, sizeof p, "%s/nope", d);
    assert_int_not_equal(kv_driver_collect(p, &l), KV_OK);
    assert_non_null(strstr(kv_last_error_message(), p));
    snprintf(p, sizeof p, "%s/b/deep/x.case", d); /* file ok; a dir without .case files is not */
    snprintf(p, sizeof p, "%s/empty", d);
    assert_int_equal(mkdir(p, 0777), 0);
    assert_int_not_equal(kv_driver_collect(p, &l), KV_OK);
    assert_non_null(strstr(kv_last_error_message(), "no *.case files"));
    kv_path_list_free(&l);
}

/* The skip callback of the load tests: positional arguments (paths)
 * belong to the runner, as in kvrun. */
static bool positional(const char *arg, void *ctx) {
    (void)ctx;
    return arg[0] != '-';
}

static void test_cmdline_options_over_files(void **state) {
    (void)state;
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/opt_a.case", g_tmp);
    snprintf(b, sizeof b, "%s/opt_b.case", g_tmp);
    const char *ta = "--op=kvt_good --shape=2\n--op=kvt_good --shape=3 --seed=3\n";
    const char *tb = "--op=kvt_wrong --shape=2\n";
    write_file(a, ta, strlen(ta));
    write_file(b, tb, strlen(tb));
    kv_path_list files = { 0 };
    assert_int_equal(kv_path_list_push(&files, a), KV_OK);
    assert_int_equal(kv_path_list_push(&files, b), KV_OK);

    /* Without case options: the files as they are. */
    char *argv0[] = { "kvrun", a, b, NULL };
    kv_case_list cases = { 0 };
    assert_int_equal(kv_driver_load(3, argv0, positional, NULL, &files, &cases), KV_OK);
    assert_int_equal(cases.n, 3);
    assert_int_equal(cases.items[0].seed, 0);
    kv_case_list_free(&cases);

    /* --seed=7 is a default over every file; a line's own --seed wins. The
     * paths are claimed by the caller (kvrun's positional arguments). */
    char *argv1[] = { "kvrun", a, "--seed=7", b, NULL };
    if (kv_driver_load(4, argv1, positional, NULL, &files, &cases) != KV_OK) fail_msg("%s", kv_last_error_message());
    assert_int_equal(cases.n, 3);
    assert_string_equal(cases.items[0].op, "kvt_good");
    assert_int_equal(cases.items[0].seed, 7);
    assert_int_equal(cases.items[1].seed, 3);
    assert_string_equal(cases.items[2].op, "kvt_wrong");
    assert_int_equal(cases.items[2].seed, 7);
    assert_string_equal(cases.items[0].origin.file, a);
    kv_case_list_free(&cases);

    /* A bad option value names the command line and the column of the
     * value as the user typed it: "kvrun A --seed=x", x after "--seed=". */
    char *argv2[] = { "kvrun", a, "--seed=x", NULL };
    assert_int_not_equal(kv_driver_load(3, argv2, positional, NULL, &files, &cases), KV_OK);
    char col[64];
    snprintf(col, sizeof col, "<command line>:1:%d:", (int)(strlen("kvrun ") + strlen(a) + 1 + strlen("--seed=") + 1));
    if (strncmp(kv_last_error_message(), col, strlen(col)) != 0)
        fail_msg("'%s' does not start with '%s'", kv_last_error_message(), col);
    kv_case_list_free(&cases);

    /* --op= with files is an error (a case line cannot include files). */
    char *argv3[] = { "kvrun", a, "--op=kvt_good", NULL };
    assert_int_not_equal(kv_driver_load(3, argv3, positional, NULL, &files, &cases), KV_OK);
    assert_non_null(strstr(kv_last_error_message(), "--op= cannot be combined with case files"));
    kv_case_list_free(&cases);

    /* No files: the command line is the case line. */
    char *argv4[] = { "kvrun", "--op=kvt_good", "--shape=4x5,3", NULL };
    assert_int_equal(kv_driver_load(3, argv4, positional, NULL, NULL, &cases), KV_OK);
    assert_int_equal(cases.n, 2);
    assert_string_equal(cases.items[0].origin.file, "<command line>");
    kv_case_list_free(&cases);
    kv_path_list_free(&files);
}

static void test_malformed_line(void **state) {
    (void)state;
    char path[400];
    snprintf(path, sizeof path, "%s/bad.case", g_tmp);
    const char *text = "# line one\n--op=kvt_good --shape=4x5 --bogus=1\n";
    write_file(path, text, strlen(text));
    kv_path_list files = { 0 };
    assert_int_equal(kv_path_list_push(&files, path), KV_OK);
    char *argv[] = { "kvrun", path, NULL };
    kv_case_list cases = { 0 };
    assert_int_not_equal(kv_driver_load(2, argv, positional, NULL, &files, &cases), KV_OK);
    char prefix[500];
    snprintf(prefix, sizeof prefix, "%s:2:27: ", path); /* --bogus starts in column 27 */
    if (strncmp(kv_last_error_message(), prefix, strlen(prefix)) != 0)
        fail_msg("'%s' does not start with '%s'", kv_last_error_message(), prefix);
    kv_case_list_free(&cases);
    kv_path_list_free(&files);
}

/* ---- the kvrun binary: usage errors exit 2 before anything runs ---- */

static const char *kvrun_path(void) {
    const char *p = getenv("KVRUN");
    return p ? p : "build/kvrun";
}

/* Runs kvrun with `args` (NULL-terminated, argv[0] added); stderr and
 * stdout into *err / *out. Returns the exit status. */
static int run_kvrun(const char *const *args, char **out, char **err) {
    const char *bin = kvrun_path();
    if (access(bin, X_OK) != 0) fail_msg("%s not found: run from the repo root after `ninja` (or set KVRUN)", bin);
    const int status = kv_test_run_captured(bin, args, out, err);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void expect_usage(const char *const *args, const char *needle) {
    char *out, *err;
    const int rc = run_kvrun(args, &out, &err);
    if (rc != 2 || strstr(err, needle) == NULL)
        fail_msg("kvrun %s ...: rc %d, stderr '%s' (wanted rc 2 and '%s')", args[0] ? args[0] : "", rc, err, needle);
    free(out);
    free(err);
}

static void test_cli_usage_errors(void **state) {
    (void)state;
    char bad[400], rdir[420];
    snprintf(bad, sizeof bad, "%s/bad.case", g_tmp);
    snprintf(rdir, sizeof rdir, "--report-dir=%s/cli-reports", g_tmp);
    const char *text = "# line one\n--op=neg --shape=4x5 --bogus=1\n";
    write_file(bad, text, strlen(text));
    char where[500];
    snprintf(where, sizeof where, "%s:2:22: ", bad);
    expect_usage((const char *[]){ bad, rdir, NULL }, where);
    expect_usage((const char *[]){ NULL }, "nothing to run");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--jobs=0", NULL }, "--jobs=0");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--shard=3/2", NULL }, "--shard=3/2");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--timeout=-1", NULL }, "--timeout=-1");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--isolate=threads", NULL }, "--isolate=threads");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--jobs=2", "--jobs=3", NULL }, "given twice");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--list", "--filter=zzz*", NULL }, "no cases selected");
    /* Neither a runner flag nor a case option: an unknown flag, with the
     * closest name of either kind when one is close. */
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--frobnicate=1", NULL }, "unknown flag --frobnicate");
    expect_usage((const char *[]){ "--op=neg", "--shape=4", "--fitler=x", NULL }, "did you mean --filter?");
    expect_usage((const char *[]){ "--op=neg", "--shpae=4", NULL }, "did you mean --shape?");

    /* --list over a command-line case prints its ID, exit 0. */
    char *out, *err;
    const int rc = run_kvrun((const char *[]){ "--op=neg", "--dtype=f32,f64", "--shape=4", "--list", NULL }, &out, &err);
    assert_int_equal(rc, 0);
    assert_string_equal(out, "neg(dtype=f32,shape=[4])\nneg(dtype=f64,shape=[4])\n");
    free(out);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regen_creates_goldens),
        cmocka_unit_test(test_isolation_statuses),
        cmocka_unit_test(test_isolate_none_in_process),
        cmocka_unit_test(test_baseline_xfail_xpass),
        cmocka_unit_test(test_corrupt_golden_is_error),
        cmocka_unit_test(test_deleted_golden_is_error),
        cmocka_unit_test(test_shards_partition),
        cmocka_unit_test(test_shard_reports_merge),
        cmocka_unit_test(test_list_prints_ids),
        cmocka_unit_test(test_zero_selected_is_error),
        cmocka_unit_test(test_bad_option_values),
        cmocka_unit_test(test_duplicates_run_once),
        cmocka_unit_test(test_collect_sorted_recursive),
        cmocka_unit_test(test_cmdline_options_over_files),
        cmocka_unit_test(test_malformed_line),
        cmocka_unit_test(test_cli_usage_errors),
        cmocka_unit_test(test_rows_held_flat),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
