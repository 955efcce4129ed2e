/* The op registry, dispatch tables, kv_call and kv_redispatch.
 *
 * Every op is registered once from its schema (kernels/ops.schema, compiled
 * in by kvgen). Kernels register per (op, key); backend fallbacks per key.
 * Each registration recomputes the op's table, one entry per runtime key:
 * direct kernel (or direct fallthrough), else backend fallback (or global
 * fallthrough), else missing. The hot path is one index into that table.
 *
 * Registration is meant for start-up (and for tests, single threaded);
 * calls may run concurrently from any number of threads. */
#ifndef KV_DISPATCH_H
#define KV_DISPATCH_H

#include <stdatomic.h>

#include "kv/keys.h"
#include "kv/schema.h"
#include "kv/stack.h"
#include "kv/status.h"
#include "kv/tls.h"

typedef struct kv_op kv_op;

/* A boxed kernel. `ks` is the key set the dispatcher selected it with; a
 * kernel at key K that wants the layers below calls
 * kv_redispatch(op, ks & kv_keyset_below(K), stack). */
/* Whether the dispatcher checks that no backend kernel is handed a tensor
 * with a lazy bit it does not fall through (kv/lazy.h): with -DKV_DEBUG_LAZY
 * or without NDEBUG, which includes the normal -O2 -g build. */
#if defined(KV_DEBUG_LAZY) || !defined(NDEBUG)
#define KV_LAZY_CHECK 1
#else
#define KV_LAZY_CHECK 0
#endif

typedef kv_status (*kv_kernel_fn)(const kv_op *op, kv_keyset ks, kv_stack *stack);

typedef enum kv_entry_kind {
    KV_ENTRY_MISSING,
    KV_ENTRY_KERNEL,       /* registered for this op and key */
    KV_ENTRY_FALLBACK,     /* the key's backend fallback */
    KV_ENTRY_FALLTHROUGH   /* skip this key (per op or for every op) */
} kv_entry_kind;

/* Builds the op registry: every op of ops.schema, with empty tables, and
 * the environment the dispatcher reads (KV_NO_DISPATCH_CACHE). Runs once;
 * every registry entry point calls it. It registers no kernel: kernels,
 * modes and the accel device are composed above the dispatcher, by
 * kv_init (kv/init.h), which calls this first. */
kv_status kv_dispatch_init(void);
/* Set by kv_init once every built-in kernel, mode and the accel device
 * are registered: what a plugin loader checks before it registers on top
 * (a plugin registered first would be overwritten). */
void kv_dispatch_mark_composed(void);
bool kv_dispatch_composed(void);

/* ---- ops ---- */
kv_status kv_op_register(const char *schema_text, const kv_op **out);
const kv_op *kv_op_find(const char *full_name);     /* NULL + KV_ERR_UNKNOWN_OP */
/* The handle cache of the typed wrappers: resolves `name` once and stores
 * it atomically in *cache. With KV_NO_DISPATCH_CACHE=1 (read once at init)
 * every call looks the name up again, so cached and uncached paths can be
 * compared. */
const kv_op *kv_op_handle(_Atomic(const kv_op *) *cache, const char *full_name);
bool kv_dispatch_cache_enabled(void);
void kv_dispatch_cache_set_enabled(bool enabled); /* tests and the runner */
/* The switch behind both, read by the typed wrappers for their inline
 * cache hit (a filled handle and the cache on); read only, set it with
 * kv_dispatch_cache_set_enabled. */
extern atomic_bool kv_dispatch_cache_on;

/* An observer of backend kernels: called with enter=true just before the
 * kernel (or backend fallback) at a backend key runs and enter=false just
 * after it returns, on the calling thread, nested calls included (a
 * backward formula's mul inside another op). The runner's workers record
 * the kernel in flight with it, so a crash or hang inside a kernel is
 * attributed to that op and backend. NULL (the default) removes it; the
 * hot path then pays one relaxed atomic load. */
typedef void (*kv_kernel_observer)(const kv_op *op, kv_key key, bool enter);
void kv_dispatch_set_kernel_observer(kv_kernel_observer fn);

