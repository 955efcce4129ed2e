/* The option table and the check/apply/finish callbacks of its rows; the
 * format callbacks live in case_id.c. See runner/spec.h for how to add a
 * row. */
#include "runner/case/case_options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kv/device.h"
#include "kv/dispatch.h"
#include "runner/case/case_args.h"
#include "runner/case/grammar.h"
#include "runner/case/suggest.h"
#include "runner/program/program.h"

/* ---- defaults ---- */

void kv_case_init(kv_case *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) {
        c->dtypes[i] = KV_F32;
        c->layouts[i] = KV_LAYOUT_CONTIGUOUS;
        c->input_arg[i] = -1;
    }
    c->fill = KV_FILL_REAL;
    c->seed = 0;
    c->device = KV_DEVICE_CPU0;
    c->checks = 0;
    c->tol = (kv_tolerance){ KV_TOL_DEFAULT, 0.0 };
    c->expect = KV_OK;
}

/* ---- helpers ---- */

static const kv_spec_alt *kv_chosen(const kv_option_ctx *ctx, const int *choice, int axis) {
    return &ctx->opt->axes[axis].alts[choice[axis]];
}

static const char *kv_op_label(const kv_option_ctx *ctx) {
    return ctx->schema ? ctx->schema->full_name : "?";
}

#define KV_OPT_ERR(ctx, col, ...) \
    kv_spec_error(KV_ERR_INVALID_ARG, (ctx)->opt->file, (ctx)->opt->line, (col), __VA_ARGS__)

/* Splits a per-input value at ':' into at most KV_CASE_MAX_INPUTS pieces,
 * each NUL-terminated in `store`. */
typedef struct kv_pieces {
    int n;
    char text[KV_CASE_MAX_INPUTS][KV_CASE_TEXT_MAX];
    int off[KV_CASE_MAX_INPUTS];
    /* A '/' between pieces (an op with two Tensor[] arguments, the foreach
     * ops): the index of the first piece of the second list, -1 when
     * there is none. Either list may be empty ("/4", "4/"). */
    int list_break;
} kv_pieces;

/* The '/' of a two-list value at t[i] (start: where the current piece
 * began): records the break; an empty piece is allowed only at the ends
 * of the value, where it is an empty list. */
static kv_status kv_split_list_break(const kv_option_ctx *ctx, const kv_spec_alt *alt, const char *what, int i,
                                     int start, kv_pieces *p) {
    if (p->list_break >= 0)
        return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, i), "--%s: a second '/' (at most two Tensor[] lists)", what);
    if (i == start && p->n > 0)
        return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, i), "--%s: empty value for an input", what);
    p->list_break = p->n + (i > start ? 1 : 0);
    return KV_OK;
}

static kv_status kv_split_inputs(const kv_option_ctx *ctx, const kv_spec_alt *alt, const char *what,
                                 kv_pieces *p) {
    const char *t = alt->text;
    const int len = (int)strlen(t);
    p->n = 0;
    p->list_break = -1;
    int start = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && t[i] != ':' && t[i] != '/') continue;
        if (i < len && t[i] == '/') {
            kv_status st = kv_split_list_break(ctx, alt, what, i, start, p);
            if (st != KV_OK) return st;
            if (i == start) { /* an empty first list */
                start = i + 1;
                continue;
            }
        } else if (i == len && i == start && p->list_break == p->n && p->n > 0) {
            break; /* an empty second list: "4/" */
        }
        if (p->n == KV_CASE_MAX_INPUTS) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start),
                              "--%s: more than %d inputs", what, KV_CASE_MAX_INPUTS);
        }
        if (i == start) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, i), "--%s: empty value for an input", what);
        }
        if (i - start >= KV_CASE_TEXT_MAX) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start), "--%s: value too long", what);
        }
        memcpy(p->text[p->n], t + start, (size_t)(i - start));
        p->text[p->n][i - start] = '\0';
        p->off[p->n] = start;
        p->n++;
        start = i + 1;
    }
    return KV_OK;
}

static void kv_dtype_names(char *buf, int cap) {
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < (int)KV_DTYPE_COUNT && n < cap; i++) {
        n += snprintf(buf + n, (size_t)(cap - n), "%s%s", i ? ", " : "", kv_dtype_name((kv_dtype)i));
    }
}

