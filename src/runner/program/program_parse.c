/* The .prog parser (runner/program/program.h). Line based, like the case
 * grammar, and every error names FILE:LINE:COL of the token at fault, so
 * a broken program stops kvrun (exit 2) before anything runs. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runner/case/case_args.h"
#include "runner/case/spec.h"
#include "runner/program/program.h"

typedef struct pp_state {
    const char *file;
    int line;
    const char *text;            /* the current line (no newline) */
    kv_program *p;
} pp_state;

#define PP_ERR(st, at, ...) \
    kv_spec_error(KV_ERR_INVALID_ARG, (st)->file, (st)->line, (int)((at) - (st)->text) + 1, __VA_ARGS__)

static bool pp_ident_char(char ch) { return isalnum((unsigned char)ch) || ch == '_'; }

static const char *pp_skip_blank(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* An identifier at s: its length, 0 when s does not start one. */
static int pp_ident(const char *s) {
    if (!(isalpha((unsigned char)s[0]) || s[0] == '_')) return 0;
    int n = 1;
    while (pp_ident_char(s[n])) n++;
    return n;
}

static int pp_find_value(const kv_program *p, const char *name, int len) {
    for (int i = p->nvalues - 1; i >= 0; i--)
        if ((int)strlen(p->value_names[i]) == len && strncmp(p->value_names[i], name, (size_t)len) == 0) return i;
    return -1;
}

/* Defines a new value; a name may not be defined twice (a program reads
 * as single assignment, so a failure's "value h" means one thing). */
static kv_status pp_define(pp_state *st, const char *at, int len, int *index) {
    kv_program *p = st->p;
    if (len >= KV_PROG_NAME_MAX) return PP_ERR(st, at, "name '%.*s' is too long (at most %d characters)", len, at, KV_PROG_NAME_MAX - 1);
    if (pp_find_value(p, at, len) >= 0) return PP_ERR(st, at, "'%.*s' is already defined", len, at);
    if (len == 4 && strncmp(at, "none", 4) == 0) return PP_ERR(st, at, "'none' cannot name a value");
    if (p->nvalues >= KV_PROG_MAX_VALUES) return PP_ERR(st, at, "too many values (at most %d)", KV_PROG_MAX_VALUES);
    snprintf(p->value_names[p->nvalues], KV_PROG_NAME_MAX, "%.*s", len, at);
    *index = p->nvalues++;
    return KV_OK;
}

/* The next blank-separated word: [s, *end). */
static const char *pp_word(const char *s, const char **end) {
    s = pp_skip_blank(s);
    const char *e = s;
    while (*e && *e != ' ' && *e != '\t') e++;
    *end = e;
    return s;
}

static kv_status pp_program_line(pp_state *st, const char *s) {
    const char *e;
    const char *w = pp_word(s, &e);
    const int n = pp_ident(w);
    if (n == 0 || w + n != e) return PP_ERR(st, w, "expected a program name after 'program'");
    if (st->p->name[0]) return PP_ERR(st, st->text, "the program is already named '%s'", st->p->name);
    if (st->p->nvalues > 0) return PP_ERR(st, st->text, "'program NAME' must come before inputs and steps");
    if (n >= KV_PROG_NAME_MAX) return PP_ERR(st, w, "program name too long (at most %d characters)", KV_PROG_NAME_MAX - 1);
    snprintf(st->p->name, sizeof st->p->name, "%.*s", n, w);
    if (*pp_skip_blank(e)) return PP_ERR(st, pp_skip_blank(e), "unexpected text after the program name");
    return KV_OK;
}

static kv_status pp_input_line(pp_state *st, const char *s) {
    kv_program *p = st->p;
    if (p->nsteps > 0) return PP_ERR(st, st->text, "inputs must come before the first step");
    if (p->ninputs >= KV_PROG_MAX_INPUTS) return PP_ERR(st, st->text, "too many inputs (at most %d)", KV_PROG_MAX_INPUTS);
    kv_prog_input *in = &p->inputs[p->ninputs];
    memset(in, 0, sizeof *in);
    in->fill = KV_FILL_REAL;
    in->domain = KV_DOMAIN_ALL;
    in->layout = KV_LAYOUT_CONTIGUOUS;
    const char *e;
    const char *w = pp_word(s, &e);
    const int n = pp_ident(w);
    if (n == 0 || w + n != e) return PP_ERR(st, w, "expected an input name");
    int index;
    kv_status r = pp_define(st, w, n, &index);
    if (r != KV_OK) return r;
    snprintf(in->name, sizeof in->name, "%.*s", n, w);
    char buf[KV_CASE_TEXT_MAX];
    w = pp_word(e, &e);
    if (w == e) return PP_ERR(st, w, "expected a dtype after the input name");
    snprintf(buf, sizeof buf, "%.*s", (int)(e - w), w);
    if (kv_dtype_parse(buf, &in->dtype) != 0) return PP_ERR(st, w, "unknown dtype '%s'", buf);
    w = pp_word(e, &e);
    if (w == e) return PP_ERR(st, w, "expected a shape after the dtype");
    snprintf(buf, sizeof buf, "%.*s", (int)(e - w), w);
    char why[128];
    int bad = 0;
    if (kv_case_shape_parse(buf, &in->shape, why, (int)sizeof why, &bad) != 0)
        return PP_ERR(st, w + bad, "bad shape '%s': %s", buf, why);
    for (;;) {
        w = pp_word(e, &e);
        if (w == e) break;
        snprintf(buf, sizeof buf, "%.*s", (int)(e - w), w);
        if (strncmp(buf, "fill=", 5) == 0) {
            if (kv_fill_parse(buf + 5, &in->fill) != 0 || in->fill == KV_FILL_SWEEP || in->fill == KV_FILL_SHIFTED)
                return PP_ERR(st, w + 5, "unknown fill '%s' (real, exact or special)", buf + 5);
        } else if (strncmp(buf, "domain=", 7) == 0) {
            if (strcmp(buf + 7, "all") == 0) in->domain = KV_DOMAIN_ALL;
            else if (strcmp(buf + 7, "positive") == 0) in->domain = KV_DOMAIN_POSITIVE;
            else if (strcmp(buf + 7, "nonzero") == 0) in->domain = KV_DOMAIN_NONZERO;
            else return PP_ERR(st, w + 7, "unknown domain '%s' (all, positive or nonzero)", buf + 7);
        } else if (strncmp(buf, "lazy=", 5) == 0) {
            const char *l = buf + 5;
            if (strcmp(l, "neg") == 0) in->lazy = KV_CASE_LAZY_NEG;
            else if (strcmp(l, "conj") == 0) in->lazy = KV_CASE_LAZY_CONJ;
            else if (strcmp(l, "conj+neg") == 0) in->lazy = KV_CASE_LAZY_CONJ | KV_CASE_LAZY_NEG;
            else if (strcmp(l, "zero") == 0) in->lazy = KV_CASE_LAZY_ZERO;
            else if (strstr(l, "zero") != NULL)
                return PP_ERR(st, w + 5, "lazy=%s: zero goes alone (a ZeroTensor's values are zeros whatever other bits say)", l);
            else return PP_ERR(st, w + 5, "unknown lazy bits '%s' (neg, conj, conj+neg or zero)", l);
            if ((in->lazy & KV_CASE_LAZY_CONJ) && !kv_dtype_is_complex(in->dtype))
                return PP_ERR(st, w + 5, "lazy=%s: the Conjugate bit needs a complex dtype", l);
            if (!kv_dtype_is_floating(in->dtype) && !kv_dtype_is_complex(in->dtype))
                return PP_ERR(st, w + 5, "lazy=%s: input '%s' is %s: lazy bits go on floating and complex inputs only", l,
                              in->name, kv_dtype_name(in->dtype));
        } else if (strncmp(buf, "layout=", 7) == 0) {
            if (kv_layout_parse(buf + 7, &in->layout) != 0)
                return PP_ERR(st, w + 7, "unknown layout '%s' (c, t, s, o, b or w)", buf + 7);
        } else {
            return PP_ERR(st, w, "unknown input option '%s' (fill=, domain=, layout= or lazy=)", buf);
        }
    }
    p->ninputs++;
    return KV_OK;
}

static kv_status pp_backward_line(pp_state *st, const char *s) {
    kv_program *p = st->p;
    s = pp_skip_blank(s);
    const int n = pp_ident(s);
    if (n == 0) return PP_ERR(st, s, "expected the name of a scalar loss after 'backward'");
    if (p->backward >= 0) return PP_ERR(st, st->text, "a program has at most one 'backward' line");
    const int v = pp_find_value(p, s, n);
    if (v < 0) return PP_ERR(st, s, "unknown value '%.*s'", n, s);
    if (v < p->ninputs) return PP_ERR(st, s, "'%.*s' is an input: backward needs a value a step made", n, s);
    if (*pp_skip_blank(s + n)) return PP_ERR(st, pp_skip_blank(s + n), "unexpected text after the loss");
    p->backward = v;
    p->backward_line = st->line;
    p->backward_col = (int)(s - st->text) + 1;
    return KV_OK;
}

static kv_status pp_output_line(pp_state *st, const char *s) {
    kv_program *p = st->p;
    for (;;) {
        s = pp_skip_blank(s);
        const int n = pp_ident(s);
        if (n == 0) return PP_ERR(st, s, "expected a value name");
        const int v = pp_find_value(p, s, n);
        if (v < 0) return PP_ERR(st, s, "unknown value '%.*s'", n, s);
        for (int i = 0; i < p->noutputs; i++)
            if (p->outputs[i] == v) return PP_ERR(st, s, "'%.*s' is already an output", n, s);
        p->outputs[p->noutputs++] = v;
        s = pp_skip_blank(s + n);
        if (*s == '\0') return KV_OK;
        if (*s != ',') return PP_ERR(st, s, "expected ',' or the end of the line");
        s++;
    }
}

/* One argument text [a, b) (trimmed) for schema argument `arg`. */
static kv_status pp_arg(pp_state *st, const kv_arg *arg, const char *a, const char *b, kv_prog_arg *out) {
    kv_program *p = st->p;
    const int len = (int)(b - a);
    if (len == 0) return PP_ERR(st, a, "argument '%s': empty value", arg->name);
    if (arg->type.kind == KV_TYPE_TENSOR && arg->type.is_list) {
        if (*a != '[' || b[-1] != ']') return PP_ERR(st, a, "argument '%s' is a Tensor[]: give [NAME, ...]", arg->name);
        out->kind = KV_PROG_ARG_LIST;
        out->nlist = 0;
        const char *s = pp_skip_blank(a + 1);
        if (*s == ']') return PP_ERR(st, s, "argument '%s': an empty tensor list", arg->name);
        for (;;) {
            const int n = pp_ident(s);
            if (n == 0) return PP_ERR(st, s, "argument '%s': expected a value name", arg->name);
            const int v = pp_find_value(p, s, n);
            if (v < 0) return PP_ERR(st, s, "unknown value '%.*s'", n, s);
            if (out->nlist >= KV_PROG_MAX_LIST) return PP_ERR(st, s, "argument '%s': at most %d tensors", arg->name, KV_PROG_MAX_LIST);
            out->list[out->nlist++] = v;
            s = pp_skip_blank(s + n);
            if (*s == ']') break;
            if (*s != ',') return PP_ERR(st, s, "argument '%s': expected ',' or ']'", arg->name);
            s = pp_skip_blank(s + 1);
        }
        return KV_OK;
    }
    if (arg->type.kind == KV_TYPE_TENSOR) {
        if (len == 4 && strncmp(a, "none", 4) == 0) {
            if (!arg->type.optional) return PP_ERR(st, a, "argument '%s': a required tensor cannot be none", arg->name);
            out->kind = KV_PROG_ARG_NONE;
            return KV_OK;
        }
        const int n = pp_ident(a);
        if (n != len) return PP_ERR(st, a, "argument '%s' is a tensor: give the name of an earlier value", arg->name);
        const int v = pp_find_value(p, a, n);
        if (v < 0) return PP_ERR(st, a, "unknown value '%.*s'", n, a);
        out->kind = KV_PROG_ARG_VALUE;
        out->value = v;
        return KV_OK;
    }
    char text[KV_CASE_TEXT_MAX], why[160];
    if (len >= (int)sizeof text) return PP_ERR(st, a, "argument '%s': value too long", arg->name);
    snprintf(text, sizeof text, "%.*s", len, a);
    int bad = 0;
    if (kv_case_arg_canonical(arg, text, out->text, (int)sizeof out->text, why, (int)sizeof why, &bad) != 0)
        return PP_ERR(st, a + bad, "argument '%s': %s", arg->name, why);
    out->kind = KV_PROG_ARG_LITERAL;
    return KV_OK;
}

/* NAME[, NAME...] = OP(ARGS) */
static kv_status pp_step_line(pp_state *st, const char *s, const char *eq) {
    kv_program *p = st->p;
    if (p->nsteps >= KV_PROG_MAX_STEPS) return PP_ERR(st, st->text, "too many steps (at most %d)", KV_PROG_MAX_STEPS);
    if (p->backward >= 0) return PP_ERR(st, st->text, "steps must come before the 'backward' line");
    kv_prog_step *step = &p->steps[p->nsteps];
    memset(step, 0, sizeof *step);
    /* The op first: the left side is checked against its returns. */
    const char *o = pp_skip_blank(eq + 1);
    const char *oe = o;
    while (pp_ident_char(*oe) || *oe == '.') oe++;
    if (oe == o) return PP_ERR(st, o, "expected an op name after '='");
    if (oe - o >= (int)sizeof step->op) return PP_ERR(st, o, "op name too long");
    snprintf(step->op, sizeof step->op, "%.*s", (int)(oe - o), o);
    step->line = st->line;
    step->col = (int)(o - st->text) + 1;
    const kv_op *op = kv_op_find(step->op);
    if (op == NULL)
        return kv_spec_error(KV_ERR_UNKNOWN_OP, st->file, st->line, step->col, "unknown op '%s' (not in kernels/ops.schema)",
                             step->op);
    const kv_schema *sc = kv_op_schema(op);
    for (int a = 0; a < sc->nargs; a++)
        if (sc->args[a].alias.is_write)
            return PP_ERR(st, o, "%s writes its argument '%s': in-place and out= ops are not allowed in programs", step->op,
                          sc->args[a].name);
    int ntensor_returns = 0;
    for (int r = 0; r < sc->nreturns; r++)
        if (sc->returns[r].type.kind == KV_TYPE_TENSOR && !sc->returns[r].type.is_list) ntensor_returns++;
    if (ntensor_returns == 0 || ntensor_returns != sc->nreturns)
        return PP_ERR(st, o, "%s does not return tensors only: programs chain tensor values", step->op);

    /* Arguments. */
    const char *a = pp_skip_blank(oe);
    if (*a != '(') return PP_ERR(st, a, "expected '(' after the op name");
    a++;
    int positional = 0;
    bool seen_keyword = false;
    bool given[KV_SCHEMA_MAX_ARGS] = { false };
    const char *cur = pp_skip_blank(a);
    if (*cur == ')') {
        cur++;
    } else {
        for (;;) {
            /* One argument: up to ',' or ')' at depth 0. */
            const char *b = cur;
            int depth = 0;
            while (*b && !(depth == 0 && (*b == ',' || *b == ')'))) {
                if (*b == '[' || *b == '(') depth++;
                else if ((*b == ']' || *b == ')') && depth > 0) depth--;
                b++;
            }
            if (*b == '\0') return PP_ERR(st, b, "missing ')'");
            const char *end = b;
            while (end > cur && (end[-1] == ' ' || end[-1] == '\t')) end--;
            const int kn = pp_ident(cur);
            const char *after = pp_skip_blank(cur + kn);
            int ai;
            const char *vstart = cur;
            if (kn > 0 && *after == '=') {
                char kname[KV_SCHEMA_NAME_MAX];
                if (kn >= (int)sizeof kname) return PP_ERR(st, cur, "argument name too long");
                snprintf(kname, sizeof kname, "%.*s", kn, cur);
                ai = kv_schema_arg_index(sc, kname);
                if (ai < 0) return PP_ERR(st, cur, "%s has no argument '%s'", step->op, kname);
                vstart = pp_skip_blank(after + 1);
                seen_keyword = true;
            } else {
                if (seen_keyword) return PP_ERR(st, cur, "a positional argument after a keyword argument");
                if (positional >= sc->nargs)
                    return PP_ERR(st, cur, "%s takes at most %d arguments", step->op, sc->nargs);
                ai = positional++;
            }
            if (given[ai]) return PP_ERR(st, cur, "argument '%s' given twice", sc->args[ai].name);
            given[ai] = true;
            kv_status r = pp_arg(st, &sc->args[ai], vstart, end, &step->args[ai]);
            if (r != KV_OK) return r;
            cur = b + 1;
            if (*b == ')') break;
            cur = pp_skip_blank(cur);
        }
    }
    if (*pp_skip_blank(cur) != '\0') return PP_ERR(st, pp_skip_blank(cur), "unexpected text after ')'");
    for (int i = 0; i < sc->nargs; i++) {
        const kv_arg *arg = &sc->args[i];
        if (given[i] || arg->has_default || arg->type.optional) continue;
        return PP_ERR(st, o, "%s: argument '%s' is required", step->op, arg->name);
    }

    /* The left side, defined only now: a step cannot read its own outputs. */
    const char *l = pp_skip_blank(s);
    for (;;) {
        l = pp_skip_blank(l);
        const int n = pp_ident(l);
        if (n == 0) return PP_ERR(st, l, "expected a value name (or _) before '='");
        if (step->nout >= sc->nreturns)
            return PP_ERR(st, l, "%s returns %d tensor%s", step->op, sc->nreturns, sc->nreturns == 1 ? "" : "s");
        if (n == 1 && l[0] == '_') {
            step->out[step->nout++] = -1;
        } else {
            int v;
            kv_status r = pp_define(st, l, n, &v);
            if (r != KV_OK) return r;
            step->out[step->nout++] = v;
        }
        l = pp_skip_blank(l + n);
        if (l == eq) break;
        if (*l != ',') return PP_ERR(st, l, "expected ',' or '='");
        l++;
    }
    if (step->nout != sc->nreturns)
        return PP_ERR(st, s, "%s returns %d tensor%s: name each (_ drops one)", step->op, sc->nreturns,
                      sc->nreturns == 1 ? "" : "s");
    p->nsteps++;
    return KV_OK;
}

static kv_status pp_line(pp_state *st, char *line) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t' || line[n - 1] == '\r')) line[--n] = '\0';
    st->text = line;
    const char *s = pp_skip_blank(line);
    if (*s == '\0') return KV_OK;
    const int kw = pp_ident(s);
    const char *after = s + kw;
    if (kw > 0 && (*after == ' ' || *after == '\t')) {
        if (kw == 7 && strncmp(s, "program", 7) == 0) return pp_program_line(st, after);
        if (kw == 5 && strncmp(s, "input", 5) == 0) return pp_input_line(st, after);
        if (kw == 6 && strncmp(s, "output", 6) == 0) return pp_output_line(st, after);
        if (kw == 8 && strncmp(s, "backward", 8) == 0) return pp_backward_line(st, after);
    }
    const char *eq = strchr(s, '=');
    const char *paren = strchr(s, '(');
    if (eq == NULL || (paren != NULL && paren < eq))
        return PP_ERR(st, s, "expected 'program NAME', 'input NAME DTYPE SHAPE', 'NAME = OP(ARGS)' or 'output NAME'");
    return pp_step_line(st, s, eq);
}

