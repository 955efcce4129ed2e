/* Moving tensors between the host and backends through the backends' own
 * copy operations, and the borrowed host view a SIM-like plugin runs CPU
 * code on.
 *
 * A copy takes the whole storage, not just the elements: the runner's
 * layouts (gaps, offsets, stride-0 dims) then arrive exactly as placed,
 * and a kernel that reads a gap reads the same bytes on every backend. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_internal.h"
#include "kv/accel.h"

/* Where a storage's bytes physically are: accel storage lives in its
 * target's memory. */
static kv_status memory_type(kv_device_type storage_type, kv_device_type *out) {
    if (storage_type != KV_DEVICE_ACCEL) {
        *out = storage_type;
        return KV_OK;
    }
    const kv_key t = kv_accel_target();
    if (t == KV_KEY_NONE)
        return kv_error(KV_ERR_DEVICE, "backend copy: accel memory has no target backend (KV_ACCEL_TARGET names one "
                                       "that is not loaded)");
    *out = (kv_device_type)t;
    return KV_OK;
}

/* The plugin's ops for memory of type t; NULL for host memory. */
static kv_status ops_for(kv_device_type t, const kv_backend_desc **out) {
    *out = NULL;
    if (t == KV_DEVICE_CPU) return KV_OK;
    const kv_backend_desc *d = kv_backend_desc_of(t);
    if (d != NULL) {
        *out = d;
        return KV_OK;
    }
    /* An allocator installed by hand (tests) on a host-addressable type. */
    if (kv_device_host_addressable(t)) return KV_OK;
    return kv_error(KV_ERR_DEVICE, "backend copy: device %s: its memory is not host-addressable and no backend "
                                   "plugin for it is loaded",
                    kv_device_type_name(t));
}

static _Atomic(kv_backend_mem_observer) g_mem_observer;

void kv_backend_set_mem_observer(kv_backend_mem_observer fn) { atomic_store(&g_mem_observer, fn); }

const char *kv_backend_mem_op_name(kv_backend_mem_op op) {
    switch (op) {
    case KV_BACKEND_MEM_NONE: return "none";
    case KV_BACKEND_MEM_COPY_TO_DEVICE: return "copy_to_device";
    case KV_BACKEND_MEM_COPY_TO_HOST: return "copy_to_host";
    case KV_BACKEND_MEM_COPY_ON_DEVICE: return "copy_on_device";
    case KV_BACKEND_MEM_MEMSET: return "memset";
    case KV_BACKEND_MEM_SYNCHRONIZE: return "synchronize";
    }
    return "?";
}

/* The observer around one plugin mem op. */
static void mem_watch(const kv_backend_desc *d, kv_backend_mem_op op, bool enter) {
    const kv_backend_mem_observer obs = atomic_load_explicit(&g_mem_observer, memory_order_relaxed);
    if (obs != NULL) obs(d->device_type, op, enter);
}

static kv_status to_device(const kv_backend_desc *d, void *dst, const void *src, size_t n) {
    mem_watch(d, KV_BACKEND_MEM_COPY_TO_DEVICE, true);
    const kv_status st = d->mem.copy_to_device(d->context, dst, src, n);
    mem_watch(d, KV_BACKEND_MEM_COPY_TO_DEVICE, false);
    return st;
}

static kv_status to_host(const kv_backend_desc *d, void *dst, const void *src, size_t n) {
    mem_watch(d, KV_BACKEND_MEM_COPY_TO_HOST, true);
    const kv_status st = d->mem.copy_to_host(d->context, dst, src, n);
    mem_watch(d, KV_BACKEND_MEM_COPY_TO_HOST, false);
    return st;
}

static kv_status copy_bytes(void *dst, const kv_backend_desc *dd, const void *src, const kv_backend_desc *sd,
                            size_t n) {
    if (n == 0) return KV_OK;
    if (dd == NULL && sd == NULL) {
        memcpy(dst, src, n);
        return KV_OK;
    }
    if (sd == NULL) return to_device(dd, dst, src, n);
    if (dd == NULL) return to_host(sd, dst, src, n);
    if (dd == sd && dd->mem.copy_on_device != NULL) {
        mem_watch(dd, KV_BACKEND_MEM_COPY_ON_DEVICE, true);
        const kv_status st = dd->mem.copy_on_device(dd->context, dst, src, n);
        mem_watch(dd, KV_BACKEND_MEM_COPY_ON_DEVICE, false);
        return st;
    }
    /* Two devices (or one without a device-side copy): bounce. */
    void *tmp = malloc(n);
    if (tmp == NULL) return kv_error(KV_ERR_OOM, "backend copy: no host memory for a %zu-byte bounce buffer", n);
    kv_status st = to_host(sd, tmp, src, n);
    if (st == KV_OK) st = to_device(dd, dst, tmp, n);
    free(tmp);
    return st;
}

kv_status kv_backend_storage_copy(const kv_storage *s, void *dst, const void *src, size_t nbytes) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(s->device.type, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK) return st;
    return copy_bytes(dst, d, src, d, nbytes);
}

kv_status kv_backend_storage_upload(kv_storage *dst, const void *host_src, size_t nbytes) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(dst->device.type, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK) return st;
    return copy_bytes(dst->data, d, host_src, NULL, nbytes < dst->nbytes ? nbytes : dst->nbytes);
}

