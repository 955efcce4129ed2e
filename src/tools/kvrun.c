/* kvrun, the case runner's command line (DESIGN.md section 6): the
 * runner's own flags, the case grammar for everything else, and
 * runner/driver.h for the run itself.
 * Exit 0 when nothing failed, errored, crashed or timed out; 1 otherwise;
 * 2 on a usage or configuration error (a bad flag, case line or KV_*
 * variable, which kv_init reports naming it). */
#include "kv/kv.h"
#include "kv/backend.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/op_ids.h"
#include "runner/runner.h"
#include "runner/check/tol_backend.h"
#include "runner/check/row_select.h"
#include "runner/case/suggest.h"
#include "runner/report/compare_runs.h"

/* The --help text: src/tools/kvrun_help.txt, made a C string by
 * src/tools/help_to_c.sh (build/gen/kvrun_help.c). The same file makes the
 * kvrun(1) man page and docs/kvrun.md's option list, so the three agree;
 * a default quoted there (timeout, report and golden folders, perf
 * repetitions) is restated from driver.h and perf.h: change both. */
extern const char kv_kvrun_help[];

static void usage(FILE *f) { fputs(kv_kvrun_help, f); }

/* Loads the backend plugins (kv_init never does): one stderr line per
 * plugin skipped, and the run goes on. */
static void load_backends(const char *const *paths, int n) {
    if (kv_backend_load_default(paths, n, stderr) < 0) fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
}

/* Appends `word` to buf as one shell word: as is when every character is
 * literal to a POSIX shell, else in single quotes ('\'' for a quote). */
static void put_shell_word(char *buf, size_t cap, const char *word) {
    size_t n = strlen(buf);
    bool plain = word[0] != '\0';
    for (const char *p = word; *p && plain; p++)
        plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                strchr("._,:=+-/@%", *p) != NULL;
    if (n > 0 && n + 1 < cap) buf[n++] = ' ';
    if (plain) {
        snprintf(buf + n, cap - n, "%s", word);
        return;
    }
    if (n + 1 < cap) buf[n++] = '\'';
    for (const char *p = word; *p && n + 5 < cap; p++) {
        if (*p == '\'') {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *p;
        }
    }
    if (n + 1 < cap) buf[n++] = '\'';
    buf[n < cap ? n : cap - 1] = '\0';
}

/* A KV_* variable at its documented default changes nothing: left out of
 * repro lines so they stay short. */
static bool env_is_default(const char *name, const char *value) {
    static const char *const defaults[][2] = {
        { "KV_NO_REDISPATCH", "0" }, { "KV_REDISPATCH_GATE", "exact" }, { "KV_NO_DISPATCH_CACHE", "0" },
        { "KV_ACCEL_DISABLE", "" },  { "KV_PERFDISPATCH_LOG", "0" },    { "KV_ACCEL_TARGET", "auto" },
    };
    for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++)
        if (strcmp(name, defaults[i][0]) == 0 && strcmp(value, defaults[i][1]) == 0) return true;
    return false;
}

/* The start of every repro line (runner/case/case.h): the KV_* settings
 * that differ from their defaults, the program as invoked, every plugin
 * this run tried to load, the accel target and the fastpath gates. The
 * plugins are spelled out, so KV_BACKEND_PATH is not needed; the accel
 * target is spelled as the flag. */
static void set_repro_prefix(unsigned fastpath_gates, const char *argv0) {
    extern char **environ;
    char buf[KV_CASE_REPRO_MAX / 2];
    char word[600]; /* "--backend=" and a record's path */
    buf[0] = '\0';
    for (char **e = environ; *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "KV_", 3) != 0 || eq == NULL) continue;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        if (strcmp(name, "KV_BACKEND_PATH") == 0 || strcmp(name, "KV_ACCEL_TARGET") == 0 ||
            env_is_default(name, eq + 1))
            continue;
        put_shell_word(buf, sizeof buf, *e);
    }
    put_shell_word(buf, sizeof buf, argv0);
    /* A plugin under the working directory is named relative to it: the
     * line is pasted where the run ran (CI artifacts, another checkout),
     * and the build machine's absolute paths mean nothing there. */
    char cwd[4096];
    size_t ncwd = getcwd(cwd, sizeof cwd) != NULL ? strlen(cwd) : 0;
    if (ncwd == 1) ncwd = 0; /* "/": the path stays absolute */
    for (int i = 0; i < kv_backend_count(); i++) {
        const char *path = kv_backend_at(i)->path;
        if (ncwd > 0 && strncmp(path, cwd, ncwd) == 0 && path[ncwd] == '/') path += ncwd + 1;
        snprintf(word, sizeof word, "--backend=%s", path);
        put_shell_word(buf, sizeof buf, word);
    }
    if (kv_backend_count() == 0) put_shell_word(buf, sizeof buf, "--backend="); /* none, not the default folder */
    char target[64];
    kv_accel_requested_target(target, sizeof target);
    if (strcmp(target, "auto") != 0) {
        snprintf(word, sizeof word, "--accel-target=%s", target);
        put_shell_word(buf, sizeof buf, word);
    }
    if (fastpath_gates != 0) {
        snprintf(word, sizeof word, "--gate=%s", kv_fastpath_gates_name(fastpath_gates));
        put_shell_word(buf, sizeof buf, word);
    }
    kv_case_repro_set_prefix(buf);
}

