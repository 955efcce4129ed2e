/* Bug zoo: an f32 add.Tensor built with denormals-are-zero on: subnormal
 * inputs are read as zeros of their sign. Expected diagnosis: "treats
 * subnormal inputs as zero". */
#include "zoo.h"

static float daz_read(const kv_tensor *t, int64_t k) {
    const float v = (float)zoo_load(t, k);
    return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v;
}

static void daz_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, daz_read(a, k) + daz_read(b, k), ZOO_NEAREST_EVEN);
}

static kv_status daz_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F32), true, daz_elem);
}

static kv_status daz_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, daz_add);
}

ZOO_PLUGIN("zoo_daz", daz_reg)
