/* Exact goldens of the reductions (sum, mean, prod) and the matrix
 * products (mm, bmm, addmm) (runner/golden/exact.h).
 *
 * Each output element gathers its terms, which are exact (input values,
 * cast to the result dtype as the op casts them; products of two or three
 * doubles held at a precision that makes them exact), and mpfr_sum
 * rounds their sum once at the working precision, whatever the
 * cancellation; mean divides that by the count, addmm adds beta*self.
 * IEEE special values follow MPFR's arithmetic: inf - inf and 0 * inf are
 * NaN, an overflowing exact sum rounds to infinity in the output format.
 * addmm with beta = 0 never reads self (PyTorch's rule, as the reference). */
#include "runner/golden/exact.h"

#include <stdlib.h>
#include <string.h>

/* A group: `nterms` real terms per part (1 or 2 parts), as doubles, and
 * how the sum is finished. */
typedef struct sum_ctx {
    int parts;
    int64_t nterms;
    const double *terms;         /* [part][term]: part-major */
    bool mean;                   /* divide by nterms (an empty mean is 0/0 = NaN) */
    bool prod;                   /* product instead of sum (parts == 1 or 2) */
} sum_ctx;

static int sum_eval(void *vctx, mpfr_prec_t p, mpfr_t *outs, int n) {
    const sum_ctx *s = vctx;
    if (s->prod) {
        /* Products: real, or complex schoolbook; exact at 64*p bits for
         * the term counts the suite uses, then one rounding at p. */
        const mpfr_prec_t w = p * 8;
        mpfr_t re, im, t1, t2, nr;
        mpfr_inits2(w, re, im, t1, t2, nr, (mpfr_ptr)0);
        mpfr_set_ui(re, 1, MPFR_RNDN);
        mpfr_set_ui(im, 0, MPFR_RNDN);
        for (int64_t k = 0; k < s->nterms; k++) {
            const double ar = s->terms[k], ai = s->parts == 2 ? s->terms[s->nterms + k] : 0.0;
            if (s->parts == 1) {
                mpfr_mul_d(re, re, ar, MPFR_RNDN);
                continue;
            }
            mpfr_mul_d(t1, re, ar, MPFR_RNDN);
            mpfr_mul_d(t2, im, ai, MPFR_RNDN);
            mpfr_sub(nr, t1, t2, MPFR_RNDN);
            mpfr_mul_d(t1, re, ai, MPFR_RNDN);
            mpfr_mul_d(t2, im, ar, MPFR_RNDN);
            mpfr_add(im, t1, t2, MPFR_RNDN);
            mpfr_set(re, nr, MPFR_RNDN);
        }
        mpfr_set(outs[0], re, MPFR_RNDN);
        if (n > 1) mpfr_set(outs[1], im, MPFR_RNDN);
        mpfr_clears(re, im, t1, t2, nr, (mpfr_ptr)0);
        return 0;
    }
    mpfr_t *v = malloc(sizeof(mpfr_t) * (size_t)(s->nterms ? s->nterms : 1));
    mpfr_ptr *ptr = malloc(sizeof(mpfr_ptr) * (size_t)(s->nterms ? s->nterms : 1));
    if (v == NULL || ptr == NULL) {
        free(v);
        free(ptr);
        return -1;
    }
    for (int64_t k = 0; k < s->nterms; k++) {
        mpfr_init2(v[k], 64);
        ptr[k] = v[k];
    }
    for (int part = 0; part < n; part++) {
        for (int64_t k = 0; k < s->nterms; k++) mpfr_set_d(v[k], s->terms[part * s->nterms + k], MPFR_RNDN);
        mpfr_sum(outs[part], ptr, (unsigned long)s->nterms, MPFR_RNDN);
        if (s->mean) mpfr_div_si(outs[part], outs[part], (long)s->nterms, MPFR_RNDN);
    }
    for (int64_t k = 0; k < s->nterms; k++) mpfr_clear(v[k]);
    free(v);
    free(ptr);
    return 0;
}

static bool reduced_dims(const kv_exact_call *x, const kv_tensor *a, bool dims[KV_MAX_DIMS]) {
    memset(dims, 0, sizeof(bool) * KV_MAX_DIMS);
    const kv_ivalue *d = x->in->nargs > 1 ? &x->in->args[1] : NULL;
    bool all = d == NULL || d->tag == KV_IV_NONE || (d->tag == KV_IV_INT_LIST && d->v.ints.n == 0);
    if (all) {
        for (int i = 0; i < a->ndim; i++) dims[i] = true;
        return true;
    }
    if (d->tag == KV_IV_INT) {
        const int64_t k = d->v.i < 0 ? d->v.i + (a->ndim ? a->ndim : 1) : d->v.i;
        if (k >= 0 && k < a->ndim) dims[k] = true;
        return true;
    }
    if (d->tag != KV_IV_INT_LIST) return false;
    for (int i = 0; i < d->v.ints.n; i++) {
        const int64_t k = d->v.ints.items[i] < 0 ? d->v.ints.items[i] + (a->ndim ? a->ndim : 1) : d->v.ints.items[i];
        if (k >= 0 && k < a->ndim) dims[k] = true;
    }
    return true;
}

