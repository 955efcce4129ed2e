/* Result statuses and the growable result list every report reads. */
#include "runner/check/result.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

const char *kv_result_status_name(kv_result_status s) {
    switch (s) {
    case KV_RESULT_PASS: return "PASS";
    case KV_RESULT_FAIL: return "FAIL";
    case KV_RESULT_ERROR: return "ERROR";
    case KV_RESULT_UNSUPPORTED: return "UNSUPPORTED";
    case KV_RESULT_SKIP: return "SKIP";
    case KV_RESULT_CRASH: return "CRASH";
    case KV_RESULT_TIMEOUT: return "TIMEOUT";
    case KV_RESULT_XFAIL: return "XFAIL";
    case KV_RESULT_XPASS: return "XPASS";
    case KV_RESULT_FLAKY: return "FLAKY";
    case KV_RESULT_STATUS_COUNT: break;
    }
    /* Only a corrupted value gets here; reports must still print something. */
    return "?";
}

int kv_result_status_parse(const char *name, kv_result_status *out) {
    if (name == NULL) return -1;
    for (int i = 0; i < (int)KV_RESULT_STATUS_COUNT; i++) {
        if (strcmp(name, kv_result_status_name((kv_result_status)i)) == 0) {
            if (out) *out = (kv_result_status)i;
            return 0;
        }
    }
    return -1;
}

bool kv_result_status_is_bad(kv_result_status s) {
    switch (s) {
    case KV_RESULT_PASS:
    case KV_RESULT_UNSUPPORTED:
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    /* It passed in the end; --flaky=fail makes the run fail on it
     * (kv_report_exit_code_flaky), the row stays what it is. */
    case KV_RESULT_FLAKY: return false;
    case KV_RESULT_FAIL:
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    /* An unexpected pass means the baseline is stale: CI must notice, or
     * the entry would keep hiding a future regression of that case. */
    case KV_RESULT_XPASS: return true;
    case KV_RESULT_STATUS_COUNT: break;
    }
    return true;
}

bool kv_result_status_is_failure(kv_result_status s) {
    switch (s) {
    case KV_RESULT_FAIL:
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT: return true;
    case KV_RESULT_PASS:
    case KV_RESULT_UNSUPPORTED:
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    case KV_RESULT_XPASS:
    case KV_RESULT_FLAKY:
    case KV_RESULT_STATUS_COUNT: break;
    }
    return false;
}

int kv_result_status_severity(kv_result_status s) {
    switch (s) {
    case KV_RESULT_SKIP: return 0;
    case KV_RESULT_UNSUPPORTED: return 1;
    case KV_RESULT_PASS: return 2;
    case KV_RESULT_XFAIL: return 3;
    case KV_RESULT_FLAKY: return 4;
    case KV_RESULT_XPASS: return 5;
    case KV_RESULT_FAIL: return 6;
    case KV_RESULT_ERROR: return 7;
    case KV_RESULT_TIMEOUT: return 8;
    case KV_RESULT_CRASH: return 9;
    case KV_RESULT_STATUS_COUNT: break;
    }
    return 10;
}

/* Row slots allocated by every list of the process, and the most at any
 * time since the last reset: relaxed atomics, since only the totals
 * matter, not their order against other memory. */
static _Atomic int64_t kv_rows_live, kv_rows_peak;

static void kv_result_rows_account(int64_t delta) {
    const int64_t now = atomic_fetch_add_explicit(&kv_rows_live, delta, memory_order_relaxed) + delta;
    int64_t peak = atomic_load_explicit(&kv_rows_peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&kv_rows_peak, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
    }
}

int64_t kv_result_rows_held(void) { return atomic_load_explicit(&kv_rows_live, memory_order_relaxed); }

int64_t kv_result_rows_peak(void) { return atomic_load_explicit(&kv_rows_peak, memory_order_relaxed); }

void kv_result_rows_peak_reset(void) {
    atomic_store_explicit(&kv_rows_peak, atomic_load_explicit(&kv_rows_live, memory_order_relaxed),
                          memory_order_relaxed);
}

kv_status kv_result_list_push(kv_result_list *list, const kv_check_result *r) {
    if (list == NULL || r == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_result_list_push: argument '%s': is NULL",
                        list == NULL ? "list" : "r");
    /* `r` may point into list->items, which realloc can move. */
    const kv_check_result copy = *r;
    if (list->n == list->cap) {
        if (list->cap > (1 << 29))
            return kv_error(KV_ERR_OOM, "kv_result_list_push: list: more than %d results", list->cap);
        int cap = list->cap ? list->cap * 2 : 64;
        kv_check_result *items = realloc(list->items, (size_t)cap * sizeof *items);
        if (items == NULL)
            return kv_error(KV_ERR_OOM, "kv_result_list_push: list: cannot grow to %d results", cap);
        list->items = items;
        kv_result_rows_account(cap - list->cap);
        list->cap = cap;
    }
    list->items[list->n++] = copy;
    return KV_OK;
}

kv_status kv_result_list_extend(kv_result_list *dst, const kv_result_list *src) {
    if (dst == NULL || src == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_result_list_extend: argument '%s': is NULL",
                        dst == NULL ? "dst" : "src");
    /* Copy the count first: src may be dst, and push grows dst. */
    const int n = src->n;
    for (int i = 0; i < n; i++) {
        kv_status st = kv_result_list_push(dst, &src->items[i]);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

void kv_result_list_free(kv_result_list *list) {
    if (list == NULL) return;
    free(list->items);
    kv_result_rows_account(-list->cap);
    list->items = NULL;
    list->n = list->cap = 0;
}

void kv_result_list_counts(const kv_result_list *list, int64_t counts[KV_RESULT_STATUS_COUNT]) {
    for (int i = 0; i < (int)KV_RESULT_STATUS_COUNT; i++) counts[i] = 0;
    if (list == NULL) return;
    for (int i = 0; i < list->n; i++) {
        kv_result_status s = list->items[i].status;
        if ((int)s >= 0 && s < KV_RESULT_STATUS_COUNT) counts[s]++;
        else counts[KV_RESULT_ERROR]++; /* a corrupted status is never a pass */
    }
}

void kv_check_result_append(kv_check_result *r, const char *fmt, ...) {
    const size_t n = strlen(r->message);
    if (n + 1 >= sizeof r->message) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message + n, sizeof r->message - n, fmt, ap);
    va_end(ap);
}
