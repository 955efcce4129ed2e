/* The thread-local included and excluded key sets (DESIGN.md section 3):
 * a call's key set is (OR of its tensors' keys | included) & ~excluded.
 * They belong to the dispatcher, which reads them on every call; modes
 * push and pop them. */
#ifndef KV_TLS_H
#define KV_TLS_H

#include "kv/keys.h"

/* Thread-local included and excluded sets. Guards are values: push returns
 * the previous state, pop restores it, so nesting and early returns stay
 * correct as long as every push is paired with a pop. */
typedef struct kv_tls_keys {
    kv_keyset included;
    kv_keyset excluded;
} kv_tls_keys;

kv_tls_keys kv_tls_get(void);
void kv_tls_set(kv_tls_keys state);
kv_tls_keys kv_tls_include_push(kv_keyset ks); /* included |= ks */
kv_tls_keys kv_tls_exclude_push(kv_keyset ks); /* excluded |= ks */
void kv_tls_pop(kv_tls_keys saved);

#endif
