/* The lazy bits (Conjugate, Negative, ZeroTensor) through the typed API:
 * the bit-making views, the boxed fallbacks, copy-back of mutable
 * arguments, copy_'s XOR rule, ZeroTensor immutability, views passing the
 * bit on, resolve_* / is_*, the counters, a removed fallback, and the
 * debug check that no backend kernel sees a bit. Expected values are
 * worked out by hand (conj flips the imaginary sign, neg both signs). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "test_util.h"

/* ---- helpers ---- */

#define IL(...) ((kv_int_list){ (const int64_t[]){ __VA_ARGS__ }, \
                                (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)) })
#define TL(...) ((kv_tensor_list){ (kv_tensor *const[]){ __VA_ARGS__ }, \
                                   (int)(sizeof((kv_tensor *[]){ __VA_ARGS__ }) / sizeof(kv_tensor *)) })
/* Interleaved re, im pairs. */
#define CV(...) (const float[]){ __VA_ARGS__ }, (int)(sizeof((float[]){ __VA_ARGS__ }) / sizeof(float) / 2)
#define DV(...) (const double[]){ __VA_ARGS__ }, (int)(sizeof((double[]){ __VA_ARGS__ }) / sizeof(double))

static kv_tensor *c64_of(kv_int_list sizes, const float *pairs, int n) {
    int64_t numel = 1;
    for (int d = 0; d < sizes.n; d++) numel *= sizes.items[d];
    assert_int_equal(numel, n);
    kv_tensor *t = kv_tensor_from_data(pairs, sizes.items, sizes.n, KV_C64);
    if (!t) fail_msg("from_data: %s", kv_last_error_message());
    return t;
}

#define OK(expr) KV_TEST_OK(expr)
#define OKS(expr) KV_TEST_OKS(expr)

/* The row-major multi-index of element i. */
static void unravel(const kv_tensor *t, int64_t i, int64_t *idx) {
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->sizes[d] ? i % t->sizes[d] : 0;
        if (t->sizes[d]) i /= t->sizes[d];
    }
}

/* Compares the STORED c64 values (bits ignored) with `pairs`, exactly. */
static void expect_stored_c64(const kv_tensor *t, const float *pairs, int n) {
    assert_non_null(t);
    assert_int_equal(t->dtype, KV_C64);
    assert_int_equal(kv_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[KV_MAX_DIMS];
        unravel(t, i, idx);
        const float *p = kv_tensor_element(t, idx);
        if (p[0] != pairs[2 * i] || p[1] != pairs[2 * i + 1])
            fail_msg("element %lld: got %g%+gi, want %g%+gi", (long long)i, p[0], p[1], pairs[2 * i],
                     pairs[2 * i + 1]);
    }
}

/* Compares the LOGICAL values (through kv_lazy_materialize). */
static void expect_logical_c64(const kv_tensor *t, const float *pairs, int n) {
    kv_tensor *m = OK(kv_lazy_materialize(t));
    assert_int_equal(m->keys & KV_KEYSET_LAZY, 0);
    expect_stored_c64(m, pairs, n);
    kv_tensor_release(m);
}

static void expect_stored_real(const kv_tensor *t, const double *want, int n) {
    assert_non_null(t);
    assert_int_equal(kv_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[KV_MAX_DIMS];
        unravel(t, i, idx);
        double got = kv_tensor_get_f64(t, idx);
        if (got != want[i]) fail_msg("element %lld: got %g, want %g", (long long)i, got, want[i]);
    }
}

static void expect_logical_real(const kv_tensor *t, const double *want, int n) {
    kv_tensor *m = OK(kv_lazy_materialize(t));
    expect_stored_real(m, want, n);
    kv_tensor_release(m);
}

static bool has(const kv_tensor *t, kv_key k) { return kv_keyset_has(t->keys, k); }

static bool is_conj(kv_tensor *t) {
    bool b = false;
    OKS(kv_is_conj(t, &b));
    return b;
}
static bool is_neg(kv_tensor *t) {
    bool b = false;
    OKS(kv_is_neg(t, &b));
    return b;
}
static bool is_zero(kv_tensor *t) {
    bool b = false;
    OKS(kv__is_zerotensor(t, &b));
    return b;
}

static void expect_error(kv_status want, const char *part1, const char *part2) {
    assert_int_equal(kv_last_error(), want);
    const char *m = kv_last_error_message();
    if (part1 && !strstr(m, part1)) fail_msg("message '%s' lacks '%s'", m, part1);
    if (part2 && !strstr(m, part2)) fail_msg("message '%s' lacks '%s'", m, part2);
}

/* a = [1+2i, 3-4i]; conj(a) = [1-2i, 3+4i] */
static kv_tensor *vec_a(void) { return c64_of(IL(2), CV(1, 2, 3, -4)); }
/* b = [5+1i, -1+2i] */
static kv_tensor *vec_b(void) { return c64_of(IL(2), CV(5, 1, -1, 2)); }

/* ---- conj makes views ---- */

