/* The plugin loader (kv/backend.h): every way a plugin can fail to load
 * gives its own one-line message naming the path and the reason, the
 * plugin is skipped whole, and loading goes on; a good out-of-tree plugin
 * gets a free slot and its kernel runs; SIM loads and becomes the accel
 * target; KV_BACKEND_PATH parsing; and kvrun's --backend.
 *
 * The bad plugins are built from the sources in tests/plugins/ into
 * build/tests/plugins/. Tests run from the repository root. The loader's
 * state is per process, so the order of the tests below matters. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/backend.h"
#include "kv/kv.h"

#define PLUGINS "build/tests/plugins/"
#define ENV_FAULT "build/tests/env-fault/libenv_fault.so"
#define SIM_PATH "build/backends/libkv_sim.so"

static void assert_contains(const char *text, const char *needle) {
    if (strstr(text, needle) == NULL) fail_msg("expected \"%s\" in \"%s\"", needle, text);
}

/* A failed load: its status, a message with the path and `why`, and a
 * FAILED or UNAVAILABLE record for it. */
static const kv_backend_info *expect_skip(const char *path, kv_status code, const char *why, kv_backend_state state) {
    const int before = kv_backend_count();
    kv_error_clear();
    assert_int_equal(kv_backend_load(path), code);
    assert_int_equal(kv_last_error(), code);
    const char *m = kv_last_error_message();
    assert_contains(m, path);
    assert_contains(m, why);
    assert_null(strchr(m, '\n')); /* one line */
    assert_int_equal(kv_backend_count(), before + 1);
    const kv_backend_info *r = kv_backend_at(before);
    assert_non_null(r);
    assert_string_equal(r->path, path);
    assert_int_equal(r->state, state);
    assert_int_equal(r->status, code);
    assert_string_equal(r->message, m);
    return r;
}

static void test_missing_file(void **state) {
    (void)state;
    expect_skip(PLUGINS "does_not_exist.so", KV_ERR_INVALID_ARG, "cannot load it", KV_BACKEND_FAILED);
    expect_skip(PLUGINS "does_not_exist.so", KV_ERR_INVALID_ARG, "No such file", KV_BACKEND_FAILED);
    expect_skip("", KV_ERR_INVALID_ARG, "no path given", KV_BACKEND_FAILED);
}

static void test_not_a_library(void **state) {
    (void)state;
    expect_skip("tests/test_backend.c", KV_ERR_INVALID_ARG, "cannot load it", KV_BACKEND_FAILED);
}

static void test_no_entry_symbol(void **state) {
    (void)state;
    expect_skip(PLUGINS "libno_entry.so", KV_ERR_INVALID_ARG, "exports no 'kv_backend_entry'", KV_BACKEND_FAILED);
}

static void test_wrong_abi(void **state) {
    (void)state;
    const kv_backend_info *r =
        expect_skip(PLUGINS "libbad_abi.so", KV_ERR_INVALID_ARG, "built for ABI 99, this kvsuite speaks ABI 4",
                    KV_BACKEND_FAILED);
    assert_contains(r->message, "ABI version mismatch");
}

static void test_unavailable(void **state) {
    (void)state;
    const kv_backend_info *r = expect_skip(PLUGINS "libunavailable.so", KV_ERR_DEVICE,
                                           "unavailable: no frobnicator attached", KV_BACKEND_UNAVAILABLE);
    assert_contains(r->message, "UNSUPPORTED");
    assert_string_equal(r->name, "frob");
    /* Recorded for its slot (so the runner can say why), nothing installed. */
    assert_ptr_equal(kv_backend_find(KV_DEVICE_PLUGIN3), r);
    assert_false(kv_backend_available(KV_DEVICE_PLUGIN3));
    assert_null(kv_allocator_for(KV_DEVICE_PLUGIN3));
}

