/* The comparison's files (compare_runs.h; fields in docs/compare.md):
 * compare.md for people, compare.jsonl with one object per changed row
 * and per perf pair, compare.junit.xml where each regression is a failing
 * testcase, and a section in report.html. Rows that did not change are
 * counted, never listed, so the files stay as small as the change. */
#include "runner/report/compare_internal.h"
#include "runner/report/report_internal.h"
#include "runner/check/ulp_hist.h"
#include "runner/golden/hash.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* What a row's change is called in every file. */
static const char *cw_what(const kv_runcmp_item *it) {
    if (it->f.kind != KV_RUNCMP_SAME) return kv_runcmp_kind_name(it->f.kind);
    if (it->f.identity_required && it->f.any_bits_changed) return "identity-regression";
    if (it->f.any_drift) return "accuracy-drift";
    return "bits-changed";
}

static void cw_facts(const kv_output_facts *f, char *buf, int cap) {
    char mx[32], p[32];
    kv_ulp_format(f->max_ulp, mx, sizeof mx);
    kv_ulp_format(f->p999_ulp, p, sizeof p);
    char hex[KV_HASH_HEX_LEN] = "-";
    if (f->hash_set) kv_hash_format(f->hash, hex);
    if (f->elements > 0)
        snprintf(buf, (size_t)cap, "%s, max %s ulp, 99.9%% %s ulp, %lld/%lld not correctly rounded", hex, mx, p,
                 (long long)f->not_cr, (long long)f->elements);
    else
        snprintf(buf, (size_t)cap, "%s", hex);
}

/* Table cells must not break the Markdown table. */
static void cw_md_cell(FILE *f, const char *s) {
    for (; *s; s++) fputs(*s == '|' ? "\\|" : (*s == '\n' ? " " : (char[]){ *s, 0 }), f);
}

/* The perf pairs are instruction counts (runner/exec/icount.h). */
static bool cw_counted(const kv_runcmp_result *res) {
    return res->perf_compared && strcmp(res->perf_metric, "instructions") == 0;
}

/* compare.md's perf section of instruction counts: every pair whose
 * count changed (any change is real), old and new per call. */
static void cw_md_counts(FILE *f, const kv_runcmp_result *res) {
    int changed = 0;
    for (int i = 0; i < res->nperf; i++) changed += res->perf[i].significant;
    fprintf(f, "## Perf: instructions per call\n\nCounted by %s in both runs. %d (case, backend, variant) pairs in "
               "both runs, %d with another count: %lld regression%s, %lld improvement%s.\n\n",
            res->perf_counter, res->nperf, changed, (long long)res->perf_regressions,
            res->perf_regressions == 1 ? "" : "s", (long long)res->perf_improvements,
            res->perf_improvements == 1 ? "" : "s");
    fprintf(f, "Repetition spread (interquartile range / median): median %.1f%%, 90th percentile %.1f%% (0 when "
               "every call of a variant counted the same).\n\n",
            100.0 * res->noise_median, 100.0 * res->noise_p90);
    if (changed == 0) return;
    fprintf(f, "| verdict | case | backend | variant | old instructions/call | new instructions/call | change |\n"
               "| --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < res->nperf; i++) {
        const kv_runcmp_perf *q = &res->perf[i];
        if (!q->significant) continue;
        fprintf(f, "| %s | ", q->regression ? "**perf-regression**" : (q->improvement ? "improvement" : "changed, under threshold"));
        cw_md_cell(f, q->case_id);
        fprintf(f, " | %s | %s | %.0f | %.0f | %+.1f%% |\n", q->backend, q->variant, q->old_median, q->new_median,
                100.0 * q->change);
    }
    fputc('\n', f);
}

