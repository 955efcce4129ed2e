/* The one elementwise driver behind every pointwise reference kernel, and
 * the contiguous-copy helper it (and clone/_to_copy) rely on.
 *
 * Per element: cast each input to the compute dtype (PyTorch casts inputs
 * to the common dtype before computing, so i64 + f32 rounds the i64 to f32
 * first), widen it, call the category's scalar function, store the result
 * into the output's dtype with one rounding. */
#include "ref/ref.h"


kv_ref_vkind kv_ref_vkind_of(kv_dtype compute) {
    switch (kv_dtype_category_of(compute)) {
    case KV_CAT_BOOL:
    case KV_CAT_INT: return KV_REF_VINT;
    case KV_CAT_FLOAT: return KV_REF_VREAL;
    case KV_CAT_COMPLEX: return KV_REF_VCOMPLEX;
    }
    return KV_REF_VINT;
}

kv_ref_val kv_ref_val_of_scalar(kv_scalar s, kv_dtype compute) {
    switch (kv_ref_vkind_of(compute)) {
    case KV_REF_VINT: return kv_ref_val_int(kv_scalar_to_int(s));
    case KV_REF_VREAL: {
        double d = kv_scalar_to_double(s);
        /* PyTorch computes reduced-precision floats in f32 ("opmath"), so
         * their scalars are f32 values too. */
        if (compute != KV_F64) d = (double)(float)d;
        return kv_ref_val_real(d);
    }
    case KV_REF_VCOMPLEX: {
        double re, im;
        kv_scalar_to_complex(s, &re, &im);
        if (compute == KV_C64) {
            re = (double)(float)re;
            im = (double)(float)im;
        }
        return kv_ref_val_complex(re, im);
    }
    }
    return kv_ref_val_int(0);
}

static kv_tensor *ref_copy_into(kv_tensor *out, const kv_tensor *t, kv_dtype dtype);

kv_tensor *kv_ref_copy_to_new(const kv_tensor *t, kv_dtype dtype) {
    return ref_copy_into(kv_ref_new_output(t->sizes, t->ndim, dtype), t, dtype);
}

kv_tensor *kv_ref_copy_preserving(const kv_tensor *t, kv_dtype dtype) {
    int64_t strides[KV_MAX_DIMS];
    kv_tensor_preserve_strides(t, strides);
    return ref_copy_into(kv_tensor_empty_strided(t->sizes, strides, t->ndim, dtype, KV_DEVICE_CPU0), t, dtype);
}

/* t's values converted into the new tensor out (NULL: an error is set). */
static kv_tensor *ref_copy_into(kv_tensor *out, const kv_tensor *t, kv_dtype dtype) {
    if (out == NULL) return NULL;
    kv_tensor *ops[2] = { out, (kv_tensor *)t };
    kv_ref_iter it;
    if (kv_ref_iter_init(&it, t->sizes, t->ndim, ops, 2) != KV_OK) {
        kv_tensor_release(out);
        return NULL;
    }
    while (kv_ref_iter_next(&it)) kv_ref_convert(dtype, it.ptr[0], t->dtype, it.ptr[1]);
    return out;
}

/* True when `in` reads exactly the element `out` writes at every index, so
 * an in-place op can read and write it in one pass. */
static bool ref_same_elements(const kv_tensor *out, const kv_tensor *in) {
    if (in->dtype != out->dtype || in->offset != out->offset) return false;
    int64_t strides[KV_MAX_DIMS];
    if (kv_broadcast_strides(in, out->sizes, out->ndim, strides) != KV_OK) return false;
    for (int d = 0; d < out->ndim; d++)
        if (out->sizes[d] > 1 && strides[d] != out->strides[d]) return false;
    return true;
}

static kv_ref_val ref_load(kv_ref_vkind kind, kv_dtype compute, kv_dtype from, const char *p) {
    /* Large enough and aligned for any element (c128 is the widest). */
    union { double d[2]; int64_t i; char bytes[16]; } tmp;
    if (from != compute) {
        kv_ref_convert(compute, tmp.bytes, from, p);
        p = tmp.bytes;
    }
    switch (kind) {
    case KV_REF_VINT: return kv_ref_val_int(kv_ref_load_i64(compute, p));
    case KV_REF_VREAL: return kv_ref_val_real(kv_ref_load_f64(compute, p));
    case KV_REF_VCOMPLEX: {
        double re, im;
        kv_ref_load_c128(compute, p, &re, &im);
        return kv_ref_val_complex(re, im);
    }
    }
    return kv_ref_val_int(0);
}

static void ref_store(kv_dtype dt, void *p, kv_ref_val v) {
    switch (v.kind) {
    case KV_REF_VINT: kv_ref_store_i64(dt, p, v.i); return;
    case KV_REF_VREAL: kv_ref_store_f64(dt, p, v.re); return;
    case KV_REF_VCOMPLEX: kv_ref_store_c128(dt, p, v.re, v.im); return;
    }
}

kv_status kv_ref_ewise_run(const char *op, const kv_ref_ewise_fns *fns, const void *ctx,
                           kv_dtype compute, kv_tensor *out, kv_tensor *const *inputs, int nin) {
    if (nin < 0 || nin > KV_REF_ITER_MAX_OPS - 1)
        return kv_error(KV_ERR_INTERNAL, "%s: elementwise driver given %d inputs", op, nin);
    const kv_ref_vkind kind = kv_ref_vkind_of(compute);
    kv_ref_scalar_fn fn = NULL;
    switch (kind) {
    case KV_REF_VINT: fn = fns->on_int; break;
    case KV_REF_VREAL: fn = fns->on_real; break;
    case KV_REF_VCOMPLEX: fn = fns->on_complex; break;
    }
    if (fn == NULL)
        return kv_error(KV_ERR_DTYPE, "%s: dtype %s is not supported", op, kv_dtype_name(compute));

    kv_tensor *ops[KV_REF_ITER_MAX_OPS] = { out };
    kv_tensor *owned[KV_REF_ITER_MAX_OPS] = { NULL };
    for (int k = 0; k < nin; k++) {
        ops[k + 1] = inputs[k];
        if (inputs[k]->storage == out->storage && !ref_same_elements(out, inputs[k])) {
            owned[k] = kv_ref_copy_to_new(inputs[k], inputs[k]->dtype);
            if (owned[k] == NULL) {
                for (int j = 0; j < k; j++) kv_tensor_release(owned[j]);
                return kv_last_error() != KV_OK ? kv_last_error() : KV_ERR_OOM;
            }
            ops[k + 1] = owned[k];
        }
    }
    kv_ref_iter it;
    kv_status st = kv_ref_iter_init(&it, out->sizes, out->ndim, ops, nin + 1);
    if (st == KV_OK) {
        kv_ref_val x[KV_REF_ITER_MAX_OPS];
        kv_dtype dts[KV_REF_ITER_MAX_OPS];
        for (int k = 0; k < nin; k++) dts[k] = ops[k + 1]->dtype;
        while (kv_ref_iter_next(&it)) {
            for (int k = 0; k < nin; k++) x[k] = ref_load(kind, compute, dts[k], it.ptr[k + 1]);
            ref_store(out->dtype, it.ptr[0], fn(x, ctx));
        }
    }
    for (int k = 0; k < nin; k++) kv_tensor_release(owned[k]);
    return st;
}
