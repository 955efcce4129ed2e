/* What every report writer shares (report_internal.h): totals and the
 * exit code, atomic file writing, mkdir -p, number formatting and XML/HTML
 * escaping. The folder as a whole is written by report.c. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void kv_report_meta_init(kv_report_meta *meta) {
    if (meta) memset(meta, 0, sizeof *meta);
}

kv_report_totals kv_report_totals_of(const kv_result_list *results) {
    int64_t c[KV_RESULT_STATUS_COUNT];
    kv_result_list_counts(results, c);
    kv_report_totals t;
    t.passed = c[KV_RESULT_PASS] + c[KV_RESULT_XFAIL];
    t.failed = c[KV_RESULT_FAIL] + c[KV_RESULT_ERROR] + c[KV_RESULT_CRASH] +
               c[KV_RESULT_TIMEOUT] + c[KV_RESULT_XPASS];
    t.skipped = c[KV_RESULT_SKIP] + c[KV_RESULT_UNSUPPORTED];
    t.flaky = c[KV_RESULT_FLAKY];
    return t;
}

int kv_report_exit_code(const kv_result_list *results) {
    if (results == NULL || results->n == 0) return 1;
    for (int i = 0; i < results->n; i++)
        if (kv_result_status_is_bad(results->items[i].status)) return 1;
    return 0;
}

int kv_report_incomplete_text(const kv_report_meta *meta, char *buf, int cap) {
    if (cap > 0) buf[0] = '\0';
    if (meta == NULL || !meta->incomplete || cap <= 0) return 0;
    snprintf(buf, (size_t)cap,
             "INCOMPLETE: %s%s after %lld of %lld cases; these reports hold what finished; kvrun --resume "
             "(with the same arguments) runs the rest",
             meta->interrupted[0] ? "interrupted by " : "still running or killed", meta->interrupted,
             (long long)meta->ncases_done, (long long)meta->ncases);
    return 1;
}

int kv_report_exit_code_flaky(const kv_result_list *results, bool flaky_fail) {
    const int rc = kv_report_exit_code(results);
    if (rc != 0 || !flaky_fail) return rc;
    for (int i = 0; i < results->n; i++)
        if (results->items[i].status == KV_RESULT_FLAKY) return 1;
    return 0;
}

/* ---- files ---- */

char *kv_report_dup_join(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s == NULL) return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

char *kv_report_path_in(const char *dir, const char *name) {
    const size_t ld = strlen(dir), ln = strlen(name);
    char *p = malloc(ld + ln + 2);
    if (p == NULL) return NULL;
    memcpy(p, dir, ld);
    p[ld] = '/';
    memcpy(p + ld + 1, name, ln + 1);
    return p;
}

