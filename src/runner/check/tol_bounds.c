/* Per-element error bounds computed in f64 from a case's inputs
 * (runner/tolerance.h, kv_tol_bounds).
 *
 * Notation: u is the unit roundoff of the OUTPUT dtype, gamma_n =
 * n*u/(1 - n*u) (Higham, "Accuracy and Stability of Numerical
 * Algorithms", 3.1), e the expected (reference) value. The sums of
 * magnitudes are computed in double from the same input values the
 * kernels read; their own rounding (relative 2^-53 per term) is far below
 * the bound. Every bound also gets gamma * (smallest normal): below the
 * normal range errors are absolute, not relative, and a kernel that
 * flushes or rounds subnormals differently must still pass when its result
 * is otherwise correct.
 *
 * Normalization (native_layer_norm, native_group_norm), per group of n
 * elements with mean m, variance v, A = mean|x|, Q = mean(x^2), rstd
 * r = 1/sqrt(v + eps), q = (Q + eps)/(v + eps):
 *   the mean's error |m' - m| <= gamma_{n+1} * A (a sum in any order,
 *   one division). A two-pass variance sums the squares of x - m':
 *   sum (x - m')^2 = sum (x - m)^2 + n (m' - m)^2 exactly (the
 *   deviations from m sum to 0), and the subtraction, the square, the
 *   n - 1 additions and the division give gamma_{n+3}, so
 *     |v' - v| <= gamma_{n+3} * v + (1 + gamma_{n+3}) * (gamma_{n+1} A)^2.
 *   Welford's update (and the pairwise merge of its partial moments)
 *   has relative error about n * u * sqrt(Q/v) (Chan, Golub and LeVeque,
 *   "Algorithms for computing the sample variance", 1983); relative to
 *   v + eps that is n * u * sqrt(Q/v) * v/(v + eps) <= n * u * sqrt(q),
 *   since Q v <= (Q + eps)(v + eps). sqrt(q) >= 1 also covers the two-pass
 *   gamma_{n+3}, so the relative error of v' + eps is within
 *     gamma_{2n+8} * q2,  q2 = sqrt(q) + (1 + g1) * (g1 A)^2 / ((v + eps) * gamma_{2n+8}),
 *   g1 = gamma_{n+1}, and r, which halves it and adds the square root's
 *   and the division's roundings, is off by at most that (the 2n+8
 *   leaves room for the roundings of x - m', of the products by r and
 *   w and of the bias). x - m' has absolute error gamma_{n+1} * A; so
 *   output 0 (y = (x - m) * r * w + b):
 *       gamma_{2n+8} * (q2 * (|e| + wmax * (1 + A * r)) + bmax)
 *   output 1 (mean):  gamma_{n+1} * A
 *   output 2 (rstd):  gamma_{2n+8} * q2 * |e|
 * wmax, bmax: the largest |weight| and |bias| (1 and 0 when absent).
 * A variance by E[x^2] - m^2 in working precision cancels: its error is
 * about gamma * Q, relative gamma * q, past q2 by sqrt(q) where the mean
 * is large against the spread (fill=shifted). The bound it meets,
 * q in place of q2, is kv_tol_bounds_one_pass's, for the classifier's
 * "variance by E[x^2] - E[x]^2"; the norm bound once was that one, and
 * passed such kernels. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "runner/check/check_util.h"
#include "runner/check/tolerance.h"
#include "kv/tune.h"

static double tb_min_normal(kv_dtype dt) {
    switch (kv_dtype_to_real(dt)) {
    case KV_F16: return 0x1p-14;
    case KV_BF16: return 0x1p-126;
    case KV_F32: return (double)FLT_MIN;
    default: return DBL_MIN;
    }
}

/* |element| at a multi-index, through explicit (maybe broadcast) strides. */
static double tb_mag(const kv_tensor *t, const int64_t *strides, const int64_t *idx) {
    const char *p = kv_tensor_data(t);
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * strides[d];
    p += off * (int64_t)kv_dtype_size(t->dtype);
    if (kv_dtype_is_complex(t->dtype)) {
        double re, im;
        kv_ref_load_c128(t->dtype, p, &re, &im);
        return hypot(re, im);
    }
    return fabs(kv_ref_load_f64(t->dtype, p));
}

/* Magnitude of the k-th element (row-major) of t. */
static double tb_mag_lin(const kv_tensor *t, int64_t k) {
    int64_t idx[KV_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = t->sizes[d] ? k % t->sizes[d] : 0;
        k = t->sizes[d] ? k / t->sizes[d] : 0;
    }
    return tb_mag(t, t->strides, idx);
}

