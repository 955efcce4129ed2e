/* The redispatch gates, the kill switch, the special-path switches and
 * the environment that sets them.
 *
 * Every switch is an atomic read on the hot path: boxing kernels on other
 * threads may run while the runner flips a switch between two cases. */
#include "boxing/boxing_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/lazy.h"

/* Read inline by the lean fast path (boxing_internal.h). */
atomic_int kv_accel_gate_now = KV_ACCEL_GATE_EXACT;
atomic_bool kv_accel_redispatch_now = true;
atomic_bool kv_accel_force_now = false;
static atomic_bool g_special[KV_ACCEL_SPECIAL_COUNT] = { true, true, true, true };

/* ---- names ---- */

const char *kv_accel_gate_name(kv_accel_gate gate) {
    switch (gate) {
    case KV_ACCEL_GATE_SEED: return "seed";
    case KV_ACCEL_GATE_EXACT: return "exact";
    }
    return "?";
}

int kv_accel_gate_parse(const char *text, kv_accel_gate *out) {
    if (text == NULL) return -1;
    if (strcmp(text, "seed") == 0) *out = KV_ACCEL_GATE_SEED;
    else if (strcmp(text, "exact") == 0) *out = KV_ACCEL_GATE_EXACT;
    else return -1;
    return 0;
}

const char *kv_accel_special_name(kv_accel_special which) {
    switch (which) {
    case KV_ACCEL_SPECIAL_METADATA: return "metadata";
    case KV_ACCEL_SPECIAL_TO_COPY: return "to_copy";
    case KV_ACCEL_SPECIAL_CAT: return "cat";
    case KV_ACCEL_SPECIAL_GROUP_NORM: return "group_norm";
    case KV_ACCEL_SPECIAL_COUNT: break;
    }
    return "?";
}

/* ---- getters and setters ---- */

kv_accel_gate kv_accel_gate_get(void) {
    kv_accel_env_init();
    return (kv_accel_gate)atomic_load_explicit(&kv_accel_gate_now, memory_order_relaxed);
}

void kv_accel_gate_set(kv_accel_gate gate) {
    kv_accel_env_init(); /* so the first read of the environment cannot override this later */
    if (gate != KV_ACCEL_GATE_SEED && gate != KV_ACCEL_GATE_EXACT) return;
    atomic_store(&kv_accel_gate_now, (int)gate);
    kv_dispatch_epoch_advance(); /* the lean path's memos (lean.h) decided under the old rule */
}

bool kv_accel_redispatch_enabled(void) {
    kv_accel_env_init();
    return atomic_load_explicit(&kv_accel_redispatch_now, memory_order_relaxed);
}

void kv_accel_redispatch_set_enabled(bool enabled) {
    kv_accel_env_init();
    atomic_store(&kv_accel_redispatch_now, enabled);
    kv_dispatch_epoch_advance();
}

bool kv_accel_special_enabled(kv_accel_special which) {
    if ((unsigned)which >= (unsigned)KV_ACCEL_SPECIAL_COUNT) return false;
    return atomic_load_explicit(&g_special[which], memory_order_relaxed);
}

void kv_accel_gate_force_for_tests(bool on) {
    atomic_store(&kv_accel_force_now, on);
    kv_dispatch_epoch_advance();
}

void kv_accel_special_set_enabled(kv_accel_special which, bool enabled) {
    kv_accel_env_init();
    if ((unsigned)which >= (unsigned)KV_ACCEL_SPECIAL_COUNT) return;
    atomic_store(&g_special[which], enabled);
    kv_dispatch_epoch_advance();
}

/* ---- the environment ---- */

typedef struct env_config {
    kv_accel_gate gate;
    bool redispatch;
    bool special[KV_ACCEL_SPECIAL_COUNT];
    char target[KV_ACCEL_TARGET_NAME_MAX]; /* "": the default rule */
} env_config;

static bool is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

/* The same list rule as KV_PERFDISPATCH_FORCE: blanks around an entry are
 * ignored and empty entries skipped, so "metadata, cat" reads as written;
 * a value with no entry at all is an error (unset the variable instead). */
