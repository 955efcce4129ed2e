/* Thread-local included/excluded key sets. A fresh thread starts with both
 * empty: modes are per thread, as in PyTorch. */
#include "kv/tls.h"

static _Thread_local kv_tls_keys tls_keys;

kv_tls_keys kv_tls_get(void) { return tls_keys; }

void kv_tls_set(kv_tls_keys state) { tls_keys = state; }

kv_tls_keys kv_tls_include_push(kv_keyset ks) {
    kv_tls_keys saved = tls_keys;
    tls_keys.included |= ks;
    return saved;
}

kv_tls_keys kv_tls_exclude_push(kv_keyset ks) {
    kv_tls_keys saved = tls_keys;
    tls_keys.excluded |= ks;
    return saved;
}

void kv_tls_pop(kv_tls_keys saved) { tls_keys = saved; }
