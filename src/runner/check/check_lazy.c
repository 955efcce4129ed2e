/* The lazy check (DESIGN.md section 6): a case with lazy= or mode= runs
 * with its inputs made lazy (runner/lazy_inputs.h) and its modes on
 * (runner/mode_session.h), and
 *   1. the materialized outputs equal the expected ones:
 *        - bitwise, against the golden of the plain case (the stored one
 *          when the live reference differs from it), for conj and neg;
 *        - bitwise, against the reference kernel run live on the
 *          materialized inputs, when an input is zero (the problem then
 *          has zeros for that input) and for each sample of a vmap batch
 *          (vmap's batched output, sliced, against the per-sample
 *          reference);
 *        - under the op's tolerance (runner/tolerance.h), against the
 *          reference run live on the inputs cast the way the autocast
 *          policy casts them, under autocast (the output dtype changes);
 *      "bitwise" compares bytes, signed zeros included; any NaN matches
 *      any NaN; bitwise holds where the kernels are the references (the
 *      CPU in reference mode, runner/tolerance.h
 *      kv_tol_device_is_reference); any other backend (device=accel on
 *      SIM or a plugin, device=<plugin>) is held to the tolerance table's
 *      rule for the op, as the variants check holds it, bitwise only
 *      where the table says bitwise;
 *   2. the counters, the graph or the recorder show that every bit and
 *      mode did its work (kv_mode_session_verdict); a path that did not
 *      run is a FAIL naming it.
 * A case that expects an error (lazy=zero on an in-place self) passes
 * when the lazy call raises exactly that error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/ops.h"
#include "kv/vmap.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/exec/lazy_inputs.h"
#include "runner/exec/mode_session.h"
#include "runner/check/tolerance.h"
#include "kv/tune.h"

static bool has_mode(const kv_case *c, kv_case_mode m) { return (c->modes >> m) & 1u; }

static bool any_zero(const kv_case *c) {
    for (int i = 0; i < c->ninputs; i++)
        if (c->lazy[i] & KV_CASE_LAZY_ZERO) return true;
    return false;
}

/* ---- expected outputs ---- */

typedef struct expected_set {
    int n;
    kv_tensor *t[KV_CASE_MAX_OUTPUTS];
    kv_case_inputs in;   /* the inputs they came from (live runs), for tolerance bounds */
    bool have_in;
    kv_case cast_case;   /* the case with the dtypes autocast gives its inputs */
    char note[256];
} expected_set;

static void expected_free(expected_set *e) {
    for (int i = 0; i < e->n; i++) kv_tensor_release(e->t[i]);
    if (e->have_in) kv_case_inputs_free(&e->in);
    memset(e, 0, sizeof *e);
}

/* The ref kernel on inputs `in` (CPU, no bits); outputs materialized. */
static kv_status ref_call(const kv_op *op, kv_case_inputs *in, expected_set *e) {
    kv_case_outputs out;
    const bool was_ref = kv_tune_reference_mode_set(true); /* "ref", not a tuned variant */
    kv_status st = kv_case_invoke(op, in, kv_keyset_of(KV_KEY_CPU), &out);
    kv_tune_reference_mode_set(was_ref);
    if (st == KV_OK) st = kv_check_box_bool(&out);
    if (st == KV_OK) st = kv_check_materialize(&out);
    if (st != KV_OK) {
        kv_case_outputs_free(&out);
        return st;
    }
    e->n = out.n;
    for (int i = 0; i < out.n; i++) e->t[i] = out.t[i];
    return KV_OK;
}

/* Casts the logical inputs the way the autocast policy casts the real
 * ones (and turns half_to_float off like the fp32 kernels do). */
