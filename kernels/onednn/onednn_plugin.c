/* The oneDNN backend plugin: its entry point, its memory, and the
 * registration of its kernels (onednn_*.c).
 *
 * Its memory is ordinary host memory (onednn.h says why), so the memory
 * operations are memcpy/memset and the runner may read its tensors
 * directly (host_addressable). Availability is whether oneDNN can make a
 * CPU engine here; it is probed in the loader's forked child, which is
 * also where oneDNN first detects the CPU's ISA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onednn/onednn.h"

const kv_host_api *kv_dnnl_host;
kv_device_type kv_dnnl_type = KV_BACKEND_SLOT_ANY;

/* 64-byte aligned (a cache line, and oneDNN's preferred alignment for
 * AVX-512 loads). Zero-byte requests get a real block, so every
 * allocation has a unique address, as with the CPU allocator. */
static void *od_alloc(void *context, size_t nbytes) {
    (void)context;
    size_t rounded = (nbytes + 63u) & ~(size_t)63u;
    if (rounded < nbytes) return NULL;
    if (rounded == 0) rounded = 64;
    return aligned_alloc(64, rounded);
}

static void od_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    (void)nbytes;
    free(ptr);
}

static kv_status od_copy(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    memmove(dst, src, nbytes);
    return KV_OK;
}

static kv_status od_memset(void *context, void *dst, int byte, size_t nbytes) {
    (void)context;
    memset(dst, byte, nbytes);
    return KV_OK;
}

/* Every primitive is waited for (dnnl_stream_wait) before its kernel
 * returns: there is never queued work. */
static kv_status od_synchronize(void *context) {
    (void)context;
    return KV_OK;
}

static kv_status od_register(void *context, kv_device_type type) {
    (void)context;
    kv_dnnl_type = type;
    const kv_key key = (kv_key)type;
    kv_status st = kv_dnnl_register_eltwise(key);
    if (st == KV_OK) st = kv_dnnl_register_binary(key);
    if (st == KV_OK) st = kv_dnnl_register_reduce(key);
    if (st == KV_OK) st = kv_dnnl_register_matmul(key);
    if (st == KV_OK) st = kv_dnnl_register_norm(key);
    if (st == KV_OK) st = kv_dnnl_register_copy(key);
    /* Ops without a kernel here run staged through the host reference (a
     * fallback, which the runner still counts as UNSUPPORTED here), so an
     * accel device boxed onto this backend can run every op. */
    if (st == KV_OK) kv_dnnl_host->register_fallback(key, kv_dnnl_host->stage_reference);
    return st;
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1; /* the loader reports both versions */
    kv_dnnl_host = desc->host;
    snprintf(desc->name, sizeof desc->name, "onednn");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    {
        const dnnl_version_t *v = dnnl_version();
        snprintf(desc->version, sizeof desc->version, "oneDNN %d.%d.%d", v->major, v->minor, v->patch);
    }
    dnnl_engine_t eng;
    const dnnl_status_t s = dnnl_engine_create(&eng, dnnl_cpu, 0);
    if (s != dnnl_success) {
        desc->available = 0;
        const dnnl_version_t *v = dnnl_version();
        snprintf(desc->reason, sizeof desc->reason, "oneDNN %d.%d.%d cannot create a CPU engine (dnnl_status_t %d)",
                 v->major, v->minor, v->patch, (int)s);
    } else {
        dnnl_engine_destroy(eng);
    }
    desc->host_addressable = 1;
    desc->context = NULL;
    desc->mem = (kv_backend_mem_ops){
        .alloc = od_alloc,
        .free = od_free,
        .copy_to_device = od_copy,
        .copy_to_host = od_copy,
        .copy_on_device = od_copy,
        .memset = od_memset,
        .synchronize = od_synchronize,
    };
    desc->register_kernels = od_register;
    return 0;
}
