/* Lazy bits: Conjugate, Negative and ZeroTensor (DESIGN.md section 4).
 *
 * A lazy bit is a per-tensor key that changes what the stored values mean:
 *   Conjugate   logical = conj(stored)   (complex dtypes only)
 *   Negative    logical = -stored        (every dtype but bool)
 *   ZeroTensor  logical = 0              (the storage is real and zero
 *                                         filled, so reading the stored
 *                                         values gives zeros too)
 * `conj`, `_conj`, `_neg_view` and `_efficientzerotensor` make them;
 * `resolve_conj`, `resolve_neg`, `clone` and `conj_physical` materialize
 * them; `is_conj`, `is_neg` and `_is_zerotensor` report them.
 *
 * Each key has a boxed fallback: every tensor argument carrying the bit is
 * replaced by a materialized copy (that bit resolved, the other bits kept)
 * and the op is redispatched below the key. Mutable arguments (in-place
 * self, out=) carrying the bit are computed on a materialized copy that is
 * then copied back through the bit, so the argument keeps its bit and its
 * logical values are right. Writing to a ZeroTensor is KV_ERR_INVALID_ARG.
 * Priority is ZeroTensor > Negative > Conjugate, so a tensor with several
 * bits is resolved outermost first.
 *
 * View ops (kv_schema_is_view) fall through at the three keys, so their
 * backend kernels see the bit and pass it to the view (kv_tensor_view
 * copies keys). `contiguous` and `reshape`, which may copy instead of
 * viewing, have kernels that strip the bit, run the op and put the bit on
 * whatever comes back (a view or a copy of the stored values). copy_
 * follows the XOR rule: dst keeps its own bits and its logical values
 * become src's logical values.
 *
 * Every other backend kernel never sees a lazy bit. When KV_LAZY_CHECK is
 * 1 (built with -DKV_DEBUG_LAZY, or without NDEBUG — which includes the
 * normal -O2 -g build) the dispatcher checks it before calling a backend
 * key: a tensor argument with a lazy bit that this op does not fall
 * through is KV_ERR_INTERNAL naming the op and the argument. */
#ifndef KV_LAZY_H
#define KV_LAZY_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/keys.h"
#include "kv/status.h"
#include "kv/tensor.h"

/* KV_KEYSET_LAZY and kv_key_is_lazy are in kv/keys.h, KV_LAZY_CHECK in
 * kv/dispatch.h: the keys and the dispatcher's check sit below the modes. */

/* Registers the three fallbacks, the view-op fallthroughs and the kernels
 * at the lazy keys (called from kv_modes_register_all). Idempotent. */
kv_status kv_lazy_register(void);

/* The fallback kv_lazy_register installs at a lazy key (NULL for other
 * keys), so a test that removed it with kv_register_fallback(key, NULL)
 * can put it back. With it removed, an op on a tensor carrying the bit is
 * KV_ERR_MISSING_KERNEL "op 'X': no kernel for key Conjugate (...)". */
kv_kernel_fn kv_lazy_fallback(kv_key key);

/* What ran at one lazy key since the last reset (all threads). */
typedef struct kv_lazy_counters {
    int64_t fallback_calls;   /* the key's boxed fallback was entered */
    int64_t materializations; /* a tensor's bit was resolved into a new tensor */
    int64_t copy_backs;       /* a mutable argument was written back through the bit */
} kv_lazy_counters;

/* All zeros for keys that are not lazy. */
kv_lazy_counters kv_lazy_counters_get(kv_key key);
void kv_lazy_counters_reset(void);

/* A new tensor carrying `bit` whose LOGICAL values equal `logical`'s (its
 * stored values are their conj or negation), contiguous, same shape, dtype
 * and device, no other lazy bit. `logical` may itself carry lazy bits.
 * For KV_KEY_ZERO_TENSOR the result is a zero tensor of that shape:
 * `logical` is expected to be all zeros and only its geometry is used.
 * Errors: a non-lazy `bit` (KV_ERR_INVALID_ARG), Conjugate on a
 * non-complex dtype or Negative on bool (KV_ERR_DTYPE). For the runner. */
kv_tensor *kv_lazy_make(const kv_tensor *logical, kv_key bit);

/* A new contiguous tensor holding t's logical values with no lazy bit
 * (and no other functionality key): every bit resolved, outermost first.
 * Always a new tensor, also when t carries no bit. */
kv_tensor *kv_lazy_materialize(const kv_tensor *t);

#endif
