/* vmap over a leading dimension of a whole program
 * (runner/check/check_program_vmap.h).
 *
 * vmap keeps the program's steps: every step of the batched run is the
 * same op on batched values, so the comparison is per step. The batch is
 * KV_CASE_VMAP_BATCH samples, sample b being the program's inputs at seed
 * seed+b (as the one-op vmap mode stacks its samples), stacked along a new
 * dim 0. One vmap level is entered for the whole program, each input is
 * wrapped at dim 0, and every step runs through kv_call on the wrappers
 * (the batching rules, or the loop-and-stack fallback); each step's result
 * is unwrapped with its batch dim at 0. Where the kernels are the
 * references (both runs in reference mode on the cpu, or on accel over a
 * CPU target) its sample b must equal, bit for bit, that step's output in
 * the program run free on sample b alone, as the one-op lazy check holds
 * vmap.
 *
 * On another backend (accel over SIM or oneDNN) two free runs round
 * differently and the differences compound along the chain, so no rule
 * could judge them; there the row is teacher-forced like program:<Key>:
 * each step runs batched on the stacked TRUTHS of its inputs (the three
 * samples' truth chains, kv_prog_truth), and sample b of each output is
 * held to sample b's truth of that step by the tolerance table's rule for
 * the op (bounds from the truths of its inputs). Inputs are contiguous
 * here: layout b would alias the samples, and lazy bits on a batched
 * input are the one-op check's business. A step the device has no kernel
 * for makes the row UNSUPPORTED, as in the other program rows.
 *
 * vmap with other modes (vmap+grad, +no_grad, +autocast_*, +functionalize,
 * +trace). Every step of every run (the per-sample runs and the batched
 * one) runs inside a session of the other modes (grad/no_grad: every
 * floating input, in the batched run the stacked physical tensor, is a
 * leaf that requires grad); in the batched run, inside the vmap level,
 * each step must also leave the modes' trace, read as the one-op lazy
 * check reads it under vmap (kv_mode_session_verdict). The values are
 * held as without modes: bit for bit against the per-sample runs under
 * the same modes on reference kernels; teacher-forced elsewhere, under
 * autocast against sample b's truth of the cast problem
 * (kv_prog_autocast_truth) by that problem's rule. A program with
 * `backward` refuses vmap with another mode at parse time
 * (runner/case/case_lazy_mode.c says why). */
#include "runner/check/check_program_vmap.h"

#include <stdio.h>
#include <string.h>

#include "kv/accel.h"
#include "kv/autograd.h"
#include "kv/backend.h"
#include "kv/ops.h"
#include "kv/tune.h"
#include "kv/vmap.h"
#include "runner/check/check_program_modes.h"
#include "runner/check/check_program_util.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/exec/inflight.h"
#include "runner/exec/inputs.h"
#include "runner/exec/mode_session.h"

#define PV_B KV_CASE_VMAP_BATCH

/* The case's modes other than vmap: entered around every step, inside
 * the vmap level in the batched run. */
static unsigned pv_inner_modes(const kv_case *c) { return c->modes & ~(1u << KV_MODE_VMAP); }

/* Whether the inner modes make program inputs require grad (grad, no_grad:
 * every floating input is a leaf, as in program:modes). */
static bool pv_wants_grad(const kv_case *c, const kv_tensor *t) {
    return (c->modes & ((1u << KV_MODE_GRAD) | (1u << KV_MODE_NO_GRAD))) != 0 &&
           (kv_dtype_is_floating(t->dtype) || kv_dtype_is_complex(t->dtype));
}

/* Step k of a run: plain, or inside a session of the inner modes. With
 * `evidence` (the batched run) the modes must leave their trace per step;
 * a miss is KV_ERR_INVALID_ARG with `why` naming it after the step. */
