/* The lazy= and mode= case options (runner/spec.h rows in case_options.c):
 * their names, parse-time checks, application to a case, canonical text,
 * and the default checks of a case that uses them.
 *
 * Spelling. Both options are comma lists of alternatives like every other
 * option; inside one alternative `+` combines:
 *   --lazy=conj@0+neg@1,zero     two cases: input 0 conjugate and input 1
 *                                negative; every eligible input zero
 *   --mode=grad+trace,vmap       two cases: grad and trace together; vmap
 * A lazy item is BIT@INPUT (input index in case order, Tensor[] elements
 * counted one by one) or BIT alone, meaning every eligible input: complex
 * ones for conj, floating and complex ones for neg and zero. Only
 * floating and complex inputs may carry a bit (index and mask inputs keep
 * their domain). `none` alone means no bit / no mode (the plain case).
 * The canonical text lists each bit per input, inputs ascending, bits in
 * the order conj, neg, zero ("conj@0+neg@0+zero@2"), and modes in
 * kv_case_mode order, so one problem has one ID. Neither option is in the
 * golden key: lazy bits and modes change how the values are computed,
 * never what they are. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/autograd.h"
#include "kv/dispatch.h"
#include "runner/case/case_options.h"
#include "runner/program/program.h"

/* ---- names ---- */

static const char *const k_mode_names[KV_MODE_COUNT] = {
    [KV_MODE_GRAD] = "grad",
    [KV_MODE_NO_GRAD] = "no_grad",
    [KV_MODE_AUTOCAST_F16] = "autocast_f16",
    [KV_MODE_AUTOCAST_BF16] = "autocast_bf16",
    [KV_MODE_FUNCTIONALIZE] = "functionalize",
    [KV_MODE_TRACE] = "trace",
    [KV_MODE_VMAP] = "vmap",
};

const char *kv_case_mode_name(kv_case_mode m) {
    return (unsigned)m < KV_MODE_COUNT ? k_mode_names[m] : "?";
}

int kv_case_mode_parse(const char *text, kv_case_mode *out) {
    for (int i = 0; i < KV_MODE_COUNT; i++) {
        if (strcmp(text, k_mode_names[i]) == 0) {
            *out = (kv_case_mode)i;
            return 0;
        }
    }
    return -1;
}

static const unsigned k_lazy_bits[3] = { KV_CASE_LAZY_CONJ, KV_CASE_LAZY_NEG, KV_CASE_LAZY_ZERO };

const char *kv_case_lazy_name(unsigned bit) {
    switch (bit) {
    case KV_CASE_LAZY_CONJ: return "conj";
    case KV_CASE_LAZY_NEG: return "neg";
    case KV_CASE_LAZY_ZERO: return "zero";
    default: return "?";
    }
}

static int lazy_bit_parse(const char *text, int len, unsigned *out) {
    for (int i = 0; i < 3; i++) {
        const char *name = kv_case_lazy_name(k_lazy_bits[i]);
        if ((int)strlen(name) == len && strncmp(text, name, (size_t)len) == 0) {
            *out = k_lazy_bits[i];
            return 0;
        }
    }
    return -1;
}

/* ---- shared helpers ---- */

#define KV_OPT_ERR(ctx, col, ...) \
    kv_spec_error(KV_ERR_INVALID_ARG, (ctx)->opt->file, (ctx)->opt->line, (col), __VA_ARGS__)

static const char *op_label(const kv_option_ctx *ctx) { return ctx->schema ? ctx->schema->full_name : "?"; }

static bool dtype_takes_bits(kv_dtype d) { return kv_dtype_is_floating(d) || kv_dtype_is_complex(d); }

/* "'self'" or "'tensors'[1]" for input i of the case. */
static void input_label(const kv_case *c, const kv_schema *s, int i, char *buf, int cap) {
    const int a = c->input_arg[i];
    if (s == NULL || a < 0 || a >= s->nargs) {
        snprintf(buf, (size_t)cap, "%d", i);
        return;
    }
    if (!s->args[a].type.is_list) {
        snprintf(buf, (size_t)cap, "'%s'", s->args[a].name);
        return;
    }
    int k = 0;
    for (int j = 0; j < i; j++) k += c->input_arg[j] == a;
    snprintf(buf, (size_t)cap, "'%s'[%d]", s->args[a].name, k);
}

