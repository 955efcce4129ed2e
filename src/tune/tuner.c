/* The tuner: timing the compatible variants of one call (kv/tune.h).
 *
 * It times what a dispatched call costs. A run is the call a cache hit
 * makes (kv_tune_run_as_hit: the predicate with the stash armed, then the
 * kernel, its returns released). Each variant runs `warmup` times untimed
 * (`rewarmup` when re-tuning); then come interleaved rounds of samples,
 * a sample being an untimed lead-in run and the timed run(s) right after
 * it, with the backend's sync before and after. After two rounds a
 * variant more than 8 times slower than the best stops; if one did, the
 * others' samples so far are dropped and they get `reps` fresh rounds,
 * else the two rounds count. The lowest median wins, ties going to the
 * earlier registered variant; variants whose samples overlap the best's
 * (a close call) get `reps` more rounds first.
 *
 * Runs never touch the caller's data: they use a copy of the stack whose
 * mutable (a!) tensors are replaced by fresh tensors of the same geometry
 * holding a copy of the values, and whose generator is a private copy.
 * Returns of every run are released. */
#include "tune/tune_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/tensor.h"


#define TUNE_MAX_REPS 101

/* Settings are immutable once published: the hot path (every cached
 * call reads retune_after and retune_ms) loads a pointer, and a change
 * publishes a new copy. Replaced copies stay on a list, since a reader
 * may still hold one (a few dozen bytes per change). */
typedef struct published_cfg {
    kv_tune_config c;
    struct published_cfg *retired;
} published_cfg;

static published_cfg g_default = { KV_TUNE_CONFIG_DEFAULT, NULL };
static _Atomic(const published_cfg *) g_cfg = &g_default;
static pthread_mutex_t g_cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static published_cfg *g_retired;

/* Per-op settings, for slots made after the setting (registry.c asks). */
typedef struct op_cfg {
    const kv_op *op;
    const published_cfg *cfg; /* NULL: back to the global settings */
    struct op_cfg *next;
} op_cfg;
static op_cfg *g_op_cfgs; /* under g_cfg_lock */

static pthread_mutex_t g_clock_lock = PTHREAD_MUTEX_INITIALIZER;
static kv_tune_clock_fn g_clock;
static void *g_clock_ctx;

static void (*_Atomic g_sync[KV_BACKEND_KEY_COUNT])(void);

_Thread_local int kv_tune_t_measure_depth;

/* ---- settings ---- */

kv_tune_config kv_tune_config_snapshot(void) { return atomic_load_explicit(&g_cfg, memory_order_acquire)->c; }

kv_tune_config kv_tune_config_get(void) { return kv_tune_config_snapshot(); }

const kv_tune_config *kv_tune_slot_config(const tune_slot *s) {
    const kv_tune_config *c = atomic_load_explicit(&s->cfg, memory_order_acquire);
    return c ? c : &atomic_load_explicit(&g_cfg, memory_order_acquire)->c;
}

static kv_status check_config(const char *who, const kv_tune_config *c) {
    if (c == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'config': is NULL", who);
    if (c->warmup < 0 || c->rewarmup < 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': %d is negative", who,
                        c->warmup < 0 ? "warmup" : "rewarmup", c->warmup < 0 ? c->warmup : c->rewarmup);
    if (c->reps < 1 || c->reps > TUNE_MAX_REPS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'reps': %d is outside [1, %d]", who, c->reps,
                        TUNE_MAX_REPS);
    if (c->retune_after < 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'retune_after': %lld is negative", who,
                        (long long)c->retune_after);
    if (c->min_sample_ns < 0 || c->min_sample_ns > 1000000000)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'min_sample_ns': %lld is outside [0, 1e9]", who,
                        (long long)c->min_sample_ns);
    if (c->retune_ms < 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'retune_ms': %lld is negative", who,
                        (long long)c->retune_ms);
    return KV_OK;
}

/* A published copy of c (NULL when out of memory), kept reachable. Under g_cfg_lock. */
static published_cfg *publish_locked(const kv_tune_config *c) {
    published_cfg *p = malloc(sizeof *p);
    if (p == NULL) return NULL;
    p->c = *c;
    p->retired = g_retired;
    g_retired = p;
    return p;
}

