/* A case's inputs: tensors filled with the case's values and placed in its
 * layouts, and the boxed argument list in schema order (runner/check.h,
 * runner/inputs.h).
 *
 * kv_case_inputs holds pointers into itself (int lists, strings, the
 * tensor list), so it must stay where kv_case_inputs_make put it: never
 * copy one by value. */
#include "runner/exec/inputs.h"

#include <string.h>

#include "kv/backend.h"

#include "runner/case/case_args.h"
#include "runner/check/check.h"
#include "runner/check/check_util.h"
#include "runner/exec/fill.h"

static kv_status inputs_fail(kv_case_inputs *in, kv_status st) {
    kv_case_inputs_free(in);
    return st;
}

static const char *inputs_arg_name(const kv_schema *s, int a) {
    return a >= 0 && a < s->nargs ? s->args[a].name : "?";
}

kv_status kv_case_inputs_make(const kv_case *c, const kv_op *op, kv_device device, bool contiguous,
                              kv_case_inputs *out) {
    if (out == NULL) return kv_error(KV_ERR_INVALID_ARG, "inputs: argument 'out': NULL");
    memset(out, 0, sizeof *out);
    if (c == NULL || op == NULL) return kv_error(KV_ERR_INVALID_ARG, "inputs: NULL case or op");
    const kv_schema *s = kv_op_schema(op);
    const char *name = kv_op_name(op);
    if (c->ninputs < 0 || c->ninputs > KV_CASE_MAX_INPUTS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: the case has %d tensor inputs (at most %d)", name, c->ninputs,
                        KV_CASE_MAX_INPUTS);
    if (s->nargs > KV_SCHEMA_MAX_ARGS)
        return kv_error(KV_ERR_INTERNAL, "%s: schema has %d arguments", name, s->nargs);

    /* Every case argument must name a non-tensor schema argument. */
    for (int i = 0; i < c->nargs; i++) {
        const int a = kv_schema_arg_index(s, c->args[i].name);
        if (a < 0 || s->args[a].type.kind == KV_TYPE_TENSOR)
            return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': not a non-tensor argument of the schema", name,
                            c->args[i].name);
    }

    /* ---- tensors ---- */
    out->ntensors = c->ninputs;
    for (int i = 0; i < c->ninputs; i++) {
        const int a = c->input_arg[i];
        if (a < 0 || a >= s->nargs || s->args[a].type.kind != KV_TYPE_TENSOR)
            return inputs_fail(out, kv_error(KV_ERR_INVALID_ARG, "%s: input %d: feeds schema argument %d, which is not a tensor",
                                             name, i, a));
        if (c->absent[i]) continue;
        const kv_shape *sh = &c->shapes[i];
        if (sh->ndim < 0 || sh->ndim > KV_MAX_DIMS)
            return inputs_fail(out, kv_error(KV_ERR_INVALID_ARG, "%s: input %d (argument '%s'): %d dims (at most %d)", name, i,
                                             inputs_arg_name(s, a), sh->ndim, KV_MAX_DIMS));
        kv_tensor *logical = kv_tensor_empty(sh->sizes, sh->ndim, c->dtypes[i], KV_DEVICE_CPU0);
        kv_status st = logical ? kv_fill_case_input(c, s, i, logical) : kv_last_error();
        if (st != KV_OK) {
            kv_tensor_release(logical);
            return inputs_fail(out, kv_error_prefix(st, "%s: input %d (argument '%s'): cannot build it", name, i,
                                                    inputs_arg_name(s, a)));
        }
        /* --out=@N.i: input N is the even elements of a storage whose odd
         * ones become out, in every run (the golden's too). */
        const bool interleaved = c->out_alias_i && c->out_alias == i + 1;
        if (contiguous && device.type == KV_DEVICE_CPU && !interleaved) {
            out->tensors[i] = logical;
            continue;
        }
        out->tensors[i] = kv_layout_place(logical,
                                          interleaved  ? KV_LAYOUT_STRIDED
                                          : contiguous ? KV_LAYOUT_CONTIGUOUS
                                                       : c->layouts[i],
                                          device);
        kv_tensor_release(logical);
        if (out->tensors[i] == NULL) {
            st = kv_last_error();
            return inputs_fail(out, kv_error_prefix(st, "%s: input %d (argument '%s'): cannot place it in layout %s on %s",
                                                    name, i, inputs_arg_name(s, a), kv_layout_name(c->layouts[i]),
                                                    kv_device_type_name(device.type)));
        }
    }

    /* ---- --out=@N: out is input N (runner/case/case_out.c) ---- */
    for (int i = 0; c->out_alias > 0 && i < c->ninputs; i++) {
        const int a = c->input_arg[i];
        if (!s->args[a].kwarg_only || !s->args[a].alias.is_write || s->args[a].type.is_list) continue;
        kv_tensor *t = kv_case_out_alias_of(c, out->tensors);
        if (t == NULL) return inputs_fail(out, kv_last_error());
        kv_tensor_release(out->tensors[i]);
        out->tensors[i] = t;
    }

    /* ---- the boxed arguments, in schema order ---- */
    int nlist = 0;
    for (int a = 0; a < s->nargs; a++) {
        const kv_arg *arg = &s->args[a];
        kv_ivalue *v = &out->args[a];
        if (arg->type.kind == KV_TYPE_TENSOR && arg->type.is_list) {
            const int start = nlist;
            for (int i = 0; i < c->ninputs; i++) {
                if (c->input_arg[i] != a) continue;
                if (out->tensors[i] == NULL)
                    return inputs_fail(out, kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': element %d of a Tensor[] is none",
                                                     name, arg->name, nlist - start));
                out->list_items[nlist++] = out->tensors[i];
            }
            v->tag = KV_IV_TENSOR_LIST;
            v->v.tensors = (kv_tensor_list){ out->list_items + start, nlist - start };
            continue;
        }
        if (arg->type.kind == KV_TYPE_TENSOR) {
            kv_tensor *t = NULL;
            bool fed = false;
            for (int i = 0; i < c->ninputs && !fed; i++) {
                if (c->input_arg[i] == a) {
                    fed = true;
                    t = out->tensors[i];
                }
            }
            if (t == NULL && !arg->type.optional)
                return inputs_fail(out, kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': a required tensor is %s", name,
                                                 arg->name, fed ? "none" : "not given by the case"));
            if (t) {
                v->tag = KV_IV_TENSOR;
                v->v.tensor = t;
            } else {
                v->tag = KV_IV_NONE;
            }
            continue;
        }
        const char *text = kv_case_arg_value(c, arg->name);
        if (text == NULL) {
            if (arg->has_default) {
                *v = arg->default_value;
            } else if (arg->type.optional) {
                v->tag = KV_IV_NONE;
            } else {
                return inputs_fail(out, kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': required, and the case gives no value",
                                                 name, arg->name));
            }
            continue;
        }
        if (strlen(text) >= sizeof out->strs[a])
            return inputs_fail(out, kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': value too long", name, arg->name));
        strcpy(out->strs[a], text);
        if (kv_case_arg_ivalue(arg, out->strs[a], v, out->int_lists[a], KV_MAX_DIMS, &out->gens[a]) != KV_OK)
            return inputs_fail(out, kv_error_prefix(KV_ERR_INVALID_ARG, "%s", name));
    }
    out->nargs = s->nargs;
    if (device.type == KV_DEVICE_ACCEL) kv_case_inputs_accel_device(c, op, out);
    return KV_OK;
}

void kv_case_inputs_free(kv_case_inputs *in) {
    if (in == NULL) return;
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(in->tensors[i]);
    memset(in, 0, sizeof *in);
}
