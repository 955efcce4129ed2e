/* Functionalize mode: the TLS mode, the in-place -> functional table, the
 * boxed fallback at KV_KEY_FUNCTIONALIZE and the recorded graph. */
#include "kv/functionalize.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/dispatch.h"
#include "kv/tensor.h"
#include "modes/mode_tls.h"
#include "ref/ref.h"

/* ---- per-thread state ---- */

typedef struct fz_node {
    const char *op;  /* full name; ops live for the whole process */
    int nin, nout;
    int *ids;        /* nin input ids, then nout output ids; -1 = absent input */
} fz_node;

typedef struct fz_state {
    int depth;
    kv_keyset included_before;
    fz_node *nodes;
    int nnodes, node_cap;
    /* Value id i is values[i]; each entry holds one reference, so no id is
     * ever given to two tensors while the mode is on. */
    kv_tensor **values;
    int nvalues, value_cap;
    bool registered_cleanup;
} fz_state;

static _Thread_local fz_state t_fz;

static pthread_key_t g_cleanup_key;
static pthread_once_t g_cleanup_once = PTHREAD_ONCE_INIT;

static void fz_release_values(fz_state *s) {
    for (int i = 0; i < s->nvalues; i++) kv_tensor_release(s->values[i]);
    free(s->values);
    s->values = NULL;
    s->nvalues = s->value_cap = 0;
}

static void fz_free_nodes(fz_state *s) {
    for (int i = 0; i < s->nnodes; i++) free(s->nodes[i].ids);
    free(s->nodes);
    s->nodes = NULL;
    s->nnodes = s->node_cap = 0;
}

/* A thread that leaves with a graph must not leak it. */
static void fz_thread_exit(void *p) {
    fz_state *s = p;
    fz_release_values(s);
    fz_free_nodes(s);
}

static void fz_make_key(void) { (void)pthread_key_create(&g_cleanup_key, fz_thread_exit); }

static void fz_ensure_cleanup(void) {
    if (t_fz.registered_cleanup) return;
    pthread_once(&g_cleanup_once, fz_make_key);
    t_fz.registered_cleanup = pthread_setspecific(g_cleanup_key, &t_fz) == 0;
}

/* ---- the mode ---- */

kv_status kv_functionalize_enter(void) {
    if (t_fz.depth == 0) {
        fz_ensure_cleanup();
        fz_release_values(&t_fz);
        fz_free_nodes(&t_fz);
        t_fz.included_before = kv_mode_tls_on(KV_KEY_FUNCTIONALIZE);
    }
    t_fz.depth++;
    return KV_OK;
}

kv_status kv_functionalize_exit(void) {
    if (t_fz.depth == 0)
        return kv_error(KV_ERR_INVALID_ARG, "kv_functionalize_exit: functionalize mode is not on in this thread");
    if (--t_fz.depth == 0) {
        kv_mode_tls_off(KV_KEY_FUNCTIONALIZE, t_fz.included_before);
        fz_release_values(&t_fz);
    }
    return KV_OK;
}

int kv_functionalize_depth(void) { return t_fz.depth; }
bool kv_functionalize_active(void) { return t_fz.depth > 0; }

/* ---- recording ---- */

static kv_status fz_oom(const char *op) {
    return kv_error(KV_ERR_OOM, "%s: Functionalize: out of memory recording the functional graph", op);
}

/* The id of t, giving it the next id when it has none; -1 on OOM. */
static int fz_id_of(kv_tensor *t) {
    for (int i = t_fz.nvalues - 1; i >= 0; i--)
        if (t_fz.values[i] == t) return i;
    if (t_fz.nvalues == t_fz.value_cap) {
        int cap = t_fz.value_cap ? 2 * t_fz.value_cap : 32;
        kv_tensor **grown = realloc(t_fz.values, sizeof *grown * (size_t)cap);
        if (grown == NULL) return -1;
        t_fz.values = grown;
        t_fz.value_cap = cap;
    }
    kv_tensor_retain(t);
    t_fz.values[t_fz.nvalues] = t;
    return t_fz.nvalues++;
}

static bool fz_recording(void) { return t_fz.depth > 0; }

