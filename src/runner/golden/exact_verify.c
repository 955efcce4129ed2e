/* The recomputation check behind `ninja test`'s golden-truth step
 * (tests/golden_truth.sh): with KV_EXACT_VERIFY=BITS set, every golden
 * element the Ziv loop accepts is evaluated once more at BITS (default
 * 4096, far above the 128/256 bits the generator usually stops at) and its
 * distance to that truth is measured in ulps of the output format —
 * computed here from the format's parameters, not by kv_exact_round — and
 * tallied per dtype. An element farther than 0.5 ulp (or a tie not
 * rounded to even) is a violation. */
#include "runner/golden/exact.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct verify_tally {
    int64_t checked[KV_DTYPE_COUNT];
    int64_t violations[KV_DTYPE_COUNT];
    double max_ulp[KV_DTYPE_COUNT];
} verify_tally;

static verify_tally tally;

/* KV_EXACT_VERIFY_LOG: 1 prints each violation, 0 (or unset) does not. */
static bool verify_log_on(void) {
    const char *v = getenv("KV_EXACT_VERIFY_LOG");
    return v != NULL && strcmp(v, "1") == 0;
}

kv_status kv_exact_verify_env_check(void) {
    const char *log = getenv("KV_EXACT_VERIFY_LOG");
    if (log != NULL && strcmp(log, "0") != 0 && strcmp(log, "1") != 0)
        return kv_error(KV_ERR_INVALID_ARG, "KV_EXACT_VERIFY_LOG: expected 0 or 1, got '%s'", log);
    const char *v = getenv("KV_EXACT_VERIFY");
    if (v == NULL) return KV_OK;
    char *end = NULL;
    const long b = strtol(v, &end, 10);
    /* 0 is off; otherwise the precision, which must beat the generator's. */
    if (v[0] == '\0' || end == v || *end != '\0' || (b != 0 && (b < 512 || b > 1000000)))
        return kv_error(KV_ERR_INVALID_ARG, "KV_EXACT_VERIFY: expected 0 (off) or bits from 512 to 1000000, got '%s'",
                        v);
    return KV_OK;
}

mpfr_prec_t kv_exact_verify_bits(void) {
    const char *v = getenv("KV_EXACT_VERIFY");
    if (v == NULL || v[0] == '\0' || (v[0] == '0' && v[1] == '\0')) return 0;
    const long b = strtol(v, NULL, 10);
    return b >= 512 ? (mpfr_prec_t)b : 4096;
}

/* Precision and smallest normal exponent (as frexp reports it) of a real
 * floating dtype, and its largest finite value. */
static void format_of(kv_dtype dt, int *p, int *emin, double *max) {
    switch (dt) {
    case KV_F16: *p = 11; *emin = -13; *max = 65504.0; return;
    case KV_BF16: *p = 8; *emin = -125; *max = 0x1.FEp127; return;
    case KV_F32: *p = 24; *emin = -125; *max = (double)FLT_MAX; return;
    default: *p = 53; *emin = -1021; *max = DBL_MAX; return;
    }
}

void kv_exact_verify_element(mpfr_srcptr truth, double g, kv_dtype dt) {
    if (dt < 0 || dt >= KV_DTYPE_COUNT) return;
    int p, emin;
    double max;
    format_of(kv_exact_real_of(dt), &p, &emin, &max);
    bool bad = false;
    double ulps = 0.0;
    if (mpfr_nan_p(truth)) {
        bad = !isnan(g);
    } else if (isnan(g)) {
        bad = true;
    } else if (isinf(g)) {
        /* Overflow: |truth| at or above max + ulp(max)/2. */
        mpfr_t lim;
        mpfr_init2(lim, 128);
        mpfr_set_d(lim, max, MPFR_RNDN);
        int e;
        frexp(max, &e);
        mpfr_t half;
        mpfr_init2(half, 64);
        mpfr_set_ui_2exp(half, 1, e - p - 1, MPFR_RNDN);
        mpfr_add(lim, lim, half, MPFR_RNDN);
        bad = mpfr_cmpabs(truth, lim) < 0 || (mpfr_sgn(truth) > 0) != (g > 0);
        mpfr_clears(lim, half, (mpfr_ptr)0);
    } else {
        int e = 0;
        const double m = g != 0.0 ? frexp(g, &e) : 0.0;
        if (g == 0.0 || e < emin) e = emin;
        /* ulp of g's binade [2^(e-1), 2^e): 2^(e - p). Below a power of
         * two (above the subnormals) the spacing halves, so a truth under
         * |g| may only be a quarter of that ulp away. */
        mpfr_t d;
        mpfr_init2(d, mpfr_get_prec(truth) + 64);
        mpfr_sub_d(d, truth, g, MPFR_RNDN);
        mpfr_mul_2si(d, d, p - e, MPFR_RNDN);
        ulps = fabs(mpfr_get_d(d, MPFR_RNDN));
        const bool below_pow2 = fabs(m) == 0.5 && e > emin && mpfr_cmp_d(truth, g) * (g > 0 ? 1 : -1) < 0;
        const double limit = below_pow2 ? 0.25 : 0.5;
        /* Compared in MPFR: a distance of 0.5 - 2^-80 ulp prints as 0.5. */
        mpfr_abs(d, d, MPFR_RNDN);
        const int c = mpfr_cmp_d(d, limit);
        if (c > 0) bad = true;
        else if (c == 0) bad = fmod(ldexp(fabs(g), p - e), 2.0) != 0.0; /* a tie goes to even */
        mpfr_clear(d);
    }
    tally.checked[dt]++;
    if (bad) tally.violations[dt]++;
    if (bad && verify_log_on())
        mpfr_fprintf(stderr, "golden truth: %s element %.17g is %.3g ulp from %.40Rg\n", kv_dtype_name(dt), g, ulps,
                     truth);
    if (ulps > tally.max_ulp[dt]) tally.max_ulp[dt] = ulps;
}

int64_t kv_exact_verify_print(FILE *f) {
    int64_t total = 0;
    fprintf(f, "golden truth: every golden element recomputed at %ld bits; elements farther than 0.5 ulp:\n",
            (long)kv_exact_verify_bits());
    for (int d = 0; d < KV_DTYPE_COUNT; d++) {
        if (tally.checked[d] == 0) continue;
        fprintf(f, "  %-5s %10lld checked, %6lld farther than 0.5 ulp (max %.3g ulp)\n", kv_dtype_name((kv_dtype)d),
                (long long)tally.checked[d], (long long)tally.violations[d], tally.max_ulp[d]);
        total += tally.violations[d];
    }
    return total;
}
