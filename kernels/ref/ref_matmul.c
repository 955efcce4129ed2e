/* Reference matrix products: mm, bmm, addmm.
 *
 * Order and accumulation. out[i][j] = sum over k ascending (k = 0 first)
 * of a[i][k] * b[k][j], accumulated from 0 in f64 for f16/bf16/f32/f64
 * (the products of two f32 values are exact in f64; an f64 sum that comes
 * out Inf or NaN is recomputed so that it says what the exact sum is:
 * kv_ref_dot_f64_rescued in ref_shared.h), in a pair of doubles
 * with the schoolbook complex product for c64/c128, and in int64 wrapping
 * through uint64 for integral dtypes. The result is rounded once on store.
 *
 * addmm computes beta*self + alpha*acc in the same wide type, with beta and
 * alpha as doubles (not first rounded to the tensor dtype); when beta is 0,
 * self's values are not read at all, so NaN/Inf in self do not leak into
 * the result (PyTorch's rule), though self must still broadcast to [n, m].
 * alpha is applied even when it is 0 (0 * NaN stays NaN). An empty inner
 * dimension gives beta*self (mm: zeros).
 *
 * Errors. Wrong rank is KV_ERR_SHAPE (the argument is not a matrix; the
 * message gives its shape), not KV_ERR_DIM, which kvsuite keeps for dim
 * indices out of range. Mismatched dtypes are KV_ERR_DTYPE with PyTorch's
 * wording; bool is KV_ERR_DTYPE (PyTorch's CPU addmm has no bool kernel). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ref/ref.h"
#include "ref/ref_shared.h"
#include "ref/ref_kernels.h"

/* c10's TypeMeta names, which PyTorch uses in its mm dtype message. */
static const char *mm_type_meta_name(kv_dtype dt) {
    switch (dt) {
    case KV_BOOL: return "bool";
    case KV_U8: return "unsigned char";
    case KV_I8: return "signed char";
    case KV_I16: return "short int";
    case KV_I32: return "int";
    case KV_I64: return "long int";
    case KV_F16: return "c10::Half";
    case KV_BF16: return "c10::BFloat16";
    case KV_F32: return "float";
    case KV_F64: return "double";
    case KV_C64: return "c10::complex<float>";
    case KV_C128: return "c10::complex<double>";
    case KV_DTYPE_COUNT: break;
    }
    return "?";
}

static kv_status mm_check_tensor(const char *op, const char *arg, const kv_tensor *t, int ndim) {
    if (!t) return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': expected a tensor, got None", op, arg);
    kv_status st = kv_ref_check_cpu(op, arg, t);
    if (st != KV_OK) return st;
    if (t->ndim != ndim) {
        char buf[KV_REF_SHAPE_BUF];
        return kv_error(KV_ERR_SHAPE, "%s: argument '%s': expected a %d-D tensor, got a %d-D tensor of shape %s",
                        op, arg, ndim, t->ndim, kv_ref_format_shape(t->sizes, t->ndim, buf, sizeof buf));
    }
    return KV_OK;
}

static kv_status mm_check_dtypes(const char *op, const kv_tensor *a, const kv_tensor *b) {
    if (a->dtype != b->dtype)
        return kv_error(KV_ERR_DTYPE, "%s: argument 'mat2': expected m1 and m2 to have the same dtype, but got: %s != %s", op,
                        mm_type_meta_name(a->dtype), mm_type_meta_name(b->dtype));
    if (a->dtype == KV_BOOL)
        return kv_error(KV_ERR_DTYPE, "%s: argument 'self': dtype bool is not supported", op);
    return KV_OK;
}

static kv_status mm_alloc_failed(const char *op) {
    kv_status st = kv_last_error();
    return st != KV_OK ? st : kv_error(KV_ERR_OOM, "%s: could not allocate the result", op);
}

/* The wide value of one element and of the scalars. */
typedef struct mm_wide {
    double re, im;
    uint64_t u;
} mm_wide;

typedef enum mm_kind { MM_F64, MM_I64, MM_C128 } mm_kind;

static mm_kind mm_kind_of(kv_dtype dt) {
    if (kv_dtype_is_complex(dt)) return MM_C128;
    if (kv_dtype_is_floating(dt)) return MM_F64;
    return MM_I64;
}

