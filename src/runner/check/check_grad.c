/* The grad check: gradcheck, and gradients through the dispatch cache on
 * and off (runner/check_grad.h). */
#include "runner/check/check_grad.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/autograd.h"
#include "kv/gradcheck.h"
#include "kv/lazy.h"
#include "kv/ops.h"
#include "kv/tune.h"
#include "runner/case/case_options.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/exec/inputs.h"
#include "runner/exec/lazy_inputs.h"

static bool has_bits(const kv_case *c) {
    for (int i = 0; i < c->ninputs; i++)
        if (c->lazy[i]) return true;
    return false;
}

static bool arg_mutated(const kv_schema *s, int a) { return a >= 0 && a < s->nargs && s->args[a].alias.is_write; }

/* ---- gradient runs ---- */

void kv_grad_set_free(kv_grad_set *g) {
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(g->grad[i]);
    memset(g, 0, sizeof *g);
}

/* Fixed dyadic weights of t's shape and dtype on t's device, so every run
 * pushes the same cotangent through backward. */
static kv_tensor *grad_output_like(const kv_tensor *t) {
    const bool cplx = kv_dtype_is_complex(t->dtype);
    const kv_dtype wide = cplx ? KV_C128 : KV_F64;
    const int64_t n = kv_tensor_numel(t);
    double *v = calloc((size_t)(n > 0 ? n : 1) * (cplx ? 2 : 1), sizeof *v);
    if (v == NULL) {
        kv_error(KV_ERR_OOM, "grad: out of host memory");
        return NULL;
    }
    for (int64_t j = 0; j < n; j++) {
        const double re = (double)((j * 7 + 3) % 11 - 5) / 4.0;
        if (cplx) {
            v[2 * j] = re;
            v[2 * j + 1] = (double)((j * 5 + 1) % 9 - 4) / 4.0;
        } else {
            v[j] = re;
        }
    }
    kv_tensor *h = kv_tensor_from_data(v, t->sizes, t->ndim, wide);
    free(v);
    if (h == NULL) return NULL;
    kv_tls_keys g = kv_no_grad_push();
    kv_tensor *out = kv__to_copy(h, &t->dtype, NULL, NULL, NULL, false, NULL);
    kv_grad_mode_pop(g);
    kv_tensor_release(h);
    /* The reference _to_copy makes cpu tensors only: another device (accel
     * on its target, SIM) gets the values placed there like an input. */
    if (out != NULL && t->device.type != KV_DEVICE_CPU) {
        kv_tensor *moved = kv_layout_place(out, KV_LAYOUT_CONTIGUOUS, t->device);
        kv_tensor_release(out);
        out = moved;
    }
    return out;
}

kv_status kv_check_grad_compute(const kv_check_ctx *ctx, kv_device device, kv_grad_set *out) {
    const kv_case *c = ctx->c;
    memset(out, 0, sizeof *out);
    out->n = c->ninputs;
    out->root = -1;
    kv_case_inputs in;
    kv_tensor *leaves[KV_CASE_MAX_INPUTS];
    const kv_lazy_build b = { device, true, 0 };
    kv_tls_keys grad_on = kv_enable_grad_push();
    /* The reference variants: a tuner choice could differ between runs. */
    const bool was_ref = kv_tune_reference_mode_set(true);
    kv_status st = kv_lazy_inputs_make(c, ctx->op, &b, &in, leaves);
    if (st != KV_OK) {
        kv_tune_reference_mode_set(was_ref);
        kv_grad_mode_pop(grad_on);
        return kv_error_prefix(st, "cannot build the inputs");
    }
    kv_case_outputs res;
    memset(&res, 0, sizeof res);
    st = kv_case_invoke(ctx->op, &in, 0, &res);
    if (st != KV_OK) {
        st = kv_error_prefix(st, "the call failed");
    } else {
        for (int k = 0; k < res.n && out->root < 0; k++)
            if (res.t[k] && kv_tensor_requires_grad(res.t[k])) out->root = k;
        if (out->root < 0) st = kv_error(KV_ERR_INVALID_ARG, "%s: no output requires grad", c->op);
    }
    if (st == KV_OK) {
        kv_tensor *go = grad_output_like(res.t[out->root]);
        st = go ? kv_backward(res.t[out->root], go) : kv_last_error();
        kv_tensor_release(go);
        if (st != KV_OK) st = kv_error_prefix(st, "backward from output %d failed", out->root);
    }
    for (int i = 0; i < c->ninputs && st == KV_OK; i++) {
        if (leaves[i] == NULL) continue;
        out->leaf[i] = true;
        kv_tensor *g = NULL;
        if ((st = kv_lazy_leaf_grad(leaves[i], &g)) != KV_OK) break;
        if (g == NULL) continue;
        if (g->device.type != KV_DEVICE_CPU) {
            kv_tensor *d = g;
            /* On the host, so runs on different devices compare directly. */
            const kv_device cpu = KV_DEVICE_CPU0;
            kv_tls_keys ng = kv_no_grad_push();
            g = kv__to_copy(d, NULL, NULL, &cpu, NULL, false, NULL);
            kv_grad_mode_pop(ng);
            kv_tensor_release(d);
            if (g == NULL) st = kv_error_prefix(kv_last_error(), "cannot copy the gradient of input %d to the host", i);
        }
        out->grad[i] = g;
    }
    kv_case_outputs_free(&res);
    kv_case_inputs_free(&in);
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(leaves[i]);
    kv_tune_reference_mode_set(was_ref);
    kv_grad_mode_pop(grad_on);
    if (st != KV_OK) kv_grad_set_free(out);
    return st;
}

