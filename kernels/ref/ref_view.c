/* Reference kernels of the view ops.
 *
 * Every result is kv_tensor_view(self, ...): it shares self's storage, keys
 * and version counter, because the boxing layer and the fastpath check rely
 * on views aliasing their base. Only geometry is computed, never memory
 * touched, so these kernels work for tensors of any device. The one exception is reshape, which copies
 * (into a new contiguous tensor) exactly when PyTorch's stride rule says the
 * new shape cannot be expressed over the old memory. Geometry, defaults and
 * error conditions follow PyTorch; messages carry PyTorch's wording after
 * "op: argument 'x': " so the two can be compared. */
#include <inttypes.h>
#include <string.h>

#include "ref/ref.h"
#include "ref/ref_kernels.h"

/* ---- helpers ---- */

/* Schema checking happens in the dispatcher, but a kernel called directly
 * with a wrong stack must fail, not dereference NULL. */
static kv_tensor *tensor_arg(const kv_stack *stack, int i, const char *op, const char *arg,
                             kv_status *st) {
    kv_tensor *t = (stack->size > i) ? kv_arg_tensor(stack, i) : NULL;
    if (t == NULL) *st = kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': expected a tensor", op, arg);
    return t;
}

/* Multiplication that wraps instead of overflowing (signed overflow is UB):
 * strides of size-1 dims may be arbitrary, so products of them may be too.
 * A wrapped value never matches a real stride of an in-bounds view, and
 * kv_tensor_view re-checks the bounds of whatever comes out. */
