/* What compare_runs.c gathers and compare_write.c / compare_perf.c share. */
#ifndef KV_RUNNER_COMPARE_INTERNAL_H
#define KV_RUNNER_COMPARE_INTERNAL_H

#include "runner/report/compare_runs.h"
#include "runner/report/report.h"

/* A row worth listing: anything but "same status, same bits, no drift". */
typedef struct kv_runcmp_item {
    char case_id[KV_CASE_ID_MAX];
    char check[64];
    char backend[32];
    bool has_old, has_new;
    kv_result_status old_status, new_status;
    int nouts;
    kv_output_facts old_outs[KV_RESULT_MAX_OUTPUTS], new_outs[KV_RESULT_MAX_OUTPUTS];
    kv_runcmp_finding f;
} kv_runcmp_item;

/* One perf (case, backend, variant) of both runs. */
typedef struct kv_runcmp_perf {
    char case_id[KV_CASE_ID_MAX];
    char backend[32];
    char variant[64];
    double old_median, new_median; /* ns, or instructions (kv_runcmp_result.perf_metric) */
    double old_spread, new_spread; /* (p75 - p25) / median of each run's repetitions */
    int old_n, new_n;
    double p;                      /* Mann-Whitney U, two-sided; NaN for instruction counts */
    double change;                 /* new_median / old_median - 1 */
    bool significant, regression, improvement;
} kv_runcmp_perf;

typedef struct kv_runcmp_result {
    const kv_runcmp_policy *policy;
    char old_dir[512], new_dir[512];
    int64_t compared;              /* rows in both runs */
    int64_t counts[KV_RUNCMP_KIND_COUNT];
    int64_t bits_changed, drifted, identity_violations, regressions;
    kv_runcmp_item *items;
    int nitems, capitems;
    /* Fingerprint fields that differ: "field: old -> new", one per line. */
    char fp_diff[4096];
    /* perf.jsonl of both runs, when both have one. */
    bool perf_compared;
    /* "time", or "instructions" counted by perf_counter ("hardware",
     * "callgrind"): both runs measured the same (compare_perf.c refuses
     * others). */
    char perf_metric[16], perf_counter[16];
    kv_runcmp_perf *perf;
    int nperf, capperf;
    int64_t perf_regressions, perf_improvements;
    double noise_median, noise_p90;   /* repetition spread, both runs, over rows */
    double drift_median, drift_p90;   /* |change| of the rows with no significant change */
    int drift_pairs;                  /* how many such rows */
} kv_runcmp_result;

kv_status kv_runcmp_item_push(kv_runcmp_result *res, const kv_runcmp_item *it);
void kv_runcmp_result_free(kv_runcmp_result *res);

/* compare_perf.c: reads DIR/perf.jsonl of both runs when both exist and
 * fills res->perf* (a missing pair of files is no error). A malformed file
 * is an error naming it. */
kv_status kv_runcmp_perf_dirs(const char *old_dir, const char *new_dir, kv_runcmp_result *res);

/* compare_write.c */
kv_status kv_runcmp_write_md(const kv_runcmp_result *res, const char *path);
kv_status kv_runcmp_write_jsonl(const kv_runcmp_result *res, const char *path);
kv_status kv_runcmp_write_junit(const kv_runcmp_result *res, const char *path);
/* Inserts the summary before report.html's </body>; KV_OK when no file. */
kv_status kv_runcmp_write_html_section(const kv_runcmp_result *res, const char *path);

#endif