bool kv_grad_set_compare(const kv_grad_set *a, const kv_grad_set *b, const char *a_name, const char *b_name,
                         kv_check_result *r) {
    static const kv_cmp_rule bitwise = { KV_CMP_BITWISE, 0.0, false, false };
    for (int i = 0; i < a->n; i++) {
        if (a->leaf[i] != b->leaf[i] || (a->grad[i] == NULL) != (b->grad[i] == NULL)) {
            kv_check_result_set(r, KV_RESULT_FAIL, "input %d: a gradient with %s: %s, with %s: %s", i, a_name,
                                a->grad[i] ? "yes" : "none", b_name, b->grad[i] ? "yes" : "none");
            return false;
        }
        if (a->grad[i] == NULL) continue;
        kv_cmp_report rep;
        if (kv_compare(a->grad[i], b->grad[i], &bitwise, NULL, &rep) != KV_OK) {
            kv_check_result_set(r, KV_RESULT_FAIL, "input %d: the gradients with %s and with %s differ: %s", i, a_name,
                                b_name, kv_last_error_message());
            return false;
        }
        r->compared += rep.compared;
        if (rep.mismatched == 0) continue;
        char what[48], text[KV_RESULT_MESSAGE_MAX];
        snprintf(what, sizeof what, "gradient of input %d", i);
        kv_cmp_report_summary(&rep, what, text, (int)sizeof text);
        kv_check_result_set(r, KV_RESULT_FAIL, "%s (expected) vs %s (got): %s", a_name, b_name, text);
        kv_cmp_report_to_result(&rep, r);
        return false;
    }
    return true;
}

/* ---- gradcheck through the lazy inputs ---- */

typedef struct lazy_gc {
    const kv_case *c;
    const kv_op *op;
    kv_case_inputs base;           /* the plain inputs; non-differentiated ones already final */
    int diff[KV_CASE_MAX_INPUTS];  /* case input of each gradcheck input */
    int ndiff;
} lazy_gc;

/* The input as the op should see it: conj/neg views over the current
 * (perturbed, f64/c128) value, a clone first when the op writes it. */
static kv_tensor *lazy_gc_input(const lazy_gc *g, int i, kv_tensor *x) {
    const unsigned bits = g->c->lazy[i];
    const kv_schema *s = kv_op_schema(g->op);
    kv_tensor *y = arg_mutated(s, g->c->input_arg[i]) ? kv_clone(x, NULL) : (kv_tensor_retain(x), x);
    if (y == NULL) return NULL;
    if (bits & KV_CASE_LAZY_CONJ) {
        kv_tensor *p = kv_conj_physical(y);
        kv_tensor_release(y);
        if (p == NULL) return NULL;
        y = kv_conj(p);
        kv_tensor_release(p);
        if (y == NULL) return NULL;
    }
    if (bits & KV_CASE_LAZY_NEG) {
        kv_tensor *p = kv_neg(y);
        kv_tensor_release(y);
        if (p == NULL) return NULL;
        y = kv__neg_view(p);
        kv_tensor_release(p);
    }
    return y;
}