kv_status kv_tune_config_set(const kv_tune_config *c) {
    kv_status st = check_config("kv_tune_config_set", c);
    if (st != KV_OK) return st;
    pthread_mutex_lock(&g_cfg_lock);
    published_cfg *p = publish_locked(c);
    if (p != NULL) atomic_store_explicit(&g_cfg, p, memory_order_release);
    pthread_mutex_unlock(&g_cfg_lock);
    if (p == NULL) return kv_error(KV_ERR_OOM, "kv_tune_config_set: out of memory");
    kv_tune_cache_clear();
    return KV_OK;
}

const kv_tune_config *kv_tune_op_config_lookup(const kv_op *op) {
    pthread_mutex_lock(&g_cfg_lock);
    const published_cfg *found = NULL;
    for (const op_cfg *o = g_op_cfgs; o; o = o->next)
        if (o->op == op) found = o->cfg;
    pthread_mutex_unlock(&g_cfg_lock);
    return found ? &found->c : NULL;
}

kv_status kv_tune_op_config_set(const kv_op *op, const kv_tune_config *c) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_tune_op_config_set: argument 'op': is NULL");
    if (c != NULL) {
        kv_status st = check_config("kv_tune_op_config_set", c);
        if (st != KV_OK) return st;
    }
    pthread_mutex_lock(&g_cfg_lock);
    published_cfg *p = c ? publish_locked(c) : NULL;
    op_cfg *o = NULL;
    for (o = g_op_cfgs; o && o->op != op; o = o->next) {
    }
    if (o == NULL && (o = malloc(sizeof *o)) != NULL) {
        o->op = op;
        o->next = g_op_cfgs;
        g_op_cfgs = o;
    }
    const bool ok = o != NULL && (c == NULL || p != NULL);
    if (ok) o->cfg = p;
    pthread_mutex_unlock(&g_cfg_lock);
    if (!ok) return kv_error(KV_ERR_OOM, "%s: kv_tune_op_config_set: out of memory", kv_op_name(op));
    for (tune_slot *s = kv_tune_slot_first(); s; s = s->next)
        if (s->op == op) atomic_store_explicit(&s->cfg, p ? &p->c : NULL, memory_order_release);
    kv_tune_cache_clear();
    return KV_OK;
}

kv_tune_config kv_tune_op_config_get(const kv_op *op) {
    const kv_tune_config *c = op ? kv_tune_op_config_lookup(op) : NULL;
    return c ? *c : kv_tune_config_snapshot();
}

/* ---- the environment ----
 * Each variable is a comma list of entries, "N" (every op) or "op:N"
 * (that op): KV_PERFDISPATCH_RETUNE=10000,mm:0. */

typedef enum cfg_field { F_RETUNE, F_RETUNE_MS, F_WARMUP, F_REWARMUP, F_REPS, F_TUNE, F_SAMPLE, F_COUNT } cfg_field;

static const struct {
    const char *var;
    int64_t lo, hi;
} g_fields[F_COUNT] = {
    [F_RETUNE] = { "KV_PERFDISPATCH_RETUNE", 0, INT64_MAX },
    [F_RETUNE_MS] = { "KV_PERFDISPATCH_RETUNE_MS", 0, INT64_MAX },
    [F_WARMUP] = { "KV_PERFDISPATCH_WARMUP", 0, 1000 },
    [F_REWARMUP] = { "KV_PERFDISPATCH_REWARMUP", 0, 1000 },
    [F_REPS] = { "KV_PERFDISPATCH_REPS", 1, TUNE_MAX_REPS },
    [F_TUNE] = { "KV_PERFDISPATCH_TUNE", 0, 1 },
    [F_SAMPLE] = { "KV_PERFDISPATCH_SAMPLE_NS", 0, 1000000000 },
};

static void set_field(kv_tune_config *c, cfg_field f, int64_t v) {
    switch (f) {
    case F_RETUNE: c->retune_after = v; break;
    case F_RETUNE_MS: c->retune_ms = v; break;
    case F_WARMUP: c->warmup = (int)v; break;
    case F_REWARMUP: c->rewarmup = (int)v; break;
    case F_REPS: c->reps = (int)v; break;
    case F_TUNE: c->tuning = v == 1; break;
    case F_SAMPLE: c->min_sample_ns = v; break;
    case F_COUNT: break;
    }
}

#define ENV_OPS_MAX 64
typedef struct env_op_setting {
    const kv_op *op;
    cfg_field f;
    int64_t v;
} env_op_setting;

