/* The worker pool behind runner/isolate.h: fork, one socket per worker,
 * poll, timeouts, crash recovery. */
#include "runner/exec/isolate.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv/device.h"

/* "KVR1": a worker's answer starts with it, so a worker that wrote
 * something else on the socket is caught instead of misread. */
#define KV_ISOLATE_MAGIC 0x3152564bu

typedef struct kv_wire_header {
    uint32_t magic;
    int32_t case_index;
    int32_t count;
} kv_wire_header;

/* What one worker slot holds. pid 0: no process (never started, or dead
 * and not yet replaced). */
typedef struct kv_worker {
    pid_t pid;
    int fd;                     /* the parent's end of the socket */
    bool busy;
    int case_index;
    double started;             /* monotonic seconds */
    unsigned char *buf;         /* the answer received so far */
    size_t len, cap;
} kv_worker;

const char *kv_isolate_mode_name(kv_isolate_mode m) {
    switch (m) {
    case KV_ISOLATE_FORK: return "fork";
    case KV_ISOLATE_NONE: return "none";
    }
    return "?";
}

int kv_isolate_mode_parse(const char *text, kv_isolate_mode *out) {
    if (text == NULL) return -1;
    if (strcmp(text, "fork") == 0) {
        *out = KV_ISOLATE_FORK;
        return 0;
    }
    if (strcmp(text, "none") == 0) {
        *out = KV_ISOLATE_NONE;
        return 0;
    }
    return -1;
}

const char *kv_isolate_signal_abbrev(int sig) {
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGALRM: return "SIGALRM";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return NULL;
    }
}

