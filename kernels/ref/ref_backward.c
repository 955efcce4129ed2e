/* Reference kernels of the backward ops autograd cannot compose from
 * other ops: gelu_backward (needs erf), and the scatter-adds behind
 * as_strided, unfold, index_select and embedding.
 *
 * Accumulation. The scatter-adds sum into a zeroed f64 buffer (a pair of
 * doubles per element for complex gradients) laid out like the result,
 * visiting the gradient's elements in row-major order (last dim fastest,
 * whatever its strides), and round each sum once on store into the
 * gradient's dtype. gelu_backward computes in f64 and rounds once.
 *
 * Formulas (gelu, PyTorch's gelu_backward):
 *   'none': grad * (Phi(x) + x * phi(x)), Phi(x) = (1 + erf(x / sqrt 2)) / 2,
 *           phi(x) = exp(-x^2 / 2) / sqrt(2 pi);
 *   'tanh': with k = sqrt(2 / pi), u = k (x + 0.044715 x^3), t = tanh(u):
 *           grad * (0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 * 0.044715 x^2)). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "ref/ref_kernels.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define GRAD_DTYPES (KV_DTYPES_FLOATING | KV_DTYPES_COMPLEX)
#define INDEX_DTYPES ((1u << KV_I32) | (1u << KV_I64))
/* The largest storage span as_strided_backward accumulates over. */
#define MAX_SPAN ((int64_t)1 << 28)

/* ---- the accumulation buffer ---- */

typedef struct acc_buf {
    double *v;     /* 2 per element: re, im */
    int64_t n;
} acc_buf;

static kv_status acc_init(acc_buf *a, int64_t n, const char *op) {
    a->n = n;
    a->v = calloc((size_t)(n > 0 ? 2 * n : 2), sizeof *a->v);
    if (a->v == NULL) return kv_error(KV_ERR_OOM, "%s: cannot allocate a %" PRId64 "-element buffer", op, n);
    return KV_OK;
}

static void acc_add(acc_buf *a, int64_t i, kv_dtype dt, const void *p, double scale) {
    double re, im;
    kv_ref_load_c128(dt, p, &re, &im);
    a->v[2 * i] += re * scale;
    a->v[2 * i + 1] += im * scale;
}

/* A new contiguous tensor of `sizes` holding the buffer in dtype dt. */
static kv_tensor *acc_store(const acc_buf *a, const int64_t *sizes, int ndim, kv_dtype dt) {
    kv_tensor *out = kv_ref_new_output(sizes, ndim, dt);
    if (out == NULL) return NULL;
    char *p = kv_tensor_data(out);
    const size_t isz = kv_dtype_size(dt);
    for (int64_t i = 0; i < a->n; i++) kv_ref_store_c128(dt, p + (size_t)i * isz, a->v[2 * i], a->v[2 * i + 1]);
    return out;
}

static kv_status acc_return(kv_stack *stack, acc_buf *a, const int64_t *sizes, int ndim, kv_dtype dt) {
    kv_tensor *out = acc_store(a, sizes, ndim, dt);
    free(a->v);
    if (out == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

/* ---- shared argument checks ---- */

static kv_status check_grad(const char *op, const char *arg, const kv_tensor *g) {
    kv_status st = kv_ref_check_cpu(op, arg, g);
    if (st == KV_OK) st = kv_ref_check_dtype(op, arg, g->dtype, GRAD_DTYPES);
    return st;
}

/* A size list: at most KV_MAX_DIMS entries, none negative. */
static kv_status check_sizes(const char *op, const char *arg, kv_int_list s) {
    if (s.n > KV_MAX_DIMS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': %d dims, at most %d are supported", op, arg, s.n,
                        KV_MAX_DIMS);
    for (int d = 0; d < s.n; d++)
        if (s.items[d] < 0)
            return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument '%s': negative size %" PRId64 " at dim %d", op, arg,
                            s.items[d], d);
    return KV_OK;
}

static kv_status check_grad_shape(const char *op, const kv_tensor *g, const int64_t *want, int nwant) {
    bool same = g->ndim == nwant;
    for (int d = 0; same && d < nwant; d++) same = g->sizes[d] == want[d];
    if (same) return KV_OK;
    char a[KV_REF_SHAPE_BUF], b[KV_REF_SHAPE_BUF];
    return kv_error(KV_ERR_SHAPE, "%s: argument 'grad': expected shape %s, got %s", op,
                    kv_ref_format_shape(want, nwant, b, sizeof b), kv_ref_format_shape(g->sizes, g->ndim, a, sizeof a));
}

static int64_t numel_of(const int64_t *sizes, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= sizes[d];
    return n;
}

/* Row-major flat index of a multi-index in `sizes`. */
static int64_t flat_index(const int64_t *idx, const int64_t *sizes, int ndim) {
    int64_t f = 0;
    for (int d = 0; d < ndim; d++) f = f * sizes[d] + idx[d];
    return f;
}

/* ---- gelu_backward ---- */

static kv_ref_val gelu_bw_none(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    const double g = x[0].re, v = x[1].re;
    const double cdf = 0.5 * (1.0 + erf(v / sqrt(2.0)));
    const double pdf = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
    return kv_ref_val_real(g * (cdf + v * pdf));
}

static kv_ref_val gelu_bw_tanh(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    const double g = x[0].re, v = x[1].re;
    const double k = sqrt(2.0 / M_PI), c = 0.044715;
    const double t = tanh(k * (v + c * v * v * v));
    const double dinner = k * (1.0 + 3.0 * c * v * v);
    return kv_ref_val_real(g * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * dinner));
}