kv_status kv_exact_reduce(const kv_exact_call *x) {
    const kv_tensor *a = x->in->args[0].tag == KV_IV_TENSOR ? x->in->args[0].v.tensor : NULL;
    kv_tensor *o = x->out->n > 0 ? x->out->t[0] : NULL;
    if (a == NULL || o == NULL || !(kv_dtype_is_floating(o->dtype) || kv_dtype_is_complex(o->dtype))) return KV_OK;
    bool dims[KV_MAX_DIMS];
    if (!reduced_dims(x, a, dims)) return KV_OK;
    const int64_t nin = kv_tensor_numel(a), nout = kv_tensor_numel(o);
    int64_t count = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (dims[i]) count *= a->sizes[i];
    }
    const int parts = kv_dtype_is_complex(o->dtype) ? 2 : 1;
    double *terms = calloc((size_t)(nout * parts * (count ? count : 1)), sizeof(double));
    int64_t *fill = calloc((size_t)(nout ? nout : 1), sizeof(int64_t));
    if (terms == NULL || fill == NULL) {
        free(terms);
        free(fill);
        return kv_error(KV_ERR_OOM, "exact golden: out of memory");
    }
    mpfr_t v;
    mpfr_init2(v, 64);
    /* Input elements in row-major order land in their output's term list:
     * the output index is the row-major index over the kept dims. */
    for (int64_t i = 0; i < nin; i++) {
        int64_t rem = i, oi = 0, mul = 1;
        for (int d = a->ndim - 1; d >= 0; d--) {
            const int64_t idx = rem % a->sizes[d];
            rem /= a->sizes[d];
            if (!dims[d]) {
                oi += idx * mul;
                mul *= a->sizes[d];
            }
        }
        if (oi >= nout) continue;
        const int64_t k = fill[oi]++;
        for (int part = 0; part < parts; part++) {
            kv_exact_load_as(a, i, part, o->dtype, v);
            terms[(oi * parts + part) * count + k] = mpfr_get_d(v, MPFR_RNDN);
        }
    }
    mpfr_clear(v);
    const bool is_prod = strcmp(x->name, "prod.dim_int") == 0;
    const bool is_mean = strcmp(x->name, "mean.dim") == 0;
    kv_status st = KV_OK;
    for (int64_t oi = 0; oi < nout && st == KV_OK; oi++) {
        sum_ctx s = { parts, count, terms + oi * parts * count, is_mean, is_prod };
        double r[2];
        st = kv_exact_ziv(&s, sum_eval, parts, kv_exact_real_of(o->dtype), r);
        for (int part = 0; part < parts && st == KV_OK; part++) kv_exact_store(o, oi, part, r[part], x->stats);
    }
    free(terms);
    free(fill);
    return st;
}

/* ---- matmul ---- */

typedef struct mm_ctx {
    int parts;
    int64_t k;
    const double *a, *b;         /* the row of a and the column of b: [k][part] */
    bool has_c;
    double cr, ci, alr, ali, ber, bei;
} mm_ctx;

/* out = beta*c + alpha*sum_k a_k b_k, complex schoolbook per product. */
static int mm_eval(void *vctx, mpfr_prec_t p, mpfr_t *outs, int n) {
    const mm_ctx *m = vctx;
    const int64_t nt = m->k * (m->parts == 2 ? 2 : 1);
    mpfr_t *v = malloc(sizeof(mpfr_t) * (size_t)(nt ? nt : 1));
    mpfr_ptr *ptr = malloc(sizeof(mpfr_ptr) * (size_t)(nt ? nt : 1));
    if (v == NULL || ptr == NULL) {
        free(v);
        free(ptr);
        return -1;
    }
    for (int64_t t = 0; t < nt; t++) {
        mpfr_init2(v[t], 128);
        ptr[t] = v[t];
    }
    mpfr_t acc[2], t1, t2;
    mpfr_inits2(p, acc[0], acc[1], t1, t2, (mpfr_ptr)0);
    for (int part = 0; part < m->parts; part++) {
        for (int64_t k = 0; k < m->k; k++) {
            const double ar = m->a[k * m->parts], br = m->b[k * m->parts];
            if (m->parts == 1) {
                mpfr_set_d(v[k], ar, MPFR_RNDN);
                mpfr_mul_d(v[k], v[k], br, MPFR_RNDN);
                continue;
            }
            const double ai = m->a[k * 2 + 1], bi = m->b[k * 2 + 1];
            /* re: ar*br - ai*bi; im: ar*bi + ai*br, each product exact. */
            mpfr_set_d(v[2 * k], ar, MPFR_RNDN);
            mpfr_mul_d(v[2 * k], v[2 * k], part ? bi : br, MPFR_RNDN);
            mpfr_set_d(v[2 * k + 1], ai, MPFR_RNDN);
            mpfr_mul_d(v[2 * k + 1], v[2 * k + 1], part ? br : bi, MPFR_RNDN);
            if (!part) mpfr_neg(v[2 * k + 1], v[2 * k + 1], MPFR_RNDN);
        }
        mpfr_sum(acc[part], ptr, (unsigned long)nt, MPFR_RNDN);
    }
    /* alpha * acc + beta * c (complex scalars allowed) */
    for (int part = 0; part < n; part++) {
        if (m->parts == 1) {
            mpfr_mul_d(outs[0], acc[0], m->alr, MPFR_RNDN);
        } else {
            mpfr_mul_d(t1, acc[0], part ? m->ali : m->alr, MPFR_RNDN);
            mpfr_mul_d(t2, acc[1], part ? m->alr : m->ali, MPFR_RNDN);
            if (part) mpfr_add(outs[part], t1, t2, MPFR_RNDN);
            else mpfr_sub(outs[part], t1, t2, MPFR_RNDN);
        }
        if (m->has_c) {
            mpfr_set_d(t1, m->cr, MPFR_RNDN);
            mpfr_mul_d(t1, t1, part ? m->bei : m->ber, MPFR_RNDN);
            mpfr_set_d(t2, m->ci, MPFR_RNDN);
            mpfr_mul_d(t2, t2, part ? m->ber : m->bei, MPFR_RNDN);
            if (part) mpfr_add(t1, t1, t2, MPFR_RNDN);
            else mpfr_sub(t1, t1, t2, MPFR_RNDN);
            mpfr_add(outs[part], outs[part], t1, MPFR_RNDN);
        }
    }
    for (int64_t t = 0; t < nt; t++) mpfr_clear(v[t]);
    mpfr_clears(acc[0], acc[1], t1, t2, (mpfr_ptr)0);
    free(v);
    free(ptr);
    return 0;
}

