/* Running a program's steps (runner/program/program.h): inputs from the
 * counter-based RNG, each step boxed in schema order like a one-op case,
 * and each step described as a one-op case so the tolerance table, its
 * bounds and the exact generator apply to it unchanged. */
#include <stdio.h>
#include <string.h>

#include "kv/rng.h"
#include "runner/case/case_args.h"
#include "runner/case/spec.h"
#include "runner/program/program.h"

void kv_prog_values_free(kv_prog_values *vals) {
    if (vals == NULL) return;
    for (int i = 0; i < KV_PROG_MAX_VALUES; i++) kv_tensor_release(vals->v[i]);
    memset(vals, 0, sizeof *vals);
}

/* Exact fill keeps small integers: the programs chain products and sums,
 * so the range stays small enough that a few steps stay on the grid. */
#define KV_PROG_EXACT_RANGE 4

kv_status kv_program_inputs(const kv_program *p, const kv_case *c, kv_prog_values *vals) {
    memset(vals, 0, sizeof *vals);
    /* The stream depends on the program's name and the seed only, never on
     * the device, so every run of the program sees the same bytes. */
    char key[64];
    snprintf(key, sizeof key, "program:%s", p->name);
    const uint64_t base = kv_rng_key(key, c->seed);
    for (int i = 0; i < p->ninputs; i++) {
        const kv_prog_input *in = &p->inputs[i];
        kv_tensor *t = kv_tensor_empty(in->shape.sizes, in->shape.ndim, in->dtype, KV_DEVICE_CPU0);
        if (t == NULL) return kv_error_prefix(kv_last_error(), "%s: input '%s'", p->path, in->name);
        vals->v[i] = t;
        kv_fill_plan plan;
        memset(&plan, 0, sizeof plan);
        plan.domain = in->domain;
        plan.exact_range = KV_PROG_EXACT_RANGE;
        plan.digit = i;
        /* Layout b is dim 0 expanded from one slice, w overlapping rows:
         * the values repeat there in every run, the truth's included
         * (runner/exec/fill.h). */
        kv_fill_plan_layout(&plan, in->layout, &in->shape);
        const kv_status st = kv_fill_tensor(t, in->fill, &plan, kv_rng_substream(base, (uint64_t)i));
        if (st != KV_OK) return kv_error_prefix(st, "%s: input '%s': cannot fill it", p->path, in->name);
        /* A ZeroTensor input (lazy=zero) is zeros whatever its storage
         * held: its logical value, so its truth, is all zeros (each input
         * has its own substream, so the others' bytes do not change). */
        if ((in->lazy & KV_CASE_LAZY_ZERO) && t->storage->nbytes > 0) memset(t->storage->data, 0, t->storage->nbytes);
    }
    return KV_OK;
}

static kv_status step_tensor(const kv_program *p, int k, kv_tensor *const *vals, int v, kv_case_inputs *in,
                             kv_tensor **slot) {
    if (in->ntensors >= KV_CASE_MAX_INPUTS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: step %d (%s): more than %d tensor arguments", p->path, k + 1,
                        p->steps[k].op, KV_CASE_MAX_INPUTS);
    kv_tensor *t = vals[v];
    if (t == NULL)
        return kv_error(KV_ERR_INTERNAL, "%s: step %d (%s): value '%s' has no tensor", p->path, k + 1, p->steps[k].op,
                        p->value_names[v]);
    kv_tensor_retain(t);
    in->tensors[in->ntensors++] = t;
    *slot = t;
    return KV_OK;
}

kv_status kv_program_step_inputs(const kv_program *p, int k, kv_tensor *const *vals, kv_case_inputs *in) {
    memset(in, 0, sizeof *in);
    const kv_prog_step *step = &p->steps[k];
    const kv_op *op = kv_op_find(step->op);
    if (op == NULL) return kv_last_error();
    const kv_schema *s = kv_op_schema(op);
    int nlist = 0;
    kv_status st = KV_OK;
    for (int a = 0; a < s->nargs && st == KV_OK; a++) {
        const kv_arg *arg = &s->args[a];
        const kv_prog_arg *pa = &step->args[a];
        kv_ivalue *v = &in->args[a];
        switch (pa->kind) {
        case KV_PROG_ARG_VALUE:
            v->tag = KV_IV_TENSOR;
            st = step_tensor(p, k, vals, pa->value, in, &v->v.tensor);
            break;
        case KV_PROG_ARG_LIST: {
            const int start = nlist;
            for (int i = 0; i < pa->nlist && st == KV_OK; i++) st = step_tensor(p, k, vals, pa->list[i], in, &in->list_items[nlist++]);
            v->tag = KV_IV_TENSOR_LIST;
            v->v.tensors = (kv_tensor_list){ in->list_items + start, nlist - start };
            break;
        }
        case KV_PROG_ARG_NONE: v->tag = KV_IV_NONE; break;
        case KV_PROG_ARG_LITERAL:
            snprintf(in->strs[a], sizeof in->strs[a], "%s", pa->text);
            st = kv_case_arg_ivalue(arg, in->strs[a], v, in->int_lists[a], KV_MAX_DIMS, &in->gens[a]);
            break;
        case KV_PROG_ARG_DEFAULT:
            if (arg->has_default) *v = arg->default_value;
            else v->tag = KV_IV_NONE;
            break;
        }
    }
    in->nargs = s->nargs;
    if (st != KV_OK) kv_case_inputs_free(in);
    return st;
}

