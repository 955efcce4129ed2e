/* The "direct" variant of repeat.
 *
 * The reference computes an index modulo the input's sizes for every
 * output element. This one gathers self once into the first tile of the
 * contiguous output, then replicates tiles with memcpy from the innermost
 * dim outwards: after dims d+1.. are done, the slab of dim d for
 * i_d < size_d is one contiguous run, copied repeats[d] - 1 times by
 * doubling. Same bytes as the reference (no conversion): bitwise. */
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"

bool kv_cpu_repeat_pred(const kv_op *op, const kv_stack *s) {
    if (kv_op_builtin_id(op) != KV_OP_REPEAT || s->size < 2) return false;
    if (s->slots[0].tag != KV_IV_TENSOR || s->slots[1].tag != KV_IV_INT_LIST) return false;
    const kv_tensor *self = s->slots[0].v.tensor;
    const kv_int_list r = s->slots[1].v.ints;
    if (!kv_cpu_plain(self) || r.n < self->ndim || r.n > KV_MAX_DIMS) return false;
    for (int d = 0; d < r.n; d++)
        if (r.items[d] < 0) return false; /* the reference's error */
    return true;
}

/* Copies the n bytes at p to the (copies - 1) runs after it, by doubling. */
static void rp_replicate(char *p, size_t n, int64_t copies) {
    const size_t total = n * (size_t)copies;
    size_t done = n;
    while (done < total) {
        const size_t k = done < total - done ? done : total - done;
        memcpy(p + done, p, k);
        done += k;
    }
}

kv_status kv_cpu_repeat_kernel(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)ks;
    if (!kv_cpu_repeat_pred(op, s))
        return kv_error(KV_ERR_INVALID_ARG, "repeat: the direct variant does not cover this call");
    const kv_tensor *self = s->slots[0].v.tensor;
    const kv_int_list r = s->slots[1].v.ints;
    const int nd = r.n, lead = r.n - self->ndim;
    int64_t in[KV_MAX_DIMS], in_st[KV_MAX_DIMS], out_sizes[KV_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        in[d] = d < lead ? 1 : self->sizes[d - lead];
        in_st[d] = d < lead ? 0 : self->strides[d - lead];
        out_sizes[d] = in[d] * r.items[d];
    }
    kv_tensor *out = kv_cpu_new(out_sizes, nd, self->dtype);
    if (out == NULL) return kv_last_error();
    if (kv_tensor_numel(out) > 0) {
        const size_t es = kv_dtype_size(self->dtype);
        char *base = kv_tensor_data(out);
        kv_cpu_copy_strided(base, out->strides, kv_tensor_data(self), in_st, in, nd, es);
        for (int d = nd - 1; d >= 0; d--) {
            if (r.items[d] == 1) continue;
            /* Every outer index (dims < d, below their input sizes). */
            int64_t outer = 1;
            for (int k = 0; k < d; k++) outer *= in[k];
            const size_t slab = (size_t)(in[d] * out->strides[d]) * es;
            int64_t idx[KV_MAX_DIMS] = { 0 };
            for (int64_t o = 0; o < outer; o++) {
                int64_t off = 0;
                for (int k = 0; k < d; k++) off += idx[k] * out->strides[k];
                rp_replicate(base + off * (int64_t)es, slab, r.items[d]);
                for (int k = d - 1; k >= 0; k--) {
                    if (++idx[k] < in[k]) break;
                    idx[k] = 0;
                }
            }
        }
    }
    kv_stack_return_tensor(s, out);
    return KV_OK;
}
