/* The previous run's failed cases, read back from its results.jsonl. */
#include "runner/exec/last_failed.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runner/report/jsonl_file.h"
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
    char *path = kv_jsonl_path_in(report_dir);
    if (path == NULL) return kv_error(KV_ERR_OOM, "--last-failed: out of memory");
    if (access(path, R_OK) != 0) {
        const int e = errno;
        kv_status st = !required && e == ENOENT ? KV_OK
                       : kv_error(KV_ERR_INVALID_ARG,
                                  "--last-failed: cannot read the previous run's '%s': %s (run once without it first)",
                                  path, strerror(e));
        free(path);
        return st;
    }
    kv_jsonl_reader rd;
    kv_status st = kv_jsonl_open(&rd, path, "--last-failed");
    if (st != KV_OK) {
        free(path);
        return st;
    }
    kv_check_result *r = malloc(sizeof *r);
    int cap = 0;
    int64_t len = 0;
    if (r == NULL) st = kv_error(KV_ERR_OOM, "--last-failed: out of memory");
    while (st == KV_OK && (len = kv_jsonl_next(&rd)) >= 0) {
        if (rd.cut) break; /* cut by a kill */
        char why[512];
        if (kv_merge_parse_line(rd.line, r, why, sizeof why) != 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "--last-failed: %s:%lld: %s", path, (long long)rd.lineno, why);
            break;
        }
        out->rows++;
        if (kv_result_status_is_failure(r->status)) st = kv_id_set_push(out, &cap, r->case_id);
    }
    if (st == KV_OK && len == -2) st = kv_last_error();
    free(r);
    free(path);
    kv_jsonl_close(&rd);
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
