/* Typed values of args= against the op schema; see runner/case_args.h. */
#include "runner/case/case_args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/device.h"
#include "kv/dtype.h"
#include "kv/scalar.h"
#include "runner/case/case_options.h"

/* PyTorch's c10::MemoryFormat numbering, as the schema defaults store it. */
static const char *const kv_memory_format_names[] = {
    "contiguous_format", "preserve_format", "channels_last", "channels_last_3d"
};
#define KV_MEMORY_FORMAT_COUNT 4

static int kv_fail(char *why, int whycap, int *bad_at, int at, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int kv_fail(char *why, int whycap, int *bad_at, int at, const char *fmt, ...) {
    if (why && whycap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, (size_t)whycap, fmt, ap);
        va_end(ap);
    }
    if (bad_at) *bad_at = at;
    return -1;
}

/* Strict decimal uint64: digits only. */
static int kv_parse_u64(const char *s, size_t len, uint64_t *out) {
    if (len == 0 || len > 20) return -1;
    for (size_t k = 0; k < len; k++)
        if (s[k] < '0' || s[k] > '9') return -1;
    char buf[24];
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(buf, &end, 10);
    if (errno == ERANGE || *end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}

/* A Generator value: SEED or SEED:OFFSET (decimal uint64s). */
static int kv_parse_generator(const char *text, kv_generator *g) {
    const char *colon = strchr(text, ':');
    const size_t n = colon ? (size_t)(colon - text) : strlen(text);
    g->offset = 0;
    if (kv_parse_u64(text, n, &g->seed) != 0) return -1;
    return colon ? kv_parse_u64(colon + 1, strlen(colon + 1), &g->offset) : 0;
}

/* Strict decimal int64: optional '-', digits only. */
static int kv_parse_i64(const char *s, size_t len, int64_t *out) {
    if (len == 0 || len > 20) return -1;
    size_t i = s[0] == '-' ? 1 : 0;
    if (i == len) return -1;
    for (size_t k = i; k < len; k++) {
        if (s[k] < '0' || s[k] > '9') return -1;
    }
    char buf[24];
    memcpy(buf, s, len);
    buf[len] = '\0';
    errno = 0;
    char *end = NULL;
    const long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE || *end != '\0') return -1;
    *out = (int64_t)v;
    return 0;
}

int kv_case_format_double(double d, char *buf, int cap) {
    char tmp[40];
    if (isnan(d)) {
        snprintf(tmp, sizeof tmp, "nan");
    } else if (isinf(d)) {
        snprintf(tmp, sizeof tmp, "%s", d < 0 ? "-inf" : "inf");
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(tmp, sizeof tmp, "%.*g", prec, d);
            if (strtod(tmp, NULL) == d && signbit(strtod(tmp, NULL)) == signbit(d)) break;
        }
    }
    return snprintf(buf, cap > 0 ? (size_t)cap : 0, "%s", tmp);
}

static int kv_format_ints(const int64_t *v, int n, bool bare_single, char *buf, int cap) {
    if (bare_single && n == 1) return snprintf(buf, (size_t)cap, "%" PRId64, v[0]);
    int len = snprintf(buf, (size_t)cap, "[");
    for (int i = 0; i < n; i++) {
        const int room = len < cap ? cap - len : 0;
        len += snprintf(room ? buf + len : NULL, (size_t)room, "%s%" PRId64, i ? "," : "", v[i]);
    }
    const int room = len < cap ? cap - len : 0;
    len += snprintf(room ? buf + len : NULL, (size_t)room, "]");
    return len;
}

