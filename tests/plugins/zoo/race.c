/* Bug zoo: an f32 mul.Tensor that stages its products in one static
 * scratch buffer shared by every call (a "saves an allocation" cache):
 * right on one thread, wrong when two threads call it at once, each
 * copying out the other's products. One call at a time, as the suite
 * runs kernels today, cannot see it; a check that runs plugin kernels
 * from several threads at once should (docs/diagnosis.md). */
#include <sched.h>

#include "zoo.h"

#define RACE_MAX 65536
static float race_scratch[RACE_MAX];

static kv_status race_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_status st = zoo_binary_args("mul.Tensor", stack, ZOO_DT(KV_F32), false);
    if (st != KV_OK) return st;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    const int64_t n = zoo_host->tensor_numel(a);
    if (n > RACE_MAX) return zoo_host->error(KV_ERR_MISSING_KERNEL, "mul.Tensor: this zoo kernel takes %d elements at most", RACE_MAX);
    kv_tensor *out = zoo_empty_like(a, KV_F32);
    if (out == NULL) return zoo_host->last_error();
    for (int64_t k = 0; k < n; k++) race_scratch[k] = (float)zoo_load(a, k) * (float)zoo_load(b, k);
    /* Widens the window between filling the scratch and reading it back,
     * as a real kernel's other work would. */
    sched_yield();
    for (int64_t k = 0; k < n; k++) zoo_store(out, k, race_scratch[k], ZOO_NEAREST_EVEN);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status race_reg(void) {
    return zoo_host->register_kernel("mul.Tensor", (kv_key)zoo_type, race_mul);
}

ZOO_PLUGIN("zoo_race", race_reg)
