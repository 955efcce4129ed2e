/* Element-wise comparison with bitwise, ULP, abs, rel and bound rules
 * (runner/compare.h). */
#include "runner/check/compare.h"

#include <inttypes.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ref/ref.h"

const char *kv_cmp_kind_name(kv_cmp_kind k) {
    switch (k) {
    case KV_CMP_BITWISE: return "bitwise";
    case KV_CMP_ULP: return "ulp";
    case KV_CMP_ABS: return "abs";
    case KV_CMP_REL: return "rel";
    case KV_CMP_BOUND: return "bound";
    case KV_CMP_META: return "meta";
    }
    return "?";
}

int kv_cmp_rule_format(const kv_cmp_rule *r, char *buf, int cap) {
    switch (r->kind) {
    case KV_CMP_ULP: return snprintf(buf, (size_t)cap, "ulp:%g", r->value);
    case KV_CMP_ABS: return snprintf(buf, (size_t)cap, "abs:%g", r->value);
    case KV_CMP_REL: return snprintf(buf, (size_t)cap, "rel:%g", r->value);
    case KV_CMP_BITWISE:
        return snprintf(buf, (size_t)cap, "%s", r->signed_zero_equal ? "bitwise (+0 == -0)" : "bitwise");
    case KV_CMP_BOUND:
    case KV_CMP_META: break;
    }
    return snprintf(buf, (size_t)cap, "%s", kv_cmp_kind_name(r->kind));
}

/* ---- float bit patterns ---- */

static int cmp_width(kv_dtype dt) {
    switch (dt) {
    case KV_F16:
    case KV_BF16: return 16;
    case KV_F32: return 32;
    default: return 64;
    }
}

static bool cmp_bits_nan(kv_dtype dt, uint64_t b) {
    switch (dt) {
    case KV_F16: return (b & 0x7C00u) == 0x7C00u && (b & 0x03FFu) != 0;
    case KV_BF16: return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0;
    case KV_F32: return (b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0;
    default: return (b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (b & 0x000FFFFFFFFFFFFFull) != 0;
    }
}

double kv_ulp_distance_bits(kv_dtype dt, uint64_t a, uint64_t b) {
    const int w = cmp_width(dt);
    const uint64_t mask = w == 64 ? ~0ull : ((1ull << w) - 1u);
    a &= mask;
    b &= mask;
    if (cmp_bits_nan(dt, a) || cmp_bits_nan(dt, b)) return -1.0;
    const uint64_t sign = 1ull << (w - 1);
    const uint64_t ma = a & ~sign, mb = b & ~sign;
    const bool na = (a & sign) != 0, nb = (b & sign) != 0;
    /* On the line ord(x) = +-magnitude the distance is the difference of
     * magnitudes on one side of zero and their sum across it. */
    if (na == nb) return (double)(ma > mb ? ma - mb : mb - ma);
    return (double)ma + (double)mb;
}

/* ---- reading one element ---- */

typedef struct cmp_elem {
    uint64_t bits[2];   /* raw pattern per component (floats) */
    double v[2];        /* value per component (floats; ints: v[0]) */
    int64_t i;          /* integers and bool */
} cmp_elem;

static void cmp_read_real(kv_dtype rd, const char *p, uint64_t *bits, double *v) {
    switch (rd) {
    case KV_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        *bits = h;
        *v = kv_f16_to_f32(h);
        return;
    }
    case KV_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        *bits = h;
        *v = kv_bf16_to_f32(h);
        return;
    }
    case KV_F32: {
        uint32_t u;
        float f;
        memcpy(&u, p, 4);
        memcpy(&f, p, 4);
        *bits = u;
        *v = f;
        return;
    }
    default: {
        uint64_t u;
        double d;
        memcpy(&u, p, 8);
        memcpy(&d, p, 8);
        *bits = u;
        *v = d;
        return;
    }
    }
}

