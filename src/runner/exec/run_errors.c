/* Rows for faults of the run itself (driver.h, kv_driver_run_error_row):
 * a report that could not be written, a golden store that could not be
 * saved. They are rows, not only a line on stderr, so that every report
 * (console counts, meta.json, junit.xml, the exit code) counts them. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "runner/exec/driver.h"
#include "runner/report/report.h"

kv_status kv_driver_run_error_row(kv_result_list *out, const char *what, const char *fmt, ...) {
    kv_check_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.case_id, sizeof r.case_id, "run(%s)", what);
    snprintf(r.op, sizeof r.op, "(run)");
    snprintf(r.check, sizeof r.check, "%s", what);
    snprintf(r.backend, sizeof r.backend, "cpu");
    r.dtype = KV_F32;
    r.status = KV_RESULT_ERROR;
    r.max_ulps = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r.message, sizeof r.message, fmt, ap);
    va_end(ap);
    return kv_result_list_push(out, &r);
}
