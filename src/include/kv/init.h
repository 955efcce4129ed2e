/* Bringing the runtime up. */
#ifndef KV_INIT_H
#define KV_INIT_H

#include <stdatomic.h>

#include "kv/dispatch.h"
#include "kv/status.h"

/* Composes the runtime once: the op registry (kv_dispatch_init), the CPU
 * reference kernels and the CPU perf_dispatch variants, the modes (lazy
 * bits, autograd, autocast, functionalize, trace, vmap) and the accel
 * device. Idempotent and thread-safe; a failure is re-raised on every
 * call with the first failure's message. The typed API (kv/ops.h) calls
 * it on first use, so explicit calls are optional. Plugins are loaded
 * separately (kv/backend.h). */
kv_status kv_init(void);

/* What the typed wrappers resolve their op with: kv_op_handle, after
 * kv_init on the first (uncached) call. */
const kv_op *kv_api_op(_Atomic(const kv_op *) *cache, const char *full_name);

#endif
