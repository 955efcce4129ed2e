/* A report folder written as rows arrive (report.h, "building a report
 * folder row by row"): results.jsonl and the junit.xml spool take each
 * row at once, the aggregate keeps counts, small tables and the rows that
 * are not plain passes, and every other report is written from it at the
 * end. The memory this takes depends on the failures, the ops and the
 * backends of the run, not on its number of cases. */
#include "runner/report/report.h"
#include "runner/report/report_agg.h"
#include "runner/report/report_internal.h"

#include <stdlib.h>
#include <string.h>

struct kv_report_build {
    char *dir;
    kv_report_file jsonl;
    bool jsonl_open;
    kv_junit_spool *junit;
    kv_report_agg agg;
    kv_status failed;            /* the first error of an add: the rest are dropped */
    char failed_msg[1024];
};

static char *build_path(const char *dir, const char *name) {
    char *slash = kv_report_dup_join(dir, "/");
    char *p = slash ? kv_report_dup_join(slash, name) : NULL;
    free(slash);
    return p;
}

kv_report_build *kv_report_build_begin(const char *dir, const kv_report_meta *meta) {
    if (dir == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_report_build_begin: argument 'dir': is NULL");
        return NULL;
    }
    if (kv_report_mkdirs(dir) != KV_OK) return NULL;
    kv_report_build *b = calloc(1, sizeof *b);
    char *jp = build_path(dir, KV_REPORT_JSONL);
    if (b == NULL || jp == NULL || (b->dir = strdup(dir)) == NULL) {
        free(jp);
        kv_report_build_free(b);
        kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
        return NULL;
    }
    kv_report_agg_init(&b->agg);
    kv_status st = kv_report_file_open(&b->jsonl, jp);
    free(jp);
    b->jsonl_open = st == KV_OK;
    if (st == KV_OK && (b->junit = kv_junit_spool_new(meta != NULL && meta->flaky_fail)) == NULL) st = kv_last_error();
    if (st != KV_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", kv_last_error_message());
        kv_report_build_free(b);
        kv_error(st, "%s", msg);
        return NULL;
    }
    return b;
}

kv_status kv_report_build_add(kv_report_build *b, const kv_check_result *r) {
    if (b == NULL || r == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_build_add: argument '%s': is NULL", b == NULL ? "b" : "r");
    /* A file that failed (a full disk) is reported once, by finish; the
     * counts go on, so the console still counts every row. */
    if (b->failed != KV_OK) return kv_report_agg_add(&b->agg, r);
    kv_status st = KV_OK;
    char *line = kv_report_result_line(r);
    if (line == NULL) {
        st = kv_error(KV_ERR_OOM, "report: '%s': cannot encode a row of '%s' as JSON", b->jsonl.path, r->case_id);
    } else {
        fputs(line, b->jsonl.f);
        fputc('\n', b->jsonl.f);
        free(line);
        st = kv_report_agg_add(&b->agg, r);
    }
    if (st == KV_OK) st = kv_junit_spool_add(b->junit, b->agg.last_op, r);
    if (st != KV_OK) {
        b->failed = st;
        snprintf(b->failed_msg, sizeof b->failed_msg, "%s", kv_last_error_message());
    }
    return st;
}

typedef kv_status (*build_writer_fn)(const kv_report_build *, const kv_report_meta *, const char *);

static kv_status w_meta(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_report_meta_agg(m, &b->agg, p);
}
static kv_status w_junit(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_junit_spool_write(b->junit, &b->agg, m, p);
}
static kv_status w_html(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_report_html_agg(&b->agg, m, p);
}
static kv_status w_matrix(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_report_matrix_agg(&b->agg, m, p);
}
static kv_status w_failures(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_report_failures_agg(&b->agg, m, p);
}
static kv_status w_accuracy(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_report_accuracy_agg(&b->agg, m, p);
}
static kv_status w_accuracy_jsonl(const kv_report_build *b, const kv_report_meta *m, const char *p) {
    return kv_report_accuracy_jsonl_agg(&b->agg, m, p);
}

kv_status kv_report_build_finish(kv_report_build *b, const kv_report_meta *meta) {
    if (b == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_report_build_finish: argument 'b': is NULL");
    kv_report_meta empty;
    if (meta == NULL) {
        kv_report_meta_init(&empty);
        meta = &empty;
    }
    if (b->failed != KV_OK) {
        if (b->jsonl_open) kv_report_file_discard(&b->jsonl);
        b->jsonl_open = false;
        return kv_error(b->failed, "%s", b->failed_msg);
    }
    /* results.jsonl first, then meta.json: it carries the result count a
     * merge checks, so it also marks the results file as complete. */
    kv_status first = kv_report_file_close(&b->jsonl);
    b->jsonl_open = false;
    char first_msg[1024] = "";
    if (first != KV_OK) snprintf(first_msg, sizeof first_msg, "%s", kv_last_error_message());
    kv_report_agg_finish(&b->agg);
    static const struct {
        const char *name;
        build_writer_fn fn;
    } writers[] = {
        { KV_REPORT_META, w_meta },         { KV_REPORT_JUNIT, w_junit },
        { KV_REPORT_HTML, w_html },         { KV_REPORT_MATRIX, w_matrix },
        { KV_REPORT_FAILURES, w_failures }, { KV_REPORT_ACCURACY, w_accuracy },
        { KV_REPORT_ACCURACY_JSONL, w_accuracy_jsonl },
    };
    /* Every file even after one failed: a partial report beats none. The
     * first failure is the one reported. */
    for (size_t i = 0; i < sizeof writers / sizeof writers[0]; i++) {
        char *path = build_path(b->dir, writers[i].name);
        if (path == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", b->dir);
        const kv_status st = writers[i].fn(b, meta, path);
        free(path);
        if (st != KV_OK && first == KV_OK) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "%s", kv_last_error_message());
        }
    }
    if (first != KV_OK) return kv_error(first, "%s", first_msg);
    return KV_OK;
}

void kv_report_build_console(const kv_report_build *b, FILE *out, const kv_report_meta *meta) {
    if (b != NULL) kv_report_console_agg(out, &b->agg, meta);
}

int kv_report_build_exit_code(const kv_report_build *b, bool flaky_fail) {
    return b == NULL ? 1 : kv_report_agg_exit_code(&b->agg, flaky_fail);
}

int64_t kv_report_build_rows(const kv_report_build *b) { return b == NULL ? 0 : b->agg.nrows; }

void kv_report_build_free(kv_report_build *b) {
    if (b == NULL) return;
    if (b->jsonl_open) kv_report_file_discard(&b->jsonl);
    kv_junit_spool_free(b->junit);
    kv_report_agg_free(&b->agg);
    free(b->dir);
    free(b);
}
