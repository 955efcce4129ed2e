/* KV_PERFDISPATCH_LOG: one line per choice (kv/tune.h for the format). */
#include "tune/tune_internal.h"

#include <stdio.h>
#include <string.h>

static atomic_bool g_log_on;
static pthread_mutex_t g_sink_lock = PTHREAD_MUTEX_INITIALIZER;
static kv_tune_log_fn g_sink;
static void *g_sink_ctx;

bool kv_tune_log_enabled(void) { return atomic_load_explicit(&g_log_on, memory_order_relaxed); }
void kv_tune_log_set_enabled(bool on) { atomic_store(&g_log_on, on); }

void kv_tune_set_log_sink(kv_tune_log_fn fn, void *ctx) {
    pthread_mutex_lock(&g_sink_lock);
    g_sink = fn;
    g_sink_ctx = ctx;
    pthread_mutex_unlock(&g_sink_lock);
}

static const char *how_name(tune_how how) {
    switch (how) {
    case TUNE_HOW_FORCED: return "forced";
    case TUNE_HOW_ONLY: return "only";
    case TUNE_HOW_TUNED: return "tuned";
    case TUNE_HOW_UNTUNED: return "untuned";
    }
    return "?";
}

void kv_tune_log_choice(const tune_slot *s, const kv_stack *stack, int choice, tune_how how, int ncompat,
                        const tune_timing *timings) {
    char line[1024], geo[512];
    kv_tune_geometry_format(s->op, stack, geo, sizeof geo);
    const int n = atomic_load(&s->n);
    int len = snprintf(line, sizeof line, "perf_dispatch: %s %s %s -> %s [%s, %d of %d compatible", kv_op_name(s->op),
                       kv_key_name(s->key), geo, s->v[choice].name, how_name(how), ncompat, n);
    if (how == TUNE_HOW_TUNED) {
        const char *sep = ":";
        for (int i = 0; i < n && len > 0 && len < (int)sizeof line; i++) {
            if (!timings[i].ran) continue;
            int k = timings[i].failed
                        ? snprintf(line + len, sizeof line - (size_t)len, "%s %s=failed", sep, s->v[i].name)
                        : snprintf(line + len, sizeof line - (size_t)len, "%s %s=%lluns", sep, s->v[i].name,
                                   (unsigned long long)timings[i].median_ns);
            if (k > 0) len += k;
            sep = "";
        }
    }
    if (len > 0 && len < (int)sizeof line - 1) snprintf(line + len, sizeof line - (size_t)len, "]");
    pthread_mutex_lock(&g_sink_lock);
    if (g_sink) {
        g_sink(g_sink_ctx, line);
    } else {
        fprintf(stderr, "%s\n", line);
        fflush(stderr);
    }
    pthread_mutex_unlock(&g_sink_lock);
}