static kv_status cast_like_autocast(const kv_check_ctx *ctx, kv_dtype ad, expected_set *e) {
    kv_dtype to[KV_CASE_MAX_INPUTS];
    const int n = kv_autocast_expected_casts(ctx->c, ctx->op, ad, to);
    e->cast_case = *ctx->c;
    if (n == 0) return KV_OK;
    for (int i = 0; i < ctx->c->ninputs; i++) {
        if (to[i] == KV_DTYPE_COUNT || e->in.tensors[i] == NULL) continue;
        kv_tensor *t = kv__to_copy(e->in.tensors[i], &to[i], NULL, NULL, NULL, false, NULL);
        if (t == NULL) return kv_last_error();
        kv_case_inputs_replace(&e->in, i, t);
        e->cast_case.dtypes[i] = to[i];
    }
    if (kv_autocast_policy_of(kv_op_name(ctx->op)) == KV_AUTOCAST_FP32) {
        const int h = kv_schema_arg_index(kv_op_schema(ctx->op), "half_to_float");
        if (h >= 0 && e->in.args[h].tag == KV_IV_BOOL) e->in.args[h].v.b = false;
    }
    return KV_OK;
}

static kv_status expected_make(const kv_check_ctx *ctx, int sample, kv_dtype ad, expected_set *e, char *err, int errcap) {
    memset(e, 0, sizeof *e);
    e->cast_case = *ctx->c;
    kv_status st;
    if (sample == 0 && !any_zero(ctx->c) && ad == KV_DTYPE_COUNT) {
        kv_check_ref ref;
        if ((st = kv_check_ref_run(ctx, &ref)) != KV_OK || ref.call_status != KV_OK) {
            snprintf(err, (size_t)errcap, "the reference of the plain case failed: %.400s", ref.message);
            kv_check_ref_free(&ref);
            return st != KV_OK ? st : ref.call_status;
        }
        st = kv_check_golden_expected(ctx, &ref, e->t, e->note, (int)sizeof e->note);
        if (st == KV_OK) e->n = ref.out.n;
        else snprintf(err, (size_t)errcap, "%s", kv_last_error_message());
        kv_check_ref_free(&ref);
        return st;
    }
    if ((st = kv_lazy_logical_inputs(ctx->c, ctx->op, sample, &e->in)) != KV_OK) {
        snprintf(err, (size_t)errcap, "cannot build the materialized inputs: %s", kv_last_error_message());
        return st;
    }
    e->have_in = true;
    if (ad != KV_DTYPE_COUNT && (st = cast_like_autocast(ctx, ad, e)) != KV_OK) {
        snprintf(err, (size_t)errcap, "cannot cast the inputs like autocast: %s", kv_last_error_message());
        return st;
    }
    if ((st = ref_call(ctx->op, &e->in, e)) != KV_OK)
        snprintf(err, (size_t)errcap, "the reference kernel failed on the materialized inputs with '%s': %s",
                 kv_status_name(st), kv_last_error_message());
    return st;
}

/* ---- comparison ---- */

static kv_dtype effective_autocast(const kv_check_ctx *ctx);

static const kv_cmp_rule k_bitwise = { KV_CMP_BITWISE, 0.0, false, false };

