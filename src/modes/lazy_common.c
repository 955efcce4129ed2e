/* The machinery the three lazy keys share: counters, materialization, the
 * copy through bits (copy_'s XOR rule), the generic boxed fallback, the
 * kernels every lazy key registers, and registration.
 *
 * Materializing calls the backend kernel of the tensor's device directly
 * (kv_redispatch on its backend key) on an alias stripped of every
 * functionality key, so no backend kernel ever sees a bit and the work
 * does not re-enter the layers above (autograd, modes) that are already
 * running. */
#include "modes/lazy_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kv/stack.h"

/* ---- keys ---- */

const kv_lazy_bit *kv_lazy_bit_of(kv_key key) {
    switch (key) {
    case KV_KEY_CONJUGATE: return &kv_lazy_conj_bit;
    case KV_KEY_NEGATIVE: return &kv_lazy_neg_bit;
    case KV_KEY_ZERO_TENSOR: return &kv_lazy_zero_bit;
    case KV_KEY_CPU:
    case KV_KEY_CUDA:
    case KV_KEY_SIM:
    case KV_KEY_ACCEL:
    case KV_KEY_PLUGIN0:
    case KV_KEY_PLUGIN1:
    case KV_KEY_PLUGIN2:
    case KV_KEY_PLUGIN3:
    case KV_KEY_BACKEND_SELECT:
    case KV_KEY_TRACE:
    case KV_KEY_FUNCTIONALIZE:
    case KV_KEY_AD_INPLACE_OR_VIEW:
    case KV_KEY_AUTOGRAD:
    case KV_KEY_AUTOCAST:
    case KV_KEY_BATCHED:
    case KV_KEY_VMAP_MODE:
    case KV_KEY_ACCEL_BOXING:
    case KV_KEY_COUNT:
        break;
    }
    return NULL;
}

kv_kernel_fn kv_lazy_fallback(kv_key key) {
    const kv_lazy_bit *bit = kv_lazy_bit_of(key);
    return bit ? bit->fallback : NULL;
}

/* The key a lazy kernel was selected at is the highest of its key set. */
static kv_status bit_of_kernel(const kv_op *op, kv_keyset ks, const kv_lazy_bit **out) {
    *out = kv_lazy_bit_of(kv_keyset_highest(ks));
    if (*out) return KV_OK;
    return kv_error(KV_ERR_INTERNAL, "%s: a lazy-bit kernel was called with key set %#llx, whose highest key is not "
                    "Conjugate, Negative or ZeroTensor",
                    kv_op_name(op), (unsigned long long)ks);
}

/* ---- counters ---- */

static atomic_llong g_counters[3][3];

static int counter_row(kv_key key) {
    return key == KV_KEY_CONJUGATE ? 0 : key == KV_KEY_NEGATIVE ? 1 : key == KV_KEY_ZERO_TENSOR ? 2 : -1;
}

void kv_lazy_count(kv_key key, kv_lazy_counter which) {
    const int row = counter_row(key);
    if (row >= 0) atomic_fetch_add_explicit(&g_counters[row][which], 1, memory_order_relaxed);
}

kv_lazy_counters kv_lazy_counters_get(kv_key key) {
    kv_lazy_counters c = { 0, 0, 0 };
    const int row = counter_row(key);
    if (row < 0) return c;
    c.fallback_calls = atomic_load(&g_counters[row][KV_LAZY_FALLBACK_CALLS]);
    c.materializations = atomic_load(&g_counters[row][KV_LAZY_MATERIALIZATIONS]);
    c.copy_backs = atomic_load(&g_counters[row][KV_LAZY_COPY_BACKS]);
    return c;
}

void kv_lazy_counters_reset(void) {
    for (int r = 0; r < 3; r++)
        for (int w = 0; w < 3; w++) atomic_store(&g_counters[r][w], 0);
}

/* ---- backend calls ---- */

