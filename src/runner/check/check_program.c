/* The checks of a program case (runner/program/program.h).
 *
 * The truth. Step by step, each step's exact result on the truth of the
 * steps before it: the reference kernel (reference mode) runs the step on
 * the earlier truths, and the exact generator (runner/golden/exact.h)
 * overwrites every floating element with the correctly rounded value of
 * the op on those same inputs. So every step's truth is what the per-op
 * goldens are — the correctly rounded result of one op on stored inputs —
 * and depends on the inputs and MPFR only, never on a kernel's rounding
 * (the store regenerates bit for bit on another machine).
 *
 * Rows (one case can fail several; every failing row names the FIRST
 * step that diverged, its number, op and value):
 *   golden            (device cpu) every step output's truth against the
 *                     store, key = the case's golden key, outputs in step
 *                     order; --regen-golden records them;
 *   program:<Key>     teacher-forced per step: step k runs on the backend
 *                     with the truths of its inputs placed on its device
 *                     (a program input in its layout= and, on accel, with
 *                     its lazy= bits; every other value contiguous), and
 *                     each output is compared with step k's truth by
 *                     the tolerance table's rule for that op and dtype
 *                     (kv_tol_rule_for, bounds from the truths of the
 *                     inputs) — the per-op variants rule, since the inputs
 *                     are exact values as in a one-op case. Device cpu:
 *                     CPU/ref (reference mode), CPU (the dispatched
 *                     kernels) and every other backend with kernels;
 *                     device accel: Accel, through kv_call and the boxing
 *                     layer. A step whose op the backend lacks makes the
 *                     row UNSUPPORTED naming it;
 *   fastpath:<gate>   (device accel) the program runs free (each step on
 *                     the previous steps' accel outputs, views and all)
 *                     with every fast path on, and with the kill switch
 *                     and every special path off (slow); every step's
 *                     outputs must be equal bit for bit (bytes, NaN
 *                     payloads, signed zeros, dtype, sizes, strides,
 *                     storage offset), and the fast path must have fired
 *                     in some step. A `kill` run (only the kill switch
 *                     set, the special paths on) is compared with slow
 *                     too: the special paths themselves (cat's legacy
 *                     empty inputs) must not change a value. With a
 *                     `backward LOSS` line every floating input requires
 *                     grad: each step's requires_grad and grad_fn must
 *                     match too, and after backward from LOSS every
 *                     input's .grad bit for bit (the fast path is then
 *                     not required to fire: autograd is live).
 * A program that runs no step is ERROR, never a pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/accel.h"
#include "kv/autograd.h"
#include "kv/backend.h"
#include "kv/lazy.h"
#include "kv/tune.h"
#include "runner/check/check_fastpath.h"
#include "runner/check/check_program_grad.h"
#include "runner/check/check_program_modes.h"
#include "runner/check/check_program_util.h"
#include "runner/check/check_program_vmap.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"
#include "runner/exec/inflight.h"
#include "runner/exec/inputs.h"
#include "runner/exec/lazy_inputs.h"
#include "runner/exec/mode_session.h"
#include "runner/golden/exact.h"
#include "runner/golden/golden.h"
#include "runner/program/program.h"

/* Messages may be cut at their buffer: the value is used so that the
 * compiler does not flag the (intended) truncation. */
#define PROG_FMT(...)                    \
    do {                                 \
        if (snprintf(__VA_ARGS__) < 0) { \
        }                                \
    } while (0)
#define PROG_LABEL 400

/* "step 3 (gelu, cases/programs/mlp.prog:7) -> a" for messages. */
void kv_prog_step_label(const kv_program *p, int k, int out, char *buf, int cap) {
    const kv_prog_step *s = &p->steps[k];
    if (out >= 0 && s->out[out] >= 0)
        PROG_FMT(buf, (size_t)cap, "step %d (%.48s, %.200s:%d) -> %.31s", k + 1, s->op, p->path, s->line,
                 p->value_names[s->out[out]]);
    else
        PROG_FMT(buf, (size_t)cap, "step %d (%.48s, %.200s:%d)", k + 1, s->op, p->path, s->line);
}

/* ---- the truth ---- */

kv_status kv_prog_truth(const kv_program *p, const kv_case *c, kv_exact_stats *stats, kv_prog_values *truth,
                        int *steps_run, char *why, int cap) {
    *steps_run = 0;
    kv_status st = kv_program_inputs(p, c, truth);
    if (st != KV_OK) {
        PROG_FMT(why, (size_t)cap, "cannot make the inputs: %s", kv_last_error_message());
        return st;
    }
    for (int k = 0; k < p->nsteps; k++) {
        const kv_op *op = kv_op_find(p->steps[k].op);
        kv_case_inputs in;
        if (op == NULL || (st = kv_program_step_inputs(p, k, truth->v, &in)) != KV_OK) {
            char label[PROG_LABEL];
            kv_prog_step_label(p, k, -1, label, sizeof label);
            PROG_FMT(why, (size_t)cap, "%s: cannot box its arguments: %s", label, kv_last_error_message());
            return op == NULL ? KV_ERR_UNKNOWN_OP : st;
        }
        kv_case sc;
        kv_program_step_case(p, k, &in, KV_DEVICE_CPU0, &sc);
        kv_case_outputs out;
        const bool was_ref = kv_tune_reference_mode_set(true);
        st = kv_case_invoke(op, &in, kv_keyset_of(KV_KEY_CPU), &out);
        kv_tune_reference_mode_set(was_ref);
        if (st == KV_OK) st = kv_check_materialize(&out);
        if (st == KV_OK) st = kv_exact_golden_given(&sc, op, &in, &out, stats);
        kv_case_inputs_free(&in);
        if (st != KV_OK) {
            char label[PROG_LABEL];
            kv_prog_step_label(p, k, -1, label, sizeof label);
            PROG_FMT(why, (size_t)cap, "%s: the reference failed: %s", label, kv_last_error_message());
            kv_case_outputs_free(&out);
            return st;
        }
        for (int i = 0; i < out.n; i++) {
            const int v = p->steps[k].out[i];
            if (v < 0) {
                kv_tensor_release(out.t[i]);
            } else {
                kv_tensor_release(truth->v[v]);
                truth->v[v] = out.t[i];
            }
        }
        (*steps_run)++;
    }
    return KV_OK;
}

