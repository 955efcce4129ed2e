/* Batching rules of the view ops: the batch dim goes first, logical dims
 * are shifted by one, sizes get the batch size prepended, and the op runs
 * on the physical tensor, so the result is a view of the physical storage
 * (an in-place write through it reaches the batched base, as per sample).
 *
 * view/reshape keep the batch dim apart from every reshaped group of
 * dims, so the physical view exists exactly when each sample's view does.
 * A logically 0-dim tensor accepts dim 0 / -1 in transpose, t and
 * squeeze.dim, which then return it unchanged: the physical op is
 * transpose(0, 0), an alias view. Anything the logical op would reject (a
 * dim out of range, a bad permutation, select on a 0-dim tensor, an index
 * out of range) declines, so the per-sample fallback raises the op's own
 * error with the logical dims in it. */
#include "kv/ops.h"
#include "modes/vmap_internal.h"

#define DECLINE()          \
    do {                   \
        *declined = true;  \
        return KV_OK;      \
    } while (0)

static void copy_slots(kv_ivalue *slots, const kv_stack *stack) {
    for (int i = 0; i < stack->size; i++) slots[i] = stack->slots[i];
}

/* The batched self (slot 0) or NULL. */
static const struct kv_batched_info *self_info(const kv_stack *stack, const kv_vmap_ctx *ctx) {
    return kv_vmap_info_at(kv_arg_tensor(stack, 0), ctx->level);
}

/* Runs op on the batch-first physical self with `slots` (slot 0 filled in
 * here) and returns the wrapped view. */
static kv_status run_front(const kv_op *op, kv_stack *stack, kv_ivalue *slots, const struct kv_batched_info *bi,
                           const kv_vmap_ctx *ctx) {
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL) return kv_vmap_failed(kv_op_name(op));
    slots[0].v.tensor = f;
    kv_tensor *r = kv_vmap_call_physical(op, slots, stack->size);
    kv_tensor_release(f);
    if (r == NULL) return kv_vmap_failed(kv_op_name(op));
    return kv_vmap_return_wrapped(stack, r, 0, ctx);
}

/* The logical tensor returned unchanged, as a view: transpose(0, 0) of
 * the batch-first physical tensor. */
static kv_status alias_of(const kv_op *op, kv_stack *stack, const struct kv_batched_info *bi,
                          const kv_vmap_ctx *ctx) {
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL) return kv_vmap_failed(kv_op_name(op));
    kv_tensor *r = kv_transpose(f, 0, 0);
    kv_tensor_release(f);
    if (r == NULL) return kv_vmap_failed(kv_op_name(op));
    return kv_vmap_return_wrapped(stack, r, 0, ctx);
}

/* view / reshape(self, SymInt[] size) */
kv_status kv_vmap_rule_view_size(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    kv_int_list size = kv_arg_ints(stack, 1);
    if (bi == NULL || size.n + 1 > KV_MAX_DIMS) DECLINE();
    int64_t sizes[KV_MAX_DIMS];
    sizes[0] = ctx->batch_size;
    for (int i = 0; i < size.n; i++) sizes[i + 1] = size.items[i];
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.ints = (kv_int_list){ sizes, size.n + 1 };
    return run_front(op, stack, slots, bi, ctx);
}

kv_status kv_vmap_rule_transpose(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const int r = kv_arg_tensor(stack, 0)->ndim;
    const int d0 = kv_vmap_logical_dim(kv_arg_int(stack, 1), r), d1 = kv_vmap_logical_dim(kv_arg_int(stack, 2), r);
    if (d0 < 0 || d1 < 0) DECLINE();
    if (r == 0) return alias_of(op, stack, bi, ctx);
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.i = d0 + 1;
    slots[2].v.i = d1 + 1;
    return run_front(op, stack, slots, bi, ctx);
}

/* t: a no-op view below 2 dims, transpose(0, 1) at 2; more is an error. */
kv_status kv_vmap_rule_t(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const int r = kv_arg_tensor(stack, 0)->ndim;
    if (r > 2) DECLINE();
    if (r < 2) return alias_of(op, stack, bi, ctx);
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL) return kv_vmap_failed(kv_op_name(op));
    kv_tensor *out = kv_transpose(f, 1, 2);
    kv_tensor_release(f);
    if (out == NULL) return kv_vmap_failed(kv_op_name(op));
    return kv_vmap_return_wrapped(stack, out, 0, ctx);
}

