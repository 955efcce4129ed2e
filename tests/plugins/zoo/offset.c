/* Bug zoo: an f32 add.Tensor that follows the strides but starts at the
 * storage's first element, ignoring the view's storage offset. Expected
 * diagnosis: "wrong only for storage-offset inputs". */
#include "zoo.h"

static void of_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    const double x = zoo_load_at(KV_F32, a->storage->data, zoo_offset(a, k) - a->offset);
    const double y = zoo_load_at(KV_F32, b->storage->data, zoo_offset(b, k) - b->offset);
    zoo_store(out, k, (float)x + (float)y, ZOO_NEAREST_EVEN);
}

static kv_status of_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F32), true, of_elem);
}

static kv_status of_reg(void) {
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, of_add);
}

ZOO_PLUGIN("zoo_offset", of_reg)