/* The inputs with their dtypes, for messages: "0 'self' f32, 1 'other' i64". */
static void input_list(const kv_case *c, const kv_schema *s, char *buf, int cap) {
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->ninputs && n < cap; i++) {
        char l[64];
        input_label(c, s, i, l, sizeof l);
        n += snprintf(buf + n, (size_t)(cap - n), "%s%d %s %s", i ? ", " : "", i, l,
                      c->absent[i] ? "none" : kv_dtype_name(c->dtypes[i]));
    }
}

/* Whether the op's result is a bool that reports tensor metadata (is_conj,
 * is_neg, _is_zerotensor): a lazy bit changes the answer by design. */
static bool returns_bool(const kv_schema *s) {
    return s->nreturns == 1 && s->returns[0].type.kind == KV_TYPE_BOOL;
}

static int first_differentiable_input(const kv_case *c) {
    for (int i = 0; i < c->ninputs; i++)
        if (!c->absent[i] && dtype_takes_bits(c->dtypes[i]) && !(c->lazy[i] & KV_CASE_LAZY_ZERO)) return i;
    return -1;
}

int kv_case_grad_why_not(const kv_case *c, const kv_op *op, char *why, int cap) {
    if (op == NULL) {
        snprintf(why, (size_t)cap, "unknown op '%s'", c->op);
        return -1;
    }
    /* An out= op has no formula: autograd refuses it when an input
     * requires grad (PyTorch's rule), and a mode=grad case of it checks
     * that refusal (--expect=invalid_arg; without it the case fails naming
     * the refusal). */
    if (kv_schema_is_out(kv_op_schema(op))) return 0;
    if (!kv_autograd_has_formula(op)) {
        snprintf(why, (size_t)cap, "%s has no autograd formula%s", kv_op_name(op),
                 kv_autograd_is_nondifferentiable(op) ? " (it is not differentiable)" : "");
        return -1;
    }
    if (first_differentiable_input(c) < 0) {
        char list[256];
        input_list(c, kv_op_schema(op), list, sizeof list);
        snprintf(why, (size_t)cap, "%s: no floating or complex input to differentiate (inputs: %s; zero inputs do not count)",
                 kv_op_name(op), list[0] ? list : "none");
        return -1;
    }
    return 0;
}

/* ---- lazy= ---- */

typedef struct lazy_item {
    unsigned bit;
    int input;      /* -1: every eligible input */
    int off;        /* byte offset in the alternative, for columns */
} lazy_item;

typedef struct lazy_spec {
    bool none;
    int n;
    lazy_item items[3 * KV_CASE_MAX_INPUTS];
} lazy_spec;

static kv_status lazy_parse(const kv_option_ctx *ctx, const kv_spec_alt *alt, lazy_spec *out) {
    const char *t = alt->text;
    const int len = (int)strlen(t);
    memset(out, 0, sizeof *out);
    if (strcmp(t, "none") == 0) {
        out->none = true;
        return KV_OK;
    }
    int start = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && t[i] != '+') continue;
        const int n = i - start;
        if (n == 0) return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, i), "--lazy: empty item (items are BIT or BIT@INPUT joined by '+')");
        const char *item = t + start;
        const char *at = memchr(item, '@', (size_t)n);
        const int name_len = at ? (int)(at - item) : n;
        lazy_item li = { 0, -1, start };
        if (name_len == 4 && strncmp(item, "none", 4) == 0)
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start), "--lazy: 'none' cannot be combined with other items");
        if (lazy_bit_parse(item, name_len, &li.bit) != 0)
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start),
                              "--lazy: unknown lazy bit '%.*s' (bits: conj, neg, zero; or none)", name_len, item);
        if (at) {
            const char *d = at + 1;
            const int dn = n - name_len - 1;
            int v = 0;
            bool ok = dn > 0 && dn <= 2;
            for (int k = 0; k < dn && ok; k++) {
                ok = d[k] >= '0' && d[k] <= '9';
                v = v * 10 + (d[k] - '0');
            }
            if (!ok || v >= KV_CASE_MAX_INPUTS)
                return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start + name_len + 1),
                                  "--lazy: expected an input index 0..%d after '@' in '%.*s'", KV_CASE_MAX_INPUTS - 1,
                                  n, item);
            li.input = v;
        }
        if (out->n == (int)(sizeof out->items / sizeof out->items[0]))
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start), "--lazy: too many items");
        out->items[out->n++] = li;
        start = i + 1;
    }
    return KV_OK;
}

kv_status kv_case_lazy_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    lazy_spec sp;
    return lazy_parse(ctx, alt, &sp);
}

