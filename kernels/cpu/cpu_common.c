/* Argument helpers shared by the CPU variants (cpu/cpu.h). */
#include "cpu/cpu.h"

#include <string.h>


bool kv_cpu_strides_ok(const kv_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] < 0) return false;
    return true;
}

bool kv_cpu_plain(const kv_tensor *t) {
    if (t == NULL || t->device.type != KV_DEVICE_CPU || (t->keys & KV_KEYSET_LAZY) || t->batched) return false;
    if (!kv_cpu_strides_ok(t)) return false;
    /* CPU memory is host memory whatever is loaded (only other devices'
     * flags change), so memory present means a data pointer: the common
     * case answered without kv_tensor_data's checks. */
    if (t->storage != NULL && t->storage->data != NULL) return true;
    return kv_tensor_numel(t) == 0 || kv_tensor_data(t) != NULL;
}

bool kv_cpu_contig(const kv_tensor *t) {
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1) continue;
        if (t->strides[d] != expect) return false;
        expect *= t->sizes[d];
    }
    return true;
}

kv_tensor *kv_cpu_new(const int64_t *sizes, int ndim, kv_dtype dt) {
    return kv_tensor_empty(sizes, ndim, dt, KV_DEVICE_CPU0);
}

bool kv_cpu_same_storage(const kv_tensor *a, const kv_tensor *b) {
    return a && b && a->storage == b->storage;
}

void kv_cpu_copy_strided(char *dst, const int64_t *dst_strides, const char *src, const int64_t *src_strides,
                         const int64_t *sizes, int ndim, size_t esize) {
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) total *= sizes[d];
    if (total == 0) return;
    if (ndim == 0) {
        memcpy(dst, src, esize);
        return;
    }
    const int in = ndim - 1;
    const int64_t n = sizes[in];
    const int64_t ds = dst_strides[in] * (int64_t)esize, ss = src_strides[in] * (int64_t)esize;
    const bool rows = dst_strides[in] == 1 && src_strides[in] == 1;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t done = 0; done < total; done += n) {
        int64_t doff = 0, soff = 0;
        for (int d = 0; d < in; d++) {
            doff += idx[d] * dst_strides[d];
            soff += idx[d] * src_strides[d];
        }
        char *dp = dst + doff * (int64_t)esize;
        const char *sp = src + soff * (int64_t)esize;
        if (rows) {
            memcpy(dp, sp, (size_t)n * esize);
        } else if (esize == 4) {
            for (int64_t i = 0; i < n; i++) memcpy(dp + i * ds, sp + i * ss, 4);
        } else if (esize == 8) {
            for (int64_t i = 0; i < n; i++) memcpy(dp + i * ds, sp + i * ss, 8);
        } else {
            for (int64_t i = 0; i < n; i++) memcpy(dp + i * ds, sp + i * ss, esize);
        }
        for (int d = in - 1; d >= 0; d--) {
            if (++idx[d] < sizes[d]) break;
            idx[d] = 0;
        }
    }
}

void kv_cpu_gather(const kv_tensor *t, void *dst) {
    int64_t cs[KV_MAX_DIMS];
    kv_contiguous_strides(t->sizes, t->ndim, cs);
    kv_cpu_copy_strided(dst, cs, kv_tensor_data(t), t->strides, t->sizes, t->ndim, kv_dtype_size(t->dtype));
}
