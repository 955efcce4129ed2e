/* Backward formulas of copies, joins, indexing and the view ops. A view's
 * gradient is the incoming one mapped back onto the input's geometry:
 * the inverse view where there is one, else a zero tensor with the
 * gradient written into the viewed region, or (as_strided, unfold) a
 * reference kernel that adds every element back to its source. */
#include "kv/ops.h"
#include "modes/autograd_internal.h"

/* _to_copy: back to the input's dtype and device. */
kv_status kv_ag_f_to_copy(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    if (g->dtype == in->dtype && kv_device_equal(g->device, in->device)) {
        kv_ag_set(c, 0, g);
        return KV_OK;
    }
    kv_ag_set(c, 0, kv_ag_keep(c, kv__to_copy(g, &in->dtype, NULL, &in->device, NULL, false, NULL)));
    return KV_OK;
}

/* copy_ (self, src): self's old values are gone; src gets the gradient on
 * its own device (the engine sums it to src's shape and casts it). */
kv_status kv_ag_f_copy_(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_zeros_meta(c, kv_ag_in(c, 0), g->dtype));
    if (kv_ag_needs(c, 1)) {
        const kv_ag_tmeta *src = kv_ag_in(c, 1);
        if (kv_device_equal(g->device, src->device)) kv_ag_set(c, 1, g);
        else kv_ag_set(c, 1, kv_ag_keep(c, kv__to_copy(g, NULL, NULL, &src->device, NULL, false, NULL)));
    }
    return KV_OK;
}

static bool cat_skipped(const kv_ag_tmeta *m) { return m->ndim == 1 && m->sizes[0] == 0; }

/* cat (tensors, dim): each input gets its slice; the legacy 1-D empty
 * inputs cat skips get an empty gradient. */
kv_status kv_ag_f_cat(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    const int n = c->node->in_count[0];
    int ndim = -1;
    for (int i = 0; i < n && ndim < 0; i++)
        if (!cat_skipped(kv_ag_in_at(c, 0, i))) ndim = kv_ag_in_at(c, 0, i)->ndim;
    int d = 0;
    if (ndim >= 0) {
        d = kv_wrap_dim(kv_ag_arg(c, 1)->v.i, ndim, c->node->name, "dim");
        if (d < 0) return kv_last_error();
    }
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        const kv_ag_tmeta *m = kv_ag_in_at(c, 0, i);
        if (cat_skipped(m)) {
            if (kv_ag_needs_at(c, 0, i)) kv_ag_set_at(c, 0, i, kv_ag_zeros_meta(c, m, g->dtype));
            continue;
        }
        int64_t start = off, end = off + m->sizes[d];
        off = end;
        if (kv_ag_needs_at(c, 0, i)) kv_ag_set_at(c, 0, i, kv_ag_keep(c, kv_slice(g, d, &start, &end, 1)));
    }
    return KV_OK;
}

/* stack (tensors, dim): input i is the gradient's index i along dim. */
kv_status kv_ag_f_stack(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    const int n = c->node->in_count[0];
    if (n == 0) return KV_OK;
    const int d = kv_wrap_dim(kv_ag_arg(c, 1)->v.i, kv_ag_in_at(c, 0, 0)->ndim + 1, c->node->name, "dim");
    if (d < 0) return kv_last_error();
    for (int i = 0; i < n; i++)
        if (kv_ag_needs_at(c, 0, i)) kv_ag_set_at(c, 0, i, kv_ag_keep(c, kv_select(g, d, i)));
    return KV_OK;
}

/* index_select (self, dim, index): rows added back where they came from. */
kv_status kv_ag_f_index_select(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_index_select_backward(kv_ag_grad(c, 0), kv_ag_tmeta_sizes(kv_ag_in(c, 0)),
                                                           kv_ag_arg(c, 1)->v.i, kv_ag_saved(c, 2))));
    return KV_OK;
}

/* embedding (weight, indices, padding_idx, scale_grad_by_freq, sparse):
 * a dense gradient even for sparse=True. */
kv_status kv_ag_f_embedding(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_embedding_dense_backward(kv_ag_grad(c, 0), kv_ag_saved(c, 1),
                                                              kv_ag_in(c, 0)->sizes[0], kv_ag_arg(c, 2)->v.i,
                                                              kv_ag_arg(c, 3)->v.b)));
    return KV_OK;
}

/* view, reshape, _unsafe_view, squeeze, squeeze.dim, unsqueeze: the same
 * elements in the input's shape. */
kv_status kv_ag_f_reshape(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_reshape(kv_ag_grad(c, 0), kv_ag_tmeta_sizes(kv_ag_in(c, 0)))));
    return KV_OK;
}

kv_status kv_ag_f_transpose(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_transpose(kv_ag_grad(c, 0), kv_ag_arg(c, 1)->v.i, kv_ag_arg(c, 2)->v.i)));
    return KV_OK;
}

kv_status kv_ag_f_t(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_t(kv_ag_grad(c, 0))));
    return KV_OK;
}

/* permute (self, dims): the inverse permutation. */
kv_status kv_ag_f_permute(kv_ag_fctx *c) {
    const kv_int_list dims = kv_ag_arg(c, 1)->v.ints;
    const int ndim = kv_ag_in(c, 0)->ndim;
    if (dims.n != ndim) return kv_error(KV_ERR_INTERNAL, "%s: dims do not match the input", c->node->name);
    int64_t inv[KV_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        int d = kv_wrap_dim(dims.items[i], ndim, c->node->name, "dims");
        if (d < 0) return kv_last_error();
        inv[d] = i;
    }
    kv_ag_set(c, 0, kv_ag_keep(c, kv_permute(kv_ag_grad(c, 0), (kv_int_list){ inv, ndim })));
    return KV_OK;
}

