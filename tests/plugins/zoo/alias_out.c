/* Bug zoo: an f32 add.Tensor that saves an allocation by writing the sum
 * into self and returning self: the values are right, but the output
 * aliases an input (and the input changed). Expected diagnosis: the
 * metadata check's aliasing finding. */
#include "zoo.h"

static kv_status ao_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_status st = zoo_binary_args("add.Tensor", stack, ZOO_DT(KV_F32), true);
    if (st != KV_OK) return st;
    kv_tensor *a = kv_arg_tensor(stack, 0);
    const kv_tensor *b = kv_arg_tensor(stack, 1);
    if (!zoo_host->tensor_is_contiguous(a) || !zoo_host->tensor_is_contiguous(b))
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "add.Tensor: this zoo kernel takes contiguous inputs only");
    const int64_t n = zoo_host->tensor_numel(a);
    for (int64_t k = 0; k < n; k++) zoo_store(a, k, (float)zoo_load(a, k) + (float)zoo_load(b, k), ZOO_NEAREST_EVEN);
    zoo_host->tensor_retain(a);
    zoo_host->stack_return_tensors(stack, &a, 1);
    return KV_OK;
}

static kv_status ao_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, ao_add);
}

ZOO_PLUGIN("zoo_alias_out", ao_reg)
