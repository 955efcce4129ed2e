/* junit.xml: one <testsuite> per op (in order of first appearance), one
 * <testcase> per (case, check): name = case ID, classname = "op.check".
 *   FAIL, XPASS              -> <failure type="STATUS">
 *   ERROR, CRASH, TIMEOUT    -> <error type="STATUS">
 *   SKIP, UNSUPPORTED        -> <skipped>
 *   XFAIL                    -> <skipped type="XFAIL" message=the baseline
 *                               entry and the original failure>, so a
 *                               dashboard shows known failures as such
 *                               (and the run still passes)
 *   PASS                     -> passing testcase
 * The repro line (<system-out>) is on every testcase that is not PASS,
 * SKIP or UNSUPPORTED.
 *   FLAKY                    -> under --flaky=pass (the default) a passing
 *                               testcase holding <flakyFailure type="FLAKY"
 *                               message=how it failed first>, Maven
 *                               Surefire's convention for a test that
 *                               passed on a rerun (Jenkins, GitLab and
 *                               most JUnit readers count it as passed and
 *                               show or ignore the child); under
 *                               --flaky=fail <failure type="FLAKY">
 * Everything is escaped for XML 1.0 (report.c), including the control
 * characters XML cannot carry at all. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"

#include <errno.h>
#include <stdio.h>
#include <sys/types.h>

#include <stdlib.h>
#include <string.h>

typedef struct suite_counts {
    int64_t tests, failures, errors, skipped;
    double seconds;
} suite_counts;

static void put_counts(FILE *f, const suite_counts *c) {
    fprintf(f, " tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" skipped=\"%lld\" time=\"%.6f\"",
            (long long)c->tests, (long long)c->failures, (long long)c->errors, (long long)c->skipped, c->seconds);
}

/* The console block of a result, as one escaped text. */
static void put_details(FILE *f, const kv_check_result *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem == NULL) {
        kv_report_put_escaped(f, r->message, false);
        return;
    }
    kv_report_put_problem(mem, r, NULL);
    fclose(mem);
    kv_report_put_escaped(f, text, false);
    free(text);
}

static const char *short_message(const kv_check_result *r) {
    if (r->message[0]) return r->message;
    switch (r->status) {
    case KV_RESULT_XPASS: return "passed, but the baseline expects a failure: the baseline entry is stale";
    case KV_RESULT_CRASH: return "the worker crashed";
    case KV_RESULT_TIMEOUT: return "the case timed out";
    case KV_RESULT_FLAKY: return "failed, then passed on a retry";
    case KV_RESULT_PASS:
    case KV_RESULT_FAIL:
    case KV_RESULT_ERROR:
    case KV_RESULT_UNSUPPORTED:
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    case KV_RESULT_STATUS_COUNT: break;
    }
    return kv_result_status_name(r->status);
}

/* Writes one testcase and counts it in `c` (time aside: the suite's
 * time is the aggregate's). */
static void put_testcase(FILE *f, const kv_check_result *r, bool flaky_fail, suite_counts *c) {
    /* Compact, as a full run has 80,000 testcases: no indent, and the time
     * in milliseconds, left out below half of one (what dashboards show
     * as 0 anyway; the suite's time= keeps the total). */
    fputs("<testcase name=\"", f);
    kv_report_put_escaped(f, r->case_id, true);
    fputs("\" classname=\"", f);
    kv_report_put_escaped(f, r->op, true);
    fputc('.', f);
    kv_report_put_escaped(f, r->check, true);
    fputc('"', f);
    if (r->seconds >= 0.0005) fprintf(f, " time=\"%.3f\"", r->seconds);
    const char *tag = NULL;
    switch (r->status) {
    case KV_RESULT_FAIL:
    case KV_RESULT_XPASS: tag = "failure"; break;
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    case KV_RESULT_STATUS_COUNT: tag = "error"; break;
    case KV_RESULT_SKIP:
    case KV_RESULT_XFAIL:
    case KV_RESULT_UNSUPPORTED: tag = "skipped"; break;
    case KV_RESULT_FLAKY: tag = flaky_fail ? "failure" : "flakyFailure"; break;
    case KV_RESULT_PASS: break;
    }
    c->tests++;
    if (tag != NULL && strcmp(tag, "failure") == 0) c->failures++;
    else if (tag != NULL && strcmp(tag, "error") == 0) c->errors++;
    else if (tag != NULL && strcmp(tag, "skipped") == 0) c->skipped++;
    /* The repro line only where there is something to reproduce: on a
     * passing testcase it was over half of a full run's junit.xml. A skip
     * (SKIP, UNSUPPORTED) has nothing to reproduce; XFAIL has. */
    const bool repro = r->repro[0] != '\0' && tag != NULL && r->status != KV_RESULT_SKIP &&
                       r->status != KV_RESULT_UNSUPPORTED;
    const bool has_out = repro || r->output[0] != '\0';
    if (tag == NULL && !has_out) {
        fputs("/>\n", f);
        return;
    }
    fputs(">\n", f);
    if (tag != NULL) {
        fprintf(f, "<%s type=\"%s\" message=\"", tag, kv_result_status_name(r->status));
        kv_report_put_escaped(f, short_message(r), true);
        if (strcmp(tag, "skipped") == 0) {
            fputs("\"/>\n", f);
        } else {
            fputs("\">", f);
            put_details(f, r);
            fprintf(f, "</%s>\n", tag);
        }
    }
    if (has_out) {
        fputs("<system-out>", f);
        if (repro) {
            fputs("repro: ", f);
            kv_report_put_escaped(f, r->repro, false);
            fputc('\n', f);
        }
        /* What the case printed (a plugin's lines), captured by its worker. */
        if (r->output[0]) {
            fputs("output:\n", f);
            kv_report_put_escaped(f, r->output, false);
            fputc('\n', f);
        }
        fputs("</system-out>\n", f);
    }
    fputs("</testcase>\n", f);
}

