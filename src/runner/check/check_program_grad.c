/* The gradients of a program with `backward LOSS` against their truth
 * (runner/check/check_program_grad.h).
 *
 * The truth of a gradient is what the one-op grad check holds every op
 * to (check_grad.c, grad:gradcheck): central finite differences in f64.
 * Here the function is the whole program: its floating inputs in, LOSS
 * out, every step dispatched as a user's call would be (kv_call: autograd,
 * the lazy-bit fallbacks, the accel boxing layer on device accel), and
 * kv_gradcheck_fn_run compares kv_backward's gradient of LOSS with the
 * central differences of the same function, with PyTorch's gradcheck
 * defaults (eps 1e-6, atol 1e-5, rtol 1e-3; kv/gradcheck.h), as the
 * one-op check does, and like it in reference mode (a variant set runs its
 * ref variant) with grad mode on. A device that lacks a step's f64 kernel
 * (oneDNN as the accel target) makes the row UNSUPPORTED, as there. The stored forward truth (the golden) cannot serve:
 * it holds no gradient, and a stored gradient would be one kernel's
 * rounding of it.
 *
 * Lazy bits. An input's lazy= bits are put on it on the cpu too (the
 * teacher-forced rows place them on accel only, since backend kernels
 * never see a bit): the input reaching the steps is a view chain of the
 * gradcheck input carrying the bits over stored values that read back as
 * the input's values (neg: _neg_view(neg(x)); conj: conj(conj_physical(x))),
 * so backward flows through the lazy views and their fallbacks, as it does
 * for a user's tensor carrying the bit. A `zero` input is no variable: it
 * is a constant ZeroTensor (zeros, the bit on), as PyTorch's efficient
 * zeros never require grad, and the steps reading it go through the
 * ZeroTensor fallback. */
#include "runner/check/check_program_grad.h"

#include <stdio.h>
#include <string.h>

#include "kv/autograd.h"
#include "kv/gradcheck.h"
#include "kv/ops.h"
#include "kv/tune.h"
#include "runner/check/check_util.h"
#include "runner/exec/inflight.h"
#include "runner/exec/inputs.h"
#include "runner/exec/lazy_inputs.h"
#include "runner/exec/mode_session.h"

typedef struct pg_ctx {
    const kv_program *p;
    int slot_of[KV_PROG_MAX_VALUES];   /* program input -> gradcheck input, -1: a constant */
    kv_tensor *consts[KV_PROG_MAX_VALUES];
    int failed_step;                   /* the step whose call failed, -1 */
    char why[512];
    kv_case modes;                     /* .modes: functionalize/trace around the steps, or 0 */
} pg_ctx;

/* x with the lazy bits `bits` (KV_CASE_LAZY_*): a view chain of x whose
 * logical values are x's (a new reference). */
static kv_tensor *pg_lazy_view(kv_tensor *x, unsigned bits) {
    if (bits == 0) {
        kv_tensor_retain(x);
        return x;
    }
    kv_tensor *stored = NULL, *v = NULL;
    if (bits & KV_CASE_LAZY_CONJ) {
        kv_tensor *phys = kv_conj_physical(x);
        if (phys == NULL) return NULL;
        stored = (bits & KV_CASE_LAZY_NEG) ? kv_neg(phys) : phys;
        if (stored != phys) kv_tensor_release(phys);
    } else {
        stored = kv_neg(x);
    }
    if (stored == NULL) return NULL;
    if (bits & KV_CASE_LAZY_NEG) {
        v = kv__neg_view(stored);
        kv_tensor_release(stored);
        stored = v;
        if (stored == NULL) return NULL;
    }
    if (bits & KV_CASE_LAZY_CONJ) {
        v = kv_conj(stored);
        kv_tensor_release(stored);
    }
    return v;
}

