/* The CPU backend's variant sets: "ref" for every op (the kernel
 * kernels/ref registered at the CPU key, still the golden reference) and
 * the optimized variants of kernels/cpu, in the order the tuner lists
 * them (a tie goes to the earlier one; without tuning the last compatible
 * one runs, so the most specialized come last).
 *
 * Each variant declares the non-tensor arguments that join the geometry
 * (kv_tune_register_variant_args): the reductions, softmax, the norms and
 * the direct kernels depend on their dims, sizes and flags ("*ints"), pow
 * on its exponent (2, 0.5 and -1 skip libm); alphas and clamp bounds are
 * values that cost the same whatever they are. */
#include "cpu/cpu.h"

#include <stddef.h>

#include "kv/op_ids.h"
#include "kv/tune.h"

typedef struct cpu_variant {
    const char *op;
    const char *name;
    kv_kernel_fn fn;
    kv_tune_pred_fn pred;
    const char *depends; /* kv_tune_register_variant_args' depends_on */
} cpu_variant;

#define EWD(op, dep)                                                           \
    { op, "sse2", kv_cpu_ew_sse2_kernel, kv_cpu_ew_sse2_pred, dep },           \
    { op, "avx2", kv_cpu_ew_avx2_kernel, kv_cpu_ew_avx2_pred, dep },           \
    { op, "avx512", kv_cpu_ew_avx512_kernel, kv_cpu_ew_avx512_pred, dep },     \
    { op, "threads", kv_cpu_ew_threads_kernel, kv_cpu_ew_threads_pred, dep }
#define EW(op) EWD(op, NULL)

#define RED(op)                                                               \
    { op, "vec", kv_cpu_reduce_vec_kernel, kv_cpu_reduce_pred, "*ints" },     \
    { op, "pairwise", kv_cpu_reduce_pairwise_kernel, kv_cpu_reduce_pred, "*ints" }

#define MM(op)                                                                \
    { op, "blocked", kv_cpu_mm_blocked_kernel, kv_cpu_mm_blocked_pred, NULL }, \
    { op, "avx2", kv_cpu_mm_avx2_kernel, kv_cpu_mm_avx2_pred, NULL },          \
    { op, "avx512", kv_cpu_mm_avx512_kernel, kv_cpu_mm_avx512_pred, NULL }

#define DIRECT(op, family) { op, "direct", kv_cpu_##family##_kernel, kv_cpu_##family##_pred, "*ints" }

/* out= ops: every call is compatible (the functional op's variants do the
 * choosing); the values shape the problem as they do for the functional. */
#define OUT(op) { op, "functional", kv_cpu_out_kernel, NULL, "*ints" }

