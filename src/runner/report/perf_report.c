/* kvrun --mode=perf: perf.jsonl, perf.html and the console table
 * (runner/perf.h). */
#include "runner/exec/perf.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/report_internal.h"

/* GB/s or GFLOP/s: bytes (FLOPs) per nanosecond. 0 when unknown. */
static double perf_rate(const kv_perf_row *row) {
    return row->failed || row->median_ns == 0 ? 0.0 : row->work / (double)row->median_ns;
}

/* ---- perf.jsonl ---- */

static json_t *perf_num_or_null(double v, bool known) { return known ? json_real(v) : json_null(); }

static json_t *perf_row_json(const kv_perf_row *row) {
    json_t *o = json_object();
    if (o == NULL) return NULL;
    const bool t = !row->failed;
    const double rate = perf_rate(row);
    int bad = 0;
    bad |= json_object_set_new(o, "case_id", json_string(row->case_id));
    bad |= json_object_set_new(o, "op", json_string(row->op));
    bad |= json_object_set_new(o, "backend", json_string(kv_key_name(row->backend)));
    bad |= json_object_set_new(o, "variant", json_string(row->variant));
    bad |= json_object_set_new(o, "median_ns", t ? json_integer((json_int_t)row->median_ns) : json_null());
    bad |= json_object_set_new(o, "min_ns", t ? json_integer((json_int_t)row->min_ns) : json_null());
    bad |= json_object_set_new(o, "reps", json_integer(row->reps));
    bad |= json_object_set_new(o, row->is_flops ? "gflops" : "gbps", perf_num_or_null(rate, rate > 0.0));
    bad |= json_object_set_new(o, "speedup", perf_num_or_null(row->speedup, row->speedup > 0.0));
    bad |= json_object_set_new(o, "chosen", json_boolean(row->chosen));
    bad |= json_object_set_new(o, "fastest", json_boolean(row->fastest));
    bad |= json_object_set_new(o, "within_5pct", row->judged ? json_boolean(row->within) : json_null());
    if (row->failed) bad |= json_object_set_new(o, "error", json_string(row->error));
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
        json_t *o = perf_row_json(&r->rows[i]);
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

#define PERF_LABEL_W 420
#define PERF_BAR_W 360
#define PERF_ROW_H 18

/* One op's plot: every row of the op, grouped by (case, backend) pair,
 * a bar per variant scaled to the largest speedup. */
static void perf_svg(FILE *f, const kv_perf_report *r, const char *op) {
    double top = 1.0;
    int lines = 0, last_case = -1;
    for (int i = 0; i < r->n; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (strcmp(row->op, op) != 0) continue;
        if (row->case_index != last_case) lines++, last_case = row->case_index;
        lines++;
        if (row->speedup > top) top = row->speedup;
    }
    const int h = lines * PERF_ROW_H + 24;
    const int w = PERF_LABEL_W + PERF_BAR_W + 140;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-size=\"12\" "
               "font-family=\"monospace\">\n", w, h);
    const double one = PERF_LABEL_W + PERF_BAR_W / top;
    fprintf(f, "<line x1=\"%.1f\" y1=\"0\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n", one,
            one, h - 16);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">1x (ref)</text>\n", one, h - 4);
    int y = 0;
    last_case = -1;
    for (int i = 0; i < r->n; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (strcmp(row->op, op) != 0) continue;
        if (row->case_index != last_case) {
            last_case = row->case_index;
            fprintf(f, "<text x=\"0\" y=\"%d\" font-weight=\"bold\">", y + 13);
            kv_report_put_escaped(f, row->case_id, false);
            fprintf(f, " on %s%s</text>\n", kv_key_name(row->backend),
                    !row->judged ? "" : row->within ? " (choice within 5%)" : " (choice NOT within 5%)");
            y += PERF_ROW_H;
        }
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", PERF_LABEL_W - 6, y + 13);
        kv_report_put_escaped(f, row->variant, false);
        fputs("</text>\n", f);
        if (row->failed) {
            fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#b00\">error: ", PERF_LABEL_W, y + 13);
            kv_report_put_escaped(f, row->error, false);
            fputs("</text>\n", f);
        } else {
            const double bw = row->speedup > 0.0 ? row->speedup / top * PERF_BAR_W : 0.0;
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"%s>", PERF_LABEL_W, y + 2, bw,
                    PERF_ROW_H - 4, row->chosen ? "#e67e22" : "#4a7ab5",
                    row->chosen ? " stroke=\"#000\" stroke-width=\"1.5\"" : "");
            fprintf(f, "<title>median %llu ns, min %llu ns, %.3f %s</title></rect>\n",
                    (unsigned long long)row->median_ns, (unsigned long long)row->min_ns, perf_rate(row),
                    row->is_flops ? "GFLOP/s" : "GB/s");
            fprintf(f, "<text x=\"%.1f\" y=\"%d\">", PERF_LABEL_W + bw + 4, y + 13);
            if (row->speedup > 0.0) fprintf(f, "%.2fx", row->speedup);
            else fputs("?", f);
            fprintf(f, "%s%s</text>\n", row->chosen ? " chosen" : "", row->fastest ? " fastest" : "");
        }
        y += PERF_ROW_H;
    }
    fputs("</svg>\n", f);
}

kv_status kv_perf_write_html(const kv_perf_report *r, const char *path) {
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    FILE *f = rf.f;
    fputs("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kvrun perf</title>\n"
          "<style>body{font-family:sans-serif;margin:1em 2em}h2{font-size:1.1em;margin-top:1.5em}</style>\n"
          "</head><body>\n<h1>kvrun --mode=perf</h1>\n",
          f);
    fprintf(f, "<p>Speedup of each kernel variant over the reference (\"ref\") variant, median of the timed calls. "
               "<span style=\"color:#e67e22\">Orange</span>: the tuner's choice. Tuner picked within %d%% of the "
               "fastest in %d of %d cases.</p>\n",
            KV_PERF_WITHIN_PERCENT, r->within, r->judged);
    for (int i = 0; i < r->n; i++) {
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = strcmp(r->rows[j].op, r->rows[i].op) == 0;
        if (seen) continue;
        fputs("<h2>", f);
        kv_report_put_escaped(f, r->rows[i].op, false);
        fputs("</h2>\n", f);
        perf_svg(f, r, r->rows[i].op);
    }
    if (r->n == 0) fputs("<p>No case was measured.</p>\n", f);
    fputs("</body></html>\n", f);
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
    for (int i = 0; i < r->n; i++) {
        const kv_perf_row *row = &r->rows[i];
        if (row->case_index != last_case) {
            last_case = row->case_index;
            fprintf(out, "\n%s on %s%s\n", row->case_id, kv_key_name(row->backend),
                    !row->judged ? "" : row->within ? "  [choice within 5%]" : "  [choice NOT within 5%]");
            fprintf(out, "    %-12s %12s %12s %16s %9s\n", "variant", "median", "min", "rate", "speedup");
        }
        fprintf(out, "  %c %-12s ", row->chosen ? '*' : ' ', row->variant);
        if (row->failed) {
            fprintf(out, "ERROR %s\n", row->error);
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
    if (r->judged > 0)
        fprintf(out, "tuner picked within 5%% of the fastest in %d of %d cases (%.0f%%)\n", r->within, r->judged,
                100.0 * r->within / r->judged);
    else
        fputs("tuner picked within 5% of the fastest in 0 of 0 cases (no case had a choice to make)\n", out);
}
