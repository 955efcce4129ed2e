/* A report folder written as rows arrive (report.h, "building a report
 * folder row by row"): results.jsonl and the junit.xml spool take each
 * row at once, the aggregate keeps counts, small tables and the rows that
 * are not plain passes, and every other report is written from it at the
 * end. The memory this takes depends on the failures, the ops and the
 * backends of the run, not on its number of cases. */
#include "runner/report/report.h"
#include "runner/report/report_agg.h"
#include "runner/report/report_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

struct kv_report_build {
    char *dir;
    kv_report_file jsonl;
    bool jsonl_open;
    /* --gzip-results: the rows go through zlib to results.jsonl.gz.tmp,
     * renamed on finish; results.jsonl (the store the run appended to) is
     * then removed. */
    gzFile gz;
    char *gz_path, *gz_tmp;
    bool gz_written;
    kv_junit_spool *junit;
    kv_report_agg agg;
    kv_status failed;            /* the first error of an add: the rest are dropped */
    char failed_msg[1024];
};

/* Level 1: the rows repeat themselves so much that the fastest level
 * already takes a whole suite's rows to a few percent of their size; the
 * default level saves little more at several times the time. */
static kv_status build_gz_open(kv_report_build *b, const char *plain) {
    b->gz_path = kv_report_dup_join(plain, ".gz");
    b->gz_tmp = b->gz_path ? kv_report_dup_join(b->gz_path, ".tmp") : NULL;
    if (b->gz_tmp == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", plain);
    errno = 0;
    if ((b->gz = gzopen(b->gz_tmp, "wb1")) == NULL) {
        const int e = errno;
        return kv_error(KV_ERR_INVALID_ARG, "report: cannot write '%s' (opening '%s'): %s", b->gz_path, b->gz_tmp,
                        e ? strerror(e) : "out of memory");
    }
    return KV_OK;
}

/* Closes results.jsonl.gz.tmp, renames it into place and removes the plain
 * store; on any failure removes the .tmp and names what failed. */
static kv_status build_gz_close(kv_report_build *b, bool keep) {
    if (b->gz == NULL) return KV_OK;
    const int zr = gzclose_w(b->gz);
    const int e = errno;
    b->gz = NULL;
    kv_status st = KV_OK;
    if (!keep) {
        remove(b->gz_tmp);
    } else if (zr != Z_OK) {
        st = kv_error(KV_ERR_INVALID_ARG, "report: writing '%s' failed: %s", b->gz_tmp,
                      zr == Z_ERRNO && e ? strerror(e) : "zlib error");
        remove(b->gz_tmp);
    } else if (rename(b->gz_tmp, b->gz_path) != 0) {
        const int re = errno;
        st = kv_error(KV_ERR_INVALID_ARG, "report: cannot rename '%s' to '%s': %s", b->gz_tmp, b->gz_path,
                      strerror(re));
        remove(b->gz_tmp);
    } else {
        b->gz_written = true;
    }
    return st;
}

/* After meta.json says the run is complete (until then the plain store is
 * what --resume reads): results.jsonl goes, results.jsonl.gz stays. */
static kv_status build_drop_plain_store(const kv_report_build *b) {
    char *plain = kv_report_dup_join(b->dir, "/" KV_REPORT_JSONL);
    kv_status st = plain == NULL ? kv_error(KV_ERR_OOM, "report: '%s': out of memory", b->dir) : KV_OK;
    if (plain != NULL && unlink(plain) != 0 && errno != ENOENT) {
        const int e = errno;
        st = kv_error(KV_ERR_INVALID_ARG, "report: cannot remove '%s' after writing '%s': %s", plain, b->gz_path,
                      strerror(e));
    }
    free(plain);
    return st;
}

kv_report_build *kv_report_build_begin(const char *dir, const kv_report_meta *meta) {
    if (dir == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_report_build_begin: argument 'dir': is NULL");
        return NULL;
    }
    if (kv_report_mkdirs(dir) != KV_OK) return NULL;
    kv_report_build *b = calloc(1, sizeof *b);
    char *jp = kv_report_path_in(dir, KV_REPORT_JSONL);
    if (b == NULL || jp == NULL || (b->dir = strdup(dir)) == NULL) {
        free(jp);
        kv_report_build_free(b);
        kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
        return NULL;
    }
    kv_report_agg_init(&b->agg);
    kv_status st = meta != NULL && meta->gzip_results ? build_gz_open(b, jp) : kv_report_file_open(&b->jsonl, jp);
    free(jp);
    b->jsonl_open = st == KV_OK && b->gz == NULL;
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
        if (b->gz != NULL) {
            const size_t n = strlen(line);
            line[n] = '\n'; /* the encoder's NUL, reused: one write a row */
            if (gzwrite(b->gz, line, (unsigned)(n + 1)) != (int)(n + 1)) {
                int zerr = Z_OK;
                const char *why = gzerror(b->gz, &zerr);
                st = kv_error(KV_ERR_INVALID_ARG, "report: writing '%s' failed: %s", b->gz_tmp,
                              zerr == Z_ERRNO ? strerror(errno) : why);
            }
        } else {
            fputs(line, b->jsonl.f);
            fputc('\n', b->jsonl.f);
        }
        free(line);
        if (st == KV_OK) st = kv_report_agg_add(&b->agg, r);
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
        build_gz_close(b, false);
        return kv_error(b->failed, "%s", b->failed_msg);
    }
    /* results.jsonl first, then meta.json: it carries the result count a
     * merge checks, so it also marks the results file as complete. */
    kv_status first = b->gz != NULL ? build_gz_close(b, true) : kv_report_file_close(&b->jsonl);
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
        char *path = kv_report_path_in(b->dir, writers[i].name);
        if (path == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", b->dir);
        const kv_status st = writers[i].fn(b, meta, path);
        free(path);
        if (st != KV_OK && first == KV_OK) {
            first = st;
            snprintf(first_msg, sizeof first_msg, "%s", kv_last_error_message());
        }
    }
    if (first == KV_OK && b->gz_written) first = build_drop_plain_store(b);
    else if (first != KV_OK) return kv_error(first, "%s", first_msg);
    return first;
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
    build_gz_close(b, false);
    free(b->gz_path);
    free(b->gz_tmp);
    kv_junit_spool_free(b->junit);
    kv_report_agg_free(&b->agg);
    free(b->dir);
    free(b);
}
