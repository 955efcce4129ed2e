/* CUDA normalization: _softmax, _log_softmax (one thread per slice) and
 * native_layer_norm (one thread per row), f32/f64. Checks mirror
 * kernels/ref/ref_softmax.c and ref_norm.c. */
#include <string.h>

#include "cuda/cuda_shim.h"
#include "ref/ref_shared.h"

#define DTYPES_FLOATING ((1u << KV_F16) | (1u << KV_BF16) | (1u << KV_F32) | (1u << KV_F64))

/* t's dims other than `skip`, as geometry with t's offset. */
static kvc_geom geom_without(const kv_tensor *t, int skip) {
    kvc_geom g;
    memset(&g, 0, sizeof g);
    g.offset = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (d == skip) continue;
        g.sizes[g.ndim] = t->sizes[d];
        g.strides[g.ndim++] = t->strides[d];
    }
    return g;
}

static kv_status softmax_run(const char *name, const char *plain, kv_stack *stack, int log_form) {
    const kv_host_api *h = kv_cuda_host;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!(DTYPES_FLOATING & (1u << self->dtype)))
        return h->error(KV_ERR_DTYPE, "%s: argument 'self': dtype %s is not supported", name, h->dtype_name(self->dtype));
    const int dim = h->wrap_dim(kv_arg_int(stack, 1), self->ndim, name, "dim");
    if (dim < 0) return h->last_error();
    if (kv_arg_bool(stack, 2))
        return h->error(KV_ERR_INVALID_ARG, "%s: argument 'half_to_float': %s with half to float conversion is not "
                                            "supported", name, plain);
    const int code = kv_cuda_dtype_code(self->dtype);
    if (code < 0) return kv_cuda_decline(name, "dtype %s", h->dtype_name(self->dtype));
    kv_tensor *out = kv_cuda_empty(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return h->last_error();
    const int nd = self->ndim;
    kvc_softmax_args a;
    memset(&a, 0, sizeof a);
    a.dtype = code;
    a.log_form = log_form;
    a.len = nd ? self->sizes[dim] : 1;
    a.nslices = 1;
    for (int d = 0; d < nd; d++)
        if (d != dim) a.nslices *= self->sizes[d];
    if (a.len == 0) a.nslices = 0;
    a.in = self->storage->data;
    a.islices = geom_without(self, nd ? dim : -1);
    a.in_stride = nd ? self->strides[dim] : 0;
    a.out = out->storage->data;
    a.oslices = geom_without(out, nd ? dim : -1);
    a.out_stride = nd ? out->strides[dim] : 0;
    if (kvc_softmax(&a) != 0) {
        h->tensor_release(out);
        return kv_cuda_device_error(name);
    }
    return kv_cuda_return(stack, out);
}

static kv_status cuda_softmax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return softmax_run("_softmax", "softmax", stack, 0);
}

static kv_status cuda_log_softmax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return softmax_run("_log_softmax", "log_softmax", stack, 1);
}

/* ---- native_layer_norm ---- */

static kv_status ln_check_dtypes(const char *op, const kv_tensor *x, const kv_tensor *w, const kv_tensor *b) {
    const kv_host_api *h = kv_cuda_host;
    if (!(DTYPES_FLOATING & (1u << x->dtype)))
        return h->error(KV_ERR_DTYPE, "%s: argument 'input': dtype %s is not supported", op, h->dtype_name(x->dtype));
    const kv_tensor *first = w ? w : b;
    const bool mixed = first && first->dtype != x->dtype;
    if (!mixed) {
        if (b && b->dtype != x->dtype)
            return h->error(KV_ERR_DTYPE, "%s: argument 'bias': mixed dtype: all inputs must share same datatype", op);
        return KV_OK;
    }
    if (x->dtype != KV_F16 && x->dtype != KV_BF16)
        return h->error(KV_ERR_DTYPE, "%s: argument '%s': mixed dtype: all inputs must share same datatype", op,
                        w ? "weight" : "bias");
    if ((w && w->dtype != KV_F32) || (b && b->dtype != KV_F32))
        return h->error(KV_ERR_DTYPE, "%s: argument '%s': mixed dtype: expect parameter to have scalar type of Float", op,
                        (w && w->dtype != KV_F32) ? "weight" : "bias");
    return KV_OK;
}

