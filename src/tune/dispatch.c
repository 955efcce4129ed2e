/* The dispatching kernel every variant set installs, the thread's pin and
 * reference mode, and the choice query (kv/tune.h). */
#include "tune/tune_internal.h"

#include <string.h>

static _Thread_local bool t_reference;
static _Thread_local bool t_untimed;
static _Thread_local const kv_op *t_pin_op;
static _Thread_local kv_key t_pin_key;
static _Thread_local int t_pin_idx = -1;
/* Whether any of the three above is on (a pin, reference or untimed
 * mode): the common call has none and checks this one flag. Kept by the
 * setters below. */
static _Thread_local bool t_special;

static void special_update(void) { t_special = t_reference || t_untimed || t_pin_op != NULL; }

bool kv_tune_reference_mode_set(bool on) {
    const bool prev = t_reference;
    t_reference = on;
    special_update();
    return prev;
}

bool kv_tune_reference_mode(void) { return t_reference; }

bool kv_tune_untimed_mode_set(bool on) {
    const bool was = t_untimed;
    t_untimed = on;
    special_update();
    return was;
}

bool kv_tune_untimed_mode(void) { return t_untimed; }

kv_status kv_tune_pin(const kv_op *op, kv_key backend, const char *name) {
    if (name == NULL) {
        t_pin_op = NULL;
        t_pin_idx = -1;
        special_update();
        return KV_OK;
    }
    const int i = kv_tune_variant_find(op, backend, name);
    if (i < 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: kv_tune_pin: %s has no variant '%s'", kv_op_name(op),
                        kv_key_is_backend(backend) ? kv_key_name(backend) : "(not a backend)", name);
    t_pin_op = op;
    t_pin_key = backend;
    t_pin_idx = i;
    special_update();
    return KV_OK;
}

int kv_tune_pinned(const kv_op *op, kv_key key) {
    return (t_pin_op == op && t_pin_key == key) ? t_pin_idx : -1;
}

static int reference_index(const tune_slot *s, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s->v[i].name, "ref") == 0) return i;
    return 0;
}

/* The pinned or reference variant, checked like a forced one. */
static int fixed_choice(tune_slot *s, const kv_stack *stack, int idx, const char *why) {
    const tune_variant *v = &s->v[idx];
    if (v->pred && !v->pred(s->op, stack)) {
        char geo[256];
        kv_tune_geometry_format(s->op, stack, geo, sizeof geo);
        kv_error(KV_ERR_INVALID_ARG, "%s: variant '%s' of %s (%s) is not compatible with this call %s",
                 kv_op_name(s->op), v->name, kv_key_name(s->key), why, geo);
        return -1;
    }
    return idx;
}

/* Untimed mode: the last-registered variant whose predicate accepts the
 * call, asked afresh on every call (no cache, no timing, no force map), so
 * the choice depends on the call alone. The predicates run from the last
 * variant down and stop at the first that accepts: the chosen one's is the
 * last to run, so its stash is the live one. A guest variant (a plugin's
 * at this key) is taken only when no host variant accepts: the backend's
 * rows judge its own kernels, and a guest's bug fails its own row only. */
static int untimed_choice(tune_slot *s, const kv_stack *stack, int n) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = n - 1; i >= 0; i--)
            if (s->v[i].guest == (pass == 1) && (s->v[i].pred == NULL || s->v[i].pred(s->op, stack))) return i;
    char geo[256];
    kv_tune_geometry_format(s->op, stack, geo, sizeof geo);
    kv_error(KV_ERR_MISSING_KERNEL, "%s: no variant of %s is compatible with this call %s (untimed mode)",
             kv_op_name(s->op), kv_key_name(s->key), geo);
    return -1;
}

/* A pin, reference or untimed mode on this thread (t_special): the
 * variant they give, else the tuner's. Out of line, so that the common
 * call's path carries none of their frame. */
static int choose_special(tune_slot *s, const kv_stack *stack, bool *only_choice_checked) {
    const int n = atomic_load_explicit(&s->n, memory_order_acquire);
    *only_choice_checked = n > 0;
    if (n > 0 && t_pin_op == s->op && t_pin_key == s->key && t_pin_idx < n)
        return fixed_choice(s, stack, t_pin_idx, "pinned on this thread");
    if (n > 0 && t_reference) return fixed_choice(s, stack, reference_index(s, n), "reference mode");
    if (n > 0 && t_untimed) return untimed_choice(s, stack, n);
    return kv_tune_select(s, stack, !kv_tune_in_measure(), only_choice_checked);
}

static inline int choose(tune_slot *s, const kv_stack *stack, kv_status *st, bool *only_choice_checked) {
    *only_choice_checked = false;
    *st = KV_OK;
    if (!atomic_load_explicit(&g_tune_env_ok, memory_order_acquire) && (*st = kv_tune_env_ready()) != KV_OK) return -1;
    const int idx = t_special ? choose_special(s, stack, only_choice_checked)
                              : kv_tune_select(s, stack, !kv_tune_in_measure(), only_choice_checked);
    if (idx < 0) *st = kv_last_error() != KV_OK ? kv_last_error() : KV_ERR_INTERNAL;
    return idx;
}

bool kv_tune_run_as_hit(const tune_slot *s, int i, kv_keyset ks, kv_stack *stack, kv_status *st) {
    const tune_variant *v = &s->v[i];
    kv_tune_stash_arm(s->op, stack);
    const bool accepted = v->pred == NULL || v->pred(s->op, stack);
    *st = KV_OK;
    if (accepted) *st = v->fn(s->op, ks, stack);
    kv_tune_stash_disarm();
    return accepted;
}

kv_status kv_tune_dispatch_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_key key = kv_keyset_highest(ks);
    tune_slot *s = kv_tune_slot_find(op, key);
    if (s == NULL)
        return kv_error(KV_ERR_INTERNAL, "%s: the perf_dispatch kernel at %s has no variant set", kv_op_name(op),
                        kv_key_is_backend(key) ? kv_key_name(key) : "(not a backend)");
    kv_status st;
    bool checked_once;
    /* The chosen variant's predicate may stash its analysis for its
     * kernel (stash.c); on any other path the stash is dropped first. */
    kv_tune_stash_arm(op, stack);
    const int idx = choose(s, stack, &st, &checked_once);
    if (!checked_once) kv_tune_stash_disarm();
    if (idx < 0) {
        kv_tune_stash_disarm();
        return st;
    }
    st = s->v[idx].fn(op, ks, stack);
    kv_tune_stash_disarm();
    return st;
}

kv_status kv_tune_choice(const kv_op *op, kv_key backend, const kv_stack *stack, const char **name, int *index) {
    if (op == NULL || stack == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_tune_choice: NULL op or stack");
    tune_slot *s = kv_tune_slot_find(op, backend);
    if (s == NULL || atomic_load(&s->n) == 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: kv_tune_choice: %s has no variants", kv_op_name(op),
                        kv_key_is_backend(backend) ? kv_key_name(backend) : "(not a backend)");
    kv_status st;
    bool checked_once;
    const int idx = choose(s, stack, &st, &checked_once);
    if (idx < 0) return st;
    if (name) *name = s->v[idx].name;
    if (index) *index = idx;
    return KV_OK;
}