void kv_case_canonicalize_inputs(kv_case *c) {
    while (c->ninputs > 0 && c->absent[c->ninputs - 1]) c->ninputs--;
    int first = -1;
    for (int i = 0; i < c->ninputs && first < 0; i++) {
        if (!c->absent[i]) first = i;
    }
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) {
        if (i < c->ninputs && !c->absent[i]) continue;
        c->dtypes[i] = first >= 0 ? c->dtypes[first] : KV_F32;
        c->layouts[i] = KV_LAYOUT_CONTIGUOUS;
        memset(&c->shapes[i], 0, sizeof c->shapes[i]);
        if (i >= c->ninputs) {
            c->absent[i] = false;
            c->input_arg[i] = -1;
        }
    }
}

/* ---- op ---- */

static kv_status kv_op_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    if (strlen(alt->text) >= KV_CASE_TEXT_MAX) {
        return KV_OPT_ERR(ctx, alt->cols[0], "--op: name too long");
    }
    if (kv_op_find(alt->text) != NULL) return KV_OK;
    /* "add" for "add.Tensor": list the overloads of that name. */
    char hint[256] = "";
    int n = 0;
    const size_t len = strlen(alt->text);
    for (int i = 0; i < kv_op_count() && n < (int)sizeof hint - 1; i++) {
        const kv_schema *s = kv_op_schema(kv_op_at(i));
        if (strcmp(s->name, alt->text) != 0 &&
            !(strncmp(s->full_name, alt->text, len) == 0 && s->full_name[len] == '.')) {
            continue;
        }
        n += snprintf(hint + n, sizeof hint - (size_t)n, "%s%s", n ? ", " : " (did you mean ",
                      s->full_name);
    }
    /* No overload of that name: the ops within a few edits ("ad.Tensor"
     * for "add.Tensor"), the nearest ones only. */
    const bool overloads = n > 0;
    int best = KV_SUGGEST_MAX_EDITS + 1;
    for (int i = 0; !overloads && i < kv_op_count(); i++) {
        const int d = kv_suggest_distance(alt->text, kv_op_schema(kv_op_at(i))->full_name);
        if (d < best) best = d;
    }
    for (int i = 0, shown = 0; !overloads && best <= KV_SUGGEST_MAX_EDITS && i < kv_op_count() && shown < 3; i++) {
        const char *full = kv_op_schema(kv_op_at(i))->full_name;
        if (kv_suggest_distance(alt->text, full) != best) continue;
        shown++;
        n += snprintf(hint + n, sizeof hint - (size_t)n, "%s%s", n ? ", " : " (did you mean ", full);
    }
    if (n > 0 && n < (int)sizeof hint - 1) snprintf(hint + n, sizeof hint - (size_t)n, "?)");
    return kv_spec_error(KV_ERR_UNKNOWN_OP, ctx->opt->file, ctx->opt->line, alt->cols[0],
                         "--op: unknown op '%s'%s", alt->text, hint);
}

static kv_status kv_op_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    snprintf(c->op, sizeof c->op, "%s", kv_chosen(ctx, choice, 0)->text);
    return KV_OK;
}

/* ---- program ---- */

static kv_status kv_program_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    if (alt->text[0] == '\0') return KV_OPT_ERR(ctx, alt->cols[0], "--program: empty path");
    if (strlen(alt->text) >= 200) return KV_OPT_ERR(ctx, alt->cols[0], "--program: path too long");
    return KV_OK;
}

/* The path relative to the case file's directory, as --batch does, so a
 * case file and its programs move together. Parsing here (not when the
 * case runs) makes a broken program a FILE:LINE:COL error before anything
 * runs (kvrun exit 2). */
