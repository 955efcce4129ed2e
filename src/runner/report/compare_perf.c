/* The perf half of a comparison (compare_runs.h): every repetition of
 * each (case, backend, variant) of both runs' perf.jsonl ("samples_ns",
 * kvrun --mode=perf), a Mann-Whitney U test per pair, and the machine's
 * noise as the two runs show it.
 *
 * A change is significant when the test's two-sided p-value is below the
 * policy's alpha, and a regression when it is also a slowdown of the
 * median by more than the policy's threshold: a single timing, or a
 * significant 1% change, is never a regression (Google Benchmark's
 * compare.py judges alike). Noise: each row's repetition spread (the
 * interquartile range over the median) of both runs, and the |median
 * change| of the rows whose change is not significant, which is what
 * repeated identical runs differ by on this machine.
 *
 * Instruction counts (kvrun --perf-metric=instructions, perf.jsonl
 * "metric") need no test: a count is deterministic, so every change is
 * real and one over the threshold is a regression. Runs of two metrics,
 * or counts of two sources, are not compared (an error naming the
 * fingerprint field). */
#include "runner/report/compare_internal.h"
#include "runner/report/report_internal.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int runcmp_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double kv_runcmp_median(double *v, int n) {
    if (n <= 0) return 0.0;
    qsort(v, (size_t)n, sizeof *v, runcmp_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The q-quantile of sorted v[n], linear between order statistics. */
static double runcmp_quantile(const double *v, int n, double q) {
    if (n <= 0) return 0.0;
    const double pos = q * (n - 1);
    const int lo = (int)floor(pos);
    const int hi = lo + 1 < n ? lo + 1 : lo;
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

typedef struct runcmp_rank {
    double v;
    int side;
} runcmp_rank;

static int runcmp_cmp_rank(const void *a, const void *b) {
    return runcmp_cmp_double(&((const runcmp_rank *)a)->v, &((const runcmp_rank *)b)->v);
}

double kv_runcmp_mann_whitney_p(const double *a, int na, const double *b, int nb) {
    if (na < 2 || nb < 2) return 1.0;
    const int n = na + nb;
    runcmp_rank *all = malloc((size_t)n * sizeof *all);
    if (all == NULL) return 1.0;
    for (int i = 0; i < na; i++) all[i] = (runcmp_rank){ a[i], 0 };
    for (int i = 0; i < nb; i++) all[na + i] = (runcmp_rank){ b[i], 1 };
    qsort(all, (size_t)n, sizeof *all, runcmp_cmp_rank);
    /* Ranks from 1, ties get their mean rank; sum of t^3 - t for the
     * variance's tie correction. */
    double rank_a = 0.0, ties = 0.0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && all[j + 1].v == all[i].v) j++;
        const double mean_rank = 0.5 * (double)(i + 1 + j + 1);
        for (int k = i; k <= j; k++)
            if (all[k].side == 0) rank_a += mean_rank;
        const double t = (double)(j - i + 1);
        ties += t * t * t - t;
        i = j + 1;
    }
    free(all);
    const double u = rank_a - 0.5 * na * (na + 1.0);
    const double mu = 0.5 * na * nb;
    const double var = na * nb / 12.0 * ((n + 1.0) - ties / ((double)n * (n - 1.0)));
    if (!(var > 0.0)) return 1.0;
    /* Continuity correction of 0.5 toward the mean, then both tails. */
    double z = (fabs(u - mu) - 0.5) / sqrt(var);
    if (z < 0.0) z = 0.0;
    return erfc(z / sqrt(2.0));
}

/* One perf.jsonl row's key and samples. */
typedef struct runcmp_sample_row {
    char key[KV_CASE_ID_MAX + 128];
    char case_id[KV_CASE_ID_MAX], backend[32], variant[64];
    double *s;
    int n;
} runcmp_sample_row;

typedef struct runcmp_samples {
    runcmp_sample_row *rows;
    int n, cap;
    /* What the file's rows measured: "metric" ("time" when absent, as
     * before the field existed) and "counter" ("" for time). */
    bool have_metric;
    char metric[16], counter[16];
} runcmp_samples;

static void runcmp_samples_free(runcmp_samples *s) {
    for (int i = 0; i < s->n; i++) free(s->rows[i].s);
    free(s->rows);
    memset(s, 0, sizeof *s);
}