static int list_ops(const char *const *backends, int nbackends) {
    if (kv_init() != KV_OK) {
        /* A bad KV_* setting (the message names it): a configuration error. */
        fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
        return 2;
    }
    load_backends(backends, nbackends);
    int n = kv_op_count();
    for (int i = 0; i < n; i++) {
        const kv_op *op = kv_op_at(i);
        if (!op) {
            fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
            return 1;
        }
        printf("%s", kv_op_name(op));
        int nkeys = 0;
        for (int k = 0; k < KV_KEY_COUNT; k++) {
            if (kv_op_entry_kind(op, (kv_key)k) != KV_ENTRY_KERNEL) continue;
            printf("%s%s", nkeys++ ? "," : "\t", kv_key_name((kv_key)k));
        }
        /* A tab-separated second column always exists, so the output
         * splits into two fields even for an op with no kernel. */
        printf("%s\n", nkeys ? "" : "\t-");
    }
    return 0;
}

/* ---- the runner's own flags ---- */

typedef enum kv_flag_kind {
    KV_FLAG_BOOL,    /* --name */
    KV_FLAG_VALUE,   /* --name=value */
    KV_FLAG_EITHER   /* --name or --name=value (--compare) */
} kv_flag_kind;

typedef struct kv_flag {
    const char *name;
    kv_flag_kind kind;
    bool repeatable;
} kv_flag;

static const kv_flag kv_flags[] = {
    { "list", KV_FLAG_BOOL, false },       { "filter", KV_FLAG_VALUE, true },
    { "jobs", KV_FLAG_VALUE, false },      { "shard", KV_FLAG_VALUE, false },
    { "timeout", KV_FLAG_VALUE, false },   { "isolate", KV_FLAG_VALUE, false },
    { "report-dir", KV_FLAG_VALUE, false }, { "golden-dir", KV_FLAG_VALUE, false },
    { "regen-golden", KV_FLAG_BOOL, false }, { "dump", KV_FLAG_VALUE, false },
    { "baseline", KV_FLAG_VALUE, false },  { "merge", KV_FLAG_BOOL, false },
    { "help", KV_FLAG_BOOL, false },       { "version", KV_FLAG_BOOL, false },
    { "list-ops", KV_FLAG_BOOL, false },   { "backend", KV_FLAG_VALUE, true },
    { "gate", KV_FLAG_VALUE, false },      { "perf-reps", KV_FLAG_VALUE, false },
    { "perf-interleave", KV_FLAG_BOOL, false },
    { "accel-target", KV_FLAG_VALUE, false }, { "require-backend", KV_FLAG_VALUE, true },
    { "golden", KV_FLAG_VALUE, false },    { "retry", KV_FLAG_VALUE, false },
    { "flaky", KV_FLAG_VALUE, false },    { "verbose", KV_FLAG_BOOL, false },
    { "quiet", KV_FLAG_BOOL, false },     { "resume", KV_FLAG_BOOL, false },
    { "deadline", KV_FLAG_VALUE, false },  { "max-failures", KV_FLAG_VALUE, false },
    { "compare", KV_FLAG_EITHER, false },  { "require-identical", KV_FLAG_VALUE, false },
    { "perf-threshold", KV_FLAG_VALUE, false },
    { "perf-metric", KV_FLAG_VALUE, false },
    { "filter-out", KV_FLAG_VALUE, true }, { "last-failed", KV_FLAG_BOOL, false },
    { "failed-first", KV_FLAG_BOOL, false },
    { "require-support", KV_FLAG_BOOL, false },
    { "tolerances", KV_FLAG_VALUE, false },
    { "only-backend", KV_FLAG_VALUE, true }, { "only-check", KV_FLAG_VALUE, true },
    { "gzip-results", KV_FLAG_BOOL, false },
};
#define KV_NFLAGS ((int)(sizeof kv_flags / sizeof kv_flags[0]))

/* The flag `arg` names ("--jobs=4", "--jobs" and "--list" all name one),
 * or -1 when it is no runner flag. */
static int kv_flag_of(const char *arg) {
    if (strncmp(arg, "--", 2) != 0) return -1;
    const char *name = arg + 2;
    const size_t len = strcspn(name, "=");
    for (int i = 0; i < KV_NFLAGS; i++) {
        if (strlen(kv_flags[i].name) == len && strncmp(kv_flags[i].name, name, len) == 0) return i;
    }
    return -1;
}

static bool kv_is_positional(const char *arg) { return arg[0] != '-' || arg[1] == '\0'; }

