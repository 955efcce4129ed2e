/* Trace mode: the callback stack and its TLS key, the fallback's before /
 * after calls, the recorder (names, order, key sets, nesting depth,
 * statuses), nested stacks and per-thread isolation. Test ops are named
 * kvtr_* so they never clash with kernels/ops.schema. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/trace.h"
#include "test_util.h"

static kv_tensor *vec_f32(const float *v, int64_t n) {
    const int64_t sizes[1] = { n };
    kv_tensor *t = kv_tensor_from_data(v, sizes, 1, KV_F32);
    assert_non_null(t);
    return t;
}

static double at1(const kv_tensor *t, int64_t i) { return kv_tensor_get_f64(t, &i); }

static kv_keyset ks2(kv_key a, kv_key b) { return kv_keyset_of(a) | kv_keyset_of(b); }

static bool trace_included(void) { return kv_keyset_has(kv_tls_get().included, KV_KEY_TRACE); }

static void expect_ops(const kv_trace_recorder *r, const char *want) {
    char buf[1024];
    kv_trace_recorder_format(r, buf, sizeof buf);
    assert_string_equal(buf, want);
}

/* ---- the recorder sees exactly the ops called ---- */

static void test_recorder_names_and_order(void **state) {
    (void)state;
    const float xv[3] = { 1, -2, 3 }, yv[3] = { 10, 20, 30 };
    kv_tensor *x = vec_f32(xv, 3), *y = vec_f32(yv, 3);
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_non_null(r);
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    kv_tensor *n = kv_neg(x);
    kv_tensor *s = kv_add(x, y, kv_scalar_int(2));
    kv_tensor *m = kv_mul(s, n);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    assert_non_null(n);
    assert_non_null(s);
    assert_non_null(m);
    /* Tracing must not change results: (x + 2y) * -x. */
    assert_true(at1(m, 0) == -21.0 && at1(m, 1) == 76.0 && at1(m, 2) == -189.0);

    assert_int_equal(kv_trace_recorder_count(r), 3);
    expect_ops(r, "neg, add.Tensor, mul.Tensor");
    for (int i = 0; i < 3; i++) {
        const kv_trace_entry *e = kv_trace_recorder_entry(r, i);
        assert_non_null(e);
        assert_int_equal(e->status, KV_OK);
        assert_int_equal(e->depth, 0);
        assert_int_equal(e->in_dtype, KV_F32);
        assert_int_equal(e->out_dtype, KV_F32);
    }
    assert_null(kv_trace_recorder_entry(r, 3));
    assert_null(kv_trace_recorder_op(r, -1));
    assert_int_equal(kv_trace_recorder_count_op(r, "add.Tensor"), 1);
    assert_int_equal(kv_trace_recorder_count_op(r, "sub.Tensor"), 0);
    assert_int_equal(kv_trace_recorder_find(r, "mul.Tensor", 0), 2);
    assert_int_equal(kv_trace_recorder_find(r, "neg", 1), -1);

    /* After stop nothing more is recorded. */
    kv_tensor *n2 = kv_neg(x);
    assert_int_equal(kv_trace_recorder_count(r), 3);
    kv_trace_recorder_clear(r);
    assert_int_equal(kv_trace_recorder_count(r), 0);
    expect_ops(r, "");

    kv_tensor_release(n2);
    kv_tensor_release(m);
    kv_tensor_release(s);
    kv_tensor_release(n);
    kv_tensor_release(x);
    kv_tensor_release(y);
    kv_trace_recorder_free(r);
}

/* Without autograd or other modes only the forward ops reach Trace, and
 * they arrive with the key set CPU|Trace. */
static void test_recorder_keyset(void **state) {
    (void)state;
    const float xv[2] = { 4, 9 };
    kv_tensor *x = vec_f32(xv, 2);
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    kv_tensor *q = kv_sqrt(x);
    kv_tensor *v = kv_unsqueeze(q, 0);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    assert_non_null(v);
    assert_true(at1(q, 0) == 2.0 && at1(q, 1) == 3.0);
    expect_ops(r, "sqrt, unsqueeze");
    for (int i = 0; i < 2; i++)
        assert_true(kv_trace_recorder_entry(r, i)->ks == ks2(KV_KEY_CPU, KV_KEY_TRACE));
    kv_tensor_release(v);
    kv_tensor_release(q);
    kv_tensor_release(x);
    kv_trace_recorder_free(r);
}

/* ---- push / pop and TLS ---- */

static void noop_cb(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args, const kv_stack *returns,
                    kv_status st) {
    (void)ctx;
    (void)op;
    (void)ks;
    (void)args;
    (void)returns;
    (void)st;
}