static int64_t mul_wrap(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

/* Pushes kv_tensor_view(self, ...) as the only return. */
static kv_status return_view(kv_stack *stack, const kv_tensor *self, const int64_t *sizes,
                             const int64_t *strides, int ndim, int64_t offset, const char *op) {
    kv_tensor *out = kv_tensor_view(self, sizes, strides, ndim, offset);
    if (out == NULL) {
        kv_status st = kv_last_error();
        if (st == KV_OK) st = kv_error(KV_ERR_INTERNAL, "%s: kv_tensor_view failed without an error", op);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

static kv_status check_result_ndim(int ndim, const char *op, const char *arg) {
    if (ndim > KV_MAX_DIMS) {
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument '%s': the result would have %d dimensions, at most %d are supported",
                        op, arg, ndim, KV_MAX_DIMS);
    }
    return KV_OK;
}

/* PyTorch's infer_size: resolves at most one -1 so the product equals numel. */
static kv_status infer_size(const char *op, const char *arg, kv_int_list shape, int64_t numel,
                            int64_t *out) {
    char buf[KV_REF_SHAPE_BUF];
    kv_status st = check_result_ndim(shape.n, op, arg);
    if (st != KV_OK) return st;
    int infer = -1;
    int64_t known = 1;
    bool overflow = false;
    for (int d = 0; d < shape.n; d++) {
        int64_t s = shape.items[d];
        out[d] = s;
        if (s == -1) {
            if (infer >= 0) {
                return kv_error(KV_ERR_SHAPE, "%s: argument '%s': only one dimension can be inferred (shape %s)",
                                op, arg, kv_ref_format_shape(shape.items, shape.n, buf, sizeof buf));
            }
            infer = d;
        } else if (s < 0) {
            return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument '%s': invalid shape dimension %" PRId64, op,
                            arg, s);
        } else if (!overflow && __builtin_mul_overflow(known, s, &known)) {
            overflow = true;
        }
    }
    if (!overflow) {
        if (known == numel && infer < 0) return KV_OK;
        if (infer >= 0) {
            if (known == 0 && numel == 0) {
                return kv_error(KV_ERR_SHAPE,
                                "%s: argument '%s': cannot reshape tensor of 0 elements into shape %s because "
                                "the unspecified dimension size -1 can be any value and is ambiguous",
                                op, arg, kv_ref_format_shape(shape.items, shape.n, buf, sizeof buf));
            }
            if (known != 0 && numel % known == 0) {
                out[infer] = numel / known;
                return KV_OK;
            }
        }
    }
    return kv_error(KV_ERR_SHAPE, "%s: argument '%s': shape '%s' is invalid for input of size %" PRId64, op,
                    arg, kv_ref_format_shape(shape.items, shape.n, buf, sizeof buf), numel);
}

/* PyTorch's computeStride rule. The old dims split into chunks, each a run
 * of dims laid out contiguously with respect to each other (size-1 dims
 * join any chunk). A view is possible iff every new dim falls inside one
 * chunk, i.e. the new sizes regroup each chunk's elements without crossing
 * a chunk boundary; the new dims of a chunk then get contiguous strides
 * scaled by the chunk's innermost stride. Walks both shapes from the
 * innermost dim outwards. Returns false when no strides exist. */
static bool view_strides(const int64_t *osz, const int64_t *ost, int on, const int64_t *nsz, int nn,
                         int64_t *nst) {
    if (on == 0) {
        for (int d = 0; d < nn; d++) nst[d] = 1;
        return true;
    }
    int64_t numel = 1;
    for (int d = 0; d < on; d++) numel *= osz[d];
    if (numel == 0) {
        /* Strides are arbitrary without elements; like NumPy keep them for
         * an unchanged shape, else use contiguous ones (size 0 counted as 1). */
        bool same = (on == nn) && memcmp(osz, nsz, (size_t)on * sizeof *osz) == 0;
        if (same) {
            memcpy(nst, ost, (size_t)on * sizeof *ost);
            return true;
        }
        for (int d = nn - 1; d >= 0; d--) {
            nst[d] = (d == nn - 1) ? 1 : mul_wrap(nsz[d + 1] > 1 ? nsz[d + 1] : 1, nst[d + 1]);
        }
        return true;
    }
    int vd = nn - 1;
    int64_t chunk_stride = ost[on - 1]; /* stride of the chunk's innermost dim */
    int64_t chunk_numel = 1;
    int64_t view_numel = 1;
    for (int td = on - 1; td >= 0; td--) {
        chunk_numel *= osz[td];
        bool chunk_ends = td == 0 || (osz[td - 1] != 1 && ost[td - 1] != mul_wrap(chunk_numel, chunk_stride));
        if (!chunk_ends) continue;
        while (vd >= 0 && (view_numel < chunk_numel || nsz[vd] == 1)) {
            nst[vd] = mul_wrap(view_numel, chunk_stride);
            view_numel *= nsz[vd];
            vd--;
        }
        if (view_numel != chunk_numel) return false;
        if (td > 0) {
            chunk_stride = ost[td - 1];
            chunk_numel = 1;
            view_numel = 1;
        }
    }
    return vd == -1;
}

/* view and _unsafe_view: PyTorch gives both the same geometry and the same
 * errors; _unsafe_view only differs in autograd bookkeeping. */
static kv_status view_kernel(kv_stack *stack, const char *op) {
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, op, "self", &st);
    if (self == NULL) return st;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    kv_int_list shape = kv_arg_ints(stack, 1);
    st = infer_size(op, "size", shape, kv_tensor_numel(self), sizes);
    if (st != KV_OK) return st;
    if (!view_strides(self->sizes, self->strides, self->ndim, sizes, shape.n, strides)) {
        return kv_error(KV_ERR_SHAPE,
                        "%s: argument 'size': view size is not compatible with input tensor's size and stride "
                        "(at least one dimension spans across two contiguous subspaces). Use .reshape(...) "
                        "instead.",
                        op);
    }
    return return_view(stack, self, sizes, strides, shape.n, self->offset, op);
}

/* ---- kernels ---- */

KV_REF_KERNEL(view) {
    (void)op;
    (void)ks;
    return view_kernel(stack, "view");
}

KV_REF_KERNEL(_unsafe_view) {
    (void)op;
    (void)ks;
    return view_kernel(stack, "_unsafe_view");
}

