/* --resume behind runner/exec/resume.h. */
#include "runner/exec/resume.h"

#include <stdlib.h>
#include <string.h>

#include "runner/report/merge.h"

static char *kv_resume_path(const char *dir, const char *name) {
    const size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p != NULL) snprintf(p, len, "%s/%s", dir, name);
    return p;
}

kv_status kv_resume_load(const char *dir, const kv_report_meta *now, kv_result_list *prior) {
    char *mp = kv_resume_path(dir, KV_REPORT_META), *rp = kv_resume_path(dir, KV_REPORT_JSONL);
    kv_report_meta *was = malloc(sizeof *was);
    kv_status st = KV_OK;
    if (mp == NULL || rp == NULL || was == NULL) st = kv_error(KV_ERR_OOM, "--resume: out of memory");
    if (st == KV_OK && kv_merge_read_meta(mp, was, NULL) != KV_OK)
        st = kv_error(KV_ERR_INVALID_ARG, "--resume: %s: no run to resume there (%s)", dir, kv_last_error_message());
    if (st == KV_OK && !was->incomplete)
        st = kv_error(KV_ERR_INVALID_ARG, "--resume: %s holds a complete run: nothing to resume (run without --resume)",
                      dir);
    if (st == KV_OK && was->seed != now->seed)
        st = kv_error(KV_ERR_INVALID_ARG, "--resume: %s is another run: seed %llu there, %llu now", dir,
                      (unsigned long long)was->seed, (unsigned long long)now->seed);
    if (st == KV_OK) {
        const kv_report_fingerprint *a = &was->fingerprint, *b = &now->fingerprint;
        const struct {
            const char *name, *x, *y;
        } fields[] = {
            { "version", a->version, b->version },   { "cases", a->cases, b->cases },
            { "options", a->options, b->options },   { "gates", a->gates, b->gates },
            { "backends", a->backends, b->backends }, { "env", a->env, b->env },
        };
        for (size_t k = 0; st == KV_OK && k < sizeof fields / sizeof fields[0]; k++)
            if (strcmp(fields[k].x, fields[k].y) != 0)
                st = kv_error(KV_ERR_INVALID_ARG, "--resume: %s is another run: it differs in the %s: '%s' there, '%s' now",
                              dir, fields[k].name, fields[k].x, fields[k].y);
    }
    if (st == KV_OK && was->shard_n != now->shard_n)
        st = kv_error(KV_ERR_INVALID_ARG, "--resume: %s is another run: shard %d/%d there, %d/%d now", dir,
                      was->shard_k, was->shard_n, now->shard_k, now->shard_n);
    if (st == KV_OK && kv_report_read_partial(rp, prior, NULL) != KV_OK)
        st = kv_error(KV_ERR_INVALID_ARG, "--resume: %s", kv_last_error_message());
    free(was);
    free(mp);
    free(rp);
    return st;
}

/* prior's rows sorted by (case ID, position): a case's rows stay in order. */
static const kv_result_list *kv_sort_rows;
static int kv_cmp_rows(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    const int c = strcmp(kv_sort_rows->items[x].case_id, kv_sort_rows->items[y].case_id);
    return c != 0 ? c : (x > y) - (x < y);
}

static int *kv_rows_sorted(const kv_result_list *rows) {
    int *order = malloc((size_t)(rows->n > 0 ? rows->n : 1) * sizeof *order);
    if (order == NULL) return NULL;
    for (int i = 0; i < rows->n; i++) order[i] = i;
    kv_sort_rows = rows;
    qsort(order, (size_t)rows->n, sizeof *order, kv_cmp_rows);
    kv_sort_rows = NULL;
    return order;
}

/* The first position in `order` of a row of case `id`, -1 when none. */
static int kv_rows_find(const kv_result_list *rows, const int *order, const char *id) {
    int lo = 0, hi = rows->n;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (strcmp(rows->items[order[mid]].case_id, id) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < rows->n && strcmp(rows->items[order[lo]].case_id, id) == 0 ? lo : -1;
}

kv_status kv_resume_split(const kv_case *const *sel, int nsel, const kv_result_list *prior, const kv_case ***todo,
                          int *ntodo, int *nresumed) {
    *todo = malloc((size_t)(nsel > 0 ? nsel : 1) * sizeof **todo);
    int *order = kv_rows_sorted(prior);
    *ntodo = *nresumed = 0;
    if (*todo == NULL || order == NULL) {
        free(order);
        return kv_error(KV_ERR_OOM, "--resume: out of memory");
    }
    for (int i = 0; i < nsel; i++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(sel[i], id, sizeof id);
        if (kv_rows_find(prior, order, id) >= 0) (*nresumed)++;
        else (*todo)[(*ntodo)++] = sel[i];
    }
    free(order);
    return KV_OK;
}

kv_status kv_resume_join(const kv_case *const *sel, int nsel, const kv_result_list *prior,
                         const kv_result_list *fresh, kv_result_list *out) {
    int *order = kv_rows_sorted(prior);
    if (order == NULL) return kv_error(KV_ERR_OOM, "--resume: out of memory");
    kv_status st = KV_OK;
    int at = 0; /* the next row of fresh */
    for (int i = 0; st == KV_OK && i < nsel; i++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(sel[i], id, sizeof id);
        int k = kv_rows_find(prior, order, id);
        if (k >= 0) {
            for (; st == KV_OK && k < prior->n && strcmp(prior->items[order[k]].case_id, id) == 0; k++)
                st = kv_result_list_push(out, &prior->items[order[k]]);
            continue;
        }
        for (; st == KV_OK && at < fresh->n && strcmp(fresh->items[at].case_id, id) == 0; at++)
            st = kv_result_list_push(out, &fresh->items[at]);
    }
    free(order);
    return st;
}
