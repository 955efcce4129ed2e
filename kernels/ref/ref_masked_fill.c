/* masked_fill references: masked_fill.Scalar and masked_fill_.Scalar.
 *
 * PyTorch's semantics: the mask must be bool; the value is converted to
 * self's dtype with the checked Scalar conversion ("value cannot be
 * converted to type X without overflow"), so the result dtype is always
 * self's. The functional op's result has the broadcast shape of self and
 * mask (PyTorch expands both, clones self, fills in place); the in-place
 * op keeps self's shape, so a mask that would enlarge it is a shape error,
 * and self may not have internal overlap. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

static const char *const mf_names[2] = { "self", "mask" };

/* The checks both forms share; sizes and ndim get the broadcast shape. */
static kv_status mf_check(const char *op, kv_tensor *self, kv_tensor *mask, kv_scalar value, int64_t *sizes,
                          int *ndim) {
    kv_status st;
    if ((st = kv_ref_check_cpu(op, "self", self)) != KV_OK) return st;
    if ((st = kv_ref_check_cpu(op, "mask", mask)) != KV_OK) return st;
    if (mask->dtype != KV_BOOL)
        return kv_error(KV_ERR_DTYPE, "%s: argument 'mask': only boolean masks are supported, got dtype %s", op,
                        kv_dtype_name(mask->dtype));
    if ((st = kv_ref_check_scalar_fits(op, "value", value, self->dtype)) != KV_OK) return st;
    kv_tensor *both[2] = { self, mask };
    return kv_ref_broadcast_shape(op, both, mf_names, 2, sizes, ndim);
}

/* out[i] = mask[i] ? value : src[i] over out's shape; src may be out
 * itself (in place: then only the masked elements are written). */
static kv_status mf_run(kv_tensor *out, kv_tensor *src, kv_tensor *mask, kv_scalar value) {
    union { double d[2]; char bytes[16]; } elem;
    kv_ref_store_scalar(out->dtype, elem.bytes, value);
    kv_tensor *ops[3] = { out, src, mask };
    kv_ref_iter it;
    kv_status st = kv_ref_iter_init(&it, out->sizes, out->ndim, ops, 3);
    if (st != KV_OK) return st;
    while (kv_ref_iter_next(&it)) {
        if (*(const bool *)it.ptr[2])
            kv_ref_convert(out->dtype, it.ptr[0], out->dtype, elem.bytes);
        else if (src != out)
            kv_ref_convert(out->dtype, it.ptr[0], src->dtype, it.ptr[1]);
    }
    return KV_OK;
}

KV_REF_KERNEL(masked_fill) {
    (void)op;
    (void)ks;
    static const char *const name = "masked_fill.Scalar";
    kv_tensor *self = kv_arg_tensor(stack, 0), *mask = kv_arg_tensor(stack, 1);
    const kv_scalar value = kv_arg_scalar(stack, 2);
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    kv_status st = mf_check(name, self, mask, value, sizes, &ndim);
    if (st != KV_OK) return st;
    kv_tensor *out = kv_ref_new_output(sizes, ndim, self->dtype);
    if (out == NULL) return kv_last_error();
    if ((st = mf_run(out, self, mask, value)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(masked_fill_) {
    (void)op;
    (void)ks;
    static const char *const name = "masked_fill_.Scalar";
    kv_tensor *self = kv_arg_tensor(stack, 0), *mask = kv_arg_tensor(stack, 1);
    const kv_scalar value = kv_arg_scalar(stack, 2);
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    kv_status st = mf_check(name, self, mask, value, sizes, &ndim);
    if (st == KV_OK) st = kv_ref_check_inplace(name, self, self->dtype, sizes, ndim);
    if (st != KV_OK) return st;
    /* A mask inside self's storage (a bool self masked by a view of
     * itself) is read in full first, so the result never depends on the
     * order the elements are written in. */
    kv_tensor *snapshot = NULL;
    if (mask->storage == self->storage) {
        snapshot = kv_ref_copy_to_new(mask, KV_BOOL);
        if (snapshot == NULL) return kv_last_error();
        mask = snapshot;
    }
    st = mf_run(self, self, mask, value);
    if (snapshot) kv_tensor_release(snapshot);
    if (st != KV_OK) return st;
    kv_tensor_bump_version(self);
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}
