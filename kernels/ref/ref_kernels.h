/* One boxed CPU reference kernel per op of kernels/ops.schema, named
 * kv_ref_<c name> where the C name is the typed API name without kv_
 * (the base name, plus _<overload> where two ops share a base name). */
#ifndef KV_REF_KERNELS_H
#define KV_REF_KERNELS_H

#include "kv/dispatch.h"

#define KV_REF_KERNEL(name) kv_status kv_ref_##name(const kv_op *op, kv_keyset ks, kv_stack *stack)

/* factories */
KV_REF_KERNEL(empty); /* empty.memory_format */
KV_REF_KERNEL(zeros); /* zeros */
KV_REF_KERNEL(ones); /* ones */
KV_REF_KERNEL(full); /* full */
KV_REF_KERNEL(arange); /* arange */
/* filling and copying */
KV_REF_KERNEL(fill_); /* fill_.Scalar */
KV_REF_KERNEL(zero_); /* zero_ */
KV_REF_KERNEL(copy_); /* copy_ */
KV_REF_KERNEL(clone); /* clone */
KV_REF_KERNEL(contiguous); /* contiguous */
KV_REF_KERNEL(_to_copy); /* _to_copy */
/* binary arithmetic */
KV_REF_KERNEL(add); /* add.Tensor */
KV_REF_KERNEL(add_); /* add_.Tensor */
KV_REF_KERNEL(sub); /* sub.Tensor */
KV_REF_KERNEL(mul); /* mul.Tensor */
KV_REF_KERNEL(mul_); /* mul_.Tensor */
KV_REF_KERNEL(div); /* div.Tensor */
KV_REF_KERNEL(maximum); /* maximum */
KV_REF_KERNEL(minimum); /* minimum */
KV_REF_KERNEL(pow); /* pow.Tensor_Scalar */
/* unary */
KV_REF_KERNEL(neg); /* neg */
KV_REF_KERNEL(abs); /* abs */
KV_REF_KERNEL(exp); /* exp */
KV_REF_KERNEL(log); /* log */
KV_REF_KERNEL(sqrt); /* sqrt */
KV_REF_KERNEL(rsqrt); /* rsqrt */
KV_REF_KERNEL(sin); /* sin */
KV_REF_KERNEL(cos); /* cos */
KV_REF_KERNEL(tanh); /* tanh */
KV_REF_KERNEL(sigmoid); /* sigmoid */
KV_REF_KERNEL(relu); /* relu */
KV_REF_KERNEL(gelu); /* gelu */
KV_REF_KERNEL(silu); /* silu */
KV_REF_KERNEL(clamp); /* clamp */
KV_REF_KERNEL(clamp_); /* clamp_.Tensor */
/* comparison and selection */
KV_REF_KERNEL(where); /* where.self */
KV_REF_KERNEL(eq); /* eq.Tensor */
KV_REF_KERNEL(lt); /* lt.Tensor */
/* reductions */
KV_REF_KERNEL(sum); /* sum.dim_IntList */
KV_REF_KERNEL(mean); /* mean.dim */
KV_REF_KERNEL(amax); /* amax */
KV_REF_KERNEL(argmax); /* argmax */
KV_REF_KERNEL(prod); /* prod.dim_int */
/* matmul */
KV_REF_KERNEL(mm); /* mm */
KV_REF_KERNEL(bmm); /* bmm */
KV_REF_KERNEL(addmm); /* addmm */
/* normalization */
KV_REF_KERNEL(_softmax); /* _softmax */
KV_REF_KERNEL(_log_softmax); /* _log_softmax */
KV_REF_KERNEL(native_layer_norm); /* native_layer_norm */
KV_REF_KERNEL(native_group_norm); /* native_group_norm */
/* joining and indexing */
KV_REF_KERNEL(cat); /* cat */
KV_REF_KERNEL(stack); /* stack */
KV_REF_KERNEL(index_select); /* index_select */
KV_REF_KERNEL(embedding); /* embedding */
/* views */
KV_REF_KERNEL(view); /* view */
KV_REF_KERNEL(reshape); /* reshape */
KV_REF_KERNEL(_unsafe_view); /* _unsafe_view */
KV_REF_KERNEL(transpose); /* transpose.int */
KV_REF_KERNEL(t); /* t */
KV_REF_KERNEL(permute); /* permute */
KV_REF_KERNEL(select); /* select.int */
KV_REF_KERNEL(slice); /* slice.Tensor */
KV_REF_KERNEL(squeeze); /* squeeze */
KV_REF_KERNEL(squeeze_dim); /* squeeze.dim */
KV_REF_KERNEL(unsqueeze); /* unsqueeze */
KV_REF_KERNEL(expand); /* expand */
KV_REF_KERNEL(as_strided); /* as_strided */
KV_REF_KERNEL(detach); /* detach */
KV_REF_KERNEL(unfold); /* unfold */
/* functionalize */
KV_REF_KERNEL(clamp_Tensor); /* clamp.Tensor */
/* lazy bits */
KV_REF_KERNEL(conj); /* conj */
KV_REF_KERNEL(_conj); /* _conj */
KV_REF_KERNEL(conj_physical); /* conj_physical */
KV_REF_KERNEL(resolve_conj); /* resolve_conj */
KV_REF_KERNEL(_neg_view); /* _neg_view */
KV_REF_KERNEL(resolve_neg); /* resolve_neg */
KV_REF_KERNEL(is_conj); /* is_conj */
KV_REF_KERNEL(is_neg); /* is_neg */
KV_REF_KERNEL(_efficientzerotensor); /* _efficientzerotensor */
KV_REF_KERNEL(_is_zerotensor); /* _is_zerotensor */
/* backward */
KV_REF_KERNEL(gelu_backward); /* gelu_backward */
KV_REF_KERNEL(as_strided_backward); /* as_strided_backward */
KV_REF_KERNEL(unfold_backward); /* unfold_backward */
KV_REF_KERNEL(index_select_backward); /* index_select_backward */
KV_REF_KERNEL(embedding_dense_backward); /* embedding_dense_backward */

/* repeat, masked_fill, random */
KV_REF_KERNEL(masked_fill); /* masked_fill.Scalar */
KV_REF_KERNEL(masked_fill_); /* masked_fill_.Scalar */
KV_REF_KERNEL(repeat); /* repeat */
KV_REF_KERNEL(bernoulli); /* bernoulli.p */
/* out= overloads: one kernel for all of them (kernels/ref/ref_out.c), the
 * functional twin's reference plus PyTorch's out= rules */
KV_REF_KERNEL(out); /* add.out, mul.out, mm.out, cat.out, sum.IntList_out, clamp.out */
KV_REF_KERNEL(_foreach_add); /* _foreach_add.List */
KV_REF_KERNEL(_foreach_add_); /* _foreach_add_.List */
KV_REF_KERNEL(_foreach_mul); /* _foreach_mul.Scalar */

#endif
