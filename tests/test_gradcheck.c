/* gradcheck over the whole formula table: every row whose op this build
 * has needs a case here (small f64 inputs shaped for the op, positive
 * where the op needs it, away from kinks and ties where it has them),
 * and every case must pass. Then the check itself: a deliberately wrong
 * formula (a run-time op, and a swapped row of the table) must fail with
 * a message naming op, input, element and both values. */
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
#include "modes/autograd_internal.h"
#include "test_util.h"

#define IL(...) ((kv_int_list){ (const int64_t[]){ __VA_ARGS__ }, \
                                (int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)) })

/* ---- building a case's stack ---- */

typedef struct cb {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st;
    kv_tensor *own[32];
    int nown;
    int64_t ints[8][KV_MAX_DIMS];
    int nints;
    kv_tensor *lists[4][8];
    int nlists;
    uint64_t seed;
} cb;

static void cb_init(cb *b, uint64_t seed) {
    memset(b, 0, sizeof *b);
    b->st = kv_stack_on(b->slots, KV_STACK_MAX);
    b->seed = seed;
}

static void cb_free(cb *b) {
    for (int i = 0; i < b->nown; i++) kv_tensor_release(b->own[i]);
}

static kv_tensor *own(cb *b, kv_tensor *t) {
    if (t == NULL) fail_msg("making a case input: %s", kv_last_error_message());
    assert_true(b->nown < 32);
    b->own[b->nown++] = t;
    return t;
}

static uint64_t next_rand(cb *b) {
    b->seed = b->seed * 6364136223846793005ull + 1442695040888963407ull;
    return b->seed >> 33;
}

/* n distinct values spread over [lo, hi] in a shuffled order: ties and
 * values near a kink at 0 (for symmetric ranges) stay eps-far away. */
static kv_tensor *rnd(cb *b, kv_int_list shape, double lo, double hi) {
    int64_t n = 1;
    for (int d = 0; d < shape.n; d++) n *= shape.items[d];
    double v[256];
    assert_true(n <= 256);
    for (int64_t k = 0; k < n; k++) v[k] = lo + (hi - lo) * ((double)k + 0.5) / (double)n;
    for (int64_t k = n - 1; k > 0; k--) {
        int64_t j = (int64_t)(next_rand(b) % (uint64_t)(k + 1));
        double t = v[k];
        v[k] = v[j];
        v[j] = t;
    }
    return own(b, kv_tensor_from_data(v, shape.items, shape.n, KV_F64));
}

static kv_tensor *rnd_c(cb *b, kv_int_list shape) {
    int64_t n = 1;
    for (int d = 0; d < shape.n; d++) n *= shape.items[d];
    double v[128];
    assert_true(2 * n <= 128);
    for (int64_t k = 0; k < 2 * n; k++) v[k] = ((double)(next_rand(b) % 2000) - 1000.0) / 1000.0;
    return own(b, kv_tensor_from_data(v, shape.items, shape.n, KV_C128));
}

static kv_tensor *vals(cb *b, kv_int_list shape, kv_dtype dt, const void *data) {
    return own(b, kv_tensor_from_data(data, shape.items, shape.n, dt));
}

static void p_t(cb *b, kv_tensor *t) { kv_push_tensor(&b->st, t); }
static void p_none(cb *b) { kv_push_none(&b->st); }
static void p_int(cb *b, int64_t v) { kv_push_int(&b->st, v); }
static void p_bool(cb *b, bool v) { kv_push_bool(&b->st, v); }
static void p_double(cb *b, double v) { kv_push_double(&b->st, v); }
static void p_scalar(cb *b, kv_scalar v) { kv_push_scalar(&b->st, v); }
static void p_str(cb *b, const char *s) { kv_push_str(&b->st, s); }
static void p_ints(cb *b, kv_int_list l) {
    assert_true(b->nints < 8 && l.n <= KV_MAX_DIMS);
    int64_t *dst = b->ints[b->nints++];
    for (int i = 0; i < l.n; i++) dst[i] = l.items[i];
    kv_push_ints(&b->st, (kv_int_list){ dst, l.n });
}
static void p_list(cb *b, int n, kv_tensor *t0, kv_tensor *t1, kv_tensor *t2) {
    assert_true(b->nlists < 4);
    kv_tensor **l = b->lists[b->nlists++];
    l[0] = t0;
    l[1] = t1;
    l[2] = t2;
    kv_push_tensors(&b->st, (kv_tensor_list){ l, n });
}

