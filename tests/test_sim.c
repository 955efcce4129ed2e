/* The SIM accelerator (kernels/sim) behind the plugin ABI: its allocator,
 * copies that round-trip every layout, memory the host cannot touch,
 * ops that agree with hand-computed values (native and generic kernels,
 * views that alias SIM memory, in-place writes and their version bumps,
 * errors), a SIM kernel for every op of ops.schema, and the accel device
 * running on it. Needs build/backends/libkv_sim.so (tests run from the
 * repository root). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/kv.h"
#include "kv/op_ids.h"
#include "kv/tune.h"
#include "test_util.h"

#define SIM_PATH "build/backends/libkv_sim.so"
static const kv_device SIM = { KV_DEVICE_SIM, 0 };
#define L(...) ((kv_int_list){ (const int64_t[]){ __VA_ARGS__ }, (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)) })

static int setup(void **state) {
    (void)state;
    unsetenv("KV_ACCEL_TARGET");
    if (kv_backend_load(SIM_PATH) != KV_OK) {
        print_error("cannot load %s: %s\n", SIM_PATH, kv_last_error_message());
        return -1;
    }
    return 0;
}

static kv_tensor *cpu_f32(const float *v, const int64_t *sizes, int ndim) {
    kv_tensor *t = kv_tensor_from_data(v, sizes, ndim, KV_F32);
    assert_non_null(t);
    return t;
}

static kv_tensor *to_sim(const kv_tensor *t) {
    kv_tensor *s = kv_backend_copy_to_device(t, SIM);
    assert_non_null(s);
    assert_int_equal(s->device.type, KV_DEVICE_SIM);
    return s;
}

/* A SIM tensor holding v (the CPU staging tensor is released). */
static kv_tensor *sim_f32(const float *v, const int64_t *sizes, int ndim) {
    kv_tensor *h = cpu_f32(v, sizes, ndim);
    kv_tensor *s = to_sim(h);
    kv_tensor_release(h);
    return s;
}

static void test_memory_is_the_plugins(void **state) {
    (void)state;
    const kv_allocator_stats s0 = kv_allocator_stats_of(KV_DEVICE_SIM);
    const int64_t sz[2] = { 3, 5 };
    kv_tensor *t = kv_tensor_empty(sz, 2, KV_F64, SIM);
    assert_non_null(t);
    const kv_allocator_stats s1 = kv_allocator_stats_of(KV_DEVICE_SIM);
    assert_int_equal(s1.live_bytes - s0.live_bytes, 3 * 5 * 8);
    assert_int_equal(s1.live_count - s0.live_count, 1);
    assert_int_equal(s1.total_allocs - s0.total_allocs, 1);
    /* Not host memory: libkv refuses to hand out a pointer, and the
     * address itself is one no CPU can dereference. */
    assert_null(kv_tensor_data(t));
    kv_error_clear();
    const int64_t at[2] = { 0, 0 };
    assert_null(kv_tensor_element(t, at));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    assert_int_equal((uintptr_t)t->storage->data >> 48, 0x51);
    kv_tensor_release(t);
    const kv_allocator_stats s2 = kv_allocator_stats_of(KV_DEVICE_SIM);
    assert_int_equal(s2.live_bytes, s0.live_bytes);
    assert_int_equal(s2.live_count, s0.live_count);
}

