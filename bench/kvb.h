/* kvbench: the one benchmark program behind `ninja bench`.
 *
 * Every figure comes from interleaved rounds: round r times case 0, then
 * case 1, ... then round r+1 starts over. On a shared 2-core machine a
 * noisy second hurts every case of a round a little instead of one case a
 * lot, so ratios of medians taken in one process are what to read. */
#ifndef KVB_H
#define KVB_H

#include <stdbool.h>
#include <stddef.h>

#define KVB_MAX_ROUNDS 15

typedef struct kvb_case {
    const char *name;
    /* Called around each timed loop, outside the clock: path switches. */
    void (*enter)(void *ctx);
    void (*leave)(void *ctx);
    void (*run)(void *ctx); /* one call */
    void *ctx;
    double work;            /* units per call (bytes, flops); 0 for per-call cases */
    long iters;             /* calls per timed loop, calibrated */
    double ns[KVB_MAX_ROUNDS];
    int nrounds;
    /* Optional: each timed loop is also cut into samples of calls lasting
     * at least sample_ns, each timed, and best_ns is the fastest sample's
     * time per call over all rounds. Other processes only ever add time,
     * so on a busy machine the fastest of many short samples is the
     * figure they move least (a 100 ms loop is seldom left alone). */
    double sample_ns;
    long sample_calls;      /* calls per sample, calibrated */
    double best_ns;
} kvb_case;

/* Calibrates each case to about `target_ms` per timed loop, then runs
 * `rounds` interleaved rounds. */
void kvb_run(kvb_case *cases, int n, int rounds, double target_ms);
double kvb_median(const kvb_case *c);
double kvb_min(const kvb_case *c);
double kvb_max(const kvb_case *c);
double kvb_now_ns(void);

/* ---- machine limits (kvb_limits.c), measured by code of our own ---- */
typedef struct kvb_limits {
    double read_gbs;   /* sum of a 64 MiB f32 array, AVX2, 4 accumulators */
    double triad_gbs;  /* c = a + b over 3 x 64 MiB, counted as 12 bytes per element */
    double update_gbs; /* a += b in place, 12 bytes per element (no read-for-ownership) */
    double copy_gbs;   /* memcpy 64 MiB, counted as read + write */
    double fma_gflops; /* one core: independent FMA chains, widest ISA the CPU has */
    const char *fma_isa;
    /* The same from the fastest round of each (the "best" fractions). */
    double read_best, triad_best, update_best, fma_best;
} kvb_limits;
kvb_limits kvb_measure_limits(int rounds);
/* One limit as a case to run beside others (after kvb_measure_limits,
 * before kvb_limits_release); false when the CPU lacks what it needs. */
typedef enum kvb_limit { KVB_LIMIT_READ, KVB_LIMIT_TRIAD, KVB_LIMIT_UPDATE, KVB_LIMIT_FMA } kvb_limit;
bool kvb_limit_case(kvb_limit which, kvb_case *out);
void kvb_limits_release(void);

/* ---- sections ---- */
void kvb_calls_section(int rounds, bool quick);
void kvb_throughput_section(const kvb_limits *lim, int rounds, bool quick);

/* Prints /proc/loadavg with `when` (nothing where it does not exist):
 * timed figures on a shared machine mean little without the load. */
void kvb_print_loadavg(const char *when);

/* Prints one row per case: median, min, max and the spread. */
void kvb_print_ns_rows(const kvb_case *cases, int n);

extern volatile double kvb_sink;

#endif
