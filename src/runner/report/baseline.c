/* Baseline files: parsing, glob matching and applying them to results. */
#include "runner/report/baseline.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_baseline_entry {
    char *case_glob;
    char *check_glob; /* NULL: every check */
    int line;
} kv_baseline_entry;

struct kv_baseline {
    char *name;
    kv_baseline_entry *entries;
    int n, cap;
};

/* Whole-string match; `*` and `?` are the only wildcards. Backtracks only
 * to the last `*`, which is enough for this glob language and keeps the
 * match linear-ish instead of exponential on patterns like "*a*a*a*b". */
static int glob_match(const char *pat, const char *s) {
    const char *star = NULL, *resume = NULL;
    while (*s) {
        if (*pat == '*') {
            star = ++pat;
            resume = s;
        } else if (*pat == '?') {
            pat++;
            s++;
        } else if (*pat == '\\' && pat[1] != '\0' && pat[1] == *s) {
            pat += 2;
            s++;
        } else if (*pat != '\\' && *pat != '\0' && *pat == *s) {
            pat++;
            s++;
        } else if (star != NULL) {
            pat = star;
            s = ++resume;
        } else {
            return 0;
        }
    }
    while (*pat == '*') pat++;
    return *pat == '\0';
}

void kv_baseline_free(kv_baseline *b) {
    if (b == NULL) return;
    for (int i = 0; i < b->n; i++) {
        free(b->entries[i].case_glob);
        free(b->entries[i].check_glob);
    }
    free(b->entries);
    free(b->name);
    free(b);
}

static char *dup_range(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d == NULL) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* Splits one line (without its newline) into at most two fields; -1 with a
 * reason for a malformed line. */
static int parse_line(const char *line, size_t len, const char *fields[3], size_t flen[3], int *nfields,
                      char *why, size_t whycap) {
    size_t i = 0;
    int nf = 0;
    while (i < len) {
        while (i < len && is_blank(line[i])) i++;
        if (i >= len) break;
        if (line[i] == '#') break; /* at line start or after whitespace */
        size_t start = i;
        while (i < len && !is_blank(line[i])) {
            unsigned char c = (unsigned char)line[i];
            if (c < 0x20 || c == 0x7F) {
                snprintf(why, whycap, "column %zu: control character 0x%02X", i + 1, (unsigned)c);
                return -1;
            }
            i++;
        }
        for (size_t j = start; j < i; j++) {
            if (line[j] != '\\') continue;
            if (j + 1 >= i) {
                snprintf(why, whycap, "column %zu: '\\' with nothing after it to make literal", j + 1);
                return -1;
            }
            j++; /* the escaped character */
        }
        if (nf == 2) {
            snprintf(why, whycap, "column %zu: a third field; an entry is CASE_GLOB [CHECK_GLOB]", start + 1);
            return -1;
        }
        fields[nf] = line + start;
        flen[nf] = i - start;
        nf++;
    }
    *nfields = nf;
    return 0;
}

kv_baseline *kv_baseline_parse(const char *text, const char *name) {
    if (text == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_baseline_parse: argument 'text': is NULL");
        return NULL;
    }
    if (name == NULL) name = "<baseline>";
    kv_baseline *b = calloc(1, sizeof *b);
    if (b == NULL || (b->name = dup_range(name, strlen(name))) == NULL) {
        free(b);
        kv_error(KV_ERR_OOM, "baseline: %s: out of memory", name);
        return NULL;
    }
    int lineno = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        const char *fields[3];
        size_t flen[3];
        int nf = 0;
        char why[160];
        if (parse_line(p, len, fields, flen, &nf, why, sizeof why) != 0) {
            kv_error(KV_ERR_INVALID_ARG, "baseline: %s:%d: %s", name, lineno, why);
            kv_baseline_free(b);
            return NULL;
        }
        if (nf > 0) {
            if (b->n == b->cap) {
                int cap = b->cap ? b->cap * 2 : 16;
                kv_baseline_entry *e = realloc(b->entries, (size_t)cap * sizeof *e);
                if (e == NULL) {
                    kv_error(KV_ERR_OOM, "baseline: %s:%d: out of memory", name, lineno);
                    kv_baseline_free(b);
                    return NULL;
                }
                b->entries = e;
                b->cap = cap;
            }
            kv_baseline_entry *e = &b->entries[b->n];
            e->line = lineno;
            e->case_glob = dup_range(fields[0], flen[0]);
            e->check_glob = nf > 1 ? dup_range(fields[1], flen[1]) : NULL;
            b->n++;
            if (e->case_glob == NULL || (nf > 1 && e->check_glob == NULL)) {
                kv_error(KV_ERR_OOM, "baseline: %s:%d: out of memory", name, lineno);
                kv_baseline_free(b);
                return NULL;
            }
        }
        p += len;
        if (*p == '\n') p++;
    }
    return b;
}