static void test_copies_round_trip(void **state) {
    (void)state;
    /* A transposed view at an offset: strides, offset and the bytes
     * outside the view all survive the trip. */
    const float v[8] = { 9, 1, 2, 3, 4, 5, 6, 9 };
    const int64_t n8[1] = { 8 };
    kv_tensor *flat = cpu_f32(v, n8, 1);
    const int64_t sizes[2] = { 3, 2 }, strides[2] = { 1, 3 };
    kv_tensor *tv = kv_tensor_view(flat, sizes, strides, 2, 1);
    assert_non_null(tv);
    kv_tensor *s = to_sim(tv);
    assert_int_equal(s->strides[0], 1);
    assert_int_equal(s->strides[1], 3);
    assert_int_equal(s->offset, 1);
    assert_int_equal(s->storage->nbytes, 8 * sizeof(float));
    assert_true(s->keys == kv_keyset_of(KV_KEY_SIM));
    kv_tensor *back = kv_backend_copy_to_host(s);
    assert_non_null(back);
    assert_int_equal(back->device.type, KV_DEVICE_CPU);
    assert_int_equal(memcmp(back->storage->data, flat->storage->data, 8 * sizeof(float)), 0);
    static const double want[6] = { 1, 4, 2, 5, 3, 6 };
    kv_test_expect_values_on(back, want, 6, 0);
    /* SIM to SIM stays on the device. */
    kv_tensor *s2 = kv_backend_copy_to_device(s, SIM);
    assert_non_null(s2);
    assert_ptr_not_equal(s2->storage, s->storage);
    kv_test_expect_values_on(s2, want, 6, 0);
    /* kv_backend_readable hands host tensors back as they are. */
    kv_tensor *r = kv_backend_readable(flat);
    assert_ptr_equal(r, flat);
    kv_tensor_release(r);
    assert_int_equal(kv_backend_synchronize(KV_DEVICE_SIM), KV_OK);
    kv_tensor_release(s2);
    kv_tensor_release(back);
    kv_tensor_release(s);
    kv_tensor_release(tv);
    kv_tensor_release(flat);
}

