/* Graph nodes and edges, saved tensors, running one node's formula, and
 * the two nodes autograd makes by itself: AsStridedBackward0 for a view
 * whose storage was written since its history was recorded, and
 * CopySlices for an in-place op on a view. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/ops.h"
#include "modes/autograd_internal.h"

static atomic_ullong g_seq;

/* ---- nodes ---- */

kv_ag_node *kv_ag_node_new(const char *name, kv_ag_formula_fn fn, int ninputs, int noutputs) {
    kv_ag_node *n = calloc(1, sizeof *n);
    if (n == NULL) goto oom;
    const size_t cnt = ninputs > 0 ? (size_t)ninputs : 1;
    n->edges = calloc(cnt, sizeof *n->edges);
    n->in_meta = calloc(cnt, sizeof *n->in_meta);
    n->needs = calloc(cnt, sizeof *n->needs);
    n->out_meta = calloc(noutputs > 0 ? (size_t)noutputs : 1, sizeof *n->out_meta);
    if (n->edges == NULL || n->in_meta == NULL || n->needs == NULL || n->out_meta == NULL) {
        free(n->edges);
        free(n->in_meta);
        free(n->needs);
        free(n->out_meta);
        free(n);
        goto oom;
    }
    atomic_init(&n->refcount, 1);
    n->name = name;
    n->fn = fn;
    n->ninputs = ninputs;
    n->noutputs = noutputs;
    n->seq = atomic_fetch_add_explicit(&g_seq, 1, memory_order_relaxed);
    for (int i = 0; i < KV_SCHEMA_MAX_ARGS; i++) n->in_first[i] = -1;
    kv_ag_count_node();
    return n;
oom:
    kv_error(KV_ERR_OOM, "autograd: out of host memory for a %s node", name);
    return NULL;
}

void kv_ag_node_retain(kv_ag_node *n) {
    if (n) atomic_fetch_add_explicit(&n->refcount, 1, memory_order_relaxed);
}

void kv_ag_node_release_saved(kv_ag_node *n) {
    for (int i = 0; i < KV_SCHEMA_MAX_ARGS; i++) {
        kv_tensor_release(n->saved_args[i].t);
        n->saved_args[i].t = NULL;
    }
    for (int k = 0; k < KV_SCHEMA_MAX_RETURNS; k++) {
        kv_tensor_release(n->saved_results[k].t);
        n->saved_results[k].t = NULL;
    }
    if (n->inner) kv_ag_node_release_saved(n->inner);
    n->released = true;
}

/* Drops one reference of a node the caller is destroying; a node that
 * goes with it joins the free list instead of being destroyed
 * recursively, so a graph of any depth is freed in constant stack. */
static void unref_into(kv_ag_node *n, kv_ag_node **list) {
    if (n && atomic_fetch_sub_explicit(&n->refcount, 1, memory_order_acq_rel) == 1) {
        n->gc_next = *list;
        *list = n;
    }
}

void kv_ag_node_release(kv_ag_node *n) {
    if (n == NULL || atomic_fetch_sub_explicit(&n->refcount, 1, memory_order_acq_rel) != 1) return;
    kv_ag_node *list = n;
    n->gc_next = NULL;
    while (list) {
        kv_ag_node *x = list;
        list = x->gc_next;
        for (int i = 0; i < x->ninputs; i++) {
            unref_into(x->edges[i].node, &list);
            kv_ag_meta_release(x->edges[i].leaf);
        }
        unref_into(x->inner, &list);
        kv_ag_node_release_saved(x);
        for (int i = 0; i < x->nargs; i++) kv_ag_ivalue_free(&x->args[i]);
        free(x->edges);
        free(x->in_meta);
        free(x->needs);
        free(x->out_meta);
        free(x);
    }
}

void kv_ag_edge_clear(kv_ag_edge *e) {
    kv_ag_node_release(e->node);
    kv_ag_meta_release(e->leaf);
    *e = (kv_ag_edge){ NULL, NULL, 0 };
}

/* ---- tensors ---- */

void kv_ag_tmeta_of(const kv_tensor *t, kv_ag_tmeta *out) {
    memset(out, 0, sizeof *out);
    if (t == NULL) return;
    out->present = true;
    out->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        out->sizes[d] = t->sizes[d];
        out->strides[d] = t->strides[d];
    }
    out->offset = t->offset;
    out->dtype = t->dtype;
    out->device = t->device;
    out->keys = t->keys;
}

kv_tensor *kv_ag_detached_alias(const kv_tensor *t) {
    kv_tensor *a = kv_tensor_alias(t);
    if (a) a->keys = kv_keyset_remove(a->keys, KV_KEY_AUTOGRAD);
    return a;
}