static void put_properties(FILE *f, const kv_report_meta *meta) {
    char buf[64];
    fputs("    <properties>\n", f);
    fprintf(f, "      <property name=\"seed\" value=\"%llu\"/>\n", (unsigned long long)meta->seed);
    if (meta->shard_n > 0) fprintf(f, "      <property name=\"shard\" value=\"%d/%d\"/>\n", meta->shard_k, meta->shard_n);
    if (meta->merged_from > 0) fprintf(f, "      <property name=\"merged_from\" value=\"%d\"/>\n", meta->merged_from);
    kv_report_fmt_time(meta->start_time, buf, sizeof buf);
    fprintf(f, "      <property name=\"start_time\" value=\"%s\"/>\n", buf);
    char inc[512];
    if (kv_report_incomplete_text(meta, inc, (int)sizeof inc)) {
        fputs("      <property name=\"incomplete\" value=\"", f);
        kv_report_put_escaped(f, inc, true);
        fputs("\"/>\n", f);
    }
    fputs("      <property name=\"options\" value=\"", f);
    kv_report_put_escaped(f, meta->options, true);
    fputs("\"/>\n    </properties>\n", f);
}

/* A suite's testcases wait in memory up to this many bytes, then go to
 * the spool file as one block: memory stays (ops x this), whatever the
 * number of rows. */
#define JUNIT_BLOCK_BYTES 16384

typedef struct spool_op {
    FILE *mem;
    char *buf;
    size_t len;
    suite_counts counts;     /* of the testcases written (a fold is one) */
} spool_op;

/* The rows of one case that pass, skip or are unsupported become one
 * testcase: "op.variants:CPU" when they are one check's variants
 * ("variants:CPU/avx2", ...), "op.rows" when they span checks, the row's
 * own check when there is one. A full run has about 90,000 rows, nearly
 * all passing, and a dashboard needs the failing ones, each still a
 * testcase of its own (with GitLab's 30 MB limit per file and the suite
 * growing, one testcase per passing row does not fit). results.jsonl
 * keeps every row. */
typedef struct junit_fold {
    bool active;
    bool mixed;              /* rows of more than one check family */
    int op;
    int n, nskip;
    double seconds;
    kv_check_result row;     /* the first row, its check cut at the '/' */
    char check[64];          /* the first row's whole check, for a fold of one */
} junit_fold;

typedef struct spool_block {
    int op;
    off_t off;
    size_t len;
} spool_block;

struct kv_junit_spool {
    bool flaky_fail;
    FILE *file;              /* tmpfile(): gone when closed */
    off_t size;
    spool_op **ops;          /* each its own block: a memstream keeps the addresses of buf and len */
    int nops, cap_ops;
    spool_block *blocks;
    int nblocks, cap_blocks;
    junit_fold fold;
};

/* The counts of one suite (or, with op < 0, of all): of the testcases
 * written, so a fold counts once; the time from the aggregate. */
static suite_counts counts_of(const kv_junit_spool *s, const kv_report_agg *a, int op) {
    suite_counts c = { 0 };
    for (int o = 0; o < a->nops; o++) {
        if (op >= 0 && o != op) continue;
        if (o < s->nops) {
            const suite_counts *n = &s->ops[o]->counts;
            c.tests += n->tests;
            c.failures += n->failures;
            c.errors += n->errors;
            c.skipped += n->skipped;
        }
        c.seconds += a->ops[o].seconds;
    }
    return c;
}

