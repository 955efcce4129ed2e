/* The accel device type: which backend is the target, the allocator that
 * puts accel storage in the target's memory, and the converters between
 * accel and target tensors.
 *
 * The accel allocator forwards to the allocator the target had when the
 * target was selected (its context), so a storage is always freed by the
 * allocator that made it even if the target changes later. Bytes are
 * counted under accel and under the target: both views of memory balance
 * when the storage goes. */
#include "boxing/boxing_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "kv/autograd.h"

/* The requested target's name, "" for the default rule. Read in messages
 * and when a plugin loads, written at start-up and by the runner between
 * cases: a lock, not atomics, as a name is several bytes. */
static pthread_mutex_t g_requested_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_requested[KV_ACCEL_TARGET_NAME_MAX];
/* Read inline by kv_accel_target_now (boxing_internal.h). */
atomic_int kv_accel_target_key = KV_KEY_CPU;

static void *accel_alloc(void *context, size_t nbytes) { return kv_allocator_alloc(context, nbytes); }

static void accel_free(void *context, void *ptr, size_t nbytes) { kv_allocator_free(context, ptr, nbytes); }

static const kv_allocator_iface g_accel_iface = { accel_alloc, accel_free };

static bool backend_registered(kv_key k) { return kv_allocator_for((kv_device_type)k) != NULL; }

kv_key kv_accel_resolve_target(const char *requested) {
    if (requested == NULL || requested[0] == '\0') {
        if (backend_registered(KV_KEY_CUDA)) return KV_KEY_CUDA;
        if (backend_registered(KV_KEY_SIM)) return KV_KEY_SIM;
        return KV_KEY_CPU;
    }
    /* By name: the built-in spellings and every loaded plugin's own. */
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        if (k == KV_KEY_ACCEL) continue;
        if (strcmp(kv_device_type_name((kv_device_type)k), requested) == 0)
            return backend_registered((kv_key)k) ? (kv_key)k : KV_KEY_NONE;
    }
    return KV_KEY_NONE;
}

kv_status kv_accel_parse_target(const char *text, char *out) {
    out[0] = '\0';
    if (text == NULL || strcmp(text, "auto") == 0) return KV_OK;
    bool ok = text[0] >= 'a' && text[0] <= 'z' && strlen(text) < KV_ACCEL_TARGET_NAME_MAX && strcmp(text, "accel") != 0;
    for (const char *p = text; ok && *p; p++)
        ok = (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-';
    if (!ok)
        return kv_error(KV_ERR_INVALID_ARG,
                        "KV_ACCEL_TARGET: expected 'auto' or a backend's name (cpu, sim, cuda, or a loaded plugin's "
                        "own name, e.g. onednn), got '%s'",
                        text);
    snprintf(out, KV_ACCEL_TARGET_NAME_MAX, "%s", text);
    return KV_OK;
}

static void install(kv_key target) {
    if (target == KV_KEY_NONE) {
        kv_allocator_install(KV_DEVICE_ACCEL, NULL, NULL);
        return;
    }
    kv_allocator_install(KV_DEVICE_ACCEL, &g_accel_iface, kv_allocator_for((kv_device_type)target));
    /* Accel memory is the target's: the host may touch it iff it may
     * touch the target's. */
    kv_device_set_host_addressable(KV_DEVICE_ACCEL, kv_device_host_addressable((kv_device_type)target));
}

kv_status kv_accel_set_requested_target(const char *requested) {
    /* A requested target that is not registered is not an error here:
     * a backend plugin may be loaded after kv_init and select it then.
     * Until it is, accel ops fail with kv_accel_target_error's reason. */
    kv_key t = kv_accel_resolve_target(requested);
    pthread_mutex_lock(&g_requested_lock);
    snprintf(g_requested, sizeof g_requested, "%s", requested ? requested : "");
    pthread_mutex_unlock(&g_requested_lock);
    atomic_store(&kv_accel_target_key, (int)t);
    install(t);
    return KV_OK;
}

kv_status kv_accel_select_target(const char *name) {
    kv_status st = kv_accel_env_init();
    if (st != KV_OK) return st;
    char requested[KV_ACCEL_TARGET_NAME_MAX];
    if (kv_accel_parse_target(name, requested) != KV_OK)
        return kv_error(KV_ERR_INVALID_ARG,
                        "kv_accel_select_target: argument 'name': expected 'auto' or a backend's name, got '%s'", name);
    if (kv_accel_resolve_target(requested) == KV_KEY_NONE)
        return kv_error(KV_ERR_DEVICE, "kv_accel_select_target: argument 'name': no backend named '%s' is registered",
                        name);
    return kv_accel_set_requested_target(requested);
}

const char *kv_accel_requested_target(char *buf, int cap) {
    pthread_mutex_lock(&g_requested_lock);
    snprintf(buf, (size_t)cap, "%s", g_requested[0] ? g_requested : "auto");
    pthread_mutex_unlock(&g_requested_lock);
    return buf;
}

kv_key kv_accel_target(void) {
    kv_accel_env_init();
    return (kv_key)atomic_load_explicit(&kv_accel_target_key, memory_order_relaxed);
}

const char *kv_accel_target_name(void) {
    kv_key t = kv_accel_target();
    return t == KV_KEY_NONE ? "none" : kv_device_type_name((kv_device_type)t);
}

kv_status kv_accel_target_error(const char *op) {
    char name[KV_ACCEL_TARGET_NAME_MAX];
    kv_accel_requested_target(name, sizeof name);
    return kv_error(KV_ERR_DEVICE,
                    "%s: the accel device has no target: KV_ACCEL_TARGET=%s but no backend named '%s' is registered "
                    "(load it, then call kv_accel_select_target)",
                    op, name, name);
}

/* ---- converters ---- */

bool kv_tensor_is_accel(const kv_tensor *t) { return t != NULL && t->device.type == KV_DEVICE_ACCEL; }

kv_tensor *kv_accel_to(const kv_tensor *t) {
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "accel_to: argument 't': NULL tensor");
        return NULL;
    }
    kv_key target = kv_accel_target();
    if (target == KV_KEY_NONE) {
        kv_accel_target_error("accel_to");
        return NULL;
    }
    if (t->device.type != KV_DEVICE_ACCEL && t->device.type != (kv_device_type)target) {
        kv_error(KV_ERR_DEVICE, "accel_to: argument 't': expected a tensor on the accel target (%s), got %s:%d",
                 kv_device_type_name((kv_device_type)target), kv_device_type_name(t->device.type), t->device.index);
        return NULL;
    }
    kv_tensor *a = kv_tensor_alias(t);
    if (a == NULL) return NULL;
    if (t->autograd != NULL) kv_autograd_share(a, t);
    if (t->device.type != KV_DEVICE_ACCEL) {
        a->keys = kv_accel_keys_from_target(t->keys, target);
        a->device = (kv_device){ KV_DEVICE_ACCEL, 0 };
    }
    return a;
}

kv_tensor *kv_accel_from(const kv_tensor *t) {
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "accel_from: argument 't': NULL tensor");
        return NULL;
    }
    kv_key target = kv_accel_target();
    if (target == KV_KEY_NONE) {
        kv_accel_target_error("accel_from");
        return NULL;
    }
    if (t->device.type != KV_DEVICE_ACCEL) {
        kv_error(KV_ERR_DEVICE, "accel_from: argument 't': expected an accel tensor, got %s:%d",
                 kv_device_type_name(t->device.type), t->device.index);
        return NULL;
    }
    return kv_accel_alias_to_target(t, target);
}
