/* The CUDA plugin without a GPU.
 *
 * 1. Its C shim (kernels/cuda) and per-element code (cuda_elem.h) on the
 *    host emulation of its device side (build/tests/emu/libkv_cuda_emu.so):
 *    values against hand-computed ones, declines for what it has no kernel
 *    for, the reference's error codes for bad input, the whole case suite
 *    of the ops it implements through kvrun.
 * 2. The real plugin (build/backends/libkv_cuda.so, when `ninja cuda` built
 *    it): without a GPU it loads, reports itself unavailable with the
 *    reason, and its cases are UNSUPPORTED, not failures.
 * Tests run from the repository root. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/backend.h"
#include "kv/kv.h"
#include "test_util.h"

#define EMU_PATH "build/tests/emu/libkv_cuda_emu.so"
#define CUDA_PATH "build/backends/libkv_cuda.so"
#define L(...) ((kv_int_list){ (const int64_t[]){ __VA_ARGS__ }, (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)) })

static kv_device EMU; /* the plugin slot the emulation got */

static int setup(void **state) {
    (void)state;
    if (kv_backend_load(EMU_PATH) != KV_OK) {
        print_error("cannot load %s: %s\n", EMU_PATH, kv_last_error_message());
        return -1;
    }
    for (int i = 0; i < kv_backend_count(); i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state == KV_BACKEND_LOADED && strcmp(b->name, "cuda-emu") == 0) EMU = (kv_device){ b->device_type, 0 };
    }
    return EMU.type == KV_DEVICE_PLUGIN0 ? 0 : -1;
}

static kv_tensor *dev_f32(const float *v, const int64_t *sizes, int ndim) {
    kv_tensor *c = kv_tensor_from_data(v, sizes, ndim, KV_F32);
    kv_tensor *d = kv_backend_copy_to_device(c, EMU);
    kv_tensor_release(c);
    assert_non_null(d);
    return d;
}

static void release_all(kv_tensor **ts, size_t n) {
    for (size_t i = 0; i < n; i++) kv_tensor_release(ts[i]);
}

static void test_device_memory(void **state) {
    (void)state;
    const int64_t sz[1] = { 4 };
    kv_tensor *t = kv_tensor_empty(sz, 1, KV_F32, EMU);
    assert_non_null(t);
    assert_null(kv_tensor_data(t));
    assert_int_equal((uintptr_t)t->storage->data >> 48, 0x52);
    kv_tensor_release(t);
}

static void test_pointwise(void **state) {
    (void)state;
    const float av[6] = { 1, 2, 3, 4, 5, 6 }, rv[3] = { 10, 20, 30 };
    const int64_t s23[2] = { 2, 3 }, s3[1] = { 3 };
    kv_tensor *a = dev_f32(av, s23, 2), *r = dev_f32(rv, s3, 1);
    kv_tensor *s = kv_add(a, r, kv_scalar_double(0.5));
    assert_int_equal(s->device.type, EMU.type);
    static const double want_s[6] = { 6, 12, 18, 9, 15, 21 };
    kv_test_expect_values_on(s, want_s, 6, 0);
    kv_tensor *t = kv_transpose(a, 0, 1); /* a view: same storage, no kernel */
    assert_ptr_equal(t->storage, a->storage);
    kv_tensor *m = kv_maximum(t, t);
    static const double want_m[6] = { 1, 4, 2, 5, 3, 6 };
    kv_test_expect_values_on(m, want_m, 6, 0);
    kv_tensor *e = kv_exp(a);
    static const double want_e[6] = { 2.718281828459045, 7.38905609893065, 20.085536923187668,
                                      54.598150033144236, 148.4131591025766, 403.4287934927351 };
    kv_test_expect_values_on(e, want_e, 6, 1e-4);
    const kv_scalar lo = kv_scalar_int(2), hi = kv_scalar_double(4.5);
    kv_tensor *c = kv_clamp(a, &lo, &hi);
    static const double want_c[6] = { 2, 2, 3, 4, 4.5, 4.5 };
    kv_test_expect_values_on(c, want_c, 6, 0);
    assert_int_equal(kv_mul_(a, a), KV_OK);
    static const double sq[6] = { 1, 4, 9, 16, 25, 36 };
    kv_test_expect_values_on(a, sq, 6, 0);
    kv_tensor *objs[] = { c, e, m, t, s, r, a };
    release_all(objs, sizeof objs / sizeof objs[0]);
}

