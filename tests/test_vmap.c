/* vmap: batched tensors, the batching rules and the loop-and-stack
 * fallback.
 *
 * The main check: kv_vmap_call(op) over batched inputs equals the op run
 * sample by sample WITHOUT vmap (plain kv_call on kv_select'ed samples)
 * and stacked at out_dim, bit for bit, with exact-valued inputs; and the
 * per-op counters show that the rule (or the fallback) ran. A few results
 * are also compared with hand-computed values, and every vmap error is
 * provoked. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/tune.h"
#include "kv/vmap.h"
#include "test_util.h"

#define N KV_VMAP_UNBATCHED

/* ---- tensors ---- */

/* Small exact values: multiples of 1/4 in [-3, 3], or in (0, 3.5] when
 * positive (for log, sqrt, rsqrt). Integers and bools from the same
 * pattern. Each seed gives a different tensor. */
static kv_tensor *mk(const int64_t *sizes, int n, kv_dtype dt, int seed, bool positive) {
    kv_tensor *t = kv_tensor_empty(sizes, n, dt, KV_DEVICE_CPU0);
    assert_non_null(t);
    const int64_t numel = kv_tensor_numel(t);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < numel; i++) {
        const int k = (int)((i * 7 + seed * 5) % 13);
        double v = positive ? (k + 1) * 0.25 : (k - 6) * 0.5;
        if (dt == KV_BOOL) v = (k % 3) == 0;
        else if (kv_dtype_is_integral(dt, false)) v = positive ? k + 1 : k - 6;
        kv_tensor_set_f64(t, idx, v);
        for (int d = n - 1; d >= 0; d--) {
            if (++idx[d] < sizes[d]) break;
            idx[d] = 0;
        }
    }
    return t;
}

#define SZ(...) ((const int64_t[]){ __VA_ARGS__ }), (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t))

static kv_tensor *f32(const int64_t *sizes, int n, int seed) { return mk(sizes, n, KV_F32, seed, false); }

/* Same dtype, shape and element bits (NaN payloads, signed zeros). */
static void assert_bits_equal(const kv_tensor *got, const kv_tensor *want, const char *what) {
    char gs[96], ws[96];
    kv_shape_format(got->sizes, got->ndim, gs, sizeof gs);
    kv_shape_format(want->sizes, want->ndim, ws, sizeof ws);
    if (got->dtype != want->dtype || !kv_same_shape(got, want)) {
        print_error("%s: got %s %s, want %s %s\n", what, kv_dtype_name(got->dtype), gs, kv_dtype_name(want->dtype),
                    ws);
        fail();
    }
    const int64_t numel = kv_tensor_numel(want);
    const size_t es = kv_dtype_size(want->dtype);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < numel; i++) {
        const void *a = kv_tensor_element(got, idx), *b = kv_tensor_element(want, idx);
        assert_non_null(a);
        assert_non_null(b);
        if (memcmp(a, b, es) != 0) {
            print_error("%s: element %lld differs: got %g, want %g\n", what, (long long)i, kv_tensor_get_f64(got, idx),
                        kv_tensor_get_f64(want, idx));
            fail();
        }
        kv_test_next_index(want, idx);
    }
}

static void assert_values(const kv_tensor *t, const double *want, int64_t n) {
    assert_int_equal(kv_tensor_numel(t), n);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        assert_true(kv_tensor_get_f64(t, idx) == want[i]);
        kv_test_next_index(t, idx);
    }
}

/* ---- boxed arguments ---- */

static kv_ivalue T(kv_tensor *t) { return t ? (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = t } : (kv_ivalue){ 0 }; }
static kv_ivalue I(int64_t i) { return (kv_ivalue){ .tag = KV_IV_INT, .v.i = i }; }
static kv_ivalue B(bool b) { return (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = b }; }
static kv_ivalue D(double d) { return (kv_ivalue){ .tag = KV_IV_DOUBLE, .v.d = d }; }
static kv_ivalue S(kv_scalar s) { return (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = s }; }
static kv_ivalue STR(const char *s) { return (kv_ivalue){ .tag = KV_IV_STR, .v.str = s }; }
static kv_ivalue DT(kv_dtype d) { return (kv_ivalue){ .tag = KV_IV_DTYPE, .v.dtype = d }; }
static kv_ivalue NONE(void) { return (kv_ivalue){ .tag = KV_IV_NONE }; }
static kv_ivalue INTS(const int64_t *v, int n) { return (kv_ivalue){ .tag = KV_IV_INT_LIST, .v.ints = { v, n } }; }
static kv_ivalue LIST(kv_tensor *const *v, int n) {
    return (kv_ivalue){ .tag = KV_IV_TENSOR_LIST, .v.tensors = { v, n } };
}

static const kv_op *op_of(const char *name) {
    const kv_op *op = kv_op_find(name);
    if (op == NULL) print_error("unknown op %s: %s\n", name, kv_last_error_message());
    assert_non_null(op);
    return op;
}

/* ---- the per-sample loop (no vmap anywhere) ---- */

static int in_dim_at(const int *in_dims, const kv_ivalue *v, int i) {
    if (in_dims) return in_dims[i];
    return (v->tag == KV_IV_TENSOR || v->tag == KV_IV_TENSOR_LIST) ? 0 : N;
}

static kv_tensor *sample(kv_tensor *t, int in_dim, int64_t b, kv_tensor **owned, int *nowned) {
    kv_tensor *s = kv_select(t, in_dim, b);
    assert_non_null(s);
    owned[(*nowned)++] = s;
    return s;
}

