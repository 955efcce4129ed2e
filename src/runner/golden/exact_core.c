/* The exact generator's arithmetic core: output formats, correct rounding
 * into them, exact element loads and stores, and the Ziv loop
 * (runner/golden/exact.h). */
#include "runner/golden/exact.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/dtype.h"
#include "kv/scalar.h"

/* MPFR writes x = m * 2^e with 1/2 <= |m| < 1, so a binary format with p
 * bits, largest finite exponent emax_ieee and smallest normal exponent
 * emin_ieee has emax = emax_ieee + 1 and, counting its subnormals,
 * emin = emin_ieee - p + 2 (MPFR manual, mpfr_subnormalize: binary64 is
 * emin = -1073, emax = 1024). */
typedef struct fmt {
    mpfr_prec_t prec;
    mpfr_exp_t emin, emax;
} fmt;

static fmt fmt_of(kv_dtype dt) {
    switch (kv_exact_real_of(dt)) {
    case KV_F16: return (fmt){ 11, -23, 16 };
    case KV_BF16: return (fmt){ 8, -132, 128 };
    case KV_F32: return (fmt){ 24, -148, 128 };
    case KV_F64: return (fmt){ 53, -1073, 1024 };
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return (fmt){ 53, -1073, 1024 };
}

kv_dtype kv_exact_real_of(kv_dtype dt) {
    if (dt == KV_C64) return KV_F32;
    if (dt == KV_C128) return KV_F64;
    return dt;
}

double kv_exact_round(mpfr_srcptr y, kv_dtype dt) {
    if (mpfr_nan_p(y)) return NAN;
    if (mpfr_inf_p(y) || mpfr_zero_p(y)) return mpfr_get_d(y, MPFR_RNDN);
    const fmt f = fmt_of(dt);
    const int neg = mpfr_signbit(y);
    const mpfr_exp_t e = mpfr_get_exp(y);
    if (e > f.emax) return neg ? -INFINITY : INFINITY;
    if (e < f.emin) {
        /* |y| < 2^(emin-1), the smallest subnormal: it rounds to that
         * subnormal above half of it, to zero at or below half (the tie
         * goes to the even zero). Handled here because MPFR functions
         * want their inputs inside the current exponent range. */
        mpfr_t half;
        mpfr_init2(half, 2);
        mpfr_set_ui_2exp(half, 1, f.emin - 2, MPFR_RNDN);
        const double r = mpfr_cmpabs(y, half) > 0 ? ldexp(1.0, (int)f.emin - 1) : 0.0;
        mpfr_clear(half);
        return neg ? -r : r;
    }
    const mpfr_exp_t old_min = mpfr_get_emin(), old_max = mpfr_get_emax();
    mpfr_set_emin(f.emin);
    mpfr_set_emax(f.emax);
    mpfr_t r;
    mpfr_init2(r, f.prec);
    int inex = mpfr_set(r, y, MPFR_RNDN);
    inex = mpfr_check_range(r, inex, MPFR_RNDN);
    mpfr_subnormalize(r, inex, MPFR_RNDN);
    mpfr_set_emin(old_min);
    mpfr_set_emax(old_max);
    const double d = mpfr_get_d(r, MPFR_RNDN);
    mpfr_clear(r);
    return d;
}

/* ---- the Ziv loop ---- */

#define ZIV_START 128
#define ZIV_MAX 65536

/* Whether y, computed at working precision p, lies so close to a rounding
 * boundary of dt (a midpoint between two neighbours, or the overflow or
 * underflow threshold) that an error of |y| 2^-(p-8) could move it across:
 * then two precisions agreeing proves nothing. gelu(x) or silu(x) of an f64
 * subnormal x is x/2 plus a correction 2^-1023 smaller, a tie at 128, 256
 * and 512 bits that the exact value breaks (the 4096-bit recomputation
 * caught two such elements in an accuracy sweep). */
static bool near_boundary(mpfr_srcptr y, mpfr_prec_t p, kv_dtype dt, double r) {
    if (!mpfr_number_p(y) || mpfr_zero_p(y)) return false;
    mpfr_t d, lo, hi;
    mpfr_inits2(p + 16, d, lo, hi, (mpfr_ptr)0);
    mpfr_abs(d, y, MPFR_RNDN);
    mpfr_mul_2si(d, d, -(long)(p - 8), MPFR_RNDN);
    mpfr_sub(lo, y, d, MPFR_RNDN);
    mpfr_add(hi, y, d, MPFR_RNDN);
    const double a = kv_exact_round(lo, dt), b = kv_exact_round(hi, dt);
    mpfr_clears(d, lo, hi, (mpfr_ptr)0);
    return !(a == r && b == r) && !(isnan(a) && isnan(b) && isnan(r));
}

/* Past this precision a value still on a boundary is taken to be exactly
 * there (an exact tie such as a mean of integers, rounded to even). */
#define ZIV_SURE 4096

static bool same_value(double a, double b, bool zero_sign_free) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (a == 0.0 && b == 0.0 && zero_sign_free) return true;
    return a == b && signbit(a) == signbit(b);
}

