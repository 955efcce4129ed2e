/* Filling and copying references: fill_.Scalar, zero_, copy_, clone,
 * contiguous, _to_copy.
 *
 * In-place ops write self through its own strides, bump its version
 * counter and return self (one new reference). Values convert with
 * kv_ref_convert (PyTorch's cast rules; complex -> real drops the
 * imaginary part). clone and _to_copy take PyTorch's memory_format rule:
 * preserve_format, also their default (None), keeps a non-overlapping
 * and dense self's strides (a transposed self gives a transposed copy)
 * and gives others the dense strides of their dims' stride order
 * (kv_tensor_preserve_strides); contiguous_format is row-major. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

static kv_status ref_return_self(kv_stack *stack, kv_tensor *self) {
    kv_tensor_bump_version(self);
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}

/* fill_ and zero_ skip the overlap check, as PyTorch does: every write of
 * an expanded element stores the same value. */
static kv_status ref_fill(const char *op, kv_stack *stack, kv_scalar value) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st;
    if ((st = kv_ref_check_cpu(op, "self", self)) != KV_OK) return st;
    if ((st = kv_ref_check_scalar_fits(op, "value", value, self->dtype)) != KV_OK) return st;
    union { double d[2]; char bytes[16]; } elem;
    kv_ref_store_scalar(self->dtype, elem.bytes, value);
    kv_tensor *ops[1] = { self };
    kv_ref_iter it;
    if ((st = kv_ref_iter_init(&it, self->sizes, self->ndim, ops, 1)) != KV_OK) return st;
    while (kv_ref_iter_next(&it)) kv_ref_convert(self->dtype, it.ptr[0], self->dtype, elem.bytes);
    return ref_return_self(stack, self);
}

KV_REF_KERNEL(fill_) {
    (void)op;
    (void)ks;
    return ref_fill("fill_.Scalar", stack, kv_arg_scalar(stack, 1));
}

KV_REF_KERNEL(zero_) {
    (void)op;
    (void)ks;
    return ref_fill("zero_", stack, kv_scalar_int(0));
}

KV_REF_KERNEL(copy_) {
    (void)op;
    (void)ks;
    static const char *const name = "copy_";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *src = kv_arg_tensor(stack, 1);
    kv_status st;
    if ((st = kv_ref_check_cpu(name, "self", self)) != KV_OK) return st;
    if ((st = kv_ref_check_cpu(name, "src", src)) != KV_OK) return st;
    int64_t strides[KV_MAX_DIMS];
    if (kv_broadcast_strides(src, self->sizes, self->ndim, strides) != KV_OK) {
        char a[KV_REF_SHAPE_BUF], b[KV_REF_SHAPE_BUF];
        return kv_error(KV_ERR_SHAPE, "copy_: argument 'src': shape %s does not broadcast to self's shape %s",
                        kv_ref_format_shape(src->sizes, src->ndim, a, sizeof a),
                        kv_ref_format_shape(self->sizes, self->ndim, b, sizeof b));
    }
    if ((st = kv_ref_check_no_internal_overlap(name, "self", self)) != KV_OK) return st;
    /* A src that overlaps self is read in full before self is written, so
     * the result is what copying from a snapshot would give. */
    kv_tensor *snapshot = NULL;
    if (src->storage == self->storage) {
        snapshot = kv_ref_copy_to_new(src, src->dtype);
        if (snapshot == NULL) return kv_last_error();
        src = snapshot;
    }
    kv_tensor *ops[2] = { self, src };
    kv_ref_iter it;
    st = kv_ref_iter_init(&it, self->sizes, self->ndim, ops, 2);
    if (st == KV_OK)
        while (kv_ref_iter_next(&it)) kv_ref_convert(self->dtype, it.ptr[0], src->dtype, it.ptr[1]);
    kv_tensor_release(snapshot);
    if (st != KV_OK) return st;
    return ref_return_self(stack, self);
}

/* Returns a copy of self in dtype dt: contiguous, or in the strides
 * preserve_format gives. */
static kv_status ref_copy_out(const char *op, kv_stack *stack, kv_tensor *self, kv_dtype dt, bool preserve) {
    kv_status st = kv_ref_check_cpu(op, "self", self);
    if (st != KV_OK) return st;
    kv_tensor *out = preserve ? kv_ref_copy_preserving(self, dt) : kv_ref_copy_to_new(self, dt);
    if (out == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(clone) {
    (void)op;
    (void)ks;
    kv_status st = kv_ref_check_memory_format("clone", stack, 1, true);
    if (st != KV_OK) return st;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    return ref_copy_out("clone", stack, self, self->dtype, kv_ref_memory_format_preserves(stack, 1));
}

KV_REF_KERNEL(contiguous) {
    (void)op;
    (void)ks;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st;
    if ((st = kv_ref_check_memory_format("contiguous", stack, 1, false)) != KV_OK) return st;
    if ((st = kv_ref_check_cpu("contiguous", "self", self)) != KV_OK) return st;
    if (kv_tensor_is_contiguous(self)) {
        kv_tensor_retain(self); /* an alias of self, as PyTorch returns */
        kv_stack_return_tensor(stack, self);
        return KV_OK;
    }
    return ref_copy_out("contiguous", stack, self, self->dtype, false);
}

KV_REF_KERNEL(_to_copy) {
    (void)op;
    (void)ks;
    static const char *const name = "_to_copy";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st;
    if ((st = kv_ref_check_tensor_options(name, stack, 2, 3, 4)) != KV_OK) return st;
    if ((st = kv_ref_check_memory_format(name, stack, 6, true)) != KV_OK) return st;
    const kv_dtype dt = kv_arg_is_none(stack, 1) ? self->dtype : kv_arg_dtype(stack, 1);
    return ref_copy_out(name, stack, self, dt, kv_ref_memory_format_preserves(stack, 6));
}
