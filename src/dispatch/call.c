/* kv_call and kv_redispatch: the hot path. Argument checking, the key set
 * computation and one table index; nothing here allocates. */
#include "dispatch/op_internal.h"
#include "dispatch/tls_internal.h"

#include <stdatomic.h>
#include <stdio.h>

#include "kv/tensor.h"

/* ---- argument checking ---- */

/* "Tensor?", "int[1]?" ... as the schema spells the type. */
static void type_text(const kv_type *t, char *buf, size_t cap) {
    char len[16] = "";
    if (t->is_list) {
        if (t->fixed_len > 0) snprintf(len, sizeof len, "[%d]", t->fixed_len);
        else snprintf(len, sizeof len, "[]");
    }
    snprintf(buf, cap, "%s%s%s", kv_type_kind_name(t->kind), len, t->optional ? "?" : "");
}

static kv_status arg_mismatch(const kv_op *op, const kv_arg *a, const char *got) {
    char want[40];
    type_text(&a->type, want, sizeof want);
    return kv_error(KV_ERR_INVALID_ARG, "%s: argument '%s': expected %s, got %s", op->schema.full_name, a->name, want,
                    got);
}

kv_ivalue_tag kv_dispatch_tag_for(const kv_type *t) {
    if (t->is_list) return t->kind == KV_TYPE_TENSOR ? KV_IV_TENSOR_LIST : KV_IV_INT_LIST;
    switch (t->kind) {
    case KV_TYPE_TENSOR: return KV_IV_TENSOR;
    case KV_TYPE_INT: return KV_IV_INT;
    case KV_TYPE_FLOAT: return KV_IV_DOUBLE;
    case KV_TYPE_BOOL: return KV_IV_BOOL;
    case KV_TYPE_STR: return KV_IV_STR;
    case KV_TYPE_SCALAR: return KV_IV_SCALAR;
    case KV_TYPE_SCALAR_TYPE: return KV_IV_DTYPE;
    case KV_TYPE_DEVICE: return KV_IV_DEVICE;
    case KV_TYPE_LAYOUT: return KV_IV_INT;
    case KV_TYPE_MEMORY_FORMAT: return KV_IV_INT;
    case KV_TYPE_GENERATOR: return KV_IV_GENERATOR;
    }
    return KV_IV_NONE;
}

/* The tag is right; is the payload usable? Kernels trust it blindly. */
static kv_status check_payload(const kv_op *op, const kv_arg *a, const kv_ivalue *v) {
    char got[64];
    switch (v->tag) {
    case KV_IV_TENSOR:
        if (v->v.tensor == NULL) return arg_mismatch(op, a, "a NULL tensor");
        return KV_OK;
    case KV_IV_TENSOR_LIST:
        if (v->v.tensors.n < 0 || (v->v.tensors.n > 0 && v->v.tensors.items == NULL))
            return arg_mismatch(op, a, "a malformed tensor list");
        for (int i = 0; i < v->v.tensors.n; i++) {
            if (v->v.tensors.items[i] == NULL) {
                snprintf(got, sizeof got, "a NULL tensor at element %d", i);
                return arg_mismatch(op, a, got);
            }
        }
        return KV_OK;
    case KV_IV_INT_LIST:
        if (v->v.ints.n < 0 || (v->v.ints.n > 0 && v->v.ints.items == NULL))
            return arg_mismatch(op, a, "a malformed int list");
        return KV_OK;
    case KV_IV_STR:
        if (v->v.str == NULL) return arg_mismatch(op, a, "a NULL string");
        return KV_OK;
    case KV_IV_SCALAR:
        if ((unsigned)v->v.scalar.kind > (unsigned)KV_SCALAR_COMPLEX) {
            snprintf(got, sizeof got, "a Scalar of unknown kind %d", (int)v->v.scalar.kind);
            return arg_mismatch(op, a, got);
        }
        return KV_OK;
    case KV_IV_DTYPE:
        if ((unsigned)v->v.dtype >= (unsigned)KV_DTYPE_COUNT) {
            snprintf(got, sizeof got, "unknown dtype value %d", (int)v->v.dtype);
            return arg_mismatch(op, a, got);
        }
        return KV_OK;
    case KV_IV_DEVICE:
        if ((unsigned)v->v.device.type >= (unsigned)KV_DEVICE_TYPE_COUNT || v->v.device.index < 0) {
            snprintf(got, sizeof got, "unknown device (type %d, index %d)", (int)v->v.device.type,
                     v->v.device.index);
            return arg_mismatch(op, a, got);
        }
        return KV_OK;
    case KV_IV_GENERATOR:
        if (v->v.gen == NULL) return arg_mismatch(op, a, "a NULL generator");
        return KV_OK;
    case KV_IV_NONE:
    case KV_IV_INT:
    case KV_IV_DOUBLE:
    case KV_IV_BOOL:
        return KV_OK;
    }
    return KV_OK;
}

