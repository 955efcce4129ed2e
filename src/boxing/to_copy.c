/* _to_copy on accel tensors, registered by hand (boxing/hand_ops.h).
 *
 * The special path covers accel->accel (device None or accel) and
 * accel->target (device = the target's device): when the gate allows the
 * fast path, the target's _to_copy kernel reads the accel tensor through
 * an alias header in this frame, so the call allocates nothing but its
 * result, which is re-tagged as accel unless the target was asked for.
 * Everything else (another device, the gate saying no, the kill switch,
 * KV_ACCEL_DISABLE=to_copy) goes through generic boxing, whose Device
 * handling gives the same answers. */
#include "boxing/boxing_internal.h"

#include <string.h>

enum { SLOT_SELF = 0, SLOT_DEVICE = 3 };

static kv_status accel_to_copy(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    if (!kv_accel_special_enabled(KV_ACCEL_SPECIAL_TO_COPY) || stack->size > KV_STACK_MAX ||
        stack->size <= SLOT_DEVICE)
        return kv_accel_box_generic(op, ks, stack);
    kv_tensor *self = kv_arg_tensor(stack, SLOT_SELF);
    kv_key target = kv_accel_target();
    if (self == NULL || self->device.type != KV_DEVICE_ACCEL || kv_keyset_has(self->keys, KV_KEY_BATCHED) ||
        target == KV_KEY_NONE)
        return kv_accel_box_generic(op, ks, stack);
    const kv_ivalue *dev = &stack->slots[SLOT_DEVICE];
    bool to_accel = dev->tag == KV_IV_NONE || (dev->tag == KV_IV_DEVICE && dev->v.device.type == KV_DEVICE_ACCEL);
    bool to_target = dev->tag == KV_IV_DEVICE && dev->v.device.type == (kv_device_type)target;
    if (!to_accel && !to_target) return kv_accel_box_generic(op, ks, stack);

    kv_tensor shadow;
    kv_accel_shadow(&shadow, self, target);
    kv_ivalue slots[KV_STACK_MAX];
    memcpy(slots, stack->slots, (size_t)stack->size * sizeof *slots);
    slots[SLOT_SELF].v.tensor = &shadow;
    if (to_accel && dev->tag == KV_IV_DEVICE) slots[SLOT_DEVICE].v.device = shadow.device;
    kv_stack boxed = { slots, stack->size, KV_STACK_MAX };
    if (!kv_accel_gate_allows_stack(op, target, &boxed)) return kv_accel_box_generic(op, ks, stack);

    kv_accel_count(kv_op_builtin_id(op), KV_ACCEL_PATH_FAST);
    kv_status st = kv_redispatch(op, kv_keyset_of(target), &boxed);
    if (st != KV_OK) return st;
    kv_tensor *r = boxed.size == 1 && boxed.slots[0].tag == KV_IV_TENSOR ? boxed.slots[0].v.tensor : NULL;
    if (r == NULL || r == &shadow) {
        /* _to_copy always makes a new tensor; a kernel that returns its
         * input would leak this frame's header. */
        if (r != &shadow) kv_stack_clear_returns(&boxed);
        return kv_error(KV_ERR_INTERNAL, "_to_copy: the %s kernel did not return a new tensor", kv_key_name(target));
    }
    if (to_accel) {
        r = kv_accel_retag_owned(r);
        if (r == NULL) return kv_last_error();
    }
    kv_stack_return_tensor(stack, r);
    return KV_OK;
}

kv_status kv_accel_register_to_copy(void) { return kv_register_kernel("_to_copy", KV_KEY_ACCEL_BOXING, accel_to_copy); }
