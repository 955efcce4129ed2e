/* Reference reductions: sum.dim_IntList, mean.dim, amax, argmax, prod.dim_int.
 *
 * Order. For every output element the reduced elements are visited
 * row-major over the reduced dims (in the input's dim order, the last
 * reduced dim fastest), whatever the input's strides. That order is the
 * contract the optimized variants are measured against.
 *
 * Accumulation. sum/mean/prod first convert each element to the result
 * dtype (PyTorch's self.to(dtype) semantics for the dtype argument), then
 * accumulate in the result dtype's wide type: f64 for f16/bf16/f32/f64, a
 * pair of doubles for c64/c128, int64 wrapping through uint64 for integral
 * and bool. The accumulator is rounded once, on store. So a f32 sum is the
 * f32 rounding of the f64 sum of its elements, not the result of a chain of
 * f32 additions; mean is that f64 (or complex) sum divided by the element
 * count in f64, and an empty mean is 0/0 = NaN.
 *
 * amax/argmax compare without converting (int64 for integral and bool,
 * double for floating): a later element wins only if it is strictly
 * greater, so ties keep the first; NaN is greater than everything and the
 * first NaN wins. amax copies the winning element's bytes, so NaN payloads
 * and signed zeros come through untouched. argmax rejects bool, as
 * PyTorch's CPU kernel does ("argmax_cpu" is not implemented for 'Bool'). */
#include "ref/ref.h"
#include "ref/ref_shared.h"
#include "ref/ref_kernels.h"

#include <math.h>
#include <string.h>

/* ---- geometry: kept dims (one output element each) vs reduced dims ---- */

typedef struct red_geom {
    int nk, nr;
    int64_t ksize[KV_MAX_DIMS], kstride[KV_MAX_DIMS]; /* strides in elements */
    int64_t rsize[KV_MAX_DIMS], rstride[KV_MAX_DIMS];
    int64_t nout, nred;
} red_geom;

static void red_geom_init(red_geom *g, const kv_tensor *t, const bool *reduce) {
    g->nk = g->nr = 0;
    g->nout = g->nred = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (reduce[d]) {
            g->rsize[g->nr] = t->sizes[d];
            g->rstride[g->nr++] = t->strides[d];
            g->nred *= t->sizes[d];
        } else {
            g->ksize[g->nk] = t->sizes[d];
            g->kstride[g->nk++] = t->strides[d];
            g->nout *= t->sizes[d];
        }
    }
}

/* Sizes of the result: kept dims, plus size-1 reduced dims with keepdim. */
static int red_out_shape(const kv_tensor *t, const bool *reduce, bool keepdim, int64_t *sizes) {
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (!reduce[d]) sizes[n++] = t->sizes[d];
        else if (keepdim) sizes[n++] = 1;
    }
    return n;
}

/* Reads an int[1]? / int[1] argument into a mask (ref_shared.h), with the
 * errors worded here. */
static kv_status red_parse_dims(const char *op, const kv_stack *s, int slot, const kv_tensor *t,
                                bool *reduce) {
    const kv_ivalue *v = &s->slots[slot];
    bool given = false;
    int64_t bad = 0;
    switch (kv_ref_dims_mask(v, t->ndim, reduce, &given, &bad)) {
    case KV_REF_DIMS_OK: return KV_OK;
    case KV_REF_DIMS_BAD_TAG:
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'dim': expected int[] or None, got %s", op,
                        kv_ivalue_tag_name(v->tag));
    case KV_REF_DIMS_OUT_OF_RANGE:
        /* kv_wrap_dim words the range error (and always fails here). */
        if (kv_wrap_dim(bad, t->ndim, op, "dim") < 0) return kv_last_error();
        return kv_error(KV_ERR_DIM, "%s: argument 'dim': dimension %lld out of range", op, (long long)bad);
    case KV_REF_DIMS_REPEATED:
        return kv_error(KV_ERR_DIM, "%s: argument 'dim': dim %d appears multiple times in the list of dims",
                        op, (int)bad);
    }
    return KV_OK;
}

static kv_status red_alloc_failed(const char *op) {
    kv_status st = kv_last_error();
    return st != KV_OK ? st : kv_error(KV_ERR_OOM, "%s: could not allocate the result", op);
}

/* ---- wide accumulators ---- */

