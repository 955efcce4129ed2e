/* The foreach ops where the case grammar cannot reach: the typed API's
 * result array, an empty self list for a one-list op, lists longer than
 * a case holds (the wrapper's heap slots) and than the accel box holds,
 * the all-or-nothing in-place rule, an element that is also another
 * element's `other`, the functionalize graph and the autograd nodes.
 * Every value is compared bit for bit with add/add_/mul on each element,
 * on the CPU, SIM and accel's fast (both gates) and slow paths. */
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

/* A 1-D f32 tensor of n values base + k/4 (exact), on w. */
static kv_tensor *make(where w, int64_t n, float base) {
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t k = 0; k < n; k++) v[k] = base + (float)(k % 7) * 0.25f;
    kv_tensor *t = kv_tensor_from_data(v, &n, 1, KV_F32);
    free(v);
    return place(w, t);
}

static void assert_same(const kv_tensor *got_any, const kv_tensor *want_any, where w, const char *what, int i) {
    kv_tensor *got = host(got_any), *want = host(want_any);
    const int64_t n = kv_tensor_numel(got);
    if (got->dtype != want->dtype || n != kv_tensor_numel(want) ||
        memcmp(kv_tensor_data(got), kv_tensor_data(want), (size_t)n * kv_dtype_size(got->dtype)) != 0)
        fail_msg("%s on %s: element %d differs from the per-tensor op's", what, where_name(w), i);
    kv_tensor_release(got);
    kv_tensor_release(want);
}

#define N 3

/* _foreach_add, _foreach_add_ and _foreach_mul against add, add_ and a
 * multiplication by a 0-dim tensor of the scalar, element by element, on
 * every path; lists of different sizes per element (one of them empty). */
static void test_matches_per_tensor_ops(void **state) {
    (void)state;
    static const int64_t sizes[N] = { 5, 0, 12 };
    for (where w = ON_CPU; w < WHERE_COUNT; w++) {
        enter(w);
        kv_tensor *a[N], *b[N], *got[N], *want[N];
        for (int i = 0; i < N; i++) {
            a[i] = make(w, sizes[i], (float)i);
            b[i] = make(w, sizes[i], -2.0f * (float)i);
        }
        const kv_tensor_list la = { a, N }, lb = { b, N };
        check_ok(kv__foreach_add(la, lb, kv_scalar_double(0.5), got), w, "_foreach_add");
        assert_path(w, "_foreach_add.List");
        for (int i = 0; i < N; i++) {
            want[i] = kv_add(a[i], b[i], kv_scalar_double(0.5));
            assert_non_null(want[i]);
            assert_same(got[i], want[i], w, "_foreach_add", i);
        }
        release_all(got, N);
        check_ok(kv__foreach_mul(la, kv_scalar_int(-3), got), w, "_foreach_mul");
        for (int i = 0; i < N; i++) {
            kv_tensor *three = kv_full((kv_int_list){ NULL, 0 }, kv_scalar_int(-3), &(kv_dtype){ KV_F32 }, NULL,
                                       &a[i]->device, NULL);
            assert_non_null(three);
            kv_tensor *m = kv_mul(a[i], three);
            assert_non_null(m);
            assert_same(got[i], m, w, "_foreach_mul", i);
            kv_tensor_release(m);
            kv_tensor_release(three);
        }
        release_all(got, N);
        /* In place: the same values as add's, written into each self. */
        check_ok(kv__foreach_add_(la, lb, kv_scalar_double(0.5)), w, "_foreach_add_");
        assert_path(w, "_foreach_add_.List");
        for (int i = 0; i < N; i++) assert_same(a[i], want[i], w, "_foreach_add_", i);
        release_all(want, N);
        release_all(a, N);
        release_all(b, N);
        leave();
    }
}

/* PyTorch's list rules, before anything runs: an empty list, lists of
 * two lengths; an element's own error names the element. */
static void test_list_errors(void **state) {
    (void)state;
    kv_tensor *a[2] = { make(ON_CPU, 4, 1.0f), make(ON_CPU, 4, 2.0f) };
    kv_tensor *b[2] = { make(ON_CPU, 4, 3.0f), make(ON_CPU, 5, 4.0f) };
    kv_tensor *got[2] = { NULL, NULL };
    assert_int_equal(kv__foreach_mul((kv_tensor_list){ a, 0 }, kv_scalar_int(2), got), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "Tensor list must have at least one tensor."));
    assert_int_equal(kv__foreach_add((kv_tensor_list){ a, 2 }, (kv_tensor_list){ b, 1 }, kv_scalar_int(1), got),
                     KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "Tensor lists must have the same number of tensors, got 2 and 1"));
    assert_int_equal(kv__foreach_add((kv_tensor_list){ a, 2 }, (kv_tensor_list){ b, 2 }, kv_scalar_int(1), got),
                     KV_ERR_SHAPE);
    assert_non_null(strstr(kv_last_error_message(), "_foreach_add.List: element 1: "));
    assert_null(got[0]);
    assert_int_equal(kv__foreach_add((kv_tensor_list){ a, 1 }, (kv_tensor_list){ b, 1 }, kv_scalar_int(1), NULL),
                     KV_ERR_INVALID_ARG);
    release_all(a, 2);
    release_all(b, 2);
}

