/* The SIM backend plugin: its entry point and its memory.
 *
 * This is the whole contract a new backend fills in (kv/backend.h):
 * check the ABI version, say who it is and whether it can run here, hand
 * over its memory operations, and register kernels when asked. SIM is
 * always available; a real backend probes its device here (see
 * kernels/cuda/cuda_plugin.c) and reports unavailable with the reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

const kv_host_api *kv_sim_host;

/* Device memory is 64-byte aligned host memory behind the address bias.
 * Zero-byte requests get a real block, so every allocation has a unique
 * address (as the CPU allocator does). */
static void *sim_alloc(void *context, size_t nbytes) {
    (void)context;
    size_t rounded = (nbytes + 63u) & ~(size_t)63u;
    if (rounded < nbytes) return NULL;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    return p ? kv_sim_device_ptr(p) : NULL;
}

static void sim_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    (void)nbytes;
    if (ptr != NULL && kv_sim_is_device_ptr(ptr)) free(kv_sim_host_ptr(ptr));
}

static kv_status sim_bad_address(const char *what, const void *p) {
    return kv_sim_host->error(KV_ERR_DEVICE, "sim: %s: %p is not a SIM device address", what, p);
}

static kv_status sim_copy_to_device(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    if (!kv_sim_is_device_ptr(dst)) return sim_bad_address("copy_to_device: argument 'dst'", dst);
    memcpy(kv_sim_host_ptr(dst), src, nbytes);
    return KV_OK;
}

static kv_status sim_copy_to_host(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    if (!kv_sim_is_device_ptr(src)) return sim_bad_address("copy_to_host: argument 'src'", src);
    memcpy(dst, kv_sim_host_ptr(src), nbytes);
    return KV_OK;
}

static kv_status sim_copy_on_device(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    if (!kv_sim_is_device_ptr(dst)) return sim_bad_address("copy_on_device: argument 'dst'", dst);
    if (!kv_sim_is_device_ptr(src)) return sim_bad_address("copy_on_device: argument 'src'", src);
    memmove(kv_sim_host_ptr(dst), kv_sim_host_ptr(src), nbytes);
    return KV_OK;
}

static kv_status sim_memset(void *context, void *dst, int byte, size_t nbytes) {
    (void)context;
    if (!kv_sim_is_device_ptr(dst)) return sim_bad_address("memset: argument 'dst'", dst);
    memset(kv_sim_host_ptr(dst), byte, nbytes);
    return KV_OK;
}

/* SIM runs every kernel to completion on the calling thread. */
static kv_status sim_synchronize(void *context) {
    (void)context;
    return KV_OK;
}

void *kv_sim_storage_host(const char *op, const char *arg, const kv_tensor *t) {
    if (t == NULL || t->storage == NULL || !kv_sim_is_device_ptr(t->storage->data)) {
        kv_sim_host->error(KV_ERR_DEVICE, "%s: argument '%s': expected a tensor in SIM memory, got %s:%d memory", op,
                           arg, t && t->storage ? kv_sim_host->device_type_name(t->storage->device.type) : "no",
                           t && t->storage ? t->storage->device.index : 0);
        return NULL;
    }
    return kv_sim_host_ptr(t->storage->data);
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1; /* the loader reports both versions */
    kv_sim_host = desc->host;
#ifdef KV_SIM_HALF
    /* Half SIM (sim_native.c): a plugin of its own, in any free slot. */
    snprintf(desc->name, sizeof desc->name, "halfsim");
    snprintf(desc->version, sizeof desc->version, "kvsuite SIM with every other op's kernel removed");
    desc->device_type = KV_BACKEND_SLOT_ANY;
#else
    snprintf(desc->name, sizeof desc->name, "sim");
    snprintf(desc->version, sizeof desc->version, "kvsuite SIM (host memory behind an address bias)");
    desc->device_type = KV_DEVICE_SIM;
#endif
    desc->available = 1;
    desc->host_addressable = 0; /* on purpose: see sim.h */
    desc->context = NULL;
    desc->mem = (kv_backend_mem_ops){
        .alloc = sim_alloc,
        .free = sim_free,
        .copy_to_device = sim_copy_to_device,
        .copy_to_host = sim_copy_to_host,
        .copy_on_device = sim_copy_on_device,
        .memset = sim_memset,
        .synchronize = sim_synchronize,
    };
    desc->register_kernels = kv_sim_register_kernels;
    return 0;
}
