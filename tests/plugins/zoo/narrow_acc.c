/* Bug zoo: an f16/bf16 sum.dim_IntList that accumulates in its own dtype
 * (each partial sum rounded to f16/bf16) where PyTorch and every kernel
 * here accumulate in f32 and round once. Its error stays within the
 * working-precision bound gamma_n(u16) * sum|x| but leaves the f32
 * accumulator's (src/runner/check/tol_bounds.c, tb_sum). Expected
 * diagnosis: "accumulates in f16, not f32". */
#include "zoo.h"

static kv_status na_sum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    const bool all = kv_arg_is_none(stack, 1);
    if (x == NULL || (x->dtype != KV_F16 && x->dtype != KV_BF16) || x->ndim < 1 || !kv_arg_is_none(stack, 3) ||
        (!all && kv_arg_ints(stack, 1).n != 1))
        return zoo_host->error(KV_ERR_MISSING_KERNEL,
                               "sum.dim_IntList: this zoo kernel takes f16/bf16 over one dim or all, without a dtype");
    int64_t dim = all ? 0 : kv_arg_ints(stack, 1).items[0];
    if (dim < -x->ndim || dim >= x->ndim)
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "sum.dim_IntList: this zoo kernel takes dims in range");
    if (dim < 0) dim += x->ndim;
    const bool keepdim = kv_arg_bool(stack, 2);
    int64_t osz[KV_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < x->ndim; d++)
        if (!all && d != dim) osz[ond++] = x->sizes[d];
        else if (keepdim) osz[ond++] = 1;
    kv_tensor *out = zoo_host->tensor_empty(osz, ond, x->dtype, (kv_device){ zoo_type, 0 });
    if (out == NULL) return zoo_host->last_error();
    const int64_t numel = zoo_host->tensor_numel(x);
    int64_t inner = 1;
    for (int d = dim + 1; d < x->ndim && !all; d++) inner *= x->sizes[d];
    const int64_t len = all ? numel : x->sizes[dim], nout = len > 0 ? numel / len : zoo_host->tensor_numel(out);
    const zoo_fmt f = zoo_fmt_of(x->dtype);
    for (int64_t o = 0; o < nout; o++) {
        const int64_t base = (o / inner) * inner * len + o % inner;
        double acc = 0.0;
        /* The bug: the running sum is stored in the input's format. */
        for (int64_t j = 0; j < len; j++)
            acc = zoo_decode(f, zoo_encode(f, acc + zoo_load(x, base + j * inner), ZOO_NEAREST_EVEN));
        zoo_store(out, o, acc, ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status na_reg(void) {
    return zoo_host->register_kernel("sum.dim_IntList", (kv_key)zoo_type, na_sum);
}

ZOO_PLUGIN("zoo_narrow_acc", na_reg)
