/* The accel device and the redispatch fast path (DESIGN.md section 5).
 *
 * The accel device is an accelerator brought up on another backend's
 * kernels, the TARGET. Accel tensors live in the target's memory and carry
 * the ACCEL backend key and KV_KEY_ACCEL_BOXING, the highest key, so the
 * boxing layer runs first for every op on them:
 *
 *   1. box    target-tagged aliases of the accel inputs: same storage,
 *             offset, strides and lazy bits, the same (refcounted) autograd
 *             record; the caller's tensors are never modified;
 *   2. slow   kv_call on the boxed arguments: full dispatch, so autograd,
 *             the lazy-bit fallbacks and the TLS modes run on the target;
 *   3. fast   kv_redispatch(op, {target}) straight to the target's kernel,
 *             when the gate says step 2 would reach that same kernel with
 *             nothing above it doing anything;
 *   4. unbox  outputs re-tagged as accel (device and keys).
 *
 * Gates (both correct, both tested; KV_REDISPATCH_GATE=seed|exact):
 *   seed   no fast path when grad mode is on and an input requires grad,
 *          when Autocast, Functionalize, Trace, Batched or VmapMode is in
 *          the thread's effective TLS set, or when a boxed input carries
 *          Conjugate, Negative, ZeroTensor or Batched;
 *   exact  (the default) the fast path iff the key set kv_call would use
 *          on the boxed arguments has the target's Dense key as its
 *          highest key. It lists no keys, so a functionality key added
 *          later can never slip past it; the seed gate would need a new
 *          line for it.
 * Either way the fast path also needs a kernel of the op's own at the
 * target key. KV_NO_REDISPATCH set to anything but "0" (the empty string
 * included) disables every fast path; unset or "0" enables them.
 *
 * Special paths, each with its own switch (KV_ACCEL_DISABLE, below):
 *   metadata    the view ops transpose.int, permute, select.int,
 *               slice.Tensor, squeeze, squeeze.dim, unsqueeze,
 *               _unsafe_view, detach, unfold, view, expand, as_strided are
 *               hand-registered: when the gate allows it they compute the
 *               view on the accel tensor itself (an accel view aliasing its
 *               storage, counted "manual"); otherwise, or when switched
 *               off, they are boxed like any other op;
 *   to_copy     _to_copy accel->accel and accel->target reaches the
 *               target's kernel without allocating a boxed alias (the
 *               alias lives in the kernel's frame), behind the same gate;
 *   cat         the tensor list is boxed in one pass; the fast path drops
 *               legacy empty inputs (1-D, size 0) whose dtype is the
 *               result dtype, so the result is the one the slow path
 *               computes; a list that would become empty is kept whole;
 *   group_norm  native_group_norm makes a non-contiguous accel input
 *               contiguous before boxing.
 *
 * The target: KV_ACCEL_TARGET=<backend name> (cpu, sim, cuda, or a loaded
 * plugin's own name such as onednn) or auto; unset or auto means cuda when a CUDA
 * backend is registered (its allocator is installed), else sim when a SIM
 * backend is, else cpu. Environment variables are read once, when kv_init
 * runs; a malformed value makes kv_init fail with a message naming the
 * variable and the value. The setters below override them at run time
 * (the runner's ON/OFF comparisons); reads and writes are atomic. */
#ifndef KV_ACCEL_H
#define KV_ACCEL_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/device.h"
#include "kv/keys.h"
#include "kv/status.h"
#include "kv/tensor.h"

/* ---- the target ---- */
/* The target's backend key (KV_KEY_CPU today), or KV_KEY_NONE when the
 * requested target is not available (accel ops then fail with a message
 * saying why). */
kv_key kv_accel_target(void);
/* "cpu", "sim", "cuda", a plugin's name; "none" when unavailable. */
const char *kv_accel_target_name(void);
/* What was asked for (KV_ACCEL_TARGET or the last kv_accel_select_target):
 * a backend's name, or "auto"; written into buf, which is returned. */
const char *kv_accel_requested_target(char *buf, int cap);
/* Selects the target by backend name ("cpu", "sim", "cuda", a plugin's own
 * name), or NULL / "auto" for the default rule. Meant for start-up (a backend loader calls it after
 * registering a plugin), before any accel tensor exists: accel memory
 * already allocated stays where it is. KV_ERR_INVALID_ARG for an unknown
 * name, KV_ERR_DEVICE when that backend is not registered (the target is
 * then unchanged). */
