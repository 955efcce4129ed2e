/* matrix.md: the op x backend x dtype support matrix, for bring-up of a
 * backend and for READMEs. One row per (op, backend), sorted by op then
 * backend; one column per dtype that occurs in the run, in dtype order.
 * A cell summarizes every result of that (op, backend, dtype):
 *   ✗  some result failed: FAIL, ERROR, CRASH, TIMEOUT, or XFAIL (a known
 *      failure is still a kernel that does not work);
 *   ~  otherwise some result was FLAKY (failed, then passed on a retry:
 *      it works, but not every time);
 *   ✓  otherwise some result passed: PASS, or XPASS (it does work now);
 *   –  otherwise some result was UNSUPPORTED;
 *   blank: nothing ran (no result, or only SKIP).
 * A cell whose (op, dtype) the backend's plugin declares it supports
 * (kv_backend_desc's `support`, issue 21) gets a "ᵈ" after its mark:
 * declared against measured, so "✓ᵈ" is a kept promise and "✗ᵈ" or "ᵈ"
 * alone one that was broken or never tested. Declarations are read from
 * the plugins loaded when the matrix is written (a merge of shards that
 * loads none shows no marks). */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"

#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"

enum { CELL_NONE, CELL_UNSUPPORTED, CELL_PASS, CELL_FLAKY, CELL_FAIL };

static int cell_of(kv_result_status s) {
    switch (s) {
    case KV_RESULT_FAIL:
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    case KV_RESULT_XFAIL:
    case KV_RESULT_STATUS_COUNT: return CELL_FAIL;
    case KV_RESULT_PASS:
    case KV_RESULT_XPASS: return CELL_PASS;
    case KV_RESULT_FLAKY: return CELL_FLAKY;
    case KV_RESULT_UNSUPPORTED: return CELL_UNSUPPORTED;
    case KV_RESULT_SKIP: return CELL_NONE;
    }
    return CELL_FAIL;
}

/* The cell of every status in a kv_agg_opb.seen mask. */
static int cell_of_seen(unsigned seen) {
    int cell = CELL_NONE;
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        if ((seen >> s) & 1u && cell_of((kv_result_status)s) > cell) cell = cell_of((kv_result_status)s);
    return cell;
}

static const char *cell_text(int cell) {
    switch (cell) {
    case CELL_FAIL: return "✗";
    case CELL_FLAKY: return "~";
    case CELL_PASS: return "✓";
    case CELL_UNSUPPORTED: return "–";
    default: return " ";
    }
}

/* The device type of the loaded plugin called `name`, or
 * KV_DEVICE_TYPE_COUNT. */
static kv_device_type matrix_plugin(const char *name) {
    for (int i = 0; i < kv_backend_count(); i++) {
        const kv_backend_info *b = kv_backend_at(i);
        if (b->state == KV_BACKEND_LOADED && strcmp(b->name, name) == 0) return b->device_type;
    }
    return KV_DEVICE_TYPE_COUNT;
}

/* Markdown punctuation that could start emphasis, code or a table cell is
 * backslash-escaped; line breaks would end the row, so they become spaces. */
static void put_md(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (strchr("\\|*_`<>[]", c) != NULL) {
            fputc('\\', f);
            fputc(c, f);
        } else if (c < 0x20 || c == 0x7F) {
            fputc(' ', f);
        } else {
            fputc(c, f);
        }
    }
}

/* The aggregate's (op, backend) entries, sorted by op then backend. */
static const kv_report_agg *g_sort_agg;
static int cmp_opb(const void *pa, const void *pb) {
    const kv_agg_opb *x = &g_sort_agg->opbs[*(const int *)pa], *y = &g_sort_agg->opbs[*(const int *)pb];
    const int c = strcmp(g_sort_agg->ops[x->op].op, g_sort_agg->ops[y->op].op);
    return c ? c : strcmp(x->backend, y->backend);
}

kv_status kv_report_write_matrix(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_matrix: argument 'results': is NULL");
    kv_report_agg a;
    kv_status st = kv_report_agg_of(&a, results);
    if (st == KV_OK) st = kv_report_matrix_agg(&a, meta, path);
    kv_report_agg_free(&a);
    return st;
}

kv_status kv_report_matrix_agg(const kv_report_agg *a, const kv_report_meta *meta, const char *path) {
    const int nrows = a->nopbs;
    int *order = malloc(((size_t)nrows + 1) * sizeof *order);
    if (order == NULL) return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    for (int r = 0; r < nrows; r++) order[r] = r;
    g_sort_agg = a;
    qsort(order, (size_t)nrows, sizeof *order, cmp_opb);
    g_sort_agg = NULL;
    bool used[KV_DTYPE_COUNT] = { false };
    for (int r = 0; r < nrows; r++)
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++) used[d] |= a->opbs[r].rows[d] > 0;
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st == KV_OK) {
        FILE *f = rf.f;
        fputs("# kvsuite support matrix\n\n", f);
        if (meta != NULL && meta->run_name[0]) {
            fputs("Run: ", f);
            put_md(f, meta->run_name);
            fputs(". ", f);
        }
        if (meta != NULL) fprintf(f, "Seed %llu. ", (unsigned long long)meta->seed);
        fprintf(f, "%lld results.\n\n", (long long)a->nrows);
        char inc[512];
        if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) {
            fputs("**", f);
            put_md(f, inc);
            fputs("**\n\n", f);
        }
        fputs("✓ passes, ✗ fails (FAIL, ERROR, CRASH, TIMEOUT or XFAIL), ~ flaky (failed, then passed on a retry), – unsupported, blank: not run.\n\n", f);
        fputs("ᵈ after a mark: the plugin declares that (op, dtype) supported (docs/bringup.md); declared vs "
              "measured.\n\n",
              f);
        fputs("| op | backend |", f);
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
            if (used[d]) fprintf(f, " %s |", kv_dtype_name((kv_dtype)d));
        fputs("\n|---|---|", f);
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
            if (used[d]) fputs(":-:|", f);
        fputc('\n', f);
        for (int k = 0; k < nrows; k++) {
            const kv_agg_opb *b = &a->opbs[order[k]];
            fputs("| ", f);
            put_md(f, a->ops[b->op].op);
            fputs(" | ", f);
            put_md(f, b->backend);
            fputs(" |", f);
            const kv_device_type plugin = matrix_plugin(b->backend);
            for (int d = 0; d < (int)KV_DTYPE_COUNT; d++) {
                if (!used[d]) continue;
                const bool declared = plugin != KV_DEVICE_TYPE_COUNT &&
                                      kv_backend_declared(plugin, a->ops[b->op].op, (kv_dtype)d) == 1;
                fprintf(f, " %s%s |", cell_text(cell_of_seen(b->seen[d])), declared ? "ᵈ" : "");
            }
            fputc('\n', f);
        }
        st = kv_report_file_close(&rf);
    }
    free(order);
    return st;
}
