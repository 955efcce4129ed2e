/* The worker pool behind runner/isolate.h: fork, one socket per worker,
 * poll, timeouts, crash recovery. */
/* MAP_ANONYMOUS (the shared in-flight slots) and sigaltstack (the crash
 * handler) are not in POSIX.1-2008 proper. */
#define _DEFAULT_SOURCE
#include "runner/exec/isolate.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv/device.h"
#include "runner/exec/inflight.h"

/* "KVR1": a worker's answer starts with it, so a worker that wrote
 * something else on the socket is caught instead of misread. */
#define KV_ISOLATE_MAGIC 0x3152564bu

typedef struct kv_wire_header {
    uint32_t magic;
    int32_t case_index;
    int32_t count;
    int32_t retiring; /* 1: the worker exits after this answer (past half its memory cap) */
} kv_wire_header;

/* What the parent sends: the case, and the backend keys to leave out (a
 * rerun after one of them crashed the case). */
typedef struct kv_wire_request {
    int32_t case_index;
    int32_t pad;
    uint64_t exclude;
} kv_wire_request;

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
    int out_fd;                 /* its stdout/stderr file (the parent's descriptor), -1: none */
    kv_inflight *slot;          /* its kernel in flight (shared memory) */
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

/* Sanitizer runtimes reserve terabytes of address space for their shadow
 * memory: under an address-space cap they cannot even start, so those
 * builds run their workers uncapped. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KV_ISOLATE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define KV_ISOLATE_SANITIZED 1
#endif
#endif
#ifndef KV_ISOLATE_SANITIZED
#define KV_ISOLATE_SANITIZED 0
#endif

kv_status kv_isolate_worker_mem(const kv_isolate_config *cfg, int *mib) {
    const char *env = getenv("KV_WORKER_MEM");
    long v = KV_ISOLATE_DEFAULT_MEM_MIB;
    if (env != NULL && env[0] == '\0')
        return kv_error(KV_ERR_INVALID_ARG, "KV_WORKER_MEM: empty value (unset it, or give a cap in MiB; 0: no cap)");
    if (env != NULL) {
        char *end = NULL;
        errno = 0;
        v = strtol(env, &end, 10);
        if (errno != 0 || end == env || *end != '\0' || v < 0 || v > (1L << 22))
            return kv_error(KV_ERR_INVALID_ARG,
                            "KV_WORKER_MEM=%s: must be a worker memory cap in MiB (0: no cap, at most 4194304)", env);
    }
    if (cfg->worker_mem_mib != 0) v = cfg->worker_mem_mib;
    *mib = KV_ISOLATE_SANITIZED || v <= 0 ? -1 : (int)v;
    return KV_OK;
}

/* The page size, read once before any handler can run (sysconf is not
 * async-signal-safe). */
static long kv_page_size = 4096;

/* The worker's address-space size in MiB (/proc/self/statm), -1 if
 * unknown. Only async-signal-safe calls: the crash handler uses it. */
static long kv_vm_mib(void) {
    const int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return -1;
    char b[64];
    const ssize_t k = read(fd, b, sizeof b - 1);
    close(fd);
    if (k <= 0) return -1;
    long pages = 0;
    for (ssize_t i = 0; i < k && b[i] >= '0' && b[i] <= '9'; i++) pages = pages * 10 + (b[i] - '0');
    return (long)(((long long)pages * kv_page_size) >> 20);
}

/* The worker's slot, for the crash handler. */
static kv_inflight *kv_worker_slot;

/* On a fatal signal: note how big the worker was (so the parent can say
 * it ran out of memory), then die of the same signal. SA_RESETHAND has
 * put the default action back already. */
static void kv_worker_fatal(int sig) {
    if (kv_worker_slot != NULL) kv_worker_slot->vm_mib_at_death = kv_vm_mib();
    raise(sig);
}

