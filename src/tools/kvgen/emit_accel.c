/* accel_boxing.c: one boxing kernel per op of kernels/accel.conf.
 *
 * Each kernel is the sequence of src/boxing/boxing_internal.h written out
 * for its op: one boxing step per tensor (and Device) argument, the gate
 * choosing the fast or the slow path (each counted), one unboxing step per
 * return. The steps keep the first failure, so the text needs no error
 * branches and reads top to bottom. Two ops get special steps: cat boxes
 * its list in one pass (kv_accel_box_cat_list) and native_group_norm
 * boxes a contiguous input (kv_accel_box_contiguous). A Tensor(a!)[]
 * (the in-place foreach ops) is boxed as a list of mutable arguments
 * (kv_accel_box_mutable_list), and a Tensor[] return comes back as one
 * stack slot per element (kv_accel_unbox_list). An out= op's return
 * is unboxed with kv_accel_unbox_out, which gives the caller's out the
 * shape the target resized its stand-in to. */
#include "tools/kvgen/kvgen.h"

#include <ctype.h>
#include <string.h>

static bool has_arg(const kv_schema *s, bool list, bool optional) {
    for (int i = 0; i < s->nargs; i++) {
        const kv_type *t = &s->args[i].type;
        if (t->kind != KV_TYPE_TENSOR) continue;
        if (list && t->is_list) return true;
        if (optional && !t->is_list && t->optional) return true;
    }
    return false;
}

kv_gen_accel_kind kv_gen_accel_kind_of(const kv_schema *s) {
    if (kv_schema_is_factory(s)) return KV_GEN_ACCEL_FACTORY;
    if (has_arg(s, true, false)) return KV_GEN_ACCEL_TENSOR_LIST;
    if (kv_schema_is_out(s)) return KV_GEN_ACCEL_OUT;
    if (kv_schema_is_inplace(s)) return KV_GEN_ACCEL_INPLACE;
    if (has_arg(s, false, true)) return KV_GEN_ACCEL_OPTIONAL_TENSOR;
    return KV_GEN_ACCEL_FUNCTIONAL;
}

const char *kv_gen_accel_kind_name(kv_gen_accel_kind k) {
    switch (k) {
    case KV_GEN_ACCEL_FUNCTIONAL: return "functional";
    case KV_GEN_ACCEL_INPLACE: return "in-place";
    case KV_GEN_ACCEL_OUT: return "out=";
    case KV_GEN_ACCEL_TENSOR_LIST: return "tensor-list";
    case KV_GEN_ACCEL_OPTIONAL_TENSOR: return "optional-tensor";
    case KV_GEN_ACCEL_FACTORY: return "factory";
    case KV_GEN_ACCEL_KIND_COUNT: break;
    }
    return "?";
}

void kv_gen_accel_kernel_name(const kv_gen_op *op, char *buf, size_t cap) {
    const char *id = op->id;
    if (strncmp(id, "KV_OP_", 6) == 0) id += 6;
    size_t n = 0;
    const char *prefix = "accel_";
    for (const char *p = prefix; *p && n + 1 < cap; p++) buf[n++] = *p;
    for (const char *p = id; *p && n + 1 < cap; p++) buf[n++] = (char)tolower((unsigned char)*p);
    if (cap) buf[n < cap ? n : cap - 1] = '\0';
}

static const char *target_constant(kv_gen_accel_target t) {
    switch (t) {
    case KV_GEN_ACCEL_DEFAULT: return "KV_ACCEL_TARGET_DEFAULT";
    case KV_GEN_ACCEL_CPU: return "KV_KEY_CPU";
    case KV_GEN_ACCEL_SIM: return "KV_KEY_SIM";
    case KV_GEN_ACCEL_CUDA: return "KV_KEY_CUDA";
    }
    return "KV_ACCEL_TARGET_DEFAULT";
}

/* The schema as a comment; "*" followed by "/" and "??" are split as in ops.h. */
static void put_comment_text(const char *text, kv_gen_buf *out) {
    for (const char *p = text; *p; p++) {
        bool split = (p[0] == '*' && p[1] == '/') || (p[0] == '?' && p[1] == '?');
        kv_gen_buf_printf(out, split ? "%c " : "%c", *p);
    }
}

