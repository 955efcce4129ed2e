/* What kvrun says while cases run (README "Progress"), on its stderr:
 *
 *   at a terminal (isatty)  one live status line, redrawn in place: cases
 *                           done/total, rows per status, the slowest case
 *                           running now with its time, the ETA;
 *   elsewhere (CI logs)     a plain line every KV_PROGRESS_SECONDS seconds
 *                           (default 30; 0: only the 10% lines) and each
 *                           time another 10% of the cases is done;
 *   both                    each failing row (FAIL, ERROR, CRASH, TIMEOUT)
 *                           as one line when its case finishes, once: the
 *                           status, the case ID, check and backend. The
 *                           full block (message, mismatches, repro) stays
 *                           in the final summary, so it is not printed
 *                           twice;
 *   -v (verbose)            also one line per case as it finishes, with
 *                           its worst status, row count and time;
 *   -q (quiet)              nothing: only the final summary.
 *
 * The live line is erased before anything else is printed, and at the
 * end, so the summary that follows reads exactly as without it. */
#ifndef KV_RUNNER_PROGRESS_H
#define KV_RUNNER_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kv/status.h"
#include "runner/exec/isolate.h"

#define KV_PROGRESS_DEFAULT_SECONDS 30.0

typedef enum kv_progress_level {
    KV_PROGRESS_QUIET = -1,
    KV_PROGRESS_NORMAL = 0,
    KV_PROGRESS_VERBOSE = 1
} kv_progress_level;

typedef struct kv_progress {
    FILE *out;
    bool tty;                    /* the live line; else plain lines */
    kv_progress_level level;
    double interval;             /* plain lines, seconds; 0: only every 10% */
    const kv_case *const *cases;
    int total, done;
    int64_t counts[KV_RESULT_STATUS_COUNT];
    double *started;             /* per case: when it started running, 0: not running */
    double t0, last_plain, last_draw;
    int last_tenth;              /* the 10% step of the last plain line */
    bool drawn;                  /* the live line is on the screen */
    kv_isolate_observer observer;
} kv_progress;

/* KV_PROGRESS_SECONDS: a number of seconds from 0 to 86400; unset: the
 * default. Empty or anything else is a configuration error naming it. */
kv_status kv_progress_seconds_env(double *seconds);

/* Sets p up for cases[0..n) on `out`; interval < 0 reads
 * KV_PROGRESS_SECONDS. p->observer is what kv_isolate_config.observer
 * points to. `tty` is normally isatty(out). */
kv_status kv_progress_init(kv_progress *p, FILE *out, bool tty, const kv_case *const *cases, int n,
                           kv_progress_level level, double interval);
/* Erases the live line and frees what init took. */
void kv_progress_end(kv_progress *p);

#endif
