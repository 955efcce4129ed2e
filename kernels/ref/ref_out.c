/* out= overloads (add.out, mm.out, ...): PyTorch's rules for writing a
 * result into a caller's tensor, in one place for every backend.
 *
 * An out= op computes exactly what its functional twin computes (the
 * functional kernel runs, on the same backend) and then writes the result
 * into `out`, PyTorch's order of checks:
 *   1. out lives on the inputs' device (a 0-dim CPU input, which PyTorch
 *      allows next to any device, is not asked);
 *   2. out's dtype accepts the result's, known before anything runs as
 *      PyTorch's meta functions know it: torch.can_cast for the
 *      TensorIterator ops and cat (the value is computed in the result's
 *      dtype, then cast), the same dtype for mm (structured kernels check
 *      equality); sum computes in out's dtype when `dtype` is None and
 *      needs it equal otherwise (PyTorch's reductions take out's dtype);
 *   3. the functional op runs (its own argument checks), and its result
 *      has the dtype step 2 expected (else an internal error: the rules
 *      here and the functional kernel disagree);
 *   4. out is resized to the result's shape when its shape differs
 *      (kv_tensor_resize: row-major strides, storage grown in place);
 *   5. out has no internal overlap, and shares no element with an input
 *      (judged exactly, element by element: interleaved views are
 *      allowed), except that an input may be out itself (same geometry:
 *      add(a, b, out=a)); cat refuses any overlap, as PyTorch's cat does;
 *   6. copy_(out, result) on the backend.
 * Who runs the functional op and copy_ is the caller's step function: the
 * reference kernels (the CPU kernel, and the golden), a backend's own
 * kernels (host->out_run), or the layers below a mode (Functionalize
 * records both, which makes an out= call "the functional op + copy_").
 * Because the result is complete before out is written, an out that is
 * also an input gives the functional op's values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "ref/ref_kernels.h"

/* Tensors a result type is computed over (cat's list included). */
#define KV_REF_OUT_MAX_TENSORS 64

typedef enum out_dtype_rule {
    OUT_DTYPE_CAST,   /* torch.can_cast(result, out) */
    OUT_DTYPE_SAME,   /* result dtype == out dtype */
    OUT_DTYPE_REDUCE, /* the reduction computes in out's dtype */
} out_dtype_rule;

typedef struct out_row {
    const char *out;
    const char *functional;
    out_dtype_rule dtype;
    bool scalars_promote; /* Scalar arguments join the result type (clamp's bounds; not add's alpha) */
    bool alias_ok;        /* an input may be out itself */
    int dtype_slot;       /* OUT_DTYPE_REDUCE: the ScalarType? argument */
} out_row;

static const out_row g_rows[] = {
    { "add.out", "add.Tensor", OUT_DTYPE_CAST, false, true, -1 },
    { "mul.out", "mul.Tensor", OUT_DTYPE_CAST, false, true, -1 },
    { "mm.out", "mm", OUT_DTYPE_SAME, false, true, -1 },
    { "cat.out", "cat", OUT_DTYPE_CAST, false, false, -1 },
    { "sum.IntList_out", "sum.dim_IntList", OUT_DTYPE_REDUCE, false, true, 3 },
    { "clamp.out", "clamp", OUT_DTYPE_CAST, true, true, -1 },
};
#define OUT_NROWS ((int)(sizeof g_rows / sizeof g_rows[0]))

static const out_row *out_row_of(const char *name) {
    for (int i = 0; i < OUT_NROWS; i++)
        if (strcmp(g_rows[i].out, name) == 0) return &g_rows[i];
    return NULL;
}

const char *kv_ref_out_functional(const char *out_name) {
    const out_row *r = out_name ? out_row_of(out_name) : NULL;
    return r ? r->functional : NULL;
}

/* ---- checks ---- */

static const char *device_text(kv_device d, char *buf, size_t cap) {
    snprintf(buf, cap, "%s:%d", kv_device_type_name(d.type), d.index);
    return buf;
}

static bool rides_along(const kv_tensor *t) { return t->ndim == 0 && t->device.type == KV_DEVICE_CPU; }