/* The k-th element (row-major) of a real t, signed. */
static double tb_val_lin(const kv_tensor *t, int64_t k) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const int64_t sz = t->sizes[d];
        if (sz == 0) return 0.0;
        off += (k % sz) * t->strides[d];
        k /= sz;
    }
    return kv_ref_load_f64(t->dtype, (const char *)kv_tensor_data(t) + off * (int64_t)kv_dtype_size(t->dtype));
}

bool kv_tol_elem_finite(const kv_tensor *t, int64_t k) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (k % t->sizes[d]) * t->strides[d];
        k /= t->sizes[d];
    }
    double re, im;
    kv_ref_load_c128(t->dtype, (const char *)kv_tensor_data(t) + off * (int64_t)kv_dtype_size(t->dtype), &re, &im);
    return isfinite(re) && isfinite(im);
}

static bool tb_next(int64_t *idx, const int64_t *sizes, int nd) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* ---- argument access through the op schema ---- */

typedef struct tb_args {
    const kv_op *op;
    const kv_schema *s;
    const kv_case_inputs *in;
    /* A foreach op (a Tensor[] return, or a written Tensor[]): the output's index, whose element
     * of each list argument is the tensor the bound reads; -1 otherwise. */
    int element;
} tb_args;

static const kv_ivalue *tb_arg(const tb_args *a, const char *name) {
    const int i = kv_schema_arg_index(a->s, name);
    if (i < 0 || i >= a->in->nargs) return NULL;
    return &a->in->args[i];
}

static const kv_tensor *tb_tensor(const tb_args *a, const char *name) {
    const kv_ivalue *v = tb_arg(a, name);
    if (v && v->tag == KV_IV_TENSOR_LIST && a->element >= 0 && a->element < v->v.tensors.n)
        return v->v.tensors.items[a->element];
    return v && v->tag == KV_IV_TENSOR ? v->v.tensor : NULL;
}

static double tb_scalar_mag(const tb_args *a, const char *name, double dflt) {
    const kv_ivalue *v = tb_arg(a, name);
    if (v == NULL || v->tag != KV_IV_SCALAR) return dflt;
    double re, im;
    kv_scalar_to_complex(v->v.scalar, &re, &im);
    return hypot(re, im);
}

static bool tb_int(const tb_args *a, const char *name, int64_t *out) {
    const kv_ivalue *v = tb_arg(a, name);
    if (v == NULL || v->tag != KV_IV_INT) return false;
    *out = v->v.i;
    return true;
}

static double tb_double(const tb_args *a, const char *name, double dflt) {
    const kv_ivalue *v = tb_arg(a, name);
    return v && v->tag == KV_IV_DOUBLE ? v->v.d : dflt;
}

static int64_t tb_size_of_dim(const kv_tensor *x, int64_t dim) {
    if (x->ndim == 0) return 1;
    if (dim < 0) dim += x->ndim;
    if (dim < 0 || dim >= x->ndim) return -1;
    return x->sizes[dim];
}

static kv_status tb_missing(const char *op, const char *what) {
    return kv_error(KV_ERR_INVALID_ARG, "%s: cannot compute the error bound: %s", op, what);
}

/* ---- the bounds ---- */

/* sum/mean: S[k] = sum |x| over the elements reduced into output k.
 * acc_u: the unit roundoff of the accumulator. Where it is the output's
 * (f32, f64), the sum in any order is within gamma_{n+1} * S of the truth
 * (Higham 4.2, the +1 for the truth's own rounding; mean adds one for the
 * division). An f16/bf16 sum accumulates in f32 (PyTorch's acc_type: the
 * reference and every kernel here do), then rounds once: with x the exact
 * sum, x' the f32 one (|x' - x| <= gamma_n(u32) * S), the result
 * fl16(x') and the truth fl16(x) are each within u16 of their argument,
 * so they differ by at most u16 * (|x| + |x'|) + gamma_n(u32) * S <=
 * 2 * u16 * |e| / (1 - u16) + (1 + 2 * u16) * gamma_n(u32) * S. An f16
 * accumulator's gamma_n(u16) * S is about 2^13 times wider: on the
 * 63-element sums of cases/rounding.case it is 3% of S, and past 2048
 * (f16) or 256 (bf16) terms it is infinite. */
