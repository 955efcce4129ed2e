/* The tolerance table: one row per op x output-dtype class, each with the
 * reason its rule is right (runner/tolerance.h). */
#include "runner/check/tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/case/case_args.h"

#define D(dt) (1u << (dt))
#define T_HALF (D(KV_F16) | D(KV_BF16))
#define T_SINGLE (D(KV_F32) | D(KV_F64))
#define T_FLOAT (T_HALF | T_SINGLE)
#define T_COMPLEX (D(KV_C64) | D(KV_C128))
#define T_INEXACT (T_FLOAT | T_COMPLEX)

/* Reasons used by several rows. */
#define R_INT "integer and bool results wrap identically in every implementation: bitwise"
#define R_COPY "copies and conversions round each value once to nearest even, or move it untouched: bitwise"
#define R_VIEW "views and selections move values without arithmetic: bitwise"
#define R_ONE_OP                                                                                  \
    "one IEEE operation per element, correctly rounded; the reference rounds the exact double "   \
    "result once, and double rounding through f64 (or f32 for f16/bf16) is innocuous for "        \
    "+-*/ because 53 >= 2*24+2 and 24 >= 2*11+2: bitwise"
#define R_AXPY                                                                                    \
    "a + alpha*b rounds the product and then the sum in a float kernel (once with FMA) while the " \
    "golden is the exact value rounded once; with cancellation the ulp error is unbounded, so the " \
    "bound is gamma_2*(|a| + |alpha||b|) in the output dtype"
#define R_CPLX_MUL                                                                                \
    "a complex product is ac-bd + (ad+bc)i: two products and a sum per component in a float "     \
    "kernel, within 2u of |e| (Higham 3.6), 4u with FMA differences"
#define R_CPLX_LIBM                                                                               \
    "complex libm functions are accurate relative to the magnitude of the result, not per "       \
    "component: 8u of |e|"
#define R_LIBM_HALF                                                                               \
    "f16/bf16: a kernel computes in f32 (error well under 2^-13 relative) and rounds once to the " \
    "output, the reference rounds the double result once: at most 1 ulp apart"
#define R_LIBM_SINGLE                                                                             \
    "the reference computes in double and rounds once (<= 0.5 ulp + 2^-29 ulp); a correct float " \
    "kernel is within 1 ulp (glibc's documented bound for expf/logf/sinf/cosf/tanhf), and "       \
    "libm differences across versions add at most 0.5: 2 ulp"

#define R_SCATTER                                                                                 \
    "a scatter-add of gradient elements: each output is a sum of at most n = numel(grad) terms with "   \
    "non-negative weights, in an order a kernel may choose, so the bound is gamma_{n+1} times the op "  \
    "applied to |grad| (sum of |terms| per output); fill=exact keeps the sums exact: bitwise"

/* Elementwise transcendental rows: f16/bf16, f32/f64, complex. */
#define TRANSC(op)                                                                                   \
    { op, T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },     \
    { op, T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 2, KV_BOUND_NONE, true, false, false, R_LIBM_SINGLE }, \
    { op, T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 8, KV_BOUND_NONE, true, false, false, R_CPLX_LIBM }

#define EXACT(op, reason) { op, 0, KV_TOL_ALWAYS, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false, reason }

/* add/sub (and in-place add): bitwise for alpha = 1, a bound otherwise. */
#define AXPY_OP(op)                                                                                  \
    { op, T_INEXACT, KV_TOL_ALPHA_ONE, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false, R_ONE_OP }, \
    { op, T_INEXACT, KV_TOL_ALPHA_NOT_ONE, KV_CMP_BOUND, 0, KV_BOUND_AXPY, false, false, false, R_AXPY }, \
    EXACT(op, R_INT)

/* Reductions and matmul: a bound from the inputs; exact under fill=exact. */
#define BOUND_OP(op, kind, exact, reason)                                                            \
    { op, T_INEXACT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, kind, false, exact, false, reason }, EXACT(op, R_INT)