static kv_status lazy_gc_fn(void *vctx, kv_tensor *const *xs, int n, kv_tensor **outs, int *nout) {
    lazy_gc *g = vctx;
    kv_ivalue slots[KV_STACK_MAX];
    kv_tensor *items[KV_CASE_MAX_INPUTS];
    kv_tensor *made[KV_CASE_MAX_INPUTS] = { NULL };
    const kv_case_inputs *in = &g->base;
    memcpy(slots, in->args, (size_t)in->nargs * sizeof *slots);
    memcpy(items, in->list_items, sizeof items);
    kv_status st = KV_OK;
    *nout = 0;
    for (int j = 0; j < n && st == KV_OK; j++) {
        const int i = g->diff[j];
        if ((made[j] = lazy_gc_input(g, i, xs[j])) == NULL) {
            st = kv_last_error();
            break;
        }
        const kv_tensor *old = in->tensors[i];
        for (int a = 0; a < in->nargs; a++) {
            if (slots[a].tag == KV_IV_TENSOR && in->args[a].v.tensor == old) slots[a].v.tensor = made[j];
            if (slots[a].tag == KV_IV_TENSOR_LIST) {
                const int first = (int)(in->args[a].v.tensors.items - in->list_items);
                slots[a].v.tensors.items = items + first;
            }
        }
        for (int k = 0; k < KV_CASE_MAX_INPUTS; k++)
            if (in->list_items[k] == old) items[k] = made[j];
    }
    if (st == KV_OK) {
        kv_stack stack = { slots, in->nargs, KV_STACK_MAX };
        st = kv_call(g->op, &stack);
        for (int k = 0; st == KV_OK && k < stack.size; k++) {
            if (stack.slots[k].tag != KV_IV_TENSOR) continue;
            if (*nout < KV_GRADCHECK_MAX_OUTPUTS) outs[(*nout)++] = stack.slots[k].v.tensor;
            else kv_tensor_release(stack.slots[k].v.tensor);
        }
    }
    for (int j = 0; j < n; j++) kv_tensor_release(made[j]);
    return st;
}

/* The inputs gradcheck does not differentiate, widened like it widens the
 * others: floating ones to f64/c128 (zero inputs as wide ZeroTensors). */
static kv_status lazy_gc_prepare(lazy_gc *g, kv_tensor **xs) {
    const kv_case *c = g->c;
    kv_status st = kv_case_inputs_make(c, g->op, c->device, false, &g->base);
    if (st != KV_OK) return st;
    kv_tls_keys nograd = kv_no_grad_push();
    for (int i = 0; i < c->ninputs && st == KV_OK; i++) {
        kv_tensor *t = g->base.tensors[i];
        if (t == NULL) continue;
        if (kv_lazy_input_wants_grad(c, i)) {
            xs[g->ndiff] = t;
            g->diff[g->ndiff++] = i;
            continue;
        }
        if (!kv_dtype_is_floating(t->dtype) && !kv_dtype_is_complex(t->dtype)) continue;
        const kv_dtype wide = kv_dtype_is_complex(t->dtype) ? KV_C128 : KV_F64;
        kv_tensor *w = kv__to_copy(t, &wide, NULL, NULL, NULL, false, NULL);
        if (w != NULL && (c->lazy[i] & KV_CASE_LAZY_ZERO)) {
            kv_tensor *z = kv_lazy_make(w, KV_KEY_ZERO_TENSOR);
            kv_tensor_release(w);
            w = z;
        }
        if (w == NULL) st = kv_last_error();
        else kv_case_inputs_replace(&g->base, i, w);
    }
    kv_grad_mode_pop(nograd);
    return st;
}

