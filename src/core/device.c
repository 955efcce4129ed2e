/* Device names and the per-device-type allocator table.
 *
 * An installed allocator is an immutable object: installing again makes a
 * new one (or reuses the old object for the same iface and context) and
 * swaps the table pointer, because storages keep a pointer to the
 * allocator that made them and must free through it even after the table
 * changed. Allocator objects are therefore never freed (a few bytes per
 * distinct install). Statistics are per device type and shared by
 * every allocator that ever served that type. */
#include "kv/device.h"

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

typedef struct kv_atomic_stats {
    atomic_llong live_bytes;
    atomic_llong live_count;
    atomic_llong total_allocs;
} kv_atomic_stats;

static kv_atomic_stats kv_stats[KV_DEVICE_TYPE_COUNT];

/* CPU memory is 64-byte aligned (a cache line, and enough for AVX-512
 * loads). A zero-byte request still gets a real, unique block so that
 * every storage has a distinct non-NULL data pointer. */
#define KV_CPU_ALIGN 64u

static void *kv_cpu_alloc(void *context, size_t nbytes) {
    (void)context;
    size_t rounded = (nbytes + (KV_CPU_ALIGN - 1u)) & ~(size_t)(KV_CPU_ALIGN - 1u);
    if (rounded < nbytes) return NULL; /* wrapped around */
    if (rounded == 0) rounded = KV_CPU_ALIGN;
    return aligned_alloc(KV_CPU_ALIGN, rounded);
}

static void kv_cpu_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    (void)nbytes;
    free(ptr);
}

static const kv_allocator_iface kv_cpu_iface = { kv_cpu_alloc, kv_cpu_free };

static kv_allocator kv_cpu_builtin = { { kv_cpu_alloc, kv_cpu_free }, NULL, KV_DEVICE_CPU, NULL };

static _Atomic(kv_allocator *) kv_table[KV_DEVICE_TYPE_COUNT] = { [KV_DEVICE_CPU] = &kv_cpu_builtin };

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
        if (t == KV_DEVICE_CPU && iface->alloc == kv_cpu_alloc && iface->free == kv_cpu_free &&
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
    kv_atomic_stats *st = &kv_stats[a->type];
    atomic_fetch_add(&st->live_bytes, (long long)nbytes);
    atomic_fetch_add(&st->live_count, 1);
    atomic_fetch_add(&st->total_allocs, 1);
    return p;
}

void kv_allocator_free(kv_allocator *a, void *ptr, size_t nbytes) {
    if (a == NULL || ptr == NULL) return;
    if (a->iface.free) a->iface.free(a->context, ptr, nbytes);
    kv_atomic_stats *st = &kv_stats[a->type];
    atomic_fetch_sub(&st->live_bytes, (long long)nbytes);
    atomic_fetch_sub(&st->live_count, 1);
}

kv_allocator_stats kv_allocator_stats_of(kv_device_type t) {
    kv_allocator_stats out = { 0, 0, 0 };
    if (!kv_device_type_valid(t)) return out;
    out.live_bytes = atomic_load(&kv_stats[t].live_bytes);
    out.live_count = atomic_load(&kv_stats[t].live_count);
    out.total_allocs = atomic_load(&kv_stats[t].total_allocs);
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
