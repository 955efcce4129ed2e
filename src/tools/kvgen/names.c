/* The names kvgen gives things: op ids, wrapper names, parameter names. */
#include "tools/kvgen/kvgen.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Identifiers libkv already declares. A wrapper named like one of them
 * would redeclare it (the op "stack" vs the type kv_stack), so such a
 * wrapper gets the suffix _op. Taken from the headers in src/include/kv; an
 * identifier added there later and not listed here still cannot slip
 * through unnoticed: ops.h then fails to compile. */
static const char *const reserved_idents[] = {
    "kv_alias_info", "kv_allocator", "kv_allocator_alloc", "kv_allocator_cpu_iface",
    "kv_allocator_for", "kv_allocator_free", "kv_allocator_iface", "kv_allocator_install",
    "kv_allocator_stats", "kv_allocator_stats_of", "kv_arg", "kv_arg_bool",
    "kv_arg_device", "kv_arg_double", "kv_arg_dtype", "kv_arg_int",
    "kv_arg_ints", "kv_arg_is_none", "kv_arg_scalar", "kv_arg_str",
    "kv_arg_tensor", "kv_arg_tensors", "kv_autograd_meta", "kv_bf16",
    "kv_bf16_to_f32", "kv_broadcast_shapes", "kv_broadcast_strides", "kv_call",
    "kv_call_by_name", "kv_call_keyset", "kv_can_cast", "kv_contiguous_strides",
    "kv_device", "kv_device_equal", "kv_device_key", "kv_device_parse",
    "kv_device_type", "kv_device_type_name", "kv_dispatch_cache_enabled", "kv_dispatch_cache_set_enabled",
    "kv_dtype", "kv_dtype_category", "kv_dtype_category_of", "kv_dtype_is_complex",
    "kv_dtype_is_floating", "kv_dtype_is_integral", "kv_dtype_name", "kv_dtype_parse",
    "kv_dtype_size", "kv_dtype_to_complex", "kv_dtype_to_real", "kv_entry_kind",
    "kv_error", "kv_error_clear", "kv_f16", "kv_f16_to_f32",
    "kv_f32_to_bf16", "kv_f32_to_f16", "kv_f64_to_bf16", "kv_f64_to_f16",
    "kv_init", "kv_int_list", "kv_ivalue", "kv_ivalue_tag",
    "kv_ivalue_tag_name", "kv_kernel_fn", "kv_key", "kv_key_is_backend",
    "kv_key_name", "kv_key_parse", "kv_keyset", "kv_keyset_add",
    "kv_keyset_below", "kv_keyset_format", "kv_keyset_has", "kv_keyset_highest",
    "kv_keyset_of", "kv_keyset_remove", "kv_last_error", "kv_last_error_message",
    "kv_op", "kv_op_at", "kv_op_count", "kv_op_entry_fn",
    "kv_op_entry_kind", "kv_op_fallthrough_keys", "kv_op_find", "kv_op_handle", "kv_api_op",
    "kv_op_name", "kv_op_register", "kv_op_schema", "kv_promote_types",
    "kv_push_bool", "kv_push_device", "kv_push_double", "kv_push_dtype",
    "kv_push_int", "kv_push_ints", "kv_push_none", "kv_push_opt_bool",
    "kv_push_opt_device", "kv_push_opt_double", "kv_push_opt_dtype", "kv_push_opt_int",
    "kv_push_opt_ints", "kv_push_opt_scalar", "kv_push_scalar", "kv_push_str",
    "kv_push_tensor", "kv_push_tensors", "kv_redispatch", "kv_register_fallback",
    "kv_register_fallback_fallthrough", "kv_register_fallthrough", "kv_register_kernel", "kv_result_type",
    "kv_same_shape", "kv_scalar", "kv_scalar_bool", "kv_scalar_category",
    "kv_scalar_complex", "kv_scalar_double", "kv_scalar_dtype", "kv_scalar_format",
    "kv_scalar_int", "kv_scalar_kind", "kv_scalar_parse", "kv_scalar_to_bool",
    "kv_scalar_to_complex", "kv_scalar_to_double", "kv_scalar_to_int", "kv_schema",
    "kv_schema_arg_index", "kv_schema_format", "kv_schema_is_factory", "kv_schema_is_inplace",
    "kv_schema_is_out", "kv_schema_is_view", "kv_schema_parse", "kv_shape_format",
    "kv_stack", "kv_stack_clear_returns", "kv_stack_on", "kv_stack_push",
    "kv_stack_return_bool", "kv_stack_return_tensor", "kv_stack_return_tensors", "kv_status",
    "kv_status_name", "kv_status_parse", "kv_storage", "kv_storage_new",
    "kv_storage_release", "kv_storage_retain", "kv_tensor", "kv_tensor_alias",
    "kv_tensor_autograd_free_hook", "kv_tensor_bump_version", "kv_tensor_data", "kv_tensor_element",
    "kv_tensor_empty", "kv_tensor_empty_strided", "kv_tensor_from_data", "kv_tensor_get_f64",
    "kv_tensor_is_contiguous", "kv_tensor_list", "kv_tensor_numel", "kv_tensor_release",
    "kv_tensor_retain", "kv_tensor_set_f64", "kv_tensor_version", "kv_tensor_view",
    "kv_tls_exclude_push", "kv_tls_get", "kv_tls_include_push", "kv_tls_keys",
    "kv_tls_pop", "kv_tls_set", "kv_type", "kv_type_kind",
    "kv_type_kind_name", "kv_verror", "kv_wrap_dim",
    "kv_op_id", "kv_op_names", "kv_op_schemas",
};

