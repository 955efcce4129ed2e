/* Fuzzes the parsers of the environment variables kv_init and the tuner
 * read: the first byte picks the variable, the rest is its value (one
 * byte alone: the variable unset). Each parser is checked against its
 * documented rule, written out again here:
 *   KV_REDISPATCH_GATE    "seed" | "exact", anything else rejected
 *   KV_NO_REDISPATCH      unset or "0": fast paths on; anything else off
 *   KV_ACCEL_DISABLE      comma list of metadata,to_copy,cat,group_norm;
 *                         blanks around entries ignored, empty entries
 *                         skipped, no entry at all an error
 *   KV_ACCEL_TARGET       cpu | sim | cuda | auto (unset = auto)
 *   KV_NO_DISPATCH_CACHE  unset or "0": cache on; "1": off; else ("" too) error
 *   KV_PERFDISPATCH_FORCE op:variant[,op:variant...] (parsed, not installed)
 *   KV_CACHING_ALLOCATOR  unset or "1": cache on; "0": off; else ("" too) error
 * Every rejection must carry a message naming the variable. */
#include "fuzz.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "boxing/boxing_internal.h"
#include "dispatch/op_internal.h"
#include "tune/tune_internal.h"

/* New variables go at the end: the corpus picks one by its first byte. */
enum { GATE, KILL, DISABLE, TARGET, CACHE, FORCE, ALLOC, NVARS };

static const char *const g_vars[NVARS] = {
    "KV_REDISPATCH_GATE", "KV_NO_REDISPATCH", "KV_ACCEL_DISABLE",
    "KV_ACCEL_TARGET", "KV_NO_DISPATCH_CACHE", "KV_PERFDISPATCH_FORCE", "KV_CACHING_ALLOCATOR",
};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    KV_FUZZ_CHECK(kv_init() == KV_OK, "kv_init: %s", kv_last_error_message());
    return 0;
}

static void check_rejected(int var, kv_status st, const char *v) {
    KV_FUZZ_CHECK(st == KV_ERR_INVALID_ARG, "%s='%s': status %d", g_vars[var], v, (int)st);
    KV_FUZZ_CHECK(strstr(kv_last_error_message(), g_vars[var]) != NULL, "%s='%s': message '%s'", g_vars[var], v,
                  kv_last_error_message());
}

static bool blank(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

/* Calls fn on each entry of the comma list with its blanks trimmed. */
static void entries(const char *list, void (*fn)(const char *p, size_t len, void *ctx), void *ctx) {
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        const char *e = end ? end : p + strlen(p), *b = p;
        while (b < e && blank(*b)) b++;
        while (e > b && blank(e[-1])) e--;
        fn(b, (size_t)(e - b), ctx);
        if (end == NULL) return;
        p = end + 1;
    }
}

typedef struct list_state {
    const char *name; /* the entry looked for, or NULL */
    bool found, valid;
    int nonempty;
} list_state;

static void visit(const char *p, size_t len, void *ctx) {
    list_state *st = ctx;
    if (len == 0) return;
    st->nonempty++;
    if (st->name && len == strlen(st->name) && strncmp(p, st->name, len) == 0) st->found = true;
    bool known = false;
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) {
        const char *name = kv_accel_special_name((kv_accel_special)i);
        if (len == strlen(name) && strncmp(p, name, len) == 0) known = true;
    }
    if (!known) st->valid = false;
}