static kv_status pv_step(const kv_check_ctx *ctx, const kv_program *p, int k, kv_prog_values *vals, bool evidence,
                         char *why, int cap) {
    const unsigned inner = pv_inner_modes(ctx->c);
    if (inner == 0) {
        const kv_status st = kv_program_step_run(p, k, vals, 0);
        if (st != KV_OK) snprintf(why, (size_t)cap, "%s: %.400s", kv_status_name(st), kv_last_error_message());
        return st;
    }
    bool ok = false;
    char w[512] = "";
    /* Under vmap the session's verdict asks what vmap changes: the rule
     * or the fallback ran for the step's op, autocast cast at least once
     * when its policy casts, the graph and the recorder saw some op. */
    const kv_status st = kv_prog_step_under_modes(p, k, vals, evidence ? ctx->c->modes : inner, 0, ctx->c->device, &ok, w,
                                                  (int)sizeof w);
    snprintf(why, (size_t)cap, "%s", w);
    if (st != KV_OK || !evidence || ok) return st;
    return kv_error(KV_ERR_INVALID_ARG, "%s", w);
}

/* "vmap+autocast_f16" for messages. */
static void pv_modes_text(const kv_case *c, char *buf, int cap) {
    int n = snprintf(buf, (size_t)cap, "vmap");
    for (int m = 0; m < KV_MODE_COUNT && n < cap; m++)
        if (m != KV_MODE_VMAP && (c->modes & (1u << m)))
            n += snprintf(buf + n, (size_t)(cap - n), "+%s", kv_case_mode_name((kv_case_mode)m));
}

/* t placed contiguous on dev, a leaf that requires grad where the inner
 * modes ask it (a new reference). */
static kv_tensor *pv_place(const kv_check_ctx *ctx, const kv_tensor *t, kv_device dev) {
    kv_tensor *placed = kv_layout_place(t, KV_LAYOUT_CONTIGUOUS, dev);
    if (placed != NULL && pv_wants_grad(ctx->c, placed) && kv_tensor_set_requires_grad(placed, true) != KV_OK) {
        kv_tensor_release(placed);
        return NULL;
    }
    return placed;
}

/* A host-readable, materialized copy of t (a new reference). */
static kv_tensor *pv_host(kv_tensor *t) {
    kv_case_outputs one = { .n = 1 };
    kv_tensor_retain(t);
    one.t[0] = t;
    kv_status st = kv_check_materialize(&one);
    kv_tensor *h = st == KV_OK ? kv_backend_readable(one.t[0]) : NULL;
    kv_case_outputs_free(&one);
    return h;
}

/* The program on one sample: inputs (host) and every step output (host). */
static kv_status pv_sample(const kv_check_ctx *ctx, const kv_program *p, kv_device dev, const kv_prog_values *logical,
                           kv_prog_values *host, int *failed, char *why, int cap) {
    kv_prog_values vals;
    memset(&vals, 0, sizeof vals);
    memset(host, 0, sizeof *host);
    kv_status st = KV_OK;
    for (int i = 0; i < p->ninputs && st == KV_OK; i++) {
        kv_tensor_retain(logical->v[i]);
        host->v[i] = logical->v[i];
        if ((vals.v[i] = pv_place(ctx, logical->v[i], dev)) == NULL) st = kv_last_error();
    }
    for (int k = 0; k < p->nsteps && st == KV_OK; k++)
        if ((st = pv_step(ctx, p, k, &vals, false, why, cap)) != KV_OK) *failed = k;
    for (int v = p->ninputs; v < p->nvalues && st == KV_OK; v++)
        if (vals.v[v] != NULL && (host->v[v] = pv_host(vals.v[v])) == NULL) st = kv_last_error();
    kv_prog_values_free(&vals);
    return st;
}

