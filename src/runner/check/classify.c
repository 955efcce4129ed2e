/* The failure classifier (runner/check/classify.h). Each pattern is a
 * predicate every mismatched element must satisfy; the first that holds
 * names the diagnosis. Order matters only where two could both hold:
 * non-finite and zero patterns first (they are exact), then position
 * patterns (tail, layouts), then the one-ulp rounding patterns, which
 * say how the kernel rounds. */
#include "runner/check/classify.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kv/dtype.h"

/* ---- one float pattern ---- */

typedef struct cls_fmt {
    int width, man;   /* total and mantissa bits */
} cls_fmt;

static bool cls_float_fmt(kv_dtype dt, cls_fmt *f) {
    switch (dt) {
    case KV_F16: *f = (cls_fmt){ 16, 10 }; return true;
    case KV_BF16: *f = (cls_fmt){ 16, 7 }; return true;
    case KV_F32: *f = (cls_fmt){ 32, 23 }; return true;
    case KV_F64: *f = (cls_fmt){ 64, 52 }; return true;
    default: return false;
    }
}

static uint64_t cls_sign(cls_fmt f, uint64_t b) {
    return (b >> (f.width - 1)) & 1u;
}
static uint64_t cls_mag(cls_fmt f, uint64_t b) {
    const uint64_t mask = f.width == 64 ? ~0ull >> 1 : (1ull << (f.width - 1)) - 1u;
    return b & mask;
}
static uint64_t cls_exp_field(cls_fmt f, uint64_t b) {
    return cls_mag(f, b) >> f.man;
}
static uint64_t cls_exp_max(cls_fmt f) {
    return (1ull << (f.width - 1 - f.man)) - 1u;
}
static bool cls_nan(cls_fmt f, uint64_t b) {
    return cls_exp_field(f, b) == cls_exp_max(f) && (cls_mag(f, b) & ((1ull << f.man) - 1u)) != 0;
}
static bool cls_finite(cls_fmt f, uint64_t b) {
    return cls_exp_field(f, b) != cls_exp_max(f);
}
static bool cls_zero(cls_fmt f, uint64_t b) {
    return cls_mag(f, b) == 0;
}
static bool cls_subnormal(cls_fmt f, uint64_t b) {
    return cls_exp_field(f, b) == 0 && cls_mag(f, b) != 0;
}

/* ---- the walk over mismatches ---- */

typedef bool (*cls_pred)(const kv_classify_in *in, cls_fmt f, int64_t k, void *user);

/* Whether every mismatched element satisfies p. */
static bool cls_all(const kv_classify_in *in, cls_fmt f, cls_pred p, void *user) {
    for (int64_t k = 0; k < in->numel; k++)
        if (in->mismatched[k] && !p(in, f, k, user)) return false;
    return true;
}

static bool p_nan_lost(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    return cls_nan(f, in->expected[k]) && !cls_nan(f, in->got[k]);
}
static bool p_overflow(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    return cls_finite(f, in->expected[k]) && !cls_finite(f, in->got[k]);
}
static bool p_zero_sign(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    return cls_zero(f, in->expected[k]) && cls_zero(f, in->got[k]) &&
           cls_sign(f, in->expected[k]) != cls_sign(f, in->got[k]);
}
/* The truth with its sign bit flipped (zeros excepted: p_zero_sign names
 * those), for real floats; -truth for integers. */
static bool p_negated(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    const uint64_t e = in->expected[k], g = in->got[k];
    if (f.man == 0) return (int64_t)e != 0 && (int64_t)e != INT64_MIN && (int64_t)g == -(int64_t)e;
    return !cls_nan(f, e) && !cls_zero(f, e) && g == (e ^ 1ull << (f.width - 1));
}
static bool p_flush(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    return cls_subnormal(f, in->expected[k]) && cls_zero(f, in->got[k]);
}
static bool p_daz(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)f;
    (void)u;
    return in->input_subnormal[k] != 0;
}

/* One ulp apart on the same side of zero, both finite: *dir gets -1 when
 * got is nearer zero, +1 when farther. */
