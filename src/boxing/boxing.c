/* Boxing and unboxing: the steps every accel boxing kernel is made of
 * (boxing_internal.h), and the schema-driven kernel that strings them
 * together at run time.
 *
 * An alias shares storage, offset, strides, lazy bits and the autograd
 * record with the caller's tensor; only its device and backend key differ.
 * The caller's tensor is never written, so any number of threads may box
 * the same tensors at once and an error path has nothing to restore. */
#include "boxing/boxing_internal.h"

#include <stdlib.h>
#include <string.h>

#include "kv/autograd.h"

/* ---- owned tensors ---- */

_Static_assert(KV_STACK_MAX <= 32, "the box's slot masks are 32 bits");

static kv_status own(kv_accel_box *b, kv_tensor *made, const kv_tensor *orig, int slot) {
    if (b->nowned == b->capowned) {
        int cap = b->capowned * 2;
        kv_accel_owned *grown = malloc((size_t)cap * sizeof *grown);
        if (grown == NULL) {
            kv_tensor_release(made);
            return kv_error(KV_ERR_OOM, "%s: out of host memory boxing the arguments", kv_op_name(b->op));
        }
        memcpy(grown, b->owned, (size_t)b->nowned * sizeof *grown);
        if (b->owned != b->owned_inline) free(b->owned);
        b->owned = grown;
        b->capowned = cap;
    }
    b->owned[b->nowned++] = (kv_accel_owned){ made, orig, slot };
    return KV_OK;
}

kv_status kv_accel_box_own(kv_accel_box *b, kv_tensor *made, const kv_tensor *orig, int slot) {
    return own(b, made, orig, slot);
}

void kv_accel_box_note(kv_accel_box *b, const kv_tensor *boxed) {
    b->boxed_keys |= boxed->keys;
    /* The same rule as kv_call's key set scan: a 0-dim CPU tensor is read
     * as a scalar and neither sets nor checks the device. */
    if (boxed->ndim == 0 && boxed->device.type == KV_DEVICE_CPU) {
        b->boxed_any = true;
        return;
    }
    if (!b->boxed_have_device) {
        b->boxed_device = boxed->device;
        b->boxed_have_device = true;
    } else if (!kv_device_equal(b->boxed_device, boxed->device)) {
        b->boxed_device_mismatch = true;
    }
    b->boxed_any = true;
}

kv_status kv_accel_box_fail(kv_accel_box *b, kv_status st) {
    if (b->st == KV_OK) b->st = st != KV_OK ? st : KV_ERR_INTERNAL;
    return b->st;
}

/* Sets b->st from the thread's error after a call that returned NULL. */
static kv_status fail_from_error(kv_accel_box *b, const char *what) {
    kv_status st = kv_last_error();
    if (st == KV_OK) st = kv_error(KV_ERR_INTERNAL, "%s: %s failed without an error", kv_op_name(b->op), what);
    return kv_accel_box_fail(b, st);
}

/* ---- aliases ---- */

kv_tensor *kv_accel_alias_to_target(const kv_tensor *t, kv_key target) {
    kv_tensor *a = kv_tensor_alias(t);
    if (a == NULL) return NULL;
    a->device = (kv_device){ (kv_device_type)target, kv_accel_target_index(target, t->device.index) };
    a->keys = kv_accel_keys_to_target(t->keys, target);
    /* The alias is the same tensor to autograd: gradients reaching it
     * accumulate in the caller's record. */
    if (t->autograd != NULL) kv_autograd_share(a, t);
    return a;
}

static void retag_in_place(kv_tensor *t) {
    kv_key target = kv_device_key(t->device);
    t->keys = kv_accel_keys_from_target(t->keys, target);
    t->device = (kv_device){ KV_DEVICE_ACCEL, 0 };
}

