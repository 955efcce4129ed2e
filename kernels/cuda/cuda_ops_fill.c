/* CUDA repeat and masked_fill: moving elements, no arithmetic, so any
 * dtype whose bytes are known here.
 *
 * repeat is one strided copy (kvc_copy): an output dim of repeats r over
 * an input dim of size s (both > 1) is split into [r, s] with the input
 * stride 0 on r, so element (a, b) reads input b; a dim with r = 1 or
 * s = 1 needs no split. Past KVC_MAX_DIMS split dims the call is
 * declined. masked_fill writes the value's bytes where the mask is set
 * (kvc_masked_fill). Checks mirror kernels/ref/ref_repeat.c and
 * ref_masked_fill.c; what this file cannot decide exactly as the
 * reference does (complex or huge integer values, dtypes other than
 * f32/f64 for the value, a mask sharing self's storage in place) is
 * declined. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cuda/cuda_shim.h"

static kv_status cuda_repeat(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_int_list r = kv_arg_ints(stack, 1);
    if (r.n < self->ndim)
        return h->error(KV_ERR_INVALID_ARG,
                        "repeat: argument 'repeats': %d entries for a %d-dim self: the number of repeat dims "
                        "can not be smaller than the number of dims of the tensor",
                        r.n, self->ndim);
    if (r.n > KV_MAX_DIMS)
        return h->error(KV_ERR_INVALID_ARG, "repeat: argument 'repeats': %d entries, at most %d dims are supported",
                        r.n, KV_MAX_DIMS);
    const int nd = r.n, lead = r.n - self->ndim;
    int64_t out_sizes[KV_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        if (r.items[d] < 0)
            return h->error(KV_ERR_NEGATIVE_SIZE, "repeat: argument 'repeats': entry %d is %lld, must be >= 0", d,
                            (long long)r.items[d]);
        out_sizes[d] = (d < lead ? 1 : self->sizes[d - lead]) * r.items[d];
    }
    if (!kv_cuda_on_device(self)) return kv_cuda_decline("repeat", "a self that is not in CUDA memory");
    kv_tensor *out = kv_cuda_empty(out_sizes, nd, self->dtype);
    if (out == NULL) return h->last_error();
    kvc_copy_args a;
    memset(&a, 0, sizeof a);
    a.out_kind = a.in_kind = KVC_RAW;
    a.esize = (int)h->dtype_size(self->dtype);
    a.n = h->tensor_numel(out);
    a.out = out->storage->data;
    a.in = self->storage->data;
    a.ig.offset = self->offset;
    int k = 0;
    for (int d = 0; d < nd; d++) {
        const int64_t s = d < lead ? 1 : self->sizes[d - lead], st = d < lead ? 0 : self->strides[d - lead];
        const bool split = r.items[d] > 1 && s > 1;
        if (k + (split ? 2 : 1) > KVC_MAX_DIMS) {
            h->tensor_release(out);
            return kv_cuda_decline("repeat", "more than %d dims once the repeated dims are split", KVC_MAX_DIMS);
        }
        if (split) {
            a.og.sizes[k] = a.ig.sizes[k] = r.items[d];
            a.og.strides[k] = s * out->strides[d];
            a.ig.strides[k++] = 0;
        }
        a.og.sizes[k] = a.ig.sizes[k] = split ? s : out_sizes[d];
        a.og.strides[k] = out->strides[d];
        a.ig.strides[k++] = s == 1 ? 0 : st;
    }
    a.og.ndim = a.ig.ndim = k;
    if (a.n > 0 && kvc_copy(&a) != 0) {
        h->tensor_release(out);
        return kv_cuda_device_error("repeat");
    }
    return kv_cuda_return(stack, out);
}

/* The reference's Scalar-conversion rule (kv_ref_check_scalar_fits in
 * kernels/ref/ref_common.c), restated: a plugin cannot call it, and the
 * error check holds every backend to the reference's status. */
