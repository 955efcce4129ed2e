/* The error check (expect != pass): on every path and backend an invalid
 * call must fail with exactly the expected kv_status and a non-empty
 * message.
 *
 * Paths: the full dispatcher (kv_call) on the case's device with the
 * case's layouts, then kv_redispatch straight to each available backend
 * that has a kernel for the op (inputs on that backend's device), so a
 * fast path that skips a check is caught as surely as the slow path.
 *
 * One rule for every path (issue 21): the expected error passes; a
 * decline (KV_ERR_MISSING_KERNEL where another error was expected) is
 * UNSUPPORTED, since a backend may decline any call it does not implement
 * and cannot be asked to copy every argument check of the reference to
 * decline an invalid one; any other error kind, or a success, is a FAIL
 * naming the path, both codes and the message. In a CPU case the call
 * path and the built-in backends (CPU, accel's boxing shims) share one
 * row, "error", under cpu, and each plugin backend (SIM, CUDA, a loaded
 * plugin) gets its own "error" row under its name, so a plugin's decline
 * or wrong error is filed under the plugin. A case on another device
 * (the accel twins) has one row with every path. */
#include <stdio.h>
#include <string.h>

#include "kv/backend.h"
#include "runner/check/check_util.h"
#include "runner/exec/inflight.h"

typedef enum error_outcome {
    ERROR_RAISED,   /* the expected error, with a message */
    ERROR_DECLINED, /* KV_ERR_MISSING_KERNEL where another error was expected */
    ERROR_WRONG     /* r holds the FAIL or ERROR */
} error_outcome;

/* A message for a row: never empty after the colon. */
static const char *error_message(void) {
    const char *m = kv_last_error_message();
    return m[0] ? m : "(the call set no message)";
}

/* One path. On ERROR_DECLINED `why` holds the decline's message; on
 * ERROR_RAISED `seen` the first expected message. */
static error_outcome error_path(const kv_check_ctx *ctx, const char *path, kv_device dev, kv_keyset ks,
                                kv_check_result *r, char *seen, int seencap, char *why, int whycap) {
    const kv_case *c = ctx->c;
    kv_case_inputs in;
    if (kv_case_inputs_make(c, ctx->op, dev, false, &in) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "%s: cannot build the inputs: %s", path, error_message());
        return ERROR_WRONG;
    }
    kv_case_outputs out;
    const kv_status st = kv_case_invoke(ctx->op, &in, ks, &out);
    error_outcome o = ERROR_WRONG;
    if (st == KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: expected error '%s', but the call succeeded", path,
                            kv_status_name(c->expect));
        kv_case_outputs_free(&out);
    } else if (st == KV_ERR_MISSING_KERNEL && c->expect != KV_ERR_MISSING_KERNEL) {
        snprintf(why, (size_t)whycap, "%s: declined the invalid call ('%s' expected): %s", path,
                 kv_status_name(c->expect), error_message());
        o = ERROR_DECLINED;
    } else if (st != c->expect) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: expected error '%s', got '%s': %s", path, kv_status_name(c->expect),
                            kv_status_name(st), error_message());
    } else if (kv_last_error_message()[0] == '\0') {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: failed with '%s' as expected but without a message", path,
                            kv_status_name(st));
    } else {
        o = ERROR_RAISED;
        if (seen[0] == '\0') snprintf(seen, (size_t)seencap, "%s", kv_last_error_message());
    }
    kv_case_inputs_free(&in);
    return o;
}

/* Whether backend key k belongs to a plugin (its rows go by its name). */
static bool error_is_plugin(kv_key k) {
    const kv_backend_info *b = kv_backend_find((kv_device_type)k);
    return b != NULL && b->state == KV_BACKEND_LOADED;
}

/* The row of one plugin backend's path. */
static void error_plugin_row(const kv_check_ctx *ctx, kv_key k) {
    const kv_case *c = ctx->c;
    const kv_device_type dt = (kv_device_type)k;
    kv_check_result r;
    const char *name = kv_check_backend_label(k);
    kv_check_result_begin(&r, ctx, "error", name);
    char seen[256] = "", why[KV_RESULT_MESSAGE_MAX / 2] = "";
    const kv_device dev = { dt, c->device.type == dt ? c->device.index : 0 };
    switch (error_path(ctx, name, dev, kv_keyset_of(k), &r, seen, (int)sizeof seen, why, (int)sizeof why)) {
    case ERROR_RAISED:
        kv_check_result_set(&r, KV_RESULT_PASS, "raised '%s' on %s: %s", kv_status_name(c->expect), name, seen);
        break;
    case ERROR_DECLINED: kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s", why); break;
    case ERROR_WRONG: break;
    }
    kv_check_push(ctx, &r);
}

void kv_check_error_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "error", NULL);
    if (c->expect == KV_OK) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "expect=pass: there is no error to check");
        kv_check_push(ctx, &r);
        return;
    }
    char seen[256] = "", paths[256] = "", why[KV_RESULT_MESSAGE_MAX / 2] = "", more[8];
    int npaths = 0;
    /* A decline on one built-in path does not end the row: the others must
     * still raise the right error, and a wrong one anywhere is the FAIL. */
    bool declined = false, wrong = false;
    error_outcome o = error_path(ctx, "call", c->device, 0, &r, seen, (int)sizeof seen, why, (int)sizeof why);
    if (o == ERROR_RAISED) snprintf(paths, sizeof paths, "call"), npaths++;
    declined |= o == ERROR_DECLINED;
    wrong |= o == ERROR_WRONG;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        const kv_device_type dt = (kv_device_type)k;
        if (kv_allocator_for(dt) == NULL || kv_op_entry_kind(ctx->op, (kv_key)k) != KV_ENTRY_KERNEL) continue;
        if (kv_inflight_excluded() & kv_keyset_of((kv_key)k)) continue; /* it crashed this case: the rerun */
        /* A CPU case files each plugin's path under the plugin. A case on
         * another device (accel, whose twin on the CPU does that) keeps
         * every path in its one row, as a case on a plugin's own device,
         * whose call is the plugin's path, must. */
        if (error_is_plugin((kv_key)k) && c->device.type == KV_DEVICE_CPU) {
            error_plugin_row(ctx, (kv_key)k);
            continue;
        }
        if (wrong) continue; /* the row is decided; the plugins' rows still run */
        const kv_device dev = { dt, c->device.type == dt ? c->device.index : 0 };
        o = error_path(ctx, kv_key_name((kv_key)k), dev, kv_keyset_of((kv_key)k), &r, seen, (int)sizeof seen,
                       declined ? more : why, declined ? (int)sizeof more : (int)sizeof why);
        if (o == ERROR_RAISED) {
            const size_t n = strlen(paths);
            snprintf(paths + n, sizeof paths - n, "%s%s", npaths ? ", " : "", kv_key_name((kv_key)k));
            npaths++;
        }
        declined |= o == ERROR_DECLINED;
        wrong |= o == ERROR_WRONG;
    }
    if (wrong) {
        /* r holds the FAIL or ERROR */
    } else if (declined) {
        kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s", why);
    } else {
        kv_check_result_set(&r, KV_RESULT_PASS, "raised '%s' on %d path%s (%s): %s", kv_status_name(c->expect), npaths,
                            npaths == 1 ? "" : "s", paths, seen);
    }
    kv_check_push(ctx, &r);
}