/* --mode= is also a case option (mode=grad, ...); exactly --mode=perf is
 * the runner's (no case mode is named perf, and the grammar says so). */
static bool kv_is_perf_mode(const char *arg) { return strcmp(arg, "--mode=perf") == 0; }

/* What the grammar must not see: runner flags and positional paths. */
static bool kv_runner_claims(const char *arg, void *ctx) {
    (void)ctx;
    return kv_is_positional(arg) || kv_flag_of(arg) >= 0 || kv_is_perf_mode(arg) || strcmp(arg, "-h") == 0 ||
           strcmp(arg, "-v") == 0 || strcmp(arg, "-q") == 0;
}

typedef struct kv_cli {
    kv_driver_options o;
    const char **filters;
    int nfilters;
    const char **filters_out;    /* --filter-out */
    int nfilters_out;
    const char **paths;
    int npaths;
    const char **backends;
    int nbackends;
    char *require_text[16];      /* --require-backend values, split in place */
    const char *require[64];
    int nrequire, nrequire_text;
    bool merge, help, version, list_ops;
    bool compare_two;            /* --compare OLD NEW */
    const char *compare_old;     /* --compare=OLD */
    kv_runcmp_policy cmp;
    bool perf;                   /* --mode=perf */
    kv_perf_options perf_o;
    int seen[KV_NFLAGS];
    bool case_options;
    const char *tolerances;      /* --tolerances=FILE */
} kv_cli;

static int kv_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int kv_usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kvrun: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (kvrun --help lists the flags)\n", stderr);
    va_end(ap);
    return 2;
}

/* --require-backend=NAME[,NAME...]: names, spaces around them ignored. */
static int kv_cli_require(kv_cli *c, const char *v) {
    if (c->nrequire_text >= (int)(sizeof c->require_text / sizeof c->require_text[0])) return -1;
    char *copy = strdup(v);
    if (copy == NULL) return -1;
    c->require_text[c->nrequire_text++] = copy;
    for (char *tok = strtok(copy, ","); tok != NULL; tok = strtok(NULL, ",")) {
        while (*tok == ' ') tok++;
        size_t n = strlen(tok);
        while (n > 0 && tok[n - 1] == ' ') tok[--n] = '\0';
        if (n == 0 || c->nrequire >= (int)(sizeof c->require / sizeof c->require[0])) return -1;
        c->require[c->nrequire++] = tok;
    }
    return c->nrequire > 0 ? 0 : -1;
}

static int kv_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* The comparison's flags (docs/compare.md). */
static int kv_cmp_flag(kv_cli *c, const char *n, const char *v) {
    char why[512];
    if (strcmp(n, "compare") == 0) {
        if (v == NULL) c->compare_two = true;
        else c->compare_old = v;
    } else if (strcmp(n, "require-identical") == 0) {
        if (kv_runcmp_policy_set_identical(&c->cmp, v, why, (int)sizeof why) != 0) return kv_usage_error("%s", why);
    } else {
        char *end = NULL;
        errno = 0;
        const double t = strtod(v, &end);
        if (errno != 0 || end == v || *end != '\0' || !(t >= 0.0 && t <= 100.0))
            return kv_usage_error("--perf-threshold=%s: must be a fraction from 0 to 100 (0.1: a 10%% slowdown)", v);
        c->cmp.perf_threshold = t;
    }
    return 0;
}

/* kvrun --compare OLD NEW: two finished runs; the files go to NEW unless
 * --report-dir says where. */
static int kv_compare_main(const kv_cli *c) {
    if (c->npaths != 2) return kv_usage_error("--compare needs two report folders: kvrun --compare OLD NEW (%d given)", c->npaths);
    for (int f = 0; f < KV_NFLAGS; f++) {
        const char *n = kv_flags[f].name;
        if (c->seen[f] && strcmp(n, "compare") != 0 && strcmp(n, "report-dir") != 0 &&
            strcmp(n, "require-identical") != 0 && strcmp(n, "perf-threshold") != 0)
            return kv_usage_error("--compare OLD NEW takes only --report-dir, --require-identical and --perf-threshold, not --%s", n);
    }
    if (c->case_options || c->perf) return kv_usage_error("--compare OLD NEW compares finished runs: it takes no case options or --mode=perf (use --compare=OLD with a run)");
    int code = KV_RUNCMP_EXIT_NOT_COMPARABLE;
    const kv_status st =
        kv_runcmp_dirs(c->paths[0], c->paths[1], c->o.report_dir ? c->o.report_dir : c->paths[1], &c->cmp, stdout, &code);
    fflush(stdout);
    if (st != KV_OK) {
        fprintf(stderr, "kvrun: compare: %s\n", kv_last_error_message());
        return KV_RUNCMP_EXIT_NOT_COMPARABLE;
    }
    return code;
}

