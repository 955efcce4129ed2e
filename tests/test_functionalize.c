/* Functionalize mode: each in-place op gives the values it gives outside
 * the mode, runs as its functional op plus a copy back (graph dump and
 * Trace prove it), fails like the in-place op on bad input, and the mode
 * nests, exits and releases what the graph held. Test ops are kvfz_*. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kv/functionalize.h"
#include "kv/kv.h"
#include "kv/trace.h"
#include "test_util.h"

static kv_tensor *vec(const void *v, int64_t n, kv_dtype dt) {
    const int64_t sizes[1] = { n };
    kv_tensor *t = kv_tensor_from_data(v, sizes, 1, dt);
    assert_non_null(t);
    return t;
}

static double at1(const kv_tensor *t, int64_t i) { return kv_tensor_get_f64(t, &i); }

static void expect_values(const kv_tensor *t, const double *want, int n) {
    assert_int_equal(kv_tensor_numel(t), n);
    for (int i = 0; i < n; i++) {
        const double got = at1(t, i);
        if (isnan(want[i])) assert_true(isnan(got));
        else assert_true(got == want[i]);
    }
}

static void expect_graph(const char *want) {
    char buf[1024];
    kv_functionalize_graph_format(buf, sizeof buf);
    assert_string_equal(buf, want);
}

static bool fz_included(void) { return kv_keyset_has(kv_tls_get().included, KV_KEY_FUNCTIONALIZE); }

/* ---- add_, mul_ ---- */

static void test_add_(void **state) {
    (void)state;
    const float xv[3] = { 1, 2, 3 }, yv[3] = { 10, 20, 30 };
    kv_tensor *x = vec(xv, 3, KV_F32), *y = vec(yv, 3, KV_F32);
    const double want[3] = { 21, 42, 63 }; /* x + 2y */
    /* Outside the mode (the reference behaviour). */
    kv_tensor *x0 = vec(xv, 3, KV_F32);
    const int64_t v0 = kv_tensor_version(x0);
    assert_int_equal(kv_add_(x0, y, kv_scalar_int(2)), KV_OK);
    expect_values(x0, want, 3);
    assert_int_equal(kv_tensor_version(x0), v0 + 1);

    const int64_t v = kv_tensor_version(x);
    const int refs = atomic_load(&x->refcount);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_add_(x, y, kv_scalar_int(2)), KV_OK);
    assert_int_equal(kv_functionalize_value_id(x), 0);
    assert_int_equal(kv_functionalize_value_id(y), 1);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    expect_values(x, want, 3);
    assert_int_equal(kv_tensor_version(x), v + 1); /* one write, as in place */
    assert_int_equal(atomic_load(&x->refcount), refs); /* the graph let go */
    expect_graph("%2 = add.Tensor(%0, %1); copy_(%0, %2)");
    assert_int_equal(kv_functionalize_graph_count(), 2);
    assert_string_equal(kv_functionalize_graph_op(0), "add.Tensor");
    assert_string_equal(kv_functionalize_graph_op(1), "copy_");
    assert_int_equal(kv_functionalize_graph_ninputs(0), 2);
    assert_int_equal(kv_functionalize_graph_noutputs(0), 1);
    assert_int_equal(kv_functionalize_graph_output(0, 0), 2);
    assert_int_equal(kv_functionalize_graph_input(1, 0), 0);
    assert_int_equal(kv_functionalize_graph_input(1, 1), 2);
    assert_int_equal(kv_functionalize_graph_noutputs(1), 0);
    assert_null(kv_functionalize_graph_op(2));
    assert_int_equal(kv_functionalize_graph_ninputs(-1), -1);
    assert_int_equal(kv_functionalize_graph_input(0, 5), -1);
    kv_tensor_release(x0);
    kv_tensor_release(x);
    kv_tensor_release(y);
}

