/* The backward formula table: one row per differentiable op of
 * ops.schema, naming the node PyTorch would name and what the formula
 * needs saved (bits by stack slot / return index). Rows for ops this
 * build lacks are skipped at registration. Lookup by op is one index by
 * the op's builtin id; run-time ops (tests) go through a short list. */
#include <stdlib.h>
#include <string.h>

#include "kv/op_ids.h"
#include "modes/autograd_internal.h"

#define B KV_AG_BIT

const kv_ag_formula kv_ag_formulas[] = {
    /* binary arithmetic */
    { "add.Tensor", "AddBackward0", kv_ag_f_add, 0, 0, 0 },
    { "add_.Tensor", "AddBackward0", kv_ag_f_add, 0, 0, 0 },
    { "sub.Tensor", "SubBackward0", kv_ag_f_sub, 0, 0, 0 },
    { "mul.Tensor", "MulBackward0", kv_ag_f_mul, B(0) | B(1), 0, 0 },
    { "mul_.Tensor", "MulBackward0", kv_ag_f_mul, B(0) | B(1), 0, 0 },
    { "div.Tensor", "DivBackward0", kv_ag_f_div, B(0) | B(1), 0, 0 },
    { "maximum", "MaximumBackward0", kv_ag_f_maximum, B(0) | B(1), 0, 0 },
    { "minimum", "MinimumBackward0", kv_ag_f_minimum, B(0) | B(1), 0, 0 },
    { "pow.Tensor_Scalar", "PowBackward0", kv_ag_f_pow, B(0), 0, 0 },
    /* unary */
    { "neg", "NegBackward0", kv_ag_f_neg, 0, 0, 0 },
    { "abs", "AbsBackward0", kv_ag_f_abs, B(0), 0, 0 },
    { "exp", "ExpBackward0", kv_ag_f_exp, 0, B(0), 0 },
    { "log", "LogBackward0", kv_ag_f_log, B(0), 0, 0 },
    { "sqrt", "SqrtBackward0", kv_ag_f_sqrt, 0, B(0), 0 },
    { "rsqrt", "RsqrtBackward0", kv_ag_f_rsqrt, 0, B(0), 0 },
    { "sin", "SinBackward0", kv_ag_f_sin, B(0), 0, 0 },
    { "cos", "CosBackward0", kv_ag_f_cos, B(0), 0, 0 },
    { "tanh", "TanhBackward0", kv_ag_f_tanh, 0, B(0), 0 },
    { "sigmoid", "SigmoidBackward0", kv_ag_f_sigmoid, 0, B(0), 0 },
    { "relu", "ReluBackward0", kv_ag_f_relu, 0, B(0), 0 },
    { "gelu", "GeluBackward0", kv_ag_f_gelu, B(0), 0, 0 },
    { "silu", "SiluBackward0", kv_ag_f_silu, B(0), 0, 0 },
    { "clamp", "ClampBackward1", kv_ag_f_clamp, B(0), 0, 0 },
    { "clamp.Tensor", "ClampBackward0", kv_ag_f_clamp_tensor, B(0) | B(1) | B(2), 0, 0 },
    { "clamp_.Tensor", "ClampBackward0", kv_ag_f_clamp_tensor, B(0) | B(1) | B(2), 0, 0 },
    /* selection */
    { "where.self", "WhereBackward0", kv_ag_f_where, B(0), 0, 0 },
    { "masked_fill.Scalar", "MaskedFillBackward0", kv_ag_f_masked_fill, B(1), 0, 0 },
    { "masked_fill_.Scalar", "MaskedFillBackward0", kv_ag_f_masked_fill, B(1), 0, 0 },
    /* foreach: one node per call, one output per list element */
    { "_foreach_add.List", "ForeachAddBackward0List", kv_ag_f_foreach_add, 0, 0, 0 },
    { "_foreach_add_.List", "ForeachAddBackward0List", kv_ag_f_foreach_add, 0, 0, 0 },
    { "_foreach_mul.Scalar", "ForeachMulBackward0Scalar", kv_ag_f_foreach_mul_scalar, 0, 0, 0 },
    /* reductions */
    { "sum.dim_IntList", "SumBackward1", kv_ag_f_sum, 0, 0, 0 },
    { "mean.dim", "MeanBackward1", kv_ag_f_mean, 0, 0, 0 },
    { "amax", "AmaxBackward0", kv_ag_f_amax, B(0), B(0), 0 },
    { "prod.dim_int", "ProdBackward1", kv_ag_f_prod, B(0), 0, 0 },
    /* matmul */
    { "mm", "MmBackward0", kv_ag_f_mm, B(0) | B(1), 0, 0 },
    { "bmm", "BmmBackward0", kv_ag_f_bmm, B(0) | B(1), 0, 0 },
    { "addmm", "AddmmBackward0", kv_ag_f_addmm, B(1) | B(2), 0, 0 },
    /* normalization */
    { "_softmax", "SoftmaxBackward0", kv_ag_f_softmax, 0, B(0), 0 },
    { "_log_softmax", "LogSoftmaxBackward0", kv_ag_f_log_softmax, 0, B(0), 0 },
    { "native_layer_norm", "NativeLayerNormBackward0", kv_ag_f_layer_norm, B(0) | B(2), B(1) | B(2), B(0) },
    { "native_group_norm", "NativeGroupNormBackward0", kv_ag_f_group_norm, B(0) | B(1), B(1) | B(2), B(0) },
    /* joining and indexing */
    { "cat", "CatBackward0", kv_ag_f_cat, 0, 0, 0 },
    { "stack", "StackBackward0", kv_ag_f_stack, 0, 0, 0 },
    { "index_select", "IndexSelectBackward0", kv_ag_f_index_select, B(2), 0, 0 },
    { "embedding", "EmbeddingBackward0", kv_ag_f_embedding, B(1), 0, 0 },
    /* filling and copying */
    { "fill_.Scalar", "FillBackward0", kv_ag_f_zero_self, 0, 0, 0 },
    { "zero_", "ZeroBackward0", kv_ag_f_zero_self, 0, 0, 0 },
    { "copy_", "CopyBackwards", kv_ag_f_copy_, 0, 0, 0 },
    { "clone", "CloneBackward0", kv_ag_f_identity, 0, 0, 0 },
    { "contiguous", "CloneBackward0", kv_ag_f_identity, 0, 0, 0 },
    { "_to_copy", "ToCopyBackward0", kv_ag_f_to_copy, 0, 0, 0 },
    /* views */
    { "view", "ViewBackward0", kv_ag_f_reshape, 0, 0, 0 },
    { "reshape", "ViewBackward0", kv_ag_f_reshape, 0, 0, 0 },
    { "_unsafe_view", "UnsafeViewBackward0", kv_ag_f_reshape, 0, 0, 0 },
    { "transpose.int", "TransposeBackward0", kv_ag_f_transpose, 0, 0, 0 },
    { "t", "TBackward0", kv_ag_f_t, 0, 0, 0 },
    { "permute", "PermuteBackward0", kv_ag_f_permute, 0, 0, 0 },
    { "select.int", "SelectBackward0", kv_ag_f_select, 0, 0, 0 },
    { "slice.Tensor", "SliceBackward0", kv_ag_f_slice, 0, 0, 0 },
    { "squeeze", "SqueezeBackward0", kv_ag_f_reshape, 0, 0, 0 },
    { "squeeze.dim", "SqueezeBackward1", kv_ag_f_reshape, 0, 0, 0 },
    { "unsqueeze", "UnsqueezeBackward0", kv_ag_f_reshape, 0, 0, 0 },
    { "expand", "ExpandBackward0", kv_ag_f_expand, 0, 0, 0 },
    { "as_strided", "AsStridedBackward0", kv_ag_f_as_strided, 0, 0, 0 },
    { "unfold", "UnfoldBackward0", kv_ag_f_unfold, 0, 0, 0 },
    { "repeat", "RepeatBackward0", kv_ag_f_repeat, 0, 0, 0 },
    /* random: the samples do not depend on self's values */
    { "bernoulli.p", "BernoulliBackward1", kv_ag_f_zero_self, 0, 0, 0 },
    /* lazy bits */
    { "conj", "ConjBackward0", kv_ag_f_conj, 0, 0, 0 },
    { "_conj", "ConjBackward0", kv_ag_f_conj, 0, 0, 0 },
    { "conj_physical", "ConjPhysicalBackward0", kv_ag_f_conj, 0, 0, 0 },
    { "resolve_conj", "ResolveConjBackward0", kv_ag_f_identity, 0, 0, 0 },
    { "_neg_view", "NegViewBackward0", kv_ag_f_neg_view, 0, 0, 0 },
    { "resolve_neg", "ResolveNegBackward0", kv_ag_f_identity, 0, 0, 0 },
};

