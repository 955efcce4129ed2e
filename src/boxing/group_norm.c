/* native_group_norm: a non-contiguous accel input is made contiguous
 * (kv_contiguous on the accel tensor, itself a boxed op) before it is
 * boxed, so the target's kernel reads its input in memory order. The
 * reference kernel reads any strides and accumulates in a fixed logical
 * order, so the result is the same bit for bit either way; with
 * KV_ACCEL_DISABLE=group_norm the input is boxed as it is. */
#include "boxing/boxing_internal.h"

#include "kv/ops.h"

kv_status kv_accel_box_contiguous(kv_accel_box *b, int slot) {
    if (b->st != KV_OK) return b->st;
    kv_ivalue *v = &b->slots[slot];
    if (!kv_accel_special_enabled(KV_ACCEL_SPECIAL_GROUP_NORM) || v->tag != KV_IV_TENSOR ||
        v->v.tensor->device.type != KV_DEVICE_ACCEL || kv_tensor_is_contiguous(v->v.tensor))
        return kv_accel_box_tensor(b, slot);
    kv_tensor *c = kv_contiguous(v->v.tensor, 0 /* contiguous_format */);
    if (c == NULL) {
        kv_status st = kv_last_error();
        return kv_accel_box_fail(b, st != KV_OK ? st : KV_ERR_INTERNAL);
    }
    kv_status st = kv_accel_box_own(b, c, NULL, -1);
    if (st != KV_OK) return kv_accel_box_fail(b, st);
    kv_tensor *a = kv_accel_alias_to_target(c, b->target);
    if (a == NULL) {
        st = kv_last_error();
        return kv_accel_box_fail(b, st != KV_OK ? st : KV_ERR_INTERNAL);
    }
    /* Maps back to c, not to the caller's tensor: c is what was boxed. */
    kv_accel_box_note(b, a);
    st = kv_accel_box_own(b, a, c, slot);
    if (st != KV_OK) return kv_accel_box_fail(b, st);
    v->v.tensor = a;
    return KV_OK;
}