kv_status kv_accel_parse_disable_list(const char *text, bool *special) {
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) special[i] = true;
    if (text == NULL) return KV_OK;
    const char *p = text;
    int entries = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        const char *e = end ? end : p + strlen(p);
        while (p < e && is_space(*p)) p++;
        while (e > p && is_space(e[-1])) e--;
        const size_t n = (size_t)(e - p);
        int found = -1;
        for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT && found < 0; i++) {
            const char *name = kv_accel_special_name((kv_accel_special)i);
            if (strlen(name) == n && strncmp(p, name, n) == 0) found = i;
        }
        if (n > 0 && found < 0)
            return kv_error(KV_ERR_INVALID_ARG,
                            "KV_ACCEL_DISABLE: unknown entry '%.*s' in '%s' (known: metadata, to_copy, cat, "
                            "group_norm)",
                            (int)n, p, text);
        if (found >= 0) {
            special[found] = false;
            entries++;
        }
        if (end == NULL) break;
        p = end + 1;
    }
    if (entries == 0)
        return kv_error(KV_ERR_INVALID_ARG,
                        "KV_ACCEL_DISABLE: empty value '%s' (unset it, or list some of metadata, to_copy, cat, "
                        "group_norm)",
                        text);
    return KV_OK;
}

bool kv_accel_parse_kill_switch(const char *value) {
    /* The rule, literally: unset or "0" enables, any other value
     * (the empty string too) disables. */
    return value == NULL || strcmp(value, "0") == 0;
}

static kv_status read_env(env_config *c) {
    const char *gate = getenv("KV_REDISPATCH_GATE");
    c->gate = KV_ACCEL_GATE_EXACT;
    if (gate != NULL && kv_accel_gate_parse(gate, &c->gate) != 0)
        return kv_error(KV_ERR_INVALID_ARG, "KV_REDISPATCH_GATE: expected 'seed' or 'exact', got '%s'", gate);
    const char *kill = getenv("KV_NO_REDISPATCH");
    /* Any value but "0" disables; set but empty is rejected, as for every
     * variable, because it is usually a shell variable that was never set. */
    if (kill != NULL && kill[0] == '\0')
        return kv_error(KV_ERR_INVALID_ARG, "KV_NO_REDISPATCH: empty value (unset it, or set 0 or 1)");
    c->redispatch = kv_accel_parse_kill_switch(kill);
    kv_status st = kv_accel_parse_disable_list(getenv("KV_ACCEL_DISABLE"), c->special);
    if (st != KV_OK) return st;
    return kv_accel_parse_target(getenv("KV_ACCEL_TARGET"), c->target);
}

static kv_status apply_env(const env_config *c) {
    kv_status st = kv_accel_set_requested_target(c->target);
    if (st != KV_OK) return st;
    atomic_store(&kv_accel_gate_now, (int)c->gate);
    atomic_store(&kv_accel_redispatch_now, c->redispatch);
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) atomic_store(&g_special[i], c->special[i]);
    kv_dispatch_epoch_advance();
    return KV_OK;
}

/* The environment is read once, by whichever comes first: the accel
 * device's registration or a getter or setter called before it. A setter
 * that ran first must not be undone by a later read. */
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static kv_status g_env_status;
static char g_env_message[512];

static void env_once(void) {
    env_config c;
    g_env_status = kv_dispatch_init();
    if (g_env_status == KV_OK) g_env_status = read_env(&c);
    if (g_env_status == KV_OK) g_env_status = apply_env(&c);
    if (g_env_status != KV_OK) snprintf(g_env_message, sizeof g_env_message, "%s", kv_last_error_message());
}

kv_status kv_accel_env_init(void) {
    pthread_once(&g_env_once, env_once);
    if (g_env_status != KV_OK) return kv_error(g_env_status, "%s", g_env_message);
    return KV_OK;
}

kv_status kv_accel_env_reload(void) {
    kv_status st = kv_accel_env_init();
    if (st != KV_OK) return st;
    env_config c;
    st = read_env(&c);
    if (st != KV_OK) return st;
    return apply_env(&c);
}

/* ---- the gates ---- */

/* The OR of the key sets of every tensor on a boxed stack. */
static kv_keyset boxed_keys(const kv_schema *s, const kv_stack *boxed) {
    kv_keyset ks = KV_KEYSET_EMPTY;
    for (int i = 0; i < s->nargs && i < boxed->size; i++) {
        const kv_ivalue *v = &boxed->slots[i];
        if (v->tag == KV_IV_TENSOR) {
            ks |= v->v.tensor->keys;
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            for (int e = 0; e < v->v.tensors.n; e++) ks |= v->v.tensors.items[e]->keys;
        }
    }
    return ks;
}

/* What the field's accelerators check today: a fixed list of reasons to
 * take the slow path. Correct for every key kvsuite has now; a key added
 * later needs a line here, which is why it is not the default. `keys` is
 * the OR of the boxed tensors' key sets. */
