/* The op registry: ops sorted by full name, per-op dispatch tables, the
 * global backend fallbacks, kv_dispatch_init and the op handle cache.
 *
 * Ops are allocated one by one and never freed or moved, so a kv_op
 * pointer (and a cached handle) stays valid for the life of the process.
 * Registration is for start-up and single-threaded tests; lookups and
 * calls may run on any thread once kv_init (kv/init.h) has returned. */
#include "dispatch/op_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kv/op_ids.h"

static kv_op **g_ops;  /* sorted by schema.full_name */
static int g_nops;
static int g_cap;

static kv_kernel_fn g_fallback[KV_KEY_COUNT];
static kv_keyset g_fallback_fallthrough;

atomic_bool kv_dispatch_cache_on = true;
atomic_uint_fast64_t kv_dispatch_epoch = 1;
static atomic_bool g_composed;
static atomic_uint_fast64_t g_lookups;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static kv_status g_init_status;
static char g_init_message[512];
/* ---- lookup ---- */

/* Index of `name` in g_ops, or where it would be inserted. */
static int op_search(const char *name, bool *found) {
    int lo = 0, hi = g_nops;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(g_ops[mid]->schema.full_name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    *found = false;
    return lo;
}

static kv_op *op_lookup(const char *name) {
    if (name == NULL) return NULL;
    bool found = false;
    int i = op_search(name, &found);
    return found ? g_ops[i] : NULL;
}

/* ---- tables ---- */

static void op_recompute(kv_op *op) {
    op->fallthrough = KV_KEYSET_EMPTY;
    op->kernel_keys = KV_KEYSET_EMPTY;
    for (int k = 0; k < KV_KEY_COUNT; k++) {
        kv_entry e = { KV_ENTRY_MISSING, NULL };
        if (op->direct[k]) {
            e = (kv_entry){ KV_ENTRY_KERNEL, op->direct[k] };
            op->kernel_keys |= kv_keyset_of((kv_key)k);
        } else if (kv_keyset_has(op->direct_fallthrough, (kv_key)k)) {
            e.kind = KV_ENTRY_FALLTHROUGH;
        } else if (g_fallback[k]) {
            e = (kv_entry){ KV_ENTRY_FALLBACK, g_fallback[k] };
        } else if (kv_keyset_has(g_fallback_fallthrough, (kv_key)k)) {
            e.kind = KV_ENTRY_FALLTHROUGH;
        }
        if (e.kind == KV_ENTRY_FALLTHROUGH) op->fallthrough |= kv_keyset_of((kv_key)k);
        op->table[k] = e;
    }
    /* After the table: a memo that reads the new epoch sees the new table. */
    kv_dispatch_epoch_advance();
}

void kv_dispatch_epoch_advance(void) { atomic_fetch_add_explicit(&kv_dispatch_epoch, 1, memory_order_release); }

static void recompute_all(void) {
    for (int i = 0; i < g_nops; i++) op_recompute(g_ops[i]);
}

static void op_index_args(kv_op *op) {
    op->ntensor_args = 0;
    op->device_arg = -1;
    op->arg_optional = 0;
    for (int i = 0; i < op->schema.nargs; i++) {
        const kv_type *t = &op->schema.args[i].type;
        op->arg_tag[i] = (unsigned char)kv_dispatch_tag_for(t);
        if (t->optional) op->arg_optional |= (uint64_t)1 << i;
        if (t->kind == KV_TYPE_TENSOR) op->tensor_args[op->ntensor_args++] = i;
        else if (t->kind == KV_TYPE_DEVICE && !t->is_list && op->device_arg < 0) op->device_arg = i;
    }
}

static kv_status op_add(const char *schema_text, int builtin_id, kv_op **out) {
    kv_op *op = calloc(1, sizeof *op);
    if (op == NULL) return kv_error(KV_ERR_OOM, "kv_op_register: out of memory");
    kv_status st = kv_schema_parse(schema_text, &op->schema);
    if (st != KV_OK) {
        free(op);
        return st;
    }
    bool found = false;
    int pos = op_search(op->schema.full_name, &found);
    if (found) {
        kv_status e = kv_error(KV_ERR_INVALID_ARG, "kv_op_register: op '%s' is already registered",
                               op->schema.full_name);
        free(op);
        return e;
    }
    if (g_nops == g_cap) {
        int cap = g_cap ? 2 * g_cap : 128;
        kv_op **grown = realloc(g_ops, (size_t)cap * sizeof *grown);
        if (grown == NULL) {
            free(op);
            return kv_error(KV_ERR_OOM, "kv_op_register: out of memory");
        }
        g_ops = grown;
        g_cap = cap;
    }
    op->builtin_id = builtin_id;
    op_index_args(op);
    op_recompute(op);
    memmove(&g_ops[pos + 1], &g_ops[pos], (size_t)(g_nops - pos) * sizeof *g_ops);
    g_ops[pos] = op;
    g_nops++;
    if (out) *out = op;
    return KV_OK;
}

/* ---- init ---- */

kv_status kv_dispatch_parse_cache_env(const char *value, bool *enabled) {
    /* Set but empty is a mistake (an unexpanded shell variable), not "0":
     * one exit-code policy for every variable (README "Exit codes"). */
    if (value && strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
        return kv_error(KV_ERR_INVALID_ARG, "KV_NO_DISPATCH_CACHE: expected 0 or 1, got '%s'", value);
    *enabled = !(value && strcmp(value, "1") == 0);
    return KV_OK;
}

static kv_status init_registry(void) {
    bool cache = true;
    if (kv_dispatch_parse_cache_env(getenv("KV_NO_DISPATCH_CACHE"), &cache) != KV_OK) return kv_last_error();
    atomic_store(&kv_dispatch_cache_on, cache);

    for (int id = 0; id < KV_OP_COUNT; id++) {
        kv_op *op = NULL;
        kv_status st = op_add(kv_op_schemas[id], id, &op);
        if (st != KV_OK) return st;
        /* The generated name table and the schema text must agree, or the
         * typed wrappers would resolve a different op than they describe. */
        if (strcmp(op->schema.full_name, kv_op_names[id]) != 0)
            return kv_error(KV_ERR_INTERNAL, "kv_dispatch_init: op %d: schema names '%s' but the name table says '%s'", id,
                            op->schema.full_name, kv_op_names[id]);
    }
    /* As in PyTorch: ops without a BackendSelect or ADInplaceOrView kernel
     * skip those keys. */
    g_fallback_fallthrough = kv_keyset_of(KV_KEY_BACKEND_SELECT) | kv_keyset_of(KV_KEY_AD_INPLACE_OR_VIEW);
    recompute_all();
    return KV_OK;
}

static void init_once(void) {
    g_init_status = init_registry();
    if (g_init_status != KV_OK) {
        const char *m = kv_last_error_message();
        size_t n = strlen(m);
        if (n >= sizeof g_init_message) n = sizeof g_init_message - 1;
        memcpy(g_init_message, m, n);
        g_init_message[n] = '\0';
    }
}

kv_status kv_dispatch_init(void) {
    pthread_once(&g_once, init_once);
    /* Re-raise on every call: the first failure's message was set on the
     * thread that ran the initialization, not necessarily this one. */
    if (g_init_status != KV_OK) return kv_error(g_init_status, "%s", g_init_message);
    return KV_OK;
}

void kv_dispatch_mark_composed(void) { atomic_store(&g_composed, true); }

bool kv_dispatch_composed(void) { return atomic_load(&g_composed); }

/* ---- ops ---- */

kv_status kv_op_register(const char *schema_text, const kv_op **out) {
    kv_status st = kv_dispatch_init();
    if (st != KV_OK) return st;
    kv_op *op = NULL;
    st = op_add(schema_text, -1, &op);
    if (st == KV_OK && out) *out = op;
    return st;
}

const kv_op *kv_op_find(const char *full_name) {
    if (kv_dispatch_init() != KV_OK) return NULL;
    atomic_fetch_add_explicit(&g_lookups, 1, memory_order_relaxed);
    const kv_op *op = op_lookup(full_name);
    if (op == NULL) kv_error(KV_ERR_UNKNOWN_OP, "unknown op '%s'", full_name ? full_name : "(null)");
    return op;
}

uint64_t kv_op_lookup_count(void) { return (uint64_t)atomic_load(&g_lookups); }

const kv_op *kv_op_handle(_Atomic(const kv_op *) *cache, const char *full_name) {
    if (cache && atomic_load_explicit(&kv_dispatch_cache_on, memory_order_relaxed)) {
        const kv_op *op = atomic_load_explicit(cache, memory_order_acquire);
        if (op) return op;
    }
    const kv_op *op = kv_op_find(full_name);
    /* Checked again after the lookup: the first lookup is what reads the
     * environment, and a disabled cache must stay empty. */
    if (op && cache && atomic_load_explicit(&kv_dispatch_cache_on, memory_order_relaxed))
        atomic_store_explicit(cache, op, memory_order_release);
    return op;
}

bool kv_dispatch_cache_enabled(void) {
    kv_dispatch_init();
    return atomic_load(&kv_dispatch_cache_on);
}

void kv_dispatch_cache_set_enabled(bool enabled) {
    kv_dispatch_init(); /* so the environment read at init cannot override this later */
    atomic_store(&kv_dispatch_cache_on, enabled);
}

const char *kv_op_name(const kv_op *op) { return op ? op->schema.full_name : "(null op)"; }

const kv_schema *kv_op_schema(const kv_op *op) { return op ? &op->schema : NULL; }

int kv_op_builtin_id(const kv_op *op) { return op ? op->builtin_id : -1; }

int kv_op_count(void) {
    if (kv_dispatch_init() != KV_OK) return 0;
    return g_nops;
}

const kv_op *kv_op_at(int i) {
    if (kv_dispatch_init() != KV_OK) return NULL;
    if (i < 0 || i >= g_nops) {
        kv_error(KV_ERR_INVALID_ARG, "kv_op_at: argument 'i': %d is out of range [0, %d)", i, g_nops);
        return NULL;
    }
    return g_ops[i];
}

/* ---- kernels ---- */

static kv_status check_key(const char *who, const char *op_name, kv_key key) {
    if ((unsigned)key >= (unsigned)KV_KEY_COUNT)
        return kv_error(KV_ERR_INVALID_ARG, "%s: %s: argument 'key': %d is not a dispatch key", who,
                        op_name ? op_name : "(all ops)", (int)key);
    return KV_OK;
}

static kv_status find_for_registration(const char *who, const char *op_name, kv_key key, kv_op **out) {
    kv_status st = kv_dispatch_init();
    if (st != KV_OK) return st;
    st = check_key(who, op_name, key);
    if (st != KV_OK) return st;
    *out = op_lookup(op_name);
    if (*out == NULL) return kv_error(KV_ERR_UNKNOWN_OP, "%s: unknown op '%s'", who, op_name ? op_name : "(null)");
    return KV_OK;
}

kv_status kv_register_kernel(const char *op_name, kv_key key, kv_kernel_fn fn) {
    kv_op *op = NULL;
    kv_status st = find_for_registration("kv_register_kernel", op_name, key, &op);
    if (st != KV_OK) return st;
    op->direct[key] = fn;
    /* Removing the registration removes a direct fallthrough too, so a
     * test can return a key to "whatever the fallbacks say". */
    if (fn == NULL) op->direct_fallthrough = kv_keyset_remove(op->direct_fallthrough, key);
    op_recompute(op);
    return KV_OK;
}

kv_status kv_register_fallthrough(const char *op_name, kv_key key) {
    kv_op *op = NULL;
    kv_status st = find_for_registration("kv_register_fallthrough", op_name, key, &op);
    if (st != KV_OK) return st;
    op->direct_fallthrough = kv_keyset_add(op->direct_fallthrough, key);
    op_recompute(op);
    return KV_OK;
}

void kv_register_fallback(kv_key key, kv_kernel_fn fn) {
    if (kv_dispatch_init() != KV_OK || check_key("kv_register_fallback", NULL, key) != KV_OK) return;
    g_fallback[key] = fn;
    if (fn == NULL) g_fallback_fallthrough = kv_keyset_remove(g_fallback_fallthrough, key);
    recompute_all();
}

void kv_register_fallback_fallthrough(kv_key key) {
    if (kv_dispatch_init() != KV_OK || check_key("kv_register_fallback_fallthrough", NULL, key) != KV_OK) return;
    g_fallback_fallthrough = kv_keyset_add(g_fallback_fallthrough, key);
    recompute_all();
}

kv_entry_kind kv_op_entry_kind(const kv_op *op, kv_key key) {
    if (op == NULL || (unsigned)key >= (unsigned)KV_KEY_COUNT) return KV_ENTRY_MISSING;
    return op->table[key].kind;
}

kv_kernel_fn kv_op_entry_fn(const kv_op *op, kv_key key) {
    if (op == NULL || (unsigned)key >= (unsigned)KV_KEY_COUNT) return NULL;
    return op->table[key].fn;
}

kv_keyset kv_op_fallthrough_keys(const kv_op *op) { return op ? op->fallthrough : KV_KEYSET_EMPTY; }
