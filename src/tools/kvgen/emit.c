/* The generated files and which emitter writes each. */
#include "tools/kvgen/kvgen.h"

const char *kv_gen_file_path(kv_gen_file which) {
    switch (which) {
    case KV_GEN_FILE_OP_IDS_H: return "kv/op_ids.h";
    case KV_GEN_FILE_OPS_TABLE_C: return "ops_table.c";
    case KV_GEN_FILE_OPS_H: return "kv/ops.h";
    case KV_GEN_FILE_OPS_API_C: return "ops_api.c";
    case KV_GEN_FILE_COUNT: break;
    }
    return NULL;
}

kv_status kv_gen_emit(const kv_gen_ops *ops, kv_gen_file which, kv_gen_buf *out) {
    switch (which) {
    case KV_GEN_FILE_OP_IDS_H: kv_gen_emit_op_ids(ops, out); break;
    case KV_GEN_FILE_OPS_TABLE_C: kv_gen_emit_ops_table(ops, out); break;
    case KV_GEN_FILE_OPS_H: kv_gen_emit_ops_h(ops, out); break;
    case KV_GEN_FILE_OPS_API_C: kv_gen_emit_ops_api(ops, out); break;
    case KV_GEN_FILE_COUNT: return kv_error(KV_ERR_INVALID_ARG, "kvgen: no generated file number %d", (int)which);
    }
    if (out->failed) return kv_error(KV_ERR_OOM, "kvgen: out of memory writing %s", kv_gen_file_path(which));
    return KV_OK;
}