/* ---- the cases ---- */

typedef void (*case_fn)(cb *b);

#define CASE(name) static void name(cb *b)

CASE(c_add) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_t(b, rnd(b, IL(3), -1, 1)); p_scalar(b, kv_scalar_int(2)); }
CASE(c_add_) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_t(b, rnd(b, IL(2, 3), -1, 1)); p_scalar(b, kv_scalar_double(1.5)); }
CASE(c_sub) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_t(b, rnd(b, IL(2, 1), -1, 1)); p_scalar(b, kv_scalar_double(0.5)); }
CASE(c_mul) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_t(b, rnd(b, IL(2, 3), -1, 1)); }
CASE(c_mul_complex) { p_t(b, rnd_c(b, IL(3))); p_t(b, rnd_c(b, IL(3))); }
CASE(c_mul_) { p_t(b, rnd(b, IL(3), -1, 1)); p_t(b, rnd(b, IL(3), -1, 1)); }
CASE(c_div) { p_t(b, rnd(b, IL(2, 2), -1, 1)); p_t(b, rnd(b, IL(2, 2), 0.5, 2)); }
CASE(c_div_complex) { p_t(b, rnd_c(b, IL(2))); p_t(b, own(b, kv_tensor_from_data((const double[]){ 1, 0.5, -0.5, 1.5 }, (const int64_t[]){ 2 }, 1, KV_C128))); }
static void max_min_inputs(cb *b) {
    kv_tensor *a = rnd(b, IL(5), -1, 1);
    const double off[5] = { 0.3, -0.2, 0.25, -0.35, 0.15 };
    kv_tensor *o = vals(b, IL(5), KV_F64, off);
    p_t(b, a);
    p_t(b, own(b, kv_add(a, o, kv_scalar_int(1))));
}
CASE(c_maximum) { max_min_inputs(b); }
CASE(c_minimum) { max_min_inputs(b); }
CASE(c_pow) { p_t(b, rnd(b, IL(3), 0.5, 2)); p_scalar(b, kv_scalar_double(2.5)); }
CASE(c_pow_int) { p_t(b, rnd(b, IL(3), -1.5, 1.5)); p_scalar(b, kv_scalar_int(3)); }
CASE(c_unary) { p_t(b, rnd(b, IL(2, 3), -1, 1)); }
CASE(c_unary_complex) { p_t(b, rnd_c(b, IL(3))); }
CASE(c_positive) { p_t(b, rnd(b, IL(2, 3), 0.5, 2)); }
CASE(c_kinked) { p_t(b, rnd(b, IL(2, 4), -1.2, 1.2)); }
CASE(c_gelu) { p_t(b, rnd(b, IL(2, 3), -2, 2)); p_str(b, "none"); }
CASE(c_gelu_tanh) { p_t(b, rnd(b, IL(2, 3), -2, 2)); p_str(b, "tanh"); }
CASE(c_clamp) {
    p_t(b, vals(b, IL(5), KV_F64, (const double[]){ -1, -0.3, 0.1, 0.4, 0.9 }));
    p_scalar(b, kv_scalar_double(-0.5));
    p_scalar(b, kv_scalar_double(0.5));
}
CASE(c_clamp_min_only) { p_t(b, vals(b, IL(3), KV_F64, (const double[]){ -1, -0.3, 0.4 })); p_scalar(b, kv_scalar_double(-0.5)); p_none(b); }
CASE(c_clamp_tensor) {
    p_t(b, vals(b, IL(4), KV_F64, (const double[]){ -1, 0.1, 0.4, 0.9 }));
    p_t(b, vals(b, IL(4), KV_F64, (const double[]){ -0.5, -0.5, 0.6, 0.2 }));
    p_t(b, vals(b, IL(4), KV_F64, (const double[]){ 0.5, 0.5, 0.8, 0.7 }));
}
CASE(c_where) {
    const bool cond[6] = { true, false, true, true, false, false };
    p_t(b, vals(b, IL(2, 3), KV_BOOL, cond));
    p_t(b, rnd(b, IL(2, 3), -1, 1));
    p_t(b, rnd(b, IL(3), -1, 1));
}
CASE(c_sum) { p_t(b, rnd(b, IL(2, 3, 2), -1, 1)); p_ints(b, IL(0, 2)); p_bool(b, false); p_none(b); }
CASE(c_sum_all) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_none(b); p_bool(b, true); p_none(b); }
CASE(c_mean) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_ints(b, IL(1)); p_bool(b, true); p_none(b); }
CASE(c_mean_all) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_none(b); p_bool(b, false); p_none(b); }
CASE(c_amax) { p_t(b, rnd(b, IL(3, 4), -1, 1)); p_ints(b, IL(1)); p_bool(b, false); }
CASE(c_amax_all) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_ints(b, IL()); p_bool(b, true); }
CASE(c_prod) { p_t(b, rnd(b, IL(3, 4), 0.5, 1.5)); p_int(b, 1); p_bool(b, false); p_none(b); }
CASE(c_prod_zero) {
    p_t(b, vals(b, IL(2, 3), KV_F64, (const double[]){ 0.5, 0, 2, 1.5, -1, 0.75 }));
    p_int(b, 0);
    p_bool(b, true);
    p_none(b);
}
CASE(c_mm) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_t(b, rnd(b, IL(3, 4), -1, 1)); }
CASE(c_mm_complex) { p_t(b, rnd_c(b, IL(2, 2))); p_t(b, rnd_c(b, IL(2, 3))); }
CASE(c_bmm) { p_t(b, rnd(b, IL(2, 2, 3), -1, 1)); p_t(b, rnd(b, IL(2, 3, 2), -1, 1)); }
CASE(c_addmm) {
    p_t(b, rnd(b, IL(4), -1, 1));
    p_t(b, rnd(b, IL(2, 3), -1, 1));
    p_t(b, rnd(b, IL(3, 4), -1, 1));
    p_scalar(b, kv_scalar_double(0.5));
    p_scalar(b, kv_scalar_double(2));
}
CASE(c_softmax) { p_t(b, rnd(b, IL(2, 4), -2, 2)); p_int(b, 1); p_bool(b, false); }
CASE(c_log_softmax) { p_t(b, rnd(b, IL(3, 2), -2, 2)); p_int(b, 0); p_bool(b, false); }
CASE(c_layer_norm) {
    p_t(b, rnd(b, IL(2, 3, 4), -2, 2));
    p_ints(b, IL(4));
    p_t(b, rnd(b, IL(4), 0.5, 1.5));
    p_t(b, rnd(b, IL(4), -1, 1));
    p_double(b, 1e-5);
}
CASE(c_layer_norm_2d) { p_t(b, rnd(b, IL(2, 2, 3), -2, 2)); p_ints(b, IL(2, 3)); p_none(b); p_none(b); p_double(b, 1e-5); }
CASE(c_group_norm) {
    p_t(b, rnd(b, IL(2, 4, 3), -2, 2));
    p_t(b, rnd(b, IL(4), 0.5, 1.5));
    p_t(b, rnd(b, IL(4), -1, 1));
    p_int(b, 2);
    p_int(b, 4);
    p_int(b, 3);
    p_int(b, 2);
    p_double(b, 1e-5);
}
CASE(c_cat) { p_list(b, 2, rnd(b, IL(2, 3), -1, 1), rnd(b, IL(1, 3), -1, 1), NULL); p_int(b, 0); }
CASE(c_cat_dim1) { p_list(b, 3, rnd(b, IL(2, 1), -1, 1), rnd(b, IL(2, 2), -1, 1), rnd(b, IL(2, 3), -1, 1)); p_int(b, -1); }
CASE(c_stack) { p_list(b, 2, rnd(b, IL(2, 3), -1, 1), rnd(b, IL(2, 3), -1, 1), NULL); p_int(b, 1); }
CASE(c_index_select) {
    p_t(b, rnd(b, IL(4, 3), -1, 1));
    p_int(b, 0);
    p_t(b, vals(b, IL(3), KV_I64, (const int64_t[]){ 2, 0, 2 }));
}
CASE(c_embedding) {
    p_t(b, rnd(b, IL(5, 3), -1, 1));
    p_t(b, vals(b, IL(2, 2), KV_I64, (const int64_t[]){ 1, 4, 1, 0 }));
    p_int(b, -1);
    p_bool(b, false);
    p_bool(b, false);
}
/* padding_idx and scale_grad_by_freq change the gradient on purpose (it
 * is no longer the derivative), so here they are set but inactive: the
 * padding row is never indexed and no index repeats. test_autograd
 * checks their effect by hand. */