/* Puts one bit on input i, with the rules every bit obeys. */
static kv_status lazy_put(kv_case *c, const kv_option_ctx *ctx, const kv_spec_alt *alt, const lazy_item *li, int i) {
    const kv_schema *s = ctx->schema;
    const char *bit = kv_case_lazy_name(li->bit);
    const int col = kv_spec_alt_col(alt, li->off);
    char l[64];
    input_label(c, s, i, l, sizeof l);
    if (c->lazy[i] & li->bit)
        return KV_OPT_ERR(ctx, col, "%s: --lazy=%s: %s@%d is given twice", op_label(ctx), alt->text, bit, i);
    const unsigned after = c->lazy[i] | li->bit;
    if ((after & KV_CASE_LAZY_ZERO) && after != KV_CASE_LAZY_ZERO)
        return KV_OPT_ERR(ctx, col,
                          "%s: --lazy=%s: input %d (%s): zero replaces the input by a zero tensor and cannot be "
                          "combined with conj or neg",
                          op_label(ctx), alt->text, i, l);
    c->lazy[i] = (unsigned char)after;
    return KV_OK;
}

kv_status kv_case_lazy_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_spec_alt *alt = &ctx->opt->axes[0].alts[choice[0]];
    lazy_spec sp;
    kv_status st = lazy_parse(ctx, alt, &sp);
    if (st != KV_OK || sp.none) return st;
    const kv_schema *s = ctx->schema;
    if (c->ninputs == 0) {
        if (ctx->inherited || !kv_schema_is_factory(s)) return KV_OK; /* no shape yet: the shape row says so */
        return KV_OPT_ERR(ctx, ctx->opt->col, "%s: --lazy does not apply: the op has no tensor inputs", op_label(ctx));
    }
    if (returns_bool(s))
        return KV_OPT_ERR(ctx, ctx->opt->col,
                          "%s: --lazy does not apply: the op reports tensor metadata (a bool), which a lazy bit "
                          "changes by design",
                          op_label(ctx));
    char list[256];
    input_list(c, s, list, sizeof list);
    for (int k = 0; k < sp.n; k++) {
        const lazy_item *li = &sp.items[k];
        const char *bit = kv_case_lazy_name(li->bit);
        const int col = kv_spec_alt_col(alt, li->off);
        if (li->input < 0) {
            int put = 0;
            for (int i = 0; i < c->ninputs; i++) {
                if (c->absent[i] || !dtype_takes_bits(c->dtypes[i])) continue;
                if (li->bit == KV_CASE_LAZY_CONJ && !kv_dtype_is_complex(c->dtypes[i])) continue;
                if ((st = lazy_put(c, ctx, alt, li, i)) != KV_OK) return st;
                put++;
            }
            if (put == 0)
                return KV_OPT_ERR(ctx, col, "%s: --lazy=%s: no input can carry the %s bit (inputs: %s; %s)",
                                  op_label(ctx), alt->text, bit, list,
                                  li->bit == KV_CASE_LAZY_CONJ ? "conj needs a complex input"
                                                               : "bits go on floating and complex inputs");
            continue;
        }
        const int i = li->input;
        if (i >= c->ninputs)
            return KV_OPT_ERR(ctx, col, "%s: --lazy=%s: input %d does not exist (inputs: %s)", op_label(ctx), alt->text,
                              i, list);
        char l[64];
        input_label(c, s, i, l, sizeof l);
        if (c->absent[i])
            return KV_OPT_ERR(ctx, col, "%s: --lazy=%s: input %d (%s) is none", op_label(ctx), alt->text, i, l);
        if (!dtype_takes_bits(c->dtypes[i]))
            return KV_OPT_ERR(ctx, col,
                              "%s: --lazy=%s: input %d (%s) is %s: lazy bits go on floating and complex inputs only",
                              op_label(ctx), alt->text, i, l, kv_dtype_name(c->dtypes[i]));
        if (li->bit == KV_CASE_LAZY_CONJ && !kv_dtype_is_complex(c->dtypes[i]))
            return KV_OPT_ERR(ctx, col, "%s: --lazy=%s: input %d (%s) is %s: the Conjugate bit needs a complex dtype",
                              op_label(ctx), alt->text, i, l, kv_dtype_name(c->dtypes[i]));
        if ((st = lazy_put(c, ctx, alt, li, i)) != KV_OK) return st;
    }
    return KV_OK;
}

