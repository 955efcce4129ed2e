/* Spec storage: refcounted options, specs and spec lists. Options are
 * shared rather than copied because one defaults line may feed hundreds
 * of case lines. */
#include "runner/case/spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *kv_spec_strdup(const char *s) {
    const size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

kv_spec_option *kv_spec_option_new(int row, const char *file, int line, int col) {
    kv_spec_option *o = calloc(1, sizeof *o);
    if (o == NULL) return NULL;
    o->file = kv_spec_strdup(file);
    if (o->file == NULL) {
        free(o);
        return NULL;
    }
    o->refs = 1;
    o->row = row;
    o->line = line;
    o->col = col;
    return o;
}

int kv_spec_option_add_axis(kv_spec_option *o, const char *label, int label_col) {
    kv_spec_axis *axes = realloc(o->axes, (size_t)(o->naxes + 1) * sizeof *axes);
    if (axes == NULL) return -1;
    o->axes = axes;
    kv_spec_axis *a = &axes[o->naxes];
    memset(a, 0, sizeof *a);
    if (label) {
        a->label = kv_spec_strdup(label);
        if (a->label == NULL) return -1;
    }
    a->label_col = label_col;
    return o->naxes++;
}

kv_status kv_spec_option_add_alt(kv_spec_option *o, int axis, const char *text, const int *cols,
                                 int len) {
    kv_spec_axis *a = &o->axes[axis];
    kv_spec_alt *alts = realloc(a->alts, (size_t)(a->nalts + 1) * sizeof *alts);
    if (alts == NULL) return kv_error(KV_ERR_OOM, "case grammar: out of memory");
    a->alts = alts;
    char *t = malloc((size_t)len + 1);
    int *c = malloc(((size_t)len + 1) * sizeof *c);
    if (t == NULL || c == NULL) {
        free(t);
        free(c);
        return kv_error(KV_ERR_OOM, "case grammar: out of memory");
    }
    memcpy(t, text, (size_t)len);
    t[len] = '\0';
    memcpy(c, cols, (size_t)len * sizeof *c);
    c[len] = len > 0 ? cols[len - 1] + 1 : 1; /* the grammar never adds empty ones */
    alts[a->nalts].text = t;
    alts[a->nalts].cols = c;
    a->nalts++;
    return KV_OK;
}

void kv_spec_option_retain(kv_spec_option *o) {
    if (o) o->refs++;
}

void kv_spec_option_release(kv_spec_option *o) {
    if (o == NULL || --o->refs > 0) return;
    for (int i = 0; i < o->naxes; i++) {
        kv_spec_axis *a = &o->axes[i];
        for (int j = 0; j < a->nalts; j++) {
            free(a->alts[j].text);
            free(a->alts[j].cols);
        }
        free(a->alts);
        free(a->label);
    }
    free(o->axes);
    free(o->file);
    free(o);
}

void kv_case_spec_copy(kv_case_spec *dst, const kv_case_spec *src) {
    *dst = *src;
    for (int i = 0; i < KV_SPEC_MAX_OPTIONS; i++) kv_spec_option_retain(dst->opts[i]);
}

void kv_case_spec_clear(kv_case_spec *s) {
    for (int i = 0; i < KV_SPEC_MAX_OPTIONS; i++) {
        kv_spec_option_release(s->opts[i]);
        s->opts[i] = NULL;
        s->inherited[i] = false;
    }
}

kv_status kv_spec_list_push(kv_spec_list *l, const kv_case_spec *s) {
    if (l->n == l->cap) {
        const int cap = l->cap ? l->cap * 2 : 16;
        kv_case_spec *items = realloc(l->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_error(KV_ERR_OOM, "case grammar: out of memory");
        l->items = items;
        l->cap = cap;
    }
    kv_case_spec_copy(&l->items[l->n++], s);
    return KV_OK;
}

void kv_spec_list_free(kv_spec_list *l) {
    for (int i = 0; i < l->n; i++) kv_case_spec_clear(&l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

kv_status kv_spec_error(kv_status code, const char *file, int line, int col, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kv_error(code, "%s:%d:%d: %s", file, line, col, msg);
}

int kv_spec_alt_col(const kv_spec_alt *a, int offset) {
    const int len = (int)strlen(a->text);
    if (offset < 0) offset = 0;
    if (offset > len) offset = len;
    return a->cols[offset];
}
