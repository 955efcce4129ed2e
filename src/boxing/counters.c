/* Which path each boxed call took, per op: what lets a case assert that
 * the fast path ran, not just that the numbers agree. Process wide,
 * relaxed atomics: counts are read after the calls they count have
 * returned (the runner reads them between cases). */
#include "boxing/boxing_internal.h"

#include <stdatomic.h>
#include <string.h>

#include "kv/op_ids.h"

static atomic_uint_fast64_t g_counts[KV_OP_COUNT][KV_ACCEL_PATH_COUNT];
/* Ops registered at run time (no builtin id) still count in the totals. */
static atomic_uint_fast64_t g_other[KV_ACCEL_PATH_COUNT];
static atomic_uint_fast64_t g_cat_dropped;

void kv_accel_count(int op_id, kv_accel_path path) {
    if ((unsigned)path >= (unsigned)KV_ACCEL_PATH_COUNT) return;
    atomic_uint_fast64_t *c = (op_id >= 0 && op_id < KV_OP_COUNT) ? &g_counts[op_id][path] : &g_other[path];
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void kv_accel_count_cat_dropped(uint64_t n) { atomic_fetch_add_explicit(&g_cat_dropped, n, memory_order_relaxed); }

/* kv_op_names is sorted by full name (the ids are), so a binary search
 * finds an id without the registry's lookup counter noticing. */
static int id_of(const char *full_name) {
    if (full_name == NULL) return -1;
    int lo = 0, hi = KV_OP_COUNT;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(kv_op_names[mid], full_name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static uint64_t load(atomic_uint_fast64_t *c) { return (uint64_t)atomic_load_explicit(c, memory_order_relaxed); }

kv_accel_counters kv_accel_counters_of(const char *full_name) {
    int id = id_of(full_name);
    if (id < 0) return (kv_accel_counters){ 0, 0, 0 };
    return (kv_accel_counters){ load(&g_counts[id][KV_ACCEL_PATH_FAST]), load(&g_counts[id][KV_ACCEL_PATH_SLOW]),
                                load(&g_counts[id][KV_ACCEL_PATH_MANUAL]) };
}

kv_accel_counters kv_accel_counters_total(void) {
    kv_accel_counters t = { load(&g_other[KV_ACCEL_PATH_FAST]), load(&g_other[KV_ACCEL_PATH_SLOW]),
                            load(&g_other[KV_ACCEL_PATH_MANUAL]) };
    for (int id = 0; id < KV_OP_COUNT; id++) {
        t.fast += load(&g_counts[id][KV_ACCEL_PATH_FAST]);
        t.slow += load(&g_counts[id][KV_ACCEL_PATH_SLOW]);
        t.manual += load(&g_counts[id][KV_ACCEL_PATH_MANUAL]);
    }
    return t;
}

uint64_t kv_accel_cat_dropped(void) { return load(&g_cat_dropped); }

void kv_accel_counters_reset(void) {
    for (int id = 0; id < KV_OP_COUNT; id++)
        for (int p = 0; p < KV_ACCEL_PATH_COUNT; p++) atomic_store(&g_counts[id][p], 0);
    for (int p = 0; p < KV_ACCEL_PATH_COUNT; p++) atomic_store(&g_other[p], 0);
    atomic_store(&g_cat_dropped, 0);
}

const char *kv_accel_path_name(kv_accel_path path) {
    switch (path) {
    case KV_ACCEL_PATH_FAST: return "fast";
    case KV_ACCEL_PATH_SLOW: return "slow";
    case KV_ACCEL_PATH_MANUAL: return "manual";
    case KV_ACCEL_PATH_COUNT: break;
    }
    return "?";
}
