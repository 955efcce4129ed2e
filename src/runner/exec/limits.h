/* The machine's own limits, measured by code of our own, so that kernel
 * figures read as fractions of what this machine can do, not of a
 * datasheet: memory streams (read, triad, in-place update, memcpy) over
 * arrays far larger than the caches, and the one-core FMA peak from
 * independent FMA chains in registers. One place for both users: kvbench
 * (bench/kvb_limits.c, `ninja bench`) times them interleaved with its own
 * cases; kvrun --mode=perf (perf.c) measures them once per run for the
 * roofline of perf.html. */
#ifndef KV_RUNNER_LIMITS_H
#define KV_RUNNER_LIMITS_H

#include <stdbool.h>

#include "kv/status.h"

typedef enum kv_limit {
    KV_LIMIT_COPY,     /* memcpy 64 MiB, counted as read + write */
    KV_LIMIT_READ,     /* sum of a 64 MiB f32 array, AVX2, 4 accumulators */
    KV_LIMIT_TRIAD,    /* c = a + b over 3 x 64 MiB, 12 bytes per element */
    KV_LIMIT_UPDATE,   /* a += b in place, 12 bytes per element (no read-for-ownership) */
    KV_LIMIT_FMA256,   /* one core: 12 independent AVX2 FMA chains */
    KV_LIMIT_FMA512,   /* the same with AVX-512 */
    KV_LIMIT_COUNT
} kv_limit;

/* The stream arrays: 16 Mi floats (64 MiB) each, far above any L3. */
#define KV_LIMIT_STREAM_N (16L << 20)
typedef struct kv_limit_arrays {
    float *a, *b, *c;
    long n;
} kv_limit_arrays;

/* Allocates and zeroes the arrays (a += c keeps a). */
kv_status kv_limit_arrays_alloc(kv_limit_arrays *s);
void kv_limit_arrays_free(kv_limit_arrays *s);

/* Whether this CPU can run it (AVX2+FMA, AVX-512F). */
bool kv_limit_supported(kv_limit w);
/* One call (a stream pass, or 1000 rounds of the FMA chains). */
void kv_limit_run(kv_limit w, const kv_limit_arrays *s);
/* Bytes (streams) or FLOPs (FMA) one call does. */
double kv_limit_work(kv_limit w, const kv_limit_arrays *s);
bool kv_limit_is_flops(kv_limit w);
/* "read stream 64 MiB (AVX2 sum)", ... */
const char *kv_limit_name(kv_limit w);

/* A limit measured in `rounds` timed rounds of about 20 ms each: GB/s or
 * GFLOP/s of the slowest, median and fastest round. */
typedef struct kv_limit_stat {
    bool measured;
    double min, median, max;
    int rounds;
} kv_limit_stat;
/* Measures every supported limit, rounds interleaved (round r times each
 * limit once), so a noisy second hurts all a little, not one a lot. */
kv_status kv_limits_measure(int rounds, kv_limit_stat out[KV_LIMIT_COUNT]);

/* The CPU's model name (/proc/cpuinfo) and online CPUs, for a report
 * header: "Intel(R) Xeon(R) ... (2 CPUs online)". */
void kv_limits_machine(char *buf, int cap);

#endif
