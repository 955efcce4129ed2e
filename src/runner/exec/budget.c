/* The rows of cases a limit left unrun, behind runner/exec/budget.h. */
#include "runner/exec/budget.h"

#include <string.h>

#include "runner/exec/isolate.h"

kv_status kv_budget_fill_not_run(const kv_case *const *cases, int n, kv_result_list *rows, kv_result_status status,
                                 const char *message) {
    kv_result_list out = { 0 };
    kv_status st = KV_OK;
    int at = 0;
    for (int i = 0; st == KV_OK && i < n; i++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(cases[i], id, sizeof id);
        const int first = at;
        for (; st == KV_OK && at < rows->n && strcmp(rows->items[at].case_id, id) == 0; at++)
            st = kv_result_list_push(&out, &rows->items[at]);
        if (st != KV_OK || at > first) continue;
        kv_check_result r;
        kv_isolate_case_row(&r, cases[i], status, 0, "%s", message);
        st = kv_result_list_push(&out, &r);
    }
    /* Rows of no selected case (none expected) are kept, at the end. */
    for (; st == KV_OK && at < rows->n; at++) st = kv_result_list_push(&out, &rows->items[at]);
    if (st != KV_OK) {
        kv_result_list_free(&out);
        return st;
    }
    kv_result_list_free(rows);
    *rows = out;
    return KV_OK;
}
