/* out= overloads where the case grammar cannot reach: an out that is one
 * of the inputs (the grammar makes every input its own tensor), partial
 * overlap, devices that disagree, and a resize seen through every path:
 * the CPU reference, SIM, accel's fast and slow paths (both gates), with
 * the storage growing out of a small tensor's block. Every result is
 * compared bit for bit with the functional op on fresh inputs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/accel.h"
#include "kv/backend.h"
#include "test_util.h"
#include "accel_paths.h"

/* A [rows, cols] f32 tensor with values base + k/4 (exact in f32), on w. */
static kv_tensor *make(where w, int64_t rows, int64_t cols, float base) {
    const int64_t n = rows * cols;
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t k = 0; k < n; k++) v[k] = base + (float)(k % 11) * 0.25f - 1.0f;
    const int64_t sizes[2] = { rows, cols };
    kv_tensor *t = kv_tensor_from_data(v, sizes, 2, KV_F32);
    free(v);
    return place(w, t);
}

static void assert_same_values(const kv_tensor *got_any, const kv_tensor *want_any, where w, const char *what) {
    kv_tensor *got = host(got_any), *want = host(want_any);
    if (got->ndim != want->ndim || memcmp(got->sizes, want->sizes, (size_t)got->ndim * sizeof got->sizes[0]) != 0)
        fail_msg("%s on %s: shape differs from the expected one", what, where_name(w));
    const int64_t n = kv_tensor_numel(got);
    kv_tensor *gc = kv_contiguous(got, 0), *wc = kv_contiguous(want, 0);
    assert_non_null(gc);
    assert_non_null(wc);
    if (memcmp(kv_tensor_data(gc), kv_tensor_data(wc), (size_t)n * sizeof(float)) != 0)
        fail_msg("%s on %s: values differ from the expected ones", what, where_name(w));
    kv_tensor_release(gc);
    kv_tensor_release(wc);
    kv_tensor_release(got);
    kv_tensor_release(want);
}

/* A 2-D tensor's sizes and strides. */
static void assert_2d(const kv_tensor *t, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->sizes[0], rows);
    assert_int_equal(t->sizes[1], cols);
    assert_int_equal(t->strides[0], row_stride);
    assert_int_equal(t->strides[1], col_stride);
}

/* add(a, b, out=a), mul(a, b, out=b), mm(a, b, out=a), clamp(a, out=a):
 * the functional op's values, in the caller's own tensor. */
static void test_out_is_an_input(void **state) {
    (void)state;
    for (int w = 0; w < WHERE_COUNT; w++) {
        enter((where)w);
        kv_tensor *a = make((where)w, 4, 4, 0.5f), *b = make((where)w, 4, 4, -2.0f);
        kv_tensor *want_add = kv_add(a, b, kv_scalar_double(2.5));
        kv_tensor *want_mul = kv_mul(a, b);
        kv_tensor *want_mm = kv_mm(a, b);
        const kv_scalar lo = kv_scalar_double(-0.5), hi = kv_scalar_double(0.75);
        kv_tensor *want_clamp = kv_clamp(a, &lo, &hi);
        assert_non_null(want_add);
        assert_non_null(want_mul);
        assert_non_null(want_mm);
        assert_non_null(want_clamp);

        kv_tensor *x = make((where)w, 4, 4, 0.5f), *y = make((where)w, 4, 4, -2.0f);
        kv_accel_counters_reset();
        check_ok(kv_add_out(x, y, kv_scalar_double(2.5), x), (where)w, "add(a, b, out=a)");
        assert_path((where)w, "add.out");
        assert_same_values(x, want_add, (where)w, "add(a, b, out=a)");

        kv_tensor_release(x);
        x = make((where)w, 4, 4, 0.5f);
        check_ok(kv_mul_out(x, y, y), (where)w, "mul(a, b, out=b)");
        assert_same_values(y, want_mul, (where)w, "mul(a, b, out=b)");

        kv_tensor_release(y);
        y = make((where)w, 4, 4, -2.0f);
        kv_accel_counters_reset();
        check_ok(kv_mm_out(x, y, x), (where)w, "mm(a, b, out=a)");
        assert_path((where)w, "mm.out");
        assert_same_values(x, want_mm, (where)w, "mm(a, b, out=a)");

        kv_tensor_release(x);
        x = make((where)w, 4, 4, 0.5f);
        check_ok(kv_clamp_out(x, &lo, &hi, x), (where)w, "clamp(a, out=a)");
        assert_same_values(x, want_clamp, (where)w, "clamp(a, out=a)");

        release_all((kv_tensor *[]){ x, y, a, b, want_add, want_mul, want_mm, want_clamp }, 8);
    }
    leave();
}

