/* Trace mode: the per-thread callback stack, the boxed fallback at
 * KV_KEY_TRACE and the ready-made recorder. */
#include "kv/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/tensor.h"
#include "modes/mode_tls.h"

typedef struct trace_slot {
    kv_trace_fn fn;
    void *ctx;
} trace_slot;

static _Thread_local trace_slot t_stack[KV_TRACE_MAX_DEPTH];
static _Thread_local int t_depth;
/* TLS included as it was before the first push (only Trace's bit is used). */
static _Thread_local kv_keyset t_included_before;

kv_status kv_trace_push(kv_trace_fn fn, void *ctx) {
    if (fn == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_trace_push: argument 'fn': is NULL");
    if (t_depth == KV_TRACE_MAX_DEPTH)
        return kv_error(KV_ERR_INVALID_ARG, "kv_trace_push: the trace stack is full (%d callbacks)",
                        KV_TRACE_MAX_DEPTH);
    if (t_depth == 0) t_included_before = kv_mode_tls_on(KV_KEY_TRACE);
    t_stack[t_depth++] = (trace_slot){ fn, ctx };
    return KV_OK;
}

kv_status kv_trace_pop(void) {
    if (t_depth == 0) return kv_error(KV_ERR_INVALID_ARG, "kv_trace_pop: the trace stack is empty");
    t_stack[--t_depth] = (trace_slot){ NULL, NULL };
    if (t_depth == 0) kv_mode_tls_off(KV_KEY_TRACE, t_included_before);
    return KV_OK;
}

int kv_trace_depth(void) { return t_depth; }

/* ---- the fallback ---- */

/* Runs the callbacks innermost first with Trace excluded, so what they call
 * is not traced. Only Trace's excluded bit is put back afterwards: a
 * callback may legitimately push or pop modes of its own. A failing op's
 * error survives callbacks that call (and fail) ops themselves. */
static void trace_notify(const trace_slot *snap, int n, const kv_op *op, kv_keyset ks, const kv_stack *args,
                         const kv_stack *returns, kv_status st) {
    char saved_msg[1024];
    if (st != KV_OK) snprintf(saved_msg, sizeof saved_msg, "%s", kv_last_error_message());
    const kv_keyset bit = kv_keyset_of(KV_KEY_TRACE);
    const kv_tls_keys before = kv_tls_exclude_push(bit);
    for (int i = n - 1; i >= 0; i--) snap[i].fn(snap[i].ctx, op, ks, args, returns, st);
    kv_tls_keys now = kv_tls_get();
    now.excluded = (now.excluded & ~bit) | (before.excluded & bit);
    kv_tls_set(now);
    if (st != KV_OK && (kv_last_error() != st || strcmp(kv_last_error_message(), saved_msg) != 0))
        kv_error(st, "%s", saved_msg);
}

static kv_status trace_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_keyset below = ks & kv_keyset_below(KV_KEY_TRACE);
    const int n = t_depth;
    if (n == 0) return kv_redispatch(op, below, stack);
    if (stack->size > KV_STACK_MAX)
        return kv_error(KV_ERR_INTERNAL, "%s: Trace: %d arguments on the stack, more than KV_STACK_MAX (%d)",
                        kv_op_name(op), stack->size, KV_STACK_MAX);
    /* The callbacks of this call are the ones on the stack when it started,
     * for the after-call too, so every callback sees both halves. */
    trace_slot snap[KV_TRACE_MAX_DEPTH];
    memcpy(snap, t_stack, sizeof snap[0] * (size_t)n);
    /* The stack is replaced by the returns; keep the (borrowed) arguments
     * for the after-call. The caller owns them for the whole call. */
    kv_ivalue arg_slots[KV_STACK_MAX];
    if (stack->size > 0) memcpy(arg_slots, stack->slots, sizeof arg_slots[0] * (size_t)stack->size);
    const kv_stack args = { arg_slots, stack->size, stack->size };

    trace_notify(snap, n, op, ks, &args, NULL, KV_OK);
    kv_status st = kv_redispatch(op, below, stack);
    trace_notify(snap, n, op, ks, &args, st == KV_OK ? stack : NULL, st);
    return st;
}

kv_status kv_trace_register(void) {
    kv_register_fallback(KV_KEY_TRACE, trace_fallback);
    return KV_OK;
}

/* ---- the recorder ---- */

#define RECORDER_MAX_OPEN 64

struct kv_trace_recorder {
    kv_trace_entry *entries;
    int n, cap;
    /* Entries of the ops that have started but not returned, innermost
     * last; -1 for an op whose entry could not be stored. Nesting deeper
     * than RECORDER_MAX_OPEN is counted but not matched. */
    int open[RECORDER_MAX_OPEN];
    int nopen;
};

kv_trace_recorder *kv_trace_recorder_new(void) {
    kv_trace_recorder *r = calloc(1, sizeof *r);
    if (r == NULL) kv_error(KV_ERR_OOM, "kv_trace_recorder_new: out of memory");
    return r;
}

