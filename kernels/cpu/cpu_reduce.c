/* Optimized reductions: sum.dim_IntList, mean.dim, prod.dim_int, amax,
 * argmax. Two variants each:
 *   "vec"       sum/mean/prod accumulate in the reference's wide type (f64
 *               for f32/f64, uint64 for integers) in 8 independent lanes
 *               the compiler turns into SIMD; amax/argmax find the maximum
 *               with lanes, then the first element equal to it;
 *   "pairwise"  sum/mean/prod accumulate in the output dtype itself
 *               (f32 for f32), pairwise over blocks of 256 (the error
 *               grows with log n, not n); amax/argmax work in blocks of
 *               2048 and rescan only the block that holds the maximum.
 * Reductions over a contiguous kept dim (a column sum of a row-major
 * matrix) accumulate whole rows into a vector of outputs instead.
 *
 * Numerics: "vec" reorders an f64 sum (error ~ log8(n) * 2^-53 relative
 * to sum|x|), "pairwise" an f32 one (log2(n) * 2^-24): both far inside the
 * table's gamma_{n+1} * sum|x|; with fill=exact every partial sum is
 * exact, so both are bitwise. Integer sums and products wrap in uint64 as
 * the reference does, in any order: bitwise. amax/argmax are exact
 * (the first maximum, the first NaN), bitwise.
 *
 * Scope: f32, f64, i32, i64 inputs (integer sums and products produce
 * i64), a dtype argument only when it is the default, any strides, valid
 * dims; everything else goes to the reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"
#include "ref/ref_shared.h"

typedef enum red_op { RED_SUM, RED_MEAN, RED_PROD, RED_AMAX, RED_ARGMAX } red_op;

typedef struct red_plan {
    red_op op;
    const kv_tensor *x;
    kv_dtype out_dt;
    int nk, nr;
    int64_t ksize[KV_MAX_DIMS], kstride[KV_MAX_DIMS];
    int64_t rsize[KV_MAX_DIMS], rstride[KV_MAX_DIMS];
    int64_t nout, nred;
    int64_t out_sizes[KV_MAX_DIMS];
    int out_ndim;
} red_plan;

/* ---- analysis ---- */

static bool red_in_dtype(kv_dtype d) { return d == KV_F32 || d == KV_F64 || d == KV_I32 || d == KV_I64; }

/* int[1]? / int[1] / int? into a mask (ref_shared.h, so exactly the lists
 * the reference takes); false for anything the reference would refuse,
 * which it then reports. `given`: the list named at least one dim. */
static bool red_dims(const kv_ivalue *v, const kv_tensor *t, bool *reduce, bool *given) {
    int64_t bad = 0;
    return kv_ref_dims_mask(v, t->ndim, reduce, given, &bad) == KV_REF_DIMS_OK;
}

static void red_plan_geom(red_plan *p, const kv_tensor *t, const bool *reduce, bool keepdim) {
    p->nk = p->nr = 0;
    p->nout = p->nred = 1;
    p->out_ndim = 0;
    for (int d = 0; d < t->ndim; d++) {
        const int64_t sz = t->sizes[d], st = t->strides[d];
        if (reduce[d]) {
            p->nred *= sz;
            if (keepdim) p->out_sizes[p->out_ndim++] = 1;
            if (sz == 1) continue;
            if (p->nr > 0 && p->rstride[p->nr - 1] == st * sz) {
                p->rsize[p->nr - 1] *= sz;
                p->rstride[p->nr - 1] = st;
            } else {
                p->rsize[p->nr] = sz;
                p->rstride[p->nr++] = st;
            }
        } else {
            p->nout *= sz;
            p->out_sizes[p->out_ndim++] = sz;
            if (sz == 1) continue;
            if (p->nk > 0 && p->kstride[p->nk - 1] == st * sz) {
                p->ksize[p->nk - 1] *= sz;
                p->kstride[p->nk - 1] = st;
            } else {
                p->ksize[p->nk] = sz;
                p->kstride[p->nk++] = st;
            }
        }
    }
}

