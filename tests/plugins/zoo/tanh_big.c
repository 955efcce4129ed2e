/* Bug zoo: an f32 tanh as expm1(2x) / (expm1(2x) + 2) in double, exact
 * enough everywhere except where exp(2x) overflows (x > 354, +Inf):
 * Inf / Inf gives NaN where tanh is 1. */
#include "zoo.h"

static kv_status tb_tanh(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_F32) return zoo_host->error(KV_ERR_MISSING_KERNEL, "tanh: zoo_tanh_big takes f32");
    kv_tensor *out = zoo_empty_like(a, KV_F32);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a);
    for (int64_t k = 0; k < n; k++) {
        const double t = expm1(2.0 * zoo_load(a, k)); /* the bug: no saturation before it overflows */
        zoo_store(out, k, t / (t + 2.0), ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status tb_reg(void) { return zoo_host->register_kernel("tanh", (kv_key)zoo_type, tb_tanh); }

ZOO_PLUGIN("zoo_tanh_big", tb_reg)
