/* The boxing runtime shared by the src/boxing sources and the kernels kvgen
 * writes into build/gen/accel_boxing.c (DESIGN.md section 5).
 *
 * A boxing kernel follows one shape, which the generated ones spell out:
 *
 *   kv_accel_box b;
 *   if (!kv_accel_box_begin(&b, op, ks, stack, target)) return kv_accel_box_below(&b, id);
 *   st = kv_accel_box_tensor(&b, 0);          one call per tensor argument
 *   if (kv_accel_gate_allows(&b)) { count fast; st = kv_accel_box_fast(&b); }
 *   else                          { count slow; st = kv_accel_box_slow(&b); }
 *   st = kv_accel_unbox_tensor(&b, 0);        one call per return
 *   return kv_accel_box_end(&b, st);
 *
 * Every step after a failure is a no-op that keeps the first status, so
 * the sequence needs no branches; kv_accel_box_end releases what boxing
 * made and, on success, moves the unboxed returns onto the caller's stack.
 * Nothing here modifies a caller's tensor, except that an in-place or out=
 * argument whose autograd history the op changed gets the new record (what
 * an in-place op means). */
#ifndef KV_BOXING_INTERNAL_H
#define KV_BOXING_INTERNAL_H

#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kv/accel.h"
#include "kv/dispatch.h"
#include "kv/keys.h"
#include "kv/schema.h"
#include "kv/stack.h"
#include "kv/status.h"
#include "kv/tensor.h"

/* accel.conf's `default`: the runtime target. */
#define KV_ACCEL_TARGET_DEFAULT KV_KEY_NONE

#define KV_ACCEL_KEYS (kv_keyset_of(KV_KEY_ACCEL) | kv_keyset_of(KV_KEY_ACCEL_BOXING))

/* Aliases (and temporaries) kept in the box without a heap allocation. */
#define KV_ACCEL_BOX_INLINE 16
/* Boxed aliases of single Tensor arguments that live in the box itself
 * (shadow headers, see kv_accel_shadow): enough for every op but a few;
 * further arguments get heap aliases. */
#define KV_ACCEL_BOX_SHADOWS 4

typedef struct kv_accel_owned {
    kv_tensor *made;       /* owned: a boxed alias or a temporary */
    const kv_tensor *orig; /* the caller's tensor it stands for; NULL for temporaries */
    int slot;              /* stack slot it was boxed into (-1 for temporaries) */
} kv_accel_owned;

/* Nothing here is zero-filled per call: kv_accel_box_begin sets the
 * scalars, and the arrays are read only up to their counts or masks. A
 * box is on every boxed call's path, so its set-up cost is the fast
 * path's overhead. */
