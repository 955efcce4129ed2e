/* Run reports (DESIGN.md section 6): what kvrun writes after a run, and
 * what `kvrun --merge` writes again from several shard report folders.
 *
 * A report folder holds:
 *   results.jsonl  one JSON object per (case, check) result, every field
 *                  of kv_check_result (report_jsonl.c; read back by merge.c)
 *   meta.json      the kv_report_meta of the run, one JSON object
 *   junit.xml      JUnit XML for CI (report_junit.c)
 *   report.html    one self-contained page: summary, failures first with
 *                  their diffs, op x dtype matrix, error plots (report_html.c)
 *   matrix.md      the op x backend x dtype support matrix (report_matrix.c)
 *
 * Counting rule of the console's final line `N passed, N failed, N skipped`
 * (with `, N flaky` appended when a --retry run had flakes; the numbers
 * always sum to the number of results):
 *   passed  = PASS + XFAIL      (an expected failure does not fail the run)
 *   failed  = FAIL + ERROR + CRASH + TIMEOUT + XPASS
 *   skipped = SKIP + UNSUPPORTED
 *   flaky   = FLAKY             (failed, then passed on a retry)
 * "failed" is exactly the set kv_result_status_is_bad: the run's exit code
 * is non-zero iff failed > 0 (or nothing ran at all), or flaky > 0 under
 * --flaky=fail. The line keeps its three-number form when nothing was
 * flaky, so scripts that read it see no change.
 *
 * Every function that writes a file returns a kv_status whose message names
 * the path and the errno text. Files are written to PATH.tmp and renamed,
 * so a report folder never holds a half-written file. */
#ifndef KV_RUNNER_REPORT_H
#define KV_RUNNER_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "runner/check/result.h"

#define KV_REPORT_NAME_MAX 128
#define KV_REPORT_OPTIONS_MAX 1024

/* One backend of a run, for the report headers (runner/exec/backends.c
 * fills them from the loader's records). */
#define KV_REPORT_MAX_BACKENDS 12
typedef struct kv_report_backend {
    char name[32];       /* "cpu", "sim", a plugin's own name; the path's file name when it never said */
    char version[64];    /* the plugin's version text, "" when it gave none */
    char path[256];      /* "" for the built-in CPU backend */
    char state[16];      /* "built-in", "loaded", "unavailable", "failed" */
    char reason[640];    /* why not, for unavailable and failed */
} kv_report_backend;

/* What makes two report folders shards of one run (merge refuses to mix
 * folders whose fingerprints differ, naming the field). Each field is
 * text, compared whole; "" in a folder written before fingerprints. */
typedef struct kv_report_fingerprint {
    char version[32];    /* kvsuite's version */
    char cases[64];      /* "N cases, hash H": every input case ID, in order, before filter and shard */
    char options[512];   /* what changes results or verdicts: filters, gates the fastpath check runs, baseline, golden */
    char gates[256];     /* the library's switches: redispatch gate, kill switch, special paths, accel target */
    char backends[512];  /* each backend's name, state and version */
    char env[768];       /* the KV_* variables that change results, as set */
} kv_report_fingerprint;

/* What a run was, for the report headers. */
typedef struct kv_report_meta {
    kv_report_fingerprint fingerprint;
    char run_name[KV_REPORT_NAME_MAX];   /* e.g. the case files, "" for none */
    uint64_t seed;
    char options[KV_REPORT_OPTIONS_MAX]; /* gate/options text, free form */
    int64_t start_time;                  /* Unix seconds (UTC) */
    double wall_seconds;
    int64_t ncases;                      /* cases selected (a case has several results) */
    /* --shard=K/N as given on the command line; shard_n == 0: not sharded.
     * A merged report has shard_n 0 and merged_from = the folder count. */
    int shard_k, shard_n;
    int merged_from;
    /* Every backend the run asked for, and the accel target (what was
     * asked for, what it resolved to: "none" when not available). */
    kv_report_backend backends[KV_REPORT_MAX_BACKENDS];
    int nbackends;
    int abi_version;
    char accel_requested[32];
    char accel_target[32];
    /* --flaky=fail: a FLAKY row fails the run (exit 1). Written to
     * meta.json as "flaky", so a merge of such shards judges alike. */
    bool flaky_fail;
    /* The run did not finish: still running (the meta.json written when
     * it starts), or stopped by a signal. meta.json says "complete": false
     * and "interrupted": the signal's name ("" while running); every
     * report says so; --resume continues it; --merge refuses it. */
    bool incomplete;
    char interrupted[16];        /* "SIGINT", "SIGTERM", "" */
    int64_t ncases_done;         /* of ncases, when incomplete */
    /* --gzip-results: the finished rows go to results.jsonl.gz, not
     * results.jsonl (the store of a run in progress stays plain, so an
     * interrupted run resumes as before). meta.json says which file. */
    bool gzip_results;
} kv_report_meta;

