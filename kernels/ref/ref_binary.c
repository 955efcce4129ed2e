/* Binary arithmetic references: add, add_, sub, mul, mul_, div, maximum,
 * minimum, pow.Tensor_Scalar.
 *
 * Computation type and rounding. The result dtype is PyTorch's result_type
 * of the operands (div: integral/bool results become f32; pow: the
 * exponent takes part as a scalar). Each input element is first cast to
 * that dtype, then:
 *   - bool and integers compute in uint64 and wrap to the result width
 *     (two's complement), so overflow is defined, as in PyTorch;
 *   - floating types compute in double and round once on store, so an
 *     f32/f16/bf16 result of a single operation (mul, div, sub without
 *     alpha) is the correctly rounded exact result; with alpha != 1 the
 *     double computes a + alpha*b with one rounding (fma), then one more
 *     on store, so an f64 result is correctly rounded and alpha*b never
 *     overflows on its own;
 *   - complex types compute in double complex: multiplication is the
 *     textbook (ac - bd) + (ad + bc)i, as c10::complex does (no C Annex G
 *     inf/nan recovery), division is Smith's scaled algorithm, pow is cpow.
 * Scalars (alpha, the exponent) are first rounded to f32 for f16/bf16/f32
 * results (PyTorch's opmath type), to c64 for c64 results.
 *
 * maximum/minimum follow IEEE 754-2019 maximum/minimum: NaN propagates
 * (the first NaN operand is returned, payload kept) and -0 < +0. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

#include <complex.h>
#include <math.h>

/* ---- scalar functions: x[0] self, x[1] other; ctx holds alpha ---- */

static uint64_t ref_u(int64_t v) { return (uint64_t)v; }

static kv_ref_val add_i(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *a = ctx;
    return kv_ref_val_int((int64_t)(ref_u(x[0].i) + ref_u(a->i) * ref_u(x[1].i)));
}
/* a + alpha*b with one rounding (fma): the product never overflows or
 * rounds on its own, so inf + (-2.5 * DBL_MAX) is inf, not inf - inf. */
static kv_ref_val add_r(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *a = ctx;
    /* alpha = 1: a + b is the same single rounding, and plain addition
     * keeps Valgrind's inexact FMA emulation (-0 + -0 came out +0) away
     * from the common case. */
    if (a->re == 1.0) return kv_ref_val_real(x[0].re + x[1].re);
    return kv_ref_val_real(fma(a->re, x[1].re, x[0].re));
}
static kv_ref_val add_c(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *a = ctx;
    const double pr = a->re * x[1].re - a->im * x[1].im;
    const double pi = a->re * x[1].im + a->im * x[1].re;
    return kv_ref_val_complex(x[0].re + pr, x[0].im + pi);
}
static kv_ref_val sub_i(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *a = ctx;
    return kv_ref_val_int((int64_t)(ref_u(x[0].i) - ref_u(a->i) * ref_u(x[1].i)));
}
static kv_ref_val sub_r(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *a = ctx;
    if (a->re == 1.0) return kv_ref_val_real(x[0].re - x[1].re); /* as add_r */
    return kv_ref_val_real(fma(-a->re, x[1].re, x[0].re));
}
static kv_ref_val sub_c(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *a = ctx;
    const double pr = a->re * x[1].re - a->im * x[1].im;
    const double pi = a->re * x[1].im + a->im * x[1].re;
    return kv_ref_val_complex(x[0].re - pr, x[0].im - pi);
}
static kv_ref_val mul_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int((int64_t)(ref_u(x[0].i) * ref_u(x[1].i)));
}
static kv_ref_val mul_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_real(x[0].re * x[1].re);
}
static kv_ref_val mul_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_complex(x[0].re * x[1].re - x[0].im * x[1].im,
                              x[0].re * x[1].im + x[0].im * x[1].re);
}
static kv_ref_val div_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_real(x[0].re / x[1].re);
}
/* Smith's algorithm: divide by the larger of |c|, |d| first so c*c + d*d
 * cannot overflow or underflow on the way. */
