/* report.html: one self-contained page (inline CSS and SVG, no script, no
 * network) in this order: run summary, the failures with their mismatch
 * tables (the first HTML_MAX_PROBLEMS), the op x dtype matrix (worst status
 * per cell), the op x backend support matrix, per-op counts, histograms of
 * the error maxima per check (log scale), and a pointer to results.jsonl,
 * which keeps the full row list (the page stays well under 1 MB for the
 * green suite). All text from results goes through kv_report_put_escaped. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *status_color(kv_result_status s) {
    switch (s) {
    case KV_RESULT_PASS: return "#c8e6c9";
    case KV_RESULT_FAIL: return "#ef9a9a";
    case KV_RESULT_ERROR: return "#ffab91";
    case KV_RESULT_UNSUPPORTED: return "#e0e0e0";
    case KV_RESULT_SKIP: return "#f5f5f5";
    case KV_RESULT_CRASH: return "#ce93d8";
    case KV_RESULT_TIMEOUT: return "#ffcc80";
    case KV_RESULT_XFAIL: return "#fff59d";
    case KV_RESULT_XPASS: return "#ffe082";
    case KV_RESULT_FLAKY: return "#b3e5fc";
    case KV_RESULT_STATUS_COUNT: break;
    }
    return "#ffffff";
}

static void put_style(FILE *f) {
    fputs("<style>\n"
          "body{font-family:sans-serif;margin:1.5em;color:#222}\n"
          "table{border-collapse:collapse;margin:.5em 0}\n"
          "td,th{border:1px solid #bbb;padding:2px 6px;text-align:left;vertical-align:top}\n"
          "th{background:#eee}\n"
          "pre{background:#f7f7f7;padding:4px;white-space:pre-wrap;word-break:break-all;margin:.3em 0}\n"
          "code{word-break:break-all}\n"
          ".problem{border-left:6px solid #c62828;padding-left:.8em;margin:1em 0}\n"
          ".num{text-align:right;font-variant-numeric:tabular-nums}\n"
          ".final{font-weight:bold;font-size:1.1em}\n",
          f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        fprintf(f, ".st-%s{background:%s}\n", kv_result_status_name((kv_result_status)s),
                status_color((kv_result_status)s));
    fputs("</style>\n", f);
}

static void put_status_cell(FILE *f, kv_result_status s) {
    const char *name = kv_result_status_name(s);
    fprintf(f, "<td class=\"st-%s\">%s</td>", name, name);
}

static void put_head(FILE *f, const kv_result_list *results, const kv_report_meta *meta) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>kvsuite report", f);
    if (meta->run_name[0]) {
        fputs(": ", f);
        kv_report_put_escaped(f, meta->run_name, false);
    }
    fputs("</title>\n", f);
    put_style(f);
    fputs("</head>\n<body>\n<h1>kvsuite report", f);
    if (meta->run_name[0]) {
        fputs(": ", f);
        kv_report_put_escaped(f, meta->run_name, false);
    }
    fputs("</h1>\n", f);
    char inc[512];
    if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) {
        fputs("<p class=\"problem\"><b>", f);
        kv_report_put_escaped(f, inc, false);
        fputs("</b></p>\n", f);
    }
    fputs("<table>\n", f);
    char buf[64];
    kv_report_fmt_time(meta->start_time, buf, sizeof buf);
    fprintf(f, "<tr><th>started</th><td>%s</td></tr>\n", buf);
    fprintf(f, "<tr><th>wall time</th><td>%.2f s</td></tr>\n", meta->wall_seconds);
    fprintf(f, "<tr><th>seed</th><td>%llu</td></tr>\n", (unsigned long long)meta->seed);
    fprintf(f, "<tr><th>cases</th><td>%lld</td></tr>\n", (long long)meta->ncases);
    fprintf(f, "<tr><th>results</th><td>%d</td></tr>\n", results->n);
    if (meta->shard_n > 0) fprintf(f, "<tr><th>shard</th><td>%d/%d</td></tr>\n", meta->shard_k, meta->shard_n);
    if (meta->merged_from > 0)
        fprintf(f, "<tr><th>merged from</th><td>%d report folders</td></tr>\n", meta->merged_from);
    fputs("<tr><th>options</th><td><code>", f);
    kv_report_put_escaped(f, meta->options, false);
    fputs("</code></td></tr>\n</table>\n", f);
}

static void put_summary(FILE *f, const kv_result_list *results) {
    int64_t c[KV_RESULT_STATUS_COUNT];
    kv_result_list_counts(results, c);
    fputs("<h2 id=\"summary\">Summary</h2>\n<table>\n<tr>", f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) fprintf(f, "<th>%s</th>", kv_result_status_name((kv_result_status)s));
    fputs("</tr>\n<tr>", f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        fprintf(f, "<td class=\"num%s%s\">%lld</td>", c[s] ? " st-" : "", c[s] ? kv_result_status_name((kv_result_status)s) : "",
                (long long)c[s]);
    fputs("</tr>\n</table>\n", f);
    kv_report_totals t = kv_report_totals_of(results);
    fprintf(f, "<p class=\"final\">%lld passed, %lld failed, %lld skipped", (long long)t.passed,
            (long long)t.failed, (long long)t.skipped);
    if (t.flaky > 0) fprintf(f, ", %lld flaky", (long long)t.flaky);
    fputs("</p>\n", f);
    if (c[KV_RESULT_XPASS] > 0)
        fprintf(f, "<p>The baseline is stale: %lld unexpected pass(es) (XPASS); remove those entries from the baseline file.</p>\n",
                (long long)c[KV_RESULT_XPASS]);
    if (results->n == 0) fputs("<p>No results: the run selected no cases.</p>\n", f);
}

static void put_double_cell(FILE *f, double v, bool ulp) {
    char buf[40];
    if (ulp && v < 0) snprintf(buf, sizeof buf, "n/a");
    else kv_report_fmt_double(v, buf, sizeof buf);
    fprintf(f, "<td class=\"num\">%s</td>", buf);
}

static void put_problem(FILE *f, const kv_check_result *r) {
    fputs("<div class=\"problem\">\n<h3>", f);
    fprintf(f, "<span class=\"st-%s\">%s</span> <code>", kv_result_status_name(r->status), kv_result_status_name(r->status));
    kv_report_put_escaped(f, r->case_id, false);
    fputs("</code></h3>\n<table><tr><th>check</th><th>backend</th><th>dtype</th><th>seconds</th></tr>\n<tr><td>", f);
    kv_report_put_escaped(f, r->check, false);
    fputs("</td><td>", f);
    kv_report_put_escaped(f, r->backend, false);
    fprintf(f, "</td><td>%s</td><td class=\"num\">%.3f</td></tr></table>\n", kv_dtype_name(r->dtype), r->seconds);
    if (r->status == KV_RESULT_XPASS && !r->message[0])
        fputs("<p>Passed, but the baseline expects it to fail: the baseline entry is stale.</p>\n", f);
    if (r->message[0]) {
        fputs("<pre>", f);
        kv_report_put_escaped(f, r->message, false);
        fputs("</pre>\n", f);
    }
    /* Once: the checks' messages already say "N of M elements differ". */
    if ((r->compared > 0 || r->mismatched > 0) && strstr(r->message, "elements differ") == NULL) {
        char a[40], u[40];
        kv_report_fmt_double(r->max_abs_err, a, sizeof a);
        if (r->max_ulps < 0) snprintf(u, sizeof u, "n/a");
        else kv_report_fmt_double(r->max_ulps, u, sizeof u);
        fprintf(f, "<p>%lld of %lld elements differ; max abs err %s, max ulp %s.</p>\n", (long long)r->mismatched,
                (long long)r->compared, a, u);
    }
    int nm = r->nmismatches < 0 ? 0 : (r->nmismatches > KV_RESULT_MAX_MISMATCHES ? KV_RESULT_MAX_MISMATCHES : r->nmismatches);
    if (nm > 0) {
        fputs("<table><tr><th>index</th><th>expected</th><th>got</th><th>abs err</th><th>rel err</th><th>ulp</th></tr>\n", f);
        for (int i = 0; i < nm; i++) {
            const kv_mismatch *m = &r->mismatches[i];
            char idx[8 * 24];
            kv_report_fmt_index(m, idx, sizeof idx);
            fprintf(f, "<tr><td><code>%s</code></td>", idx);
            put_double_cell(f, m->expected, false);
            put_double_cell(f, m->got, false);
            put_double_cell(f, m->abs_err, false);
            put_double_cell(f, m->rel_err, false);
            put_double_cell(f, m->ulps, true);
            fputs("</tr>\n", f);
        }
        fputs("</table>\n", f);
        if (r->mismatched > nm) fprintf(f, "<p>... and %lld more.</p>\n", (long long)(r->mismatched - nm));
    }
    if (r->repro[0]) {
        fputs("<p>repro:</p><pre>", f);
        kv_report_put_escaped(f, r->repro, false);
        fputs("</pre>\n", f);
    }
    fputs("</div>\n", f);
}