static kv_status kv_program_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_spec_alt *alt = kv_chosen(ctx, choice, 0);
    const char *file = ctx->opt->file;
    const char *slash = strrchr(file, '/');
    if (alt->text[0] == '/' || strcmp(file, KV_GRAMMAR_CMDLINE) == 0 || slash == NULL)
        snprintf(c->program, sizeof c->program, "%s", alt->text);
    else
        snprintf(c->program, sizeof c->program, "%.*s/%s", (int)(slash - file), file, alt->text);
    struct stat sb;
    if (stat(c->program, &sb) != 0) return KV_OPT_ERR(ctx, alt->cols[0], "--program: cannot open '%s'", c->program);
    if (!S_ISREG(sb.st_mode))
        return KV_OPT_ERR(ctx, alt->cols[0], "--program: '%s' is not a regular file (a program must be one)", c->program);
    kv_program *p = NULL;
    kv_status st = kv_program_parse_file(c->program, &p);
    if (st == KV_OK) st = kv_program_check_loss(p);
    if (st != KV_OK) {
        kv_program_free(p);
        return st;
    }
    snprintf(c->op, sizeof c->op, "program:%s", p->name);
    kv_program_free(p);
    return KV_OK;
}

static int kv_program_format(const kv_case *c, const kv_schema *s, kv_text_form form, char *buf, int cap) {
    (void)s;
    (void)form;
    if (c->program[0] == '\0') {
        if (cap > 0) buf[0] = '\0';
        return 0;
    }
    return snprintf(buf, (size_t)cap, "%s", c->program);
}

/* ---- dtype ---- */

static kv_status kv_parse_dtypes(const kv_option_ctx *ctx, const kv_spec_alt *alt, kv_dtype *out,
                                 int *n) {
    kv_pieces p;
    kv_status st = kv_split_inputs(ctx, alt, "dtype", &p);
    if (st != KV_OK) return st;
    for (int i = 0; i < p.n; i++) {
        if (kv_dtype_parse(p.text[i], &out[i]) != 0) {
            char names[128];
            kv_dtype_names(names, sizeof names);
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, p.off[i]),
                              "--dtype: unknown dtype '%s' (dtypes: %s)", p.text[i], names);
        }
    }
    *n = p.n;
    return KV_OK;
}

static kv_status kv_dtype_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_dtype d[KV_CASE_MAX_INPUTS];
    int n;
    return kv_parse_dtypes(ctx, alt, d, &n);
}

/* The per-input rule shared by dtype= and layout=: one value for every
 * input or one per input. A factory has no inputs: inherited values are
 * ignored there, values written on its own line are an error. */
static kv_status kv_per_input_count(const kv_case *c, const kv_option_ctx *ctx,
                                    const kv_spec_alt *alt, const char *what, int n, bool *skip) {
    *skip = false;
    if (c->ninputs == 0) {
        /* No shape yet on an op with tensors: the shape row reports that. */
        if (ctx->inherited || !kv_schema_is_factory(ctx->schema)) {
            *skip = true;
            return KV_OK;
        }
        return KV_OPT_ERR(ctx, ctx->opt->col, "%s: --%s does not apply: the op has no tensor inputs",
                          kv_op_label(ctx), what);
    }
    if (n != 1 && n != c->ninputs) {
        char names[256];
        kv_schema_tensor_names(ctx->schema, names, sizeof names);
        return KV_OPT_ERR(ctx, alt->cols[0],
                          "%s: --%s gives %d values for %d tensor inputs (%s); give 1 or %d",
                          kv_op_label(ctx), what, n, c->ninputs, names, c->ninputs);
    }
    return KV_OK;
}

static kv_status kv_dtype_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_spec_alt *alt = kv_chosen(ctx, choice, 0);
    kv_dtype d[KV_CASE_MAX_INPUTS];
    int n;
    bool skip;
    kv_status st = kv_parse_dtypes(ctx, alt, d, &n);
    if (st == KV_OK) st = kv_per_input_count(c, ctx, alt, "dtype", n, &skip);
    if (st != KV_OK || skip) return st;
    for (int i = 0; i < c->ninputs; i++) c->dtypes[i] = d[n == 1 ? 0 : i];
    return KV_OK;
}

/* ---- shape ---- */

static kv_status kv_parse_shapes(const kv_option_ctx *ctx, const kv_spec_alt *alt, kv_shape *out,
                                 bool *is_none, int *n, int *list_break) {
    kv_pieces p;
    kv_status st = kv_split_inputs(ctx, alt, "shape", &p);
    if (st != KV_OK) return st;
    *list_break = p.list_break;
    for (int i = 0; i < p.n; i++) {
        is_none[i] = strcmp(p.text[i], "none") == 0;
        if (is_none[i]) {
            memset(&out[i], 0, sizeof out[i]);
            continue;
        }
        char why[128];
        int bad = 0;
        if (kv_case_shape_parse(p.text[i], &out[i], why, sizeof why, &bad) != 0) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, p.off[i] + bad), "--shape: %s", why);
        }
    }
    *n = p.n;
    return KV_OK;
}