static void cmp_read(kv_dtype dt, const char *p, cmp_elem *e) {
    memset(e, 0, sizeof *e);
    if (dt == KV_BOOL) {
        e->i = *(const uint8_t *)p;
        e->v[0] = (double)e->i;
        return;
    }
    if (kv_dtype_is_integral(dt, false)) {
        e->i = kv_ref_load_i64(dt, p);
        e->v[0] = (double)e->i;
        return;
    }
    const kv_dtype rd = kv_dtype_to_real(dt);
    cmp_read_real(rd, p, &e->bits[0], &e->v[0]);
    if (kv_dtype_is_complex(dt)) cmp_read_real(rd, p + kv_dtype_size(rd), &e->bits[1], &e->v[1]);
}

/* ---- one component ---- */

typedef struct cmp_out {
    bool match;
    double abs_err;   /* NaN when meaningless */
    double ulps;      /* -1 when meaningless */
} cmp_out;

static cmp_out cmp_float(kv_dtype rd, uint64_t eb, double e, uint64_t gb, double g, const kv_cmp_rule *r,
                         double scale, double bound) {
    cmp_out o = { false, NAN, -1.0 };
    const bool en = isnan(e), gn = isnan(g);
    if (en || gn) {
        o.match = en && gn && (!r->nan_payload_matters || eb == gb);
        if (o.match) o.abs_err = 0.0;
        return o;
    }
    o.abs_err = fabs(e - g);
    if (isinf(e) || isinf(g)) {
        o.match = e == g;
        if (o.match) {
            o.abs_err = 0.0;
            o.ulps = 0.0;
        }
        return o;
    }
    o.ulps = kv_ulp_distance_bits(rd, eb, gb);
    /* Equal values pass every numeric rule, even where its scale or bound
     * is NaN (a component next to a NaN, a sum over infinities). */
    if (r->kind != KV_CMP_BITWISE && e == g) {
        o.match = true;
        return o;
    }
    switch (r->kind) {
    case KV_CMP_BITWISE: o.match = eb == gb || (r->signed_zero_equal && e == 0.0 && g == 0.0); break;
    case KV_CMP_ULP: o.match = o.ulps <= r->value; break;
    case KV_CMP_ABS: o.match = o.abs_err <= r->value; break;
    case KV_CMP_REL: o.match = o.abs_err <= r->value * scale; break;
    case KV_CMP_BOUND: o.match = o.abs_err <= bound; break;
    case KV_CMP_META: o.match = true; break;
    }
    return o;
}

static cmp_out cmp_int(int64_t e, int64_t g, const kv_cmp_rule *r, double bound) {
    const __int128 d = (__int128)e - (__int128)g;
    const double diff = (double)(d < 0 ? -d : d);
    cmp_out o = { false, diff, diff };
    switch (r->kind) {
    case KV_CMP_BITWISE: o.match = e == g; break;
    case KV_CMP_ULP:
    case KV_CMP_ABS: o.match = diff <= r->value; break;
    case KV_CMP_REL: o.match = diff <= r->value * fabs((double)e); break;
    case KV_CMP_BOUND: o.match = diff <= bound; break;
    case KV_CMP_META: o.match = true; break;
    }
    return o;
}

/* ---- the walk ---- */

static bool cmp_next(int64_t *idx, const int64_t *sizes, int nd) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

static const char *cmp_elem_ptr(const kv_tensor *t, const char *base, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
    return base + off * (int64_t)kv_dtype_size(t->dtype);
}

/* The heat grid of an output of `nd` dims (result.h): leading dims folded
 * into rows, a cell per element up to KV_HEAT_GRID each way. */
static void cmp_heat_init(kv_heat *h, const int64_t *sizes, int nd) {
    h->cols = nd > 0 ? sizes[nd - 1] : 1;
    h->rows = 1;
    for (int d = 0; d + 1 < nd; d++) h->rows *= sizes[d];
    h->grows = h->rows < KV_HEAT_GRID ? (int)h->rows : KV_HEAT_GRID;
    h->gcols = h->cols < KV_HEAT_GRID ? (int)h->cols : KV_HEAT_GRID;
}

/* Counts the wrong element at row-major position k. The products stay in
 * int64: k < rows * cols, and the grid is at most 32 wide. */
static void cmp_heat_add(kv_heat *h, int64_t k) {
    const int64_t r = k / h->cols, c = k % h->cols;
    const int cell = (int)(r * h->grows / h->rows) * h->gcols + (int)(c * h->gcols / h->cols);
    if (h->cells[cell] < UINT16_MAX) h->cells[cell]++;
}

