/* CUDA copies: copy_, clone, contiguous, _to_copy and cat, all through one
 * strided copy kernel (kvc_copy) that moves raw elements of any dtype or
 * converts between f32 and f64. Checks mirror kernels/ref/ref_copy.c and
 * ref_join.c. */
#include <string.h>

#include "cuda/cuda_shim.h"

/* How `from` elements become `to` elements; false when neither a raw move
 * nor an f32/f64 conversion does it. */
static bool copy_kinds(kv_dtype to, kv_dtype from, kvc_copy_args *a) {
    if (to == from) {
        a->out_kind = a->in_kind = KVC_RAW;
        a->esize = (int)kv_cuda_host->dtype_size(to);
        return true;
    }
    a->out_kind = kv_cuda_dtype_code(to);
    a->in_kind = kv_cuda_dtype_code(from);
    a->esize = 0;
    return a->out_kind >= 0 && a->in_kind >= 0;
}

/* Copies src (seen through ig) into dst's memory (through og), n elements. */
static kv_status copy_run(const char *op, kv_tensor *dst, kvc_geom og, const kv_tensor *src, kvc_geom ig, int64_t n) {
    kvc_copy_args a;
    memset(&a, 0, sizeof a);
    if (!copy_kinds(dst->dtype, src->dtype, &a))
        return kv_cuda_decline(op, "a copy from %s to %s", kv_cuda_host->dtype_name(src->dtype),
                               kv_cuda_host->dtype_name(dst->dtype));
    a.n = n;
    a.out = dst->storage->data;
    a.og = og;
    a.in = src->storage->data;
    a.ig = ig;
    return kvc_copy(&a) == 0 ? KV_OK : kv_cuda_device_error(op);
}

/* A new device tensor with t's values in dtype dt: contiguous, or with
 * preserve in the strides memory_format=preserve gives (the reference's
 * rule, kv_tensor_preserve_strides: a dense permutation, so a contiguous
 * block viewed in them). */
static kv_tensor *copy_new(const char *op, const kv_tensor *t, kv_dtype dt, bool preserve) {
    kv_tensor *out = kv_cuda_empty(t->sizes, t->ndim, dt);
    if (out == NULL) return NULL;
    if (preserve) {
        int64_t strides[KV_MAX_DIMS];
        kv_tensor_preserve_strides(t, strides);
        kv_tensor *v = kv_cuda_host->tensor_view(out, t->sizes, strides, t->ndim, 0);
        kv_cuda_host->tensor_release(out);
        if (v == NULL) return NULL;
        out = v;
    }
    if (copy_run(op, out, kv_cuda_geom_of(out), t, kv_cuda_geom_of(t), kv_cuda_host->tensor_numel(t)) != KV_OK) {
        kv_cuda_host->tensor_release(out);
        return NULL;
    }
    return out;
}

static kv_status check_memory_format(const char *op, const kv_stack *stack, int slot, bool allow_preserve) {
    if (kv_arg_is_none(stack, slot)) return KV_OK;
    const int64_t mf = kv_arg_int(stack, slot);
    if (mf == 0 || (mf == 1 && allow_preserve)) return KV_OK;
    return kv_cuda_host->error(KV_ERR_INVALID_ARG, "%s: argument 'memory_format': %s is not supported", op,
                               mf == 1 ? "preserve_format" : "this memory format");
}

/* memory_format None (clone's and _to_copy's default) or preserve_format. */
static bool preserves(const kv_stack *stack, int slot) {
    return kv_arg_is_none(stack, slot) || kv_arg_int(stack, slot) == KV_MEMORY_FORMAT_PRESERVE;
}

static bool copy_convertible(kv_dtype to, kv_dtype from) {
    kvc_copy_args a;
    return copy_kinds(to, from, &a);
}