KV_REF_KERNEL(reshape) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "reshape", "self", &st);
    if (self == NULL) return st;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    kv_int_list shape = kv_arg_ints(stack, 1);
    int64_t numel = kv_tensor_numel(self);
    st = infer_size("reshape", "shape", shape, numel, sizes);
    if (st != KV_OK) return st;
    if (view_strides(self->sizes, self->strides, self->ndim, sizes, shape.n, strides)) {
        return return_view(stack, self, sizes, strides, shape.n, self->offset, "reshape");
    }
    /* Not viewable: PyTorch reshapes a contiguous clone. The iterator walks
     * self in row-major order, which is exactly the order of the elements
     * of the contiguous result, so the destination just advances. The
     * views above work on any device; a copy is made on the CPU, so only a
     * CPU self may get here. */
    st = kv_ref_check_cpu("reshape", "self", self);
    if (st != KV_OK) return st;
    kv_tensor *out = kv_ref_new_output(sizes, shape.n, self->dtype);
    if (out == NULL) return kv_last_error() != KV_OK ? kv_last_error() : KV_ERR_OOM;
    if (numel > 0) {
        kv_ref_iter it;
        kv_tensor *ops[1] = { self };
        st = kv_ref_iter_init(&it, self->sizes, self->ndim, ops, 1);
        if (st != KV_OK) {
            kv_tensor_release(out);
            return st;
        }
        size_t isz = kv_dtype_size(self->dtype);
        char *dst = kv_tensor_data(out);
        while (kv_ref_iter_next(&it)) {
            memcpy(dst, it.ptr[0], isz);
            dst += isz;
        }
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(transpose) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "transpose.int", "self", &st);
    if (self == NULL) return st;
    int d0 = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, "transpose.int", "dim0");
    if (d0 < 0) return KV_ERR_DIM;
    int d1 = kv_wrap_dim(kv_arg_int(stack, 2), self->ndim, "transpose.int", "dim1");
    if (d1 < 0) return KV_ERR_DIM;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof sizes);
    memcpy(strides, self->strides, sizeof strides);
    /* A 0-dim tensor accepts dims 0/-1 and has nothing to swap. */
    if (self->ndim > 0) {
        sizes[d0] = self->sizes[d1];
        sizes[d1] = self->sizes[d0];
        strides[d0] = self->strides[d1];
        strides[d1] = self->strides[d0];
    }
    return return_view(stack, self, sizes, strides, self->ndim, self->offset, "transpose.int");
}

KV_REF_KERNEL(t) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "t", "self", &st);
    if (self == NULL) return st;
    if (self->ndim > 2) {
        return kv_error(KV_ERR_DIM,
                        "t: argument 'self': t() expects a tensor with <= 2 dimensions, but self is %dD",
                        self->ndim);
    }
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof sizes);
    memcpy(strides, self->strides, sizeof strides);
    if (self->ndim == 2) {
        sizes[0] = self->sizes[1];
        sizes[1] = self->sizes[0];
        strides[0] = self->strides[1];
        strides[1] = self->strides[0];
    }
    return return_view(stack, self, sizes, strides, self->ndim, self->offset, "t");
}

KV_REF_KERNEL(permute) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "permute", "self", &st);
    if (self == NULL) return st;
    kv_int_list dims = kv_arg_ints(stack, 1);
    if (dims.n != self->ndim) {
        return kv_error(KV_ERR_SHAPE,
                        "permute: argument 'dims': number of dims don't match in permute: the tensor has %d "
                        "dimensions but %d dims were given",
                        self->ndim, dims.n);
    }
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    bool seen[KV_MAX_DIMS] = { false };
    for (int i = 0; i < dims.n; i++) {
        int d = kv_wrap_dim(dims.items[i], self->ndim, "permute", "dims");
        if (d < 0) return KV_ERR_DIM;
        if (seen[d]) {
            return kv_error(KV_ERR_DIM, "permute: argument 'dims': repeated dim %d in permute (duplicate dims are not allowed)", d);
        }
        seen[d] = true;
        sizes[i] = self->sizes[d];
        strides[i] = self->strides[d];
    }
    return return_view(stack, self, sizes, strides, self->ndim, self->offset, "permute");
}

