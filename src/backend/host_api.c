/* The function table a plugin calls libkv through (kv/backend.h says why
 * a table and not symbols). Every entry is the public libkv function of
 * the same name, so a plugin's code reads like libkv code with `host->`
 * in front. Adding an entry changes the ABI: bump KV_BACKEND_ABI_VERSION. */
#include "backend/backend_internal.h"
#include "kv/tune.h"
#include "ref/ref.h"

static const kv_host_api kv_host_table = {
    .abi_version = KV_BACKEND_ABI_VERSION,
    .error = kv_error,
    .last_error = kv_last_error,
    .last_error_message = kv_last_error_message,
    .register_kernel = kv_backend_scope_register_kernel,
    .op_count = kv_op_count,
    .op_at = kv_op_at,
    .op_name = kv_op_name,
    .op_schema = kv_op_schema,
    .op_builtin_id = kv_op_builtin_id,
    .op_entry_kind = kv_op_entry_kind,
    .redispatch = kv_redispatch,
    .call_reference = kv_backend_call_reference,
    .register_fallback = kv_backend_scope_register_fallback,
    .stage_reference = kv_backend_stage_reference,
    .tune_register_variant = kv_backend_scope_register_variant,
    .key_name = kv_key_name,
    .device_type_name = kv_device_type_name,
    .stack_push = kv_stack_push,
    .stack_return_tensors = kv_stack_return_tensors,
    .stack_return_bool = kv_stack_return_bool,
    .tensor_empty = kv_tensor_empty,
    .tensor_view = kv_tensor_view,
    .tensor_retain = kv_tensor_retain,
    .tensor_release = kv_tensor_release,
    .tensor_numel = kv_tensor_numel,
    .tensor_is_contiguous = kv_tensor_is_contiguous,
    .tensor_version = kv_tensor_version,
    .tensor_bump_version = kv_tensor_bump_version,
    .host_view = kv_backend_host_view,
    .copy_to_device = kv_backend_copy_to_device,
    .dtype_size = kv_dtype_size,
    .dtype_name = kv_dtype_name,
    .result_type = kv_result_type,
    .can_cast = kv_can_cast,
    .broadcast_shapes = kv_broadcast_shapes,
    .wrap_dim = kv_wrap_dim,
    .scalar_to_double = kv_scalar_to_double,
    .out_run = kv_ref_out_on,
};

const kv_host_api *kv_backend_host_api(void) { return &kv_host_table; }