static bool red_analyze(const kv_op *op, const kv_stack *s, red_plan *p) {
    memset(p, 0, sizeof *p);
    const int id = kv_op_builtin_id(op);
    if (s->size < 3 || s->slots[0].tag != KV_IV_TENSOR) return false;
    const kv_tensor *x = s->slots[0].v.tensor;
    if (!kv_cpu_plain(x) || !red_in_dtype(x->dtype)) return false;
    if (s->slots[2].tag != KV_IV_BOOL) return false;
    const bool keepdim = s->slots[2].v.b;
    bool reduce[KV_MAX_DIMS], given = false;
    p->x = x;
    const bool integral = kv_dtype_is_integral(x->dtype, true);
    switch (id) {
    case KV_OP_SUM_DIM_INTLIST:
    case KV_OP_MEAN_DIM:
    case KV_OP_PROD_DIM_INT: {
        p->op = id == KV_OP_SUM_DIM_INTLIST ? RED_SUM : id == KV_OP_MEAN_DIM ? RED_MEAN : RED_PROD;
        if (p->op == RED_MEAN && integral) return false;
        if (s->size < 4) return false;
        p->out_dt = integral ? KV_I64 : x->dtype;
        if (s->slots[3].tag == KV_IV_DTYPE && s->slots[3].v.dtype != p->out_dt) return false;
        if (s->slots[3].tag != KV_IV_DTYPE && s->slots[3].tag != KV_IV_NONE) return false;
        if (p->op == RED_PROD && s->slots[1].tag != KV_IV_INT) return false;
        if (!red_dims(&s->slots[1], x, reduce, &given)) return false;
        break;
    }
    case KV_OP_AMAX:
        p->op = RED_AMAX;
        p->out_dt = x->dtype;
        if (!red_dims(&s->slots[1], x, reduce, &given)) return false;
        break;
    case KV_OP_ARGMAX:
        p->op = RED_ARGMAX;
        p->out_dt = KV_I64;
        if (s->slots[1].tag != KV_IV_NONE && s->slots[1].tag != KV_IV_INT) return false;
        if (!red_dims(&s->slots[1], x, reduce, &given)) return false;
        break;
    default: return false;
    }
    red_plan_geom(p, x, reduce, keepdim);
    /* Max-like reductions of nothing are errors: the reference's. */
    if ((p->op == RED_AMAX || p->op == RED_ARGMAX) && p->nred == 0) return false;
    return true;
}

bool kv_cpu_reduce_pred(const kv_op *op, const kv_stack *stack) {
    red_plan p;
    return red_analyze(op, stack, &p);
}

/* ---- the rows of one output element ---- */

/* The reduced space as rows of the innermost reduced dim. */
typedef struct red_rows {
    int64_t n;       /* elements per row */
    int64_t stride;  /* between them */
    int64_t rows;
} red_rows;

static red_rows red_rows_of(const red_plan *p) {
    if (p->nred == 0) return (red_rows){ 1, 1, 0 };
    if (p->nr == 0) return (red_rows){ 1, 1, 1 };
    return (red_rows){ p->rsize[p->nr - 1], p->rstride[p->nr - 1], p->nred / p->rsize[p->nr - 1] };
}

static int64_t red_row_offset(const red_plan *p, int64_t row) {
    return p->nr <= 1 ? 0 : kv_ref_linear_offset(row, p->nr - 1, p->rsize, p->rstride, -1);
}

/* ---- sum / prod kernels over one row ---- */

#define LANES 8

/* vec: wide lanes. */
#define ROW_WIDE(name, TI, TA, OP)                                                  \
    static void name(const TI *x, int64_t n, int64_t s, TA *lane) {                 \
        if (s == 1) {                                                               \
            int64_t i = 0;                                                          \
            for (; i + LANES <= n; i += LANES)                                      \
                for (int l = 0; l < LANES; l++) lane[l] = lane[l] OP (TA)x[i + l];  \
            for (; i < n; i++) lane[0] = lane[0] OP (TA)x[i];                       \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++) lane[i % LANES] = lane[i % LANES] OP (TA)x[i * s]; \
        }                                                                           \
    }
