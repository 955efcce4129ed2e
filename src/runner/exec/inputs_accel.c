/* A case's inputs on device=accel (runner/inputs.h).
 *
 * Accel tensors are the target's memory tagged Accel + AccelBoxing. A
 * tensor made with kv_tensor_empty on the accel device (or copied there
 * by a backend) has only the Accel backend key, so an op on it would skip
 * the boxing layer (it reaches the Accel backend kernel straight away)
 * and the case would not test what it says. So an input is placed on the
 * target exactly as a case on that device gets it and then re-tagged with
 * kv_accel_to, which keeps storage, geometry, lazy bits and the autograd
 * record (exec/layout.c does that). Everything built on kv_layout_place
 * (plain inputs, lazy inputs, inputs that require grad) gets accel inputs
 * that way.
 *
 * A factory (no tensor arguments) has only its Device argument to say
 * where the result goes: when the case leaves it unset, it is set to
 * accel, so the accel twin of `zeros` makes an accel tensor. Non-factory
 * Device arguments (_to_copy's) keep None, which means "the input's
 * device", i.e. accel. None of this changes the golden key: the values
 * are the same on every device. */
#include "runner/exec/inputs.h"

#include "runner/case/case_args.h"
#include "runner/check/check.h"
#include "runner/check/check_util.h"

void kv_case_inputs_accel_device(const kv_case *c, const kv_op *op, kv_case_inputs *in) {
    const kv_schema *s = kv_op_schema(op);
    if (!kv_schema_is_factory(s)) return;
    for (int a = 0; a < s->nargs && a < in->nargs; a++) {
        const kv_arg *arg = &s->args[a];
        if (arg->type.kind != KV_TYPE_DEVICE || arg->type.is_list || kv_case_arg_value(c, arg->name) != NULL) continue;
        in->args[a].tag = KV_IV_DEVICE;
        in->args[a].v.device = (kv_device){ KV_DEVICE_ACCEL, 0 };
    }
}
