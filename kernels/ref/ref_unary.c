/* Unary references: neg, abs, exp, log, sqrt, rsqrt, sin, cos, tanh,
 * sigmoid, relu, gelu, silu, clamp, clamp_.Tensor.
 *
 * Computation type and rounding. Transcendental ops (exp .. sigmoid)
 * promote bool/integral inputs to f32 (PyTorch's default float) and keep
 * floating and complex dtypes. Inputs are cast to the result dtype, then
 * reals are computed with libm in double and rounded once on store;
 * complex values with <complex.h> in double complex, rounded once per
 * component. Integers (neg, abs, relu, clamp) compute in int64/uint64 and
 * wrap to the result width (abs(-128 as i8) is -128, as in PyTorch).
 * Formulas: rsqrt 1/sqrt(x); sigmoid 1/(1 + exp(-x)); silu x/(1 + exp(-x));
 * gelu 'none' x*0.5*(1 + erf(x/sqrt 2)), 'tanh'
 * 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715*x^3))); abs of complex is
 * hypot(re, im) in the real dtype.
 *
 * Choices where PyTorch is silent or inconsistent:
 *   - relu(x) = x < 0 ? 0 : x, so relu(-0.0) = -0.0 and NaN stays NaN;
 *   - silu on complex is KV_ERR_DTYPE (PyTorch CPU accepts it);
 *   - clamp: a NaN input, or a NaN bound that is present, gives NaN;
 *     otherwise min(max(x, lo), hi), so lo > hi gives hi everywhere. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

#include <complex.h>
#include <math.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* ---- scalar functions ---- */

#define REF_REAL_FN(name, expr)                                        \
    static kv_ref_val name(const kv_ref_val *x, const void *ctx) {    \
        (void)ctx;                                                     \
        const double v = x[0].re;                                      \
        return kv_ref_val_real(expr);                                  \
    }
#define REF_COMPLEX_FN(name, expr)                                     \
    static kv_ref_val name(const kv_ref_val *x, const void *ctx) {    \
        (void)ctx;                                                     \
        const double complex z = CMPLX(x[0].re, x[0].im);              \
        const double complex r = (expr);                               \
        return kv_ref_val_complex(creal(r), cimag(r));                 \
    }

static kv_ref_val neg_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int((int64_t)((uint64_t)0 - (uint64_t)x[0].i));
}
REF_REAL_FN(neg_r, -v)
static kv_ref_val neg_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_complex(-x[0].re, -x[0].im);
}
static kv_ref_val abs_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    const uint64_t u = (uint64_t)x[0].i;
    return kv_ref_val_int((int64_t)(x[0].i < 0 ? (uint64_t)0 - u : u));
}
REF_REAL_FN(abs_r, fabs(v))
static kv_ref_val abs_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_real(hypot(x[0].re, x[0].im));
}
REF_REAL_FN(exp_r, exp(v))
REF_COMPLEX_FN(exp_c, cexp(z))
REF_REAL_FN(log_r, log(v))
REF_COMPLEX_FN(log_c, clog(z))
REF_REAL_FN(sqrt_r, sqrt(v))
REF_COMPLEX_FN(sqrt_c, csqrt(z))
REF_REAL_FN(rsqrt_r, 1.0 / sqrt(v))
REF_COMPLEX_FN(rsqrt_c, 1.0 / csqrt(z))
REF_REAL_FN(sin_r, sin(v))
REF_COMPLEX_FN(sin_c, csin(z))
REF_REAL_FN(cos_r, cos(v))
REF_COMPLEX_FN(cos_c, ccos(z))
REF_REAL_FN(tanh_r, tanh(v))
REF_COMPLEX_FN(tanh_c, ctanh(z))
/* For v < 0, e^v/(1 + e^v): exp(-v) would overflow below -709.78 and give
 * 0 where the result is a (subnormal) e^v, 2^47 ulps off in f64 (the
 * accuracy sweep found it). */
