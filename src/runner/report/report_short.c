/* The short summary that ends a red run's console output, after every
 * problem in full (report_console.c): what broke, grouped, in a screenful.
 *
 *   == short summary: 1038 problems in 3 groups (op, check, backend)
 *   FAIL  mul.Tensor variants:npu: 9 cases; layouts t s b w t:c c:s w:c c:w; f32
 *   ...
 *   == failed cases (the first 15 of 1038; failures.txt lists all):
 *   FAIL  mul.Tensor(dtype=f32,shape=[4,5],layout=t) variants:npu
 *
 * A group is one (op, check, backend); its cases' layouts and dtypes are
 * folded into one line each, in order of first appearance, so a kernel
 * that is wrong on every strided layout reads as one line, not nine.
 * Colour (status words) only at a terminal, and never under NO_COLOR
 * (no-color.org: set to a non-empty value). */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_groups.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Enough for a screenful with the counts below them: 1 + 15 + 1 lines of
 * groups, 1 + 15 + 1 of cases, 2 of counts: 36 lines. */
#define KV_SHORT_GROUPS 15
#define KV_SHORT_CASES 15

bool kv_report_use_color(FILE *out) {
    const char *no = getenv("NO_COLOR");
    if (no != NULL && no[0] != '\0') return false;
    return out != NULL && isatty(fileno(out));
}

static const char *status_color(kv_result_status s) {
    switch (s) {
    case KV_RESULT_FAIL:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    case KV_RESULT_XPASS: return "\033[1;31m"; /* bold red */
    case KV_RESULT_ERROR: return "\033[1;35m"; /* bold magenta: the harness, not the kernel */
    case KV_RESULT_FLAKY:
    case KV_RESULT_XFAIL: return "\033[33m"; /* yellow */
    case KV_RESULT_PASS:
    case KV_RESULT_UNSUPPORTED:
    case KV_RESULT_SKIP:
    case KV_RESULT_STATUS_COUNT: break;
    }
    return "";
}

static void put_status(FILE *out, kv_result_status s, bool color) {
    const char *c = color ? status_color(s) : "";
    fprintf(out, "%s%-5s%s", c, kv_result_status_name(s), c[0] ? "\033[0m" : "");
}

static void put_values(FILE *out, const char *what, const char vals[][KV_GROUP_VALUE_MAX], int n, int more) {
    fprintf(out, "; %s", what);
    for (int i = 0; i < n; i++) fprintf(out, " %s", vals[i]);
    if (more > 0) fprintf(out, " (and more)");
}

void kv_report_short_summary(FILE *out, const kv_result_list *kept, const char *accel_target) {
    kv_report_groups gs;
    if (kv_report_groups_of(kept, KV_SHORT_GROUPS, &gs) != KV_OK || gs.nbad == 0) {
        kv_report_groups_free(&gs);
        return;
    }
    const bool color = kv_report_use_color(out);
    const int64_t nbad = gs.nbad, groups_total = gs.n + gs.more_groups;
    fprintf(out, "== short summary: %lld problem%s in %lld group%s (op, check, backend):\n", (long long)nbad,
            nbad == 1 ? "" : "s", (long long)groups_total, groups_total == 1 ? "" : "s");
    for (int k = 0; k < gs.n; k++) {
        const kv_report_group *x = &gs.items[k];
        put_status(out, kv_report_group_worst(x), color);
        fprintf(out, " %s %s", x->first->op, x->first->check);
        if (strchr(x->first->check, ':') == NULL) fprintf(out, " on %s", x->first->backend);
        const char *target = kv_report_accel_blame(x->first, accel_target);
        if (target != NULL) fprintf(out, " (the accel target: %s)", target);
        fprintf(out, ": %lld case%s", (long long)x->rows, x->rows == 1 ? "" : "s");
        int kinds = 0;
        for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++) kinds += x->by_status[s] > 0;
        if (kinds > 1) {
            fputs(" (", out);
            for (int s = 0, m = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
                if (x->by_status[s] > 0)
                    fprintf(out, "%s%s %lld", m++ ? ", " : "", kv_result_status_name((kv_result_status)s),
                            (long long)x->by_status[s]);
            fputc(')', out);
        }
        put_values(out, x->nlayouts == 1 ? "layout" : "layouts", x->layouts, x->nlayouts, x->more_layouts);
        put_values(out, x->ndtypes == 1 ? "dtype" : "dtypes", x->dtypes, x->ndtypes, x->more_dtypes);
        fputc('\n', out);
    }
    if (gs.more_groups > 0)
        fprintf(out, "... and %lld more group%s (%lld problem%s): report.html lists every group\n",
                (long long)gs.more_groups, gs.more_groups == 1 ? "" : "s", (long long)gs.more_rows,
                gs.more_rows == 1 ? "" : "s");
    kv_report_groups_free(&gs);
    const int64_t shown = nbad < KV_SHORT_CASES ? nbad : KV_SHORT_CASES;
    if (nbad == shown) fprintf(out, "== failed cases:\n");
    else fprintf(out, "== failed cases (the first %lld of %lld; failures.txt lists all):\n", (long long)shown, (long long)nbad);
    for (int i = 0, m = 0; i < kept->n && m < shown; i++) {
        const kv_check_result *r = &kept->items[i];
        if (!kv_result_status_is_bad(r->status)) continue;
        m++;
        put_status(out, r->status, color);
        fprintf(out, " %s %s", r->case_id, r->check);
        if (strchr(r->check, ':') == NULL) fprintf(out, " on %s", r->backend);
        fputc('\n', out);
    }
}