static kv_status kv_shape_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_shape s[KV_CASE_MAX_INPUTS];
    bool none[KV_CASE_MAX_INPUTS];
    int n, list_break;
    return kv_parse_shapes(ctx, alt, s, none, &n, &list_break);
}

static kv_status kv_shape_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_spec_alt *alt = kv_chosen(ctx, choice, 0);
    kv_shape s[KV_CASE_MAX_INPUTS];
    bool none[KV_CASE_MAX_INPUTS];
    int n, list_break;
    kv_status st = kv_parse_shapes(ctx, alt, s, none, &n, &list_break);
    if (st != KV_OK) return st;
    if (kv_schema_is_factory(ctx->schema)) {
        if (ctx->inherited) return KV_OK;
        return KV_OPT_ERR(ctx, ctx->opt->col,
                          "%s: a factory takes no --shape (give sizes in --args, e.g. --args=size=[2,3])",
                          kv_op_label(ctx));
    }
    kv_input_plan plan;
    char why[320];
    if (kv_input_plan_make_lists(ctx->schema, n, none, list_break, &plan, why, sizeof why) != 0) {
        return KV_OPT_ERR(ctx, alt->cols[0], "%s: --shape: %s", kv_op_label(ctx), why);
    }
    c->ninputs = plan.n;
    for (int i = 0; i < plan.n; i++) {
        c->input_arg[i] = plan.arg[i];
        c->absent[i] = plan.absent[i];
        if (!plan.absent[i]) c->shapes[i] = s[plan.src[i]];
    }
    return KV_OK;
}

static kv_status kv_shape_finish(kv_case *c, const kv_option_ctx *ctx) {
    if (c->ninputs > 0 || kv_schema_is_factory(ctx->schema)) return KV_OK;
    const kv_spec_option *op = ctx->spec->opts[kv_case_option_op_row()];
    char names[256];
    kv_schema_tensor_names(ctx->schema, names, sizeof names);
    return kv_spec_error(KV_ERR_INVALID_ARG, op->file, op->line, op->col,
                         "%s: needs --shape= for its tensor inputs (%s)", kv_op_label(ctx), names);
}

/* ---- layout ---- */

static kv_status kv_parse_layouts(const kv_option_ctx *ctx, const kv_spec_alt *alt, kv_layout *out,
                                  int *n) {
    kv_pieces p;
    kv_status st = kv_split_inputs(ctx, alt, "layout", &p);
    if (st != KV_OK) return st;
    for (int i = 0; i < p.n; i++) {
        if (kv_layout_parse(p.text[i], &out[i]) != 0) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, p.off[i]),
                              "--layout: unknown layout '%s' (layouts: c, t, s, o, b, w or contiguous, "
                              "transposed, strided, offset, broadcast, windowed)",
                              p.text[i]);
        }
    }
    *n = p.n;
    return KV_OK;
}

static kv_status kv_layout_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_layout l[KV_CASE_MAX_INPUTS];
    int n;
    return kv_parse_layouts(ctx, alt, l, &n);
}

static kv_status kv_layout_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_spec_alt *alt = kv_chosen(ctx, choice, 0);
    kv_layout l[KV_CASE_MAX_INPUTS];
    int n;
    bool skip;
    kv_status st = kv_parse_layouts(ctx, alt, l, &n);
    if (st == KV_OK) st = kv_per_input_count(c, ctx, alt, "layout", n, &skip);
    if (st != KV_OK || skip) return st;
    for (int i = 0; i < c->ninputs; i++) c->layouts[i] = l[n == 1 ? 0 : i];
    return KV_OK;
}

/* ---- args ---- */

