/* The lean fast path (DESIGN.md section 5), inline: included by the
 * generated boxing kernels only, each of which passes its own constant
 * plan, so the compiler unrolls the loops over the plan's slots and
 * drops the branches the op cannot take.
 *
 * For the ops kvgen finds simple enough (plain Tensor arguments, tensor
 * or value returns) the whole fast path is one pass: read each accel
 * argument's keys, ask the gate, shadow the arguments in this frame, call
 * the target's kernel, re-tag what comes back. kv_accel_box_begin's
 * bookkeeping (a 2.6 KB box, owned lists, history) serves the slow path
 * and the special arguments; a call that needs any of it is declined
 * before anything happened and takes the full sequence, which decides
 * the same way. What the kernel sees and what the caller gets back are
 * exactly what kv_accel_box_fast and the unboxing steps give: the fast
 * path ON vs OFF rows of the suite compare them bit for bit. */
#ifndef KV_BOXING_LEAN_H
#define KV_BOXING_LEAN_H

#include "boxing/boxing_internal.h"
#include "dispatch/tls_internal.h" /* the thread's TLS keys, read inline as kv_call reads them */
#include "kv/op_ids.h"

/* One thread's memo of the lean path's decision for one op of ops.schema:
 * the target's kernel (NULL: declined) for accel arguments whose keys OR
 * to `keys`, under the thread's TLS keys `included` / `excluded`, with
 * `target` as the accel target, and everything the dispatch epoch covers
 * (kv/dispatch.h): the op's table, the kernel observer, and the boxing
 * switches (gate.c advances the epoch when the gate, the kill switch or
 * the forced path changes). A call that matches all of them takes the
 * memo's answer; any other decides afresh. Per thread, so no call waits
 * for it or races on it; epoch 0 (a fresh thread's) is "none". */
typedef struct kv_accel_lean_memo {
    uint_fast64_t epoch;
    kv_keyset keys;
    kv_keyset included, excluded;
    kv_kernel_fn fn;
    kv_key target;
    bool observed; /* a kernel observer was installed: call through kv_dispatch_run_kernel */
} kv_accel_lean_memo;
extern _Thread_local kv_accel_lean_memo kv_accel_lean_memos[KV_OP_COUNT];
/* Decides afresh, as the gate rules say, and writes *m (lean.c); `epoch`
 * was read before anything the decision reads. */
void kv_accel_lean_decide(kv_accel_lean_memo *m, const kv_op *op, kv_keyset keys, kv_key target, kv_tls_keys tls,
                          uint_fast64_t epoch);

/* The cold parts (lean.c). Releases every tensor among v[0..n). */
void kv_accel_lean_release(kv_ivalue *v, int n);
/* The error of a re-tag that failed (the thread's error, if it has one). */
kv_status kv_accel_lean_retag_error(const kv_op *op);

/* Re-tags return `r` the way kv_accel_unbox_tensor does (no Device
 * argument, no heap alias here): one of the shadows is the caller's own
 * tensor; a new tensor of the target becomes accel. NULL + error when the
 * re-tag fails. */
__attribute__((always_inline)) static inline kv_tensor *kv_accel_lean_unbox_new(kv_tensor *r, kv_tensor *shadows, kv_tensor *const *orig, int n,
                                                  kv_key target) {
    for (int j = 0; j < n; j++) {
        if (r == &shadows[j]) {
            kv_tensor_retain(orig[j]);
            kv_accel_shadow_unref(r);
            return orig[j];
        }
    }
    if (r->device.type != (kv_device_type)target) return r;
    /* kv_accel_retag_owned's common case, inline: ours is the only
     * reference, so the tensor itself becomes accel. */
    if (atomic_load_explicit(&r->refcount, memory_order_acquire) == 1) {
        r->keys = kv_accel_keys_from_target(r->keys, target);
        r->device = (kv_device){ KV_DEVICE_ACCEL, 0 };
        return r;
    }
    return kv_accel_retag_owned(r);
}

