/* Shared machinery of the golden reference kernels.
 *
 * The references are plain scalar C built with -ffp-contract=off. Values
 * are widened on load (reals to double, complex to a double pair, integers
 * to int64), computed there, and narrowed once on store, so f32/f16/bf16
 * results are the correctly rounded value of the f64 computation. Integer
 * arithmetic wraps (done in uint64) as it does in PyTorch, never UB. */
#ifndef KV_REF_H
#define KV_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/tensor.h"

/* ---- element access (p points at one element of dtype dt) ---- */
double kv_ref_load_f64(kv_dtype dt, const void *p);           /* complex: real part */
void kv_ref_load_c128(kv_dtype dt, const void *p, double *re, double *im);
int64_t kv_ref_load_i64(kv_dtype dt, const void *p);          /* floats truncate */
void kv_ref_store_f64(kv_dtype dt, void *p, double v);        /* complex: im = 0 */
void kv_ref_store_c128(kv_dtype dt, void *p, double re, double im);
void kv_ref_store_i64(kv_dtype dt, void *p, int64_t v);       /* wraps to width */
/* Copies one element converting between dtypes with PyTorch's cast rules
 * (bool is v != 0, complex -> real drops the imaginary part). */
void kv_ref_convert(kv_dtype to, void *dst, kv_dtype from, const void *src);

/* Writes scalar s as one element of dtype dt (kv_ref_store_* by kind). */
void kv_ref_store_scalar(kv_dtype dt, void *p, kv_scalar s);

/* ---- strided N-d iteration over operands of one (broadcast) shape ---- */
#define KV_REF_ITER_MAX_OPS 4

typedef struct kv_ref_iter {
    int ndim;
    int nops;
    int64_t sizes[KV_MAX_DIMS];
    int64_t byte_strides[KV_REF_ITER_MAX_OPS][KV_MAX_DIMS];
    char *ptr[KV_REF_ITER_MAX_OPS];   /* current element of each operand */
    int64_t index[KV_MAX_DIMS];       /* current multi-index */
    int64_t remaining;                /* elements not yet visited */
} kv_ref_iter;

/* Iterates over `sizes` in row-major order; operand i is tensors[i] viewed
 * with broadcast strides (the caller has checked broadcastability). */
kv_status kv_ref_iter_init(kv_ref_iter *it, const int64_t *sizes, int ndim,
                           kv_tensor *const *tensors, int nops);
/* Visits the next element: on true, it->ptr[] and it->index point at it. */
bool kv_ref_iter_next(kv_ref_iter *it);

/* ---- common argument handling ---- */
/* New contiguous CPU output. */
kv_tensor *kv_ref_new_output(const int64_t *sizes, int ndim, kv_dtype dtype);
/* KV_ERR_DTYPE naming op and argument when dt is outside `allowed`
 * (a bit mask of 1u << kv_dtype). */
kv_status kv_ref_check_dtype(const char *op, const char *arg, kv_dtype dt, unsigned allowed);

/* KV_ERR_DEVICE naming op and argument unless t lives on the CPU. */
kv_status kv_ref_check_cpu(const char *op, const char *arg, const kv_tensor *t);
/* Writes "[2, 3]" into buf (always NUL-terminated); returns buf, so it can
 * sit inside an error message's argument list. */
const char *kv_ref_format_shape(const int64_t *sizes, int ndim, char *buf, int cap);
#define KV_REF_SHAPE_BUF (KV_MAX_DIMS * 24)

/* KV_ERR_INVALID_ARG unless s fits dt, with PyTorch's Scalar-conversion
 * rule ("value cannot be converted to type X without overflow"): finite
 * values beyond a floating type's range, integers beyond an integer type's
 * (unsigned types accept down to -max), NaN/Inf/out-of-range doubles for
 * integer types, a nonzero imaginary part for a real type. Bool takes any
 * value (as v != 0). */
kv_status kv_ref_check_scalar_fits(const char *op, const char *arg, kv_scalar s, kv_dtype dt);
/* Tensor options of factories and _to_copy, by stack slot (-1: absent from
 * the schema): layout None or strided, device None or cpu (else
 * KV_ERR_DEVICE), pin_memory None or false. */
kv_status kv_ref_check_tensor_options(const char *op, const kv_stack *stack, int layout_slot, int device_slot,
                                      int pin_slot);
/* A MemoryFormat? slot: None, contiguous_format, or (when allow_preserve)
 * preserve_format; anything else is KV_ERR_INVALID_ARG. */
