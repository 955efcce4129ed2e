/* A generated-kernel stand-in (docs/generated-kernels.md, tests/ci/
 * compare.sh): an out-of-tree plugin that registers one perf_dispatch
 * variant of add.Tensor at the CPU key, "gen", for contiguous f32 inputs
 * of one shape, as a code generator's output would. KV_TEST_GEN picks the generator version:
 *   v1 (or unset)  correct: self + alpha * other, each element rounded once
 *                  per operation as the reference does;
 *   v2-tail        drops alpha on the numel % 4 tail (a wrong result there);
 *   v2-slow        v1's values, computed twice per call (a 2x slowdown);
 *   v2-drop-f32    declines every input (the dtype is no longer supported).
 * Any other value is refused at load time with a message naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "host_mem.h"

static const kv_host_api *host;

typedef enum gen_version { GEN_V1, GEN_V2_TAIL, GEN_V2_SLOW, GEN_V2_DROP } gen_version;
static gen_version version;

static bool gen_pred(const kv_op *op, const kv_stack *stack) {
    (void)op;
    if (version == GEN_V2_DROP) return false;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    return a != NULL && b != NULL && a->dtype == KV_F32 && b->dtype == KV_F32 && host->tensor_is_contiguous(a) &&
           host->tensor_is_contiguous(b) && a->ndim == b->ndim &&
           memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

static void gen_loop(const float *x, const float *y, float *z, int64_t n, float alpha) {
    const int64_t body = version == GEN_V2_TAIL ? n - n % 4 : n;
    for (int64_t i = 0; i < body; i++) {
        const float t = alpha * y[i]; /* two roundings, as the reference's */
        z[i] = x[i] + t;
    }
    for (int64_t i = body; i < n; i++) z[i] = x[i] + y[i];
}

static kv_status gen_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    const float alpha = (float)host->scalar_to_double(kv_arg_scalar(stack, 2));
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, a->device);
    if (out == NULL) return host->last_error();
    const float *x = (const float *)a->storage->data + a->offset;
    const float *y = (const float *)b->storage->data + b->offset;
    float *z = out->storage->data;
    const int64_t n = host->tensor_numel(a);
    gen_loop(x, y, z, n, alpha);
    if (version == GEN_V2_SLOW) {
        /* The same work again, into the same output: twice the time, the
         * same values; the barrier keeps the compiler from dropping it. */
        __asm__ volatile("" ::: "memory");
        gen_loop(x, y, z, n, alpha);
    }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status gen_register(void *ctx, kv_device_type type) {
    (void)ctx;
    (void)type;
    return host->tune_register_variant("add.Tensor", KV_KEY_CPU, "gen", gen_add, gen_pred);
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    const char *v = getenv("KV_TEST_GEN");
    if (v == NULL || strcmp(v, "v1") == 0) version = GEN_V1;
    else if (strcmp(v, "v2-tail") == 0) version = GEN_V2_TAIL;
    else if (strcmp(v, "v2-slow") == 0) version = GEN_V2_SLOW;
    else if (strcmp(v, "v2-drop-f32") == 0) version = GEN_V2_DROP;
    else {
        fprintf(stderr, "gen_add: KV_TEST_GEN='%s': expected v1, v2-tail, v2-slow or v2-drop-f32\n", v);
        return -1;
    }
    snprintf(desc->name, sizeof desc->name, "gen");
    snprintf(desc->version, sizeof desc->version, "gen_add %s", v ? v : "v1");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    /* A device slot with host memory, since only an available backend
     * registers kernels; its own key gets none. */
    desc->available = 1;
    desc->host_addressable = 1;
    host_mem_install(desc);
    desc->register_kernels = gen_register;
    return 0;
}