void kv_isolate_case_row(kv_check_result *r, const kv_case *c, kv_result_status status,
                         double seconds, const char *fmt, ...) {
    memset(r, 0, sizeof *r);
    kv_case_id(c, r->case_id, sizeof r->case_id);
    snprintf(r->op, sizeof r->op, "%s", c->op);
    snprintf(r->check, sizeof r->check, "case");
    snprintf(r->backend, sizeof r->backend, "%s", kv_device_type_name(c->device.type));
    r->dtype = c->ninputs > 0 ? c->dtypes[0] : KV_F32;
    r->status = status;
    kv_case_repro(c, r->repro, sizeof r->repro);
    r->seconds = seconds;
    r->max_ulps = -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

static double kv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the child ---- */

static int kv_read_full(int fd, void *p, size_t n) {
    unsigned char *b = p;
    while (n > 0) {
        ssize_t k = read(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int kv_write_full(int fd, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Never returns. Exit status 0: the parent closed the socket (no more
 * work); 3: the parent sent an index out of range; 4: the socket broke. */
static void kv_worker_main(int fd, const kv_case *const *cases, int n, const kv_run_env *env) {
    for (;;) {
        int32_t idx;
        if (kv_read_full(fd, &idx, sizeof idx) != 0) _exit(0);
        if (idx < 0 || idx >= n) _exit(3);
        kv_result_list rl = { 0 };
        kv_case_run(cases[idx], env, &rl);
        kv_wire_header h = { KV_ISOLATE_MAGIC, idx, rl.n };
        if (kv_write_full(fd, &h, sizeof h) != 0 ||
            kv_write_full(fd, rl.items, (size_t)rl.n * sizeof *rl.items) != 0) {
            _exit(4);
        }
        kv_result_list_free(&rl);
    }
}

/* ---- the parent ---- */

typedef struct kv_pool {
    const kv_case *const *cases;
    int n;
    const kv_run_env *env;
    const kv_isolate_config *cfg;
    kv_worker *w;
    int nw;
    kv_result_list *per_case;   /* one list per case, joined in order at the end */
    bool *done;
    int ndone;
} kv_pool;

/* A handler the parent installed (a test framework's SIGSEGV handler
 * that longjmps, say) would let a crashed worker carry on as if it were
 * the parent: a crash must end the worker, visibly, by its signal. */
static void kv_worker_default_signals(void) {
    static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGPIPE, SIGTERM, SIGINT };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

static int kv_worker_start(kv_pool *p, int wi) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
    /* Whatever sits in stdio buffers now would otherwise be written twice:
     * once by us and once by a child that flushes its copy. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        kv_worker_default_signals();
        /* Another worker's parent end held open in here would keep that
         * worker from ever seeing EOF when the parent closes it. */
        for (int i = 0; i < p->nw; i++) {
            if (p->w[i].pid != 0 && i != wi) close(p->w[i].fd);
        }
        close(sv[0]);
        kv_worker_main(sv[1], p->cases, p->n, p->env);
        _exit(0);
    }
    close(sv[1]);
    p->w[wi].pid = pid;
    p->w[wi].fd = sv[0];
    p->w[wi].busy = false;
    p->w[wi].len = 0;
    return 0;
}

/* Forgets a worker that is dead or about to be: closes the socket and reaps
 * the process. Returns the wait status. */
static int kv_worker_reap(kv_worker *w, bool kill_it) {
    int status = 0;
    if (kill_it) kill(w->pid, SIGKILL);
    close(w->fd);
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
    }
    w->pid = 0;
    w->fd = -1;
    w->busy = false;
    w->len = 0;
    return status;
}

static kv_status kv_pool_record(kv_pool *p, int ci, const kv_check_result *rows, int count) {
    for (int i = 0; i < count; i++) {
        kv_status st = kv_result_list_push(&p->per_case[ci], &rows[i]);
        if (st != KV_OK) return st;
    }
    p->done[ci] = true;
    p->ndone++;
    return KV_OK;
}

static kv_status kv_pool_record_one(kv_pool *p, int ci, const kv_check_result *row) {
    return kv_pool_record(p, ci, row, 1);
}

/* The worker died (EOF) while running its case. */
static kv_status kv_worker_died(kv_pool *p, kv_worker *w) {
    const int ci = w->case_index;
    const double secs = kv_now() - w->started;
    const int status = kv_worker_reap(w, false);
    kv_check_result r;
    const kv_case *c = p->cases[ci];
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char *ab = kv_isolate_signal_abbrev(sig);
        kv_isolate_case_row(&r, c, KV_RESULT_CRASH, secs,
                            "worker killed by %s (signal %d: %s) while running this case", ab ? ab : "a signal",
                            sig, strsignal(sig));
    } else if (WIFEXITED(status)) {
        kv_isolate_case_row(&r, c, KV_RESULT_ERROR, secs,
                            "worker exited with status %d before reporting this case's results",
                            WEXITSTATUS(status));
    } else {
        kv_isolate_case_row(&r, c, KV_RESULT_ERROR, secs,
                            "worker ended (wait status 0x%x) before reporting this case's results", status);
    }
    return kv_pool_record_one(p, ci, &r);
}

/* Reads what is available; delivers a complete answer. */
static kv_status kv_worker_readable(kv_pool *p, kv_worker *w) {
    if (w->cap - w->len < 65536) {
        size_t cap = w->cap ? w->cap * 2 : 131072;
        unsigned char *nb = realloc(w->buf, cap);
        if (nb == NULL) return kv_error(KV_ERR_OOM, "isolate: out of memory reading a worker's results");
        w->buf = nb;
        w->cap = cap;
    }
    ssize_t k = read(w->fd, w->buf + w->len, w->cap - w->len);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) return KV_OK;
    if (k <= 0) return kv_worker_died(p, w);
    w->len += (size_t)k;
    if (w->len < sizeof(kv_wire_header)) return KV_OK;
    kv_wire_header h;
    memcpy(&h, w->buf, sizeof h);
    if (h.magic != KV_ISOLATE_MAGIC || h.case_index != w->case_index || h.count < 0) {
        const int ci = w->case_index;
        const double secs = kv_now() - w->started;
        kv_worker_reap(w, true);
        kv_check_result r;
        kv_isolate_case_row(&r, p->cases[ci], KV_RESULT_ERROR, secs,
                            "worker sent a malformed answer (something in the case wrote to the "
                            "runner's socket?)");
        return kv_pool_record_one(p, ci, &r);
    }
    const size_t need = sizeof h + (size_t)h.count * sizeof(kv_check_result);
    if (w->len < need) return KV_OK;
    if (w->len > need) {
        /* The worker answers one case at a time: extra bytes are garbage. */
        const int ci = w->case_index;
        kv_worker_reap(w, true);
        kv_check_result r;
        kv_isolate_case_row(&r, p->cases[ci], KV_RESULT_ERROR, 0,
                            "worker sent more than one answer for this case");
        return kv_pool_record_one(p, ci, &r);
    }
    /* memcpy into aligned rows: the byte buffer promises no alignment. */
    kv_status st = KV_OK;
    for (int i = 0; st == KV_OK && i < h.count; i++) {
        kv_check_result r;
        memcpy(&r, w->buf + sizeof h + (size_t)i * sizeof r, sizeof r);
        r.case_id[sizeof r.case_id - 1] = '\0';
        r.op[sizeof r.op - 1] = '\0';
        r.check[sizeof r.check - 1] = '\0';
        r.backend[sizeof r.backend - 1] = '\0';
        r.message[sizeof r.message - 1] = '\0';
        r.repro[sizeof r.repro - 1] = '\0';
        st = kv_result_list_push(&p->per_case[w->case_index], &r);
    }
    if (st != KV_OK) return st;
    p->done[w->case_index] = true;
    p->ndone++;
    w->busy = false;
    w->len = 0;
    return KV_OK;
}

