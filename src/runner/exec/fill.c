/* Input fill: the domain table and the three fill modes (runner/fill.h). */
#include "runner/exec/fill.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/rng.h"
#include "ref/ref.h"

/* ---- the domain table ----
 *
 * One row per (op, tensor argument) whose values are restricted, plus one
 * row per op whose exact fill must be sized by an accumulation length.
 * Arguments are named, not numbered, so a Tensor[] before them cannot
 * shift the row onto the wrong input. Ops and arguments absent from the
 * table take KV_DOMAIN_ALL with elementwise exact sizing. */

typedef enum fill_accum {
    FILL_ACC_NONE,   /* elementwise: one rounding per output, quarters are exact */
    FILL_ACC_SUM,    /* a sum of input values: |sum| <= R * K */
    FILL_ACC_DOT,    /* a sum of products: |sum| <= R^2 * K */
    FILL_ACC_PROD    /* a product: exact only for +-1 */
} fill_accum;

typedef struct fill_row {
    const char *op;
    const char *arg;        /* tensor argument; NULL: the op-level accumulation row */
    kv_fill_domain domain;
    /* KV_DOMAIN_INDEX: values index `index_of` along the dim named by the
     * int argument `index_dim_arg` (NULL: dim 0). */
    const char *index_of;
    const char *index_dim_arg;
    /* Accumulation rows: the kind, and for DOT the argument whose last dim
     * is the inner (summed) length K. */
    fill_accum accum;
    const char *k_of;
} fill_row;

static const fill_row fill_table[] = {
    /* Real-valued functions defined only for x > 0: negative inputs would
     * only test NaN propagation, which the special fill covers. */
    { "log", "self", KV_DOMAIN_POSITIVE, NULL, NULL, FILL_ACC_NONE, NULL },
    { "sqrt", "self", KV_DOMAIN_POSITIVE, NULL, NULL, FILL_ACC_NONE, NULL },
    { "rsqrt", "self", KV_DOMAIN_POSITIVE, NULL, NULL, FILL_ACC_NONE, NULL },
    /* A negative base with a non-integer exponent is NaN. */
    { "pow.Tensor_Scalar", "self", KV_DOMAIN_POSITIVE, NULL, NULL, FILL_ACC_NONE, NULL },
    /* Division by zero is an Inf/NaN edge case: the special fill's job. */
    { "div.Tensor", "other", KV_DOMAIN_NONZERO, NULL, NULL, FILL_ACC_NONE, NULL },
    { "where.self", "condition", KV_DOMAIN_BOOL, NULL, NULL, FILL_ACC_NONE, NULL },
    { "masked_fill.Scalar", "mask", KV_DOMAIN_BOOL, NULL, NULL, FILL_ACC_NONE, NULL },
    { "masked_fill_.Scalar", "mask", KV_DOMAIN_BOOL, NULL, NULL, FILL_ACC_NONE, NULL },
    /* Index-valued inputs: [0, size) of what they index. */
    { "index_select", "index", KV_DOMAIN_INDEX, "self", "dim", FILL_ACC_NONE, NULL },
    { "embedding", "indices", KV_DOMAIN_INDEX, "weight", NULL, FILL_ACC_NONE, NULL },
    { "index_select_backward", "index", KV_DOMAIN_INDEX, "self_sizes", "dim", FILL_ACC_NONE, NULL },
    { "embedding_dense_backward", "indices", KV_DOMAIN_INDEX, "num_weights", NULL, FILL_ACC_NONE, NULL },
    /* Accumulations: the exact fill shrinks its range with the length. */
    { "sum.dim_IntList", NULL, KV_DOMAIN_ALL, NULL, NULL, FILL_ACC_SUM, NULL },
    { "mean.dim", NULL, KV_DOMAIN_ALL, NULL, NULL, FILL_ACC_SUM, NULL },
    { "prod.dim_int", NULL, KV_DOMAIN_ALL, NULL, NULL, FILL_ACC_PROD, NULL },
    { "mm", NULL, KV_DOMAIN_ALL, NULL, NULL, FILL_ACC_DOT, "self" },
    { "bmm", NULL, KV_DOMAIN_ALL, NULL, NULL, FILL_ACC_DOT, "self" },
    { "addmm", NULL, KV_DOMAIN_ALL, NULL, NULL, FILL_ACC_DOT, "mat1" },
};

