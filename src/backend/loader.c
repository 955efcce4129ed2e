/* The plugin loader: dlopen, the entry point, the ABI check, the device
 * slot, the allocator, the kernels; and the record of every attempt.
 *
 * A plugin that fails any step is skipped whole: what it had installed is
 * taken back (kernels unregistered, allocator removed, host-addressable
 * flag restored) and its library closed, so a half-loaded backend can
 * never serve a case. Loading is start-up work; the lock only keeps two
 * concurrent loads from interleaving their bookkeeping. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_internal.h"
#include "backend/fpenv.h"
#include "kv/accel.h"
#include "kv/tune.h"

typedef struct kv_loaded {
    bool used;
    kv_backend_desc desc;
    void *handle;
} kv_loaded;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static kv_loaded g_loaded[KV_DEVICE_TYPE_COUNT];
static kv_backend_info *g_records;
static int g_nrecords, g_caprecords;

const kv_backend_desc *kv_backend_desc_of(kv_device_type t) {
    if ((int)t < 0 || t >= KV_DEVICE_TYPE_COUNT || !g_loaded[t].used) return NULL;
    return &g_loaded[t].desc;
}

int kv_backend_count(void) { return g_nrecords; }

const kv_backend_info *kv_backend_at(int i) { return i >= 0 && i < g_nrecords ? &g_records[i] : NULL; }

const kv_backend_info *kv_backend_find(kv_device_type t) {
    const kv_backend_info *found = NULL;
    for (int i = 0; i < g_nrecords; i++) {
        const kv_backend_info *r = &g_records[i];
        if (r->device_type != t || r->state == KV_BACKEND_FAILED) continue;
        if (found == NULL || r->state == KV_BACKEND_LOADED) found = r;
    }
    return found;
}

bool kv_backend_available(kv_device_type t) {
    if (t == KV_DEVICE_CPU) return true;
    return kv_backend_desc_of(t) != NULL;
}

/* ---- bookkeeping ---- */

static kv_backend_info *record_new(const char *path) {
    if (g_nrecords == g_caprecords) {
        const int cap = g_caprecords ? 2 * g_caprecords : 8;
        kv_backend_info *n = realloc(g_records, (size_t)cap * sizeof *n);
        if (n == NULL) return NULL;
        g_records = n;
        g_caprecords = cap;
    }
    kv_backend_info *r = &g_records[g_nrecords++];
    memset(r, 0, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path ? path : "(null)");
    r->device_type = KV_DEVICE_TYPE_COUNT;
    r->state = KV_BACKEND_FAILED;
    return r;
}

/* Records the failure, sets the thread's error to the same line. */
static kv_status record_fail(kv_backend_info *r, kv_backend_state state, kv_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kv_status record_fail(kv_backend_info *r, kv_backend_state state, kv_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    r->state = state;
    r->status = code;
    return kv_error(code, "%s", r->message);
}

/* The canary band past the descriptor: a plugin built against a struct
 * longer by up to this much is caught (the case was 512 bytes);
 * any farther write lands in the heap and is as likely to crash the probe
 * child, which names the plugin too. */
#define LOADER_CANARY 4096
#define LOADER_CANARY_BYTE 0xA5

/* 1 + the offset of the last damaged canary byte, 0 when intact. */
static size_t canary_damage(const unsigned char *band) {
    for (size_t i = LOADER_CANARY; i > 0; i--)
        if (band[i - 1] != LOADER_CANARY_BYTE) return i;
    return 0;
}

/* The device type names plugins may claim, for messages. */
static const char *slot_name(kv_device_type t) {
    return (int)t >= 0 && t < KV_DEVICE_TYPE_COUNT ? kv_device_type_name(t) : "any plugin slot";
}

static bool is_plugin_slot(kv_device_type t) {
    switch (t) {
    case KV_DEVICE_SIM:
    case KV_DEVICE_CUDA:
    case KV_DEVICE_PLUGIN0:
    case KV_DEVICE_PLUGIN1:
    case KV_DEVICE_PLUGIN2:
    case KV_DEVICE_PLUGIN3:
        return true;
    case KV_DEVICE_CPU:
    case KV_DEVICE_ACCEL:
    case KV_DEVICE_TYPE_COUNT:
        return false;
    }
    return false;
}

static bool valid_name(const char *n) {
    if (n[0] < 'a' || n[0] > 'z') return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')) return false;
    return true;
}

static kv_device_type free_plugin_slot(void) {
    static const kv_device_type slots[] = { KV_DEVICE_PLUGIN0, KV_DEVICE_PLUGIN1, KV_DEVICE_PLUGIN2,
                                            KV_DEVICE_PLUGIN3 };
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        if (!g_loaded[slots[i]].used) return slots[i];
    return KV_DEVICE_TYPE_COUNT;
}

/* Removes every kernel registered at `key` (a failed plugin's). */
static void unregister_key(kv_key key) {
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (op && kv_op_entry_kind(op, key) == KV_ENTRY_KERNEL && kv_op_entry_fn(op, key) != NULL)
            kv_register_kernel(kv_op_name(op), key, NULL);
    }
}

