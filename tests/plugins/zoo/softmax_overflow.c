/* Bug zoo: an f32 _softmax that skips the max shift: exp(x) / sum exp(x)
 * overflows (Inf / Inf = NaN) once some x passes ~88.7, and underflows
 * to 0 / 0 when every x is very negative, where the shifted form is
 * finite. Expected diagnosis: "overflows in an intermediate". */
#include "zoo.h"

static kv_status sm_softmax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_F32 || a->ndim == 0 || kv_arg_bool(stack, 2))
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "_softmax: this zoo kernel takes f32 without half_to_float");
    const int dim = zoo_host->wrap_dim(kv_arg_int(stack, 1), a->ndim, "_softmax", "dim");
    if (dim < 0) return zoo_host->last_error();
    kv_tensor *out = zoo_empty_like(a, KV_F32);
    if (out == NULL) return zoo_host->last_error();
    int64_t inner = 1;
    for (int d = dim + 1; d < a->ndim; d++) inner *= a->sizes[d];
    const int64_t len = a->sizes[dim], n = zoo_host->tensor_numel(a);
    for (int64_t s = 0; s < n; s++) {
        if ((s / inner) % len != 0) continue; /* s starts a slice along dim */
        float sum = 0.0f;
        for (int64_t j = 0; j < len; j++) sum += expf((float)zoo_load(a, s + j * inner));
        for (int64_t j = 0; j < len; j++)
            zoo_store(out, s + j * inner, expf((float)zoo_load(a, s + j * inner)) / sum, ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status sm_reg(void) {
    return zoo_host->register_kernel("_softmax", (kv_key)zoo_type, sm_softmax);
}

ZOO_PLUGIN("zoo_softmax_overflow", sm_reg)
