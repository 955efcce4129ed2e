/* Bug zoo: an f32 mean.dim that guards its division against an empty
 * reduction by returning 0 there. The mean of no elements is 0/0 = NaN in
 * PyTorch; right everywhere else (sum in double, one division). */
#include "zoo_reduce.h"

static kv_status em_mean(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_F32 || !kv_arg_is_none(stack, 3))
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "mean.dim: zoo_empty_mean takes f32, no dtype");
    zoo_red r;
    if (!zoo_red_plan(stack, a, zoo_red_wrap, &r)) return zoo_host->last_error();
    kv_tensor *out = zoo_host->tensor_empty(r.out_sizes, r.out_ndim, KV_F32, (kv_device){ zoo_type, 0 });
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a), m = zoo_host->tensor_numel(out);
    double *acc = calloc((size_t)(m ? m : 1), sizeof *acc);
    if (acc == NULL) {
        zoo_host->tensor_release(out);
        return zoo_host->error(KV_ERR_OOM, "mean.dim: zoo_empty_mean out of memory");
    }
    for (int64_t k = 0; k < n; k++) acc[zoo_red_target(a, &r, k)] += zoo_load(a, k);
    const int64_t count = m ? n / m : 0;
    for (int64_t j = 0; j < m; j++) zoo_store(out, j, count == 0 ? 0.0 : acc[j] / (double)count, ZOO_NEAREST_EVEN); /* the bug */
    free(acc);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status em_reg(void) { return zoo_host->register_kernel("mean.dim", (kv_key)zoo_type, em_mean); }

ZOO_PLUGIN("zoo_empty_mean", em_reg)