/* returns[j] = stack over b of op(samples b)[j], along out_dim. */
static int loop_reference(const kv_op *op, const kv_ivalue *args, int n, const int *in_dims, int64_t batch,
                          int out_dim, kv_tensor **returns) {
    kv_tensor *per[4][16] = { { NULL } };
    int nret = 0;
    assert_true(batch <= 16);
    for (int64_t b = 0; b < batch; b++) {
        kv_ivalue slots[KV_STACK_MAX];
        kv_tensor *owned[64];
        kv_tensor *lists[KV_STACK_MAX][8];
        int nowned = 0;
        for (int i = 0; i < n; i++) {
            slots[i] = args[i];
            const int d = in_dim_at(in_dims, &args[i], i);
            if (d == N) continue;
            if (args[i].tag == KV_IV_TENSOR) {
                slots[i].v.tensor = sample(args[i].v.tensor, d, b, owned, &nowned);
            } else if (args[i].tag == KV_IV_TENSOR_LIST) {
                for (int e = 0; e < args[i].v.tensors.n; e++)
                    lists[i][e] = sample(args[i].v.tensors.items[e], d, b, owned, &nowned);
                slots[i].v.tensors.items = lists[i];
            }
        }
        kv_stack s = { slots, n, KV_STACK_MAX };
        kv_status st = kv_call(op, &s);
        if (st != KV_OK) print_error("loop %s: %s\n", kv_op_name(op), kv_last_error_message());
        assert_int_equal(st, KV_OK);
        nret = s.size;
        for (int j = 0; j < s.size; j++) per[j][b] = s.slots[j].v.tensor;
        for (int i = 0; i < nowned; i++) kv_tensor_release(owned[i]);
    }
    for (int j = 0; j < nret; j++) {
        returns[j] = kv_stack_op((kv_tensor_list){ per[j], (int)batch }, out_dim);
        assert_non_null(returns[j]);
        for (int64_t b = 0; b < batch; b++) kv_tensor_release(per[j][b]);
    }
    return nret;
}

enum path { RULE, FALLBACK };

/* vmap(op)(args) with in_dims / out_dim equals the loop, and `path` ran.
 * Returns the rank of the first result (batch dim included). */
static int check_vmap(const char *name, const kv_ivalue *args, int n, const int *in_dims, int64_t batch,
                       int out_dim, enum path path) {
    const kv_op *op = op_of(name);
    kv_vmap_counters_reset();
    kv_ivalue slots[KV_STACK_MAX];
    memcpy(slots, args, sizeof slots[0] * (size_t)n);
    kv_stack s = { slots, n, KV_STACK_MAX };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    kv_status st = kv_vmap_call(op, &s, in_dims, -1, out_dim, &ret);
    if (st != KV_OK) print_error("vmap %s: %s\n", name, kv_last_error_message());
    assert_int_equal(st, KV_OK);
    char what[160];
    snprintf(what, sizeof what, "%s (out_dim %d)", name, out_dim);
    if (path == RULE) {
        if (kv_vmap_rule_calls(name) != 1 || kv_vmap_fallback_calls(name) != 0)
            print_error("%s: rule calls %llu, fallback calls %llu (want the rule)\n", what,
                        (unsigned long long)kv_vmap_rule_calls(name), (unsigned long long)kv_vmap_fallback_calls(name));
        assert_int_equal(kv_vmap_rule_calls(name), 1);
        assert_int_equal(kv_vmap_fallback_calls(name), 0);
    } else {
        if (kv_vmap_rule_calls(name) != 0 || kv_vmap_fallback_calls(name) != 1)
            print_error("%s: rule calls %llu, fallback calls %llu (want the fallback)\n", what,
                        (unsigned long long)kv_vmap_rule_calls(name), (unsigned long long)kv_vmap_fallback_calls(name));
        assert_int_equal(kv_vmap_rule_calls(name), 0);
        assert_int_equal(kv_vmap_fallback_calls(name), 1);
    }
    assert_int_equal(kv_vmap_current_level(), 0);
    kv_tensor *want[4] = { NULL };
    const int nret = loop_reference(op, args, n, in_dims, batch, out_dim, want);
    assert_int_equal(ret.size, nret);
    const int rank = nret > 0 ? ret.slots[0].v.tensor->ndim : 0;
    for (int j = 0; j < nret; j++) {
        assert_int_equal(ret.slots[j].tag, KV_IV_TENSOR);
        assert_false(kv_vmap_is_batched(ret.slots[j].v.tensor));
        assert_false(kv_keyset_has(ret.slots[j].v.tensor->keys, KV_KEY_BATCHED));
        assert_bits_equal(ret.slots[j].v.tensor, want[j], what);
        kv_tensor_release(want[j]);
    }
    kv_stack_clear_returns(&ret);
    return rank;
}

/* out_dim 0, 1 (where the result has a logical dim) and -1. */
static void check_both(const char *name, const kv_ivalue *args, int n, const int *in_dims, int64_t batch,
                       enum path path) {
    const int rank = check_vmap(name, args, n, in_dims, batch, 0, path);
    if (rank >= 2) check_vmap(name, args, n, in_dims, batch, 1, path);
    check_vmap(name, args, n, in_dims, batch, -1, path);
}

#define ARGS(...) ((const kv_ivalue[]){ __VA_ARGS__ }), (int)(sizeof((const kv_ivalue[]){ __VA_ARGS__ }) / sizeof(kv_ivalue))
#define DIMS(...) ((const int[]){ __VA_ARGS__ })

/* ---- elementwise ---- */

static void test_unary_rules(void **state) {
    (void)state;
    /* x0: batch (3) at dim 0; x1: batch at dim 1; positive exact values. */
    kv_tensor *x0 = mk(SZ(3, 4, 5), KV_F32, 1, true);
    kv_tensor *x1 = mk(SZ(4, 3, 5), KV_F32, 2, true);
    kv_tensor *xs[2] = { x0, x1 };
    const int in_dim[2] = { 0, 1 };
    const char *plain[] = { "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos",
                            "tanh", "sigmoid", "relu", "silu", "detach" };
    kv_scalar lo = kv_scalar_double(0.5), hi = kv_scalar_double(2.0);
    for (int k = 0; k < 2; k++) {
        const int *d = DIMS(in_dim[k]);
        for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) check_both(plain[i], ARGS(T(xs[k])), d, 3, RULE);
        check_both("gelu", ARGS(T(xs[k]), STR("none")), DIMS(in_dim[k], N), 3, RULE);
        check_both("gelu", ARGS(T(xs[k]), STR("tanh")), DIMS(in_dim[k], N), 3, RULE);
        check_both("clamp", ARGS(T(xs[k]), S(lo), S(hi)), DIMS(in_dim[k], N, N), 3, RULE);
        check_both("clamp", ARGS(T(xs[k]), NONE(), S(hi)), DIMS(in_dim[k], N, N), 3, RULE);
        check_both("pow.Tensor_Scalar", ARGS(T(xs[k]), S(kv_scalar_int(3))), DIMS(in_dim[k], N), 3, RULE);
        check_both("clone", ARGS(T(xs[k]), NONE()), DIMS(in_dim[k], N), 3, RULE);
        check_both("_to_copy", ARGS(T(xs[k]), DT(KV_F64), NONE(), NONE(), NONE(), B(false), NONE()),
                   DIMS(in_dim[k], N, N, N, N, N, N), 3, RULE);
    }
    kv_tensor_release(x0);
    kv_tensor_release(x1);
}

