/* The schema parser: a hand-written recursive descent over PyTorch's
 * schema syntax, plus the canonical formatter and the classifiers.
 *
 * This file is linked into build/kvgen together with src/core/status.c
 * and nothing else, so it must not call into any other libkv file nor
 * include generated headers: only status.c functions and inline helpers.
 *
 * Grammar (whitespace allowed between tokens, not inside them):
 *   schema   := name ['.' overload] '(' [arg {',' arg}] ')' '->' returns
 *   arg      := '*' | type name ['=' default]
 *   type     := base [alias] ['[' [N] ']'] ['?']
 *   base     := Tensor | int | SymInt | float | bool | str | Scalar
 *             | ScalarType | Device | Layout | MemoryFormat
 *   alias    := '(' letter ['!'] ')'
 *   returns  := type | '(' [type [name] {',' type [name]}] ')'
 *
 * Decisions worth knowing (each rejected form fails with a message that
 * says why, never silently):
 * - SymInt is int: the parsed schema does not remember the spelling, so
 *   the canonical text says `int`.
 * - Lists exist only for int/SymInt and Tensor, because the boxed stack
 *   has no float or bool list value. `Tensor?[]` (a list of optional
 *   tensors) and wildcard aliases `(a -> *)` are rejected.
 * - Alias annotations are single letters and only on Tensor types.
 * - Defaults: None (optional types only), True/False, integers, floats
 *   (`1e-05`, `-2.5`, `inf`, `-inf`, `nan`), strings in single or double
 *   quotes (backslash escapes the next character; at most 31 bytes), int
 *   lists `[]` / `[0, 1]` (at most 8 entries), a single int for a fixed
 *   length list `int[N]` (expands to N copies, as in PyTorch's
 *   `int[2] stride=1`), and the enum identifiers below. ScalarType,
 *   Device and Tensor arguments only take None.
 * - Enum values are PyTorch's c10 numbering: Layout `strided` = 0;
 *   MemoryFormat `contiguous_format` = 0, `preserve_format` = 1,
 *   `channels_last` = 2, `channels_last_3d` = 3.
 * - default_value of a list or string default points into the kv_arg
 *   itself (default_ints, default_str): copying a kv_schema by value keeps
 *   pointing at the original. The registry parses in place for that reason.
 */
#include "kv/schema.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_SCHEMA_DEFAULT_INTS_MAX ((int)(sizeof(((kv_arg *)0)->default_ints) / sizeof(int64_t)))
#define KV_SCHEMA_DEFAULT_STR_MAX ((int)sizeof(((kv_arg *)0)->default_str))
/* How much of the schema text an error message quotes. */
#define KV_SCHEMA_QUOTE_MAX 80

typedef struct parser {
    const char *text;
    const char *p;
} parser;

