/* The tune check (DESIGN.md section 6): perf_dispatch's choices are
 * sound. For every backend whose kernel for the case's op is a variant
 * set (kv/tune.h), one row "tune:<Key>":
 *   - the tuner's choice for the case's call is a variant whose predicate
 *     accepts the call;
 *   - forcing each compatible variant (kv_tune_force_set, the
 *     KV_PERFDISPATCH_FORCE map) and calling through the dispatcher gives
 *     exactly the bytes a direct call of that variant gives
 *     (kv_tune_call_variant): NaN payloads and signed zeros included,
 *     so the dispatcher ran that variant and nothing else;
 *   - forcing an incompatible variant makes the call fail with an error
 *     (never a crash, never a silent run of another variant).
 * Each call gets freshly built inputs (in-place ops write them). The force
 * map in effect before the check is put back after it. Cases that expect
 * an error are SKIP. */
#include <stdio.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/tune.h"
#include "runner/check/check_util.h"
#include "runner/exec/inflight.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"

/* The returns on a stack as case outputs (kv_case_invoke's rules). */
static kv_status tune_collect(const kv_op *op, kv_stack *st, kv_case_outputs *out) {
    for (int i = 0; i < st->size; i++) {
        kv_ivalue *v = &st->slots[i];
        if (v->tag == KV_IV_TENSOR && out->n < KV_CASE_MAX_OUTPUTS) {
            out->t[out->n++] = v->v.tensor;
        } else if (v->tag == KV_IV_BOOL) {
            out->is_bool = true;
            out->b = v->v.b;
        } else if (v->tag == KV_IV_TENSOR) {
            kv_tensor_release(v->v.tensor);
            return kv_error(KV_ERR_INTERNAL, "%s: more than %d outputs", kv_op_name(op), KV_CASE_MAX_OUTPUTS);
        }
    }
    return KV_OK;
}

static kv_status tune_finish(kv_status st, kv_case_outputs *out) {
    if (st == KV_OK) st = kv_check_box_bool(out);
    if (st == KV_OK) st = kv_check_materialize(out);
    for (int i = 0; st == KV_OK && i < out->n; i++) {
        kv_tensor *h = kv_backend_readable(out->t[i]);
        if (h == NULL) return kv_last_error();
        kv_tensor_release(out->t[i]);
        out->t[i] = h;
    }
    return st;
}

/* Variant `name` of `key` on fresh inputs: forced through the dispatcher,
 * or called directly. */
static kv_status tune_run(const kv_check_ctx *ctx, kv_key key, const char *name, bool forced, kv_case_outputs *out) {
    memset(out, 0, sizeof *out);
    const kv_device dev = { (kv_device_type)key, ctx->c->device.type == (kv_device_type)key ? ctx->c->device.index : 0 };
    kv_case_inputs in;
    kv_status st = kv_case_inputs_make(ctx->c, ctx->op, dev, false, &in);
    if (st != KV_OK) return st;
    if (forced) {
        char spec[160];
        snprintf(spec, sizeof spec, "%s:%s", kv_op_name(ctx->op), name);
        st = kv_tune_force_set(spec);
        if (st == KV_OK) st = kv_case_invoke(ctx->op, &in, kv_keyset_of(key), out);
    } else {
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
        for (int i = 0; i < in.nargs; i++) kv_stack_push(&s, in.args[i]);
        st = kv_tune_call_variant(ctx->op, key, name, &s);
        if (st == KV_OK) st = tune_collect(ctx->op, &s, out);
        if (st == KV_OK) st = kv_case_outputs_add_written_list(ctx->op, &in, out);
    }
    st = tune_finish(st, out);
    kv_case_inputs_free(&in);
    if (st != KV_OK) kv_case_outputs_free(out);
    return st;
}

/* Bit for bit, except outputs whose values are unspecified (empty). */
static bool tune_same(const kv_check_ctx *ctx, const kv_case_outputs *a, const kv_case_outputs *b, char *why, size_t cap) {
    if (a->n != b->n) {
        snprintf(why, cap, "%d outputs vs %d", a->n, b->n);
        return false;
    }
    for (int i = 0; i < a->n; i++) {
        const kv_tol_entry *e = kv_tol_lookup(ctx->c->op, a->t[i]->dtype, ctx->c);
        kv_cmp_rule rule = { KV_CMP_BITWISE, 0.0, false, true };
        if (e != NULL && e->uninitialized) rule.kind = KV_CMP_META;
        kv_cmp_report rep;
        if (kv_compare(a->t[i], b->t[i], &rule, NULL, &rep) != KV_OK) {
            snprintf(why, cap, "output %d: %s", i, kv_last_error_message());
            return false;
        }
        if (rep.mismatched > 0) {
            char what[32];
            snprintf(what, sizeof what, "output %d", i);
            kv_cmp_report_format(&rep, what, why, (int)cap);
            return false;
        }
    }
    return true;
}