REF_REAL_FN(sigmoid_r, v >= 0.0 ? 1.0 / (1.0 + exp(-v)) : exp(v) / (1.0 + exp(v)))
REF_COMPLEX_FN(sigmoid_c, 1.0 / (1.0 + cexp(-z)))
static kv_ref_val relu_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].i < 0 ? 0 : x[0].i);
}
REF_REAL_FN(relu_r, v < 0.0 ? 0.0 : v)
REF_REAL_FN(gelu_none_r, v * 0.5 * (1.0 + erf(v / sqrt(2.0))))
REF_REAL_FN(gelu_tanh_r, 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))))
/* As sigmoid: v e^v/(1 + e^v) below 0 (silu(-inf) = -inf * 0 = NaN).
 * Below -708 e^v is subnormal and has lost its digits before the product
 * with v (352 ulps off in f64); (v e^(v/2)) e^(v/2) keeps them, and
 * 1 + e^v is 1 there. */
static double ref_silu_neg(double v) {
    if (v < -708.0) {
        const double h = exp(0.5 * v);
        return (v * h) * h;
    }
    return v * exp(v) / (1.0 + exp(v));
}
REF_REAL_FN(silu_r, v >= 0.0 ? v / (1.0 + exp(-v)) : ref_silu_neg(v))

static const kv_ref_ewise_fns fns_neg = { neg_i, neg_r, neg_c };
static const kv_ref_ewise_fns fns_abs = { abs_i, abs_r, abs_c };
static const kv_ref_ewise_fns fns_exp = { NULL, exp_r, exp_c };
static const kv_ref_ewise_fns fns_log = { NULL, log_r, log_c };
static const kv_ref_ewise_fns fns_sqrt = { NULL, sqrt_r, sqrt_c };
static const kv_ref_ewise_fns fns_rsqrt = { NULL, rsqrt_r, rsqrt_c };
static const kv_ref_ewise_fns fns_sin = { NULL, sin_r, sin_c };
static const kv_ref_ewise_fns fns_cos = { NULL, cos_r, cos_c };
static const kv_ref_ewise_fns fns_tanh = { NULL, tanh_r, tanh_c };
static const kv_ref_ewise_fns fns_sigmoid = { NULL, sigmoid_r, sigmoid_c };
static const kv_ref_ewise_fns fns_relu = { relu_i, relu_r, NULL };
static const kv_ref_ewise_fns fns_gelu_none = { NULL, gelu_none_r, NULL };
static const kv_ref_ewise_fns fns_gelu_tanh = { NULL, gelu_tanh_r, NULL };
static const kv_ref_ewise_fns fns_silu = { NULL, silu_r, NULL };

/* ---- the shared kernel body ---- */

typedef enum ref_unary_result {
    REF_SAME,       /* result dtype = input dtype */
    REF_TO_FLOAT,   /* bool/integral inputs promote to f32 */
    REF_TO_REAL     /* complex inputs give their real dtype (abs) */
} ref_unary_result;

typedef struct ref_unary_spec {
    const char *op;
    const kv_ref_ewise_fns *fns;
    unsigned allowed;         /* input dtypes accepted */
    ref_unary_result result;
} ref_unary_spec;