static bool cls_one_ulp(const kv_classify_in *in, cls_fmt f, int64_t k, int *dir) {
    const uint64_t e = in->expected[k], g = in->got[k];
    if (!cls_finite(f, e) || !cls_finite(f, g) || cls_nan(f, e) || cls_nan(f, g)) return false;
    if (cls_sign(f, e) != cls_sign(f, g) && !(cls_zero(f, e) || cls_zero(f, g))) return false;
    const uint64_t me = cls_mag(f, e), mg = cls_mag(f, g);
    if (me == mg + 1) *dir = -1;
    else if (mg == me + 1) *dir = 1;
    else return false;
    return true;
}
static bool p_toward_zero(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    int dir;
    return cls_one_ulp(in, f, k, &dir) && dir < 0;
}
/* A tie between an even and an odd neighbour: round-to-nearest-even takes
 * the even one; half-away-from-zero the odd one when it lies farther out. */
static bool p_half_away(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    int dir;
    return cls_one_ulp(in, f, k, &dir) && dir > 0 && (cls_mag(f, in->expected[k]) & 1u) == 0;
}
/* Rounding twice lands on an even value one ulp from the correctly
 * rounded odd one: the first rounding made a tie the second broke to even. */
static bool p_double_round(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)u;
    int dir;
    return cls_one_ulp(in, f, k, &dir) && (cls_mag(f, in->expected[k]) & 1u) == 1 &&
           (cls_mag(f, in->got[k]) & 1u) == 0;
}

static bool p_alt(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)f;
    (void)u;
    return in->got[k] == in->alt[k];
}

static bool p_within_working(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)f;
    (void)u;
    return in->within_working[k] != 0;
}

static bool p_within_one_pass(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)f;
    (void)u;
    return in->within_one_pass[k] != 0;
}

static bool p_int_wrap32(const kv_classify_in *in, cls_fmt f, int64_t k, void *u) {
    (void)f;
    (void)u;
    const int64_t e = (int64_t)in->expected[k], g = (int64_t)in->got[k];
    return (e < INT32_MIN || e > INT32_MAX) && g == (int64_t)(int32_t)(uint32_t)(uint64_t)e;
}

/* ---- position patterns ---- */

static int64_t cls_count(const kv_classify_in *in) {
    int64_t m = 0;
    for (int64_t k = 0; k < in->numel; k++) m += in->mismatched[k] != 0;
    return m;
}

/* The last r elements are whole rows of the output (r a multiple of a
 * last dim of at least 2): a kernel wrong in its last row (a norm or
 * reduction over that row) is wrong there too, so the tail cannot be told
 * from it. */
static bool cls_whole_rows(const kv_classify_in *in, int64_t r) {
    return in->ndim >= 2 && in->sizes[in->ndim - 1] >= 2 && r % in->sizes[in->ndim - 1] == 0;
}

/* The smallest vector width W in {4, 8, 16} with every mismatch inside the
 * last numel % W elements, at least half of them wrong, and at least two
 * full vectors before them: a loop whose remainder after the vector part
 * is wrong. The last two conditions keep one stray error near the end of
 * a small tensor from reading as a tail bug. 0 when none. */
static int cls_tail_width(const kv_classify_in *in, int64_t m, int64_t *tail) {
    static const int widths[] = { 4, 8, 16 };
    int64_t first = -1;
    for (int64_t k = 0; k < in->numel && first < 0; k++)
        if (in->mismatched[k]) first = k;
    for (int i = 0; i < 3; i++) {
        const int64_t r = in->numel % widths[i];
        if (r > 0 && in->numel - r >= 2 * widths[i] && first >= in->numel - r && 2 * m >= r && !cls_whole_rows(in, r)) {
            *tail = r;
            return widths[i];
        }
    }
    return 0;
}

/* The first input in layout l whose shape is the output's: only there
 * does output element k read the input's element k, which the position
 * patterns below rely on. */
static int cls_find_layout(const kv_classify_in *in, kv_layout l) {
    for (int i = 0; i < in->ninputs; i++)
        if (in->layouts[i] == l && !in->input_other_shape[i]) return i;
    return -1;
}

