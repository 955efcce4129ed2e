/* The runner pipeline (DESIGN.md section 6): collect case files, select
 * cases, run them (isolated), apply the baseline, write the reports.
 * kvrun (src/tools/kvrun.c) is a thin command line over these functions,
 * so tests run the whole pipeline in-process.
 *
 * Collection
 *   A directory stands for every *.case file under it, recursively, sorted
 *   by path (bytewise strcmp of the full path); files named directly are
 *   taken as given, in command-line order. Case options on the command
 *   line are defaults over every file: each file is parsed as if the
 *   command line said `--batch=FILE` (grammar.h), so
 *   `kvrun cases/binary.case --device=accel` runs binary.case on accel
 *   unless a line there says otherwise.
 *
 * Selection, in this order
 *   1. duplicates: cases with the same canonical ID (lines that overlap,
 *      or a file named twice) run once, as their first occurrence; each
 *      dropped duplicate is counted and the first few are named in a
 *      warning (an ID is what reports, baselines and golden lookup key
 *      on, so two runs of one ID could only collide);
 *   2. --filter (runner/filter.h): any pattern matches, and no
 *      --filter-out pattern does; --last-failed: the case failed in the
 *      previous run in the report folder (runner/exec/last_failed.h);
 *   3. --shard=K/N: the j-th case left after 1 and 2 (0-based, in
 *      collection order) belongs to shard K when j % N == K - 1. So the N
 *      shards partition the selection, are deterministic for the same
 *      inputs on every machine, and stay balanced under any filter.
 *   4. --failed-first: the cases of the shard that failed in the previous
 *      run move to the front, each group in collection order.
 *   Zero cases selected (also: zero cases in the input) is a usage error,
 *   exit 2, "no cases selected": a green run that ran nothing would hide a
 *   broken filter or an empty shard matrix.
 *
 * Running
 *   Normal runs verify against the golden store (read-only) in forked
 *   workers (runner/isolate.h). --regen-golden runs every selected case in
 *   this process (isolate forced to none, no timeout: golden writes are
 *   parent-only), then saves the store. Pruning entries no case produced
 *   only happens when the caller says the selection is the whole suite
 *   (regen_full) and there is no filter and no shard.
 *
 * Interruption
 *   While cases run, the report folder is marked in progress and
 *   results.jsonl grows case by case (report.h, "a run in progress").
 *   SIGINT, SIGTERM or SIGHUP stops the run: the workers are killed, every report
 *   is written from the cases that finished, marked incomplete, and the
 *   exit code is 128 + the signal (130, 143, 129). A second signal does
 *   not cut that short (SIGKILL does). --resume continues.
 *
 * Exit codes: 0 nothing failed, errored, crashed, timed out or passed
 * unexpectedly (kv_report_exit_code); 1 otherwise, and when the golden
 * store cannot be saved or the reports cannot be written; 2 for usage
 * errors, found before any case runs (bad option values, a bad filter, a
 * bad baseline file, a report or dump folder that cannot be created,
 * nothing selected). */
#ifndef KV_RUNNER_DRIVER_H
#define KV_RUNNER_DRIVER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include "kv/status.h"
#include "runner/case/expand.h"
#include "runner/case/grammar.h"
#include "runner/exec/isolate.h"

/* 60 s per case: the slowest reference case (matmul, f64, large shapes,
 * every check) takes a few seconds on a slow CI box; a hang should not
 * cost more than a minute. */
#define KV_DRIVER_DEFAULT_TIMEOUT 60.0
#define KV_DRIVER_DEFAULT_REPORT_DIR "reports"
#define KV_DRIVER_DEFAULT_GOLDEN_DIR "golden"
/* Duplicate IDs named one by one in the warning; the rest are counted. */
#define KV_DRIVER_DUPLICATES_SHOWN 5