static kv_status ln_check_param(const char *op, const char *arg, const kv_tensor *p, kv_int_list ns) {
    if (!p || kv_ref_sizes_are(p, ns)) return KV_OK;
    return kv_cuda_host->error(KV_ERR_SHAPE, "%s: argument '%s': Expected %s to be of same shape as normalized_shape",
                               op, arg, arg);
}

/* Geometry of dims [from, from + n) of t, offset 0. */
static kvc_geom geom_dims(const kv_tensor *t, int from, int n) {
    kvc_geom g;
    memset(&g, 0, sizeof g);
    g.ndim = n;
    for (int d = 0; d < n; d++) {
        g.sizes[d] = t->sizes[from + d];
        g.strides[d] = t->strides[from + d];
    }
    return g;
}

static kv_status cuda_layer_norm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "native_layer_norm";
    const kv_tensor *x = kv_arg_tensor(stack, 0), *w = kv_arg_tensor(stack, 2), *b = kv_arg_tensor(stack, 3);
    const kv_int_list ns = kv_arg_ints(stack, 1);
    kv_status st = ln_check_dtypes(name, x, w, b);
    if (st != KV_OK) return st;
    if (ns.n < 1)
        return h->error(KV_ERR_SHAPE, "%s: argument 'normalized_shape': Expected normalized_shape to be at least "
                                      "1-dimensional", name);
    const bool match = kv_ref_ln_trailing_match(x, ns);
    const int axis = x->ndim - ns.n;
    if (!match)
        return h->error(KV_ERR_SHAPE, "%s: argument 'normalized_shape': the input's trailing sizes do not match it", name);
    st = ln_check_param(name, "weight", w, ns);
    if (st == KV_OK) st = ln_check_param(name, "bias", b, ns);
    if (st != KV_OK) return st;
    const int code = kv_cuda_dtype_code(x->dtype);
    if (code < 0 || (w && w->dtype != x->dtype) || (b && b->dtype != x->dtype))
        return kv_cuda_decline(name, "dtype %s", h->dtype_name(x->dtype));
    if ((w && !kv_cuda_on_device(w)) || (b && !kv_cuda_on_device(b)))
        return h->error(KV_ERR_DEVICE, "%s: weight and bias must be on the CUDA device", name);

    int64_t stat_sizes[KV_MAX_DIMS];
    int64_t rows, cols;
    kv_ref_ln_split(x, axis, stat_sizes, &rows, &cols);
    kv_tensor *out = kv_cuda_empty(x->sizes, x->ndim, x->dtype);
    kv_tensor *mean = out ? kv_cuda_empty(stat_sizes, x->ndim, x->dtype) : NULL;
    kv_tensor *rstd = mean ? kv_cuda_empty(stat_sizes, x->ndim, x->dtype) : NULL;
    if (rstd == NULL) {
        st = h->last_error();
        h->tensor_release(out);
        h->tensor_release(mean);
        return st;
    }
    kvc_layer_norm_args a;
    memset(&a, 0, sizeof a);
    a.dtype = code;
    a.rows = rows;
    a.cols = cols;
    a.eps = kv_arg_double(stack, 4);
    a.x = x->storage->data;
    a.xrow = geom_dims(x, 0, axis);
    a.xrow.offset = x->offset;
    a.xcol = geom_dims(x, axis, ns.n);
    a.out = out->storage->data;
    a.orow = geom_dims(out, 0, axis);
    a.orow.offset = out->offset;
    a.ocol = geom_dims(out, axis, ns.n);
    /* Weight and bias each have strides and an offset of their own. */
    a.has_w = w != NULL;
    a.has_b = b != NULL;
    if (w) {
        a.w = w->storage->data;
        a.wg = geom_dims(w, 0, w->ndim);
        a.wg.offset = w->offset;
    }
    if (b) {
        a.b = b->storage->data;
        a.bg = geom_dims(b, 0, b->ndim);
        a.bg.offset = b->offset;
    }
    a.mean = mean->storage->data;
    a.rstd = rstd->storage->data;
    if (kvc_layer_norm(&a) != 0) {
        h->tensor_release(out);
        h->tensor_release(mean);
        h->tensor_release(rstd);
        return kv_cuda_device_error(name);
    }
    kv_tensor *res[3] = { out, mean, rstd };
    h->stack_return_tensors(stack, res, 3);
    return KV_OK;
}

kv_status kv_cuda_register_norm(kv_key key) {
    kv_status st = kv_cuda_host->register_kernel("_softmax", key, cuda_softmax);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("_log_softmax", key, cuda_log_softmax);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("native_layer_norm", key, cuda_layer_norm);
    return st;
}