/* ---- golden ---- */

static void prog_golden(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *truth) {
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "golden", "cpu");
    const kv_tensor *outs[KV_GOLDEN_MAX_OUTPUTS];
    int where_step[KV_GOLDEN_MAX_OUTPUTS], where_out[KV_GOLDEN_MAX_OUTPUTS];
    int n = 0;
    for (int k = 0; k < p->nsteps; k++)
        for (int i = 0; i < p->steps[k].nout; i++) {
            const int v = p->steps[k].out[i];
            if (v < 0) continue;
            if (n == KV_GOLDEN_MAX_OUTPUTS) {
                kv_check_result_set(&r, KV_RESULT_ERROR, "more than %d step outputs to store", KV_GOLDEN_MAX_OUTPUTS);
                kv_check_push(ctx, &r);
                return;
            }
            where_step[n] = k;
            where_out[n] = i;
            outs[n++] = truth->v[v];
        }
    char key[2 * KV_CASE_ID_MAX];
    kv_case_golden_key(ctx->c, key, (int)sizeof key);
    kv_golden_store *store = ctx->env->golden;
    if (store == NULL) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "no golden store");
    } else if (ctx->env->regen_golden) {
        if (kv_golden_put(store, "programs", key, outs, n) != KV_OK)
            kv_check_result_set(&r, KV_RESULT_ERROR, "cannot record the golden: %s", kv_last_error_message());
        else
            kv_check_result_set(&r, KV_RESULT_PASS, "recorded %d step outputs (written when the run saves the store)", n);
    } else if (kv_golden_output_count(store, key) == 0 && kv_golden_live_for(ctx->env, ctx->c)) {
        /* --golden=live, or a program typed on the command line: the other
         * rows compare with the truth computed live, as for an op. */
        kv_check_result_set(&r, KV_RESULT_SKIP, "live reference: no stored golden for key %s", key);
    } else if (kv_golden_output_count(store, key) != n) {
        kv_check_result_set(&r, KV_RESULT_ERROR,
                            "the store has %d outputs for key %s, the program %d (run kvrun --regen-golden)",
                            kv_golden_output_count(store, key), key, n);
    } else {
        for (int i = 0; i < n; i++) {
            kv_golden_verdict v;
            if (kv_golden_verify(store, key, i, outs[i], &v) != KV_OK) {
                kv_check_result_set(&r, KV_RESULT_ERROR, "cannot verify output %d: %s", i, kv_last_error_message());
                break;
            }
            if (v.outcome != KV_GOLDEN_OK) {
                char label[PROG_LABEL];
                kv_prog_step_label(p, where_step[i], where_out[i], label, sizeof label);
                kv_check_result_set(&r, v.outcome == KV_GOLDEN_DIFFERS ? KV_RESULT_FAIL : KV_RESULT_ERROR,
                                    "%s: the truth is %s against the store: %s", label,
                                    kv_golden_outcome_name(v.outcome), v.message);
                kv_golden_verdict_release(&v);
                break;
            }
            kv_golden_verdict_release(&v);
        }
        if (r.status == KV_RESULT_PASS)
            kv_check_result_set(&r, KV_RESULT_PASS, "%d step outputs of %d steps equal the store", n, p->nsteps);
    }
    kv_check_push(ctx, &r);
}

/* ---- teacher-forced backends ---- */

/* Compares `got` (host-readable) with step k output i's truth; false with
 * the row set to FAIL. */
bool kv_prog_compare(const kv_program *p, int k, int i, const kv_case *sc, const kv_case_inputs *tin,
                         const kv_tensor *expected, const kv_tensor *got, kv_check_result *r) {
    char label[PROG_LABEL];
    kv_prog_step_label(p, k, i, label, sizeof label);
    kv_bound_kind bk = KV_BOUND_NONE;
    const kv_tol_entry *entry = NULL;
    kv_cmp_rule rule = kv_tol_rule_for(sc, got->dtype, &bk, &entry);
    if (rule.kind == KV_CMP_META) return true;
    double *bound = NULL;
    if (rule.kind == KV_CMP_BOUND &&
        kv_tol_bounds(bk, entry ? entry->value : 0, sc, tin, expected, i, &bound) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "%s: cannot compute the error bound: %s", label, kv_last_error_message());
        return false;
    }
    kv_cmp_report rep;
    const kv_status st = kv_compare(expected, got, &rule, bound, &rep);
    free(bound);
    if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: %s", label, kv_last_error_message());
        return false;
    }
    if (rep.mismatched == 0) return true;
    char rule_text[64], what[PROG_LABEL + 96];
    kv_cmp_rule_format(&rule, rule_text, (int)sizeof rule_text);
    PROG_FMT(what, sizeof what, "%s diverged first (rule %s)", label, rule_text);
    char summary[KV_RESULT_MESSAGE_MAX / 2];
    kv_cmp_report_summary(&rep, what, summary, (int)sizeof summary);
    kv_check_result_set(r, KV_RESULT_FAIL, "%s", summary);
    kv_cmp_report_to_result(&rep, r);
    return false;
}