static kv_status kv_args_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_schema *s = ctx->schema;
    for (int a = 0; a < ctx->opt->naxes; a++) {
        const kv_spec_axis *ax = &ctx->opt->axes[a];
        const kv_spec_alt *alt = kv_chosen(ctx, choice, a);
        const int idx = kv_schema_arg_index(s, ax->label);
        if (idx < 0) {
            char names[256] = "";
            int n = 0;
            for (int i = 0; i < s->nargs && n < (int)sizeof names; i++) {
                if (s->args[i].type.kind == KV_TYPE_TENSOR) continue;
                n += snprintf(names + n, sizeof names - (size_t)n, "%s%s", n ? ", " : "", s->args[i].name);
            }
            if (n == 0) {
                return KV_OPT_ERR(ctx, ax->label_col,
                                  "%s: argument '%s': not in the schema (the op has no non-tensor arguments)",
                                  s->full_name, ax->label);
            }
            return KV_OPT_ERR(ctx, ax->label_col, "%s: argument '%s': not in the schema (arguments: %s)",
                              s->full_name, ax->label, names);
        }
        const kv_arg *arg = &s->args[idx];
        if (arg->type.kind == KV_TYPE_TENSOR) {
            return KV_OPT_ERR(ctx, ax->label_col,
                              "%s: argument '%s': is a tensor; give its shape in --shape",
                              s->full_name, ax->label);
        }
        if (c->nargs == KV_CASE_MAX_ARGS) {
            return KV_OPT_ERR(ctx, ax->label_col, "%s: more than %d arguments", s->full_name,
                              KV_CASE_MAX_ARGS);
        }
        char why[200];
        int bad = 0;
        kv_case_arg *ca = &c->args[c->nargs];
        if (kv_case_arg_canonical(arg, alt->text, ca->value, sizeof ca->value, why, sizeof why, &bad) != 0) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, bad), "%s: argument '%s': %s", s->full_name,
                              ax->label, why);
        }
        snprintf(ca->name, sizeof ca->name, "%s", arg->name);
        c->nargs++;
    }
    return KV_OK;
}

/* Puts args in schema order, drops those equal to their default (so one
 * problem has one ID) and requires every argument without a default. */
static kv_status kv_args_finish(kv_case *c, const kv_option_ctx *ctx) {
    const kv_schema *s = ctx->schema;
    kv_case_arg sorted[KV_CASE_MAX_ARGS];
    int n = 0;
    for (int i = 0; i < s->nargs; i++) {
        const kv_arg *a = &s->args[i];
        if (a->type.kind == KV_TYPE_TENSOR) continue;
        const char *v = kv_case_arg_value(c, a->name);
        if (v == NULL) {
            if (a->has_default) continue;
            const kv_spec_option *op = ctx->spec->opts[kv_case_option_op_row()];
            return kv_spec_error(KV_ERR_INVALID_ARG, op->file, op->line, op->col,
                                 "%s: argument '%s': has no default; give it with --args=%s=...",
                                 s->full_name, a->name, a->name);
        }
        char def[KV_CASE_TEXT_MAX];
        if (a->has_default && kv_case_arg_default_text(a, def, sizeof def) >= 0 && strcmp(def, v) == 0) {
            continue;
        }
        snprintf(sorted[n].name, sizeof sorted[n].name, "%s", a->name);
        snprintf(sorted[n].value, sizeof sorted[n].value, "%s", v);
        n++;
    }
    memcpy(c->args, sorted, (size_t)n * sizeof sorted[0]);
    c->nargs = n;
    return KV_OK;
}

/* ---- fill, seed, device ---- */

static kv_status kv_fill_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_fill f;
    if (kv_fill_parse(alt->text, &f) == 0) return KV_OK;
    return KV_OPT_ERR(ctx, alt->cols[0], "--fill: unknown fill '%s' (fills: exact, real, special, sweep, shifted)", alt->text);
}

static kv_status kv_fill_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    kv_fill_parse(kv_chosen(ctx, choice, 0)->text, &c->fill);
    return KV_OK;
}

static kv_status kv_seed_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    uint64_t v;
    if (kv_case_seed_parse(alt->text, &v) == 0) return KV_OK;
    return KV_OPT_ERR(ctx, alt->cols[0], "--seed: expected an unsigned 64-bit decimal, got '%s'", alt->text);
}

static kv_status kv_seed_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    kv_case_seed_parse(kv_chosen(ctx, choice, 0)->text, &c->seed);
    return KV_OK;
}

static kv_status kv_device_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_device d;
    if (kv_device_parse(alt->text, &d) == 0) return KV_OK;
    return KV_OPT_ERR(ctx, alt->cols[0],
                      "--device: unknown device '%s' (devices: cpu, cuda, sim, accel, plugin0..3, "
                      "optionally :INDEX)",
                      alt->text);
}

