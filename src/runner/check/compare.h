/* Comparing an output against its expected value (DESIGN.md section 6,
 * "Tolerances"; the rules themselves come from runner/tolerance.h).
 *
 * Kinds:
 *   BITWISE  the element bytes are equal, except that any NaN matches any
 *            NaN (unless nan_payload_matters) and, when signed_zero_equal,
 *            -0 matches +0. Integers and bools are always compared this way.
 *   ULP      |ord(e) - ord(g)| <= value, ord being the sign-magnitude bits
 *            mapped onto a line (so +0 and -0 are 0 apart and the smallest
 *            subnormals of either sign are 2 apart);
 *   ABS      |e - g| <= value;
 *   REL      |e - g| <= value * |e| (|e| of the whole complex number);
 *   BOUND    |e - g| <= bound[k], a per-element error bound the caller
 *            computed in f64 from the inputs (runner/tolerance.h).
 * For every kind except BITWISE: NaN matches only NaN, an infinity only
 * the same infinity, and +-0 compare equal. Complex numbers compare each
 * component. For integer dtypes ULP, ABS, REL and BOUND use the exact
 * integer difference (reported as the ULP distance).
 *
 * Mismatches are counted over the whole tensor; the first
 * KV_RESULT_MAX_MISMATCHES (row-major order) are listed with their
 * multi-dim index, expected, got, abs and rel error and ULP distance. */
#ifndef KV_RUNNER_COMPARE_H
#define KV_RUNNER_COMPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/tensor.h"
#include "runner/check/result.h"

typedef enum kv_cmp_kind {
    KV_CMP_BITWISE,
    KV_CMP_ULP,
    KV_CMP_ABS,
    KV_CMP_REL,
    KV_CMP_BOUND,
    KV_CMP_META        /* only dtype and shape: the values are unspecified (empty) */
} kv_cmp_kind;

typedef struct kv_cmp_rule {
    kv_cmp_kind kind;
    double value;               /* ULP: distance; ABS: error; REL: factor */
    bool signed_zero_equal;     /* BITWISE: -0 matches +0 */
    bool nan_payload_matters;   /* NaNs must match bit for bit (every kind) */
} kv_cmp_rule;

const char *kv_cmp_kind_name(kv_cmp_kind k);
/* "bitwise", "ulp:2", "abs:1e-05", "rel:0.001", "bound", "meta". */
int kv_cmp_rule_format(const kv_cmp_rule *r, char *buf, int cap);

typedef struct kv_cmp_report {
    int64_t compared, mismatched;
    double max_abs_err;         /* over elements where both values are finite */
    double max_ulps;            /* over float elements where both are finite and
                                   the signs agree (or either is zero) */
    int64_t nonfinite_mismatched; /* mismatches with an Inf or NaN on either side,
                                     which the two maxima above cannot show */
    /* Mismatches between nonzero finite values of opposite signs: the ulp
     * count through zero between them is a number like 2^31 that says
     * nothing, so max_ulps leaves them out and the summary counts them. */
    int64_t sign_mismatched;
    int nmismatches;
    kv_mismatch mismatches[KV_RESULT_MAX_MISMATCHES];
    kv_heat heat;               /* where the mismatched ones are (result.h) */
} kv_cmp_report;

/* Compares every element of `got` against `expected` (both host-
 * addressable, any strides, no lazy bits). `bound` (numel entries,
 * row-major) is required for KV_CMP_BOUND and ignored otherwise.
 * Returns KV_OK when the comparison ran (whatever it found; see
 * rep->mismatched); KV_ERR_DTYPE / KV_ERR_SHAPE with a message when the
 * dtypes or shapes differ, which callers report as a FAIL. */
kv_status kv_compare(const kv_tensor *expected, const kv_tensor *got, const kv_cmp_rule *rule,
                     const double *bound, kv_cmp_report *rep);

/* kv_compare, also writing mask[k] = 1 for each mismatched element
 * (numel entries, row-major) when the comparison runs, for the failure
 * classifier (runner/check/classify.h). */
kv_status kv_compare_mask(const kv_tensor *expected, const kv_tensor *got, const kv_cmp_rule *rule,
                          const double *bound, kv_cmp_report *rep, uint8_t *mask);

/* ULP distance of two values of real floating dtype dt given as raw bit
 * patterns (f16/bf16 in the low 16 bits, f32 in the low 32). -1 when
 * either is NaN. */
double kv_ulp_distance_bits(kv_dtype dt, uint64_t a, uint64_t b);

/* Writes "N of M elements differ (max abs err X, max ulp Y); first: [i, j]
 * expected E got G (abs A, rel R, ulp U); ..." (snprintf style). `what`
 * prefixes it ("output 0"); may be NULL. */
int kv_cmp_report_format(const kv_cmp_report *rep, const char *what, char *buf, int cap);
/* Only the first sentence of kv_cmp_report_format ("N of M elements
 * differ (...)"), for a row that also gets the elements themselves
 * (kv_cmp_report_to_result): every report lists those once, from the row. */
int kv_cmp_report_summary(const kv_cmp_report *rep, const char *what, char *buf, int cap);
/* Copies counts and mismatches into a check result. */
void kv_cmp_report_to_result(const kv_cmp_report *rep, kv_check_result *r);

#endif
