/* What the lazy-bit files share: the per-key description, the generic
 * fallback body, materialization and the backend calls it is built on.
 * Not public (kv/lazy.h is). */
#ifndef KV_MODES_LAZY_INTERNAL_H
#define KV_MODES_LAZY_INTERNAL_H

#include "kv/lazy.h"

/* One lazy key. `apply` maps stored values to logical values (and back:
 * conj and neg are involutions): it gets a tensor without functionality
 * keys and returns a new one, or NULL with the error set. */
typedef struct kv_lazy_bit {
    kv_key key;
    kv_tensor *(*apply)(const kv_tensor *raw);
    /* ZeroTensors cannot be written, and their logical value does not
     * depend on other bits, so materializing one drops every bit. */
    bool immutable;
    kv_kernel_fn fallback; /* what kv_lazy_register installs at `key` */
} kv_lazy_bit;

extern const kv_lazy_bit kv_lazy_conj_bit;
extern const kv_lazy_bit kv_lazy_neg_bit;
extern const kv_lazy_bit kv_lazy_zero_bit;

const kv_lazy_bit *kv_lazy_bit_of(kv_key key); /* NULL for other keys */

/* Per-key registration, called by kv_lazy_register after the shared part. */
kv_status kv_lazy_conj_register(void);
kv_status kv_lazy_neg_register(void);
kv_status kv_lazy_zero_register(void);

/* ---- counters ---- */
typedef enum kv_lazy_counter {
    KV_LAZY_FALLBACK_CALLS,
    KV_LAZY_MATERIALIZATIONS,
    KV_LAZY_COPY_BACKS
} kv_lazy_counter;
void kv_lazy_count(kv_key key, kv_lazy_counter which);

/* ---- tensors ---- */
static inline bool kv_lazy_has(const kv_tensor *t, kv_key k) { return kv_keyset_has(t->keys, k); }
/* A new tensor struct over t's storage and geometry with only t's backend
 * key: the stored values, as a backend kernel may see them. */
kv_tensor *kv_lazy_raw_alias(const kv_tensor *t);
/* A new tensor holding t's values with bit->key resolved: the other lazy
 * bits are kept on it (none for ZeroTensor). Counts a materialization. */
kv_tensor *kv_lazy_materialize_bit(const kv_tensor *t, const kv_lazy_bit *bit);
/* Writes src's logical values into dst so that dst, keeping its own bits,
 * reads them back (the XOR rule of copy_). `op` names the caller in
 * errors; a ZeroTensor dst is the immutability error. Broadcasts src to
 * dst's shape and converts dtypes as copy_ does; bumps dst's version. */
/* `below` is the key set under the lazy keys that the final write runs
 * with: a mutation must reach Functionalize and Trace when they are live
 * (materializations stay internal). With no functionality key in it the
 * write goes straight to the backend. */
kv_status kv_lazy_copy_logical(const char *op, kv_tensor *dst, const kv_tensor *src, kv_keyset below);
/* KV_ERR_INVALID_ARG "op: argument 'arg': ZeroTensors are immutable. ..." */
kv_status kv_lazy_immutable_error(const char *op, const char *arg);

/* ---- backend calls (straight to the backend key of the tensors) ---- */
/* conj_physical, neg or clone of a tensor without functionality keys. */
kv_tensor *kv_lazy_backend_unary(const char *op_name, const kv_tensor *raw);
/* A zero-filled contiguous tensor of t's shape, dtype and device. */
kv_tensor *kv_lazy_backend_zeros(const kv_tensor *t);

/* ---- kernels ---- */
/* The fallback body: materialize flagged arguments, redispatch below the
 * key, copy mutable arguments back. `counted` is false for the kernels
 * (clone) that reuse it without being the fallback. */
kv_status kv_lazy_fallback_run(const kv_lazy_bit *bit, const kv_op *op, kv_keyset ks, kv_stack *stack,
                               bool counted);
/* resolve_conj / resolve_neg at their own key: a materialized copy when
 * self carries the bit, else whatever the layers below return. */
kv_status kv_lazy_resolve_kernel(const kv_lazy_bit *bit, const kv_op *op, kv_keyset ks, kv_stack *stack);

#endif
