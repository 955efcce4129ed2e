/* The CPU backend's op table: one reference kernel per op.
 *
 * The switch has no default on purpose: an op added to ops.schema without
 * a reference kernel is a compile error (-Wswitch -Werror), and
 * tests/test_op_coverage.c checks the same at run time. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

#include "kv/op_ids.h"

static kv_kernel_fn ref_kernel_for(kv_op_id id) {
    switch (id) {
    case KV_OP_EMPTY_MEMORY_FORMAT: return kv_ref_empty;
    case KV_OP_ZEROS: return kv_ref_zeros;
    case KV_OP_ONES: return kv_ref_ones;
    case KV_OP_FULL: return kv_ref_full;
    case KV_OP_ARANGE: return kv_ref_arange;
    case KV_OP_FILL__SCALAR: return kv_ref_fill_;
    case KV_OP_ZERO_: return kv_ref_zero_;
    case KV_OP_COPY_: return kv_ref_copy_;
    case KV_OP_CLONE: return kv_ref_clone;
    case KV_OP_CONTIGUOUS: return kv_ref_contiguous;
    case KV_OP__TO_COPY: return kv_ref__to_copy;
    case KV_OP_ADD_TENSOR: return kv_ref_add;
    case KV_OP_ADD__TENSOR: return kv_ref_add_;
    case KV_OP_SUB_TENSOR: return kv_ref_sub;
    case KV_OP_MUL_TENSOR: return kv_ref_mul;
    case KV_OP_MUL__TENSOR: return kv_ref_mul_;
    case KV_OP_DIV_TENSOR: return kv_ref_div;
    case KV_OP_MAXIMUM: return kv_ref_maximum;
    case KV_OP_MINIMUM: return kv_ref_minimum;
    case KV_OP_POW_TENSOR_SCALAR: return kv_ref_pow;
    case KV_OP_NEG: return kv_ref_neg;
    case KV_OP_ABS: return kv_ref_abs;
    case KV_OP_EXP: return kv_ref_exp;
    case KV_OP_LOG: return kv_ref_log;
    case KV_OP_SQRT: return kv_ref_sqrt;
    case KV_OP_RSQRT: return kv_ref_rsqrt;
    case KV_OP_SIN: return kv_ref_sin;
    case KV_OP_COS: return kv_ref_cos;
    case KV_OP_TANH: return kv_ref_tanh;
    case KV_OP_SIGMOID: return kv_ref_sigmoid;
    case KV_OP_RELU: return kv_ref_relu;
    case KV_OP_GELU: return kv_ref_gelu;
    case KV_OP_SILU: return kv_ref_silu;
    case KV_OP_CLAMP: return kv_ref_clamp;
    case KV_OP_CLAMP__TENSOR: return kv_ref_clamp_;
    case KV_OP_WHERE_SELF: return kv_ref_where;
    case KV_OP_EQ_TENSOR: return kv_ref_eq;
    case KV_OP_LT_TENSOR: return kv_ref_lt;
    case KV_OP_SUM_DIM_INTLIST: return kv_ref_sum;
    case KV_OP_MEAN_DIM: return kv_ref_mean;
    case KV_OP_AMAX: return kv_ref_amax;
    case KV_OP_ARGMAX: return kv_ref_argmax;
    case KV_OP_PROD_DIM_INT: return kv_ref_prod;
    case KV_OP_MM: return kv_ref_mm;
    case KV_OP_BMM: return kv_ref_bmm;
    case KV_OP_ADDMM: return kv_ref_addmm;
    case KV_OP__SOFTMAX: return kv_ref__softmax;
    case KV_OP__LOG_SOFTMAX: return kv_ref__log_softmax;
    case KV_OP_NATIVE_LAYER_NORM: return kv_ref_native_layer_norm;
    case KV_OP_NATIVE_GROUP_NORM: return kv_ref_native_group_norm;
    case KV_OP_CAT: return kv_ref_cat;
    case KV_OP_STACK: return kv_ref_stack;
    case KV_OP_INDEX_SELECT: return kv_ref_index_select;
    case KV_OP_EMBEDDING: return kv_ref_embedding;
    case KV_OP_VIEW: return kv_ref_view;
    case KV_OP_RESHAPE: return kv_ref_reshape;
    case KV_OP__UNSAFE_VIEW: return kv_ref__unsafe_view;
    case KV_OP_TRANSPOSE_INT: return kv_ref_transpose;
    case KV_OP_T: return kv_ref_t;
    case KV_OP_PERMUTE: return kv_ref_permute;
    case KV_OP_SELECT_INT: return kv_ref_select;
    case KV_OP_SLICE_TENSOR: return kv_ref_slice;
    case KV_OP_SQUEEZE: return kv_ref_squeeze;
    case KV_OP_SQUEEZE_DIM: return kv_ref_squeeze_dim;
    case KV_OP_UNSQUEEZE: return kv_ref_unsqueeze;
    case KV_OP_EXPAND: return kv_ref_expand;
    case KV_OP_AS_STRIDED: return kv_ref_as_strided;
    case KV_OP_DETACH: return kv_ref_detach;
    case KV_OP_UNFOLD: return kv_ref_unfold;
    case KV_OP_CLAMP_TENSOR: return kv_ref_clamp_Tensor;
    case KV_OP_CONJ: return kv_ref_conj;
    case KV_OP__CONJ: return kv_ref__conj;
    case KV_OP_CONJ_PHYSICAL: return kv_ref_conj_physical;
    case KV_OP_RESOLVE_CONJ: return kv_ref_resolve_conj;
    case KV_OP__NEG_VIEW: return kv_ref__neg_view;
    case KV_OP_RESOLVE_NEG: return kv_ref_resolve_neg;
    case KV_OP_IS_CONJ: return kv_ref_is_conj;
    case KV_OP_IS_NEG: return kv_ref_is_neg;
    case KV_OP__EFFICIENTZEROTENSOR: return kv_ref__efficientzerotensor;
    case KV_OP__IS_ZEROTENSOR: return kv_ref__is_zerotensor;
    case KV_OP_GELU_BACKWARD: return kv_ref_gelu_backward;
    case KV_OP_AS_STRIDED_BACKWARD: return kv_ref_as_strided_backward;
    case KV_OP_UNFOLD_BACKWARD: return kv_ref_unfold_backward;
    case KV_OP_INDEX_SELECT_BACKWARD: return kv_ref_index_select_backward;
    case KV_OP_EMBEDDING_DENSE_BACKWARD: return kv_ref_embedding_dense_backward;
    case KV_OP_MASKED_FILL_SCALAR: return kv_ref_masked_fill;
    case KV_OP_MASKED_FILL__SCALAR: return kv_ref_masked_fill_;
    case KV_OP_REPEAT: return kv_ref_repeat;
    case KV_OP_BERNOULLI_P: return kv_ref_bernoulli;
    case KV_OP_ADD_OUT:
    case KV_OP_MUL_OUT:
    case KV_OP_MM_OUT:
    case KV_OP_CAT_OUT:
    case KV_OP_SUM_INTLIST_OUT:
    case KV_OP_CLAMP_OUT: return kv_ref_out;
    case KV_OP__FOREACH_ADD_LIST: return kv_ref__foreach_add;
    case KV_OP__FOREACH_ADD__LIST: return kv_ref__foreach_add_;
    case KV_OP__FOREACH_MUL_SCALAR: return kv_ref__foreach_mul;
    case KV_OP_COUNT: break;
    }
    return NULL;
}

kv_kernel_fn kv_ref_kernel_of(int id) {
    return id >= 0 && id < KV_OP_COUNT ? ref_kernel_for((kv_op_id)id) : NULL;
}

kv_status kv_ref_register_all(void) {
    for (int id = 0; id < KV_OP_COUNT; id++) {
        kv_kernel_fn fn = ref_kernel_for((kv_op_id)id);
        if (!fn) return kv_error(KV_ERR_INTERNAL, "%s: no CPU reference kernel", kv_op_names[id]);
        kv_status st = kv_register_kernel(kv_op_names[id], KV_KEY_CPU, fn);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
