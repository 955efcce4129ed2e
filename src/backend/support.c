/* Declared support (kv_backend_desc's `support`, issue 21): the (op,
 * dtype) pairs a plugin promises to run, checked when it loads and read
 * by the runner, which turns a declined declared pair into a FAIL and
 * shows declared against measured in the support matrix. */
#include <string.h>

#include "backend/backend_internal.h"

kv_status kv_backend_support_check(const kv_backend_desc *d, const char *path) {
    if (d->nsupport < 0 || (d->nsupport > 0 && d->support == NULL))
        return kv_error(KV_ERR_INVALID_ARG,
                        "backend '%s' (%s): its descriptor declares %d supported pairs with support %s; skipped", path,
                        d->name, d->nsupport, d->support ? "set" : "NULL");
    for (int i = 0; i < d->nsupport; i++) {
        const kv_backend_support *s = &d->support[i];
        if (s->op == NULL || kv_op_find(s->op) == NULL)
            return kv_error(KV_ERR_INVALID_ARG,
                            "backend '%s' (%s): support[%d] declares %s%s%s, which is no op; skipped", path, d->name,
                            i, s->op ? "'" : "", s->op ? s->op : "a NULL op", s->op ? "'" : "");
        if ((int)s->dtype < 0 || s->dtype >= KV_DTYPE_COUNT)
            return kv_error(KV_ERR_INVALID_ARG,
                            "backend '%s' (%s): support[%d] (%s) has dtype %d, which is no dtype; skipped", path,
                            d->name, i, s->op, (int)s->dtype);
    }
    return KV_OK;
}

int kv_backend_declared(kv_device_type t, const char *op, kv_dtype dt) {
    const kv_backend_desc *d = kv_backend_desc_of(t);
    if (d == NULL || d->nsupport <= 0 || op == NULL) return -1;
    for (int i = 0; i < d->nsupport; i++)
        if (d->support[i].dtype == dt && strcmp(d->support[i].op, op) == 0) return 1;
    return 0;
}

const kv_backend_support *kv_backend_declared_at(kv_device_type t, int i) {
    const kv_backend_desc *d = kv_backend_desc_of(t);
    if (d == NULL || i < 0 || i >= d->nsupport) return NULL;
    return &d->support[i];
}