static kv_keyset backend_of(const kv_tensor *t) {
    const kv_keyset b = t->keys & KV_KEYSET_BACKENDS;
    return b ? b : kv_keyset_of(kv_device_key(t->device));
}

kv_tensor *kv_lazy_raw_alias(const kv_tensor *t) {
    kv_tensor *a = kv_tensor_alias(t);
    if (a) a->keys = backend_of(t);
    return a;
}

/* Pushes the schema's defaults (None where there is none) for args
 * [from, nargs), so the internal calls need not spell them out. */
static kv_status push_defaults(kv_stack *s, const kv_op *op, int from) {
    const kv_schema *sc = kv_op_schema(op);
    for (int i = from; i < sc->nargs; i++) {
        const kv_arg *a = &sc->args[i];
        kv_status st = a->has_default ? kv_stack_push(s, a->default_value) : kv_push_none(s);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

/* Runs the op at the given key set and takes its one tensor return. */
static kv_tensor *run_for_tensor(const kv_op *op, kv_keyset ks, kv_stack *s) {
    if (kv_redispatch(op, ks, s) != KV_OK) return NULL;
    if (s->size != 1 || s->slots[0].tag != KV_IV_TENSOR) {
        kv_stack_clear_returns(s);
        kv_error(KV_ERR_INTERNAL, "%s: expected one tensor return from the backend kernel", kv_op_name(op));
        return NULL;
    }
    return s->slots[0].v.tensor;
}

kv_tensor *kv_lazy_backend_unary(const char *op_name, const kv_tensor *raw) {
    const kv_op *op = kv_op_find(op_name);
    if (op == NULL) return NULL;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    if (kv_push_tensor(&s, (kv_tensor *)raw) != KV_OK || push_defaults(&s, op, 1) != KV_OK) return NULL;
    return run_for_tensor(op, backend_of(raw), &s);
}

kv_tensor *kv_lazy_backend_zeros(const kv_tensor *t) {
    const kv_op *op = kv_op_find("zeros");
    if (op == NULL) return NULL;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    if (kv_push_ints(&s, (kv_int_list){ t->sizes, t->ndim }) != KV_OK || kv_push_dtype(&s, t->dtype) != KV_OK ||
        kv_push_none(&s) != KV_OK || kv_push_device(&s, t->device) != KV_OK || kv_push_none(&s) != KV_OK)
        return NULL;
    return run_for_tensor(op, kv_keyset_of(kv_device_key(t->device)), &s);
}

static kv_tensor *backend_to_dtype(const kv_tensor *raw, kv_dtype dt) {
    const kv_op *op = kv_op_find("_to_copy");
    if (op == NULL) return NULL;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    if (kv_push_tensor(&s, (kv_tensor *)raw) != KV_OK || kv_push_dtype(&s, dt) != KV_OK ||
        push_defaults(&s, op, 2) != KV_OK)
        return NULL;
    return run_for_tensor(op, backend_of(raw), &s);
}

/* dst_raw.copy_(src_raw), both without lazy bits: through the layers in
 * `below` that are live (Functionalize, Trace), else at the backend. */
static kv_status layered_copy(kv_tensor *dst_raw, kv_tensor *src_raw, kv_keyset below) {
    const kv_op *op = kv_op_find("copy_");
    if (op == NULL) return kv_last_error();
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_status st;
    if ((st = kv_push_tensor(&s, dst_raw)) != KV_OK || (st = kv_push_tensor(&s, src_raw)) != KV_OK ||
        (st = push_defaults(&s, op, 2)) != KV_OK)
        return st;
    const kv_keyset backends = backend_of(dst_raw) | backend_of(src_raw);
    const kv_keyset layers = below & KV_KEYSET_FUNCTIONALITY & kv_keyset_below(KV_KEY_CONJUGATE);
    if (layers != 0) {
        if ((st = kv_redispatch(op, layers | backends, &s)) != KV_OK) return st;
        kv_stack_clear_returns(&s);
        return KV_OK;
    }
    kv_tensor *r = run_for_tensor(op, backends, &s);
    if (r == NULL) return kv_last_error();
    kv_tensor_release(r);
    return KV_OK;
}

/* ---- materialization and copies ---- */

kv_tensor *kv_lazy_materialize_bit(const kv_tensor *t, const kv_lazy_bit *bit) {
    kv_tensor *raw = kv_lazy_raw_alias(t);
    if (raw == NULL) return NULL;
    kv_tensor *r = bit->apply(raw);
    kv_tensor_release(raw);
    if (r == NULL) return NULL;
    if (!bit->immutable) r->keys |= t->keys & KV_KEYSET_LAZY & ~kv_keyset_of(bit->key);
    kv_lazy_count(bit->key, KV_LAZY_MATERIALIZATIONS);
    return r;
}

kv_status kv_lazy_immutable_error(const char *op, const char *arg) {
    return kv_error(KV_ERR_INVALID_ARG,
                    "%s: argument '%s': ZeroTensors are immutable. Please use the materialized zero tensor obtained "
                    "using .clone() if you want a mutable tensor.",
                    op, arg);
}

/* Swaps the owned *t for `next`; false (error set) when next is NULL. */
static bool replace_with(kv_tensor **t, kv_tensor *next) {
    kv_tensor_release(*t);
    *t = next;
    return next != NULL;
}

kv_status kv_lazy_copy_logical(const char *op, kv_tensor *dst, const kv_tensor *src, kv_keyset below) {
    if (kv_lazy_has(dst, KV_KEY_ZERO_TENSOR)) return kv_lazy_immutable_error(op, "self");
    /* stored_dst = f_dst(logical) = f_dst(f_src(stored_src)); the bits
     * both carry cancel (involutions that commute), the rest is applied to
     * src. A ZeroTensor src stores zeros, which every f keeps. */
    const kv_keyset diff = (dst->keys ^ src->keys) & (kv_keyset_of(KV_KEY_CONJUGATE) | kv_keyset_of(KV_KEY_NEGATIVE));
    kv_tensor *s = kv_lazy_raw_alias(src);
    if (s == NULL) return kv_last_error();
    bool ok = true;
    /* Convert first, so negation happens in dst's dtype: neg of a bool
     * source going into an int is the int's negation. */
    if (diff && src->dtype != dst->dtype) ok = replace_with(&s, backend_to_dtype(s, dst->dtype));
    if (ok && kv_keyset_has(diff, KV_KEY_CONJUGATE)) ok = replace_with(&s, kv_lazy_backend_unary("conj_physical", s));
    if (ok && kv_keyset_has(diff, KV_KEY_NEGATIVE)) ok = replace_with(&s, kv_lazy_backend_unary("neg", s));
    if (!ok) return kv_last_error();
    kv_status st = KV_OK;
    kv_tensor *d = kv_lazy_raw_alias(dst);
    if (d == NULL) st = kv_last_error();
    else st = layered_copy(d, s, below);
    kv_tensor_release(d);
    kv_tensor_release(s);
    return st;
}

kv_tensor *kv_lazy_make(const kv_tensor *logical, kv_key bit) {
    const kv_lazy_bit *b = kv_lazy_bit_of(bit);
    if (logical == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_lazy_make: argument 'logical': NULL tensor");
        return NULL;
    }
    if (b == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_lazy_make: argument 'bit': %s is not a lazy key (Conjugate, Negative, "
                 "ZeroTensor)", (unsigned)bit < KV_KEY_COUNT ? kv_key_name(bit) : "(invalid key)");
        return NULL;
    }
    if (bit == KV_KEY_CONJUGATE && !kv_dtype_is_complex(logical->dtype)) {
        kv_error(KV_ERR_DTYPE, "kv_lazy_make: argument 'logical': the Conjugate bit needs a complex dtype, got %s",
                 kv_dtype_name(logical->dtype));
        return NULL;
    }
    if (bit == KV_KEY_NEGATIVE && logical->dtype == KV_BOOL) {
        kv_error(KV_ERR_DTYPE, "kv_lazy_make: argument 'logical': the Negative bit is not supported for bool");
        return NULL;
    }
    if (bit == KV_KEY_ZERO_TENSOR) {
        kv_tensor *z = kv_lazy_backend_zeros(logical);
        if (z) z->keys = kv_keyset_add(z->keys, KV_KEY_ZERO_TENSOR);
        return z;
    }
    kv_tensor *plain = kv_lazy_materialize(logical);
    if (plain == NULL) return NULL;
    /* stored = f(logical): f is its own inverse. */
    kv_tensor *stored = b->apply(plain);
    kv_tensor_release(plain);
    if (stored) stored->keys = kv_keyset_add(stored->keys, bit);
    return stored;
}

kv_tensor *kv_lazy_materialize(const kv_tensor *t) {
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "kv_lazy_materialize: argument 't': NULL tensor");
        return NULL;
    }
    static const kv_key order[3] = { KV_KEY_ZERO_TENSOR, KV_KEY_NEGATIVE, KV_KEY_CONJUGATE };
    kv_tensor *cur = NULL;
    for (int i = 0; i < 3; i++) {
        const kv_tensor *from = cur ? cur : t;
        if (!kv_lazy_has(from, order[i])) continue;
        kv_tensor *next = kv_lazy_materialize_bit(from, kv_lazy_bit_of(order[i]));
        kv_tensor_release(cur);
        if (next == NULL) return NULL;
        cur = next;
    }
    if (cur) return cur;
    kv_tensor *raw = kv_lazy_raw_alias(t);
    if (raw == NULL) return NULL;
    kv_tensor *copy = kv_lazy_backend_unary("clone", raw);
    kv_tensor_release(raw);
    return copy;
}

