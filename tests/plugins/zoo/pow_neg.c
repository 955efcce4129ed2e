/* Bug zoo: pow.Tensor_Scalar (f32, f64) as pow(|x|, e): the sign of a
 * negative base is lost (x^3 of -2 gives 8) and a negative base with a
 * non-integer exponent gives a number instead of NaN. Right for x >= 0. */
#include "zoo.h"

static kv_status pn_pow(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_F32 && a->dtype != KV_F64)
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "pow.Tensor_Scalar: zoo_pow_neg takes f32 and f64");
    const double e = zoo_host->scalar_to_double(kv_arg_scalar(stack, 1));
    kv_tensor *out = zoo_empty_like(a, a->dtype);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a);
    for (int64_t k = 0; k < n; k++) {
        const double x = zoo_load(a, k);
        /* f32 through double: one rounding of a nearly exact power. */
        const double r = a->dtype == KV_F32 ? (double)(float)pow(fabs(x), e) : pow(fabs(x), e); /* the bug: fabs */
        zoo_store(out, k, r, ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status pn_reg(void) { return zoo_host->register_kernel("pow.Tensor_Scalar", (kv_key)zoo_type, pn_pow); }

ZOO_PLUGIN("zoo_pow_neg", pn_reg)
