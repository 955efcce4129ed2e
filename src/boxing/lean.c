/* The lean fast path's cold parts; the path itself is inline in
 * boxing/lean.h, specialised per op by the generated boxing kernels. */
#include "boxing/lean.h"

void kv_accel_lean_release(kv_ivalue *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i].tag == KV_IV_TENSOR) kv_tensor_release(v[i].v.tensor);
}

kv_status kv_accel_lean_retag_error(const kv_op *op) {
    const kv_status st = kv_last_error();
    if (st != KV_OK) return st;
    return kv_error(KV_ERR_INTERNAL, "%s: re-tagging a return failed without an error", kv_op_name(op));
}