#define FILL_TABLE_N ((int)(sizeof fill_table / sizeof fill_table[0]))

const char *kv_fill_domain_name(kv_fill_domain d) {
    switch (d) {
    case KV_DOMAIN_ALL: return "all";
    case KV_DOMAIN_POSITIVE: return "positive";
    case KV_DOMAIN_NONZERO: return "nonzero";
    case KV_DOMAIN_BOOL: return "bool";
    case KV_DOMAIN_INDEX: return "index";
    case KV_DOMAIN_UNIT: return "unit";
    }
    return "?";
}

/* The first case input that feeds schema argument `name`, or -1. */
static int fill_input_of_arg(const kv_case *c, const kv_schema *s, const char *name) {
    const int a = kv_schema_arg_index(s, name);
    if (a < 0) return -1;
    for (int i = 0; i < c->ninputs; i++) {
        if (c->input_arg[i] == a && !c->absent[i]) return i;
    }
    return -1;
}

/* The integer value of int argument `name`: the case's text or the
 * schema default. false when neither gives an int. */
static bool fill_int_arg(const kv_case *c, const kv_schema *s, const char *name, int64_t *out) {
    for (int i = 0; i < c->nargs; i++) {
        if (strcmp(c->args[i].name, name) != 0) continue;
        char *end = NULL;
        const long long v = strtoll(c->args[i].value, &end, 10);
        if (end == c->args[i].value || *end != '\0') return false;
        *out = (int64_t)v;
        return true;
    }
    const int a = kv_schema_arg_index(s, name);
    if (a < 0 || !s->args[a].has_default || s->args[a].default_value.tag != KV_IV_INT) return false;
    *out = s->args[a].default_value.v.i;
    return true;
}

/* Element `dim` (wrapped) of int-list argument `name` as the case writes
 * it ("[4,5]" or a bare "4"); false when the case does not give it. */
static bool fill_int_list_arg(const kv_case *c, const char *name, int64_t dim, int64_t *out) {
    for (int i = 0; i < c->nargs; i++) {
        if (strcmp(c->args[i].name, name) != 0) continue;
        int64_t v[KV_MAX_DIMS];
        int n = 0;
        const char *p = c->args[i].value;
        if (*p == '[') p++;
        while (*p && *p != ']' && n < KV_MAX_DIMS) {
            char *end = NULL;
            v[n++] = strtoll(p, &end, 10);
            if (end == p) return false;
            p = end;
            if (*p == ',') p++;
        }
        if (n == 0) return false;
        if (dim < 0) dim += n;
        if (dim < 0 || dim >= n) return false;
        *out = v[dim];
        return true;
    }
    return false;
}

/* Significand bits (with the implicit one) of the real type of dt: the
 * integers up to 2^p are exact. Integers wrap identically in every
 * implementation, so their "p" only has to keep the range small. */
static int fill_precision_bits(kv_dtype dt) {
    switch (dt) {
    case KV_F16: return 11;
    case KV_BF16: return 8;
    case KV_F32:
    case KV_C64: return 24;
    case KV_F64:
    case KV_C128: return 53;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64: return 62;
    case KV_DTYPE_COUNT: break;
    }
    return 8;
}

/* The largest R in [1, 4] with R^power * k <= 2^p. Why 4: small ranges
 * keep products and partial sums far from every dtype's limits and still
 * give 9 distinct values, enough to catch swapped or dropped operands.
 * Past k = 2^p nothing keeps a sum exact; R = 1 then only makes an inexact
 * sum less likely. */