static void expect_error(kv_status st, kv_status code, const char *needle, where w, const char *what) {
    if (st != code)
        fail_msg("%s on %s: expected %s, got %s (%s)", what, where_name(w), kv_status_name(code), kv_status_name(st),
                 st == KV_OK ? "" : kv_last_error_message());
    if (strstr(kv_last_error_message(), needle) == NULL)
        fail_msg("%s on %s: message '%s' lacks '%s'", what, where_name(w), kv_last_error_message(), needle);
}

/* An out over part of an input's memory, and cat writing over one of its
 * inputs, are refused on every path with the same error; out itself is
 * left as it was. */
static void test_overlap_refused(void **state) {
    (void)state;
    for (int w = 0; w < WHERE_COUNT; w++) {
        enter((where)w);
        kv_tensor *a = make((where)w, 4, 4, 0.5f), *b = make((where)w, 3, 4, -2.0f);
        /* rows 1..3 of a: the same memory shifted by one row */
        kv_tensor *rows = kv_slice(a, 0, &(int64_t){ 1 }, &(int64_t){ 4 }, 1);
        kv_tensor *head = kv_slice(a, 0, &(int64_t){ 0 }, &(int64_t){ 3 }, 1);
        assert_non_null(rows);
        assert_non_null(head);
        expect_error(kv_add_out(head, b, kv_scalar_int(1), rows), KV_ERR_INVALID_ARG, "single memory location",
                     (where)w, "add(a[0:3], b, out=a[1:4])");
        kv_tensor *items[2] = { a, b };
        expect_error(kv_cat_out((kv_tensor_list){ items, 2 }, 0, a), KV_ERR_INVALID_ARG,
                     "cannot refer to any of the output memory locations", (where)w, "cat([a, b], out=a)");
        release_all((kv_tensor *[]){ rows, head, a, b }, 4);
    }
    leave();
}

/* out on another device than the inputs. */
static void test_device_mismatch(void **state) {
    (void)state;
    enter(ON_CPU);
    kv_tensor *a = make(ON_CPU, 2, 3, 0.0f), *b = make(ON_CPU, 2, 3, 1.0f);
    kv_tensor *sim_out = make(ON_SIM, 2, 3, 0.0f);
    kv_status st = kv_add_out(a, b, kv_scalar_int(1), sim_out);
    assert_int_equal(st, KV_ERR_DEVICE);
    kv_tensor *acc_a = make(ACCEL_FAST_EXACT, 2, 3, 0.0f), *acc_b = make(ACCEL_FAST_EXACT, 2, 3, 1.0f);
    kv_tensor *cpu_out = make(ON_CPU, 2, 3, 0.0f);
    st = kv_mul_out(acc_a, acc_b, cpu_out);
    assert_int_equal(st, KV_ERR_DEVICE);
    release_all((kv_tensor *[]){ a, b, sim_out, acc_a, acc_b, cpu_out }, 6);
}

/* An out of the wrong shape takes the result's, with row-major strides,
 * on every path: a legacy empty [0], a smaller and a larger one; on the
 * CPU a small tensor (header, storage and data in one block) grows out of
 * its block, and no memory stays behind. */
