/* The "direct" variants of masked_fill.Scalar and masked_fill_.Scalar.
 *
 * The reference converts every element through its generic iterator;
 * these store the value's bytes once (kv_ref_store_scalar, the
 * reference's own conversion) and copy them where the mask is set, with
 * a flat loop when self and mask are contiguous and of one shape. No
 * arithmetic: bitwise. Error cases (a mask that is not bool, a value that
 * does not fit, shapes that do not broadcast, an in-place self with
 * internal overlap or sharing the mask's storage) are left to the
 * reference by the predicate. */
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"
#include "ref/ref.h"

/* The broadcast shape of self and mask, or false. */
static bool mf_shape(const kv_tensor *a, const kv_tensor *b, int64_t *sizes, int *nd) {
    const int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < n; d++) {
        const int da = d - (n - a->ndim), db = d - (n - b->ndim);
        const int64_t sa = da >= 0 ? a->sizes[da] : 1, sb = db >= 0 ? b->sizes[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) return false;
        sizes[d] = sa == 1 ? sb : sa;
    }
    *nd = n;
    return true;
}

bool kv_cpu_masked_fill_pred(const kv_op *op, const kv_stack *s) {
    const int id = kv_op_builtin_id(op);
    if ((id != KV_OP_MASKED_FILL_SCALAR && id != KV_OP_MASKED_FILL__SCALAR) || s->size < 3) return false;
    if (s->slots[0].tag != KV_IV_TENSOR || s->slots[1].tag != KV_IV_TENSOR || s->slots[2].tag != KV_IV_SCALAR)
        return false;
    const kv_tensor *self = s->slots[0].v.tensor, *mask = s->slots[1].v.tensor;
    if (!kv_cpu_plain(self) || !kv_cpu_plain(mask) || mask->dtype != KV_BOOL) return false;
    if (!kv_cpu_scalar_fits(s->slots[2].v.scalar, self->dtype)) return false;
    int64_t sizes[KV_MAX_DIMS];
    int nd = 0;
    if (!mf_shape(self, mask, sizes, &nd)) return false;
    if (id == KV_OP_MASKED_FILL_SCALAR) return true;
    if (nd != self->ndim || kv_cpu_same_storage(self, mask)) return false;
    for (int d = 0; d < nd; d++)
        if (sizes[d] != self->sizes[d]) return false;
    return kv_tensor_internal_overlap(self, NULL) == KV_OVERLAP_NO;
}

/* out[i] = mask[i] ? elem : src[i]; src NULL: out is written in place. */
static void mf_apply(kv_tensor *out, const kv_tensor *src, const kv_tensor *mask, const char *elem) {
    const int64_t n = kv_tensor_numel(out);
    if (n == 0) return;
    const size_t es = kv_dtype_size(out->dtype);
    char *o = kv_tensor_data(out);
    const char *sp = src ? kv_tensor_data(src) : NULL;
    const bool *m = kv_tensor_data(mask);
    if (kv_cpu_contig(out) && kv_cpu_contig(mask) && kv_tensor_numel(mask) == n &&
        (src == NULL || (kv_cpu_contig(src) && kv_tensor_numel(src) == n))) {
        for (int64_t i = 0; i < n; i++) {
            if (m[i]) memcpy(o + (size_t)i * es, elem, es);
            else if (sp) memcpy(o + (size_t)i * es, sp + (size_t)i * es, es);
        }
        return;
    }
    int64_t mst[KV_MAX_DIMS], sst[KV_MAX_DIMS];
    kv_broadcast_strides(mask, out->sizes, out->ndim, mst);
    if (src) kv_broadcast_strides(src, out->sizes, out->ndim, sst);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        int64_t oo = 0, mo = 0, so = 0;
        for (int d = 0; d < out->ndim; d++) {
            oo += idx[d] * out->strides[d];
            mo += idx[d] * mst[d];
            if (src) so += idx[d] * sst[d];
        }
        if (m[mo]) memcpy(o + oo * (int64_t)es, elem, es);
        else if (src) memcpy(o + oo * (int64_t)es, sp + so * (int64_t)es, es);
        for (int d = out->ndim - 1; d >= 0; d--) {
            if (++idx[d] < out->sizes[d]) break;
            idx[d] = 0;
        }
    }
}

kv_status kv_cpu_masked_fill_kernel(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)ks;
    if (!kv_cpu_masked_fill_pred(op, s))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the direct variant does not cover this call", kv_op_name(op));
    kv_tensor *self = s->slots[0].v.tensor;
    const kv_tensor *mask = s->slots[1].v.tensor;
    union { double d[2]; char b[16]; } elem;
    kv_ref_store_scalar(self->dtype, elem.b, s->slots[2].v.scalar);
    if (kv_op_builtin_id(op) == KV_OP_MASKED_FILL__SCALAR) {
        mf_apply(self, NULL, mask, elem.b);
        kv_tensor_bump_version(self);
        kv_tensor_retain(self);
        kv_stack_return_tensor(s, self);
        return KV_OK;
    }
    int64_t sizes[KV_MAX_DIMS];
    int nd = 0;
    mf_shape(self, mask, sizes, &nd);
    kv_tensor *out = kv_cpu_new(sizes, nd, self->dtype);
    if (out == NULL) return kv_last_error();
    mf_apply(out, self, mask, elem.b);
    kv_stack_return_tensor(s, out);
    return KV_OK;
}
