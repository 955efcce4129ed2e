/* Fuzzes the parsers of the environment variables kv_init and the tuner
 * read: the first byte picks the variable, the rest is its value (one
 * byte alone: the variable unset). Each parser is checked against its
 * documented rule, written out again here:
 *   KV_REDISPATCH_GATE    "seed" | "exact", anything else rejected
 *   KV_NO_REDISPATCH      unset or "0": fast paths on; anything else off
 *   KV_ACCEL_DISABLE      comma list of metadata,to_copy,cat,group_norm
 *   KV_ACCEL_TARGET       cpu | sim | cuda | auto (unset = auto)
 *   KV_NO_DISPATCH_CACHE  unset, "" or "0": cache on; "1": off; else error
 *   KV_PERFDISPATCH_FORCE op:variant[,op:variant...] (parsed, not installed)
 *   KV_CACHING_ALLOCATOR  unset, "" or "1": cache on; "0": off; else error
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

/* Whether `name` is one whole entry of the comma list. */
static bool listed(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list;;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        if (end == NULL) return false;
        p = end + 1;
    }
}

static void check_disable(const char *v) {
    bool special[KV_ACCEL_SPECIAL_COUNT];
    const kv_status st = kv_accel_parse_disable_list(v, special);
    if (v == NULL || v[0] == '\0') {
        KV_FUZZ_CHECK(st == KV_OK, "empty list rejected");
        for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) KV_FUZZ_CHECK(special[i], "empty list disabled %d", i);
        return;
    }
    /* Valid exactly when every entry is a known name. */
    bool valid = true;
    for (const char *p = v;;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        bool known = false;
        for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) {
            const char *name = kv_accel_special_name((kv_accel_special)i);
            if (len == strlen(name) && strncmp(p, name, len) == 0) known = true;
        }
        valid = valid && known;
        if (end == NULL) break;
        p = end + 1;
    }
    if (!valid) {
        check_rejected(DISABLE, st, v);
        return;
    }
    KV_FUZZ_CHECK(st == KV_OK, "KV_ACCEL_DISABLE='%s' rejected: %s", v, kv_last_error_message());
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) {
        const char *name = kv_accel_special_name((kv_accel_special)i);
        KV_FUZZ_CHECK(special[i] == !listed(v, name), "KV_ACCEL_DISABLE='%s': %s is %s", v, name,
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
        kv_key k = KV_KEY_CPU;
        const kv_status st = kv_accel_parse_target(v, &k);
        const bool valid = v == NULL || strcmp(v, "auto") == 0 || strcmp(v, "cpu") == 0 || strcmp(v, "sim") == 0 ||
                           strcmp(v, "cuda") == 0;
        if (valid) KV_FUZZ_CHECK(st == KV_OK, "KV_ACCEL_TARGET='%s' rejected", shown);
        else check_rejected(TARGET, st, shown);
        break;
    }
    case CACHE: {
        bool on = false;
        const kv_status st = kv_dispatch_parse_cache_env(v, &on);
        const bool off = v && strcmp(v, "1") == 0;
        const bool valid = v == NULL || v[0] == '\0' || strcmp(v, "0") == 0 || off;
        if (valid) KV_FUZZ_CHECK(st == KV_OK && on == !off, "KV_NO_DISPATCH_CACHE='%s'", shown);
        else check_rejected(CACHE, st, shown);
        break;
    }
    case ALLOC: {
        bool on = false;
        const kv_status st = kv_cpu_cache_parse_env(v, &on);
        const bool off = v && strcmp(v, "0") == 0;
        const bool valid = v == NULL || v[0] == '\0' || strcmp(v, "1") == 0 || off;
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
