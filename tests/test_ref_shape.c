/* The reference view, joining and indexing kernels, through the typed API
 * (full dispatch to the CPU key). Expected sizes, strides, offsets and
 * values are worked out by hand from PyTorch's rules; errors are checked
 * for their status and for a message naming the op and the reason. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "ref/ref_kernels.h"
#include "test_util.h"

/* ---- helpers ---- */

#define IL(...) ((kv_int_list){ (const int64_t[]){ __VA_ARGS__ }, \
                                (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)) })
#define IL_EMPTY ((kv_int_list){ NULL, 0 })
#define TL(...) ((kv_tensor_list){ (kv_tensor *const[]){ __VA_ARGS__ }, \
                                   (int)(sizeof((kv_tensor *[]){ __VA_ARGS__ }) / sizeof(kv_tensor *)) })
#define DV(...) (const double[]){ __VA_ARGS__ }, (int)(sizeof((double[]){ __VA_ARGS__ }) / sizeof(double))

/* f32 tensor holding 0, 1, 2, ... in row-major order. */
static kv_tensor *arange_f32(kv_int_list sizes) {
    int64_t n = 1;
    for (int d = 0; d < sizes.n; d++) n *= sizes.items[d];
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)i;
    kv_tensor *t = kv_tensor_from_data(v, sizes.items, sizes.n, KV_F32);
    free(v);
    assert_non_null(t);
    return t;
}

static kv_tensor *i64_of(kv_int_list sizes, const int64_t *vals) {
    kv_tensor *t = kv_tensor_from_data(vals, sizes.items, sizes.n, KV_I64);
    assert_non_null(t);
    return t;
}

static kv_tensor *scalar_f32(float v) {
    kv_tensor *t = kv_tensor_from_data(&v, NULL, 0, KV_F32);
    assert_non_null(t);
    return t;
}

/* A successful call: non-NULL, and no error was raised. */
static kv_tensor *ok(kv_tensor *t) {
    if (t == NULL) fail_msg("unexpected error %s: %s", kv_status_name(kv_last_error()), kv_last_error_message());
    return t;
}

static void expect_geometry(const kv_tensor *t, kv_int_list sizes, kv_int_list strides, int64_t offset) {
    assert_non_null(t);
    assert_int_equal(t->ndim, sizes.n);
    assert_int_equal(strides.n, sizes.n);
    for (int d = 0; d < sizes.n; d++) {
        assert_int_equal(t->sizes[d], sizes.items[d]);
        assert_int_equal(t->strides[d], strides.items[d]);
    }
    assert_int_equal(t->offset, offset);
}

static void expect_sizes(const kv_tensor *t, kv_int_list sizes) {
    assert_non_null(t);
    assert_int_equal(t->ndim, sizes.n);
    for (int d = 0; d < sizes.n; d++) assert_int_equal(t->sizes[d], sizes.items[d]);
}

/* Every element, in row-major order of t's logical shape. */
static void expect_values(const kv_tensor *t, const double *want, int n) {
    assert_int_equal(kv_tensor_numel(t), n);
    int64_t index[KV_MAX_DIMS] = { 0 };
    for (int k = 0; k < n; k++) {
        double got = kv_tensor_get_f64(t, index);
        if (got != want[k]) fail_msg("element %d: got %g, want %g", k, got, want[k]);
        kv_test_next_index(t, index);
    }
}

/* A view: same storage, so also the same version counter. */
static void expect_alias(const kv_tensor *view, kv_tensor *base) {
    assert_ptr_equal(view->storage, base->storage);
    assert_int_equal(view->dtype, base->dtype);
    assert_int_equal(view->keys, base->keys);
    assert_null(view->autograd);
    int64_t before = kv_tensor_version(base);
    kv_tensor_bump_version((kv_tensor *)view);
    assert_int_equal(kv_tensor_version(base), before + 1);
}

static void expect_contiguous_new(const kv_tensor *t, const kv_tensor *input) {
    assert_true(kv_tensor_is_contiguous(t));
    assert_int_equal(t->offset, 0);
    assert_int_equal(t->device.type, KV_DEVICE_CPU);
    if (input) assert_ptr_not_equal(t->storage, input->storage);
}

static void expect_error(kv_tensor *t, kv_status code, const char *op, const char *reason) {
    if (t != NULL) {
        kv_tensor_release(t);
        fail_msg("%s: expected error %s, got a result", op, kv_status_name(code));
    }
    const char *msg = kv_last_error_message();
    if (kv_last_error() != code) {
        fail_msg("%s: expected %s, got %s: %s", op, kv_status_name(code), kv_status_name(kv_last_error()), msg);
    }
    /* Kernel messages start with the op's name ("slice.Tensor: ..."). */
    if (strncmp(msg, op, strlen(op)) != 0) fail_msg("message does not start with op '%s': %s", op, msg);
    if (reason && strstr(msg, reason) == NULL) fail_msg("message lacks '%s': %s", reason, msg);
}

/* ---- view / reshape / _unsafe_view ---- */

static void test_view_contiguous(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *v = ok(kv_view(a, IL(3, 2)));
    expect_geometry(v, IL(3, 2), IL(2, 1), 0);
    expect_values(v, DV(0, 1, 2, 3, 4, 5));
    expect_alias(v, a);
    kv_tensor_release(v);

    v = ok(kv_view(a, IL(-1)));
    expect_geometry(v, IL(6), IL(1), 0);
    kv_tensor_release(v);

    v = ok(kv_view(a, IL(1, -1, 1)));
    expect_geometry(v, IL(1, 6, 1), IL(6, 1, 1), 0);
    kv_tensor_release(v);
    kv_tensor_release(a);
}

static void test_view_strided(void **state) {
    (void)state;
    /* Columns 0..2 of a [4, 6]: rows are not contiguous with each other. */
    kv_tensor *base = arange_f32(IL(4, 6));
    int64_t zero = 0, three = 3;
    kv_tensor *s = ok(kv_slice(base, 1, &zero, &three, 1));
    expect_geometry(s, IL(4, 3), IL(6, 1), 0);
    kv_tensor *v = ok(kv_view(s, IL(2, 2, 3)));
    expect_geometry(v, IL(2, 2, 3), IL(12, 6, 1), 0);
    expect_values(v, DV(0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20));
    expect_alias(v, base);
    kv_tensor_release(v);
    v = ok(kv_view(s, IL(4, 3, 1)));
    expect_geometry(v, IL(4, 3, 1), IL(6, 1, 1), 0);
    kv_tensor_release(v);
    expect_error(kv_view(s, IL(12)), KV_ERR_SHAPE, "view",
                 "view size is not compatible with input tensor's size and stride (at least one dimension spans "
                 "across two contiguous subspaces). Use .reshape(...) instead.");

    /* A transposed [2, 3]. */
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *t = ok(kv_transpose(a, 0, 1));
    v = ok(kv_view(t, IL(3, 2, 1)));
    expect_geometry(v, IL(3, 2, 1), IL(1, 3, 3), 0);
    kv_tensor_release(v);
    v = ok(kv_view(t, IL(3, 1, 2)));
    expect_geometry(v, IL(3, 1, 2), IL(1, 6, 3), 0);
    expect_values(v, DV(0, 3, 1, 4, 2, 5));
    kv_tensor_release(v);
    expect_error(kv_view(t, IL(6)), KV_ERR_SHAPE, "view", "Use .reshape(...) instead.");
    expect_error(kv_view(t, IL(2, 3)), KV_ERR_SHAPE, "view", "spans across two contiguous subspaces");

    /* Offsets carry over. */
    kv_tensor *row = ok(kv_select(base, 0, 2));
    v = ok(kv_view(row, IL(2, 3)));
    expect_geometry(v, IL(2, 3), IL(3, 1), 12);
    kv_tensor_release(v);

    kv_tensor_release(row);
    kv_tensor_release(t);
    kv_tensor_release(a);
    kv_tensor_release(s);
    kv_tensor_release(base);
}

