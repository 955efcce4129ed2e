/* report.html: one self-contained page (inline CSS and SVG, no script, no
 * network) in this order: run summary, the failures with their mismatch
 * tables (the first HTML_MAX_PROBLEMS), the op x dtype matrix (worst status
 * per cell), the op x backend support matrix, per-op counts, histograms of
 * the error maxima per check (log scale), and a pointer to results.jsonl,
 * which keeps the full row list (the page stays well under 1 MB for the
 * green suite). All text from results goes through kv_report_put_escaped. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_groups.h"
#include "runner/report/report_agg.h"
#include "runner/report/plot.h"

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
          ".final{font-weight:bold;font-size:1.1em}\n"
          ".plot{margin:.5em 0}.noplot{color:#b71c1c;font-style:italic}\n"
          ".heat{display:block;margin:.3em 0}.heatnote{margin:.2em 0;font-size:.9em}\n"
          ".swatch{display:inline-block;width:.9em;height:.9em;vertical-align:middle;border:1px solid #999}\n",
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

/* The tolerance rationales the shown cards cite, each given once below
 * the cards (report_tolrule.c): a card names its rule and links here. */
#define HTML_MAX_TOL_REASONS 64
typedef struct html_tol {
    const char *reason[HTML_MAX_TOL_REASONS];
    char rule[HTML_MAX_TOL_REASONS][48];
    int64_t rows[HTML_MAX_TOL_REASONS];
    int n;
} html_tol;

/* The anchor of a rationale, added on first use; -1 past the list's end
 * (the card then keeps the rationale in its message). */
static int tol_anchor(html_tol *t, const char *reason, const char *rule) {
    for (int k = 0; k < t->n; k++)
        if (t->reason[k] == reason) {
            t->rows[k]++;
            return k;
        }
    if (t->n == HTML_MAX_TOL_REASONS) return -1;
    t->reason[t->n] = reason;
    snprintf(t->rule[t->n], sizeof t->rule[0], "%s", rule);
    t->rows[t->n] = 1;
    return t->n++;
}

/* `heat`: draw the heat map of where the output differs (report_heat.c),
 * `id` keeping its SVG ids unique. `ordinal`: the row's place among the
 * failing rows, the anchor the index of groups links to (-1: none, a
 * flaky row). */
static void put_problem(FILE *f, const kv_check_result *r, bool heat, int id, int ordinal, html_tol *tol) {
    if (ordinal >= 0) fprintf(f, "<div class=\"problem\" id=\"f%d\">\n<h3>", ordinal);
    else fputs("<div class=\"problem\">\n<h3>", f);
    fprintf(f, "<span class=\"st-%s\">%s</span> <code>", kv_result_status_name(r->status), kv_result_status_name(r->status));
    kv_report_put_escaped(f, r->case_id, false);
    char rest[KV_RESULT_MESSAGE_MAX], rule[48];
    const char *reason = kv_report_tol_split(r->message, rest, (int)sizeof rest, rule, (int)sizeof rule);
    const int anchor = reason != NULL ? tol_anchor(tol, reason, rule) : -1;
    fprintf(f, "</code></h3>\n<table><tr><th>check</th><th>backend</th><th>layout</th><th>dtype</th>%s<th>seconds</th></tr>\n"
               "<tr><td>", anchor >= 0 ? "<th>tolerance</th>" : "");
    kv_report_put_escaped(f, r->check, false);
    fputs("</td><td>", f);
    kv_report_put_escaped(f, r->backend, false);
    char layout[KV_GROUP_VALUE_MAX];
    kv_report_layout_of(r->case_id, layout, sizeof layout);
    fputs("</td><td>", f);
    kv_report_put_escaped(f, layout, false);
    fprintf(f, "</td><td>%s</td>", kv_dtype_name(r->dtype));
    if (anchor >= 0) {
        fprintf(f, "<td><a href=\"#tol%d\">", anchor);
        kv_report_put_escaped(f, rule, false);
        fputs("</a></td>", f);
    }
    fprintf(f, "<td class=\"num\">%.3f</td></tr></table>\n", r->seconds);
    if (r->status == KV_RESULT_XPASS && !r->message[0])
        fputs("<p>Passed, but the baseline expects it to fail: the baseline entry is stale.</p>\n", f);
    if (r->message[0]) {
        fputs("<pre>", f);
        kv_report_put_escaped(f, anchor >= 0 ? rest : r->message, false);
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
            char u[40];
            kv_report_fmt_ulp(m, u, sizeof u);
            fprintf(f, "<td class=\"num\">%s</td>", u);
            fputs("</tr>\n", f);
        }
        fputs("</table>\n", f);
        if (r->mismatched > nm) fprintf(f, "<p>... and %lld more.</p>\n", (long long)(r->mismatched - nm));
    }
    if (heat) {
        fputs("<div class=\"plot\">\n", f);
        kv_report_put_heat(f, r, id);
        fputs("</div>\n", f);
    }
    if (r->repro[0]) {
        fputs("<p>repro:</p><pre>", f);
        kv_report_put_escaped(f, r->repro, false);
        fputs("</pre>\n", f);
    }
    fputs("</div>\n", f);
}

