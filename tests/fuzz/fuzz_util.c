/* What the harnesses share (linked into each, with either main). */
#include "fuzz.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void kv_fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...) {
    fprintf(stderr, "%s:%d: check failed: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}