kv_status kv_vmap_rule_permute(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const int r = kv_arg_tensor(stack, 0)->ndim;
    kv_int_list dims = kv_arg_ints(stack, 1);
    if (dims.n != r) DECLINE();
    int64_t perm[KV_MAX_DIMS];
    bool seen[KV_MAX_DIMS] = { false };
    perm[0] = 0;
    for (int i = 0; i < r; i++) {
        const int d = kv_vmap_logical_dim(dims.items[i], r);
        if (d < 0 || seen[d]) DECLINE();
        seen[d] = true;
        perm[i + 1] = d + 1;
    }
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.ints = (kv_int_list){ perm, r + 1 };
    return run_front(op, stack, slots, bi, ctx);
}

/* select.int(self, dim, index) */
kv_status kv_vmap_rule_select(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (self->ndim == 0) DECLINE();
    const int d = kv_vmap_logical_dim(kv_arg_int(stack, 1), self->ndim);
    if (d < 0) DECLINE();
    const int64_t index = kv_arg_int(stack, 2), size = self->sizes[d];
    if (index < -size || index >= size) DECLINE();
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.i = d + 1;
    return run_front(op, stack, slots, bi, ctx);
}

/* slice.Tensor(self, dim, start, end, step) */
kv_status kv_vmap_rule_slice(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (self->ndim == 0 || kv_arg_int(stack, 4) <= 0) DECLINE();
    const int d = kv_vmap_logical_dim(kv_arg_int(stack, 1), self->ndim);
    if (d < 0) DECLINE();
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.i = d + 1;
    return run_front(op, stack, slots, bi, ctx);
}

kv_status kv_vmap_rule_squeeze_dim(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const int r = kv_arg_tensor(stack, 0)->ndim;
    const int d = kv_vmap_logical_dim(kv_arg_int(stack, 1), r);
    if (d < 0) DECLINE();
    if (r == 0) return alias_of(op, stack, bi, ctx);
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.i = d + 1;
    return run_front(op, stack, slots, bi, ctx);
}

/* unsqueeze(self, dim): dim ranges over the r + 1 dims of the result. */
kv_status kv_vmap_rule_unsqueeze(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const int r = kv_arg_tensor(stack, 0)->ndim;
    const int d = kv_vmap_logical_dim(kv_arg_int(stack, 1), r + 1);
    if (d < 0 || r + 2 > KV_MAX_DIMS) DECLINE();
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[1].v.i = d + 1;
    return run_front(op, stack, slots, bi, ctx);
}

/* expand(self, size, implicit): logical sizes line up from the right, so
 * the physical tensor first gets size-1 dims after the batch dim for the
 * new leading dims (which must not be -1: that is the op's error). */
kv_status kv_vmap_rule_expand(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx, bool *declined) {
    const struct kv_batched_info *bi = self_info(stack, ctx);
    if (bi == NULL) DECLINE();
    const int r = kv_arg_tensor(stack, 0)->ndim;
    kv_int_list size = kv_arg_ints(stack, 1);
    if (size.n < r || size.n + 1 > KV_MAX_DIMS) DECLINE();
    for (int i = 0; i < size.n - r; i++)
        if (size.items[i] < 0) DECLINE();
    kv_tensor *f = kv_vmap_front(bi);
    if (f == NULL) return kv_vmap_failed(kv_op_name(op));
    int64_t padded[KV_MAX_DIMS], target[KV_MAX_DIMS];
    padded[0] = target[0] = ctx->batch_size;
    for (int i = 0; i < size.n; i++) {
        padded[i + 1] = i < size.n - r ? 1 : f->sizes[i - (size.n - r) + 1];
        target[i + 1] = size.items[i];
    }
    kv_tensor *p = f;
    if (size.n > r) {
        p = kv_view(f, (kv_int_list){ padded, size.n + 1 });
        kv_tensor_release(f);
        if (p == NULL) return kv_vmap_failed(kv_op_name(op));
    }
    kv_ivalue slots[KV_STACK_MAX];
    copy_slots(slots, stack);
    slots[0].v.tensor = p;
    slots[1].v.ints = (kv_int_list){ target, size.n + 1 };
    kv_tensor *out = kv_vmap_call_physical(op, slots, stack->size);
    kv_tensor_release(p);
    if (out == NULL) return kv_vmap_failed(kv_op_name(op));
    return kv_vmap_return_wrapped(stack, out, 0, ctx);
}
