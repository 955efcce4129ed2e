/* The console summary. The problems come last, right above the counts, so
 * the end of a CI log shows what broke and how to reproduce it. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define INDENT "      "

/* Text from kernels and workers may hold anything; never let it drive the
 * terminal. Newlines continue at the indent. */
static void put_text(FILE *out, const char *s) {
    for (const unsigned char *u = (const unsigned char *)s; *u; u++) {
        if (*u == '\n') fputs("\n" INDENT, out);
        else if (*u < 0x20 && *u != '\t') fprintf(out, "\\x%02X", (unsigned)*u);
        else if (*u == 0x7F) fputs("\\x7F", out);
        else fputc(*u, out);
    }
}

const char *kv_report_accel_blame(const kv_check_result *r, const char *accel_target) {
    return accel_target != NULL && accel_target[0] && strcmp(accel_target, "none") != 0 &&
                   strcmp(r->backend, "accel") == 0
               ? accel_target
               : NULL;
}

void kv_report_put_problem(FILE *out, const kv_check_result *r, const char *accel_target) {
    fprintf(out, "%-7s %s\n", kv_result_status_name(r->status), r->case_id);
    const char *target = kv_report_accel_blame(r, accel_target);
    fprintf(out, INDENT "check=%s backend=%s%s%s%s dtype=%s (%.3f s)\n", r->check, r->backend,
            target ? " (the accel target: " : "", target ? target : "", target ? ")" : "", kv_dtype_name(r->dtype),
            r->seconds);
    if (r->status == KV_RESULT_XPASS && !r->message[0]) {
        fputs(INDENT "passed, but the baseline expects it to fail: the baseline entry is stale\n", out);
    }
    if (r->message[0]) {
        fputs(INDENT, out);
        put_text(out, r->message);
        fputc('\n', out);
    }
    /* The checks' messages already carry "N of M elements differ (...)";
     * the counts line is for rows whose message does not. */
    if ((r->compared > 0 || r->mismatched > 0) && strstr(r->message, "elements differ") == NULL) {
        char abs[40], ulp[40];
        kv_report_fmt_double(r->max_abs_err, abs, sizeof abs);
        if (r->max_ulps < 0) snprintf(ulp, sizeof ulp, "n/a");
        else kv_report_fmt_double(r->max_ulps, ulp, sizeof ulp);
        fprintf(out, INDENT "%lld of %lld elements differ; max abs err %s, max ulp %s\n",
                (long long)r->mismatched, (long long)r->compared, abs, ulp);
    }
    int nm = r->nmismatches < 0 ? 0 : (r->nmismatches > KV_RESULT_MAX_MISMATCHES ? KV_RESULT_MAX_MISMATCHES : r->nmismatches);
    for (int i = 0; i < nm; i++) {
        const kv_mismatch *m = &r->mismatches[i];
        char idx[8 * 24], e[40], g[40], a[40], rel[40], u[40];
        kv_report_fmt_index(m, idx, sizeof idx);
        kv_report_fmt_double(m->expected, e, sizeof e);
        kv_report_fmt_double(m->got, g, sizeof g);
        kv_report_fmt_double(m->abs_err, a, sizeof a);
        kv_report_fmt_double(m->rel_err, rel, sizeof rel);
        kv_report_fmt_ulp(m, u, sizeof u);
        fprintf(out, INDENT "at %s: expected %s, got %s (abs err %s, rel err %s, %s%s)\n", idx, e, g, a, rel,
                strcmp(u, "sign differs") != 0 ? "ulp " : "", u);
    }
    if (r->mismatched > nm && nm > 0)
        fprintf(out, INDENT "... and %lld more\n", (long long)(r->mismatched - nm));
    if (r->output[0]) {
        fputs(INDENT "output: ", out);
        put_text(out, r->output);
        fputc('\n', out);
    }
    if (r->repro[0]) {
        fputs(INDENT "repro: ", out);
        put_text(out, r->repro);
        fputc('\n', out);
    }
}

/* The tolerance overrides files of the run, one line each, with how many
 * rows their overrides widened (meta.json lists every override). */
