/* The variants check: the op's kernel on every available backend and
 * every perf_dispatch variant (check_backend.c says which, and how they are
 * called), with the case's layouts, against the golden
 * (runner/check_util.h, kv_check_golden_expected) under the tolerance
 * table's rule. One result row per backend: "variants:<Key>"
 * (kv_key_name), the kernel the dispatcher runs there, and one more per
 * variant, "variants:<Key>/<name>" ("variants:CPU/avx2"). Each row also
 * holds the outputs' metadata to the reference's (check_meta.h: right
 * values with wrong strides, device or aliasing fail) and calls the kernel
 * twice, failing one whose identical calls disagree. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/accel.h"
#include "kv/backend.h"
#include "runner/check/check_meta.h"
#include "runner/check/check_util.h"
#include "runner/check/classify.h"
#include "runner/check/compare.h"
#include "runner/check/out_facts.h"
#include "runner/check/tol_backend.h"
#include "runner/check/tolerance.h"
#include "runner/report/dump.h"

/* The plugin name of the backend on `key` (what per-backend tolerance
 * overrides are keyed by), or NULL for the CPU and built-in devices. Accel
 * runs its target's kernels, so the target's overrides apply there. */
static const char *variants_backend_name(kv_key key) {
    if (key == KV_KEY_ACCEL) key = kv_accel_target();
    if (key == KV_KEY_NONE || !kv_key_is_backend(key)) return NULL;
    const kv_backend_info *b = kv_backend_find((kv_device_type)key);
    return b != NULL && b->name[0] ? b->name : NULL;
}

/* Compares one output; false with r set on a failure. `*used` gets the
 * per-backend override that widened the bound (runner/check/tol_backend.h). */
static bool variants_compare(const kv_check_ctx *ctx, const kv_check_ref *ref, kv_key key, int i,
                             const kv_tensor *expected, const kv_tensor *got, kv_check_result *r, int64_t *compared,
                             const kv_tol_override **used) {
    kv_bound_kind bk = KV_BOUND_NONE;
    const kv_tol_entry *entry = NULL;
    const kv_cmp_rule rule = kv_tol_rule_for(ctx->c, expected->dtype, &bk, &entry);
    double *bounds = NULL;
    if (rule.kind == KV_CMP_BOUND &&
        kv_tol_bounds(bk, entry ? entry->value : 0.0, ctx->c, &ref->in, expected, i, &bounds) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "output %d: %s", i, kv_last_error_message());
        return false;
    }
    const int ovi = rule.kind == KV_CMP_BOUND
                        ? kv_tol_override_find(variants_backend_name(key), ctx->c->op, r->check, expected->dtype)
                        : -1;
    const kv_tol_override *ov = kv_tol_override_at(ovi);
    if (ov != NULL) {
        const int64_t n = kv_tensor_numel(expected);
        for (int64_t k = 0; k < n; k++) bounds[k] += ov->abs_slack;
        *used = ov;
        r->tol_override = ovi + 1;
    }
    kv_cmp_report rep;
    const kv_status st = kv_compare(expected, got, &rule, bounds, &rep);
    char rs[48];
    kv_cmp_rule_format(&rule, rs, sizeof rs);
    if (st != KV_OK) {
        free(bounds);
        kv_check_result_set(r, KV_RESULT_FAIL, "output %d: %s%s", i, st == KV_ERR_DTYPE ? "wrong dtype: " : "",
                            kv_last_error_message());
        return false;
    }
    *compared += rep.compared;
    if (rep.mismatched == 0) {
        free(bounds);
        return true;
    }
    char text[KV_RESULT_MESSAGE_MAX];
    char what[32];
    snprintf(what, sizeof what, "output %d", i);
    kv_cmp_report_summary(&rep, what, text, (int)sizeof text);
    /* The property broken, when the mismatches show one (docs/diagnosis.md). */
    char diag[KV_RESULT_MESSAGE_MAX / 2];
    /* A kernel that drops alpha gives the result with alpha 1. */
    kv_tensor *alt = kv_classify_alpha_one(ctx->op, (kv_case_inputs *)&ref->in, i);
    /* A sum that accumulates in f16 stays within the bound of one. */
    double *working = NULL;
    if (rule.kind == KV_CMP_BOUND && kv_tol_bounds_working(bk, ctx->c, &ref->in, expected, i, &working) != KV_OK)
        kv_error_clear();
    if (working != NULL && ov != NULL)
        for (int64_t k = 0; k < kv_tensor_numel(expected); k++) working[k] += ov->abs_slack;
    /* A norm whose variance cancels stays within the bound of one. */
    double *one_pass = NULL;
    if (rule.kind == KV_CMP_BOUND && kv_tol_bounds_one_pass(bk, ctx->c, &ref->in, expected, i, &one_pass) != KV_OK)
        kv_error_clear();
    if (one_pass != NULL && ov != NULL)
        for (int64_t k = 0; k < kv_tensor_numel(expected); k++) one_pass[k] += ov->abs_slack;
    const int nd = kv_classify_compare(ctx->c, &ref->in, expected, got, alt, "alpha", &rule, bounds, working,
                                       one_pass, diag, (int)sizeof diag);
    free(working);
    free(one_pass);
    kv_tensor_release(alt);
    if (nd > 0)
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: %s [%s: %s]", text, diag, rs,
                            entry ? entry->reason : "no table row: bitwise");
    else
        kv_check_result_set(r, KV_RESULT_FAIL, "%s [%s: %s]", text, rs, entry ? entry->reason : "no table row: bitwise");
    free(bounds);
    if (ov != NULL)
        kv_check_result_append(r, " [override %s (%s %s): %s: %s]", ov->source, ov->backend, ov->op, ov->rule,
                               ov->reason);
    kv_cmp_report_to_result(&rep, r);
    return false;
}