/* Writing to a ZeroTensor is an error by design: such a case must say so. */
kv_status kv_case_lazy_finish(kv_case *c, const kv_option_ctx *ctx) {
    if (ctx->opt == NULL || c->expect != KV_OK) return KV_OK;
    const kv_schema *s = ctx->schema;
    for (int i = 0; i < c->ninputs; i++) {
        const int a = c->input_arg[i];
        if (!(c->lazy[i] & KV_CASE_LAZY_ZERO) || a < 0 || !s->args[a].alias.is_write) continue;
        char l[64];
        input_label(c, s, i, l, sizeof l);
        return KV_OPT_ERR(ctx, ctx->opt->col,
                          "%s: --lazy=zero@%d: the op writes input %d (%s), and writing to a ZeroTensor is an error: "
                          "add --expect=invalid_arg",
                          op_label(ctx), i, i, l);
    }
    return KV_OK;
}

int kv_case_format_lazy(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    char tmp[KV_CASE_MAX_INPUTS * 3 * 12];
    int n = 0;
    tmp[0] = '\0';
    for (int i = 0; i < c->ninputs && i < KV_CASE_MAX_INPUTS; i++) {
        for (int b = 0; b < 3; b++) {
            if (!(c->lazy[i] & k_lazy_bits[b])) continue;
            n += snprintf(tmp + n, sizeof tmp - (size_t)n, "%s%s@%d", n ? "+" : "", kv_case_lazy_name(k_lazy_bits[b]), i);
        }
    }
    if (cap > 0) snprintf(buf, (size_t)cap, "%s", tmp);
    return n;
}

/* ---- mode= ---- */

static kv_status mode_parse(const kv_option_ctx *ctx, const kv_spec_alt *alt, unsigned *out) {
    const char *t = alt->text;
    const int len = (int)strlen(t);
    *out = 0;
    if (strcmp(t, "none") == 0) return KV_OK;
    int start = 0;
    for (int i = 0; i <= len; i++) {
        if (i < len && t[i] != '+') continue;
        const int n = i - start;
        char name[32];
        kv_case_mode m;
        if (n == 0) return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, i), "--mode: empty item (modes are joined by '+')");
        snprintf(name, sizeof name, "%.*s", n, t + start);
        if (strcmp(name, "none") == 0)
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start), "--mode: 'none' cannot be combined with other modes");
        if (strcmp(name, "perf") == 0)
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start),
                              "--mode: 'perf' is not a case mode: it is kvrun's runner flag, given exactly as "
                              "--mode=perf on the command line (kvrun --mode=perf FILE...), never in a case line");
        if (n >= (int)sizeof name || kv_case_mode_parse(name, &m) != 0)
            return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start),
                              "--mode: unknown mode '%.*s' (modes: grad, no_grad, autocast_f16, autocast_bf16, "
                              "functionalize, trace, vmap; or none)",
                              n, t + start);
        if (*out & (1u << m)) return KV_OPT_ERR(ctx, kv_spec_alt_col(alt, start), "--mode: '%s' is given twice", name);
        *out |= 1u << m;
        start = i + 1;
    }
    const unsigned grads = (1u << KV_MODE_GRAD) | (1u << KV_MODE_NO_GRAD);
    const unsigned casts = (1u << KV_MODE_AUTOCAST_F16) | (1u << KV_MODE_AUTOCAST_BF16);
    if ((*out & grads) == grads)
        return KV_OPT_ERR(ctx, alt->cols[0], "--mode=%s: grad and no_grad contradict each other", t);
    if ((*out & casts) == casts)
        return KV_OPT_ERR(ctx, alt->cols[0], "--mode=%s: one autocast dtype at a time (autocast_f16 or autocast_bf16)", t);
    return KV_OK;
}

kv_status kv_case_mode_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    unsigned m;
    return mode_parse(ctx, alt, &m);
}

/* What a program line refuses, by what the program does with a gradient:
 *   no_grad on a program with `backward`: the steps record no graph, so
 *     there is nothing to run backward through;
 *   vmap with another mode on a program with `backward`: per-sample
 *     gradients are functorch's vmap(grad(f)), a grad transform kvsuite
 *     does not have: its Batched key sits above Autograd (legacy
 *     batching), so autograd records the batched calls on the physical
 *     tensors and backward of one loss would need a loss per sample.
 * vmap with grad, no_grad, autocast, functionalize or trace on a program
 * without `backward` is meaningful and runs: each step batched under
 * the modes (functorch composes vmap with all of them). */
