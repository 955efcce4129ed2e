/* The gradient of a program with `backward LOSS` under autocast
 * (runner/check/check_program_grad.h): `grad:autocast`.
 *
 * Central differences cannot judge it: autocast runs the matmul steps in
 * f16/bf16 (L), where a step of 1e-6 is below the dtype's resolution.
 * What autocast's backward computes is the gradient of the CAST problem:
 * the program whose lower-precision steps read their inputs rounded to
 * L, each cast differentiated as the identity (a cast's backward casts
 * the gradient back), every Jacobian taken at the values the run made.
 *
 * The run: the program under the case's modes on the case's device,
 * inputs in f32 requiring grad, then kv_backward from LOSS; every step's
 * values are kept.
 *
 * The truth g*: that gradient in f64 on the reference kernels. Every
 * input that a step on autocast's lower-precision list reads is rounded
 * to L (the cast autocast makes), the program runs in f64 without
 * autocast, and each step's output is teacher-forced to the run's value
 * (o + (v - o), the second term a constant: the value is v, the gradient
 * flows through o), so each step's Jacobian is taken where the run took
 * it. Forward rounding is thereby part of the problem, not an error: a
 * score rounded to bf16 moves softmax's probabilities by u |score| (22%
 * for a score of 50), which no bound in u alone could cover. The f64
 * program's own gradient is what grad:gradcheck holds to central
 * differences.
 *
 * The rule, normwise over the whole gradient (all inputs), first order:
 * what remains is the backward pass's rounding in L. The reference
 * kernels compute an L result in f32 and round it once (README
 * "Tolerances"), so each backward formula of a step whose output is in L
 * rounds the gradients it makes once, relative error <= u (2^-11 f16,
 * 2^-8 bf16; f32 roundings, 2^-24, are below first order); a formula
 * may chain two such ops (a product, then a reduction), so 2 u per
 * step. The error a stage makes flows to the inputs through the earlier
 * steps' Jacobians exactly as the gradient it perturbs does, so measured
 * against the largest gradient it is at most its own relative size
 * unless the earlier Jacobians cancel the gradient but not its error.
 * Hence, N the steps (views left out: exact) with an output in L,
 *     max |g - g*|  <=  (2 N + 1) u  max |g*|
 * the + 1 for the final cast of each input's gradient to f32 and the
 * input's own rounding in the truth. Normwise, not per element: an
 * input whose gradient cancels (attention's key bias: softmax ignores a
 * shift, so it is exactly zero) is held to the scale of the gradients it
 * is made of. The row reports the measured max |g - g*| / (u max |g*|). */
#include "runner/check/check_program_grad.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kv/autocast.h"
#include "kv/autograd.h"
#include "kv/backend.h"
#include "kv/ops.h"
#include "kv/tune.h"
#include "runner/check/check_util.h"
#include "runner/exec/inflight.h"
#include "runner/exec/lazy_inputs.h"
#include "runner/exec/mode_session.h"

/* Whether a step on the lower-precision list reads input i directly. */
static bool pc_cast_input(const kv_program *p, int i) {
    for (int k = 0; k < p->nsteps; k++)
        if (kv_autocast_policy_of(p->steps[k].op) == KV_AUTOCAST_LOWER && kv_program_step_reads(&p->steps[k], i))
            return true;
    return false;
}

/* A cast of t to dtype d outside autograd (a new reference). */
static kv_tensor *pc_cast(const kv_tensor *t, kv_dtype d) {
    kv_tls_keys g = kv_no_grad_push();
    kv_tensor *c = kv__to_copy((kv_tensor *)t, &d, NULL, NULL, NULL, false, NULL);
    kv_grad_mode_pop(g);
    return c;
}

/* t as an f64 tensor on the host (a new reference). kv_backend_readable
 * alone is not enough: over a host-addressable target (accel over cpu)
 * it returns the device tensor itself, and a value captured on accel and
 * then forced into the f64 truth's CPU run failed there with a device
 * mismatch and no message (issue 21). */
static kv_tensor *pc_host_f64(const kv_tensor *t) {
    kv_tensor *h = t->device.type == KV_DEVICE_CPU ? kv_backend_readable(t) : kv_backend_copy_to_host(t);
    kv_tensor *c = h ? pc_cast(h, KV_F64) : NULL;
    kv_tensor_release(h);
    return c;
}

