/* Each gate's fast-path hit rate over a run (runner/report.h), summed from
 * the fastpath check's rows ("fastpath:seed", "fastpath:exact"), which
 * carry the path counts of the case's op in the run with every fast path
 * on (check_fastpath.c). Computed from the results alone, so a merged
 * report of several shards shows the rates of the whole run. */
#include "runner/report/report.h"
#include "runner/report/report_agg.h"

#include <stdio.h>
#include <string.h>

static const char *const k_gates[KV_REPORT_GATES] = { "seed", "exact" };

/* A case with lazy= or mode= in its canonical ID. */
static bool hits_lazy_or_mode(const char *id) {
    return strstr(id, ",lazy=") != NULL || strstr(id, "(lazy=") != NULL || strstr(id, ",mode=") != NULL ||
           strstr(id, "(mode=") != NULL;
}

/* Rows whose counts come from a run that happened. */
static bool hits_ran(kv_result_status s) {
    switch (s) {
    case KV_RESULT_PASS:
    case KV_RESULT_FAIL:
    case KV_RESULT_XFAIL:
    case KV_RESULT_XPASS:
    case KV_RESULT_FLAKY: return true;
    case KV_RESULT_ERROR:
    case KV_RESULT_UNSUPPORTED:
    case KV_RESULT_SKIP:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    case KV_RESULT_STATUS_COUNT: return false;
    }
    return false;
}

void kv_report_hits_init(kv_report_hits hits[KV_REPORT_GATES]) {
    memset(hits, 0, KV_REPORT_GATES * sizeof *hits);
    for (int g = 0; g < KV_REPORT_GATES; g++) hits[g].gate = k_gates[g];
}

void kv_report_hits_add(kv_report_hits hits[KV_REPORT_GATES], const kv_check_result *r) {
    if (strncmp(r->check, "fastpath:", 9) != 0 || !hits_ran(r->status)) return;
    for (int g = 0; g < KV_REPORT_GATES; g++) {
        if (strcmp(r->check + 9, k_gates[g]) != 0) continue;
        kv_report_hits *h = &hits[g];
        const bool hit = r->fast_calls + r->manual_calls > 0;
        const bool lm = hits_lazy_or_mode(r->case_id);
        h->cases++;
        h->cases_hit += hit;
        h->plain_cases += !lm;
        h->plain_hit += !lm && hit;
        h->fast += r->fast_calls;
        h->manual += r->manual_calls;
        h->slow += r->slow_calls;
    }
}

int kv_report_hit_rates(const kv_result_list *results, kv_report_hits hits[KV_REPORT_GATES]) {
    kv_report_hits_init(hits);
    for (int i = 0; results != NULL && i < results->n; i++) kv_report_hits_add(hits, &results->items[i]);
    int n = 0;
    for (int g = 0; g < KV_REPORT_GATES; g++) n += hits[g].cases > 0;
    return n;
}

static double hits_pct(int64_t a, int64_t b) { return b > 0 ? 100.0 * (double)a / (double)b : 0.0; }

int kv_report_hits_format(const kv_report_hits *h, char *buf, int cap) {
    const int64_t lm = h->cases - h->plain_cases, lm_hit = h->cases_hit - h->plain_hit;
    const int64_t calls = h->fast + h->manual + h->slow;
    return snprintf(buf, (size_t)cap,
                    "gate %s: fast path fired in %lld of %lld cases (%.1f%%; plain %lld/%lld, lazy/mode %lld/%lld), "
                    "%lld of %lld boxed calls (%.1f%%: %lld fast, %lld manual, %lld slow)",
                    h->gate, (long long)h->cases_hit, (long long)h->cases, hits_pct(h->cases_hit, h->cases),
                    (long long)h->plain_hit, (long long)h->plain_cases, (long long)lm_hit, (long long)lm,
                    (long long)(h->fast + h->manual), (long long)calls, hits_pct(h->fast + h->manual, calls),
                    (long long)h->fast, (long long)h->manual, (long long)h->slow);
}
