/* Plain host memory behind the plugin ABI's mem ops, for the test plugins
 * that only need somewhere to put tensors (good_any, bad_register,
 * env_fault, wrong_neg, flaky_mul): malloc'd blocks the host may read directly. */
#ifndef KV_TEST_PLUGIN_HOST_MEM_H
#define KV_TEST_PLUGIN_HOST_MEM_H

#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"

static void *host_mem_alloc(void *ctx, size_t n) {
    (void)ctx;
    return malloc(n ? n : 1);
}
static void host_mem_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    free(p);
}
static kv_status host_mem_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memcpy(dst, src, n);
    return KV_OK;
}

/* The four ops into a descriptor, what every such plugin's entry does. */
static void host_mem_install(kv_backend_desc *desc) {
    desc->mem.alloc = host_mem_alloc;
    desc->mem.free = host_mem_free;
    desc->mem.copy_to_device = host_mem_copy;
    desc->mem.copy_to_host = host_mem_copy;
}

#endif