/* ---- the fallback ---- */

/* One argument the fallback replaced. */
typedef struct lazy_arg {
    int index;          /* stack slot */
    kv_ivalue saved;    /* the caller's value */
    kv_tensor *m;       /* Tensor: the materialized copy (owned) */
    kv_tensor **items;  /* Tensor[]: the new list, every entry owned */
    int n;
    bool write;
} lazy_arg;

static void release_args(lazy_arg *rec, int nrec) {
    for (int r = 0; r < nrec; r++) {
        kv_tensor_release(rec[r].m);
        for (int e = 0; e < rec[r].n; e++) kv_tensor_release(rec[r].items[e]);
        free(rec[r].items);
    }
}

/* PyTorch's wording for writing through overlapping elements (a stride-0
 * dim, overlapping windows): the in-place kernel runs on a contiguous
 * copy, which would not notice. */
static kv_status check_writable(const kv_lazy_bit *bit, const kv_op *op, const kv_arg *a, const kv_tensor *t) {
    if (!a->alias.is_write) return KV_OK;
    if (bit->immutable) return kv_lazy_immutable_error(kv_op_name(op), a->name);
    return kv_tensor_check_no_internal_overlap(kv_op_name(op), a->name, t);
}

static kv_status replace_tensor(const kv_lazy_bit *bit, const kv_op *op, const kv_arg *a, kv_ivalue *v, int i,
                                lazy_arg *rec) {
    kv_tensor *t = v->v.tensor;
    kv_status st = check_writable(bit, op, a, t);
    if (st != KV_OK) return st;
    kv_tensor *m = kv_lazy_materialize_bit(t, bit);
    if (m == NULL) return kv_last_error();
    *rec = (lazy_arg){ i, *v, m, NULL, 0, a->alias.is_write };
    v->v.tensor = m;
    return KV_OK;
}

