/* Calling a case's op on every backend and kernel variant (check_util.h):
 * what the variants check compares and the accuracy check measures, so
 * both see exactly the same calls.
 *
 * Backends: when the case runs on the CPU (the default), every backend key
 * whose device has an allocator and that has a Dense kernel for some op;
 * otherwise only the case's device. A backend whose entry for the op is
 * not a kernel (missing, fallback, fallthrough) is UNSUPPORTED: counted,
 * never a failure. Each backend is called through kv_redispatch on its key
 * alone, so nothing above the Dense kernel runs; inputs live on that
 * backend's device. A case whose device= names a backend without a Dense
 * kernel for the op (accel, whose ops are boxed onto a target) is called
 * through kv_call instead, and is UNSUPPORTED only if that finds no
 * kernel. Also UNSUPPORTED: a backend kernel that returns
 * KV_ERR_MISSING_KERNEL (it declines a dtype or layout it does not
 * implement), and a plugin that loaded but reported itself unavailable
 * (its reason in the row). Inputs reach device memory and outputs come
 * back through the backends' copies (kv/backend.h). Where the backend's
 * kernel is a perf_dispatch variant set (kv/tune.h), each variant is
 * visited too, pinned on this thread so the call still goes through the
 * dispatcher and reaches exactly that variant; a variant whose predicate
 * refuses the call is SKIP, never a failure. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/tune.h"
#include "runner/check/check_meta.h"
#include "runner/check/check_util.h"
#include "runner/check/classify.h"
#include "runner/check/compare.h"
#include "runner/check/row_select.h"
#include "runner/check/tolerance.h"
#include "runner/exec/inflight.h"

static const char *backend_entry_name(kv_entry_kind k) {
    switch (k) {
    case KV_ENTRY_MISSING: return "missing";
    case KV_ENTRY_KERNEL: return "kernel";
    case KV_ENTRY_FALLBACK: return "backend fallback";
    case KV_ENTRY_FALLTHROUGH: return "fallthrough";
    }
    return "?";
}

/* Device outputs come back to the host through the backend's copies
 * (kv/backend.h): the runner never reads device memory itself. */
static kv_status backend_readable(kv_case_outputs *out) {
    for (int i = 0; i < out->n; i++) {
        kv_tensor *h = kv_backend_readable(out->t[i]);
        if (h == NULL) return kv_error_prefix(kv_last_error(), "output %d: cannot copy it to the host", i);
        kv_tensor_release(out->t[i]);
        out->t[i] = h;
    }
    return KV_OK;
}

/* A plugin that loaded but is unavailable holds no slot, so the slot's key
 * has no name of its own ("Plugin0"): its rows go by the plugin's name. */
static const char *backend_unavailable_name(kv_key key) {
    /* SIM and CUDA have slots of their own, named whatever is in them. */
    if (!kv_key_is_backend(key) || (kv_device_type)key < KV_DEVICE_PLUGIN0 ||
        kv_allocator_for((kv_device_type)key) != NULL)
        return NULL;
    const kv_backend_info *b = kv_backend_find((kv_device_type)key);
    return b != NULL && b->state == KV_BACKEND_UNAVAILABLE && b->name[0] ? b->name : NULL;
}

const char *kv_check_backend_label(kv_key key) {
    const char *name = backend_unavailable_name(key);
    return name ? name : kv_device_type_name((kv_device_type)key);
}

void kv_check_backend_row_name(const char *prefix, kv_key key, const char *variant, char *buf, int cap) {
    const char *name = backend_unavailable_name(key);
    if (name == NULL) name = kv_key_name(key);
    if (variant) snprintf(buf, (size_t)cap, "%s:%s/%s", prefix, name, variant);
    else snprintf(buf, (size_t)cap, "%s:%s", prefix, name);
}

/* One invocation on fresh inputs made on `dev`, outputs brought to the
 * host; `in` is left for the caller (metadata is checked against it). */
static kv_status backend_invoke(const kv_check_ctx *ctx, kv_device dev, kv_keyset only, kv_case_inputs *in,
                                kv_case_outputs *out, const kv_meta_expect *meta, char *meta_diff, int cap) {
    kv_status st = kv_case_invoke(ctx->op, in, only, out);
    /* Metadata first: materializing and copying to the host below make
     * new tensors, which would hide strides, device and aliasing. */
    if (st == KV_OK && meta != NULL) {
        if (kv_meta_check(meta, in, out, dev, meta_diff, cap)) meta_diff[0] = '\0';
    }
    if (st == KV_OK) st = kv_check_box_bool(out);
    if (st == KV_OK) st = kv_check_materialize(out);
    if (st == KV_OK) st = backend_readable(out);
    return st;
}