kv_status kv_runcmp_write_md(const kv_runcmp_result *res, const char *path) {
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    FILE *f = rf.f;
    const kv_runcmp_policy *p = res->policy;
    fprintf(f, "# Comparison of two runs\n\nOld: `%s`  \nNew: `%s`\n\n", res->old_dir, res->new_dir);
    fprintf(f, "Policy: regressions are a pass that now fails, a pass that is now UNSUPPORTED or SKIP");
    if (p->require_identical[0]) fprintf(f, ", changed bits in `%s`", p->require_identical);
    if (cw_counted(res))
        fprintf(f, ", and instructions per call (deterministic: no significance test) grown by more than %g%%.\n\n",
                100.0 * p->perf_threshold);
    else
        fprintf(f, ", and a perf slowdown significant at p < %g and over %g%%.\n\n", p->perf_alpha,
                100.0 * p->perf_threshold);
    const int64_t regs = res->regressions + res->perf_regressions;
    fprintf(f, "**%s**: %lld regression%s.\n\n", regs ? "REGRESSION" : "OK", (long long)regs, regs == 1 ? "" : "s");
    if (res->fp_diff[0]) {
        fprintf(f, "## Fingerprints that differ\n\n```\n%s```\n\n", res->fp_diff);
    }
    fprintf(f, "## Rows\n\n| change | rows |\n| --- | --- |\n| in both runs | %lld |\n", (long long)res->compared);
    for (int k = 0; k < KV_RUNCMP_KIND_COUNT; k++)
        if (k != KV_RUNCMP_SAME) fprintf(f, "| %s | %lld |\n", kv_runcmp_kind_name((kv_runcmp_kind)k), (long long)res->counts[k]);
    fprintf(f, "| changed bits (content hash) | %lld |\n| accuracy drift | %lld |\n| identity required, bits changed | %lld |\n\n",
            (long long)res->bits_changed, (long long)res->drifted, (long long)res->identity_violations);
    if (res->nitems > 0) {
        fprintf(f, "## Changed rows\n\n| change | case | check | backend | old | new | outputs (old -> new) |\n"
                   "| --- | --- | --- | --- | --- | --- | --- |\n");
        for (int i = 0; i < res->nitems; i++) {
            const kv_runcmp_item *it = &res->items[i];
            fprintf(f, it->f.regression ? "| **%s** | " : "| %s | ", cw_what(it));
            cw_md_cell(f, it->case_id);
            fprintf(f, " | %s | %s | %s | %s | ", it->check, it->backend,
                    it->has_old ? kv_result_status_name(it->old_status) : "-",
                    it->has_new ? kv_result_status_name(it->new_status) : "-");
            for (int o = 0; o < it->nouts && it->has_old && it->has_new; o++) {
                const bool changed = it->f.outs[o].bits_changed || it->f.outs[o].drift;
                if (!changed) continue;
                char a[160], b[160];
                cw_facts(&it->old_outs[o], a, sizeof a);
                cw_facts(&it->new_outs[o], b, sizeof b);
                fprintf(f, "%d: %s -> %s; ", o, a, b);
            }
            fputs(" |\n", f);
        }
        fputc('\n', f);
    }
    if (cw_counted(res)) {
        cw_md_counts(f, res);
    } else if (res->perf_compared) {
        fprintf(f, "## Perf\n\n%d (case, backend, variant) pairs timed in both runs: %lld regression%s, %lld "
                   "improvement%s.\n\n",
                res->nperf, (long long)res->perf_regressions, res->perf_regressions == 1 ? "" : "s",
                (long long)res->perf_improvements, res->perf_improvements == 1 ? "" : "s");
        fprintf(f, "Machine noise: repetition spread (interquartile range / median) median %.1f%%, 90th percentile "
                   "%.1f%%; ",
                100.0 * res->noise_median, 100.0 * res->noise_p90);
        if (res->drift_pairs > 0)
            fprintf(f, "run-to-run |median change| of the %d pairs with no significant change: median %.1f%%, 90th "
                       "percentile %.1f%%.\n\n",
                    res->drift_pairs, 100.0 * res->drift_median, 100.0 * res->drift_p90);
        else
            fprintf(f, "every pair changed significantly, so no run-to-run noise figure (on a calm machine two runs "
                       "of one tree give one).\n\n");
        fprintf(f, "| verdict | case | backend | variant | old median ns | new median ns | change | p |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (int i = 0; i < res->nperf; i++) {
            const kv_runcmp_perf *q = &res->perf[i];
            if (!q->significant) continue;
            fprintf(f, "| %s | ", q->regression ? "**perf-regression**" : (q->improvement ? "improvement" : "significant, under threshold"));
            cw_md_cell(f, q->case_id);
            fprintf(f, " | %s | %s | %.0f | %.0f | %+.1f%% | %.2g |\n", q->backend, q->variant, q->old_median,
                    q->new_median, 100.0 * q->change, q->p);
        }
        fputc('\n', f);
    }
    return kv_report_file_close(&rf);
}

