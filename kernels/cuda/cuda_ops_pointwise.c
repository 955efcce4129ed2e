/* CUDA elementwise ops: add, add_, sub, mul, mul_, div, maximum, minimum,
 * the unary ops, pow.Tensor_Scalar and clamp. Checks mirror
 * kernels/ref/ref_binary.c and ref_unary.c; kernels exist for f32 and
 * f64 operands already of the result dtype (anything else declines). */
#include <string.h>

#include "cuda/cuda_shim.h"

#define DT(x) (1u << (x))
#define DTYPES_ALL ((1u << KV_DTYPE_COUNT) - 1)
#define DTYPES_FLOATING (DT(KV_F16) | DT(KV_BF16) | DT(KV_F32) | DT(KV_F64))
#define DTYPES_COMPLEX (DT(KV_C64) | DT(KV_C128))
#define DTYPES_NON_BOOL (DTYPES_ALL & ~DT(KV_BOOL))
#define DTYPES_REAL (DTYPES_ALL & ~DTYPES_COMPLEX & ~DT(KV_BOOL)) /* integers and floats */

static bool is_integral(kv_dtype dt) { return dt <= KV_I64; } /* bool, u8 .. i64 */
static bool is_complex(kv_dtype dt) { return dt == KV_C64 || dt == KV_C128; }

/* A Scalar as the reference computes with it in dtype dt (f32 ops use
 * f32-rounded scalars, PyTorch's opmath). */
static double scalar_value(kv_scalar s, kv_dtype dt) {
    const double d = kv_cuda_host->scalar_to_double(s);
    return dt == KV_F32 ? (double)(float)d : d;
}

static int64_t scalar_int(kv_scalar s) {
    switch (s.kind) {
    case KV_SCALAR_BOOL: return s.v.b;
    case KV_SCALAR_INT: return s.v.i;
    case KV_SCALAR_DOUBLE: return (int64_t)s.v.d;
    case KV_SCALAR_COMPLEX: return (int64_t)s.v.c.re;
    }
    return 0;
}

/* ---- binary ---- */

typedef struct binary_spec {
    const char *op;
    int kind; /* KVC_ADD .. */
    bool has_alpha, inplace;
} binary_spec;

static kv_status binary_check_operands(const binary_spec *s, const kv_tensor *a, const kv_tensor *b) {
    const kv_host_api *h = kv_cuda_host;
    if (s->kind == KVC_SUB && (a->dtype == KV_BOOL || b->dtype == KV_BOOL))
        return h->error(KV_ERR_DTYPE, "%s: subtraction with a bool tensor is not supported", s->op);
    if ((s->kind == KVC_MAXIMUM || s->kind == KVC_MINIMUM) && (is_complex(a->dtype) || is_complex(b->dtype)))
        return h->error(KV_ERR_DTYPE, "%s: argument '%s': complex dtypes are not supported", s->op,
                        is_complex(a->dtype) ? "self" : "other");
    return KV_OK;
}

/* PyTorch's alpha_check. */
static kv_status binary_check_alpha(const char *op, kv_dtype dt, kv_scalar alpha) {
    const kv_host_api *h = kv_cuda_host;
    if (alpha.kind == KV_SCALAR_BOOL && dt != KV_BOOL)
        return h->error(KV_ERR_INVALID_ARG, "%s: argument 'alpha': Boolean alpha only supported for Boolean results",
                        op);
    if (is_integral(dt) && (alpha.kind == KV_SCALAR_DOUBLE || alpha.kind == KV_SCALAR_COMPLEX))
        return h->error(KV_ERR_INVALID_ARG, "%s: argument 'alpha': for integral input tensors, alpha must not be a "
                                            "floating point number", op);
    if (!is_complex(dt) && alpha.kind == KV_SCALAR_COMPLEX)
        return h->error(KV_ERR_INVALID_ARG,
                        "%s: argument 'alpha': for non-complex input tensors, alpha must not be a complex number", op);
    return KV_OK;
}

