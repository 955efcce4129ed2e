/* The golden check: the reference kernel's output of the case's golden
 * problem (contiguous CPU inputs, the CPU `ref` variant) against the
 * stored golden, which is the correctly rounded truth (issue 14,
 * runner/golden/exact.h).
 *
 * Outcomes: a missing, corrupt or stale golden is ERROR (never a pass),
 * except a key with no entry at all under a live reference
 * (kv_golden_live_for: --golden=live, or a command-line case under the
 * default auto), which is SKIP saying so: the other checks then compare
 * against the reference kernel run live.
 * Bitwise equal passes. Otherwise the reference is a variant like any
 * other: it passes when it is within the op's tolerance of the truth
 * (kv_tol_rule_for, the variants check's rule, with its bounds), and the
 * message gives its max ulp; beyond it the check FAILs with the first
 * mismatches (or the two hashes when the store is hash-only). Ops whose
 * values are unspecified (empty) only check dtype and shape, and record
 * zeros.
 *
 * Under env->regen_golden the check computes the exact golden from the
 * reference's outputs (kv_exact_golden overwrites every floating element
 * with the correctly rounded value) and records it with kv_golden_put;
 * kvrun saves the store once at the end, in the parent process (golden.h:
 * regeneration is never concurrent). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/ops.h"
#include "runner/case/grammar.h"
#include "runner/check/check_util.h"
#include "runner/check/out_facts.h"
#include "runner/check/compare.h"
#include "runner/golden/golden.h"
#include "runner/golden/exact.h"
#include "runner/check/tolerance.h"

static bool golden_is_meta(const kv_case *c, const kv_tensor *t) {
    const kv_tol_entry *e = kv_tol_lookup(c->op, t->dtype, c);
    return e != NULL && e->kind == KV_CMP_META;
}

/* Output i of the reference (t) against the truth (a contiguous CPU
 * tensor): the op's tolerance rule with its bounds, as for any variant.
 * True when it passes (a note may be appended to r), false with r set.
 * `against` names the truth in the failure ("the golden"). */
static bool golden_judge(const kv_check_ctx *ctx, const kv_check_ref *ref, int i, const kv_tensor *truth,
                         const kv_tensor *t, const char *against, kv_check_result *r) {
    kv_bound_kind bk = KV_BOUND_NONE;
    const kv_tol_entry *entry = NULL;
    const kv_cmp_rule rule = kv_tol_rule_for(ctx->c, t->dtype, &bk, &entry);
    double *bounds = NULL;
    if (rule.kind == KV_CMP_BOUND &&
        kv_tol_bounds(bk, entry ? entry->value : 0.0, ctx->c, &ref->in, truth, i, &bounds) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "output %d: %s", i, kv_last_error_message());
        return false;
    }
    kv_cmp_report rep;
    const kv_status cst = kv_compare(truth, t, &rule, bounds, &rep);
    free(bounds);
    if (cst != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "output %d: %s", i, kv_last_error_message());
        return false;
    }
    char rs[48];
    kv_cmp_rule_format(&rule, rs, sizeof rs);
    if (rep.mismatched == 0) {
        /* Bytes differ, values agree under the op's tolerance: the
         * reference's own error against the truth (or NaN payloads). */
        kv_check_result_append(r, "%soutput %d: the reference is within %s of the truth (max ulp %g)",
                               r->message[0] ? "; " : "", i, rs, rep.max_ulps);
        return true;
    }
    char text[KV_RESULT_MESSAGE_MAX];
    char what[32];
    snprintf(what, sizeof what, "output %d", i);
    kv_cmp_report_summary(&rep, what, text, (int)sizeof text);
    kv_check_result_set(r, KV_RESULT_FAIL, "differs from %s (%s): %s", against, rs, text);
    kv_cmp_report_to_result(&rep, r);
    return false;
}

/* Under --regen-golden: the exact golden is computed into copies of the
 * reference's outputs and recorded, and the reference is then held to it
 * by the same rule as in a normal run (golden_judge), so a regeneration
 * never reports a pass for a golden its own check would fail (f64 mm
 * whose products overflow where the exact sum does not). The golden is
 * recorded either way: it is the truth; the row FAILs and kvrun exits 1. */
