/* The expansion loop: an odometer over the spec's axes, each combination
 * applied row by row (see runner/spec.h) into one kv_case. */
#include "runner/case/expand.h"

#include <stdlib.h>
#include <string.h>

#include "kv/dispatch.h"
#include "runner/case/case_options.h"

kv_status kv_case_list_push(kv_case_list *l, const kv_case *c) {
    if (l->n == l->cap) {
        const int cap = l->cap ? l->cap * 2 : 16;
        kv_case *items = realloc(l->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_error(KV_ERR_OOM, "case expansion: out of memory");
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = *c;
    return KV_OK;
}

void kv_case_list_free(kv_case_list *l) {
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

#define KV_EXPAND_MAX_AXES 64

typedef struct kv_axes {
    int n;
    int nalts[KV_EXPAND_MAX_AXES];
    int first[KV_SPEC_MAX_OPTIONS];  /* each row's first entry in idx[] */
} kv_axes;

static kv_status kv_one_case(const kv_case_spec *spec, const int *idx, const kv_axes *ax,
                             kv_case_list *out) {
    kv_case c;
    kv_case_init(&c);
    c.origin = spec->origin;
    kv_option_ctx ctx = { .spec = spec };
    int max_stage = 0;
    for (int r = 0; r < kv_case_option_count; r++) {
        if (kv_case_options[r].stage > max_stage) max_stage = kv_case_options[r].stage;
    }
    kv_status st;
    for (int stage = 0; stage <= max_stage; stage++) {
        for (int r = 0; r < kv_case_option_count; r++) {
            const kv_option_row *row = &kv_case_options[r];
            if (row->stage != stage || spec->opts[r] == NULL || row->apply == NULL) continue;
            ctx.opt = spec->opts[r];
            ctx.inherited = spec->inherited[r];
            if ((st = row->apply(&c, &ctx, &idx[ax->first[r]])) != KV_OK) return st;
        }
        if (stage == 0 && c.program[0] != '\0') continue; /* no op: only program, seed, device apply */
        if (stage == 0) {
            const kv_spec_option *op = spec->opts[kv_case_option_op_row()];
            ctx.op = kv_op_find(c.op);
            if (ctx.op == NULL) {
                return kv_spec_error(KV_ERR_UNKNOWN_OP, op->file, op->line, op->col,
                                     "--op: unknown op '%s'", c.op);
            }
            ctx.schema = kv_op_schema(ctx.op);
        }
    }
    for (int r = 0; r < kv_case_option_count && c.program[0] == '\0'; r++) {
        const kv_option_row *row = &kv_case_options[r];
        if (row->finish == NULL) continue;
        ctx.opt = spec->opts[r];
        ctx.inherited = spec->inherited[r];
        if ((st = row->finish(&c, &ctx)) != KV_OK) return st;
    }
    kv_case_canonicalize_inputs(&c);
    return kv_case_list_push(out, &c);
}

/* The options a program case takes: the program declares its inputs,
 * arguments and fills, and runs its own checks (check_program.c); modes
 * apply to its accel free runs. */
static kv_status kv_expand_axes(const kv_case_spec *spec, kv_case_list *out);

static bool kv_program_row_ok(const char *name) {
    return strcmp(name, "program") == 0 || strcmp(name, "seed") == 0 || strcmp(name, "device") == 0 ||
           strcmp(name, "mode") == 0;
}

/* A --program= line: its own options must be ones a program takes (an
 * error names the first other one); those it inherits from defaults lines
 * and --batch lines are meant for op lines and are dropped, so they
 * neither fail nor multiply the program's cases. */
static kv_status kv_program_spec(const kv_case_spec *spec, kv_case_spec *own) {
    kv_case_spec_copy(own, spec);
    for (int r = 0; r < kv_case_option_count; r++) {
        kv_spec_option *o = own->opts[r];
        if (o == NULL || kv_program_row_ok(kv_case_options[r].name)) continue;
        if (!own->inherited[r]) {
            const kv_status st =
                kv_spec_error(KV_ERR_INVALID_ARG, o->file, o->line, o->col,
                              "--%s: not valid on a --program= line (the program declares its inputs and arguments)",
                              kv_case_options[r].name);
            kv_case_spec_clear(own);
            return st;
        }
        kv_spec_option_release(o);
        own->opts[r] = NULL;
        own->inherited[r] = false;
    }
    return KV_OK;
}

kv_status kv_spec_expand(const kv_case_spec *spec, kv_case_list *out) {
    if (spec->opts[kv_case_option_program_row()] != NULL && spec->opts[kv_case_option_op_row()] == NULL) {
        kv_case_spec own;
        kv_status st = kv_program_spec(spec, &own);
        if (st != KV_OK) return st;
        st = kv_expand_axes(&own, out);
        kv_case_spec_clear(&own);
        return st;
    }
    if (spec->opts[kv_case_option_program_row()] != NULL) {
        const kv_spec_option *o = spec->opts[kv_case_option_program_row()];
        return kv_spec_error(KV_ERR_INVALID_ARG, o->file, o->line, o->col,
                             "--program and --op on one line: a case runs an op or a program");
    }
    if (spec->opts[kv_case_option_op_row()] == NULL) {
        return kv_spec_error(KV_ERR_INVALID_ARG, spec->origin.file, spec->origin.line, 1,
                             "a case line needs --op=");
    }
    return kv_expand_axes(spec, out);
}

/* The odometer over every axis of the spec (one-op and program lines). */
static kv_status kv_expand_axes(const kv_case_spec *spec, kv_case_list *out) {
    kv_axes ax = { 0 };
    long long total = 1;
    for (int r = 0; r < kv_case_option_count; r++) {
        ax.first[r] = ax.n;
        const kv_spec_option *o = spec->opts[r];
        if (o == NULL) continue;
        if (ax.n + o->naxes > KV_EXPAND_MAX_AXES) {
            return kv_spec_error(KV_ERR_INVALID_ARG, o->file, o->line, o->col,
                                 "too many expanding values on one line (at most %d)",
                                 KV_EXPAND_MAX_AXES);
        }
        for (int a = 0; a < o->naxes; a++) {
            ax.nalts[ax.n++] = o->axes[a].nalts;
            total *= o->axes[a].nalts;
            if (total > KV_EXPAND_MAX_CASES) {
                return kv_spec_error(KV_ERR_INVALID_ARG, spec->origin.file, spec->origin.line,
                                     spec->op_col > 0 ? spec->op_col : 1,
                                     "this line expands to more than %d cases", KV_EXPAND_MAX_CASES);
            }
        }
    }
    int idx[KV_EXPAND_MAX_AXES] = { 0 };
    for (;;) {
        kv_status st = kv_one_case(spec, idx, &ax, out);
        if (st != KV_OK) return st;
        int k = ax.n - 1;
        while (k >= 0 && ++idx[k] == ax.nalts[k]) idx[k--] = 0;
        if (k < 0) return KV_OK;
    }
}

kv_status kv_spec_list_expand(const kv_spec_list *specs, kv_case_list *out) {
    for (int i = 0; i < specs->n; i++) {
        kv_status st = kv_spec_expand(&specs->items[i], out);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

static kv_status kv_expand_and_free(kv_status st, kv_spec_list *specs, kv_case_list *out) {
    if (st == KV_OK) st = kv_spec_list_expand(specs, out);
    kv_spec_list_free(specs);
    return st;
}

kv_status kv_cases_from_file(const char *path, kv_case_list *out) {
    kv_spec_list specs = { 0 };
    return kv_expand_and_free(kv_grammar_parse_file(path, &specs), &specs, out);
}

kv_status kv_cases_from_text(const char *name, const char *text, kv_case_list *out) {
    kv_spec_list specs = { 0 };
    return kv_expand_and_free(kv_grammar_parse_text(name, text, &specs), &specs, out);
}

kv_status kv_cases_from_argv(int argc, char *const argv[], kv_grammar_skip_fn skip, void *ctx,
                             kv_case_list *out) {
    kv_spec_list specs = { 0 };
    return kv_expand_and_free(kv_grammar_parse_argv(argc, argv, skip, ctx, &specs), &specs, out);
}