static kv_ref_val div_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    const double a = x[0].re, b = x[0].im, c = x[1].re, d = x[1].im;
    if (fabs(c) >= fabs(d)) {
        if (c == 0.0 && d == 0.0) return kv_ref_val_complex(a / fabs(c), b / fabs(d));
        const double r = d / c, s = 1.0 / (c + d * r);
        return kv_ref_val_complex((a + b * r) * s, (b - a * r) * s);
    }
    const double r = c / d, s = 1.0 / (d + c * r);
    return kv_ref_val_complex((a * r + b) * s, (b * r - a) * s);
}
static kv_ref_val max_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].i > x[1].i ? x[0].i : x[1].i);
}
static kv_ref_val max_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    const double a = x[0].re, b = x[1].re;
    if (isnan(a)) return x[0];
    if (isnan(b)) return x[1];
    if (a == b) return kv_ref_val_real(signbit(a) ? b : a); /* +0 beats -0 */
    return kv_ref_val_real(a > b ? a : b);
}
static kv_ref_val min_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].i < x[1].i ? x[0].i : x[1].i);
}
static kv_ref_val min_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    const double a = x[0].re, b = x[1].re;
    if (isnan(a)) return x[0];
    if (isnan(b)) return x[1];
    if (a == b) return kv_ref_val_real(signbit(a) ? a : b); /* -0 beats +0 */
    return kv_ref_val_real(a < b ? a : b);
}

/* ---- pow: ctx holds the exponent in the compute category ---- */
static kv_ref_val pow_i(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *e = ctx;
    /* Exact square-and-multiply modulo 2^64; the caller rejected e < 0. */
    uint64_t base = ref_u(x[0].i), result = 1;
    for (uint64_t n = ref_u(e->i); n != 0; n >>= 1) {
        if (n & 1u) result *= base;
        base *= base;
    }
    return kv_ref_val_int((int64_t)result);
}
static kv_ref_val pow_r(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *e = ctx;
    return kv_ref_val_real(pow(x[0].re, e->re));
}
static kv_ref_val pow_c(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *e = ctx;
    const double complex z = cpow(CMPLX(x[0].re, x[0].im), CMPLX(e->re, e->im));
    return kv_ref_val_complex(creal(z), cimag(z));
}

static const kv_ref_ewise_fns fns_add = { add_i, add_r, add_c };
static const kv_ref_ewise_fns fns_sub = { sub_i, sub_r, sub_c };
static const kv_ref_ewise_fns fns_mul = { mul_i, mul_r, mul_c };
static const kv_ref_ewise_fns fns_div = { NULL, div_r, div_c };
static const kv_ref_ewise_fns fns_maximum = { max_i, max_r, NULL };
static const kv_ref_ewise_fns fns_minimum = { min_i, min_r, NULL };
static const kv_ref_ewise_fns fns_pow = { pow_i, pow_r, pow_c };

/* ---- the shared kernel body ---- */

typedef enum ref_binary_kind { REF_ADD, REF_SUB, REF_MUL, REF_DIV, REF_MAXIMUM, REF_MINIMUM } ref_binary_kind;

typedef struct ref_binary_spec {
    const char *op;
    ref_binary_kind kind;
    const kv_ref_ewise_fns *fns;
    bool has_alpha;
    bool inplace;
} ref_binary_spec;

/* PyTorch's alpha_check. */
static kv_status ref_check_alpha(const char *op, kv_dtype dt, kv_scalar alpha) {
    if (alpha.kind == KV_SCALAR_BOOL && dt != KV_BOOL)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'alpha': Boolean alpha only supported for Boolean results",
                        op);
    if (kv_dtype_is_integral(dt, true) && (alpha.kind == KV_SCALAR_DOUBLE || alpha.kind == KV_SCALAR_COMPLEX))
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'alpha': for integral input tensors, alpha must not be a floating point "
                        "number (result dtype %s)",
                        op, kv_dtype_name(dt));
    if (!kv_dtype_is_complex(dt) && alpha.kind == KV_SCALAR_COMPLEX)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'alpha': for non-complex input tensors, alpha must not be a complex number",
                        op);
    return KV_OK;
}