/* A stride-0 input (layout b: dim 0 expanded from one row) read as if
 * contiguous is right in row 0, where both readings agree, and wrong past
 * it. */
static bool cls_stride0(const kv_classify_in *in) {
    if (in->ndim < 1 || in->sizes[0] < 2 || cls_find_layout(in, KV_LAYOUT_BROADCAST) < 0) return false;
    const int64_t row = in->numel / in->sizes[0];
    if (row == 0) return false;
    for (int64_t k = 0; k < row; k++)
        if (in->mismatched[k]) return false;
    return true;
}

/* A transposed input (layout t: the last two dims swapped in memory) read
 * as if contiguous is right exactly where row-major and column-major
 * positions coincide ((0, 0) and the last element of each matrix); wrong
 * at least half elsewhere, so a scattered bug does not look like it. */
static bool cls_transposed(const kv_classify_in *in) {
    if (in->ndim < 2 || cls_find_layout(in, KV_LAYOUT_TRANSPOSED) < 0) return false;
    const int64_t R = in->sizes[in->ndim - 2], C = in->sizes[in->ndim - 1];
    if (R < 2 || C < 2) return false;
    int64_t others = 0, wrong = 0;
    for (int64_t k = 0; k < in->numel; k++) {
        const int64_t p = k % (R * C), i = p / C, j = p % C;
        const bool agree = p % R == i && p / R == j;
        if (agree && in->mismatched[k]) return false;
        if (!agree) {
            others++;
            wrong += in->mismatched[k] != 0;
        }
    }
    return others > 0 && 2 * wrong >= others;
}

/* An input with a storage offset (layout o) read from its storage's
 * start: where every input of the case has the same offset s, element k
 * is the truth's element k - s. The smallest s up to 64 for which that
 * holds at every k >= s, and which explains at least half of those
 * elements' mismatches (so a near-constant output does not fit by
 * accident); 0 when none. */
static int64_t cls_shift(const kv_classify_in *in) {
    if (cls_find_layout(in, KV_LAYOUT_OFFSET) < 0) return 0;
    for (int64_t s = 1; s <= 64 && s < in->numel; s++) {
        int64_t wrong = 0;
        bool fits = true;
        for (int64_t k = s; k < in->numel && fits; k++) {
            fits = in->got[k] == in->expected[k - s];
            wrong += in->mismatched[k] != 0;
        }
        if (fits && 2 * wrong >= in->numel - s) return s;
    }
    return 0;
}

/* A blocked or threaded loop wrong at its block boundaries: the
 * mismatches lie at positions r + j*g only, for a stride g of at least
 * CLS_PERIOD_MIN, with at least three of them and at least half of those
 * positions wrong. g is the gcd of the distances between mismatches, so a
 * few scattered errors give a small g (three random positions share a
 * gcd >= 64 with probability about 1/64^2) and fit no period. 0 when none;
 * *first gets r, *sites the number of positions r + j*g in the output. */