static kv_status runcmp_read_perf(const char *path, runcmp_samples *out) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return kv_error(KV_ERR_INVALID_ARG, "'%s': cannot read it: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int64_t lineno = 0;
    kv_status st = KV_OK;
    while (st == KV_OK && getline(&line, &cap, f) >= 0) {
        lineno++;
        json_error_t err;
        json_t *o = json_loads(line, 0, &err);
        const char *cid = json_string_value(json_object_get(o, "case_id"));
        const char *be = json_string_value(json_object_get(o, "backend"));
        const char *va = json_string_value(json_object_get(o, "variant"));
        const json_t *mj = json_object_get(o, "metric");
        const char *metric = mj == NULL ? "time" : json_string_value(mj);
        const char *counter = json_string_value(json_object_get(o, "counter"));
        if (counter == NULL) counter = "";
        const bool counted = metric != NULL && strcmp(metric, "instructions") == 0;
        const char *skey = counted ? "samples_instructions" : "samples_ns";
        const json_t *sm = json_object_get(o, skey);
        const bool known = metric != NULL && (counted ? counter[0] != '\0' : strcmp(metric, "time") == 0);
        if (o != NULL && known && !out->have_metric) {
            /* The first row says what the file measured. */
            out->have_metric = true;
            snprintf(out->metric, sizeof out->metric, "%s", metric);
            snprintf(out->counter, sizeof out->counter, "%s", counter);
        }
        if (o == NULL || cid == NULL || be == NULL || va == NULL) {
            st = kv_error(KV_ERR_INVALID_ARG, "'%s':%lld: not a perf.jsonl row (case_id, backend, variant)", path,
                          (long long)lineno);
        } else if (!known) {
            st = kv_error(KV_ERR_INVALID_ARG, "'%s':%lld: \"metric\" must be \"time\" or \"instructions\" (with its "
                                              "\"counter\")", path, (long long)lineno);
        } else if (strcmp(metric, out->metric) != 0 || strcmp(counter, out->counter) != 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "'%s':%lld: metric '%s' counted by '%s' in a file whose first row has '%s' "
                                              "counted by '%s'", path, (long long)lineno, metric, counter, out->metric,
                          out->counter);
        } else if (json_is_array(sm) && json_array_size(sm) > 0) {
            if (out->n == out->cap) {
                const int nc = out->cap ? out->cap * 2 : 64;
                runcmp_sample_row *r = realloc(out->rows, (size_t)nc * sizeof *r);
                if (r == NULL) st = kv_error(KV_ERR_OOM, "compare: out of memory");
                else {
                    out->rows = r;
                    out->cap = nc;
                }
            }
            if (st == KV_OK) {
                runcmp_sample_row *r = &out->rows[out->n];
                memset(r, 0, sizeof *r);
                snprintf(r->case_id, sizeof r->case_id, "%s", cid);
                snprintf(r->backend, sizeof r->backend, "%s", be);
                snprintf(r->variant, sizeof r->variant, "%s", va);
                snprintf(r->key, sizeof r->key, "%s\t%s\t%s", cid, be, va);
                r->s = malloc(json_array_size(sm) * sizeof *r->s);
                if (r->s == NULL) st = kv_error(KV_ERR_OOM, "compare: out of memory");
                for (size_t i = 0; st == KV_OK && i < json_array_size(sm); i++) {
                    const json_t *v = json_array_get(sm, i);
                    if (!json_is_integer(v) || json_integer_value(v) < 0) {
                        st = kv_error(KV_ERR_INVALID_ARG, "'%s':%lld: %s[%zu] is not a count of %s", path,
                                      (long long)lineno, skey, i, counted ? "instructions" : "ns");
                        break;
                    }
                    r->s[r->n++] = (double)json_integer_value(v);
                }
                out->n++;
            }
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    return st;
}

static int runcmp_cmp_key(const void *a, const void *b) {
    return strcmp(((const runcmp_sample_row *)a)->key, ((const runcmp_sample_row *)b)->key);
}

/* (p75 - p25) / median of samples (sorted in place). */
static double runcmp_spread(double *s, int n) {
    const double med = kv_runcmp_median(s, n);
    return med > 0.0 ? (runcmp_quantile(s, n, 0.75) - runcmp_quantile(s, n, 0.25)) / med : 0.0;
}

static kv_status runcmp_perf_push(kv_runcmp_result *res, const kv_runcmp_perf *p) {
    if (res->nperf == res->capperf) {
        const int cap = res->capperf ? res->capperf * 2 : 64;
        kv_runcmp_perf *v = realloc(res->perf, (size_t)cap * sizeof *v);
        if (v == NULL) return kv_error(KV_ERR_OOM, "compare: out of memory");
        res->perf = v;
        res->capperf = cap;
    }
    res->perf[res->nperf++] = *p;
    return KV_OK;
}

/* One pair's verdict. Time: significant when the Mann-Whitney U test says
 * so, a regression when also slower by more than the threshold.
 * Instructions (counted): a count is the same on every run of one
 * binary, so any change is real (significant) and one over the threshold
 * is a regression; there is no p-value (NaN). */
static void runcmp_pair(const runcmp_sample_row *a, const runcmp_sample_row *b, const kv_runcmp_policy *pol,
                        bool counted, kv_runcmp_perf *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->case_id, sizeof p->case_id, "%s", b->case_id);
    snprintf(p->backend, sizeof p->backend, "%s", b->backend);
    snprintf(p->variant, sizeof p->variant, "%s", b->variant);
    p->p = counted ? NAN : kv_runcmp_mann_whitney_p(a->s, a->n, b->s, b->n);
    p->old_n = a->n;
    p->new_n = b->n;
    p->old_spread = runcmp_spread(a->s, a->n);
    p->new_spread = runcmp_spread(b->s, b->n);
    p->old_median = kv_runcmp_median(a->s, a->n);
    p->new_median = kv_runcmp_median(b->s, b->n);
    p->change = p->old_median > 0.0 ? p->new_median / p->old_median - 1.0 : 0.0;
    p->significant = counted ? p->change != 0.0 : p->p < pol->perf_alpha;
    p->regression = p->significant && p->change > pol->perf_threshold;
    p->improvement = p->significant && p->change < -pol->perf_threshold;
}

