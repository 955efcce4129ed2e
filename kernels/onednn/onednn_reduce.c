/* Reductions on oneDNN's reduction primitive: sum.dim_IntList, mean.dim,
 * prod.dim_int (reduction_sum/mean/mul) and amax (reduction_max).
 *
 * Dtypes: sum, mean and prod take f32 and bf16 (oneDNN accumulates in f32
 * and rounds once, inside the table's gamma_n bounds, which also allow a
 * subnormal flushed on a bf16 store); amax takes s8, u8 and bool, whose
 * maxima are exact. Left out:
 *   - integer sums and products: PyTorch returns i64, which oneDNN has no
 *     type for; a dtype= override (a conversion first) is declined;
 *   - amax on floats: reduction_max does not propagate NaN (PyTorch does);
 *   - zero-size inputs (the empty sum/product): declined rather than
 *     special-cased. */
#include <string.h>

#include "onednn/onednn.h"

#define DT(x) (1u << (x))

typedef struct reduce_spec {
    const char *op;
    dnnl_alg_kind_t alg;
    unsigned dtypes;
} reduce_spec;

/* Fills reduced[d] for the dims the call names (NULL list: all). false on
 * a dim out of range or named twice: the reference's errors. */
static bool reduce_dims(const kv_tensor *self, const int64_t *dims, int ndims, bool all, bool *reduced) {
    const int nd = self->ndim > 0 ? self->ndim : 1;
    for (int d = 0; d < KV_MAX_DIMS; d++) reduced[d] = all;
    if (all) return true;
    for (int i = 0; i < ndims; i++) {
        int64_t d = dims[i];
        if (d < -nd || d >= nd) return false;
        if (d < 0) d += nd;
        if (reduced[d]) return false;
        reduced[d] = true;
    }
    return true;
}

static kv_status reduce_run(const reduce_spec *s, const kv_op *op, kv_stack *stack, const int64_t *dims, int ndims,
                            bool all, bool keepdim, bool has_dtype) {
    const kv_host_api *h = kv_dnnl_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    dnnl_data_type_t dt;
    if (!kv_dnnl_on_device(self) || !(s->dtypes & DT(self->dtype)) || has_dtype || !kv_dnnl_dtype(self->dtype, &dt))
        return kv_dnnl_decline(op, stack, "dtype %s%s", h->dtype_name(self->dtype),
                               has_dtype ? " with a dtype= conversion" : "");
    bool reduced[KV_MAX_DIMS];
    if (!reduce_dims(self, dims, ndims, all, reduced)) return kv_dnnl_decline(op, stack, "these dims");
    if (h->tensor_numel(self) == 0) return kv_dnnl_decline(op, stack, "a zero-size input");
    /* The result's sizes (keepdim or squeezed) and, for oneDNN, the same
     * memory as keepdim-shaped dims. */
    int64_t kept[KV_MAX_DIMS], out_sizes[KV_MAX_DIMS];
    int nout = 0;
    bool any = false;
    for (int d = 0; d < self->ndim; d++) {
        kept[d] = reduced[d] ? 1 : self->sizes[d];
        any = any || (reduced[d] && self->sizes[d] != 1);
        if (!reduced[d] || keepdim) out_sizes[nout++] = kept[d];
    }
    kv_tensor *out = kv_dnnl_empty(out_sizes, nout, self->dtype);
    if (out == NULL) return h->last_error();
    kv_status st;
    if (!any) {
        /* Nothing is summed (every reduced dim has size 1): each output is
         * its one input element, for sum, mean, prod and max alike. */
        st = kv_dnnl_copy_dense(s->op, self, out->storage->data);
    } else {
        dnnl_memory_desc_t src, dst;
        st = kv_dnnl_md_of(s->op, self, dt, &src);
        if (st == KV_OK) st = kv_dnnl_md_dense(s->op, kept, self->ndim, dt, &dst);
        dnnl_reduction_desc_t rd;
        if (st == KV_OK && dnnl_reduction_desc_init(&rd, s->alg, &src, &dst, 0.f, 0.f) != dnnl_success)
            st = h->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for this reduction", s->op);
        const kv_dnnl_arg args[2] = { { DNNL_ARG_SRC, &src, kv_dnnl_ptr(self) },
                                      { DNNL_ARG_DST, &dst, out->storage->data } };
        if (st == KV_OK) st = kv_dnnl_run(s->op, "reduction", &rd, NULL, args, 2);
    }
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    return kv_dnnl_return(stack, out);
}

/* sum.dim_IntList / mean.dim: (self, int[1]? dim, bool keepdim, ScalarType? dtype). */
static kv_status reduce_dim_list(const reduce_spec *s, const kv_op *op, kv_stack *stack) {
    const bool all = kv_arg_is_none(stack, 1) || kv_arg_ints(stack, 1).n == 0;
    const kv_int_list dims = all ? (kv_int_list){ NULL, 0 } : kv_arg_ints(stack, 1);
    return reduce_run(s, op, stack, dims.items, dims.n, all, kv_arg_bool(stack, 2), !kv_arg_is_none(stack, 3));
}

static kv_status od_sum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    static const reduce_spec spec = { "sum.dim_IntList", dnnl_reduction_sum, DT(KV_F32) | DT(KV_BF16) };
    return reduce_dim_list(&spec, op, stack);
}

static kv_status od_mean(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    static const reduce_spec spec = { "mean.dim", dnnl_reduction_mean, DT(KV_F32) | DT(KV_BF16) };
    return reduce_dim_list(&spec, op, stack);
}

/* amax(self, int[1] dim=[], bool keepdim): an empty list reduces all. */
static kv_status od_amax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    static const reduce_spec spec = { "amax", dnnl_reduction_max, DT(KV_I8) | DT(KV_U8) | DT(KV_BOOL) };
    const kv_int_list dims = kv_arg_ints(stack, 1);
    return reduce_run(&spec, op, stack, dims.items, dims.n, dims.n == 0, kv_arg_bool(stack, 2), false);
}

/* prod.dim_int(self, int dim, bool keepdim, ScalarType? dtype). */
static kv_status od_prod(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    static const reduce_spec spec = { "prod.dim_int", dnnl_reduction_mul, DT(KV_F32) | DT(KV_BF16) };
    const int64_t dim = kv_arg_int(stack, 1);
    return reduce_run(&spec, op, stack, &dim, 1, false, kv_arg_bool(stack, 2), !kv_arg_is_none(stack, 3));
}

static const kv_dnnl_reg reduce_kernels[] = {
    { "sum.dim_IntList", od_sum },
    { "mean.dim", od_mean },
    { "amax", od_amax },
    { "prod.dim_int", od_prod },
};

kv_status kv_dnnl_register_reduce(kv_key key) {
    return kv_dnnl_register_table(key, reduce_kernels, (int)(sizeof reduce_kernels / sizeof reduce_kernels[0]));
}
