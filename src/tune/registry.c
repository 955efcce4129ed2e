/* The variant registry: one slot per (op, backend) with a variant set,
 * discovery and direct calls (kv/tune.h).
 *
 * Slots are allocated once and never freed or moved, so the dispatcher
 * can hold a pointer without locking; unregistering only empties a slot.
 * Builtin ops find their slot through a table indexed by op id and
 * backend; ops registered at run time (tests) through a short list. */
#include "tune/tune_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "kv/op_ids.h"

static _Atomic(tune_slot *) g_builtin[KV_OP_COUNT][KV_BACKEND_KEY_COUNT];
static _Atomic(tune_slot *) g_all; /* every slot, newest first */
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;

tune_slot *kv_tune_slot_first(void) { return atomic_load_explicit(&g_all, memory_order_acquire); }

tune_slot *kv_tune_slot_find(const kv_op *op, kv_key key) {
    if (op == NULL || (unsigned)key >= (unsigned)KV_BACKEND_KEY_COUNT) return NULL;
    const int id = kv_op_builtin_id(op);
    if (id >= 0 && id < KV_OP_COUNT) return atomic_load_explicit(&g_builtin[id][key], memory_order_acquire);
    for (tune_slot *s = kv_tune_slot_first(); s; s = s->next)
        if (s->op == op && s->key == key) return s;
    return NULL;
}

static tune_slot *slot_create(const kv_op *op, kv_key key) {
    tune_slot *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->op = op;
    s->key = key;
    atomic_init(&s->forced, -1);
    atomic_init(&s->cfg, kv_tune_op_config_lookup(op));
    atomic_init(&s->force_gen, UINT32_MAX);
    kv_tune_geometry_plan(op, &s->plan_tensors, &s->plan_nargs);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    s->next = atomic_load(&g_all);
    atomic_store_explicit(&g_all, s, memory_order_release);
    const int id = kv_op_builtin_id(op);
    if (id >= 0 && id < KV_OP_COUNT) atomic_store_explicit(&g_builtin[id][key], s, memory_order_release);
    return s;
}

static bool name_ok(const char *name) {
    if (name == NULL || name[0] == '\0' || strlen(name) >= KV_TUNE_NAME_MAX) return false;
    for (const char *p = name; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_') return false;
    return true;
}

/* Non-tensor argument types: what "*" and "*ints" select. */
static bool arg_is_value(const kv_arg *a) { return a->type.kind != KV_TYPE_TENSOR; }
static bool arg_is_shaping(const kv_arg *a) {
    return arg_is_value(a) && !(a->type.kind == KV_TYPE_SCALAR && !a->type.is_list) &&
           !(a->type.kind == KV_TYPE_FLOAT && !a->type.is_list);
}

/* `depends_on` ("dim,keepdim", "*", "*ints", NULL) as an argument mask. */
static kv_status depends_mask(const kv_op *op, const char *op_name, const char *depends_on, uint32_t *out) {
    *out = 0;
    if (depends_on == NULL) return KV_OK;
    const kv_schema *s = kv_op_schema(op);
    const char *p = depends_on;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = p;
        while (*e && *e != ',' && *e != ' ') e++;
        if (e == p) break;
        const size_t n = (size_t)(e - p);
        bool found = false;
        for (int i = 0; i < s->nargs && i < 32; i++) {
            const kv_arg *a = &s->args[i];
            const bool all = n == 1 && p[0] == '*', ints = n == 5 && strncmp(p, "*ints", 5) == 0;
            const bool named = strlen(a->name) == n && strncmp(a->name, p, n) == 0;
            if ((all && arg_is_value(a)) || (ints && arg_is_shaping(a)) || (named && arg_is_value(a))) {
                *out |= (uint32_t)1 << i;
                found = true;
            } else if (all || ints) {
                found = true;
            }
        }
        if (!found)
            return kv_error(KV_ERR_INVALID_ARG,
                            "kv_tune_register_variant: %s: argument 'depends_on': '%.*s' is not a non-tensor "
                            "argument of %s",
                            op_name, (int)n, p, s->full_name);
        p = e;
    }
    return KV_OK;
}

uint32_t kv_tune_op_geo_mask(const kv_op *op) {
    uint32_t m = 0;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        const tune_slot *s = kv_tune_slot_find(op, (kv_key)k);
        if (s) m |= atomic_load_explicit(&s->geo_mask, memory_order_relaxed);
    }
    return m;
}