static kv_status ref_unary_run(const ref_unary_spec *s, const kv_ref_ewise_fns *fns, kv_stack *stack) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st;
    if ((st = kv_ref_check_cpu(s->op, "self", self)) != KV_OK) return st;
    if ((st = kv_ref_check_dtype(s->op, "self", self->dtype, s->allowed)) != KV_OK) return st;
    kv_dtype compute = self->dtype, out_dt = self->dtype;
    switch (s->result) {
    case REF_SAME: break;
    case REF_TO_FLOAT:
        if (kv_dtype_is_integral(self->dtype, true)) compute = out_dt = KV_F32;
        break;
    case REF_TO_REAL: out_dt = kv_dtype_to_real(self->dtype); break;
    }
    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, out_dt);
    if (out == NULL) return kv_last_error();
    kv_tensor *const inputs[1] = { self };
    if ((st = kv_ref_ewise_run(s->op, fns, NULL, compute, out, inputs, 1)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

#define REF_NON_BOOL (KV_DTYPES_ALL & ~(1u << KV_BOOL))

#define REF_UNARY_KERNEL(cname, opname, allowed, result)                        \
    KV_REF_KERNEL(cname) {                                                    \
        (void)op;                                                             \
        (void)ks;                                                             \
        static const ref_unary_spec spec = { opname, &fns_##cname, allowed, result }; \
        return ref_unary_run(&spec, spec.fns, stack);                         \
    }

REF_UNARY_KERNEL(neg, "neg", REF_NON_BOOL, REF_SAME)
REF_UNARY_KERNEL(abs, "abs", REF_NON_BOOL, REF_TO_REAL)
REF_UNARY_KERNEL(exp, "exp", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(log, "log", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(sqrt, "sqrt", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(rsqrt, "rsqrt", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(sin, "sin", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(cos, "cos", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(tanh, "tanh", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(sigmoid, "sigmoid", KV_DTYPES_ALL, REF_TO_FLOAT)
REF_UNARY_KERNEL(relu, "relu", KV_DTYPES_REAL, REF_SAME)
REF_UNARY_KERNEL(silu, "silu", KV_DTYPES_FLOATING, REF_SAME)

KV_REF_KERNEL(gelu) {
    (void)op;
    (void)ks;
    static const ref_unary_spec spec = { "gelu", &fns_gelu_none, KV_DTYPES_FLOATING, REF_SAME };
    const char *approximate = kv_arg_is_none(stack, 1) ? "none" : kv_arg_str(stack, 1);
    const kv_ref_ewise_fns *fns;
    if (strcmp(approximate, "none") == 0)
        fns = &fns_gelu_none;
    else if (strcmp(approximate, "tanh") == 0)
        fns = &fns_gelu_tanh;
    else
        return kv_error(KV_ERR_INVALID_ARG, "gelu: argument 'approximate': '%s' is not 'none' or 'tanh'",
                        approximate);
    return ref_unary_run(&spec, fns, stack);
}

/* ---- clamp: x[0] self, then the bounds that are present ---- */

typedef struct ref_clamp_ctx {
    int lo, hi;             /* index of the bound in x[], or -1 when absent */
    kv_ref_val lo_s, hi_s;  /* scalar bounds (clamp), used when in_x is false */
    bool in_x;              /* bounds are tensor operands (clamp_.Tensor) */
} ref_clamp_ctx;

static const kv_ref_val *ref_clamp_bound(const ref_clamp_ctx *c, const kv_ref_val *x, int which) {
    const int idx = which ? c->hi : c->lo;
    if (idx < 0) return NULL;
    if (c->in_x) return &x[idx];
    return which ? &c->hi_s : &c->lo_s;
}

static kv_ref_val clamp_i(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *lo = ref_clamp_bound(ctx, x, 0), *hi = ref_clamp_bound(ctx, x, 1);
    int64_t v = x[0].i;
    if (lo && v < lo->i) v = lo->i;
    if (hi && hi->i < v) v = hi->i;
    return kv_ref_val_int(v);
}
static kv_ref_val clamp_r(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *lo = ref_clamp_bound(ctx, x, 0), *hi = ref_clamp_bound(ctx, x, 1);
    if (isnan(x[0].re)) return x[0];
    if (lo && isnan(lo->re)) return *lo;
    if (hi && isnan(hi->re)) return *hi;
    double v = x[0].re;
    if (lo && v < lo->re) v = lo->re;
    if (hi && hi->re < v) v = hi->re;
    return kv_ref_val_real(v);
}
static const kv_ref_ewise_fns fns_clamp = { clamp_i, clamp_r, NULL };

KV_REF_KERNEL(clamp) {
    (void)op;
    (void)ks;
    static const char *const name = "clamp";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const bool has_lo = !kv_arg_is_none(stack, 1), has_hi = !kv_arg_is_none(stack, 2);
    kv_status st;
    if ((st = kv_ref_check_cpu(name, "self", self)) != KV_OK) return st;
    if (!has_lo && !has_hi)
        return kv_error(KV_ERR_INVALID_ARG, "clamp: arguments 'min' and 'max': at least one of 'min' or 'max' must "
                                            "not be None");
    kv_scalar bounds[2];
    int nb = 0;
    if (has_lo) bounds[nb++] = kv_arg_scalar(stack, 1);
    if (has_hi) bounds[nb++] = kv_arg_scalar(stack, 2);
    const kv_tensor *const tensors[1] = { self };
    const kv_dtype dt = kv_result_type(tensors, 1, bounds, nb);
    if (kv_dtype_is_complex(dt))
        return kv_error(KV_ERR_DTYPE, "clamp: argument '%s': complex dtypes are not supported (result dtype %s)",
                        kv_dtype_is_complex(self->dtype) ? "self" : "min/max", kv_dtype_name(dt));
    ref_clamp_ctx c = { has_lo ? 0 : -1, has_hi ? 1 : -1, kv_ref_val_int(0), kv_ref_val_int(0), false };
    if (has_lo) c.lo_s = kv_ref_val_of_scalar(kv_arg_scalar(stack, 1), dt);
    if (has_hi) c.hi_s = kv_ref_val_of_scalar(kv_arg_scalar(stack, 2), dt);
    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, dt);
    if (out == NULL) return kv_last_error();
    kv_tensor *const inputs[1] = { self };
    if ((st = kv_ref_ewise_run(name, &fns_clamp, &c, dt, out, inputs, 1)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(clamp_) {
    (void)op;
    (void)ks;
    static const char *const name = "clamp_.Tensor";
    static const char *const names[3] = { "self", "min", "max" };
    kv_tensor *const args[3] = { kv_arg_tensor(stack, 0), kv_arg_tensor(stack, 1), kv_arg_tensor(stack, 2) };
    kv_tensor *self = args[0];
    kv_status st;
    for (int k = 0; k < 3; k++)
        if (args[k] && (st = kv_ref_check_cpu(name, names[k], args[k])) != KV_OK) return st;
    if (args[1] == NULL && args[2] == NULL)
        return kv_error(KV_ERR_INVALID_ARG,
                        "clamp_.Tensor: arguments 'min' and 'max': at least one of 'min' or 'max' must not be None");
    const kv_dtype dt = kv_result_type((const kv_tensor *const *)args, 3, NULL, 0);
    for (int k = 0; k < 3; k++)
        if (args[k] && kv_dtype_is_complex(args[k]->dtype))
            return kv_error(KV_ERR_DTYPE, "clamp_.Tensor: argument '%s': complex dtype %s is not supported", names[k],
                            kv_dtype_name(args[k]->dtype));
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    if ((st = kv_ref_broadcast_shape(name, args, names, 3, sizes, &ndim)) != KV_OK) return st;
    if ((st = kv_ref_check_inplace(name, self, dt, sizes, ndim)) != KV_OK) return st;

    kv_tensor *inputs[3] = { self };
    int nin = 1;
    ref_clamp_ctx c = { -1, -1, kv_ref_val_int(0), kv_ref_val_int(0), true };
    if (args[1]) { c.lo = nin; inputs[nin++] = args[1]; }
    if (args[2]) { c.hi = nin; inputs[nin++] = args[2]; }
    if ((st = kv_ref_ewise_run(name, &fns_clamp, &c, dt, self, inputs, nin)) != KV_OK) return st;
    kv_tensor_bump_version(self);
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}