static bool fill_overflows(kv_scalar s, kv_dtype dt) {
    static const double fmax[KV_DTYPE_COUNT] = { [KV_F16] = 65504.0, [KV_BF16] = 3.38953138925153547590470800371487866880e38,
                                                 [KV_F32] = FLT_MAX, [KV_C64] = FLT_MAX, [KV_F64] = DBL_MAX,
                                                 [KV_C128] = DBL_MAX };
    if (dt == KV_BOOL || s.kind == KV_SCALAR_BOOL) return false;
    const double re = s.kind == KV_SCALAR_INT ? (double)s.v.i : s.kind == KV_SCALAR_DOUBLE ? s.v.d : s.v.c.re;
    const double im = s.kind == KV_SCALAR_COMPLEX ? s.v.c.im : 0.0;
    if (dt == KV_C64 || dt == KV_C128)
        return s.kind != KV_SCALAR_INT && ((isfinite(re) && fabs(re) > fmax[dt]) || (isfinite(im) && fabs(im) > fmax[dt]));
    if (s.kind == KV_SCALAR_COMPLEX && im != 0.0) return true;
    if (dt == KV_F16 || dt == KV_BF16 || dt == KV_F32 || dt == KV_F64)
        return s.kind == KV_SCALAR_INT ? fabs(re) > fmax[dt] : isfinite(re) && fabs(re) > fmax[dt];
    const int64_t lo = dt == KV_U8 ? 0 : dt == KV_I8 ? INT8_MIN : dt == KV_I16 ? INT16_MIN : dt == KV_I32 ? INT32_MIN : INT64_MIN;
    const int64_t hi = dt == KV_U8 ? UINT8_MAX : dt == KV_I8 ? INT8_MAX : dt == KV_I16 ? INT16_MAX : dt == KV_I32 ? INT32_MAX : INT64_MAX;
    if (s.kind == KV_SCALAR_INT) return s.v.i > hi || (dt == KV_U8 ? s.v.i < -(int64_t)UINT8_MAX : s.v.i < lo);
    if (!isfinite(re)) return true;
    if (dt == KV_I64) return re < -9223372036854775808.0 || re >= 9223372036854775808.0;
    return re < (double)lo || re > (double)hi;
}

/* The value's bytes in dt (f32 or f64), or a decline. */
static kv_status fill_value_bytes(const char *op, kv_scalar v, kv_dtype dt, uint64_t *bytes) {
    double d;
    switch (v.kind) {
    case KV_SCALAR_BOOL: d = v.v.b ? 1.0 : 0.0; break;
    case KV_SCALAR_INT:
        /* Past 2^53 the reference's int -> float rounding is its own. */
        if (v.v.i > ((int64_t)1 << 53) || v.v.i < -((int64_t)1 << 53))
            return kv_cuda_decline(op, "an integer value beyond 2^53");
        d = (double)v.v.i;
        break;
    case KV_SCALAR_DOUBLE: d = v.v.d; break;
    case KV_SCALAR_COMPLEX:
    default: return kv_cuda_decline(op, "a complex value");
    }
    bytes[0] = bytes[1] = 0;
    if (dt == KV_F32) {
        const float f = (float)d;
        memcpy(bytes, &f, sizeof f);
    } else {
        memcpy(bytes, &d, sizeof d);
    }
    return KV_OK;
}