static void test_binary_rules(void **state) {
    (void)state;
    kv_tensor *a0 = f32(SZ(3, 4, 5), 1);  /* batched at 0: logical [4, 5] */
    kv_tensor *a1 = f32(SZ(4, 3, 5), 2);  /* batched at 1: logical [4, 5] */
    kv_tensor *b0 = f32(SZ(3, 4, 5), 3);
    kv_tensor *u = f32(SZ(4, 5), 4);      /* unbatched, same logical shape */
    kv_tensor *row = f32(SZ(5), 5);       /* unbatched, broadcasts */
    kv_tensor *brow = f32(SZ(5, 3), 6);   /* batched at 1: logical [5] */
    kv_tensor *nz = mk(SZ(3, 4, 5), KV_F32, 7, true); /* nonzero divisors */
    kv_scalar two = kv_scalar_int(2);
    const char *ops[] = { "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor",
                          "maximum", "minimum", "eq.Tensor", "lt.Tensor" };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        const bool alpha = i < 2;
        const char *op = ops[i];
        kv_tensor *rhs = i == 3 ? nz : b0;
#define BIN(x, y, dx, dy)                                                                    \
    do {                                                                                     \
        if (alpha) check_both(op, ARGS(T(x), T(y), S(two)), DIMS(dx, dy, N), 3, RULE);       \
        else check_both(op, ARGS(T(x), T(y)), DIMS(dx, dy), 3, RULE);                        \
    } while (0)
        BIN(a0, rhs, 0, 0);   /* both batched at 0 */
        BIN(a1, rhs, 1, 0);   /* batch dims at different places */
        BIN(rhs, a1, 0, 1);
        BIN(a1, u, 1, N);     /* one batched, one not */
        BIN(u, rhs, N, 0);
        BIN(a0, row, 0, N);   /* broadcasting against an unbatched lower rank */
        BIN(brow, a0, 1, 0);  /* a batched lower rank against a batched higher one */
        BIN(brow, u, 1, N);
#undef BIN
    }
    kv_tensor *c = mk(SZ(4, 3, 5), KV_BOOL, 8, false);
    check_both("where.self", ARGS(T(c), T(a0), T(u)), DIMS(1, 0, N), 3, RULE);
    check_both("where.self", ARGS(T(c), T(row), T(b0)), DIMS(1, N, 0), 3, RULE);
    kv_tensor_release(c);
    kv_tensor *ints = mk(SZ(3, 4, 5), KV_I32, 9, false);
    check_both("add.Tensor", ARGS(T(ints), T(u), S(two)), DIMS(0, N, N), 3, RULE); /* promotion i32 + f32 */
    kv_tensor_release(ints);
    kv_tensor *objs[] = { a0, a1, b0, u, row, brow, nz };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* A logically 0-dim batched operand changes promotion once it is
 * physically 1-dim: the rule must hand such calls to the fallback. Same
 * dtypes: no difference, the rule runs. */
static void test_zero_dim_promotion(void **state) {
    (void)state;
    kv_tensor *s64 = mk(SZ(3), KV_F64, 1, false); /* logical 0-dim f64 */
    kv_tensor *s32 = mk(SZ(3), KV_F32, 2, false);
    kv_tensor *v = f32(SZ(4), 3);
    kv_scalar one = kv_scalar_int(1);
    check_both("add.Tensor", ARGS(T(v), T(s64), S(one)), DIMS(N, 0, N), 3, FALLBACK);
    check_both("mul.Tensor", ARGS(T(s64), T(v)), DIMS(0, N), 3, FALLBACK);
    check_both("add.Tensor", ARGS(T(v), T(s32), S(one)), DIMS(N, 0, N), 3, RULE);
    check_both("maximum", ARGS(T(s32), T(s32)), DIMS(0, 0), 3, RULE);
    /* and the fallback really did keep f32: f32 [4] + 0-dim f64 -> f32 */
    kv_stack args = { (kv_ivalue[3]){ T(v), T(s64), S(one) }, 3, 3 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("add.Tensor"), &args, DIMS(N, 0, N), 3, 0, &ret), KV_OK);
    assert_int_equal(ret.slots[0].v.tensor->dtype, KV_F32);
    assert_int_equal(ret.slots[0].v.tensor->ndim, 2);
    kv_stack_clear_returns(&ret);
    kv_tensor_release(s64);
    kv_tensor_release(s32);
    kv_tensor_release(v);
}

/* ---- reductions ---- */

static void test_reduction_rules(void **state) {
    (void)state;
    kv_tensor *x0 = f32(SZ(3, 4, 5), 1);
    kv_tensor *x1 = f32(SZ(4, 3, 5), 2);
    kv_tensor *z = f32(SZ(3), 3); /* logical 0-dim */
    kv_tensor *xs[2] = { x0, x1 };
    const int64_t d1[] = { 1 }, dm[] = { -1, 0 }, d0[] = { 0 };
    for (int k = 0; k < 2; k++) {
        const int in = k;
        for (int keep = 0; keep < 2; keep++) {
            const char *lists[] = { "sum.dim_IntList", "mean.dim" };
            for (int l = 0; l < 2; l++) {
                check_both(lists[l], ARGS(T(xs[k]), INTS(d1, 1), B(keep), NONE()), DIMS(in, N, N, N), 3, RULE);
                check_both(lists[l], ARGS(T(xs[k]), INTS(dm, 2), B(keep), NONE()), DIMS(in, N, N, N), 3, RULE);
                check_both(lists[l], ARGS(T(xs[k]), NONE(), B(keep), NONE()), DIMS(in, N, N, N), 3, RULE);
            }
            check_both("sum.dim_IntList", ARGS(T(xs[k]), INTS(d1, 1), B(keep), DT(KV_F64)), DIMS(in, N, N, N), 3,
                       RULE);
            check_both("amax", ARGS(T(xs[k]), INTS(d1, 1), B(keep)), DIMS(in, N, N), 3, RULE);
            check_both("amax", ARGS(T(xs[k]), INTS(NULL, 0), B(keep)), DIMS(in, N, N), 3, RULE);
            check_both("prod.dim_int", ARGS(T(xs[k]), I(-1), B(keep), NONE()), DIMS(in, N, N, N), 3, RULE);
            check_both("argmax", ARGS(T(xs[k]), I(0), B(keep)), DIMS(in, N, N), 3, RULE);
            check_both("argmax", ARGS(T(xs[k]), NONE(), B(keep)), DIMS(in, N, N), 3, RULE);
        }
    }
    /* logical 0-dim: "all dims" and dim 0 reduce nothing */
    for (int keep = 0; keep < 2; keep++) {
        check_vmap("sum.dim_IntList", ARGS(T(z), NONE(), B(keep), NONE()), DIMS(0, N, N, N), 3, 0, RULE);
        check_vmap("sum.dim_IntList", ARGS(T(z), INTS(d0, 1), B(keep), NONE()), DIMS(0, N, N, N), 3, 0, RULE);
        check_vmap("amax", ARGS(T(z), INTS(NULL, 0), B(keep)), DIMS(0, N, N), 3, 0, RULE);
        check_vmap("prod.dim_int", ARGS(T(z), I(0), B(keep), NONE()), DIMS(0, N, N, N), 3, 0, RULE);
        check_vmap("argmax", ARGS(T(z), NONE(), B(keep)), DIMS(0, N, N), 3, 0, RULE);
        check_vmap("argmax", ARGS(T(z), I(-1), B(keep)), DIMS(0, N, N), 3, 0, RULE);
    }
    for (int k = 0; k < 2; k++) {
        check_both("_softmax", ARGS(T(xs[k]), I(1), B(false)), DIMS(k, N, N), 3, RULE);
        check_both("_softmax", ARGS(T(xs[k]), I(-2), B(false)), DIMS(k, N, N), 3, RULE);
        check_both("_log_softmax", ARGS(T(xs[k]), I(0), B(false)), DIMS(k, N, N), 3, RULE);
    }
    check_vmap("_softmax", ARGS(T(z), I(0), B(false)), DIMS(0, N, N), 3, 0, RULE);
    kv_tensor_release(x0);
    kv_tensor_release(x1);
    kv_tensor_release(z);
}

