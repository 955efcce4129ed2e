/* Bug zoo: an f32 add.Tensor that honours the storage offset but reads
 * every input as row-major from there, whatever its strides: a transposed
 * input comes out scrambled. Expected diagnosis: "wrong only for
 * transposed inputs". */
#include "zoo.h"

static void tr_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    const double x = zoo_load_at(KV_F32, a->storage->data, a->offset + k);
    const double y = zoo_load_at(KV_F32, b->storage->data, b->offset + k);
    zoo_store(out, k, (float)x + (float)y, ZOO_NEAREST_EVEN);
}

static kv_status tr_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F32), true, tr_elem);
}

static kv_status tr_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, tr_add);
}

ZOO_PLUGIN("zoo_transposed", tr_reg)
