/* Autograd internals shared by src/modes/autograd*.c and gradcheck.c:
 * the autograd record, graph nodes and edges, saved tensors, the formula
 * table and the helpers backward formulas are written with.
 *
 * Ownership. A record (struct kv_autograd_meta) is refcounted: tensors
 * that share it (boxing aliases) each hold one reference, edges to a leaf
 * hold one, and kv_tensor_autograd_free_hook drops a tensor's. A record
 * holds its grad_fn node, its .grad and, for a view, its base tensor. A
 * node holds the nodes and leaf records its edges point to, and its saved
 * tensors, which are detached aliases (no record, no Autograd key), so the
 * graph never points back at the tensors it produced: no cycles. */
#ifndef KV_MODES_AUTOGRAD_INTERNAL_H
#define KV_MODES_AUTOGRAD_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/autograd.h"
#include "kv/dispatch.h"
#include "kv/schema.h"
#include "kv/stack.h"
#include "kv/tensor.h"

typedef struct kv_ag_node kv_ag_node;

/* Geometry and type of a tensor as the forward pass saw it. */
typedef struct kv_ag_tmeta {
    bool present; /* false for an absent Tensor? */
    int ndim;
    int64_t sizes[KV_MAX_DIMS];
    int64_t strides[KV_MAX_DIMS];
    int64_t offset;
    kv_dtype dtype;
    kv_device device;
    kv_keyset keys; /* for the lazy bits of views */
} kv_ag_tmeta;

struct kv_autograd_meta {
    atomic_int refcount;
    bool requires_grad;
    kv_tensor *grad;      /* leaves: the accumulated gradient */
    kv_ag_node *grad_fn;  /* non-leaves: the node that made the tensor */
    int output_nr;
    /* A view made by a recorded view op: its root base (never a view
     * itself) and the storage version when grad_fn was last set. When the
     * storage has been written since, grad_fn is stale and is regenerated
     * as AsStridedBackward0 from the base's current history. */
    kv_tensor *base;
    int64_t view_version;
};

/* Where a gradient goes: a node's input (one of its outputs' gradients),
 * or a leaf's .grad. Both NULL: the input does not need a gradient. */
typedef struct kv_ag_edge {
    kv_ag_node *node;
    struct kv_autograd_meta *leaf;
    int input_nr;
} kv_ag_edge;

typedef struct kv_ag_saved_var {
    kv_tensor *t;     /* detached alias; NULL when not saved or freed */
    int64_t version;  /* the storage version at save time */
} kv_ag_saved_var;

typedef struct kv_ag_fctx kv_ag_fctx;
/* A backward formula: reads the node's gradients and saved values through
 * the kv_ag_* helpers, sets input gradients with kv_ag_set*. */
typedef kv_status (*kv_ag_formula_fn)(kv_ag_fctx *c);

/* One row of the formula table. */
typedef struct kv_ag_formula {
    const char *op;          /* full name in ops.schema */
    const char *node_name;   /* PyTorch's name of the node */
    kv_ag_formula_fn fn;
    uint32_t save_args;      /* bit i: save the tensor at stack slot i (the
                                mutable self of an in-place op: a clone taken
                                before the op runs) */
    uint32_t save_results;   /* bit k: save return k (after the op) */
    uint32_t diff_results;   /* bit k: return k is differentiable; 0 = all */
} kv_ag_formula;

#define KV_AG_BIT(i) (1u << (i))

struct kv_ag_node {
    atomic_int refcount;
    const char *name;
    kv_ag_formula_fn fn;
    const kv_op *op;                 /* NULL for CopySlices and regenerated views */
    uint64_t seq;                    /* creation order */
    /* inputs: the op's tensor arguments flattened in schema order, one per
     * Tensor / Tensor? slot and one per element of a Tensor[] slot */
    int ninputs;
    kv_ag_edge *edges;
    kv_ag_tmeta *in_meta;
    bool *needs;                     /* needs[i]: compute input i's gradient */
    int in_first[KV_SCHEMA_MAX_ARGS];/* by stack slot; -1 for non-tensor slots */
    int in_count[KV_SCHEMA_MAX_ARGS];
    int noutputs;
    /* [noutputs]: a foreach op has one output per list element, past
     * the schema's return count */
    kv_ag_tmeta *out_meta;
    /* the op's non-tensor arguments, deep-copied (tensor slots are NONE) */
    int nargs;
    kv_ivalue args[KV_SCHEMA_MAX_ARGS];
    kv_ag_saved_var saved_args[KV_SCHEMA_MAX_ARGS];
    kv_ag_saved_var saved_results[KV_SCHEMA_MAX_RETURNS];
    bool has_saved;                  /* some tensor was saved (so a second run is an error) */
    bool released;                   /* saved tensors freed by a backward */
    /* CopySlices: the in-place op's own node (its edge 0 unused) and the
     * view geometry; regenerated views: the view geometry */
    kv_ag_node *inner;
    kv_ag_tmeta view;
    kv_ag_node *gc_next;             /* free list while the node is destroyed */
};