/* Failures shown in full; the rest are counted (a run with thousands of
 * failures would otherwise make a page nobody can open). */
#define HTML_MAX_PROBLEMS 200

static void put_failures(FILE *f, const kv_result_list *results) {
    fputs("<h2 id=\"failures\">Failures</h2>\n", f);
    int n = 0;
    for (int i = 0; i < results->n; i++) {
        if (!kv_result_status_is_bad(results->items[i].status)) continue;
        if (n++ < HTML_MAX_PROBLEMS) put_problem(f, &results->items[i]);
    }
    if (n == 0) fputs("<p>None.</p>\n", f);
    if (n > HTML_MAX_PROBLEMS)
        fprintf(f, "<p>... and %d more failing rows: every one is in <code>" KV_REPORT_FAILURES "</code> and <code>"
                   KV_REPORT_JSONL "</code>.</p>\n", n - HTML_MAX_PROBLEMS);
    /* Flakes right after: they passed on a retry, but how they failed
     * first is what someone fixing the kernel needs. Only when there are
     * some, so a run without --retry reads as before. */
    int nf = 0;
    for (int i = 0; i < results->n; i++) {
        if (results->items[i].status != KV_RESULT_FLAKY) continue;
        if (nf++ == 0) fputs("<h2 id=\"flaky\">Flaky (failed, then passed on a retry)</h2>\n", f);
        if (nf <= HTML_MAX_PROBLEMS) put_problem(f, &results->items[i]);
    }
    if (nf > HTML_MAX_PROBLEMS)
        fprintf(f, "<p>... and %d more flaky rows, in <code>" KV_REPORT_JSONL "</code>.</p>\n", nf - HTML_MAX_PROBLEMS);
}