static kv_status replace_list(const kv_lazy_bit *bit, const kv_op *op, const kv_arg *a, kv_ivalue *v, int i,
                              lazy_arg *rec) {
    const kv_tensor_list list = v->v.tensors;
    kv_tensor **items = calloc((size_t)(list.n > 0 ? list.n : 1), sizeof *items);
    if (items == NULL) return kv_error(KV_ERR_OOM, "%s: out of memory for argument '%s'", kv_op_name(op), a->name);
    *rec = (lazy_arg){ i, *v, NULL, items, 0, a->alias.is_write };
    for (int e = 0; e < list.n; e++) {
        kv_tensor *t = list.items[e];
        if (kv_lazy_has(t, bit->key)) {
            kv_status st = check_writable(bit, op, a, t);
            if (st != KV_OK) return st;
            if ((items[e] = kv_lazy_materialize_bit(t, bit)) == NULL) return kv_last_error();
        } else {
            kv_tensor_retain(t);
            items[e] = t;
        }
        rec->n = e + 1;
    }
    v->v.tensors = (kv_tensor_list){ items, list.n };
    return KV_OK;
}

/* Writes each mutable argument's result back into the caller's tensor and
 * returns the caller's tensor where the op returned the copy. */
static kv_status copy_back(const kv_lazy_bit *bit, const kv_op *op, kv_keyset below, kv_stack *stack,
                           const lazy_arg *rec, int nrec) {
    const kv_schema *s = kv_op_schema(op);
    for (int r = 0; r < nrec; r++) {
        if (!rec[r].write) continue;
        kv_status st = KV_OK;
        if (rec[r].m) {
            kv_tensor *orig = rec[r].saved.v.tensor;
            /* An out= op resized the materialized copy: the caller's out
             * takes the shape first, then the values through its bit, as
             * PyTorch's math-bit fallback does (resize_output, copy_). */
            if (!kv_same_shape(orig, rec[r].m))
                st = kv_tensor_resize(orig, rec[r].m->sizes, rec[r].m->ndim, kv_op_name(op), s->args[rec[r].index].name);
            if (st == KV_OK) st = kv_lazy_copy_logical(kv_op_name(op), orig, rec[r].m, below);
            if (st != KV_OK) return st;
            kv_lazy_count(bit->key, KV_LAZY_COPY_BACKS);
            const char set = s->args[rec[r].index].alias.set;
            for (int j = 0; j < stack->size && j < s->nreturns; j++) {
                kv_ivalue *ret = &stack->slots[j];
                if (!s->returns[j].alias.is_write || s->returns[j].alias.set != set || ret->tag != KV_IV_TENSOR)
                    continue;
                kv_tensor_release(ret->v.tensor);
                kv_tensor_retain(orig);
                ret->v.tensor = orig;
            }
        } else {
            const kv_tensor_list orig = rec[r].saved.v.tensors;
            for (int e = 0; e < orig.n; e++) {
                if (!kv_lazy_has(orig.items[e], bit->key)) continue;
                st = kv_lazy_copy_logical(kv_op_name(op), orig.items[e], rec[r].items[e], below);
                if (st != KV_OK) return st;
                kv_lazy_count(bit->key, KV_LAZY_COPY_BACKS);
            }
        }
    }
    return KV_OK;
}

