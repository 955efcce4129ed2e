/* Sizes and strides: numel, contiguity, dim wrapping, broadcasting,
 * internal overlap. */
#include <inttypes.h>
#include <stdio.h>

#include "kv/tensor.h"

int64_t kv_tensor_numel(const kv_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
    return n;
}

/* PyTorch's rule: strides of size-1 dims never matter, and a tensor with
 * no elements is contiguous whatever its strides. */
bool kv_tensor_is_contiguous(const kv_tensor *t) {
    if (kv_tensor_numel(t) == 0) return true;
    int64_t expected = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->sizes[d] == 1) continue;
        if (t->strides[d] != expected) return false;
        expected *= t->sizes[d];
    }
    return true;
}

/* Size-0 dims count as 1 when building strides (as PyTorch does), so the
 * strides of [2, 0, 3] are [3, 3, 1], not [0, 3, 1]. */
int64_t kv_contiguous_strides(const int64_t *sizes, int ndim, int64_t *strides_out) {
    int64_t stride = 1;
    int64_t numel = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides_out[d] = stride;
        stride *= sizes[d] > 1 ? sizes[d] : 1;
        numel *= sizes[d];
    }
    return numel;
}

int kv_wrap_dim(int64_t dim, int ndim, const char *op, const char *arg) {
    /* A 0-dim tensor behaves like a 1-dim one here: dims -1 and 0. */
    const int64_t n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim > n - 1) {
        kv_error(KV_ERR_DIM,
                 "%s: argument '%s': dimension %" PRId64 " out of range (expected to be in range of [%" PRId64
                 ", %" PRId64 "])",
                 op ? op : "?", arg ? arg : "dim", dim, -n, n - 1);
        return -1;
    }
    if (dim < 0) dim += n;
    return (int)dim;
}

int kv_shape_format(const int64_t *sizes, int ndim, char *buf, int cap) {
    if (buf == NULL || cap < 0) cap = 0;
    int len = 0;
    int w = snprintf(buf, (size_t)cap, "[");
    len += w;
    for (int d = 0; d < ndim; d++) {
        const int room = len < cap ? cap - len : 0;
        w = snprintf(room ? buf + len : NULL, (size_t)room, "%s%" PRId64, d ? ", " : "", sizes[d]);
        len += w;
    }
    const int room = len < cap ? cap - len : 0;
    len += snprintf(room ? buf + len : NULL, (size_t)room, "]");
    return len;
}

kv_status kv_broadcast_shapes(const int64_t *a, int na, const int64_t *b, int nb,
                              int64_t *out, int *nout) {
    if (na < 0 || na > KV_MAX_DIMS || nb < 0 || nb > KV_MAX_DIMS) {
        return kv_error(KV_ERR_INVALID_ARG, "broadcast: argument '%s': %d dimensions is out of range (expected 0 to %d)",
                        (na < 0 || na > KV_MAX_DIMS) ? "a" : "b", (na < 0 || na > KV_MAX_DIMS) ? na : nb,
                        KV_MAX_DIMS);
    }
    const int n = na > nb ? na : nb;
    /* Built in a local array so `out` may alias `a` or `b`. */
    int64_t r[KV_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        /* Align from the right; missing leading dims act as size 1. */
        const int ia = i - (n - na), ib = i - (n - nb);
        const int64_t sa = ia >= 0 ? a[ia] : 1;
        const int64_t sb = ib >= 0 ? b[ib] : 1;
        if (sa == sb || sb == 1) {
            r[i] = sa;
        } else if (sa == 1) {
            r[i] = sb;
        } else {
            char fa[160], fb[160];
            kv_shape_format(a, na, fa, (int)sizeof fa);
            kv_shape_format(b, nb, fb, (int)sizeof fb);
            return kv_error(KV_ERR_SHAPE,
                            "broadcast: argument 'b': shapes %s and %s are not broadcastable: the size of a (%" PRId64
                            ") must match the size of b (%" PRId64 ") at non-singleton dimension %d",
                            fa, fb, sa, sb, i);
        }
    }
    for (int i = 0; i < n; i++) out[i] = r[i];
    if (nout) *nout = n;
    return KV_OK;
}

kv_status kv_broadcast_strides(const kv_tensor *t, const int64_t *sizes, int ndim,
                               int64_t *strides_out) {
    char ft[160], fs[160];
    if (ndim < t->ndim || ndim > KV_MAX_DIMS) {
        kv_shape_format(t->sizes, t->ndim, ft, (int)sizeof ft);
        kv_shape_format(sizes, ndim < 0 ? 0 : (ndim > KV_MAX_DIMS ? KV_MAX_DIMS : ndim), fs, (int)sizeof fs);
        return kv_error(KV_ERR_SHAPE, "broadcast: argument 'size': tensor of shape %s cannot be expanded to %s "
                                      "(%d dimensions into %d)",
                        ft, fs, t->ndim, ndim);
    }
    int64_t r[KV_MAX_DIMS];
    const int lead = ndim - t->ndim;
    for (int i = 0; i < ndim; i++) {
        const int it = i - lead;
        if (it < 0) {
            r[i] = 0;
        } else if (t->sizes[it] == sizes[i]) {
            r[i] = t->strides[it];
        } else if (t->sizes[it] == 1) {
            r[i] = 0;
        } else {
            kv_shape_format(t->sizes, t->ndim, ft, (int)sizeof ft);
            kv_shape_format(sizes, ndim, fs, (int)sizeof fs);
            return kv_error(KV_ERR_SHAPE,
                            "broadcast: argument 'size': tensor of shape %s cannot be expanded to %s: size %" PRId64
                            " vs %" PRId64 " at dimension %d",
                            ft, fs, t->sizes[it], sizes[i], i);
        }
    }
    for (int i = 0; i < ndim; i++) strides_out[i] = r[i];
    return KV_OK;
}

bool kv_same_shape(const kv_tensor *a, const kv_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++) {
        if (a->sizes[d] != b->sizes[d]) return false;
    }
    return true;
}

/* ---- internal overlap ---- */

kv_status kv_tensor_check_no_internal_overlap(const char *op, const char *arg, const kv_tensor *t) {
    int d = -1;
    if (kv_tensor_internal_overlap(t, &d) != KV_OVERLAP_YES) return KV_OK;
    char why[3 * KV_MAX_DIMS * 24];
    if (d >= 0) {
        snprintf(why, sizeof why, "dim %d has stride 0", d);
    } else {
        /* PyTorch lets this write run (MemOverlap::TooHard), and what it
         * leaves depends on the order the elements are written in, which
         * differs between kernels: kvsuite proves the overlap and refuses. */
        char sz[KV_MAX_DIMS * 24], st[KV_MAX_DIMS * 24];
        kv_shape_format(t->sizes, t->ndim, sz, (int)sizeof sz);
        kv_shape_format(t->strides, t->ndim, st, (int)sizeof st);
        snprintf(why, sizeof why, "sizes %s with strides %s overlap", sz, st);
    }
    return kv_error(KV_ERR_INVALID_ARG,
                    "%s: argument '%s': unsupported operation: more than one element of the written-to tensor "
                    "refers to a single memory location (%s). Please clone() the tensor before performing the "
                    "operation.",
                    op, arg, why);
}
