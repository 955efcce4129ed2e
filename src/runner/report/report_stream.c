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
#include <sys/stat.h>
#include <unistd.h>

/* What an earlier run left that this one rewrites at its end: removed at
 * the start, so that an interrupted run never sits next to an old
 * complete report that reads as current. */
static const char *const kv_stale_reports[] = {
    KV_REPORT_JUNIT,    KV_REPORT_HTML,     KV_REPORT_MATRIX,        KV_REPORT_FAILURES,
    KV_REPORT_ACCURACY, KV_REPORT_ACCURACY_JSONL, KV_REPORT_JSONL_GZ,
};

kv_status kv_report_retire(const char *dir) {
    char *mp = kv_report_path_in(dir, KV_REPORT_META);
    kv_report_meta *was = malloc(sizeof *was);
    kv_status st = mp == NULL || was == NULL ? kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir) : KV_OK;
    /* No meta.json (or one that does not read): nothing that passes for
     * a finished run. An incomplete one stays for --resume. */
    const bool complete = st == KV_OK && kv_merge_read_meta(mp, was, NULL) == KV_OK && !was->incomplete;
    static const char *const green[] = { KV_REPORT_META, KV_REPORT_JSONL };
    /* results.jsonl.gz is among the stale reports. */
    for (size_t i = 0; complete && st == KV_OK && i < sizeof kv_stale_reports / sizeof kv_stale_reports[0] + 2; i++) {
        const size_t ns = sizeof kv_stale_reports / sizeof kv_stale_reports[0];
        char *p = kv_report_path_in(dir, i < ns ? kv_stale_reports[i] : green[i - ns]);
        if (p == NULL) st = kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
        else if (unlink(p) != 0 && errno != ENOENT)
            st = kv_error(KV_ERR_INVALID_ARG, "report: cannot remove the old '%s': %s", p, strerror(errno));
        free(p);
    }
    free(was);
    free(mp);
    return st;
}

kv_status kv_report_begin(const char *dir, const kv_report_meta *meta, bool resume, kv_report_stream *s) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (dir == NULL || meta == NULL || !meta->incomplete)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_begin: argument '%s': %s", dir == NULL ? "dir" : "meta",
                        dir == NULL || meta == NULL ? "is NULL" : "must say incomplete");
    kv_status st = kv_report_mkdirs(dir);
    if (st != KV_OK) return st;
    for (size_t i = 0; i < sizeof kv_stale_reports / sizeof kv_stale_reports[0]; i++) {
        char *p = kv_report_path_in(dir, kv_stale_reports[i]);
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
    char *mp = kv_report_path_in(dir, KV_REPORT_META);
    s->path = kv_report_path_in(dir, KV_REPORT_JSONL);
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
    /* Read as well: kvrun reads each case's rows back at the end. */
    s->fd = open(s->path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | (resume ? 0 : O_TRUNC), 0666);
    struct stat sb;
    if (s->fd < 0 || fstat(s->fd, &sb) != 0) {
        const int e = errno;
        return kv_error(KV_ERR_INVALID_ARG, "report: cannot write '%s': %s", s->path, strerror(e));
    }
    s->size = (int64_t)sb.st_size;
    return KV_OK;
}

/* Appends rows in one write; *off gets where they start, *len how long
 * they are. */
static kv_status stream_append(kv_report_stream *s, const kv_result_list *rows, int64_t *off, int64_t *len_out) {
    *off = s->size;
    *len_out = 0;
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
    size_t done = 0;
    while (st == KV_OK && done < len) {
        const ssize_t k = write(s->fd, buf + done, len - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            const int e = errno;
            st = kv_error(KV_ERR_INVALID_ARG, "report: appending to '%s': %s", s->path, strerror(e));
            break;
        }
        done += (size_t)k;
    }
    /* A short write (a full disk) leaves part of the case's rows: cut
     * back, so that the file holds whole cases only and a later append
     * never continues a torn line. */
    if (st == KV_OK) s->size += (int64_t)done;
    else if (done > 0 && ftruncate(s->fd, (off_t)*off) != 0) s->size += (int64_t)done;
    if (st == KV_OK) *len_out = (int64_t)len;
    free(buf);
    return st;
}

kv_status kv_report_stream_rows(kv_report_stream *s, const kv_result_list *rows) {
    if (s == NULL || s->fd < 0 || rows == NULL || rows->n == 0) return KV_OK;
    int64_t off, len;
    return stream_append(s, rows, &off, &len);
}

kv_status kv_report_stream_index(kv_report_stream *s, int ncases) {
    s->ncases = ncases > 0 ? ncases : 0;
    const size_t n = (size_t)s->ncases + 1;
    s->off = malloc(n * sizeof *s->off);
    s->len = calloc(n, sizeof *s->len);
    s->bad = calloc(n, 1);
    if (s->off == NULL || s->len == NULL || s->bad == NULL) return kv_error(KV_ERR_OOM, "report: out of memory");
    for (int i = 0; i < s->ncases; i++) s->off[i] = -1;
    return KV_OK;
}