/* "[a,b]" or a bare int (when allowed) into v; n entries. */
static int kv_parse_int_list(const char *text, bool bare_ok, int64_t *v, int cap, int *n,
                             char *why, int whycap, int *bad_at) {
    const size_t len = strlen(text);
    if (text[0] != '[') {
        if (!bare_ok || kv_parse_i64(text, len, &v[0]) != 0) {
            return kv_fail(why, whycap, bad_at, 0,
                           bare_ok ? "expected an int or a list like [0,1], got '%s'"
                                   : "expected a list like [0,1] or [], got '%s'",
                           text);
        }
        *n = 1;
        return 0;
    }
    if (text[len - 1] != ']') return kv_fail(why, whycap, bad_at, 0, "expected ']' at the end of '%s'", text);
    *n = 0;
    if (len == 2) return 0;
    size_t start = 1;
    for (size_t i = 1; i < len; i++) {
        if (text[i] != ',' && text[i] != ']') continue;
        if (*n == cap) return kv_fail(why, whycap, bad_at, (int)start, "too many list elements in '%s'", text);
        if (kv_parse_i64(text + start, i - start, &v[*n]) != 0) {
            char piece[32];
            snprintf(piece, sizeof piece, "%.*s", (int)(i - start), text + start);
            return kv_fail(why, whycap, bad_at, (int)start, "expected an int, got '%s'", piece);
        }
        (*n)++;
        start = i + 1;
    }
    return 0;
}

