/* Bug zoo: sum.dim_IntList of i32 (an i64 result, as PyTorch promotes)
 * that accumulates in int32_t and widens only at the store: a sum past
 * 2^31 wraps. Right whenever every partial sum fits 32 bits. */
#include "zoo_reduce.h"

static kv_status is_sum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_I32 || !kv_arg_is_none(stack, 3))
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "sum.dim_IntList: zoo_i32_sum takes i32, no dtype");
    zoo_red r;
    if (!zoo_red_plan(stack, a, zoo_red_wrap, &r)) return zoo_host->last_error();
    kv_tensor *out = zoo_host->tensor_empty(r.out_sizes, r.out_ndim, KV_I64, (kv_device){ zoo_type, 0 });
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a), m = zoo_host->tensor_numel(out);
    uint32_t *acc = calloc((size_t)(m ? m : 1), sizeof *acc); /* the planted bug: 32-bit partial sums */
    if (acc == NULL) {
        zoo_host->tensor_release(out);
        return zoo_host->error(KV_ERR_OOM, "sum.dim_IntList: zoo_i32_sum out of memory");
    }
    const int32_t *x = (const int32_t *)a->storage->data;
    for (int64_t k = 0; k < n; k++) acc[zoo_red_target(a, &r, k)] += (uint32_t)x[zoo_offset(a, k)];
    int64_t *z = (int64_t *)out->storage->data + out->offset;
    for (int64_t j = 0; j < m; j++) z[j] = (int32_t)acc[j]; /* two's complement, as the wrapped int32 sum */
    free(acc);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status is_reg(void) { return zoo_host->register_kernel("sum.dim_IntList", (kv_key)zoo_type, is_sum); }

ZOO_PLUGIN("zoo_i32_sum", is_reg)
