/* kvrun --mode=perf: perf.jsonl, perf.html and the console table
 * (runner/perf.h). */
#include "runner/exec/perf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/plot.h"
#include "runner/report/report_internal.h"

/* GB/s or GFLOP/s: bytes (FLOPs) per nanosecond. 0 when unknown, and
 * for the rows of an instruction count (a rate has a time). */
static double perf_rate(const kv_perf_row *row) {
    return row->failed || row->median_ns == 0 ? 0.0 : row->work / (double)row->median_ns;
}

static bool perf_counted(const kv_perf_report *r) { return r->metric == KV_PERF_METRIC_INSTRUCTIONS; }

/* ---- perf.jsonl ---- */

static json_t *perf_num_or_null(double v, bool known) { return known ? json_real(v) : json_null(); }

static json_t *perf_row_json(const kv_perf_report *r, const kv_perf_row *row) {
    json_t *o = json_object();
    if (o == NULL) return NULL;
    const bool t = !row->failed, counted = perf_counted(r);
    const double rate = perf_rate(row);
    int bad = 0;
    bad |= json_object_set_new(o, "case_id", json_string(row->case_id));
    bad |= json_object_set_new(o, "op", json_string(row->op));
    bad |= json_object_set_new(o, "backend", json_string(kv_key_name(row->backend)));
    bad |= json_object_set_new(o, "variant", json_string(row->variant));
    bad |= json_object_set_new(o, "metric", json_string(kv_perf_metric_name(r->metric)));
    if (counted) bad |= json_object_set_new(o, "counter", json_string(r->counter));
    bad |= json_object_set_new(o, counted ? "median_instructions" : "median_ns",
                               t ? json_integer((json_int_t)row->median_ns) : json_null());
    bad |= json_object_set_new(o, counted ? "min_instructions" : "min_ns",
                               t ? json_integer((json_int_t)row->min_ns) : json_null());
    bad |= json_object_set_new(o, counted ? "max_instructions" : "max_ns",
                               t ? json_integer((json_int_t)row->max_ns) : json_null());
    bad |= json_object_set_new(o, "reps", json_integer(row->reps));
    if (!counted) bad |= json_object_set_new(o, row->is_flops ? "gflops" : "gbps", perf_num_or_null(rate, rate > 0.0));
    bad |= json_object_set_new(o, "speedup", perf_num_or_null(row->speedup, row->speedup > 0.0));
    bad |= json_object_set_new(o, "chosen", json_boolean(row->chosen));
    bad |= json_object_set_new(o, "fastest", json_boolean(row->fastest));
    bad |= json_object_set_new(o, "within_5pct", row->judged ? json_boolean(row->within) : json_null());
    if (row->failed) bad |= json_object_set_new(o, "error", json_string(row->error));
    if (t && row->samples_ns != NULL) {
        json_t *s = json_array();
        for (int i = 0; s != NULL && i < row->reps; i++)
            bad |= json_array_append_new(s, json_integer((json_int_t)row->samples_ns[i]));
        bad |= json_object_set_new(o, counted ? "samples_instructions" : "samples_ns", s);
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

kv_status kv_perf_write_jsonl(const kv_perf_report *r, const char *path) {
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    for (int i = 0; i < r->n; i++) {
        json_t *o = perf_row_json(r, &r->rows[i]);
        char *text = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        json_decref(o);
        if (text == NULL) {
            kv_report_file_discard(&rf);
            return kv_error(KV_ERR_OOM, "%s: cannot encode row %d", path, i);
        }
        fprintf(rf.f, "%s\n", text);
        free(text);
    }
    return kv_report_file_close(&rf);
}

/* ---- perf.html ---- */

/* The measured limit that bounds a row (its roof): the FMA peak for
 * GFLOP/s; for GB/s, the in-place update stream for an in-place op
 * ("add_.Tensor": no read-for-ownership), the read stream for a reduction
 * (sum, mean: reads only), the triad for the rest (two reads, a write). */
static kv_limit perf_roof(const kv_perf_report *r, const kv_perf_row *row) {
    if (row->is_flops)
        return r->limits[KV_LIMIT_FMA512].measured ? KV_LIMIT_FMA512 : KV_LIMIT_FMA256;
    const size_t base = strcspn(row->op, ".");
    if (base > 0 && row->op[base - 1] == '_') return KV_LIMIT_UPDATE;
    if (strncmp(row->op, "sum", 3) == 0 || strncmp(row->op, "mean", 4) == 0) return KV_LIMIT_READ;
    return KV_LIMIT_TRIAD;
}

static const char *perf_roof_name(kv_limit w) {
    switch (w) {
    case KV_LIMIT_FMA256:
    case KV_LIMIT_FMA512: return "one-core FMA peak";
    case KV_LIMIT_UPDATE: return "in-place update stream";
    case KV_LIMIT_READ: return "read stream";
    case KV_LIMIT_TRIAD: return "triad stream";
    case KV_LIMIT_COPY:
    case KV_LIMIT_COUNT: break;
    }
    return "memcpy";
}

/* "1.23 ms", "45.6 us", "789 ns". */
static void perf_fmt_ns(uint64_t ns, char *buf, size_t cap) {
    if (ns >= 1000000u) snprintf(buf, cap, "%.2f ms", (double)ns / 1e6);
    else if (ns >= 1000u) snprintf(buf, cap, "%.2f us", (double)ns / 1e3);
    else snprintf(buf, cap, "%llu ns", (unsigned long long)ns);
}

static double perf_rate_at(const kv_perf_row *row, uint64_t ns) { return ns > 0 ? row->work / (double)ns : 0.0; }

static void perf_put_head(FILE *f, const kv_perf_report *r) {
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>kvrun perf</title>\n"
          "<style>body{font-family:sans-serif;margin:1em 2em;color:#222}h2{font-size:1.15em;margin-top:1.6em}"
          "h3{font-size:1em;margin:1em 0 .3em}table{border-collapse:collapse;margin:.4em 0}"
          "td,th{border:1px solid #bbb;padding:2px 6px;text-align:left}th{background:#eee}"
          ".num{text-align:right;font-variant-numeric:tabular-nums}.chosen{background:#ffe0b2}"
          ".noplot{color:#b71c1c;font-style:italic}code{word-break:break-all}</style>\n"
          "</head><body>\n<h1>kvrun --mode=perf</h1>\n<table>\n<tr><th>machine</th><td>",
          f);
    kv_report_put_escaped(f, r->machine, false);
    if (perf_counted(r)) {
        fprintf(f, "</td></tr>\n<tr><th>metric</th><td>instructions per call (retired, user space), counted by "
                   "%s</td></tr>\n<tr><th>repetitions</th><td>%d uncounted, then %d counted calls per variant%s; "
                   "output allocation included</td></tr>\n<tr><th>tuner</th><td>its choice (by time) is marked, not "
                   "judged by instruction counts</td></tr>\n</table>\n",
                r->counter, r->warmup, r->reps, r->interleave ? ", in rounds" : ", in a row");
        return;
    }
    fprintf(f, "</td></tr>\n<tr><th>repetitions</th><td>%d untimed, then %d timed calls per variant%s; times are "
               "per call, output allocation included</td></tr>\n"
               "<tr><th>tuner</th><td>picked within %d%% of the fastest in %d of %d cases</td></tr>\n</table>\n",
            r->warmup, r->reps,
            r->interleave ? ", in rounds (every variant an untimed and a timed call per round)" : ", in a row",
            KV_PERF_WITHIN_PERCENT, r->within, r->judged);
    fputs("<h2 id=\"limits\">Measured machine limits (the roofs)</h2>\n", f);
    if (!r->limits_measured) {
        fputs("<p>Not measured in this run (a fake clock, or no memory for the stream arrays): no roofs.</p>\n", f);
        return;
    }
    fputs("<table>\n<tr><th>limit</th><th>slowest round</th><th>median</th><th>fastest round</th><th>rounds</th></tr>\n", f);
    for (int w = 0; w < KV_LIMIT_COUNT; w++) {
        const kv_limit_stat *l = &r->limits[w];
        if (!l->measured) continue;
        const char *unit = kv_limit_is_flops((kv_limit)w) ? "GFLOP/s" : "GB/s";
        fprintf(f, "<tr><td>%s</td><td class=\"num\">%.2f %s</td><td class=\"num\">%.2f %s</td>"
                   "<td class=\"num\">%.2f %s</td><td class=\"num\">%d</td></tr>\n",
                kv_limit_name((kv_limit)w), l->min, unit, l->median, unit, l->max, unit, l->rounds);
    }
    fputs("</table>\n<p>Each roof below is the median of its limit: the FMA peak for GFLOP/s, and for GB/s the "
          "read stream (reductions), the in-place update (in-place ops) or the triad (the rest). A kernel's bar is "
          "its median rate, the error bar spans its slowest and fastest call. The streams run over 64 MiB arrays, "
          "so a problem whose data fits in the caches can go past its memory roof.</p>\n",
          f);
}

/* One (case, backend) pair: the roofline plot (added to the batch) of the
 * rows [first, end). */
static int perf_add_plot(kv_plot_batch *pb, const kv_perf_report *r, int first, int end) {
    const kv_perf_row *row0 = &r->rows[first];
    const kv_limit roof = perf_roof(r, row0);
    const double top = r->limits_measured ? r->limits[roof].median : 0.0;
    char *text = NULL;
    size_t len = 0;
    FILE *g = open_memstream(&text, &len);
    if (g == NULL) return -1;
    fputs("$d << EOD\n", g);
    double lo = top > 0 ? top : 1.0, hi = top;
    int nbars = 0;
    for (int i = first; i < end; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (row->failed) continue;
        const double med = perf_rate(row), slow = perf_rate_at(row, row->max_ns), fast = perf_rate_at(row, row->min_ns);
        if (med <= 0) continue;
        if (slow > 0 && slow < lo) lo = slow;
        if (fast > hi) hi = fast;
        fprintf(g, "%d %.6g %.6g %.6g 0x%s \"%.*s%s\"\n", nbars++, med, slow, fast, row->chosen ? "e67e22" : "4a7ab5",
                (int)strcspn(row->variant, "\"\n"), row->variant, row->chosen ? " (chosen)" : "");
    }
    fputs("EOD\n", g);
    const char *unit = row0->is_flops ? "GFLOP/s" : "GB/s";
    char title[KV_CASE_ID_MAX + 96];
    snprintf(title, sizeof title, "%s on %s: %s per variant", row0->case_id, kv_key_name(row0->backend), unit);
    fputs("set title ", g);
    kv_plot_put_string(g, title);
    fprintf(g, "\nset logscale y\nset yrange [%.6g:%.6g]\nset ylabel '%s (log scale)'\nset boxwidth 0.6\n"
               "set style fill solid 0.85 border -1\nset xrange [-0.7:%d.7]\nset grid ytics\nset tmargin 3\n"
               "set key outside below horizontal\n",
            lo / 2, hi * 2, unit, nbars > 0 ? nbars - 1 : 0);
    if (top > 0) {
        char key[160];
        snprintf(key, sizeof key, "roof: measured %s, %.2f %s (median)", perf_roof_name(roof), top, unit);
        fprintf(g, "set arrow from graph 0, first %.6g to graph 1, first %.6g nohead dt 2 lw 2 lc rgb '#c62828'\n", top,
                top);
        fputs("plot $d using 1:2:3:4:(0.6):5:xtic(6) with boxerrorbars lc rgb variable title "
              "'median (error bar: slowest to fastest call)', NaN with lines dt 2 lw 2 lc rgb '#c62828' title ",
              g);
        kv_plot_put_string(g, key);
        fputc('\n', g);
    } else {
        fputs("plot $d using 1:2:3:4:(0.6):5:xtic(6) with boxerrorbars lc rgb variable title "
              "'median (error bar: slowest to fastest call)'\n",
              g);
    }
    fclose(g);
    const int w = 360 + 90 * nbars;
    const int k = text != NULL && nbars > 0 ? kv_plot_add(pb, w < 640 ? 640 : (w > 900 ? 900 : w), 330, text) : -1;
    free(text);
    return k;
}

/* A table row's variant cell; a variant that failed gets its error over
 * the other ncols cells and false (the row is complete). */
static bool perf_put_row_head(FILE *f, const kv_perf_row *row, int ncols) {
    fprintf(f, "<tr%s><td><code>", row->chosen ? " class=\"chosen\"" : "");
    kv_report_put_escaped(f, row->variant, false);
    fputs("</code></td>", f);
    if (!row->failed) return true;
    fprintf(f, "<td colspan=\"%d\">error: ", ncols);
    kv_report_put_escaped(f, row->error, false);
    fputs("</td></tr>\n", f);
    return false;
}

/* An instruction-count pair's table: counts per call, no rate. */
static void perf_put_counts(FILE *f, const kv_perf_report *r, int first, int end) {
    fputs("<table>\n<tr><th>variant</th><th>instructions (median)</th><th>fewest</th><th>most</th>"
          "<th>of ref</th><th></th></tr>\n",
          f);
    for (int i = first; i < end; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (!perf_put_row_head(f, row, 5)) continue;
        fprintf(f, "<td class=\"num\">%llu</td><td class=\"num\">%llu</td><td class=\"num\">%llu</td>",
                (unsigned long long)row->median_ns, (unsigned long long)row->min_ns, (unsigned long long)row->max_ns);
        if (row->speedup > 0) fprintf(f, "<td class=\"num\">%.3f</td>", 1.0 / row->speedup);
        else fputs("<td></td>", f);
        fprintf(f, "<td>%s%s%s</td></tr>\n", row->chosen ? "chosen" : "", row->chosen && row->fastest ? ", " : "",
                row->fastest ? "fewest" : "");
    }
    fputs("</table>\n", f);
}

/* The pair's table: absolute times and rates, not only in the plot. */
static void perf_put_table(FILE *f, const kv_perf_report *r, int first, int end) {
    if (perf_counted(r)) {
        perf_put_counts(f, r, first, end);
        return;
    }
    const kv_perf_row *row0 = &r->rows[first];
    const kv_limit roof = perf_roof(r, row0);
    const double top = r->limits_measured ? r->limits[roof].median : 0.0;
    const char *unit = row0->is_flops ? "GFLOP/s" : "GB/s";
    fprintf(f, "<table>\n<tr><th>variant</th><th>median</th><th>fastest</th><th>slowest</th><th>spread</th>"
               "<th>%s (median)</th><th>of the roof</th><th>speedup over ref</th><th></th></tr>\n",
            unit);
    for (int i = first; i < end; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (!perf_put_row_head(f, row, 8)) continue;
        char med[32], lo[32], hi[32];
        perf_fmt_ns(row->median_ns, med, sizeof med);
        perf_fmt_ns(row->min_ns, lo, sizeof lo);
        perf_fmt_ns(row->max_ns, hi, sizeof hi);
        const double spread = row->median_ns ? 100.0 * (double)(row->max_ns - row->min_ns) / (double)row->median_ns : 0;
        fprintf(f, "<td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
                   "<td class=\"num\">%.0f%%</td><td class=\"num\">%.3f</td>",
                med, lo, hi, spread, perf_rate(row));
        if (top > 0) fprintf(f, "<td class=\"num\">%.2f</td>", perf_rate(row) / top);
        else fputs("<td></td>", f);
        if (row->speedup > 0) fprintf(f, "<td class=\"num\">%.2fx</td>", row->speedup);
        else fputs("<td></td>", f);
        fprintf(f, "<td>%s%s%s</td></tr>\n", row->chosen ? "chosen" : "", row->chosen && row->fastest ? ", " : "",
                row->fastest ? "fastest" : "");
    }
    fputs("</table>\n", f);
}

kv_status kv_perf_write_html(const kv_perf_report *r, const char *path) {
    /* Every plot first, in one gnuplot run (plot.h). */
    kv_plot_batch *pb = kv_plot_batch_new();
    if (pb == NULL) return kv_last_error();
    int *plot = malloc(((size_t)r->n + 1) * sizeof *plot);
    if (plot == NULL) {
        kv_plot_batch_free(pb);
        return kv_error(KV_ERR_OOM, "%s: out of memory", path);
    }
    for (int i = 0, end; i < r->n; i = end) {
        for (end = i + 1; end < r->n && r->rows[end].case_index == r->rows[i].case_index; end++) plot[end] = -1;
        plot[i] = perf_counted(r) ? -1 : perf_add_plot(pb, r, i, end);
    }
    kv_plot_run(pb);
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) {
        free(plot);
        kv_plot_batch_free(pb);
        return st;
    }
    FILE *f = rf.f;
    perf_put_head(f, r);
    for (int i = 0, end; i < r->n; i = end) {
        for (end = i + 1; end < r->n && r->rows[end].case_index == r->rows[i].case_index; end++) {
        }
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(r->rows[j].op, r->rows[i].op) == 0;
        if (!seen) {
            fputs("<h2>", f);
            kv_report_put_escaped(f, r->rows[i].op, false);
            fputs("</h2>\n", f);
        }
        const kv_perf_row *row = &r->rows[i];
        fputs("<h3><code>", f);
        kv_report_put_escaped(f, row->case_id, false);
        fprintf(f, "</code> on %s%s</h3>\n", kv_key_name(row->backend),
                !row->judged ? "" : row->within ? " (choice within 5%)" : " (choice NOT within 5%)");
        perf_put_table(f, r, i, end);
        if (plot[i] >= 0) kv_plot_put(pb, plot[i], f);
    }
    if (r->n == 0) fputs("<p>No case was measured.</p>\n", f);
    fputs("</body></html>\n", f);
    free(plot);
    kv_plot_batch_free(pb);
    return kv_report_file_close(&rf);
}

