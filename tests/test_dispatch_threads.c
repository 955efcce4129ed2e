/* Concurrent dispatch while the tuner fills its cache: eight threads call
 * ops through boxed kv_call and the typed API, on CPU tensors and on accel
 * tensors (the boxing fast path down to the CPU target), over geometries
 * no thread has seen yet, so they race to tune the same (op, geometry)
 * and to read each other's cached choices; a ninth thread keeps clearing
 * the cache so tuning and lookups overlap all the way through. Every
 * result must equal the value computed here by hand, bit for bit (the ops
 * are exact in f32 on every variant), and the tuner must show that it both
 * tuned and served cached choices.
 *
 * `ninja tsan` runs this program under ThreadSanitizer (tests/sanitize.sh);
 * in `ninja test` it is an ordinary test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/accel.h"
#include "kv/tune.h"

#define NTHREADS 8
#define NITER 12
#define NGEOM 4
#define MAXN (64 * 64)

/* ---- inputs: one pair per geometry ---- */

typedef struct geom {
    int64_t rows, cols;
    bool transposed; /* b is a transposed view: another stride pattern */
} geom;

static const geom g_geoms[NGEOM] = {
    { 4, 4, false },
    { 16, 33, false },
    { 64, 64, false },
    { 5, 3, true },
};

typedef struct pair {
    kv_tensor *a, *b;          /* CPU; b may be a transposed view */
    kv_tensor *accel_a, *accel_b;
    float va[MAXN], vb[MAXN];  /* logical values, row-major */
} pair;

static pair g_pairs[NGEOM];

/* Small dyadic values: sums and products are exact in f32. */
static float value_a(int64_t i) { return (float)((i * 7) % 11) * 0.5f - 2.0f; }
static float value_b(int64_t i) { return (float)((i * 5) % 13) * 0.25f - 1.5f; }

static kv_tensor *check_t(kv_tensor *t) {
    if (t == NULL) fail_msg("unexpected error: %s", kv_last_error_message());
    return t;
}

static void make_pair(pair *p, const geom *g) {
    const int64_t n = g->rows * g->cols;
    float data[MAXN];
    for (int64_t i = 0; i < n; i++) p->va[i] = value_a(i);
    const int64_t sizes[2] = { g->rows, g->cols };
    p->a = check_t(kv_tensor_from_data(p->va, sizes, 2, KV_F32));
    for (int64_t i = 0; i < n; i++) p->vb[i] = value_b(i);
    if (g->transposed) {
        /* Store b^T contiguously, then view it transposed: logical b[r][c]
         * sits at data[c * rows + r]. */
        for (int64_t r = 0; r < g->rows; r++)
            for (int64_t c = 0; c < g->cols; c++) data[c * g->rows + r] = p->vb[r * g->cols + c];
        const int64_t tsizes[2] = { g->cols, g->rows };
        kv_tensor *bt = check_t(kv_tensor_from_data(data, tsizes, 2, KV_F32));
        p->b = check_t(kv_transpose(bt, 0, 1));
        kv_tensor_release(bt);
    } else {
        p->b = check_t(kv_tensor_from_data(p->vb, sizes, 2, KV_F32));
    }
    p->accel_a = check_t(kv_accel_to(p->a));
    p->accel_b = check_t(kv_accel_to(p->b));
}

static void free_pair(pair *p) {
    kv_tensor_release(p->accel_a);
    kv_tensor_release(p->accel_b);
    kv_tensor_release(p->a);
    kv_tensor_release(p->b);
}

/* ---- what each op must give, by hand ---- */

typedef enum which { ADD, MUL, MAXIMUM, NEG, RELU, NWHICH } which;

static float expected(which w, float a, float b) {
    switch (w) {
    case ADD: return a + b;
    case MUL: return a * b;
    case MAXIMUM: return a > b ? a : b;
    case NEG: return -a;
    case RELU: return a > 0.0f ? a : 0.0f;
    case NWHICH: break;
    }
    return NAN;
}

/* 0 when out holds expected(w, a, b) everywhere, bit for bit. */
static int mismatches(which w, const pair *p, const geom *g, const kv_tensor *out) {
    if (out->dtype != KV_F32 || out->ndim != 2 || out->sizes[0] != g->rows || out->sizes[1] != g->cols) return 1;
    int bad = 0;
    for (int64_t r = 0; r < g->rows; r++) {
        for (int64_t c = 0; c < g->cols; c++) {
            const int64_t idx[2] = { r, c }, i = r * g->cols + c;
            const float got = (float)kv_tensor_get_f64(out, idx);
            const float want = expected(w, p->va[i], p->vb[i]);
            if (memcmp(&got, &want, sizeof got) != 0) bad++;
        }
    }
    return bad;
}

/* ---- one call of each kind ---- */

/* Boxed: the stack protocol by hand, kv_call on the op handle. */
static kv_tensor *boxed_binary(const kv_op *op, kv_tensor *a, kv_tensor *b, bool alpha) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    if (kv_push_tensor(&s, a) != KV_OK || kv_push_tensor(&s, b) != KV_OK) return NULL;
    if (alpha && kv_push_scalar(&s, kv_scalar_int(1)) != KV_OK) return NULL;
    if (kv_call(op, &s) != KV_OK) return NULL;
    if (s.size != 1 || s.slots[0].tag != KV_IV_TENSOR) {
        kv_stack_clear_returns(&s);
        return NULL;
    }
    return s.slots[0].v.tensor;
}