static kv_status check_device(const char *name, const kv_schema *s, const kv_stack *stack, const kv_tensor *out) {
    for (int i = 0; i < s->nargs - 1; i++) {
        const kv_ivalue *v = &stack->slots[i];
        const kv_tensor *const *items = v->tag == KV_IV_TENSOR ? (const kv_tensor *const *)&v->v.tensor : NULL;
        int n = v->tag == KV_IV_TENSOR ? 1 : 0;
        if (v->tag == KV_IV_TENSOR_LIST) {
            items = (const kv_tensor *const *)v->v.tensors.items;
            n = v->v.tensors.n;
        }
        for (int e = 0; e < n; e++) {
            if (rides_along(items[e]) || kv_device_equal(items[e]->device, out->device)) continue;
            char a[48], b[48];
            return kv_error(KV_ERR_DEVICE,
                            "%s: argument 'out': expected device %s (the device of argument '%s'), got %s", name,
                            device_text(items[e]->device, a, sizeof a), s->args[i].name,
                            device_text(out->device, b, sizeof b));
        }
    }
    return KV_OK;
}

/* The bytes [lo, hi) of t's storage that t can reach (hi == lo: none). */
static void extent(const kv_tensor *t, int64_t *lo, int64_t *hi) {
    int64_t first = t->offset, last = t->offset;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] == 0) {
            *lo = *hi = 0;
            return;
        }
        const int64_t span = (t->sizes[d] - 1) * t->strides[d];
        if (span < 0) first += span;
        else last += span;
    }
    const int64_t w = (int64_t)kv_dtype_size(t->dtype);
    *lo = first * w;
    *hi = (last + 1) * w;
}

static bool same_geometry(const kv_tensor *a, const kv_tensor *b) {
    if (a->ndim != b->ndim || a->offset != b->offset || a->dtype != b->dtype) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->sizes[d] != b->sizes[d] || (a->sizes[d] > 1 && a->strides[d] != b->strides[d])) return false;
    return true;
}

/* Byte offset (from the storage's start) of each element of t, row-major:
 * an odometer over t's sizes. Arithmetic only, so device tensors (whose
 * storage is not host memory) are judged the same way. */
typedef struct elem_walk {
    const kv_tensor *t;
    int64_t idx[KV_MAX_DIMS];
    int64_t off; /* in elements */
    bool done;
} elem_walk;

static void walk_init(elem_walk *w, const kv_tensor *t) {
    memset(w, 0, sizeof *w);
    w->t = t;
    w->off = t->offset;
    w->done = kv_tensor_numel(t) == 0;
}

static void walk_next(elem_walk *w) {
    const kv_tensor *t = w->t;
    int d = t->ndim - 1;
    for (; d >= 0; d--) {
        w->off += t->strides[d];
        if (++w->idx[d] < t->sizes[d]) break;
        w->off -= t->sizes[d] * t->strides[d];
        w->idx[d] = 0;
    }
    if (d < 0) w->done = true;
}

/* Whether some byte is an element of both a and b (one storage), exactly:
 * where their extents meet, every element of a marks its bytes in a
 * bitmap (in units of an element when both have one element size), then
 * b's are looked up. Address ranges alone would refuse interleaved views
 * (out = x[:, 1::2] next to x[:, ::2]) that share no element. When the
 * bitmap cannot be allocated the answer is yes: refused, conservatively
 * (README "out= overloads"). */
static bool views_share_bytes(const kv_tensor *a, const kv_tensor *b) {
    int64_t alo, ahi, blo, bhi;
    extent(a, &alo, &ahi);
    extent(b, &blo, &bhi);
    const int64_t lo = alo > blo ? alo : blo, hi = ahi < bhi ? ahi : bhi;
    if (lo >= hi) return false;
    const int64_t wa = (int64_t)kv_dtype_size(a->dtype), wb = (int64_t)kv_dtype_size(b->dtype);
    const int64_t unit = wa == wb ? wa : 1;
    const int64_t nunits = (hi - lo + unit - 1) / unit;
    unsigned char *seen = calloc((size_t)(nunits / 8 + 1), 1);
    if (seen == NULL) return true;
    elem_walk w;
    for (walk_init(&w, a); !w.done; walk_next(&w)) {
        for (int64_t byte = w.off * wa; byte < w.off * wa + wa; byte += unit) {
            if (byte < lo || byte >= hi) continue;
            const int64_t u = (byte - lo) / unit;
            seen[u / 8] |= (unsigned char)(1u << (u % 8));
        }
    }
    bool shared = false;
    for (walk_init(&w, b); !w.done && !shared; walk_next(&w)) {
        for (int64_t byte = w.off * wb; byte < w.off * wb + wb && !shared; byte += unit) {
            if (byte < lo || byte >= hi) continue;
            const int64_t u = (byte - lo) / unit;
            shared = (seen[u / 8] >> (u % 8)) & 1u;
        }
    }
    free(seen);
    return shared;
}

