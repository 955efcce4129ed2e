/* Unary elementwise ops on oneDNN's eltwise primitive (and neg on its
 * binary primitive).
 *
 * Which (op, dtype) pairs are here is decided by what oneDNN computes to
 * the reference's tolerance (runner/tolerance.c) on EVERY input, special
 * values included; each was measured over 2^22 random f32 bit patterns
 * and all 65,536 bf16 patterns (kernels/onednn/README.md has the table):
 *   - f32: abs and sqrt (bitwise), tanh (1 ulp; the table allows 2), gelu
 *     erf/tanh (3.2u and 1.2u of |e| + |x|; 8u allowed), pow with the
 *     exponents 1, 2, 3, -1 (at most 1 ulp), neg (bitwise, see below);
 *   - s8/u8: relu, whose integer results are exact.
 * Left out, each for an observed oneDNN 2.6 behaviour:
 *   - every bf16 eltwise: the f32 -> bf16 store (VCVTNEPS2BF16 on
 *     AVX512-BF16) flushes subnormal results to zero, so abs, sqrt, tanh,
 *     ... of a bf16 subnormal give 0 (127 bf16 ulp; the table allows 1);
 *     f16 has no oneDNN CPU eltwise without AVX512-FP16, and none is
 *     claimed without a measurement;
 *   - exp f32: up to 5 ulp over [-80, 80] (2 allowed) and exp(NaN) = +Inf;
 *   - log f32: its polynomial loses relative accuracy near 1 (12288 ulp at
 *     1 + 2^-8); sigmoid f32: exp(-x) overflows first, so for x below
 *     about -87.3 it returns 0 where the result is a normal float; silu
 *     f32: 5 ulp (4 allowed); rsqrt as pow(x, -0.5): pow(-0, -0.5) = +Inf
 *     and pow(-Inf, -0.5) = 0 where 1/sqrt gives -Inf and NaN; pow(x, 0.5)
 *     likewise at -Inf; other exponents go through exp/log;
 *   - relu and clamp on floats: eltwise_relu maps NaN to 0 and -0 to +0,
 *     eltwise_clip maps NaN to its lower bound (and with min > max
 *     returns min, where PyTorch returns max); PyTorch propagates NaN;
 *     clamp on integers: eltwise_clip takes no s8/u8 data in 2.6;
 *   - sin and cos: oneDNN has no such algorithm; abs on s8: eltwise_abs
 *     takes no integer data; integer inputs of exp/log/...: the reference
 *     promotes them to f32;
 *   - relu on s32: oneDNN's integer eltwise goes through f32, which rounds
 *     values above 2^24 (relu(INT32_MAX) = INT32_MIN). */
#include <math.h>
#include <string.h>

#include "onednn/onednn.h"

#define DT(x) (1u << (x))
#define DT_BYTE (DT(KV_I8) | DT(KV_U8))

typedef struct eltwise_spec {
    const char *op;
    dnnl_alg_kind_t alg;
    float alpha, beta;
    unsigned dtypes; /* self dtypes (= result dtypes) the kernel takes */
} eltwise_spec;

/* out = alg(self) with out a new contiguous tensor of self's dtype. A
 * strided or broadcast self is first copied into out (a raw reorder), and
 * the primitive then runs in place: oneDNN 2.6's eltwise has one
 * descriptor for its source and its destination. */
static kv_status eltwise_run(const kv_op *op, kv_stack *stack, kv_tensor *self, dnnl_alg_kind_t alg, float alpha,
                             float beta, unsigned dtypes) {
    const kv_host_api *h = kv_dnnl_host;
    const char *name = h->op_name(op);
    dnnl_data_type_t dt;
    if (!kv_dnnl_on_device(self)) return kv_dnnl_decline(op, stack, "a self outside oneDNN memory");
    if (!(dtypes & DT(self->dtype)) || !kv_dnnl_dtype(self->dtype, &dt))
        return kv_dnnl_decline(op, stack, "dtype %s", h->dtype_name(self->dtype));
    dnnl_memory_desc_t md;
    kv_status st = kv_dnnl_md_dense(name, self->sizes, self->ndim, dt, &md);
    if (st != KV_OK) return st;
    dnnl_eltwise_desc_t ed;
    if (dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, alg, &md, alpha, beta) != dnnl_success)
        return kv_dnnl_decline(op, stack, "dtype %s (oneDNN's eltwise rejects it)", h->dtype_name(self->dtype));
    kv_tensor *out = kv_dnnl_empty(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return h->last_error();
    if (h->tensor_numel(self) == 0) return kv_dnnl_return(stack, out);
    void *src = kv_dnnl_ptr(self);
    if (!h->tensor_is_contiguous(self)) {
        st = kv_dnnl_copy_dense(name, self, out->storage->data);
        src = out->storage->data;
    }
    const kv_dnnl_arg args[2] = { { DNNL_ARG_SRC, &md, src }, { DNNL_ARG_DST, &md, out->storage->data } };
    if (st == KV_OK) st = kv_dnnl_run(name, "eltwise", &ed, NULL, args, 2);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    return kv_dnnl_return(stack, out);
}

static kv_status eltwise_kernel(const eltwise_spec *s, const kv_op *op, kv_stack *stack) {
    return eltwise_run(op, stack, kv_arg_tensor(stack, 0), s->alg, s->alpha, s->beta, s->dtypes);
}