/* The dispatch epoch: a number that grows whenever an op's table (a
 * kernel, fallthrough or fallback registration) or the kernel observer
 * changes, and whenever a layer above calls kv_dispatch_epoch_advance
 * because a switch of its own changed. A decision memoized together
 * with the epoch read before making it holds while the epoch reads the
 * same, as far as those inputs go (the thread's TLS keys and the
 * arguments are the memo's to compare). Never 0, so 0 can mean "none". */
extern atomic_uint_fast64_t kv_dispatch_epoch;
void kv_dispatch_epoch_advance(void);

const char *kv_op_name(const kv_op *op);
const kv_schema *kv_op_schema(const kv_op *op);
/* The op's kv_op_id (build/gen/kv/op_ids.h) for ops of ops.schema; -1 for
 * ops registered at run time with kv_op_register. */
int kv_op_builtin_id(const kv_op *op);
int kv_op_count(void);
const kv_op *kv_op_at(int i);                       /* sorted by full name */

/* ---- kernels ---- */
/* fn NULL removes the registration (used by tests to disable a kernel). */
kv_status kv_register_kernel(const char *op_name, kv_key key, kv_kernel_fn fn);
kv_status kv_register_fallthrough(const char *op_name, kv_key key);
void kv_register_fallback(kv_key key, kv_kernel_fn fn);   /* fn NULL removes */
void kv_register_fallback_fallthrough(kv_key key);

kv_entry_kind kv_op_entry_kind(const kv_op *op, kv_key key);
kv_kernel_fn kv_op_entry_fn(const kv_op *op, kv_key key);
/* Keys whose entry for this op is a fallthrough. */
kv_keyset kv_op_fallthrough_keys(const kv_op *op);

/* ---- calls ---- */
/* The key set kv_call would dispatch on for these arguments: the OR of the
 * tensor arguments' key sets (plus the Device argument's backend for
 * factories, CPU by default) | TLS included, minus TLS excluded, minus the
 * op's fallthrough keys. Tensors on two backends are KV_ERR_DEVICE
 * (0-dim CPU tensors excepted, as in PyTorch). */
kv_status kv_call_keyset(const kv_op *op, const kv_stack *stack, kv_keyset *out);
kv_status kv_call(const kv_op *op, kv_stack *stack);
kv_status kv_call_by_name(const char *full_name, kv_stack *stack);
/* kv_call for the typed wrappers (kv/ops.h), which vouch for their stack:
 * it holds the schema's arguments with their own tags (no None, no list,
 * no str, dtype, device or generator), every tensor non-NULL and all on
 * one device, every Scalar of a known kind, at least one tensor; and
 * `tensor_keys` is the OR of the tensors' key sets. The same key set and
 * kernel as kv_call, without its pass over the arguments. A stack that
 * breaks the promise goes through kv_call instead, which words the error. */
kv_status kv_call_typed(const kv_op *op, kv_keyset tensor_keys, kv_stack *stack);
/* Dispatches on `ks` as given (minus the op's fallthrough keys) without
 * consulting the arguments or TLS. */
kv_status kv_redispatch(const kv_op *op, kv_keyset ks, kv_stack *stack);
/* The accel fast path's two halves of kv_redispatch(op, {backend}, stack).
 * kv_dispatch_selected_kernel: op's own kernel at `backend` when kv_call,
 * for tensor arguments whose key sets OR to `tensor_keys` (on one device)
 * and this thread's TLS, would go straight to it with no lazy bit left
 * for the dispatcher to check (the exact redispatch gate's question,
 * answered with the op's table at hand); else NULL.
 * *observed says whether a kernel observer is installed: when not, the
 * caller may call the kernel itself, with {backend} as its key set.
 * kv_dispatch_run_kernel: calls a kernel that answer (or
 * kv_op_entry_fn) gave for `backend`, the kernel observer around it, as
 * the dispatcher would; no lazy-bit check (the caller has made it). */
kv_kernel_fn kv_dispatch_selected_kernel(const kv_op *op, kv_keyset tensor_keys, kv_key backend, bool *observed);
kv_status kv_dispatch_run_kernel(const kv_op *op, kv_key backend, kv_kernel_fn fn, kv_stack *stack);

#endif
