/* The golden store: MANIFEST parsing, verification and regeneration
 * (format and guarantees in runner/golden.h). */
#include "runner/golden/golden.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/npy.h"
#include "runner/golden/hash.h"

#define MANIFEST_NAME "MANIFEST"
#define FORMAT_LINE_PREFIX "# kvsuite golden MANIFEST, format "
/* Paths are dir + "/" + op + "/" + name; op and name are short, so this
 * only limits how deep the store itself may sit. */
#define PATH_CAP 4096
#define OP_NAME_MAX 96

typedef struct gentry {
    kv_golden_entry e;           /* e.key / e.file point at key / file */
    char *key;
    char *file;                  /* NULL when hash-only */
    int line;                    /* MANIFEST line it was read from (0 when put) */
    unsigned char *npy;          /* put entries: the encoded file (owned); NULL otherwise */
    size_t npy_len;
} gentry;

struct kv_golden_store {
    char *dir;
    char manifest[PATH_CAP];
    bool has_manifest;
    size_t max_file_bytes;
    gentry *base;                /* sorted by (key, output): what lookup/verify see */
    int nbase;
    gentry **pend;               /* sorted by (key, output): put since the last save */
    int npend, cappend;
};

/* ---- small helpers ---- */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static int cmp_entry(const char *ka, int oa, const char *kb, int ob) {
    int c = strcmp(ka, kb);
    if (c) return c;
    return (oa > ob) - (oa < ob);
}

static int cmp_gentry(const void *a, const void *b) {
    const gentry *x = a, *y = b;
    return cmp_entry(x->key, x->e.output, y->key, y->e.output);
}

static void gentry_free(gentry *g) {
    free(g->key);
    free(g->file);
    free(g->npy);
    g->key = g->file = NULL;
    g->npy = NULL;
}

static bool same_content(const gentry *a, const gentry *b) {
    if (a->e.dtype != b->e.dtype || a->e.ndim != b->e.ndim || a->e.hash != b->e.hash) return false;
    for (int i = 0; i < a->e.ndim; i++) {
        if (a->e.sizes[i] != b->e.sizes[i]) return false;
    }
    if ((a->file == NULL) != (b->file == NULL)) return false;
    return a->file == NULL || strcmp(a->file, b->file) == 0;
}

static bool same_shape(const kv_golden_entry *e, const kv_tensor *t) {
    if (e->ndim != t->ndim) return false;
    for (int i = 0; i < e->ndim; i++) {
        if (e->sizes[i] != t->sizes[i]) return false;
    }
    return true;
}

/* "[4,5]", "[]" for 0-dim: the MANIFEST spelling (no spaces, so a column
 * never needs quoting). */
