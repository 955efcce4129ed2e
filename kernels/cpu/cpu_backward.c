/* "direct" variants of the scatter-add backward ops: as_strided_backward,
 * unfold_backward, index_select_backward, embedding_dense_backward.
 *
 * The gradient is read once into a contiguous f64 array (row-major, so
 * the visiting order is the reference's), destinations are computed with
 * incremental index arithmetic instead of a generic iterator, and the sums
 * go into an f64 buffer in the same order as the reference's: every sum is
 * the same sequence of f64 additions, so results are bitwise equal (inside
 * the table's gamma bound in any case). Real floating gradients (f32,
 * f64) only; complex gradients and every error go to the reference. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"

#define MAX_SPAN ((int64_t)1 << 28)

static bool bw_grad(const kv_stack *s, int i, const kv_tensor **out) {
    if (i >= s->size || s->slots[i].tag != KV_IV_TENSOR) return false;
    const kv_tensor *g = s->slots[i].v.tensor;
    if (!kv_cpu_plain(g) || (g->dtype != KV_F32 && g->dtype != KV_F64)) return false;
    *out = g;
    return true;
}

static bool bw_ints(const kv_stack *s, int i, kv_int_list *out, bool nonneg) {
    if (i >= s->size || s->slots[i].tag != KV_IV_INT_LIST) return false;
    *out = s->slots[i].v.ints;
    if (out->n > KV_MAX_DIMS) return false;
    for (int d = 0; d < out->n && nonneg; d++)
        if (out->items[d] < 0) return false;
    return true;
}

static bool bw_shape_is(const kv_tensor *g, const int64_t *want, int n) {
    if (g->ndim != n) return false;
    for (int d = 0; d < n; d++)
        if (g->sizes[d] != want[d]) return false;
    return true;
}

static int64_t bw_numel(const int64_t *sizes, int n) {
    int64_t p = 1;
    for (int d = 0; d < n; d++) p *= sizes[d];
    return p;
}

/* Row-major values of g as doubles (malloc'd). */
static double *bw_values(const kv_tensor *g) {
    const int64_t n = kv_tensor_numel(g);
    double *v = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (v == NULL) return NULL;
    const size_t es = kv_dtype_size(g->dtype);
    char *tmp = malloc((size_t)(n > 0 ? n : 1) * es);
    if (tmp == NULL) {
        free(v);
        return NULL;
    }
    kv_cpu_gather(g, tmp);
    for (int64_t i = 0; i < n; i++) v[i] = g->dtype == KV_F32 ? (double)((float *)tmp)[i] : ((double *)tmp)[i];
    free(tmp);
    return v;
}

/* Every index in [0, limit) (or equal to skip when has_skip), row-major. */
static bool bw_indices(const kv_tensor *t, int64_t limit, bool has_skip, int64_t skip, int64_t *out) {
    if (!kv_cpu_plain(t) || (t->dtype != KV_I32 && t->dtype != KV_I64)) return false;
    const int64_t n = kv_tensor_numel(t);
    const char *base = kv_tensor_data(t);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        const int64_t v = t->dtype == KV_I32 ? ((const int32_t *)base)[off] : ((const int64_t *)base)[off];
        if ((v < 0 || v >= limit) && !(has_skip && v == skip)) return false;
        if (out) out[k] = v;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
    return true;
}

