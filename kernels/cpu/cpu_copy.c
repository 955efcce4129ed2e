/* "direct" variants of the ops that move or fill memory: fill_, zero_,
 * copy_, clone, contiguous, _to_copy, the factories (empty, zeros, ones,
 * full, arange, _efficientzerotensor), cat, stack, index_select and
 * embedding.
 *
 * The reference moves one element at a time through its generic iterator
 * and dtype conversion; these copy whole rows with memcpy (inner dims
 * coalesced by kv_cpu_copy_strided), fill by doubling memcpy, and gather
 * rows by index. They never convert between dtypes (a dtype change goes
 * to the reference), so every result is the same bytes: bitwise. Error
 * cases, aliasing between source and destination, and cat's legacy empty
 * inputs are left to the reference by the predicates. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"
#include "ref/ref.h"

/* ---- helpers ---- */

static bool cp_tensor(const kv_stack *s, int i, const kv_tensor **out) {
    if (i >= s->size || s->slots[i].tag != KV_IV_TENSOR) return false;
    *out = s->slots[i].v.tensor;
    return kv_cpu_plain(*out);
}

static bool cp_none_or_int(const kv_stack *s, int i, int64_t want) {
    return i < s->size && (s->slots[i].tag == KV_IV_NONE || (s->slots[i].tag == KV_IV_INT && s->slots[i].v.i == want));
}

/* The reference's tensor options, valid values only. */
static bool cp_options(const kv_stack *s, int layout, int device, int pin) {
    if (layout >= 0 && !cp_none_or_int(s, layout, KV_REF_LAYOUT_STRIDED)) return false;
    if (device >= 0 && s->slots[device].tag != KV_IV_NONE &&
        (s->slots[device].tag != KV_IV_DEVICE || s->slots[device].v.device.type != KV_DEVICE_CPU ||
         s->slots[device].v.device.index > 0))
        return false;
    if (pin >= 0 && s->slots[pin].tag != KV_IV_NONE && (s->slots[pin].tag != KV_IV_BOOL || s->slots[pin].v.b))
        return false;
    return true;
}

static bool cp_memory_format(const kv_stack *s, int slot, bool allow_preserve) {
    if (slot >= s->size) return false;
    if (s->slots[slot].tag == KV_IV_NONE) return true;
    if (s->slots[slot].tag != KV_IV_INT) return false;
    const int64_t mf = s->slots[slot].v.i;
    return mf == KV_REF_MEMORY_FORMAT_CONTIGUOUS || (allow_preserve && mf == KV_REF_MEMORY_FORMAT_PRESERVE);
}