CASE(c_embedding_pad) {
    p_t(b, rnd(b, IL(5, 2), -1, 1));
    p_t(b, vals(b, IL(4), KV_I64, (const int64_t[]){ 1, 4, 0, 3 }));
    p_int(b, 2);
    p_bool(b, true);
    p_bool(b, false);
}
CASE(c_fill) { p_t(b, rnd(b, IL(3), -1, 1)); p_scalar(b, kv_scalar_double(2)); }
CASE(c_copy) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_t(b, rnd(b, IL(3), -1, 1)); p_bool(b, false); }
CASE(c_clone) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_none(b); }
CASE(c_contiguous) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_int(b, 0); }
CASE(c_to_copy) {
    static const kv_dtype c128 = KV_C128;
    p_t(b, rnd(b, IL(3), -1, 1));
    kv_push_opt_dtype(&b->st, &c128);
    p_none(b);
    p_none(b);
    p_none(b);
    p_bool(b, false);
    p_none(b);
}
CASE(c_view) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_ints(b, IL(3, 2)); }
CASE(c_reshape) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_ints(b, IL(-1)); }
CASE(c_transpose) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_int(b, 0); p_int(b, -1); }
CASE(c_permute) { p_t(b, rnd(b, IL(2, 3, 2), -1, 1)); p_ints(b, IL(2, 0, 1)); }
CASE(c_select) { p_t(b, rnd(b, IL(3, 4), -1, 1)); p_int(b, 1); p_int(b, -1); }
CASE(c_slice) { p_t(b, rnd(b, IL(5, 2), -1, 1)); p_int(b, 0); p_int(b, 1); p_none(b); p_int(b, 2); }
CASE(c_squeeze) { p_t(b, rnd(b, IL(2, 1, 3), -1, 1)); }
CASE(c_squeeze_dim) { p_t(b, rnd(b, IL(2, 1, 3), -1, 1)); p_int(b, 1); }
CASE(c_unsqueeze) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_int(b, 0); }
CASE(c_expand) { p_t(b, rnd(b, IL(3, 1), -1, 1)); p_ints(b, IL(2, 3, 4)); p_bool(b, false); }
CASE(c_as_strided) { p_t(b, rnd(b, IL(6), -1, 1)); p_ints(b, IL(2, 2)); p_ints(b, IL(1, 2)); p_int(b, 1); }
CASE(c_as_strided_overlap) { p_t(b, rnd(b, IL(4), -1, 1)); p_ints(b, IL(3, 2)); p_ints(b, IL(1, 1)); p_none(b); }
CASE(c_unfold) { p_t(b, rnd(b, IL(2, 5), -1, 1)); p_int(b, 1); p_int(b, 2); p_int(b, 1); }
/* The mask broadcasts self from [3] to [2, 3]: self's gradient is the sum
 * of the unmasked rows. */
