/* Device names and the per-device-type allocator table.
 *
 * An installed allocator is an immutable object: installing again makes a
 * new one (or reuses the old object for the same iface and context) and
 * swaps the table pointer, because storages keep a pointer to the
 * allocator that made them and must free through it even after the table
 * changed. Allocator objects are therefore never freed (a few bytes per
 * distinct install). Statistics are per device type and shared by
 * every allocator that ever served that type. The built-in CPU allocator
 * itself (64-byte aligned, size-class cached) is cpu_alloc.c. */
#include "kv/device.h"

#include "core/tensor_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kv_allocator {
    kv_allocator_iface iface;
    void *context;
    kv_device_type type;
    kv_allocator *next; /* every allocator ever made, so none is lost */
};

/* Installs are rare; a lock keeps the list simple. The list keeps retired
 * allocators reachable (no leak reports) and lets an install of the same
 * (type, iface, context) reuse its old object instead of growing. */
static pthread_mutex_t kv_install_lock = PTHREAD_MUTEX_INITIALIZER;
static kv_allocator *kv_all_allocators;

/* Statistics per thread, summed on read: every storage allocation and
 * free updates them, and a shared counter would be three locked
 * instructions on a contended cache line per allocation. A thread takes a
 * block the first time it counts and hands it back at exit; the next new
 * thread reuses it and keeps adding, so sums stay right and there are as
 * many blocks as threads ever counted at once. The owner updates its
 * block with relaxed load + store (it is the only writer); readers sum
 * relaxed loads. A free on another thread than the allocation makes one
 * block's live count negative and another's positive: only sums mean
 * anything. */
typedef struct kv_stat_block {
    _Atomic int64_t live_bytes[KV_DEVICE_TYPE_COUNT];
    _Atomic int64_t live_count[KV_DEVICE_TYPE_COUNT];
    _Atomic int64_t total_allocs[KV_DEVICE_TYPE_COUNT];
    atomic_bool in_use;
    struct kv_stat_block *next; /* set before the block is published */
} kv_stat_block;

static _Atomic(kv_stat_block *) kv_stat_blocks;
static pthread_once_t kv_stat_once = PTHREAD_ONCE_INIT;
static pthread_key_t kv_stat_key;
static bool kv_stat_key_ok;
static _Thread_local kv_stat_block *kv_my_stats;

static void kv_stat_give_back(void *p) {
    kv_stat_block *b = p;
    atomic_store_explicit(&b->in_use, false, memory_order_release);
}

static void kv_stat_make_key(void) { kv_stat_key_ok = pthread_key_create(&kv_stat_key, kv_stat_give_back) == 0; }

/* The thread's first count: claims a block. Kept out of line, so the
 * counting path (every allocation and free) has no frame to build. */
static __attribute__((noinline)) kv_stat_block *kv_stats_claim(void) {
    pthread_once(&kv_stat_once, kv_stat_make_key);
    kv_stat_block *b = NULL;
    for (kv_stat_block *p = atomic_load_explicit(&kv_stat_blocks, memory_order_acquire); p && !b; p = p->next) {
        bool used = false;
        if (atomic_compare_exchange_strong(&p->in_use, &used, true)) b = p;
    }
    if (b == NULL) {
        b = calloc(1, sizeof *b);
        if (b == NULL) return NULL;
        atomic_init(&b->in_use, true);
        b->next = atomic_load_explicit(&kv_stat_blocks, memory_order_relaxed);
        while (!atomic_compare_exchange_weak_explicit(&kv_stat_blocks, &b->next, b, memory_order_release,
                                                      memory_order_relaxed)) {
        }
    }
    if (kv_stat_key_ok) pthread_setspecific(kv_stat_key, b);
    kv_my_stats = b;
    return b;
}

static kv_stat_block *kv_stats_mine(void) { return kv_my_stats != NULL ? kv_my_stats : kv_stats_claim(); }

