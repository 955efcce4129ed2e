/* kvrun --mode=perf: times every kernel variant (kv/tune.h) of each
 * selected case and judges the tuner's choice.
 *
 * Per case (device cpu only; other devices, and cases that expect an
 * error, are skipped with a note) and per backend whose kernel for the op
 * is a variant set: every variant whose predicate accepts the case's
 * inputs runs `warmup` untimed calls, then `reps` timed calls, each
 * bracketed by the backend's synchronize; the row keeps the median and
 * the minimum. Rates: mm, bmm and addmm count 2*m*n*k floating-point
 * operations (times the batch) and report GFLOP/s; every other op reports
 * GB/s over the bytes it moves (every tensor input plus every tensor
 * output, once each). Speedup is the "ref" variant's median over the
 * row's. The tuner's choice is what kv_tune_choice says for the same call
 * (tuning it then, with the tuner's own warm-up, reps and clock).
 *
 * A (case, backend) pair is JUDGED when at least two variants were timed
 * and the tuner made a choice: the choice is within 5% when its median is
 * at most 1.05 times the fastest median. Pairs with one compatible
 * variant have no choice to make and are not counted.
 *
 * Timing lives only here: unit tests inject a fake clock (`clock`) and
 * check structure, never speed. */
#ifndef KV_RUNNER_PERF_H
#define KV_RUNNER_PERF_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kv/keys.h"
#include "kv/tune.h"
#include "runner/case/case.h"
#include "runner/exec/icount.h"
#include "runner/exec/limits.h"

#define KV_PERF_DEFAULT_WARMUP 3
#define KV_PERF_DEFAULT_REPS 15
#define KV_PERF_MAX_REPS 100000
/* The choice is "within 5%" when chosen * 100 <= fastest * 105. */
#define KV_PERF_WITHIN_PERCENT 5

/* What one measured call costs (kvrun --perf-metric). */
typedef enum kv_perf_metric {
    KV_PERF_METRIC_TIME,         /* nanoseconds, the monotonic clock */
    /* retired user-space instructions (runner/exec/icount.h): the same
     * on every run of one binary, so compared without statistics */
    KV_PERF_METRIC_INSTRUCTIONS,
} kv_perf_metric;

/* "time", "instructions". */
const char *kv_perf_metric_name(kv_perf_metric m);

typedef struct kv_perf_options {
    int warmup;                  /* untimed calls per variant, >= 0 */
    int reps;                    /* timed calls per variant, 1..KV_PERF_MAX_REPS */
    /* false: each variant's calls in a row (warm-up, then the timed ones);
     * true (kvrun --perf-interleave): every variant's warm-up, then `reps`
     * rounds, each giving every variant an untimed call and a timed one,
     * so a change of the machine's speed during the pair's measurement
     * hits every variant alike instead of whichever window it fell in. */
    bool interleave;
    const char *report_dir;      /* perf.jsonl and perf.html go here; NULL: "reports" */
    /* nanoseconds; NULL: CLOCK_MONOTONIC. With the instruction metric a
     * test's stand-in for the counter: a call's count is the difference
     * of its readings before and after (NULL: the `counter` source). */
    kv_tune_clock_fn clock;
    void *clock_ctx;
    kv_perf_metric metric;       /* KV_PERF_METRIC_TIME by default */
    /* The instruction counter's source: kvrun resolves AUTO
     * (kv_perf_icount_prepare) before the run, which opens it. */
    kv_icount_source counter;
    kv_icount *icount;           /* the open counter: kv_perf_run's own */
} kv_perf_options;

/* warmup 3, reps 15, the monotonic clock. */
void kv_perf_options_init(kv_perf_options *o);

