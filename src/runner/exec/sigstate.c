/* Signal dispositions and mask around a plugin's calls
 * (runner/exec/sigstate.h). */
#define _GNU_SOURCE /* sigabbrev_np */
#include "runner/exec/sigstate.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static const int sigstate_signals[KV_SIGSTATE_N] = {
    SIGSEGV, SIGBUS, SIGFPE,  SIGILL,  SIGABRT, SIGTRAP, SIGSYS,
    SIGALRM, SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD, SIGXCPU,
};

void kv_sigstate_read(kv_sigstate *s) {
    s->ok = pthread_sigmask(SIG_SETMASK, NULL, &s->mask) == 0;
    for (int i = 0; i < KV_SIGSTATE_N && s->ok; i++) s->ok = sigaction(sigstate_signals[i], NULL, &s->act[i]) == 0;
}

/* Linux's SA_RESTORER, which glibc adds to the flags of every action it
 * installs (its own return trampoline) and the kernel reports back:
 * putting an action back adds it, so it is no difference. */
#define SIGSTATE_RESTORER 0x04000000

/* The handler (one pointer: sa_handler and sa_sigaction share it) and,
 * for a handler function, its flags decide what a signal does. */
static bool sigstate_same_action(const struct sigaction *a, const struct sigaction *b) {
    if (a->sa_handler != b->sa_handler) return false;
    if (a->sa_handler == SIG_DFL || a->sa_handler == SIG_IGN) return true;
    return (a->sa_flags & ~SIGSTATE_RESTORER) == (b->sa_flags & ~SIGSTATE_RESTORER);
}

bool kv_sigstate_check_restore(const kv_sigstate *before, char *what, int cap) {
    if (!before->ok) return true;
    kv_sigstate now;
    kv_sigstate_read(&now);
    if (!now.ok) return true;
    bool same = true;
    if (cap > 0) what[0] = '\0';
    for (int i = 0; i < KV_SIGSTATE_N; i++) {
        if (sigstate_same_action(&before->act[i], &now.act[i])) continue;
        const int sig = sigstate_signals[i];
        if (same)
            snprintf(what, (size_t)cap, "the handler of SIG%s (signal %d): %s -> %s", sigabbrev_np(sig), sig,
                     before->act[i].sa_handler == SIG_DFL   ? "default"
                     : before->act[i].sa_handler == SIG_IGN ? "ignored"
                                                            : "the runner's handler",
                     now.act[i].sa_handler == SIG_DFL   ? "default"
                     : now.act[i].sa_handler == SIG_IGN ? "ignored"
                                                        : "another handler");
        same = false;
        (void)sigaction(sig, &before->act[i], NULL);
    }
    for (int i = 0; i < KV_SIGSTATE_N; i++) {
        const int sig = sigstate_signals[i];
        if (sigismember(&before->mask, sig) == sigismember(&now.mask, sig)) continue;
        if (same)
            snprintf(what, (size_t)cap, "the signal mask: SIG%s (signal %d) %s", sigabbrev_np(sig), sig,
                     sigismember(&now.mask, sig) ? "blocked" : "unblocked");
        same = false;
        (void)pthread_sigmask(SIG_SETMASK, &before->mask, NULL);
        break;
    }
    return same;
}
