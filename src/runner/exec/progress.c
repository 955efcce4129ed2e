/* The progress line and the failures as they happen, behind
 * runner/exec/progress.h. */
/* TIOCGWINSZ (the terminal's width) is not POSIX. */
#define _DEFAULT_SOURCE
#include "runner/exec/progress.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

/* The live line is redrawn at most this often: a fast suite finishes
 * hundreds of cases a second, and a terminal need not see each one. */
#define KV_PROGRESS_REDRAW_SECONDS 0.1

static double kv_progress_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

kv_status kv_progress_seconds_env(double *seconds) {
    *seconds = KV_PROGRESS_DEFAULT_SECONDS;
    const char *v = getenv("KV_PROGRESS_SECONDS");
    if (v == NULL) return KV_OK;
    char *end = NULL;
    errno = 0;
    const double d = strtod(v, &end);
    if (v[0] == '\0' || end == v || *end != '\0' || errno != 0 || !isfinite(d) || d < 0 || d > 86400)
        return kv_error(KV_ERR_INVALID_ARG,
                        "KV_PROGRESS_SECONDS=%s: must be a number of seconds from 0 to 86400 (0: a progress line "
                        "only every 10%% of the cases)",
                        v);
    *seconds = d;
    return KV_OK;
}

/* "7.2 s", "12:34", "1:02:03". */
static void kv_fmt_clock(double secs, char *buf, size_t cap) {
    if (!(secs >= 0) || secs > 1e7) secs = 0;
    const long s = (long)(secs + 0.5);
    if (secs < 59.95) snprintf(buf, cap, "%.1f s", secs);
    else if (s >= 3600) snprintf(buf, cap, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, cap, "%ld:%02ld", s / 60, s % 60);
}

/* Rows per status so far, the statuses that occurred only. */
static int kv_fmt_counts(const kv_progress *p, char *buf, size_t cap) {
    int n = 0;
    buf[0] = '\0';
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) {
        if (p->counts[s] == 0 || (size_t)n >= cap) continue;
        const int k = snprintf(buf + n, cap - (size_t)n, "%s%s %lld", n ? " " : "",
                               kv_result_status_name((kv_result_status)s), (long long)p->counts[s]);
        if (k > 0) n += k;
    }
    if ((size_t)n >= cap) n = (int)cap - 1;
    return n;
}

/* The case running longest now, -1 when none. */
static int kv_slowest_running(const kv_progress *p, double now, double *secs) {
    int best = -1;
    for (int i = 0; i < p->total; i++)
        if (p->started[i] > 0 && (best < 0 || p->started[i] < p->started[best])) best = i;
    *secs = best >= 0 ? now - p->started[best] : 0;
    return best;
}

static double kv_eta(const kv_progress *p, double now) {
    if (p->done == 0) return -1;
    return (now - p->t0) / p->done * (p->total - p->done);
}

static int kv_term_width(FILE *out) {
    struct winsize ws;
    if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 80;
}

static void kv_erase(kv_progress *p) {
    if (!p->drawn) return;
    fputs("\r\033[K", p->out);
    p->drawn = false;
}

/* "[123/456 27%] PASS 900 FAIL 2 | ETA 0:12 | slowest: ID 3.2 s", cut to
 * the terminal's width so it never wraps (a wrapped line cannot be
 * redrawn in place). */
static void kv_draw(kv_progress *p, bool force) {
    const double now = kv_progress_now();
    if (!force && now - p->last_draw < KV_PROGRESS_REDRAW_SECONDS) return;
    p->last_draw = now;
    char line[1024], counts[256], eta[32];
    kv_fmt_counts(p, counts, sizeof counts);
    const double e = kv_eta(p, now);
    if (e < 0) snprintf(eta, sizeof eta, "?");
    else kv_fmt_clock(e, eta, sizeof eta);
    /* The ETA before the slowest case: a long case ID is what gets cut. */
    int n = snprintf(line, sizeof line, "[%d/%d %d%%] %s | ETA %s", p->done, p->total,
                     p->total > 0 ? (int)(100LL * p->done / p->total) : 100, counts[0] ? counts : "no rows yet", eta);
    double secs;
    const int slow = kv_slowest_running(p, now, &secs);
    if (slow >= 0 && n > 0 && (size_t)n < sizeof line) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(p->cases[slow], id, sizeof id);
        n += snprintf(line + n, sizeof line - (size_t)n, " | slowest: %.60s%s %.1f s", id, strlen(id) > 60 ? "..." : "",
                      secs);
    }
    const int width = kv_term_width(p->out);
    line[width - 1 < (int)sizeof line ? width - 1 : (int)sizeof line - 1] = '\0';
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->drawn = true;
}