CASE(c_masked_fill) {
    p_t(b, rnd(b, IL(3), -1, 1));
    p_t(b, vals(b, IL(2, 3), KV_BOOL, (const bool[]){ true, false, false, false, true, false }));
    p_scalar(b, kv_scalar_double(2));
}
CASE(c_masked_fill_) {
    p_t(b, rnd(b, IL(2, 3), -1, 1));
    p_t(b, vals(b, IL(3), KV_BOOL, (const bool[]){ false, true, false }));
    p_scalar(b, kv_scalar_double(-1));
}
/* Prepended dims and tiles in every dim: each input element gets the sum
 * of its 12 copies' gradients. */
/* The samples do not depend on self's values: a zero gradient, with
 * every evaluation drawing from the same generator state. */
CASE(c_bernoulli) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_double(b, 0.5); p_none(b); }
CASE(c_repeat) { p_t(b, rnd(b, IL(2, 3), -1, 1)); p_ints(b, IL(2, 3, 2)); }
/* foreach: elements of different shapes, other[1] broadcast into self[1]'s
 * shape (its gradient is the reduction), a complex alpha on real lists is
 * refused, so a real one. */
CASE(c_foreach_add) {
    p_list(b, 2, rnd(b, IL(2, 3), -1, 1), rnd(b, IL(4), -1, 1), NULL);
    p_list(b, 2, rnd(b, IL(2, 3), -1, 1), rnd(b, IL(1), -1, 1), NULL);
    p_scalar(b, kv_scalar_double(-1.5));
}
CASE(c_foreach_add_) {
    p_list(b, 3, rnd(b, IL(3), -1, 1), rnd(b, IL(2, 2), -1, 1), rnd(b, IL(1), -1, 1));
    p_list(b, 3, rnd(b, IL(3), -1, 1), rnd(b, IL(2), -1, 1), rnd(b, IL(1), -1, 1));
    p_scalar(b, kv_scalar_int(3));
}
CASE(c_foreach_mul) { p_list(b, 2, rnd(b, IL(2, 3), -1, 1), rnd_c(b, IL(3)), NULL); p_scalar(b, kv_scalar_complex(0.5, -2)); }

