/* Analyse once: a predicate's analysis of a call, handed to the kernel of
 * the same call (kv/tune.h, kv_tune_stash_*).
 *
 * On a tuner cache hit the dispatcher runs the chosen variant's predicate
 * (a hash collision or a different aliasing must never reach a kernel that
 * refuses the call) and then its kernel, and both would analyse the same
 * arguments. The dispatcher arms this thread's stash for exactly that
 * call (op and stack) before the predicate and disarms it after the
 * kernel; only an armed stash takes a fill or gives one back, so an
 * analysis can never outlive its call or reach another one. The tuner's
 * timed runs and kv_tune_call_variant make the same call the same way
 * (kv_tune_run_as_hit), so they time what a dispatch costs. A predicate
 * called on any other path (the tuner checking which variants accept the
 * call, a compatibility query, a nested call) finds the stash unarmed or
 * armed for another call, and analyses into its own frame as before. */
#include "tune/tune_internal.h"

_Thread_local tune_stash kv_tune_t_stash;

void *kv_tune_stash_buffer(const kv_op *op, const kv_stack *stack, size_t size) {
    if (kv_tune_t_stash.op != op || kv_tune_t_stash.stack != stack || op == NULL || size > KV_TUNE_STASH_BYTES) return NULL;
    kv_tune_t_stash.kind = NULL; /* whatever was there is being overwritten */
    return kv_tune_t_stash.data;
}

void kv_tune_stash_fill(const kv_op *op, const kv_stack *stack, const void *kind) {
    if (kv_tune_t_stash.op == op && kv_tune_t_stash.stack == stack && op != NULL) kv_tune_t_stash.kind = kind;
}

const void *kv_tune_stash_take(const kv_op *op, const kv_stack *stack, const void *kind) {
    if (kv_tune_t_stash.op != op || kv_tune_t_stash.stack != stack || op == NULL || kv_tune_t_stash.kind != kind || kind == NULL)
        return NULL;
    /* Disarmed now: the kernel may call other ops, whose dispatch must not
     * see this call's analysis. The data stays valid until this thread
     * arms the stash again, which the kernel's nested calls may do, so the
     * kernel copies what it needs first. */
    kv_tune_stash_disarm();
    return kv_tune_t_stash.data;
}