static mm_wide mm_load(kv_dtype dt, mm_kind kind, const char *p) {
    mm_wide w = { 0.0, 0.0, 0 };
    switch (kind) {
    case MM_F64: w.re = kv_ref_load_f64(dt, p); break;
    case MM_I64: w.u = (uint64_t)kv_ref_load_i64(dt, p); break;
    case MM_C128: kv_ref_load_c128(dt, p, &w.re, &w.im); break;
    }
    return w;
}

static mm_wide mm_mul(mm_kind kind, mm_wide a, mm_wide b) {
    mm_wide r = { 0.0, 0.0, 0 };
    switch (kind) {
    case MM_F64: r.re = a.re * b.re; break;
    case MM_I64: r.u = a.u * b.u; break;
    case MM_C128:
        r.re = a.re * b.re - a.im * b.im;
        r.im = a.re * b.im + a.im * b.re;
        break;
    }
    return r;
}

static mm_wide mm_add(mm_wide a, mm_wide b) {
    return (mm_wide){ a.re + b.re, a.im + b.im, a.u + b.u };
}

static bool mm_is_zero(mm_kind kind, mm_wide a) {
    switch (kind) {
    case MM_F64: return a.re == 0.0;
    case MM_I64: return a.u == 0;
    case MM_C128: return a.re == 0.0 && a.im == 0.0;
    }
    return false;
}

static void mm_store(kv_dtype dt, mm_kind kind, char *p, mm_wide w) {
    switch (kind) {
    case MM_F64: kv_ref_store_f64(dt, p, w.re); return;
    case MM_I64: kv_ref_store_i64(dt, p, (int64_t)w.u); return;
    case MM_C128: kv_ref_store_c128(dt, p, w.re, w.im); return;
    }
}

/* A scalar in the wide type of dt; KV_ERR_INVALID_ARG where PyTorch would
 * refuse it (a float for an integral tensor, a complex for a real one). */
static kv_status mm_scalar(const char *op, const char *arg, kv_dtype dt, kv_scalar s, mm_wide *out) {
    const mm_kind kind = mm_kind_of(dt);
    *out = (mm_wide){ 0.0, 0.0, 0 };
    if (kind == MM_I64 && (s.kind == KV_SCALAR_DOUBLE || s.kind == KV_SCALAR_COMPLEX))
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument '%s': for integral input tensors, %s must not be a floating point number",
                        op, arg, arg);
    if (kind != MM_C128 && s.kind == KV_SCALAR_COMPLEX && s.v.c.im != 0.0)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument '%s': a complex value cannot be used with a real (%s) tensor", op, arg,
                        kv_dtype_name(dt));
    switch (kind) {
    case MM_F64: out->re = kv_scalar_to_double(s); break;
    case MM_I64: out->u = (uint64_t)kv_scalar_to_int(s); break;
    case MM_C128: kv_scalar_to_complex(s, &out->re, &out->im); break;
    }
    return KV_OK;
}

/* One [n, k] x [k, m] product into contiguous c. Strides in elements.
 * self (may be NULL) is read through its broadcast strides only when
 * use_self; alpha is applied only when scale. */
typedef struct mm_job {
    kv_dtype dt;
    int64_t n, k, m;
    const char *a;
    int64_t as0, as1;
    const char *b;
    int64_t bs0, bs1;
    const char *self;
    int64_t ss0, ss1;
    bool use_self, scale;
    mm_wide beta, alpha;
    char *c;
} mm_job;

/* An f64 dot product whose plain sum came out Inf or NaN, recomputed so
 * that it says what the exact sum is (kv_ref_dot_f64_rescued, shared with
 * the CPU variants' recomputation). */
static double mm_dot_f64_rescued(const mm_job *j, int64_t i, int64_t col) {
    return kv_ref_dot_f64_rescued((const double *)j->a + i * j->as0, j->as1, (const double *)j->b + col * j->bs1,
                                  j->bs0, j->k);
}

/* out[i][col] from its accumulated sum: the rescue, alpha, beta*self and
 * the one rounding on store. */
static void mm_finish(const mm_job *j, mm_kind kind, int64_t es, int64_t i, int64_t col, mm_wide acc) {
    if (kind == MM_F64 && j->dt == KV_F64 && !isfinite(acc.re)) acc.re = mm_dot_f64_rescued(j, i, col);
    if (j->scale) acc = mm_mul(kind, j->alpha, acc);
    if (j->use_self) {
        const mm_wide s = mm_load(j->dt, kind, j->self + (i * j->ss0 + col * j->ss1) * es);
        acc = mm_add(mm_mul(kind, j->beta, s), acc);
    }
    mm_store(j->dt, kind, j->c + (i * j->m + col) * es, acc);
}

