/* Autograd: requires_grad rules, gradients of small graphs worked out by
 * hand, the broadcasting reduction, accumulation, grad mode, in-place
 * rules and version counters (with PyTorch's messages), backward errors,
 * grad_fn names, views (and in-place ops through them), the complex
 * convention, counters, and a formula that does not exist. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kv/autograd.h"
#include "kv/kv.h"
#include "test_util.h"

/* ---- helpers ---- */

#define IL(...) ((kv_int_list){ (const int64_t[]){ __VA_ARGS__ }, \
                                (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)) })
#define TL(...) ((kv_tensor_list){ (kv_tensor *const[]){ __VA_ARGS__ }, \
                                   (int)(sizeof((kv_tensor *[]){ __VA_ARGS__ }) / sizeof(kv_tensor *)) })
#define DV(...) (const double[]){ __VA_ARGS__ }, (int)(sizeof((double[]){ __VA_ARGS__ }) / sizeof(double))

#define OK(expr) KV_TEST_OK(expr)
#define OKS(expr) KV_TEST_OKS(expr)

static kv_tensor *f64_of(kv_int_list sizes, const double *vals, int n) {
    int64_t numel = 1;
    for (int d = 0; d < sizes.n; d++) numel *= sizes.items[d];
    assert_int_equal(numel, n);
    return OK(kv_tensor_from_data(vals, sizes.items, sizes.n, KV_F64));
}

/* A leaf requiring grad. */
static kv_tensor *leaf(kv_tensor *t) {
    OKS(kv_tensor_set_requires_grad(t, true));
    return t;
}

static kv_tensor *scalar_f64(double v) { return OK(kv_tensor_from_data(&v, NULL, 0, KV_F64)); }

/* Row-major values of any real tensor (strides respected). */
static void expect_values(const kv_tensor *t, const double *want, int n, double tol) {
    assert_non_null(t);
    assert_int_equal(kv_tensor_numel(t), n);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int i = 0; i < n; i++) {
        double got = kv_tensor_get_f64(t, idx);
        if (!(fabs(got - want[i]) <= tol))
            fail_msg("element %d: got %.17g, want %.17g", i, got, want[i]);
        kv_test_next_index(t, idx);
    }
}

static void expect_shape(const kv_tensor *t, kv_int_list sizes) {
    assert_non_null(t);
    assert_int_equal(t->ndim, sizes.n);
    for (int d = 0; d < sizes.n; d++) assert_int_equal(t->sizes[d], sizes.items[d]);
}

static void expect_error(kv_status st, kv_status code, const char *needle) {
    assert_int_equal(st, code);
    if (needle && !strstr(kv_last_error_message(), needle))
        fail_msg("message '%s' lacks '%s'", kv_last_error_message(), needle);
}

static kv_tensor *total(kv_tensor *t) { return OK(kv_sum(t, NULL, false, NULL)); }

/* ---- requires_grad ---- */

static void test_requires_grad_rules(void **state) {
    (void)state;
    kv_tensor *x = f64_of(IL(3), DV(1, 2, 3));
    assert_false(kv_tensor_requires_grad(x));
    assert_true(kv_tensor_is_leaf(x));
    OKS(kv_tensor_set_requires_grad(x, true));
    assert_true(kv_tensor_requires_grad(x));
    assert_true(kv_keyset_has(x->keys, KV_KEY_AUTOGRAD));
    assert_true(kv_tensor_is_leaf(x));
    assert_null(kv_tensor_grad(x));
    assert_null(kv_tensor_grad_fn_name(x));

    /* integer and bool tensors cannot require grad */
    const int32_t iv[2] = { 1, 2 };
    kv_tensor *i = OK(kv_tensor_from_data(iv, (const int64_t[]){ 2 }, 1, KV_I32));
    expect_error(kv_tensor_set_requires_grad(i, true), KV_ERR_DTYPE,
                 "only Tensors of floating point and complex dtype can require gradients");
    assert_false(kv_keyset_has(i->keys, KV_KEY_AUTOGRAD));
    expect_error(kv_tensor_set_requires_grad(NULL, true), KV_ERR_INVALID_ARG, NULL);

    /* results of recorded ops require grad and are not leaves */
    kv_tensor *y = OK(kv_neg(x));
    assert_true(kv_tensor_requires_grad(y));
    assert_false(kv_tensor_is_leaf(y));
    assert_true(kv_keyset_has(y->keys, KV_KEY_AUTOGRAD));
    expect_error(kv_tensor_set_requires_grad(y, false), KV_ERR_INVALID_ARG,
                 "you can only change requires_grad flags of leaf variables");
    assert_true(kv_tensor_requires_grad(y));

    /* a leaf can stop requiring grad; then nothing is recorded */
    OKS(kv_tensor_set_requires_grad(x, false));
    assert_false(kv_keyset_has(x->keys, KV_KEY_AUTOGRAD));
    kv_tensor *z = OK(kv_neg(x));
    assert_false(kv_tensor_requires_grad(z));
    assert_null(kv_tensor_grad_fn_name(z));
    /* non-differentiable ops never make tensors that require grad */
    leaf(x);
    kv_tensor *e = OK(kv_eq(x, x));
    assert_false(kv_tensor_requires_grad(e));
    kv_tensor *d = OK(kv_detach(x));
    assert_false(kv_tensor_requires_grad(d));
    assert_false(kv_keyset_has(d->keys, KV_KEY_AUTOGRAD));
    assert_ptr_equal(d->storage, x->storage);
    kv_tensor *am = OK(kv_argmax(x, NULL, false));
    assert_false(kv_tensor_requires_grad(am));
    kv_tensor_release(am);
    kv_tensor_release(d);
    kv_tensor_release(e);
    kv_tensor_release(z);
    kv_tensor_release(y);
    kv_tensor_release(i);
    kv_tensor_release(x);
}