/* What a formula sees while it runs. */
struct kv_ag_fctx {
    kv_ag_node *node;
    kv_tensor *const *grad_out; /* [noutputs]; NULL: that output got no gradient */
    kv_tensor **grad_in;        /* [ninputs]; owned results */
    kv_tensor **tmp;            /* temporaries released after the formula */
    int ntmp, captmp;
    kv_status err;              /* the first failure, re-raised at the end */
    char errmsg[512];
};

/* ---- records (autograd_meta.c) ---- */
struct kv_autograd_meta *kv_ag_meta_new(void);
void kv_ag_meta_retain(struct kv_autograd_meta *m);
void kv_ag_meta_release(struct kv_autograd_meta *m);
/* t's record, created (with one reference owned by t) when absent. */
struct kv_autograd_meta *kv_ag_meta_ensure(kv_tensor *t);
bool kv_ag_requires_grad(const kv_tensor *t);
/* Replaces m's grad_fn (retaining node; NULL makes it a leaf). */
void kv_ag_meta_set_grad_fn(struct kv_autograd_meta *m, kv_ag_node *node, int output_nr);
void kv_ag_count_node(void);
void kv_ag_count_executed(void);
void kv_ag_count_backward(void);
void kv_ag_count_kernel(bool recorded);
/* Installs the free hook; called by kv_autograd_register. */
void kv_ag_meta_install_hook(void);

/* ---- nodes and edges (autograd_graph.c) ---- */
kv_ag_node *kv_ag_node_new(const char *name, kv_ag_formula_fn fn, int ninputs, int noutputs);
void kv_ag_node_retain(kv_ag_node *n);
void kv_ag_node_release(kv_ag_node *n);
/* Frees the saved tensors (after a backward ran the node). */
void kv_ag_node_release_saved(kv_ag_node *n);
void kv_ag_edge_clear(kv_ag_edge *e);
/* The edge a gradient for t must follow (retained), from t's current
 * history; an empty edge when t does not require grad. */
kv_ag_edge kv_ag_edge_of(kv_tensor *t);
/* t's grad_fn, regenerated first when t is a stale view. */
kv_ag_node *kv_ag_current_grad_fn(kv_tensor *t);
void kv_ag_tmeta_of(const kv_tensor *t, kv_ag_tmeta *out);
/* Saves t (a detached alias and its version) into *s. */
kv_status kv_ag_save(kv_ag_saved_var *s, const kv_tensor *t);
/* A new alias of t without record and without the Autograd key. */
kv_tensor *kv_ag_detached_alias(const kv_tensor *t);
/* Deep copy of a non-tensor argument value into dst (lists and strings
 * get their own memory); kv_ag_ivalue_free releases it. */
kv_status kv_ag_ivalue_copy(kv_ivalue *dst, const kv_ivalue *src);
void kv_ag_ivalue_free(kv_ivalue *v);
/* Runs n's formula: checks the saved tensors (freed, modified in place),
 * calls it with grad_out and leaves owned input gradients in grad_in
 * (all NULL on failure). */
kv_status kv_ag_node_run(kv_ag_node *n, kv_tensor *const *grad_out, kv_tensor **grad_in);
/* CopySlices for an in-place op on view `view` (whose record has a base):
 * takes over `inner` (the op's node) and rebases the base's history. */
kv_status kv_ag_copy_slices(kv_tensor *view, kv_ag_node *inner);

/* ---- formula table (autograd_formulas.c) ---- */
extern const kv_ag_formula kv_ag_formulas[];
extern const int kv_ag_nformulas;
const kv_ag_formula *kv_ag_formula_for(const kv_op *op);
/* Test hook: makes `row` the formula of `op` (any op, run-time ones too)
 * and registers the Autograd kernel for it; row NULL restores the table's
 * row (or none). `row` must outlive its use. */
kv_status kv_ag_register_formula(const kv_op *op, const kv_ag_formula *row);