kv_status kv_ref_check_memory_format(const char *op, const kv_stack *stack, int slot, bool allow_preserve);

/* Enum values of Layout and MemoryFormat arguments (ints on the stack),
 * numbered as PyTorch's c10::Layout and c10::MemoryFormat. */
#define KV_REF_LAYOUT_STRIDED 0
#define KV_REF_MEMORY_FORMAT_CONTIGUOUS KV_MEMORY_FORMAT_CONTIGUOUS
#define KV_REF_MEMORY_FORMAT_PRESERVE KV_MEMORY_FORMAT_PRESERVE

#define KV_DTYPES_ALL ((1u << KV_DTYPE_COUNT) - 1)
#define KV_DTYPES_FLOATING ((1u << KV_F16) | (1u << KV_BF16) | (1u << KV_F32) | (1u << KV_F64))
#define KV_DTYPES_COMPLEX ((1u << KV_C64) | (1u << KV_C128))
#define KV_DTYPES_INTEGRAL ((1u << KV_U8) | (1u << KV_I8) | (1u << KV_I16) | (1u << KV_I32) | (1u << KV_I64))
#define KV_DTYPES_REAL (KV_DTYPES_INTEGRAL | KV_DTYPES_FLOATING)

/* KV_ERR_INVALID_ARG (PyTorch's "more than one element of the written-to
 * tensor refers to a single memory location") when t, about to be written
 * in place, has two elements over one storage element: a dim of size > 1
 * with stride 0, or overlapping windows (kv_tensor_internal_overlap). */
kv_status kv_ref_check_no_internal_overlap(const char *op, const char *arg, const kv_tensor *t);
/* What an in-place elementwise op checks on self before writing: the
 * result dtype castable to self's (KV_ERR_DTYPE), the broadcast shape
 * equal to self's (KV_ERR_SHAPE), no internal overlap. */
kv_status kv_ref_check_inplace(const char *op, const kv_tensor *self, kv_dtype result, const int64_t *sizes,
                               int ndim);
/* The broadcast shape of tensors[0..n) (NULL entries skipped); on mismatch
 * KV_ERR_SHAPE naming op, the two arguments (names[i]) and their shapes. */
kv_status kv_ref_broadcast_shape(const char *op, kv_tensor *const *tensors, const char *const *names,
                                 int n, int64_t *sizes_out, int *ndim_out);
/* A new contiguous CPU tensor with t's shape and values cast to `dtype`
 * (kv_ref_convert per element); NULL + error on failure. */
kv_tensor *kv_ref_copy_to_new(const kv_tensor *t, kv_dtype dtype);
/* The same in the strides memory_format=preserve gives
 * (kv_tensor_preserve_strides: t's own when non-overlapping and dense). */
kv_tensor *kv_ref_copy_preserving(const kv_tensor *t, kv_dtype dtype);
/* Whether a MemoryFormat? argument asks for preserve_format: None (the
 * default of clone and _to_copy, as in PyTorch) or preserve_format. */
bool kv_ref_memory_format_preserves(const kv_stack *stack, int slot);

/* ---- the generic elementwise driver (ref_elementwise.c) ----
 * A kernel supplies one scalar function per compute category; the driver
 * casts each input element to the compute dtype (as PyTorch's
 * TensorIterator casts to the common dtype), widens it (.i for bool and
 * integers, .re for floats, .re/.im for complex), calls the function and
 * stores its result (of whatever kind it returns) into out's dtype. */
typedef enum kv_ref_vkind { KV_REF_VINT, KV_REF_VREAL, KV_REF_VCOMPLEX } kv_ref_vkind;
typedef struct kv_ref_val {
    kv_ref_vkind kind;
    int64_t i;
    double re, im;
} kv_ref_val;
typedef kv_ref_val (*kv_ref_scalar_fn)(const kv_ref_val *x, const void *ctx);
typedef struct kv_ref_ewise_fns {
    kv_ref_scalar_fn on_int;     /* compute dtype bool or integral */
    kv_ref_scalar_fn on_real;    /* compute dtype floating */
    kv_ref_scalar_fn on_complex; /* compute dtype complex */
} kv_ref_ewise_fns;