static bool bw_next(int64_t *idx, const int64_t *sizes, int n) {
    for (int d = n - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

static int64_t bw_last(kv_int_list sz, kv_int_list st, int64_t off, bool *overflow) {
    int64_t p = off;
    for (int d = 0; d < sz.n; d++) {
        int64_t span;
        if (__builtin_mul_overflow(sz.items[d] - 1, st.items[d], &span) || __builtin_add_overflow(p, span, &p))
            *overflow = true;
    }
    return p;
}

/* ---- analysis ---- */

typedef struct bw_call {
    int id;
    const kv_tensor *g, *index;
    kv_int_list in, ist, osz, ost;
    int64_t ioff, ooff;
    int dim;
    int64_t size, step, rows, pad;
    bool scale;
} bw_call;

static bool bw_analyze(const kv_op *op, const kv_stack *s, bw_call *c) {
    memset(c, 0, sizeof *c);
    c->id = kv_op_builtin_id(op);
    int64_t want[KV_MAX_DIMS];
    switch (c->id) {
    case KV_OP_AS_STRIDED_BACKWARD: {
        if (s->size < 7 || !bw_grad(s, 0, &c->g) || !bw_ints(s, 1, &c->in, true) || !bw_ints(s, 2, &c->ist, true) ||
            !bw_ints(s, 4, &c->osz, true) || !bw_ints(s, 5, &c->ost, true))
            return false;
        if (s->slots[3].tag != KV_IV_INT || s->slots[6].tag != KV_IV_INT) return false;
        c->ioff = s->slots[3].v.i;
        c->ooff = s->slots[6].v.i;
        if (c->ioff < 0 || c->ooff < 0 || c->ist.n != c->in.n || c->ost.n != c->osz.n) return false;
        if (!bw_shape_is(c->g, c->osz.items, c->osz.n)) return false;
        if (bw_numel(c->in.items, c->in.n) == 0 || bw_numel(c->osz.items, c->osz.n) == 0) return true;
        bool ovf = false;
        const int64_t il = bw_last(c->in, c->ist, c->ioff, &ovf), ol = bw_last(c->osz, c->ost, c->ooff, &ovf);
        const int64_t lo = c->ioff < c->ooff ? c->ioff : c->ooff, hi = il > ol ? il : ol;
        return !ovf && hi - lo < MAX_SPAN;
    }
    case KV_OP_UNFOLD_BACKWARD: {
        if (s->size < 5 || !bw_grad(s, 0, &c->g) || !bw_ints(s, 1, &c->in, true) || c->in.n + 1 > KV_MAX_DIMS)
            return false;
        if (s->slots[2].tag != KV_IV_INT || s->slots[3].tag != KV_IV_INT || s->slots[4].tag != KV_IV_INT) return false;
        const int lim = c->in.n > 0 ? c->in.n : 1;
        int64_t d = s->slots[2].v.i;
        if (d < -lim || d >= lim) return false;
        c->dim = (int)(d < 0 ? d + lim : d);
        c->size = s->slots[3].v.i;
        c->step = s->slots[4].v.i;
        const int64_t len = c->in.n == 0 ? 1 : c->in.items[c->dim];
        if (c->size < 0 || c->size > len || c->step <= 0) return false;
        for (int k = 0; k < c->in.n; k++) want[k] = c->in.items[k];
        if (c->in.n > 0) want[c->dim] = (len - c->size) / c->step + 1;
        want[c->in.n] = c->size;
        return bw_shape_is(c->g, want, c->in.n + 1);
    }
    case KV_OP_INDEX_SELECT_BACKWARD: {
        if (s->size < 4 || !bw_grad(s, 0, &c->g) || !bw_ints(s, 1, &c->in, true) || s->slots[2].tag != KV_IV_INT ||
            s->slots[3].tag != KV_IV_TENSOR)
            return false;
        c->index = s->slots[3].v.tensor;
        if (c->in.n == 0 || c->index->ndim > 1) return false;
        int64_t d = s->slots[2].v.i;
        if (d < -c->in.n || d >= c->in.n) return false;
        c->dim = (int)(d < 0 ? d + c->in.n : d);
        for (int k = 0; k < c->in.n; k++) want[k] = c->in.items[k];
        want[c->dim] = kv_tensor_numel(c->index);
        return bw_shape_is(c->g, want, c->in.n) && bw_indices(c->index, c->in.items[c->dim], false, 0, NULL);
    }
    case KV_OP_EMBEDDING_DENSE_BACKWARD: {
        if (s->size < 5 || !bw_grad(s, 0, &c->g) || s->slots[1].tag != KV_IV_TENSOR || s->slots[2].tag != KV_IV_INT ||
            s->slots[3].tag != KV_IV_INT || s->slots[4].tag != KV_IV_BOOL)
            return false;
        c->index = s->slots[1].v.tensor;
        c->rows = s->slots[2].v.i;
        c->pad = s->slots[3].v.i;
        c->scale = s->slots[4].v.b;
        if (c->rows < 0 || c->g->ndim != c->index->ndim + 1) return false;
        for (int k = 0; k < c->index->ndim; k++)
            if (c->g->sizes[k] != c->index->sizes[k]) return false;
        return bw_indices(c->index, c->rows, true, c->pad, NULL);
    }
    default: return false;
    }
}

bool kv_cpu_backward_pred(const kv_op *op, const kv_stack *stack) {
    bw_call c;
    return bw_analyze(op, stack, &c);
}

/* ---- kernels ---- */

static kv_status bw_store(kv_stack *stack, const double *acc, const int64_t *sizes, int nd, kv_dtype dt) {
    kv_tensor *out = kv_cpu_new(sizes, nd, dt);
    if (out == NULL) return kv_last_error();
    const int64_t n = kv_tensor_numel(out);
    if (dt == KV_F32)
        for (int64_t i = 0; i < n; i++) ((float *)kv_tensor_data(out))[i] = (float)acc[i];
    else
        memcpy(kv_tensor_data(out), acc, sizeof(double) * (size_t)n);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

kv_status kv_cpu_backward_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    bw_call c;
    if (!bw_analyze(op, stack, &c))
        return kv_error(KV_ERR_INVALID_ARG, "%s: the direct variant does not cover this call", kv_op_name(op));
    const kv_dtype dt = c.g->dtype;
    double *gv = bw_values(c.g);
    int64_t nout;
    const int64_t *out_sizes;
    int out_nd;
    int64_t emb_sizes[2];
    if (c.id == KV_OP_EMBEDDING_DENSE_BACKWARD) {
        emb_sizes[0] = c.rows;
        emb_sizes[1] = c.g->sizes[c.g->ndim - 1];
        out_sizes = emb_sizes;
        out_nd = 2;
    } else {
        out_sizes = c.in.items;
        out_nd = c.in.n;
    }
    nout = bw_numel(out_sizes, out_nd);
    double *acc = calloc((size_t)(nout > 0 ? nout : 1), sizeof(double));
    int64_t *idx = NULL;
    if (gv == NULL || acc == NULL) goto oom;
    const int64_t ng = kv_tensor_numel(c.g);
    switch (c.id) {
    case KV_OP_AS_STRIDED_BACKWARD: {
        if (nout == 0 || ng == 0) break;
        bool ovf = false;
        const int64_t il = bw_last(c.in, c.ist, c.ioff, &ovf), ol = bw_last(c.osz, c.ost, c.ooff, &ovf);
        const int64_t lo = c.ioff < c.ooff ? c.ioff : c.ooff, hi = il > ol ? il : ol;
        double *by_pos = calloc((size_t)(hi - lo + 1), sizeof(double));
        int64_t *count = calloc((size_t)(hi - lo + 1), sizeof(int64_t));
        if (by_pos == NULL || count == NULL) {
            free(by_pos);
            free(count);
            goto oom;
        }
        int64_t ix[KV_MAX_DIMS] = { 0 };
        int64_t k = 0;
        do {
            int64_t p = c.ooff;
            for (int d = 0; d < c.osz.n; d++) p += ix[d] * c.ost.items[d];
            by_pos[p - lo] += gv[k++];
        } while (bw_next(ix, c.osz.items, c.osz.n));
        memset(ix, 0, sizeof ix);
        do {
            int64_t p = c.ioff;
            for (int d = 0; d < c.in.n; d++) p += ix[d] * c.ist.items[d];
            count[p - lo]++;
        } while (bw_next(ix, c.in.items, c.in.n));
        memset(ix, 0, sizeof ix);
        k = 0;
        do {
            int64_t p = c.ioff;
            for (int d = 0; d < c.in.n; d++) p += ix[d] * c.ist.items[d];
            acc[k++] = by_pos[p - lo] / (double)count[p - lo];
        } while (bw_next(ix, c.in.items, c.in.n));
        free(by_pos);
        free(count);
        break;
    }
    case KV_OP_UNFOLD_BACKWARD: {
        /* grad[..., w, ..., j] (w at dim, j the window) lands on
         * input[..., w*step + j, ...]. */
        int64_t ix[KV_MAX_DIMS] = { 0 };
        const int n = c.in.n;
        for (int64_t k = 0; k < ng; k++) {
            int64_t f = 0;
            for (int d = 0; d < n; d++) {
                const int64_t v = d == c.dim ? ix[d] * c.step + ix[n] : ix[d];
                f = f * c.in.items[d] + v;
            }
            acc[f] += gv[k];
            bw_next(ix, c.g->sizes, c.g->ndim);
        }
        break;
    }
    case KV_OP_INDEX_SELECT_BACKWARD: {
        const int64_t ni = kv_tensor_numel(c.index);
        idx = malloc(sizeof(int64_t) * (size_t)(ni > 0 ? ni : 1));
        if (idx == NULL) goto oom;
        bw_indices(c.index, c.in.items[c.dim], false, 0, idx);
        int64_t ix[KV_MAX_DIMS] = { 0 };
        for (int64_t k = 0; k < ng; k++) {
            int64_t f = 0;
            for (int d = 0; d < c.in.n; d++) f = f * c.in.items[d] + (d == c.dim ? idx[ix[d]] : ix[d]);
            acc[f] += gv[k];
            bw_next(ix, c.g->sizes, c.g->ndim);
        }
        break;
    }
    case KV_OP_EMBEDDING_DENSE_BACKWARD: {
        const int64_t ni = kv_tensor_numel(c.index), width = c.g->sizes[c.g->ndim - 1];
        idx = malloc(sizeof(int64_t) * (size_t)(ni > 0 ? ni : 1));
        int64_t *freq = c.scale ? calloc((size_t)(c.rows > 0 ? c.rows : 1), sizeof(int64_t)) : NULL;
        if (idx == NULL || (c.scale && freq == NULL)) {
            free(freq);
            goto oom;
        }
        bw_indices(c.index, c.rows, true, c.pad, idx);
        if (c.scale)
            for (int64_t p = 0; p < ni; p++)
                if (idx[p] != c.pad) freq[idx[p]]++;
        for (int64_t p = 0; p < ni; p++) {
            const int64_t row = idx[p];
            if (row == c.pad) continue;
            const double sc = c.scale ? 1.0 / (double)freq[row] : 1.0;
            const double *gr = gv + p * width;
            double *ar = acc + row * width;
            for (int64_t j = 0; j < width; j++) ar[j] += gr[j] * sc;
        }
        free(freq);
        break;
    }
    default: break;
    }
    free(gv);
    free(idx);
    kv_status st = bw_store(stack, acc, out_sizes, out_nd, dt);
    free(acc);
    return st;
oom:
    free(gv);
    free(acc);
    free(idx);
    return kv_error(KV_ERR_OOM, "%s: out of host memory", kv_op_name(op));
}
