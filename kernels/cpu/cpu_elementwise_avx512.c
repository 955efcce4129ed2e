/* The "avx512" elementwise variant: cpu_ew_impl.h compiled for
 * AVX-512 (F, DQ, BW, VL): 16 floats per instruction. Its predicate asks the CPU at run time
 * (kv_cpu_has), so the variant is simply not compatible on machines
 * without the instructions; nothing outside these functions uses them. */
#include "cpu/cpu.h"
#include "cpu/cpu_ew.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,prefer-vector-width=512")))
#else
/* Other ISAs (the aarch64 build of ninja cross-golden): plain code; the
 * predicate refuses this variant there unless it is the baseline one. */
#define CPU_TARGET
#endif
#define CPU_SFX _avx512
#define CPU_TABLE kv_cpu_ew_avx512
#define CPU_ISA_NAME "avx512"
#include "cpu/cpu_ew_impl.h"

bool kv_cpu_ew_avx512_pred(const kv_op *op, const kv_stack *stack) {
    return kv_cpu_has(KV_CPU_ISA_AVX512) && kv_cpu_ew_supported(op, stack, &kv_cpu_ew_avx512);
}

kv_status kv_cpu_ew_avx512_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return kv_cpu_ew_run(op, stack, &kv_cpu_ew_avx512, 1, NULL);
}