typedef struct kv_driver_options {
    const char *const *filters;  /* --filter patterns; none: every case */
    int nfilters;
    int jobs;                    /* workers; 0: the number of online CPUs */
    int shard_k, shard_n;        /* --shard=K/N, 1 <= K <= N; shard_n 0: not sharded */
    double timeout_seconds;      /* per case; 0: KV_DRIVER_DEFAULT_TIMEOUT */
    kv_isolate_mode isolate;
    const char *report_dir;      /* NULL: KV_DRIVER_DEFAULT_REPORT_DIR */
    const char *golden_dir;      /* NULL: KV_DRIVER_DEFAULT_GOLDEN_DIR */
    bool regen_golden;
    /* The cases are the whole suite (kvrun: directories only, no case
     * options): a regeneration without filter or shard may then drop
     * golden entries no case produced. */
    bool regen_full;
    const char *dump_dir;        /* --dump=DIR, or NULL */
    kv_golden_mode golden_mode;  /* --golden=: auto (0), store, live */
    const char *baseline_path;   /* --baseline=FILE, or NULL */
    bool list_only;              /* --list: print the selected IDs, run nothing */
    const char *run_name;        /* for report headers; NULL: "" */
    const char *version;         /* kvsuite's version, for the fingerprint (the runner may not include kv/kv.h) */
    /* --gate=: the gates the fastpath check runs under, bit 1u << gate
     * (runner/check_fastpath.h); 0: both. */
    unsigned fastpath_gates;
    FILE *err;                   /* warnings and errors; NULL: stderr */
    /* When set (kvrun --mode=perf, runner/perf.h), the selected cases go
     * to this instead of the checks, in this process, and its result is
     * the exit code; nothing else is written. */
    int (*run_selected)(void *ctx, const kv_case *const *cases, int n, FILE *out);
    void *run_selected_ctx;
    /* --require-backend=NAME: backends that must be available; each one
     * that is not is an ERROR row (backends.c). */
    const char *const *require_backends;
    int nrequire;
    /* --require-support: every declared (op, dtype) of a loaded plugin
     * must pass in the run (support_rows.c). */
    bool require_support;
    /* --retry=N: failing cases run up to N more times; one that passes is
     * FLAKY (runner/exec/retry.h). 0: no retries. */
    int retry;
    /* --flaky=fail: a FLAKY row fails the run (exit 1); default pass. */
    bool flaky_fail;
    /* --gzip-results: the finished run's rows go to results.jsonl.gz. */
    bool gzip_results;
    /* -q / -v: what is printed while cases run (runner/exec/progress.h),
     * on `err`: a live line at a terminal, plain lines elsewhere. */
    int verbosity;               /* kv_progress_level: -1 quiet, 0 normal, 1 verbose */
    /* --resume: continue the incomplete run in report_dir
     * (runner/exec/resume.h) instead of starting afresh. */
    bool resume;
    /* --deadline=SEC (0: none) and --max-failures=N (0: none): limits
     * that end the run early, the rest reported as not run
     * (runner/exec/budget.h). */
    double deadline_seconds;
    int max_failures;
    /* --filter-out=PAT (repeatable, the --filter syntax): a case matching
     * any of them is left out, whatever --filter selected. */
    const char *const *filters_out;
    int nfilters_out;
    /* --last-failed: only the cases the previous run in report_dir did not
     * pass; --failed-first: those first, then the rest
     * (runner/exec/last_failed.h). */
    bool last_failed, failed_first;
} kv_driver_options;

/* Every field at its default. */
void kv_driver_options_init(kv_driver_options *o);

/* backends.c: the run's backends into the report header, and the rows
 * that make a run fail when a plugin it asked for did not load, a
 * required backend is not available, or the accel target it named is not
 * loaded (ERROR); an unavailable plugin gives an UNSUPPORTED row. */
struct kv_report_meta;
void kv_driver_backends_meta(struct kv_report_meta *meta);
struct kv_result_list;
kv_status kv_driver_backend_rows(const kv_driver_options *o, struct kv_result_list *out);
/* One row of a backend itself, "backend(NAME)" with op "(backend)" and
 * the given check ("load", "support"), appended to out (backends.c). */
kv_status kv_driver_backend_vrow(struct kv_result_list *out, const char *name, const char *check,
                                 kv_result_status status, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));
/* --require-support (support_rows.c): an ERROR row for every pair a loaded
 * plugin declares that no PASS row of the run (cases 0..ncases-1 of
 * stream) proved, and for a plugin that declares nothing. */