typedef enum red_acc_kind { RED_ACC_F64, RED_ACC_I64, RED_ACC_C128 } red_acc_kind;

typedef struct red_wide {
    double re, im;
    uint64_t u; /* integral values, wrapping */
} red_wide;

static red_acc_kind red_acc_of(kv_dtype dt) {
    if (kv_dtype_is_complex(dt)) return RED_ACC_C128;
    if (kv_dtype_is_floating(dt)) return RED_ACC_F64;
    return RED_ACC_I64;
}

/* Loads one element converted to `to` first, then widened. */
static red_wide red_load_as(kv_dtype to, kv_dtype from, const void *p) {
    union { unsigned char b[16]; double d[2]; int64_t i[2]; } tmp;
    if (from != to) {
        kv_ref_convert(to, tmp.b, from, p);
        p = tmp.b;
    }
    red_wide w = { 0.0, 0.0, 0 };
    switch (red_acc_of(to)) {
    case RED_ACC_F64: w.re = kv_ref_load_f64(to, p); break;
    case RED_ACC_I64: w.u = (uint64_t)kv_ref_load_i64(to, p); break;
    case RED_ACC_C128: kv_ref_load_c128(to, p, &w.re, &w.im); break;
    }
    return w;
}

static void red_store(kv_dtype dt, void *p, red_wide w) {
    switch (red_acc_of(dt)) {
    case RED_ACC_F64: kv_ref_store_f64(dt, p, w.re); return;
    /* A bool result is "nonzero", not the low bit of the count. */
    case RED_ACC_I64: kv_ref_store_i64(dt, p, dt == KV_BOOL ? (int64_t)(w.u != 0) : (int64_t)w.u); return;
    case RED_ACC_C128: kv_ref_store_c128(dt, p, w.re, w.im); return;
    }
}

typedef enum red_fold { RED_SUM, RED_PROD, RED_MEAN } red_fold;

/* Folds every output element's reduced elements into `out` (contiguous,
 * nout elements of out->dtype). */
static void red_fold_all(const kv_tensor *self, const red_geom *g, kv_tensor *out, red_fold fold) {
    const kv_dtype in_dt = self->dtype, out_dt = out->dtype;
    const size_t in_es = kv_dtype_size(in_dt), out_es = kv_dtype_size(out_dt);
    const red_acc_kind kind = red_acc_of(out_dt);
    const char *src = kv_tensor_data(self);
    char *dst = kv_tensor_data(out);
    for (int64_t o = 0; o < g->nout; o++) {
        const int64_t base = kv_ref_linear_offset(o, g->nk, g->ksize, g->kstride, -1);
        red_wide acc = { 0.0, 0.0, 0 };
        if (fold == RED_PROD) {
            acc.re = 1.0;
            acc.u = 1;
        }
        for (int64_t r = 0; r < g->nred; r++) {
            const int64_t off = base + kv_ref_linear_offset(r, g->nr, g->rsize, g->rstride, -1);
            const red_wide x = red_load_as(out_dt, in_dt, src + off * (int64_t)in_es);
            if (fold == RED_PROD) {
                switch (kind) {
                case RED_ACC_F64: acc.re = acc.re * x.re; break;
                case RED_ACC_I64: acc.u = acc.u * x.u; break;
                case RED_ACC_C128: {
                    const double re = acc.re * x.re - acc.im * x.im;
                    const double im = acc.re * x.im + acc.im * x.re;
                    acc.re = re;
                    acc.im = im;
                    break;
                }
                }
            } else {
                acc.re += x.re;
                acc.im += x.im;
                acc.u += x.u;
            }
        }
        if (fold == RED_MEAN) {
            const double count = (double)g->nred;
            acc.re = acc.re / count;
            acc.im = acc.im / count;
        }
        red_store(out_dt, dst + o * (int64_t)out_es, acc);
    }
}

