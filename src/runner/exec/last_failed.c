/* The previous run's failed cases, read back from its results.jsonl. */
#include "runner/exec/last_failed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/merge.h"

static int kv_str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }


static kv_status kv_id_set_push(kv_id_set *s, int *cap, const char *id) {
    if (s->n > 0 && strcmp(s->ids[s->n - 1], id) == 0) return KV_OK; /* a case's rows are adjacent */
    if (s->n == *cap) {
        const int nc = *cap ? *cap * 2 : 64;
        char **ids = realloc(s->ids, (size_t)nc * sizeof *ids);
        if (ids == NULL) return kv_error(KV_ERR_OOM, "--last-failed: out of memory");
        s->ids = ids;
        *cap = nc;
    }
    if ((s->ids[s->n] = strdup(id)) == NULL) return kv_error(KV_ERR_OOM, "--last-failed: out of memory");
    s->n++;
    return KV_OK;
}

kv_status kv_last_failed_load(const char *report_dir, bool required, kv_id_set *out) {
    memset(out, 0, sizeof *out);
    char path[4096];
    snprintf(path, sizeof path, "%s/results.jsonl", report_dir);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        const int e = errno;
        if (!required && e == ENOENT) return KV_OK;
        return kv_error(KV_ERR_INVALID_ARG, "--last-failed: cannot read the previous run's '%s': %s (run once without it first)",
                        path, strerror(e));
    }
    kv_check_result *r = malloc(sizeof *r);
    char *line = NULL;
    size_t lcap = 0;
    int cap = 0, lineno = 0;
    kv_status st = r ? KV_OK : kv_error(KV_ERR_OOM, "--last-failed: out of memory");
    ssize_t len;
    while (st == KV_OK && (len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (line[len - 1] != '\n') break; /* cut by a kill */
        line[len - 1] = '\0';
        char why[512];
        if (kv_merge_parse_line(line, r, why, sizeof why) != 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "--last-failed: %s:%d: %s", path, lineno, why);
            break;
        }
        out->rows++;
        if (kv_result_status_is_failure(r->status)) st = kv_id_set_push(out, &cap, r->case_id);
    }
    free(line);
    free(r);
    fclose(f);
    if (st != KV_OK) {
        kv_id_set_free(out);
        return st;
    }
    qsort(out->ids, (size_t)out->n, sizeof *out->ids, kv_str_cmp);
    int m = 0;
    for (int i = 0; i < out->n; i++) {
        if (m > 0 && strcmp(out->ids[m - 1], out->ids[i]) == 0) {
            free(out->ids[i]);
            continue;
        }
        out->ids[m++] = out->ids[i];
    }
    out->n = m;
    return KV_OK;
}

bool kv_id_set_has(const kv_id_set *s, const char *id) {
    return s->n > 0 && bsearch(&id, s->ids, (size_t)s->n, sizeof *s->ids, kv_str_cmp) != NULL;
}

void kv_id_set_free(kv_id_set *s) {
    for (int i = 0; i < s->n; i++) free(s->ids[i]);
    free(s->ids);
    memset(s, 0, sizeof *s);
}
