/* Copies on oneDNN's reorder primitive (clone, contiguous, copy_,
 * _to_copy) and cat on its concat primitive.
 *
 * A copy within one dtype moves bits: both sides are described as raw
 * words (kv_dnnl_md_raw), so every dtype is supported, NaN payloads and
 * signed zeros included, and any strides (broadcast sources too). A
 * conversion is a typed reorder, taken only where oneDNN rounds exactly as
 * the reference does (once, to nearest even):
 *   bool, u8, i8 -> f32, f16, bf16 (small integers, exact); i32 -> f32
 *   (one rounding).
 * Left out: f32 -> bf16 (the AVX512-BF16 conversion flushes subnormal
 * results to zero), f32/bf16 <-> f16 (oneDNN's f16 conversions turn -0
 * into +0), bf16 -> f32 (-0 comes out +0 on CPUs without AVX512-BF16,
 * e.g. DNNL_MAX_CPU_ISA=AVX2),
 * float -> integer (oneDNN rounds to nearest and
 * saturates; PyTorch truncates and wraps), integer narrowing (saturates
 * vs wraps), i32 -> f16/bf16 (rounds twice, through f32), anything -> bool
 * (PyTorch's "nonzero"), and dtypes oneDNN has no type for.
 * cat concatenates inputs of one dtype (raw words), without zero-size
 * inputs (PyTorch's legacy rule for empty 1-D inputs stays the
 * reference's). */
#include <stdlib.h>
#include <string.h>

#include "onednn/onednn.h"

#include "ref/ref.h" /* KV_REF_LAYOUT_STRIDED, KV_REF_MEMORY_FORMAT_*: the schema's enum values */

#define DT(x) (1u << (x))

