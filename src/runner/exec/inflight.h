/* The kernel in flight, as a forked worker's parent can see it after the
 * worker crashed or hung (README "Isolation"; runner/isolate.h).
 *
 * The parent maps one kv_inflight per worker (MAP_SHARED, before fork).
 * The worker attaches to its slot: a dispatcher observer
 * (kv_dispatch_set_kernel_observer) pushes every backend kernel call on
 * the slot's stack and pops it on return, and the checks note which check
 * and which perf_dispatch variant they are running. When the worker dies
 * or is killed, the innermost entry still on the stack is the kernel that
 * was running: the op and the backend the crash belongs to, also when it
 * happened inside another op (a backward formula's mul under a grad
 * check). Op handles are pointers into the registry, which the worker
 * inherited at the same addresses; the parent checks them against its
 * own registry before use.
 *
 * The worker also keeps the backends it must leave out (after one of
 * their kernels crashed the case, the parent reruns the case without
 * them): kv_inflight_excluded, consulted by the checks that sweep
 * backends. */
#ifndef KV_RUNNER_INFLIGHT_H
#define KV_RUNNER_INFLIGHT_H

#include <stdbool.h>

#include "kv/dispatch.h"

#define KV_INFLIGHT_DEPTH 16

typedef struct kv_inflight {
    volatile int depth; /* may exceed KV_INFLIGHT_DEPTH: only the first entries are kept */
    const kv_op *volatile ops[KV_INFLIGHT_DEPTH];
    volatile int keys[KV_INFLIGHT_DEPTH];
    char check[64];     /* the check running ("" outside one) */
    char variant[32];   /* the variant the check pinned ("" none) */
    volatile long vm_mib_at_death; /* the worker's address space when a fatal signal hit it; 0: none */
    volatile int mem_op;  /* kv_backend_mem_op in flight (KV_BACKEND_MEM_NONE: none) */
    volatile int mem_key; /* whose */
} kv_inflight;

/* Worker side. Starts recording into `slot` (NULL stops); calls from other
 * threads than the attaching one are not recorded. */
void kv_inflight_attach(kv_inflight *slot);
/* Clears the stack and the notes: a new case. */
void kv_inflight_reset(void);
void kv_inflight_set_check(const char *check);
void kv_inflight_set_variant(const char *variant);

/* Whether a backend kernel this worker called since the last take
 * returned with a changed FP environment (backend/fpenv.h), or, on its
 * first call of an op, with changed signal handlers or signal mask
 * (runner/exec/sigstate.h); the message names the first such kernel and
 * the change, key its backend. Either was put back when that kernel
 * returned. */
bool kv_inflight_take_fpenv_violation(char *buf, int cap, kv_key *key);

/* Backend keys the checks must leave out in this process (0: none). */
kv_keyset kv_inflight_excluded(void);
void kv_inflight_set_excluded(kv_keyset ks);

/* Parent side: the innermost kernel on slot's stack, if any: its op (a
 * handle of this process's registry) and key. false when no kernel was in
 * flight or the record is not usable. */
bool kv_inflight_innermost(const kv_inflight *slot, const kv_op **op, kv_key *key);
/* Parent side: the plugin mem op (copy_to_host, ...) in flight, if any,
 * and its backend. A mem op is innermost when both are in flight (a
 * kernel calls copies, never the other way round). */
bool kv_inflight_mem(const kv_inflight *slot, kv_key *key);
/* "the mul.Tensor kernel of Plugin0, variant avx2, check grad", or "the
 * copy_to_host mem op of Plugin0 (inside the mul.Tensor kernel of ...)",
 * or "" when nothing was in flight. */
void kv_inflight_describe(const kv_inflight *slot, char *buf, int cap);

#endif
