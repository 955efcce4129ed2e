/* The reductions of the stranger's zoo plugins (tests/plugins/zoo/:
 * empty_mean, i32_sum): which dims a dim list names, the output
 * shape, and the output element each input element folds into. Written
 * from kv/backend.h and ops.schema alone, like zoo.h. */
#ifndef KV_TEST_ZOO_REDUCE_H
#define KV_TEST_ZOO_REDUCE_H

#include "zoo.h"

typedef struct zoo_red {
    bool reduced[KV_MAX_DIMS];
    int64_t out_sizes[KV_MAX_DIMS];
    int out_ndim;
} zoo_red;

/* Arg 1 (`int[1]? dim`) and arg 2 (`keepdim`) of a reduction over a:
 * None or [] reduces every dim. `wrap` maps a negative dim (the correct
 * one is d + ndim). Returns false (error set) for a dim out of range. */
static inline bool zoo_red_plan(const kv_stack *stack, const kv_tensor *a, int (*wrap)(int64_t d, int ndim),
                                zoo_red *r) {
    memset(r, 0, sizeof *r);
    const bool all = kv_arg_is_none(stack, 1) || kv_arg_ints(stack, 1).n == 0;
    for (int d = 0; d < a->ndim; d++) r->reduced[d] = all;
    if (!all) {
        const kv_int_list dims = kv_arg_ints(stack, 1);
        for (int i = 0; i < dims.n; i++) {
            const int d = wrap(dims.items[i], a->ndim);
            if (d < 0 || d >= a->ndim) {
                zoo_host->error(KV_ERR_MISSING_KERNEL, "reduction: dim %lld out of range", (long long)dims.items[i]);
                return false;
            }
            r->reduced[d] = true;
        }
    }
    const bool keep = kv_arg_bool(stack, 2);
    for (int d = 0; d < a->ndim; d++)
        if (!r->reduced[d]) r->out_sizes[r->out_ndim++] = a->sizes[d];
        else if (keep) r->out_sizes[r->out_ndim++] = 1;
    return true;
}

/* The row-major index, in the output, of row-major input element k. */
static inline int64_t zoo_red_target(const kv_tensor *a, const zoo_red *r, int64_t k) {
    int64_t idx = 0, scale = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
        const int64_t i = k % a->sizes[d];
        k /= a->sizes[d];
        if (!r->reduced[d]) {
            idx += i * scale;
            scale *= a->sizes[d];
        }
    }
    return idx;
}

static inline int zoo_red_wrap(int64_t d, int ndim) { return (int)(d < 0 ? d + ndim : d); }

#endif