/* The floating path with each operand element widened once, b's columns
 * and a's current row into double arrays, instead of a load through the
 * dtype switch for each of the 2nmk reads (mm_load and mm_run were a
 * fifth of `kvrun cases/`'s profile). The widening is exact and the sum
 * is the same products added in the same order (-ffp-contract=off), so
 * the bits are the loop's below. False when the arrays cannot be had. */
static bool mm_run_f64(const mm_job *j, int64_t es) {
    const int64_t k = j->k, m = j->m;
    if (k > 0 && m > (INT64_MAX / (int64_t)sizeof(double) - 1) / k - 1) return false;
    double *bt = malloc(sizeof(double) * (size_t)(k * m + k + 1));
    if (bt == NULL) return false;
    double *row = bt + k * m;
    for (int64_t col = 0; col < m; col++)
        for (int64_t p = 0; p < k; p++) bt[col * k + p] = kv_ref_load_f64(j->dt, j->b + (p * j->bs0 + col * j->bs1) * es);
    for (int64_t i = 0; i < j->n; i++) {
        for (int64_t p = 0; p < k; p++) row[p] = kv_ref_load_f64(j->dt, j->a + (i * j->as0 + p * j->as1) * es);
        for (int64_t col = 0; col < m; col++) {
            const double *bc = bt + col * k;
            double acc = 0.0;
            for (int64_t p = 0; p < k; p++) acc = acc + row[p] * bc[p];
            mm_finish(j, MM_F64, es, i, col, (mm_wide){ acc, 0.0, 0 });
        }
    }
    free(bt);
    return true;
}

static void mm_run(const mm_job *j) {
    const mm_kind kind = mm_kind_of(j->dt);
    const int64_t es = (int64_t)kv_dtype_size(j->dt);
    if (kind == MM_F64 && mm_run_f64(j, es)) return;
    for (int64_t i = 0; i < j->n; i++) {
        for (int64_t col = 0; col < j->m; col++) {
            mm_wide acc = { 0.0, 0.0, 0 };
            for (int64_t p = 0; p < j->k; p++) {
                const mm_wide x = mm_load(j->dt, kind, j->a + (i * j->as0 + p * j->as1) * es);
                const mm_wide y = mm_load(j->dt, kind, j->b + (p * j->bs0 + col * j->bs1) * es);
                acc = mm_add(acc, mm_mul(kind, x, y));
            }
            mm_finish(j, kind, es, i, col, acc);
        }
    }
}

static kv_status mm_check_inner(const char *op, const kv_tensor *a, const kv_tensor *b, int da, int db) {
    if (a->sizes[da] == b->sizes[db]) return KV_OK;
    char sa[KV_REF_SHAPE_BUF], sb[KV_REF_SHAPE_BUF];
    return kv_error(KV_ERR_SHAPE, "%s: argument 'mat2': mat1 and mat2 shapes cannot be multiplied (%s and %s)", op,
                    kv_ref_format_shape(a->sizes, a->ndim, sa, sizeof sa),
                    kv_ref_format_shape(b->sizes, b->ndim, sb, sizeof sb));
}