/* One output against its expected value; false with r set on a failure. */
static bool compare_one(const kv_check_ctx *ctx, expected_set *e, int k, const kv_tensor *got, const char *what,
                        bool autocast, kv_check_result *r) {
    const kv_tensor *want = e->t[k];
    kv_cmp_rule rule = k_bitwise;
    /* A view of a ZeroTensor is a ZeroTensor, whose zeros have no sign
     * (_neg_view of one materializes as +0, the reference on zeros gives
     * -0): the one place signed zeros are not compared. */
    if (any_zero(ctx->c) && kv_op_entry_kind(ctx->op, KV_KEY_ZERO_TENSOR) == KV_ENTRY_FALLTHROUGH)
        rule.signed_zero_equal = true;
    kv_bound_kind bk = KV_BOUND_NONE;
    const kv_tol_entry *entry = NULL;
    double *bounds = NULL;
    const bool table = autocast || !kv_tol_device_is_reference(ctx->c->device);
    if (table) {
        const bool zero_signless = rule.signed_zero_equal;
        rule = kv_tol_rule_for(&e->cast_case, want->dtype, &bk, &entry);
        if (rule.kind == KV_CMP_BITWISE && zero_signless) rule.signed_zero_equal = true;
        /* The golden path keeps no inputs; bounds need them. */
        if (rule.kind == KV_CMP_BOUND && !e->have_in) {
            if (kv_lazy_logical_inputs(ctx->c, ctx->op, 0, &e->in) != KV_OK) {
                kv_check_result_set(r, KV_RESULT_ERROR, "%s: cannot build the inputs of the tolerance bound: %s",
                                    what, kv_last_error_message());
                return false;
            }
            e->have_in = true;
        }
        if (rule.kind == KV_CMP_BOUND &&
            kv_tol_bounds(bk, entry ? entry->value : 0.0, &e->cast_case, &e->in, want, k, &bounds) != KV_OK) {
            kv_check_result_set(r, KV_RESULT_ERROR, "%s: cannot compute the tolerance bound: %s", what,
                                kv_last_error_message());
            return false;
        }
    }
    kv_cmp_report rep;
    const kv_status st = kv_compare(want, got, &rule, bounds, &rep);
    free(bounds);
    char rs[48];
    kv_cmp_rule_format(&rule, rs, sizeof rs);
    if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: %s", what, kv_last_error_message());
        return false;
    }
    r->compared += rep.compared;
    if (rep.mismatched == 0) return true;
    char text[KV_RESULT_MESSAGE_MAX];
    kv_cmp_report_summary(&rep, what, text, (int)sizeof text);
    kv_check_result_set(r, KV_RESULT_FAIL, "differs from the %s (%s%s): %s",
                        autocast ? "reference on autocast-cast inputs" : "expected values", rs,
                        table && !autocast ? ", the tolerance table's rule for a non-reference backend" : "", text);
    kv_cmp_report_to_result(&rep, r);
    return false;
}

static bool compare_all(const kv_check_ctx *ctx, expected_set *exp, int nsamples, const kv_case_outputs *out,
                        kv_check_result *r) {
    const bool autocast = effective_autocast(ctx) != KV_DTYPE_COUNT;
    for (int b = 0; b < nsamples; b++) {
        if (exp[b].n != out->n) {
            kv_check_result_set(r, KV_RESULT_FAIL, "returned %d output%s, the reference %d", out->n,
                                out->n == 1 ? "" : "s", exp[b].n);
            return false;
        }
        for (int k = 0; k < out->n; k++) {
            char what[48];
            kv_tensor *got = out->t[k];
            bool ok;
            if (has_mode(ctx->c, KV_MODE_VMAP)) {
                snprintf(what, sizeof what, "sample %d, output %d", b, k);
                if (got->ndim < 1 || got->sizes[0] != nsamples) {
                    char sh[64];
                    kv_shape_format(got->sizes, got->ndim, sh, sizeof sh);
                    kv_check_result_set(r, KV_RESULT_FAIL, "output %d of vmap has shape %s: no batch dim of %d in front",
                                        k, sh, nsamples);
                    return false;
                }
                /* Sliced on the host: select.int is not the op under
                 * test, and a target need not have it. */
                kv_tensor *host = got->device.type == KV_DEVICE_CPU ? got : kv_backend_copy_to_host(got);
                kv_tensor *slice = host ? kv_select(host, 0, b) : NULL;
                if (host != got) kv_tensor_release(host);
                if (slice == NULL) {
                    kv_check_result_set(r, kv_check_status_of_failure(ctx->c, kv_last_error(), KV_RESULT_ERROR),
                                        "%s: cannot slice the batch: %s", what, kv_last_error_message());
                    return false;
                }
                ok = compare_one(ctx, &exp[b], k, slice, what, autocast, r);
                kv_tensor_release(slice);
            } else {
                snprintf(what, sizeof what, "output %d", k);
                ok = compare_one(ctx, &exp[b], k, got, what, autocast, r);
            }
            if (!ok) return false;
        }
    }
    return true;
}

/* ---- the check ---- */

