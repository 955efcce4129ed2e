/* "direct" variants of the view ops and the lazy-bit ops: the common,
 * valid call computed straight from the arguments, without the general
 * machinery of the reference (size inference with error reporting, the
 * chunk walk of view_strides, generic iterators).
 *
 * Each predicate accepts only calls the variant computes exactly as the
 * reference does (same sizes, strides, offset and keys, sharing self's
 * storage): every error, and the rarer geometries (view of a
 * non-contiguous tensor, reshape that must copy, empty tensors for view),
 * stay with "ref". Views are metadata only, so every comparison is
 * bitwise. */
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"

/* ---- helpers ---- */

static const kv_tensor *dv_self(const kv_stack *s) {
    if (s->size < 1 || s->slots[0].tag != KV_IV_TENSOR) return NULL;
    return s->slots[0].v.tensor;
}

static bool dv_int(const kv_stack *s, int i, int64_t *v) {
    if (i >= s->size || s->slots[i].tag != KV_IV_INT) return false;
    *v = s->slots[i].v.i;
    return true;
}

/* A dim index in range for ndim (0-dim tensors accept 0 and -1). */
static bool dv_dim(int64_t d, int ndim, int *out) {
    const int lim = ndim > 0 ? ndim : 1;
    if (d < -lim || d >= lim) return false;
    *out = (int)(d < 0 ? d + lim : d);
    return true;
}

/* Strides exactly row-major (size-1 dims included), so any reshape of it
 * is a view with row-major strides. */
static bool dv_strict_contig(const kv_tensor *t) {
    int64_t cs[KV_MAX_DIMS];
    kv_contiguous_strides(t->sizes, t->ndim, cs);
    for (int d = 0; d < t->ndim; d++)
        if (t->strides[d] != cs[d]) return false;
    return true;
}

/* The size list of view/reshape with at most one -1 resolved; false for
 * anything the reference would refuse or resolve differently. */
static bool dv_infer(kv_int_list shape, int64_t numel, int64_t *out) {
    if (shape.n > KV_MAX_DIMS || numel <= 0) return false;
    int infer = -1;
    int64_t known = 1;
    for (int d = 0; d < shape.n; d++) {
        const int64_t v = shape.items[d];
        out[d] = v;
        if (v == -1) {
            if (infer >= 0) return false;
            infer = d;
        } else if (v < 0 || __builtin_mul_overflow(known, v, &known)) {
            return false;
        }
    }
    if (infer < 0) return known == numel;
    if (known == 0 || numel % known != 0) return false;
    out[infer] = numel / known;
    return true;
}

