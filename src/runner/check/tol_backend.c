/* The per-backend tolerance overrides of this run (runner/tol_backend.h):
 * the rows the tolerances files gave, first match wins. */
#include "runner/check/tol_backend.h"

#include <fnmatch.h>
#include <string.h>

static kv_tol_override tol_rows[KV_TOL_OVERRIDE_MAX];
static int tol_n;

int kv_tol_override_count(void) { return tol_n; }

const kv_tol_override *kv_tol_override_at(int i) { return i >= 0 && i < tol_n ? &tol_rows[i] : NULL; }

kv_status kv_tol_override_add(const kv_tol_override *o) {
    if (tol_n == KV_TOL_OVERRIDE_MAX)
        return kv_error(KV_ERR_INVALID_ARG, "%s: more than %d tolerance overrides in one run", o->source,
                        KV_TOL_OVERRIDE_MAX);
    tol_rows[tol_n++] = *o;
    return KV_OK;
}

void kv_tol_override_truncate(int n) {
    if (n >= 0 && n < tol_n) tol_n = n;
}

int kv_tol_override_find(const char *backend, const char *op, const char *check, kv_dtype out) {
    if (backend == NULL || op == NULL || check == NULL) return -1;
    for (int i = 0; i < tol_n; i++) {
        const kv_tol_override *o = &tol_rows[i];
        if (strcmp(o->backend, backend) == 0 && (o->dtypes & (1u << out)) && fnmatch(o->op, op, 0) == 0 &&
            fnmatch(o->check, check, 0) == 0)
            return i;
    }
    return -1;
}
