/* The machine limits behind runner/exec/limits.h: the stream and FMA
 * kernels (intrinsics, each compiled for its ISA and run only where the
 * CPU has it) and a small interleaved timer for kvrun's perf mode. The
 * kernels are x86 intrinsics; elsewhere (the aarch64 cross build of
 * `ninja cross-golden`) only memcpy is measured and the rest report as
 * not supported. */
#include "runner/exec/limits.h"

#if defined(__x86_64__) || defined(__i386__)
#define KV_LIMITS_X86 1
#include <immintrin.h>
#define KV_CPU_HAS(feature) __builtin_cpu_supports(feature)
#else
#define KV_LIMITS_X86 0
#define KV_CPU_HAS(feature) false
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- FMA peak: 12 independent chains hide the 4-cycle latency on two
 * FMA pipes with room to spare; 1000 iterations per call. ---- */
#define FMA_ITERS 1000
#define FMA_CHAINS 12

#if KV_LIMITS_X86
/* Where the optimizer cannot drop a result. */
static volatile float kv_limit_sink;

__attribute__((target("avx2,fma"))) static void run_read(const kv_limit_arrays *s) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (long i = 0; i < s->n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_load_ps(s->a + i));
        s1 = _mm256_add_ps(s1, _mm256_load_ps(s->a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_load_ps(s->a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_load_ps(s->a + i + 24));
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    kv_limit_sink += out[0];
}

__attribute__((target("avx2,fma"))) static void run_triad(const kv_limit_arrays *s) {
    for (long i = 0; i < s->n; i += 16) {
        _mm256_store_ps(s->c + i, _mm256_add_ps(_mm256_load_ps(s->a + i), _mm256_load_ps(s->b + i)));
        _mm256_store_ps(s->c + i + 8, _mm256_add_ps(_mm256_load_ps(s->a + i + 8), _mm256_load_ps(s->b + i + 8)));
    }
}

/* a += c: the written line was just read, so no read-for-ownership
 * traffic; in-place ops reach more than the triad. */
__attribute__((target("avx2,fma"))) static void run_update(const kv_limit_arrays *s) {
    for (long i = 0; i < s->n; i += 16) {
        _mm256_store_ps(s->a + i, _mm256_add_ps(_mm256_load_ps(s->a + i), _mm256_load_ps(s->c + i)));
        _mm256_store_ps(s->a + i + 8, _mm256_add_ps(_mm256_load_ps(s->a + i + 8), _mm256_load_ps(s->c + i + 8)));
    }
}

__attribute__((target("avx2,fma"))) static void run_fma256(void) {
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
    kv_limit_sink += _mm256_cvtss_f32(t);
}

__attribute__((target("avx512f"))) static void run_fma512(void) {
    __m512 acc[FMA_CHAINS];
    for (int k = 0; k < FMA_CHAINS; k++) acc[k] = _mm512_set1_ps((float)k);
    const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
    for (int i = 0; i < FMA_ITERS; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < FMA_CHAINS; k++) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
    }
    __m512 t = acc[0];
    for (int k = 1; k < FMA_CHAINS; k++) t = _mm512_add_ps(t, acc[k]);
    kv_limit_sink += _mm512_reduce_add_ps(t);
}
#endif /* KV_LIMITS_X86 */

kv_status kv_limit_arrays_alloc(kv_limit_arrays *s) {
    const size_t bytes = (size_t)KV_LIMIT_STREAM_N * sizeof(float);
    *s = (kv_limit_arrays){ aligned_alloc(64, bytes), aligned_alloc(64, bytes), aligned_alloc(64, bytes),
                            KV_LIMIT_STREAM_N };
    if (s->a == NULL || s->b == NULL || s->c == NULL) {
        kv_limit_arrays_free(s);
        return kv_error(KV_ERR_OOM, "machine limits: out of memory for 3 x 64 MiB stream arrays");
    }
    memset(s->a, 0, bytes);
    memset(s->b, 0, bytes);
    memset(s->c, 0, bytes);
    return KV_OK;
}

void kv_limit_arrays_free(kv_limit_arrays *s) {
    free(s->a);
    free(s->b);
    free(s->c);
    *s = (kv_limit_arrays){ NULL, NULL, NULL, 0 };
}

bool kv_limit_supported(kv_limit w) {
    switch (w) {
    case KV_LIMIT_COPY: return true;
    case KV_LIMIT_READ:
    case KV_LIMIT_TRIAD:
    case KV_LIMIT_UPDATE: return KV_CPU_HAS("avx2");
    case KV_LIMIT_FMA256: return KV_CPU_HAS("avx2") && KV_CPU_HAS("fma");
    case KV_LIMIT_FMA512: return KV_CPU_HAS("avx512f");
    case KV_LIMIT_COUNT: break;
    }
    return false;
}

