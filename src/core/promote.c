/* Type promotion: torch.promote_types, torch.result_type, torch.can_cast.
 *
 * kvsuite has no complex32, so wherever PyTorch would produce complex32
 * (f16 with a complex operand of lower priority) c64 is used, and the
 * f16/bf16 rows of the complex columns read c64. */
#include "kv/tensor.h"

#define b1 KV_BOOL
#define u1 KV_U8
#define i1 KV_I8
#define i2 KV_I16
#define i4 KV_I32
#define i8 KV_I64
#define f2 KV_F16
#define bf KV_BF16
#define f4 KV_F32
#define f8 KV_F64
#define c4 KV_C64
#define c8 KV_C128

/* PyTorch's promoteTypes table restricted to kvsuite's dtypes, rows and
 * columns in kv_dtype order. Written out rather than derived so that it
 * can be compared line by line with the documented table; notable
 * entries: u8+i8 = i16 (neither holds the other), f16+bf16 = f32, any
 * integer + f16/bf16 keeps the half type, f64+c64 = c128. */
static const kv_dtype kv_promote_table[KV_DTYPE_COUNT][KV_DTYPE_COUNT] = {
    /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8  c4  c8 */
    /* b1 */ { b1, u1, i1, i2, i4, i8, f2, bf, f4, f8, c4, c8 },
    /* u1 */ { u1, u1, i2, i2, i4, i8, f2, bf, f4, f8, c4, c8 },
    /* i1 */ { i1, i2, i1, i2, i4, i8, f2, bf, f4, f8, c4, c8 },
    /* i2 */ { i2, i2, i2, i2, i4, i8, f2, bf, f4, f8, c4, c8 },
    /* i4 */ { i4, i4, i4, i4, i4, i8, f2, bf, f4, f8, c4, c8 },
    /* i8 */ { i8, i8, i8, i8, i8, i8, f2, bf, f4, f8, c4, c8 },
    /* f2 */ { f2, f2, f2, f2, f2, f2, f2, f4, f4, f8, c4, c8 },
    /* bf */ { bf, bf, bf, bf, bf, bf, f4, bf, f4, f8, c4, c8 },
    /* f4 */ { f4, f4, f4, f4, f4, f4, f4, f4, f4, f8, c4, c8 },
    /* f8 */ { f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, c8, c8 },
    /* c4 */ { c4, c4, c4, c4, c4, c4, c4, c4, c4, c8, c4, c8 },
    /* c8 */ { c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8 },
};

#undef b1
#undef u1
#undef i1
#undef i2
#undef i4
#undef i8
#undef f2
#undef bf
#undef f4
#undef f8
#undef c4
#undef c8

/* "No operand in this group yet" (PyTorch's ScalarType::Undefined). */
#define KV_UNDEFINED KV_DTYPE_COUNT

/* The dtypes PyTorch gives Python floats and complexes while the default
 * dtype is float32. */
#define KV_DEFAULT_FLOAT KV_F32
#define KV_DEFAULT_COMPLEX KV_C64

static bool kv_dtype_ok(kv_dtype dt) { return (int)dt >= 0 && (int)dt < (int)KV_DTYPE_COUNT; }

kv_dtype kv_promote_types(kv_dtype a, kv_dtype b) {
    if (!kv_dtype_ok(a)) return b;
    if (!kv_dtype_ok(b)) return a;
    return kv_promote_table[a][b];
}

static kv_dtype kv_promote_skip_undefined(kv_dtype a, kv_dtype b) {
    if (a == KV_UNDEFINED) return b;
    if (b == KV_UNDEFINED) return a;
    return kv_promote_types(a, b);
}

/* Merges a higher-priority group's dtype with a lower one's, following
 * PyTorch's combine_categories: the lower group only matters when it is of
 * a higher category, and then a floating `higher` keeps its precision
 * (f64 with a complex lower group gives c128). */
static kv_dtype kv_combine_categories(kv_dtype higher, kv_dtype lower) {
    if (higher != KV_UNDEFINED && kv_dtype_is_complex(higher)) return higher;
    if (lower != KV_UNDEFINED && kv_dtype_is_complex(lower)) {
        if (higher != KV_UNDEFINED && kv_dtype_is_floating(higher)) return kv_dtype_to_complex(higher);
        return lower;
    }
    if (higher != KV_UNDEFINED && kv_dtype_is_floating(higher)) return higher;
    if (higher == KV_BOOL || (lower != KV_UNDEFINED && kv_dtype_is_floating(lower))) {
        return kv_promote_skip_undefined(higher, lower);
    }
    if (higher != KV_UNDEFINED) return higher;
    return lower;
}

kv_dtype kv_result_type(const kv_tensor *const *tensors, int ntensors,
                        const kv_scalar *scalars, int nscalars) {
    kv_dtype dim_result = KV_UNDEFINED;
    kv_dtype zero_result = KV_UNDEFINED;
    kv_dtype wrapped_result = KV_UNDEFINED;
    for (int i = 0; i < ntensors && tensors; i++) {
        const kv_tensor *t = tensors[i];
        if (t == NULL) continue;
        if (t->ndim > 0) {
            dim_result = kv_promote_skip_undefined(dim_result, t->dtype);
        } else {
            zero_result = kv_promote_skip_undefined(zero_result, t->dtype);
        }
    }
    for (int i = 0; i < nscalars && scalars; i++) {
        /* Python numbers ("wrapped numbers") take the default dtype of
         * their category; ints and bools keep i64 and bool. */
        kv_dtype cur = kv_scalar_dtype(scalars[i]);
        switch (scalars[i].kind) {
        case KV_SCALAR_BOOL: cur = KV_BOOL; break;
        case KV_SCALAR_INT: cur = KV_I64; break;
        case KV_SCALAR_DOUBLE: cur = KV_DEFAULT_FLOAT; break;
        case KV_SCALAR_COMPLEX: cur = KV_DEFAULT_COMPLEX; break;
        }
        wrapped_result = kv_promote_skip_undefined(wrapped_result, cur);
    }
    const kv_dtype r = kv_combine_categories(dim_result, kv_combine_categories(zero_result, wrapped_result));
    /* Nothing to promote: PyTorch would fail; the default dtype is the
     * least surprising answer for a function that cannot report errors. */
    return r == KV_UNDEFINED ? KV_DEFAULT_FLOAT : r;
}

/* torch.can_cast: no step down in category (complex -> real, float ->
 * integer, anything but bool -> bool); every step up or sideways is fine. */
bool kv_can_cast(kv_dtype from, kv_dtype to) {
    if (!kv_dtype_ok(from) || !kv_dtype_ok(to)) return false;
    return kv_dtype_category_of(from) <= kv_dtype_category_of(to);
}
