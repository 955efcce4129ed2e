/* Throughput of dispatched calls (the typed API, so the tuner's choice
 * and the output allocation are included, as a user sees them) against
 * the limits measured in kvb_limits.c. */
#include <stdio.h>
#include <stdlib.h>

#include "kv/kv.h"
#include "kvb.h"

/* A sample: long enough for one call of each workload (mm 512^3 takes
 * about 2.5 ms), short enough that a busy machine leaves many alone. */
#define KVB_SAMPLE_NS 2e6

typedef struct tp_ctx {
    kv_tensor *x, *y, *a, *b;
} tp_ctx;

static void r_sum(void *p) {
    tp_ctx *c = p;
    kv_tensor_release(kv_sum(c->x, NULL, false, NULL));
}

static void r_mean(void *p) {
    tp_ctx *c = p;
    kv_tensor_release(kv_mean(c->x, NULL, false, NULL));
}

static void r_add_inplace(void *p) {
    tp_ctx *c = p;
    kv_add_(c->x, c->y, kv_scalar_int(1));
}

static void r_add(void *p) {
    tp_ctx *c = p;
    kv_tensor_release(kv_add(c->x, c->y, kv_scalar_int(1)));
}

static void r_mm(void *p) {
    tp_ctx *c = p;
    kv_tensor_release(kv_mm(c->a, c->b));
}

static kv_tensor *filled(const int64_t *sizes, int nd, float scale) {
    kv_tensor *t = kv_tensor_empty(sizes, nd, KV_F32, KV_DEVICE_CPU0);
    if (t == NULL) return NULL;
    float *p = kv_tensor_data(t);
    for (int64_t i = 0; i < kv_tensor_numel(t); i++) p[i] = scale * ((float)((i * 7919) % 1000) * 0.001f - 0.5f);
    return t;
}

/* The tuner's pick for a two-tensor call of `op` (what the rows ran). */
static const char *choice_of(const char *op_name, kv_tensor *a, kv_tensor *b, bool scalar) {
    const kv_op *op = kv_op_find(op_name);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, a);
    if (b) kv_push_tensor(&s, b);
    if (scalar) kv_push_scalar(&s, kv_scalar_int(1));
    if (!b && !scalar) { /* sum/mean: dim=None, keepdim=False, dtype=None */
        kv_push_none(&s);
        kv_push_bool(&s, false);
        kv_push_none(&s);
    }
    const char *name = "?";
    if (op == NULL || kv_tune_choice(op, KV_KEY_CPU, &s, &name, NULL) != KV_OK) return "?";
    return name;
}

