/* Plain host memory behind the plugin ABI's mem ops, for the test plugins
 * that only need somewhere to put tensors (good_any, bad_register,
 * env_fault, wrong_neg): malloc'd blocks the host may read directly. */
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

#endif