/* Appends a node; inputs may hold NULL (an absent Tensor?). */
static kv_status fz_record(const char *op, kv_tensor *const *in, int nin, kv_tensor *const *out, int nout) {
    if (!fz_recording()) return KV_OK;
    int *ids = malloc(sizeof *ids * (size_t)(nin + nout > 0 ? nin + nout : 1));
    if (ids == NULL) return fz_oom(op);
    for (int i = 0; i < nin + nout; i++) {
        kv_tensor *t = i < nin ? in[i] : out[i - nin];
        ids[i] = t ? fz_id_of(t) : -1;
        if (t && ids[i] < 0) {
            free(ids);
            return fz_oom(op);
        }
    }
    if (t_fz.nnodes == t_fz.node_cap) {
        int cap = t_fz.node_cap ? 2 * t_fz.node_cap : 32;
        fz_node *grown = realloc(t_fz.nodes, sizeof *grown * (size_t)cap);
        if (grown == NULL) {
            free(ids);
            return fz_oom(op);
        }
        t_fz.nodes = grown;
        t_fz.node_cap = cap;
    }
    t_fz.nodes[t_fz.nnodes++] = (fz_node){ op, nin, nout, ids };
    return KV_OK;
}

/* The tensor arguments of a call in schema order (Tensor[] flattened,
 * absent Tensor? as NULL). Small calls use the inline buffer. */
typedef struct fz_tensors {
    kv_tensor **items;
    int n;
    kv_tensor *inline_buf[16];
} fz_tensors;

static kv_status fz_collect_args(const kv_op *op, const kv_stack *args, fz_tensors *out) {
    const kv_schema *s = kv_op_schema(op);
    int total = 0;
    for (int i = 0; i < s->nargs && i < args->size; i++) {
        if (s->args[i].type.kind != KV_TYPE_TENSOR) continue;
        total += args->slots[i].tag == KV_IV_TENSOR_LIST ? args->slots[i].v.tensors.n : 1;
    }
    out->items = out->inline_buf;
    out->n = 0;
    if (total > (int)(sizeof out->inline_buf / sizeof out->inline_buf[0])) {
        out->items = malloc(sizeof *out->items * (size_t)total);
        if (out->items == NULL) return fz_oom(kv_op_name(op));
    }
    for (int i = 0; i < s->nargs && i < args->size; i++) {
        if (s->args[i].type.kind != KV_TYPE_TENSOR) continue;
        const kv_ivalue *v = &args->slots[i];
        if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n; e++) out->items[out->n++] = v->v.tensors.items[e];
        } else {
            out->items[out->n++] = v->tag == KV_IV_TENSOR ? v->v.tensor : NULL;
        }
    }
    return KV_OK;
}

static void fz_tensors_free(fz_tensors *t) {
    if (t->items != t->inline_buf) free(t->items);
    t->items = NULL;
}

/* Redispatches `op` below Functionalize and records it as one node. */
static kv_status fz_run_recorded(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    fz_tensors in;
    kv_status st = fz_collect_args(op, stack, &in);
    if (st != KV_OK) return st;
    /* Inputs get their ids before the op runs, so ids follow data flow. */
    for (int i = 0; fz_recording() && i < in.n; i++) {
        if (in.items[i] && fz_id_of(in.items[i]) < 0) {
            fz_tensors_free(&in);
            return fz_oom(kv_op_name(op));
        }
    }
    st = kv_redispatch(op, ks & kv_keyset_below(KV_KEY_FUNCTIONALIZE), stack);
    if (st != KV_OK) {
        fz_tensors_free(&in);
        return st;
    }
    /* Every tensor return is a node output: a foreach op's list has one
     * per element, past the inline buffer when long. */
    kv_tensor *outs_inline[KV_SCHEMA_MAX_RETURNS] = { NULL };
    kv_tensor **outs = outs_inline;
    if (stack->size > KV_SCHEMA_MAX_RETURNS && (outs = malloc(sizeof *outs * (size_t)stack->size)) == NULL) {
        fz_tensors_free(&in);
        kv_stack_clear_returns(stack);
        return fz_oom(kv_op_name(op));
    }
    int nout = 0;
    for (int i = 0; i < stack->size; i++)
        if (stack->slots[i].tag == KV_IV_TENSOR) outs[nout++] = stack->slots[i].v.tensor;
    st = fz_record(kv_op_name(op), in.items, in.n, outs, nout);
    if (outs != outs_inline) free(outs);
    fz_tensors_free(&in);
    if (st != KV_OK) kv_stack_clear_returns(stack);
    return st;
}