kv_status kv_lazy_fallback_run(const kv_lazy_bit *bit, const kv_op *op, kv_keyset ks, kv_stack *stack,
                               bool counted) {
    if (counted) kv_lazy_count(bit->key, KV_LAZY_FALLBACK_CALLS);
    const kv_schema *s = kv_op_schema(op);
    lazy_arg rec[KV_SCHEMA_MAX_ARGS];
    int nrec = 0;
    bool any_write = false;
    kv_status st = KV_OK;
    for (int i = 0; i < s->nargs && i < stack->size && st == KV_OK; i++) {
        const kv_arg *a = &s->args[i];
        kv_ivalue *v = &stack->slots[i];
        if (a->type.kind != KV_TYPE_TENSOR) continue;
        if (v->tag == KV_IV_TENSOR && kv_lazy_has(v->v.tensor, bit->key)) {
            st = replace_tensor(bit, op, a, v, i, &rec[nrec]);
            if (st == KV_OK) nrec++;
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            bool flagged = false;
            for (int e = 0; e < v->v.tensors.n && !flagged; e++) flagged = kv_lazy_has(v->v.tensors.items[e], bit->key);
            if (!flagged) continue;
            st = replace_list(bit, op, a, v, i, &rec[nrec]);
            nrec++; /* also on failure: the record owns what was made */
        }
        if (st == KV_OK && nrec > 0 && rec[nrec - 1].index == i) any_write |= rec[nrec - 1].write;
    }
    if (st == KV_OK) {
        st = kv_redispatch(op, ks & kv_keyset_below(bit->key), stack);
        if (st == KV_OK && any_write && (st = copy_back(bit, op, ks & kv_keyset_below(bit->key), stack, rec, nrec)) != KV_OK)
            kv_stack_clear_returns(stack);
    }
    /* A failed call leaves no returns, so the caller's arguments go back
     * in place of the copies about to be released. */
    if (st != KV_OK)
        for (int r = 0; r < nrec; r++) stack->slots[rec[r].index] = rec[r].saved;
    release_args(rec, nrec);
    return st;
}

