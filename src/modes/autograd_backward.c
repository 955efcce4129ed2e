/* kv_backward: the engine.
 *
 * Order. An iterative depth-first search from the root's node gives a
 * post-order of every node reachable through edges; its reverse is a
 * topological order (a node runs after every node that feeds it a
 * gradient), so each node runs once with its gradients complete. Nodes
 * are run one at a time on the calling thread, with grad mode off.
 *
 * Per gradient a node produces, before it moves on (PyTorch's
 * validate_outputs): a gradient larger than its input's shape is summed
 * down to it (broadcasting), a complex gradient of a real input keeps its
 * real part, a dtype mismatch is cast, a device mismatch is an error.
 * Gradients meeting at one node input are added; at a leaf they are added
 * into .grad (the first one is stolen when nothing else references it,
 * else copied, so two leaves never share one .grad tensor). After a node
 * ran, its saved tensors are freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/ops.h"
#include "modes/autograd_internal.h"

/* ---- the visit set: node pointer -> post-order index ---- */

typedef struct ag_visit {
    kv_ag_node **keys;
    int *vals;
    size_t cap; /* power of two */
    size_t n;
} ag_visit;

static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static int *visit_slot(ag_visit *v, kv_ag_node *n, bool insert) {
    size_t i = hash_ptr(n, v->cap);
    while (v->keys[i]) {
        if (v->keys[i] == n) return &v->vals[i];
        i = (i + 1) & (v->cap - 1);
    }
    if (!insert) return NULL;
    v->keys[i] = n;
    v->vals[i] = -1;
    v->n++;
    return &v->vals[i];
}

static kv_status visit_init(ag_visit *v, size_t cap) {
    v->cap = cap;
    v->n = 0;
    v->keys = calloc(cap, sizeof *v->keys);
    v->vals = calloc(cap, sizeof *v->vals);
    if (v->keys == NULL || v->vals == NULL) {
        free(v->keys);
        free(v->vals);
        return kv_error(KV_ERR_OOM, "backward: out of host memory");
    }
    return KV_OK;
}

static void visit_free(ag_visit *v) {
    free(v->keys);
    free(v->vals);
}

static kv_status visit_grow(ag_visit *v) {
    ag_visit bigger;
    kv_status st = visit_init(&bigger, v->cap * 2);
    if (st != KV_OK) return st;
    for (size_t i = 0; i < v->cap; i++)
        if (v->keys[i]) *visit_slot(&bigger, v->keys[i], true) = v->vals[i];
    visit_free(v);
    *v = bigger;
    return KV_OK;
}

/* ---- topological order ---- */

typedef struct ag_graph {
    ag_visit visit;
    kv_ag_node **order; /* post-order */
    int n, cap;
} ag_graph;

typedef struct ag_frame {
    kv_ag_node *node;
    int next;
} ag_frame;

static kv_status push_order(ag_graph *g, kv_ag_node *n) {
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 64;
        kv_ag_node **grown = realloc(g->order, (size_t)cap * sizeof *grown);
        if (grown == NULL) return kv_error(KV_ERR_OOM, "backward: out of host memory");
        g->order = grown;
        g->cap = cap;
    }
    *visit_slot(&g->visit, n, false) = g->n;
    g->order[g->n++] = n;
    return KV_OK;
}

static kv_status build_order(ag_graph *g, kv_ag_node *root) {
    kv_status st = visit_init(&g->visit, 64);
    if (st != KV_OK) return st;
    int cap = 64, top = 0;
    ag_frame *stack = malloc((size_t)cap * sizeof *stack);
    if (stack == NULL) return kv_error(KV_ERR_OOM, "backward: out of host memory");
    visit_slot(&g->visit, root, true);
    stack[top++] = (ag_frame){ root, 0 };
    while (top > 0 && st == KV_OK) {
        ag_frame *f = &stack[top - 1];
        if (f->next == f->node->ninputs) {
            st = push_order(g, f->node);
            top--;
            continue;
        }
        kv_ag_node *child = f->node->edges[f->next++].node;
        if (child == NULL || visit_slot(&g->visit, child, false)) continue;
        if (2 * (g->visit.n + 1) > g->visit.cap && (st = visit_grow(&g->visit)) != KV_OK) break;
        visit_slot(&g->visit, child, true);
        if (top == cap) {
            ag_frame *grown = realloc(stack, (size_t)cap * 2 * sizeof *grown);
            if (grown == NULL) {
                st = kv_error(KV_ERR_OOM, "backward: out of host memory");
                break;
            }
            stack = grown;
            cap *= 2;
        }
        stack[top++] = (ag_frame){ child, 0 };
    }
    free(stack);
    return st;
}

/* ---- gradients ---- */

