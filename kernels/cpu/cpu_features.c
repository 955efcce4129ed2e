/* Runtime ISA detection for the variant predicates (cpu/cpu.h). */
#include "cpu/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_int g_cap = -1; /* -1: not read yet */

static kv_cpu_isa detected(void) {
#if !defined(__x86_64__) && !defined(__i386__)
    /* Not x86 (the aarch64 build of ninja cross-golden): only the baseline
     * variant, whose code is plain C there. */
    return KV_CPU_ISA_SSE2;
#else
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        return KV_CPU_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KV_CPU_ISA_AVX2;
    return KV_CPU_ISA_SSE2;
#endif
}

static kv_cpu_isa cap_now(void) {
    int cap = atomic_load_explicit(&g_cap, memory_order_relaxed);
    if (cap >= 0) return (kv_cpu_isa)cap;
    kv_cpu_isa c = detected();
    const char *env = getenv("KV_CPU_ISA");
    if (env) {
        if (strcmp(env, "sse2") == 0 && c > KV_CPU_ISA_SSE2) c = KV_CPU_ISA_SSE2;
        else if (strcmp(env, "avx2") == 0 && c > KV_CPU_ISA_AVX2) c = KV_CPU_ISA_AVX2;
    }
    int expected = -1;
    atomic_compare_exchange_strong(&g_cap, &expected, (int)c);
    return (kv_cpu_isa)atomic_load(&g_cap);
}

kv_status kv_cpu_isa_env_check(void) {
    const char *env = getenv("KV_CPU_ISA");
    if (env == NULL || strcmp(env, "sse2") == 0 || strcmp(env, "avx2") == 0 || strcmp(env, "avx512") == 0)
        return KV_OK;
    return kv_error(KV_ERR_INVALID_ARG, "KV_CPU_ISA: expected sse2, avx2 or avx512, got '%s'", env);
}

bool kv_cpu_has(kv_cpu_isa isa) { return isa <= cap_now(); }

kv_cpu_isa kv_cpu_best_isa(void) { return cap_now(); }

kv_cpu_isa kv_cpu_set_isa_cap(kv_cpu_isa cap) {
    const kv_cpu_isa prev = cap_now();
    const kv_cpu_isa hw = detected();
    atomic_store(&g_cap, (int)(cap < hw ? cap : hw));
    return prev;
}

const char *kv_cpu_isa_name(kv_cpu_isa isa) {
    switch (isa) {
    case KV_CPU_ISA_SSE2: return "sse2";
    case KV_CPU_ISA_AVX2: return "avx2";
    case KV_CPU_ISA_AVX512: return "avx512";
    }
    return "?";
}