static void kv_plain(kv_progress *p, double now) {
    p->last_plain = now;
    char counts[256], el[32], eta[32];
    kv_fmt_counts(p, counts, sizeof counts);
    kv_fmt_clock(now - p->t0, el, sizeof el);
    const double e = kv_eta(p, now);
    if (e < 0) snprintf(eta, sizeof eta, "?");
    else kv_fmt_clock(e, eta, sizeof eta);
    fprintf(p->out, "kvrun: progress: %d/%d cases (%d%%), rows: %s; %s elapsed, ETA %s", p->done, p->total,
            p->total > 0 ? (int)(100LL * p->done / p->total) : 100, counts[0] ? counts : "none yet", el, eta);
    double secs;
    const int slow = kv_slowest_running(p, now, &secs);
    if (slow >= 0) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(p->cases[slow], id, sizeof id);
        fprintf(p->out, "; slowest running: %s (%.1f s)", id, secs);
    }
    fputc('\n', p->out);
    fflush(p->out);
}

static void kv_on_started(void *ctx, int ci) {
    kv_progress *p = ctx;
    if (ci >= 0 && ci < p->total && p->started[ci] == 0) p->started[ci] = kv_progress_now();
}

static bool kv_row_bad(kv_result_status s) {
    return s == KV_RESULT_FAIL || s == KV_RESULT_ERROR || s == KV_RESULT_CRASH || s == KV_RESULT_TIMEOUT;
}

static void kv_on_finished(void *ctx, int ci, const kv_result_list *rows) {
    kv_progress *p = ctx;
    const double now = kv_progress_now();
    double secs = 0;
    if (ci >= 0 && ci < p->total) {
        if (p->started[ci] > 0) secs = now - p->started[ci];
        p->started[ci] = 0;
    }
    p->done++;
    kv_result_status worst = KV_RESULT_SKIP;
    bool any = false;
    for (int i = 0; i < rows->n; i++) {
        const kv_result_status s = rows->items[i].status;
        if ((int)s >= 0 && s < KV_RESULT_STATUS_COUNT) p->counts[s]++;
        if (!any || kv_result_status_severity(s) > kv_result_status_severity(worst)) worst = s;
        any = true;
    }
    /* The failures of this case, one line each, now: a long run shows
     * what broke while it goes on (the details come in the summary). */
    for (int i = 0; i < rows->n; i++) {
        const kv_check_result *r = &rows->items[i];
        if (!kv_row_bad(r->status)) continue;
        kv_erase(p);
        fprintf(p->out, "%-7s %s  (check %s, backend %s)\n", kv_result_status_name(r->status), r->case_id,
                r->check, r->backend);
    }
    if (p->level >= KV_PROGRESS_VERBOSE && ci >= 0 && ci < p->total) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(p->cases[ci], id, sizeof id);
        kv_erase(p);
        fprintf(p->out, "[%d/%d] %-7s %s (%d row%s, %.2f s)\n", p->done, p->total,
                any ? kv_result_status_name(worst) : "-", id, rows->n, rows->n == 1 ? "" : "s", secs);
    }
    if (p->tty) {
        kv_draw(p, !p->drawn || p->done == p->total);
        return;
    }
    const int tenth = p->total > 0 ? (int)(10LL * p->done / p->total) : 10;
    if (tenth > p->last_tenth || (p->interval > 0 && now - p->last_plain >= p->interval)) {
        p->last_tenth = tenth;
        kv_plain(p, now);
    } else {
        fflush(p->out);
    }
}

static void kv_on_tick(void *ctx) {
    kv_progress *p = ctx;
    if (p->tty) {
        kv_draw(p, false);
        return;
    }
    const double now = kv_progress_now();
    if (p->interval > 0 && now - p->last_plain >= p->interval) kv_plain(p, now);
}

kv_status kv_progress_init(kv_progress *p, FILE *out, bool tty, const kv_case *const *cases, int n,
                           kv_progress_level level, double interval) {
    memset(p, 0, sizeof *p);
    if (interval < 0) {
        kv_status st = kv_progress_seconds_env(&interval);
        if (st != KV_OK) return st;
    }
    p->out = out;
    p->tty = tty;
    p->level = level;
    p->interval = interval;
    p->cases = cases;
    p->total = n;
    p->started = calloc((size_t)(n > 0 ? n : 1), sizeof *p->started);
    if (p->started == NULL) return kv_error(KV_ERR_OOM, "progress: out of memory");
    p->t0 = p->last_plain = kv_progress_now();
    /* Quiet: nobody is told, so the pool does not even wake up for it. */
    if (level > KV_PROGRESS_QUIET && out != NULL)
        p->observer = (kv_isolate_observer){ kv_on_started, kv_on_finished, kv_on_tick, p };
    return KV_OK;
}

void kv_progress_end(kv_progress *p) {
    if (p->out != NULL) {
        kv_erase(p);
        fflush(p->out);
    }
    free(p->started);
    p->started = NULL;
    p->observer = (kv_isolate_observer){ 0 };
}
