/* Reference kernels of cat and stack.
 *
 * Inputs may have any strides and dtypes; the result is a new contiguous
 * CPU tensor of the promoted dtype. Each input is copied into the region of
 * the result it occupies, a view of the result with the input's shape, so
 * one strided iteration handles every layout on both sides. Shape rules,
 * including cat's legacy skipping of 1-D size-0 inputs, follow PyTorch. */
#include <inttypes.h>
#include <string.h>

#include "ref/ref.h"
#include "ref/ref_kernels.h"

static kv_status failed(const char *op, const char *what) {
    kv_status st = kv_last_error();
    return st != KV_OK ? st : kv_error(KV_ERR_INTERNAL, "%s: %s failed without an error", op, what);
}

/* Copies src into dst (same shape), converting to dst's dtype. Equal dtypes
 * copy bytes so NaN payloads and signed zeros survive untouched. */
static kv_status copy_converting(kv_tensor *dst, kv_tensor *src) {
    kv_ref_iter it;
    kv_tensor *ops[2] = { dst, src };
    kv_status st = kv_ref_iter_init(&it, src->sizes, src->ndim, ops, 2);
    if (st != KV_OK) return st;
    if (dst->dtype == src->dtype) {
        size_t isz = kv_dtype_size(src->dtype);
        while (kv_ref_iter_next(&it)) memcpy(it.ptr[0], it.ptr[1], isz);
    } else {
        while (kv_ref_iter_next(&it)) kv_ref_convert(dst->dtype, it.ptr[0], src->dtype, it.ptr[1]);
    }
    return KV_OK;
}

/* Copies src into the part of out that starts at element `offset` and has
 * src's shape with the given strides of out. */
static kv_status copy_region(kv_tensor *out, const int64_t *strides, int64_t offset, kv_tensor *src,
                             const char *op) {
    kv_tensor *region = kv_tensor_view(out, src->sizes, strides, src->ndim, offset);
    if (region == NULL) return failed(op, "kv_tensor_view");
    kv_status st = copy_converting(region, src);
    kv_tensor_release(region);
    return st;
}

static kv_status check_same_device(kv_tensor_list list, const char *op) {
    for (int i = 1; i < list.n; i++) {
        if (!kv_device_equal(list.items[i]->device, list.items[0]->device)) {
            return kv_error(KV_ERR_DEVICE,
                            "%s: argument 'tensors': expected all tensors to be on the same device, but tensor "
                            "%d is on %s:%d and tensor 0 on %s:%d",
                            op, i, kv_device_type_name(list.items[i]->device.type), list.items[i]->device.index,
                            kv_device_type_name(list.items[0]->device.type), list.items[0]->device.index);
        }
    }
    return KV_OK;
}

/* PyTorch keeps accepting torch.cat([torch.tensor([]), x]) for any x:
 * 1-D tensors with no elements take no part in the shape checks. */
static bool cat_skips(const kv_tensor *t) { return t->ndim == 1 && t->sizes[0] == 0; }