static void test_view_errors(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    expect_error(kv_view(a, IL(2, 5)), KV_ERR_SHAPE, "view", "shape '[2, 5]' is invalid for input of size 6");
    expect_error(kv_view(a, IL(-1, 4)), KV_ERR_SHAPE, "view", "shape '[-1, 4]' is invalid for input of size 6");
    expect_error(kv_view(a, IL(-1, 0)), KV_ERR_SHAPE, "view", "shape '[-1, 0]' is invalid for input of size 6");
    expect_error(kv_view(a, IL(-1, -1)), KV_ERR_SHAPE, "view", "only one dimension can be inferred");
    expect_error(kv_view(a, IL(-2, -3)), KV_ERR_NEGATIVE_SIZE, "view", "invalid shape dimension -2");
    expect_error(kv_view(a, IL(1, 1, 1, 1, 1, 1, 1, 1, 6)), KV_ERR_INVALID_ARG, "view", "at most 8");
    kv_tensor_release(a);
}

static void test_view_empty_and_scalar(void **state) {
    (void)state;
    kv_tensor *e = kv_tensor_from_data(NULL, (const int64_t[]){ 0, 3 }, 2, KV_F32);
    assert_non_null(e);
    kv_tensor *v = ok(kv_view(e, IL(3, 0)));
    expect_geometry(v, IL(3, 0), IL(1, 1), 0);
    kv_tensor_release(v);
    v = ok(kv_view(e, IL(0, 3)));
    expect_geometry(v, IL(0, 3), IL(3, 1), 0);
    kv_tensor_release(v);
    expect_error(kv_view(e, IL(0, -1, 5)), KV_ERR_SHAPE, "view", "the unspecified dimension size -1 can be any value");
    expect_error(kv_view(e, IL(-1, 0)), KV_ERR_SHAPE, "view", "cannot reshape tensor of 0 elements");
    kv_tensor_release(e);

    kv_tensor *z = scalar_f32(2.5f);
    v = ok(kv_view(z, IL(1)));
    expect_geometry(v, IL(1), IL(1), 0);
    kv_tensor *back = ok(kv_view(v, IL_EMPTY));
    assert_int_equal(back->ndim, 0);
    expect_values(back, DV(2.5));
    expect_alias(back, z);
    kv_tensor_release(back);
    kv_tensor_release(v);
    v = ok(kv_view(z, IL(-1, 1)));
    expect_geometry(v, IL(1, 1), IL(1, 1), 0);
    kv_tensor_release(v);
    kv_tensor_release(z);
}

static void test_reshape(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *r = ok(kv_reshape(a, IL(3, -1)));
    expect_geometry(r, IL(3, 2), IL(2, 1), 0);
    expect_alias(r, a);
    kv_tensor_release(r);

    kv_tensor *t = ok(kv_transpose(a, 0, 1));
    /* Viewable: still a view. */
    r = ok(kv_reshape(t, IL(3, 2, 1)));
    expect_geometry(r, IL(3, 2, 1), IL(1, 3, 3), 0);
    expect_alias(r, a);
    kv_tensor_release(r);
    /* Not viewable: a contiguous copy in t's row-major order. */
    r = ok(kv_reshape(t, IL(6)));
    expect_geometry(r, IL(6), IL(1), 0);
    expect_contiguous_new(r, a);
    expect_values(r, DV(0, 3, 1, 4, 2, 5));
    int64_t before = kv_tensor_version(a);
    kv_tensor_bump_version(r);
    assert_int_equal(kv_tensor_version(a), before);
    kv_tensor_release(r);
    r = ok(kv_reshape(t, IL(2, 3)));
    expect_geometry(r, IL(2, 3), IL(3, 1), 0);
    expect_values(r, DV(0, 3, 1, 4, 2, 5));
    assert_ptr_not_equal(r->storage, a->storage);
    kv_tensor_release(r);

    /* Broadcast (stride 0) input: copied, values repeated. */
    kv_tensor *a3 = arange_f32(IL(3));
    kv_tensor *x = ok(kv_expand(a3, IL(2, 3), false));
    r = ok(kv_reshape(x, IL(6)));
    expect_contiguous_new(r, a3);
    expect_values(r, DV(0, 1, 2, 0, 1, 2));
    kv_tensor_release(r);

    expect_error(kv_reshape(t, IL(4)), KV_ERR_SHAPE, "reshape", "shape '[4]' is invalid for input of size 6");
    kv_tensor_release(x);
    kv_tensor_release(a3);
    kv_tensor_release(t);
    kv_tensor_release(a);
}

static void test_unsafe_view(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *v = ok(kv__unsafe_view(a, IL(6)));
    expect_geometry(v, IL(6), IL(1), 0);
    expect_alias(v, a);
    kv_tensor_release(v);
    kv_tensor *t = ok(kv_transpose(a, 0, 1));
    expect_error(kv__unsafe_view(t, IL(6)), KV_ERR_SHAPE, "_unsafe_view", "Use .reshape(...) instead.");
    expect_error(kv__unsafe_view(a, IL(7)), KV_ERR_SHAPE, "_unsafe_view", "shape '[7]' is invalid for input of size 6");
    kv_tensor_release(t);
    kv_tensor_release(a);
}

/* ---- transpose / t / permute ---- */

static void test_transpose(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3, 4));
    kv_tensor *t = ok(kv_transpose(a, 0, -1));
    expect_geometry(t, IL(4, 3, 2), IL(1, 4, 12), 0);
    expect_alias(t, a);
    kv_tensor_release(t);
    t = ok(kv_transpose(a, 1, 1));
    expect_geometry(t, IL(2, 3, 4), IL(12, 4, 1), 0);
    kv_tensor_release(t);
    expect_error(kv_transpose(a, 0, 3), KV_ERR_DIM, "transpose", "out of range");
    expect_error(kv_transpose(a, -4, 0), KV_ERR_DIM, "transpose", "out of range");

    kv_tensor *z = scalar_f32(1.0f);
    t = ok(kv_transpose(z, 0, -1));
    assert_int_equal(t->ndim, 0);
    expect_alias(t, z);
    kv_tensor_release(t);
    expect_error(kv_transpose(z, 0, 1), KV_ERR_DIM, "transpose", NULL);
    kv_tensor_release(z);
    kv_tensor_release(a);
}