/* One flag with its value; 0 or the exit code of a usage error. */
static int kv_cli_flag(kv_cli *c, int f, const char *arg) {
    const kv_flag *fl = &kv_flags[f];
    const char *eq = strchr(arg, '=');
    if (fl->kind == KV_FLAG_BOOL && eq != NULL) return kv_usage_error("'%s': --%s takes no value", arg, fl->name);
    if (fl->kind == KV_FLAG_VALUE && (eq == NULL || eq[1] == '\0')) {
        return kv_usage_error("'%s': --%s needs a value: --%s=...", arg, fl->name, fl->name);
    }
    if (c->seen[f]++ && !fl->repeatable) return kv_usage_error("'%s': --%s given twice", arg, fl->name);
    const char *v = eq ? eq + 1 : NULL;
    const char *n = fl->name;
    if (strcmp(n, "list") == 0) {
        c->o.list_only = true;
    } else if (strcmp(n, "filter") == 0) {
        c->filters[c->nfilters++] = v;
    } else if (strcmp(n, "filter-out") == 0) {
        c->filters_out[c->nfilters_out++] = v;
    } else if (strcmp(n, "last-failed") == 0) {
        c->o.last_failed = true;
    } else if (strcmp(n, "failed-first") == 0) {
        c->o.failed_first = true;
    } else if (strcmp(n, "gate") == 0) {
        if (kv_fastpath_gates_parse(v, &c->o.fastpath_gates) != 0) {
            return kv_usage_error("--gate=%s: expected seed, exact or both", v);
        }
    } else if (strcmp(n, "backend") == 0) {
        c->backends[c->nbackends++] = v;
    } else if (strcmp(n, "accel-target") == 0) {
        /* The same as KV_ACCEL_TARGET, so forked workers, the repro line
         * and the library all see one setting; checked by kv_init. */
        if (setenv("KV_ACCEL_TARGET", v, 1) != 0) return kv_usage_error("--accel-target=%s: cannot set it", v);
    } else if (strcmp(n, "require-backend") == 0) {
        if (kv_cli_require(c, v) != 0) return kv_usage_error("--require-backend=%s: expected NAME[,NAME...]", v);
    } else if (strcmp(n, "jobs") == 0) {
        if (kv_parse_int(v, 1, 4096, &c->o.jobs) != 0) {
            return kv_usage_error("--jobs=%s: must be a whole number from 1 to 4096", v);
        }
    } else if (strcmp(n, "shard") == 0 && strncmp(v, "auto", 4) == 0) {
        char source[128];
        if (kv_shard_auto(v, &c->o.shard_k, &c->o.shard_n, source, sizeof source) != KV_OK)
            return kv_usage_error("%s", kv_last_error_message());
        fprintf(stderr, "kvrun: --shard=%s: shard %d/%d (%s)\n", v, c->o.shard_k, c->o.shard_n, source);
    } else if (strcmp(n, "shard") == 0) {
        const char *slash = strchr(v, '/');
        char kbuf[32];
        int k = 0, m = 0;
        if (slash == NULL || slash - v >= (long)sizeof kbuf) {
            return kv_usage_error("--shard=%s: expected K/N, e.g. --shard=1/4", v);
        }
        memcpy(kbuf, v, (size_t)(slash - v));
        kbuf[slash - v] = '\0';
        if (kv_parse_int(kbuf, 1, 1000000, &k) != 0 || kv_parse_int(slash + 1, 1, 1000000, &m) != 0) {
            return kv_usage_error("--shard=%s: expected K/N with whole numbers 1 <= K <= N", v);
        }
        if (k > m) return kv_usage_error("--shard=%s: K (%d) must not exceed N (%d)", v, k, m);
        c->o.shard_k = k;
        c->o.shard_n = m;
    } else if (strcmp(n, "timeout") == 0) {
        char *end;
        errno = 0;
        double t = strtod(v, &end);
        if (end == v || *end != '\0' || errno != 0 || !isfinite(t) || t <= 0 || t > 1e6) {
            return kv_usage_error("--timeout=%s: must be a number of seconds > 0 (at most 1e6)", v);
        }
        c->o.timeout_seconds = t;
    } else if (strcmp(n, "isolate") == 0) {
        if (kv_isolate_mode_parse(v, &c->o.isolate) != 0) {
            return kv_usage_error("--isolate=%s: unknown mode (fork or none)", v);
        }
    } else if (strcmp(n, "report-dir") == 0) {
        c->o.report_dir = v;
    } else if (strcmp(n, "golden-dir") == 0) {
        c->o.golden_dir = v;
    } else if (strcmp(n, "regen-golden") == 0) {
        c->o.regen_golden = true;
    } else if (strcmp(n, "golden") == 0) {
        if (kv_golden_mode_parse(v, &c->o.golden_mode) != 0)
            return kv_usage_error("--golden=%s: expected auto, store or live", v);
    } else if (strcmp(n, "retry") == 0) {
        if (kv_parse_int(v, 0, KV_RETRY_MAX, &c->o.retry) != 0)
            return kv_usage_error("--retry=%s: must be a whole number from 0 to %d", v, KV_RETRY_MAX);
    } else if (strcmp(n, "flaky") == 0) {
        if (strcmp(v, "pass") != 0 && strcmp(v, "fail") != 0)
            return kv_usage_error("--flaky=%s: expected pass or fail", v);
        c->o.flaky_fail = strcmp(v, "fail") == 0;
    } else if (strcmp(n, "verbose") == 0 || strcmp(n, "quiet") == 0) {
        if (c->o.verbosity != 0) return kv_usage_error("'%s': -v (--verbose) and -q (--quiet) exclude each other", arg);
        c->o.verbosity = strcmp(n, "verbose") == 0 ? 1 : -1;
    } else if (strcmp(n, "deadline") == 0) {
        char *end;
        errno = 0;
        const double t = strtod(v, &end);
        if (end == v || *end != '\0' || errno != 0 || !isfinite(t) || t <= 0 || t > 1e7)
            return kv_usage_error("--deadline=%s: must be a number of seconds > 0 (at most 1e7)", v);
        c->o.deadline_seconds = t;
    } else if (strcmp(n, "max-failures") == 0) {
        if (kv_parse_int(v, 1, 1000000000, &c->o.max_failures) != 0)
            return kv_usage_error("--max-failures=%s: must be a whole number from 1 to 1000000000", v);
    } else if (strcmp(n, "require-support") == 0) {
        c->o.require_support = true;
    } else if (strcmp(n, "resume") == 0) {
        c->o.resume = true;
    } else if (strcmp(n, "gzip-results") == 0) {
        c->o.gzip_results = true;
    } else if (strcmp(n, "dump") == 0) {
        c->o.dump_dir = v;
    } else if (strcmp(n, "baseline") == 0) {
        c->o.baseline_path = v;
    } else if (strcmp(n, "tolerances") == 0) {
        c->tolerances = v;
    } else if (strcmp(n, "only-backend") == 0 || strcmp(n, "only-check") == 0) {
        /* Checked against the run's backends and checks in kv_driver_run. */
        if ((n[5] == 'b' ? kv_row_select_add_backends(v) : kv_row_select_add_checks(v)) != 0)
            return kv_usage_error("'%s': --%s takes NAME[,NAME...] (no empty name, at most 16, each under 64 bytes)", arg, n);
    } else if (strcmp(n, "merge") == 0) {
        c->merge = true;
    } else if (strcmp(n, "compare") == 0 || strcmp(n, "require-identical") == 0 || strcmp(n, "perf-threshold") == 0) {
        return kv_cmp_flag(c, n, v);
    } else if (strcmp(n, "help") == 0) {
        c->help = true;
    } else if (strcmp(n, "version") == 0) {
        c->version = true;
    } else if (strcmp(n, "list-ops") == 0) {
        c->list_ops = true;
    } else if (strcmp(n, "perf-interleave") == 0) {
        c->perf_o.interleave = true;
    } else if (strcmp(n, "perf-metric") == 0) {
        /* time, instructions or instructions:SOURCE (runner/exec/icount.h) */
        const char *colon = strchr(v, ':');
        const size_t len = colon ? (size_t)(colon - v) : strlen(v);
        if (len == 4 && strncmp(v, "time", 4) == 0 && colon == NULL) {
            c->perf_o.metric = KV_PERF_METRIC_TIME;
        } else if (len == 12 && strncmp(v, "instructions", 12) == 0 &&
                   (colon == NULL || kv_icount_source_parse(colon + 1, &c->perf_o.counter) == 0)) {
            c->perf_o.metric = KV_PERF_METRIC_INSTRUCTIONS;
        } else {
            return kv_usage_error("--perf-metric=%s: expected time, instructions, or instructions:SOURCE with SOURCE "
                                  "auto, hardware or callgrind", v);
        }
    } else if (strcmp(n, "perf-reps") == 0) {
        if (kv_parse_int(v, 1, KV_PERF_MAX_REPS, &c->perf_o.reps) != 0) {
            return kv_usage_error("--perf-reps=%s: must be a whole number from 1 to %d", v, KV_PERF_MAX_REPS);
        }
    }
    return 0;
}

