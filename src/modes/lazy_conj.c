/* The Conjugate key: logical = conj(stored). Its fallback is the shared
 * one (lazy_common.c); what is particular to it is how stored values map
 * to logical ones (conj_physical at the backend) and two kernels:
 * resolve_conj materializes, and conj_physical of a conjugate view is
 * just the stored values. conj and _conj are views that fall through here
 * and toggle the bit in their backend kernels. */
#include "modes/lazy_internal.h"

static kv_tensor *conj_apply(const kv_tensor *raw) { return kv_lazy_backend_unary("conj_physical", raw); }

static kv_status conj_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_lazy_fallback_run(&kv_lazy_conj_bit, op, ks, stack, true);
}

const kv_lazy_bit kv_lazy_conj_bit = { KV_KEY_CONJUGATE, conj_apply, false, conj_fallback };

static kv_status resolve_conj_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_lazy_resolve_kernel(&kv_lazy_conj_bit, op, ks, stack);
}

/* conj_physical(x) = conj(conj(stored)) = a copy of the stored values. */
static kv_status conj_physical_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!kv_lazy_has(self, KV_KEY_CONJUGATE))
        return kv_redispatch(op, ks & kv_keyset_below(KV_KEY_CONJUGATE), stack);
    kv_tensor *raw = kv_lazy_raw_alias(self);
    if (raw == NULL) return kv_last_error();
    kv_tensor *r = kv_lazy_backend_unary("clone", raw);
    kv_tensor_release(raw);
    if (r == NULL) return kv_last_error();
    /* Negative and ZeroTensor rank higher: their keys ran first, so self
     * carries no other bit to keep. */
    kv_lazy_count(KV_KEY_CONJUGATE, KV_LAZY_MATERIALIZATIONS);
    kv_stack_return_tensor(stack, r);
    return KV_OK;
}

kv_status kv_lazy_conj_register(void) {
    kv_status st = kv_register_kernel("resolve_conj", KV_KEY_CONJUGATE, resolve_conj_kernel);
    if (st != KV_OK) return st;
    return kv_register_kernel("conj_physical", KV_KEY_CONJUGATE, conj_physical_kernel);
}