ROW_WIDE(sum_row_f32, float, double, +)
ROW_WIDE(sum_row_f64, double, double, +)
ROW_WIDE(sum_row_i32, int32_t, uint64_t, +)
ROW_WIDE(sum_row_i64, int64_t, uint64_t, +)
ROW_WIDE(prod_row_f32, float, double, *)
ROW_WIDE(prod_row_f64, double, double, *)
ROW_WIDE(prod_row_i32, int32_t, uint64_t, *)
ROW_WIDE(prod_row_i64, int64_t, uint64_t, *)

/* pairwise: lanes in the element type, blocks of 256 combined pairwise. */
#define PW_BLOCK 256
#define ROW_PAIRWISE(name, T, OP, ID)                                                \
    static T name##_block(const T *x, int64_t n, int64_t s) {                        \
        T lane[LANES];                                                               \
        for (int l = 0; l < LANES; l++) lane[l] = ID;                                \
        if (s == 1) {                                                                \
            int64_t i = 0;                                                           \
            for (; i + LANES <= n; i += LANES)                                       \
                for (int l = 0; l < LANES; l++) lane[l] = lane[l] OP x[i + l];       \
            for (; i < n; i++) lane[0] = lane[0] OP x[i];                            \
        } else {                                                                     \
            for (int64_t i = 0; i < n; i++) lane[i % LANES] = lane[i % LANES] OP x[i * s]; \
        }                                                                            \
        return ((lane[0] OP lane[1]) OP (lane[2] OP lane[3])) OP                     \
               ((lane[4] OP lane[5]) OP (lane[6] OP lane[7]));                       \
    }                                                                                \
    static T name(const T *x, int64_t n, int64_t s) {                                \
        if (n <= PW_BLOCK) return name##_block(x, n, s);                             \
        int64_t h = (n / 2 + LANES - 1) / LANES * LANES;                             \
        return name(x, h, s) OP name(x + h * s, n - h, s);                           \
    }
ROW_PAIRWISE(sum_pw_f32, float, +, 0.0f)
ROW_PAIRWISE(sum_pw_f64, double, +, 0.0)
ROW_PAIRWISE(prod_pw_f32, float, *, 1.0f)
ROW_PAIRWISE(prod_pw_f64, double, *, 1.0)

static double lanes_sum(const double *l) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }
static double lanes_prod(const double *l) { return ((l[0] * l[1]) * (l[2] * l[3])) * ((l[4] * l[5]) * (l[6] * l[7])); }
static uint64_t ulanes_sum(const uint64_t *l) {
    uint64_t r = 0;
    for (int i = 0; i < LANES; i++) r += l[i];
    return r;
}
static uint64_t ulanes_prod(const uint64_t *l) {
    uint64_t r = 1;
    for (int i = 0; i < LANES; i++) r *= l[i];
    return r;
}

static void store_real(kv_dtype dt, char *dst, int64_t o, double v) {
    if (dt == KV_F32) ((float *)dst)[o] = (float)v;
    else ((double *)dst)[o] = v;
}

