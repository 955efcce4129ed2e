/* Small helpers of the CUDA shim: geometry for cuda_api.h, outputs,
 * declines and device errors. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_shim.h"

kvc_geom kv_cuda_geom_of(const kv_tensor *t) {
    kvc_geom g;
    memset(&g, 0, sizeof g);
    g.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        g.sizes[d] = t->sizes[d];
        g.strides[d] = t->strides[d];
    }
    g.offset = t->offset;
    return g;
}

kvc_geom kv_cuda_geom_contiguous(const int64_t *sizes, int ndim) {
    kvc_geom g;
    memset(&g, 0, sizeof g);
    g.ndim = ndim;
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        g.sizes[d] = sizes[d];
        g.strides[d] = s;
        s *= sizes[d];
    }
    return g;
}

bool kv_cuda_geom_broadcast(const kv_tensor *t, const int64_t *sizes, int ndim, kvc_geom *out) {
    if (t->ndim > ndim) return false;
    memset(out, 0, sizeof *out);
    out->ndim = ndim;
    out->offset = t->offset;
    for (int d = 0; d < ndim; d++) {
        const int td = d - (ndim - t->ndim);
        out->sizes[d] = sizes[d];
        if (td < 0) continue;
        if (t->sizes[td] == sizes[d]) out->strides[d] = t->strides[td];
        else if (t->sizes[td] != 1) return false;
    }
    return true;
}

int kv_cuda_dtype_code(kv_dtype dt) {
    if (dt == KV_F32) return KVC_F32;
    if (dt == KV_F64) return KVC_F64;
    return -1;
}

bool kv_cuda_on_device(const kv_tensor *t) { return t != NULL && t->device.type == kv_cuda_type; }

kv_tensor *kv_cuda_empty(const int64_t *sizes, int ndim, kv_dtype dt) {
    return kv_cuda_host->tensor_empty(sizes, ndim, dt, (kv_device){ kv_cuda_type, 0 });
}

kv_status kv_cuda_decline(const char *op, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return kv_cuda_host->error(KV_ERR_MISSING_KERNEL, "%s: no CUDA kernel for %s", op, why);
}

kv_status kv_cuda_check_writable(const char *op, const char *arg, const kv_tensor *t) {
    switch (kv_tensor_internal_overlap(t, NULL)) {
    case KV_OVERLAP_NO: return KV_OK;
    case KV_OVERLAP_YES:
        return kv_cuda_host->error(KV_ERR_INVALID_ARG, "%s: argument '%s': unsupported operation: more than one "
                                                       "element of the written-to tensor refers to a single memory "
                                                       "location. Please clone() the tensor before performing the "
                                                       "operation.",
                                   op, arg);
    case KV_OVERLAP_UNKNOWN: break;
    }
    return kv_cuda_decline(op, "an argument '%s' whose overlap could not be decided", arg);
}

kv_status kv_cuda_device_error(const char *op) {
    return kv_cuda_host->error(KV_ERR_INTERNAL, "%s: cuda: %s", op, kvc_last_error());
}

kv_tensor *kv_cuda_operand(kv_tensor *t, kv_tensor **tmp) {
    *tmp = NULL;
    if (kv_cuda_on_device(t)) return t;
    if (t->ndim == 0 && t->device.type == KV_DEVICE_CPU) {
        *tmp = kv_cuda_host->copy_to_device(t, (kv_device){ kv_cuda_type, 0 });
        return *tmp;
    }
    kv_cuda_host->error(KV_ERR_DEVICE, "cuda: a tensor on %s:%d reached a CUDA kernel",
                        kv_cuda_host->device_type_name(t->device.type), t->device.index);
    return NULL;
}

kv_status kv_cuda_return(kv_stack *stack, kv_tensor *out) {
    kv_cuda_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

const char *kv_cuda_shape(const int64_t *sizes, int ndim, char *buf, int cap) {
    int len = snprintf(buf, (size_t)cap, "[");
    for (int d = 0; d < ndim && len < cap; d++)
        len += snprintf(buf + len, (size_t)(cap - len), d ? ", %lld" : "%lld", (long long)sizes[d]);
    if (len < cap) snprintf(buf + len, (size_t)(cap - len), "]");
    return buf;
}
