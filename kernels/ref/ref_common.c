/* Argument checks and output allocation shared by the reference kernels. */
#include "ref/ref.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

kv_tensor *kv_ref_new_output(const int64_t *sizes, int ndim, kv_dtype dtype) {
    return kv_tensor_empty(sizes, ndim, dtype, KV_DEVICE_CPU0);
}

kv_status kv_ref_check_dtype(const char *op, const char *arg, kv_dtype dt, unsigned allowed) {
    if ((unsigned)dt < KV_DTYPE_COUNT && (allowed >> dt) & 1u) return KV_OK;
    return kv_error(KV_ERR_DTYPE, "%s: argument '%s': dtype %s is not supported", op, arg,
                    kv_dtype_name(dt));
}

kv_status kv_ref_check_cpu(const char *op, const char *arg, const kv_tensor *t) {
    if (t->device.type == KV_DEVICE_CPU) return KV_OK;
    return kv_error(KV_ERR_DEVICE, "%s: argument '%s': tensor is on %s:%d, the reference kernels need cpu",
                    op, arg, kv_device_type_name(t->device.type), t->device.index);
}

const char *kv_ref_format_shape(const int64_t *sizes, int ndim, char *buf, int cap) {
    if (cap <= 0) return buf;
    int len = snprintf(buf, (size_t)cap, "[");
    for (int d = 0; d < ndim && len < cap; d++)
        len += snprintf(buf + len, (size_t)(cap - len), d ? ", %lld" : "%lld", (long long)sizes[d]);
    if (len < cap) snprintf(buf + len, (size_t)(cap - len), "]");
    return buf;
}

kv_status kv_ref_check_no_internal_overlap(const char *op, const char *arg, const kv_tensor *t) {
    return kv_tensor_check_no_internal_overlap(op, arg, t);
}

kv_status kv_ref_broadcast_shape(const char *op, kv_tensor *const *tensors, const char *const *names,
                                 int n, int64_t *sizes_out, int *ndim_out) {
    int ndim = 0;
    int first = -1;
    int seen = 0; /* operands merged so far */
    for (int i = 0; i < n; i++) {
        const kv_tensor *t = tensors[i];
        if (t == NULL) continue;
        if (first < 0) {
            for (int d = 0; d < t->ndim; d++) sizes_out[d] = t->sizes[d];
            ndim = t->ndim;
            first = i;
            seen = 1;
            continue;
        }
        int64_t merged[KV_MAX_DIMS];
        int nmerged = 0;
        if (kv_broadcast_shapes(sizes_out, ndim, t->sizes, t->ndim, merged, &nmerged) != KV_OK) {
            /* With two operands this names both shapes; with more, the
             * shape the earlier ones broadcast to so far. */
            char a[KV_REF_SHAPE_BUF], b[KV_REF_SHAPE_BUF];
            return kv_error(KV_ERR_SHAPE,
                            "%s: argument '%s': shape %s does not broadcast with shape %s (argument '%s'%s)",
                            op, names[i], kv_ref_format_shape(t->sizes, t->ndim, b, sizeof b),
                            kv_ref_format_shape(sizes_out, ndim, a, sizeof a), names[first],
                            seen > 1 ? " and the ones after it" : "");
        }
        for (int d = 0; d < nmerged; d++) sizes_out[d] = merged[d];
        ndim = nmerged;
        seen++;
    }
    *ndim_out = ndim;
    return KV_OK;
}

kv_status kv_ref_check_inplace(const char *op, const kv_tensor *self, kv_dtype result, const int64_t *sizes,
                               int ndim) {
    if (!kv_can_cast(result, self->dtype))
        return kv_error(KV_ERR_DTYPE, "%s: argument 'self': result type %s can't be cast to the desired output type %s",
                        op, kv_dtype_name(result), kv_dtype_name(self->dtype));
    bool same = ndim == self->ndim;
    for (int d = 0; same && d < ndim; d++) same = sizes[d] == self->sizes[d];
    if (!same) {
        char a[KV_REF_SHAPE_BUF], b[KV_REF_SHAPE_BUF];
        return kv_error(KV_ERR_SHAPE,
                        "%s: argument 'self': output with shape %s doesn't match the broadcast shape %s", op,
                        kv_ref_format_shape(self->sizes, self->ndim, a, sizeof a),
                        kv_ref_format_shape(sizes, ndim, b, sizeof b));
    }
    return kv_ref_check_no_internal_overlap(op, "self", self);
}

/* The largest finite value of a floating dtype. */
static double ref_float_max(kv_dtype dt) {
    switch (dt) {
    case KV_F16: return 65504.0;
    case KV_BF16: return 3.38953138925153547590470800371487866880e38;
    case KV_F32:
    case KV_C64: return (double)FLT_MAX;
    case KV_F64:
    case KV_C128: return DBL_MAX;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_DTYPE_COUNT: break;
    }
    return DBL_MAX;
}

