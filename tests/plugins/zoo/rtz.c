/* Bug zoo: an f16/bf16 mul.Tensor that truncates (rounds toward zero)
 * instead of rounding to nearest even. Expected diagnosis: "rounds toward
 * zero". */
#include "zoo.h"

static void rtz_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, zoo_mul(a->dtype, zoo_load(a, k), zoo_load(b, k)), ZOO_TOWARD_ZERO);
}

static kv_status rtz_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "mul.Tensor", ZOO_DT(KV_F16) | ZOO_DT(KV_BF16), false, rtz_elem);
}

static kv_status rtz_reg(void) {
    return zoo_host->register_kernel("mul.Tensor", (kv_key)zoo_type, rtz_mul);
}

ZOO_PLUGIN("zoo_rtz", rtz_reg)