/* One output of sum/mean/prod. */
static void fold_one(const red_plan *p, bool pairwise, const char *base, char *dst, int64_t o) {
    const red_rows rr = red_rows_of(p);
    const kv_dtype dt = p->x->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    const bool prod = p->op == RED_PROD;
    if (kv_dtype_is_integral(dt, true)) {
        uint64_t lane[LANES];
        for (int l = 0; l < LANES; l++) lane[l] = prod ? 1u : 0u;
        for (int64_t r = 0; r < rr.rows; r++) {
            const char *row = base + red_row_offset(p, r) * es;
            if (dt == KV_I32) (prod ? prod_row_i32 : sum_row_i32)((const int32_t *)row, rr.n, rr.stride, lane);
            else (prod ? prod_row_i64 : sum_row_i64)((const int64_t *)row, rr.n, rr.stride, lane);
        }
        ((int64_t *)dst)[o] = (int64_t)(prod ? ulanes_prod(lane) : ulanes_sum(lane));
        return;
    }
    double v;
    if (!pairwise) {
        double lane[LANES];
        for (int l = 0; l < LANES; l++) lane[l] = prod ? 1.0 : 0.0;
        for (int64_t r = 0; r < rr.rows; r++) {
            const char *row = base + red_row_offset(p, r) * es;
            if (dt == KV_F32) (prod ? prod_row_f32 : sum_row_f32)((const float *)row, rr.n, rr.stride, lane);
            else (prod ? prod_row_f64 : sum_row_f64)((const double *)row, rr.n, rr.stride, lane);
        }
        v = prod ? lanes_prod(lane) : lanes_sum(lane);
    } else if (dt == KV_F32) {
        float acc = prod ? 1.0f : 0.0f;
        for (int64_t r = 0; r < rr.rows; r++) {
            const float *row = (const float *)(base + red_row_offset(p, r) * es);
            acc = prod ? acc * prod_pw_f32(row, rr.n, rr.stride) : acc + sum_pw_f32(row, rr.n, rr.stride);
        }
        v = (double)acc;
    } else {
        double acc = prod ? 1.0 : 0.0;
        for (int64_t r = 0; r < rr.rows; r++) {
            const double *row = (const double *)(base + red_row_offset(p, r) * es);
            acc = prod ? acc * prod_pw_f64(row, rr.n, rr.stride) : acc + sum_pw_f64(row, rr.n, rr.stride);
        }
        v = acc;
    }
    if (p->op == RED_MEAN) v = v / (double)p->nred;
    store_real(p->out_dt, dst, o, v);
}

/* Column reductions: the one kept dim is contiguous, so each reduced
 * element contributes a whole vector of outputs. The accumulator is the
 * wide type for "vec" (then the order per output is the reference's,
 * and results are bitwise) and the element type for "pairwise". */
static bool fold_columns(const red_plan *p, bool pairwise, char *dst) {
    const int64_t K = p->nout, es = (int64_t)kv_dtype_size(p->x->dtype);
    const kv_dtype dt = p->x->dtype;
    const bool prod = p->op == RED_PROD;
    const char *src = kv_tensor_data(p->x);
    const bool narrow = pairwise && dt == KV_F32;
    void *acc = malloc((size_t)(K > 0 ? K : 1) * 8);
    if (acc == NULL) return false;
    double *ad = acc;
    float *af = acc;
    uint64_t *au = acc;
    const bool integral = kv_dtype_is_integral(dt, true);
    for (int64_t c = 0; c < K; c++) {
        if (integral) au[c] = prod ? 1u : 0u;
        else if (narrow) af[c] = prod ? 1.0f : 0.0f;
        else ad[c] = prod ? 1.0 : 0.0;
    }
    for (int64_t r = 0; r < p->nred; r++) {
        const char *row = src + kv_ref_linear_offset(r, p->nr, p->rsize, p->rstride, -1) * es;
        if (dt == KV_F32 && narrow) {
            const float *x = (const float *)row;
            if (prod) for (int64_t c = 0; c < K; c++) af[c] *= x[c];
            else for (int64_t c = 0; c < K; c++) af[c] += x[c];
        } else if (dt == KV_F32) {
            const float *x = (const float *)row;
            if (prod) for (int64_t c = 0; c < K; c++) ad[c] *= (double)x[c];
            else for (int64_t c = 0; c < K; c++) ad[c] += (double)x[c];
        } else if (dt == KV_F64) {
            const double *x = (const double *)row;
            if (prod) for (int64_t c = 0; c < K; c++) ad[c] *= x[c];
            else for (int64_t c = 0; c < K; c++) ad[c] += x[c];
        } else if (dt == KV_I32) {
            const int32_t *x = (const int32_t *)row;
            if (prod) for (int64_t c = 0; c < K; c++) au[c] *= (uint64_t)(int64_t)x[c];
            else for (int64_t c = 0; c < K; c++) au[c] += (uint64_t)(int64_t)x[c];
        } else {
            const int64_t *x = (const int64_t *)row;
            if (prod) for (int64_t c = 0; c < K; c++) au[c] *= (uint64_t)x[c];
            else for (int64_t c = 0; c < K; c++) au[c] += (uint64_t)x[c];
        }
    }
    for (int64_t c = 0; c < K; c++) {
        if (integral) {
            ((int64_t *)dst)[c] = (int64_t)au[c];
            continue;
        }
        double v = narrow ? (double)af[c] : ad[c];
        if (p->op == RED_MEAN) v = v / (double)p->nred;
        store_real(p->out_dt, dst, c, v);
    }
    free(acc);
    return true;
}