static void format_shape(const int64_t *sizes, int ndim, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++) {
        n += (size_t)snprintf(buf + n, cap - n, i ? ",%lld" : "%lld", (long long)sizes[i]);
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static int join_path(char *buf, size_t cap, const char *a, const char *b) {
    int n = snprintf(buf, cap, "%s/%s", a, b);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

/* Keys are opaque but must survive a tab-separated line and not read as
 * a comment. */
static const char *key_problem(const char *key) {
    if (key == NULL || key[0] == '\0') return "is empty";
    if (key[0] == '#') return "starts with '#'";
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        if (*p == '\t') return "contains a tab";
        if (*p == '\n' || *p == '\r') return "contains a line break";
        if (*p < 0x20 || *p == 0x7f) return "contains a control character";
    }
    return NULL;
}

static bool op_name_ok(const char *op, size_t len) {
    if (len == 0 || len > OP_NAME_MAX || op[0] == '.') return false;
    for (size_t i = 0; i < len; i++) {
        char c = op[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    return true;
}

static int base_name(const char *key, int output, char *buf, size_t cap) {
    char hex[KV_HASH_HEX_LEN];
    kv_hash_format(kv_hash_string(key), hex);
    return output == 0 ? snprintf(buf, cap, "%s.npy", hex) : snprintf(buf, cap, "%s-%d.npy", hex, output);
}

int kv_golden_file_name(const char *op, const char *key, int output, char *buf, size_t cap) {
    char name[64];
    base_name(key ? key : "", output, name, sizeof name);
    return snprintf(buf, cap, "%s/%s", op ? op : "", name);
}

/* Reads a whole file; -1 with errno set on failure. */
static int read_all(const char *path, unsigned char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    size_t cap = 4096, n = 0;
    unsigned char *buf = malloc(cap);
    if (buf == NULL) {
        fclose(f);
        errno = ENOMEM;
        return -1;
    }
    for (;;) {
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* Temp file next to the target, then rename: readers see the old file or
 * the new one, never a torn one. fsync first so a crash cannot leave a
 * renamed but empty file (which would still verify as CORRUPT, not OK). */
static kv_status write_atomic(const char *path, const void *data, size_t len) {
    char tmp[PATH_CAP];
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path) + 1 : 0;
    int n = snprintf(tmp, sizeof tmp, "%.*s.%s.tmp.%ld", dirlen, path, slash ? slash + 1 : path, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tmp) return kv_error(KV_ERR_INVALID_ARG, "golden: path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot create: %s", tmp, strerror(errno));
    const unsigned char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return kv_error(KV_ERR_INVALID_ARG, "%s: write failed: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return kv_error(KV_ERR_INVALID_ARG, "%s: write failed: %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return kv_error(KV_ERR_INVALID_ARG, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return KV_OK;
}

static kv_status ensure_dir(const char *path) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return KV_OK;
        return kv_error(KV_ERR_INVALID_ARG, "%s: exists and is not a directory", path);
    }
    return kv_error(KV_ERR_INVALID_ARG, "%s: cannot create directory: %s", path, strerror(errno));
}

/* ---- MANIFEST parsing ---- */

__attribute__((format(printf, 3, 4)))
static kv_status line_error(const kv_golden_store *s, int line, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return kv_error(KV_ERR_INVALID_ARG, "%s:%d: %s", s->manifest, line, reason);
}

static int parse_uint(const char *s, size_t len, int64_t max, int64_t *out) {
    if (len == 0 || len > 19) return -1;
    if (s[0] == '0' && len > 1) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

static int parse_shape_text(const char *s, size_t len, int *ndim, int64_t *sizes) {
    if (len < 2 || s[0] != '[' || s[len - 1] != ']') return -1;
    *ndim = 0;
    if (len == 2) return 0;
    size_t i = 1;
    while (i < len - 1) {
        size_t j = i;
        while (j < len - 1 && s[j] != ',') j++;
        if (*ndim == KV_MAX_DIMS) return -1;
        if (parse_uint(s + i, j - i, (int64_t)1 << 62, &sizes[*ndim]) != 0) return -1;
        (*ndim)++;
        if (j == len - 1) break;
        i = j + 1;
        if (i == len - 1) return -1; /* trailing comma */
    }
    return 0;
}

static kv_status parse_line(kv_golden_store *s, int lineno, char *line, gentry *g) {
    char *field[6];
    size_t flen[6];
    int nf = 0;
    char *p = line;
    for (;;) {
        char *tab = strchr(p, '\t');
        if (nf < 6) {
            field[nf] = p;
            flen[nf] = tab ? (size_t)(tab - p) : strlen(p);
        }
        nf++;
        if (tab == NULL) break;
        p = tab + 1;
    }
    if (nf != 6)
        return line_error(s, lineno, "expected 6 tab-separated fields (key, output, dtype, shape, hash, file), found %d",
                          nf);
    for (int i = 0; i < 6; i++) field[i][flen[i]] = '\0';
    memset(g, 0, sizeof *g);
    g->line = lineno;
    const char *kp = key_problem(field[0]);
    if (kp) return line_error(s, lineno, "key %s", kp);
    int64_t out;
    if (parse_uint(field[1], flen[1], KV_GOLDEN_MAX_OUTPUTS - 1, &out) != 0)
        return line_error(s, lineno, "output index '%s' is not an integer in 0..%d", field[1],
                          KV_GOLDEN_MAX_OUTPUTS - 1);
    g->e.output = (int)out;
    if (kv_dtype_parse(field[2], &g->e.dtype) != 0) return line_error(s, lineno, "unknown dtype '%s'", field[2]);
    if (parse_shape_text(field[3], flen[3], &g->e.ndim, g->e.sizes) != 0)
        return line_error(s, lineno, "shape '%s' is not like [4,5] or [] (at most %d non-negative dims)", field[3],
                          KV_MAX_DIMS);
    if (kv_hash_parse(field[4], &g->e.hash) != 0)
        return line_error(s, lineno, "hash '%s' is not 16 hex digits", field[4]);
    if (strcmp(field[5], "-") != 0) {
        const char *slash = strchr(field[5], '/');
        char expect[64];
        base_name(field[0], g->e.output, expect, sizeof expect);
        if (slash == NULL || !op_name_ok(field[5], (size_t)(slash - field[5])) || strcmp(slash + 1, expect) != 0)
            return line_error(s, lineno, "file '%s' is not OP/%s, the name this key and output get", field[5], expect);
        g->file = dup_str(field[5]);
        if (g->file == NULL) return kv_error(KV_ERR_OOM, "golden: out of memory");
    }
    g->key = dup_str(field[0]);
    if (g->key == NULL) {
        free(g->file);
        g->file = NULL;
        return kv_error(KV_ERR_OOM, "golden: out of memory");
    }
    g->e.key = g->key;
    g->e.file = g->file;
    return KV_OK;
}

static kv_status parse_manifest(kv_golden_store *s, char *text, size_t len) {
    int cap = 0;
    int lineno = 0;
    char *p = text, *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *eol = nl ? nl : end;
        *eol = '\0';
        lineno++;
        if (memchr(p, '\0', (size_t)(eol - p)) != NULL) return line_error(s, lineno, "contains a NUL byte");
        if (strchr(p, '\r')) return line_error(s, lineno, "contains a carriage return (CRLF line endings?)");
        if (lineno == 1) {
            size_t pl = strlen(FORMAT_LINE_PREFIX);
            if (strncmp(p, FORMAT_LINE_PREFIX, pl) != 0)
                return line_error(s, 1, "not a kvsuite golden MANIFEST (the first line must be '%s%d')",
                                  FORMAT_LINE_PREFIX, KV_GOLDEN_FORMAT);
            char want[8];
            snprintf(want, sizeof want, "%d", KV_GOLDEN_FORMAT);
            if (strcmp(p + pl, want) != 0)
                return line_error(s, 1, "MANIFEST format '%s' is not supported (this kvrun reads format %d)", p + pl,
                                  KV_GOLDEN_FORMAT);
        } else if (p[0] != '\0' && p[0] != '#') {
            if (s->nbase == cap) {
                int nc = cap ? cap * 2 : 64;
                gentry *nb = realloc(s->base, (size_t)nc * sizeof *nb);
                if (nb == NULL) return kv_error(KV_ERR_OOM, "golden: out of memory reading %s", s->manifest);
                s->base = nb;
                cap = nc;
            }
            kv_status st = parse_line(s, lineno, p, &s->base[s->nbase]);
            if (st != KV_OK) return st;
            s->nbase++;
        }
        p = eol + 1;
    }
    if (lineno == 0)
        return line_error(s, 1, "empty file (the first line must be '%s%d')", FORMAT_LINE_PREFIX, KV_GOLDEN_FORMAT);
    /* Regeneration writes sorted lines, but a hand-merged file need not
     * be: sort, then duplicates sit side by side. */
    qsort(s->base, (size_t)s->nbase, sizeof *s->base, cmp_gentry);
    for (int i = 1; i < s->nbase; i++) {
        if (cmp_gentry(&s->base[i - 1], &s->base[i]) == 0) {
            const gentry *a = &s->base[i - 1], *b = &s->base[i];
            int first = a->line < b->line ? a->line : b->line, second = a->line < b->line ? b->line : a->line;
            return line_error(s, second, "duplicate entry for key '%s' output %d (first at line %d)", a->key,
                              a->e.output, first);
        }
    }
    for (int i = 0; i < s->nbase; i++) {
        s->base[i].e.key = s->base[i].key;
        s->base[i].e.file = s->base[i].file;
    }
    return KV_OK;
}

kv_golden_store *kv_golden_open(const char *dir) {
    if (dir == NULL || dir[0] == '\0') {
        kv_error(KV_ERR_INVALID_ARG, "golden_open: argument 'dir': empty");
        return NULL;
    }
    kv_golden_store *s = calloc(1, sizeof *s);
    if (s == NULL) {
        kv_error(KV_ERR_OOM, "golden_open: out of memory");
        return NULL;
    }
    s->dir = dup_str(dir);
    s->max_file_bytes = KV_GOLDEN_DEFAULT_MAX_FILE_BYTES;
    if (s->dir == NULL || join_path(s->manifest, sizeof s->manifest, dir, MANIFEST_NAME) != 0) {
        kv_error(s->dir ? KV_ERR_INVALID_ARG : KV_ERR_OOM, "golden_open: argument 'dir': too long or out of memory");
        kv_golden_close(s);
        return NULL;
    }
    unsigned char *text = NULL;
    size_t len = 0;
    if (read_all(s->manifest, &text, &len) != 0) {
        if (errno == ENOENT) return s; /* a store not generated yet */
        kv_error(KV_ERR_INVALID_ARG, "%s: cannot read: %s", s->manifest, strerror(errno));
        kv_golden_close(s);
        return NULL;
    }
    s->has_manifest = true;
    kv_status st = parse_manifest(s, (char *)text, len);
    free(text);
    if (st != KV_OK) {
        kv_golden_close(s);
        return NULL;
    }
    return s;
}

void kv_golden_close(kv_golden_store *s) {
    if (s == NULL) return;
    for (int i = 0; i < s->nbase; i++) gentry_free(&s->base[i]);
    free(s->base);
    for (int i = 0; i < s->npend; i++) {
        gentry_free(s->pend[i]);
        free(s->pend[i]);
    }
    free(s->pend);
    free(s->dir);
    free(s);
}

bool kv_golden_has_manifest(const kv_golden_store *s) { return s && s->has_manifest; }
const char *kv_golden_dir(const kv_golden_store *s) { return s ? s->dir : NULL; }
int kv_golden_count(const kv_golden_store *s) { return s ? s->nbase : 0; }

const kv_golden_entry *kv_golden_entry_at(const kv_golden_store *s, int i) {
    if (s == NULL || i < 0 || i >= s->nbase) return NULL;
    return &s->base[i].e;
}

/* First base index whose (key, output) is >= the one given. */
static int base_lower_bound(const kv_golden_store *s, const char *key, int output) {
    int lo = 0, hi = s->nbase;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cmp_entry(s->base[mid].key, s->base[mid].e.output, key, output) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

const kv_golden_entry *kv_golden_lookup(const kv_golden_store *s, const char *key, int output) {
    if (s == NULL || key == NULL) return NULL;
    int i = base_lower_bound(s, key, output);
    if (i < s->nbase && cmp_entry(s->base[i].key, s->base[i].e.output, key, output) == 0) return &s->base[i].e;
    return NULL;
}

int kv_golden_output_count(const kv_golden_store *s, const char *key) {
    if (s == NULL || key == NULL) return 0;
    int n = 0;
    for (int i = base_lower_bound(s, key, -1); i < s->nbase && strcmp(s->base[i].key, key) == 0; i++) n++;
    return n;
}

/* ---- verification ---- */

const char *kv_golden_outcome_name(kv_golden_outcome o) {
    switch (o) {
    case KV_GOLDEN_OK: return "ok";
    case KV_GOLDEN_MISSING: return "missing";
    case KV_GOLDEN_CORRUPT: return "corrupt";
    case KV_GOLDEN_STALE: return "stale";
    case KV_GOLDEN_DIFFERS: return "differs";
    }
    return "unknown";
}

__attribute__((format(printf, 3, 4)))
static kv_status verdict(kv_golden_verdict *v, kv_golden_outcome o, const char *fmt, ...) {
    v->outcome = o;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->message, sizeof v->message, fmt, ap);
    va_end(ap);
    return KV_OK;
}

typedef struct bytecmp {
    const unsigned char *p;
    size_t left;
} bytecmp;

static int bytecmp_chunk(void *ctx, const void *bytes, size_t n) {
    bytecmp *c = ctx;
    if (n > c->left || memcmp(c->p, bytes, n) != 0) return 1;
    c->p += n;
    c->left -= n;
    return 0;
}

#define REGEN_HINT "regenerate with kvrun --regen-golden"

kv_status kv_golden_verify(const kv_golden_store *s, const char *key, int output, const kv_tensor *out,
                           kv_golden_verdict *v) {
    if (v == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_verify: argument 'verdict': NULL");
    memset(v, 0, sizeof *v);
    if (s == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_verify: argument 'store': NULL");
    if (key == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_verify: argument 'key': NULL");
    if (out == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_verify: argument 'out': NULL");
    const kv_golden_entry *e = kv_golden_lookup(s, key, output);
    if (e == NULL) {
        return verdict(v, KV_GOLDEN_MISSING, "golden: no entry for key '%s' output %d in %s%s; %s", key, output,
                       s->manifest, s->has_manifest ? "" : " (the file does not exist)", REGEN_HINT);
    }
    v->expected_hash = e->hash;
    if (out->dtype != e->dtype || !same_shape(e, out)) {
        char want[KV_MAX_DIMS * 24], got[KV_MAX_DIMS * 24];
        format_shape(e->sizes, e->ndim, want, sizeof want);
        format_shape(out->sizes, out->ndim, got, sizeof got);
        return verdict(v, KV_GOLDEN_STALE,
                       "golden: entry for key '%s' output %d is stale: MANIFEST records %s %s, the reference output "
                       "is %s %s; %s",
                       key, output, kv_dtype_name(e->dtype), want, kv_dtype_name(out->dtype), got, REGEN_HINT);
    }
    kv_status st = kv_hash_tensor(out, &v->actual_hash);
    if (st != KV_OK) return st;
    char hexa[KV_HASH_HEX_LEN], hexe[KV_HASH_HEX_LEN];
    kv_hash_format(v->actual_hash, hexa);
    kv_hash_format(e->hash, hexe);
    if (e->file == NULL) {
        if (v->actual_hash == e->hash) return verdict(v, KV_GOLDEN_OK, "%s", "");
        return verdict(v, KV_GOLDEN_DIFFERS,
                       "golden: output %d of key '%s' hashes to %s, the golden (hash-only) to %s; no stored data to "
                       "list mismatches from",
                       output, key, hexa, hexe);
    }
    char path[PATH_CAP];
    if (join_path(path, sizeof path, s->dir, e->file) != 0)
        return kv_error(KV_ERR_INVALID_ARG, "golden_verify: path of '%s' too long", e->file);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT)
            return verdict(v, KV_GOLDEN_MISSING, "golden: file %s of key '%s' output %d is missing; %s", path, key,
                           output, REGEN_HINT);
        return verdict(v, KV_GOLDEN_CORRUPT, "golden: file %s of key '%s' output %d cannot be read: %s; %s", path, key,
                       output, strerror(errno), REGEN_HINT);
    }
    errno = 0;
    kv_tensor *stored = kv_npy_read(path, e->dtype);
    if (stored == NULL && (errno == EMFILE || errno == ENFILE || errno == ENOMEM))
        /* The process, not the file: a kernel that leaks descriptors or
         * memory exhausts them, and regenerating the golden would not help. */
        return kv_error(errno == ENOMEM ? KV_ERR_OOM : KV_ERR_DEVICE,
                        "golden: file %s of key '%s' output %d cannot be opened: %s (this process ran out of %s; a "
                        "kernel leaking them earlier in this worker? the golden itself is not in question)",
                        path, key, output, strerror(errno), errno == ENOMEM ? "memory" : "file descriptors");
    if (stored == NULL) {
        /* The npy message already starts with the path. */
        return verdict(v, KV_GOLDEN_CORRUPT, "golden: key '%s' output %d: %s; %s", key, output,
                       kv_last_error_message(), REGEN_HINT);
    }
    if (!same_shape(e, stored)) {
        char want[KV_MAX_DIMS * 24], got[KV_MAX_DIMS * 24];
        format_shape(e->sizes, e->ndim, want, sizeof want);
        format_shape(stored->sizes, stored->ndim, got, sizeof got);
        kv_tensor_release(stored);
        return verdict(v, KV_GOLDEN_CORRUPT, "golden: %s holds shape %s, MANIFEST says %s (key '%s' output %d); %s",
                       path, got, want, key, output, REGEN_HINT);
    }
    uint64_t file_hash = 0;
    st = kv_hash_tensor(stored, &file_hash);
    if (st != KV_OK) {
        kv_tensor_release(stored);
        return st;
    }
    if (file_hash != e->hash) {
        char hexf[KV_HASH_HEX_LEN];
        kv_hash_format(file_hash, hexf);
        kv_tensor_release(stored);
        return verdict(v, KV_GOLDEN_CORRUPT,
                       "golden: content hash %s of %s differs from MANIFEST's %s (file edited or damaged; key '%s' "
                       "output %d); %s",
                       hexf, path, hexe, key, output, REGEN_HINT);
    }
    size_t nbytes = (size_t)kv_tensor_numel(stored) * kv_dtype_size(stored->dtype);
    bytecmp c = { kv_tensor_data(stored), nbytes };
    int r = nbytes ? kv_npy_visit(out, bytecmp_chunk, &c) : 0;
    if (r < 0) {
        kv_tensor_release(stored);
        return kv_last_error();
    }
    if (r == 0 && c.left == 0) {
        kv_tensor_release(stored);
        return verdict(v, KV_GOLDEN_OK, "%s", "");
    }
    v->stored = stored;
    return verdict(v, KV_GOLDEN_DIFFERS, "golden: output %d of key '%s' differs from %s (hash %s, golden %s)", output,
                   key, path, hexa, hexe);
}

void kv_golden_verdict_release(kv_golden_verdict *v) {
    if (v == NULL) return;
    kv_tensor_release(v->stored);
    v->stored = NULL;
}

/* ---- regeneration ---- */

void kv_golden_set_max_file_bytes(kv_golden_store *s, size_t nbytes) {
    if (s) s->max_file_bytes = nbytes;
}

static int pend_lower_bound(const kv_golden_store *s, const char *key, int output) {
    int lo = 0, hi = s->npend;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cmp_entry(s->pend[mid]->key, s->pend[mid]->e.output, key, output) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static kv_status make_entry(const kv_golden_store *s, const char *op, const char *key, int output,
                            const kv_tensor *t, gentry **out) {
    *out = NULL;
    if (t == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_put: argument 'outputs': output %d of '%s' is NULL",
                                   output, key);
    if (kv_npy_descr(t->dtype) == NULL)
        return kv_error(KV_ERR_DTYPE, "golden_put: argument 'outputs': output %d has unknown dtype %d", output,
                        (int)t->dtype);
    gentry *g = calloc(1, sizeof *g);
    if (g == NULL) return kv_error(KV_ERR_OOM, "golden_put: out of memory");
    g->e.output = output;
    g->e.dtype = t->dtype;
    g->e.ndim = t->ndim;
    memcpy(g->e.sizes, t->sizes, sizeof g->e.sizes);
    kv_status st = kv_hash_tensor(t, &g->e.hash);
    if (st == KV_OK) {
        g->key = dup_str(key);
        if (g->key == NULL) st = kv_error(KV_ERR_OOM, "golden_put: out of memory");
    }
    size_t nbytes = (size_t)kv_tensor_numel(t) * kv_dtype_size(t->dtype);
    if (st == KV_OK && nbytes <= s->max_file_bytes) {
        char name[OP_NAME_MAX + 64];
        kv_golden_file_name(op, key, output, name, sizeof name);
        g->file = dup_str(name);
        if (g->file == NULL) st = kv_error(KV_ERR_OOM, "golden_put: out of memory");
        if (st == KV_OK) st = kv_npy_encode(t, (void **)&g->npy, &g->npy_len);
    }
    if (st != KV_OK) {
        gentry_free(g);
        free(g);
        return st;
    }
    g->e.key = g->key;
    g->e.file = g->file;
    *out = g;
    return KV_OK;
}

kv_status kv_golden_put(kv_golden_store *s, const char *op, const char *key, const kv_tensor *const *outputs,
                        int noutputs) {
    if (s == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_put: argument 'store': NULL");
    if (op == NULL || !op_name_ok(op, strlen(op)))
        return kv_error(KV_ERR_INVALID_ARG, "golden_put: argument 'op': '%s' is not a usable directory name",
                        op ? op : "(null)");
    const char *kp = key_problem(key);
    if (kp) return kv_error(KV_ERR_INVALID_ARG, "golden_put: argument 'key': %s", kp);
    if (outputs == NULL || noutputs < 1 || noutputs > KV_GOLDEN_MAX_OUTPUTS)
        return kv_error(KV_ERR_INVALID_ARG, "golden_put: argument 'noutputs': %d is outside 1..%d", noutputs,
                        KV_GOLDEN_MAX_OUTPUTS);
    gentry *fresh[KV_GOLDEN_MAX_OUTPUTS];
    for (int i = 0; i < noutputs; i++) {
        kv_status st = make_entry(s, op, key, i, outputs[i], &fresh[i]);
        if (st != KV_OK) {
            for (int j = 0; j < i; j++) {
                gentry_free(fresh[j]);
                free(fresh[j]);
            }
            return st;
        }
    }
    int at = pend_lower_bound(s, key, 0);
    int have = 0;
    while (at + have < s->npend && strcmp(s->pend[at + have]->key, key) == 0) have++;
    if (have > 0) {
        bool same = have == noutputs;
        for (int i = 0; same && i < noutputs; i++) {
            const gentry *old = s->pend[at + i];
            same = same_content(old, fresh[i]) && old->npy_len == fresh[i]->npy_len &&
                   (old->npy_len == 0 || memcmp(old->npy, fresh[i]->npy, old->npy_len) == 0);
        }
        for (int i = 0; i < noutputs; i++) {
            gentry_free(fresh[i]);
            free(fresh[i]);
        }
        if (same) return KV_OK;
        return kv_error(KV_ERR_INVALID_ARG,
                        "golden_put: key '%s' was put twice with different outputs (a non-deterministic reference?)",
                        key);
    }
    if (s->npend + noutputs > s->cappend) {
        int nc = s->cappend ? s->cappend * 2 : 256;
        while (nc < s->npend + noutputs) nc *= 2;
        gentry **np = realloc(s->pend, (size_t)nc * sizeof *np);
        if (np == NULL) {
            for (int i = 0; i < noutputs; i++) {
                gentry_free(fresh[i]);
                free(fresh[i]);
            }
            return kv_error(KV_ERR_OOM, "golden_put: out of memory");
        }
        s->pend = np;
        s->cappend = nc;
    }
    memmove(&s->pend[at + noutputs], &s->pend[at], (size_t)(s->npend - at) * sizeof *s->pend);
    for (int i = 0; i < noutputs; i++) s->pend[at + i] = fresh[i];
    s->npend += noutputs;
    return KV_OK;
}

/* The entry list a save produces, built as copies so a failed save can
 * leave the store untouched. `npy` is borrowed from the pending entry. */
typedef struct plan {
    gentry *v;
    int n, cap;
    kv_golden_summary sum;
    int cap_added, cap_changed, cap_removed;
} plan;

static kv_status plan_push(plan *p, const gentry *src, bool with_data) {
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 256;
        gentry *nv = realloc(p->v, (size_t)nc * sizeof *nv);
        if (nv == NULL) return kv_error(KV_ERR_OOM, "golden_save: out of memory");
        p->v = nv;
        p->cap = nc;
    }
    gentry *g = &p->v[p->n];
    *g = *src;
    g->line = 0;
    g->npy = with_data ? src->npy : NULL;
    g->npy_len = with_data ? src->npy_len : 0;
    g->key = dup_str(src->key);
    g->file = src->file ? dup_str(src->file) : NULL;
    if (g->key == NULL || (src->file && g->file == NULL)) {
        free(g->key);
        free(g->file);
        return kv_error(KV_ERR_OOM, "golden_save: out of memory");
    }
    g->e.key = g->key;
    g->e.file = g->file;
    p->n++;
    return KV_OK;
}

static kv_status ref_push(kv_golden_ref **list, int *n, int *cap, const gentry *g) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        kv_golden_ref *nl = realloc(*list, (size_t)nc * sizeof *nl);
        if (nl == NULL) return kv_error(KV_ERR_OOM, "golden_save: out of memory");
        *list = nl;
        *cap = nc;
    }
    (*list)[*n].key = dup_str(g->key);
    if ((*list)[*n].key == NULL) return kv_error(KV_ERR_OOM, "golden_save: out of memory");
    (*list)[*n].output = g->e.output;
    (*n)++;
    return KV_OK;
}

static void plan_free(plan *p, bool keep_summary) {
    for (int i = 0; i < p->n; i++) {
        p->v[i].npy = NULL; /* borrowed */
        gentry_free(&p->v[i]);
    }
    free(p->v);
    p->v = NULL;
    p->n = p->cap = 0;
    if (!keep_summary) kv_golden_summary_free(&p->sum);
}

/* Merges the base entries with the pending ones, group by group (a group
 * is every output of one key), counting what changed. */
static kv_status plan_build(const kv_golden_store *s, bool full_run, plan *p) {
    kv_golden_summary *sum = &p->sum;
    int i = 0, j = 0;
    kv_status st = KV_OK;
    while (st == KV_OK && (i < s->nbase || j < s->npend)) {
        int c = i >= s->nbase ? 1 : j >= s->npend ? -1 : strcmp(s->base[i].key, s->pend[j]->key);
        int gi = i, gj = j;
        if (c <= 0) while (gi < s->nbase && strcmp(s->base[gi].key, s->base[i].key) == 0) gi++;
        if (c >= 0) while (gj < s->npend && strcmp(s->pend[gj]->key, s->pend[j]->key) == 0) gj++;
        if (c < 0) {
            for (int k = i; st == KV_OK && k < gi; k++) {
                if (full_run) {
                    st = ref_push(&sum->removed_list, &sum->removed, &p->cap_removed, &s->base[k]);
                } else {
                    sum->kept++;
                    st = plan_push(p, &s->base[k], false);
                }
            }
            i = gi;
            continue;
        }
        for (int k = j; st == KV_OK && k < gj; k++) {
            const gentry *np = s->pend[k];
            const gentry *old = NULL;
            for (int b = i; c == 0 && b < gi; b++) {
                if (s->base[b].e.output == np->e.output) old = &s->base[b];
            }
            if (old == NULL) st = ref_push(&sum->added_list, &sum->added, &p->cap_added, np);
            else if (!same_content(old, np)) st = ref_push(&sum->changed_list, &sum->changed, &p->cap_changed, np);
            else sum->unchanged++;
            if (st == KV_OK) st = plan_push(p, np, true);
        }
        for (int b = i; c == 0 && st == KV_OK && b < gi; b++) {
            bool kept = false;
            for (int k = j; k < gj; k++) {
                if (s->pend[k]->e.output == s->base[b].e.output) kept = true;
            }
            if (!kept) st = ref_push(&sum->removed_list, &sum->removed, &p->cap_removed, &s->base[b]);
        }
        if (c == 0) i = gi;
        j = gj;
    }
    return st;
}

typedef struct file_ref {
    const char *file;
    const char *key;
} file_ref;

static int cmp_file_ref(const void *a, const void *b) {
    return strcmp(((const file_ref *)a)->file, ((const file_ref *)b)->file);
}

/* Sorted list of the files the plan references, for the collision check
 * and the cleanup of unreferenced files. */
static kv_status plan_files(const plan *p, file_ref **out, int *nout) {
    *out = NULL;
    *nout = 0;
    file_ref *v = malloc((size_t)(p->n ? p->n : 1) * sizeof *v);
    if (v == NULL) return kv_error(KV_ERR_OOM, "golden_save: out of memory");
    int n = 0;
    for (int i = 0; i < p->n; i++) {
        if (p->v[i].file) v[n++] = (file_ref){ p->v[i].file, p->v[i].key };
    }
    qsort(v, (size_t)n, sizeof *v, cmp_file_ref);
    for (int i = 1; i < n; i++) {
        if (strcmp(v[i - 1].file, v[i].file) == 0) {
            kv_status st = kv_error(KV_ERR_INVALID_ARG, "golden_save: keys '%s' and '%s' map to the same file %s",
                                    v[i - 1].key, v[i].key, v[i].file);
            free(v);
            return st;
        }
    }
    *out = v;
    *nout = n;
    return KV_OK;
}

static kv_status write_entry_file(const kv_golden_store *s, const gentry *g, int *written) {
    char path[PATH_CAP], opdir[PATH_CAP];
    if (join_path(path, sizeof path, s->dir, g->file) != 0)
        return kv_error(KV_ERR_INVALID_ARG, "golden_save: path of '%s' too long", g->file);
    const char *slash = strchr(g->file, '/');
    snprintf(opdir, sizeof opdir, "%s/%.*s", s->dir, (int)(slash - g->file), g->file);
    kv_status st = ensure_dir(opdir);
    if (st != KV_OK) return st;
    /* Leave identical files alone: a regeneration that changes nothing
     * touches nothing, and a damaged file is repaired. */
    unsigned char *old = NULL;
    size_t oldlen = 0;
    if (read_all(path, &old, &oldlen) == 0) {
        bool same = oldlen == g->npy_len && memcmp(old, g->npy, oldlen) == 0;
        free(old);
        if (same) return KV_OK;
    }
    st = write_atomic(path, g->npy, g->npy_len);
    if (st == KV_OK) (*written)++;
    return st;
}

typedef struct textbuf {
    char *p;
    size_t len, cap;
    bool oom;
} textbuf;

__attribute__((format(printf, 2, 3)))
static void tb_printf(textbuf *tb, const char *fmt, ...) {
    if (tb->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(tb->p ? tb->p + tb->len : NULL, tb->p ? tb->cap - tb->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            tb->oom = true;
            return;
        }
        if (tb->p && tb->len + (size_t)n < tb->cap) {
            tb->len += (size_t)n;
            return;
        }
        size_t nc = tb->cap ? tb->cap * 2 : 8192;
        while (nc < tb->len + (size_t)n + 1) nc *= 2;
        char *np = realloc(tb->p, nc);
        if (np == NULL) {
            tb->oom = true;
            return;
        }
        tb->p = np;
        tb->cap = nc;
    }
}

static kv_status write_manifest(const kv_golden_store *s, const plan *p) {
    textbuf tb = { 0 };
    tb_printf(&tb, "%s%d\n", FORMAT_LINE_PREFIX, KV_GOLDEN_FORMAT);
    tb_printf(&tb, "# generated by kvrun --regen-golden; do not edit\n");
    tb_printf(&tb, "# one line per (key, output), sorted by key (bytewise) then output; tab-separated:\n");
    tb_printf(&tb, "#   key, output, dtype, shape, XXH3-64 of the row-major data bytes (hex),\n");
    tb_printf(&tb, "#   file relative to this directory (\"-\" = hash-only)\n");
    tb_printf(&tb, "# bf16 outputs are stored as raw 16-bit patterns in '<u2' .npy files; the dtype\n");
    tb_printf(&tb, "# column says bf16 (read them with kv_npy_read(path, KV_BF16)).\n");
    tb_printf(&tb, "# outputs over %zu data bytes are hash-only, to keep the store small.\n", s->max_file_bytes);
    for (int i = 0; i < p->n; i++) {
        const gentry *g = &p->v[i];
        char shape[KV_MAX_DIMS * 24], hex[KV_HASH_HEX_LEN];
        format_shape(g->e.sizes, g->e.ndim, shape, sizeof shape);
        tb_printf(&tb, "%s\t%d\t%s\t%s\t%s\t%s\n", g->key, g->e.output, kv_dtype_name(g->e.dtype), shape,
                  kv_hash_format(g->e.hash, hex), g->file ? g->file : "-");
    }
    if (tb.oom) {
        free(tb.p);
        return kv_error(KV_ERR_OOM, "golden_save: out of memory writing %s", s->manifest);
    }
    kv_status st = write_atomic(s->manifest, tb.p, tb.len);
    free(tb.p);
    return st;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Deletes .npy files in the op directories that no entry references, and
 * temp files an interrupted save left behind. Only names this store
 * creates are touched; anything else in the tree stays. */
static kv_status remove_unreferenced(const kv_golden_store *s, const file_ref *files, int nfiles, int *removed) {
    DIR *top = opendir(s->dir);
    if (top == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot list: %s", s->dir, strerror(errno));
    struct dirent *de;
    kv_status st = KV_OK;
    while (st == KV_OK && (de = readdir(top)) != NULL) {
        if (de->d_name[0] == '.') continue;
        char opdir[PATH_CAP];
        struct stat sb;
        if (join_path(opdir, sizeof opdir, s->dir, de->d_name) != 0 || stat(opdir, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        if (!op_name_ok(de->d_name, strlen(de->d_name))) continue;
        DIR *d = opendir(opdir);
        if (d == NULL) {
            st = kv_error(KV_ERR_INVALID_ARG, "%s: cannot list: %s", opdir, strerror(errno));
            break;
        }
        struct dirent *fe;
        while ((fe = readdir(d)) != NULL) {
            bool temp = fe->d_name[0] == '.' && strstr(fe->d_name, ".npy.tmp.") != NULL;
            if (!temp && (fe->d_name[0] == '.' || !ends_with(fe->d_name, ".npy"))) continue;
            char rel[PATH_CAP], path[PATH_CAP];
            if (join_path(rel, sizeof rel, de->d_name, fe->d_name) != 0 ||
                join_path(path, sizeof path, opdir, fe->d_name) != 0)
                continue;
            file_ref probe = { rel, NULL };
            if (!temp && bsearch(&probe, files, (size_t)nfiles, sizeof *files, cmp_file_ref) != NULL) continue;
            if (unlink(path) != 0) {
                st = kv_error(KV_ERR_INVALID_ARG, "%s: cannot remove: %s", path, strerror(errno));
                break;
            }
            if (!temp) (*removed)++;
        }
        closedir(d);
        /* Succeeds only when nothing is left: an op with no entries goes. */
        rmdir(opdir);
    }
    closedir(top);
    return st;
}

kv_status kv_golden_save(kv_golden_store *s, bool full_run, kv_golden_summary *summary) {
    if (summary) memset(summary, 0, sizeof *summary);
    if (s == NULL) return kv_error(KV_ERR_INVALID_ARG, "golden_save: argument 'store': NULL");
    plan p = { 0 };
    file_ref *files = NULL;
    int nfiles = 0;
    kv_status st = plan_build(s, full_run, &p);
    if (st == KV_OK) st = plan_files(&p, &files, &nfiles);
    if (st == KV_OK) st = ensure_dir(s->dir);
    for (int i = 0; st == KV_OK && i < p.n; i++) {
        if (p.v[i].npy) st = write_entry_file(s, &p.v[i], &p.sum.files_written);
    }
    if (st == KV_OK) st = write_manifest(s, &p);
    if (st == KV_OK && full_run) st = remove_unreferenced(s, files, nfiles, &p.sum.files_removed);
    free(files);
    if (st != KV_OK) {
        plan_free(&p, false);
        return st;
    }
    /* Commit: the plan's entries become the base; pending data is freed. */
    for (int i = 0; i < s->nbase; i++) gentry_free(&s->base[i]);
    free(s->base);
    for (int i = 0; i < s->npend; i++) {
        gentry_free(s->pend[i]);
        free(s->pend[i]);
    }
    s->npend = 0;
    for (int i = 0; i < p.n; i++) {
        p.v[i].npy = NULL;
        p.v[i].npy_len = 0;
    }
    s->base = p.v;
    s->nbase = p.n;
    s->has_manifest = true;
    if (summary) *summary = p.sum;
    else kv_golden_summary_free(&p.sum);
    return KV_OK;
}

void kv_golden_summary_free(kv_golden_summary *sum) {
    if (sum == NULL) return;
    for (int i = 0; i < sum->added; i++) free(sum->added_list ? sum->added_list[i].key : NULL);
    for (int i = 0; i < sum->changed; i++) free(sum->changed_list ? sum->changed_list[i].key : NULL);
    for (int i = 0; i < sum->removed; i++) free(sum->removed_list ? sum->removed_list[i].key : NULL);
    free(sum->added_list);
    free(sum->changed_list);
    free(sum->removed_list);
    memset(sum, 0, sizeof *sum);
}