static kv_status tb_sum(const tb_args *a, const char *op, bool mean, double u, double acc_u,
                        const kv_tensor *e, double *b, int64_t nout) {
    const kv_tensor *x = tb_tensor(a, "self");
    if (x == NULL) return tb_missing(op, "no input 'self'");
    bool reduced[KV_MAX_DIMS] = { false };
    const kv_ivalue *dim = tb_arg(a, "dim");
    const bool all = dim == NULL || dim->tag == KV_IV_NONE || (dim->tag == KV_IV_INT_LIST && dim->v.ints.n == 0);
    for (int d = 0; d < x->ndim; d++) reduced[d] = all;
    if (!all && dim->tag == KV_IV_INT_LIST) {
        for (int i = 0; i < dim->v.ints.n; i++) {
            int64_t d = dim->v.ints.items[i];
            if (x->ndim == 0) continue;
            if (d < 0) d += x->ndim;
            if (d < 0 || d >= x->ndim) return tb_missing(op, "dim out of range");
            reduced[d] = true;
        }
    }
    int64_t n = 1, kept = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (reduced[d]) n *= x->sizes[d];
        else kept *= x->sizes[d];
    }
    if (kept != nout) return tb_missing(op, "output size does not match the reduction");
    for (int64_t k = 0; k < nout; k++) b[k] = 0.0;
    /* gamma times each |x| before the sum: Σ|x| of a finite sum near the
     * range's end (DBL_MAX - DBL_MAX/2 + ...) would overflow where
     * gamma·Σ|x| does not (gamma < 1/n for any n the suite reaches). */
    const bool wide = acc_u < u; /* an f32 accumulator under an f16/bf16 output */
    const double g = wide ? kv_gamma((double)n + (mean ? 1.0 : 0.0), acc_u)
                          : kv_gamma((double)n + (mean ? 2.0 : 1.0), u);
    if (kv_tensor_numel(x) > 0) {
        int64_t idx[KV_MAX_DIMS] = { 0 };
        do {
            int64_t o = 0;
            for (int d = 0; d < x->ndim; d++)
                if (!reduced[d]) o = o * x->sizes[d] + idx[d];
            b[o] += g * tb_mag(x, x->strides, idx);
        } while (tb_next(idx, x->sizes, x->ndim));
    }
    if (mean && n > 0)
        for (int64_t k = 0; k < nout; k++) b[k] /= (double)n;
    if (wide)
        for (int64_t k = 0; k < nout; k++) b[k] = 2.0 * u * tb_mag_lin(e, k) / (1.0 - u) + (1.0 + 2.0 * u) * b[k];
    return KV_OK;
}

/* The accumulator of a sum into `dt`: f32 for f16 and bf16 (tb_sum). */
static double tb_acc_u(kv_dtype dt) {
    const kv_dtype r = kv_dtype_to_real(dt);
    return r == KV_F16 || r == KV_BF16 ? kv_unit_roundoff(KV_F32) : kv_unit_roundoff(dt);
}

/* mm, bmm, addmm: S[.., i, j] = sum_k |a_ik||b_kj|. */
static kv_status tb_matmul(const tb_args *a, const char *op, bool addmm, double u, double *b, int64_t nout) {
    const kv_tensor *x = tb_tensor(a, addmm ? "mat1" : "self");
    const kv_tensor *y = tb_tensor(a, addmm ? "mat2" : "mat2");
    if (x == NULL || y == NULL || x->ndim < 2 || y->ndim != x->ndim) return tb_missing(op, "matrix inputs");
    const int nd = x->ndim;
    const int64_t batch = nd == 3 ? x->sizes[0] : 1;
    const int64_t m = x->sizes[nd - 2], kk = x->sizes[nd - 1], n = y->sizes[nd - 1];
    if (y->sizes[nd - 2] != kk || batch * m * n != nout) return tb_missing(op, "shapes do not match the output");
    int64_t ix[3], iy[3];
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t k = 0; k < kk; k++) {
                    if (nd == 3) {
                        ix[0] = p, ix[1] = i, ix[2] = k;
                        iy[0] = p, iy[1] = k, iy[2] = j;
                    } else {
                        ix[0] = i, ix[1] = k;
                        iy[0] = k, iy[1] = j;
                    }
                    s += tb_mag(x, x->strides, ix) * tb_mag(y, y->strides, iy);
                }
                b[(p * m + i) * n + j] = s;
            }
    if (!addmm) {
        const double g = kv_gamma((double)kk + 1.0, u);
        for (int64_t k = 0; k < nout; k++) b[k] *= g;
        return KV_OK;
    }
    const kv_tensor *c = tb_tensor(a, "self");
    if (c == NULL) return tb_missing(op, "no input 'self'");
    const int64_t out_sizes[2] = { m, n };
    int64_t cs[KV_MAX_DIMS];
    if (kv_broadcast_strides(c, out_sizes, 2, cs) != KV_OK) return tb_missing(op, "'self' does not broadcast");
    const double beta = tb_scalar_mag(a, "beta", 1.0), alpha = tb_scalar_mag(a, "alpha", 1.0);
    const double g = kv_gamma((double)kk + 3.0, u);
    /* kv_broadcast_strides gives strides for the 2 output dims; read c
     * through a 2-d view of itself. */
    kv_tensor c2 = *c;
    c2.ndim = 2;
    c2.sizes[0] = m;
    c2.sizes[1] = n;
    c2.strides[0] = cs[0];
    c2.strides[1] = cs[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            const int64_t idx[2] = { i, j };
            b[i * n + j] = g * (beta * tb_mag(&c2, c2.strides, idx) + alpha * b[i * n + j]);
        }
    return KV_OK;
}