static double cp_float_max(kv_dtype dt) {
    switch (kv_dtype_to_real(dt)) {
    case KV_F16: return 65504.0;
    case KV_BF16: return 3.3895313892515355e38;
    case KV_F32: return (double)FLT_MAX;
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
    return DBL_MAX;
}

bool kv_cpu_scalar_fits(kv_scalar s, kv_dtype dt) {
    if (dt == KV_BOOL || s.kind == KV_SCALAR_BOOL) return true;
    double re, im;
    kv_scalar_to_complex(s, &re, &im);
    if (kv_dtype_is_complex(dt)) {
        if (s.kind == KV_SCALAR_INT) return true;
        const double m = cp_float_max(dt);
        return !(isfinite(re) && fabs(re) > m) && !(isfinite(im) && fabs(im) > m);
    }
    if (s.kind == KV_SCALAR_COMPLEX && im != 0.0) return false;
    if (kv_dtype_is_floating(dt)) {
        if (s.kind == KV_SCALAR_INT) return fabs((double)s.v.i) <= cp_float_max(dt);
        return !(isfinite(re) && fabs(re) > cp_float_max(dt));
    }
    /* Integers: only plain in-range integers (the unsigned wrap rules and
     * float-to-int conversions are the reference's). */
    if (s.kind != KV_SCALAR_INT) return false;
    const int64_t v = s.v.i;
    switch (dt) {
    case KV_U8: return v >= 0 && v <= UINT8_MAX;
    case KV_I8: return v >= INT8_MIN && v <= INT8_MAX;
    case KV_I16: return v >= INT16_MIN && v <= INT16_MAX;
    case KV_I32: return v >= INT32_MIN && v <= INT32_MAX;
    case KV_I64: return true;
    case KV_BOOL:
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return false;
}

/* Fills n elements of esize bytes at p with one element, by doubling. */
static void cp_fill_run(char *p, int64_t n, const void *elem, size_t esize) {
    if (n <= 0) return;
    memcpy(p, elem, esize);
    size_t done = esize, total = (size_t)n * esize;
    while (done < total) {
        const size_t k = done < total - done ? done : total - done;
        memcpy(p + done, p, k);
        done += k;
    }
}

/* Fills every element of t (any strides) with elem. */
static void cp_fill(kv_tensor *t, const void *elem) {
    const size_t es = kv_dtype_size(t->dtype);
    const int64_t n = kv_tensor_numel(t);
    if (n == 0) return;
    char *base = kv_tensor_data(t);
    if (kv_cpu_contig(t)) {
        cp_fill_run(base, n, elem, es);
        return;
    }
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        memcpy(base + off * (int64_t)es, elem, es);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
}

static bool cp_sizes(const kv_stack *s, int slot, int64_t *sizes, int *nd) {
    if (slot >= s->size || s->slots[slot].tag != KV_IV_INT_LIST) return false;
    const kv_int_list l = s->slots[slot].v.ints;
    if (l.n > KV_MAX_DIMS) return false;
    for (int d = 0; d < l.n; d++) {
        if (l.items[d] < 0) return false;
        sizes[d] = l.items[d];
    }
    *nd = l.n;
    return true;
}

static bool cp_opt_dtype(const kv_stack *s, int slot, kv_dtype dflt, kv_dtype *out) {
    if (slot >= s->size) return false;
    if (s->slots[slot].tag == KV_IV_NONE) *out = dflt;
    else if (s->slots[slot].tag == KV_IV_DTYPE) *out = s->slots[slot].v.dtype;
    else return false;
    return true;
}

/* Every index of t (i32/i64, any strides) in [0, limit), read row-major
 * into out (NULL: only check). */
static bool cp_indices(const kv_tensor *t, int64_t limit, int64_t *out) {
    if (t->dtype != KV_I32 && t->dtype != KV_I64) return false;
    const int64_t n = kv_tensor_numel(t);
    const char *base = kv_tensor_data(t);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        const int64_t v = t->dtype == KV_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
        if (v < 0 || v >= limit) return false;
        if (out) out[k] = v;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
    return true;
}

/* ---- analysis: false leaves the call to the reference ---- */

static bool cp_cat_ok(const kv_stack *s, int *dim_out) {
    if (s->size < 2 || s->slots[0].tag != KV_IV_TENSOR_LIST || s->slots[1].tag != KV_IV_INT) return false;
    const kv_tensor_list l = s->slots[0].v.tensors;
    if (l.n <= 0) return false;
    const kv_tensor *t0 = l.items[0];
    if (t0->ndim == 0) return false;
    int64_t d = s->slots[1].v.i;
    if (d < -t0->ndim || d >= t0->ndim) return false;
    if (d < 0) d += t0->ndim;
    for (int i = 0; i < l.n; i++) {
        const kv_tensor *t = l.items[i];
        if (!kv_cpu_plain(t) || t->dtype != t0->dtype || t->ndim != t0->ndim) return false;
        if (t->ndim == 1 && t->sizes[0] == 0) return false; /* legacy empty input: the reference's rule */
        for (int k = 0; k < t->ndim; k++)
            if (k != d && t->sizes[k] != t0->sizes[k]) return false;
    }
    *dim_out = (int)d;
    return true;
}

static bool cp_stack_ok(const kv_stack *s, int *dim_out) {
    if (s->size < 2 || s->slots[0].tag != KV_IV_TENSOR_LIST || s->slots[1].tag != KV_IV_INT) return false;
    const kv_tensor_list l = s->slots[0].v.tensors;
    if (l.n <= 0) return false;
    const kv_tensor *t0 = l.items[0];
    const int nd = t0->ndim + 1;
    if (nd > KV_MAX_DIMS) return false;
    int64_t d = s->slots[1].v.i;
    if (d < -nd || d >= nd) return false;
    if (d < 0) d += nd;
    for (int i = 0; i < l.n; i++)
        if (!kv_cpu_plain(l.items[i]) || l.items[i]->dtype != t0->dtype || !kv_same_shape(t0, l.items[i])) return false;
    *dim_out = (int)d;
    return true;
}

bool kv_cpu_copy_pred(const kv_op *op, const kv_stack *s) {
    const kv_tensor *a, *b;
    int64_t sizes[KV_MAX_DIMS];
    int nd, dim;
    kv_dtype dt;
    switch (kv_op_builtin_id(op)) {
    case KV_OP_FILL__SCALAR:
        return cp_tensor(s, 0, &a) && s->size >= 2 && s->slots[1].tag == KV_IV_SCALAR &&
               kv_cpu_scalar_fits(s->slots[1].v.scalar, a->dtype);
    case KV_OP_ZERO_: return cp_tensor(s, 0, &a);
    case KV_OP_COPY_: {
        if (!cp_tensor(s, 0, &a) || !cp_tensor(s, 1, &b) || a->dtype != b->dtype || a->storage == b->storage) return false;
        int64_t st[KV_MAX_DIMS];
        if (kv_broadcast_strides(b, a->sizes, a->ndim, st) != KV_OK) {
            kv_error_clear();
            return false;
        }
        return kv_tensor_internal_overlap(a, NULL) == KV_OVERLAP_NO;
    }
    case KV_OP_CLONE: return cp_tensor(s, 0, &a) && cp_memory_format(s, 1, true);
    case KV_OP_CONTIGUOUS: return cp_tensor(s, 0, &a) && s->size >= 2 && s->slots[1].tag == KV_IV_INT &&
                                  s->slots[1].v.i == KV_REF_MEMORY_FORMAT_CONTIGUOUS;
    case KV_OP__TO_COPY:
        return cp_tensor(s, 0, &a) && s->size >= 7 && cp_opt_dtype(s, 1, a->dtype, &dt) && dt == a->dtype &&
               cp_options(s, 2, 3, 4) && cp_memory_format(s, 6, true);
    case KV_OP_EMPTY_MEMORY_FORMAT:
        return s->size >= 6 && cp_sizes(s, 0, sizes, &nd) && cp_opt_dtype(s, 1, KV_F32, &dt) && cp_options(s, 2, 3, 4) &&
               cp_memory_format(s, 5, false);
    case KV_OP_ZEROS:
    case KV_OP_ONES:
    case KV_OP__EFFICIENTZEROTENSOR:
        return s->size >= 5 && cp_sizes(s, 0, sizes, &nd) && cp_opt_dtype(s, 1, KV_F32, &dt) && cp_options(s, 2, 3, 4);
    case KV_OP_FULL: {
        if (s->size < 6 || s->slots[1].tag != KV_IV_SCALAR || !cp_sizes(s, 0, sizes, &nd)) return false;
        const kv_scalar v = s->slots[1].v.scalar;
        const kv_dtype inferred = v.kind == KV_SCALAR_BOOL ? KV_BOOL
                                  : v.kind == KV_SCALAR_INT ? KV_I64
                                  : v.kind == KV_SCALAR_DOUBLE ? KV_F32
                                                               : KV_C64;
        return cp_opt_dtype(s, 2, inferred, &dt) && cp_options(s, 3, 4, 5) && kv_cpu_scalar_fits(v, dt);
    }
    case KV_OP_ARANGE: {
        if (s->size < 5 || s->slots[0].tag != KV_IV_SCALAR) return false;
        const kv_scalar e = s->slots[0].v.scalar;
        if (e.kind != KV_SCALAR_INT) return false; /* float ends, bool and complex: the reference's */
        if (e.v.i < 0 || e.v.i > ((int64_t)1 << 53)) return false;
        if (!cp_opt_dtype(s, 1, KV_I64, &dt) || !cp_options(s, 2, 3, 4)) return false;
        return dt == KV_F32 || dt == KV_F64 || dt == KV_I32 || dt == KV_I64;
    }
    case KV_OP_CAT: return cp_cat_ok(s, &dim);
    case KV_OP_STACK: return cp_stack_ok(s, &dim);
    case KV_OP_INDEX_SELECT: {
        int64_t d;
        if (!cp_tensor(s, 0, &a) || !cp_tensor(s, 2, &b) || s->slots[1].tag != KV_IV_INT) return false;
        if (a->ndim == 0 || b->ndim > 1) return false;
        d = s->slots[1].v.i;
        if (d < -a->ndim || d >= a->ndim) return false;
        if (d < 0) d += a->ndim;
        return cp_indices(b, a->sizes[d], NULL);
    }
    case KV_OP_EMBEDDING: {
        if (!cp_tensor(s, 0, &a) || !cp_tensor(s, 1, &b) || s->size < 3 || s->slots[2].tag != KV_IV_INT) return false;
        if (a->ndim != 2 || b->ndim + 1 > KV_MAX_DIMS) return false;
        const int64_t pad = s->slots[2].v.i, rows = a->sizes[0];
        if (pad != -1 && (pad >= rows || pad < -rows)) return false;
        return cp_indices(b, rows, NULL);
    }
    default: return false;
    }
}

/* ---- kernels ---- */

static kv_status cp_return_self(kv_stack *stack, kv_tensor *self) {
    kv_tensor_bump_version(self);
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}

static kv_status cp_return_new(kv_stack *stack, kv_tensor *out) {
    if (out == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

static kv_tensor *cp_copy_of(const kv_tensor *t) {
    kv_tensor *out = kv_cpu_new(t->sizes, t->ndim, t->dtype);
    if (out != NULL) kv_cpu_gather(t, kv_tensor_data(out));
    return out;
}

/* clone/_to_copy with memory_format=preserve (or None): the strides
 * kv_tensor_preserve_strides gives, as the reference (kernels/ref). */
static kv_tensor *cp_copy_preserving(const kv_tensor *t) {
    int64_t strides[KV_MAX_DIMS], rowmajor[KV_MAX_DIMS];
    kv_tensor_preserve_strides(t, strides);
    kv_contiguous_strides(t->sizes, t->ndim, rowmajor);
    if (memcmp(strides, rowmajor, sizeof(int64_t) * (size_t)t->ndim) == 0) return cp_copy_of(t);
    kv_tensor *out = kv_tensor_empty_strided(t->sizes, strides, t->ndim, t->dtype, KV_DEVICE_CPU0);
    if (out != NULL && kv_tensor_numel(t) > 0)
        kv_cpu_copy_strided(kv_tensor_data(out), strides, kv_tensor_data(t), t->strides, t->sizes, t->ndim,
                            kv_dtype_size(t->dtype));
    return out;
}

/* Copies src (its own strides) into out at element offset `at`, through
 * out strides `ost`. */
static void cp_region(kv_tensor *out, const int64_t *ost, int64_t at, const kv_tensor *src) {
    if (kv_tensor_numel(src) == 0) return;
    const size_t es = kv_dtype_size(src->dtype);
    kv_cpu_copy_strided((char *)kv_tensor_data(out) + at * (int64_t)es, ost, kv_tensor_data(src), src->strides,
                        src->sizes, src->ndim, es);
}

static kv_status cp_gather_rows(kv_stack *stack, const kv_tensor *self, int dim, const kv_tensor *index,
                                const int64_t *out_sizes, int out_nd) {
    const int64_t n = kv_tensor_numel(index);
    int64_t *idx = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (idx == NULL) return kv_error(KV_ERR_OOM, "index_select: no memory for %lld indices", (long long)n);
    cp_indices(index, self->sizes[dim], idx);
    kv_tensor *out = kv_cpu_new(out_sizes, out_nd, self->dtype);
    if (out == NULL) {
        free(idx);
        return kv_last_error();
    }
    if (kv_tensor_numel(out) > 0) {
        /* out.select(dim, j) = self.select(dim, idx[j]) for every j. */
        int64_t sizes[KV_MAX_DIMS], sst[KV_MAX_DIMS], ost[KV_MAX_DIMS];
        int k = 0;
        for (int d = 0; d < self->ndim; d++) {
            if (d == dim) continue;
            sizes[k] = self->sizes[d];
            sst[k] = self->strides[d];
            ost[k++] = out->strides[d];
        }
        const size_t es = kv_dtype_size(self->dtype);
        const char *src = kv_tensor_data(self);
        char *dst = kv_tensor_data(out);
        for (int64_t j = 0; j < n; j++)
            kv_cpu_copy_strided(dst + j * out->strides[dim] * (int64_t)es, ost,
                                src + idx[j] * self->strides[dim] * (int64_t)es, sst, sizes, k, es);
    }
    free(idx);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

kv_status kv_cpu_copy_kernel(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)ks;
    if (!kv_cpu_copy_pred(op, s))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the direct variant does not cover this call", kv_op_name(op));
    const int id = kv_op_builtin_id(op);
    kv_tensor *self = s->slots[0].tag == KV_IV_TENSOR ? s->slots[0].v.tensor : NULL;
    union { double d[2]; char b[16]; } elem;
    int64_t sizes[KV_MAX_DIMS];
    int nd = 0, dim = 0;
    kv_dtype dt = KV_F32;
    switch (id) {
    case KV_OP_FILL__SCALAR:
        kv_ref_store_scalar(self->dtype, elem.b, s->slots[1].v.scalar);
        cp_fill(self, elem.b);
        return cp_return_self(s, self);
    case KV_OP_ZERO_:
        memset(elem.b, 0, sizeof elem.b);
        cp_fill(self, elem.b);
        return cp_return_self(s, self);
    case KV_OP_COPY_: {
        const kv_tensor *src = s->slots[1].v.tensor;
        int64_t st[KV_MAX_DIMS];
        kv_broadcast_strides(src, self->sizes, self->ndim, st);
        if (kv_tensor_numel(self) > 0) {
            const size_t es = kv_dtype_size(self->dtype);
            kv_cpu_copy_strided(kv_tensor_data(self), self->strides, kv_tensor_data(src), st, self->sizes, self->ndim, es);
        }
        return cp_return_self(s, self);
    }
    case KV_OP_CLONE:
        return cp_return_new(s, kv_ref_memory_format_preserves(s, 1) ? cp_copy_preserving(self) : cp_copy_of(self));
    case KV_OP__TO_COPY:
        return cp_return_new(s, kv_ref_memory_format_preserves(s, 6) ? cp_copy_preserving(self) : cp_copy_of(self));
    case KV_OP_CONTIGUOUS:
        if (kv_tensor_is_contiguous(self)) {
            kv_tensor_retain(self);
            kv_stack_return_tensor(s, self);
            return KV_OK;
        }
        return cp_return_new(s, cp_copy_of(self));
    case KV_OP_EMPTY_MEMORY_FORMAT:
    case KV_OP_ZEROS:
    case KV_OP_ONES:
    case KV_OP__EFFICIENTZEROTENSOR: {
        cp_sizes(s, 0, sizes, &nd);
        cp_opt_dtype(s, 1, KV_F32, &dt);
        kv_tensor *out = kv_cpu_new(sizes, nd, dt);
        if (out == NULL) return kv_last_error();
        if (id == KV_OP_ONES) {
            kv_ref_store_scalar(dt, elem.b, kv_scalar_int(1));
            cp_fill(out, elem.b);
        } else if (id != KV_OP_EMPTY_MEMORY_FORMAT && out->storage->nbytes > 0) {
            /* All-zero bytes are zero in every dtype. */
            memset(out->storage->data, 0, out->storage->nbytes);
        }
        if (id == KV_OP__EFFICIENTZEROTENSOR) out->keys = kv_keyset_add(out->keys, KV_KEY_ZERO_TENSOR);
        return cp_return_new(s, out);
    }
    case KV_OP_FULL: {
        const kv_scalar v = s->slots[1].v.scalar;
        const kv_dtype inferred = v.kind == KV_SCALAR_BOOL ? KV_BOOL
                                  : v.kind == KV_SCALAR_INT ? KV_I64
                                  : v.kind == KV_SCALAR_DOUBLE ? KV_F32
                                                               : KV_C64;
        cp_sizes(s, 0, sizes, &nd);
        cp_opt_dtype(s, 2, inferred, &dt);
        kv_tensor *out = kv_cpu_new(sizes, nd, dt);
        if (out == NULL) return kv_last_error();
        kv_ref_store_scalar(dt, elem.b, v);
        cp_fill(out, elem.b);
        return cp_return_new(s, out);
    }
    case KV_OP_ARANGE: {
        const int64_t n = s->slots[0].v.scalar.v.i;
        cp_opt_dtype(s, 1, KV_I64, &dt);
        kv_tensor *out = kv_cpu_new(&n, 1, dt);
        if (out == NULL) return kv_last_error();
        void *p = kv_tensor_data(out);
        switch (dt) {
        case KV_F32: for (int64_t i = 0; i < n; i++) ((float *)p)[i] = (float)i; break;
        case KV_F64: for (int64_t i = 0; i < n; i++) ((double *)p)[i] = (double)i; break;
        case KV_I32: for (int64_t i = 0; i < n; i++) ((int32_t *)p)[i] = (int32_t)(uint32_t)i; break;
        case KV_I64: for (int64_t i = 0; i < n; i++) ((int64_t *)p)[i] = i; break;
        case KV_BOOL:
        case KV_U8:
        case KV_I8:
        case KV_I16:
        case KV_F16:
        case KV_BF16:
        case KV_C64:
        case KV_C128:
        case KV_DTYPE_COUNT: break;
        }
        return cp_return_new(s, out);
    }
    case KV_OP_CAT: {
        cp_cat_ok(s, &dim);
        const kv_tensor_list l = s->slots[0].v.tensors;
        memcpy(sizes, l.items[0]->sizes, sizeof sizes);
        int64_t total = 0;
        for (int i = 0; i < l.n; i++) total += l.items[i]->sizes[dim];
        sizes[dim] = total;
        kv_tensor *out = kv_cpu_new(sizes, l.items[0]->ndim, l.items[0]->dtype);
        if (out == NULL) return kv_last_error();
        int64_t at = 0;
        for (int i = 0; i < l.n; i++) {
            cp_region(out, out->strides, at * out->strides[dim], l.items[i]);
            at += l.items[i]->sizes[dim];
        }
        return cp_return_new(s, out);
    }
    case KV_OP_STACK: {
        cp_stack_ok(s, &dim);
        const kv_tensor_list l = s->slots[0].v.tensors;
        const kv_tensor *t0 = l.items[0];
        nd = t0->ndim + 1;
        for (int d = 0, k = 0; d < nd; d++) sizes[d] = d == dim ? l.n : t0->sizes[k++];
        kv_tensor *out = kv_cpu_new(sizes, nd, t0->dtype);
        if (out == NULL) return kv_last_error();
        int64_t ost[KV_MAX_DIMS];
        for (int d = 0, k = 0; d < nd; d++)
            if (d != dim) ost[k++] = out->strides[d];
        for (int i = 0; i < l.n && kv_tensor_numel(out) > 0; i++) cp_region(out, ost, i * out->strides[dim], l.items[i]);
        return cp_return_new(s, out);
    }
    case KV_OP_INDEX_SELECT: {
        int64_t d = s->slots[1].v.i;
        if (d < 0) d += self->ndim;
        const kv_tensor *index = s->slots[2].v.tensor;
        memcpy(sizes, self->sizes, sizeof sizes);
        sizes[d] = kv_tensor_numel(index);
        return cp_gather_rows(s, self, (int)d, index, sizes, self->ndim);
    }
    case KV_OP_EMBEDDING: {
        /* weight.index_select(0, indices.flatten()), shaped indices + [width]. */
        const kv_tensor *w = self, *ind = s->slots[1].v.tensor;
        memcpy(sizes, ind->sizes, sizeof(int64_t) * (size_t)ind->ndim);
        sizes[ind->ndim] = w->sizes[1];
        const int64_t n = kv_tensor_numel(ind);
        int64_t *idx = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
        if (idx == NULL) return kv_error(KV_ERR_OOM, "embedding: no memory for %lld indices", (long long)n);
        cp_indices(ind, w->sizes[0], idx);
        kv_tensor *out = kv_cpu_new(sizes, ind->ndim + 1, w->dtype);
        if (out == NULL) {
            free(idx);
            return kv_last_error();
        }
        const size_t es = kv_dtype_size(w->dtype);
        const int64_t width = w->sizes[1], one = 1;
        const char *src = kv_tensor_data(w);
        char *dst = kv_tensor_data(out);
        for (int64_t p = 0; p < n && width > 0; p++)
            kv_cpu_copy_strided(dst + p * width * (int64_t)es, &one, src + idx[p] * w->strides[0] * (int64_t)es,
                                &w->strides[1], &width, 1, es);
        free(idx);
        return cp_return_new(s, out);
    }
    default: break;
    }
    return kv_error(KV_ERR_INTERNAL, "%s: no direct variant", kv_op_name(op));
}
