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

#include <stdatomic.h>
#include <string.h>

#include "kv/autograd.h"

static atomic_int g_requested = KV_KEY_NONE; /* KV_KEY_NONE: the default rule */
static atomic_int g_target = KV_KEY_CPU;

static void *accel_alloc(void *context, size_t nbytes) { return kv_allocator_alloc(context, nbytes); }

static void accel_free(void *context, void *ptr, size_t nbytes) { kv_allocator_free(context, ptr, nbytes); }

static const kv_allocator_iface g_accel_iface = { accel_alloc, accel_free };

static bool backend_registered(kv_key k) { return kv_allocator_for((kv_device_type)k) != NULL; }

kv_key kv_accel_resolve_target(kv_key requested) {
    if (requested == KV_KEY_NONE) {
        if (backend_registered(KV_KEY_CUDA)) return KV_KEY_CUDA;
        if (backend_registered(KV_KEY_SIM)) return KV_KEY_SIM;
        return KV_KEY_CPU;
    }
    return backend_registered(requested) ? requested : KV_KEY_NONE;
}

kv_status kv_accel_parse_target(const char *text, kv_key *out) {
    if (text == NULL || strcmp(text, "auto") == 0) *out = KV_KEY_NONE;
    else if (strcmp(text, "cpu") == 0) *out = KV_KEY_CPU;
    else if (strcmp(text, "sim") == 0) *out = KV_KEY_SIM;
    else if (strcmp(text, "cuda") == 0) *out = KV_KEY_CUDA;
    else return kv_error(KV_ERR_INVALID_ARG, "KV_ACCEL_TARGET: expected 'cpu', 'sim' or 'cuda', got '%s'", text);
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

kv_status kv_accel_set_requested_target(kv_key requested) {
    /* A requested target that is not registered is not an error here:
     * a backend plugin may be loaded after kv_init and select it then.
     * Until it is, accel ops fail with kv_accel_target_error's reason. */
    kv_key t = kv_accel_resolve_target(requested);
    atomic_store(&g_requested, (int)requested);
    atomic_store(&g_target, (int)t);
    install(t);
    return KV_OK;
}

kv_status kv_accel_select_target(const char *name) {
    kv_status st = kv_init();
    if (st != KV_OK) return st;
    kv_key requested;
    if (name == NULL) requested = KV_KEY_NONE;
    else if (kv_accel_parse_target(name, &requested) != KV_OK)
        return kv_error(KV_ERR_INVALID_ARG,
                        "kv_accel_select_target: argument 'name': expected 'cpu', 'sim', 'cuda' or 'auto', got '%s'",
                        name);
    if (kv_accel_resolve_target(requested) == KV_KEY_NONE)
        return kv_error(KV_ERR_DEVICE, "kv_accel_select_target: argument 'name': no %s backend is registered",
                        name);
    return kv_accel_set_requested_target(requested);
}

kv_key kv_accel_target(void) {
    kv_init();
    return (kv_key)atomic_load_explicit(&g_target, memory_order_relaxed);
}

kv_key kv_accel_target_now(void) { return (kv_key)atomic_load_explicit(&g_target, memory_order_relaxed); }

const char *kv_accel_target_name(void) {
    kv_key t = kv_accel_target();
    return t == KV_KEY_NONE ? "none" : kv_device_type_name((kv_device_type)t);
}

kv_status kv_accel_target_error(const char *op) {
    kv_key requested = (kv_key)atomic_load(&g_requested);
    const char *name = requested == KV_KEY_NONE ? "auto" : kv_device_type_name((kv_device_type)requested);
    return kv_error(KV_ERR_DEVICE,
                    "%s: the accel device has no target: KV_ACCEL_TARGET=%s but no %s backend is registered (load "
                    "it, then call kv_accel_select_target)",
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