#define CLS_PERIOD_MIN 64 /* past every vector width the tail pattern knows (16) */
static int64_t cls_gcd(int64_t a, int64_t b) {
    while (b != 0) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
static int64_t cls_period(const kv_classify_in *in, int64_t m, int64_t *first, int64_t *sites) {
    if (m < 3) return 0;
    int64_t k0 = -1, g = 0;
    for (int64_t k = 0; k < in->numel; k++) {
        if (!in->mismatched[k]) continue;
        if (k0 < 0) k0 = k;
        else g = cls_gcd(g, k - k0);
    }
    if (g < CLS_PERIOD_MIN) return 0;
    *first = k0 % g;
    *sites = (in->numel - 1 - *first) / g + 1;
    return 2 * m >= *sites ? g : 0;
}

/* Out is input N itself (--out=@N) and the first element written is right
 * but at least half of those after it are wrong: a kernel that reads an
 * input element after writing the output element stored over it. The
 * first element cannot show it (nothing was overwritten yet); a kernel
 * wrong for any other reason is wrong there too as often as elsewhere,
 * so half of the rest keeps one stray error from reading as aliasing. */
static bool cls_out_alias(const kv_classify_in *in, int64_t m) {
    return in->out_alias > 0 && in->out_alias <= in->ninputs && in->numel >= 2 && !in->mismatched[0] &&
           2 * m >= in->numel - 1;
}

/* ---- the diagnosis ---- */

/* Last of all, for every dtype: a position pattern without a layout to
 * point at, which the value patterns above name more exactly when they
 * fit (a rounding bug only at block boundaries reads as the rounding). */
static int cls_periodic(const kv_classify_in *in, int64_t m, char *buf, int cap) {
    int64_t first = 0, sites = 0;
    const int64_t period = cls_period(in, m, &first, &sites);
    if (period > 0)
        return snprintf(buf, (size_t)cap,
                        "wrong only every %" PRId64 " elements (%" PRId64 " of the %" PRId64 " elements at %" PRId64
                        " + j*%" PRId64 " wrong, every other element right: a block or thread-chunk boundary)",
                        period, m, sites, first, period);
    return 0;
}

int kv_classify(const kv_classify_in *in, char *buf, int cap) {
    if (cap > 0) buf[0] = '\0';
    const int64_t m = cls_count(in);
    if (m == 0) return 0;
    const int64_t n = in->numel;
    cls_fmt f = { 64, 0 };
    const bool fl = cls_float_fmt(in->dtype, &f);
    if (fl && in->empty_input && cls_all(in, f, p_nan_lost, NULL))
        return snprintf(buf, (size_t)cap,
                        "a number where the op over no elements is NaN (%" PRId64 " of %" PRId64
                        ": an input is empty, and the truth there is NaN, as a mean's 0/0)",
                        m, n);
    if (fl && cls_all(in, f, p_nan_lost, NULL))
        return snprintf(buf, (size_t)cap, "NaN not propagated (%" PRId64 " of %" PRId64 ": a number where the truth is NaN)",
                        m, n);
    if (fl && cls_all(in, f, p_overflow, NULL))
        return snprintf(buf, (size_t)cap,
                        "overflows in an intermediate (%" PRId64 " of %" PRId64 ": Inf or NaN where the truth is finite)",
                        m, n);
    if (fl && cls_all(in, f, p_zero_sign, NULL))
        return snprintf(buf, (size_t)cap, "sign of zero wrong (%" PRId64 " of %" PRId64 ": -0 for +0 or +0 for -0)", m, n);
    if (cls_all(in, f, p_negated, NULL))
        return snprintf(buf, (size_t)cap, "sign wrong (%" PRId64 " of %" PRId64 ": each the truth negated)", m, n);
    /* A flushed output and a zeroed input look alike where a subnormal
     * input makes a subnormal result: name the one the evidence singles
     * out, both when nothing does. */
    const bool flush = fl && cls_all(in, f, p_flush, NULL);
    const bool daz = fl && in->input_subnormal != NULL && cls_all(in, f, p_daz, NULL);
    if (flush && daz)
        return snprintf(buf, (size_t)cap,
                        "flushes subnormals or treats subnormal inputs as zero (%" PRId64 " of %" PRId64
                        ": zero where the truth is subnormal, each fed by a subnormal input)",
                        m, n);
    if (flush)
        return snprintf(buf, (size_t)cap,
                        "flushes subnormals (%" PRId64 " of %" PRId64 ": zero where the truth is subnormal)", m, n);
    if (daz)
        return snprintf(buf, (size_t)cap,
                        "treats subnormal inputs as zero (%" PRId64 " of %" PRId64 ", each fed by a subnormal input)", m,
                        n);
    if (cls_out_alias(in, m))
        return snprintf(buf, (size_t)cap,
                        "wrong only where out aliases input %d (out=@%d: the first element right, %" PRId64 " of the %" PRId64
                        " after it wrong: the kernel reads input elements it has already overwritten)",
                        in->out_alias - 1, in->out_alias - 1, m, n - 1);
    int64_t tail = 0;
    const int w = cls_tail_width(in, m, &tail);
    if (w > 0)
        return snprintf(buf, (size_t)cap,
                        "wrong only in the last numel %% %d elements (numel %" PRId64 ", %" PRId64
                        " of the last %" PRId64 " wrong, every element before them right)",
                        w, n, m, tail);
    if (cls_stride0(in))
        return snprintf(buf, (size_t)cap,
                        "wrong only for stride-0 inputs (input %d is broadcast along dim 0; row 0 is right, %" PRId64
                        " of %" PRId64 " wrong past it: strides ignored)",
                        cls_find_layout(in, KV_LAYOUT_BROADCAST), m, n);
    if (cls_transposed(in))
        return snprintf(buf, (size_t)cap,
                        "wrong only for transposed inputs (input %d; right only where row- and column-major positions "
                        "coincide, %" PRId64 " of %" PRId64 " wrong: strides ignored)",
                        cls_find_layout(in, KV_LAYOUT_TRANSPOSED), m, n);
    if (in->alt != NULL && cls_all(in, f, p_alt, NULL))
        return snprintf(buf, (size_t)cap,
                        "ignores %s (%" PRId64 " of %" PRId64 ": each equals the result with %s = 1)",
                        in->alt_what ? in->alt_what : "an argument", m, n, in->alt_what ? in->alt_what : "it");
    const int64_t shift = cls_shift(in);
    if (shift > 0)
        return snprintf(buf, (size_t)cap,
                        "wrong only for storage-offset inputs (input %d; the output is the truth shifted by %" PRId64
                        " elements, %" PRId64 " of %" PRId64 " wrong: the storage offset ignored)",
                        cls_find_layout(in, KV_LAYOUT_OFFSET), shift, m, n);
    if (!fl) {
        if (kv_dtype_is_integral(in->dtype, false) && in->dtype != KV_I32 && in->dtype != KV_I16 &&
            in->dtype != KV_I8 && in->dtype != KV_U8 && cls_all(in, f, p_int_wrap32, NULL))
            return snprintf(buf, (size_t)cap,
                            "wraps to 32 bits (%" PRId64 " of %" PRId64 ", each the truth modulo 2^32)", m, n);
        return cls_periodic(in, m, buf, cap);
    }
    if (cls_all(in, f, p_toward_zero, NULL))
        return snprintf(buf, (size_t)cap, "rounds toward zero (%" PRId64 " of %" PRId64 ", every error toward zero)", m, n);
    if (cls_all(in, f, p_half_away, NULL))
        return snprintf(buf, (size_t)cap,
                        "rounds half away from zero (%" PRId64 " of %" PRId64
                        ", every error 1 ulp away from zero at a tie the truth broke to even)",
                        m, n);
    if (cls_all(in, f, p_double_round, NULL))
        return snprintf(buf, (size_t)cap,
                        "double rounding (%" PRId64 " of %" PRId64
                        ", each 1 ulp off on an even value where the correctly rounded one is odd)",
                        m, n);
    /* Last: "within the looser bound" also holds for many small errors of
     * other causes, which the patterns above name more exactly. */
    if (in->within_one_pass != NULL && cls_all(in, f, p_within_one_pass, NULL))
        return snprintf(buf, (size_t)cap,
                        "variance by E[x^2] - E[x]^2 (%" PRId64 " of %" PRId64
                        " past the bound of a two-pass variance, every one within the bound of a one-pass variance: "
                        "error grows with mean^2/variance)",
                        m, n);
    if (in->within_working != NULL && cls_all(in, f, p_within_working, NULL)) {
        const char *dn = in->dtype == KV_BF16 ? "bf16" : in->dtype == KV_F16 ? "f16" : "its output dtype";
        return snprintf(buf, (size_t)cap,
                        "accumulates in %s, not f32 (%" PRId64 " of %" PRId64
                        " past the bound of an f32 accumulator, every one within the bound of a sum kept in %s)",
                        dn, m, n, dn);
    }
    return cls_periodic(in, m, buf, cap);
}