static kv_status parse_int(const char *var, const char *entry, const char *b, const char *e, int64_t lo, int64_t hi,
                           int64_t *out) {
    char buf[32];
    while (b < e && (*b == ' ' || *b == '\t')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    const size_t n = (size_t)(e - b);
    char *end = NULL;
    long long x = 0;
    if (n > 0 && n < sizeof buf) {
        memcpy(buf, b, n);
        buf[n] = '\0';
        x = strtoll(buf, &end, 10);
    }
    if (n == 0 || n >= sizeof buf || end == buf || *end != '\0' || x < lo || x > hi)
        return kv_error(KV_ERR_INVALID_ARG, "%s: entry '%s': expected an integer in [%lld, %lld]", var, entry,
                        (long long)lo, (long long)hi);
    *out = x;
    return KV_OK;
}

/* One variable into the global config and the per-op list. */
static kv_status parse_var(cfg_field f, kv_tune_config *global, env_op_setting *ops, int *nops) {
    const char *var = g_fields[f].var;
    const char *v = getenv(var);
    if (v == NULL) return KV_OK;
    /* Set but with no entry at all (empty or blanks and commas): an error,
     * as for every KV_* variable (README "Exit codes"). */
    if (v[strspn(v, " \t,")] == '\0')
        return kv_error(KV_ERR_INVALID_ARG, "%s: empty value '%s' (unset it, or give N or op:N entries)", var, v);
    const char *p = v;
    while (*p) {
        const char *b = p, *e = p;
        while (*e && *e != ',') e++;
        p = *e ? e + 1 : e;
        const char *tb = b;
        while (tb < e && (*tb == ' ' || *tb == '\t')) tb++;
        if (tb == e) continue; /* empty entries are skipped */
        char entry[160];
        snprintf(entry, sizeof entry, "%.*s", (int)(e - b), b);
        const char *colon = memchr(b, ':', (size_t)(e - b));
        int64_t x;
        if (colon == NULL) {
            kv_status st = parse_int(var, entry, b, e, g_fields[f].lo, g_fields[f].hi, &x);
            if (st != KV_OK) return st;
            set_field(global, f, x);
            continue;
        }
        char name[2 * KV_SCHEMA_NAME_MAX];
        const char *nb = b, *ne = colon;
        while (nb < ne && (*nb == ' ' || *nb == '\t')) nb++;
        while (ne > nb && (ne[-1] == ' ' || ne[-1] == '\t')) ne--;
        snprintf(name, sizeof name, "%.*s", (int)(ne - nb), nb);
        const kv_op *op = name[0] ? kv_op_find(name) : NULL;
        if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: entry '%s': unknown op '%s'", var, entry, name);
        kv_status st = parse_int(var, entry, colon + 1, e, g_fields[f].lo, g_fields[f].hi, &x);
        if (st != KV_OK) return st;
        if (*nops == ENV_OPS_MAX)
            return kv_error(KV_ERR_INVALID_ARG, "%s: entry '%s': more than %d per-op settings in all", var, entry,
                            ENV_OPS_MAX);
        ops[(*nops)++] = (env_op_setting){ op, f, x };
    }
    return KV_OK;
}

kv_status kv_tune_config_from_env(void) {
    kv_tune_config c = kv_tune_config_snapshot();
    env_op_setting ops[ENV_OPS_MAX];
    int nops = 0;
    for (int f = 0; f < F_COUNT; f++) {
        kv_status st = parse_var((cfg_field)f, &c, ops, &nops);
        if (st != KV_OK) return st;
    }
    kv_status st = kv_tune_config_set(&c);
    /* Per op: the global settings just set, with the op's entries on top. */
    for (int i = 0; st == KV_OK && i < nops; i++) {
        kv_tune_config oc = kv_tune_op_config_get(ops[i].op);
        set_field(&oc, ops[i].f, ops[i].v);
        st = kv_tune_op_config_set(ops[i].op, &oc);
    }
    return st;
}

/* ---- clock and sync ---- */

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void kv_tune_set_clock(kv_tune_clock_fn fn, void *ctx) {
    pthread_mutex_lock(&g_clock_lock);
    g_clock = fn;
    g_clock_ctx = ctx;
    pthread_mutex_unlock(&g_clock_lock);
}

uint64_t kv_tune_now(void) {
    pthread_mutex_lock(&g_clock_lock);
    kv_tune_clock_fn fn = g_clock;
    void *ctx = g_clock_ctx;
    pthread_mutex_unlock(&g_clock_lock);
    return fn ? fn(ctx) : monotonic_ns();
}

void kv_tune_set_sync(kv_key backend, void (*fn)(void)) {
    if (kv_key_is_backend(backend)) atomic_store(&g_sync[backend], fn);
}


/* ---- measuring ---- */

/* Copies every element's bytes of src into dst (same sizes and dtype). */
static void copy_values(kv_tensor *dst, const kv_tensor *src) {
    const char *s = kv_tensor_data(src);
    char *d = kv_tensor_data(dst);
    const int64_t n = kv_tensor_numel(src);
    if (s == NULL || d == NULL || n <= 0) return;
    const size_t es = kv_dtype_size(src->dtype);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        int64_t so = 0, dof = 0;
        for (int j = 0; j < src->ndim; j++) {
            so += idx[j] * src->strides[j];
            dof += idx[j] * dst->strides[j];
        }
        memcpy(d + dof * (int64_t)es, s + so * (int64_t)es, es);
        for (int j = src->ndim - 1; j >= 0; j--) {
            if (++idx[j] < src->sizes[j]) break;
            idx[j] = 0;
        }
    }
}

