/* The ZeroTensor key: logical = 0. _efficientzerotensor makes one (a real
 * zero-filled storage, see kernels/ref/ref_lazy.c), views of it stay zero
 * tensors, the shared fallback (lazy_common.c) hands other ops a plain
 * zero tensor of the same geometry, and anything that would write to one
 * (in-place self, out=, copy_ into it) is KV_ERR_INVALID_ARG, as in
 * PyTorch. Its logical value ignores Conjugate and Negative, so
 * materializing drops those bits too. */
#include "modes/lazy_internal.h"

static kv_tensor *zero_apply(const kv_tensor *raw) { return kv_lazy_backend_zeros(raw); }

static kv_status zero_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_lazy_fallback_run(&kv_lazy_zero_bit, op, ks, stack, true);
}

const kv_lazy_bit kv_lazy_zero_bit = { KV_KEY_ZERO_TENSOR, zero_apply, true, zero_fallback };

/* Nothing beyond the shared kernels: immutability is checked by the
 * fallback (mutable arguments) and by copy_'s kernel. */
kv_status kv_lazy_zero_register(void) { return KV_OK; }