/* An UNSUPPORTED outcome of backend `key` for this case, or a FAIL when
 * the plugin declared the case's (op, dtype) (kv_backend_desc's
 * `support`): a declared pair must run (issue 21). */
static void backend_unsupported(kv_check_result *r, const kv_case *c, kv_key key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void backend_unsupported(kv_check_result *r, const kv_case *c, kv_key key, const char *fmt, ...) {
    char why[KV_RESULT_MESSAGE_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (kv_key_is_backend(key) && kv_backend_declared((kv_device_type)key, c->op, r->dtype) == 1)
        kv_check_result_set(r, KV_RESULT_FAIL, "declared but declined: %s declares %s in %s (its support list): %s",
                            kv_check_backend_label(key), c->op, kv_dtype_name(r->dtype), why);
    else
        kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "%s", why);
}

bool kv_check_backend_call(const kv_check_ctx *ctx, int nref_out, kv_key key, const char *variant,
                           kv_check_call *call, kv_check_result *r) {
    const kv_case *c = ctx->c;
    kv_case_outputs *out = &call->out;
    memset(out, 0, sizeof *out);
    call->meta_diff[0] = '\0';
    kv_inflight_set_check(r->check);
    const kv_device_type dt = (kv_device_type)key;
    const kv_entry_kind kind = kv_op_entry_kind(ctx->op, key);
    if (kv_allocator_for(dt) == NULL) {
        const kv_backend_info *b = kv_backend_find(dt);
        if (b != NULL && b->state == KV_BACKEND_UNAVAILABLE)
            kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "device %s is not available: %s", kv_device_type_name(dt),
                                b->message);
        else
            kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "device %s is not available", kv_device_type_name(dt));
        return false;
    }
    /* A backend without its own kernel is UNSUPPORTED in the sweep; a
     * case that names the device explicitly (device=accel) still runs
     * through the full dispatcher, which may reach a kernel another way
     * (boxing onto a target, a backend fallback). Accel's own kernels are
     * boxing shims for calls that come in below the boxing layer: a
     * device=accel case always goes through kv_call, so the boxing layer
     * (and its gate) runs as it does for users. */
    const bool via_call =
        (kind != KV_ENTRY_KERNEL || dt == KV_DEVICE_ACCEL) && c->device.type == dt && dt != KV_DEVICE_CPU;
    if (kind != KV_ENTRY_KERNEL && !via_call) {
        backend_unsupported(r, c, key, "%s has no %s kernel (entry: %s)", c->op, kv_key_name(key),
                            backend_entry_name(kind));
        return false;
    }
    const kv_device dev = { dt, c->device.type == dt ? c->device.index : 0 };
    const kv_keyset only = via_call ? 0 : kv_keyset_of(key);
    kv_case_inputs in;
    if (kv_case_inputs_make(c, ctx->op, dev, false, &in) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "cannot build the inputs on %s: %s", kv_device_type_name(dt),
                            kv_last_error_message());
        return false;
    }
    if (variant) {
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack probe = kv_stack_on(slots, KV_STACK_MAX);
        for (int i = 0; i < in.nargs; i++) kv_stack_push(&probe, in.args[i]);
        if (!kv_tune_variant_compatible(ctx->op, key, kv_tune_variant_find(ctx->op, key, variant), &probe)) {
            kv_check_result_set(r, KV_RESULT_SKIP,
                                "variant '%s' of %s does not accept this call (its predicate refuses the dtype, "
                                "layout or CPU features)",
                                variant, kv_key_name(key));
            kv_case_inputs_free(&in);
            return false;
        }
        kv_inflight_set_variant(variant);
        if (kv_tune_pin(ctx->op, key, variant) != KV_OK) {
            kv_check_result_set(r, KV_RESULT_ERROR, "%s", kv_last_error_message());
            kv_inflight_set_variant("");
            kv_case_inputs_free(&in);
            return false;
        }
    }
    kv_status st = backend_invoke(ctx, dev, only, &in, out, call->meta, call->meta_diff, (int)sizeof call->meta_diff);
    /* The same call again on fresh inputs, so a kernel that wrote into its
     * input does not look nondeterministic. */
    kv_case_outputs out2;
    memset(&out2, 0, sizeof out2);
    bool have2 = false;
    if (st == KV_OK && call->twice) {
        kv_case_inputs in2;
        if (kv_case_inputs_make(c, ctx->op, dev, false, &in2) == KV_OK) {
            char unused[8];
            have2 = backend_invoke(ctx, dev, only, &in2, &out2, NULL, unused, (int)sizeof unused) == KV_OK;
            kv_case_inputs_free(&in2);
        }
    }
    if (variant) kv_tune_pin(NULL, key, NULL);
    kv_inflight_set_variant("");
    char nd[KV_RESULT_MESSAGE_MAX / 2];
    bool ok = false;
    if (st == KV_ERR_MISSING_KERNEL && via_call) {
        backend_unsupported(r, c, key, "%s on %s: %s", c->op, kv_device_type_name(dt), kv_last_error_message());
    } else if (st == KV_ERR_MISSING_KERNEL) {
        backend_unsupported(r, c, key, "the %s kernel declined the call: %s", kv_key_name(key),
                            kv_last_error_message());
    } else if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "the %s kernel failed with '%s' (the reference passed): %s",
                            kv_key_name(key), kv_status_name(st), kv_last_error_message());
    } else if (out->n != nref_out) {
        kv_check_result_set(r, KV_RESULT_FAIL, "the %s kernel returned %d output%s, the reference %d",
                            kv_key_name(key), out->n, out->n == 1 ? "" : "s", nref_out);
    } else if (have2 && !kv_check_outputs_identical(ctx, out, &out2, true, nd, (int)sizeof nd)) {
        kv_check_result_set(r, KV_RESULT_FAIL,
                            "%s on %s%s%s is nondeterministic: two identical calls gave different results: %s", c->op,
                            kv_key_name(key), variant ? "/" : "", variant ? variant : "", nd);
    } else {
        ok = true;
    }
    if (!ok) kv_case_outputs_free(out);
    kv_case_outputs_free(&out2);
    kv_case_inputs_free(&in);
    return ok;
}