static int64_t fill_exact_range(int p, int power, int64_t k) {
    if (k < 1) k = 1;
    const double budget = ldexp(1.0, p) / (double)k;
    int64_t r = 4;
    while (r > 1 && (power == 2 ? (double)(r * r) : (double)r) > budget) r--;
    return r;
}

static const fill_row *fill_find(const char *op, const char *arg) {
    for (int i = 0; i < FILL_TABLE_N; i++) {
        const fill_row *r = &fill_table[i];
        if (strcmp(r->op, op) != 0) continue;
        if (arg == NULL ? r->arg == NULL : (r->arg != NULL && strcmp(r->arg, arg) == 0)) return r;
    }
    return NULL;
}

void kv_fill_plan_layout(kv_fill_plan *plan, kv_layout layout, const kv_shape *sh) {
    plan->repeat_dim0 = layout == KV_LAYOUT_BROADCAST && sh->ndim >= 1 && sh->sizes[0] > 1;
    plan->window_step0 = layout == KV_LAYOUT_WINDOW ? kv_layout_window_step(sh) : 0;
}

kv_status kv_fill_plan_for(const kv_case *c, const kv_schema *s, int input, kv_fill_plan *out) {
    if (input < 0 || input >= c->ninputs || input >= KV_CASE_MAX_INPUTS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: input %d: out of range (the case has %d inputs)", c->op, input,
                        c->ninputs);
    const int a = c->input_arg[input];
    if (a < 0 || a >= s->nargs || s->args[a].type.kind != KV_TYPE_TENSOR)
        return kv_error(KV_ERR_INVALID_ARG, "%s: input %d: feeds schema argument %d, which is not a tensor", c->op,
                        input, a);
    memset(out, 0, sizeof *out);
    out->domain = KV_DOMAIN_ALL;
    out->exact_range = 4;
    out->digit = input;
    kv_fill_plan_layout(out, c->layouts[input], &c->shapes[input]);

    const fill_row *r = fill_find(c->op, s->args[a].name);
    if (r != NULL) {
        out->domain = r->domain;
        if (r->domain == KV_DOMAIN_INDEX) {
            const int of = fill_input_of_arg(c, s, r->index_of);
            int64_t dim = 0;
            bool ok = r->index_dim_arg == NULL || fill_int_arg(c, s, r->index_dim_arg, &dim);
            int64_t hi = 0;
            if (ok && of < 0) {
                /* Backward ops name the indexed extent by an argument instead
                 * of a tensor: an int (num_weights) or an int list with a dim
                 * (self_sizes[dim]). */
                ok = r->index_dim_arg ? fill_int_list_arg(c, r->index_of, dim, &hi) : fill_int_arg(c, s, r->index_of, &hi);
                out->index_hi = ok && hi > 0 ? hi : 0;
            } else if (ok) {
                const kv_shape *sh = &c->shapes[of];
                /* PyTorch indexes a 0-dim tensor as if it had one dim of
                 * size 1 (dims 0 and -1). */
                const int nd = sh->ndim == 0 ? 1 : sh->ndim;
                if (dim < 0) dim += nd;
                ok = dim >= 0 && dim < nd;
                if (ok) out->index_hi = sh->ndim == 0 ? 1 : sh->sizes[dim];
            }
            if (!ok) out->index_hi = 0;
        }
    }

    /* Exact sizing. The output dtype is at most as precise as the most
     * precise input in these ops; a dtype= argument may narrow it. */
    int p = fill_precision_bits(c->dtypes[input]);
    for (int i = 0; i < c->nargs; i++) {
        kv_dtype dt;
        if (strcmp(c->args[i].name, "dtype") == 0 && kv_dtype_parse(c->args[i].value, &dt) == 0) {
            const int q = fill_precision_bits(dt);
            if (q < p) p = q;
        }
    }
    const fill_row *acc = fill_find(c->op, NULL);
    const fill_accum kind = acc ? acc->accum : FILL_ACC_NONE;
    const bool floating = !kv_dtype_is_integral(c->dtypes[input], true);
    switch (kind) {
    case FILL_ACC_NONE:
        /* Quarters k/4 with |k| <= 16: a product is k1*k2/16 with
         * |k1*k2| <= 256 and a sum a multiple of 1/4 below 12 in
         * magnitude (alpha = 2 included), so both need at most 8
         * significant bits, which bf16, the narrowest float, holds. */
        out->exact_quarters = floating;
        break;
    case FILL_ACC_SUM: {
        int64_t k = 1;
        const kv_shape *sh = &c->shapes[input];
        for (int d = 0; d < sh->ndim; d++) k *= sh->sizes[d] > 0 ? sh->sizes[d] : 1;
        /* Reduced length <= numel: |sum| <= R * numel <= 2^p, e.g. f16
         * (11 bits) holds every integer up to 2048 exactly. */
        out->exact_range = fill_exact_range(p, 1, k);
        break;
    }
    case FILL_ACC_DOT: {
        const int ki = fill_input_of_arg(c, s, acc->k_of);
        int64_t k = 1;
        if (ki >= 0 && c->shapes[ki].ndim > 0) k = c->shapes[ki].sizes[c->shapes[ki].ndim - 1];
        /* |sum_k a*b| <= R^2 * K <= 2^p: f16 with K = 128 allows R = 4
         * (16 * 128 = 2048), bf16 with K = 64 allows R = 2. */
        out->exact_range = fill_exact_range(p, 2, k);
        break;
    }
    case FILL_ACC_PROD:
        /* A product of n values in [-4, 4] overflows f16 by n = 8, and a
         * product that overflows in one order may not in another; +-1
         * keeps every order exact. */
        if (out->domain == KV_DOMAIN_ALL) out->domain = KV_DOMAIN_UNIT;
        break;
    }
    return KV_OK;
}

