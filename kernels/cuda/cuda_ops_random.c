/* CUDA bernoulli.p on the generator stream of kv/generator.h: the shim
 * reserves the values on the caller's generator (first = offset, offset
 * += numel, exactly as the reference does) and each device thread
 * computes its own counter's value (kvc_bernoulli_one), so the result is
 * the reference's bit for bit. Checks mirror kernels/ref/ref_random.c.
 * Generator? None is declined: the thread's default generator lives in
 * libkv, which a plugin does not link. */
#include <math.h>
#include <string.h>

#include "cuda/cuda_shim.h"

/* The bytes of v (0 or 1) in dt. */
static void one_or_zero(kv_dtype dt, int v, uint64_t *bytes) {
    bytes[0] = bytes[1] = 0;
    switch (dt) {
    case KV_F16: {
        const uint16_t b = v ? 0x3C00 : 0;
        memcpy(bytes, &b, sizeof b);
        return;
    }
    case KV_BF16: {
        const uint16_t b = v ? 0x3F80 : 0;
        memcpy(bytes, &b, sizeof b);
        return;
    }
    case KV_F32: {
        const float f = (float)v;
        memcpy(bytes, &f, sizeof f);
        return;
    }
    case KV_F64: {
        const double d = (double)v;
        memcpy(bytes, &d, sizeof d);
        return;
    }
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
        /* Little-endian integers: the low byte is the value. */
        bytes[0] = (uint64_t)v;
        return;
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: return;
    }
}

static kv_status cuda_bernoulli(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "bernoulli.p";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const double p = kv_arg_double(stack, 1);
    if (self->dtype == KV_C64 || self->dtype == KV_C128)
        return h->error(KV_ERR_DTYPE, "%s: argument 'self': dtype %s is not supported", name, h->dtype_name(self->dtype));
    if (!(p >= 0.0 && p <= 1.0))
        return h->error(KV_ERR_INVALID_ARG, "%s: argument 'p': expected a probability in [0, 1], got %g", name, p);
    if (stack->slots[2].tag != KV_IV_GENERATOR) return kv_cuda_decline(name, "the default generator (None)");
    if (!kv_cuda_on_device(self)) return kv_cuda_decline(name, "a self that is not in CUDA memory");
    kv_tensor *out = kv_cuda_empty(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return h->last_error();
    kv_generator *g = stack->slots[2].v.gen;
    kvc_bernoulli_args a;
    memset(&a, 0, sizeof a);
    a.n = h->tensor_numel(out);
    a.esize = (int)h->dtype_size(out->dtype);
    a.out = out->storage->data;
    a.seed = g->seed;
    a.first = g->offset;
    a.limit = ldexp(p, 53);
    one_or_zero(out->dtype, 1, a.one);
    one_or_zero(out->dtype, 0, a.zero);
    if (a.n > 0 && kvc_bernoulli(&a) != 0) {
        h->tensor_release(out);
        return kv_cuda_device_error(name);
    }
    g->offset += (uint64_t)a.n;
    return kv_cuda_return(stack, out);
}

kv_status kv_cuda_register_random(kv_key key) { return kv_cuda_host->register_kernel("bernoulli.p", key, cuda_bernoulli); }