static bool stream_row_bad(kv_result_status st) {
    return st == KV_RESULT_FAIL || st == KV_RESULT_ERROR || st == KV_RESULT_CRASH || st == KV_RESULT_TIMEOUT;
}

kv_status kv_report_stream_case(kv_report_stream *s, int ci, const kv_result_list *rows) {
    if (s == NULL || s->off == NULL || ci < 0 || ci >= s->ncases || rows == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_stream_case: case %d: no index for it", ci);
    s->bad[ci] = 0;
    for (int i = 0; i < rows->n; i++) s->bad[ci] |= stream_row_bad(rows->items[i].status);
    if (s->mem != NULL) kv_result_list_free(&s->mem[ci]);
    int64_t off = -1, len = 0;
    kv_status st = s->fd >= 0 ? stream_append(s, rows, &off, &len) : kv_error(KV_ERR_INVALID_ARG, "report: closed");
    if (st == KV_OK) {
        s->off[ci] = off;
        s->len[ci] = len;
        return KV_OK;
    }
    /* The file cannot take them: held here, so the reports still have them. */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", kv_last_error_message());
    if (s->mem == NULL && (s->mem = calloc((size_t)s->ncases + 1, sizeof *s->mem)) == NULL)
        return kv_error(KV_ERR_OOM, "report: out of memory");
    s->off[ci] = -1;
    if (kv_result_list_extend(&s->mem[ci], rows) != KV_OK) return kv_last_error();
    return kv_error(st, "%s", msg);
}

bool kv_report_stream_has(const kv_report_stream *s, int ci) {
    if (s == NULL || ci < 0 || ci >= s->ncases) return false;
    return s->off[ci] >= 0 || (s->mem != NULL && s->mem[ci].n > 0);
}

bool kv_report_stream_bad(const kv_report_stream *s, int ci) {
    return kv_report_stream_has(s, ci) && s->bad[ci] != 0;
}

/* Calls fn for each whole line of bytes [off, off + len) of the file. */
static kv_status stream_lines(kv_report_stream *s, int64_t off, int64_t len,
                              kv_status (*fn)(void *ctx, char *line, int64_t at, int64_t n), void *ctx) {
    char *buf = malloc(65536);
    if (buf == NULL) return kv_error(KV_ERR_OOM, "report: out of memory");
    size_t cap = 65536, have = 0;
    int64_t at = off, line_at = off, end = off + len;
    kv_status st = KV_OK;
    while (st == KV_OK && (at < end || have > 0)) {
        if (have == cap) {
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                st = kv_error(KV_ERR_OOM, "report: out of memory");
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t k = 0;
        if (at < end) {
            const size_t want = (size_t)(end - at) < cap - have ? (size_t)(end - at) : cap - have;
            k = pread(s->fd, buf + have, want, (off_t)at);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) {
                const int e = errno;
                st = kv_error(KV_ERR_INVALID_ARG, "report: reading '%s' back: %s", s->path, strerror(e));
                break;
            }
            if (k == 0) end = at; /* the file is shorter than it was */
            at += k;
            have += (size_t)k;
        }
        size_t used = 0;
        char *nl;
        while (st == KV_OK && (nl = memchr(buf + used, '\n', have - used)) != NULL) {
            *nl = '\0';
            const int64_t n = (int64_t)(nl - (buf + used)) + 1;
            st = fn(ctx, buf + used, line_at, n);
            line_at += n;
            used += (size_t)n;
        }
        memmove(buf, buf + used, have - used);
        have -= used;
        /* What is left with nothing more to read is a line without its
         * newline: cut by a kill. */
        if (at >= end && have > 0) break;
    }
    free(buf);
    return st;
}

typedef struct stream_read_ctx {
    kv_report_stream *s;
    kv_result_list *out;
    kv_check_result *r;
} stream_read_ctx;

static kv_status stream_read_line(void *ctx, char *line, int64_t at, int64_t n) {
    (void)n;
    stream_read_ctx *c = ctx;
    char why[512];
    if (kv_merge_parse_line(line, c->r, why, sizeof why) != 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: at byte %lld: %s", c->s->path, (long long)at, why);
    return kv_result_list_push(c->out, c->r);
}

kv_status kv_report_stream_read_case(kv_report_stream *s, int ci, kv_result_list *out) {
    if (s == NULL || ci < 0 || ci >= s->ncases) return kv_error(KV_ERR_INVALID_ARG, "report: no case %d", ci);
    if (s->mem != NULL && s->mem[ci].n > 0) return kv_result_list_extend(out, &s->mem[ci]);
    if (s->off[ci] < 0) return KV_OK;
    stream_read_ctx c = { s, out, malloc(sizeof(kv_check_result)) };
    if (c.r == NULL) return kv_error(KV_ERR_OOM, "report: out of memory");
    const kv_status st = stream_lines(s, s->off[ci], s->len[ci], stream_read_line, &c);
    free(c.r);
    return st;
}

/* ---- --resume: what the file already holds ---- */

typedef struct stream_id {
    const char *id;
    int index;
} stream_id;

static int stream_id_cmp(const void *a, const void *b) {
    return strcmp(((const stream_id *)a)->id, ((const stream_id *)b)->id);
}

typedef struct stream_scan_ctx {
    kv_report_stream *s;
    const stream_id *ids;
    int n;
    kv_check_result *r;
    int cur;                   /* the case of the group being read, -1: none */
    char cur_id[KV_CASE_ID_MAX];
    int64_t end;               /* where the last whole line ends */
    int64_t group_at;          /* where the last group starts */
    int *groups;               /* per case: how many groups of its rows the file holds */
} stream_scan_ctx;

static kv_status stream_scan_line(void *ctx, char *line, int64_t at, int64_t n) {
    stream_scan_ctx *c = ctx;
    char why[512];
    if (kv_merge_parse_line(line, c->r, why, sizeof why) != 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: at byte %lld: %s", c->s->path, (long long)at, why);
    c->end = at + n;
    if (c->cur < 0 || strcmp(c->cur_id, c->r->case_id) != 0) {
        const stream_id key = { c->r->case_id, 0 };
        const stream_id *hit = bsearch(&key, c->ids, (size_t)c->n, sizeof *c->ids, stream_id_cmp);
        snprintf(c->cur_id, sizeof c->cur_id, "%s", c->r->case_id);
        c->cur = hit ? hit->index : -1;
        c->group_at = at;
        if (c->cur < 0) {
            c->cur = -2; /* a case not selected now: skipped, as a group */
            return KV_OK;
        }
        c->groups[c->cur]++;
        c->s->off[c->cur] = at;
        c->s->len[c->cur] = 0;
        c->s->bad[c->cur] = 0;
    }
    if (c->cur >= 0) {
        c->s->len[c->cur] += n;
        c->s->bad[c->cur] |= stream_row_bad(c->r->status);
    }
    return KV_OK;
}

kv_status kv_report_stream_scan(kv_report_stream *s, const char *const *ids, int n, int *found) {
    *found = 0;
    if (s == NULL || s->fd < 0 || s->off == NULL || n > s->ncases)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_stream_scan: no open, indexed stream");
    stream_id *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    stream_scan_ctx c = { s, sorted, n, malloc(sizeof(kv_check_result)), -1, "", 0, 0, calloc((size_t)n + 1, sizeof(int)) };
    kv_status st = KV_OK;
    s->nrerun = s->ntorn = 0;
    s->rerun_id[0] = '\0';
    if (sorted == NULL || c.r == NULL || c.groups == NULL) st = kv_error(KV_ERR_OOM, "--resume: out of memory");
    for (int i = 0; st == KV_OK && i < n; i++) sorted[i] = (stream_id){ ids[i], i };
    if (st == KV_OK) qsort(sorted, (size_t)n, sizeof *sorted, stream_id_cmp);
    if (st == KV_OK) st = stream_lines(s, 0, s->size, stream_scan_line, &c);
    /* The last group may be short of rows: a case's rows are one write,
     * and a kill or a full disk can cut a write anywhere, a line's end
     * included, where nothing in the file shows the cut. So the last
     * group goes (its case runs again, at the cost of one case), with a
     * cut line after it, and the next append starts a whole line. */
    const bool torn = c.end < s->size;
    if (st == KV_OK && (c.cur != -1 || torn)) {
        const int64_t cut = c.cur != -1 ? c.group_at : 0;
        if (ftruncate(s->fd, (off_t)cut) != 0) {
            const int e = errno;
            st = kv_error(KV_ERR_INVALID_ARG, "--resume: cannot cut the last group of rows of '%s': %s", s->path,
                          strerror(e));
        } else {
            s->size = cut;
            s->ntorn = torn;
            if (c.cur >= 0) {
                s->off[c.cur] = -1;
                s->bad[c.cur] = 0;
            }
        }
    }
    /* A case with two groups of rows (a kill during --retry, a file put
     * together by hand): which one is its whole result cannot be told,
     * so it runs again, and the reports hold that run's rows only. */
    for (int i = 0; st == KV_OK && i < n; i++) {
        if (c.groups[i] < 2) continue;
        if (s->nrerun++ == 0) snprintf(s->rerun_id, sizeof s->rerun_id, "%s", ids[i]);
        s->off[i] = -1;
        s->bad[i] = 0;
    }
    for (int i = 0; st == KV_OK && i < n; i++) *found += s->off[i] >= 0;
    free(sorted);
    free(c.r);
    free(c.groups);
    return st;
}

void kv_report_stream_close(kv_report_stream *s) {
    if (s == NULL) return;
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    free(s->path);
    s->path = NULL;
    for (int i = 0; s->mem != NULL && i < s->ncases; i++) kv_result_list_free(&s->mem[i]);
    free(s->mem);
    free(s->off);
    free(s->len);
    free(s->bad);
    s->mem = NULL;
    s->off = s->len = NULL;
    s->bad = NULL;
    s->ncases = 0;
}