static void test_failed_registration_is_undone(void **state) {
    (void)state;
    const kv_op *neg = kv_op_find("neg");
    assert_non_null(neg);
    const kv_backend_info *r = expect_skip(PLUGINS "libbad_register.so", KV_ERR_UNKNOWN_OP,
                                           "registering its kernels failed", KV_BACKEND_FAILED);
    assert_contains(r->message, "no_such_op.at_all");
    /* The kernel it did register is gone, so is its allocator. */
    assert_int_not_equal(kv_op_entry_kind(neg, KV_KEY_PLUGIN2), KV_ENTRY_KERNEL);
    assert_null(kv_allocator_for(KV_DEVICE_PLUGIN2));
    assert_false(kv_backend_available(KV_DEVICE_PLUGIN2));
    assert_null(kv_backend_find(KV_DEVICE_PLUGIN2));
}

static void test_good_plugin_any_slot(void **state) {
    (void)state;
    kv_error_clear();
    assert_int_equal(kv_backend_load(PLUGINS "libgood_any.so"), KV_OK);
    const kv_backend_info *r = kv_backend_find(KV_DEVICE_PLUGIN0);
    assert_non_null(r);
    assert_int_equal(r->state, KV_BACKEND_LOADED);
    assert_string_equal(r->name, "tiny");
    assert_true(kv_backend_available(KV_DEVICE_PLUGIN0));
    /* Its kernel runs through the ordinary dispatcher, called back into
     * this program's libkv through the host table. */
    const float v[3] = { 1.5f, -2.0f, 0.0f };
    const int64_t sz[1] = { 3 };
    kv_tensor *c = kv_tensor_from_data(v, sz, 1, KV_F32);
    kv_tensor *p = kv_backend_copy_to_device(c, (kv_device){ KV_DEVICE_PLUGIN0, 0 });
    assert_non_null(p);
    assert_int_equal(p->device.type, KV_DEVICE_PLUGIN0);
    kv_tensor *n = kv_neg(p);
    assert_non_null(n);
    assert_int_equal(n->device.type, KV_DEVICE_PLUGIN0);
    kv_tensor *h = kv_backend_copy_to_host(n);
    assert_non_null(h);
    const float *out = kv_tensor_data(h);
    assert_true(out[0] == -1.5f && out[1] == 2.0f && out[2] == 0.0f);
    /* What it declines is declined, not computed. */
    const int64_t iv[3] = { 1, 2, 3 };
    kv_tensor *ci = kv_tensor_from_data(iv, sz, 1, KV_I64);
    kv_tensor *i = kv_backend_copy_to_device(ci, (kv_device){ KV_DEVICE_PLUGIN0, 0 });
    assert_non_null(i);
    kv_error_clear();
    assert_null(kv_neg(i));
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    assert_contains(kv_last_error_message(), "contiguous f32 only");
    kv_tensor_release(i);
    kv_tensor_release(ci);
    kv_tensor_release(h);
    kv_tensor_release(n);
    kv_tensor_release(p);
    kv_tensor_release(c);
}

static void test_sim_loads(void **state) {
    (void)state;
    unsetenv("KV_ACCEL_TARGET");
    kv_error_clear();
    assert_int_equal(kv_backend_load(SIM_PATH), KV_OK);
    const kv_backend_info *r = kv_backend_find(KV_DEVICE_SIM);
    assert_non_null(r);
    assert_int_equal(r->state, KV_BACKEND_LOADED);
    assert_string_equal(r->name, "sim");
    assert_true(kv_backend_available(KV_DEVICE_SIM));
    assert_non_null(kv_allocator_for(KV_DEVICE_SIM));
    assert_false(kv_device_host_addressable(KV_DEVICE_SIM));
    /* The accel device sees it: the default rule picks SIM without a GPU. */
    if (!kv_backend_available(KV_DEVICE_CUDA)) assert_int_equal(kv_accel_target(), KV_KEY_SIM);
    assert_false(kv_device_host_addressable(KV_DEVICE_ACCEL));
    /* The same slot twice: the second is skipped, the first stays. */
    expect_skip(SIM_PATH, KV_ERR_DEVICE, "device slot sim is taken", KV_BACKEND_FAILED);
    assert_true(kv_backend_available(KV_DEVICE_SIM));
    assert_ptr_equal(kv_backend_find(KV_DEVICE_SIM), r);
}