#define ELTWISE_KERNEL(cname, opname, alg, alpha, beta, dtypes)                  \
    static kv_status cname(const kv_op *op, kv_keyset ks, kv_stack *stack) {   \
        (void)ks;                                                              \
        static const eltwise_spec spec = { opname, alg, alpha, beta, dtypes }; \
        return eltwise_kernel(&spec, op, stack);                               \
    }

ELTWISE_KERNEL(od_abs, "abs", dnnl_eltwise_abs, 0.f, 0.f, DT(KV_F32))
ELTWISE_KERNEL(od_sqrt, "sqrt", dnnl_eltwise_sqrt, 0.f, 0.f, DT(KV_F32))
ELTWISE_KERNEL(od_tanh, "tanh", dnnl_eltwise_tanh, 0.f, 0.f, DT(KV_F32))
/* relu's negative slope alpha = 0; integer data only (see the top). */
ELTWISE_KERNEL(od_relu, "relu", dnnl_eltwise_relu, 0.f, 0.f, DT_BYTE)

static kv_status od_gelu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const char *approximate = kv_arg_is_none(stack, 1) ? "none" : kv_arg_str(stack, 1);
    dnnl_alg_kind_t alg;
    if (strcmp(approximate, "none") == 0) alg = dnnl_eltwise_gelu_erf;
    else if (strcmp(approximate, "tanh") == 0) alg = dnnl_eltwise_gelu_tanh;
    else return kv_dnnl_decline(op, stack, "approximate='%s'", approximate);
    return eltwise_run(op, stack, kv_arg_tensor(stack, 0), alg, 0.f, 0.f, DT(KV_F32));
}

/* pow(x, e) for the exponents oneDNN's eltwise_pow evaluates without
 * exp/log (x, x*x, x*x*x, 1/x): within 1 ulp, special values included. */
static bool pow_exponent_ok(double e) {
    static const double ok[] = { 1.0, 2.0, 3.0, -1.0 };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (e == ok[i]) return true;
    return false;
}

static kv_status od_pow(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_dnnl_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_scalar e = kv_arg_scalar(stack, 1);
    const kv_tensor *const tensors[1] = { self };
    float ef;
    if (self->dtype != KV_F32 || h->result_type(tensors, 1, &e, 1) != self->dtype || !kv_dnnl_scalar_f32(e, &ef))
        return kv_dnnl_decline(op, stack, "dtype %s with this exponent", h->dtype_name(self->dtype));
    if (!pow_exponent_ok(ef)) return kv_dnnl_decline(op, stack, "exponent %g (oneDNN goes through exp/log)", (double)ef);
    return eltwise_run(op, stack, self, dnnl_eltwise_pow, 1.f, ef, DT(KV_F32));
}

/* neg: x * -1 on the binary primitive, exact and sign-correct for every
 * input (+0 -> -0). eltwise_linear(-1, 0) computes -x + 0, which turns the
 * -0 of -(+0) into +0. src0 may have any strides; f32 only (bf16 stores
 * flush subnormals, see the top). */
static kv_status od_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_dnnl_host;
    const char *name = "neg";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    dnnl_data_type_t dt;
    if (!kv_dnnl_on_device(self) || !(DT(KV_F32) & DT(self->dtype)) || !kv_dnnl_dtype(self->dtype, &dt))
        return kv_dnnl_decline(op, stack, "dtype %s", h->dtype_name(self->dtype));
    kv_tensor *out = kv_dnnl_empty(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return h->last_error();
    if (h->tensor_numel(self) == 0) return kv_dnnl_return(stack, out);
    float m1 = -1.0f;
    int64_t ones[KV_MAX_DIMS];
    for (int d = 0; d < self->ndim; d++) ones[d] = 1;
    dnnl_memory_desc_t s0, s1, dst;
    kv_status st = kv_dnnl_md_of(name, self, dt, &s0);
    if (st == KV_OK) st = kv_dnnl_md(name, ones, ones, self->ndim, dt, &s1);
    if (st == KV_OK) st = kv_dnnl_md_dense(name, self->sizes, self->ndim, dt, &dst);
    dnnl_binary_desc_t bd;
    if (st == KV_OK && dnnl_binary_desc_init(&bd, dnnl_binary_mul, &s0, &s1, &dst) != dnnl_success)
        st = kv_dnnl_host->error(KV_ERR_MISSING_KERNEL, "neg: no oneDNN kernel for this layout");
    const kv_dnnl_arg args[3] = { { DNNL_ARG_SRC_0, &s0, kv_dnnl_ptr(self) },
                                  { DNNL_ARG_SRC_1, &s1, &m1 },
                                  { DNNL_ARG_DST, &dst, out->storage->data } };
    if (st == KV_OK) st = kv_dnnl_run(name, "binary_mul", &bd, NULL, args, 3);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    return kv_dnnl_return(stack, out);
}

static const kv_dnnl_reg eltwise_kernels[] = {
    { "abs", od_abs },   { "neg", od_neg },   { "sqrt", od_sqrt },  { "tanh", od_tanh },
    { "gelu", od_gelu }, { "relu", od_relu }, { "pow.Tensor_Scalar", od_pow },
};

kv_status kv_dnnl_register_eltwise(kv_key key) {
    return kv_dnnl_register_table(key, eltwise_kernels, (int)(sizeof eltwise_kernels / sizeof eltwise_kernels[0]));
}