static kv_status dv_return_view(kv_stack *stack, const kv_tensor *self, const int64_t *sizes, const int64_t *strides,
                                int ndim, int64_t offset) {
    kv_tensor *out = kv_tensor_view(self, sizes, strides, ndim, offset);
    if (out == NULL) return kv_last_error() != KV_OK ? kv_last_error() : KV_ERR_INTERNAL;
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

/* ---- the geometry of each view op (false: leave it to "ref") ---- */

typedef struct dv_geom {
    int ndim;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    int64_t offset;
} dv_geom;

static bool dv_geometry(const kv_op *op, const kv_stack *s, dv_geom *g) {
    const kv_tensor *self = dv_self(s);
    if (self == NULL) return false;
    const int nd = self->ndim;
    g->ndim = nd;
    g->offset = self->offset;
    memcpy(g->sizes, self->sizes, sizeof g->sizes);
    memcpy(g->strides, self->strides, sizeof g->strides);
    int64_t a, b;
    int d0, d1;
    switch (kv_op_builtin_id(op)) {
    case KV_OP_VIEW:
    case KV_OP__UNSAFE_VIEW:
    case KV_OP_RESHAPE:
        if (s->size < 2 || s->slots[1].tag != KV_IV_INT_LIST || !dv_strict_contig(self)) return false;
        if (!dv_infer(s->slots[1].v.ints, kv_tensor_numel(self), g->sizes)) return false;
        g->ndim = s->slots[1].v.ints.n;
        kv_contiguous_strides(g->sizes, g->ndim, g->strides);
        return true;
    case KV_OP_TRANSPOSE_INT:
        if (!dv_int(s, 1, &a) || !dv_int(s, 2, &b) || !dv_dim(a, nd, &d0) || !dv_dim(b, nd, &d1)) return false;
        if (nd > 0) {
            g->sizes[d0] = self->sizes[d1];
            g->sizes[d1] = self->sizes[d0];
            g->strides[d0] = self->strides[d1];
            g->strides[d1] = self->strides[d0];
        }
        return true;
    case KV_OP_T:
        if (nd > 2) return false;
        if (nd == 2) {
            g->sizes[0] = self->sizes[1];
            g->sizes[1] = self->sizes[0];
            g->strides[0] = self->strides[1];
            g->strides[1] = self->strides[0];
        }
        return true;
    case KV_OP_PERMUTE: {
        if (s->size < 2 || s->slots[1].tag != KV_IV_INT_LIST || s->slots[1].v.ints.n != nd || nd == 0) return false;
        bool seen[KV_MAX_DIMS] = { false };
        for (int i = 0; i < nd; i++) {
            if (!dv_dim(s->slots[1].v.ints.items[i], nd, &d0) || seen[d0]) return false;
            seen[d0] = true;
            g->sizes[i] = self->sizes[d0];
            g->strides[i] = self->strides[d0];
        }
        return true;
    }
    case KV_OP_SELECT_INT: {
        if (nd == 0 || !dv_int(s, 1, &a) || !dv_int(s, 2, &b) || !dv_dim(a, nd, &d0)) return false;
        const int64_t size = self->sizes[d0];
        if (b < -size || b >= size) return false;
        if (b < 0) b += size;
        int n = 0;
        for (int d = 0; d < nd; d++) {
            if (d == d0) continue;
            g->sizes[n] = self->sizes[d];
            g->strides[n++] = self->strides[d];
        }
        g->ndim = n;
        g->offset = self->offset + b * self->strides[d0];
        return true;
    }
    case KV_OP_SLICE_TENSOR: {
        int64_t step;
        if (nd == 0 || s->size < 5 || !dv_int(s, 1, &a) || !dv_dim(a, nd, &d0) || !dv_int(s, 4, &step) || step <= 0)
            return false;
        const int64_t size = self->sizes[d0];
        int64_t start = 0, end = size;
        if (s->slots[2].tag == KV_IV_INT) start = s->slots[2].v.i;
        else if (s->slots[2].tag != KV_IV_NONE) return false;
        if (s->slots[3].tag == KV_IV_INT) end = s->slots[3].v.i;
        else if (s->slots[3].tag != KV_IV_NONE) return false;
        /* Only the in-range case: negative or past-the-end bounds (and
         * their clamping) are the reference's. */
        if (start < 0 || end < start || end > size) return false;
        const int64_t len = end - start;
        g->sizes[d0] = len / step + (len % step != 0);
        g->strides[d0] = self->strides[d0] * step;
        g->offset = self->offset + start * self->strides[d0];
        return true;
    }
    case KV_OP_SQUEEZE: {
        int n = 0;
        for (int d = 0; d < nd; d++) {
            if (self->sizes[d] == 1) continue;
            g->sizes[n] = self->sizes[d];
            g->strides[n++] = self->strides[d];
        }
        g->ndim = n;
        return true;
    }
    case KV_OP_SQUEEZE_DIM: {
        if (!dv_int(s, 1, &a) || !dv_dim(a, nd, &d0)) return false;
        int n = 0;
        for (int d = 0; d < nd; d++) {
            if (d == d0 && self->sizes[d] == 1) continue;
            g->sizes[n] = self->sizes[d];
            g->strides[n++] = self->strides[d];
        }
        g->ndim = n;
        return true;
    }
    case KV_OP_UNSQUEEZE: {
        if (nd + 1 > KV_MAX_DIMS || !dv_int(s, 1, &a) || !dv_dim(a, nd + 1, &d0)) return false;
        int n = 0;
        for (int d = 0; d <= nd; d++) {
            if (d == d0) {
                g->sizes[n] = 1;
                g->strides[n++] = d < nd ? (int64_t)((uint64_t)self->sizes[d] * (uint64_t)self->strides[d]) : 1;
            }
            if (d < nd) {
                g->sizes[n] = self->sizes[d];
                g->strides[n++] = self->strides[d];
            }
        }
        g->ndim = n;
        return true;
    }
    case KV_OP_EXPAND: {
        if (s->size < 2 || s->slots[1].tag != KV_IV_INT_LIST) return false;
        const kv_int_list t = s->slots[1].v.ints;
        /* Same rank, no new leading dims: each size kept or a size-1 dim
         * broadcast (stride 0). */
        if (t.n != nd) return false;
        for (int i = 0; i < nd; i++) {
            const int64_t want = t.items[i] == -1 ? self->sizes[i] : t.items[i];
            if (want < 0) return false;
            if (want != self->sizes[i]) {
                if (self->sizes[i] != 1) return false;
                g->sizes[i] = want;
                g->strides[i] = 0;
            }
        }
        return true;
    }
    case KV_OP_AS_STRIDED: {
        if (s->size < 4 || s->slots[1].tag != KV_IV_INT_LIST || s->slots[2].tag != KV_IV_INT_LIST) return false;
        const kv_int_list sz = s->slots[1].v.ints, st = s->slots[2].v.ints;
        if (sz.n != st.n || sz.n > KV_MAX_DIMS) return false;
        int64_t off = self->offset;
        if (s->slots[3].tag == KV_IV_INT) off = s->slots[3].v.i;
        else if (s->slots[3].tag != KV_IV_NONE) return false;
        if (off < 0) return false;
        int64_t last = off;
        for (int d = 0; d < sz.n; d++) {
            if (sz.items[d] <= 0 || st.items[d] < 0) return false; /* empty or negative: the reference's */
            int64_t span;
            if (__builtin_mul_overflow(sz.items[d] - 1, st.items[d], &span) || __builtin_add_overflow(last, span, &last))
                return false;
            g->sizes[d] = sz.items[d];
            g->strides[d] = st.items[d];
        }
        if (last >= (int64_t)(self->storage->nbytes / kv_dtype_size(self->dtype))) return false;
        g->ndim = sz.n;
        g->offset = off;
        return true;
    }
    case KV_OP_DETACH: return true;
    case KV_OP_UNFOLD: {
        int64_t size, step;
        if (nd == 0 || nd + 1 > KV_MAX_DIMS || !dv_int(s, 1, &a) || !dv_dim(a, nd, &d0) || !dv_int(s, 2, &size) ||
            !dv_int(s, 3, &step))
            return false;
        if (size < 0 || size > self->sizes[d0] || step <= 0) return false;
        g->sizes[nd] = size;
        g->strides[nd] = self->strides[d0];
        g->sizes[d0] = (self->sizes[d0] - size) / step + 1;
        g->strides[d0] = self->strides[d0] * step;
        g->ndim = nd + 1;
        return true;
    }
    default: return false;
    }
}

bool kv_cpu_view_pred(const kv_op *op, const kv_stack *stack) {
    dv_geom g;
    return dv_geometry(op, stack, &g);
}

kv_status kv_cpu_view_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    dv_geom g;
    if (!dv_geometry(op, stack, &g))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the direct view variant does not cover this call", kv_op_name(op));
    const kv_tensor *self = dv_self(stack);
    kv_status st = dv_return_view(stack, self, g.sizes, g.strides, g.ndim, g.offset);
    if (st == KV_OK && kv_op_builtin_id(op) == KV_OP_DETACH) {
        kv_tensor *out = stack->slots[0].v.tensor;
        out->keys = kv_keyset_remove(out->keys, KV_KEY_AUTOGRAD);
    }
    return st;
}

