/* Bug zoo: an f32 add.Tensor that drops alpha (self + other, whatever
 * alpha is). Expected diagnosis: "ignores alpha". */
#include "zoo.h"

static void al_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, (float)zoo_load(a, k) + (float)zoo_load(b, k), ZOO_NEAREST_EVEN);
}

static kv_status al_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F32), false, al_elem);
}

static kv_status al_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, al_add);
}

ZOO_PLUGIN("zoo_alpha", al_reg)