/* ---- gradients of small graphs ---- */

/* loss = sum(x*x + 3x): dloss/dx = 2x + 3. */
static void test_simple_chain(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(3), DV(1, 2, -4)));
    kv_tensor *sq = OK(kv_mul(x, x));
    kv_tensor *w = OK(kv_add(sq, x, kv_scalar_int(3)));
    kv_tensor *loss = total(w);
    OKS(kv_backward(loss, NULL));
    expect_values(kv_tensor_grad(x), DV(5, 7, -5), 0);
    /* non-leaves keep no gradient */
    assert_null(kv_tensor_grad(sq));
    kv_tensor_release(loss);
    kv_tensor_release(w);
    kv_tensor_release(sq);
    kv_tensor_release(x);
}

/* loss = sum(exp(x) / y - sin(x)): d/dx = exp(x)/y - cos(x), d/dy = -exp(x)/y^2. */
static void test_transcendental_chain(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(0.5, -1.0)));
    kv_tensor *y = leaf(f64_of(IL(2), DV(2.0, 4.0)));
    kv_tensor *e = OK(kv_exp(x));
    kv_tensor *q = OK(kv_div(e, y));
    kv_tensor *s = OK(kv_sin(x));
    kv_tensor *d = OK(kv_sub(q, s, kv_scalar_int(1)));
    kv_tensor *loss = total(d);
    OKS(kv_backward(loss, NULL));
    expect_values(kv_tensor_grad(x), DV(exp(0.5) / 2.0 - cos(0.5), exp(-1.0) / 4.0 - cos(-1.0)), 1e-15);
    expect_values(kv_tensor_grad(y), DV(-exp(0.5) / 4.0, -exp(-1.0) / 16.0), 1e-15);
    kv_tensor *tensors[] = { loss, d, s, q, e, y, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* A [2, 3] times a [3] row: each input gets the sum over the dims it was
 * broadcast along. */
static void test_broadcast_reduction(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2, 3), DV(1, 2, 3, 4, 5, 6)));
    kv_tensor *b = leaf(f64_of(IL(3), DV(10, 20, 30)));
    kv_tensor *c = leaf(f64_of(IL(2, 1), DV(-1, 2)));
    kv_tensor *s = leaf(scalar_f64(0.5));
    kv_tensor *xb = OK(kv_mul(x, b));
    kv_tensor *xbc = OK(kv_add(xb, c, kv_scalar_int(1)));
    kv_tensor *all = OK(kv_mul(xbc, s));
    kv_tensor *loss = total(all);
    OKS(kv_backward(loss, NULL));
    expect_shape(kv_tensor_grad(x), IL(2, 3));
    expect_values(kv_tensor_grad(x), DV(5, 10, 15, 5, 10, 15), 0);
    expect_shape(kv_tensor_grad(b), IL(3));
    expect_values(kv_tensor_grad(b), DV(2.5, 3.5, 4.5), 0);
    expect_shape(kv_tensor_grad(c), IL(2, 1));
    expect_values(kv_tensor_grad(c), DV(1.5, 1.5), 0);
    /* s sees sum(x*b + c) = 140 + 320 + 3 = 463 */
    expect_shape(kv_tensor_grad(s), IL());
    expect_values(kv_tensor_grad(s), DV(463), 0);
    kv_tensor *tensors[] = { loss, all, xbc, xb, s, c, b, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* A gradient flowing into an input of another dtype comes back in it. */
static void test_grad_dtype_follows_input(void **state) {
    (void)state;
    kv_tensor *x = leaf(kv_test_f32_of(IL(2), DV(1.5, -2)));
    kv_tensor *y = f64_of(IL(2), DV(3, 4));
    kv_tensor *p = OK(kv_mul(x, y));
    assert_int_equal(p->dtype, KV_F64);
    kv_tensor *loss = total(p);
    OKS(kv_backward(loss, NULL));
    assert_int_equal(kv_tensor_grad(x)->dtype, KV_F32);
    expect_values(kv_tensor_grad(x), DV(3, 4), 0);
    kv_tensor_release(loss);
    kv_tensor_release(p);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* Uses of one tensor add up, inside a graph and across backward calls;
 * the first gradient is never shared between two leaves. */
static void test_accumulation(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(3, -1)));
    kv_tensor *y = leaf(f64_of(IL(2), DV(7, 8)));
    kv_tensor *xx = OK(kv_mul(x, x));
    kv_tensor *xy = OK(kv_add(xx, y, kv_scalar_int(1)));
    kv_tensor *xyx = OK(kv_add(xy, x, kv_scalar_int(1)));
    kv_tensor *l1 = total(xyx);
    OKS(kv_backward(l1, NULL)); /* d/dx = 2x + 1, d/dy = 1 */
    expect_values(kv_tensor_grad(x), DV(7, -1), 0);
    expect_values(kv_tensor_grad(y), DV(1, 1), 0);
    kv_tensor *s2 = OK(kv_add(x, y, kv_scalar_int(1)));
    kv_tensor *l2 = total(s2);
    OKS(kv_backward(l2, NULL)); /* both get 1 more, in separate tensors */
    expect_values(kv_tensor_grad(x), DV(8, 0), 0);
    expect_values(kv_tensor_grad(y), DV(2, 2), 0);
    assert_ptr_not_equal(kv_tensor_grad(x)->storage, kv_tensor_grad(y)->storage);
    kv_tensor_clear_grad(x);
    assert_null(kv_tensor_grad(x));
    kv_tensor_release(l2);
    kv_tensor_release(s2);
    kv_tensor_release(l1);
    kv_tensor_release(xyx);
    kv_tensor_release(xy);
    kv_tensor_release(xx);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* ---- grad mode ---- */

static void test_no_grad_guard(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(1, 2)));
    assert_true(kv_grad_mode_enabled());
    kv_autograd_counters_reset();
    kv_tls_keys outer = kv_no_grad_push();
    assert_false(kv_grad_mode_enabled());
    /* the mechanism: Autograd in the TLS excluded set */
    assert_true(kv_keyset_has(kv_tls_get().excluded, KV_KEY_AUTOGRAD));
    kv_tensor *y = OK(kv_mul(x, x));
    assert_false(kv_tensor_requires_grad(y));
    assert_null(kv_tensor_grad_fn_name(y));
    /* the Autograd kernel did not even run */
    assert_int_equal(kv_autograd_counters_get().kernel_calls, 0);
    /* nested enable, then back to disabled */
    kv_tls_keys inner = kv_enable_grad_push();
    assert_true(kv_grad_mode_enabled());
    kv_tensor *z = OK(kv_mul(x, x));
    assert_true(kv_tensor_requires_grad(z));
    kv_grad_mode_pop(inner);
    assert_false(kv_grad_mode_enabled());
    /* in-place on a leaf is allowed with grad mode off (optimizer steps) */
    OKS(kv_add_(x, y, kv_scalar_int(1)));
    expect_values(x, DV(2, 6), 0);
    kv_grad_mode_pop(outer);
    assert_true(kv_grad_mode_enabled());
    kv_tensor *w = OK(kv_mul(x, x));
    assert_true(kv_tensor_requires_grad(w));
    assert_string_equal(kv_tensor_grad_fn_name(w), "MulBackward0");
    kv_tensor_release(w);
    kv_tensor_release(z);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* ---- in-place rules ---- */

