/* Bug zoo: an f32 add.Tensor vectorized 4 wide whose remainder loop (the
 * last numel % 4 elements) subtracts instead of adding. Expected
 * diagnosis: "wrong only in the last numel % 4 elements". */
#include "zoo.h"

static void tail_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    const float x = (float)zoo_load(a, k), y = (float)zoo_load(b, k);
    zoo_store(out, k, k < n - n % 4 ? x + y : x - y, ZOO_NEAREST_EVEN);
}

static kv_status tail_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F32), true, tail_elem);
}

static kv_status tail_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, tail_add);
}

ZOO_PLUGIN("zoo_tail4", tail_reg)
