/* The one boxed kernel at KV_KEY_AUTOGRAD, and its registration.
 *
 * Per call: when no tensor argument requires grad, the kernel only runs
 * the layers below. Otherwise it checks in-place rules, records the edges
 * of the inputs and what the op's formula row asks to save (tensors as
 * detached aliases with their version, non-tensor arguments copied), runs
 * the layers below with Autograd excluded from the thread-local set (so
 * ops called inside lower kernels record nothing either), and attaches
 * the node to the differentiable outputs. An in-place op rebases its
 * self's history onto the node, or, when self is a view, its base's
 * history onto a CopySlices node.
 *
 * Registration: the kernel per op of the formula table; a fallthrough per
 * non-differentiable op; and the same kernel as the Autograd fallback for
 * every other op (run-time ops included), where it records a
 * NotImplemented node whose backward reports the missing formula. Grad
 * mode off is Autograd in the TLS excluded set, so none of this runs. */
#include <stdlib.h>
#include <string.h>

#include "kv/ops.h"
#include "modes/autograd_internal.h"

static kv_status run_below(const kv_op *op, kv_keyset below, kv_stack *stack) {
    kv_tls_keys saved = kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD));
    kv_status st = kv_redispatch(op, below, stack);
    kv_tls_pop(saved);
    return st;
}

static bool is_tensor_arg(const kv_arg *a) { return a->type.kind == KV_TYPE_TENSOR; }

/* Inputs flattened in schema order; NULL for an absent Tensor?. */
#define AG_INLINE_INPUTS 16

typedef struct ag_inputs {
    int n;
    bool any_requires_grad;
    kv_tensor **t;                        /* inline, or heap for long lists */
    kv_tensor *inline_t[AG_INLINE_INPUTS];
    kv_tensor *slot_tensor[KV_SCHEMA_MAX_ARGS]; /* the Tensor / Tensor? of each slot */
    int first[KV_SCHEMA_MAX_ARGS];
    int count[KV_SCHEMA_MAX_ARGS];
} ag_inputs;

static kv_status gather_inputs(const kv_schema *s, const kv_stack *stack, ag_inputs *in) {
    memset(in, 0, sizeof *in);
    for (int i = 0; i < KV_SCHEMA_MAX_ARGS; i++) in->first[i] = -1;
    int n = 0;
    for (int i = 0; i < s->nargs && i < stack->size; i++) {
        if (!is_tensor_arg(&s->args[i])) continue;
        const kv_ivalue *v = &stack->slots[i];
        n += v->tag == KV_IV_TENSOR_LIST ? v->v.tensors.n : (s->args[i].type.is_list ? 0 : 1);
    }
    /* Every call on a tensor carrying the key comes here: no heap
     * traffic unless a tensor list is long. */
    in->t = n <= AG_INLINE_INPUTS ? in->inline_t : calloc((size_t)n, sizeof *in->t);
    if (in->t == NULL) return kv_error(KV_ERR_OOM, "autograd: out of host memory");
    for (int i = 0; i < s->nargs && i < stack->size; i++) {
        if (!is_tensor_arg(&s->args[i])) continue;
        const kv_ivalue *v = &stack->slots[i];
        in->first[i] = in->n;
        if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n; e++) in->t[in->n++] = v->v.tensors.items[e];
        } else if (!s->args[i].type.is_list) {
            kv_tensor *t = v->tag == KV_IV_TENSOR ? v->v.tensor : NULL;
            in->slot_tensor[i] = t;
            in->t[in->n++] = t;
        }
        in->count[i] = in->n - in->first[i];
    }
    for (int j = 0; j < in->n; j++)
        if (kv_ag_requires_grad(in->t[j])) in->any_requires_grad = true;
    return KV_OK;
}

static void free_inputs(ag_inputs *in) {
    if (in->t != in->inline_t) free(in->t);
}

static bool is_input(const ag_inputs *in, const kv_tensor *t) {
    for (int j = 0; j < in->n; j++)
        if (in->t[j] == t) return true;
    return false;
}

/* Outputs that are new tensors and do not require grad lose the Autograd
 * key a view kernel copies from its input, so they dispatch like any
 * other tensor that does not require grad. */
static void strip_outputs(const kv_schema *s, const ag_inputs *in, kv_stack *stack) {
    const int nout = kv_schema_returns_list(s) ? stack->size : s->nreturns; /* a Tensor[]: one per element */
    for (int k = 0; k < stack->size && k < nout; k++) {
        if (stack->slots[k].tag != KV_IV_TENSOR) continue;
        kv_tensor *out = stack->slots[k].v.tensor;
        if (out && !is_input(in, out) && !kv_ag_requires_grad(out))
            out->keys = kv_keyset_remove(out->keys, KV_KEY_AUTOGRAD);
    }
}

