/* Probing a plugin in a forked child before it is loaded for real.
 *
 * A plugin's constructors, entry point and register_kernels are vendor
 * code running inside kvrun: a crash there would kill the run with no
 * report, an exit(0) would end it green, a hang would stall it forever.
 * So the loader first does the whole load in a child (kv_backend_probe),
 * which tells the parent over a pipe which stage it is in and how the load
 * ended. Only a child that came back with an answer lets the parent load
 * the plugin itself; otherwise the plugin is recorded as failed, naming
 * what happened and in which stage. The parent is single-threaded at
 * start-up, when plugins are loaded, so forking it is safe. */
#include "backend/backend_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>

/* Loading real vendor libraries (a CUDA driver, oneDNN) takes a few
 * seconds at worst; a plugin that needs 30 is broken or hanging. */
#define KV_PROBE_DEFAULT_TIMEOUT 30.0

static int g_stage_fd = -1;

void kv_backend_probe_stage(const char *stage) {
    if (g_stage_fd < 0) return;
    char line[160];
    const int n = snprintf(line, sizeof line, "S %s\n", stage);
    if (n > 0 && write(g_stage_fd, line, (size_t)n) < 0) {
        /* The parent has gone; nothing useful to do in the child. */
    }
}

kv_status kv_backend_probe_timeout(double *out) {
    const char *v = getenv("KV_BACKEND_PROBE_TIMEOUT");
    *out = KV_PROBE_DEFAULT_TIMEOUT;
    if (v == NULL) return KV_OK;
    char *end = NULL;
    errno = 0;
    const double t = strtod(v, &end);
    if (v[0] == '\0' || end == v || *end != '\0' || errno != 0 || !(t > 0) || t > 86400)
        return kv_error(KV_ERR_INVALID_ARG,
                        "KV_BACKEND_PROBE_TIMEOUT: expected seconds, a number in (0, 86400], got '%s'", v);
    *out = t;
    return KV_OK;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last "S stage" line and whether an "R" (result) line came. */
static void scan(const char *buf, char *stage, size_t cap, bool *answered) {
    const char *p = buf;
    while (*p) {
        const char *eol = strchr(p, '\n');
        if (eol == NULL) break;
        if (p[0] == 'S' && p[1] == ' ') {
            size_t n = (size_t)(eol - p - 2);
            if (n >= cap) n = cap - 1;
            memcpy(stage, p + 2, n);
            stage[n] = '\0';
        } else if (p[0] == 'R') {
            *answered = true;
        }
        p = eol + 1;
    }
}

int kv_backend_probe(const char *path, kv_status (*load)(const char *path), char *why, size_t cap) {
    double timeout = KV_PROBE_DEFAULT_TIMEOUT;
    if (kv_backend_probe_timeout(&timeout) != KV_OK) {
        snprintf(why, cap, "%s", kv_last_error_message());
        return -1;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, cap, "cannot probe it: pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(why, cap, "cannot probe it: fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        /* A host (a test framework, a crash reporter) may catch SIGSEGV and
         * carry on; in the child that would turn a plugin's crash into a
         * second copy of the host running on with the loader's lock held.
         * The child must die of what the plugin did. */
        static const int fatal[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS };
        for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++) signal(fatal[i], SIG_DFL);
        /* A kvrun killed while it probes cannot reap a child spinning in
         * a plugin's constructor: the kernel kills it. The parent may have
         * died before the call, so its pid is checked after it. */
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        if (getppid() != parent) _exit(4);
        g_stage_fd = fds[1];
        const kv_status st = load(path);
        char line[64];
        const int n = snprintf(line, sizeof line, "R %d\n", (int)st);
        if (n > 0 && write(fds[1], line, (size_t)n) < 0) _exit(3);
        _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    size_t used = 0;
    const double deadline = now_seconds() + timeout;
    bool timed_out = false;
    for (;;) {
        const double left = deadline - now_seconds();
        if (left <= 0) {
            timed_out = true;
            break;
        }
        struct pollfd pfd = { fds[0], POLLIN, 0 };
        const int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) continue;
        const ssize_t got = read(fds[0], buf + used, sizeof buf - 1 - used);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break; /* EOF: the child is done, one way or another */
        used += (size_t)got;
        if (used >= sizeof buf - 1) used = 0; /* only the latest lines matter */
        buf[used] = '\0';
    }
    close(fds[0]);
    buf[used] = '\0';
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    char stage[128] = "dlopen";
    bool answered = false;
    scan(buf, stage, sizeof stage, &answered);
    if (timed_out) {
        snprintf(why, cap, "it did not finish loading within %g s (hung in %s; KV_BACKEND_PROBE_TIMEOUT sets the limit)",
                 timeout, stage);
        return -1;
    }
    if (answered && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFSIGNALED(status)) {
        snprintf(why, cap, "it crashed while loading: killed by signal %d (%s) in %s", WTERMSIG(status),
                 strsignal(WTERMSIG(status)), stage);
    } else if (WIFEXITED(status)) {
        snprintf(why, cap, "it ended the process while loading: exit(%d) in %s", WEXITSTATUS(status), stage);
    } else {
        snprintf(why, cap, "its probe ended abnormally in %s", stage);
    }
    return -1;
}