/* "interrupted by SIGINT after 12 of 541 cases: ..." for the reports of an
 * incomplete run; 0 (and "") when the run is complete. */
int kv_report_incomplete_text(const kv_report_meta *meta, char *buf, int cap);

/* Every field zero / empty. */
void kv_report_meta_init(kv_report_meta *meta);

/* The three numbers of the final console line (rule above). */
typedef struct kv_report_totals {
    int64_t passed, failed, skipped, flaky;
} kv_report_totals;
kv_report_totals kv_report_totals_of(const kv_result_list *results);

/* 0 only when nothing failed, errored, crashed, timed out or passed
 * unexpectedly; 1 otherwise, and 1 for an empty list (a run that selected
 * nothing is not a green run). Usage errors (2) are the CLI's business. */
int kv_report_exit_code(const kv_result_list *results);
/* The same, and 1 when flaky_fail and some row is FLAKY (--flaky=fail). */
int kv_report_exit_code_flaky(const kv_result_list *results, bool flaky_fail);

/* Each gate's fast-path hit rate (report_hits.c), from the fastpath
 * check's rows "fastpath:seed" and "fastpath:exact" that ran (PASS, FAIL,
 * XFAIL, XPASS), whose counts are those of the run with every fast path
 * on: the cases where the fast (or manual) path fired at least once, and
 * the boxed calls by path. Plain cases (no lazy=, no mode= in the ID) are
 * counted apart: there the fast path must fire under both gates, so their
 * rate is 100% in a green run, and the gates differ on the rest. */
#define KV_REPORT_GATES 2 /* seed, exact */
typedef struct kv_report_hits {
    const char *gate;             /* "seed", "exact" */
    int64_t cases, cases_hit;
    int64_t plain_cases, plain_hit;
    int64_t fast, manual, slow;   /* calls */
} kv_report_hits;
/* Fills hits[0] (seed) and hits[1] (exact); returns how many gates have
 * rows (0: the run had no fastpath check). */
int kv_report_hit_rates(const kv_result_list *results, kv_report_hits hits[KV_REPORT_GATES]);
/* "gate seed: fast path fired in N of M cases (P%; plain a/b, lazy/mode
 * c/d), X of Y boxed calls (Q%: F fast, M manual, S slow)"; snprintf style. */
int kv_report_hits_format(const kv_report_hits *h, char *buf, int cap);

/* The console summary: a header, the bad results (FAIL, ERROR, CRASH,
 * TIMEOUT, XPASS) with message, first mismatches and repro line, a note
 * when the baseline is stale, each gate's fast-path hit rate (when the run
 * had fastpath rows), the per-status counts line and, last, the line
 * `N passed, N failed, N skipped`. `meta` may be NULL. */
void kv_report_console(FILE *out, const kv_result_list *results, const kv_report_meta *meta);

/* ---- building a report folder row by row (report_build.c) ----
 * What kvrun uses, so that its memory does not grow with the number of
 * cases: each row goes to results.jsonl (PATH.tmp until finish) and the
 * junit.xml spool as it is added; counts, small per-op/backend/check
 * tables and the rows that are not PASS, SKIP or UNSUPPORTED are kept;
 * finish writes every other report from them. Add the rows in the order
 * the reports should list them (kvrun: case order). */
typedef struct kv_report_build kv_report_build;
/* Creates `dir` (mkdir -p); NULL on error (message set). Only
 * meta->flaky_fail is read here (junit.xml writes rows at once). */
kv_report_build *kv_report_build_begin(const char *dir, const kv_report_meta *meta);
kv_status kv_report_build_add(kv_report_build *b, const kv_check_result *r);
/* Writes every report; the first error is returned, after trying all. */
kv_status kv_report_build_finish(kv_report_build *b, const kv_report_meta *meta);
/* kv_report_console and kv_report_exit_code_flaky of the rows added. */
void kv_report_build_console(const kv_report_build *b, FILE *out, const kv_report_meta *meta);
int kv_report_build_exit_code(const kv_report_build *b, bool flaky_fail);
int64_t kv_report_build_rows(const kv_report_build *b);
void kv_report_build_free(kv_report_build *b);

/* Creates `dir` (mkdir -p) and writes every file listed above into it. */
kv_status kv_report_write_all(const kv_result_list *results, const kv_report_meta *meta,
                              const char *dir);

/* The single writers, each to an exact path. */
kv_status kv_report_write_jsonl(const kv_result_list *results, const char *path);
/* meta.json: the meta fields plus the number of results and the counts per
 * status, so a reader can tell a truncated results.jsonl from a whole one. */
kv_status kv_report_write_meta(const kv_report_meta *meta, const kv_result_list *results,
                               const char *path);
kv_status kv_report_write_junit(const kv_result_list *results, const kv_report_meta *meta,
                                const char *path);
kv_status kv_report_write_html(const kv_result_list *results, const kv_report_meta *meta,
                               const char *path);
