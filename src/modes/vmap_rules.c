/* The batching-rule table, the kernel every rule op gets at
 * KV_KEY_BATCHED, the helpers rules share, and kv_vmap_register.
 *
 * One row per op: its full name and the kind of rule that batches it.
 * Rule kinds, not per-op code, because the batching of an op follows from
 * its shape semantics (elementwise, reduce over dims, matrix product, view
 * with dims): the kind says how to move the batch dim and shift dims; the
 * op itself then runs on the physical tensors. */
#include <string.h>

#include "kv/op_ids.h"
#include "kv/ops.h"
#include "modes/vmap_internal.h"

typedef enum vmap_rule_kind {
    RULE_UNARY,       /* one tensor, elementwise: runs on the physical tensor as is */
    RULE_POINTWISE,   /* broadcasting elementwise over several tensors */
    RULE_REDUCE_DIMS, /* int[1]? / int[1] dim: None or [] means every logical dim */
    RULE_REDUCE_DIM,  /* one int dim */
    RULE_ARGMAX,      /* int? dim: None flattens the logical dims */
    RULE_SOFTMAX,     /* one int dim, shape kept */
    RULE_MM,
    RULE_BMM,
    RULE_VIEW_SIZE,   /* view / reshape: the batch size prepended to the size */
    RULE_TRANSPOSE,
    RULE_T,
    RULE_PERMUTE,
    RULE_SELECT,
    RULE_SLICE,
    RULE_SQUEEZE_DIM,
    RULE_UNSQUEEZE,
    RULE_EXPAND
} vmap_rule_kind;

typedef struct vmap_rule_row {
    const char *op;
    vmap_rule_kind kind;
} vmap_rule_row;

static const vmap_rule_row k_rules[] = {
    /* elementwise */
    { "add.Tensor", RULE_POINTWISE },
    { "sub.Tensor", RULE_POINTWISE },
    { "mul.Tensor", RULE_POINTWISE },
    { "div.Tensor", RULE_POINTWISE },
    { "maximum", RULE_POINTWISE },
    { "minimum", RULE_POINTWISE },
    { "where.self", RULE_POINTWISE },
    { "masked_fill.Scalar", RULE_POINTWISE },
    { "eq.Tensor", RULE_POINTWISE },
    { "lt.Tensor", RULE_POINTWISE },
    { "pow.Tensor_Scalar", RULE_UNARY },
    { "neg", RULE_UNARY },
    { "abs", RULE_UNARY },
    { "exp", RULE_UNARY },
    { "log", RULE_UNARY },
    { "sqrt", RULE_UNARY },
    { "rsqrt", RULE_UNARY },
    { "sin", RULE_UNARY },
    { "cos", RULE_UNARY },
    { "tanh", RULE_UNARY },
    { "sigmoid", RULE_UNARY },
    { "relu", RULE_UNARY },
    { "gelu", RULE_UNARY },
    { "silu", RULE_UNARY },
    { "clamp", RULE_UNARY },
    { "clone", RULE_UNARY },
    { "_to_copy", RULE_UNARY },
    /* reductions */
    { "sum.dim_IntList", RULE_REDUCE_DIMS },
    { "mean.dim", RULE_REDUCE_DIMS },
    { "amax", RULE_REDUCE_DIMS },
    { "prod.dim_int", RULE_REDUCE_DIM },
    { "argmax", RULE_ARGMAX },
    { "_softmax", RULE_SOFTMAX },
    { "_log_softmax", RULE_SOFTMAX },
    /* matmul */
    { "mm", RULE_MM },
    { "bmm", RULE_BMM },
    /* views */
    { "view", RULE_VIEW_SIZE },
    { "reshape", RULE_VIEW_SIZE },
    { "transpose.int", RULE_TRANSPOSE },
    { "t", RULE_T },
    { "permute", RULE_PERMUTE },
    { "select.int", RULE_SELECT },
    { "slice.Tensor", RULE_SLICE },
    { "squeeze.dim", RULE_SQUEEZE_DIM },
    { "unsqueeze", RULE_UNSQUEEZE },
    { "expand", RULE_EXPAND },
    /* detach keeps the geometry, so it batches like a unary op */
    { "detach", RULE_UNARY },
};