static kv_status check_mutable_one(const kv_op *op, const kv_arg *a, const kv_tensor *t) {
    if (kv_ag_requires_grad(t) && kv_tensor_is_leaf(t))
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument '%s': a leaf Variable that requires grad is being used in an in-place "
                        "operation.",
                        kv_op_name(op), a->name);
    kv_tensor *base = t->autograd ? t->autograd->base : NULL;
    if (base && kv_ag_requires_grad(base) && kv_tensor_is_leaf(base))
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument '%s': a view of a leaf Variable that requires grad is being used in an "
                        "in-place operation.",
                        kv_op_name(op), a->name);
    return KV_OK;
}

static kv_status check_mutable(const kv_op *op, const kv_schema *s, const ag_inputs *in) {
    for (int i = 0; i < s->nargs; i++) {
        if (!is_tensor_arg(&s->args[i]) || !s->args[i].alias.is_write) continue;
        /* A Tensor(a!)[] (in-place foreach): every element is written. */
        const int n = s->args[i].type.is_list ? in->count[i] : 1;
        for (int e = 0; e < n; e++) {
            kv_tensor *t = s->args[i].type.is_list ? in->t[in->first[i] + e] : in->slot_tensor[i];
            if (t == NULL) continue;
            kv_status st = check_mutable_one(op, &s->args[i], t);
            if (st != KV_OK) return st;
            /* CopySlices wraps a node whose input 0 is the one written
             * tensor; a list element that is a view would need one per
             * element. Refused before anything is written, rather than
             * recorded with a wrong graph. */
            if (s->args[i].type.is_list && t->autograd && t->autograd->base)
                return kv_error(KV_ERR_INVALID_ARG,
                                "%s: argument '%s': element %d is a view recorded by autograd; kvsuite does not "
                                "record an in-place foreach op on views (clone the element first)",
                                kv_op_name(op), s->args[i].name, e);
        }
    }
    return KV_OK;
}

/* The outputs a call makes: the schema's returns, one per element for a
 * Tensor[] return (foreach), and for an op that returns nothing but
 * writes a Tensor(a!)[] (in-place foreach) one per written element, each
 * element's history rebased onto that output. */
static int node_outputs(const kv_schema *s, const kv_stack *stack, const ag_inputs *in) {
    const int l = s->nreturns == 0 ? kv_schema_mutable_list_arg(s) : -1;
    if (l >= 0) return in->count[l];
    const int n = kv_schema_return_count(s, stack);
    return n >= 0 ? n : s->nreturns;
}

/* The argument a return aliases (its alias set), or NULL. For a view it
 * is the viewed tensor; for an in-place return, the written argument. */
static kv_tensor *alias_source(const kv_schema *s, const ag_inputs *in, int k) {
    const kv_alias_info *ra = &s->returns[k].alias;
    if (!ra->set) return NULL;
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].alias.set == ra->set && is_tensor_arg(&s->args[i])) return in->slot_tensor[i];
    return NULL;
}

static kv_status save_inputs(const kv_ag_formula *f, const kv_schema *s, const ag_inputs *in, kv_ag_node *node) {
    if (f == NULL) return KV_OK;
    for (int i = 0; i < s->nargs && i < KV_SCHEMA_MAX_ARGS; i++) {
        if (!(f->save_args & KV_AG_BIT(i)) || in->slot_tensor[i] == NULL) continue;
        kv_tensor *t = in->slot_tensor[i];
        kv_status st;
        if (s->args[i].alias.is_write) {
            /* self is about to be overwritten: keep its old values. */
            kv_tls_keys g = kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD));
            kv_tensor *copy = kv_clone(t, NULL);
            kv_tls_pop(g);
            if (copy == NULL) return kv_last_error();
            st = kv_ag_save(&node->saved_args[i], copy);
            kv_tensor_release(copy);
        } else {
            st = kv_ag_save(&node->saved_args[i], t);
        }
        if (st != KV_OK) return st;
        node->has_saved = true;
    }
    return KV_OK;
}

