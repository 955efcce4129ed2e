/* Autocast mode: the three policies on their ops, untouched ops and
 * dtypes, counters, nesting and exit, errors, per-thread state, and Trace
 * showing the _to_copy casts. Values use small integers and dyadic
 * fractions, exact in f16 and bf16, so results compare exactly. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "kv/autocast.h"
#include "kv/kv.h"
#include "kv/trace.h"
#include "test_util.h"

static kv_tensor *mat(const void *v, int64_t r, int64_t c, kv_dtype dt) {
    const int64_t sizes[2] = { r, c };
    kv_tensor *t = kv_tensor_from_data(v, sizes, 2, dt);
    assert_non_null(t);
    return t;
}

static kv_tensor *vec(const void *v, int64_t n, kv_dtype dt) {
    const int64_t sizes[1] = { n };
    kv_tensor *t = kv_tensor_from_data(v, sizes, 1, dt);
    assert_non_null(t);
    return t;
}

/* A tensor of dtype dt holding the doubles v (through a cast from f64). */
static kv_tensor *vec_as(const double *v, int64_t n, kv_dtype dt) {
    kv_tensor *d = vec(v, n, KV_F64);
    kv_tensor *t = kv__to_copy(d, &dt, NULL, NULL, NULL, false, NULL);
    assert_non_null(t);
    kv_tensor_release(d);
    return t;
}

static double at(const kv_tensor *t, int64_t i) {
    int64_t idx[KV_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = i % t->sizes[d];
        i /= t->sizes[d];
    }
    return kv_tensor_get_f64(t, idx);
}

static void expect_values(const kv_tensor *t, const double *want, int n) {
    assert_int_equal(kv_tensor_numel(t), n);
    for (int i = 0; i < n; i++) assert_true(at(t, i) == want[i]);
}

static bool ac_included(void) { return kv_keyset_has(kv_tls_get().included, KV_KEY_AUTOCAST); }

/* a = [[1, 2, 3], [4, 5, 6]], b = [[1, 0], [0.5, 1], [-1, 2]]
 * a @ b = [[1 + 1 - 3, 0 + 2 + 6], [4 + 2.5 - 6, 0 + 5 + 12]] = [[-1, 8], [0.5, 17]] */
static const float A[6] = { 1, 2, 3, 4, 5, 6 };
static const float B[6] = { 1, 0, 0.5f, 1, -1, 2 };
static const double AB[4] = { -1, 8, 0.5, 17 };

/* ---- lower precision ---- */

static void test_mm_f16(void **state) {
    (void)state;
    kv_tensor *a = mat(A, 2, 3, KV_F32), *b = mat(B, 3, 2, KV_F32);
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *c = kv_mm(a, b);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_non_null(c);
    assert_int_equal(c->dtype, KV_F16);
    expect_values(c, AB, 4);
    /* Inputs are not touched: the casts are new tensors. */
    assert_int_equal(a->dtype, KV_F32);
    assert_int_equal(b->dtype, KV_F32);
    const kv_autocast_counters k = kv_autocast_counters_get();
    assert_int_equal(k.casts, 2);
    assert_int_equal(k.casts_lower, 2);
    assert_int_equal(k.casts_fp32, 0);
    assert_int_equal(k.casts_promote, 0);
    assert_int_equal(k.calls, 1);
    kv_tensor_release(c);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static void test_mm_bf16_and_addmm_bmm(void **state) {
    (void)state;
    kv_tensor *a = mat(A, 2, 3, KV_F32), *b = mat(B, 3, 2, KV_F32);
    const double biasv[4] = { 1, 1, 1, 1 };
    kv_tensor *bias = vec_as(biasv, 4, KV_F64);
    const int64_t s22[2] = { 2, 2 };
    kv_tensor *bias2 = kv_view(bias, (kv_int_list){ s22, 2 });
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_BF16), KV_OK);
    kv_tensor *c = kv_mm(a, b);
    /* f64 inputs are cast too (the list: f32/f64). */
    kv_tensor *d = kv_addmm(bias2, a, b, kv_scalar_int(1), kv_scalar_int(1));
    const int64_t s123[3] = { 1, 2, 3 }, s132[3] = { 1, 3, 2 };
    kv_tensor *a3 = kv_view(a, (kv_int_list){ s123, 3 }), *b3 = kv_view(b, (kv_int_list){ s132, 3 });
    kv_tensor *e = kv_bmm(a3, b3);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_non_null(c);
    assert_non_null(d);
    assert_non_null(e);
    assert_int_equal(c->dtype, KV_BF16);
    assert_int_equal(d->dtype, KV_BF16);
    assert_int_equal(e->dtype, KV_BF16);
    expect_values(c, AB, 4);
    expect_values(e, AB, 4);
    const double ab1[4] = { 0, 9, 1.5, 18 };
    expect_values(d, ab1, 4);
    assert_int_equal(kv_autocast_counters_get().casts_lower, 2 + 3 + 2);
    kv_tensor_release(e);
    kv_tensor_release(a3);
    kv_tensor_release(b3);
    kv_tensor_release(d);
    kv_tensor_release(c);
    kv_tensor_release(bias2);
    kv_tensor_release(bias);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* Already in the autocast dtype: nothing to cast. */
