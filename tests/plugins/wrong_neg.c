/* A backend with a wrong kernel, for the --dump test (tests/ci/dump.sh):
 * good_any.c's neg for contiguous f32, but element 3 comes out one too
 * big, so its variants row FAILs with exactly one mismatch. */
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "host_mem.h"

static const kv_host_api *host;
static kv_device_type my_type;


static kv_status my_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (self->dtype != KV_F32 || !host->tensor_is_contiguous(self))
        return host->error(KV_ERR_MISSING_KERNEL, "neg: argument 'self': the wrong backend takes contiguous f32 only");
    kv_tensor *out = host->tensor_empty(self->sizes, self->ndim, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    const float *x = (const float *)self->storage->data + self->offset;
    float *y = out->storage->data;
    for (int64_t i = 0; i < host->tensor_numel(self); i++) y[i] = -x[i] + (i == 3 ? 1.0f : 0.0f);
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    return host->register_kernel("neg", (kv_key)type, my_neg);
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "wrongneg");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 1;
    host_mem_install(desc);
    desc->register_kernels = reg;
    return 0;
}