static void test_inplace_on_leaf_is_error(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(1, 2)));
    kv_tensor *y = f64_of(IL(2), DV(5, 5));
    const int64_t v0 = kv_tensor_version(x);
    expect_error(kv_add_(x, y, kv_scalar_int(1)), KV_ERR_INVALID_ARG,
                 "a leaf Variable that requires grad is being used in an in-place operation.");
    expect_values(x, DV(1, 2), 0);
    assert_int_equal(kv_tensor_version(x), v0);
    /* a view of such a leaf too */
    kv_tensor *v = OK(kv_slice(x, 0, &(int64_t){ 0 }, &(int64_t){ 1 }, 1));
    expect_error(kv_mul_(v, v), KV_ERR_INVALID_ARG,
                 "a view of a leaf Variable that requires grad is being used in an in-place operation.");
    /* a leaf that does not require grad may be written, and then does */
    kv_tensor *a = f64_of(IL(2), DV(1, 1));
    OKS(kv_mul_(a, x));
    assert_true(kv_tensor_requires_grad(a));
    assert_string_equal(kv_tensor_grad_fn_name(a), "MulBackward0");
    kv_tensor *loss = total(a);
    OKS(kv_backward(loss, NULL));
    expect_values(kv_tensor_grad(x), DV(1, 1), 0);
    kv_tensor_release(loss);
    kv_tensor_release(a);
    kv_tensor_release(v);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* An in-place op on a non-leaf rebases its history: a = 2x, a *= x. */