static kv_tensor *clone_geometry(const kv_tensor *t) {
    kv_tensor *c = kv_tensor_empty_strided(t->sizes, t->strides, t->ndim, t->dtype, t->device);
    if (c == NULL) return NULL;
    c->keys = t->keys;
    copy_values(c, t);
    return c;
}

/* One call of variant i on a copy of the stack, as a cache hit runs it
 * (the predicate with the stash armed, then the kernel), its returns
 * released. The predicate's answer on the copy is not used: the caller's
 * call decided compatibility, and a copy only differs in aliasing and
 * alignment, which makes it no harder for a kernel. */
static bool run_once(const tune_slot *s, int i, const kv_ivalue *args, int n) {
    kv_ivalue slots[KV_STACK_MAX];
    memcpy(slots, args, (size_t)n * sizeof *slots);
    kv_stack st = { slots, n, KV_STACK_MAX };
    kv_status rc;
    if (!kv_tune_run_as_hit(s, i, kv_keyset_of(s->key), &st, &rc)) {
        st = (kv_stack){ slots, n, KV_STACK_MAX };
        rc = s->v[i].fn(s->op, kv_keyset_of(s->key), &st);
    }
    if (rc != KV_OK) return false;
    kv_stack_clear_returns(&st);
    return true;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What one measurement works on: the slot, the copy of the call, and
 * every variant's samples so far. */
typedef struct measure {
    tune_slot *s;
    const kv_ivalue *args;
    int n, nv;
    void (*sync)(void);
    uint64_t times[KV_TUNE_MAX_VARIANTS][2 * TUNE_MAX_REPS];
    int done[KV_TUNE_MAX_VARIANTS];
    int batch[KV_TUNE_MAX_VARIANTS];
    bool live[KV_TUNE_MAX_VARIANTS];
    tune_timing *tm;
} measure;

/* One sample of variant i, appended to its times: an untimed lead-in
 * call, then `batch` calls between two readings of the clock, per run.
 * The lead-in makes the timed call what a program's loop (and kvrun's
 * perf mode) pays: a call that follows a call of the same variant. In a
 * round the previous call was another variant's, and the first call
 * after a stretch of other work pays to bring its data back: measured on
 * this machine, the first 1M-element add after a 25 ms reference call
 * took 3.9x its steady time (after a 2 ms spin, 1.7x to 2.1x), and a
 * threaded variant's helper threads start on a core that did other work
 * meanwhile. false: a run failed. */
static bool sample(measure *m, int i) {
    if (!run_once(m->s, i, m->args, m->n)) return false;
    if (m->sync) m->sync();
    const uint64_t t0 = kv_tune_now();
    bool good = true;
    for (int b = 0; b < m->batch[i] && good; b++) good = run_once(m->s, i, m->args, m->n);
    if (m->sync) m->sync();
    const uint64_t t1 = kv_tune_now();
    if (!good) return false;
    m->times[i][m->done[i]++] = (t1 >= t0 ? t1 - t0 : 0) / (uint64_t)m->batch[i];
    return true;
}

/* `rounds` rounds over the live variants in `among`: round r samples each
 * of them once, so a noisy stretch of the machine (2 shared cores) hurts
 * every variant's r-th sample a little instead of one variant's samples a
 * lot. */
static void run_rounds(measure *m, int rounds, const bool *among) {
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < m->nv; i++) {
            if (!m->live[i] || !among[i]) continue;
            if (!sample(m, i)) {
                m->live[i] = false;
                m->tm[i].failed = true;
            }
        }
}

/* After two rounds, a variant more than 8 times slower than the best
 * cannot win and may be slow (a reference mm): it stops. Two samples
 * each, so one outlier does not condemn a variant. Returns whether one
 * stopped. */
