/* Bug zoo: an f32 mul.Tensor built with flush-to-zero on: a subnormal
 * product comes out as a zero of its sign. Expected diagnosis: "flushes
 * subnormals". */
#include "zoo.h"

static void ftz_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    const float r = (float)zoo_load(a, k) * (float)zoo_load(b, k);
    zoo_store(out, k, fabsf(r) < 0x1p-126f ? copysign(0.0, r) : r, ZOO_NEAREST_EVEN);
}

static kv_status ftz_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "mul.Tensor", ZOO_DT(KV_F32), false, ftz_elem);
}

static kv_status ftz_reg(void) {
    return zoo_host->register_kernel("mul.Tensor", (kv_key)zoo_type, ftz_mul);
}

ZOO_PLUGIN("zoo_ftz", ftz_reg)
