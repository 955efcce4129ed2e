/* The report folder as a whole: every writer, in the order that makes a
 * half-written folder recognizable (report.h). */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <stdio.h>
#include <stdlib.h>

typedef kv_status (*writer_fn)(const kv_result_list *, const kv_report_meta *, const char *);

static kv_status write_jsonl_adapter(const kv_result_list *r, const kv_report_meta *m, const char *path) {
    (void)m;
    return kv_report_write_jsonl(r, path);
}

static kv_status write_meta_adapter(const kv_result_list *r, const kv_report_meta *m, const char *path) {
    return kv_report_write_meta(m, r, path);
}

kv_status kv_report_write_all(const kv_result_list *results, const kv_report_meta *meta,
                              const char *dir) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_all: argument 'results': is NULL");
    kv_report_meta empty;
    if (meta == NULL) {
        kv_report_meta_init(&empty);
        meta = &empty;
    }
    kv_status st = kv_report_mkdirs(dir);
    if (st != KV_OK) return st;

    static const struct {
        const char *name;
        writer_fn fn;
    } writers[] = {
        /* meta.json after results.jsonl: it carries the result count a
         * merge checks, so it also marks the results file as complete. */
        { KV_REPORT_JSONL, write_jsonl_adapter },   { KV_REPORT_META, write_meta_adapter },
        { KV_REPORT_JUNIT, kv_report_write_junit }, { KV_REPORT_HTML, kv_report_write_html },
        { KV_REPORT_MATRIX, kv_report_write_matrix }, { KV_REPORT_FAILURES, kv_report_write_failures },
        { KV_REPORT_ACCURACY, kv_report_write_accuracy },
        { KV_REPORT_ACCURACY_JSONL, kv_report_write_accuracy_jsonl },
    };
    /* Write every file even after one failed: a partial report beats none.
     * The first failure is the one reported. */
    kv_status first = KV_OK;
    char first_msg[1024] = "";
    for (size_t i = 0; i < sizeof writers / sizeof writers[0]; i++) {
        char *dir_slash = kv_report_dup_join(dir, "/");
        char *path = dir_slash ? kv_report_dup_join(dir_slash, writers[i].name) : NULL;
        free(dir_slash);
        if (path == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
        st = writers[i].fn(results, meta, path);
        free(path);
        if (st != KV_OK && first == KV_OK) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "%s", kv_last_error_message());
        }
    }
    if (first != KV_OK) return kv_error(first, "%s", first_msg);
    return KV_OK;
}
