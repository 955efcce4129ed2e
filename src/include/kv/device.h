/* Devices and their allocators.
 *
 * A device is a backend kind plus an index. Each device type owns one
 * allocator (iface + context, ggml style) whose live-bytes and live-count
 * statistics let the runner prove a case leaked no storage. */
#ifndef KV_DEVICE_H
#define KV_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/keys.h"
#include "kv/status.h"

/* Device types mirror the backend keys one to one. */
typedef enum kv_device_type {
    KV_DEVICE_CPU = KV_KEY_CPU,
    KV_DEVICE_CUDA = KV_KEY_CUDA,
    KV_DEVICE_SIM = KV_KEY_SIM,
    KV_DEVICE_ACCEL = KV_KEY_ACCEL,
    KV_DEVICE_PLUGIN0 = KV_KEY_PLUGIN0,
    KV_DEVICE_PLUGIN1 = KV_KEY_PLUGIN1,
    KV_DEVICE_PLUGIN2 = KV_KEY_PLUGIN2,
    KV_DEVICE_PLUGIN3 = KV_KEY_PLUGIN3,
    KV_DEVICE_TYPE_COUNT
} kv_device_type;

typedef struct kv_device {
    kv_device_type type;
    int index;
} kv_device;

#define KV_DEVICE_CPU0 ((kv_device){ KV_DEVICE_CPU, 0 })

static inline kv_key kv_device_key(kv_device d) { return (kv_key)d.type; }
static inline int kv_device_equal(kv_device a, kv_device b) { return a.type == b.type && a.index == b.index; }
/* "cpu", "cuda", "sim", "accel", "plugin0".., or a loaded plugin's own name
 * (kv_key_set_plugin_name). */
const char *kv_device_type_name(kv_device_type t);
/* Parses "cpu", "sim", "accel", "cuda:1"; returns 0 on success, -1 if not. */
int kv_device_parse(const char *text, kv_device *out);

/* Allocator vtable. `alloc` returns NULL on failure; memory it returns is
 * host-addressable only for host devices (CPU, and ACCEL/SIM while they
 * live in host memory); other code must go through a backend's copy ops. */
typedef struct kv_allocator_iface {
    void *(*alloc)(void *context, size_t nbytes);
    void (*free)(void *context, void *ptr, size_t nbytes);
} kv_allocator_iface;

typedef struct kv_allocator_stats {
    int64_t live_bytes;
    int64_t live_count;
    int64_t total_allocs; /* monotonic */
} kv_allocator_stats;

typedef struct kv_allocator kv_allocator;

/* The allocator used for new storage on devices of this type. CPU has one
 * built in (64-byte aligned); other types get one when a backend installs
 * it. Returns NULL when none is installed. */
kv_allocator *kv_allocator_for(kv_device_type t);
/* Installs (or with iface NULL, removes) the allocator of a device type.
 * Statistics are kept by libkv, not by the iface. */
void kv_allocator_install(kv_device_type t, const kv_allocator_iface *iface, void *context);
/* The built-in CPU iface (context NULL), so code that swapped in its own
 * CPU allocator (e.g. one that fails, or adds redzones) can put it back:
 * kv_allocator_install(KV_DEVICE_CPU, kv_allocator_cpu_iface(), NULL). */
const kv_allocator_iface *kv_allocator_cpu_iface(void);
/* Makes `a` (what kv_allocator_for(t) returned earlier; NULL removes) the
 * allocator of t again: how code that wrapped a backend's allocator for a
 * while (the runner's guard) puts the backend's own back. Ignored when a
 * is an allocator of another type. */
void kv_allocator_reinstall(kv_device_type t, kv_allocator *a);

void *kv_allocator_alloc(kv_allocator *a, size_t nbytes);
void kv_allocator_free(kv_allocator *a, void *ptr, size_t nbytes);
kv_allocator_stats kv_allocator_stats_of(kv_device_type t);
/* Counts an allocation (alloc true) or a free of nbytes on type t without
 * calling an allocator: for memory libkv carves out of a block it already
 * holds (a small tensor's storage lives next to its header). */
void kv_allocator_count(kv_device_type t, int64_t nbytes, bool alloc);
/* Whether `a` is the built-in CPU allocator (not one a caller installed,
 * such as the runner's redzone allocator). */
bool kv_allocator_is_builtin_cpu(const kv_allocator *a);

/* ---- the built-in CPU allocator's cache (src/core/cpu_alloc.c) ----
 * Requests are rounded to size classes; freed blocks are kept for reuse:
 * up to 32 KiB per thread, larger ones in one process-wide cache holding
 * at most KV_CPU_CACHE_MAX_BYTES. On by default; KV_CACHING_ALLOCATOR=0
 * turns it off (read by core on its first allocation, or by kv_init
 * first; any value but unset, "0" and "1", the empty string included, is
 * an error kv_init reports). Only the built-in allocator caches: while
 * another CPU allocator is installed, everything goes through it. The
 * counters are the large cache's. */
#define KV_CPU_CACHE_MAX_BYTES ((int64_t)1 << 30)
typedef struct kv_cpu_cache_stats {
    bool enabled;
    uint64_t hits;         /* large requests served from the cache */
    uint64_t misses;       /* large requests that went to libc */
    uint64_t returned;     /* large frees that went to libc (cache full or off) */
    int64_t cached_blocks; /* large blocks held now */
    int64_t cached_bytes;
} kv_cpu_cache_stats;
kv_cpu_cache_stats kv_cpu_cache_stats_get(void);
bool kv_cpu_cache_enabled(void);
/* Off also empties the large cache and this thread's small blocks. */
void kv_cpu_cache_set_enabled(bool on);
/* Gives every cached block of the large cache and of this thread back to libc. */
void kv_cpu_cache_empty(void);
/* KV_CACHING_ALLOCATOR's parser (pure, for tests and the fuzzer), and
 * the variable's status: read once, an error raised on every call (the
 * composition root, kv_init, calls it first). */
kv_status kv_cpu_cache_parse_env(const char *value, bool *enabled);
kv_status kv_cpu_cache_env_init(void);
/* The built-in iface's functions (what kv_allocator_cpu_iface() holds). */
void *kv_cpu_cache_alloc(void *context, size_t nbytes);
void kv_cpu_cache_free(void *context, void *ptr, size_t nbytes);

/* Whether the host may dereference memory of this device type; when not,
 * kv_tensor_data() returns NULL for tensors on it (or over its storage)
 * and only a backend's copies move data (kv/backend.h). Default: every
 * type but CUDA. The backend loader sets it from each plugin's descriptor
 * (SIM says no on purpose, so code that touches device memory directly
 * is caught) and for ACCEL from its target. CPU always is. */
bool kv_device_host_addressable(kv_device_type t);
void kv_device_set_host_addressable(kv_device_type t, bool yes);

#endif