/* The caller's tensor that a returned alias of argument `slot` stands for;
 * the returned reference is dropped. */
__attribute__((always_inline)) static inline kv_tensor *kv_accel_lean_unbox_alias(kv_tensor *r, kv_tensor *const *orig, const kv_accel_lean_plan *p,
                                                    int slot, kv_tensor *shadows) {
    kv_tensor *o = NULL;
    for (int j = 0; j < p->ntensors; j++)
        if (p->tensor_slot[j] == slot) o = orig[j];
    atomic_fetch_add_explicit(&o->refcount, 1, memory_order_relaxed); /* kv_tensor_retain, inline */
    const uintptr_t at = (uintptr_t)r, first = (uintptr_t)shadows;
    if (at >= first && at < first + (uintptr_t)p->ntensors * sizeof *shadows) kv_accel_shadow_unref(r);
    else kv_tensor_release(r);
    return o;
}

/* kv_accel_shadow's header, except that the dims past ndim are not
 * written: the shadow lives for one kernel call of an op whose arguments
 * are plain tensors (no out=, whose unboxing copies dims back whole), and
 * kernels read dims below ndim only. Dim 0 is copied whatever ndim (the
 * arrays are KV_MAX_DIMS long, and a 0-dim kernel reads neither), so the
 * common 1-dim tensor costs no branch on ndim beyond the one test. */
__attribute__((always_inline)) static inline void kv_accel_lean_shadow(kv_tensor *s, const kv_tensor *t, kv_key target) {
    atomic_init(&s->refcount, 1);
    s->storage = t->storage;
    const int ndim = t->ndim;
    s->ndim = ndim;
    s->sizes[0] = t->sizes[0];
    s->strides[0] = t->strides[0];
    if (__builtin_expect(ndim > 1, 0)) {
        /* Unrolled from the top dim down: a loop here becomes two calls
         * into libc's memcpy, dearer than the copy. */
#define KV_LEAN_DIM(d)                     \
    case d + 1:                            \
        s->sizes[d] = t->sizes[d];         \
        s->strides[d] = t->strides[d];     \
        __attribute__((fallthrough));
        switch (ndim) {
            KV_LEAN_DIM(7)
            KV_LEAN_DIM(6)
            KV_LEAN_DIM(5)
            KV_LEAN_DIM(4)
            KV_LEAN_DIM(3)
            KV_LEAN_DIM(2)
            KV_LEAN_DIM(1)
        default: break;
        }
#undef KV_LEAN_DIM
    }
    s->offset = t->offset;
    s->dtype = t->dtype;
    s->device = (kv_device){ (kv_device_type)target, kv_accel_target_index(target, t->device.index) };
    s->keys = kv_accel_keys_to_target(t->keys, target);
    s->autograd = NULL;
    s->batched = NULL;
    s->origin = t->origin;
}

