/* report.html: one self-contained page (inline CSS and SVG, no script, no
 * network) in this order: run summary, the failures with their mismatch
 * tables (the first HTML_MAX_PROBLEMS), the op x dtype matrix (worst status
 * per cell), the op x backend support matrix, per-op counts, histograms of
 * the error maxima per check (log scale), and a pointer to results.jsonl,
 * which keeps the full row list (the page stays well under 1 MB for the
 * green suite). All text from results goes through kv_report_put_escaped. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"

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

static void put_head(FILE *f, const kv_report_agg *a, const kv_report_meta *meta) {
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
    fprintf(f, "<tr><th>results</th><td>%lld</td></tr>\n", (long long)a->nrows);
    if (meta->shard_n > 0) fprintf(f, "<tr><th>shard</th><td>%d/%d</td></tr>\n", meta->shard_k, meta->shard_n);
    if (meta->merged_from > 0)
        fprintf(f, "<tr><th>merged from</th><td>%d report folders</td></tr>\n", meta->merged_from);
    fputs("<tr><th>options</th><td><code>", f);
    kv_report_put_escaped(f, meta->options, false);
    fputs("</code></td></tr>\n</table>\n", f);
}

static void put_summary(FILE *f, const kv_report_agg *a) {
    const int64_t *c = a->counts;
    fputs("<h2 id=\"summary\">Summary</h2>\n<table>\n<tr>", f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) fprintf(f, "<th>%s</th>", kv_result_status_name((kv_result_status)s));
    fputs("</tr>\n<tr>", f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        fprintf(f, "<td class=\"num%s%s\">%lld</td>", c[s] ? " st-" : "", c[s] ? kv_result_status_name((kv_result_status)s) : "",
                (long long)c[s]);
    fputs("</tr>\n</table>\n", f);
    kv_report_totals t = kv_report_agg_totals(a);
    fprintf(f, "<p class=\"final\">%lld passed, %lld failed, %lld skipped", (long long)t.passed,
            (long long)t.failed, (long long)t.skipped);
    if (t.flaky > 0) fprintf(f, ", %lld flaky", (long long)t.flaky);
    fputs("</p>\n", f);
    if (c[KV_RESULT_XPASS] > 0)
        fprintf(f, "<p>The baseline is stale: %lld unexpected pass(es) (XPASS); remove those entries from the baseline file.</p>\n",
                (long long)c[KV_RESULT_XPASS]);
    if (a->nrows == 0) fputs("<p>No results: the run selected no cases.</p>\n", f);
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

static void put_failures(FILE *f, const kv_report_agg *a) {
    const kv_result_list *results = &a->kept;
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

/* ---- op x dtype matrix, support matrix, per-op summary ---- */

static int worst_of_seen(unsigned seen) {
    int w = -1;
    for (int st = 0; st < (int)KV_RESULT_STATUS_COUNT; st++)
        if ((seen >> st) & 1u &&
            (w < 0 || kv_result_status_severity((kv_result_status)st) > kv_result_status_severity((kv_result_status)w)))
            w = st;
    return w;
}

/* The ops sorted by name (the aggregate keeps them in order of first
 * appearance). */
static const kv_report_agg *g_sort_agg;
static int cmp_op_index(const void *pa, const void *pb) {
    return strcmp(g_sort_agg->ops[*(const int *)pa].op, g_sort_agg->ops[*(const int *)pb].op);
}

static int *ops_sorted(const kv_report_agg *a) {
    int *order = malloc(((size_t)a->nops + 1) * sizeof *order);
    if (order == NULL) return NULL;
    for (int i = 0; i < a->nops; i++) order[i] = i;
    g_sort_agg = a;
    qsort(order, (size_t)a->nops, sizeof *order, cmp_op_index);
    g_sort_agg = NULL;
    return order;
}

static void put_op_name_cell(FILE *f, const char *op) {
    fputs("<tr><th><code>", f);
    kv_report_put_escaped(f, op, false);
    fputs("</code></th>", f);
}