/* The batched run: every step output unwrapped (batch dim 0), on the host. */
static kv_status pv_batched(const kv_check_ctx *ctx, const kv_program *p, kv_device dev, kv_prog_values logical[PV_B],
                            kv_prog_values *host, int *failed, char *why, int cap) {
    kv_prog_values vals;
    memset(&vals, 0, sizeof vals);
    memset(host, 0, sizeof *host);
    kv_status st = KV_OK;
    const int level = kv_vmap_level_enter();
    if (level < 0) return kv_last_error();
    for (int i = 0; i < p->ninputs && st == KV_OK; i++) {
        kv_tensor *samples[PV_B];
        for (int b = 0; b < PV_B; b++) samples[b] = logical[b].v[i];
        kv_tensor *phys = kv_stack_op((kv_tensor_list){ samples, PV_B }, 0);
        kv_tensor *placed = phys ? pv_place(ctx, phys, dev) : NULL;
        kv_tensor_release(phys);
        if (placed == NULL || (vals.v[i] = kv_vmap_add_batch_dim(placed, 0, level)) == NULL) {
            st = kv_last_error();
            snprintf(why, (size_t)cap, "input %.31s: cannot batch it: %.400s", p->value_names[i],
                     kv_last_error_message());
        }
        kv_tensor_release(placed);
    }
    for (int k = 0; k < p->nsteps && st == KV_OK; k++)
        if ((st = pv_step(ctx, p, k, &vals, true, why, cap)) != KV_OK) *failed = k;
    for (int v = p->ninputs; v < p->nvalues && st == KV_OK; v++) {
        if (vals.v[v] == NULL) continue;
        kv_tensor *phys = kv_vmap_unwrap_result(vals.v[v], level, PV_B, 0);
        if (phys == NULL || (host->v[v] = pv_host(phys)) == NULL) {
            st = kv_last_error();
            snprintf(why, (size_t)cap, "value %.31s: cannot unwrap it: %.400s", p->value_names[v],
                     kv_last_error_message());
        }
        kv_tensor_release(phys);
    }
    kv_prog_values_free(&vals);
    kv_vmap_level_exit(level);
    return st;
}

/* Sample b of every step of the batched run against the sample's own run,
 * bit for bit; false with r set naming the first step that differs. */
static bool pv_compare(const kv_program *p, const kv_prog_values *batched, kv_prog_values one[PV_B],
                       kv_check_result *r) {
    const kv_cmp_rule exact = { KV_CMP_BITWISE, 0, false, true };
    for (int k = 0; k < p->nsteps; k++) {
        const kv_prog_step *s = &p->steps[k];
        for (int i = 0; i < s->nout; i++) {
            const int v = s->out[i];
            if (v < 0) continue;
            for (int b = 0; b < PV_B; b++) {
                char label[400], what[480];
                kv_prog_step_label(p, k, i, label, sizeof label);
                snprintf(what, sizeof what, "vmap sample %d: %.400s diverged first", b, label);
                kv_tensor *got = kv_select(batched->v[v], 0, b);
                kv_cmp_report rep;
                if (got == NULL || kv_compare(one[b].v[v], got, &exact, NULL, &rep) != KV_OK) {
                    kv_check_result_set(r, KV_RESULT_FAIL, "%s: %s", what, kv_last_error_message());
                    kv_tensor_release(got);
                    return false;
                }
                kv_tensor_release(got);
                if (rep.mismatched > 0) {
                    char summary[KV_RESULT_MESSAGE_MAX / 2];
                    kv_cmp_report_summary(&rep, what, summary, (int)sizeof summary);
                    kv_check_result_set(r, KV_RESULT_FAIL, "%s (bit for bit: the kernels are the references)",
                                        summary);
                    kv_cmp_report_to_result(&rep, r);
                    return false;
                }
            }
        }
    }
    return true;
}

/* Teacher-forced: step k batched on the stacked truths of its inputs,
 * each sample against its truth; false with r set. */