/* The tuner times a backend's variants between device syncs; its hook
 * takes no argument, so one trampoline per slot. */
static void sync_slot(kv_device_type t) {
    const kv_backend_desc *d = kv_backend_desc_of(t);
    if (d != NULL && d->mem.synchronize != NULL && d->mem.synchronize(d->context) != KV_OK) kv_error_clear();
}
#define SYNC_HOOK(slot) \
    static void sync_##slot(void) { sync_slot(slot); }
SYNC_HOOK(KV_DEVICE_SIM)
SYNC_HOOK(KV_DEVICE_CUDA)
SYNC_HOOK(KV_DEVICE_PLUGIN0)
SYNC_HOOK(KV_DEVICE_PLUGIN1)
SYNC_HOOK(KV_DEVICE_PLUGIN2)
SYNC_HOOK(KV_DEVICE_PLUGIN3)

static void (*sync_hook(kv_device_type t))(void) {
    switch (t) {
    case KV_DEVICE_SIM: return sync_KV_DEVICE_SIM;
    case KV_DEVICE_CUDA: return sync_KV_DEVICE_CUDA;
    case KV_DEVICE_PLUGIN0: return sync_KV_DEVICE_PLUGIN0;
    case KV_DEVICE_PLUGIN1: return sync_KV_DEVICE_PLUGIN1;
    case KV_DEVICE_PLUGIN2: return sync_KV_DEVICE_PLUGIN2;
    case KV_DEVICE_PLUGIN3: return sync_KV_DEVICE_PLUGIN3;
    case KV_DEVICE_CPU:
    case KV_DEVICE_ACCEL:
    case KV_DEVICE_TYPE_COUNT:
        return NULL;
    }
    return NULL;
}

void kv_backend_reselect_accel(void) {
    /* What was asked for (KV_ACCEL_TARGET, or kv_accel_select_target) may
     * be the plugin that just loaded. A requested target that is not
     * loaded (KV_ACCEL_TARGET=cuda without a GPU) is no loader error:
     * accel ops then fail saying why. */
    char want[64];
    kv_accel_requested_target(want, sizeof want);
    if (kv_accel_select_target(want) != KV_OK) kv_error_clear();
    const kv_key t = kv_accel_target();
    kv_device_set_host_addressable(KV_DEVICE_ACCEL,
                                   t == KV_KEY_NONE || kv_device_host_addressable((kv_device_type)t));
}

/* ---- loading ---- */