static json_t *cw_facts_json(const kv_output_facts *f) {
    char hex[KV_HASH_HEX_LEN];
    return json_pack("[s?,I,f,f,I]", f->hash_set ? kv_hash_format(f->hash, hex) : NULL, (json_int_t)f->elements,
                     isinf(f->max_ulp) ? -1.0 : f->max_ulp, isinf(f->p999_ulp) ? -1.0 : f->p999_ulp,
                     (json_int_t)f->not_cr);
}

static kv_status cw_put(kv_report_file *rf, json_t *o) {
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    if (text == NULL) return kv_error(KV_ERR_OOM, "compare: '%s': cannot encode a row", rf->path);
    fputs(text, rf->f);
    fputc('\n', rf->f);
    free(text);
    return KV_OK;
}

kv_status kv_runcmp_write_jsonl(const kv_runcmp_result *res, const char *path) {
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    const int64_t regs = res->regressions + res->perf_regressions;
    st = cw_put(&rf, json_pack("{s:s,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:s}", "kind", "summary", "old",
                               res->old_dir, "new", res->new_dir, "compared", (json_int_t)res->compared,
                               "regressions", (json_int_t)regs, "status_regressions",
                               (json_int_t)res->counts[KV_RUNCMP_REGRESSION], "support_regressions",
                               (json_int_t)res->counts[KV_RUNCMP_SUPPORT_REGRESSION], "identity_regressions",
                               (json_int_t)res->identity_violations, "perf_regressions",
                               (json_int_t)res->perf_regressions, "bits_changed", (json_int_t)res->bits_changed,
                               "drifted", (json_int_t)res->drifted, "fingerprint_diff", res->fp_diff));
    for (int i = 0; st == KV_OK && i < res->nitems; i++) {
        const kv_runcmp_item *it = &res->items[i];
        json_t *outs = json_array();
        for (int o = 0; outs != NULL && o < it->nouts; o++) {
            json_t *e = json_pack("{s:i,s:b,s:b}", "output", o, "bits_changed", it->f.outs[o].bits_changed, "drift",
                                  it->f.outs[o].drift);
            if (e != NULL && it->has_old) json_object_set_new(e, "old", cw_facts_json(&it->old_outs[o]));
            if (e != NULL && it->has_new) json_object_set_new(e, "new", cw_facts_json(&it->new_outs[o]));
            json_array_append_new(outs, e);
        }
        st = cw_put(&rf, json_pack("{s:s,s:s,s:s,s:s,s:s?,s:s?,s:s,s:b,s:o}", "kind", cw_what(it), "case_id",
                                   it->case_id, "check", it->check, "backend", it->backend, "old",
                                   it->has_old ? kv_result_status_name(it->old_status) : NULL, "new",
                                   it->has_new ? kv_result_status_name(it->new_status) : NULL, "transition",
                                   kv_runcmp_kind_name(it->f.kind), "regression", it->f.regression, "outs", outs));
    }
    for (int i = 0; st == KV_OK && i < res->nperf && cw_counted(res); i++) {
        const kv_runcmp_perf *q = &res->perf[i];
        st = cw_put(&rf, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:f,s:n,s:b,s:b}", "kind", "perf", "metric",
                                   "instructions", "counter", res->perf_counter, "case_id", q->case_id, "backend",
                                   q->backend, "variant", q->variant, "old_instructions", (json_int_t)q->old_median,
                                   "new_instructions", (json_int_t)q->new_median, "change", q->change, "p", "significant",
                                   q->significant, "regression", q->regression));
    }
    for (int i = 0; st == KV_OK && i < res->nperf && !cw_counted(res); i++) {
        const kv_runcmp_perf *q = &res->perf[i];
        st = cw_put(&rf, json_pack("{s:s,s:s,s:s,s:s,s:f,s:f,s:f,s:f,s:b,s:b}", "kind", "perf", "case_id", q->case_id,
                                   "backend", q->backend, "variant", q->variant, "old_median_ns", q->old_median,
                                   "new_median_ns", q->new_median, "change", q->change, "p", q->p, "significant",
                                   q->significant, "regression", q->regression));
    }
    if (st != KV_OK) {
        kv_report_file_discard(&rf);
        return st;
    }
    return kv_report_file_close(&rf);
}