static void test_reduce_matmul_norm(void **state) {
    (void)state;
    const float av[6] = { 1, 2, 3, 4, 5, 6 }, bv[6] = { 1, 0, 0, 1, 1, 1 };
    const int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 };
    kv_tensor *a = dev_f32(av, s23, 2), *b = dev_f32(bv, s32, 2);
    kv_tensor *su = kv_sum(a, &L(0), false, NULL);
    static const double want_su[3] = { 5, 7, 9 };
    kv_test_expect_values_on(su, want_su, 3, 0);
    kv_tensor *mx = kv_amax(a, L(1), true);
    assert_int_equal(mx->ndim, 2);
    static const double want_mx[2] = { 3, 6 };
    kv_test_expect_values_on(mx, want_mx, 2, 0);
    kv_tensor *p = kv_mm(a, b);
    static const double want_p[4] = { 4, 5, 10, 11 };
    kv_test_expect_values_on(p, want_p, 4, 0);
    kv_tensor *sm = kv__softmax(a, 1, false);
    const double e1 = exp(-2.0), e2 = exp(-1.0), z = e1 + e2 + 1.0;
    const double want_sm[6] = { e1 / z, e2 / z, 1 / z, e1 / z, e2 / z, 1 / z };
    kv_test_expect_values_on(sm, want_sm, 6, 1e-6);
    kv_tensor *out = NULL, *mean = NULL, *rstd = NULL;
    assert_int_equal(kv_native_layer_norm(a, L(3), NULL, NULL, 0.0, &out, &mean, &rstd), KV_OK);
    const double r = 1.0 / sqrt(2.0 / 3.0);
    const double want_ln[6] = { -r, 0, r, -r, 0, r }, want_mean[2] = { 2, 5 }, want_rstd[2] = { r, r };
    kv_test_expect_values_on(out, want_ln, 6, 1e-6);
    kv_test_expect_values_on(mean, want_mean, 2, 0);
    kv_test_expect_values_on(rstd, want_rstd, 2, 1e-6);
    kv_tensor *objs[] = { rstd, mean, out, sm, p, mx, su, b, a };
    release_all(objs, sizeof objs / sizeof objs[0]);
}

static void test_copies_and_cat(void **state) {
    (void)state;
    const float av[4] = { 1.5f, -2, 3, 4 };
    const int64_t s22[2] = { 2, 2 };
    kv_tensor *a = dev_f32(av, s22, 2);
    kv_tensor *t = kv_transpose(a, 0, 1);
    kv_tensor *items[2] = { a, t };
    kv_tensor *c = kv_cat((kv_tensor_list){ items, 2 }, 1);
    assert_int_equal(c->sizes[1], 4);
    static const double want_c[8] = { 1.5, -2, 1.5, 3, 3, 4, -2, 4 };
    kv_test_expect_values_on(c, want_c, 8, 0);
    kv_tensor *d = kv__to_copy(t, &(kv_dtype){ KV_F64 }, NULL, NULL, NULL, false, NULL);
    assert_int_equal(d->dtype, KV_F64);
    assert_int_equal(d->device.type, EMU.type);
    static const double want_t[4] = { 1.5, 3, -2, 4 };
    kv_test_expect_values_on(d, want_t, 4, 0);
    kv_tensor *h = kv__to_copy(t, NULL, NULL, &KV_DEVICE_CPU0, NULL, false, NULL);
    assert_int_equal(h->device.type, KV_DEVICE_CPU);
    assert_non_null(kv_tensor_data(h));
    kv_test_expect_values_on(h, want_t, 4, 0);
    kv_tensor *k = kv_contiguous(t, 0);
    assert_true(kv_tensor_is_contiguous(k));
    kv_test_expect_values_on(k, want_t, 4, 0);
    /* copy_ converting f64 into f32, through a transposed destination */
    assert_int_equal(kv_copy_(t, d, false), KV_OK);
    static const double want_a[4] = { 1.5, -2, 3, 4 };
    kv_test_expect_values_on(a, want_a, 4, 0);
    kv_tensor *objs[] = { k, h, d, c, t, a };
    release_all(objs, sizeof objs / sizeof objs[0]);
}