static void check_disable(const char *v) {
    bool special[KV_ACCEL_SPECIAL_COUNT];
    const kv_status st = kv_accel_parse_disable_list(v, special);
    if (v == NULL) {
        KV_FUZZ_CHECK(st == KV_OK, "unset rejected");
        for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) KV_FUZZ_CHECK(special[i], "unset disabled %d", i);
        return;
    }
    /* Valid exactly when there is an entry and every entry is a known name. */
    list_state all = { NULL, false, true, 0 };
    entries(v, visit, &all);
    if (!all.valid || all.nonempty == 0) {
        check_rejected(DISABLE, st, v);
        return;
    }
    KV_FUZZ_CHECK(st == KV_OK, "KV_ACCEL_DISABLE='%s' rejected: %s", v, kv_last_error_message());
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) {
        const char *name = kv_accel_special_name((kv_accel_special)i);
        list_state one = { name, false, true, 0 };
        entries(v, visit, &one);
        KV_FUZZ_CHECK(special[i] == !one.found, "KV_ACCEL_DISABLE='%s': %s is %s", v, name,
                      special[i] ? "on" : "off");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const int var = data[0] % NVARS;
    char *value = NULL;
    if (size > 1) {
        value = malloc(size);
        if (value == NULL) return 0;
        memcpy(value, data + 1, size - 1);
        value[size - 1] = '\0';
    }
    const char *v = value;
    const char *shown = v ? v : "(unset)";
    switch (var) {
    case GATE: {
        kv_accel_gate g = KV_ACCEL_GATE_EXACT;
        const int rc = kv_accel_gate_parse(v, &g);
        const bool seed = v && strcmp(v, "seed") == 0, exact = v && strcmp(v, "exact") == 0;
        KV_FUZZ_CHECK((rc == 0) == (seed || exact), "KV_REDISPATCH_GATE='%s': rc %d", shown, rc);
        if (rc == 0) KV_FUZZ_CHECK(g == (seed ? KV_ACCEL_GATE_SEED : KV_ACCEL_GATE_EXACT), "wrong gate");
        break;
    }
    case KILL: {
        const bool on = kv_accel_parse_kill_switch(v);
        KV_FUZZ_CHECK(on == (v == NULL || strcmp(v, "0") == 0), "KV_NO_REDISPATCH='%s' gives %s", shown,
                      on ? "on" : "off");
        break;
    }
    case DISABLE: check_disable(v); break;
    case TARGET: {
        char k[KV_ACCEL_TARGET_NAME_MAX];
        const kv_status st = kv_accel_parse_target(v, k);
        /* auto, or a backend name: [a-z][a-z0-9_-]*, shorter than 32, not accel. */
        bool valid = v == NULL || strcmp(v, "auto") == 0;
        if (!valid && v[0] >= 'a' && v[0] <= 'z' && strlen(v) < KV_ACCEL_TARGET_NAME_MAX && strcmp(v, "accel") != 0) {
            valid = true;
            for (const char *p = v; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')) valid = false;
        }
        if (valid) KV_FUZZ_CHECK(st == KV_OK, "KV_ACCEL_TARGET='%s' rejected", shown);
        else check_rejected(TARGET, st, shown);
        break;
    }
    case CACHE: {
        bool on = false;
        const kv_status st = kv_dispatch_parse_cache_env(v, &on);
        const bool off = v && strcmp(v, "1") == 0;
        const bool valid = v == NULL || strcmp(v, "0") == 0 || off;
        if (valid) KV_FUZZ_CHECK(st == KV_OK && on == !off, "KV_NO_DISPATCH_CACHE='%s'", shown);
        else check_rejected(CACHE, st, shown);
        break;
    }
    case ALLOC: {
        bool on = false;
        const kv_status st = kv_cpu_cache_parse_env(v, &on);
        const bool off = v && strcmp(v, "0") == 0;
        const bool valid = v == NULL || strcmp(v, "1") == 0 || off;
        if (valid) KV_FUZZ_CHECK(st == KV_OK && on == !off, "KV_CACHING_ALLOCATOR='%s'", shown);
        else check_rejected(ALLOC, st, shown);
        break;
    }
    case FORCE: {
        const kv_status st = kv_tune_force_parse(v ? v : "");
        if (st != KV_OK) check_rejected(FORCE, st, shown);
        /* Accepted: every non-blank entry has exactly one ':'. */
        else if (v)
            for (const char *p = v; *p;) {
                const char *end = strchr(p, ',');
                const size_t len = end ? (size_t)(end - p) : strlen(p);
                int colons = 0, blanks = 0;
                for (size_t i = 0; i < len; i++) {
                    colons += p[i] == ':';
                    blanks += p[i] == ' ' || (p[i] >= '\t' && p[i] <= '\r');
                }
                KV_FUZZ_CHECK(colons == 1 || (colons == 0 && (size_t)blanks == len),
                              "KV_PERFDISPATCH_FORCE='%s' accepted an entry with %d ':'", v, colons);
                p = end ? end + 1 : p + len;
            }
        break;
    }
    }
    kv_error_clear();
    free(value);
    return 0;
}
