/* The paths a test runs one call through, for tests that compare the
 * CPU, SIM and accel's fast (both gates) and slow paths bit for bit
 * (test_out_ops.c, test_foreach.c): the path switches, placing a host
 * tensor on a path's device, reading one back, and asserting which accel
 * path ran. Static, for one test program each; include after
 * test_util.h. */
#ifndef KV_TEST_ACCEL_PATHS_H
#define KV_TEST_ACCEL_PATHS_H

#include "kv/accel.h"
#include "kv/backend.h"
#include "kv/kv.h"

#define SIM_PATH "build/backends/libkv_sim.so"

/* Where a call runs: a backend's own tensors, or accel with its fast
 * path on or off (the kill switch) under one gate. */
typedef enum where { ON_CPU, ON_SIM, ACCEL_FAST_EXACT, ACCEL_FAST_SEED, ACCEL_SLOW, WHERE_COUNT } where;

static const char *where_name(where w) {
    switch (w) {
    case ON_CPU: return "cpu";
    case ON_SIM: return "sim";
    case ACCEL_FAST_EXACT: return "accel fast (exact gate)";
    case ACCEL_FAST_SEED: return "accel fast (seed gate)";
    case ACCEL_SLOW: return "accel slow (kill switch)";
    case WHERE_COUNT: break;
    }
    return "?";
}

/* The group setup: kvsuite with the SIM plugin, accel on its default target. */
static int setup(void **state) {
    (void)state;
    unsetenv("KV_ACCEL_TARGET");
    if (kv_init() != KV_OK || kv_backend_load(SIM_PATH) != KV_OK) {
        print_error("cannot load %s: %s\n", SIM_PATH, kv_last_error_message());
        return -1;
    }
    return 0;
}

static void enter(where w) {
    kv_accel_gate_set(w == ACCEL_FAST_SEED ? KV_ACCEL_GATE_SEED : KV_ACCEL_GATE_EXACT);
    kv_accel_redispatch_set_enabled(w != ACCEL_SLOW);
    kv_accel_counters_reset();
    kv_error_clear();
}

static void leave(void) {
    kv_accel_gate_set(KV_ACCEL_GATE_EXACT);
    kv_accel_redispatch_set_enabled(true);
}

/* The CPU tensor t (taken over) on w's device. */
static kv_tensor *place(where w, kv_tensor *t) {
    assert_non_null(t);
    if (w == ON_CPU) return t;
    kv_tensor *s = kv_backend_copy_to_device(t, (kv_device){ KV_DEVICE_SIM, 0 });
    kv_tensor_release(t);
    if (s == NULL) fail_msg("to sim: %s", kv_last_error_message());
    if (w == ON_SIM) return s;
    kv_tensor *a = kv_accel_to(s);
    kv_tensor_release(s);
    if (a == NULL) fail_msg("to accel: %s", kv_last_error_message());
    return a;
}

/* A host copy of t's logical values (any device). */
static kv_tensor *host(const kv_tensor *t) {
    kv_tensor *below = kv_tensor_is_accel(t) ? kv_accel_from(t) : (kv_tensor_retain((kv_tensor *)t), (kv_tensor *)t);
    assert_non_null(below);
    kv_tensor *h = kv_backend_copy_to_host(below);
    kv_tensor_release(below);
    if (h == NULL) fail_msg("to host: %s", kv_last_error_message());
    return h;
}

static void release_all(kv_tensor **ts, int n) {
    for (int i = 0; i < n; i++) kv_tensor_release(ts[i]);
}

static void check_ok(kv_status st, where w, const char *what) {
    if (st != KV_OK) fail_msg("%s on %s: %s", what, where_name(w), kv_last_error_message());
}

/* The path the accel call took, where it matters. */
static void assert_path(where w, const char *op) {
    if (w < ACCEL_FAST_EXACT) return;
    const kv_accel_counters c = kv_accel_counters_of(op);
    if (w == ACCEL_SLOW) {
        if (c.fast != 0 || c.slow == 0) fail_msg("%s on %s: fast %lld, slow %lld", op, where_name(w),
                                                 (long long)c.fast, (long long)c.slow);
    } else if (c.fast == 0) {
        fail_msg("%s on %s: the fast path never fired", op, where_name(w));
    }
}

#endif
