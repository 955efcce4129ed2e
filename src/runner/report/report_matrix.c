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
 *   blank: nothing ran (no result, or only SKIP). */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"

#include <stdlib.h>
#include <string.h>

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

static const char *cell_text(int cell) {
    switch (cell) {
    case CELL_FAIL: return "✗";
    case CELL_FLAKY: return "~";
    case CELL_PASS: return "✓";
    case CELL_UNSUPPORTED: return "–";
    default: return " ";
    }
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

typedef struct row_ref {
    const char *op, *backend;
} row_ref;

static int cmp_row(const void *a, const void *b) {
    const row_ref *x = a, *y = b;
    int c = strcmp(x->op, y->op);
    return c ? c : strcmp(x->backend, y->backend);
}

kv_status kv_report_write_matrix(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_matrix: argument 'results': is NULL");
    const int n = results->n;
    row_ref *rows = malloc(((size_t)n + 1) * sizeof *rows);
    int *row_of = malloc(((size_t)n + 1) * sizeof *row_of);
    if (rows == NULL || row_of == NULL) {
        free(rows);
        free(row_of);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    int nrows = 0;
    for (int i = 0; i < n; i++) {
        row_ref key = { results->items[i].op, results->items[i].backend };
        int k = 0;
        while (k < nrows && cmp_row(&rows[k], &key) != 0) k++;
        if (k == nrows) rows[nrows++] = key;
    }
    qsort(rows, (size_t)nrows, sizeof *rows, cmp_row);
    bool used[KV_DTYPE_COUNT] = { false };
    for (int i = 0; i < n; i++) {
        row_ref key = { results->items[i].op, results->items[i].backend };
        row_ref *hit = bsearch(&key, rows, (size_t)nrows, sizeof *rows, cmp_row);
        row_of[i] = (int)(hit - rows);
        kv_dtype dt = results->items[i].dtype;
        if ((int)dt >= 0 && dt < KV_DTYPE_COUNT) used[dt] = true;
    }
    unsigned char *cells = calloc((size_t)nrows * KV_DTYPE_COUNT + 1, 1);
    if (cells == NULL) {
        free(rows);
        free(row_of);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    for (int i = 0; i < n; i++) {
        kv_dtype dt = results->items[i].dtype;
        if ((int)dt < 0 || dt >= KV_DTYPE_COUNT) continue;
        unsigned char *cell = &cells[(size_t)row_of[i] * KV_DTYPE_COUNT + (size_t)dt];
        int c = cell_of(results->items[i].status);
        if (c > *cell) *cell = (unsigned char)c;
    }

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
        fprintf(f, "%d results.\n\n", n);
        char inc[512];
        if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) {
            fputs("**", f);
            put_md(f, inc);
            fputs("**\n\n", f);
        }
        fputs("✓ passes, ✗ fails (FAIL, ERROR, CRASH, TIMEOUT or XFAIL), ~ flaky (failed, then passed on a retry), – unsupported, blank: not run.\n\n", f);
        fputs("| op | backend |", f);
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
            if (used[d]) fprintf(f, " %s |", kv_dtype_name((kv_dtype)d));
        fputs("\n|---|---|", f);
        for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
            if (used[d]) fputs(":-:|", f);
        fputc('\n', f);
        for (int r = 0; r < nrows; r++) {
            fputs("| ", f);
            put_md(f, rows[r].op);
            fputs(" | ", f);
            put_md(f, rows[r].backend);
            fputs(" |", f);
            for (int d = 0; d < (int)KV_DTYPE_COUNT; d++)
                if (used[d]) fprintf(f, " %s |", cell_text(cells[(size_t)r * KV_DTYPE_COUNT + (size_t)d]));
            fputc('\n', f);
        }
        st = kv_report_file_close(&rf);
    }
    free(rows);
    free(row_of);
    free(cells);
    return st;
}