/* A dim out of the LOGICAL range is the op's own error, even where the
 * shifted dim would exist physically. */
static void test_reduction_dim_errors(void **state) {
    (void)state;
    kv_tensor *x = f32(SZ(3, 4, 5), 1); /* logical [4, 5] */
    const int64_t d2[] = { 2 };
    kv_stack args = { (kv_ivalue[4]){ T(x), INTS(d2, 1), B(false), NONE() }, 4, 4 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("sum.dim_IntList"), &args, DIMS(0, N, N, N), -1, 0, &ret), KV_ERR_DIM);
    assert_int_equal(ret.size, 0);
    kv_stack a2 = { (kv_ivalue[3]){ T(x), I(2), B(false) }, 3, 3 };
    assert_int_equal(kv_vmap_call(op_of("_softmax"), &a2, DIMS(0, N, N), -1, 0, &ret), KV_ERR_DIM);
    kv_stack a3 = { (kv_ivalue[3]){ T(x), I(0), I(4) }, 3, 3 };
    assert_int_equal(kv_vmap_call(op_of("select.int"), &a3, DIMS(0, N, N), -1, 0, &ret), KV_ERR_INDEX);
    assert_int_equal(kv_vmap_current_level(), 0);
    kv_tensor_release(x);
}

/* ---- matmul ---- */

