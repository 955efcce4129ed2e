/* hello_backend: the smallest useful kvsuite backend plugin
 * (docs/bringup.md starts from it). Two kernels, neg and add.Tensor, for
 * contiguous f32 tensors in host memory; every other op, dtype and layout
 * runs through the staged-reference fallback the loader installs by
 * default, and counts as UNSUPPORTED for "hello" in the suite's rows.
 *
 * Build (from the kvsuite checkout, after `ninja`):
 *   PKG_CONFIG_PATH=build gcc -std=c17 -O2 -Wall -Wextra -Werror \
 *       -o libhello.so examples/hello_backend/hello_backend.c \
 *       $(PKG_CONFIG_PATH=build pkg-config --cflags --libs kvsuite)
 * Run:
 *   build/kvrun --backend=libhello.so --accel-target=hello cases/ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"

static const kv_host_api *host; /* the only way into kvsuite */
static kv_device_type hello_type; /* the slot the loader gave us */

/* Memory: plain malloc, which the host may read (host_addressable). A real
 * device copies through its driver here. */
static void *hello_alloc(void *ctx, size_t n) { (void)ctx; return malloc(n ? n : 1); }
static void hello_free(void *ctx, void *p, size_t n) { (void)ctx; (void)n; free(p); }
static kv_status hello_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memmove(dst, src, n);
    return KV_OK;
}

/* What both kernels accept. Anything else is a decline: the call fails
 * with KV_ERR_MISSING_KERNEL and the suite counts it UNSUPPORTED, never
 * FAIL (invalid arguments included: the reference checks those). */
static bool hello_takes(const kv_tensor *t) { return t->dtype == KV_F32 && host->tensor_is_contiguous(t); }

static const float *hello_in(const kv_tensor *t) { return (const float *)t->storage->data + t->offset; }

static kv_status hello_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op, (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (!hello_takes(a)) return host->error(KV_ERR_MISSING_KERNEL, "neg: hello takes contiguous f32 only");
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, (kv_device){ hello_type, 0 });
    if (out == NULL) return host->last_error();
    const float *x = hello_in(a);
    float *z = out->storage->data;
    for (int64_t i = 0; i < host->tensor_numel(a); i++) z[i] = -x[i];
    host->stack_return_tensors(stack, &out, 1); /* the stack now owns it */
    return KV_OK;
}

/* add.Tensor(self, other, *, alpha=1): same shapes and alpha 1 only. */
static kv_status hello_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op, (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!hello_takes(a) || !hello_takes(b) || a->ndim != b->ndim ||
        memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) != 0 ||
        host->scalar_to_double(kv_arg_scalar(stack, 2)) != 1.0)
        return host->error(KV_ERR_MISSING_KERNEL, "add.Tensor: hello takes contiguous f32 of one shape, alpha 1");
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, (kv_device){ hello_type, 0 });
    if (out == NULL) return host->last_error();
    const float *x = hello_in(a), *y = hello_in(b);
    float *z = out->storage->data;
    for (int64_t i = 0; i < host->tensor_numel(a); i++) z[i] = x[i] + y[i]; /* one f32 rounding */
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status hello_register(void *ctx, kv_device_type type) {
    (void)ctx;
    hello_type = type;
    kv_status st = host->register_kernel("neg", (kv_key)type, hello_neg);
    if (st == KV_OK) st = host->register_kernel("add.Tensor", (kv_key)type, hello_add);
    return st;
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION; /* first, always */
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "hello");
    snprintf(desc->version, sizeof desc->version, "hello_backend 1.0");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 1;
    desc->mem.alloc = hello_alloc;
    desc->mem.free = hello_free;
    desc->mem.copy_to_device = hello_copy;
    desc->mem.copy_to_host = hello_copy;
    desc->mem.copy_on_device = hello_copy;
    desc->register_kernels = hello_register;
    return 0;
}
