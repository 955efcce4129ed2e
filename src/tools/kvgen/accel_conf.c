/* Reading kernels/accel.conf: which ops the accel device boxes and to
 * which target. Every error points at FILE:LINE:COL, like the schema
 * loader's, so an editor can jump to it. */
#include "tools/kvgen/kvgen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boxing/hand_ops.h"

void kv_gen_accel_init(kv_gen_accel *conf) { *conf = (kv_gen_accel){ NULL, 0, 0, NULL }; }

void kv_gen_accel_free(kv_gen_accel *conf) {
    free(conf->items);
    free(conf->source);
    kv_gen_accel_init(conf);
}

bool kv_gen_accel_is_hand_registered(const char *full_name) {
    static const char *const hand[] = {
#define KV_HAND_OP_NAME(name, is_metadata) name,
        KV_ACCEL_HAND_OPS(KV_HAND_OP_NAME)
#undef KV_HAND_OP_NAME
    };
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++)
        if (strcmp(hand[i], full_name) == 0) return true;
    return false;
}

const char *kv_gen_accel_target_name(kv_gen_accel_target t) {
    switch (t) {
    case KV_GEN_ACCEL_DEFAULT: return "default";
    case KV_GEN_ACCEL_CPU: return "cpu";
    case KV_GEN_ACCEL_SIM: return "sim";
    case KV_GEN_ACCEL_CUDA: return "cuda";
    }
    return "?";
}

__attribute__((format(printf, 4, 5)))
static kv_status conf_error(const kv_gen_accel *conf, int line, int col, const char *fmt, ...) {
    char reason[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return kv_error(KV_ERR_SCHEMA, "%s:%d:%d: %s", conf->source, line, col, reason);
}

static bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* The next token of [p, end): skips blanks; stops at a blank, a '#' or end. */
static const char *token(const char *p, const char *end, const char **tok_end) {
    while (p < end && is_blank(*p)) p++;
    const char *q = p;
    while (q < end && !is_blank(*q) && *q != '#') q++;
    *tok_end = q;
    return p;
}

static const kv_gen_op *find_op(const kv_gen_ops *ops, const char *name, size_t n) {
    for (int i = 0; i < ops->n; i++) {
        const char *full = ops->items[i]->schema.full_name;
        if (strlen(full) == n && strncmp(full, name, n) == 0) return ops->items[i];
    }
    return NULL;
}

static int parse_target(const char *t, size_t n, kv_gen_accel_target *out) {
    for (int i = KV_GEN_ACCEL_DEFAULT; i <= KV_GEN_ACCEL_CUDA; i++) {
        const char *name = kv_gen_accel_target_name((kv_gen_accel_target)i);
        if (strlen(name) == n && strncmp(name, t, n) == 0) {
            *out = (kv_gen_accel_target)i;
            return 0;
        }
    }
    return -1;
}

static kv_status add_line(kv_gen_accel *conf, const kv_gen_ops *ops, const char *p, const char *end, int line) {
    const char *start = p;
    const char *name_end;
    const char *name = token(p, end, &name_end);
    if (name == name_end) return KV_OK; /* blank or comment only */
    const int name_col = (int)(name - start) + 1;
    const size_t name_len = (size_t)(name_end - name);
    const kv_gen_op *op = find_op(ops, name, name_len);
    if (op == NULL)
        return conf_error(conf, line, name_col, "unknown op '%.*s' (not in %s)", (int)name_len, name, ops->source);
    if (kv_gen_accel_is_hand_registered(op->schema.full_name))
        return conf_error(conf, line, name_col,
                          "op '%s' is hand-registered by src/boxing (boxing/hand_ops.h); it cannot be listed here",
                          op->schema.full_name);
    for (int i = 0; i < conf->n; i++)
        if (conf->items[i].op == op)
            return conf_error(conf, line, name_col, "duplicate op '%s' (first listed at line %d)", op->schema.full_name,
                              conf->items[i].line);

    const char *target_end;
    const char *target = token(name_end, end, &target_end);
    if (target == target_end)
        return conf_error(conf, line, (int)(target - start) + 1,
                          "op '%s': expected a target (cpu, sim, cuda or default)", op->schema.full_name);
    kv_gen_accel_target t;
    if (parse_target(target, (size_t)(target_end - target), &t) != 0)
        return conf_error(conf, line, (int)(target - start) + 1,
                          "op '%s': unknown target '%.*s' (expected cpu, sim, cuda or default)", op->schema.full_name,
                          (int)(target_end - target), target);
    const char *extra_end;
    const char *extra = token(target_end, end, &extra_end);
    if (extra != extra_end)
        return conf_error(conf, line, (int)(extra - start) + 1, "op '%s': unexpected '%.*s' after the target",
                          op->schema.full_name, (int)(extra_end - extra), extra);

    if (conf->n == conf->cap) {
        int cap = conf->cap ? conf->cap * 2 : 64;
        kv_gen_accel_entry *items = realloc(conf->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_error(KV_ERR_OOM, "%s:%d:1: out of memory", conf->source, line);
        conf->items = items;
        conf->cap = cap;
    }
    conf->items[conf->n++] = (kv_gen_accel_entry){ op, t, line };
    return KV_OK;
}

static int by_op_name(const void *a, const void *b) {
    const kv_gen_accel_entry *x = a, *y = b;
    return strcmp(x->op->schema.full_name, y->op->schema.full_name);
}

kv_status kv_gen_accel_load_text(const char *source, const char *text, const kv_gen_ops *ops, kv_gen_accel *out) {
    kv_gen_accel_init(out);
    size_t n = strlen(source);
    out->source = malloc(n + 1);
    if (out->source == NULL) return kv_error(KV_ERR_OOM, "%s: out of memory", source);
    memcpy(out->source, source, n + 1);
    int line = 0;
    for (const char *p = text; *p;) {
        line++;
        const char *end = strchr(p, '\n');
        if (end == NULL) end = p + strlen(p);
        kv_status st = add_line(out, ops, p, end, line);
        if (st != KV_OK) return st;
        p = *end ? end + 1 : end;
    }
    /* qsort's array may not be NULL even for zero elements (UBSan). */
    if (out->n > 1) qsort(out->items, (size_t)out->n, sizeof *out->items, by_op_name);
    return KV_OK;
}

kv_status kv_gen_accel_load_file(const char *path, const kv_gen_ops *ops, kv_gen_accel *out) {
    kv_gen_accel_init(out);
    char *text = NULL;
    kv_status rd = kv_gen_read_text_file(path, &text);
    if (rd != KV_OK) return rd;
    kv_status st = kv_gen_accel_load_text(path, text, ops, out);
    free(text);
    return st;
}
