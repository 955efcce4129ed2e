/* Dispatch keys and key sets (DESIGN.md section 3).
 *
 * A key set is one 64-bit word with one bit per runtime key. The backend
 * keys occupy the lowest bits and stand for "the Dense kernel of that
 * backend"; the functionality keys follow in PyTorch's relative priority
 * order. Because priority equals bit position, the key a call dispatches
 * to is simply the highest set bit. */
#ifndef KV_KEYS_H
#define KV_KEYS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum kv_key {
    /* Backend (Dense) keys. */
    KV_KEY_CPU,
    KV_KEY_CUDA,
    KV_KEY_SIM,
    KV_KEY_ACCEL,
    KV_KEY_PLUGIN0, /* slots for out-of-tree backends */
    KV_KEY_PLUGIN1,
    KV_KEY_PLUGIN2,
    KV_KEY_PLUGIN3,
    /* Functionality keys, lowest to highest priority. */
    KV_KEY_BACKEND_SELECT,
    KV_KEY_TRACE,
    KV_KEY_FUNCTIONALIZE,
    KV_KEY_CONJUGATE,
    KV_KEY_NEGATIVE,
    KV_KEY_ZERO_TENSOR,
    KV_KEY_AD_INPLACE_OR_VIEW,
    KV_KEY_AUTOGRAD,
    KV_KEY_AUTOCAST,
    KV_KEY_BATCHED,
    KV_KEY_VMAP_MODE,
    KV_KEY_ACCEL_BOXING,
    KV_KEY_COUNT
} kv_key;

#define KV_BACKEND_KEY_COUNT (KV_KEY_PLUGIN3 + 1)
#define KV_KEY_NONE KV_KEY_COUNT /* result of kv_keyset_highest on an empty set */

typedef uint64_t kv_keyset;

#define KV_KEYSET_EMPTY ((kv_keyset)0)
#define KV_KEYSET_ALL (((kv_keyset)1 << KV_KEY_COUNT) - 1)
#define KV_KEYSET_BACKENDS (((kv_keyset)1 << KV_BACKEND_KEY_COUNT) - 1)
#define KV_KEYSET_FUNCTIONALITY (KV_KEYSET_ALL & ~KV_KEYSET_BACKENDS)

static inline kv_keyset kv_keyset_of(kv_key k) { return (kv_keyset)1 << k; }
static inline bool kv_keyset_has(kv_keyset ks, kv_key k) { return (ks >> k) & 1u; }
static inline kv_keyset kv_keyset_add(kv_keyset ks, kv_key k) { return ks | kv_keyset_of(k); }
static inline kv_keyset kv_keyset_remove(kv_keyset ks, kv_key k) { return ks & ~kv_keyset_of(k); }
static inline bool kv_key_is_backend(kv_key k) { return k < KV_BACKEND_KEY_COUNT; }

/* The highest-priority key in the set, or KV_KEY_NONE when empty. */
static inline kv_key kv_keyset_highest(kv_keyset ks) {
    return ks ? (kv_key)(63 - __builtin_clzll(ks)) : KV_KEY_NONE;
}
/* Every key strictly below `k`: what a kernel at `k` redispatches to.
 * PyTorch spells this `ks & after_X_keyset`. */
static inline kv_keyset kv_keyset_below(kv_key k) { return kv_keyset_of(k) - 1; }

/* "CPU", "Autograd", "AccelBoxing", ... (PyTorch's spelling). */
const char *kv_key_name(kv_key k);
/* A plugin slot (KV_KEY_PLUGIN0..3) is known by its backend's own name
 * once a backend is loaded into it ("npu" rather than "Plugin0"): the
 * loader names the slot, and kv_key_name, kv_device_type_name and both
 * parsers use the name from then on. NULL or "" restores the slot's
 * default name. Start-up work, like loading. Returns 0, or -1 when k is
 * not a plugin slot or the name is longer than 31 bytes. */
int kv_key_set_plugin_name(kv_key k, const char *name);
/* The plugin-given name of a slot, or NULL when it has none. */
const char *kv_key_plugin_name(kv_key k);
/* Accepts kv_key_name spellings; returns 0 on success, -1 if unknown. */
int kv_key_parse(const char *name, kv_key *out);
/* Writes "CPU|Conjugate|Autograd" (lowest first; "" when empty) into buf;
 * returns the full length like snprintf (truncated output stays terminated). */
int kv_keyset_format(kv_keyset ks, char *buf, int cap);

/* Lazy bits are per-tensor functionality keys that a fallback
 * materializes (DESIGN.md section 4); backend kernels never see them. */
#define KV_KEYSET_LAZY \
    (kv_keyset_of(KV_KEY_CONJUGATE) | kv_keyset_of(KV_KEY_NEGATIVE) | kv_keyset_of(KV_KEY_ZERO_TENSOR))

static inline bool kv_key_is_lazy(kv_key k) {
    return k == KV_KEY_CONJUGATE || k == KV_KEY_NEGATIVE || k == KV_KEY_ZERO_TENSOR;
}

#endif
