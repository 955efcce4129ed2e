/* Refcounted device memory blocks. The version counter lives here, not in
 * the tensor, so every view of one storage sees the same count. */
#include <stdlib.h>
#include <string.h>

#include "core/tensor_cache.h"
#include "kv/tensor.h"

kv_storage *kv_storage_new(size_t nbytes, kv_device device) {
    if ((int)device.type < 0 || (int)device.type >= (int)KV_DEVICE_TYPE_COUNT) {
        kv_error(KV_ERR_DEVICE, "storage: argument 'device': unknown device type %d", (int)device.type);
        return NULL;
    }
    if (device.index < 0) {
        kv_error(KV_ERR_DEVICE, "storage: argument 'device': negative device index %d for %s",
                 device.index, kv_device_type_name(device.type));
        return NULL;
    }
    kv_allocator *a = kv_allocator_for(device.type);
    if (a == NULL) {
        kv_error(KV_ERR_DEVICE, "storage: argument 'device': no allocator installed for device %s:%d",
                 kv_device_type_name(device.type), device.index);
        return NULL;
    }
    kv_storage *s = malloc(sizeof *s);
    if (s == NULL) {
        kv_error(KV_ERR_OOM, "storage: out of host memory for the storage header");
        return NULL;
    }
    s->data = kv_allocator_alloc(a, nbytes);
    if (s->data == NULL) {
        free(s);
        kv_error(KV_ERR_OOM, "storage: argument 'nbytes': allocator for %s:%d returned nothing for %zu bytes",
                 kv_device_type_name(device.type), device.index, nbytes);
        return NULL;
    }
    atomic_init(&s->refcount, 1);
    atomic_init(&s->version, 0);
    s->nbytes = nbytes;
    s->device = device;
    s->allocator = a;
    s->grown_allocator = NULL;
    return s;
}

void kv_storage_retain(kv_storage *s) {
    if (s) atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
}

void kv_storage_release(kv_storage *s) {
    if (s == NULL) return;
    /* acq_rel: the thread that frees must see every write made through
     * the other references before they were dropped. */
    if (atomic_load_explicit(&s->refcount, memory_order_acquire) != 1 &&
        atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) != 1)
        return;
    if (s->allocator == kv_tblock_allocator()) {
        /* A small tensor's storage: it owns the block its header,
         * storage and data share, and the header is already gone. */
        if (s->grown_allocator) kv_allocator_free(s->grown_allocator, s->data, s->nbytes);
        else kv_allocator_count(KV_DEVICE_CPU, (int64_t)s->nbytes, false);
        kv_tblock_put(kv_tblock_of_storage(s));
        return;
    }
    if (s->allocator) kv_allocator_free(s->allocator, s->data, s->nbytes);
    free(s);
}

kv_status (*kv_storage_copy_hook)(const kv_storage *s, void *dst, const void *src, size_t nbytes) = NULL;

/* The old bytes into the new memory. */
static kv_status keep_bytes(const kv_storage *s, void *data) {
    if (s->nbytes == 0) return KV_OK;
    if (kv_device_host_addressable(s->device.type)) {
        memcpy(data, s->data, s->nbytes);
        return KV_OK;
    }
    if (kv_storage_copy_hook == NULL)
        return kv_error(KV_ERR_DEVICE, "storage: cannot grow %s memory: nothing copies its bytes (call kv_init)",
                        kv_device_type_name(s->device.type));
    return kv_storage_copy_hook(s, data, s->data, s->nbytes);
}

kv_status kv_storage_grow(kv_storage *s, size_t nbytes) {
    if (nbytes <= s->nbytes) return KV_OK;
    const bool embedded = s->allocator == kv_tblock_allocator();
    if (s->allocator == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "storage: borrowed memory of %zu bytes cannot grow to %zu bytes", s->nbytes,
                        nbytes);
    kv_allocator *a = embedded ? kv_allocator_for(KV_DEVICE_CPU) : s->allocator;
    void *data = a ? kv_allocator_alloc(a, nbytes) : NULL;
    if (data == NULL)
        return kv_error(KV_ERR_OOM, "storage: no memory to grow a %s storage from %zu to %zu bytes",
                        kv_device_type_name(s->device.type), s->nbytes, nbytes);
    kv_status st = keep_bytes(s, data);
    if (st != KV_OK) {
        kv_allocator_free(a, data, nbytes);
        return st;
    }
    if (!embedded) {
        kv_allocator_free(s->allocator, s->data, s->nbytes);
    } else if (s->grown_allocator) {
        kv_allocator_free(s->grown_allocator, s->data, s->nbytes);
    } else {
        /* The block's own bytes stay with the block; only the count goes. */
        kv_allocator_count(KV_DEVICE_CPU, (int64_t)s->nbytes, false);
    }
    if (embedded) s->grown_allocator = a;
    s->data = data;
    s->nbytes = nbytes;
    return KV_OK;
}
