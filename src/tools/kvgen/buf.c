/* kvgen's growing text buffer. */
#include "tools/kvgen/kvgen.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kv_gen_buf_init(kv_gen_buf *b) { *b = (kv_gen_buf){ NULL, 0, 0, false }; }

void kv_gen_buf_free(kv_gen_buf *b) {
    free(b->data);
    kv_gen_buf_init(b);
}

/* Makes room for `extra` more bytes plus the NUL. */
static bool buf_reserve(kv_gen_buf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) {
        if (cap > (size_t)-1 / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void kv_gen_buf_puts(kv_gen_buf *b, const char *s) {
    size_t n = strlen(s);
    if (!buf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n + 1);
    b->len += n;
}

void kv_gen_buf_printf(kv_gen_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

const char *kv_gen_buf_str(const kv_gen_buf *b) { return b->data ? b->data : ""; }
