/* Bug zoo: an f64 -> f16 _to_copy through an f32 intermediate, the way
 * (_Float16)(float)x does it: the first rounding can land exactly on an
 * f16 tie, which the second then breaks to even, one ulp from the
 * correctly rounded value. Expected diagnosis: "double rounding". */
#include "zoo.h"

static kv_status dr_to_copy(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_F64 || kv_arg_is_none(stack, 1) || kv_arg_dtype(stack, 1) != KV_F16 ||
        !kv_arg_is_none(stack, 2) || !kv_arg_is_none(stack, 3) || !kv_arg_is_none(stack, 4) ||
        !kv_arg_is_none(stack, 6) || !zoo_host->tensor_is_contiguous(a))
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "_to_copy: this zoo kernel takes contiguous f64 to f16 only");
    kv_tensor *out = zoo_empty_like(a, KV_F16);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a);
    for (int64_t k = 0; k < n; k++) zoo_store(out, k, (float)zoo_load(a, k), ZOO_NEAREST_EVEN);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status dr_reg(void) {
    return zoo_host->register_kernel("_to_copy", (kv_key)zoo_type, dr_to_copy);
}

ZOO_PLUGIN("zoo_double_round", dr_reg)