/* ---- which plugins ---- */

static void expect_paths(const kv_backend_paths *p, const char *const *want, int n) {
    if (p->n != n) {
        for (int i = 0; i < p->n; i++) print_message("  got[%d] = %s\n", i, p->items[i]);
        fail_msg("expected %d paths, got %d", n, p->n);
    }
    for (int i = 0; i < n; i++) assert_string_equal(p->items[i], want[i]);
}

static void test_path_lists(void **state) {
    (void)state;
    kv_backend_paths p = { 0 };
    assert_int_equal(kv_backend_paths_add(&p, "a.so::/x/b.so:"), KV_OK);
    static const char *const two[] = { "a.so", "/x/b.so" };
    expect_paths(&p, two, 2);
    assert_int_equal(kv_backend_paths_add(&p, ""), KV_OK);
    assert_int_equal(kv_backend_paths_add(&p, ":::"), KV_OK);
    expect_paths(&p, two, 2);
    kv_backend_paths_free(&p);
    assert_int_equal(p.n, 0);

    /* A folder is every *.so in it, sorted; a file beside it is as given. */
    assert_int_equal(kv_backend_paths_add(&p, "missing.so:" PLUGINS), KV_OK);
    static const char *const dir[] = { "missing.so", PLUGINS "libbad_abi.so", PLUGINS "libbad_register.so",
                                       PLUGINS "libgood_any.so", PLUGINS "libno_entry.so", PLUGINS "libunavailable.so" };
    expect_paths(&p, dir, 6);
    kv_backend_paths_free(&p);
}

static void test_path_precedence(void **state) {
    (void)state;
    kv_backend_paths p;
    static const char *const cli[] = { "one.so", "two.so:three.so" };
    static const char *const cli_want[] = { "one.so", "two.so", "three.so" };
    assert_int_equal(kv_backend_paths_resolve(cli, 2, "env.so", PLUGINS, &p), KV_OK);
    expect_paths(&p, cli_want, 3);
    kv_backend_paths_free(&p);
    static const char *const env_want[] = { "env.so", "more.so" };
    assert_int_equal(kv_backend_paths_resolve(NULL, 0, "env.so:more.so", PLUGINS, &p), KV_OK);
    expect_paths(&p, env_want, 2);
    kv_backend_paths_free(&p);
    /* KV_BACKEND_PATH="" loads nothing, even with a default folder. */
    assert_int_equal(kv_backend_paths_resolve(NULL, 0, "", PLUGINS, &p), KV_OK);
    expect_paths(&p, NULL, 0);
    kv_backend_paths_free(&p);
    /* Unset: the default folder; a missing default folder is no error. */
    assert_int_equal(kv_backend_paths_resolve(NULL, 0, NULL, PLUGINS, &p), KV_OK);
    assert_int_equal(p.n, 5);
    assert_string_equal(p.items[0], PLUGINS "libbad_abi.so");
    kv_backend_paths_free(&p);
    assert_int_equal(kv_backend_paths_resolve(NULL, 0, NULL, "build/no/such/folder", &p), KV_OK);
    assert_int_equal(p.n, 0);
    kv_backend_paths_free(&p);
    assert_string_equal(kv_backend_default_dir(), "build/backends"); /* no backends/ beside build/tests/ */
}

