/* The report folder as a whole from a list of rows: the same row-by-row
 * build kvrun uses (report_build.c). */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <stdio.h>
#include <stdlib.h>

kv_status kv_report_write_all(const kv_result_list *results, const kv_report_meta *meta,
                              const char *dir) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_all: argument 'results': is NULL");
    kv_report_build *b = kv_report_build_begin(dir, meta);
    if (b == NULL) return kv_last_error();
    kv_status st = KV_OK;
    for (int i = 0; i < results->n && st == KV_OK; i++) st = kv_report_build_add(b, &results->items[i]);
    if (st == KV_OK) st = kv_report_build_finish(b, meta);
    kv_report_build_free(b);
    return st;
}
