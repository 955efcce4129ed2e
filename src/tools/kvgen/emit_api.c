/* kv/ops.h and ops_api.c: the typed C API, one wrapper per op.
 *
 * A wrapper resolves its op once (kv_op_handle caches it; a hit is two
 * loads inline), pushes every argument in schema order onto a stack that
 * lives in its own frame, calls the dispatcher and takes the returns off
 * the stack. The helpers
 * at the top of ops_api.c check that a kernel returned what the schema
 * says, so a kernel bug is an error value instead of a wild pointer. */
#include "tools/kvgen/kvgen.h"

#include <string.h>

/* "kv_tensor *" + "self" -> "kv_tensor *self"; "int64_t" + "dim" -> "int64_t dim". */
static void put_decl(kv_gen_buf *out, const char *ctype, const char *name) {
    size_t n = strlen(ctype);
    kv_gen_buf_printf(out, n && ctype[n - 1] == '*' ? "%s%s" : "%s %s", ctype, name);
}

static void put_signature(const kv_gen_op *op, kv_gen_buf *out) {
    const kv_schema *s = &op->schema;
    kv_gen_buf_printf(out, "%s%s(", op->ret_kind == KV_GEN_RET_TENSOR ? "kv_tensor *" : "kv_status ",
                      op->cname);
    int nparams = 0;
    for (int i = 0; i < s->nargs; i++) {
        kv_gen_arg_map m;
        if (!kv_gen_map_arg(s->args[i].type, &m)) continue; /* rejected by kv_gen_prepare */
        if (nparams++) kv_gen_buf_puts(out, ", ");
        put_decl(out, m.ctype, op->params[i]);
    }
    if (op->ret_kind == KV_GEN_RET_TENSOR_LIST) {
        if (nparams++) kv_gen_buf_puts(out, ", ");
        put_decl(out, "kv_tensor **", op->outs[0]);
    }
    if (op->ret_kind == KV_GEN_RET_OUTPARAMS) {
        for (int i = 0; i < s->nreturns; i++) {
            kv_gen_ret_map m;
            if (!kv_gen_map_return(s->returns[i].type, &m)) continue;
            if (nparams++) kv_gen_buf_puts(out, ", ");
            put_decl(out, m.ctype, op->outs[i]);
        }
    }
    if (nparams == 0) kv_gen_buf_puts(out, "void");
    kv_gen_buf_puts(out, ")");
}

/* The schema as a one-line comment. A string default could hold a
 * comment end, or a "??" that -std=c17 reads as a trigraph (even in
 * comments), so both are split by a space. */
static void put_schema_comment(const char *text, kv_gen_buf *out) {
    kv_gen_buf_puts(out, "/* ");
    for (const char *p = text; *p; p++) {
        bool split = (p[0] == '*' && p[1] == '/') || (p[0] == '?' && p[1] == '?');
        kv_gen_buf_printf(out, split ? "%c " : "%c", *p);
    }
    kv_gen_buf_puts(out, " */\n");
}

void kv_gen_emit_decl(const kv_gen_op *op, kv_gen_buf *out) {
    put_schema_comment(op->text, out);
    put_signature(op, out);
    kv_gen_buf_puts(out, ";\n");
}