static void test_conj_view_shares_storage_and_toggles(void **state) {
    (void)state;
    kv_tensor *a = vec_a();
    kv_tensor *c = OK(kv_conj(a));
    assert_ptr_equal(c->storage, a->storage);
    assert_true(has(c, KV_KEY_CONJUGATE));
    assert_false(has(a, KV_KEY_CONJUGATE));
    assert_true(is_conj(c));
    assert_false(is_conj(a));
    expect_stored_c64(c, CV(1, 2, 3, -4)); /* nothing was computed */
    expect_logical_c64(c, CV(1, -2, 3, 4));
    /* conj of a conjugate view clears the bit, still a view */
    kv_tensor *cc = OK(kv_conj(c));
    assert_ptr_equal(cc->storage, a->storage);
    assert_false(is_conj(cc));
    expect_logical_c64(cc, CV(1, 2, 3, -4));
    /* _conj toggles the same way */
    kv_tensor *u = OK(kv__conj(a));
    assert_true(is_conj(u));
    assert_ptr_equal(u->storage, a->storage);
    /* views share the version counter: a write through a shows on c */
    int64_t v0 = kv_tensor_version(c);
    OKS(kv_add_(a, a, kv_scalar_int(1)));
    assert_int_equal(kv_tensor_version(c), v0 + 1);
    expect_logical_c64(c, CV(2, -4, 6, 8));
    kv_tensor_release(u);
    kv_tensor_release(cc);
    kv_tensor_release(c);
    kv_tensor_release(a);
}

/* clone of a flagged transposed tensor: the logical values, no bit, and
 * the strides memory_format=preserve gives (self's own: transposed), as a
 * clone without a bit; contiguous_format still gives row-major. */
static void test_clone_through_bits_preserves_strides(void **state) {
    (void)state;
    const int64_t sz[2] = { 4, 5 }, tsz[2] = { 5, 4 }, tst[2] = { 1, 5 };
    float v[40] = { 0 };
    for (int i = 0; i < 20; i++) v[2 * i] = (float)i; /* element i of the storage is i + 0i */
    kv_tensor *a2 = kv_tensor_from_data(v, sz, 2, KV_C64);
    assert_non_null(a2);
    kv_tensor *t = kv_tensor_view(a2, tsz, tst, 2, 0);
    kv_tensor *flagged[3] = { kv__neg_view(t), kv_conj(t), NULL };
    flagged[2] = kv_conj(flagged[0]);
    const double sign_re[3] = { -1, 1, -1 }, sign_im[3] = { -1, -1, 1 };
    for (int f = 0; f < 3; f++) {
        assert_non_null(flagged[f]);
        kv_tensor *c = kv_clone(flagged[f], NULL);
        assert_non_null(c);
        assert_false(kv_keyset_has(c->keys, KV_KEY_NEGATIVE) || kv_keyset_has(c->keys, KV_KEY_CONJUGATE));
        assert_int_equal(c->strides[0], 1);
        assert_int_equal(c->strides[1], 5);
        const float *p = kv_tensor_data(c);
        for (int i = 0; i < 20; i++) {
            assert_true(p[2 * i] == (float)(sign_re[f] * i));
            if (p[2 * i + 1] != 0.0f || (signbit(p[2 * i + 1]) != 0) != (sign_im[f] < 0))
                fail_msg("flag %d element %d: imaginary part %g", f, i, (double)p[2 * i + 1]);
        }
        kv_tensor *r = kv_clone(flagged[f], &(int64_t){ KV_MEMORY_FORMAT_CONTIGUOUS });
        assert_non_null(r);
        assert_int_equal(r->strides[0], 4);
        assert_int_equal(r->strides[1], 1);
        kv_tensor_release(r);
        kv_tensor_release(c);
        kv_tensor_release(flagged[f]);
    }
    kv_tensor_release(t);
    kv_tensor_release(a2);
}

static void test_conj_of_real_is_identity(void **state) {
    (void)state;
    kv_tensor *x = kv_test_f32_of(IL(3), DV(1, -2, 3.5));
    kv_tensor *c = OK(kv_conj(x));
    assert_ptr_equal(c->storage, x->storage);
    assert_int_equal(c->keys, x->keys);
    assert_false(is_conj(c));
    kv_tensor *u = OK(kv__conj(x));
    assert_false(is_conj(u));
    assert_ptr_equal(u->storage, x->storage);
    /* conj_physical always copies; for reals the values are unchanged */
    kv_tensor *p = OK(kv_conj_physical(x));
    assert_ptr_not_equal(p->storage, x->storage);
    expect_stored_real(p, DV(1, -2, 3.5));
    kv_tensor_release(p);
    kv_tensor_release(u);
    kv_tensor_release(c);
    kv_tensor_release(x);
}

static void test_conj_physical(void **state) {
    (void)state;
    kv_tensor *a = vec_a();
    kv_tensor *p = OK(kv_conj_physical(a));
    assert_false(is_conj(p));
    assert_ptr_not_equal(p->storage, a->storage);
    expect_stored_c64(p, CV(1, -2, 3, 4));
    /* conj_physical of a conjugate view: the stored values, no bit */
    kv_tensor *c = OK(kv_conj(a));
    kv_tensor *q = OK(kv_conj_physical(c));
    assert_false(is_conj(q));
    assert_ptr_not_equal(q->storage, a->storage);
    expect_stored_c64(q, CV(1, 2, 3, -4));
    kv_tensor_release(q);
    kv_tensor_release(c);
    kv_tensor_release(p);
    kv_tensor_release(a);
}

/* ---- the Conjugate fallback ---- */