static void put_tolerances(FILE *out, const kv_report_agg *a) {
    for (int i = 0; i < kv_tol_override_count();) {
        const char *src = kv_tol_override_at(i)->source;
        const char *colon = strrchr(src, ':');
        const int flen = colon ? (int)(colon - src) : (int)strlen(src);
        int64_t rows = 0;
        int n = 0;
        for (; i < kv_tol_override_count() && strncmp(kv_tol_override_at(i)->source, src, (size_t)flen) == 0 &&
               kv_tol_override_at(i)->source[flen] == ':';
             i++, n++)
            rows += a->tol_uses[i];
        fputs("== tolerance overrides: ", out);
        fprintf(out, "%.*s: %d override%s, %lld row%s widened (meta.json lists them)\n", flen, src, n,
                n == 1 ? "" : "s", (long long)rows, rows == 1 ? "" : "s");
        if (n == 0) i++;
    }
}

static void put_header(FILE *out, const kv_report_agg *a, const kv_report_meta *meta) {
    const int64_t n = a->nrows;
    fputs("== kvrun", out);
    if (meta && meta->run_name[0]) {
        fputs(" ", out);
        put_text(out, meta->run_name);
    }
    fprintf(out, ": %lld result%s", (long long)n, n == 1 ? "" : "s");
    if (meta) {
        fprintf(out, " of %lld case%s, seed %llu", (long long)meta->ncases, meta->ncases == 1 ? "" : "s",
                (unsigned long long)meta->seed);
        if (meta->shard_n > 0) fprintf(out, ", shard %d/%d", meta->shard_k, meta->shard_n);
        if (meta->merged_from > 0) fprintf(out, ", merged from %d report folders", meta->merged_from);
        fprintf(out, ", %.2f s", meta->wall_seconds);
    }
    fputc('\n', out);
    char inc[512];
    if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) fprintf(out, "== %s\n", inc);
    if (meta && meta->options[0]) {
        fputs("== options: ", out);
        put_text(out, meta->options);
        fputc('\n', out);
    }
    if (meta && meta->nbackends > 0) {
        fprintf(out, "== backends (plugin ABI %d):", meta->abi_version);
        for (int i = 0; i < meta->nbackends; i++) {
            const kv_report_backend *b = &meta->backends[i];
            fputs(i ? ", " : " ", out);
            put_text(out, b->name);
            fprintf(out, " (%s", b->state);
            if (b->version[0]) {
                fputs(", ", out);
                put_text(out, b->version);
            }
            fputc(')', out);
        }
        fputs("; accel target: ", out);
        put_text(out, meta->accel_target);
        if (strcmp(meta->accel_requested, "auto") == 0) fputs(" (auto)", out);
        fputc('\n', out);
        for (int i = 0; i < meta->nbackends; i++) {
            const kv_report_backend *b = &meta->backends[i];
            if (!b->reason[0]) continue;
            fprintf(out, "== backend %s %s: ", b->name, b->state);
            put_text(out, b->reason);
            fputc('\n', out);
        }
    }
    put_tolerances(out, a);
}

/* Cases whose code printed something (a plugin's debug lines, captured by
 * the workers): every row of such a case carries it, and a passing case
 * has no problem entry to show it under, so the first few are named here
 * with their first line (report_agg.c keeps them). */
static void put_outputs(FILE *out, const kv_report_agg *a) {
    const int64_t ncases = a->output_cases;
    if (ncases == 0) return;
    fprintf(out, "== %lld case%s printed to stdout/stderr (\"output\" in results.jsonl):\n", (long long)ncases,
            ncases == 1 ? "" : "s");
    const int shown = ncases < KV_AGG_OUTPUTS_SHOWN ? (int)ncases : KV_AGG_OUTPUTS_SHOWN;
    for (int k = 0; k < shown; k++) {
        fputs(INDENT, out);
        put_text(out, a->output_ids[k]);
        fputs(": ", out);
        put_text(out, a->output_first[k]);
        fputc('\n', out);
    }
    if (ncases > shown) fprintf(out, INDENT "... and %lld more\n", (long long)(ncases - shown));
}