/* The boxing step of argument i, or NULL when the argument is not boxed. */
static const char *box_step(const kv_schema *s, int i) {
    const kv_arg *a = &s->args[i];
    if (a->type.kind == KV_TYPE_DEVICE && !a->type.is_list) return "kv_accel_box_device";
    if (a->type.kind != KV_TYPE_TENSOR) return NULL;
    if (a->type.is_list && a->alias.is_write) return "kv_accel_box_mutable_list";
    if (a->type.is_list) return strcmp(s->full_name, "cat") == 0 ? "kv_accel_box_cat_list" : "kv_accel_box_list";
    if (a->alias.is_write) return "kv_accel_box_mutable";
    if (a->type.optional) return "kv_accel_box_optional";
    if (i == 0 && strcmp(s->full_name, "native_group_norm") == 0) return "kv_accel_box_contiguous";
    return "kv_accel_box_tensor";
}

/* The mutable argument a Tensor return aliases, or -1. */
static int aliased_arg(const kv_schema *s, const kv_arg *ret) {
    if (ret->alias.set == 0) return -1;
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].alias.set == ret->alias.set && s->args[i].alias.is_write) return i;
    return -1;
}

/* The lean fast path's plan (src/boxing/lean.c) as an initializer, or
 * false when the op has an argument the lean path does not box (a list,
 * an optional or special tensor, a Device), is an out= op (the target
 * may resize its stand-in for out, and only kv_accel_unbox_out gives the
 * caller's tensor the new shape) or has more tensors than it shadows
 * (KV_ACCEL_BOX_SHADOWS: a plan past it would not compile). */
#define LEAN_MAX_TENSORS 4
static bool lean_plan(const kv_gen_accel_entry *e, kv_gen_buf *out) {
    const kv_schema *s = &e->op->schema;
    if (kv_schema_is_out(s)) return false;
    int slots[KV_SCHEMA_MAX_ARGS], n = 0;
    for (int i = 0; i < s->nargs; i++) {
        const char *step = box_step(s, i);
        if (step == NULL) continue;
        if (strcmp(step, "kv_accel_box_tensor") != 0 && strcmp(step, "kv_accel_box_mutable") != 0) return false;
        if (n == LEAN_MAX_TENSORS) return false;
        slots[n++] = i;
    }
    if (n == 0) return false;
    kv_gen_buf_printf(out, "{ %s, %s, %d, %d, {", e->op->id, target_constant(e->target), s->nargs, n);
    for (int j = 0; j < n; j++) kv_gen_buf_printf(out, "%s%d", j ? ", " : " ", slots[j]);
    kv_gen_buf_printf(out, " }, %d, {", s->nreturns);
    for (int k = 0; k < s->nreturns; k++) {
        const kv_arg *r = &s->returns[k];
        const bool tensor = r->type.kind == KV_TYPE_TENSOR && !r->type.is_list;
        kv_gen_buf_printf(out, "%s%d", k ? ", " : " ", tensor ? aliased_arg(s, r) : -1);
    }
    kv_gen_buf_puts(out, s->nreturns ? " } }" : "} }");
    return true;
}

