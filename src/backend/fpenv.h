/* The floating-point environment a plugin must leave as it found it
 * (docs/plugin-abi.md, "Promises"): rounding mode, exception masks, and on
 * x86 the SSE flush-to-zero / denormals-are-zero bits and the x87
 * precision control. Exception *flags* are not part of it: a kernel may
 * raise them.
 *
 * In the backend layer because loading is where it is first at stake: the
 * loader compares it around a plugin's constructors, entry point and
 * register_kernels (a library built with -ffast-math sets FTZ/DAZ as it
 * loads). The runner's worker compares it around every backend kernel it
 * calls (runner/exec/inflight.c), never in the dispatcher: the reads are a
 * few instructions, but the dispatcher's fast path has no room for them. */
#ifndef KV_BACKEND_FPENV_H
#define KV_BACKEND_FPENV_H

#include <stdbool.h>

typedef struct kv_fpenv {
    int round;             /* fegetround() */
    int except_mask;       /* fegetexcept(): the enabled (trapping) exceptions */
    unsigned mxcsr;        /* x86: MXCSR without its status flags; 0 elsewhere */
    unsigned x87_control;  /* x86: the x87 control word; 0 elsewhere */
} kv_fpenv;

kv_fpenv kv_fpenv_read(void);
bool kv_fpenv_equal(const kv_fpenv *a, const kv_fpenv *b);
/* Puts `want` back (what changed only; exception flags are kept). */
void kv_fpenv_restore(const kv_fpenv *want);
/* "rounding mode to-nearest -> toward-zero" and so on, for each part
 * that differs. */
void kv_fpenv_describe(const kv_fpenv *before, const kv_fpenv *after, char *buf, int cap);

#endif