/* An argument that is neither a runner flag nor a case option's --key is
 * an unknown flag: said so (exit 2) with the closest name of either kind,
 * rather than left to the grammar, which would call it a case option. */
static int kv_unknown_flag(const char *arg) {
    const char *name = arg + 2;
    const size_t len = strcspn(name, "=");
    char key[64];
    if (len == 0 || len >= sizeof key) return kv_usage_error("'%s': unknown flag", arg);
    memcpy(key, name, len);
    key[len] = '\0';
    if (kv_case_option_find(key) >= 0 || strcmp(key, "batch") == 0 || strcmp(key, "reset") == 0) return 0;
    const char *best = NULL;
    int best_d = KV_SUGGEST_MAX_EDITS + 1;
    for (int i = 0; i < KV_NFLAGS; i++) {
        const int d = kv_suggest_distance(key, kv_flags[i].name);
        if (d < best_d) best_d = d, best = kv_flags[i].name;
    }
    for (int i = 0; i < kv_case_option_count; i++) {
        const int d = kv_suggest_distance(key, kv_case_options[i].name);
        if (d < best_d) best_d = d, best = kv_case_options[i].name;
    }
    if (best != NULL) return kv_usage_error("'%s': unknown flag --%s; did you mean --%s?", arg, key, best);
    return kv_usage_error("'%s': unknown flag --%s (neither a runner flag nor a case option)", arg, key);
}

