/* The tuner: timing the compatible variants of one call (kv/tune.h).
 *
 * Each variant runs `warmup` times untimed, then `reps` times between two
 * readings of the clock with the backend's sync before and after; the
 * lowest median wins, ties going to the earlier registered variant. A
 * variant whose first timed run is more than 8 times the best median so
 * far stops there (it cannot win and may be slow: a reference mm).
 *
 * Runs never touch the caller's data: they use a copy of the stack whose
 * mutable (a!) tensors are replaced by fresh tensors of the same geometry
 * holding a copy of the values. Returns of every run are released. */
#include "tune/tune_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/tensor.h"

#define TUNE_MAX_REPS 101

static pthread_mutex_t g_cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static kv_tune_config g_cfg = { 1, 5, 0, true };
/* Read on every cached call, so kept apart from the locked config. */
static _Atomic int64_t g_retune_after;

static pthread_mutex_t g_clock_lock = PTHREAD_MUTEX_INITIALIZER;
static kv_tune_clock_fn g_clock;
static void *g_clock_ctx;

static void (*_Atomic g_sync[KV_BACKEND_KEY_COUNT])(void);

static _Thread_local int t_measure_depth;

/* ---- settings ---- */

kv_tune_config kv_tune_config_snapshot(void) {
    pthread_mutex_lock(&g_cfg_lock);
    kv_tune_config c = g_cfg;
    pthread_mutex_unlock(&g_cfg_lock);
    return c;
}

kv_tune_config kv_tune_config_get(void) { return kv_tune_config_snapshot(); }

int64_t kv_tune_retune_after(void) { return atomic_load_explicit(&g_retune_after, memory_order_relaxed); }

kv_status kv_tune_config_set(const kv_tune_config *c) {
    if (c == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_tune_config_set: argument 'config': is NULL");
    if (c->warmup < 0)
        return kv_error(KV_ERR_INVALID_ARG, "kv_tune_config_set: argument 'warmup': %d is negative", c->warmup);
    if (c->reps < 1 || c->reps > TUNE_MAX_REPS)
        return kv_error(KV_ERR_INVALID_ARG, "kv_tune_config_set: argument 'reps': %d is outside [1, %d]", c->reps,
                        TUNE_MAX_REPS);
    if (c->retune_after < 0)
        return kv_error(KV_ERR_INVALID_ARG, "kv_tune_config_set: argument 'retune_after': %lld is negative",
                        (long long)c->retune_after);
    pthread_mutex_lock(&g_cfg_lock);
    g_cfg = *c;
    atomic_store(&g_retune_after, c->retune_after);
    pthread_mutex_unlock(&g_cfg_lock);
    kv_tune_cache_clear();
    return KV_OK;
}

/* A non-negative integer from the environment; -1 when unset. */
static kv_status env_int(const char *var, int64_t lo, int64_t hi, int64_t *out) {
    *out = -1;
    const char *v = getenv(var);
    if (v == NULL) return KV_OK;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end != '\0' || x < lo || x > hi)
        return kv_error(KV_ERR_INVALID_ARG, "%s: expected an integer in [%lld, %lld], got '%s'", var, (long long)lo,
                        (long long)hi, v);
    *out = x;
    return KV_OK;
}

kv_status kv_tune_config_from_env(void) {
    kv_tune_config c = kv_tune_config_snapshot();
    int64_t v;
    kv_status st;
    if ((st = env_int("KV_PERFDISPATCH_RETUNE", 0, INT64_MAX, &v)) != KV_OK) return st;
    if (v >= 0) c.retune_after = v;
    if ((st = env_int("KV_PERFDISPATCH_WARMUP", 0, 1000, &v)) != KV_OK) return st;
    if (v >= 0) c.warmup = (int)v;
    if ((st = env_int("KV_PERFDISPATCH_REPS", 1, TUNE_MAX_REPS, &v)) != KV_OK) return st;
    if (v >= 0) c.reps = (int)v;
    if ((st = env_int("KV_PERFDISPATCH_TUNE", 0, 1, &v)) != KV_OK) return st;
    if (v >= 0) c.tuning = v == 1;
    return kv_tune_config_set(&c);
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

bool kv_tune_in_measure(void) { return t_measure_depth > 0; }

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

static bool run_once(const tune_slot *s, const tune_variant *v, const kv_ivalue *args, int n) {
    kv_ivalue slots[KV_STACK_MAX];
    memcpy(slots, args, (size_t)n * sizeof *slots);
    kv_stack st = { slots, n, KV_STACK_MAX };
    if (v->fn(s->op, kv_keyset_of(s->key), &st) != KV_OK) return false;
    kv_stack_clear_returns(&st);
    return true;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int kv_tune_measure(tune_slot *s, const kv_stack *stack, const bool *compat, tune_timing *tm) {
    const kv_tune_config cfg = kv_tune_config_snapshot();
    const kv_schema *sc = kv_op_schema(s->op);
    const int n = stack->size;
    if (n > KV_STACK_MAX) return -1;
    kv_ivalue args[KV_STACK_MAX];
    kv_tensor *clones[KV_STACK_MAX] = { NULL };
    memcpy(args, stack->slots, (size_t)n * sizeof *args);
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        if (sc == NULL || i >= sc->nargs || !sc->args[i].alias.is_write || args[i].tag != KV_IV_TENSOR) continue;
        clones[i] = clone_geometry(args[i].v.tensor);
        if (clones[i] == NULL) ok = false;
        else args[i].v.tensor = clones[i];
    }
    const int nv = atomic_load_explicit(&s->n, memory_order_acquire);
    int best = -1;
    void (*sync)(void) = atomic_load(&g_sync[s->key]);
    t_measure_depth++;
    for (int i = 0; ok && i < nv; i++) {
        tm[i] = (tune_timing){ false, false, 0 };
        if (!compat[i]) continue;
        tm[i].ran = true;
        const tune_variant *v = &s->v[i];
        bool good = true;
        for (int w = 0; w < cfg.warmup && good; w++) good = run_once(s, v, args, n);
        uint64_t times[TUNE_MAX_REPS];
        int done = 0;
        for (int r = 0; r < cfg.reps && good; r++) {
            if (sync) sync();
            const uint64_t t0 = kv_tune_now();
            good = run_once(s, v, args, n);
            if (sync) sync();
            const uint64_t t1 = kv_tune_now();
            if (!good) break;
            times[done++] = t1 >= t0 ? t1 - t0 : 0;
            if (r == 0 && best >= 0 && times[0] / 8 > tm[best].median_ns) break;
        }
        if (!good) {
            tm[i].failed = true;
            continue;
        }
        qsort(times, (size_t)done, sizeof *times, cmp_u64);
        tm[i].median_ns = done % 2 ? times[done / 2] : (times[done / 2 - 1] + times[done / 2]) / 2;
        if (best < 0 || tm[i].median_ns < tm[best].median_ns) best = i;
    }
    t_measure_depth--;
    for (int i = 0; i < n; i++) kv_tensor_release(clones[i]);
    /* Errors of failed runs belong to no caller. */
    kv_error_clear();
    return best;
}