/* Median and 90th percentile of v[n] (sorted in place). */
static void runcmp_summary(double *v, int n, double *med, double *p90) {
    *med = kv_runcmp_median(v, n);
    *p90 = runcmp_quantile(v, n, 0.9);
}

kv_status kv_runcmp_perf_dirs(const char *old_dir, const char *new_dir, kv_runcmp_result *res) {
    char *pa = kv_report_dup_join(old_dir, "/perf.jsonl");
    char *pb = kv_report_dup_join(new_dir, "/perf.jsonl");
    if (pa == NULL || pb == NULL) {
        free(pa);
        free(pb);
        return kv_error(KV_ERR_OOM, "compare: out of memory");
    }
    FILE *fa = fopen(pa, "r"), *fb = fopen(pb, "r");
    const bool both = fa != NULL && fb != NULL;
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    runcmp_samples a = { 0 }, b = { 0 };
    kv_status st = KV_OK;
    if (both) {
        st = runcmp_read_perf(pa, &a);
        if (st == KV_OK) st = runcmp_read_perf(pb, &b);
    }
    free(pa);
    free(pb);
    if (st != KV_OK || !both) {
        runcmp_samples_free(&a);
        runcmp_samples_free(&b);
        return st;
    }
    if (a.have_metric && b.have_metric &&
        (strcmp(a.metric, b.metric) != 0 || strcmp(a.counter, b.counter) != 0)) {
        /* A time and a count, or counts of two sources (a VM's guest code
         * against the CPU's retired instructions), are not one quantity. */
        st = kv_error(KV_ERR_INVALID_ARG, "the perf runs' fingerprints differ: %s: '%s' -> '%s'%s",
                      strcmp(a.metric, b.metric) != 0 ? "metric" : "counter",
                      strcmp(a.metric, b.metric) != 0 ? a.metric : a.counter,
                      strcmp(a.metric, b.metric) != 0 ? b.metric : b.counter,
                      strcmp(a.metric, b.metric) != 0 ? " (a time and an instruction count are not comparable; run "
                                                        "both with the same --perf-metric)"
                                                      : " (two sources count differently; pick one with "
                                                        "--perf-metric=instructions:SOURCE)");
        runcmp_samples_free(&a);
        runcmp_samples_free(&b);
        return st;
    }
    res->perf_compared = true;
    const bool counted = strcmp(b.have_metric ? b.metric : a.metric, "instructions") == 0;
    snprintf(res->perf_metric, sizeof res->perf_metric, "%s", counted ? "instructions" : "time");
    snprintf(res->perf_counter, sizeof res->perf_counter, "%s", b.have_metric ? b.counter : a.counter);
    qsort(a.rows, (size_t)a.n, sizeof *a.rows, runcmp_cmp_key);
    double *spread = malloc((size_t)(2 * b.n + 1) * sizeof *spread);
    double *calm = malloc((size_t)(b.n + 1) * sizeof *calm);
    int ns = 0, nc = 0;
    if (spread == NULL || calm == NULL) st = kv_error(KV_ERR_OOM, "compare: out of memory");
    for (int i = 0; st == KV_OK && i < b.n; i++) {
        const runcmp_sample_row *old = bsearch(&b.rows[i], a.rows, (size_t)a.n, sizeof *a.rows, runcmp_cmp_key);
        if (old == NULL) continue;
        kv_runcmp_perf p;
        runcmp_pair(old, &b.rows[i], res->policy, counted, &p);
        spread[ns++] = p.old_spread;
        spread[ns++] = p.new_spread;
        if (!p.significant) calm[nc++] = fabs(p.change);
        res->perf_regressions += p.regression;
        res->perf_improvements += p.improvement;
        st = runcmp_perf_push(res, &p);
    }
    if (st == KV_OK) {
        runcmp_summary(spread, ns, &res->noise_median, &res->noise_p90);
        runcmp_summary(calm, nc, &res->drift_median, &res->drift_p90);
        res->drift_pairs = nc;
    }
    free(spread);
    free(calm);
    runcmp_samples_free(&a);
    runcmp_samples_free(&b);
    return st;
}