void kv_report_console(FILE *out, const kv_result_list *results, const kv_report_meta *meta) {
    if (out == NULL) return;
    kv_report_agg a;
    if (kv_report_agg_of(&a, results) != KV_OK) {
        fprintf(out, "== kvrun: %s\n", kv_last_error_message());
        return;
    }
    kv_report_console_agg(out, &a, meta);
    kv_report_agg_free(&a);
}

void kv_report_console_agg(FILE *out, const kv_report_agg *a, const kv_report_meta *meta) {
    if (out == NULL) return;
    put_header(out, a, meta);
    const int64_t *c = a->counts;
    const kv_result_list *kept = &a->kept;
    const int n = kept->n;
    const char *accel = meta ? meta->accel_target : NULL;
    if (a->nrows == 0) fputs("== no results: the run selected no cases\n", out);

    /* Flakes before the problems: they passed in the end, but each one is
     * named with how it failed, so a flaky kernel is seen, not buried. */
    if (c[KV_RESULT_FLAKY] > 0) {
        fprintf(out, "== %lld flaky (failed, then passed on a retry; %s):\n", (long long)c[KV_RESULT_FLAKY],
                meta && meta->flaky_fail ? "--flaky=fail: the run fails" : "--flaky=fail would fail the run");
        for (int i = 0; i < n; i++)
            if (kept->items[i].status == KV_RESULT_FLAKY) kv_report_put_problem(out, &kept->items[i], accel);
    }
    int64_t nbad = 0;
    for (int i = 0; i < n; i++) nbad += kv_result_status_is_bad(kept->items[i].status);
    if (nbad > 0) {
        fprintf(out, "== %lld problem%s:\n", (long long)nbad, nbad == 1 ? "" : "s");
        for (int i = 0; i < n; i++)
            if (kv_result_status_is_bad(kept->items[i].status)) kv_report_put_problem(out, &kept->items[i], accel);
    }
    put_outputs(out, a);
    if (c[KV_RESULT_XPASS] > 0)
        fprintf(out, "== the baseline is stale: %lld unexpected pass%s (XPASS); remove %s entr%s from the baseline file\n",
                (long long)c[KV_RESULT_XPASS], c[KV_RESULT_XPASS] == 1 ? "" : "es",
                c[KV_RESULT_XPASS] == 1 ? "its" : "their", c[KV_RESULT_XPASS] == 1 ? "y" : "ies");

    /* Cases with no stored golden that ran against the live reference
     * (check_golden.c): shown, so a pass against the live reference is
     * never mistaken for a pass against the store. */
    const int64_t nlive = a->live;
    if (nlive > 0)
        fprintf(out, "== live reference: %lld case%s had no stored golden and %s compared against the reference "
                "kernel run live (e.g. %s); --golden=store makes that an ERROR\n",
                (long long)nlive, nlive == 1 ? "" : "s", nlive == 1 ? "was" : "were", a->first_live);

    for (int g = 0; g < KV_REPORT_GATES; g++) {
        if (a->hits[g].cases == 0) continue;
        char line[512];
        kv_report_hits_format(&a->hits[g], line, (int)sizeof line);
        fprintf(out, "== fast-path hit rate, %s\n", line);
    }
    kv_report_short_summary(out, kept, accel);
    /* FLAKY only when there is one: the line stays what scripts grep. */
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        if (s != KV_RESULT_FLAKY || c[s] > 0)
            fprintf(out, "%s%s %lld", s ? ", " : "", kv_result_status_name((kv_result_status)s), (long long)c[s]);
    fputc('\n', out);
    kv_report_totals t = kv_report_agg_totals(a);
    fprintf(out, "%lld passed, %lld failed, %lld skipped", (long long)t.passed, (long long)t.failed,
            (long long)t.skipped);
    if (t.flaky > 0) fprintf(out, ", %lld flaky", (long long)t.flaky);
    fputc('\n', out);
    fflush(out);
}
