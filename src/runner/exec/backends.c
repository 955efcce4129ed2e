/* The backends of a run, as the reports show them: every plugin the run
 * asked for, loaded or not, and rows that make a run fail when something
 * it was asked to test did not load.
 *
 * A plugin that failed to load (no file, wrong ABI, crashed, exited or
 * hung while loading, failed registration) is an ERROR row: its kernels
 * were never tested, so the run must not be green. One that loaded but
 * says it cannot run here (CUDA without a GPU) is an UNSUPPORTED row with
 * its reason: counted and visible, never a failure, unless the run was
 * told the backend is required (--require-backend), which makes its
 * absence an ERROR. An accel target that was asked for by name and is not
 * loaded is an ERROR too: no accel case could have run on it. */
#include "runner/exec/driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kv/accel.h"
#include "kv/backend.h"
#include "runner/report/report.h"

static const char *state_name(kv_backend_state s) {
    switch (s) {
    case KV_BACKEND_LOADED: return "loaded";
    case KV_BACKEND_UNAVAILABLE: return "unavailable";
    case KV_BACKEND_FAILED: return "failed";
    }
    return "?";
}

/* What a record is called: its own name, else its file's name. */
static const char *record_name(const kv_backend_info *b) {
    if (b->name[0]) return b->name;
    const char *slash = strrchr(b->path, '/');
    return slash ? slash + 1 : b->path;
}

void kv_driver_backends_meta(kv_report_meta *meta) {
    meta->abi_version = KV_BACKEND_ABI_VERSION;
    meta->nbackends = 0;
    kv_report_backend *cpu = &meta->backends[meta->nbackends++];
    memset(cpu, 0, sizeof *cpu);
    snprintf(cpu->name, sizeof cpu->name, "cpu");
    snprintf(cpu->state, sizeof cpu->state, "built-in");
    snprintf(cpu->version, sizeof cpu->version, "reference kernels and CPU variants");
    for (int i = 0; i < kv_backend_count() && meta->nbackends < KV_REPORT_MAX_BACKENDS; i++) {
        const kv_backend_info *b = kv_backend_at(i);
        kv_report_backend *e = &meta->backends[meta->nbackends++];
        memset(e, 0, sizeof *e);
        snprintf(e->name, sizeof e->name, "%.31s", record_name(b));
        snprintf(e->version, sizeof e->version, "%s", b->version);
        snprintf(e->path, sizeof e->path, "%.255s", b->path);
        snprintf(e->state, sizeof e->state, "%s", state_name(b->state));
        snprintf(e->reason, sizeof e->reason, "%s", b->message);
    }
    kv_accel_requested_target(meta->accel_requested, sizeof meta->accel_requested);
    snprintf(meta->accel_target, sizeof meta->accel_target, "%s", kv_accel_target_name());
}

kv_status kv_driver_backend_vrow(kv_result_list *out, const char *name, const char *check, kv_result_status status,
                                 const char *fmt, va_list ap) {
    kv_check_result r;
    memset(&r, 0, sizeof r);
    snprintf(r.case_id, sizeof r.case_id, "backend(%s)", name);
    snprintf(r.op, sizeof r.op, "(backend)");
    snprintf(r.check, sizeof r.check, "%s", check);
    snprintf(r.backend, sizeof r.backend, "%s", name);
    r.dtype = KV_F32;
    r.status = status;
    r.max_ulps = -1;
    vsnprintf(r.message, sizeof r.message, fmt, ap);
    return kv_result_list_push(out, &r);
}

static kv_status push_row(kv_result_list *out, const char *name, kv_result_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static kv_status push_row(kv_result_list *out, const char *name, kv_result_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const kv_status st = kv_driver_backend_vrow(out, name, "load", status, fmt, ap);
    va_end(ap);
    return st;
}

static bool available_named(const char *name) {
    if (strcmp(name, "cpu") == 0) return true;
    for (int i = 0; i < kv_backend_count(); i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state == KV_BACKEND_LOADED && strcmp(b->name, name) == 0) return true;
    }
    return false;
}

static const kv_backend_info *record_named(const char *name) {
    const kv_backend_info *found = NULL;
    for (int i = 0; i < kv_backend_count(); i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (strcmp(record_name(b), name) == 0) found = b;
    }
    return found;
}

int kv_driver_backend_names(const char **names, int cap) {
    int n = 0;
    if (n < cap) names[n++] = "cpu";
    if (n < cap) names[n++] = "accel";
    for (int i = 0; i < kv_backend_count() && n < cap; i++) {
        const char *name = record_name(kv_backend_at(i));
        bool dup = false;
        for (int j = 0; j < n && !dup; j++) dup = strcmp(names[j], name) == 0;
        if (!dup && name[0]) names[n++] = name;
    }
    return n;
}

kv_status kv_driver_accel_target_check(void) {
    char requested[32];
    kv_accel_requested_target(requested, sizeof requested);
    if (strcmp(requested, "auto") == 0 || kv_accel_target() != KV_KEY_NONE || record_named(requested) != NULL)
        return KV_OK;
    char loaded[256] = "cpu";
    size_t n = strlen(loaded);
    for (int i = 0; i < kv_backend_count() && n < sizeof loaded; i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state == KV_BACKEND_LOADED) n += (size_t)snprintf(loaded + n, sizeof loaded - n, ", %s", b->name);
    }
    return kv_error(KV_ERR_INVALID_ARG,
                    "KV_ACCEL_TARGET / --accel-target: '%s' names no backend here (loaded: %s; a plugin is loaded "
                    "with --backend=PATH)",
                    requested, loaded);
}

kv_status kv_driver_backend_rows(const kv_driver_options *o, kv_result_list *out) {
    kv_status st = KV_OK;
    for (int i = 0; i < kv_backend_count() && st == KV_OK; i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state == KV_BACKEND_FAILED)
            st = push_row(out, record_name(b), KV_RESULT_ERROR, "the backend did not load, so none of its kernels "
                          "ran: %s", b->message);
        else if (b->state == KV_BACKEND_UNAVAILABLE)
            st = push_row(out, record_name(b), KV_RESULT_UNSUPPORTED, "%s", b->message);
    }
    for (int i = 0; i < o->nrequire && st == KV_OK; i++) {
        const char *name = o->require_backends[i];
        if (available_named(name)) continue;
        const kv_backend_info *b = record_named(name);
        st = push_row(out, name, KV_RESULT_ERROR, "--require-backend=%s: the backend is not available: %s", name,
                      b ? b->message : "no plugin of that name was loaded");
    }
    char requested[32];
    kv_accel_requested_target(requested, sizeof requested);
    if (st == KV_OK && strcmp(requested, "auto") != 0 && kv_accel_target() == KV_KEY_NONE) {
        const kv_backend_info *b = record_named(requested);
        st = push_row(out, requested, KV_RESULT_ERROR,
                      "the accel target '%s' (KV_ACCEL_TARGET / --accel-target) is not a loaded backend, so no accel "
                      "case ran on it%s%s",
                      requested, b ? ": " : "", b ? b->message : "");
    }
    return st;
}
