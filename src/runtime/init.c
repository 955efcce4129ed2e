/* The composition root: the one place that knows every layer of libkv.
 *
 * Below it, data and calls flow down only (the layering test,
 * tests/check_layers.sh, keeps it so): the dispatcher builds an op
 * registry and knows nothing of the kernels, modes and devices that
 * register into it; each of those knows the dispatcher and what lies
 * below. Here they are put together, in the order their registrations
 * depend on: kernels before the variant sets that take "ref" from the CPU
 * key, modes after the backends, and the accel device last, because it
 * boxes ops onto whatever was registered before it. */
#include "kv/init.h"

#include <pthread.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/accel.h"
#include "kv/backend.h"
#include "kv/device.h"
#include "modes/modes.h"
#include "ref/ref.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static kv_status g_status;
static char g_message[512];

static kv_status compose(void) {
    /* Core's own switch first (KV_CACHING_ALLOCATOR): before anything is
     * allocated through the cache it controls. */
    kv_status st = kv_cpu_cache_env_init();
    if (st != KV_OK) return st;
    if ((st = kv_dispatch_init()) != KV_OK) return st;
    /* A growing device storage (an out= argument resized) keeps its bytes
     * through the backend layer's copies. */
    kv_storage_copy_hook = kv_backend_storage_copy;
    if ((st = kv_ref_register_all()) != KV_OK) return st;
    if ((st = kv_cpu_variants_register()) != KV_OK) return st;
    if ((st = kv_modes_register_all()) != KV_OK) return st;
    if ((st = kv_boxing_register()) != KV_OK) return st;
    kv_dispatch_mark_composed();
    return KV_OK;
}

static void compose_once(void) {
    g_status = compose();
    if (g_status != KV_OK) {
        const char *m = kv_last_error_message();
        size_t n = strlen(m);
        if (n >= sizeof g_message) n = sizeof g_message - 1;
        memcpy(g_message, m, n);
        g_message[n] = '\0';
    }
}

kv_status kv_init(void) {
    pthread_once(&g_once, compose_once);
    /* Re-raise on every call: the first failure's message was set on the
     * thread that ran the composition, not necessarily this one. */
    if (g_status != KV_OK) return kv_error(g_status, "%s", g_message);
    return KV_OK;
}

const kv_op *kv_api_op(_Atomic(const kv_op *) *cache, const char *full_name) {
    /* A filled cache means kv_init has completed: the typed API's hot
     * path stays one load. */
    if (atomic_load_explicit(cache, memory_order_acquire) == NULL && kv_init() != KV_OK) return NULL;
    return kv_op_handle(cache, full_name);
}