static void test_inplace_rebases_history(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(3), DV(1, -2, 3)));
    kv_tensor *two = scalar_f64(2);
    kv_tensor *a = OK(kv_mul(x, two));
    OKS(kv_mul_(a, x));
    assert_string_equal(kv_tensor_grad_fn_name(a), "MulBackward0");
    expect_values(a, DV(2, 8, 18), 0);
    kv_tensor *loss = total(a);
    OKS(kv_backward(loss, NULL)); /* d(2x^2)/dx = 4x */
    expect_values(kv_tensor_grad(x), DV(4, -8, 12), 0);
    kv_tensor_release(loss);
    kv_tensor_release(a);
    kv_tensor_release(two);
    kv_tensor_release(x);
}

static void test_saved_tensor_modified_is_error(void **state) {
    (void)state;
    kv_tensor *x = leaf(kv_test_f32_of(IL(3), DV(0, 1, 2)));
    kv_tensor *y = OK(kv_exp(x)); /* ExpBackward0 saves its result */
    kv_tensor *one = kv_test_f32_of(IL(3), DV(1, 1, 1));
    const int64_t v = kv_tensor_version(y);
    OKS(kv_add_(y, one, kv_scalar_int(1)));
    kv_tensor *loss = total(y);
    char want[256];
    snprintf(want, sizeof want,
             "one of the variables needed for gradient computation has been modified by an inplace operation: "
             "[Float [3]] is at version %lld; expected version %lld instead.",
             (long long)(v + 1), (long long)v);
    expect_error(kv_backward(loss, NULL), KV_ERR_INVALID_ARG, want);
    assert_true(strstr(kv_last_error_message(), "ExpBackward0") != NULL);
    assert_null(kv_tensor_grad(x));
    /* an op that saves nothing does not care */
    kv_tensor *z = OK(kv_add(x, x, kv_scalar_int(1)));
    OKS(kv_add_(z, one, kv_scalar_int(1)));
    kv_tensor *l2 = total(z);
    OKS(kv_backward(l2, NULL));
    expect_values(kv_tensor_grad(x), DV(2, 2, 2), 0);
    kv_tensor *tensors[] = { l2, z, loss, one, y, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* ---- backward's own errors ---- */

static void test_non_scalar_root(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(3), DV(1, 2, 3)));
    kv_tensor *y = OK(kv_mul(x, x));
    expect_error(kv_backward(y, NULL), KV_ERR_INVALID_ARG, "grad can be implicitly created only for scalar outputs");
    kv_tensor *bad = f64_of(IL(2), DV(1, 1));
    expect_error(kv_backward(y, bad), KV_ERR_SHAPE, "Mismatch in shape");
    /* with an explicit gradient: 2x * g */
    kv_tensor *g = f64_of(IL(3), DV(1, 0.5, -1));
    OKS(kv_backward(y, g));
    expect_values(kv_tensor_grad(x), DV(2, 2, -6), 0);
    /* a root that does not require grad */
    kv_tensor *c = f64_of(IL(1), DV(1));
    expect_error(kv_backward(c, NULL), KV_ERR_INVALID_ARG, "does not require grad");
    expect_error(kv_backward(NULL, NULL), KV_ERR_INVALID_ARG, NULL);
    kv_tensor *tensors[] = { c, g, bad, y, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

static void test_backward_twice(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(1, 2)));
    kv_tensor *y = OK(kv_mul(x, x));
    kv_tensor *loss = total(y);
    OKS(kv_backward(loss, NULL));
    expect_error(kv_backward(loss, NULL), KV_ERR_INVALID_ARG,
                 "Trying to backward through the graph a second time (or directly access saved tensors after they "
                 "have already been freed).");
    expect_values(kv_tensor_grad(x), DV(2, 4), 0);
    /* a graph that saved nothing can run again (as in PyTorch) */
    kv_tensor *s = OK(kv_add(x, x, kv_scalar_int(1)));
    kv_tensor *l2 = total(s);
    OKS(kv_backward(l2, NULL));
    OKS(kv_backward(l2, NULL));
    expect_values(kv_tensor_grad(x), DV(6, 8), 0);
    /* a leaf root gets the seed */
    kv_tensor *one = leaf(f64_of(IL(1), DV(3)));
    OKS(kv_backward(one, NULL));
    expect_values(kv_tensor_grad(one), DV(1), 0);
    kv_tensor *tensors[] = { one, l2, s, loss, y, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* ---- names ---- */

static void test_grad_fn_names(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2, 3), DV(1, 2, 3, 4, 5, 6)));
    kv_tensor *w = leaf(f64_of(IL(3), DV(1, 1, 1)));
    kv_tensor *xt = OK(kv_t(x));
    struct {
        kv_tensor *t;
        const char *name;
    } cases[] = {
        { kv_add(x, x, kv_scalar_int(1)), "AddBackward0" },
        { kv_mul(x, x), "MulBackward0" },
        { kv_sum(x, NULL, false, NULL), "SumBackward1" },
        { kv_transpose(x, 0, 1), "TransposeBackward0" },
        { kv_exp(x), "ExpBackward0" },
        { kv_mm(x, xt), "MmBackward0" },
        { kv__softmax(x, 1, false), "SoftmaxBackward0" },
        { kv_clone(x, NULL), "CloneBackward0" },
        { kv_view(x, IL(6)), "ViewBackward0" },
        { kv_expand(w, IL(2, 3), false), "ExpandBackward0" },
        { kv_cat(TL(x, x), 0), "CatBackward0" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_non_null(cases[i].t);
        const char *got = kv_tensor_grad_fn_name(cases[i].t);
        if (got == NULL || strcmp(got, cases[i].name) != 0)
            fail_msg("case %zu: grad_fn %s, want %s", i, got ? got : "(null)", cases[i].name);
        kv_tensor_release(cases[i].t);
    }
    /* multi-output: only native_layer_norm's first result requires grad */
    kv_tensor *o0, *o1, *o2;
    OKS(kv_native_layer_norm(x, IL(3), w, NULL, 1e-5, &o0, &o1, &o2));
    assert_string_equal(kv_tensor_grad_fn_name(o0), "NativeLayerNormBackward0");
    assert_int_equal(kv_tensor_output_nr(o0), 0);
    assert_false(kv_tensor_requires_grad(o1));
    assert_false(kv_tensor_requires_grad(o2));
    /* contiguous of a contiguous tensor is the tensor itself: no node */
    kv_tensor *cx = OK(kv_contiguous(x, 0));
    assert_ptr_equal(cx, x);
    assert_null(kv_tensor_grad_fn_name(cx));
    kv_tensor *tensors[] = { cx, o0, o1, o2, xt, w, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* ---- views ---- */

static void test_view_grads(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2, 3), DV(1, 2, 3, 4, 5, 6)));
    /* transpose: sum(x^T * w) gives w^T */
    kv_tensor *w = f64_of(IL(3, 2), DV(1, 2, 3, 4, 5, 6));
    kv_tensor *xt = OK(kv_transpose(x, 0, 1));
    assert_ptr_equal(xt->storage, x->storage);
    kv_tensor *p1 = OK(kv_mul(xt, w));
    kv_tensor *l1 = total(p1);
    OKS(kv_backward(l1, NULL));
    expect_values(kv_tensor_grad(x), DV(1, 3, 5, 2, 4, 6), 0);
    kv_tensor_clear_grad(x);
    /* slice: columns 1..2 only */
    kv_tensor *sl = OK(kv_slice(x, 1, &(int64_t){ 1 }, &(int64_t){ 3 }, 1));
    kv_tensor *p2 = OK(kv_mul(sl, sl));
    kv_tensor *l2 = total(p2);
    OKS(kv_backward(l2, NULL));
    expect_values(kv_tensor_grad(x), DV(0, 4, 6, 0, 10, 12), 0);
    kv_tensor_clear_grad(x);
    /* select + unsqueeze + expand: row 1, broadcast 4 times */
    kv_tensor *row = OK(kv_select(x, 0, 1));
    kv_tensor *col = OK(kv_unsqueeze(row, 1));
    kv_tensor *ex = OK(kv_expand(col, IL(3, 4), false));
    kv_tensor *l3 = total(ex);
    OKS(kv_backward(l3, NULL));
    expect_values(kv_tensor_grad(x), DV(0, 0, 0, 4, 4, 4), 0);
    kv_tensor *tensors[] = { l3, ex, col, row, l2, p2, sl, l1, p1, xt, w, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* An in-place op through a view rewrites the base's history (CopySlices),
 * and the view's history follows the base. */
static void test_inplace_through_view(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(4), DV(1, 2, 3, 4)));
    kv_tensor *one = scalar_f64(1);
    kv_tensor *a = OK(kv_mul(x, one));
    kv_tensor *v = OK(kv_slice(a, 0, &(int64_t){ 1 }, &(int64_t){ 3 }, 1));
    kv_tensor *three = scalar_f64(3);
    OKS(kv_mul_(v, three));
    expect_values(a, DV(1, 6, 9, 4), 0);
    assert_string_equal(kv_tensor_grad_fn_name(a), "CopySlices");
    assert_string_equal(kv_tensor_grad_fn_name(v), "AsStridedBackward0");
    kv_tensor *sq = OK(kv_mul(a, a));
    kv_tensor *loss = total(sq); /* sum(a^2), a = [x0, 3x1, 3x2, x3] */
    OKS(kv_backward(loss, NULL));
    expect_values(kv_tensor_grad(x), DV(2, 36, 54, 8), 0);
    kv_tensor_clear_grad(x);

    /* the base written after the view was taken: the view sees it */
    kv_tensor *b = OK(kv_mul(x, one));
    kv_tensor *u = OK(kv_slice(b, 0, &(int64_t){ 0 }, &(int64_t){ 2 }, 1));
    kv_tensor *two = scalar_f64(2);
    OKS(kv_mul_(b, two));
    kv_tensor *l2 = total(u); /* u = 2 x[0:2] */
    OKS(kv_backward(l2, NULL));
    expect_values(kv_tensor_grad(x), DV(2, 2, 0, 0), 0);
    kv_tensor_clear_grad(x);

    /* a view of a base that does not require grad, written with a value that does */
    kv_tensor *z = f64_of(IL(4), DV(0, 0, 0, 0));
    kv_tensor *zv = OK(kv_slice(z, 0, &(int64_t){ 2 }, &(int64_t){ 4 }, 1));
    kv_tensor *src = OK(kv_slice(x, 0, &(int64_t){ 0 }, &(int64_t){ 2 }, 1));
    kv_tensor *src2 = OK(kv_mul(src, src));
    OKS(kv_copy_(zv, src2, false));
    assert_true(kv_tensor_requires_grad(zv));
    kv_tensor *l3 = total(zv);
    OKS(kv_backward(l3, NULL));
    expect_values(kv_tensor_grad(x), DV(2, 4, 0, 0), 0);
    kv_tensor *tensors[] = { l3, src2, src, zv, z, l2, two, u, b, loss, sq, three, v, a, one, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* ---- complex ---- */

static kv_tensor *c128_of(kv_int_list sizes, const double *pairs, int npairs) {
    (void)npairs;
    return OK(kv_tensor_from_data(pairs, sizes.items, sizes.n, KV_C128));
}

static void expect_c128(const kv_tensor *t, const double *pairs, int n) {
    assert_non_null(t);
    assert_int_equal(t->dtype, KV_C128);
    assert_int_equal(kv_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        const double *p = kv_tensor_element(t, &i);
        if (fabs(p[0] - pairs[2 * i]) > 1e-15 || fabs(p[1] - pairs[2 * i + 1]) > 1e-15)
            fail_msg("element %lld: got %g%+gi, want %g%+gi", (long long)i, p[0], p[1], pairs[2 * i],
                     pairs[2 * i + 1]);
    }
}

/* PyTorch's convention: the gradient of a*b with respect to a is
 * grad * conj(b). */
static void test_complex_mul_convention(void **state) {
    (void)state;
    kv_tensor *a = leaf(c128_of(IL(2), (const double[]){ 1, 2, 3, -1 }, 2));
    kv_tensor *b = leaf(c128_of(IL(2), (const double[]){ 0.5, -1, -2, 4 }, 2));
    kv_tensor *y = OK(kv_mul(a, b));
    kv_tensor *g = c128_of(IL(2), (const double[]){ 1, 0, 0, 1 }, 2); /* 1 and i */
    OKS(kv_backward(y, g));
    /* grad_a = g * conj(b): 1*(0.5+1i), i*(-2-4i) = 4-2i */
    expect_c128(kv_tensor_grad(a), (const double[]){ 0.5, 1, 4, -2 }, 2);
    /* grad_b = g * conj(a): 1*(1-2i), i*(3+1i) = -1+3i */
    expect_c128(kv_tensor_grad(b), (const double[]){ 1, -2, -1, 3 }, 2);
    /* a real input of a complex product gets the real part */
    kv_tensor *x = leaf(f64_of(IL(2), DV(2, 3)));
    kv_tensor *p = OK(kv_mul(x, b));
    OKS(kv_backward(p, g));
    assert_int_equal(kv_tensor_grad(x)->dtype, KV_F64);
    /* Re(1*(0.5+1i)) = 0.5, Re(i*(-2-4i)) = 4 */
    expect_values(kv_tensor_grad(x), DV(0.5, 4), 0);
    kv_tensor *tensors[] = { p, x, g, y, b, a };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* embedding: the padding row gets no gradient; scale_grad_by_freq divides
 * each row's gradient by how often it was looked up. */
static void test_embedding_padding_and_scale(void **state) {
    (void)state;
    kv_tensor *w = leaf(f64_of(IL(3, 2), DV(1, 2, 3, 4, 5, 6)));
    const int64_t iv[4] = { 0, 2, 0, 1 };
    kv_tensor *idx = OK(kv_tensor_from_data(iv, (const int64_t[]){ 4 }, 1, KV_I64));
    kv_tensor *e = OK(kv_embedding(w, idx, 1, true, false));
    kv_tensor *g = f64_of(IL(4, 2), DV(1, 10, 2, 20, 3, 30, 4, 40));
    OKS(kv_backward(e, g));
    /* row 0: (g0 + g2) / 2; row 1: padding; row 2: g1 / 1 */
    expect_values(kv_tensor_grad(w), DV(2, 20, 0, 0, 2, 20), 0);
    assert_string_equal(kv_tensor_grad_fn_name(e), "EmbeddingBackward0");
    kv_tensor_release(g);
    kv_tensor_release(e);
    kv_tensor_release(idx);
    kv_tensor_release(w);
}

/* An in-place op through a conj view: the view's values are conj of the
 * base's, so gradients cross the view boundary conjugated. a = x * 1,
 * v = conj(a), v *= c makes a = x * conj(c): with grad 1 on a, x gets c.
 * Then v (regenerated history) = conj(x) * c: with grad i on v, x gets
 * conj(i) * c = -i * c. */
static void test_inplace_through_conj_view(void **state) {
    (void)state;
    kv_tensor *x = leaf(c128_of(IL(2), (const double[]){ 1, 2, -3, 0.5 }, 2));
    kv_tensor *one = c128_of(IL(), (const double[]){ 1, 0 }, 1);
    kv_tensor *c = c128_of(IL(), (const double[]){ 2, 1 }, 1); /* 2 + i */
    kv_tensor *a = OK(kv_mul(x, one));
    kv_tensor *v = OK(kv_conj(a));
    assert_true(kv_keyset_has(v->keys, KV_KEY_CONJUGATE));
    OKS(kv_mul_(v, c));
    /* a = x * conj(c) = x * (2 - i): (1+2i)(2-i) = 4+3i, (-3+0.5i)(2-i) = -5.5+4i */
    kv_tensor *ar = OK(kv_resolve_conj(a));
    expect_c128(ar, (const double[]){ 4, 3, -5.5, 4 }, 2);
    assert_string_equal(kv_tensor_grad_fn_name(a), "CopySlices");
    kv_tensor *g1 = c128_of(IL(2), (const double[]){ 1, 0, 1, 0 }, 2);
    OKS(kv_backward(a, g1));
    expect_c128(kv_tensor_grad(x), (const double[]){ 2, 1, 2, 1 }, 2);
    kv_tensor_clear_grad(x);

    kv_tensor *b = OK(kv_mul(x, one));
    kv_tensor *u = OK(kv_conj(b));
    OKS(kv_mul_(u, c));
    kv_tensor *w = OK(kv_mul(u, one));
    kv_tensor *gi = c128_of(IL(2), (const double[]){ 0, 1, 0, 1 }, 2);
    OKS(kv_backward(w, gi));
    /* -i * (2 + i) = 1 - 2i */
    expect_c128(kv_tensor_grad(x), (const double[]){ 1, -2, 1, -2 }, 2);
    kv_tensor *tensors[] = { gi, w, u, b, g1, ar, v, a, c, one, x };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* An alias sharing the record (what boxing does) accumulates into the
 * same .grad, and both can be released in any order. */
static void test_shared_record(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(1, 2)));
    kv_tensor *alias = OK(kv_tensor_alias(x));
    kv_autograd_share(alias, x);
    assert_true(kv_tensor_requires_grad(alias));
    assert_ptr_equal(alias->autograd, x->autograd);
    kv_tensor *y = OK(kv_mul(alias, alias));
    kv_tensor *loss = total(y);
    OKS(kv_backward(loss, NULL));
    expect_values(kv_tensor_grad(x), DV(2, 4), 0);
    assert_ptr_equal(kv_tensor_grad(alias), kv_tensor_grad(x));
    kv_tensor_release(x);
    expect_values(kv_tensor_grad(alias), DV(2, 4), 0);
    kv_tensor_release(loss);
    kv_tensor_release(y);
    kv_tensor_release(alias);
}

/* ---- the backward ops' reference kernels, by hand ---- */

static void test_backward_ops(void **state) {
    (void)state;
    kv_tensor *ones42 = f64_of(IL(4, 2), DV(1, 1, 1, 1, 1, 1, 1, 1));
    /* windows [0,1] [1,2] [2,3] [3,4] of a length-5 input */
    kv_tensor *u = OK(kv_unfold_backward(ones42, IL(5), 0, 2, 1));
    expect_values(u, DV(1, 2, 2, 2, 1), 0);
    expect_error(kv_unfold_backward(ones42, IL(6), 0, 2, 1) ? KV_OK : kv_last_error(), KV_ERR_SHAPE, "unfold_backward");
    /* as_strided [3, 2] with strides [1, 1] reads positions i + j */
    kv_tensor *ones32 = f64_of(IL(3, 2), DV(1, 1, 1, 1, 1, 1));
    kv_tensor *a = OK(kv_as_strided_backward(ones32, IL(4), IL(1), 0, IL(3, 2), IL(1, 1), 0));
    expect_values(a, DV(1, 2, 2, 1), 0);
    expect_error(kv_as_strided_backward(ones32, IL(4), IL(1), 0, IL(2, 3), IL(1, 1), 0) ? KV_OK : kv_last_error(),
                 KV_ERR_SHAPE, "as_strided_backward");
    /* rows 2, 0, 2 of a [3, 2] */
    kv_tensor *g = f64_of(IL(3, 2), DV(1, 2, 3, 4, 5, 6));
    const int64_t iv[3] = { 2, 0, 2 }, bad[3] = { 2, 0, 3 };
    kv_tensor *idx = OK(kv_tensor_from_data(iv, (const int64_t[]){ 3 }, 1, KV_I64));
    kv_tensor *badidx = OK(kv_tensor_from_data(bad, (const int64_t[]){ 3 }, 1, KV_I64));
    kv_tensor *is = OK(kv_index_select_backward(g, IL(3, 2), 0, idx));
    expect_values(is, DV(3, 4, 0, 0, 6, 8), 0);
    expect_error(kv_index_select_backward(g, IL(3, 2), 0, badidx) ? KV_OK : kv_last_error(), KV_ERR_INDEX,
                 "out of bounds");
    expect_error(kv_embedding_dense_backward(g, badidx, 3, -1, false) ? KV_OK : kv_last_error(), KV_ERR_INDEX,
                 "out of bounds");
    /* gelu'(0) = 1/2 in both forms */
    kv_tensor *zero = f64_of(IL(1), DV(0));
    kv_tensor *two = f64_of(IL(1), DV(2));
    kv_tensor *gn = OK(kv_gelu_backward(two, zero, "none"));
    kv_tensor *gt = OK(kv_gelu_backward(two, zero, "tanh"));
    expect_values(gn, DV(1), 0);
    expect_values(gt, DV(1), 0);
    expect_error(kv_gelu_backward(two, zero, "erf") ? KV_OK : kv_last_error(), KV_ERR_INVALID_ARG,
                 "approximate argument must be either none or tanh");
    kv_tensor *tensors[] = { gt, gn, two, zero, is, badidx, idx, g, a, ones32, u, ones42 };
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) kv_tensor_release(tensors[i]);
}

