/* CUDA out= ops (add.out, mm.out, ...): the CUDA functional kernel, then
 * CUDA's copy_ into out, with the host's out= rules between them
 * (host->out_run: device, dtype, resizing out in CUDA memory, overlap).
 * Every out= op of ops.schema is taken: PyTorch marks one by a
 * keyword-only mutable Tensor argument. */
#include "cuda/cuda_shim.h"

static kv_key g_out_key;

static kv_status cuda_out(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return kv_cuda_host->out_run(op, g_out_key, stack);
}

static bool cuda_is_out(const kv_schema *s) {
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].kwarg_only && s->args[i].alias.is_write) return true;
    return false;
}

kv_status kv_cuda_register_out(kv_key key) {
    const kv_host_api *h = kv_cuda_host;
    g_out_key = key;
    for (int i = 0; i < h->op_count(); i++) {
        const kv_op *op = h->op_at(i);
        if (op == NULL) return h->last_error();
        if (!cuda_is_out(h->op_schema(op))) continue;
        const kv_status st = h->register_kernel(h->op_name(op), key, cuda_out);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