static kv_status parse_fail(const parser *ps, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kv_status parse_fail(const parser *ps, const char *at, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    int len = (int)strlen(ps->text);
    int shown = len > KV_SCHEMA_QUOTE_MAX ? KV_SCHEMA_QUOTE_MAX : len;
    return kv_error(KV_ERR_SCHEMA, "schema '%.*s%s': col %d: expected %s", shown, ps->text,
                    len > shown ? "..." : "", (int)(at - ps->text) + 1, what);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

static void skip_ws(parser *ps) {
    while (is_space(*ps->p)) ps->p++;
}

/* Length of the identifier at p (0 if none). */
static int ident_len(const char *p) {
    if (!is_ident_start(*p)) return 0;
    int n = 1;
    while (is_ident_char(p[n])) n++;
    return n;
}

/* True when the identifier at ps->p is exactly `word`; consumes it. */
static bool accept_word(parser *ps, const char *word) {
    int n = ident_len(ps->p);
    if (n > 0 && (size_t)n == strlen(word) && strncmp(ps->p, word, (size_t)n) == 0) {
        ps->p += n;
        return true;
    }
    return false;
}

/* Reads an identifier into buf (KV_SCHEMA_NAME_MAX). what names it for errors. */
static kv_status read_name(parser *ps, char *buf, const char *what) {
    int n = ident_len(ps->p);
    if (n == 0) return parse_fail(ps, ps->p, "%s", what);
    if (n >= KV_SCHEMA_NAME_MAX)
        return parse_fail(ps, ps->p, "%s of at most %d characters", what, KV_SCHEMA_NAME_MAX - 1);
    memcpy(buf, ps->p, (size_t)n);
    buf[n] = '\0';
    ps->p += n;
    return KV_OK;
}

/* ---- types ---- */

static const struct {
    const char *name;
    kv_type_kind kind;
} kv_type_names[] = {
    { "Tensor", KV_TYPE_TENSOR },
    { "int", KV_TYPE_INT },
    { "SymInt", KV_TYPE_INT },
    { "float", KV_TYPE_FLOAT },
    { "bool", KV_TYPE_BOOL },
    { "str", KV_TYPE_STR },
    { "Scalar", KV_TYPE_SCALAR },
    { "ScalarType", KV_TYPE_SCALAR_TYPE },
    { "Device", KV_TYPE_DEVICE },
    { "Layout", KV_TYPE_LAYOUT },
    { "MemoryFormat", KV_TYPE_MEMORY_FORMAT },
    { "Generator", KV_TYPE_GENERATOR },
};

const char *kv_type_kind_name(kv_type_kind k) {
    switch (k) {
    case KV_TYPE_TENSOR: return "Tensor";
    case KV_TYPE_INT: return "int";
    case KV_TYPE_FLOAT: return "float";
    case KV_TYPE_BOOL: return "bool";
    case KV_TYPE_STR: return "str";
    case KV_TYPE_SCALAR: return "Scalar";
    case KV_TYPE_SCALAR_TYPE: return "ScalarType";
    case KV_TYPE_DEVICE: return "Device";
    case KV_TYPE_LAYOUT: return "Layout";
    case KV_TYPE_MEMORY_FORMAT: return "MemoryFormat";
    case KV_TYPE_GENERATOR: return "Generator";
    }
    return "?";
}

static kv_status parse_alias(parser *ps, kv_alias_info *alias) {
    ps->p++; /* '(' */
    skip_ws(ps);
    if (!(*ps->p >= 'a' && *ps->p <= 'z'))
        return parse_fail(ps, ps->p, "an alias set letter a-z in the annotation, like (a) or (a!)");
    alias->set = *ps->p++;
    skip_ws(ps);
    if (*ps->p == '!') {
        alias->is_write = true;
        ps->p++;
        skip_ws(ps);
    }
    if (*ps->p == ')') {
        ps->p++;
        return KV_OK;
    }
    if (ps->p[0] == '-' && ps->p[1] == '>')
        return parse_fail(ps, ps->p, "')' (wildcard alias annotations like (a -> *) are not supported)");
    return parse_fail(ps, ps->p, "'!' or ')' in the alias annotation (one letter, like (a) or (a!))");
}

static kv_status parse_type(parser *ps, kv_type *type, kv_alias_info *alias) {
    const char *start = ps->p;
    int n = ident_len(start);
    if (n == 0) return parse_fail(ps, start, "a type");
    bool found = false;
    for (size_t i = 0; i < sizeof kv_type_names / sizeof kv_type_names[0]; i++) {
        if ((size_t)n == strlen(kv_type_names[i].name) && strncmp(start, kv_type_names[i].name, (size_t)n) == 0) {
            type->kind = kv_type_names[i].kind;
            found = true;
            break;
        }
    }
    if (!found) return parse_fail(ps, start, "a type, got '%.*s'", n > 40 ? 40 : n, start);
    ps->p += n;
    skip_ws(ps);
    if (*ps->p == '(') {
        if (type->kind != KV_TYPE_TENSOR)
            return parse_fail(ps, ps->p, "a name (alias annotations apply to Tensor only, not %s)",
                              kv_type_kind_name(type->kind));
        kv_status st = parse_alias(ps, alias);
        if (st != KV_OK) return st;
        skip_ws(ps);
    }
    if (*ps->p == '[') {
        if (type->kind != KV_TYPE_TENSOR && type->kind != KV_TYPE_INT)
            return parse_fail(ps, ps->p, "a name (lists are supported for int, SymInt and Tensor only, not %s)",
                              kv_type_kind_name(type->kind));
        ps->p++;
        skip_ws(ps);
        if (is_digit(*ps->p)) {
            const char *num = ps->p;
            long len = 0;
            while (is_digit(*ps->p)) {
                len = len * 10 + (*ps->p - '0');
                if (len > 1000000) return parse_fail(ps, num, "a list length of at most 1000000");
                ps->p++;
            }
            if (len == 0) return parse_fail(ps, num, "a list length of at least 1");
            type->fixed_len = (int)len;
            skip_ws(ps);
        }
        if (*ps->p != ']') return parse_fail(ps, ps->p, "']'");
        ps->p++;
        type->is_list = true;
        skip_ws(ps);
    }
    if (*ps->p == '?') {
        type->optional = true;
        ps->p++;
        skip_ws(ps);
        if (*ps->p == '[')
            return parse_fail(ps, ps->p, "a name (lists of optional values like Tensor?[] are not supported)");
    }
    return KV_OK;
}

/* ---- defaults ---- */

typedef enum number_kind { NUMBER_NONE, NUMBER_INT, NUMBER_FLOAT } number_kind;

/* Scans a numeric literal at p: [-]digits[.digits][e[+-]digits], or
 * [-]inf / nan. Returns its kind and sets *end. */
static number_kind scan_number(const char *p, const char **end) {
    const char *q = p;
    if (*q == '-' || *q == '+') q++;
    int n = ident_len(q);
    if ((n == 3 && strncmp(q, "inf", 3) == 0) || (n == 3 && strncmp(q, "nan", 3) == 0 && q == p)) {
        *end = q + 3;
        return NUMBER_FLOAT;
    }
    number_kind kind = NUMBER_INT;
    bool digits = false;
    while (is_digit(*q)) {
        q++;
        digits = true;
    }
    if (*q == '.') {
        kind = NUMBER_FLOAT;
        q++;
        while (is_digit(*q)) {
            q++;
            digits = true;
        }
    }
    if (!digits) return NUMBER_NONE;
    if (*q == 'e' || *q == 'E') {
        const char *e = q + 1;
        if (*e == '-' || *e == '+') e++;
        if (!is_digit(*e)) return NUMBER_NONE;
        while (is_digit(*e)) e++;
        q = e;
        kind = NUMBER_FLOAT;
    }
    /* "1abc" is not a number followed by garbage but a malformed token. */
    if (is_ident_char(*q)) return NUMBER_NONE;
    *end = q;
    return kind;
}

static kv_status read_int(parser *ps, int64_t *out, const char *what) {
    const char *end = NULL;
    const char *start = ps->p;
    if (scan_number(start, &end) != NUMBER_INT) return parse_fail(ps, start, "%s", what);
    char tmp[32];
    if (end - start >= (long)sizeof tmp) return parse_fail(ps, start, "an integer in int64 range");
    memcpy(tmp, start, (size_t)(end - start));
    tmp[end - start] = '\0';
    errno = 0;
    long long v = strtoll(tmp, NULL, 10);
    if (errno == ERANGE) return parse_fail(ps, start, "an integer in int64 range");
    *out = (int64_t)v;
    ps->p = end;
    return KV_OK;
}

/* Reads an int or float literal as a double. */
static kv_status read_double(parser *ps, double *out, const char *what) {
    const char *end = NULL;
    const char *start = ps->p;
    if (scan_number(start, &end) == NUMBER_NONE) return parse_fail(ps, start, "%s", what);
    char tmp[64];
    if (end - start >= (long)sizeof tmp) return parse_fail(ps, start, "a float literal of at most 63 characters");
    memcpy(tmp, start, (size_t)(end - start));
    tmp[end - start] = '\0';
    *out = strtod(tmp, NULL);
    ps->p = end;
    return KV_OK;
}

static kv_status read_string(parser *ps, kv_arg *arg) {
    const char *start = ps->p;
    char quote = *ps->p++;
    int n = 0;
    while (*ps->p != quote) {
        char c = *ps->p;
        if (c == '\0') return parse_fail(ps, start, "a closing %c for the string default", quote);
        if (c == '\\') {
            ps->p++;
            c = *ps->p;
            if (c == '\0') return parse_fail(ps, start, "a closing %c for the string default", quote);
        }
        if (n >= KV_SCHEMA_DEFAULT_STR_MAX - 1)
            return parse_fail(ps, start, "a string default of at most %d characters", KV_SCHEMA_DEFAULT_STR_MAX - 1);
        arg->default_str[n++] = c;
        ps->p++;
    }
    ps->p++;
    arg->default_str[n] = '\0';
    arg->default_value.tag = KV_IV_STR;
    arg->default_value.v.str = arg->default_str;
    return KV_OK;
}

static kv_status read_int_list(parser *ps, kv_arg *arg) {
    const char *start = ps->p;
    int fixed = arg->type.fixed_len;
    int n = 0;
    if (*ps->p == '[') {
        ps->p++;
        skip_ws(ps);
        if (*ps->p != ']') {
            for (;;) {
                if (n == KV_SCHEMA_DEFAULT_INTS_MAX)
                    return parse_fail(ps, ps->p, "at most %d ints in a default list", KV_SCHEMA_DEFAULT_INTS_MAX);
                kv_status st = read_int(ps, &arg->default_ints[n], "an int in the default list");
                if (st != KV_OK) return st;
                n++;
                skip_ws(ps);
                if (*ps->p == ',') {
                    ps->p++;
                    skip_ws(ps);
                    continue;
                }
                if (*ps->p == ']') break;
                return parse_fail(ps, ps->p, "',' or ']' in the default list");
            }
        }
        ps->p++;
        if (fixed > 0 && n != 0 && n != fixed)
            return parse_fail(ps, start, "a default list of %d ints for int[%d] (got %d)", fixed, fixed, n);
    } else if (fixed > 0 && scan_number(ps->p, &(const char *){ NULL }) == NUMBER_INT) {
        if (fixed > KV_SCHEMA_DEFAULT_INTS_MAX)
            return parse_fail(ps, start, "a single-int default only for int[N] with N <= %d",
                              KV_SCHEMA_DEFAULT_INTS_MAX);
        int64_t v = 0;
        kv_status st = read_int(ps, &v, "an int");
        if (st != KV_OK) return st;
        for (n = 0; n < fixed; n++) arg->default_ints[n] = v;
    } else {
        return parse_fail(ps, start, "a default that fits type int[%s] (an int list like [] or [0, 1]%s)",
                          fixed > 0 ? "N" : "", fixed > 0 ? ", or one int" : "");
    }
    arg->default_value.tag = KV_IV_INT_LIST;
    arg->default_value.v.ints.items = arg->default_ints;
    arg->default_value.v.ints.n = n;
    return KV_OK;
}

static const struct {
    const char *name;
    kv_type_kind kind;
    int64_t value;
} kv_enum_defaults[] = {
    { "strided", KV_TYPE_LAYOUT, 0 },
    { "contiguous_format", KV_TYPE_MEMORY_FORMAT, 0 },
    { "preserve_format", KV_TYPE_MEMORY_FORMAT, 1 },
    { "channels_last", KV_TYPE_MEMORY_FORMAT, 2 },
    { "channels_last_3d", KV_TYPE_MEMORY_FORMAT, 3 },
};

static const char *enum_default_name(kv_type_kind kind, int64_t value) {
    for (size_t i = 0; i < sizeof kv_enum_defaults / sizeof kv_enum_defaults[0]; i++)
        if (kv_enum_defaults[i].kind == kind && kv_enum_defaults[i].value == value) return kv_enum_defaults[i].name;
    return NULL;
}

static kv_status parse_default(parser *ps, kv_arg *arg) {
    const char *at = ps->p;
    kv_type_kind kind = arg->type.kind;
    const char *tname = kv_type_kind_name(kind);
    arg->has_default = true;
    if (accept_word(ps, "None")) {
        if (!arg->type.optional)
            return parse_fail(ps, at, "a default that fits type %s%s (None needs an optional type, %s%s?)", tname,
                              arg->type.is_list ? "[]" : "", tname, arg->type.is_list ? "[]" : "");
        arg->default_value.tag = KV_IV_NONE;
        return KV_OK;
    }
    if (arg->type.is_list) {
        if (kind == KV_TYPE_INT) return read_int_list(ps, arg);
        return parse_fail(ps, at, "None as the default of a Tensor[] argument");
    }
    switch (kind) {
    case KV_TYPE_TENSOR:
    case KV_TYPE_SCALAR_TYPE:
    case KV_TYPE_DEVICE:
    case KV_TYPE_GENERATOR:
        return parse_fail(ps, at, "None as the default of a %s argument", tname);
    case KV_TYPE_INT: {
        arg->default_value.tag = KV_IV_INT;
        return read_int(ps, &arg->default_value.v.i, "a default that fits type int (an integer)");
    }
    case KV_TYPE_FLOAT:
        arg->default_value.tag = KV_IV_DOUBLE;
        return read_double(ps, &arg->default_value.v.d, "a default that fits type float (a number)");
    case KV_TYPE_BOOL:
        arg->default_value.tag = KV_IV_BOOL;
        if (accept_word(ps, "True")) arg->default_value.v.b = true;
        else if (accept_word(ps, "False")) arg->default_value.v.b = false;
        else return parse_fail(ps, at, "a default that fits type bool (True or False)");
        return KV_OK;
    case KV_TYPE_STR:
        if (*ps->p != '\'' && *ps->p != '"')
            return parse_fail(ps, at, "a default that fits type str (a quoted string)");
        return read_string(ps, arg);
    case KV_TYPE_SCALAR: {
        arg->default_value.tag = KV_IV_SCALAR;
        if (accept_word(ps, "True")) {
            arg->default_value.v.scalar = kv_scalar_bool(true);
            return KV_OK;
        }
        if (accept_word(ps, "False")) {
            arg->default_value.v.scalar = kv_scalar_bool(false);
            return KV_OK;
        }
        const char *end = NULL;
        number_kind nk = scan_number(ps->p, &end);
        if (nk == NUMBER_INT) {
            int64_t v = 0;
            kv_status st = read_int(ps, &v, "an integer");
            arg->default_value.v.scalar = kv_scalar_int(v);
            return st;
        }
        if (nk == NUMBER_FLOAT) {
            double d = 0;
            kv_status st = read_double(ps, &d, "a number");
            arg->default_value.v.scalar = kv_scalar_double(d);
            return st;
        }
        return parse_fail(ps, at, "a default that fits type Scalar (a number, True or False)");
    }
    case KV_TYPE_LAYOUT:
    case KV_TYPE_MEMORY_FORMAT: {
        for (size_t i = 0; i < sizeof kv_enum_defaults / sizeof kv_enum_defaults[0]; i++) {
            if (kv_enum_defaults[i].kind == kind && accept_word(ps, kv_enum_defaults[i].name)) {
                arg->default_value.tag = KV_IV_INT;
                arg->default_value.v.i = kv_enum_defaults[i].value;
                return KV_OK;
            }
        }
        return parse_fail(ps, at, "a default that fits type %s (%s)", tname,
                          kind == KV_TYPE_LAYOUT ? "strided"
                                                 : "contiguous_format, preserve_format, channels_last or "
                                                   "channels_last_3d");
    }
    }
    return parse_fail(ps, at, "a known type");
}

/* ---- arguments and returns ---- */

static kv_status parse_arg(parser *ps, kv_arg *arg, bool is_return, bool allow_name, const char **name_at) {
    kv_status st = parse_type(ps, &arg->type, &arg->alias);
    if (st != KV_OK) return st;
    skip_ws(ps);
    *name_at = ps->p;
    if (!is_return) {
        st = read_name(ps, arg->name, "an argument name");
        if (st != KV_OK) return st;
        skip_ws(ps);
        if (*ps->p == '=') {
            ps->p++;
            skip_ws(ps);
            st = parse_default(ps, arg);
            if (st != KV_OK) return st;
            skip_ws(ps);
        }
    } else if (allow_name && ident_len(ps->p) > 0) {
        st = read_name(ps, arg->name, "a return name");
        if (st != KV_OK) return st;
        skip_ws(ps);
    }
    return KV_OK;
}

static bool name_taken(const kv_arg *args, int n, const char *name) {
    if (name[0] == '\0') return false;
    for (int i = 0; i < n; i++)
        if (strcmp(args[i].name, name) == 0) return true;
    return false;
}

static kv_status parse_args(parser *ps, kv_schema *out) {
    skip_ws(ps);
    if (*ps->p == ')') {
        ps->p++;
        return KV_OK;
    }
    bool kwarg_only = false;
    for (;;) {
        skip_ws(ps);
        const char *item = ps->p;
        if (*item == '*') {
            if (kwarg_only) return parse_fail(ps, item, "at most one '*' in the argument list");
            kwarg_only = true;
            ps->p++;
            skip_ws(ps);
            if (*ps->p == ')') return parse_fail(ps, ps->p, "an argument after '*'");
            if (*ps->p != ',') return parse_fail(ps, ps->p, "',' after '*'");
            ps->p++;
            continue;
        }
        if (out->nargs == KV_SCHEMA_MAX_ARGS)
            return parse_fail(ps, item, "at most %d arguments", KV_SCHEMA_MAX_ARGS);
        kv_arg *arg = &out->args[out->nargs];
        const char *name_at = item;
        kv_status st = parse_arg(ps, arg, false, true, &name_at);
        if (st != KV_OK) return st;
        if (name_taken(out->args, out->nargs, arg->name))
            return parse_fail(ps, name_at, "a unique argument name ('%s' is used twice)", arg->name);
        arg->kwarg_only = kwarg_only;
        out->nargs++;
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == ')') {
            ps->p++;
            return KV_OK;
        }
        return parse_fail(ps, ps->p, "',' or ')'");
    }
}

static kv_status parse_returns(parser *ps, kv_schema *out) {
    if (*ps->p != '(') {
        const char *name_at = NULL;
        kv_status st = parse_arg(ps, &out->returns[0], true, false, &name_at);
        if (st != KV_OK) return st;
        out->nreturns = 1;
        return KV_OK;
    }
    ps->p++;
    skip_ws(ps);
    if (*ps->p == ')') {
        ps->p++;
        return KV_OK;
    }
    for (;;) {
        skip_ws(ps);
        const char *item = ps->p;
        if (out->nreturns == KV_SCHEMA_MAX_RETURNS)
            return parse_fail(ps, item, "at most %d returns", KV_SCHEMA_MAX_RETURNS);
        kv_arg *ret = &out->returns[out->nreturns];
        const char *name_at = item;
        kv_status st = parse_arg(ps, ret, true, true, &name_at);
        if (st != KV_OK) return st;
        if (name_taken(out->returns, out->nreturns, ret->name))
            return parse_fail(ps, name_at, "a unique return name ('%s' is used twice)", ret->name);
        out->nreturns++;
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == ')') {
            ps->p++;
            return KV_OK;
        }
        return parse_fail(ps, ps->p, "',' or ')' in the returns");
    }
}