/* Always inlined: the per-op copies are the point (see the top). */
__attribute__((always_inline)) static inline bool kv_accel_lean(const kv_accel_lean_plan *p, const kv_op *op, kv_stack *stack, kv_status *st) {
    const kv_key runtime = kv_accel_target_now();
    if (runtime == KV_KEY_NONE || (p->target != KV_ACCEL_TARGET_DEFAULT && p->target != runtime)) return false;
    if (stack->size != p->nargs || stack->cap < p->nreturns) return false;

    /* Every tensor argument an accel tensor on one device; their keys. */
    kv_tensor *orig[KV_ACCEL_BOX_SHADOWS];
    kv_keyset keys = KV_KEYSET_EMPTY;
    for (int j = 0; j < p->ntensors; j++) {
        const kv_ivalue *v = &stack->slots[p->tensor_slot[j]];
        if (v->tag != KV_IV_TENSOR || v->v.tensor->device.type != KV_DEVICE_ACCEL) return false;
        if (j > 0 && v->v.tensor->device.index != orig[0]->device.index) return false;
        orig[j] = v->v.tensor;
        keys |= v->v.tensor->keys;
    }
    if (p->ntensors == 0) return false;
    /* The gate, through this thread's memo for the op (see the top). */
    kv_accel_lean_memo *m = &kv_accel_lean_memos[p->op_id];
    const kv_tls_keys tls = kv_tls_now();
    const uint_fast64_t epoch = atomic_load_explicit(&kv_dispatch_epoch, memory_order_acquire);
    if (__builtin_expect(m->epoch != epoch || m->keys != keys || m->target != runtime || m->included != tls.included ||
                             m->excluded != tls.excluded,
                         0))
        kv_accel_lean_decide(m, op, keys, runtime, tls, epoch);
    /* Read before the kernel runs: a nested call of this op may rewrite m. */
    const kv_kernel_fn fn = m->fn;
    const bool observed = m->observed;
    if (fn == NULL) return false;

    kv_accel_count_builtin(p->op_id, KV_ACCEL_PATH_FAST);
    /* The kernel runs on the caller's stack, its tensor slots pointing at
     * shadows in this frame: no copy of the arguments, and the returns
     * land where they are unboxed. */
    kv_tensor shadows[KV_ACCEL_BOX_SHADOWS];
    kv_ivalue *slots = stack->slots;
#pragma GCC unroll 4 /* KV_ACCEL_BOX_SHADOWS: the plan's count is a constant, the loop's overhead is not */
    for (int j = 0; j < p->ntensors; j++) {
        kv_accel_lean_shadow(&shadows[j], orig[j], runtime);
        slots[p->tensor_slot[j]].v.tensor = &shadows[j];
    }
    kv_status rc = observed ? kv_dispatch_run_kernel(op, runtime, fn, stack) : fn(op, kv_keyset_of(runtime), stack);
    if (rc != KV_OK) {
        /* A failed kernel leaves nothing owned; the caller's stack gets
         * its own tensors back, as the boxed path never touched them. */
        for (int j = 0; j < p->ntensors; j++) slots[p->tensor_slot[j]].v.tensor = orig[j];
        *st = rc;
        return true;
    }

    /* The returns are unboxed in place; values past the schema's (a
     * kernel bug the unboxing steps also tolerate) are released. */
    const int size = stack->size;
    for (int k = 0; k < p->nreturns; k++) {
        kv_ivalue *v = &slots[k];
        const int src = p->ret_alias[k];
        if (k >= size || (src >= 0 && v->tag != KV_IV_TENSOR)) {
            rc = kv_accel_returns_error(op, size, k);
            break;
        }
        if (v->tag != KV_IV_TENSOR) continue;
        kv_tensor *r = src >= 0 ? kv_accel_lean_unbox_alias(v->v.tensor, orig, p, src, shadows)
                                : kv_accel_lean_unbox_new(v->v.tensor, shadows, orig, p->ntensors, runtime);
        if (r == NULL) {
            rc = kv_accel_lean_retag_error(op);
            v->tag = KV_IV_NONE; /* released by the failed re-tag */
            break;
        }
        v->v.tensor = r;
    }
    const int held = size < p->nreturns ? size : p->nreturns;
    if (size > held) kv_accel_lean_release(slots + held, size - held);
    bool kept = false;
    for (int j = 0; j < p->ntensors; j++) kept |= atomic_load_explicit(&shadows[j].refcount, memory_order_relaxed) != 1;
    if (kept && rc == KV_OK) rc = kv_accel_kept_error(op, runtime);
    stack->size = p->nreturns;
    if (rc != KV_OK) {
        kv_accel_lean_release(slots, held); /* unboxed or not, each TENSOR slot holds a reference of ours */
        stack->size = 0;
    }
    *st = rc;
    return true;
}

#endif