kv_tensor *kv_accel_retag_owned(kv_tensor *t) {
    if (t == NULL) return NULL;
    /* The only reference is ours: nobody else can observe the change. A
     * tensor someone else also holds (a graph recorder, a saved value) is
     * left alone and a re-tagged alias takes its place. */
    if (atomic_load_explicit(&t->refcount, memory_order_acquire) == 1) {
        retag_in_place(t);
        return t;
    }
    kv_tensor *a = kv_tensor_alias(t);
    if (a == NULL) {
        kv_tensor_release(t);
        return NULL;
    }
    if (t->autograd != NULL) kv_autograd_share(a, t);
    retag_in_place(a);
    kv_tensor_release(t);
    return a;
}

/* ---- the sequence ---- */

static bool any_batched(const kv_schema *s, const kv_stack *stack) {
    for (int i = 0; i < s->nargs && i < stack->size; i++) {
        const kv_ivalue *v = &stack->slots[i];
        if (v->tag == KV_IV_TENSOR) {
            if (kv_keyset_has(v->v.tensor->keys, KV_KEY_BATCHED)) return true;
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n; e++)
                if (kv_keyset_has(v->v.tensors.items[e]->keys, KV_KEY_BATCHED)) return true;
        }
    }
    return false;
}

bool kv_accel_box_begin(kv_accel_box *b, const kv_op *op, kv_keyset ks, kv_stack *stack, kv_key target) {
    const kv_schema *s = kv_op_schema(op);
    b->op = op;
    b->ks = ks;
    b->caller = stack;
    b->st = KV_OK;
    b->ran = false;
    b->slow_ran = false;
    b->history_live = false;
    b->history_inputs = 0;
    b->nreturns = 0;
    b->list_returns = -1;
    b->device_not_accel = false;
    b->list_inline_used = false;
    b->boxed_any = false;
    b->boxed_have_device = false;
    b->boxed_device_mismatch = false;
    b->boxed_keys = KV_KEYSET_EMPTY;
    b->mutable_mask = 0;
    b->list_heap_mask = 0;
    b->compact_slot = -1;
    b->compact_items = NULL;
    b->compact_n = 0;
    b->owned = b->owned_inline;
    b->nowned = 0;
    b->capowned = KV_ACCEL_BOX_INLINE;
    b->nshadows = 0;
    int n = stack->size < KV_STACK_MAX ? stack->size : KV_STACK_MAX;
    for (int i = 0; i < n; i++) b->slots[i] = stack->slots[i];
    b->stack = kv_stack_on(b->slots, KV_STACK_MAX);
    b->stack.size = n;
    if (any_batched(s, stack)) return false;

    kv_key runtime = kv_accel_target_now();
    kv_key t = target == KV_ACCEL_TARGET_DEFAULT ? runtime : target;
    if (runtime == KV_KEY_NONE) {
        b->st = kv_accel_target_error(s->full_name);
    } else if (t != runtime && (t == KV_KEY_CUDA || runtime == KV_KEY_CUDA)) {
        /* accel.conf may send an op to another host-memory backend, but
         * not across memory spaces: the aliases would point at the wrong
         * kind of memory. */
        b->st = kv_error(KV_ERR_DEVICE,
                         "%s: kernels/accel.conf boxes it to %s, but accel tensors live in %s memory (the runtime "
                         "target)",
                         s->full_name, kv_key_name(t), kv_key_name(runtime));
    }
    b->target = t;
    return true;
}

kv_status kv_accel_box_below(kv_accel_box *b, int op_id) {
    kv_accel_count(op_id, KV_ACCEL_PATH_SLOW);
    return kv_redispatch(b->op, b->ks & kv_keyset_below(KV_KEY_ACCEL_BOXING), b->caller);
}

/* Boxes one tensor value; t is the caller's. A single Tensor argument
 * (`shadow`) gets a header in the box itself: the fast path's kernel only
 * reads it, and the slow path, whose layers may keep their arguments,
 * swaps it for a heap alias first (upgrade_shadows). */