static kv_status ref_check_operand_dtypes(const ref_binary_spec *s, const kv_tensor *self, const kv_tensor *other) {
    switch (s->kind) {
    case REF_SUB:
        if (self->dtype == KV_BOOL && other->dtype == KV_BOOL)
            return kv_error(KV_ERR_DTYPE,
                            "%s: arguments 'self' and 'other': subtraction, the `-` operator, with two bool "
                            "tensors is not supported; use the `^` or logical_xor() operator instead",
                            s->op);
        if (self->dtype == KV_BOOL || other->dtype == KV_BOOL)
            return kv_error(KV_ERR_DTYPE,
                            "%s: argument '%s': subtraction, the `-` operator, with a bool tensor is not "
                            "supported; to invert a mask use the `~` or logical_not() operator instead",
                            s->op, self->dtype == KV_BOOL ? "self" : "other");
        return KV_OK;
    case REF_MAXIMUM:
    case REF_MINIMUM:
        if (kv_dtype_is_complex(self->dtype) || kv_dtype_is_complex(other->dtype))
            return kv_error(KV_ERR_DTYPE, "%s: argument '%s': complex dtype %s is not supported", s->op,
                            kv_dtype_is_complex(self->dtype) ? "self" : "other",
                            kv_dtype_name(kv_dtype_is_complex(self->dtype) ? self->dtype : other->dtype));
        return KV_OK;
    case REF_ADD:
    case REF_MUL:
    case REF_DIV: return KV_OK;
    }
    return KV_OK;
}

/* Every check of a binary op before it writes: devices, operand dtypes,
 * the result dtype, alpha, broadcasting and (in-place) self's dtype and
 * shape. Gives the result dtype, shape and alpha as a value. */
static kv_status ref_binary_prepare(const ref_binary_spec *s, kv_tensor *self, kv_tensor *other, kv_scalar alpha,
                                    kv_dtype *dt_out, int64_t *sizes, int *ndim, kv_ref_val *alpha_out) {
    kv_status st;
    if ((st = kv_ref_check_cpu(s->op, "self", self)) != KV_OK) return st;
    if ((st = kv_ref_check_cpu(s->op, "other", other)) != KV_OK) return st;
    if ((st = ref_check_operand_dtypes(s, self, other)) != KV_OK) return st;

    kv_tensor *const operands[2] = { self, other };
    static const char *const names[2] = { "self", "other" };
    kv_dtype dt = kv_result_type((const kv_tensor *const *)operands, 2, NULL, 0);
    if (s->kind == REF_DIV && kv_dtype_is_integral(dt, true)) dt = KV_F32; /* true division */
    if (s->has_alpha && (st = ref_check_alpha(s->op, dt, alpha)) != KV_OK) return st;
    if ((st = kv_ref_broadcast_shape(s->op, operands, names, 2, sizes, ndim)) != KV_OK) return st;
    if (s->inplace && (st = kv_ref_check_inplace(s->op, self, dt, sizes, *ndim)) != KV_OK) return st;
    *dt_out = dt;
    *alpha_out = kv_ref_val_of_scalar(alpha, dt);
    return KV_OK;
}