static void put_returns(const kv_gen_op *op, const char *call, kv_gen_buf *out) {
    const kv_schema *s = &op->schema;
    const char *name = s->full_name;
    switch (op->ret_kind) {
    case KV_GEN_RET_TENSOR:
        kv_gen_buf_printf(out,
                          "    if (%s != KV_OK) return NULL;\n"
                          "    return gen_take_tensor(&st, \"%s\");\n",
                          call, name);
        return;
    case KV_GEN_RET_ALIAS:
        kv_gen_buf_printf(out,
                          "    kv_status rc = %s;\n"
                          "    if (rc != KV_OK) return rc;\n"
                          "    return gen_drop_alias(&st, \"%s\");\n",
                          call, name);
        return;
    case KV_GEN_RET_TENSOR_LIST:
        /* One new reference per element into the caller's array; the
         * stack is the wrapper's own (heap when the list is long). */
        kv_gen_buf_printf(out,
                          "    kv_status rc = %s;\n"
                          "    if (rc == KV_OK) rc = gen_take_list(&st, \"%s\", %s.n, %s);\n"
                          "    if (slots != inline_slots) free(slots);\n"
                          "    return rc;\n",
                          call, name, op->params[kv_gen_first_list_arg(s)], op->outs[0]);
        return;
    case KV_GEN_RET_OUTPARAMS:
        break;
    }
    kv_gen_buf_printf(out,
                      "    kv_status rc = %s;\n"
                      "    if (rc != KV_OK) return rc;\n",
                      call);
    if (s->nreturns == 0) {
        kv_gen_buf_printf(out, "    return gen_check_returns(&st, \"%s\", NULL, 0);\n", name);
        return;
    }
    kv_gen_buf_printf(out, "    static const kv_ivalue_tag tags[%d] = { ", s->nreturns);
    for (int i = 0; i < s->nreturns; i++) {
        kv_gen_ret_map m;
        if (!kv_gen_map_return(s->returns[i].type, &m)) continue;
        kv_gen_buf_printf(out, "%s%s", i ? ", " : "", m.tag);
    }
    kv_gen_buf_printf(out,
                      " };\n"
                      "    rc = gen_check_returns(&st, \"%s\", tags, %d);\n"
                      "    if (rc != KV_OK) return rc;\n",
                      name, s->nreturns);
    for (int i = 0; i < s->nreturns; i++) {
        kv_gen_ret_map m;
        if (!kv_gen_map_return(s->returns[i].type, &m)) continue;
        if (s->returns[i].type.kind == KV_TYPE_TENSOR)
            kv_gen_buf_printf(out, "    gen_put_tensor(%s, st.slots[%d].v.tensor);\n", op->outs[i], i);
        else
            kv_gen_buf_printf(out, "    if (%s) *%s = st.slots[%d].v.%s;\n", op->outs[i], op->outs[i], i,
                              m.member);
    }
    kv_gen_buf_puts(out, "    return KV_OK;\n");
}

/* The pushes ops_api.c defines inline (put_helpers), as gen_push_...: a
 * wrapper sizes its stack for its schema, so they need no capacity check
 * and no call. The others go through kv/stack.h. */
static const char *const inlined_pushes[] = { "kv_push_tensor", "kv_push_scalar", "kv_push_int", "kv_push_double",
                                              "kv_push_bool" };

static bool inlined_push(const char *push) {
    for (size_t i = 0; i < sizeof inlined_pushes / sizeof inlined_pushes[0]; i++)
        if (strcmp(push, inlined_pushes[i]) == 0) return true;
    return false;
}

/* Whether the wrapper's stack is one kv_call_typed may take: every
 * argument a plain Tensor or a value kv_call only checks by its tag (a
 * Scalar's kind aside, checked inline), and at least one tensor. Lists,
 * optionals, strings, dtypes, devices and generators need kv_call's
 * pass over the stack. */
static bool typed_call(const kv_schema *s) {
    int ntensors = 0;
    for (int i = 0; i < s->nargs; i++) {
        const kv_type t = s->args[i].type;
        if (t.is_list || t.optional) return false;
        switch (t.kind) {
        case KV_TYPE_TENSOR: ntensors++; break;
        case KV_TYPE_INT:
        case KV_TYPE_FLOAT:
        case KV_TYPE_BOOL:
        case KV_TYPE_SCALAR:
        case KV_TYPE_LAYOUT:
        case KV_TYPE_MEMORY_FORMAT: break;
        case KV_TYPE_STR:
        case KV_TYPE_SCALAR_TYPE:
        case KV_TYPE_DEVICE:
        case KV_TYPE_GENERATOR: return false;
        }
    }
    return ntensors > 0;
}

/* For a typed_call op: the condition under which the wrapper vouches for
 * its stack (kv_call_typed's promise: tensors non-NULL and on the first
 * one's device, Scalars of a known kind), written as `typed`, and the
 * call expression into *call. Otherwise *call is plain kv_call. */
