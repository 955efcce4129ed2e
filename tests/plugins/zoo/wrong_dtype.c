/* Bug zoo: an f16 mul.Tensor that returns the right products as an f32
 * tensor (it forgot the final conversion). Expected diagnosis: "wrong
 * dtype". */
#include "zoo.h"

static kv_status wd_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_status st = zoo_binary_args("mul.Tensor", stack, ZOO_DT(KV_F16), false);
    if (st != KV_OK) return st;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_tensor *out = zoo_empty_like(a, KV_F32);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a);
    /* The product rounded to f16 (right value), stored as f32. */
    for (int64_t k = 0; k < n; k++)
        zoo_store(out, k, zoo_decode(zoo_fmt_of(KV_F16), zoo_encode(zoo_fmt_of(KV_F16), zoo_load(a, k) * zoo_load(b, k),
                                                                     ZOO_NEAREST_EVEN)),
                  ZOO_NEAREST_EVEN);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status wd_reg(void) {
    return zoo_host->register_kernel("mul.Tensor", (kv_key)zoo_type, wd_mul);
}

ZOO_PLUGIN("zoo_wrong_dtype", wd_reg)
