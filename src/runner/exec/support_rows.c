/* --require-support (issue 21): every (op, dtype) pair a loaded plugin
 * declares (kv_backend_desc's `support`) must have a PASS row filed under
 * that plugin in this run. A declared pair that declines is already a
 * FAIL ("declared but declined", runner/check/check_backend.c); this adds
 * what a decline cannot show: a declared pair the run never proved (no
 * case of it was selected, or its every row was skipped), which is an
 * ERROR row, so CI cannot go green on a declaration nothing tested. A
 * plugin that declares nothing while the flag is given is an ERROR too:
 * the flag asks for declarations to check. */
#include "runner/exec/driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "runner/report/report.h"

static kv_status support_row(kv_result_list *out, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static kv_status support_row(kv_result_list *out, const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const kv_status st = kv_driver_backend_vrow(out, name, "support", KV_RESULT_ERROR, fmt, ap);
    va_end(ap);
    return st;
}

/* Marks proved[i] for each declared pair i of `b` that row r passes. */
static void support_mark(const kv_backend_info *b, const kv_check_result *r, bool *proved, int n) {
    if (r->status != KV_RESULT_PASS || strcmp(r->backend, b->name) != 0) return;
    for (int i = 0; i < n; i++) {
        const kv_backend_support *s = kv_backend_declared_at(b->device_type, i);
        if (!proved[i] && s->dtype == r->dtype && strcmp(s->op, r->op) == 0) proved[i] = true;
    }
}

kv_status kv_driver_support_rows(kv_report_stream *stream, int ncases, kv_result_list *out) {
    kv_status st = KV_OK;
    for (int k = 0; k < kv_backend_count() && st == KV_OK; k++) {
        const kv_backend_info *b = kv_backend_at(k);
        if (b->state != KV_BACKEND_LOADED || kv_backend_find(b->device_type) != b) continue;
        int n = 0;
        while (kv_backend_declared_at(b->device_type, n) != NULL) n++;
        if (n == 0) {
            st = support_row(out, b->name,
                             "--require-support: %s declares no supported (op, dtype) pairs (kv_backend_desc's "
                             "support), so there is nothing to require",
                             b->name);
            continue;
        }
        bool *proved = calloc((size_t)n, sizeof *proved);
        if (proved == NULL) return kv_error(KV_ERR_OOM, "--require-support: out of memory");
        for (int ci = 0; ci < ncases && st == KV_OK; ci++) {
            if (!kv_report_stream_has(stream, ci)) continue;
            kv_result_list rows = { 0 };
            st = kv_report_stream_read_case(stream, ci, &rows);
            for (int j = 0; st == KV_OK && j < rows.n; j++) support_mark(b, &rows.items[j], proved, n);
            kv_result_list_free(&rows);
        }
        for (int i = 0; i < n && st == KV_OK; i++) {
            if (proved[i]) continue;
            const kv_backend_support *s = kv_backend_declared_at(b->device_type, i);
            st = support_row(out, b->name,
                             "--require-support: %s declares %s in %s, but no row of this run passed for it (no case "
                             "selected it, or every one was skipped or declined)",
                             b->name, s->op, kv_dtype_name(s->dtype));
        }
        free(proved);
    }
    return st;
}