static kv_status pg_eval(void *vctx, kv_tensor *const *xs, int n, kv_tensor **outs, int *nout) {
    pg_ctx *g = vctx;
    const kv_program *p = g->p;
    kv_prog_values vals;
    memset(&vals, 0, sizeof vals);
    kv_status st = KV_OK;
    for (int i = 0; i < p->ninputs && st == KV_OK; i++) {
        const int s = g->slot_of[i];
        if (s < 0) {
            kv_tensor_retain(g->consts[i]);
            vals.v[i] = g->consts[i];
        } else if (s >= n || (vals.v[i] = pg_lazy_view(xs[s], p->inputs[i].lazy)) == NULL) {
            st = s >= n ? kv_error(KV_ERR_INTERNAL, "program gradcheck: input %d of %d", s, n) : kv_last_error();
            snprintf(g->why, sizeof g->why, "input %.31s: cannot put its lazy bits on it: %.400s", p->value_names[i],
                     kv_last_error_message());
        }
    }
    kv_mode_session ms;
    memset(&ms, 0, sizeof ms);
    bool entered = false;
    if (st == KV_OK && g->modes.modes != 0) {
        if ((st = kv_mode_session_begin(&ms, &g->modes, kv_op_find(p->steps[0].op))) == KV_OK) entered = true;
        else snprintf(g->why, sizeof g->why, "cannot enter the modes: %.400s", kv_last_error_message());
    }
    for (int k = 0; k < p->nsteps && st == KV_OK; k++) {
        if ((st = kv_program_step_run(p, k, &vals, 0)) != KV_OK) {
            g->failed_step = k;
            snprintf(g->why, sizeof g->why, "%s: %.400s", kv_status_name(st), kv_last_error_message());
        }
    }
    if (entered) kv_mode_session_end(&ms);
    kv_mode_session_free(&ms);
    if (st == KV_OK) {
        kv_tensor_retain(vals.v[p->backward]);
        outs[0] = vals.v[p->backward];
        *nout = 1;
    }
    kv_prog_values_free(&vals);
    return st;
}