static kv_status run_gradcheck(const kv_check_ctx *ctx, kv_gradcheck_result *res, char *where, int cap) {
    const kv_case *c = ctx->c;
    where[0] = '\0';
    kv_tls_keys grad_on = kv_enable_grad_push();
    const bool was_ref = kv_tune_reference_mode_set(true);
    kv_status st;
    if (!has_bits(c)) {
        kv_case_inputs in;
        st = kv_case_inputs_make(c, ctx->op, c->device, false, &in);
        if (st == KV_OK) {
            kv_ivalue slots[KV_STACK_MAX];
            kv_stack stack = kv_stack_on(slots, KV_STACK_MAX);
            for (int a = 0; a < in.nargs && st == KV_OK; a++) st = kv_stack_push(&stack, in.args[a]);
            if (st == KV_OK) st = kv_gradcheck(ctx->op, &stack, NULL, res);
            if (res->slot >= 0 && res->slot < kv_op_schema(ctx->op)->nargs)
                snprintf(where, (size_t)cap, "argument '%s'", kv_op_schema(ctx->op)->args[res->slot].name);
            kv_case_inputs_free(&in);
        }
    } else {
        lazy_gc g;
        memset(&g, 0, sizeof g);
        g.c = c;
        g.op = ctx->op;
        kv_tensor *xs[KV_CASE_MAX_INPUTS];
        st = lazy_gc_prepare(&g, xs);
        if (st == KV_OK) st = kv_gradcheck_fn_run(kv_op_name(ctx->op), lazy_gc_fn, &g, xs, g.ndiff, NULL, res);
        if (res->slot >= 0 && res->slot < g.ndiff) snprintf(where, (size_t)cap, "input %d", g.diff[res->slot]);
        kv_case_inputs_free(&g.base);
    }
    kv_tune_reference_mode_set(was_ref);
    kv_grad_mode_pop(grad_on);
    return st;
}

/* ---- the rows ---- */

static void row_gradcheck(const kv_check_ctx *ctx) {
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "grad:gradcheck", NULL);
    kv_gradcheck_result res;
    memset(&res, 0, sizeof res);
    res.slot = -1;
    char where[96];
    const kv_status st = run_gradcheck(ctx, &res, where, (int)sizeof where);
    if (st == KV_OK && res.ran && res.passed) {
        kv_check_result_set(&r, KV_RESULT_PASS, "gradcheck passed: %lld element%s checked (f64, eps 1e-6, atol 1e-5, rtol 1e-3)%s",
                            (long long)res.elements_checked, res.elements_checked == 1 ? "" : "s",
                            has_bits(ctx->c) ? " through the lazy inputs" : "");
    } else if (res.ran) {
        kv_check_result_set(&r, KV_RESULT_FAIL, "gradcheck failed%s%s: %s", where[0] ? " at " : "", where,
                            res.message[0] ? res.message : kv_last_error_message());
    } else {
        kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_ERROR), "gradcheck could not run (%s): %s",
                            kv_status_name(st != KV_OK ? st : KV_ERR_INTERNAL), kv_last_error_message());
    }
    r.compared = res.elements_checked;
    kv_check_push(ctx, &r);
}

static void row_dispatch_cache(const kv_check_ctx *ctx) {
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "grad:dispatch_cache", NULL);
    const bool was = kv_dispatch_cache_enabled();
    kv_grad_set on, off;
    kv_dispatch_cache_set_enabled(true);
    kv_status st = kv_check_grad_compute(ctx, ctx->c->device, &on);
    if (st != KV_OK) {
        kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_ERROR),
                            "gradients with the dispatch cache on: %s", kv_last_error_message());
    } else {
        kv_dispatch_cache_set_enabled(false);
        st = kv_check_grad_compute(ctx, ctx->c->device, &off);
        kv_dispatch_cache_set_enabled(true);
        if (st != KV_OK) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "gradients with the dispatch cache off failed (on: fine): %s",
                                kv_last_error_message());
        } else {
            if (kv_grad_set_compare(&on, &off, "dispatch cache on", "dispatch cache off", &r)) {
                int n = 0;
                for (int i = 0; i < on.n; i++) n += on.grad[i] != NULL;
                kv_check_result_set(&r, KV_RESULT_PASS,
                                    "%d gradient%s (backward from output %d) bitwise equal with the dispatch cache on "
                                    "and off",
                                    n, n == 1 ? "" : "s", on.root);
            }
            kv_grad_set_free(&off);
        }
        kv_grad_set_free(&on);
    }
    kv_dispatch_cache_set_enabled(was);
    kv_check_push(ctx, &r);
}

void kv_check_grad_run(const kv_check_ctx *ctx) {
    char why[320];
    if (ctx->c->expect != KV_OK || kv_case_grad_why_not(ctx->c, ctx->op, why, (int)sizeof why) != 0) {
        kv_check_result r;
        kv_check_result_begin(&r, ctx, "grad", NULL);
        if (ctx->c->expect != KV_OK)
            kv_check_result_set(&r, KV_RESULT_SKIP, "expect=%s: the case has no output to differentiate",
                                kv_case_expect_name(ctx->c->expect));
        else
            kv_check_result_set(&r, KV_RESULT_ERROR, "%s", why);
        kv_check_push(ctx, &r);
        return;
    }
    row_gradcheck(ctx);
    row_dispatch_cache(ctx);
}