/* An operand viewed at the output's shape (broadcast strides). */
static kv_status tb_bcast(const kv_tensor *t, const kv_tensor *out, int64_t *strides) {
    return kv_broadcast_strides(t, out->sizes, out->ndim, strides);
}

static kv_status tb_axpy(const tb_args *a, const char *op, double u, const kv_tensor *e, double *b) {
    const kv_tensor *x = tb_tensor(a, "self"), *y = tb_tensor(a, "other");
    if (x == NULL || y == NULL) return tb_missing(op, "inputs 'self' and 'other'");
    int64_t xs[KV_MAX_DIMS], ys[KV_MAX_DIMS];
    if (tb_bcast(x, e, xs) != KV_OK || tb_bcast(y, e, ys) != KV_OK) return tb_missing(op, "inputs do not broadcast");
    const double alpha = tb_scalar_mag(a, "alpha", 1.0), g = kv_gamma(2.0, u);
    kv_tensor xv = *x, yv = *y;
    xv.ndim = yv.ndim = e->ndim;
    memcpy(xv.sizes, e->sizes, sizeof xv.sizes);
    memcpy(yv.sizes, e->sizes, sizeof yv.sizes);
    int64_t idx[KV_MAX_DIMS] = { 0 }, k = 0;
    do {
        b[k++] = g * tb_mag(&xv, xs, idx) + g * alpha * tb_mag(&yv, ys, idx); /* scaled first: no overflow */
    } while (tb_next(idx, e->sizes, e->ndim));
    return KV_OK;
}

static kv_status tb_ew_input(const tb_args *a, const char *op, double c, double u, const kv_tensor *e, double *b) {
    const kv_tensor *x = tb_tensor(a, "self");
    if (x == NULL) return tb_missing(op, "input 'self'");
    int64_t xs[KV_MAX_DIMS];
    if (tb_bcast(x, e, xs) != KV_OK) return tb_missing(op, "input does not match the output");
    kv_tensor xv = *x;
    xv.ndim = e->ndim;
    memcpy(xv.sizes, e->sizes, sizeof xv.sizes);
    int64_t idx[KV_MAX_DIMS] = { 0 }, k = 0;
    do {
        b[k] = c * u * tb_mag_lin(e, k) + c * u * tb_mag(&xv, xs, idx); /* c·u < 1/2: each term and the sum finite */
        k++;
    } while (tb_next(idx, e->sizes, e->ndim));
    return KV_OK;
}