KV_REF_KERNEL(select) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "select.int", "self", &st);
    if (self == NULL) return st;
    if (self->ndim == 0) {
        return kv_error(KV_ERR_DIM, "select.int: argument 'self': select() cannot be applied to a 0-dim tensor.");
    }
    int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, "select.int", "dim");
    if (dim < 0) return KV_ERR_DIM;
    int64_t index = kv_arg_int(stack, 2);
    int64_t size = self->sizes[dim];
    if (index < -size || index >= size) {
        char buf[KV_REF_SHAPE_BUF];
        return kv_error(KV_ERR_INDEX,
                        "select.int: argument 'index': select(): index %" PRId64
                        " out of range for tensor of size %s at dimension %d",
                        index, kv_ref_format_shape(self->sizes, self->ndim, buf, sizeof buf), dim);
    }
    if (index < 0) index += size;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (d == dim) continue;
        sizes[n] = self->sizes[d];
        strides[n] = self->strides[d];
        n++;
    }
    return return_view(stack, self, sizes, strides, n, self->offset + index * self->strides[dim], "select.int");
}

KV_REF_KERNEL(slice) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "slice.Tensor", "self", &st);
    if (self == NULL) return st;
    if (self->ndim == 0) {
        return kv_error(KV_ERR_DIM, "slice.Tensor: argument 'self': slice() cannot be applied to a 0-dim tensor.");
    }
    int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, "slice.Tensor", "dim");
    if (dim < 0) return KV_ERR_DIM;
    int64_t size = self->sizes[dim];
    int64_t start = kv_arg_is_none(stack, 2) ? 0 : kv_arg_int(stack, 2);
    int64_t end = kv_arg_is_none(stack, 3) ? size : kv_arg_int(stack, 3);
    int64_t step = kv_arg_int(stack, 4);
    if (step <= 0) {
        return kv_error(KV_ERR_INVALID_ARG, "slice.Tensor: argument 'step': slice step must be positive, got %" PRId64, step);
    }
    /* Python slice semantics: negative bounds count from the end, then both
     * clamp to [0, size] and an empty range starts where it ends. */
    if (start < 0) start += size;
    if (end < 0) end += size;
    if (start < 0) start = 0;
    else if (start > size) start = size;
    if (end < start) end = start;
    else if (end > size) end = size;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof sizes);
    memcpy(strides, self->strides, sizeof strides);
    int64_t len = end - start;
    sizes[dim] = len / step + (len % step != 0);
    strides[dim] = self->strides[dim] * step;
    return return_view(stack, self, sizes, strides, self->ndim, self->offset + start * self->strides[dim],
                       "slice.Tensor");
}

KV_REF_KERNEL(squeeze) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "squeeze", "self", &st);
    if (self == NULL) return st;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (self->sizes[d] == 1) continue;
        sizes[n] = self->sizes[d];
        strides[n] = self->strides[d];
        n++;
    }
    return return_view(stack, self, sizes, strides, n, self->offset, "squeeze");
}

KV_REF_KERNEL(squeeze_dim) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "squeeze.dim", "self", &st);
    if (self == NULL) return st;
    int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, "squeeze.dim", "dim");
    if (dim < 0) return KV_ERR_DIM;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (d == dim && self->sizes[d] == 1) continue;
        sizes[n] = self->sizes[d];
        strides[n] = self->strides[d];
        n++;
    }
    return return_view(stack, self, sizes, strides, n, self->offset, "squeeze.dim");
}

KV_REF_KERNEL(unsqueeze) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "unsqueeze", "self", &st);
    if (self == NULL) return st;
    st = check_result_ndim(self->ndim + 1, "unsqueeze", "dim");
    if (st != KV_OK) return st;
    int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim + 1, "unsqueeze", "dim");
    if (dim < 0) return KV_ERR_DIM;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    int n = 0;
    for (int d = 0; d <= self->ndim; d++) {
        if (d == dim) {
            /* PyTorch's choice: the stride that keeps the result contiguous
             * wherever self was. */
            sizes[n] = 1;
            strides[n] = (d < self->ndim) ? mul_wrap(self->sizes[d], self->strides[d]) : 1;
            n++;
        }
        if (d < self->ndim) {
            sizes[n] = self->sizes[d];
            strides[n] = self->strides[d];
            n++;
        }
    }
    return return_view(stack, self, sizes, strides, n, self->offset, "unsqueeze");
}