/* One (case, backend, variant). */
typedef struct kv_perf_row {
    char case_id[KV_CASE_ID_MAX];
    char op[KV_CASE_TEXT_MAX];
    kv_key backend;
    char variant[KV_TUNE_NAME_MAX];
    int case_index;              /* which measured (case, backend) pair, from 0 */
    bool failed;                 /* the variant accepted the call, then returned an error */
    char error[256];
    /* Nanoseconds, or with the instruction metric (kv_perf_report.metric)
     * instructions: the same statistics of the other unit. */
    uint64_t median_ns, min_ns, max_ns;
    int reps;
    /* Every measured call (ascending, reps of them; NULL for a failed
     * row), kept so a comparison of two runs can test its change
     * (perf.jsonl "samples_ns" or "samples_instructions", docs/compare.md). */
    uint64_t *samples_ns;
    bool is_flops;               /* the rate is GFLOP/s (else GB/s) */
    double work;                 /* FLOPs or bytes per call */
    double speedup;              /* ref median / this median; 0: unknown */
    bool chosen;                 /* the tuner's choice for this call */
    bool fastest;                /* the lowest median of the pair (first one on ties) */
    bool within;                 /* of the pair: judged and the choice is within 5% */
    bool judged;                 /* of the pair */
} kv_perf_row;

typedef struct kv_perf_report {
    kv_perf_row *rows;
    int n, cap;
    int pairs;                   /* (case, backend) pairs measured */
    int judged, within;          /* pairs judged, and those within 5% */
    int skipped;                 /* cases skipped with a note */
    int errors;                  /* rows that failed */
    /* The roofline's roofs (runner/exec/limits.h), measured once per run
     * with the real clock (not with a test's fake one), and the machine. */
    bool limits_measured;
    kv_limit_stat limits[KV_LIMIT_COUNT];
    char machine[300];
    int warmup, reps;
    bool interleave;
    kv_perf_metric metric;
    /* With the instruction metric, the source that counted: "hardware",
     * "callgrind", or "test" for a test's stand-in counter. */
    char counter[16];
} kv_perf_report;

void kv_perf_report_free(kv_perf_report *r);

/* Measures one case and appends its rows; a skipped case only writes its
 * note to `notes` (may be NULL). A failing variant becomes a failed row,
 * not an error; errors are for what stops the measurement (inputs that
 * cannot be built, out of memory). */
kv_status kv_perf_case(const kv_perf_options *o, const kv_case *c, kv_perf_report *r, FILE *notes);

/* One JSON object per row: case_id, op, backend, variant, metric,
 * median_ns, min_ns, reps, gbps or gflops, speedup, chosen, fastest,
 * within_5pct, and error for a failed row (its timings are null, as is a
 * speedup or a rate that cannot be computed). With the instruction
 * metric: counter, and median_instructions, min_instructions,
 * max_instructions, samples_instructions in place of the times and the
 * rate (docs/performance.md). */
kv_status kv_perf_write_jsonl(const kv_perf_report *r, const char *path);
/* A self-contained page: one inline SVG bar plot per op (speedup per
 * variant, grouped by case, the chosen variant marked). */
kv_status kv_perf_write_html(const kv_perf_report *r, const char *path);
/* The table, failed variants by name, and the summary line
 * "tuner picked within 5% of the fastest in K of N cases (P%)". */
void kv_perf_console(FILE *out, const kv_perf_report *r);

/* The whole perf run over `cases`: measure, write perf.jsonl and
 * perf.html under the report folder, print the table. Returns the exit
 * code: 0, or 1 when a variant failed on a call it accepted, a case could
 * not be measured, or the reports could not be written; 2 when the
 * instruction counter (o->counter) cannot be opened. */
int kv_perf_run(const kv_perf_options *o, const kv_case *const *cases, int n, FILE *out);

/* kvrun --perf-metric=instructions[:SOURCE], before anything else of the
 * run (icount_run.c): resolves o->counter. In the run kvrun started under
 * callgrind, checks that it is one; else the hardware counter when it
 * opens (AUTO, HARDWARE), else callgrind (AUTO, CALLGRIND): this kvrun
 * runs again under `valgrind --tool=callgrind` with the same arguments
 * (argv, NULL-terminated) and its exit code is the run's. Returns -1 to
 * carry on in this process, or the exit code: the callgrind run's, or 2
 * when no source can count, the reason written to err (a source that
 * cannot count is an error, never a run that times instead). */
int kv_perf_icount_prepare(kv_perf_options *o, char *const *argv, FILE *err);

#endif