void kvb_throughput_section(const kvb_limits *lim, int rounds, bool quick) {
    const int64_t n = quick ? (4L << 20) : (16L << 20);
    const int64_t m = quick ? 256 : 512;
    const int64_t msz[2] = { m, m };
    /* y = 0: in-place x += y leaves x as it was, so every round sees the same data. */
    tp_ctx c = { filled(&n, 1, 1.0f), filled(&n, 1, 0.0f), filled(msz, 2, 1.0f), filled(msz, 2, 1.0f) };
    if (!c.x || !c.y || !c.a || !c.b) {
        printf("== throughput: skipped (%s)\n", kv_last_error_message());
        return;
    }
    const double fn = (double)n, fm = (double)m;
    /* The limits run in the same rounds as the workloads, and each
     * fraction is taken round by round (workload rate / limit rate in
     * that round), then the median: a load spike hits both sides. */
    enum { NW = 5 };
    kvb_case cs[NW + 4] = {
        { .name = "sum f32 (read 4 B/elem)", .run = r_sum, .ctx = &c, .work = 4.0 * fn },
        { .name = "mean f32 (read 4 B/elem)", .run = r_mean, .ctx = &c, .work = 4.0 * fn },
        { .name = "add_ f32 in place (12 B/elem)", .run = r_add_inplace, .ctx = &c, .work = 12.0 * fn },
        { .name = "add f32 functional (12 B/elem)", .run = r_add, .ctx = &c, .work = 12.0 * fn },
        { .name = "mm f32 (2 m n k flops)", .run = r_mm, .ctx = &c, .work = 2.0 * fm * fm * fm },
    };
    const kvb_limit against[NW] = { KVB_LIMIT_READ, KVB_LIMIT_READ, KVB_LIMIT_UPDATE, KVB_LIMIT_TRIAD, KVB_LIMIT_FMA };
    const char *limit_name[] = { "read stream", "triad", "update stream", "FMA peak" };
    int nl = 0, lim_at[4] = { -1, -1, -1, -1 };
    for (int k = 0; k < 4; k++)
        if (kvb_limit_case((kvb_limit)k, &cs[NW + nl])) lim_at[k] = NW + nl++;
    const char *choice[] = { choice_of("sum.dim_IntList", c.x, NULL, false), choice_of("mean.dim", c.x, NULL, false),
                             choice_of("add_.Tensor", c.x, c.y, true), choice_of("add.Tensor", c.x, c.y, true),
                             choice_of("mm", c.a, c.b, false) };
    for (int i = 0; i < NW + nl; i++) cs[i].sample_ns = KVB_SAMPLE_NS;
    kvb_run(cs, NW + nl, rounds, quick ? 30.0 : 100.0);
    kv_allocator_stats st = kv_allocator_stats_of(KV_DEVICE_CPU);
    printf("\n== throughput, typed API (the tuner's pick; 'threads' uses every core, the limits one): %lld elements, "
           "mm %lld^3 (median of %d interleaved rounds, limits re-measured in the same rounds)\n",
           (long long)n, (long long)m, rounds);
    printf("  %-34s %10s %10s %10s  %-34s %9s  %s\n", "", "median", "min", "max", "fraction of the limit", "best/best",
           "tuner's pick");
    for (int i = 0; i < NW + nl; i++) {
        const bool flops = cs[i].run == r_mm || i == lim_at[KVB_LIMIT_FMA];
        const double med = cs[i].work / kvb_median(&cs[i]);
        char frac[64] = "", best[16] = "";
        if (i < NW && lim_at[against[i]] >= 0) {
            const kvb_case *l = &cs[lim_at[against[i]]];
            kvb_case ratio = { .nrounds = cs[i].nrounds };
            /* ns per call ratio inverted: (work/ns_w) / (lwork/ns_l) */
            for (int r = 0; r < cs[i].nrounds; r++) ratio.ns[r] = (cs[i].work / cs[i].ns[r]) / (l->work / l->ns[r]);
            snprintf(frac, sizeof frac, "%.2f (%.2f..%.2f) of %s", kvb_median(&ratio), kvb_min(&ratio), kvb_max(&ratio),
                     limit_name[against[i]]);
            snprintf(best, sizeof best, "%.2f", (cs[i].work / cs[i].best_ns) / (l->work / l->best_ns));
        }
        printf("  %-34s %10.2f %10.2f %10.2f  %-34s %9s  %s  %s\n", cs[i].name, med, cs[i].work / kvb_max(&cs[i]),
               cs[i].work / kvb_min(&cs[i]), frac, best, i < NW ? choice[i] : "", flops ? "GFLOP/s" : "GB/s");
    }
    /* Other processes only ever add time, so each side's fastest sample
     * is the one load touched least: on a busy machine that fraction
     * moves far less than the median of the round-by-round ones. */
    printf("  fraction: median of the per-round ratios (their range). best/best: the workload's fastest sample over\n"
           "  its limit's fastest sample, same rounds (samples of calls lasting >= %.0f ms; the figure load moves least)\n",
           KVB_SAMPLE_NS / 1e6);
    (void)lim;
    const kv_cpu_cache_stats cc = kv_cpu_cache_stats_get();
    printf("  CPU allocator after the run: %lld live blocks, %lld bytes live, %lld allocations in all\n",
           (long long)st.live_count, (long long)st.live_bytes, (long long)st.total_allocs);
    printf("  CPU cache (KV_CACHING_ALLOCATOR=%d): %llu large hits, %llu misses, %llu returned to libc, %lld blocks "
           "(%lld MiB) cached\n",
           cc.enabled ? 1 : 0, (unsigned long long)cc.hits, (unsigned long long)cc.misses,
           (unsigned long long)cc.returned, (long long)cc.cached_blocks, (long long)(cc.cached_bytes >> 20));
    kv_tensor_release(c.x);
    kv_tensor_release(c.y);
    kv_tensor_release(c.a);
    kv_tensor_release(c.b);
}