typedef struct gc_case {
    const char *op;
    case_fn build;
} gc_case;

static const gc_case k_cases[] = {
    { "add.Tensor", c_add },
    { "add_.Tensor", c_add_ },
    { "sub.Tensor", c_sub },
    { "mul.Tensor", c_mul },
    { "mul.Tensor", c_mul_complex },
    { "mul_.Tensor", c_mul_ },
    { "div.Tensor", c_div },
    { "div.Tensor", c_div_complex },
    { "maximum", c_maximum },
    { "minimum", c_minimum },
    { "pow.Tensor_Scalar", c_pow },
    { "pow.Tensor_Scalar", c_pow_int },
    { "neg", c_unary },
    { "abs", c_kinked },
    { "abs", c_unary_complex },
    { "exp", c_unary },
    { "exp", c_unary_complex },
    { "log", c_positive },
    { "sqrt", c_positive },
    { "rsqrt", c_positive },
    { "sin", c_unary },
    { "cos", c_unary },
    { "cos", c_unary_complex },
    { "tanh", c_unary },
    { "sigmoid", c_unary },
    { "relu", c_kinked },
    { "gelu", c_gelu },
    { "gelu", c_gelu_tanh },
    { "silu", c_unary },
    { "clamp", c_clamp },
    { "clamp", c_clamp_min_only },
    { "clamp.Tensor", c_clamp_tensor },
    { "clamp_.Tensor", c_clamp_tensor },
    { "where.self", c_where },
    { "masked_fill.Scalar", c_masked_fill },
    { "masked_fill_.Scalar", c_masked_fill_ },
    { "repeat", c_repeat },
    { "bernoulli.p", c_bernoulli },
    { "_foreach_add.List", c_foreach_add },
    { "_foreach_add_.List", c_foreach_add_ },
    { "_foreach_mul.Scalar", c_foreach_mul },
    { "sum.dim_IntList", c_sum },
    { "sum.dim_IntList", c_sum_all },
    { "mean.dim", c_mean },
    { "mean.dim", c_mean_all },
    { "amax", c_amax },
    { "amax", c_amax_all },
    { "prod.dim_int", c_prod },
    { "prod.dim_int", c_prod_zero },
    { "mm", c_mm },
    { "mm", c_mm_complex },
    { "bmm", c_bmm },
    { "addmm", c_addmm },
    { "_softmax", c_softmax },
    { "_log_softmax", c_log_softmax },
    { "native_layer_norm", c_layer_norm },
    { "native_layer_norm", c_layer_norm_2d },
    { "native_group_norm", c_group_norm },
    { "cat", c_cat },
    { "cat", c_cat_dim1 },
    { "stack", c_stack },
    { "index_select", c_index_select },
    { "embedding", c_embedding },
    { "embedding", c_embedding_pad },
    { "fill_.Scalar", c_fill },
    { "zero_", c_unary },
    { "copy_", c_copy },
    { "clone", c_clone },
    { "contiguous", c_contiguous },
    { "_to_copy", c_to_copy },
    { "view", c_view },
    { "reshape", c_reshape },
    { "_unsafe_view", c_view },
    { "transpose.int", c_transpose },
    { "t", c_unary },
    { "permute", c_permute },
    { "select.int", c_select },
    { "slice.Tensor", c_slice },
    { "squeeze", c_squeeze },
    { "squeeze.dim", c_squeeze_dim },
    { "unsqueeze", c_unsqueeze },
    { "expand", c_expand },
    { "as_strided", c_as_strided },
    { "as_strided", c_as_strided_overlap },
    { "unfold", c_unfold },
    { "conj", c_unary_complex },
    { "_conj", c_unary_complex },
    { "conj_physical", c_unary_complex },
    { "resolve_conj", c_unary_complex },
    { "_neg_view", c_unary },
    { "_neg_view", c_unary_complex },
    { "resolve_neg", c_unary },
};