/* Hands case `ci` to worker `wi`, starting a process when the slot has
 * none. A worker that died between cases is replaced once. */
static kv_status kv_worker_assign(kv_pool *p, int wi, int ci) {
    kv_worker *w = &p->w[wi];
    for (int attempt = 0; attempt < 2; attempt++) {
        if (w->pid == 0 && kv_worker_start(p, wi) != 0) {
            kv_check_result r;
            kv_isolate_case_row(&r, p->cases[ci], KV_RESULT_ERROR, 0, "cannot start a worker: %s",
                                strerror(errno));
            return kv_pool_record_one(p, ci, &r);
        }
        int32_t idx = ci;
        ssize_t k;
        do {
            k = send(w->fd, &idx, sizeof idx, MSG_NOSIGNAL);
        } while (k < 0 && errno == EINTR);
        if (k == (ssize_t)sizeof idx) {
            w->busy = true;
            w->case_index = ci;
            w->started = kv_now();
            w->len = 0;
            return KV_OK;
        }
        kv_worker_reap(w, true);
    }
    kv_check_result r;
    kv_isolate_case_row(&r, p->cases[ci], KV_RESULT_ERROR, 0,
                        "cannot hand the case to a worker: the worker died before it started");
    return kv_pool_record_one(p, ci, &r);
}