static void test_matmul_rules(void **state) {
    (void)state;
    kv_tensor *a0 = f32(SZ(3, 2, 4), 1), *a1 = f32(SZ(2, 3, 4), 2), *ua = f32(SZ(2, 4), 3);
    kv_tensor *b0 = f32(SZ(3, 4, 5), 4), *b2 = f32(SZ(4, 5, 3), 5), *ub = f32(SZ(4, 5), 6);
    check_both("mm", ARGS(T(a0), T(b0)), DIMS(0, 0), 3, RULE);
    check_both("mm", ARGS(T(a1), T(b2)), DIMS(1, 2), 3, RULE);
    check_both("mm", ARGS(T(a0), T(ub)), DIMS(0, N), 3, RULE);
    check_both("mm", ARGS(T(a1), T(ub)), DIMS(1, N), 3, RULE);
    check_both("mm", ARGS(T(ua), T(b0)), DIMS(N, 0), 3, RULE);
    check_both("mm", ARGS(T(ua), T(b2)), DIMS(N, 2), 3, RULE);
    kv_tensor *p0 = f32(SZ(3, 2, 2, 4), 7), *p1 = f32(SZ(2, 3, 2, 4), 8), *up = f32(SZ(2, 2, 4), 9);
    kv_tensor *q0 = f32(SZ(3, 2, 4, 5), 10), *q3 = f32(SZ(2, 4, 5, 3), 11), *uq = f32(SZ(2, 4, 5), 12);
    check_both("bmm", ARGS(T(p0), T(q0)), DIMS(0, 0), 3, RULE);
    check_both("bmm", ARGS(T(p1), T(q3)), DIMS(1, 3), 3, RULE);
    check_both("bmm", ARGS(T(p0), T(uq)), DIMS(0, N), 3, RULE);
    check_both("bmm", ARGS(T(p1), T(uq)), DIMS(1, N), 3, RULE);
    check_both("bmm", ARGS(T(up), T(q0)), DIMS(N, 0), 3, RULE);
    check_both("bmm", ARGS(T(up), T(q3)), DIMS(N, 3), 3, RULE);
    /* wrong logical rank: the op's own error through the fallback */
    kv_stack args = { (kv_ivalue[2]){ T(p0), T(ub) }, 2, 2 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    kv_vmap_counters_reset();
    assert_int_equal(kv_vmap_call(op_of("mm"), &args, DIMS(0, N), -1, 0, &ret), KV_ERR_SHAPE);
    assert_int_equal(kv_vmap_fallback_calls("mm"), 1);
    kv_tensor *objs[] = { a0, a1, ua, b0, b2, ub, p0, p1, up, q0, q3, uq };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* Hand-computed: per sample, [1 2] @ [[1 0] [0 1]] scaled by the sample. */
static void test_mm_values(void **state) {
    (void)state;
    const float av[2][1][2] = { { { 1, 2 } }, { { 3, 4 } } };
    const float bv[2][2] = { { 1, 2 }, { 3, 4 } };
    kv_tensor *a = kv_tensor_from_data(av, SZ(2, 1, 2), KV_F32);
    kv_tensor *b = kv_tensor_from_data(bv, SZ(2, 2), KV_F32);
    kv_stack args = { (kv_ivalue[2]){ T(a), T(b) }, 2, 2 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("mm"), &args, DIMS(0, N), -1, 0, &ret), KV_OK);
    kv_tensor *r = ret.slots[0].v.tensor;
    assert_int_equal(r->ndim, 3);
    /* [1 2] @ b = [7 10]; [3 4] @ b = [15 22] */
    assert_values(r, (const double[]){ 7, 10, 15, 22 }, 4);
    kv_stack_clear_returns(&ret);
    /* out_dim 2: [1, 2(m), 2(batch)] */
    assert_int_equal(kv_vmap_call(op_of("mm"), &args, DIMS(0, N), -1, 2, &ret), KV_OK);
    r = ret.slots[0].v.tensor;
    assert_int_equal(r->sizes[2], 2);
    assert_values(r, (const double[]){ 7, 15, 10, 22 }, 4);
    kv_stack_clear_returns(&ret);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* ---- views ---- */

static void test_view_rules(void **state) {
    (void)state;
    kv_tensor *x0 = f32(SZ(3, 4, 5), 1), *x1 = f32(SZ(4, 3, 5), 2);
    kv_tensor *xs[2] = { x0, x1 };
    const int64_t flat[] = { 20 }, split[] = { 5, 2, 2 }, inferred[] = { -1, 10 }, split0[] = { 2, 2, 5 };
    const int64_t perm[] = { 1, 0 }, perm_neg[] = { -1, 0 };
    const int64_t ex[] = { 2, 4, 5 }, ex_keep[] = { 2, -1, 5 };
    for (int k = 0; k < 2; k++) {
        const int in = k;
        const char *sized[] = { "view", "reshape" };
        for (int v = 0; v < 2; v++) {
            /* view needs viewable memory: only the batch-first x0 */
            if (v == 0 && k == 1) {
                check_both("view", ARGS(T(xs[k]), INTS(split0, 3)), DIMS(in, N), 3, RULE);
                continue;
            }
            check_both(sized[v], ARGS(T(xs[k]), INTS(flat, 1)), DIMS(in, N), 3, RULE);
            check_both(sized[v], ARGS(T(xs[k]), INTS(split, 3)), DIMS(in, N), 3, RULE);
            check_both(sized[v], ARGS(T(xs[k]), INTS(inferred, 2)), DIMS(in, N), 3, RULE);
        }
        check_both("transpose.int", ARGS(T(xs[k]), I(0), I(1)), DIMS(in, N, N), 3, RULE);
        check_both("transpose.int", ARGS(T(xs[k]), I(-1), I(-1)), DIMS(in, N, N), 3, RULE);
        check_both("t", ARGS(T(xs[k])), DIMS(in), 3, RULE);
        check_both("permute", ARGS(T(xs[k]), INTS(perm, 2)), DIMS(in, N), 3, RULE);
        check_both("permute", ARGS(T(xs[k]), INTS(perm_neg, 2)), DIMS(in, N), 3, RULE);
        check_both("select.int", ARGS(T(xs[k]), I(1), I(-2)), DIMS(in, N, N), 3, RULE);
        check_both("select.int", ARGS(T(xs[k]), I(0), I(3)), DIMS(in, N, N), 3, RULE);
        const int64_t s1 = 1, e4 = 4;
        check_both("slice.Tensor", ARGS(T(xs[k]), I(1), I(s1), I(e4), I(2)), DIMS(in, N, N, N, N), 3, RULE);
        check_both("slice.Tensor", ARGS(T(xs[k]), I(-2), NONE(), NONE(), I(1)), DIMS(in, N, N, N, N), 3, RULE);
        check_both("unsqueeze", ARGS(T(xs[k]), I(0)), DIMS(in, N), 3, RULE);
        check_both("unsqueeze", ARGS(T(xs[k]), I(-1)), DIMS(in, N), 3, RULE);
        check_both("unsqueeze", ARGS(T(xs[k]), I(1)), DIMS(in, N), 3, RULE);
        check_both("expand", ARGS(T(xs[k]), INTS(ex, 3), B(false)), DIMS(in, N, N), 3, RULE);
        check_both("expand", ARGS(T(xs[k]), INTS(ex_keep, 3), B(false)), DIMS(in, N, N), 3, RULE);
    }
    kv_tensor *y = f32(SZ(4, 1, 3), 3); /* batched at 2: logical [4, 1] */
    check_both("squeeze.dim", ARGS(T(y), I(1)), DIMS(2, N), 3, RULE);
    check_both("squeeze.dim", ARGS(T(y), I(0)), DIMS(2, N), 3, RULE); /* size 4: unchanged */
    check_both("t", ARGS(T(y)), DIMS(2), 3, RULE);
    kv_tensor *v1 = f32(SZ(3, 4), 4); /* logical [4]: t is a no-op view */
    check_both("t", ARGS(T(v1)), DIMS(0), 3, RULE);
    const int64_t ex1[] = { 2, 3 };
    check_both("expand", ARGS(T(v1), INTS(ex1, 2), B(false)), DIMS(1, N, N), 4, RULE);
    kv_tensor *z = f32(SZ(3), 5); /* logical 0-dim */
    check_vmap("transpose.int", ARGS(T(z), I(0), I(-1)), DIMS(0, N, N), 3, 0, RULE);
    check_vmap("squeeze.dim", ARGS(T(z), I(0)), DIMS(0, N), 3, 0, RULE);
    check_vmap("unsqueeze", ARGS(T(z), I(0)), DIMS(0, N), 3, 0, RULE);
    check_vmap("t", ARGS(T(z)), DIMS(0), 3, 0, RULE);
    kv_tensor *objs[] = { x0, x1, y, v1, z };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* A rule's view shares the physical storage: writing through the view
 * (in place, sample by sample in the fallback) changes the batched base. */
static void test_view_aliases_physical(void **state) {
    (void)state;
    kv_tensor *x = f32(SZ(3, 4), 1);
    kv_tensor *w = kv_vmap_add_batch_dim(x, 0, 1);
    assert_non_null(w);
    kv_tensor *s = kv_select(w, 0, 2); /* logical 0-dim: x[:, 2] */
    assert_non_null(s);
    assert_true(kv_vmap_is_batched(s));
    kv_tensor *phys = NULL;
    int64_t bdim = -1;
    int level = 0;
    assert_int_equal(kv_vmap_batch_info(s, &phys, &bdim, &level), KV_OK);
    assert_ptr_equal(phys->storage, x->storage);
    assert_int_equal(level, 1);
    assert_int_equal(kv_fill_(s, kv_scalar_int(9)), KV_OK);
    for (int64_t b = 0; b < 3; b++)
        for (int64_t j = 0; j < 4; j++) {
            const double v = kv_tensor_get_f64(x, (const int64_t[]){ b, j });
            if (j == 2) assert_true(v == 9.0);
            else assert_true(v != 9.0);
        }
    kv_tensor_release(s);
    kv_tensor_release(w);
    kv_tensor_release(x);
}

/* ---- the fallback ---- */

static void test_fallback_ops(void **state) {
    (void)state;
    kv_tensor *a0 = f32(SZ(3, 2, 4), 1), *a1 = f32(SZ(2, 3, 4), 2), *ua = f32(SZ(2, 4), 3);
    kv_tensor *list0[2] = { a0, ua };
    kv_tensor *list1[2] = { a1, a1 };
    kv_tensor *mixed[2] = { a0, a0 };
    check_both("cat", ARGS(LIST(list1, 2), I(0)), DIMS(1, N), 3, FALLBACK);
    check_both("cat", ARGS(LIST(mixed, 2), I(-1)), DIMS(0, N), 3, FALLBACK);
    check_both("stack", ARGS(LIST(list1, 2), I(1)), DIMS(1, N), 3, FALLBACK);
    (void)list0;
    const int64_t iv[] = { 3, 0, 3 };
    kv_tensor *idx = kv_tensor_from_data(iv, SZ(3), KV_I64);
    const int64_t bv[] = { 1, 0, 2, 3, 3, 1 };
    kv_tensor *bidx = kv_tensor_from_data(bv, SZ(3, 2), KV_I64); /* batched at 0: per sample [2] */
    check_both("index_select", ARGS(T(a0), I(1), T(idx)), DIMS(0, N, N), 3, FALLBACK);
    check_both("index_select", ARGS(T(a1), I(-1), T(bidx)), DIMS(1, N, 0), 3, FALLBACK);
    check_both("index_select", ARGS(T(ua), I(1), T(bidx)), DIMS(N, N, 0), 3, FALLBACK);
    kv_tensor *weight = f32(SZ(4, 3), 4);
    kv_tensor *bweight = f32(SZ(4, 3, 3), 5); /* batched at 1 */
    check_both("embedding", ARGS(T(weight), T(bidx), I(-1), B(false), B(false)), DIMS(N, 0, N, N, N), 3, FALLBACK);
    check_both("embedding", ARGS(T(bweight), T(idx), I(-1), B(false), B(false)), DIMS(1, N, N, N, N), 3,
               FALLBACK);
    kv_tensor *x = f32(SZ(3, 2, 4), 6), *lw = f32(SZ(4), 7), *lb = f32(SZ(4), 8), *blw = f32(SZ(4, 3), 9);
    const int64_t ns[] = { 4 };
    check_both("native_layer_norm", ARGS(T(x), INTS(ns, 1), T(lw), T(lb), D(1e-5)), DIMS(0, N, N, N, N), 3,
               FALLBACK);
    check_both("native_layer_norm", ARGS(T(x), INTS(ns, 1), T(blw), NONE(), D(1e-5)), DIMS(0, N, 1, N, N), 3,
               FALLBACK);
    /* an op with a view return and no rule */
    check_both("squeeze", ARGS(T(a0)), DIMS(0), 3, FALLBACK);
    kv_tensor *objs[] = { a0, a1, ua, idx, bidx, weight, bweight, x, lw, lb, blw };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* In place through the fallback: each sample of the batched self is
 * written through its physical storage; the op returns the wrapper. */
static void test_fallback_inplace(void **state) {
    (void)state;
    const float sv[2][3] = { { 1, 2, 3 }, { 4, 5, 6 } };
    const float ov[3][2] = { { 10, 20 }, { 30, 40 }, { 50, 60 } }; /* batched at dim 1 */
    kv_tensor *self = kv_tensor_from_data(sv, SZ(2, 3), KV_F32);
    kv_tensor *other = kv_tensor_from_data(ov, SZ(3, 2), KV_F32);
    const int64_t v0 = kv_tensor_version(self);
    kv_vmap_counters_reset();
    kv_stack args = { (kv_ivalue[3]){ T(self), T(other), S(kv_scalar_int(1)) }, 3, 3 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("add_.Tensor"), &args, DIMS(0, 1, N), -1, 0, &ret), KV_OK);
    assert_int_equal(kv_vmap_fallback_calls("add_.Tensor"), 1);
    /* sample 0: [1 2 3] + [10 30 50]; sample 1: [4 5 6] + [20 40 60] */
    assert_values(self, (const double[]){ 11, 32, 53, 24, 45, 66 }, 6);
    assert_true(kv_tensor_version(self) > v0);
    assert_int_equal(ret.size, 1);
    assert_ptr_equal(ret.slots[0].v.tensor, self); /* the caller's own tensor, batch dim where it was */
    kv_stack_clear_returns(&ret);
    /* batched at 1 with out_dim 1: also the caller's tensor */
    assert_int_equal(kv_vmap_call(op_of("mul_.Tensor"), &(kv_stack){ (kv_ivalue[2]){ T(other), T(self) }, 2, 2 },
                                  DIMS(1, 0), -1, 1, &ret),
                     KV_OK);
    assert_ptr_equal(ret.slots[0].v.tensor, other);
    kv_stack_clear_returns(&ret);
    /* other[i][b] *= self[b][i] */
    assert_values(other, (const double[]){ 110, 480, 960, 1800, 2650, 3960 }, 6);
    kv_tensor_release(self);
    kv_tensor_release(other);
}

/* ---- results that do not depend on the batch ---- */

static void test_unbatched_result_broadcasts(void **state) {
    (void)state;
    const int64_t size[] = { 2 };
    kv_stack args = { (kv_ivalue[5]){ INTS(size, 1), NONE(), NONE(), NONE(), NONE() }, 5, 5 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("ones"), &args, NULL, 3, 1, &ret), KV_OK);
    kv_tensor *r = ret.slots[0].v.tensor;
    assert_int_equal(r->ndim, 2);
    assert_int_equal(r->sizes[0], 2);
    assert_int_equal(r->sizes[1], 3);
    assert_values(r, (const double[]){ 1, 1, 1, 1, 1, 1 }, 6);
    kv_stack_clear_returns(&ret);
    /* no mapped argument and no batch size: an error */
    assert_int_equal(kv_vmap_call(op_of("ones"), &args, NULL, -1, 0, &ret), KV_ERR_INVALID_ARG);
}

static void test_sum_values(void **state) {
    (void)state;
    const float xv[2][2] = { { 1, 2 }, { 3, 4 } };
    kv_tensor *x = kv_tensor_from_data(xv, SZ(2, 2), KV_F32);
    kv_stack args = { (kv_ivalue[4]){ T(x), NONE(), B(false), NONE() }, 4, 4 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("sum.dim_IntList"), &args, DIMS(0, N, N, N), -1, 0, &ret), KV_OK);
    assert_int_equal(ret.slots[0].v.tensor->ndim, 1);
    assert_values(ret.slots[0].v.tensor, (const double[]){ 3, 7 }, 2); /* rows */
    kv_stack_clear_returns(&ret);
    assert_int_equal(kv_vmap_call(op_of("sum.dim_IntList"), &args, DIMS(1, N, N, N), -1, 0, &ret), KV_OK);
    assert_values(ret.slots[0].v.tensor, (const double[]){ 4, 6 }, 2); /* columns */
    kv_stack_clear_returns(&ret);
    kv_tensor_release(x);
}

/* ---- nesting ---- */

static void test_nested_levels(void **state) {
    (void)state;
    kv_tensor *x = f32(SZ(2, 3, 4), 1);
    kv_tensor *y = f32(SZ(4, 2), 2); /* batched at 1 for level 1 only */
    const int l1 = kv_vmap_level_enter();
    const int l2 = kv_vmap_level_enter();
    assert_int_equal(l1, 1);
    assert_int_equal(l2, 2);
    assert_true(kv_keyset_has(kv_tls_get().included, KV_KEY_VMAP_MODE));
    kv_tensor *w1 = kv_vmap_add_batch_dim(x, 0, l1); /* logical [3, 4] */
    kv_tensor *w2 = kv_vmap_add_batch_dim(w1, 0, l2); /* logical [4] */
    kv_tensor *v1 = kv_vmap_add_batch_dim(y, 1, l1); /* logical [4], unbatched at level 2 */
    assert_non_null(w2);
    assert_int_equal(w2->ndim, 1);
    kv_vmap_counters_reset();
    kv_tensor *p = kv_mul(w2, v1); /* level 2 rule, then level 1 rule */
    assert_non_null(p);
    assert_int_equal(kv_vmap_rule_calls("mul.Tensor"), 2);
    kv_tensor *list[2] = { p, w2 };
    kv_tensor *c = kv_cat((kv_tensor_list){ list, 2 }, 0); /* fallback at both levels */
    assert_non_null(c);
    assert_true(kv_vmap_fallback_calls("cat") >= 2);
    kv_tensor *o2 = kv_vmap_remove_batch_dim(c, l2, 0); /* level-1 wrapper, logical [3, 8] */
    assert_non_null(o2);
    assert_int_equal(kv_vmap_remove_batch_dim(o2, l2, 0) == NULL, true);
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    kv_tensor *o1 = kv_vmap_remove_batch_dim(o2, l1, 0); /* [2, 3, 8] */
    assert_non_null(o1);
    assert_false(kv_vmap_is_batched(o1));
    assert_int_equal(o1->ndim, 3);
    assert_int_equal(o1->sizes[2], 8);
    for (int64_t a = 0; a < 2; a++)
        for (int64_t b = 0; b < 3; b++)
            for (int64_t k = 0; k < 4; k++) {
                const double xv = kv_tensor_get_f64(x, (const int64_t[]){ a, b, k });
                const double yv = kv_tensor_get_f64(y, (const int64_t[]){ k, a });
                assert_true(kv_tensor_get_f64(o1, (const int64_t[]){ a, b, k }) == (double)(float)(xv * yv));
                assert_true(kv_tensor_get_f64(o1, (const int64_t[]){ a, b, k + 4 }) == xv);
            }
    assert_int_equal(kv_vmap_level_exit(l1), KV_ERR_INVALID_ARG); /* not the innermost */
    assert_int_equal(kv_vmap_level_exit(l2), KV_OK);
    assert_int_equal(kv_vmap_level_exit(l1), KV_OK);
    assert_int_equal(kv_vmap_level_exit(l1), KV_ERR_INVALID_ARG);
    assert_false(kv_keyset_has(kv_tls_get().included, KV_KEY_VMAP_MODE));
    kv_tensor *objs[] = { o1, o2, c, p, v1, w2, w1, x, y };
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) kv_tensor_release(objs[i]);
}

