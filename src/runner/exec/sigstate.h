/* Signal handlers and the signal mask a plugin's kernel must leave as it
 * found them (docs/plugin-abi.md, "Promises"): the worker's crash and
 * timeout reports rest on the default dispositions of the crash signals,
 * and a vendor runtime's handler that swallows a crash (or ignores
 * SIGTERM) turns a crash into a clean exit or a hang.
 *
 * Read around each memory:<backend> row (runner/check/check_memory.c),
 * not around every call: reading a disposition is a system call (about
 * 2 us each on the 2 shared cores this was measured on, 30 us for the
 * set), too slow for every kernel call of the suite. */
#ifndef KV_RUNNER_SIGSTATE_H
#define KV_RUNNER_SIGSTATE_H

#include <signal.h>
#include <stdbool.h>

/* The signals read: the crash signals, the ones the runner and its parent
 * send or wait for, and SIGPIPE (report streams). */
#define KV_SIGSTATE_N 14

typedef struct kv_sigstate {
    bool ok; /* false when it could not be read: nothing is compared */
    struct sigaction act[KV_SIGSTATE_N];
    sigset_t mask;
} kv_sigstate;

void kv_sigstate_read(kv_sigstate *s);
/* true when now is `before`; otherwise describes the first difference in
 * `what` ("the handler of SIGSEGV (11)") and puts every one back. */
bool kv_sigstate_check_restore(const kv_sigstate *before, char *what, int cap);

#endif
