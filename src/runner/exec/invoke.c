/* Calling an op on a case's boxed arguments (runner/check.h). */
#include <stdio.h>
#include <string.h>

#include "runner/check/check.h"
#include "runner/exec/inflight.h"
#include "runner/exec/input_guard.h"

kv_status kv_case_invoke(const kv_op *op, kv_case_inputs *in, kv_keyset ks, kv_case_outputs *out) {
    if (out == NULL) return kv_error(KV_ERR_INVALID_ARG, "invoke: argument 'out': NULL");
    memset(out, 0, sizeof *out);
    if (op == NULL || in == NULL) return kv_error(KV_ERR_INVALID_ARG, "invoke: NULL op or inputs");
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    const kv_schema *sch = kv_op_schema(op);
    kv_generator gens[KV_SCHEMA_MAX_ARGS];
    kv_generator *gen = NULL;
    for (int i = 0; i < in->nargs; i++) {
        kv_ivalue v = in->args[i];
        if (sch != NULL && i < sch->nargs && sch->args[i].type.kind == KV_TYPE_GENERATOR) {
            /* A fresh copy per call; None is the default generator, rewound
             * so that every call of a case draws the same values. */
            if (v.tag == KV_IV_GENERATOR && i < KV_SCHEMA_MAX_ARGS) {
                gens[i] = *v.v.gen;
                v.v.gen = gen = &gens[i];
            } else {
                gen = kv_generator_default();
                kv_generator_manual_seed(gen, 0);
            }
        }
        const kv_status s = kv_stack_push(&st, v);
        if (s != KV_OK) return s;
    }
    const int nreturns = sch != NULL ? kv_schema_return_count(sch, &st) : -1;
    kv_input_snap snap;
    kv_input_guard_take(op, in, &snap);
    kv_error_clear();
    const kv_status s0 = ks ? kv_redispatch(op, ks, &st) : kv_call(op, &st);
    /* A kernel that left the FP environment changed fails this call, by
     * name; inflight.c already put the environment back. So does one that
     * changed or released an input (input_guard.c put it back). */
    char fpenv[640], inputs[640];
    const bool fpenv_changed = kv_inflight_take_fpenv_violation(fpenv, (int)sizeof fpenv, NULL);
    const bool inputs_broken = !kv_input_guard_check(op, ks, &snap, inputs, (int)sizeof inputs);
    if ((fpenv_changed || inputs_broken) && s0 == KV_OK) {
        for (int i = 0; i < st.size; i++)
            if (st.slots[i].tag == KV_IV_TENSOR) kv_tensor_release(st.slots[i].v.tensor);
    }
    const kv_status s = fpenv_changed   ? kv_error(KV_ERR_INTERNAL, "%s", fpenv)
                        : inputs_broken ? kv_error(KV_ERR_INTERNAL, "%s", inputs)
                                        : s0;
    if (gen != NULL) {
        out->has_gen = true;
        out->gen_after = *gen;
    }
    if (s != KV_OK) {
        /* The returned code is the truth; keep the thread's error in step
         * with it, message and all (an empty message stays empty, so the
         * error check can report a kernel that fails without saying why). */
        if (kv_last_error() != s) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kv_last_error_message());
            kv_error(s, "%s", msg);
        }
        return s;
    }
    /* A kernel pops its arguments and pushes the schema's returns. One that
     * says KV_OK with anything else on the stack (a plugin that forgot its
     * output, or left its arguments there) cannot be read: what is there
     * may be the caller's borrowed inputs, which releasing would free
     * twice. Nothing is released (a leak in a worker beats a corrupt heap). */
    if (sch != NULL && st.size != nreturns)
        return kv_error(KV_ERR_INTERNAL,
                        "%s: the kernel returned KV_OK with %d value%s on the stack where the schema returns %d "
                        "output%s (a kernel pops its arguments and pushes its outputs)",
                        kv_op_name(op), st.size, st.size == 1 ? "" : "s", nreturns, nreturns == 1 ? "" : "s");
    /* The stack now holds owned returns. Keep the first few tensors, drop
     * (release) anything past what kv_case_outputs can hold. */
    kv_status result = KV_OK;
    for (int i = 0; i < st.size; i++) {
        kv_ivalue *v = &st.slots[i];
        switch (v->tag) {
        case KV_IV_TENSOR:
            if (out->n < KV_CASE_MAX_OUTPUTS) {
                out->t[out->n++] = v->v.tensor;
            } else {
                kv_tensor_release(v->v.tensor);
                result = kv_error(KV_ERR_INTERNAL, "%s: returned more than %d tensors", kv_op_name(op),
                                  KV_CASE_MAX_OUTPUTS);
            }
            break;
        case KV_IV_BOOL:
            out->is_bool = true;
            out->b = v->v.b;
            break;
        case KV_IV_NONE: break;
        case KV_IV_TENSOR_LIST:
        case KV_IV_SCALAR:
        case KV_IV_INT:
        case KV_IV_INT_LIST:
        case KV_IV_DOUBLE:
        case KV_IV_DTYPE:
        case KV_IV_DEVICE:
        case KV_IV_STR:
        case KV_IV_GENERATOR:
            result = kv_error(KV_ERR_INTERNAL, "%s: return %d is a %s, which the runner cannot compare",
                              kv_op_name(op), i, kv_ivalue_tag_name(v->tag));
            break;
        }
    }
    if (result == KV_OK) result = kv_case_outputs_add_written_list(op, in, out);
    if (result != KV_OK) kv_case_outputs_free(out);
    return result;
}

kv_status kv_case_outputs_add_written_list(const kv_op *op, const kv_case_inputs *in, kv_case_outputs *out) {
    const kv_schema *s = kv_op_schema(op);
    const int l = s != NULL && s->nreturns == 0 ? kv_schema_mutable_list_arg(s) : -1;
    if (l < 0 || l >= in->nargs || in->args[l].tag != KV_IV_TENSOR_LIST) return KV_OK;
    const kv_tensor_list list = in->args[l].v.tensors;
    for (int e = 0; e < list.n; e++) {
        if (out->n >= KV_CASE_MAX_OUTPUTS)
            return kv_error(KV_ERR_INTERNAL, "%s: wrote more than %d tensors", kv_op_name(op), KV_CASE_MAX_OUTPUTS);
        kv_tensor_retain(list.items[e]);
        out->t[out->n++] = list.items[e];
    }
    return KV_OK;
}

void kv_case_outputs_free(kv_case_outputs *out) {
    if (out == NULL) return;
    for (int i = 0; i < out->n && i < KV_CASE_MAX_OUTPUTS; i++) kv_tensor_release(out->t[i]);
    memset(out, 0, sizeof *out);
}
