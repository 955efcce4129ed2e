/* Optimized mm, bmm and addmm: a blocked, packed product (GotoBLAS's
 * loop order: panels of B of KC x NC, blocks of A of MC x KC, both packed
 * into micro-panels, then an MR x NR register tile per micro-kernel
 * call), with three micro-kernels:
 *   "blocked"  plain C (4 x 8), vectorized by the compiler for SSE2, no FMA;
 *   "avx2"     AVX2 + FMA intrinsics, 6 x 16 f32 / 6 x 8 f64;
 *   "avx512"   AVX-512F + FMA intrinsics, 12 x 32 f32 (its own driver,
 *              below) / 8 x 16 f64.
 * The SIMD kernels are FMA by design: each product is added without being
 * rounded first, which only lowers the error. Predicates ask the CPU.
 *
 * Numerics: each output is a dot product of length K accumulated in the
 * output dtype, in blocks of KC (ascending within a block, blocks added
 * in order): within gamma_K * sum|a||b|, inside the table's
 * gamma_{K+1} * sum|a||b| (Higham 3.5). With fill=exact every partial
 * sum is an exactly representable integer: bitwise. An output that comes
 * out Inf or NaN is recomputed the reference's way (f64, ascending k),
 * because an f32 partial sum can overflow where the reference's f64 one
 * does not. addmm applies beta*self + alpha*acc in f64, as the reference,
 * and never reads self when beta is 0.
 *
 * Scope: f32 and f64 with equal dtypes, any strides (packing reads
 * through them), empty dims; other dtypes and every error go to "ref". */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MM_X86 1
#endif
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"
#include "ref/ref_shared.h"

#define KC 256
#define MC 96
#define NC 2048
#define MAX_MR 8
#define MAX_NR 32

typedef struct mm_prob {
    kv_dtype dt;
    int64_t n, k, m;
    const char *a;
    int64_t as0, as1;
    const char *b;
    int64_t bs0, bs1;
    char *c; /* contiguous n x m */
} mm_prob;

/* A micro-kernel: t[MR x NR] = sum over p < kc of ap[p][i] * bp[p][j]. */
typedef void (*mm_uk_f32)(int64_t kc, const float *ap, const float *bp, float *t);
typedef void (*mm_uk_f64)(int64_t kc, const double *ap, const double *bp, double *t);

typedef struct mm_kernel {
    const char *name;
    int mr32, nr32, mr64, nr64;
    mm_uk_f32 f32;
    mm_uk_f64 f64;
} mm_kernel;

/* ---- micro-kernels ---- */

static void uk_generic_f32(int64_t kc, const float *ap, const float *bp, float *t) {
    float acc[4][8];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < kc; p++)
        for (int i = 0; i < 4; i++) {
            const float a = ap[p * 4 + i];
            for (int j = 0; j < 8; j++) acc[i][j] += a * bp[p * 8 + j];
        }
    memcpy(t, acc, sizeof acc);
}

static void uk_generic_f64(int64_t kc, const double *ap, const double *bp, double *t) {
    double acc[4][8];
    memset(acc, 0, sizeof acc);
    for (int64_t p = 0; p < kc; p++)
        for (int i = 0; i < 4; i++) {
            const double a = ap[p * 4 + i];
            for (int j = 0; j < 8; j++) acc[i][j] += a * bp[p * 8 + j];
        }
    memcpy(t, acc, sizeof acc);
}

#ifdef MM_X86
/* Every loop over the tile unrolled (init, k step, store): a rolled
 * store loop indexes the accumulator array, which then lives on the stack
 * and is stored back on every k step (the AVX2 kernel read 40 GFLOP/s of
 * 118, store-bound; unrolled, 105). */
__attribute__((target("avx2,fma"))) static void uk_avx2_f32(int64_t kc, const float *ap, const float *bp, float *t) {
    __m256 c[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) c[i][0] = c[i][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        const __m256 b0 = _mm256_loadu_ps(bp + p * 16), b1 = _mm256_loadu_ps(bp + p * 16 + 8);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            const __m256 a = _mm256_broadcast_ss(ap + p * 6 + i);
            c[i][0] = _mm256_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        _mm256_storeu_ps(t + i * 16, c[i][0]);
        _mm256_storeu_ps(t + i * 16 + 8, c[i][1]);
    }
}