static void test_t(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *t = ok(kv_t(a));
    expect_geometry(t, IL(3, 2), IL(1, 3), 0);
    expect_values(t, DV(0, 3, 1, 4, 2, 5));
    expect_alias(t, a);
    kv_tensor_release(t);
    kv_tensor *b = arange_f32(IL(3));
    t = ok(kv_t(b));
    expect_geometry(t, IL(3), IL(1), 0);
    kv_tensor_release(t);
    kv_tensor *z = scalar_f32(1.0f);
    t = ok(kv_t(z));
    assert_int_equal(t->ndim, 0);
    kv_tensor_release(t);
    kv_tensor *c = arange_f32(IL(2, 2, 2));
    expect_error(kv_t(c), KV_ERR_DIM, "t", "t() expects a tensor with <= 2 dimensions, but self is 3D");
    kv_tensor_release(c);
    kv_tensor_release(z);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_permute(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3, 4));
    kv_tensor *p = ok(kv_permute(a, IL(2, 0, 1)));
    expect_geometry(p, IL(4, 2, 3), IL(1, 12, 4), 0);
    expect_alias(p, a);
    /* p[1, 1, 2] = a[1, 2, 1] = 12 + 8 + 1 */
    assert_true(kv_tensor_get_f64(p, (const int64_t[]){ 1, 1, 2 }) == 21.0);
    kv_tensor_release(p);
    p = ok(kv_permute(a, IL(-1, -3, -2)));
    expect_geometry(p, IL(4, 2, 3), IL(1, 12, 4), 0);
    kv_tensor_release(p);
    expect_error(kv_permute(a, IL(0, 0, 1)), KV_ERR_DIM, "permute", "repeated dim");
    expect_error(kv_permute(a, IL(0, 1, 3)), KV_ERR_DIM, "permute", "out of range");
    expect_error(kv_permute(a, IL(0, 1)), KV_ERR_SHAPE, "permute", "number of dims don't match");
    kv_tensor *z = scalar_f32(1.0f);
    p = ok(kv_permute(z, IL_EMPTY));
    assert_int_equal(p->ndim, 0);
    kv_tensor_release(p);
    kv_tensor_release(z);
    kv_tensor_release(a);
}

/* ---- select / slice ---- */

static void test_select(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *s = ok(kv_select(a, 1, -1));
    expect_geometry(s, IL(2), IL(3), 2);
    expect_values(s, DV(2, 5));
    expect_alias(s, a);
    kv_tensor_release(s);
    s = ok(kv_select(a, 0, 1));
    expect_geometry(s, IL(3), IL(1), 3);
    expect_values(s, DV(3, 4, 5));
    kv_tensor *e = ok(kv_select(s, 0, 2));
    assert_int_equal(e->ndim, 0);
    assert_int_equal(e->offset, 5);
    expect_values(e, DV(5));
    kv_tensor_release(e);
    kv_tensor_release(s);
    expect_error(kv_select(a, 2, 0), KV_ERR_DIM, "select", "out of range");

    kv_tensor *b = arange_f32(IL(3));
    expect_error(kv_select(b, 0, 5), KV_ERR_INDEX, "select",
                 "select(): index 5 out of range for tensor of size [3] at dimension 0");
    expect_error(kv_select(b, 0, -4), KV_ERR_INDEX, "select", "index -4 out of range");
    s = ok(kv_select(b, 0, -3));
    assert_int_equal(s->offset, 0);
    kv_tensor_release(s);
    kv_tensor *z = scalar_f32(1.0f);
    expect_error(kv_select(z, 0, 0), KV_ERR_DIM, "select", "0-dim");
    kv_tensor_release(z);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_slice(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(10));
    int64_t v2 = 2, v8 = 8, vm3 = -3, v5 = 5, v1 = 1, v100 = 100, vm100 = -100;
    kv_tensor *s = ok(kv_slice(a, 0, &v2, &v8, 3));
    expect_geometry(s, IL(2), IL(3), 2);
    expect_values(s, DV(2, 5));
    expect_alias(s, a);
    kv_tensor_release(s);
    s = ok(kv_slice(a, 0, NULL, NULL, 1));
    expect_geometry(s, IL(10), IL(1), 0);
    kv_tensor_release(s);
    s = ok(kv_slice(a, -1, &vm3, NULL, 1));
    expect_geometry(s, IL(3), IL(1), 7);
    expect_values(s, DV(7, 8, 9));
    kv_tensor_release(s);
    s = ok(kv_slice(a, 0, &v5, &v2, 1)); /* end < start: empty */
    expect_sizes(s, IL(0));
    kv_tensor_release(s);
    s = ok(kv_slice(a, 0, &v1, &v100, 4)); /* end clamps to 10 */
    expect_geometry(s, IL(3), IL(4), 1);
    expect_values(s, DV(1, 5, 9));
    kv_tensor_release(s);
    s = ok(kv_slice(a, 0, &vm100, &v2, 1)); /* start clamps to 0 */
    expect_geometry(s, IL(2), IL(1), 0);
    kv_tensor_release(s);
    s = ok(kv_slice(a, 0, &v100, NULL, 1)); /* start clamps to 10 */
    expect_sizes(s, IL(0));
    kv_tensor_release(s);
    expect_error(kv_slice(a, 0, NULL, NULL, 0), KV_ERR_INVALID_ARG, "slice", "slice step must be positive");
    expect_error(kv_slice(a, 0, NULL, NULL, -1), KV_ERR_INVALID_ARG, "slice", "slice step must be positive");
    expect_error(kv_slice(a, 1, NULL, NULL, 1), KV_ERR_DIM, "slice", "out of range");

    kv_tensor *m = arange_f32(IL(2, 3));
    s = ok(kv_slice(m, 1, &v1, NULL, 1));
    expect_geometry(s, IL(2, 2), IL(3, 1), 1);
    expect_values(s, DV(1, 2, 4, 5));
    expect_alias(s, m);
    kv_tensor_release(s);
    kv_tensor *z = scalar_f32(1.0f);
    expect_error(kv_slice(z, 0, NULL, NULL, 1), KV_ERR_DIM, "slice", "0-dim");
    kv_tensor_release(z);
    kv_tensor_release(m);
    kv_tensor_release(a);
}

/* ---- squeeze / unsqueeze ---- */

