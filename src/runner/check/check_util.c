/* Shared pieces of the checks (runner/check_util.h). */
#include "runner/check/check_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kv/dispatch.h"
#include "kv/ops.h"
#include "kv/tensor.h"
#include "kv/tune.h"
#include "kv/vmap.h"
#include "runner/check/classify.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"
#include "runner/exec/fill.h"

void kv_check_result_begin(kv_check_result *r, const kv_check_ctx *ctx, const char *check, const char *backend) {
    memset(r, 0, sizeof *r);
    const kv_case *c = ctx->c;
    kv_case_id(c, r->case_id, (int)sizeof r->case_id);
    kv_case_repro(c, r->repro, (int)sizeof r->repro);
    snprintf(r->op, sizeof r->op, "%s", c->op);
    snprintf(r->check, sizeof r->check, "%s", check);
    snprintf(r->backend, sizeof r->backend, "%s", backend ? backend : kv_device_type_name(c->device.type));
    r->dtype = KV_F32;
    for (int i = 0; i < c->ninputs && i < KV_CASE_MAX_INPUTS; i++) {
        if (!c->absent[i]) {
            r->dtype = c->dtypes[i];
            break;
        }
    }
    r->status = KV_RESULT_PASS;
}

void kv_check_result_set(kv_check_result *r, kv_result_status status, const char *fmt, ...) {
    r->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
}

void kv_check_push(const kv_check_ctx *ctx, const kv_check_result *r) {
    (void)kv_result_list_push(ctx->results, r);
}

kv_status kv_check_box_bool(kv_case_outputs *out) {
    if (!out->is_bool || out->n > 0) return KV_OK;
    const uint8_t v = out->b ? 1 : 0;
    const int64_t no_sizes[1] = { 0 };
    kv_tensor *t = kv_tensor_from_data(&v, no_sizes, 0, KV_BOOL);
    if (t == NULL) return kv_last_error();
    out->t[0] = t;
    out->n = 1;
    return KV_OK;
}

kv_status kv_check_materialize(kv_case_outputs *out) {
    for (int i = 0; i < out->n; i++) {
        kv_tensor *cur = out->t[i];
        for (int step = 0; step < 3; step++) {
            static const kv_key keys[3] = { KV_KEY_ZERO_TENSOR, KV_KEY_CONJUGATE, KV_KEY_NEGATIVE };
            if (!kv_keyset_has(cur->keys, keys[step])) continue;
            kv_tensor *next = step == 0 ? kv_clone(cur, NULL) : step == 1 ? kv_resolve_conj(cur) : kv_resolve_neg(cur);
            if (next == NULL) {
                out->t[i] = cur;
                return kv_error_prefix(kv_last_error(), "output %d: cannot materialize its %s bit", i,
                                       kv_key_name(keys[step]));
            }
            kv_tensor_release(cur);
            cur = next;
        }
        out->t[i] = cur;
        const kv_keyset lazy = kv_keyset_of(KV_KEY_ZERO_TENSOR) | kv_keyset_of(KV_KEY_CONJUGATE) |
                               kv_keyset_of(KV_KEY_NEGATIVE);
        if (cur->keys & lazy) return kv_error(KV_ERR_INTERNAL, "output %d: a lazy bit survived materialization", i);
    }
    return KV_OK;
}

kv_status kv_check_ref_run(const kv_check_ctx *ctx, kv_check_ref *ref) {
    memset(ref, 0, sizeof *ref);
    kv_status st = kv_case_inputs_make(ctx->c, ctx->op, KV_DEVICE_CPU0, true, &ref->in);
    if (st != KV_OK) {
        snprintf(ref->message, sizeof ref->message, "%s", kv_last_error_message());
        return st;
    }
    /* Reference mode: the CPU key runs its "ref" variant (kernels/ref), not
     * whichever optimized variant perf_dispatch would pick. */
    const bool was_ref = kv_tune_reference_mode_set(true);
    ref->call_status = kv_case_invoke(ctx->op, &ref->in, kv_keyset_of(KV_KEY_CPU), &ref->out);
    kv_tune_reference_mode_set(was_ref);
    if (ref->call_status == KV_OK) ref->call_status = kv_check_box_bool(&ref->out);
    if (ref->call_status == KV_OK) ref->call_status = kv_check_materialize(&ref->out);
    if (ref->call_status != KV_OK) snprintf(ref->message, sizeof ref->message, "%s", kv_last_error_message());
    return KV_OK;
}

void kv_check_ref_free(kv_check_ref *ref) {
    kv_case_outputs_free(&ref->out);
    kv_case_inputs_free(&ref->in);
}