static void kv_worker_catch_fatal(void) {
    static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS };
    /* A stack overflow must still reach the handler. */
    static char alt[1 << 16];
    stack_t ss = { .ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0 };
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = kv_worker_fatal;
    sa.sa_flags = SA_RESETHAND | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
}

/* What the worker printed since its file was last emptied: printable
 * ASCII, newlines and tabs kept, other bytes as '?', trailing newlines
 * dropped, "..." when cut. */
static void kv_capture_read(int fd, char *buf, size_t cap) {
    buf[0] = '\0';
    if (fd < 0 || cap < 8) return;
    const ssize_t k = pread(fd, buf, cap - 1, 0);
    if (k <= 0) return;
    size_t n = (size_t)k;
    for (size_t i = 0; i < n; i++) {
        const unsigned char u = (unsigned char)buf[i];
        if (u != '\n' && u != '\t' && (u < 0x20 || u >= 0x7F)) buf[i] = '?';
    }
    const bool cut = n == cap - 1;
    while (n > 0 && buf[n - 1] == '\n') n--;
    buf[n] = '\0';
    if (cut) memcpy(buf + cap - 4, "...", 4);
}

/* Never returns. Exit status 0: the parent closed the socket (no more
 * work), or the worker grew past half its memory cap and leaves the rest
 * to a fresh one; 3: the parent sent an index out of range; 4: the socket
 * broke. */
