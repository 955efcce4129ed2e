/* Per-op counters of the two vmap paths, so a test or the runner can
 * prove which one ran. Built-in ops are counted by id; ops registered at
 * run time (kv_op_register) in a small table keyed by the op handle. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "kv/op_ids.h"
#include "modes/vmap_internal.h"

typedef struct vmap_counts {
    atomic_uint_fast64_t rule;
    atomic_uint_fast64_t fallback;
} vmap_counts;

static vmap_counts g_builtin[KV_OP_COUNT];

#define RUNTIME_SLOTS 64
static const kv_op *g_runtime_op[RUNTIME_SLOTS];
static vmap_counts g_runtime[RUNTIME_SLOTS];
static pthread_mutex_t g_runtime_lock = PTHREAD_MUTEX_INITIALIZER;

/* The counters of op; NULL for a run-time op once the table is full (its
 * calls then go uncounted rather than into another op's counters). */
static vmap_counts *counts_of(const kv_op *op, bool create) {
    const int id = kv_op_builtin_id(op);
    if (id >= 0 && id < KV_OP_COUNT) return &g_builtin[id];
    vmap_counts *found = NULL;
    pthread_mutex_lock(&g_runtime_lock);
    for (int i = 0; i < RUNTIME_SLOTS && found == NULL; i++) {
        if (g_runtime_op[i] == op) found = &g_runtime[i];
        else if (g_runtime_op[i] == NULL && create) {
            g_runtime_op[i] = op;
            found = &g_runtime[i];
        }
    }
    pthread_mutex_unlock(&g_runtime_lock);
    return found;
}

void kv_vmap_count_rule(const kv_op *op) {
    vmap_counts *c = counts_of(op, true);
    if (c) atomic_fetch_add_explicit(&c->rule, 1, memory_order_relaxed);
}

void kv_vmap_count_fallback(const kv_op *op) {
    vmap_counts *c = counts_of(op, true);
    if (c) atomic_fetch_add_explicit(&c->fallback, 1, memory_order_relaxed);
}

/* By scanning the registry instead of kv_op_find, so asking about an
 * unknown name leaves the thread's last error alone. */
static const kv_op *op_named(const char *full_name) {
    if (full_name == NULL || kv_dispatch_init() != KV_OK) return NULL;
    const int n = kv_op_count();
    for (int i = 0; i < n; i++) {
        const kv_op *op = kv_op_at(i);
        if (op && strcmp(kv_op_name(op), full_name) == 0) return op;
    }
    return NULL;
}

uint64_t kv_vmap_rule_calls(const char *full_name) {
    const kv_op *op = op_named(full_name);
    vmap_counts *c = op ? counts_of(op, false) : NULL;
    return c ? (uint64_t)atomic_load(&c->rule) : 0;
}

uint64_t kv_vmap_fallback_calls(const char *full_name) {
    const kv_op *op = op_named(full_name);
    vmap_counts *c = op ? counts_of(op, false) : NULL;
    return c ? (uint64_t)atomic_load(&c->fallback) : 0;
}

void kv_vmap_counters_reset(void) {
    for (int i = 0; i < KV_OP_COUNT; i++) {
        atomic_store(&g_builtin[i].rule, 0);
        atomic_store(&g_builtin[i].fallback, 0);
    }
    pthread_mutex_lock(&g_runtime_lock);
    for (int i = 0; i < RUNTIME_SLOTS; i++) {
        atomic_store(&g_runtime[i].rule, 0);
        atomic_store(&g_runtime[i].fallback, 0);
    }
    pthread_mutex_unlock(&g_runtime_lock);
}