KV_REF_KERNEL(expand) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "expand", "self", &st);
    if (self == NULL) return st;
    kv_int_list target = kv_arg_ints(stack, 1); /* arg 2, `implicit`, only matters to tracing */
    char tbuf[KV_REF_SHAPE_BUF], sbuf[KV_REF_SHAPE_BUF];
    st = check_result_ndim(target.n, "expand", "size");
    if (st != KV_OK) return st;
    if (target.n < self->ndim) {
        return kv_error(KV_ERR_SHAPE,
                        "expand: argument 'size': the number of sizes provided (%d) must be greater or equal to "
                        "the number of dimensions in the tensor (%d)",
                        target.n, self->ndim);
    }
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    /* Align trailing dims; walk from the innermost so a new leading dim can
     * take the stride that would make it contiguous over the dims after it. */
    for (int i = target.n - 1; i >= 0; i--) {
        int sd = i - (target.n - self->ndim);
        int64_t size = sd >= 0 ? self->sizes[sd] : 1;
        /* PyTorch gives every dim of an expanded 0-dim tensor stride 0. */
        int64_t stride = sd >= 0 ? self->strides[sd]
                         : self->ndim == 0 ? 0 : mul_wrap(sizes[i + 1], strides[i + 1]);
        int64_t want = target.items[i];
        if (want == -1) {
            if (sd < 0) {
                return kv_error(KV_ERR_SHAPE,
                                "expand: argument 'size': The expanded size of the tensor (-1) isn't allowed in "
                                "a leading, non-existing dimension %d",
                                i);
            }
            want = size;
        } else if (want < 0) {
            return kv_error(KV_ERR_NEGATIVE_SIZE, "expand: argument 'size': invalid size %" PRId64 " at dimension %d",
                            want, i);
        }
        if (size != want) {
            if (size != 1) {
                return kv_error(KV_ERR_SHAPE,
                                "expand: argument 'size': The expanded size of the tensor (%" PRId64
                                ") must match the existing size (%" PRId64
                                ") at non-singleton dimension %d. Target sizes: %s. Tensor sizes: %s",
                                want, size, i, kv_ref_format_shape(target.items, target.n, tbuf, sizeof tbuf),
                                kv_ref_format_shape(self->sizes, self->ndim, sbuf, sizeof sbuf));
            }
            size = want;
            stride = 0;
        }
        sizes[i] = size;
        strides[i] = stride;
    }
    return return_view(stack, self, sizes, strides, target.n, self->offset, "expand");
}

KV_REF_KERNEL(as_strided) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "as_strided", "self", &st);
    if (self == NULL) return st;
    kv_int_list size = kv_arg_ints(stack, 1);
    kv_int_list stride = kv_arg_ints(stack, 2);
    int64_t offset = kv_arg_is_none(stack, 3) ? self->offset : kv_arg_int(stack, 3);
    char zbuf[KV_REF_SHAPE_BUF], tbuf[KV_REF_SHAPE_BUF];
    if (size.n != stride.n) {
        return kv_error(KV_ERR_SHAPE, "as_strided: argument 'stride': mismatch in length of strides and shape (%d vs %d)",
                        stride.n, size.n);
    }
    st = check_result_ndim(size.n, "as_strided", "size");
    if (st != KV_OK) return st;
    for (int d = 0; d < size.n; d++) {
        if (size.items[d] < 0) {
            return kv_error(KV_ERR_NEGATIVE_SIZE, "as_strided: argument 'size': negative size %" PRId64 " at dimension %d",
                            size.items[d], d);
        }
        if (stride.items[d] < 0) {
            return kv_error(KV_ERR_INVALID_ARG,
                            "as_strided: argument 'stride': Negative strides are not supported at the moment, got "
                            "strides: %s",
                            kv_ref_format_shape(stride.items, stride.n, tbuf, sizeof tbuf));
        }
    }
    if (offset < 0) {
        return kv_error(KV_ERR_INVALID_ARG, "as_strided: argument 'storage_offset': invalid storage offset %" PRId64,
                        offset);
    }
    /* Checked here, not only in kv_tensor_view, so the error names this op
     * and its arguments. Without elements any geometry fits (PyTorch). */
    int64_t last = 0;
    bool empty = false, overflow = false;
    for (int d = 0; d < size.n; d++) {
        int64_t span;
        if (size.items[d] == 0) empty = true;
        else if (__builtin_mul_overflow(size.items[d] - 1, stride.items[d], &span) ||
                 __builtin_add_overflow(last, span, &last)) overflow = true;
    }
    if (!empty) {
        int64_t capacity = (int64_t)(self->storage->nbytes / kv_dtype_size(self->dtype));
        if (overflow || __builtin_add_overflow(last, offset, &last) || last >= capacity) {
            return kv_error(KV_ERR_INVALID_ARG,
                            "as_strided: argument 'size': sizes %s, strides %s and storage offset %" PRId64
                            " are out of bounds for storage of %" PRId64 " elements",
                            kv_ref_format_shape(size.items, size.n, zbuf, sizeof zbuf),
                            kv_ref_format_shape(stride.items, stride.n, tbuf, sizeof tbuf), offset, capacity);
        }
    }
    return return_view(stack, self, size.items, stride.items, size.n, offset, "as_strided");
}