kv_status kv_runcmp_write_junit(const kv_runcmp_result *res, const char *path) {
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    FILE *f = rf.f;
    int64_t tests = 1, failures = 0;
    for (int i = 0; i < res->nitems; i++) {
        tests++;
        failures += res->items[i].f.regression;
    }
    for (int i = 0; i < res->nperf; i++) {
        tests += res->perf[i].significant;
        failures += res->perf[i].regression;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvsuite compare\" tests=\"%lld\" "
               "failures=\"%lld\">\n<testsuite name=\"compare\" tests=\"%lld\" failures=\"%lld\">\n",
            (long long)tests, (long long)failures, (long long)tests, (long long)failures);
    fprintf(f, "<testcase classname=\"compare\" name=\"%lld unchanged rows\"/>\n",
            (long long)(res->compared - res->nitems > 0 ? res->compared - res->nitems : 0));
    for (int i = 0; i < res->nitems; i++) {
        const kv_runcmp_item *it = &res->items[i];
        fputs("<testcase classname=\"", f);
        kv_report_put_escaped(f, it->check, true);
        fputs("\" name=\"", f);
        kv_report_put_escaped(f, it->case_id, true);
        fprintf(f, " [%s]\">", it->backend);
        const char *old = it->has_old ? kv_result_status_name(it->old_status) : "-";
        const char *now = it->has_new ? kv_result_status_name(it->new_status) : "-";
        if (it->f.regression) fprintf(f, "<failure message=\"%s: %s -&gt; %s\"/>", cw_what(it), old, now);
        else fprintf(f, "<system-out>%s: %s -&gt; %s</system-out>", cw_what(it), old, now);
        fputs("</testcase>\n", f);
    }
    for (int i = 0; i < res->nperf; i++) {
        const kv_runcmp_perf *q = &res->perf[i];
        if (!q->significant) continue;
        fputs("<testcase classname=\"perf\" name=\"", f);
        kv_report_put_escaped(f, q->case_id, true);
        fprintf(f, " [%s/%s]\">", q->backend, q->variant);
        if (cw_counted(res) && q->regression)
            fprintf(f, "<failure message=\"perf-regression: instructions per call %.0f -&gt; %.0f (%+.1f%%)\"/>",
                    q->old_median, q->new_median, 100.0 * q->change);
        else if (cw_counted(res))
            fprintf(f, "<system-out>instructions per call %.0f -&gt; %.0f (%+.1f%%)</system-out>", q->old_median,
                    q->new_median, 100.0 * q->change);
        else if (q->regression)
            fprintf(f, "<failure message=\"perf-regression: median %+.1f%%, p=%.2g\"/>", 100.0 * q->change, q->p);
        else
            fprintf(f, "<system-out>median %+.1f%%, p=%.2g</system-out>", 100.0 * q->change, q->p);
        fputs("</testcase>\n", f);
    }
    fputs("</testsuite>\n</testsuites>\n", f);
    return kv_report_file_close(&rf);
}

