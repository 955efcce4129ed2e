/* failures.txt: every failing row of the run as a baseline entry
 * (baseline.h's format), so `cp reports/failures.txt known.txt` and
 * `--baseline=known.txt` turn today's failures into tomorrow's XFAILs and
 * nothing else. One entry per (case, check, backend), exact (glob
 * characters escaped), with the status and the start of the message as a
 * comment. ERROR rows are listed commented out: a baseline never excuses
 * them, so an entry would only be reported as matching nothing. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"

#include <string.h>

/* A field made literal for the glob matcher: `*`, `?` and `\` escaped. */
static void put_literal(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '*' || *s == '?' || *s == '\\') fputc('\\', f);
        fputc(*s, f);
    }
}

/* The message on one line, cut short: a comment, not the record. */
static void put_comment(FILE *f, const char *msg) {
    int n = 0;
    for (; *msg && n < 120; msg++, n++) fputc((*msg == '\n' || *msg == '\r' || *msg == '\t') ? ' ' : *msg, f);
    if (*msg) fputs("...", f);
}

kv_status kv_report_write_failures(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_failures: argument 'results': is NULL");
    kv_report_agg a;
    kv_status st = kv_report_agg_of(&a, results);
    if (st == KV_OK) st = kv_report_failures_agg(&a, meta, path);
    kv_report_agg_free(&a);
    return st;
}

/* Every failing row is a kept one (report_agg.h). */
kv_status kv_report_failures_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path) {
    const kv_result_list *results = &a->kept;
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    FILE *f = rf.f;
    fputs("# kvrun failures, in --baseline format: CASE_ID CHECK BACKEND\n", f);
    if (meta != NULL && meta->run_name[0]) {
        fputs("# run: ", f);
        put_comment(f, meta->run_name);
        fputc('\n', f);
    }
    char inc[512];
    if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) {
        fputs("# ", f);
        put_comment(f, inc);
        fputc('\n', f);
    }
    for (int i = 0; i < results->n; i++) {
        const kv_check_result *r = &results->items[i];
        const bool excusable = r->status == KV_RESULT_FAIL || r->status == KV_RESULT_CRASH ||
                               r->status == KV_RESULT_TIMEOUT || r->status == KV_RESULT_XFAIL;
        if (!excusable && r->status != KV_RESULT_ERROR && r->status != KV_RESULT_FLAKY) continue;
        /* A flake passed in the end: a baseline entry for it could only
         * ever be stale, so it is listed for the reader, commented out. */
        if (r->status == KV_RESULT_FLAKY) fputs("# FLAKY, passed on a retry: ", f);
        else if (!excusable) fputs("# ERROR, never excused: ", f);
        put_literal(f, r->case_id);
        fputc(' ', f);
        put_literal(f, r->check[0] ? r->check : "*");
        fputc(' ', f);
        put_literal(f, r->backend[0] ? r->backend : "*");
        if (excusable) {
            fprintf(f, "  # %s: ", kv_result_status_name(r->status));
            put_comment(f, r->message);
        }
        fputc('\n', f);
    }
    return kv_report_file_close(&rf);
}