static void test_resize_everywhere(void **state) {
    (void)state;
    const int64_t shapes[][2] = { { 0, 1 }, { 1, 2 }, { 16, 16 } };
    for (int w = 0; w < WHERE_COUNT; w++) {
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            enter((where)w);
            const kv_allocator_stats before = kv_allocator_stats_of(KV_DEVICE_CPU);
            kv_tensor *a = make((where)w, 9, 8, 0.5f), *b = make((where)w, 1, 8, -2.0f);
            kv_tensor *want = kv_add(a, b, kv_scalar_int(1));
            assert_non_null(want);
            kv_tensor *out = make((where)w, shapes[k][0], shapes[k][1], 3.0f);
            if (shapes[k][0] == 0) { /* the legacy empty tensor is 1-D */
                kv_tensor *flat = kv_view(out, (kv_int_list){ (const int64_t[]){ 0 }, 1 });
                kv_tensor_release(out);
                out = flat;
            }
            kv_accel_counters_reset();
            check_ok(kv_add_out(a, b, kv_scalar_int(1), out), (where)w, "add(a, b, out=wrong shape)");
            assert_path((where)w, "add.out");
            assert_2d(out, 9, 8, 8, 1);
            assert_same_values(out, want, (where)w, "add(a, b, out=wrong shape)");
            release_all((kv_tensor *[]){ out, want, a, b }, 4);
            kv_cpu_cache_empty();
            const kv_allocator_stats after = kv_allocator_stats_of(KV_DEVICE_CPU);
            if (w == ON_CPU && after.live_bytes != before.live_bytes)
                fail_msg("resize to [9, 8] from [%lld, %lld]: %lld CPU bytes left live", (long long)shapes[k][0],
                         (long long)shapes[k][1], (long long)(after.live_bytes - before.live_bytes));
        }
    }
    leave();
}

/* An out that is part of a larger tensor: growing the storage they share
 * keeps the other view's values (PyTorch's resize_ keeps the bytes). */
static void test_resize_keeps_other_views(void **state) {
    (void)state;
    for (int w = 0; w < WHERE_COUNT; w++) {
        enter((where)w);
        kv_tensor *base = make((where)w, 1, 4, 0.5f);
        kv_tensor *before = host(base);
        kv_tensor *tail = kv_slice(base, 1, &(int64_t){ 2 }, &(int64_t){ 4 }, 1);
        kv_tensor *a = make((where)w, 6, 8, 0.5f), *b = make((where)w, 6, 8, 1.0f);
        assert_non_null(tail);
        check_ok(kv_add_out(a, b, kv_scalar_int(1), tail), (where)w, "add(a, b, out=base[:, 2:4])");
        assert_2d(tail, 6, 8, 8, 1);
        kv_tensor *head = kv_slice(base, 1, &(int64_t){ 0 }, &(int64_t){ 2 }, 1);
        kv_tensor *want = kv_slice(before, 1, &(int64_t){ 0 }, &(int64_t){ 2 }, 1);
        assert_non_null(head);
        assert_non_null(want);
        assert_same_values(head, want, (where)w, "base[:, 0:2] after its storage grew");
        release_all((kv_tensor *[]){ base, before, tail, a, b, head, want }, 7);
    }
    leave();
}

/* A transposed out of the right shape keeps its strides. */
static void test_right_shape_keeps_strides(void **state) {
    (void)state;
    for (int w = 0; w < WHERE_COUNT; w++) {
        enter((where)w);
        kv_tensor *a = make((where)w, 3, 5, 0.5f), *b = make((where)w, 3, 5, 1.0f);
        kv_tensor *base = make((where)w, 5, 3, 0.0f);
        kv_tensor *out = kv_transpose(base, 0, 1);
        assert_non_null(out);
        kv_tensor *want = kv_mul(a, b);
        check_ok(kv_mul_out(a, b, out), (where)w, "mul(a, b, out=transposed)");
        assert_2d(out, 3, 5, 1, 3);
        assert_same_values(out, want, (where)w, "mul(a, b, out=transposed)");
        release_all((kv_tensor *[]){ want, out, base, a, b }, 5);
    }
    leave();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_is_an_input),
        cmocka_unit_test(test_overlap_refused),
        cmocka_unit_test(test_device_mismatch),
        cmocka_unit_test(test_resize_everywhere),
        cmocka_unit_test(test_right_shape_keeps_strides),
        cmocka_unit_test(test_resize_keeps_other_views),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
