/* KV_PERFDISPATCH_FORCE: the force map, its parser and the environment
 * (kv/tune.h).
 *
 * Entries are kept by name and judged per op, when a variant set of that
 * op first dispatches after the map (or its variants) changed: an op or a
 * variant registered after the map was read can be forced, and an entry
 * naming an op that does not exist (yet) fails nothing, since no dispatch
 * can judge it. An entry whose op exists but has the named variant on no
 * backend fails that op's dispatches, naming the entry. kvrun, once every
 * backend is loaded, asks kv_tune_force_check for entries matching
 * nothing and exits 2 on one. kv_tune_force_set (the API) still checks
 * every entry at once, against what is registered when it is called.
 *
 * A map is immutable once published; replacing it swaps a pointer and
 * bumps g_tune_force_gen so every slot re-resolves. Old maps are kept,
 * since a reader may still hold one: each is allocated to its size (a few
 * bytes an entry) and goes on a list of retired maps, so it stays
 * reachable rather than leaked (the runner's tune check replaces the map
 * for every case). */
#include "tune/tune_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORCE_MAX 128

typedef struct force_entry {
    char op[2 * KV_SCHEMA_NAME_MAX];
    char variant[KV_TUNE_NAME_MAX];
} force_entry;

/* What parsing fills in. */
typedef struct force_map {
    int n;
    force_entry e[FORCE_MAX];
} force_map;

/* What readers see: exactly n entries. */
typedef struct force_published {
    struct force_published *retired; /* the next older retired map */
    int n;
    force_entry e[];
} force_published;

static _Atomic(force_published *) g_force;
static pthread_mutex_t g_retired_lock = PTHREAD_MUTEX_INITIALIZER;
static force_published *g_retired;

const char *kv_tune_force_lookup(const kv_op *op) {
    const force_published *m = atomic_load_explicit(&g_force, memory_order_acquire);
    const char *name = op ? kv_op_name(op) : NULL;
    for (int i = 0; m && name && i < m->n; i++)
        if (strcmp(m->e[i].op, name) == 0) return m->e[i].variant;
    return NULL;
}

const char *kv_tune_forced(const kv_op *op) { return kv_tune_force_lookup(op); }

int kv_tune_force_format(char *buf, int cap) {
    const force_published *m = atomic_load_explicit(&g_force, memory_order_acquire);
    int len = 0;
    if (cap > 0) buf[0] = '\0';
    for (int i = 0; m && i < m->n; i++) {
        const int room = len < cap ? cap - len : 0;
        const int k = snprintf(room > 0 ? buf + len : NULL, (size_t)room, "%s%s:%s", i ? "," : "", m->e[i].op,
                               m->e[i].variant);
        if (k > 0) len += k;
    }
    return len;
}

/* ---- what exists, for the messages ---- */

typedef struct text {
    char *p;
    size_t cap, len;
    bool full;
} text;

static bool text_put(text *t, const char *s) {
    const size_t n = strlen(s);
    if (t->full || t->len + n + 1 > t->cap) {
        t->full = true;
        return false;
    }
    memcpy(t->p + t->len, s, n + 1);
    t->len += n;
    return true;
}

static bool op_has_variants(const kv_op *op) {
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++)
        if (kv_tune_variant_count(op, (kv_key)k) > 0) return true;
    return false;
}

/* "CPU[ref, sse2] SIM[ref]" for one op. */
static void variants_text(const kv_op *op, char *buf, size_t cap) {
    text t = { buf, cap, 0, false };
    buf[0] = '\0';
    bool any = false;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        const int n = kv_tune_variant_count(op, (kv_key)k);
        if (n == 0) continue;
        if (any) text_put(&t, " ");
        text_put(&t, kv_key_name((kv_key)k));
        text_put(&t, "[");
        for (int i = 0; i < n; i++) {
            if (i) text_put(&t, ", ");
            text_put(&t, kv_tune_variant_name(op, (kv_key)k, i));
        }
        text_put(&t, "]");
        any = true;
    }
    if (!any) snprintf(buf, cap, "none: the op has no variants");
}

/* The ops with variants, as many as fit, then how many more. */
static void ops_text(char *buf, size_t cap) {
    text t = { buf, cap > 48 ? cap - 48 : cap, 0, false };
    buf[0] = '\0';
    int listed = 0, total = 0;
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (!op_has_variants(op)) continue;
        total++;
        if (t.full) continue;
        const size_t mark = t.len;
        if ((listed && !text_put(&t, ", ")) || !text_put(&t, kv_op_name(op))) {
            t.len = mark;
            buf[mark] = '\0';
            t.full = true;
            continue;
        }
        listed++;
    }
    if (listed < total)
        snprintf(buf + t.len, cap - t.len, "%s... and %d more; KV_PERFDISPATCH_FORCE=? lists them all",
                 listed ? ", " : "", total - listed);
}

/* ---- parsing ---- */

static void trim(const char **b, const char **e) {
    while (*b < *e && isspace((unsigned char)**b)) (*b)++;
    while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

static bool variant_exists(const kv_op *op, const char *name) {
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++)
        if (kv_tune_variant_find(op, (kv_key)k, name) >= 0) return true;
    return false;
}