static void put_typed_check(const kv_gen_op *op, kv_gen_buf *call, kv_gen_buf *out) {
    const kv_schema *s = &op->schema;
    if (!typed_call(s)) {
        kv_gen_buf_puts(call, "kv_call(op, &st)");
        return;
    }
    const char *first = NULL;
    const char *and = "";
    kv_gen_buf_puts(out, "    const bool typed = ");
    kv_gen_buf_puts(call, "(typed ? kv_call_typed(op, ");
    for (int i = 0; i < s->nargs; i++) {
        const char *p = op->params[i];
        if (s->args[i].type.kind == KV_TYPE_SCALAR) {
            kv_gen_buf_printf(out, "%sgen_scalar_known(%s)", and, p);
        } else if (s->args[i].type.kind != KV_TYPE_TENSOR) {
            continue;
        } else if (first == NULL) {
            kv_gen_buf_printf(out, "%s%s", and, p);
            kv_gen_buf_printf(call, "%s->keys", p);
            first = p;
        } else {
            kv_gen_buf_printf(out, "%s%s && kv_device_equal(%s->device, %s->device)", and, p, first, p);
            kv_gen_buf_printf(call, " | %s->keys", p);
        }
        and = " && ";
    }
    kv_gen_buf_puts(out, ";\n");
    kv_gen_buf_puts(call, ", &st) : kv_call(op, &st))");
}

void kv_gen_emit_wrapper(const kv_gen_op *op, kv_gen_buf *out) {
    const kv_schema *s = &op->schema;
    /* The stack holds the arguments, then the returns in their place. */
    int nslots = s->nargs > s->nreturns ? s->nargs : s->nreturns;
    if (nslots == 0) nslots = 1;
    put_signature(op, out);
    kv_gen_buf_printf(out,
                      " {\n"
                      "    static _Atomic(const kv_op *) handle;\n"
                      "    const kv_op *op = atomic_load_explicit(&handle, memory_order_acquire);\n"
                      "    if (!op || !atomic_load_explicit(&kv_dispatch_cache_on, memory_order_relaxed))\n"
                      "        op = kv_api_op(&handle, \"%s\");\n"
                      "    if (!op) return %s;\n",
                      s->full_name, op->ret_kind == KV_GEN_RET_TENSOR ? "NULL" : "kv_last_error()");
    if (op->ret_kind == KV_GEN_RET_TENSOR_LIST) {
        /* The returns take one slot per element of the first list. */
        const char *list = op->params[kv_gen_first_list_arg(s)];
        kv_gen_buf_printf(out,
                          "    if (%s == NULL) return kv_error(KV_ERR_INVALID_ARG, \"%s: argument '%s': NULL result array\");\n"
                          "    kv_ivalue inline_slots[%d];\n"
                          "    kv_ivalue *slots = gen_list_slots(inline_slots, %d, %s.n, \"%s\");\n"
                          "    if (!slots) return kv_last_error();\n"
                          "    kv_stack st = kv_stack_on(slots, %s.n > %d ? %s.n : %d);\n",
                          op->outs[0], s->full_name, op->outs[0], nslots, nslots, list, s->full_name, list, nslots,
                          list, nslots);
    } else {
        kv_gen_buf_printf(out,
                          "    kv_ivalue slots[%d];\n"
                          "    kv_stack st = kv_stack_on(slots, %d);\n",
                          nslots, nslots);
    }
    for (int i = 0; i < s->nargs; i++) {
        kv_gen_arg_map m;
        if (!kv_gen_map_arg(s->args[i].type, &m)) continue;
        kv_gen_buf_printf(out, "    %s%s(&st, %s);\n", inlined_push(m.push) ? "gen" : "", m.push + (inlined_push(m.push) ? 2 : 0),
                          op->params[i]);
    }
    kv_gen_buf call;
    kv_gen_buf_init(&call);
    put_typed_check(op, &call, out);
    out->failed |= call.failed;
    put_returns(op, kv_gen_buf_str(&call), out);
    kv_gen_buf_free(&call);
    kv_gen_buf_puts(out, "}\n");
}

static void put_banner(const kv_gen_ops *ops, kv_gen_buf *out) {
    kv_gen_buf_printf(out, "/* generated by kvgen from %s; do not edit.\n", ops->source);
}