/* The precise check, with the message naming what is wrong. */
static kv_status check_stack_slow(const kv_op *op, const kv_stack *stack) {
    const kv_schema *s = &op->schema;
    if (stack->size != s->nargs || stack->size > stack->cap || (stack->size > 0 && stack->slots == NULL))
        return kv_error(KV_ERR_INTERNAL, "%s: expected %d arguments on the stack, got %d (capacity %d)", s->full_name,
                        s->nargs, stack->size, stack->cap);
    for (int i = 0; i < s->nargs; i++) {
        const kv_arg *a = &s->args[i];
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_NONE) {
            if (!a->type.optional) return arg_mismatch(op, a, "None");
            continue;
        }
        if (v->tag != kv_dispatch_tag_for(&a->type)) {
            if ((unsigned)v->tag > (unsigned)KV_IV_STR) return arg_mismatch(op, a, "a value with an unknown tag");
            return arg_mismatch(op, a, kv_ivalue_tag_name(v->tag));
        }
        kv_status st = check_payload(op, a, v);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

/* One compare per argument against the tags precomputed at registration;
 * only payloads a kernel could trip on (NULL tensors, lists, strings,
 * enums) are looked at, and anything off goes to the precise check. */
static kv_status check_stack(const kv_op *op, const kv_stack *stack) {
    const int n = op->schema.nargs;
    if (stack->size != n || stack->size > stack->cap || (n > 0 && stack->slots == NULL))
        return check_stack_slow(op, stack);
    for (int i = 0; i < n; i++) {
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == (kv_ivalue_tag)op->arg_tag[i]) {
            switch (v->tag) {
            case KV_IV_TENSOR:
                if (v->v.tensor != NULL) continue;
                break;
            case KV_IV_INT:
            case KV_IV_DOUBLE:
            case KV_IV_BOOL:
                continue;
            default:
                if (check_payload(op, &op->schema.args[i], v) == KV_OK) continue;
                break;
            }
        } else if (v->tag == KV_IV_NONE && (op->arg_optional >> i & 1)) {
            continue;
        }
        return check_stack_slow(op, stack);
    }
    return KV_OK;
}

/* ---- key sets ---- */

static void device_text(kv_device d, bool with_index, char *buf, size_t cap) {
    if (with_index || d.index != 0) snprintf(buf, cap, "%s:%d", kv_device_type_name(d.type), d.index);
    else snprintf(buf, cap, "%s", kv_device_type_name(d.type));
}

typedef struct keyset_scan {
    kv_keyset ks;
    bool any_tensor;
    bool have_device;
    kv_device device; /* of the first tensor that is not a 0-dim CPU tensor */
} keyset_scan;

static kv_status scan_tensor(const kv_op *op, const kv_arg *a, const kv_tensor *t, keyset_scan *sc) {
    sc->ks |= t->keys;
    sc->any_tensor = true;
    /* PyTorch lets a 0-dim CPU tensor take part in an op on any device (it
     * is read as a scalar), so it neither sets nor checks the device. */
    if (t->ndim == 0 && t->device.type == KV_DEVICE_CPU) return KV_OK;
    if (!sc->have_device) {
        sc->device = t->device;
        sc->have_device = true;
        return KV_OK;
    }
    if (kv_device_equal(sc->device, t->device)) return KV_OK;
    char d0[32], d1[32];
    bool same_type = sc->device.type == t->device.type;
    device_text(sc->device, same_type, d0, sizeof d0);
    device_text(t->device, same_type, d1, sizeof d1);
    return kv_error(KV_ERR_DEVICE,
                    "%s: expected all tensors to be on the same device, but found at least two devices, %s and %s "
                    "(argument '%s')",
                    op->schema.full_name, d0, d1, a->name);
}