static int kv_cli_parse(kv_cli *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0) {
            c->help = true;
            continue;
        }
        /* The short spellings of --verbose and --quiet. */
        if (strcmp(a, "-v") == 0 || strcmp(a, "-q") == 0) {
            const int rc = kv_cli_flag(c, kv_flag_of(a[1] == 'v' ? "--verbose" : "--quiet"), a);
            if (rc != 0) return rc;
            continue;
        }
        if (kv_is_positional(a)) {
            c->paths[c->npaths++] = a;
            continue;
        }
        if (kv_is_perf_mode(a)) {
            if (c->perf) return kv_usage_error("'%s': --mode=perf given twice", a);
            c->perf = true;
            continue;
        }
        const int f = kv_flag_of(a);
        if (f < 0) {
            const int rc = kv_unknown_flag(a);
            if (rc != 0) return rc;
            c->case_options = true; /* the grammar judges its value */
            continue;
        }
        int rc = kv_cli_flag(c, f, a);
        if (rc != 0) return rc;
    }
    return 0;
}

static int kv_merge_main(const kv_cli *c) {
    if (c->npaths == 0) return kv_usage_error("--merge needs report folders: kvrun --merge DIR...");
    for (int f = 0; f < KV_NFLAGS; f++) {
        const char *n = kv_flags[f].name;
        if (c->seen[f] && strcmp(n, "merge") != 0 && strcmp(n, "report-dir") != 0 && strcmp(n, "gzip-results") != 0) {
            return kv_usage_error("--merge takes only report folders, --report-dir and --gzip-results, not --%s", n);
        }
    }
    if (c->case_options)
        return kv_usage_error("--merge takes only report folders, --report-dir and --gzip-results, not case options");
    if (c->perf) return kv_usage_error("--merge takes only report folders, --report-dir and --gzip-results, not --mode=perf");
    const char *rdir = c->o.report_dir ? c->o.report_dir : KV_DRIVER_DEFAULT_REPORT_DIR;
    int code = 2;
    const kv_status st = kv_merge_write(c->paths, c->npaths, rdir, c->o.gzip_results, stdout, &code);
    fflush(stdout);
    if (st != KV_OK) fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
    return code;
}

static bool kv_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* KV_PERFDISPATCH_FORCE=?, which lists the variants even with nothing
 * to run. */
static bool kvrun_tune_listing(void) {
    const char *v = getenv("KV_PERFDISPATCH_FORCE");
    if (v == NULL) return false;
    while (*v == ' ' || *v == '\t') v++;
    if (*v++ != '?') return false;
    while (*v == ' ' || *v == '\t') v++;
    return *v == '\0';
}

/* The KV_PERFDISPATCH_* variables, read once the backends have registered
 * their variants: "?" lists them (exit 0), a bad value is a usage error
 * naming the entry (exit 2). -1: carry on. */
static int kvrun_tune_env(void) {
    switch (kv_tune_env_load()) {
    case KV_TUNE_ENV_OK:
        /* Every backend is loaded: an entry that matches nothing now
         * never will (a dispatch judges only its own op's entry). */
        if (kv_tune_force_check() != KV_OK) {
            fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
            return 2;
        }
        return -1;
    case KV_TUNE_ENV_LIST:
        kv_tune_list(stdout);
        return 0;
    case KV_TUNE_ENV_ERROR: fprintf(stderr, "kvrun: %s\n", kv_last_error_message()); return 2;
    }
    return -1;
}

/* perf mode times variants in this process: the flags about checks,
 * goldens and workers do not apply to it (a silent no-op would mislead). */
static int kv_perf_flags_check(const kv_cli *c) {
    static const char *const not_perf[] = { "regen-golden", "baseline", "dump", "gate", "jobs", "isolate", "timeout",
                                            "golden", "retry", "flaky", "verbose", "quiet", "resume", "gzip-results",
                                            "deadline", "max-failures" };
    for (int f = 0; f < KV_NFLAGS; f++) {
        const char *n = kv_flags[f].name;
        if (!c->seen[f]) continue;
        if ((strcmp(n, "perf-reps") == 0 || strcmp(n, "perf-interleave") == 0 || strcmp(n, "perf-metric") == 0) &&
            !c->perf)
            return kv_usage_error("--%s needs --mode=perf", n);
        for (size_t i = 0; c->perf && i < sizeof not_perf / sizeof not_perf[0]; i++) {
            if (strcmp(n, not_perf[i]) == 0)
                return kv_usage_error("--%s does not apply to --mode=perf (it times variants in this process)", n);
        }
    }
    return 0;
}

