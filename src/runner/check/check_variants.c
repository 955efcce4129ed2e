/* The variants check: the op's kernel on every available backend, called
 * with the case's layouts, against the golden (runner/check_util.h,
 * kv_check_golden_expected) under the tolerance table's rule.
 *
 * Backends: when the case runs on the CPU (the default), every backend key
 * whose device has an allocator and that has a Dense kernel for some op;
 * otherwise only the case's device. A
 * backend whose entry for the op is not a kernel (missing, fallback,
 * fallthrough) is UNSUPPORTED: counted, never a failure. Each backend is
 * called through kv_redispatch on its key alone, so nothing above the
 * Dense kernel runs; inputs live on that backend's device. A case whose
 * device= names a backend without a Dense kernel for the op (accel, whose
 * ops are boxed onto a target) is called through kv_call instead, and is
 * UNSUPPORTED only if that finds no kernel. Also UNSUPPORTED: a backend
 * kernel that returns KV_ERR_MISSING_KERNEL (it declines a dtype or
 * layout it does not implement), and a plugin that loaded but reported
 * itself unavailable (its reason in the row). Inputs reach device memory
 * and outputs come back through the backends' copies (kv/backend.h).
 * One result row per backend: "variants:<Key>" (kv_key_name), the kernel
 * the dispatcher runs there. Where that kernel is a perf_dispatch variant
 * set (kv/tune.h), one more row per variant, "variants:<Key>/<name>"
 * ("variants:CPU/avx2"): the variant pinned on this thread, so the call
 * still goes through the dispatcher and reaches exactly that variant. A
 * variant whose predicate refuses the call (a dtype, layout or ISA it does
 * not cover, e.g. AVX-512 on a CPU without it) is SKIP, never a failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/tune.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"
#include "runner/report/dump.h"

static const char *variants_entry_name(kv_entry_kind k) {
    switch (k) {
    case KV_ENTRY_MISSING: return "missing";
    case KV_ENTRY_KERNEL: return "kernel";
    case KV_ENTRY_FALLBACK: return "backend fallback";
    case KV_ENTRY_FALLTHROUGH: return "fallthrough";
    }
    return "?";
}

/* Compares one output; false with r set on a failure. */
static bool variants_compare(const kv_check_ctx *ctx, const kv_check_ref *ref, int i, const kv_tensor *expected,
                             const kv_tensor *got, kv_check_result *r, int64_t *compared) {
    kv_bound_kind bk = KV_BOUND_NONE;
    const kv_tol_entry *entry = NULL;
    const kv_cmp_rule rule = kv_tol_rule_for(ctx->c, expected->dtype, &bk, &entry);
    double *bounds = NULL;
    if (rule.kind == KV_CMP_BOUND &&
        kv_tol_bounds(bk, entry ? entry->value : 0.0, ctx->c, &ref->in, expected, i, &bounds) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "output %d: %s", i, kv_last_error_message());
        return false;
    }
    kv_cmp_report rep;
    const kv_status st = kv_compare(expected, got, &rule, bounds, &rep);
    free(bounds);
    char rs[48];
    kv_cmp_rule_format(&rule, rs, sizeof rs);
    if (st != KV_OK) {
        kv_check_result_set(r, KV_RESULT_FAIL, "output %d: %s", i, kv_last_error_message());
        return false;
    }
    *compared += rep.compared;
    if (rep.mismatched == 0) return true;
    char text[KV_RESULT_MESSAGE_MAX];
    char what[32];
    snprintf(what, sizeof what, "output %d", i);
    kv_cmp_report_summary(&rep, what, text, (int)sizeof text);
    kv_check_result_set(r, KV_RESULT_FAIL, "%s [%s: %s]", text, rs, entry ? entry->reason : "no table row: bitwise");
    kv_cmp_report_to_result(&rep, r);
    return false;
}

/* Device outputs come back to the host through the backend's copies
 * (kv/backend.h): the runner never reads device memory itself. */
static kv_status variants_readable(kv_case_outputs *out) {
    for (int i = 0; i < out->n; i++) {
        kv_tensor *h = kv_backend_readable(out->t[i]);
        if (h == NULL) return kv_error_prefix(kv_last_error(), "output %d: cannot copy it to the host", i);
        kv_tensor_release(out->t[i]);
        out->t[i] = h;
    }
    return KV_OK;
}