static kv_status cuda_copy_(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "copy_";
    kv_tensor *self = kv_arg_tensor(stack, 0), *src = kv_arg_tensor(stack, 1);
    kvc_geom ig;
    if (!kv_cuda_geom_broadcast(src, self->sizes, self->ndim, &ig)) {
        char a[KV_CUDA_SHAPE_BUF], b[KV_CUDA_SHAPE_BUF];
        return h->error(KV_ERR_SHAPE, "copy_: argument 'src': shape %s does not broadcast to self's shape %s",
                        kv_cuda_shape(src->sizes, src->ndim, a, sizeof a),
                        kv_cuda_shape(self->sizes, self->ndim, b, sizeof b));
    }
    kv_status wst = kv_cuda_check_writable(name, "self", self);
    if (wst != KV_OK) return wst;
    if (!copy_convertible(self->dtype, src->dtype))
        return kv_cuda_decline(name, "a copy from %s to %s", h->dtype_name(src->dtype), h->dtype_name(self->dtype));
    if (!kv_cuda_on_device(self)) return kv_cuda_decline(name, "a self that is not in CUDA memory");
    kv_tensor *tmp = NULL;
    kv_tensor *s = kv_cuda_operand(src, &tmp);
    if (s == NULL) return h->last_error();
    /* A src overlapping self is read in full first, as the reference does. */
    if (tmp == NULL && s->storage == self->storage) {
        tmp = copy_new(name, s, s->dtype, false);
        if (tmp == NULL) return h->last_error();
        s = tmp;
    }
    kv_cuda_geom_broadcast(s, self->sizes, self->ndim, &ig);
    const kv_status st = copy_run(name, self, kv_cuda_geom_of(self), s, ig, h->tensor_numel(self));
    h->tensor_release(tmp);
    if (st != KV_OK) return st;
    h->tensor_bump_version(self);
    h->tensor_retain(self);
    return kv_cuda_return(stack, self);
}

static kv_status cuda_clone(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_status st = check_memory_format("clone", stack, 1, true);
    if (st != KV_OK) return st;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *out = copy_new("clone", self, self->dtype, preserves(stack, 1));
    return out ? kv_cuda_return(stack, out) : kv_cuda_host->last_error();
}

static kv_status cuda_contiguous(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_status st = check_memory_format("contiguous", stack, 1, false);
    if (st != KV_OK) return st;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (kv_cuda_host->tensor_is_contiguous(self)) {
        kv_cuda_host->tensor_retain(self); /* an alias of self, as PyTorch returns */
        return kv_cuda_return(stack, self);
    }
    kv_tensor *out = copy_new("contiguous", self, self->dtype, false);
    return out ? kv_cuda_return(stack, out) : kv_cuda_host->last_error();
}

static kv_status cuda_to_copy(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "_to_copy";
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!kv_arg_is_none(stack, 2) && kv_arg_int(stack, 2) != 0)
        return h->error(KV_ERR_INVALID_ARG, "_to_copy: argument 'layout': only the strided layout is supported (got %lld)",
                        (long long)kv_arg_int(stack, 2));
    bool to_host = false;
    if (!kv_arg_is_none(stack, 3)) {
        const kv_device d = kv_arg_device(stack, 3);
        to_host = d.type == KV_DEVICE_CPU && d.index == 0;
        if (!to_host && (d.type != kv_cuda_type || d.index != 0))
            return h->error(KV_ERR_DEVICE, "_to_copy: argument 'device': the CUDA backend copies to %s:0 or cpu, not "
                                           "%s:%d",
                            h->device_type_name(kv_cuda_type), h->device_type_name(d.type), d.index);
    }
    if (!kv_arg_is_none(stack, 4) && kv_arg_bool(stack, 4))
        return h->error(KV_ERR_INVALID_ARG, "_to_copy: argument 'pin_memory': pinned memory is not supported");
    kv_status st = check_memory_format(name, stack, 6, true);
    if (st != KV_OK) return st;
    const kv_dtype dt = kv_arg_is_none(stack, 1) ? self->dtype : kv_arg_dtype(stack, 1);
    kv_tensor *out = copy_new(name, self, dt, preserves(stack, 6));
    if (out == NULL) return h->last_error();
    if (to_host) {
        kv_tensor *hc = h->copy_to_device(out, KV_DEVICE_CPU0);
        h->tensor_release(out);
        if (hc == NULL) return h->last_error();
        out = hc;
    }
    return kv_cuda_return(stack, out);
}

/* PyTorch keeps accepting cat([tensor([]), x]): 1-D empty inputs take no
 * part in the shape checks. */
static bool cat_skips(const kv_tensor *t) { return t->ndim == 1 && t->sizes[0] == 0; }

