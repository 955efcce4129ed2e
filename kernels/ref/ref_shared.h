/* What the reference kernels share with the CPU variants and the CUDA
 * plugin: argument checks, written once so every backend accepts and
 * refuses exactly the same inputs (the runner's error check holds them to
 * it), and the index arithmetic of the visiting orders they all follow.
 *
 * Header-only and free of libkv calls on purpose: the CUDA shim may reach
 * libkv only through the kv_host_api table, so the checks report what is
 * wrong and each caller words the error with its own functions. */
#ifndef KV_REF_SHARED_H
#define KV_REF_SHARED_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/stack.h"
#include "kv/tensor.h"
#include "ref/ref_dot_rescue.h"

/* ---- index arithmetic ---- */

/* Element offset of the lin-th element, in row-major order, of the space
 * of dims [0, ndim) other than `skip` (-1: none), given their sizes and
 * element strides. */
static inline int64_t kv_ref_linear_offset(int64_t lin, int ndim, const int64_t *sizes, const int64_t *strides,
                                           int skip) {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; d--) {
        if (d == skip) continue;
        off += (lin % sizes[d]) * strides[d];
        lin /= sizes[d];
    }
    return off;
}

/* ---- reduction dim lists (the int[1]? / int[1] of sum, mean, amax) ---- */

typedef enum kv_ref_dims_result {
    KV_REF_DIMS_OK,
    KV_REF_DIMS_BAD_TAG,      /* neither int[], int nor None */
    KV_REF_DIMS_OUT_OF_RANGE, /* *bad: the dim as given, for the wrap_dim message */
    KV_REF_DIMS_REPEATED,     /* *bad: the wrapped dim named twice */
} kv_ref_dims_result;

/* v as a mask over ndim dims (reduce[0..KV_MAX_DIMS)). None or [] reduces
 * every dim; a bare int is accepted too, since int[1] takes one in PyTorch.
 * Dims wrap as kv_wrap_dim does, so a 0-dim tensor accepts 0 and -1. The
 * items are checked in order and the first bad one is reported, which is
 * the one the reference names. *given: whether the list named any dim. */
static inline kv_ref_dims_result kv_ref_dims_mask(const kv_ivalue *v, int ndim, bool *reduce, bool *given,
                                                  int64_t *bad) {
    int64_t one = 0;
    const int64_t *items = NULL;
    int n = 0;
    if (v->tag == KV_IV_INT_LIST) {
        items = v->v.ints.items;
        n = v->v.ints.n;
    } else if (v->tag == KV_IV_INT) {
        one = v->v.i;
        items = &one;
        n = 1;
    } else if (v->tag != KV_IV_NONE) {
        return KV_REF_DIMS_BAD_TAG;
    }
    *given = n > 0;
    for (int d = 0; d < KV_MAX_DIMS; d++) reduce[d] = n == 0;
    /* One more slot than dims: a 0-dim tensor accepts dim 0 and -1. */
    bool seen[KV_MAX_DIMS + 1] = { false };
    const int64_t lim = ndim > 0 ? ndim : 1;
    for (int i = 0; i < n; i++) {
        int64_t d = items[i];
        if (d < -lim || d >= lim) {
            *bad = d;
            return KV_REF_DIMS_OUT_OF_RANGE;
        }
        if (d < 0) d += lim;
        if (seen[d]) {
            *bad = d;
            return KV_REF_DIMS_REPEATED;
        }
        seen[d] = true;
        if (d < ndim) reduce[d] = true;
    }
    return KV_REF_DIMS_OK;
}

/* ---- addmm's self ---- */

/* The element strides through which addmm's self is read once broadcast
 * to the [n, m] result by numpy rules (0 along a broadcast dim). False
 * when self has more than 2 dims or a dim that is neither 1 nor the
 * result's. */
static inline bool kv_ref_addmm_self_strides(const kv_tensor *self, int64_t n, int64_t m, int64_t ss[2]) {
    ss[0] = ss[1] = 0;
    if (self->ndim > 2) return false;
    for (int d = 0; d < self->ndim; d++) {
        const int od = 2 - self->ndim + d;
        const int64_t want = od == 0 ? n : m;
        if (self->sizes[d] == want) ss[od] = self->strides[d];
        else if (self->sizes[d] != 1) return false;
    }
    return true;
}

/* ---- native_layer_norm's normalized_shape ---- */

/* Whether t's sizes are exactly the list ns (weight and bias must be). */
static inline bool kv_ref_sizes_are(const kv_tensor *t, kv_int_list ns) {
    bool same = t->ndim == ns.n;
    for (int d = 0; same && d < ns.n; d++) same = t->sizes[d] == ns.items[d];
    return same;
}

/* Whether x's trailing sizes are ns (so the normalized dims start at
 * x->ndim - ns.n). */
static inline bool kv_ref_ln_trailing_match(const kv_tensor *x, kv_int_list ns) {
    bool match = ns.n <= x->ndim;
    const int axis = x->ndim - ns.n;
    for (int d = 0; match && d < ns.n; d++) match = x->sizes[axis + d] == ns.items[d];
    return match;
}

/* x as rows x cols around `axis` (dims before it are rows, the rest are
 * normalized together); stat_sizes: the shape of mean and rstd, x's with
 * the normalized dims set to 1. */
static inline void kv_ref_ln_split(const kv_tensor *x, int axis, int64_t *stat_sizes, int64_t *rows,
                                   int64_t *cols) {
    *rows = *cols = 1;
    for (int d = 0; d < x->ndim; d++) {
        stat_sizes[d] = d < axis ? x->sizes[d] : 1;
        if (d < axis) *rows *= x->sizes[d];
        else *cols *= x->sizes[d];
    }
}

#endif