static kv_status cuda_masked_fill_run(const kv_op *op, kv_stack *stack, bool inplace) {
    const kv_host_api *h = kv_cuda_host;
    const char *name = h->op_name(op);
    kv_tensor *self = kv_arg_tensor(stack, 0), *mask = kv_arg_tensor(stack, 1);
    if (mask->dtype != KV_BOOL)
        return h->error(KV_ERR_DTYPE, "%s: argument 'mask': only boolean masks are supported, got dtype %s", name,
                        h->dtype_name(mask->dtype));
    const kv_scalar v = kv_arg_scalar(stack, 2);
    if (fill_overflows(v, self->dtype))
        return h->error(KV_ERR_INVALID_ARG, "%s: argument 'value': value %g cannot be converted to type %s without overflow",
                        name, h->scalar_to_double(v), h->dtype_name(self->dtype));
    int64_t sizes[KV_MAX_DIMS];
    int nd = 0;
    if (h->broadcast_shapes(self->sizes, self->ndim, mask->sizes, mask->ndim, sizes, &nd) != KV_OK) {
        char a[KV_CUDA_SHAPE_BUF], b[KV_CUDA_SHAPE_BUF];
        return h->error(KV_ERR_SHAPE, "%s: argument 'mask': shape %s does not broadcast with shape %s (argument 'self')",
                        name, kv_cuda_shape(mask->sizes, mask->ndim, a, sizeof a),
                        kv_cuda_shape(self->sizes, self->ndim, b, sizeof b));
    }
    if (inplace) {
        bool same = nd == self->ndim;
        for (int d = 0; same && d < nd; d++) same = sizes[d] == self->sizes[d];
        if (!same) {
            char a[KV_CUDA_SHAPE_BUF], b[KV_CUDA_SHAPE_BUF];
            return h->error(KV_ERR_SHAPE, "%s: argument 'self': output with shape %s doesn't match the broadcast shape %s",
                            name, kv_cuda_shape(self->sizes, self->ndim, a, sizeof a), kv_cuda_shape(sizes, nd, b, sizeof b));
        }
        const kv_status wst = kv_cuda_check_writable(name, "self", self);
        if (wst != KV_OK) return wst;
        if (mask->storage == self->storage) return kv_cuda_decline(name, "a mask inside self's storage");
    }
    if (kv_cuda_dtype_code(self->dtype) < 0)
        return kv_cuda_decline(name, "self of dtype %s", h->dtype_name(self->dtype));
    uint64_t value[2];
    kv_status st = fill_value_bytes(name, v, self->dtype, value);
    if (st != KV_OK) return st;
    if (!kv_cuda_on_device(self)) return kv_cuda_decline(name, "a self that is not in CUDA memory");
    kv_tensor *tmp = NULL;
    kv_tensor *m = kv_cuda_operand(mask, &tmp);
    if (m == NULL) return h->last_error();
    kv_tensor *out = inplace ? self : kv_cuda_empty(sizes, nd, self->dtype);
    if (out == NULL) {
        h->tensor_release(tmp);
        return h->last_error();
    }
    kvc_masked_fill_args a;
    memset(&a, 0, sizeof a);
    a.n = h->tensor_numel(out);
    a.esize = (int)h->dtype_size(self->dtype);
    a.out = out->storage->data;
    a.og = kv_cuda_geom_of(out);
    a.mask = m->storage->data;
    kv_cuda_geom_broadcast(m, out->sizes, out->ndim, &a.gm);
    if (!inplace) {
        a.src = self->storage->data;
        kv_cuda_geom_broadcast(self, out->sizes, out->ndim, &a.gs);
    }
    memcpy(a.value, value, sizeof a.value);
    const int rc = a.n > 0 ? kvc_masked_fill(&a) : 0;
    h->tensor_release(tmp);
    if (rc != 0) {
        if (!inplace) h->tensor_release(out);
        return kv_cuda_device_error(name);
    }
    if (inplace) {
        h->tensor_bump_version(self);
        h->tensor_retain(self);
    }
    return kv_cuda_return(stack, out);
}

static kv_status cuda_masked_fill(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return cuda_masked_fill_run(op, stack, false);
}

static kv_status cuda_masked_fill_(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return cuda_masked_fill_run(op, stack, true);
}

kv_status kv_cuda_register_fill(kv_key key) {
    kv_status st = kv_cuda_host->register_kernel("repeat", key, cuda_repeat);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("masked_fill.Scalar", key, cuda_masked_fill);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("masked_fill_.Scalar", key, cuda_masked_fill_);
    return st;
}