kv_status kv_program_parse_text(const char *name, const char *text, kv_program **out) {
    *out = NULL;
    kv_program *p = calloc(1, sizeof *p);
    if (p == NULL) return kv_error(KV_ERR_OOM, "%s: out of memory", name);
    snprintf(p->path, sizeof p->path, "%s", name);
    p->backward = -1;
    pp_state st = { name, 0, "", p };
    kv_status r = KV_OK;
    const char *s = text;
    char line[1024];
    while (r == KV_OK && *s) {
        const char *e = strchr(s, '\n');
        const size_t len = e ? (size_t)(e - s) : strlen(s);
        st.line++;
        st.text = s;
        if (len >= sizeof line) {
            r = kv_spec_error(KV_ERR_INVALID_ARG, name, st.line, 1, "line too long (at most %d characters)",
                              (int)sizeof line - 1);
            break;
        }
        memcpy(line, s, len);
        line[len] = '\0';
        r = pp_line(&st, line);
        s = e ? e + 1 : s + len;
    }
    if (r == KV_OK && p->name[0] == '\0') r = kv_spec_error(KV_ERR_INVALID_ARG, name, 1, 1, "missing 'program NAME'");
    if (r == KV_OK && p->nsteps == 0)
        r = kv_spec_error(KV_ERR_INVALID_ARG, name, st.line > 0 ? st.line : 1, 1,
                          "the program has no steps (a program that runs nothing proves nothing)");
    if (r == KV_OK && p->noutputs == 0)
        r = kv_spec_error(KV_ERR_INVALID_ARG, name, st.line > 0 ? st.line : 1, 1, "the program has no 'output' line");
    if (r != KV_OK) {
        free(p);
        return r;
    }
    *out = p;
    return KV_OK;
}