static int kv_perf_selected(void *ctx, const kv_case *const *cases, int n, FILE *out) {
    return kv_perf_run((const kv_perf_options *)ctx, cases, n, out);
}

static int kv_run_main(kv_cli *c, int argc, char **argv) {
    const int perf_rc = kv_perf_flags_check(c);
    if (perf_rc != 0) return perf_rc;
    for (int f = 0; f < KV_NFLAGS && c->compare_old == NULL; f++) {
        const char *n = kv_flags[f].name;
        if (c->seen[f] && (strcmp(n, "require-identical") == 0 || strcmp(n, "perf-threshold") == 0))
            return kv_usage_error("--%s needs --compare=OLD (or kvrun --compare OLD NEW)", n);
    }
    if (c->compare_old != NULL && c->o.list_only) return kv_usage_error("--compare=OLD needs a run, not --list");
    if (c->perf) {
        c->perf_o.report_dir = c->o.report_dir;
        c->o.run_selected = kv_perf_selected;
        c->o.run_selected_ctx = &c->perf_o;
    }
    if (c->npaths == 0 && !c->case_options && !kvrun_tune_listing()) {
        return kv_usage_error("nothing to run: give case files or directories, or a case line (--op=...)");
    }
    /* Before anything is loaded: the count may have to be made by a
     * second kvrun under callgrind (whose exit code is then ours). */
    const int icount_rc = c->perf && c->perf_o.metric == KV_PERF_METRIC_INSTRUCTIONS
                              ? kv_perf_icount_prepare(&c->perf_o, argv, stderr)
                              : -1;
    if (icount_rc >= 0) return icount_rc;
    kv_path_list files = { 0 };
    for (int i = 0; i < c->npaths; i++) {
        if (kv_driver_collect(c->paths[i], &files) != KV_OK) {
            fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
            kv_path_list_free(&files);
            return 2;
        }
    }
    double probe_timeout = 0;
    if (kv_init() != KV_OK || kv_backend_probe_timeout(&probe_timeout) != KV_OK) {
        /* A bad KV_* setting (the message names it): a configuration error. */
        fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
        kv_path_list_free(&files);
        return 2;
    }
    /* A case line (a pasted repro line) reports to reports/repro/: it
     * never replaces the full run's reports in reports/. */
    if (c->o.report_dir == NULL && c->npaths == 0 && !c->perf) c->o.report_dir = KV_DRIVER_DEFAULT_REPORT_DIR "/repro";
    /* Probing the plugins can take long (or hang): an old green report
     * must not outlive a kill during it as this run's (the folder this run
     * owns: a case line's is reports/repro/, above). */
    const char *rdir = c->o.report_dir ? c->o.report_dir : KV_DRIVER_DEFAULT_REPORT_DIR;
    /* --last-failed and --failed-first read the old run's results.jsonl
     * (in kv_driver_run): that folder is retired only when the run begins. */
    if (!c->perf && !c->o.list_only && !c->o.resume && !c->o.last_failed && !c->o.failed_first &&
        kv_report_retire(rdir) != KV_OK) {
        fprintf(stderr, "kvrun: --report-dir=%s: %s\n", rdir, kv_last_error_message());
        kv_path_list_free(&files);
        return 2;
    }
    load_backends(c->backends, c->nbackends);
    if (kv_driver_accel_target_check() != KV_OK) {
        fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
        kv_path_list_free(&files);
        return 2;
    }
    /* --tolerances first, then each plugin's own file: the first match
     * wins, so a user's row replaces what a plugin ships. Both before any
     * case runs (the workers fork with the table). */
    if ((c->tolerances != NULL && kv_tol_file_load_user(c->tolerances) != KV_OK) ||
        kv_tol_file_load_plugins() != KV_OK) {
        fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
        kv_path_list_free(&files);
        return 2;
    }
    c->o.require_backends = c->require;
    c->o.nrequire = c->nrequire;
    set_repro_prefix(c->o.fastpath_gates, argv[0]);
    const int tune_rc = kvrun_tune_env();
    if (tune_rc >= 0) {
        kv_path_list_free(&files);
        return tune_rc;
    }
    kv_case_list cases = { 0 };
    if (kv_driver_load(argc, argv, kv_runner_claims, NULL, &files, &cases) != KV_OK) {
        /* Already "FILE:LINE:COL: message": left unprefixed so editors
         * and CI annotators pick up the location. */
        fprintf(stderr, "%s\n", kv_last_error_message());
        kv_case_list_free(&cases);
        kv_path_list_free(&files);
        return 2;
    }
    bool all_dirs = c->npaths > 0 && !c->case_options;
    for (int i = 0; all_dirs && i < c->npaths; i++) all_dirs = kv_is_dir(c->paths[i]);
    c->o.regen_full = all_dirs;
    char name[KV_REPORT_NAME_MAX];
    int n = 0;
    name[0] = '\0';
    for (int i = 1; i < argc && n < (int)sizeof name - 1; i++) {
        if (kv_flag_of(argv[i]) >= 0 || strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "-q") == 0) continue;
        int k = snprintf(name + n, sizeof name - (size_t)n, "%s%s", n ? " " : "", argv[i]);
        if (k > 0) n += k;
    }
    c->o.run_name = name;
    c->o.version = KV_VERSION_STRING;
    /* Set only when found elsewhere: the default stays out of the options
     * that shards of one run must share. */
    char golden_buf[4200];
    if (c->o.golden_dir == NULL) {
        const char *g = kv_golden_dir_default(golden_buf, sizeof golden_buf,
                                              c->o.list_only || c->o.regen_golden || c->perf ? NULL : stderr);
        if (strcmp(g, KV_DRIVER_DEFAULT_GOLDEN_DIR) != 0) c->o.golden_dir = g;
    }
    c->o.filters = c->filters;
    c->o.nfilters = c->nfilters;
    c->o.filters_out = c->filters_out;
    c->o.nfilters_out = c->nfilters_out;
    int rc = kv_driver_run(&c->o, &cases, stdout);
    /* A run that wrote its reports (exit 0 or 1) hands Bazel its JUnit. */
    if ((rc == 0 || rc == 1) && !c->o.list_only && !c->perf &&
        kv_ci_xml_output(c->o.report_dir ? c->o.report_dir : KV_DRIVER_DEFAULT_REPORT_DIR) != KV_OK) {
        fprintf(stderr, "kvrun: %s\n", kv_last_error_message());
        rc = 2;
    }
    kv_case_list_free(&cases);
    kv_path_list_free(&files);
    if (c->compare_old != NULL && (rc == 0 || rc == 1)) {
        /* The comparison judges the run: a failure the old run had too is
         * no regression, so its exit code replaces the run's. */
        fflush(stdout);
        if (kv_runcmp_dirs(c->compare_old, rdir, rdir, &c->cmp, stdout, &rc) != KV_OK) {
            fprintf(stderr, "kvrun: compare: %s\n", kv_last_error_message());
            rc = KV_RUNCMP_EXIT_NOT_COMPARABLE;
        }
    }
    return rc;
}