/* ---- lazy-bit ops ---- */

/* The key a bit op toggles, or 0 (identity alias); false: not such an op
 * or a call the reference refuses. */
static bool lz_toggle(const kv_op *op, const kv_tensor *self, kv_keyset *toggle) {
    switch (kv_op_builtin_id(op)) {
    case KV_OP_CONJ:
    case KV_OP__CONJ: *toggle = kv_dtype_is_complex(self->dtype) ? kv_keyset_of(KV_KEY_CONJUGATE) : 0; return true;
    case KV_OP__NEG_VIEW:
        *toggle = kv_keyset_of(KV_KEY_NEGATIVE);
        return self->dtype != KV_BOOL;
    case KV_OP_RESOLVE_CONJ:
    case KV_OP_RESOLVE_NEG: *toggle = 0; return true;
    default: return false;
    }
}

static int lz_query(const kv_op *op) {
    switch (kv_op_builtin_id(op)) {
    case KV_OP_IS_CONJ: return KV_KEY_CONJUGATE;
    case KV_OP_IS_NEG: return KV_KEY_NEGATIVE;
    case KV_OP__IS_ZEROTENSOR: return KV_KEY_ZERO_TENSOR;
    default: return -1;
    }
}

bool kv_cpu_lazy_pred(const kv_op *op, const kv_stack *stack) {
    const kv_tensor *self = dv_self(stack);
    if (self == NULL) return false;
    kv_keyset t;
    if (lz_query(op) >= 0) return true;
    if (lz_toggle(op, self, &t)) return true;
    /* conj_physical: a CPU copy (real dtypes) or conjugated copy (complex). */
    return kv_op_builtin_id(op) == KV_OP_CONJ_PHYSICAL && kv_cpu_plain(self);
}

kv_status kv_cpu_lazy_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_tensor *self = dv_self(stack);
    if (self == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: the direct variant needs a tensor", kv_op_name(op));
    const int q = lz_query(op);
    if (q >= 0) {
        kv_stack_return_bool(stack, kv_keyset_has(self->keys, (kv_key)q));
        return KV_OK;
    }
    kv_keyset toggle;
    if (lz_toggle(op, self, &toggle)) {
        kv_tensor *v = kv_tensor_alias(self);
        if (v == NULL) return kv_last_error();
        v->keys ^= toggle;
        kv_stack_return_tensor(stack, v);
        return KV_OK;
    }
    if (!kv_cpu_lazy_pred(op, stack))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the direct variant does not cover this call", kv_op_name(op));
    kv_tensor *out = kv_cpu_new(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return kv_last_error();
    kv_cpu_gather(self, kv_tensor_data(out));
    const int64_t n = kv_tensor_numel(out);
    /* Conjugation flips the sign bit of every imaginary part. */
    if (self->dtype == KV_C64) {
        float *p = kv_tensor_data(out);
        for (int64_t i = 0; i < n; i++) p[2 * i + 1] = -p[2 * i + 1];
    } else if (self->dtype == KV_C128) {
        double *p = kv_tensor_data(out);
        for (int64_t i = 0; i < n; i++) p[2 * i + 1] = -p[2 * i + 1];
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
