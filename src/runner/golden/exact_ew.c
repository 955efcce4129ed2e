/* Exact goldens of the elementwise ops: unary functions (real and
 * complex), pow with a scalar exponent, add/sub with alpha, mul, div, and
 * gelu_backward (runner/golden/exact.h).
 *
 * Inputs are cast to the result dtype first and scalars rounded as the
 * reference rounds them (f32 for results narrower than f64), so the golden
 * is the exact value of the op on exactly those operands. Cancelling forms
 * are rewritten into their exact equivalents (1 + erf(t) = erfc(-t),
 * 1 + tanh(u) = 2/(1 + e^-2u), 1 - tanh^2 = sech^2): the value is the
 * same, only the working precision a Ziv round needs drops. Real special
 * values follow the same formulas under IEEE arithmetic (MPFR's), so
 * gelu(-inf) is NaN as in the reference. Complex inputs with a non-finite
 * component (and complex rsqrt/pow of zero, division by zero) keep the
 * reference's C99 Annex G values. */
#include "runner/golden/exact.h"

#include <math.h>
#include <string.h>

typedef enum ew_fn {
    EW_ABS, EW_EXP, EW_LOG, EW_SQRT, EW_RSQRT, EW_SIN, EW_COS, EW_TANH, EW_SIGMOID, EW_SILU,
    EW_GELU, EW_GELU_TANH, EW_POW, EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_GELU_BW, EW_GELU_TANH_BW,
    EW_MUL_SCALAR /* x * the scalar in ar/ai (_foreach_mul.Scalar) */
} ew_fn;

typedef struct ew_ctx {
    ew_fn fn;
    bool cplx;
    double xr, xi, yr, yi;       /* operands after the cast (y: other, or gelu_backward's self) */
    double ar, ai;               /* alpha or the exponent */
} ew_ctx;

static bool op_fn(const char *op, const char *approx, ew_fn *fn) {
    static const struct { const char *op; ew_fn fn; } names[] = {
        { "abs", EW_ABS }, { "exp", EW_EXP }, { "log", EW_LOG }, { "sqrt", EW_SQRT }, { "rsqrt", EW_RSQRT },
        { "sin", EW_SIN }, { "cos", EW_COS }, { "tanh", EW_TANH }, { "sigmoid", EW_SIGMOID }, { "silu", EW_SILU },
        { "pow.Tensor_Scalar", EW_POW }, { "add.Tensor", EW_ADD }, { "add_.Tensor", EW_ADD },
        { "sub.Tensor", EW_SUB }, { "mul.Tensor", EW_MUL }, { "mul_.Tensor", EW_MUL }, { "div.Tensor", EW_DIV },
    };
    const bool tanh_approx = approx != NULL && strcmp(approx, "tanh") == 0;
    if (strcmp(op, "gelu") == 0) {
        *fn = tanh_approx ? EW_GELU_TANH : EW_GELU;
        return true;
    }
    if (strcmp(op, "gelu_backward") == 0) {
        *fn = tanh_approx ? EW_GELU_TANH_BW : EW_GELU_BW;
        return true;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(names[i].op, op) == 0) {
            *fn = names[i].fn;
            return true;
        }
    }
    return false;
}

/* ---- real ---- */

/* k = sqrt(2/pi), c = 0.044715 (the decimal constant, exactly). */
static void gelu_consts(mpfr_t k, mpfr_t c, mpfr_prec_t p) {
    mpfr_inits2(p, k, c, (mpfr_ptr)0);
    mpfr_const_pi(k, MPFR_RNDN);
    mpfr_ui_div(k, 2, k, MPFR_RNDN);
    mpfr_sqrt(k, k, MPFR_RNDN);
    mpfr_set_str(c, "0.044715", 10, MPFR_RNDN);
}

