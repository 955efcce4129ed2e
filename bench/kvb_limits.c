/* The machine's own limits (runner/exec/limits.h, shared with kvrun's
 * perf mode), timed here in kvbench's interleaved rounds so that kernel
 * figures read as fractions of what this machine can do. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvb.h"
#include "runner/exec/limits.h"

/* The stream arrays live until kvb_limits_release: the throughput section
 * runs the limits again, interleaved with its own cases. */
static kv_limit_arrays g_s;

typedef struct limit_ctx {
    kv_limit which;
} limit_ctx;

static limit_ctx g_ctx[KV_LIMIT_COUNT];

static void run_limit(void *p) { kv_limit_run(((const limit_ctx *)p)->which, &g_s); }

/* kvbench's case for limit w (the arrays allocated). */
static kvb_case limit_case(kv_limit w, const char *name) {
    g_ctx[w].which = w;
    return (kvb_case){ .name = name, .run = run_limit, .ctx = &g_ctx[w], .work = kv_limit_work(w, &g_s) };
}

void kvb_limits_release(void) { kv_limit_arrays_free(&g_s); }

bool kvb_limit_case(kvb_limit which, kvb_case *out) {
    if (g_s.a == NULL) return false;
    switch (which) {
    case KVB_LIMIT_READ: *out = limit_case(KV_LIMIT_READ, "  (limit) read stream"); return kv_limit_supported(KV_LIMIT_READ);
    case KVB_LIMIT_TRIAD: *out = limit_case(KV_LIMIT_TRIAD, "  (limit) triad"); return kv_limit_supported(KV_LIMIT_TRIAD);
    case KVB_LIMIT_UPDATE:
        *out = limit_case(KV_LIMIT_UPDATE, "  (limit) update");
        return kv_limit_supported(KV_LIMIT_UPDATE);
    case KVB_LIMIT_FMA: {
        const kv_limit w = kv_limit_supported(KV_LIMIT_FMA512) ? KV_LIMIT_FMA512 : KV_LIMIT_FMA256;
        *out = limit_case(w, "  (limit) FMA peak");
        return kv_limit_supported(w);
    }
    }
    return false;
}

kvb_limits kvb_measure_limits(int rounds) {
    kvb_limits lim = { 0, 0, 0, 0, 0, "none", 0, 0, 0, 0 };
    if (kv_limit_arrays_alloc(&g_s) != KV_OK) {
        fprintf(stderr, "kvbench: %s\n", kv_last_error_message());
        return lim;
    }
    kvb_case cases[KV_LIMIT_COUNT];
    kv_limit which[KV_LIMIT_COUNT];
    int n = 0;
    for (int w = 0; w < KV_LIMIT_COUNT; w++) {
        if (!kv_limit_supported((kv_limit)w)) continue;
        which[n] = (kv_limit)w;
        cases[n++] = limit_case((kv_limit)w, kv_limit_name((kv_limit)w));
    }
    kvb_run(cases, n, rounds, 60.0);
    printf("== machine limits (one thread; median of %d interleaved rounds)\n", rounds);
    for (int i = 0; i < n; i++) {
        const kvb_case *c = &cases[i];
        const bool flops = kv_limit_is_flops(which[i]);
        const double med = c->work / kvb_median(c), lo = c->work / kvb_max(c), hi = c->work / kvb_min(c);
        printf("  %-52s %9.2f %s  (min %.2f, max %.2f)\n", c->name, med, flops ? "GFLOP/s" : "GB/s", lo, hi);
        switch (which[i]) {
        case KV_LIMIT_COPY: lim.copy_gbs = med; break;
        case KV_LIMIT_READ: lim.read_gbs = med, lim.read_best = hi; break;
        case KV_LIMIT_TRIAD: lim.triad_gbs = med, lim.triad_best = hi; break;
        case KV_LIMIT_UPDATE: lim.update_gbs = med, lim.update_best = hi; break;
        case KV_LIMIT_FMA256:
        case KV_LIMIT_FMA512:
            if (hi > lim.fma_best) lim.fma_best = hi;
            if (med > lim.fma_gflops) {
                lim.fma_gflops = med;
                lim.fma_isa = which[i] == KV_LIMIT_FMA512 ? "AVX-512" : "AVX2";
            }
            break;
        case KV_LIMIT_COUNT: break;
        }
    }
    return lim;
}