/* report.html stays within 1 MiB (tests/html_render.sh fails a page past
 * it; tests/test_reports.c writes one for 10,000 failing rows): every
 * other section is written first, into memory, and the failure cards get
 * what is left of this budget, at most HTML_MAX_PROBLEMS of them, the
 * rest counted (a run with thousands of failures would otherwise make a
 * page nobody can open). The margin below 1 MiB is for the lines around
 * the cards. */
#define HTML_PAGE_BUDGET (1024 * 1024 - 16 * 1024)
#define HTML_MAX_PROBLEMS 200
/* Heat maps drawn at most: up to about 15 KB each (a wholly wrong large
 * output). */
#define HTML_MAX_HEATMAPS 20
/* The op plots stop when they take this much (a plot is about 11 KB);
 * the rest are named. */
#define HTML_OP_PLOTS_BUDGET (256 * 1024)
/* Groups listed in the index; the rest are counted. */
#define HTML_MAX_GROUPS 200

static void put_values(FILE *f, const char vals[][KV_GROUP_VALUE_MAX], int n, int more) {
    fputs("<td>", f);
    for (int i = 0; i < n; i++) {
        if (i) fputc(' ', f);
        kv_report_put_escaped(f, vals[i], false);
    }
    if (more > 0) fputs(" &#8230;", f);
    fputs("</td>", f);
}

/* The failing rows by (op, check, backend) (report_groups.h), above the
 * cards: one line per group with its layouts and dtypes, linked to its
 * first card when that one is shown (the first `shown` failing rows). */
static void put_failure_groups(FILE *f, const kv_report_agg *a, int shown) {
    kv_report_groups gs;
    if (kv_report_groups_of(&a->kept, HTML_MAX_GROUPS, &gs) != KV_OK || gs.nbad == 0) {
        kv_report_groups_free(&gs);
        return;
    }
    fprintf(f,
            "<h3 id=\"groups\">By op, check and backend: %lld failing rows in %lld groups</h3>\n<table>\n"
            "<tr><th>status</th><th>op</th><th>check</th><th>backend</th><th>rows</th><th>layouts</th>"
            "<th>dtypes</th><th>first</th></tr>\n",
            (long long)gs.nbad, (long long)(gs.n + gs.more_groups));
    for (int k = 0; k < gs.n; k++) {
        const kv_report_group *g = &gs.items[k];
        const char *st = kv_result_status_name(kv_report_group_worst(g));
        fprintf(f, "<tr><td class=\"st-%s\">%s</td><td><code>", st, st);
        kv_report_put_escaped(f, g->first->op, false);
        fputs("</code></td><td>", f);
        kv_report_put_escaped(f, g->first->check, false);
        fputs("</td><td>", f);
        kv_report_put_escaped(f, g->first->backend, false);
        fprintf(f, "</td><td class=\"num\">%lld</td>", (long long)g->rows);
        put_values(f, g->layouts, g->nlayouts, g->more_layouts);
        put_values(f, g->dtypes, g->ndtypes, g->more_dtypes);
        if (g->first_ordinal < shown) fprintf(f, "<td><a href=\"#f%lld\">card</a></td></tr>\n", (long long)g->first_ordinal);
        else fputs("<td>" KV_REPORT_FAILURES "</td></tr>\n", f);
    }
    fputs("</table>\n", f);
    if (gs.more_groups > 0)
        fprintf(f, "<p>... and %lld more groups (%lld rows): every row is in <code>" KV_REPORT_FAILURES "</code>.</p>\n",
                (long long)gs.more_groups, (long long)gs.more_rows);
    kv_report_groups_free(&gs);
}

