/* Thread-local included/excluded key sets. A fresh thread starts with both
 * empty: modes are per thread, as in PyTorch. */
#include "dispatch/tls_internal.h"

_Thread_local kv_tls_keys kv_tls_state;

kv_tls_keys kv_tls_get(void) { return kv_tls_state; }

void kv_tls_set(kv_tls_keys state) { kv_tls_state = state; }

kv_tls_keys kv_tls_include_push(kv_keyset ks) {
    kv_tls_keys saved = kv_tls_state;
    kv_tls_state.included |= ks;
    return saved;
}

kv_tls_keys kv_tls_exclude_push(kv_keyset ks) {
    kv_tls_keys saved = kv_tls_state;
    kv_tls_state.excluded |= ks;
    return saved;
}

void kv_tls_pop(kv_tls_keys saved) { kv_tls_state = saved; }
