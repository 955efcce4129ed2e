/* Tolerances files: the per-backend overrides as data (runner/check/
 * tol_backend.h). One override per line, six fields, blank-separated:
 *
 *   # OP_GLOB        DTYPES  CHECK_GLOB  BACKEND  RULE          REASON
 *   mm               bf16    variants*   onednn   abs+0x1p-126  oneDNN 2.6 stores ...
 *
 * OP_GLOB is an fnmatch glob over op names (it must match at least one
 * op: a typo would widen nothing, silently); DTYPES the output dtypes, a
 * comma list of short names ("bf16,f16") or `*` for all; CHECK_GLOB a
 * glob over the check row's name ("variants:onednn" and the like);
 * BACKEND the plugin's name exactly; RULE the widening, `abs+SLACK`
 * (SLACK a positive finite number in C syntax, hex floats welcome: the
 * absolute slack added to every element's bound); REASON the rest of the
 * line, mandatory. `#` starts a comment line; blank lines are ignored. A
 * malformed line is an error naming FILE:LINE, and the file adds nothing. */
#include "runner/check/tol_backend.h"

#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/backend.h"
#include "kv/dispatch.h"
#include "runner/golden/hash.h"

/* Larger than any overrides file needs (KV_TOL_OVERRIDE_MAX lines of
 * ~600 bytes): a device or a wrong path is refused before it is read. */
#define KV_TOL_FILE_MAX (1024 * 1024)

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* The next blank-separated field of [*p, end) into buf; false when none
 * is left or it does not fit (why says which). */
static bool next_field(const char **p, const char *end, char *buf, size_t cap, const char *what, char *why,
                       size_t whycap) {
    const char *s = *p;
    while (s < end && is_blank(*s)) s++;
    const char *e = s;
    while (e < end && !is_blank(*e)) e++;
    if (e == s) {
        snprintf(why, whycap, "no %s: a line is OP_GLOB DTYPES CHECK_GLOB BACKEND RULE REASON", what);
        return false;
    }
    if ((size_t)(e - s) >= cap) {
        snprintf(why, whycap, "%s '%.*s...' is longer than %zu characters", what, 40, s, cap - 1);
        return false;
    }
    memcpy(buf, s, (size_t)(e - s));
    buf[e - s] = '\0';
    *p = e;
    return true;
}

static bool op_glob_matches_any(const char *glob) {
    for (int i = 0; i < kv_op_count(); i++)
        if (fnmatch(glob, kv_op_name(kv_op_at(i)), 0) == 0) return true;
    return false;
}

static bool parse_dtypes(const char *field, unsigned *out, char *why, size_t whycap) {
    if (strcmp(field, "*") == 0) {
        *out = (1u << KV_DTYPE_COUNT) - 1u;
        return true;
    }
    unsigned m = 0;
    char buf[96];
    snprintf(buf, sizeof buf, "%s", field);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        kv_dtype dt;
        if (kv_dtype_parse(t, &dt) != 0) {
            snprintf(why, whycap, "unknown dtype '%s' (short names: f32, bf16, f16, ..., or * for all)", t);
            return false;
        }
        m |= 1u << dt;
    }
    if (m == 0) {
        snprintf(why, whycap, "no dtype in '%s'", field);
        return false;
    }
    *out = m;
    return true;
}

static bool parse_rule(const char *field, double *slack, char *why, size_t whycap) {
    char *end = NULL;
    errno = 0;
    const double v = strncmp(field, "abs+", 4) == 0 ? strtod(field + 4, &end) : NAN;
    if (end == NULL || end == field + 4 || *end != '\0' || errno != 0 || !isfinite(v) || !(v > 0.0)) {
        snprintf(why, whycap,
                 "bad rule '%s': the rule is abs+SLACK, SLACK a positive finite number (e.g. abs+0x1p-126), "
                 "added to every element's bound",
                 field);
        return false;
    }
    *slack = v;
    return true;
}

static bool parse_backend(const char *field, const char *const *backends, int nb, char *why, size_t whycap) {
    for (int i = 0; i < nb; i++)
        if (strcmp(field, backends[i]) == 0) return true;
    int n = snprintf(why, whycap, "unknown backend '%s' (", field);
    if (nb == 0) snprintf(why + n, whycap - (size_t)n, "no plugin is loaded)");
    for (int i = 0; i < nb && n > 0 && (size_t)n < whycap; i++)
        n += snprintf(why + n, whycap - (size_t)n, "%s%s%s", i ? ", " : "the loaded plugins: ", backends[i],
                      i + 1 == nb ? ")" : "");
    return false;
}

/* One non-comment line into o; false with why. */
static bool parse_line(const char *s, const char *end, kv_tol_override *o, const char *const *backends, int nb,
                       char *why, size_t whycap) {
    char dtypes[96], rule[sizeof o->rule];
    if (!next_field(&s, end, o->op, sizeof o->op, "OP_GLOB", why, whycap) ||
        !next_field(&s, end, dtypes, sizeof dtypes, "DTYPES", why, whycap) ||
        !next_field(&s, end, o->check, sizeof o->check, "CHECK_GLOB", why, whycap) ||
        !next_field(&s, end, o->backend, sizeof o->backend, "BACKEND", why, whycap) ||
        !next_field(&s, end, rule, sizeof rule, "RULE", why, whycap))
        return false;
    while (s < end && is_blank(*s)) s++;
    while (end > s && is_blank(end[-1])) end--;
    if (s == end) {
        snprintf(why, whycap,
                 "no reason: an override says why after its rule (OP_GLOB DTYPES CHECK_GLOB BACKEND RULE REASON)");
        return false;
    }
    if ((size_t)(end - s) >= sizeof o->reason) {
        snprintf(why, whycap, "the reason is longer than %zu characters", sizeof o->reason - 1);
        return false;
    }
    memcpy(o->reason, s, (size_t)(end - s));
    o->reason[end - s] = '\0';
    if (!op_glob_matches_any(o->op)) {
        snprintf(why, whycap, "OP_GLOB '%s' matches no op (full names: mm, add.Tensor, sum.dim_IntList, ...)", o->op);
        return false;
    }
    snprintf(o->rule, sizeof o->rule, "%s", rule);
    return parse_dtypes(dtypes, &o->dtypes, why, whycap) && parse_backend(o->backend, backends, nb, why, whycap) &&
           parse_rule(rule, &o->abs_slack, why, whycap);
}