static kv_tensor *to_dtype_device(kv_tensor *g, const kv_dtype *dt, const kv_device *dev) {
    kv_tensor *r = kv__to_copy(g, dt, NULL, dev, NULL, false, NULL);
    kv_tensor_release(g);
    return r;
}

/* Fits gradient *g (owned) to input j of n; NULL *g when dropped. */
static kv_status validate(const kv_ag_node *n, int j, kv_tensor **g) {
    const kv_ag_tmeta *m = &n->in_meta[j];
    kv_tensor *t = *g;
    if (!m->present) {
        kv_tensor_release(t);
        *g = NULL;
        return KV_OK;
    }
    bool same = t->ndim == m->ndim;
    for (int d = 0; same && d < m->ndim; d++) same = t->sizes[d] == m->sizes[d];
    if (!same) {
        kv_tensor *r = kv_ag_sum_to_owned(t, m->sizes, m->ndim);
        if (r == NULL) {
            char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
            kv_shape_format(t->sizes, t->ndim, a, (int)sizeof a);
            kv_shape_format(m->sizes, m->ndim, b, (int)sizeof b);
            kv_tensor_release(t);
            *g = NULL;
            /* The sum itself failed (a backend declined it, or ran out of
             * memory): that status, not a made-up bug in the formula. */
            const kv_status why = kv_last_error();
            if (why != KV_ERR_SHAPE)
                return kv_error_prefix(why, "backward: Function %s: summing the gradient at index %d from %s to %s",
                                       n->name, j, a, b);
            return kv_error(KV_ERR_INTERNAL,
                            "backward: Function %s returned an invalid gradient at index %d - got %s but expected "
                            "shape compatible with %s",
                            n->name, j, a, b);
        }
        kv_tensor_release(t);
        t = r;
    }
    if (t->dtype != m->dtype) {
        /* _to_copy keeps the real part of a complex value (handle_r_to_c). */
        t = to_dtype_device(t, &m->dtype, NULL);
        if (t == NULL) {
            *g = NULL;
            return kv_last_error();
        }
    }
    if (!kv_device_equal(t->device, m->device)) {
        kv_status st = kv_error(KV_ERR_DEVICE,
                                "backward: Function %s returned an invalid gradient at index %d - expected device "
                                "%s:%d but got %s:%d",
                                n->name, j, kv_device_type_name(m->device.type), m->device.index,
                                kv_device_type_name(t->device.type), t->device.index);
        kv_tensor_release(t);
        *g = NULL;
        return st;
    }
    *g = t;
    return KV_OK;
}

static kv_status accumulate(struct kv_autograd_meta *m, kv_tensor *g) {
    if (m->grad == NULL) {
        const kv_keyset extra = g->keys & KV_KEYSET_FUNCTIONALITY & ~kv_keyset_of(KV_KEY_AUTOGRAD);
        if (atomic_load(&g->refcount) == 1 && atomic_load(&g->storage->refcount) == 1 && g->autograd == NULL &&
            extra == KV_KEYSET_EMPTY) {
            g->keys = kv_keyset_remove(g->keys, KV_KEY_AUTOGRAD);
            m->grad = g;
            return KV_OK;
        }
        kv_tensor *copy = kv_clone(g, NULL);
        kv_tensor_release(g);
        if (copy == NULL) return kv_last_error();
        copy->keys = kv_keyset_remove(copy->keys, KV_KEY_AUTOGRAD);
        m->grad = copy;
        return KV_OK;
    }
    kv_tensor *sum = kv_add(m->grad, g, kv_scalar_int(1));
    kv_tensor_release(g);
    if (sum == NULL) return kv_last_error();
    sum->keys = kv_keyset_remove(sum->keys, KV_KEY_AUTOGRAD);
    kv_tensor_release(m->grad);
    m->grad = sum;
    return KV_OK;
}

/* Adds g (owned) into *slot. */
static kv_status add_into(kv_tensor **slot, kv_tensor *g) {
    if (*slot == NULL) {
        *slot = g;
        return KV_OK;
    }
    kv_tensor *sum = kv_add(*slot, g, kv_scalar_int(1));
    kv_tensor_release(g);
    if (sum == NULL) return kv_last_error();
    kv_tensor_release(*slot);
    *slot = sum;
    return KV_OK;
}

