/* Trace mode: a thread-local stack of callbacks that see every op reaching
 * the Trace key (DESIGN.md section 4; PyTorch's Python dispatch mode).
 *
 * Trace sits just above the backends, below Functionalize, Conjugate,
 * Autograd, Autocast and the rest, so a callback sees the ops that come
 * down to the backend layer: under autograd the backward ops too, under
 * autocast the _to_copy casts, under functionalize the functional ops and
 * the copy_ back. It is per thread: another thread's calls are never seen.
 *
 * The fallback at KV_KEY_TRACE calls EVERY callback on the stack,
 * innermost (most recently pushed) first, twice per op: once before the
 * op runs (returns == NULL, st == KV_OK) and once after it ran (returns
 * holds the op's returns on success, NULL on failure; st is its status).
 * `args` is the same in both calls: the op's arguments, borrowed. While
 * callbacks run, Trace is excluded on this thread, so ops a callback calls
 * are not traced (PyTorch disables a mode inside its own handler). */
#ifndef KV_TRACE_H
#define KV_TRACE_H

#include <stdbool.h>

#include "kv/dispatch.h"
#include "kv/dtype.h"
#include "kv/keys.h"
#include "kv/stack.h"
#include "kv/status.h"

typedef void (*kv_trace_fn)(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args,
                            const kv_stack *returns, kv_status st);

#define KV_TRACE_MAX_DEPTH 16

/* Pushes a callback on this thread's stack. The first push adds
 * KV_KEY_TRACE to the thread's TLS included set. fn NULL or a full stack is
 * KV_ERR_INVALID_ARG. */
kv_status kv_trace_push(kv_trace_fn fn, void *ctx);
/* Pops the innermost callback; popping the last one takes KV_KEY_TRACE out
 * of TLS included again (unless it was included before the first push).
 * An empty stack is KV_ERR_INVALID_ARG. */
kv_status kv_trace_pop(void);
/* Callbacks on this thread's stack (0 when Trace is off). */
int kv_trace_depth(void);

/* Registers the fallback at KV_KEY_TRACE (called from kv_modes_register_all). */
kv_status kv_trace_register(void);

/* ---- the ready-made recorder ----
 * Collects one entry per op that reached Trace, in call order (an op's
 * entry is made before the op runs, so ops called from inside a lower
 * kernel come after it). For tests and the runner: "which ops ran at which
 * layer". A recorder belongs to the thread that started it. */
typedef struct kv_trace_recorder kv_trace_recorder;

typedef struct kv_trace_entry {
    const char *op;      /* full name, e.g. "add.Tensor"; lives as long as the op */
    kv_keyset ks;        /* the key set the Trace fallback was selected with */
    kv_status status;    /* the op's status (KV_OK until it has returned) */
    int depth;           /* ops open at Trace when this one started (0: outermost) */
    kv_dtype in_dtype;   /* dtype of the first tensor argument; KV_DTYPE_COUNT if none */
    kv_dtype out_dtype;  /* dtype of the first tensor return; KV_DTYPE_COUNT if none */
} kv_trace_entry;

kv_trace_recorder *kv_trace_recorder_new(void);   /* NULL + KV_ERR_OOM */
/* Stop the recorder before freeing it. NULL is allowed. */
void kv_trace_recorder_free(kv_trace_recorder *r);
/* Pushes the recorder's callback (kv_trace_push). */
kv_status kv_trace_recorder_start(kv_trace_recorder *r);
/* Pops it; KV_ERR_INVALID_ARG unless it is the innermost callback. */
kv_status kv_trace_recorder_stop(kv_trace_recorder *r);
void kv_trace_recorder_clear(kv_trace_recorder *r);
int kv_trace_recorder_count(const kv_trace_recorder *r);
/* Entry i (0 <= i < count), or NULL when out of range. */
const kv_trace_entry *kv_trace_recorder_entry(const kv_trace_recorder *r, int i);
const char *kv_trace_recorder_op(const kv_trace_recorder *r, int i); /* NULL when out of range */
/* How many entries name op `full_name`. */
int kv_trace_recorder_count_op(const kv_trace_recorder *r, const char *full_name);
/* The first entry at index >= from naming `full_name`, or -1. */
int kv_trace_recorder_find(const kv_trace_recorder *r, const char *full_name, int from);
/* Writes the op names joined by ", " ("neg, add.Tensor"; "" when empty)
 * into buf, snprintf style: returns the length the full text needs. */
int kv_trace_recorder_format(const kv_trace_recorder *r, char *buf, int cap);

#endif