/* Teacher forcing of one step output o (f64): o + (v - o), the second
 * term a constant, so the value is the autocast run's v (to f64
 * rounding) and the gradient flows through o; without v, o + 0. With
 * `probe`, the constant is a leaf that requires grad, so after backward
 * its .grad is the gradient reaching o (*probe: a new reference). A new
 * reference. */
static kv_tensor *pc_force(kv_tensor *o, kv_tensor *v, kv_tensor **probe) {
    kv_tls_keys g = kv_no_grad_push();
    kv_tensor *d = v ? kv_sub(v, o, kv_scalar_int(1))
                     : kv_zeros((kv_int_list){ o->sizes, o->ndim }, &o->dtype, NULL, &o->device, NULL);
    kv_grad_mode_pop(g);
    if (d != NULL && probe != NULL && kv_tensor_set_requires_grad(d, true) != KV_OK) {
        kv_tensor_release(d);
        d = NULL;
    }
    kv_tensor *f = d ? kv_add(o, d, kv_scalar_int(1)) : NULL;
    if (probe != NULL && f != NULL) *probe = d;
    else kv_tensor_release(d);
    return f;
}

/* One run: inputs x (host, logical) placed on dev (each floating one a
 * leaf that requires grad, a `zero` input a constant ZeroTensor), the
 * steps inside a session of `modes`, backward from the loss outside it;
 * each leaf's .grad on the host into grads. With `capture`, every
 * floating step output's values (host, f64) go there; with `forced`,
 * every floating step output is replaced by pc_force with those values.
 * With `probes`, every floating step output goes through pc_force (its
 * forced value, or + 0) with a probe, and after backward probes->v[v] is
 * the gradient reaching value v (host, f64). *low_steps counts the steps,
 * views left out, with an output in the modes' autocast dtype. */