kv_status kv_ag_save(kv_ag_saved_var *s, const kv_tensor *t) {
    s->t = kv_ag_detached_alias(t);
    if (s->t == NULL) return kv_last_error();
    s->version = kv_tensor_version(t);
    return KV_OK;
}

kv_status kv_ag_ivalue_copy(kv_ivalue *dst, const kv_ivalue *src) {
    *dst = *src;
    switch (src->tag) {
    case KV_IV_INT_LIST: {
        int64_t *items = malloc((size_t)(src->v.ints.n > 0 ? src->v.ints.n : 1) * sizeof *items);
        if (items == NULL) {
            dst->tag = KV_IV_NONE;
            return kv_error(KV_ERR_OOM, "autograd: out of host memory saving an int list");
        }
        if (src->v.ints.n > 0) memcpy(items, src->v.ints.items, (size_t)src->v.ints.n * sizeof *items);
        dst->v.ints.items = items;
        return KV_OK;
    }
    case KV_IV_STR:
        dst->v.str = strdup(src->v.str);
        if (dst->v.str == NULL) {
            dst->tag = KV_IV_NONE;
            return kv_error(KV_ERR_OOM, "autograd: out of host memory saving a string");
        }
        return KV_OK;
    case KV_IV_TENSOR:
    case KV_IV_TENSOR_LIST:
        /* Tensors are saved (or not) by the formula's save masks. */
        dst->tag = KV_IV_NONE;
        return KV_OK;
    case KV_IV_GENERATOR:
        /* The caller's generator may be gone by backward, and no formula
         * needs the state a random op drew from: not kept. */
        dst->tag = KV_IV_NONE;
        return KV_OK;
    case KV_IV_NONE:
    case KV_IV_SCALAR:
    case KV_IV_INT:
    case KV_IV_DOUBLE:
    case KV_IV_BOOL:
    case KV_IV_DTYPE:
    case KV_IV_DEVICE:
        return KV_OK;
    }
    return KV_OK;
}

void kv_ag_ivalue_free(kv_ivalue *v) {
    if (v->tag == KV_IV_INT_LIST) free((void *)v->v.ints.items);
    else if (v->tag == KV_IV_STR) free((void *)v->v.str);
    v->tag = KV_IV_NONE;
}

/* ---- edges and stale views ---- */

/* The base's storage was written after the view's history was recorded
 * (or the view itself was written through CopySlices): the old grad_fn
 * no longer describes the view's values. Like PyTorch, replace it with
 * an as_strided view of the base's current history. */
static void regenerate_view(kv_tensor *t) {
    struct kv_autograd_meta *m = t->autograd;
    kv_ag_node *n = kv_ag_node_new("AsStridedBackward0", kv_ag_f_view_regen, 1, 1);
    if (n == NULL) return; /* keeps the old history; the error is set */
    n->in_first[0] = 0;
    n->in_count[0] = 1;
    kv_ag_tmeta_of(m->base, &n->in_meta[0]);
    n->edges[0] = kv_ag_edge_of(m->base);
    n->needs[0] = n->edges[0].node || n->edges[0].leaf;
    kv_ag_tmeta_of(t, &n->view);
    n->out_meta[0] = n->view;
    kv_ag_meta_set_grad_fn(m, n, 0);
    kv_ag_node_release(n);
    m->view_version = kv_tensor_version(t);
}

kv_ag_node *kv_ag_current_grad_fn(kv_tensor *t) {
    struct kv_autograd_meta *m = t ? t->autograd : NULL;
    if (m == NULL) return NULL;
    if (m->base && m->requires_grad && m->view_version != kv_tensor_version(t)) regenerate_view(t);
    return m->grad_fn;
}

kv_ag_edge kv_ag_edge_of(kv_tensor *t) {
    kv_ag_edge e = { NULL, NULL, 0 };
    if (!kv_ag_requires_grad(t)) return e;
    kv_ag_node *n = kv_ag_current_grad_fn(t);
    if (n) {
        kv_ag_node_retain(n);
        e.node = n;
        e.input_nr = t->autograd->output_nr;
    } else {
        kv_ag_meta_retain(t->autograd);
        e.leaf = t->autograd;
    }
    return e;
}

/* ---- running a node ---- */