void kv_check_program_grad(const kv_check_ctx *ctx, const kv_program *p) {
    kv_check_result r;
    const kv_device dev = ctx->c->device;
    kv_check_result_begin(&r, ctx, "grad:gradcheck", dev.type == KV_DEVICE_ACCEL ? "accel" : "cpu");
    kv_inflight_set_check("grad:gradcheck");
    pg_ctx g;
    memset(&g, 0, sizeof g);
    g.p = p;
    g.failed_step = -1;
    /* functionalize and trace keep every value, so the program under them
     * is the same function and central differences judge it as without;
     * autocast changes it (f16 steps), so its gradient has grad:autocast
     * and this row checks the f64 program without it. */
    g.modes = *ctx->c;
    g.modes.modes = ctx->c->modes & ((1u << KV_MODE_FUNCTIONALIZE) | (1u << KV_MODE_TRACE));
    kv_prog_values logical;
    kv_tensor *xs[KV_PROG_MAX_VALUES] = { NULL };
    int nx = 0;
    int64_t elements = 0;
    kv_status st = kv_program_inputs(p, ctx->c, &logical);
    for (int i = 0; st == KV_OK && i < p->ninputs; i++) {
        kv_tensor *placed = kv_layout_place(logical.v[i], KV_LAYOUT_CONTIGUOUS, dev);
        if (placed == NULL) {
            st = kv_last_error();
            break;
        }
        /* A ZeroTensor input (lazy=zero) is a constant carrying its bit,
         * so the steps reach its fallback: PyTorch's efficient zeros never
         * require grad. */
        const bool zero = (p->inputs[i].lazy & KV_CASE_LAZY_ZERO) != 0;
        if (zero) {
            /* In the widened dtype of the variables (gradcheck runs in
             * f64 / c128), so the steps see one dtype. */
            const kv_dtype wide = kv_dtype_is_complex(placed->dtype) ? KV_C128 : KV_F64;
            kv_tensor *zw = kv__to_copy(logical.v[i], &wide, NULL, NULL, NULL, false, NULL);
            kv_tensor *z = zw ? kv_lazy_input_build(zw, KV_CASE_LAZY_ZERO, KV_LAYOUT_CONTIGUOUS, dev, false, false, NULL) : NULL;
            kv_tensor_release(zw);
            kv_tensor_release(placed);
            if ((placed = z) == NULL) {
                st = kv_last_error();
                break;
            }
        }
        const bool diff = !zero && (kv_dtype_is_floating(placed->dtype) || kv_dtype_is_complex(placed->dtype));
        g.slot_of[i] = diff ? nx : -1;
        if (diff) {
            elements += kv_tensor_numel(placed);
            xs[nx++] = placed;
        } else {
            g.consts[i] = placed;
        }
    }
    if (st != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot place the inputs on %s: %s", kv_device_type_name(dev.type),
                            kv_last_error_message());
    } else if (nx == 0) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "no floating input to differentiate");
    } else {
        char name[KV_CASE_TEXT_MAX + 32];
        snprintf(name, sizeof name, "%s", ctx->c->op);
        kv_gradcheck_result gr;
        /* As the one-op grad check: reference kernels where a variant set
         * would choose (both sides of the comparison run the same
         * kernels), grad mode on. */
        kv_tls_keys grad_on = kv_enable_grad_push();
        const bool was_ref = kv_tune_reference_mode_set(true);
        st = kv_gradcheck_fn_run(name, pg_eval, &g, xs, nx, NULL, &gr);
        kv_tune_reference_mode_set(was_ref);
        kv_grad_mode_pop(grad_on);
        const char *loss = p->value_names[p->backward];
        if (st == KV_OK) {
            kv_check_result_set(&r, KV_RESULT_PASS,
                                "backward from %s: the gradients of %d inputs (%lld elements) equal central "
                                "differences of the program in f64 (atol 1e-5, rtol 1e-3: PyTorch's gradcheck "
                                "defaults)%s",
                                loss, nx, (long long)elements,
                                g.modes.modes == 0 ? ""
                                : g.modes.modes == (1u << KV_MODE_TRACE) ? ", the steps under trace"
                                : g.modes.modes == (1u << KV_MODE_FUNCTIONALIZE) ? ", the steps under functionalize"
                                                                                   : ", the steps under functionalize+trace");
        } else if (gr.ran) {
            int input = -1;
            for (int i = 0; i < p->ninputs; i++)
                if (g.slot_of[i] == gr.slot) input = i;
            kv_check_result_set(&r, KV_RESULT_FAIL,
                                "backward from %s: the gradient of input %s, element %lld%s: analytical %.17g vs "
                                "numerical %.17g: %s",
                                loss, input >= 0 ? p->value_names[input] : "?", (long long)gr.element,
                                gr.imag ? " (imaginary part)" : "", gr.analytical, gr.numerical, gr.message);
        } else if (g.failed_step >= 0) {
            /* A step the device has no f64 kernel for is UNSUPPORTED, as in
             * the one-op check; any other failure is the row's. */
            const kv_prog_step *s = &p->steps[g.failed_step];
            kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_FAIL),
                                "step %d (%s, %s:%d) failed in f64: %s", g.failed_step + 1, s->op, p->path, s->line,
                                g.why);
        } else {
            kv_check_result_set(&r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_FAIL),
                                "backward from %s could not run (%s): %s%s%s", loss, kv_status_name(st),
                                kv_last_error_message(), g.why[0] ? ": " : "", g.why);
        }
    }
    for (int i = 0; i < nx; i++) kv_tensor_release(xs[i]);
    for (int i = 0; i < p->ninputs; i++) kv_tensor_release(g.consts[i]);
    kv_prog_values_free(&logical);
    kv_inflight_set_check("");
    kv_check_push(ctx, &r);
}