/* ---- values ---- */

/* Special values of a real floating dtype, as doubles (all exact in dt). */
#define FILL_NSPECIAL_F 13
static void fill_specials_float(kv_dtype dt, double v[FILL_NSPECIAL_F]) {
    double sub, norm, max;
    switch (kv_dtype_to_real(dt)) {
    case KV_F16: sub = 0x1p-24; norm = 0x1p-14; max = 65504.0; break;
    case KV_BF16: sub = 0x1p-133; norm = 0x1p-126; max = 0x1.FEp127; break;
    case KV_F32: sub = (double)FLT_TRUE_MIN; norm = (double)FLT_MIN; max = (double)FLT_MAX; break;
    default: sub = DBL_TRUE_MIN; norm = DBL_MIN; max = DBL_MAX; break;
    }
    const double list[FILL_NSPECIAL_F] = { NAN, INFINITY, -INFINITY, 0.0, -0.0, sub, -sub,
                                           norm, -norm, max, -max, 1.0, -1.0 };
    memcpy(v, list, sizeof list);
}

#define FILL_NSPECIAL_I 5
static void fill_specials_int(kv_dtype dt, int64_t v[FILL_NSPECIAL_I]) {
    int64_t lo, hi;
    switch (dt) {
    case KV_U8: {
        /* No negatives: -1 would wrap to max; the top bit alone stands in. */
        const int64_t u[FILL_NSPECIAL_I] = { 0, 255, 1, 254, 128 };
        memcpy(v, u, sizeof u);
        return;
    }
    case KV_I8: lo = INT8_MIN; hi = INT8_MAX; break;
    case KV_I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case KV_I32: lo = INT32_MIN; hi = INT32_MAX; break;
    default: lo = INT64_MIN; hi = INT64_MAX; break;
    }
    const int64_t s[FILL_NSPECIAL_I] = { lo, hi, 0, -1, 1 };
    memcpy(v, s, sizeof s);
}