static kv_status load_locked(kv_backend_info *r, const char *path) {
    if (path == NULL || path[0] == '\0')
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG, "backend '': no path given; skipped");
    /* The FP environment is the plugin's to leave as it found it from its
     * first instruction on: its constructors run in dlopen. */
    const kv_fpenv fpenv_before = kv_fpenv_read();
    dlerror();
    kv_backend_probe_stage("dlopen (the library's constructors)");
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG, "backend '%s': cannot load it: %s; skipped", path,
                           why ? why : "dlopen failed");
    }
    dlerror();
    void *sym = dlsym(handle, KV_BACKEND_ENTRY_NAME);
    if (sym == NULL) {
        const char *why = dlerror();
        (void)why;
        dlclose(handle);
        kv_fpenv_restore(&fpenv_before); /* its constructors ran: the load fails for the missing entry */
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s': not a kvsuite backend: it exports no '%s' function; skipped", path,
                           KV_BACKEND_ENTRY_NAME);
    }
    kv_backend_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* POSIX: a function address travels as void * */

    /* The descriptor lives in a heap block with a canary band past its
     * end: a plugin built against a longer struct (or writing past a
     * field) damages the band, not the loader's stack, and is named. */
    unsigned char *block = malloc(sizeof(kv_backend_desc) + LOADER_CANARY);
    if (block == NULL) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_OOM, "backend '%s': out of memory for its descriptor; skipped",
                           path);
    }
    memset(block, 0, sizeof(kv_backend_desc));
    memset(block + sizeof(kv_backend_desc), LOADER_CANARY_BYTE, LOADER_CANARY);
    kv_backend_desc *dp = (kv_backend_desc *)(void *)block;
    dp->host = kv_backend_host_api();
    kv_backend_probe_stage("its entry point " KV_BACKEND_ENTRY_NAME);
    const int rc = entry(dp, KV_BACKEND_ABI_VERSION);
    char fpenv_change[256] = "";
    const kv_fpenv fpenv_loaded = kv_fpenv_read();
    if (!kv_fpenv_equal(&fpenv_before, &fpenv_loaded)) {
        kv_fpenv_describe(&fpenv_before, &fpenv_loaded, fpenv_change, (int)sizeof fpenv_change);
        kv_fpenv_restore(&fpenv_before); /* before anything computes in it */
    }
    const size_t overrun = canary_damage(block + sizeof(kv_backend_desc));
    kv_backend_desc d = *dp;
    free(block);
    if (overrun > 0) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s': its entry point wrote past the end of kv_backend_desc (up to byte %zu "
                           "after its %zu bytes; built against another kv/backend.h?); skipped",
                           path, overrun, sizeof(kv_backend_desc));
    }
    if (d.abi_version != KV_BACKEND_ABI_VERSION) {
        dlclose(handle);
        if (d.abi_version == 0)
            return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                               "backend '%s': ABI version mismatch: the plugin did not state its ABI version, this "
                               "kvsuite speaks ABI %d; skipped",
                               path, KV_BACKEND_ABI_VERSION);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s': ABI version mismatch: built for ABI %d, this kvsuite speaks ABI %d; "
                           "skipped (rebuild it against this kv/backend.h)",
                           path, d.abi_version, KV_BACKEND_ABI_VERSION);
    }
    /* A string without its NUL would be read past its field (or cut
     * silently, if we terminated it here): the plugin's error, named. */
    const char *unterminated = memchr(d.name, '\0', sizeof d.name) == NULL         ? "name"
                               : memchr(d.version, '\0', sizeof d.version) == NULL ? "version"
                               : memchr(d.reason, '\0', sizeof d.reason) == NULL   ? "reason"
                                                                                   : NULL;
    if (unterminated != NULL) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s'%s%.*s%s: its descriptor's %s has no terminating NUL within its %zu bytes; "
                           "skipped",
                           path, " (", (int)sizeof d.name - 1, d.name, ")", unterminated,
                           strcmp(unterminated, "name") == 0      ? sizeof d.name
                           : strcmp(unterminated, "version") == 0 ? sizeof d.version
                                                                  : sizeof d.reason);
    }
    snprintf(r->name, sizeof r->name, "%s", d.name);
    snprintf(r->version, sizeof r->version, "%s", d.version);
    if (fpenv_change[0] != '\0') {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s' (%s): its constructors or entry point changed the floating-point "
                           "environment and did not restore it: %s (a library built with -ffast-math sets FTZ/DAZ "
                           "as it loads); skipped",
                           path, d.name, fpenv_change);
    }
    if (rc != 0) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s': its entry point failed (returned %d)%s%s; skipped", path, rc,
                           d.reason[0] ? ": " : "", d.reason);
    }
    if (d.name[0] == '\0') {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG, "backend '%s': its descriptor has no name; skipped",
                           path);
    }
    if (!valid_name(d.name)) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s': its name '%s' is not a backend name (lowercase letters, digits, '_' and "
                           "'-', starting with a letter); skipped",
                           path, d.name);
    }
    kv_device_type type = d.device_type;
    kv_device taken;
    if (type == KV_BACKEND_SLOT_ANY && kv_device_parse(d.name, &taken) == 0) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_DEVICE,
                           "backend '%s': its name '%s' is taken (by the device %s); skipped", path, d.name,
                           kv_device_type_name(taken.type));
    }
    if (type == KV_BACKEND_SLOT_ANY) {
        type = free_plugin_slot();
        if (type == KV_DEVICE_TYPE_COUNT) {
            dlclose(handle);
            return record_fail(r, KV_BACKEND_FAILED, KV_ERR_DEVICE,
                               "backend '%s' (%s): every plugin slot (plugin0..plugin3) is taken; skipped", path,
                               d.name);
        }
    } else if (!is_plugin_slot(type)) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_DEVICE,
                           "backend '%s' (%s): device type %d (%s) is not a backend slot (sim, cuda, plugin0..3 or "
                           "KV_BACKEND_SLOT_ANY); skipped",
                           path, d.name, (int)d.device_type, (int)type >= 0 && type < KV_DEVICE_TYPE_COUNT ?
                                                                   kv_device_type_name(type) : "unknown");
    }
    r->device_type = type;
    if (g_loaded[type].used) {
        dlclose(handle);
        r->device_type = KV_DEVICE_TYPE_COUNT; /* it never owned the slot */
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_DEVICE,
                           "backend '%s' (%s): device slot %s is taken by backend '%s'; skipped", path, d.name,
                           slot_name(type), g_loaded[type].desc.name);
    }
    if (!d.available) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_UNAVAILABLE, KV_ERR_DEVICE,
                           "backend '%s' (%s): unavailable: %s; skipped, its cases are UNSUPPORTED", path, d.name,
                           d.reason[0] ? d.reason : "the plugin gave no reason");
    }
    const char *missing = d.mem.alloc == NULL            ? "mem.alloc"
                          : d.mem.free == NULL           ? "mem.free"
                          : d.mem.copy_to_device == NULL ? "mem.copy_to_device"
                          : d.mem.copy_to_host == NULL   ? "mem.copy_to_host"
                          : d.register_kernels == NULL   ? "register_kernels"
                                                         : NULL;
    if (missing != NULL) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG,
                           "backend '%s' (%s): its descriptor has no %s; skipped", path, d.name, missing);
    }

    if (kv_backend_support_check(&d, path) != KV_OK) {
        dlclose(handle);
        return record_fail(r, KV_BACKEND_FAILED, KV_ERR_INVALID_ARG, "%s", kv_last_error_message());
    }
    const bool old_flag = kv_device_host_addressable(type);
    const kv_allocator_iface iface = { d.mem.alloc, d.mem.free };
    kv_device_set_host_addressable(type, d.host_addressable != 0);
    kv_allocator_install(type, &iface, d.context);
    /* A plugin slot goes by the backend's own name from here on. */
    if (type >= KV_DEVICE_PLUGIN0 && type <= KV_DEVICE_PLUGIN3) kv_key_set_plugin_name((kv_key)type, d.name);
    g_loaded[type] = (kv_loaded){ true, d, handle };
    g_loaded[type].desc.device_type = type;
    /* The staged reference by default (kv/backend.h): installed first, so
     * a fallback of the plugin's own replaces it. */
    if (!d.no_default_fallback) kv_register_fallback((kv_key)type, kv_backend_stage_reference);
    kv_backend_probe_stage("its register_kernels");
    kv_backend_scope_begin(type, d.name);
    kv_status st = d.register_kernels(d.context, type);
    const char *refused = kv_backend_scope_end();
    if (refused != NULL) st = kv_error(KV_ERR_INVALID_ARG, "%s", refused); /* whatever it returned */
    const kv_fpenv fpenv_registered = kv_fpenv_read();
    if (!kv_fpenv_equal(&fpenv_before, &fpenv_registered)) {
        kv_fpenv_describe(&fpenv_before, &fpenv_registered, fpenv_change, (int)sizeof fpenv_change);
        kv_fpenv_restore(&fpenv_before);
        if (st == KV_OK)
            st = kv_error(KV_ERR_INVALID_ARG,
                          "its register_kernels changed the floating-point environment and did not restore it: %s",
                          fpenv_change);
    }
    if (st != KV_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", kv_last_error_message());
        unregister_key((kv_key)type);
        kv_register_fallback((kv_key)type, NULL);
        kv_allocator_install(type, NULL, NULL);
        kv_device_set_host_addressable(type, old_flag);
        kv_key_set_plugin_name((kv_key)type, NULL);
        memset(&g_loaded[type], 0, sizeof g_loaded[type]);
        dlclose(handle);
        r->device_type = KV_DEVICE_TYPE_COUNT;
        return record_fail(r, KV_BACKEND_FAILED, st, "backend '%s' (%s): registering its kernels failed: %s; skipped",
                           path, d.name, why[0] ? why : kv_status_name(st));
    }
    if (d.mem.synchronize != NULL) kv_tune_set_sync((kv_key)type, sync_hook(type));
    r->state = KV_BACKEND_LOADED;
    r->status = KV_OK;
    r->message[0] = '\0';
    return KV_OK;
}

