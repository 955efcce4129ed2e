/* The thread's included/excluded key sets, for the hot paths to read
 * without a call: the dispatcher's own (call.c) and the accel fast path's
 * memo check (boxing/lean.h), which compares them with the keys a
 * decision was made under. Everyone else uses kv/tls.h. */
#ifndef KV_DISPATCH_TLS_INTERNAL_H
#define KV_DISPATCH_TLS_INTERNAL_H

#include "kv/tls.h"

extern _Thread_local kv_tls_keys kv_tls_state;

static inline kv_tls_keys kv_tls_now(void) { return kv_tls_state; }

#endif