static kv_status cmp_run(const kv_tensor *expected, const kv_tensor *got, const kv_cmp_rule *rule,
                         const double *bound, kv_cmp_report *rep, uint8_t *mask) {
    if (rep == NULL || rule == NULL || expected == NULL || got == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "compare: NULL argument");
    memset(rep, 0, sizeof *rep);
    if (expected->dtype != got->dtype)
        return kv_error(KV_ERR_DTYPE, "compare: dtype differs: expected %s, got %s", kv_dtype_name(expected->dtype),
                        kv_dtype_name(got->dtype));
    if (!kv_same_shape(expected, got)) {
        char a[KV_REF_SHAPE_BUF], b[KV_REF_SHAPE_BUF];
        return kv_error(KV_ERR_SHAPE, "compare: shape differs: expected %s, got %s",
                        kv_ref_format_shape(expected->sizes, expected->ndim, a, sizeof a),
                        kv_ref_format_shape(got->sizes, got->ndim, b, sizeof b));
    }
    if (rule->kind == KV_CMP_BOUND && bound == NULL && kv_tensor_numel(expected) > 0)
        return kv_error(KV_ERR_INVALID_ARG, "compare: a bound rule needs per-element bounds");
    const int64_t numel = kv_tensor_numel(expected);
    if (rule->kind == KV_CMP_META || numel == 0) {
        rep->compared = rule->kind == KV_CMP_META ? 0 : numel;
        return KV_OK;
    }
    const char *eb = kv_tensor_data(expected), *gb = kv_tensor_data(got);
    if (eb == NULL || gb == NULL)
        return kv_error(KV_ERR_DEVICE, "compare: a tensor's memory is not host-addressable");
    cmp_heat_init(&rep->heat, expected->sizes, expected->ndim);
    const kv_dtype dt = expected->dtype;
    const kv_dtype rd = kv_dtype_to_real(dt);
    const bool is_int = kv_dtype_is_integral(dt, true);
    const bool cplx = kv_dtype_is_complex(dt);
    const int nd = expected->ndim;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    int64_t k = 0;
    do {
        cmp_elem e, g;
        cmp_read(dt, cmp_elem_ptr(expected, eb, idx), &e);
        cmp_read(dt, cmp_elem_ptr(got, gb, idx), &g);
        const double bnd = bound ? bound[k] : 0.0;
        bool match = true;
        double abs_err = 0.0, ulps = 0.0;
        bool sign_flip = false;
        if (is_int) {
            /* Integers and bools are exact in every implementation. */
            kv_cmp_rule exact = *rule;
            if (dt == KV_BOOL) exact.kind = KV_CMP_BITWISE;
            const cmp_out o = cmp_int(e.i, g.i, &exact, bnd);
            match = o.match;
            abs_err = o.abs_err;
            ulps = dt == KV_BOOL ? -1.0 : o.ulps;
        } else {
            const double scale = cplx ? hypot(e.v[0], e.v[1]) : fabs(e.v[0]);
            sign_flip = !cplx && isfinite(e.v[0]) && isfinite(g.v[0]) && e.v[0] != 0.0 && g.v[0] != 0.0 &&
                        !signbit(e.v[0]) != !signbit(g.v[0]);
            for (int c = 0; c < (cplx ? 2 : 1); c++) {
                const cmp_out o = cmp_float(rd, e.bits[c], e.v[c], g.bits[c], g.v[c], rule, scale, bnd);
                match = match && o.match;
                if (isnan(o.abs_err) || isnan(abs_err)) abs_err = NAN;
                else if (o.abs_err > abs_err) abs_err = o.abs_err;
                if (o.ulps < 0 || ulps < 0) ulps = -1.0;
                else if (o.ulps > ulps) ulps = o.ulps;
            }
        }
        rep->compared++;
        if (mask != NULL) mask[k] = !match;
        if (isfinite(abs_err) && abs_err > rep->max_abs_err) rep->max_abs_err = abs_err;
        if (!is_int && !sign_flip && ulps > rep->max_ulps) rep->max_ulps = ulps;
        if (!match) {
            rep->mismatched++;
            rep->sign_mismatched += sign_flip;
            cmp_heat_add(&rep->heat, k);
            if (!isfinite(abs_err)) rep->nonfinite_mismatched++;
            if (rep->nmismatches < KV_RESULT_MAX_MISMATCHES) {
                kv_mismatch *m = &rep->mismatches[rep->nmismatches++];
                m->ndim = nd;
                memcpy(m->index, idx, sizeof(int64_t) * (size_t)nd);
                m->expected = e.v[0];
                m->got = g.v[0];
                m->abs_err = abs_err;
                const double mag = cplx ? hypot(e.v[0], e.v[1]) : fabs(e.v[0]);
                if (isnan(abs_err))
                    m->rel_err = NAN;
                else if (mag == 0.0)
                    m->rel_err = abs_err == 0.0 ? 0.0 : INFINITY;
                else
                    m->rel_err = abs_err / mag;
                m->ulps = ulps;
            }
        }
        k++;
    } while (cmp_next(idx, expected->sizes, nd));
    return KV_OK;
}