typedef struct kv_accel_box {
    const kv_op *op;
    kv_keyset ks;          /* the key set the boxing kernel was selected with */
    kv_stack *caller;      /* arguments (borrowed), later the returns */
    kv_status st;          /* first failure of the sequence */
    kv_key target;         /* backend key the op is boxed to */
    bool ran;              /* the boxed stack now holds returns */
    /* A Device argument that named something other than accel: the
     * returns live there and are not re-tagged. */
    bool device_not_accel;
    bool slow_ran;
    bool history_live;
    bool list_inline_used;
    /* The key set kv_call would compute for the boxed stack, gathered
     * while boxing (boxed_any false: no tensor seen, so the gate computes
     * it the long way), and whether the boxed tensors disagree on their
     * device (the slow path then reports it). */
    bool boxed_any;
    bool boxed_have_device;
    bool boxed_device_mismatch;
    kv_device boxed_device;
    kv_keyset boxed_keys;
    uint32_t mutable_mask;   /* bit i: slot i is an in-place or out= argument */
    uint32_t list_heap_mask; /* bit i: list_heap[i] holds a heap array */
    int nreturns;
    /* The returns a Tensor[] return made (kv_accel_unbox_list), -1 when
     * the schema's count applies. */
    int list_returns;
    int compact_slot;
    int compact_n;
    int history_inputs;
    int nowned;
    int capowned;
    int nshadows;
    kv_stack stack;        /* the boxed arguments, then the target's returns */
    kv_tensor **compact_items;
    kv_accel_owned *owned;
    kv_ivalue slots[KV_STACK_MAX];
    /* Returns are unboxed into here and moved to the caller at the end. */
    kv_ivalue returns[KV_STACK_MAX];
    /* Tensor lists: one array per list argument (inline for the first). */
    kv_tensor *list_inline[KV_ACCEL_BOX_INLINE];
    kv_tensor **list_heap[KV_STACK_MAX];
    /* cat's fast-path list (legacy empties dropped), when it differs. */
    kv_tensor *compact_inline[KV_ACCEL_BOX_INLINE];
    /* Autograd on the slow path (autograd_retag.c): the grad_fn nodes of
     * the inputs before the call. */
    const struct kv_ag_node *history_stop[KV_ACCEL_BOX_INLINE];
    /* Everything made, to release and to map returns back to callers. */
    kv_accel_owned owned_inline[KV_ACCEL_BOX_INLINE];
    /* Shadow headers (never freed) and whom they stand for; not in
     * `owned`, which holds what end must release. */
    kv_tensor shadows[KV_ACCEL_BOX_SHADOWS];
    const kv_tensor *shadow_orig[KV_ACCEL_BOX_SHADOWS];
    int shadow_slot[KV_ACCEL_BOX_SHADOWS];
} kv_accel_box;

/* ---- the lean fast path (lean.c) ---- */
/* What kvgen knows, for an op whose arguments are plain Tensors (at most
 * KV_ACCEL_BOX_SHADOWS of them, no list, no optional, no Device) and
 * whose returns are tensors or values, to run its fast path without a
 * box: the tensor slots to shadow and, per return, the mutable argument
 * it aliases (-1: a new tensor or a value). */
typedef struct kv_accel_lean_plan {
    int op_id;
    kv_key target; /* a backend key or KV_ACCEL_TARGET_DEFAULT */
    signed char nargs;
    signed char ntensors;
    signed char tensor_slot[KV_ACCEL_BOX_SHADOWS];
    signed char nreturns;
    signed char ret_alias[KV_SCHEMA_MAX_RETURNS];
} kv_accel_lean_plan;

/* kv_accel_lean(plan, op, stack, &st), the path itself, is in
 * boxing/lean.h. */

/* ---- the sequence (boxing.c) ---- */
/* Starts boxing `op` for the arguments on `stack`. Returns false (and
 * boxes nothing) when an argument is a batched (vmap) tensor: aliases
 * cannot carry its record, so the call goes below the boxing layer to
 * Batched, whose kernels re-enter the dispatcher with the physical accel
 * tensors (kv_accel_box_below). `target` is a backend key or
 * KV_ACCEL_TARGET_DEFAULT. */
bool kv_accel_box_begin(kv_accel_box *b, const kv_op *op, kv_keyset ks, kv_stack *stack, kv_key target);
/* Redispatches the unboxed call below AccelBoxing (counted slow). */
kv_status kv_accel_box_below(kv_accel_box *b, int op_id);
/* Boxes the Tensor at `slot` (a 0-dim CPU tensor, which PyTorch allows
 * next to any device, is passed through). */
kv_status kv_accel_box_tensor(kv_accel_box *b, int slot);
/* The same for a mutable (in-place self, out=) argument. */
kv_status kv_accel_box_mutable(kv_accel_box *b, int slot);
/* A Tensor? argument: boxed when present, None stays None. */
kv_status kv_accel_box_optional(kv_accel_box *b, int slot);
/* A Tensor[] argument: every element boxed. */
kv_status kv_accel_box_list(kv_accel_box *b, int slot);
/* A Tensor(a!)[] argument (the in-place foreach ops): every element boxed
 * as a mutable argument, so an autograd record the op gives an element
 * reaches the caller's tensor. */