static kv_tensor *box_one(kv_accel_box *b, kv_tensor *t, int slot, bool shadow) {
    if (t->device.type != KV_DEVICE_ACCEL) { /* a 0-dim CPU tensor rides along */
        kv_accel_box_note(b, t);
        return t;
    }
    if (shadow && b->nshadows < KV_ACCEL_BOX_SHADOWS) {
        const int i = b->nshadows++;
        kv_tensor *h = &b->shadows[i];
        kv_accel_shadow(h, t, b->target);
        b->shadow_orig[i] = t;
        b->shadow_slot[i] = slot;
        kv_accel_box_note(b, h);
        return h;
    }
    kv_tensor *a = kv_accel_alias_to_target(t, b->target);
    if (a == NULL) {
        fail_from_error(b, "boxing an argument");
        return NULL;
    }
    kv_accel_box_note(b, a);
    if (own(b, a, t, slot) != KV_OK) {
        fail_from_error(b, "boxing an argument");
        return NULL;
    }
    return a;
}

kv_status kv_accel_box_tensor(kv_accel_box *b, int slot) {
    if (b->st != KV_OK) return b->st;
    kv_ivalue *v = &b->slots[slot];
    if (v->tag != KV_IV_TENSOR) return KV_OK;
    kv_tensor *a = box_one(b, v->v.tensor, slot, true);
    if (a == NULL) return b->st;
    v->v.tensor = a;
    return KV_OK;
}

kv_status kv_accel_box_mutable(kv_accel_box *b, int slot) {
    if (b->st != KV_OK) return b->st;
    b->mutable_mask |= 1u << slot;
    return kv_accel_box_tensor(b, slot);
}

kv_status kv_accel_box_optional(kv_accel_box *b, int slot) {
    /* None stays None: only a present tensor is boxed. */
    return kv_accel_box_tensor(b, slot);
}

kv_status kv_accel_box_list(kv_accel_box *b, int slot) {
    if (b->st != KV_OK) return b->st;
    kv_ivalue *v = &b->slots[slot];
    if (v->tag != KV_IV_TENSOR_LIST) return KV_OK;
    kv_tensor_list list = v->v.tensors;
    kv_tensor **items;
    if (!b->list_inline_used && list.n <= KV_ACCEL_BOX_INLINE) {
        items = b->list_inline;
        b->list_inline_used = true;
    } else {
        items = malloc((size_t)(list.n > 0 ? list.n : 1) * sizeof *items);
        if (items == NULL)
            return kv_accel_box_fail(
                b, kv_error(KV_ERR_OOM, "%s: out of host memory boxing a tensor list", kv_op_name(b->op)));
        b->list_heap[slot] = items;
        b->list_heap_mask |= 1u << slot;
    }
    for (int e = 0; e < list.n; e++) {
        kv_tensor *a = box_one(b, list.items[e], slot, false);
        if (a == NULL) return b->st;
        items[e] = a;
    }
    v->v.tensors = (kv_tensor_list){ items, list.n };
    return KV_OK;
}

kv_status kv_accel_box_mutable_list(kv_accel_box *b, int slot) {
    if (b->st != KV_OK) return b->st;
    /* Every element's alias is owned with this slot (box_one), so the
     * mask makes propagate_history hand each element its new record. */
    b->mutable_mask |= 1u << slot;
    return kv_accel_box_list(b, slot);
}

kv_status kv_accel_box_device(kv_accel_box *b, int slot) {
    if (b->st != KV_OK) return b->st;
    kv_ivalue *v = &b->slots[slot];
    if (v->tag != KV_IV_DEVICE) return KV_OK; /* None: the input's device, i.e. accel */
    if (v->v.device.type == KV_DEVICE_ACCEL) {
        v->v.device = (kv_device){ (kv_device_type)b->target, kv_accel_target_index(b->target, v->v.device.index) };
    } else {
        b->device_not_accel = true;
    }
    return KV_OK;
}

/* ---- running ---- */