kv_status kv_tune_variant_mark_guest(const char *op_name, kv_key backend, const char *name) {
    const kv_op *op = kv_op_find(op_name);
    kv_status st = kv_error(KV_ERR_INVALID_ARG, "kv_tune_variant_mark_guest: %s has no variant '%s' at %s",
                            op_name ? op_name : "(null)", name ? name : "(null)",
                            kv_key_is_backend(backend) ? kv_key_name(backend) : "(not a backend key)");
    pthread_mutex_lock(&g_reg_lock);
    tune_slot *s = op && kv_key_is_backend(backend) && name ? kv_tune_slot_find(op, backend) : NULL;
    const int n = s ? atomic_load(&s->n) : 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(s->v[i].name, name) == 0) {
            s->v[i].guest = true;
            kv_error_clear();
            st = KV_OK;
        }
    }
    pthread_mutex_unlock(&g_reg_lock);
    return st;
}

kv_status kv_tune_register_variant(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                   kv_tune_pred_fn pred) {
    return kv_tune_register_variant_args(op_name, backend, name, fn, pred, NULL);
}

kv_status kv_tune_register_variant_args(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                        kv_tune_pred_fn pred, const char *depends_on) {
    const char *who = "kv_tune_register_variant";
    const kv_op *op = kv_op_find(op_name);
    if (op == NULL) return kv_error(KV_ERR_UNKNOWN_OP, "%s: unknown op '%s'", who, op_name ? op_name : "(null)");
    uint32_t depends = 0;
    kv_status dst = depends_mask(op, op_name, depends_on, &depends);
    if (dst != KV_OK) return dst;
    if (!kv_key_is_backend(backend))
        return kv_error(KV_ERR_INVALID_ARG, "%s: %s: argument 'backend': %s is not a backend key", who, op_name,
                        (unsigned)backend < (unsigned)KV_KEY_COUNT ? kv_key_name(backend) : "(not a key)");
    if (fn == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: %s: argument 'fn': NULL kernel", who, op_name);
    if (!name_ok(name))
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: %s: argument 'name': '%s' is not a variant name ([A-Za-z0-9_]+, at most %d characters)",
                        who, op_name, name ? name : "(null)", KV_TUNE_NAME_MAX - 1);
    pthread_mutex_lock(&g_reg_lock);
    kv_status st = KV_OK;
    tune_slot *s = kv_tune_slot_find(op, backend);
    if (s == NULL && (s = slot_create(op, backend)) == NULL) {
        st = kv_error(KV_ERR_OOM, "%s: %s: out of memory", who, op_name);
        goto done;
    }
    const int n = atomic_load(&s->n);
    for (int i = 0; i < n; i++) {
        if (strcmp(s->v[i].name, name) == 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "%s: %s: variant '%s' of %s is already registered", who, op_name, name,
                          kv_key_name(backend));
            goto done;
        }
    }
    if (n >= KV_TUNE_MAX_VARIANTS) {
        st = kv_error(KV_ERR_INVALID_ARG, "%s: %s: %s already has %d variants, the most there can be", who, op_name,
                      kv_key_name(backend), KV_TUNE_MAX_VARIANTS);
        goto done;
    }
    tune_variant *v = &s->v[n];
    memset(v, 0, sizeof *v);
    memcpy(v->name, name, strlen(name) + 1);
    v->fn = fn;
    v->pred = pred;
    v->depends = depends;
    atomic_fetch_or(&s->geo_mask, depends);
    atomic_store_explicit(&s->n, n + 1, memory_order_release);
    /* A new variant changes what "compatible" means for every geometry. */
    atomic_fetch_add(&g_tune_gen, 1);
    atomic_fetch_add(&g_tune_force_gen, 1);
    if (kv_op_entry_fn(op, backend) != kv_tune_dispatch_kernel)
        st = kv_register_kernel(op_name, backend, kv_tune_dispatch_kernel);
done:
    pthread_mutex_unlock(&g_reg_lock);
    return st;
}

