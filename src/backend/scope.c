/* What a plugin may register where (kv/backend.h, "Registration scope").
 *
 * The host table's registration entries are these wrappers, not the
 * dispatcher's functions: a plugin may register kernels, a fallback and
 * perf_dispatch variants only at its own backend key (and variants at the
 * CPU key named after it, below), and only while the loader is running its
 * register_kernels. Anything else (a "fix" of the
 * CPU's mul.Tensor, a kernel at an Autograd key) would change what every
 * other backend computes, and its failures would land in rows that name
 * the CPU. The first refusal is kept and the loader turns it into the
 * load's ERROR, naming the plugin, the op and the key; a refused call
 * also returns an error to the plugin, so one that checks stops early. */
#include <stdio.h>
#include <string.h>

#include "backend/backend_internal.h"
#include "kv/tune.h"

/* The plugin being loaded: set by the loader around register_kernels
 * (loading is single threaded, under the loader's lock). */
static struct {
    bool active;
    kv_key key;
    char name[KV_BACKEND_NAME_MAX];
    char refusal[320];
} g_scope;

void kv_backend_scope_begin(kv_device_type type, const char *name) {
    g_scope.active = true;
    g_scope.key = (kv_key)type;
    snprintf(g_scope.name, sizeof g_scope.name, "%s", name);
    g_scope.refusal[0] = '\0';
}

const char *kv_backend_scope_end(void) {
    g_scope.active = false;
    return g_scope.refusal[0] ? g_scope.refusal : NULL;
}

/* Whether `what` of `op` at `key` is allowed; otherwise records the
 * refusal (the first one) and sets the thread's error. */
static bool scope_allows(const char *what, const char *op, kv_key key) {
    if (g_scope.active && key == g_scope.key) return true;
    char text[sizeof g_scope.refusal];
    if (!g_scope.active)
        snprintf(text, sizeof text,
                 "a plugin registered %s%s%s at key %s outside its register_kernels (registration is load-time work)",
                 what, op ? " for " : "", op ? op : "", kv_key_name(key));
    else
        snprintf(text, sizeof text,
                 "plugin '%s' registered %s%s%s at key %s, which is not its own (%s); a plugin may register only "
                 "at its own key%s",
                 g_scope.name, what, op ? " for " : "", op ? op : "", kv_key_name(key), kv_key_name(g_scope.key),
                 key == KV_KEY_CPU && strstr(what, "variant") != NULL
                     ? " (and variants at the CPU key named after it: its name, or its name and '_...')"
                     : "");
    if (g_scope.refusal[0] == '\0') snprintf(g_scope.refusal, sizeof g_scope.refusal, "%s", text);
    kv_error(KV_ERR_INVALID_ARG, "%s", text);
    return false;
}

kv_status kv_backend_scope_register_kernel(const char *op_name, kv_key key, kv_kernel_fn fn) {
    if (!scope_allows("a kernel", op_name ? op_name : "(null)", key)) return KV_ERR_INVALID_ARG;
    return kv_register_kernel(op_name, key, fn);
}

void kv_backend_scope_register_fallback(kv_key key, kv_kernel_fn fn) {
    if (scope_allows("a backend fallback", NULL, key)) kv_register_fallback(key, fn);
}

/* The one foreign key the ABI offers: a variant at the CPU key, which is
 * how generated kernels are tested against the CPU's own (docs/
 * generated-kernels.md). Its name must be the plugin's name or start with
 * it and '_' ("gen", "gen_v2"), so every row it affects,
 * variants:CPU/<name>, names the plugin. Variant names have no '-', so a
 * '-' of the plugin's name is '_' in the variant's ("my-npu": "my_npu_v2"). */
static bool cpu_variant_named_for_plugin(kv_key backend, const char *name) {
    if (!g_scope.active || backend != KV_KEY_CPU || name == NULL) return false;
    size_t i = 0;
    for (; g_scope.name[i] != '\0'; i++)
        if (name[i] != g_scope.name[i] && !(g_scope.name[i] == '-' && name[i] == '_')) return false;
    return name[i] == '\0' || name[i] == '_';
}

kv_status kv_backend_scope_register_variant(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                            bool (*pred)(const kv_op *op, const kv_stack *stack)) {
    const bool guest = cpu_variant_named_for_plugin(backend, name);
    if (!guest && !scope_allows("a perf_dispatch variant", op_name ? op_name : "(null)", backend))
        return KV_ERR_INVALID_ARG;
    const kv_status st = kv_tune_register_variant(op_name, backend, name, fn, pred);
    /* Its rows are its own: the CPU's untimed choice passes over it. */
    return st == KV_OK && guest ? kv_tune_variant_mark_guest(op_name, backend, name) : st;
}