/* One row: every step on `key` (or through kv_call on accel) from the
 * truths, compared with the truths. */
static void prog_backend_row(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *truth, kv_key key,
                             bool ref_mode, const char *variant) {
    kv_check_result r;
    char check[64];
    kv_check_backend_row_name("program", key, ref_mode ? "ref" : variant, check, (int)sizeof check);
    kv_check_result_begin(&r, ctx, check, kv_check_backend_label(key));
    kv_inflight_set_check(check);
    const kv_device_type dt = (kv_device_type)key;
    const bool via_call = dt == KV_DEVICE_ACCEL;
    /* program:CPU is the dispatcher as a user's call meets it: kv_call,
     * with the inputs' lazy bits on the cpu too (the bits' fallbacks
     * resolve them before the CPU kernel). The ref, variant and other
     * backends' rows call the backend's kernel alone, which never sees a
     * bit. */
    const bool dispatched = via_call || (key == KV_KEY_CPU && !ref_mode && variant == NULL);
    const kv_device dev = { dt, 0 };
    int done = 0, other = 0;
    for (int k = 0; k < p->nsteps && r.status == KV_RESULT_PASS; k++) {
        const kv_prog_step *s = &p->steps[k];
        const kv_op *op = kv_op_find(s->op);
        char label[PROG_LABEL];
        kv_prog_step_label(p, k, -1, label, sizeof label);
        if (!via_call && kv_op_entry_kind(op, key) != KV_ENTRY_KERNEL) {
            kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s: %s has no %s kernel", label, s->op, kv_key_name(key));
            break;
        }
        /* A variant row runs the steps whose op has that variant: the
         * others are another row's (counted in the message). */
        const int vi = variant && kv_tune_is_dispatching(op, key) ? kv_tune_variant_find(op, key, variant) : -1;
        if (variant && vi < 0) {
            other++;
            continue;
        }
        /* The truths of this step's inputs, placed on the device. */
        kv_prog_values placed;
        memset(&placed, 0, sizeof placed);
        kv_case_inputs tin;
        kv_status st = kv_program_step_inputs(p, k, truth->v, &tin);
        for (int v = 0; st == KV_OK && v < p->nvalues; v++) {
            bool used = false;
            for (int a = 0; a < KV_SCHEMA_MAX_ARGS; a++) {
                const kv_prog_arg *pa = &s->args[a];
                if (pa->kind == KV_PROG_ARG_VALUE && pa->value == v) used = true;
                for (int j = 0; pa->kind == KV_PROG_ARG_LIST && j < pa->nlist; j++) used |= pa->list[j] == v;
            }
            if (!used) continue;
            const unsigned bits = dispatched && v < p->ninputs ? p->inputs[v].lazy : 0;
            if (dt == KV_DEVICE_CPU && bits == 0 &&
                (v >= p->ninputs || p->inputs[v].layout == KV_LAYOUT_CONTIGUOUS)) {
                kv_tensor_retain(truth->v[v]);
                placed.v[v] = truth->v[v];
            } else if ((placed.v[v] = kv_lazy_input_build(
                            truth->v[v], bits,
                            v < p->ninputs ? p->inputs[v].layout : KV_LAYOUT_CONTIGUOUS, dev, false, false, NULL)) == NULL) {
                st = kv_last_error();
            }
        }
        kv_case_inputs din;
        memset(&din, 0, sizeof din);
        if (st == KV_OK) st = kv_program_step_inputs(p, k, placed.v, &din);
        if (st != KV_OK) {
            kv_check_result_set(&r, KV_RESULT_ERROR, "%s: cannot place its inputs on %s: %s", label,
                                kv_device_type_name(dt), kv_last_error_message());
            kv_case_inputs_free(&tin);
            kv_case_inputs_free(&din);
            kv_prog_values_free(&placed);
            break;
        }
        kv_case sc;
        kv_program_step_case(p, k, &tin, KV_DEVICE_CPU0, &sc);
        if (variant) {
            kv_ivalue slots[KV_STACK_MAX];
            kv_stack probe = kv_stack_on(slots, KV_STACK_MAX);
            for (int i = 0; i < din.nargs; i++) kv_stack_push(&probe, din.args[i]);
            if (!kv_tune_variant_compatible(op, key, vi, &probe)) {
                /* Its predicate refuses this call (dtype, strides, CPU
                 * features): as the one-op row's SKIP, not a failure. */
                other++;
                kv_case_inputs_free(&tin);
                kv_case_inputs_free(&din);
                kv_prog_values_free(&placed);
                continue;
            }
            kv_inflight_set_variant(variant);
            kv_tune_pin(op, key, variant);
        }
        kv_case_outputs out;
        const bool was_ref = kv_tune_reference_mode_set(ref_mode);
        st = kv_case_invoke(op, &din, dispatched ? 0 : kv_keyset_of(key), &out);
        kv_tune_reference_mode_set(was_ref);
        if (variant) {
            kv_tune_pin(NULL, key, NULL);
            kv_inflight_set_variant("");
        }
        if (st == KV_OK) st = kv_check_materialize(&out);
        for (int i = 0; st == KV_OK && i < out.n; i++) {
            kv_tensor *h = kv_backend_readable(out.t[i]);
            if (h == NULL) {
                st = kv_last_error();
                break;
            }
            kv_tensor_release(out.t[i]);
            out.t[i] = h;
        }
        if (st == KV_ERR_MISSING_KERNEL) {
            kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s: the %s kernel declined the call: %s", label,
                                kv_key_name(key), kv_last_error_message());
        } else if (st != KV_OK) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "%s failed on %s with '%s' (the reference passed): %s", label,
                                kv_key_name(key), kv_status_name(st), kv_last_error_message());
        } else if (out.n != s->nout) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "%s returned %d outputs on %s, the program names %d", label, out.n,
                                kv_key_name(key), s->nout);
        } else {
            for (int i = 0; i < out.n; i++) {
                if (s->out[i] < 0) continue;
                if (!kv_prog_compare(p, k, i, &sc, &tin, truth->v[s->out[i]], out.t[i], &r)) break;
            }
            if (r.status == KV_RESULT_PASS) done++;
        }
        kv_case_outputs_free(&out);
        kv_case_inputs_free(&tin);
        kv_case_inputs_free(&din);
        kv_prog_values_free(&placed);
    }
    kv_inflight_set_check("");
    /* PASS here means every step ran and matched: a program has at least
     * one step (the parser and the truth both refuse none). */
    if (r.status == KV_RESULT_PASS && variant && done == 0)
        kv_check_result_set(&r, KV_RESULT_SKIP, "no step's op has a variant '%s' that accepts its call", variant);
    else if (r.status == KV_RESULT_PASS && variant)
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "%d steps on variant '%s', each within its op's tolerance of the truth (%d steps whose op "
                            "has no such variant or whose call it refuses: the other rows')",
                            done, variant, other);
    else if (r.status == KV_RESULT_PASS)
        kv_check_result_set(&r, KV_RESULT_PASS, "%d steps, each within its op's tolerance of the truth", done);
    kv_check_push(ctx, &r);
}

