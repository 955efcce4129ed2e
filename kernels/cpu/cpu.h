/* The optimized CPU variants (kernels/cpu): what their files share.
 *
 * These are NOT golden references: kernels/ref stays the reference, and
 * every variant here is compared against it by the runner's variants
 * check under the tolerance table (src/runner/tolerance.c). They are
 * built with -O3 and -ffp-contract=off like the references, so a result
 * never depends on the compiler's choice to fuse; the one variant that
 * uses FMA does so explicitly (the AVX2/AVX-512 matmul micro-kernels,
 * within mm's gamma_{K+1} bound).
 *
 * Every variant is a boxed kernel plus a predicate. Predicates accept
 * only calls a variant computes exactly as documented; anything else
 * (other dtypes, error cases, aliasing the variant does not handle) is
 * left to "ref", whose predicate accepts everything, so error messages
 * always come from the reference. */
#ifndef KV_CPU_H
#define KV_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/tensor.h"

/* Registers "ref" for every op at the CPU key and the optimized variants
 * (cpu_register.c). */
kv_status kv_cpu_variants_register(void);

/* ---- ISA levels (cpu_features.c) ----
 * Runtime checks (__builtin_cpu_supports). KV_CPU_ISA=sse2|avx2|avx512
 * caps what is reported (read once), so the lower variants can be tested
 * on a machine that has more. */
typedef enum kv_cpu_isa { KV_CPU_ISA_SSE2, KV_CPU_ISA_AVX2, KV_CPU_ISA_AVX512 } kv_cpu_isa;
bool kv_cpu_has(kv_cpu_isa isa);
/* The highest level available. */
kv_cpu_isa kv_cpu_best_isa(void);
const char *kv_cpu_isa_name(kv_cpu_isa isa);
/* KV_CPU_ISA checked: unset, or exactly sse2, avx2 or avx512; anything
 * else (the empty string too) is KV_ERR_INVALID_ARG naming the variable,
 * so a typo cannot silently test the wrong level. kv_cpu_variants_register
 * calls it, so kv_init fails on a bad value. */
kv_status kv_cpu_isa_env_check(void);
/* Caps the reported level at run time (tests); returns the previous cap. */
kv_cpu_isa kv_cpu_set_isa_cap(kv_cpu_isa cap);

/* ---- shared argument helpers (cpu_common.c) ---- */
/* A tensor argument a variant can read: on the CPU, host memory, no lazy
 * bit (the dispatcher guarantees it, but a direct call may not). */
bool kv_cpu_plain(const kv_tensor *t);
/* Row-major contiguous (sizes of 1 ignored). */
bool kv_cpu_contig(const kv_tensor *t);
/* Every stride non-negative. */
bool kv_cpu_strides_ok(const kv_tensor *t);
/* New contiguous CPU tensor; NULL + error. */
kv_tensor *kv_cpu_new(const int64_t *sizes, int ndim, kv_dtype dt);
/* Whether the tensor's elements overlap another tensor's storage. */
bool kv_cpu_same_storage(const kv_tensor *a, const kv_tensor *b);
/* Copies t (any strides) into contiguous dst memory of the same dtype. */
void kv_cpu_gather(const kv_tensor *t, void *dst);
/* Whether Scalar s converts into dt without the reference's overflow
 * error, for the cases a direct variant handles (cpu_copy.c); false
 * leaves the call to the reference. */
bool kv_cpu_scalar_fits(kv_scalar s, kv_dtype dt);
/* Strided N-d copy of equal-dtype elements: dst and src share sizes. */
void kv_cpu_copy_strided(char *dst, const int64_t *dst_strides, const char *src, const int64_t *src_strides,
                         const int64_t *sizes, int ndim, size_t esize);

/* ---- the variant kernels, one family per file ---- */
/* cpu_elementwise_*.c */
kv_status kv_cpu_ew_sse2_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_ew_avx2_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_ew_avx512_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_ew_threads_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
bool kv_cpu_ew_sse2_pred(const kv_op *op, const kv_stack *stack);
bool kv_cpu_ew_avx2_pred(const kv_op *op, const kv_stack *stack);
bool kv_cpu_ew_avx512_pred(const kv_op *op, const kv_stack *stack);
bool kv_cpu_ew_threads_pred(const kv_op *op, const kv_stack *stack);

/* cpu_reduce.c: sum.dim_IntList, mean.dim, prod.dim_int, amax, argmax */
bool kv_cpu_reduce_pred(const kv_op *op, const kv_stack *stack);

/* out= ops (cpu_out.c): the out= rules around the CPU's tuned functional
 * kernel and copy_. */
kv_status kv_cpu_out_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* The foreach ops (cpu_foreach.c): the list rules around the CPU's tuned
 * add kernels and a flat f32/f64 multiply per element. */
kv_status kv_cpu_foreach_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_reduce_vec_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_reduce_pairwise_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_matmul.c: mm, bmm, addmm */
bool kv_cpu_mm_blocked_pred(const kv_op *op, const kv_stack *stack);
bool kv_cpu_mm_avx2_pred(const kv_op *op, const kv_stack *stack);
bool kv_cpu_mm_avx512_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_mm_blocked_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_mm_avx2_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_mm_avx512_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_softmax.c: _softmax, _log_softmax */
bool kv_cpu_softmax_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_softmax_vec_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_softmax_fused_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_norm.c: native_layer_norm ("fused", "vec"), native_group_norm ("fused") */
bool kv_cpu_norm_fused_pred(const kv_op *op, const kv_stack *stack);
bool kv_cpu_norm_vec_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_norm_fused_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
kv_status kv_cpu_norm_vec_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_copy.c: fills, copies, factories, cat, stack, index_select, embedding */
bool kv_cpu_copy_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_copy_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_views.c: the view ops and the lazy-bit ops */
bool kv_cpu_view_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_view_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
bool kv_cpu_lazy_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_lazy_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_repeat.c: repeat */
bool kv_cpu_repeat_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_repeat_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_masked_fill.c: masked_fill.Scalar, masked_fill_.Scalar */
bool kv_cpu_masked_fill_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_masked_fill_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_random.c: bernoulli.p */
bool kv_cpu_random_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_random_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* cpu_backward.c: the scatter-add backward ops */
bool kv_cpu_backward_pred(const kv_op *op, const kv_stack *stack);
kv_status kv_cpu_backward_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);

#endif
