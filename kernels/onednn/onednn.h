/* The oneDNN backend plugin's internals, shared by the files of
 * kernels/onednn (oneDNN 2.6 C API, CPU engine).
 *
 * Memory. oneDNN's CPU engine computes on host pointers, and its memory
 * descriptors take arbitrary strides, so this backend's memory is plain
 * 64-byte aligned host memory (host_addressable = 1) and every kernel hands
 * oneDNN the kvsuite tensors' own storage: no staging copies, no address
 * translation (SIM's bias would only add a subtraction to every kernel
 * and buys nothing here, since oneDNN is host code anyway).
 *
 * What a kernel does. It takes a call only where oneDNN's result is the
 * reference's result within the op's tolerance (kernels/onednn/README is
 * the list, with the reasons for what is left out): a dtype oneDNN computes
 * exactly enough, a layout it can describe. Everything else is declined
 * through kv_dnnl_decline, which first runs the CPU reference on host
 * copies of the arguments: if the reference rejects the call, its error
 * (code and message) is the kernel's error, so bad input fails exactly as
 * on every other backend; if it accepts it, the kernel says
 * KV_ERR_MISSING_KERNEL, which the runner counts as UNSUPPORTED. So the
 * acceptance predicates only have to be conservative, never complete.
 * A primitive oneDNN cannot create on this CPU (dnnl_unimplemented: f16
 * without AVX512-FP16, bf16 without AVX512) is a decline too, so the
 * support matrix follows the machine's ISA. */
#ifndef KV_ONEDNN_H
#define KV_ONEDNN_H

#include <stdbool.h>
#include <stdint.h>

#include <oneapi/dnnl/dnnl.h>

#include "kv/backend.h"

/* The host's function table and the slot the loader gave this plugin. */
extern const kv_host_api *kv_dnnl_host;
extern kv_device_type kv_dnnl_type;

/* oneDNN's dimension limit is 12; kvsuite's is 8, plus one inner dimension
 * for the raw (byte/word) views of copies. */
#define KV_DNNL_MAX_DIMS (KV_MAX_DIMS + 1)

/* ---- onednn_prim.c: dtypes, descriptors, running primitives ---- */

/* The oneDNN data type that holds dt's values exactly: f32, bf16, f16,
 * s32 (i32), s8 (i8), u8 (u8 and bool, whose bytes are 0/1). false for the
 * dtypes oneDNN has no type for (i16, i64, f64, complex). */
bool kv_dnnl_dtype(kv_dtype dt, dnnl_data_type_t *out);

/* Whether t lives in this backend's memory. */
bool kv_dnnl_on_device(const kv_tensor *t);
/* Address of t's first element (storage data + offset). */
void *kv_dnnl_ptr(const kv_tensor *t);
/* A new contiguous tensor on this backend; NULL + error. */
kv_tensor *kv_dnnl_empty(const int64_t *sizes, int ndim, kv_dtype dt);

/* A descriptor over `ndim` sizes/strides (in elements) of data type dt. A
 * 0-dim tensor is described as one element of shape [1]. Stride 0
 * (broadcast) is allowed for sources. */
kv_status kv_dnnl_md(const char *op, const int64_t *sizes, const int64_t *strides, int ndim, dnnl_data_type_t dt,
                     dnnl_memory_desc_t *md);
/* t's own geometry. */
kv_status kv_dnnl_md_of(const char *op, const kv_tensor *t, dnnl_data_type_t dt, dnnl_memory_desc_t *md);
/* Contiguous (row-major) over sizes. */
kv_status kv_dnnl_md_dense(const char *op, const int64_t *sizes, int ndim, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *md);
/* t seen as `sizes` (ndim >= t->ndim) by numpy broadcasting: stride 0 on
 * new and expanded dims. false when t does not broadcast to sizes. */
bool kv_dnnl_broadcast_strides(const kv_tensor *t, const int64_t *sizes, int ndim, int64_t *strides);
/* Raw views for copies: t's elements as opaque words (s32 for element
 * sizes that are multiples of 4, else u8), with one more inner dimension
 * when an element is several words. A reorder between two raw views moves
 * bits and never converts, whatever the dtype (NaN payloads, signed zeros,
 * complex, i64, f64 included). `sizes`/`strides` give the geometry (t's,
 * or a broadcast of it). */