kv_status kv_tol_file_parse(const char *text, const char *name, const char *const *backends, int nbackends) {
    if (text == NULL || name == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_tol_file_parse: argument '%s': is NULL", text ? "name" : "text");
    const int first = kv_tol_override_count();
    int lineno = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        lineno++;
        const char *s = p;
        while (s < end && is_blank(*s)) s++;
        if (s < end && *s != '#') {
            kv_tol_override o;
            memset(&o, 0, sizeof o);
            snprintf(o.source, sizeof o.source, "%s:%d", name, lineno);
            char why[400];
            kv_status st = KV_OK;
            if (!parse_line(s, end, &o, backends, nbackends, why, sizeof why))
                st = kv_error(KV_ERR_INVALID_ARG, "%s:%d: %s", name, lineno, why);
            else
                st = kv_tol_override_add(&o);
            if (st != KV_OK) {
                /* The file adds nothing: half a file would read as all of it. */
                kv_tol_override_truncate(first);
                return st;
            }
        }
        p = nl ? nl + 1 : end;
    }
    return KV_OK;
}

/* The files loaded, by name and content hash, for the run's fingerprint:
 * shards or runs judged by different overrides are not comparable. */
#define KV_TOL_FILES_MAX 64
static struct {
    char name[128];
    uint64_t hash;
} tol_files[KV_TOL_FILES_MAX];
static int ntol_files;

int kv_tol_file_count(void) { return ntol_files; }

void kv_tol_file_describe(int i, char *buf, int cap) {
    if (i < 0 || i >= ntol_files) {
        if (cap > 0) buf[0] = '\0';
        return;
    }
    char hex[KV_HASH_HEX_LEN];
    snprintf(buf, (size_t)cap, "%s#%s", tol_files[i].name, kv_hash_format(tol_files[i].hash, hex));
}

void kv_tol_file_forget(void) { ntol_files = 0; }

kv_status kv_tol_file_load(const char *path, const char *const *backends, int nbackends) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return kv_error(KV_ERR_INVALID_ARG, "tolerances: cannot read '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > KV_TOL_FILE_MAX) {
        fclose(f);
        return kv_error(KV_ERR_INVALID_ARG, "tolerances: '%s': not a regular file of at most %d bytes", path,
                        KV_TOL_FILE_MAX);
    }
    char *text = malloc((size_t)sb.st_size + 1);
    const size_t got = text ? fread(text, 1, (size_t)sb.st_size, f) : 0;
    fclose(f);
    if (text == NULL) return kv_error(KV_ERR_OOM, "tolerances: '%s': out of memory", path);
    text[got] = '\0';
    if (strlen(text) != got) {
        free(text);
        return kv_error(KV_ERR_INVALID_ARG, "tolerances: '%s': a NUL byte: not a text file", path);
    }
    const kv_status st = kv_tol_file_parse(text, path, backends, nbackends);
    /* By its file name, not its path: the same file on two CI machines
     * (an installed plugin's) is the same override. */
    if (st == KV_OK && ntol_files < KV_TOL_FILES_MAX) {
        const char *base = strrchr(path, '/');
        snprintf(tol_files[ntol_files].name, sizeof tol_files[0].name, "%s", base ? base + 1 : path);
        tol_files[ntol_files++].hash = kv_hash_bytes(text, got);
    }
    free(text);
    return st;
}

/* PLUGIN.so's file, PLUGIN.tolerances beside it, into buf; false when the
 * path has no room for it. */
static bool plugin_sidecar(const char *so, char *buf, size_t cap) {
    size_t n = strlen(so);
    if (n > 3 && strcmp(so + n - 3, ".so") == 0) n -= 3;
    return (size_t)snprintf(buf, cap, "%.*s.tolerances", (int)n, so) < cap;
}

kv_status kv_tol_file_load_plugins(void) {
    for (int i = 0; i < kv_backend_count(); i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state != KV_BACKEND_LOADED || b->name[0] == '\0') continue;
        char path[sizeof b->path + 16];
        if (!plugin_sidecar(b->path, path, sizeof path) || access(path, F_OK) != 0) continue;
        const char *names[1] = { b->name };
        const kv_status st = kv_tol_file_load(path, names, 1);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

kv_status kv_tol_file_load_user(const char *path) {
    const char *names[KV_TOL_OVERRIDE_MAX];
    int n = 0;
    for (int i = 0; i < kv_backend_count() && n < KV_TOL_OVERRIDE_MAX; i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state == KV_BACKEND_LOADED && b->name[0] != '\0') names[n++] = b->name;
    }
    return kv_tol_file_load(path, names, n);
}
