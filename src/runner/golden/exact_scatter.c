/* Exact goldens of the scatter-add backward ops (as_strided_backward,
 * unfold_backward, index_select_backward, embedding_dense_backward)
 * (runner/golden/exact.h).
 *
 * Each is linear in its gradient: out_i = sum_j W_ij g_j. Rather than
 * restate every op's index arithmetic, the generator measures W by probing
 * the reference with unit gradients (g = e_j, one call per gradient
 * element; the suite's gradients are small), which is exact: the weights
 * are small integers (how often element j lands on i) or, with
 * scale_grad_by_freq, 1/count, recognised as the reciprocal of an
 * integer. Then out_i is the exact sum of W_ij g_j rounded once. */
#include "runner/golden/exact.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/tune.h"

typedef struct sc_ctx {
    int64_t n;
    const double *g;             /* the terms' gradient values */
    const double *mul, *div;     /* coefficient mul/div per term */
} sc_ctx;

static int sc_eval(void *vctx, mpfr_prec_t p, mpfr_t *outs, int n) {
    const sc_ctx *s = vctx;
    (void)n;
    mpfr_t *v = malloc(sizeof(mpfr_t) * (size_t)(s->n ? s->n : 1));
    mpfr_ptr *ptr = malloc(sizeof(mpfr_ptr) * (size_t)(s->n ? s->n : 1));
    if (v == NULL || ptr == NULL) {
        free(v);
        free(ptr);
        return -1;
    }
    for (int64_t k = 0; k < s->n; k++) {
        mpfr_init2(v[k], p);
        mpfr_set_d(v[k], s->g[k], MPFR_RNDN);
        mpfr_mul_d(v[k], v[k], s->mul[k], MPFR_RNDN);
        mpfr_div_d(v[k], v[k], s->div[k], MPFR_RNDN);
        ptr[k] = v[k];
    }
    mpfr_sum(outs[0], ptr, (unsigned long)s->n, MPFR_RNDN);
    for (int64_t k = 0; k < s->n; k++) mpfr_clear(v[k]);
    free(v);
    free(ptr);
    return 0;
}

/* A probed weight as mul/div: an integer, or the reciprocal of one. */
static bool weight_of(double w, double *mul, double *div) {
    if (w == floor(w)) {
        *mul = w;
        *div = 1.0;
        return true;
    }
    const double k = nearbyint(1.0 / w);
    if (k != 0.0 && 1.0 / k == w) {
        *mul = 1.0;
        *div = k;
        return true;
    }
    return false;
}

kv_status kv_exact_scatter(const kv_exact_call *x) {
    kv_tensor *g = x->in->args[0].tag == KV_IV_TENSOR ? x->in->args[0].v.tensor : NULL;
    kv_tensor *o = x->out->t[0];
    if (g == NULL || !(kv_dtype_is_floating(o->dtype) || kv_dtype_is_complex(o->dtype))) return KV_OK;
    const int64_t ng = kv_tensor_numel(g), no = kv_tensor_numel(o);
    const int parts = kv_dtype_is_complex(o->dtype) ? 2 : 1;
    const size_t gbytes = (size_t)ng * kv_dtype_size(g->dtype);
    double *wm = calloc((size_t)(no * ng + 1), sizeof(double));
    double *gv = malloc(sizeof(double) * (size_t)(ng * parts + 1));
    double *terms = malloc(sizeof(double) * (size_t)(3 * ng + 3));
    unsigned char *saved = malloc(gbytes + 1);
    if (wm == NULL || gv == NULL || terms == NULL || saved == NULL) {
        free(wm);
        free(gv);
        free(terms);
        free(saved);
        return kv_error(KV_ERR_OOM, "exact golden: out of memory");
    }
    for (int64_t j = 0; j < ng; j++) {
        for (int part = 0; part < parts; part++) gv[j * parts + part] = kv_exact_load_d(g, j, part);
    }
    memcpy(saved, kv_tensor_data(g), gbytes);
    kv_status st = KV_OK;
    const bool was_ref = kv_tune_reference_mode_set(true);
    for (int64_t j = 0; j < ng && st == KV_OK; j++) {
        memset(kv_tensor_data(g), 0, gbytes);
        kv_exact_store(g, j, 0, 1.0, NULL);
        kv_case_outputs po;
        st = kv_case_invoke(x->op, x->in, kv_keyset_of(KV_KEY_CPU), &po);
        if (st != KV_OK) break;
        for (int64_t i = 0; i < no && i < kv_tensor_numel(po.t[0]); i++) wm[i * ng + j] = kv_exact_load_d(po.t[0], i, 0);
        kv_case_outputs_free(&po);
    }
    kv_tune_reference_mode_set(was_ref);
    memcpy(kv_tensor_data(g), saved, gbytes);
    double *tg = terms, *tm = terms + ng, *td = terms + 2 * ng;
    for (int64_t i = 0; i < no && st == KV_OK; i++) {
        for (int part = 0; part < parts && st == KV_OK; part++) {
            int64_t n = 0;
            bool ok = true;
            for (int64_t j = 0; j < ng; j++) {
                const double w = wm[i * ng + j];
                if (w == 0.0) continue;
                ok = ok && weight_of(w, &tm[n], &td[n]);
                tg[n++] = gv[j * parts + part];
            }
            if (!ok) continue; /* a weight that is not 1/k: the reference's value stays */
            sc_ctx s = { n, tg, tm, td };
            double r;
            st = kv_exact_ziv(&s, sc_eval, 1, kv_exact_real_of(o->dtype), &r);
            if (st == KV_OK) kv_exact_store(o, i, part, r, x->stats);
        }
    }
    free(wm);
    free(gv);
    free(terms);
    free(saved);
    return st;
}