static void test_ops_on_conj_input(void **state) {
    (void)state;
    kv_tensor *a = vec_a();
    kv_tensor *b = vec_b();
    kv_tensor *c = OK(kv_conj(a)); /* [1-2i, 3+4i] */
    kv_lazy_counters_reset();

    kv_tensor *s = OK(kv_add(c, b, kv_scalar_int(1)));
    assert_false(is_conj(s));
    expect_stored_c64(s, CV(6, -1, 2, 6));
    kv_tensor_release(s);
    /* the conj input as the second operand */
    s = OK(kv_sub(b, c, kv_scalar_int(1)));
    expect_stored_c64(s, CV(4, 3, -4, -2));
    kv_tensor_release(s);
    /* (1-2i)(5+i) = 7-9i; (3+4i)(-1+2i) = -11+2i */
    s = OK(kv_mul(c, b));
    expect_stored_c64(s, CV(7, -9, -11, 2));
    kv_tensor_release(s);
    s = OK(kv_neg(c));
    expect_stored_c64(s, CV(-1, 2, -3, -4));
    kv_tensor_release(s);
    s = OK(kv_sum(c, NULL, false, NULL));
    expect_stored_c64(s, CV(4, 2));
    kv_tensor_release(s);
    /* conj of both operands of mul: (1-2i)(1-2i) = -3-4i; (3+4i)^2 = -7+24i */
    s = OK(kv_mul(c, c));
    expect_stored_c64(s, CV(-3, -4, -7, 24));
    kv_tensor_release(s);
    /* cat of a conj view and a plain tensor */
    s = OK(kv_cat(TL(c, b), 0));
    assert_false(is_conj(s));
    expect_stored_c64(s, CV(1, -2, 3, 4, 5, 1, -1, 2));
    kv_tensor_release(s);

    kv_lazy_counters k = kv_lazy_counters_get(KV_KEY_CONJUGATE);
    assert_int_equal(k.fallback_calls, 7);
    assert_int_equal(k.materializations, 8); /* mul(c, c) resolves both */
    assert_int_equal(k.copy_backs, 0);
    assert_int_equal(kv_lazy_counters_get(KV_KEY_NEGATIVE).fallback_calls, 0);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_mm_on_conj_input(void **state) {
    (void)state;
    /* m = [[1+1i, 2], [0, 1-1i]], conj(m) = [[1-1i, 2], [0, 1+1i]];
     * n = [[1, 1i], [2i, 1]] */
    kv_tensor *m = c64_of(IL(2, 2), CV(1, 1, 2, 0, 0, 0, 1, -1));
    kv_tensor *n = c64_of(IL(2, 2), CV(1, 0, 0, 1, 0, 2, 1, 0));
    kv_tensor *cm = OK(kv_conj(m));
    /* row 0: (1-i)*1 + 2*2i = 1+3i; (1-i)*i + 2*1 = 3+i
     * row 1: 0 + (1+i)*2i = -2+2i; 0 + (1+i)*1 = 1+i */
    kv_tensor *r = OK(kv_mm(cm, n));
    expect_stored_c64(r, CV(1, 3, 3, 1, -2, 2, 1, 1));
    kv_tensor_release(r);
    /* conj(m) transposed (a view keeping the bit) = [[1-i, 0], [2, 1+i]]:
     * row 0: (1-i)*1 + 0 = 1-i; (1-i)*i = 1+i
     * row 1: 2*1 + (1+i)*2i = 0+2i; 2i + (1+i) = 1+3i */
    kv_tensor *ct = OK(kv_transpose(cm, 0, 1));
    assert_true(is_conj(ct));
    r = OK(kv_mm(ct, n));
    expect_stored_c64(r, CV(1, -1, 1, 1, 0, 2, 1, 3));
    kv_tensor_release(r);
    kv_tensor_release(ct);
    kv_tensor_release(cm);
    kv_tensor_release(n);
    kv_tensor_release(m);
}

static void test_inplace_into_conj_self_keeps_bit(void **state) {
    (void)state;
    kv_tensor *a = vec_a();
    kv_tensor *b = vec_b();
    kv_tensor *c = OK(kv_conj(a));
    kv_lazy_counters_reset();
    int64_t v0 = kv_tensor_version(a);
    /* logical c becomes conj(a) + b = [6-1i, 2+6i]; a stores its conj */
    OKS(kv_add_(c, b, kv_scalar_int(1)));
    assert_true(is_conj(c));
    assert_ptr_equal(c->storage, a->storage);
    expect_logical_c64(c, CV(6, -1, 2, 6));
    expect_stored_c64(a, CV(6, 1, 2, -6));
    assert_int_equal(kv_tensor_version(a), v0 + 1);
    kv_lazy_counters k = kv_lazy_counters_get(KV_KEY_CONJUGATE);
    assert_int_equal(k.fallback_calls, 1);
    assert_int_equal(k.copy_backs, 1);
    /* mul_ with the conj view on both sides: c *= c; (6-i)^2 = 35-12i,
     * (2+6i)^2 = -32+24i */
    OKS(kv_mul_(c, c));
    assert_true(is_conj(c));
    expect_logical_c64(c, CV(35, -12, -32, 24));
    expect_stored_c64(a, CV(35, 12, -32, -24));
    /* fill_ through the bit: logical 2+3i everywhere is stored as 2-3i */
    OKS(kv_fill_(c, kv_scalar_complex(2, 3)));
    expect_stored_c64(a, CV(2, -3, 2, -3));
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_inplace_into_broadcast_lazy_self_errors(void **state) {
    (void)state;
    kv_tensor *a = c64_of(IL(1), CV(1, 1));
    kv_tensor *c = OK(kv_conj(a));
    kv_tensor *e = OK(kv_expand(c, IL(3), false));
    assert_true(is_conj(e));
    kv_tensor *b = c64_of(IL(3), CV(1, 0, 2, 0, 3, 0));
    kv_error_clear();
    assert_int_not_equal(kv_add_(e, b, kv_scalar_int(1)), KV_OK);
    expect_error(KV_ERR_INVALID_ARG, "add_.Tensor: argument 'self'", "single memory location");
    expect_stored_c64(a, CV(1, 1));
    kv_tensor_release(b);
    kv_tensor_release(e);
    kv_tensor_release(c);
    kv_tensor_release(a);
}

/* ---- the Negative fallback ---- */

static void test_neg_view_and_ops(void **state) {
    (void)state;
    kv_tensor *x = kv_test_f32_of(IL(2, 2), DV(1, -2, 3, 0.5));
    kv_tensor *n = OK(kv__neg_view(x));
    assert_ptr_equal(n->storage, x->storage);
    assert_true(is_neg(n));
    assert_false(is_neg(x));
    expect_stored_real(n, DV(1, -2, 3, 0.5));
    expect_logical_real(n, DV(-1, 2, -3, -0.5));
    kv_tensor *y = kv_test_f32_of(IL(2, 2), DV(10, 20, 30, 40));
    kv_lazy_counters_reset();

    kv_tensor *r = OK(kv_add(n, y, kv_scalar_int(1)));
    assert_false(is_neg(r));
    expect_stored_real(r, DV(9, 22, 27, 39.5));
    kv_tensor_release(r);
    r = OK(kv_mul(y, n));
    expect_stored_real(r, DV(-10, 40, -90, -20));
    kv_tensor_release(r);
    r = OK(kv_sum(n, NULL, false, NULL));
    expect_stored_real(r, DV(-2.5));
    kv_tensor_release(r);
    /* [[-1, 2], [-3, -0.5]] @ [[10, 20], [30, 40]] = [[50, 60], [-45, -80]] */
    r = OK(kv_mm(n, y));
    expect_stored_real(r, DV(50, 60, -45, -80));
    kv_tensor_release(r);
    /* neg of the negative view is the stored value */
    r = OK(kv_neg(n));
    expect_stored_real(r, DV(1, -2, 3, 0.5));
    kv_tensor_release(r);
    /* the view toggles back */
    kv_tensor *nn = OK(kv__neg_view(n));
    assert_false(is_neg(nn));
    kv_tensor_release(nn);

    kv_lazy_counters k = kv_lazy_counters_get(KV_KEY_NEGATIVE);
    assert_int_equal(k.fallback_calls, 5);
    assert_true(k.materializations >= 5);
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).fallback_calls, 0);
    kv_tensor_release(y);
    kv_tensor_release(n);
    kv_tensor_release(x);
}

