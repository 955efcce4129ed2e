/* kv_boxing_register: brings the accel device up once kv_init has
 * registered the backends and the modes. Order matters only in that the
 * environment (which may pick the target) is read before any kernel is
 * registered. */
#include "boxing/boxing_internal.h"

kv_status kv_boxing_register(void) {
    kv_status st = kv_accel_env_init();
    if (st != KV_OK) return st;
    if ((st = kv_accel_register_generated()) != KV_OK) return st;
    if ((st = kv_accel_register_metadata_ops()) != KV_OK) return st;
    if ((st = kv_accel_register_to_copy()) != KV_OK) return st;
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (kv_op_entry_kind(op, KV_KEY_ACCEL_BOXING) != KV_ENTRY_KERNEL) continue;
        if ((st = kv_register_kernel(kv_op_name(op), KV_KEY_ACCEL, kv_accel_box_dense)) != KV_OK) return st;
    }
    return KV_OK;
}