kv_status kv_report_write_matrix(const kv_result_list *results, const kv_report_meta *meta,
                                 const char *path);

/* failures.txt (report_failures.c): each failing row as a baseline entry. */
kv_status kv_report_write_failures(const kv_result_list *results, const kv_report_meta *meta,
                                   const char *path);
/* accuracy.md / accuracy.jsonl (report_accuracy.c): the accuracy rows
 * merged per backend x variant x op x dtype; nothing is written when the
 * run has no accuracy rows. */
kv_status kv_report_write_accuracy(const kv_result_list *results, const kv_report_meta *meta, const char *path);
kv_status kv_report_write_accuracy_jsonl(const kv_result_list *results, const kv_report_meta *meta,
                                         const char *path);

/* ---- a run in progress (report_stream.c) ----
 * When a run starts, its folder is marked in progress: the old reports
 * are removed (so a green run of yesterday cannot pass for today's), a
 * meta.json with "complete": false is written, and results.jsonl is
 * opened for appending; each case's rows are appended as the case
 * finishes, with one write(2) per case, so a run killed even by SIGKILL
 * leaves a results.jsonl that is valid up to its last whole line. The
 * final kv_report_write_all replaces it with the full, ordered list. */
typedef struct kv_report_stream {
    int fd;                      /* -1: closed */
    char *path;
    int64_t size;                /* bytes in the file: where the next append lands */
    /* Where each case's rows are (kv_report_stream_index): the byte range
     * of its last append, so that kvrun can read them back in case order
     * at the end instead of holding them. off[i] < 0: none yet. */
    int ncases;
    int64_t *off, *len;
    unsigned char *bad;          /* the case has a FAIL, ERROR, CRASH or TIMEOUT row */
    kv_result_list *mem;         /* rows an append could not write (disk full): held here instead */
    /* --resume (kv_report_stream_scan): the cases found more than once,
     * the first of them, and whether a cut last group was removed. */
    int nrerun, ntorn;
    char rerun_id[KV_CASE_ID_MAX];
} kv_report_stream;

/* Before a run's slow start (plugin probing): when `dir` holds a
 * complete run, its reports, meta.json and results.jsonl are removed, so
 * that a kill before kv_report_begin leaves no old green report that
 * reads as this run's. An incomplete run's folder is left for --resume. */
kv_status kv_report_retire(const char *dir);
/* Marks `dir` in progress (meta must say incomplete) and opens its
 * results.jsonl: emptied, or kept and appended to when `resume`. */
kv_status kv_report_begin(const char *dir, const kv_report_meta *meta, bool resume, kv_report_stream *s);
/* Appends rows, one JSON line each, in one write. */
kv_status kv_report_stream_rows(kv_report_stream *s, const kv_result_list *rows);
/* Sets up the index of `ncases` cases (none has rows yet). */
kv_status kv_report_stream_index(kv_report_stream *s, int ncases);
/* Appends case ci's rows and records where they are; a case appended
 * again (a --retry's final rows) is read back from its last append. When
 * the write fails the rows are held in memory instead (and the error is
 * returned, so the caller can say so once). */
kv_status kv_report_stream_case(kv_report_stream *s, int ci, const kv_result_list *rows);
/* Whether case ci has rows, and whether one of them failed. */
bool kv_report_stream_has(const kv_report_stream *s, int ci);
bool kv_report_stream_bad(const kv_report_stream *s, int ci);
/* Appends case ci's rows, read back, to `out`. */
kv_status kv_report_stream_read_case(kv_report_stream *s, int ci, kv_result_list *out);
/* --resume: indexes the rows already in the file. ids[i] is case i's ID;
 * rows of other cases are left out; the last group of rows, which a kill
 * or a full disk may have cut short, is removed from the file with a cut
 * line after it (ntorn), so that case reruns; a case with more than one
 * group of rows reruns (nrerun, rerun_id). *found gets the number of
 * cases with rows. */
kv_status kv_report_stream_scan(kv_report_stream *s, const char *const *ids, int n, int *found);
void kv_report_stream_close(kv_report_stream *s);

/* mkdir -p: every missing component is created (0777 & ~umask). */
kv_status kv_report_mkdirs(const char *dir);

/* The file names inside a report folder. */
#define KV_REPORT_JSONL "results.jsonl"
/* The same rows gzip-compressed, written instead at the end of a run with
 * --gzip-results (docs/reports.md): a whole suite's plain rows are tens of
 * MB, too much for a CI artifact. */
#define KV_REPORT_JSONL_GZ "results.jsonl.gz"
#define KV_REPORT_META "meta.json"
#define KV_REPORT_JUNIT "junit.xml"
#define KV_REPORT_HTML "report.html"
#define KV_REPORT_MATRIX "matrix.md"
#define KV_REPORT_FAILURES "failures.txt"
#define KV_REPORT_ACCURACY "accuracy.md"
#define KV_REPORT_ACCURACY_JSONL "accuracy.jsonl"

#endif