bool kv_check_arg_is_mutated(const kv_op *op, int a) {
    const kv_schema *s = kv_op_schema(op);
    return a >= 0 && a < s->nargs && s->args[a].alias.is_write;
}

kv_status kv_check_golden_key(const kv_case *c, char *buf, int cap) {
    const int n = kv_fill_golden_key(c, buf, cap);
    if (n < 0 || n >= cap) return kv_error(KV_ERR_INVALID_ARG, "%s: golden key too long (%d bytes)", c->op, n);
    return KV_OK;
}

/* A tensor past KV_CASE_MAX_OUTPUTS is released and fails the call
 * rather than being dropped silently. */
static kv_status returns_to_outputs(const kv_op *op, kv_stack *rs, kv_case_outputs *out) {
    memset(out, 0, sizeof *out);
    kv_status st = KV_OK;
    for (int i = 0; i < rs->size; i++) {
        kv_ivalue *v = &rs->slots[i];
        if (v->tag == KV_IV_TENSOR && out->n < KV_CASE_MAX_OUTPUTS) {
            out->t[out->n++] = v->v.tensor;
        } else if (v->tag == KV_IV_TENSOR) {
            kv_tensor_release(v->v.tensor);
            st = kv_error(KV_ERR_INTERNAL, "%s: returned more than %d tensors", kv_op_name(op), KV_CASE_MAX_OUTPUTS);
        } else if (v->tag == KV_IV_BOOL) {
            out->is_bool = true;
            out->b = v->v.b;
        }
    }
    if (st != KV_OK) kv_case_outputs_free(out);
    return st;
}

kv_status kv_check_vmap_invoke(const kv_op *op, kv_case_inputs *in, kv_case_outputs *out) {
    kv_ivalue slots[KV_STACK_MAX], rslots[KV_STACK_MAX];
    kv_stack args = kv_stack_on(slots, KV_STACK_MAX);
    kv_stack rs = kv_stack_on(rslots, KV_STACK_MAX);
    memset(out, 0, sizeof *out);
    for (int i = 0; i < in->nargs; i++) {
        kv_status s = kv_stack_push(&args, in->args[i]);
        if (s != KV_OK) return s;
    }
    kv_error_clear();
    kv_status st = kv_vmap_call(op, &args, NULL, -1, 0, &rs);
    if (st != KV_OK) return st;
    st = returns_to_outputs(op, &rs, out);
    if (st == KV_OK) st = kv_case_outputs_add_written_list(op, in, out);
    if (st != KV_OK) kv_case_outputs_free(out);
    return st;
}

kv_result_status kv_check_status_of_failure(const kv_case *c, kv_status st, kv_result_status otherwise) {
    return st == KV_ERR_MISSING_KERNEL && c->device.type != KV_DEVICE_CPU ? KV_RESULT_UNSUPPORTED : otherwise;
}

bool kv_check_outputs_identical(const kv_check_ctx *ctx, const kv_case_outputs *a, const kv_case_outputs *b,
                                bool diagnose, char *msg, int cap) {
    if (a->n != b->n || a->is_bool != b->is_bool || a->b != b->b) {
        snprintf(msg, (size_t)cap, "the calls returned %d and %d outputs", a->n, b->n);
        return false;
    }
    const kv_cmp_rule exact = { KV_CMP_BITWISE, 0, false, true };
    for (int i = 0; i < a->n; i++) {
        const kv_tol_entry *e = kv_tol_lookup(ctx->c->op, a->t[i]->dtype, ctx->c);
        if (e != NULL && e->uninitialized) continue;
        kv_cmp_report rep;
        if (kv_compare(a->t[i], b->t[i], &exact, NULL, &rep) != KV_OK) {
            snprintf(msg, (size_t)cap, "output %d: %s", i, kv_last_error_message());
            return false;
        }
        if (rep.mismatched > 0) {
            char what[32];
            snprintf(what, sizeof what, "output %d", i);
            /* A kernel that ignores strides reads past a stride-0 input's
             * storage, so its calls differ: name that cause first, before
             * the symptom's listing, when the differences show it
             * (docs/diagnosis.md). */
            char diag[KV_RESULT_MESSAGE_MAX / 2];
            int n = 0;
            if (diagnose &&
                kv_classify_compare(ctx->c, NULL, a->t[i], b->t[i], NULL, NULL, &exact, NULL, NULL, NULL, diag,
                                    (int)sizeof diag) > 0)
                n = snprintf(msg, (size_t)cap, "likely cause: %s; ", diag);
            if (n < cap) kv_cmp_report_format(&rep, what, msg + n, cap - n);
            return false;
        }
    }
    return true;
}