__attribute__((target("avx2,fma"))) static void uk_avx2_f64(int64_t kc, const double *ap, const double *bp, double *t) {
    __m256d c[6][2];
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) c[i][0] = c[i][1] = _mm256_setzero_pd();
    for (int64_t p = 0; p < kc; p++) {
        const __m256d b0 = _mm256_loadu_pd(bp + p * 8), b1 = _mm256_loadu_pd(bp + p * 8 + 4);
#pragma GCC unroll 6
        for (int i = 0; i < 6; i++) {
            const __m256d a = _mm256_broadcast_sd(ap + p * 6 + i);
            c[i][0] = _mm256_fmadd_pd(a, b0, c[i][0]);
            c[i][1] = _mm256_fmadd_pd(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) {
        _mm256_storeu_pd(t + i * 8, c[i][0]);
        _mm256_storeu_pd(t + i * 8 + 4, c[i][1]);
    }
}

__attribute__((target("avx512f"))) static void uk_avx512_f32(int64_t kc, const float *ap, const float *bp, float *t) {
    __m512 c[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) c[i][0] = c[i][1] = _mm512_setzero_ps();
    for (int64_t p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_loadu_ps(bp + p * 32), b1 = _mm512_loadu_ps(bp + p * 32 + 16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m512 a = _mm512_set1_ps(ap[p * 8 + i]);
            c[i][0] = _mm512_fmadd_ps(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_ps(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        _mm512_storeu_ps(t + i * 32, c[i][0]);
        _mm512_storeu_ps(t + i * 32 + 16, c[i][1]);
    }
}

__attribute__((target("avx512f"))) static void uk_avx512_f64(int64_t kc, const double *ap, const double *bp, double *t) {
    __m512d c[8][2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) c[i][0] = c[i][1] = _mm512_setzero_pd();
    for (int64_t p = 0; p < kc; p++) {
        const __m512d b0 = _mm512_loadu_pd(bp + p * 16), b1 = _mm512_loadu_pd(bp + p * 16 + 8);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            const __m512d a = _mm512_set1_pd(ap[p * 8 + i]);
            c[i][0] = _mm512_fmadd_pd(a, b0, c[i][0]);
            c[i][1] = _mm512_fmadd_pd(a, b1, c[i][1]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        _mm512_storeu_pd(t + i * 16, c[i][0]);
        _mm512_storeu_pd(t + i * 16 + 8, c[i][1]);
    }
}

/* The f32 AVX-512 kernel: 12 x 32 (24 zmm accumulators, 2 for B, 1 for
 * the broadcast of A: 27 of 32 registers), each k step 24 FMAs for 2
 * loads of B and 12 broadcasts of A. On Zen 4 a 512-bit FMA is split
 * over the two 256-bit FMA pipes (one per cycle: the AVX2 and AVX-512
 * peaks are equal), so the shape only has to keep that pipe fed: 8 x 48,
 * 6 x 64 and 14 x 32 measured the same (109-114 GFLOP/s on panels in
 * L1, 0.93-0.96 of the peak, kc 128..512); the loss is the fixed cost of
 * a call (the C tile), which a longer kc spreads.
 *
 * It adds its tile straight into C: `first` stores instead of adding (the
 * first block of k). Edges run the same code at full speed instead of a
 * temporary tile and a scalar copy: `rows` < 12 is a copy compiled for
 * that row count (uk512_f32 below), columns past the edge are masked off
 * in C's loads and stores (the packed B is zero there). With `last` (the
 * last block of k) it also tells whether any value it stored is Inf or
 * NaN, tested in registers: the finite check mm_finish made in a second
 * pass over C (a twentieth of mm 512^3) costs nothing here. */
#define UK512_MR 12
#define UK512_NR 32
typedef enum uk512_step { UK512_FIRST = 1, UK512_LAST = 2 } uk512_step;

__attribute__((target("avx512f"), always_inline)) static inline bool uk512_body(int64_t kc, const float *ap,
                                                                                const float *bp, float *c, int64_t ldc,
                                                                                int step, const int rows,
                                                                                __mmask16 m0, __mmask16 m1) {
    __m512 acc[UK512_MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < rows; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    /* The C tile's lines (rows ldc apart, seldom in L1) are asked for now
     * and arrive while the k loop runs, not when it ends. */
    if (!(step & UK512_FIRST)) {
#pragma GCC unroll 12
        for (int i = 0; i < rows; i++) {
            _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
        }
    }
    for (int64_t p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_load_ps(bp + p * UK512_NR), b1 = _mm512_load_ps(bp + p * UK512_NR + 16);
#pragma GCC unroll 12
        for (int i = 0; i < rows; i++) {
            const __m512 a = _mm512_set1_ps(ap[p * UK512_MR + i]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    /* Inf and NaN: exponent bits all ones. */
    const __m512i expo = _mm512_set1_epi32(0x7f800000);
    __mmask16 bad = 0;
#pragma GCC unroll 12
    for (int i = 0; i < rows; i++) {
        float *row = c + i * ldc;
        if (!(step & UK512_FIRST)) {
            acc[i][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, row), acc[i][0]);
            acc[i][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, row + 16), acc[i][1]);
        }
        _mm512_mask_storeu_ps(row, m0, acc[i][0]);
        _mm512_mask_storeu_ps(row + 16, m1, acc[i][1]);
        if (step & UK512_LAST) {
            bad |= _mm512_mask_cmpeq_epi32_mask(m0, _mm512_and_si512(_mm512_castps_si512(acc[i][0]), expo), expo);
            bad |= _mm512_mask_cmpeq_epi32_mask(m1, _mm512_and_si512(_mm512_castps_si512(acc[i][1]), expo), expo);
        }
    }
    return bad != 0;
}

/* One copy of the kernel per row count (the full tile is the hot one),
 * so that each keeps its accumulators in registers; `cols` (1..32) the
 * columns that exist. Returns whether it stored an Inf or NaN (`last`). */
__attribute__((target("avx512f"))) static bool uk512_f32(int64_t kc, const float *ap, const float *bp, float *c,
                                                         int64_t ldc, int step, int64_t rows, int64_t cols) {
    const __mmask16 m0 = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? (__mmask16)0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    switch (rows) {
    case 12: return uk512_body(kc, ap, bp, c, ldc, step, 12, m0, m1);
    case 11: return uk512_body(kc, ap, bp, c, ldc, step, 11, m0, m1);
    case 10: return uk512_body(kc, ap, bp, c, ldc, step, 10, m0, m1);
    case 9: return uk512_body(kc, ap, bp, c, ldc, step, 9, m0, m1);
    case 8: return uk512_body(kc, ap, bp, c, ldc, step, 8, m0, m1);
    case 7: return uk512_body(kc, ap, bp, c, ldc, step, 7, m0, m1);
    case 6: return uk512_body(kc, ap, bp, c, ldc, step, 6, m0, m1);
    case 5: return uk512_body(kc, ap, bp, c, ldc, step, 5, m0, m1);
    case 4: return uk512_body(kc, ap, bp, c, ldc, step, 4, m0, m1);
    case 3: return uk512_body(kc, ap, bp, c, ldc, step, 3, m0, m1);
    case 2: return uk512_body(kc, ap, bp, c, ldc, step, 2, m0, m1);
    default: return uk512_body(kc, ap, bp, c, ldc, step, 1, m0, m1);
    }
}
#endif

static const mm_kernel k_blocked = { "blocked", 4, 8, 4, 8, uk_generic_f32, uk_generic_f64 };
#ifdef MM_X86
static const mm_kernel k_avx2 = { "avx2", 6, 16, 6, 8, uk_avx2_f32, uk_avx2_f64 };
static const mm_kernel k_avx512 = { "avx512", 8, 32, 8, 16, uk_avx512_f32, uk_avx512_f64 };
#else
/* Other ISAs (the aarch64 build of ninja cross-golden): the predicates
 * refuse these variants (no AVX), so they only need to exist. */
static const mm_kernel k_avx2 = { "avx2", 4, 8, 4, 8, uk_generic_f32, uk_generic_f64 };
static const mm_kernel k_avx512 = { "avx512", 4, 8, 4, 8, uk_generic_f32, uk_generic_f64 };
#endif

#ifdef MM_X86
/* ---- the f32 AVX-512 driver ----
 * GotoBLAS's (and BLIS's) loops, blocks sized for this core (Zen 4: 32 KiB
 * L1D, 1 MiB L2 per core, L3 shared):
 *   KC 512: k in one block up to 512 (equal blocks above), so at 512^3
 *     each C tile is written once, with plain stores: no loads of C, no
 *     second pass. KC 128..160 (both micro-panels in L1) loaded and
 *     stored C 3 to 4 times: KC 160 measured 92-96 GFLOP/s, KC 256
 *     98-103, KC 384 and 512 101-108 (best of 60 to 100 single calls,
 *     configurations interleaved in one process). The KC x 32
 *     micro-panel of B (64 KiB) and A's micro-panels then stream from
 *     L2, 176 bytes per k step of 24 FMA cycles, which L2 and the
 *     hardware prefetchers keep up with: the kernel over a packed 240-row
 *     block reads 112-117 GFLOP/s, 0.95 to 1.0 of the peak, and software
 *     prefetches of A and B 8 to 32 steps ahead measured no gain.
 *   MC 240: the A block (MC x KC = 240 x 512 x 4 = 480 KiB) stays in L2
 *     beside the B micro-panel while the kernel walks its 20 row tiles
 *     (MC 96..240 measured within noise of each other).
 *   NC 1536: the packed B panel (KC x NC, up to 3 MiB) sits in L3; for
 *     k <= 512 and m <= 1536 B is packed once per call.
 * Packed buffers are 64-byte aligned (the kernel's B loads are aligned)
 * and packing copies rows with unit stride when the operand has it. What
 * is left of the gap to the peak at 512^3 is packing (about 2%) and the
 * first reads of each B micro-panel from L3. Summation per output: blocks
 * of k ascending, each ascending in k (the file comment's bound holds). */
#define KC512 512
#define MC512 240
#define NC512 1536

__attribute__((target("avx512f"))) static void pack_b512(const float *B, int64_t bs0, int64_t bs1, int64_t pc,
                                                         int64_t kc, int64_t jc, int64_t nc, float *bp) {
    for (int64_t js = 0; js < nc; js += UK512_NR) {
        float *dst = bp + js * kc;
        const int64_t w = nc - js < UK512_NR ? nc - js : UK512_NR;
        for (int64_t p = 0; p < kc; p++) {
            const float *src = B + (pc + p) * bs0 + (jc + js) * bs1;
            float *d = dst + p * UK512_NR;
            if (bs1 == 1 && w == UK512_NR) {
                _mm512_store_ps(d, _mm512_loadu_ps(src));
                _mm512_store_ps(d + 16, _mm512_loadu_ps(src + 16));
            } else {
                for (int64_t j = 0; j < UK512_NR; j++) d[j] = j < w ? src[j * bs1] : 0.0f;
            }
        }
    }
}

/* A full micro-panel of a row-major A: 4 x 4 blocks transposed in SSE
 * registers (three per 4 steps of k), where element by element the
 * packing cost a tenth of the whole product at 512^3. Moves bits only. */
static void pack_a512_rows(const float *src, int64_t as0, int64_t kc, float *dst) {
    int64_t p = 0;
    for (; p + 4 <= kc; p += 4) {
        for (int g = 0; g < UK512_MR / 4; g++) {
            const float *s = src + 4 * g * as0 + p;
            __m128 r0 = _mm_loadu_ps(s), r1 = _mm_loadu_ps(s + as0), r2 = _mm_loadu_ps(s + 2 * as0),
                   r3 = _mm_loadu_ps(s + 3 * as0);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            float *d = dst + p * UK512_MR + 4 * g;
            _mm_storeu_ps(d, r0);
            _mm_storeu_ps(d + UK512_MR, r1);
            _mm_storeu_ps(d + 2 * UK512_MR, r2);
            _mm_storeu_ps(d + 3 * UK512_MR, r3);
        }
    }
    for (; p < kc; p++)
        for (int64_t i = 0; i < UK512_MR; i++) dst[p * UK512_MR + i] = src[i * as0 + p];
}

static void pack_a512(const float *A, int64_t as0, int64_t as1, int64_t ic, int64_t mc, int64_t pc, int64_t kc,
                      float *ap) {
    for (int64_t is = 0; is < mc; is += UK512_MR) {
        float *dst = ap + is * kc;
        const int64_t h = mc - is < UK512_MR ? mc - is : UK512_MR;
        if (as1 == 1 && h == UK512_MR) {
            pack_a512_rows(A + (ic + is) * as0 + pc, as0, kc, dst);
            continue;
        }
        /* Row by row: reads run along A's rows (unit stride for a
         * row-major A), writes land every MR floats in a block that fits
         * in L1. */
        for (int64_t i = 0; i < UK512_MR; i++) {
            if (i >= h) {
                for (int64_t p = 0; p < kc; p++) dst[p * UK512_MR + i] = 0.0f;
                continue;
            }
            const float *src = A + (ic + is + i) * as0 + pc * as1;
            if (as1 == 1)
                for (int64_t p = 0; p < kc; p++) dst[p * UK512_MR + i] = src[p];
            else
                for (int64_t p = 0; p < kc; p++) dst[p * UK512_MR + i] = src[p * as1];
        }
    }
}

/* False when out of memory; *finite says whether every output is finite
 * (then mm_finish has nothing to recompute). */
static bool mm_avx512_f32(const mm_prob *pr, bool *finite) {
    const float *A = (const float *)pr->a, *B = (const float *)pr->b;
    float *C = (float *)pr->c;
    const int64_t n = pr->n, k = pr->k, m = pr->m;
    /* k in equal blocks of at most KC512 (1100 = 3 x 367, not 2 x 512 +
     * 76): a short last block pays the C tile's loads and stores for few
     * FMAs. */
    const int64_t kcb = k > 0 ? (k + (k + KC512 - 1) / KC512 - 1) / ((k + KC512 - 1) / KC512) : KC512;
    /* The packed panels as large as this problem needs, not the blocking's
     * maxima: those are 580 KB, above glibc's initial mmap threshold, which
     * a small product has no reason to pay for on each call. */
    const int64_t nc_max = NC512 < m ? NC512 : m, mc_max = MC512 < n ? MC512 : n, kc_max = k > 0 ? kcb : 1;
    const size_t bbytes = sizeof(float) * (size_t)kc_max * (size_t)((nc_max + UK512_NR - 1) / UK512_NR * UK512_NR);
    const size_t abytes = sizeof(float) * (size_t)kc_max * (size_t)((mc_max + UK512_MR - 1) / UK512_MR * UK512_MR);
    float *bp = aligned_alloc(64, (bbytes + 63) & ~(size_t)63);
    float *ap = aligned_alloc(64, (abytes + 63) & ~(size_t)63);
    if (bp == NULL || ap == NULL) {
        free(bp);
        free(ap);
        return false;
    }
    bool bad = false;
    for (int64_t jc = 0; jc < m; jc += NC512) {
        const int64_t nc = m - jc < NC512 ? m - jc : NC512;
        for (int64_t pc = 0; pc < k; pc += kcb) {
            const int64_t kc = k - pc < kcb ? k - pc : kcb;
            const int step = (pc == 0 ? UK512_FIRST : 0) | (pc + kc == k ? UK512_LAST : 0);
            pack_b512(B, pr->bs0, pr->bs1, pc, kc, jc, nc, bp);
            for (int64_t ic = 0; ic < n; ic += MC512) {
                const int64_t mc = n - ic < MC512 ? n - ic : MC512;
                pack_a512(A, pr->as0, pr->as1, ic, mc, pc, kc, ap);
                for (int64_t js = 0; js < nc; js += UK512_NR) {
                    const int64_t cj = nc - js < UK512_NR ? nc - js : UK512_NR;
                    for (int64_t is = 0; is < mc; is += UK512_MR) {
                        const int64_t ri = mc - is < UK512_MR ? mc - is : UK512_MR;
                        bad |= uk512_f32(kc, ap + is * kc, bp + js * kc, C + (ic + is) * m + jc + js, m, step, ri, cj);
                    }
                }
            }
        }
    }
    if (k == 0)
        for (int64_t i = 0; i < n * m; i++) C[i] = 0.0f;
    free(bp);
    free(ap);
    *finite = !bad;
    return true;
}

#endif

/* ---- the blocked driver, once per element type ---- */

#define MM_DRIVER(T, SFX)                                                                          \
    static bool mm_blocked_##SFX(const mm_prob *pr, int mr, int nr,                                \
                                 void (*uk)(int64_t, const T *, const T *, T *)) {                 \
        const T *A = (const T *)pr->a, *B = (const T *)pr->b;                                      \
        T *C = (T *)pr->c;                                                                         \
        const int64_t n = pr->n, k = pr->k, m = pr->m;                                             \
        const int64_t nc_max = NC < m ? NC : m;                                                    \
        T *bp = malloc(sizeof(T) * (size_t)KC * (size_t)((nc_max + nr - 1) / nr * nr));            \
        T *ap = malloc(sizeof(T) * (size_t)KC * (size_t)((MC + mr - 1) / mr * mr));                \
        if (bp == NULL || ap == NULL) {                                                            \
            free(bp);                                                                              \
            free(ap);                                                                              \
            return false;                                                                          \
        }                                                                                          \
        T tile[MAX_MR * MAX_NR];                                                                   \
        for (int64_t jc = 0; jc < m; jc += NC) {                                                   \
            const int64_t nc = m - jc < NC ? m - jc : NC;                                          \
            for (int64_t pc = 0; pc < k; pc += KC) {                                               \
                const int64_t kc = k - pc < KC ? k - pc : KC;                                      \
                for (int64_t js = 0; js < nc; js += nr) {                                          \
                    T *dst = bp + js * kc;                                                         \
                    for (int64_t p = 0; p < kc; p++)                                               \
                        for (int jj = 0; jj < nr; jj++) {                                          \
                            const int64_t col = jc + js + jj;                                      \
                            dst[p * nr + jj] = col < jc + nc ? B[(pc + p) * pr->bs0 + col * pr->bs1] : (T)0; \
                        }                                                                          \
                }                                                                                  \
                for (int64_t ic = 0; ic < n; ic += MC) {                                           \
                    const int64_t mcur = n - ic < MC ? n - ic : MC;                                \
                    for (int64_t is = 0; is < mcur; is += mr) {                                    \
                        T *dst = ap + is * kc;                                                     \
                        for (int64_t p = 0; p < kc; p++)                                           \
                            for (int ii = 0; ii < mr; ii++) {                                      \
                                const int64_t row = ic + is + ii;                                  \
                                dst[p * mr + ii] = row < ic + mcur ? A[row * pr->as0 + (pc + p) * pr->as1] : (T)0; \
                            }                                                                      \
                    }                                                                              \
                    for (int64_t js = 0; js < nc; js += nr) {                                      \
                        for (int64_t is = 0; is < mcur; is += mr) {                                \
                            uk(kc, ap + is * kc, bp + js * kc, tile);                              \
                            const int64_t ri = mcur - is < mr ? mcur - is : mr;                    \
                            const int64_t cj = nc - js < nr ? nc - js : nr;                        \
                            for (int64_t i = 0; i < ri; i++) {                                     \
                                T *crow = C + (ic + is + i) * m + jc + js;                         \
                                const T *trow = tile + i * nr;                                     \
                                if (pc == 0)                                                       \
                                    for (int64_t j = 0; j < cj; j++) crow[j] = trow[j];            \
                                else                                                               \
                                    for (int64_t j = 0; j < cj; j++) crow[j] += trow[j];           \
                            }                                                                      \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (k == 0)                                                                                \
            for (int64_t i = 0; i < n * m; i++) C[i] = (T)0;                                       \
        free(bp);                                                                                  \
        free(ap);                                                                                  \
        return true;                                                                               \
    }
MM_DRIVER(float, f32)
MM_DRIVER(double, f64)

/* The reference's computation of one output: f64, k ascending, and for
 * f64 a sum that comes out Inf or NaN recomputed as the reference does
 * (kv_ref_dot_f64_rescued). */
static double mm_ref_dot(const mm_prob *pr, int64_t i, int64_t j) {
    double acc = 0.0;
    if (pr->dt == KV_F32) {
        const float *A = (const float *)pr->a, *B = (const float *)pr->b;
        for (int64_t p = 0; p < pr->k; p++) acc += (double)A[i * pr->as0 + p * pr->as1] * (double)B[p * pr->bs0 + j * pr->bs1];
    } else {
        const double *A = (const double *)pr->a, *B = (const double *)pr->b;
        for (int64_t p = 0; p < pr->k; p++) acc += A[i * pr->as0 + p * pr->as1] * B[p * pr->bs0 + j * pr->bs1];
        if (!isfinite(acc)) acc = kv_ref_dot_f64_rescued(A + i * pr->as0, pr->as1, B + j * pr->bs1, pr->bs0, pr->k);
    }
    return acc;
}

/* acc (n x m) into out, in place: out = beta*self + alpha*acc, or the
 * plain product; non-finite f32 outputs are recomputed (file comment). */
typedef struct mm_epilogue {
    bool scale;
    double alpha, beta;
    bool use_self;
    const char *self;
    int64_t ss0, ss1;
} mm_epilogue;

/* Whether row i of the product holds only finite values. Bit tests the
 * compiler vectorizes: for the plain product this pass is all mm_finish
 * does, and a branch per element made it a tenth of mm at 512^3. */
static bool mm_row_finite(const mm_prob *pr, int64_t i) {
    /* The exponent field plus one carries into the sign bit exactly when
     * it is all ones (Inf, NaN): plain arithmetic, no compare. */
    const int64_t m = pr->m;
    if (pr->dt == KV_F32) {
        const float *r = (const float *)pr->c + i * m;
        uint32_t bad = 0;
        for (int64_t j = 0; j < m; j++) {
            uint32_t u;
            memcpy(&u, &r[j], sizeof u);
            bad |= (u & 0x7f800000u) + 0x00800000u;
        }
        return (bad & 0x80000000u) == 0;
    }
    const double *r = (const double *)pr->c + i * m;
    uint64_t bad = 0;
    for (int64_t j = 0; j < m; j++) {
        uint64_t u;
        memcpy(&u, &r[j], sizeof u);
        bad |= (u & 0x7ff0000000000000u) + 0x0010000000000000u;
    }
    return (bad & 0x8000000000000000u) == 0;
}

static void mm_finish(const mm_prob *pr, const mm_epilogue *ep) {
    const int64_t n = pr->n, m = pr->m;
    for (int64_t i = 0; i < n; i++) {
        if (!ep->scale && mm_row_finite(pr, i)) continue; /* nothing to recompute or scale */
        for (int64_t j = 0; j < m; j++) {
            double v;
            if (pr->dt == KV_F32) {
                float *c = (float *)pr->c + i * m + j;
                if (isfinite(*c) && !ep->scale) continue;
                v = isfinite(*c) ? (double)*c : mm_ref_dot(pr, i, j);
            } else {
                v = ((double *)pr->c)[i * m + j];
                if (isfinite(v) && !ep->scale) continue;
                if (!isfinite(v)) v = mm_ref_dot(pr, i, j);
            }
            if (ep->scale) {
                v = ep->alpha * v;
                if (ep->use_self) {
                    const int64_t off = i * ep->ss0 + j * ep->ss1;
                    const double s = pr->dt == KV_F32 ? (double)((const float *)ep->self)[off]
                                                      : ((const double *)ep->self)[off];
                    v = ep->beta * s + v;
                }
            }
            if (pr->dt == KV_F32) ((float *)pr->c)[i * m + j] = (float)v;
            else ((double *)pr->c)[i * m + j] = v;
        }
    }
}

static bool mm_run(const mm_prob *pr, const mm_kernel *kn, const mm_epilogue *ep) {
    bool finite = false; /* unknown: mm_finish looks */
    if (pr->n > 0 && pr->m > 0) {
#ifdef MM_X86
        const bool ok = pr->dt == KV_F32 ? (kn == &k_avx512 ? mm_avx512_f32(pr, &finite)
                                                            : mm_blocked_f32(pr, kn->mr32, kn->nr32, kn->f32))
                                         : mm_blocked_f64(pr, kn->mr64, kn->nr64, kn->f64);
#else
        const bool ok = pr->dt == KV_F32 ? mm_blocked_f32(pr, kn->mr32, kn->nr32, kn->f32)
                                         : mm_blocked_f64(pr, kn->mr64, kn->nr64, kn->f64);
#endif
        if (!ok) return false;
    }
    if (!finite || ep->scale) mm_finish(pr, ep);
    return true;
}

/* ---- analysis ---- */

static bool mm_operand(const kv_stack *s, int i, int ndim, const kv_tensor **out) {
    if (i >= s->size || s->slots[i].tag != KV_IV_TENSOR) return false;
    const kv_tensor *t = s->slots[i].v.tensor;
    if (!kv_cpu_plain(t) || t->ndim != ndim || (t->dtype != KV_F32 && t->dtype != KV_F64)) return false;
    *out = t;
    return true;
}

/* addmm's scalars: real (a complex value is the reference's business). */
static bool mm_real_scalar(const kv_stack *s, int i, double *out) {
    if (i >= s->size || s->slots[i].tag != KV_IV_SCALAR) return false;
    const kv_scalar v = s->slots[i].v.scalar;
    if (v.kind == KV_SCALAR_COMPLEX) return false;
    *out = kv_scalar_to_double(v);
    return true;
}

typedef struct mm_call {
    int id;
    const kv_tensor *a, *b, *self;
    int64_t ss[2];
    double alpha, beta;
} mm_call;

static bool mm_analyze(const kv_op *op, const kv_stack *s, mm_call *c) {
    memset(c, 0, sizeof *c);
    c->id = kv_op_builtin_id(op);
    switch (c->id) {
    case KV_OP_MM:
        if (!mm_operand(s, 0, 2, &c->a) || !mm_operand(s, 1, 2, &c->b)) return false;
        return c->a->dtype == c->b->dtype && c->a->sizes[1] == c->b->sizes[0];
    case KV_OP_BMM:
        if (!mm_operand(s, 0, 3, &c->a) || !mm_operand(s, 1, 3, &c->b)) return false;
        return c->a->dtype == c->b->dtype && c->a->sizes[0] == c->b->sizes[0] && c->a->sizes[2] == c->b->sizes[1];
    case KV_OP_ADDMM: {
        if (!mm_operand(s, 1, 2, &c->a) || !mm_operand(s, 2, 2, &c->b)) return false;
        if (s->slots[0].tag != KV_IV_TENSOR) return false;
        c->self = s->slots[0].v.tensor;
        if (!kv_cpu_plain(c->self) || c->self->dtype != c->a->dtype || c->a->dtype != c->b->dtype) return false;
        if (c->a->sizes[1] != c->b->sizes[0]) return false;
        if (!kv_ref_addmm_self_strides(c->self, c->a->sizes[0], c->b->sizes[1], c->ss)) return false;
        return mm_real_scalar(s, 3, &c->beta) && mm_real_scalar(s, 4, &c->alpha);
    }
    default: return false;
    }
}

static bool mm_pred(const kv_op *op, const kv_stack *s) {
    mm_call c;
    return mm_analyze(op, s, &c);
}

bool kv_cpu_mm_blocked_pred(const kv_op *op, const kv_stack *s) { return mm_pred(op, s); }
bool kv_cpu_mm_avx2_pred(const kv_op *op, const kv_stack *s) { return kv_cpu_has(KV_CPU_ISA_AVX2) && mm_pred(op, s); }
bool kv_cpu_mm_avx512_pred(const kv_op *op, const kv_stack *s) { return kv_cpu_has(KV_CPU_ISA_AVX512) && mm_pred(op, s); }

static kv_status mm_kernel_run(const kv_op *op, kv_stack *stack, const mm_kernel *kn) {
    mm_call c;
    if (!mm_analyze(op, stack, &c))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the %s matmul variant does not cover this call", kv_op_name(op), kn->name);
    const kv_dtype dt = c.a->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    kv_tensor *out;
    mm_epilogue ep = { false, 1.0, 0.0, false, NULL, 0, 0 };
    if (c.id == KV_OP_BMM) {
        const int64_t sizes[3] = { c.a->sizes[0], c.a->sizes[1], c.b->sizes[2] };
        out = kv_cpu_new(sizes, 3, dt);
        if (out == NULL) return kv_last_error();
        for (int64_t bi = 0; bi < sizes[0]; bi++) {
            const mm_prob pr = { dt, sizes[1], c.a->sizes[2], sizes[2],
                                 (const char *)kv_tensor_data(c.a) + bi * c.a->strides[0] * es, c.a->strides[1],
                                 c.a->strides[2],
                                 (const char *)kv_tensor_data(c.b) + bi * c.b->strides[0] * es, c.b->strides[1],
                                 c.b->strides[2], (char *)kv_tensor_data(out) + bi * sizes[1] * sizes[2] * es };
            if (!mm_run(&pr, kn, &ep)) goto oom;
        }
    } else {
        const int64_t sizes[2] = { c.a->sizes[0], c.b->sizes[1] };
        out = kv_cpu_new(sizes, 2, dt);
        if (out == NULL) return kv_last_error();
        if (c.id == KV_OP_ADDMM) {
            ep = (mm_epilogue){ true, c.alpha, c.beta, c.beta != 0.0, kv_tensor_data(c.self), c.ss[0], c.ss[1] };
        }
        const mm_prob pr = { dt, sizes[0], c.a->sizes[1], sizes[1], kv_tensor_data(c.a), c.a->strides[0],
                             c.a->strides[1], kv_tensor_data(c.b), c.b->strides[0], c.b->strides[1],
                             kv_tensor_data(out) };
        if (!mm_run(&pr, kn, &ep)) goto oom;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
oom:
    kv_tensor_release(out);
    return kv_error(KV_ERR_OOM, "%s: no memory for the packed panels", kv_op_name(op));
}

kv_status kv_cpu_mm_blocked_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return mm_kernel_run(op, stack, &k_blocked);
}

kv_status kv_cpu_mm_avx2_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return mm_kernel_run(op, stack, &k_avx2);
}

kv_status kv_cpu_mm_avx512_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return mm_kernel_run(op, stack, &k_avx512);
}