static const kv_ref_ewise_fns fns_gelu_bw_none = { NULL, gelu_bw_none, NULL };
static const kv_ref_ewise_fns fns_gelu_bw_tanh = { NULL, gelu_bw_tanh, NULL };

KV_REF_KERNEL(gelu_backward) {
    (void)op;
    (void)ks;
    static const char *const name = "gelu_backward";
    kv_tensor *g = kv_arg_tensor(stack, 0), *x = kv_arg_tensor(stack, 1);
    const char *approx = kv_arg_str(stack, 2);
    kv_status st;
    if ((st = kv_ref_check_cpu(name, "grad_output", g)) != KV_OK) return st;
    if ((st = kv_ref_check_cpu(name, "self", x)) != KV_OK) return st;
    if ((st = kv_ref_check_dtype(name, "grad_output", g->dtype, KV_DTYPES_FLOATING)) != KV_OK) return st;
    if ((st = kv_ref_check_dtype(name, "self", x->dtype, KV_DTYPES_FLOATING)) != KV_OK) return st;
    const kv_ref_ewise_fns *fns = NULL;
    if (strcmp(approx, "none") == 0) fns = &fns_gelu_bw_none;
    else if (strcmp(approx, "tanh") == 0) fns = &fns_gelu_bw_tanh;
    else
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'approximate': approximate argument must be either none or tanh (got '%s')",
                        name, approx);
    kv_tensor *ins[2] = { g, x };
    static const char *const names[2] = { "grad_output", "self" };
    int64_t sizes[KV_MAX_DIMS];
    int ndim;
    if ((st = kv_ref_broadcast_shape(name, ins, names, 2, sizes, &ndim)) != KV_OK) return st;
    const kv_tensor *cins[2] = { g, x };
    const kv_dtype dt = kv_result_type(cins, 2, NULL, 0);
    kv_tensor *out = kv_ref_new_output(sizes, ndim, dt);
    if (out == NULL) return kv_last_error();
    st = kv_ref_ewise_run(name, fns, NULL, dt, out, ins, 2);
    if (st != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

/* ---- as_strided_backward ---- */

/* Storage position of the element at multi-index idx. */
static int64_t position(const int64_t *idx, const int64_t *strides, int ndim, int64_t offset) {
    int64_t p = offset;
    for (int d = 0; d < ndim; d++) p += idx[d] * strides[d];
    return p;
}

/* The last storage position a geometry reaches (numel > 0), or an error
 * when it overflows. */
static kv_status last_position(const char *op, const char *arg, kv_int_list sz, kv_int_list st, int64_t offset,
                               int64_t *out) {
    int64_t p = offset;
    for (int d = 0; d < sz.n; d++) {
        int64_t span;
        if (__builtin_mul_overflow(sz.items[d] - 1, st.items[d], &span) || __builtin_add_overflow(p, span, &p))
            return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': the storage extent overflows int64", op, arg);
    }
    *out = p;
    return KV_OK;
}

static kv_status check_geometry(const char *op, const char *size_arg, kv_int_list sz, const char *stride_arg,
                                kv_int_list st, const char *offset_arg, int64_t offset) {
    kv_status s = check_sizes(op, size_arg, sz);
    if (s != KV_OK) return s;
    if (st.n != sz.n)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': %d strides for %d sizes", op, stride_arg, st.n, sz.n);
    for (int d = 0; d < st.n; d++)
        if (st.items[d] < 0)
            return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': negative stride %" PRId64 " at dim %d", op,
                            stride_arg, st.items[d], d);
    if (offset < 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': negative storage offset %" PRId64, op, offset_arg,
                        offset);
    return KV_OK;
}

