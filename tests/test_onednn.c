/* The oneDNN plugin (kernels/onednn) behind the plugin ABI: its
 * descriptor and memory, results the suite's fills do not pin down (the
 * sign of neg's zeros, addmm's beta = 0 ignoring NaN, bits of raw copies),
 * the calls it must decline because oneDNN's semantics differ from the
 * reference (they are UNSUPPORTED in the runner, never computed), ops it
 * has no kernel for running staged through the reference, and bad
 * input failing with the reference's own error. Needs
 * build/backends/libkv_onednn.so (tests run from the repository root). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/init.h"
#include "kv/kv.h"

#define ONEDNN_PATH "build/backends/libkv_onednn.so"

static kv_device dev; /* the slot the loader gave the plugin */

static int setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) {
        print_error("kv_init: %s\n", kv_last_error_message());
        return -1;
    }
    if (kv_backend_load(ONEDNN_PATH) != KV_OK) {
        print_error("cannot load %s: %s\n", ONEDNN_PATH, kv_last_error_message());
        return -1;
    }
    for (int i = 0; i < kv_backend_count(); i++)
        if (strcmp(kv_backend_at(i)->name, "onednn") == 0) dev = (kv_device){ kv_backend_at(i)->device_type, 0 };
    return 0;
}

/* A tensor on the plugin's device holding `data`. */
static kv_tensor *on_dev(const void *data, const int64_t *sizes, int ndim, kv_dtype dt) {
    kv_tensor *h = kv_tensor_from_data(data, sizes, ndim, dt);
    assert_non_null(h);
    kv_tensor *t = kv_backend_copy_to_device(h, dev);
    kv_tensor_release(h);
    assert_non_null(t);
    return t;
}

static const float *f32_data(const kv_tensor *t) {
    const float *p = kv_tensor_data(t);
    assert_non_null(p);
    return p + t->offset;
}

static void test_descriptor_and_memory(void **state) {
    (void)state;
    const kv_backend_info *b = NULL;
    for (int i = 0; i < kv_backend_count(); i++)
        if (strcmp(kv_backend_at(i)->name, "onednn") == 0) b = kv_backend_at(i);
    assert_non_null(b);
    assert_int_equal(b->state, KV_BACKEND_LOADED);
    assert_true(b->device_type >= KV_DEVICE_PLUGIN0);
    /* Its slot goes by its name; the version is oneDNN's own. */
    assert_string_equal(kv_device_type_name(b->device_type), "onednn");
    assert_int_equal(strncmp(b->version, "oneDNN ", 7), 0);
    /* Host memory, 64-byte aligned, readable by the host. */
    const int64_t sz[1] = { 5 };
    kv_tensor *t = kv_tensor_empty(sz, 1, KV_F32, dev);
    assert_non_null(t);
    assert_non_null(kv_tensor_data(t));
    assert_int_equal((uintptr_t)t->storage->data % 64, 0);
    kv_tensor_release(t);
}

/* neg(+0) is -0: the kernel multiplies by -1 (eltwise_linear would give
 * +0). */
static void test_neg_signed_zeros(void **state) {
    (void)state;
    const float v[4] = { 0.0f, -0.0f, 1.5f, -INFINITY };
    const int64_t sz[1] = { 4 };
    kv_tensor *x = on_dev(v, sz, 1, KV_F32);
    kv_tensor *y = kv_neg(x);
    assert_non_null(y);
    assert_int_equal(y->device.type, dev.type);
    const float *p = f32_data(y);
    assert_true(p[0] == 0.0f && signbit(p[0]));
    assert_true(p[1] == 0.0f && !signbit(p[1]));
    assert_true(p[2] == -1.5f);
    assert_true(p[3] == INFINITY);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* a + alpha*b through the binary primitive's src1 scale, and a strided
 * (transposed) operand. */
static void test_add_alpha_transposed(void **state) {
    (void)state;
    const float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 10, 20, 30, 40, 50, 60 };
    const int64_t sz[2] = { 2, 3 };
    kv_tensor *x = on_dev(a, sz, 2, KV_F32), *bb = on_dev(b, sz, 2, KV_F32);
    kv_tensor *y = kv_add(x, bb, kv_scalar_double(0.5));
    assert_non_null(y);
    const float *p = f32_data(y);
    for (int i = 0; i < 6; i++) assert_true(p[i] == a[i] + 0.5f * b[i]);
    kv_tensor_release(y);
    /* x^T viewed as 3x2 plus itself. */
    const int64_t tsz[2] = { 3, 2 }, tst[2] = { 1, 3 };
    kv_tensor *xt = kv_tensor_view(x, tsz, tst, 2, 0);
    assert_non_null(xt);
    y = kv_add(xt, xt, kv_scalar_int(1));
    assert_non_null(y);
    p = f32_data(y);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) assert_true(p[i * 2 + j] == 2 * a[j * 3 + i]);
    kv_tensor_release(y);
    kv_tensor_release(xt);
    kv_tensor_release(bb);
    kv_tensor_release(x);
}

