/* Bug zoo: an f16/bf16 add.Tensor that breaks ties away from zero (C's
 * round()) instead of to even. Sums of operands one binade apart tie
 * often. Expected diagnosis: "rounds half away from zero". */
#include "zoo.h"

static void ha_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, zoo_add(a->dtype, zoo_load(a, k), zoo_load(b, k)), ZOO_HALF_AWAY);
}

static kv_status ha_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F16) | ZOO_DT(KV_BF16), true, ha_elem);
}

static kv_status ha_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, ha_add);
}

ZOO_PLUGIN("zoo_half_away", ha_reg)
