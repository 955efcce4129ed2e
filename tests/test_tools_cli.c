/* The two command-line tools as a user meets them: kvgen's and kvrun's
 * documented exit codes and messages for help, version, usage errors,
 * unreadable and malformed input, unwritable output, and kvrun --merge.
 * (Case-running exit codes are test_driver's.) The binaries are
 * build/kvgen and build/kvrun, or $KVGEN and $KVRUN, so the instrumented
 * builds (tests/configs.sh) test their own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/kv.h"
#include "kv/op_ids.h"
#include "test_util.h"

static char g_tmp[64];

static const char *tool(const char *env, const char *fallback) {
    const char *p = getenv(env);
    return p ? p : fallback;
}
static const char *kvgen(void) { return tool("KVGEN", "build/kvgen"); }
static const char *kvrun(void) { return tool("KVRUN", "build/kvrun"); }

typedef struct run_out {
    int rc;
    char *out, *err;
} run_out;

/* Runs bin with args (NULL-terminated; argv[0] added), stdout and stderr
 * captured. rc is the exit status, or 128 + the signal. */
static void run(const char *bin, const char *const *args, run_out *r) {
    if (access(bin, X_OK) != 0) fail_msg("%s not found: run from the repo root after `ninja`", bin);
    const int status = kv_test_run_captured(bin, args, &r->out, &r->err);
    r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void run_free(run_out *r) {
    free(r->out);
    free(r->err);
}

/* Runs and checks the exit code and that `needle` is on stdout (out) or
 * stderr (!out); needle NULL checks nothing more. */
static void expect(const char *bin, const char *const *args, int rc, bool out, const char *needle) {
    run_out r;
    run(bin, args, &r);
    if (r.rc != rc) fail_msg("%s %s...: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s", bin, args[0], r.rc, rc, r.out, r.err);
    if (needle != NULL && strstr(out ? r.out : r.err, needle) == NULL)
        fail_msg("%s %s...: '%s' not on %s:\n%s", bin, args[0], needle, out ? "stdout" : "stderr", out ? r.out : r.err);
    run_free(&r);
}

static void write_file(const char *name, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- kvgen ---- */

static void test_kvgen_help_and_usage(void **state) {
    (void)state;
    expect(kvgen(), (const char *[]){ "--help", NULL }, 0, true, "usage: kvgen --schema FILE");
    expect(kvgen(), (const char *[]){ "-h", NULL }, 0, true, "usage: kvgen");
    expect(kvgen(), (const char *[]){ NULL }, 2, false, "--schema and --out are required");
    expect(kvgen(), (const char *[]){ "--schema", "kernels/ops.schema", NULL }, 2, false, "are required");
    expect(kvgen(), (const char *[]){ "--bogus", NULL }, 2, false, "unknown or incomplete option '--bogus'");
    /* An option whose value is missing is incomplete. */
    expect(kvgen(), (const char *[]){ "--out", NULL }, 2, false, "unknown or incomplete option '--out'");
    expect(kvgen(), (const char *[]){ "--schema=kernels/ops.schema", "--out=x", "--accel=", NULL }, 2, false,
           "--accel needs a file");
}

static void test_kvgen_generates_deterministically(void **state) {
    (void)state;
    char out1[128], out2[128];
    snprintf(out1, sizeof out1, "--out=%s/gen1", g_tmp);
    snprintf(out2, sizeof out2, "--out=%s/gen2", g_tmp);
    expect(kvgen(), (const char *[]){ "--schema=kernels/ops.schema", "--accel=kernels/accel.conf", out1, NULL }, 0,
           true, NULL);
    expect(kvgen(), (const char *[]){ "--schema", "kernels/ops.schema", "--accel", "kernels/accel.conf", "--out",
                                      out2 + 6, NULL },
           0, true, NULL);
    static const char *const files[] = { "kv/op_ids.h", "kv/ops.h", "ops_table.c", "ops_api.c", "accel_boxing.c" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "cmp -s %s/gen1/%s %s/gen2/%s", g_tmp, files[i], g_tmp, files[i]);
        if (system(cmd) != 0) fail_msg("%s differs between two generations", files[i]);
    }
    /* A second generation into the same folder rewrites nothing. */
    char path[256];
    struct stat before, after;
    snprintf(path, sizeof path, "%s/gen1/kv/ops.h", g_tmp);
    assert_int_equal(stat(path, &before), 0);
    sleep(1);
    expect(kvgen(), (const char *[]){ "--schema=kernels/ops.schema", out1, NULL }, 0, true, NULL);
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal((long)before.st_mtime, (long)after.st_mtime);
}

static void test_kvgen_bad_input(void **state) {
    (void)state;
    char schema[256], conf[256], arg[300], out[128];
    snprintf(out, sizeof out, "--out=%s/gen-bad", g_tmp);
    expect(kvgen(), (const char *[]){ "--schema=/nonexistent/ops.schema", out, NULL }, 2, false, "/nonexistent/ops.schema");
    /* A malformed schema: FILE:LINE:COL, bare, on stderr. */
    write_file("bad.schema", "neg(Tensor self) -> Tensor\nadd.Tensor(Tensor self, Tensor other -> Tensor\n", schema,
               sizeof schema);
    snprintf(arg, sizeof arg, "--schema=%s", schema);
    char where[300];
    snprintf(where, sizeof where, "%s:2:", schema);
    expect(kvgen(), (const char *[]){ arg, out, NULL }, 2, false, where);
    /* An accel.conf naming an op the schema lacks. */
    write_file("bad.conf", "neg default\nnosuch.op cpu\n", conf, sizeof conf);
    char carg[300];
    snprintf(carg, sizeof carg, "--accel=%s", conf);
    expect(kvgen(), (const char *[]){ "--schema=kernels/ops.schema", carg, out, NULL }, 2, false, "nosuch.op");
    expect(kvgen(), (const char *[]){ "--schema=kernels/ops.schema", "--accel=/nonexistent.conf", out, NULL }, 2, false,
           "/nonexistent.conf");
}

static void test_kvgen_unwritable_output(void **state) {
    (void)state;
    /* The output folder is a regular file: nothing can be written under it. */
    char file[256], arg[300];
    write_file("not-a-dir", "x\n", file, sizeof file);
    snprintf(arg, sizeof arg, "--out=%s", file);
    expect(kvgen(), (const char *[]){ "--schema=kernels/ops.schema", arg, NULL }, 1, false, "kvgen: ");
}

/* ---- kvrun ---- */

static void test_kvrun_help_version(void **state) {
    (void)state;
    expect(kvrun(), (const char *[]){ "--help", NULL }, 0, true, "usage: kvrun [FLAGS]");
    expect(kvrun(), (const char *[]){ "-h", NULL }, 0, true, "usage: kvrun");
    char ops[64];
    snprintf(ops, sizeof ops, "(%d ops)", (int)KV_OP_COUNT);
    expect(kvrun(), (const char *[]){ "--version", NULL }, 0, true, ops);
    expect(kvrun(), (const char *[]){ "--version=1", NULL }, 2, false, "--version takes no value");
    expect(kvrun(), (const char *[]){ NULL }, 2, false, "nothing to run");
}

static void test_kvrun_list_ops(void **state) {
    (void)state;
    run_out r;
    run(kvrun(), (const char *[]){ "--list-ops", "--backend=/nonexistent.so", NULL }, &r);
    assert_int_equal(r.rc, 0);
    /* One line per op, "NAME<TAB>KEYS", in registry order; the bad
     * plugin is reported and skipped. */
    int lines = 0;
    for (char *line = strtok(r.out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        if (tab == NULL) fail_msg("no tab in '%s'", line);
        *tab = '\0';
        const kv_op *op = kv_op_at(lines);
        assert_non_null(op);
        assert_string_equal(line, kv_op_name(op));
        lines++;
    }
    assert_int_equal(lines, kv_op_count());
    assert_non_null(strstr(r.err, "/nonexistent.so"));
    run_free(&r);
}

static void test_kvrun_flag_errors(void **state) {
    (void)state;
    static const struct {
        const char *arg, *needle;
    } bad[] = {
        { "--jobs=0", "--jobs=0: must be a whole number from 1 to 4096" },
        { "--jobs", "--jobs needs a value" },
        { "--shard=3", "expected K/N" },
        { "--shard=a/2", "whole numbers" },
        { "--shard=3/2", "K (3) must not exceed N (2)" },
        { "--timeout=0", "--timeout=0: must be a number of seconds" },
        { "--timeout=inf", "must be a number of seconds" },
        { "--isolate=thread", "unknown mode (fork or none)" },
        { "--list=1", "--list takes no value" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect(kvrun(), (const char *[]){ "--op=neg", "--shape=4", bad[i].arg, NULL }, 2, false, bad[i].needle);
    expect(kvrun(), (const char *[]){ "--op=neg", "--list", "--list", NULL }, 2, false, "--list given twice");
    expect(kvrun(), (const char *[]){ "/nonexistent/cases", NULL }, 2, false, "/nonexistent/cases");
}

/* The numbers of the console's last line "N passed, N failed, N skipped". */
static void summary_counts(const char *out, int *passed, int *failed) {
    const char *line = out, *p;
    while ((p = strstr(line, " passed, ")) != NULL) {
        const char *start = p;
        while (start > out && start[-1] != '\n') start--;
        if (sscanf(start, "%d passed, %d failed", passed, failed) != 2) fail_msg("bad summary in:\n%s", out);
        line = p + 1;
    }
}

static void test_kvrun_merge(void **state) {
    (void)state;
    expect(kvrun(), (const char *[]){ "--merge", NULL }, 2, false, "--merge needs report folders");
    expect(kvrun(), (const char *[]){ "--merge", "a", "--jobs=2", NULL }, 2, false, "not --jobs");
    expect(kvrun(), (const char *[]){ "--merge", "a", "--op=neg", NULL }, 2, false, "not case options");
    expect(kvrun(), (const char *[]){ "--merge", "/nonexistent/r1", NULL }, 2, false, "/nonexistent/r1");
    /* Two shards of one run merge into the report of the whole run: the
     * counts add up. */
    char r1[128], r2[128], all[128], d1[160], d2[160], dall[160];
    snprintf(r1, sizeof r1, "%s/r1", g_tmp);
    snprintf(r2, sizeof r2, "%s/r2", g_tmp);
    snprintf(all, sizeof all, "%s/all", g_tmp);
    snprintf(d1, sizeof d1, "--report-dir=%s", r1);
    snprintf(d2, sizeof d2, "--report-dir=%s", r2);
    snprintf(dall, sizeof dall, "--report-dir=%s", all);
    int passed[3], failed[3];
    const char *dirs[2] = { d1, d2 }, *shards[2] = { "--shard=1/2", "--shard=2/2" };
    for (int k = 0; k < 3; k++) {
        run_out r;
        if (k < 2)
            run(kvrun(), (const char *[]){ "--op=neg,abs", "--dtype=f32", "--shape=4x5,[]", "--fill=exact", shards[k],
                                           dirs[k], NULL },
                &r);
        else
            run(kvrun(), (const char *[]){ "--merge", r1, r2, dall, NULL }, &r);
        if (r.rc != 0) fail_msg("run %d: exit %d\n%s\n%s", k, r.rc, r.out, r.err);
        passed[k] = failed[k] = -1;
        summary_counts(r.out, &passed[k], &failed[k]);
        run_free(&r);
        assert_int_equal(failed[k], 0);
    }
    assert_true(passed[0] > 0 && passed[1] > 0);
    assert_int_equal(passed[2], passed[0] + passed[1]);
    char path[200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/results.jsonl", all);
    assert_int_equal(stat(path, &sb), 0);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/kv_test_tools_cli_XXXXXX");
    return mkdtemp(g_tmp) == NULL ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    /* Only our own mkdtemp folder. */
    if (strncmp(g_tmp, "/tmp/kv_test_tools_cli_", 23) != 0) return -1;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kv_init: %s\n", kv_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kvgen_help_and_usage),
        cmocka_unit_test(test_kvgen_generates_deterministically),
        cmocka_unit_test(test_kvgen_bad_input),
        cmocka_unit_test(test_kvgen_unwritable_output),
        cmocka_unit_test(test_kvrun_help_version),
        cmocka_unit_test(test_kvrun_list_ops),
        cmocka_unit_test(test_kvrun_flag_errors),
        cmocka_unit_test(test_kvrun_merge),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