static void golden_record(const kv_check_ctx *ctx, const char *key, kv_check_ref *ref, kv_check_result *r) {
    kv_tensor *outs[KV_CASE_MAX_OUTPUTS] = { NULL };
    kv_case_outputs truth = { .n = ref->out.n };
    kv_status st = KV_OK;
    for (int i = 0; i < ref->out.n && st == KV_OK; i++) {
        truth.t[i] = kv_clone(ref->out.t[i], NULL);
        if (truth.t[i] == NULL) st = kv_last_error();
    }
    if (st == KV_OK) st = kv_exact_golden(ctx->c, ctx->op, &truth, kv_exact_run_stats());
    if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "cannot compute the exact golden: %s", kv_last_error_message());
        for (int i = 0; i < truth.n; i++) kv_tensor_release(truth.t[i]);
        return;
    }
    kv_exact_canonical_nans(&ref->out);
    bool ok = true;
    for (int i = 0; i < ref->out.n && st == KV_OK; i++) {
        kv_tensor *t = truth.t[i];
        if (golden_is_meta(ctx->c, t)) {
            /* Unspecified values: record zeros, so the store is stable. */
            outs[i] = kv_tensor_empty(t->sizes, t->ndim, t->dtype, KV_DEVICE_CPU0);
            if (outs[i] == NULL) st = kv_last_error();
            else if (kv_tensor_numel(t) > 0) memset(kv_tensor_data(outs[i]), 0, outs[i]->storage->nbytes);
        } else {
            kv_tensor_retain(t);
            outs[i] = t;
            if (ok && !golden_judge(ctx, ref, i, t, ref->out.t[i], "the exact golden it records", r)) ok = false;
        }
    }
    if (st == KV_OK)
        st = kv_golden_put(ctx->env->golden, kv_op_name(ctx->op), key, (const kv_tensor *const *)outs, ref->out.n);
    for (int i = 0; i < ref->out.n; i++) {
        kv_tensor_release(outs[i]);
        kv_tensor_release(truth.t[i]);
    }
    if (st != KV_OK)
        kv_check_result_set(r, KV_RESULT_ERROR, "cannot record the golden: %s", kv_last_error_message());
    else if (ok) {
        char note[KV_RESULT_MESSAGE_MAX];
        snprintf(note, sizeof note, "%s", r->message);
        kv_check_result_set(r, KV_RESULT_PASS, "recorded %d output%s (written when the run saves the store)%s%s",
                            ref->out.n, ref->out.n == 1 ? "" : "s", note[0] ? "; " : "", note);
    } else
        kv_check_result_append(r, " (the golden is recorded: it is the truth; the reference must be fixed)");
}

/* Dtype and shape only, against the MANIFEST entry. */
static bool golden_verify_meta(const kv_golden_store *s, const char *key, int i, const kv_tensor *t,
                               kv_check_result *r) {
    const kv_golden_entry *e = kv_golden_lookup(s, key, i);
    if (e == NULL) {
        kv_check_result_set(r, KV_RESULT_ERROR, "output %d: no golden entry for key %s (run kvrun --regen-golden)", i,
                            key);
        return false;
    }
    bool same = e->dtype == t->dtype && e->ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = e->sizes[d] == t->sizes[d];
    if (!same) {
        kv_check_result_set(r, KV_RESULT_ERROR,
                            "output %d: golden is stale: MANIFEST has %s of %d dims, the reference gives %s of %d dims "
                            "(run kvrun --regen-golden)",
                            i, kv_dtype_name(e->dtype), e->ndim, kv_dtype_name(t->dtype), t->ndim);
        return false;
    }
    return true;
}

/* One output against the store: true when it passes (r untouched except
 * for notes), false with r set. */
