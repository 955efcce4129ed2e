/* The repeat reference: repeat(Tensor self, SymInt[] repeats).
 *
 * PyTorch's semantics: repeats has at least self.dim() entries (fewer is
 * an error); extra leading entries prepend dims of size 1 to self; the
 * result has sizes padded_self[d] * repeats[d], is a new contiguous
 * tensor (never a view, whatever self's strides: an unfold view with
 * overlapping windows is read element by element), and a zero in repeats
 * gives an empty result. A negative entry is a negative-size error. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

KV_REF_KERNEL(repeat) {
    (void)op;
    (void)ks;
    static const char *const name = "repeat";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_int_list reps = kv_arg_ints(stack, 1);
    kv_status st;
    if ((st = kv_ref_check_cpu(name, "self", self)) != KV_OK) return st;
    if (reps.n < self->ndim)
        return kv_error(KV_ERR_INVALID_ARG,
                        "repeat: argument 'repeats': %d entries for a %d-dim self: the number of repeat dims "
                        "can not be smaller than the number of dims of the tensor",
                        reps.n, self->ndim);
    if (reps.n > KV_MAX_DIMS)
        return kv_error(KV_ERR_INVALID_ARG, "repeat: argument 'repeats': %d entries, at most %d dims are supported",
                        reps.n, KV_MAX_DIMS);
    const int ndim = reps.n, lead = reps.n - self->ndim;
    int64_t in_sizes[KV_MAX_DIMS], out_sizes[KV_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        if (reps.items[d] < 0)
            return kv_error(KV_ERR_NEGATIVE_SIZE, "repeat: argument 'repeats': entry %d is %lld, must be >= 0", d,
                            (long long)reps.items[d]);
        in_sizes[d] = d < lead ? 1 : self->sizes[d - lead];
        out_sizes[d] = in_sizes[d] * reps.items[d];
    }
    kv_tensor *out = kv_ref_new_output(out_sizes, ndim, self->dtype);
    if (out == NULL) return kv_last_error();
    /* Output element (i_0, ..., i_n) reads self at (i_d mod in_sizes[d]),
     * leading dims dropped, through self's own strides. */
    const size_t esize = kv_dtype_size(self->dtype);
    const char *src = (const char *)kv_tensor_data(self);
    kv_ref_iter it;
    kv_tensor *ops[1] = { out };
    if ((st = kv_ref_iter_init(&it, out_sizes, ndim, ops, 1)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    while (kv_ref_iter_next(&it)) {
        int64_t off = 0;
        for (int d = lead; d < ndim; d++) off += (it.index[d] % in_sizes[d]) * self->strides[d - lead];
        kv_ref_convert(self->dtype, it.ptr[0], self->dtype, src + off * (int64_t)esize);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