static kv_status ref_binary(const ref_binary_spec *s, kv_stack *stack) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *other = kv_arg_tensor(stack, 1);
    const kv_scalar alpha = s->has_alpha ? kv_arg_scalar(stack, 2) : kv_scalar_int(1);
    kv_status st;
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    kv_dtype dt;
    kv_ref_val a;
    if ((st = ref_binary_prepare(s, self, other, alpha, &dt, sizes, &ndim, &a)) != KV_OK) return st;
    kv_tensor *const operands[2] = { self, other };

    if (s->inplace) {
        if ((st = kv_ref_ewise_run(s->op, s->fns, &a, dt, self, operands, 2)) != KV_OK) return st;
        kv_tensor_bump_version(self);
        kv_tensor_retain(self);
        kv_stack_return_tensor(stack, self);
        return KV_OK;
    }
    kv_tensor *out = kv_ref_new_output(sizes, ndim, dt);
    if (out == NULL) return kv_last_error();
    if ((st = kv_ref_ewise_run(s->op, s->fns, &a, dt, out, operands, 2)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

kv_status kv_ref_add_check_inplace(const char *op, kv_tensor *self, kv_tensor *other, kv_scalar alpha) {
    const ref_binary_spec spec = { op, REF_ADD, &fns_add, true, true };
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    kv_dtype dt;
    kv_ref_val a;
    return ref_binary_prepare(&spec, self, other, alpha, &dt, sizes, &ndim, &a);
}

/* self * scalar, the scalar a wrapped number (PyTorch's mul with a Python
 * number): it joins the result type as a scalar and is rounded like alpha
 * (kv_ref_val_of_scalar), then each element is one multiplication, as in
 * mul_i/mul_r/mul_c. */
static kv_ref_val mul_scalar_i(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *c = ctx;
    return kv_ref_val_int((int64_t)(ref_u(x[0].i) * ref_u(c->i)));
}
static kv_ref_val mul_scalar_r(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *c = ctx;
    return kv_ref_val_real(x[0].re * c->re);
}
static kv_ref_val mul_scalar_c(const kv_ref_val *x, const void *ctx) {
    const kv_ref_val *c = ctx;
    return kv_ref_val_complex(x[0].re * c->re - x[0].im * c->im, x[0].re * c->im + x[0].im * c->re);
}
static const kv_ref_ewise_fns fns_mul_scalar = { mul_scalar_i, mul_scalar_r, mul_scalar_c };

kv_tensor *kv_ref_mul_scalar(const char *op, kv_tensor *self, kv_scalar scalar) {
    if (kv_ref_check_cpu(op, "self", self) != KV_OK) return NULL;
    const kv_tensor *const tensors[1] = { self };
    const kv_dtype dt = kv_result_type(tensors, 1, &scalar, 1);
    const kv_ref_val c = kv_ref_val_of_scalar(scalar, dt);
    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, dt);
    if (out == NULL) return NULL;
    kv_tensor *const inputs[1] = { self };
    if (kv_ref_ewise_run(op, &fns_mul_scalar, &c, dt, out, inputs, 1) != KV_OK) {
        kv_tensor_release(out);
        return NULL;
    }
    return out;
}

#define REF_BINARY_KERNEL(cname, opname, kind, fns, alpha, inplace)                 \
    KV_REF_KERNEL(cname) {                                                        \
        (void)op;                                                                 \
        (void)ks;                                                                 \
        static const ref_binary_spec spec = { opname, kind, &fns, alpha, inplace }; \
        return ref_binary(&spec, stack);                                          \
    }

REF_BINARY_KERNEL(add, "add.Tensor", REF_ADD, fns_add, true, false)
REF_BINARY_KERNEL(add_, "add_.Tensor", REF_ADD, fns_add, true, true)
REF_BINARY_KERNEL(sub, "sub.Tensor", REF_SUB, fns_sub, true, false)
REF_BINARY_KERNEL(mul, "mul.Tensor", REF_MUL, fns_mul, false, false)
REF_BINARY_KERNEL(mul_, "mul_.Tensor", REF_MUL, fns_mul, false, true)
REF_BINARY_KERNEL(div, "div.Tensor", REF_DIV, fns_div, false, false)
REF_BINARY_KERNEL(maximum, "maximum", REF_MAXIMUM, fns_maximum, false, false)
REF_BINARY_KERNEL(minimum, "minimum", REF_MINIMUM, fns_minimum, false, false)

KV_REF_KERNEL(pow) {
    (void)op;
    (void)ks;
    static const char *const name = "pow.Tensor_Scalar";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_scalar exponent = kv_arg_scalar(stack, 1);
    kv_status st;
    if ((st = kv_ref_check_cpu(name, "self", self)) != KV_OK) return st;
    const kv_tensor *const tensors[1] = { self };
    const kv_dtype dt = kv_result_type(tensors, 1, &exponent, 1);
    if (kv_dtype_is_integral(dt, true) && kv_scalar_to_int(exponent) < 0)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'exponent': integers to negative integer powers are not allowed (%lld)", name,
                        (long long)kv_scalar_to_int(exponent));
    const kv_ref_val e = kv_ref_val_of_scalar(exponent, dt);
    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, dt);
    if (out == NULL) return kv_last_error();
    kv_tensor *const inputs[1] = { self };
    if ((st = kv_ref_ewise_run(name, &fns_pow, &e, dt, out, inputs, 1)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