static const kv_tol_entry tol_table[] = {
    /* ---- factories ---- */
    { "empty.memory_format", 0, KV_TOL_ALWAYS, KV_CMP_META, 0, KV_BOUND_NONE, false, false, true,
      "empty returns uninitialized memory: only dtype and shape are specified" },
    EXACT("zeros", "constant values, exact in every dtype: bitwise"),
    EXACT("ones", "constant values, exact in every dtype: bitwise"),
    EXACT("full", "the fill value is converted once: bitwise"),
    EXACT("arange", "arange(end) holds the integers 0..end-1, exact in every dtype that holds end: bitwise"),
    /* ---- filling and copying ---- */
    EXACT("fill_.Scalar", R_COPY),
    EXACT("zero_", R_COPY),
    EXACT("copy_", R_COPY),
    EXACT("clone", R_COPY),
    EXACT("contiguous", R_COPY),
    EXACT("_to_copy", R_COPY),
    /* ---- binary arithmetic ---- */
    AXPY_OP("add.Tensor"),
    AXPY_OP("add_.Tensor"),
    AXPY_OP("sub.Tensor"),
    { "mul.Tensor", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false, R_ONE_OP },
    { "mul.Tensor", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 4, KV_BOUND_NONE, false, false, false, R_CPLX_MUL },
    EXACT("mul.Tensor", R_INT),
    { "mul_.Tensor", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false, R_ONE_OP },
    { "mul_.Tensor", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 4, KV_BOUND_NONE, false, false, false, R_CPLX_MUL },
    EXACT("mul_.Tensor", R_INT),
    { "div.Tensor", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false, R_ONE_OP },
    { "div.Tensor", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 8, KV_BOUND_NONE, false, false, false,
      "complex division (scaled, Smith's or C99's) is accurate to a few u of |e|, not per component: 8u" },
    EXACT("div.Tensor", R_INT),
    EXACT("maximum", "selects one of its inputs (NaN propagates): bitwise"),
    EXACT("minimum", "selects one of its inputs (NaN propagates): bitwise"),
    { "pow.Tensor_Scalar", T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },
    { "pow.Tensor_Scalar", T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 2, KV_BOUND_NONE, true, false, false,
      "the reference rounds libm's double pow once; powf is within 1 ulp in glibc, and kernels that "
      "special-case 2 or 0.5 (x*x, sqrt) are correctly rounded: 2 ulp" },
    { "pow.Tensor_Scalar", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 8, KV_BOUND_NONE, true, false, false, R_CPLX_LIBM },
    EXACT("pow.Tensor_Scalar", R_INT),
    /* ---- unary ---- */
    EXACT("neg", "negation flips the sign bit: bitwise"),
    { "abs", 0, KV_TOL_COMPLEX_INPUT, KV_CMP_ULP, 2, KV_BOUND_NONE, true, false, false,
      "abs of a complex number is hypot(re, im): the reference rounds the double result once, "
      "hypotf is within 1 ulp: 2 ulp" },
    EXACT("abs", "clears the sign bit: bitwise"),
    TRANSC("exp"),
    TRANSC("log"),
    { "sqrt", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false,
      "IEEE sqrt is correctly rounded, and double rounding is innocuous for sqrt (53 >= 2*24+2): bitwise" },
    { "sqrt", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 8, KV_BOUND_NONE, true, false, false, R_CPLX_LIBM },
    { "rsqrt", T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, false, false, false, R_LIBM_HALF },
    { "rsqrt", T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 2, KV_BOUND_NONE, false, false, false,
      "1/sqrt(x) rounds twice in a float kernel (0.5 + 0.5 ulp plus propagation) against the "
      "reference's single rounding: 2 ulp" },
    { "rsqrt", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 8, KV_BOUND_NONE, true, false, false, R_CPLX_LIBM },
    TRANSC("sin"),
    TRANSC("cos"),
    TRANSC("tanh"),
    { "sigmoid", T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },
    { "sigmoid", T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 4, KV_BOUND_NONE, true, false, false,
      "1/(1 + exp(-x)): exp within 1 ulp, then a sum of two positive terms and a reciprocal, two more "
      "roundings without cancellation: 4 ulp" },
    { "sigmoid", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 16, KV_BOUND_NONE, true, false, false,
      "complex exp (8u of |e|) followed by a complex sum and reciprocal: 16u of |e|" },
    EXACT("relu", "selects x or 0: bitwise"),
    { "gelu", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 8, KV_BOUND_EW_INPUT, true, false, false,
      "x*0.5*(1 + erf(x/sqrt 2)) cancels for x < 0: erf's 1 ulp near -1 becomes a large relative "
      "error of the result, so the bound is 8u*(|e| + |x|) (erf/tanh error times |x|/2, plus the "
      "roundings of the product)" },
    { "silu", T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },
    { "silu", T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 4, KV_BOUND_NONE, true, false, false,
      "x/(1 + exp(-x)): exp within 1 ulp, then a sum of positive terms and a division: 4 ulp" },
    EXACT("clamp", "selects x or a bound: bitwise"),
    EXACT("clamp_.Tensor", "selects x or a bound: bitwise"),
    /* ---- comparison and selection ---- */
    EXACT("where.self", "selects one of its inputs: bitwise"),
    EXACT("eq.Tensor", "a bool of an exact comparison: bitwise"),
    EXACT("lt.Tensor", "a bool of an exact comparison: bitwise"),
    /* ---- reductions ---- */
    BOUND_OP("sum.dim_IntList", KV_BOUND_SUM, true,
             "a sum of n terms in any order is within gamma_{n-1}*sum|x| of the exact sum, plus the "
             "reference's own rounding: gamma_{n+1}*sum|x|; fill=exact makes every partial sum exact: "
             "bitwise"),
    BOUND_OP("mean.dim", KV_BOUND_MEAN, false,
             "the sum's bound divided by n, plus the division's rounding: gamma_{n+2}*sum|x|/n; under "
             "fill=exact a kernel may still divide before summing, so no bitwise shortcut"),
    EXACT("amax", "selects an element (NaN first wins): bitwise"),
    EXACT("argmax", "an index, ties to the first: bitwise"),
    BOUND_OP("prod.dim_int", KV_BOUND_PROD, true,
             "a product of n terms in any order is within gamma_{n-1}*|p| of the exact product, plus "
             "the reference's rounding: gamma_{n+1}*|e|; fill=exact uses +-1: bitwise"),
    /* ---- matmul ---- */
    BOUND_OP("mm", KV_BOUND_MATMUL, true,
             "each output is a dot product of length K: within gamma_K*sum_k|a||b| in any order "
             "(Higham 3.5), plus the reference's rounding: gamma_{K+1}*sum_k|a||b|; fill=exact keeps "
             "|sum| <= 2^p: bitwise"),
    BOUND_OP("bmm", KV_BOUND_MATMUL, true,
             "per batch as mm: gamma_{K+1}*sum_k|a||b|; fill=exact: bitwise"),
    BOUND_OP("addmm", KV_BOUND_ADDMM, true,
             "beta*c + alpha*(a@b): the dot product's bound plus the scaling and the sum, "
             "gamma_{K+3}*(|beta||c| + |alpha|sum_k|a||b|); fill=exact: bitwise"),
    /* ---- normalization ---- */
    { "_softmax", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_SOFTMAX, true, false, false,
      "exp(x - max)/S: exp within 1 ulp, S a sum of n positive terms (gamma_n), one division: the "
      "result is within gamma_{n+6}*|e|" },
    { "_log_softmax", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_LOG_SOFTMAX, true, false, false,
      "(x - max) - log S: the subtraction's rounding scales with |x - max| <= |e| + log n and log S "
      "has absolute error gamma_{n+2}: within gamma_{n+6}*(|e| + 2 log n + 1)" },
    { "native_layer_norm", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_NORM, false, false, false,
      "mean and variance are sums of n terms; the variance's relative error grows with "
      "mean(x^2)/var (cancellation), and (x - mean)*rstd inherits it: see tol_bounds.c" },
    { "native_group_norm", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_NORM, false, false, false,
      "as native_layer_norm, with n = C/group * HxW per group: see tol_bounds.c" },
    /* ---- joining and indexing ---- */
    EXACT("cat", R_VIEW),
    EXACT("stack", R_VIEW),
    EXACT("index_select", R_VIEW),
    EXACT("embedding", R_VIEW),
    /* ---- views ---- */
    EXACT("view", R_VIEW),
    EXACT("reshape", R_VIEW),
    EXACT("_unsafe_view", R_VIEW),
    EXACT("transpose.int", R_VIEW),
    EXACT("t", R_VIEW),
    EXACT("permute", R_VIEW),
    EXACT("select.int", R_VIEW),
    EXACT("slice.Tensor", R_VIEW),
    EXACT("squeeze", R_VIEW),
    EXACT("squeeze.dim", R_VIEW),
    EXACT("unsqueeze", R_VIEW),
    EXACT("expand", R_VIEW),
    EXACT("as_strided", R_VIEW),
    EXACT("detach", R_VIEW),
    EXACT("unfold", R_VIEW),
    /* ---- functionalize ---- */
    EXACT("clamp.Tensor", "selects x or a bound: bitwise"),
    /* ---- lazy bits (outputs are materialized before comparing) ---- */
    EXACT("conj", "conjugation flips the sign bit of the imaginary part: bitwise"),
    EXACT("_conj", "conjugation flips the sign bit of the imaginary part: bitwise"),
    EXACT("conj_physical", "conjugation flips the sign bit of the imaginary part: bitwise"),
    EXACT("resolve_conj", "conjugation flips the sign bit of the imaginary part: bitwise"),
    EXACT("_neg_view", "negation flips the sign bit: bitwise"),
    EXACT("resolve_neg", "negation flips the sign bit: bitwise"),
    EXACT("is_conj", "a bool: bitwise"),
    EXACT("is_neg", "a bool: bitwise"),
    EXACT("_efficientzerotensor", "zeros: bitwise"),
    EXACT("_is_zerotensor", "a bool: bitwise"),
    /* ---- backward ---- */
    { "gelu_backward", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 8, KV_BOUND_GELU_BACKWARD, true, false, false,
      "grad*(Phi(x) + x*phi(x)) cancels near x = -0.75 where the derivative crosses zero, so the bound "
      "is 8u*(|e| + |grad|*(1 + |x|)): erf/exp errors of 1 ulp scaled by the terms' magnitudes" },
    BOUND_OP("as_strided_backward", KV_BOUND_LINEAR, true, R_SCATTER),
    BOUND_OP("unfold_backward", KV_BOUND_LINEAR, true, R_SCATTER),
    BOUND_OP("index_select_backward", KV_BOUND_LINEAR, true, R_SCATTER),
    /* scale_grad_by_freq divides each sum by its index's count: 1/3 is not
     * exact, so fill=exact gives no bitwise shortcut (issue 14, bug c). */
    { "embedding_dense_backward", T_INEXACT, KV_TOL_SCALE_GRAD_BY_FREQ, KV_CMP_BOUND, 0, KV_BOUND_LINEAR, false, false,
      false,
      "a scatter-add divided by the count of each index: a kernel sums (in any order) and divides, or "
      "scales each term by 1/count, within gamma_{n+1} of op(|grad|) (the golden is exact, so the +1 "
      "that covered the reference's own rounding now covers the division); the division is not exact "
      "(1/3), so fill=exact is not bitwise" },
    BOUND_OP("embedding_dense_backward", KV_BOUND_LINEAR, true, R_SCATTER),
};