/* sum, mean and prod share everything after their argument checks. */
static kv_status red_fold_kernel(const char *op, kv_stack *stack, const kv_tensor *self,
                                 const bool *reduce, bool keepdim, kv_dtype out_dt, red_fold fold) {
    red_geom g;
    red_geom_init(&g, self, reduce);
    int64_t sizes[KV_MAX_DIMS];
    const int nd = red_out_shape(self, reduce, keepdim, sizes);
    kv_tensor *out = kv_ref_new_output(sizes, nd, out_dt);
    if (!out) return red_alloc_failed(op);
    red_fold_all(self, &g, out, fold);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

static kv_dtype red_default_int_to_long(kv_dtype dt) {
    return kv_dtype_is_integral(dt, true) ? KV_I64 : dt;
}

static kv_status red_check_self(const char *op, const kv_tensor *self) {
    if (!self) return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'self': expected a tensor, got None", op);
    return kv_ref_check_cpu(op, "self", self);
}

KV_REF_KERNEL(sum) {
    (void)op;
    (void)ks;
    const char *name = "sum.dim_IntList";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = red_check_self(name, self);
    if (st != KV_OK) return st;
    bool reduce[KV_MAX_DIMS];
    st = red_parse_dims(name, stack, 1, self, reduce);
    if (st != KV_OK) return st;
    const kv_dtype out_dt = kv_arg_is_none(stack, 3) ? red_default_int_to_long(self->dtype)
                                                     : kv_arg_dtype(stack, 3);
    return red_fold_kernel(name, stack, self, reduce, kv_arg_bool(stack, 2), out_dt, RED_SUM);
}

KV_REF_KERNEL(mean) {
    (void)op;
    (void)ks;
    const char *name = "mean.dim";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = red_check_self(name, self);
    if (st != KV_OK) return st;
    kv_dtype out_dt = self->dtype;
    if (!kv_arg_is_none(stack, 3)) {
        out_dt = kv_arg_dtype(stack, 3);
        if (!kv_dtype_is_floating(out_dt) && !kv_dtype_is_complex(out_dt))
            return kv_error(KV_ERR_DTYPE,
                            "%s: argument 'dtype': could not infer output dtype. Optional dtype must be "
                            "either a floating point or complex dtype. Got: %s",
                            name, kv_dtype_torch_name(out_dt));
    } else if (!kv_dtype_is_floating(out_dt) && !kv_dtype_is_complex(out_dt)) {
        return kv_error(KV_ERR_DTYPE,
                        "%s: argument 'self': could not infer output dtype. Input dtype must be either "
                        "a floating point or complex dtype. Got: %s",
                        name, kv_dtype_torch_name(out_dt));
    }
    bool reduce[KV_MAX_DIMS];
    st = red_parse_dims(name, stack, 1, self, reduce);
    if (st != KV_OK) return st;
    return red_fold_kernel(name, stack, self, reduce, kv_arg_bool(stack, 2), out_dt, RED_MEAN);
}

KV_REF_KERNEL(prod) {
    (void)op;
    (void)ks;
    const char *name = "prod.dim_int";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = red_check_self(name, self);
    if (st != KV_OK) return st;
    const int d = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, name, "dim");
    if (d < 0) return kv_last_error();
    bool reduce[KV_MAX_DIMS] = { false };
    if (d < self->ndim) reduce[d] = true;
    const kv_dtype out_dt = kv_arg_is_none(stack, 3) ? red_default_int_to_long(self->dtype)
                                                     : kv_arg_dtype(stack, 3);
    return red_fold_kernel(name, stack, self, reduce, kv_arg_bool(stack, 2), out_dt, RED_PROD);
}

/* ---- amax / argmax ---- */

/* Whether element b beats the current best a (see the top of the file). */
static bool red_greater(kv_dtype dt, const void *b, const void *a) {
    if (kv_dtype_is_floating(dt)) {
        const double x = kv_ref_load_f64(dt, b), best = kv_ref_load_f64(dt, a);
        if (isnan(best)) return false;
        return isnan(x) || x > best;
    }
    return kv_ref_load_i64(dt, b) > kv_ref_load_i64(dt, a);
}

/* The reduced-position index (row-major over the reduced dims) of the max
 * of output element o. Requires g->nred > 0. */
static int64_t red_argmax_one(const kv_tensor *self, const red_geom *g, int64_t o, const char **best_p) {
    const int64_t es = (int64_t)kv_dtype_size(self->dtype);
    const char *src = kv_tensor_data(self);
    const int64_t base = kv_ref_linear_offset(o, g->nk, g->ksize, g->kstride, -1);
    const char *best = src + base * es;
    int64_t best_r = 0;
    for (int64_t r = 1; r < g->nred; r++) {
        const char *p = src + (base + kv_ref_linear_offset(r, g->nr, g->rsize, g->rstride, -1)) * es;
        if (red_greater(self->dtype, p, best)) {
            best = p;
            best_r = r;
        }
    }
    *best_p = best;
    return best_r;
}

