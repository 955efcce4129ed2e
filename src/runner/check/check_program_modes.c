/* A program under its modes, step by step (runner/check/check_program_modes.h).
 *
 * grad, no_grad, autocast, functionalize and trace keep a program's steps:
 * each step is still one call of its op, with the mode around it. So the
 * row is per step and teacher-forced like program:<Key>: step k runs on
 * the case's device through kv_call (the modes are dispatch keys and TLS
 * state, so only the full dispatcher meets them) on the truths of its
 * inputs, inside a mode session (runner/exec/mode_session.h) that enters
 * the case's modes around that one call, and then
 *   - the mode must have left its trace, exactly as the one-op lazy check
 *     asks (autograd recorded a node; no_grad ran no Autograd kernel and
 *     no output requires grad; autocast made exactly its policy's casts;
 *     the functional graph holds the op; the trace recorder saw it);
 *   - each output must be right: within the op's tolerance rule of the
 *     step's truth (bounds from its inputs' truths). Under autocast the
 *     truth is that of the op on its inputs cast the way the policy casts
 *     them (kv_autocast_expected_casts): the exact generator's result on
 *     the cast truths, compared by the rule for the cast problem, as the
 *     one-op lazy check compares autocast with the reference on cast
 *     inputs.
 * Under grad and no_grad every floating input requires grad (a leaf per
 * step). Inputs are contiguous and carry no lazy bits here: the bits have
 * the program:<Key> and fastpath rows, the modes this one. The free runs
 * under the modes are the accel fastpath rows (ON vs OFF per step). */
#include "runner/check/check_program_modes.h"

#include <stdio.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/ops.h"
#include "kv/tune.h"
#include "runner/check/check_program_util.h"
#include "runner/check/check_util.h"
#include "runner/exec/inflight.h"
#include "runner/exec/lazy_inputs.h"
#include "runner/exec/mode_session.h"

#define PM_WHY 600

kv_status kv_prog_step_under_modes(const kv_program *p, int k, kv_prog_values *vals, unsigned modes, unsigned zero,
                                   kv_device dev, bool *evidence, char *why, int cap) {
    const kv_op *op = kv_op_find(p->steps[k].op);
    *evidence = false;
    if (op == NULL) return kv_last_error();
    kv_case_inputs in;
    kv_status st = kv_program_step_inputs(p, k, vals->v, &in);
    if (st != KV_OK) return st;
    kv_case sc;
    kv_program_step_case(p, k, &in, dev, &sc);
    sc.modes = modes;
    for (int i = 0; i < in.ntensors; i++)
        if (zero && in.tensors[i] && kv_keyset_has(in.tensors[i]->keys, KV_KEY_ZERO_TENSOR)) sc.lazy[i] |= KV_CASE_LAZY_ZERO;
    kv_mode_call call = { &in, NULL, { 0 } };
    for (int i = 0; i < in.ntensors; i++) call.in_bits_before[i] = in.tensors[i] ? in.tensors[i]->keys & KV_KEYSET_LAZY : 0;
    kv_mode_session ms;
    kv_case_outputs out;
    memset(&out, 0, sizeof out);
    if ((st = kv_mode_session_begin(&ms, &sc, op)) == KV_OK) {
        st = kv_case_invoke(op, &in, 0, &out);
        kv_mode_session_end(&ms);
    }
    if (st != KV_OK) {
        snprintf(why, (size_t)cap, "%s: %.400s", kv_status_name(st), kv_last_error_message());
    } else {
        char msg[PM_WHY] = "";
        call.out = &out;
        *evidence = kv_mode_session_verdict(&ms, &call, msg, (int)sizeof msg, why, cap);
        st = kv_program_step_store(p, k, &out, vals);
    }
    kv_mode_session_free(&ms);
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&in);
    return st;
}

/* The truth of step k under autocast: the step's inputs cast as the policy
 * casts them, and the exact result of the op on them. `cin`, `csc` and
 * `exp` are the cast problem (owned by the caller on KV_OK). */
kv_status kv_prog_autocast_truth(const kv_program *p, int k, const kv_op *op, const kv_prog_values *truth,
                                 const kv_case *sc, kv_dtype ac, kv_case_inputs *cin, kv_case *csc,
                                 kv_case_outputs *exp) {
    memset(exp, 0, sizeof *exp);
    kv_dtype cast_to[KV_CASE_MAX_INPUTS];
    kv_autocast_expected_casts(sc, op, ac, cast_to);
    kv_status st = kv_program_step_inputs(p, k, truth->v, cin);
    if (st != KV_OK) return st;
    for (int i = 0; i < cin->ntensors; i++) {
        if (cin->tensors[i] == NULL || cast_to[i] == KV_DTYPE_COUNT || cast_to[i] == cin->tensors[i]->dtype) continue;
        kv_tensor *c = kv__to_copy(cin->tensors[i], &cast_to[i], NULL, NULL, NULL, false, NULL);
        if (c == NULL) return kv_last_error();
        kv_case_inputs_replace(cin, i, c);
    }
    kv_program_step_case(p, k, cin, KV_DEVICE_CPU0, csc);
    const bool was_ref = kv_tune_reference_mode_set(true);
    st = kv_case_invoke(op, cin, kv_keyset_of(KV_KEY_CPU), exp);
    kv_tune_reference_mode_set(was_ref);
    if (st == KV_OK) st = kv_check_materialize(exp);
    if (st == KV_OK) st = kv_exact_golden_given(csc, op, cin, exp, NULL);
    return st;
}