/* u = k (x + c x^3) */
static void gelu_tanh_arg(mpfr_t u, const mpfr_t x, mpfr_prec_t p) {
    mpfr_t k, c, t;
    gelu_consts(k, c, p);
    mpfr_init2(t, p);
    mpfr_pow_ui(t, x, 3, MPFR_RNDN);
    mpfr_mul(t, t, c, MPFR_RNDN);
    mpfr_add(t, t, x, MPFR_RNDN);
    mpfr_mul(u, t, k, MPFR_RNDN);
    mpfr_clears(k, c, t, (mpfr_ptr)0);
}

/* gelu_backward's factor t = Phi(x) + x phi(x) (or the tanh form's) is
 * never 0 exactly, and is negative for x < -1 (Phi(x) < phi(x)/|x|, the
 * tanh form likewise); a zero here is both terms underflowed past MPFR's
 * range (|x| above about 2^15), i.e. x far below 0: −0, so grad·t has
 * the exact value's sign (gelu_backward(1, −DBL_MAX) = −0). */
static void gelu_bw_underflow_sign(mpfr_t t) {
    if (mpfr_zero_p(t)) mpfr_set_zero(t, -1);
}

static void real_eval(const ew_ctx *e, mpfr_prec_t p, mpfr_t o) {
    mpfr_t x, y, t, s;
    mpfr_inits2(p, x, y, t, s, (mpfr_ptr)0);
    mpfr_set_d(x, e->xr, MPFR_RNDN);
    mpfr_set_d(y, e->yr, MPFR_RNDN);
    switch (e->fn) {
    case EW_ABS: mpfr_abs(o, x, MPFR_RNDN); break;
    case EW_EXP: mpfr_exp(o, x, MPFR_RNDN); break;
    case EW_LOG: mpfr_log(o, x, MPFR_RNDN); break;
    case EW_SQRT: mpfr_sqrt(o, x, MPFR_RNDN); break;
    case EW_RSQRT:
        /* 1/sqrt(x), so rsqrt(-0) = 1/-0 = -inf as in IEEE arithmetic
         * (mpfr_rec_sqrt(-0) would give +inf). */
        mpfr_sqrt(t, x, MPFR_RNDN);
        mpfr_ui_div(o, 1, t, MPFR_RNDN);
        break;
    case EW_SIN: mpfr_sin(o, x, MPFR_RNDN); break;
    case EW_COS: mpfr_cos(o, x, MPFR_RNDN); break;
    case EW_TANH: mpfr_tanh(o, x, MPFR_RNDN); break;
    case EW_SIGMOID:
    case EW_SILU:
        mpfr_neg(t, x, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add_ui(t, t, 1, MPFR_RNDN);
        if (e->fn == EW_SIGMOID) mpfr_ui_div(o, 1, t, MPFR_RNDN);
        else mpfr_div(o, x, t, MPFR_RNDN);
        break;
    case EW_GELU:
        /* x * (1 + erf(x/sqrt 2)) / 2 = x * erfc(-x/sqrt 2) / 2 */
        mpfr_sqrt_ui(s, 2, MPFR_RNDN);
        mpfr_div(t, x, s, MPFR_RNDN);
        mpfr_neg(t, t, MPFR_RNDN);
        mpfr_erfc(t, t, MPFR_RNDN);
        mpfr_mul(t, t, x, MPFR_RNDN);
        mpfr_div_2ui(o, t, 1, MPFR_RNDN);
        break;
    case EW_GELU_TANH:
        /* x (1 + tanh u) / 2 = x / (1 + e^-2u) */
        gelu_tanh_arg(t, x, p);
        mpfr_mul_si(t, t, -2, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add_ui(t, t, 1, MPFR_RNDN);
        mpfr_div(o, x, t, MPFR_RNDN);
        break;
    case EW_POW:
        mpfr_set_d(t, e->ar, MPFR_RNDN);
        mpfr_pow(o, x, t, MPFR_RNDN);
        break;
    case EW_ADD:
    case EW_SUB:
        mpfr_set_d(t, e->ar, MPFR_RNDN);
        mpfr_mul(t, t, y, MPFR_RNDN); /* exact: p >= 106 */
        if (e->fn == EW_ADD) mpfr_add(o, x, t, MPFR_RNDN);
        else mpfr_sub(o, x, t, MPFR_RNDN);
        break;
    case EW_MUL: mpfr_mul(o, x, y, MPFR_RNDN); break;
    case EW_MUL_SCALAR:
        mpfr_set_d(t, e->ar, MPFR_RNDN);
        mpfr_mul(o, x, t, MPFR_RNDN);
        break;
    case EW_DIV: mpfr_div(o, x, y, MPFR_RNDN); break;
    case EW_GELU_BW: {
        /* grad * (Phi(x) + x phi(x)); x is y here (grad_output first). */
        mpfr_t q;
        mpfr_init2(q, p);
        mpfr_sqrt_ui(s, 2, MPFR_RNDN);
        mpfr_div(t, y, s, MPFR_RNDN);
        mpfr_neg(t, t, MPFR_RNDN);
        mpfr_erfc(t, t, MPFR_RNDN);
        mpfr_div_2ui(t, t, 1, MPFR_RNDN);          /* Phi(x) */
        mpfr_sqr(q, y, MPFR_RNDN);
        mpfr_div_2ui(q, q, 1, MPFR_RNDN);
        mpfr_neg(q, q, MPFR_RNDN);
        mpfr_exp(q, q, MPFR_RNDN);
        mpfr_const_pi(s, MPFR_RNDN);
        mpfr_mul_2ui(s, s, 1, MPFR_RNDN);
        mpfr_sqrt(s, s, MPFR_RNDN);
        mpfr_div(q, q, s, MPFR_RNDN);              /* phi(x) */
        mpfr_mul(q, q, y, MPFR_RNDN);
        mpfr_add(t, t, q, MPFR_RNDN);
        gelu_bw_underflow_sign(t);
        mpfr_mul(o, t, x, MPFR_RNDN);
        mpfr_clear(q);
        break;
    }
    case EW_GELU_TANH_BW: {
        /* grad * ((1 + t)/2 + x/2 sech^2(u) k (1 + 3 c x^2)) */
        mpfr_t k, c, u, q;
        gelu_consts(k, c, p);
        mpfr_inits2(p, u, q, (mpfr_ptr)0);
        gelu_tanh_arg(u, y, p);
        mpfr_mul_si(t, u, -2, MPFR_RNDN);
        mpfr_exp(t, t, MPFR_RNDN);
        mpfr_add_ui(t, t, 1, MPFR_RNDN);
        mpfr_ui_div(t, 1, t, MPFR_RNDN);           /* (1 + tanh u)/2 */
        mpfr_sech(q, u, MPFR_RNDN);
        mpfr_sqr(q, q, MPFR_RNDN);
        mpfr_mul(q, q, k, MPFR_RNDN);
        mpfr_sqr(s, y, MPFR_RNDN);
        mpfr_mul(s, s, c, MPFR_RNDN);
        mpfr_mul_ui(s, s, 3, MPFR_RNDN);
        mpfr_add_ui(s, s, 1, MPFR_RNDN);
        mpfr_mul(q, q, s, MPFR_RNDN);
        mpfr_mul(q, q, y, MPFR_RNDN);
        mpfr_div_2ui(q, q, 1, MPFR_RNDN);
        mpfr_add(t, t, q, MPFR_RNDN);
        gelu_bw_underflow_sign(t);
        mpfr_mul(o, t, x, MPFR_RNDN);
        mpfr_clears(k, c, u, q, (mpfr_ptr)0);
        break;
    }
    }
    mpfr_clears(x, y, t, s, (mpfr_ptr)0);
}

/* ---- complex, on (re, im) pairs at precision p ---- */

typedef struct cx {
    mpfr_t re, im;
} cx;

static void cx_init(cx *z, mpfr_prec_t p, double re, double im) {
    mpfr_inits2(p, z->re, z->im, (mpfr_ptr)0);
    mpfr_set_d(z->re, re, MPFR_RNDN);
    mpfr_set_d(z->im, im, MPFR_RNDN);
}
static void cx_clear(cx *z) { mpfr_clears(z->re, z->im, (mpfr_ptr)0); }

/* r = a * b (schoolbook; the products are exact at p >= 128 for double
 * operands, each component then rounds once at p). r may alias a or b. */
static void cx_mul(cx *r, const cx *a, const cx *b, mpfr_prec_t p) {
    mpfr_t t1, t2, re;
    mpfr_inits2(2 * p, t1, t2, re, (mpfr_ptr)0);
    mpfr_mul(t1, a->re, b->re, MPFR_RNDN);
    mpfr_mul(t2, a->im, b->im, MPFR_RNDN);
    mpfr_sub(re, t1, t2, MPFR_RNDN);
    mpfr_mul(t1, a->re, b->im, MPFR_RNDN);
    mpfr_mul(t2, a->im, b->re, MPFR_RNDN);
    mpfr_add(r->im, t1, t2, MPFR_RNDN);
    mpfr_set(r->re, re, MPFR_RNDN);
    mpfr_clears(t1, t2, re, (mpfr_ptr)0);
}

/* r = a / b = (a * conj b) / |b|^2 */
static void cx_div(cx *r, const cx *a, const cx *b, mpfr_prec_t p) {
    cx bc;
    cx_init(&bc, 2 * p, 0, 0);
    mpfr_set(bc.re, b->re, MPFR_RNDN);
    mpfr_neg(bc.im, b->im, MPFR_RNDN);
    mpfr_t n;
    mpfr_init2(n, 4 * p);
    mpfr_sqr(n, b->re, MPFR_RNDN);
    mpfr_fma(n, b->im, b->im, n, MPFR_RNDN);
    cx_mul(r, a, &bc, p);
    mpfr_div(r->re, r->re, n, MPFR_RNDN);
    mpfr_div(r->im, r->im, n, MPFR_RNDN);
    mpfr_clear(n);
    cx_clear(&bc);
}

/* o = big * f, where big is e^x, cosh x or sinh x of a finite x: when
 * MPFR's exponent range (about 2^±2^30) overflowed it to ±inf, the exact
 * value is still finite, so a zero factor gives a zero whose sign is the
 * product's (e^max · sin(+0) = +0), not inf · 0 = NaN; any other factor
 * gives ±inf, which is what the finite product rounds to in any dtype. */
static void cx_mul_big(mpfr_t o, const mpfr_t big, const mpfr_t f) {
    if (mpfr_inf_p(big) && mpfr_zero_p(f)) mpfr_set_zero(o, mpfr_signbit(big) != mpfr_signbit(f) ? -1 : 1);
    else mpfr_mul(o, big, f, MPFR_RNDN);
}

static void cx_exp(cx *r, const cx *z, mpfr_prec_t p) {
    mpfr_t e, c, s;
    mpfr_inits2(p, e, c, s, (mpfr_ptr)0);
    mpfr_exp(e, z->re, MPFR_RNDN);
    mpfr_sin_cos(s, c, z->im, MPFR_RNDN);
    cx_mul_big(r->re, e, c);
    cx_mul_big(r->im, e, s);
    mpfr_clears(e, c, s, (mpfr_ptr)0);
}

static void cx_log(cx *r, const cx *z, mpfr_prec_t p) {
    mpfr_t h;
    mpfr_init2(h, p);
    mpfr_hypot(h, z->re, z->im, MPFR_RNDN);
    mpfr_atan2(r->im, z->im, z->re, MPFR_RNDN);
    mpfr_log(r->re, h, MPFR_RNDN);
    mpfr_clear(h);
}

/* The principal square root without cancellation: t = sqrt((|z| + |x|)/2),
 * then the other component is y/(2t). */
static void cx_sqrt(cx *r, const cx *z, mpfr_prec_t p) {
    if (mpfr_zero_p(z->re) && mpfr_zero_p(z->im)) {
        mpfr_set_zero(r->re, 1);
        mpfr_set(r->im, z->im, MPFR_RNDN);
        return;
    }
    mpfr_t h, t, u;
    mpfr_inits2(p, h, t, u, (mpfr_ptr)0);
    mpfr_hypot(h, z->re, z->im, MPFR_RNDN);
    mpfr_abs(t, z->re, MPFR_RNDN);
    mpfr_add(t, t, h, MPFR_RNDN);
    mpfr_div_2ui(t, t, 1, MPFR_RNDN);
    mpfr_sqrt(t, t, MPFR_RNDN);
    mpfr_mul_2ui(u, t, 1, MPFR_RNDN);
    if (mpfr_signbit(z->re) == 0) {
        mpfr_div(r->im, z->im, u, MPFR_RNDN);
        mpfr_set(r->re, t, MPFR_RNDN);
    } else {
        mpfr_abs(h, z->im, MPFR_RNDN);
        mpfr_div(r->re, h, u, MPFR_RNDN);
        mpfr_setsign(r->im, t, mpfr_signbit(z->im), MPFR_RNDN);
    }
    mpfr_clears(h, t, u, (mpfr_ptr)0);
}

static void cx_sin_cos(cx *r, const cx *z, mpfr_prec_t p, bool is_cos) {
    mpfr_t s, c, sh, ch;
    mpfr_inits2(p, s, c, sh, ch, (mpfr_ptr)0);
    mpfr_sin_cos(s, c, z->re, MPFR_RNDN);
    mpfr_sinh_cosh(sh, ch, z->im, MPFR_RNDN);
    if (is_cos) {
        cx_mul_big(r->re, ch, c);
        cx_mul_big(r->im, sh, s);
        mpfr_neg(r->im, r->im, MPFR_RNDN);
    } else {
        cx_mul_big(r->re, ch, s);
        cx_mul_big(r->im, sh, c);
    }
    mpfr_clears(s, c, sh, ch, (mpfr_ptr)0);
}

/* tanh(x + iy) = (sinh 2x + i sin 2y) / (cosh 2x + cos 2y). Where cosh 2x
 * overflows MPFR's range (|x| above about 2^28.5) the exact value is
 * ±1 − O(e^-4|x|) + i·sin 2y·O(e^-2|x|): ±1 (the sign of x) and a zero
 * with the sign of sin 2y, once rounded into any dtype (inf/inf would be
 * NaN). */
static void cx_tanh(cx *r, const cx *z, mpfr_prec_t p) {
    mpfr_t a, b, sh, ch, s, c, d;
    mpfr_inits2(p, a, b, sh, ch, s, c, d, (mpfr_ptr)0);
    mpfr_mul_2ui(a, z->re, 1, MPFR_RNDN);
    mpfr_mul_2ui(b, z->im, 1, MPFR_RNDN);
    mpfr_sinh_cosh(sh, ch, a, MPFR_RNDN);
    mpfr_sin_cos(s, c, b, MPFR_RNDN);
    mpfr_add(d, ch, c, MPFR_RNDN);
    if (mpfr_inf_p(ch)) {
        mpfr_set_si(r->re, mpfr_signbit(z->re) ? -1 : 1, MPFR_RNDN);
        mpfr_set_zero(r->im, mpfr_signbit(s) ? -1 : 1);
    } else {
        mpfr_div(r->re, sh, d, MPFR_RNDN);
        mpfr_div(r->im, s, d, MPFR_RNDN);
    }
    mpfr_clears(a, b, sh, ch, s, c, d, (mpfr_ptr)0);
}

static void cx_recip(cx *r, const cx *z, mpfr_prec_t p) {
    cx one;
    cx_init(&one, p, 1.0, 0.0);
    cx_div(r, &one, z, p);
    cx_clear(&one);
}

static void cx_pow(cx *r, const cx *z, const ew_ctx *e, mpfr_prec_t p) {
    if (e->ai == 0.0 && e->ar == floor(e->ar) && fabs(e->ar) <= 64.0) {
        /* An integral exponent: repeated exact products (each at a wider
         * precision), so exact zero components keep IEEE's signs. */
        cx acc, b;
        cx_init(&acc, 64 * p, 1.0, 0.0);
        cx_init(&b, 64 * p, 0, 0);
        mpfr_set(b.re, z->re, MPFR_RNDN);
        mpfr_set(b.im, z->im, MPFR_RNDN);
        for (int i = 0; i < (int)fabs(e->ar); i++) cx_mul(&acc, &acc, &b, 64 * p);
        if (e->ar < 0) cx_recip(&acc, &acc, 64 * p);
        mpfr_set(r->re, acc.re, MPFR_RNDN);
        mpfr_set(r->im, acc.im, MPFR_RNDN);
        cx_clear(&acc);
        cx_clear(&b);
        return;
    }
    cx l, s;
    cx_init(&l, p, 0, 0);
    cx_init(&s, p, e->ar, e->ai);
    cx_log(&l, z, p);
    cx_mul(&l, &l, &s, p);
    cx_exp(r, &l, p);
    cx_clear(&l);
    cx_clear(&s);
}

static void complex_eval(const ew_ctx *e, mpfr_prec_t p, mpfr_t ore, mpfr_t oim) {
    cx z, w, r;
    cx_init(&z, p, e->xr, e->xi);
    cx_init(&w, p, e->yr, e->yi);
    cx_init(&r, p, 0, 0);
    switch (e->fn) {
    case EW_EXP: cx_exp(&r, &z, p); break;
    case EW_LOG: cx_log(&r, &z, p); break;
    case EW_SQRT: cx_sqrt(&r, &z, p); break;
    case EW_RSQRT:
        cx_sqrt(&w, &z, p);
        cx_recip(&r, &w, p);
        break;
    case EW_SIN: cx_sin_cos(&r, &z, p, false); break;
    case EW_COS: cx_sin_cos(&r, &z, p, true); break;
    case EW_TANH: cx_tanh(&r, &z, p); break;
    case EW_SIGMOID: {
        /* 1/(1 + e^-z). Where e^-x leaves MPFR's range the exact value
         * is, once rounded into any dtype, e^z·(1 − e^z ...) = ±0 ± i0
         * (x far below 0: the signs of cos y and sin y) or
         * 1 − e^-z ... = 1 ± i0 (x far above 0: the sign of sin y); the
         * formula would give NaN from inf·0 and inf/inf, or +0 for
         * 0·(−sin y) + 0. */
        mpfr_t ex;
        mpfr_init2(ex, p);
        mpfr_neg(ex, z.re, MPFR_RNDN);
        mpfr_exp(ex, ex, MPFR_RNDN);
        if (mpfr_inf_p(ex) || mpfr_zero_p(ex)) {
            mpfr_t s, c;
            mpfr_inits2(p, s, c, (mpfr_ptr)0);
            mpfr_sin_cos(s, c, z.im, MPFR_RNDN);
            if (mpfr_inf_p(ex)) mpfr_set_zero(r.re, mpfr_signbit(c) ? -1 : 1);
            else mpfr_set_ui(r.re, 1, MPFR_RNDN);
            mpfr_set_zero(r.im, mpfr_signbit(s) ? -1 : 1);
            mpfr_clears(s, c, (mpfr_ptr)0);
        } else {
            mpfr_neg(z.re, z.re, MPFR_RNDN);
            mpfr_neg(z.im, z.im, MPFR_RNDN);
            cx_exp(&w, &z, p);
            mpfr_add_ui(w.re, w.re, 1, MPFR_RNDN);
            cx_recip(&r, &w, p);
        }
        mpfr_clear(ex);
        break;
    }
    case EW_POW: cx_pow(&r, &z, e, p); break;
    case EW_ADD:
    case EW_SUB: {
        cx a;
        cx_init(&a, p, e->ar, e->ai);
        cx_mul(&w, &a, &w, p);
        if (e->fn == EW_ADD) {
            mpfr_add(r.re, z.re, w.re, MPFR_RNDN);
            mpfr_add(r.im, z.im, w.im, MPFR_RNDN);
        } else {
            mpfr_sub(r.re, z.re, w.re, MPFR_RNDN);
            mpfr_sub(r.im, z.im, w.im, MPFR_RNDN);
        }
        cx_clear(&a);
        break;
    }
    case EW_MUL: cx_mul(&r, &z, &w, p); break;
    case EW_MUL_SCALAR: {
        cx a;
        cx_init(&a, p, e->ar, e->ai);
        cx_mul(&r, &z, &a, p);
        cx_clear(&a);
        break;
    }
    case EW_DIV: cx_div(&r, &z, &w, p); break;
    case EW_ABS:
    case EW_SILU:
    case EW_GELU:
    case EW_GELU_TANH:
    case EW_GELU_BW:
    case EW_GELU_TANH_BW: break; /* refused for complex by the reference */
    }
    mpfr_set(ore, r.re, MPFR_RNDN);
    mpfr_set(oim, r.im, MPFR_RNDN);
    cx_clear(&z);
    cx_clear(&w);
    cx_clear(&r);
}

static int ew_eval(void *ctx, mpfr_prec_t p, mpfr_t *outs, int n) {
    const ew_ctx *e = ctx;
    if (e->cplx && n == 2) complex_eval(e, p, outs[0], outs[1]);
    else if (e->fn == EW_ABS && e->cplx) {
        mpfr_t x, y;
        mpfr_inits2(p, x, y, (mpfr_ptr)0);
        mpfr_set_d(x, e->xr, MPFR_RNDN);
        mpfr_set_d(y, e->xi, MPFR_RNDN);
        mpfr_hypot(outs[0], x, y, MPFR_RNDN);
        mpfr_clears(x, y, (mpfr_ptr)0);
    } else
        real_eval(e, p, outs[0]);
    return 0;
}

/* Complex special values stay the reference's (Annex G). */
static bool complex_keeps_ref(const ew_ctx *e, bool binary) {
    if (!isfinite(e->xr) || !isfinite(e->xi)) return true;
    if (binary && (!isfinite(e->yr) || !isfinite(e->yi))) return true;
    const bool x_zero = e->xr == 0.0 && e->xi == 0.0;
    if ((e->fn == EW_RSQRT || e->fn == EW_POW) && x_zero) return true;
    if (e->fn == EW_DIV && e->yr == 0.0 && e->yi == 0.0) return true;
    return false;
}

/* The elementwise loop shared by every op here: a = first tensor operand,
 * b = second (NULL for unary ops). */
static kv_status ew_run(const kv_exact_call *x, ew_fn fn, const kv_tensor *a, const kv_tensor *b, double sr,
                        double si) {
    kv_tensor *o = x->out->t[0];
    const kv_dtype odt = o->dtype;
    const bool ocplx = kv_dtype_is_complex(odt);
    /* abs of a complex input is real; everything else computes in the
     * output's dtype. */
    const kv_dtype cdt = (fn == EW_ABS) ? a->dtype : odt;
    const bool cplx = kv_dtype_is_complex(cdt);
    if (fn == EW_ABS && !cplx) return KV_OK;
    const int64_t n = kv_tensor_numel(o);
    mpfr_t v;
    mpfr_init2(v, 64);
    kv_status st = KV_OK;
    for (int64_t i = 0; i < n && st == KV_OK; i++) {
        ew_ctx e = { fn, cplx, 0, 0, 0, 0, sr, si };
        const int64_t ia = kv_exact_bcast_index(a, o->sizes, o->ndim, i);
        kv_exact_load_as(a, ia, 0, cdt, v);
        e.xr = mpfr_get_d(v, MPFR_RNDN);
        if (cplx) {
            kv_exact_load_as(a, ia, 1, cdt, v);
            e.xi = mpfr_get_d(v, MPFR_RNDN);
        }
        if (b != NULL) {
            const int64_t ib = kv_exact_bcast_index(b, o->sizes, o->ndim, i);
            kv_exact_load_as(b, ib, 0, cdt, v);
            e.yr = mpfr_get_d(v, MPFR_RNDN);
            if (cplx) {
                kv_exact_load_as(b, ib, 1, cdt, v);
                e.yi = mpfr_get_d(v, MPFR_RNDN);
            }
        }
        if (cplx && complex_keeps_ref(&e, b != NULL)) continue;
        double r[2];
        const int parts = ocplx ? 2 : 1;
        st = kv_exact_ziv(&e, ew_eval, parts, odt, r);
        for (int k = 0; k < parts && st == KV_OK; k++) kv_exact_store(o, i, k, r[k], x->stats);
    }
    mpfr_clear(v);
    return st;
}

static const kv_tensor *arg_tensor(const kv_exact_call *x, int i) {
    return (i < x->in->nargs && x->in->args[i].tag == KV_IV_TENSOR) ? x->in->args[i].v.tensor : NULL;
}

static const char *arg_str(const kv_exact_call *x, int i) {
    return (i < x->in->nargs && x->in->args[i].tag == KV_IV_STR) ? x->in->args[i].v.str : NULL;
}

kv_status kv_exact_unary(const kv_exact_call *x) {
    ew_fn fn;
    const kv_tensor *a = arg_tensor(x, 0);
    if (a == NULL || x->out->n < 1 || !op_fn(x->name, arg_str(x, 1), &fn)) return KV_OK;
    double sr = 0.0, si = 0.0;
    if (fn == EW_POW) {
        if (x->in->nargs < 2 || x->in->args[1].tag != KV_IV_SCALAR) return KV_OK;
        kv_exact_scalar(x->in->args[1].v.scalar, x->out->t[0]->dtype, &sr, &si);
    }
    return ew_run(x, fn, a, NULL, sr, si);
}

kv_status kv_exact_binary(const kv_exact_call *x) {
    ew_fn fn;
    const kv_tensor *a = arg_tensor(x, 0), *b = arg_tensor(x, 1);
    if (a == NULL || b == NULL || x->out->n < 1 || !op_fn(x->name, NULL, &fn)) return KV_OK;
    double sr = 1.0, si = 0.0;
    if ((fn == EW_ADD || fn == EW_SUB) && x->in->nargs > 2 && x->in->args[2].tag == KV_IV_SCALAR)
        kv_exact_scalar(x->in->args[2].v.scalar, x->out->t[0]->dtype, &sr, &si);
    return ew_run(x, fn, a, b, sr, si);
}

kv_status kv_exact_mul_scalar(const kv_exact_call *x) {
    const kv_tensor *a = arg_tensor(x, 0);
    if (a == NULL || x->out->n < 1 || x->in->nargs < 2 || x->in->args[1].tag != KV_IV_SCALAR) return KV_OK;
    double sr = 0.0, si = 0.0;
    kv_exact_scalar(x->in->args[1].v.scalar, x->out->t[0]->dtype, &sr, &si);
    return ew_run(x, EW_MUL_SCALAR, a, NULL, sr, si);
}

kv_status kv_exact_gelu_backward(const kv_exact_call *x) {
    ew_fn fn;
    const kv_tensor *g = arg_tensor(x, 0), *s = arg_tensor(x, 1);
    if (g == NULL || s == NULL || x->out->n < 1 || !op_fn(x->name, arg_str(x, 2), &fn)) return KV_OK;
    return ew_run(x, fn, g, s, 0.0, 0.0);
}