/* The in-place op checks every element before it writes one: element 1
 * fails (other would enlarge it), element 0 keeps its values. */
static void test_inplace_all_or_nothing(void **state) {
    (void)state;
    for (where w = ON_CPU; w < WHERE_COUNT; w++) {
        enter(w);
        kv_tensor *a[2] = { make(w, 4, 1.0f), make(w, 1, 2.0f) };
        kv_tensor *b[2] = { make(w, 4, 3.0f), make(w, 4, 4.0f) };
        kv_tensor *before = make(w, 4, 1.0f);
        assert_int_equal(kv__foreach_add_((kv_tensor_list){ a, 2 }, (kv_tensor_list){ b, 2 }, kv_scalar_int(1)),
                         KV_ERR_SHAPE);
        assert_non_null(strstr(kv_last_error_message(), "element 1"));
        assert_same(a[0], before, w, "_foreach_add_ after a failure", 0);
        kv_tensor_release(before);
        release_all(a, 2);
        release_all(b, 2);
        leave();
    }
}

/* self[1] is also other[0]'s... the other way round: other[1] is self[0],
 * which element 0 wrote first; a loop of add_ calls reads the new value. */
static void test_inplace_in_list_order(void **state) {
    (void)state;
    for (where w = ON_CPU; w < WHERE_COUNT; w++) {
        enter(w);
        kv_tensor *x = make(w, 6, 1.0f), *y = make(w, 6, 5.0f), *z = make(w, 6, -1.0f);
        kv_tensor *self[2] = { x, y }, *other[2] = { z, x };
        kv_tensor *wx = make(w, 6, 1.0f), *wy = make(w, 6, 5.0f), *wz = make(w, 6, -1.0f);
        check_ok(kv__foreach_add_((kv_tensor_list){ self, 2 }, (kv_tensor_list){ other, 2 }, kv_scalar_int(2)), w,
                 "_foreach_add_");
        check_ok(kv_add_(wx, wz, kv_scalar_int(2)), w, "add_");
        check_ok(kv_add_(wy, wx, kv_scalar_int(2)), w, "add_");
        assert_same(x, wx, w, "_foreach_add_ in list order", 0);
        assert_same(y, wy, w, "_foreach_add_ in list order", 1);
        kv_tensor *all[6] = { x, y, z, wx, wy, wz };
        release_all(all, 6);
        leave();
    }
}

/* Longer lists than a case holds: the typed wrapper's stack goes to the
 * heap past KV_STACK_MAX; on accel the box holds KV_STACK_MAX returns, and
 * a longer list is a clear error, not a truncated result. */
#define LONG 40
static void test_long_lists(void **state) {
    (void)state;
    kv_tensor *a[LONG], *got[LONG];
    for (int i = 0; i < LONG; i++) a[i] = make(ON_CPU, 3, (float)i);
    check_ok(kv__foreach_mul((kv_tensor_list){ a, LONG }, kv_scalar_int(2), got), ON_CPU, "_foreach_mul of 40");
    for (int i = 0; i < LONG; i++) {
        kv_tensor *want = kv_add(a[i], a[i], kv_scalar_int(1));
        assert_same(got[i], want, ON_CPU, "_foreach_mul of 40", i);
        kv_tensor_release(want);
    }
    release_all(got, LONG);
    release_all(a, LONG);
    enter(ACCEL_FAST_EXACT);
    for (int i = 0; i < LONG; i++) a[i] = make(ACCEL_FAST_EXACT, 3, (float)i);
    assert_int_equal(kv__foreach_mul((kv_tensor_list){ a, LONG }, kv_scalar_int(2), got), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "too few for the 40 tensors returned"));
    release_all(a, LONG);
    leave();
}

/* Functionalize runs _foreach_add_ as _foreach_add plus one copy_ per
 * element, and the caller's tensors hold the values. */
