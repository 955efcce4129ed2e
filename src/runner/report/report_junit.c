/* junit.xml: one <testsuite> per op (in order of first appearance), one
 * <testcase> per (case, check): name = case ID, classname = "op.check".
 *   FAIL, XPASS              -> <failure type="STATUS">
 *   ERROR, CRASH, TIMEOUT    -> <error type="STATUS">
 *   SKIP, UNSUPPORTED        -> <skipped>
 *   XFAIL                    -> <skipped type="XFAIL" message=the baseline
 *                               entry and the original failure>, so a
 *                               dashboard shows known failures as such
 *                               (and the run still passes)
 *   PASS                     -> passing testcase
 *   FLAKY                    -> under --flaky=pass (the default) a passing
 *                               testcase holding <flakyFailure type="FLAKY"
 *                               message=how it failed first>, Maven
 *                               Surefire's convention for a test that
 *                               passed on a rerun (Jenkins, GitLab and
 *                               most JUnit readers count it as passed and
 *                               show or ignore the child); under
 *                               --flaky=fail <failure type="FLAKY">
 * Everything is escaped for XML 1.0 (report.c), including the control
 * characters XML cannot carry at all. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct suite_counts {
    int64_t tests, failures, errors, skipped;
    double seconds;
} suite_counts;

static void count_into(suite_counts *c, const kv_check_result *r, bool flaky_fail) {
    c->tests++;
    c->seconds += r->seconds;
    switch (r->status) {
    case KV_RESULT_FLAKY: c->failures += flaky_fail; break;
    case KV_RESULT_FAIL:
    case KV_RESULT_XPASS: c->failures++; break;
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT: c->errors++; break;
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    case KV_RESULT_UNSUPPORTED: c->skipped++; break;
    case KV_RESULT_PASS: break;
    case KV_RESULT_STATUS_COUNT: c->errors++; break;
    }
}

static void put_counts(FILE *f, const suite_counts *c) {
    fprintf(f, " tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" skipped=\"%lld\" time=\"%.6f\"",
            (long long)c->tests, (long long)c->failures, (long long)c->errors, (long long)c->skipped, c->seconds);
}

/* The console block of a result, as one escaped text. */
static void put_details(FILE *f, const kv_check_result *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL) {
        kv_report_put_escaped(f, r->message, false);
        return;
    }
    kv_report_put_problem(mem, r);
    fclose(mem);
    kv_report_put_escaped(f, text, false);
    free(text);
}

static const char *short_message(const kv_check_result *r) {
    if (r->message[0]) return r->message;
    switch (r->status) {
    case KV_RESULT_XPASS: return "passed, but the baseline expects a failure: the baseline entry is stale";
    case KV_RESULT_CRASH: return "the worker crashed";
    case KV_RESULT_TIMEOUT: return "the case timed out";
    case KV_RESULT_FLAKY: return "failed, then passed on a retry";
    case KV_RESULT_PASS:
    case KV_RESULT_FAIL:
    case KV_RESULT_ERROR:
    case KV_RESULT_UNSUPPORTED:
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    case KV_RESULT_STATUS_COUNT: break;
    }
    return kv_result_status_name(r->status);
}

static void put_testcase(FILE *f, const kv_check_result *r, bool flaky_fail) {
    fputs("    <testcase name=\"", f);
    kv_report_put_escaped(f, r->case_id, true);
    fputs("\" classname=\"", f);
    kv_report_put_escaped(f, r->op, true);
    fputc('.', f);
    kv_report_put_escaped(f, r->check, true);
    fprintf(f, "\" time=\"%.6f\"", r->seconds);
    const char *tag = NULL;
    switch (r->status) {
    case KV_RESULT_FAIL:
    case KV_RESULT_XPASS: tag = "failure"; break;
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    case KV_RESULT_STATUS_COUNT: tag = "error"; break;
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    case KV_RESULT_UNSUPPORTED: tag = "skipped"; break;
    case KV_RESULT_FLAKY: tag = flaky_fail ? "failure" : "flakyFailure"; break;
    case KV_RESULT_PASS: break;
    }
    const bool has_out = r->repro[0] != '\0' || r->output[0] != '\0';
    if (tag == NULL && !has_out) {
        fputs("/>\n", f);
        return;
    }
    fputs(">\n", f);
    if (tag != NULL) {
        fprintf(f, "      <%s type=\"%s\" message=\"", tag, kv_result_status_name(r->status));
        kv_report_put_escaped(f, short_message(r), true);
        fputs("\">", f);
        if (strcmp(tag, "skipped") != 0) put_details(f, r);
        fprintf(f, "</%s>\n", tag);
    }
    if (has_out) {
        fputs("      <system-out>", f);
        if (r->repro[0]) {
            fputs("repro: ", f);
            kv_report_put_escaped(f, r->repro, false);
            fputc('\n', f);
        }
        /* What the case printed (a plugin's lines), captured by its worker. */
        if (r->output[0]) {
            fputs("output:\n", f);
            kv_report_put_escaped(f, r->output, false);
            fputc('\n', f);
        }
        fputs("</system-out>\n", f);
    }
    fputs("    </testcase>\n", f);
}