/* `variant` NULL: the backend's kernel as dispatched; else that variant. */
static void variants_backend(const kv_check_ctx *ctx, const kv_check_ref *ref, kv_tensor *const *expected,
                             const char *note, kv_key key, const char *variant) {
    const kv_case *c = ctx->c;
    char check[64];
    if (variant) snprintf(check, sizeof check, "variants:%s/%s", kv_key_name(key), variant);
    else snprintf(check, sizeof check, "variants:%s", kv_key_name(key));
    kv_check_result r;
    const kv_device_type dt = (kv_device_type)key;
    kv_check_result_begin(&r, ctx, check, kv_device_type_name(dt));
    const kv_entry_kind kind = kv_op_entry_kind(ctx->op, key);
    if (kv_allocator_for(dt) == NULL) {
        const kv_backend_info *b = kv_backend_find(dt);
        if (b != NULL && b->state == KV_BACKEND_UNAVAILABLE)
            kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "device %s is not available: %s", kv_device_type_name(dt),
                                b->message);
        else
            kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "device %s is not available", kv_device_type_name(dt));
        kv_check_push(ctx, &r);
        return;
    }
    /* A backend without its own kernel is UNSUPPORTED in the sweep; a
     * case that names the device explicitly (device=accel) still runs
     * through the full dispatcher, which may reach a kernel another way
     * (boxing onto a target, a backend fallback). */
    /* Accel's own kernels are boxing shims for calls that come in below
     * the boxing layer: a device=accel case always goes through kv_call,
     * so the boxing layer (and its gate) runs as it does for users. */
    const bool via_call =
        (kind != KV_ENTRY_KERNEL || dt == KV_DEVICE_ACCEL) && c->device.type == dt && dt != KV_DEVICE_CPU;
    if (kind != KV_ENTRY_KERNEL && !via_call) {
        kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s has no %s kernel (entry: %s)", c->op, kv_key_name(key),
                            variants_entry_name(kind));
        kv_check_push(ctx, &r);
        return;
    }
    const kv_device dev = { dt, c->device.type == dt ? c->device.index : 0 };
    kv_case_inputs in;
    kv_case_outputs out;
    memset(&out, 0, sizeof out);
    if (kv_case_inputs_make(c, ctx->op, dev, false, &in) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot build the inputs on %s: %s", kv_device_type_name(dt),
                            kv_last_error_message());
        kv_check_push(ctx, &r);
        return;
    }
    if (variant) {
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack probe = kv_stack_on(slots, KV_STACK_MAX);
        for (int i = 0; i < in.nargs; i++) kv_stack_push(&probe, in.args[i]);
        if (!kv_tune_variant_compatible(ctx->op, key, kv_tune_variant_find(ctx->op, key, variant), &probe)) {
            kv_check_result_set(&r, KV_RESULT_SKIP,
                                "variant '%s' of %s does not accept this call (its predicate refuses the dtype, "
                                "layout or CPU features)",
                                variant, kv_key_name(key));
            kv_case_inputs_free(&in);
            kv_check_push(ctx, &r);
            return;
        }
        if (kv_tune_pin(ctx->op, key, variant) != KV_OK) {
            kv_check_result_set(&r, KV_RESULT_ERROR, "%s", kv_last_error_message());
            kv_case_inputs_free(&in);
            kv_check_push(ctx, &r);
            return;
        }
    }
    kv_status st = kv_case_invoke(ctx->op, &in, via_call ? 0 : kv_keyset_of(key), &out);
    if (variant) kv_tune_pin(NULL, key, NULL);
    if (st == KV_OK) st = kv_check_box_bool(&out);
    if (st == KV_OK) st = kv_check_materialize(&out);
    if (st == KV_OK) st = variants_readable(&out);
    if (st == KV_ERR_MISSING_KERNEL && via_call) {
        kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "%s on %s: %s", c->op, kv_device_type_name(dt),
                            kv_last_error_message());
    } else if (st == KV_ERR_MISSING_KERNEL) {
        kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "the %s kernel declined the call: %s", kv_key_name(key),
                            kv_last_error_message());
    } else if (st != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_FAIL, "the %s kernel failed with '%s' (the reference passed): %s",
                            kv_key_name(key), kv_status_name(st), kv_last_error_message());
    } else if (out.n != ref->out.n) {
        kv_check_result_set(&r, KV_RESULT_FAIL, "the %s kernel returned %d output%s, the reference %d", kv_key_name(key),
                            out.n, out.n == 1 ? "" : "s", ref->out.n);
    } else {
        int64_t compared = 0;
        bool ok = true;
        for (int i = 0; i < out.n && ok; i++) ok = variants_compare(ctx, ref, i, expected[i], out.t[i], &r, &compared);
        if (ok) kv_check_result_set(&r, KV_RESULT_PASS, "%lld elements agree", (long long)compared);
        r.compared = compared > r.compared ? compared : r.compared;
        /* --dump: the failing kernel's own outputs next to the reference's. */
        if (!ok && ctx->env->dump_dir != NULL &&
            kv_case_dump_failure(c, ctx->env->dump_dir, &r, (const kv_tensor *const *)out.t,
                                 (const kv_tensor *const *)expected, out.n) != KV_OK)
            kv_check_result_append(&r, "; --dump: %s", kv_last_error_message());
    }
    if (note[0]) kv_check_result_append(&r, "; %s", note);
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&in);
    kv_check_push(ctx, &r);
}

