/* Autograd records, the requires_grad / .grad / grad_fn API, grad mode and
 * the counters. */
#include <stdlib.h>

#include "modes/autograd_internal.h"

/* ---- counters ---- */

static atomic_llong g_nodes_created;
static atomic_llong g_nodes_executed;
static atomic_llong g_backward_calls;
static atomic_llong g_kernel_calls;
static atomic_llong g_kernel_recorded;

void kv_ag_count_node(void) { atomic_fetch_add_explicit(&g_nodes_created, 1, memory_order_relaxed); }
void kv_ag_count_executed(void) { atomic_fetch_add_explicit(&g_nodes_executed, 1, memory_order_relaxed); }
void kv_ag_count_backward(void) { atomic_fetch_add_explicit(&g_backward_calls, 1, memory_order_relaxed); }

void kv_ag_count_kernel(bool recorded) {
    atomic_fetch_add_explicit(&g_kernel_calls, 1, memory_order_relaxed);
    if (recorded) atomic_fetch_add_explicit(&g_kernel_recorded, 1, memory_order_relaxed);
}

kv_autograd_counters kv_autograd_counters_get(void) {
    return (kv_autograd_counters){
        .nodes_created = atomic_load(&g_nodes_created),
        .nodes_executed = atomic_load(&g_nodes_executed),
        .backward_calls = atomic_load(&g_backward_calls),
        .kernel_calls = atomic_load(&g_kernel_calls),
        .kernel_recorded = atomic_load(&g_kernel_recorded),
    };
}

void kv_autograd_counters_reset(void) {
    atomic_store(&g_nodes_created, 0);
    atomic_store(&g_nodes_executed, 0);
    atomic_store(&g_backward_calls, 0);
    atomic_store(&g_kernel_calls, 0);
    atomic_store(&g_kernel_recorded, 0);
}

/* ---- records ---- */

struct kv_autograd_meta *kv_ag_meta_new(void) {
    struct kv_autograd_meta *m = calloc(1, sizeof *m);
    if (m == NULL) {
        kv_error(KV_ERR_OOM, "autograd: out of host memory for an autograd record");
        return NULL;
    }
    atomic_init(&m->refcount, 1);
    m->view_version = -1;
    return m;
}

void kv_ag_meta_retain(struct kv_autograd_meta *m) {
    if (m) atomic_fetch_add_explicit(&m->refcount, 1, memory_order_relaxed);
}

void kv_ag_meta_release(struct kv_autograd_meta *m) {
    if (m == NULL) return;
    if (atomic_fetch_sub_explicit(&m->refcount, 1, memory_order_acq_rel) != 1) return;
    kv_tensor_release(m->grad);
    kv_ag_node_release(m->grad_fn);
    kv_tensor_release(m->base);
    free(m);
}

static void free_hook(struct kv_autograd_meta *m) { kv_ag_meta_release(m); }

void kv_ag_meta_install_hook(void) { kv_tensor_autograd_free_hook = free_hook; }

struct kv_autograd_meta *kv_ag_meta_ensure(kv_tensor *t) {
    if (t->autograd == NULL) t->autograd = kv_ag_meta_new();
    return t->autograd;
}

bool kv_ag_requires_grad(const kv_tensor *t) { return t && t->autograd && t->autograd->requires_grad; }

void kv_ag_meta_set_grad_fn(struct kv_autograd_meta *m, kv_ag_node *node, int output_nr) {
    kv_ag_node_retain(node);
    kv_ag_node *old = m->grad_fn;
    m->grad_fn = node;
    m->output_nr = node ? output_nr : 0;
    kv_ag_node_release(old);
}

/* ---- public API ---- */

kv_status kv_tensor_set_requires_grad(kv_tensor *t, bool requires_grad) {
    if (t == NULL) return kv_error(KV_ERR_INVALID_ARG, "set_requires_grad: argument 'self': NULL tensor");
    /* The free hook must be in place before the first record exists, or
     * that record would leak; registration installs it too, and installing
     * it twice is harmless. */
    kv_ag_meta_install_hook();
    if (!requires_grad) {
        if (t->autograd && t->autograd->grad_fn)
            return kv_error(KV_ERR_INVALID_ARG,
                            "set_requires_grad: argument 'self': you can only change requires_grad flags of leaf "
                            "variables. If you want to use a computed variable in a subgraph that doesn't require "
                            "differentiation use var_no_grad = var.detach().");
        if (t->autograd) t->autograd->requires_grad = false;
        t->keys = kv_keyset_remove(t->keys, KV_KEY_AUTOGRAD);
        return KV_OK;
    }
    if (!kv_dtype_is_floating(t->dtype) && !kv_dtype_is_complex(t->dtype))
        return kv_error(KV_ERR_DTYPE,
                        "set_requires_grad: argument 'self': only Tensors of floating point and complex dtype can "
                        "require gradients (got %s)",
                        kv_dtype_name(t->dtype));
    struct kv_autograd_meta *m = kv_ag_meta_ensure(t);
    if (m == NULL) return kv_last_error();
    m->requires_grad = true;
    t->keys = kv_keyset_add(t->keys, KV_KEY_AUTOGRAD);
    return KV_OK;
}

bool kv_tensor_requires_grad(const kv_tensor *t) { return kv_ag_requires_grad(t); }

bool kv_tensor_is_leaf(const kv_tensor *t) { return t == NULL || t->autograd == NULL || t->autograd->grad_fn == NULL; }

kv_tensor *kv_tensor_grad(const kv_tensor *t) {
    if (t == NULL || t->autograd == NULL || t->autograd->grad_fn) return NULL;
    return t->autograd->grad;
}

void kv_tensor_clear_grad(kv_tensor *t) {
    if (t == NULL || t->autograd == NULL) return;
    kv_tensor_release(t->autograd->grad);
    t->autograd->grad = NULL;
}

const char *kv_tensor_grad_fn_name(kv_tensor *t) {
    if (t == NULL) return NULL;
    kv_ag_node *n = kv_ag_current_grad_fn(t);
    return n ? n->name : NULL;
}

int kv_tensor_output_nr(const kv_tensor *t) {
    return (t && t->autograd && t->autograd->grad_fn) ? t->autograd->output_nr : 0;
}

void kv_autograd_share(kv_tensor *dst, const kv_tensor *src) {
    if (dst == NULL || src == NULL || dst == src) return;
    struct kv_autograd_meta *old = dst->autograd;
    kv_ag_meta_retain(src->autograd);
    dst->autograd = src->autograd;
    kv_ag_meta_release(old);
    if (kv_keyset_has(src->keys, KV_KEY_AUTOGRAD)) dst->keys = kv_keyset_add(dst->keys, KV_KEY_AUTOGRAD);
    else dst->keys = kv_keyset_remove(dst->keys, KV_KEY_AUTOGRAD);
}

/* ---- grad mode ---- */

bool kv_grad_mode_enabled(void) { return !kv_keyset_has(kv_tls_get().excluded, KV_KEY_AUTOGRAD); }

kv_tls_keys kv_no_grad_push(void) { return kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD)); }

kv_tls_keys kv_enable_grad_push(void) {
    kv_tls_keys saved = kv_tls_get();
    kv_tls_keys now = saved;
    now.excluded = kv_keyset_remove(now.excluded, KV_KEY_AUTOGRAD);
    kv_tls_set(now);
    return saved;
}

void kv_grad_mode_pop(kv_tls_keys saved) { kv_tls_pop(saved); }
