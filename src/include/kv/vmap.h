/* vmap (DESIGN.md section 4): batched tensors, batching rules and the
 * loop-and-stack fallback, after PyTorch's legacy (functorch-era) batching
 * model.
 *
 * A batched tensor ("wrapper") is a kv_tensor carrying KV_KEY_BATCHED
 * that stands for a PHYSICAL tensor with one extra dimension, the batch
 * dim (bdim), mapped at a vmap LEVEL. The wrapper's own sizes are the
 * LOGICAL sizes (the physical ones without the batch dim); its strides,
 * offset and storage are the physical tensor's without the batch dim, so
 * it is a valid view of sample 0 and keeps the physical storage alive.
 * The (physical, bdim, level) record hangs off kv_tensor.batched, which
 * only wrappers made here set: kv_tensor_view and kv_tensor_alias never
 * copy it (an alias of a wrapper carries the Batched key but no record,
 * and dispatching on it is KV_ERR_INTERNAL). One wrapper holds one level;
 * nested vmaps nest wrappers, the physical tensor of a level-2 wrapper
 * being a level-1 wrapper (or a plain tensor).
 *
 * Dispatch. Every op reaching KV_KEY_BATCHED works on the highest level
 * among its tensor arguments; tensors not batched at that level (plain,
 * or batched at a lower level) are unbatched operands. An op with a
 * batching rule (kv_vmap_has_rule) computes on the physical tensors
 * (batch dims moved to the front, dims shifted by one, sizes with the
 * batch size prepended) and wraps the result; every other op goes
 * through the loop-and-stack fallback: for each batch index, select the
 * sample of every batched argument, call the op, and stack the results
 * along a new dim 0. In-place ops in the fallback write each sample of
 * the batched self through its physical storage. Both paths re-enter the
 * dispatcher with the physical tensors, so a lower level's wrappers are
 * handled by that level; for plain physical tensors this is exactly the
 * layers below Batched. A rule whose preconditions fail (wrong rank, a
 * dim out of range, a logical 0-dim operand that would change type
 * promotion) hands the call to the fallback, so errors are the op's own
 * per-sample errors; such a call counts as a fallback call.
 *
 * VmapMode (KV_KEY_VMAP_MODE) is in TLS included while any level is
 * entered; it is a fallthrough for every op (kvsuite has no random ops,
 * which are what PyTorch's VmapMode kernels exist for), but it is visible
 * to the accel seed gate.
 *
 * Errors: batched arguments whose batch sizes differ are KV_ERR_SHAPE
 * ("vmap: Expected all tensors to have the same size in the mapped
 * dimension, got sizes 3 and 4 for the mapped dimension"); an in_dim or
 * out_dim out of range is KV_ERR_DIM; removing a batch dim at a level the
 * tensor is not batched at is KV_ERR_INVALID_ARG; an in-place op writing a
 * batched value into an argument that is not batched at that level is
 * KV_ERR_INVALID_ARG with PyTorch's "vmap: inplace arithmetic(self,
 * *extra_args) is not possible because ..." message. */
#ifndef KV_VMAP_H
#define KV_VMAP_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/stack.h"
#include "kv/status.h"
#include "kv/tensor.h"

/* An in_dims entry for an argument that is not mapped over (PyTorch's
 * None). Any other value is a dim of that argument, negative ones
 * counting from the end. */
#define KV_VMAP_UNBATCHED INT_MIN
/* How deeply vmap levels may nest on one thread. */
#define KV_VMAP_MAX_LEVELS 32

/* ---- levels (per thread) ---- */
/* Enters a new, innermost level and returns it (1 for the outermost);
 * the first one adds KV_KEY_VMAP_MODE to TLS included. Returns -1 with
 * KV_ERR_INVALID_ARG when KV_VMAP_MAX_LEVELS are already entered. */
int kv_vmap_level_enter(void);
/* Leaves `level`, which must be the innermost entered level (else
 * KV_ERR_INVALID_ARG); leaving the last one takes VmapMode out of TLS
 * included again unless it was included before. */
