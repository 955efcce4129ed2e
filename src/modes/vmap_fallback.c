/* The loop-and-stack fallback at KV_KEY_BATCHED: for every op without a
 * batching rule (and for rule calls whose preconditions fail).
 *
 * For each batch index b, every argument batched at the call's level is
 * replaced by its sample b (select.int on the physical tensor, a view),
 * the op is called through the dispatcher, and after the loop each tensor
 * return is stacked along a new dim 0 and wrapped at the level. Calling
 * through the dispatcher (not a redispatch below Batched) matters for
 * nested vmap: a sample of a level-2 wrapper may be a level-1 wrapper,
 * which level 1 must see; plain samples reach the keys below Batched.
 *
 * Mutable arguments (in-place self, out=) are written sample by sample
 * through their physical storage, and the op returns the caller's wrapper,
 * as the in-place op would. A mutable argument that is not batched at the
 * level while another argument is cannot hold the batched result: that is
 * PyTorch's "inplace arithmetic" error, raised before anything is
 * written. View ops come back as stacked copies, not views (as in
 * PyTorch's fallback). */
#include <stdlib.h>
#include <string.h>

#include "kv/ops.h"
#include "modes/vmap_internal.h"

/* A foreach op returns one tensor per list element: as many as a stack
 * holds. */
#define MAX_RETS KV_STACK_MAX

/* The owned tensors and arrays of one sample's argument stack. */
typedef struct sample_args {
    kv_ivalue slots[KV_STACK_MAX];
    kv_tensor **owned; /* the samples selected for one call */
    int nowned, cap;
    kv_tensor **lists[KV_STACK_MAX]; /* per-sample copies of Tensor[] items */
} sample_args;

static void sample_release(sample_args *sa) {
    for (int i = 0; i < sa->nowned; i++) kv_tensor_release(sa->owned[i]);
    sa->nowned = 0;
}

static kv_tensor *sample_of(sample_args *sa, kv_tensor *t, const kv_vmap_ctx *ctx, int64_t b, kv_status *st) {
    const struct kv_batched_info *bi = kv_vmap_info_at(t, ctx->level);
    if (bi == NULL) return t;
    kv_tensor *s = kv_select(bi->value, bi->bdim, b);
    if (s == NULL) {
        *st = kv_vmap_failed("vmap: fallback: select");
        return NULL;
    }
    if (sa->nowned == sa->cap) {
        kv_tensor_release(s);
        *st = kv_error(KV_ERR_INTERNAL, "vmap: fallback: too many tensor arguments");
        return NULL;
    }
    sa->owned[sa->nowned++] = s;
    return s;
}

static kv_status sample_build(sample_args *sa, const kv_stack *stack, const kv_vmap_ctx *ctx, int64_t b) {
    kv_status st = KV_OK;
    for (int i = 0; i < stack->size && st == KV_OK; i++) {
        const kv_ivalue *v = &stack->slots[i];
        sa->slots[i] = *v;
        if (v->tag == KV_IV_TENSOR) {
            kv_tensor *s = sample_of(sa, v->v.tensor, ctx, b, &st);
            if (s) sa->slots[i].v.tensor = s;
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n && st == KV_OK; e++) {
                kv_tensor *s = sample_of(sa, v->v.tensors.items[e], ctx, b, &st);
                if (s) sa->lists[i][e] = s;
            }
            sa->slots[i].v.tensors.items = sa->lists[i];
        }
    }
    return st;
}

/* The argument a mutable (a!) return aliases, or -1. */
static int written_arg_of(const kv_schema *s, const kv_arg *ret) {
    if (ret->alias.set == 0 || !ret->alias.is_write) return -1;
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].alias.set == ret->alias.set && s->args[i].alias.is_write) return i;
    return -1;
}