/* C17 keywords, the <stdbool.h> macros, and the locals every wrapper
 * declares (see emit_api.c), none of which may name a parameter. */
static const char *const reserved_params[] = {
    "auto", "break", "case", "char", "const", "continue", "default", "do",
    "double", "else", "enum", "extern", "float", "for", "goto", "if",
    "inline", "int", "long", "register", "restrict", "return", "short",
    "signed", "sizeof", "static", "struct", "switch", "typedef", "union",
    "unsigned", "void", "volatile", "while", "_Alignas", "_Alignof",
    "_Atomic", "_Bool", "_Complex", "_Generic", "_Imaginary", "_Noreturn",
    "_Static_assert", "_Thread_local", "bool", "true", "false", "NULL",
    "handle", "op", "slots", "st", "rc", "tags",
};

static bool in_list(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0) return true;
    return false;
}

void kv_gen_id_of(const char *full_name, char *buf, size_t cap) {
    if (cap == 0) return;
    size_t n = (size_t)snprintf(buf, cap, "KV_OP_%s", full_name);
    if (n >= cap) n = cap - 1;
    for (size_t i = strlen("KV_OP_"); i < n; i++)
        buf[i] = buf[i] == '.' ? '_' : (char)toupper((unsigned char)buf[i]);
}

void kv_gen_cname_of(const kv_schema *s, bool base_shared, char *buf, size_t cap) {
    if (cap == 0) return;
    if (base_shared && s->overload[0])
        snprintf(buf, cap, "kv_%s_%s", s->name, s->overload);
    else
        snprintf(buf, cap, "kv_%s", s->name);
    if (in_list(buf, reserved_idents, sizeof reserved_idents / sizeof *reserved_idents)) {
        size_t n = strlen(buf);
        snprintf(buf + n, cap - n, "_op");
    }
}

void kv_gen_param_name(const char *schema_name, char *buf, size_t cap) {
    if (cap == 0) return;
    bool reserved = in_list(schema_name, reserved_params, sizeof reserved_params / sizeof *reserved_params);
    snprintf(buf, cap, reserved ? "%s_" : "%s", schema_name);
}