static void test_mul_(void **state) {
    (void)state;
    const int32_t xv[4] = { 1, -2, 3, 100000 }, yv[4] = { 5, 6, -7, 100000 };
    kv_tensor *x = vec(xv, 4, KV_I32), *y = vec(yv, 4, KV_I32);
    /* 1e10 wraps in i32: 10^10 mod 2^32 = 1410065408. */
    const double want[4] = { 5, -12, -21, 1410065408.0 };
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_mul_(x, y), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    expect_values(x, want, 4);
    assert_int_equal(x->dtype, KV_I32);
    expect_graph("%2 = mul.Tensor(%0, %1); copy_(%0, %2)");
    kv_tensor_release(x);
    kv_tensor_release(y);
}

/* self += other with other broadcast, self a strided view into a base. */
static void test_add_into_view(void **state) {
    (void)state;
    const float bv[6] = { 1, 2, 3, 4, 5, 6 }, ov[1] = { 100 };
    const int64_t sb[2] = { 2, 3 };
    kv_tensor *base = kv_tensor_from_data(bv, sb, 2, KV_F32);
    kv_tensor *col = kv_select(base, 1, 1); /* [2, 5], stride 3 */
    kv_tensor *o = vec(ov, 1, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_add_(col, o, kv_scalar_int(1)), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    const double want[6] = { 1, 102, 3, 4, 105, 6 };
    for (int i = 0; i < 6; i++) {
        const int64_t idx[2] = { i / 3, i % 3 };
        assert_true(kv_tensor_get_f64(base, idx) == want[i]);
    }
    kv_tensor_release(o);
    kv_tensor_release(col);
    kv_tensor_release(base);
}

/* ---- clamp_ ---- */

static void test_clamp_(void **state) {
    (void)state;
    const float xv[5] = { -2.0f, 0.5f, 3.0f, NAN, -0.0f };
    const float lov[5] = { 0, 0, 0, 0, 0 }, hiv[5] = { 1, 1, 1, 1, 1 };
    kv_tensor *x = vec(xv, 5, KV_F32), *lo = vec(lov, 5, KV_F32), *hi = vec(hiv, 5, KV_F32);
    kv_tensor *x0 = vec(xv, 5, KV_F32);
    const double want[5] = { 0, 0.5, 1, NAN, -0.0 };
    assert_int_equal(kv_clamp_(x0, lo, hi), KV_OK);
    expect_values(x0, want, 5);

    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_clamp_(x, lo, hi), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    expect_values(x, want, 5);
    /* -0 clamped to [+0, 1] keeps its sign in both. */
    assert_true(signbit(at1(x, 4)) && signbit(at1(x0, 4)));
    expect_graph("%3 = clamp.Tensor(%0, %1, %2); copy_(%0, %3)");

    /* Only a max bound: the absent min prints as None. */
    kv_tensor *y = vec(xv, 5, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_clamp_(y, NULL, hi), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    const double want_hi[5] = { -2, 0.5, 1, NAN, -0.0 };
    expect_values(y, want_hi, 5);
    expect_graph("%2 = clamp.Tensor(%0, None, %1); copy_(%0, %2)");

    /* Both absent: the op's own error. */
    kv_error_clear();
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_clamp_(y, NULL, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "at least one of 'min' or 'max'"));
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_int_equal(kv_clamp_(y, NULL, NULL), KV_ERR_INVALID_ARG);

    kv_tensor_release(y);
    kv_tensor_release(x0);
    kv_tensor_release(x);
    kv_tensor_release(lo);
    kv_tensor_release(hi);
}

/* The functional twin on its own. */
static void test_clamp_Tensor_op(void **state) {
    (void)state;
    const int64_t xv[4] = { -5, 0, 5, 10 }, lov[1] = { -1 }, hiv[4] = { 1, 1, 3, -100 };
    kv_tensor *x = vec(xv, 4, KV_I64), *lo = vec(lov, 1, KV_I64), *hi = vec(hiv, 4, KV_I64);
    kv_tensor *r = kv_clamp_Tensor(x, lo, hi);
    assert_non_null(r);
    assert_int_equal(r->dtype, KV_I64);
    const double want[4] = { -1, 0, 3, -100 }; /* lo > hi gives hi */
    expect_values(r, want, 4);
    assert_null(kv_clamp_Tensor(x, NULL, NULL));
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    const int64_t bad_sizes[1] = { 3 };
    kv_tensor *bad = kv_tensor_empty(bad_sizes, 1, KV_I64, KV_DEVICE_CPU0);
    assert_null(kv_clamp_Tensor(x, bad, NULL));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    kv_tensor_release(bad);
    kv_tensor_release(r);
    kv_tensor_release(x);
    kv_tensor_release(lo);
    kv_tensor_release(hi);
}

/* ---- fill_, zero_ ---- */

static void test_fill_zero_(void **state) {
    (void)state;
    const double xv[3] = { 1, 2, 3 };
    kv_tensor *x = vec(xv, 3, KV_F64);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_fill_(x, kv_scalar_double(7.5)), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    const double sevens[3] = { 7.5, 7.5, 7.5 };
    expect_values(x, sevens, 3);
    expect_graph("%1 = full(); copy_(%0, %1)");

    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_zero_(x), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    const double zeros[3] = { 0, 0, 0 };
    expect_values(x, zeros, 3);
    expect_graph("%1 = zeros(); copy_(%0, %1)");
    assert_int_equal(x->dtype, KV_F64);

    /* An expanded self (stride 0) is fine for fill_, as in place. */
    const float one[1] = { 1 };
    kv_tensor *b = vec(one, 1, KV_F32);
    const int64_t to[2] = { 4, 3 };
    kv_tensor *e = kv_expand(b, (kv_int_list){ to, 2 }, false);
    assert_non_null(e);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_fill_(e, kv_scalar_int(-3)), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_true(at1(b, 0) == -3.0);
    /* A value that does not fit self's dtype: an error, like in place. */
    const uint8_t u[2] = { 1, 2 };
    kv_tensor *xu = vec(u, 2, KV_U8);
    assert_int_equal(kv_fill_(xu, kv_scalar_int(300)), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_fill_(xu, kv_scalar_int(300)), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_true(at1(xu, 0) == 1.0 && at1(xu, 1) == 2.0);

    kv_tensor_release(xu);
    kv_tensor_release(e);
    kv_tensor_release(b);
    kv_tensor_release(x);
}

/* ---- copy_ ---- */

static void test_copy_(void **state) {
    (void)state;
    const float dv[3] = { 0, 0, 0 };
    const int64_t sv[3] = { 4, -5, 6 };
    kv_tensor *d = vec(dv, 3, KV_F32), *s = vec(sv, 3, KV_I64);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_copy_(d, s, false), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    const double want[3] = { 4, -5, 6 };
    expect_values(d, want, 3);
    assert_int_equal(d->dtype, KV_F32);
    expect_graph("%2 = _to_copy(%1); copy_(%0, %2)");

    /* Broadcast: [3] into [2, 3]. */
    const float bv[6] = { 0 };
    const int64_t s23[2] = { 2, 3 };
    kv_tensor *big = kv_tensor_from_data(bv, s23, 2, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_copy_(big, s, false), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    for (int i = 0; i < 6; i++) {
        const int64_t idx[2] = { i / 3, i % 3 };
        assert_true(kv_tensor_get_f64(big, idx) == want[i % 3]);
    }
    expect_graph("%2 = _to_copy(%1); %3 = expand(%2); copy_(%0, %3)");

    /* Not broadcastable: the copy_ error, in and out of the mode. */
    const float four[4] = { 1, 2, 3, 4 };
    kv_tensor *s4 = vec(four, 4, KV_F32);
    assert_int_equal(kv_copy_(d, s4, false), KV_ERR_SHAPE);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_copy_(d, s4, false), KV_ERR_SHAPE);
    assert_non_null(strstr(kv_last_error_message(), "copy_"));
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    expect_values(d, want, 3);

    kv_tensor_release(s4);
    kv_tensor_release(big);
    kv_tensor_release(d);
    kv_tensor_release(s);
}

/* ---- errors are the in-place op's ---- */

static void test_inplace_errors(void **state) {
    (void)state;
    const int64_t iv[3] = { 1, 2, 3 };
    const float fv[3] = { 0.5f, 0.5f, 0.5f };
    const float f6[6] = { 1, 1, 1, 1, 1, 1 };
    const int64_t s23[2] = { 2, 3 };
    kv_tensor *xi = vec(iv, 3, KV_I64), *yf = vec(fv, 3, KV_F32);
    kv_tensor *xf = vec(fv, 3, KV_F32), *y23 = kv_tensor_from_data(f6, s23, 2, KV_F32);

    for (int mode = 0; mode < 2; mode++) {
        if (mode) assert_int_equal(kv_functionalize_enter(), KV_OK);
        /* i64 += f32: the result type can't be cast back. */
        assert_int_equal(kv_add_(xi, yf, kv_scalar_int(1)), KV_ERR_DTYPE);
        assert_non_null(strstr(kv_last_error_message(), "add_.Tensor"));
        /* [3] += [2, 3]: the broadcast shape is not self's. */
        assert_int_equal(kv_mul_(xf, y23), KV_ERR_SHAPE);
        assert_non_null(strstr(kv_last_error_message(), "mul_.Tensor"));
        if (mode) assert_int_equal(kv_functionalize_exit(), KV_OK);
    }
    const double wi[3] = { 1, 2, 3 }, wf[3] = { 0.5, 0.5, 0.5 };
    expect_values(xi, wi, 3);
    expect_values(xf, wf, 3);

    /* Writing through an expanded self: an overlap error both ways. */
    const float one[1] = { 2 };
    kv_tensor *b = vec(one, 1, KV_F32);
    const int64_t to[1] = { 3 };
    kv_tensor *e = kv_expand(b, (kv_int_list){ to, 1 }, false);
    assert_int_equal(kv_add_(e, xf, kv_scalar_int(1)), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_add_(e, xf, kv_scalar_int(1)), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "single memory location"));
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_true(at1(b, 0) == 2.0);

    kv_tensor_release(e);
    kv_tensor_release(b);
    kv_tensor_release(xi);
    kv_tensor_release(yf);
    kv_tensor_release(xf);
    kv_tensor_release(y23);
}

/* ---- other ops pass through ---- */

static void test_non_inplace_passthrough(void **state) {
    (void)state;
    const float xv[2] = { 1, -4 };
    kv_tensor *x = vec(xv, 2, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    kv_tensor *n = kv_neg(x);
    kv_tensor *a = kv_abs(n);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    const double wn[2] = { -1, 4 }, wa[2] = { 1, 4 }, wx[2] = { 1, -4 };
    expect_values(n, wn, 2);
    expect_values(a, wa, 2);
    expect_values(x, wx, 2);
    expect_graph("%1 = neg(%0); %2 = abs(%1)");
    kv_tensor_release(a);
    kv_tensor_release(n);
    kv_tensor_release(x);
}

/* A tuple-returning op and a tensor list. */
static void test_multi_io_nodes(void **state) {
    (void)state;
    const float xv[4] = { 1, 2, 3, 4 };
    const int64_t s22[2] = { 2, 2 };
    kv_tensor *x = kv_tensor_from_data(xv, s22, 2, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    kv_tensor *items[2] = { x, x };
    kv_tensor *c = kv_cat((kv_tensor_list){ items, 2 }, 0);
    assert_non_null(c);
    const int64_t norm[1] = { 2 };
    kv_tensor *o0 = NULL, *o1 = NULL, *o2 = NULL;
    assert_int_equal(kv_native_layer_norm(x, (kv_int_list){ norm, 1 }, NULL, NULL, 1e-5, &o0, &o1, &o2), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    expect_graph("%1 = cat(%0, %0); %2, %3, %4 = native_layer_norm(%0, None, None)");
    kv_tensor_release(o0);
    kv_tensor_release(o1);
    kv_tensor_release(o2);
    kv_tensor_release(c);
    kv_tensor_release(x);
}

/* ---- an in-place op without a row ---- */

static kv_status kvfz_scale_cpu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}

static void test_unknown_inplace_op(void **state) {
    (void)state;
    const kv_op *op = NULL;
    assert_int_equal(kv_op_register("kvfz_scale_(Tensor(a!) self) -> Tensor(a!)", &op), KV_OK);
    assert_int_equal(kv_register_kernel("kvfz_scale_", KV_KEY_CPU, kvfz_scale_cpu), KV_OK);
    assert_null(kv_functionalize_functional_op("kvfz_scale_"));
    const float xv[1] = { 1 };
    kv_tensor *x = vec(xv, 1, KV_F32);
    kv_ivalue slots[1];
    kv_stack st = kv_stack_on(slots, 1);
    kv_push_tensor(&st, x);
    assert_int_equal(kv_call(op, &st), KV_OK); /* fine outside the mode */
    kv_stack_clear_returns(&st);

    assert_int_equal(kv_functionalize_enter(), KV_OK);
    st = kv_stack_on(slots, 1);
    kv_push_tensor(&st, x);
    assert_int_equal(kv_call(op, &st), KV_ERR_MISSING_KERNEL);
    assert_non_null(strstr(kv_last_error_message(), "kvfz_scale_"));
    assert_non_null(strstr(kv_last_error_message(), "Functionalize"));
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    kv_tensor_release(x);
}

/* Every in-place op of ops.schema has a row: one added later without a
 * row fails here, not only when someone calls it under the mode. */
static void test_table_covers_schema(void **state) {
    (void)state;
    assert_string_equal(kv_functionalize_functional_op("add_.Tensor"), "add.Tensor");
    assert_string_equal(kv_functionalize_functional_op("mul_.Tensor"), "mul.Tensor");
    assert_string_equal(kv_functionalize_functional_op("clamp_.Tensor"), "clamp.Tensor");
    assert_string_equal(kv_functionalize_functional_op("fill_.Scalar"), "full");
    assert_string_equal(kv_functionalize_functional_op("zero_"), "zeros");
    assert_string_equal(kv_functionalize_functional_op("copy_"), "_to_copy");
    assert_null(kv_functionalize_functional_op("neg"));
    int inplace = 0;
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (kv_op_builtin_id(op) < 0 || !kv_schema_is_inplace(kv_op_schema(op))) continue;
        inplace++;
        const char *f = kv_functionalize_functional_op(kv_op_name(op));
        if (f == NULL) fail_msg("in-place op %s has no functionalize row", kv_op_name(op));
        if (kv_op_find(f) == NULL) fail_msg("%s -> %s: functional op not registered", kv_op_name(op), f);
    }
    assert_true(inplace >= 6);
}

/* ---- the mode: nesting, exit, graph lifetime ---- */

static void test_nesting_and_exit(void **state) {
    (void)state;
    assert_false(kv_functionalize_active());
    assert_false(fz_included());
    kv_error_clear();
    assert_int_equal(kv_functionalize_exit(), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "not on"));

    const float xv[1] = { 3 };
    kv_tensor *x = vec(xv, 1, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_functionalize_depth(), 2);
    assert_true(fz_included());
    kv_tensor *n = kv_neg(x);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_true(fz_included());
    assert_true(kv_functionalize_active());
    kv_tensor *m = kv_neg(n); /* still recorded: one graph for the nest */
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_false(fz_included());
    assert_false(kv_functionalize_active());
    expect_graph("%1 = neg(%0); %2 = neg(%1)");

    /* Outside the mode nothing is recorded; the graph stays readable. */
    kv_tensor *o = kv_neg(x);
    assert_int_equal(kv_functionalize_graph_count(), 2);
    assert_int_equal(kv_functionalize_value_id(x), -1);
    /* A new outermost enter starts an empty graph. */
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_functionalize_graph_count(), 0);
    kv_tensor *p = kv_abs(x);
    expect_graph("%1 = abs(%0)");
    kv_functionalize_graph_clear();
    expect_graph("");
    assert_int_equal(kv_functionalize_value_id(x), -1);
    assert_int_equal(kv_functionalize_exit(), KV_OK);

    kv_tensor_release(p);
    kv_tensor_release(o);
    kv_tensor_release(m);
    kv_tensor_release(n);
    kv_tensor_release(x);
}

