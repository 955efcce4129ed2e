/* A backend whose registration fails half way: the kernel it did
 * register must be taken back, and its allocator removed
 * (tests/test_backend.c). */
#include <stdlib.h>

#include "kv/backend.h"
#include "host_mem.h"

static const kv_host_api *host;

static kv_status never_called(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    (void)stack;
    return KV_ERR_INTERNAL;
}
static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    kv_status st = host->register_kernel("neg", (kv_key)type, never_called);
    if (st != KV_OK) return st;
    return host->register_kernel("no_such_op.at_all", (kv_key)type, never_called);
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "halfway");
    desc->device_type = KV_DEVICE_PLUGIN2;
    desc->available = 1;
    desc->host_addressable = 1;
    host_mem_install(desc);
    desc->register_kernels = reg;
    return 0;
}
