/* Reduction dim lists (the int[1]? / int[1] argument of sum, mean, amax),
 * read in one place so the reference, the CPU variants and the CUDA plugin
 * accept and refuse exactly the same lists.
 *
 * Header-only and free of libkv calls on purpose: the CUDA shim may reach
 * libkv only through the kv_host_api table, so this reports what is wrong
 * and each caller words the error with its own functions. */
#ifndef KV_REF_DIMS_H
#define KV_REF_DIMS_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/stack.h"
#include "kv/tensor.h"

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

#endif