static void test_declines_and_errors(void **state) {
    (void)state;
    const int64_t iv[4] = { 1, 2, 3, 4 };
    const int64_t s4[1] = { 4 }, s22[2] = { 2, 2 };
    kv_tensor *ci = kv_tensor_from_data(iv, s4, 1, KV_I64);
    kv_tensor *i = kv_backend_copy_to_device(ci, EMU);
    /* No i64 arithmetic: declined, which the runner counts UNSUPPORTED. */
    kv_error_clear();
    assert_null(kv_add(i, i, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    assert_non_null(strstr(kv_last_error_message(), "no CUDA kernel"));
    /* Bad input is the reference's error, not a decline. */
    kv_error_clear();
    assert_null(kv_add(i, i, kv_scalar_double(2.5)));
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    kv_error_clear();
    assert_null(kv__softmax(i, 0, false));
    assert_int_equal(kv_last_error(), KV_ERR_DTYPE);
    const float fv[4] = { 0 };
    kv_tensor *f = dev_f32(fv, s22, 2), *g = dev_f32(fv, s4, 1);
    kv_error_clear();
    assert_null(kv_mm(f, g));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    kv_error_clear();
    assert_null(kv_sum(f, &L(0, -2), false, NULL));
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    kv_tensor *objs[] = { g, f, i, ci };
    release_all(objs, sizeof objs / sizeof objs[0]);
}

/* Ops without a CUDA kernel run staged through the host reference (the
 * backend fallback), and are still no kernel of CUDA's own. */
static void test_staged_fallback(void **state) {
    (void)state;
    const kv_op *isel = kv_op_find("index_select"), *fill = kv_op_find("fill_.Scalar");
    assert_int_equal(kv_op_entry_kind(isel, (kv_key)EMU.type), KV_ENTRY_FALLBACK);
    assert_int_equal(kv_op_entry_kind(kv_op_find("mm"), (kv_key)EMU.type), KV_ENTRY_KERNEL);
    const float wv[6] = { 1, 2, 3, 4, 5, 6 };
    const int64_t s32[2] = { 3, 2 }, s2[1] = { 2 };
    kv_tensor *w = dev_f32(wv, s32, 2);
    const int64_t iv[2] = { 2, 0 };
    kv_tensor *ci = kv_tensor_from_data(iv, s2, 1, KV_I64);
    kv_tensor *idx = kv_backend_copy_to_device(ci, EMU);
    kv_tensor *r = kv_index_select(w, 0, idx);
    assert_non_null(r);
    assert_int_equal(r->device.type, EMU.type);
    assert_null(kv_tensor_data(r));
    static const double want_r[4] = { 5, 6, 1, 2 };
    kv_test_expect_values_on(r, want_r, 4, 0);
    /* An in-place op through a view: written back, version bumped, the
     * argument itself returned. */
    kv_tensor *row = kv_select(w, 0, 1);
    const int64_t v0 = kv_tensor_version(w);
    kv_ivalue slots[4];
    kv_stack st = kv_stack_on(slots, 4);
    kv_push_tensor(&st, row);
    kv_push_scalar(&st, kv_scalar_double(-7));
    assert_int_equal(kv_call(fill, &st), KV_OK);
    assert_ptr_equal(st.slots[0].v.tensor, row);
    kv_stack_clear_returns(&st);
    assert_int_equal(kv_tensor_version(w), v0 + 1);
    static const double want_w[6] = { 1, 2, -7, -7, 5, 6 };
    kv_test_expect_values_on(w, want_w, 6, 0);
    kv_tensor *objs[] = { row, r, idx, ci, w };
    release_all(objs, sizeof objs / sizeof objs[0]);
}

/* ---- through kvrun ---- */

static int run(const char *cmd, char *out, size_t cap) {
    char o[] = "/tmp/kv_test_cuda_outXXXXXX";
    const int fd = mkstemp(o);
    assert_true(fd >= 0);
    close(fd);
    char full[2048];
    snprintf(full, sizeof full, "%s >%s 2>&1", cmd, o);
    const int rc = system(full);
    FILE *fp = fopen(o, "r");
    const size_t n = fp ? fread(out, 1, cap - 1, fp) : 0;
    out[n] = '\0';
    if (fp) fclose(fp);
    unlink(o);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The case files of the ops the CUDA plugin implements, every check, on
 * the emulation next to SIM and the CPU: nothing may fail. */
static void test_suite_on_emulation(void **state) {
    (void)state;
    static char out[1 << 16];
    const int rc = run("build/kvrun cases/binary.case cases/unary.case cases/reduce.case cases/matmul.case "
                       "cases/norm.case cases/join.case cases/shape.case --backend=" EMU_PATH
                       " --report-dir=build/tests/cuda-emu-report",
                       out, sizeof out);
    if (rc != 0) print_message("%s\n", out);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, " 0 failed"));
    FILE *f = fopen("build/tests/cuda-emu-report/results.jsonl", "r");
    assert_non_null(f);
    char line[4096];
    int passes = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"check\":\"variants:cuda-emu\"") && strstr(line, "\"status\":\"PASS\"")) passes++;
    fclose(f);
    assert_true(passes > 500);
}