kv_tensor *kv_backend_copy_to_device(const kv_tensor *t, kv_device device) {
    if (t == NULL || t->storage == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "backend copy: argument 't': NULL tensor");
        return NULL;
    }
    kv_device_type src_mem = KV_DEVICE_CPU, dst_mem = KV_DEVICE_CPU;
    const kv_backend_desc *sd = NULL, *dd = NULL;
    if (memory_type(t->storage->device.type, &src_mem) != KV_OK || ops_for(src_mem, &sd) != KV_OK) return NULL;
    /* An unknown device type fails in kv_tensor_empty with its own message. */
    if ((int)device.type >= 0 && device.type < KV_DEVICE_TYPE_COUNT &&
        (memory_type(device.type, &dst_mem) != KV_OK || ops_for(dst_mem, &dd) != KV_OK))
        return NULL;
    const size_t item = kv_dtype_size(t->dtype);
    const size_t nbytes = t->storage->nbytes;
    const int64_t nelem = (int64_t)((nbytes + item - 1) / item);
    kv_tensor *base = kv_tensor_empty(&nelem, 1, t->dtype, device);
    if (base == NULL) return NULL;
    if (copy_bytes(base->storage->data, dd, t->storage->data, sd, nbytes) != KV_OK) {
        kv_tensor_release(base);
        return NULL;
    }
    kv_tensor *out = kv_tensor_view(base, t->sizes, t->strides, t->ndim, t->offset);
    kv_tensor_release(base);
    if (out == NULL) return NULL;
    const kv_keyset lazy =
        kv_keyset_of(KV_KEY_CONJUGATE) | kv_keyset_of(KV_KEY_NEGATIVE) | kv_keyset_of(KV_KEY_ZERO_TENSOR);
    out->keys |= t->keys & lazy;
    /* Accel tensors carry the boxing key (kv/accel.h), whoever made them. */
    if (device.type == KV_DEVICE_ACCEL) out->keys |= kv_keyset_of(KV_KEY_ACCEL_BOXING);
    return out;
}

kv_tensor *kv_backend_copy_to_host(const kv_tensor *t) { return kv_backend_copy_to_device(t, KV_DEVICE_CPU0); }

kv_tensor *kv_backend_readable(const kv_tensor *t) {
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "backend copy: argument 't': NULL tensor");
        return NULL;
    }
    if (kv_tensor_data(t) != NULL) {
        kv_tensor_retain((kv_tensor *)t);
        return (kv_tensor *)t;
    }
    return kv_backend_copy_to_host(t);
}

kv_status kv_backend_mem_write(kv_device_type t, void *dst, const void *host_src, size_t nbytes) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(t, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK) return st;
    return copy_bytes(dst, d, host_src, NULL, nbytes);
}

kv_status kv_backend_mem_read(kv_device_type t, void *host_dst, const void *src, size_t nbytes) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(t, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK) return st;
    return copy_bytes(host_dst, NULL, src, d, nbytes);
}

kv_status kv_backend_mem_copy(kv_device_type t, void *dst, const void *src, size_t nbytes) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(t, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK) return st;
    return copy_bytes(dst, d, src, d, nbytes);
}

kv_status kv_backend_mem_set(kv_device_type t, void *dst, int byte, size_t nbytes) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(t, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK || nbytes == 0) return st;
    if (d == NULL) {
        memset(dst, byte, nbytes);
        return KV_OK;
    }
    if (d->mem.memset != NULL) {
        mem_watch(d, KV_BACKEND_MEM_MEMSET, true);
        st = d->mem.memset(d->context, dst, byte, nbytes);
        mem_watch(d, KV_BACKEND_MEM_MEMSET, false);
        return st;
    }
    /* memset is optional: without it, the bytes go over from the host. */
    void *tmp = malloc(nbytes);
    if (tmp == NULL) return kv_error(KV_ERR_OOM, "backend memset: no host memory for %zu bytes", nbytes);
    memset(tmp, byte, nbytes);
    st = to_device(d, dst, tmp, nbytes);
    free(tmp);
    return st;
}

kv_status kv_backend_synchronize(kv_device_type t) {
    kv_device_type mem = KV_DEVICE_CPU;
    const kv_backend_desc *d = NULL;
    kv_status st = memory_type(t, &mem);
    if (st == KV_OK) st = ops_for(mem, &d);
    if (st != KV_OK) return st;
    if (d == NULL || d->mem.synchronize == NULL) return KV_OK;
    mem_watch(d, KV_BACKEND_MEM_SYNCHRONIZE, true);
    st = d->mem.synchronize(d->context);
    mem_watch(d, KV_BACKEND_MEM_SYNCHRONIZE, false);
    return st;
}

kv_tensor *kv_backend_host_view(const kv_tensor *t, void *host_base) {
    if (t == NULL || t->storage == NULL || host_base == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "backend host view: NULL tensor or memory");
        return NULL;
    }
    /* Built field by field: core has no constructor over foreign memory,
     * and this one must never free it (allocator NULL = borrowed). Both
     * structs are public; kv_storage_release/kv_tensor_release free the
     * headers with free(), which is what these came from. */
    kv_storage *s = malloc(sizeof *s);
    kv_tensor *v = calloc(1, sizeof *v);
    if (s == NULL || v == NULL) {
        free(s);
        free(v);
        kv_error(KV_ERR_OOM, "backend host view: out of host memory for the headers");
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    s->data = host_base;
    s->nbytes = t->storage->nbytes;
    s->device = KV_DEVICE_CPU0;
    s->allocator = NULL;
    s->grown_allocator = NULL;
    atomic_init(&s->version, atomic_load(&t->storage->version));
    atomic_init(&v->refcount, 1);
    v->storage = s;
    v->ndim = t->ndim;
    memcpy(v->sizes, t->sizes, sizeof v->sizes);
    memcpy(v->strides, t->strides, sizeof v->strides);
    v->offset = t->offset;
    v->dtype = t->dtype;
    v->device = KV_DEVICE_CPU0;
    v->keys = (t->keys & ~KV_KEYSET_BACKENDS) | kv_keyset_of(KV_KEY_CPU);
    v->autograd = NULL;
    v->batched = NULL;
    return v;
}