static void kv_stat_add(_Atomic int64_t *c, int64_t d) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + d, memory_order_relaxed);
}

void kv_allocator_count(kv_device_type t, int64_t nbytes, bool alloc) {
    kv_stat_block *b = kv_stats_mine();
    if (b == NULL) return; /* out of memory for the counters: the counts drift, calls do not fail */
    kv_stat_add(&b->live_bytes[t], alloc ? nbytes : -nbytes);
    kv_stat_add(&b->live_count[t], alloc ? 1 : -1);
    if (alloc) kv_stat_add(&b->total_allocs[t], 1);
}

/* The cached, size-classed allocator of cpu_alloc.c. A zero-byte request
 * still gets a real, unique block so that every storage has a distinct
 * non-NULL data pointer. */
static const kv_allocator_iface kv_cpu_iface = { kv_cpu_cache_alloc, kv_cpu_cache_free };

static kv_allocator kv_cpu_builtin = { { kv_cpu_cache_alloc, kv_cpu_cache_free }, NULL, KV_DEVICE_CPU, NULL };

static _Atomic(kv_allocator *) kv_table[KV_DEVICE_TYPE_COUNT] = { [KV_DEVICE_CPU] = &kv_cpu_builtin };

bool kv_allocator_is_builtin_cpu(const kv_allocator *a) { return a == &kv_cpu_builtin; }

/* Marks storages that live inside a tensor block; nothing allocates or
 * frees through it (storage.c checks for it first). */
static kv_allocator kv_tblock_marker = { { NULL, NULL }, NULL, KV_DEVICE_CPU, NULL };

kv_allocator *kv_tblock_allocator(void) { return &kv_tblock_marker; }

const kv_allocator_iface *kv_allocator_cpu_iface(void) { return &kv_cpu_iface; }

const char *kv_device_type_name(kv_device_type t) {
    const char *plugin = kv_key_plugin_name((kv_key)t);
    if (plugin != NULL) return plugin;
    switch (t) {
    case KV_DEVICE_CPU: return "cpu";
    case KV_DEVICE_CUDA: return "cuda";
    case KV_DEVICE_SIM: return "sim";
    case KV_DEVICE_ACCEL: return "accel";
    case KV_DEVICE_PLUGIN0: return "plugin0";
    case KV_DEVICE_PLUGIN1: return "plugin1";
    case KV_DEVICE_PLUGIN2: return "plugin2";
    case KV_DEVICE_PLUGIN3: return "plugin3";
    case KV_DEVICE_TYPE_COUNT: break;
    }
    return "?";
}

int kv_device_parse(const char *text, kv_device *out) {
    if (text == NULL) return -1;
    const char *colon = strchr(text, ':');
    const size_t name_len = colon ? (size_t)(colon - text) : strlen(text);
    for (int t = 0; t < (int)KV_DEVICE_TYPE_COUNT; t++) {
        const char *name = kv_device_type_name((kv_device_type)t);
        if (strlen(name) != name_len || strncmp(text, name, name_len) != 0) continue;
        int index = 0;
        if (colon) {
            /* Decimal digits only, no sign, no spaces: "cuda:1". */
            const char *p = colon + 1;
            if (*p == '\0') return -1;
            long v = 0;
            for (; *p; p++) {
                if (*p < '0' || *p > '9') return -1;
                v = v * 10 + (*p - '0');
                if (v > 1000000) return -1;
            }
            index = (int)v;
        }
        if (out) *out = (kv_device){ (kv_device_type)t, index };
        return 0;
    }
    return -1;
}

static bool kv_device_type_valid(kv_device_type t) {
    return (int)t >= 0 && (int)t < (int)KV_DEVICE_TYPE_COUNT;
}

kv_allocator *kv_allocator_for(kv_device_type t) {
    if (!kv_device_type_valid(t)) return NULL;
    return atomic_load(&kv_table[t]);
}

