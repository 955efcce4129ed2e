/* The per-backend tolerance overrides (runner/tol_backend.h): one row per
 * backend x op x output dtypes, each with its reason. */
#include "runner/check/tol_backend.h"

#include <string.h>

#define D(dt) (1u << (dt))

/* oneDNN 2.6 (kernels/onednn) converts its f32 accumulators to bf16 with
 * VCVTNEPS2BF16 (AVX512-BF16), which flushes a subnormal result to zero:
 * matmul and reduction outputs below 2^-126 come out as 0 (observed: a
 * bf16 matmul whose exact result is 1.5 * 2^-129, and a sum of 2^-131,
 * both give 0). The table's bounds allow only gamma * 2^-126 of underflow
 * slack, a few hundredths of a subnormal's range, so the flush needs one
 * smallest normal more. Bitwise and ulp rows (bf16 add, exp, ...) are not
 * widened: the plugin leaves those ops unsupported in bf16. */
#define R_ONEDNN_BF16_FTZ                                                                          \
    "oneDNN 2.6 stores bf16 results through VCVTNEPS2BF16, which flushes subnormal results to "    \
    "zero: an output below 2^-126 may read 0, an absolute error under one smallest normal (2^-126)"

static const kv_tol_override tol_overrides[] = {
    { "onednn", "mm", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
    { "onednn", "bmm", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
    { "onednn", "addmm", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
    { "onednn", "sum.dim_IntList", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
    { "onednn", "mean.dim", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
    { "onednn", "prod.dim_int", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
    { "onednn", "native_layer_norm", D(KV_BF16), 0x1p-126, R_ONEDNN_BF16_FTZ },
};

#define OVERRIDE_N ((int)(sizeof tol_overrides / sizeof tol_overrides[0]))

int kv_tol_override_count(void) { return OVERRIDE_N; }

const kv_tol_override *kv_tol_override_at(int i) { return i >= 0 && i < OVERRIDE_N ? &tol_overrides[i] : NULL; }

const kv_tol_override *kv_tol_override_lookup(const char *backend, const char *op, kv_dtype out) {
    if (backend == NULL || op == NULL) return NULL;
    for (int i = 0; i < OVERRIDE_N; i++) {
        const kv_tol_override *o = &tol_overrides[i];
        if (strcmp(o->backend, backend) == 0 && strcmp(o->op, op) == 0 && (o->dtypes & D(out))) return o;
    }
    return NULL;
}