static void kv_worker_main(int fd, const kv_case *const *cases, int n, const kv_run_env *env, kv_inflight *slot,
                           int out_fd, int mem_mib) {
    kv_worker_slot = slot;
    const long page = sysconf(_SC_PAGESIZE);
    if (page > 0) kv_page_size = page;
    kv_inflight_attach(slot);
    kv_worker_catch_fatal();
    if (out_fd >= 0) {
        fflush(NULL);
        dup2(out_fd, STDOUT_FILENO);
        dup2(out_fd, STDERR_FILENO);
        close(out_fd);
    }
    if (mem_mib > 0) {
        const struct rlimit rl = { (rlim_t)mem_mib << 20, (rlim_t)mem_mib << 20 };
        setrlimit(RLIMIT_AS, &rl);
    }
    static char captured[KV_RESULT_OUTPUT_MAX];
    for (;;) {
        kv_wire_request req;
        if (kv_read_full(fd, &req, sizeof req) != 0) _exit(0);
        if (req.case_index < 0 || req.case_index >= n) _exit(3);
        kv_inflight_reset();
        kv_inflight_set_excluded((kv_keyset)req.exclude);
        if (out_fd >= 0 && ftruncate(STDOUT_FILENO, 0) != 0) {
            /* Output of an earlier case may then show again: harmless. */
        }
        kv_result_list rl = { 0 };
        const long vm0 = mem_mib > 0 ? kv_vm_mib() : 0;
        kv_case_run(cases[req.case_index], env, &rl);
        kv_inflight_reset();
        /* Past half the cap: a leak (nothing the suite runs needs that
         * much). Say so on the case that crossed the line, and leave the
         * rest to a fresh worker below. */
        const long vm1 = mem_mib > 0 ? kv_vm_mib() : 0;
        const bool bloated = mem_mib > 0 && vm1 > mem_mib / 2;
        if (bloated) {
            kv_check_result r;
            kv_isolate_case_row(&r, cases[req.case_index], KV_RESULT_ERROR, 0,
                                "worker memory grew from %ld to %ld MiB during this case, past half its cap "
                                "(%d MiB, KV_WORKER_MEM): a host-memory leak in a kernel? The worker is replaced",
                                vm0, vm1, mem_mib);
            kv_result_list_push(&rl, &r);
        }
        if (out_fd >= 0) {
            fflush(stdout);
            fflush(stderr);
            kv_capture_read(STDOUT_FILENO, captured, sizeof captured);
            for (int i = 0; i < rl.n; i++) memcpy(rl.items[i].output, captured, sizeof captured);
        }
        kv_wire_header h = { KV_ISOLATE_MAGIC, req.case_index, rl.n, bloated ? 1 : 0 };
        if (kv_write_full(fd, &h, sizeof h) != 0 ||
            kv_write_full(fd, rl.items, (size_t)rl.n * sizeof *rl.items) != 0) {
            _exit(4);
        }
        kv_result_list_free(&rl);
        /* A worker that leaked this much would fail innocent cases next. */
        if (bloated) _exit(0);
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
    kv_inflight *slots;         /* one per worker, MAP_SHARED */
    uint64_t *exclude;          /* per case: backend keys its next run leaves out */
    int *retry;                 /* cases to run again (without a crashed backend) */
    bool discard;               /* no output list: a case's rows are freed once the observer saw them */
    int nretry;
    int mem_mib;                /* the workers' cap, -1: none */
} kv_pool;

/* A handler the parent installed (a test framework's SIGSEGV handler
 * that longjmps, say) would let a crashed worker carry on as if it were
 * the parent: a crash must end the worker, visibly, by its signal. */
static void kv_worker_default_signals(void) {
    static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGPIPE };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
    /* Ctrl-C and a CI runner's SIGTERM reach the whole process group: a
     * worker dying of them would be a CRASH row of an innocent case. The
     * parent stops the run and kills its workers itself. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
#ifdef __linux__
    /* A parent killed by SIGKILL cannot kill its workers: the kernel does. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* A file for a worker's stdout and stderr: unlinked at once, so nothing
 * is left behind; O_APPEND, so emptying it between cases is enough. */
static int kv_capture_file(void) {
    const char *dir = getenv("TMPDIR");
    char path[512];
    snprintf(path, sizeof path, "%s/kvrun-worker-XXXXXX", dir && dir[0] ? dir : "/tmp");
    const int fd = mkstemp(path);
    if (fd < 0) return -1;
    unlink(path);
    fcntl(fd, F_SETFL, O_APPEND);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

static int kv_worker_start(kv_pool *p, int wi) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return -1;
    /* Without a file the case's output simply goes to the console. */
    const int out_fd = kv_capture_file();
    /* Whatever sits in stdio buffers now would otherwise be written twice:
     * once by us and once by a child that flushes its copy. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        if (out_fd >= 0) close(out_fd);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        kv_worker_default_signals();
        /* Another worker's parent end held open in here would keep that
         * worker from ever seeing EOF when the parent closes it. */
        for (int i = 0; i < p->nw; i++) {
            if (p->w[i].pid != 0 && i != wi) {
                close(p->w[i].fd);
                if (p->w[i].out_fd >= 0) close(p->w[i].out_fd);
            }
        }
        close(sv[0]);
        kv_worker_main(sv[1], p->cases, p->n, p->env, &p->slots[wi], out_fd, p->mem_mib);
        _exit(0);
    }
    close(sv[1]);
    p->w[wi].pid = pid;
    p->w[wi].fd = sv[0];
    p->w[wi].out_fd = out_fd;
    p->w[wi].slot = &p->slots[wi];
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
    if (w->out_fd >= 0) close(w->out_fd);
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
    }
    w->pid = 0;
    w->fd = -1;
    w->out_fd = -1;
    w->busy = false;
    w->len = 0;
    return status;
}

/* Case ci has all its rows: counted, and the observer is told. */
static void kv_pool_case_done(kv_pool *p, int ci) {
    p->done[ci] = true;
    p->ndone++;
    const kv_isolate_observer *ob = p->cfg->observer;
    if (ob != NULL && ob->finished != NULL) ob->finished(ob->ctx, ci, &p->per_case[ci]);
    /* Without an output list the observer was the rows' only reader. */
    if (p->discard) kv_result_list_free(&p->per_case[ci]);
}

static kv_status kv_pool_record(kv_pool *p, int ci, const kv_check_result *rows, int count) {
    for (int i = 0; i < count; i++) {
        kv_status st = kv_result_list_push(&p->per_case[ci], &rows[i]);
        if (st != KV_OK) return st;
    }
    kv_pool_case_done(p, ci);
    return KV_OK;
}