static void test_neg_view_ints(void **state) {
    (void)state;
    kv_tensor *x = kv_test_i32_of(IL(3), (const int32_t[]){ 1, -2, INT32_MIN });
    kv_tensor *n = OK(kv__neg_view(x));
    kv_tensor *y = kv_test_i32_of(IL(3), (const int32_t[]){ 10, 10, 0 });
    /* -INT32_MIN wraps to INT32_MIN, as in PyTorch */
    kv_tensor *r = OK(kv_add(n, y, kv_scalar_int(1)));
    assert_int_equal(r->dtype, KV_I32);
    expect_stored_real(r, DV(9, 12, (double)INT32_MIN));
    kv_tensor_release(r);
    /* in place on the negative view: logical -x + y, stored x - y */
    OKS(kv_add_(n, y, kv_scalar_int(1)));
    assert_true(is_neg(n));
    expect_stored_real(x, DV(-9, -12, (double)INT32_MIN));
    expect_logical_real(n, DV(9, 12, (double)INT32_MIN));
    assert_int_equal(kv_lazy_counters_get(KV_KEY_NEGATIVE).copy_backs >= 1, 1);
    /* bool cannot carry the bit */
    kv_tensor *bl = kv_tensor_from_data((const bool[]){ true, false }, (const int64_t[]){ 2 }, 1, KV_BOOL);
    kv_error_clear();
    assert_null(kv__neg_view(bl));
    expect_error(KV_ERR_DTYPE, "_neg_view: argument 'self'", "bool");
    kv_tensor_release(bl);
    kv_tensor_release(y);
    kv_tensor_release(n);
    kv_tensor_release(x);
}

/* ---- both bits ---- */

