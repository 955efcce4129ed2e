/* Naming every op and checking the list before anything is emitted, so
 * the emitters cannot fail on content: duplicates, two ops that would get
 * one C name or one id, and types the typed API cannot express are all
 * reported here, against the op's line in the schema file. */
#include "tools/kvgen/kvgen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((format(printf, 3, 4)))
static kv_status op_error(const kv_gen_ops *ops, const kv_gen_op *op, const char *fmt, ...) {
    char reason[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return kv_error(KV_ERR_SCHEMA, "%s:%d:%d: %s", ops->source, op->line, op->col, reason);
}

/* Appends '_' to `name` until it differs from the first n names. */
static bool make_unique(char (*names)[KV_GEN_IDENT_MAX], int n, char *name) {
    for (;;) {
        bool clash = false;
        for (int i = 0; i < n && !clash; i++) clash = strcmp(names[i], name) == 0;
        if (!clash) return true;
        size_t len = strlen(name);
        if (len + 2 > KV_GEN_IDENT_MAX) return false;
        name[len] = '_';
        name[len + 1] = '\0';
    }
}

static kv_status name_op(const kv_gen_ops *ops, kv_gen_op *op, bool base_shared) {
    const kv_schema *s = &op->schema;
    kv_gen_cname_of(s, base_shared, op->cname, sizeof op->cname);
    kv_gen_id_of(s->full_name, op->id, sizeof op->id);
    op->ret_kind = kv_gen_return_kind(s);

    /* Parameters and out parameters share one namespace; out names come
     * after every argument so a return never renames an argument. */
    char names[KV_SCHEMA_MAX_ARGS + KV_SCHEMA_MAX_RETURNS][KV_GEN_IDENT_MAX];
    int nnames = 0;
    for (int i = 0; i < s->nargs; i++) {
        kv_gen_arg_map m;
        if (!kv_gen_map_arg(s->args[i].type, &m)) {
            char t[48];
            kv_gen_type_format(s->args[i].type, t, sizeof t);
            return op_error(ops, op, "%s: argument '%s': type %s has no C mapping in the typed API",
                            s->full_name, s->args[i].name, t);
        }
        kv_gen_param_name(s->args[i].name, op->params[i], KV_GEN_IDENT_MAX);
        if (!make_unique(names, nnames, op->params[i]))
            return op_error(ops, op, "%s: argument '%s': no unique C name", s->full_name, s->args[i].name);
        memcpy(names[nnames++], op->params[i], KV_GEN_IDENT_MAX);
    }
    if (op->ret_kind == KV_GEN_RET_TENSOR_LIST) {
        snprintf(op->outs[0], KV_GEN_IDENT_MAX, "out");
        if (!make_unique(names, nnames, op->outs[0]))
            return op_error(ops, op, "%s: return 0: no unique C name", s->full_name);
        return KV_OK;
    }
    if (op->ret_kind != KV_GEN_RET_OUTPARAMS) return KV_OK;
    for (int i = 0; i < s->nreturns; i++) {
        kv_gen_ret_map m;
        if (!kv_gen_map_return(s->returns[i].type, &m)) {
            char t[48];
            kv_gen_type_format(s->returns[i].type, t, sizeof t);
            return op_error(ops, op, "%s: return %d: type %s cannot be returned by the typed API",
                            s->full_name, i, t);
        }
        char *out = op->outs[i];
        if (s->returns[i].name[0])
            kv_gen_param_name(s->returns[i].name, out, KV_GEN_IDENT_MAX);
        else if (s->nreturns == 1)
            snprintf(out, KV_GEN_IDENT_MAX, "out");
        else
            snprintf(out, KV_GEN_IDENT_MAX, "out%d", i);
        if (!make_unique(names, nnames, out))
            return op_error(ops, op, "%s: return %d: no unique C name", s->full_name, i);
        memcpy(names[nnames++], out, KV_GEN_IDENT_MAX);
    }
    return KV_OK;
}

static int by_full_name(const void *a, const void *b) {
    const kv_gen_op *x = *(const kv_gen_op *const *)a, *y = *(const kv_gen_op *const *)b;
    return strcmp(x->schema.full_name, y->schema.full_name);
}

kv_status kv_gen_prepare(kv_gen_ops *ops) {
    if (ops->n == 0)
        return kv_error(KV_ERR_SCHEMA, "%s:1:1: no ops (the generated tables would be empty)", ops->source);
    /* An out= overload is always kv_<name>_<overload> (kv_add_out, as
     * PyTorch's at::add_out), and does not count as sharing its base name:
     * adding add.out leaves add.Tensor's wrapper kv_add. */
    for (int i = 0; i < ops->n; i++) {
        bool shared = kv_schema_is_out(&ops->items[i]->schema);
        for (int j = 0; j < ops->n && !shared; j++)
            shared = j != i && !kv_schema_is_out(&ops->items[j]->schema) &&
                     strcmp(ops->items[i]->schema.name, ops->items[j]->schema.name) == 0;
        kv_status st = name_op(ops, ops->items[i], shared);
        if (st != KV_OK) return st;
    }
    /* In file order, so the error names the later line and points back at
     * the earlier one. */
    for (int i = 0; i < ops->n; i++) {
        const kv_gen_op *a = ops->items[i];
        for (int j = 0; j < i; j++) {
            const kv_gen_op *b = ops->items[j];
            if (strcmp(a->schema.full_name, b->schema.full_name) == 0)
                return op_error(ops, a, "duplicate op '%s' (first defined at line %d)", a->schema.full_name,
                                b->line);
            if (strcmp(a->cname, b->cname) == 0)
                return op_error(ops, a, "C name %s of '%s' clashes with '%s' (line %d)", a->cname,
                                a->schema.full_name, b->schema.full_name, b->line);
            if (strcmp(a->id, b->id) == 0)
                return op_error(ops, a, "op id %s of '%s' clashes with '%s' (line %d)", a->id,
                                a->schema.full_name, b->schema.full_name, b->line);
        }
    }
    qsort(ops->items, (size_t)ops->n, sizeof *ops->items, by_full_name);
    return KV_OK;
}
