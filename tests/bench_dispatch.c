/* Dispatch overhead and variant throughput: a benchmark program built by
 * `ninja bench`, never run by `ninja test` (timings belong here, not in
 * unit tests). Prints ns per call for the dispatch paths, then the
 * bandwidth of every elementwise variant against memcpy and the GFLOP/s of
 * every matmul variant.
 *
 *   build/bench/bench_dispatch [--quick]
 *
 * Calls use is_conj (a bool return, no allocation), so the numbers are the
 * dispatch machinery and nothing else. Each figure is the best of 5 timed
 * loops (of 1 for runs that take more than half a second). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/kv.h"
#include "ref/ref_kernels.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile int g_sink;
static long g_iters = 2000000;

typedef void (*bench_fn)(void *ctx);

/* Best of 5 timed loops of `iters` calls, in ns per call. */
static double ns_per_call(bench_fn fn, void *ctx, long iters) {
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = now_s();
        for (long i = 0; i < iters; i++) fn(ctx);
        const double el = now_s() - t0;
        const double dt = el * 1e9 / (double)iters;
        if (dt < best) best = dt;
        if (el > 0.5) break;
    }
    return best;
}

/* ---- the dispatch paths ---- */

typedef struct call_ctx {
    const kv_op *op;
    kv_tensor *t;
} call_ctx;

static void push1(kv_stack *s, kv_ivalue *slots, kv_tensor *t) {
    *s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(s, t);
}

static void b_direct(void *p) {
    call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push1(&s, slots, c->t);
    kv_ref_is_conj(c->op, kv_keyset_of(KV_KEY_CPU), &s);
    g_sink += s.slots[0].v.b;
}

static void b_call(void *p) {
    call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push1(&s, slots, c->t);
    kv_call(c->op, &s);
    g_sink += s.slots[0].v.b;
}

static void b_redispatch(void *p) {
    call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push1(&s, slots, c->t);
    kv_redispatch(c->op, kv_keyset_of(KV_KEY_CPU), &s);
    g_sink += s.slots[0].v.b;
}

static void b_variant(void *p) {
    call_ctx *c = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
    push1(&s, slots, c->t);
    kv_tune_call_variant(c->op, KV_KEY_CPU, "direct", &s);
    g_sink += s.slots[0].v.b;
}

static void b_typed(void *p) {
    call_ctx *c = p;
    bool b = false;
    kv_is_conj(c->t, &b);
    g_sink += b;
}

/* A plain kernel on an op of our own, and the same kernel as one of two
 * variants of another: the cost of perf_dispatch itself. */
static kv_status k_plain(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)op;
    (void)ks;
    kv_stack_return_bool(s, false);
    return KV_OK;
}

static bool pred_always(const kv_op *op, const kv_stack *s) {
    (void)op;
    return s->size == 1;
}

static void row(const char *what, double ns) { printf("%-48s %8.1f ns\n", what, ns); }

static void dispatch_rows(void) {
    const int64_t n = 4;
    kv_tensor *t = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    call_ctx c = { kv_op_find("is_conj"), t };
    printf("== dispatch overhead: is_conj on a 4-element f32 tensor, per call, best of 5\n");
    row("direct kernel call (kv_ref_is_conj)", ns_per_call(b_direct, &c, g_iters));
    row("perf_dispatch variant called by name", ns_per_call(b_variant, &c, g_iters));
    row("kv_redispatch on the CPU key (variant set)", ns_per_call(b_redispatch, &c, g_iters));
    row("kv_call (variant set)", ns_per_call(b_call, &c, g_iters));
    row("typed API kv_is_conj, cached op handle", ns_per_call(b_typed, &c, g_iters));
    kv_dispatch_cache_set_enabled(false);
    row("typed API kv_is_conj, uncached op handle", ns_per_call(b_typed, &c, g_iters));
    kv_dispatch_cache_set_enabled(true);

    const kv_op *plain = NULL, *tuned = NULL;
    if (kv_op_register("bench.plain(Tensor self) -> bool", &plain) == KV_OK &&
        kv_register_kernel("bench.plain", KV_KEY_CPU, k_plain) == KV_OK &&
        kv_op_register("bench.tuned(Tensor self) -> bool", &tuned) == KV_OK &&
        kv_tune_register_variant("bench.tuned", KV_KEY_CPU, "a", k_plain, pred_always) == KV_OK &&
        kv_tune_register_variant("bench.tuned", KV_KEY_CPU, "b", k_plain, pred_always) == KV_OK) {
        call_ctx cp = { plain, t }, ct = { tuned, t };
        row("kv_call, one plain kernel (no variant set)", ns_per_call(b_call, &cp, g_iters));
        row("kv_call, two variants (cached choice)", ns_per_call(b_call, &ct, g_iters));
    }

    kv_tensor *a = kv_accel_to(t);
    if (a != NULL) {
        call_ctx ca = { kv_op_find("is_conj"), a };
        kv_accel_redispatch_set_enabled(true);
        kv_accel_counters_reset();
        const double fast = ns_per_call(b_typed, &ca, g_iters / 4);
        const kv_accel_counters cf = kv_accel_counters_of("is_conj");
        kv_accel_redispatch_set_enabled(false);
        kv_accel_counters_reset();
        const double slow = ns_per_call(b_typed, &ca, g_iters / 4);
        const kv_accel_counters cs = kv_accel_counters_of("is_conj");
        kv_accel_redispatch_set_enabled(true);
        printf("%-48s %8.1f ns   (counters: %llu fast, %llu slow)\n", "accel fast path (typed API)", fast,
               (unsigned long long)cf.fast, (unsigned long long)cf.slow);
        printf("%-48s %8.1f ns   (counters: %llu fast, %llu slow)\n", "accel slow path (fast paths off)", slow,
               (unsigned long long)cs.fast, (unsigned long long)cs.slow);
        kv_tensor_release(a);
    } else {
        printf("accel: %s\n", kv_last_error_message());
    }
    kv_tensor_release(t);
}

