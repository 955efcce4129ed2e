/* Input values of a case (DESIGN.md section 6, "Inputs").
 *
 * Every value is a pure function of (golden key, seed, input index,
 * element counter) through the counter-based RNG (kv/rng.h), so the same
 * case gives the same bytes on every machine, and the golden problem
 * (contiguous, CPU) and every layout/device variant see identical logical
 * values: values are generated over the LOGICAL row-major index and only
 * then placed into a layout (runner/inputs.c).
 *
 * Layout `b` (broadcast) is the one exception to "layout never changes the
 * values": a `b` input is a size-1 leading dim expanded with stride 0, so
 * its logical values necessarily repeat along dim 0. The fill therefore
 * generates repeating values for such an input in EVERY run of the case
 * (contiguous golden run included), using the counter of the element with
 * index 0 in dim 0. Because that changes the logical problem, the golden
 * key the checks store under (kv_fill_golden_key) carries a suffix naming
 * the repeating inputs; cases without `b` inputs keep kv_case_golden_key
 * unchanged.
 *
 * Layout `w` (windowed: rows of dim 0 overlap in storage, as the windows
 * of unfold with step < size do, kv_layout_window_step) has the same
 * problem and the same answer: the elements two rows share are one
 * storage element, so the logical values of a `w` input are DEFINED by
 * the storage fill: element (i, rest) takes the counter of its storage
 * position i * step + rest, in every run of the case (the contiguous
 * golden run included), and the golden key carries "+win0=I,J".
 *
 * Fill modes:
 *   exact    small integers, or quarters k/4 for elementwise ops, sized per
 *            op and dtype so sums, products and matmuls are exact in the
 *            output dtype (benchdnn's technique): bitwise comparison is
 *            then valid whatever the reduction order;
 *   real     uniform over the op's domain (log/sqrt/rsqrt/pow: positive,
 *            div's divisor: nonzero);
 *   special  NaN, +-Inf, +-0, +-smallest subnormal, +-smallest normal,
 *            +-largest finite, +-1 for floats; min, max, 0, -1, 1 for
 *            integers; both bools. Input i takes digit i (base the list
 *            length) of the element counter, so a binary op with at least
 *            n^2 elements sees every pair of special values;
 *   shifted  real plus C = 2^(floor(p/2) - 2) (p the significand bits:
 *            8 for f16, 4 for bf16, 2^10 for f32, 2^24 for f64) on real
 *            floating inputs of the all, positive and nonzero domains,
 *            real elsewhere: a mean large against the spread, where a
 *            variance by E[x^2] - E[x]^2 cancels (docs/diagnosis.md).
 * Index-valued inputs (index_select's index, embedding's indices) and
 * where's condition keep their domain under every mode: an out-of-range
 * index is an error case, not a fill. */
#ifndef KV_RUNNER_FILL_H
#define KV_RUNNER_FILL_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/schema.h"
#include "kv/tensor.h"
#include "runner/case/case.h"

typedef enum kv_fill_domain {
    KV_DOMAIN_ALL,       /* any value of the dtype */
    KV_DOMAIN_POSITIVE,  /* > 0 (log, sqrt, rsqrt, pow's base) */
    KV_DOMAIN_NONZERO,   /* != 0 (div's divisor) */
    KV_DOMAIN_BOOL,      /* 0 or 1 (where's condition) */
    KV_DOMAIN_INDEX,     /* integers in [0, index_hi) */
    KV_DOMAIN_UNIT       /* +-1 (prod under exact fill: products stay exact) */
} kv_fill_domain;

/* How input i of a case is filled: the result of the domain table and the
 * case (shapes, args, layouts). */
typedef struct kv_fill_plan {
    kv_fill_domain domain;
    int64_t index_hi;     /* KV_DOMAIN_INDEX: exclusive upper bound (0: no valid index, fills 0) */
    int64_t exact_range;  /* exact fill: integers in [-R, R] (unsigned: [0, 2R]) */
    bool exact_quarters;  /* exact fill: k/4 instead of integers (elementwise ops) */
    bool repeat_dim0;     /* layout b: values repeat along dim 0 */
    int64_t window_step0; /* layout w: dim-0 rows start this many elements apart and share the rest (0: no) */
    int digit;            /* special fill: which base-n digit of the counter (the input index) */
} kv_fill_plan;

const char *kv_fill_domain_name(kv_fill_domain d);

/* The plan for tensor input `input` of case `c` (op schema `s`). Errors
 * (KV_ERR_INVALID_ARG, naming op and input) for an input index out of
 * range. An argument the index range depends on that is missing or out of
 * range gives index_hi = 0 (the call is then expected to fail). */
kv_status kv_fill_plan_for(const kv_case *c, const kv_schema *s, int input, kv_fill_plan *out);

/* Sets the plan's repeat_dim0 / window_step0 for an input of shape sh in
 * `layout` (the case inputs' and the programs'). */
void kv_fill_plan_layout(kv_fill_plan *plan, kv_layout layout, const kv_shape *sh);

/* Fills every element of `t` (a contiguous tensor on a host-addressable
 * device) per `plan` and `mode` from stream `key`. */
kv_status kv_fill_tensor(kv_tensor *t, kv_fill mode, const kv_fill_plan *plan, uint64_t key);

/* The stream key of input `input` of case `c`: a sub-stream of
 * kv_rng_key(kv_fill_golden_key(c), c->seed). 0 with an error when the
 * key does not fit. */
kv_status kv_fill_input_key(const kv_case *c, int input, uint64_t *out);

/* Plan + key + fill in one call: what runner/inputs.c uses. */
kv_status kv_fill_case_input(const kv_case *c, const kv_schema *s, int input, kv_tensor *t);

/* The golden key of `c` as the checks store and look it up:
 * kv_case_golden_key, plus "+bcast0=I,J" when inputs I, J (of >= 1 dim and
 * dim 0 larger than 1) have layout b and so repeat along dim 0, plus
 * "+win0=K" when input K has layout w over a shape it applies to.
 * snprintf style. */
int kv_fill_golden_key(const kv_case *c, char *buf, int cap);

#endif