/* Visits every multi-index of sizes in row-major order; fn gets each. */
static bool next_index(int64_t *idx, const int64_t *sizes, int ndim) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

KV_REF_KERNEL(as_strided_backward) {
    (void)op;
    (void)ks;
    static const char *const name = "as_strided_backward";
    kv_tensor *g = kv_arg_tensor(stack, 0);
    kv_int_list isz = kv_arg_ints(stack, 1), ist = kv_arg_ints(stack, 2);
    const int64_t ioff = kv_arg_int(stack, 3);
    kv_int_list osz = kv_arg_ints(stack, 4), ost = kv_arg_ints(stack, 5);
    const int64_t ooff = kv_arg_int(stack, 6);
    kv_status st;
    if ((st = check_grad(name, "grad", g)) != KV_OK) return st;
    if ((st = check_geometry(name, "input_size", isz, "input_stride", ist, "input_storage_offset", ioff)) != KV_OK)
        return st;
    if ((st = check_geometry(name, "size", osz, "stride", ost, "storage_offset", ooff)) != KV_OK) return st;
    if ((st = check_grad_shape(name, g, osz.items, osz.n)) != KV_OK) return st;
    const int64_t in_n = numel_of(isz.items, isz.n), out_n = numel_of(osz.items, osz.n);
    acc_buf res;
    if ((st = acc_init(&res, in_n, name)) != KV_OK) return st;
    if (in_n == 0 || out_n == 0) return acc_return(stack, &res, isz.items, isz.n, g->dtype);

    int64_t ilast = 0, olast = 0;
    if ((st = last_position(name, "input_stride", isz, ist, ioff, &ilast)) != KV_OK ||
        (st = last_position(name, "stride", osz, ost, ooff, &olast)) != KV_OK) {
        free(res.v);
        return st;
    }
    const int64_t lo = ioff < ooff ? ioff : ooff, hi = ilast > olast ? ilast : olast;
    if (hi - lo >= MAX_SPAN) {
        free(res.v);
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'stride': the geometries span %" PRId64 " storage elements, more than the %" PRId64
                        " supported",
                        name, hi - lo + 1, MAX_SPAN);
    }
    acc_buf by_pos;
    int64_t *count = calloc((size_t)(hi - lo + 1), sizeof *count);
    if (count == NULL || acc_init(&by_pos, hi - lo + 1, name) != KV_OK) {
        free(count);
        free(res.v);
        return count ? kv_last_error() : kv_error(KV_ERR_OOM, "%s: out of host memory", name);
    }
    /* Each gradient element lands on the storage position it was read from. */
    kv_ref_iter it;
    kv_tensor *ops[1] = { g };
    if ((st = kv_ref_iter_init(&it, g->sizes, g->ndim, ops, 1)) == KV_OK)
        while (kv_ref_iter_next(&it))
            acc_add(&by_pos, position(it.index, ost.items, osz.n, ooff) - lo, g->dtype, it.ptr[0], 1.0);
    /* An input position held by several input elements (an expanded
     * input) shares its gradient among them, as PyTorch does. */
    int64_t idx[KV_MAX_DIMS] = { 0 };
    if (st == KV_OK) {
        do count[position(idx, ist.items, isz.n, ioff) - lo]++;
        while (next_index(idx, isz.items, isz.n));
        memset(idx, 0, sizeof idx);
        int64_t i = 0;
        do {
            const int64_t p = position(idx, ist.items, isz.n, ioff) - lo;
            res.v[2 * i] = by_pos.v[2 * p] / (double)count[p];
            res.v[2 * i + 1] = by_pos.v[2 * p + 1] / (double)count[p];
            i++;
        } while (next_index(idx, isz.items, isz.n));
    }
    free(count);
    free(by_pos.v);
    if (st != KV_OK) {
        free(res.v);
        return st;
    }
    return acc_return(stack, &res, isz.items, isz.n, g->dtype);
}

/* ---- unfold_backward ---- */