/* The key set of a call whose tensor arguments' keys OR to tensor_keys,
 * with the thread's TLS keys and the op's fallthrough: the one formula of
 * compute_keyset, scan_common, kv_call_typed and the exact gate's
 * kv_dispatch_selected_kernel, so they cannot drift apart. */
__attribute__((always_inline)) static inline kv_keyset keyset_with_tls(const kv_op *op, kv_keyset tensor_keys) {
    const kv_tls_keys tls = kv_tls_now();
    return ((tensor_keys | tls.included) & ~tls.excluded & ~op->fallthrough) & KV_KEYSET_ALL;
}

static kv_status compute_keyset(const kv_op *op, const kv_stack *stack, kv_keyset *out) {
    keyset_scan sc = { KV_KEYSET_EMPTY, false, false, KV_DEVICE_CPU0 };
    for (int j = 0; j < op->ntensor_args; j++) {
        int i = op->tensor_args[j];
        const kv_arg *a = &op->schema.args[i];
        const kv_ivalue *v = &stack->slots[i];
        kv_status st = KV_OK;
        if (v->tag == KV_IV_TENSOR) {
            st = scan_tensor(op, a, v->v.tensor, &sc);
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n && st == KV_OK; e++) st = scan_tensor(op, a, v->v.tensors.items[e], &sc);
        }
        if (st != KV_OK) return st;
    }
    if (!sc.any_tensor) {
        /* Factories (and calls whose tensors are all absent) run on the
         * backend their Device argument names; CPU when there is none. */
        kv_key backend = KV_KEY_CPU;
        if (op->device_arg >= 0 && stack->slots[op->device_arg].tag == KV_IV_DEVICE)
            backend = kv_device_key(stack->slots[op->device_arg].v.device);
        sc.ks |= kv_keyset_of(backend);
        /* An accel device implies its boxing key, as accel tensors carry
         * it: a factory for accel is boxed first, like any accel op, so
         * the layers below it run once, on the target (src/boxing). */
        if (backend == KV_KEY_ACCEL) sc.ks |= kv_keyset_of(KV_KEY_ACCEL_BOXING);
    }
    *out = keyset_with_tls(op, sc.ks);
    return KV_OK;
}

/* ---- dispatch ---- */

static kv_status no_kernel(const kv_op *op, kv_keyset ks) {
    if (ks == KV_KEYSET_EMPTY)
        return kv_error(KV_ERR_MISSING_KERNEL,
                        "op '%s': no kernel to run: the dispatch key set is empty (every key was excluded or is a "
                        "fallthrough)",
                        op->schema.full_name);
    char have[256];
    int len = 0;
    have[0] = '\0';
    for (int k = 0; k < KV_KEY_COUNT; k++) {
        if (!kv_keyset_has(op->kernel_keys, (kv_key)k) || len >= (int)sizeof have) continue;
        int n = snprintf(have + len, sizeof have - (size_t)len, "%s%s", len ? ", " : "", kv_key_name((kv_key)k));
        if (n > 0) len += n;
    }
    return kv_error(KV_ERR_MISSING_KERNEL, "op '%s': no kernel for key %s (kernels registered for: %s)",
                    op->schema.full_name, kv_key_name(kv_keyset_highest(ks)), len ? have : "none");
}

#if KV_LAZY_CHECK
static kv_status lazy_bit_error(const kv_op *op, const kv_arg *a, const kv_tensor *t, kv_keyset guarded,
                                kv_key backend) {
    return kv_error(KV_ERR_INTERNAL,
                    "%s: argument '%s': reached the %s backend kernel carrying the lazy bit %s, which a layer above "
                    "should have materialized (a kvsuite bug)",
                    op->schema.full_name, a->name, kv_key_name(backend),
                    kv_key_name(kv_keyset_highest(t->keys & guarded)));
}