/* ---- variant throughput ---- */

typedef struct var_ctx {
    const kv_op *op;
    const char *name;
    kv_ivalue args[KV_STACK_MAX];
    int nargs;
} var_ctx;

static void b_run_variant(void *p) {
    var_ctx *v = p;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < v->nargs; i++) kv_stack_push(&s, v->args[i]);
    if (kv_tune_call_variant(v->op, KV_KEY_CPU, v->name, &s) == KV_OK) kv_stack_clear_returns(&s);
}

static kv_tensor *filled(const int64_t *sizes, int nd) {
    kv_tensor *t = kv_tensor_empty(sizes, nd, KV_F32, KV_DEVICE_CPU0);
    float *p = kv_tensor_data(t);
    for (int64_t i = 0; i < kv_tensor_numel(t); i++) p[i] = (float)((i * 7919) % 1000) * 0.001f - 0.5f;
    return t;
}

static void b_memcpy(void *p) {
    void **b = p;
    memcpy(b[0], b[1], (size_t)(intptr_t)b[2]);
}

/* Every variant of `v->op` on v's arguments: `work` units per call. */
static void each_variant(var_ctx *v, double work, const char *unit) {
    for (int i = 0; i < kv_tune_variant_count(v->op, KV_KEY_CPU); i++) {
        v->name = kv_tune_variant_name(v->op, KV_KEY_CPU, i);
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
        for (int k = 0; k < v->nargs; k++) kv_stack_push(&s, v->args[k]);
        if (!kv_tune_variant_compatible(v->op, KV_KEY_CPU, i, &s)) {
            printf("%-24s   (not compatible on this CPU / call)\n", v->name);
            continue;
        }
        const double t = ns_per_call(b_run_variant, v, 2);
        printf("%-24s %8.2f %s\n", v->name, work / t, unit);
    }
}

static void throughput_rows(bool quick) {
    const int64_t n = quick ? (1 << 20) : (1 << 22);
    kv_tensor *x = filled(&n, 1), *y = filled(&n, 1);
    const double bytes = 3.0 * 4.0 * (double)n; /* add: two reads, one write */
    printf("\n== add.Tensor, f32, %lld elements (%.0f MB of traffic per call)\n", (long long)n, bytes / 1e6);
    const size_t cb = (size_t)n * 6; /* memcpy of 6n bytes reads 6n, writes 6n: the same 12n */
    void *dst = malloc(cb), *src = malloc(cb);
    memset(src, 1, cb);
    memset(dst, 0, cb);
    void *mc[3] = { dst, src, (void *)(intptr_t)cb };
    printf("%-24s %8.2f GB/s\n", "memcpy (same traffic)", 2.0 * (double)cb / ns_per_call(b_memcpy, mc, 3));
    free(dst);
    free(src);
    var_ctx v = { kv_op_find("add.Tensor"), NULL, { { 0 } }, 3 };
    v.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = x };
    v.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = y };
    v.args[2] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = kv_scalar_int(1) };
    each_variant(&v, bytes, "GB/s");
    printf("\n== exp, f32, %lld elements\n", (long long)n);
    var_ctx e = { kv_op_find("exp"), NULL, { { 0 } }, 1 };
    e.args[0] = v.args[0];
    each_variant(&e, (double)n, "Gelem/s");
    kv_tensor_release(x);
    kv_tensor_release(y);

    const int64_t m = quick ? 256 : 512;
    const int64_t sz[2] = { m, m };
    kv_tensor *a = filled(sz, 2), *b = filled(sz, 2);
    printf("\n== mm, f32, %lld x %lld x %lld\n", (long long)m, (long long)m, (long long)m);
    var_ctx w = { kv_op_find("mm"), NULL, { { 0 } }, 2 };
    w.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a };
    w.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = b };
    each_variant(&w, 2.0 * (double)m * (double)m * (double)m, "GFLOP/s");
    kv_tensor_release(a);
    kv_tensor_release(b);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (quick) g_iters = 200000;
    if (kv_init() != KV_OK) {
        fprintf(stderr, "bench_dispatch: %s\n", kv_last_error_message());
        return 1;
    }
    dispatch_rows();
    throughput_rows(quick);
    return 0;
}
