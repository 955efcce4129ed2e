/* --retry=N behind runner/exec/retry.h: run the failing cases again and
 * turn the ones that pass into FLAKY rows. */
#include "runner/exec/retry.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The statuses a retry may cure; XPASS and XFAIL do not exist yet (the
 * baseline comes after), SKIP and UNSUPPORTED are not failures. */
static bool kv_retry_failed(kv_result_status s) {
    return s == KV_RESULT_FAIL || s == KV_RESULT_ERROR || s == KV_RESULT_CRASH || s == KV_RESULT_TIMEOUT;
}

typedef struct kv_span {
    int first, count;
} kv_span;

/* Where each case's rows are: they come case by case, in order, each row
 * carrying its case's ID (kv_isolate_run). Anything else is a bug, said
 * so rather than pairing rows with the wrong case. */
static kv_status kv_retry_spans(const kv_case *const *cases, int n, const kv_result_list *rows, kv_span *sp) {
    int at = 0;
    for (int i = 0; i < n; i++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(cases[i], id, sizeof id);
        sp[i].first = at;
        while (at < rows->n && strcmp(rows->items[at].case_id, id) == 0) at++;
        sp[i].count = at - sp[i].first;
    }
    if (at != rows->n)
        return kv_error(KV_ERR_INTERNAL, "--retry: row %d (case '%s') is not in case order", at,
                        rows->items[at].case_id);
    return KV_OK;
}

static bool kv_span_failed(const kv_result_list *rows, kv_span s) {
    for (int k = s.first; k < s.first + s.count; k++)
        if (kv_retry_failed(rows->items[k].status)) return true;
    return false;
}