/* Backend kernels never see a lazy bit, except through the ops that fall
 * through its key (views, which pass it on): one pass over the tensor
 * arguments, skipped for ops that fall through all three keys. */
static kv_status lazy_check(const kv_op *op, kv_key backend, const kv_stack *stack) {
    const kv_keyset guarded = KV_KEYSET_LAZY & ~op->fallthrough;
    if (guarded == KV_KEYSET_EMPTY) return KV_OK;
    for (int j = 0; j < op->ntensor_args; j++) {
        const int i = op->tensor_args[j];
        if (i >= stack->size) break;
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_TENSOR) {
            if (v->v.tensor && (v->v.tensor->keys & guarded))
                return lazy_bit_error(op, &op->schema.args[i], v->v.tensor, guarded, backend);
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n; e++) {
                const kv_tensor *t = v->v.tensors.items[e];
                if (t && (t->keys & guarded)) return lazy_bit_error(op, &op->schema.args[i], t, guarded, backend);
            }
        }
    }
    return KV_OK;
}
#endif

static _Atomic(kv_kernel_observer) kv_observer;

void kv_dispatch_set_kernel_observer(kv_kernel_observer fn) {
    atomic_store(&kv_observer, fn);
    kv_dispatch_epoch_advance(); /* memoized decisions hold whether it is installed */
}

/* A backend kernel: the lazy-bit check and the observer around it. */
static kv_status dispatch_backend(const kv_op *op, kv_key k, kv_keyset ks, kv_stack *stack) {
#if KV_LAZY_CHECK
    kv_status lazy = lazy_check(op, k, stack);
    if (lazy != KV_OK) return lazy;
#endif
    const kv_entry *e = &op->table[k];
    if (e->fn == NULL) return no_kernel(op, ks);
    const kv_kernel_observer obs = atomic_load_explicit(&kv_observer, memory_order_relaxed);
    if (obs == NULL) return e->fn(op, ks, stack);
    obs(op, k, true);
    const kv_status st = e->fn(op, ks, stack);
    obs(op, k, false);
    return st;
}

/* A key above the backends is a plain tail call into its kernel, which
 * is most of what kv_call costs on the way to a layer (the accel boxing
 * layer above all). */
static kv_status dispatch_on(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    if (ks == KV_KEYSET_EMPTY) return no_kernel(op, ks);
    const kv_key k = kv_keyset_highest(ks);
    if (kv_key_is_backend(k)) return dispatch_backend(op, k, ks, stack);
    const kv_kernel_fn fn = op->table[k].fn;
    if (fn == NULL) return no_kernel(op, ks);
    return fn(op, ks, stack);
}

kv_status kv_call_keyset(const kv_op *op, const kv_stack *stack, kv_keyset *out) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_call_keyset: argument 'op': is NULL");
    if (stack == NULL || out == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "%s: kv_call_keyset: stack or out is NULL", op->schema.full_name);
    kv_status st = check_stack(op, stack);
    if (st != KV_OK) return st;
    return compute_keyset(op, stack, out);
}

/* dispatch_on with its layer case inline: a tail call into the kernel. */
__attribute__((always_inline)) static inline kv_status call_with(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_key k = kv_keyset_highest(ks);
    if (ks != KV_KEYSET_EMPTY && !kv_key_is_backend(k) && op->table[k].fn != NULL) return op->table[k].fn(op, ks, stack);
    return dispatch_on(op, ks, stack);
}

/* check_stack and compute_keyset in one pass, for the stacks nearly every
 * call has: each value carries its registered tag, tensors are non-NULL
 * and share one device (0-dim CPU tensors aside), Scalars have a known
 * kind, at least one tensor is present. Anything else (None, lists,
 * strings, enums, a device mismatch, a factory) answers false before any
 * effect (a Generator too: its op is rare enough for the two passes),
 * and kv_call takes the two passes, which judge it and word the
 * error. The same formula as compute_keyset, so both give one key set. */