/* ---- counters ---- */

static void test_counters(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(2), DV(1, 2)));
    kv_tensor *c = f64_of(IL(2), DV(1, 2));
    kv_autograd_counters_reset();
    kv_tensor *y = OK(kv_mul(x, x));
    kv_tensor *loss = total(y);
    kv_tensor *z = OK(kv_mul(c, c)); /* no input requires grad: runs, records nothing */
    kv_autograd_counters k = kv_autograd_counters_get();
    assert_int_equal(k.nodes_created, 2);
    assert_int_equal(k.kernel_recorded, 2);
    assert_int_equal(k.backward_calls, 0);
    OKS(kv_backward(loss, NULL));
    k = kv_autograd_counters_get();
    assert_int_equal(k.backward_calls, 1);
    assert_int_equal(k.nodes_executed, 2);
    assert_int_equal(k.nodes_created, 2); /* backward records nothing */
    kv_tensor_release(z);
    kv_tensor_release(loss);
    kv_tensor_release(y);
    kv_tensor_release(c);
    kv_tensor_release(x);
}

/* ---- an op without a formula ---- */

static void test_missing_formula(void **state) {
    (void)state;
    const kv_op *op = NULL;
    OKS(kv_op_register("kvt_ag_square(Tensor self) -> Tensor", &op));
    OKS(kv_register_kernel("kvt_ag_square", KV_KEY_CPU, kv_test_kernel_square));
    kv_tensor *x = leaf(f64_of(IL(2), DV(1, 2)));
    kv_ivalue slots[1];
    kv_stack st = kv_stack_on(slots, 1);
    kv_push_tensor(&st, x);
    OKS(kv_call(op, &st));
    kv_tensor *y = st.slots[0].v.tensor;
    expect_values(y, DV(1, 4), 0);
    assert_string_equal(kv_tensor_grad_fn_name(y), "NotImplemented");
    kv_tensor *loss = total(y);
    expect_error(kv_backward(loss, NULL), KV_ERR_INVALID_ARG,
                 "the derivative for 'kvt_ag_square' is not implemented");
    assert_false(kv_autograd_has_formula(op));
    assert_true(kv_autograd_has_formula(kv_op_find("mul.Tensor")));
    assert_true(kv_autograd_is_nondifferentiable(kv_op_find("argmax")));
    kv_tensor_release(loss);
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* ---- a long chain: freeing and walking it use no deep recursion ---- */

static void test_long_chain(void **state) {
    (void)state;
    kv_tensor *x = leaf(f64_of(IL(1), DV(1.5)));
    kv_tensor *t = x;
    kv_tensor_retain(t);
    for (int i = 0; i < 20000; i++) {
        kv_tensor *n = OK(kv_neg(t));
        kv_tensor_release(t);
        t = n;
    }
    OKS(kv_backward(t, NULL));
    expect_values(kv_tensor_grad(x), DV(1), 0);
    kv_tensor_release(t);
    kv_tensor_release(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requires_grad_rules),
        cmocka_unit_test(test_simple_chain),
        cmocka_unit_test(test_transcendental_chain),
        cmocka_unit_test(test_broadcast_reduction),
        cmocka_unit_test(test_grad_dtype_follows_input),
        cmocka_unit_test(test_accumulation),
        cmocka_unit_test(test_no_grad_guard),
        cmocka_unit_test(test_inplace_on_leaf_is_error),
        cmocka_unit_test(test_inplace_rebases_history),
        cmocka_unit_test(test_saved_tensor_modified_is_error),
        cmocka_unit_test(test_non_scalar_root),
        cmocka_unit_test(test_backward_twice),
        cmocka_unit_test(test_grad_fn_names),
        cmocka_unit_test(test_view_grads),
        cmocka_unit_test(test_inplace_through_view),
        cmocka_unit_test(test_complex_mul_convention),
        cmocka_unit_test(test_embedding_padding_and_scale),
        cmocka_unit_test(test_inplace_through_conj_view),
        cmocka_unit_test(test_shared_record),
        cmocka_unit_test(test_backward_ops),
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_missing_formula),
        cmocka_unit_test(test_long_chain),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
