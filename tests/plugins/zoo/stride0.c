/* Bug zoo: an f32 add.Tensor that walks its inputs by their strides but
 * takes a stride of 0 for "unset" and uses the contiguous stride there,
 * so a broadcast input (expanded, stride 0) is read as if it were
 * materialized: past the one stored row it reads whatever the memory
 * after it holds, which changes between allocations (zoo.h), so two
 * identical calls disagree. Expected diagnosis: the nondeterminism
 * message's "likely cause: wrong only for stride-0 inputs". */
#include "zoo.h"

static double s0_load(const kv_tensor *t, int64_t k) {
    int64_t off = t->offset, contig = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const int64_t i = k % t->sizes[d];
        k /= t->sizes[d];
        off += i * (t->strides[d] != 0 ? t->strides[d] : contig);
        contig *= t->sizes[d];
    }
    return zoo_load_at(t->dtype, t->storage->data, off);
}

static void s0_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, (float)s0_load(a, k) + (float)s0_load(b, k), ZOO_NEAREST_EVEN);
}

static kv_status s0_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "add.Tensor", ZOO_DT(KV_F32), true, s0_elem);
}

static kv_status s0_reg(void) {
    zoo_pad_varies = true;
    return zoo_host->register_kernel("add.Tensor", (kv_key)zoo_type, s0_add);
}

ZOO_PLUGIN("zoo_stride0", s0_reg)