static void tune_backend(const kv_check_ctx *ctx, kv_key key) {
    char check[64];
    snprintf(check, sizeof check, "tune:%s", kv_key_name(key));
    kv_check_result r;
    kv_check_result_begin(&r, ctx, check, kv_check_backend_label(key));
    const kv_op *op = ctx->op;
    const int nv = kv_tune_variant_count(op, key);
    /* Compatibility and the tuner's choice, on one set of inputs. */
    bool compat[KV_TUNE_MAX_VARIANTS] = { false };
    const kv_device dev = { (kv_device_type)key, ctx->c->device.type == (kv_device_type)key ? ctx->c->device.index : 0 };
    kv_case_inputs in;
    if (kv_case_inputs_make(ctx->c, op, dev, false, &in) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot build the inputs: %s", kv_last_error_message());
        kv_check_push(ctx, &r);
        return;
    }
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack probe = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < in.nargs; i++) kv_stack_push(&probe, in.args[i]);
    int ncompat = 0;
    for (int i = 0; i < nv && i < KV_TUNE_MAX_VARIANTS; i++) ncompat += compat[i] = kv_tune_variant_compatible(op, key, i, &probe);
    const char *choice = NULL;
    int ci = -1;
    const kv_status cs = kv_tune_choice(op, key, &probe, &choice, &ci);
    kv_case_inputs_free(&in);
    if (cs != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_FAIL, "the dispatcher has no choice for this call: %s", kv_last_error_message());
        kv_check_push(ctx, &r);
        return;
    }
    if (ci < 0 || ci >= nv || !compat[ci]) {
        kv_check_result_set(&r, KV_RESULT_FAIL, "the tuner chose '%s', which does not accept this call", choice);
        kv_check_push(ctx, &r);
        return;
    }
    char saved[1024];
    kv_tune_force_format(saved, sizeof saved);
    int forced_ok = 0, refused_ok = 0;
    bool failed = false;
    for (int i = 0; i < nv && !failed; i++) {
        const char *name = kv_tune_variant_name(op, key, i);
        kv_case_outputs f, d;
        if (!compat[i]) {
            const kv_status st = tune_run(ctx, key, name, true, &f);
            if (st == KV_OK) {
                kv_case_outputs_free(&f);
                kv_check_result_set(&r, KV_RESULT_FAIL,
                                    "forcing '%s', which does not accept this call, ran anyway instead of failing", name);
                failed = true;
            } else {
                refused_ok++;
            }
            continue;
        }
        const kv_status sf = tune_run(ctx, key, name, true, &f);
        if (sf != KV_OK) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "forced '%s' failed with '%s': %s", name, kv_status_name(sf),
                                kv_last_error_message());
            failed = true;
            continue;
        }
        const kv_status sd = tune_run(ctx, key, name, false, &d);
        if (sd != KV_OK) {
            kv_case_outputs_free(&f);
            kv_check_result_set(&r, KV_RESULT_FAIL, "a direct call of '%s' failed with '%s': %s", name,
                                kv_status_name(sd), kv_last_error_message());
            failed = true;
            continue;
        }
        char why[KV_RESULT_MESSAGE_MAX];
        if (!tune_same(ctx, &f, &d, why, sizeof why)) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "forced '%s' differs from a direct call of it: %s", name, why);
            failed = true;
        } else {
            forced_ok++;
        }
        kv_case_outputs_free(&f);
        kv_case_outputs_free(&d);
    }
    if (kv_tune_force_set(saved) != KV_OK && !failed) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot restore the force map '%s': %s", saved, kv_last_error_message());
        failed = true;
    }
    if (!failed)
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "choice '%s' (%d of %d variants compatible); %d forced variant%s equal direct calls bit for "
                            "bit; %d incompatible forced variant%s failed as they must",
                            choice, ncompat, nv, forced_ok, forced_ok == 1 ? "" : "s", refused_ok,
                            refused_ok == 1 ? "" : "s");
    kv_check_push(ctx, &r);
}

void kv_check_tune_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    if (c->expect != KV_OK) {
        kv_check_result r;
        kv_check_result_begin(&r, ctx, "tune", NULL);
        kv_check_result_set(&r, KV_RESULT_SKIP, "expect=%s: the case has no output to compare",
                            kv_case_expect_name(c->expect));
        kv_check_push(ctx, &r);
        return;
    }
    /* This check judges the tuner's own (timed, cached, forced) choice:
     * the untimed mode the other checks run in (check.c) is left here. */
    const bool was_untimed = kv_tune_untimed_mode_set(false);
    int rows = 0;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        if (!kv_tune_is_dispatching(ctx->op, (kv_key)k)) continue;
        if (kv_allocator_for((kv_device_type)k) == NULL) continue;
        if (kv_inflight_excluded() & kv_keyset_of((kv_key)k)) continue; /* it crashed this case: the rerun */
        /* device=X cases check X's variants; CPU cases every backend's. */
        if (c->device.type != KV_DEVICE_CPU && c->device.type != (kv_device_type)k) continue;
        tune_backend(ctx, (kv_key)k);
        rows++;
    }
    if (rows == 0) {
        kv_check_result r;
        kv_check_result_begin(&r, ctx, "tune", NULL);
        kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s has no perf_dispatch variant set on %s", c->op,
                            kv_device_type_name(c->device.type));
        kv_check_push(ctx, &r);
    }
    kv_tune_untimed_mode_set(was_untimed);
}
