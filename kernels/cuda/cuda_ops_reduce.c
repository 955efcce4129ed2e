/* CUDA reductions: sum.dim_IntList, mean.dim, amax. One thread per output
 * element, the reduced elements visited row-major in f64, exactly the
 * reference's order (kernels/ref/ref_reduce.c), whose checks these
 * mirror. Kernels for f32/f64 inputs and results. */
#include <string.h>

#include "cuda/cuda_shim.h"
#include "ref/ref_shared.h"

typedef struct red_dims {
    bool reduce[KV_MAX_DIMS];
} red_dims;

/* int[1]? as a mask (ref_shared.h, as red_parse_dims reads it), the errors
 * worded through the host table. */
static kv_status red_parse(const char *op, const kv_stack *s, int slot, const kv_tensor *t, red_dims *out) {
    const kv_host_api *h = kv_cuda_host;
    bool given = false;
    int64_t bad = 0;
    switch (kv_ref_dims_mask(&s->slots[slot], t->ndim, out->reduce, &given, &bad)) {
    case KV_REF_DIMS_OK: return KV_OK;
    case KV_REF_DIMS_BAD_TAG: return h->error(KV_ERR_INVALID_ARG, "%s: argument 'dim': expected int[] or None", op);
    case KV_REF_DIMS_OUT_OF_RANGE:
        /* wrap_dim words the range error (and always fails here). */
        if (h->wrap_dim(bad, t->ndim, op, "dim") < 0) return h->last_error();
        return h->error(KV_ERR_DIM, "%s: argument 'dim': dimension %lld out of range", op, (long long)bad);
    case KV_REF_DIMS_REPEATED:
        return h->error(KV_ERR_DIM, "%s: argument 'dim': dim %d appears multiple times in the list of dims", op,
                        (int)bad);
    }
    return KV_OK;
}

/* Kept and reduced dims of t as cuda_api.h geometry; the output sizes. */
static void red_geometry(const kv_tensor *t, const red_dims *m, bool keepdim, kvc_reduce_args *a, int64_t *sizes,
                         int *nd) {
    memset(&a->kept, 0, sizeof a->kept);
    memset(&a->reduced, 0, sizeof a->reduced);
    a->kept.offset = t->offset;
    a->nout = a->nred = 1;
    *nd = 0;
    for (int d = 0; d < t->ndim; d++) {
        kvc_geom *g = m->reduce[d] ? &a->reduced : &a->kept;
        g->sizes[g->ndim] = t->sizes[d];
        g->strides[g->ndim++] = t->strides[d];
        if (m->reduce[d]) a->nred *= t->sizes[d];
        else a->nout *= t->sizes[d];
        if (!m->reduce[d]) sizes[(*nd)++] = t->sizes[d];
        else if (keepdim) sizes[(*nd)++] = 1;
    }
}

static kv_status red_launch(const char *op, int kind, const kv_tensor *self, const red_dims *m, bool keepdim,
                            kv_dtype out_dt, kv_stack *stack) {
    const kv_host_api *h = kv_cuda_host;
    const int ic = kv_cuda_dtype_code(self->dtype), oc = kv_cuda_dtype_code(out_dt);
    if (ic < 0 || oc < 0 || (kind == KVC_AMAX && ic != oc))
        return kv_cuda_decline(op, "dtype %s (result %s)", h->dtype_name(self->dtype), h->dtype_name(out_dt));
    kvc_reduce_args a;
    memset(&a, 0, sizeof a);
    int64_t sizes[KV_MAX_DIMS];
    int nd = 0;
    red_geometry(self, m, keepdim, &a, sizes, &nd);
    kv_tensor *out = kv_cuda_empty(sizes, nd, out_dt);
    if (out == NULL) return h->last_error();
    a.op = kind;
    a.in_dtype = ic;
    a.out_dtype = oc;
    a.out = out->storage->data;
    a.in = self->storage->data;
    if (kvc_reduce(&a) != 0) {
        h->tensor_release(out);
        return kv_cuda_device_error(op);
    }
    return kv_cuda_return(stack, out);
}

static kv_status cuda_sum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    static const char *const name = "sum.dim_IntList";
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    red_dims m;
    const kv_status st = red_parse(name, stack, 1, self, &m);
    if (st != KV_OK) return st;
    const kv_dtype out_dt = !kv_arg_is_none(stack, 3) ? kv_arg_dtype(stack, 3)
                            : self->dtype <= KV_I64   ? KV_I64 /* bool and integers sum to i64 */
                                                      : self->dtype;
    return red_launch(name, KVC_SUM, self, &m, kv_arg_bool(stack, 2), out_dt, stack);
}

static bool red_float_or_complex(kv_dtype dt) { return dt >= KV_F16; }

static kv_status cuda_mean(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "mean.dim";
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_dtype out_dt = self->dtype;
    if (!kv_arg_is_none(stack, 3)) {
        out_dt = kv_arg_dtype(stack, 3);
        if (!red_float_or_complex(out_dt))
            return h->error(KV_ERR_DTYPE, "%s: argument 'dtype': could not infer output dtype. Optional dtype must be "
                                          "either a floating point or complex dtype. Got: %s", name, h->dtype_name(out_dt));
    } else if (!red_float_or_complex(out_dt)) {
        return h->error(KV_ERR_DTYPE, "%s: argument 'self': could not infer output dtype. Input dtype must be either a "
                                      "floating point or complex dtype. Got: %s", name, h->dtype_name(out_dt));
    }
    red_dims m;
    const kv_status st = red_parse(name, stack, 1, self, &m);
    if (st != KV_OK) return st;
    return red_launch(name, KVC_MEAN, self, &m, kv_arg_bool(stack, 2), out_dt, stack);
}

static kv_status cuda_amax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_host_api *h = kv_cuda_host;
    static const char *const name = "amax";
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (self->dtype == KV_C64 || self->dtype == KV_C128)
        return h->error(KV_ERR_DTYPE, "%s: argument 'self': dtype %s is not supported (complex values are not ordered)",
                        name, h->dtype_name(self->dtype));
    red_dims m;
    kv_status st = red_parse(name, stack, 1, self, &m);
    if (st != KV_OK) return st;
    int64_t nred = 1;
    for (int d = 0; d < self->ndim; d++)
        if (m.reduce[d]) nred *= self->sizes[d];
    if (nred == 0) {
        const bool dim_given = stack->slots[1].tag == KV_IV_INT ||
                               (stack->slots[1].tag == KV_IV_INT_LIST && stack->slots[1].v.ints.n > 0);
        if (!dim_given)
            return h->error(KV_ERR_INVALID_ARG,
                            "%s: argument 'self': Expected reduction dim to be specified for input.numel() == 0", name);
        for (int d = 0; d < self->ndim; d++)
            if (m.reduce[d] && self->sizes[d] == 0)
                return h->error(KV_ERR_INVALID_ARG, "%s: argument 'dim': Expected reduction dim %d to have non-zero size",
                                name, d);
    }
    return red_launch(name, KVC_AMAX, self, &m, kv_arg_bool(stack, 2), self->dtype, stack);
}

kv_status kv_cuda_register_reduce(kv_key key) {
    kv_status st = kv_cuda_host->register_kernel("sum.dim_IntList", key, cuda_sum);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("mean.dim", key, cuda_mean);
    if (st == KV_OK) st = kv_cuda_host->register_kernel("amax", key, cuda_amax);
    return st;
}
