/* Per-backend tolerance overrides (DESIGN.md section 6: "a backend may
 * carry overrides, each with a reason").
 *
 * The tolerance table (runner/check/tolerance.h) states what a correct kernel
 * may differ by. A backend whose library has a documented, understood
 * deviation that the table's derivation does not cover (a flush of
 * subnormal results, say) carries an override here: one row per backend
 * name x op x output dtypes, with the absolute slack it adds to every
 * element's bound and the reason. Overrides widen BOUND rules only (a
 * bitwise or ulp rule states exactness, which a slack would quietly
 * void): an op whose deviation breaks an exact rule stays unsupported on
 * that backend instead. The variants check applies a matching row and
 * names it, with its reason, in the result's message (so in every
 * report). Backends are matched by the name their plugin gives
 * (kv_backend_desc.name), which stays the same whatever slot it gets; a
 * device=accel case uses its target's rows (accel runs the target's
 * kernels). */
#ifndef KV_RUNNER_CHECK_TOL_BACKEND_H
#define KV_RUNNER_CHECK_TOL_BACKEND_H

#include "kv/dtype.h"

typedef struct kv_tol_override {
    const char *backend;  /* plugin name, e.g. "onednn" */
    const char *op;       /* full op name */
    unsigned dtypes;      /* output dtypes (1u << kv_dtype) */
    double abs_slack;     /* added to every element's bound */
    const char *reason;
} kv_tol_override;

int kv_tol_override_count(void);
const kv_tol_override *kv_tol_override_at(int i);
/* The row for (backend, op, output dtype), or NULL. backend may be NULL
 * (the CPU, or a backend without a plugin): never overridden. */
const kv_tol_override *kv_tol_override_lookup(const char *backend, const char *op, kv_dtype out);

#endif
