/* Factory references: empty.memory_format, zeros, ones, full, arange.
 *
 * Every factory makes a new contiguous CPU tensor. dtype None is f32,
 * except full (inferred from the fill value: bool -> bool, int -> i64,
 * float -> f32, complex -> c64) and arange (i64 for an integral end, else
 * f32), as in PyTorch. empty leaves its memory uninitialized on purpose:
 * the runner's memory check poisons outputs to catch kernels that rely
 * on it. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

#include <math.h>
#include <string.h>

/* Where each factory keeps its options on the stack. */
typedef struct ref_factory_slots {
    int size, dtype, layout, device, pin;
} ref_factory_slots;

/* Reads and checks the size list and the tensor options. */
static kv_status ref_factory_args(const char *op, const kv_stack *stack, const ref_factory_slots *sl,
                                  kv_dtype default_dtype, int64_t *sizes, int *ndim, kv_dtype *dtype) {
    kv_status st = kv_ref_check_tensor_options(op, stack, sl->layout, sl->device, sl->pin);
    if (st != KV_OK) return st;
    *dtype = kv_arg_is_none(stack, sl->dtype) ? default_dtype : kv_arg_dtype(stack, sl->dtype);
    if (sl->size < 0) return KV_OK;
    const kv_int_list size = kv_arg_ints(stack, sl->size);
    if (size.n > KV_MAX_DIMS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'size': %d dims, at most %d are supported", op, size.n,
                        KV_MAX_DIMS);
    for (int d = 0; d < size.n; d++) {
        if (size.items[d] < 0) {
            char buf[KV_REF_SHAPE_BUF];
            return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument 'size': negative dimension %lld in %s", op,
                            (long long)size.items[d], kv_ref_format_shape(size.items, size.n, buf, sizeof buf));
        }
        sizes[d] = size.items[d];
    }
    *ndim = size.n;
    return KV_OK;
}

/* Writes one element's bytes into every element of a contiguous tensor. */
static void ref_fill_contiguous(kv_tensor *t, const void *elem) {
    const size_t esize = kv_dtype_size(t->dtype);
    char *p = kv_tensor_data(t);
    const int64_t n = kv_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) memcpy(p + (size_t)i * esize, elem, esize);
}

/* The shared body of empty/zeros/ones/full: `fill` NULL leaves it as is. */
static kv_status ref_factory_fill(const char *op, kv_stack *stack, const ref_factory_slots *sl,
                                  kv_dtype default_dtype, const kv_scalar *fill) {
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    kv_dtype dt;
    kv_status st = ref_factory_args(op, stack, sl, default_dtype, sizes, &ndim, &dt);
    if (st != KV_OK) return st;
    if (fill && (st = kv_ref_check_scalar_fits(op, "fill_value", *fill, dt)) != KV_OK) return st;
    kv_tensor *out = kv_ref_new_output(sizes, ndim, dt);
    if (out == NULL) return kv_last_error();
    if (fill) {
        union { double d[2]; char bytes[16]; } elem;
        kv_ref_store_scalar(dt, elem.bytes, *fill);
        ref_fill_contiguous(out, elem.bytes);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(empty) {
    (void)op;
    (void)ks;
    static const ref_factory_slots sl = { 0, 1, 2, 3, 4 };
    /* channels_last would need non-contiguous strides; preserve has
     * nothing to preserve in a factory. */
    kv_status st = kv_ref_check_memory_format("empty.memory_format", stack, 5, false);
    if (st != KV_OK) return st;
    return ref_factory_fill("empty.memory_format", stack, &sl, KV_F32, NULL);
}

KV_REF_KERNEL(zeros) {
    (void)op;
    (void)ks;
    static const ref_factory_slots sl = { 0, 1, 2, 3, 4 };
    const kv_scalar zero = kv_scalar_int(0);
    return ref_factory_fill("zeros", stack, &sl, KV_F32, &zero);
}

KV_REF_KERNEL(ones) {
    (void)op;
    (void)ks;
    static const ref_factory_slots sl = { 0, 1, 2, 3, 4 };
    const kv_scalar one = kv_scalar_int(1);
    return ref_factory_fill("ones", stack, &sl, KV_F32, &one);
}

KV_REF_KERNEL(full) {
    (void)op;
    (void)ks;
    static const ref_factory_slots sl = { 0, 2, 3, 4, 5 };
    const kv_scalar fill = kv_arg_scalar(stack, 1);
    kv_dtype inferred = KV_F32;
    switch (fill.kind) {
    case KV_SCALAR_BOOL: inferred = KV_BOOL; break;
    case KV_SCALAR_INT: inferred = KV_I64; break;
    case KV_SCALAR_DOUBLE: inferred = KV_F32; break;
    case KV_SCALAR_COMPLEX: inferred = KV_C64; break;
    }
    return ref_factory_fill("full", stack, &sl, inferred, &fill);
}

KV_REF_KERNEL(arange) {
    (void)op;
    (void)ks;
    static const char *const name = "arange";
    static const ref_factory_slots sl = { -1, 1, 2, 3, 4 };
    const kv_scalar end = kv_arg_scalar(stack, 0);
    if (end.kind == KV_SCALAR_COMPLEX)
        return kv_error(KV_ERR_INVALID_ARG, "arange: argument 'end': a complex end is not supported");
    const bool integral_end = end.kind == KV_SCALAR_INT || end.kind == KV_SCALAR_BOOL;
    int64_t sizes[1];
    int ndim = 1;
    kv_dtype dt;
    kv_status st = ref_factory_args(name, stack, &sl, integral_end ? KV_I64 : KV_F32, sizes, &ndim, &dt);
    if (st != KV_OK) return st;
    if ((st = kv_ref_check_dtype(name, "dtype", dt, KV_DTYPES_REAL)) != KV_OK) return st;
    int64_t n;
    if (integral_end) {
        n = kv_scalar_to_int(end);
        if (n < 0)
            return kv_error(KV_ERR_INVALID_ARG,
                            "arange: argument 'end': upper bound %lld and step 1 are inconsistent (end < start 0)",
                            (long long)n);
    } else {
        const double e = kv_scalar_to_double(end);
        if (!isfinite(e))
            return kv_error(KV_ERR_INVALID_ARG, "arange: argument 'end': unsupported range 0 -> %g", e);
        if (e < 0.0)
            return kv_error(KV_ERR_INVALID_ARG,
                            "arange: argument 'end': upper bound %g and step 1 are inconsistent (end < start 0)", e);
        /* Beyond 2^53 consecutive values stop being distinct doubles. */
        if (ceil(e) > 9007199254740992.0)
            return kv_error(KV_ERR_INVALID_ARG, "arange: argument 'end': %g elements are too many", e);
        n = (int64_t)ceil(e);
    }
    sizes[0] = n;
    kv_tensor *out = kv_ref_new_output(sizes, 1, dt);
    if (out == NULL) return kv_last_error();
    char *p = kv_tensor_data(out);
    const size_t esize = kv_dtype_size(dt);
    /* start + i*step with start 0, step 1 is i itself; stored with one
     * rounding (arange(2049, dtype=f16) ends 2048, 2048). */
    for (int64_t i = 0; i < n; i++) kv_ref_store_i64(dt, p + (size_t)i * esize, i);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
