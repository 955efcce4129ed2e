/* The built-in CPU allocator: 64-byte aligned blocks (a cache line, and
 * enough for AVX-512 loads), with a size-class cache in front of libc.
 *
 * Why a cache: a functional op on a large tensor gets fresh pages from the
 * kernel on every call (glibc serves big blocks with mmap and unmaps them
 * on free), so a 64 MiB output costs 16,384 page faults before the kernel
 * writes a byte; a cached block keeps its pages. Small blocks (at most
 * 32 KiB) are cached per thread, without a lock or an atomic; larger ones
 * in one cache behind a mutex (they are rare next to the work they hold),
 * up to KV_CPU_CACHE_MAX_BYTES, beyond which freed blocks go back to libc.
 *
 * Every request is rounded up to its class, cache on or off, so a block
 * can always be cached when it is freed, whatever the switch said when it
 * was made: powers of two from 64 bytes to 32 KiB, then 8 classes per
 * power of two (at most 12.5% slack). On by default; KV_CACHING_ALLOCATOR=0
 * turns it off, and turning it off empties the large cache and stops
 * caching on every thread.
 *
 * The variable is core's own, so core reads it (the dispatcher never
 * does): once, on the first cache miss or tensor-block miss (every block
 * this file or tensor_cache.c ever holds was first made on a miss, so
 * nothing is cached before the variable is read), or when kv_init calls
 * kv_cpu_cache_env_init first, whichever comes first. A bad value leaves
 * the cache on and is kept to be reported: kv_cpu_cache_env_init raises
 * it on every call, so kv_init fails naming the variable (kvrun exits 2).
 *
 * Only the built-in allocator caches: while another CPU allocator is
 * installed (the runner's guard, a test's failing allocator), every
 * storage goes through that one, and tensor.c makes no one-block small
 * tensors (it asks kv_allocator_is_builtin_cpu). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_cache.h"
#include "kv/device.h"
#include "kv/status.h"

#define CPU_ALIGN 64u
#define SMALL_MAX ((size_t)32 << 10)
#define SMALL_CLASSES 10 /* 64 B .. 32 KiB */
#define SMALL_BIN_CAP 32 /* blocks per class per thread */
#define LARGE_SHIFT_MIN 15 /* the first large class is above 2^15 */
#define LARGE_SUB 8
#define LARGE_CLASSES ((62 - LARGE_SHIFT_MIN) * LARGE_SUB)

static atomic_bool g_enabled = true;

static void set_enabled_now(bool on);

/* ---- KV_CACHING_ALLOCATOR ---- */

static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static kv_status g_env_status = KV_OK;
static char g_env_bad[128]; /* the rejected value, for the message */

/* The rule, without touching the thread's error (the first read may run
 * inside an allocation, whose caller's error must survive). Unset: on;
 * "1" on, "0" off; anything else, the empty string included (an
 * unexpanded shell variable, README "Exit codes"), is an error. */
static bool parse_value(const char *value, bool *enabled) {
    if (value == NULL || strcmp(value, "1") == 0) *enabled = true;
    else if (strcmp(value, "0") == 0) *enabled = false;
    else return false;
    return true;
}

static void env_once(void) {
    const char *v = getenv("KV_CACHING_ALLOCATOR");
    bool on = true;
    if (!parse_value(v, &on)) {
        g_env_status = KV_ERR_INVALID_ARG;
        snprintf(g_env_bad, sizeof g_env_bad, "%s", v);
        return;
    }
    set_enabled_now(on);
}

void kv_cpu_cache_env_read(void) { pthread_once(&g_env_once, env_once); }

/* ---- classes ---- */

