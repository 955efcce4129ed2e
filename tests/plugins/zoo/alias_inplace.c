/* Bug zoo: an f32 mm.out that writes each product straight into out while
 * it still reads self and mat2, as a GEMM written for separate buffers
 * does. Right while out is a tensor of its own; where out is an input
 * (PyTorch's mm(a, b, out=a)) it reads elements it has already
 * overwritten. Expected diagnosis: "wrong only where out aliases input". */
#include "zoo.h"

static bool ai_plain(const kv_tensor *t, int64_t rows, int64_t cols) {
    return t != NULL && t->dtype == KV_F32 && t->ndim == 2 && t->sizes[0] == rows && t->sizes[1] == cols &&
           zoo_host->tensor_is_contiguous(t);
}

static kv_status ai_mm_out(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_tensor *out = kv_arg_tensor(stack, 2);
    /* Resizing out and the partial-overlap error are the host's out= rules
     * (kv/backend.h's out_run); this kernel takes only what needs neither. */
    if (a == NULL || b == NULL || a->ndim != 2 || b->ndim != 2 || a->sizes[1] != b->sizes[0] ||
        !ai_plain(a, a->sizes[0], a->sizes[1]) || !ai_plain(b, b->sizes[0], b->sizes[1]) ||
        !ai_plain(out, a->sizes[0], b->sizes[1]))
        return zoo_host->error(KV_ERR_MISSING_KERNEL,
                               "mm.out: this zoo kernel takes contiguous f32 matrices and an out of the result's shape");
    const int64_t m = a->sizes[0], kk = a->sizes[1], n = b->sizes[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < kk; k++) s += (float)zoo_load(a, i * kk + k) * (float)zoo_load(b, k * n + j);
            zoo_store(out, i * n + j, s, ZOO_NEAREST_EVEN);
        }
    zoo_host->tensor_retain(out);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status ai_reg(void) {
    return zoo_host->register_kernel("mm.out", (kv_key)zoo_type, ai_mm_out);
}

ZOO_PLUGIN("zoo_alias_inplace", ai_reg)