kv_status kv_accel_box_fast(kv_accel_box *b) {
    if (b->st != KV_OK) return b->st;
    if (b->compact_slot >= 0) {
        kv_accel_count_cat_dropped((uint64_t)(b->slots[b->compact_slot].v.tensors.n - b->compact_n));
        b->slots[b->compact_slot].v.tensors = (kv_tensor_list){ b->compact_items, b->compact_n };
    }
    kv_status st = kv_redispatch(b->op, kv_keyset_of(b->target), &b->stack);
    if (st != KV_OK) return kv_accel_box_fail(b, st);
    b->ran = true;
    return KV_OK;
}

/* An in-place or out= op may have given its boxed argument a new autograd
 * record (an in-place op with an input that requires grad): the caller's
 * tensor is the same tensor, so it takes the record over. */
static void propagate_history(kv_accel_box *b) {
    for (int i = 0; i < b->nowned; i++) {
        const kv_accel_owned *o = &b->owned[i];
        if (o->orig == NULL || o->slot < 0 || !(b->mutable_mask & (1u << o->slot))) continue;
        bool bit_differs = kv_keyset_has(o->made->keys, KV_KEY_AUTOGRAD) != kv_keyset_has(o->orig->keys, KV_KEY_AUTOGRAD);
        if (o->made->autograd != o->orig->autograd || bit_differs) kv_autograd_share((kv_tensor *)o->orig, o->made);
    }
}

/* The slow path runs every layer, and a layer may keep an argument
 * (autograd saves inputs, Trace and Functionalize record them): each
 * shadow header becomes a heap alias sharing the caller's autograd record,
 * what boxing made before shadows existed. */
static kv_status upgrade_shadows(kv_accel_box *b) {
    for (int i = 0; i < b->nshadows; i++) {
        kv_tensor *a = kv_accel_alias_to_target(b->shadow_orig[i], b->target);
        if (a == NULL || own(b, a, b->shadow_orig[i], b->shadow_slot[i]) != KV_OK)
            return fail_from_error(b, "boxing an argument");
        const int slot = b->shadow_slot[i];
        if (b->slots[slot].tag == KV_IV_TENSOR && b->slots[slot].v.tensor == &b->shadows[i])
            b->slots[slot].v.tensor = a;
    }
    b->nshadows = 0; /* nobody refers to them any more */
    return KV_OK;
}

kv_status kv_accel_box_slow(kv_accel_box *b) {
    if (b->st != KV_OK) return b->st;
    if (b->nshadows > 0 && upgrade_shadows(b) != KV_OK) return b->st;
    kv_accel_history_note_inputs(b);
    kv_status st = kv_call(b->op, &b->stack);
    if (st != KV_OK) return kv_accel_box_fail(b, st);
    b->ran = true;
    b->slow_ran = true;
    propagate_history(b);
    return KV_OK;
}

/* ---- unboxing ---- */

static kv_status check_return(kv_accel_box *b, int ret, kv_ivalue_tag want) {
    if (b->st != KV_OK) return b->st;
    if (!b->ran || ret >= b->stack.size || ret >= KV_STACK_MAX || (want != KV_IV_NONE && b->stack.slots[ret].tag != want))
        return kv_accel_box_fail(b, kv_accel_returns_error(b->op, b->stack.size, ret));
    if (ret + 1 > b->nreturns) {
        for (int i = b->nreturns; i < ret; i++) b->returns[i] = (kv_ivalue){ .tag = KV_IV_NONE };
        b->nreturns = ret + 1;
    }
    return KV_OK;
}

/* Drops a reference the kernel returned: a shadow header lives in this
 * box and no other thread has seen it, so its count needs no locked
 * instruction (and must never reach zero: the box holds the first). */
static void drop_returned(kv_accel_box *b, kv_tensor *r) {
    const uintptr_t at = (uintptr_t)r, first = (uintptr_t)b->shadows;
    if (at >= first && at < first + (uintptr_t)b->nshadows * sizeof *b->shadows) {
        kv_accel_shadow_unref(r);
        return;
    }
    kv_tensor_release(r);
}