static void test_load_paths_logs_and_goes_on(void **state) {
    (void)state;
    kv_backend_paths p = { 0 };
    assert_int_equal(kv_backend_paths_add(&p, PLUGINS "gone.so:" PLUGINS "libno_entry.so"), KV_OK);
    FILE *log = tmpfile();
    assert_non_null(log);
    assert_int_equal(kv_backend_load_paths(&p, log), 0);
    rewind(log);
    char line1[1024] = "", line2[1024] = "", extra[16] = "";
    assert_non_null(fgets(line1, sizeof line1, log));
    assert_non_null(fgets(line2, sizeof line2, log));
    assert_null(fgets(extra, sizeof extra, log));
    fclose(log);
    assert_contains(line1, PLUGINS "gone.so");
    assert_contains(line1, "skipped");
    assert_contains(line2, PLUGINS "libno_entry.so");
    assert_contains(line2, "kv_backend_entry");
    kv_backend_paths_free(&p);
    /* The loaded ones are still there. */
    assert_true(kv_backend_available(KV_DEVICE_SIM));
    assert_true(kv_backend_available(KV_DEVICE_PLUGIN0));
}

/* ---- kvrun ---- */

/* Runs a shell command; its exit status, stdout and stderr. */
static int run(const char *cmd, char *out, size_t outcap, char *err, size_t errcap) {
    char o[] = "/tmp/kv_test_backend_outXXXXXX", e[] = "/tmp/kv_test_backend_errXXXXXX";
    const int fo = mkstemp(o), fe = mkstemp(e);
    assert_true(fo >= 0 && fe >= 0);
    close(fo);
    close(fe);
    char full[2048];
    snprintf(full, sizeof full, "%s >%s 2>%s", cmd, o, e);
    const int rc = system(full);
    FILE *f = fopen(o, "r");
    const size_t no = f ? fread(out, 1, outcap - 1, f) : 0;
    out[no] = '\0';
    if (f) fclose(f);
    f = fopen(e, "r");
    const size_t ne = f ? fread(err, 1, errcap - 1, f) : 0;
    err[ne] = '\0';
    if (f) fclose(f);
    unlink(o);
    unlink(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void test_kvrun_backend_flag(void **state) {
    (void)state;
    static char out[1 << 16], err[1 << 14];
    /* A bad plugin next to a good one: a stderr line, the run goes on. */
    int rc = run("build/kvrun --backend=" PLUGINS "libbad_abi.so --backend=" SIM_PATH " --list-ops", out, sizeof out,
                 err, sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(err, PLUGINS "libbad_abi.so");
    assert_contains(err, "ABI version mismatch");
    assert_contains(out, "add.Tensor\tCPU,SIM");
    /* KV_BACKEND_PATH="" loads nothing: no SIM column. */
    rc = run("KV_BACKEND_PATH= build/kvrun --list-ops", out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 0);
    assert_null(strstr(out, "SIM"));
    assert_string_equal(err, "");
    /* KV_BACKEND_PATH names it; an unavailable plugin is one line. */
    rc = run("KV_BACKEND_PATH=" PLUGINS "libunavailable.so:" SIM_PATH " build/kvrun --list-ops", out, sizeof out, err,
             sizeof err);
    assert_int_equal(rc, 0);
    assert_contains(out, "mm\tCPU,SIM");
    assert_contains(err, "unavailable: no frobnicator attached");
    assert_int_equal(strchr(err, '\n') - err + 1, (long)strlen(err));
    /* A SIM case line through the whole runner. */
    rc = run("KV_BACKEND_PATH=" SIM_PATH " build/kvrun --op=add.Tensor --dtype=f32 --shape=3x4:4 --check=variants "
             "--report-dir=build/tests/backend-report",
             out, sizeof out, err, sizeof err);
    if (rc != 0) print_message("%s\n%s\n", out, err);
    assert_int_equal(rc, 0);
}

/* The probe: a plugin that crashes, exits or hangs while loading is a
 * failed record naming what happened and where; this process goes on. */
static void expect_probe_failure(const char *fault, const char *what) {
    setenv("KV_TEST_LOAD_FAULT", fault, 1);
    kv_error_clear();
    assert_int_equal(kv_backend_load(ENV_FAULT), KV_ERR_DEVICE);
    unsetenv("KV_TEST_LOAD_FAULT");
    const kv_backend_info *r = kv_backend_at(kv_backend_count() - 1);
    assert_int_equal(r->state, KV_BACKEND_FAILED);
    assert_contains(r->message, ENV_FAULT);
    assert_contains(r->message, what);
    assert_contains(r->message, "in its entry point kv_backend_entry");
    assert_contains(kv_last_error_message(), what);
}

static void test_probe_crash_exit_hang(void **state) {
    (void)state;
    expect_probe_failure("crash", "it crashed while loading: killed by signal 11");
    expect_probe_failure("exit", "it ended the process while loading: exit(0)");
    setenv("KV_BACKEND_PROBE_TIMEOUT", "0.5", 1);
    expect_probe_failure("hang", "it did not finish loading within 0.5 s");
    unsetenv("KV_BACKEND_PROBE_TIMEOUT");
    double t = 0;
    setenv("KV_BACKEND_PROBE_TIMEOUT", "soon", 1);
    assert_int_equal(kv_backend_probe_timeout(&t), KV_ERR_INVALID_ARG);
    assert_contains(kv_last_error_message(), "KV_BACKEND_PROBE_TIMEOUT");
    assert_contains(kv_last_error_message(), "'soon'");
    unsetenv("KV_BACKEND_PROBE_TIMEOUT");
}

/* A plugin slot goes by the backend's name, and that name selects it as
 * the accel target. */
static void test_plugin_named_and_accel_target(void **state) {
    (void)state;
    kv_error_clear();
    assert_int_equal(kv_backend_load(ENV_FAULT), KV_OK);
    const kv_backend_info *r = kv_backend_at(kv_backend_count() - 1);
    assert_string_equal(r->name, "faulty");
    assert_string_equal(r->version, "test plugin");
    const kv_device_type t = r->device_type;
    assert_string_equal(kv_device_type_name(t), "faulty");
    assert_string_equal(kv_key_name((kv_key)t), "faulty");
    kv_device d;
    assert_int_equal(kv_device_parse("faulty", &d), 0);
    assert_int_equal(d.type, t);
    assert_int_equal(kv_accel_select_target("faulty"), KV_OK);
    assert_int_equal(kv_accel_target(), (kv_key)t);
    assert_string_equal(kv_accel_target_name(), "faulty");
    /* A name nothing has: an error, and the target stays. */
    assert_int_equal(kv_accel_select_target("npu"), KV_ERR_DEVICE);
    assert_contains(kv_last_error_message(), "'npu'");
    assert_int_equal(kv_accel_target(), (kv_key)t);
    assert_int_equal(kv_accel_select_target("auto"), KV_OK);
    /* A second plugin may not take the name. */
    assert_int_equal(kv_backend_load(ENV_FAULT), KV_ERR_DEVICE);
    assert_contains(kv_last_error_message(), "its name 'faulty' is taken");
}

/* kvrun: what was asked for and did not run makes the run fail, in every
 * report; a failure on a plugin has a repro line that reproduces it. */
static void test_kvrun_never_silently_green(void **state) {
    (void)state;
    static char out[1 << 16], err[1 << 14];
    const char *line = " --op=neg --dtype=f32 --shape=4x5 --check=variants --report-dir=build/tests/backend-report2";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "build/kvrun --backend=/no/such/plugin.so%s", line);
    int rc = run(cmd, out, sizeof out, err, sizeof err);
    assert_int_equal(rc, 1);
    assert_contains(out, "ERROR   backend(plugin.so)");
    assert_contains(out, "/no/such/plugin.so");
    FILE *f = fopen("build/tests/backend-report2/results.jsonl", "r");
    assert_non_null(f);
    char row[8192];
    bool found = false;
    while (fgets(row, sizeof row, f))
        found = found || (strstr(row, "\"check\":\"load\"") && strstr(row, "\"status\":\"ERROR\""));
    fclose(f);
    assert_true(found);
    f = fopen("build/tests/backend-report2/meta.json", "r");
    assert_non_null(f);
    const size_t n = fread(row, 1, sizeof row - 1, f);
    row[n] = '\0';
    fclose(f);
    assert_contains(row, "\"state\":\"failed\"");
    /* The same for a plugin that exits while loading, an ABI mismatch. */
    snprintf(cmd, sizeof cmd, "KV_TEST_LOAD_FAULT=exit build/kvrun --backend=" ENV_FAULT "%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_contains(out, "exit(0)");
    snprintf(cmd, sizeof cmd, "build/kvrun --backend=" PLUGINS "libbad_abi.so%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_contains(out, "ABI version mismatch");
    /* Required but unavailable; an accel target that is not loaded; a
     * target that cannot be a name; a bad probe timeout. */
    snprintf(cmd, sizeof cmd, "build/kvrun --backend=" PLUGINS "libunavailable.so --require-backend=cuda%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_contains(out, "--require-backend=cuda");
    /* A target that names nothing loaded or asked for is a usage error
     * (exit 2, nothing run); one whose plugin failed to load is the ERROR
     * row above. */
    snprintf(cmd, sizeof cmd, "build/kvrun --backend=" SIM_PATH " --accel-target=npu%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 2);
    assert_contains(err, "'npu' names no backend here");
    snprintf(cmd, sizeof cmd, "build/kvrun --accel-target='N P U'%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 2);
    assert_contains(err, "KV_ACCEL_TARGET");
    snprintf(cmd, sizeof cmd, "KV_BACKEND_PROBE_TIMEOUT=0 build/kvrun%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 2);
    assert_contains(err, "KV_BACKEND_PROBE_TIMEOUT");
    /* A wrong kernel on a plugin: FAIL with a repro line carrying the
     * setting and the plugin; pasted into a shell, it fails the same way. */
    snprintf(cmd, sizeof cmd, "KV_TEST_KERNEL_FAULT=wrong build/kvrun --backend=" ENV_FAULT "%s", line);
    assert_int_equal(run(cmd, out, sizeof out, err, sizeof err), 1);
    assert_contains(out, "FAIL    neg(");
    assert_contains(out, "check=variants:faulty");
    const char *repro = strstr(out, "repro: ");
    assert_non_null(repro);
    char again[1024];
    snprintf(again, sizeof again, "%.*s --report-dir=build/tests/backend-report3", (int)strcspn(repro + 7, "\n"),
             repro + 7);
    assert_contains(again, "KV_TEST_KERNEL_FAULT=wrong");
    assert_contains(again, "--backend=" ENV_FAULT);
    static char out2[1 << 16];
    assert_int_equal(run(again, out2, sizeof out2, err, sizeof err), 1);
    assert_contains(out2, "check=variants:faulty");
    assert_contains(out2, "1 failed");
}

int main(void) {
    /* Plugins register on top of the composed runtime. */
    if (kv_init() != KV_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_not_a_library),
        cmocka_unit_test(test_no_entry_symbol),
        cmocka_unit_test(test_wrong_abi),
        cmocka_unit_test(test_unavailable),
        cmocka_unit_test(test_failed_registration_is_undone),
        cmocka_unit_test(test_good_plugin_any_slot),
        cmocka_unit_test(test_sim_loads),
        cmocka_unit_test(test_path_lists),
        cmocka_unit_test(test_path_precedence),
        cmocka_unit_test(test_load_paths_logs_and_goes_on),
        cmocka_unit_test(test_kvrun_backend_flag),
        cmocka_unit_test(test_probe_crash_exit_hang),
        cmocka_unit_test(test_plugin_named_and_accel_target),
        cmocka_unit_test(test_kvrun_never_silently_green),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
