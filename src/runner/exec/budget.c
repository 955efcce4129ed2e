/* The rows of cases a limit left unrun, behind runner/exec/budget.h. */
#include "runner/exec/budget.h"

#include <string.h>

#include "runner/exec/isolate.h"

kv_status kv_budget_fill_not_run(const kv_case *const *cases, int n, kv_report_stream *s, kv_result_status status,
                                 const char *message, int *filled) {
    *filled = 0;
    kv_status st = KV_OK;
    for (int i = 0; st == KV_OK && i < n; i++) {
        if (kv_report_stream_has(s, i)) continue;
        kv_result_list one = { 0 };
        kv_check_result r;
        kv_isolate_case_row(&r, cases[i], status, 0, "%s", message);
        st = kv_result_list_push(&one, &r);
        /* A failed append keeps the row in memory: still reported. */
        if (st == KV_OK && kv_report_stream_case(s, i, &one) != KV_OK && !kv_report_stream_has(s, i))
            st = kv_last_error();
        kv_result_list_free(&one);
        if (st == KV_OK) (*filled)++;
    }
    return st;
}