static kv_status check_saved(const kv_ag_node *n, const kv_ag_saved_var *s) {
    if (s->t == NULL) return KV_OK;
    int64_t now = kv_tensor_version(s->t);
    if (now == s->version) return KV_OK;
    char shape[KV_MAX_DIMS * 24];
    kv_shape_format(s->t->sizes, s->t->ndim, shape, (int)sizeof shape);
    return kv_error(KV_ERR_INVALID_ARG,
                    "%s: one of the variables needed for gradient computation has been modified by an inplace "
                    "operation: [%s %s] is at version %lld; expected version %lld instead.",
                    n->name, kv_dtype_torch_name(s->t->dtype), shape, (long long)now, (long long)s->version);
}

kv_status kv_ag_node_run(kv_ag_node *n, kv_tensor *const *grad_out, kv_tensor **grad_in) {
    for (int i = 0; i < n->ninputs; i++) grad_in[i] = NULL;
    if (n->released && n->has_saved)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: Trying to backward through the graph a second time (or directly access saved tensors "
                        "after they have already been freed). Saved intermediate values of the graph are freed "
                        "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
                        "backward through the graph a second time or if you need to access saved tensors after "
                        "calling backward.",
                        n->name);
    kv_status st;
    for (int i = 0; i < KV_SCHEMA_MAX_ARGS; i++)
        if ((st = check_saved(n, &n->saved_args[i])) != KV_OK) return st;
    for (int k = 0; k < KV_SCHEMA_MAX_RETURNS; k++)
        if ((st = check_saved(n, &n->saved_results[k])) != KV_OK) return st;

    kv_ag_fctx c = { .node = n, .grad_out = grad_out, .grad_in = grad_in, .err = KV_OK };
    st = kv_ag_finish(&c, n->fn(&c));
    kv_ag_count_executed();
    if (st != KV_OK) {
        for (int i = 0; i < n->ninputs; i++) {
            kv_tensor_release(grad_in[i]);
            grad_in[i] = NULL;
        }
    }
    return st;
}

/* ---- built-in nodes ---- */

/* A view may differ from its base by lazy bits (conj, _neg_view): its
 * values are then conj and/or minus the base's, and gradients cross the
 * boundary through the same map (conj(g), -g). */
static kv_tensor *lazy_map(kv_ag_fctx *c, kv_tensor *g, kv_keyset view_keys, kv_keyset base_keys) {
    const kv_keyset diff = (view_keys ^ base_keys);
    if (g && kv_keyset_has(diff, KV_KEY_CONJUGATE)) g = kv_ag_conj(c, g);
    if (g && kv_keyset_has(diff, KV_KEY_NEGATIVE)) g = kv_ag_keep(c, kv_neg(g));
    return g;
}

kv_status kv_ag_f_view_regen(kv_ag_fctx *c) {
    const kv_ag_node *n = c->node;
    kv_tensor *g = kv_ag_grad(c, 0);
    if (g == NULL || !n->needs[0]) return KV_OK;
    const kv_ag_tmeta *b = &n->in_meta[0], *v = &n->view;
    g = lazy_map(c, g, v->keys, b->keys);
    if (g == NULL) return KV_OK;
    kv_ag_set(c, 0,
              kv_ag_keep(c, kv_as_strided_backward(g, kv_ag_tmeta_sizes(b), (kv_int_list){ b->strides, b->ndim },
                                                   b->offset, kv_ag_tmeta_sizes(v),
                                                   (kv_int_list){ v->strides, v->ndim }, v->offset)));
    return KV_OK;
}

kv_status kv_ag_f_not_implemented(kv_ag_fctx *c) {
    return kv_error(KV_ERR_INVALID_ARG, "%s: the derivative for '%s' is not implemented.", c->node->name,
                    kv_op_name(c->node->op));
}

/* The base's gradient is the incoming one with the view's region
 * replaced by what the in-place op's own formula gives for its self; the
 * op's other inputs get that formula's gradients directly. The region is
 * addressed through a copy of the gradient laid out with the base's
 * strides, so the view's strides and offset mean the same thing in it. */
