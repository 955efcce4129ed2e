/* The autograd history a slow path recorded, moved from the target to
 * accel.
 *
 * On the slow path autograd runs on the boxed aliases: the nodes it makes
 * record target devices (what the forward pass saw) and save target
 * tensors. Backward then meets accel gradients (the root's seed is made on
 * the root's device, accel) and checks each gradient's device against the
 * recorded one. So, once a slow path returns, every node it created gets
 * its recorded devices and saved tensors re-tagged as accel, the same
 * re-tagging its outputs got; the inputs it did not box (0-dim CPU
 * tensors) and the returns it did not re-tag (_to_copy to another device)
 * keep theirs. A view's recorded base that is one of the boxing aliases
 * becomes the caller's tensor again.
 *
 * This reads autograd's internal records (modes/autograd_internal.h)
 * because kv/autograd.h has no public way to do it; the walk is kept to
 * this file so the coupling has one place. Nodes made by the call are the
 * ones reachable from its outputs without passing through an input's
 * grad_fn (noted before the call) or a node that records no target
 * device (history re-tagged by an earlier call). */
#include "boxing/boxing_internal.h"

#include <stdlib.h>
#include <string.h>

#include "modes/autograd_internal.h"

static bool is_target(kv_device d, kv_key target) { return d.type == (kv_device_type)target; }

static void retag_meta(kv_ag_tmeta *m, kv_key target) {
    if (!m->present || !is_target(m->device, target)) return;
    m->device = (kv_device){ KV_DEVICE_ACCEL, 0 };
    m->keys = kv_accel_keys_from_target(m->keys, target);
}

static void retag_saved(kv_ag_saved_var *s, kv_key target) {
    if (s->t == NULL || !is_target(s->t->device, target)) return;
    kv_tensor *r = kv_accel_retag_owned(s->t);
    /* On failure (out of memory) the saved value is gone; backward then
     * reports it as freed, which is better than a wrong device. */
    s->t = r;
}

static bool records_target(const kv_ag_node *n, kv_key target) {
    for (int i = 0; i < n->ninputs; i++)
        if (n->in_meta[i].present && is_target(n->in_meta[i].device, target)) return true;
    for (int k = 0; k < n->noutputs; k++)
        if (n->out_meta[k].present && is_target(n->out_meta[k].device, target)) return true;
    if (n->view.present && is_target(n->view.device, target)) return true;
    return false;
}

/* Whether input `index` of `slot` was boxed (the caller's tensor is accel). */
static bool input_was_accel(const kv_accel_box *b, int slot, int index) {
    const kv_ivalue *v = &b->caller->slots[slot];
    if (v->tag == KV_IV_TENSOR) return index == 0 && v->v.tensor->device.type == KV_DEVICE_ACCEL;
    if (v->tag == KV_IV_TENSOR_LIST)
        return index < v->v.tensors.n && v->v.tensors.items[index]->device.type == KV_DEVICE_ACCEL;
    return false;
}

/* Output k of the call: return k, or for an op that returns nothing but
 * writes a Tensor(a!)[] (in-place foreach) the caller's element k, whose
 * history is the node's output k. NULL when there is none. */
static kv_tensor *output_of(const kv_accel_box *b, int k) {
    if (k < b->nreturns) return b->returns[k].tag == KV_IV_TENSOR ? b->returns[k].v.tensor : NULL;
    const kv_schema *s = kv_op_schema(b->op);
    const int l = s->nreturns == 0 ? kv_schema_mutable_list_arg(s) : -1;
    if (l < 0 || l >= b->caller->size || b->caller->slots[l].tag != KV_IV_TENSOR_LIST) return NULL;
    const kv_tensor_list list = b->caller->slots[l].v.tensors;
    return k < list.n ? list.items[k] : NULL;
}

/* The op's own node: only what was boxed or re-tagged moves. */
static void retag_op_node(kv_ag_node *n, const kv_accel_box *b) {
    const kv_key target = b->target;
    const int nargs = kv_op_schema(b->op)->nargs;
    const int nslots = nargs < KV_SCHEMA_MAX_ARGS ? nargs : KV_SCHEMA_MAX_ARGS;
    for (int s = 0; s < nslots; s++) {
        if (n->in_first[s] < 0) continue;
        for (int e = 0; e < n->in_count[s]; e++) {
            int i = n->in_first[s] + e;
            if (i < n->ninputs && input_was_accel(b, s, e)) retag_meta(&n->in_meta[i], target);
        }
        if (input_was_accel(b, s, 0)) retag_saved(&n->saved_args[s], target);
    }
    for (int k = 0; k < n->noutputs; k++) {
        const kv_tensor *out = output_of(b, k);
        if (out == NULL || out->device.type != KV_DEVICE_ACCEL) continue;
        retag_meta(&n->out_meta[k], target);
        if (k < KV_SCHEMA_MAX_RETURNS) retag_saved(&n->saved_results[k], target);
    }
    retag_meta(&n->view, target);
}

