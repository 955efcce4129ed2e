/* The "sse2" elementwise variant: cpu_ew_impl.h compiled for
 * the x86-64 baseline (SSE2): the loops below vectorize 4 floats at a time. Its predicate asks the CPU at run time
 * (kv_cpu_has), so the variant is simply not compatible on machines
 * without the instructions; nothing outside these functions uses them. */
#include "cpu/cpu.h"
#include "cpu/cpu_ew.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_TARGET __attribute__((target("sse2")))
#else
/* Other ISAs (the aarch64 build of ninja cross-golden): plain code; the
 * predicate refuses this variant there unless it is the baseline one. */
#define CPU_TARGET
#endif
#define CPU_SFX _sse2
#define CPU_TABLE kv_cpu_ew_sse2
#define CPU_ISA_NAME "sse2"
#include "cpu/cpu_ew_impl.h"

bool kv_cpu_ew_sse2_pred(const kv_op *op, const kv_stack *stack) {
    return kv_cpu_has(KV_CPU_ISA_SSE2) && kv_cpu_ew_supported(op, stack, &kv_cpu_ew_sse2);
}

kv_status kv_cpu_ew_sse2_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return kv_cpu_ew_run(op, stack, &kv_cpu_ew_sse2, 1, NULL);
}
