/* Which exact family computes each op's golden, and the entry point
 * (runner/golden/exact.h). */
#include "runner/golden/exact.h"

#include <string.h>

#include "ref/ref.h"

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
    { "_foreach_add.List", KV_EXACT_FOREACH },
    { "_foreach_add_.List", KV_EXACT_FOREACH },
    { "_foreach_mul.Scalar", KV_EXACT_FOREACH },
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
    case KV_EXACT_FOREACH: return "foreach";
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

/* Whether the w-byte float at p is a NaN: all exponent bits set and a
 * non-zero fraction, read from its bits (little-endian). */
static bool nan_bits(kv_dtype rd, const unsigned char *p) {
    switch (rd) {
    case KV_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0;
    }
    case KV_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7F80u) == 0x7F80u && (h & 0x007Fu) != 0;
    }
    case KV_F32: {
        uint32_t u;
        memcpy(&u, p, 4);
        return (u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0;
    }
    default: {
        uint64_t u;
        memcpy(&u, p, 8);
        return (u & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (u & 0x000FFFFFFFFFFFFFull) != 0;
    }
    }
}

void kv_exact_canonical_nans(kv_case_outputs *out) {
    for (int i = 0; i < out->n; i++) {
        kv_tensor *t = out->t[i];
        if (t == NULL || kv_tensor_numel(t) == 0) continue;
        const kv_dtype rd = kv_dtype_to_real(t->dtype);
        if (!kv_dtype_is_floating(rd)) continue;
        const int parts = kv_dtype_is_complex(t->dtype) ? 2 : 1;
        const size_t w = kv_dtype_size(rd);
        int64_t idx[KV_MAX_DIMS] = { 0 };
        const int64_t n = kv_tensor_numel(t);
        for (int64_t k = 0; k < n; k++) {
            unsigned char *p = kv_tensor_element(t, idx);
            for (int c = 0; c < parts; c++, p += w)
                if (nan_bits(rd, p)) p[w - 1] &= 0x7F; /* the sign: top bit of the last byte */
            for (int d = t->ndim - 1; d >= 0; d--) {
                if (++idx[d] < t->sizes[d]) break;
                idx[d] = 0;
            }
        }
    }
}

/* The family function of the op over inputs `in` (contiguous CPU,
 * unchanged by the reference call). */
static kv_status exact_dispatch(const kv_case *c, const kv_op *op, kv_case_inputs *in, kv_case_outputs *out,
                                kv_exact_stats *stats) {
    kv_status st = KV_OK;
    const kv_exact_call x = { c, op, kv_op_name(op), in, out, stats };
    switch (kv_exact_family_of(kv_op_name(op))) {
    case KV_EXACT_REF: break;
    case KV_EXACT_UNARY: st = kv_exact_unary(&x); break;
    case KV_EXACT_BINARY: st = kv_exact_binary(&x); break;
    case KV_EXACT_GELU_BACKWARD: st = kv_exact_gelu_backward(&x); break;
    case KV_EXACT_REDUCE: st = kv_exact_reduce(&x); break;
    case KV_EXACT_MATMUL: st = kv_exact_matmul(&x); break;
    case KV_EXACT_SOFTMAX: st = kv_exact_softmax(&x); break;
    case KV_EXACT_NORM: st = kv_exact_norm(&x); break;
    case KV_EXACT_SCATTER: st = kv_exact_scatter(&x); break;
    case KV_EXACT_FOREACH: st = kv_exact_foreach(&x); break;
    }
    return st;
}

/* An out= op: its functional op's truth, written into out by the
 * reference's out= rules (kernels/ref/ref_out.c), so a dtype promotion
 * into out rounds the truth in the result's dtype first, as PyTorch does. */
typedef struct exact_out_ctx {
    const kv_case *c;
    kv_case_inputs *in;
    kv_exact_stats *stats;
} exact_out_ctx;

/* The reference step, then (for the functional op) the truth over its
 * result. */
static kv_status exact_out_step(const kv_op *op, kv_stack *stack, void *ctx) {
    const exact_out_ctx *x = ctx;
    kv_status st = kv_ref_out_step_reference(op, stack, NULL);
    if (st != KV_OK || strcmp(kv_op_name(op), "copy_") == 0) return st;
    kv_case_outputs fo = { .n = 1, .t = { kv_arg_tensor(stack, 0) } };
    if (fo.t[0] == NULL || kv_exact_family_of(kv_op_name(op)) == KV_EXACT_REF || !has_floating_output(&fo))
        return KV_OK;
    kv_case_inputs fin = *x->in; /* the out argument is last: the functional's are the others */
    fin.nargs--;
    return exact_dispatch(x->c, op, &fin, &fo, x->stats);
}

static kv_status exact_out(const kv_case *c, const kv_op *op, kv_case_outputs *out, kv_exact_stats *stats) {
    if (!has_floating_output(out)) return KV_OK;
    kv_case_inputs in;
    kv_status st = kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, &in);
    if (st != KV_OK) return st;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack stack = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < in.nargs && st == KV_OK; i++) st = kv_stack_push(&stack, in.args[i]);
    exact_out_ctx ctx = { c, &in, stats };
    if (st == KV_OK) st = kv_ref_out_run(op, &stack, exact_out_step, &ctx);
    if (st == KV_OK) {
        kv_tensor *truth = kv_arg_tensor(&stack, 0);
        kv_tensor_release(out->t[0]);
        out->t[0] = truth; /* the stack's reference moves here */
        out->n = 1;
        kv_exact_canonical_nans(out);
    }
    kv_case_inputs_free(&in);
    return st;
}

kv_status kv_exact_golden(const kv_case *c, const kv_op *op, kv_case_outputs *out, kv_exact_stats *stats) {
    if (kv_ref_out_functional(kv_op_name(op)) != NULL) return exact_out(c, op, out, stats);
    kv_exact_canonical_nans(out);
    const kv_exact_family f = kv_exact_family_of(kv_op_name(op));
    if (f == KV_EXACT_REF || !has_floating_output(out)) return KV_OK;
    kv_case_inputs in;
    kv_status st = kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, &in);
    if (st != KV_OK) return st;
    st = exact_dispatch(c, op, &in, out, stats);
    kv_case_inputs_free(&in);
    return st;
}

kv_status kv_exact_golden_given(const kv_case *c, const kv_op *op, kv_case_inputs *in, kv_case_outputs *out,
                                kv_exact_stats *stats) {
    kv_exact_canonical_nans(out);
    if (kv_exact_family_of(kv_op_name(op)) == KV_EXACT_REF || !has_floating_output(out)) return KV_OK;
    return exact_dispatch(c, op, in, out, stats);
}
