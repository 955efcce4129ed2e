/* kv_vmap_call: vmap(op)(args) in one call — enter a level, wrap the
 * mapped arguments, call the op, unwrap the returns, leave the level. It
 * is what the runner's mode=vmap compares against a loop over the batch. */
#include <inttypes.h>
#include <stdlib.h>

#include "kv/ops.h"
#include "modes/vmap_internal.h"

static int in_dim_of(const int *in_dims, const kv_ivalue *v, int i) {
    if (in_dims) return in_dims[i];
    return (v->tag == KV_IV_TENSOR || v->tag == KV_IV_TENSOR_LIST) ? 0 : KV_VMAP_UNBATCHED;
}

static kv_status check_in_dim(const char *op, const char *arg, const kv_tensor *t, int in_dim, int64_t *size) {
    if (in_dim < -t->ndim || in_dim >= t->ndim || t->ndim == 0)
        return kv_error(KV_ERR_DIM,
                        "%s: vmap: argument '%s': Got in_dim=%d for an input, but that input is a Tensor of "
                        "dimensionality %d so expected in_dim to satisfy -%d <= in_dim < %d",
                        op, arg, in_dim, t->ndim, t->ndim, t->ndim);
    *size = t->sizes[in_dim < 0 ? in_dim + t->ndim : in_dim];
    return KV_OK;
}

/* The batch size from the mapped arguments (and the caller's). */
static kv_status batch_size_of(const kv_op *op, const kv_stack *args, const int *in_dims, int want, int64_t *out) {
    const kv_schema *s = kv_op_schema(op);
    const char *name = kv_op_name(op);
    int64_t size = want >= 0 ? want : -1;
    bool any = false;
    for (int i = 0; i < args->size; i++) {
        const kv_ivalue *v = &args->slots[i];
        const int d = in_dim_of(in_dims, v, i);
        if (d == KV_VMAP_UNBATCHED || v->tag == KV_IV_NONE) continue;
        const char *arg = i < s->nargs ? s->args[i].name : "?";
        if (v->tag != KV_IV_TENSOR && v->tag != KV_IV_TENSOR_LIST)
            return kv_error(KV_ERR_INVALID_ARG,
                            "%s: vmap: argument '%s': Got in_dim=%d for an input but the input is of type %s. We "
                            "cannot vmap over non-Tensor arguments, please use None as the respective in_dim",
                            name, arg, d, kv_ivalue_tag_name(v->tag));
        const int n = v->tag == KV_IV_TENSOR ? 1 : v->v.tensors.n;
        for (int e = 0; e < n; e++) {
            const kv_tensor *t = v->tag == KV_IV_TENSOR ? v->v.tensor : v->v.tensors.items[e];
            if (t == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: vmap: argument '%s': a NULL tensor", name, arg);
            int64_t here = 0;
            kv_status st = check_in_dim(name, arg, t, d, &here);
            if (st != KV_OK) return st;
            if (size >= 0 && here != size) return kv_vmap_size_mismatch(name, size, here);
            size = here;
            any = true;
        }
    }
    if (!any && want < 0)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: vmap: no argument is mapped over (every in_dim is None) and no batch size is given",
                        name);
    *out = size;
    return KV_OK;
}

typedef struct wrapped_args {
    kv_ivalue slots[KV_STACK_MAX];
    kv_tensor **owned; /* the wrappers made */
    int nowned;
    kv_tensor **lists[KV_STACK_MAX];
} wrapped_args;

static void wrapped_free(wrapped_args *wa) {
    for (int i = 0; i < wa->nowned; i++) kv_tensor_release(wa->owned[i]);
    free(wa->owned);
    for (int i = 0; i < KV_STACK_MAX; i++) free(wa->lists[i]);
}

static kv_tensor *wrap_one(wrapped_args *wa, kv_tensor *t, int d, int level) {
    kv_tensor *w = kv_vmap_add_batch_dim(t, d, level);
    if (w) wa->owned[wa->nowned++] = w;
    return w;
}