/* Every CPU variant name of the program's ops, in first-seen order, "ref"
 * left out (program:CPU/ref is reference mode: every op's ref variant). */
static int prog_variant_names(const kv_program *p, kv_key key, const char **names, int cap) {
    int n = 0;
    for (int k = 0; k < p->nsteps; k++) {
        const kv_op *op = kv_op_find(p->steps[k].op);
        if (op == NULL || !kv_tune_is_dispatching(op, key)) continue;
        for (int i = 0; i < kv_tune_variant_count(op, key); i++) {
            const char *v = kv_tune_variant_name(op, key, i);
            bool seen = strcmp(v, "ref") == 0;
            for (int j = 0; j < n && !seen; j++) seen = strcmp(names[j], v) == 0;
            if (!seen && n < cap) names[n++] = v;
        }
    }
    return n;
}

/* The backends a cpu program runs on: as the variants check's sweep
 * (check_backend.c), without accel (the device=accel twin runs it). */
static bool prog_kernel_backend(kv_key key) {
    for (int i = 0; i < kv_op_count(); i++)
        if (kv_op_entry_kind(kv_op_at(i), key) == KV_ENTRY_KERNEL) return true;
    return false;
}

static void prog_backends(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *truth) {
    if (ctx->c->device.type != KV_DEVICE_CPU) {
        prog_backend_row(ctx, p, truth, kv_device_key(ctx->c->device), false, NULL);
        return;
    }
    prog_backend_row(ctx, p, truth, KV_KEY_CPU, true, NULL);
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        if (kv_allocator_for((kv_device_type)k) == NULL || k == KV_KEY_ACCEL) continue;
        if (k != KV_KEY_CPU && !prog_kernel_backend((kv_key)k)) continue;
        if (kv_inflight_excluded() & kv_keyset_of((kv_key)k)) continue;
        prog_backend_row(ctx, p, truth, (kv_key)k, false, NULL);
        /* One row per variant, as the one-op variants check has: a step
         * runs pinned to it where its op has it and accepts the call. */
        const char *names[KV_TUNE_MAX_VARIANTS * 4];
        const int nv = prog_variant_names(p, (kv_key)k, names, (int)(sizeof names / sizeof names[0]));
        for (int i = 0; i < nv; i++) prog_backend_row(ctx, p, truth, (kv_key)k, false, names[i]);
    }
}

/* ---- fast path ON vs OFF ---- */

typedef struct prog_switches {
    kv_accel_gate gate;
    bool redispatch;
    bool special[KV_ACCEL_SPECIAL_COUNT];
} prog_switches;

static prog_switches prog_switches_get(void) {
    prog_switches s;
    s.gate = kv_accel_gate_get();
    s.redispatch = kv_accel_redispatch_enabled();
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) s.special[i] = kv_accel_special_enabled((kv_accel_special)i);
    return s;
}

static void prog_switches_set(const prog_switches *s) {
    kv_accel_gate_set(s->gate);
    kv_accel_redispatch_set_enabled(s->redispatch);
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) kv_accel_special_set_enabled((kv_accel_special)i, s->special[i]);
}