static void test_real_plugin_without_gpu(void **state) {
    (void)state;
    if (access(CUDA_PATH, R_OK) != 0) skip(); /* `ninja cuda` did not run here */
    kv_error_clear();
    const kv_status st = kv_backend_load(CUDA_PATH);
    if (st == KV_OK) {
        /* A GPU is here: it serves CUDA. */
        assert_true(kv_backend_available(KV_DEVICE_CUDA));
        return;
    }
    assert_int_equal(st, KV_ERR_DEVICE);
    const char *m = kv_last_error_message();
    assert_non_null(strstr(m, CUDA_PATH));
    assert_non_null(strstr(m, "unavailable"));
    assert_non_null(strstr(m, "CUDA"));
    const kv_backend_info *r = kv_backend_find(KV_DEVICE_CUDA);
    assert_non_null(r);
    assert_int_equal(r->state, KV_BACKEND_UNAVAILABLE);
    assert_string_equal(r->name, "cuda");
    assert_false(kv_backend_available(KV_DEVICE_CUDA));
    assert_null(kv_allocator_for(KV_DEVICE_CUDA));
    assert_int_equal(kv_op_entry_kind(kv_op_find("mm"), KV_KEY_CUDA), KV_ENTRY_MISSING);
    /* Its cases: UNSUPPORTED with the reason, and the run passes. */
    static char out[1 << 14];
    const int rc = run("build/kvrun --backend=" CUDA_PATH " --op=mm --dtype=f32 --shape=3x4:4x2 --check=variants "
                       "--report-dir=build/tests/cuda-report",
                       out, sizeof out);
    if (rc != 0) print_message("%s\n", out);
    assert_int_equal(rc, 0);
    FILE *f = fopen("build/tests/cuda-report/results.jsonl", "r");
    assert_non_null(f);
    char line[4096];
    bool found = false;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"check\":\"variants:CUDA\"")) {
            assert_non_null(strstr(line, "\"status\":\"UNSUPPORTED\""));
            assert_non_null(strstr(line, "unavailable"));
            found = true;
        }
    fclose(f);
    assert_true(found);
}

int main(void) {
    /* Plugins register on top of the composed runtime. */
    if (kv_init() != KV_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_memory),
        cmocka_unit_test(test_pointwise),
        cmocka_unit_test(test_reduce_matmul_norm),
        cmocka_unit_test(test_copies_and_cat),
        cmocka_unit_test(test_declines_and_errors),
        cmocka_unit_test(test_staged_fallback),
        cmocka_unit_test(test_suite_on_emulation),
        cmocka_unit_test(test_real_plugin_without_gpu),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
