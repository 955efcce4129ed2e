/* mmparts: where the time of mm f32 512^3 (AVX-512 variant) goes, part
 * by part, against the one-core FMA peak measured in the same rounds.
 *
 *   build/bench/mmparts [--rounds=N]    (built by `ninja bench-build`)
 *
 * The parts are static functions of kernels/cpu/cpu_matmul.c, so this
 * program compiles that file into itself (its kernels, registered by
 * kv_init, are then this copy: the same source). Every figure is the
 * best of N samples, the cases interleaved round by round: other
 * processes only ever add time, so the fastest sample is the one they
 * touched least, and each part reads as a fraction of the fastest FMA
 * peak call of the same rounds. Timings live here, never in unit tests. */
#include "cpu/cpu_matmul.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/kv.h"
#include "kvb.h"
#include "runner/exec/limits.h"

#ifdef MM_X86
#define MP_N 512
#define MP_MAX_ROUNDS 1000

typedef struct mp_data {
    kv_tensor *a, *b;           /* MP_N x MP_N, for the typed call */
    float *c;                   /* MP_N x MP_N product */
    float *ap, *bp;             /* packed A block and B panel (the driver's sizes) */
    float *l1a, *l1b, *l1c;     /* small panels for the kernel in L1 */
    mm_prob pr;
    kv_limit_arrays none;       /* the FMA limit reads no arrays */
} mp_data;

static mp_data g;

static void p_peak(void) { kv_limit_run(KV_LIMIT_FMA512, &g.none); }
/* The kernel alone, panels in L1, one full 12 x 32 tile: with kc 128 the
 * C tile is loaded and added (a middle block); with kc 512 only stored. */
static void p_uk_l1_128(void) { (void)uk512_f32(128, g.l1a, g.l1b, g.l1c, UK512_NR, UK512_LAST, 12, 32); }
static void p_uk_l1_512(void) {
    (void)uk512_f32(512, g.l1a, g.l1b, g.l1c, UK512_NR, UK512_FIRST | UK512_LAST, 12, 32);
}
/* The kernel over one packed 240-row block and the whole B panel (L2). */
static void p_uk_block(void) {
    for (int64_t js = 0; js < MP_N; js += UK512_NR)
        for (int64_t is = 0; is < MC512; is += UK512_MR)
            (void)uk512_f32(MP_N, g.ap + is * MP_N, g.bp + js * MP_N, g.c + is * MP_N + js, MP_N,
                            UK512_FIRST | UK512_LAST, UK512_MR, UK512_NR);
}
static void p_pack_b(void) { pack_b512((const float *)g.pr.b, MP_N, 1, 0, MP_N, 0, MP_N, g.bp); }
static void p_pack_a(void) { pack_a512((const float *)g.pr.a, MP_N, 1, 0, MC512, 0, MP_N, g.ap); }
static void p_driver(void) {
    bool finite;
    (void)mm_avx512_f32(&g.pr, &finite);
}
/* The separate finite pass the kernel's in-register check replaced (the
 * other variants still make it). */
static void p_finish(void) {
    const mm_epilogue ep = { false, 1.0, 0.0, false, NULL, 0, 0 };
    mm_finish(&g.pr, &ep);
}
static void p_typed(void) { kv_tensor_release(kv_mm(g.a, g.b)); }
static void p_avx2(void) {
    const mm_epilogue ep = { false, 1.0, 0.0, false, NULL, 0, 0 };
    (void)mm_blocked_f32(&g.pr, k_avx2.mr32, k_avx2.nr32, k_avx2.f32);
    mm_finish(&g.pr, &ep);
}

typedef struct mp_case {
    const char *name;
    void (*run)(void);
    double flops; /* 0: a part without FMAs, printed in microseconds only */
    long reps;    /* calls per timed sample: a sample lasts at least MP_SAMPLE_NS */
    double best_ns;
} mp_case;

/* A part of a few microseconds is timed over repeated calls (its panels
 * in cache, as they are inside the product): alone, its first call
 * after another case mostly measures cache misses and the clock. */
#define MP_SAMPLE_NS 5e5

static double mp_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static float *mp_floats(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    if (p == NULL) return NULL;
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 7919) % 1000) * 0.001f - 0.5f;
    return p;
}