/* One free run on accel: every value (outputs readable on the host, with
 * the device tensors' metadata kept beside them) and the path counts. */
typedef struct prog_run {
    kv_status status;
    int failed_step;             /* when status != KV_OK */
    char message[512];
    kv_prog_values host;         /* step outputs on the host */
    int64_t sizes[KV_PROG_MAX_VALUES][KV_MAX_DIMS], strides[KV_PROG_MAX_VALUES][KV_MAX_DIMS];
    int ndim[KV_PROG_MAX_VALUES];
    int64_t offset[KV_PROG_MAX_VALUES];
    kv_dtype dtype[KV_PROG_MAX_VALUES];
    bool requires_grad[KV_PROG_MAX_VALUES];
    char grad_fn[KV_PROG_MAX_VALUES][40]; /* "" for a leaf */
    kv_prog_values grads;        /* after backward: each input's .grad on the host, or NULL */
    kv_accel_counters calls;     /* every op, the whole program */
    int zero_steps;              /* steps that read a ZeroTensor */
    char zero_why[PROG_LABEL + 160]; /* the first such step whose ZeroTensor entry did not do its work */
} prog_run;

/* Whether a tensor argument of step k (in vals) carries the ZeroTensor bit. */
static bool prog_step_reads_zero(const kv_program *p, int k, const kv_prog_values *vals) {
    for (int v = 0; v < p->nvalues; v++)
        if (vals->v[v] && kv_keyset_has(vals->v[v]->keys, KV_KEY_ZERO_TENSOR) && kv_program_step_reads(&p->steps[k], v))
            return true;
    return false;
}

/* A step that read a ZeroTensor ran inside a session that counts the
 * ZeroTensor bit of its inputs (kv_prog_step_under_modes): the bit must
 * have left its trace as the one-op lazy check asks (`evidence`: the
 * fallback ran, or a view passed the bit on, or the op's own ZeroTensor
 * kernel materialized it), and an op whose entry is the fallback must
 * have taken no fast path: no gate may hand the bit to the target's
 * kernel. The first miss goes to run->zero_why. */
static void prog_zero_evidence(const kv_program *p, int k, bool evidence, const char *why, uint64_t fast,
                               prog_run *run) {
    if (run->zero_why[0] != '\0') return;
    const bool fallback = kv_op_entry_kind(kv_op_find(p->steps[k].op), KV_KEY_ZERO_TENSOR) == KV_ENTRY_FALLBACK;
    if (evidence && !(fallback && fast > 0)) return;
    char label[PROG_LABEL];
    kv_prog_step_label(p, k, -1, label, sizeof label);
    if (!evidence)
        PROG_FMT(run->zero_why, sizeof run->zero_why, "%s read a ZeroTensor: %s", label, why);
    else
        PROG_FMT(run->zero_why, sizeof run->zero_why,
                 "%s read a ZeroTensor: its fallback ran, but the fast path took the op %llu times", label,
                 (unsigned long long)fast);
}

