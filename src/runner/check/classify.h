/* Naming the property a failed comparison broke (docs/diagnosis.md):
 * "rounds toward zero (995 of 4096, every error toward zero)", "wrong
 * only in the last numel % 8 elements", "NaN not propagated", ... from
 * the pattern of which elements mismatched and how. A pure function of
 * the compared values and the case's layouts; it says nothing (returns
 * 0) unless every mismatch fits one pattern, so a diagnosis is evidence,
 * never a guess. */
#ifndef KV_RUNNER_CLASSIFY_H
#define KV_RUNNER_CLASSIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "runner/case/case.h"

typedef struct kv_classify_in {
    kv_dtype dtype;                 /* the output's (real floating or integer) */
    int ndim;
    int64_t sizes[KV_MAX_DIMS];     /* the output's */
    int64_t numel;
    /* Raw element patterns, row-major, numel each: f16/bf16 in the low 16
     * bits, f32 in the low 32, f64 whole; integers the value as int64. */
    const uint64_t *expected, *got;
    const uint8_t *mismatched;      /* numel flags: the comparison rule's verdict */
    /* Optional (NULL when unknown), numel flags: an input element feeding
     * this output element is subnormal (same-shape element-wise ops). */
    const uint8_t *input_subnormal;
    int ninputs;
    kv_layout layouts[KV_CASE_MAX_INPUTS];
    /* Input i's shape is not the output's (a norm's weight, a broadcast
     * operand): its layout says nothing about which output elements read
     * which stored ones, so the position patterns pass it over. */
    bool input_other_shape[KV_CASE_MAX_INPUTS];
    /* Optional (NULL when not computed): the truth with one argument at
     * its neutral value (alt_what: "alpha", whose neutral value is 1),
     * patterned like expected, for "ignores alpha". */
    const uint64_t *alt;
    const char *alt_what;
    /* The input the output is (kv_case's out_alias, --out=@N: N + 1; 0
     * when out is a tensor of its own or shares no element with it). */
    int out_alias;
    /* Optional (NULL when the op's bound has no wider accumulator), numel
     * flags: the element is within the bound a sum accumulating in the
     * output's own precision meets (kv_tol_bounds_working). */
    const uint8_t *within_working;
    /* Optional (NULL when the op has no variance), numel flags: the
     * element is within the bound a norm whose variance is E[x^2] - m^2
     * in working precision meets (kv_tol_bounds_one_pass). */
    const uint8_t *within_one_pass;
    /* An input of the case has no elements while the output has some: a
     * reduction over nothing, whose NaN truth (a mean's 0/0) is the op's
     * value there, not a NaN the kernel failed to carry through. */
    bool empty_input;
} kv_classify_in;

/* Writes the diagnosis ("rounds toward zero (3 of 64, every error toward
 * zero)") into buf (snprintf style) and returns its length; 0 and an
 * empty buf when no pattern fits every mismatch, or nothing mismatched. */
int kv_classify(const kv_classify_in *in, char *buf, int cap);


#include "runner/check/check.h"
#include "runner/check/compare.h"

/* The classifier over one output's comparison (runner/check/classify_tensors.c):
 * compares `got` with `expected` (host tensors of one dtype and shape) by
 * `rule`, reads both row-major, flags the elements whose same-shape real
 * floating inputs in `in` (may be NULL) are subnormal, takes the layouts
 * from the case, and writes kv_classify's diagnosis. `alt` (may be NULL):
 * kv_classify_in's, as a host tensor of expected's dtype and shape.
 * `working_bound` (may be NULL): kv_tol_bounds_working's, for
 * within_working; `one_pass_bound` (may be NULL): kv_tol_bounds_one_pass's,
 * for within_one_pass. 0 and
 * "" when there is none, or the dtype is complex or bool. */
int kv_classify_compare(const kv_case *c, const kv_case_inputs *in, const kv_tensor *expected, const kv_tensor *got,
                        const kv_tensor *alt, const char *alt_what, const kv_cmp_rule *rule, const double *bound,
                        const double *working_bound, const double *one_pass_bound, char *buf, int cap);

/* The reference's output `i` of the case on ref_in with its Scalar
 * argument "alpha" set to 1, for kv_classify_compare's alt; NULL (no
 * error set) when the op has no alpha, the case's alpha is 1, the op
 * writes an argument, or the call fails. */
kv_tensor *kv_classify_alpha_one(const kv_op *op, kv_case_inputs *ref_in, int i);
#endif
