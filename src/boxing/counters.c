/* Which path each boxed call took, per op: what lets a case assert that
 * the fast path ran, not just that the numbers agree.
 *
 * Counted per thread and summed on read: a shared counter is a locked
 * read-modify-write on a cache line every boxing thread fights over, on
 * the path whose cost is the point of boxing. Each thread takes a block
 * from a process-wide list the first time it counts and gives it back
 * when it exits; the next new thread reuses it and keeps adding to it, so
 * counts of threads that are gone still show in every sum and the list
 * is as long as the most threads that ever counted at once.
 *
 * A block's owner updates it with relaxed atomic load + store (no lock
 * prefix: nobody else writes it); readers load with relaxed atomics.
 * kv_accel_counters_reset stores zeros into every block, which is exact
 * when no boxed call runs at the same time (the runner resets between
 * cases); a call racing with a reset may be counted or not. */
#include "boxing/boxing_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kv/op_ids.h"

/* Ops registered at run time (no builtin id) count in row KV_OP_COUNT,
 * which only the totals read. */
typedef struct count_block {
    atomic_uint_fast64_t counts[KV_OP_COUNT + 1][KV_ACCEL_PATH_COUNT];
    atomic_uint_fast64_t cat_dropped;
    atomic_bool in_use;
    struct count_block *next; /* written once, before the block is published */
} count_block;

static _Atomic(count_block *) g_blocks;
static pthread_once_t g_key_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static _Thread_local count_block *t_block;
_Thread_local atomic_uint_fast64_t (*kv_accel_counts_mine)[KV_ACCEL_PATH_COUNT];

static void give_back(void *p) {
    count_block *b = p;
    atomic_store_explicit(&b->in_use, false, memory_order_release);
}

static void make_key(void) {
    /* On failure blocks are simply never handed back: counts stay right,
     * only reuse is lost. */
    if (pthread_key_create(&g_key, give_back) != 0) g_key = (pthread_key_t)-1;
}

static count_block *my_block(void) {
    if (t_block != NULL) return t_block;
    pthread_once(&g_key_once, make_key);
    count_block *b = NULL;
    for (count_block *p = atomic_load_explicit(&g_blocks, memory_order_acquire); p != NULL && b == NULL; p = p->next) {
        bool free_ = false;
        if (atomic_compare_exchange_strong(&p->in_use, &free_, true)) b = p;
    }
    if (b == NULL) {
        b = calloc(1, sizeof *b);
        if (b == NULL) return NULL; /* not counted: counting never fails a call */
        atomic_init(&b->in_use, true);
        b->next = atomic_load_explicit(&g_blocks, memory_order_relaxed);
        while (!atomic_compare_exchange_weak_explicit(&g_blocks, &b->next, b, memory_order_release,
                                                      memory_order_relaxed)) {
        }
    }
    if (g_key != (pthread_key_t)-1) pthread_setspecific(g_key, b);
    t_block = b;
    kv_accel_counts_mine = b->counts;
    return b;
}

static void bump(atomic_uint_fast64_t *c, uint64_t n) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

void kv_accel_count(int op_id, kv_accel_path path) {
    if ((unsigned)path >= (unsigned)KV_ACCEL_PATH_COUNT) return;
    count_block *b = my_block();
    if (b == NULL) return;
    bump(&b->counts[(op_id >= 0 && op_id < KV_OP_COUNT) ? op_id : KV_OP_COUNT][path], 1);
}

void kv_accel_count_cat_dropped(uint64_t n) {
    count_block *b = my_block();
    if (b != NULL) bump(&b->cat_dropped, n);
}

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

static uint64_t sum_of(int row, int path) {
    uint64_t t = 0;
    for (count_block *p = atomic_load_explicit(&g_blocks, memory_order_acquire); p != NULL; p = p->next)
        t += (uint64_t)atomic_load_explicit(&p->counts[row][path], memory_order_relaxed);
    return t;
}

kv_accel_counters kv_accel_counters_of(const char *full_name) {
    int id = id_of(full_name);
    if (id < 0) return (kv_accel_counters){ 0, 0, 0 };
    return (kv_accel_counters){ sum_of(id, KV_ACCEL_PATH_FAST), sum_of(id, KV_ACCEL_PATH_SLOW),
                                sum_of(id, KV_ACCEL_PATH_MANUAL) };
}

kv_accel_counters kv_accel_counters_total(void) {
    kv_accel_counters t = { 0, 0, 0 };
    for (count_block *p = atomic_load_explicit(&g_blocks, memory_order_acquire); p != NULL; p = p->next) {
        for (int id = 0; id <= KV_OP_COUNT; id++) {
            t.fast += (uint64_t)atomic_load_explicit(&p->counts[id][KV_ACCEL_PATH_FAST], memory_order_relaxed);
            t.slow += (uint64_t)atomic_load_explicit(&p->counts[id][KV_ACCEL_PATH_SLOW], memory_order_relaxed);
            t.manual += (uint64_t)atomic_load_explicit(&p->counts[id][KV_ACCEL_PATH_MANUAL], memory_order_relaxed);
        }
    }
    return t;
}

uint64_t kv_accel_cat_dropped(void) {
    uint64_t t = 0;
    for (count_block *p = atomic_load_explicit(&g_blocks, memory_order_acquire); p != NULL; p = p->next)
        t += (uint64_t)atomic_load_explicit(&p->cat_dropped, memory_order_relaxed);
    return t;
}

void kv_accel_counters_reset(void) {
    for (count_block *p = atomic_load_explicit(&g_blocks, memory_order_acquire); p != NULL; p = p->next) {
        for (int id = 0; id <= KV_OP_COUNT; id++)
            for (int k = 0; k < KV_ACCEL_PATH_COUNT; k++) atomic_store_explicit(&p->counts[id][k], 0, memory_order_relaxed);
        atomic_store_explicit(&p->cat_dropped, 0, memory_order_relaxed);
    }
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
