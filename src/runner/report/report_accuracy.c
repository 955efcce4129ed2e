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

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runner/check/ulp_hist.h"

#define ACC_PREFIX "accuracy:"

#define ACC_LABEL_MAX 160

typedef struct acc_group {
    char op[ACC_LABEL_MAX];      /* the op, and its args when the case has any: "gelu (approximate=tanh)" */
    kv_dtype dtype;
    const char *variant;         /* "CPU/avx2", "SIM" */
    int64_t cases, failed, elements;
    double max;
    int64_t hist[KV_ULP_BINS];
} acc_group;

typedef struct acc_table {
    acc_group *g;
    int n, cap;
} acc_table;

static bool acc_row(const kv_check_result *r) {
    return strncmp(r->check, ACC_PREFIX, strlen(ACC_PREFIX)) == 0 && r->ulp_elements > 0;
}

/* The op with the case's args= (from its ID, where pairs are joined by
 * ';'), so gelu's two approximations and pow's exponents get rows of their
 * own. */
static void acc_label(const kv_check_result *r, char *buf, int cap) {
    const char *a = strstr(r->case_id, ",args=");
    if (a == NULL) a = strstr(r->case_id, "(args=");
    if (a == NULL) {
        snprintf(buf, (size_t)cap, "%s", r->op);
        return;
    }
    a += strlen(",args=");
    size_t n = strcspn(a, ",)");
    snprintf(buf, (size_t)cap, "%s (%.*s)", r->op, (int)n, a);
}

static int acc_cmp(const void *pa, const void *pb) {
    const acc_group *a = pa, *b = pb;
    int c = strcmp(a->op, b->op);
    if (c == 0) c = (int)a->dtype - (int)b->dtype;
    if (c == 0) c = strcmp(a->variant, b->variant);
    return c;
}

static kv_status acc_collect(const kv_result_list *results, acc_table *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < results->n; i++) {
        const kv_check_result *r = &results->items[i];
        if (!acc_row(r)) continue;
        const char *variant = r->check + strlen(ACC_PREFIX);
        char label[ACC_LABEL_MAX];
        acc_label(r, label, (int)sizeof label);
        acc_group *g = NULL;
        for (int j = 0; j < t->n && g == NULL; j++)
            if (strcmp(t->g[j].op, label) == 0 && t->g[j].dtype == r->dtype && strcmp(t->g[j].variant, variant) == 0)
                g = &t->g[j];
        if (g == NULL) {
            if (t->n == t->cap) {
                const int cap = t->cap ? 2 * t->cap : 64;
                acc_group *ng = realloc(t->g, (size_t)cap * sizeof *ng);
                if (ng == NULL) return kv_error(KV_ERR_OOM, "accuracy report: out of memory");
                t->g = ng;
                t->cap = cap;
            }
            g = &t->g[t->n++];
            memset(g, 0, sizeof *g);
            snprintf(g->op, sizeof g->op, "%s", label);
            g->dtype = r->dtype;
            g->variant = variant;
        }
        g->cases++;
        if (kv_result_status_is_bad(r->status)) g->failed++;
        g->elements += r->ulp_elements;
        if (r->ulp_max > g->max) g->max = r->ulp_max;
        for (int b = 0; b < KV_ULP_BINS; b++) g->hist[b] += r->ulp_hist[b];
    }
    if (t->n > 1) qsort(t->g, (size_t)t->n, sizeof *t->g, acc_cmp);
    return KV_OK;
}

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

static kv_status acc_write(const kv_result_list *results, const char *path, bool md) {
    acc_table t;
    kv_status st = acc_collect(results, &t);
    if (st != KV_OK || t.n == 0) {
        free(t.g);
        return st;
    }
    kv_report_file rf;
    st = kv_report_file_open(&rf, path);
    if (st == KV_OK) {
        if (md) acc_write_md(rf.f, &t);
        else st = acc_write_jsonl(rf.f, &t);
        if (st == KV_OK) st = kv_report_file_close(&rf);
        else kv_report_file_discard(&rf);
    }
    free(t.g);
    return st;
}

kv_status kv_report_write_accuracy(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    (void)meta;
    return acc_write(results, path, true);
}

kv_status kv_report_write_accuracy_jsonl(const kv_result_list *results, const kv_report_meta *meta,
                                         const char *path) {
    (void)meta;
    return acc_write(results, path, false);
}