static void test_mm_already_lower(void **state) {
    (void)state;
    const double av[4] = { 1, 2, 3, 4 };
    kv_tensor *a = vec_as(av, 4, KV_F16);
    const int64_t s22[2] = { 2, 2 };
    kv_tensor *a2 = kv_view(a, (kv_int_list){ s22, 2 });
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *c = kv_mm(a2, a2);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(c->dtype, KV_F16);
    const double want[4] = { 7, 10, 15, 22 };
    expect_values(c, want, 4);
    assert_int_equal(kv_autocast_counters_get().casts, 0);
    assert_int_equal(kv_autocast_counters_get().calls, 1);
    kv_tensor_release(c);
    kv_tensor_release(a2);
    kv_tensor_release(a);
}

/* ---- fp32 ---- */

static void test_softmax_f16_gives_f32(void **state) {
    (void)state;
    const double xv[4] = { 0, 0, 0, 0 };
    kv_tensor *x = vec_as(xv, 4, KV_F16);
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *s = kv__softmax(x, 0, false);
    /* half_to_float=true asks for f32 out: still fine once cast. */
    kv_tensor *s2 = kv__softmax(x, 0, true);
    kv_tensor *l = kv__log_softmax(x, 0, false);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_non_null(s);
    assert_non_null(s2);
    assert_non_null(l);
    assert_int_equal(s->dtype, KV_F32);
    assert_int_equal(s2->dtype, KV_F32);
    assert_int_equal(l->dtype, KV_F32);
    const double quarter[4] = { 0.25, 0.25, 0.25, 0.25 };
    expect_values(s, quarter, 4);
    expect_values(s2, quarter, 4);
    assert_int_equal(kv_autocast_counters_get().casts_fp32, 3);
    kv_tensor_release(l);
    kv_tensor_release(s2);
    kv_tensor_release(s);
    kv_tensor_release(x);
}

static void test_fp32_ops(void **state) {
    (void)state;
    const double xv[4] = { 1, 2, 3, 4 };
    kv_tensor *h = vec_as(xv, 4, KV_BF16), *d = vec_as(xv, 4, KV_F64);
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_BF16), KV_OK);
    const int64_t dim0[1] = { 0 };
    const kv_int_list dims = { dim0, 1 };
    kv_tensor *sm = kv_sum(h, &dims, false, NULL);
    kv_tensor *mn = kv_mean(h, &dims, false, NULL);
    kv_tensor *pw = kv_pow(h, kv_scalar_int(2));
    kv_tensor *ex = kv_exp(h);
    kv_tensor *lg = kv_log(h);
    kv_tensor *ed = kv_exp(d); /* f64 stays f64 */
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(sm->dtype, KV_F32);
    assert_int_equal(mn->dtype, KV_F32);
    assert_int_equal(pw->dtype, KV_F32);
    assert_int_equal(ex->dtype, KV_F32);
    assert_int_equal(lg->dtype, KV_F32);
    assert_int_equal(ed->dtype, KV_F64);
    assert_true(at(sm, 0) == 10.0);
    assert_true(at(mn, 0) == 2.5);
    const double sq[4] = { 1, 4, 9, 16 };
    expect_values(pw, sq, 4);
    assert_true(at(lg, 0) == 0.0);
    assert_int_equal(kv_autocast_counters_get().casts_fp32, 5);
    assert_int_equal(kv_autocast_counters_get().casts, 5);
    kv_tensor_release(sm);
    kv_tensor_release(mn);
    kv_tensor_release(pw);
    kv_tensor_release(ex);
    kv_tensor_release(lg);
    kv_tensor_release(ed);
    kv_tensor_release(h);
    kv_tensor_release(d);
}

