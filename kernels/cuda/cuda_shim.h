/* The CUDA plugin's host side (built by gcc): shared by cuda_plugin.c and
 * the cuda_ops_*.c files. Each boxed kernel checks its arguments exactly
 * as the reference does (same kv_status for the same bad input: the
 * runner's error check holds every backend to it), then either declines
 * (KV_ERR_MISSING_KERNEL: a dtype or layout without a CUDA kernel, which
 * the runner counts as UNSUPPORTED) or fills a cuda_api.h struct with
 * device addresses and launches. */
#ifndef KV_CUDA_SHIM_H
#define KV_CUDA_SHIM_H

#include <stdbool.h>

#include "cuda/cuda_api.h"
#include "kv/backend.h"

extern const kv_host_api *kv_cuda_host;
/* The slot the loader gave this plugin (CUDA; a PLUGIN slot for the
 * emulation), set at registration. */
extern kv_device_type kv_cuda_type;

/* ---- cuda_util.c ---- */
kvc_geom kv_cuda_geom_of(const kv_tensor *t);
kvc_geom kv_cuda_geom_contiguous(const int64_t *sizes, int ndim);
/* t viewed with `sizes` (numpy broadcasting: stride 0 on new or size-1
 * dims). false when t does not broadcast to it. */
bool kv_cuda_geom_broadcast(const kv_tensor *t, const int64_t *sizes, int ndim, kvc_geom *out);
/* KVC_F32 / KVC_F64, or -1 for dtypes without CUDA arithmetic. */
int kv_cuda_dtype_code(kv_dtype dt);
bool kv_cuda_on_device(const kv_tensor *t);
/* A new contiguous tensor on this backend; NULL + error. */
kv_tensor *kv_cuda_empty(const int64_t *sizes, int ndim, kv_dtype dt);
/* KV_ERR_MISSING_KERNEL: "op: no CUDA kernel for <why>". */
kv_status kv_cuda_decline(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Before writing t in place: KV_ERR_INVALID_ARG (PyTorch's words) when
 * two of its elements share memory (kv_tensor_internal_overlap: a
 * stride-0 dim, overlapping windows); a decline when that cannot be
 * decided (no memory for the check). */
kv_status kv_cuda_check_writable(const char *op, const char *arg, const kv_tensor *t);
/* KV_ERR_INTERNAL from a failed device call, with kvc_last_error(). */
kv_status kv_cuda_device_error(const char *op);
/* t, or for a 0-dim CPU tensor (which PyTorch lets take part in a device
 * op) a device copy kept in *tmp (release it after). NULL + error. */
kv_tensor *kv_cuda_operand(kv_tensor *t, kv_tensor **tmp);
/* Returns one owned tensor. */
kv_status kv_cuda_return(kv_stack *stack, kv_tensor *out);
/* Writes "[2, 3]" into buf. */
const char *kv_cuda_shape(const int64_t *sizes, int ndim, char *buf, int cap);
#define KV_CUDA_SHAPE_BUF 200

/* ---- registration, one per file ---- */
kv_status kv_cuda_register_pointwise(kv_key key);
kv_status kv_cuda_register_copy(kv_key key);
kv_status kv_cuda_register_reduce(kv_key key);
kv_status kv_cuda_register_norm(kv_key key);
kv_status kv_cuda_register_matmul(kv_key key);
kv_status kv_cuda_register_views(kv_key key);
kv_status kv_cuda_register_fill(kv_key key);   /* repeat, masked_fill (cuda_ops_fill.c) */
kv_status kv_cuda_register_random(kv_key key); /* bernoulli.p (cuda_ops_random.c) */
kv_status kv_cuda_register_out(kv_key key);

#endif