/* ---- op x dtype matrix ---- */

typedef struct op_ref {
    const char *op; /* points into a result */
} op_ref;

static int cmp_op(const void *a, const void *b) {
    return strcmp(((const op_ref *)a)->op, ((const op_ref *)b)->op);
}

/* One entry per distinct op, sorted by name; *nops gets the count and
 * ops_of[i] the position of result i's op in the array. */
static op_ref *distinct_ops(const kv_result_list *results, int *nops, int *ops_of) {
    op_ref *ops = malloc(((size_t)results->n + 1) * sizeof *ops);
    if (ops == NULL) return NULL;
    int n = 0;
    for (int i = 0; i < results->n; i++) {
        int k = 0;
        while (k < n && strcmp(ops[k].op, results->items[i].op) != 0) k++;
        if (k == n) ops[n++] = (op_ref){ results->items[i].op };
    }
    qsort(ops, (size_t)n, sizeof *ops, cmp_op);
    for (int i = 0; i < results->n; i++) {
        int lo = 0, hi = n - 1;
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (strcmp(ops[mid].op, results->items[i].op) < 0) lo = mid + 1;
            else hi = mid;
        }
        ops_of[i] = lo;
    }
    *nops = n;
    return ops;
}

static kv_status put_matrix(FILE *f, const kv_result_list *results, const char *path) {
    fputs("<h2 id=\"matrix\">Op &#215; dtype</h2>\n", f);
    if (results->n == 0) {
        fputs("<p>No results.</p>\n", f);
        return KV_OK;
    }
    int nops = 0;
    int *ops_of = malloc((size_t)results->n * sizeof *ops_of);
    op_ref *reps = ops_of ? distinct_ops(results, &nops, ops_of) : NULL;
    /* worst[op * KV_DTYPE_COUNT + dt]: -1 for no result. */
    int *worst = reps ? malloc((size_t)nops * KV_DTYPE_COUNT * sizeof *worst) : NULL;
    int64_t *count = worst ? calloc((size_t)nops * KV_DTYPE_COUNT, sizeof *count) : NULL;
    if (count == NULL) {
        free(ops_of);
        free(reps);
        free(worst);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    bool used[KV_DTYPE_COUNT] = { false };
    for (int i = 0; i < nops * KV_DTYPE_COUNT; i++) worst[i] = -1;
    for (int i = 0; i < results->n; i++) {
        const kv_check_result *r = &results->items[i];
        if ((int)r->dtype < 0 || r->dtype >= KV_DTYPE_COUNT) continue;
        int cell = ops_of[i] * KV_DTYPE_COUNT + (int)r->dtype;
        used[r->dtype] = true;
        count[cell]++;
        if (worst[cell] < 0 || kv_result_status_severity(r->status) > kv_result_status_severity((kv_result_status)worst[cell]))
            worst[cell] = (int)r->status;
    }
    fputs("<table>\n<tr><th>op</th>", f);
    for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
        if (used[d]) fprintf(f, "<th>%s</th>", kv_dtype_name((kv_dtype)d));
    fputs("</tr>\n", f);
    for (int o = 0; o < nops; o++) {
        fputs("<tr><th><code>", f);
        kv_report_put_escaped(f, reps[o].op, false);
        fputs("</code></th>", f);
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++) {
            if (!used[d]) continue;
            int cell = o * KV_DTYPE_COUNT + d;
            if (worst[cell] < 0) {
                fputs("<td></td>", f);
                continue;
            }
            const char *name = kv_result_status_name((kv_result_status)worst[cell]);
            fprintf(f, "<td class=\"st-%s\" title=\"worst of %lld results\">%s</td>", name, (long long)count[cell], name);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
    free(ops_of);
    free(reps);
    free(worst);
    free(count);
    return KV_OK;
}

/* ---- error histograms ---- */

#define HIST_MAX_BINS 24

/* Counts by decade of |v|: bin k holds 10^(lo+k) <= v < 10^(lo+k+1); exact
 * zeros and non-finite values get their own bars at the ends. */
static void put_histogram(FILE *f, const char *title, const double *v, int n) {
    int64_t zero = 0, nonfinite = 0, bins[HIST_MAX_BINS] = { 0 };
    int lo = 0, hi = 0;
    bool any = false;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) continue;
        double a = fabs(v[i]);
        if (a == 0) continue;
        int d = (int)floor(log10(a));
        if (!any || d < lo) lo = d;
        if (!any || d > hi) hi = d;
        any = true;
    }
    /* Keep the top decades when the span is too wide: large errors matter. */
    if (hi - lo + 1 > HIST_MAX_BINS) lo = hi - HIST_MAX_BINS + 1;
    int nb = any ? hi - lo + 1 : 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            nonfinite++;
        } else if (v[i] == 0) {
            zero++;
        } else {
            int d = (int)floor(log10(fabs(v[i]))) - lo;
            bins[d < 0 ? 0 : d]++;
        }
    }
    const int nbars = nb + 2, barw = 34, plot_h = 120, top = 28, left = 10;
    /* Wide enough for the title (about 7 px a character at 13 px). */
    const int title_w = left * 2 + 7 * ((int)strlen(title) + 30);
    const int width = left * 2 + nbars * barw > title_w ? left * 2 + nbars * barw : title_w;
    const int height = top + plot_h + 40;
    int64_t maxc = zero > nonfinite ? zero : nonfinite;
    for (int i = 0; i < nb; i++)
        if (bins[i] > maxc) maxc = bins[i];
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", width, height);
    fputs("<title>", f);
    kv_report_put_escaped(f, title, false);
    fputs("</title>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"16\" font-size=\"13\">", left);
    kv_report_put_escaped(f, title, false);
    fprintf(f, " (%d results; bar height: log scale)</text>\n", n);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n", left, top + plot_h, width - left,
            top + plot_h);
    for (int b = 0; b < nbars; b++) {
        int64_t c;
        char label[16];
        const char *color = "#5c6bc0";
        if (b == 0) {
            c = zero;
            snprintf(label, sizeof label, "0");
            color = "#66bb6a";
        } else if (b == nbars - 1) {
            c = nonfinite;
            snprintf(label, sizeof label, "inf/nan");
            color = "#ef5350";
        } else {
            c = bins[b - 1];
            snprintf(label, sizeof label, "1e%d", lo + b - 1);
        }
        /* Log scale: 4 bad results beside 15,982 good ones stay visible. */
        int h = maxc > 0 ? (int)(log10(1.0 + (double)c) * plot_h / log10(1.0 + (double)maxc) + 0.5) : 0;
        int x = left + b * barw;
        if (c > 0 && h < 1) h = 1;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", x + 3, top + plot_h - h,
                barw - 6, h, color);
        if (c > 0)
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%lld</text>\n", x + barw / 2,
                    top + plot_h - h - 3, (long long)c);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"9\" text-anchor=\"middle\">%s</text>\n", x + barw / 2,
                top + plot_h + 14, label);
    }
    fputs("</svg>\n", f);
}