static void test_neg_and_conj_combination(void **state) {
    (void)state;
    kv_tensor *a = vec_a();
    kv_tensor *b = vec_b();
    kv_tensor *c = OK(kv_conj(a));
    kv_tensor *nc = OK(kv__neg_view(c)); /* logical -conj(a) = [-1+2i, -3-4i] */
    assert_true(is_conj(nc) && is_neg(nc));
    assert_ptr_equal(nc->storage, a->storage);
    expect_logical_c64(nc, CV(-1, 2, -3, -4));
    kv_lazy_counters_reset();
    kv_tensor *r = OK(kv_add(nc, b, kv_scalar_int(1)));
    assert_int_equal(r->keys & KV_KEYSET_LAZY, 0);
    expect_stored_c64(r, CV(4, 3, -4, -2));
    kv_tensor_release(r);
    /* (-1+2i)(5+i) = -7+9i; (-3-4i)(-1+2i) = 11-2i */
    r = OK(kv_mul(b, nc));
    expect_stored_c64(r, CV(-7, 9, 11, -2));
    kv_tensor_release(r);
    /* resolved outermost first: Negative, then Conjugate, once per call */
    assert_int_equal(kv_lazy_counters_get(KV_KEY_NEGATIVE).fallback_calls, 2);
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).fallback_calls, 2);
    /* in place: logical -conj(a) + b = [4+3i, -4-2i];
     * stored s with -conj(s) = that: s = [-4+3i, 4-2i] */
    OKS(kv_add_(nc, b, kv_scalar_int(1)));
    assert_true(is_conj(nc) && is_neg(nc));
    expect_logical_c64(nc, CV(4, 3, -4, -2));
    expect_stored_c64(a, CV(-4, 3, 4, -2));
    assert_int_equal(kv_lazy_counters_get(KV_KEY_NEGATIVE).copy_backs, 1);
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).copy_backs, 1);
    /* resolve_neg resolves only its own bit */
    kv_tensor *rn = OK(kv_resolve_neg(nc));
    assert_false(is_neg(rn));
    assert_true(is_conj(rn));
    assert_ptr_not_equal(rn->storage, a->storage);
    expect_logical_c64(rn, CV(4, 3, -4, -2));
    kv_tensor *rc = OK(kv_resolve_conj(nc));
    assert_true(is_neg(rc));
    assert_false(is_conj(rc));
    expect_logical_c64(rc, CV(4, 3, -4, -2));
    kv_tensor_release(rc);
    kv_tensor_release(rn);
    kv_tensor_release(nc);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

/* ---- copy_ ---- */

/* dst <- src for all four Conjugate combinations; src logical [1+2i, 3-4i] */
static void test_copy_xor_rule(void **state) {
    (void)state;
    for (int dst_conj = 0; dst_conj < 2; dst_conj++) {
        for (int src_conj = 0; src_conj < 2; src_conj++) {
            kv_tensor *dbase = c64_of(IL(2), CV(9, 9, 9, 9));
            kv_tensor *dst = dst_conj ? OK(kv_conj(dbase)) : (kv_tensor_retain(dbase), dbase);
            /* a src whose logical value is [1+2i, 3-4i] */
            kv_tensor *sbase = src_conj ? c64_of(IL(2), CV(1, -2, 3, 4)) : c64_of(IL(2), CV(1, 2, 3, -4));
            kv_tensor *src = src_conj ? OK(kv_conj(sbase)) : (kv_tensor_retain(sbase), sbase);
            OKS(kv_copy_(dst, src, false));
            assert_int_equal(is_conj(dst), dst_conj);
            expect_logical_c64(dst, CV(1, 2, 3, -4));
            if (dst_conj) expect_stored_c64(dbase, CV(1, -2, 3, 4));
            else expect_stored_c64(dbase, CV(1, 2, 3, -4));
            kv_tensor_release(src);
            kv_tensor_release(sbase);
            kv_tensor_release(dst);
            kv_tensor_release(dbase);
        }
    }
}

static void test_copy_neg_and_dtype(void **state) {
    (void)state;
    /* f32 src into a negative i32 view: stored = -(int)src */
    kv_tensor *dbase = kv_test_i32_of(IL(3), (const int32_t[]){ 0, 0, 0 });
    kv_tensor *dst = OK(kv__neg_view(dbase));
    kv_tensor *src = kv_test_f32_of(IL(3), DV(1.5, -2, 7));
    OKS(kv_copy_(dst, src, false));
    assert_true(is_neg(dst));
    expect_stored_real(dbase, DV(-1, 2, -7));
    expect_logical_real(dst, DV(1, -2, 7));
    /* a negative src into a plain dst, broadcast along dim 0 */
    kv_tensor *plain = kv_test_f32_of(IL(2, 3), DV(0, 0, 0, 0, 0, 0));
    kv_tensor *nsrc = OK(kv__neg_view(src));
    OKS(kv_copy_(plain, nsrc, false));
    assert_false(is_neg(plain));
    expect_stored_real(plain, DV(-1.5, 2, -7, -1.5, 2, -7));
    /* copy_ between a view and its own negative: x <- -x */
    kv_tensor *x = kv_test_f32_of(IL(2), DV(4, -5));
    kv_tensor *nx = OK(kv__neg_view(x));
    OKS(kv_copy_(x, nx, false));
    expect_stored_real(x, DV(-4, 5));
    kv_tensor_release(nx);
    kv_tensor_release(x);
    kv_tensor_release(nsrc);
    kv_tensor_release(plain);
    kv_tensor_release(src);
    kv_tensor_release(dst);
    kv_tensor_release(dbase);
}

/* ---- ZeroTensor ---- */