static kv_status kv_pool_timeouts(kv_pool *p) {
    const double now = kv_now();
    for (int i = 0; i < p->nw; i++) {
        kv_worker *w = &p->w[i];
        if (!w->busy || now - w->started < p->cfg->timeout_seconds) continue;
        const int ci = w->case_index;
        const double secs = now - w->started;
        kv_worker_reap(w, true);
        kv_check_result r;
        kv_isolate_case_row(&r, p->cases[ci], KV_RESULT_TIMEOUT, secs,
                            "timed out: still running after the %g s timeout (--timeout); worker killed "
                            "with SIGKILL",
                            p->cfg->timeout_seconds);
        kv_status st = kv_pool_record_one(p, ci, &r);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

static kv_status kv_pool_loop(kv_pool *p) {
    struct pollfd *pfd = calloc((size_t)p->nw, sizeof *pfd);
    int *pw = calloc((size_t)p->nw, sizeof *pw);
    if (pfd == NULL || pw == NULL) {
        free(pfd);
        free(pw);
        return kv_error(KV_ERR_OOM, "isolate: out of memory");
    }
    kv_status st = KV_OK;
    int next = 0;
    while (st == KV_OK && p->ndone < p->n) {
        for (int i = 0; st == KV_OK && i < p->nw && next < p->n; i++) {
            if (!p->w[i].busy) st = kv_worker_assign(p, i, next++);
        }
        if (st != KV_OK) break;
        int np = 0;
        double wait = -1;
        const double now = kv_now();
        for (int i = 0; i < p->nw; i++) {
            if (!p->w[i].busy) continue;
            pfd[np].fd = p->w[i].fd;
            pfd[np].events = POLLIN;
            pfd[np].revents = 0;
            pw[np++] = i;
            const double left = p->w[i].started + p->cfg->timeout_seconds - now;
            if (wait < 0 || left < wait) wait = left;
        }
        if (np == 0) continue; /* every case handed out was answered by the parent itself */
        int ms = wait <= 0 ? 0 : (int)(wait * 1000.0) + 1;
        int r = poll(pfd, (nfds_t)np, ms);
        if (r < 0 && errno != EINTR) {
            st = kv_error(KV_ERR_INTERNAL, "isolate: poll: %s", strerror(errno));
            break;
        }
        for (int j = 0; st == KV_OK && r > 0 && j < np; j++) {
            if (pfd[j].revents == 0) continue;
            kv_worker *w = &p->w[pw[j]];
            if (w->busy && w->fd == pfd[j].fd) st = kv_worker_readable(p, w);
        }
        if (st == KV_OK) st = kv_pool_timeouts(p);
    }
    free(pfd);
    free(pw);
    return st;
}

static void kv_run_inline(const kv_case *const *cases, int n, const kv_run_env *env, kv_result_list *per_case) {
    for (int i = 0; i < n; i++) kv_case_run(cases[i], env, &per_case[i]);
}

kv_status kv_isolate_run(const kv_case *const *cases, int n, const kv_run_env *env,
                         const kv_isolate_config *cfg, kv_result_list *out) {
    if (n < 0 || (n > 0 && cases == NULL) || env == NULL || cfg == NULL || out == NULL) {
        return kv_error(KV_ERR_INVALID_ARG, "isolate: argument 'cases': NULL or a negative count");
    }
    if (cfg->mode == KV_ISOLATE_FORK && (cfg->jobs < 1 || !(cfg->timeout_seconds > 0))) {
        return kv_error(KV_ERR_INVALID_ARG, "isolate: argument 'cfg': jobs must be >= 1 and the timeout > 0");
    }
    if (n == 0) return KV_OK;
    kv_result_list *per_case = calloc((size_t)n, sizeof *per_case);
    if (per_case == NULL) return kv_error(KV_ERR_OOM, "isolate: out of memory");
    kv_status st = KV_OK;
    switch (cfg->mode) {
    case KV_ISOLATE_NONE:
        kv_run_inline(cases, n, env, per_case);
        break;
    case KV_ISOLATE_FORK: {
        kv_pool p = { .cases = cases, .n = n, .env = env, .cfg = cfg };
        p.nw = cfg->jobs < n ? cfg->jobs : n;
        p.w = calloc((size_t)p.nw, sizeof *p.w);
        p.done = calloc((size_t)n, sizeof *p.done);
        p.per_case = per_case;
        if (p.w == NULL || p.done == NULL) {
            st = kv_error(KV_ERR_OOM, "isolate: out of memory");
        } else {
            for (int i = 0; i < p.nw; i++) p.w[i].fd = -1;
            st = kv_pool_loop(&p);
            /* Closing the socket is the "no more work" message; workers
             * that are still busy (only after an error) are killed. */
            for (int i = 0; i < p.nw; i++) {
                if (p.w[i].pid != 0) kv_worker_reap(&p.w[i], p.w[i].busy);
                free(p.w[i].buf);
            }
        }
        free(p.w);
        free(p.done);
        break;
    }
    }
    for (int i = 0; i < n; i++) {
        if (st == KV_OK) st = kv_result_list_extend(out, &per_case[i]);
        kv_result_list_free(&per_case[i]);
    }
    free(per_case);
    return st;
}