/* The golden store of an installed kvsuite (PREFIX/bin/kvrun beside
 * PREFIX/share/kvsuite/golden, as `ninja install` lays it out), used when
 * no --golden-dir is given and the working directory has no golden/: an
 * installed kvrun then runs `kvrun PREFIX/share/kvsuite/cases` without
 * flags. NULL when this kvrun is not an installed one. */
static const char *installed_golden_dir(void) {
    static char dir[4096];
    char exe[4096];
    struct stat st;
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash == NULL) return NULL;
    *slash = '\0';
    const int m = snprintf(dir, sizeof dir, "%s/../share/kvsuite/golden", exe);
    if (m <= 0 || m >= (int)sizeof dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return NULL;
    if (stat(KV_DRIVER_DEFAULT_GOLDEN_DIR, &st) == 0 && S_ISDIR(st.st_mode)) return NULL;
    return dir;
}

int main(int argc, char **argv) {
    kv_cli c;
    memset(&c, 0, sizeof c);
    kv_driver_options_init(&c.o);
    kv_perf_options_init(&c.perf_o);
    kv_runcmp_policy_init(&c.cmp);
    c.filters = calloc((size_t)argc, sizeof *c.filters);
    c.filters_out = calloc((size_t)argc, sizeof *c.filters_out);
    c.backends = calloc((size_t)argc, sizeof *c.backends);
    c.paths = calloc((size_t)argc, sizeof *c.paths);
    if (c.filters == NULL || c.filters_out == NULL || c.paths == NULL || c.backends == NULL) {
        fprintf(stderr, "kvrun: out of memory\n");
        return 1;
    }
    int rc = kv_cli_parse(&c, argc, argv);
    if (rc == 0 && c.o.golden_dir == NULL) c.o.golden_dir = installed_golden_dir();
    if (rc == 0) {
        if (c.help) {
            usage(stdout);
        } else if (c.version) {
            /* The compiled-in op count, so --version works even when
             * initialization would fail. */
            printf("kvrun %s (%d ops)\n", KV_VERSION_STRING, (int)KV_OP_COUNT);
        } else if (c.list_ops) {
            rc = list_ops(c.backends, c.nbackends);
        } else if (c.merge) {
            rc = kv_merge_main(&c);
        } else if (c.compare_two) {
            rc = kv_compare_main(&c);
        } else {
            rc = kv_run_main(&c, argc, argv);
        }
    }
    free(c.filters);
    free(c.filters_out);
    free(c.backends);
    for (int i = 0; i < c.nrequire_text; i++) free(c.require_text[i]);
    free(c.paths);
    return rc;
}