static kv_status pc_run(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *x, unsigned modes,
                        kv_device dev, kv_prog_values *grads, kv_prog_values *capture, const kv_prog_values *forced,
                        kv_prog_values *probes, int *low_steps, char *why, int cap) {
    kv_prog_values leaves_p;
    memset(&leaves_p, 0, sizeof leaves_p);
    kv_prog_values vals, leaves;
    memset(&vals, 0, sizeof vals);
    memset(&leaves, 0, sizeof leaves);
    memset(grads, 0, sizeof *grads);
    why[0] = '\0';
    kv_status st = KV_OK;
    for (int i = 0; i < p->ninputs && st == KV_OK; i++) {
        const bool zero = (p->inputs[i].lazy & KV_CASE_LAZY_ZERO) != 0;
        const bool diff = !zero && (kv_dtype_is_floating(x->v[i]->dtype) || kv_dtype_is_complex(x->v[i]->dtype));
        vals.v[i] = kv_lazy_input_build(x->v[i], p->inputs[i].lazy, KV_LAYOUT_CONTIGUOUS, dev, diff, false, &leaves.v[i]);
        if (vals.v[i] == NULL) {
            st = kv_last_error();
            snprintf(why, (size_t)cap, "input %.31s: cannot place it: %.400s", p->value_names[i], kv_last_error_message());
        }
    }
    kv_mode_session ms;
    memset(&ms, 0, sizeof ms);
    kv_case mc = *ctx->c;
    mc.modes = modes;
    bool entered = false;
    if (st == KV_OK && modes != 0) {
        if ((st = kv_mode_session_begin(&ms, &mc, kv_op_find(p->steps[0].op))) == KV_OK) entered = true;
        else snprintf(why, (size_t)cap, "cannot enter the modes: %.400s", kv_last_error_message());
    }
    const kv_dtype low = kv_case_autocast_dtype(&mc);
    if (low_steps) *low_steps = 0;
    for (int k = 0; k < p->nsteps && st == KV_OK; k++) {
        if ((st = kv_program_step_run(p, k, &vals, 0)) != KV_OK)
            snprintf(why, (size_t)cap, "step %d (%.48s, %.200s:%d): %s: %.300s", k + 1, p->steps[k].op, p->path,
                     p->steps[k].line, kv_status_name(st), kv_last_error_message());
        bool in_low = false;
        for (int i = 0; st == KV_OK && i < p->steps[k].nout; i++)
            in_low |= p->steps[k].out[i] >= 0 && vals.v[p->steps[k].out[i]]->dtype == low;
        if (low_steps && in_low && !kv_schema_is_view(kv_op_schema(kv_op_find(p->steps[k].op)))) (*low_steps)++;
        for (int i = 0; (forced || probes) && st == KV_OK && i < p->steps[k].nout; i++) {
            const int v = p->steps[k].out[i];
            if (v < 0 || !kv_dtype_is_floating(vals.v[v]->dtype) || (forced && forced->v[v] == NULL)) continue;
            kv_tensor *f = pc_force(vals.v[v], forced ? forced->v[v] : NULL, probes ? &leaves_p.v[v] : NULL);
            if (f == NULL) {
                st = kv_last_error();
                snprintf(why, (size_t)cap, "forcing the output of step %d (%.48s): %s: %.300s", k + 1,
                         p->steps[k].op, kv_status_name(st), kv_last_error_message());
            }
            kv_tensor_release(vals.v[v]);
            vals.v[v] = f;
        }
    }
    if (entered) kv_mode_session_end(&ms);
    kv_mode_session_free(&ms);
    for (int v = p->ninputs; capture && st == KV_OK && v < p->nvalues; v++) {
        if (vals.v[v] == NULL || !kv_dtype_is_floating(vals.v[v]->dtype)) continue;
        if ((capture->v[v] = pc_host_f64(vals.v[v])) == NULL) {
            st = kv_last_error();
            snprintf(why, (size_t)cap, "capturing %.31s: %s: %.400s", p->value_names[v], kv_status_name(st),
                     kv_last_error_message());
        }
    }
    if (st == KV_OK && (st = kv_backward(vals.v[p->backward], NULL)) != KV_OK)
        snprintf(why, (size_t)cap, "backward from %.31s: %s: %.400s", p->value_names[p->backward], kv_status_name(st),
                 kv_last_error_message());
    for (int v = p->ninputs; probes && st == KV_OK && v < p->nvalues; v++) {
        const kv_tensor *g = leaves_p.v[v] ? kv_tensor_grad(leaves_p.v[v]) : NULL;
        if (g != NULL && (probes->v[v] = pc_host_f64(g)) == NULL) {
            st = kv_last_error();
            snprintf(why, (size_t)cap, "the gradient reaching %.31s: %s: %.400s", p->value_names[v],
                     kv_status_name(st), kv_last_error_message());
        }
    }
    kv_prog_values_free(&leaves_p);
    for (int i = 0; i < p->ninputs && st == KV_OK; i++) {
        kv_tensor *g = NULL;
        if ((st = kv_lazy_leaf_grad(leaves.v[i], &g)) != KV_OK) {
            snprintf(why, (size_t)cap, "the .grad of %.31s: %.400s", p->value_names[i], kv_last_error_message());
            break;
        }
        if (g == NULL) continue;
        /* Compared in f64: the truth's dtype. */
        grads->v[i] = pc_host_f64(g);
        kv_tensor_release(g);
        if (grads->v[i] == NULL) {
            st = kv_last_error();
            snprintf(why, (size_t)cap, "the .grad of %.31s: %.400s", p->value_names[i], kv_last_error_message());
        }
    }
    kv_prog_values_free(&vals);
    kv_prog_values_free(&leaves);
    /* Every failure above names itself; this keeps a row's message from
     * ever ending at the colon should a new one not. */
    if (st != KV_OK && why[0] == '\0')
        snprintf(why, (size_t)cap, "%s: %.400s", kv_status_name(st), kv_last_error_message());
    return st;
}

/* Element j of a contiguous f64 host tensor. */
static double pc_at(const kv_tensor *t, int64_t j) {
    return ((const double *)t->storage->data)[t->offset + j];
}

/* The largest |element| of an f64 host tensor (NULL: 0). */
static double pc_max(const kv_tensor *t) {
    double m = 0.0;
    for (int64_t j = 0; t && j < kv_tensor_numel(t); j++) m = fmax(m, fabs(pc_at(t, j)));
    return m;
}

/* After a failure: which step's backward broke the gradient. Both runs
 * again with a probe on every step output; in backward order (the last
 * step's outputs first) the first value whose gradient is past the bound
 * names the steps that read it: the backward of one of them made it. */