KV_REF_KERNEL(detach) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "detach", "self", &st);
    if (self == NULL) return st;
    kv_tensor *out = kv_tensor_view(self, self->sizes, self->strides, self->ndim, self->offset);
    if (out == NULL) {
        st = kv_last_error();
        return st != KV_OK ? st : kv_error(KV_ERR_INTERNAL, "detach: kv_tensor_view failed without an error");
    }
    /* A detached tensor is outside the graph: no autograd record and no
     * Autograd key, whatever kv_tensor_view copied. The record is owned by
     * src/modes, so a view that carried one is a core bug we must not
     * paper over by freeing someone else's memory. */
    if (out->autograd != NULL) {
        kv_tensor_release(out);
        return kv_error(KV_ERR_INTERNAL, "detach: kv_tensor_view carried the autograd record into a view");
    }
    out->keys = kv_keyset_remove(out->keys, KV_KEY_AUTOGRAD);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(unfold) {
    (void)op;
    (void)ks;
    kv_status st = KV_OK;
    kv_tensor *self = tensor_arg(stack, 0, "unfold", "self", &st);
    if (self == NULL) return st;
    int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, "unfold", "dimension");
    if (dim < 0) return KV_ERR_DIM;
    int64_t size = kv_arg_int(stack, 2);
    int64_t step = kv_arg_int(stack, 3);
    st = check_result_ndim(self->ndim + 1, "unfold", "self");
    if (st != KV_OK) return st;
    /* A 0-dim tensor unfolds as if it had one dim of size 1. */
    int64_t max_size = self->ndim == 0 ? 1 : self->sizes[dim];
    if (size < 0) {
        return kv_error(KV_ERR_NEGATIVE_SIZE, "unfold: argument 'size': size is %" PRId64 " but must be >= 0", size);
    }
    if (size > max_size) {
        return kv_error(KV_ERR_SHAPE,
                        "unfold: argument 'size': maximum size for tensor at dimension %d is %" PRId64
                        " but size is %" PRId64,
                        dim, max_size, size);
    }
    if (step <= 0) {
        return kv_error(KV_ERR_INVALID_ARG, "unfold: argument 'step': step is %" PRId64 " but must be > 0", step);
    }
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    memcpy(sizes, self->sizes, sizeof sizes);
    memcpy(strides, self->strides, sizeof strides);
    sizes[self->ndim] = size;
    strides[self->ndim] = self->ndim == 0 ? 1 : self->strides[dim];
    if (self->ndim > 0) {
        sizes[dim] = (self->sizes[dim] - size) / step + 1;
        strides[dim] = self->strides[dim] * step;
    }
    return return_view(stack, self, sizes, strides, self->ndim + 1, self->offset, "unfold");
}
