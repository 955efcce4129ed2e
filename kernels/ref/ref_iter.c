/* The strided N-d iterator of the reference kernels.
 *
 * Row-major over the (broadcast) shape: the last dimension moves fastest,
 * so every reference visits elements in the same documented order. Each
 * operand carries its own byte strides (0 on broadcast dims), which is all
 * that transposed, sliced, offset and expanded inputs need. */
#include "ref/ref.h"

kv_status kv_ref_iter_init(kv_ref_iter *it, const int64_t *sizes, int ndim,
                           kv_tensor *const *tensors, int nops) {
    if (nops < 0 || nops > KV_REF_ITER_MAX_OPS)
        return kv_error(KV_ERR_INTERNAL, "ref iterator: %d operands (at most %d)", nops,
                        KV_REF_ITER_MAX_OPS);
    if (ndim < 0 || ndim > KV_MAX_DIMS)
        return kv_error(KV_ERR_INTERNAL, "ref iterator: %d dims (at most %d)", ndim, KV_MAX_DIMS);
    it->ndim = ndim;
    it->nops = nops;
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 0)
            return kv_error(KV_ERR_NEGATIVE_SIZE, "ref iterator: size %lld at dim %d",
                            (long long)sizes[d], d);
        it->sizes[d] = sizes[d];
        it->index[d] = 0;
        total *= sizes[d];
    }
    for (int i = 0; i < nops; i++) {
        const kv_tensor *t = tensors[i];
        int64_t strides[KV_MAX_DIMS];
        kv_status st = kv_broadcast_strides(t, sizes, ndim, strides);
        if (st != KV_OK) return st;
        const int64_t esize = (int64_t)kv_dtype_size(t->dtype);
        for (int d = 0; d < ndim; d++) it->byte_strides[i][d] = strides[d] * esize;
        it->ptr[i] = (char *)kv_tensor_data(t);
        if (it->ptr[i] == NULL && total > 0)
            return kv_error(KV_ERR_DEVICE, "ref iterator: operand %d is on %s, not host memory", i,
                            kv_device_type_name(t->device.type));
    }
    it->remaining = total;
    /* index[0] = -1 marks "nothing visited yet": the first next() stays on
     * element 0 instead of stepping past it. */
    if (ndim > 0) it->index[0] = -1;
    return KV_OK;
}

bool kv_ref_iter_next(kv_ref_iter *it) {
    if (it->remaining <= 0) return false;
    it->remaining--;
    if (it->ndim == 0) return true;
    if (it->index[0] < 0) {
        it->index[0] = 0;
        return true;
    }
    for (int d = it->ndim - 1; d >= 0; d--) {
        if (++it->index[d] < it->sizes[d]) {
            for (int i = 0; i < it->nops; i++) it->ptr[i] += it->byte_strides[i][d];
            return true;
        }
        /* Carry: rewind this dim to 0 and move the next outer one. */
        it->index[d] = 0;
        for (int i = 0; i < it->nops; i++)
            it->ptr[i] -= it->byte_strides[i][d] * (it->sizes[d] - 1);
    }
    return true; /* unreachable while remaining was counted right */
}
