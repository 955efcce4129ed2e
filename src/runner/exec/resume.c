/* --resume behind runner/exec/resume.h. */
#include "runner/exec/resume.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/report/merge.h"

static char *kv_resume_path(const char *dir, const char *name) {
    const size_t len = strlen(dir) + strlen(name) + 2;
    char *p = malloc(len);
    if (p != NULL) snprintf(p, len, "%s/%s", dir, name);
    return p;
}

kv_status kv_resume_check(const char *dir, const kv_report_meta *now) {
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
    FILE *rows = st == KV_OK ? fopen(rp, "r") : NULL;
    if (st == KV_OK && rows == NULL)
        st = kv_error(KV_ERR_INVALID_ARG, "--resume: cannot read '%s': %s", rp, strerror(errno));
    if (rows != NULL) fclose(rows);
    free(was);
    free(mp);
    free(rp);
    return st;
}