static void test_layer_norm_f16(void **state) {
    (void)state;
    /* Each row [1, 3] normalizes to [-1, 1] (mean 2, variance 1). */
    const double xv[4] = { 1, 3, 1, 3 };
    kv_tensor *x1 = vec_as(xv, 4, KV_F16);
    const int64_t s22[2] = { 2, 2 }, norm[1] = { 2 };
    kv_tensor *x = kv_view(x1, (kv_int_list){ s22, 2 });
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *o0 = NULL, *o1 = NULL, *o2 = NULL;
    assert_int_equal(kv_native_layer_norm(x, (kv_int_list){ norm, 1 }, NULL, NULL, 0.0, &o0, &o1, &o2), KV_OK);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(o0->dtype, KV_F32);
    const double want[4] = { -1, 1, -1, 1 };
    expect_values(o0, want, 4);
    assert_int_equal(kv_autocast_counters_get().casts_fp32, 1);
    kv_tensor_release(o0);
    kv_tensor_release(o1);
    kv_tensor_release(o2);
    kv_tensor_release(x);
    kv_tensor_release(x1);
}

/* ---- promote ---- */

static void test_cat_promotes(void **state) {
    (void)state;
    const double hv[2] = { 1, 2 }, fv[2] = { 0.5, -3 };
    kv_tensor *h = vec_as(hv, 2, KV_F16), *f = vec(fv, 2, KV_F64);
    kv_tensor *f32 = vec_as(fv, 2, KV_F32), *b = vec_as(fv, 2, KV_BF16);
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *items[2] = { h, f32 };
    kv_tensor *c = kv_cat((kv_tensor_list){ items, 2 }, 0);
    kv_tensor *items2[2] = { h, b }; /* f16 + bf16 -> f32 */
    kv_tensor *c2 = kv_stack_op((kv_tensor_list){ items2, 2 }, 0);
    kv_tensor *items3[3] = { h, h, f }; /* widest is f64 */
    kv_tensor *c3 = kv_cat((kv_tensor_list){ items3, 3 }, 0);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_non_null(c);
    assert_non_null(c2);
    assert_non_null(c3);
    assert_int_equal(c->dtype, KV_F32);
    assert_int_equal(c2->dtype, KV_F32);
    assert_int_equal(c3->dtype, KV_F64);
    const double wc[4] = { 1, 2, 0.5, -3 };
    expect_values(c, wc, 4);
    expect_values(c2, wc, 4);
    const double wc3[6] = { 1, 2, 1, 2, 0.5, -3 };
    expect_values(c3, wc3, 6);
    /* cat: h; stack: h and b; cat3: h twice. */
    assert_int_equal(kv_autocast_counters_get().casts_promote, 1 + 2 + 2);
    kv_tensor_release(c);
    kv_tensor_release(c2);
    kv_tensor_release(c3);
    kv_tensor_release(h);
    kv_tensor_release(f);
    kv_tensor_release(f32);
    kv_tensor_release(b);
}