#define TOL_N ((int)(sizeof tol_table / sizeof tol_table[0]))

int kv_tol_count(void) { return TOL_N; }
const kv_tol_entry *kv_tol_at(int i) { return i >= 0 && i < TOL_N ? &tol_table[i] : NULL; }

bool kv_tol_has_op(const char *op) {
    for (int i = 0; i < TOL_N; i++)
        if (strcmp(tol_table[i].op, op) == 0) return true;
    return false;
}

/* Whether the case's alpha is 1 (absent: the schema default, 1). */
static bool tol_alpha_is_one(const kv_case *c) {
    if (c == NULL) return true;
    const char *v = kv_case_arg_value(c, "alpha");
    if (v == NULL) return true;
    kv_scalar s;
    if (kv_scalar_parse(v, &s) != 0) return false;
    double re, im;
    kv_scalar_to_complex(s, &re, &im);
    return re == 1.0 && im == 0.0;
}

/* Whether a bool argument of the case is set (1 or true). */
static bool tol_arg_true(const kv_case *c, const char *name) {
    if (c == NULL) return false;
    const char *v = kv_case_arg_value(c, name);
    return v != NULL && (strcmp(v, "1") == 0 || strcmp(v, "true") == 0);
}

static bool tol_cond_holds(kv_tol_cond cond, const kv_case *c) {
    switch (cond) {
    case KV_TOL_ALWAYS: return true;
    case KV_TOL_ALPHA_ONE: return tol_alpha_is_one(c);
    case KV_TOL_ALPHA_NOT_ONE: return !tol_alpha_is_one(c);
    case KV_TOL_COMPLEX_INPUT: return c != NULL && c->ninputs > 0 && kv_dtype_is_complex(c->dtypes[0]);
    case KV_TOL_SCALE_GRAD_BY_FREQ: return tol_arg_true(c, "scale_grad_by_freq");
    }
    return false;
}