kv_status kv_accel_select_target(const char *name);

/* ---- converting tensors (tests and the runner) ---- */
/* A new accel tensor over t's storage: t must live on the target device
 * (or be accel already). Same geometry, dtype, lazy bits and autograd
 * record; t is not modified. NULL + KV_ERR_DEVICE otherwise. */
kv_tensor *kv_accel_to(const kv_tensor *t);
/* The reverse: a new target tensor over an accel tensor's storage. */
kv_tensor *kv_accel_from(const kv_tensor *t);
/* Device ACCEL (the keys are not consulted). NULL is false. */
bool kv_tensor_is_accel(const kv_tensor *t);

/* ---- the gate and the switches ---- */
typedef enum kv_accel_gate {
    KV_ACCEL_GATE_SEED,
    KV_ACCEL_GATE_EXACT
} kv_accel_gate;

kv_accel_gate kv_accel_gate_get(void);
void kv_accel_gate_set(kv_accel_gate gate);
const char *kv_accel_gate_name(kv_accel_gate gate); /* "seed", "exact" */
int kv_accel_gate_parse(const char *text, kv_accel_gate *out); /* 0 on success, -1 if unknown */

/* The kill switch: false disables every fast path (generated kernels,
 * metadata, _to_copy, cat's dropping). */
bool kv_accel_redispatch_enabled(void);
void kv_accel_redispatch_set_enabled(bool enabled);

typedef enum kv_accel_special {
    KV_ACCEL_SPECIAL_METADATA,   /* "metadata" */
    KV_ACCEL_SPECIAL_TO_COPY,    /* "to_copy" */
    KV_ACCEL_SPECIAL_CAT,        /* "cat" */
    KV_ACCEL_SPECIAL_GROUP_NORM, /* "group_norm" */
    KV_ACCEL_SPECIAL_COUNT
} kv_accel_special;

/* KV_ACCEL_DISABLE=metadata,cat,... switches special paths off (unknown
 * names are an error that lists the known ones). */
bool kv_accel_special_enabled(kv_accel_special which);
void kv_accel_special_set_enabled(kv_accel_special which, bool enabled);
const char *kv_accel_special_name(kv_accel_special which);

/* TEST ONLY (tests/test_fastpath_check.c): with `on` true both gates say
 * yes to every call whose op has a kernel of its own at the target (the
 * kill switch still wins), whatever its arguments carry: the broken gate
 * the runner's fastpath check must catch on lazy-bit and mode cases.
 * Process wide. Never call it outside tests. */
void kv_accel_gate_force_for_tests(bool on);

/* Re-reads KV_ACCEL_TARGET, KV_REDISPATCH_GATE, KV_NO_REDISPATCH and
 * KV_ACCEL_DISABLE (tests; kv_init does it once). On a malformed value
 * nothing changes and the error names the variable and the value. */
kv_status kv_accel_env_reload(void);

/* ---- counters ---- */
typedef enum kv_accel_path {
    KV_ACCEL_PATH_FAST,   /* kv_redispatch straight to the target kernel */
    KV_ACCEL_PATH_SLOW,   /* full dispatch on the boxed arguments */
    KV_ACCEL_PATH_MANUAL, /* a hand-registered metadata op computed the view itself */
    KV_ACCEL_PATH_COUNT
} kv_accel_path;

typedef struct kv_accel_counters {
    uint64_t fast;
    uint64_t slow;
    uint64_t manual;
} kv_accel_counters;

/* Calls of `full_name` at the boxing layer by path since the last reset
 * (all threads); zeros for an unknown op. Also counted slow: a call with a
 * batched (vmap) argument, which goes below the boxing layer to Batched,
 * and a call that reaches the ACCEL backend key after the layers above ran
 * on accel tensors (a tensor made by kv_tensor_empty on the accel device
 * has only the ACCEL key), which goes straight to the target's kernel. */
kv_accel_counters kv_accel_counters_of(const char *full_name);
/* The sum over every op. */
kv_accel_counters kv_accel_counters_total(void);
/* Legacy empty inputs the cat fast path dropped. */
uint64_t kv_accel_cat_dropped(void);
void kv_accel_counters_reset(void);
const char *kv_accel_path_name(kv_accel_path path); /* "fast", "slow", "manual" */

/* Installs the accel allocator and every boxing kernel; kv_init calls it
 * after the modes have registered. */
kv_status kv_boxing_register(void);

#endif
