/* The helpers backward formulas are written with: temporaries, first-error
 * recording, access to the node's gradients, saved values and input
 * metadata, and the few compositions many formulas share (conj, scalar
 * factors, masks, the broadcasting reduction). Everything computes
 * through dispatched ops, so formulas run on any backend. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/ops.h"
#include "modes/autograd_internal.h"

/* ---- temporaries and errors ---- */

static void record_error(kv_ag_fctx *c, kv_status st, const char *msg) {
    if (c->err != KV_OK) return;
    c->err = st != KV_OK ? st : KV_ERR_INTERNAL;
    snprintf(c->errmsg, sizeof c->errmsg, "%s",
             (msg && msg[0]) ? msg : "autograd: a backward helper failed without an error message");
}

kv_tensor *kv_ag_keep(kv_ag_fctx *c, kv_tensor *t) {
    if (t == NULL) {
        record_error(c, kv_last_error(), kv_last_error_message());
        return NULL;
    }
    if (c->ntmp == c->captmp) {
        int cap = c->captmp ? 2 * c->captmp : 16;
        kv_tensor **grown = realloc(c->tmp, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            kv_tensor_release(t);
            record_error(c, KV_ERR_OOM, "autograd: out of host memory for backward temporaries");
            return NULL;
        }
        c->tmp = grown;
        c->captmp = cap;
    }
    c->tmp[c->ntmp++] = t;
    return t;
}

void kv_ag_fail(kv_ag_fctx *c, kv_status st, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    record_error(c, st, msg);
}

kv_status kv_ag_finish(kv_ag_fctx *c, kv_status st) {
    for (int i = 0; i < c->ntmp; i++) kv_tensor_release(c->tmp[i]);
    free(c->tmp);
    c->tmp = NULL;
    c->ntmp = c->captmp = 0;
    if (st != KV_OK) return st;
    if (c->err != KV_OK) return kv_error(c->err, "%s", c->errmsg);
    return KV_OK;
}

/* ---- node access ---- */

kv_tensor *kv_ag_grad(kv_ag_fctx *c, int k) {
    return (k >= 0 && k < c->node->noutputs) ? c->grad_out[k] : NULL;
}

kv_tensor *kv_ag_grad_or_zeros(kv_ag_fctx *c, int k) {
    kv_tensor *g = kv_ag_grad(c, k);
    if (g) return g;
    const kv_ag_tmeta *m = &c->node->out_meta[k];
    return kv_ag_zeros_meta(c, m, m->dtype);
}

static int input_index(const kv_ag_fctx *c, int slot, int index) {
    if (slot < 0 || slot >= KV_SCHEMA_MAX_ARGS) return -1;
    const kv_ag_node *n = c->node;
    if (n->in_first[slot] < 0 || index < 0 || index >= n->in_count[slot]) return -1;
    return n->in_first[slot] + index;
}

bool kv_ag_needs_at(const kv_ag_fctx *c, int slot, int index) {
    int i = input_index(c, slot, index);
    return i >= 0 && c->node->needs[i];
}

bool kv_ag_needs(const kv_ag_fctx *c, int slot) { return kv_ag_needs_at(c, slot, 0); }

void kv_ag_set_at(kv_ag_fctx *c, int slot, int index, kv_tensor *t) {
    int i = input_index(c, slot, index);
    if (t == NULL || i < 0 || !c->node->needs[i]) return;
    kv_tensor_retain(t);
    kv_tensor_release(c->grad_in[i]);
    c->grad_in[i] = t;
}

void kv_ag_set(kv_ag_fctx *c, int slot, kv_tensor *t) { kv_ag_set_at(c, slot, 0, t); }

kv_tensor *kv_ag_saved(kv_ag_fctx *c, int slot) {
    if (slot < 0 || slot >= KV_SCHEMA_MAX_ARGS) return NULL;
    kv_tensor *t = c->node->saved_args[slot].t;
    if (t == NULL) kv_ag_fail(c, KV_ERR_INTERNAL, "%s: argument %d was not saved", c->node->name, slot);
    return t;
}

kv_tensor *kv_ag_result(kv_ag_fctx *c, int k) {
    if (k < 0 || k >= KV_SCHEMA_MAX_RETURNS) return NULL;
    kv_tensor *t = c->node->saved_results[k].t;
    if (t == NULL) kv_ag_fail(c, KV_ERR_INTERNAL, "%s: result %d was not saved", c->node->name, k);
    return t;
}

const kv_ag_tmeta *kv_ag_in_at(const kv_ag_fctx *c, int slot, int index) {
    int i = input_index(c, slot, index);
    return i >= 0 ? &c->node->in_meta[i] : NULL;
}

const kv_ag_tmeta *kv_ag_in(const kv_ag_fctx *c, int slot) { return kv_ag_in_at(c, slot, 0); }

const kv_ivalue *kv_ag_arg(const kv_ag_fctx *c, int slot) { return &c->node->args[slot]; }

kv_int_list kv_ag_tmeta_sizes(const kv_ag_tmeta *m) { return (kv_int_list){ m->sizes, m->ndim }; }

/* ---- compositions ---- */

kv_tensor *kv_ag_conj(kv_ag_fctx *c, kv_tensor *t) {
    if (t == NULL) return NULL;
    if (!kv_dtype_is_complex(t->dtype)) return t;
    return kv_ag_keep(c, kv_conj_physical(t));
}

kv_tensor *kv_ag_scalar(kv_ag_fctx *c, kv_scalar v, kv_dtype dt, kv_device dev) {
    return kv_ag_keep(c, kv_full((kv_int_list){ NULL, 0 }, v, &dt, NULL, &dev, NULL));
}