void kv_gen_emit_accel_kernel(const kv_gen_accel_entry *e, kv_gen_buf *out) {
    const kv_gen_op *op = e->op;
    const kv_schema *s = &op->schema;
    char fn[KV_GEN_IDENT_MAX];
    kv_gen_accel_kernel_name(op, fn, sizeof fn);
    kv_gen_buf_puts(out, "/* ");
    put_comment_text(op->text, out);
    kv_gen_buf_printf(out, "\n * kind: %s; target: %s */\n", kv_gen_accel_kind_name(kv_gen_accel_kind_of(s)),
                      kv_gen_accel_target_name(e->target));
    kv_gen_buf plan;
    kv_gen_buf_init(&plan);
    const bool lean = lean_plan(e, &plan);
    if (lean) kv_gen_buf_printf(out, "static const kv_accel_lean_plan lean_%s = %s;\n", fn, kv_gen_buf_str(&plan));
    kv_gen_buf_free(&plan);
    kv_gen_buf_printf(out, "static kv_status %s(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n", fn);
    if (lean)
        kv_gen_buf_printf(out,
                          "    kv_status lean;\n"
                          "    if (kv_accel_lean(&lean_%s, op, stack, &lean)) return lean;\n",
                          fn);
    kv_gen_buf_printf(out,
                      "    kv_accel_box b;\n"
                      "    if (!kv_accel_box_begin(&b, op, ks, stack, %s)) return kv_accel_box_below(&b, %s);\n"
                      "    kv_status st = KV_OK;\n",
                      target_constant(e->target), op->id);
    for (int i = 0; i < s->nargs; i++) {
        const char *step = box_step(s, i);
        if (step) kv_gen_buf_printf(out, "    st = %s(&b, %d); /* %s */\n", step, i, s->args[i].name);
    }
    kv_gen_buf_printf(out,
                      "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                      "        kv_accel_count(%s, KV_ACCEL_PATH_FAST);\n"
                      "        st = kv_accel_box_fast(&b);\n"
                      "    } else if (st == KV_OK) {\n"
                      "        kv_accel_count(%s, KV_ACCEL_PATH_SLOW);\n"
                      "        st = kv_accel_box_slow(&b);\n"
                      "    }\n",
                      op->id, op->id);
    for (int k = 0; k < s->nreturns; k++) {
        const kv_arg *r = &s->returns[k];
        bool tensor = r->type.kind == KV_TYPE_TENSOR && !r->type.is_list;
        int src = tensor ? aliased_arg(s, r) : -1;
        if (r->type.kind == KV_TYPE_TENSOR && r->type.is_list)
            kv_gen_buf_printf(out, "    st = kv_accel_unbox_list(&b, %d); /* one return per element */\n", k);
        else if (src >= 0)
            kv_gen_buf_printf(out, "    st = %s(&b, %d, %d); /* the caller's %s */\n",
                              kv_schema_is_out(s) ? "kv_accel_unbox_out" : "kv_accel_unbox_alias", k, src,
                              s->args[src].name);
        else if (tensor)
            kv_gen_buf_printf(out, "    st = kv_accel_unbox_tensor(&b, %d);\n", k);
        else
            kv_gen_buf_printf(out, "    st = kv_accel_unbox_value(&b, %d);\n", k);
    }
    kv_gen_buf_puts(out,
                    "    return kv_accel_box_end(&b, st);\n"
                    "}\n");
}

void kv_gen_emit_accel_boxing(const kv_gen_ops *ops, const kv_gen_accel *conf, kv_gen_buf *out) {
    kv_gen_buf_printf(out,
                      "/* generated by kvgen from %s and %s; do not edit.\n"
                      " *\n"
                      " * One accel boxing kernel per op of %s, grouped by kind and\n"
                      " * sorted by full name within a kind; the steps are declared in\n"
                      " * src/boxing/boxing_internal.h. kv_accel_register_generated registers\n"
                      " * each one at KV_KEY_ACCEL_BOXING. */\n"
                      "#include \"boxing/boxing_internal.h\"\n"
                      "#include \"boxing/lean.h\"\n"
                      "#include \"kv/op_ids.h\"\n",
                      ops->source, conf->source, conf->source);
    for (int k = 0; k < KV_GEN_ACCEL_KIND_COUNT; k++) {
        bool header = false;
        for (int i = 0; i < conf->n; i++) {
            if ((int)kv_gen_accel_kind_of(&conf->items[i].op->schema) != k) continue;
            if (!header) {
                kv_gen_buf_printf(out, "\n/* ---- %s ---- */\n", kv_gen_accel_kind_name((kv_gen_accel_kind)k));
                header = true;
            }
            kv_gen_buf_puts(out, "\n");
            kv_gen_emit_accel_kernel(&conf->items[i], out);
        }
    }
    kv_gen_buf_puts(out,
                    "\n/* ---- registration ---- */\n"
                    "\n"
                    "kv_status kv_accel_register_generated(void) {\n");
    if (conf->n == 0) {
        kv_gen_buf_puts(out, "    return KV_OK; /* accel.conf lists no op */\n}\n");
        return;
    }
    kv_gen_buf_puts(out,
                    "    static const struct {\n"
                    "        const char *name;\n"
                    "        kv_kernel_fn fn;\n"
                    "    } kernels[] = {\n");
    for (int i = 0; i < conf->n; i++) {
        char fn[KV_GEN_IDENT_MAX];
        kv_gen_accel_kernel_name(conf->items[i].op, fn, sizeof fn);
        kv_gen_buf_printf(out, "        { \"%s\", %s },\n", conf->items[i].op->schema.full_name, fn);
    }
    kv_gen_buf_puts(out,
                    "    };\n"
                    "    for (unsigned i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {\n"
                    "        kv_status st = kv_register_kernel(kernels[i].name, KV_KEY_ACCEL_BOXING, kernels[i].fn);\n"
                    "        if (st != KV_OK) return st;\n"
                    "    }\n"
                    "    return KV_OK;\n"
                    "}\n");
}