kv_status kv_accel_returns_error(const kv_op *op, int size, int ret) {
    return kv_error(KV_ERR_INTERNAL, "%s: the target kernel left %d values, not the schema's return %d", kv_op_name(op),
                    size, ret);
}

kv_status kv_accel_kept_error(const kv_op *op, kv_key target) {
    /* A kernel kept a reference to a header that dies with the boxing
     * frame: a kernel bug that must not pass silently. */
    return kv_error(KV_ERR_INTERNAL, "%s: the %s kernel kept a reference to a boxed argument", kv_op_name(op),
                    kv_key_name(target));
}

/* Takes return `ret` off the boxed stack (the box now owns it). */
static kv_tensor *take(kv_accel_box *b, int ret) {
    kv_tensor *r = b->stack.slots[ret].v.tensor;
    b->stack.slots[ret].tag = KV_IV_NONE;
    return r;
}

kv_status kv_accel_unbox_tensor(kv_accel_box *b, int ret) {
    if (check_return(b, ret, KV_IV_NONE) != KV_OK) return b->st;
    if (b->stack.slots[ret].tag != KV_IV_TENSOR) return kv_accel_unbox_value(b, ret);
    kv_tensor *r = take(b, ret);
    /* One of our aliases came back (contiguous of a contiguous tensor):
     * it is the caller's tensor. */
    for (int i = 0; i < b->nshadows; i++) {
        if (r == &b->shadows[i]) {
            kv_tensor *orig = (kv_tensor *)b->shadow_orig[i];
            kv_tensor_retain(orig);
            drop_returned(b, r);
            b->returns[ret] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = orig };
            return KV_OK;
        }
    }
    for (int i = 0; i < b->nowned; i++) {
        if (b->owned[i].made == r && b->owned[i].orig != NULL) {
            kv_tensor *orig = (kv_tensor *)b->owned[i].orig;
            kv_tensor_retain(orig);
            drop_returned(b, r);
            b->returns[ret] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = orig };
            return KV_OK;
        }
    }
    if (!b->device_not_accel && r->device.type == (kv_device_type)b->target) {
        r = kv_accel_retag_owned(r);
        if (r == NULL) return fail_from_error(b, "re-tagging a return");
    }
    b->returns[ret] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = r };
    return KV_OK;
}

kv_status kv_accel_unbox_alias(kv_accel_box *b, int ret, int slot) {
    if (check_return(b, ret, KV_IV_TENSOR) != KV_OK) return b->st;
    kv_tensor *r = take(b, ret);
    kv_tensor *orig = b->caller->slots[slot].tag == KV_IV_TENSOR ? b->caller->slots[slot].v.tensor : NULL;
    if (orig == NULL) {
        drop_returned(b, r);
        return kv_accel_box_fail(b, kv_error(KV_ERR_INTERNAL, "%s: return %d aliases argument %d, which is not a tensor",
                                             kv_op_name(b->op), ret, slot));
    }
    kv_tensor_retain(orig);
    drop_returned(b, r);
    b->returns[ret] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = orig };
    return KV_OK;
}

/* The target-tagged stand-in boxing made for argument `slot` (a shadow
 * header or an owned alias), or NULL when the argument rode along as is. */
static const kv_tensor *boxed_of(const kv_accel_box *b, int slot) {
    for (int i = 0; i < b->nshadows; i++)
        if (b->shadow_slot[i] == slot) return &b->shadows[i];
    for (int i = 0; i < b->nowned; i++)
        if (b->owned[i].slot == slot && b->owned[i].orig != NULL) return b->owned[i].made;
    return NULL;
}