typedef struct lazy_run {
    kv_case_inputs in;
    kv_tensor *leaves[KV_CASE_MAX_INPUTS];
    kv_case_outputs out;
    kv_mode_session session;
    bool have_in, have_session;
    expected_set exp[KV_CASE_VMAP_BATCH];
} lazy_run;

static void run_free(lazy_run *L) {
    kv_case_outputs_free(&L->out);
    if (L->have_session) kv_mode_session_free(&L->session);
    if (L->have_in) kv_case_inputs_free(&L->in);
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(L->leaves[i]);
    for (int b = 0; b < KV_CASE_VMAP_BATCH; b++) expected_free(&L->exp[b]);
}

/* The autocast dtype when autocast casts something for this case; an op
 * it leaves alone computes what the plain case computes. */
static kv_dtype effective_autocast(const kv_check_ctx *ctx) {
    const kv_dtype ad = kv_case_autocast_dtype(ctx->c);
    kv_dtype to[KV_CASE_MAX_INPUTS];
    if (ad == KV_DTYPE_COUNT || kv_autocast_expected_casts(ctx->c, ctx->op, ad, to) == 0) return KV_DTYPE_COUNT;
    return ad;
}

static void lazy_check(const kv_check_ctx *ctx, lazy_run *L, kv_check_result *r) {
    const kv_case *c = ctx->c;
    const bool vmap = has_mode(c, KV_MODE_VMAP);
    const int nsamples = vmap ? KV_CASE_VMAP_BATCH : 1;
    const kv_dtype ad = effective_autocast(ctx);
    char err[512];
    if (c->expect == KV_OK) {
        for (int b = 0; b < nsamples; b++) {
            if (expected_make(ctx, b, ad, &L->exp[b], err, (int)sizeof err) != KV_OK) {
                kv_check_result_set(r, KV_RESULT_ERROR, "sample %d: %s", b, err);
                return;
            }
        }
    }
    const kv_lazy_build build = { c->device,
                                  has_mode(c, KV_MODE_GRAD) || has_mode(c, KV_MODE_NO_GRAD),
                                  vmap ? KV_CASE_VMAP_BATCH : 0 };
    if (kv_lazy_inputs_make(c, ctx->op, &build, &L->in, L->leaves) != KV_OK) {
        /* A target without the ops that build them (it opted out of the
         * default fallback) declines: UNSUPPORTED (issue 21). */
        kv_check_result_set(r, kv_check_status_of_failure(c, kv_last_error(), KV_RESULT_ERROR),
                            "cannot build the lazy inputs: %s", kv_last_error_message());
        return;
    }
    L->have_in = true;
    kv_mode_call call = { &L->in, &L->out, { 0 } };
    for (int i = 0; i < c->ninputs; i++)
        call.in_bits_before[i] = L->in.tensors[i] ? L->in.tensors[i]->keys & KV_KEYSET_LAZY : 0;
    if (kv_mode_session_begin(&L->session, c, ctx->op) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "cannot enter the modes: %s", kv_last_error_message());
        return;
    }
    L->have_session = true;
    /* The reference variant of every kernel, as for the golden: this check
     * proves the lazy and mode layers, the variants check the kernels. */
    const bool was_ref_call = kv_tune_reference_mode_set(true);
    kv_status st = vmap ? kv_check_vmap_invoke(ctx->op, &L->in, &L->out) : kv_case_invoke(ctx->op, &L->in, 0, &L->out);
    kv_tune_reference_mode_set(was_ref_call);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st != KV_OK ? kv_last_error_message() : "");
    kv_mode_session_end(&L->session);
    if (c->expect != KV_OK) {
        if (st == c->expect)
            kv_check_result_set(r, KV_RESULT_PASS, "raised %s as expected: %s", kv_status_name(st), msg);
        else if (st == KV_OK)
            kv_check_result_set(r, KV_RESULT_FAIL, "expected %s, but the call succeeded", kv_status_name(c->expect));
        else if (st == KV_ERR_MISSING_KERNEL &&
                 kv_check_status_of_failure(c, st, KV_RESULT_FAIL) == KV_RESULT_UNSUPPORTED)
            /* The error check's rule (check_error.c): a decline on invalid
             * input is UNSUPPORTED. */
            kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "declined the invalid call (%s expected): %s",
                                kv_status_name(c->expect), msg[0] ? msg : "(no message)");
        else
            kv_check_result_set(r, KV_RESULT_FAIL, "expected %s, got %s: %s", kv_status_name(c->expect),
                                kv_status_name(st), msg);
        return;
    }
    if (st == KV_ERR_MISSING_KERNEL && c->device.type != KV_DEVICE_CPU) {
        /* The device's backend has no kernel for this call (a plugin that
         * lacks the op or the dtype): not a wrong result, and the variants
         * rows of that backend count it the same way. */
        kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "%s: %s", kv_device_type_name(c->device.type), msg);
        return;
    }
    if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "the call failed with '%s' (the reference passed): %s",
                            kv_status_name(st), msg);
        return;
    }
    char evidence[512] = "", why[512];
    const bool ran = kv_mode_session_verdict(&L->session, &call, evidence, (int)sizeof evidence, why, (int)sizeof why);
    /* Materializing and slicing are the runner's own ops: no autograd. */
    kv_tls_keys g = kv_no_grad_push();
    st = kv_check_box_bool(&L->out);
    if (st == KV_OK) st = kv_check_materialize(&L->out);
    /* Device outputs (accel on SIM) come back through the backend copies. */
    for (int k = 0; st == KV_OK && k < L->out.n; k++) {
        kv_tensor *h = kv_backend_readable(L->out.t[k]);
        if (h == NULL) st = kv_last_error();
        else kv_tensor_release(L->out.t[k]), L->out.t[k] = h;
    }
    bool same = false;
    if (st != KV_OK)
        kv_check_result_set(r, kv_check_status_of_failure(ctx->c, st, KV_RESULT_ERROR), "cannot materialize the outputs: %s",
                            kv_last_error_message());
    else
        same = compare_all(ctx, L->exp, nsamples, &L->out, r);
    kv_grad_mode_pop(g);
    if (!same) return;
    if (!ran) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s (the values agree: %s)", why, evidence);
        return;
    }
    if (vmap)
        kv_check_result_set(r, KV_RESULT_PASS, "%d samples x %d output%s equal to the per-sample reference; %s",
                            nsamples, L->out.n, L->out.n == 1 ? "" : "s", evidence);
    else if (ad != KV_DTYPE_COUNT)
        kv_check_result_set(r, KV_RESULT_PASS, "%d output%s within the op's tolerance of the reference on "
                            "autocast-cast inputs; %s",
                            L->out.n, L->out.n == 1 ? "" : "s", evidence);
    else if (!kv_tol_device_is_reference(c->device))
        kv_check_result_set(r, KV_RESULT_PASS, "%d output%s within the op's tolerance of the %s (a non-reference "
                            "backend); %s",
                            L->out.n, L->out.n == 1 ? "" : "s",
                            any_zero(c) ? "reference on the zero inputs" : "golden", evidence);
    else
        kv_check_result_set(r, KV_RESULT_PASS, "%d output%s bitwise equal to the %s; %s", L->out.n,
                            L->out.n == 1 ? "" : "s", any_zero(c) ? "reference on the zero inputs" : "golden",
                            evidence);
    if (L->exp[0].note[0]) kv_check_result_append(r, "; %s", L->exp[0].note);
}

void kv_check_lazy_run(const kv_check_ctx *ctx) {
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "lazy", NULL);
    if (!kv_case_has_lazy_or_mode(ctx->c)) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "the case has no lazy= or mode=");
        kv_check_push(ctx, &r);
        return;
    }
    lazy_run *L = calloc(1, sizeof *L);
    if (L == NULL) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "out of host memory");
    } else {
        lazy_check(ctx, L, &r);
        run_free(L);
        free(L);
    }
    kv_check_push(ctx, &r);
}
