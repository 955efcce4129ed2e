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

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Enough for a screenful with the counts below them: 1 + 15 + 1 lines of
 * groups, 1 + 15 + 1 of cases, 2 of counts: 36 lines. */
#define KV_SHORT_GROUPS 15
#define KV_SHORT_CASES 15
/* Layouts and dtypes named per group; the rest counted. */
#define KV_SHORT_VALUES 12
#define KV_SHORT_VALUE_MAX 24

typedef struct short_group {
    const kv_check_result *first;
    int64_t rows;
    int64_t by_status[KV_RESULT_STATUS_COUNT];
    char layouts[KV_SHORT_VALUES][KV_SHORT_VALUE_MAX];
    int nlayouts, more_layouts;
    char dtypes[KV_SHORT_VALUES][KV_SHORT_VALUE_MAX];
    int ndtypes, more_dtypes;
} short_group;

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

/* The layout= value of a case ID ("c" when the ID has none: contiguous
 * is the default and left out of IDs). Layout values hold no comma. */
static void layout_of(const char *id, char *buf, size_t cap) {
    const char *p = strstr(id, "layout=");
    while (p != NULL && p > id && p[-1] != ',' && p[-1] != '(') p = strstr(p + 1, "layout=");
    if (p == NULL) {
        snprintf(buf, cap, "c");
        return;
    }
    p += strlen("layout=");
    const size_t n = strcspn(p, ",)");
    snprintf(buf, cap, "%.*s", (int)n, p);
}

static void fold(char vals[][KV_SHORT_VALUE_MAX], int *n, int *more, const char *v) {
    for (int i = 0; i < *n; i++)
        if (strcmp(vals[i], v) == 0) return;
    if (*n < KV_SHORT_VALUES) snprintf(vals[(*n)++], KV_SHORT_VALUE_MAX, "%s", v);
    else (*more)++;
}

static bool same_group(const kv_check_result *a, const kv_check_result *b) {
    return strcmp(a->op, b->op) == 0 && strcmp(a->check, b->check) == 0 && strcmp(a->backend, b->backend) == 0;
}

static int group_cmp(const void *pa, const void *pb) {
    const kv_check_result *a = *(const kv_check_result *const *)pa, *b = *(const kv_check_result *const *)pb;
    int c = strcmp(a->op, b->op);
    if (c == 0) c = strcmp(a->check, b->check);
    if (c == 0) c = strcmp(a->backend, b->backend);
    return c;
}

static void put_values(FILE *out, const char *what, char vals[][KV_SHORT_VALUE_MAX], int n, int more) {
    fprintf(out, "; %s", what);
    for (int i = 0; i < n; i++) fprintf(out, " %s", vals[i]);
    if (more > 0) fprintf(out, " (and more)");
}

void kv_report_short_summary(FILE *out, const kv_result_list *kept) {
    int64_t nbad = 0;
    for (int i = 0; i < kept->n; i++) nbad += kv_result_status_is_bad(kept->items[i].status);
    if (nbad == 0) return;
    const bool color = kv_report_use_color(out);
    short_group *g = calloc(KV_SHORT_GROUPS, sizeof *g);
    const kv_check_result **rest = malloc((size_t)nbad * sizeof *rest);
    if (g == NULL || rest == NULL) {
        free(g);
        free(rest);
        return;
    }
    int ng = 0;
    int64_t nrest = 0;
    /* The groups in order of their first problem; the rows of groups past
     * KV_SHORT_GROUPS are set aside and their groups counted after. */
    for (int i = 0; i < kept->n; i++) {
        const kv_check_result *r = &kept->items[i];
        if (!kv_result_status_is_bad(r->status)) continue;
        int k = 0;
        while (k < ng && !same_group(g[k].first, r)) k++;
        if (k == ng) {
            if (ng == KV_SHORT_GROUPS) {
                rest[nrest++] = r;
                continue;
            }
            g[ng++].first = r;
        }
        short_group *x = &g[k];
        x->rows++;
        x->by_status[r->status]++;
        char lay[KV_SHORT_VALUE_MAX];
        layout_of(r->case_id, lay, sizeof lay);
        fold(x->layouts, &x->nlayouts, &x->more_layouts, lay);
        fold(x->dtypes, &x->ndtypes, &x->more_dtypes, kv_dtype_name(r->dtype));
    }
    qsort(rest, (size_t)nrest, sizeof *rest, group_cmp);
    int64_t more_groups = 0;
    for (int64_t i = 0; i < nrest; i++) more_groups += i == 0 || !same_group(rest[i - 1], rest[i]);
    const int64_t groups_total = ng + more_groups;
    fprintf(out, "== short summary: %lld problem%s in %lld group%s (op, check, backend):\n", (long long)nbad,
            nbad == 1 ? "" : "s", (long long)groups_total, groups_total == 1 ? "" : "s");
    for (int k = 0; k < ng; k++) {
        const short_group *x = &g[k];
        kv_result_status worst = x->first->status;
        for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
            if (x->by_status[s] > 0 && kv_result_status_severity((kv_result_status)s) > kv_result_status_severity(worst))
                worst = (kv_result_status)s;
        put_status(out, worst, color);
        fprintf(out, " %s %s", x->first->op, x->first->check);
        if (strchr(x->first->check, ':') == NULL) fprintf(out, " on %s", x->first->backend);
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
        put_values(out, x->nlayouts == 1 ? "layout" : "layouts", (char(*)[KV_SHORT_VALUE_MAX])x->layouts, x->nlayouts,
                   x->more_layouts);
        put_values(out, x->ndtypes == 1 ? "dtype" : "dtypes", (char(*)[KV_SHORT_VALUE_MAX])x->dtypes, x->ndtypes,
                   x->more_dtypes);
        fputc('\n', out);
    }
    if (more_groups > 0)
        fprintf(out, "... and %lld more group%s (%lld problem%s): report.html lists every group\n",
                (long long)more_groups, more_groups == 1 ? "" : "s", (long long)nrest, nrest == 1 ? "" : "s");
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
    free(g);
    free(rest);
}
