/* Running cases in forked workers (DESIGN.md section 6, "Isolation").
 *
 * A pool of `jobs` worker processes, forked from the caller, each runs one
 * case at a time (kv_case_run in the child) and sends the case's
 * kv_check_result rows back over a socket: a header (magic, case index,
 * row count) and the rows as raw bytes. Rows are plain structs and parent
 * and child are the same program, so no serialization is needed.
 *
 * The parent multiplexes the workers with poll() and
 *   - kills a worker whose case runs past the timeout (SIGKILL): the case
 *     gets one TIMEOUT row naming the timeout;
 *   - notices a worker that died on a signal (waitpid, WIFSIGNALED): the
 *     case gets one CRASH row naming the signal;
 *   - notices a worker that exited, or sent garbage, without a full
 *     answer: one ERROR row;
 * and in every one of those starts a fresh worker and carries on. Rows the
 * dead worker had not yet sent are lost: the one row stands for the whole
 * case (its check is "case").
 *
 * Attribution (runner/exec/inflight.h): each worker records the backend
 * kernel in flight in memory shared with the parent. A crash or timeout
 * inside a kernel names it ("in the add.Tensor kernel of Plugin0, check
 * memory:Plugin0") and the row's backend is that kernel's; when that
 * backend is not the case's own device (a plugin swept by a cpu case), the
 * case is run again without it, so the other backends' rows survive
 * (after the crash row). A worker past its memory cap (cfg->worker_mem_mib)
 * that dies is reported as "worker out of memory (cap N MiB)"; a worker
 * that grew past half its cap is replaced after its case.
 *
 * Output: a worker's stdout and stderr go to a file of its own, emptied
 * before each case; what the case printed (a plugin's debug lines) is
 * attached to every row of the case (kv_check_result.output), crash rows
 * included. The parent's own stdout and stderr are untouched.
 *
 * Workers are forked lazily from the calling process, so they inherit
 * everything the caller set up before the call: kv_init, the golden store,
 * ops and kernels registered at run time (tests register bad kernels this
 * way). Results come back in case order whatever `jobs` is, so reports do
 * not depend on scheduling.
 *
 * KV_ISOLATE_NONE runs the cases in the calling process, one after the
 * other, with no timeout: for debugging a kernel under gdb, and for golden
 * regeneration (golden store writes happen in the parent only). */
#ifndef KV_RUNNER_ISOLATE_H
#define KV_RUNNER_ISOLATE_H

#include <signal.h>

#include "kv/status.h"
#include "runner/case/case.h"
#include "runner/check/check.h"
#include "runner/check/result.h"

typedef enum kv_isolate_mode {
    KV_ISOLATE_FORK,   /* forked workers, timeout, crash recovery (the default) */
    KV_ISOLATE_NONE    /* in-process, sequential, no timeout */
} kv_isolate_mode;

/* "fork", "none". */
const char *kv_isolate_mode_name(kv_isolate_mode m);
/* 0 on success, -1 if `text` is not a mode name. */
int kv_isolate_mode_parse(const char *text, kv_isolate_mode *out);

/* Told about each case as the pool starts and finishes it (the progress
 * line, runner/exec/progress.h); any callback may be NULL. `ci` indexes the
 * cases given to kv_isolate_run; a case run again without a crashed
 * backend starts twice but finishes once, with all its rows. */
typedef struct kv_isolate_observer {
    void (*started)(void *ctx, int ci);
    void (*finished)(void *ctx, int ci, const kv_result_list *rows);
    /* Called at least every KV_ISOLATE_TICK_SECONDS while cases run (fork
     * mode), so a live line can show the time of a case that hangs. */
    void (*tick)(void *ctx);
    void *ctx;
} kv_isolate_observer;

#define KV_ISOLATE_TICK_SECONDS 0.25

typedef struct kv_isolate_config {
    kv_isolate_mode mode;
    int jobs;                  /* workers (fork mode), >= 1 */
    double timeout_seconds;    /* per case (fork mode), > 0 */
    /* Address-space cap of each worker in MiB (setrlimit RLIMIT_AS), so a
     * leaking kernel fails its own case instead of eating the machine.
     * 0: KV_WORKER_MEM from the environment, else KV_ISOLATE_DEFAULT_MEM_MIB;
     * negative: no cap. Sanitizer builds (ASan, TSan) never cap: their
     * shadow memory alone is terabytes of address space. */
    int worker_mem_mib;
    const kv_isolate_observer *observer;  /* NULL: nobody is told */
    /* Set (by a signal handler) to stop the run: no case is started any
     * more, running workers are killed, and kv_isolate_run returns the
     * rows of the cases that finished only. NULL: never stops. */
    const volatile sig_atomic_t *stop;
} kv_isolate_config;

#define KV_ISOLATE_DEFAULT_MEM_MIB 4096

/* The cap cfg asks for, in MiB (the rule above); -1: none. An unparsable
 * KV_WORKER_MEM is an error naming it. */
kv_status kv_isolate_worker_mem(const kv_isolate_config *cfg, int *mib);

/* Runs cases[0..n) and appends their rows to `out`, case by case in index
 * order (after a stop, the finished cases' only). `out` may be NULL when
 * the observer has a `finished` callback: then each case's rows live only
 * until the observer has seen them, so the caller's memory does not grow
 * with the number of cases (kvrun streams them to results.jsonl). Workers ignore SIGINT and
 * SIGTERM, which a terminal or CI runner sends to the whole process group:
 * the parent decides (cfg->stop) and kills them; and they die with the
 * parent (PR_SET_PDEATHSIG), so a kvrun killed by SIGKILL leaves none. Returns KV_OK once every case has rows (a crash, hang or failed
 * fork becomes that case's row, never a failure of the call); an error
 * only for bad arguments or when `out` cannot grow. */
kv_status kv_isolate_run(const kv_case *const *cases, int n, const kv_run_env *env,
                         const kv_isolate_config *cfg, kv_result_list *out);

/* One row that stands for case `c` as a whole (check "case"): what the
 * parent records for a crash, a timeout or a harness error. `message` is
 * printf style. */
void kv_isolate_case_row(kv_check_result *r, const kv_case *c, kv_result_status status,
                         double seconds, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* "SIGSEGV" for the common signals, else NULL. */
const char *kv_isolate_signal_abbrev(int sig);

#endif