static void ref_int_range(kv_dtype dt, int64_t *lo, int64_t *hi) {
    switch (dt) {
    case KV_U8: *lo = 0; *hi = UINT8_MAX; return;
    case KV_I8: *lo = INT8_MIN; *hi = INT8_MAX; return;
    case KV_I16: *lo = INT16_MIN; *hi = INT16_MAX; return;
    case KV_I32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    case KV_BOOL:
    case KV_I64:
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    *lo = INT64_MIN;
    *hi = INT64_MAX;
}

static bool ref_scalar_overflows(kv_scalar s, kv_dtype dt) {
    if (dt == KV_BOOL || s.kind == KV_SCALAR_BOOL) return false;
    if (kv_dtype_is_complex(dt)) {
        if (s.kind == KV_SCALAR_INT) return false;
        double re, im;
        kv_scalar_to_complex(s, &re, &im);
        const double m = ref_float_max(dt);
        return (isfinite(re) && fabs(re) > m) || (isfinite(im) && fabs(im) > m);
    }
    if (s.kind == KV_SCALAR_COMPLEX && s.v.c.im != 0.0) return true;
    if (kv_dtype_is_floating(dt)) {
        if (s.kind == KV_SCALAR_INT) return fabs((double)s.v.i) > ref_float_max(dt);
        const double d = kv_scalar_to_double(s);
        return isfinite(d) && fabs(d) > ref_float_max(dt);
    }
    int64_t lo, hi;
    ref_int_range(dt, &lo, &hi);
    if (s.kind == KV_SCALAR_INT) {
        const int64_t i = s.v.i;
        if (i > hi) return true;
        /* Unsigned targets accept negatives down to -max (they wrap). */
        if (dt == KV_U8) return i < -(int64_t)UINT8_MAX;
        return i < lo;
    }
    const double d = kv_scalar_to_double(s);
    if (!isfinite(d)) return true;
    /* 2^63 as a double is exactly INT64_MAX + 1, so compare with >=. */
    if (dt == KV_I64) return d < -9223372036854775808.0 || d >= 9223372036854775808.0;
    return d < (double)lo || d > (double)hi;
}

kv_status kv_ref_check_scalar_fits(const char *op, const char *arg, kv_scalar s, kv_dtype dt) {
    if (!ref_scalar_overflows(s, dt)) return KV_OK;
    char text[64];
    kv_scalar_format(s, text, sizeof text);
    return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': value %s cannot be converted to type %s without overflow",
                    op, arg, text, kv_dtype_name(dt));
}

kv_status kv_ref_check_tensor_options(const char *op, const kv_stack *stack, int layout_slot, int device_slot,
                                      int pin_slot) {
    if (layout_slot >= 0 && !kv_arg_is_none(stack, layout_slot) &&
        kv_arg_int(stack, layout_slot) != KV_REF_LAYOUT_STRIDED)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'layout': only the strided layout is supported (got %lld)",
                        op, (long long)kv_arg_int(stack, layout_slot));
    if (device_slot >= 0 && !kv_arg_is_none(stack, device_slot)) {
        const kv_device d = kv_arg_device(stack, device_slot);
        if (d.type != KV_DEVICE_CPU || d.index > 0)
            return kv_error(KV_ERR_DEVICE, "%s: argument 'device': the reference kernels make cpu tensors, not %s:%d",
                            op, kv_device_type_name(d.type), d.index);
    }
    if (pin_slot >= 0 && !kv_arg_is_none(stack, pin_slot) && kv_arg_bool(stack, pin_slot))
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'pin_memory': pinned memory needs an accelerator", op);
    return KV_OK;
}

bool kv_ref_memory_format_preserves(const kv_stack *stack, int slot) {
    return kv_arg_is_none(stack, slot) || kv_arg_int(stack, slot) == KV_REF_MEMORY_FORMAT_PRESERVE;
}

kv_status kv_ref_check_memory_format(const char *op, const kv_stack *stack, int slot, bool allow_preserve) {
    if (kv_arg_is_none(stack, slot)) return KV_OK;
    const int64_t mf = kv_arg_int(stack, slot);
    if (mf == KV_REF_MEMORY_FORMAT_CONTIGUOUS) return KV_OK;
    if (mf == KV_REF_MEMORY_FORMAT_PRESERVE) {
        if (allow_preserve) return KV_OK;
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'memory_format': preserve_format is not supported", op);
    }
    return kv_error(KV_ERR_INVALID_ARG,
                    "%s: argument 'memory_format': only contiguous_format is supported (got %lld)", op,
                    (long long)mf);
}