/* ---- the in-place table ---- */

typedef struct fz_row fz_row;
/* Computes the functional result of in-place call `args` (owned in *out). */
typedef kv_status (*fz_functional_fn)(const fz_row *row, kv_keyset ks, const kv_stack *args, kv_tensor **out);

struct fz_row {
    const char *inplace;
    const char *functional;
    fz_functional_fn run;
    /* fill_ and zero_ write one value everywhere, so (as in PyTorch) they
     * accept a self whose elements overlap (stride 0, size > 1, or
     * overlapping windows). */
    bool overlap_ok;
};

/* Handles resolved at registration, one per row, plus the helpers. */
static const kv_op *g_inplace_op[8];
static const kv_op *g_functional_op[8];
static const kv_op *g_copy_op;
static const kv_op *g_expand_op;

static kv_status fz_take_result(const char *op, kv_stack *st, kv_tensor **out) {
    if (st->size < 1 || st->slots[0].tag != KV_IV_TENSOR) {
        kv_stack_clear_returns(st);
        return kv_error(KV_ERR_INTERNAL, "%s: Functionalize: the functional op returned no tensor", op);
    }
    *out = st->slots[0].v.tensor;
    st->size = 0;
    return KV_OK;
}

static const kv_op *fz_row_functional(const fz_row *row);

/* add_ -> add, mul_ -> mul, clamp_.Tensor -> clamp.Tensor: same arguments. */
static kv_status fz_same_args(const fz_row *row, kv_keyset ks, const kv_stack *args, kv_tensor **out) {
    const kv_op *fop = fz_row_functional(row);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < args->size; i++) st.slots[i] = args->slots[i];
    st.size = args->size;
    kv_status rc = fz_run_recorded(fop, ks, &st);
    if (rc != KV_OK) return rc;
    return fz_take_result(row->functional, &st, out);
}

/* The functional factory of row on self's sizes, dtype and device, with
 * `value` (NULL: none) after the sizes, as full takes it. */
static kv_status fz_factory_like(const fz_row *row, kv_keyset ks, const kv_tensor *self, const kv_scalar *value,
                                 kv_tensor **out) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_ints(&st, (kv_int_list){ self->sizes, self->ndim });
    if (value) kv_push_scalar(&st, *value);
    kv_push_dtype(&st, self->dtype);
    kv_push_none(&st);
    kv_push_device(&st, self->device);
    kv_push_none(&st);
    kv_status rc = fz_run_recorded(fz_row_functional(row), ks, &st);
    if (rc != KV_OK) return rc;
    return fz_take_result(row->functional, &st, out);
}

/* fill_(self, value) -> full(self.sizes, value, dtype=self.dtype, device=self.device). */
static kv_status fz_fill(const fz_row *row, kv_keyset ks, const kv_stack *args, kv_tensor **out) {
    const kv_scalar value = kv_arg_scalar(args, 1);
    return fz_factory_like(row, ks, kv_arg_tensor(args, 0), &value, out);
}

/* zero_(self) -> zeros(self.sizes, dtype=self.dtype, device=self.device). */
static kv_status fz_zero(const fz_row *row, kv_keyset ks, const kv_stack *args, kv_tensor **out) {
    return fz_factory_like(row, ks, kv_arg_tensor(args, 0), NULL, out);
}

/* copy_(self, src) -> _to_copy(src, dtype=self.dtype[, device=self.device]),
 * then expand to self's shape when the shapes differ. */