KV_REF_KERNEL(cat) {
    (void)op;
    (void)ks;
    kv_tensor_list list = kv_arg_tensors(stack, 0);
    int64_t dim_arg = kv_arg_int(stack, 1);
    char abuf[KV_REF_SHAPE_BUF];
    if (list.n <= 0) {
        return kv_error(KV_ERR_INVALID_ARG, "cat: argument 'tensors': torch.cat(): expected a non-empty list of Tensors");
    }
    for (int i = 0; i < list.n; i++) {
        if (list.items[i]->ndim == 0) {
            return kv_error(KV_ERR_DIM,
                            "cat: argument 'tensors': zero-dimensional tensor (at position %d) cannot be concatenated",
                            i);
        }
    }
    kv_status st = check_same_device(list, "cat");
    if (st == KV_OK) st = kv_ref_check_cpu("cat", "tensors", list.items[0]);
    if (st != KV_OK) return st;
    /* Skipped inputs still take part in promotion, as in PyTorch. */
    kv_dtype dtype = kv_result_type((const kv_tensor *const *)list.items, list.n, NULL, 0);

    int first = -1;
    for (int i = 0; i < list.n && first < 0; i++) {
        if (!cat_skips(list.items[i])) first = i;
    }
    if (first < 0) {
        /* Every input skipped: dim is never checked, the result is [0]. */
        int64_t zero = 0;
        kv_tensor *out = kv_ref_new_output(&zero, 1, dtype);
        if (out == NULL) return failed("cat", "kv_ref_new_output");
        kv_stack_return_tensor(stack, out);
        return KV_OK;
    }
    const kv_tensor *ref = list.items[first];
    int dim = kv_wrap_dim(dim_arg, ref->ndim, "cat", "dim");
    if (dim < 0) return KV_ERR_DIM;

    int64_t sizes[KV_MAX_DIMS];
    memcpy(sizes, ref->sizes, sizeof sizes);
    int64_t total = 0;
    for (int i = 0; i < list.n; i++) {
        const kv_tensor *t = list.items[i];
        if (cat_skips(t)) continue;
        if (t->ndim != ref->ndim) {
            return kv_error(KV_ERR_SHAPE,
                            "cat: argument 'tensors': Tensors must have same number of dimensions: got %d and %d "
                            "(tensor number %d in the list has sizes %s)",
                            ref->ndim, t->ndim, i, kv_ref_format_shape(t->sizes, t->ndim, abuf, sizeof abuf));
        }
        for (int d = 0; d < ref->ndim; d++) {
            if (d != dim && t->sizes[d] != ref->sizes[d]) {
                return kv_error(KV_ERR_SHAPE,
                                "cat: argument 'tensors': Sizes of tensors must match except in dimension %d. "
                                "Expected size %" PRId64 " but got size %" PRId64
                                " for tensor number %d in the list.",
                                dim, ref->sizes[d], t->sizes[d], i);
            }
        }
        if (__builtin_add_overflow(total, t->sizes[dim], &total)) {
            return kv_error(KV_ERR_SHAPE, "cat: argument 'tensors': the result size at dimension %d overflows", dim);
        }
    }
    sizes[dim] = total;
    kv_tensor *out = kv_ref_new_output(sizes, ref->ndim, dtype);
    if (out == NULL) return failed("cat", "kv_ref_new_output");

    int64_t at = 0; /* start of the next input along dim */
    for (int i = 0; i < list.n; i++) {
        kv_tensor *t = list.items[i];
        if (cat_skips(t)) continue;
        /* Empty inputs have nothing to copy, and their region may start
         * one past the end of the result's storage. */
        if (kv_tensor_numel(t) > 0) {
            st = copy_region(out, out->strides, out->offset + at * out->strides[dim], t, "cat");
            if (st != KV_OK) {
                kv_tensor_release(out);
                return st;
            }
        }
        at += t->sizes[dim];
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(stack) {
    (void)op;
    (void)ks;
    kv_tensor_list list = kv_arg_tensors(stack, 0);
    int64_t dim_arg = kv_arg_int(stack, 1);
    char abuf[KV_REF_SHAPE_BUF], bbuf[KV_REF_SHAPE_BUF];
    if (list.n <= 0) {
        return kv_error(KV_ERR_INVALID_ARG, "stack: argument 'tensors': stack expects a non-empty TensorList");
    }
    const kv_tensor *t0 = list.items[0];
    int nd = t0->ndim + 1;
    if (nd > KV_MAX_DIMS) {
        return kv_error(KV_ERR_INVALID_ARG,
                        "stack: argument 'tensors': the result would have %d dimensions, at most %d are supported",
                        nd, KV_MAX_DIMS);
    }
    int dim = kv_wrap_dim(dim_arg, nd, "stack", "dim");
    if (dim < 0) return KV_ERR_DIM;
    for (int i = 1; i < list.n; i++) {
        if (!kv_same_shape(t0, list.items[i])) {
            return kv_error(KV_ERR_SHAPE,
                            "stack: argument 'tensors': stack expects each tensor to be equal size, but got %s at "
                            "entry 0 and %s at entry %d",
                            kv_ref_format_shape(t0->sizes, t0->ndim, abuf, sizeof abuf),
                            kv_ref_format_shape(list.items[i]->sizes, list.items[i]->ndim, bbuf, sizeof bbuf), i);
        }
    }
    kv_status st = check_same_device(list, "stack");
    if (st == KV_OK) st = kv_ref_check_cpu("stack", "tensors", list.items[0]);
    if (st != KV_OK) return st;
    /* PyTorch stacks by concatenating unsqueezed inputs, all dimensioned
     * and of one priority class, so the result type is the plain fold. */
    kv_dtype dtype = t0->dtype;
    for (int i = 1; i < list.n; i++) dtype = kv_promote_types(dtype, list.items[i]->dtype);

    int64_t sizes[KV_MAX_DIMS];
    for (int d = 0, s = 0; d < nd; d++) sizes[d] = (d == dim) ? list.n : t0->sizes[s++];
    kv_tensor *out = kv_ref_new_output(sizes, nd, dtype);
    if (out == NULL) return failed("stack", "kv_ref_new_output");
    if (kv_tensor_numel(out) > 0) {
        /* Entry i is the slice out.select(dim, i): out's strides minus dim. */
        int64_t strides[KV_MAX_DIMS];
        for (int d = 0, s = 0; d < nd; d++) {
            if (d != dim) strides[s++] = out->strides[d];
        }
        for (int i = 0; i < list.n; i++) {
            st = copy_region(out, strides, out->offset + i * out->strides[dim], list.items[i], "stack");
            if (st != KV_OK) {
                kv_tensor_release(out);
                return st;
            }
        }
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