static void pc_locate(const kv_check_ctx *ctx, const kv_program *p, const kv_prog_values *logical,
                      const kv_prog_values *cast, const kv_prog_values *fwd, double u, double factor, kv_check_result *r) {
    kv_prog_values g, t, pg, pt;
    memset(&pg, 0, sizeof pg);
    memset(&pt, 0, sizeof pt);
    char why[600];
    kv_status st = pc_run(ctx, p, logical, ctx->c->modes, ctx->c->device, &g, NULL, NULL, &pg, NULL, why, (int)sizeof why);
    if (st == KV_OK) {
        const bool was_ref = kv_tune_reference_mode_set(true);
        st = pc_run(ctx, p, cast, 0, KV_DEVICE_CPU0, &t, NULL, fwd, &pt, NULL, why, (int)sizeof why);
        kv_tune_reference_mode_set(was_ref);
        kv_prog_values_free(&t);
    }
    kv_prog_values_free(&g);
    double scale = 0.0;
    for (int v = 0; v < p->nvalues; v++) scale = fmax(scale, pc_max(pt.v[v]));
    for (int k = p->nsteps - 1; st == KV_OK && k >= 0; k--) {
        for (int i = 0; i < p->steps[k].nout; i++) {
            const int v = p->steps[k].out[i];
            if (v < 0 || (pg.v[v] == NULL && pt.v[v] == NULL)) continue;
            /* No gradient reached it on one side only: as wrong as can be. */
            const bool one = pg.v[v] == NULL || pt.v[v] == NULL;
            double err = one || kv_tensor_numel(pg.v[v]) != kv_tensor_numel(pt.v[v]) ? INFINITY : 0.0;
            for (int64_t j = 0; !one && j < kv_tensor_numel(pt.v[v]); j++) {
                const double e = fabs(pc_at(pg.v[v], j) - pc_at(pt.v[v], j));
                if (!(e <= err)) err = e;
            }
            if (err <= factor * u * scale) continue;
            char readers[400] = "";
            int n = 0;
            for (int j = k + 1; j < p->nsteps && n < (int)sizeof readers; j++) {
                if (kv_program_step_reads(&p->steps[j], v))
                    n += snprintf(readers + n, sizeof readers - (size_t)n, "%sstep %d (%.48s, %.100s:%d)", n ? ", " : "",
                                  j + 1, p->steps[j].op, p->path, p->steps[j].line);
            }
            kv_check_result_append(r, "; in backward order the gradient first diverges at %s (%.3g u), the output of "
                                   "step %d: made by the backward of %s",
                                   p->value_names[v], err / (u * scale), k + 1, readers[0] ? readers : "no step");
            k = -1;
            break;
        }
    }
    kv_prog_values_free(&pg);
    kv_prog_values_free(&pt);
}