static void put_properties(FILE *f, const kv_report_meta *meta) {
    char buf[64];
    fputs("    <properties>\n", f);
    fprintf(f, "      <property name=\"seed\" value=\"%llu\"/>\n", (unsigned long long)meta->seed);
    if (meta->shard_n > 0) fprintf(f, "      <property name=\"shard\" value=\"%d/%d\"/>\n", meta->shard_k, meta->shard_n);
    if (meta->merged_from > 0) fprintf(f, "      <property name=\"merged_from\" value=\"%d\"/>\n", meta->merged_from);
    kv_report_fmt_time(meta->start_time, buf, sizeof buf);
    fprintf(f, "      <property name=\"start_time\" value=\"%s\"/>\n", buf);
    char inc[512];
    if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) {
        fputs("      <property name=\"incomplete\" value=\"", f);
        kv_report_put_escaped(f, inc, true);
        fputs("\"/>\n", f);
    }
    fputs("      <property name=\"options\" value=\"", f);
    kv_report_put_escaped(f, meta->options, true);
    fputs("\"/>\n    </properties>\n", f);
}

kv_status kv_report_write_junit(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_junit: argument 'results': is NULL");
    kv_report_meta empty;
    if (meta == NULL) {
        kv_report_meta_init(&empty);
        meta = &empty;
    }
    /* suite_of[i]: index of the first result with the same op; reps: those
     * first results, one per op (few ops, many results). */
    int *suite_of = malloc(((size_t)results->n + 1) * sizeof *suite_of);
    int *reps = malloc(((size_t)results->n + 1) * sizeof *reps);
    if (suite_of == NULL || reps == NULL) {
        free(suite_of);
        free(reps);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    int nreps = 0;
    for (int i = 0; i < results->n; i++) {
        suite_of[i] = i;
        for (int k = 0; k < nreps; k++) {
            if (strcmp(results->items[reps[k]].op, results->items[i].op) == 0) {
                suite_of[i] = reps[k];
                break;
            }
        }
        if (suite_of[i] == i) reps[nreps++] = i;
    }
    free(reps);
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) {
        free(suite_of);
        return st;
    }
    FILE *f = rf.f;
    suite_counts total = { 0 };
    for (int i = 0; i < results->n; i++) count_into(&total, &results->items[i], meta->flaky_fail);
    char ts[64];
    kv_report_fmt_time(meta->start_time, ts, sizeof ts);
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvsuite", f);
    if (meta->run_name[0]) {
        fputc(' ', f);
        kv_report_put_escaped(f, meta->run_name, true);
    }
    fputc('"', f);
    put_counts(f, &total);
    fputs(">\n", f);
    for (int s = 0; s < results->n; s++) {
        if (suite_of[s] != s) continue;
        suite_counts c = { 0 };
        for (int i = s; i < results->n; i++)
            if (suite_of[i] == s) count_into(&c, &results->items[i], meta->flaky_fail);
        fputs("  <testsuite name=\"", f);
        kv_report_put_escaped(f, results->items[s].op, true);
        fputc('"', f);
        put_counts(f, &c);
        if (meta->start_time != 0) fprintf(f, " timestamp=\"%.19s\"", ts); /* JUnit wants no zone suffix */
        fputs(">\n", f);
        put_properties(f, meta);
        for (int i = s; i < results->n; i++)
            if (suite_of[i] == s) put_testcase(f, &results->items[i], meta->flaky_fail);
        fputs("  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
    free(suite_of);
    return kv_report_file_close(&rf);
}