static kv_status wrap_args(const kv_stack *args, const int *in_dims, int level, wrapped_args *wa) {
    int total = 0;
    for (int i = 0; i < args->size; i++)
        total += args->slots[i].tag == KV_IV_TENSOR ? 1
                 : args->slots[i].tag == KV_IV_TENSOR_LIST ? args->slots[i].v.tensors.n : 0;
    wa->owned = calloc((size_t)total + 1, sizeof *wa->owned);
    if (wa->owned == NULL) return kv_error(KV_ERR_OOM, "vmap: out of host memory");
    for (int i = 0; i < args->size; i++) {
        const kv_ivalue *v = &args->slots[i];
        wa->slots[i] = *v;
        const int d = in_dim_of(in_dims, v, i);
        if (d == KV_VMAP_UNBATCHED) continue;
        if (v->tag == KV_IV_TENSOR) {
            kv_tensor *w = wrap_one(wa, v->v.tensor, d, level);
            if (w == NULL) return kv_vmap_failed("vmap");
            wa->slots[i].v.tensor = w;
        } else if (v->tag == KV_IV_TENSOR_LIST && v->v.tensors.n > 0) {
            wa->lists[i] = calloc((size_t)v->v.tensors.n, sizeof *wa->lists[i]);
            if (wa->lists[i] == NULL) return kv_error(KV_ERR_OOM, "vmap: out of host memory");
            for (int e = 0; e < v->v.tensors.n; e++) {
                kv_tensor *w = wrap_one(wa, v->v.tensors.items[e], d, level);
                if (w == NULL) return kv_vmap_failed("vmap");
                wa->lists[i][e] = w;
            }
            wa->slots[i].v.tensors.items = wa->lists[i];
        }
    }
    return KV_OK;
}

/* Unwraps the op's returns in place on `rs`; on failure releases them all. */
static kv_status unwrap_returns(kv_stack *rs, int level, int64_t batch, int out_dim) {
    kv_status st = KV_OK;
    for (int j = 0; j < rs->size; j++) {
        kv_ivalue *v = &rs->slots[j];
        if (v->tag != KV_IV_TENSOR) continue;
        kv_tensor *u = st == KV_OK ? kv_vmap_unwrap_result(v->v.tensor, level, batch, out_dim) : NULL;
        if (st == KV_OK && u == NULL) st = kv_vmap_failed("vmap");
        kv_tensor_release(v->v.tensor);
        if (u) v->v.tensor = u;
        else v->tag = KV_IV_NONE;
    }
    if (st != KV_OK) kv_stack_clear_returns(rs);
    return st;
}

kv_status kv_vmap_call(const kv_op *op, kv_stack *args, const int *in_dims, int batch_size, int out_dim,
                       kv_stack *returns) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "vmap: argument 'op': is NULL");
    if (args == NULL || returns == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "%s: vmap: argument '%s': is NULL", kv_op_name(op),
                        args == NULL ? "args" : "returns");
    if (args->size < 0 || args->size > KV_STACK_MAX)
        return kv_error(KV_ERR_INVALID_ARG, "%s: vmap: %d arguments on the stack (at most %d)", kv_op_name(op),
                        args->size, KV_STACK_MAX);
    int64_t batch = 0;
    kv_status st = batch_size_of(op, args, in_dims, batch_size, &batch);
    if (st != KV_OK) {
        returns->size = 0;
        return st;
    }
    const int level = kv_vmap_level_enter();
    if (level < 0) {
        returns->size = 0;
        return kv_vmap_failed(kv_op_name(op));
    }
    wrapped_args *wa = calloc(1, sizeof *wa);
    if (wa == NULL) st = kv_error(KV_ERR_OOM, "%s: vmap: out of host memory", kv_op_name(op));
    if (st == KV_OK) st = wrap_args(args, in_dims, level, wa);
    kv_stack rs = { NULL, 0, KV_STACK_MAX };
    if (st == KV_OK) {
        rs = (kv_stack){ wa->slots, args->size, KV_STACK_MAX };
        st = kv_call(op, &rs);
    }
    if (st == KV_OK) st = unwrap_returns(&rs, level, batch, out_dim);
    /* The returns sit in wa->slots; move them out before freeing it. */
    kv_ivalue out[KV_STACK_MAX]; /* a foreach op: one return per list element */
    int nout = 0;
    for (int j = 0; st == KV_OK && j < rs.size; j++) {
        if (j < KV_STACK_MAX) out[nout++] = rs.slots[j];
        else if (rs.slots[j].tag == KV_IV_TENSOR) kv_tensor_release(rs.slots[j].v.tensor);
    }
    if (wa) wrapped_free(wa);
    free(wa);
    kv_status exit_st = kv_vmap_level_exit(level);
    if (st == KV_OK && exit_st != KV_OK) {
        for (int j = 0; j < nout; j++)
            if (out[j].tag == KV_IV_TENSOR) kv_tensor_release(out[j].v.tensor);
        st = exit_st;
    }
    returns->size = 0;
    if (st != KV_OK) return st;
    for (int j = 0; j < nout; j++) {
        if (j >= returns->cap) {
            if (out[j].tag == KV_IV_TENSOR) kv_tensor_release(out[j].v.tensor);
            continue;
        }
        returns->slots[j] = out[j];
        returns->size = j + 1;
    }
    return KV_OK;
}