/* ---- the kernel (autograd_kernel.c) ---- */
kv_status kv_ag_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* ---- formula helpers (autograd_util.c) ----
 * Every helper returns a tensor registered as a temporary of c (released
 * after the formula), or NULL after recording the first error in c; a
 * NULL argument makes a helper return NULL, so calls chain without
 * checks and the first error is the one reported. */
kv_tensor *kv_ag_keep(kv_ag_fctx *c, kv_tensor *t);
void kv_ag_fail(kv_ag_fctx *c, kv_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Ends a formula run: releases the temporaries; returns st when it is an
 * error (its message already set), else the first recorded error. */
kv_status kv_ag_finish(kv_ag_fctx *c, kv_status st);
/* The gradient of output k (borrowed; NULL when it got none). */
kv_tensor *kv_ag_grad(kv_ag_fctx *c, int k);
/* ... or zeros shaped like output k. */
kv_tensor *kv_ag_grad_or_zeros(kv_ag_fctx *c, int k);
bool kv_ag_needs(const kv_ag_fctx *c, int slot);
bool kv_ag_needs_at(const kv_ag_fctx *c, int slot, int index);
/* Sets the gradient of the input at stack slot (element index of a
 * Tensor[]); t may be a temporary (it is retained). NULL is a no-op. */
void kv_ag_set(kv_ag_fctx *c, int slot, kv_tensor *t);
void kv_ag_set_at(kv_ag_fctx *c, int slot, int index, kv_tensor *t);
kv_tensor *kv_ag_saved(kv_ag_fctx *c, int slot);   /* borrowed */
kv_tensor *kv_ag_result(kv_ag_fctx *c, int k);     /* borrowed */
const kv_ag_tmeta *kv_ag_in(const kv_ag_fctx *c, int slot);
const kv_ag_tmeta *kv_ag_in_at(const kv_ag_fctx *c, int slot, int index);
const kv_ivalue *kv_ag_arg(const kv_ag_fctx *c, int slot);
kv_int_list kv_ag_tmeta_sizes(const kv_ag_tmeta *m);

kv_tensor *kv_ag_conj(kv_ag_fctx *c, kv_tensor *t);       /* t itself for real dtypes */
kv_tensor *kv_ag_scalar(kv_ag_fctx *c, kv_scalar v, kv_dtype dt, kv_device dev); /* 0-dim */
kv_tensor *kv_ag_scale(kv_ag_fctx *c, kv_tensor *t, double v);          /* t * v */
/* t * s, or t * conj(s) with conj_s (complex s makes the result complex). */
kv_tensor *kv_ag_scale_scalar(kv_ag_fctx *c, kv_tensor *t, kv_scalar s, bool conj_s);
kv_tensor *kv_ag_zeros(kv_ag_fctx *c, const int64_t *sizes, int ndim, kv_dtype dt, kv_device dev);
kv_tensor *kv_ag_zeros_meta(kv_ag_fctx *c, const kv_ag_tmeta *m, kv_dtype dt);
/* where(mask, a, 0) and where(mask, 0, a). */
kv_tensor *kv_ag_mask(kv_ag_fctx *c, kv_tensor *mask, kv_tensor *a);
kv_tensor *kv_ag_mask_not(kv_ag_fctx *c, kv_tensor *mask, kv_tensor *a);
/* Sums t down to `sizes` (the broadcasting reduction); t itself when the
 * shapes already agree. KV_ERR_SHAPE when sizes does not broadcast to t. */
kv_tensor *kv_ag_sum_to(kv_ag_fctx *c, kv_tensor *t, const int64_t *sizes, int ndim);
/* The engine's version: an owned result, no context (NULL + error). */
kv_tensor *kv_ag_sum_to_owned(kv_tensor *t, const int64_t *sizes, int ndim);
/* A reduction's gradient broadcast back to the input: with keepdim false
 * the reduced dims (dims NULL or empty: all) are unsqueezed first, then
 * the result is expanded to `in`'s sizes. */
kv_tensor *kv_ag_restore_dims(kv_ag_fctx *c, kv_tensor *g, const kv_int_list *dims, bool keepdim,
                              const kv_ag_tmeta *in);
/* Marks the reduced dims of a dim list (NULL/empty: all) for ndim dims. */
kv_status kv_ag_reduced_dims(const kv_int_list *dims, int ndim, const char *op, bool *reduce);

/* ---- formula groups (autograd_formulas_*.c) ---- */
/* pointwise */
kv_status kv_ag_f_add(kv_ag_fctx *c);
kv_status kv_ag_f_foreach_add(kv_ag_fctx *c);
kv_status kv_ag_f_foreach_mul_scalar(kv_ag_fctx *c);
kv_status kv_ag_f_sub(kv_ag_fctx *c);
kv_status kv_ag_f_mul(kv_ag_fctx *c);
kv_status kv_ag_f_div(kv_ag_fctx *c);
kv_status kv_ag_f_maximum(kv_ag_fctx *c);
kv_status kv_ag_f_minimum(kv_ag_fctx *c);
kv_status kv_ag_f_pow(kv_ag_fctx *c);
kv_status kv_ag_f_neg(kv_ag_fctx *c);
kv_status kv_ag_f_abs(kv_ag_fctx *c);
kv_status kv_ag_f_exp(kv_ag_fctx *c);
kv_status kv_ag_f_log(kv_ag_fctx *c);
kv_status kv_ag_f_sqrt(kv_ag_fctx *c);
kv_status kv_ag_f_rsqrt(kv_ag_fctx *c);
kv_status kv_ag_f_sin(kv_ag_fctx *c);
kv_status kv_ag_f_cos(kv_ag_fctx *c);
kv_status kv_ag_f_tanh(kv_ag_fctx *c);
kv_status kv_ag_f_sigmoid(kv_ag_fctx *c);
kv_status kv_ag_f_relu(kv_ag_fctx *c);
kv_status kv_ag_f_gelu(kv_ag_fctx *c);
kv_status kv_ag_f_silu(kv_ag_fctx *c);
kv_status kv_ag_f_clamp(kv_ag_fctx *c);
kv_status kv_ag_f_clamp_tensor(kv_ag_fctx *c);
kv_status kv_ag_f_where(kv_ag_fctx *c);
kv_status kv_ag_f_masked_fill(kv_ag_fctx *c);
kv_status kv_ag_f_zero_self(kv_ag_fctx *c);
kv_status kv_ag_f_identity(kv_ag_fctx *c);
kv_status kv_ag_f_conj(kv_ag_fctx *c);
kv_status kv_ag_f_neg_view(kv_ag_fctx *c);
/* reductions, matmul, normalization */
kv_status kv_ag_f_sum(kv_ag_fctx *c);
kv_status kv_ag_f_mean(kv_ag_fctx *c);
kv_status kv_ag_f_amax(kv_ag_fctx *c);
kv_status kv_ag_f_prod(kv_ag_fctx *c);
kv_status kv_ag_f_mm(kv_ag_fctx *c);
kv_status kv_ag_f_bmm(kv_ag_fctx *c);
kv_status kv_ag_f_addmm(kv_ag_fctx *c);
kv_status kv_ag_f_softmax(kv_ag_fctx *c);
kv_status kv_ag_f_log_softmax(kv_ag_fctx *c);
kv_status kv_ag_f_layer_norm(kv_ag_fctx *c);
kv_status kv_ag_f_group_norm(kv_ag_fctx *c);
/* copies, joins, indexing, views */
kv_status kv_ag_f_to_copy(kv_ag_fctx *c);
kv_status kv_ag_f_copy_(kv_ag_fctx *c);
kv_status kv_ag_f_cat(kv_ag_fctx *c);
kv_status kv_ag_f_stack(kv_ag_fctx *c);
kv_status kv_ag_f_index_select(kv_ag_fctx *c);
kv_status kv_ag_f_embedding(kv_ag_fctx *c);
kv_status kv_ag_f_reshape(kv_ag_fctx *c);
kv_status kv_ag_f_transpose(kv_ag_fctx *c);
kv_status kv_ag_f_t(kv_ag_fctx *c);
kv_status kv_ag_f_permute(kv_ag_fctx *c);
kv_status kv_ag_f_select(kv_ag_fctx *c);
kv_status kv_ag_f_slice(kv_ag_fctx *c);
kv_status kv_ag_f_expand(kv_ag_fctx *c);
kv_status kv_ag_f_as_strided(kv_ag_fctx *c);
kv_status kv_ag_f_unfold(kv_ag_fctx *c);
kv_status kv_ag_f_repeat(kv_ag_fctx *c);
/* built-in nodes */
kv_status kv_ag_f_view_regen(kv_ag_fctx *c);
kv_status kv_ag_f_copy_slices(kv_ag_fctx *c);
kv_status kv_ag_f_not_implemented(kv_ag_fctx *c);

#endif
