/* Resizing a tensor in place: what an out= argument whose shape differs
 * from the result's gets (PyTorch's resize_output). The tensor keeps its
 * storage and offset and takes row-major strides; the storage grows in
 * place when it is too small, so every view of it sees the new memory, as
 * in PyTorch. */
#include "kv/tensor.h"

kv_status kv_tensor_resize(kv_tensor *t, const int64_t *sizes, int ndim, const char *op, const char *arg) {
    if (ndim < 0 || ndim > KV_MAX_DIMS)
        return kv_error(KV_ERR_SHAPE, "%s: argument '%s': cannot resize to %d dims (at most %d)", op, arg, ndim,
                        KV_MAX_DIMS);
    bool same = t->ndim == ndim;
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 0)
            return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument '%s': cannot resize to a negative size %lld in dim %d",
                            op, arg, (long long)sizes[d], d);
        if (same && t->sizes[d] != sizes[d]) same = false;
    }
    if (same) return KV_OK;
    int64_t strides[KV_MAX_DIMS];
    const int64_t numel = kv_contiguous_strides(sizes, ndim, strides);
    const size_t need = numel == 0 ? 0 : (size_t)(t->offset + numel) * kv_dtype_size(t->dtype);
    kv_status st = kv_storage_grow(t->storage, need);
    if (st != KV_OK) return st;
    t->ndim = ndim;
    for (int d = 0; d < KV_MAX_DIMS; d++) {
        t->sizes[d] = d < ndim ? sizes[d] : 0;
        t->strides[d] = d < ndim ? strides[d] : 0;
    }
    return KV_OK;
}