static kv_status red_check_ordered(const char *op, const kv_tensor *self) {
    if (kv_dtype_is_complex(self->dtype))
        return kv_error(KV_ERR_DTYPE, "%s: argument 'self': dtype %s is not supported (complex values are not ordered)",
                        op, kv_dtype_name(self->dtype));
    return KV_OK;
}

/* PyTorch refuses max-like reductions with nothing to reduce; name the
 * culprit the way it does. */
static kv_status red_check_nonempty(const char *op, const kv_tensor *self, const bool *reduce,
                                    const red_geom *g, bool dim_given) {
    if (g->nred > 0) return KV_OK;
    if (!dim_given)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'self': Expected reduction dim to be specified for input.numel() == 0",
                        op);
    for (int d = 0; d < self->ndim; d++)
        if (reduce[d] && self->sizes[d] == 0)
            return kv_error(KV_ERR_INVALID_ARG,
                            "%s: argument 'dim': Expected reduction dim %d to have non-zero size", op, d);
    return kv_error(KV_ERR_INTERNAL, "%s: empty reduction without a zero-size dim", op);
}

KV_REF_KERNEL(amax) {
    (void)op;
    (void)ks;
    const char *name = "amax";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = red_check_self(name, self);
    if (st == KV_OK) st = red_check_ordered(name, self);
    if (st != KV_OK) return st;
    bool reduce[KV_MAX_DIMS];
    st = red_parse_dims(name, stack, 1, self, reduce);
    if (st != KV_OK) return st;
    red_geom g;
    red_geom_init(&g, self, reduce);
    const bool dim_given = stack->slots[1].tag == KV_IV_INT ||
                           (stack->slots[1].tag == KV_IV_INT_LIST && stack->slots[1].v.ints.n > 0);
    st = red_check_nonempty(name, self, reduce, &g, dim_given);
    if (st != KV_OK) return st;
    int64_t sizes[KV_MAX_DIMS];
    const int nd = red_out_shape(self, reduce, kv_arg_bool(stack, 2), sizes);
    kv_tensor *out = kv_ref_new_output(sizes, nd, self->dtype);
    if (!out) return red_alloc_failed(name);
    const size_t es = kv_dtype_size(self->dtype);
    char *dst = kv_tensor_data(out);
    for (int64_t o = 0; o < g.nout; o++) {
        const char *best;
        (void)red_argmax_one(self, &g, o, &best);
        memcpy(dst + o * (int64_t)es, best, es);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(argmax) {
    (void)op;
    (void)ks;
    const char *name = "argmax";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = red_check_self(name, self);
    if (st == KV_OK) st = red_check_ordered(name, self);
    if (st == KV_OK && self->dtype == KV_BOOL)
        st = kv_error(KV_ERR_DTYPE, "%s: argument 'self': dtype bool is not supported", name);
    if (st != KV_OK) return st;
    const bool dim_given = !kv_arg_is_none(stack, 1);
    const bool keepdim = kv_arg_bool(stack, 2);
    bool reduce[KV_MAX_DIMS];
    for (int d = 0; d < KV_MAX_DIMS; d++) reduce[d] = !dim_given;
    if (dim_given) {
        const int d = kv_wrap_dim(kv_arg_int(stack, 1), self->ndim, name, "dim");
        if (d < 0) return kv_last_error();
        if (d < self->ndim) reduce[d] = true;
    }
    red_geom g;
    red_geom_init(&g, self, reduce);
    st = red_check_nonempty(name, self, reduce, &g, dim_given);
    if (st != KV_OK) return st;
    int64_t sizes[KV_MAX_DIMS];
    /* dim=None flattens: a 0-dim result, or all ones with keepdim. */
    const int nd = red_out_shape(self, reduce, keepdim, sizes);
    kv_tensor *out = kv_ref_new_output(sizes, nd, KV_I64);
    if (!out) return red_alloc_failed(name);
    int64_t *dst = kv_tensor_data(out);
    for (int64_t o = 0; o < g.nout; o++) {
        const char *best;
        dst[o] = red_argmax_one(self, &g, o, &best);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