static int kv_named_enum(const char *text, const char *const *names, int count, int64_t *out) {
    for (int i = 0; i < count; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    return kv_parse_i64(text, strlen(text), out);
}

static int kv_format_enum(int64_t v, const char *const *names, int count, char *buf, int cap) {
    if (v >= 0 && v < count) return snprintf(buf, (size_t)cap, "%s", names[v]);
    return snprintf(buf, (size_t)cap, "%" PRId64, v);
}

static const char *const kv_layout_arg_names[] = { "strided" };

static int kv_format_device(kv_device d, char *buf, int cap) {
    if (d.index == 0) return snprintf(buf, (size_t)cap, "%s", kv_device_type_name(d.type));
    return snprintf(buf, (size_t)cap, "%s:%d", kv_device_type_name(d.type), d.index);
}

static bool kv_str_ok(const char *s) {
    for (; *s; s++) {
        if (strchr(",;|()[] \t'\"#", *s) != NULL) return false;
    }
    return true;
}

int kv_case_arg_canonical(const kv_arg *a, const char *text, char *out, int cap, char *why,
                          int whycap, int *bad_at) {
    const kv_type *t = &a->type;
    if (t->kind == KV_TYPE_TENSOR) {
        return kv_fail(why, whycap, bad_at, 0, "is a tensor; give its shape in --shape");
    }
    const bool is_str = t->kind == KV_TYPE_STR && !t->is_list;
    if (strcmp(text, "none") == 0 && !(is_str && !t->optional)) {
        if (!t->optional) return kv_fail(why, whycap, bad_at, 0, "is not optional; '%s' is not allowed", text);
        return snprintf(out, (size_t)cap, "none") < cap ? 0 : kv_fail(why, whycap, bad_at, 0, "value too long");
    }
    int n = -1;
    if (t->is_list) {
        if (t->kind != KV_TYPE_INT) {
            return kv_fail(why, whycap, bad_at, 0, "list type %s[] is not supported in --args",
                           kv_type_kind_name(t->kind));
        }
        int64_t v[KV_CASE_ARG_MAX_INTS];
        int count = 0;
        if (kv_parse_int_list(text, t->fixed_len > 0, v, KV_CASE_ARG_MAX_INTS, &count, why, whycap,
                              bad_at) != 0) {
            return -1;
        }
        if (text[0] != '[' && t->fixed_len > 1) {
            for (int i = 1; i < t->fixed_len && i < KV_CASE_ARG_MAX_INTS; i++) v[i] = v[0];
            count = t->fixed_len;
        }
        n = kv_format_ints(v, count, t->fixed_len == 1, out, cap);
    } else {
        switch (t->kind) {
        case KV_TYPE_INT: {
            int64_t v;
            if (kv_parse_i64(text, strlen(text), &v) != 0) {
                return kv_fail(why, whycap, bad_at, 0, "expected an int, got '%s'", text);
            }
            n = snprintf(out, (size_t)cap, "%" PRId64, v);
            break;
        }
        case KV_TYPE_FLOAT: {
            char *end = NULL;
            const double d = strtod(text, &end);
            if (end == text || *end != '\0') {
                return kv_fail(why, whycap, bad_at, 0, "expected a float, got '%s'", text);
            }
            n = kv_case_format_double(d, out, cap);
            break;
        }
        case KV_TYPE_BOOL:
            if (strcmp(text, "1") == 0 || strcmp(text, "true") == 0) {
                n = snprintf(out, (size_t)cap, "1");
            } else if (strcmp(text, "0") == 0 || strcmp(text, "false") == 0) {
                n = snprintf(out, (size_t)cap, "0");
            } else {
                return kv_fail(why, whycap, bad_at, 0, "expected a bool (0, 1, true, false), got '%s'", text);
            }
            break;
        case KV_TYPE_SCALAR: {
            kv_scalar s;
            if (kv_scalar_parse(text, &s) != 0) {
                return kv_fail(why, whycap, bad_at, 0, "expected a scalar (2, -1.5, true, 1+2j), got '%s'", text);
            }
            n = kv_scalar_format(s, out, cap);
            break;
        }
        case KV_TYPE_SCALAR_TYPE: {
            kv_dtype dt;
            if (kv_dtype_parse(text, &dt) != 0) {
                return kv_fail(why, whycap, bad_at, 0, "expected a dtype (f32, i64, ...), got '%s'", text);
            }
            n = snprintf(out, (size_t)cap, "%s", kv_dtype_name(dt));
            break;
        }
        case KV_TYPE_STR:
            if (!kv_str_ok(text)) {
                return kv_fail(why, whycap, bad_at, 0, "a str may not contain , ; | ( ) [ ] quotes or blanks: '%s'", text);
            }
            n = snprintf(out, (size_t)cap, "%s", text);
            break;
        case KV_TYPE_DEVICE: {
            kv_device d;
            if (kv_device_parse(text, &d) != 0) {
                return kv_fail(why, whycap, bad_at, 0, "expected a device (cpu, sim, accel, cuda:1), got '%s'", text);
            }
            n = kv_format_device(d, out, cap);
            break;
        }
        case KV_TYPE_LAYOUT: {
            int64_t v;
            if (kv_named_enum(text, kv_layout_arg_names, 1, &v) != 0) {
                return kv_fail(why, whycap, bad_at, 0, "expected a layout (strided), got '%s'", text);
            }
            n = kv_format_enum(v, kv_layout_arg_names, 1, out, cap);
            break;
        }
        case KV_TYPE_MEMORY_FORMAT: {
            int64_t v;
            if (kv_named_enum(text, kv_memory_format_names, KV_MEMORY_FORMAT_COUNT, &v) != 0) {
                return kv_fail(why, whycap, bad_at, 0,
                               "expected a memory format (contiguous_format, preserve_format, channels_last), got '%s'",
                               text);
            }
            n = kv_format_enum(v, kv_memory_format_names, KV_MEMORY_FORMAT_COUNT, out, cap);
            break;
        }
        case KV_TYPE_GENERATOR: {
            kv_generator g;
            if (kv_parse_generator(text, &g) != 0) {
                return kv_fail(why, whycap, bad_at, 0,
                               "expected a generator (none, SEED or SEED:OFFSET, decimal), got '%s'", text);
            }
            n = g.offset ? snprintf(out, (size_t)cap, "%" PRIu64 ":%" PRIu64, g.seed, g.offset)
                         : snprintf(out, (size_t)cap, "%" PRIu64, g.seed);
            break;
        }
        case KV_TYPE_TENSOR:
            break;
        }
    }
    if (n < 0 || n >= cap) return kv_fail(why, whycap, bad_at, 0, "value '%s' is too long", text);
    return 0;
}

/* Reads an ivalue default as a double/int whatever tag the schema parser chose. */
static double kv_iv_double(const kv_ivalue *v) {
    switch (v->tag) {
    case KV_IV_DOUBLE: return v->v.d;
    case KV_IV_INT: return (double)v->v.i;
    case KV_IV_BOOL: return v->v.b ? 1.0 : 0.0;
    case KV_IV_SCALAR: return kv_scalar_to_double(v->v.scalar);
    case KV_IV_NONE:
    case KV_IV_TENSOR:
    case KV_IV_TENSOR_LIST:
    case KV_IV_INT_LIST:
    case KV_IV_DTYPE:
    case KV_IV_DEVICE:
    case KV_IV_STR:
    case KV_IV_GENERATOR:
        break;
    }
    return 0.0;
}

static int64_t kv_iv_int(const kv_ivalue *v) {
    switch (v->tag) {
    case KV_IV_INT: return v->v.i;
    case KV_IV_DOUBLE: return (int64_t)v->v.d;
    case KV_IV_BOOL: return v->v.b;
    case KV_IV_SCALAR: return kv_scalar_to_int(v->v.scalar);
    case KV_IV_NONE:
    case KV_IV_TENSOR:
    case KV_IV_TENSOR_LIST:
    case KV_IV_INT_LIST:
    case KV_IV_DTYPE:
    case KV_IV_DEVICE:
    case KV_IV_STR:
    case KV_IV_GENERATOR:
        break;
    }
    return 0;
}

int kv_case_arg_default_text(const kv_arg *a, char *out, int cap) {
    if (!a->has_default) return -1;
    const kv_ivalue *v = &a->default_value;
    const kv_type *t = &a->type;
    if (v->tag == KV_IV_NONE) return snprintf(out, (size_t)cap, "none");
    if (t->is_list) {
        if (v->tag == KV_IV_INT_LIST) {
            int n = v->v.ints.n;
            if (n > 8) n = 8;
            return kv_format_ints(a->default_ints, n, t->fixed_len == 1, out, cap);
        }
        const int64_t one = kv_iv_int(v);
        return kv_format_ints(&one, 1, t->fixed_len == 1, out, cap);
    }
    switch (t->kind) {
    case KV_TYPE_INT: return snprintf(out, (size_t)cap, "%" PRId64, kv_iv_int(v));
    case KV_TYPE_FLOAT: return kv_case_format_double(kv_iv_double(v), out, cap);
    case KV_TYPE_BOOL:
        return snprintf(out, (size_t)cap, "%d", v->tag == KV_IV_BOOL ? (int)v->v.b : kv_iv_int(v) != 0);
    case KV_TYPE_SCALAR:
        if (v->tag == KV_IV_SCALAR) return kv_scalar_format(v->v.scalar, out, cap);
        if (v->tag == KV_IV_DOUBLE) return kv_scalar_format(kv_scalar_double(v->v.d), out, cap);
        if (v->tag == KV_IV_BOOL) return kv_scalar_format(kv_scalar_bool(v->v.b), out, cap);
        return kv_scalar_format(kv_scalar_int(kv_iv_int(v)), out, cap);
    case KV_TYPE_SCALAR_TYPE:
        return snprintf(out, (size_t)cap, "%s", v->tag == KV_IV_DTYPE ? kv_dtype_name(v->v.dtype) : "?");
    case KV_TYPE_STR:
        return snprintf(out, (size_t)cap, "%s", v->tag == KV_IV_STR && v->v.str ? v->v.str : a->default_str);
    case KV_TYPE_DEVICE:
        if (v->tag == KV_IV_DEVICE) return kv_format_device(v->v.device, out, cap);
        return snprintf(out, (size_t)cap, "?");
    case KV_TYPE_LAYOUT: return kv_format_enum(kv_iv_int(v), kv_layout_arg_names, 1, out, cap);
    case KV_TYPE_MEMORY_FORMAT:
        return kv_format_enum(kv_iv_int(v), kv_memory_format_names, KV_MEMORY_FORMAT_COUNT, out, cap);
    case KV_TYPE_TENSOR:
    case KV_TYPE_GENERATOR: break; /* no schema gives a Generator a default but None */
    }
    return -1;
}

kv_status kv_case_arg_ivalue(const kv_arg *a, const char *text, kv_ivalue *out, int64_t *ints,
                             int cap, kv_generator *gen) {
    const kv_type *t = &a->type;
    char canon[KV_CASE_TEXT_MAX], why[160];
    int bad = 0;
    if (kv_case_arg_canonical(a, text, canon, sizeof canon, why, sizeof why, &bad) != 0) {
        return kv_error(KV_ERR_INVALID_ARG, "argument '%s': %s", a->name, why);
    }
    memset(out, 0, sizeof *out);
    if (strcmp(canon, "none") == 0 && !(t->kind == KV_TYPE_STR && !t->optional)) {
        out->tag = KV_IV_NONE;
        return KV_OK;
    }
    if (t->is_list) {
        int n = 0;
        if (kv_parse_int_list(canon, true, ints, cap, &n, why, sizeof why, &bad) != 0) {
            return kv_error(KV_ERR_INVALID_ARG, "argument '%s': %s", a->name, why);
        }
        out->tag = KV_IV_INT_LIST;
        out->v.ints = (kv_int_list){ ints, n };
        return KV_OK;
    }
    switch (t->kind) {
    case KV_TYPE_INT:
        out->tag = KV_IV_INT;
        out->v.i = strtoll(canon, NULL, 10);
        return KV_OK;
    case KV_TYPE_LAYOUT:
        out->tag = KV_IV_INT;
        kv_named_enum(canon, kv_layout_arg_names, 1, &out->v.i);
        return KV_OK;
    case KV_TYPE_MEMORY_FORMAT:
        out->tag = KV_IV_INT;
        kv_named_enum(canon, kv_memory_format_names, KV_MEMORY_FORMAT_COUNT, &out->v.i);
        return KV_OK;
    case KV_TYPE_FLOAT:
        out->tag = KV_IV_DOUBLE;
        out->v.d = strtod(canon, NULL);
        return KV_OK;
    case KV_TYPE_BOOL:
        out->tag = KV_IV_BOOL;
        out->v.b = canon[0] == '1';
        return KV_OK;
    case KV_TYPE_SCALAR:
        out->tag = KV_IV_SCALAR;
        kv_scalar_parse(canon, &out->v.scalar);
        return KV_OK;
    case KV_TYPE_SCALAR_TYPE:
        out->tag = KV_IV_DTYPE;
        kv_dtype_parse(canon, &out->v.dtype);
        return KV_OK;
    case KV_TYPE_STR:
        out->tag = KV_IV_STR;
        out->v.str = text;
        return KV_OK;
    case KV_TYPE_DEVICE:
        out->tag = KV_IV_DEVICE;
        kv_device_parse(canon, &out->v.device);
        return KV_OK;
    case KV_TYPE_GENERATOR:
        if (gen == NULL) return kv_error(KV_ERR_INVALID_ARG, "argument '%s': no place for a generator", a->name);
        kv_parse_generator(canon, gen);
        out->tag = KV_IV_GENERATOR;
        out->v.gen = gen;
        return KV_OK;
    case KV_TYPE_TENSOR: break;
    }
    return kv_error(KV_ERR_INVALID_ARG, "argument '%s': a tensor is not a case argument", a->name);
}

const char *kv_case_arg_value(const kv_case *c, const char *name) {
    for (int i = 0; i < c->nargs; i++) {
        if (strcmp(c->args[i].name, name) == 0) return c->args[i].value;
    }
    return NULL;
}