static int floor_log2(size_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

/* The class of a request and its rounded size; 0 when too large. */
static size_t class_of(size_t n, int *cls) {
    if (n <= CPU_ALIGN) {
        *cls = 0;
        return CPU_ALIGN;
    }
    if (n <= SMALL_MAX) {
        const int e = floor_log2(n - 1) + 1; /* 2^e >= n */
        *cls = e - 6;
        return (size_t)1 << e;
    }
    const int e = floor_log2(n - 1); /* 2^e < n <= 2^(e+1) */
    if (e >= 62) return 0;
    const size_t step = (size_t)1 << (e - 3);
    const size_t size = (n + step - 1) & ~(step - 1);
    *cls = SMALL_CLASSES + (e - LARGE_SHIFT_MIN) * LARGE_SUB + (int)(size / step) - LARGE_SUB - 1;
    return size;
}

/* ---- small blocks: per thread ---- */

typedef struct free_block {
    struct free_block *next;
} free_block;

typedef struct small_bins {
    free_block *head[SMALL_CLASSES];
    int count[SMALL_CLASSES];
} small_bins;

static _Thread_local small_bins t_bins;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static bool g_key_ok;

static void bins_drain(small_bins *b) {
    for (int c = 0; c < SMALL_CLASSES; c++) {
        while (b->head[c] != NULL) {
            free_block *f = b->head[c];
            b->head[c] = f->next;
            free(f);
        }
        b->count[c] = 0;
    }
}

/* Thread exit: the bins go back to libc (the key's value is the bins). */
static void bins_exit(void *p) { bins_drain(p); }

static void make_key(void) { g_key_ok = pthread_key_create(&g_key, bins_exit) == 0; }

/* The first block a thread caches registers the exit hook. */
static bool bins_ready(void) {
    static _Thread_local bool ready;
    if (ready) return true;
    pthread_once(&g_key_once, make_key);
    if (!g_key_ok || pthread_setspecific(g_key, &t_bins) != 0) return false;
    ready = true;
    return true;
}

/* ---- large blocks: one cache ---- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static free_block *g_large[LARGE_CLASSES];
static kv_cpu_cache_stats g_stats; /* under g_lock */

static void *large_take(int cls, size_t size) {
    pthread_mutex_lock(&g_lock);
    free_block *f = g_large[cls - SMALL_CLASSES];
    if (f != NULL) {
        g_large[cls - SMALL_CLASSES] = f->next;
        g_stats.hits++;
        g_stats.cached_blocks--;
        g_stats.cached_bytes -= (int64_t)size;
    } else {
        g_stats.misses++;
    }
    pthread_mutex_unlock(&g_lock);
    return f;
}

static bool large_put(void *p, int cls, size_t size) {
    pthread_mutex_lock(&g_lock);
    const bool fits = atomic_load_explicit(&g_enabled, memory_order_relaxed) &&
                      g_stats.cached_bytes + (int64_t)size <= (int64_t)KV_CPU_CACHE_MAX_BYTES;
    if (fits) {
        free_block *f = p;
        f->next = g_large[cls - SMALL_CLASSES];
        g_large[cls - SMALL_CLASSES] = f;
        g_stats.cached_blocks++;
        g_stats.cached_bytes += (int64_t)size;
    } else {
        g_stats.returned++;
    }
    pthread_mutex_unlock(&g_lock);
    return fits;
}

/* ---- the iface ---- */

void *kv_cpu_cache_alloc(void *context, size_t nbytes) {
    (void)context;
    int cls;
    const size_t size = class_of(nbytes, &cls);
    if (size == 0) return NULL;
    if (atomic_load_explicit(&g_enabled, memory_order_relaxed)) {
        if (cls < SMALL_CLASSES) {
            free_block *f = t_bins.head[cls];
            if (f != NULL) {
                t_bins.head[cls] = f->next;
                t_bins.count[cls]--;
                return f;
            }
        } else {
            void *p = large_take(cls, size);
            if (p != NULL) return p;
        }
    }
    kv_cpu_cache_env_read(); /* the first miss reads the switch, before anything is cached */
    return aligned_alloc(CPU_ALIGN, size);
}

void kv_cpu_cache_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    if (ptr == NULL) return;
    int cls;
    const size_t size = class_of(nbytes, &cls);
    if (size != 0 && cls < SMALL_CLASSES) {
        if (atomic_load_explicit(&g_enabled, memory_order_relaxed) && t_bins.count[cls] < SMALL_BIN_CAP &&
            bins_ready()) {
            free_block *f = ptr;
            f->next = t_bins.head[cls];
            t_bins.head[cls] = f;
            t_bins.count[cls]++;
            return;
        }
    } else if (size != 0 && large_put(ptr, cls, size)) { /* counts what it does not keep */
        return;
    }
    free(ptr);
}

/* ---- control ---- */

void kv_cpu_cache_empty(void) {
    bins_drain(&t_bins);
    kv_tblock_drain_mine();
    pthread_mutex_lock(&g_lock);
    for (int c = 0; c < LARGE_CLASSES; c++) {
        while (g_large[c] != NULL) {
            free_block *f = g_large[c];
            g_large[c] = f->next;
            free(f);
        }
    }
    g_stats.cached_blocks = 0;
    g_stats.cached_bytes = 0;
    pthread_mutex_unlock(&g_lock);
}

static void set_enabled_now(bool on) {
    atomic_store(&g_enabled, on);
    if (!on) kv_cpu_cache_empty();
}

void kv_cpu_cache_set_enabled(bool on) {
    /* The variable first, so a later first miss cannot undo this call. */
    kv_cpu_cache_env_read();
    set_enabled_now(on);
}

bool kv_cpu_cache_enabled(void) { return atomic_load_explicit(&g_enabled, memory_order_relaxed); }

kv_cpu_cache_stats kv_cpu_cache_stats_get(void) {
    kv_cpu_cache_env_read();
    pthread_mutex_lock(&g_lock);
    kv_cpu_cache_stats s = g_stats;
    pthread_mutex_unlock(&g_lock);
    s.enabled = kv_cpu_cache_enabled();
    return s;
}

kv_status kv_cpu_cache_parse_env(const char *value, bool *enabled) {
    /* Only "0" and "1" mean anything: a typo must not silently change
     * what a benchmark measures. */
    if (!parse_value(value, enabled))
        return kv_error(KV_ERR_INVALID_ARG, "KV_CACHING_ALLOCATOR: expected 0 or 1 (or unset), got '%s'", value);
    return KV_OK;
}

kv_status kv_cpu_cache_env_init(void) {
    kv_cpu_cache_env_read();
    /* Raised on every call: the first read may have run on another thread. */
    if (g_env_status != KV_OK)
        return kv_error(g_env_status, "KV_CACHING_ALLOCATOR: expected 0 or 1 (or unset), got '%s'", g_env_bad);
    return KV_OK;
}