static bool pv_forced_step(const kv_check_ctx *ctx, const kv_program *p, int k, kv_prog_values truth[PV_B],
                           kv_check_result *r) {
    const kv_prog_step *s = &p->steps[k];
    char label[400];
    kv_prog_step_label(p, k, -1, label, sizeof label);
    kv_prog_values vals, host;
    memset(&vals, 0, sizeof vals);
    memset(&host, 0, sizeof host);
    const int level = kv_vmap_level_enter();
    kv_status st = level < 0 ? kv_last_error() : KV_OK;
    for (int v = 0; v < p->nvalues && st == KV_OK; v++) {
        if (!kv_program_step_reads(s, v)) continue;
        kv_tensor *samples[PV_B];
        for (int b = 0; b < PV_B; b++) samples[b] = truth[b].v[v];
        kv_tensor *phys = kv_stack_op((kv_tensor_list){ samples, PV_B }, 0);
        kv_tensor *placed = phys ? pv_place(ctx, phys, ctx->c->device) : NULL;
        kv_tensor_release(phys);
        if (placed == NULL || (vals.v[v] = kv_vmap_add_batch_dim(placed, 0, level)) == NULL) st = kv_last_error();
        kv_tensor_release(placed);
    }
    char why[512] = "";
    if (st == KV_OK) st = pv_step(ctx, p, k, &vals, true, why, (int)sizeof why);
    for (int i = 0; i < s->nout && st == KV_OK; i++) {
        const int v = s->out[i];
        if (v < 0) continue;
        kv_tensor *phys = kv_vmap_unwrap_result(vals.v[v], level, PV_B, 0);
        if (phys == NULL || (host.v[v] = pv_host(phys)) == NULL) st = kv_last_error();
        kv_tensor_release(phys);
    }
    kv_prog_values_free(&vals);
    if (level >= 0) kv_vmap_level_exit(level);
    if (st != KV_OK) {
        kv_check_result_set(r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_FAIL),
                            "%s failed under vmap on the truths of its inputs: %s", label,
                            why[0] ? why : kv_last_error_message());
        kv_prog_values_free(&host);
        return false;
    }
    bool ok = true;
    for (int i = 0; i < s->nout && ok; i++) {
        const int v = s->out[i];
        if (v < 0) continue;
        for (int b = 0; b < PV_B && ok; b++) {
            kv_tensor *got = kv_select(host.v[v], 0, b);
            kv_case_inputs tin;
            if (got == NULL || kv_program_step_inputs(p, k, truth[b].v, &tin) != KV_OK) {
                kv_check_result_set(r, KV_RESULT_ERROR, "%s: vmap sample %d: %s", label, b, kv_last_error_message());
                kv_tensor_release(got);
                ok = false;
                break;
            }
            kv_case sc;
            kv_program_step_case(p, k, &tin, KV_DEVICE_CPU0, &sc);
            const kv_dtype ac = kv_case_autocast_dtype(ctx->c);
            if (ac == KV_DTYPE_COUNT) {
                ok = kv_prog_compare(p, k, i, &sc, &tin, truth[b].v[v], got, r);
            } else {
                /* Under autocast: sample b's truth of the cast problem, by
                 * that problem's rule, as program:modes holds a step. */
                kv_case_inputs cin;
                memset(&cin, 0, sizeof cin);
                kv_case csc;
                kv_case_outputs exp;
                if (kv_prog_autocast_truth(p, k, kv_op_find(s->op), &truth[b], &sc, ac, &cin, &csc, &exp) != KV_OK) {
                    kv_check_result_set(r, KV_RESULT_ERROR, "%s: vmap sample %d: the truth on the autocast inputs: %s",
                                        label, b, kv_last_error_message());
                    ok = false;
                } else {
                    ok = kv_prog_compare(p, k, i, &csc, &cin, exp.t[i], got, r);
                }
                kv_case_outputs_free(&exp);
                kv_case_inputs_free(&cin);
            }
            if (!ok) kv_check_result_append(r, " (vmap sample %d, teacher-forced)", b);
            kv_case_inputs_free(&tin);
            kv_tensor_release(got);
        }
    }
    kv_prog_values_free(&host);
    return ok;
}