/* ---- amax / argmax ---- */

static double load_real(kv_dtype dt, const char *p) {
    return dt == KV_F32 ? (double)*(const float *)p : *(const double *)p;
}

static int64_t load_int(kv_dtype dt, const char *p) {
    return dt == KV_I32 ? (int64_t)*(const int32_t *)p : *(const int64_t *)p;
}

/* Max over elements [from, to) of the reduced space (row-major); sets
 * *nan when one is NaN. Lanes for contiguous runs. */
typedef struct red_max {
    double m;
    int64_t im;
    bool nan, any;
} red_max;

static void max_range(const red_plan *p, const char *base, int64_t from, int64_t to, red_max *out) {
    const kv_dtype dt = p->x->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    const red_rows rr = red_rows_of(p);
    const bool fl = dt == KV_F32 || dt == KV_F64;
    double ml[LANES];
    int64_t il[LANES];
    bool nl[LANES];
    for (int l = 0; l < LANES; l++) {
        ml[l] = -INFINITY;
        il[l] = INT64_MIN;
        nl[l] = false;
    }
    int64_t k = from;
    while (k < to) {
        const int64_t row = k / rr.n, col = k % rr.n;
        const int64_t n = rr.n - col < to - k ? rr.n - col : to - k;
        const char *q = base + (red_row_offset(p, row) + col * rr.stride) * es;
        if (dt == KV_F32 && rr.stride == 1) {
            const float *x = (const float *)q;
            int64_t i = 0;
            for (; i + LANES <= n; i += LANES)
                for (int l = 0; l < LANES; l++) {
                    const double v = (double)x[i + l];
                    nl[l] = nl[l] | (v != v);
                    ml[l] = v > ml[l] ? v : ml[l];
                }
            for (; i < n; i++) {
                const double v = (double)x[i];
                nl[0] = nl[0] | (v != v);
                ml[0] = v > ml[0] ? v : ml[0];
            }
        } else if (dt == KV_F64 && rr.stride == 1) {
            const double *x = (const double *)q;
            int64_t i = 0;
            for (; i + LANES <= n; i += LANES)
                for (int l = 0; l < LANES; l++) {
                    nl[l] = nl[l] | (x[i + l] != x[i + l]);
                    ml[l] = x[i + l] > ml[l] ? x[i + l] : ml[l];
                }
            for (; i < n; i++) {
                nl[0] = nl[0] | (x[i] != x[i]);
                ml[0] = x[i] > ml[0] ? x[i] : ml[0];
            }
        } else if (fl) {
            for (int64_t i = 0; i < n; i++) {
                const double v = load_real(dt, q + i * rr.stride * es);
                nl[0] = nl[0] | (v != v);
                ml[0] = v > ml[0] ? v : ml[0];
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                const int64_t v = load_int(dt, q + i * rr.stride * es);
                il[i % LANES] = v > il[i % LANES] ? v : il[i % LANES];
            }
        }
        k += n;
    }
    out->any = to > from;
    out->nan = false;
    out->m = -INFINITY;
    out->im = INT64_MIN;
    for (int l = 0; l < LANES; l++) {
        out->nan = out->nan || nl[l];
        out->m = ml[l] > out->m ? ml[l] : out->m;
        out->im = il[l] > out->im ? il[l] : out->im;
    }
}

