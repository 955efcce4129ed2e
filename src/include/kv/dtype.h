/* Element types, their categories and the f16/bf16 conversions. */
#ifndef KV_DTYPE_H
#define KV_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Order matters only for iteration and tables; promotion uses categories
 * and the explicit lattice in promote.c, never the enum order. */
typedef enum kv_dtype {
    KV_BOOL,
    KV_U8,
    KV_I8,
    KV_I16,
    KV_I32,
    KV_I64,
    KV_F16,
    KV_BF16,
    KV_F32,
    KV_F64,
    KV_C64,
    KV_C128,
    KV_DTYPE_COUNT
} kv_dtype;

/* PyTorch's promotion categories, lowest to highest. */
typedef enum kv_dtype_category {
    KV_CAT_BOOL,
    KV_CAT_INT,
    KV_CAT_FLOAT,
    KV_CAT_COMPLEX
} kv_dtype_category;

const char *kv_dtype_name(kv_dtype dt);          /* "f32", "c64", ... */
/* PyTorch's ScalarType names ("Float", "ComplexFloat", ...), for messages
 * that have to read as PyTorch's do. */
const char *kv_dtype_torch_name(kv_dtype dt);
size_t kv_dtype_size(kv_dtype dt);               /* bytes per element */
kv_dtype_category kv_dtype_category_of(kv_dtype dt);
/* Accepts the short names above; returns 0 on success, -1 if unknown. */
int kv_dtype_parse(const char *name, kv_dtype *out);

static inline bool kv_dtype_is_complex(kv_dtype dt) { return dt == KV_C64 || dt == KV_C128; }
static inline bool kv_dtype_is_floating(kv_dtype dt) {
    return dt == KV_F16 || dt == KV_BF16 || dt == KV_F32 || dt == KV_F64;
}
static inline bool kv_dtype_is_integral(kv_dtype dt, bool include_bool) {
    return (dt >= KV_U8 && dt <= KV_I64) || (include_bool && dt == KV_BOOL);
}
/* The real type of a complex dtype (c64 -> f32); other dtypes unchanged. */
kv_dtype kv_dtype_to_real(kv_dtype dt);
/* The complex type holding a real floating dtype (f32 -> c64, f64 -> c128,
 * f16/bf16 -> c64); complex dtypes unchanged. */
kv_dtype kv_dtype_to_complex(kv_dtype dt);

/* IEEE binary16 and bfloat16, stored as raw bits. Narrowing rounds to
 * nearest, ties to even; NaN stays NaN (quiet), infinities stay infinite. */
typedef uint16_t kv_f16;
typedef uint16_t kv_bf16;

float kv_f16_to_f32(kv_f16 h);
kv_f16 kv_f32_to_f16(float f);
float kv_bf16_to_f32(kv_bf16 b);
kv_bf16 kv_f32_to_bf16(float f);
/* Direct from double with a single rounding (no double rounding through
 * f32), which the reference kernels use when they compute in f64. */
kv_f16 kv_f64_to_f16(double d);
kv_bf16 kv_f64_to_bf16(double d);

#endif
