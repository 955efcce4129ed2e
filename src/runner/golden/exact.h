/* The exact golden generator (issue 14): every floating-point golden
 * element is the correctly rounded (round to nearest, ties to even) value
 * of the op's exact result on the stored inputs.
 *
 * How. The reference kernels run first (kernels/ref): they fix the output
 * dtypes and shapes, and for ops that are exact in double (copies, views,
 * selections, comparisons, integer ops; kv_exact_family_of says which)
 * their values are already the truth. For every other op a family function
 * recomputes each floating output element with MPFR from fresh inputs and
 * overwrites it: the element is evaluated at a working precision P and at
 * 2P, each rounded into the output format (subnormals included); when the
 * two roundings agree the element is accepted, else P doubles (a Ziv-style
 * loop). Exact sums (mpfr_sum) and exact products make most intermediates
 * exact already; the loop covers the transcendental ones and the double
 * rounding of the working value into the output format.
 *
 * Conventions where the exact value is undefined (NaN, signed zeros,
 * overflow, complex special values) are the README's semantics table: in
 * short the op's formula evaluated with IEEE special-value arithmetic, and
 * for complex inputs with a non-finite component the reference's C99
 * Annex G value. A NaN golden element keeps the reference's NaN bits when
 * the reference gave NaN (payload propagation is the reference's), else
 * the default quiet NaN. */
#ifndef KV_RUNNER_GOLDEN_EXACT_H
#define KV_RUNNER_GOLDEN_EXACT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <gmp.h>
#include <mpfr.h>

#include "runner/check/check.h"

/* What a generation changed relative to the reference's values, per
 * output dtype (how far the reference was from the truth). */
typedef struct kv_exact_stats {
    int64_t elements[KV_DTYPE_COUNT];   /* floating elements recomputed */
    int64_t changed[KV_DTYPE_COUNT];    /* of which differ from the reference's bits */
} kv_exact_stats;

typedef enum kv_exact_family {
    KV_EXACT_REF,        /* exact in double: the reference's values are the truth */
    KV_EXACT_UNARY,      /* elementwise functions of one tensor (incl. complex, pow) */
    KV_EXACT_BINARY,     /* add/sub (alpha), mul, div, in-place twins */
    KV_EXACT_GELU_BACKWARD,
    KV_EXACT_REDUCE,     /* sum, mean, prod */
    KV_EXACT_MATMUL,     /* mm, bmm, addmm */
    KV_EXACT_SOFTMAX,    /* _softmax, _log_softmax */
    KV_EXACT_NORM,       /* native_layer_norm, native_group_norm */
    KV_EXACT_SCATTER,    /* the scatter-add backward ops */
    KV_EXACT_FOREACH     /* the foreach ops: the binary family per element */
} kv_exact_family;

kv_exact_family kv_exact_family_of(const char *op);
const char *kv_exact_family_name(kv_exact_family f);

/* Overwrites the floating outputs in `out` (the reference's outputs of the
 * case's golden problem) with the correctly rounded truth. `op` is the
 * case's op; the inputs are rebuilt fresh (in-place ops mutated the
 * reference's). stats may be NULL. */
kv_status kv_exact_golden(const kv_case *c, const kv_op *op, kv_case_outputs *out, kv_exact_stats *stats);
/* The same over inputs the caller made (contiguous CPU tensors, with the
 * case's boxed arguments): a program step, whose inputs are earlier
 * steps' values rather than a fill (runner/program/program.h). `c`
 * describes the step as a one-op case (its args, dtypes, shapes). */
kv_status kv_exact_golden_given(const kv_case *c, const kv_op *op, kv_case_inputs *in, kv_case_outputs *out,
                                kv_exact_stats *stats);

/* Clears the sign bit of every NaN element of the floating outputs. The
 * default NaN an invalid operation makes is ISA-specific (x86: negative,
 * aarch64 and most others: positive) and the sign of a NaN is not part of
 * any op's semantics (README "Golden semantics"), so the store keeps NaNs
 * positive with their payload bits: that is what makes it regenerate bit
 * for bit on another ISA (ninja cross-golden). kv_exact_golden applies it
 * to its outputs; the golden check applies it to the reference's outputs
 * before hashing them against the store. */
void kv_exact_canonical_nans(kv_case_outputs *out);

/* The process-wide counts of a --regen-golden run (regeneration runs in
 * the parent process only, never concurrently). */
kv_exact_stats *kv_exact_run_stats(void);

/* The recomputation check (exact_verify.c): KV_EXACT_VERIFY=BITS (0 or
 * unset: off) makes every accepted element be evaluated again at BITS and
 * measured against that truth. */
