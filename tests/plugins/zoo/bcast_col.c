/* Bug zoo: an f32 add.Tensor that broadcasts `other` by flat index
 * modulo other's element count. That is right when other's size-1 dims
 * lead ([M] or [1,M] against [N,M]) and wrong when a trailing dim is the
 * size-1 one ([N,1] against [N,M]): the column is read as a row. */
#include "zoo.h"

static kv_status bc_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (a->dtype != KV_F32 || b->dtype != KV_F32 || a->ndim == 0 || b->ndim > a->ndim ||
        zoo_host->scalar_to_double(kv_arg_scalar(stack, 2)) != 1.0)
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "add.Tensor: zoo_bcast_col takes f32, alpha 1");
    /* other must broadcast to self's shape (self is never broadcast). */
    for (int d = 0; d < b->ndim; d++) {
        const int64_t sb = b->sizes[b->ndim - 1 - d], sa = a->sizes[a->ndim - 1 - d];
        if (sb != sa && sb != 1)
            return zoo_host->error(KV_ERR_MISSING_KERNEL, "add.Tensor: zoo_bcast_col broadcasts other into self only");
    }
    kv_tensor *out = zoo_empty_like(a, KV_F32);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a), nb = zoo_host->tensor_numel(b);
    for (int64_t k = 0; k < n; k++) {
        const double y = nb == 0 ? 0.0 : zoo_load(b, k % nb); /* the planted bug: a size-1 trailing dim */
        zoo_store(out, k, zoo_add(KV_F32, zoo_load(a, k), y), ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status bc_reg(void) { return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, bc_add); }

ZOO_PLUGIN("zoo_bcast_col", bc_reg)