static bool scan_common(const kv_op *op, const kv_stack *stack, kv_keyset *out) {
    const int n = op->schema.nargs;
    if (stack->size != n || n > stack->cap) return false;
    kv_keyset ks = KV_KEYSET_EMPTY;
    const kv_tensor *first = NULL; /* the first tensor that sets the device */
    for (int i = 0; i < n; i++) {
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag != (kv_ivalue_tag)op->arg_tag[i]) return false;
        switch (v->tag) {
        case KV_IV_TENSOR: {
            const kv_tensor *t = v->v.tensor;
            if (t == NULL) return false;
            ks |= t->keys;
            if (t->ndim == 0 && t->device.type == KV_DEVICE_CPU) {
                /* read as a scalar: sets and checks no device */
            } else if (first == NULL) {
                first = t;
            } else if (!kv_device_equal(first->device, t->device)) {
                return false;
            }
            continue;
        }
        case KV_IV_SCALAR:
            if ((unsigned)v->v.scalar.kind > (unsigned)KV_SCALAR_COMPLEX) return false;
            continue;
        case KV_IV_INT:
        case KV_IV_DOUBLE:
        case KV_IV_BOOL:
            continue;
        case KV_IV_NONE:
        case KV_IV_TENSOR_LIST:
        case KV_IV_INT_LIST:
        case KV_IV_DTYPE:
        case KV_IV_DEVICE:
        case KV_IV_STR:
        case KV_IV_GENERATOR:
            return false;
        }
        return false;
    }
    /* Every tensor argument matched its tag, so none was absent: with no
     * tensor argument at all (a factory) the Device argument decides. */
    if (op->ntensor_args == 0) return false;
    *out = keyset_with_tls(op, ks);
    return true;
}

kv_status kv_call(const kv_op *op, kv_stack *stack) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_call: argument 'op': is NULL");
    if (stack == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: the stack is NULL", op->schema.full_name);
    kv_keyset fast;
    if (scan_common(op, stack, &fast)) return call_with(op, fast, stack);
    kv_status st = check_stack(op, stack);
    if (st != KV_OK) return st;
    kv_keyset ks;
    st = compute_keyset(op, stack, &ks);
    if (st != KV_OK) return st;
    return dispatch_on(op, ks, stack);
}

kv_status kv_call_typed(const kv_op *op, kv_keyset tensor_keys, kv_stack *stack) {
    /* kv_call's fast case without the pass over the arguments, which the
     * typed wrapper has made by construction. */
    return call_with(op, keyset_with_tls(op, tensor_keys), stack);
}

kv_status kv_call_by_name(const char *full_name, kv_stack *stack) {
    const kv_op *op = kv_op_find(full_name);
    if (op == NULL) return kv_last_error();
    return kv_call(op, stack);
}

kv_status kv_redispatch(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_redispatch: argument 'op': is NULL");
    if (stack == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: the stack is NULL", op->schema.full_name);
    return dispatch_on(op, ks & ~op->fallthrough & KV_KEYSET_ALL, stack);
}

kv_status kv_dispatch_run_kernel(const kv_op *op, kv_key backend, kv_kernel_fn fn, kv_stack *stack) {
    const kv_kernel_observer obs = atomic_load_explicit(&kv_observer, memory_order_relaxed);
    if (obs == NULL) return fn(op, kv_keyset_of(backend), stack);
    obs(op, backend, true);
    const kv_status st = fn(op, kv_keyset_of(backend), stack);
    obs(op, backend, false);
    return st;
}

kv_kernel_fn kv_dispatch_selected_kernel(const kv_op *op, kv_keyset tensor_keys, kv_key backend, bool *observed) {
    *observed = atomic_load_explicit(&kv_observer, memory_order_relaxed) != NULL;
    if (!kv_key_is_backend(backend) || op->table[backend].kind != KV_ENTRY_KERNEL) return NULL;
    if (tensor_keys & KV_KEYSET_LAZY & ~op->fallthrough) return NULL;
    if (kv_keyset_highest(keyset_with_tls(op, tensor_keys)) != backend) return NULL;
    return op->table[backend].fn;
}