kv_status kv_compare(const kv_tensor *expected, const kv_tensor *got, const kv_cmp_rule *rule,
                     const double *bound, kv_cmp_report *rep) {
    return cmp_run(expected, got, rule, bound, rep, NULL);
}

kv_status kv_compare_mask(const kv_tensor *expected, const kv_tensor *got, const kv_cmp_rule *rule,
                          const double *bound, kv_cmp_report *rep, uint8_t *mask) {
    return cmp_run(expected, got, rule, bound, rep, mask);
}

/* ---- reporting ---- */

static void cmp_put(char *buf, int cap, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void cmp_put(char *buf, int cap, int *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int room = *n < cap ? cap - *n : 0;
    const int w = vsnprintf(room > 0 ? buf + *n : NULL, (size_t)room, fmt, ap);
    va_end(ap);
    if (w > 0) *n += w;
}

static int cmp_summary(const kv_cmp_report *rep, const char *what, char *buf, int cap) {
    int n = 0;
    if (cap > 0) buf[0] = '\0';
    cmp_put(buf, cap, &n, "%s%s%" PRId64 " of %" PRId64 " elements differ (max abs err %.6g, max ulp %.6g",
            what ? what : "", what ? ": " : "", rep->mismatched, rep->compared, rep->max_abs_err, rep->max_ulps);
    /* The maxima are over finite pairs only: an Inf against a NaN would
     * otherwise read "max abs err 0" beside a count of mismatches. */
    if (rep->sign_mismatched > 0)
        cmp_put(buf, cap, &n, " where the signs agree; %" PRId64 " with the sign wrong", rep->sign_mismatched);
    if (rep->nonfinite_mismatched > 0)
        cmp_put(buf, cap, &n, "%s; %" PRId64 " with Inf or NaN", rep->sign_mismatched > 0 ? "" : " over finite pairs",
                rep->nonfinite_mismatched);
    cmp_put(buf, cap, &n, ")");
    return n;
}

int kv_cmp_report_summary(const kv_cmp_report *rep, const char *what, char *buf, int cap) {
    return cmp_summary(rep, what, buf, cap);
}

int kv_cmp_report_format(const kv_cmp_report *rep, const char *what, char *buf, int cap) {
    int n = cmp_summary(rep, what, buf, cap);
    for (int i = 0; i < rep->nmismatches; i++) {
        const kv_mismatch *m = &rep->mismatches[i];
        cmp_put(buf, cap, &n, "%s[", i == 0 ? "; first: " : "; ");
        for (int d = 0; d < m->ndim; d++) cmp_put(buf, cap, &n, "%s%" PRId64, d ? ", " : "", m->index[d]);
        cmp_put(buf, cap, &n, "] expected %.9g got %.9g (abs %.3g, rel %.3g, ulp %.6g)", m->expected, m->got, m->abs_err,
                m->rel_err, m->ulps);
    }
    return n;
}

void kv_cmp_report_to_result(const kv_cmp_report *rep, kv_check_result *r) {
    r->compared = rep->compared;
    r->mismatched = rep->mismatched;
    r->max_abs_err = rep->max_abs_err;
    r->max_ulps = rep->max_ulps;
    r->nmismatches = rep->nmismatches;
    memcpy(r->mismatches, rep->mismatches, sizeof r->mismatches);
    r->heat = rep->heat;
}
