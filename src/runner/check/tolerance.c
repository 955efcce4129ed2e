/* The tolerance table: one row per op x output-dtype class, each with the
 * reason its rule is right (runner/tolerance.h). */
#include "runner/check/tolerance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/accel.h"
#include "ref/ref.h"
#include "runner/case/case_args.h"
#include "runner/exec/fill.h"

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
    "one IEEE operation per element: the truth is its correctly rounded value, which a correct "    \
    "kernel returns exactly, also when it computes f16/bf16 in f32 (or f32 in f64) and rounds "      \
    "again, because double rounding is innocuous for +-*/ when 24 >= 2*11+2 and 53 >= 2*24+2: "      \
    "bitwise"
#define R_AXPY                                                                                    \
    "a + alpha*b: a kernel that rounds the product and then the sum is within "                   \
    "u*|alpha*b| + u*|e| of the exact value (one FMA: correctly rounded); with cancellation that "  \
    "is unbounded in ulps, so the bound is gamma_2*(|a| + |alpha||b|) in the output dtype"
#define R_CPLX_MUL                                                                                \
    "a complex product ac-bd + (ad+bc)i in a float kernel: two products and a sum per component, "  \
    "within sqrt(5)u of |e| (Brent, Percival, Zimmermann 2007), so a component next to a "         \
    "cancellation is off in ulps but not relative to |e|: 4u of |e|"
#define R_CPLX_LIBM                                                                               \
    "complex math functions (C99 cexp, clog, csqrt, ...; CUDA's thrust::complex) are accurate "     \
    "relative to the magnitude of the result, not per component (a component near a zero of "     \
    "cos/sin is off in ulps): 8u of |e|"
#define R_LIBM_HALF                                                                               \
    "f16/bf16: a kernel computes in f32 or wider (CUDA's half math converts to float) with a "      \
    "relative error far below the output's, then rounds once: it returns the correctly rounded "   \
    "value, or its neighbour when the exact value lies that close to a rounding boundary: 1 ulp. " \
    "Measured: every CPU variant and SIM 0 ulp over all 2^16 patterns"
/* The f32/f64 elementwise rows state N against the correctly rounded truth:
 * CUDA's documented maximum ulp error (CUDA C++ Programming Guide,
 * "Mathematical Functions": the distance between the correctly rounded
 * result and the library's), glibc's documented bounds for the double
 * functions the CPU kernels call, and what the accuracy sweep measures
 * (README "Accuracy": 2^20 strata of the f32 patterns, 2^20 of the f64). */
#define R_EXP32                                                                                   \
    "CUDA's expf is within 2 ulp of the correctly rounded result; the CPU variants and SIM "       \
    "compute in double and round once: measured 0 ulp over 2^20 f32 strata: 2 ulp"
#define R_EXP64                                                                                   \
    "CUDA's exp and glibc's exp are within 1 ulp of the correctly rounded result; measured 1 ulp " \
    "(99.9%: 0) over 2^20 f64 strata: 1 ulp"
#define R_LOG32                                                                                   \
    "CUDA's logf is within 1 ulp; the CPU variants and SIM compute in double: measured 0: 1 ulp"
#define R_LOG64                                                                                   \
    "CUDA's log and glibc's log are within 1 ulp; measured 1 (99.9%: 0): 1 ulp"
#define R_TRIG32                                                                                  \
    "CUDA's sinf/cosf are within 2 ulp (full range); the CPU variants reduce in double: measured " \
    "0: 2 ulp"
#define R_TRIG64                                                                                  \
    "CUDA's sin/cos are within 2 ulp, glibc's within 1; measured 1 (99.9%: 0): 2 ulp"
#define R_TANH32                                                                                  \
    "CUDA's tanhf is within 2 ulp; the CPU variants compute in double: measured 0: 2 ulp"
#define R_TANH64                                                                                  \
    "glibc documents tanh within 2 ulp (CUDA's tanh: 1), and the sweep measures 2 in the "        \
    "reference: 2 ulp"
#define R_RSQRT32                                                                                 \
    "CUDA's rsqrtf is within 2 ulp; 1/sqrt(x) in double rounded once measures 0: 2 ulp"
#define R_RSQRT64                                                                                 \
    "1/sqrt(x) rounds twice (the root, then the quotient): within about 1u relative of the exact " \
    "value, which is 2 ulp just below a power of two; CUDA's rsqrt is within 1; measured 1: 2 ulp"
#define R_SIGMOID                                                                                 \
    "1/(1 + e^-x) (e^x/(1 + e^x) below 0, where e^-x overflows): exp's 2 ulp, then a sum of "      \
    "positive terms and a quotient, each 0.5 ulp and without cancellation: 4 ulp; measured 0 in "  \
    "f32, 1 in f64 (after the fix for x < -709.78)"
