/* The "threads" elementwise variant, and the thread helper every
 * multithreaded variant uses (cpu/cpu_ew.h).
 *
 * Threads are created for each call and joined before it returns: there
 * is no pool, so nothing of ours exists while the runner forks its
 * workers, and a forked child starts threads of its own when it needs
 * them. The variant is compatible only for tensors of at least
 * KV_CPU_THREAD_MIN_NUMEL elements on a machine with two or more CPUs,
 * where creating threads (tens of microseconds) is repaid. It runs the
 * best ISA's loops, so its results are that variant's, bit for bit. */
#include <pthread.h>
#include <unistd.h>

#include "cpu/cpu.h"
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

static const cpu_ew_table *best_table(void) {
    switch (kv_cpu_best_isa()) {
    case KV_CPU_ISA_AVX512: return &kv_cpu_ew_avx512;
    case KV_CPU_ISA_AVX2: return &kv_cpu_ew_avx2;
    case KV_CPU_ISA_SSE2: return &kv_cpu_ew_sse2;
    }
    return &kv_cpu_ew_sse2;
}

static int64_t ew_numel(const cpu_ew_call *c) {
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++) n *= c->sizes[d];
    return n;
}

bool kv_cpu_ew_threads_pred(const kv_op *op, const kv_stack *stack) {
    cpu_ew_call local;
    cpu_ew_call *c = kv_tune_stash_buffer(op, stack, sizeof *c);
    if (c == NULL) c = &local;
    if (!kv_cpu_ew_analyze(op, stack, c) || best_table()->loop[c->kind][c->dt] == NULL) return false;
    const int64_t n = ew_numel(c);
    if (n < KV_CPU_THREAD_MIN_NUMEL || kv_cpu_thread_count(n, KV_CPU_THREAD_MIN_NUMEL / 4) < 2) return false;
    if (c != &local) kv_tune_stash_fill(op, stack, &kv_cpu_ew_stash_kind);
    return true;
}

kv_status kv_cpu_ew_threads_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    cpu_ew_call c;
    if (!kv_cpu_ew_analyze_once(op, stack, &c)) return kv_cpu_ew_run(op, stack, best_table(), 1, NULL);
    return kv_cpu_ew_run(op, stack, best_table(), kv_cpu_thread_count(ew_numel(&c), KV_CPU_THREAD_MIN_NUMEL / 4), &c);
}
