/* Reference kernels of index_select and embedding.
 *
 * Both gather slices of one tensor by integer indices into a new
 * contiguous CPU tensor of the source's dtype. Every index is read and
 * checked before the result is allocated, so a bad index leaves nothing
 * behind. Values are copied as bytes: a gather never converts, and NaN
 * payloads and signed zeros must come out exactly as they went in. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "ref/ref_kernels.h"

#define INDEX_DTYPES ((1u << KV_I32) | (1u << KV_I64))

static kv_status failed(const char *op, const char *what) {
    kv_status st = kv_last_error();
    return st != KV_OK ? st : kv_error(KV_ERR_INTERNAL, "%s: %s failed without an error", op, what);
}

static kv_tensor *tensor_arg(const kv_stack *stack, int i, const char *op, const char *arg,
                             kv_status *st) {
    kv_tensor *t = (stack->size > i) ? kv_arg_tensor(stack, i) : NULL;
    if (t == NULL) *st = kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': expected a tensor", op, arg);
    return t;
}

static kv_status check_same_device(const kv_tensor *a, const char *aname, const kv_tensor *b,
                                   const char *bname, const char *op) {
    if (kv_device_equal(a->device, b->device)) return KV_OK;
    return kv_error(KV_ERR_DEVICE,
                    "%s: argument '%s': expected '%s' and '%s' on the same device, got %s:%d and %s:%d", op,
                    bname, aname, bname, kv_device_type_name(a->device.type), a->device.index,
                    kv_device_type_name(b->device.type), b->device.index);
}

/* Reads every index in row-major order and checks it against [0, limit).
 * Negative indices are rejected, not wrapped, as PyTorch's CPU kernels do.
 * On success *out is a malloc'd array the caller frees. */
static kv_status read_indices(kv_tensor *index, int64_t limit, const char *op, const char *arg,
                              const char *bounds_what, int64_t **out, int64_t *count) {
    int64_t n = kv_tensor_numel(index);
    int64_t *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    if (idx == NULL) return kv_error(KV_ERR_OOM, "%s: argument '%s': cannot allocate %" PRId64 " indices", op, arg, n);
    if (n > 0) {
        kv_ref_iter it;
        kv_tensor *ops[1] = { index };
        kv_status st = kv_ref_iter_init(&it, index->sizes, index->ndim, ops, 1);
        if (st != KV_OK) {
            free(idx);
            return st;
        }
        int64_t k = 0;
        while (kv_ref_iter_next(&it)) {
            int64_t v = kv_ref_load_i64(index->dtype, it.ptr[0]);
            if (v < 0 || v >= limit) {
                free(idx);
                return kv_error(KV_ERR_INDEX, "%s: argument '%s': %s(): index %" PRId64 " is out of bounds for %s with size %" PRId64,
                                op, arg, op, v, bounds_what, limit);
            }
            idx[k++] = v;
        }
    }
    *out = idx;
    *count = n;
    return KV_OK;
}

/* Byte copy between two tensors of one shape and dtype. */
static kv_status copy_same(kv_tensor *dst, kv_tensor *src) {
    kv_ref_iter it;
    kv_tensor *ops[2] = { dst, src };
    kv_status st = kv_ref_iter_init(&it, src->sizes, src->ndim, ops, 2);
    if (st != KV_OK) return st;
    size_t isz = kv_dtype_size(src->dtype);
    while (kv_ref_iter_next(&it)) memcpy(it.ptr[0], it.ptr[1], isz);
    return KV_OK;
}

/* Copies self.select(dim, from) into out.select(dim, to). */
static kv_status copy_slice(kv_tensor *out, int64_t to, kv_tensor *self, int64_t from, int dim) {
    int64_t sizes[KV_MAX_DIMS], sstr[KV_MAX_DIMS], ostr[KV_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (d == dim) continue;
        sizes[n] = self->sizes[d];
        sstr[n] = self->strides[d];
        ostr[n] = out->strides[d];
        n++;
    }
    kv_tensor *src = kv_tensor_view(self, sizes, sstr, n, self->offset + from * self->strides[dim]);
    if (src == NULL) return failed("index_select", "kv_tensor_view");
    kv_tensor *dst = kv_tensor_view(out, sizes, ostr, n, out->offset + to * out->strides[dim]);
    if (dst == NULL) {
        kv_tensor_release(src);
        return failed("index_select", "kv_tensor_view");
    }
    kv_status st = copy_same(dst, src);
    kv_tensor_release(dst);
    kv_tensor_release(src);
    return st;
}