static void test_zero_tensor_through_ops(void **state) {
    (void)state;
    kv_tensor *z = OK(kv__efficientzerotensor(IL(2, 2), NULL, NULL, NULL, NULL));
    assert_int_equal(z->dtype, KV_F32);
    assert_true(is_zero(z));
    assert_false(is_conj(z));
    /* read straight, ignoring the bit, it is zeros too */
    expect_stored_real(z, DV(0, 0, 0, 0));
    kv_tensor *y = kv_test_f32_of(IL(2, 2), DV(1, 2, 3, 4));
    kv_lazy_counters_reset();
    kv_tensor *r = OK(kv_add(z, y, kv_scalar_int(1)));
    assert_false(is_zero(r));
    expect_stored_real(r, DV(1, 2, 3, 4));
    kv_tensor_release(r);
    r = OK(kv_mul(y, z));
    expect_stored_real(r, DV(0, 0, 0, 0));
    kv_tensor_release(r);
    r = OK(kv_sum(z, NULL, false, NULL));
    expect_stored_real(r, DV(0));
    kv_tensor_release(r);
    r = OK(kv_mm(z, y));
    expect_stored_real(r, DV(0, 0, 0, 0));
    kv_tensor_release(r);
    kv_lazy_counters k = kv_lazy_counters_get(KV_KEY_ZERO_TENSOR);
    assert_int_equal(k.fallback_calls, 4);
    assert_int_equal(k.materializations, 4);
    /* a complex zero tensor, conjugated: still zeros */
    kv_tensor *zc = OK(kv__efficientzerotensor(IL(2), (const kv_dtype[]){ KV_C64 }, NULL, NULL, NULL));
    kv_tensor *zcc = OK(kv_conj(zc));
    assert_true(is_zero(zcc) && is_conj(zcc));
    kv_tensor *b = vec_b();
    r = OK(kv_add(zcc, b, kv_scalar_int(1)));
    expect_stored_c64(r, CV(5, 1, -1, 2));
    kv_tensor_release(r);
    /* clone gives a mutable plain zero tensor */
    kv_tensor *m = OK(kv_clone(z, NULL));
    assert_false(is_zero(m));
    OKS(kv_add_(m, y, kv_scalar_int(1)));
    expect_stored_real(m, DV(1, 2, 3, 4));
    /* bad arguments of the factory */
    kv_error_clear();
    assert_null(kv__efficientzerotensor(IL(2, -1), NULL, NULL, NULL, NULL));
    expect_error(KV_ERR_NEGATIVE_SIZE, "_efficientzerotensor: argument 'size'", NULL);
    kv_tensor_release(m);
    kv_tensor_release(b);
    kv_tensor_release(zcc);
    kv_tensor_release(zc);
    kv_tensor_release(y);
    kv_tensor_release(z);
}

static void test_zero_tensor_is_immutable(void **state) {
    (void)state;
    kv_tensor *z = OK(kv__efficientzerotensor(IL(2), NULL, NULL, NULL, NULL));
    kv_tensor *y = kv_test_f32_of(IL(2), DV(1, 2));
    const char *why = "ZeroTensors are immutable. Please use the materialized zero tensor obtained using .clone() "
                      "if you want a mutable tensor.";
    kv_error_clear();
    assert_int_equal(kv_add_(z, y, kv_scalar_int(1)), KV_ERR_INVALID_ARG);
    expect_error(KV_ERR_INVALID_ARG, "add_.Tensor: argument 'self': ", why);
    kv_error_clear();
    assert_int_equal(kv_copy_(z, y, false), KV_ERR_INVALID_ARG);
    expect_error(KV_ERR_INVALID_ARG, "copy_: argument 'self': ", why);
    kv_error_clear();
    assert_int_equal(kv_zero_(z), KV_ERR_INVALID_ARG);
    expect_error(KV_ERR_INVALID_ARG, "zero_: argument 'self'", why);
    /* a view of a zero tensor is one too */
    kv_tensor *v = OK(kv_unsqueeze(z, 0));
    assert_true(is_zero(v));
    kv_error_clear();
    assert_int_equal(kv_mul_(v, v), KV_ERR_INVALID_ARG);
    expect_error(KV_ERR_INVALID_ARG, "mul_.Tensor: argument 'self'", why);
    /* nothing was written */
    expect_stored_real(z, DV(0, 0));
    /* reading from one is fine: copy_ from a zero tensor */
    OKS(kv_copy_(y, z, false));
    expect_stored_real(y, DV(0, 0));
    kv_tensor_release(v);
    kv_tensor_release(y);
    kv_tensor_release(z);
}

/* ---- views ---- */

