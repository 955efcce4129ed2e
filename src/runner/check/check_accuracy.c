/* The accuracy check (check=accuracy): how far every backend and variant
 * is from the truth, measured rather than judged.
 *
 * The truth is recomputed live with the exact generator (runner/golden/
 * exact.h: MPFR, each element correctly rounded into the output dtype),
 * not read from the golden store: a sweep case (fill=sweep, a million
 * inputs) has no stored golden, and large outputs are stored hash-only.
 * Every backend and variant the variants check visits (check_backend.c)
 * gets one row, "accuracy:<Key>[/<variant>]", carrying the histogram of
 * its errors in ulps of the output dtype (runner/check/ulp_hist.h): the
 * distance between its bits and the correctly rounded value's on the
 * ordered line of floats, per real component, so 0 means correctly
 * rounded, +-0 are 0 apart and an overflow to Inf next to FLT_MAX is one
 * ulp. A NaN where the truth is a number, or the reverse, is the NaN bin.
 * Integer and bool outputs are not measured (they are bitwise).
 *
 * Status: FAIL when the op's rule is a ulp bound (or bitwise) and the
 * largest error is past it, so a deliberately 3-ulp-off kernel of a 2-ulp
 * op fails here as in the variants check; otherwise PASS, the numbers
 * being the point. The report (report_accuracy.c) merges rows into the
 * table per backend x variant x op x dtype: max and 99.9th percentile. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runner/check/check_util.h"
#include "runner/check/out_facts.h"
#include "runner/check/tolerance.h"
#include "runner/check/ulp_hist.h"
#include "runner/golden/exact.h"

static double acc_value(kv_dtype rd, uint64_t b) {
    switch (rd) {
    case KV_F16: return kv_f16_to_f32((uint16_t)b);
    case KV_BF16: return kv_bf16_to_f32((uint16_t)b);
    case KV_F32: {
        const uint32_t u = (uint32_t)b;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    }
}

/* The worst element of a row, for its message. */
typedef struct acc_worst {
    double ulps;
    int output;
    int64_t lin;
    double truth, got;
} acc_worst;

/* Adds output `o` (truth contiguous, got any strides) into r's histogram. */
static void acc_measure(const kv_tensor *truth, const kv_tensor *got, int o, kv_check_result *r, acc_worst *w) {
    const kv_dtype dt = truth->dtype;
    const kv_dtype rd = kv_dtype_to_real(dt);
    const int parts = kv_dtype_is_complex(dt) ? 2 : 1;
    const int64_t n = kv_tensor_numel(truth);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t lin = 0; lin < n; lin++) {
        const char *pt = kv_tensor_element(truth, idx);
        const char *pg = kv_tensor_element(got, idx);
        for (int k = 0; k < parts; k++) {
            const int cw = kv_ulp_component_width(rd);
            uint64_t tb, gb;
            const double u = kv_ulp_component_error(rd, pt + k * cw, pg + k * cw, &tb, &gb);
            r->ulp_hist[kv_ulp_bin(u)]++;
            r->ulp_elements++;
            const double rank = u < 0 ? INFINITY : u;
            if (rank > r->ulp_max) r->ulp_max = rank;
            if (rank > w->ulps) {
                *w = (acc_worst){ rank, o, lin, acc_value(rd, tb), acc_value(rd, gb) };
            }
        }
        for (int d = truth->ndim - 1; d >= 0; d--) {
            if (++idx[d] < truth->sizes[d]) break;
            idx[d] = 0;
        }
    }
}

typedef struct acc_user {
    const kv_case_outputs *truth;
} acc_user;

static bool acc_measured(const kv_tensor *t) {
    return t != NULL && !kv_dtype_is_integral(t->dtype, true);
}

/* The largest error the op's rule allows, or -1 when its rule is not
 * counted in ulps (bounds, relative rules, meta). */
static double acc_allowed(const kv_case *c, kv_dtype dt) {
    const kv_cmp_rule rule = kv_tol_rule_for(c, dt, NULL, NULL);
    switch (rule.kind) {
    case KV_CMP_BITWISE: return 0.0;
    case KV_CMP_ULP: return rule.value;
    case KV_CMP_ABS:
    case KV_CMP_REL:
    case KV_CMP_BOUND:
    case KV_CMP_META: break;
    }
    return -1.0;
}

