/* Autocast mode (DESIGN.md section 4): a thread-local mode with a target
 * dtype, f16 or bf16, and op lists in the spirit of PyTorch's.
 *
 * Policies (one table in src/modes/autocast.c):
 *   lower  mm, bmm, addmm: floating tensor inputs whose dtype is not the
 *          autocast dtype (f32, f64 and the other 16-bit type) are cast to
 *          it. (PyTorch leaves f64 inputs alone; the issue asks for
 *          f32/f64 to be cast, and so they are.)
 *   fp32   _softmax, _log_softmax, native_layer_norm, native_group_norm,
 *          exp, log, sum.dim_IntList, mean.dim, pow.Tensor_Scalar: f16 and
 *          bf16 inputs are cast to f32 (f64 stays). A half_to_float=true
 *          argument is turned off once the input is f32, since the output
 *          is f32 either way (and CPU kernels refuse the flag).
 *   promote cat, stack, where.self: floating inputs are cast to the widest
 *          floating dtype among them (kv_promote_types over the floating
 *          inputs, so f16 + bf16 gives f32).
 * Every other op is a fallthrough at Autocast: untouched. Only floating
 * tensors are ever cast; bool, integer and complex tensors are not.
 * Casts are kv__to_copy calls, ordinary dispatched ops (Autograd records
 * them; Trace sees them). The op then redispatches below Autocast on a key
 * set recomputed from the cast arguments.
 *
 * The mode and its counters are per thread. */
#ifndef KV_AUTOCAST_H
#define KV_AUTOCAST_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dtype.h"
#include "kv/status.h"

typedef enum kv_autocast_policy {
    KV_AUTOCAST_NONE,     /* not on any list: fallthrough */
    KV_AUTOCAST_LOWER,    /* run in the autocast dtype */
    KV_AUTOCAST_FP32,     /* run in f32 */
    KV_AUTOCAST_PROMOTE   /* run in the widest floating input dtype */
} kv_autocast_policy;

#define KV_AUTOCAST_MAX_DEPTH 16

/* Enters the mode with `dtype` (KV_F16 or KV_BF16, else KV_ERR_DTYPE).
 * Nesting is allowed; the innermost dtype is the one in force. The
 * outermost enter adds KV_KEY_AUTOCAST to TLS included. */
kv_status kv_autocast_enter(kv_dtype dtype);
/* Leaves the innermost level (the outer dtype is in force again); the
 * outermost exit takes the key out of TLS included (unless it was included
 * before). KV_ERR_INVALID_ARG when the mode is not on. */
kv_status kv_autocast_exit(void);
bool kv_autocast_active(void);
int kv_autocast_depth(void);
/* The dtype in force, or KV_DTYPE_COUNT when the mode is off. */
kv_dtype kv_autocast_dtype(void);

/* The policy of an op by full name (KV_AUTOCAST_NONE if not listed). */
kv_autocast_policy kv_autocast_policy_of(const char *full_name);
const char *kv_autocast_policy_name(kv_autocast_policy p); /* "none", "lower", "fp32", "promote" */

/* What the Autocast kernels did on this thread since the last reset. */
typedef struct kv_autocast_counters {
    int64_t casts;          /* kv__to_copy casts made, all policies */
    int64_t casts_lower;
    int64_t casts_fp32;
    int64_t casts_promote;
    int64_t calls;          /* ops that ran an Autocast kernel (cast or not) */
} kv_autocast_counters;

kv_autocast_counters kv_autocast_counters_get(void);
void kv_autocast_counters_reset(void);

/* Registers the Autocast kernels and the fallthrough (kv_modes_register_all). */
kv_status kv_autocast_register(void);

#endif
