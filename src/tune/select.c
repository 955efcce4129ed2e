/* Choosing a variant for one call: the force map, the per-geometry cache
 * and the tuner (kv/tune.h).
 *
 * The cache is a small open-addressed table per slot keyed by the
 * geometry hash. A hit is used only when the cached variant's predicate
 * accepts the call: a hash collision, or arguments that alias each other
 * differently, then cost a fresh decision, never a wrong kernel. */
#include "tune/tune_internal.h"

#include <stdio.h>
#include <string.h>

_Atomic uint32_t g_tune_gen = 1;
_Atomic uint32_t g_tune_force_gen = 1;

void kv_tune_cache_clear(void) {
    atomic_fetch_add(&g_tune_gen, 1);
    for (tune_slot *s = kv_tune_slot_first(); s; s = s->next) {
        atomic_store(&s->calls, 0);
        atomic_store(&s->tunings, 0);
        atomic_store(&s->hits, 0);
    }
}

kv_tune_stats kv_tune_stats_of(const kv_op *op, kv_key backend) {
    kv_tune_stats st = { 0, 0, 0 };
    tune_slot *s = kv_tune_slot_find(op, backend);
    if (s == NULL) return st;
    st.cache_hits = atomic_load(&s->hits);
    st.calls = atomic_load(&s->calls) + st.cache_hits; /* `calls` counts the misses */
    st.tunings = atomic_load(&s->tunings);
    return st;
}

static tune_entry *cache_find(tune_slot *s, uint64_t tag, uint32_t gen) {
    const unsigned at = (unsigned)(tag >> 1);
    for (unsigned p = 0; p < TUNE_CACHE_PROBE; p++) {
        tune_entry *e = &s->cache[(at + p) & (TUNE_CACHE_SIZE - 1)];
        if (atomic_load_explicit(&e->tag, memory_order_acquire) == tag &&
            atomic_load_explicit(&e->gen, memory_order_relaxed) == gen)
            return e;
    }
    return NULL;
}

static void cache_store(tune_slot *s, uint64_t tag, uint32_t gen, int choice, uint64_t rank) {
    const unsigned at = (unsigned)(tag >> 1);
    tune_entry *victim = &s->cache[at & (TUNE_CACHE_SIZE - 1)];
    for (unsigned p = 0; p < TUNE_CACHE_PROBE; p++) {
        tune_entry *e = &s->cache[(at + p) & (TUNE_CACHE_SIZE - 1)];
        const uint64_t t = atomic_load(&e->tag);
        if (t == tag || t == 0 || atomic_load(&e->gen) != gen) {
            victim = e;
            break;
        }
    }
    /* The tag goes last: a reader matching it sees this choice (or, when
     * racing another writer, some choice its predicate re-checks). */
    atomic_store_explicit(&victim->tag, 0, memory_order_relaxed);
    atomic_store_explicit(&victim->choice, choice, memory_order_relaxed);
    atomic_store_explicit(&victim->calls, 1, memory_order_relaxed); /* the deciding call */
    atomic_store_explicit(&victim->rank, rank, memory_order_relaxed);
    atomic_store_explicit(&victim->tuned_at, kv_tune_now(), memory_order_relaxed);
    atomic_store_explicit(&victim->gen, gen, memory_order_relaxed);
    atomic_store_explicit(&victim->tag, tag, memory_order_release);
}

static bool compatible(const tune_slot *s, int i, const kv_stack *stack) {
    return s->v[i].pred == NULL || s->v[i].pred(s->op, stack);
}

/* The force map resolved for this slot (re-resolved when the map, or the
 * slot's variants, changed). */
static int slot_forced(tune_slot *s) {
    const uint32_t fg = atomic_load_explicit(&g_tune_force_gen, memory_order_acquire);
    if (atomic_load_explicit(&s->force_gen, memory_order_acquire) == fg)
        return atomic_load_explicit(&s->forced, memory_order_relaxed);
    const int idx = kv_tune_force_resolve(s, atomic_load(&s->n));
    atomic_store_explicit(&s->forced, idx, memory_order_relaxed);
    atomic_store_explicit(&s->force_gen, fg, memory_order_release);
    return idx;
}

/* "a, b, c" of the variants with mask[i] (all when mask is NULL). */
static void names_of(const tune_slot *s, int n, const bool *mask, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (mask && !mask[i]) continue;
        int k = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", s->v[i].name);
        if (k < 0 || (size_t)k >= cap - len) break;
        len += (size_t)k;
    }
    if (len == 0) snprintf(buf, cap, "none");
}