static bool cut_hopeless(measure *m) {
    uint64_t early[KV_TUNE_MAX_VARIANTS], best_early = UINT64_MAX;
    for (int i = 0; i < m->nv; i++) {
        if (!m->live[i] || m->done[i] < 2) continue;
        early[i] = m->times[i][0] < m->times[i][1] ? m->times[i][0] : m->times[i][1];
        if (early[i] < best_early) best_early = early[i];
    }
    bool cut = false;
    for (int i = 0; i < m->nv; i++)
        if (m->live[i] && m->done[i] >= 2 && early[i] / 8 > best_early) {
            m->live[i] = false;
            cut = true;
        }
    return cut;
}

/* Median and quartiles of variant i's samples so far. */
static void summarise(const measure *m, int i, uint64_t *q1, uint64_t *med, uint64_t *q3) {
    uint64_t sorted[2 * TUNE_MAX_REPS];
    const int d = m->done[i];
    memcpy(sorted, m->times[i], (size_t)d * sizeof sorted[0]);
    qsort(sorted, (size_t)d, sizeof sorted[0], cmp_u64);
    *med = d % 2 ? sorted[d / 2] : (sorted[d / 2 - 1] + sorted[d / 2]) / 2;
    *q1 = sorted[(d - 1) / 4];
    *q3 = sorted[d - 1 - (d - 1) / 4];
}

/* Every timed variant's median into tm; the lowest median's index (ties
 * to the earlier registered), -1 when none was timed. */
static int pick(measure *m, uint64_t *q1, uint64_t *q3) {
    int best = -1;
    for (int i = 0; i < m->nv; i++) {
        if (!m->tm[i].ran || m->tm[i].failed || m->done[i] == 0) continue;
        summarise(m, i, &q1[i], &m->tm[i].median_ns, &q3[i]);
        if (best < 0 || m->tm[i].median_ns < m->tm[best].median_ns) best = i;
    }
    return best;
}

