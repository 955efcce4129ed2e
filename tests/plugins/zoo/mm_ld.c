/* Bug zoo: an f32 mm over contiguous operands that steps through mat2's
 * rows by self's column count K instead of mat2's N (a leading dimension
 * mixed up). Square and K == N products are right; every other shape
 * reads the wrong elements of mat2. */
#include "zoo.h"

static kv_status ml_mm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (a->dtype != KV_F32 || b->dtype != KV_F32 || a->ndim != 2 || b->ndim != 2 || a->sizes[1] != b->sizes[0] ||
        !zoo_host->tensor_is_contiguous(a) || !zoo_host->tensor_is_contiguous(b))
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "mm: zoo_mm_ld takes contiguous f32 matrices that multiply");
    const int64_t m = a->sizes[0], kk = a->sizes[1], n = b->sizes[1];
    const int64_t sizes[2] = { m, n };
    kv_tensor *out = zoo_host->tensor_empty(sizes, 2, KV_F32, (kv_device){ zoo_type, 0 });
    if (out == NULL) return zoo_host->last_error();
    const float *x = (const float *)a->storage->data + a->offset, *y = (const float *)b->storage->data + b->offset;
    float *z = (float *)out->storage->data + out->offset;
    const int64_t ldb = kk; /* the planted bug: mat2's leading dimension is n */
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double acc = 0.0; /* double: well inside mm's bound */
            for (int64_t p = 0; p < kk; p++) {
                const int64_t at = p * ldb + j;
                acc += (double)x[i * kk + p] * (at < kk * n ? (double)y[at] : 0.0);
            }
            z[i * n + j] = (float)acc;
        }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status ml_reg(void) { return zoo_host->register_kernel("mm", (kv_key)zoo_type, ml_mm); }

ZOO_PLUGIN("zoo_mm_ld", ml_reg)
