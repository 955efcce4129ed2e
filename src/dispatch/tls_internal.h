/* The thread's included/excluded key sets, for the dispatcher's own hot
 * path (call.c) to read without a call; everyone else uses kv/tls.h. */
#ifndef KV_DISPATCH_TLS_INTERNAL_H
#define KV_DISPATCH_TLS_INTERNAL_H

#include "kv/tls.h"

extern _Thread_local kv_tls_keys kv_tls_state;

static inline kv_tls_keys kv_tls_now(void) { return kv_tls_state; }

#endif
