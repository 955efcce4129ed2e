/* Bug zoo: an f32 mul.Tensor with a blocked path for large tensors
 * (numel > 65536, blocks of 4096, the way a threaded kernel splits its
 * work) whose block loop is off by one: the first element of every block
 * but the first is computed from the previous element's inputs. Right
 * below 65536 elements and at every block's other 4095 elements. */
#include "zoo.h"

#define CH_SERIAL_MAX 65536 /* the size where a real kernel goes parallel */
#define CH_BLOCK 4096

static void ch_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    int64_t src = k;
    if (n > CH_SERIAL_MAX && k > 0 && k % CH_BLOCK == 0) src = k - 1; /* the planted bug */
    zoo_store(out, k, zoo_mul(KV_F32, zoo_load(a, src), zoo_load(b, src)), ZOO_NEAREST_EVEN);
}

static kv_status ch_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "mul.Tensor", ZOO_DT(KV_F32), false, ch_elem);
}

static kv_status ch_reg(void) { return zoo_host->register_kernel("mul.Tensor", (kv_key)zoo_type, ch_mul); }

ZOO_PLUGIN("zoo_chunk", ch_reg)