static void test_view_ops_keep_the_bit(void **state) {
    (void)state;
    /* m = [[1+1i, 2+2i, 3+3i], [4+4i, 5+5i, 6+6i]] */
    kv_tensor *m = c64_of(IL(2, 3), CV(1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6));
    kv_tensor *c = OK(kv_conj(m));
    kv_lazy_counters_reset();
    kv_tensor *t = OK(kv_transpose(c, 0, 1));
    assert_true(is_conj(t));
    assert_ptr_equal(t->storage, m->storage);
    expect_logical_c64(t, CV(1, -1, 4, -4, 2, -2, 5, -5, 3, -3, 6, -6));
    kv_tensor *s = OK(kv_slice(c, 1, (const int64_t[]){ 1 }, NULL, 1));
    assert_true(is_conj(s));
    assert_ptr_equal(s->storage, m->storage);
    expect_logical_c64(s, CV(2, -2, 3, -3, 5, -5, 6, -6));
    kv_tensor *v = OK(kv_view(c, IL(3, 2)));
    assert_true(is_conj(v));
    assert_ptr_equal(v->storage, m->storage);
    kv_tensor *sel = OK(kv_select(c, 0, 1));
    assert_true(is_conj(sel));
    expect_logical_c64(sel, CV(4, -4, 5, -5, 6, -6));
    /* the views themselves ran no fallback */
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).fallback_calls, 0);
    /* reshape of the transposed view must copy: the copy keeps the bit */
    kv_tensor *rs = OK(kv_reshape(t, IL(6)));
    assert_true(is_conj(rs));
    assert_ptr_not_equal(rs->storage, m->storage);
    expect_logical_c64(rs, CV(1, -1, 4, -4, 2, -2, 5, -5, 3, -3, 6, -6));
    kv_tensor *rv = OK(kv_reshape(c, IL(6)));
    assert_true(is_conj(rv));
    assert_ptr_equal(rv->storage, m->storage);
    kv_tensor *ct = OK(kv_contiguous(t, 0));
    assert_true(is_conj(ct));
    assert_true(kv_tensor_is_contiguous(ct));
    expect_logical_c64(ct, CV(1, -1, 4, -4, 2, -2, 5, -5, 3, -3, 6, -6));
    /* Negative and ZeroTensor pass through views the same way */
    kv_tensor *n = OK(kv__neg_view(t));
    kv_tensor *nt = OK(kv_transpose(n, 0, 1));
    assert_true(is_neg(nt) && is_conj(nt));
    expect_logical_c64(nt, CV(-1, 1, -2, 2, -3, 3, -4, 4, -5, 5, -6, 6));
    kv_tensor *z = OK(kv__efficientzerotensor(IL(2, 3), NULL, NULL, NULL, NULL));
    kv_tensor *zt = OK(kv_transpose(z, 0, 1));
    assert_true(is_zero(zt));
    kv_tensor *zs = OK(kv_slice(zt, 0, NULL, (const int64_t[]){ 2 }, 1));
    assert_true(is_zero(zs));
    expect_logical_real(zs, DV(0, 0, 0, 0));
    kv_tensor *objs[] = { zs, zt, z, nt, n, ct, rv, rs, sel, v, s, t, c, m };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* ---- resolve, clone, is_* ---- */

static void test_resolve_and_is(void **state) {
    (void)state;
    kv_tensor *a = vec_a();
    /* no bit: resolve returns an alias of self */
    kv_tensor *r0 = OK(kv_resolve_conj(a));
    assert_ptr_equal(r0->storage, a->storage);
    kv_tensor *r1 = OK(kv_resolve_neg(a));
    assert_ptr_equal(r1->storage, a->storage);
    kv_tensor *c = OK(kv_conj(a));
    kv_lazy_counters_reset();
    kv_tensor *rc = OK(kv_resolve_conj(c));
    assert_false(is_conj(rc));
    assert_ptr_not_equal(rc->storage, a->storage);
    expect_stored_c64(rc, CV(1, -2, 3, 4));
    kv_lazy_counters k = kv_lazy_counters_get(KV_KEY_CONJUGATE);
    assert_int_equal(k.fallback_calls, 0); /* its own kernel, not the fallback */
    assert_int_equal(k.materializations, 1);
    kv_tensor *cl = OK(kv_clone(c, NULL));
    assert_false(is_conj(cl));
    expect_stored_c64(cl, CV(1, -2, 3, 4));
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).fallback_calls, 0);
    /* resolve_neg of a tensor without the Negative bit keeps its Conjugate */
    kv_tensor *rn = OK(kv_resolve_neg(c));
    assert_true(is_conj(rn));
    assert_ptr_equal(rn->storage, a->storage);
    kv_tensor *n = OK(kv__neg_view(a));
    assert_true(is_neg(n));
    assert_false(is_conj(n));
    assert_false(is_zero(n));
    kv_tensor *objs[] = { n, rn, cl, rc, c, r1, r0, a };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