static bool golden_verify_output(const kv_check_ctx *ctx, const kv_check_ref *ref, const char *key, int i,
                                 const kv_tensor *t, kv_check_result *r) {
    const kv_golden_store *s = ctx->env->golden;
    if (golden_is_meta(ctx->c, t)) return golden_verify_meta(s, key, i, t, r);
    kv_golden_verdict v;
    memset(&v, 0, sizeof v);
    if (kv_golden_verify(s, key, i, t, &v) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "output %d: cannot verify against the golden: %s", i,
                            kv_last_error_message());
        return false;
    }
    bool ok = false;
    switch (v.outcome) {
    case KV_GOLDEN_OK:
        /* Bit-equal to the golden by hash: t is its own truth. */
        kv_out_facts_record(r, i, t, t);
        ok = true;
        break;
    case KV_GOLDEN_MISSING:
    case KV_GOLDEN_CORRUPT:
    case KV_GOLDEN_STALE:
        kv_check_result_set(r, KV_RESULT_ERROR, "output %d: golden %s: %s", i, kv_golden_outcome_name(v.outcome),
                            v.message);
        break;
    case KV_GOLDEN_DIFFERS:
        if (v.stored == NULL) {
            kv_out_facts_record(r, i, NULL, t);
            kv_check_result_set(r, KV_RESULT_FAIL,
                                "output %d differs from the hash-only golden (MANIFEST hash %016llx, reference %016llx)", i,
                                (unsigned long long)v.expected_hash, (unsigned long long)v.actual_hash);
            break;
        }
        kv_out_facts_record(r, i, v.stored, t);
        ok = golden_judge(ctx, ref, i, v.stored, t, "the golden", r);
        break;
    }
    kv_golden_verdict_release(&v);
    return ok;
}

const char *kv_golden_mode_name(kv_golden_mode m) {
    switch (m) {
    case KV_GOLDEN_MODE_AUTO: return "auto";
    case KV_GOLDEN_MODE_STORE: return "store";
    case KV_GOLDEN_MODE_LIVE: return "live";
    }
    return "?";
}

int kv_golden_mode_parse(const char *text, kv_golden_mode *out) {
    for (int m = KV_GOLDEN_MODE_AUTO; m <= KV_GOLDEN_MODE_LIVE; m++) {
        if (text != NULL && strcmp(text, kv_golden_mode_name((kv_golden_mode)m)) == 0) {
            *out = (kv_golden_mode)m;
            return 0;
        }
    }
    return -1;
}

/* The checks the case runs (check.c: its own, or the defaults). */
static unsigned golden_case_checks(const kv_case *c) {
    return c->checks ? c->checks : kv_case_default_checks_for(c);
}

bool kv_golden_live_for(const kv_run_env *env, const kv_case *c) {
    if (env == NULL || env->regen_golden) return false;
    switch (env->golden_mode) {
    case KV_GOLDEN_MODE_STORE: return false;
    case KV_GOLDEN_MODE_LIVE: return true;
    case KV_GOLDEN_MODE_AUTO: return strcmp(c->origin.file, KV_GRAMMAR_CMDLINE) == 0;
    }
    return false;
}

void kv_check_golden_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "golden", "cpu");
    char key[2 * KV_CASE_ID_MAX];
    kv_check_ref ref;
    memset(&ref, 0, sizeof ref);
    if (c->expect != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "expect=%s: the case has no output to compare",
                            kv_case_expect_name(c->expect));
    } else if (ctx->env == NULL || ctx->env->golden == NULL) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "no golden store was opened");
    } else if (kv_check_golden_key(c, key, (int)sizeof key) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "%s", kv_last_error_message());
    } else if (kv_check_ref_run(ctx, &ref) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot build the inputs: %s", ref.message);
    } else if (ref.call_status != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "the reference kernel failed with '%s': %s",
                            kv_status_name(ref.call_status), ref.message);
    } else if (ctx->env->regen_golden) {
        golden_record(ctx, key, &ref, &r);
    } else {
        /* The store keeps NaNs positive (exact.h): compare like with like. */
        kv_exact_canonical_nans(&ref.out);
        const int recorded = kv_golden_output_count(ctx->env->golden, key);
        if (recorded == 0 && kv_golden_live_for(ctx->env, c)) {
            /* An ad-hoc case (a new shape): nothing stored to hold the
             * reference to, so this row checks nothing, and says so; the
             * other checks compare against the reference run live. */
            kv_check_result_set(&r, KV_RESULT_SKIP,
                                "live reference: no stored golden for key %s, so the other checks compare against the "
                                "reference kernel run live (--golden=store makes this an ERROR; kvrun --regen-golden "
                                "stores it)",
                                key);
        } else if (recorded > 0 && recorded != ref.out.n) {
            kv_check_result_set(&r, KV_RESULT_ERROR,
                                "golden is stale: %d output%s recorded, the reference gives %d (run kvrun --regen-golden)",
                                recorded, recorded == 1 ? "" : "s", ref.out.n);
        } else {
            bool ok = true;
            for (int i = 0; i < ref.out.n && ok; i++) ok = golden_verify_output(ctx, &ref, key, i, ref.out.t[i], &r);
            if (ok && r.message[0] == '\0')
                kv_check_result_set(&r, KV_RESULT_PASS, "bitwise equal to the golden (%d output%s)", ref.out.n,
                                    ref.out.n == 1 ? "" : "s");
            else if (ok)
                r.status = KV_RESULT_PASS;
        }
    }
    kv_check_ref_free(&ref);
    kv_check_push(ctx, &r);
}

