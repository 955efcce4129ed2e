/* The row selection of --only-backend and --only-check (row_select.h). */
#include "runner/check/row_select.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

#include "runner/check/check.h"

#define SELECT_MAX 16
#define SELECT_NAME 64

static char sel_backends[SELECT_MAX][SELECT_NAME];
static char sel_checks[SELECT_MAX][SELECT_NAME];
static int nsel_backends, nsel_checks;

static int add_list(const char *list, char names[][SELECT_NAME], int *n) {
    const char *p = list;
    for (;;) {
        const size_t len = strcspn(p, ",");
        if (len == 0 || len >= SELECT_NAME || *n == SELECT_MAX) return -1;
        memcpy(names[*n], p, len);
        names[(*n)++][len] = '\0';
        if (p[len] == '\0') return 0;
        p += len + 1;
    }
}

int kv_row_select_add_backends(const char *list) { return add_list(list, sel_backends, &nsel_backends); }
int kv_row_select_add_checks(const char *list) { return add_list(list, sel_checks, &nsel_checks); }
bool kv_row_select_active(void) { return nsel_backends > 0 || nsel_checks > 0; }

void kv_row_select_reset(void) { nsel_backends = nsel_checks = 0; }

bool kv_row_select_backend(const char *backend) {
    if (nsel_backends == 0) return true;
    for (int i = 0; i < nsel_backends; i++)
        if (strcmp(sel_backends[i], backend) == 0) return true;
    return false;
}

/* The part of a glob before its ':' (the check kind), when it holds no
 * wildcard; NULL when it may match any kind. */
static size_t glob_kind_len(const char *glob) {
    const size_t n = strcspn(glob, ":");
    return strcspn(glob, "*?[\\") < n ? 0 : n;
}

bool kv_row_select_check_kind(const char *kind) {
    if (nsel_checks == 0) return true;
    for (int i = 0; i < nsel_checks; i++) {
        const size_t n = glob_kind_len(sel_checks[i]);
        if (n == 0 || (strlen(kind) == n && strncmp(sel_checks[i], kind, n) == 0)) return true;
    }
    return false;
}

static bool check_selected(const char *check) {
    if (nsel_checks == 0) return true;
    for (int i = 0; i < nsel_checks; i++)
        if (fnmatch(sel_checks[i], check, 0) == 0) return true;
    return false;
}

bool kv_row_select_keep(const kv_check_result *r) {
    if (!check_selected(r->check)) return false;
    return r->status == KV_RESULT_ERROR || kv_row_select_backend(r->backend);
}

kv_status kv_row_select_validate(const char *const *names, int n) {
    for (int i = 0; i < nsel_backends; i++) {
        bool known = false;
        for (int j = 0; j < n && !known; j++) known = strcmp(names[j], sel_backends[i]) == 0;
        if (known) continue;
        char list[256];
        size_t m = 0;
        list[0] = '\0';
        for (int j = 0; j < n && m < sizeof list; j++)
            m += (size_t)snprintf(list + m, sizeof list - m, "%s%s", j ? ", " : "", names[j]);
        return kv_error(KV_ERR_INVALID_ARG, "--only-backend=%s: no such backend in this run (backends: %s)",
                        sel_backends[i], list);
    }
    for (int i = 0; i < nsel_checks; i++) {
        const size_t len = glob_kind_len(sel_checks[i]);
        bool known = len == 0;
        for (int k = 0; k < KV_CHECK_KIND_COUNT && !known; k++) {
            const char *name = kv_check_kind_name((kv_check_kind)k);
            known = strlen(name) == len && strncmp(sel_checks[i], name, len) == 0;
        }
        if (!known)
            return kv_error(KV_ERR_INVALID_ARG,
                            "--only-check=%s: no check '%.*s' (checks: golden, variants, memory, error, lazy, grad, "
                            "fastpath, tune, accuracy, threads; a row's check is CHECK or CHECK:BACKEND[/VARIANT])",
                            sel_checks[i], (int)len, sel_checks[i]);
    }
    return KV_OK;
}

void kv_row_select_describe(char *buf, int cap) {
    int n = 0;
    if (cap > 0) buf[0] = '\0';
    for (int i = 0; i < nsel_backends && n < cap; i++)
        n += snprintf(buf + n, (size_t)(cap - n), "%s%s", i ? "," : " only-backend=", sel_backends[i]);
    for (int i = 0; i < nsel_checks && n < cap; i++)
        n += snprintf(buf + n, (size_t)(cap - n), "%s%s", i ? "," : " only-check=", sel_checks[i]);
}