/* ---- with Trace: the layer below sees the functional op + copy_ ---- */

static void test_trace_sees_functional_ops(void **state) {
    (void)state;
    const float xv[2] = { 1, 2 }, yv[2] = { 3, 4 };
    kv_tensor *x = vec(xv, 2, KV_F32), *y = vec(yv, 2, KV_F32);
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    assert_int_equal(kv_add_(x, y, kv_scalar_int(1)), KV_OK);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_int_equal(kv_add_(x, y, kv_scalar_int(1)), KV_OK); /* mode off: the in-place op itself */
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    char buf[256];
    kv_trace_recorder_format(r, buf, sizeof buf);
    assert_string_equal(buf, "add.Tensor, copy_, add_.Tensor");
    const kv_keyset want = kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_TRACE);
    for (int i = 0; i < 3; i++) assert_true(kv_trace_recorder_entry(r, i)->ks == want);
    const double w[2] = { 7, 10 };
    expect_values(x, w, 2);
    kv_trace_recorder_free(r);
    kv_tensor_release(x);
    kv_tensor_release(y);
}

/* ---- per thread ---- */

typedef struct thread_out {
    bool active_at_start;
    int count;
} thread_out;

/* Enters the mode and leaves the thread without exiting it: the graph it
 * holds is freed at thread exit (valgrind/ASan see a leak otherwise). */