/* Digit `d` (base n) of counter c. */
static uint64_t fill_digit(uint64_t c, int d, uint64_t n) {
    for (int i = 0; i < d && c > 0; i++) c /= n;
    return c % n;
}

typedef struct fill_value {
    bool is_int;      /* store i (integers, bool, index values) */
    int64_t i;
    double re, im;
} fill_value;

static fill_value fill_int_value(int64_t i) { return (fill_value){ true, i, 0.0, 0.0 }; }
static fill_value fill_real_value(double re, double im) { return (fill_value){ false, 0, re, im }; }

/* One real (or integer) component for the exact and real modes. */
static fill_value fill_component(kv_fill mode, const kv_fill_plan *p, kv_dtype dt, uint64_t key, uint64_t ctr) {
    const bool is_int = kv_dtype_is_integral(dt, true);
    const bool is_unsigned = dt == KV_U8;
    const uint64_t u = kv_rng_u64(key, ctr);
    switch (p->domain) {
    case KV_DOMAIN_BOOL: return fill_int_value((int64_t)(u >> 63));
    case KV_DOMAIN_INDEX: return fill_int_value(p->index_hi > 0 ? (int64_t)kv_rng_below(key, ctr, (uint64_t)p->index_hi) : 0);
    case KV_DOMAIN_UNIT:
        if (mode == KV_FILL_EXACT) return fill_int_value(is_unsigned || (u >> 63) ? 1 : -1);
        break;
    case KV_DOMAIN_ALL:
    case KV_DOMAIN_POSITIVE:
    case KV_DOMAIN_NONZERO: break;
    }
    if (dt == KV_BOOL) return fill_int_value((int64_t)(u >> 63));
    const kv_fill_domain dom = p->domain == KV_DOMAIN_UNIT ? KV_DOMAIN_ALL : p->domain;
    if (mode == KV_FILL_EXACT) {
        const int64_t r = p->exact_range;
        if (dom == KV_DOMAIN_NONZERO) {
            /* Powers of two: a dyadic numerator over them stays dyadic. */
            static const double pw[5] = { 0.25, 0.5, 1.0, 2.0, 4.0 };
            const bool neg = !is_unsigned && (u & 1u);
            if (is_int) {
                const int64_t v = (int64_t)1 << kv_rng_below(key, ctr, 3); /* 1, 2, 4 */
                return fill_int_value(neg ? -v : v);
            }
            const double v = pw[kv_rng_below(key, ctr, 5)];
            return fill_real_value(neg ? -v : v, 0.0);
        }
        if (p->exact_quarters && !is_int) {
            int64_t k;
            if (dom == KV_DOMAIN_POSITIVE)
                k = 1 + (int64_t)kv_rng_below(key, ctr, 16);          /* (0, 4] */
            else
                k = (int64_t)kv_rng_below(key, ctr, 33) - 16;         /* [-4, 4] */
            return fill_real_value((double)k / 4.0, 0.0);
        }
        int64_t v;
        if (dom == KV_DOMAIN_POSITIVE)
            v = 1 + (int64_t)kv_rng_below(key, ctr, (uint64_t)r);
        else if (is_unsigned)
            v = (int64_t)kv_rng_below(key, ctr, (uint64_t)(2 * r + 1));
        else
            v = (int64_t)kv_rng_below(key, ctr, (uint64_t)(2 * r + 1)) - r;
        return is_int ? fill_int_value(v) : fill_real_value((double)v, 0.0);
    }
    /* real: uniform over the domain. */
    if (is_int) {
        switch (dom) {
        case KV_DOMAIN_POSITIVE: return fill_int_value(1 + (int64_t)kv_rng_below(key, ctr, 8));
        case KV_DOMAIN_NONZERO: {
            const int64_t v = 1 + (int64_t)kv_rng_below(key, ctr, is_unsigned ? 16 : 8);
            return fill_int_value(!is_unsigned && (u & 1u) ? -v : v);
        }
        default:
            return fill_int_value(is_unsigned ? (int64_t)kv_rng_below(key, ctr, 17)
                                              : (int64_t)kv_rng_below(key, ctr, 17) - 8);
        }
    }
    const double x = kv_rng_uniform(key, ctr);
    switch (dom) {
    case KV_DOMAIN_POSITIVE: return fill_real_value(0.0625 + x * (4.0 - 0.0625), 0.0);
    case KV_DOMAIN_NONZERO: {
        /* The low bit picks the sign; the top 53 bits the magnitude. */
        const double m = 0.25 + x * 1.75;
        return fill_real_value((u & 1u) ? -m : m, 0.0);
    }
    default: return fill_real_value(-2.0 + 4.0 * x, 0.0);
    }
}