/* Step k under the modes; false with r set. */
static bool pm_step(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *truth, int k,
                    kv_check_result *r) {
    const kv_prog_step *s = &p->steps[k];
    const kv_op *op = kv_op_find(s->op);
    const unsigned modes = ctx->c->modes;
    /* A program with `backward` runs its steps with grad on (no_grad is
     * refused there): each step must also record its node. */
    const bool grad = (modes & ((1u << KV_MODE_GRAD) | (1u << KV_MODE_NO_GRAD))) != 0 || p->backward >= 0;
    const kv_dtype ac = kv_case_autocast_dtype(ctx->c);
    char label[400];
    kv_prog_step_label(p, k, -1, label, sizeof label);
    kv_case_inputs tin, din;
    memset(&din, 0, sizeof din);
    kv_prog_values placed;
    memset(&placed, 0, sizeof placed);
    kv_status st = kv_program_step_inputs(p, k, truth->v, &tin);
    for (int v = 0; v < p->nvalues && st == KV_OK; v++) {
        bool used = false;
        for (int i = 0; i < tin.ntensors; i++) used |= tin.tensors[i] != NULL && tin.tensors[i] == truth->v[v];
        if (!used) continue;
        const bool wants = grad && (kv_dtype_is_floating(truth->v[v]->dtype) || kv_dtype_is_complex(truth->v[v]->dtype));
        kv_tensor *leaf = NULL;
        placed.v[v] = kv_lazy_input_build(truth->v[v], 0, KV_LAYOUT_CONTIGUOUS, ctx->c->device, wants, false, &leaf);
        kv_tensor_release(leaf);
        if (placed.v[v] == NULL) st = kv_last_error();
    }
    if (st == KV_OK) st = kv_program_step_inputs(p, k, placed.v, &din);
    kv_prog_values_free(&placed);
    if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "%s: cannot place its inputs: %s", label, kv_last_error_message());
        kv_case_inputs_free(&tin);
        kv_case_inputs_free(&din);
        return false;
    }
    kv_case sc;
    kv_program_step_case(p, k, &tin, ctx->c->device, &sc);
    sc.modes = modes | (p->backward >= 0 ? 1u << KV_MODE_GRAD : 0u);
    kv_mode_session ms;
    memset(&ms, 0, sizeof ms);
    kv_case_outputs out;
    memset(&out, 0, sizeof out);
    if ((st = kv_mode_session_begin(&ms, &sc, op)) == KV_OK) {
        st = kv_case_invoke(op, &din, 0, &out);
        kv_mode_session_end(&ms);
    }
    bool ok = false;
    char msg[PM_WHY] = "", why[PM_WHY] = "";
    const kv_mode_call call = { &din, &out, { 0 } };
    if (st != KV_OK) {
        kv_check_result_set(r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_FAIL),
                            "%s failed under the case's modes on the truths of its inputs: %s: %s", label,
                            kv_status_name(st), kv_last_error_message());
    } else if (!kv_mode_session_verdict(&ms, &call, msg, (int)sizeof msg, why, (int)sizeof why)) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: %s", label, why);
    } else if ((st = kv_check_materialize(&out)) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: cannot materialize its outputs: %s", label, kv_last_error_message());
    } else {
        ok = true;
        for (int i = 0; i < out.n && ok; i++) {
            kv_tensor *h = kv_backend_readable(out.t[i]);
            if (h == NULL) {
                kv_check_result_set(r, KV_RESULT_ERROR, "%s: output %d: %s", label, i, kv_last_error_message());
                ok = false;
                break;
            }
            kv_tensor_release(out.t[i]);
            out.t[i] = h;
        }
        if (ok && ac == KV_DTYPE_COUNT) {
            for (int i = 0; i < out.n && ok; i++)
                if (s->out[i] >= 0) ok = kv_prog_compare(p, k, i, &sc, &tin, truth->v[s->out[i]], out.t[i], r);
        } else if (ok) {
            kv_case_inputs cin;
            memset(&cin, 0, sizeof cin);
            kv_case csc;
            kv_case_outputs exp;
            if ((st = kv_prog_autocast_truth(p, k, op, truth, &sc, ac, &cin, &csc, &exp)) != KV_OK) {
                kv_check_result_set(r, KV_RESULT_ERROR, "%s: the truth on the autocast inputs: %s", label,
                                    kv_last_error_message());
                ok = false;
            }
            for (int i = 0; i < out.n && ok; i++)
                if (s->out[i] >= 0) ok = kv_prog_compare(p, k, i, &csc, &cin, exp.t[i], out.t[i], r);
            kv_case_outputs_free(&exp);
            kv_case_inputs_free(&cin);
        }
    }
    kv_mode_session_free(&ms);
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&tin);
    kv_case_inputs_free(&din);
    return ok;
}

void kv_check_program_modes(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *truth) {
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "program:modes", ctx->c->device.type == KV_DEVICE_ACCEL ? "accel" : "cpu");
    kv_inflight_set_check("program:modes");
    int done = 0;
    for (int k = 0; k < p->nsteps && pm_step(ctx, p, truth, k, &r); k++) done++;
    if (done == p->nsteps) {
        char modes[128] = "";
        for (int m = 0; m < KV_MODE_COUNT; m++)
            if (ctx->c->modes & (1u << m))
                snprintf(modes + strlen(modes), sizeof modes - strlen(modes), "%s%s", modes[0] ? "+" : "",
                         kv_case_mode_name((kv_case_mode)m));
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "%d steps under %s%s, teacher-forced: each left the mode's trace and is within its op's "
                            "tolerance of its truth%s",
                            done, modes,
                            p->backward >= 0 && !(ctx->c->modes & (1u << KV_MODE_GRAD)) ? " with grad on (backward)" : "",
                            kv_case_autocast_dtype(ctx->c) != KV_DTYPE_COUNT ? " on the autocast inputs" : "");
    }
    kv_inflight_set_check("");
    kv_check_push(ctx, &r);
}