/* ---- kernels every lazy key registers ---- */

/* op below the bit with argument 0 replaced by an alias of it without the
 * bit (its other bits kept); after a failure argument 0 is the caller's
 * tensor again. */
static kv_status redispatch_stripped(const kv_op *op, const kv_lazy_bit *bit, kv_keyset below, kv_stack *stack) {
    kv_tensor *stripped = kv_tensor_alias(kv_arg_tensor(stack, 0));
    if (stripped == NULL) return kv_last_error();
    stripped->keys = kv_keyset_remove(stripped->keys, bit->key);
    const kv_ivalue saved = stack->slots[0];
    stack->slots[0].v.tensor = stripped;
    const kv_status st = kv_redispatch(op, below, stack);
    if (st != KV_OK) stack->slots[0] = saved;
    kv_tensor_release(stripped);
    return st;
}

/* clone materializes: the result holds the logical values and no bit.
 * ZeroTensor takes the fallback's work (without counting as it). A
 * Conjugate or Negative self is cloned below the bit first, with the
 * call's memory_format, so the copy has the strides preserve_format gives
 * (PyTorch: empty_like, then copy_ through the bit), then f is applied to
 * it in place: f(copy) is computed and copied back into it. */
static kv_status clone_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_lazy_bit *bit;
    kv_status st = bit_of_kernel(op, ks, &bit);
    if (st != KV_OK) return st;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (bit->immutable || !kv_lazy_has(self, bit->key)) return kv_lazy_fallback_run(bit, op, ks, stack, false);
    const kv_keyset below = ks & kv_keyset_below(bit->key);
    if ((st = redispatch_stripped(op, bit, below, stack)) != KV_OK) return st;
    kv_tensor *copy = stack->slots[0].v.tensor;
    kv_tensor *applied = bit->apply(copy);
    st = applied ? kv_lazy_copy_logical(kv_op_name(op), copy, applied, below) : kv_last_error();
    kv_tensor_release(applied);
    if (st != KV_OK) {
        kv_stack_clear_returns(stack);
        return st;
    }
    kv_lazy_count(bit->key, KV_LAZY_MATERIALIZATIONS);
    return KV_OK;
}

/* copy_(self, src): the XOR rule for every bit at once. */
static kv_status copy_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_lazy_bit *bit;
    kv_status st = bit_of_kernel(op, ks, &bit);
    if (st != KV_OK) return st;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_tensor *src = kv_arg_tensor(stack, 1);
    if (((self->keys | src->keys) & KV_KEYSET_LAZY) == 0)
        return kv_redispatch(op, ks & kv_keyset_below(bit->key), stack);
    if ((st = kv_lazy_copy_logical(kv_op_name(op), self, src, ks & kv_keyset_below(bit->key))) != KV_OK) return st;
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}