/* Zeros shaped like the input, for a region to be written into. */
static kv_tensor *zeros_for(kv_ag_fctx *c, const kv_tensor *g) {
    return g ? kv_ag_zeros_meta(c, kv_ag_in(c, 0), g->dtype) : NULL;
}

static void write_region(kv_ag_fctx *c, kv_tensor *z, kv_tensor *region, kv_tensor *g) {
    if (z == NULL || region == NULL) return;
    if (kv_copy_(region, g, false) != KV_OK) {
        kv_ag_keep(c, NULL);
        return;
    }
    kv_ag_set(c, 0, z);
}

/* select.int (self, dim, index) and slice.Tensor (self, dim, start?,
 * end?, step): PyTorch's select_backward / slice_backward. */
kv_status kv_ag_f_select(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *z = zeros_for(c, g);
    kv_tensor *region = z ? kv_ag_keep(c, kv_select(z, kv_ag_arg(c, 1)->v.i, kv_ag_arg(c, 2)->v.i)) : NULL;
    write_region(c, z, region, g);
    return KV_OK;
}

kv_status kv_ag_f_slice(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *z = zeros_for(c, g);
    const kv_ivalue *s = kv_ag_arg(c, 2), *e = kv_ag_arg(c, 3);
    const int64_t *start = s->tag == KV_IV_INT ? &s->v.i : NULL;
    const int64_t *end = e->tag == KV_IV_INT ? &e->v.i : NULL;
    kv_tensor *region = z ? kv_ag_keep(c, kv_slice(z, kv_ag_arg(c, 1)->v.i, start, end, kv_ag_arg(c, 4)->v.i)) : NULL;
    write_region(c, z, region, g);
    return KV_OK;
}

/* expand: the broadcasting reduction. */
kv_status kv_ag_f_expand(kv_ag_fctx *c) {
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    kv_ag_set(c, 0, kv_ag_sum_to(c, kv_ag_grad(c, 0), in->sizes, in->ndim));
    return KV_OK;
}

/* as_strided (self, size, stride, storage_offset?). */
kv_status kv_ag_f_as_strided(kv_ag_fctx *c) {
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    const kv_ivalue *off = kv_ag_arg(c, 3);
    kv_ag_set(c, 0, kv_ag_keep(c, kv_as_strided_backward(kv_ag_grad(c, 0), kv_ag_tmeta_sizes(in),
                                                         (kv_int_list){ in->strides, in->ndim }, in->offset,
                                                         kv_ag_arg(c, 1)->v.ints, kv_ag_arg(c, 2)->v.ints,
                                                         off->tag == KV_IV_INT ? off->v.i : in->offset)));
    return KV_OK;
}

/* unfold (self, dimension, size, step). */
kv_status kv_ag_f_unfold(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_unfold_backward(kv_ag_grad(c, 0), kv_ag_tmeta_sizes(kv_ag_in(c, 0)),
                                                     kv_ag_arg(c, 1)->v.i, kv_ag_arg(c, 2)->v.i,
                                                     kv_ag_arg(c, 3)->v.i)));
    return KV_OK;
}

/* repeat (self, repeats): output dim d holds repeats[d] tiles of the
 * (padded) input dim d, so the input gradient sums the tiles. One dim at
 * a time: [.., r*s, ..] is reshaped to [.., r, s, ..] and summed over r
 * (one extra dim at most, so a KV_MAX_DIMS-dim output still fits when
 * some repeats are 1); the prepended dims of size 1 are dropped last. */
kv_status kv_ag_f_repeat(kv_ag_fctx *c) {
    if (!kv_ag_needs(c, 0)) return KV_OK;
    const kv_ag_tmeta *in = kv_ag_in(c, 0);
    const kv_int_list reps = kv_ag_arg(c, 1)->v.ints;
    const int nd = reps.n, lead = reps.n - in->ndim;
    int64_t cur[KV_MAX_DIMS + 1];
    for (int d = 0; d < nd; d++) cur[d] = (d < lead ? 1 : in->sizes[d - lead]) * reps.items[d];
    kv_tensor *g = kv_ag_grad(c, 0);
    for (int d = 0; d < nd && g != NULL; d++) {
        if (reps.items[d] == 1) continue;
        if (nd + 1 > KV_MAX_DIMS) {
            kv_ag_fail(c, KV_ERR_INVALID_ARG,
                       "repeat: backward of a %d-dim result would need %d dims, at most %d are supported", nd,
                       nd + 1, KV_MAX_DIMS);
            return KV_OK;
        }
        int64_t split[KV_MAX_DIMS + 1];
        int k = 0;
        for (int e = 0; e < nd; e++) {
            if (e == d) {
                split[k++] = reps.items[d];
                split[k++] = d < lead ? 1 : in->sizes[d - lead];
            } else {
                split[k++] = cur[e];
            }
        }
        const int64_t dim = d;
        g = kv_ag_keep(c, kv_reshape(g, (kv_int_list){ split, nd + 1 }));
        if (g != NULL) g = kv_ag_keep(c, kv_sum(g, &(kv_int_list){ &dim, 1 }, false, NULL));
        cur[d] = d < lead ? 1 : in->sizes[d - lead];
    }
    if (g != NULL) kv_ag_set(c, 0, kv_ag_keep(c, kv_reshape(g, kv_ag_tmeta_sizes(in))));
    return KV_OK;
}