kv_status kv_report_file_open(kv_report_file *rf, const char *path) {
    memset(rf, 0, sizeof *rf);
    if (path == NULL || path[0] == '\0')
        return kv_error(KV_ERR_INVALID_ARG, "report: argument 'path': is empty");
    rf->path = kv_report_dup_join(path, "");
    rf->tmp = kv_report_dup_join(path, ".tmp");
    if (rf->path == NULL || rf->tmp == NULL) {
        free(rf->path);
        free(rf->tmp);
        rf->path = rf->tmp = NULL;
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    rf->f = fopen(rf->tmp, "w");
    if (rf->f == NULL) {
        int e = errno;
        kv_status st = kv_error(KV_ERR_INVALID_ARG, "report: cannot write '%s' (opening '%s'): %s", path, rf->tmp,
                                strerror(e));
        free(rf->path);
        free(rf->tmp);
        rf->path = rf->tmp = NULL;
        return st;
    }
    return KV_OK;
}

kv_status kv_report_file_close(kv_report_file *rf) {
    kv_status st = KV_OK;
    if (rf->f != NULL) {
        /* ferror only says that something failed; errno of the failed
         * write is gone by now, so fflush again to get a reason. */
        int bad = ferror(rf->f);
        int e = 0;
        if (fflush(rf->f) != 0) {
            bad = 1;
            e = errno;
        }
        if (fclose(rf->f) != 0 && !bad) {
            bad = 1;
            e = errno;
        }
        rf->f = NULL;
        if (bad) {
            st = kv_error(KV_ERR_INVALID_ARG, "report: writing '%s' failed: %s", rf->tmp,
                          e ? strerror(e) : "write error");
            remove(rf->tmp);
        } else if (rename(rf->tmp, rf->path) != 0) {
            e = errno;
            st = kv_error(KV_ERR_INVALID_ARG, "report: cannot rename '%s' to '%s': %s", rf->tmp,
                          rf->path, strerror(e));
            remove(rf->tmp);
        }
    }
    free(rf->path);
    free(rf->tmp);
    rf->path = rf->tmp = NULL;
    return st;
}

void kv_report_file_discard(kv_report_file *rf) {
    if (rf->f != NULL) {
        fclose(rf->f);
        rf->f = NULL;
        if (rf->tmp) remove(rf->tmp);
    }
    free(rf->path);
    free(rf->tmp);
    rf->path = rf->tmp = NULL;
}

kv_status kv_report_mkdirs(const char *dir) {
    if (dir == NULL || dir[0] == '\0')
        return kv_error(KV_ERR_INVALID_ARG, "report: argument 'dir': is empty");
    char *p = kv_report_dup_join(dir, "");
    if (p == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", dir);
    kv_status st = KV_OK;
    size_t n = strlen(p);
    /* Walk the prefixes ending at each '/', then the whole path. */
    for (size_t i = 1; i <= n && st == KV_OK; i++) {
        if (i < n && p[i] != '/') continue;
        char saved = p[i];
        p[i] = '\0';
        if (mkdir(p, 0777) != 0) {
            int e = errno;
            struct stat sb;
            if (e == EEXIST && stat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) {
                /* already there */
            } else if (e == EEXIST) {
                st = kv_error(KV_ERR_INVALID_ARG, "report: cannot create directory '%s': '%s' is not a directory",
                              dir, p);
            } else {
                st = kv_error(KV_ERR_INVALID_ARG, "report: cannot create directory '%s': %s: %s", dir, p,
                              strerror(e));
            }
        }
        p[i] = saved;
    }
    free(p);
    return st;
}

/* ---- formatting ---- */

void kv_report_fmt_double(double v, char *buf, int cap) {
    if (isnan(v)) {
        snprintf(buf, (size_t)cap, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, (size_t)cap, v < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, (size_t)cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

void kv_report_fmt_index(const kv_mismatch *m, char *buf, int cap) {
    int used = snprintf(buf, (size_t)cap, "[");
    int nd = m->ndim < 0 ? 0 : (m->ndim > KV_MAX_DIMS ? KV_MAX_DIMS : m->ndim);
    for (int d = 0; d < nd && used >= 0 && used < cap; d++)
        used += snprintf(buf + used, (size_t)(cap - used), "%s%lld", d ? "," : "", (long long)m->index[d]);
    if (used >= 0 && used < cap) snprintf(buf + used, (size_t)(cap - used), "]");
}

void kv_report_fmt_time(int64_t unix_seconds, char *buf, int cap) {
    if (unix_seconds == 0) {
        snprintf(buf, (size_t)cap, "-");
        return;
    }
    time_t t = (time_t)unix_seconds;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL || strftime(buf, (size_t)cap, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, (size_t)cap, "%lld", (long long)unix_seconds);
}

int kv_report_utf8_decode(const char *s, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c;
    int len;
    if (u[0] < 0x80) {
        *cp = u[0];
        return 1;
    } else if (u[0] >= 0xC2 && u[0] <= 0xDF) {
        c = u[0] & 0x1Fu;
        len = 2;
    } else if (u[0] >= 0xE0 && u[0] <= 0xEF) {
        c = u[0] & 0x0Fu;
        len = 3;
    } else if (u[0] >= 0xF0 && u[0] <= 0xF4) {
        c = u[0] & 0x07u;
        len = 4;
    } else {
        return 0;
    }
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0u) != 0x80u) return 0; /* also stops at the NUL */
        c = (c << 6) | (u[i] & 0x3Fu);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
        (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    return len;
}

void kv_report_put_escaped(FILE *f, const char *s, bool attr) {
    if (s == NULL) return;
    while (*s) {
        uint32_t cp = 0;
        int len = kv_report_utf8_decode(s, &cp);
        if (len == 0) {
            fprintf(f, "\\x%02X", (unsigned)(unsigned char)*s);
            s++;
            continue;
        }
        switch (cp) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        case '\t':
        case '\n':
        case '\r':
            if (attr) fprintf(f, "&#%u;", (unsigned)cp);
            else fputc((int)cp, f);
            break;
        default:
            if (cp < 0x20 || cp == 0xFFFE || cp == 0xFFFF) fprintf(f, "\\x%02X", (unsigned)cp);
            else fwrite(s, 1, (size_t)len, f);
            break;
        }
        s += len;
    }
}