/* ---- the console ---- */

static void perf_put_ns(FILE *out, uint64_t ns) {
    if (ns >= 10000000u) fprintf(out, "%9.2f ms", (double)ns / 1e6);
    else if (ns >= 10000u) fprintf(out, "%9.2f us", (double)ns / 1e3);
    else fprintf(out, "%9llu ns", (unsigned long long)ns);
}

void kv_perf_console(FILE *out, const kv_perf_report *r) {
    int last_case = -1;
    const bool counted = perf_counted(r);
    for (int i = 0; i < r->n; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (row->case_index != last_case) {
            last_case = row->case_index;
            fprintf(out, "\n%s on %s%s\n", row->case_id, kv_key_name(row->backend),
                    !row->judged ? "" : row->within ? "  [choice within 5%]" : "  [choice NOT within 5%]");
            if (counted)
                fprintf(out, "    %-12s %14s %14s %14s %9s\n", "variant", "instructions", "fewest", "most", "of ref");
            else
                fprintf(out, "    %-12s %12s %12s %16s %9s\n", "variant", "median", "min", "rate", "speedup");
        }
        fprintf(out, "  %c %-12s ", row->chosen ? '*' : ' ', row->variant);
        if (row->failed) {
            fprintf(out, "ERROR %s\n", row->error);
            continue;
        }
        if (counted) {
            fprintf(out, "%14llu %14llu %14llu ", (unsigned long long)row->median_ns, (unsigned long long)row->min_ns,
                    (unsigned long long)row->max_ns);
            if (row->speedup > 0.0) fprintf(out, "%9.3f", 1.0 / row->speedup);
            else fprintf(out, "%9s", "-");
            fprintf(out, "%s\n", row->fastest ? "  fewest" : "");
            continue;
        }
        perf_put_ns(out, row->median_ns);
        fputc(' ', out);
        perf_put_ns(out, row->min_ns);
        fprintf(out, " %9.3f %-7s", perf_rate(row), row->is_flops ? "GFLOP/s" : "GB/s");
        if (row->speedup > 0.0) fprintf(out, "%8.2fx", row->speedup);
        else fprintf(out, "%9s", "-");
        fprintf(out, "%s\n", row->fastest ? "  fastest" : "");
    }
    if (r->n > 0) fputs("\n(* = the tuner's choice)\n", out);
    for (int i = 0; i < r->n; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (row->failed)
            fprintf(out, "perf: ERROR %s on %s: variant '%s' accepted the call and failed: %s\n", row->case_id,
                    kv_key_name(row->backend), row->variant, row->error);
    }
    fprintf(out, "perf: %d case%s measured, %d skipped, %d variant error%s\n", r->pairs, r->pairs == 1 ? "" : "s",
            r->skipped, r->errors, r->errors == 1 ? "" : "s");
    if (counted)
        fprintf(out, "instructions per call counted by %s; the tuner's choice (by time) is marked, not judged\n",
                r->counter);
    else if (r->judged > 0)
        fprintf(out, "tuner picked within 5%% of the fastest in %d of %d cases (%.0f%%)\n", r->within, r->judged,
                100.0 * r->within / r->judged);
    else
        fputs("tuner picked within 5% of the fastest in 0 of 0 cases (no case had a choice to make)\n", out);
}
