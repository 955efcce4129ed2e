/* Baseline files: parsing, glob matching and applying them to results. */
#include "runner/report/baseline.h"

#include <stdbool.h>
#include <stdint.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The largest baseline read: a failures.txt of the whole suite is ~2 MiB. */
#define KV_BASELINE_MAX_FILE (64 * 1024 * 1024)

typedef struct kv_baseline_entry {
    char *case_glob;
    char *check_glob;   /* NULL: every check */
    char *backend_glob; /* NULL: every backend */
    int line;
    /* What the last kv_baseline_apply saw: rows matched, failing rows
     * matched (the ones it excused). */
    int64_t matched, failing;
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
        free(b->entries[i].backend_glob);
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
        if (nf == 3) {
            snprintf(why, whycap, "column %zu: a fourth field; an entry is CASE_GLOB [CHECK_GLOB [BACKEND_GLOB]]",
                     start + 1);
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
        memset(flen, 0, sizeof flen);
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
            memset(e, 0, sizeof *e);
            e->line = lineno;
            e->case_glob = dup_range(fields[0], flen[0]);
            e->check_glob = nf > 1 ? dup_range(fields[1], flen[1]) : NULL;
            e->backend_glob = nf > 2 ? dup_range(fields[2], flen[2]) : NULL;
            b->n++;
            if (e->case_glob == NULL || (nf > 1 && e->check_glob == NULL) || (nf > 2 && e->backend_glob == NULL)) {
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
    /* A baseline is a text file: a device or FIFO would be read until
     * memory runs out. */
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > KV_BASELINE_MAX_FILE) {
        const bool reg = S_ISREG(sb.st_mode);
        fclose(f);
        if (!reg) kv_error(KV_ERR_INVALID_ARG, "baseline: '%s': not a regular file", path);
        else kv_error(KV_ERR_INVALID_ARG, "baseline: '%s': larger than %d bytes", path, KV_BASELINE_MAX_FILE);
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

static bool entry_matches(const kv_baseline_entry *e, const char *case_id, const char *check, const char *backend) {
    if (!glob_match(e->case_glob, case_id)) return false;
    if (e->check_glob != NULL && (check == NULL || !glob_match(e->check_glob, check))) return false;
    if (e->backend_glob != NULL && backend != NULL && !glob_match(e->backend_glob, backend)) return false;
    return true;
}

int kv_baseline_match_row(const kv_baseline *b, const char *case_id, const char *check, const char *backend) {
    if (b == NULL || case_id == NULL) return 0;
    for (int i = 0; i < b->n; i++)
        if (entry_matches(&b->entries[i], case_id, check, backend)) return b->entries[i].line;
    return 0;
}

int kv_baseline_match(const kv_baseline *b, const char *case_id, const char *check) {
    return kv_baseline_match_row(b, case_id, check, NULL);
}

static bool has_wildcard(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '*' || s[i] == '?') return true;
        if (s[i] == '\\') i++;
    }
    return false;
}

/* The check names a row can carry before its ':' ("variants:SIM"). */
static bool known_check(const char *name, size_t n) {
    if (n == 4 && strncmp(name, "load", 4) == 0) return true; /* the backend rows */
    for (int k = 0; k < KV_CHECK_KIND_COUNT; k++) {
        const char *c = kv_check_kind_name((kv_check_kind)k);
        if (strlen(c) == n && strncmp(name, c, n) == 0) return true;
    }
    return false;
}

kv_status kv_baseline_validate(const kv_baseline *b, const char *const *backends, int nbackends) {
    for (int i = 0; b != NULL && i < b->n; i++) {
        const kv_baseline_entry *e = &b->entries[i];
        if (e->check_glob != NULL) {
            const size_t n = strcspn(e->check_glob, ":");
            if (!has_wildcard(e->check_glob, n) && !known_check(e->check_glob, n))
                return kv_error(KV_ERR_INVALID_ARG,
                                "baseline: %s:%d: unknown check '%.*s' in '%s' (checks: golden, variants, memory, "
                                "error, lazy, grad, fastpath, tune, accuracy, threads, load)",
                                b->name, e->line, (int)n, e->check_glob, e->check_glob);
        }
        if (e->backend_glob != NULL && !has_wildcard(e->backend_glob, strlen(e->backend_glob))) {
            bool known = false;
            for (int j = 0; j < nbackends && !known; j++) known = strcmp(backends[j], e->backend_glob) == 0;
            if (!known) {
                char list[256];
                size_t m = 0;
                list[0] = '\0';
                for (int j = 0; j < nbackends && m < sizeof list; j++)
                    m += (size_t)snprintf(list + m, sizeof list - m, "%s%s", j ? ", " : "", backends[j]);
                return kv_error(KV_ERR_INVALID_ARG, "baseline: %s:%d: unknown backend '%s' (backends: %s)", b->name,
                                e->line, e->backend_glob, list);
            }
        }
    }
    return KV_OK;
}

static void put_entry(FILE *out, const kv_baseline_entry *e) {
    fprintf(out, "'%s%s%s%s%s'", e->case_glob, e->check_glob ? " " : "", e->check_glob ? e->check_glob : "",
            e->backend_glob ? " " : "", e->backend_glob ? e->backend_glob : "");
}

int kv_baseline_notes(const kv_baseline *b, FILE *out) {
    int n = 0;
    for (int i = 0; b != NULL && i < b->n; i++) {
        const kv_baseline_entry *e = &b->entries[i];
        if (e->matched > 0 && e->failing > 0) continue;
        fprintf(out, "== baseline %s:%d: entry ", b->name, e->line);
        put_entry(out, e);
        if (e->matched == 0)
            fputs(" matches no row of this run (misspelled, or a case this run did not select)\n", out);
        else
            fprintf(out, " is stale: the %lld row%s it matches passed (XPASS); remove it\n", (long long)e->matched,
                    e->matched == 1 ? "" : "s");
        n++;
    }
    return n;
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

/* FLAKY counts: the row did fail once, so the entry that names it is not
 * stale (the FLAKY row itself stays FLAKY: it passed, nothing to excuse). */
static bool is_failure(kv_result_status st) {
    return st == KV_RESULT_FAIL || st == KV_RESULT_CRASH || st == KV_RESULT_TIMEOUT || st == KV_RESULT_XFAIL ||
           st == KV_RESULT_FLAKY;
}

void kv_baseline_reset(const kv_baseline *b) {
    for (int k = 0; b != NULL && k < b->n; k++) b->entries[k].matched = b->entries[k].failing = 0;
}

/* First pass: what each entry matches. An entry is stale only when every
 * row it matches passed; a glob over many rows that still excuses one
 * failure leaves its passing rows PASS, so real passes never turn into
 * XPASS behind a broad entry. */
void kv_baseline_tally(const kv_baseline *b, const kv_result_list *rows) {
    for (int i = 0; b != NULL && rows != NULL && i < rows->n; i++) {
        const kv_check_result *r = &rows->items[i];
        for (int k = 0; k < b->n; k++) {
            kv_baseline_entry *e = &b->entries[k];
            if (!entry_matches(e, r->case_id, r->check, r->backend)) continue;
            e->matched++;
            if (is_failure(r->status)) e->failing++;
        }
    }
}

void kv_baseline_mark(const kv_baseline *b, kv_result_list *results, int *n_xfail, int *n_xpass) {
    int nx = 0, np = 0;
    for (int i = 0; b != NULL && results != NULL && i < results->n; i++) {
        kv_check_result *r = &results->items[i];
        if (r->status != KV_RESULT_FAIL && r->status != KV_RESULT_CRASH && r->status != KV_RESULT_TIMEOUT &&
            r->status != KV_RESULT_PASS)
            continue; /* ERROR, SKIP, UNSUPPORTED are never excused; XFAIL/XPASS are final */
        const kv_baseline_entry *hit = NULL;
        for (int k = 0; k < b->n && hit == NULL; k++) {
            const kv_baseline_entry *e = &b->entries[k];
            if (!entry_matches(e, r->case_id, r->check, r->backend)) continue;
            if (r->status != KV_RESULT_PASS || e->failing == 0) hit = e;
        }
        if (hit == NULL) continue;
        char old[KV_RESULT_MESSAGE_MAX];
        memcpy(old, r->message, sizeof old);
        old[sizeof old - 1] = '\0';
        if (r->status != KV_RESULT_PASS) {
            set_message(r, "expected by baseline %s:%d (was %s)%s%s", b->name, hit->line,
                        kv_result_status_name(r->status), old[0] ? ": " : "", old);
            r->status = KV_RESULT_XFAIL;
            nx++;
        } else {
            set_message(r, "passed, but baseline %s:%d expects a failure: remove the stale entry%s%s", b->name,
                        hit->line, old[0] ? "; " : "", old);
            r->status = KV_RESULT_XPASS;
            np++;
        }
    }
    if (n_xfail) *n_xfail = nx;
    if (n_xpass) *n_xpass = np;
}

void kv_baseline_apply(const kv_baseline *b, kv_result_list *results, int *n_xfail, int *n_xpass) {
    kv_baseline_reset(b);
    kv_baseline_tally(b, results);
    kv_baseline_mark(b, results, n_xfail, n_xpass);
}