kv_status kv_runcmp_write_html_section(const kv_runcmp_result *res, const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return KV_OK;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    const size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (text == NULL || got != (size_t)n) {
        free(text);
        return kv_error(KV_ERR_INVALID_ARG, "compare: '%s': cannot read it", path);
    }
    text[n] = '\0';
    /* A second comparison into the same folder replaces the first. */
    static const char begin[] = "<!-- kv-compare -->", end_mark[] = "<!-- /kv-compare -->";
    char *old_begin = strstr(text, begin), *old_end = old_begin ? strstr(old_begin, end_mark) : NULL;
    char *body = strstr(text, "</body>");
    char *cut = old_begin && old_end ? old_begin : body;
    const char *rest = old_begin && old_end ? old_end + strlen(end_mark) : body;
    if (cut == NULL) {
        free(text);
        return KV_OK; /* not a page this writer knows: left as it is */
    }
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) {
        free(text);
        return st;
    }
    fwrite(text, 1, (size_t)(cut - text), rf.f);
    const int64_t regs = res->regressions + res->perf_regressions;
    fprintf(rf.f, "%s<section id=\"compare\"><h2>Comparison with ", begin);
    kv_report_put_escaped(rf.f, res->old_dir, false);
    fprintf(rf.f, "</h2><p><b>%s</b>: %lld rows in both runs, %lld regression%s (%lld failing, %lld support, %lld "
                  "identity, %lld perf), %lld fixes, %lld with changed bits, %lld with accuracy drift. Details: "
                  "<a href=\"compare.md\">compare.md</a>, <a href=\"compare.jsonl\">compare.jsonl</a>.</p>",
            regs ? "REGRESSION" : "OK", (long long)res->compared, (long long)regs, regs == 1 ? "" : "s",
            (long long)res->counts[KV_RUNCMP_REGRESSION], (long long)res->counts[KV_RUNCMP_SUPPORT_REGRESSION],
            (long long)res->identity_violations, (long long)res->perf_regressions,
            (long long)res->counts[KV_RUNCMP_FIX], (long long)res->bits_changed, (long long)res->drifted);
    fputs("<ul>", rf.f);
    int shown = 0;
    for (int i = 0; i < res->nitems && shown < 50; i++) {
        const kv_runcmp_item *it = &res->items[i];
        if (!it->f.regression) continue;
        fprintf(rf.f, "<li>%s: ", cw_what(it));
        kv_report_put_escaped(rf.f, it->case_id, false);
        fprintf(rf.f, " %s [%s]</li>", it->check, it->backend);
        shown++;
    }
    for (int i = 0; i < res->nperf && shown < 50; i++) {
        const kv_runcmp_perf *q = &res->perf[i];
        if (!q->regression) continue;
        fputs("<li>perf-regression: ", rf.f);
        kv_report_put_escaped(rf.f, q->case_id, false);
        if (cw_counted(res))
            fprintf(rf.f, " [%s/%s]: instructions per call %.0f -&gt; %.0f (%+.1f%%)</li>", q->backend, q->variant,
                    q->old_median, q->new_median, 100.0 * q->change);
        else
            fprintf(rf.f, " [%s/%s]: median %.0f ns -&gt; %.0f ns (%+.1f%%)</li>", q->backend, q->variant,
                    q->old_median, q->new_median, 100.0 * q->change);
        shown++;
    }
    fprintf(rf.f, "</ul></section>%s", end_mark);
    fputs(rest, rf.f);
    free(text);
    return kv_report_file_close(&rf);
}
