/* The Negative key: logical = -stored. The shared fallback
 * (lazy_common.c) does the work; this file says how stored values map to
 * logical ones (neg at the backend, wrapping for integers) and registers
 * resolve_neg. _neg_view is a view that falls through here and toggles
 * the bit in its backend kernel. */
#include "modes/lazy_internal.h"

static kv_tensor *neg_apply(const kv_tensor *raw) { return kv_lazy_backend_unary("neg", raw); }

static kv_status neg_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_lazy_fallback_run(&kv_lazy_neg_bit, op, ks, stack, true);
}

const kv_lazy_bit kv_lazy_neg_bit = { KV_KEY_NEGATIVE, neg_apply, false, neg_fallback };

static kv_status resolve_neg_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_lazy_resolve_kernel(&kv_lazy_neg_bit, op, ks, stack);
}

kv_status kv_lazy_neg_register(void) { return kv_register_kernel("resolve_neg", KV_KEY_NEGATIVE, resolve_neg_kernel); }
