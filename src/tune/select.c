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

static void cache_store(tune_slot *s, uint64_t tag, uint32_t gen, int choice) {
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
    const char *name = kv_tune_force_lookup(s->op);
    int idx = -1;
    const int n = atomic_load(&s->n);
    for (int i = 0; name && i < n; i++)
        if (strcmp(s->v[i].name, name) == 0) idx = i;
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

static int decide(tune_slot *s, const kv_stack *stack, int n, uint64_t tag, uint32_t gen, bool allow_tune,
                  bool store) {
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
    if (forced >= 0) {
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
    } else if (!allow_tune || !kv_tune_config_snapshot().tuning) {
        choice = last;
        how = TUNE_HOW_UNTUNED;
        /* A choice made inside another op's timing is a stopgap: caching
         * it would stop the geometry from ever being tuned. */
        if (!allow_tune) store = false;
    } else {
        pthread_mutex_lock(&s->lock);
        const int best = kv_tune_measure(s, stack, compat, tm);
        pthread_mutex_unlock(&s->lock);
        atomic_fetch_add_explicit(&s->tunings, 1, memory_order_relaxed);
        choice = best >= 0 ? best : last;
        how = TUNE_HOW_TUNED;
    }
    if (store) cache_store(s, tag, gen, choice);
    if (kv_tune_log_enabled()) kv_tune_log_choice(s, stack, choice, how, ncompat, tm);
    return choice;
}

int kv_tune_select(tune_slot *s, const kv_stack *stack, bool allow_tune, bool *only_choice_checked) {
    *only_choice_checked = false;
    const int n = atomic_load_explicit(&s->n, memory_order_acquire);
    if (n == 0) {
        atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
        kv_error(KV_ERR_MISSING_KERNEL, "%s: %s has no variants registered", kv_op_name(s->op), kv_key_name(s->key));
        return -1;
    }
    const uint64_t tag =
        kv_tune_geometry_hash_mask(s->op, stack, atomic_load_explicit(&s->geo_mask, memory_order_relaxed)) | 1u;
    const uint32_t gen = atomic_load_explicit(&g_tune_gen, memory_order_acquire);
    tune_entry *e = cache_find(s, tag, gen);
    bool store = true;
    if (e != NULL) {
        const int c = atomic_load_explicit(&e->choice, memory_order_relaxed);
        if (c >= 0 && c < n && compatible(s, c, stack)) {
            /* One atomic add per cached call (two with re-tuning on): the
             * hot path of every dispatch through a variant set. */
            const int64_t after = kv_tune_retune_after();
            const bool due = after > 0 && allow_tune &&
                             atomic_fetch_add_explicit(&e->calls, 1, memory_order_relaxed) + 1 > after;
            if (!due) {
                atomic_fetch_add_explicit(&s->hits, 1, memory_order_relaxed);
                *only_choice_checked = true;
                return c;
            }
        } else {
            /* Same hash, yet the cached variant refuses: decide afresh for
             * this call and leave the entry to the geometry it was made for. */
            store = false;
        }
    }
    atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed); /* misses; see kv_tune_stats_of */
    return decide(s, stack, n, tag, gen, allow_tune, store);
}
