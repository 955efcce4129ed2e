/* The kernel in flight (runner/exec/inflight.h). */
#include "runner/exec/inflight.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kv/backend.h"
#include "backend/fpenv.h"
#include "runner/exec/sigstate.h"

static kv_inflight *g_slot;
static pthread_t g_owner;
static kv_keyset g_excluded;
/* The FP environment at each kernel's entry, and the first kernel that
 * left it changed (worker-local: only this process reads it). */
static kv_fpenv g_fpenv_at[KV_INFLIGHT_DEPTH];
static char g_fpenv_violation[640];
static kv_key g_fpenv_key;
/* Signal handlers and mask (runner/exec/sigstate.h), read around the
 * first call of each op on each plugin backend in this worker: reading
 * them costs system calls, so not around every call; a vendor runtime
 * that installs a handler does so when it starts, on a first call. */
#define INFLIGHT_SIG_OPS 4096 /* builtin op ids checked; past it, none */
static kv_keyset g_plugin_keys;
static unsigned char g_sig_seen[KV_BACKEND_KEY_COUNT][INFLIGHT_SIG_OPS];
static int g_sig_depth = -1;
static kv_sigstate g_sig_before;

/* A kernel returned with another FP environment than it got: note the
 * first such kernel and put the environment back, so that nothing that
 * runs after it computes in the wrong mode and gets blamed. */
static void inflight_fpenv_changed(const kv_op *op, kv_key key, const kv_fpenv *before, const kv_fpenv *after) {
    if (g_fpenv_violation[0] == '\0') {
        char what[256];
        kv_fpenv_describe(before, after, what, (int)sizeof what);
        snprintf(g_fpenv_violation, sizeof g_fpenv_violation,
                 "the %s kernel of %s changed the floating-point environment and did not restore it: %s (a kernel "
                 "must leave rounding mode, FTZ/DAZ and exception masks as it found them)",
                 kv_op_name(op), kv_key_name(key), what);
        g_fpenv_key = key;
    }
    kv_fpenv_restore(before);
}

/* A plugin kernel left a signal handler or the mask changed: noted like
 * an FP environment change (the same slot), and put back. */
static void inflight_signals_check(const kv_op *op, kv_key key) {
    char what[160];
    if (kv_sigstate_check_restore(&g_sig_before, what, (int)sizeof what) || g_fpenv_violation[0] != '\0') return;
    snprintf(g_fpenv_violation, sizeof g_fpenv_violation,
             "the %s kernel of %s changed %s and did not restore it (a kernel must leave signal handlers and the "
             "signal mask as it found them)",
             kv_op_name(op), kv_key_name(key), what);
    g_fpenv_key = key;
}

static bool inflight_signals_first_call(const kv_op *op, kv_key key) {
    if ((int)key < 0 || key >= KV_BACKEND_KEY_COUNT || !(g_plugin_keys & kv_keyset_of(key))) return false;
    const int id = kv_op_builtin_id(op);
    if (id < 0 || id >= INFLIGHT_SIG_OPS || g_sig_seen[key][id]) return false;
    g_sig_seen[key][id] = 1;
    return true;
}

/* Runs around every backend kernel: keep it cheap (no locks; the FP
 * environment reads are a few register reads). */
static void inflight_observe(const kv_op *op, kv_key key, bool enter) {
    kv_inflight *s = g_slot;
    if (s == NULL || !pthread_equal(pthread_self(), g_owner)) return;
    if (enter) {
        const int d = s->depth;
        if (d < KV_INFLIGHT_DEPTH) {
            s->ops[d] = op;
            s->keys[d] = (int)key;
            g_fpenv_at[d] = kv_fpenv_read();
        }
        if (g_sig_depth < 0 && inflight_signals_first_call(op, key)) {
            kv_sigstate_read(&g_sig_before);
            g_sig_depth = d;
        }
        s->depth = d + 1;
    } else if (s->depth > 0) {
        const int d = s->depth - 1;
        if (d < KV_INFLIGHT_DEPTH) {
            const kv_fpenv now = kv_fpenv_read();
            if (!kv_fpenv_equal(&now, &g_fpenv_at[d])) inflight_fpenv_changed(op, key, &g_fpenv_at[d], &now);
        }
        if (d == g_sig_depth) {
            inflight_signals_check(op, key);
            g_sig_depth = -1;
        }
        s->depth = d;
    }
}

bool kv_inflight_take_fpenv_violation(char *buf, int cap, kv_key *key) {
    if (g_fpenv_violation[0] == '\0') return false;
    if (cap > 0) snprintf(buf, (size_t)cap, "%s", g_fpenv_violation);
    if (key != NULL) *key = g_fpenv_key;
    g_fpenv_violation[0] = '\0';
    return true;
}