/* Each tolerance rationale the cards cite, once, under the anchor their
 * rule links to. */
static void put_tol_reasons(FILE *f, const html_tol *t) {
    if (t->n == 0) return;
    fputs("<h3 id=\"tolerances\">Tolerance rules of these failures</h3>\n<p>Why each rule a card names is what it is "
          "(the tolerance table, <code>docs/checks.md</code>); <code>" KV_REPORT_JSONL "</code> and the console keep "
          "it in every message.</p>\n<dl>\n", f);
    for (int k = 0; k < t->n; k++) {
        fprintf(f, "<dt id=\"tol%d\"><b>", k);
        kv_report_put_escaped(f, t->rule[k], false);
        fprintf(f, "</b> (%lld card%s)</dt><dd>", (long long)t->rows[k], t->rows[k] == 1 ? "" : "s");
        kv_report_put_escaped(f, t->reason[k], false);
        fputs("</dd>\n", f);
    }
    fputs("</dl>\n", f);
}

/* The cards of rows that match `flaky` (FLAKY rows, or the failing ones),
 * into `f` while it holds less than `budget` bytes; returns how many were
 * shown, and in *total how many there are. */
static int put_cards(FILE *f, const kv_result_list *results, bool flaky, long budget, int *nheat, html_tol *tol,
                     int *total) {
    int n = 0, shown = 0;
    for (int i = 0; i < results->n; i++) {
        const kv_check_result *r = &results->items[i];
        if (flaky ? r->status != KV_RESULT_FLAKY : !kv_result_status_is_bad(r->status)) continue;
        if (shown == n && n < HTML_MAX_PROBLEMS && ftell(f) < budget) {
            const bool heat = *nheat < HTML_MAX_HEATMAPS && kv_report_heat_recorded(&r->heat);
            put_problem(f, r, heat, *nheat, flaky ? -1 : n, tol);
            *nheat += heat;
            shown++;
        }
        n++;
    }
    *total = n;
    return shown;
}

/* The failures section, its cards within `budget` bytes (the index of
 * groups and the rationales included). */
