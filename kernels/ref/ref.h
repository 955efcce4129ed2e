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

#define KV_DTYPES_ALL ((1u << KV_DTYPE_COUNT) - 1)
#define KV_DTYPES_FLOATING ((1u << KV_F16) | (1u << KV_BF16) | (1u << KV_F32) | (1u << KV_F64))
#define KV_DTYPES_COMPLEX ((1u << KV_C64) | (1u << KV_C128))
#define KV_DTYPES_INTEGRAL ((1u << KV_U8) | (1u << KV_I8) | (1u << KV_I16) | (1u << KV_I32) | (1u << KV_I64))
#define KV_DTYPES_REAL (KV_DTYPES_INTEGRAL | KV_DTYPES_FLOATING)

/* Registers every reference kernel for the CPU key (ref_register.c). */
kv_status kv_ref_register_all(void);

#endif