static void test_make_and_materialize(void **state) {
    (void)state;
    kv_tensor *logical = vec_a();
    kv_tensor *c = OK(kv_lazy_make(logical, KV_KEY_CONJUGATE));
    assert_true(is_conj(c));
    expect_stored_c64(c, CV(1, -2, 3, 4));
    expect_logical_c64(c, CV(1, 2, 3, -4));
    kv_tensor *n = OK(kv_lazy_make(c, KV_KEY_NEGATIVE)); /* logical of c, negative bit only */
    assert_true(is_neg(n));
    assert_false(is_conj(n));
    expect_stored_c64(n, CV(-1, -2, -3, 4));
    expect_logical_c64(n, CV(1, 2, 3, -4));
    kv_tensor *z = OK(kv_lazy_make(logical, KV_KEY_ZERO_TENSOR));
    assert_true(is_zero(z));
    expect_logical_c64(z, CV(0, 0, 0, 0));
    /* materialize of a plain tensor is a new copy */
    kv_tensor *m = OK(kv_lazy_materialize(logical));
    assert_ptr_not_equal(m->storage, logical->storage);
    expect_stored_c64(m, CV(1, 2, 3, -4));
    kv_tensor *f = kv_test_f32_of(IL(1), DV(1));
    kv_error_clear();
    assert_null(kv_lazy_make(f, KV_KEY_CONJUGATE));
    expect_error(KV_ERR_DTYPE, "kv_lazy_make", "complex");
    kv_error_clear();
    assert_null(kv_lazy_make(f, KV_KEY_AUTOGRAD));
    expect_error(KV_ERR_INVALID_ARG, "kv_lazy_make: argument 'bit'", "Autograd");
    kv_tensor *objs[] = { f, m, z, n, c, logical };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* ---- counters, a removed fallback, the debug check ---- */

static void test_counters(void **state) {
    (void)state;
    kv_lazy_counters_reset();
    for (int k = 0; k < KV_KEY_COUNT; k++) {
        kv_lazy_counters c = kv_lazy_counters_get((kv_key)k);
        assert_int_equal(c.fallback_calls + c.materializations + c.copy_backs, 0);
    }
    kv_tensor *a = vec_a();
    kv_tensor *b = vec_b();
    kv_tensor *r = OK(kv_add(a, b, kv_scalar_int(1))); /* no bit: no fallback */
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).fallback_calls, 0);
    kv_tensor_release(r);
    kv_tensor *c = OK(kv_conj(a));
    r = OK(kv_add(c, b, kv_scalar_int(1)));
    kv_lazy_counters k = kv_lazy_counters_get(KV_KEY_CONJUGATE);
    assert_int_equal(k.fallback_calls, 1);
    assert_int_equal(k.materializations, 1);
    assert_int_equal(k.copy_backs, 0);
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CPU).fallback_calls, 0);
    kv_lazy_counters_reset();
    assert_int_equal(kv_lazy_counters_get(KV_KEY_CONJUGATE).fallback_calls, 0);
    kv_tensor_release(r);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_removed_fallback_is_a_clear_error(void **state) {
    (void)state;
    kv_kernel_fn fb = kv_lazy_fallback(KV_KEY_CONJUGATE);
    assert_non_null(fb);
    assert_null(kv_lazy_fallback(KV_KEY_AUTOGRAD));
    kv_tensor *a = vec_a();
    kv_tensor *b = vec_b();
    kv_tensor *c = OK(kv_conj(a));
    kv_register_fallback(KV_KEY_CONJUGATE, NULL);
    kv_error_clear();
    kv_tensor *r = kv_add(c, b, kv_scalar_int(1));
    kv_status st = kv_last_error();
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kv_last_error_message());
    /* views still work: they fall through, not through the fallback */
    kv_tensor *t = kv_transpose(c, 0, 0);
    kv_register_fallback(KV_KEY_CONJUGATE, fb); /* restore before asserting */
    assert_null(r);
    assert_int_equal(st, KV_ERR_MISSING_KERNEL);
    assert_non_null(strstr(msg, "add.Tensor"));
    assert_non_null(strstr(msg, "Conjugate"));
    assert_non_null(t);
    assert_true(is_conj(t));
    /* and back to working */
    r = OK(kv_add(c, b, kv_scalar_int(1)));
    expect_stored_c64(r, CV(6, -1, 2, 6));
    kv_tensor_release(r);
    kv_tensor_release(t);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_debug_check_catches_bit_at_backend(void **state) {
    (void)state;
#if KV_LAZY_CHECK
    kv_tensor *a = vec_a();
    kv_tensor *b = vec_b();
    kv_tensor *c = OK(kv_conj(a));
    const kv_op *add = kv_op_find("add.Tensor");
    assert_non_null(add);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    OKS(kv_push_tensor(&s, b));
    OKS(kv_push_tensor(&s, c));
    OKS(kv_push_scalar(&s, kv_scalar_int(1)));
    kv_error_clear();
    assert_int_equal(kv_redispatch(add, kv_keyset_of(KV_KEY_CPU), &s), KV_ERR_INTERNAL);
    expect_error(KV_ERR_INTERNAL, "add.Tensor: argument 'other'", "Conjugate");
    /* a view op falls through the key, so its backend kernel may see it */
    const kv_op *tr = kv_op_find("transpose.int");
    s = kv_stack_on(slots, KV_STACK_MAX);
    OKS(kv_push_tensor(&s, c));
    OKS(kv_push_int(&s, 0));
    OKS(kv_push_int(&s, 0));
    OKS(kv_redispatch(tr, kv_keyset_of(KV_KEY_CPU), &s));
    assert_int_equal(s.size, 1);
    assert_true(has(s.slots[0].v.tensor, KV_KEY_CONJUGATE));
    kv_stack_clear_returns(&s);
    /* excluding the key in TLS lets the bit through to the backend: caught */
    kv_tls_keys saved = kv_tls_exclude_push(kv_keyset_of(KV_KEY_CONJUGATE));
    kv_error_clear();
    kv_tensor *r = kv_mul(c, b);
    kv_tls_pop(saved);
    assert_null(r);
    expect_error(KV_ERR_INTERNAL, "mul.Tensor: argument 'self'", "CPU");
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conj_view_shares_storage_and_toggles),
        cmocka_unit_test(test_conj_of_real_is_identity),
        cmocka_unit_test(test_conj_physical),
        cmocka_unit_test(test_ops_on_conj_input),
        cmocka_unit_test(test_mm_on_conj_input),
        cmocka_unit_test(test_inplace_into_conj_self_keeps_bit),
        cmocka_unit_test(test_inplace_into_broadcast_lazy_self_errors),
        cmocka_unit_test(test_neg_view_and_ops),
        cmocka_unit_test(test_neg_view_ints),
        cmocka_unit_test(test_neg_and_conj_combination),
        cmocka_unit_test(test_copy_xor_rule),
        cmocka_unit_test(test_copy_neg_and_dtype),
        cmocka_unit_test(test_zero_tensor_through_ops),
        cmocka_unit_test(test_zero_tensor_is_immutable),
        cmocka_unit_test(test_view_ops_keep_the_bit),
        cmocka_unit_test(test_resolve_and_is),
        cmocka_unit_test(test_make_and_materialize),
        cmocka_unit_test(test_counters),
        cmocka_unit_test(test_clone_through_bits_preserves_strides),
        cmocka_unit_test(test_removed_fallback_is_a_clear_error),
        cmocka_unit_test(test_debug_check_catches_bit_at_backend),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
