/* Bug zoo: an f32 mul.Tensor that normalizes a zero product to +0 (a
 * "no negative zero" cleanup): 0 * -x must be -0. Expected diagnosis:
 * "sign of zero wrong". */
#include "zoo.h"

static void sz_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    const float r = (float)zoo_load(a, k) * (float)zoo_load(b, k);
    zoo_store(out, k, r == 0.0f ? 0.0 : r, ZOO_NEAREST_EVEN);
}

static kv_status sz_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "mul.Tensor", ZOO_DT(KV_F32), false, sz_elem);
}

static kv_status sz_reg(void) {
    return zoo_host->register_kernel("mul.Tensor", (kv_key)zoo_type, sz_mul);
}

ZOO_PLUGIN("zoo_signed_zero", sz_reg)