static void scalar_arg(const kv_exact_call *x, int i, double *re, double *im) {
    *re = 1.0;
    *im = 0.0;
    if (i < x->in->nargs && x->in->args[i].tag == KV_IV_SCALAR) kv_scalar_to_complex(x->in->args[i].v.scalar, re, im);
}

kv_status kv_exact_matmul(const kv_exact_call *x) {
    const bool addmm = strcmp(x->name, "addmm") == 0;
    const int ia = addmm ? 1 : 0;
    const kv_tensor *c = addmm ? x->in->args[0].v.tensor : NULL;
    const kv_tensor *a = x->in->args[ia].v.tensor, *b = x->in->args[ia + 1].v.tensor;
    kv_tensor *o = x->out->t[0];
    if (!(kv_dtype_is_floating(o->dtype) || kv_dtype_is_complex(o->dtype))) return KV_OK;
    const int parts = kv_dtype_is_complex(o->dtype) ? 2 : 1;
    const bool batched = a->ndim == 3;
    const int64_t nb = batched ? a->sizes[0] : 1;
    const int64_t n = a->sizes[a->ndim - 2], k = a->sizes[a->ndim - 1], m = b->sizes[b->ndim - 1];
    mm_ctx ctx = { parts, k, NULL, NULL, false, 0, 0, 1, 0, 1, 0 };
    if (addmm) {
        scalar_arg(x, 3, &ctx.ber, &ctx.bei);
        scalar_arg(x, 4, &ctx.alr, &ctx.ali);
        ctx.has_c = !(ctx.ber == 0.0 && ctx.bei == 0.0);
    }
    double *row = malloc(sizeof(double) * (size_t)(k * parts + 1));
    double *col = malloc(sizeof(double) * (size_t)(k * parts + 1));
    if (row == NULL || col == NULL) {
        free(row);
        free(col);
        return kv_error(KV_ERR_OOM, "exact golden: out of memory");
    }
    ctx.a = row;
    ctx.b = col;
    kv_status st = KV_OK;
    for (int64_t bi = 0; bi < nb && st == KV_OK; bi++) {
        for (int64_t i = 0; i < n && st == KV_OK; i++) {
            for (int64_t kk = 0; kk < k; kk++) {
                for (int part = 0; part < parts; part++) row[kk * parts + part] = kv_exact_load_d(a, (bi * n + i) * k + kk, part);
            }
            for (int64_t j = 0; j < m && st == KV_OK; j++) {
                for (int64_t kk = 0; kk < k; kk++) {
                    for (int part = 0; part < parts; part++) col[kk * parts + part] = kv_exact_load_d(b, (bi * k + kk) * m + j, part);
                }
                const int64_t oi = (bi * n + i) * m + j;
                if (ctx.has_c) {
                    const int64_t ci = kv_exact_bcast_index(c, o->sizes, o->ndim, oi);
                    ctx.cr = kv_exact_load_d(c, ci, 0);
                    ctx.ci = parts == 2 ? kv_exact_load_d(c, ci, 1) : 0.0;
                }
                double r[2];
                st = kv_exact_ziv(&ctx, mm_eval, parts, kv_exact_real_of(o->dtype), r);
                for (int part = 0; part < parts && st == KV_OK; part++) kv_exact_store(o, oi, part, r[part], x->stats);
            }
        }
    }
    free(row);
    free(col);
    return st;
}