KV_REF_KERNEL(mm) {
    (void)op;
    (void)ks;
    const char *name = "mm";
    kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_status st = mm_check_tensor(name, "self", a, 2);
    if (st == KV_OK) st = mm_check_tensor(name, "mat2", b, 2);
    if (st == KV_OK) st = mm_check_dtypes(name, a, b);
    if (st == KV_OK) st = mm_check_inner(name, a, b, 1, 0);
    if (st != KV_OK) return st;
    const int64_t sizes[2] = { a->sizes[0], b->sizes[1] };
    kv_tensor *out = kv_ref_new_output(sizes, 2, a->dtype);
    if (!out) return mm_alloc_failed(name);
    const mm_job job = {
        .dt = a->dtype, .n = a->sizes[0], .k = a->sizes[1], .m = b->sizes[1],
        .a = kv_tensor_data(a), .as0 = a->strides[0], .as1 = a->strides[1],
        .b = kv_tensor_data(b), .bs0 = b->strides[0], .bs1 = b->strides[1],
        .c = kv_tensor_data(out),
    };
    mm_run(&job);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(bmm) {
    (void)op;
    (void)ks;
    const char *name = "bmm";
    kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_status st = mm_check_tensor(name, "self", a, 3);
    if (st == KV_OK) st = mm_check_tensor(name, "mat2", b, 3);
    if (st == KV_OK) st = mm_check_dtypes(name, a, b);
    if (st != KV_OK) return st;
    if (a->sizes[0] != b->sizes[0]) {
        char sa[KV_REF_SHAPE_BUF], sb[KV_REF_SHAPE_BUF];
        return kv_error(KV_ERR_SHAPE, "%s: argument 'mat2': batch1 and batch2 must have the same number of batches, got %s and %s",
                        name, kv_ref_format_shape(a->sizes, 3, sa, sizeof sa),
                        kv_ref_format_shape(b->sizes, 3, sb, sizeof sb));
    }
    st = mm_check_inner(name, a, b, 2, 1);
    if (st != KV_OK) return st;
    const int64_t sizes[3] = { a->sizes[0], a->sizes[1], b->sizes[2] };
    kv_tensor *out = kv_ref_new_output(sizes, 3, a->dtype);
    if (!out) return mm_alloc_failed(name);
    const int64_t es = (int64_t)kv_dtype_size(a->dtype);
    for (int64_t bi = 0; bi < sizes[0]; bi++) {
        const mm_job job = {
            .dt = a->dtype, .n = sizes[1], .k = a->sizes[2], .m = sizes[2],
            .a = (const char *)kv_tensor_data(a) + bi * a->strides[0] * es,
            .as0 = a->strides[1], .as1 = a->strides[2],
            .b = (const char *)kv_tensor_data(b) + bi * b->strides[0] * es,
            .bs0 = b->strides[1], .bs1 = b->strides[2],
            .c = (char *)kv_tensor_data(out) + bi * sizes[1] * sizes[2] * es,
        };
        mm_run(&job);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(addmm) {
    (void)op;
    (void)ks;
    const char *name = "addmm";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *a = kv_arg_tensor(stack, 1), *b = kv_arg_tensor(stack, 2);
    kv_status st = mm_check_tensor(name, "mat1", a, 2);
    if (st == KV_OK) st = mm_check_tensor(name, "mat2", b, 2);
    if (st == KV_OK && !self)
        st = kv_error(KV_ERR_INVALID_ARG, "%s: argument 'self': expected a tensor, got None", name);
    if (st == KV_OK) st = kv_ref_check_cpu(name, "self", self);
    if (st == KV_OK) st = mm_check_dtypes(name, a, b);
    if (st == KV_OK && self->dtype != a->dtype)
        st = kv_error(KV_ERR_DTYPE, "%s: argument 'self': self and mat2 must have the same dtype, but got %s and %s", name,
                      kv_dtype_name(self->dtype), kv_dtype_name(a->dtype));
    if (st == KV_OK) st = mm_check_inner(name, a, b, 1, 0);
    if (st != KV_OK) return st;
    const int64_t n = a->sizes[0], m = b->sizes[1];
    /* self broadcasts to [n, m] (numpy rules, at most 2 dims). */
    int64_t ss[2];
    if (!kv_ref_addmm_self_strides(self, n, m, ss)) {
        char s1[KV_REF_SHAPE_BUF], s2[KV_REF_SHAPE_BUF];
        const int64_t want[2] = { n, m };
        return kv_error(KV_ERR_SHAPE, "%s: argument 'self': shape %s does not broadcast to %s", name,
                        kv_ref_format_shape(self->sizes, self->ndim, s1, sizeof s1),
                        kv_ref_format_shape(want, 2, s2, sizeof s2));
    }
    mm_wide beta, alpha;
    st = mm_scalar(name, "beta", a->dtype, kv_arg_scalar(stack, 3), &beta);
    if (st == KV_OK) st = mm_scalar(name, "alpha", a->dtype, kv_arg_scalar(stack, 4), &alpha);
    if (st != KV_OK) return st;
    const int64_t sizes[2] = { n, m };
    kv_tensor *out = kv_ref_new_output(sizes, 2, a->dtype);
    if (!out) return mm_alloc_failed(name);
    const mm_job job = {
        .dt = a->dtype, .n = n, .k = a->sizes[1], .m = m,
        .a = kv_tensor_data(a), .as0 = a->strides[0], .as1 = a->strides[1],
        .b = kv_tensor_data(b), .bs0 = b->strides[0], .bs1 = b->strides[1],
        .self = kv_tensor_data(self), .ss0 = ss[0], .ss1 = ss[1],
        .use_self = !mm_is_zero(mm_kind_of(a->dtype), beta), .scale = true,
        .beta = beta, .alpha = alpha,
        .c = kv_tensor_data(out),
    };
    mm_run(&job);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
