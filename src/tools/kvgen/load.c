/* Reading kernels/ops.schema: one schema per line, '#' comment lines and
 * blank lines skipped. Every error points at FILE:LINE:COL so an editor
 * can jump to it. */
#include "tools/kvgen/kvgen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_gen_ops_init(kv_gen_ops *ops) { *ops = (kv_gen_ops){ NULL, 0, 0, NULL }; }

void kv_gen_ops_free(kv_gen_ops *ops) {
    for (int i = 0; i < ops->n; i++) {
        free(ops->items[i]->text);
        free(ops->items[i]);
    }
    free(ops->items);
    free(ops->source);
    kv_gen_ops_init(ops);
}

static char *dup_range(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* The parser reports "... col N: reason" with N counted from the start of
 * the schema text; this finds N and the reason that follows it. Returns 0
 * when the message carries no column. */
static int parser_column(const char *msg, const char **reason) {
    for (const char *p = strstr(msg, "col "); p; p = strstr(p + 1, "col ")) {
        const char *q = p + 4;
        int col = 0;
        while (*q >= '0' && *q <= '9' && col < 1000000) col = col * 10 + (*q++ - '0');
        if (q == p + 4 || *q != ':') continue;
        q++;
        while (*q == ' ') q++;
        *reason = q;
        return col;
    }
    *reason = msg;
    return 0;
}

static kv_status add_op(kv_gen_ops *ops, const char *text, size_t len, int line, int col) {
    if (ops->n == ops->cap) {
        int cap = ops->cap ? ops->cap * 2 : 64;
        kv_gen_op **items = realloc(ops->items, (size_t)cap * sizeof *items);
        if (!items) return kv_error(KV_ERR_OOM, "%s:%d:%d: out of memory", ops->source, line, col);
        ops->items = items;
        ops->cap = cap;
    }
    kv_gen_op *op = calloc(1, sizeof *op);
    char *copy = dup_range(text, len);
    if (!op || !copy) {
        free(op);
        free(copy);
        return kv_error(KV_ERR_OOM, "%s:%d:%d: out of memory", ops->source, line, col);
    }
    op->text = copy;
    op->line = line;
    op->col = col;
    /* Owned by the list before parsing, so kv_gen_ops_free releases it
     * even when this op is the one that fails. */
    ops->items[ops->n++] = op;
    if (kv_schema_parse(op->text, &op->schema) != KV_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kv_last_error_message());
        const char *reason;
        int pcol = parser_column(msg, &reason);
        int at = pcol > 0 ? col + pcol - 1 : col;
        return kv_error(KV_ERR_SCHEMA, "%s:%d:%d: %s", ops->source, line, at, reason);
    }
    return KV_OK;
}

kv_status kv_gen_load_text(const char *source, const char *text, kv_gen_ops *out) {
    kv_gen_ops_init(out);
    out->source = dup_range(source, strlen(source));
    if (!out->source) return kv_error(KV_ERR_OOM, "%s: out of memory", source);
    int line = 0;
    for (const char *p = text; *p;) {
        line++;
        const char *end = strchr(p, '\n');
        if (!end) end = p + strlen(p);
        const char *b = p, *e = end;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
        if (b < e && *b != '#') {
            kv_status st = add_op(out, b, (size_t)(e - b), line, (int)(b - p) + 1);
            if (st != KV_OK) return st;
        }
        p = *end ? end + 1 : end;
    }
    return kv_gen_prepare(out);
}

kv_status kv_gen_read_text_file(const char *path, char **text_out) {
    *text_out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot open: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 16384;
            char *p = realloc(text, ncap);
            if (!p) {
                free(text);
                fclose(f);
                return kv_error(KV_ERR_OOM, "%s: out of memory", path);
            }
            text = p;
            cap = ncap;
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    bool failed = ferror(f) != 0;
    int err = errno;
    fclose(f);
    if (failed) {
        free(text);
        return kv_error(KV_ERR_INVALID_ARG, "%s: cannot read: %s", path, strerror(err));
    }
    text[len] = '\0';
    /* The parsers stop at the first NUL; refuse rather than silently read
     * half a file. */
    if (strlen(text) != len) {
        free(text);
        return kv_error(KV_ERR_INVALID_ARG, "%s: not a text file (contains a NUL byte)", path);
    }
    *text_out = text;
    return KV_OK;
}

kv_status kv_gen_load_file(const char *path, kv_gen_ops *out) {
    kv_gen_ops_init(out);
    char *text = NULL;
    kv_status rd = kv_gen_read_text_file(path, &text);
    if (rd != KV_OK) return rd;
    kv_status st = kv_gen_load_text(path, text, out);
    free(text);
    return st;
}