static void test_squeeze(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(1, 3, 1, 2));
    expect_geometry(a, IL(1, 3, 1, 2), IL(6, 2, 2, 1), 0);
    kv_tensor *s = ok(kv_squeeze(a));
    expect_geometry(s, IL(3, 2), IL(2, 1), 0);
    expect_alias(s, a);
    kv_tensor_release(s);
    s = ok(kv_squeeze_dim(a, 0));
    expect_geometry(s, IL(3, 1, 2), IL(2, 2, 1), 0);
    expect_alias(s, a);
    kv_tensor_release(s);
    s = ok(kv_squeeze_dim(a, 1)); /* size 3: unchanged */
    expect_geometry(s, IL(1, 3, 1, 2), IL(6, 2, 2, 1), 0);
    expect_alias(s, a);
    kv_tensor_release(s);
    s = ok(kv_squeeze_dim(a, -2));
    expect_geometry(s, IL(1, 3, 2), IL(6, 2, 1), 0);
    kv_tensor_release(s);
    expect_error(kv_squeeze_dim(a, 4), KV_ERR_DIM, "squeeze", "out of range");

    kv_tensor *z = scalar_f32(1.0f);
    s = ok(kv_squeeze_dim(z, -1));
    assert_int_equal(s->ndim, 0);
    kv_tensor_release(s);
    s = ok(kv_squeeze(z));
    assert_int_equal(s->ndim, 0);
    kv_tensor_release(s);
    expect_error(kv_squeeze_dim(z, 1), KV_ERR_DIM, "squeeze", NULL);
    kv_tensor_release(z);
    kv_tensor_release(a);
}

static void test_unsqueeze(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *u = ok(kv_unsqueeze(a, 0));
    expect_geometry(u, IL(1, 2, 3), IL(6, 3, 1), 0);
    expect_alias(u, a);
    kv_tensor_release(u);
    u = ok(kv_unsqueeze(a, 1));
    expect_geometry(u, IL(2, 1, 3), IL(3, 3, 1), 0);
    kv_tensor_release(u);
    u = ok(kv_unsqueeze(a, -1));
    expect_geometry(u, IL(2, 3, 1), IL(3, 1, 1), 0);
    kv_tensor_release(u);
    u = ok(kv_unsqueeze(a, -3));
    expect_geometry(u, IL(1, 2, 3), IL(6, 3, 1), 0);
    kv_tensor_release(u);
    kv_tensor *t = ok(kv_t(a));
    u = ok(kv_unsqueeze(t, 1)); /* new stride = sizes[1] * strides[1] of t */
    expect_geometry(u, IL(3, 1, 2), IL(1, 6, 3), 0);
    kv_tensor_release(u);
    expect_error(kv_unsqueeze(a, 3), KV_ERR_DIM, "unsqueeze", "out of range");
    expect_error(kv_unsqueeze(a, -4), KV_ERR_DIM, "unsqueeze", "out of range");
    kv_tensor *z = scalar_f32(1.0f);
    u = ok(kv_unsqueeze(z, -1));
    expect_geometry(u, IL(1), IL(1), 0);
    kv_tensor_release(u);
    kv_tensor_release(z);
    kv_tensor_release(t);
    kv_tensor_release(a);
}

/* ---- expand / as_strided ---- */

static void test_expand(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(3));
    kv_tensor *x = ok(kv_expand(a, IL(2, 3), false));
    expect_geometry(x, IL(2, 3), IL(0, 1), 0);
    expect_values(x, DV(0, 1, 2, 0, 1, 2));
    expect_alias(x, a);
    kv_tensor_release(x);
    x = ok(kv_expand(a, IL(1, 3), false)); /* a new size-1 dim keeps a real stride */
    expect_geometry(x, IL(1, 3), IL(3, 1), 0);
    kv_tensor_release(x);
    x = ok(kv_expand(a, IL(-1), false));
    expect_geometry(x, IL(3), IL(1), 0);
    kv_tensor_release(x);
    kv_tensor *c = arange_f32(IL(3, 1));
    x = ok(kv_expand(c, IL(-1, 4), false));
    expect_geometry(x, IL(3, 4), IL(1, 0), 0);
    expect_values(x, DV(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2));
    kv_tensor_release(x);
    x = ok(kv_expand(c, IL(2, 3, 0), false));
    expect_geometry(x, IL(2, 3, 0), IL(0, 1, 0), 0);
    kv_tensor_release(x);
    kv_tensor *z = scalar_f32(4.0f);
    x = ok(kv_expand(z, IL(2, 2), false));
    expect_geometry(x, IL(2, 2), IL(0, 0), 0);
    expect_values(x, DV(4, 4, 4, 4));
    kv_tensor_release(x);

    expect_error(kv_expand(a, IL(2, 4), false), KV_ERR_SHAPE, "expand",
                 "The expanded size of the tensor (4) must match the existing size (3) at non-singleton "
                 "dimension 1. Target sizes: [2, 4]. Tensor sizes: [3]");
    expect_error(kv_expand(a, IL(-1, 3), false), KV_ERR_SHAPE, "expand", "leading, non-existing dimension 0");
    expect_error(kv_expand(c, IL(3), false), KV_ERR_SHAPE, "expand", "number of sizes provided (1)");
    expect_error(kv_expand(c, IL(3, -2), false), KV_ERR_NEGATIVE_SIZE, "expand", NULL);
    kv_tensor_release(z);
    kv_tensor_release(c);
    kv_tensor_release(a);
}

static void test_as_strided(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(6));
    int64_t one = 1, two = 2, hundred = 100;
    kv_tensor *s = ok(kv_as_strided(a, IL(2, 2), IL(1, 2), &one));
    expect_geometry(s, IL(2, 2), IL(1, 2), 1);
    expect_values(s, DV(1, 3, 2, 4));
    expect_alias(s, a);
    kv_tensor_release(s);
    s = ok(kv_as_strided(a, IL(3), IL(2), &one)); /* reaches element 5, the last */
    expect_values(s, DV(1, 3, 5));
    kv_tensor_release(s);
    s = ok(kv_as_strided(a, IL(2, 3), IL(0, 1), NULL));
    expect_values(s, DV(0, 1, 2, 0, 1, 2));
    kv_tensor_release(s);
    /* storage_offset None keeps self's offset. */
    kv_tensor *tail = ok(kv_slice(a, 0, &two, NULL, 1));
    s = ok(kv_as_strided(tail, IL(2), IL(1), NULL));
    expect_geometry(s, IL(2), IL(1), 2);
    expect_values(s, DV(2, 3));
    kv_tensor_release(s);
    /* No elements: any offset fits. */
    s = ok(kv_as_strided(a, IL(0), IL(1), &hundred));
    expect_sizes(s, IL(0));
    kv_tensor_release(s);

    expect_error(kv_as_strided(a, IL(2), IL(1, 1), NULL), KV_ERR_SHAPE, "as_strided", "mismatch in length");
    expect_error(kv_as_strided(a, IL(2), IL(-1), NULL), KV_ERR_INVALID_ARG, "as_strided", "Negative strides");
    expect_error(kv_as_strided(a, IL(3), IL(2), &two), KV_ERR_INVALID_ARG, "as_strided", "out of bounds");
    expect_error(kv_as_strided(a, IL(7), IL(1), NULL), KV_ERR_INVALID_ARG, "as_strided", "out of bounds");
    int64_t neg = -1;
    expect_error(kv_as_strided(a, IL(1), IL(1), &neg), KV_ERR_INVALID_ARG, "as_strided", "storage offset");
    expect_error(kv_as_strided(a, IL(-1), IL(1), NULL), KV_ERR_NEGATIVE_SIZE, "as_strided", NULL);
    kv_tensor_release(tail);
    kv_tensor_release(a);
}