/* The first element of [from, to) that is NaN (when nan) or equals the max. */
static int64_t first_of(const red_plan *p, const char *base, int64_t from, int64_t to, const red_max *mx) {
    const kv_dtype dt = p->x->dtype;
    const int64_t es = (int64_t)kv_dtype_size(dt);
    const red_rows rr = red_rows_of(p);
    const bool fl = dt == KV_F32 || dt == KV_F64;
    for (int64_t k = from; k < to; k++) {
        const char *q = base + (red_row_offset(p, k / rr.n) + (k % rr.n) * rr.stride) * es;
        if (fl) {
            const double v = load_real(dt, q);
            if (mx->nan ? v != v : v == mx->m) return k;
        } else if (load_int(dt, q) == mx->im) {
            return k;
        }
    }
    return from;
}

/* Whether block maximum b beats the best so far (strictly; NaN first). */
static bool max_beats(const red_plan *p, const red_max *b, const red_max *best) {
    if (best->nan) return false;
    if (b->nan) return true;
    const bool fl = p->x->dtype == KV_F32 || p->x->dtype == KV_F64;
    return fl ? b->m > best->m : b->im > best->im;
}

#define MAX_BLOCK 2048

static int64_t argmax_one(const red_plan *p, const char *base, bool blocked) {
    const int64_t n = p->nred;
    if (!blocked) {
        red_max mx;
        max_range(p, base, 0, n, &mx);
        return first_of(p, base, 0, n, &mx);
    }
    red_max best;
    int64_t best_at = 0;
    max_range(p, base, 0, n < MAX_BLOCK ? n : MAX_BLOCK, &best);
    for (int64_t b = MAX_BLOCK; b < n && !best.nan; b += MAX_BLOCK) {
        red_max cur;
        max_range(p, base, b, b + MAX_BLOCK < n ? b + MAX_BLOCK : n, &cur);
        if (max_beats(p, &cur, &best)) {
            best = cur;
            best_at = b;
        }
    }
    const int64_t end = best_at + MAX_BLOCK < n ? best_at + MAX_BLOCK : n;
    return first_of(p, base, best_at, end, &best);
}

/* ---- the kernels ---- */

static kv_status red_run(const kv_op *op, kv_stack *stack, bool alt) {
    red_plan p;
    if (!red_analyze(op, stack, &p))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the reduction variant does not cover this call", kv_op_name(op));
    kv_tensor *out = kv_cpu_new(p.out_sizes, p.out_ndim, p.out_dt);
    if (out == NULL) return kv_last_error();
    char *dst = kv_tensor_data(out);
    const char *src = kv_tensor_data(p.x);
    const int64_t es = (int64_t)kv_dtype_size(p.x->dtype);
    if (p.op == RED_AMAX || p.op == RED_ARGMAX) {
        const red_rows rr = red_rows_of(&p);
        for (int64_t o = 0; o < p.nout; o++) {
            const char *base = src + kv_ref_linear_offset(o, p.nk, p.ksize, p.kstride, -1) * es;
            const int64_t k = argmax_one(&p, base, alt);
            if (p.op == RED_ARGMAX) {
                ((int64_t *)dst)[o] = k;
            } else {
                const char *q = base + (red_row_offset(&p, k / rr.n) + (k % rr.n) * rr.stride) * es;
                memcpy(dst + o * es, q, (size_t)es);
            }
        }
    } else if (p.nk == 1 && p.kstride[0] == 1 && p.nred > 0) {
        if (!fold_columns(&p, alt, dst)) {
            kv_tensor_release(out);
            return kv_error(KV_ERR_OOM, "%s: no memory for %lld accumulators", kv_op_name(op), (long long)p.nout);
        }
    } else {
        for (int64_t o = 0; o < p.nout; o++)
            fold_one(&p, alt, src + kv_ref_linear_offset(o, p.nk, p.ksize, p.kstride, -1) * es, dst, o);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

kv_status kv_cpu_reduce_vec_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return red_run(op, stack, false);
}

kv_status kv_cpu_reduce_pairwise_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    return red_run(op, stack, true);
}