void kv_limit_run(kv_limit w, const kv_limit_arrays *s) {
    switch (w) {
    case KV_LIMIT_COPY: memcpy(s->c, s->a, (size_t)s->n * sizeof(float)); break;
#if KV_LIMITS_X86
    case KV_LIMIT_READ: run_read(s); break;
    case KV_LIMIT_TRIAD: run_triad(s); break;
    case KV_LIMIT_UPDATE: run_update(s); break;
    case KV_LIMIT_FMA256: run_fma256(); break;
    case KV_LIMIT_FMA512: run_fma512(); break;
#else
    case KV_LIMIT_READ:
    case KV_LIMIT_TRIAD:
    case KV_LIMIT_UPDATE:
    case KV_LIMIT_FMA256:
    case KV_LIMIT_FMA512: break; /* never supported here (kv_limit_supported) */
#endif
    case KV_LIMIT_COUNT: break;
    }
}

double kv_limit_work(kv_limit w, const kv_limit_arrays *s) {
    const double n = (double)s->n, fl256 = (double)FMA_ITERS * FMA_CHAINS * 8 * 2;
    switch (w) {
    case KV_LIMIT_COPY: return 8.0 * n;
    case KV_LIMIT_READ: return 4.0 * n;
    case KV_LIMIT_TRIAD:
    case KV_LIMIT_UPDATE: return 12.0 * n;
    case KV_LIMIT_FMA256: return fl256;
    case KV_LIMIT_FMA512: return 2.0 * fl256;
    case KV_LIMIT_COUNT: break;
    }
    return 0.0;
}

bool kv_limit_is_flops(kv_limit w) { return w == KV_LIMIT_FMA256 || w == KV_LIMIT_FMA512; }

const char *kv_limit_name(kv_limit w) {
    switch (w) {
    case KV_LIMIT_COPY: return "memcpy 64 MiB (read + write)";
    case KV_LIMIT_READ: return "read stream 64 MiB (AVX2 sum)";
    case KV_LIMIT_TRIAD: return "triad c = a + b, 3 x 64 MiB";
    case KV_LIMIT_UPDATE: return "update a += b in place, 2 x 64 MiB";
    case KV_LIMIT_FMA256: return "FMA peak, one core, AVX2 (256-bit)";
    case KV_LIMIT_FMA512: return "FMA peak, one core, AVX-512";
    case KV_LIMIT_COUNT: break;
    }
    return "?";
}

static double limits_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int limits_cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define KV_LIMITS_MAX_ROUNDS 15
#define KV_LIMITS_ROUND_NS 2e7 /* about 20 ms per timed round */

kv_status kv_limits_measure(int rounds, kv_limit_stat out[KV_LIMIT_COUNT]) {
    memset(out, 0, KV_LIMIT_COUNT * sizeof *out);
    if (rounds < 1) rounds = 1;
    if (rounds > KV_LIMITS_MAX_ROUNDS) rounds = KV_LIMITS_MAX_ROUNDS;
    kv_limit_arrays s;
    kv_status st = kv_limit_arrays_alloc(&s);
    if (st != KV_OK) return st;
    /* Calls per round: one untimed call warms the pages and the caches
     * and says how long a call takes. */
    long calls[KV_LIMIT_COUNT] = { 0 };
    for (int w = 0; w < KV_LIMIT_COUNT; w++) {
        if (!kv_limit_supported((kv_limit)w)) continue;
        const double t0 = limits_now_ns();
        kv_limit_run((kv_limit)w, &s);
        const double el = limits_now_ns() - t0;
        calls[w] = el > 0 && el < KV_LIMITS_ROUND_NS ? (long)(KV_LIMITS_ROUND_NS / el) : 1;
    }
    double rate[KV_LIMIT_COUNT][KV_LIMITS_MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int w = 0; w < KV_LIMIT_COUNT; w++) {
            if (calls[w] == 0) continue;
            const double t0 = limits_now_ns();
            for (long i = 0; i < calls[w]; i++) kv_limit_run((kv_limit)w, &s);
            const double el = limits_now_ns() - t0;
            rate[w][r] = el > 0 ? kv_limit_work((kv_limit)w, &s) * (double)calls[w] / el : 0.0;
        }
    for (int w = 0; w < KV_LIMIT_COUNT; w++) {
        if (calls[w] == 0) continue;
        qsort(rate[w], (size_t)rounds, sizeof rate[w][0], limits_cmp);
        out[w] = (kv_limit_stat){ true, rate[w][0],
                                  rounds % 2 ? rate[w][rounds / 2] : 0.5 * (rate[w][rounds / 2 - 1] + rate[w][rounds / 2]),
                                  rate[w][rounds - 1], rounds };
    }
    kv_limit_arrays_free(&s);
    return KV_OK;
}

void kv_limits_machine(char *buf, int cap) {
    char model[256] = "unknown CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (v == NULL) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        const size_t n = strcspn(v, "\n");
        snprintf(model, sizeof model, "%.*s", (int)(n < sizeof model ? n : sizeof model - 1), v);
        break;
    }
    if (f != NULL) fclose(f);
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(buf, (size_t)cap, "%s (%ld CPU%s online)", model, ncpu, ncpu == 1 ? "" : "s");
}
