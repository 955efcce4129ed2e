/* Turning a TLS mode's key on and off (trace, functionalize, autocast).
 *
 * A mode's enter and exit are not a scoped guard: modes may be entered and
 * left in any interleaving (trace pushed, autocast entered, trace popped,
 * autocast exited), so restoring the whole kv_tls_keys saved at enter would
 * undo the other modes' changes made in between. Each mode therefore keeps
 * the state of its own bit from before it turned the bit on, and puts back
 * exactly that bit. */
#ifndef KV_MODES_MODE_TLS_H
#define KV_MODES_MODE_TLS_H

#include "kv/keys.h"

/* Adds `k` to TLS included; returns the included set as it was, of which
 * only k's bit matters to kv_mode_tls_off. */
static inline kv_keyset kv_mode_tls_on(kv_key k) {
    return kv_tls_include_push(kv_keyset_of(k)).included;
}

/* Puts k's included bit back to what it was in `before`. */
static inline void kv_mode_tls_off(kv_key k, kv_keyset before) {
    kv_tls_keys now = kv_tls_get();
    const kv_keyset bit = kv_keyset_of(k);
    now.included = (now.included & ~bit) | (before & bit);
    kv_tls_pop(now);
}

#endif