/* ---- detach / unfold ---- */

static void test_detach(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *t = ok(kv_t(a));
    kv_tensor *d = ok(kv_detach(t));
    expect_geometry(d, IL(3, 2), IL(1, 3), 0);
    expect_alias(d, a);
    kv_tensor_release(d);

    /* Called directly (below Autograd): the record and the key stay behind. */
    static int fake_meta;
    t->autograd = (struct kv_autograd_meta *)(void *)&fake_meta;
    t->keys = kv_keyset_add(t->keys, KV_KEY_AUTOGRAD);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    assert_int_equal(kv_push_tensor(&st, t), KV_OK);
    assert_int_equal(kv_ref_detach(kv_op_find("detach"), kv_keyset_of(KV_KEY_CPU), &st), KV_OK);
    assert_int_equal(st.size, 1);
    d = st.slots[0].v.tensor;
    assert_null(d->autograd);
    assert_false(kv_keyset_has(d->keys, KV_KEY_AUTOGRAD));
    assert_true(kv_keyset_has(d->keys, KV_KEY_CPU));
    assert_ptr_equal(d->storage, a->storage);
    expect_geometry(d, IL(3, 2), IL(1, 3), 0);
    kv_tensor_release(d);
    t->autograd = NULL;
    kv_tensor_release(t);
    kv_tensor_release(a);
}

static void test_unfold(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(7));
    kv_tensor *u = ok(kv_unfold(a, 0, 3, 2));
    expect_geometry(u, IL(3, 3), IL(2, 1), 0);
    expect_values(u, DV(0, 1, 2, 2, 3, 4, 4, 5, 6));
    expect_alias(u, a);
    kv_tensor_release(u);
    u = ok(kv_unfold(a, -1, 7, 5));
    expect_geometry(u, IL(1, 7), IL(5, 1), 0);
    kv_tensor_release(u);
    kv_tensor *b = arange_f32(IL(2, 5));
    u = ok(kv_unfold(b, 1, 2, 2));
    expect_geometry(u, IL(2, 2, 2), IL(5, 2, 1), 0);
    expect_values(u, DV(0, 1, 2, 3, 5, 6, 7, 8));
    kv_tensor_release(u);
    u = ok(kv_unfold(b, 0, 2, 1));
    expect_geometry(u, IL(1, 5, 2), IL(5, 1, 5), 0);
    expect_values(u, DV(0, 5, 1, 6, 2, 7, 3, 8, 4, 9));
    kv_tensor_release(u);
    kv_tensor *z = scalar_f32(3.0f);
    u = ok(kv_unfold(z, 0, 1, 1));
    expect_geometry(u, IL(1), IL(1), 0);
    expect_values(u, DV(3));
    kv_tensor_release(u);

    expect_error(kv_unfold(a, 0, 8, 1), KV_ERR_SHAPE, "unfold", "maximum size for tensor at dimension 0 is 7 but size is 8");
    expect_error(kv_unfold(a, 0, 2, 0), KV_ERR_INVALID_ARG, "unfold", "step is 0 but must be > 0");
    expect_error(kv_unfold(a, 1, 2, 1), KV_ERR_DIM, "unfold", "out of range");
    expect_error(kv_unfold(z, 0, 2, 1), KV_ERR_SHAPE, "unfold", "maximum size for tensor at dimension 0 is 1");
    kv_tensor_release(z);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

/* ---- cat ---- */

