/* The CUDA backend plugin: its entry point, its memory operations, and
 * the registration of its kernels (cuda_ops_*.c).
 *
 * Availability is the device side's probe (cuda_runtime.cu): without a
 * driver, without a device, or on a device older than sm_90 the plugin
 * reports itself unavailable with the reason, and the loader skips it.
 * The same shim linked with cuda_emu.c instead is the emulation the tests
 * use (it asks for any free plugin slot, so both can load at once). */
#include <stdio.h>

#include "cuda/cuda_shim.h"

const kv_host_api *kv_cuda_host;
kv_device_type kv_cuda_type = KV_DEVICE_CUDA;

static void *cuda_alloc(void *context, size_t nbytes) {
    (void)context;
    return kvc_alloc(nbytes);
}

static void cuda_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    (void)nbytes;
    kvc_free(ptr);
}

static kv_status cuda_result(int rc, const char *what) {
    return rc == 0 ? KV_OK : kv_cuda_host->error(KV_ERR_INTERNAL, "%s: %s: %s", kvc_impl_name(), what, kvc_last_error());
}

static kv_status cuda_to_device(void *context, void *dst, const void *src, size_t n) {
    (void)context;
    return cuda_result(kvc_copy_h2d(dst, src, n), "copy_to_device");
}

static kv_status cuda_to_host(void *context, void *dst, const void *src, size_t n) {
    (void)context;
    return cuda_result(kvc_copy_d2h(dst, src, n), "copy_to_host");
}

static kv_status cuda_on_device(void *context, void *dst, const void *src, size_t n) {
    (void)context;
    return cuda_result(kvc_copy_d2d(dst, src, n), "copy_on_device");
}

static kv_status cuda_memset(void *context, void *dst, int byte, size_t n) {
    (void)context;
    return cuda_result(kvc_memset(dst, byte, n), "memset");
}

static kv_status cuda_synchronize(void *context) {
    (void)context;
    return cuda_result(kvc_synchronize(), "synchronize");
}

static kv_status cuda_register(void *context, kv_device_type type) {
    (void)context;
    kv_cuda_type = type;
    const kv_key key = (kv_key)type;
    kv_status st = kv_cuda_register_pointwise(key);
    if (st == KV_OK) st = kv_cuda_register_copy(key);
    if (st == KV_OK) st = kv_cuda_register_reduce(key);
    if (st == KV_OK) st = kv_cuda_register_norm(key);
    if (st == KV_OK) st = kv_cuda_register_matmul(key);
    if (st == KV_OK) st = kv_cuda_register_views(key);
    if (st == KV_OK) st = kv_cuda_register_fill(key);
    if (st == KV_OK) st = kv_cuda_register_random(key);
    if (st == KV_OK) st = kv_cuda_register_out(key);
    /* Every other op runs staged through the host (a fallback, so the
     * runner still lists it as unsupported here): the accel device can box
     * any op onto CUDA. */
    if (st == KV_OK) kv_cuda_host->register_fallback(key, kv_cuda_host->stage_reference);
    return st;
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    kv_cuda_host = desc->host;
    snprintf(desc->name, sizeof desc->name, "%s", kvc_impl_name());
    desc->device_type = kvc_impl_is_emulation() ? KV_BACKEND_SLOT_ANY : KV_DEVICE_CUDA;
    desc->available = kvc_probe(desc->reason, sizeof desc->reason);
    desc->host_addressable = 0;
    desc->context = NULL;
    desc->mem = (kv_backend_mem_ops){
        .alloc = cuda_alloc,
        .free = cuda_free,
        .copy_to_device = cuda_to_device,
        .copy_to_host = cuda_to_host,
        .copy_on_device = cuda_on_device,
        .memset = cuda_memset,
        .synchronize = cuda_synchronize,
    };
    desc->register_kernels = cuda_register;
    return 0;
}