/* Elements this thread accepted whose exact value is not the value they
 * round to (kv_exact_inexact_count). Per thread: a regeneration runs in
 * one thread, a test may run the generator in another. */
static _Thread_local int64_t inexact_count;

int64_t kv_exact_inexact_count(void) { return inexact_count; }

/* Whether y, accepted at working precision p, rounded to r by more than
 * the evaluation error near_boundary allows (|y| 2^-(p-8)): only then is
 * the exact value surely not r. An exact sum or product is y itself, so
 * its rounding is seen down to the last bit; a transcendental value that
 * happens to be representable (exp(0)) stays within the error and is not
 * counted. A finite y that overflowed to inf or underflowed to 0 did
 * round. */
static bool rounded_away(mpfr_srcptr y, mpfr_prec_t p, double r) {
    if (!mpfr_number_p(y) || isnan(r)) return false;
    if (isinf(r)) return true;
    mpfr_t d, e;
    mpfr_inits2(p + 64, d, e, (mpfr_ptr)0);
    mpfr_sub_d(d, y, r, MPFR_RNDN);
    mpfr_abs(d, d, MPFR_RNDN);
    mpfr_abs(e, y, MPFR_RNDN);
    mpfr_mul_2si(e, e, -(long)(p - 8), MPFR_RNDN);
    const bool away = mpfr_cmp(d, e) > 0;
    mpfr_clears(d, e, (mpfr_ptr)0);
    return away;
}

kv_status kv_exact_ziv(void *ctx, kv_exact_eval_fn fn, int n, kv_dtype dt, double *res) {
    if (n <= 0) return KV_OK;
    mpfr_t *v = malloc(sizeof(mpfr_t) * (size_t)n);
    double *prev = malloc(sizeof(double) * (size_t)n);
    if (v == NULL || prev == NULL) {
        free(v);
        free(prev);
        return kv_error(KV_ERR_OOM, "exact golden: out of memory");
    }
    for (int i = 0; i < n; i++) mpfr_init2(v[i], ZIV_START);
    kv_status st = KV_OK;
    bool have_prev = false;
    for (mpfr_prec_t p = ZIV_START;; p *= 2) {
        for (int i = 0; i < n; i++) mpfr_set_prec(v[i], p);
        if (fn(ctx, p, v, n) != 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "exact golden: the group cannot be evaluated");
            break;
        }
        bool agree = have_prev;
        for (int i = 0; i < n; i++) {
            res[i] = kv_exact_round(v[i], dt);
            /* An exact zero reached through transcendental functions
             * (cos(pi/2)-like) never settles its sign; past 4096 bits the
             * value is zero and the sign is the last evaluation's. */
            if (have_prev && !same_value(prev[i], res[i], p >= 4096)) agree = false;
            if (agree && p < ZIV_SURE && near_boundary(v[i], p, dt, res[i])) agree = false;
            prev[i] = res[i];
        }
        if (agree) {
            for (int i = 0; i < n; i++) inexact_count += rounded_away(v[i], p, res[i]);
            const mpfr_prec_t vb = kv_exact_verify_bits();
            if (vb > 0) {
                for (int i = 0; i < n; i++) mpfr_set_prec(v[i], vb);
                if (fn(ctx, vb, v, n) == 0)
                    for (int i = 0; i < n; i++) kv_exact_verify_element(v[i], res[i], dt);
            }
            break;
        }
        have_prev = true;
        if (p >= ZIV_MAX) {
            st = kv_error(KV_ERR_INTERNAL, "exact golden: no agreement up to %d bits", ZIV_MAX);
            break;
        }
    }
    for (int i = 0; i < n; i++) mpfr_clear(v[i]);
    free(v);
    free(prev);
    return st;
}

/* ---- elements ---- */

static int64_t elem_offset(const kv_tensor *t, int64_t lin) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const int64_t sz = t->sizes[d];
        if (sz == 0) return 0;
        off += (lin % sz) * t->strides[d];
        lin /= sz;
    }
    return off;
}

int64_t kv_exact_bcast_index(const kv_tensor *t, const int64_t *osz, int ondim, int64_t lin) {
    int64_t idx = 0, mul = 1;
    for (int d = ondim - 1, td = t->ndim - 1; d >= 0; d--, td--) {
        const int64_t i = lin % osz[d];
        lin /= osz[d];
        if (td < 0) continue;
        if (t->sizes[td] != 1) idx += i * mul;
        mul *= t->sizes[td];
    }
    return idx;
}