static kv_status fz_copy(const fz_row *row, kv_keyset ks, const kv_stack *args, kv_tensor **out) {
    kv_tensor *self = kv_arg_tensor(args, 0);
    kv_tensor *src = kv_arg_tensor(args, 1);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, src);
    kv_push_dtype(&st, self->dtype);
    kv_push_none(&st);
    if (kv_device_equal(self->device, src->device)) kv_push_none(&st);
    else kv_push_device(&st, self->device);
    kv_push_none(&st);
    kv_push_bool(&st, kv_arg_bool(args, 2));
    kv_push_none(&st);
    kv_status rc = fz_run_recorded(fz_row_functional(row), ks, &st);
    kv_tensor *copied = NULL;
    if (rc != KV_OK || (rc = fz_take_result(row->functional, &st, &copied)) != KV_OK) return rc;
    if (kv_same_shape(copied, self)) {
        *out = copied;
        return KV_OK;
    }
    st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, copied);
    kv_push_ints(&st, (kv_int_list){ self->sizes, self->ndim });
    kv_push_bool(&st, false);
    rc = fz_run_recorded(g_expand_op, ks, &st);
    if (rc == KV_OK) rc = fz_take_result("expand", &st, out);
    kv_tensor_release(copied);
    if (rc == KV_ERR_SHAPE) {
        /* Say it as the op the user called. */
        char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
        kv_shape_format(src->sizes, src->ndim, a, sizeof a);
        kv_shape_format(self->sizes, self->ndim, b, sizeof b);
        return kv_error(KV_ERR_SHAPE, "copy_: argument 'src': shape %s does not broadcast to self's shape %s", a, b);
    }
    return rc;
}

/* One row per in-place op of ops.schema; an in-place op added later needs a
 * row here, or it fails at the key with KV_ERR_MISSING_KERNEL. */
static const fz_row g_table[] = {
    { "add_.Tensor", "add.Tensor", fz_same_args, false },
    { "mul_.Tensor", "mul.Tensor", fz_same_args, false },
    { "clamp_.Tensor", "clamp.Tensor", fz_same_args, false },
    { "masked_fill_.Scalar", "masked_fill.Scalar", fz_same_args, false },
    { "fill_.Scalar", "full", fz_fill, true },
    { "zero_", "zeros", fz_zero, true },
    { "copy_", "_to_copy", fz_copy, false },
};
#define FZ_NROWS ((int)(sizeof g_table / sizeof g_table[0]))
_Static_assert(FZ_NROWS <= (int)(sizeof g_inplace_op / sizeof g_inplace_op[0]), "grow g_inplace_op");

static const kv_op *fz_row_functional(const fz_row *row) { return g_functional_op[row - g_table]; }

/* In-place foreach ops (a Tensor(a!)[] self, no return), run by
 * fz_list_inplace below. */
static const fz_row g_list_table[] = {
    { "_foreach_add_.List", "_foreach_add.List", NULL, false },
};
#define FZ_NLIST ((int)(sizeof g_list_table / sizeof g_list_table[0]))
static const kv_op *g_list_inplace_op[FZ_NLIST];
static const kv_op *g_list_functional_op[FZ_NLIST];

const char *kv_functionalize_functional_op(const char *inplace_full_name) {
    if (inplace_full_name == NULL) return NULL;
    for (int i = 0; i < FZ_NROWS; i++)
        if (strcmp(g_table[i].inplace, inplace_full_name) == 0) return g_table[i].functional;
    for (int i = 0; i < FZ_NLIST; i++)
        if (strcmp(g_list_table[i].inplace, inplace_full_name) == 0) return g_list_table[i].functional;
    return kv_ref_out_functional(inplace_full_name);
}

/* ---- the fallback ---- */

static bool fz_mutates(const kv_schema *s) {
    if (kv_schema_is_inplace(s) || kv_schema_is_out(s)) return true;
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].alias.is_write) return true;
    return false;
}

/* What the in-place kernel would have refused, in its words. */
static kv_status fz_check_inplace(const fz_row *row, const kv_tensor *self, const kv_tensor *result) {
    if (!kv_can_cast(result->dtype, self->dtype))
        return kv_error(KV_ERR_DTYPE, "%s: argument 'self': result type %s can't be cast to the desired output type %s",
                        row->inplace, kv_dtype_name(result->dtype), kv_dtype_name(self->dtype));
    if (!kv_same_shape(self, result)) {
        char a[KV_MAX_DIMS * 24], b[KV_MAX_DIMS * 24];
        kv_shape_format(self->sizes, self->ndim, a, sizeof a);
        kv_shape_format(result->sizes, result->ndim, b, sizeof b);
        return kv_error(KV_ERR_SHAPE, "%s: argument 'self': output with shape %s doesn't match the broadcast shape %s",
                        row->inplace, a, b);
    }
    return KV_OK;
}