int kv_tune_measure(tune_slot *s, const kv_stack *stack, const bool *compat, tune_timing *tm, bool first) {
    const kv_tune_config cfg = *kv_tune_slot_config(s);
    const kv_schema *sc = kv_op_schema(s->op);
    const int n = stack->size;
    if (n > KV_STACK_MAX) return -1;
    kv_ivalue args[KV_STACK_MAX];
    kv_tensor *clones[KV_STACK_MAX] = { NULL };
    memcpy(args, stack->slots, (size_t)n * sizeof *args);
    /* Timed runs of a random op draw from a private copy of its generator
     * (of the thread's default one for None): the caller's state advances
     * once, by the call that counts. */
    kv_generator gens[KV_STACK_MAX];
    for (int i = 0; i < n; i++) {
        const bool gen_arg = sc != NULL && i < sc->nargs && sc->args[i].type.kind == KV_TYPE_GENERATOR;
        if (args[i].tag != KV_IV_GENERATOR && !gen_arg) continue;
        gens[i] = *kv_generator_or_default(args[i].tag == KV_IV_GENERATOR ? args[i].v.gen : NULL);
        args[i] = (kv_ivalue){ .tag = KV_IV_GENERATOR, .v.gen = &gens[i] };
    }
    bool ok = true;
    /* A Tensor(a!)[] (in-place foreach) gets a list of clones: timed runs
     * never write the caller's elements. */
    kv_tensor **list_clones[KV_STACK_MAX] = { NULL };
    for (int i = 0; i < n && ok; i++) {
        if (sc == NULL || i >= sc->nargs || !sc->args[i].alias.is_write) continue;
        if (args[i].tag == KV_IV_TENSOR_LIST) {
            const kv_tensor_list l = args[i].v.tensors;
            list_clones[i] = calloc((size_t)(l.n > 0 ? l.n : 1), sizeof *list_clones[i]);
            ok = list_clones[i] != NULL;
            for (int e = 0; ok && e < l.n; e++) ok = (list_clones[i][e] = clone_geometry(l.items[e])) != NULL;
            args[i].v.tensors.items = list_clones[i];
            continue;
        }
        if (args[i].tag != KV_IV_TENSOR) continue;
        clones[i] = clone_geometry(args[i].v.tensor);
        if (clones[i] == NULL) ok = false;
        else args[i].v.tensor = clones[i];
    }
    measure *m = calloc(1, sizeof *m); /* ~16 KB of samples: not on a kernel's stack */
    if (m == NULL) ok = false;
    int best = -1;
    if (m != NULL) {
        m->s = s;
        m->args = args;
        m->n = n;
        m->nv = atomic_load_explicit(&s->n, memory_order_acquire);
        m->sync = atomic_load(&g_sync[s->key]);
        m->tm = tm;
        for (int i = 0; i < m->nv; i++) {
            tm[i] = (tune_timing){ false, false, 0 };
            m->live[i] = ok && compat[i];
            tm[i].ran = m->live[i];
        }
        kv_tune_t_measure_depth++;
        /* The first evaluation of a geometry warms up more (cold caches,
         * first-touch pages, lazy set-up) than a re-evaluation. */
        const int warm = first ? cfg.warmup : cfg.rewarmup;
        uint64_t warm_ns[KV_TUNE_MAX_VARIANTS] = { 0 };
        for (int w = 0; w < warm; w++)
            for (int i = 0; i < m->nv; i++) {
                if (!m->live[i]) continue;
                const uint64_t t0 = cfg.min_sample_ns > 0 ? kv_tune_now() : 0;
                if (!run_once(s, i, args, n)) {
                    m->live[i] = false;
                    tm[i].failed = true;
                }
                if (cfg.min_sample_ns > 0) {
                    const uint64_t t1 = kv_tune_now();
                    warm_ns[i] = t1 > t0 ? t1 - t0 : 1;
                }
            }
        /* Runs per sample: a short call is repeated so that the clock's
         * own cost and jitter are small next to what a sample measures. */
        for (int i = 0; i < m->nv; i++) {
            const uint64_t want =
                cfg.min_sample_ns > 0 && warm_ns[i] > 0 ? (uint64_t)cfg.min_sample_ns / warm_ns[i] : 1;
            m->batch[i] = want < 1 ? 1 : want > 256 ? 256 : (int)want;
        }
        bool all[KV_TUNE_MAX_VARIANTS];
        for (int i = 0; i < m->nv; i++) all[i] = true;
        const int screen = cfg.reps < 2 ? cfg.reps : 2;
        run_rounds(m, screen, all);
        if (screen == 2 && cut_hopeless(m)) {
            /* The rounds so far ran a hopeless variant between the others'
             * samples, for milliseconds (25 ms for a reference add of 1M
             * elements, 700 ms for a reference mm), long enough for the
             * machine's other work to push their data out of the shared
             * cache: measured on this machine, the calls of a 1M-element
             * add right after one reference call took 3.9x, 2.9x, 1.5x,
             * 1.2x its steady time, and they fell on the variant timed
             * after it in every round. Those samples are dropped; one
             * untimed call each settles the caches, and the survivors get
             * their `reps` rounds. */
            for (int i = 0; i < m->nv; i++) {
                if (!m->live[i]) continue; /* a cut variant keeps its two samples */
                m->done[i] = 0;
                if (!run_once(s, i, args, n)) {
                    m->live[i] = false;
                    tm[i].failed = true;
                }
            }
            run_rounds(m, cfg.reps, all);
        } else {
            run_rounds(m, cfg.reps - screen, all);
        }
        /* A close call gets as many rounds again, among the close ones
         * only: a variant is close to the best when its samples' lower
         * quartile is at or under the best's upper quartile, i.e. the gap
         * between the medians is within the spread of the samples, so the
         * samples so far do not say which is faster. The medians of all
         * their samples decide. Once: the cost stays bounded at twice the
         * timed runs. */
        uint64_t q1[KV_TUNE_MAX_VARIANTS] = { 0 }, q3[KV_TUNE_MAX_VARIANTS] = { 0 };
        best = pick(m, q1, q3);
        bool close[KV_TUNE_MAX_VARIANTS] = { false };
        int nclose = 0;
        for (int i = 0; best >= 0 && i < m->nv; i++) {
            close[i] = m->live[i] && tm[i].ran && !tm[i].failed && q1[i] <= q3[best];
            nclose += close[i];
        }
        if (nclose >= 2 && m->live[best]) {
            run_rounds(m, cfg.reps, close);
            best = pick(m, q1, q3);
        }
        kv_tune_t_measure_depth--;
    }
    for (int i = 0; i < n; i++) {
        kv_tensor_release(clones[i]);
        for (int e = 0; list_clones[i] != NULL && e < args[i].v.tensors.n; e++) kv_tensor_release(list_clones[i][e]);
        free(list_clones[i]);
    }
    free(m);
    /* Errors of failed runs belong to no caller. */
    kv_error_clear();
    return best;
}