kv_status kv_program_parse_file(const char *path, kv_program **out) {
    *out = NULL;
    /* A program is text: a FIFO or device (/dev/zero) would be read until
     * the size limit or block, so only regular files are read, as for
     * case files. stat first: opening a FIFO would block. */
    struct stat sb;
    if (stat(path, &sb) != 0) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot open the program", path);
    if (!S_ISREG(sb.st_mode))
        return kv_error(KV_ERR_INVALID_ARG, "%s: not a regular file (a program must be one)", path);
    FILE *f = fopen(path, "rb");
    if (f == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot open the program", path);
    char *buf = malloc(KV_PROG_MAX_FILE + 1);
    if (buf == NULL) {
        fclose(f);
        return kv_error(KV_ERR_OOM, "%s: out of memory", path);
    }
    const size_t n = fread(buf, 1, KV_PROG_MAX_FILE + 1, f);
    fclose(f);
    if (n > KV_PROG_MAX_FILE) {
        free(buf);
        return kv_error(KV_ERR_INVALID_ARG, "%s: larger than %d bytes", path, KV_PROG_MAX_FILE);
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n) != NULL) {
        free(buf);
        return kv_error(KV_ERR_INVALID_ARG, "%s: contains a NUL byte", path);
    }
    kv_status r = kv_program_parse_text(path, buf, out);
    free(buf);
    return r;
}

void kv_program_free(kv_program *p) { free(p); }