/* strict: every op and variant must exist now (kv_tune_force_set);
 * otherwise only the grammar is checked (the environment). */
static kv_status parse_map(const char *spec, force_map *m, bool strict) {
    m->n = 0;
    const char *p = spec;
    while (*p) {
        const char *b = p, *e = p;
        while (*e && *e != ',') e++;
        p = *e ? e + 1 : e;
        trim(&b, &e);
        if (b == e) continue; /* empty entries are skipped */
        char entry[160];
        snprintf(entry, sizeof entry, "%.*s", (int)(e - b), b);
        int colons = 0;
        const char *colon = NULL;
        for (const char *q = b; q < e; q++)
            if (*q == ':') {
                colons++;
                colon = q;
            }
        if (colons != 1)
            return kv_error(KV_ERR_INVALID_ARG,
                            "KV_PERFDISPATCH_FORCE: entry '%s' is not op:variant (it has %d ':', expected exactly one)",
                            entry, colons);
        const char *ob = b, *oe = colon, *vb = colon + 1, *ve = e;
        trim(&ob, &oe);
        trim(&vb, &ve);
        char opname[2 * KV_SCHEMA_NAME_MAX], vname[64];
        snprintf(opname, sizeof opname, "%.*s", (int)(oe - ob), ob);
        snprintf(vname, sizeof vname, "%.*s", (int)(ve - vb), vb);
        if (!strict) {
            if (opname[0] == '\0' || vname[0] == '\0' || strlen(opname) != (size_t)(oe - ob) ||
                strlen(vname) >= KV_TUNE_NAME_MAX)
                return kv_error(KV_ERR_INVALID_ARG,
                                "KV_PERFDISPATCH_FORCE: entry '%s' is not op:variant (an empty or too long name)",
                                entry);
        }
        const kv_op *op = opname[0] ? kv_op_find(opname) : NULL;
        if (!strict) kv_error_clear(); /* an unknown op is judged later, not here */
        if (op == NULL && strict) {
            char ops[400];
            ops_text(ops, sizeof ops);
            return kv_error(KV_ERR_INVALID_ARG, "KV_PERFDISPATCH_FORCE: entry '%s': unknown op '%s' (ops with variants: %s)",
                            entry, opname, ops);
        }
        if (strict && (vname[0] == '\0' || !variant_exists(op, vname))) {
            char vs[300];
            variants_text(op, vs, sizeof vs);
            return kv_error(KV_ERR_INVALID_ARG, "KV_PERFDISPATCH_FORCE: entry '%s': op '%s' has no variant '%s' (variants: %s)",
                            entry, kv_op_name(op), vname, vs);
        }
        for (int i = 0; i < m->n; i++)
            if (strcmp(m->e[i].op, opname) == 0)
                return kv_error(KV_ERR_INVALID_ARG,
                                "KV_PERFDISPATCH_FORCE: entry '%s': op '%s' is already forced to '%s' by an earlier entry",
                                entry, opname, m->e[i].variant);
        if (m->n == FORCE_MAX)
            return kv_error(KV_ERR_INVALID_ARG, "KV_PERFDISPATCH_FORCE: entry '%s': more than %d entries", entry,
                            FORCE_MAX);
        snprintf(m->e[m->n].op, sizeof m->e[m->n].op, "%s", opname);
        /* Checked to fit above (lenient) or a registered name (strict). */
        memcpy(m->e[m->n].variant, vname, strlen(vname) + 1);
        m->n++;
    }
    return KV_OK;
}

kv_status kv_tune_force_parse(const char *spec) {
    force_map m;
    return parse_map(spec, &m, true);
}

static kv_status force_install(const char *spec, bool strict);

kv_status kv_tune_force_set(const char *spec) { return force_install(spec, true); }

static kv_status force_install(const char *spec, bool strict) {
    kv_status st = kv_dispatch_init();
    if (st != KV_OK) return st;
    force_map m;
    m.n = 0;
    if (spec != NULL) {
        const char *b = spec, *e = spec + strlen(spec);
        trim(&b, &e);
        if (e - b == 1 && *b == '?') {
            return kv_error(KV_ERR_INVALID_ARG,
                            "KV_PERFDISPATCH_FORCE: '?' lists the variants (kv_tune_list); it is not a force map");
        }
        st = parse_map(spec, &m, strict);
        if (st != KV_OK) return st;
    }
    force_published *p = NULL;
    if (m.n > 0) {
        p = malloc(sizeof *p + (size_t)m.n * sizeof p->e[0]);
        if (p == NULL) return kv_error(KV_ERR_OOM, "KV_PERFDISPATCH_FORCE: out of memory");
        p->retired = NULL;
        p->n = m.n;
        memcpy(p->e, m.e, (size_t)m.n * sizeof p->e[0]);
    }
    force_published *old = atomic_exchange_explicit(&g_force, p, memory_order_acq_rel);
    if (old != NULL) {
        /* A dispatching thread may still read it: retired, not freed. */
        pthread_mutex_lock(&g_retired_lock);
        old->retired = g_retired;
        g_retired = old;
        pthread_mutex_unlock(&g_retired_lock);
    }
    atomic_fetch_add(&g_tune_force_gen, 1);
    kv_tune_cache_clear();
    return KV_OK;
}