static void test_functionalize_graph(void **state) {
    (void)state;
    kv_tensor *a[2] = { make(ON_CPU, 4, 1.0f), make(ON_CPU, 2, 2.0f) };
    kv_tensor *b[2] = { make(ON_CPU, 4, 3.0f), make(ON_CPU, 2, 4.0f) };
    kv_tensor *want[2] = { kv_add(a[0], b[0], kv_scalar_int(1)), kv_add(a[1], b[1], kv_scalar_int(1)) };
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    check_ok(kv__foreach_add_((kv_tensor_list){ a, 2 }, (kv_tensor_list){ b, 2 }, kv_scalar_int(1)), ON_CPU,
             "_foreach_add_ under functionalize");
    assert_int_equal(kv_functionalize_graph_count(), 3);
    assert_string_equal(kv_functionalize_graph_op(0), "_foreach_add.List");
    assert_int_equal(kv_functionalize_graph_noutputs(0), 2);
    assert_string_equal(kv_functionalize_graph_op(1), "copy_");
    assert_string_equal(kv_functionalize_graph_op(2), "copy_");
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    for (int i = 0; i < 2; i++) assert_same(a[i], want[i], ON_CPU, "_foreach_add_ under functionalize", i);
    release_all(a, 2);
    release_all(b, 2);
    release_all(want, 2);
}

/* One node per call, one output per element: a backward from output 1
 * reaches self[1] (times the scalar) and nothing else. */
static void test_autograd_node(void **state) {
    (void)state;
    for (where w = ON_CPU; w < WHERE_COUNT; w++) {
        if (w == ON_SIM) continue; /* the autograd path is the same as the CPU's */
        enter(w);
        kv_tensor *a[2] = { make(w, 4, 1.0f), make(w, 3, 2.0f) }, *got[2];
        for (int i = 0; i < 2; i++) assert_int_equal(kv_tensor_set_requires_grad(a[i], true), KV_OK);
        check_ok(kv__foreach_mul((kv_tensor_list){ a, 2 }, kv_scalar_double(2.5), got), w, "_foreach_mul");
        assert_string_equal(kv_tensor_grad_fn_name(got[1]), "ForeachMulBackward0Scalar");
        const kv_int_list three = { (int64_t[]){ 3 }, 1 };
        kv_tensor *ones = kv_full(three, kv_scalar_int(1), &(kv_dtype){ KV_F32 }, NULL, &a[1]->device, NULL);
        assert_non_null(ones);
        check_ok(kv_backward(got[1], ones), w, "backward");
        assert_null(kv_tensor_grad(a[0]));
        kv_tensor *g = kv_tensor_grad(a[1]); /* borrowed */
        assert_non_null(g);
        kv_tensor *want = kv_full(three, kv_scalar_double(2.5), &(kv_dtype){ KV_F32 }, NULL, &a[1]->device, NULL);
        assert_same(g, want, w, "grad of self[1]", 1);
        kv_tensor_release(want);
        kv_tensor_release(ones);
        release_all(got, 2);
        release_all(a, 2);
        leave();
    }
}

/* An in-place foreach on an element that is a view autograd recorded is
 * refused before anything is written (kvsuite's CopySlices wraps a
 * single written tensor); a non-view element takes the node's history. */
static void test_inplace_autograd(void **state) {
    (void)state;
    kv_tensor *leaf = make(ON_CPU, 6, 1.0f), *b[2] = { make(ON_CPU, 3, 2.0f), make(ON_CPU, 6, 3.0f) };
    assert_int_equal(kv_tensor_set_requires_grad(leaf, true), KV_OK);
    kv_tensor *y = kv_mul(leaf, leaf), *z = kv_add(leaf, leaf, kv_scalar_int(1));
    assert_non_null(y);
    assert_non_null(z);
    const int64_t start = 0, end = 3;
    kv_tensor *v = kv_slice(y, 0, &start, &end, 1);
    assert_non_null(v);
    kv_tensor *self[2] = { v, z };
    kv_tensor *before = host(y);
    assert_int_equal(kv__foreach_add_((kv_tensor_list){ self, 2 }, (kv_tensor_list){ b, 2 }, kv_scalar_int(1)),
                     KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "element 0 is a view"));
    assert_same(y, before, ON_CPU, "a refused in-place foreach", 0);
    self[0] = z;
    self[1] = y;
    kv_tensor *b2[2] = { b[1], b[1] };
    check_ok(kv__foreach_add_((kv_tensor_list){ self, 2 }, (kv_tensor_list){ b2, 2 }, kv_scalar_int(1)), ON_CPU,
             "_foreach_add_ on non-leaves");
    assert_string_equal(kv_tensor_grad_fn_name(z), "ForeachAddBackward0List");
    assert_int_equal(kv_tensor_output_nr(y), 1);
    kv_tensor *all[7] = { leaf, b[0], b[1], y, z, v, before };
    release_all(all, 7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_per_tensor_ops), cmocka_unit_test(test_list_errors),
        cmocka_unit_test(test_inplace_all_or_nothing), cmocka_unit_test(test_inplace_in_list_order),
        cmocka_unit_test(test_long_lists),             cmocka_unit_test(test_functionalize_graph),
        cmocka_unit_test(test_autograd_node),         cmocka_unit_test(test_inplace_autograd),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