static kv_status put_failures(FILE *f, const kv_report_agg *a, long budget) {
    const kv_result_list *results = &a->kept;
    /* The cards first into memory: the index above them links only to
     * cards that fit the budget. The index is measured as if it linked
     * every group, its longest form. */
    char *cards = NULL, *flakes = NULL, *index = NULL;
    size_t ncards = 0, nflakes = 0, nindex = 0;
    FILE *cf = open_memstream(&cards, &ncards);
    FILE *ff = cf ? open_memstream(&flakes, &nflakes) : NULL;
    FILE *xf = ff ? open_memstream(&index, &nindex) : NULL;
    if (xf == NULL) {
        if (cf) fclose(cf);
        if (ff) fclose(ff);
        free(cards);
        free(flakes);
        return kv_error(KV_ERR_OOM, "report.html: out of memory");
    }
    put_failure_groups(xf, a, INT32_MAX);
    fclose(xf);
    free(index);
    /* The rationales: at most HTML_MAX_TOL_REASONS table texts, a few
     * hundred bytes each. */
    budget -= (long)nindex + HTML_MAX_TOL_REASONS * 512;
    html_tol tol = { .n = 0 };
    int nheat = 0, n = 0, nf = 0;
    const int shown = put_cards(cf, results, false, budget, &nheat, &tol, &n);
    /* Flakes right after: they passed on a retry, but how they failed
     * first is what someone fixing the kernel needs. */
    const int fshown = put_cards(ff, results, true, budget - ftell(cf), &nheat, &tol, &nf);
    fclose(cf);
    fclose(ff);
    fputs("<h2 id=\"failures\">Failures</h2>\n", f);
    put_failure_groups(f, a, shown);
    fwrite(cards, 1, ncards, f);
    if (n == 0) fputs("<p>None.</p>\n", f);
    if (n > shown)
        fprintf(f, "<p>... and %d more failing rows: every one is in <code>" KV_REPORT_FAILURES "</code> and <code>"
                   KV_REPORT_JSONL "</code>.</p>\n", n - shown);
    /* Only when there are some, so a run without --retry reads as before. */
    if (nf > 0) fputs("<h2 id=\"flaky\">Flaky (failed, then passed on a retry)</h2>\n", f);
    fwrite(flakes, 1, nflakes, f);
    if (nf > fshown)
        fprintf(f, "<p>... and %d more flaky rows, in <code>" KV_REPORT_JSONL "</code>.</p>\n", nf - fshown);
    put_tol_reasons(f, &tol);
    free(cards);
    free(flakes);
    return KV_OK;
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

/* ---- plots (gnuplot, plot.h) ---- */

/* Decade bars of an error histogram: only the top HIST_MAX_BINS decades
 * get bars of their own (large errors matter); smaller values count in
 * the lowest bar. */
#define HIST_MAX_BINS 24

/* The range of nonempty decades over both histograms: [*lo, *hi], hi < lo
 * when none. */
static void dec_range(const kv_agg_dec_hist *a, const kv_agg_dec_hist *b, int *lo, int *hi) {
    *lo = 0;
    *hi = -1;
    for (int d = 0; d < KV_AGG_DECADES; d++) {
        if (a->bins[d] == 0 && b->bins[d] == 0) continue;
        if (*hi < 0) *lo = d;
        *hi = d;
    }
    if (*hi - *lo + 1 > HIST_MAX_BINS) *lo = *hi - HIST_MAX_BINS + 1;
}

static int64_t dec_count(const kv_agg_dec_hist *h, int d, int lo) {
    if (d > lo) return h->bins[d];
    int64_t c = 0;
    for (int k = 0; k <= lo; k++) c += h->bins[k];
    return c;
}

/* The gnuplot lines every bar plot shares: a log count axis (so 4 bad
 * results beside 15,982 good ones stay visible), the count above each
 * bar's group, a legend outside the plot, and the title in the top
 * margin, which gnuplot sizes to it. */
static void put_bar_style(FILE *g, const char *title, const char *xlabel) {
    fputs("set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.85 border -1\n"
          "set logscale y\nset yrange [0.7:*]\nset ylabel 'rows (log scale)'\nset grid ytics\n"
          "set key outside right top vertical box\nset xtics nomirror\nset tmargin 3\n",
          g);
    fputs("set title ", g);
    kv_plot_put_string(g, title);
    fputs("\nset xlabel ", g);
    kv_plot_put_string(g, xlabel);
    fputc('\n', g);
}

/* A count for gnuplot's data block: 0 is NaN, so a log axis skips it. */
static void put_count(FILE *g, int64_t c) {
    if (c > 0) fprintf(g, " %lld", (long long)c);
    else fputs(" NaN", g);
}

/* One plot per check family: each compared row's maximum ULP error and
 * maximum absolute error, by decade. */
static int add_family_plot(kv_plot_batch *pb, const kv_agg_family *fam) {
    int lo, hi;
    dec_range(&fam->ulps, &fam->abs, &lo, &hi);
    char *text = NULL;
    size_t len = 0;
    FILE *g = open_memstream(&text, &len);
    if (g == NULL) return -1;
    fputs("$data << EOD\nbin \"max ULP\" \"max abs err\"\n\"0\"", g);
    put_count(g, fam->ulps.zero);
    put_count(g, fam->abs.zero);
    fputc('\n', g);
    for (int d = lo; d <= hi; d++) {
        fprintf(g, "\"%s1e%d\"", d == lo && lo > 0 ? "<=" : "", d + KV_AGG_DEC_LO);
        put_count(g, dec_count(&fam->ulps, d, lo));
        put_count(g, dec_count(&fam->abs, d, lo));
        fputc('\n', g);
    }
    fputs("\"inf/nan\"", g);
    put_count(g, fam->ulps.nonfinite);
    put_count(g, fam->abs.nonfinite);
    fputs("\nEOD\n", g);
    char title[160];
    snprintf(title, sizeof title, "%s: largest error of each compared row (%lld rows)", fam->name, (long long)fam->abs.n);
    put_bar_style(g, title, "error, by decade: 1e-7 holds [1e-7, 1e-6)");
    fputs("set xtics rotate by -45\n"
          "plot $data using 2:xtic(1) title columnheader(2) lc rgb '#3949ab', '' using 3 title columnheader(3) lc rgb "
          "'#f9a825'\n",
          g);
    fclose(g);
    const int width = 260 + 34 * (hi - lo + 3);
    const int k = text ? kv_plot_add(pb, width < 640 ? 640 : width, 320, text) : -1;
    free(text);
    return k;
}

/* The ULP bins of one op's plot: 0, 1, 2-3, 4-7, ... up to the highest
 * one any backend of the op has, then inf/nan when one has it. */
static const char *ulp_bin_label(int b, char *buf, size_t cap) {
    if (b == 0) return "0";
    if (b == 1) return "<=1";
    if (b == KV_AGG_ULP_BINS - 1) return "inf/nan";
    /* (10^(b-2), 10^(b-1)] (report_agg.h) */
    if (b <= 4) snprintf(buf, cap, "<=%.0f", pow(10.0, b - 1));
    else snprintf(buf, cap, "<=1e%d", b - 1);
    return buf;
}

/* Whether some row of (op, backend) has a ULP error above 0. */
static bool opb_inexact(const kv_agg_opb *b) { return b->ulp_rows > b->ulp_bins[0]; }

static int add_op_ulp_plot(kv_plot_batch *pb, const kv_report_agg *a, int op) {
    int top = 0, nser = 0;
    int64_t rows = 0;
    bool nonfinite = false;
    for (int e = 0; e < a->nopbs; e++) {
        const kv_agg_opb *b = &a->opbs[e];
        if (b->op != op || b->ulp_rows == 0) continue;
        nser++;
        rows += b->ulp_rows;
        nonfinite |= b->ulp_bins[KV_AGG_ULP_BINS - 1] > 0;
        for (int k = 0; k < KV_AGG_ULP_BINS - 1; k++)
            if (b->ulp_bins[k] > 0 && k > top) top = k;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *g = open_memstream(&text, &len);
    if (g == NULL) return -1;
    fputs("$data << EOD\nbin", g);
    for (int e = 0; e < a->nopbs; e++) {
        if (a->opbs[e].op != op || a->opbs[e].ulp_rows == 0) continue;
        /* A data block's strings are double-quoted; a backend name has no quote. */
        fprintf(g, " \"%.*s\"", (int)strcspn(a->opbs[e].backend, "\"\n"), a->opbs[e].backend);
    }
    fputc('\n', g);
    for (int k = 0; k <= KV_AGG_ULP_BINS - 1; k++) {
        if (k > top && !(k == KV_AGG_ULP_BINS - 1 && nonfinite)) continue;
        char buf[32];
        fprintf(g, "\"%s\"", ulp_bin_label(k, buf, sizeof buf));
        for (int e = 0; e < a->nopbs; e++)
            if (a->opbs[e].op == op && a->opbs[e].ulp_rows > 0) put_count(g, a->opbs[e].ulp_bins[k]);
        fputc('\n', g);
    }
    fputs("EOD\n", g);
    char title[200];
    snprintf(title, sizeof title, "%s: max ULP error of each compared row, per backend (%lld rows)", a->ops[op].op,
             (long long)rows);
    put_bar_style(g, title, "max ULP error of the row (<=10: in (1, 10])");
    const int nbins = top + 1 + (nonfinite ? 1 : 0);
    if (nbins > 8) fputs("set xtics rotate by -45\n", g);
    /* A backend has the same color in every plot of the page. */
    static const char *const colors[] = { "#7b1fa2", "#00897b", "#1e88e5", "#f9a825",
                                          "#e53935", "#6d4c41", "#546e7a", "#c0ca33" };
    const char *names[HTML_MAX_BACKENDS];
    int nnames = 0;
    for (int e = 0; e < a->nopbs; e++) backend_index(names, &nnames, a->opbs[e].backend);
    fputs("set key title 'backend'\nplot", g);
    int col = 2;
    for (int e = 0; e < a->nopbs; e++) {
        if (a->opbs[e].op != op || a->opbs[e].ulp_rows == 0) continue;
        const int bi = backend_index(names, &nnames, a->opbs[e].backend);
        fprintf(g, "%s $data using %d%s title columnheader(%d) lc rgb '%s'", col > 2 ? "," : "", col,
                col == 2 ? ":xtic(1)" : "", col, colors[(bi < 0 ? 0 : bi) % 8]);
        col++;
    }
    fputc('\n', g);
    fclose(g);
    /* Room for the bars and the legend, within a page's width. */
    const int width = 260 + (nser * 12 + 16) * nbins;
    const int k = text ? kv_plot_add(pb, width < 640 ? 640 : (width > 900 ? 900 : width), 340, text) : -1;
    free(text);
    return k;
}

/* Op plots shown at most: a run that fails everywhere keeps its page
 * small; the rest are named. */
#define HTML_MAX_OP_PLOTS 30

typedef struct html_plots {
    kv_plot_batch *batch;
    int *fam;            /* plot of each check family */
    int *op_order;       /* ops with an inexact (op, backend), worst first */
    int *op_plot;
    int nop;
} html_plots;

static int64_t op_worst_bin(const kv_report_agg *a, int op) {
    int worst = 0;
    for (int e = 0; e < a->nopbs; e++) {
        if (a->opbs[e].op != op) continue;
        for (int k = KV_AGG_ULP_BINS - 1; k > worst; k--)
            if (a->opbs[e].ulp_bins[k] > 0) worst = k;
    }
    return worst;
}

static const kv_report_agg *g_worst_agg;
static int cmp_worst(const void *pa, const void *pb) {
    const int x = *(const int *)pa, y = *(const int *)pb;
    const int64_t wx = op_worst_bin(g_worst_agg, x), wy = op_worst_bin(g_worst_agg, y);
    if (wx != wy) return wx > wy ? -1 : 1;
    return strcmp(g_worst_agg->ops[x].op, g_worst_agg->ops[y].op);
}

static kv_status plots_prepare(html_plots *p, const kv_report_agg *a) {
    memset(p, 0, sizeof *p);
    p->batch = kv_plot_batch_new();
    if (p->batch == NULL) return kv_last_error();
    p->fam = malloc(((size_t)a->nfams + 1) * sizeof *p->fam);
    p->op_order = malloc(((size_t)a->nops + 1) * sizeof *p->op_order);
    p->op_plot = malloc(((size_t)a->nops + 1) * sizeof *p->op_plot);
    if (p->fam == NULL || p->op_order == NULL || p->op_plot == NULL) return kv_error(KV_ERR_OOM, "report.html: out of memory");
    for (int k = 0; k < a->nfams; k++) p->fam[k] = add_family_plot(p->batch, &a->fams[k]);
    for (int o = 0; o < a->nops; o++) {
        bool inexact = false;
        for (int e = 0; e < a->nopbs && !inexact; e++) inexact = a->opbs[e].op == o && opb_inexact(&a->opbs[e]);
        if (inexact) p->op_order[p->nop++] = o;
    }
    g_worst_agg = a;
    qsort(p->op_order, (size_t)p->nop, sizeof *p->op_order, cmp_worst);
    g_worst_agg = NULL;
    for (int k = 0; k < p->nop; k++)
        p->op_plot[k] = k < HTML_MAX_OP_PLOTS ? add_op_ulp_plot(p->batch, a, p->op_order[k]) : -1;
    kv_plot_run(p->batch);
    return KV_OK;
}

static void plots_free(html_plots *p) {
    kv_plot_batch_free(p->batch);
    free(p->fam);
    free(p->op_order);
    free(p->op_plot);
}

static void put_plots(FILE *f, const kv_report_agg *a, html_plots *p) {
    fputs("<h2 id=\"errors\">Error distributions</h2>\n"
          "<p>Per check, the largest error of each compared row, by decade: ULP distance (where the "
          "dtype has ULPs) and absolute error. The count axis is logarithmic, so a few bad rows beside "
          "thousands of exact ones stay visible.</p>\n",
          f);
    if (a->nfams == 0) fputs("<p>No comparisons in this run.</p>\n", f);
    for (int k = 0; k < a->nfams; k++) {
        fputs("<div class=\"plot\">\n", f);
        kv_plot_put(p->batch, p->fam[k], f);
        fputs("</div>\n", f);
    }
    fputs("<h2 id=\"ulps\">ULP errors per op and backend</h2>\n", f);
    int nexact = 0;
    for (int o = 0; o < a->nops; o++) {
        bool measured = false, inexact = false;
        for (int e = 0; e < a->nopbs; e++) {
            if (a->opbs[e].op != o) continue;
            measured |= a->opbs[e].ulp_rows > 0;
            inexact |= opb_inexact(&a->opbs[e]);
        }
        nexact += measured && !inexact;
    }
    fprintf(f,
            "<p>For each op with a row more than 0 ULP from its reference: the maximum ULP error of each compared "
            "row, one bar per backend (log count axis). %d op%s had every compared row bitwise equal (0 ULP) and "
            "%s not plotted.</p>\n",
            nexact, nexact == 1 ? "" : "s", nexact == 1 ? "is" : "are");
    const long start = ftell(f);
    int plotted = 0;
    for (int k = 0; k < p->nop && k < HTML_MAX_OP_PLOTS && ftell(f) - start < HTML_OP_PLOTS_BUDGET; k++, plotted++) {
        if (p->op_plot[k] < 0) continue;
        fputs("<div class=\"plot\">\n", f);
        kv_plot_put(p->batch, p->op_plot[k], f);
        fputs("</div>\n", f);
    }
    if (p->nop > plotted) {
        fprintf(f, "<p>%d more ops with ULP errors, not plotted (the page stays small):", p->nop - plotted);
        for (int k = plotted; k < p->nop; k++) {
            fputs(k > plotted ? ", <code>" : " <code>", f);
            kv_report_put_escaped(f, a->ops[p->op_order[k]].op, false);
            fputs("</code>", f);
        }
        fputs(".</p>\n", f);
    }
}

/* The full row list stays in results.jsonl: a table of every row made a
 * green suite's page 12 MB and slow to render. */
static void put_rows_note(FILE *f, const kv_report_agg *a, const kv_report_meta *meta) {
    const char *rows = meta->gzip_results ? KV_REPORT_JSONL_GZ : KV_REPORT_JSONL;
    fprintf(f,
            "<h2 id=\"results\">All results</h2>\n<p>All %lld rows (one per case and check) are in "
            "<a href=\"%s\"><code>%s</code></a>, one JSON object per line%s; the "
            "failing ones are above and in <a href=\"" KV_REPORT_FAILURES "\"><code>" KV_REPORT_FAILURES
            "</code></a>.</p>\n",
            (long long)a->nrows, rows, rows, meta->gzip_results ? " (gzip: <code>zcat " KV_REPORT_JSONL_GZ
                                                                   " | jq ...</code>)" : "");
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
    html_plots plots;
    kv_status st = plots_prepare(&plots, a);
    kv_report_file rf;
    if (st == KV_OK) st = kv_report_file_open(&rf, path);
    if (st != KV_OK) {
        plots_free(&plots);
        free(order);
        return st;
    }
    put_head(rf.f, a, meta);
    put_summary(rf.f, a);
    /* Every section after the failures first, into memory: the cards get
     * what they leave of the page's budget. */
    char *tail = NULL;
    size_t ntail = 0;
    FILE *tf = open_memstream(&tail, &ntail);
    if (tf == NULL) st = kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    if (st == KV_OK) {
        put_matrix(tf, a, order);
        put_backend_matrix_and_ops(tf, a, order);
        put_plots(tf, a, &plots);
        put_rows_note(tf, a, meta);
        fputs("</body>\n</html>\n", tf);
        fclose(tf);
        st = put_failures(rf.f, a, HTML_PAGE_BUDGET - ftell(rf.f) - (long)ntail);
    }
    if (st == KV_OK) fwrite(tail, 1, ntail, rf.f);
    free(tail);
    plots_free(&plots);
    free(order);
    if (st != KV_OK) {
        kv_report_file_discard(&rf);
        return st;
    }
    return kv_report_file_close(&rf);
}
