/* Tolerances (DESIGN.md section 6): derived, not guessed.
 *
 * One table (tolerance.c) has a row per op x output-dtype class, each with
 * its reason:
 *   - bitwise for exact ops (copies, views, selection, comparisons, and
 *     the single correctly rounded IEEE operations add/sub/mul/div/sqrt:
 *     the reference rounds once from double, and double rounding through
 *     f64 (or f32 for f16/bf16) is innocuous for +-x/sqrt because
 *     53 >= 2*24+2 and 24 >= 2*11+2);
 *   - a ULP bound for elementwise transcendental ops;
 *   - an error bound computed in f64 from the inputs for reductions,
 *     matmul and normalization (gamma_n * sum|a||b| style, n the
 *     reduction length, u the unit roundoff of the OUTPUT dtype).
 * Integer and bool outputs are always bitwise: integer arithmetic wraps
 * identically in every implementation.
 *
 * Since issue 14 the golden is the correctly rounded truth (runner/golden/
 * exact.h), so every rule bounds a kernel's error against the truth, and
 * the reference kernel is held to the same rule as every other variant:
 * the golden check and the variants check both use kv_tol_rule_for.
 * kv_tol_golden_rule (bitwise, one ulp for libm ops) is what a store made
 * by the reference itself would need; nothing in the runner uses it now.
 * A case's tol= overrides both. */
#ifndef KV_RUNNER_TOLERANCE_H
#define KV_RUNNER_TOLERANCE_H

#include <stdbool.h>

#include "kv/dispatch.h"
#include "runner/case/case.h"
#include "runner/check/check.h"
#include "runner/check/compare.h"

/* How a BOUND row's per-element bound is computed (tol_bounds.c). */
typedef enum kv_bound_kind {
    KV_BOUND_NONE,
    KV_BOUND_SUM,          /* gamma_{n+1} * sum|x| over the reduced elements */
    KV_BOUND_MEAN,         /* gamma_{n+2} * sum|x| / n */
    KV_BOUND_PROD,         /* gamma_{n+1} * |e| */
    KV_BOUND_MATMUL,       /* mm, bmm: gamma_{K+1} * sum_k |a_ik||b_kj| */
    KV_BOUND_ADDMM,        /* gamma_{K+3} * (|beta||c_ij| + |alpha| sum_k |a_ik||b_kj|) */
    KV_BOUND_AXPY,         /* add/sub with alpha != 1: gamma_2 * (|a| + |alpha||b|) */
    KV_BOUND_SOFTMAX,      /* gamma_{n+6} * |e|, n = size(dim) */
    KV_BOUND_LOG_SOFTMAX,  /* gamma_{n+6} * (|e| + 2 log n + 1) */
    KV_BOUND_EW_INPUT,     /* c * u * (|e| + |x|): cancellation inside (gelu) */
    KV_BOUND_NORM,         /* native_layer_norm / native_group_norm, see tol_bounds.c */
    KV_BOUND_GELU_BACKWARD,/* c * u * (|e| + |grad| * (1 + |x|)) */
    KV_BOUND_LINEAR        /* gamma_{n+1} * op(|first tensor|), n = its numel: linear ops with
                            * non-negative weights (the scatter-add backward ops) */
} kv_bound_kind;

/* When a row applies, beyond op and dtype (first matching row wins). */
typedef enum kv_tol_cond {
    KV_TOL_ALWAYS,
    KV_TOL_ALPHA_ONE,      /* the case's alpha is 1 (or absent) */
    KV_TOL_ALPHA_NOT_ONE,
    KV_TOL_COMPLEX_INPUT,  /* the case's first input is complex (abs: complex in, real out) */
    KV_TOL_SCALE_GRAD_BY_FREQ /* the case sets scale_grad_by_freq (embedding_dense_backward) */
} kv_tol_cond;