KV_REF_KERNEL(unfold_backward) {
    (void)op;
    (void)ks;
    static const char *const name = "unfold_backward";
    kv_tensor *g = kv_arg_tensor(stack, 0);
    kv_int_list in = kv_arg_ints(stack, 1);
    const int64_t size = kv_arg_int(stack, 3), step = kv_arg_int(stack, 4);
    kv_status st;
    if ((st = check_grad(name, "grad_in", g)) != KV_OK) return st;
    if ((st = check_sizes(name, "input_sizes", in)) != KV_OK) return st;
    if (in.n + 1 > KV_MAX_DIMS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'input_sizes': %d dims leave no room for the window dim",
                        name, in.n);
    const int dim = kv_wrap_dim(kv_arg_int(stack, 2), in.n, name, "dim");
    if (dim < 0) return kv_last_error();
    const int64_t len = in.n == 0 ? 1 : in.items[dim];
    if (size < 0 || size > len || step <= 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'size': size %" PRId64 " and step %" PRId64
                        " do not unfold a dim of size %" PRId64, name, size, step, len);
    int64_t want[KV_MAX_DIMS];
    for (int d = 0; d < in.n; d++) want[d] = in.items[d];
    if (in.n > 0) want[dim] = (len - size) / step + 1;
    want[in.n] = size;
    if ((st = check_grad_shape(name, g, want, in.n + 1)) != KV_OK) return st;
    acc_buf res;
    if ((st = acc_init(&res, numel_of(in.items, in.n), name)) != KV_OK) return st;
    kv_ref_iter it;
    kv_tensor *ops[1] = { g };
    if ((st = kv_ref_iter_init(&it, g->sizes, g->ndim, ops, 1)) == KV_OK) {
        while (kv_ref_iter_next(&it)) {
            int64_t src[KV_MAX_DIMS];
            for (int d = 0; d < in.n; d++) src[d] = it.index[d];
            if (in.n > 0) src[dim] = it.index[dim] * step + it.index[in.n];
            acc_add(&res, flat_index(src, in.items, in.n), g->dtype, it.ptr[0], 1.0);
        }
    }
    if (st != KV_OK) {
        free(res.v);
        return st;
    }
    return acc_return(stack, &res, in.items, in.n, g->dtype);
}

/* ---- index_select_backward and embedding_dense_backward ---- */

/* Reads every index (row-major) into a malloc'd array, checking each is
 * in [0, limit) unless it equals `skip` (has_skip). */
static kv_status read_index(const char *op, const char *arg, kv_tensor *index, int64_t limit, bool has_skip,
                            int64_t skip, int64_t **out) {
    kv_status st = kv_ref_check_cpu(op, arg, index);
    if (st == KV_OK) st = kv_ref_check_dtype(op, arg, index->dtype, INDEX_DTYPES);
    if (st != KV_OK) return st;
    const int64_t n = kv_tensor_numel(index);
    int64_t *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (v == NULL) return kv_error(KV_ERR_OOM, "%s: argument '%s': out of host memory", op, arg);
    kv_ref_iter it;
    kv_tensor *ops[1] = { index };
    if ((st = kv_ref_iter_init(&it, index->sizes, index->ndim, ops, 1)) != KV_OK) {
        free(v);
        return st;
    }
    int64_t k = 0;
    while (kv_ref_iter_next(&it)) {
        const int64_t x = kv_ref_load_i64(index->dtype, it.ptr[0]);
        if ((x < 0 || x >= limit) && !(has_skip && x == skip)) {
            free(v);
            return kv_error(KV_ERR_INDEX, "%s: argument '%s': index %" PRId64 " is out of bounds for size %" PRId64,
                            op, arg, x, limit);
        }
        v[k++] = x;
    }
    *out = v;
    return KV_OK;
}