kv_status kv_tune_unregister_all(const char *op_name, kv_key backend) {
    const kv_op *op = kv_op_find(op_name);
    if (op == NULL)
        return kv_error(KV_ERR_UNKNOWN_OP, "kv_tune_unregister_all: unknown op '%s'", op_name ? op_name : "(null)");
    pthread_mutex_lock(&g_reg_lock);
    tune_slot *s = kv_tune_slot_find(op, backend);
    kv_status st = KV_OK;
    if (s != NULL) {
        atomic_store(&s->n, 0);
        atomic_store(&s->geo_mask, 0);
        atomic_fetch_add(&g_tune_gen, 1);
        atomic_fetch_add(&g_tune_force_gen, 1);
        if (kv_op_entry_fn(op, backend) == kv_tune_dispatch_kernel) st = kv_register_kernel(op_name, backend, NULL);
    }
    pthread_mutex_unlock(&g_reg_lock);
    return st;
}

/* ---- discovery ---- */

int kv_tune_variant_count(const kv_op *op, kv_key backend) {
    tune_slot *s = kv_tune_slot_find(op, backend);
    return s ? atomic_load_explicit(&s->n, memory_order_acquire) : 0;
}

const char *kv_tune_variant_name(const kv_op *op, kv_key backend, int i) {
    tune_slot *s = kv_tune_slot_find(op, backend);
    if (s == NULL || i < 0 || i >= atomic_load_explicit(&s->n, memory_order_acquire)) return NULL;
    return s->v[i].name;
}

int kv_tune_variant_find(const kv_op *op, kv_key backend, const char *name) {
    tune_slot *s = kv_tune_slot_find(op, backend);
    if (s == NULL || name == NULL) return -1;
    const int n = atomic_load_explicit(&s->n, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(s->v[i].name, name) == 0) return i;
    return -1;
}

bool kv_tune_variant_compatible(const kv_op *op, kv_key backend, int i, const kv_stack *stack) {
    tune_slot *s = kv_tune_slot_find(op, backend);
    if (s == NULL || stack == NULL || i < 0 || i >= atomic_load_explicit(&s->n, memory_order_acquire)) return false;
    return s->v[i].pred == NULL || s->v[i].pred(op, stack);
}

bool kv_tune_is_dispatching(const kv_op *op, kv_key backend) {
    return kv_tune_variant_count(op, backend) > 0 && kv_op_entry_kind(op, backend) == KV_ENTRY_KERNEL &&
           kv_op_entry_fn(op, backend) == kv_tune_dispatch_kernel;
}

void kv_tune_list(FILE *out) {
    if (kv_dispatch_init() != KV_OK) {
        fprintf(out, "perf_dispatch: %s\n", kv_last_error_message());
        return;
    }
    /* kv_op_at is sorted by name, which makes the listing stable. */
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        bool any = false;
        for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
            const int n = kv_tune_variant_count(op, (kv_key)k);
            if (n == 0) continue;
            if (any) fprintf(out, " %s[", kv_key_name((kv_key)k));
            else fprintf(out, "%s: %s[", kv_op_name(op), kv_key_name((kv_key)k));
            for (int v = 0; v < n; v++) fprintf(out, "%s%s", v ? ", " : "", kv_tune_variant_name(op, (kv_key)k, v));
            fputc(']', out);
            any = true;
        }
        if (any) fputc('\n', out);
    }
}

kv_status kv_tune_call_variant(const kv_op *op, kv_key backend, const char *name, kv_stack *stack) {
    if (op == NULL) return kv_error(KV_ERR_INVALID_ARG, "kv_tune_call_variant: argument 'op': is NULL");
    if (stack == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: kv_tune_call_variant: the stack is NULL", kv_op_name(op));
    tune_slot *s = kv_tune_slot_find(op, backend);
    const int i = kv_tune_variant_find(op, backend, name);
    if (s == NULL || i < 0)
        return kv_error(KV_ERR_INVALID_ARG, "%s: %s has no variant '%s'", kv_op_name(op),
                        kv_key_is_backend(backend) ? kv_key_name(backend) : "(not a backend)", name ? name : "(null)");
    kv_status st;
    if (!kv_tune_run_as_hit(s, i, kv_keyset_of(backend), stack, &st))
        return kv_error(KV_ERR_INVALID_ARG, "%s: variant '%s' of %s is not compatible with this call", kv_op_name(op),
                        s->v[i].name, kv_key_name(backend));
    return st;
}