kv_status kv_accel_box_mutable_list(kv_accel_box *b, int slot);
/* A Device / Device? argument: accel becomes the target device; any
 * other device stays and its returns are not re-tagged. */
kv_status kv_accel_box_device(kv_accel_box *b, int slot);
/* Releases `b`'s temporaries; used by the special boxing steps. */
kv_status kv_accel_box_fail(kv_accel_box *b, kv_status st);
/* Adds an owned tensor to release at the end (temporaries: orig NULL). */
kv_status kv_accel_box_own(kv_accel_box *b, kv_tensor *made, const kv_tensor *orig, int slot);
/* Adds a boxed tensor to the key set and device check the gate reads
 * (every tensor on the boxed stack goes through it; kv_accel_box_tensor
 * and friends call it). */
void kv_accel_box_note(kv_accel_box *b, const kv_tensor *boxed);
/* A new target-tagged alias of the accel tensor t (autograd shared). */
kv_tensor *kv_accel_alias_to_target(const kv_tensor *t, kv_key target);


/* The gate (gate.c): kill switch, a direct kernel at the target key, then
 * the seed or exact rule on the boxed stack. */
bool kv_accel_gate_allows(kv_accel_box *b);
/* The same decision from the OR of the boxed tensors' key sets, for a
 * call with at least one tensor argument, all on one device. */
bool kv_accel_gate_allows_keys(const kv_op *op, kv_key target, kv_keyset boxed_keys);
/* kv_accel_gate_allows_keys, and no lazy bit the dispatcher would check
 * before the target's kernel (kv_accel_lean skips that check). */
bool kv_accel_gate_allows_lean(const kv_op *op, kv_key target, kv_keyset boxed_keys);
/* The switches (gate.c), read inline by the lean fast path: the rule
 * (kv_accel_gate), the kill switch, and the tests' forced fast path. */
extern atomic_int kv_accel_gate_now;
extern atomic_bool kv_accel_redispatch_now;
extern atomic_bool kv_accel_force_now;
/* The default switches: fast paths on, the exact rule, nothing forced;
 * then the gate is the dispatcher's own question
 * (kv_dispatch_selected_kernel). */
static inline bool kv_accel_gate_is_plain_exact(void) {
    return atomic_load_explicit(&kv_accel_redispatch_now, memory_order_relaxed) &&
           !atomic_load_explicit(&kv_accel_force_now, memory_order_relaxed) &&
           atomic_load_explicit(&kv_accel_gate_now, memory_order_relaxed) == KV_ACCEL_GATE_EXACT;
}
/* The same decision for a boxed stack built elsewhere. */
bool kv_accel_gate_allows_stack(const kv_op *op, kv_key target, const kv_stack *boxed);

kv_status kv_accel_box_fast(kv_accel_box *b);
kv_status kv_accel_box_slow(kv_accel_box *b);
/* Return `ret`: re-tagged as accel (unless a Device argument named another
 * device); a return that is one of the boxed aliases becomes the caller's
 * own tensor again. */
kv_status kv_accel_unbox_tensor(kv_accel_box *b, int ret);
/* Return `ret` aliases argument `slot` (in-place self, out=): the caller's
 * tensor, retained. */
kv_status kv_accel_unbox_alias(kv_accel_box *b, int ret, int slot);
/* The same for an out= op's return: out may have been resized by the
 * target (PyTorch's resize_output), so the caller's tensor first takes
 * the shape of its boxed stand-in. */
kv_status kv_accel_unbox_out(kv_accel_box *b, int ret, int slot);
/* A Tensor[] return (foreach): the stack holds one tensor per element of
 * the op's first Tensor[] argument from return `first` on; each is
 * unboxed as kv_accel_unbox_tensor does. */