kv_status kv_vmap_level_exit(int level);
int kv_vmap_current_level(void); /* 0 outside vmap */

/* ---- batched tensors ---- */
/* A new wrapper (one reference, owned by the caller) of `physical` with
 * its dim `bdim` (negative counts from the end; KV_ERR_DIM when out of
 * range, or when physical is 0-dim) mapped at `level` (>= 1). `physical`
 * is retained, not copied. A physical tensor batched at a level >= `level`
 * is KV_ERR_INVALID_ARG: levels nest innermost-highest. Does not need the
 * level to be entered. */
kv_tensor *kv_vmap_add_batch_dim(kv_tensor *physical, int64_t bdim, int level);
/* The physical tensor of `wrapper` (a new reference) with its batch dim
 * moved to `out_dim` (wrapped against the physical rank, KV_ERR_DIM when
 * out of range): the physical tensor itself when the batch dim already is
 * there, otherwise a permuted view of it. `wrapper` must be batched at
 * exactly `level` (its outermost record), else KV_ERR_INVALID_ARG. */
kv_tensor *kv_vmap_remove_batch_dim(kv_tensor *wrapper, int level, int64_t out_dim);
/* Like kv_vmap_remove_batch_dim, but a result not batched at `level` (a
 * plain tensor or one batched only at lower levels: a value that does not
 * depend on the batch) is broadcast across the batch instead: unsqueezed
 * at out_dim and expanded to `batch_size` there (a stride-0 view). A
 * tensor batched at a level above `level` is KV_ERR_INVALID_ARG. */
kv_tensor *kv_vmap_unwrap_result(kv_tensor *t, int level, int64_t batch_size, int64_t out_dim);
/* Whether t is a wrapper (has a vmap record); NULL is false. */
bool kv_vmap_is_batched(const kv_tensor *t);
/* The record of a wrapper: physical tensor (borrowed), bdim and level.
 * Outputs may be NULL. KV_ERR_INVALID_ARG when t is not a wrapper. */
kv_status kv_vmap_batch_info(const kv_tensor *t, kv_tensor **physical, int64_t *bdim, int *level);

/* ---- vmap(op) ----
 * Enters a level, wraps the arguments of `args` (borrowed; one in_dims
 * entry per stack slot, or in_dims NULL for "every Tensor and Tensor[]
 * slot at dim 0"), calls op, unwraps every tensor return with its batch
 * dim at `out_dim` (unbatched returns broadcast across the batch, see
 * kv_vmap_unwrap_result), leaves the level. `returns` receives the owned
 * returns in the kv_call protocol (it may be `args` itself). A Tensor[]
 * slot's in_dim applies to each element; a None slot ignores its in_dim;
 * a mapped in_dim on a slot of another type is KV_ERR_INVALID_ARG.
 * batch_size < 0 infers it from the mapped arguments (at least one must
 * be mapped, else KV_ERR_INVALID_ARG); otherwise every mapped argument
 * must have that size at its in_dim (KV_ERR_SHAPE). On failure `returns`
 * is left empty and the level is left. */
kv_status kv_vmap_call(const kv_op *op, kv_stack *args, const int *in_dims, int batch_size, int out_dim,
                       kv_stack *returns);

/* ---- which path ran ----
 * Per op (by full name), how many calls at KV_KEY_BATCHED its batching
 * rule completed and how many went through the loop-and-stack fallback
 * (including rule calls handed to the fallback). 0 for unknown ops. The
 * counters are process-wide and atomic. */
uint64_t kv_vmap_rule_calls(const char *full_name);
uint64_t kv_vmap_fallback_calls(const char *full_name);
void kv_vmap_counters_reset(void);
/* Whether `full_name` has a batching rule (else it uses the fallback). */
bool kv_vmap_has_rule(const char *full_name);

/* Registers the rules and the fallback at KV_KEY_BATCHED and the
 * fallthrough at KV_KEY_VMAP_MODE (called from kv_modes_register_all). */
kv_status kv_vmap_register(void);

#endif