/* Whether a typed reorder from -> to rounds as the reference does. */
static bool copy_conversion_ok(kv_dtype from, kv_dtype to) {
    const unsigned small_ints = DT(KV_BOOL) | DT(KV_U8) | DT(KV_I8);
    switch (to) {
    case KV_F32: return (DT(from) & (DT(KV_I32) | small_ints)) != 0;
    case KV_F16: return (DT(from) & small_ints) != 0;
    case KV_BF16: return (DT(from) & small_ints) != 0;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_F64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return false;
}

/* dst <- src element by element, `item` bytes each: the gather for a
 * source whose strides oneDNN cannot describe (overlapping windows). */
static void copy_gather(const char *src, const int64_t *src_strides, const int64_t *sizes, int ndim, size_t item,
                        char *dst, const int64_t *dst_strides) {
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (;;) {
        int64_t so = 0, d_o = 0;
        for (int d = 0; d < ndim; d++) {
            so += idx[d] * src_strides[d];
            d_o += idx[d] * dst_strides[d];
        }
        memcpy(dst + (size_t)d_o * item, src + (size_t)so * item, item);
        int d = ndim - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < sizes[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

/* dst (dtype dt, dst_strides, dst_ptr) <- src seen with src_strides over
 * `sizes`: raw words for one dtype, a typed reorder for a conversion. An
 * overlapping source is gathered first (into dst, or a dense buffer that
 * the reorder then converts). */
static kv_status copy_into(const char *op, const kv_tensor *src, const int64_t *src_strides, const int64_t *sizes,
                           int ndim, kv_dtype dt, const int64_t *dst_strides, void *dst_ptr) {
    kv_tensor seen = *src;
    memcpy(seen.sizes, sizes, sizeof(int64_t) * (size_t)ndim);
    memcpy(seen.strides, src_strides, sizeof(int64_t) * (size_t)ndim);
    seen.ndim = ndim;
    if (kv_dnnl_may_overlap(&seen) && !kv_dnnl_has_broadcast_dim(&seen)) {
        const kv_host_api *h = kv_dnnl_host;
        const size_t item = h->dtype_size(src->dtype);
        if (src->dtype == dt) {
            copy_gather(kv_dnnl_ptr(src), src_strides, sizes, ndim, item, dst_ptr, dst_strides);
            return KV_OK;
        }
        int64_t dense[KV_MAX_DIMS];
        int64_t n = 1;
        for (int d = ndim - 1; d >= 0; d--) {
            dense[d] = n;
            n *= sizes[d] > 1 ? sizes[d] : 1;
        }
        char *tmp = malloc((size_t)n * item);
        if (tmp == NULL) return h->error(KV_ERR_OOM, "%s: out of memory gathering an overlapping source", op);
        copy_gather(kv_dnnl_ptr(src), src_strides, sizes, ndim, item, tmp, dense);
        dnnl_memory_desc_t smd, dmd;
        dnnl_data_type_t sdt, ddt;
        kv_dnnl_dtype(src->dtype, &sdt);
        kv_dnnl_dtype(dt, &ddt);
        kv_status st = kv_dnnl_md(op, sizes, dense, ndim, sdt, &smd);
        if (st == KV_OK) st = kv_dnnl_md(op, sizes, dst_strides, ndim, ddt, &dmd);
        if (st == KV_OK) st = kv_dnnl_reorder(op, &smd, tmp, &dmd, dst_ptr);
        free(tmp);
        return st;
    }
    dnnl_memory_desc_t smd, dmd;
    kv_status st;
    if (src->dtype == dt) {
        st = kv_dnnl_md_raw(op, dt, sizes, src_strides, ndim, &smd);
        if (st == KV_OK) st = kv_dnnl_md_raw(op, dt, sizes, dst_strides, ndim, &dmd);
    } else {
        dnnl_data_type_t sdt, ddt;
        kv_dnnl_dtype(src->dtype, &sdt);
        kv_dnnl_dtype(dt, &ddt);
        st = kv_dnnl_md(op, sizes, src_strides, ndim, sdt, &smd);
        if (st == KV_OK) st = kv_dnnl_md(op, sizes, dst_strides, ndim, ddt, &dmd);
    }
    if (st == KV_OK) st = kv_dnnl_reorder(op, &smd, kv_dnnl_ptr(src), &dmd, dst_ptr);
    return st;
}

/* A new tensor of dtype dt holding self's values: contiguous, or with
 * preserve in the strides memory_format=preserve gives (the reference's
 * rule, kv_tensor_preserve_strides: a dense permutation, so a contiguous
 * block viewed in them). */
static kv_status copy_out(const kv_op *op, kv_stack *stack, const kv_tensor *self, kv_dtype dt, bool preserve) {
    const kv_host_api *h = kv_dnnl_host;
    if (!kv_dnnl_on_device(self)) return kv_dnnl_decline(op, stack, "a self outside oneDNN memory");
    if (self->dtype != dt && !copy_conversion_ok(self->dtype, dt))
        return kv_dnnl_decline(op, stack, "the conversion %s -> %s", h->dtype_name(self->dtype), h->dtype_name(dt));
    kv_tensor *out = kv_dnnl_empty(self->sizes, self->ndim, dt);
    if (out == NULL) return h->last_error();
    if (preserve) {
        int64_t strides[KV_MAX_DIMS];
        kv_tensor_preserve_strides(self, strides);
        kv_tensor *v = h->tensor_view(out, self->sizes, strides, self->ndim, 0);
        h->tensor_release(out);
        if (v == NULL) return h->last_error();
        out = v;
    }
    if (h->tensor_numel(out) > 0) {
        const kv_status st =
            copy_into(h->op_name(op), self, self->strides, self->sizes, self->ndim, dt, out->strides, out->storage->data);
        if (st != KV_OK) {
            h->tensor_release(out);
            return st;
        }
    }
    return kv_dnnl_return(stack, out);
}

static bool copy_memory_format_ok(const kv_stack *stack, int slot, bool allow_preserve) {
    if (kv_arg_is_none(stack, slot)) return true;
    const int64_t mf = kv_arg_int(stack, slot);
    return mf == KV_REF_MEMORY_FORMAT_CONTIGUOUS || (allow_preserve && mf == KV_REF_MEMORY_FORMAT_PRESERVE);
}

static kv_status od_clone(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    if (!copy_memory_format_ok(stack, 1, true)) return kv_dnnl_decline(op, stack, "this memory_format");
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    return copy_out(op, stack, self, self->dtype,
                    kv_arg_is_none(stack, 1) || kv_arg_int(stack, 1) != KV_REF_MEMORY_FORMAT_CONTIGUOUS);
}

/* A contiguous self is returned itself (an alias, as PyTorch does). */
static kv_status od_contiguous(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!copy_memory_format_ok(stack, 1, false) || !kv_dnnl_on_device(self))
        return kv_dnnl_decline(op, stack, "this memory_format or a self outside oneDNN memory");
    if (kv_dnnl_host->tensor_is_contiguous(self)) {
        kv_dnnl_host->tensor_retain(self);
        return kv_dnnl_return(stack, self);
    }
    return copy_out(op, stack, self, self->dtype, false);
}

/* _to_copy(self, dtype, layout, device, pin_memory, non_blocking,
 * memory_format): a copy on this device (device None or ours). */
static kv_status od_to_copy(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    const bool layout_ok = kv_arg_is_none(stack, 2) || kv_arg_int(stack, 2) == KV_REF_LAYOUT_STRIDED;
    bool device_ok = kv_arg_is_none(stack, 3);
    if (!device_ok) {
        const kv_device d = kv_arg_device(stack, 3);
        device_ok = d.type == kv_dnnl_type && d.index == 0;
    }
    const bool pin_ok = kv_arg_is_none(stack, 4) || !kv_arg_bool(stack, 4);
    if (!layout_ok || !device_ok || !pin_ok || !copy_memory_format_ok(stack, 6, true))
        return kv_dnnl_decline(op, stack, "these options (another device, layout, memory format or pinning)");
    return copy_out(op, stack, self, kv_arg_is_none(stack, 1) ? self->dtype : kv_arg_dtype(stack, 1),
                    kv_arg_is_none(stack, 6) || kv_arg_int(stack, 6) != KV_REF_MEMORY_FORMAT_CONTIGUOUS);
}

/* copy_(self, src, non_blocking): src broadcast to self, converted when
 * the dtypes differ. A src over self's own storage is declined (the
 * reference snapshots it first). */
static kv_status od_copy_(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_dnnl_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_tensor *src = kv_arg_tensor(stack, 1);
    int64_t ss[KV_MAX_DIMS];
    if (!kv_dnnl_on_device(self) || !kv_dnnl_on_device(src) || src->storage == self->storage ||
        kv_dnnl_may_overlap(self) || !kv_dnnl_broadcast_strides(src, self->sizes, self->ndim, ss))
        return kv_dnnl_decline(op, stack, "these operands (both in oneDNN memory, src broadcasting to self, no "
                                          "overlap)");
    if (src->dtype != self->dtype && !copy_conversion_ok(src->dtype, self->dtype))
        return kv_dnnl_decline(op, stack, "the conversion %s -> %s", h->dtype_name(src->dtype),
                               h->dtype_name(self->dtype));
    if (h->tensor_numel(self) > 0) {
        const kv_status st =
            copy_into("copy_", src, ss, self->sizes, self->ndim, self->dtype, self->strides, kv_dnnl_ptr(self));
        if (st != KV_OK) return st;
    }
    h->tensor_bump_version(self);
    h->tensor_retain(self);
    return kv_dnnl_return(stack, self);
}

/* ---- cat ---- */

#define CAT_MAX_INPUTS 15 /* kv_dnnl_run_pd's argument table holds 16 */

static kv_status od_cat(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_dnnl_host;
    const kv_tensor_list list = kv_arg_tensors(stack, 0);
    const int64_t dim = kv_arg_int(stack, 1);
    const kv_tensor *t0 = list.n > 0 ? list.items[0] : NULL;
    bool ok = t0 != NULL && list.n <= CAT_MAX_INPUTS && t0->ndim >= 1 && dim >= -t0->ndim && dim < t0->ndim;
    const int d = ok ? (int)(dim < 0 ? dim + t0->ndim : dim) : 0;
    int64_t sizes[KV_MAX_DIMS];
    if (ok) memcpy(sizes, t0->sizes, sizeof(int64_t) * (size_t)t0->ndim);
    if (ok) sizes[d] = 0;
    for (int i = 0; ok && i < list.n; i++) {
        const kv_tensor *t = list.items[i];
        ok = kv_dnnl_on_device(t) && t->dtype == t0->dtype && t->ndim == t0->ndim && h->tensor_numel(t) > 0;
        for (int k = 0; ok && k < t->ndim; k++) ok = k == d || t->sizes[k] == t0->sizes[k];
        if (ok) sizes[d] += t->sizes[d];
    }
    if (!ok)
        return kv_dnnl_decline(op, stack, "these inputs (non-empty, one dtype, in oneDNN memory, matching shapes)");
    kv_tensor *out = kv_dnnl_empty(sizes, t0->ndim, t0->dtype);
    if (out == NULL) return h->last_error();
    dnnl_memory_desc_t mds[CAT_MAX_INPUTS], dmd;
    kv_dnnl_arg args[CAT_MAX_INPUTS + 1];
    kv_status st = KV_OK;
    for (int i = 0; i < list.n && st == KV_OK; i++) {
        const kv_tensor *t = list.items[i];
        st = kv_dnnl_md_raw("cat", t->dtype, t->sizes, t->strides, t->ndim, &mds[i]);
        args[i] = (kv_dnnl_arg){ DNNL_ARG_MULTIPLE_SRC + i, &mds[i], kv_dnnl_ptr(t) };
    }
    if (st == KV_OK) st = kv_dnnl_md_raw("cat", out->dtype, out->sizes, out->strides, out->ndim, &dmd);
    args[list.n] = (kv_dnnl_arg){ DNNL_ARG_DST, &dmd, out->storage->data };
    dnnl_engine_t eng = st == KV_OK ? kv_dnnl_engine() : NULL;
    if (st == KV_OK && eng == NULL) st = h->last_error();
    dnnl_primitive_desc_t pd;
    if (st == KV_OK) {
        const dnnl_status_t ds = dnnl_concat_primitive_desc_create(&pd, &dmd, list.n, d, mds, NULL, eng);
        if (ds == dnnl_unimplemented) st = h->error(KV_ERR_MISSING_KERNEL, "cat: no oneDNN kernel for these layouts");
        else if (ds != dnnl_success) st = kv_dnnl_fail("cat", "dnnl_concat_primitive_desc_create", ds);
    }
    if (st == KV_OK) st = kv_dnnl_run_pd("cat", "concat", pd, args, list.n + 1);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    return kv_dnnl_return(stack, out);
}

static const kv_dnnl_reg copy_kernels[] = {
    { "clone", od_clone }, { "contiguous", od_contiguous }, { "_to_copy", od_to_copy },
    { "copy_", od_copy_ }, { "cat", od_cat },
};

kv_status kv_dnnl_register_copy(kv_key key) {
    return kv_dnnl_register_table(key, copy_kernels, (int)(sizeof copy_kernels / sizeof copy_kernels[0]));
}