void kv_gen_emit_ops_h(const kv_gen_ops *ops, kv_gen_buf *out) {
    put_banner(ops, out);
    kv_gen_buf_puts(out,
                    " *\n"
                    " * The typed C API: one function per op, sorted by full name, each\n"
                    " * under its schema. Tensor arguments are borrowed; a NULL Tensor? or\n"
                    " * str is None, and so is a NULL pointer for any other optional.\n"
                    " * - A function returning kv_tensor * returns a new reference, or NULL\n"
                    " *   with the thread-local error set (kv_last_error).\n"
                    " * - In-place and out= ops return kv_status; the tensor they wrote is\n"
                    " *   the caller's own argument.\n"
                    " * - Tuple and non-tensor returns come back through the trailing\n"
                    " *   pointer parameters, written only on success (tensors as new\n"
                    " *   references); pass NULL to discard one. */\n"
                    "#ifndef KV_OPS_H\n"
                    "#define KV_OPS_H\n"
                    "\n"
                    "#include <stdbool.h>\n"
                    "#include <stdint.h>\n"
                    "\n"
                    "#include \"kv/device.h\"\n"
                    "#include \"kv/dtype.h\"\n"
                    "#include \"kv/scalar.h\"\n"
                    "#include \"kv/stack.h\"\n"
                    "#include \"kv/status.h\"\n"
                    "#include \"kv/tensor.h\"\n");
    for (int i = 0; i < ops->n; i++) {
        kv_gen_buf_puts(out, "\n");
        kv_gen_emit_decl(ops->items[i], out);
    }
    kv_gen_buf_puts(out, "\n#endif\n");
}

static bool any_kind(const kv_gen_ops *ops, kv_gen_ret_kind kind) {
    for (int i = 0; i < ops->n; i++)
        if (ops->items[i]->ret_kind == kind) return true;
    return false;
}

static bool any_tensor_outparam(const kv_gen_ops *ops) {
    for (int i = 0; i < ops->n; i++) {
        const kv_gen_op *op = ops->items[i];
        if (op->ret_kind != KV_GEN_RET_OUTPARAMS) continue;
        for (int j = 0; j < op->schema.nreturns; j++)
            if (op->schema.returns[j].type.kind == KV_TYPE_TENSOR) return true;
    }
    return false;
}

/* Only the helpers some wrapper uses are written: an unused static
 * function is an error under -Werror. */