/* ---- errors ---- */

static void test_error_batch_sizes_differ(void **state) {
    (void)state;
    kv_tensor *a = f32(SZ(3, 2), 1), *b = f32(SZ(4, 2), 2);
    kv_stack args = { (kv_ivalue[3]){ T(a), T(b), S(kv_scalar_int(1)) }, 3, 3 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("add.Tensor"), &args, DIMS(0, 0, N), -1, 0, &ret), KV_ERR_SHAPE);
    assert_non_null(strstr(kv_last_error_message(),
                           "vmap: Expected all tensors to have the same size in the mapped dimension, got sizes 3 "
                           "and 4 for the mapped dimension"));
    assert_int_equal(ret.size, 0);
    assert_int_equal(kv_vmap_current_level(), 0);
    /* a given batch size that the inputs do not have */
    assert_int_equal(kv_vmap_call(op_of("add.Tensor"), &args, DIMS(0, N, N), 5, 0, &ret), KV_ERR_SHAPE);
    /* wrappers made by hand at one level, through a rule and the fallback */
    const int lv = kv_vmap_level_enter();
    kv_tensor *wa = kv_vmap_add_batch_dim(a, 0, lv), *wb = kv_vmap_add_batch_dim(b, 0, lv);
    assert_null(kv_add(wa, wb, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    assert_non_null(strstr(kv_last_error_message(), "got sizes 3 and 4"));
    kv_tensor *list[2] = { wa, wb };
    assert_null(kv_cat((kv_tensor_list){ list, 2 }, 0));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    kv_tensor_release(wa);
    kv_tensor_release(wb);
    assert_int_equal(kv_vmap_level_exit(lv), KV_OK);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static void test_error_in_dim_out_of_range(void **state) {
    (void)state;
    kv_tensor *a = f32(SZ(3, 2), 1);
    kv_stack args = { (kv_ivalue[1]){ T(a) }, 1, 1 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("neg"), &args, DIMS(2), -1, 0, &ret), KV_ERR_DIM);
    assert_int_equal(kv_vmap_call(op_of("neg"), &args, DIMS(-3), -1, 0, &ret), KV_ERR_DIM);
    assert_int_equal(kv_vmap_call(op_of("neg"), &args, DIMS(-2), -1, 0, &ret), KV_OK); /* negative in range */
    kv_stack_clear_returns(&ret);
    assert_null(kv_vmap_add_batch_dim(a, 5, 1));
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    kv_tensor *z = f32(SZ(1), 2);
    kv_tensor *zz = kv_squeeze(z);
    assert_null(kv_vmap_add_batch_dim(zz, 0, 1)); /* 0-dim: nothing to map */
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    /* out_dim out of range: the result has 2 dims with the batch dim */
    assert_int_equal(kv_vmap_call(op_of("neg"), &args, DIMS(0), -1, 2, &ret), KV_ERR_DIM);
    assert_int_equal(ret.size, 0);
    assert_int_equal(kv_vmap_current_level(), 0);
    /* mapping a non-tensor argument */
    kv_stack a2 = { (kv_ivalue[3]){ T(a), I(0), B(false) }, 3, 3 };
    assert_int_equal(kv_vmap_call(op_of("_softmax"), &a2, DIMS(0, 0, N), -1, 0, &ret), KV_ERR_INVALID_ARG);
    kv_tensor_release(zz);
    kv_tensor_release(z);
    kv_tensor_release(a);
}

static void test_error_remove_level_not_present(void **state) {
    (void)state;
    kv_tensor *a = f32(SZ(3, 2), 1);
    assert_null(kv_vmap_remove_batch_dim(a, 1, 0)); /* not batched at all */
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    kv_tensor *w = kv_vmap_add_batch_dim(a, 1, 2);
    assert_non_null(w);
    assert_int_equal(w->ndim, 1);
    assert_int_equal(w->sizes[0], 3);
    assert_null(kv_vmap_remove_batch_dim(w, 1, 0)); /* batched at 2, not 1 */
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    assert_null(kv_vmap_remove_batch_dim(w, 2, 2)); /* out_dim out of range */
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    kv_tensor *back = kv_vmap_remove_batch_dim(w, 2, -1);
    assert_ptr_equal(back, a); /* already at the last dim: the physical tensor itself */
    kv_tensor_release(back);
    assert_null(kv_vmap_add_batch_dim(w, 0, 2)); /* levels must increase inwards */
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    assert_null(kv_vmap_unwrap_result(w, 1, 2, 0)); /* batched inside the level asked for */
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    kv_tensor *al = kv_tensor_alias(w); /* carries the key, not the record */
    assert_false(kv_vmap_is_batched(al));
    assert_null(kv_neg(al));
    assert_int_equal(kv_last_error(), KV_ERR_INTERNAL);
    assert_int_equal(kv_vmap_batch_info(al, NULL, NULL, NULL), KV_ERR_INVALID_ARG);
    kv_tensor_release(al);
    kv_tensor_release(w);
    kv_tensor_release(a);
}

static void test_error_inplace_into_unbatched(void **state) {
    (void)state;
    kv_tensor *self = f32(SZ(2), 1), *other = f32(SZ(3, 2), 2);
    kv_tensor *before = kv_clone(self, NULL);
    kv_stack args = { (kv_ivalue[3]){ T(self), T(other), S(kv_scalar_int(1)) }, 3, 3 };
    kv_stack ret = { (kv_ivalue[KV_STACK_MAX]){ { 0 } }, 0, KV_STACK_MAX };
    assert_int_equal(kv_vmap_call(op_of("add_.Tensor"), &args, DIMS(N, 0, N), -1, 0, &ret), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(),
                           "vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a "
                           "Tensor `other` in extra_args that has more elements than `self`"));
    assert_bits_equal(self, before, "self untouched");
    kv_stack a2 = { (kv_ivalue[3]){ T(self), T(other), B(false) }, 3, 3 };
    assert_int_equal(kv_vmap_call(op_of("copy_"), &a2, DIMS(N, 0, N), -1, 0, &ret), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_vmap_current_level(), 0);
    kv_tensor_release(before);
    kv_tensor_release(self);
    kv_tensor_release(other);
}