static kv_status binary_check_inplace(const char *op, const kv_tensor *self, kv_dtype dt, const int64_t *sizes,
                                      int ndim) {
    const kv_host_api *h = kv_cuda_host;
    char a[KV_CUDA_SHAPE_BUF], b[KV_CUDA_SHAPE_BUF];
    if (!h->can_cast(dt, self->dtype))
        return h->error(KV_ERR_DTYPE, "%s: argument 'self': result type %s can't be cast to the desired output type %s",
                        op, h->dtype_name(dt), h->dtype_name(self->dtype));
    if (ndim != self->ndim || memcmp(sizes, self->sizes, sizeof(int64_t) * (size_t)ndim) != 0)
        return h->error(KV_ERR_SHAPE, "%s: argument 'self': output with shape %s doesn't match the broadcast shape %s",
                        op, kv_cuda_shape(self->sizes, self->ndim, a, sizeof a), kv_cuda_shape(sizes, ndim, b, sizeof b));
    return kv_cuda_check_writable(op, "self", self);
}

static kv_status binary_run(const binary_spec *s, kv_stack *stack) {
    const kv_host_api *h = kv_cuda_host;
    kv_tensor *self = kv_arg_tensor(stack, 0), *other = kv_arg_tensor(stack, 1);
    const kv_scalar alpha = s->has_alpha ? kv_arg_scalar(stack, 2) : kv_scalar_int(1);
    kv_status st = binary_check_operands(s, self, other);
    if (st != KV_OK) return st;
    const kv_tensor *const operands[2] = { self, other };
    kv_dtype dt = h->result_type(operands, 2, NULL, 0);
    if (s->kind == KVC_DIV && is_integral(dt)) dt = KV_F32;
    if (s->has_alpha && (st = binary_check_alpha(s->op, dt, alpha)) != KV_OK) return st;
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    if (h->broadcast_shapes(self->sizes, self->ndim, other->sizes, other->ndim, sizes, &ndim) != KV_OK) {
        char a[KV_CUDA_SHAPE_BUF], b[KV_CUDA_SHAPE_BUF];
        return h->error(KV_ERR_SHAPE, "%s: argument 'other': shape %s does not broadcast with shape %s (argument 'self')",
                        s->op, kv_cuda_shape(other->sizes, other->ndim, a, sizeof a),
                        kv_cuda_shape(self->sizes, self->ndim, b, sizeof b));
    }
    if (s->inplace && (st = binary_check_inplace(s->op, self, dt, sizes, ndim)) != KV_OK) return st;

    const int code = kv_cuda_dtype_code(dt);
    if (code < 0 || self->dtype != dt || other->dtype != dt)
        return kv_cuda_decline(s->op, "%s %s %s (result %s)", h->dtype_name(self->dtype), s->op,
                               h->dtype_name(other->dtype), h->dtype_name(dt));
    if (s->inplace && (!kv_cuda_on_device(self) ||
                       (other->storage == self->storage &&
                        (other->offset != self->offset || memcmp(other->strides, self->strides, sizeof self->strides)))))
        return kv_cuda_decline(s->op, "an in-place write whose operand overlaps self in another layout");
    kv_tensor *ta = NULL, *tb = NULL;
    kv_tensor *a = kv_cuda_operand(self, &ta), *b = a ? kv_cuda_operand(other, &tb) : NULL;
    kv_tensor *out = NULL;
    if (b != NULL) out = s->inplace ? self : kv_cuda_empty(sizes, ndim, dt);
    if (out == NULL) {
        h->tensor_release(ta);
        h->tensor_release(tb);
        return h->last_error();
    }
    kvc_binary_args args;
    memset(&args, 0, sizeof args);
    args.op = s->kind;
    args.dtype = code;
    args.n = h->tensor_numel(out);
    args.out = out->storage->data;
    args.og = kv_cuda_geom_of(out);
    args.a = a->storage->data;
    args.b = b->storage->data;
    kv_cuda_geom_broadcast(a, sizes, ndim, &args.ga);
    kv_cuda_geom_broadcast(b, sizes, ndim, &args.gb);
    args.alpha = scalar_value(alpha, dt);
    const int rc = kvc_binary(&args);
    h->tensor_release(ta);
    h->tensor_release(tb);
    if (rc != 0) {
        if (!s->inplace) h->tensor_release(out);
        return kv_cuda_device_error(s->op);
    }
    if (s->inplace) {
        h->tensor_bump_version(self);
        h->tensor_retain(self);
    }
    return kv_cuda_return(stack, out);
}

#define BINARY_KERNEL(cname, opname, opkind, alpha, inplace)                        \
    static kv_status cname(const kv_op *op, kv_keyset ks, kv_stack *stack) {      \
        (void)op;                                                                 \
        (void)ks;                                                                 \
        static const binary_spec spec = { opname, opkind, alpha, inplace };       \
        return binary_run(&spec, stack);                                          \
    }