static void put_matrix(FILE *f, const kv_report_agg *a, const int *order) {
    fputs("<h2 id=\"matrix\">Op &#215; dtype</h2>\n", f);
    if (a->nrows == 0) {
        fputs("<p>No results.</p>\n", f);
        return;
    }
    bool used[KV_DTYPE_COUNT] = { false };
    for (int b = 0; b < a->nopbs; b++)
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++) used[d] |= a->opbs[b].rows[d] > 0;
    fputs("<table>\n<tr><th>op</th>", f);
    for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
        if (used[d]) fprintf(f, "<th>%s</th>", kv_dtype_name((kv_dtype)d));
    fputs("</tr>\n", f);
    for (int k = 0; k < a->nops; k++) {
        const int o = order[k];
        put_op_name_cell(f, a->ops[o].op);
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++) {
            if (!used[d]) continue;
            unsigned seen = 0;
            int64_t count = 0;
            for (int b = 0; b < a->nopbs; b++) {
                if (a->opbs[b].op != o) continue;
                seen |= a->opbs[b].seen[d];
                count += a->opbs[b].rows[d];
            }
            const int w = worst_of_seen(seen);
            if (w < 0) {
                fputs("<td></td>", f);
                continue;
            }
            const char *name = kv_result_status_name((kv_result_status)w);
            fprintf(f, "<td class=\"st-%s\" title=\"worst of %lld results\">%s</td>", name, (long long)count, name);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

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

static void put_backend_matrix_and_ops(FILE *f, const kv_report_agg *a, const int *order) {
    if (a->nrows == 0) return;
    int nb = 0;
    const char *bnames[HTML_MAX_BACKENDS];
    for (int b = 0; b < a->nopbs; b++) backend_index(bnames, &nb, a->opbs[b].backend);
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
    for (int k = 0; k < a->nops; k++) {
        const int o = order[k];
        put_op_name_cell(f, a->ops[o].op);
        for (int b = 0; b < nb; b++) {
            unsigned seen = 0;
            for (int e = 0; e < a->nopbs; e++) {
                if (a->opbs[e].op != o || strcmp(a->opbs[e].backend, bnames[b]) != 0) continue;
                for (int d = 0; d < (int)KV_DTYPE_COUNT; d++) seen |= a->opbs[e].seen[d];
            }
            const int w = worst_of_seen(seen);
            if (w < 0) fputs("<td></td>", f);
            else put_status_cell(f, (kv_result_status)w);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);

    fputs("<h2 id=\"ops\">Per-op summary</h2>\n<table>\n<tr><th>op</th>", f);
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) fprintf(f, "<th>%s</th>", kv_result_status_name((kv_result_status)s));
    fputs("<th>rows</th><th>seconds</th></tr>\n", f);
    for (int k = 0; k < a->nops; k++) {
        const kv_agg_op *op = &a->ops[order[k]];
        put_op_name_cell(f, op->op);
        int64_t total = 0;
        for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) {
            const int64_t c = op->status[s];
            total += c;
            if (c == 0) fputs("<td class=\"num\"></td>", f);
            else fprintf(f, "<td class=\"num st-%s\">%lld</td>", kv_result_status_name((kv_result_status)s), (long long)c);
        }
        fprintf(f, "<td class=\"num\">%lld</td><td class=\"num\">%.3f</td></tr>\n", (long long)total, op->seconds);
    }
    fputs("</table>\n", f);
}

/* ---- error histograms ---- */

#define HIST_MAX_BINS 24

/* Counts by decade of |v|: bin k holds 10^(lo+k) <= v < 10^(lo+k+1); exact
 * zeros and non-finite values get their own bars at the ends. Only the
 * top HIST_MAX_BINS decades get bars of their own (large errors matter);
 * smaller values count in the lowest bar. */