static void prog_free_run(const kv_check_ctx *ctx, const kv_program *p, const prog_switches *sw, prog_run *run) {
    memset(run, 0, sizeof *run);
    run->failed_step = -1;
    kv_prog_values logical, vals, leaves;
    memset(&vals, 0, sizeof vals);
    memset(&leaves, 0, sizeof leaves);
    kv_status st = kv_program_inputs(p, ctx->c, &logical);
    /* Under backward the leaf that requires grad is the tensor of stored
     * values; a lazy input is the chain of lazy views autograd records
     * from it (runner/exec/lazy_inputs.h). */
    for (int i = 0; st == KV_OK && i < p->ninputs; i++) {
        /* A ZeroTensor input is a constant, as PyTorch's efficient zeros
         * are: it never requires grad. */
        const bool grad = (p->backward >= 0 || (ctx->c->modes & ((1u << KV_MODE_GRAD) | (1u << KV_MODE_NO_GRAD)))) &&
                          !(p->inputs[i].lazy & KV_CASE_LAZY_ZERO) &&
                          (kv_dtype_is_floating(logical.v[i]->dtype) || kv_dtype_is_complex(logical.v[i]->dtype));
        if ((vals.v[i] = kv_lazy_input_build(logical.v[i], p->inputs[i].lazy, p->inputs[i].layout, ctx->c->device, grad,
                                             false, &leaves.v[i])) == NULL)
            st = kv_last_error();
        else if (grad && leaves.v[i] == NULL) {
            kv_tensor_retain(vals.v[i]);
            leaves.v[i] = vals.v[i];
        }
    }
    kv_prog_values_free(&logical);
    if (st != KV_OK) {
        run->status = st;
        PROG_FMT(run->message, sizeof run->message, "cannot place the inputs on accel: %s", kv_last_error_message());
        kv_prog_values_free(&vals);
        kv_prog_values_free(&leaves);
        return;
    }
    prog_switches_set(sw);
    kv_accel_counters_reset();
    /* The case's modes (no-grad guard, autocast, functionalize, a trace
     * recorder) around the steps only: reading the values back runs ops
     * of its own. The session is keyed by the first step's op, which only
     * its evidence (unused here) looks at. */
    kv_mode_session ms;
    memset(&ms, 0, sizeof ms);
    kv_case mc = *ctx->c;
    snprintf(mc.op, sizeof mc.op, "%s", p->steps[0].op);
    bool entered = false;
    if (ctx->c->modes != 0) {
        if ((st = kv_mode_session_begin(&ms, &mc, kv_op_find(mc.op))) != KV_OK) {
            run->status = st;
            PROG_FMT(run->message, sizeof run->message, "cannot enter the modes: %s", kv_last_error_message());
        } else {
            entered = true;
        }
    }
    for (int k = 0; run->status == KV_OK && k < p->nsteps; k++) {
        const bool zero = prog_step_reads_zero(p, k, &vals);
        const kv_accel_counters before = kv_accel_counters_total();
        bool evidence = true;
        char ewhy[PROG_LABEL] = "";
        st = zero ? kv_prog_step_under_modes(p, k, &vals, 0, KV_CASE_LAZY_ZERO, ctx->c->device, &evidence, ewhy,
                                             (int)sizeof ewhy)
                  : kv_program_step_run(p, k, &vals, 0);
        if (st == KV_OK && zero) {
            const kv_accel_counters after = kv_accel_counters_total();
            run->zero_steps++;
            prog_zero_evidence(p, k, evidence, ewhy, after.fast + after.manual - before.fast - before.manual, run);
        }
        if (st != KV_OK) {
            run->status = st;
            run->failed_step = k;
            PROG_FMT(run->message, sizeof run->message, "%s: %s", kv_status_name(st),
                     zero ? ewhy : kv_last_error_message());
            break;
        }
    }
    if (entered) kv_mode_session_end(&ms);
    kv_mode_session_free(&ms);
    if (run->status == KV_OK && p->backward >= 0) {
        st = kv_backward(vals.v[p->backward], NULL);
        if (st != KV_OK) {
            run->status = st;
            snprintf(run->message, sizeof run->message, "backward from %s: %s: %s", p->value_names[p->backward],
                     kv_status_name(st), kv_last_error_message());
        }
        for (int i = 0; st == KV_OK && i < p->ninputs; i++) {
            if (leaves.v[i] == NULL) continue;
            kv_tensor *g = NULL;
            if ((st = kv_lazy_leaf_grad(leaves.v[i], &g)) != KV_OK) {
                run->status = st;
                snprintf(run->message, sizeof run->message, "the .grad of %s: %s", p->value_names[i],
                         kv_last_error_message());
                break;
            }
            if (g == NULL) continue;
            run->grads.v[i] = kv_backend_readable(g);
            kv_tensor_release(g);
            if (run->grads.v[i] == NULL) {
                run->status = st = kv_last_error();
                snprintf(run->message, sizeof run->message, "the .grad of %s: cannot read it: %s", p->value_names[i],
                         kv_last_error_message());
            }
        }
    }
    run->calls = kv_accel_counters_total();
    for (int v = p->ninputs; run->status == KV_OK && v < p->nvalues; v++) {
        kv_tensor *t = vals.v[v];
        if (t == NULL) continue;
        run->ndim[v] = t->ndim;
        memcpy(run->sizes[v], t->sizes, sizeof(int64_t) * (size_t)t->ndim);
        memcpy(run->strides[v], t->strides, sizeof(int64_t) * (size_t)t->ndim);
        run->offset[v] = t->offset;
        run->dtype[v] = t->dtype;
        run->requires_grad[v] = kv_tensor_requires_grad(t);
        const char *gfn = kv_tensor_grad_fn_name(t);
        snprintf(run->grad_fn[v], sizeof run->grad_fn[v], "%s", gfn ? gfn : "");
        kv_case_outputs one = { .n = 1 };
        kv_tensor_retain(t);
        one.t[0] = t;
        st = kv_check_materialize(&one);
        kv_tensor *h = st == KV_OK ? kv_backend_readable(one.t[0]) : NULL;
        kv_case_outputs_free(&one);
        if (h == NULL) {
            run->status = kv_last_error();
            PROG_FMT(run->message, sizeof run->message, "value %s: cannot read it: %s", p->value_names[v],
                     kv_last_error_message());
            break;
        }
        run->host.v[v] = h;
    }
    kv_prog_values_free(&vals);
    kv_prog_values_free(&leaves);
}

