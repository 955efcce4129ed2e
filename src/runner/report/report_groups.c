/* Failing rows grouped by (op, check, backend) (report_groups.h). */
#include "runner/report/report_groups.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_report_layout_of(const char *id, char *buf, int cap) {
    const char *p = strstr(id, "layout=");
    while (p != NULL && p > id && p[-1] != ',' && p[-1] != '(') p = strstr(p + 1, "layout=");
    if (p == NULL) {
        snprintf(buf, (size_t)cap, "c");
        return;
    }
    p += strlen("layout=");
    /* Layout values hold no comma: the next one ends it. */
    const size_t n = strcspn(p, ",)");
    snprintf(buf, (size_t)cap, "%.*s", (int)n, p);
}

static void fold(char vals[][KV_GROUP_VALUE_MAX], int *n, int *more, const char *v) {
    for (int i = 0; i < *n; i++)
        if (strcmp(vals[i], v) == 0) return;
    if (*n < KV_GROUP_VALUES) snprintf(vals[(*n)++], KV_GROUP_VALUE_MAX, "%s", v);
    else (*more)++;
}

static bool same_group(const kv_check_result *a, const kv_check_result *b) {
    return strcmp(a->op, b->op) == 0 && strcmp(a->check, b->check) == 0 && strcmp(a->backend, b->backend) == 0;
}

static int group_cmp(const void *pa, const void *pb) {
    const kv_check_result *a = *(const kv_check_result *const *)pa, *b = *(const kv_check_result *const *)pb;
    int c = strcmp(a->op, b->op);
    if (c == 0) c = strcmp(a->check, b->check);
    if (c == 0) c = strcmp(a->backend, b->backend);
    return c;
}

kv_status kv_report_groups_of(const kv_result_list *rows, int cap, kv_report_groups *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < rows->n; i++) out->nbad += kv_result_status_is_bad(rows->items[i].status);
    if (out->nbad == 0) return KV_OK;
    out->items = calloc((size_t)(cap > 0 ? cap : 1), sizeof *out->items);
    const kv_check_result **rest = malloc((size_t)out->nbad * sizeof *rest);
    if (out->items == NULL || rest == NULL) {
        free(rest);
        kv_report_groups_free(out);
        return kv_error(KV_ERR_OOM, "report: out of memory");
    }
    int64_t ordinal = 0;
    /* The rows of groups past `cap` are set aside; their groups are
     * counted after, by sorting (a look-up per row would be quadratic in
     * a run with thousands of groups). */
    for (int i = 0; i < rows->n; i++) {
        const kv_check_result *r = &rows->items[i];
        if (!kv_result_status_is_bad(r->status)) continue;
        const int64_t o = ordinal++;
        int k = 0;
        while (k < out->n && !same_group(out->items[k].first, r)) k++;
        if (k == out->n) {
            if (out->n == cap) {
                rest[out->more_rows++] = r;
                continue;
            }
            out->items[out->n].first = r;
            out->items[out->n++].first_ordinal = o;
        }
        kv_report_group *g = &out->items[k];
        g->rows++;
        g->by_status[r->status]++;
        char lay[KV_GROUP_VALUE_MAX];
        kv_report_layout_of(r->case_id, lay, sizeof lay);
        fold(g->layouts, &g->nlayouts, &g->more_layouts, lay);
        fold(g->dtypes, &g->ndtypes, &g->more_dtypes, kv_dtype_name(r->dtype));
    }
    qsort(rest, (size_t)out->more_rows, sizeof *rest, group_cmp);
    for (int64_t i = 0; i < out->more_rows; i++) out->more_groups += i == 0 || !same_group(rest[i - 1], rest[i]);
    free(rest);
    return KV_OK;
}

void kv_report_groups_free(kv_report_groups *gs) {
    free(gs->items);
    memset(gs, 0, sizeof *gs);
}

kv_result_status kv_report_group_worst(const kv_report_group *g) {
    kv_result_status worst = g->first->status;
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        if (g->by_status[s] > 0 && kv_result_status_severity((kv_result_status)s) > kv_result_status_severity(worst))
            worst = (kv_result_status)s;
    return worst;
}