static void test_levels(void **state) {
    (void)state;
    assert_int_equal(kv_vmap_current_level(), 0);
    assert_false(kv_keyset_has(kv_tls_get().included, KV_KEY_VMAP_MODE));
    int got[KV_VMAP_MAX_LEVELS];
    for (int i = 0; i < KV_VMAP_MAX_LEVELS; i++) {
        got[i] = kv_vmap_level_enter();
        assert_int_equal(got[i], i + 1);
    }
    assert_int_equal(kv_vmap_level_enter(), -1);
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    for (int i = KV_VMAP_MAX_LEVELS - 1; i >= 0; i--) assert_int_equal(kv_vmap_level_exit(got[i]), KV_OK);
    assert_int_equal(kv_vmap_current_level(), 0);
    assert_false(kv_keyset_has(kv_tls_get().included, KV_KEY_VMAP_MODE));
    assert_true(kv_vmap_has_rule("mm"));
    assert_false(kv_vmap_has_rule("cat"));
    assert_int_equal(kv_vmap_rule_calls("no_such_op"), 0);
}

int main(void) {
    /* Plugins and the raw registry API expect the runtime composed. */
    if (kv_init() != KV_OK) return 1;
    /* A batched call is compared bit for bit with per-slice calls, so both
     * must run the same kernel: the tuner may pick another CPU variant for
     * the batched shape, and variants agree only within the tolerance
     * table (gelu's SIMD forms by an ulp). */
    kv_tune_reference_mode_set(true);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_rules),
        cmocka_unit_test(test_binary_rules),
        cmocka_unit_test(test_zero_dim_promotion),
        cmocka_unit_test(test_reduction_rules),
        cmocka_unit_test(test_reduction_dim_errors),
        cmocka_unit_test(test_matmul_rules),
        cmocka_unit_test(test_mm_values),
        cmocka_unit_test(test_view_rules),
        cmocka_unit_test(test_view_aliases_physical),
        cmocka_unit_test(test_fallback_ops),
        cmocka_unit_test(test_fallback_inplace),
        cmocka_unit_test(test_unbatched_result_broadcasts),
        cmocka_unit_test(test_sum_values),
        cmocka_unit_test(test_nested_levels),
        cmocka_unit_test(test_error_batch_sizes_differ),
        cmocka_unit_test(test_error_in_dim_out_of_range),
        cmocka_unit_test(test_error_remove_level_not_present),
        cmocka_unit_test(test_error_inplace_into_unbatched),
        cmocka_unit_test(test_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