/* One load, in this process: what the probe runs in its child and what
 * the parent runs once the probe came back. */
static kv_status load_here(const char *path) {
    pthread_mutex_lock(&g_lock);
    kv_backend_info *r = record_new(path);
    if (r == NULL) {
        pthread_mutex_unlock(&g_lock);
        return kv_error(KV_ERR_OOM, "backend '%s': out of memory for its record; skipped", path ? path : "(null)");
    }
    kv_status st = load_locked(r, path);
    char message[sizeof r->message];
    snprintf(message, sizeof message, "%s", r->message);
    pthread_mutex_unlock(&g_lock);
    if (st == KV_OK) {
        kv_backend_reselect_accel();
        kv_error_clear();
    } else {
        kv_error(st, "%s", message); /* the record's line, whatever ran after it */
    }
    return st;
}

kv_status kv_backend_load(const char *path) {
    if (!kv_dispatch_composed())
        return kv_error(KV_ERR_INVALID_ARG,
                        "kv_backend_load: %s: the runtime is not initialized; call kv_init before loading a plugin "
                        "(the built-in registrations would otherwise replace the plugin's)",
                        path ? path : "(null)");
    char why[512];
    if (path != NULL && path[0] != '\0' && kv_backend_probe(path, load_here, why, sizeof why) != 0) {
        pthread_mutex_lock(&g_lock);
        kv_backend_info *r = record_new(path);
        kv_status st = KV_ERR_DEVICE;
        if (r != NULL) st = record_fail(r, KV_BACKEND_FAILED, KV_ERR_DEVICE, "backend '%s': %s; skipped", path, why);
        else st = kv_error(KV_ERR_OOM, "backend '%s': %s; skipped", path, why);
        pthread_mutex_unlock(&g_lock);
        return st;
    }
    return load_here(path);
}