static kv_status cuda_cat(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    const kv_tensor_list list = kv_arg_tensors(stack, 0);
    const int64_t dim_arg = kv_arg_int(stack, 1);
    if (list.n <= 0)
        return h->error(KV_ERR_INVALID_ARG, "cat: argument 'tensors': torch.cat(): expected a non-empty list of Tensors");
    for (int i = 0; i < list.n; i++)
        if (list.items[i]->ndim == 0)
            return h->error(KV_ERR_DIM,
                            "cat: argument 'tensors': zero-dimensional tensor (at position %d) cannot be concatenated", i);
    for (int i = 0; i < list.n; i++)
        if (!kv_cuda_on_device(list.items[i]))
            return h->error(KV_ERR_DEVICE, "cat: argument 'tensors': tensor %d is not on the CUDA device", i);
    const kv_dtype dt = h->result_type((const kv_tensor *const *)list.items, list.n, NULL, 0);
    int first = -1;
    for (int i = 0; i < list.n && first < 0; i++)
        if (!cat_skips(list.items[i])) first = i;
    if (first < 0) {
        const int64_t zero = 0;
        kv_tensor *out = kv_cuda_empty(&zero, 1, dt);
        return out ? kv_cuda_return(stack, out) : h->last_error();
    }
    const kv_tensor *ref = list.items[first];
    const int dim = h->wrap_dim(dim_arg, ref->ndim, "cat", "dim");
    if (dim < 0) return h->last_error();
    int64_t sizes[KV_MAX_DIMS];
    memcpy(sizes, ref->sizes, sizeof sizes);
    int64_t total = 0;
    for (int i = 0; i < list.n; i++) {
        const kv_tensor *t = list.items[i];
        if (cat_skips(t)) continue;
        if (t->ndim != ref->ndim)
            return h->error(KV_ERR_SHAPE, "cat: argument 'tensors': Tensors must have same number of dimensions: got %d "
                                          "and %d", ref->ndim, t->ndim);
        for (int d = 0; d < ref->ndim; d++)
            if (d != dim && t->sizes[d] != ref->sizes[d])
                return h->error(KV_ERR_SHAPE, "cat: argument 'tensors': Sizes of tensors must match except in dimension "
                                              "%d. Expected size %lld but got size %lld for tensor number %d in the list.",
                                dim, (long long)ref->sizes[d], (long long)t->sizes[d], i);
        if (__builtin_add_overflow(total, t->sizes[dim], &total))
            return h->error(KV_ERR_SHAPE, "cat: argument 'tensors': the result size at dimension %d overflows", dim);
    }
    sizes[dim] = total;
    for (int i = 0; i < list.n; i++)
        if (!cat_skips(list.items[i]) && !copy_convertible(dt, list.items[i]->dtype))
            return kv_cuda_decline("cat", "a %s input to a %s result", h->dtype_name(list.items[i]->dtype),
                                   h->dtype_name(dt));
    kv_tensor *out = kv_cuda_empty(sizes, ref->ndim, dt);
    if (out == NULL) return h->last_error();
    int64_t at = 0;
    for (int i = 0; i < list.n; i++) {
        const kv_tensor *t = list.items[i];
        if (cat_skips(t)) continue;
        const int64_t n = h->tensor_numel(t);
        if (n > 0) {
            kvc_geom og = kv_cuda_geom_of(out);
            for (int d = 0; d < t->ndim; d++) og.sizes[d] = t->sizes[d];
            og.offset = out->offset + at * out->strides[dim];
            const kv_status st = copy_run("cat", out, og, t, kv_cuda_geom_of(t), n);
            if (st != KV_OK) {
                h->tensor_release(out);
                return st;
            }
        }
        at += t->sizes[dim];
    }
    return kv_cuda_return(stack, out);
}

static const struct {
    const char *op;
    kv_kernel_fn fn;
} copy_kernels[] = {
    { "copy_", cuda_copy_ },
    { "clone", cuda_clone },
    { "contiguous", cuda_contiguous },
    { "_to_copy", cuda_to_copy },
    { "cat", cuda_cat },
};

kv_status kv_cuda_register_copy(kv_key key) {
    for (size_t i = 0; i < sizeof copy_kernels / sizeof copy_kernels[0]; i++) {
        const kv_status st = kv_cuda_host->register_kernel(copy_kernels[i].op, key, copy_kernels[i].fn);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