static bool fz_overlaps(const kv_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] > 1 && t->strides[d] == 0) return true;
    return false;
}

/* copy_(self, result) below Functionalize, recorded as "copy_(self, result)".
 * An overlapping self (fill_/zero_ only) is written through a view that
 * visits each memory location once: every element gets the same value.
 * Overlapping windows have no such view: there the in-place op itself
 * (`inplace` on `args`) writes self below Functionalize, which gives the
 * same memory since it writes one value everywhere. */
static kv_status fz_copy_back(kv_keyset ks, kv_tensor *self, kv_tensor *result, const kv_op *inplace,
                              const kv_stack *args) {
    kv_tensor *dst = self, *src = result;
    if (fz_overlaps(self)) {
        int64_t sizes[KV_MAX_DIMS];
        for (int d = 0; d < self->ndim; d++) sizes[d] = self->strides[d] == 0 ? 1 : self->sizes[d];
        dst = kv_tensor_view(self, sizes, self->strides, self->ndim, self->offset);
        src = dst ? kv_tensor_view(result, sizes, result->strides, result->ndim, result->offset) : NULL;
        if (src == NULL) {
            kv_tensor_release(dst);
            return kv_last_error();
        }
    }
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_status rc = KV_OK;
    if (kv_tensor_internal_overlap(dst, NULL) == KV_OVERLAP_YES) {
        if (inplace == NULL) /* the list ops refuse overlapping elements first */
            rc = kv_error(KV_ERR_INTERNAL, "copy_: Functionalize: no op to write an overlapping self with");
        for (int i = 0; inplace != NULL && i < args->size && rc == KV_OK; i++) rc = kv_stack_push(&st, args->slots[i]);
        if (rc == KV_OK && inplace != NULL) rc = kv_redispatch(inplace, ks & kv_keyset_below(KV_KEY_FUNCTIONALIZE), &st);
    } else {
        kv_push_tensor(&st, dst);
        kv_push_tensor(&st, src);
        kv_push_bool(&st, false);
        rc = kv_redispatch(g_copy_op, ks & kv_keyset_below(KV_KEY_FUNCTIONALIZE), &st);
    }
    if (rc == KV_OK) kv_stack_clear_returns(&st);
    if (dst != self) {
        kv_tensor_release(dst);
        kv_tensor_release(src);
    }
    if (rc != KV_OK) return rc;
    kv_tensor *const in[2] = { self, result };
    return fz_record("copy_", in, 2, NULL, 0);
}

static kv_status fz_inplace(const fz_row *row, kv_keyset ks, kv_stack *stack) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (self == NULL)
        return kv_error(KV_ERR_INTERNAL, "%s: Functionalize: argument 'self' is not a tensor", row->inplace);
    /* The mutated tensor and the other arguments get their ids first. */
    fz_tensors args;
    kv_status st = fz_collect_args(g_inplace_op[row - g_table], stack, &args);
    if (st != KV_OK) return st;
    for (int i = 0; fz_recording() && i < args.n && st == KV_OK; i++)
        if (args.items[i] && fz_id_of(args.items[i]) < 0) st = fz_oom(row->inplace);
    fz_tensors_free(&args);
    if (st != KV_OK) return st;

    /* An overlapping self is refused before the functional op runs: the
     * in-place kernel refuses it whatever the values, and a target that
     * cannot run the functional op on such a layout must not hide that. */
    if (!row->overlap_ok && (st = kv_tensor_check_no_internal_overlap(row->inplace, "self", self)) != KV_OK) return st;
    kv_tensor *result = NULL;
    if ((st = row->run(row, ks, stack, &result)) != KV_OK) return st;
    if ((st = fz_check_inplace(row, self, result)) == KV_OK)
        st = fz_copy_back(ks, self, result, g_inplace_op[row - g_table], stack);
    kv_tensor_release(result);
    if (st != KV_OK) return st;
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}

/* out= ops: the out= rules of kernels/ref/ref_out.c around two recorded
 * steps below Functionalize, so the graph reads
 * "%r = add.Tensor(%a, %b); %o = copy_(%o, %r)". Resizing out is
 * metadata, not a node (it happens before copy_, on the caller's out). */
