/* The run's fingerprint (report.h): what must be equal for report folders
 * to be shards of one run, so `kvrun --merge` can refuse a mix. Every
 * field is computed the same way in every shard: the case set is taken
 * before --filter and --shard (the filters are in the options), and paths
 * that differ between CI machines (plugin files, report folders) are left
 * out. */
#include "runner/exec/driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/accel.h"
#include "runner/check/check_fastpath.h"
#include "runner/check/row_select.h"
#include "runner/check/tol_backend.h"
#include "runner/golden/hash.h"
#include "runner/report/report.h"

static void put(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
    if (*n >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (w > 0) *n += (size_t)w;
}

/* The variables that change what a run computes or how it judges it. */
static const char *const kv_fingerprint_env[] = {
    "KV_NO_DISPATCH_CACHE", "KV_REDISPATCH_GATE",     "KV_NO_REDISPATCH",      "KV_ACCEL_DISABLE",
    "KV_ACCEL_TARGET",      "KV_PERFDISPATCH_FORCE",  "KV_PERFDISPATCH_RETUNE", "KV_PERFDISPATCH_WARMUP",
    "KV_PERFDISPATCH_REPS", "KV_PERFDISPATCH_TUNE",   "KV_CPU_ISA",            "KV_BACKEND_PATH",
};

void kv_driver_fingerprint(kv_report_meta *meta, const kv_driver_options *o, const kv_case_list *cases) {
    kv_report_fingerprint *f = &meta->fingerprint;
    memset(f, 0, sizeof *f);
    snprintf(f->version, sizeof f->version, "%s", o->version ? o->version : "");

    kv_hash_stream *h = kv_hash_begin();
    if (h != NULL) {
        for (int i = 0; i < cases->n; i++) {
            char id[KV_CASE_ID_MAX];
            const int len = kv_case_id(&cases->items[i], id, sizeof id);
            kv_hash_update(h, id, (size_t)(len < (int)sizeof id ? len : (int)sizeof id - 1));
            kv_hash_update(h, "\n", 1);
        }
        snprintf(f->cases, sizeof f->cases, "%d cases, hash %016llx", cases->n, (unsigned long long)kv_hash_end(h));
    } else {
        kv_error_clear();
        snprintf(f->cases, sizeof f->cases, "%d cases", cases->n);
    }

    size_t n = 0;
    put(f->options, sizeof f->options, &n, "fastpath-gates=%s", kv_fastpath_gates_name(o->fastpath_gates));
    for (int i = 0; i < o->nfilters; i++) put(f->options, sizeof f->options, &n, " filter=%s", o->filters[i]);
    if (o->baseline_path) put(f->options, sizeof f->options, &n, " baseline=%s", o->baseline_path);
    if (o->golden_dir) put(f->options, sizeof f->options, &n, " golden-dir=%s", o->golden_dir);
    if (o->regen_golden) put(f->options, sizeof f->options, &n, " regen-golden");
    put(f->options, sizeof f->options, &n, " golden=%s", kv_golden_mode_name(o->golden_mode));
    /* Retries turn failures into FLAKY rows, and --flaky= decides whether
     * those fail: both change verdicts. */
    if (o->retry > 0) put(f->options, sizeof f->options, &n, " retry=%d", o->retry);
    if (o->flaky_fail) put(f->options, sizeof f->options, &n, " flaky=fail");
    /* The tolerance overrides by content (tol_backend.h): a run judged by
     * other bounds is another run, whatever its files are called. */
    for (int i = 0; i < kv_tol_file_count(); i++) {
        char file[160];
        kv_tol_file_describe(i, file, (int)sizeof file);
        put(f->options, sizeof f->options, &n, "%s%s", i ? "," : " tolerances=", file);
    }
    /* Shards that keep different rows are not one run. */
    char rows[192];
    kv_row_select_describe(rows, (int)sizeof rows);
    put(f->options, sizeof f->options, &n, "%s", rows);

    n = 0;
    put(f->gates, sizeof f->gates, &n, "redispatch-gate=%s kill-switch=%s accel-target=%s",
        kv_accel_gate_name(kv_accel_gate_get()), kv_accel_redispatch_enabled() ? "off" : "on",
        kv_key_name(kv_accel_target()));
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++)
        if (!kv_accel_special_enabled((kv_accel_special)i))
            put(f->gates, sizeof f->gates, &n, " no-%s", kv_accel_special_name((kv_accel_special)i));

    n = 0;
    for (int i = 0; i < meta->nbackends; i++) {
        const kv_report_backend *b = &meta->backends[i];
        put(f->backends, sizeof f->backends, &n, "%s%s(%s%s%s)", i ? " " : "", b->name, b->state,
            b->version[0] ? " " : "", b->version);
    }

    n = 0;
    for (size_t i = 0; i < sizeof kv_fingerprint_env / sizeof kv_fingerprint_env[0]; i++) {
        const char *v = getenv(kv_fingerprint_env[i]);
        if (v != NULL) put(f->env, sizeof f->env, &n, "%s%s=%s", n ? " " : "", kv_fingerprint_env[i], v);
    }
}