static void acc_backend(const kv_check_ctx *ctx, kv_key key, const char *variant, void *user) {
    const acc_user *u = user;
    char check[64];
    kv_check_backend_row_name("accuracy", key, variant, check, (int)sizeof check);
    kv_check_result r;
    kv_check_result_begin(&r, ctx, check, kv_check_backend_label(key));
    kv_check_call call = { .meta = NULL, .twice = false };
    if (!kv_check_backend_call(ctx, u->truth->n, key, variant, &call, &r)) {
        kv_check_push(ctx, &r);
        return;
    }
    acc_worst w = { -1.0, 0, 0, 0.0, 0.0 };
    double allowed = -1.0;
    bool bad_shape = false;
    for (int i = 0; i < call.out.n; i++) {
        const kv_tensor *t = u->truth->t[i];
        if (!acc_measured(t)) continue;
        if (call.out.t[i]->dtype != t->dtype || !kv_same_shape(call.out.t[i], t)) {
            kv_check_result_set(&r, KV_RESULT_FAIL, "output %d: dtype or shape differs from the reference's", i);
            bad_shape = true;
            break;
        }
        acc_measure(t, call.out.t[i], i, &r, &w);
        kv_out_facts_record(&r, i, t, call.out.t[i]);
        const double a = acc_allowed(ctx->c, t->dtype);
        if (a > allowed) allowed = a;
    }
    kv_case_outputs_free(&call.out);
    if (!bad_shape) {
        char mx[32], p999[32];
        kv_ulp_format(r.ulp_max, mx, sizeof mx);
        kv_ulp_format(kv_ulp_quantile(r.ulp_hist, 0.999, r.ulp_max), p999, sizeof p999);
        const int64_t exact = r.ulp_hist[0];
        /* The counts read as every other row's: an element "differs" when
         * it is not the correctly rounded value. Said in the message, so
         * the reports do not add their generic counts line, whose max abs
         * err this check does not measure. */
        r.compared = r.ulp_elements;
        r.mismatched = r.ulp_elements - exact;
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "max %s ulp, 99.9%% %s ulp; %lld of %lld elements differ from the correctly rounded value",
                            mx, p999, (long long)r.mismatched, (long long)r.compared);
        r.max_ulps = isinf(r.ulp_max) ? -1.0 : r.ulp_max;
        if (w.ulps > 0)
            kv_check_result_append(&r, "; worst: output %d element %lld, truth %.9g got %.9g", w.output,
                                   (long long)w.lin, w.truth, w.got);
        if (allowed >= 0 && r.ulp_max > allowed) {
            r.status = KV_RESULT_FAIL;
            kv_check_result_append(&r, "; past the op's tolerance of %g ulp", allowed);
        }
    }
    kv_check_push(ctx, &r);
}

void kv_check_accuracy_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "accuracy", NULL);
    if (c->expect != KV_OK || ctx->env->regen_golden) {
        /* A regeneration records goldens; measuring is a normal run's job. */
        if (c->expect != KV_OK)
            kv_check_result_set(&r, KV_RESULT_SKIP, "expect=%s: the case has no output to measure",
                                kv_case_expect_name(c->expect));
        else
            kv_check_result_set(&r, KV_RESULT_SKIP, "--regen-golden: nothing is measured while goldens are recorded");
        kv_check_push(ctx, &r);
        return;
    }
    kv_check_ref ref;
    if (kv_check_ref_run(ctx, &ref) != KV_OK || ref.call_status != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "the reference could not run: %s", ref.message);
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    bool any = false;
    for (int i = 0; i < ref.out.n; i++) any = any || acc_measured(ref.out.t[i]);
    const kv_tol_entry *e = kv_tol_lookup(c->op, ref.out.n > 0 ? ref.out.t[0]->dtype : KV_F32, c);
    if (!any || (e != NULL && e->kind == KV_CMP_META)) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "no floating output with specified values to measure");
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    /* The reference's outputs become the truth in place (the reference
     * itself is measured as the CPU/ref variant like every other). */
    if (kv_exact_golden(c, ctx->op, &ref.out, NULL) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "the exact generator failed: %s", kv_last_error_message());
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    acc_user u = { &ref.out };
    kv_check_each_backend(ctx, acc_backend, &u);
    kv_check_ref_free(&ref);
}