static void test_push_pop_tls(void **state) {
    (void)state;
    assert_int_equal(kv_trace_depth(), 0);
    assert_false(trace_included());
    assert_int_equal(kv_trace_push(noop_cb, NULL), KV_OK);
    assert_true(trace_included());
    assert_int_equal(kv_trace_push(noop_cb, NULL), KV_OK);
    assert_int_equal(kv_trace_depth(), 2);
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_true(trace_included());
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_false(trace_included());
    assert_int_equal(kv_trace_depth(), 0);

    kv_error_clear();
    assert_int_equal(kv_trace_pop(), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "empty"));
    assert_int_equal(kv_trace_push(NULL, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "'fn'"));
    assert_false(trace_included());

    /* Another mode's key turned on in between survives the last pop. */
    const kv_keyset other = kv_keyset_of(KV_KEY_AUTOCAST);
    assert_int_equal(kv_trace_push(noop_cb, NULL), KV_OK);
    kv_tls_include_push(other);
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_false(trace_included());
    assert_true(kv_keyset_has(kv_tls_get().included, KV_KEY_AUTOCAST));
    /* Not a LIFO guard any more (the saved state would hold Trace): take
     * just that bit out, as a mode's exit does. */
    kv_tls_keys now = kv_tls_get();
    now.included &= ~other;
    kv_tls_set(now);
    assert_false(kv_keyset_has(kv_tls_get().included, KV_KEY_AUTOCAST));

    /* Trace included by hand before the first push stays included. */
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(kv_trace_push(noop_cb, NULL), KV_OK);
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_true(trace_included());
    kv_tls_pop(saved);
    assert_false(trace_included());
}

static void test_push_limit(void **state) {
    (void)state;
    for (int i = 0; i < KV_TRACE_MAX_DEPTH; i++) assert_int_equal(kv_trace_push(noop_cb, NULL), KV_OK);
    assert_int_equal(kv_trace_push(noop_cb, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "full"));
    assert_int_equal(kv_trace_depth(), KV_TRACE_MAX_DEPTH);
    for (int i = 0; i < KV_TRACE_MAX_DEPTH; i++) assert_int_equal(kv_trace_pop(), KV_OK);
    assert_false(trace_included());
}

static void test_recorder_stop_checks_innermost(void **state) {
    (void)state;
    kv_trace_recorder *a = kv_trace_recorder_new(), *b = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(a), KV_OK);
    assert_int_equal(kv_trace_recorder_start(b), KV_OK);
    assert_int_equal(kv_trace_recorder_stop(a), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "innermost"));
    assert_int_equal(kv_trace_depth(), 2);
    assert_int_equal(kv_trace_recorder_stop(b), KV_OK);
    assert_int_equal(kv_trace_recorder_stop(a), KV_OK);
    assert_int_equal(kv_trace_recorder_stop(a), KV_ERR_INVALID_ARG);
    assert_false(trace_included());
    kv_trace_recorder_free(a);
    kv_trace_recorder_free(b);
}

/* ---- nested stacks: every callback sees the op, innermost first ---- */

#define LOG_MAX 32
typedef struct call_log {
    char what[LOG_MAX][48];
    int n;
} call_log;

typedef struct named_cb {
    call_log *log;
    const char *name;
} named_cb;

static void logging_cb(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args, const kv_stack *returns,
                       kv_status st) {
    (void)ks;
    (void)args;
    const named_cb *c = ctx;
    if (c->log->n < LOG_MAX)
        snprintf(c->log->what[c->log->n], sizeof c->log->what[0], "%s:%s:%s", c->name,
                 returns == NULL && st == KV_OK ? "before" : "after", kv_op_name(op));
    c->log->n++;
}

static void test_nested_stacks(void **state) {
    (void)state;
    const float xv[2] = { 1, 2 };
    kv_tensor *x = vec_f32(xv, 2);
    kv_trace_recorder *outer = kv_trace_recorder_new(), *inner = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(outer), KV_OK);
    kv_tensor *a = kv_neg(x);
    assert_int_equal(kv_trace_recorder_start(inner), KV_OK);
    kv_tensor *b = kv_abs(a);
    assert_int_equal(kv_trace_recorder_stop(inner), KV_OK);
    kv_tensor *c = kv_exp(b);
    assert_int_equal(kv_trace_recorder_stop(outer), KV_OK);
    expect_ops(outer, "neg, abs, exp");
    expect_ops(inner, "abs");

    call_log log = { .n = 0 };
    named_cb o = { &log, "outer" }, i = { &log, "inner" };
    assert_int_equal(kv_trace_push(logging_cb, &o), KV_OK);
    assert_int_equal(kv_trace_push(logging_cb, &i), KV_OK);
    kv_tensor *d = kv_neg(x);
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_int_equal(log.n, 4);
    assert_string_equal(log.what[0], "inner:before:neg");
    assert_string_equal(log.what[1], "outer:before:neg");
    assert_string_equal(log.what[2], "inner:after:neg");
    assert_string_equal(log.what[3], "outer:after:neg");

    kv_tensor_release(d);
    kv_tensor_release(c);
    kv_tensor_release(b);
    kv_tensor_release(a);
    kv_tensor_release(x);
    kv_trace_recorder_free(outer);
    kv_trace_recorder_free(inner);
}