#define R_SILU                                                                                    \
    "x/(1 + e^-x) (x e^x/(1 + e^x) below 0): exp's 2 ulp, a sum of positive terms and a "          \
    "quotient: 4 ulp; measured 1 in f32 and f64"
#define R_POW32                                                                                   \
    "CUDA's powf is within 4 ulp of the correctly rounded result (the CPU variants and SIM "        \
    "compute in double: measured 0 for exponents 2, 0.5, 3, -1.5): 4 ulp"
#define R_POW64                                                                                   \
    "CUDA's pow is within 2 ulp, glibc's within 1; measured 1 (99.9%: 0): 2 ulp"

#define R_SCATTER                                                                                 \
    "a scatter-add of gradient elements: each output is a sum of at most n = numel(grad) terms with "   \
    "non-negative weights, in an order a kernel may choose, so the bound is gamma_{n+1} times the op "  \
    "applied to |grad| (sum of |terms| per output); fill=exact (quarters up to 4) keeps the sums "      \
    "exact when 16n <= 2^p, so not for long bf16 gradients (checked per case): bitwise"

/* Elementwise transcendental rows: f16/bf16, f32, f64, complex. */
#define TRANSC(op, n32, r32, n64, r64)                                                                \
    { op, T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },     \
    { op, D(KV_F32), KV_TOL_ALWAYS, KV_CMP_ULP, n32, KV_BOUND_NONE, true, false, false, r32 },         \
    { op, D(KV_F64), KV_TOL_ALWAYS, KV_CMP_ULP, n64, KV_BOUND_NONE, true, false, false, r64 },         \
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
    TRANSC("pow.Tensor_Scalar", 4, R_POW32, 2, R_POW64),
    EXACT("pow.Tensor_Scalar", R_INT),
    /* ---- unary ---- */
    EXACT("neg", "negation flips the sign bit: bitwise"),
    { "abs", 0, KV_TOL_COMPLEX_INPUT, KV_CMP_ULP, 2, KV_BOUND_NONE, true, false, false,
      "abs of a complex number is hypot(re, im): CUDA's hypotf/hypot and glibc's are within 1-2 ulp of "
      "the correctly rounded value (a naive sqrt(re^2 + im^2) without overflow is within 2): 2 ulp" },
    EXACT("abs", "clears the sign bit: bitwise"),
    TRANSC("exp", 2, R_EXP32, 1, R_EXP64),
    TRANSC("log", 1, R_LOG32, 1, R_LOG64),
    { "sqrt", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BITWISE, 0, KV_BOUND_NONE, false, false, false,
      "IEEE sqrt is correctly rounded (CUDA's sqrtf too, under the default -prec-sqrt=true), and "
      "double rounding through a wider format is innocuous for sqrt (53 >= 2*24+2): bitwise; measured 0" },
    { "sqrt", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 8, KV_BOUND_NONE, true, false, false, R_CPLX_LIBM },
    TRANSC("rsqrt", 2, R_RSQRT32, 2, R_RSQRT64),
    TRANSC("sin", 2, R_TRIG32, 2, R_TRIG64),
    TRANSC("cos", 2, R_TRIG32, 2, R_TRIG64),
    TRANSC("tanh", 2, R_TANH32, 2, R_TANH64),
    { "sigmoid", T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },
    { "sigmoid", T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 4, KV_BOUND_NONE, true, false, false, R_SIGMOID },
    { "sigmoid", T_COMPLEX, KV_TOL_ALWAYS, KV_CMP_REL, 16, KV_BOUND_NONE, true, false, false,
      "complex exp (8u of |e|) followed by a complex sum and reciprocal: 16u of |e|" },
    EXACT("relu", "selects x or 0: bitwise"),
    { "gelu", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 8, KV_BOUND_EW_INPUT, true, false, false,
      "x*0.5*(1 + erf(x/sqrt 2)) cancels for x < 0: erf's 2 ulp near -1 (CUDA's erff) become a large "
      "relative error of the result, so the bound is 8u*(|e| + |x|) (erf/tanh error times |x|/2, plus "
      "the roundings of the product); the sweep measures exactly that shape: 99.9% within 2 ulp for the "
      "SIMD variants (erfc form) but 2^26 ulp for the reference's 1 + erf form and up to 2^29 (f32) / "
      "2^62 (f64) where the result is tiny, all inside the bound" },
    { "silu", T_HALF, KV_TOL_ALWAYS, KV_CMP_ULP, 1, KV_BOUND_NONE, true, false, false, R_LIBM_HALF },
    { "silu", T_SINGLE, KV_TOL_ALWAYS, KV_CMP_ULP, 4, KV_BOUND_NONE, true, false, false, R_SILU },
    EXACT("clamp", "selects x or a bound: bitwise"),
    EXACT("clamp_.Tensor", "selects x or a bound: bitwise"),
    /* ---- comparison and selection ---- */
    EXACT("where.self", "selects one of its inputs: bitwise"),
    EXACT("eq.Tensor", "a bool of an exact comparison: bitwise"),
    EXACT("lt.Tensor", "a bool of an exact comparison: bitwise"),
    /* ---- reductions ---- */
    BOUND_OP("sum.dim_IntList", KV_BOUND_SUM, true,
             "a sum of n terms in any order is within gamma_{n-1}*sum|x| of the exact sum, plus the "
             "truth's own rounding: gamma_{n+1}*sum|x|; f16/bf16 accumulate in f32 and round once: "
             "2u|e|/(1-u) + (1+2u)*gamma_n(u_f32)*sum|x|; fill=exact makes every partial sum exact "
             "(R*n <= 2^p, checked per case): bitwise"),
    BOUND_OP("mean.dim", KV_BOUND_MEAN, false,
             "the sum's bound divided by n, plus the division's rounding and the truth's: gamma_{n+2}*sum|x|/n (f16/bf16: "
             "in f32, gamma_{n+1}(u_f32), then one rounding each: 2u|e|/(1-u)); under "
             "fill=exact a kernel may still divide before summing, so no bitwise shortcut"),
    EXACT("amax", "selects an element (NaN first wins): bitwise"),
    EXACT("argmax", "an index, ties to the first: bitwise"),
    BOUND_OP("prod.dim_int", KV_BOUND_PROD, true,
             "a product of n terms in any order is within gamma_{n-1}*|p| of the exact product, plus "
             "the truth's own rounding: gamma_{n+1}*|e|; fill=exact uses +-1: bitwise"),
    /* ---- matmul ---- */
    BOUND_OP("mm", KV_BOUND_MATMUL, true,
             "each output is a dot product of length K: within gamma_K*sum_k|a||b| in any order "
             "(Higham 3.5), plus the truth's own rounding: gamma_{K+1}*sum_k|a||b|; fill=exact keeps "
             "|sum| <= 2^p: bitwise"),
    BOUND_OP("bmm", KV_BOUND_MATMUL, true,
             "per batch as mm: gamma_{K+1}*sum_k|a||b|; fill=exact: bitwise"),
    BOUND_OP("addmm", KV_BOUND_ADDMM, true,
             "beta*c + alpha*(a@b): the dot product's bound plus the scaling and the sum, "
             "gamma_{K+3}*(|beta||c| + |alpha|sum_k|a||b|); fill=exact is bitwise only when "
             "|beta|*R + |alpha|*R^2*K <= 2^p (the fill sizes the dot product alone, so a scaling can "
             "leave the grid: checked per case)"),
    /* ---- normalization ---- */
    { "_softmax", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_SOFTMAX, true, false, false,
      "exp(x - max)/S: exp within 1 ulp, S a sum of n positive terms (gamma_n), one division: the "
      "result is within gamma_{n+6}*|e|" },
    { "_log_softmax", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_LOG_SOFTMAX, true, false, false,
      "(x - max) - log S: the subtraction's rounding scales with |x - max| <= |e| + log n and log S "
      "has absolute error gamma_{n+2}: within gamma_{n+6}*(|e| + 2 log n + 1)" },
    { "native_layer_norm", T_FLOAT, KV_TOL_ALWAYS, KV_CMP_BOUND, 0, KV_BOUND_NORM, false, false, false,
      "mean and variance are sums of n terms; a two-pass or Welford variance's relative error "
      "grows with sqrt(mean(x^2)/var), and (x - mean)*rstd inherits it: see tol_bounds.c" },
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
    /* ---- foreach, repeat, masked_fill, random ---- */
    EXACT("masked_fill.Scalar", "selects self or the value converted once to self's dtype: bitwise"),
    EXACT("masked_fill_.Scalar", "selects self or the value converted once to self's dtype: bitwise"),
    EXACT("repeat", R_VIEW),
    EXACT("bernoulli.p", "0 or 1 from an integer comparison of the generator's counter stream: bitwise"),
};