static void put_histogram(FILE *f, const char *title, const kv_agg_dec_hist *h) {
    int lo = 0, hi = -1;
    for (int d = 0; d < KV_AGG_DECADES; d++) {
        if (h->bins[d] == 0) continue;
        if (hi < 0) lo = d;
        hi = d;
    }
    if (hi - lo + 1 > HIST_MAX_BINS) lo = hi - HIST_MAX_BINS + 1;
    const int nb = hi >= 0 ? hi - lo + 1 : 0;
    int64_t bins[HIST_MAX_BINS] = { 0 };
    for (int d = 0; d <= hi; d++) bins[d < lo ? 0 : d - lo] += h->bins[d];
    const int nbars = nb + 2, barw = 34, plot_h = 120, top = 28, left = 10;
    /* Wide enough for the title (about 7 px a character at 13 px). */
    const int title_w = left * 2 + 7 * ((int)strlen(title) + 30);
    const int width = left * 2 + nbars * barw > title_w ? left * 2 + nbars * barw : title_w;
    const int height = top + plot_h + 40;
    int64_t maxc = h->zero > h->nonfinite ? h->zero : h->nonfinite;
    for (int i = 0; i < nb; i++)
        if (bins[i] > maxc) maxc = bins[i];
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" role=\"img\">\n", width, height);
    fputs("<title>", f);
    kv_report_put_escaped(f, title, false);
    fputs("</title>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"16\" font-size=\"13\">", left);
    kv_report_put_escaped(f, title, false);
    fprintf(f, " (%lld results; bar height: log scale)</text>\n", (long long)h->n);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n", left, top + plot_h, width - left,
            top + plot_h);
    const int dec0 = lo + KV_AGG_DEC_LO;
    for (int b = 0; b < nbars; b++) {
        int64_t c;
        char label[16];
        const char *color = "#5c6bc0";
        if (b == 0) {
            c = h->zero;
            snprintf(label, sizeof label, "0");
            color = "#66bb6a";
        } else if (b == nbars - 1) {
            c = h->nonfinite;
            snprintf(label, sizeof label, "inf/nan");
            color = "#ef5350";
        } else {
            c = bins[b - 1];
            snprintf(label, sizeof label, "1e%d", dec0 + b - 1);
        }
        /* Log scale: 4 bad results beside 15,982 good ones stay visible. */
        int bh = maxc > 0 ? (int)(log10(1.0 + (double)c) * plot_h / log10(1.0 + (double)maxc) + 0.5) : 0;
        int x = left + b * barw;
        if (c > 0 && bh < 1) bh = 1;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"/>\n", x + 3, top + plot_h - bh,
                barw - 6, bh, color);
        if (c > 0)
            fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%lld</text>\n", x + barw / 2,
                    top + plot_h - bh - 3, (long long)c);
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"9\" text-anchor=\"middle\">%s</text>\n", x + barw / 2,
                top + plot_h + 14, label);
    }
    fputs("</svg>\n", f);
}

static void put_plots(FILE *f, const kv_report_agg *a) {
    fputs("<h2 id=\"errors\">Error distributions</h2>\n"
          "<p>Per check, the maximum error of each compared result, by decade: ULP distance (where the "
          "dtype has ULPs) and absolute error. Bar heights are on a log scale (the count is written on each "
          "bar); green: exactly 0, blue: by decade, red: inf or NaN.</p>\n",
          f);
    if (a->nfams == 0) fputs("<p>No comparisons in this run.</p>\n", f);
    for (int k = 0; k < a->nfams; k++) {
        const kv_agg_family *fam = &a->fams[k];
        fputs("<h3><code>", f);
        kv_report_put_escaped(f, fam->name, false);
        fputs("</code></h3>\n<div>\n", f);
        char title[96];
        if (fam->ulps.n > 0) {
            snprintf(title, sizeof title, "%s: max ULP", fam->name);
            put_histogram(f, title, &fam->ulps);
        }
        snprintf(title, sizeof title, "%s: max abs err", fam->name);
        put_histogram(f, title, &fam->abs);
        fputs("</div>\n", f);
    }
}

/* The full row list stays in results.jsonl: a table of every row made a
 * green suite's page 12 MB and slow to render. */
static void put_rows_note(FILE *f, const kv_report_agg *a) {
    fprintf(f,
            "<h2 id=\"results\">All results</h2>\n<p>All %lld rows (one per case and check) are in "
            "<a href=\"" KV_REPORT_JSONL "\"><code>" KV_REPORT_JSONL "</code></a>, one JSON object per line; the "
            "failing ones are above and in <a href=\"" KV_REPORT_FAILURES "\"><code>" KV_REPORT_FAILURES
            "</code></a>.</p>\n",
            (long long)a->nrows);
}

kv_status kv_report_write_html(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_html: argument 'results': is NULL");
    kv_report_agg a;
    kv_status st = kv_report_agg_of(&a, results);
    if (st == KV_OK) st = kv_report_html_agg(&a, meta, path);
    kv_report_agg_free(&a);
    return st;
}

kv_status kv_report_html_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path) {
    kv_report_meta empty;
    if (meta == NULL) {
        kv_report_meta_init(&empty);
        meta = &empty;
    }
    int *order = ops_sorted(a);
    if (order == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) {
        free(order);
        return st;
    }
    put_head(rf.f, a, meta);
    put_summary(rf.f, a);
    put_failures(rf.f, a);
    put_matrix(rf.f, a, order);
    put_backend_matrix_and_ops(rf.f, a, order);
    put_plots(rf.f, a);
    put_rows_note(rf.f, a);
    fputs("</body>\n</html>\n", rf.f);
    free(order);
    return kv_report_file_close(&rf);
}