/* ---- what a callback is given ---- */

typedef struct seen {
    int befores, afters;
    int before_nargs, after_nargs, after_nreturns;
    const kv_tensor *before_arg0, *after_arg0;
    kv_dtype ret_dtype;
    kv_status after_status;
    kv_keyset ks;
} seen;

static void capturing_cb(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args, const kv_stack *returns,
                         kv_status st) {
    (void)op;
    seen *s = ctx;
    s->ks = ks;
    if (returns == NULL && st == KV_OK) {
        s->befores++;
        s->before_nargs = args->size;
        s->before_arg0 = kv_arg_tensor(args, 0);
        return;
    }
    s->afters++;
    s->after_nargs = args->size;
    s->after_arg0 = kv_arg_tensor(args, 0);
    s->after_status = st;
    s->after_nreturns = returns ? returns->size : -1;
    s->ret_dtype = returns && returns->size > 0 ? kv_arg_tensor(returns, 0)->dtype : KV_DTYPE_COUNT;
}

static void test_callback_args_and_returns(void **state) {
    (void)state;
    const float xv[2] = { 1, 2 };
    kv_tensor *x = vec_f32(xv, 2);
    seen s = { 0 };
    assert_int_equal(kv_trace_push(capturing_cb, &s), KV_OK);
    kv_tensor *y = kv_add(x, x, kv_scalar_int(1));
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_non_null(y);
    assert_int_equal(s.befores, 1);
    assert_int_equal(s.afters, 1);
    assert_int_equal(s.before_nargs, 3); /* self, other, alpha */
    assert_int_equal(s.after_nargs, 3);
    assert_ptr_equal(s.before_arg0, x);
    assert_ptr_equal(s.after_arg0, x);
    assert_int_equal(s.after_status, KV_OK);
    assert_int_equal(s.after_nreturns, 1);
    assert_int_equal(s.ret_dtype, KV_F32);
    assert_true(s.ks == ks2(KV_KEY_CPU, KV_KEY_TRACE));
    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* A failing op: the after-call has no returns and the op's status; the
 * error the caller sees is the op's, even when a callback calls (and
 * fails) ops itself, which are not traced. */
static void failing_caller_cb(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args,
                              const kv_stack *returns, kv_status st) {
    (void)ctx;
    (void)op;
    (void)ks;
    (void)returns;
    if (st == KV_OK) return;
    kv_tensor *t = kv_arg_tensor(args, 0);
    kv_tensor *bad = kv_squeeze_dim(t, 17); /* fails with its own error */
    assert_null(bad);
    kv_tensor *ok = kv_neg(t);
    kv_tensor_release(ok);
}

static void test_failing_op(void **state) {
    (void)state;
    const float av[6] = { 0 };
    const int64_t sa[2] = { 2, 3 };
    kv_tensor *a = kv_tensor_from_data(av, sa, 2, KV_F32);
    /* Outside the mode, for the expected error. */
    assert_null(kv_mm(a, a));
    const kv_status want = kv_last_error();
    char want_msg[512];
    snprintf(want_msg, sizeof want_msg, "%s", kv_last_error_message());
    assert_int_not_equal(want, KV_OK);

    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    assert_int_equal(kv_trace_push(failing_caller_cb, NULL), KV_OK);
    kv_error_clear();
    assert_null(kv_mm(a, a));
    assert_int_equal(kv_last_error(), want);
    assert_string_equal(kv_last_error_message(), want_msg);
    assert_int_equal(kv_trace_pop(), KV_OK);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    /* Only mm: the callback's squeeze/neg ran with Trace excluded. */
    expect_ops(r, "mm");
    assert_int_equal(kv_trace_recorder_entry(r, 0)->status, want);
    assert_int_equal(kv_trace_recorder_entry(r, 0)->out_dtype, KV_DTYPE_COUNT);
    assert_false(kv_keyset_has(kv_tls_get().excluded, KV_KEY_TRACE));
    kv_trace_recorder_free(r);
    kv_tensor_release(a);
}

/* ---- ops called from inside a kernel below Trace nest ---- */

static kv_status kvtr_outer_cpu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_tensor *n = kv_neg(kv_arg_tensor(stack, 0));
    if (n == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, n);
    return KV_OK;
}