static fill_value fill_special(const kv_fill_plan *p, kv_dtype dt, uint64_t ctr) {
    switch (p->domain) {
    case KV_DOMAIN_BOOL: return fill_int_value((int64_t)fill_digit(ctr, p->digit, 2));
    case KV_DOMAIN_INDEX: {
        /* The extremes of the valid range: first and last index. */
        if (p->index_hi <= 0) return fill_int_value(0);
        return fill_int_value(fill_digit(ctr, p->digit, 2) ? p->index_hi - 1 : 0);
    }
    case KV_DOMAIN_ALL:
    case KV_DOMAIN_POSITIVE:
    case KV_DOMAIN_NONZERO:
    case KV_DOMAIN_UNIT: break;
    }
    if (dt == KV_BOOL) return fill_int_value((int64_t)fill_digit(ctr, p->digit, 2));
    if (kv_dtype_is_integral(dt, false)) {
        int64_t v[FILL_NSPECIAL_I];
        fill_specials_int(dt, v);
        return fill_int_value(v[fill_digit(ctr, p->digit, FILL_NSPECIAL_I)]);
    }
    double v[FILL_NSPECIAL_F];
    fill_specials_float(dt, v);
    if (kv_dtype_is_complex(dt)) {
        return fill_real_value(v[fill_digit(ctr, 2 * p->digit, FILL_NSPECIAL_F)],
                               v[fill_digit(ctr, 2 * p->digit + 1, FILL_NSPECIAL_F)]);
    }
    return fill_real_value(v[fill_digit(ctr, p->digit, FILL_NSPECIAL_F)], 0.0);
}

/* The sweep fill: element k of n is one bit pattern drawn at random from
 * stratum k of an even split of the dtype's patterns (all of them; only
 * the positive half for ops whose domain is positive, so log and sqrt do
 * not spend half the sweep on NaN). A stratified sample: every region of
 * the line of floats (subnormals, each binade, Inf and NaN) gets its share,
 * and no two runs of one case differ. When n exceeds the number of
 * patterns (f16, bf16) each pattern comes n / 2^w times, in order. Real
 * floating dtypes only; everything else fills as `real`. */
static fill_value fill_sweep(const kv_fill_plan *p, kv_dtype dt, uint64_t key, uint64_t ctr, int64_t n) {
    int w;
    switch (dt) {
    case KV_F16:
    case KV_BF16: w = 16; break;
    case KV_F32: w = 32; break;
    default: w = 64; break;
    }
    const bool positive = p->domain == KV_DOMAIN_POSITIVE;
    const int span_bits = positive ? w - 1 : w;
    const uint64_t span_m1 = span_bits == 64 ? ~0ull : (1ull << span_bits) - 1; /* patterns - 1 */
    uint64_t bits;
    if (span_bits < 64 && (uint64_t)n > span_m1) {
        bits = ctr & span_m1;
    } else {
        /* step = floor(2^span / n), so stratum k is [k*step, (k+1)*step). */
        const uint64_t step = span_m1 / (uint64_t)n + (span_m1 % (uint64_t)n + 1 == (uint64_t)n ? 1 : 0);
        bits = ctr * step + kv_rng_below(key, ctr, step > 0 ? step : 1);
    }
    double v;
    switch (dt) {
    case KV_F16: v = kv_f16_to_f32((uint16_t)bits); break;
    case KV_BF16: v = kv_bf16_to_f32((uint16_t)bits); break;
    case KV_F32: {
        const uint32_t u = (uint32_t)bits;
        float f;
        memcpy(&f, &u, sizeof f);
        v = f;
        break;
    }
    default: memcpy(&v, &bits, sizeof v); break;
    }
    return fill_real_value(v, 0.0);
}