kv_junit_spool *kv_junit_spool_new(bool flaky_fail) {
    kv_junit_spool *s = calloc(1, sizeof *s);
    if (s == NULL) {
        kv_error(KV_ERR_OOM, "junit.xml: out of memory");
        return NULL;
    }
    s->flaky_fail = flaky_fail;
    s->file = tmpfile();
    if (s->file == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "junit.xml: cannot create a temporary file: %s", strerror(errno));
        free(s);
        return NULL;
    }
    return s;
}

void kv_junit_spool_free(kv_junit_spool *s) {
    if (s == NULL) return;
    for (int i = 0; i < s->nops; i++) {
        if (s->ops[i]->mem != NULL) fclose(s->ops[i]->mem);
        free(s->ops[i]->buf);
        free(s->ops[i]);
    }
    free(s->ops);
    free(s->blocks);
    if (s->file != NULL) fclose(s->file);
    free(s);
}

/* The op's pending testcases become one block of the spool file. */
static kv_status spool_flush(kv_junit_spool *s, int op) {
    spool_op *o = s->ops[op];
    if (o->mem == NULL) return KV_OK;
    fclose(o->mem);
    o->mem = NULL;
    kv_status st = KV_OK;
    if (o->len > 0) {
        if (s->nblocks == s->cap_blocks) {
            const int cap = s->cap_blocks ? 2 * s->cap_blocks : 64;
            spool_block *nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
            if (nb == NULL) st = kv_error(KV_ERR_OOM, "junit.xml: out of memory");
            else {
                s->blocks = nb;
                s->cap_blocks = cap;
            }
        }
        if (st == KV_OK && fwrite(o->buf, 1, o->len, s->file) != o->len)
            st = kv_error(KV_ERR_INVALID_ARG, "junit.xml: writing its temporary file: %s", strerror(errno));
        if (st == KV_OK) {
            s->blocks[s->nblocks++] = (spool_block){ op, s->size, o->len };
            s->size += (off_t)o->len;
        }
    }
    free(o->buf);
    o->buf = NULL;
    o->len = 0;
    return st;
}

/* One testcase into its op's pending block. */
static kv_status spool_put(kv_junit_spool *s, int op, const kv_check_result *r) {
    spool_op *o = s->ops[op];
    if (o->mem == NULL && (o->mem = open_memstream(&o->buf, &o->len)) == NULL)
        return kv_error(KV_ERR_OOM, "junit.xml: out of memory");
    put_testcase(o->mem, r, s->flaky_fail, &o->counts);
    if (fflush(o->mem) != 0) return kv_error(KV_ERR_OOM, "junit.xml: out of memory");
    return o->len >= JUNIT_BLOCK_BYTES ? spool_flush(s, op) : KV_OK;
}

/* The folded rows as one testcase: passing when any passed, else skipped
 * with the first row's reason and the count. */
static kv_status fold_flush(kv_junit_spool *s) {
    junit_fold *fo = &s->fold;
    if (!fo->active) return KV_OK;
    fo->active = false;
    kv_check_result *r = &fo->row;
    r->seconds = fo->seconds;
    /* r->output, the plugin's stdout and stderr during the case, is every
     * row's: the folded testcase carries it once. */
    if (fo->n == 1) snprintf(r->check, sizeof r->check, "%s", fo->check);
    else if (fo->mixed) snprintf(r->check, sizeof r->check, "rows");
    if (fo->nskip < fo->n) {
        r->status = KV_RESULT_PASS;
    } else if (fo->n > 1) {
        char first[KV_RESULT_MESSAGE_MAX];
        snprintf(first, sizeof first, "%s", r->message);
        r->status = KV_RESULT_SKIP;
        snprintf(r->message, sizeof r->message, "all %d rows skipped or unsupported; the first: %.900s", fo->n, first);
    }
    return spool_put(s, fo->op, r);
}

kv_status kv_junit_spool_add(kv_junit_spool *s, int op, const kv_check_result *r) {
    if (op < 0) return kv_error(KV_ERR_INVALID_ARG, "junit.xml: a row of '%s' without an op index", r->case_id);
    while (s->nops <= op) {
        if (s->nops == s->cap_ops) {
            const int cap = s->cap_ops ? 2 * s->cap_ops : 64;
            spool_op **no = realloc(s->ops, (size_t)cap * sizeof *no);
            if (no == NULL) return kv_error(KV_ERR_OOM, "junit.xml: out of memory");
            s->ops = no;
            s->cap_ops = cap;
        }
        if ((s->ops[s->nops] = calloc(1, sizeof **s->ops)) == NULL) return kv_error(KV_ERR_OOM, "junit.xml: out of memory");
        s->nops++;
    }
    const char *slash = strchr(r->check, '/');
    const size_t family = slash != NULL ? (size_t)(slash - r->check) : strlen(r->check);
    const bool foldable =
        r->status == KV_RESULT_PASS || r->status == KV_RESULT_SKIP || r->status == KV_RESULT_UNSUPPORTED;
    junit_fold *fo = &s->fold;
    if (fo->active && (!foldable || fo->op != op || strcmp(fo->row.case_id, r->case_id) != 0)) {
        const kv_status st = fold_flush(s);
        if (st != KV_OK) return st;
    }
    if (foldable) {
        if (!fo->active) {
            fo->active = true;
            fo->mixed = false;
            fo->op = op;
            fo->n = fo->nskip = 0;
            fo->seconds = 0;
            fo->row = *r;
            snprintf(fo->check, sizeof fo->check, "%s", r->check);
            fo->row.check[family] = '\0';
            fo->row.repro[0] = '\0';
        } else if (strncmp(fo->row.check, r->check, family) != 0 || fo->row.check[family] != '\0') {
            fo->mixed = true;
        }
        fo->n++;
        fo->nskip += r->status != KV_RESULT_PASS;
        fo->seconds += r->seconds;
        return KV_OK;
    }
    return spool_put(s, op, r);
}