static kv_status fz_out_step(const kv_op *op, kv_stack *stack, void *ctx) {
    return fz_run_recorded(op, *(const kv_keyset *)ctx, stack);
}

/* In-place foreach ops (a Tensor(a!)[] self, no return): the functional
 * foreach op on the same arguments, then what each element's in-place op
 * would refuse, then copy_(self[i], result[i]) per element, so the graph
 * reads "%r0, %r1 = _foreach_add.List(...); %s0 = copy_(%s0, %r0); ...". */

static kv_status fz_list_inplace(int row, kv_keyset ks, kv_stack *stack) {
    const fz_row *r = &g_list_table[row];
    if (stack->size < 1 || stack->slots[0].tag != KV_IV_TENSOR_LIST)
        return kv_error(KV_ERR_INTERNAL, "%s: Functionalize: argument 'self' is not a tensor list", r->inplace);
    const kv_tensor_list self = stack->slots[0].v.tensors;
    /* An overlapping element is refused as its own in-place op refuses
     * it, before anything runs (no list op writes one value everywhere,
     * as fill_ does, so copy_ can always write the elements back). */
    for (int e = 0; e < self.n; e++) {
        const kv_status ov = kv_tensor_check_no_internal_overlap(r->inplace, "self", self.items[e]);
        if (ov != KV_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kv_last_error_message());
            return kv_error(ov, "%s: element %d: %s", r->inplace, e, msg);
        }
    }
    /* The functional op leaves one return per element. */
    const int cap = self.n > stack->size ? self.n : stack->size;
    kv_ivalue *slots = malloc(sizeof *slots * (size_t)(cap > 0 ? cap : 1));
    if (slots == NULL) return fz_oom(r->inplace);
    kv_stack st = kv_stack_on(slots, cap);
    for (int i = 0; i < stack->size; i++) st.slots[i] = stack->slots[i];
    st.size = stack->size;
    kv_status rc = fz_run_recorded(g_list_functional_op[row], ks, &st);
    if (rc == KV_OK && st.size != self.n) {
        kv_stack_clear_returns(&st);
        rc = kv_error(KV_ERR_INTERNAL, "%s: Functionalize: %s returned %d tensors for a list of %d", r->inplace,
                      r->functional, st.size, self.n);
    }
    for (int e = 0; e < self.n && rc == KV_OK; e++) {
        rc = fz_check_inplace(r, self.items[e], st.slots[e].v.tensor);
        if (rc != KV_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", kv_last_error_message());
            rc = kv_error(rc, "%s: element %d: %s", r->inplace, e, msg);
        }
    }
    for (int e = 0; e < self.n && rc == KV_OK; e++) rc = fz_copy_back(ks, self.items[e], st.slots[e].v.tensor, NULL, NULL);
    if (st.size == self.n) kv_stack_clear_returns(&st);
    free(slots);
    if (rc == KV_OK) stack->size = 0; /* -> () */
    return rc;
}

static kv_status fz_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    for (int i = 0; i < FZ_NROWS; i++)
        if (g_inplace_op[i] == op) return fz_inplace(&g_table[i], ks, stack);
    for (int i = 0; i < FZ_NLIST; i++)
        if (g_list_inplace_op[i] == op) return fz_list_inplace(i, ks, stack);
    if (kv_ref_out_functional(kv_op_name(op)) != NULL) return kv_ref_out_run(op, stack, fz_out_step, &ks);
    if (fz_mutates(kv_op_schema(op)))
        return kv_error(KV_ERR_MISSING_KERNEL,
                        "%s: Functionalize: the op mutates an argument and has no functional equivalent in the "
                        "functionalize table",
                        kv_op_name(op));
    return fz_run_recorded(op, ks, stack);
}

/* Resolves a table row's two ops; a row naming an op ops.schema lacks is
 * an error. */
static kv_status fz_resolve_row(const fz_row *row, const kv_op **inplace, const kv_op **functional) {
    *inplace = kv_op_find(row->inplace);
    *functional = kv_op_find(row->functional);
    if (*inplace == NULL || *functional == NULL)
        return kv_error(KV_ERR_UNKNOWN_OP, "functionalize: table row '%s' -> '%s': op not in ops.schema",
                        row->inplace, row->functional);
    return KV_OK;
}

