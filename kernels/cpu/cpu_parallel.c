/* The thread helper every multithreaded CPU variant uses (cpu/cpu_ew.h).
 *
 * Threads are created for each call and joined before it returns: there
 * is no pool, so nothing of ours exists while the runner forks its
 * workers, and a forked child starts threads of its own when it needs
 * them. */
#include <pthread.h>
#include <unistd.h>

#include "cpu/cpu_ew.h"

#define THREADS_MAX 16

static int ncpu(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (n > THREADS_MAX ? THREADS_MAX : (int)n);
}

int kv_cpu_thread_count(int64_t work, int64_t grain) {
    const int64_t by_work = grain > 0 ? work / grain : 1;
    const int n = ncpu();
    return by_work < 1 ? 1 : (by_work < n ? (int)by_work : n);
}

typedef struct par_arg {
    void (*fn)(int i, void *ctx);
    void *ctx;
    int i;
} par_arg;

static void *par_main(void *p) {
    const par_arg *a = p;
    a->fn(a->i, a->ctx);
    return NULL;
}

bool kv_cpu_parallel(int n, void (*fn)(int i, void *ctx), void *ctx) {
    if (n > THREADS_MAX) n = THREADS_MAX;
    pthread_t th[THREADS_MAX];
    par_arg args[THREADS_MAX];
    bool started[THREADS_MAX] = { false };
    bool all = true;
    for (int i = 1; i < n; i++) {
        args[i] = (par_arg){ fn, ctx, i };
        started[i] = pthread_create(&th[i], NULL, par_main, &args[i]) == 0;
        if (!started[i]) all = false;
    }
    fn(0, ctx);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else fn(i, ctx);
    }
    return all;
}
