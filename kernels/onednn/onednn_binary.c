/* Binary elementwise ops on oneDNN's binary primitive: add, add_, sub (alpha
 * as a scale on src1), mul, mul_, div, eq, lt, maximum, minimum.
 *
 * Dtypes (both operands of the result dtype; promotion is declined):
 *   - add/sub/mul/div: f32, where oneDNN's kernels are single IEEE
 *     operations (bitwise against the reference) and a + alpha*b rounds
 *     the product and the sum (the table's gamma_2 bound);
 *   - eq/lt: f32, bf16, f16, s8, u8, bool: the inputs widen exactly to f32
 *     and the comparison is exact;
 *   - maximum/minimum: s8, u8, bool.
 * Left out:
 *   - bf16 arithmetic: the f32 -> bf16 store flushes subnormal results to
 *     zero (VCVTNEPS2BF16), so results that are bf16 subnormals differ
 *     from the reference's bitwise result;
 *   - maximum/minimum on floats: oneDNN's binary_max/min return the other
 *     operand when the first is NaN (PyTorch propagates NaN) and
 *     max(+0, -0) = -0 (IEEE maximum gives +0);
 *   - integer arithmetic: s8/u8 saturate where PyTorch wraps, and s32 goes
 *     through f32 (max of two ints above 2^24 rounds); i16/i64 have no
 *     oneDNN type. */
#include <stdlib.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "onednn/onednn.h"

#define DT(x) (1u << (x))
#define DT_BYTE (DT(KV_I8) | DT(KV_U8) | DT(KV_BOOL))

typedef enum binary_kind { BINARY_ARITH, BINARY_COMPARE } binary_kind;

typedef struct binary_spec {
    const char *op;
    dnnl_alg_kind_t alg;
    binary_kind kind;
    bool has_alpha, inplace;
    unsigned dtypes;
} binary_spec;

/* A tensor operand oneDNN may read: ours, or a 0-dim CPU tensor (PyTorch
 * lets those take part in a device op; they are host memory too). */
static bool binary_readable(const kv_tensor *t) {
    return kv_dnnl_on_device(t) || (t->ndim == 0 && t->device.type == KV_DEVICE_CPU);
}

/* Whether the in-place write to self can go ahead: other does not overlap
 * self, or is exactly self (an elementwise op reads each element before
 * writing it). */
static bool binary_inplace_ok(const kv_tensor *self, const kv_tensor *other) {
    if (other->storage != self->storage) return true;
    return other->dtype == self->dtype && other->offset == self->offset && other->ndim == self->ndim &&
           memcmp(other->sizes, self->sizes, sizeof(int64_t) * (size_t)self->ndim) == 0 &&
           memcmp(other->strides, self->strides, sizeof(int64_t) * (size_t)self->ndim) == 0;
}