static kv_ag_node *make_node(const kv_op *op, const kv_ag_formula *f, const kv_schema *s, const kv_stack *stack,
                             const ag_inputs *in) {
    kv_ag_node *node = kv_ag_node_new(f ? f->node_name : "NotImplemented", f ? f->fn : kv_ag_f_not_implemented,
                                      in->n, node_outputs(s, stack, in));
    if (node == NULL) return NULL;
    node->op = op;
    memcpy(node->in_first, in->first, sizeof node->in_first);
    memcpy(node->in_count, in->count, sizeof node->in_count);
    for (int j = 0; j < in->n; j++) {
        kv_ag_tmeta_of(in->t[j], &node->in_meta[j]);
        node->edges[j] = kv_ag_edge_of(in->t[j]);
        node->needs[j] = node->edges[j].node || node->edges[j].leaf;
    }
    kv_status st = KV_OK;
    for (int i = 0; i < s->nargs && st == KV_OK; i++) {
        st = kv_ag_ivalue_copy(&node->args[i], &stack->slots[i]);
        if (st == KV_OK) node->nargs = i + 1;
    }
    if (st == KV_OK) st = save_inputs(f, s, in, node);
    if (st != KV_OK) {
        kv_ag_node_release(node);
        return NULL;
    }
    return node;
}

static bool differentiable_result(const kv_ag_formula *f, int k, const kv_tensor *out) {
    if (f && f->diff_results && !(f->diff_results & KV_AG_BIT(k))) return false;
    return kv_dtype_is_floating(out->dtype) || kv_dtype_is_complex(out->dtype);
}

/* An in-place result: the history belongs to the caller's tensor `self`
 * (whatever struct the layers below returned for it), rebased onto node
 * output k, through CopySlices when self is a view. */
static kv_status rebase_inplace(kv_tensor *self, kv_ag_node *node, int k) {
    if (self->autograd && self->autograd->base) return kv_ag_copy_slices(self, node);
    struct kv_autograd_meta *m = kv_ag_meta_ensure(self);
    if (m == NULL) return kv_last_error();
    kv_ag_meta_set_grad_fn(m, node, k);
    m->requires_grad = true;
    self->keys = kv_keyset_add(self->keys, KV_KEY_AUTOGRAD);
    return KV_OK;
}

/* A Tensor(a!)[] an op returning nothing wrote (in-place foreach): each
 * differentiable element's history becomes node output e. */
static kv_status attach_written_list(const kv_ag_formula *f, const kv_schema *s, const ag_inputs *in,
                                     kv_ag_node *node, bool *attached) {
    const int l = s->nreturns == 0 ? kv_schema_mutable_list_arg(s) : -1;
    for (int e = 0; l >= 0 && e < in->count[l] && e < node->noutputs; e++) {
        kv_tensor *self = in->t[in->first[l] + e];
        kv_ag_tmeta_of(self, &node->out_meta[e]);
        if (!differentiable_result(f, e, self)) continue;
        kv_status st = rebase_inplace(self, node, e);
        if (st != KV_OK) return st;
        *attached = true;
    }
    return KV_OK;
}

/* Attaches node to the outputs; *attached tells whether any took it. */
static kv_status attach_outputs(const kv_ag_formula *f, const kv_schema *s, const ag_inputs *in, kv_ag_node *node,
                                kv_stack *stack, bool *attached) {
    *attached = false;
    /* A Tensor[] return is one stack slot per element, all described by
     * the schema's one list return. */
    const bool list = kv_schema_returns_list(s);
    const int nout = list ? stack->size : s->nreturns;
    for (int k = 0; k < nout && k < stack->size && k < node->noutputs; k++) {
        if (stack->slots[k].tag != KV_IV_TENSOR) continue;
        const kv_arg *ret = &s->returns[list ? 0 : k];
        kv_tensor *out = stack->slots[k].v.tensor;
        kv_ag_tmeta_of(out, &node->out_meta[k]);
        const bool diff = differentiable_result(f, k, out);
        if (ret->alias.is_write) {
            if (!diff) continue;
            kv_tensor *self = alias_source(s, in, k);
            if (self == NULL) self = out;
            kv_status st = rebase_inplace(self, node, k);
            if (st != KV_OK) return st;
            if (out != self) kv_autograd_share(out, self);
            *attached = true;
            continue;
        }
        /* contiguous on a contiguous tensor returns the tensor itself,
         * which keeps its own history (PyTorch records nothing). */
        if (is_input(in, out)) continue;
        if (!diff) {
            out->keys = kv_keyset_remove(out->keys, KV_KEY_AUTOGRAD);
            continue;
        }
        struct kv_autograd_meta *m = kv_ag_meta_ensure(out);
        if (m == NULL) return kv_last_error();
        m->requires_grad = true;
        kv_ag_meta_set_grad_fn(m, node, k);
        out->keys = kv_keyset_add(out->keys, KV_KEY_AUTOGRAD);
        kv_tensor *src = kv_schema_is_view(s) ? alias_source(s, in, k) : NULL;
        if (src && src->storage == out->storage && kv_ag_requires_grad(src) && m->base == NULL) {
            kv_tensor *base = (src->autograd && src->autograd->base) ? src->autograd->base : src;
            kv_tensor_retain(base);
            m->base = base;
            m->view_version = kv_tensor_version(out);
        }
        *attached = true;
    }
    kv_status wl = attach_written_list(f, s, in, node, attached);
    if (wl != KV_OK) return wl;
    if (f && *attached) {
        for (int k = 0; k < s->nreturns && k < stack->size && k < KV_SCHEMA_MAX_RETURNS; k++) {
            if (!(f->save_results & KV_AG_BIT(k)) || stack->slots[k].tag != KV_IV_TENSOR) continue;
            kv_status st = kv_ag_save(&node->saved_results[k], stack->slots[k].v.tensor);
            if (st != KV_OK) return st;
            node->has_saved = true;
        }
    }
    return KV_OK;
}