static kv_status kv_device_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    kv_device_parse(kv_chosen(ctx, choice, 0)->text, &c->device);
    return KV_OK;
}

/* ---- check (a set), tol, expect ---- */

static kv_status kv_parse_checks(const kv_option_ctx *ctx, const kv_spec_alt *alt, unsigned *out) {
    const char *t = alt->text;
    const int len = (int)strlen(t);
    *out = 0;
    int start = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && t[i] != ',') continue;
        char name[32];
        kv_check_kind k;
        const int n = i - start;
        if (n == 0) return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, i), "--check: empty check name");
        snprintf(name, sizeof name, "%.*s", n, t + start);
        if (n >= (int)sizeof name || kv_check_kind_parse(name, &k) != 0) {
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start),
                              "--check: unknown check '%.*s' (checks: golden, variants, memory, error, lazy, grad, fastpath, tune)",
                              n, t + start);
        }
        *out |= 1u << k;
        start = i + 1;
    }
    return KV_OK;
}

static kv_status kv_check_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    unsigned set;
    return kv_parse_checks(ctx, alt, &set);
}

static kv_status kv_check_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    return kv_parse_checks(ctx, kv_chosen(ctx, choice, 0), &c->checks);
}

static kv_status kv_check_finish(kv_case *c, const kv_option_ctx *ctx) {
    if (ctx->opt == NULL) {
        c->checks = kv_case_default_checks_for(c);
        return KV_OK;
    }
    /* What the accel device is for: it runs on every accel case. */
    if (c->device.type == KV_DEVICE_ACCEL) c->checks |= 1u << KV_CHECK_FASTPATH;
    /* lazy proves lazy bits and modes: on a plain case it would prove nothing. */
    if ((c->checks & (1u << KV_CHECK_LAZY)) && !kv_case_has_lazy_or_mode(c)) {
        return KV_OPT_ERR(ctx, ctx->opt->col, "--check=lazy needs --lazy= or --mode= (there is no path to prove)");
    }
    if (c->checks & (1u << KV_CHECK_GRAD)) {
        char why[320];
        if (c->expect != KV_OK) {
            return KV_OPT_ERR(ctx, ctx->opt->col, "--check=grad cannot run on a case with --expect=%s",
                              kv_status_name(c->expect));
        }
        if (kv_case_grad_why_not(c, ctx->op, why, sizeof why) != 0) {
            return KV_OPT_ERR(ctx, ctx->opt->col, "--check=grad: %s", why);
        }
    }
    /* error with expect=pass is allowed: every path must raise nothing
     * (outputs that cannot be compared, such as empty's). Comparing the
     * output of a case that must fail is not. */
    const unsigned data = (1u << KV_CHECK_GOLDEN) | (1u << KV_CHECK_VARIANTS);
    if ((c->checks & data) && c->expect != KV_OK) {
        return KV_OPT_ERR(ctx, ctx->opt->col,
                          "--check=golden/variants cannot run on a case with --expect=%s (it has no "
                          "output); use error and memory",
                          kv_status_name(c->expect));
    }
    return KV_OK;
}

static kv_status kv_tol_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_tolerance t;
    if (kv_tolerance_parse(alt->text, &t) == 0) return KV_OK;
    return KV_OPT_ERR(ctx, alt->cols[0],
                      "--tol: expected bitwise, ulp:N, abs:X or rel:X (N a count, X >= 0), got '%s'",
                      alt->text);
}

static kv_status kv_tol_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    kv_tolerance_parse(kv_chosen(ctx, choice, 0)->text, &c->tol);
    return KV_OK;
}

int kv_case_expect_parse(const char *text, kv_status *out) {
    if (strcmp(text, "pass") == 0) {
        *out = KV_OK;
        return 0;
    }
    return kv_status_parse(text, out);
}

static kv_status kv_expect_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    kv_status s;
    if (kv_case_expect_parse(alt->text, &s) == 0) return KV_OK;
    char names[320];
    int n = snprintf(names, sizeof names, "pass");
    for (int i = 1; i < (int)KV_STATUS_COUNT && n < (int)sizeof names; i++) {
        n += snprintf(names + n, sizeof names - (size_t)n, ", %s", kv_status_name((kv_status)i));
    }
    return KV_OPT_ERR(ctx, alt->cols[0], "--expect: unknown outcome '%s' (%s)", alt->text, names);
}

