/* Results of running cases: what checks produce and reports consume. */
#ifndef KV_RUNNER_RESULT_H
#define KV_RUNNER_RESULT_H

#include <stdbool.h>
#include <stdint.h>

#include "runner/case/case.h"

typedef enum kv_result_status {
    KV_RESULT_PASS,
    KV_RESULT_FAIL,          /* a check found a wrong result */
    KV_RESULT_ERROR,         /* harness or golden problem (missing/corrupt/stale golden) */
    KV_RESULT_UNSUPPORTED,   /* the backend lacks the op: counted, never a failure */
    KV_RESULT_SKIP,
    KV_RESULT_CRASH,         /* the worker died on a signal */
    KV_RESULT_TIMEOUT,
    KV_RESULT_XFAIL,         /* failed, and the baseline expects it */
    KV_RESULT_XPASS,         /* passed, but the baseline expected a failure */
    /* failed (FAIL/ERROR/CRASH/TIMEOUT), then passed when --retry ran the
     * case again: a failure only under --flaky=fail. Last, so the values
     * of the statuses before it (and old reports) keep their meaning. */
    KV_RESULT_FLAKY,
    KV_RESULT_STATUS_COUNT
} kv_result_status;

const char *kv_result_status_name(kv_result_status s); /* "PASS", "FAIL", ... */
/* Whether this status makes the run's exit code non-zero. FLAKY is not:
 * whether a flake fails the run is the run's choice (--flaky=), so the
 * exit code of a run with flakes is kv_report_exit_code_flaky's. */
bool kv_result_status_is_bad(kv_result_status s);
/* FAIL, ERROR, CRASH or TIMEOUT: the row itself went wrong (what
 * --last-failed reruns and a comparison calls failing); unlike
 * kv_result_status_is_bad, not XPASS, a stale baseline entry. */
bool kv_result_status_is_failure(kv_result_status s);

/* One element that differed, for the failure listing and the error plot. */
typedef struct kv_mismatch {
    int64_t index[KV_MAX_DIMS];
    int ndim;
    double expected, got;        /* complex: real parts; integers exactly */
    double abs_err, rel_err;
    double ulps;                 /* ULP distance in the output dtype; -1 when meaningless */
} kv_mismatch;

#define KV_RESULT_MAX_MISMATCHES 8

/* Where in an output its wrong elements are, over the WHOLE output (the
 * mismatches above are only the first few): the output folded to `rows`
 * (its leading dims) x `cols` (its last dim; a 0-dim output is 1 x 1),
 * cut into grows x gcols cells (at most KV_HEAT_GRID each way, fewer for
 * a smaller output, so a small output gets a cell per element), each
 * counting its wrong elements. Row r of the output falls in cell row
 * r * grows / rows (columns alike). A count saturates at UINT16_MAX
 * (a cell that large is an output past 67 million elements, where the
 * share of wrong elements, what the report colours by, is all one reads).
 * grows 0: nothing recorded (no comparison, or a row from an older
 * report). */
#define KV_HEAT_GRID 32
typedef struct kv_heat {
    int64_t rows, cols;
    int grows, gcols;
    uint16_t cells[KV_HEAT_GRID * KV_HEAT_GRID]; /* row-major, grows x gcols used */
} kv_heat;

/* The ulp-error histogram of an accuracy row (runner/check/ulp_hist.h):
 * bins 0..15 count errors of exactly that many ulps, bins 16..75 errors in
 * [2^(b-12), 2^(b-11)), bin 76 elements whose NaN-ness differs from the
 * truth (a NaN where a number belongs, or the reverse). */
#define KV_ULP_BINS 77
#define KV_RESULT_MESSAGE_MAX 1024
/* What the case's code printed on stdout/stderr (a plugin's debug lines),
 * captured by the forked worker, cut to this many bytes. */
#define KV_RESULT_OUTPUT_MAX 512

/* Compact facts about one output of a row, what a run-to-run comparison
 * (report/compare_runs.h) needs: the XXH3-64 of the output's element bytes
 * (row-major, runner/golden/hash.h), so bit identity with an older run is
 * one comparison, and for floating outputs the error in ulps of the
 * output dtype against the expected value the row judged it by (the
 * golden, or the live reference of an ad-hoc case): `elements` real
 * components measured, the largest error and the 99.9th percentile
 * (runner/check/ulp_hist.h; +Inf when NaN-ness differs) and how many are
 * not bit-equal to the expected value (not correctly rounded when the
 * golden is the truth). elements is 0 when nothing was measured (integer
 * outputs, hash-only goldens); hash_set is false when no output exists. */