#define NCASES ((int)(sizeof k_cases / sizeof k_cases[0]))

static const kv_op *find_op(const char *name) {
    const kv_op *op = kv_op_find(name);
    if (op == NULL) kv_error_clear();
    return op;
}

/* Every row of the table whose op exists has at least one case. */
static void test_every_formula_has_a_case(void **state) {
    (void)state;
    int missing = 0, rows = 0;
    for (int i = 0; i < kv_autograd_formula_count(); i++) {
        const char *name = kv_autograd_formula_op(i);
        if (find_op(name) == NULL) {
            print_message("formula row %s: op not in this build, skipped\n", name);
            continue;
        }
        rows++;
        bool found = false;
        for (int k = 0; k < NCASES && !found; k++) found = strcmp(k_cases[k].op, name) == 0;
        if (!found) {
            print_error("formula row %s has no gradcheck case\n", name);
            missing++;
        }
        assert_true(kv_autograd_has_formula(find_op(name)));
    }
    if (missing) fail_msg("%d formula rows have no case (listed above)", missing);
    assert_true(rows >= 60);
}

static void test_gradcheck_every_formula(void **state) {
    (void)state;
    int failed = 0;
    for (int k = 0; k < NCASES; k++) {
        const kv_op *op = find_op(k_cases[k].op);
        if (op == NULL) continue;
        cb b;
        cb_init(&b, 0x1234u + (uint64_t)k);
        k_cases[k].build(&b);
        kv_gradcheck_result r;
        kv_status st = kv_gradcheck(op, &b.st, NULL, &r);
        if (st != KV_OK) {
            print_error("case %d (%s): %s: %s\n", k, k_cases[k].op, kv_status_name(st), kv_last_error_message());
            failed++;
        } else if (!r.passed || !r.ran || r.elements_checked == 0) {
            print_error("case %d (%s): passed %d ran %d, %lld elements\n", k, k_cases[k].op, r.passed, r.ran,
                        (long long)r.elements_checked);
            failed++;
        }
        cb_free(&b);
    }
    if (failed) fail_msg("%d of %d gradcheck cases failed (listed above)", failed, NCASES);
}