kv_status kv_dnnl_md_raw(const char *op, kv_dtype dt, const int64_t *sizes, const int64_t *strides, int ndim,
                         dnnl_memory_desc_t *md);

/* One execution argument: DNNL_ARG_*, its descriptor and its address. */
typedef struct kv_dnnl_arg {
    int arg;
    const dnnl_memory_desc_t *md;
    void *ptr;
} kv_dnnl_arg;

/* Creates the primitive for op_desc (attr may be NULL) and runs it on this
 * thread's stream. oneDNN's own primitive cache (on by default, 1024
 * entries) keys on the descriptor and attributes, so a repeated call
 * shape does not JIT again. dnnl_unimplemented is KV_ERR_MISSING_KERNEL
 * (naming `what`); any other oneDNN failure is KV_ERR_INTERNAL. */
kv_status kv_dnnl_run(const char *op, const char *what, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_attr_t attr,
                      const kv_dnnl_arg *args, int nargs);
/* The same for a primitive descriptor made by the caller (reorder, concat);
 * takes it over. */
kv_status kv_dnnl_run_pd(const char *op, const char *what, dnnl_primitive_desc_t pd, const kv_dnnl_arg *args,
                         int nargs);
/* A reorder from (src_md, src) to (dst_md, dst). */
kv_status kv_dnnl_reorder(const char *op, const dnnl_memory_desc_t *src_md, void *src, const dnnl_memory_desc_t *dst_md,
                          void *dst);
/* Copies t's elements, bit for bit, into the contiguous buffer dst (raw
 * views; t may be strided or broadcast). */
kv_status kv_dnnl_copy_dense(const char *op, const kv_tensor *t, void *dst);
/* The engine (created once); NULL + error when oneDNN cannot make one. */
dnnl_engine_t kv_dnnl_engine(void);
/* KV_ERR_INTERNAL naming a failed oneDNN call. */
kv_status kv_dnnl_fail(const char *op, const char *what, dnnl_status_t s);

/* Declines the call: the reference's error when it rejects the arguments
 * (run on host copies, so nothing of the caller's changes), else
 * KV_ERR_MISSING_KERNEL "op: no oneDNN kernel for <why>". */
kv_status kv_dnnl_decline(const kv_op *op, kv_stack *stack, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A Scalar as the f32 the reference computes with for f32/bf16 results
 * (PyTorch's opmath rounds scalars of reduced-precision ops to f32). false
 * for bool and complex scalars, whose checks belong to the reference. */
bool kv_dnnl_scalar_f32(kv_scalar s, float *out);
/* Whether t has a dimension of size > 1 with stride 0 (an output must not). */
bool kv_dnnl_has_broadcast_dim(const kv_tensor *t);
/* Whether two elements of t may share memory: its strides, sorted, do not
 * each step past what the smaller ones reach (a stride-0 dim, overlapping
 * windows). A write to such a t is the reference's to judge (a decline). */
bool kv_dnnl_may_overlap(const kv_tensor *t);
/* The largest finite |x| of an f32 or bf16 tensor in host memory, any
 * strides (0 when empty or every element is Inf or NaN). What a kernel
 * computing in f32 checks before a product or square could overflow where
 * the reference, which computes wider, does not. */
double kv_dnnl_max_finite_abs(const kv_tensor *t);
/* Returns one owned tensor on the stack. */
kv_status kv_dnnl_return(kv_stack *stack, kv_tensor *out);

/* ---- registration, one per file ---- */
kv_status kv_dnnl_register_eltwise(kv_key key);
kv_status kv_dnnl_register_binary(kv_key key);
kv_status kv_dnnl_register_reduce(kv_key key);
kv_status kv_dnnl_register_matmul(kv_key key);
kv_status kv_dnnl_register_norm(kv_key key);
kv_status kv_dnnl_register_copy(kv_key key);

/* A table row: op name and its kernel. */
typedef struct kv_dnnl_reg {
    const char *op;
    kv_kernel_fn fn;
} kv_dnnl_reg;
kv_status kv_dnnl_register_table(kv_key key, const kv_dnnl_reg *rows, int n);

#endif