typedef struct kv_output_facts {
    uint64_t hash;
    bool hash_set;
    int64_t elements, not_cr;
    double max_ulp, p999_ulp;
} kv_output_facts;

/* Outputs past this many keep no facts (no op of the suite has more). */
#define KV_RESULT_MAX_OUTPUTS 4

/* One (case, check) outcome: one JSON line, one JUnit testcase. */
typedef struct kv_check_result {
    char case_id[KV_CASE_ID_MAX];
    char op[KV_CASE_TEXT_MAX];
    char check[64];              /* "golden", "variants:cpu/ref", "memory", ... */
    char backend[32];            /* "cpu", "sim", "accel" */
    kv_dtype dtype;              /* of the first input: the support-matrix column */
    kv_result_status status;
    char message[KV_RESULT_MESSAGE_MAX];
    char repro[KV_CASE_REPRO_MAX];
    double seconds;
    /* Comparison detail (FAIL of a data check). */
    int64_t compared, mismatched;
    double max_abs_err, max_ulps;
    int nmismatches;
    kv_mismatch mismatches[KV_RESULT_MAX_MISMATCHES];
    kv_heat heat;
    /* fastpath rows: calls of the case's op at the accel boxing layer by
     * path (kv_accel_path) in the run with every fast path on; the report
     * sums them into each gate's hit rate. 0 in every other row. */
    int64_t fast_calls, slow_calls, manual_calls;
    /* stdout and stderr of the worker while it ran this case ("" when
     * nothing was printed or the case ran in process); every row of the
     * case carries it. Ends with "..." when cut. */
    char output[KV_RESULT_OUTPUT_MAX];
    /* accuracy rows: how far each floating output component is from the
     * correctly rounded truth, in ulps of the output dtype. ulp_elements
     * is the histogram's total; ulp_max its largest finite-class error
     * (+Inf when a NaN is wrong). 0 in every other row. */
    int64_t ulp_elements;
    double ulp_max;
    int64_t ulp_hist[KV_ULP_BINS];
    /* Per-output facts of the rows that judge a kernel's outputs (golden,
     * variants, accuracy); nouts 0 in every other row. */
    int nouts;
    kv_output_facts outs[KV_RESULT_MAX_OUTPUTS];
    /* 1 + the index of the per-backend tolerance override that widened
     * this row's bound (runner/check/tol_backend.h), 0 for none: what
     * meta.json's count of each override's uses adds up. */
    int tol_override;
} kv_check_result;

/* Appends to r's message (printf-style), cut at its end. */
void kv_check_result_append(kv_check_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A growable list of results, the unit reports work on. */
typedef struct kv_result_list {
    kv_check_result *items;
    int n, cap;
} kv_result_list;

kv_status kv_result_list_push(kv_result_list *list, const kv_check_result *r);
void kv_result_list_free(kv_result_list *list);
/* Counts per status. */
void kv_result_list_counts(const kv_result_list *list, int64_t counts[KV_RESULT_STATUS_COUNT]);

/* ---- additions (src/runner/result.c) ---- */

/* Parses a name from kv_result_status_name (exact, upper case); 0 on
 * success, -1 if unknown. The JSONL reader needs it to merge shards. */
int kv_result_status_parse(const char *name, kv_result_status *out);
/* How bad a status looks, for "worst status" cells: SKIP 0 < UNSUPPORTED
 * < PASS < XFAIL < FLAKY < XPASS < FAIL < ERROR < TIMEOUT < CRASH. */
int kv_result_status_severity(kv_result_status s);
/* Appends every result of `src` to `dst`. */
kv_status kv_result_list_extend(kv_result_list *dst, const kv_result_list *src);

/* Row slots (kv_check_result, about 5 KB each) the process's lists hold
 * now, and the most they held at once since the last reset. A debug
 * counter: the runner keeps counts and failures, never every row, and
 * tests/test_driver.c checks that its peak does not grow with the number
 * of cases. */
int64_t kv_result_rows_held(void);
int64_t kv_result_rows_peak(void);
void kv_result_rows_peak_reset(void);

#endif