kv_status kv_accel_unbox_out(kv_accel_box *b, int ret, int slot) {
    if (check_return(b, ret, KV_IV_TENSOR) != KV_OK) return b->st;
    kv_tensor *orig = b->caller->slots[slot].tag == KV_IV_TENSOR ? b->caller->slots[slot].v.tensor : NULL;
    const kv_tensor *boxed = boxed_of(b, slot);
    if (orig != NULL && boxed != NULL && boxed != orig) {
        /* The target resized its stand-in (the storage, shared, grew in
         * place): the caller's tensor is that tensor, so it takes the new
         * shape. Copied whole, as kv_tensor_resize writes it. */
        orig->ndim = boxed->ndim;
        memcpy(orig->sizes, boxed->sizes, sizeof orig->sizes);
        memcpy(orig->strides, boxed->strides, sizeof orig->strides);
        orig->offset = boxed->offset;
    }
    return kv_accel_unbox_alias(b, ret, slot);
}

/* The length of the schema's first Tensor[] argument on the caller's
 * stack: how many elements a Tensor[] return has. */
static int first_list_length(const kv_accel_box *b) {
    const kv_schema *s = kv_op_schema(b->op);
    for (int i = 0; i < s->nargs && i < b->caller->size; i++)
        if (s->args[i].type.kind == KV_TYPE_TENSOR && s->args[i].type.is_list)
            return b->caller->slots[i].tag == KV_IV_TENSOR_LIST ? b->caller->slots[i].v.tensors.n : -1;
    return -1;
}

kv_status kv_accel_unbox_list(kv_accel_box *b, int first) {
    if (b->st != KV_OK) return b->st;
    const int n = first_list_length(b);
    if (!b->ran || n < 0 || b->stack.size != first + n)
        return kv_accel_box_fail(b, kv_accel_returns_error(b->op, b->stack.size, first + (n > 0 ? n : 0)));
    for (int k = first; k < first + n; k++)
        if (kv_accel_unbox_tensor(b, k) != KV_OK) return b->st;
    /* An empty list makes no return slot: the count still says one was
     * unboxed (box_end compares counts). */
    b->list_returns = first + n;
    if (b->nreturns < first + n) b->nreturns = first + n;
    return KV_OK;
}

kv_status kv_accel_unbox_value(kv_accel_box *b, int ret) {
    if (check_return(b, ret, KV_IV_NONE) != KV_OK) return b->st;
    b->returns[ret] = b->stack.slots[ret];
    if (b->returns[ret].tag == KV_IV_TENSOR) take(b, ret);
    return KV_OK;
}

kv_status kv_accel_box_end(kv_accel_box *b, kv_status st) {
    if (st == KV_OK) st = b->st;
    const kv_schema *s = kv_op_schema(b->op);
    const int want = b->list_returns >= 0 ? b->list_returns : s->nreturns;
    if (st == KV_OK && (b->nreturns != want || b->caller->cap < want))
        st = kv_error(KV_ERR_INTERNAL, "%s: boxing unboxed %d of the schema's %d returns (caller stack capacity %d)",
                      s->full_name, b->nreturns, want, b->caller->cap);
    if (b->ran) kv_stack_clear_returns(&b->stack); /* whatever was not taken */
    for (int i = 0; i < b->nshadows; i++) {
        if (atomic_load_explicit(&b->shadows[i].refcount, memory_order_relaxed) != 1 && st == KV_OK)
            st = kv_accel_kept_error(b->op, b->target);
    }
    if (st == KV_OK) {
        if (b->slow_ran) kv_accel_history_retag(b);
        for (int i = 0; i < b->nreturns; i++) b->caller->slots[i] = b->returns[i];
        b->caller->size = b->nreturns;
    } else {
        for (int i = 0; i < b->nreturns; i++)
            if (b->returns[i].tag == KV_IV_TENSOR) kv_tensor_release(b->returns[i].v.tensor);
    }
    for (int i = 0; i < b->nowned; i++) kv_tensor_release(b->owned[i].made);
    if (b->owned != b->owned_inline) free(b->owned);
    for (uint32_t m = b->list_heap_mask; m != 0; m &= m - 1) free(b->list_heap[__builtin_ctz(m)]);
    if (b->compact_items != NULL && b->compact_items != b->compact_inline) free(b->compact_items);
    return st;
}