/* The shifted fill's offset C = 2^(floor(p/2) - 2), p the dtype's
 * significand bits: 8 (f16), 4 (bf16), 2^10 (f32), 2^24 (f64). Around C
 * the real fill's spread of 4 keeps at least 2^5 distinct values per
 * unit, while mean^2/variance ~ C^2 / (4/3) = 3/4 * 2^(2*floor(p/2) - 4)
 * makes E[x^2] - E[x]^2 in working precision (unit roundoff u = 2^-p)
 * lose about u * C^2 / v, 2 to 5% of the variance: far past the bound of
 * a two-pass variance, yet the variance keeps its sign, so such a kernel
 * fails by error, not by Inf or NaN. */
static double fill_shift(kv_dtype dt) {
    return ldexp(1.0, fill_precision_bits(dt) / 2 - 2);
}

static void fill_store(kv_dtype dt, void *dst, fill_value v) {
    if (v.is_int) {
        if (dt == KV_BOOL)
            *(uint8_t *)dst = v.i != 0;
        else if (kv_dtype_is_integral(dt, false))
            kv_ref_store_i64(dt, dst, v.i);
        else
            kv_ref_store_c128(dt, dst, (double)v.i, 0.0);
        return;
    }
    /* Every fill value is exact in dt except real-mode uniforms, which
     * round to nearest even here (kv_ref_store_* narrows once). */
    kv_ref_store_c128(dt, dst, v.re, v.im);
}

kv_status kv_fill_tensor(kv_tensor *t, kv_fill mode, const kv_fill_plan *plan, uint64_t key) {
    if (t == NULL || plan == NULL) return kv_error(KV_ERR_INVALID_ARG, "fill: argument 't': NULL");
    char *data = kv_tensor_data(t);
    const int64_t numel = kv_tensor_numel(t);
    if (numel == 0) return KV_OK;
    if (data == NULL || !kv_tensor_is_contiguous(t))
        return kv_error(KV_ERR_INVALID_ARG, "fill: argument 't': needs a contiguous host-addressable tensor");
    const size_t item = kv_dtype_size(t->dtype);
    /* The counter of an element is the storage element its layout puts it
     * in: with repeat_dim0 (b) its row-major index within one dim-0
     * slice, so every slice gets the same values; with window_step0 (w)
     * row i starting window_step0 counters after row i - 1, so the
     * elements two overlapping rows share get one value. `span` counters
     * are used in all. */
    int64_t slice = numel, step0 = numel, span = numel;
    if ((plan->repeat_dim0 || plan->window_step0 > 0) && t->ndim >= 1 && t->sizes[0] > 0) {
        slice = numel / t->sizes[0];
        step0 = plan->repeat_dim0 ? 0 : plan->window_step0;
        span = (t->sizes[0] - 1) * step0 + slice;
    }
    const bool cplx = kv_dtype_is_complex(t->dtype);
    for (int64_t k = 0; k < numel; k++) {
        const uint64_t ctr = (uint64_t)((k / slice) * step0 + k % slice);
        fill_value v;
        if (mode == KV_FILL_SPECIAL) {
            v = fill_special(plan, t->dtype, ctr);
        } else if (mode == KV_FILL_SWEEP && kv_dtype_is_floating(t->dtype) && !cplx &&
                   plan->domain != KV_DOMAIN_INDEX && plan->domain != KV_DOMAIN_BOOL) {
            v = fill_sweep(plan, t->dtype, key, ctr, span);
        } else if (cplx && plan->domain != KV_DOMAIN_INDEX && plan->domain != KV_DOMAIN_BOOL) {
            /* Independent components from counters 2c and 2c + 1. */
            const kv_dtype real = kv_dtype_to_real(t->dtype);
            const kv_fill m = mode == KV_FILL_SWEEP ? KV_FILL_REAL : mode;
            const fill_value re = fill_component(m, plan, real, key, 2 * ctr);
            const fill_value im = fill_component(m, plan, real, key, 2 * ctr + 1);
            v = fill_real_value(re.is_int ? (double)re.i : re.re, im.is_int ? (double)im.i : im.re);
        } else if (mode == KV_FILL_SHIFTED) {
            v = fill_component(KV_FILL_REAL, plan, t->dtype, key, ctr);
            /* Only real floating values of an unbounded domain move: an
             * index, a bool, an integer or a +-1 keeps its meaning. */
            const bool moves = !v.is_int && kv_dtype_is_floating(t->dtype) &&
                               (plan->domain == KV_DOMAIN_ALL || plan->domain == KV_DOMAIN_POSITIVE ||
                                plan->domain == KV_DOMAIN_NONZERO);
            if (moves) v.re += fill_shift(t->dtype);
        } else {
            v = fill_component(mode == KV_FILL_SWEEP ? KV_FILL_REAL : mode, plan, t->dtype, key, ctr);
        }
        fill_store(t->dtype, data + (size_t)k * item, v);
    }
    return KV_OK;
}

