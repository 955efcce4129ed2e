/* Scalar conversions, parsing and the canonical text form.
 *
 * The text form appears in case files and case IDs, so it must read back
 * to the same kind and the same bits: doubles use the shortest "%.*g" that
 * round-trips, and a double that looks like an integer gets ".0" so that it
 * does not come back as an int. */
#include "kv/scalar.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* C leaves out-of-range double -> int64 undefined; make it total instead:
 * NaN gives 0, values beyond the range saturate. */
static int64_t kv_double_to_i64(double d) {
    if (isnan(d)) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

double kv_scalar_to_double(kv_scalar s) {
    switch (s.kind) {
    case KV_SCALAR_BOOL: return s.v.b ? 1.0 : 0.0;
    case KV_SCALAR_INT: return (double)s.v.i;
    case KV_SCALAR_DOUBLE: return s.v.d;
    case KV_SCALAR_COMPLEX: return s.v.c.re;
    }
    return 0.0;
}

int64_t kv_scalar_to_int(kv_scalar s) {
    switch (s.kind) {
    case KV_SCALAR_BOOL: return s.v.b ? 1 : 0;
    case KV_SCALAR_INT: return s.v.i;
    case KV_SCALAR_DOUBLE: return kv_double_to_i64(s.v.d);
    case KV_SCALAR_COMPLEX: return kv_double_to_i64(s.v.c.re);
    }
    return 0;
}

bool kv_scalar_to_bool(kv_scalar s) {
    switch (s.kind) {
    case KV_SCALAR_BOOL: return s.v.b;
    case KV_SCALAR_INT: return s.v.i != 0;
    case KV_SCALAR_DOUBLE: return s.v.d != 0.0;
    case KV_SCALAR_COMPLEX: return s.v.c.re != 0.0 || s.v.c.im != 0.0;
    }
    return false;
}

void kv_scalar_to_complex(kv_scalar s, double *re, double *im) {
    double r = 0.0, i = 0.0;
    switch (s.kind) {
    case KV_SCALAR_BOOL: r = s.v.b ? 1.0 : 0.0; break;
    case KV_SCALAR_INT: r = (double)s.v.i; break;
    case KV_SCALAR_DOUBLE: r = s.v.d; break;
    case KV_SCALAR_COMPLEX:
        r = s.v.c.re;
        i = s.v.c.im;
        break;
    }
    if (re) *re = r;
    if (im) *im = i;
}

kv_dtype kv_scalar_dtype(kv_scalar s) {
    switch (s.kind) {
    case KV_SCALAR_BOOL: return KV_BOOL;
    case KV_SCALAR_INT: return KV_I64;
    case KV_SCALAR_DOUBLE: return KV_F64;
    case KV_SCALAR_COMPLEX: return KV_C128;
    }
    return KV_F64;
}

kv_dtype_category kv_scalar_category(kv_scalar s) { return kv_dtype_category_of(kv_scalar_dtype(s)); }

/* ---- parsing ---- */

/* A whole-string strtod: no leading space, no trailing characters. */
static int kv_parse_double(const char *begin, const char *end, double *out) {
    char buf[128];
    const size_t n = (size_t)(end - begin);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, begin, n);
    buf[n] = '\0';
    if (buf[0] == ' ' || buf[0] == '\t' || buf[0] == '\n') return -1;
    char *stop = NULL;
    errno = 0;
    const double d = strtod(buf, &stop);
    if (stop != buf + n) return -1;
    /* ERANGE on underflow still gives the correctly rounded tiny value;
     * only overflow of a finite literal ("1e999") is refused. */
    if (errno == ERANGE && isinf(d)) return -1;
    *out = d;
    return 0;
}

/* Optional sign then decimal digits only: the spelling of an int. */
static bool kv_looks_integral(const char *s) {
    if (*s == '+' || *s == '-') s++;
    if (*s == '\0') return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
    }
    return true;
}

int kv_scalar_parse(const char *text, kv_scalar *out) {
    if (text == NULL || out == NULL || text[0] == '\0') return -1;
    if (strcmp(text, "true") == 0) {
        *out = kv_scalar_bool(true);
        return 0;
    }
    if (strcmp(text, "false") == 0) {
        *out = kv_scalar_bool(false);
        return 0;
    }
    const size_t len = strlen(text);
    if (text[len - 1] == 'j') {
        /* "re+imj", "re-imj" or "imj". The split is the last sign that is
         * not at the start and not an exponent sign ("1e-3j"). */
        const char *end = text + len - 1;
        const char *split = NULL;
        for (const char *p = text + 1; p < end; p++) {
            if ((*p == '+' || *p == '-') && p[-1] != 'e' && p[-1] != 'E') split = p;
        }
        double re = 0.0, im = 0.0;
        if (split) {
            if (kv_parse_double(text, split, &re) != 0) return -1;
            if (kv_parse_double(split, end, &im) != 0) return -1;
        } else if (kv_parse_double(text, end, &im) != 0) {
            return -1;
        }
        *out = kv_scalar_complex(re, im);
        return 0;
    }
    if (kv_looks_integral(text)) {
        char *stop = NULL;
        errno = 0;
        const long long v = strtoll(text, &stop, 10);
        if (errno == ERANGE || *stop != '\0') return -1;
        *out = kv_scalar_int((int64_t)v);
        return 0;
    }
    double d;
    if (kv_parse_double(text, text + len, &d) != 0) return -1;
    *out = kv_scalar_double(d);
    return 0;
}

/* ---- formatting ---- */

/* Shortest "%.*g" text that strtod reads back to the same bits, into a
 * buffer of at least 32 bytes. */
static void kv_format_double_core(double d, char *buf, size_t cap) {
    if (isnan(d)) {
        snprintf(buf, cap, "%s", signbit(d) ? "-nan" : "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, "%s", d < 0 ? "-inf" : "inf");
        return;
    }
    /* Whole numbers below 2^53 read better as "100" than as "1e+02". */
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        snprintf(buf, cap, "%.0f", d);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        const double back = strtod(buf, NULL);
        if (memcmp(&back, &d, sizeof d) == 0) return;
    }
}

int kv_scalar_format(kv_scalar s, char *buf, int cap) {
    char a[40], b[40];
    if (buf == NULL || cap < 0) cap = 0;
    const size_t ucap = (size_t)cap;
    switch (s.kind) {
    case KV_SCALAR_BOOL: return snprintf(buf, ucap, "%s", s.v.b ? "true" : "false");
    case KV_SCALAR_INT: return snprintf(buf, ucap, "%" PRId64, s.v.i);
    case KV_SCALAR_DOUBLE:
        kv_format_double_core(s.v.d, a, sizeof a);
        return snprintf(buf, ucap, "%s%s", a, kv_looks_integral(a) ? ".0" : "");
    case KV_SCALAR_COMPLEX:
        kv_format_double_core(s.v.c.re, a, sizeof a);
        kv_format_double_core(s.v.c.im, b, sizeof b);
        /* The imaginary part always carries a sign so the split is found. */
        return snprintf(buf, ucap, "%s%s%sj", a, b[0] == '-' ? "" : "+", b);
    }
    return snprintf(buf, ucap, "?");
}
