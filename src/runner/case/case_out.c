/* out= (the option): an out= op's `out` that IS one of the inputs, or that
 * partially overlaps one (README "Case grammar", kernels/ref/ref_out.c).
 *
 *   --out=new    out is a tensor of its own (the default): the out slot's
 *                shape, dtype and layout;
 *   --out=@N     out is input N itself, PyTorch's add(a, b, out=a);
 *   --out=@N.t   out is input N with its last two dims swapped: the same
 *                memory in other strides, a partial overlap PyTorch
 *                refuses;
 *   --out=@N.i   input N is the even elements of a storage twice as long
 *                in the last dim (layout s, in every run) and out its odd
 *                ones: views of one storage that share no element
 *                (out = x[..., 1::2] next to x[..., ::2]), allowed.
 * The out slot of --shape/--dtype still names what out looks like: its
 * shape must be input N's (swapped for .t) and its dtype input N's, so the
 * case line says what the call sees; its layout is input N's. The values
 * an allowed alias gives are the out= op's on the same inputs, so the
 * golden is shared with the `new` case (out= is not in the golden key). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runner/case/case_options.h"

#define OUT_ERR(ctx, col, ...) kv_spec_error(KV_ERR_INVALID_ARG, (ctx)->opt->file, (ctx)->opt->line, (col), __VA_ARGS__)

static int out_parse(const char *text, int *input, bool *transposed, bool *interleaved) {
    *input = -1;
    *transposed = false;
    *interleaved = false;
    if (strcmp(text, "new") == 0) return 0;
    if (text[0] != '@' || text[1] < '0' || text[1] > '9') return -1;
    char *end = NULL;
    const long n = strtol(text + 1, &end, 10);
    if (n >= KV_CASE_MAX_INPUTS) return -1;
    if (strcmp(end, ".t") == 0) *transposed = true;
    else if (strcmp(end, ".i") == 0) *interleaved = true;
    else if (*end != '\0') return -1;
    *input = (int)n;
    return 0;
}

kv_status kv_case_out_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt) {
    (void)axis;
    int n;
    bool t, il;
    if (out_parse(alt->text, &n, &t, &il) == 0) return KV_OK;
    return OUT_ERR(ctx, alt->cols[0], "--out: unknown value '%s' (new, @N: out is input N, @N.t: out is input N "
                                      "transposed, @N.i: out interleaved with input N; N below %d)",
                   alt->text, KV_CASE_MAX_INPUTS);
}

kv_status kv_case_out_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice) {
    int n;
    bool t, il;
    out_parse(ctx->opt->axes[0].alts[choice[0]].text, &n, &t, &il);
    c->out_alias = (signed char)(n + 1);
    c->out_alias_t = t;
    c->out_alias_i = il;
    return KV_OK;
}

/* The input that feeds the op's out argument (kwarg-only, written), or -1. */
static int out_input(const kv_case *c, const kv_schema *s) {
    for (int i = 0; i < c->ninputs; i++) {
        const int a = c->input_arg[i];
        if (a >= 0 && s->args[a].kwarg_only && s->args[a].alias.is_write && !s->args[a].type.is_list) return i;
    }
    return -1;
}

kv_status kv_case_out_finish(kv_case *c, const kv_option_ctx *ctx) {
    if (ctx->opt == NULL || c->out_alias == 0) return KV_OK;
    const kv_schema *s = ctx->schema;
    const char *op = s ? s->full_name : "?";
    const int col = ctx->opt->col;
    const int o = s ? out_input(c, s) : -1;
    const int n = c->out_alias - 1;
    if (o < 0) {
        if (ctx->inherited) return KV_OK;
        return OUT_ERR(ctx, col, "%s: --out=@%d: the op has no out= argument", op, n);
    }
    if (n >= c->ninputs || n == o || c->absent[n])
        return OUT_ERR(ctx, col, "%s: --out=@%d: input %d is not a present input other than out (input %d)", op, n, n,
                       o);
    if (c->lazy[n] || c->lazy[o] || c->modes)
        return OUT_ERR(ctx, col, "%s: --out=@%d: an aliased out goes without --lazy and --mode (their inputs are "
                                 "built one by one)",
                       op, n);
    if (c->dtypes[o] != c->dtypes[n])
        return OUT_ERR(ctx, col, "%s: --out=@%d: the out slot's dtype %s is not input %d's (%s)", op, n,
                       kv_dtype_name(c->dtypes[o]), n, kv_dtype_name(c->dtypes[n]));
    kv_shape want = c->shapes[n];
    bool empty = false;
    for (int d = 0; d < want.ndim; d++) empty = empty || want.sizes[d] == 0;
    if (c->out_alias_i && (want.ndim < 1 || empty))
        return OUT_ERR(ctx, col, "%s: --out=@%d.i: input %d needs at least one dim and an element", op, n, n);
    if (c->out_alias_t) {
        if (want.ndim < 2)
            return OUT_ERR(ctx, col, "%s: --out=@%d.t: input %d has fewer than 2 dims", op, n, n);
        const int64_t tmp = want.sizes[want.ndim - 1];
        want.sizes[want.ndim - 1] = want.sizes[want.ndim - 2];
        want.sizes[want.ndim - 2] = tmp;
    }
    bool same = want.ndim == c->shapes[o].ndim;
    for (int d = 0; same && d < want.ndim; d++) same = want.sizes[d] == c->shapes[o].sizes[d];
    if (!same) {
        char a[96], b[96];
        kv_case_shape_format(&c->shapes[o], false, a, (int)sizeof a);
        kv_case_shape_format(&want, false, b, (int)sizeof b);
        return OUT_ERR(ctx, col, "%s: --out=@%d%s: the out slot's shape %s is not %s (input %d's%s)", op, n,
                       c->out_alias_t ? ".t" : c->out_alias_i ? ".i" : "", a, b, n, c->out_alias_t ? ", transposed" : "");
    }
    return KV_OK;
}

int kv_case_format_out(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    if (cap > 0) buf[0] = '\0';
    if (c->out_alias == 0) return 0;
    return snprintf(buf, (size_t)(cap > 0 ? cap : 0), "@%d%s", c->out_alias - 1,
                    c->out_alias_t ? ".t" : c->out_alias_i ? ".i" : "");
}

kv_tensor *kv_case_out_alias_of(const kv_case *c, kv_tensor *const *tensors) {
    const int n = c->out_alias - 1;
    kv_tensor *t = tensors[n];
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "%s: --out=@%d: input %d is none", c->op, n, n);
        return NULL;
    }
    if (c->out_alias_i) {
        /* t is in layout s (kv_case_inputs_make): its storage's odd
         * elements of the last dim, one element on. */
        if (t->ndim < 1 || t->strides[t->ndim - 1] != 2) {
            kv_error(KV_ERR_INTERNAL, "%s: --out=@%d.i: input %d is not in layout s", c->op, n, n);
            return NULL;
        }
        return kv_tensor_view(t, t->sizes, t->strides, t->ndim, t->offset + 1);
    }
    if (!c->out_alias_t) {
        kv_tensor_retain(t);
        return t;
    }
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS];
    const int nd = t->ndim;
    memcpy(sizes, t->sizes, sizeof(int64_t) * (size_t)nd);
    memcpy(strides, t->strides, sizeof(int64_t) * (size_t)nd);
    sizes[nd - 1] = t->sizes[nd - 2];
    sizes[nd - 2] = t->sizes[nd - 1];
    strides[nd - 1] = t->strides[nd - 2];
    strides[nd - 2] = t->strides[nd - 1];
    return kv_tensor_view(t, sizes, strides, nd, t->offset);
}