static inline kv_ref_val kv_ref_val_int(int64_t i) { return (kv_ref_val){ KV_REF_VINT, i, 0.0, 0.0 }; }
static inline kv_ref_val kv_ref_val_real(double d) { return (kv_ref_val){ KV_REF_VREAL, 0, d, 0.0 }; }
static inline kv_ref_val kv_ref_val_complex(double re, double im) {
    return (kv_ref_val){ KV_REF_VCOMPLEX, 0, re, im };
}
kv_ref_vkind kv_ref_vkind_of(kv_dtype compute);
/* A Scalar argument as a value of compute's category, rounded to the type
 * PyTorch computes such scalars in (f32 for f16/bf16/f32, c64 for c64). */
kv_ref_val kv_ref_val_of_scalar(kv_scalar s, kv_dtype compute);
/* out[idx] = fn(inputs[0][idx], ...) over out's shape (inputs broadcast to
 * it; out may be one of them, for in-place ops). An input that shares
 * out's storage with a different geometry is copied first, so a result
 * never depends on iteration order. A NULL function for compute's category
 * is KV_ERR_DTYPE naming op. At most KV_REF_ITER_MAX_OPS - 1 inputs. */
kv_status kv_ref_ewise_run(const char *op, const kv_ref_ewise_fns *fns, const void *ctx,
                           kv_dtype compute, kv_tensor *out, kv_tensor *const *inputs, int nin);

/* ---- pieces of the binary references the foreach ops share (ref_binary.c) ---- */
/* Every check add_.Tensor makes before writing self, with op's name in
 * the messages; writes nothing. */
kv_status kv_ref_add_check_inplace(const char *op, kv_tensor *self, kv_tensor *other, kv_scalar alpha);
/* self * scalar with PyTorch's wrapped-number promotion (a new tensor, or
 * NULL + error). */
kv_tensor *kv_ref_mul_scalar(const char *op, kv_tensor *self, kv_scalar scalar);

/* The foreach ops (ref_foreach.c) over element kernels: the list rules
 * (non-empty, equal lengths), add_'s refusals checked on every element
 * before any is written, errors naming the element, one return per
 * element. The reference kernels pass the reference elements; a variant
 * passes its own (kernels/cpu/cpu_foreach.c). */
typedef struct kv_ref_foreach_impl {
    /* add.Tensor (or add_.Tensor when inplace) on the three slots self,
     * other, alpha; leaves one tensor on the stack */
    kv_status (*add)(bool inplace, kv_stack *one, const void *ctx);
    /* self * scalar, the scalar a wrapped number: a new tensor, or NULL +
     * error */
    kv_tensor *(*mul_scalar)(kv_tensor *self, kv_scalar scalar, const void *ctx);
    const void *ctx;
} kv_ref_foreach_impl;
kv_status kv_ref_foreach_run(const kv_op *op, kv_stack *stack, const kv_ref_foreach_impl *impl);
/* The per-tensor op element i of a foreach op's result is ("add.Tensor"
 * for _foreach_add.List, "add_.Tensor", "mul.Tensor"), or NULL for any
 * other op (ref_foreach.c): the tolerance and golden rules that follow
 * from it apply per element. */
const char *kv_ref_foreach_element_op(const char *op);

/* Registers every reference kernel for the CPU key (ref_register.c). */
kv_status kv_ref_register_all(void);
/* The reference kernel of built-in op `id` (kv_op_builtin_id), or NULL. */
kv_kernel_fn kv_ref_kernel_of(int id);

/* ---- out= overloads (ref_out.c) ---- */
/* The functional op an out= op of ops.schema computes ("add.Tensor" for
 * "add.out"), or NULL when out_name is no out= op kvsuite knows. */
const char *kv_ref_out_functional(const char *out_name);
/* Runs out= op `op` (its arguments on `stack`, its return left there)
 * with PyTorch's out= rules (device, dtype, resize, overlap) around two
 * steps, each `step(op, stack, ctx)`: the functional op, then
 * copy_(out, result). */
typedef kv_status (*kv_ref_out_step_fn)(const kv_op *op, kv_stack *stack, void *ctx);
kv_status kv_ref_out_run(const kv_op *op, kv_stack *stack, kv_ref_out_step_fn step, void *ctx);
/* The step that calls the CPU reference kernel of op (the CPU out=
 * kernel's; the exact golden generator wraps it to put the functional
 * op's truth into its result). */
kv_status kv_ref_out_step_reference(const kv_op *op, kv_stack *stack, void *ctx);
/* kv_ref_out_run with each step redispatched to `backend`'s kernel: what
 * a backend registers as its out= kernel (the host API's out_run). */
kv_status kv_ref_out_on(const kv_op *op, kv_key backend, kv_stack *stack);

#endif