#define TOL_N ((int)(sizeof tol_table / sizeof tol_table[0]))

int kv_tol_count(void) { return TOL_N; }
const kv_tol_entry *kv_tol_at(int i) { return i >= 0 && i < TOL_N ? &tol_table[i] : NULL; }

/* An out= op computes its functional op and writes the result into out
 * (kernels/ref/ref_out.c): its rule is the functional op's. */
static const char *tol_op_of(const char *op) {
    const char *functional = kv_ref_out_functional(op);
    if (functional != NULL) return functional;
    /* A foreach op's output i is its element op on element i of each list
     * (kernels/ref/ref_foreach.c): its rule is that op's, and a bound reads
     * the lists' elements of the output's index (tol_bounds.c). */
    const char *element = kv_ref_foreach_element_op(op);
    return element ? element : op;
}

bool kv_tol_has_op(const char *op) {
    op = tol_op_of(op);
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
    op = tol_op_of(op);
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

/* Significand bits of a floating dtype (complex: per component). */
static int tol_precision(kv_dtype dt) {
    switch (kv_dtype_to_real(dt)) {
    case KV_F16: return 11;
    case KV_BF16: return 8;
    case KV_F32: return 24;
    default: return 53;
    }
}

static double tol_numel(const kv_case *c, int input) {
    double n = 1.0;
    for (int d = 0; d < c->shapes[input].ndim; d++) n *= (double)c->shapes[input].sizes[d];
    return n;
}

/* The exact fill's integer range R of input `input` (fill.c), 4 when the
 * plan cannot be made (then the largest the fill ever uses). */
static double tol_fill_range(const kv_case *c, int input) {
    const kv_op *op = kv_op_find(c->op);
    kv_fill_plan plan;
    if (op == NULL || input >= c->ninputs || kv_fill_plan_for(c, kv_op_schema(op), input, &plan) != KV_OK) return 4.0;
    return (double)plan.exact_range;
}

/* |value| of Scalar argument `name`, 1 when absent (alpha, beta). */
static double tol_scalar_abs(const kv_case *c, const char *name) {
    const char *v = kv_case_arg_value(c, name);
    kv_scalar s;
    if (v == NULL || kv_scalar_parse(v, &s) != 0) return 1.0;
    double re, im;
    kv_scalar_to_complex(s, &re, &im);
    return hypot(re, im);
}

/* Whether an exact fill really keeps every partial result of this case
 * on the output dtype's grid, so a kernel summing in any order returns the
 * exact (= correctly rounded) value: integers (or quarters) whose running
 * sums never pass 2^p. The fill sizes its ranges for the plain op
 * (fill.c); a scaling (addmm's alpha, beta) or a long scatter into a
 * narrow dtype can leave the grid, and then the bound applies instead. */
static bool tol_exact_fill_holds(const kv_case *c, const kv_tol_entry *e, kv_dtype out) {
    if (!tol_scalars_small_ints(c)) return false;
    const double grid = ldexp(1.0, tol_precision(out));
    /* A complex product's component is a sum of two real products. */
    const double cf = kv_dtype_is_complex(out) ? 2.0 : 1.0;
    switch (e->bound) {
    case KV_BOUND_PROD: return true; /* +-1 */
    case KV_BOUND_SUM: return tol_fill_range(c, 0) * tol_numel(c, 0) <= grid;
    case KV_BOUND_MATMUL: {
        const kv_shape *a = &c->shapes[0];
        const double k = a->ndim > 0 ? (double)a->sizes[a->ndim - 1] : 1.0;
        const double r = tol_fill_range(c, 0);
        return cf * r * r * k <= grid;
    }
    case KV_BOUND_ADDMM: {
        if (c->ninputs < 3) return false;
        const kv_shape *a = &c->shapes[1];
        const double k = a->ndim > 0 ? (double)a->sizes[a->ndim - 1] : 1.0;
        const double r = tol_fill_range(c, 1), rc = tol_fill_range(c, 0);
        return tol_scalar_abs(c, "beta") * rc + tol_scalar_abs(c, "alpha") * cf * r * r * k <= grid;
    }
    case KV_BOUND_LINEAR:
        /* Quarters k/4 with |k| <= 16: a sum of n is a multiple of 1/4 of
         * at most 16n quarters. */
        return 16.0 * tol_numel(c, 0) <= grid;
    default: return false;
    }
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
    if (e->exact_fill_bitwise && c->fill == KV_FILL_EXACT && tol_exact_fill_holds(c, e, out_dtype)) {
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

bool kv_tol_device_is_reference(kv_device d) {
    if (d.type == KV_DEVICE_CPU) return true;
    /* Accel computes with its target's kernels. */
    return d.type == KV_DEVICE_ACCEL && kv_accel_target() == KV_KEY_CPU;
}