void kv_trace_recorder_free(kv_trace_recorder *r) {
    if (r == NULL) return;
    free(r->entries);
    free(r);
}

static kv_dtype first_tensor_dtype(const kv_stack *s) {
    for (int i = 0; s != NULL && i < s->size; i++) {
        const kv_ivalue *v = &s->slots[i];
        if (v->tag == KV_IV_TENSOR && v->v.tensor != NULL) return v->v.tensor->dtype;
        if (v->tag == KV_IV_TENSOR_LIST && v->v.tensors.n > 0) return v->v.tensors.items[0]->dtype;
    }
    return KV_DTYPE_COUNT;
}

static void recorder_before(kv_trace_recorder *r, const kv_op *op, kv_keyset ks, const kv_stack *args) {
    int idx = -1;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 32;
        kv_trace_entry *grown = realloc(r->entries, sizeof *grown * (size_t)cap);
        if (grown != NULL) {
            r->entries = grown;
            r->cap = cap;
        }
    }
    if (r->n < r->cap) {
        idx = r->n++;
        r->entries[idx] = (kv_trace_entry){ kv_op_name(op), ks, KV_OK, r->nopen, first_tensor_dtype(args),
                                            KV_DTYPE_COUNT };
    }
    if (r->nopen < RECORDER_MAX_OPEN) r->open[r->nopen] = idx;
    r->nopen++;
}

static void recorder_after(kv_trace_recorder *r, const kv_stack *returns, kv_status st) {
    if (r->nopen == 0) return; /* started after this op began: nothing to match */
    r->nopen--;
    if (r->nopen >= RECORDER_MAX_OPEN) return;
    const int idx = r->open[r->nopen];
    if (idx < 0) return;
    r->entries[idx].status = st;
    if (returns != NULL) {
        for (int i = 0; i < returns->size; i++) {
            if (returns->slots[i].tag == KV_IV_TENSOR && returns->slots[i].v.tensor != NULL) {
                r->entries[idx].out_dtype = returns->slots[i].v.tensor->dtype;
                break;
            }
        }
    }
}

static void recorder_fn(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args, const kv_stack *returns,
                        kv_status st) {
    kv_trace_recorder *r = ctx;
    if (returns == NULL && st == KV_OK) recorder_before(r, op, ks, args);
    else recorder_after(r, returns, st);
}

kv_status kv_trace_recorder_start(kv_trace_recorder *r) {
    if (r == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_trace_recorder_start: argument 'r': is NULL");
    r->nopen = 0;
    return kv_trace_push(recorder_fn, r);
}

kv_status kv_trace_recorder_stop(kv_trace_recorder *r) {
    if (r == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_trace_recorder_stop: argument 'r': is NULL");
    if (t_depth == 0 || t_stack[t_depth - 1].fn != recorder_fn || t_stack[t_depth - 1].ctx != r)
        return kv_error(KV_ERR_INVALID_ARG,
                        "kv_trace_recorder_stop: argument 'r': is not the innermost trace callback of this thread");
    return kv_trace_pop();
}

void kv_trace_recorder_clear(kv_trace_recorder *r) {
    if (r == NULL) return;
    r->n = 0;
    r->nopen = 0;
}

int kv_trace_recorder_count(const kv_trace_recorder *r) { return r ? r->n : 0; }

const kv_trace_entry *kv_trace_recorder_entry(const kv_trace_recorder *r, int i) {
    if (r == NULL || i < 0 || i >= r->n) return NULL;
    return &r->entries[i];
}

const char *kv_trace_recorder_op(const kv_trace_recorder *r, int i) {
    const kv_trace_entry *e = kv_trace_recorder_entry(r, i);
    return e ? e->op : NULL;
}

int kv_trace_recorder_find(const kv_trace_recorder *r, const char *full_name, int from) {
    if (r == NULL || full_name == NULL) return -1;
    for (int i = from < 0 ? 0 : from; i < r->n; i++)
        if (strcmp(r->entries[i].op, full_name) == 0) return i;
    return -1;
}

int kv_trace_recorder_count_op(const kv_trace_recorder *r, const char *full_name) {
    int count = 0;
    for (int i = kv_trace_recorder_find(r, full_name, 0); i >= 0; i = kv_trace_recorder_find(r, full_name, i + 1))
        count++;
    return count;
}

int kv_trace_recorder_format(const kv_trace_recorder *r, char *buf, int cap) {
    size_t len = 0;
    if (buf != NULL && cap > 0) buf[0] = '\0';
    for (int i = 0; r != NULL && i < r->n; i++) {
        const char *sep = i ? ", " : "";
        size_t room = (buf != NULL && cap > 0 && len < (size_t)cap) ? (size_t)cap - len : 0;
        int w = snprintf(room ? buf + len : NULL, room, "%s%s", sep, r->entries[i].op);
        if (w > 0) len += (size_t)w;
    }
    return (int)len;
}
