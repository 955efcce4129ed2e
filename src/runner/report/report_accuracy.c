/* accuracy.md and accuracy.jsonl: the accuracy check's rows
 * (check_accuracy.c) merged per backend x variant x op x dtype (dtype: the
 * case's first input, the support matrix's column): the histograms are
 * summed, so the 99.9th percentile is over every element of every case of
 * the group, and the maximum is the largest of the rows'. Written only
 * when the run has accuracy rows.
 *
 * accuracy.md holds two tables: one row per group (elements, cases, max,
 * 99.9%, share correctly rounded), and the same figures pivoted into
 * op x dtype rows with one "max / 99.9%" column per backend or variant,
 * the form the README quotes. accuracy.jsonl has one object per group. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/check/ulp_hist.h"

/* A view of the aggregate's groups (report_agg.c gathers them). */
typedef struct acc_table {
    const kv_agg_acc *g;
    int n;
} acc_table;

typedef kv_agg_acc acc_group;

static double acc_p999(const acc_group *g) { return kv_ulp_quantile(g->hist, 0.999, g->max); }

/* The distinct variant names, sorted (CPU's first as they sort). */
static int acc_variants(const acc_table *t, const char **out, int cap) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        bool seen = false;
        for (int j = 0; j < n && !seen; j++) seen = strcmp(out[j], t->g[i].variant) == 0;
        if (!seen && n < cap) out[n++] = t->g[i].variant;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && strcmp(out[j - 1], out[j]) > 0; j--) {
            const char *s = out[j];
            out[j] = out[j - 1];
            out[j - 1] = s;
        }
    return n;
}

static void acc_write_md(FILE *f, const acc_table *t) {
    fprintf(f, "# Accuracy against the correctly rounded truth\n\n");
    fprintf(f, "Error of each kernel in ulps of the output dtype: 0 is correctly rounded; a NaN where the truth "
               "is a number (or the reverse) is `inf`. 99.9%% is the 99.9th percentile over every measured "
               "element of every case of the row.\n\n");
    const char *vs[64];
    const int nv = acc_variants(t, vs, 64);
    fprintf(f, "## Max / 99.9%% ulp\n\n| op | dtype |");
    for (int v = 0; v < nv; v++) fprintf(f, " %s |", vs[v]);
    fprintf(f, "\n| --- | --- |");
    for (int v = 0; v < nv; v++) fprintf(f, " --- |");
    fprintf(f, "\n");
    for (int i = 0; i < t->n;) {
        int j = i;
        while (j < t->n && strcmp(t->g[j].op, t->g[i].op) == 0 && t->g[j].dtype == t->g[i].dtype) j++;
        fprintf(f, "| %s | %s |", t->g[i].op, kv_dtype_name(t->g[i].dtype));
        for (int v = 0; v < nv; v++) {
            const acc_group *g = NULL;
            for (int k = i; k < j && g == NULL; k++)
                if (strcmp(t->g[k].variant, vs[v]) == 0) g = &t->g[k];
            if (g == NULL) {
                fprintf(f, " |");
                continue;
            }
            char a[32], b[32];
            kv_ulp_format(g->max, a, sizeof a);
            kv_ulp_format(acc_p999(g), b, sizeof b);
            fprintf(f, " %s / %s%s |", a, b, g->failed ? " ✗" : "");
        }
        fprintf(f, "\n");
        i = j;
    }
    fprintf(f, "\n## Per backend and variant\n\n");
    fprintf(f, "| op | dtype | backend/variant | cases | elements | max ulp | 99.9%% ulp | correctly rounded |\n");
    fprintf(f, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < t->n; i++) {
        const acc_group *g = &t->g[i];
        char a[32], b[32];
        kv_ulp_format(g->max, a, sizeof a);
        kv_ulp_format(acc_p999(g), b, sizeof b);
        fprintf(f, "| %s | %s | %s | %lld | %lld | %s%s | %s | %.4f%% |\n", g->op, kv_dtype_name(g->dtype),
                g->variant, (long long)g->cases, (long long)g->elements, a, g->failed ? " ✗" : "", b,
                100.0 * (double)g->hist[0] / (double)g->elements);
    }
}

static kv_status acc_write_jsonl(FILE *f, const acc_table *t) {
    for (int i = 0; i < t->n; i++) {
        const acc_group *g = &t->g[i];
        json_t *o = json_object();
        json_t *h = json_object();
        if (o == NULL || h == NULL) {
            json_decref(o);
            json_decref(h);
            return kv_error(KV_ERR_OOM, "accuracy report: out of memory");
        }
        json_object_set_new(o, "op", json_string(g->op));
        json_object_set_new(o, "dtype", json_string(kv_dtype_name(g->dtype)));
        json_object_set_new(o, "variant", json_string(g->variant));
        json_object_set_new(o, "cases", json_integer(g->cases));
        json_object_set_new(o, "failed", json_integer(g->failed));
        json_object_set_new(o, "elements", json_integer(g->elements));
        /* JSON has no infinity: a wrong NaN is null. */
        json_object_set_new(o, "max_ulp", isinf(g->max) ? json_null() : json_real(g->max));
        const double p = acc_p999(g);
        json_object_set_new(o, "p999_ulp", isinf(p) ? json_null() : json_real(p));
        json_object_set_new(o, "nan_mismatches", json_integer(g->hist[KV_ULP_NAN_BIN]));
        /* What the table's "correctly rounded" column shows, as the part
         * that is not (bin 0 holds the exact elements). */
        json_object_set_new(o, "not_correctly_rounded",
                            json_real(g->elements > 0 ? (double)(g->elements - g->hist[0]) / (double)g->elements : 0.0));
        /* Sparse histogram: bin upper end (ulps) -> count. */
        for (int b = 0; b < KV_ULP_NAN_BIN; b++) {
            if (g->hist[b] == 0) continue;
            char k[32];
            snprintf(k, sizeof k, "%.0f", kv_ulp_bin_upper(b));
            json_object_set_new(h, k, json_integer(g->hist[b]));
        }
        json_object_set_new(o, "hist", h);
        char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
        if (s == NULL) return kv_error(KV_ERR_OOM, "accuracy report: out of memory");
        fprintf(f, "%s\n", s);
        free(s);
    }
    return KV_OK;
}

static kv_status acc_write(const kv_report_agg *a, const char *path, bool md) {
    const acc_table t = { a->acc, a->nacc };
    if (t.n == 0) return KV_OK;
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st == KV_OK) {
        if (md) acc_write_md(rf.f, &t);
        else st = acc_write_jsonl(rf.f, &t);
        if (st == KV_OK) st = kv_report_file_close(&rf);
        else kv_report_file_discard(&rf);
    }
    return st;
}

kv_status kv_report_accuracy_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path) {
    (void)meta;
    return acc_write(a, path, true);
}

kv_status kv_report_accuracy_jsonl_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path) {
    (void)meta;
    return acc_write(a, path, false);
}

static kv_status acc_write_list(const kv_result_list *results, const char *path, bool md) {
    kv_report_agg a;
    kv_status st = kv_report_agg_of(&a, results);
    if (st == KV_OK) st = acc_write(&a, path, md);
    kv_report_agg_free(&a);
    return st;
}

kv_status kv_report_write_accuracy(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    (void)meta;
    return acc_write_list(results, path, true);
}

kv_status kv_report_write_accuracy_jsonl(const kv_result_list *results, const kv_report_meta *meta,
                                         const char *path) {
    (void)meta;
    return acc_write_list(results, path, false);
}
