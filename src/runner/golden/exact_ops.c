/* Which exact family computes each op's golden, and the entry point
 * (runner/golden/exact.h). */
#include "runner/golden/exact.h"

#include <string.h>

typedef struct op_family {
    const char *op;
    kv_exact_family family;
} op_family;

/* Ops not listed are KV_EXACT_REF: their floating results are exact in
 * double (factories, fills, copies and conversions — one rounding of an
 * exact value —, views, joins, index/embedding selections, neg, abs of a
 * real, relu, clamp, maximum/minimum, where, amax, comparisons and the
 * lazy-bit ops), so the reference's values are the truth. abs of a
 * complex input is hypot, so abs is listed. */
static const op_family families[] = {
    { "abs", KV_EXACT_UNARY },
    { "exp", KV_EXACT_UNARY },
    { "log", KV_EXACT_UNARY },
    { "sqrt", KV_EXACT_UNARY },
    { "rsqrt", KV_EXACT_UNARY },
    { "sin", KV_EXACT_UNARY },
    { "cos", KV_EXACT_UNARY },
    { "tanh", KV_EXACT_UNARY },
    { "sigmoid", KV_EXACT_UNARY },
    { "silu", KV_EXACT_UNARY },
    { "gelu", KV_EXACT_UNARY },
    { "pow.Tensor_Scalar", KV_EXACT_UNARY },
    { "add.Tensor", KV_EXACT_BINARY },
    { "add_.Tensor", KV_EXACT_BINARY },
    { "sub.Tensor", KV_EXACT_BINARY },
    { "mul.Tensor", KV_EXACT_BINARY },
    { "mul_.Tensor", KV_EXACT_BINARY },
    { "div.Tensor", KV_EXACT_BINARY },
    { "gelu_backward", KV_EXACT_GELU_BACKWARD },
    { "sum.dim_IntList", KV_EXACT_REDUCE },
    { "mean.dim", KV_EXACT_REDUCE },
    { "prod.dim_int", KV_EXACT_REDUCE },
    { "mm", KV_EXACT_MATMUL },
    { "bmm", KV_EXACT_MATMUL },
    { "addmm", KV_EXACT_MATMUL },
    { "_softmax", KV_EXACT_SOFTMAX },
    { "_log_softmax", KV_EXACT_SOFTMAX },
    { "native_layer_norm", KV_EXACT_NORM },
    { "native_group_norm", KV_EXACT_NORM },
    { "as_strided_backward", KV_EXACT_SCATTER },
    { "unfold_backward", KV_EXACT_SCATTER },
    { "index_select_backward", KV_EXACT_SCATTER },
    { "embedding_dense_backward", KV_EXACT_SCATTER },
};

kv_exact_stats *kv_exact_run_stats(void) {
    static kv_exact_stats stats;
    return &stats;
}

kv_exact_family kv_exact_family_of(const char *op) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        if (strcmp(families[i].op, op) == 0) return families[i].family;
    }
    return KV_EXACT_REF;
}

const char *kv_exact_family_name(kv_exact_family f) {
    switch (f) {
    case KV_EXACT_REF: return "ref";
    case KV_EXACT_UNARY: return "unary";
    case KV_EXACT_BINARY: return "binary";
    case KV_EXACT_GELU_BACKWARD: return "gelu_backward";
    case KV_EXACT_REDUCE: return "reduce";
    case KV_EXACT_MATMUL: return "matmul";
    case KV_EXACT_SOFTMAX: return "softmax";
    case KV_EXACT_NORM: return "norm";
    case KV_EXACT_SCATTER: return "scatter";
    }
    return "?";
}

static bool has_floating_output(const kv_case_outputs *out) {
    for (int i = 0; i < out->n; i++) {
        const kv_dtype dt = out->t[i]->dtype;
        if (kv_dtype_is_floating(dt) || kv_dtype_is_complex(dt)) return true;
    }
    return false;
}

kv_status kv_exact_golden(const kv_case *c, const kv_op *op, kv_case_outputs *out, kv_exact_stats *stats) {
    const kv_exact_family f = kv_exact_family_of(kv_op_name(op));
    if (f == KV_EXACT_REF || !has_floating_output(out)) return KV_OK;
    kv_case_inputs in;
    kv_status st = kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, &in);
    if (st != KV_OK) return st;
    const kv_exact_call x = { c, op, kv_op_name(op), &in, out, stats };
    switch (f) {
    case KV_EXACT_REF: break;
    case KV_EXACT_UNARY: st = kv_exact_unary(&x); break;
    case KV_EXACT_BINARY: st = kv_exact_binary(&x); break;
    case KV_EXACT_GELU_BACKWARD: st = kv_exact_gelu_backward(&x); break;
    case KV_EXACT_REDUCE: st = kv_exact_reduce(&x); break;
    case KV_EXACT_MATMUL: st = kv_exact_matmul(&x); break;
    case KV_EXACT_SOFTMAX: st = kv_exact_softmax(&x); break;
    case KV_EXACT_NORM: st = kv_exact_norm(&x); break;
    case KV_EXACT_SCATTER: st = kv_exact_scatter(&x); break;
    }
    kv_case_inputs_free(&in);
    return st;
}