static kv_status kv_pool_record_one(kv_pool *p, int ci, const kv_check_result *row) {
    return kv_pool_record(p, ci, row, 1);
}

/* What the parent knows about a worker that just failed its case, read
 * before the worker is reaped (its slot and output file outlive it). */
typedef struct kv_failure {
    bool attributed;            /* a kernel was in flight */
    kv_key key;                 /* its backend */
    char where[400];            /* "the add.Tensor kernel of Plugin0, check ..." */
    char output[KV_RESULT_OUTPUT_MAX];
} kv_failure;

static void kv_failure_read(const kv_worker *w, kv_failure *f) {
    memset(f, 0, sizeof *f);
    const kv_op *op;
    f->attributed = kv_inflight_innermost(w->slot, &op, &f->key);
    /* A plugin's copy or memset in flight is the innermost call. */
    kv_key mem_key;
    if (kv_inflight_mem(w->slot, &mem_key)) {
        f->attributed = true;
        f->key = mem_key;
    }
    kv_inflight_describe(w->slot, f->where, (int)sizeof f->where);
    kv_capture_read(w->out_fd, f->output, sizeof f->output);
}

/* Records the row for a case whose worker crashed, hung or broke. When a
 * kernel of a backend other than the case's own device was in flight, the
 * row is that backend's and the case runs again without it; otherwise
 * the row stands for the whole case. */
static kv_status kv_pool_fail_case(kv_pool *p, int ci, kv_check_result *r, const kv_failure *f) {
    const kv_case *c = p->cases[ci];
    memcpy(r->output, f->output, sizeof r->output);
    if (!f->attributed) return kv_pool_record_one(p, ci, r);
    snprintf(r->backend, sizeof r->backend, "%s", kv_device_type_name((kv_device_type)f->key));
    const uint64_t bit = (uint64_t)kv_keyset_of(f->key);
    const bool rerun = f->key != KV_KEY_CPU && f->key != KV_KEY_ACCEL &&
                       (kv_device_type)f->key != c->device.type && !(p->exclude[ci] & bit);
    if (!rerun) return kv_pool_record_one(p, ci, r);
    kv_check_result_append(r, "; the case was run again without %s", kv_key_name(f->key));
    kv_status st = kv_result_list_push(&p->per_case[ci], r);
    if (st != KV_OK) return st;
    p->exclude[ci] |= bit;
    p->retry[p->nretry++] = ci;
    return KV_OK;
}