void kv_program_step_case(const kv_program *p, int k, const kv_case_inputs *in, kv_device device, kv_case *c) {
    const kv_prog_step *step = &p->steps[k];
    kv_case_init(c);
    snprintf(c->op, sizeof c->op, "%s", step->op);
    const kv_op *op = kv_op_find(step->op);
    const kv_schema *s = op ? kv_op_schema(op) : NULL;
    int ti = 0;
    for (int a = 0; s != NULL && a < s->nargs; a++) {
        const kv_prog_arg *pa = &step->args[a];
        const int n = pa->kind == KV_PROG_ARG_VALUE ? 1 : pa->kind == KV_PROG_ARG_LIST ? pa->nlist : 0;
        for (int i = 0; i < n && ti < in->ntensors; i++, ti++) {
            const kv_tensor *t = in->tensors[ti];
            c->dtypes[ti] = t->dtype;
            c->shapes[ti].ndim = t->ndim;
            memcpy(c->shapes[ti].sizes, t->sizes, sizeof(int64_t) * (size_t)t->ndim);
            c->input_arg[ti] = a;
        }
        if (pa->kind == KV_PROG_ARG_LITERAL && c->nargs < KV_CASE_MAX_ARGS) {
            snprintf(c->args[c->nargs].name, sizeof c->args[c->nargs].name, "%s", s->args[a].name);
            snprintf(c->args[c->nargs].value, sizeof c->args[c->nargs].value, "%s", pa->text);
            c->nargs++;
        }
    }
    c->ninputs = ti;
    /* Intermediate values are whatever the earlier steps made: never the
     * exact fill's grid, so the table's exact-fill shortcut must not apply. */
    c->fill = KV_FILL_REAL;
    c->device = device;
    snprintf(c->origin.file, sizeof c->origin.file, "%s", p->path);
    c->origin.line = step->line;
}

kv_status kv_program_step_run(const kv_program *p, int k, kv_prog_values *vals, kv_keyset ks) {
    const kv_prog_step *step = &p->steps[k];
    const kv_op *op = kv_op_find(step->op);
    if (op == NULL) return kv_last_error();
    kv_case_inputs in;
    kv_status st = kv_program_step_inputs(p, k, vals->v, &in);
    if (st != KV_OK) return st;
    kv_case_outputs out;
    st = kv_case_invoke(op, &in, ks, &out);
    kv_case_inputs_free(&in);
    if (st != KV_OK) return st;
    return kv_program_step_store(p, k, &out, vals);
}

kv_status kv_program_step_store(const kv_program *p, int k, kv_case_outputs *outs, kv_prog_values *vals) {
    const kv_prog_step *step = &p->steps[k];
    kv_case_outputs out = *outs;
    memset(outs, 0, sizeof *outs);
    if (out.n != step->nout) {
        kv_case_outputs_free(&out);
        return kv_error(KV_ERR_INTERNAL, "%s: step %d (%s) returned %d tensors, the program names %d", p->path, k + 1,
                        step->op, out.n, step->nout);
    }
    for (int i = 0; i < out.n; i++) {
        const int v = step->out[i];
        if (v < 0) {
            kv_tensor_release(out.t[i]);
            continue;
        }
        kv_tensor_release(vals->v[v]);
        vals->v[v] = out.t[i];
    }
    return KV_OK;
}

kv_status kv_program_check_loss(const kv_program *p) {
    if (p->backward < 0) return KV_OK;
    kv_case c;
    memset(&c, 0, sizeof c);
    kv_prog_values vals;
    kv_status st = kv_program_inputs(p, &c, &vals);
    for (int k = 0; st == KV_OK && k < p->nsteps && vals.v[p->backward] == NULL; k++)
        st = kv_program_step_run(p, k, &vals, 0);
    const kv_tensor *loss = st == KV_OK ? vals.v[p->backward] : NULL;
    st = KV_OK;
    if (loss != NULL && kv_tensor_numel(loss) != 1) {
        char shape[160] = "[";
        size_t n = 1;
        for (int d = 0; d < loss->ndim && n < sizeof shape; d++)
            n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%lld", d ? "," : "", (long long)loss->sizes[d]);
        if (n < sizeof shape - 1) snprintf(shape + n, sizeof shape - n, "]");
        st = kv_spec_error(KV_ERR_INVALID_ARG, p->path, p->backward_line, p->backward_col,
                           "backward: '%s' holds %lld elements (shape %s): backward needs a one-element value (a "
                           "scalar loss)",
                           p->value_names[p->backward], (long long)kv_tensor_numel(loss), shape);
    }
    kv_prog_values_free(&vals);
    return st;
}

bool kv_program_step_reads(const kv_prog_step *s, int v) {
    for (int a = 0; a < KV_SCHEMA_MAX_ARGS; a++) {
        const kv_prog_arg *pa = &s->args[a];
        if (pa->kind == KV_PROG_ARG_VALUE && pa->value == v) return true;
        for (int j = 0; pa->kind == KV_PROG_ARG_LIST && j < pa->nlist; j++)
            if (pa->list[j] == v) return true;
    }
    return false;
}

kv_status kv_program_load_for(const kv_case *c, kv_program **out) { return kv_program_parse_file(c->program, out); }