typedef struct variants_user {
    const kv_check_ref *ref;
    const kv_meta_expect *meta;
    kv_tensor *const *expected;
    const char *note;
} variants_user;

/* One backend or variant: its row. */
static void variants_backend(const kv_check_ctx *ctx, kv_key key, const char *variant, void *user) {
    const variants_user *u = user;
    char check[64];
    kv_check_backend_row_name("variants", key, variant, check, (int)sizeof check);
    kv_check_result r;
    kv_check_result_begin(&r, ctx, check, kv_check_backend_label(key));
    kv_check_call call = { .meta = u->meta, .twice = true };
    if (kv_check_backend_call(ctx, u->ref->out.n, key, variant, &call, &r)) {
        const kv_case_outputs *out = &call.out;
        int64_t compared = 0;
        bool ok = true;
        const kv_tol_override *used = NULL;
        for (int i = 0; i < out->n && ok; i++)
            ok = variants_compare(ctx, u->ref, key, i, u->expected[i], out->t[i], &r, &compared, &used);
        for (int i = 0; i < out->n; i++) kv_out_facts_record(&r, i, u->expected[i], out->t[i]);
        if (ok && call.meta_diff[0]) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "%s on %s%s%s: right values, wrong metadata: %s", ctx->c->op,
                                kv_key_name(key), variant ? "/" : "", variant ? variant : "", call.meta_diff);
        } else if (call.meta_diff[0]) {
            kv_check_result_append(&r, "; also %s", call.meta_diff);
        } else if (ok) {
            kv_check_result_set(&r, KV_RESULT_PASS, "%lld elements agree, metadata as the reference's",
                                (long long)compared);
            if (used != NULL)
                kv_check_result_append(&r, " (with override %s (%s %s): %s: %s)", used->source, used->backend,
                                       used->op, used->rule, used->reason);
        }
        r.compared = compared > r.compared ? compared : r.compared;
        /* --dump: the failing kernel's own outputs next to the reference's. */
        if (!ok && ctx->env->dump_dir != NULL &&
            kv_case_dump_failure(ctx->c, ctx->env->dump_dir, &r, (const kv_tensor *const *)out->t,
                                 (const kv_tensor *const *)u->expected, out->n) != KV_OK)
            kv_check_result_append(&r, "; --dump: %s", kv_last_error_message());
        kv_case_outputs_free(&call.out);
    }
    if (u->note[0]) kv_check_result_append(&r, "; %s", u->note);
    kv_check_push(ctx, &r);
}

void kv_check_variants_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "variants", NULL);
    if (c->expect != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "expect=%s: the case has no output to compare",
                            kv_case_expect_name(c->expect));
        kv_check_push(ctx, &r);
        return;
    }
    kv_check_ref ref;
    if (kv_check_ref_run(ctx, &ref) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot build the inputs: %s", ref.message);
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    if (ref.call_status != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "the reference kernel failed with '%s': %s",
                            kv_status_name(ref.call_status), ref.message);
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    kv_tensor *expected[KV_CASE_MAX_OUTPUTS] = { NULL };
    char note[512];
    if (kv_check_golden_expected(ctx, &ref, expected, note, (int)sizeof note) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "%s", kv_last_error_message());
        kv_check_push(ctx, &r);
    } else {
        kv_meta_expect meta;
        kv_meta_expect_run(ctx, &meta);
        variants_user u = { &ref, &meta, expected, note };
        kv_check_each_backend(ctx, variants_backend, &u);
    }
    for (int i = 0; i < KV_CASE_MAX_OUTPUTS; i++) kv_tensor_release(expected[i]);
    kv_check_ref_free(&ref);
}