/* The worker died (EOF) while running its case. */
static kv_status kv_worker_died(kv_pool *p, kv_worker *w) {
    const int ci = w->case_index;
    const double secs = kv_now() - w->started;
    kv_failure f;
    kv_failure_read(w, &f);
    const long vm = w->slot->vm_mib_at_death;
    const int status = kv_worker_reap(w, false);
    kv_check_result r;
    const kv_case *c = p->cases[ci];
    char in[420] = "";
    if (f.where[0]) snprintf(in, sizeof in, " in %s", f.where);
    /* Within an eighth of the cap (or 64 MiB) when it died: the cap, not
     * the kernel's logic, is what it ran into. */
    const long slack = p->mem_mib / 8 > 64 ? p->mem_mib / 8 : 64;
    const bool oom = p->mem_mib > 0 && vm > 0 && vm + slack >= p->mem_mib;
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char *ab = kv_isolate_signal_abbrev(sig);
        if (oom)
            kv_isolate_case_row(&r, c, KV_RESULT_CRASH, secs,
                                "worker out of memory (cap %d MiB, KV_WORKER_MEM): killed by %s (signal %d) at %ld "
                                "MiB of address space%s",
                                p->mem_mib, ab ? ab : "a signal", sig, vm, in);
        else
            kv_isolate_case_row(&r, c, KV_RESULT_CRASH, secs, "worker killed by %s (signal %d: %s) %s",
                                ab ? ab : "a signal", sig, strsignal(sig), in[0] ? in + 1 : "while running this case");
    } else if (WIFEXITED(status) && f.attributed) {
        /* A kernel ended the process (exit() in a plugin, or a sanitizer's
         * report of its crash): the kernel's fault, like a signal. */
        kv_isolate_case_row(&r, c, KV_RESULT_CRASH, secs,
                            "worker exited with status %d %s: a kernel ended the process before the case's results "
                            "were reported",
                            WEXITSTATUS(status), in + 1);
    } else if (WIFEXITED(status)) {
        kv_isolate_case_row(&r, c, KV_RESULT_ERROR, secs,
                            "worker exited with status %d%s before reporting this case's results",
                            WEXITSTATUS(status), in);
    } else {
        kv_isolate_case_row(&r, c, KV_RESULT_ERROR, secs,
                            "worker ended (wait status 0x%x)%s before reporting this case's results", status, in);
    }
    return kv_pool_fail_case(p, ci, &r, &f);
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
        r.output[sizeof r.output - 1] = '\0';
        st = kv_result_list_push(&p->per_case[w->case_index], &r);
    }
    /* Every case has rows (a skip says why): none means the worker could
     * not even record a result (no memory under its cap), which must not
     * read as a case that was never selected. */
    if (st == KV_OK && h.count == 0) {
        kv_check_result r;
        kv_isolate_case_row(&r, p->cases[w->case_index], KV_RESULT_ERROR, kv_now() - w->started,
                            "the worker answered with no result for this case: it could not run it%s",
                            p->mem_mib > 0 ? " (out of memory under its cap, KV_WORKER_MEM?)" : "");
        st = kv_result_list_push(&p->per_case[w->case_index], &r);
    }
    if (st != KV_OK) return st;
    kv_pool_case_done(p, w->case_index);
    w->busy = false;
    w->len = 0;
    /* Reaped now, so no case is handed to a worker on its way out. */
    if (h.retiring) kv_worker_reap(w, false);
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
        const kv_wire_request req = { ci, 0, p->exclude[ci] };
        memset(w->slot, 0, sizeof *w->slot);
        ssize_t k;
        do {
            k = send(w->fd, &req, sizeof req, MSG_NOSIGNAL);
        } while (k < 0 && errno == EINTR);
        if (k == (ssize_t)sizeof req) {
            w->busy = true;
            w->case_index = ci;
            w->started = kv_now();
            w->len = 0;
            const kv_isolate_observer *ob = p->cfg->observer;
            if (ob != NULL && ob->started != NULL) ob->started(ob->ctx, ci);
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
        kv_failure f;
        kv_failure_read(w, &f);
        kv_worker_reap(w, true);
        kv_check_result r;
        char in[420] = "";
        if (f.where[0]) snprintf(in, sizeof in, " in %s", f.where);
        kv_isolate_case_row(&r, p->cases[ci], KV_RESULT_TIMEOUT, secs,
                            "timed out%s: still running after the %g s timeout (--timeout); worker killed "
                            "with SIGKILL",
                            in, p->cfg->timeout_seconds);
        kv_status st = kv_pool_fail_case(p, ci, &r, &f);
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
    const volatile sig_atomic_t *stop = p->cfg->stop;
    while (st == KV_OK && p->ndone < p->n && !(stop != NULL && *stop)) {
        for (int i = 0; st == KV_OK && i < p->nw && (p->nretry > 0 || next < p->n); i++) {
            if (p->w[i].busy) continue;
            /* Reruns first: their case already has a row waiting. */
            st = kv_worker_assign(p, i, p->nretry > 0 ? p->retry[--p->nretry] : next++);
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
        const kv_isolate_observer *ob = p->cfg->observer;
        /* A live line must move while a case runs long. */
        if (ob != NULL && ob->tick != NULL && wait > KV_ISOLATE_TICK_SECONDS) wait = KV_ISOLATE_TICK_SECONDS;
        int ms = wait <= 0 ? 0 : (int)(wait * 1000.0) + 1;
        int r = poll(pfd, (nfds_t)np, ms);
        /* A signal that stops the run: what the workers send now is of
         * cases killed half-way; they are killed below, not recorded. */
        if (stop != NULL && *stop) break;
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
        if (st == KV_OK && ob != NULL && ob->tick != NULL) ob->tick(ob->ctx);
    }
    free(pfd);
    free(pw);
    return st;
}

static void kv_run_inline(const kv_case *const *cases, int n, const kv_run_env *env, const kv_isolate_config *cfg,
                          kv_result_list *per_case, bool discard) {
    const kv_isolate_observer *ob = cfg->observer;
    for (int i = 0; i < n && !(cfg->stop != NULL && *cfg->stop); i++) {
        if (ob != NULL && ob->started != NULL) ob->started(ob->ctx, i);
        kv_case_run(cases[i], env, &per_case[i]);
        if (ob != NULL && ob->finished != NULL) ob->finished(ob->ctx, i, &per_case[i]);
        if (discard) kv_result_list_free(&per_case[i]);
    }
}

kv_status kv_isolate_run(const kv_case *const *cases, int n, const kv_run_env *env,
                         const kv_isolate_config *cfg, kv_result_list *out) {
    const bool observed = cfg != NULL && cfg->observer != NULL && cfg->observer->finished != NULL;
    if (n < 0 || (n > 0 && cases == NULL) || env == NULL || cfg == NULL || (out == NULL && !observed)) {
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
        kv_run_inline(cases, n, env, cfg, per_case, out == NULL);
        break;
    case KV_ISOLATE_FORK: {
        kv_pool p = { .cases = cases, .n = n, .env = env, .cfg = cfg, .discard = out == NULL };
        p.nw = cfg->jobs < n ? cfg->jobs : n;
        p.w = calloc((size_t)p.nw, sizeof *p.w);
        p.done = calloc((size_t)n, sizeof *p.done);
        p.exclude = calloc((size_t)n, sizeof *p.exclude);
        p.retry = calloc((size_t)n, sizeof *p.retry);
        p.per_case = per_case;
        /* Shared with the workers: what each one has in flight. */
        void *slots = mmap(NULL, (size_t)p.nw * sizeof *p.slots, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                           -1, 0);
        p.slots = slots == MAP_FAILED ? NULL : slots;
        st = kv_isolate_worker_mem(cfg, &p.mem_mib);
        if (st != KV_OK) {
            /* the error names KV_WORKER_MEM */
        } else if (p.w == NULL || p.done == NULL || p.exclude == NULL || p.retry == NULL || p.slots == NULL) {
            st = kv_error(KV_ERR_OOM, "isolate: out of memory");
        } else {
            for (int i = 0; i < p.nw; i++) {
                p.w[i].fd = -1;
                p.w[i].out_fd = -1;
                p.w[i].slot = &p.slots[i];
            }
            st = kv_pool_loop(&p);
            /* Closing the socket is the "no more work" message; workers
             * that are still busy (only after an error) are killed. */
            for (int i = 0; i < p.nw; i++) {
                if (p.w[i].pid != 0) kv_worker_reap(&p.w[i], p.w[i].busy);
                free(p.w[i].buf);
            }
            /* After a stop: a case cut short may hold a crash row waiting
             * for its rerun; it did not finish, so it has no rows. */
            for (int i = 0; i < n; i++)
                if (!p.done[i]) kv_result_list_free(&per_case[i]);
        }
        free(p.w);
        free(p.done);
        free(p.exclude);
        free(p.retry);
        if (p.slots != NULL) munmap(p.slots, (size_t)p.nw * sizeof *p.slots);
        break;
    }
    }
    for (int i = 0; i < n; i++) {
        if (st == KV_OK && out != NULL) st = kv_result_list_extend(out, &per_case[i]);
        kv_result_list_free(&per_case[i]);
    }
    free(per_case);
    return st;
}