static void *thread_body(void *p) {
    thread_out *o = p;
    o->active_at_start = kv_functionalize_active();
    const float xv[1] = { 2 };
    const int64_t sizes[1] = { 1 };
    kv_tensor *x = kv_tensor_from_data(xv, sizes, 1, KV_F32);
    kv_functionalize_enter();
    kv_tensor *n = kv_neg(x);
    o->count = kv_functionalize_graph_count();
    kv_tensor_release(n);
    kv_tensor_release(x);
    return NULL;
}

static void test_per_thread(void **state) {
    (void)state;
    const float xv[1] = { 1 };
    kv_tensor *x = vec(xv, 1, KV_F32);
    assert_int_equal(kv_functionalize_enter(), KV_OK);
    kv_tensor *a = kv_abs(x);
    thread_out o = { true, -1 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_body, &o), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(kv_functionalize_exit(), KV_OK);
    assert_false(o.active_at_start);
    assert_int_equal(o.count, 1);
    expect_graph("%1 = abs(%0)"); /* the thread's neg is not here */
    kv_tensor_release(a);
    kv_tensor_release(x);
}

/* A failed assertion must not leave the mode on for the next test. */
static int teardown(void **state) {
    (void)state;
    while (kv_functionalize_active()) kv_functionalize_exit();
    while (kv_trace_depth() > 0) kv_trace_pop();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_add_, teardown),
        cmocka_unit_test_teardown(test_mul_, teardown),
        cmocka_unit_test_teardown(test_add_into_view, teardown),
        cmocka_unit_test_teardown(test_clamp_, teardown),
        cmocka_unit_test_teardown(test_clamp_Tensor_op, teardown),
        cmocka_unit_test_teardown(test_fill_zero_, teardown),
        cmocka_unit_test_teardown(test_copy_, teardown),
        cmocka_unit_test_teardown(test_inplace_errors, teardown),
        cmocka_unit_test_teardown(test_non_inplace_passthrough, teardown),
        cmocka_unit_test_teardown(test_multi_io_nodes, teardown),
        cmocka_unit_test_teardown(test_unknown_inplace_op, teardown),
        cmocka_unit_test_teardown(test_table_covers_schema, teardown),
        cmocka_unit_test_teardown(test_nesting_and_exit, teardown),
        cmocka_unit_test_teardown(test_trace_sees_functional_ops, teardown),
        cmocka_unit_test_teardown(test_per_thread, teardown),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