/* PyTorch's wording, with the op and argument names filled in. */
static kv_status check_mutable_args(const kv_op *op, const kv_stack *stack, const kv_vmap_ctx *ctx) {
    const kv_schema *s = kv_op_schema(op);
    for (int i = 0; i < s->nargs && i < stack->size; i++) {
        if (!s->args[i].alias.is_write) continue;
        const kv_ivalue *w = &stack->slots[i];
        /* A Tensor(a!)[] (in-place foreach): every element must be batched. */
        bool unbatched = w->tag == KV_IV_TENSOR && !kv_vmap_info_at(w->v.tensor, ctx->level);
        for (int e = 0; w->tag == KV_IV_TENSOR_LIST && e < w->v.tensors.n && !unbatched; e++)
            unbatched = kv_vmap_info_at(w->v.tensors.items[e], ctx->level) == NULL;
        if (!unbatched) continue;
        const char *other = "?";
        for (int j = 0; j < stack->size; j++) {
            const kv_ivalue *v = &stack->slots[j];
            bool batched = v->tag == KV_IV_TENSOR && kv_vmap_info_at(v->v.tensor, ctx->level);
            for (int e = 0; v->tag == KV_IV_TENSOR_LIST && e < v->v.tensors.n && !batched; e++)
                batched = kv_vmap_info_at(v->v.tensors.items[e], ctx->level) != NULL;
            if (batched && j < s->nargs) {
                other = s->args[j].name;
                break;
            }
        }
        const char *self = s->args[i].name;
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: vmap: inplace arithmetic(self, *extra_args) is not possible because there exists a "
                        "Tensor `%s` in extra_args that has more elements than `%s`. This happened due to `%s` "
                        "being vmapped over but `%s` not being vmapped over in a vmap. Please try to use "
                        "out-of-place operators instead of inplace arithmetic. If said operator is being called "
                        "inside the PyTorch framework, please file a bug report instead.",
                        kv_op_name(op), other, self, other, self);
    }
    return KV_OK;
}

static bool same_value(const kv_ivalue *a, const kv_ivalue *b) {
    if (a->tag != b->tag) return false;
    switch (a->tag) {
    case KV_IV_NONE: return true;
    case KV_IV_BOOL: return a->v.b == b->v.b;
    case KV_IV_INT: return a->v.i == b->v.i;
    case KV_IV_DOUBLE: return memcmp(&a->v.d, &b->v.d, sizeof a->v.d) == 0;
    case KV_IV_DTYPE: return a->v.dtype == b->v.dtype;
    case KV_IV_TENSOR:
    case KV_IV_TENSOR_LIST:
    case KV_IV_SCALAR:
    case KV_IV_INT_LIST:
    case KV_IV_DEVICE:
    case KV_IV_STR:
    case KV_IV_GENERATOR:
        return false;
    }
    return false;
}

typedef struct fallback_state {
    int nret;
    int written[MAX_RETS];     /* argument a return aliases, or -1 */
    kv_tensor **res;           /* [nret][batch]: per-sample tensor returns */
    kv_ivalue value[MAX_RETS]; /* non-tensor returns, from sample 0 */
    bool is_tensor[MAX_RETS];
} fallback_state;

static void state_free(fallback_state *fs, int64_t batch) {
    if (fs->res) {
        for (int64_t k = 0; k < (int64_t)fs->nret * batch; k++) kv_tensor_release(fs->res[k]);
        free(fs->res);
    }
    fs->res = NULL;
}

/* Takes sample b's returns off the per-sample stack. */
static kv_status collect(const kv_op *op, fallback_state *fs, kv_stack *rs, int64_t b, int64_t batch) {
    kv_status st = KV_OK;
    if (rs->size != fs->nret)
        st = kv_error(KV_ERR_INTERNAL, "%s: vmap: fallback: the op returned %d values, its schema says %d",
                      kv_op_name(op), rs->size, fs->nret);
    for (int j = 0; j < rs->size; j++) {
        kv_ivalue *v = &rs->slots[j];
        if (st != KV_OK || j >= fs->nret || fs->written[j] >= 0) {
            if (v->tag == KV_IV_TENSOR) kv_tensor_release(v->v.tensor);
            continue;
        }
        if (fs->is_tensor[j]) {
            if (v->tag == KV_IV_TENSOR) fs->res[(int64_t)j * batch + b] = v->v.tensor;
            continue;
        }
        if (v->tag == KV_IV_TENSOR) {
            kv_tensor_release(v->v.tensor);
            st = kv_error(KV_ERR_INTERNAL, "%s: vmap: fallback: return %d is a tensor, the schema says not",
                          kv_op_name(op), j);
        } else if (b == 0) {
            fs->value[j] = *v;
        } else if (!same_value(&fs->value[j], v)) {
            st = kv_error(KV_ERR_INVALID_ARG,
                          "%s: vmap: return %d is not a tensor and differs between samples 0 and %lld of the batch, "
                          "so it cannot be batched",
                          kv_op_name(op), j, (long long)b);
        }
    }
    rs->size = 0;
    return st;
}