KV_REF_KERNEL(index_select_backward) {
    (void)op;
    (void)ks;
    static const char *const name = "index_select_backward";
    kv_tensor *g = kv_arg_tensor(stack, 0), *index = kv_arg_tensor(stack, 3);
    kv_int_list in = kv_arg_ints(stack, 1);
    kv_status st;
    if ((st = check_grad(name, "grad", g)) != KV_OK) return st;
    if ((st = check_sizes(name, "self_sizes", in)) != KV_OK) return st;
    const int dim = kv_wrap_dim(kv_arg_int(stack, 2), in.n, name, "dim");
    if (dim < 0) return kv_last_error();
    if (index->ndim > 1)
        return kv_error(KV_ERR_SHAPE, "%s: argument 'index': expected a vector, got a %d-D tensor", name, index->ndim);
    const int64_t nidx = kv_tensor_numel(index);
    int64_t want[KV_MAX_DIMS];
    for (int d = 0; d < in.n; d++) want[d] = in.items[d];
    if (in.n > 0) want[dim] = nidx;
    else if (nidx != 1)
        return kv_error(KV_ERR_SHAPE, "%s: argument 'index': a 0-dim self takes one index, got %" PRId64, name, nidx);
    if ((st = check_grad_shape(name, g, want, in.n)) != KV_OK) return st;
    int64_t *idx = NULL;
    if ((st = read_index(name, "index", index, in.n > 0 ? in.items[dim] : 1, false, 0, &idx)) != KV_OK) return st;
    acc_buf res;
    if ((st = acc_init(&res, numel_of(in.items, in.n), name)) != KV_OK) {
        free(idx);
        return st;
    }
    kv_ref_iter it;
    kv_tensor *ops[1] = { g };
    if ((st = kv_ref_iter_init(&it, g->sizes, g->ndim, ops, 1)) == KV_OK) {
        while (kv_ref_iter_next(&it)) {
            int64_t dst[KV_MAX_DIMS];
            for (int d = 0; d < in.n; d++) dst[d] = it.index[d];
            if (in.n > 0) dst[dim] = idx[it.index[dim]];
            acc_add(&res, flat_index(dst, in.items, in.n), g->dtype, it.ptr[0], 1.0);
        }
    }
    free(idx);
    if (st != KV_OK) {
        free(res.v);
        return st;
    }
    return acc_return(stack, &res, in.items, in.n, g->dtype);
}

/* Rows whose index equals padding_idx get nothing (aten compares the raw
 * value, so a negative padding_idx skips no row); scale_grad_by_freq
 * divides each contribution by how often its row is indexed. */
KV_REF_KERNEL(embedding_dense_backward) {
    (void)op;
    (void)ks;
    static const char *const name = "embedding_dense_backward";
    kv_tensor *g = kv_arg_tensor(stack, 0), *indices = kv_arg_tensor(stack, 1);
    const int64_t rows = kv_arg_int(stack, 2), padding_idx = kv_arg_int(stack, 3);
    const bool scale = kv_arg_bool(stack, 4);
    kv_status st;
    if ((st = check_grad(name, "grad_output", g)) != KV_OK) return st;
    if (rows < 0)
        return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument 'num_weights': negative size %" PRId64, name, rows);
    if (g->ndim != indices->ndim + 1)
        return kv_error(KV_ERR_SHAPE, "%s: argument 'grad_output': expected %d dims (indices' plus one), got %d", name,
                        indices->ndim + 1, g->ndim);
    for (int d = 0; d < indices->ndim; d++)
        if (g->sizes[d] != indices->sizes[d])
            return kv_error(KV_ERR_SHAPE, "%s: argument 'grad_output': size %" PRId64 " at dim %d, indices have %" PRId64,
                            name, g->sizes[d], d, indices->sizes[d]);
    const int64_t width = g->sizes[g->ndim - 1];
    int64_t *idx = NULL;
    if ((st = read_index(name, "indices", indices, rows, true, padding_idx, &idx)) != KV_OK) return st;
    const int64_t n = kv_tensor_numel(indices);
    int64_t *freq = NULL;
    if (scale) {
        freq = calloc((size_t)(rows > 0 ? rows : 1), sizeof *freq);
        if (freq == NULL) {
            free(idx);
            return kv_error(KV_ERR_OOM, "%s: out of host memory", name);
        }
        for (int64_t p = 0; p < n; p++)
            if (idx[p] != padding_idx) freq[idx[p]]++;
    }
    acc_buf res;
    const int64_t out_sizes[2] = { rows, width };
    if ((st = acc_init(&res, rows * width, name)) != KV_OK) {
        free(idx);
        free(freq);
        return st;
    }
    kv_ref_iter it;
    kv_tensor *ops[1] = { g };
    if ((st = kv_ref_iter_init(&it, g->sizes, g->ndim, ops, 1)) == KV_OK) {
        while (kv_ref_iter_next(&it)) {
            const int64_t p = flat_index(it.index, g->sizes, g->ndim - 1);
            const int64_t row = idx[p];
            if (row == padding_idx) continue;
            acc_add(&res, row * width + it.index[g->ndim - 1], g->dtype, it.ptr[0],
                    scale ? 1.0 / (double)freq[row] : 1.0);
        }
    }
    free(idx);
    free(freq);
    if (st != KV_OK) {
        free(res.v);
        return st;
    }
    return acc_return(stack, &res, out_sizes, 2, g->dtype);
}