/* The stored value f(v) of a logical scalar v under a Conjugate or
 * Negative bit, exactly as f applied to a tensor holding v would give it
 * (IEEE negation, so neg(+0) = -0; conj(r) = r - 0i). For zero_, v is the
 * dtype's zero. */
static kv_scalar stored_scalar(kv_key bit, kv_scalar v, kv_dtype dt) {
    if (bit == KV_KEY_CONJUGATE || kv_dtype_is_complex(dt)) {
        /* A complex tensor holds v as v + 0i: its imaginary zero flips too. */
        double re, im;
        kv_scalar_to_complex(v, &re, &im);
        return bit == KV_KEY_CONJUGATE ? kv_scalar_complex(re, -im) : kv_scalar_complex(-re, -im);
    }
    /* A floating tensor holds an integral 0 as +0.0, whose negation is -0.0. */
    if (kv_dtype_is_floating(dt)) return kv_scalar_double(-kv_scalar_to_double(v));
    switch (v.kind) {
    case KV_SCALAR_BOOL: return kv_scalar_int(v.v.b ? -1 : 0);
    case KV_SCALAR_INT: return v.v.i == INT64_MIN ? kv_scalar_double(-(double)v.v.i) : kv_scalar_int(-v.v.i);
    case KV_SCALAR_DOUBLE: return kv_scalar_double(-v.v.d);
    case KV_SCALAR_COMPLEX: return kv_scalar_complex(-v.v.c.re, -v.v.c.im);
    }
    return v;
}

/* fill_ and zero_ at Conjugate and Negative: one value written everywhere
 * needs neither a materialized copy nor a copy back, so the stored value
 * f(value) is written into self itself (fill_.Scalar below the bit, self
 * stripped of it; other bits are the keys below). Unlike the fallback's
 * copy back (a copy_, which refuses an overlapping destination) this
 * writes into a broadcast or windowed self, as the op does without a bit
 * (the reference's fill_ skips the overlap check: every write stores the
 * same value). zero_ takes this path only for an overlapping self. */
static kv_status fill_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_lazy_bit *bit;
    kv_status st = bit_of_kernel(op, ks, &bit);
    if (st != KV_OK) return st;
    const kv_keyset below = ks & kv_keyset_below(bit->key);
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!kv_lazy_has(self, bit->key)) return kv_redispatch(op, below, stack);
    const bool is_zero = strcmp(kv_op_name(op), "zero_") == 0;
    /* zero_ into a self without overlap goes through the fallback, so the
     * layers below the bit (Functionalize, Trace) see zero_ itself. */
    if (is_zero && kv_tensor_internal_overlap(self, NULL) == KV_OVERLAP_NO)
        return kv_lazy_fallback_run(bit, op, ks, stack, true);
    const kv_dtype dt = self->dtype;
    const kv_scalar zero = kv_dtype_is_complex(dt)    ? kv_scalar_complex(0.0, 0.0)
                           : kv_dtype_is_floating(dt) ? kv_scalar_double(0.0)
                                                      : kv_scalar_int(0);
    const kv_scalar value = stored_scalar(bit->key, is_zero ? zero : kv_arg_scalar(stack, 1), dt);
    const kv_op *fill = kv_op_find("fill_.Scalar");
    if (fill == NULL) return kv_last_error();
    kv_tensor *stripped = kv_tensor_alias(self);
    if (stripped == NULL) return kv_last_error();
    stripped->keys = kv_keyset_remove(stripped->keys, bit->key);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    if ((st = kv_push_tensor(&s, stripped)) == KV_OK && (st = kv_push_scalar(&s, value)) == KV_OK)
        st = kv_redispatch(fill, below, &s);
    if (st == KV_OK) kv_stack_clear_returns(&s);
    kv_tensor_release(stripped);
    if (st != KV_OK) return st;
    kv_tensor_retain(self);
    kv_stack_return_tensor(stack, self);
    return KV_OK;
}