BINARY_KERNEL(cuda_add, "add.Tensor", KVC_ADD, true, false)
BINARY_KERNEL(cuda_add_, "add_.Tensor", KVC_ADD, true, true)
BINARY_KERNEL(cuda_sub, "sub.Tensor", KVC_SUB, true, false)
BINARY_KERNEL(cuda_mul, "mul.Tensor", KVC_MUL, false, false)
BINARY_KERNEL(cuda_mul_, "mul_.Tensor", KVC_MUL, false, true)
BINARY_KERNEL(cuda_div, "div.Tensor", KVC_DIV, false, false)
BINARY_KERNEL(cuda_maximum, "maximum", KVC_MAXIMUM, false, false)
BINARY_KERNEL(cuda_minimum, "minimum", KVC_MINIMUM, false, false)

/* ---- unary ---- */

typedef struct unary_spec {
    const char *op;
    int kind;
    unsigned allowed;
} unary_spec;

/* Checks self's dtype, then runs `kind` with parameters p0/p1 when self is
 * f32/f64 and the result has its dtype. */
static kv_status unary_launch(const char *opname, int kind, kv_tensor *self, kv_dtype out_dt, double p0, double p1,
                              int has_lo, int has_hi, kv_stack *stack) {
    const kv_host_api *h = kv_cuda_host;
    const int code = kv_cuda_dtype_code(self->dtype);
    if (code < 0 || out_dt != self->dtype)
        return kv_cuda_decline(opname, "dtype %s (result %s)", h->dtype_name(self->dtype), h->dtype_name(out_dt));
    kv_tensor *out = kv_cuda_empty(self->sizes, self->ndim, out_dt);
    if (out == NULL) return h->last_error();
    kvc_unary_args args;
    memset(&args, 0, sizeof args);
    args.op = kind;
    args.dtype = code;
    args.n = h->tensor_numel(self);
    args.out = out->storage->data;
    args.og = kv_cuda_geom_of(out);
    args.in = self->storage->data;
    args.ig = kv_cuda_geom_of(self);
    args.p0 = p0;
    args.p1 = p1;
    args.has_lo = has_lo;
    args.has_hi = has_hi;
    if (kvc_unary(&args) != 0) {
        h->tensor_release(out);
        return kv_cuda_device_error(opname);
    }
    return kv_cuda_return(stack, out);
}

static kv_status unary_run(const unary_spec *s, int kind, kv_stack *stack) {
    const kv_host_api *h = kv_cuda_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!(s->allowed & DT(self->dtype)))
        return h->error(KV_ERR_DTYPE, "%s: argument 'self': dtype %s is not supported", s->op,
                        h->dtype_name(self->dtype));
    if (!kv_cuda_on_device(self)) return kv_cuda_decline(s->op, "a self that is not in CUDA memory");
    return unary_launch(s->op, kind, self, self->dtype, 0, 0, 0, 0, stack);
}

#define UNARY_KERNEL(cname, opname, opkind, allowed)                                \
    static kv_status cname(const kv_op *op, kv_keyset ks, kv_stack *stack) {      \
        (void)op;                                                                 \
        (void)ks;                                                                 \
        static const unary_spec spec = { opname, opkind, allowed };               \
        return unary_run(&spec, spec.kind, stack);                                \
    }

UNARY_KERNEL(cuda_neg, "neg", KVC_NEG, DTYPES_NON_BOOL)
UNARY_KERNEL(cuda_abs, "abs", KVC_ABS, DTYPES_NON_BOOL)
UNARY_KERNEL(cuda_exp, "exp", KVC_EXP, DTYPES_ALL)
UNARY_KERNEL(cuda_log, "log", KVC_LOG, DTYPES_ALL)
UNARY_KERNEL(cuda_sqrt, "sqrt", KVC_SQRT, DTYPES_ALL)
UNARY_KERNEL(cuda_rsqrt, "rsqrt", KVC_RSQRT, DTYPES_ALL)
UNARY_KERNEL(cuda_sin, "sin", KVC_SIN, DTYPES_ALL)
UNARY_KERNEL(cuda_cos, "cos", KVC_COS, DTYPES_ALL)
UNARY_KERNEL(cuda_tanh, "tanh", KVC_TANH, DTYPES_ALL)
UNARY_KERNEL(cuda_sigmoid, "sigmoid", KVC_SIGMOID, DTYPES_ALL)
UNARY_KERNEL(cuda_relu, "relu", KVC_RELU, DTYPES_REAL)
UNARY_KERNEL(cuda_silu, "silu", KVC_SILU, DTYPES_FLOATING)