static kv_status program_modes_check(const kv_case *c, const kv_option_ctx *ctx, const kv_spec_alt *alt, unsigned m) {
    if (!(m & (1u << KV_MODE_NO_GRAD)) && !((m & (1u << KV_MODE_VMAP)) && m != (1u << KV_MODE_VMAP))) return KV_OK;
    kv_program *p = NULL;
    /* The program parsed when --program= was applied: a second parse
     * cannot fail differently. */
    kv_status st = kv_program_parse_file(c->program, &p);
    if (st != KV_OK) return st;
    const bool backward = p->backward >= 0;
    char loss[KV_PROG_NAME_MAX];
    snprintf(loss, sizeof loss, "%s", backward ? p->value_names[p->backward] : "");
    kv_program_free(p);
    if (!backward) return KV_OK;
    if (m & (1u << KV_MODE_NO_GRAD))
        return KV_OPT_ERR(ctx, alt->cols[0],
                          "--mode=%s: the program runs 'backward %s', and under no_grad its steps record no graph to "
                          "run it through",
                          alt->text, loss);
    return KV_OPT_ERR(ctx, alt->cols[0],
                      "--mode=%s: the program runs 'backward %s': vmap with another mode batches the forward steps "
                      "only; per-sample gradients (functorch's vmap(grad(f))) need a grad transform kvsuite does not "
                      "have (its Batched key sits above Autograd)",
                      alt->text, loss);
}

kv_status kv_case_mode_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    const kv_spec_alt *alt = &ctx->opt->axes[0].alts[choice[0]];
    unsigned m;
    kv_status st = mode_parse(ctx, alt, &m);
    if (st != KV_OK || m == 0) return st;
    if (c->program[0] != '\0') {
        /* A program case (runner/program/program.h): its accel free runs
         * and program:modes run under the modes; vmap batches the whole
         * program (check_program_vmap.c) with the other modes inside it. */
        if ((st = program_modes_check(c, ctx, alt, m)) != KV_OK) return st;
        c->modes = m;
        return KV_OK;
    }
    const kv_schema *s = ctx->schema;
    if (c->ninputs == 0) {
        if (ctx->inherited || !kv_schema_is_factory(s)) return KV_OK;
        return KV_OPT_ERR(ctx, ctx->opt->col, "%s: --mode does not apply: the op has no tensor inputs", op_label(ctx));
    }
    char why[320];
    if ((m & (1u << KV_MODE_GRAD)) && kv_case_grad_why_not(c, ctx->op, why, sizeof why) != 0)
        return KV_OPT_ERR(ctx, alt->cols[0], "--mode=%s: %s", alt->text, why);
    if ((m & (1u << KV_MODE_NO_GRAD)) && first_differentiable_input(c) < 0) {
        char list[256];
        input_list(c, s, list, sizeof list);
        return KV_OPT_ERR(ctx, alt->cols[0],
                          "%s: --mode=%s: no_grad needs a floating or complex input to mark requires_grad (inputs: %s)",
                          op_label(ctx), alt->text, list);
    }
    if (m & (1u << KV_MODE_VMAP)) {
        if (returns_bool(s))
            return KV_OPT_ERR(ctx, alt->cols[0], "%s: --mode=%s: vmap needs tensor returns; the op returns a bool",
                              op_label(ctx), alt->text);
        for (int i = 0; i < c->ninputs; i++) {
            if (c->absent[i] || (c->layouts[i] != KV_LAYOUT_BROADCAST && c->layouts[i] != KV_LAYOUT_WINDOW)) continue;
            return KV_OPT_ERR(ctx, alt->cols[0],
                              "%s: --mode=%s: input %d has layout %s, whose dim 0 would alias the %d samples of the "
                              "batch (use c, t, s or o)",
                              op_label(ctx), alt->text, i, kv_layout_name(c->layouts[i]), KV_CASE_VMAP_BATCH);
        }
    }
    c->modes = m;
    return KV_OK;
}

int kv_case_format_mode(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    char tmp[160];
    int n = 0;
    tmp[0] = '\0';
    for (int m = 0; m < KV_MODE_COUNT; m++)
        if (c->modes & (1u << m)) n += snprintf(tmp + n, sizeof tmp - (size_t)n, "%s%s", n ? "+" : "", k_mode_names[m]);
    if (cap > 0) snprintf(buf, (size_t)cap, "%s", tmp);
    return n;
}