static void put_helpers(const kv_gen_ops *ops, kv_gen_buf *out) {
    kv_gen_buf_puts(out,
                    "\n"
                    "/* A kernel must leave exactly the schema's returns on the stack. One\n"
                    " * that does not is a kvsuite bug, reported as an error after its\n"
                    " * values are released. */\n"
                    "static kv_status gen_check_returns(kv_stack *st, const char *name, const kv_ivalue_tag *tags, int n) {\n"
                    "    bool ok = st->size == n;\n"
                    "    for (int i = 0; ok && i < n; i++)\n"
                    "        ok = st->slots[i].tag == tags[i] && (tags[i] != KV_IV_TENSOR || st->slots[i].v.tensor);\n"
                    "    if (ok) return KV_OK;\n"
                    "    int size = st->size;\n"
                    "    kv_stack_clear_returns(st);\n"
                    "    return kv_error(KV_ERR_INTERNAL, \"%s: kernel left %d values on the stack, not the schema's %d returns\",\n"
                    "                    name, size, n);\n"
                    "}\n");
    kv_gen_buf_puts(out,
                    "\n"
                    "/* Pushes onto a stack the wrapper sized for its schema: no capacity\n"
                    " * check, no call. A NULL tensor is None, as with kv_push_tensor. */\n"
                    "static inline void gen_push_tensor(kv_stack *st, kv_tensor *t) {\n"
                    "    st->slots[st->size++] = t ? (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = t } : (kv_ivalue){ .tag = KV_IV_NONE };\n"
                    "}\n"
                    "static inline void gen_push_scalar(kv_stack *st, kv_scalar v) {\n"
                    "    st->slots[st->size++] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = v };\n"
                    "}\n"
                    "static inline void gen_push_int(kv_stack *st, int64_t v) {\n"
                    "    st->slots[st->size++] = (kv_ivalue){ .tag = KV_IV_INT, .v.i = v };\n"
                    "}\n"
                    "static inline void gen_push_double(kv_stack *st, double v) {\n"
                    "    st->slots[st->size++] = (kv_ivalue){ .tag = KV_IV_DOUBLE, .v.d = v };\n"
                    "}\n"
                    "static inline void gen_push_bool(kv_stack *st, bool v) {\n"
                    "    st->slots[st->size++] = (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = v };\n"
                    "}\n"
                    "\n"
                    "/* A Scalar kv_call would take (kv_call_typed's promise). */\n"
                    "static inline bool gen_scalar_known(kv_scalar v) { return (unsigned)v.kind <= (unsigned)KV_SCALAR_COMPLEX; }\n");
    /* The one-tensor returns check the common case inline and leave the
     * rest, with its message, to gen_check_returns. */
    if (any_kind(ops, KV_GEN_RET_TENSOR))
        kv_gen_buf_puts(out,
                        "\n"
                        "static inline kv_tensor *gen_take_tensor(kv_stack *st, const char *name) {\n"
                        "    static const kv_ivalue_tag tags[1] = { KV_IV_TENSOR };\n"
                        "    if (st->size == 1 && st->slots[0].tag == KV_IV_TENSOR && st->slots[0].v.tensor) return st->slots[0].v.tensor;\n"
                        "    gen_check_returns(st, name, tags, 1);\n"
                        "    return NULL;\n"
                        "}\n");
    if (any_kind(ops, KV_GEN_RET_ALIAS))
        kv_gen_buf_puts(out,
                        "\n"
                        "/* The returned alias is the caller's own argument: drop our reference. */\n"
                        "static inline kv_status gen_drop_alias(kv_stack *st, const char *name) {\n"
                        "    static const kv_ivalue_tag tags[1] = { KV_IV_TENSOR };\n"
                        "    if (st->size == 1 && st->slots[0].tag == KV_IV_TENSOR && st->slots[0].v.tensor) {\n"
                        "        kv_tensor_release(st->slots[0].v.tensor);\n"
                        "        return KV_OK;\n"
                        "    }\n"
                        "    return gen_check_returns(st, name, tags, 1);\n"
                        "}\n");
    if (any_kind(ops, KV_GEN_RET_TENSOR_LIST))
        kv_gen_buf_puts(out,
                        "\n"
                        "/* A Tensor[] return needs one slot per element of the first list:\n"
                        " * the wrapper's own slots when they suffice, else the heap. */\n"
                        "static kv_ivalue *gen_list_slots(kv_ivalue *inline_slots, int ninline, int n, const char *name) {\n"
                        "    if (n <= ninline) return inline_slots;\n"
                        "    kv_ivalue *heap = malloc((size_t)n * sizeof *heap);\n"
                        "    if (heap == NULL) kv_error(KV_ERR_OOM, \"%s: out of host memory for %d returns\", name, n);\n"
                        "    return heap;\n"
                        "}\n"
                        "\n"
                        "/* Moves n tensor returns into dst (the caller's array). */\n"
                        "static kv_status gen_take_list(kv_stack *st, const char *name, int n, kv_tensor **dst) {\n"
                        "    bool ok = st->size == n;\n"
                        "    for (int i = 0; ok && i < n; i++) ok = st->slots[i].tag == KV_IV_TENSOR && st->slots[i].v.tensor;\n"
                        "    if (!ok) {\n"
                        "        int size = st->size;\n"
                        "        kv_stack_clear_returns(st);\n"
                        "        return kv_error(KV_ERR_INTERNAL, \"%s: kernel left %d values on the stack, not the list's %d tensors\",\n"
                        "                        name, size, n);\n"
                        "    }\n"
                        "    for (int i = 0; i < n; i++) dst[i] = st->slots[i].v.tensor;\n"
                        "    st->size = 0;\n"
                        "    return KV_OK;\n"
                        "}\n");
    if (any_tensor_outparam(ops))
        kv_gen_buf_puts(out,
                        "\n"
                        "static void gen_put_tensor(kv_tensor **dst, kv_tensor *owned) {\n"
                        "    if (dst)\n"
                        "        *dst = owned;\n"
                        "    else\n"
                        "        kv_tensor_release(owned);\n"
                        "}\n");
}

void kv_gen_emit_ops_api(const kv_gen_ops *ops, kv_gen_buf *out) {
    put_banner(ops, out);
    kv_gen_buf_puts(out,
                    " *\n"
                    " * The typed wrappers declared in kv/ops.h. */\n"
                    "#include <stdlib.h>\n"
                    "\n"
                    "#include \"kv/dispatch.h\"\n"
                    "#include \"kv/init.h\"\n"
                    "#include \"kv/tensor.h\"\n"
                    "#include \"kv/ops.h\"\n");
    put_helpers(ops, out);
    for (int i = 0; i < ops->n; i++) {
        kv_gen_buf_puts(out, "\n");
        kv_gen_emit_wrapper(ops->items[i], out);
    }
}
