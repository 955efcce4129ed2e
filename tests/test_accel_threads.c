/* Eight threads share the same accel inputs and call ops at once, on the
 * fast path, the manual path and several slow paths (a lazy bit, autograd,
 * a thread-local Trace mode); every result must equal, bit for bit, what
 * one thread computed alone, and the inputs must come out untouched.
 * A second run flips the kill switch and the gate while the workers run:
 * each call takes whichever path it is given, and both are right. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/accel.h"
#include "kv/autograd.h"
#include "test_util.h"

#define NTHREADS 8
#define NITER 25
#define NRESULTS 7

typedef struct inputs {
    kv_tensor *A, *B, *N, *E, *W;
} inputs;

static kv_tensor *check_t(kv_tensor *t) {
    if (t == NULL) fail_msg("unexpected error: %s", kv_last_error_message());
    return t;
}

static void noop_trace(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args, const kv_stack *returns,
                       kv_status st) {
    (void)op;
    (void)ks;
    (void)args;
    (void)st;
    if (returns == NULL) atomic_fetch_add((atomic_int *)ctx, 1);
}

/* One round of every op; returns NULL entries on failure. */
static void run_ops(const inputs *in, bool traced, atomic_int *traced_ops, kv_tensor **out) {
    out[0] = kv_add(in->A, in->B, kv_scalar_int(3));       /* fast */
    out[1] = kv_mm(in->A, in->B);                            /* fast */
    out[2] = kv_transpose(in->A, 0, 1);                      /* manual */
    out[3] = kv_add(in->N, in->B, kv_scalar_int(1));        /* slow: Negative bit */
    kv_tensor *items[3] = { in->A, in->E, in->B };
    out[4] = kv_cat((kv_tensor_list){ items, 3 }, 0);        /* fast, drops E */
    out[5] = kv_mul(in->W, in->W);                           /* slow: autograd */
    if (traced) kv_trace_push(noop_trace, traced_ops);
    out[6] = kv_neg(in->A);                                  /* slow on traced threads */
    if (traced) kv_trace_pop();
}

static bool bitwise_equal(const kv_tensor *a, const kv_tensor *b) {
    if (a == NULL || b == NULL || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d]) return false;
    if (a->device.type != b->device.type || a->keys != b->keys) return false;
    int64_t n = kv_tensor_numel(a);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    size_t isz = kv_dtype_size(a->dtype);
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(kv_tensor_element(a, idx), kv_tensor_element(b, idx), isz) != 0) return false;
        kv_test_next_index(a, idx);
    }
    return true;
}

typedef struct worker {
    const inputs *in;
    kv_tensor *const *expect;
    int id;
    int mismatches;
    int failures;
    atomic_int traced_ops;
    char first_error[256];
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int it = 0; it < NITER; it++) {
        kv_tensor *out[NRESULTS];
        run_ops(w->in, w->id % 2 == 1, &w->traced_ops, out);
        for (int k = 0; k < NRESULTS; k++) {
            if (out[k] == NULL) {
                if (w->failures++ == 0) snprintf(w->first_error, sizeof w->first_error, "%s", kv_last_error_message());
                continue;
            }
            if (!bitwise_equal(out[k], w->expect[k])) w->mismatches++;
            if (k == 5 && (!kv_tensor_requires_grad(out[k]) || kv_tensor_grad_fn_name(out[k]) == NULL))
                w->mismatches++;
            kv_tensor_release(out[k]);
        }
    }
    return NULL;
}

static atomic_bool g_stop_flipping;

static void *flip_switches(void *arg) {
    (void)arg;
    unsigned n = 0;
    while (!atomic_load(&g_stop_flipping)) {
        kv_accel_redispatch_set_enabled((n & 1u) == 0);
        kv_accel_gate_set((n & 2u) ? KV_ACCEL_GATE_SEED : KV_ACCEL_GATE_EXACT);
        kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_METADATA, (n & 4u) == 0);
        kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_CAT, (n & 8u) == 0);
        n++;
        sched_yield();
    }
    kv_accel_redispatch_set_enabled(true);
    kv_accel_gate_set(KV_ACCEL_GATE_EXACT);
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_METADATA, true);
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_CAT, true);
    return NULL;
}

typedef struct fixture {
    kv_tensor *cpu[4];
    inputs in;
    kv_tensor *expect[NRESULTS];
    unsigned char before[4][64];
    kv_keyset keys_before[5];
} fixture;