static kv_status check_input_overlap(const char *name, const out_row *row, const char *arg, int item,
                                     const kv_tensor *in, const kv_tensor *out) {
    if (in->storage != out->storage) return KV_OK;
    if (row->alias_ok && same_geometry(in, out)) return KV_OK;
    if (!views_share_bytes(in, out)) return KV_OK;
    char where[96];
    if (item >= 0) snprintf(where, sizeof where, "argument '%s' item %d", arg, item);
    else snprintf(where, sizeof where, "argument '%s'", arg);
    if (!row->alias_ok)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'out': unsupported operation: the input tensors cannot refer to any of the "
                        "output memory locations (%s overlaps it)",
                        name, where);
    return kv_error(KV_ERR_INVALID_ARG,
                    "%s: argument 'out': unsupported operation: some elements of %s and the written-to tensor "
                    "refer to a single memory location. Please clone() the tensor before performing the operation.",
                    name, where);
}

static kv_status check_overlap(const char *name, const out_row *row, const kv_schema *s, const kv_stack *stack,
                               const kv_tensor *out) {
    kv_status st = kv_ref_check_no_internal_overlap(name, "out", out);
    for (int i = 0; i < s->nargs - 1 && st == KV_OK; i++) {
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_TENSOR) {
            st = check_input_overlap(name, row, s->args[i].name, -1, v->v.tensor, out);
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n && st == KV_OK; e++)
                st = check_input_overlap(name, row, s->args[i].name, e, v->v.tensors.items[e], out);
        }
    }
    return st;
}

/* The functional op's result dtype, as its meta function computes it:
 * torch.result_type over the tensor arguments (list items included) and,
 * where they promote, the present Scalar arguments; mm's is self's. */
static kv_dtype expected_dtype(const out_row *row, const kv_schema *s, const kv_stack *stack, const kv_tensor *out) {
    if (row->dtype == OUT_DTYPE_REDUCE) return out->dtype;
    const kv_tensor *tensors[KV_REF_OUT_MAX_TENSORS];
    kv_scalar scalars[KV_SCHEMA_MAX_ARGS];
    int nt = 0, ns = 0;
    for (int i = 0; i < s->nargs - 1; i++) {
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_TENSOR && nt < KV_REF_OUT_MAX_TENSORS) tensors[nt++] = v->v.tensor;
        for (int e = 0; v->tag == KV_IV_TENSOR_LIST && e < v->v.tensors.n && nt < KV_REF_OUT_MAX_TENSORS; e++)
            tensors[nt++] = v->v.tensors.items[e];
        if (v->tag == KV_IV_SCALAR && row->scalars_promote) scalars[ns++] = v->v.scalar;
    }
    if (row->dtype == OUT_DTYPE_SAME) return nt > 0 ? tensors[0]->dtype : out->dtype;
    return kv_result_type(tensors, nt, scalars, ns);
}

static kv_status check_dtype(const char *name, const out_row *row, const kv_stack *stack, kv_dtype result,
                             const kv_tensor *out) {
    switch (row->dtype) {
    case OUT_DTYPE_CAST:
        if (kv_can_cast(result, out->dtype)) return KV_OK;
        return kv_error(KV_ERR_DTYPE, "%s: argument 'out': result type %s can't be cast to the desired output type %s",
                        name, kv_dtype_name(result), kv_dtype_name(out->dtype));
    case OUT_DTYPE_SAME:
        if (result == out->dtype) return KV_OK;
        return kv_error(KV_ERR_DTYPE, "%s: argument 'out': expected dtype %s (the result's), got %s", name,
                        kv_dtype_name(result), kv_dtype_name(out->dtype));
    case OUT_DTYPE_REDUCE:
        if (kv_arg_is_none(stack, row->dtype_slot) || kv_arg_dtype(stack, row->dtype_slot) == out->dtype)
            return KV_OK;
        return kv_error(KV_ERR_DTYPE, "%s: argument 'out': expected dtype %s (argument 'dtype'), got %s", name,
                        kv_dtype_name(kv_arg_dtype(stack, row->dtype_slot)), kv_dtype_name(out->dtype));
    }
    return KV_OK;
}