static kv_status tb_gelu_backward(const tb_args *a, const char *op, double c, double u, const kv_tensor *e,
                                  double *b) {
    const kv_tensor *g = tb_tensor(a, "grad_output"), *x = tb_tensor(a, "self");
    if (g == NULL || x == NULL) return tb_missing(op, "inputs 'grad_output' and 'self'");
    int64_t gs[KV_MAX_DIMS], xs[KV_MAX_DIMS];
    if (tb_bcast(g, e, gs) != KV_OK || tb_bcast(x, e, xs) != KV_OK) return tb_missing(op, "inputs do not broadcast");
    kv_tensor gv = *g, xv = *x;
    gv.ndim = xv.ndim = e->ndim;
    memcpy(gv.sizes, e->sizes, sizeof gv.sizes);
    memcpy(xv.sizes, e->sizes, sizeof xv.sizes);
    /* The |x| factor stands for the x·phi(x) term and the rounding of its
     * exponent, which vanish past |x| = 40: there phi(x) < 2^-1150, so
     * |x|^3 phi(x) < 2^-1130 and erfc, e^-2u and sech^2 of the tanh form
     * are below 2^-1100 too; the result is g (x > 0) or g times a value
     * below 2^-1100 (x < 0), within c·u·|g| of any faithful kernel. Capped
     * there, so |g|·|x| past DBL_MAX (g and x both near the range's end)
     * keeps a finite bound; c·u·41 < 1. */
    int64_t idx[KV_MAX_DIMS] = { 0 }, k = 0;
    do {
        const double xm = fmin(tb_mag(&xv, xs, idx), 40.0);
        b[k] = c * u * tb_mag_lin(e, k) + c * u * tb_mag(&gv, gs, idx) * (1.0 + xm);
        k++;
    } while (tb_next(idx, e->sizes, e->ndim));
    return KV_OK;
}

/* A linear op with non-negative weights applied to |its first tensor|
 * gives, per output, the sum of the magnitudes of the terms it adds. */
static kv_status tb_linear(const tb_args *a, const char *op, int output, double u, const kv_tensor *e, double *b,
                           int64_t *terms) {
    int first = -1;
    for (int i = 0; i < a->s->nargs && first < 0; i++)
        if (a->s->args[i].type.kind == KV_TYPE_TENSOR && !a->s->args[i].type.is_list) first = i;
    if (first < 0 || first >= a->in->nargs || a->in->args[first].tag != KV_IV_TENSOR)
        return tb_missing(op, "no tensor argument");
    const kv_tensor *g = a->in->args[first].v.tensor;
    kv_tensor *ag = kv_ref_copy_to_new(g, g->dtype);
    if (ag == NULL) return kv_last_error();
    char *p = kv_tensor_data(ag);
    const size_t item = kv_dtype_size(ag->dtype);
    const int64_t n = kv_tensor_numel(ag);
    for (int64_t k = 0; k < n; k++) {
        double re, im;
        kv_ref_load_c128(ag->dtype, p + k * (int64_t)item, &re, &im);
        kv_ref_store_c128(ag->dtype, p + k * (int64_t)item, hypot(re, im), 0.0);
    }
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < a->in->nargs; i++) {
        kv_ivalue v = a->in->args[i];
        if (i == first) v.v.tensor = ag;
        kv_stack_push(&st, v);
    }
    const bool was_ref = kv_tune_reference_mode_set(true); /* "ref", not a tuned variant */
    kv_status s = kv_redispatch(a->op, kv_keyset_of(KV_KEY_CPU), &st);
    kv_tune_reference_mode_set(was_ref);
    kv_tensor_release(ag);
    if (s != KV_OK) return kv_error_prefix(s, "%s: bound: the op on |%s| failed", op, a->s->args[first].name);
    const kv_tensor *o = output < st.size && st.slots[output].tag == KV_IV_TENSOR ? st.slots[output].v.tensor : NULL;
    const int64_t nout = kv_tensor_numel(e);
    if (o == NULL || kv_tensor_numel(o) != nout) {
        kv_stack_clear_returns(&st);
        return tb_missing(op, "the op on |grad| gave another output size");
    }
    const double gm = kv_gamma((double)n + 1.0, u);
    for (int64_t k = 0; k < nout; k++) b[k] = gm * tb_mag_lin(o, k);
    kv_stack_clear_returns(&st);
    *terms = n;
    return KV_OK;
}