kv_tensor *kv_ag_scale(kv_ag_fctx *c, kv_tensor *t, double v) {
    if (t == NULL) return NULL;
    kv_tensor *s = kv_ag_scalar(c, kv_scalar_double(v), t->dtype, t->device);
    return s ? kv_ag_keep(c, kv_mul(t, s)) : NULL;
}

kv_tensor *kv_ag_scale_scalar(kv_ag_fctx *c, kv_tensor *t, kv_scalar s, bool conj_s) {
    if (t == NULL) return NULL;
    double re, im;
    kv_scalar_to_complex(s, &re, &im);
    if (conj_s) im = -im;
    if (re == 1.0 && im == 0.0) return t;
    if (im != 0.0) {
        kv_tensor *f = kv_ag_scalar(c, kv_scalar_complex(re, im), kv_dtype_to_complex(t->dtype), t->device);
        return f ? kv_ag_keep(c, kv_mul(t, f)) : NULL;
    }
    return kv_ag_scale(c, t, re);
}

kv_tensor *kv_ag_zeros(kv_ag_fctx *c, const int64_t *sizes, int ndim, kv_dtype dt, kv_device dev) {
    return kv_ag_keep(c, kv_zeros((kv_int_list){ sizes, ndim }, &dt, NULL, &dev, NULL));
}

kv_tensor *kv_ag_zeros_meta(kv_ag_fctx *c, const kv_ag_tmeta *m, kv_dtype dt) {
    return kv_ag_zeros(c, m->sizes, m->ndim, dt, m->device);
}

kv_tensor *kv_ag_mask(kv_ag_fctx *c, kv_tensor *mask, kv_tensor *a) {
    if (mask == NULL || a == NULL) return NULL;
    kv_tensor *zero = kv_ag_scalar(c, kv_scalar_int(0), a->dtype, a->device);
    return zero ? kv_ag_keep(c, kv_where(mask, a, zero)) : NULL;
}

kv_tensor *kv_ag_mask_not(kv_ag_fctx *c, kv_tensor *mask, kv_tensor *a) {
    if (mask == NULL || a == NULL) return NULL;
    kv_tensor *zero = kv_ag_scalar(c, kv_scalar_int(0), a->dtype, a->device);
    return zero ? kv_ag_keep(c, kv_where(mask, zero, a)) : NULL;
}

kv_tensor *kv_ag_sum_to_owned(kv_tensor *t, const int64_t *sizes, int ndim) {
    if (t == NULL) return NULL;
    bool same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->sizes[d] == sizes[d];
    if (same) {
        kv_tensor_retain(t);
        return t;
    }
    char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
    int64_t dims[KV_MAX_DIMS];
    int nd = 0;
    const int lead = t->ndim - ndim;
    bool ok = lead >= 0;
    for (int d = 0; ok && d < t->ndim; d++) {
        if (d < lead) dims[nd++] = d;
        else if (sizes[d - lead] == 1 && t->sizes[d] != 1) dims[nd++] = d;
        else if (sizes[d - lead] != t->sizes[d]) ok = false;
    }
    if (!ok) {
        kv_shape_format(t->sizes, t->ndim, a, (int)sizeof a);
        kv_shape_format(sizes, ndim, b, (int)sizeof b);
        kv_error(KV_ERR_SHAPE, "autograd: a gradient of shape %s cannot be summed to shape %s", a, b);
        return NULL;
    }
    kv_tensor *r = t;
    if (nd > 0) {
        kv_int_list dl = { dims, nd };
        r = kv_sum(t, &dl, true, NULL);
        if (r == NULL) return NULL;
    } else {
        kv_tensor_retain(r);
    }
    kv_tensor *out = kv_reshape(r, (kv_int_list){ sizes, ndim });
    kv_tensor_release(r);
    return out;
}

kv_tensor *kv_ag_sum_to(kv_ag_fctx *c, kv_tensor *t, const int64_t *sizes, int ndim) {
    if (t == NULL) return NULL;
    return kv_ag_keep(c, kv_ag_sum_to_owned(t, sizes, ndim));
}

kv_status kv_ag_reduced_dims(const kv_int_list *dims, int ndim, const char *op, bool *reduce) {
    const bool all = dims == NULL || dims->n == 0;
    for (int d = 0; d < KV_MAX_DIMS; d++) reduce[d] = all && d < ndim;
    if (all) return KV_OK;
    for (int i = 0; i < dims->n; i++) {
        int d = kv_wrap_dim(dims->items[i], ndim, op, "dim");
        if (d < 0) return kv_last_error();
        if (d < ndim) reduce[d] = true;
    }
    return KV_OK;
}

kv_tensor *kv_ag_restore_dims(kv_ag_fctx *c, kv_tensor *g, const kv_int_list *dims, bool keepdim,
                              const kv_ag_tmeta *in) {
    if (g == NULL) return NULL;
    bool reduce[KV_MAX_DIMS];
    kv_status st = kv_ag_reduced_dims(dims, in->ndim, c->node->name, reduce);
    if (st != KV_OK) {
        kv_ag_keep(c, NULL);
        return NULL;
    }
    kv_tensor *t = g;
    if (!keepdim)
        for (int d = 0; d < in->ndim && t; d++)
            if (reduce[d]) t = kv_ag_keep(c, kv_unsqueeze(t, d));
    if (t == NULL) return NULL;
    return kv_ag_keep(c, kv_expand(t, kv_ag_tmeta_sizes(in), false));
}