/* Around every plugin mem op libkv calls (kv/backend.h). Nested mem ops
 * do not happen (a copy calls no other copy), so one slot is enough. */
static void inflight_observe_mem(kv_device_type t, kv_backend_mem_op op, bool enter) {
    kv_inflight *s = g_slot;
    if (s == NULL || !pthread_equal(pthread_self(), g_owner)) return;
    if (enter) {
        s->mem_key = (int)t;
        s->mem_op = (int)op;
    } else {
        s->mem_op = KV_BACKEND_MEM_NONE;
    }
}

void kv_inflight_attach(kv_inflight *slot) {
    g_slot = slot;
    g_owner = pthread_self();
    g_plugin_keys = 0;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++)
        if (k != KV_KEY_CPU && k != KV_KEY_ACCEL && kv_backend_available((kv_device_type)k))
            g_plugin_keys |= kv_keyset_of((kv_key)k);
    memset(g_sig_seen, 0, sizeof g_sig_seen);
    g_sig_depth = -1;
    kv_dispatch_set_kernel_observer(slot ? inflight_observe : NULL);
    kv_backend_set_mem_observer(slot ? inflight_observe_mem : NULL);
    kv_inflight_reset();
}

void kv_inflight_reset(void) {
    if (g_slot == NULL) return;
    g_slot->depth = 0;
    g_sig_depth = -1;
    g_slot->mem_op = KV_BACKEND_MEM_NONE;
    g_slot->vm_mib_at_death = 0;
    g_slot->check[0] = '\0';
    g_slot->variant[0] = '\0';
}

void kv_inflight_set_check(const char *check) {
    if (g_slot != NULL) snprintf(g_slot->check, sizeof g_slot->check, "%s", check ? check : "");
}

void kv_inflight_set_variant(const char *variant) {
    if (g_slot != NULL) snprintf(g_slot->variant, sizeof g_slot->variant, "%s", variant ? variant : "");
}

kv_keyset kv_inflight_excluded(void) { return g_excluded; }
void kv_inflight_set_excluded(kv_keyset ks) { g_excluded = ks; }

bool kv_inflight_innermost(const kv_inflight *slot, const kv_op **op, kv_key *key) {
    if (slot == NULL) return false;
    int d = slot->depth;
    if (d <= 0) return false;
    if (d > KV_INFLIGHT_DEPTH) d = KV_INFLIGHT_DEPTH;
    const kv_op *o = slot->ops[d - 1];
    const int k = slot->keys[d - 1];
    if (k < 0 || k >= KV_BACKEND_KEY_COUNT) return false;
    /* A pointer the worker wrote: use it only if it is one of ours. */
    for (int i = 0; i < kv_op_count(); i++) {
        if (kv_op_at(i) == o) {
            *op = o;
            *key = (kv_key)k;
            return true;
        }
    }
    return false;
}

bool kv_inflight_mem(const kv_inflight *slot, kv_key *key) {
    if (slot == NULL) return false;
    const int op = slot->mem_op, k = slot->mem_key;
    if (op <= KV_BACKEND_MEM_NONE || op > KV_BACKEND_MEM_SYNCHRONIZE || k < 0 || k >= KV_BACKEND_KEY_COUNT)
        return false;
    *key = (kv_key)k;
    return true;
}

void kv_inflight_describe(const kv_inflight *slot, char *buf, int cap) {
    const kv_op *op;
    kv_key key, mkey;
    if (cap <= 0) return;
    buf[0] = '\0';
    const bool kernel = kv_inflight_innermost(slot, &op, &key);
    const bool mem = kv_inflight_mem(slot, &mkey);
    if (!kernel && !mem) return;
    char check[sizeof slot->check + 1], variant[sizeof slot->variant + 1];
    snprintf(check, sizeof check, "%.*s", (int)sizeof slot->check - 1, slot->check);
    snprintf(variant, sizeof variant, "%.*s", (int)sizeof slot->variant - 1, slot->variant);
    char kern[160] = "";
    if (kernel)
        snprintf(kern, sizeof kern, "the %s kernel of %s%s%s", kv_op_name(op), kv_key_name(key),
                 variant[0] ? ", variant " : "", variant);
    if (mem)
        snprintf(buf, (size_t)cap, "the %s mem op of %s (%s%s)%s%s", kv_backend_mem_op_name((kv_backend_mem_op)slot->mem_op),
                 kv_key_name(mkey), kernel ? "inside " : "outside any kernel", kern, check[0] ? ", check " : "",
                 check);
    else
        snprintf(buf, (size_t)cap, "%s%s%s", kern, check[0] ? ", check " : "", check);
}