kv_status kv_check_golden_expected(const kv_check_ctx *ctx, const kv_check_ref *ref,
                                   kv_tensor *expected[KV_CASE_MAX_OUTPUTS], char *note, int cap) {
    if (cap > 0) note[0] = '\0';
    int n = 0;
    kv_case_outputs canon = { .n = 0 };
    for (int i = 0; i < ref->out.n; i++) {
        kv_tensor_retain(ref->out.t[i]);
        expected[i] = ref->out.t[i];
        if (!golden_is_meta(ctx->c, expected[i])) canon.t[canon.n++] = expected[i];
    }
    /* The store keeps NaNs positive (exact.h); the reference's tensors are
     * made so in place, which no comparison against them can notice (NaNs
     * compare equal whatever their bits). Outputs whose values are
     * unspecified (empty's uninitialized memory) are left alone: reading
     * them is what Valgrind rightly calls a use of uninitialized bytes. */
    kv_exact_canonical_nans(&canon);
    char key[2 * KV_CASE_ID_MAX];
    const kv_run_env *env = ctx->env;
    if (env == NULL || env->golden == NULL || env->regen_golden) return KV_OK;
    if (kv_check_golden_key(ctx->c, key, (int)sizeof key) != KV_OK) return kv_last_error();
    for (int i = 0; i < ref->out.n; i++) {
        if (golden_is_meta(ctx->c, ref->out.t[i])) continue;
        kv_golden_verdict v;
        memset(&v, 0, sizeof v);
        if (kv_golden_verify(env->golden, key, i, ref->out.t[i], &v) != KV_OK) continue;
        const char *why = NULL;
        switch (v.outcome) {
        case KV_GOLDEN_OK: break;
        case KV_GOLDEN_DIFFERS:
            if (v.stored != NULL) {
                kv_tensor_release(expected[i]);
                kv_tensor_retain(v.stored);
                expected[i] = v.stored;
                why = "vs the stored golden, which the live reference differs from";
            } else {
                why = "vs the live reference: it differs from the hash-only golden";
            }
            break;
        case KV_GOLDEN_MISSING:
            if (kv_golden_output_count(env->golden, key) != 0) why = "vs the live reference: the golden is unusable";
            else if (kv_golden_live_for(env, ctx->c))
                why = "vs the reference kernel run live: no stored golden (live reference)";
            /* Not a broken store: a case that runs no golden check (the
             * large sizes of cases/sizes.case) records none. */
            else if (!(golden_case_checks(ctx->c) & (1u << KV_CHECK_GOLDEN)))
                why = "vs the reference kernel run live: the case runs no golden check, so none is stored";
            else why = "vs the live reference: the golden is unusable";
            break;
        case KV_GOLDEN_CORRUPT:
        case KV_GOLDEN_STALE: why = "vs the live reference: the golden is unusable"; break;
        }
        if (why != NULL && n < cap) {
            const int w = snprintf(note + n, (size_t)(cap - n), "%soutput %d %s (%s)", n ? "; " : "", i, why,
                                   kv_golden_outcome_name(v.outcome));
            if (w > 0) n += w;
        }
        kv_golden_verdict_release(&v);
    }
    return KV_OK;
}