static kv_status kv_expect_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    kv_case_expect_parse(kv_chosen(ctx, choice, 0)->text, &c->expect);
    return KV_OK;
}

/* ---- the table ---- */

#define KV_ID_GOLDEN_REPRO (KV_TEXT_IN_ID | KV_TEXT_IN_GOLDEN | KV_TEXT_IN_REPRO)
#define KV_ID_REPRO (KV_TEXT_IN_ID | KV_TEXT_IN_REPRO)

/* Row order = key order in case IDs = expansion order (first varies slowest).
 * New keys (lazy=, mode=) go after device, in the order they should print. */
const kv_option_row kv_case_options[] = {
    { "op", KV_SPLIT_LIST, 0, 0, kv_op_check, kv_op_apply, NULL, NULL },
    /* A program case instead of an op (runner/program/program.h). Not in
     * the golden key: the op text "program:NAME" is, so the goldens do not
     * depend on where the suite is run from (names are unique in cases/). */
    { "program", KV_SPLIT_LIST, 0, KV_ID_REPRO, kv_program_check, kv_program_apply, NULL, kv_program_format },
    { "dtype", KV_SPLIT_LIST, 2, KV_ID_GOLDEN_REPRO, kv_dtype_check, kv_dtype_apply, NULL,
      kv_case_format_dtype },
    { "shape", KV_SPLIT_LIST, 1, KV_ID_GOLDEN_REPRO, kv_shape_check, kv_shape_apply, kv_shape_finish,
      kv_case_format_shape },
    { "layout", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_layout_check, kv_layout_apply, NULL,
      kv_case_format_layout },
    { "args", KV_SPLIT_ARGS, 2, KV_ID_GOLDEN_REPRO, NULL, kv_args_apply, kv_args_finish,
      kv_case_format_args },
    { "fill", KV_SPLIT_LIST, 2, KV_ID_GOLDEN_REPRO, kv_fill_check, kv_fill_apply, NULL,
      kv_case_format_fill },
    { "seed", KV_SPLIT_LIST, 2, KV_ID_GOLDEN_REPRO, kv_seed_check, kv_seed_apply, NULL,
      kv_case_format_seed },
    { "device", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_device_check, kv_device_apply, NULL,
      kv_case_format_device },
    /* How the values are computed, not what they are: not in the golden key. */
    { "lazy", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_case_lazy_check, kv_case_lazy_apply, kv_case_lazy_finish,
      kv_case_format_lazy },
    { "mode", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_case_mode_check, kv_case_mode_apply, NULL, kv_case_format_mode },
    /* Which tensor out= is: an aliased out gives the values of a fresh
     * one (or the expected error), so not in the golden key. */
    { "out", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_case_out_check, kv_case_out_apply, kv_case_out_finish,
      kv_case_format_out },
    /* In the ID (when not the default) but not in the golden key: they
     * change the verdict, not the values, so two cases differing only here
     * are two cases (neither is dropped as a duplicate, a baseline can name
     * each) that share one golden, and the stored goldens keep their keys. */
    { "check", KV_SPLIT_WHOLE, 2, KV_ID_REPRO, kv_check_check, kv_check_apply, kv_check_finish,
      kv_case_format_check },
    { "tol", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_tol_check, kv_tol_apply, NULL, kv_case_format_tol },
    { "expect", KV_SPLIT_LIST, 2, KV_ID_REPRO, kv_expect_check, kv_expect_apply, NULL,
      kv_case_format_expect },
};

const int kv_case_option_count = (int)(sizeof kv_case_options / sizeof kv_case_options[0]);

_Static_assert(sizeof kv_case_options / sizeof kv_case_options[0] <= KV_SPEC_MAX_OPTIONS,
               "raise KV_SPEC_MAX_OPTIONS");

int kv_case_option_find(const char *name) {
    for (int i = 0; i < kv_case_option_count; i++) {
        if (strcmp(kv_case_options[i].name, name) == 0) return i;
    }
    return -1;
}

int kv_case_option_op_row(void) { return 0; }

int kv_case_option_program_row(void) { return 1; }