static bool seed_allows(kv_keyset keys) {
    const kv_tls_keys tls = kv_tls_get();
    const kv_keyset live = tls.included & ~tls.excluded;
    /* Grad mode is Autograd not excluded (kv/autograd.h); it only matters
     * when some input requires grad, which its key says. */
    const bool grad_mode = !kv_keyset_has(tls.excluded, KV_KEY_AUTOGRAD);
    if (grad_mode && kv_keyset_has(keys, KV_KEY_AUTOGRAD)) return false;
    const kv_keyset modes = kv_keyset_of(KV_KEY_AUTOCAST) | kv_keyset_of(KV_KEY_FUNCTIONALIZE) |
                            kv_keyset_of(KV_KEY_TRACE) | kv_keyset_of(KV_KEY_BATCHED) |
                            kv_keyset_of(KV_KEY_VMAP_MODE);
    if (live & modes) return false;
    if (keys & (KV_KEYSET_LAZY | kv_keyset_of(KV_KEY_BATCHED))) return false;
    return true;
}

/* The key set the slow path's kv_call would compute, and nothing else:
 * the fast path is taken exactly when that call would go straight to the
 * target's kernel. No key is named, so none can be forgotten. */
static bool exact_allows(const kv_op *op, kv_key target, const kv_stack *boxed) {
    kv_keyset ks;
    /* A failure (devices that do not match) is the slow path's to report. */
    if (kv_call_keyset(op, boxed, &ks) != KV_OK) return false;
    return kv_keyset_highest(ks) == target;
}

/* The same rule from the key set the box gathered while boxing: kv_call's
 * formula applied to it, without a second pass over the arguments. */
static bool exact_allows_keys(const kv_op *op, kv_key target, kv_keyset tensor_keys) {
    const kv_tls_keys tls = kv_tls_get();
    const kv_keyset ks = ((tensor_keys | tls.included) & ~tls.excluded & ~kv_op_fallthrough_keys(op)) & KV_KEYSET_ALL;
    return kv_keyset_highest(ks) == target;
}

/* The switches every gate decision starts with: true when the rule
 * decides, *out set when the switches already did. */
static bool switches_decide(const kv_op *op, kv_key target, bool *out) {
    *out = false;
    if (!atomic_load_explicit(&kv_accel_redispatch_now, memory_order_relaxed)) return true;
    /* A fallback or fallthrough at the target key is not "the target's
     * kernel": only an op's own kernel may be called directly. */
    if (kv_op_entry_kind(op, target) != KV_ENTRY_KERNEL) return true;
    if (atomic_load_explicit(&kv_accel_force_now, memory_order_relaxed)) {
        *out = true;
        return true;
    }
    return false;
}

bool kv_accel_gate_allows_stack(const kv_op *op, kv_key target, const kv_stack *boxed) {
    bool decided;
    if (switches_decide(op, target, &decided)) return decided;
    switch ((kv_accel_gate)atomic_load_explicit(&kv_accel_gate_now, memory_order_relaxed)) {
    case KV_ACCEL_GATE_SEED: return seed_allows(boxed_keys(kv_op_schema(op), boxed));
    case KV_ACCEL_GATE_EXACT: return exact_allows(op, target, boxed);
    }
    return false;
}

bool kv_accel_gate_allows_keys(const kv_op *op, kv_key target, kv_keyset boxed_keys) {
    bool decided;
    if (switches_decide(op, target, &decided)) return decided;
    switch ((kv_accel_gate)atomic_load_explicit(&kv_accel_gate_now, memory_order_relaxed)) {
    case KV_ACCEL_GATE_SEED: return seed_allows(boxed_keys);
    case KV_ACCEL_GATE_EXACT: return exact_allows_keys(op, target, boxed_keys);
    }
    return false;
}

bool kv_accel_gate_allows_lean(const kv_op *op, kv_key target, kv_keyset boxed_keys) {
    if (!kv_accel_gate_allows_keys(op, target, boxed_keys)) return false;
    return (boxed_keys & KV_KEYSET_LAZY & ~kv_op_fallthrough_keys(op)) == 0;
}

bool kv_accel_gate_allows(kv_accel_box *b) {
    if (b->st != KV_OK) return false;
    /* No tensor argument (a factory): the key set comes from the Device
     * argument, which kv_call_keyset knows how to read. */
    if (!b->boxed_any) return kv_accel_gate_allows_stack(b->op, b->target, &b->stack);
    /* Devices that disagree are the slow path's to report, under the exact
     * gate; the seed gate never looked at devices. */
    if (b->boxed_device_mismatch && atomic_load_explicit(&kv_accel_gate_now, memory_order_relaxed) == KV_ACCEL_GATE_EXACT) {
        bool decided;
        if (switches_decide(b->op, b->target, &decided)) return decided;
        return false;
    }
    return kv_accel_gate_allows_keys(b->op, b->target, b->boxed_keys);
}
