/* CUDA view ops. Views are metadata only: the CPU reference kernels of
 * these ops never touch data and keep their input's device (kernels/ref/
 * ref_view.c, ref_lazy.c), so a CUDA view is the CPU kernel run on the
 * CUDA tensor itself, below every functionality key. Ops that may copy
 * (reshape, resolve_conj, ...) are not here. */
#include "cuda/cuda_shim.h"

static kv_status cuda_view_op(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return kv_cuda_host->call_reference(op, stack);
}

static const char *const view_ops[] = {
    "view",    "_unsafe_view", "transpose.int", "t",          "permute", "select.int", "slice.Tensor",
    "squeeze", "squeeze.dim",  "unsqueeze",     "expand",     "as_strided", "detach", "unfold",
    "conj",    "_conj",        "_neg_view",     "is_conj",    "is_neg",  "_is_zerotensor",
};

kv_status kv_cuda_register_views(kv_key key) {
    for (size_t i = 0; i < sizeof view_ops / sizeof view_ops[0]; i++) {
        const kv_status st = kv_cuda_host->register_kernel(view_ops[i], key, cuda_view_op);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
