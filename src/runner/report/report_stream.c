/* A report folder while its run is in progress (report.h, "a run in
 * progress"): marked at the start, results.jsonl appended case by case. */
#include "runner/report/merge.h"
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What an earlier run left that this one rewrites at its end: removed at
 * the start, so that an interrupted run never sits next to an old
 * complete report that reads as current. */
static const char *const kv_stale_reports[] = {
    KV_REPORT_JUNIT, KV_REPORT_HTML, KV_REPORT_MATRIX, KV_REPORT_FAILURES, KV_REPORT_ACCURACY, KV_REPORT_ACCURACY_JSONL,
};

static char *kv_in_dir(const char *dir, const char *name) {
    char *slash = kv_report_dup_join(dir, "/");
    char *p = slash ? kv_report_dup_join(slash, name) : NULL;
    free(slash);
    return p;
}

kv_status kv_report_begin(const char *dir, const kv_report_meta *meta, bool resume, kv_report_stream *s) {
    s->fd = -1;
    s->path = NULL;
    if (dir == NULL || meta == NULL || !meta->incomplete)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_begin: argument '%s': %s", dir == NULL ? "dir" : "meta",
                        dir == NULL || meta == NULL ? "is NULL" : "must say incomplete");
    kv_status st = kv_report_mkdirs(dir);
    if (st != KV_OK) return st;
    for (size_t i = 0; i < sizeof kv_stale_reports / sizeof kv_stale_reports[0]; i++) {
        char *p = kv_in_dir(dir, kv_stale_reports[i]);
        if (p == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
        if (unlink(p) != 0 && errno != ENOENT) {
            const int e = errno;
            st = kv_error(KV_ERR_INVALID_ARG, "report: cannot remove the old '%s': %s", p, strerror(e));
            free(p);
            return st;
        }
        free(p);
    }
    /* meta.json first: from now on the folder says "in progress". */
    char *mp = kv_in_dir(dir, KV_REPORT_META);
    s->path = kv_in_dir(dir, KV_REPORT_JSONL);
    if (mp == NULL || s->path == NULL) {
        free(mp);
        free(s->path);
        s->path = NULL;
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
    }
    static const kv_result_list none = { 0 };
    st = kv_report_write_meta(meta, &none, mp);
    free(mp);
    if (st != KV_OK) return st;
    s->fd = open(s->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (resume ? 0 : O_TRUNC), 0666);
    if (s->fd < 0) {
        const int e = errno;
        return kv_error(KV_ERR_INVALID_ARG, "report: cannot write '%s': %s", s->path, strerror(e));
    }
    return KV_OK;
}

kv_status kv_report_stream_rows(kv_report_stream *s, const kv_result_list *rows) {
    if (s == NULL || s->fd < 0 || rows == NULL || rows->n == 0) return KV_OK;
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (mem == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", s->path);
    kv_status st = KV_OK;
    for (int i = 0; i < rows->n && st == KV_OK; i++) {
        char *line = kv_report_result_line(&rows->items[i]);
        if (line == NULL) {
            st = kv_error(KV_ERR_OOM, "report: '%s': cannot encode a row of '%s'", s->path, rows->items[i].case_id);
            break;
        }
        fputs(line, mem);
        fputc('\n', mem);
        free(line);
    }
    fclose(mem);
    /* One write for the whole case: a kill lands before or after it, so a
     * case is in the file with all its rows or not at all. */
    size_t off = 0;
    while (st == KV_OK && off < len) {
        const ssize_t k = write(s->fd, buf + off, len - off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            const int e = errno;
            st = kv_error(KV_ERR_INVALID_ARG, "report: appending to '%s': %s", s->path, strerror(e));
            break;
        }
        off += (size_t)k;
    }
    free(buf);
    return st;
}

void kv_report_stream_close(kv_report_stream *s) {
    if (s == NULL) return;
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    free(s->path);
    s->path = NULL;
}

kv_status kv_report_read_partial(const char *path, kv_result_list *out, int *cut) {
    if (cut) *cut = 0;
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        const int e = errno;
        return kv_error(KV_ERR_INVALID_ARG, "cannot read '%s': %s", path, strerror(e));
    }
    kv_status st = KV_OK;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    char why[512];
    kv_check_result *r = malloc(sizeof *r);
    if (r == NULL) st = kv_error(KV_ERR_OOM, "'%s': out of memory", path);
    while (st == KV_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || line[len - 1] != '\n') {
            /* Cut by a kill in the middle of a write: that case reruns. */
            if (cut) *cut = 1;
            break;
        }
        line[--len] = '\0';
        if ((size_t)len != strlen(line) || len == 0 || kv_merge_parse_line(line, r, why, sizeof why) != 0)
            st = kv_error(KV_ERR_INVALID_ARG, "%s:%d: %s", path, lineno,
                          (size_t)len != strlen(line) ? "a NUL byte" : len == 0 ? "an empty line" : why);
        else st = kv_result_list_push(out, r);
    }
    free(r);
    free(line);
    fclose(f);
    return st;
}
