/* Comparing two finished runs (kvrun --compare, docs/compare.md): what
 * changed between an old report folder and a new one, per (case, check,
 * backend) row, and whether that is a regression under the chosen policy.
 *
 * A row's finding has a status transition (kv_runcmp_kind), and per
 * output (result.h, kv_output_facts) whether its bits changed (content
 * hash) and whether its accuracy drifted (max ulp, 99.9% ulp or the count
 * not correctly rounded differ). Regressions: a pass that now fails
 * (PASS->FAIL, ERROR, CRASH, TIMEOUT), a pass that is now UNSUPPORTED or
 * SKIP (a support regression: what was checked no longer runs), changed bits where the policy requires identity,
 * and a significant perf slowdown over the threshold (compare_perf.c).
 * Bits that change within tolerance, and accuracy drift with the row
 * still passing, are reported, never failures.
 *
 * The two runs must be comparable: both complete kvsuite reports with the
 * same seed (the inputs are derived from it, so every hash would differ)
 * and at least one row in common. Other fingerprint fields that differ
 * (version, case set, options, backends, KV_* variables) are named in the
 * report but do not stop the comparison: a new generator version is
 * expected to change a backend's version string. */
#ifndef KV_RUNNER_COMPARE_RUNS_H
#define KV_RUNNER_COMPARE_RUNS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runner/check/result.h"

/* Exit codes of a comparison. */
#define KV_RUNCMP_EXIT_OK 0
#define KV_RUNCMP_EXIT_REGRESSION 1
#define KV_RUNCMP_EXIT_NOT_COMPARABLE 2

#define KV_RUNCMP_LIST_MAX 512

typedef struct kv_runcmp_policy {
    /* Comma-separated selectors that must stay bit-identical: a backend
     * label of a row ("cpu", "sim", "opencl"), a backend key or key/variant
     * of a variants/accuracy row ("CPU", "CPU/avx2"), or "*" for every
     * row. "" requires nothing. */
    char require_identical[KV_RUNCMP_LIST_MAX];
    /* A perf change is a regression when significant (p < perf_alpha,
     * Mann-Whitney U over the repetitions) AND the median grew by more
     * than this fraction. */
    double perf_threshold;
    double perf_alpha;
} kv_runcmp_policy;

/* require_identical "", perf_threshold 0.1, perf_alpha 0.05. */
void kv_runcmp_policy_init(kv_runcmp_policy *p);
/* Checks a --require-identical list: non-empty items of letters, digits
 * and the characters _ . / * - . */
int kv_runcmp_policy_set_identical(kv_runcmp_policy *p, const char *list, char *why, int whycap);

typedef enum kv_runcmp_kind {
    KV_RUNCMP_SAME,               /* same status */
    KV_RUNCMP_REGRESSION,         /* passed, now fails */
    KV_RUNCMP_SUPPORT_REGRESSION, /* passed, now UNSUPPORTED or SKIP (a variant that declines) */
    KV_RUNCMP_FIX,                /* failed, now passes */
    KV_RUNCMP_NEW_SUPPORT,        /* UNSUPPORTED or SKIP, now passes */
    KV_RUNCMP_OTHER,              /* any other status change (SKIP, XFAIL...) */
    KV_RUNCMP_ADDED,              /* only in the new run */
    KV_RUNCMP_REMOVED,            /* only in the old run */
    KV_RUNCMP_KIND_COUNT
} kv_runcmp_kind;

const char *kv_runcmp_kind_name(kv_runcmp_kind k); /* "regression", "support-regression", ... */

/* What a comparison keeps of a row (a few hundred bytes, not a whole
 * kv_check_result). */
typedef struct kv_runcmp_row {
    char *key;                    /* case_id \t check \t backend */
    kv_result_status status;
    int nouts;
    kv_output_facts outs[KV_RESULT_MAX_OUTPUTS];
} kv_runcmp_row;

/* One output's change. */
typedef struct kv_runcmp_out {
    bool bits_changed;            /* both hashes known and different */
    bool drift;                   /* both measured and max, p99.9 or not_cr differ */
} kv_runcmp_out;

typedef struct kv_runcmp_finding {
    kv_runcmp_kind kind;
    bool identity_required;       /* the policy names this row */
    bool regression;              /* under the policy: the exit code's reason */
    int nouts;
    kv_runcmp_out outs[KV_RESULT_MAX_OUTPUTS];
    bool any_bits_changed, any_drift;
} kv_runcmp_finding;

/* Classifies a row: old or new may be NULL (added, removed). check and
 * backend are the row's (for the identity policy). */
void kv_runcmp_classify(const kv_runcmp_row *old, const kv_runcmp_row *new_row, const char *check,
                        const char *backend, const kv_runcmp_policy *p, kv_runcmp_finding *out);
/* Whether the policy's identity list names this row. */
bool kv_runcmp_identity_required(const kv_runcmp_policy *p, const char *check, const char *backend);

/* ---- perf (compare_perf.c) ---- */

/* Two-sided Mann-Whitney U test of samples a[na] and b[nb] (normal
 * approximation with tie correction and continuity correction, as
 * scipy.stats.mannwhitneyu's asymptotic method): the p-value, 1.0 when
 * either side has fewer than 2 samples or every sample is equal. */
double kv_runcmp_mann_whitney_p(const double *a, int na, const double *b, int nb);
/* The median of v[n] (sorted in place); 0 for n == 0. */
double kv_runcmp_median(double *v, int n);

/* ---- the whole comparison ---- */

/* Compares old_dir with new_dir and writes compare.md, compare.jsonl and
 * compare.junit.xml into out_dir, and a section into out_dir/report.html
 * when it exists. *exit_code gets one of KV_RUNCMP_EXIT_*; a one-line
 * summary (and, when not comparable, the reason) goes to `console`.
 * Returns an error only for what stops the writing (unreadable files are
 * "not comparable", exit 2, with KV_OK). */
kv_status kv_runcmp_dirs(const char *old_dir, const char *new_dir, const char *out_dir, const kv_runcmp_policy *p,
                         FILE *console, int *exit_code);

#endif