double kv_exact_load_d(const kv_tensor *t, int64_t lin, int part) {
    const char *p = (const char *)kv_tensor_data(t) + (size_t)elem_offset(t, lin) * kv_dtype_size(t->dtype);
    switch (t->dtype) {
    case KV_BOOL: return part ? 0.0 : (double)(*(const uint8_t *)p != 0);
    case KV_U8: return part ? 0.0 : (double)*(const uint8_t *)p;
    case KV_I8: return part ? 0.0 : (double)*(const int8_t *)p;
    case KV_I16: return part ? 0.0 : (double)*(const int16_t *)p;
    case KV_I32: return part ? 0.0 : (double)*(const int32_t *)p;
    case KV_I64: return part ? 0.0 : (double)*(const int64_t *)p;
    case KV_F16: return part ? 0.0 : (double)kv_f16_to_f32(*(const kv_f16 *)p);
    case KV_BF16: return part ? 0.0 : (double)kv_bf16_to_f32(*(const kv_bf16 *)p);
    case KV_F32: return part ? 0.0 : (double)*(const float *)p;
    case KV_F64: return part ? 0.0 : *(const double *)p;
    case KV_C64: return (double)((const float *)p)[part];
    case KV_C128: return ((const double *)p)[part];
    case KV_DTYPE_COUNT: break;
    }
    return 0.0;
}

void kv_exact_load(const kv_tensor *t, int64_t lin, int part, mpfr_t x) {
    if (t->dtype == KV_I64 && part == 0) {
        /* The one dtype a double cannot hold exactly. */
        const char *p = (const char *)kv_tensor_data(t) + (size_t)elem_offset(t, lin) * 8;
        int64_t v;
        memcpy(&v, p, sizeof v);
        mpfr_set_si(x, (long)v, MPFR_RNDN);
        return;
    }
    mpfr_set_d(x, kv_exact_load_d(t, lin, part), MPFR_RNDN);
}

void kv_exact_load_as(const kv_tensor *t, int64_t lin, int part, kv_dtype to, mpfr_t x) {
    kv_exact_load(t, lin, part, x);
    const kv_dtype rt = kv_exact_real_of(to);
    if (kv_exact_real_of(t->dtype) != rt && kv_dtype_is_floating(rt)) mpfr_set_d(x, kv_exact_round(x, rt), MPFR_RNDN);
}

static bool bits_differ(const void *a, const void *b, size_t n) { return memcmp(a, b, n) != 0; }

void kv_exact_store(kv_tensor *t, int64_t lin, int part, double v, kv_exact_stats *stats) {
    char *p = (char *)kv_tensor_data(t) + (size_t)elem_offset(t, lin) * kv_dtype_size(t->dtype);
    const kv_dtype rt = kv_exact_real_of(t->dtype);
    if (isnan(v) && isnan(kv_exact_load_d(t, lin, part))) {
        if (stats) stats->elements[t->dtype]++;
        return;
    }
    bool changed = false;
    switch (rt) {
    case KV_F16: {
        const kv_f16 h = kv_f64_to_f16(v);
        changed = bits_differ(p, &h, 2);
        memcpy(p, &h, 2);
        break;
    }
    case KV_BF16: {
        const kv_bf16 h = kv_f64_to_bf16(v);
        changed = bits_differ(p, &h, 2);
        memcpy(p, &h, 2);
        break;
    }
    case KV_F32: {
        const float f = (float)v;
        changed = bits_differ(p + 4 * part, &f, 4);
        memcpy(p + 4 * part, &f, 4);
        break;
    }
    case KV_F64:
        changed = bits_differ(p + 8 * part, &v, 8);
        memcpy(p + 8 * part, &v, 8);
        break;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: return;
    }
    if (stats) {
        stats->elements[t->dtype]++;
        if (changed) stats->changed[t->dtype]++;
    }
}

void kv_exact_scalar(kv_scalar s, kv_dtype compute, double *re, double *im) {
    kv_scalar_to_complex(s, re, im);
    if (compute != KV_F64 && compute != KV_C128) {
        *re = (double)(float)*re;
        *im = (double)(float)*im;
    }
}

void kv_exact_stats_print(FILE *f, const kv_exact_stats *s) {
    for (int d = 0; d < KV_DTYPE_COUNT; d++) {
        if (s->elements[d] == 0) continue;
        fprintf(f, "  %-5s %10lld floating elements computed exactly, %8lld differ from the reference kernel\n",
                kv_dtype_name((kv_dtype)d), (long long)s->elements[d], (long long)s->changed[d]);
    }
}
