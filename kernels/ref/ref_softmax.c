/* Reference _softmax and _log_softmax.
 *
 * Each slice along `dim` is computed in f64, elements in index order:
 *   m = max(x) (NaN propagates), e_i = exp(x_i - m), s = sum of e_i
 *   (i ascending), softmax_i = e_i / s, log_softmax_i = (x_i - m) - log(s),
 * each result rounded once on store. A slice of all -inf has m = -inf and
 * x - m = NaN, so it gives NaN, as in PyTorch. A 0-dim input is a slice of
 * one element (dim 0 or -1). Floating dtypes only; half_to_float=true is
 * refused, as PyTorch's CPU kernels refuse it. */
#include "ref/ref.h"
#include "ref/ref_shared.h"
#include "ref/ref_kernels.h"

#include <math.h>
#include <stdlib.h>

static kv_status sm_kernel(const char *name, const char *plain, kv_stack *stack, bool log_form) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!self) return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'self': expected a tensor, got None", name);
    kv_status st = kv_ref_check_cpu(name, "self", self);
    if (st == KV_OK) st = kv_ref_check_dtype(name, "self", self->dtype, KV_DTYPES_FLOATING);
    if (st != KV_OK) return st;
    const int dim = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, name, "dim");
    if (dim < 0) return kv_last_error();
    if (kv_arg_bool(stack, 2))
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'half_to_float': %s with half to float conversion is not supported on CPU",
                        name, plain);

    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, self->dtype);
    if (!out) {
        st = kv_last_error();
        return st != KV_OK ? st : kv_error(KV_ERR_OOM, "%s: could not allocate the result", name);
    }
    const int nd = self->ndim;
    const int64_t len = nd ? self->sizes[dim] : 1;
    const int64_t in_stride = nd ? self->strides[dim] : 0;
    const int64_t out_stride = nd ? out->strides[dim] : 0;
    int64_t nslices = 1;
    for (int d = 0; d < nd; d++)
        if (d != dim) nslices *= self->sizes[d];
    if (len == 0) nslices = 0;

    double *x = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
    if (!x) {
        kv_tensor_release(out);
        return kv_error(KV_ERR_OOM, "%s: no memory for a slice of %lld elements", name, (long long)len);
    }
    const kv_dtype dt = self->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    const char *src = kv_tensor_data(self);
    char *dst = kv_tensor_data(out);
    for (int64_t s = 0; s < nslices; s++) {
        const char *in = src + kv_ref_linear_offset(s, nd, self->sizes, self->strides, dim) * es;
        char *o = dst + kv_ref_linear_offset(s, nd, out->sizes, out->strides, dim) * es;
        double m = -INFINITY;
        for (int64_t i = 0; i < len; i++) {
            x[i] = kv_ref_load_f64(dt, in + i * in_stride * es);
            if (isnan(x[i]) || x[i] > m) m = isnan(m) ? m : x[i];
        }
        double sum = 0.0;
        for (int64_t i = 0; i < len; i++) sum += exp(x[i] - m);
        const double log_sum = log(sum);
        for (int64_t i = 0; i < len; i++) {
            const double v = log_form ? (x[i] - m) - log_sum : exp(x[i] - m) / sum;
            kv_ref_store_f64(dt, o + i * out_stride * es, v);
        }
    }
    free(x);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(_softmax) {
    (void)op;
    (void)ks;
    return sm_kernel("_softmax", "softmax", stack, false);
}

KV_REF_KERNEL(_log_softmax) {
    (void)op;
    (void)ks;
    return sm_kernel("_log_softmax", "log_softmax", stack, true);
}
