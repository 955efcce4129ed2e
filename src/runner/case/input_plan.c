/* Which schema arguments a case's inputs are: the tensor arguments in
 * order, the Tensor[] position, and the plan that maps the case's shapes
 * (some of them None for optional tensors) onto them. */
#include <stdio.h>
#include <string.h>

#include "kv/dispatch.h"
#include "runner/case/case.h"
#include "runner/case/case_options.h"

int kv_schema_tensor_args(const kv_schema *s, int *idx, int cap, int *list_pos, int *nrequired) {
    int n = 0;
    *list_pos = -1;
    *nrequired = 0;
    for (int i = 0; i < s->nargs; i++) {
        const kv_type *t = &s->args[i].type;
        if (t->kind != KV_TYPE_TENSOR) continue;
        if (t->is_list) *list_pos = *list_pos < 0 ? n : -2; /* -2: several lists */
        if (!t->optional) (*nrequired)++;
        if (n < cap) idx[n] = i;
        n++;
    }
    return n;
}

void kv_schema_tensor_names(const kv_schema *s, char *buf, int cap) {
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->nargs && n < cap; i++) {
        if (s->args[i].type.kind != KV_TYPE_TENSOR) continue;
        n += snprintf(buf + n, (size_t)(cap - n), "%s%s", n ? ", " : "", s->args[i].name);
    }
}

/* Two Tensor[] arguments and no other tensor (the foreach ops): the
 * shapes before list_break feed the first list, the rest the second. */
static int plan_two_lists(const kv_schema *s, const int *idx, int nt, int nshapes, const bool *is_none,
                          int list_break, kv_input_plan *plan, char *why, int whycap) {
    if (nt != 2 || !s->args[idx[0]].type.is_list || !s->args[idx[1]].type.is_list) {
        snprintf(why, (size_t)whycap, "ops with two Tensor[] arguments and other tensors are not supported");
        return -1;
    }
    if (list_break < 0 && nshapes == 1) { /* one element of that shape in each list */
        if (is_none[0]) {
            snprintf(why, (size_t)whycap, "input '%s' cannot be none (an element of a Tensor[])",
                     s->args[idx[0]].name);
            return -1;
        }
        for (int t = 0; t < 2; t++) {
            plan->arg[t] = idx[t];
            plan->src[t] = 0;
        }
        plan->n = 2;
        return 0;
    }
    if (list_break < 0) {
        if (nshapes % 2 != 0) {
            snprintf(why, (size_t)whycap,
                     "%d shapes for the two lists '%s' and '%s': give an even number, or a '/' before the first "
                     "shape of '%s' (e.g. 2x3:4/2x3:1)",
                     nshapes, s->args[idx[0]].name, s->args[idx[1]].name, s->args[idx[1]].name);
            return -1;
        }
        list_break = nshapes / 2;
    }
    for (int k = 0; k < nshapes; k++) {
        const int t = k < list_break ? 0 : 1;
        if (is_none[k]) {
            snprintf(why, (size_t)whycap, "input '%s' cannot be none (an element of a Tensor[])",
                     s->args[idx[t]].name);
            return -1;
        }
        plan->arg[k] = idx[t];
        plan->src[k] = k;
    }
    plan->n = nshapes;
    return 0;
}

int kv_input_plan_make(const kv_schema *s, int nshapes, const bool *is_none, kv_input_plan *plan,
                       char *why, int whycap) {
    return kv_input_plan_make_lists(s, nshapes, is_none, -1, plan, why, whycap);
}

int kv_input_plan_make_lists(const kv_schema *s, int nshapes, const bool *is_none, int list_break,
                             kv_input_plan *plan, char *why, int whycap) {
    int idx[KV_SCHEMA_MAX_ARGS], list_pos, nreq;
    const int nt = kv_schema_tensor_args(s, idx, KV_SCHEMA_MAX_ARGS, &list_pos, &nreq);
    char names[256];
    kv_schema_tensor_names(s, names, sizeof names);
    memset(plan, 0, sizeof *plan);
    if (nt == 0) return 0;
    if (nshapes > KV_CASE_MAX_INPUTS) {
        snprintf(why, (size_t)whycap, "more than %d tensor inputs", KV_CASE_MAX_INPUTS);
        return -1;
    }
    if (list_pos == -2) return plan_two_lists(s, idx, nt, nshapes, is_none, list_break, plan, why, whycap);
    if (list_break >= 0) {
        snprintf(why, (size_t)whycap, "a '/' separates two Tensor[] lists, and the op has %s",
                 list_pos >= 0 ? "one" : "none");
        return -1;
    }
    if (nshapes > KV_CASE_MAX_INPUTS) {
        snprintf(why, (size_t)whycap, "more than %d tensor inputs", KV_CASE_MAX_INPUTS);
        return -1;
    }
    if (list_pos >= 0) {
        const int before = list_pos, after = nt - list_pos - 1;
        const int nlist = nshapes - before - after;
        if (nlist < 1) {
            snprintf(why, (size_t)whycap, "needs at least %d shapes (%s; '%s' is a list of one or more)",
                     before + after + 1, names, s->args[idx[list_pos]].name);
            return -1;
        }
        for (int k = 0; k < nshapes; k++) {
            const int t = k < before ? k : k < before + nlist ? list_pos : k - nlist + 1;
            const kv_arg *a = &s->args[idx[t]];
            if (is_none[k] && (t == list_pos || !a->type.optional)) {
                snprintf(why, (size_t)whycap, "input '%s' cannot be none%s", a->name,
                         t == list_pos ? " (an element of a Tensor[])" : " (it is not optional)");
                return -1;
            }
            plan->arg[k] = idx[t];
            plan->src[k] = k;
            plan->absent[k] = is_none[k];
        }
        plan->n = nshapes;
        return 0;
    }
    if (nshapes == 1 && nt > 1) {
        /* One shape for every required input; optional ones are absent. */
        int last = 0;
        for (int t = 0; t < nt; t++) {
            if (!s->args[idx[t]].type.optional) last = t;
        }
        for (int t = 0; t <= last; t++) {
            const kv_arg *a = &s->args[idx[t]];
            if (is_none[0] && !a->type.optional) {
                snprintf(why, (size_t)whycap, "input '%s' cannot be none (it is not optional)", a->name);
                return -1;
            }
            plan->arg[t] = idx[t];
            plan->src[t] = 0;
            plan->absent[t] = a->type.optional || is_none[0];
        }
        plan->n = last + 1;
        return 0;
    }
    if (nshapes > nt) {
        snprintf(why, (size_t)whycap, "%d shapes for %d tensor inputs (%s); give 1 or %d", nshapes, nt,
                 names, nt);
        return -1;
    }
    for (int t = 0; t < nt; t++) {
        const kv_arg *a = &s->args[idx[t]];
        if (t >= nshapes) {
            if (!a->type.optional) {
                snprintf(why, (size_t)whycap,
                         "%d shapes for %d tensor inputs (%s): missing the shape of '%s'", nshapes,
                         nt, names, a->name);
                return -1;
            }
            continue;
        }
        if (is_none[t] && !a->type.optional) {
            snprintf(why, (size_t)whycap, "input '%s' cannot be none (it is not optional)", a->name);
            return -1;
        }
        plan->arg[t] = idx[t];
        plan->src[t] = t;
        plan->absent[t] = is_none[t];
    }
    plan->n = nshapes;
    return 0;
}