/* contiguous and reshape are views that may copy: strip the bit, run the
 * op, and put the bit on the result, which holds stored values either way
 * (a view of them or a copy of them). */
static kv_status view_or_copy_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_lazy_bit *bit;
    kv_status st = bit_of_kernel(op, ks, &bit);
    if (st != KV_OK) return st;
    const kv_keyset below = ks & kv_keyset_below(bit->key);
    kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!kv_lazy_has(self, bit->key)) return kv_redispatch(op, below, stack);
    st = redispatch_stripped(op, bit, below, stack);
    if (st == KV_OK && stack->size >= 1 && stack->slots[0].tag == KV_IV_TENSOR)
        stack->slots[0].v.tensor->keys |= kv_keyset_of(bit->key);
    return st;
}

static kv_status report_bit(kv_stack *stack, kv_key k) {
    kv_stack_return_bool(stack, kv_lazy_has(kv_arg_tensor(stack, 0), k));
    return KV_OK;
}
static kv_status is_conj_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return report_bit(stack, KV_KEY_CONJUGATE);
}
static kv_status is_neg_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return report_bit(stack, KV_KEY_NEGATIVE);
}
static kv_status is_zero_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return report_bit(stack, KV_KEY_ZERO_TENSOR);
}

kv_status kv_lazy_resolve_kernel(const kv_lazy_bit *bit, const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!kv_lazy_has(self, bit->key)) return kv_redispatch(op, ks & kv_keyset_below(bit->key), stack);
    kv_tensor *m = kv_lazy_materialize_bit(self, bit);
    if (m == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, m);
    return KV_OK;
}

/* ---- registration ---- */

kv_status kv_lazy_register(void) {
    static const kv_key keys[3] = { KV_KEY_CONJUGATE, KV_KEY_NEGATIVE, KV_KEY_ZERO_TENSOR };
    for (int k = 0; k < 3; k++) kv_register_fallback(keys[k], kv_lazy_fallback(keys[k]));
    /* Views pass the bit on: kv_tensor_view copies keys. Ops registered
     * later with kv_op_register do not get this automatically. */
    const int nops = kv_op_count();
    for (int i = 0; i < nops; i++) {
        const kv_op *op = kv_op_at(i);
        if (op == NULL) return kv_last_error();
        if (!kv_schema_is_view(kv_op_schema(op))) continue;
        for (int k = 0; k < 3; k++) {
            kv_status st = kv_register_fallthrough(kv_op_name(op), keys[k]);
            if (st != KV_OK) return st;
        }
    }
    static const struct {
        const char *op;
        kv_kernel_fn fn;
    } shared[] = {
        { "clone", clone_kernel },
        { "copy_", copy_kernel },
        { "contiguous", view_or_copy_kernel }, /* a kernel replaces the view fallthrough */
        { "reshape", view_or_copy_kernel },
        { "is_conj", is_conj_kernel },
        { "is_neg", is_neg_kernel },
        { "_is_zerotensor", is_zero_kernel },
    };
    for (size_t j = 0; j < sizeof shared / sizeof shared[0]; j++) {
        for (int k = 0; k < 3; k++) {
            kv_status st = kv_register_kernel(shared[j].op, keys[k], shared[j].fn);
            if (st != KV_OK) return st;
        }
    }
    /* fill_kernel: not at ZeroTensor, whose fallback refuses any write. */
    static const char *const fills[2] = { "fill_.Scalar", "zero_" };
    for (int j = 0; j < 2; j++) {
        for (int k = 0; k < 2; k++) {
            kv_status st = kv_register_kernel(fills[j], keys[k], fill_kernel);
            if (st != KV_OK) return st;
        }
    }
    kv_status st;
    if ((st = kv_lazy_conj_register()) != KV_OK) return st;
    if ((st = kv_lazy_neg_register()) != KV_OK) return st;
    return kv_lazy_zero_register();
}