/* ---- keys ---- */

int kv_fill_golden_key(const kv_case *c, char *buf, int cap) {
    int n = kv_case_golden_key(c, buf, cap);
    if (n < 0) return n;
    bool first = true;
    for (int i = 0; i < c->ninputs && i < KV_CASE_MAX_INPUTS; i++) {
        if (c->absent[i] || c->layouts[i] != KV_LAYOUT_BROADCAST) continue;
        if (c->shapes[i].ndim < 1 || c->shapes[i].sizes[0] <= 1) continue;
        const int room = n < cap ? cap - n : 0;
        n += snprintf(room > 0 ? buf + n : NULL, (size_t)room, "%s%d", first ? "+bcast0=" : ",", i);
        first = false;
    }
    first = true;
    for (int i = 0; i < c->ninputs && i < KV_CASE_MAX_INPUTS; i++) {
        if (c->absent[i] || c->layouts[i] != KV_LAYOUT_WINDOW || kv_layout_window_step(&c->shapes[i]) == 0) continue;
        const int room = n < cap ? cap - n : 0;
        n += snprintf(room > 0 ? buf + n : NULL, (size_t)room, "%s%d", first ? "+win0=" : ",", i);
        first = false;
    }
    return n;
}

kv_status kv_fill_input_key(const kv_case *c, int input, uint64_t *out) {
    char key[2 * KV_CASE_ID_MAX];
    const int n = kv_fill_golden_key(c, key, (int)sizeof key);
    if (n < 0 || n >= (int)sizeof key)
        return kv_error(KV_ERR_INVALID_ARG, "%s: golden key too long (%d bytes)", c->op, n);
    *out = kv_rng_substream(kv_rng_key(key, c->seed), (uint64_t)input);
    return KV_OK;
}

kv_status kv_fill_case_input(const kv_case *c, const kv_schema *s, int input, kv_tensor *t) {
    kv_fill_plan plan;
    kv_status st = kv_fill_plan_for(c, s, input, &plan);
    if (st != KV_OK) return st;
    uint64_t key;
    if ((st = kv_fill_input_key(c, input, &key)) != KV_OK) return st;
    return kv_fill_tensor(t, c->fill, &plan, key);
}