static kv_status cuda_gelu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    static const unary_spec spec = { "gelu", KVC_GELU, DTYPES_FLOATING };
    const char *approximate = kv_arg_is_none(stack, 1) ? "none" : kv_arg_str(stack, 1);
    int kind;
    if (strcmp(approximate, "none") == 0) kind = KVC_GELU;
    else if (strcmp(approximate, "tanh") == 0) kind = KVC_GELU_TANH;
    else
        return kv_cuda_host->error(KV_ERR_INVALID_ARG, "gelu: argument 'approximate': '%s' is not 'none' or 'tanh'",
                                   approximate);
    return unary_run(&spec, kind, stack);
}

static kv_status cuda_pow(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "pow.Tensor_Scalar";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_scalar e = kv_arg_scalar(stack, 1);
    const kv_tensor *const tensors[1] = { self };
    const kv_dtype dt = h->result_type(tensors, 1, &e, 1);
    if (is_integral(dt) && scalar_int(e) < 0)
        return h->error(KV_ERR_INVALID_ARG, "%s: argument 'exponent': integers to negative integer powers are not "
                                            "allowed (%lld)", name, (long long)scalar_int(e));
    if (!kv_cuda_on_device(self)) return kv_cuda_decline(name, "a self that is not in CUDA memory");
    return unary_launch(name, KVC_POW, self, dt, scalar_value(e, dt), 0, 0, 0, stack);
}

static kv_status cuda_clamp(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const bool has_lo = !kv_arg_is_none(stack, 1), has_hi = !kv_arg_is_none(stack, 2);
    if (!has_lo && !has_hi)
        return h->error(KV_ERR_INVALID_ARG, "clamp: arguments 'min' and 'max': at least one of 'min' or 'max' must "
                                            "not be None");
    kv_scalar bounds[2];
    int nb = 0;
    if (has_lo) bounds[nb++] = kv_arg_scalar(stack, 1);
    if (has_hi) bounds[nb++] = kv_arg_scalar(stack, 2);
    const kv_tensor *const tensors[1] = { self };
    const kv_dtype dt = h->result_type(tensors, 1, bounds, nb);
    if (is_complex(dt))
        return h->error(KV_ERR_DTYPE, "clamp: argument '%s': complex dtypes are not supported (result dtype %s)",
                        is_complex(self->dtype) ? "self" : "min/max", h->dtype_name(dt));
    if (!kv_cuda_on_device(self)) return kv_cuda_decline("clamp", "a self that is not in CUDA memory");
    const double lo = has_lo ? scalar_value(kv_arg_scalar(stack, 1), dt) : 0.0;
    const double hi = has_hi ? scalar_value(kv_arg_scalar(stack, 2), dt) : 0.0;
    return unary_launch("clamp", KVC_CLAMP, self, dt, lo, hi, has_lo, has_hi, stack);
}

typedef struct reg {
    const char *op;
    kv_kernel_fn fn;
} reg;

static const reg pointwise_kernels[] = {
    { "add.Tensor", cuda_add },   { "add_.Tensor", cuda_add_ },   { "sub.Tensor", cuda_sub },
    { "mul.Tensor", cuda_mul },   { "mul_.Tensor", cuda_mul_ },   { "div.Tensor", cuda_div },
    { "maximum", cuda_maximum },  { "minimum", cuda_minimum },    { "neg", cuda_neg },
    { "abs", cuda_abs },          { "exp", cuda_exp },            { "log", cuda_log },
    { "sqrt", cuda_sqrt },        { "rsqrt", cuda_rsqrt },        { "sin", cuda_sin },
    { "cos", cuda_cos },          { "tanh", cuda_tanh },          { "sigmoid", cuda_sigmoid },
    { "relu", cuda_relu },        { "silu", cuda_silu },          { "gelu", cuda_gelu },
    { "pow.Tensor_Scalar", cuda_pow }, { "clamp", cuda_clamp },
};

kv_status kv_cuda_register_pointwise(kv_key key) {
    for (size_t i = 0; i < sizeof pointwise_kernels / sizeof pointwise_kernels[0]; i++) {
        const kv_status st = kv_cuda_host->register_kernel(pointwise_kernels[i].op, key, pointwise_kernels[i].fn);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
