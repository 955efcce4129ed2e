/* The CPU's optimized out= variant: PyTorch's out= rules
 * (kernels/ref/ref_out.c) around the CPU key's own functional kernel and
 * copy_, each whichever variant the tuner picks for the call (AVX-512 add,
 * the blocked matmul, the pairwise sum, ...), where the "ref" variant
 * runs the reference kernels themselves. */
#include "cpu/cpu.h"
#include "ref/ref.h"

kv_status kv_cpu_out_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return kv_ref_out_on(op, KV_KEY_CPU, stack);
}