static kv_status tb_softmax(const tb_args *a, const char *op, bool logsm, double u, const kv_tensor *e, double *b) {
    const kv_tensor *x = tb_tensor(a, "self");
    int64_t dim;
    if (x == NULL || !tb_int(a, "dim", &dim)) return tb_missing(op, "input 'self' and 'dim'");
    const int64_t n = tb_size_of_dim(x, dim);
    if (n < 0) return tb_missing(op, "dim out of range");
    const double g = kv_gamma((double)n + 6.0, u);
    const double extra = logsm ? 2.0 * log(n > 1 ? (double)n : 1.0) + 1.0 : 0.0;
    const int64_t numel = kv_tensor_numel(e);
    for (int64_t k = 0; k < numel; k++) b[k] = g * (tb_mag_lin(e, k) + extra);
    if (numel == 0 || n == 0 || kv_tensor_numel(x) != numel) return KV_OK;
    /* The rounding of x - max (issue 21): a kernel working in the output's
     * precision subtracts first, so d_j = x_j - max becomes d_j (1 + δ),
     * |δ| <= u, and exp(d_j (1 + δ)) = exp(d_j) (1 + ε_j) with
     * |ε_j| <= t_j = |d_j| u exp(|d_j| u) (|e^z - 1| <= |z| e^|z|). The
     * terms above hold only for |d| u small, which one-op cases with
     * inputs in [-2, 2) always have and attention logits do not.
     * softmax y_k = exp(d_k) / Σ_j exp(d_j) takes ε_k from its numerator
     * and Σ_j y_j ε_j from its denominator: |e_k| (t_k + S), S = Σ_j y_j t_j.
     * log_softmax d_k - log Σ_j exp(d_j) takes the absolute d_k δ (<= t_k)
     * and the log-sum's S, with y_j = exp(e_j): t_k + S. A slice with +inf
     * or NaN is NaN by the semantics and gets no term; a -inf element (a
     * mask) contributes exactly 0. */
    const int di = x->ndim ? (int)(dim < 0 ? dim + x->ndim : dim) : 0;
    int64_t in_sz = 1;
    for (int d = di + 1; d < x->ndim; d++) in_sz *= x->sizes[d];
    const int64_t outer = numel / (n * in_sz);
    double *t = malloc(sizeof(double) * 2 * (size_t)n);
    if (t == NULL) return kv_error(KV_ERR_OOM, "%s: bound: out of memory", op);
    double *ye = t + n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < in_sz; i++) {
            const int64_t base = o * n * in_sz + i;
            double mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) mx = fmax(mx, tb_val_lin(x, base + j * in_sz));
            if (!isfinite(mx)) continue;
            /* ye[j] bounds |y_j ε_j|. Where |d_j| u is large, t_j
             * overflows (and y_j may round to 0: 0 * inf is NaN), so the
             * absolute form takes over: for d_j <= 0, exp(d_j (1 + δ))
             * <= exp(-|d_j| (1 - u)), and S_true >= 1 (the max's term is
             * exp(0)), so |y_j ε_j| <= exp(-|d_j| (1 - u)): 0 in double
             * for the huge |d_j| of sweep and special fills. */
            double sum = 0.0;
            bool finite = true;
            for (int64_t j = 0; j < n && finite; j++) {
                const double xj = tb_val_lin(x, base + j * in_sz), ej = tb_val_lin(e, base + j * in_sz);
                const double d = fabs(xj - mx);
                finite = !isnan(xj) && !isnan(ej);
                const double yj = logsm ? exp(ej) : fabs(ej);
                t[j] = xj == -INFINITY ? 0.0 : d * u * exp(d * u); /* exp(-inf) = 0 exactly */
                ye[j] = xj == -INFINITY ? 0.0 : yj != 0.0 && isfinite(t[j]) ? yj * t[j] : exp(-d * (1.0 - u));
                /* log_softmax's own term is d_j δ: at most |d_j| u, finite */
                if (logsm && !isfinite(t[j])) t[j] = d * u;
                sum += ye[j];
            }
            if (!finite) continue;
            for (int64_t j = 0; j < n; j++) {
                const int64_t k = base + j * in_sz;
                b[k] += logsm ? t[j] + sum : ye[j] + tb_mag_lin(e, k) * sum;
            }
        }
    free(t);
    return KV_OK;
}