static kv_status binary_run(const binary_spec *s, const kv_op *op, kv_stack *stack) {
    const kv_host_api *h = kv_dnnl_host;
    kv_tensor *self = kv_arg_tensor(stack, 0), *other = kv_arg_tensor(stack, 1);
    const kv_tensor *const operands[2] = { self, other };
    const kv_dtype dt = h->result_type(operands, 2, NULL, 0);
    dnnl_data_type_t ddt;
    if (self->dtype != other->dtype || dt != self->dtype || !(s->dtypes & DT(dt)) || !kv_dnnl_dtype(dt, &ddt))
        return kv_dnnl_decline(op, stack, "%s %s %s", h->dtype_name(self->dtype), s->op, h->dtype_name(other->dtype));
    if (!binary_readable(self) || !binary_readable(other) || (s->inplace && !kv_dnnl_on_device(self)))
        return kv_dnnl_decline(op, stack, "an operand outside oneDNN memory");
    float alpha = 1.0f;
    if (s->has_alpha && !kv_dnnl_scalar_f32(kv_arg_scalar(stack, 2), &alpha))
        return kv_dnnl_decline(op, stack, "a bool or complex alpha");
    /* oneDNN scales src1 in f32 before adding: alpha*b may overflow to
     * +-Inf where the reference's a + alpha*b, computed wider, is finite or
     * Inf of the other sign (Inf - Inf = NaN against Inf). */
    if (alpha != 1.0f && kv_dnnl_max_finite_abs(other) * fabs((double)alpha) > (double)FLT_MAX)
        return kv_dnnl_decline(op, stack, "alpha*other beyond the f32 range (oneDNN scales in f32)");
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    if (h->broadcast_shapes(self->sizes, self->ndim, other->sizes, other->ndim, sizes, &ndim) != KV_OK)
        return kv_dnnl_decline(op, stack, "shapes that do not broadcast");
    if (s->inplace && (ndim != self->ndim || memcmp(sizes, self->sizes, sizeof(int64_t) * (size_t)ndim) != 0 ||
                       kv_dnnl_may_overlap(self) || !binary_inplace_ok(self, other)))
        return kv_dnnl_decline(op, stack, "an in-place write this kernel does not take");

    const kv_dtype out_dt = s->kind == BINARY_COMPARE ? KV_BOOL : dt;
    kv_tensor *out = s->inplace ? self : kv_dnnl_empty(sizes, ndim, out_dt);
    if (out == NULL) return h->last_error();
    kv_status st = KV_OK;
    void *tmp = NULL;
    if (h->tensor_numel(out) > 0) {
        const char *name = s->op;
        int64_t s0[KV_MAX_DIMS], s1[KV_MAX_DIMS];
        kv_dnnl_broadcast_strides(self, sizes, ndim, s0);
        kv_dnnl_broadcast_strides(other, sizes, ndim, s1);
        void *p0 = kv_dnnl_ptr(self);
        /* oneDNN 2.6's jit:uni binary computes wrong results when src0 and
         * src1 share a layout that dst does not have (seen with both
         * operands transposed and a contiguous bool dst: 10 of 42 wrong).
         * Then src0 is first copied into dst's layout, where oneDNN picks
         * a kernel that handles the mix. */
        if (memcmp(s0, s1, sizeof(int64_t) * (size_t)ndim) == 0 &&
            memcmp(s0, out->strides, sizeof(int64_t) * (size_t)ndim) != 0) {
            const size_t esize = h->dtype_size(dt);
            const size_t nbytes = ((size_t)h->tensor_numel(out) * esize + 63u) & ~(size_t)63u;
            kv_tensor *view = h->tensor_view(self, sizes, s0, ndim, self->offset);
            tmp = aligned_alloc(64, nbytes);
            if (view == NULL || tmp == NULL) st = h->error(KV_ERR_OOM, "%s: onednn: out of memory", name);
            if (st == KV_OK) st = kv_dnnl_copy_dense(name, view, tmp);
            h->tensor_release(view);
            memcpy(s0, out->strides, sizeof(int64_t) * (size_t)ndim);
            p0 = tmp;
        }
        dnnl_memory_desc_t m0, m1, md;
        dnnl_data_type_t odt = ddt;
        kv_dnnl_dtype(out_dt, &odt);
        if (st == KV_OK) st = kv_dnnl_md(name, sizes, s0, ndim, ddt, &m0);
        if (st == KV_OK) st = kv_dnnl_md(name, sizes, s1, ndim, ddt, &m1);
        if (st == KV_OK) st = kv_dnnl_md_of(name, out, odt, &md);
        dnnl_binary_desc_t bd;
        if (st == KV_OK && dnnl_binary_desc_init(&bd, s->alg, &m0, &m1, &md) != dnnl_success)
            st = h->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for this layout", name);
        /* alpha scales src1 before the operation: a + alpha*b. */
        dnnl_primitive_attr_t attr = NULL;
        if (st == KV_OK && alpha != 1.0f) {
            dnnl_status_t ds = dnnl_primitive_attr_create(&attr);
            if (ds == dnnl_success) ds = dnnl_primitive_attr_set_scales(attr, DNNL_ARG_SRC_1, 1, 0, &alpha);
            if (ds != dnnl_success) st = kv_dnnl_fail(name, "dnnl_primitive_attr_set_scales", ds);
        }
        const kv_dnnl_arg args[3] = { { DNNL_ARG_SRC_0, &m0, p0 },
                                      { DNNL_ARG_SRC_1, &m1, kv_dnnl_ptr(other) },
                                      { DNNL_ARG_DST, &md, kv_dnnl_ptr(out) } };
        if (st == KV_OK) st = kv_dnnl_run(name, "binary", &bd, attr, args, 3);
        if (attr != NULL) dnnl_primitive_attr_destroy(attr);
    }
    free(tmp);
    if (st != KV_OK) {
        if (!s->inplace) h->tensor_release(out);
        return st;
    }
    if (s->inplace) {
        h->tensor_bump_version(self);
        h->tensor_retain(self);
    }
    return kv_dnnl_return(stack, out);
}

#define BINARY_KERNEL(cname, opname, alg, kind, alpha, inplace, dtypes)                \
    static kv_status cname(const kv_op *op, kv_keyset ks, kv_stack *stack) {         \
        (void)ks;                                                                    \
        static const binary_spec spec = { opname, alg, kind, alpha, inplace, dtypes }; \
        return binary_run(&spec, op, stack);                                         \
    }

#define DT_CMP (DT(KV_F32) | DT(KV_BF16) | DT(KV_F16) | DT_BYTE)
BINARY_KERNEL(od_add, "add.Tensor", dnnl_binary_add, BINARY_ARITH, true, false, DT(KV_F32))
BINARY_KERNEL(od_add_, "add_.Tensor", dnnl_binary_add, BINARY_ARITH, true, true, DT(KV_F32))
BINARY_KERNEL(od_sub, "sub.Tensor", dnnl_binary_sub, BINARY_ARITH, true, false, DT(KV_F32))
BINARY_KERNEL(od_mul, "mul.Tensor", dnnl_binary_mul, BINARY_ARITH, false, false, DT(KV_F32))
BINARY_KERNEL(od_mul_, "mul_.Tensor", dnnl_binary_mul, BINARY_ARITH, false, true, DT(KV_F32))
BINARY_KERNEL(od_div, "div.Tensor", dnnl_binary_div, BINARY_ARITH, false, false, DT(KV_F32))
BINARY_KERNEL(od_maximum, "maximum", dnnl_binary_max, BINARY_ARITH, false, false, DT_BYTE)
BINARY_KERNEL(od_minimum, "minimum", dnnl_binary_min, BINARY_ARITH, false, false, DT_BYTE)
BINARY_KERNEL(od_eq, "eq.Tensor", dnnl_binary_eq, BINARY_COMPARE, false, false, DT_CMP)
BINARY_KERNEL(od_lt, "lt.Tensor", dnnl_binary_lt, BINARY_COMPARE, false, false, DT_CMP)

static const kv_dnnl_reg binary_kernels[] = {
    { "add.Tensor", od_add }, { "add_.Tensor", od_add_ }, { "sub.Tensor", od_sub },
    { "mul.Tensor", od_mul }, { "mul_.Tensor", od_mul_ }, { "div.Tensor", od_div },
    { "maximum", od_maximum }, { "minimum", od_minimum }, { "eq.Tensor", od_eq },
    { "lt.Tensor", od_lt },
};

kv_status kv_dnnl_register_binary(kv_key key) {
    return kv_dnnl_register_table(key, binary_kernels, (int)(sizeof binary_kernels / sizeof binary_kernels[0]));
}
