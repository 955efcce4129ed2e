/* The error check (expect != pass): on every path and backend the call
 * must fail with exactly the expected kv_status and a non-empty message.
 *
 * Paths: the full dispatcher (kv_call) on the case's device with the
 * case's layouts, then kv_redispatch straight to each available backend
 * that has a kernel for the op (inputs on that backend's device), so a
 * fast path that skips a check is caught as surely as the slow path. A
 * path that succeeds, or fails with another code, is a FAIL naming the
 * path, both codes and the message. One result row, "error". */
#include <stdio.h>
#include <string.h>

#include "runner/check/check_util.h"
#include "runner/exec/inflight.h"

/* One path; true when it failed exactly as expected. */
static bool error_path(const kv_check_ctx *ctx, const char *path, kv_device dev, kv_keyset ks, kv_check_result *r,
                       char *seen, int seencap) {
    const kv_case *c = ctx->c;
    kv_case_inputs in;
    if (kv_case_inputs_make(c, ctx->op, dev, false, &in) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "%s: cannot build the inputs: %s", path, kv_last_error_message());
        return false;
    }
    kv_case_outputs out;
    const kv_status st = kv_case_invoke(ctx->op, &in, ks, &out);
    bool ok = false;
    if (st == KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: expected error '%s', but the call succeeded", path,
                            kv_status_name(c->expect));
        kv_case_outputs_free(&out);
    } else if (st != c->expect) {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: expected error '%s', got '%s': %s", path, kv_status_name(c->expect),
                            kv_status_name(st), kv_last_error_message());
    } else if (kv_last_error_message()[0] == '\0') {
        kv_check_result_set(r, KV_RESULT_FAIL, "%s: failed with '%s' as expected but without a message", path,
                            kv_status_name(st));
    } else {
        ok = true;
        if (seen[0] == '\0') snprintf(seen, (size_t)seencap, "%s", kv_last_error_message());
    }
    kv_case_inputs_free(&in);
    return ok;
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
    char seen[256] = "", paths[256] = "";
    int npaths = 0;
    bool ok = error_path(ctx, "call", c->device, 0, &r, seen, (int)sizeof seen);
    if (ok) snprintf(paths, sizeof paths, "call");
    npaths += ok;
    for (int k = 0; ok && k < KV_BACKEND_KEY_COUNT; k++) {
        const kv_device_type dt = (kv_device_type)k;
        if (kv_allocator_for(dt) == NULL || kv_op_entry_kind(ctx->op, (kv_key)k) != KV_ENTRY_KERNEL) continue;
        if (kv_inflight_excluded() & kv_keyset_of((kv_key)k)) continue; /* it crashed this case: the rerun */
        const kv_device dev = { dt, c->device.type == dt ? c->device.index : 0 };
        ok = error_path(ctx, kv_key_name((kv_key)k), dev, kv_keyset_of((kv_key)k), &r, seen, (int)sizeof seen);
        if (ok) {
            const size_t n = strlen(paths);
            snprintf(paths + n, sizeof paths - n, ", %s", kv_key_name((kv_key)k));
            npaths++;
        }
    }
    if (ok)
        kv_check_result_set(&r, KV_RESULT_PASS, "raised '%s' on %d path%s (%s): %s", kv_status_name(c->expect), npaths,
                            npaths == 1 ? "" : "s", paths, seen);
    kv_check_push(ctx, &r);
}