KV_REF_KERNEL(index_select) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "index_select", "self", &st);
    if (self == NULL) return st;
    kv_tensor *index = tensor_arg(stack, 2, "index_select", "index", &st);
    if (index == NULL) return st;
    int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, "index_select", "dim");
    if (dim < 0) return KV_ERR_DIM;
    if (index->ndim > 1) {
        return kv_error(KV_ERR_SHAPE,
                        "index_select: argument 'index': index_select(): Index is supposed to be a vector, got "
                        "a %d-D tensor",
                        index->ndim);
    }
    int64_t n = kv_tensor_numel(index);
    if (self->ndim == 0 && n != 1) {
        return kv_error(KV_ERR_SHAPE,
                        "index_select: argument 'index': index_select(): Index to scalar can have only 1 value, "
                        "got %" PRId64 " value(s)",
                        n);
    }
    st = kv_ref_check_dtype("index_select", "index", index->dtype, INDEX_DTYPES);
    if (st != KV_OK) return st;
    st = check_same_device(self, "self", index, "index", "index_select");
    if (st == KV_OK) st = kv_ref_check_cpu("index_select", "self", self);
    if (st != KV_OK) return st;

    /* A 0-dim self is indexed as if it were [1] along dim 0. */
    int64_t dim_size = self->ndim == 0 ? 1 : self->sizes[dim];
    char what[32];
    snprintf(what, sizeof what, "dimension %d", dim);
    int64_t *idx = NULL;
    st = read_indices(index, dim_size, "index_select", "index", what, &idx, &n);
    if (st != KV_OK) return st;

    int64_t sizes[KV_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof sizes);
    if (self->ndim > 0) sizes[dim] = n;
    kv_tensor *out = kv_ref_new_output(sizes, self->ndim, self->dtype);
    if (out == NULL) {
        free(idx);
        return failed("index_select", "kv_ref_new_output");
    }
    if (kv_tensor_numel(out) > 0) {
        if (self->ndim == 0) {
            st = copy_same(out, self);
        } else {
            for (int64_t j = 0; j < n && st == KV_OK; j++) st = copy_slice(out, j, self, idx[j], dim);
        }
    }
    free(idx);
    if (st != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(embedding) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *weight = tensor_arg(stack, 0, "embedding", "weight", &st);
    if (weight == NULL) return st;
    kv_tensor *indices = tensor_arg(stack, 1, "embedding", "indices", &st);
    if (indices == NULL) return st;
    /* Args 3 and 4 (scale_grad_by_freq, sparse) only change the backward. */
    int64_t padding_idx = kv_arg_int(stack, 2);
    if (weight->ndim != 2) {
        return kv_error(KV_ERR_DIM, "embedding: argument 'weight': 'weight' must be 2-D, got %d-D", weight->ndim);
    }
    st = kv_ref_check_dtype("embedding", "indices", indices->dtype, INDEX_DTYPES);
    if (st != KV_OK) return st;
    st = check_same_device(weight, "weight", indices, "indices", "embedding");
    if (st == KV_OK) st = kv_ref_check_cpu("embedding", "weight", weight);
    if (st != KV_OK) return st;
    int64_t rows = weight->sizes[0], width = weight->sizes[1];
    /* aten::embedding takes -1 for "no padding row"; any other value must
     * name a row, counting from the end when negative (the padding row only
     * affects the gradient, so the forward does not use it further). */
    if (padding_idx != -1 && (padding_idx >= rows || padding_idx < -rows)) {
        return kv_error(KV_ERR_INVALID_ARG,
                        "embedding: argument 'padding_idx': Padding_idx must be within num_embeddings, got %" PRId64
                        " for %" PRId64 " embeddings",
                        padding_idx, rows);
    }
    int nd = indices->ndim + 1;
    if (nd > KV_MAX_DIMS) {
        return kv_error(KV_ERR_INVALID_ARG,
                        "embedding: argument 'indices': the result would have %d dimensions, at most %d are supported",
                        nd, KV_MAX_DIMS);
    }
    int64_t *idx = NULL, n = 0;
    st = read_indices(indices, rows, "embedding", "indices", "the rows of 'weight'", &idx, &n);
    if (st != KV_OK) return st;

    int64_t sizes[KV_MAX_DIMS];
    memcpy(sizes, indices->sizes, (size_t)indices->ndim * sizeof *sizes);
    sizes[indices->ndim] = width;
    kv_tensor *out = kv_ref_new_output(sizes, nd, weight->dtype);
    if (out == NULL) {
        free(idx);
        return failed("embedding", "kv_ref_new_output");
    }
    if (kv_tensor_numel(out) > 0) {
        const char *src = kv_tensor_data(weight); /* CPU (checked above): host memory */
        char *dst = kv_tensor_data(out);
        size_t isz = kv_dtype_size(weight->dtype);
        int64_t s0 = weight->strides[0], s1 = weight->strides[1];
        for (int64_t p = 0; p < n; p++) {
            for (int64_t d = 0; d < width; d++) {
                memcpy(dst, src + (idx[p] * s0 + d * s1) * (int64_t)isz, isz);
                dst += isz;
            }
        }
    }
    free(idx);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