kv_baseline *kv_baseline_load(const char *path) {
    if (path == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_baseline_load: argument 'path': is NULL");
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        kv_error(KV_ERR_INVALID_ARG, "baseline: cannot read '%s': %s", path, strerror(e));
        return NULL;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int failed = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *t = realloc(text, ncap);
            if (t == NULL) {
                failed = ENOMEM;
                break;
            }
            text = t;
            cap = ncap;
        }
        size_t got = fread(text + len, 1, 4096, f);
        len += got;
        if (got < 4096) {
            if (ferror(f)) failed = errno ? errno : EIO;
            break;
        }
    }
    fclose(f);
    if (failed) {
        free(text);
        kv_error(KV_ERR_INVALID_ARG, "baseline: reading '%s' failed: %s", path, strerror(failed));
        return NULL;
    }
    text[len] = '\0';
    if (strlen(text) != len) {
        free(text);
        kv_error(KV_ERR_INVALID_ARG, "baseline: '%s': contains a NUL byte (not a text file?)", path);
        return NULL;
    }
    kv_baseline *b = kv_baseline_parse(text, path);
    free(text);
    return b;
}

int kv_baseline_count(const kv_baseline *b) { return b ? b->n : 0; }

int kv_baseline_match(const kv_baseline *b, const char *case_id, const char *check) {
    if (b == NULL || case_id == NULL) return 0;
    for (int i = 0; i < b->n; i++) {
        const kv_baseline_entry *e = &b->entries[i];
        if (!glob_match(e->case_glob, case_id)) continue;
        if (e->check_glob != NULL && (check == NULL || !glob_match(e->check_glob, check))) continue;
        return e->line;
    }
    return 0;
}

/* The new message keeps the old one after a prefix; a long one is cut,
 * marked with "..." so nobody takes the cut text for the whole. */
static void set_message(kv_check_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_message(kv_check_result *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    if (w >= (int)sizeof r->message) memcpy(r->message + sizeof r->message - 4, "...", 4);
}

void kv_baseline_apply(const kv_baseline *b, kv_result_list *results, int *n_xfail, int *n_xpass) {
    int nx = 0, np = 0;
    for (int i = 0; b != NULL && results != NULL && i < results->n; i++) {
        kv_check_result *r = &results->items[i];
        /* Stays COUNT for a status outside the enum (corrupted): left alone. */
        kv_result_status to = KV_RESULT_STATUS_COUNT;
        switch (r->status) {
        case KV_RESULT_FAIL:
        case KV_RESULT_CRASH:
        case KV_RESULT_TIMEOUT: to = KV_RESULT_XFAIL; break;
        case KV_RESULT_PASS: to = KV_RESULT_XPASS; break;
        case KV_RESULT_ERROR:
        case KV_RESULT_UNSUPPORTED:
        case KV_RESULT_SKIP:
        case KV_RESULT_XFAIL:
        case KV_RESULT_XPASS:
        case KV_RESULT_STATUS_COUNT: continue;
        }
        int line = to == KV_RESULT_STATUS_COUNT ? 0 : kv_baseline_match(b, r->case_id, r->check);
        if (line == 0) continue;
        char old[KV_RESULT_MESSAGE_MAX];
        memcpy(old, r->message, sizeof old);
        old[sizeof old - 1] = '\0';
        if (to == KV_RESULT_XFAIL) {
            set_message(r, "expected by baseline %s:%d (was %s)%s%s", b->name, line,
                        kv_result_status_name(r->status), old[0] ? ": " : "", old);
            nx++;
        } else {
            set_message(r, "passed, but baseline %s:%d expects a failure: remove the stale entry%s%s",
                        b->name, line, old[0] ? "; " : "", old);
            np++;
        }
        r->status = to;
    }
    if (n_xfail) *n_xfail = nx;
    if (n_xpass) *n_xpass = np;
}
