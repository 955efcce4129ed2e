/* Case filters: globs with literal brackets, and POSIX extended regexes. */
#include "runner/case/filter.h"

#include <fnmatch.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

struct kv_filter_pattern {
    bool is_regex;
    char *glob;        /* already escaped for fnmatch */
    regex_t re;
};

kv_status kv_filter_add(kv_filter *f, const char *pattern) {
    const bool is_regex = strncmp(pattern, "re:", 3) == 0;
    const char *body = is_regex ? pattern + 3 : pattern;
    if (body[0] == '\0') {
        return kv_error(KV_ERR_INVALID_ARG, "--filter: empty pattern '%s'", pattern);
    }
    if (f->n == f->cap) {
        const int cap = f->cap ? f->cap * 2 : 4;
        kv_filter_pattern *items = realloc(f->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_error(KV_ERR_OOM, "--filter: out of memory");
        f->items = items;
        f->cap = cap;
    }
    kv_filter_pattern *p = &f->items[f->n];
    memset(p, 0, sizeof *p);
    p->is_regex = is_regex;
    if (is_regex) {
        const int rc = regcomp(&p->re, body, REG_EXTENDED | REG_NOSUB);
        if (rc != 0) {
            char why[128];
            regerror(rc, &p->re, why, sizeof why);
            return kv_error(KV_ERR_INVALID_ARG, "--filter: bad regular expression '%s': %s", body, why);
        }
    } else {
        /* Each '[' and ']' becomes "\[" / "\]": at most twice the length. */
        const size_t len = strlen(body);
        p->glob = malloc(2 * len + 1);
        if (p->glob == NULL) return kv_error(KV_ERR_OOM, "--filter: out of memory");
        size_t n = 0;
        for (size_t i = 0; i < len; i++) {
            if (body[i] == '\\' && i + 1 < len) {
                p->glob[n++] = body[i++];
                p->glob[n++] = body[i];
                continue;
            }
            if (body[i] == '[' || body[i] == ']') p->glob[n++] = '\\';
            p->glob[n++] = body[i];
        }
        p->glob[n] = '\0';
    }
    f->n++;
    return KV_OK;
}

bool kv_filter_match(const kv_filter *f, const char *id) {
    if (f->n == 0) return true;
    for (int i = 0; i < f->n; i++) {
        const kv_filter_pattern *p = &f->items[i];
        const bool hit = p->is_regex ? regexec(&p->re, id, 0, NULL, 0) == 0
                                     : fnmatch(p->glob, id, 0) == 0;
        if (hit) return true;
    }
    return false;
}

void kv_filter_free(kv_filter *f) {
    for (int i = 0; i < f->n; i++) {
        if (f->items[i].is_regex) {
            regfree(&f->items[i].re);
        } else {
            free(f->items[i].glob);
        }
    }
    free(f->items);
    f->items = NULL;
    f->n = f->cap = 0;
}