static void test_nested_calls_depth(void **state) {
    (void)state;
    const kv_op *op = NULL;
    assert_int_equal(kv_op_register("kvtr_outer(Tensor self) -> Tensor", &op), KV_OK);
    assert_int_equal(kv_register_kernel("kvtr_outer", KV_KEY_CPU, kvtr_outer_cpu), KV_OK);
    const float xv[1] = { 5 };
    kv_tensor *x = vec_f32(xv, 1);
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    kv_ivalue slots[1];
    kv_stack st = kv_stack_on(slots, 1);
    kv_push_tensor(&st, x);
    assert_int_equal(kv_call(op, &st), KV_OK);
    kv_tensor *y = kv_neg(x);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    assert_true(at1(kv_arg_tensor(&st, 0), 0) == -5.0);
    kv_stack_clear_returns(&st);
    expect_ops(r, "kvtr_outer, neg, neg");
    assert_int_equal(kv_trace_recorder_entry(r, 0)->depth, 0);
    assert_int_equal(kv_trace_recorder_entry(r, 1)->depth, 1);
    assert_int_equal(kv_trace_recorder_entry(r, 2)->depth, 0);
    kv_tensor_release(y);
    kv_tensor_release(x);
    kv_trace_recorder_free(r);
}

/* ---- per-thread isolation ---- */

typedef struct thread_result {
    int depth_at_start;
    bool included_at_start;
    int own_count;
    char own_ops[128];
} thread_result;

static void *thread_body(void *p) {
    thread_result *res = p;
    res->depth_at_start = kv_trace_depth();
    res->included_at_start = trace_included();
    const float xv[2] = { 1, 2 };
    const int64_t sizes[1] = { 2 };
    kv_tensor *x = kv_tensor_from_data(xv, sizes, 1, KV_F32);
    kv_tensor *a = kv_neg(x); /* seen by nobody */
    kv_trace_recorder *r = kv_trace_recorder_new();
    kv_trace_recorder_start(r);
    kv_tensor *b = kv_sin(x);
    kv_trace_recorder_stop(r);
    res->own_count = kv_trace_recorder_count(r);
    kv_trace_recorder_format(r, res->own_ops, sizeof res->own_ops);
    kv_trace_recorder_free(r);
    kv_tensor_release(b);
    kv_tensor_release(a);
    kv_tensor_release(x);
    return NULL;
}

static void test_per_thread(void **state) {
    (void)state;
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    thread_result res = { 0 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_body, &res), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    const float xv[1] = { 1 };
    kv_tensor *x = vec_f32(xv, 1);
    kv_tensor *c = kv_cos(x);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    /* This thread's recorder saw only this thread's op. */
    expect_ops(r, "cos");
    assert_int_equal(res.depth_at_start, 0);
    assert_false(res.included_at_start);
    assert_int_equal(res.own_count, 1);
    assert_string_equal(res.own_ops, "sin");
    kv_tensor_release(c);
    kv_tensor_release(x);
    kv_trace_recorder_free(r);
}

static void test_format_truncates(void **state) {
    (void)state;
    const float xv[1] = { 1 };
    kv_tensor *x = vec_f32(xv, 1);
    kv_trace_recorder *r = kv_trace_recorder_new();
    assert_int_equal(kv_trace_recorder_start(r), KV_OK);
    kv_tensor *a = kv_neg(x), *b = kv_neg(a);
    assert_int_equal(kv_trace_recorder_stop(r), KV_OK);
    char buf[6];
    assert_int_equal(kv_trace_recorder_format(r, buf, sizeof buf), (int)strlen("neg, neg"));
    assert_string_equal(buf, "neg, ");
    assert_int_equal(kv_trace_recorder_format(r, NULL, 0), 8);
    kv_tensor_release(b);
    kv_tensor_release(a);
    kv_tensor_release(x);
    kv_trace_recorder_free(r);
}

/* A failed assertion must not leave callbacks on for the next test. */
static int teardown(void **state) {
    (void)state;
    while (kv_trace_depth() > 0) kv_trace_pop();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_recorder_names_and_order, teardown),
        cmocka_unit_test_teardown(test_recorder_keyset, teardown),
        cmocka_unit_test_teardown(test_push_pop_tls, teardown),
        cmocka_unit_test_teardown(test_push_limit, teardown),
        cmocka_unit_test_teardown(test_recorder_stop_checks_innermost, teardown),
        cmocka_unit_test_teardown(test_nested_stacks, teardown),
        cmocka_unit_test_teardown(test_callback_args_and_returns, teardown),
        cmocka_unit_test_teardown(test_failing_op, teardown),
        cmocka_unit_test_teardown(test_nested_calls_depth, teardown),
        cmocka_unit_test_teardown(test_per_thread, teardown),
        cmocka_unit_test_teardown(test_format_truncates, teardown),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