const kv_tol_entry *kv_tol_lookup(const char *op, kv_dtype out, const kv_case *c) {
    for (int i = 0; i < TOL_N; i++) {
        const kv_tol_entry *e = &tol_table[i];
        if (strcmp(e->op, op) != 0) continue;
        if (e->dtypes != 0 && !(e->dtypes & D(out))) continue;
        if (!tol_cond_holds(e->cond, c)) continue;
        return e;
    }
    return NULL;
}

double kv_unit_roundoff(kv_dtype dt) {
    switch (dt) {
    case KV_F16: return 0x1p-11;
    case KV_BF16: return 0x1p-8;
    case KV_F32:
    case KV_C64: return 0x1p-24;
    case KV_F64:
    case KV_C128: return 0x1p-53;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_DTYPE_COUNT: break;
    }
    return 0.0;
}

double kv_gamma(double n, double u) {
    const double nu = n * u;
    if (nu >= 1.0) return INFINITY;
    return nu / (1.0 - nu);
}

/* Every Scalar argument of the case is a small integer (or absent), so an
 * exact fill stays exact through the scaling. */
static bool tol_scalars_small_ints(const kv_case *c) {
    const kv_op *op = kv_op_find(c->op);
    if (op == NULL) return false;
    const kv_schema *s = kv_op_schema(op);
    for (int i = 0; i < c->nargs; i++) {
        const int a = kv_schema_arg_index(s, c->args[i].name);
        if (a < 0 || s->args[a].type.kind != KV_TYPE_SCALAR) continue;
        kv_scalar v;
        if (kv_scalar_parse(c->args[i].value, &v) != 0) return false;
        double re, im;
        kv_scalar_to_complex(v, &re, &im);
        if (im != 0.0 || re != floor(re) || fabs(re) > 4.0) return false;
    }
    return true;
}