static void kv_retry_message(kv_check_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void kv_retry_message(kv_check_result *r, const char *fmt, ...) {
    char buf[KV_RESULT_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* Cut text is marked, so nobody takes it for the whole message. */
    if (w >= (int)sizeof buf) memcpy(buf + sizeof buf - 4, "...", 4);
    memcpy(r->message, buf, sizeof r->message);
}

/* A first-attempt failing row, kept as the record of the flake. */
static void kv_make_flaky(kv_check_result *r, int attempt, int retries) {
    char old[KV_RESULT_MESSAGE_MAX];
    memcpy(old, r->message, sizeof old);
    old[sizeof old - 1] = '\0';
    kv_retry_message(r, "%s on the first attempt, then passed on retry %d of %d%s%s",
                     kv_result_status_name(r->status), attempt, retries, old[0] ? ": " : "", old);
    r->status = KV_RESULT_FLAKY;
}

/* The rows of one flaky case: the passing attempt's, each one whose
 * (check, backend) failed first replaced by that first row as FLAKY, then
 * the first attempt's failures that had no counterpart. */
static kv_status kv_flaky_rows(const kv_result_list *first, kv_span s, const kv_result_list *passed, int attempt,
                               int retries, kv_result_list *out) {
    bool *used = calloc((size_t)s.count + 1, sizeof *used);
    if (used == NULL) return kv_error(KV_ERR_OOM, "--retry: out of memory");
    kv_status st = KV_OK;
    for (int p = 0; st == KV_OK && p < passed->n; p++) {
        const kv_check_result *q = &passed->items[p];
        int hit = -1;
        for (int k = 0; k < s.count && hit < 0; k++) {
            const kv_check_result *r = &first->items[s.first + k];
            if (!used[k] && kv_retry_failed(r->status) && strcmp(r->check, q->check) == 0 &&
                strcmp(r->backend, q->backend) == 0)
                hit = k;
        }
        if (hit < 0) {
            st = kv_result_list_push(out, q);
            continue;
        }
        used[hit] = true;
        kv_check_result r = first->items[s.first + hit];
        kv_make_flaky(&r, attempt, retries);
        st = kv_result_list_push(out, &r);
    }
    for (int k = 0; st == KV_OK && k < s.count; k++) {
        if (used[k] || !kv_retry_failed(first->items[s.first + k].status)) continue;
        kv_check_result r = first->items[s.first + k];
        kv_make_flaky(&r, attempt, retries);
        st = kv_result_list_push(out, &r);
    }
    free(used);
    return st;
}

/* One more attempt at the cases in todo[0..*ntodo): those that pass get
 * their rows in passed[] and leave todo. */
static kv_status kv_retry_once(const kv_case *const *cases, const kv_run_env *env, const kv_isolate_config *cfg,
                               int attempt, int *todo, int *ntodo, const kv_case **sub, kv_span *sp,
                               kv_result_list *passed, int *passed_on) {
    for (int j = 0; j < *ntodo; j++) sub[j] = cases[todo[j]];
    kv_result_list rows = { 0 };
    kv_status st = kv_isolate_run(sub, *ntodo, env, cfg, &rows);
    if (st == KV_OK) st = kv_retry_spans(sub, *ntodo, &rows, sp);
    int keep = 0;
    for (int j = 0; st == KV_OK && j < *ntodo; j++) {
        const int i = todo[j];
        if (kv_span_failed(&rows, sp[j])) {
            todo[keep++] = i;
            continue;
        }
        passed_on[i] = attempt;
        for (int k = sp[j].first; st == KV_OK && k < sp[j].first + sp[j].count; k++)
            st = kv_result_list_push(&passed[i], &rows.items[k]);
    }
    if (st == KV_OK) *ntodo = keep;
    kv_result_list_free(&rows);
    return st;
}

kv_status kv_retry_failing(const kv_case *const *cases, int n, const kv_run_env *env, const kv_isolate_config *cfg,
                           int retries, kv_result_list *results, int *nflaky, int *nretried) {
    if (nflaky) *nflaky = 0;
    if (nretried) *nretried = 0;
    if (n < 0 || (n > 0 && cases == NULL) || env == NULL || cfg == NULL || results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_retry_failing: an argument is NULL or the count negative");
    if (retries <= 0 || n == 0) return KV_OK;
    kv_span *sp = malloc((size_t)n * sizeof *sp);
    kv_span *sp2 = malloc((size_t)n * sizeof *sp2);
    int *todo = malloc((size_t)n * sizeof *todo);
    int *passed_on = calloc((size_t)n, sizeof *passed_on);
    const kv_case **sub = malloc((size_t)n * sizeof *sub);
    kv_result_list *passed = calloc((size_t)n, sizeof *passed);
    kv_status st = KV_OK;
    if (sp == NULL || sp2 == NULL || todo == NULL || passed_on == NULL || sub == NULL || passed == NULL)
        st = kv_error(KV_ERR_OOM, "--retry: out of memory");
    if (st == KV_OK) st = kv_retry_spans(cases, n, results, sp);
    int ntodo = 0;
    for (int i = 0; st == KV_OK && i < n; i++)
        if (kv_span_failed(results, sp[i])) todo[ntodo++] = i;
    if (nretried) *nretried = ntodo;
    for (int attempt = 1; st == KV_OK && attempt <= retries && ntodo > 0; attempt++)
        st = kv_retry_once(cases, env, cfg, attempt, todo, &ntodo, sub, sp2, passed, passed_on);
    kv_result_list out = { 0 };
    int flaky = 0;
    for (int i = 0; st == KV_OK && i < n; i++) {
        if (passed_on[i] > 0) {
            flaky++;
            st = kv_flaky_rows(results, sp[i], &passed[i], passed_on[i], retries, &out);
            continue;
        }
        for (int k = sp[i].first; st == KV_OK && k < sp[i].first + sp[i].count; k++) {
            kv_check_result r = results->items[k];
            if (kv_retry_failed(r.status)) {
                const size_t len = strnlen(r.message, sizeof r.message);
                snprintf(r.message + len, sizeof r.message - len, "%s(failed again on all %d retr%s)",
                         len ? " " : "", retries, retries == 1 ? "y" : "ies");
            }
            st = kv_result_list_push(&out, &r);
        }
    }
    if (st == KV_OK) {
        kv_result_list_free(results);
        *results = out;
        if (nflaky) *nflaky = flaky;
    } else {
        kv_result_list_free(&out);
    }
    for (int i = 0; passed != NULL && i < n; i++) kv_result_list_free(&passed[i]);
    free(passed);
    free(sub);
    free(passed_on);
    free(todo);
    free(sp2);
    free(sp);
    return st;
}