static void test_where_promotes_not_condition(void **state) {
    (void)state;
    const bool cv[2] = { true, false };
    const double av[2] = { 1, 2 }, bv[2] = { 3, 4 };
    kv_tensor *cond = vec(cv, 2, KV_BOOL), *a = vec_as(av, 2, KV_F16), *b = vec_as(bv, 2, KV_F32);
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *w = kv_where(cond, a, b);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(w->dtype, KV_F32);
    const double want[2] = { 1, 4 };
    expect_values(w, want, 2);
    assert_int_equal(kv_autocast_counters_get().casts, 1); /* only a */
    assert_int_equal(cond->dtype, KV_BOOL);
    kv_tensor_release(w);
    kv_tensor_release(cond);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* ---- untouched ---- */

static void test_untouched_ops_and_dtypes(void **state) {
    (void)state;
    const kv_op *neg = kv_op_find("neg"), *mm = kv_op_find("mm");
    assert_int_equal(kv_op_entry_kind(neg, KV_KEY_AUTOCAST), KV_ENTRY_FALLTHROUGH);
    assert_int_equal(kv_op_entry_kind(mm, KV_KEY_AUTOCAST), KV_ENTRY_KERNEL);
    assert_int_equal(kv_autocast_policy_of("mm"), KV_AUTOCAST_LOWER);
    assert_int_equal(kv_autocast_policy_of("exp"), KV_AUTOCAST_FP32);
    assert_int_equal(kv_autocast_policy_of("where.self"), KV_AUTOCAST_PROMOTE);
    assert_int_equal(kv_autocast_policy_of("neg"), KV_AUTOCAST_NONE);
    assert_string_equal(kv_autocast_policy_name(KV_AUTOCAST_FP32), "fp32");

    const float fv[2] = { 1, -2 };
    const int64_t iv[4] = { 1, 2, 3, 4 };
    const double cv[2] = { 1, 2 };
    kv_tensor *f = vec(fv, 2, KV_F32);
    kv_tensor *i = mat(iv, 2, 2, KV_I64);
    kv_tensor *c = vec_as(cv, 2, KV_C64);
    const double hv[2] = { 7, 8 };
    kv_tensor *h = vec_as(hv, 2, KV_F16);
    const int32_t i32v[2] = { 5, 6 };
    kv_tensor *i32 = vec(i32v, 2, KV_I32);
    kv_autocast_counters_reset();
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *n = kv_neg(f);       /* not on a list */
    kv_tensor *im = kv_mm(i, i);    /* integer inputs of a lower op */
    kv_tensor *ce = kv_exp(c);      /* complex input of an fp32 op */
    kv_tensor *items[2] = { i32, h };
    kv_tensor *cat = kv_cat((kv_tensor_list){ items, 2 }, 0); /* only one floating dtype */
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(n->dtype, KV_F32);
    assert_int_equal(im->dtype, KV_I64);
    assert_int_equal(ce->dtype, KV_C64);
    assert_int_equal(cat->dtype, KV_F16); /* cat's own promotion */
    const double wim[4] = { 7, 10, 15, 22 };
    expect_values(im, wim, 4);
    const double wcat[4] = { 5, 6, 7, 8 };
    expect_values(cat, wcat, 4);
    const kv_autocast_counters k = kv_autocast_counters_get();
    assert_int_equal(k.casts, 0);
    assert_int_equal(k.calls, 3); /* mm, exp, cat ran the kernel; neg did not */
    kv_tensor_release(cat);
    kv_tensor_release(ce);
    kv_tensor_release(im);
    kv_tensor_release(n);
    kv_tensor_release(i32);
    kv_tensor_release(h);
    kv_tensor_release(c);
    kv_tensor_release(i);
    kv_tensor_release(f);
}

/* ---- the mode ---- */

static void test_enter_exit_nesting(void **state) {
    (void)state;
    assert_false(kv_autocast_active());
    assert_false(ac_included());
    assert_int_equal(kv_autocast_dtype(), KV_DTYPE_COUNT);
    kv_error_clear();
    assert_int_equal(kv_autocast_enter(KV_F32), KV_ERR_DTYPE);
    assert_non_null(strstr(kv_last_error_message(), "f32"));
    assert_int_equal(kv_autocast_enter((kv_dtype)99), KV_ERR_DTYPE);
    assert_int_equal(kv_autocast_exit(), KV_ERR_INVALID_ARG);
    assert_false(ac_included());

    kv_tensor *a = mat(A, 2, 3, KV_F32), *b = mat(B, 3, 2, KV_F32);
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    assert_true(ac_included());
    assert_int_equal(kv_autocast_enter(KV_BF16), KV_OK);
    assert_int_equal(kv_autocast_depth(), 2);
    kv_tensor *c1 = kv_mm(a, b);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_true(ac_included());
    assert_int_equal(kv_autocast_dtype(), KV_F16);
    kv_tensor *c2 = kv_mm(a, b);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_false(ac_included());
    kv_tensor *c3 = kv_mm(a, b);
    assert_int_equal(c1->dtype, KV_BF16);
    assert_int_equal(c2->dtype, KV_F16);
    assert_int_equal(c3->dtype, KV_F32); /* exit restores */
    expect_values(c3, AB, 4);
    kv_tensor_release(c1);
    kv_tensor_release(c2);
    kv_tensor_release(c3);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* A bad call fails like it does outside the mode and leaks no cast. */
static void test_error_no_leak(void **state) {
    (void)state;
    kv_tensor *a = mat(A, 2, 3, KV_F32);
    assert_null(kv_mm(a, a));
    const kv_status want = kv_last_error();
    assert_int_not_equal(want, KV_OK);
    const kv_allocator_stats before = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    assert_null(kv_mm(a, a));
    assert_int_equal(kv_last_error(), want);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    const kv_allocator_stats after = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(after.live_count, before.live_count);
    assert_int_equal(after.live_bytes, before.live_bytes);
    kv_tensor_release(a);
}

static void *thread_mm(void *p) {
    kv_dtype *out = p;
    const int64_t sa[2] = { 2, 3 }, sb[2] = { 3, 2 };
    kv_tensor *a = kv_tensor_from_data(A, sa, 2, KV_F32), *b = kv_tensor_from_data(B, sb, 2, KV_F32);
    kv_tensor *c = kv_mm(a, b);
    out[0] = c ? c->dtype : KV_DTYPE_COUNT;
    out[1] = kv_autocast_active() ? KV_F16 : KV_DTYPE_COUNT;
    kv_tensor_release(c);
    kv_tensor_release(a);
    kv_tensor_release(b);
    return NULL;
}

static void test_per_thread(void **state) {
    (void)state;
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_autocast_counters_reset();
    kv_dtype got[2] = { KV_BOOL, KV_BOOL };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_mm, got), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(got[0], KV_F32); /* the other thread is not in the mode */
    assert_int_equal(got[1], KV_DTYPE_COUNT);
    assert_int_equal(kv_autocast_counters_get().casts, 0);
}

/* ---- with Trace: the casts are ordinary ops below Autocast ---- */

static void test_trace_shows_casts(void **state) {
    (void)state;
    kv_tensor *a = mat(A, 2, 3, KV_F32), *b = mat(B, 3, 2, KV_F32);
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    assert_int_equal(kv_autocast_enter(KV_F16), KV_OK);
    kv_tensor *c = kv_mm(a, b);
    kv_tensor *n = kv_neg(c);
    assert_int_equal(kv_autocast_exit(), KV_OK);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    char buf[256];
    kv_trace_recorder_format(r, buf, sizeof buf);
    assert_string_equal(buf, "_to_copy, _to_copy, mm, neg");
    for (int i = 0; i < 2; i++) {
        const kv_trace_entry *e = kv_trace_recorder_entry(r, i);
        assert_int_equal(e->in_dtype, KV_F32);
        assert_int_equal(e->out_dtype, KV_F16);
    }
    const kv_trace_entry *m = kv_trace_recorder_entry(r, 2);
    assert_int_equal(m->in_dtype, KV_F16);
    assert_int_equal(m->out_dtype, KV_F16);
    /* Trace is below Autocast: the key set it sees has no Autocast bit. */
    assert_true(m->ks == (kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_TRACE)));
    assert_int_equal(n->dtype, KV_F16);
    kv_trace_recorder_free(r);
    kv_tensor_release(n);
    kv_tensor_release(c);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static int teardown(void **state) {
    (void)state;
    while (kv_autocast_active()) kv_autocast_exit();
    while (kv_trace_depth() > 0) kv_trace_pop();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_mm_f16, teardown),
        cmocka_unit_test_teardown(test_mm_bf16_and_addmm_bmm, teardown),
        cmocka_unit_test_teardown(test_mm_already_lower, teardown),
        cmocka_unit_test_teardown(test_softmax_f16_gives_f32, teardown),
        cmocka_unit_test_teardown(test_fp32_ops, teardown),
        cmocka_unit_test_teardown(test_layer_norm_f16, teardown),
        cmocka_unit_test_teardown(test_cat_promotes, teardown),
        cmocka_unit_test_teardown(test_where_promotes_not_condition, teardown),
        cmocka_unit_test_teardown(test_untouched_ops_and_dtypes, teardown),
        cmocka_unit_test_teardown(test_enter_exit_nesting, teardown),
        cmocka_unit_test_teardown(test_error_no_leak, teardown),
        cmocka_unit_test_teardown(test_per_thread, teardown),
        cmocka_unit_test_teardown(test_trace_shows_casts, teardown),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