static void test_elementwise_and_matmul(void **state) {
    (void)state;
    const float av[4] = { 1, 2, 3, 4 }, bv[4] = { 5, 6, 7, 8 }, rv[2] = { 10, 20 };
    const int64_t s22[2] = { 2, 2 }, s2[1] = { 2 };
    kv_tensor *a = sim_f32(av, s22, 2), *b = sim_f32(bv, s22, 2), *row = sim_f32(rv, s2, 1);
    /* add: the native kernel (same shape), then the generic one (broadcast). */
    kv_tensor *sum = kv_add(a, b, kv_scalar_double(0.5));
    assert_int_equal(sum->device.type, KV_DEVICE_SIM);
    static const double want_sum[4] = { 3.5, 5, 6.5, 8 };
    kv_test_expect_values_on(sum, want_sum, 4, 0);
    kv_tensor *bc = kv_add(a, row, kv_scalar_int(1));
    assert_int_equal(bc->device.type, KV_DEVICE_SIM);
    static const double want_bc[4] = { 11, 22, 13, 24 };
    kv_test_expect_values_on(bc, want_bc, 4, 0);
    /* mm native, and through a transposed SIM view. */
    kv_tensor *p = kv_mm(a, b);
    static const double want_mm[4] = { 19, 22, 43, 50 };
    kv_test_expect_values_on(p, want_mm, 4, 0);
    kv_tensor *at = kv_transpose(a, 0, 1);
    kv_tensor *pt = kv_mm(at, b);
    static const double want_mmt[4] = { 26, 30, 38, 44 };
    kv_test_expect_values_on(pt, want_mmt, 4, 0);
    /* an integer mm takes the generic path */
    const int64_t iv[4] = { 1, 2, 3, 4 };
    kv_tensor *ci = kv_tensor_from_data(iv, s22, 2, KV_I64);
    kv_tensor *si = to_sim(ci);
    kv_tensor *pi = kv_mm(si, si);
    assert_int_equal(pi->dtype, KV_I64);
    static const double want_mmi[4] = { 7, 10, 15, 22 };
    kv_test_expect_values_on(pi, want_mmi, 4, 0);
    kv_tensor *e = kv_exp(a);
    static const double want_exp[4] = { 2.718281828, 7.389056099, 20.08553692, 54.59815003 };
    kv_test_expect_values_on(e, want_exp, 4, 1e-5);
    kv_tensor *objs[] = { e, pi, si, ci, pt, at, p, bc, sum, row, b, a };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

static void test_reductions_softmax_cat(void **state) {
    (void)state;
    const float av[6] = { 1, 2, 3, 4, 5, 6 };
    const int64_t s23[2] = { 2, 3 };
    kv_tensor *a = sim_f32(av, s23, 2);
    kv_tensor *s = kv_sum(a, &L(1), false, NULL);
    assert_int_equal(s->device.type, KV_DEVICE_SIM);
    static const double want_s[2] = { 6, 15 };
    kv_test_expect_values_on(s, want_s, 2, 0);
    kv_tensor *s0 = kv_sum(a, &L(0), true, NULL);
    assert_int_equal(s0->ndim, 2);
    static const double want_s0[3] = { 5, 7, 9 };
    kv_test_expect_values_on(s0, want_s0, 3, 0);
    const float zv[2] = { 0, 0 };
    const float lv[2] = { 0, (float)log(3.0) };
    const int64_t s12[2] = { 1, 2 };
    kv_tensor *z = sim_f32(zv, s12, 2), *l = sim_f32(lv, s12, 2);
    kv_tensor *sz = kv__softmax(z, 1, false), *sl = kv__softmax(l, -1, false);
    static const double half[2] = { 0.5, 0.5 }, q[2] = { 0.25, 0.75 };
    kv_test_expect_values_on(sz, half, 2, 1e-7);
    kv_test_expect_values_on(sl, q, 2, 1e-6);
    kv_tensor *items[3] = { z, l, z };
    kv_tensor *c = kv_cat((kv_tensor_list){ items, 3 }, 0);
    assert_int_equal(c->device.type, KV_DEVICE_SIM);
    assert_int_equal(c->sizes[0], 3);
    static const double want_c[6] = { 0, 0, 0, 1.0986123, 0, 0 };
    kv_test_expect_values_on(c, want_c, 6, 1e-6);
    kv_tensor *objs[] = { c, sl, sz, l, z, s0, s, a };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

static void test_views_alias_sim_memory(void **state) {
    (void)state;
    const float av[6] = { 1, 2, 3, 4, 5, 6 };
    const int64_t s23[2] = { 2, 3 };
    kv_tensor *a = sim_f32(av, s23, 2);
    kv_tensor *t = kv_transpose(a, 0, 1);
    kv_tensor *v = kv_view(a, L(3, 2));
    kv_tensor *r = kv_select(a, 0, 1);
    kv_tensor *views[3] = { t, v, r };
    for (int i = 0; i < 3; i++) {
        assert_non_null(views[i]);
        assert_ptr_equal(views[i]->storage, a->storage);
        assert_int_equal(views[i]->device.type, KV_DEVICE_SIM);
        assert_true(kv_keyset_has(views[i]->keys, KV_KEY_SIM));
        assert_false(kv_keyset_has(views[i]->keys, KV_KEY_CPU));
    }
    assert_int_equal(t->strides[0], 1);
    assert_int_equal(t->strides[1], 3);
    assert_int_equal(r->offset, 3);
    static const double want_r[3] = { 4, 5, 6 }, want_t[6] = { 1, 4, 2, 5, 3, 6 };
    kv_test_expect_values_on(r, want_r, 3, 0);
    kv_test_expect_values_on(t, want_t, 6, 0);
    /* An in-place write through a view lands in SIM memory, bumps the
     * SIM storage's version, and returns the argument itself. */
    const int64_t v0 = kv_tensor_version(a);
    const float ones[3] = { 1, 1, 1 };
    const int64_t s3[1] = { 3 };
    kv_tensor *o = sim_f32(ones, s3, 1);
    assert_int_equal(kv_add_(r, o, kv_scalar_int(10)), KV_OK);
    assert_int_equal(kv_tensor_version(a), v0 + 1);
    static const double want_a[6] = { 1, 2, 3, 14, 15, 16 };
    kv_test_expect_values_on(a, want_a, 6, 0);
    /* copy_ from the host into a SIM tensor (a 0-dim CPU tensor may
     * take part in a SIM op, as in PyTorch). */
    const float seven = 7;
    kv_tensor *c7 = kv_tensor_from_data(&seven, NULL, 0, KV_F32);
    assert_int_equal(kv_copy_(t, c7, false), KV_OK);
    static const double sevens[6] = { 7, 7, 7, 7, 7, 7 };
    kv_test_expect_values_on(a, sevens, 6, 0);
    kv_tensor *objs[] = { c7, o, r, v, t, a };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

static void test_devices_and_factories(void **state) {
    (void)state;
    kv_tensor *z = kv_zeros(L(2, 2), NULL, NULL, &SIM, NULL);
    assert_non_null(z);
    assert_int_equal(z->device.type, KV_DEVICE_SIM);
    static const double zeros[4] = { 0, 0, 0, 0 };
    kv_test_expect_values_on(z, zeros, 4, 0);
    /* _to_copy to the CPU leaves SIM; to SIM stays. */
    kv_tensor *h = kv__to_copy(z, &(kv_dtype){ KV_F64 }, NULL, &KV_DEVICE_CPU0, NULL, false, NULL);
    assert_non_null(h);
    assert_int_equal(h->device.type, KV_DEVICE_CPU);
    assert_int_equal(h->dtype, KV_F64);
    assert_non_null(kv_tensor_data(h));
    kv_tensor *s = kv__to_copy(z, NULL, NULL, &SIM, NULL, false, NULL);
    assert_non_null(s);
    assert_int_equal(s->device.type, KV_DEVICE_SIM);
    assert_ptr_not_equal(s->storage, z->storage);
    kv_error_clear();
    assert_null(kv_zeros(L(2), NULL, NULL, &(kv_device){ KV_DEVICE_SIM, 1 }, NULL));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    kv_tensor_release(s);
    kv_tensor_release(h);
    kv_tensor_release(z);
}

static void test_errors_match_the_reference(void **state) {
    (void)state;
    const float v[6] = { 0 };
    const int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 }, s22[2] = { 2, 2 };
    kv_tensor *a = sim_f32(v, s23, 2), *b = sim_f32(v, s22, 2), *c = sim_f32(v, s32, 2);
    kv_error_clear();
    assert_null(kv_add(a, b, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    assert_non_null(strstr(kv_last_error_message(), "add.Tensor"));
    kv_error_clear();
    assert_null(kv_mm(a, b));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    kv_error_clear();
    assert_null(kv_sum(a, &L(2), false, NULL));
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    /* A SIM and a CPU matrix do not mix. */
    kv_tensor *h = cpu_f32(v, s32, 2);
    kv_error_clear();
    assert_null(kv_mm(a, h));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    kv_tensor *ok = kv_mm(a, c);
    assert_non_null(ok);
    kv_tensor *objs[] = { ok, h, c, b, a };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* Native kernels are perf_dispatch variants beside the generic "ref":
 * each is right on its own, and the native one claims only what it can. */
static void test_native_variants(void **state) {
    (void)state;
    const float av[4] = { 1, 2, 3, 4 }, bv[4] = { 5, 6, 7, 8 };
    const int64_t s22[2] = { 2, 2 };
    kv_tensor *ca = cpu_f32(av, s22, 2), *cb = cpu_f32(bv, s22, 2);
    kv_tensor *a = to_sim(ca), *b = to_sim(cb);
    const kv_op *mm = kv_op_find("mm"), *add = kv_op_find("add.Tensor");
    static const char *const names[2] = { "ref", "native" };
    static const double want_mm[4] = { 19, 22, 43, 50 }, want_add[4] = { -9, -10, -11, -12 };
    assert_int_equal(kv_tune_variant_count(mm, KV_KEY_SIM), 2);
    for (int v = 0; v < 2; v++) {
        kv_ivalue slots[4];
        kv_stack st = kv_stack_on(slots, 4);
        kv_push_tensor(&st, a);
        kv_push_tensor(&st, b);
        assert_true(kv_tune_variant_compatible(mm, KV_KEY_SIM, kv_tune_variant_find(mm, KV_KEY_SIM, names[v]), &st));
        assert_int_equal(kv_tune_call_variant(mm, KV_KEY_SIM, names[v], &st), KV_OK);
        assert_int_equal(st.size, 1);
        kv_test_expect_values_on(st.slots[0].v.tensor, want_mm, 4, 0);
        kv_stack_clear_returns(&st);
        st = kv_stack_on(slots, 4);
        kv_push_tensor(&st, a);
        kv_push_tensor(&st, b);
        kv_push_scalar(&st, kv_scalar_int(-2));
        assert_int_equal(kv_tune_call_variant(add, KV_KEY_SIM, names[v], &st), KV_OK);
        kv_test_expect_values_on(st.slots[0].v.tensor, want_add, 4, 0);
        kv_stack_clear_returns(&st);
    }
    /* An integer mm is not the native variant's. */
    const int64_t iv[4] = { 1, 2, 3, 4 };
    kv_tensor *ci = kv_tensor_from_data(iv, s22, 2, KV_I64);
    kv_tensor *si = to_sim(ci);
    kv_ivalue slots[4];
    kv_stack st = kv_stack_on(slots, 4);
    kv_push_tensor(&st, si);
    kv_push_tensor(&st, si);
    assert_false(kv_tune_variant_compatible(mm, KV_KEY_SIM, kv_tune_variant_find(mm, KV_KEY_SIM, "native"), &st));
    kv_tensor *objs[] = { si, ci, b, a, cb, ca };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

static void test_every_op_has_a_sim_kernel(void **state) {
    (void)state;
    int missing = 0, builtin = 0;
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (kv_op_builtin_id(op) < 0) continue;
        builtin++;
        if (kv_op_entry_kind(op, KV_KEY_SIM) != KV_ENTRY_KERNEL) {
            print_error("no SIM kernel for %s\n", kv_op_name(op));
            missing++;
        }
    }
    assert_int_equal(builtin, KV_OP_COUNT);
    assert_int_equal(missing, 0);
}

static void test_accel_runs_on_sim(void **state) {
    (void)state;
    if (kv_backend_available(KV_DEVICE_CUDA)) skip();
    assert_int_equal(kv_accel_target(), KV_KEY_SIM);
    const float av[3] = { 1, 2, 3 };
    const int64_t s3[1] = { 3 };
    kv_tensor *s = sim_f32(av, s3, 1);
    kv_tensor *x = kv_accel_to(s);
    assert_non_null(x);
    kv_accel_counters_reset();
    kv_tensor *y = kv_mul(x, x);
    assert_non_null(y);
    assert_true(kv_tensor_is_accel(y));
    assert_null(kv_tensor_data(y)); /* it lives in SIM memory */
    static const double want[3] = { 1, 4, 9 };
    kv_test_expect_values_on(y, want, 3, 0);
    const kv_accel_counters n = kv_accel_counters_of("mul.Tensor");
    assert_int_equal(n.fast + n.slow, 1);
    /* Runner-style: a host tensor copied onto the accel device. */
    kv_tensor *h = cpu_f32(av, s3, 1);
    kv_tensor *x2 = kv_backend_copy_to_device(h, (kv_device){ KV_DEVICE_ACCEL, 0 });
    assert_non_null(x2);
    assert_true(kv_tensor_is_accel(x2));
    kv_tensor *y2 = kv_mul(x2, x2);
    kv_test_expect_values_on(y2, want, 3, 0);
    kv_tensor *objs[] = { y2, x2, h, y, x, s };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

int main(void) {
    /* Plugins and the raw registry API expect the runtime composed. */
    if (kv_init() != KV_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_is_the_plugins),
        cmocka_unit_test(test_copies_round_trip),
        cmocka_unit_test(test_elementwise_and_matmul),
        cmocka_unit_test(test_reductions_softmax_cat),
        cmocka_unit_test(test_views_alias_sim_memory),
        cmocka_unit_test(test_devices_and_factories),
        cmocka_unit_test(test_errors_match_the_reference),
        cmocka_unit_test(test_native_variants),
        cmocka_unit_test(test_every_op_has_a_sim_kernel),
        cmocka_unit_test(test_accel_runs_on_sim),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