static void make_fixture(fixture *f) {
    float a[16], b[16];
    for (int i = 0; i < 16; i++) {
        a[i] = (float)(i % 5) - 1.5f;
        b[i] = (float)((i * 3) % 7) * 0.25f;
    }
    const int64_t s44[2] = { 4, 4 }, zero = 0;
    f->cpu[0] = kv_tensor_from_data(a, s44, 2, KV_F32);
    f->cpu[1] = kv_tensor_from_data(b, s44, 2, KV_F32);
    f->cpu[2] = kv_tensor_empty(&zero, 1, KV_F32, KV_DEVICE_CPU0);
    f->cpu[3] = kv_tensor_from_data(b, s44, 2, KV_F32);
    f->in.A = check_t(kv_accel_to(f->cpu[0]));
    f->in.B = check_t(kv_accel_to(f->cpu[1]));
    f->in.E = check_t(kv_accel_to(f->cpu[2]));
    f->in.W = check_t(kv_accel_to(f->cpu[3]));
    assert_int_equal(kv_tensor_set_requires_grad(f->in.W, true), KV_OK);
    f->in.N = check_t(kv__neg_view(f->in.A));
    for (int i = 0; i < 4; i++)
        if (i != 2) memcpy(f->before[i], f->cpu[i]->storage->data, 64);
    const kv_tensor *ins[5] = { f->in.A, f->in.B, f->in.N, f->in.E, f->in.W };
    for (int i = 0; i < 5; i++) f->keys_before[i] = ins[i]->keys;
    /* One thread, alone, untraced: the answers. */
    atomic_int unused = 0;
    run_ops(&f->in, false, &unused, f->expect);
    for (int k = 0; k < NRESULTS; k++) check_t(f->expect[k]);
}

static void check_untouched(const fixture *f) {
    for (int i = 0; i < 4; i++)
        if (i != 2) assert_memory_equal(f->cpu[i]->storage->data, f->before[i], 64);
    const kv_tensor *ins[5] = { f->in.A, f->in.B, f->in.N, f->in.E, f->in.W };
    for (int i = 0; i < 5; i++) assert_int_equal(ins[i]->keys, f->keys_before[i]);
    assert_true(kv_tensor_is_leaf(f->in.W));
    assert_null(kv_tensor_grad(f->in.W));
}

static void free_fixture(fixture *f) {
    for (int k = 0; k < NRESULTS; k++) kv_tensor_release(f->expect[k]);
    kv_tensor *all[] = { f->in.A, f->in.B, f->in.N, f->in.E, f->in.W, f->cpu[0], f->cpu[1], f->cpu[2], f->cpu[3] };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

static void run_workers(fixture *f, worker *w) {
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker){ .in = &f->in, .expect = f->expect, .id = i };
        atomic_init(&w[i].traced_ops, 0);
        assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < NTHREADS; i++) {
        if (w[i].failures) fail_msg("thread %d: %d failed calls, first: %s", i, w[i].failures, w[i].first_error);
        if (w[i].mismatches) fail_msg("thread %d: %d results differ from the single-thread run", i, w[i].mismatches);
    }
}

static void test_threads_share_inputs(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    kv_accel_counters_reset();
    worker w[NTHREADS];
    run_workers(&f, w);
    check_untouched(&f);
    /* Every call counted once, on the path its inputs and thread imply. */
    const uint64_t calls = (uint64_t)NTHREADS * NITER;
    kv_accel_counters add = kv_accel_counters_of("add.Tensor");
    assert_int_equal(add.fast, calls);
    assert_int_equal(add.slow, calls);
    assert_int_equal(kv_accel_counters_of("mm").fast, calls);
    assert_int_equal(kv_accel_counters_of("transpose.int").manual, calls);
    assert_int_equal(kv_accel_counters_of("cat").fast, calls);
    assert_int_equal(kv_accel_cat_dropped(), calls);
    assert_int_equal(kv_accel_counters_of("mul.Tensor").slow, calls);
    kv_accel_counters neg = kv_accel_counters_of("neg");
    assert_int_equal(neg.fast, calls / 2);
    assert_int_equal(neg.slow, calls / 2);
    for (int i = 0; i < NTHREADS; i++) {
        /* Trace is per thread: only the traced threads saw ops. */
        int seen = atomic_load(&w[i].traced_ops);
        if (i % 2 == 1) assert_true(seen >= NITER);
        else assert_int_equal(seen, 0);
    }
    free_fixture(&f);
}

static void test_threads_with_switches_flipping(void **state) {
    (void)state;
    fixture f;
    make_fixture(&f);
    kv_accel_counters_reset();
    atomic_store(&g_stop_flipping, false);
    pthread_t flipper;
    assert_int_equal(pthread_create(&flipper, NULL, flip_switches, NULL), 0);
    worker w[NTHREADS];
    run_workers(&f, w);
    atomic_store(&g_stop_flipping, true);
    pthread_join(flipper, NULL);
    check_untouched(&f);
    kv_accel_counters t = kv_accel_counters_total();
    /* At least the seven top-level calls per round were counted. */
    assert_true(t.fast + t.slow + t.manual >= (uint64_t)NTHREADS * NITER * NRESULTS);
    free_fixture(&f);
}

int main(void) {
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kv_init: %s\n", kv_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_inputs),
        cmocka_unit_test(test_threads_with_switches_flipping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