/* Stacks return j's samples (or finds them all None) and wraps them. */
static kv_status stack_return(const kv_op *op, fallback_state *fs, int j, const kv_vmap_ctx *ctx, kv_ivalue *out) {
    kv_tensor **items = fs->res + (int64_t)j * ctx->batch_size;
    int64_t nnull = 0;
    for (int64_t b = 0; b < ctx->batch_size; b++) nnull += items[b] == NULL;
    if (nnull == ctx->batch_size) {
        *out = (kv_ivalue){ .tag = KV_IV_NONE };
        return KV_OK;
    }
    if (nnull > 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: vmap: return %d is None for some samples and a tensor for others",
                        kv_op_name(op), j);
    kv_tensor *phys = kv_stack_op((kv_tensor_list){ items, (int)ctx->batch_size }, 0);
    if (phys == NULL) return kv_vmap_failed(kv_op_name(op));
    kv_tensor *w = kv_vmap_wrap_owned(phys, 0, ctx->level);
    if (w == NULL) return kv_vmap_failed(kv_op_name(op));
    *out = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = w };
    return KV_OK;
}

/* An out= op's sample of out is a view of the batched out, so writing it
 * fills the batch; resizing it cannot (the batch's geometry is the
 * caller's). PyTorch's fallback refuses every out= op ("the fallback path
 * doesn't work on out= or view ops"); here only the resize is refused. */
static kv_status check_out_kept_shape(const kv_op *op, const kv_tensor *sample, const int64_t *sizes, int ndim) {
    if (sample->ndim == ndim && memcmp(sample->sizes, sizes, (size_t)ndim * sizeof *sizes) == 0) return KV_OK;
    char want[KV_MAX_DIMS * 24], got[KV_MAX_DIMS * 24];
    kv_shape_format(sizes, ndim, want, sizeof want);
    kv_shape_format(sample->sizes, sample->ndim, got, sizeof got);
    return kv_error(KV_ERR_INVALID_ARG,
                    "%s: vmap: argument 'out': a sample of out has shape %s but the result's is %s; the "
                    "loop-and-stack fallback cannot resize a batched out (give out the batched result's shape)",
                    kv_op_name(op), want, got);
}