const int kv_ag_nformulas = (int)(sizeof kv_ag_formulas / sizeof kv_ag_formulas[0]);

/* ---- lookup ---- */

static const kv_ag_formula *g_by_id[KV_OP_COUNT];
static bool g_by_id_ready;

typedef struct runtime_row {
    const kv_op *op;
    const kv_ag_formula *row;
} runtime_row;

static runtime_row *g_runtime;
static int g_nruntime;

static const kv_ag_formula *table_row(const char *name) {
    for (int i = 0; i < kv_ag_nformulas; i++)
        if (strcmp(kv_ag_formulas[i].op, name) == 0) return &kv_ag_formulas[i];
    return NULL;
}

static void build_by_id(void) {
    for (int id = 0; id < KV_OP_COUNT; id++) g_by_id[id] = table_row(kv_op_names[id]);
    g_by_id_ready = true;
}

const kv_ag_formula *kv_ag_formula_for(const kv_op *op) {
    if (!g_by_id_ready) build_by_id();
    for (int i = 0; i < g_nruntime; i++)
        if (g_runtime[i].op == op) return g_runtime[i].row;
    int id = kv_op_builtin_id(op);
    return (id >= 0 && id < KV_OP_COUNT) ? g_by_id[id] : NULL;
}

kv_status kv_ag_register_formula(const kv_op *op, const kv_ag_formula *row) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_ag_register_formula: argument 'op': NULL");
    if (!g_by_id_ready) build_by_id();
    for (int i = 0; i < g_nruntime; i++) {
        if (g_runtime[i].op != op) continue;
        if (row) {
            g_runtime[i].row = row;
        } else {
            g_runtime[i] = g_runtime[--g_nruntime];
        }
        return kv_register_kernel(kv_op_name(op), KV_KEY_AUTOGRAD, kv_ag_kernel);
    }
    if (row == NULL) return KV_OK;
    runtime_row *grown = realloc(g_runtime, (size_t)(g_nruntime + 1) * sizeof *grown);
    if (grown == NULL) return kv_error(KV_ERR_OOM, "kv_ag_register_formula: out of host memory");
    g_runtime = grown;
    g_runtime[g_nruntime++] = (runtime_row){ op, row };
    return kv_register_kernel(kv_op_name(op), KV_KEY_AUTOGRAD, kv_ag_kernel);
}

/* ---- public view of the table ---- */

int kv_autograd_formula_count(void) { return kv_ag_nformulas; }

const char *kv_autograd_formula_op(int i) { return (i >= 0 && i < kv_ag_nformulas) ? kv_ag_formulas[i].op : NULL; }

const char *kv_autograd_formula_node_name(int i) {
    return (i >= 0 && i < kv_ag_nformulas) ? kv_ag_formulas[i].node_name : NULL;
}

bool kv_autograd_has_formula(const kv_op *op) { return op && kv_ag_formula_for(op) != NULL; }