static kv_status run_graph(kv_ag_node *root, int root_nr, kv_tensor *root_grad) {
    ag_graph g = { 0 };
    kv_status st = build_order(&g, root);
    int *offset = NULL;
    kv_tensor **buf = NULL;
    int total = 0;
    if (st == KV_OK) {
        offset = malloc((size_t)(g.n > 0 ? g.n : 1) * sizeof *offset);
        for (int i = 0; offset && i < g.n; i++) {
            offset[i] = total;
            total += g.order[i]->noutputs;
        }
        buf = calloc((size_t)(total > 0 ? total : 1), sizeof *buf);
        if (offset == NULL || buf == NULL) st = kv_error(KV_ERR_OOM, "backward: out of host memory");
    }
    if (st == KV_OK) {
        int ri = *visit_slot(&g.visit, root, false);
        if (root_nr < 0 || root_nr >= root->noutputs)
            st = kv_error(KV_ERR_INTERNAL, "backward: root is output %d of %s, which has %d", root_nr, root->name,
                          root->noutputs);
        else {
            kv_tensor_retain(root_grad);
            buf[offset[ri] + root_nr] = root_grad;
        }
    }
    for (int i = g.n - 1; i >= 0 && st == KV_OK; i--) {
        kv_ag_node *n = g.order[i];
        kv_tensor **gout = &buf[offset[i]];
        bool any = false;
        for (int k = 0; k < n->noutputs; k++) any |= gout[k] != NULL;
        if (!any) continue;
        kv_tensor **gin = calloc((size_t)(n->ninputs > 0 ? n->ninputs : 1), sizeof *gin);
        if (gin == NULL) {
            st = kv_error(KV_ERR_OOM, "backward: out of host memory");
            break;
        }
        st = kv_ag_node_run(n, gout, gin);
        for (int k = 0; k < n->noutputs; k++) {
            kv_tensor_release(gout[k]);
            gout[k] = NULL;
        }
        for (int j = 0; j < n->ninputs; j++) {
            kv_tensor *gj = gin[j];
            gin[j] = NULL;
            const kv_ag_edge *e = &n->edges[j];
            if (gj == NULL) continue;
            if (st != KV_OK || (e->node == NULL && e->leaf == NULL)) {
                kv_tensor_release(gj);
                continue;
            }
            st = validate(n, j, &gj);
            if (st != KV_OK) continue;
            if (e->leaf) {
                st = accumulate(e->leaf, gj);
            } else {
                int *idx = visit_slot(&g.visit, e->node, false);
                if (idx == NULL || *idx < 0 || e->input_nr < 0 || e->input_nr >= e->node->noutputs) {
                    kv_tensor_release(gj);
                    st = kv_error(KV_ERR_INTERNAL, "backward: %s feeds a node outside the graph", n->name);
                } else {
                    st = add_into(&buf[offset[*idx] + e->input_nr], gj);
                }
            }
        }
        free(gin);
        kv_ag_node_release_saved(n);
    }
    for (int i = 0; buf && i < total; i++) kv_tensor_release(buf[i]);
    free(buf);
    free(offset);
    free(g.order);
    visit_free(&g.visit);
    return st;
}

kv_status kv_backward(kv_tensor *root, kv_tensor *grad_output) {
    kv_status st = kv_dispatch_init();
    if (st != KV_OK) return st;
    if (root == NULL) return kv_error(KV_ERR_INVALID_ARG, "backward: argument 'root': NULL tensor");
    if (!kv_ag_requires_grad(root))
        return kv_error(KV_ERR_INVALID_ARG,
                        "backward: argument 'root': element 0 of tensors does not require grad and does not have a "
                        "grad_fn");
    if (grad_output == NULL && kv_tensor_numel(root) != 1)
        return kv_error(KV_ERR_INVALID_ARG,
                        "backward: argument 'grad_output': grad can be implicitly created only for scalar outputs");
    if (grad_output && !kv_same_shape(grad_output, root)) {
        char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
        kv_shape_format(grad_output->sizes, grad_output->ndim, a, (int)sizeof a);
        kv_shape_format(root->sizes, root->ndim, b, (int)sizeof b);
        return kv_error(KV_ERR_SHAPE,
                        "backward: argument 'grad_output': Mismatch in shape: grad_output[0] has a shape of %s and "
                        "output[0] has a shape of %s.",
                        a, b);
    }
    kv_ag_count_backward();
    kv_tls_keys mode = kv_no_grad_push();
    kv_tensor *g = grad_output;
    if (g) kv_tensor_retain(g);
    else g = kv_ones((kv_int_list){ root->sizes, root->ndim }, &root->dtype, NULL, &root->device, NULL);
    if (g == NULL) {
        kv_grad_mode_pop(mode);
        return kv_last_error();
    }
    kv_ag_node *node = kv_ag_current_grad_fn(root);
    if (node == NULL) {
        /* A leaf root: its gradient is the seed itself. */
        kv_ag_node fake = { .name = "backward" };
        fake.in_meta = &(kv_ag_tmeta){ 0 };
        kv_ag_tmeta_of(root, fake.in_meta);
        st = validate(&fake, 0, &g);
        if (st == KV_OK && g) st = accumulate(root->autograd, g);
    } else {
        kv_ag_node_retain(node);
        st = run_graph(node, root->autograd->output_nr, g);
        kv_ag_node_release(node);
        kv_tensor_release(g);
    }
    kv_grad_mode_pop(mode);
    return st;
}