static const cpu_variant cpu_variants[] = {
    /* elementwise */
    EW("add.Tensor"), EW("add_.Tensor"), EW("sub.Tensor"), EW("mul.Tensor"), EW("mul_.Tensor"), EW("div.Tensor"),
    EW("maximum"), EW("minimum"), EWD("pow.Tensor_Scalar", "exponent"), EW("neg"), EW("abs"), EW("exp"), EW("log"), EW("sqrt"),
    EW("rsqrt"), EW("sin"), EW("cos"), EW("tanh"), EW("sigmoid"), EW("relu"), EW("gelu"), EW("silu"), EW("clamp"),
    EW("clamp_.Tensor"), EW("clamp.Tensor"), EW("where.self"), EW("eq.Tensor"), EW("lt.Tensor"),
    EW("gelu_backward"),
    /* reductions */
    RED("sum.dim_IntList"), RED("mean.dim"), RED("prod.dim_int"), RED("amax"), RED("argmax"),
    /* matmul */
    MM("mm"), MM("bmm"), MM("addmm"),
    /* normalization */
    { "_softmax", "vec", kv_cpu_softmax_vec_kernel, kv_cpu_softmax_pred, "*ints" },
    { "_softmax", "fused", kv_cpu_softmax_fused_kernel, kv_cpu_softmax_pred, "*ints" },
    { "_log_softmax", "vec", kv_cpu_softmax_vec_kernel, kv_cpu_softmax_pred, "*ints" },
    { "_log_softmax", "fused", kv_cpu_softmax_fused_kernel, kv_cpu_softmax_pred, "*ints" },
    { "native_layer_norm", "vec", kv_cpu_norm_vec_kernel, kv_cpu_norm_vec_pred, "*ints" },
    { "native_layer_norm", "fused", kv_cpu_norm_fused_kernel, kv_cpu_norm_fused_pred, "*ints" },
    { "native_group_norm", "fused", kv_cpu_norm_fused_kernel, kv_cpu_norm_fused_pred, "*ints" },
    /* moving and filling memory */
    DIRECT("fill_.Scalar", copy), DIRECT("zero_", copy), DIRECT("copy_", copy), DIRECT("clone", copy),
    DIRECT("contiguous", copy), DIRECT("_to_copy", copy), DIRECT("empty.memory_format", copy),
    DIRECT("zeros", copy), DIRECT("ones", copy), DIRECT("full", copy), DIRECT("arange", copy),
    DIRECT("_efficientzerotensor", copy), DIRECT("cat", copy), DIRECT("stack", copy),
    DIRECT("index_select", copy), DIRECT("embedding", copy),
    /* views */
    DIRECT("view", view), DIRECT("reshape", view), DIRECT("_unsafe_view", view), DIRECT("transpose.int", view),
    DIRECT("t", view), DIRECT("permute", view), DIRECT("select.int", view), DIRECT("slice.Tensor", view),
    DIRECT("squeeze", view), DIRECT("squeeze.dim", view), DIRECT("unsqueeze", view), DIRECT("expand", view),
    DIRECT("as_strided", view), DIRECT("detach", view), DIRECT("unfold", view),
    /* lazy bits */
    DIRECT("conj", lazy), DIRECT("_conj", lazy), DIRECT("conj_physical", lazy), DIRECT("resolve_conj", lazy),
    DIRECT("_neg_view", lazy), DIRECT("resolve_neg", lazy), DIRECT("is_conj", lazy), DIRECT("is_neg", lazy),
    DIRECT("_is_zerotensor", lazy),
    /* backward */
    DIRECT("as_strided_backward", backward), DIRECT("unfold_backward", backward),
    DIRECT("index_select_backward", backward), DIRECT("embedding_dense_backward", backward),
    /* repeat, masked_fill, random */
    DIRECT("repeat", repeat), DIRECT("masked_fill.Scalar", masked_fill), DIRECT("masked_fill_.Scalar", masked_fill),
    DIRECT("bernoulli.p", random),
    OUT("add.out"), OUT("mul.out"), OUT("mm.out"), OUT("cat.out"), OUT("sum.IntList_out"), OUT("clamp.out"),
    /* foreach: every call is compatible (each element's add variant is chosen per element) */
    { "_foreach_add.List", "elementwise", kv_cpu_foreach_kernel, NULL, NULL },
    { "_foreach_add_.List", "elementwise", kv_cpu_foreach_kernel, NULL, NULL },
    { "_foreach_mul.Scalar", "elementwise", kv_cpu_foreach_kernel, NULL, NULL },
};

kv_status kv_cpu_variants_register(void) {
    kv_status env = kv_cpu_isa_env_check();
    if (env != KV_OK) return env;
    for (int id = 0; id < KV_OP_COUNT; id++) {
        const kv_op *op = kv_op_find(kv_op_names[id]);
        if (op == NULL) return kv_last_error();
        /* Registered already (a second kv_tune_register): nothing to do. */
        if (kv_tune_variant_count(op, KV_KEY_CPU) > 0) return KV_OK;
        if (kv_op_entry_kind(op, KV_KEY_CPU) != KV_ENTRY_KERNEL)
            return kv_error(KV_ERR_INTERNAL, "%s: no CPU reference kernel to register as variant 'ref'", kv_op_names[id]);
        kv_status st = kv_tune_register_variant(kv_op_names[id], KV_KEY_CPU, "ref", kv_op_entry_fn(op, KV_KEY_CPU), NULL);
        if (st != KV_OK) return st;
    }
    for (size_t i = 0; i < sizeof cpu_variants / sizeof cpu_variants[0]; i++) {
        const cpu_variant *v = &cpu_variants[i];
        kv_status st = kv_tune_register_variant_args(v->op, KV_KEY_CPU, v->name, v->fn, v->pred, v->depends);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
