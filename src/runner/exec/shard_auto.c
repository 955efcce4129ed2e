/* --shard=auto: K/N from the environment of the CI engine running this
 * shard, so a CI file need not compute it (README "Sharding on CI").
 * Looked for in this order; the first engine whose index variable is set
 * wins:
 *   GitLab CI `parallel: N`       CI_NODE_INDEX (1-based), CI_NODE_TOTAL
 *   Buildkite `parallelism: N`    BUILDKITE_PARALLEL_JOB (0-based),
 *                                 BUILDKITE_PARALLEL_JOB_COUNT
 *   Kubernetes Indexed Job        JOB_COMPLETION_INDEX (0-based); the total
 *                                 is not in the pod's environment: from
 *                                 --shard=auto/N or KV_SHARD_TOTAL
 *   anything else (GitHub Actions KV_SHARD_INDEX (1-based) with
 *   matrices, a shell loop)       --shard=auto/N or KV_SHARD_TOTAL
 * Every value is checked: empty, not a whole number, or out of range is
 * an error naming the variable (kvrun exits 2). */
#include "runner/exec/driver.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kv_status env_int(const char *var, long lo, long hi, int *out, bool *set) {
    const char *v = getenv(var);
    *set = v != NULL;
    if (v == NULL) return KV_OK;
    char *end = NULL;
    errno = 0;
    const long x = strtol(v, &end, 10);
    if (v[0] == '\0' || end == v || *end != '\0' || errno != 0 || x < lo || x > hi)
        return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s='%s': expected a whole number from %ld to %ld", var, v, lo,
                        hi);
    *out = (int)x;
    return KV_OK;
}

typedef struct engine {
    const char *name, *index_var, *total_var; /* total_var NULL: the total is passed */
    int base;                                 /* the index of the first shard */
} engine;

static const engine kv_engines[] = {
    { "GitLab CI", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1 },
    { "Buildkite", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0 },
    { "Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", NULL, 0 },
    { "KV_SHARD_INDEX", "KV_SHARD_INDEX", NULL, 1 },
};

kv_status kv_shard_auto(const char *spec, int *k, int *n, char *source, size_t cap) {
    const long max = 1000000;
    int given_total = 0;
    if (strcmp(spec, "auto") != 0) {
        const char *slash = strchr(spec, '/');
        char *end = NULL;
        errno = 0;
        const long t = slash ? strtol(slash + 1, &end, 10) : 0;
        if (strncmp(spec, "auto/", 5) != 0 || slash[1] == '\0' || *end != '\0' || errno != 0 || t < 1 || t > max)
            return kv_error(KV_ERR_INVALID_ARG, "--shard=%s: expected K/N, auto or auto/N (N a whole number >= 1)", spec);
        given_total = (int)t;
    }
    for (size_t e = 0; e < sizeof kv_engines / sizeof kv_engines[0]; e++) {
        const engine *en = &kv_engines[e];
        int index = 0, total = 0;
        bool set = false, tset = false;
        kv_status st = env_int(en->index_var, 0, max, &index, &set);
        if (st != KV_OK) return st;
        if (!set) continue;
        if (en->total_var != NULL) {
            if ((st = env_int(en->total_var, 1, max, &total, &tset)) != KV_OK) return st;
            if (!tset)
                return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s is set but %s is not (%s)", en->index_var,
                                en->total_var, en->name);
            if (given_total != 0 && given_total != total)
                return kv_error(KV_ERR_INVALID_ARG, "--shard=%s: but %s=%d (%s)", spec, en->total_var, total, en->name);
        } else if (given_total != 0) {
            total = given_total;
        } else {
            if ((st = env_int("KV_SHARD_TOTAL", 1, max, &total, &tset)) != KV_OK) return st;
            if (!tset)
                return kv_error(KV_ERR_INVALID_ARG,
                                "--shard=auto: %s=%d but no total: give --shard=auto/N or KV_SHARD_TOTAL=N (%s)",
                                en->index_var, index, en->name);
        }
        const int kk = index - en->base + 1;
        if (kk < 1 || kk > total)
            return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s=%d is outside 1..%d shards (%s counts from %d)",
                            en->index_var, index, total, en->name, en->base);
        *k = kk;
        *n = total;
        snprintf(source, cap, "%s: %s=%d", en->name, en->index_var, index);
        return KV_OK;
    }
    return kv_error(KV_ERR_INVALID_ARG,
                    "--shard=auto: no shard index in the environment (looked for CI_NODE_INDEX, "
                    "BUILDKITE_PARALLEL_JOB, JOB_COMPLETION_INDEX, KV_SHARD_INDEX)");
}