/* Variant indexes by median, fastest first, 4 bits each (0xF ends). */
static uint64_t rank_of(const tune_timing *tm, int n) {
    int order[KV_TUNE_MAX_VARIANTS], k = 0;
    for (int i = 0; i < n; i++)
        if (tm[i].ran && !tm[i].failed) order[k++] = i;
    for (int a = 1; a < k; a++) /* insertion sort, stable: ties keep registration order */
        for (int b = a; b > 0 && tm[order[b]].median_ns < tm[order[b - 1]].median_ns; b--) {
            const int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    uint64_t r = ~(uint64_t)0;
    for (int i = k - 1; i >= 0; i--) r = r << 4 | (uint64_t)order[i];
    return k > 0 ? r : 0;
}

static int decide(tune_slot *s, const kv_stack *stack, int n, uint64_t tag, uint32_t gen, bool allow_tune,
                  bool store, bool first) {
    bool compat[KV_TUNE_MAX_VARIANTS];
    int ncompat = 0, last = -1;
    for (int i = 0; i < n; i++) {
        compat[i] = compatible(s, i, stack);
        if (compat[i]) {
            ncompat++;
            last = i;
        }
    }
    tune_timing tm[KV_TUNE_MAX_VARIANTS];
    memset(tm, 0, sizeof tm);
    const int forced = slot_forced(s);
    int choice;
    tune_how how;
    if (forced == TUNE_FORCE_ERROR) {
        kv_tune_force_error(s->op);
        return -1;
    } else if (forced >= 0) {
        if (!compat[forced]) {
            char geo[256], names[256];
            kv_tune_geometry_format(s->op, stack, geo, sizeof geo);
            names_of(s, n, compat, names, sizeof names);
            kv_error(KV_ERR_INVALID_ARG,
                     "%s: KV_PERFDISPATCH_FORCE forces variant '%s' of %s, which is not compatible with this call %s "
                     "(compatible: %s)",
                     kv_op_name(s->op), s->v[forced].name, kv_key_name(s->key), geo, names);
            return -1;
        }
        choice = forced;
        how = TUNE_HOW_FORCED;
    } else if (ncompat == 0) {
        char geo[256], names[256];
        kv_tune_geometry_format(s->op, stack, geo, sizeof geo);
        names_of(s, n, NULL, names, sizeof names);
        kv_error(KV_ERR_MISSING_KERNEL, "%s: no variant of %s is compatible with this call %s (variants: %s)",
                 kv_op_name(s->op), kv_key_name(s->key), geo, names);
        return -1;
    } else if (ncompat == 1) {
        choice = last;
        how = TUNE_HOW_ONLY;
    } else if (!allow_tune || !kv_tune_slot_config(s)->tuning) {
        choice = last;
        how = TUNE_HOW_UNTUNED;
        /* A choice made inside another op's timing is a stopgap: caching
         * it would stop the geometry from ever being tuned. */
        if (!allow_tune) store = false;
    } else {
        pthread_mutex_lock(&s->lock);
        const int best = kv_tune_measure(s, stack, compat, tm, first);
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_add_explicit(&s->tunings, 1, memory_order_relaxed);
        choice = best >= 0 ? best : last;
        how = TUNE_HOW_TUNED;
    }
    if (store) cache_store(s, tag, gen, choice, how == TUNE_HOW_TUNED ? rank_of(tm, n) : 0);
    if (kv_tune_log_enabled()) kv_tune_log_choice(s, stack, choice, how, ncompat, tm);
    return choice;
}

/* The cached choice refused this call (a hash collision, an aliasing or
 * an undeclared value its predicate minds): the fastest compatible one of
 * the entry's timings, else the last compatible one; no tuning, nothing
 * stored, so a geometry is never re-timed call after call. */
static int fallback(tune_slot *s, const kv_stack *stack, int n, uint64_t rank) {
    for (uint64_t r = rank; r != 0 && (r & 0xF) != 0xF; r >>= 4) {
        const int i = (int)(r & 0xF);
        if (i < n && compatible(s, i, stack)) return i;
    }
    for (int i = n - 1; i >= 0; i--)
        if (compatible(s, i, stack)) return i;
    return -1;
}

int kv_tune_select(tune_slot *s, const kv_stack *stack, bool allow_tune, bool *only_choice_checked) {
    *only_choice_checked = false;
    const int n = atomic_load_explicit(&s->n, memory_order_acquire);
    if (n == 0) {
        atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
        kv_error(KV_ERR_MISSING_KERNEL, "%s: %s has no variants registered", kv_op_name(s->op), kv_key_name(s->key));
        return -1;
    }
    const uint64_t tag = kv_tune_slot_geometry_hash(s, stack) | 1u;
    const uint32_t gen = atomic_load_explicit(&g_tune_gen, memory_order_acquire);
    tune_entry *e = cache_find(s, tag, gen);
    if (e != NULL) {
        const int c = atomic_load_explicit(&e->choice, memory_order_relaxed);
        if (c >= 0 && c < n && compatible(s, c, stack)) {
            /* The hot path of every dispatch through a variant set: one
             * atomic add for the call count, and a clock read every 64th
             * call when the time trigger is on. */
            const kv_tune_config *cfg = kv_tune_slot_config(s);
            bool due = false;
            if (allow_tune && (cfg->retune_after > 0 || cfg->retune_ms > 0)) {
                const int64_t calls = atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed) + 1;
                due = cfg->retune_after > 0 && calls > cfg->retune_after;
                if (!due && cfg->retune_ms > 0 && (calls & 63) == 0) {
                    const uint64_t at = atomic_load_explicit(&e->tuned_at, memory_order_relaxed);
                    const uint64_t now = kv_tune_now();
                    due = now >= at && now - at >= (uint64_t)cfg->retune_ms * 1000000u;
                }
            }
            if (!due) {
                atomic_fetch_add_explicit(&s->hits, 1, memory_order_relaxed);
                *only_choice_checked = true;
                return c;
            }
            atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed); /* misses; see kv_tune_stats_of */
            return decide(s, stack, n, tag, gen, allow_tune, true, false);
        }
        atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
        const int f = slot_forced(s);
        if (f < 0 && f != TUNE_FORCE_ERROR) {
            const int i = fallback(s, stack, n, atomic_load_explicit(&e->rank, memory_order_relaxed));
            if (i >= 0) return i;
        }
        /* Forced, or nothing compatible: decide says which error. */
        return decide(s, stack, n, tag, gen, allow_tune, false, false);
    }
    atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed); /* misses; see kv_tune_stats_of */
    return decide(s, stack, n, tag, gen, allow_tune, true, true);
}