/* The first step whose outputs differ between two runs; false with `why`. */
static bool prog_runs_same(const kv_program *p, const prog_run *a, const prog_run *b, kv_check_result *r, char *why,
                           int cap) {
    const kv_cmp_rule exact = { KV_CMP_BITWISE, 0, false, true };
    for (int k = 0; k < p->nsteps; k++) {
        const kv_prog_step *s = &p->steps[k];
        for (int i = 0; i < s->nout; i++) {
            const int v = s->out[i];
            if (v < 0) continue;
            char label[PROG_LABEL];
            kv_prog_step_label(p, k, i, label, sizeof label);
            bool meta = a->ndim[v] == b->ndim[v] && a->dtype[v] == b->dtype[v] && a->offset[v] == b->offset[v];
            for (int d = 0; meta && d < a->ndim[v]; d++)
                meta = a->sizes[v][d] == b->sizes[v][d] && a->strides[v][d] == b->strides[v][d];
            if (!meta) {
                char sa[96], sb[96], ta[96], tb[96];
                kv_shape_format(a->sizes[v], a->ndim[v], sa, (int)sizeof sa);
                kv_shape_format(b->sizes[v], b->ndim[v], sb, (int)sizeof sb);
                kv_shape_format(a->strides[v], a->ndim[v], ta, (int)sizeof ta);
                kv_shape_format(b->strides[v], b->ndim[v], tb, (int)sizeof tb);
                PROG_FMT(why, (size_t)cap,
                         "%.160s diverged first: metadata %s sizes %.40s strides %.40s offset %lld vs %s sizes %.40s "
                         "strides %.40s offset %lld",
                         label, kv_dtype_name(a->dtype[v]), sa, ta, (long long)a->offset[v], kv_dtype_name(b->dtype[v]),
                         sb, tb, (long long)b->offset[v]);
                return false;
            }
            if (a->requires_grad[v] != b->requires_grad[v] || strcmp(a->grad_fn[v], b->grad_fn[v]) != 0) {
                snprintf(why, (size_t)cap, "%.200s diverged first: requires_grad %d grad_fn '%s' vs requires_grad %d grad_fn '%s'",
                         label, a->requires_grad[v], a->grad_fn[v], b->requires_grad[v], b->grad_fn[v]);
                return false;
            }
            kv_cmp_report rep;
            if (kv_compare(a->host.v[v], b->host.v[v], &exact, NULL, &rep) != KV_OK) {
                PROG_FMT(why, (size_t)cap, "%s diverged first: %s", label, kv_last_error_message());
                return false;
            }
            if (rep.mismatched > 0) {
                char what[PROG_LABEL + 32];
                PROG_FMT(what, sizeof what, "%s diverged first", label);
                kv_cmp_report_summary(&rep, what, why, cap);
                kv_cmp_report_to_result(&rep, r);
                return false;
            }
        }
    }
    for (int i = 0; p->backward >= 0 && i < p->ninputs; i++) {
        const kv_tensor *ga = a->grads.v[i], *gb = b->grads.v[i];
        if (ga == NULL && gb == NULL) continue;
        char what[PROG_LABEL];
        snprintf(what, sizeof what, "backward from %.31s: the .grad of input %.31s", p->value_names[p->backward],
                 p->value_names[i]);
        if (ga == NULL || gb == NULL) {
            snprintf(why, (size_t)cap, "%s: %s vs %s", what, ga ? "set" : "none", gb ? "set" : "none");
            return false;
        }
        kv_cmp_report rep;
        if (kv_compare(ga, gb, &exact, NULL, &rep) != KV_OK) {
            snprintf(why, (size_t)cap, "%s: %s", what, kv_last_error_message());
            return false;
        }
        if (rep.mismatched > 0) {
            kv_cmp_report_summary(&rep, what, why, cap);
            kv_cmp_report_to_result(&rep, r);
            return false;
        }
    }
    return true;
}

static void prog_free_run_release(prog_run *r) {
    kv_prog_values_free(&r->host);
    kv_prog_values_free(&r->grads);
}

/* How many steps have a kernel of the accel target's own. */
static int prog_target_kernel_steps(const kv_program *p) {
    const kv_key target = kv_accel_target();
    int n = 0;
    for (int k = 0; target != KV_KEY_NONE && k < p->nsteps; k++) {
        const kv_op *op = kv_op_find(p->steps[k].op);
        n += op != NULL && kv_op_entry_kind(op, target) == KV_ENTRY_KERNEL;
    }
    return n;
}