static kv_status run_samples(const kv_op *op, const kv_stack *stack, const kv_vmap_ctx *ctx, fallback_state *fs,
                             sample_args *sa) {
    const kv_schema *s = kv_op_schema(op);
    const int out_slot = kv_schema_is_out(s) ? s->nargs - 1 : -1;
    for (int64_t b = 0; b < ctx->batch_size; b++) {
        kv_status st = sample_build(sa, stack, ctx, b);
        kv_stack rs = { sa->slots, stack->size, KV_STACK_MAX };
        const kv_tensor *out = out_slot >= 0 && st == KV_OK ? kv_arg_tensor(&rs, out_slot) : NULL;
        int64_t out_sizes[KV_MAX_DIMS];
        const int out_ndim = out ? out->ndim : 0;
        if (out) memcpy(out_sizes, out->sizes, sizeof out_sizes);
        if (st == KV_OK) st = kv_call(op, &rs);
        if (st == KV_OK && out && (st = check_out_kept_shape(op, out, out_sizes, out_ndim)) != KV_OK)
            kv_stack_clear_returns(&rs); /* the call's return, a reference to out's sample */
        sample_release(sa);
        if (st != KV_OK) return st;
        st = collect(op, fs, &rs, b, ctx->batch_size);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

kv_status kv_vmap_fallback_run(const kv_op *op, kv_stack *stack, const kv_vmap_ctx *ctx) {
    kv_vmap_count_fallback(op);
    const char *name = kv_op_name(op);
    const kv_schema *s = kv_op_schema(op);
    if (stack->size > KV_STACK_MAX || stack->size != s->nargs)
        return kv_error(KV_ERR_INTERNAL, "%s: vmap: fallback: %d arguments on the stack, the schema has %d", name,
                        stack->size, s->nargs);
    kv_status st = check_mutable_args(op, stack, ctx);
    if (st != KV_OK) return st;
    /* Per-sample calls of a random op would each draw from the generator
     * in turn: PyTorch's default (randomness='error') refuses it, so does
     * kvsuite, naming the op. */
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].type.kind == KV_TYPE_GENERATOR)
            return kv_error(KV_ERR_INVALID_ARG,
                            "%s: vmap: called a random operation under vmap; kvsuite follows PyTorch's "
                            "randomness='error' (argument '%s')",
                            name, s->args[i].name);

    /* A Tensor[] return (foreach) is one tensor return per element of the
     * first list, each stacked on its own; an in-place foreach op returns
     * nothing and writes its list's samples in place. */
    const bool list = kv_schema_returns_list(s);
    fallback_state fs = { .nret = list ? kv_schema_return_count(s, stack) : s->nreturns };
    if (fs.nret < 0 || fs.nret > MAX_RETS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: vmap: fallback: %d returns (at most %d)", name, fs.nret, MAX_RETS);
    bool all_written = true;
    for (int j = 0; j < fs.nret; j++) {
        const kv_arg *r = &s->returns[list ? 0 : j];
        fs.written[j] = list ? -1 : written_arg_of(s, r);
        fs.is_tensor[j] = r->type.kind == KV_TYPE_TENSOR;
        if (fs.written[j] < 0) all_written = false;
    }
    if (ctx->batch_size == 0 && !all_written)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: vmap: the loop-and-stack fallback cannot run over a batch of size 0 (there is no sample "
                        "to compute the result's shape from)",
                        name);

    sample_args *sa = calloc(1, sizeof *sa);
    if (sa == NULL) return kv_error(KV_ERR_OOM, "%s: vmap: out of host memory", name);
    for (int i = 0; i < stack->size; i++) {
        if (stack->slots[i].tag == KV_IV_TENSOR) sa->cap++;
        else if (stack->slots[i].tag == KV_IV_TENSOR_LIST) sa->cap += stack->slots[i].v.tensors.n;
    }
    sa->owned = calloc((size_t)sa->cap + 1, sizeof *sa->owned);
    if (sa->owned == NULL) st = kv_error(KV_ERR_OOM, "%s: vmap: out of host memory", name);
    if (st == KV_OK && fs.nret > 0 && ctx->batch_size > 0) {
        fs.res = calloc((size_t)fs.nret * (size_t)ctx->batch_size, sizeof *fs.res);
        if (fs.res == NULL) st = kv_error(KV_ERR_OOM, "%s: vmap: out of host memory", name);
    }
    for (int i = 0; i < stack->size && st == KV_OK; i++) {
        if (stack->slots[i].tag != KV_IV_TENSOR_LIST || stack->slots[i].v.tensors.n == 0) continue;
        sa->lists[i] = calloc((size_t)stack->slots[i].v.tensors.n, sizeof *sa->lists[i]);
        if (sa->lists[i] == NULL) st = kv_error(KV_ERR_OOM, "%s: vmap: out of host memory", name);
    }
    if (st == KV_OK) st = run_samples(op, stack, ctx, &fs, sa);

    kv_ivalue out[MAX_RETS];
    int nout = 0;
    for (int j = 0; j < fs.nret && st == KV_OK; j++, nout++) {
        if (fs.written[j] >= 0) {
            kv_tensor *t = stack->slots[fs.written[j]].v.tensor;
            kv_tensor_retain(t);
            out[j] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = t };
        } else if (fs.is_tensor[j]) {
            st = stack_return(op, &fs, j, ctx, &out[j]);
            if (st != KV_OK) break;
        } else {
            out[j] = fs.value[j];
        }
    }
    state_free(&fs, ctx->batch_size);
    for (int i = 0; i < KV_STACK_MAX; i++) free(sa->lists[i]);
    free(sa->owned);
    free(sa);
    if (st != KV_OK) {
        for (int j = 0; j < nout; j++)
            if (out[j].tag == KV_IV_TENSOR) kv_tensor_release(out[j].v.tensor);
        return st;
    }
    stack->size = 0;
    for (int j = 0; j < nout; j++) {
        if (j >= stack->cap) {
            if (out[j].tag == KV_IV_TENSOR) kv_tensor_release(out[j].v.tensor);
            continue;
        }
        stack->slots[j] = out[j];
        stack->size = j + 1;
    }
    return KV_OK;
}

kv_status kv_vmap_fallback_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_vmap_ctx ctx;
    kv_status st = kv_vmap_scan_args(op, stack, &ctx);
    if (st != KV_OK) return st;
    /* Batched came from TLS, not from a wrapper: nothing to map over. */
    if (ctx.level == 0) return kv_redispatch(op, ks & kv_keyset_below(KV_KEY_BATCHED), stack);
    return kv_vmap_fallback_run(op, stack, &ctx);
}
