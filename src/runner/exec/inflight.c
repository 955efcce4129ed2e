/* The kernel in flight (runner/exec/inflight.h). */
#include "runner/exec/inflight.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static kv_inflight *g_slot;
static pthread_t g_owner;
static kv_keyset g_excluded;

/* Runs around every backend kernel: keep it cheap (no locks, no calls). */
static void inflight_observe(const kv_op *op, kv_key key, bool enter) {
    kv_inflight *s = g_slot;
    if (s == NULL || !pthread_equal(pthread_self(), g_owner)) return;
    if (enter) {
        const int d = s->depth;
        if (d < KV_INFLIGHT_DEPTH) {
            s->ops[d] = op;
            s->keys[d] = (int)key;
        }
        s->depth = d + 1;
    } else if (s->depth > 0) {
        s->depth = s->depth - 1;
    }
}

void kv_inflight_attach(kv_inflight *slot) {
    g_slot = slot;
    g_owner = pthread_self();
    kv_dispatch_set_kernel_observer(slot ? inflight_observe : NULL);
    kv_inflight_reset();
}

void kv_inflight_reset(void) {
    if (g_slot == NULL) return;
    g_slot->depth = 0;
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

void kv_inflight_describe(const kv_inflight *slot, char *buf, int cap) {
    const kv_op *op;
    kv_key key;
    if (cap <= 0) return;
    buf[0] = '\0';
    if (!kv_inflight_innermost(slot, &op, &key)) return;
    char check[sizeof slot->check + 1], variant[sizeof slot->variant + 1];
    snprintf(check, sizeof check, "%.*s", (int)sizeof slot->check - 1, slot->check);
    snprintf(variant, sizeof variant, "%.*s", (int)sizeof slot->variant - 1, slot->variant);
    snprintf(buf, (size_t)cap, "the %s kernel of %s%s%s%s%s", kv_op_name(op), kv_key_name(key),
             variant[0] ? ", variant " : "", variant, check[0] ? ", check " : "", check);
}