typedef struct worker {
    int id;
    const kv_op *add, *maximum;
    int mismatches, failures;
    char first_error[256];
} worker;

static void record(worker *w, which k, const pair *p, const geom *g, kv_tensor *out) {
    if (out == NULL) {
        if (w->failures++ == 0) snprintf(w->first_error, sizeof w->first_error, "%s", kv_last_error_message());
        return;
    }
    /* Accel results live in the target's (CPU) memory: read through a
     * CPU alias. */
    kv_tensor *host = kv_tensor_is_accel(out) ? kv_accel_from(out) : NULL;
    w->mismatches += mismatches(k, p, g, host ? host : out);
    kv_tensor_release(host);
    kv_tensor_release(out);
}

static void *work(void *arg) {
    worker *w = arg;
    for (int it = 0; it < NITER; it++) {
        /* Each thread walks the geometries from its own starting point, so
         * at any moment several threads want the same cold geometry. */
        const int gi = (w->id + it) % NGEOM;
        const geom *g = &g_geoms[gi];
        pair *p = &g_pairs[gi];
        record(w, ADD, p, g, boxed_binary(w->add, p->a, p->b, true));
        record(w, MUL, p, g, kv_mul(p->a, p->b));
        record(w, MAXIMUM, p, g, boxed_binary(w->maximum, p->accel_a, p->accel_b, false));
        record(w, NEG, p, g, kv_neg(p->accel_a));
        record(w, RELU, p, g, kv_relu(p->a));
    }
    return NULL;
}

static atomic_bool g_stop;
static atomic_int g_clears;

static void *clear_cache(void *arg) {
    (void)arg;
    while (!atomic_load(&g_stop)) {
        kv_tune_cache_clear();
        atomic_fetch_add(&g_clears, 1);
        sched_yield();
    }
    return NULL;
}

/* Runs the eight workers once; a clearer thread runs beside them when
 * `clearing`. */
static void run_round(const kv_op *add, const kv_op *maximum, bool clearing) {
    atomic_store(&g_stop, false);
    pthread_t clearer, th[NTHREADS];
    worker w[NTHREADS];
    if (clearing) assert_int_equal(pthread_create(&clearer, NULL, clear_cache, NULL), 0);
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker){ .id = i, .add = add, .maximum = maximum };
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    atomic_store(&g_stop, true);
    if (clearing) pthread_join(clearer, NULL);
    for (int i = 0; i < NTHREADS; i++) {
        if (w[i].failures) fail_msg("thread %d: %d failed calls, first: %s", i, w[i].failures, w[i].first_error);
        if (w[i].mismatches) fail_msg("thread %d: %d wrong elements", i, w[i].mismatches);
    }
}

static void test_threads_tune_and_dispatch(void **state) {
    (void)state;
    /* Few timed runs (the point is the overlap, not the measurement), and
     * re-tuning every few calls, so tuning goes on all through a round. */
    const kv_tune_config saved = kv_tune_config_get();
    kv_tune_config cfg = saved;
    cfg.warmup = 0;
    cfg.reps = 1;
    cfg.retune_after = 3;
    cfg.tuning = true;
    assert_int_equal(kv_tune_config_set(&cfg), KV_OK);
    for (int i = 0; i < NGEOM; i++) make_pair(&g_pairs[i], &g_geoms[i]);
    const kv_op *add = kv_op_find("add.Tensor"), *maximum = kv_op_find("maximum");
    assert_non_null(add);
    assert_non_null(maximum);
    const uint64_t calls = (uint64_t)NTHREADS * NITER;

    /* Round 1: a ninth thread clears the cache (and the statistics) all
     * the time; the results must not care. */
    kv_tune_cache_clear();
    kv_accel_counters_reset();
    atomic_store(&g_clears, 0);
    run_round(add, maximum, true);
    assert_true(atomic_load(&g_clears) > 0);
    /* The accel calls took the fast path: no mode, no lazy bit, no grad. */
    assert_int_equal(kv_accel_counters_of("maximum").fast, calls);
    assert_int_equal(kv_accel_counters_of("neg").fast, calls);

    /* Round 2, from a cold cache and left alone: every geometry was tuned
     * at least once and later calls were served from the cache. */
    kv_tune_cache_clear();
    run_round(add, maximum, false);
    const kv_tune_stats st = kv_tune_stats_of(add, KV_KEY_CPU);
    assert_int_equal(st.calls, calls);
    assert_true(st.tunings >= NGEOM);
    assert_true(st.cache_hits > 0);
    assert_true(st.tunings + st.cache_hits <= st.calls);

    for (int i = 0; i < NGEOM; i++) free_pair(&g_pairs[i]);
    assert_int_equal(kv_tune_config_set(&saved), KV_OK);
}

int main(void) {
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kv_init: %s\n", kv_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_tune_and_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
