/* Which plugins a program loads: --backend=PATH values, else
 * KV_BACKEND_PATH (colon-separated files or folders), else every *.so in
 * build/backends. */
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend_internal.h"

void kv_backend_paths_free(kv_backend_paths *p) {
    if (p == NULL) return;
    for (int i = 0; i < p->n; i++) free(p->items[i]);
    free(p->items);
    memset(p, 0, sizeof *p);
}

static kv_status paths_push(kv_backend_paths *p, const char *s, size_t len) {
    if (p->n == p->cap) {
        const int cap = p->cap ? 2 * p->cap : 8;
        char **n = realloc(p->items, (size_t)cap * sizeof *n);
        if (n == NULL) return kv_error(KV_ERR_OOM, "backend paths: out of memory");
        p->items = n;
        p->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (copy == NULL) return kv_error(KV_ERR_OOM, "backend paths: out of memory");
    memcpy(copy, s, len);
    copy[len] = '\0';
    p->items[p->n++] = copy;
    return KV_OK;
}

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool ends_with_so(const char *name) {
    const size_t n = strlen(name);
    return n > 3 && strcmp(name + n - 3, ".so") == 0;
}

/* Every *.so directly in `dir`, sorted, so the load order (and which
 * plugin wins a contested slot) is the same on every machine. */
static kv_status paths_add_dir(kv_backend_paths *p, const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return kv_error(KV_ERR_INVALID_ARG, "backend paths: cannot open folder '%s'", dir);
    kv_backend_paths found = { 0 };
    kv_status st = KV_OK;
    const struct dirent *e;
    while (st == KV_OK && (e = readdir(d)) != NULL) {
        if (!ends_with_so(e->d_name)) continue;
        char full[PATH_MAX];
        const int n = snprintf(full, sizeof full, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", e->d_name);
        if (n < 0 || n >= (int)sizeof full) continue;
        if (!is_dir(full)) st = paths_push(&found, full, (size_t)n);
    }
    closedir(d);
    if (found.n > 1) qsort(found.items, (size_t)found.n, sizeof found.items[0], cmp_str);
    for (int i = 0; st == KV_OK && i < found.n; i++) st = paths_push(p, found.items[i], strlen(found.items[i]));
    kv_backend_paths_free(&found);
    return st;
}

kv_status kv_backend_paths_add(kv_backend_paths *p, const char *spec) {
    if (p == NULL) return kv_error(KV_ERR_INVALID_ARG, "backend paths: argument 'p': NULL");
    if (spec == NULL) return KV_OK;
    const char *s = spec;
    while (true) {
        const char *colon = strchr(s, ':');
        const size_t len = colon ? (size_t)(colon - s) : strlen(s);
        if (len > 0) {
            char entry[PATH_MAX];
            if (len >= sizeof entry) return kv_error(KV_ERR_INVALID_ARG, "backend paths: an entry is too long");
            memcpy(entry, s, len);
            entry[len] = '\0';
            const kv_status st = is_dir(entry) ? paths_add_dir(p, entry) : paths_push(p, entry, len);
            if (st != KV_OK) return st;
        }
        if (colon == NULL) break;
        s = colon + 1;
    }
    return KV_OK;
}

kv_status kv_backend_paths_resolve(const char *const *cli, int ncli, const char *env, const char *default_dir,
                                   kv_backend_paths *out) {
    if (out == NULL) return kv_error(KV_ERR_INVALID_ARG, "backend paths: argument 'out': NULL");
    memset(out, 0, sizeof *out);
    kv_status st = KV_OK;
    if (ncli > 0) {
        for (int i = 0; st == KV_OK && i < ncli; i++) st = kv_backend_paths_add(out, cli[i]);
    } else if (env != NULL) {
        st = kv_backend_paths_add(out, env);
    } else if (default_dir != NULL && is_dir(default_dir)) {
        st = paths_add_dir(out, default_dir);
    }
    if (st != KV_OK) kv_backend_paths_free(out);
    return st;
}

const char *kv_backend_default_dir(void) {
    static char dir[PATH_MAX];
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = '\0';
            /* A build tree (build/kvrun beside build/backends), then an
             * installed one (PREFIX/bin/kvrun, PREFIX/lib/kvsuite/backends:
             * `ninja install`). */
            int m = snprintf(dir, sizeof dir, "%s/backends", exe);
            if (m > 0 && m < (int)sizeof dir && is_dir(dir)) return dir;
            m = snprintf(dir, sizeof dir, "%s/../lib/kvsuite/backends", exe);
            if (m > 0 && m < (int)sizeof dir && is_dir(dir)) return dir;
        }
    }
    return "build/backends";
}

int kv_backend_load_paths(const kv_backend_paths *p, FILE *log) {
    int loaded = 0;
    for (int i = 0; p != NULL && i < p->n; i++) {
        if (kv_backend_load(p->items[i]) == KV_OK) loaded++;
        else if (log != NULL) fprintf(log, "%s\n", kv_last_error_message());
    }
    kv_backend_reselect_accel();
    kv_error_clear();
    return loaded;
}

int kv_backend_load_default(const char *const *cli, int ncli, FILE *log) {
    kv_backend_paths p;
    if (kv_backend_paths_resolve(cli, ncli, getenv("KV_BACKEND_PATH"), kv_backend_default_dir(), &p) != KV_OK)
        return -1;
    const int n = kv_backend_load_paths(&p, log);
    kv_backend_paths_free(&p);
    return n;
}