/* What sum computes in without a dtype: i64 for bool and integer inputs,
 * else the input's. Out's dtype is passed on only where it differs, so an
 * out= sum reaches a backend as the plain call it is. */
static kv_dtype reduce_default_dtype(const kv_tensor *self) {
    if (self == NULL) return KV_I64;
    return kv_dtype_is_integral(self->dtype, true) ? KV_I64 : self->dtype;
}

/* ---- running ---- */

kv_status kv_ref_out_step_reference(const kv_op *op, kv_stack *stack, void *ctx) {
    (void)ctx;
    /* The reference kernel itself, never a tuned CPU variant: the golden
     * is the reference's. */
    kv_kernel_fn fn = kv_ref_kernel_of(kv_op_builtin_id(op));
    if (fn == NULL) return kv_error(KV_ERR_INTERNAL, "%s: no CPU reference kernel", kv_op_name(op));
    return fn(op, kv_keyset_of(KV_KEY_CPU), stack);
}

static kv_status step_on_backend(const kv_op *op, kv_stack *stack, void *ctx) {
    return kv_redispatch(op, kv_keyset_of(*(const kv_key *)ctx), stack);
}

kv_status kv_ref_out_run(const kv_op *op, kv_stack *stack, kv_ref_out_step_fn step, void *ctx) {
    const char *name = kv_op_name(op);
    const kv_schema *s = kv_op_schema(op);
    const out_row *row = out_row_of(name);
    const int n = s->nargs;
    kv_tensor *out = n > 0 && n <= stack->size ? kv_arg_tensor(stack, n - 1) : NULL;
    if (row == NULL || out == NULL)
        return kv_error(KV_ERR_INTERNAL, "%s: not an out= op kernels/ref/ref_out.c knows", name);
    const kv_op *fop = kv_op_find(row->functional);
    const kv_op *copy = kv_op_find("copy_");
    if (fop == NULL || copy == NULL) return kv_last_error();
    kv_status st = check_device(name, s, stack, out);
    const kv_dtype expected = expected_dtype(row, s, stack, out);
    if (st == KV_OK) st = check_dtype(name, row, stack, expected, out);
    if (st != KV_OK) return st;

    kv_ivalue fslots[KV_STACK_MAX];
    kv_stack f = kv_stack_on(fslots, KV_STACK_MAX);
    for (int i = 0; i < n - 1 && st == KV_OK; i++) st = kv_stack_push(&f, stack->slots[i]);
    if (st == KV_OK && row->dtype == OUT_DTYPE_REDUCE && kv_arg_is_none(&f, row->dtype_slot) &&
        out->dtype != reduce_default_dtype(kv_arg_tensor(&f, 0)))
        f.slots[row->dtype_slot] = (kv_ivalue){ .tag = KV_IV_DTYPE, .v.dtype = out->dtype };
    if (st == KV_OK) st = step(fop, &f, ctx);
    if (st != KV_OK) return st;
    kv_tensor *result = f.size == 1 ? kv_arg_tensor(&f, 0) : NULL;
    if (result == NULL) {
        kv_stack_clear_returns(&f);
        return kv_error(KV_ERR_INTERNAL, "%s: %s returned no tensor", name, row->functional);
    }

    if (result->dtype != expected)
        st = kv_error(KV_ERR_INTERNAL, "%s: %s returned %s where the out= rules expect %s", name, row->functional,
                      kv_dtype_name(result->dtype), kv_dtype_name(expected));
    if (st == KV_OK) st = kv_tensor_resize(out, result->sizes, result->ndim, name, "out");
    if (st == KV_OK) st = check_overlap(name, row, s, stack, out);
    if (st == KV_OK) {
        kv_ivalue cslots[3];
        kv_stack c = kv_stack_on(cslots, 3);
        kv_push_tensor(&c, out);
        kv_push_tensor(&c, result);
        kv_push_bool(&c, false);
        st = step(copy, &c, ctx);
        if (st == KV_OK) kv_stack_clear_returns(&c);
    }
    kv_stack_clear_returns(&f);
    if (st != KV_OK) return st;
    kv_tensor_retain(out);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

KV_REF_KERNEL(out) {
    (void)ks;
    return kv_ref_out_run(op, stack, kv_ref_out_step_reference, NULL);
}

kv_status kv_ref_out_on(const kv_op *op, kv_key backend, kv_stack *stack) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_ref_out_on: argument 'op': is NULL");
    return kv_ref_out_run(op, stack, step_on_backend, &backend);
}