static void prog_fastpath(const kv_check_ctx *ctx, const kv_program *p) {
    const prog_switches ambient = prog_switches_get();
    prog_switches slow = { KV_ACCEL_GATE_EXACT, false, { false } };
    for (int g = 0; g <= (int)KV_ACCEL_GATE_EXACT; g++) {
        if (!(kv_check_fastpath_gates() & KV_FASTPATH_GATE_BIT(g))) continue;
        kv_check_result r;
        char check[32];
        PROG_FMT(check, sizeof check, "fastpath:%s", kv_accel_gate_name((kv_accel_gate)g));
        kv_check_result_begin(&r, ctx, check, "accel");
        kv_inflight_set_check(check);
        prog_switches on = { (kv_accel_gate)g, !kv_check_fastpath_killed_for_tests(), { false } };
        for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) on.special[i] = true;
        prog_switches kill = on;
        kill.redispatch = false;
        slow.gate = (kv_accel_gate)g;
        /* About 20 KiB each: on the stack, no allocation to fail. */
        prog_run runs[3];
        prog_free_run(ctx, p, &slow, &runs[0]);
        prog_free_run(ctx, p, &on, &runs[1]);
        prog_free_run(ctx, p, &kill, &runs[2]);
        prog_switches_set(&ambient);
        static const char *names[3] = { "slow", "on", "kill" };
        char why[KV_RESULT_MESSAGE_MAX / 2];
        for (int i = 0; i < 3 && r.status == KV_RESULT_PASS; i++) {
            if (runs[i].status == KV_OK) continue;
            char label[PROG_LABEL];
            kv_prog_step_label(p, runs[i].failed_step >= 0 ? runs[i].failed_step : 0, -1, label, sizeof label);
            /* A step the target has no kernel for (oneDNN's cat of a
             * legacy empty tensor) is unsupported, as in the one-op check:
             * counted, never a failure; only a path that fails where slow
             * did not is one. */
            const kv_result_status bad = i > 0                                      ? KV_RESULT_FAIL
                                         : runs[i].status == KV_ERR_MISSING_KERNEL ? KV_RESULT_UNSUPPORTED
                                                                                    : KV_RESULT_ERROR;
            kv_check_result_set(&r, bad, "%s: the %s run failed on accel (target %s): %s", label, names[i],
                                kv_accel_target_name(), runs[i].message);
        }
        for (int i = 0; i < 3 && r.status == KV_RESULT_PASS; i++)
            if (runs[i].zero_why[0])
                kv_check_result_set(&r, KV_RESULT_FAIL, "the %s run (gate %s): %s", names[i],
                                    kv_accel_gate_name((kv_accel_gate)g), runs[i].zero_why);
        for (int i = 1; i < 3 && r.status == KV_RESULT_PASS; i++)
            if (!prog_runs_same(p, &runs[0], &runs[i], &r, why, (int)sizeof why))
                kv_check_result_set(&r, KV_RESULT_FAIL, "%s vs slow (gate %s): %s", names[i],
                                    kv_accel_gate_name((kv_accel_gate)g), why);
        if (r.status == KV_RESULT_PASS && runs[0].calls.fast + runs[0].calls.manual > 0)
            kv_check_result_set(&r, KV_RESULT_FAIL, "the slow run took the fast path %llu times",
                                (unsigned long long)(runs[0].calls.fast + runs[0].calls.manual));
        /* Under backward autograd is live on every step that touches an
         * input, so the slow path is right there; elsewhere a program that
         * never takes the fast path proves nothing about it. */
        if (r.status == KV_RESULT_PASS && p->backward < 0 && ctx->c->modes == 0 &&
            runs[1].calls.fast + runs[1].calls.manual == 0) {
            /* The fast path redispatches to the target's own kernel: a
             * target with none for any step (a partial plugin, served by its
             * fallback) can only take the slow path (issue 21). */
            if (prog_target_kernel_steps(p) == 0)
                kv_check_result_set(&r, KV_RESULT_UNSUPPORTED,
                                    "no step of the %d runs on a kernel of the accel target's own (%s), so the fast "
                                    "path cannot fire; the slow path matched",
                                    p->nsteps, kv_accel_target_name());
            else
                kv_check_result_set(&r, KV_RESULT_FAIL, "fast path never fired in any of the %d steps", p->nsteps);
        }
        r.fast_calls = (int64_t)runs[1].calls.fast;
        r.slow_calls = (int64_t)runs[1].calls.slow;
        r.manual_calls = (int64_t)runs[1].calls.manual;
        if (r.status == KV_RESULT_PASS)
            kv_check_result_set(&r, KV_RESULT_PASS,
                                "%d steps%s equal bit for bit with fast paths on, killed and off (%llu fast, %llu "
                                "manual, %llu slow calls)",
                                p->nsteps, p->backward >= 0 ? " and the inputs' gradients" : "", (unsigned long long)runs[1].calls.fast, (unsigned long long)runs[1].calls.manual,
                                (unsigned long long)runs[1].calls.slow);
        if (r.status == KV_RESULT_PASS && runs[1].zero_steps > 0)
            kv_check_result_append(&r, "; %d steps read a ZeroTensor: each left the bit's trace (its fallback ran with no "
                                   "fast path, or a view kept the bit)",
                                   runs[1].zero_steps);
        for (int i = 0; i < 3; i++) prog_free_run_release(&runs[i]);
        kv_inflight_set_check("");
        kv_check_push(ctx, &r);
    }
    prog_switches_set(&ambient);
    kv_accel_counters_reset();
}

/* ---- the case ---- */

void kv_check_program_run(const kv_check_ctx *ctx) {
    kv_program *p = NULL;
    kv_check_result r;
    if (kv_program_load_for(ctx->c, &p) != KV_OK) {
        /* Copied first: making the row's case ID clears the thread's error. */
        char msg[KV_RESULT_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "%s", kv_last_error_message());
        kv_check_result_begin(&r, ctx, "program", NULL);
        kv_check_result_set(&r, KV_RESULT_ERROR, "%s", msg);
        kv_check_push(ctx, &r);
        return;
    }
    kv_prog_values truth;
    int steps = 0;
    char why[KV_RESULT_MESSAGE_MAX / 2];
    const kv_status st = kv_prog_truth(p, ctx->c, ctx->env->regen_golden ? kv_exact_run_stats() : NULL, &truth, &steps, why,
                                  (int)sizeof why);
    if (st != KV_OK || steps == 0) {
        kv_check_result_begin(&r, ctx, "program", NULL);
        kv_check_result_set(&r, KV_RESULT_ERROR, "%s", steps == 0 && st == KV_OK ? "the program ran no step" : why);
        kv_check_push(ctx, &r);
    } else {
        if (ctx->c->device.type == KV_DEVICE_CPU) prog_golden(ctx, p, &truth);
        if (!ctx->env->regen_golden) {
            prog_backends(ctx, p, &truth);
            /* vmap sends every batched call below the boxing layer (the
             * slow path): its row compares the batched program with its
             * samples instead of fast paths ON vs OFF. */
            const bool vmap = (ctx->c->modes & (1u << KV_MODE_VMAP)) != 0;
            if (vmap) kv_check_program_vmap(ctx, p);
            else if (ctx->c->device.type == KV_DEVICE_ACCEL) prog_fastpath(ctx, p);
            if (!vmap && ctx->c->modes != 0) kv_check_program_modes(ctx, p, &truth);
            if (p->backward >= 0) kv_check_program_grad(ctx, p);
            if (p->backward >= 0 && kv_case_autocast_dtype(ctx->c) != KV_DTYPE_COUNT)
                kv_check_program_grad_autocast(ctx, p);
        }
    }
    kv_prog_values_free(&truth);
    kv_program_free(p);
}