static void test_cat_basic(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *b = kv_test_f32_of(IL(2, 2), DV(10, 11, 12, 13));
    kv_tensor *c = kv_test_f32_of(IL(1, 3), DV(20, 21, 22));
    kv_tensor *r = ok(kv_cat(TL(a, b), 1));
    expect_geometry(r, IL(2, 5), IL(5, 1), 0);
    expect_contiguous_new(r, a);
    expect_values(r, DV(0, 1, 2, 10, 11, 3, 4, 5, 12, 13));
    kv_tensor_release(r);
    r = ok(kv_cat(TL(a, b), -1));
    expect_values(r, DV(0, 1, 2, 10, 11, 3, 4, 5, 12, 13));
    kv_tensor_release(r);
    r = ok(kv_cat(TL(a, c, a), 0));
    expect_geometry(r, IL(5, 3), IL(3, 1), 0);
    expect_values(r, DV(0, 1, 2, 3, 4, 5, 20, 21, 22, 0, 1, 2, 3, 4, 5));
    kv_tensor_release(r);
    r = ok(kv_cat(TL(c), 0)); /* one input: still a copy */
    expect_contiguous_new(r, c);
    expect_values(r, DV(20, 21, 22));
    kv_tensor_release(r);
    /* A zero-size input that is not 1-D takes part (and adds nothing). */
    kv_tensor *e20 = kv_tensor_from_data(NULL, (const int64_t[]){ 2, 0 }, 2, KV_F32);
    assert_non_null(e20);
    r = ok(kv_cat(TL(e20, a, e20), 1));
    expect_geometry(r, IL(2, 3), IL(3, 1), 0);
    expect_values(r, DV(0, 1, 2, 3, 4, 5));
    kv_tensor_release(r);
    expect_error(kv_cat(TL(e20, c), 0), KV_ERR_SHAPE, "cat", "Expected size 0 but got size 3 for tensor number 1");
    kv_tensor_release(e20);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_cat_legacy_empty(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *e = kv_tensor_from_data(NULL, (const int64_t[]){ 0 }, 1, KV_F32);
    kv_tensor *e64 = kv_tensor_from_data(NULL, (const int64_t[]){ 0 }, 1, KV_F64);
    kv_tensor *ei = kv_tensor_from_data(NULL, (const int64_t[]){ 0 }, 1, KV_I64);
    assert_non_null(e);
    assert_non_null(e64);
    assert_non_null(ei);
    /* Skipped: dim 1 is wrapped against a (2-D), shapes are not compared. */
    kv_tensor *r = ok(kv_cat(TL(e, a, e), 1));
    expect_geometry(r, IL(2, 3), IL(3, 1), 0);
    assert_int_equal(r->dtype, KV_F32);
    expect_values(r, DV(0, 1, 2, 3, 4, 5));
    kv_tensor_release(r);
    r = ok(kv_cat(TL(e, a), -2));
    expect_sizes(r, IL(2, 3));
    kv_tensor_release(r);
    /* ... but a skipped input's dtype still takes part in promotion. */
    r = ok(kv_cat(TL(a, e64), 0));
    assert_int_equal(r->dtype, KV_F64);
    expect_values(r, DV(0, 1, 2, 3, 4, 5));
    kv_tensor_release(r);
    /* All skipped: [0] of the promoted dtype, dim never checked. */
    r = ok(kv_cat(TL(ei, e64), 0));
    expect_sizes(r, IL(0));
    assert_int_equal(r->dtype, KV_F64);
    kv_tensor_release(r);
    r = ok(kv_cat(TL(ei, ei), 5));
    expect_sizes(r, IL(0));
    assert_int_equal(r->dtype, KV_I64);
    kv_tensor_release(r);
    kv_tensor_release(ei);
    kv_tensor_release(e64);
    kv_tensor_release(e);
    kv_tensor_release(a);
}

static void test_cat_strided_and_promoted(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *t = ok(kv_transpose(a, 0, 1)); /* [[0,3],[1,4],[2,5]] */
    kv_tensor *r = ok(kv_cat(TL(t, t), 0));
    expect_geometry(r, IL(6, 2), IL(2, 1), 0);
    expect_values(r, DV(0, 3, 1, 4, 2, 5, 0, 3, 1, 4, 2, 5));
    kv_tensor_release(r);
    r = ok(kv_cat(TL(t, t), 1));
    expect_geometry(r, IL(3, 4), IL(4, 1), 0);
    expect_values(r, DV(0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5));
    kv_tensor_release(r);
    /* A broadcast (stride 0) input. */
    kv_tensor *row = kv_test_f32_of(IL(1, 2), DV(7, 8));
    kv_tensor *x = ok(kv_expand(row, IL(2, 2), false));
    r = ok(kv_cat(TL(t, x), 0));
    expect_values(r, DV(0, 3, 1, 4, 2, 5, 7, 8, 7, 8));
    kv_tensor_release(r);

    kv_tensor *i = kv_test_i32_of(IL(2), (const int32_t[]){ 1, 2 });
    kv_tensor *f = kv_test_f32_of(IL(1), DV(0.5));
    r = ok(kv_cat(TL(i, f), 0));
    assert_int_equal(r->dtype, KV_F32);
    expect_values(r, DV(1, 2, 0.5));
    kv_tensor_release(r);
    kv_tensor *l = i64_of(IL(1), (const int64_t[]){ -3 });
    r = ok(kv_cat(TL(i, l), 0));
    assert_int_equal(r->dtype, KV_I64);
    expect_values(r, DV(1, 2, -3));
    kv_tensor_release(r);
    kv_tensor_release(l);
    kv_tensor_release(f);
    kv_tensor_release(i);
    kv_tensor_release(x);
    kv_tensor_release(row);
    kv_tensor_release(t);
    kv_tensor_release(a);
}

static void *sim_alloc(void *ctx, size_t n) {
    (void)ctx;
    return malloc(n ? n : 1);
}
static void sim_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    free(p);
}

/* A tensor on another device, through an allocator installed just for it
 * when the SIM device has none. */
static kv_tensor *other_device_tensor(kv_int_list sizes, kv_dtype dt, bool *installed) {
    static const kv_allocator_iface iface = { sim_alloc, sim_free };
    *installed = false;
    if (kv_allocator_for(KV_DEVICE_SIM) == NULL) {
        kv_allocator_install(KV_DEVICE_SIM, &iface, NULL);
        *installed = true;
    }
    kv_tensor *t = kv_tensor_empty(sizes.items, sizes.n, dt, (kv_device){ KV_DEVICE_SIM, 0 });
    assert_non_null(t);
    return t;
}

static void test_cat_errors(void **state) {
    (void)state;
    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *p = arange_f32(IL(3, 2));
    kv_tensor *q = arange_f32(IL(4, 2));
    kv_tensor *v = arange_f32(IL(3));
    kv_tensor *z = scalar_f32(1.0f);
    expect_error(kv_cat((kv_tensor_list){ NULL, 0 }, 0), KV_ERR_INVALID_ARG, "cat",
                 "torch.cat(): expected a non-empty list of Tensors");
    expect_error(kv_cat(TL(a, z), 0), KV_ERR_DIM, "cat",
                 "zero-dimensional tensor (at position 1) cannot be concatenated");
    expect_error(kv_cat(TL(p, q), 1), KV_ERR_SHAPE, "cat",
                 "Sizes of tensors must match except in dimension 1. Expected size 3 but got size 4 for tensor "
                 "number 1 in the list.");
    expect_error(kv_cat(TL(a, v), 0), KV_ERR_SHAPE, "cat", "Tensors must have same number of dimensions: got 2 and 1");
    expect_error(kv_cat(TL(a, a), 2), KV_ERR_DIM, "cat", "out of range");

    /* Device mismatch: the kernel itself rejects it (the dispatcher, seeing
     * two backends, would stop earlier with the same status). */
    bool installed;
    kv_tensor *s = other_device_tensor(IL(2, 3), KV_F32, &installed);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&st, TL(a, s));
    kv_push_int(&st, 0);
    assert_int_equal(kv_ref_cat(kv_op_find("cat"), kv_keyset_of(KV_KEY_CPU), &st), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "cat"));
    assert_null(kv_cat(TL(a, s), 0));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    /* All on another device: the CPU reference must not make a CPU copy. */
    st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&st, TL(s, s));
    kv_push_int(&st, 0);
    assert_int_equal(kv_ref_cat(kv_op_find("cat"), kv_keyset_of(KV_KEY_CPU), &st), KV_ERR_DEVICE);
    st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&st, TL(s, s));
    kv_push_int(&st, 0);
    assert_int_equal(kv_ref_stack(kv_op_find("stack"), kv_keyset_of(KV_KEY_CPU), &st), KV_ERR_DEVICE);
    kv_tensor_release(s);
    if (installed) kv_allocator_install(KV_DEVICE_SIM, NULL, NULL);

    kv_tensor_release(z);
    kv_tensor_release(v);
    kv_tensor_release(q);
    kv_tensor_release(p);
    kv_tensor_release(a);
}

/* ---- stack ---- */

