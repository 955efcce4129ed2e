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
 *   Bazel test sharding           TEST_SHARD_INDEX (0-based),
 *   (`shard_count = N`)           TEST_TOTAL_SHARDS; kvrun touches
 *                                 TEST_SHARD_STATUS_FILE when it is set,
 *                                 which tells Bazel the test shards
 *   Slurm job array               SLURM_ARRAY_TASK_ID, counted from
 *   (`sbatch --array=A-B[:S]`)    SLURM_ARRAY_TASK_MIN in steps of
 *                                 SLURM_ARRAY_TASK_STEP (default 1),
 *                                 SLURM_ARRAY_TASK_COUNT tasks; an array
 *                                 that is not one range (--array=1,4,9:
 *                                 MAX is not MIN + (COUNT-1) x STEP) is
 *                                 refused, its IDs cannot say K
 *   anything else (GitHub Actions KV_SHARD_INDEX (1-based) with
 *   matrices, a shell loop)       --shard=auto/N or KV_SHARD_TOTAL
 * Every value is checked: empty, not a whole number, or out of range is
 * an error naming the variable (kvrun exits 2). */
#include "runner/exec/driver.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    const char *base_var, *step_var;          /* when set: the base, and the step between indexes */
    const char *status_var;                   /* when set: a file to touch (Bazel) */
} engine;

static const engine kv_engines[] = {
    { "GitLab CI", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1, NULL, NULL, NULL },
    { "Buildkite", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0, NULL, NULL, NULL },
    { "Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", NULL, 0, NULL, NULL, NULL },
    { "Bazel", "TEST_SHARD_INDEX", "TEST_TOTAL_SHARDS", 0, NULL, NULL, "TEST_SHARD_STATUS_FILE" },
    { "Slurm job array", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", 0, "SLURM_ARRAY_TASK_MIN",
      "SLURM_ARRAY_TASK_STEP", NULL },
    { "KV_SHARD_INDEX", "KV_SHARD_INDEX", NULL, 1, NULL, NULL, NULL },
};

/* Slurm: the array's first index and step, checked against its last
 * index (when given) so that ID -> K is the array's own order. */
static kv_status engine_base_step(const engine *en, int total, int *base, int *step) {
    const long max = 1000000000;
    bool set = false;
    *base = en->base;
    *step = 1;
    if (en->base_var == NULL) return KV_OK;
    kv_status st = env_int(en->base_var, 0, max, base, &set);
    if (st != KV_OK) return st;
    if (!set) return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s is set but %s is not (%s)", en->index_var,
                              en->base_var, en->name);
    if ((st = env_int(en->step_var, 1, max, step, &set)) != KV_OK) return st;
    int last = 0;
    if ((st = env_int("SLURM_ARRAY_TASK_MAX", 0, max, &last, &set)) != KV_OK) return st;
    if (set && (long)last != (long)*base + (long)(total - 1) * *step)
        return kv_error(KV_ERR_INVALID_ARG,
                        "--shard=auto: the Slurm array is not one range: SLURM_ARRAY_TASK_MIN=%d, _MAX=%d, _STEP=%d "
                        "and _COUNT=%d disagree (submit --array=A-B or A-B:S)",
                        *base, last, *step, total);
    return KV_OK;
}

/* Bazel's sharding protocol: the test touches this file to say it shards
 * (else Bazel runs every case in every shard and warns). */
static kv_status engine_touch_status(const engine *en) {
    if (en->status_var == NULL) return KV_OK;
    const char *path = getenv(en->status_var);
    if (path == NULL) return KV_OK;
    if (path[0] == '\0') return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s is empty (%s)", en->status_var, en->name);
    const int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        const int e = errno;
        return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: cannot touch %s='%s': %s (%s)", en->status_var, path,
                        strerror(e), en->name);
    }
    close(fd);
    return KV_OK;
}

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
        int base = en->base, step = 1;
        if ((st = engine_base_step(en, total, &base, &step)) != KV_OK) return st;
        if ((index - base) % step != 0)
            return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s=%d is not %d plus a multiple of %s=%d (%s)",
                            en->index_var, index, base, en->step_var, step, en->name);
        const int kk = index < base ? 0 : (index - base) / step + 1;
        if (kk < 1 || kk > total)
            return kv_error(KV_ERR_INVALID_ARG, "--shard=auto: %s=%d is outside 1..%d shards (%s counts from %d)",
                            en->index_var, index, total, en->name, base);
        if ((st = engine_touch_status(en)) != KV_OK) return st;
        *k = kk;
        *n = total;
        snprintf(source, cap, "%s: %s=%d", en->name, en->index_var, index);
        return KV_OK;
    }
    return kv_error(KV_ERR_INVALID_ARG,
                    "--shard=auto: no shard index in the environment (looked for CI_NODE_INDEX, "
                    "BUILDKITE_PARALLEL_JOB, JOB_COMPLETION_INDEX, TEST_SHARD_INDEX, SLURM_ARRAY_TASK_ID, "
                    "KV_SHARD_INDEX)");
}