/* Checks are plotted by family: "variants:cpu/ref" and "variants:sim/x"
 * share one plot, since a per-variant plot would hold a handful of points. */
static void family_of(const char *check, char *buf, size_t cap) {
    size_t n = strcspn(check, ":");
    if (n >= cap) n = cap - 1;
    memcpy(buf, check, n);
    buf[n] = '\0';
}

static kv_status put_plots(FILE *f, const kv_result_list *results, const char *path) {
    fputs("<h2 id=\"errors\">Error distributions</h2>\n"
          "<p>Per check, the maximum error of each compared result, by decade: ULP distance (where the "
          "dtype has ULPs) and absolute error. Bar heights are on a log scale (the count is written on each "
          "bar); green: exactly 0, blue: by decade, red: inf or NaN.</p>\n",
          f);
    double *ulps = malloc(((size_t)results->n + 1) * sizeof *ulps);
    double *abs = malloc(((size_t)results->n + 1) * sizeof *abs);
    int *fam_rep = malloc(((size_t)results->n + 1) * sizeof *fam_rep);
    if (ulps == NULL || abs == NULL || fam_rep == NULL) {
        free(ulps);
        free(abs);
        free(fam_rep);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    int nfam = 0;
    char fam[32], other[32];
    for (int i = 0; i < results->n; i++) {
        if (results->items[i].compared <= 0) continue;
        family_of(results->items[i].check, fam, sizeof fam);
        int k = 0;
        for (; k < nfam; k++) {
            family_of(results->items[fam_rep[k]].check, other, sizeof other);
            if (strcmp(fam, other) == 0) break;
        }
        if (k == nfam) fam_rep[nfam++] = i;
    }
    if (nfam == 0) fputs("<p>No comparisons in this run.</p>\n", f);
    for (int k = 0; k < nfam; k++) {
        family_of(results->items[fam_rep[k]].check, fam, sizeof fam);
        int nu = 0, na = 0;
        for (int i = 0; i < results->n; i++) {
            const kv_check_result *r = &results->items[i];
            if (r->compared <= 0) continue;
            family_of(r->check, other, sizeof other);
            if (strcmp(fam, other) != 0) continue;
            if (r->max_ulps >= 0 || isnan(r->max_ulps)) ulps[nu++] = r->max_ulps;
            abs[na++] = r->max_abs_err;
        }
        fputs("<h3><code>", f);
        kv_report_put_escaped(f, fam, false);
        fputs("</code></h3>\n<div>\n", f);
        char title[96];
        if (nu > 0) {
            snprintf(title, sizeof title, "%s: max ULP", fam);
            put_histogram(f, title, ulps, nu);
        }
        snprintf(title, sizeof title, "%s: max abs err", fam);
        put_histogram(f, title, abs, na);
        fputs("</div>\n", f);
    }
    free(ulps);
    free(abs);
    free(fam_rep);
    return KV_OK;
}

/* ---- op x backend support matrix and per-op summaries ---- */

/* The distinct backends, in order of first appearance (few: cpu, sim,
 * accel, plugins). */
#define HTML_MAX_BACKENDS 16

static int backend_index(const char *names[HTML_MAX_BACKENDS], int *n, const char *b) {
    for (int i = 0; i < *n; i++)
        if (strcmp(names[i], b) == 0) return i;
    if (*n == HTML_MAX_BACKENDS) return -1;
    names[*n] = b;
    return (*n)++;
}

static kv_status put_backend_matrix_and_ops(FILE *f, const kv_result_list *results, const char *path) {
    if (results->n == 0) return KV_OK;
    int nops = 0, nb = 0;
    const char *bnames[HTML_MAX_BACKENDS];
    int *ops_of = malloc((size_t)results->n * sizeof *ops_of);
    op_ref *reps = ops_of ? distinct_ops(results, &nops, ops_of) : NULL;
    int *worst = reps ? malloc((size_t)nops * HTML_MAX_BACKENDS * sizeof *worst) : NULL;
    int64_t *per_op = worst ? calloc((size_t)nops * KV_RESULT_STATUS_COUNT, sizeof *per_op) : NULL;
    double *secs = per_op ? calloc((size_t)nops, sizeof *secs) : NULL;
    if (secs == NULL) {
        free(ops_of);
        free(reps);
        free(worst);
        free(per_op);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    for (int i = 0; i < nops * HTML_MAX_BACKENDS; i++) worst[i] = -1;
    for (int i = 0; i < results->n; i++) {
        const kv_check_result *r = &results->items[i];
        if ((int)r->status >= 0 && r->status < KV_RESULT_STATUS_COUNT)
            per_op[(size_t)ops_of[i] * KV_RESULT_STATUS_COUNT + r->status]++;
        secs[ops_of[i]] += r->seconds;
        const int b = backend_index(bnames, &nb, r->backend);
        if (b < 0) continue;
        int *w = &worst[ops_of[i] * HTML_MAX_BACKENDS + b];
        if (*w < 0 || kv_result_status_severity(r->status) > kv_result_status_severity((kv_result_status)*w))
            *w = (int)r->status;
    }
    fputs("<h2 id=\"support\">Support matrix: op &#215; backend</h2>\n"
          "<p>Worst status over every row of the op on the backend (UNSUPPORTED: the backend lacks the kernel).</p>\n"
          "<table>\n<tr><th>op</th>",
          f);
    for (int b = 0; b < nb; b++) {
        fputs("<th>", f);
        kv_report_put_escaped(f, bnames[b], false);
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (int o = 0; o < nops; o++) {
        fputs("<tr><th><code>", f);
        kv_report_put_escaped(f, reps[o].op, false);
        fputs("</code></th>", f);
        for (int b = 0; b < nb; b++) {
            const int w = worst[o * HTML_MAX_BACKENDS + b];
            if (w < 0) fputs("<td></td>", f);
            else put_status_cell(f, (kv_result_status)w);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);

    fputs("<h2 id=\"ops\">Per-op summary</h2>\n<table>\n<tr><th>op</th>", f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) fprintf(f, "<th>%s</th>", kv_result_status_name((kv_result_status)s));
    fputs("<th>rows</th><th>seconds</th></tr>\n", f);
    for (int o = 0; o < nops; o++) {
        fputs("<tr><th><code>", f);
        kv_report_put_escaped(f, reps[o].op, false);
        fputs("</code></th>", f);
        int64_t total = 0;
        for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) {
            const int64_t c = per_op[(size_t)o * KV_RESULT_STATUS_COUNT + s];
            total += c;
            if (c == 0) fputs("<td class=\"num\"></td>", f);
            else fprintf(f, "<td class=\"num st-%s\">%lld</td>", kv_result_status_name((kv_result_status)s), (long long)c);
        }
        fprintf(f, "<td class=\"num\">%lld</td><td class=\"num\">%.3f</td></tr>\n", (long long)total, secs[o]);
    }
    fputs("</table>\n", f);
    free(ops_of);
    free(reps);
    free(worst);
    free(per_op);
    free(secs);
    return KV_OK;
}

/* The full row list stays in results.jsonl: a table of every row made a
 * green suite's page 12 MB and slow to render. */
static void put_rows_note(FILE *f, const kv_result_list *results) {
    fprintf(f,
            "<h2 id=\"results\">All results</h2>\n<p>All %d rows (one per case and check) are in "
            "<a href=\"" KV_REPORT_JSONL "\"><code>" KV_REPORT_JSONL "</code></a>, one JSON object per line; the "
            "failing ones are above and in <a href=\"" KV_REPORT_FAILURES "\"><code>" KV_REPORT_FAILURES
            "</code></a>.</p>\n",
            results->n);
}

kv_status kv_report_write_html(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_html: argument 'results': is NULL");
    kv_report_meta empty;
    if (meta == NULL) {
        kv_report_meta_init(&empty);
        meta = &empty;
    }
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    put_head(rf.f, results, meta);
    put_summary(rf.f, results);
    put_failures(rf.f, results);
    st = put_matrix(rf.f, results, path);
    if (st == KV_OK) st = put_backend_matrix_and_ops(rf.f, results, path);
    if (st == KV_OK) st = put_plots(rf.f, results, path);
    if (st != KV_OK) {
        kv_report_file_discard(&rf);
        return st;
    }
    put_rows_note(rf.f, results);
    fputs("</body>\n</html>\n", rf.f);
    return kv_report_file_close(&rf);
}