kv_status kv_schema_parse(const char *text, kv_schema *out) {
    if (out == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_schema_parse: argument 'out': is NULL");
    memset(out, 0, sizeof *out);
    if (text == NULL) return kv_error(KV_ERR_SCHEMA, "schema (null): col 1: expected schema text");
    parser ps = { text, text };
    skip_ws(&ps);
    kv_status st = read_name(&ps, out->name, "an op name");
    if (st != KV_OK) return st;
    if (*ps.p == '.') {
        ps.p++;
        st = read_name(&ps, out->overload, "an overload name after '.'");
        if (st != KV_OK) return st;
    }
    if (out->overload[0])
        snprintf(out->full_name, sizeof out->full_name, "%s.%s", out->name, out->overload);
    else
        snprintf(out->full_name, sizeof out->full_name, "%s", out->name);
    skip_ws(&ps);
    if (*ps.p != '(') return parse_fail(&ps, ps.p, "'(' after the op name");
    ps.p++;
    st = parse_args(&ps, out);
    if (st != KV_OK) return st;
    skip_ws(&ps);
    if (!(ps.p[0] == '-' && ps.p[1] == '>')) return parse_fail(&ps, ps.p, "'->'");
    ps.p += 2;
    skip_ws(&ps);
    st = parse_returns(&ps, out);
    if (st != KV_OK) return st;
    skip_ws(&ps);
    if (*ps.p != '\0') return parse_fail(&ps, ps.p, "end of schema");
    return KV_OK;
}

/* ---- formatting ---- */

typedef struct writer {
    char *buf;
    int cap;
    int len;
} writer;

static void w_put(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void w_put(writer *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int room = w->len < w->cap ? w->cap - w->len : 0;
    int n = vsnprintf(room > 0 ? w->buf + w->len : NULL, (size_t)room, fmt, ap);
    va_end(ap);
    if (n > 0) w->len += n;
}

/* The shortest %g text that reads back as exactly d, made to look like a
 * float so a Scalar default keeps its kind. */
static void w_double(writer *w, double d) {
    if (isnan(d)) {
        w_put(w, "nan");
        return;
    }
    if (isinf(d)) {
        w_put(w, "%sinf", d < 0 ? "-" : "");
        return;
    }
    char tmp[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d) break;
    }
    bool floaty = strpbrk(tmp, ".eE") != NULL;
    w_put(w, "%s%s", tmp, floaty ? "" : ".0");
}

static void w_type(writer *w, const kv_arg *a) {
    w_put(w, "%s", kv_type_kind_name(a->type.kind));
    if (a->alias.set) w_put(w, "(%c%s)", a->alias.set, a->alias.is_write ? "!" : "");
    if (a->type.is_list) {
        if (a->type.fixed_len > 0) w_put(w, "[%d]", a->type.fixed_len);
        else w_put(w, "[]");
    }
    if (a->type.optional) w_put(w, "?");
}

static void w_default(writer *w, const kv_arg *a) {
    const kv_ivalue *v = &a->default_value;
    switch (v->tag) {
    case KV_IV_NONE: w_put(w, "None"); return;
    case KV_IV_INT: {
        const char *e = enum_default_name(a->type.kind, v->v.i);
        if ((a->type.kind == KV_TYPE_LAYOUT || a->type.kind == KV_TYPE_MEMORY_FORMAT) && e) w_put(w, "%s", e);
        else w_put(w, "%lld", (long long)v->v.i);
        return;
    }
    case KV_IV_INT_LIST:
        w_put(w, "[");
        for (int i = 0; i < v->v.ints.n; i++) w_put(w, "%s%lld", i ? ", " : "", (long long)v->v.ints.items[i]);
        w_put(w, "]");
        return;
    case KV_IV_DOUBLE: w_double(w, v->v.d); return;
    case KV_IV_BOOL: w_put(w, "%s", v->v.b ? "True" : "False"); return;
    case KV_IV_STR:
        w_put(w, "'");
        for (const char *c = v->v.str ? v->v.str : ""; *c; c++) w_put(w, "%s%c", (*c == '\'' || *c == '\\') ? "\\" : "", *c);
        w_put(w, "'");
        return;
    case KV_IV_SCALAR:
        switch (v->v.scalar.kind) {
        case KV_SCALAR_BOOL: w_put(w, "%s", v->v.scalar.v.b ? "True" : "False"); return;
        case KV_SCALAR_INT: w_put(w, "%lld", (long long)v->v.scalar.v.i); return;
        case KV_SCALAR_DOUBLE: w_double(w, v->v.scalar.v.d); return;
        case KV_SCALAR_COMPLEX: w_double(w, v->v.scalar.v.c.re); return; /* not expressible in schemas */
        }
        return;
    case KV_IV_TENSOR:
    case KV_IV_TENSOR_LIST:
    case KV_IV_DTYPE:
    case KV_IV_DEVICE:
    case KV_IV_GENERATOR:
        /* No schema text produces these defaults; write what the parser takes. */
        w_put(w, "None");
        return;
    }
}

int kv_schema_format(const kv_schema *s, char *buf, int cap) {
    writer w = { buf, cap < 0 ? 0 : cap, 0 };
    if (cap > 0) buf[0] = '\0';
    if (s == NULL) return 0;
    w_put(&w, "%s%s%s(", s->name, s->overload[0] ? "." : "", s->overload);
    bool star = false;
    for (int i = 0; i < s->nargs; i++) {
        const kv_arg *a = &s->args[i];
        if (i) w_put(&w, ", ");
        if (a->kwarg_only && !star) {
            w_put(&w, "*, ");
            star = true;
        }
        w_type(&w, a);
        w_put(&w, " %s", a->name);
        if (a->has_default) {
            w_put(&w, "=");
            w_default(&w, a);
        }
    }
    w_put(&w, ") -> ");
    bool tuple = s->nreturns != 1 || s->returns[0].name[0] != '\0';
    if (tuple) w_put(&w, "(");
    for (int i = 0; i < s->nreturns; i++) {
        if (i) w_put(&w, ", ");
        w_type(&w, &s->returns[i]);
        if (s->returns[i].name[0]) w_put(&w, " %s", s->returns[i].name);
    }
    if (tuple) w_put(&w, ")");
    if (w.cap > 0 && w.len >= w.cap) buf[w.cap - 1] = '\0';
    return w.len;
}

/* ---- classification ---- */

bool kv_schema_is_inplace(const kv_schema *s) {
    size_t n = strlen(s->name);
    if (n == 0 || s->name[n - 1] != '_' || s->nargs < 1 || s->nreturns < 1) return false;
    const kv_alias_info *a = &s->args[0].alias, *r = &s->returns[0].alias;
    return a->set && a->is_write && r->is_write && a->set == r->set;
}

bool kv_schema_is_out(const kv_schema *s) {
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].kwarg_only && s->args[i].alias.set && s->args[i].alias.is_write) return true;
    return false;
}