static kv_vmap_rule_fn rule_fn(vmap_rule_kind kind) {
    switch (kind) {
    case RULE_UNARY: return kv_vmap_rule_unary;
    case RULE_POINTWISE: return kv_vmap_rule_pointwise;
    case RULE_REDUCE_DIMS: return kv_vmap_rule_reduce_dims;
    case RULE_REDUCE_DIM: return kv_vmap_rule_reduce_dim;
    case RULE_ARGMAX: return kv_vmap_rule_argmax;
    case RULE_SOFTMAX: return kv_vmap_rule_softmax;
    case RULE_MM: return kv_vmap_rule_mm;
    case RULE_BMM: return kv_vmap_rule_bmm;
    case RULE_VIEW_SIZE: return kv_vmap_rule_view_size;
    case RULE_TRANSPOSE: return kv_vmap_rule_transpose;
    case RULE_T: return kv_vmap_rule_t;
    case RULE_PERMUTE: return kv_vmap_rule_permute;
    case RULE_SELECT: return kv_vmap_rule_select;
    case RULE_SLICE: return kv_vmap_rule_slice;
    case RULE_SQUEEZE_DIM: return kv_vmap_rule_squeeze_dim;
    case RULE_UNSQUEEZE: return kv_vmap_rule_unsqueeze;
    case RULE_EXPAND: return kv_vmap_rule_expand;
    }
    return NULL;
}

/* Filled once by kv_vmap_register (during kv_init), read-only after. */
static kv_vmap_rule_fn g_rule_of[KV_OP_COUNT];

bool kv_vmap_has_rule(const char *full_name) {
    if (full_name == NULL) return false;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++)
        if (strcmp(k_rules[i].op, full_name) == 0) return true;
    return false;
}

/* ---- helpers for the rules ---- */

kv_tensor *kv_vmap_call_physical(const kv_op *op, kv_ivalue *slots, int n) {
    kv_stack s = { slots, n, KV_STACK_MAX };
    if (kv_call(op, &s) != KV_OK) return NULL;
    if (s.size < 1 || s.slots[0].tag != KV_IV_TENSOR) {
        kv_stack_clear_returns(&s);
        kv_error(KV_ERR_INTERNAL, "%s: vmap: the op returned no tensor", kv_op_name(op));
        return NULL;
    }
    kv_tensor *r = s.slots[0].v.tensor;
    for (int i = 1; i < s.size; i++)
        if (s.slots[i].tag == KV_IV_TENSOR) kv_tensor_release(s.slots[i].v.tensor);
    return r;
}

kv_status kv_vmap_return_wrapped(kv_stack *stack, kv_tensor *physical, int64_t bdim, const kv_vmap_ctx *ctx) {
    kv_tensor *w = kv_vmap_wrap_owned(physical, bdim, ctx->level);
    if (w == NULL) return kv_vmap_failed("vmap");
    kv_stack_return_tensor(stack, w);
    return KV_OK;
}

int kv_vmap_logical_dim(int64_t dim, int ndim) {
    if (ndim == 0) return (dim == 0 || dim == -1) ? 0 : -1;
    if (dim < -ndim || dim >= ndim) return -1;
    return (int)(dim < 0 ? dim + ndim : dim);
}

/* ---- the kernel ---- */

static kv_status vmap_rule_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_vmap_ctx ctx;
    kv_status st = kv_vmap_scan_args(op, stack, &ctx);
    if (st != KV_OK) return st;
    if (ctx.level == 0) return kv_redispatch(op, ks & kv_keyset_below(KV_KEY_BATCHED), stack);
    const int id = kv_op_builtin_id(op);
    kv_vmap_rule_fn fn = (id >= 0 && id < KV_OP_COUNT) ? g_rule_of[id] : NULL;
    if (fn == NULL || stack->size > KV_STACK_MAX) return kv_vmap_fallback_run(op, stack, &ctx);
    bool declined = false;
    st = fn(op, stack, &ctx, &declined);
    if (declined) return kv_vmap_fallback_run(op, stack, &ctx);
    kv_vmap_count_rule(op);
    return st;
}

kv_status kv_vmap_register(void) {
    kv_tensor_batched_free_hook = kv_vmap_batched_free;
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++) {
        const kv_op *op = kv_op_find(k_rules[i].op);
        if (op == NULL) return kv_last_error();
        const int id = kv_op_builtin_id(op);
        if (id < 0 || id >= KV_OP_COUNT)
            return kv_error(KV_ERR_INTERNAL, "vmap: register: '%s' is not a built-in op", k_rules[i].op);
        g_rule_of[id] = rule_fn(k_rules[i].kind);
        kv_status st = kv_register_kernel(k_rules[i].op, KV_KEY_BATCHED, vmap_rule_kernel);
        if (st != KV_OK) return st;
    }
    kv_register_fallback(KV_KEY_BATCHED, kv_vmap_fallback_kernel);
    /* VmapMode only marks "inside vmap" (PyTorch gives it kernels for
     * random ops alone, and kvsuite has none). */
    kv_register_fallback_fallthrough(KV_KEY_VMAP_MODE);
    return KV_OK;
}
