/* The "threads" elementwise variant (the thread helper it runs on is
 * cpu_parallel.c). The variant is compatible only for tensors of at least
 * KV_CPU_THREAD_MIN_NUMEL elements on a machine with two or more CPUs,
 * where creating threads (tens of microseconds) is repaid. It runs the
 * best ISA's loops, so its results are that variant's, bit for bit. */
#include "cpu/cpu.h"
#include "cpu/cpu_ew.h"

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