bool kv_schema_is_view(const kv_schema *s) {
    for (int r = 0; r < s->nreturns; r++) {
        const kv_alias_info *ra = &s->returns[r].alias;
        if (!ra->set || ra->is_write) continue;
        for (int i = 0; i < s->nargs; i++)
            if (s->args[i].alias.set == ra->set) return true;
    }
    return false;
}

bool kv_schema_is_factory(const kv_schema *s) {
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].type.kind == KV_TYPE_TENSOR) return false;
    return true;
}

int kv_schema_first_list_arg(const kv_schema *s) {
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].type.kind == KV_TYPE_TENSOR && s->args[i].type.is_list) return i;
    return -1;
}

bool kv_schema_returns_list(const kv_schema *s) {
    for (int r = 0; r < s->nreturns; r++)
        if (s->returns[r].type.kind == KV_TYPE_TENSOR && s->returns[r].type.is_list) return true;
    return false;
}

int kv_schema_return_count(const kv_schema *s, const kv_stack *args) {
    if (!kv_schema_returns_list(s)) return s->nreturns;
    const int l = kv_schema_first_list_arg(s);
    if (l < 0 || args == NULL || l >= args->size || args->slots[l].tag != KV_IV_TENSOR_LIST) return -1;
    /* PyTorch's foreach ops: one result per element of the first list,
     * in place of the one Tensor[] return (the only return they have). */
    return s->nreturns - 1 + args->slots[l].v.tensors.n;
}

int kv_schema_mutable_list_arg(const kv_schema *s) {
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].type.kind == KV_TYPE_TENSOR && s->args[i].type.is_list && s->args[i].alias.is_write) return i;
    return -1;
}

int kv_schema_arg_index(const kv_schema *s, const char *name) {
    if (s == NULL || name == NULL) return -1;
    for (int i = 0; i < s->nargs; i++)
        if (strcmp(s->args[i].name, name) == 0) return i;
    return -1;
}