static void test_stack(void **state) {
    (void)state;
    kv_tensor *p = kv_test_f32_of(IL(2), DV(1, 2));
    kv_tensor *q = kv_test_f32_of(IL(2), DV(3, 4));
    kv_tensor *r = ok(kv_stack_op(TL(p, q), 0));
    expect_geometry(r, IL(2, 2), IL(2, 1), 0);
    expect_contiguous_new(r, p);
    expect_values(r, DV(1, 2, 3, 4));
    kv_tensor_release(r);
    r = ok(kv_stack_op(TL(p, q), 1));
    expect_geometry(r, IL(2, 2), IL(2, 1), 0);
    expect_values(r, DV(1, 3, 2, 4));
    kv_tensor_release(r);
    r = ok(kv_stack_op(TL(p, q, p), -1));
    expect_geometry(r, IL(2, 3), IL(3, 1), 0);
    expect_values(r, DV(1, 3, 1, 2, 4, 2));
    kv_tensor_release(r);

    kv_tensor *a = arange_f32(IL(2, 3));
    kv_tensor *t = ok(kv_transpose(a, 0, 1)); /* [[0,3],[1,4],[2,5]] */
    r = ok(kv_stack_op(TL(t, t), 1));
    expect_geometry(r, IL(3, 2, 2), IL(4, 2, 1), 0);
    expect_values(r, DV(0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5));
    kv_tensor_release(r);
    r = ok(kv_stack_op(TL(t, t), 2));
    expect_values(r, DV(0, 0, 3, 3, 1, 1, 4, 4, 2, 2, 5, 5));
    kv_tensor_release(r);

    kv_tensor *z1 = scalar_f32(1.5f), *z2 = scalar_f32(-2.0f);
    r = ok(kv_stack_op(TL(z1, z2), 0));
    expect_geometry(r, IL(2), IL(1), 0);
    expect_values(r, DV(1.5, -2));
    kv_tensor_release(r);

    kv_tensor *l = i64_of(IL(2), (const int64_t[]){ 5, 6 });
    r = ok(kv_stack_op(TL(l, p), 0));
    assert_int_equal(r->dtype, KV_F32);
    expect_values(r, DV(5, 6, 1, 2));
    kv_tensor_release(r);

    kv_tensor *w = kv_test_f32_of(IL(3), DV(1, 2, 3));
    expect_error(kv_stack_op(TL(p, w), 0), KV_ERR_SHAPE, "stack",
                 "stack expects each tensor to be equal size, but got [2] at entry 0 and [3] at entry 1");
    expect_error(kv_stack_op((kv_tensor_list){ NULL, 0 }, 0), KV_ERR_INVALID_ARG, "stack", "non-empty");
    expect_error(kv_stack_op(TL(p, q), 2), KV_ERR_DIM, "stack", "out of range");
    expect_error(kv_stack_op(TL(p, q), -3), KV_ERR_DIM, "stack", "out of range");
    kv_tensor_release(w);
    kv_tensor_release(l);
    kv_tensor_release(z2);
    kv_tensor_release(z1);
    kv_tensor_release(t);
    kv_tensor_release(a);
    kv_tensor_release(q);
    kv_tensor_release(p);
}

/* ---- index_select ---- */

static void test_index_select(void **state) {
    (void)state;
    kv_tensor *m = arange_f32(IL(3, 4));
    kv_tensor *i20 = i64_of(IL(2), (const int64_t[]){ 2, 0 });
    kv_tensor *r = ok(kv_index_select(m, 0, i20));
    expect_geometry(r, IL(2, 4), IL(4, 1), 0);
    expect_contiguous_new(r, m);
    expect_values(r, DV(8, 9, 10, 11, 0, 1, 2, 3));
    kv_tensor_release(r);
    kv_tensor *i331 = kv_test_i32_of(IL(3), (const int32_t[]){ 3, 3, 1 });
    r = ok(kv_index_select(m, -1, i331));
    expect_geometry(r, IL(3, 3), IL(3, 1), 0);
    expect_values(r, DV(3, 3, 1, 7, 7, 5, 11, 11, 9));
    kv_tensor_release(r);

    /* Transposed self: mt[i, j] = 4j + i. */
    kv_tensor *mt = ok(kv_transpose(m, 0, 1));
    kv_tensor *i2 = i64_of(IL(1), (const int64_t[]){ 2 });
    r = ok(kv_index_select(mt, 1, i2));
    expect_geometry(r, IL(4, 1), IL(1, 1), 0);
    expect_values(r, DV(8, 9, 10, 11));
    kv_tensor_release(r);
    kv_tensor *i30 = i64_of(IL(2), (const int64_t[]){ 3, 0 });
    r = ok(kv_index_select(mt, 0, i30));
    expect_values(r, DV(3, 7, 11, 0, 4, 8));
    kv_tensor_release(r);

    /* A strided index and a 0-dim index. */
    kv_tensor *ib = i64_of(IL(4), (const int64_t[]){ 2, 9, 0, 9 });
    kv_tensor *is = ok(kv_slice(ib, 0, NULL, NULL, 2));
    r = ok(kv_index_select(m, 0, is));
    expect_values(r, DV(8, 9, 10, 11, 0, 1, 2, 3));
    kv_tensor_release(r);
    int64_t one = 1;
    kv_tensor *i0 = kv_tensor_from_data(&one, NULL, 0, KV_I64);
    r = ok(kv_index_select(m, 0, i0));
    expect_geometry(r, IL(1, 4), IL(4, 1), 0);
    expect_values(r, DV(4, 5, 6, 7));
    kv_tensor_release(r);
    kv_tensor *iempty = kv_tensor_from_data(NULL, (const int64_t[]){ 0 }, 1, KV_I64);
    r = ok(kv_index_select(m, 1, iempty));
    expect_sizes(r, IL(3, 0));
    kv_tensor_release(r);

    /* 0-dim self, dim 0. */
    kv_tensor *s = scalar_f32(7.5f);
    kv_tensor *izero = i64_of(IL(1), (const int64_t[]){ 0 });
    r = ok(kv_index_select(s, 0, izero));
    assert_int_equal(r->ndim, 0);
    expect_values(r, DV(7.5));
    kv_tensor_release(r);
    expect_error(kv_index_select(s, 0, i2), KV_ERR_INDEX, "index_select", "index 2 is out of bounds");
    expect_error(kv_index_select(s, 0, i20), KV_ERR_SHAPE, "index_select", "only 1 value");

    kv_tensor *i7 = i64_of(IL(2), (const int64_t[]){ 0, 7 });
    expect_error(kv_index_select(m, 0, i7), KV_ERR_INDEX, "index_select",
                 "index_select(): index 7 is out of bounds for dimension 0 with size 3");
    kv_tensor *ineg = i64_of(IL(1), (const int64_t[]){ -1 });
    expect_error(kv_index_select(m, 0, ineg), KV_ERR_INDEX, "index_select", "index -1 is out of bounds");
    kv_tensor *fidx = kv_test_f32_of(IL(1), DV(0));
    expect_error(kv_index_select(m, 0, fidx), KV_ERR_DTYPE, "index_select", "index");
    kv_tensor *i2d = i64_of(IL(1, 2), (const int64_t[]){ 0, 1 });
    expect_error(kv_index_select(m, 0, i2d), KV_ERR_SHAPE, "index_select", "vector");
    expect_error(kv_index_select(m, 2, i20), KV_ERR_DIM, "index_select", "out of range");

    kv_tensor *all[] = { i2d, fidx, ineg, i7, izero, s, iempty, i0, is, ib, i30, i2, mt, i331, i20, m };
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) kv_tensor_release(all[k]);
}