/* A node made inside the call (a cast, a CopySlices, a regenerated view):
 * everything it recorded on the target came from boxed tensors. */
static void retag_inner_node(kv_ag_node *n, kv_key target) {
    for (int i = 0; i < n->ninputs; i++) retag_meta(&n->in_meta[i], target);
    for (int k = 0; k < n->noutputs; k++) {
        retag_meta(&n->out_meta[k], target);
        if (k < KV_SCHEMA_MAX_RETURNS) retag_saved(&n->saved_results[k], target);
    }
    for (int s = 0; s < n->nargs && s < KV_SCHEMA_MAX_ARGS; s++) retag_saved(&n->saved_args[s], target);
    retag_meta(&n->view, target);
}

typedef struct node_list {
    kv_ag_node **items;
    int n, cap;
    bool failed;
} node_list;

static void list_push(node_list *l, kv_ag_node *node) {
    if (node == NULL || l->failed) return;
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        kv_ag_node **items = realloc(l->items, (size_t)cap * sizeof *items);
        if (items == NULL) {
            l->failed = true;
            return;
        }
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = node;
}

static bool list_has(const node_list *l, const kv_ag_node *node) {
    for (int i = 0; i < l->n; i++)
        if (l->items[i] == node) return true;
    return false;
}

void kv_accel_history_note_inputs(kv_accel_box *b) {
    b->history_inputs = 0;
    b->history_live = false;
    const kv_schema *s = kv_op_schema(b->op);
    for (int i = 0; i < s->nargs && i < b->caller->size; i++) {
        const kv_ivalue *v = &b->caller->slots[i];
        int n = v->tag == KV_IV_TENSOR ? 1 : v->tag == KV_IV_TENSOR_LIST ? v->v.tensors.n : 0;
        for (int e = 0; e < n; e++) {
            const kv_tensor *t = v->tag == KV_IV_TENSOR ? v->v.tensor : v->v.tensors.items[e];
            if (!kv_keyset_has(t->keys, KV_KEY_AUTOGRAD)) continue;
            b->history_live = true;
            if (t->autograd == NULL || t->autograd->grad_fn == NULL) continue;
            /* Past the first few, the walk's other guard (a node that
             * records no target device ends it) keeps it out of older
             * history. */
            if (b->history_inputs < KV_ACCEL_BOX_INLINE) b->history_stop[b->history_inputs++] = t->autograd->grad_fn;
        }
    }
}

/* The view base a record holds: one of our aliases becomes the caller's. */
static void unalias_base(kv_accel_box *b, struct kv_autograd_meta *m) {
    if (m == NULL || m->base == NULL) return;
    for (int i = 0; i < b->nowned; i++) {
        if (b->owned[i].made == m->base && b->owned[i].orig != NULL) {
            kv_tensor *orig = (kv_tensor *)b->owned[i].orig;
            kv_tensor_retain(orig);
            kv_tensor_release(m->base);
            m->base = orig;
            return;
        }
    }
}

void kv_accel_history_retag(kv_accel_box *b) {
    if (!b->history_live) return;
    node_list todo = { NULL, 0, 0, false }, seen = { NULL, 0, 0, false }, roots = { NULL, 0, 0, false };
    for (int k = 0;; k++) {
        kv_tensor *t = output_of(b, k);
        if (t == NULL && k >= b->nreturns) break; /* past the returns and the written list */
        if (t == NULL || t->autograd == NULL) continue;
        unalias_base(b, t->autograd);
        list_push(&roots, t->autograd->grad_fn);
        list_push(&todo, t->autograd->grad_fn);
        /* An in-place op on a view rebased the base's history. */
        if (t->autograd->base != NULL && t->autograd->base->autograd != NULL)
            list_push(&todo, t->autograd->base->autograd->grad_fn);
    }
    while (todo.n > 0 && !todo.failed && !seen.failed) {
        kv_ag_node *n = todo.items[--todo.n];
        if (list_has(&seen, n)) continue;
        bool stop = false;
        for (int i = 0; i < b->history_inputs && !stop; i++) stop = b->history_stop[i] == n;
        if (stop || !records_target(n, b->target)) continue;
        list_push(&seen, n);
        if (n->op == b->op && list_has(&roots, n)) retag_op_node(n, b);
        else retag_inner_node(n, b->target);
        for (int i = 0; i < n->ninputs; i++) list_push(&todo, n->edges[i].node);
        list_push(&todo, n->inner);
    }
    free(todo.items);
    free(seen.items);
    free(roots.items);
}