static kv_status tb_norm(const tb_args *a, const char *op, int output, double u, const kv_tensor *e, bool one_pass,
                         double *b) {
    const kv_tensor *x = tb_tensor(a, "input");
    const kv_tensor *w = tb_tensor(a, "weight"), *bias = tb_tensor(a, "bias");
    if (x == NULL) return tb_missing(op, "input 'input'");
    int64_t n = 1;
    const kv_ivalue *ns = tb_arg(a, "normalized_shape");
    if (ns != NULL && ns->tag == KV_IV_INT_LIST) {
        for (int i = 0; i < ns->v.ints.n; i++) n *= ns->v.ints.items[i];
    } else {
        int64_t c, hxw, group;
        if (!tb_int(a, "C", &c) || !tb_int(a, "HxW", &hxw) || !tb_int(a, "group", &group) || group <= 0)
            return tb_missing(op, "C, HxW and group");
        n = c / group * hxw;
    }
    const int64_t numel = kv_tensor_numel(x);
    if (n == 0 && numel == 0) {
        /* Normalized over no element (normalized_shape [0], C or HxW 0):
         * the output is empty and each group's statistics are 0/0, which
         * every kernel must give exactly as the reference does. */
        for (int64_t k = 0; k < kv_tensor_numel(e); k++) b[k] = 0.0;
        return KV_OK;
    }
    if (n <= 0 || numel % n != 0) return tb_missing(op, "the normalized size does not divide the input");
    const int64_t groups = numel / n;
    const int64_t nout = kv_tensor_numel(e);
    if ((output == 0 && nout != numel) || (output > 0 && nout != groups))
        return tb_missing(op, "output size does not match the groups");
    double wmax = 1.0, bmax = 0.0;
    if (w != NULL) {
        wmax = 0.0;
        for (int64_t k = 0; k < kv_tensor_numel(w); k++) wmax = fmax(wmax, tb_mag_lin(w, k));
    }
    if (bias != NULL)
        for (int64_t k = 0; k < kv_tensor_numel(bias); k++) bmax = fmax(bmax, tb_mag_lin(bias, k));
    const double eps = fabs(tb_double(a, "eps", 0.0));
    const double g1 = kv_gamma((double)n + 1.0, u), g2 = kv_gamma(2.0 * (double)n + 8.0, u);
    for (int64_t gi = 0; gi < groups; gi++) {
        /* The statistics of x/s, s the group's largest |x| when above 1:
         * a finite group of any magnitude (±DBL_MAX rows) has finite
         * sums; q and A·rstd are scale-free, A = s·A_s. Groups within
         * [-1, 1] keep s = 1 (eps/s² would overflow for tiny s). */
        double s = 1.0;
        for (int64_t k = gi * n; k < (gi + 1) * n; k++) {
            const double m = tb_mag_lin(x, k);
            if (isfinite(m) && m > s) s = m;
        }
        double sum = 0.0, sabs = 0.0, ssq = 0.0;
        for (int64_t k = gi * n; k < (gi + 1) * n; k++) {
            const double v = tb_val_lin(x, k) / s;
            sum += v;
            sabs += fabs(v);
            ssq += v * v;
        }
        const double es = eps / s / s;
        const double mean = sum / (double)n, A = sabs / (double)n, Q = ssq / (double)n;
        double var = Q - mean * mean;
        if (var < 0.0) var = 0.0;
        const double a_rstd = A / sqrt(var + es);
        const double q1 = (Q + es) / (var + es);
        const double q = one_pass ? q1 : sqrt(q1) + (1.0 + g1) * (g1 * A) * (g1 * A) / ((var + es) * g2);
        if (output == 0) {
            for (int64_t k = gi * n; k < (gi + 1) * n; k++)
                b[k] = g2 * (q * (tb_mag_lin(e, k) + wmax * (1.0 + a_rstd)) + bmax);
        } else if (output == 1) {
            b[gi] = g1 * A * s;
        } else {
            b[gi] = g2 * q * tb_mag_lin(e, gi);
        }
    }
    return KV_OK;
}

/* kv_tol_bounds, and with `working` the sums' bound for an accumulator in
 * the output's own precision, with `one_pass` the norms' bound for a
 * variance by E[x^2] - m^2. */