kv_status kv_ag_f_copy_slices(kv_ag_fctx *c) {
    kv_ag_node *n = c->node;
    kv_tensor *g = kv_ag_grad(c, 0);
    if (g == NULL) return KV_OK;
    const kv_ag_tmeta *b = &n->in_meta[0], *v = &n->view;
    const int64_t rel = v->offset - b->offset;
    if (rel < 0)
        return kv_error(KV_ERR_INVALID_ARG,
                        "CopySlices: the view written in place starts before its base's storage offset (%lld < "
                        "%lld): not supported",
                        (long long)v->offset, (long long)b->offset);
    kv_tensor *result = kv_ag_keep(c, kv_tensor_empty_strided(b->sizes, b->strides, b->ndim, g->dtype, g->device));
    if (result == NULL) return KV_OK;
    if (kv_copy_(result, g, false) != KV_OK) {
        kv_ag_keep(c, NULL);
        return KV_OK;
    }
    kv_tensor *slice = kv_ag_keep(c, kv_as_strided(result, kv_ag_tmeta_sizes(v),
                                                   (kv_int_list){ v->strides, v->ndim }, &rel));
    kv_tensor *slice_grad = lazy_map(c, kv_ag_keep(c, kv_clone(slice, NULL)), v->keys, b->keys);
    if (slice_grad == NULL) return KV_OK;
    kv_ag_node *inner = n->inner;
    kv_tensor **ig = calloc((size_t)(inner->ninputs > 0 ? inner->ninputs : 1), sizeof *ig);
    if (ig == NULL) return kv_error(KV_ERR_OOM, "CopySlices: out of host memory");
    kv_tensor *inner_out[KV_SCHEMA_MAX_RETURNS] = { slice_grad };
    kv_status st = kv_ag_node_run(inner, inner_out, ig);
    kv_tensor *self_grad = (st == KV_OK && ig[0]) ? lazy_map(c, ig[0], v->keys, b->keys) : NULL;
    /* A failed map left its error in c, which the caller raises. */
    if (st == KV_OK && (ig[0] == NULL || self_grad)) {
        /* An overlapping view can only have been written by fill_ or zero_
         * (every other write into one is refused), whose self gradient is
         * zero: zero_ writes it, where copy_ would refuse the overlap. */
        const bool overlapping = kv_tensor_internal_overlap(slice, NULL) != KV_OVERLAP_NO;
        const char *iname = inner->op ? kv_op_name(inner->op) : inner->name;
        if (overlapping && self_grad && strcmp(iname, "fill_.Scalar") != 0 && strcmp(iname, "zero_") != 0)
            st = kv_error(KV_ERR_INVALID_ARG,
                          "CopySlices: %s wrote a view whose elements overlap in memory; only fill_ and zero_ may",
                          iname);
        else
            st = self_grad && !overlapping ? kv_copy_(slice, self_grad, false) : kv_zero_(slice);
        if (st == KV_OK) {
            kv_tensor_retain(result);
            c->grad_in[0] = result;
            for (int i = 1; i < n->ninputs && i < inner->ninputs; i++) {
                c->grad_in[i] = ig[i];
                ig[i] = NULL;
            }
        }
    }
    for (int i = 0; i < inner->ninputs; i++) kv_tensor_release(ig[i]);
    free(ig);
    return st;
}

kv_status kv_ag_copy_slices(kv_tensor *view, kv_ag_node *inner) {
    struct kv_autograd_meta *m = view->autograd;
    kv_tensor *base = m->base;
    struct kv_autograd_meta *bm = kv_ag_meta_ensure(base);
    if (bm == NULL) return kv_last_error();
    kv_ag_node *cs = kv_ag_node_new("CopySlices", kv_ag_f_copy_slices, inner->ninputs, 1);
    if (cs == NULL) return kv_last_error();
    memcpy(cs->in_first, inner->in_first, sizeof cs->in_first);
    memcpy(cs->in_count, inner->in_count, sizeof cs->in_count);
    kv_ag_tmeta_of(base, &cs->in_meta[0]);
    cs->edges[0] = kv_ag_edge_of(base);
    cs->needs[0] = cs->edges[0].node || cs->edges[0].leaf;
    for (int i = 1; i < inner->ninputs; i++) {
        cs->edges[i] = inner->edges[i];
        inner->edges[i] = (kv_ag_edge){ NULL, NULL, 0 };
        cs->in_meta[i] = inner->in_meta[i];
        cs->needs[i] = inner->needs[i];
    }
    kv_ag_edge_clear(&inner->edges[0]);
    inner->needs[0] = true;
    kv_ag_node_retain(inner);
    cs->inner = inner;
    cs->has_saved = inner->has_saved;
    kv_ag_tmeta_of(view, &cs->view);
    cs->out_meta[0] = cs->in_meta[0];

    kv_ag_meta_set_grad_fn(bm, cs, 0);
    kv_ag_node_release(cs);
    bm->requires_grad = true;
    base->keys = kv_keyset_add(base->keys, KV_KEY_AUTOGRAD);
    /* The view's own history is now the base's: regenerate on next use. */
    m->requires_grad = true;
    m->view_version = -1;
    view->keys = kv_keyset_add(view->keys, KV_KEY_AUTOGRAD);
    return KV_OK;
}