/* beta = 0: self's NaN must not reach the result. */
static void test_addmm_beta_zero_ignores_nan(void **state) {
    (void)state;
    const float c[4] = { NAN, NAN, NAN, NAN }, a[4] = { 1, 2, 3, 4 }, b[4] = { 1, 0, 0, 1 };
    const int64_t sz[2] = { 2, 2 };
    kv_tensor *tc = on_dev(c, sz, 2, KV_F32), *ta = on_dev(a, sz, 2, KV_F32), *tb = on_dev(b, sz, 2, KV_F32);
    kv_tensor *y = kv_addmm(tc, ta, tb, kv_scalar_int(0), kv_scalar_int(2));
    assert_non_null(y);
    const float *p = f32_data(y);
    for (int i = 0; i < 4; i++) assert_true(p[i] == 2 * a[i]);
    kv_tensor_release(y);
    kv_tensor_release(tb);
    kv_tensor_release(ta);
    kv_tensor_release(tc);
}

/* A clone of a c128 tensor (no oneDNN type) moves its bits exactly, NaN
 * payloads included. */
static void test_clone_moves_bits(void **state) {
    (void)state;
    uint64_t bits[4] = { 0x7ff0000000000123ull, 0x8000000000000000ull, 0x3ff0000000000000ull, 0xfff8000000000abcull };
    const int64_t sz[1] = { 2 };
    kv_tensor *x = on_dev(bits, sz, 1, KV_C128);
    kv_tensor *y = kv_clone(x, NULL);
    assert_non_null(y);
    assert_memory_equal(kv_tensor_data(y), bits, sizeof bits);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* Calls where oneDNN's semantics differ from the reference are declined
 * (KV_ERR_MISSING_KERNEL), never computed. */
static void test_declines(void **state) {
    (void)state;
    const float v[2] = { NAN, -1.0f };
    const int64_t sz[1] = { 2 };
    kv_tensor *x = on_dev(v, sz, 1, KV_F32);
    kv_error_clear();
    assert_null(kv_relu(x)); /* eltwise_relu maps NaN to 0 */
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    /* exp has no kernel here (5 ulp; exp(NaN) = +Inf): the backend
     * fallback stages it through the reference, and the runner counts it
     * UNSUPPORTED for this backend. */
    assert_int_equal(kv_op_entry_kind(kv_op_find("exp"), (kv_key)dev.type), KV_ENTRY_FALLBACK);
    assert_int_equal(kv_op_entry_kind(kv_op_find("relu"), (kv_key)dev.type), KV_ENTRY_KERNEL);
    kv_tensor *e = kv_exp(x);
    assert_non_null(e);
    assert_true(isnan(f32_data(e)[0]));
    kv_tensor_release(e);
    const uint16_t hv[2] = { 0x0001, 0x3f80 };
    kv_tensor *h = on_dev(hv, sz, 1, KV_BF16);
    kv_error_clear();
    assert_null(kv_add(h, h, kv_scalar_int(1))); /* bf16 stores flush subnormals */
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    kv_tensor_release(h);
    kv_tensor_release(x);
}

/* Bad input fails with the reference's error, not with a decline. */
static void test_errors_are_the_references(void **state) {
    (void)state;
    const float v[12] = { 0 };
    const int64_t s3[1] = { 3 }, s4[1] = { 4 }, m[2] = { 2, 3 };
    kv_tensor *a = on_dev(v, s3, 1, KV_F32), *b = on_dev(v, s4, 1, KV_F32);
    kv_error_clear();
    assert_null(kv_add(a, b, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    kv_tensor *c = on_dev(v, m, 2, KV_F32);
    kv_error_clear();
    assert_null(kv_mm(c, c)); /* 2x3 @ 2x3 */
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptor_and_memory),
        cmocka_unit_test(test_neg_signed_zeros),
        cmocka_unit_test(test_add_alpha_transposed),
        cmocka_unit_test(test_addmm_beta_zero_ignores_nan),
        cmocka_unit_test(test_clone_moves_bits),
        cmocka_unit_test(test_declines),
        cmocka_unit_test(test_errors_are_the_references),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
