/* dtype names, sizes and categories. */
#include "kv/dtype.h"

#include <string.h>

const char *kv_dtype_name(kv_dtype dt) {
    switch (dt) {
    case KV_BOOL: return "bool";
    case KV_U8: return "u8";
    case KV_I8: return "i8";
    case KV_I16: return "i16";
    case KV_I32: return "i32";
    case KV_I64: return "i64";
    case KV_F16: return "f16";
    case KV_BF16: return "bf16";
    case KV_F32: return "f32";
    case KV_F64: return "f64";
    case KV_C64: return "c64";
    case KV_C128: return "c128";
    case KV_DTYPE_COUNT: break;
    }
    return "?";
}

const char *kv_dtype_torch_name(kv_dtype dt) {
    switch (dt) {
    case KV_BOOL: return "Bool";
    case KV_U8: return "Byte";
    case KV_I8: return "Char";
    case KV_I16: return "Short";
    case KV_I32: return "Int";
    case KV_I64: return "Long";
    case KV_F16: return "Half";
    case KV_BF16: return "BFloat16";
    case KV_F32: return "Float";
    case KV_F64: return "Double";
    case KV_C64: return "ComplexFloat";
    case KV_C128: return "ComplexDouble";
    case KV_DTYPE_COUNT: break;
    }
    return "?";
}

size_t kv_dtype_size(kv_dtype dt) {
    switch (dt) {
    case KV_BOOL: return 1;
    case KV_U8: return 1;
    case KV_I8: return 1;
    case KV_I16: return 2;
    case KV_I32: return 4;
    case KV_I64: return 8;
    case KV_F16: return 2;
    case KV_BF16: return 2;
    case KV_F32: return 4;
    case KV_F64: return 8;
    case KV_C64: return 8;
    case KV_C128: return 16;
    case KV_DTYPE_COUNT: break;
    }
    return 0;
}

kv_dtype_category kv_dtype_category_of(kv_dtype dt) {
    switch (dt) {
    case KV_BOOL: return KV_CAT_BOOL;
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64: return KV_CAT_INT;
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64: return KV_CAT_FLOAT;
    case KV_C64:
    case KV_C128: return KV_CAT_COMPLEX;
    case KV_DTYPE_COUNT: break;
    }
    return KV_CAT_BOOL;
}

int kv_dtype_parse(const char *name, kv_dtype *out) {
    if (name == NULL) return -1;
    for (int i = 0; i < (int)KV_DTYPE_COUNT; i++) {
        if (strcmp(name, kv_dtype_name((kv_dtype)i)) == 0) {
            if (out) *out = (kv_dtype)i;
            return 0;
        }
    }
    return -1;
}

kv_dtype kv_dtype_to_real(kv_dtype dt) {
    switch (dt) {
    case KV_C64: return KV_F32;
    case KV_C128: return KV_F64;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_F16:
    case KV_BF16:
    case KV_F32:
    case KV_F64:
    case KV_DTYPE_COUNT: break;
    }
    return dt;
}

kv_dtype kv_dtype_to_complex(kv_dtype dt) {
    switch (dt) {
    /* There is no complex half in kvsuite; c64 is the smallest complex
     * type that holds f16 and bf16 values exactly. */
    case KV_F16:
    case KV_BF16:
    case KV_F32: return KV_C64;
    case KV_F64: return KV_C128;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return dt;
}
