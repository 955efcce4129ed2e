/* Instruction counts per call for kvrun --mode=perf --perf-metric=
 * instructions (docs/performance.md, "Instruction counts"): a time is only
 * as good as the machine is calm, a count of retired instructions is the
 * same on every run of the same binary, so a comparison needs no
 * statistics (docs/compare.md).
 *
 * Two sources count:
 *   hardware   the CPU's retired-instruction counter through
 *              perf_event_open (PERF_COUNT_HW_INSTRUCTIONS, user space
 *              only: exclude_kernel, exclude_hv), of the calling thread
 *              and the threads it starts during the call (inherit);
 *   callgrind  Valgrind's callgrind, where no counter can be opened (a VM
 *              that exposes none, perf_event_paranoid): kvrun re-executes
 *              the perf run under `valgrind --tool=callgrind
 *              --instr-atstart=no` (icount_run.c), and each measured call
 *              is instrumented alone (every thread), its cost zeroed
 *              before and dumped after (callgrind.h's client requests);
 *              the dump's "totals:" line is the call's Ir count.
 * The two count differently (a VM's guest code against the CPU's retired
 * instructions), so runs of different sources are not compared. */
#ifndef KV_RUNNER_ICOUNT_H
#define KV_RUNNER_ICOUNT_H

#include <stdint.h>
#include <stdio.h>

#include "kv/status.h"

typedef enum kv_icount_source {
    KV_ICOUNT_AUTO,      /* hardware when it opens, else callgrind */
    KV_ICOUNT_HARDWARE,
    KV_ICOUNT_CALLGRIND,
} kv_icount_source;

/* "auto", "hardware", "callgrind". */
const char *kv_icount_source_name(kv_icount_source s);
/* The inverse of kv_icount_source_name; -1 when s names none. */
int kv_icount_source_parse(const char *s, kv_icount_source *out);

/* The variable through which kvrun tells its callgrind child where the
 * dumps go (a path prefix); set by kvrun only, never by a user. */
#define KV_ICOUNT_CALLGRIND_ENV "KV_PERF_CALLGRIND_OUT"

typedef struct kv_icount {
    kv_icount_source source; /* HARDWARE or CALLGRIND once open */
    int fd;                  /* the hardware counter */
    char out[4096];          /* callgrind: the dumps' path prefix */
    int dumps;               /* callgrind: dumps made (callgrind numbers them from 1) */
} kv_icount;

/* Opens a source (not AUTO). An error names why it cannot count: the
 * counter's errno and what it means (no counter in this CPU or VM,
 * perf_event_paranoid and its value), or for callgrind that this process
 * does not run under Valgrind or the variable above is missing. */
kv_status kv_icount_open(kv_icount *c, kv_icount_source source);
/* Around one measured call: start, the call, stop. stop gives its count;
 * an error (a counter read that failed, a dump callgrind did not write)
 * names what. */
void kv_icount_start(kv_icount *c);
kv_status kv_icount_stop(kv_icount *c, uint64_t *count);
void kv_icount_close(kv_icount *c);

/* The "totals:" (or, without one, "summary:") count of a callgrind dump
 * with one event (Ir). An error names the file and what is wrong. */
kv_status kv_icount_read_dump(const char *path, uint64_t *count);

#endif