/* ---- embedding ---- */

static void test_embedding(void **state) {
    (void)state;
    kv_tensor *wb = arange_f32(IL(3, 4));
    kv_tensor *w = ok(kv_t(wb)); /* [4, 3], w[i, j] = 4j + i */
    kv_tensor *idx = i64_of(IL(2, 2), (const int64_t[]){ 0, 2, 3, 3 });
    kv_tensor *r = ok(kv_embedding(w, idx, -1, false, false));
    expect_geometry(r, IL(2, 2, 3), IL(6, 3, 1), 0);
    expect_contiguous_new(r, w);
    expect_values(r, DV(0, 4, 8, 2, 6, 10, 3, 7, 11, 3, 7, 11));
    kv_tensor_release(r);
    /* Transposed indices: [[0,3],[2,3]]^T = [[0,2],[3,3]]. */
    kv_tensor *ib = i64_of(IL(2, 2), (const int64_t[]){ 0, 3, 2, 3 });
    kv_tensor *it = ok(kv_t(ib));
    r = ok(kv_embedding(w, it, 2, true, false));
    expect_values(r, DV(0, 4, 8, 2, 6, 10, 3, 7, 11, 3, 7, 11));
    kv_tensor_release(r);
    int32_t one = 1;
    kv_tensor *i0 = kv_tensor_from_data(&one, NULL, 0, KV_I32);
    r = ok(kv_embedding(w, i0, -4, false, true));
    expect_geometry(r, IL(3), IL(1), 0);
    expect_values(r, DV(1, 5, 9));
    kv_tensor_release(r);
    kv_tensor *iempty = kv_tensor_from_data(NULL, (const int64_t[]){ 0 }, 1, KV_I64);
    r = ok(kv_embedding(w, iempty, -1, false, false));
    expect_sizes(r, IL(0, 3));
    kv_tensor_release(r);

    kv_tensor *v = arange_f32(IL(4));
    expect_error(kv_embedding(v, idx, -1, false, false), KV_ERR_DIM, "embedding", "'weight' must be 2-D");
    kv_tensor *fidx = kv_test_f32_of(IL(1), DV(0));
    expect_error(kv_embedding(w, fidx, -1, false, false), KV_ERR_DTYPE, "embedding", "indices");
    kv_tensor *i4 = i64_of(IL(2), (const int64_t[]){ 1, 4 });
    expect_error(kv_embedding(w, i4, -1, false, false), KV_ERR_INDEX, "embedding", "index 4");
    kv_tensor *ineg = i64_of(IL(1), (const int64_t[]){ -1 });
    expect_error(kv_embedding(w, ineg, -1, false, false), KV_ERR_INDEX, "embedding", "index -1");
    expect_error(kv_embedding(w, idx, 4, false, false), KV_ERR_INVALID_ARG, "embedding",
                 "Padding_idx must be within num_embeddings");
    expect_error(kv_embedding(w, idx, -5, false, false), KV_ERR_INVALID_ARG, "embedding",
                 "Padding_idx must be within num_embeddings");

    kv_tensor *all[] = { ineg, i4, fidx, v, iempty, i0, it, ib, idx, w, wb };
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) kv_tensor_release(all[k]);
}

/* View kernels only compute geometry, so they serve tensors of any device
 * (called directly: the dispatcher would not route them to the CPU key);
 * reshape's copy path is CPU only. */
static void test_views_keep_device(void **state) {
    (void)state;
    bool installed;
    kv_tensor *s = other_device_tensor(IL(2, 3), KV_F32, &installed);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, s);
    kv_push_ints(&st, IL(3, 2));
    assert_int_equal(kv_ref_view(kv_op_find("view"), kv_keyset_of(KV_KEY_SIM), &st), KV_OK);
    kv_tensor *v = st.slots[0].v.tensor;
    expect_geometry(v, IL(3, 2), IL(2, 1), 0);
    assert_int_equal(v->device.type, KV_DEVICE_SIM);
    assert_true(kv_keyset_has(v->keys, KV_KEY_SIM));
    expect_alias(v, s);
    kv_tensor_release(v);

    st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, s);
    kv_push_int(&st, 0);
    kv_push_int(&st, 1);
    assert_int_equal(kv_ref_transpose(kv_op_find("transpose.int"), kv_keyset_of(KV_KEY_SIM), &st), KV_OK);
    kv_tensor *t = st.slots[0].v.tensor;
    assert_int_equal(t->device.type, KV_DEVICE_SIM);
    st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, t);
    kv_push_ints(&st, IL(6));
    assert_int_equal(kv_ref_reshape(kv_op_find("reshape"), kv_keyset_of(KV_KEY_SIM), &st), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "reshape"));
    kv_tensor_release(t);
    kv_tensor_release(s);
    if (installed) kv_allocator_install(KV_DEVICE_SIM, NULL, NULL);
}

static void test_index_device_mismatch(void **state) {
    (void)state;
    kv_tensor *m = arange_f32(IL(3, 4));
    bool installed;
    kv_tensor *sidx = other_device_tensor(IL(1), KV_I64, &installed);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, m);
    kv_push_int(&st, 0);
    kv_push_tensor(&st, sidx);
    assert_int_equal(kv_ref_index_select(kv_op_find("index_select"), kv_keyset_of(KV_KEY_CPU), &st),
                     KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "index_select"));
    st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, m);
    kv_push_tensor(&st, sidx);
    kv_push_int(&st, -1);
    kv_push_bool(&st, false);
    kv_push_bool(&st, false);
    assert_int_equal(kv_ref_embedding(kv_op_find("embedding"), kv_keyset_of(KV_KEY_CPU), &st), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "embedding"));
    kv_tensor_release(sidx);
    if (installed) kv_allocator_install(KV_DEVICE_SIM, NULL, NULL);
    kv_tensor_release(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_contiguous),
        cmocka_unit_test(test_view_strided),
        cmocka_unit_test(test_view_errors),
        cmocka_unit_test(test_view_empty_and_scalar),
        cmocka_unit_test(test_reshape),
        cmocka_unit_test(test_unsafe_view),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_t),
        cmocka_unit_test(test_permute),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_squeeze),
        cmocka_unit_test(test_unsqueeze),
        cmocka_unit_test(test_expand),
        cmocka_unit_test(test_as_strided),
        cmocka_unit_test(test_detach),
        cmocka_unit_test(test_unfold),
        cmocka_unit_test(test_cat_basic),
        cmocka_unit_test(test_cat_legacy_empty),
        cmocka_unit_test(test_cat_strided_and_promoted),
        cmocka_unit_test(test_cat_errors),
        cmocka_unit_test(test_stack),
        cmocka_unit_test(test_index_select),
        cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_views_keep_device),
        cmocka_unit_test(test_index_device_mismatch),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
