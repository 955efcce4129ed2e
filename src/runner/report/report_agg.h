/* What the report writers need of a run, gathered row by row
 * (report_agg.c), so that a run's memory does not grow with its number of
 * cases: counts, the rows that are not plain passes (FAIL, ERROR, CRASH,
 * TIMEOUT, XPASS, XFAIL, FLAKY: "kept"), and small tables whose size
 * depends on the ops, backends, dtypes and checks of the run, never on how
 * many cases it had. Every report but results.jsonl and junit.xml (which
 * stream their rows, report_build.c) is written from one of these.
 * Internal to the report folder; kvrun uses report.h. */
#ifndef KV_RUNNER_REPORT_AGG_H
#define KV_RUNNER_REPORT_AGG_H

#include <stdbool.h>
#include <stdint.h>

#include "runner/check/tol_backend.h"
#include "runner/report/report.h"

/* Decades of |error| a double can have: 1e-324 .. 1e308. */
#define KV_AGG_DEC_LO (-330)
#define KV_AGG_DECADES 641

/* The per-check-family histogram of each compared row's maximum error,
 * by decade (the "Error distributions" section of report.html). */
typedef struct kv_agg_dec_hist {
    int64_t n, zero, nonfinite;
    int64_t bins[KV_AGG_DECADES];   /* bins[d - KV_AGG_DEC_LO]: 10^d <= |v| < 10^(d+1) */
} kv_agg_dec_hist;

typedef struct kv_agg_family {
    char name[32];                  /* "golden", "variants", ... (the check up to ':') */
    kv_agg_dec_hist ulps, abs;
} kv_agg_family;

/* ULP histogram bins of one (op, backend), by a row's max ULP error u:
 * bin 0, u == 0; bin 1, 0 < u <= 1; bin k (2..22), 10^(k-2) < u <=
 * 10^(k-1) (the last also everything larger); bin 23, inf or NaN. */
#define KV_AGG_ULP_BINS 24

/* One (op, backend) of the run. */
typedef struct kv_agg_opb {
    int op;                               /* index into kv_report_agg.ops */
    char backend[32];
    uint16_t seen[KV_DTYPE_COUNT];        /* bit s: a row of status s with this dtype */
    int64_t rows[KV_DTYPE_COUNT];
    int64_t ulp_rows;                     /* rows with a ULP distance, the histogram's total */
    int64_t ulp_bins[KV_AGG_ULP_BINS];
} kv_agg_opb;

typedef struct kv_agg_op {
    char op[KV_CASE_TEXT_MAX];
    int64_t status[KV_RESULT_STATUS_COUNT];
    double seconds;
} kv_agg_op;

/* accuracy.md's groups (report_accuracy.c). */
#define KV_AGG_ACC_LABEL_MAX 160
typedef struct kv_agg_acc {
    char op[KV_AGG_ACC_LABEL_MAX];   /* the op, and its args when the case has any */
    kv_dtype dtype;
    char variant[64];                /* "CPU/avx2", "SIM" */
    int64_t cases, failed, elements;
    double max;
    int64_t hist[KV_ULP_BINS];
} kv_agg_acc;

#define KV_AGG_OUTPUTS_SHOWN 5

typedef struct kv_report_agg {
    int64_t nrows;
    int64_t counts[KV_RESULT_STATUS_COUNT];
    kv_result_list kept;             /* the rows that are not PASS, SKIP or UNSUPPORTED, in order */
    kv_agg_op *ops;                  /* in order of first appearance (junit.xml's suites) */
    int nops, cap_ops;
    kv_agg_opb *opbs;                /* in order of first appearance */
    int nopbs, cap_opbs;
    int last_op, last_opb;           /* lookup cache: a case's rows share op and mostly backend */
    kv_agg_family *fams;
    int nfams, cap_fams;
    kv_report_hits hits[KV_REPORT_GATES];
    kv_agg_acc *acc;
    int nacc, cap_acc;
    bool acc_sorted;
    /* Cases whose code printed something: how many, and the first few with
     * their first line (report_console.c). */
    int64_t output_cases;
    char last_output_case[KV_CASE_ID_MAX];
    char output_ids[KV_AGG_OUTPUTS_SHOWN][KV_CASE_ID_MAX];
    char output_first[KV_AGG_OUTPUTS_SHOWN][160];
    /* SKIP rows "live reference: ...": how many, and the first case. */
    int64_t live;
    char first_live[KV_CASE_ID_MAX];
    /* Rows each per-backend tolerance override widened (kv_check_result.
     * tol_override), by override index: meta.json's counts. Rows read back
     * from a results.jsonl (--resume, --merge) do not say. */
    int64_t tol_uses[KV_TOL_OVERRIDE_MAX];
} kv_report_agg;

void kv_report_agg_init(kv_report_agg *a);
void kv_report_agg_free(kv_report_agg *a);
/* Adds one row; an error only when out of memory. */
kv_status kv_report_agg_add(kv_report_agg *a, const kv_check_result *r);
/* kv_report_agg_init, then every row of `results`. */
kv_status kv_report_agg_of(kv_report_agg *a, const kv_result_list *results);
/* Sorts the accuracy groups (op, dtype, variant); idempotent. */
void kv_report_agg_finish(kv_report_agg *a);

/* The writers behind report.h's list versions. */
kv_report_totals kv_report_agg_totals(const kv_report_agg *a);
int kv_report_agg_exit_code(const kv_report_agg *a, bool flaky_fail);
kv_status kv_report_html_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path);
kv_status kv_report_matrix_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path);
kv_status kv_report_failures_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path);
kv_status kv_report_accuracy_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path);
kv_status kv_report_accuracy_jsonl_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path);
kv_status kv_report_meta_agg(const kv_report_meta *meta, const kv_report_agg *a, const char *path);
void kv_report_console_agg(FILE *out, const kv_report_agg *a, const kv_report_meta *meta);

/* Sums one row into the gates' hit rates (report_hits.c). */
void kv_report_hits_init(kv_report_hits hits[KV_REPORT_GATES]);
void kv_report_hits_add(kv_report_hits hits[KV_REPORT_GATES], const kv_check_result *r);

/* junit.xml as rows arrive (report_junit.c): each testcase is written at
 * once into a spool file, in blocks per op, and the suites are put
 * together from the blocks at the end, so the file groups rows by op (one
 * <testsuite> per op, in order of first appearance) without holding them. */
typedef struct kv_junit_spool kv_junit_spool;
kv_junit_spool *kv_junit_spool_new(bool flaky_fail);
/* `op`: the row's index in the aggregate's ops (kv_report_agg_add first). */
kv_status kv_junit_spool_add(kv_junit_spool *s, int op, const kv_check_result *r);
/* `a` must have seen exactly the rows the spool did. */
kv_status kv_junit_spool_write(kv_junit_spool *s, const kv_report_agg *a, const kv_report_meta *meta,
                               const char *path);
void kv_junit_spool_free(kv_junit_spool *s);

/* The index in a->ops of `op`, -1 when the run had no row of it. */
int kv_report_agg_op_index(const kv_report_agg *a, const char *op);

#endif