/* Copies the spool's bytes [off, off+len) to f. */
static kv_status spool_copy(kv_junit_spool *s, off_t off, size_t len, FILE *f) {
    char buf[8192];
    if (fseeko(s->file, off, SEEK_SET) != 0)
        return kv_error(KV_ERR_INVALID_ARG, "junit.xml: reading its temporary file: %s", strerror(errno));
    while (len > 0) {
        const size_t want = len < sizeof buf ? len : sizeof buf;
        const size_t got = fread(buf, 1, want, s->file);
        if (got != want) return kv_error(KV_ERR_INVALID_ARG, "junit.xml: its temporary file is short");
        fwrite(buf, 1, got, f);
        len -= got;
    }
    return KV_OK;
}

kv_status kv_junit_spool_write(kv_junit_spool *s, const kv_report_agg *a, const kv_report_meta *meta,
                               const char *path) {
    kv_report_meta empty;
    if (meta == NULL) {
        kv_report_meta_init(&empty);
        meta = &empty;
    }
    kv_status st = fold_flush(s);
    for (int o = 0; o < s->nops && st == KV_OK; o++) st = spool_flush(s, o);
    if (st == KV_OK && fflush(s->file) != 0)
        st = kv_error(KV_ERR_INVALID_ARG, "junit.xml: writing its temporary file: %s", strerror(errno));
    if (st != KV_OK) return st;
    kv_report_file rf;
    st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    FILE *f = rf.f;
    const suite_counts total = counts_of(s, a, -1);
    char ts[64];
    kv_report_fmt_time(meta->start_time, ts, sizeof ts);
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"kvsuite", f);
    if (meta->run_name[0]) {
        fputc(' ', f);
        kv_report_put_escaped(f, meta->run_name, true);
    }
    fputc('"', f);
    /* No skipped= here: junit-10.xsd (Jenkins xUnit, tests/junit-10.xsd)
     * allows it on <testsuite> only; each suite carries its count. */
    fprintf(f, " tests=\"%lld\" failures=\"%lld\" errors=\"%lld\" time=\"%.6f\"", (long long)total.tests,
            (long long)total.failures, (long long)total.errors, total.seconds);
    fputs(">\n", f);
    for (int o = 0; o < a->nops && st == KV_OK; o++) {
        const suite_counts c = counts_of(s, a, o);
        fputs("  <testsuite name=\"", f);
        kv_report_put_escaped(f, a->ops[o].op, true);
        fputc('"', f);
        put_counts(f, &c);
        if (meta->start_time != 0) fprintf(f, " timestamp=\"%.19s\"", ts); /* JUnit wants no zone suffix */
        fputs(">\n", f);
        put_properties(f, meta);
        for (int b = 0; b < s->nblocks && st == KV_OK; b++)
            if (s->blocks[b].op == o) st = spool_copy(s, s->blocks[b].off, s->blocks[b].len, f);
        fputs("  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
    if (st != KV_OK) {
        kv_report_file_discard(&rf);
        return st;
    }
    return kv_report_file_close(&rf);
}

kv_status kv_report_write_junit(const kv_result_list *results, const kv_report_meta *meta, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_junit: argument 'results': is NULL");
    kv_report_agg a;
    kv_report_agg_init(&a);
    kv_junit_spool *s = kv_junit_spool_new(meta != NULL && meta->flaky_fail);
    kv_status st = s == NULL ? kv_last_error() : KV_OK;
    for (int i = 0; i < results->n && st == KV_OK; i++) {
        st = kv_report_agg_add(&a, &results->items[i]);
        if (st == KV_OK) st = kv_junit_spool_add(s, a.last_op, &results->items[i]);
    }
    if (st == KV_OK) st = kv_junit_spool_write(s, &a, meta, path);
    kv_junit_spool_free(s);
    kv_report_agg_free(&a);
    return st;
}