/* ---- the check must be able to fail ---- */

/* d(x^2) is 2 x grad; this says x grad. */
static kv_status f_wrong_square(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_saved(c, 0))));
    return KV_OK;
}

static kv_status f_right_square(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_scale(c, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_saved(c, 0))), 2.0));
    return KV_OK;
}

static const kv_ag_formula k_wrong_row = { "kvt_gc_square", "SquareBackward0", f_wrong_square, KV_AG_BIT(0), 0, 0 };
static const kv_ag_formula k_right_row = { "kvt_gc_square", "SquareBackward0", f_right_square, KV_AG_BIT(0), 0, 0 };

static void test_wrong_formula_fails(void **state) {
    (void)state;
    const kv_op *op = NULL;
    assert_int_equal(kv_op_register("kvt_gc_square(Tensor self) -> Tensor", &op), KV_OK);
    assert_int_equal(kv_register_kernel("kvt_gc_square", KV_KEY_CPU, kv_test_kernel_square), KV_OK);
    assert_int_equal(kv_ag_register_formula(op, &k_wrong_row), KV_OK);

    cb b;
    cb_init(&b, 99);
    p_t(&b, vals(&b, IL(3), KV_F64, (const double[]){ 1.5, -0.5, 2 }));
    kv_gradcheck_result r;
    kv_status st = kv_gradcheck(op, &b.st, NULL, &r);
    assert_int_equal(st, KV_ERR_INVALID_ARG);
    assert_true(r.ran);
    assert_false(r.passed);
    assert_int_equal(r.slot, 0);
    assert_int_equal(r.list_index, -1);
    assert_int_equal(r.element, 0);
    /* the wrong formula gives exactly half the true derivative */
    assert_true(fabs(2.0 * r.analytical - r.numerical) < 1e-6 * fabs(r.numerical));
    const char *m = kv_last_error_message();
    assert_string_equal(m, r.message);
    assert_non_null(strstr(m, "kvt_gc_square"));
    assert_non_null(strstr(m, "'self'"));
    assert_non_null(strstr(m, "element 0"));
    assert_non_null(strstr(m, "analytical"));
    assert_non_null(strstr(m, "numerical"));

    /* the right formula passes */
    assert_int_equal(kv_ag_register_formula(op, &k_right_row), KV_OK);
    assert_int_equal(kv_gradcheck(op, &b.st, NULL, &r), KV_OK);
    assert_true(r.passed);
    assert_int_equal(r.elements_checked, 3);
    cb_free(&b);
}

/* Swapping one row of the table (exp's) is caught, and restoring it heals. */
static void test_swapped_formula_fails(void **state) {
    (void)state;
    const kv_op *exp_op = find_op("exp");
    assert_non_null(exp_op);
    static const kv_ag_formula sin_as_exp = { "exp", "ExpBackward0", kv_ag_f_sin, KV_AG_BIT(0), 0, 0 };
    assert_int_equal(kv_ag_register_formula(exp_op, &sin_as_exp), KV_OK);
    cb b;
    cb_init(&b, 7);
    p_t(&b, rnd(&b, IL(2, 2), -1, 1));
    kv_gradcheck_result r;
    assert_int_equal(kv_gradcheck(exp_op, &b.st, NULL, &r), KV_ERR_INVALID_ARG);
    assert_false(r.passed);
    assert_non_null(strstr(r.message, "exp"));
    assert_int_equal(kv_ag_register_formula(exp_op, NULL), KV_OK);
    assert_int_equal(kv_gradcheck(exp_op, &b.st, NULL, &r), KV_OK);
    assert_true(r.passed);
    cb_free(&b);
}