/* The teacher-forced row: every step, or the first that fails. */
static void pv_forced(const kv_check_ctx *ctx, const kv_program *p, kv_check_result *r) {
    kv_prog_values truth[PV_B];
    memset(truth, 0, sizeof truth);
    char why[512];
    int steps = 0;
    kv_status st = KV_OK;
    for (int b = 0; b < PV_B && st == KV_OK; b++) {
        kv_case cb = *ctx->c;
        cb.seed = ctx->c->seed + (uint64_t)b;
        if ((st = kv_prog_truth(p, &cb, NULL, &truth[b], &steps, why, (int)sizeof why)) != KV_OK)
            kv_check_result_set(r, KV_RESULT_ERROR, "the truth of sample %d: %s", b, why);
    }
    int done = 0;
    for (int k = 0; k < p->nsteps && st == KV_OK && pv_forced_step(ctx, p, k, truth, r); k++) done++;
    if (st == KV_OK && done == p->nsteps) {
        char modes[160];
        pv_modes_text(ctx->c, modes, (int)sizeof modes);
        kv_check_result_set(r, KV_RESULT_PASS,
                            "%d steps under %s over %d samples, teacher-forced: each step batched on the truths "
                            "of its inputs%s, every sample within its op's tolerance of its truth%s",
                            done, modes, PV_B, pv_inner_modes(ctx->c) ? " left the modes' trace" : "",
                            kv_case_autocast_dtype(ctx->c) != KV_DTYPE_COUNT ? " (of the cast problem)" : "");
    }
    for (int b = 0; b < PV_B; b++) kv_prog_values_free(&truth[b]);
}

void kv_check_program_vmap(const kv_check_ctx *ctx, const kv_program *p) {
    kv_check_result r;
    const kv_device dev = ctx->c->device;
    kv_check_result_begin(&r, ctx, "program:vmap", dev.type == KV_DEVICE_ACCEL ? "accel" : "cpu");
    kv_inflight_set_check("program:vmap");
    /* Reference kernels on both sides where the device runs them, so the
     * batched and the per-sample runs can be held bit for bit. */
    const bool bitwise = dev.type == KV_DEVICE_CPU || (dev.type == KV_DEVICE_ACCEL && kv_accel_target() == KV_KEY_CPU);
    if (!bitwise) {
        pv_forced(ctx, p, &r);
        kv_inflight_set_check("");
        kv_check_push(ctx, &r);
        return;
    }
    const bool was_ref = kv_tune_reference_mode_set(true);
    kv_prog_values logical[PV_B], one[PV_B], batched;
    memset(logical, 0, sizeof logical);
    memset(one, 0, sizeof one);
    memset(&batched, 0, sizeof batched);
    char why[512] = "";
    int failed = -1;
    kv_status st = KV_OK;
    for (int b = 0; b < PV_B && st == KV_OK; b++) {
        kv_case cb = *ctx->c;
        cb.seed = ctx->c->seed + (uint64_t)b;
        if ((st = kv_program_inputs(p, &cb, &logical[b])) != KV_OK)
            snprintf(why, sizeof why, "cannot make the inputs of sample %d: %.400s", b, kv_last_error_message());
    }
    for (int b = 0; b < PV_B && st == KV_OK; b++)
        st = pv_sample(ctx, p, dev, &logical[b], &one[b], &failed, why, (int)sizeof why);
    if (st != KV_OK) {
        char label[400] = "";
        if (failed >= 0) kv_prog_step_label(p, failed, -1, label, sizeof label);
        kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_ERROR),
                            "the per-sample run failed%s%s: %s", label[0] ? " at " : "", label, why);
    } else if ((st = pv_batched(ctx, p, dev, logical, &batched, &failed, why, (int)sizeof why)) != KV_OK) {
        char label[400] = "";
        if (failed >= 0) kv_prog_step_label(p, failed, -1, label, sizeof label);
        kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_FAIL),
                            "the batched run failed%s%s (the per-sample runs passed): %s", label[0] ? " at " : "",
                            label, why);
    } else if (pv_compare(p, &batched, one, &r)) {
        char modes[160];
        pv_modes_text(ctx->c, modes, (int)sizeof modes);
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "%d steps under %s over %d samples: each step's sample equals, bit for bit, the "
                            "program run on that sample alone%s",
                            p->nsteps, modes, PV_B,
                            pv_inner_modes(ctx->c) ? " under the same modes, and each batched step left the modes' trace" : "");
    }
    kv_tune_reference_mode_set(was_ref);
    for (int b = 0; b < PV_B; b++) {
        kv_prog_values_free(&logical[b]);
        kv_prog_values_free(&one[b]);
    }
    kv_prog_values_free(&batched);
    kv_inflight_set_check("");
    kv_check_push(ctx, &r);
}
