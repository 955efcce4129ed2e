/* The lean fast path's cold parts; the path itself is inline in
 * boxing/lean.h, specialised per op by the generated boxing kernels. */
#include "boxing/lean.h"

_Thread_local kv_accel_lean_memo kv_accel_lean_memos[KV_OP_COUNT];

void kv_accel_lean_decide(kv_accel_lean_memo *m, const kv_op *op, kv_keyset keys, kv_key target, kv_tls_keys tls,
                          uint_fast64_t epoch) {
    bool observed = true;
    kv_kernel_fn fn = NULL;
    /* Batched arguments go below the boxing layer (kv_accel_box_begin). */
    if (!kv_keyset_has(keys, KV_KEY_BATCHED)) {
        const kv_keyset boxed = kv_accel_keys_to_target(keys, target);
        if (kv_accel_gate_is_plain_exact()) fn = kv_dispatch_selected_kernel(op, boxed, target, &observed);
        else if (kv_accel_gate_allows_lean(op, target, boxed)) fn = kv_op_entry_fn(op, target);
    }
    *m = (kv_accel_lean_memo){ epoch, keys, tls.included, tls.excluded, fn, target, observed };
}

void kv_accel_lean_release(kv_ivalue *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i].tag == KV_IV_TENSOR) kv_tensor_release(v[i].v.tensor);
}

kv_status kv_accel_lean_retag_error(const kv_op *op) {
    const kv_status st = kv_last_error();
    if (st != KV_OK) return st;
    return kv_error(KV_ERR_INTERNAL, "%s: re-tagging a return failed without an error", kv_op_name(op));
}