/* ---- the environment ---- */

static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;
static kv_tune_env_result g_env_result;
static kv_status g_env_code;
static char g_env_message[512];

static kv_status env_load_log(void) {
    const char *v = getenv("KV_PERFDISPATCH_LOG");
    if (v == NULL || strcmp(v, "0") == 0) return KV_OK;
    if (strcmp(v, "1") != 0)
        return kv_error(KV_ERR_INVALID_ARG, "KV_PERFDISPATCH_LOG: expected 0 or 1, got '%s'", v);
    kv_tune_log_set_enabled(true);
    return KV_OK;
}

static void env_once(void) {
    g_env_result = KV_TUNE_ENV_OK;
    kv_status st = kv_dispatch_init();
    if (st == KV_OK) st = env_load_log();
    if (st == KV_OK) st = kv_tune_config_from_env();
    if (st == KV_OK) {
        const char *v = getenv("KV_PERFDISPATCH_FORCE");
        const char *b = v ? v : "", *e = b + strlen(b);
        trim(&b, &e);
        if (e - b == 1 && *b == '?') g_env_result = KV_TUNE_ENV_LIST;
        else if (v && b == e)
            st = kv_error(KV_ERR_INVALID_ARG, "KV_PERFDISPATCH_FORCE: empty value '%s' (unset it, or give op:variant)", v);
        else if (v) st = force_install(v, false);
    }
    if (st != KV_OK) {
        g_env_result = KV_TUNE_ENV_ERROR;
        g_env_code = st;
        snprintf(g_env_message, sizeof g_env_message, "%s", kv_last_error_message());
    }
}

kv_tune_env_result kv_tune_env_load(void) {
    pthread_once(&g_env_once, env_once);
    if (g_env_result == KV_TUNE_ENV_ERROR) kv_error(g_env_code, "%s", g_env_message);
    return g_env_result;
}

static pthread_once_t g_list_once = PTHREAD_ONCE_INIT;
static void list_once(void) {
    kv_tune_list(stdout);
    fflush(stdout);
}

_Atomic bool g_tune_env_ok;

kv_status kv_tune_env_ready(void) {
    if (atomic_load_explicit(&g_tune_env_ok, memory_order_acquire)) return KV_OK;
    switch (kv_tune_env_load()) {
    case KV_TUNE_ENV_OK: break;
    case KV_TUNE_ENV_ERROR: return g_env_code; /* raised again on every call: never set ok */
    case KV_TUNE_ENV_LIST:
        /* "?" inside a program that did not ask (kvrun lists and exits
         * before dispatching): list once and carry on unforced. A library
         * never ends its caller's process. */
        pthread_once(&g_list_once, list_once);
        break;
    }
    /* Both once-routines have returned on this thread, so whatever they
     * wrote happens before a later acquire load that sees the flag. */
    atomic_store_explicit(&g_tune_env_ok, true, memory_order_release);
    return KV_OK;
}

/* ---- judging entries ---- */

int kv_tune_force_resolve(const tune_slot *s, int n) {
    const char *name = kv_tune_force_lookup(s->op);
    if (name == NULL) return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(s->v[i].name, name) == 0) return i;
    /* Another backend of the op has it: not forced on this one. */
    return variant_exists(s->op, name) ? -1 : TUNE_FORCE_ERROR;
}

kv_status kv_tune_force_error(const kv_op *op) {
    const char *name = kv_tune_force_lookup(op);
    char vs[300];
    variants_text(op, vs, sizeof vs);
    return kv_error(KV_ERR_INVALID_ARG, "KV_PERFDISPATCH_FORCE: entry '%s:%s': op '%s' has no variant '%s' (variants: %s)",
                    kv_op_name(op), name ? name : "?", kv_op_name(op), name ? name : "?", vs);
}

kv_status kv_tune_force_check(void) {
    const force_published *m = atomic_load_explicit(&g_force, memory_order_acquire);
    for (int i = 0; m && i < m->n; i++) {
        const kv_op *op = kv_op_find(m->e[i].op);
        if (op == NULL) {
            char ops[400];
            ops_text(ops, sizeof ops);
            return kv_error(KV_ERR_INVALID_ARG,
                            "KV_PERFDISPATCH_FORCE: entry '%s:%s': unknown op '%s' (ops with variants: %s)",
                            m->e[i].op, m->e[i].variant, m->e[i].op, ops);
        }
        if (!variant_exists(op, m->e[i].variant)) {
            char vs[300];
            variants_text(op, vs, sizeof vs);
            return kv_error(KV_ERR_INVALID_ARG,
                            "KV_PERFDISPATCH_FORCE: entry '%s:%s': op '%s' has no variant '%s' (variants: %s)",
                            m->e[i].op, m->e[i].variant, m->e[i].op, m->e[i].variant, vs);
        }
    }
    return KV_OK;
}
