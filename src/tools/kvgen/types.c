/* How schema types become C types in the typed API, and how returns come
 * back to the caller. The table is the one in DESIGN.md section 3: every
 * argument kind the boxed stack can carry has exactly one C spelling. */
#include "tools/kvgen/kvgen.h"

#include <stdio.h>
#include <string.h>

static bool map_list_arg(kv_type t, kv_gen_arg_map *out) {
    switch (t.kind) {
    case KV_TYPE_TENSOR:
        /* No stack value holds an optional tensor list. */
        if (t.optional) return false;
        *out = (kv_gen_arg_map){ "kv_tensor_list", "kv_push_tensors" };
        return true;
    case KV_TYPE_INT:
        *out = t.optional ? (kv_gen_arg_map){ "const kv_int_list *", "kv_push_opt_ints" }
                          : (kv_gen_arg_map){ "kv_int_list", "kv_push_ints" };
        return true;
    case KV_TYPE_FLOAT:
    case KV_TYPE_BOOL:
    case KV_TYPE_STR:
    case KV_TYPE_SCALAR:
    case KV_TYPE_SCALAR_TYPE:
    case KV_TYPE_DEVICE:
    case KV_TYPE_LAYOUT:
    case KV_TYPE_MEMORY_FORMAT:
    case KV_TYPE_GENERATOR:
        return false;
    }
    return false;
}

bool kv_gen_map_arg(kv_type t, kv_gen_arg_map *out) {
    if (t.is_list) return map_list_arg(t, out);
    bool o = t.optional;
    switch (t.kind) {
    case KV_TYPE_TENSOR:
        /* kv_push_tensor pushes NONE for NULL, which is Tensor?'s None. */
        *out = (kv_gen_arg_map){ "kv_tensor *", "kv_push_tensor" };
        return true;
    case KV_TYPE_INT:
    case KV_TYPE_LAYOUT:
    case KV_TYPE_MEMORY_FORMAT:
        *out = o ? (kv_gen_arg_map){ "const int64_t *", "kv_push_opt_int" }
                 : (kv_gen_arg_map){ "int64_t", "kv_push_int" };
        return true;
    case KV_TYPE_FLOAT:
        *out = o ? (kv_gen_arg_map){ "const double *", "kv_push_opt_double" }
                 : (kv_gen_arg_map){ "double", "kv_push_double" };
        return true;
    case KV_TYPE_BOOL:
        *out = o ? (kv_gen_arg_map){ "const bool *", "kv_push_opt_bool" }
                 : (kv_gen_arg_map){ "bool", "kv_push_bool" };
        return true;
    case KV_TYPE_STR:
        *out = (kv_gen_arg_map){ "const char *", "kv_push_str" };
        return true;
    case KV_TYPE_SCALAR:
        *out = o ? (kv_gen_arg_map){ "const kv_scalar *", "kv_push_opt_scalar" }
                 : (kv_gen_arg_map){ "kv_scalar", "kv_push_scalar" };
        return true;
    case KV_TYPE_SCALAR_TYPE:
        *out = o ? (kv_gen_arg_map){ "const kv_dtype *", "kv_push_opt_dtype" }
                 : (kv_gen_arg_map){ "kv_dtype", "kv_push_dtype" };
        return true;
    case KV_TYPE_DEVICE:
        *out = o ? (kv_gen_arg_map){ "const kv_device *", "kv_push_opt_device" }
                 : (kv_gen_arg_map){ "kv_device", "kv_push_device" };
        return true;
    case KV_TYPE_GENERATOR:
        /* The caller's generator, advanced by the kernel; NULL is None
         * (the thread's default generator). Passed through unboxed. */
        *out = (kv_gen_arg_map){ "kv_generator *", "kv_push_generator" };
        return true;
    }
    return false;
}

bool kv_gen_map_return(kv_type t, kv_gen_ret_map *out) {
    /* A returned list or None has no fixed slot layout to check, and a
     * returned string has no owner; no op in the schema needs either. */
    if (t.is_list || t.optional) return false;
    switch (t.kind) {
    case KV_TYPE_TENSOR:
        *out = (kv_gen_ret_map){ "kv_tensor **", "KV_IV_TENSOR", "tensor" };
        return true;
    case KV_TYPE_INT:
    case KV_TYPE_LAYOUT:
    case KV_TYPE_MEMORY_FORMAT:
        *out = (kv_gen_ret_map){ "int64_t *", "KV_IV_INT", "i" };
        return true;
    case KV_TYPE_FLOAT:
        *out = (kv_gen_ret_map){ "double *", "KV_IV_DOUBLE", "d" };
        return true;
    case KV_TYPE_BOOL:
        *out = (kv_gen_ret_map){ "bool *", "KV_IV_BOOL", "b" };
        return true;
    case KV_TYPE_SCALAR:
        *out = (kv_gen_ret_map){ "kv_scalar *", "KV_IV_SCALAR", "scalar" };
        return true;
    case KV_TYPE_SCALAR_TYPE:
        *out = (kv_gen_ret_map){ "kv_dtype *", "KV_IV_DTYPE", "dtype" };
        return true;
    case KV_TYPE_DEVICE:
        *out = (kv_gen_ret_map){ "kv_device *", "KV_IV_DEVICE", "device" };
        return true;
    case KV_TYPE_STR:
    case KV_TYPE_GENERATOR:
        return false;
    }
    return false;
}

int kv_gen_first_list_arg(const kv_schema *s) {
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].type.kind == KV_TYPE_TENSOR && s->args[i].type.is_list) return i;
    return -1;
}

kv_gen_ret_kind kv_gen_return_kind(const kv_schema *s) {
    if (s->nreturns != 1) return KV_GEN_RET_OUTPARAMS;
    const kv_arg *r = &s->returns[0];
    /* A Tensor[] return has as many elements as the op's first Tensor[]
     * argument (PyTorch's foreach ops): without one its length is unknown. */
    if (r->type.kind == KV_TYPE_TENSOR && r->type.is_list && !r->type.optional && kv_gen_first_list_arg(s) >= 0)
        return KV_GEN_RET_TENSOR_LIST;
    if (r->type.kind != KV_TYPE_TENSOR || r->type.is_list || r->type.optional)
        return KV_GEN_RET_OUTPARAMS;
    return r->alias.is_write ? KV_GEN_RET_ALIAS : KV_GEN_RET_TENSOR;
}

void kv_gen_type_format(kv_type t, char *buf, size_t cap) {
    char list[16] = "";
    if (t.is_list) {
        if (t.fixed_len > 0)
            snprintf(list, sizeof list, "[%d]", t.fixed_len);
        else
            snprintf(list, sizeof list, "[]");
    }
    snprintf(buf, cap, "%s%s%s", kv_type_kind_name(t.kind), list, t.optional ? "?" : "");
}
