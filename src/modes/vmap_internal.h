/* What the vmap files share: the batched record, the per-call context and
 * the helpers the rules and the fallback are built from. */
#ifndef KV_MODES_VMAP_INTERNAL_H
#define KV_MODES_VMAP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/stack.h"
#include "kv/tensor.h"
#include "kv/vmap.h"

/* Hangs off kv_tensor.batched of a wrapper; owned by that one wrapper. */
struct kv_batched_info {
    kv_tensor *value; /* the physical tensor (one reference held) */
    int64_t bdim;     /* the batch dim, in [0, value->ndim) */
    int level;        /* >= 1 */
};

/* What an op call at KV_KEY_BATCHED works on. */
typedef struct kv_vmap_ctx {
    int level;          /* the highest level among the tensor arguments */
    int64_t batch_size; /* their common size at the batch dim */
} kv_vmap_ctx;

/* t's record when t is batched at exactly `level`, else NULL. */
static inline const struct kv_batched_info *kv_vmap_info_at(const kv_tensor *t, int level) {
    return (t != NULL && t->batched != NULL && t->batched->level == level) ? t->batched : NULL;
}

/* Finds the level and the batch size of a call from its tensor arguments
 * (Tensor, Tensor? and Tensor[] slots). ctx->level is 0 when no argument
 * is a wrapper. A tensor with the Batched key but no record is
 * KV_ERR_INTERNAL; differing batch sizes are KV_ERR_SHAPE. */
kv_status kv_vmap_scan_args(const kv_op *op, const kv_stack *stack, kv_vmap_ctx *ctx);
/* The standard batch-size mismatch error (KV_ERR_SHAPE). */
kv_status kv_vmap_size_mismatch(const char *op, int64_t a, int64_t b);

/* kv_tensor_batched_free_hook (installed by kv_vmap_register, which
 * kv_init runs before any wrapper can exist). */
void kv_vmap_batched_free(struct kv_batched_info *bi);
/* A new wrapper of `physical` (whose reference it takes over, also on
 * failure) with batch dim `bdim` (already normalized) at `level`. */
kv_tensor *kv_vmap_wrap_owned(kv_tensor *physical, int64_t bdim, int level);
/* The physical tensor with its batch dim moved to dim 0 (new reference). */
kv_tensor *kv_vmap_front(const struct kv_batched_info *bi);
/* t with its dim `from` moved to `to` (both normalized): t itself
 * (retained) when they are equal, else a permuted view (new reference). */
kv_tensor *kv_vmap_movedim(kv_tensor *t, int64_t from, int64_t to);
/* The status of a failed call that returned NULL, never KV_OK. */
kv_status kv_vmap_failed(const char *op);

/* ---- counters (vmap_counters.c) ---- */
void kv_vmap_count_rule(const kv_op *op);
void kv_vmap_count_fallback(const kv_op *op);

/* ---- the loop-and-stack fallback (vmap_fallback.c) ---- */
/* Runs op per sample at ctx's level and stacks the results; the stack
 * protocol of a kernel (arguments borrowed, replaced by owned returns). */
kv_status kv_vmap_fallback_run(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx);
/* The boxed fallback registered at KV_KEY_BATCHED. */
kv_status kv_vmap_fallback_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* ---- batching rules ----
 * A rule computes op on the physical tensors and replaces the stack with
 * the wrapped result; or it sets *declined (leaving the stack untouched
 * and no error) when its preconditions do not hold, and the caller runs
 * the fallback instead. */
typedef kv_status (*kv_vmap_rule_fn)(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);

/* Calls op on `slots` (a copy of the arguments with physical tensors put
 * in) and returns its one tensor return (owned), or NULL with the error. */
kv_tensor *kv_vmap_call_physical(const kv_op *op, kv_ivalue *slots, int n);
/* Wraps the physical result (reference taken over) at ctx's level and
 * makes it the only return on the stack. */
kv_status kv_vmap_return_wrapped(kv_stack *stack, kv_tensor *physical, int64_t bdim, const kv_vmap_ctx *ctx);
/* The logical dim `dim` of an ndim-dim tensor normalized, or -1 (no error
 * left behind) when out of range; for a 0-dim tensor -1 and 0 give 0. */
int kv_vmap_logical_dim(int64_t dim, int ndim);

/* vmap_rules_pointwise.c */
kv_status kv_vmap_rule_unary(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_pointwise(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
/* vmap_rules_reduce.c (softmax included: a dim argument, shifted) */
kv_status kv_vmap_rule_reduce_dims(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_reduce_dim(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_argmax(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_softmax(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
/* vmap_rules_matmul.c */
kv_status kv_vmap_rule_mm(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_bmm(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
/* vmap_rules_view.c */
kv_status kv_vmap_rule_view_size(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_transpose(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_t(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_permute(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_select(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_slice(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_squeeze_dim(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_unsqueeze(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);
kv_status kv_vmap_rule_expand(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined);

#endif