static kv_status tb_bounds(kv_bound_kind kind, double c_value, const kv_case *c, const kv_case_inputs *in,
                           const kv_tensor *expected, int output, bool working, bool one_pass, double **out) {
    *out = NULL;
    const kv_op *op = kv_op_find(c->op);
    if (op == NULL) return kv_last_error();
    if (kv_tensor_data(expected) == NULL && kv_tensor_numel(expected) > 0)
        return kv_error(KV_ERR_DEVICE, "%s: bound: expected output is not host-addressable", c->op);
    const int64_t nout = kv_tensor_numel(expected);
    double *b = calloc((size_t)(nout > 0 ? nout : 1), sizeof *b);
    if (b == NULL) return kv_error(KV_ERR_OOM, "%s: bound: out of memory for %lld doubles", c->op, (long long)nout);
    /* An empty output has no element to bound; the per-element walks
     * below (do-while over the output's index space) assume one. */
    if (nout == 0) {
        *out = b;
        return KV_OK;
    }
    const kv_schema *sch = kv_op_schema(op);
    const bool per_element = kv_schema_returns_list(sch) || kv_schema_mutable_list_arg(sch) >= 0;
    const tb_args a = { op, sch, in, per_element ? output : -1 };
    const double u = kv_unit_roundoff(expected->dtype);
    kv_status st = KV_OK;
    int64_t terms = 1;
    switch (kind) {
    case KV_BOUND_NONE: break;
    case KV_BOUND_SUM:
    case KV_BOUND_MEAN:
        st = tb_sum(&a, c->op, kind == KV_BOUND_MEAN, u, working ? u : tb_acc_u(expected->dtype), expected, b, nout);
        break;
    case KV_BOUND_PROD: {
        const kv_tensor *x = tb_tensor(&a, "self");
        int64_t dim;
        if (x == NULL || !tb_int(&a, "dim", &dim) || tb_size_of_dim(x, dim) < 0) {
            st = tb_missing(c->op, "input 'self' and 'dim'");
            break;
        }
        terms = tb_size_of_dim(x, dim);
        const double g = kv_gamma((double)terms + 1.0, u);
        for (int64_t k = 0; k < nout; k++) b[k] = g * tb_mag_lin(expected, k);
        break;
    }
    case KV_BOUND_MATMUL:
    case KV_BOUND_ADDMM: st = tb_matmul(&a, c->op, kind == KV_BOUND_ADDMM, u, b, nout); break;
    case KV_BOUND_AXPY: st = tb_axpy(&a, c->op, u, expected, b); break;
    case KV_BOUND_SOFTMAX:
    case KV_BOUND_LOG_SOFTMAX: st = tb_softmax(&a, c->op, kind == KV_BOUND_LOG_SOFTMAX, u, expected, b); break;
    case KV_BOUND_EW_INPUT: st = tb_ew_input(&a, c->op, c_value, u, expected, b); break;
    case KV_BOUND_NORM: st = tb_norm(&a, c->op, output, u, expected, one_pass, b); break;
    case KV_BOUND_GELU_BACKWARD: st = tb_gelu_backward(&a, c->op, c_value, u, expected, b); break;
    case KV_BOUND_LINEAR: st = tb_linear(&a, c->op, output, u, expected, b, &terms); break;
    }
    if (st != KV_OK) {
        free(b);
        return st;
    }
    /* Underflow slack: one absolute rounding of the smallest normal per
     * term (and at least a few), see the file comment. */
    const double slack = kv_gamma((double)(terms > 8 ? terms : 8), u) * tb_min_normal(expected->dtype);
    for (int64_t k = 0; k < nout; k++) {
        b[k] += slack;
        if (!kv_tol_elem_finite(expected, k)) continue;
        /* A derivation that goes past the range (γ·Σ|a||b| of products
         * beyond DBL_MAX whose exact sum is finite) is said as DBL_MAX,
         * the largest bound a double holds: an inf or NaN output still
         * fails it (|inf − e| > DBL_MAX). A NaN bound for a finite golden
         * is a derivation bug: an error, never a silent pass or fail. */
        if (isnan(b[k])) {
            free(b);
            return kv_error(KV_ERR_INTERNAL, "%s: bound: output %d element %lld: the error bound is NaN where the golden is finite",
                            c->op, output, (long long)k);
        }
        if (b[k] > DBL_MAX) b[k] = DBL_MAX;
    }
    *out = b;
    return KV_OK;
}

kv_status kv_tol_bounds(kv_bound_kind kind, double c_value, const kv_case *c, const kv_case_inputs *in,
                        const kv_tensor *expected, int output, double **out) {
    return tb_bounds(kind, c_value, c, in, expected, output, false, false, out);
}

kv_status kv_tol_bounds_working(kv_bound_kind kind, const kv_case *c, const kv_case_inputs *in,
                                const kv_tensor *expected, int output, double **out) {
    *out = NULL;
    if ((kind != KV_BOUND_SUM && kind != KV_BOUND_MEAN) || tb_acc_u(expected->dtype) >= kv_unit_roundoff(expected->dtype))
        return KV_OK;
    return tb_bounds(kind, 0.0, c, in, expected, output, true, false, out);
}

kv_status kv_tol_bounds_one_pass(kv_bound_kind kind, const kv_case *c, const kv_case_inputs *in,
                                 const kv_tensor *expected, int output, double **out) {
    *out = NULL;
    if (kind != KV_BOUND_NORM) return KV_OK;
    return tb_bounds(kind, 0.0, c, in, expected, output, false, true, out);
}