int main(int argc, char **argv) {
    int rounds = 100;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--rounds=", 9) == 0 && atoi(argv[i] + 9) > 0 && atoi(argv[i] + 9) <= MP_MAX_ROUNDS) {
            rounds = atoi(argv[i] + 9);
        } else {
            fprintf(stderr, "usage: mmparts [--rounds=N (1..%d)]\n", MP_MAX_ROUNDS);
            return 2;
        }
    }
    if (!kv_limit_supported(KV_LIMIT_FMA512)) {
        printf("mmparts: this CPU has no AVX-512; nothing to measure\n");
        return 0;
    }
    if (kv_init() != KV_OK) {
        fprintf(stderr, "mmparts: %s\n", kv_last_error_message());
        return 1;
    }
    const int64_t sz[2] = { MP_N, MP_N };
    g.a = kv_tensor_empty(sz, 2, KV_F32, KV_DEVICE_CPU0);
    g.b = kv_tensor_empty(sz, 2, KV_F32, KV_DEVICE_CPU0);
    g.c = mp_floats(MP_N * MP_N);
    g.ap = mp_floats((size_t)MC512 * MP_N);
    g.bp = mp_floats((size_t)MP_N * MP_N);
    g.l1a = mp_floats(UK512_MR * 512);
    g.l1b = mp_floats(UK512_NR * 512);
    g.l1c = mp_floats(UK512_MR * UK512_NR);
    if (!g.a || !g.b || !g.c || !g.ap || !g.bp || !g.l1a || !g.l1b || !g.l1c) {
        fprintf(stderr, "mmparts: out of memory\n");
        return 1;
    }
    float *pa = kv_tensor_data(g.a), *pb = kv_tensor_data(g.b);
    for (int64_t i = 0; i < MP_N * MP_N; i++) pa[i] = pb[i] = (float)((i * 7919) % 1000) * 0.001f - 0.5f;
    g.pr = (mm_prob){ KV_F32, MP_N, MP_N, MP_N, (const char *)pa, MP_N, 1, (const char *)pb, MP_N, 1, (char *)g.c };
    p_pack_a();
    p_pack_b();

    const double n3 = 2.0 * MP_N * MP_N * MP_N;
    mp_case cs[] = {
        { "FMA peak, one core, AVX-512 (the limit)", p_peak, kv_limit_work(KV_LIMIT_FMA512, &g.none), 0, 0 },
        { "kernel 12x32 alone, L1, kc 128, adds into C", p_uk_l1_128, 2.0 * 12 * 32 * 128, 0, 0 },
        { "kernel 12x32 alone, L1, kc 512, stores C", p_uk_l1_512, 2.0 * 12 * 32 * 512, 0, 0 },
        { "kernel over a packed 240-row block (L2)", p_uk_block, 2.0 * MC512 * MP_N * MP_N, 0, 0 },
        { "pack B 512 x 512 (once per mm)", p_pack_b, 0, 0, 0 },
        { "pack A 240 x 512 (512/240 times per mm)", p_pack_a, 0, 0, 0 },
        { "driver, mm 512^3 (packing included)", p_driver, n3, 0, 0 },
        { "kv_mm 512^3, typed API (dispatch, output)", p_typed, n3, 0, 0 },
        { "separate finite pass over C (replaced)", p_finish, 0, 0, 0 },
        { "avx2 variant 512^3 (6x16 blocked + pass)", p_avx2, n3, 0, 0 },
    };
    const int nc = (int)(sizeof cs / sizeof cs[0]);
    for (int i = 0; i < nc; i++) {
        cs[i].run(); /* warm: pages, caches, the tuner */
        const double t0 = mp_now_ns();
        cs[i].run();
        const double el = mp_now_ns() - t0;
        cs[i].reps = el >= MP_SAMPLE_NS ? 1 : (long)(MP_SAMPLE_NS / (el > 1.0 ? el : 1.0)) + 1;
        cs[i].best_ns = 1e300;
    }
    kvb_print_loadavg("before");
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < nc; i++) {
            const double t0 = mp_now_ns();
            for (long k = 0; k < cs[i].reps; k++) cs[i].run();
            const double el = (mp_now_ns() - t0) / (double)cs[i].reps;
            if (el < cs[i].best_ns) cs[i].best_ns = el;
        }
    kvb_print_loadavg("after");
    const double peak = cs[0].flops / cs[0].best_ns;
    printf("mm f32 %d^3, AVX-512 variant, by part: best of %d samples (calls of at least %.1f ms), interleaved\n",
           MP_N, rounds, MP_SAMPLE_NS / 1e6);
    printf("  %-46s %10s %9s %9s\n", "", "us", "GFLOP/s", "of peak");
    for (int i = 0; i < nc; i++) {
        if (cs[i].flops > 0)
            printf("  %-46s %10.1f %9.1f %9.2f\n", cs[i].name, cs[i].best_ns / 1e3, cs[i].flops / cs[i].best_ns,
                   cs[i].flops / cs[i].best_ns / peak);
        else
            printf("  %-46s %10.1f\n", cs[i].name, cs[i].best_ns / 1e3);
    }
    kv_tensor_release(g.a);
    kv_tensor_release(g.b);
    free(g.c);
    free(g.ap);
    free(g.bp);
    free(g.l1a);
    free(g.l1b);
    free(g.l1c);
    return 0;
}
#else
int main(void) {
    printf("mmparts: the AVX-512 kernel exists on x86 only; nothing to measure\n");
    return 0;
}
#endif