kv_status kv_ag_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_schema *s = kv_op_schema(op);
    const kv_keyset below = ks & kv_keyset_below(KV_KEY_AUTOGRAD);
    ag_inputs in;
    kv_status st = gather_inputs(s, stack, &in);
    if (st != KV_OK) return st;
    if (!in.any_requires_grad) {
        st = run_below(op, below, stack);
        if (st == KV_OK) strip_outputs(s, &in, stack);
        free_inputs(&in);
        kv_ag_count_kernel(false);
        return st;
    }
    if (kv_schema_is_out(s)) {
        /* PyTorch's rule, inputs and out alike: an out= result has no
         * history to give (out's own, if any, would be overwritten). */
        free_inputs(&in);
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: functions with out=... arguments don't support automatic differentiation, but one of "
                        "the arguments requires grad.",
                        kv_op_name(op));
    }
    const kv_ag_formula *f = kv_ag_formula_for(op);
    kv_ag_node *node = NULL;
    st = check_mutable(op, s, &in);
    if (st == KV_OK) {
        node = make_node(op, f, s, stack, &in);
        if (node == NULL) st = kv_last_error();
    }
    if (st == KV_OK) st = run_below(op, below, stack);
    bool attached = false;
    if (st == KV_OK) {
        st = attach_outputs(f, s, &in, node, stack, &attached);
        if (st != KV_OK) kv_stack_clear_returns(stack);
    }
    kv_ag_node_release(node);
    free_inputs(&in);
    kv_ag_count_kernel(attached);
    return st;
}

/* ---- registration ---- */

/* Ops whose outputs never require grad (PyTorch: not differentiable). */
static const char *const k_nondifferentiable[] = {
    "empty.memory_format", "zeros", "ones", "full", "arange", "eq.Tensor", "lt.Tensor", "argmax", "detach",
    "is_conj", "is_neg", "_is_zerotensor", "_efficientzerotensor",
};

static const kv_op *find_quiet(const char *name) {
    const kv_op *op = kv_op_find(name);
    if (op == NULL) kv_error_clear();
    return op;
}

bool kv_autograd_is_nondifferentiable(const kv_op *op) {
    if (op == NULL) return false;
    for (size_t i = 0; i < sizeof k_nondifferentiable / sizeof k_nondifferentiable[0]; i++)
        if (strcmp(kv_op_name(op), k_nondifferentiable[i]) == 0) return true;
    return false;
}

kv_status kv_autograd_register(void) {
    kv_ag_meta_install_hook();
    (void)kv_ag_formula_for(NULL); /* builds the lookup table while single threaded */
    kv_status st;
    for (int i = 0; i < kv_ag_nformulas; i++) {
        const kv_op *op = find_quiet(kv_ag_formulas[i].op);
        if (op == NULL) continue; /* an op this build does not have */
        if ((st = kv_register_kernel(kv_ag_formulas[i].op, KV_KEY_AUTOGRAD, kv_ag_kernel)) != KV_OK) return st;
    }
    for (size_t i = 0; i < sizeof k_nondifferentiable / sizeof k_nondifferentiable[0]; i++) {
        if (find_quiet(k_nondifferentiable[i]) == NULL) continue;
        if ((st = kv_register_fallthrough(k_nondifferentiable[i], KV_KEY_AUTOGRAD)) != KV_OK) return st;
    }
    kv_register_fallback(KV_KEY_AUTOGRAD, kv_ag_kernel);
    return KV_OK;
}