/* ---- the run-time kernel ---- */

/* The mutable argument a Tensor return aliases, or -1. */
static int aliased_arg(const kv_schema *s, const kv_arg *ret) {
    if (ret->alias.set == 0) return -1;
    for (int i = 0; i < s->nargs; i++)
        if (s->args[i].alias.set == ret->alias.set && s->args[i].alias.is_write) return i;
    return -1;
}

static kv_status box_arguments(kv_accel_box *b, const kv_schema *s) {
    kv_status st = KV_OK;
    for (int i = 0; i < s->nargs && st == KV_OK; i++) {
        const kv_arg *a = &s->args[i];
        if (a->type.kind == KV_TYPE_TENSOR && a->type.is_list && a->alias.is_write) st = kv_accel_box_mutable_list(b, i);
        else if (a->type.kind == KV_TYPE_TENSOR && a->type.is_list) st = kv_accel_box_list(b, i);
        else if (a->type.kind == KV_TYPE_TENSOR && a->alias.is_write) st = kv_accel_box_mutable(b, i);
        else if (a->type.kind == KV_TYPE_TENSOR && a->type.optional) st = kv_accel_box_optional(b, i);
        else if (a->type.kind == KV_TYPE_TENSOR) st = kv_accel_box_tensor(b, i);
        else if (a->type.kind == KV_TYPE_DEVICE && !a->type.is_list) st = kv_accel_box_device(b, i);
    }
    return st;
}

static kv_status unbox_returns(kv_accel_box *b, const kv_schema *s, kv_status st) {
    for (int k = 0; k < s->nreturns && st == KV_OK; k++) {
        const kv_arg *r = &s->returns[k];
        int src = r->type.kind == KV_TYPE_TENSOR && !r->type.is_list ? aliased_arg(s, r) : -1;
        if (r->type.kind == KV_TYPE_TENSOR && r->type.is_list) st = kv_accel_unbox_list(b, k);
        else if (src >= 0 && kv_schema_is_out(s)) st = kv_accel_unbox_out(b, k, src);
        else if (src >= 0) st = kv_accel_unbox_alias(b, k, src);
        else if (r->type.kind == KV_TYPE_TENSOR && !r->type.is_list) st = kv_accel_unbox_tensor(b, k);
        else st = kv_accel_unbox_value(b, k);
    }
    return st;
}

kv_status kv_accel_box_generic(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_schema *s = kv_op_schema(op);
    const int id = kv_op_builtin_id(op);
    kv_accel_box b;
    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return kv_accel_box_below(&b, id);
    kv_status st = box_arguments(&b, s);
    if (st == KV_OK) {
        if (kv_accel_gate_allows(&b)) {
            kv_accel_count(id, KV_ACCEL_PATH_FAST);
            st = kv_accel_box_fast(&b);
        } else {
            kv_accel_count(id, KV_ACCEL_PATH_SLOW);
            st = kv_accel_box_slow(&b);
        }
    }
    return kv_accel_box_end(&b, unbox_returns(&b, s, st));
}

kv_status kv_accel_box_dense(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_schema *s = kv_op_schema(op);
    kv_accel_box b;
    /* Batched arguments cannot get here: Batched sits above the backends. */
    kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT);
    kv_status st = box_arguments(&b, s);
    if (st == KV_OK) {
        kv_accel_count(kv_op_builtin_id(op), KV_ACCEL_PATH_SLOW);
        /* What is left of ks is backend keys: accel's becomes the target's. */
        kv_keyset rest = (ks & KV_KEYSET_BACKENDS & ~kv_keyset_of(KV_KEY_ACCEL)) | kv_keyset_of(b.target);
        st = kv_redispatch(op, rest, &b.stack);
        if (st == KV_OK) b.ran = true;
        else kv_accel_box_fail(&b, st);
    }
    return kv_accel_box_end(&b, unbox_returns(&b, s, st));
}