/* The backend's row, then one per perf_dispatch variant of its kernel. */
static void variants_all(const kv_check_ctx *ctx, const kv_check_ref *ref, kv_tensor *const *expected,
                         const char *note, kv_key key) {
    variants_backend(ctx, ref, expected, note, key, NULL);
    if (!kv_key_is_backend(key) || !kv_tune_is_dispatching(ctx->op, key)) return;
    /* A device=accel case reaches its kernels through the boxing layer;
     * variants are swept by the case on the target's own device. */
    if (ctx->c->device.type != (kv_device_type)key && ctx->c->device.type != KV_DEVICE_CPU) return;
    for (int i = 0; i < kv_tune_variant_count(ctx->op, key); i++)
        variants_backend(ctx, ref, expected, note, key, kv_tune_variant_name(ctx->op, key, i));
}

/* Whether any op has a Dense kernel on `key`: devices that only box onto
 * another backend (accel) have none, and sweeping them would add an
 * UNSUPPORTED row to every case for ops they do support. */
static bool variants_is_kernel_backend(kv_key key) {
    for (int i = 0; i < kv_op_count(); i++)
        if (kv_op_entry_kind(kv_op_at(i), key) == KV_ENTRY_KERNEL) return true;
    return false;
}

void kv_check_variants_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "variants", NULL);
    if (c->expect != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_SKIP, "expect=%s: the case has no output to compare",
                            kv_case_expect_name(c->expect));
        kv_check_push(ctx, &r);
        return;
    }
    kv_check_ref ref;
    if (kv_check_ref_run(ctx, &ref) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot build the inputs: %s", ref.message);
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    if (ref.call_status != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "the reference kernel failed with '%s': %s",
                            kv_status_name(ref.call_status), ref.message);
        kv_check_ref_free(&ref);
        kv_check_push(ctx, &r);
        return;
    }
    kv_tensor *expected[KV_CASE_MAX_OUTPUTS] = { NULL };
    char note[512];
    if (kv_check_golden_expected(ctx, &ref, expected, note, (int)sizeof note) != KV_OK) {
        kv_check_result_set(&r, KV_RESULT_ERROR, "%s", kv_last_error_message());
        kv_check_push(ctx, &r);
    } else if (c->device.type == KV_DEVICE_CPU) {
        for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
            if (kv_allocator_for((kv_device_type)k) == NULL) continue;
            if (k != KV_KEY_CPU && !variants_is_kernel_backend((kv_key)k)) continue;
            /* Accel boxes onto its target: the device=accel twin of every
             * case (cases/accel.case) runs it through the full dispatcher. */
            if (k == KV_KEY_ACCEL) continue;
            variants_all(ctx, &ref, expected, note, (kv_key)k);
        }
        /* A plugin that loaded but cannot run here (CUDA without a GPU):
         * one UNSUPPORTED row with its reason, never a failure. */
        for (int i = 0; i < kv_backend_count(); i++) {
            const kv_backend_info *b = kv_backend_at(i);
            if (b->state != KV_BACKEND_UNAVAILABLE || (int)b->device_type >= KV_BACKEND_KEY_COUNT ||
                kv_backend_find(b->device_type) != b || kv_allocator_for(b->device_type) != NULL)
                continue;
            variants_backend(ctx, &ref, expected, note, (kv_key)b->device_type, NULL);
        }
    } else {
        variants_all(ctx, &ref, expected, note, kv_device_key(c->device));
    }
    for (int i = 0; i < KV_CASE_MAX_OUTPUTS; i++) kv_tensor_release(expected[i]);
    kv_check_ref_free(&ref);
}