kv_status kv_accel_unbox_list(kv_accel_box *b, int first);
/* A non-tensor return, copied as is. */
kv_status kv_accel_unbox_value(kv_accel_box *b, int ret);
/* Releases everything boxing made; on st == KV_OK moves the returns to the
 * caller's stack. Returns st. */
kv_status kv_accel_box_end(kv_accel_box *b, kv_status st);

/* Boxes any op from its schema (the shape kvgen writes, decided at run
 * time): what the special paths fall back to when switched off. */
kv_status kv_accel_box_generic(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* The kernel every boxed op also has at the ACCEL backend key. A call
 * gets there when the accel tensors lack the AccelBoxing key (made by
 * kv_tensor_empty on the accel device, which sets only the device's
 * backend key) or after a layer ran on accel tensors (a batched call sent
 * below the boxing layer): every layer above the backends has run, so the
 * boxed call goes straight to the target's kernel. Counted slow: the
 * whole stack ran, above the boxing layer instead of on the target. */
kv_status kv_accel_box_dense(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* Re-tags an owned target tensor as accel: in place when the caller holds
 * the only reference, else as a new alias sharing the autograd record
 * (the old reference is dropped). NULL + error on failure. */
kv_tensor *kv_accel_retag_owned(kv_tensor *t);
/* Drops a reference a kernel returned to a shadow header: it lives in a
 * frame no other thread has seen, so no locked instruction (and it never
 * reaches zero: the frame holds the first). */
static inline void kv_accel_shadow_unref(kv_tensor *shadow) {
    atomic_store_explicit(&shadow->refcount, atomic_load_explicit(&shadow->refcount, memory_order_relaxed) - 1,
                          memory_order_relaxed);
}
/* The error of a kernel that kept a reference to a shadow header. */
kv_status kv_accel_kept_error(const kv_op *op, kv_key target);
/* The error of a target kernel whose returns do not match the schema. */
kv_status kv_accel_returns_error(const kv_op *op, int size, int ret);

/* Keys of t boxed to `target` / unboxed from it. */
static inline kv_keyset kv_accel_keys_to_target(kv_keyset keys, kv_key target) {
    return (keys & ~KV_ACCEL_KEYS) | kv_keyset_of(target);
}

/* The device index of an accel tensor's alias on `target`: the CPU has
 * one device. */
static inline int kv_accel_target_index(kv_key target, int accel_index) {
    return target == KV_KEY_CPU ? 0 : accel_index;
}

/* A target-tagged alias header of t in the caller's frame (no heap, no
 * references taken, no autograd record): only for calls that cannot keep
 * it, i.e. computing a key set, or a kernel that returns new tensors.
 * Inline: it is on the fast path once per tensor argument, and a struct
 * copy the compiler writes out beats a call into libc's memcpy. */
static inline void kv_accel_shadow(kv_tensor *shadow, const kv_tensor *t, kv_key target) {
    *shadow = *t;
    atomic_init(&shadow->refcount, 1);
    shadow->device = (kv_device){ (kv_device_type)target, kv_accel_target_index(target, t->device.index) };
    shadow->keys = kv_accel_keys_to_target(t->keys, target);
    shadow->autograd = NULL;
    shadow->batched = NULL;
}
static inline kv_keyset kv_accel_keys_from_target(kv_keyset keys, kv_key target) {
    return (keys & ~kv_keyset_of(target)) | KV_ACCEL_KEYS;
}

/* ---- autograd history (autograd_retag.c) ---- */
/* Before a slow path: notes whether an input requires grad and the
 * grad_fn of each input. */
void kv_accel_history_note_inputs(kv_accel_box *b);
/* After it, once the returns are unboxed: the nodes the call made record
 * accel instead of the target. */
void kv_accel_history_retag(kv_accel_box *b);

/* ---- special steps ---- */
/* cat.c: boxes cat's list in one pass and prepares the fast path's list
 * without legacy empties (KV_ACCEL_SPECIAL_CAT; otherwise kv_accel_box_list). */
kv_status kv_accel_box_cat_list(kv_accel_box *b, int slot);
/* group_norm.c: boxes a contiguous version of the tensor at `slot`
 * (KV_ACCEL_SPECIAL_GROUP_NORM; otherwise kv_accel_box_tensor). */
kv_status kv_accel_box_contiguous(kv_accel_box *b, int slot);

/* ---- counters (counters.c) ---- */
/* op_id is kv_op_builtin_id; -1 counts only in the totals. */
void kv_accel_count(int op_id, kv_accel_path path);
void kv_accel_count_cat_dropped(uint64_t n);
/* This thread's row of counts per builtin op, once it has counted (NULL
 * before): what kv_accel_count_builtin bumps without a call. */
extern _Thread_local atomic_uint_fast64_t (*kv_accel_counts_mine)[KV_ACCEL_PATH_COUNT];
/* kv_accel_count for an op of ops.schema (0 <= op_id < KV_OP_COUNT), inline
 * for the lean fast path: the same relaxed load + store on the thread's
 * own block, the first call of a thread going through kv_accel_count. */
static inline void kv_accel_count_builtin(int op_id, kv_accel_path path) {
    atomic_uint_fast64_t(*rows)[KV_ACCEL_PATH_COUNT] = kv_accel_counts_mine;
    if (rows == NULL) {
        kv_accel_count(op_id, path);
        return;
    }
    atomic_uint_fast64_t *c = &rows[op_id][path];
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

/* ---- state (gate.c, accel_device.c) ---- */
/* Reads the environment once (kv_boxing_register, or the first getter or
 * setter); later calls re-raise a failure of that read. */
kv_status kv_accel_env_init(void);
/* The parsers behind it, pure so tests and tests/fuzz/fuzz_env.c can call
 * them: KV_NO_REDISPATCH (true = fast paths enabled; `value` NULL when
 * unset) and KV_ACCEL_DISABLE (special[i] false for each name listed,
 * KV_ERR_INVALID_ARG naming an unknown one; NULL or "" disables none). */
bool kv_accel_parse_kill_switch(const char *value);
kv_status kv_accel_parse_disable_list(const char *text, bool *special);
/* The runtime target, resolved: a backend key, or KV_KEY_NONE with the
 * reason from kv_accel_target_error(). */
kv_key kv_accel_resolve_target(const char *requested);
/* kv_accel_target without the env-init check, for code that only runs
 * inside a dispatched call (init is done by then); inline, as the lean
 * fast path reads it on every call. */
extern atomic_int kv_accel_target_key;
static inline kv_key kv_accel_target_now(void) {
    return (kv_key)atomic_load_explicit(&kv_accel_target_key, memory_order_relaxed);
}
/* Sets the thread's error to why no target is available; returns it. */
kv_status kv_accel_target_error(const char *op);
/* The requested target from KV_ACCEL_TARGET: a backend's name ("cpu",
 * "sim", "cuda", or a plugin's own name), or "" for the default rule
 * (unset or "auto"). Only the spelling is checked here: a plugin may load
 * later (kvrun loads them after kv_init). out holds
 * KV_ACCEL_TARGET_NAME_MAX bytes. Parsed by gate.c's env code. */
#define KV_ACCEL_TARGET_NAME_MAX 32
kv_status kv_accel_parse_target(const char *text, char *out);
kv_status kv_accel_set_requested_target(const char *requested);

/* ---- registration ---- */
/* build/gen/accel_boxing.c: every op of kernels/accel.conf. */
kv_status kv_accel_register_generated(void);
/* metadata_ops.c and to_copy.c. */
kv_status kv_accel_register_metadata_ops(void);
kv_status kv_accel_register_to_copy(void);

#endif
