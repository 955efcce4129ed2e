/* Output metadata against the reference (README "Checks", variants): what
 * a kernel returns must look like what the reference returns, not only
 * hold the same values. A backend whose add returns column-major strides
 * or a view that copies instead of aliasing is wrong even when every
 * element is right: the next op (a view, an in-place write, a stride-
 * dependent kernel) sees the difference.
 *
 * The expectation comes from the CPU reference kernel run on the case's
 * own layout (not the golden's contiguous inputs), so views of transposed
 * or offset inputs have the strides and offsets they must have. Per
 * output the rules are:
 *   dtype, sizes  equal to the reference's;
 *   device        the backend's device (unless the reference moved the
 *                 result to another device: a device= argument);
 *   aliasing      an output the reference returns over an input's storage
 *                 (a view, an in-place or out= result) is over the same
 *                 input on the backend, with exactly the reference's
 *                 strides and storage offset; one the reference returns
 *                 fresh shares storage with no input;
 *   layout        a fresh output of contiguous inputs whose reference
 *                 output is contiguous is contiguous with offset 0 (what
 *                 the op defines; for other inputs the op leaves the
 *                 layout to the kernel). */
#ifndef KV_RUNNER_CHECK_META_H
#define KV_RUNNER_CHECK_META_H

#include <stdbool.h>

#include "runner/check/check.h"

typedef struct kv_meta_output {
    int ndim;
    int64_t sizes[KV_MAX_DIMS];
    int64_t strides[KV_MAX_DIMS];
    int64_t offset;
    kv_dtype dtype;
    bool moved;      /* the reference put it on another device than its inputs */
    int alias;       /* index into the inputs' tensors (list items after them), -1: fresh */
    bool contiguous; /* the reference output is contiguous */
} kv_meta_output;

typedef struct kv_meta_expect {
    bool valid;             /* false: the reference could not run; nothing is checked */
    bool inputs_contiguous; /* every input tensor of the case's layout is contiguous */
    /* A fresh output's strides are part of the op's meaning (clone and
     * _to_copy: memory_format=preserve keeps the input's layout), so they
     * must equal the reference's exactly, at offset 0. */
    bool strides_exact;
    int n;
    kv_meta_output o[KV_CASE_MAX_OUTPUTS];
} kv_meta_expect;

/* Runs the op's CPU reference on the case's layout and records its
 * outputs' metadata. Never fails: m->valid says whether it ran. */
void kv_meta_expect_run(const kv_check_ctx *ctx, kv_meta_expect *m);

/* Checks outputs `out` of a call on `in` (on device `dev`) against m.
 * true when they agree; else false with what differs in msg. */
bool kv_meta_check(const kv_meta_expect *m, const kv_case_inputs *in, const kv_case_outputs *out, kv_device dev,
                   char *msg, int cap);

#endif