void kv_allocator_install(kv_device_type t, const kv_allocator_iface *iface, void *context) {
    if (!kv_device_type_valid(t)) return;
    kv_allocator *a = NULL;
    pthread_mutex_lock(&kv_install_lock);
    if (iface != NULL) {
        if (t == KV_DEVICE_CPU && iface->alloc == kv_cpu_cache_alloc && iface->free == kv_cpu_cache_free &&
            context == NULL) {
            a = &kv_cpu_builtin;
        } else {
            for (kv_allocator *p = kv_all_allocators; p; p = p->next) {
                if (p->type == t && p->iface.alloc == iface->alloc && p->iface.free == iface->free &&
                    p->context == context) {
                    a = p;
                    break;
                }
            }
            if (a == NULL) {
                a = malloc(sizeof *a);
                if (a == NULL) { /* keep the old allocator rather than install nothing */
                    pthread_mutex_unlock(&kv_install_lock);
                    return;
                }
                a->iface = *iface;
                a->context = context;
                a->type = t;
                a->next = kv_all_allocators;
                kv_all_allocators = a;
            }
        }
    }
    atomic_store(&kv_table[t], a);
    pthread_mutex_unlock(&kv_install_lock);
}

void kv_allocator_reinstall(kv_device_type t, kv_allocator *a) {
    if (!kv_device_type_valid(t) || (a != NULL && a->type != t)) return;
    pthread_mutex_lock(&kv_install_lock);
    atomic_store(&kv_table[t], a);
    pthread_mutex_unlock(&kv_install_lock);
}

void *kv_allocator_alloc(kv_allocator *a, size_t nbytes) {
    if (a == NULL || a->iface.alloc == NULL) return NULL;
    void *p = a->iface.alloc(a->context, nbytes);
    if (p == NULL) return NULL;
    kv_allocator_count(a->type, (int64_t)nbytes, true);
    return p;
}

void kv_allocator_free(kv_allocator *a, void *ptr, size_t nbytes) {
    if (a == NULL || ptr == NULL) return;
    if (a->iface.free) a->iface.free(a->context, ptr, nbytes);
    kv_allocator_count(a->type, (int64_t)nbytes, false);
}

kv_allocator_stats kv_allocator_stats_of(kv_device_type t) {
    kv_allocator_stats out = { 0, 0, 0 };
    if (!kv_device_type_valid(t)) return out;
    for (kv_stat_block *p = atomic_load_explicit(&kv_stat_blocks, memory_order_acquire); p; p = p->next) {
        out.live_bytes += atomic_load_explicit(&p->live_bytes[t], memory_order_relaxed);
        out.live_count += atomic_load_explicit(&p->live_count[t], memory_order_relaxed);
        out.total_allocs += atomic_load_explicit(&p->total_allocs[t], memory_order_relaxed);
    }
    return out;
}

/* ---- host addressability ----
 * Relaxed atomics: flags change at start-up (backend loading) and are read
 * on every kv_tensor_data call. */
static atomic_bool kv_host_flags[KV_DEVICE_TYPE_COUNT] = {
    [KV_DEVICE_CPU] = true,      [KV_DEVICE_CUDA] = false,    [KV_DEVICE_SIM] = true,
    [KV_DEVICE_ACCEL] = true,    [KV_DEVICE_PLUGIN0] = true,  [KV_DEVICE_PLUGIN1] = true,
    [KV_DEVICE_PLUGIN2] = true,  [KV_DEVICE_PLUGIN3] = true,
};

bool kv_device_host_addressable(kv_device_type t) {
    if (!kv_device_type_valid(t)) return false;
    return atomic_load_explicit(&kv_host_flags[t], memory_order_relaxed);
}

void kv_device_set_host_addressable(kv_device_type t, bool yes) {
    if (!kv_device_type_valid(t) || t == KV_DEVICE_CPU) return;
    atomic_store_explicit(&kv_host_flags[t], yes, memory_order_relaxed);
}