/* KV_EXACT_VERIFY checked: unset, 0, or a precision from 512 to 1000000
 * bits; anything else (the empty string too) is KV_ERR_INVALID_ARG naming
 * it (kvrun exits 2). */
kv_status kv_exact_verify_env_check(void);
mpfr_prec_t kv_exact_verify_bits(void);
void kv_exact_verify_element(mpfr_srcptr truth, double g, kv_dtype dt);
/* Prints the per-dtype counts; returns the number of violations. */
int64_t kv_exact_verify_print(FILE *f);

/* Writes one line per dtype with elements recomputed and changed. */
void kv_exact_stats_print(FILE *f, const kv_exact_stats *s);

/* ---- shared by the family files (exact_core.c) ---- */

/* One evaluation of a group of n real values at working precision prec
 * (outs are initialized to prec by the caller). Returns 0, or -1 when the
 * group cannot be computed (then the reference's values stay). */
typedef int (*kv_exact_eval_fn)(void *ctx, mpfr_prec_t prec, mpfr_t *outs, int n);

/* Ziv loop: evaluates at 128, 256, ... bits until two consecutive
 * precisions round every value of the group into `dt` (a real dtype) to
 * the same result; res[i] is that value as a double (exact in dt). */
kv_status kv_exact_ziv(void *ctx, kv_exact_eval_fn fn, int n, kv_dtype dt, double *res);

/* How many elements the Ziv loop has accepted in this thread whose exact
 * value differs from the value they round to in their output format (a
 * result that really rounded; an exact result, or one within the
 * evaluation's error of its rounded value, is not counted). A running
 * total: callers take differences. tests/test_rounding_coverage.c uses it
 * to prove the suite's goldens hold rounded elements. */
int64_t kv_exact_inexact_count(void);

/* y rounded to nearest even into real dtype dt with its subnormals and
 * overflow to infinity, returned as a double (exactly representable in dt). */
double kv_exact_round(mpfr_srcptr y, kv_dtype dt);

/* The real dtype a value of dt is rounded into (c64 -> f32). */
kv_dtype kv_exact_real_of(kv_dtype dt);

/* Element lin (row-major over t's sizes, honouring its strides), part 0
 * real, 1 imaginary (0 for real dtypes). Exact: x needs >= 64 bits. */
void kv_exact_load(const kv_tensor *t, int64_t lin, int part, mpfr_t x);
/* The same element as a double (integers above 2^53 round). */
double kv_exact_load_d(const kv_tensor *t, int64_t lin, int part);
/* As kv_exact_load, then cast into dtype `to` the way the op casts its
 * inputs (one rounding into to's real format; no-op when exact). */
void kv_exact_load_as(const kv_tensor *t, int64_t lin, int part, kv_dtype to, mpfr_t x);
/* Stores v into element lin, part; a NaN keeps the element when it is
 * already a NaN. Counts into stats. */
void kv_exact_store(kv_tensor *t, int64_t lin, int part, double v, kv_exact_stats *stats);

/* Linear index into t of output element lin of a broadcast result with
 * sizes osz[ondim] (t broadcasts to it, right-aligned). */
int64_t kv_exact_bcast_index(const kv_tensor *t, const int64_t *osz, int ondim, int64_t lin);

/* Scalars as the reference uses them: rounded to f32 (c64 per
 * component) when the compute dtype is narrower than f64/c128. */
void kv_exact_scalar(kv_scalar s, kv_dtype compute, double *re, double *im);

/* The fresh inputs and the case of one generation, for family functions. */
typedef struct kv_exact_call {
    const kv_case *c;
    const kv_op *op;
    const char *name;            /* the op's full name */
    kv_case_inputs *in;          /* fresh contiguous CPU inputs */
    kv_case_outputs *out;        /* the reference's outputs, overwritten */
    kv_exact_stats *stats;
} kv_exact_call;

kv_status kv_exact_unary(const kv_exact_call *x);
kv_status kv_exact_binary(const kv_exact_call *x);
/* self (argument 0) times the Scalar argument 1 (exact_ew.c). */
kv_status kv_exact_mul_scalar(const kv_exact_call *x);
/* exact_foreach.c */
kv_status kv_exact_foreach(const kv_exact_call *x);
kv_status kv_exact_gelu_backward(const kv_exact_call *x);
kv_status kv_exact_reduce(const kv_exact_call *x);
kv_status kv_exact_matmul(const kv_exact_call *x);
kv_status kv_exact_softmax(const kv_exact_call *x);
kv_status kv_exact_norm(const kv_exact_call *x);
kv_status kv_exact_scatter(const kv_exact_call *x);

#endif
