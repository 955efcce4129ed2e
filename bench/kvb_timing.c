/* Interleaved timing rounds and their statistics (kvb.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvb.h"

volatile double kvb_sink;

double kvb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double timed_loop(kvb_case *c, long iters) {
    if (c->enter) c->enter(c->ctx);
    const double t0 = kvb_now_ns();
    if (c->sample_calls > 0) {
        /* The same loop in timed samples (one clock read per sample of
         * at least sample_ns: nothing next to the calls it times). */
        double ts = t0;
        for (long i = 0; i < iters;) {
            const long n = iters - i < c->sample_calls ? iters - i : c->sample_calls;
            for (long j = 0; j < n; j++) c->run(c->ctx);
            i += n;
            const double te = kvb_now_ns();
            if (n == c->sample_calls && (te - ts) / (double)n < c->best_ns) c->best_ns = (te - ts) / (double)n;
            ts = te;
        }
    } else {
        for (long i = 0; i < iters; i++) c->run(c->ctx);
    }
    const double el = kvb_now_ns() - t0;
    if (c->leave) c->leave(c->ctx);
    return el;
}

/* Doubles the loop until it takes a tenth of the target, then scales:
 * the first calls also warm caches, the tuner and the allocator. */
static void calibrate(kvb_case *c, double target_ms) {
    long iters = 1;
    double el = timed_loop(c, iters);
    while (el < target_ms * 1e5 && iters < (1L << 30)) {
        iters *= 2;
        el = timed_loop(c, iters);
    }
    double per = el / (double)iters;
    long want = (long)(target_ms * 1e6 / (per > 0 ? per : 1));
    c->iters = want < 1 ? 1 : want;
    if (c->sample_ns > 0) {
        const long calls = (long)(c->sample_ns / (per > 0 ? per : 1)) + 1;
        c->sample_calls = calls < c->iters ? calls : c->iters;
        c->best_ns = 1e300;
    }
}

void kvb_run(kvb_case *cases, int n, int rounds, double target_ms) {
    if (rounds > KVB_MAX_ROUNDS) rounds = KVB_MAX_ROUNDS;
    for (int i = 0; i < n; i++) calibrate(&cases[i], target_ms);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n; i++) cases[i].ns[r] = timed_loop(&cases[i], cases[i].iters) / (double)cases[i].iters;
    for (int i = 0; i < n; i++) cases[i].nrounds = rounds;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kvb_median(const kvb_case *c) {
    double v[KVB_MAX_ROUNDS];
    memcpy(v, c->ns, (size_t)c->nrounds * sizeof *v);
    qsort(v, (size_t)c->nrounds, sizeof *v, cmp_double);
    return c->nrounds % 2 ? v[c->nrounds / 2] : 0.5 * (v[c->nrounds / 2 - 1] + v[c->nrounds / 2]);
}

double kvb_min(const kvb_case *c) {
    double m = c->ns[0];
    for (int r = 1; r < c->nrounds; r++) m = c->ns[r] < m ? c->ns[r] : m;
    return m;
}

double kvb_max(const kvb_case *c) {
    double m = c->ns[0];
    for (int r = 1; r < c->nrounds; r++) m = c->ns[r] > m ? c->ns[r] : m;
    return m;
}

void kvb_print_ns_rows(const kvb_case *cases, int n) {
    printf("  %-52s %9s %9s %9s %7s\n", "ns per call", "median", "min", "max", "spread");
    for (int i = 0; i < n; i++) {
        const kvb_case *c = &cases[i];
        const double med = kvb_median(c);
        printf("  %-52s %9.1f %9.1f %9.1f %6.1f%%\n", c->name, med, kvb_min(c), kvb_max(c),
               med > 0 ? 100.0 * (kvb_max(c) - kvb_min(c)) / med : 0.0);
    }
}

void kvb_print_loadavg(const char *when) {
    char buf[128] = "";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL && fgets(buf, sizeof buf, f) != NULL) printf("load average %s: %s", when, buf);
    if (f != NULL) fclose(f);
}
