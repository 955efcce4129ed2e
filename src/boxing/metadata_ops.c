/* The hand-registered metadata ops (boxing/hand_ops.h): accel views made
 * without boxing.
 *
 * A view only computes geometry. The manual path calls the target's own
 * view kernel on an alias header that lives in this frame (no allocation,
 * no reference taken, no dispatch) and re-tags the view it returns: one
 * allocation in all, and the view shares the accel tensor's storage. That
 * is only right when the slow path would have reached the same kernel
 * with nothing above it doing anything, so the manual path asks the same
 * gate as every fast path; when the gate says no (autograd recording, a
 * lazy bit the op does not fall through, a TLS mode), when the kill switch
 * is on, or with KV_ACCEL_DISABLE=metadata, the op is boxed like any
 * other. */
#include "boxing/boxing_internal.h"

#include <string.h>

#include "boxing/hand_ops.h"

static kv_status accel_metadata(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    if (!kv_accel_special_enabled(KV_ACCEL_SPECIAL_METADATA)) return kv_accel_box_generic(op, ks, stack);
    kv_tensor *self = stack->size > 0 ? kv_arg_tensor(stack, 0) : NULL;
    kv_key target = kv_accel_target();
    /* Batched wrappers, a missing target, odd stacks: the generic path
     * handles (or reports) them. */
    if (self == NULL || self->device.type != KV_DEVICE_ACCEL || kv_keyset_has(self->keys, KV_KEY_BATCHED) ||
        target == KV_KEY_NONE || stack->size > KV_STACK_MAX)
        return kv_accel_box_generic(op, ks, stack);

    kv_tensor shadow;
    kv_accel_shadow(&shadow, self, target);
    kv_ivalue slots[KV_STACK_MAX];
    memcpy(slots, stack->slots, (size_t)stack->size * sizeof *slots);
    slots[0].v.tensor = &shadow;
    kv_stack boxed = { slots, stack->size, KV_STACK_MAX };
    if (!kv_accel_gate_allows_stack(op, target, &boxed)) return kv_accel_box_generic(op, ks, stack);

    kv_accel_count(kv_op_builtin_id(op), KV_ACCEL_PATH_MANUAL);
    kv_status st = kv_op_entry_fn(op, target)(op, kv_keyset_of(target), &boxed);
    if (st != KV_OK) return st;
    kv_tensor *r = boxed.size == 1 && boxed.slots[0].tag == KV_IV_TENSOR ? boxed.slots[0].v.tensor : NULL;
    if (r == NULL) {
        kv_stack_clear_returns(&boxed);
        return kv_error(KV_ERR_INTERNAL, "%s: the %s view kernel did not return one tensor", kv_op_name(op),
                        kv_key_name(target));
    }
    if (r == &shadow) {
        /* The kernel handed its input back (a no-op view): that input is
         * the caller's tensor, and the frame's header must not escape. */
        kv_tensor_retain(self);
        kv_stack_return_tensor(stack, self);
        return KV_OK;
    }
    r = kv_accel_retag_owned(r);
    if (r == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, r);
    return KV_OK;
}

kv_status kv_accel_register_metadata_ops(void) {
    static const struct {
        const char *name;
        int metadata;
    } ops[] = {
#define KV_HAND_OP_ROW(name, is_metadata) { name, is_metadata },
        KV_ACCEL_HAND_OPS(KV_HAND_OP_ROW)
#undef KV_HAND_OP_ROW
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        if (!ops[i].metadata) continue;
        kv_status st = kv_register_kernel(ops[i].name, KV_KEY_ACCEL_BOXING, accel_metadata);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
