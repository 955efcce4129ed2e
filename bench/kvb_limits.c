/* The machine's own limits, measured here so that kernel figures read as
 * fractions of what this machine can do, not of a datasheet: a read
 * stream, a triad stream (add's traffic), memcpy, and the one-core FMA
 * peak from independent FMA chains in registers. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvb.h"

#define STREAM_N (16L << 20) /* 16 Mi floats = 64 MiB per array, far above L3 */

typedef struct stream_ctx {
    float *a, *b, *c;
    long n;
} stream_ctx;

__attribute__((target("avx2,fma"))) static void run_read(void *p) {
    const stream_ctx *s = p;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (long i = 0; i < s->n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(s->a + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(s->a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(s->a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(s->a + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    kvb_sink += out[0];
}

__attribute__((target("avx2,fma"))) static void run_triad(void *p) {
    const stream_ctx *s = p;
    for (long i = 0; i < s->n; i += 16) {
        _mm256_store_ps(s->c + i, _mm256_add_ps(_mm256_load_ps(s->a + i), _mm256_load_ps(s->b + i)));
        _mm256_store_ps(s->c + i + 8, _mm256_add_ps(_mm256_load_ps(s->a + i + 8), _mm256_load_ps(s->b + i + 8)));
    }
}

/* a += b: the written line was just read, so no read-for-ownership
 * traffic; in-place ops reach more than the triad. */
__attribute__((target("avx2,fma"))) static void run_update(void *p) {
    const stream_ctx *s = p;
    for (long i = 0; i < s->n; i += 16) {
        _mm256_store_ps(s->a + i, _mm256_add_ps(_mm256_load_ps(s->a + i), _mm256_load_ps(s->c + i)));
        _mm256_store_ps(s->a + i + 8, _mm256_add_ps(_mm256_load_ps(s->a + i + 8), _mm256_load_ps(s->c + i + 8)));
    }
}

static void run_copy(void *p) {
    const stream_ctx *s = p;
    memcpy(s->c, s->a, (size_t)s->n * sizeof(float));
}

/* ---- FMA peak: 12 independent chains hide the 4-cycle latency on two
 * FMA pipes with room to spare; 1000 iterations per call. ---- */
#define FMA_ITERS 1000
#define FMA_CHAINS 12

__attribute__((target("avx2,fma"))) static void run_fma256(void *p) {
    (void)p;
    __m256 acc[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++) acc[k] = _mm256_set1_ps((float)k);
    const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
    /* Fully unrolled so the chains live in registers, not in memory. */
    for (int i = 0; i < FMA_ITERS; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < FMA_CHAINS; k++) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
    }
    __m256 t = acc[0];
    for (int k = 1; k < FMA_CHAINS; k++) t = _mm256_add_ps(t, acc[k]);
    kvb_sink += _mm256_cvtss_f32(t);
}

__attribute__((target("avx512f"))) static void run_fma512(void *p) {
    (void)p;
    __m512 acc[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++) acc[k] = _mm512_set1_ps((float)k);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < FMA_ITERS; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < FMA_CHAINS; k++) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
    }
    __m512 t = acc[0];
    for (int k = 1; k < FMA_CHAINS; k++) t = _mm512_add_ps(t, acc[k]);
    kvb_sink += _mm512_reduce_add_ps(t);
}

/* The stream arrays live until kvb_limits_release: the throughput section
 * runs the limits again, interleaved with its own cases. */
static stream_ctx g_s;

void kvb_limits_release(void) {
    free(g_s.a);
    free(g_s.b);
    free(g_s.c);
    g_s = (stream_ctx){ NULL, NULL, NULL, 0 };
}

bool kvb_limit_case(kvb_limit which, kvb_case *out) {
    if (g_s.a == NULL) return false;
    const double fl256 = (double)FMA_ITERS * FMA_CHAINS * 8 * 2;
    switch (which) {
    case KVB_LIMIT_READ: *out = (kvb_case){ .name = "  (limit) read stream", .run = run_read, .ctx = &g_s, .work = 4.0 * STREAM_N }; return __builtin_cpu_supports("avx2");
    case KVB_LIMIT_TRIAD: *out = (kvb_case){ .name = "  (limit) triad", .run = run_triad, .ctx = &g_s, .work = 12.0 * STREAM_N }; return __builtin_cpu_supports("avx2");
    case KVB_LIMIT_UPDATE: *out = (kvb_case){ .name = "  (limit) update", .run = run_update, .ctx = &g_s, .work = 12.0 * STREAM_N }; return __builtin_cpu_supports("avx2");
    case KVB_LIMIT_FMA:
        if (__builtin_cpu_supports("avx512f")) {
            *out = (kvb_case){ .name = "  (limit) FMA peak", .run = run_fma512, .work = 2 * fl256 };
            return true;
        }
        *out = (kvb_case){ .name = "  (limit) FMA peak", .run = run_fma256, .work = fl256 };
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return false;
}

kvb_limits kvb_measure_limits(int rounds) {
    kvb_limits lim = { 0, 0, 0, 0, 0, "none", 0, 0, 0, 0 };
    g_s = (stream_ctx){ aligned_alloc(64, STREAM_N * 4), aligned_alloc(64, STREAM_N * 4),
                        aligned_alloc(64, STREAM_N * 4), STREAM_N };
    stream_ctx s = g_s;
    if (s.a == NULL || s.b == NULL || s.c == NULL) {
        fprintf(stderr, "kvbench: out of memory for the stream arrays\n");
        kvb_limits_release();
        return lim;
    }
    for (long i = 0; i < s.n; i++) s.a[i] = s.b[i] = s.c[i] = 0.0f; /* a += c keeps a */
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f");
    const double fl256 = (double)FMA_ITERS * FMA_CHAINS * 8 * 2, fl512 = fl256 * 2;
    kvb_case cases[6];
    int n = 0;
    cases[n++] = (kvb_case){ .name = "memcpy 64 MiB (read + write)", .run = run_copy, .ctx = &s, .work = 8.0 * STREAM_N };
    if (avx2) {
        cases[n++] = (kvb_case){ .name = "read stream 64 MiB (AVX2 sum)", .run = run_read, .ctx = &s, .work = 4.0 * STREAM_N };
        cases[n++] = (kvb_case){ .name = "triad c = a + b, 3 x 64 MiB", .run = run_triad, .ctx = &s, .work = 12.0 * STREAM_N };
        cases[n++] = (kvb_case){ .name = "update a += b in place, 2 x 64 MiB", .run = run_update, .ctx = &s, .work = 12.0 * STREAM_N };
        cases[n++] = (kvb_case){ .name = "FMA peak, one core, AVX2 (256-bit)", .run = run_fma256, .work = fl256 };
    }
    if (avx512) cases[n++] = (kvb_case){ .name = "FMA peak, one core, AVX-512", .run = run_fma512, .work = fl512 };
    kvb_run(cases, n, rounds, 60.0);
    printf("== machine limits (one thread; median of %d interleaved rounds)\n", rounds);
    for (int i = 0; i < n; i++) {
        const kvb_case *c = &cases[i];
        const bool flops = c->run == run_fma256 || c->run == run_fma512;
        const double med = c->work / kvb_median(c), lo = c->work / kvb_max(c), hi = c->work / kvb_min(c);
        printf("  %-52s %9.2f %s  (min %.2f, max %.2f)\n", c->name, med, flops ? "GFLOP/s" : "GB/s", lo, hi);
        if (c->run == run_copy) lim.copy_gbs = med;
        if (c->run == run_read) lim.read_gbs = med, lim.read_best = hi;
        if (c->run == run_triad) lim.triad_gbs = med, lim.triad_best = hi;
        if (c->run == run_update) lim.update_gbs = med, lim.update_best = hi;
        if (flops && hi > lim.fma_best) lim.fma_best = hi;
        if (flops && med > lim.fma_gflops) {
            lim.fma_gflops = med;
            lim.fma_isa = c->run == run_fma512 ? "AVX-512" : "AVX2";
        }
    }
    return lim;
}