/* The backend's visit, then one per perf_dispatch variant of its kernel. */
static void backend_all(const kv_check_ctx *ctx, kv_key key, kv_check_backend_fn fn, void *user) {
    fn(ctx, key, NULL, user);
    if (!kv_key_is_backend(key) || !kv_tune_is_dispatching(ctx->op, key)) return;
    /* A device=accel case reaches its kernels through the boxing layer;
     * variants are swept by the case on the target's own device. */
    if (ctx->c->device.type != (kv_device_type)key && ctx->c->device.type != KV_DEVICE_CPU) return;
    for (int i = 0; i < kv_tune_variant_count(ctx->op, key); i++)
        fn(ctx, key, kv_tune_variant_name(ctx->op, key, i), user);
}

/* Whether any op has a Dense kernel on `key`: devices that only box onto
 * another backend (accel) have none, and sweeping them would add an
 * UNSUPPORTED row to every case for ops they do support. */
static bool backend_is_kernel_backend(kv_key key) {
    for (int i = 0; i < kv_op_count(); i++)
        if (kv_op_entry_kind(kv_op_at(i), key) == KV_ENTRY_KERNEL) return true;
    return false;
}

void kv_check_each_backend(const kv_check_ctx *ctx, kv_check_backend_fn fn, void *user) {
    const kv_case *c = ctx->c;
    /* --only-backend: the others are not run at all (row_select.h). */
    if (c->device.type != KV_DEVICE_CPU) {
        if (kv_row_select_backend(kv_check_backend_label(kv_device_key(c->device))))
            backend_all(ctx, kv_device_key(c->device), fn, user);
        return;
    }
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        if (kv_allocator_for((kv_device_type)k) == NULL) continue;
        if (k != KV_KEY_CPU && !backend_is_kernel_backend((kv_key)k)) continue;
        /* Accel boxes onto its target: the device=accel twin of every
         * case (cases/accel.case) runs it through the full dispatcher. */
        if (k == KV_KEY_ACCEL) continue;
        /* A backend whose kernel crashed or hung this case already has its
         * row (runner/exec/inflight.h); this is the rerun without it. */
        if (kv_inflight_excluded() & kv_keyset_of((kv_key)k)) continue;
        if (!kv_row_select_backend(kv_check_backend_label((kv_key)k))) continue;
        backend_all(ctx, (kv_key)k, fn, user);
    }
    /* A plugin that loaded but cannot run here (CUDA without a GPU): one
     * visit, which kv_check_backend_call turns into an UNSUPPORTED row
     * with its reason, never a failure. */
    for (int i = 0; i < kv_backend_count(); i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state != KV_BACKEND_UNAVAILABLE || (int)b->device_type >= KV_BACKEND_KEY_COUNT ||
            kv_backend_find(b->device_type) != b || kv_allocator_for(b->device_type) != NULL ||
            !kv_row_select_backend(kv_check_backend_label((kv_key)b->device_type)))
            continue;
        fn(ctx, (kv_key)b->device_type, NULL, user);
    }
}