typedef struct kv_tol_entry {
    const char *op;              /* full op name */
    unsigned dtypes;             /* output dtypes (1u << kv_dtype); 0 = all */
    kv_tol_cond cond;
    kv_cmp_kind kind;            /* BITWISE, ULP, REL (value in units of u), BOUND, META */
    double value;                /* ULP: distance; REL: factor of u; EW_INPUT: c */
    kv_bound_kind bound;
    bool golden_libm;            /* golden check allows 1 ulp */
    bool exact_fill_bitwise;     /* fill=exact makes the result exact: bitwise, +0 == -0 */
    bool uninitialized;          /* values unspecified (empty): memory check skips unwritten elements */
    const char *reason;
} kv_tol_entry;

int kv_tol_count(void);
const kv_tol_entry *kv_tol_at(int i);
/* The first row for (op, output dtype) whose condition the case meets
 * (c may be NULL: conditions then read as "alpha is 1"). NULL when no
 * row covers the pair; callers then compare bitwise. */
const kv_tol_entry *kv_tol_lookup(const char *op, kv_dtype out, const kv_case *c);
/* Whether some row names the op (any dtype). */
bool kv_tol_has_op(const char *op);

/* u: 2^-11 (f16), 2^-8 (bf16), 2^-24 (f32, c64), 2^-53 (f64, c128); 0 for
 * integer and bool dtypes. */
double kv_unit_roundoff(kv_dtype dt);
/* gamma_n = n*u / (1 - n*u); +Inf when n*u >= 1 (the bound says nothing). */
double kv_gamma(double n, double u);

/* The rule a variant's output `out_dtype` is compared with, and (for a
 * BOUND rule) which bound to compute. Applies, in order: the case's tol=,
 * the table row, exact-fill exactness. `entry` (may be NULL) gets the
 * row (NULL when none). */
kv_cmp_rule kv_tol_rule_for(const kv_case *c, kv_dtype out_dtype, kv_bound_kind *bound,
                            const kv_tol_entry **entry);
/* Whether kernels reached on device `d` are the golden references
 * themselves (the CPU in reference mode; accel on a CPU target): the
 * lazy check compares those bitwise, and holds every other backend to
 * kv_tol_rule_for, as the variants check does. */
bool kv_tol_device_is_reference(kv_device d);

/* The golden check's rule: the case's tol= if given; else bitwise, or
 * ULP 1 for libm ops (golden_libm rows). */
kv_cmp_rule kv_tol_golden_rule(const kv_case *c, kv_dtype out_dtype);

/* The k-th element (row-major) of t is finite in every component. */
bool kv_tol_elem_finite(const kv_tensor *t, int64_t k);

/* Per-element bounds (numel(expected) doubles, row-major, malloc'd; the
 * caller frees) for output `output` of the case, computed in f64 from
 * `in`, the golden (contiguous CPU) inputs. */
kv_status kv_tol_bounds(kv_bound_kind kind, double c_value, const kv_case *c, const kv_case_inputs *in,
                        const kv_tensor *expected, int output, double **out);

/* The bound kv_tol_bounds would give if the sums it bounds accumulated in
 * the output's own precision (an f16 sum in f16), for the classifier's
 * "accumulates in f16" (runner/check/classify.h); *out NULL (and KV_OK)
 * where kv_tol_bounds already assumes that: every kind but sum and mean,
 * and outputs wider than f16/bf16. */
kv_status kv_tol_bounds_working(kv_bound_kind kind, const kv_case *c, const kv_case_inputs *in,
                                const kv_tensor *expected, int output, double **out);

/* The bound kv_tol_bounds would give the norms if their variance were
 * computed as E[x^2] - m^2 in working precision (tol_bounds.c), for the
 * classifier's "variance by E[x^2] - E[x]^2"; *out NULL (and KV_OK) for
 * every other kind. */
kv_status kv_tol_bounds_one_pass(kv_bound_kind kind, const kv_case *c, const kv_case_inputs *in,
                                 const kv_tensor *expected, int output, double **out);

#endif