/* A forward that fails is an error of its own, not a mismatch. */
static void test_forward_error_is_not_a_mismatch(void **state) {
    (void)state;
    cb b;
    cb_init(&b, 3);
    p_t(&b, rnd(&b, IL(2, 3), -1, 1));
    p_t(&b, rnd(&b, IL(2, 3), -1, 1));
    kv_gradcheck_result r;
    assert_int_equal(kv_gradcheck(find_op("mm"), &b.st, NULL, &r), KV_ERR_SHAPE);
    assert_false(r.ran);
    assert_false(r.passed);
    /* a wrong argument count */
    b.st.size = 1;
    assert_int_equal(kv_gradcheck(find_op("mm"), &b.st, NULL, &r), KV_ERR_INVALID_ARG);
    cb_free(&b);
}

/* The callable form, on compositions: resolve_neg / resolve_conj of a
 * tensor that carries the bit, and a small chain. */
static kv_status fn_resolve(void *ctx, kv_tensor *const *in, int n, kv_tensor **outs, int *nout) {
    (void)ctx;
    (void)n;
    kv_tensor *nv = kv__neg_view(in[0]);
    kv_tensor *cv = kv_conj(in[1]);
    outs[0] = nv ? kv_resolve_neg(nv) : NULL;
    outs[1] = cv ? kv_resolve_conj(cv) : NULL;
    kv_tensor_release(nv);
    kv_tensor_release(cv);
    *nout = 2;
    if (outs[0] == NULL || outs[1] == NULL) {
        kv_tensor_release(outs[0]);
        kv_tensor_release(outs[1]);
        *nout = 0;
        return kv_last_error();
    }
    return KV_OK;
}

static kv_status fn_chain(void *ctx, kv_tensor *const *in, int n, kv_tensor **outs, int *nout) {
    (void)ctx;
    (void)n;
    kv_tensor *a = kv_tanh(in[0]);
    kv_tensor *b = a ? kv_mm(a, in[1]) : NULL;
    outs[0] = b ? kv__log_softmax(b, 1, false) : NULL;
    kv_tensor_release(a);
    kv_tensor_release(b);
    *nout = outs[0] ? 1 : 0;
    return outs[0] ? KV_OK : kv_last_error();
}

static void test_callable_form(void **state) {
    (void)state;
    cb b;
    cb_init(&b, 11);
    kv_tensor *in[2] = { rnd(&b, IL(3), -1, 1), rnd_c(&b, IL(2)) };
    kv_gradcheck_result r;
    if (kv_gradcheck_fn_run("resolve", fn_resolve, NULL, in, 2, NULL, &r) != KV_OK) fail_msg("%s", kv_last_error_message());
    assert_true(r.passed);
    assert_int_equal(r.elements_checked, 3 + 2 * 2);
    kv_tensor *in2[2] = { rnd(&b, IL(2, 3), -1, 1), rnd(&b, IL(3, 2), -1, 1) };
    if (kv_gradcheck_fn_run("chain", fn_chain, NULL, in2, 2, NULL, &r) != KV_OK) fail_msg("%s", kv_last_error_message());
    assert_true(r.passed);
    cb_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_formula_has_a_case),
        cmocka_unit_test(test_gradcheck_every_formula),
        cmocka_unit_test(test_wrong_formula_fails),
        cmocka_unit_test(test_swapped_formula_fails),
        cmocka_unit_test(test_forward_error_is_not_a_mismatch),
        cmocka_unit_test(test_callable_form),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