struct kv_report_stream;
kv_status kv_driver_support_rows(struct kv_report_stream *stream, int ncases, struct kv_result_list *out);
/* run_errors.c: appends an ERROR row "run(WHAT)", check WHAT, for a
 * fault of the run itself (a report or the golden store that could not be
 * written), so that every report counts it. */
kv_status kv_driver_run_error_row(struct kv_result_list *out, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A requested accel target (KV_ACCEL_TARGET / --accel-target) that names
 * no backend at all (none loaded, none attempted): KV_ERR_INVALID_ARG, a
 * configuration error (kvrun exits 2). One that was attempted and did not
 * load stays an ERROR row, the plugin's failure being a result. */
kv_status kv_driver_accel_target_check(void);
/* The backend names a row can carry: cpu, accel and every plugin loaded
 * or attempted (for baseline validation). Returns how many (at most cap). */
int kv_driver_backend_names(const char **names, int cap);
/* shard_auto.c: --shard=auto or auto/N (spec is that text): K and N from
 * the CI engine's environment; `source` says which variable gave them.
 * KV_ERR_INVALID_ARG naming the variable on a bad or missing value. */
kv_status kv_shard_auto(const char *spec, int *k, int *n, char *source, size_t cap);
/* ci_outputs.c: Bazel's XML_OUTPUT_FILE, when set, gets a copy of the
 * run's REPORT_DIR/junit.xml (Bazel reads the test's JUnit there). Unset:
 * nothing; empty, or a copy that fails: KV_ERR_INVALID_ARG naming it. */
kv_status kv_ci_xml_output(const char *report_dir);
/* golden_find.c: the golden store when --golden-dir is not given:
 * ./golden when it holds a MANIFEST, else EXE/../golden when that does
 * (said on `err`), else ./golden with a warning on `err` saying what
 * that means (may be NULL: silent). `buf` holds the path it returns. */
const char *kv_golden_dir_default(char *buf, size_t cap, FILE *err);
/* fingerprint.c: meta->fingerprint from the options, every input case
 * (before filter and shard), the library's switches, meta->backends
 * (filled first) and the KV_* environment. */
void kv_driver_fingerprint(struct kv_report_meta *meta, const kv_driver_options *o, const kv_case_list *cases);

/* Checks option values; KV_ERR_INVALID_ARG with a message naming the flag
 * and the value ("--shard=3/2: K must be between 1 and N"). */
kv_status kv_driver_options_check(const kv_driver_options *o);

/* A list of paths (owned strings). */
typedef struct kv_path_list {
    char **items;
    int n, cap;
} kv_path_list;

kv_status kv_path_list_push(kv_path_list *l, const char *path);
void kv_path_list_free(kv_path_list *l);

/* Appends the case files `path` stands for (rule above). A path that does
 * not exist, or a directory without any *.case file, is an error naming
 * the path. */
kv_status kv_driver_collect(const char *path, kv_path_list *files);

/* Parses and expands `files` in order, each with the command line's case
 * options as defaults: every argv element that `skip` does not claim is a
 * case option (argv[0] is the program). With files given, --op= on the
 * command line is an error (a case line cannot include files); without
 * files the command line itself is the case line. On error `out` may hold
 * cases; free it either way. Errors read FILE:LINE:COL. */
kv_status kv_driver_load(int argc, char *const argv[], kv_grammar_skip_fn skip, void *ctx,
                         const kv_path_list *files, kv_case_list *out);

/* The whole run over `cases`: select, list or run, baseline, reports.
 * Returns the exit code. The console summary and --list go to `out`. */
int kv_driver_run(const kv_driver_options *o, const kv_case_list *cases, FILE *out);

/* Indices (into cases) of the selected cases, rules above; *nsel may be
 * 0. For tests and --list. Returns KV_OK or a filter error. *sel is
 * malloc'd (free it). `err` gets the duplicate warnings; may be NULL. */
kv_status kv_driver_select(const kv_driver_options *o, const kv_case_list *cases, int **sel,
                           int *nsel, FILE *err);

#endif