kv_status kv_functionalize_register(void) {
    kv_status st;
    for (int i = 0; i < FZ_NROWS; i++) {
        if ((st = fz_resolve_row(&g_table[i], &g_inplace_op[i], &g_functional_op[i])) != KV_OK) return st;
        if (g_table[i].run == fz_same_args &&
            kv_op_schema(g_inplace_op[i])->nargs != kv_op_schema(g_functional_op[i])->nargs)
            return kv_error(KV_ERR_INTERNAL, "functionalize: table row '%s' -> '%s': argument lists differ",
                            g_table[i].inplace, g_table[i].functional);
    }
    for (int i = 0; i < FZ_NLIST; i++)
        if ((st = fz_resolve_row(&g_list_table[i], &g_list_inplace_op[i], &g_list_functional_op[i])) != KV_OK)
            return st;
    g_copy_op = kv_op_find("copy_");
    g_expand_op = kv_op_find("expand");
    if (g_copy_op == NULL || g_expand_op == NULL)
        return kv_error(KV_ERR_UNKNOWN_OP, "functionalize: copy_ or expand is not in ops.schema");
    kv_register_fallback(KV_KEY_FUNCTIONALIZE, fz_fallback);
    return KV_OK;
}

/* ---- the graph API ---- */

int kv_functionalize_graph_count(void) { return t_fz.nnodes; }

static const fz_node *fz_node_at(int i) { return i >= 0 && i < t_fz.nnodes ? &t_fz.nodes[i] : NULL; }

const char *kv_functionalize_graph_op(int i) {
    const fz_node *n = fz_node_at(i);
    return n ? n->op : NULL;
}

int kv_functionalize_graph_ninputs(int i) {
    const fz_node *n = fz_node_at(i);
    return n ? n->nin : -1;
}

int kv_functionalize_graph_noutputs(int i) {
    const fz_node *n = fz_node_at(i);
    return n ? n->nout : -1;
}

int kv_functionalize_graph_input(int i, int j) {
    const fz_node *n = fz_node_at(i);
    return n && j >= 0 && j < n->nin ? n->ids[j] : -1;
}

int kv_functionalize_graph_output(int i, int j) {
    const fz_node *n = fz_node_at(i);
    return n && j >= 0 && j < n->nout ? n->ids[n->nin + j] : -1;
}

int kv_functionalize_value_id(const kv_tensor *t) {
    for (int i = 0; t != NULL && i < t_fz.nvalues; i++)
        if (t_fz.values[i] == t) return i;
    return -1;
}

/* snprintf into buf at *len, tracking the full length like snprintf. */
static void fz_append(char *buf, int cap, size_t *len, const char *text) {
    size_t room = (buf != NULL && cap > 0 && *len < (size_t)cap) ? (size_t)cap - *len : 0;
    int w = snprintf(room ? buf + *len : NULL, room, "%s", text);
    if (w > 0) *len += (size_t)w;
}

int kv_functionalize_graph_format(char *buf, int cap) {
    size_t len = 0;
    char id[24];
    if (buf != NULL && cap > 0) buf[0] = '\0';
    for (int i = 0; i < t_fz.nnodes; i++) {
        const fz_node *n = &t_fz.nodes[i];
        if (i) fz_append(buf, cap, &len, "; ");
        for (int j = 0; j < n->nout; j++) {
            snprintf(id, sizeof id, "%s%%%d", j ? ", " : "", n->ids[n->nin + j]);
            fz_append(buf, cap, &len, id);
        }
        if (n->nout) fz_append(buf, cap, &len, " = ");
        fz_append(buf, cap, &len, n->op);
        fz_append(buf, cap, &len, "(");
        for (int j = 0; j < n->nin; j++) {
            if (n->ids[j] < 0) snprintf(id, sizeof id, "%sNone", j ? ", " : "");
            else snprintf(id, sizeof id, "%s%%%d", j ? ", " : "", n->ids[j]);
            fz_append(buf, cap, &len, id);
        }
        fz_append(buf, cap, &len, ")");
    }
    return (int)len;
}

void kv_functionalize_graph_clear(void) {
    fz_free_nodes(&t_fz);
    if (t_fz.depth > 0) fz_release_values(&t_fz);
}