void kv_check_program_grad_autocast(const kv_check_ctx *ctx, const kv_program *p) {
    kv_check_result r;
    const kv_device dev = ctx->c->device;
    kv_check_result_begin(&r, ctx, "grad:autocast", dev.type == KV_DEVICE_ACCEL ? "accel" : "cpu");
    kv_inflight_set_check("grad:autocast");
    const kv_dtype ac = kv_case_autocast_dtype(ctx->c);
    /* Unit roundoff: half the distance from 1 to the next value. */
    const double u = ac == KV_BF16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    int low_steps = 0;
    kv_prog_values logical, cast, truth, got, fwd;
    memset(&fwd, 0, sizeof fwd);
    memset(&cast, 0, sizeof cast);
    memset(&truth, 0, sizeof truth);
    memset(&got, 0, sizeof got);
    char why[600] = "";
    kv_status st = kv_program_inputs(p, ctx->c, &logical);
    if (st != KV_OK) snprintf(why, sizeof why, "cannot make the inputs: %.400s", kv_last_error_message());
    for (int i = 0; i < p->ninputs && st == KV_OK; i++) {
        const kv_tensor *x = logical.v[i];
        kv_tensor *low = NULL;
        if (kv_dtype_is_floating(x->dtype) && pc_cast_input(p, i)) low = pc_cast(x, ac);
        else kv_tensor_retain((kv_tensor *)x), low = (kv_tensor *)x;
        cast.v[i] = low ? (kv_dtype_is_floating(x->dtype) ? pc_cast(low, KV_F64) : (kv_tensor_retain(low), low)) : NULL;
        kv_tensor_release(low);
        if (cast.v[i] == NULL) st = kv_last_error();
    }
    if (st == KV_OK) {
        kv_tls_keys on = kv_enable_grad_push();
        if ((st = pc_run(ctx, p, &logical, ctx->c->modes, dev, &got, &fwd, NULL, NULL, &low_steps, why, (int)sizeof why)) != KV_OK) {
            kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_FAIL), "under the modes: %s", why);
        } else {
            const bool was_ref = kv_tune_reference_mode_set(true);
            st = pc_run(ctx, p, &cast, 0, KV_DEVICE_CPU0, &truth, NULL, &fwd, NULL, NULL, why, (int)sizeof why);
            kv_tune_reference_mode_set(was_ref);
            if (st != KV_OK) kv_check_result_set(&r, KV_RESULT_ERROR, "the truth (the cast problem in f64): %s", why);
        }
        kv_grad_mode_pop(on);
    } else {
        kv_check_result_set(&r, KV_RESULT_ERROR, "%s", why[0] ? why : kv_last_error_message());
    }
    /* The bound's stage count (see the top). */
    const double factor = 2.0 * low_steps + 1.0;
    double worst = 0.0, scale = 0.0;
    int compared = 0;
    /* The scale is the whole gradient's: an input whose own gradient
     * cancels (attention's key bias, whose exact gradient is zero since
     * softmax ignores a shift) carries errors of the gradients it is made
     * of, not of its own size. */
    for (int i = 0; i < p->ninputs; i++)
        for (int64_t j = 0; truth.v[i] && j < kv_tensor_numel(truth.v[i]); j++)
            scale = fmax(scale, fabs(pc_at(truth.v[i], j)));
    for (int i = 0; i < p->ninputs && r.status == KV_RESULT_PASS; i++) {
        const kv_tensor *g = got.v[i], *t = truth.v[i];
        if (g == NULL && t == NULL) continue;
        if (g == NULL || t == NULL || kv_tensor_numel(g) != kv_tensor_numel(t)) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "backward from %s: the .grad of input %s is %s under the modes, %s in "
                                "the truth", p->value_names[p->backward], p->value_names[i], g ? "set" : "none",
                                t ? "set" : "none");
            break;
        }
        double err = 0.0;
        int64_t at = 0;
        const int64_t n = kv_tensor_numel(t);
        for (int64_t j = 0; j < n; j++) {
            const double e = fabs(pc_at(g, j) - pc_at(t, j));
            if (!(e <= err)) err = e, at = j; /* a NaN counts as the worst */
        }
        const double ratio = scale > 0 ? err / (u * scale) : (err > 0 ? INFINITY : 0.0);
        compared++;
        if (ratio > worst || isnan(ratio)) worst = ratio;
        if (!(ratio <= factor))
            kv_check_result_set(&r, KV_RESULT_FAIL,
                                "backward from %s: the gradient of input %s, element %lld: %.17g vs %.17g (the cast "
                                "problem's gradient in f64): max error %.3g u of the largest gradient %.6g, the bound "
                                "is %.0f u (%d steps in %s)",
                                p->value_names[p->backward], p->value_names[i], (long long)at, pc_at(g, at),
                                pc_at(t, at), ratio, scale, factor, low_steps, kv_dtype_name(ac));
    }
    if (r.status == KV_RESULT_FAIL) pc_locate(ctx, p, &logical, &cast, &fwd, u, factor, &r);
    if (r.status == KV_RESULT_PASS)
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "backward from %s: the gradients of %d inputs within %.0f u of the largest "
                            "gradient (measured at most %.3g u) of the cast problem's gradient in f64 (%d steps in %s)",
                            p->value_names[p->backward], compared, factor, worst, low_steps, kv_dtype_name(ac));
    kv_prog_values_free(&logical);
    kv_prog_values_free(&cast);
    kv_prog_values_free(&truth);
    kv_prog_values_free(&got);
    kv_prog_values_free(&fwd);
    kv_inflight_set_check("");
    kv_check_push(ctx, &r);
}