static bool tol_override(const kv_case *c, kv_cmp_rule *r) {
    if (c == NULL) return false;
    memset(r, 0, sizeof *r);
    switch (c->tol.kind) {
    case KV_TOL_DEFAULT: return false;
    case KV_TOL_BITWISE: r->kind = KV_CMP_BITWISE; return true;
    case KV_TOL_ULP: r->kind = KV_CMP_ULP; break;
    case KV_TOL_ABS: r->kind = KV_CMP_ABS; break;
    case KV_TOL_REL: r->kind = KV_CMP_REL; break;
    }
    r->value = c->tol.value;
    return true;
}

kv_cmp_rule kv_tol_rule_for(const kv_case *c, kv_dtype out_dtype, kv_bound_kind *bound,
                            const kv_tol_entry **entry) {
    kv_cmp_rule r = { KV_CMP_BITWISE, 0.0, false, false };
    const kv_tol_entry *e = kv_tol_lookup(c->op, out_dtype, c);
    if (entry) *entry = e;
    if (bound) *bound = KV_BOUND_NONE;
    if (tol_override(c, &r)) {
        /* tol= sets the numbers, never the "values are unspecified" rule. */
        if (e != NULL && e->kind == KV_CMP_META) r.kind = KV_CMP_META;
        return r;
    }
    if (e == NULL) return r;
    r.kind = e->kind;
    switch (e->kind) {
    case KV_CMP_BITWISE:
    case KV_CMP_META: break;
    case KV_CMP_ULP: r.value = e->value; break;
    case KV_CMP_ABS: r.value = e->value; break;
    case KV_CMP_REL: r.value = e->value * kv_unit_roundoff(out_dtype); break;
    case KV_CMP_BOUND:
        r.value = e->value;
        if (bound) *bound = e->bound;
        break;
    }
    if (e->exact_fill_bitwise && c->fill == KV_FILL_EXACT && tol_scalars_small_ints(c)) {
        /* Exact results are order independent, except for the sign of a
         * zero sum (a kernel may start from the first term instead of +0). */
        r.kind = KV_CMP_BITWISE;
        r.value = 0.0;
        r.signed_zero_equal = true;
        if (bound) *bound = KV_BOUND_NONE;
    }
    return r;
}

kv_cmp_rule kv_tol_golden_rule(const kv_case *c, kv_dtype out_dtype) {
    kv_cmp_rule r = { KV_CMP_BITWISE, 0.0, false, false };
    const kv_tol_entry *e = kv_tol_lookup(c->op, out_dtype, c);
    if (tol_override(c, &r)) {
        if (e != NULL && e->kind == KV_CMP_META) r.kind = KV_CMP_META;
        return r;
    }
    if (e == NULL) return r;
    if (e->kind == KV_CMP_META) {
        r.kind = KV_CMP_META;
    } else if (e->golden_libm) {
        /* Same reference, same inputs: only libm can differ (across libc
         * versions), by one rounding of the double result. */
        if (kv_dtype_is_complex(out_dtype)) {
            r.kind = KV_CMP_REL;
            r.value = 4.0 * kv_unit_roundoff(out_dtype);
        } else {
            r.kind = KV_CMP_ULP;
            r.value = 1.0;
        }
    }
    return r;
}
