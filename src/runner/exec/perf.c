/* kvrun --mode=perf: the measurement (runner/perf.h). The reports are
 * perf_report.c. */
#include "runner/exec/perf.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/backend.h"
#include "kv/dtype.h"
#include "kv/stack.h"
#include "runner/check/check.h"
#include "runner/exec/driver.h"
#include "runner/report/report.h"

const char *kv_perf_metric_name(kv_perf_metric m) {
    switch (m) {
    case KV_PERF_METRIC_TIME: return "time";
    case KV_PERF_METRIC_INSTRUCTIONS: return "instructions";
    }
    return "?";
}

void kv_perf_options_init(kv_perf_options *o) {
    memset(o, 0, sizeof *o);
    o->warmup = KV_PERF_DEFAULT_WARMUP;
    o->reps = KV_PERF_DEFAULT_REPS;
}

void kv_perf_report_free(kv_perf_report *r) {
    for (int i = 0; i < r->n; i++) free(r->rows[i].samples_ns);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

static kv_perf_row *perf_row_new(kv_perf_report *r) {
    if (r->n == r->cap) {
        const int cap = r->cap ? r->cap * 2 : 32;
        kv_perf_row *rows = realloc(r->rows, (size_t)cap * sizeof *rows);
        if (rows == NULL) return NULL;
        r->rows = rows;
        r->cap = cap;
    }
    kv_perf_row *row = &r->rows[r->n++];
    memset(row, 0, sizeof *row);
    return row;
}

static uint64_t perf_now(const kv_perf_options *o) {
    if (o->clock != NULL) return o->clock(o->clock_ctx);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double perf_tensor_bytes(const kv_tensor *t) {
    return t == NULL ? 0.0 : (double)kv_tensor_numel(t) * (double)kv_dtype_size(t->dtype);
}

static double perf_stack_bytes(const kv_stack *s) {
    double b = 0.0;
    for (int i = 0; i < s->size; i++) {
        const kv_ivalue *v = &s->slots[i];
        if (v->tag == KV_IV_TENSOR) b += perf_tensor_bytes(v->v.tensor);
        if (v->tag == KV_IV_TENSOR_LIST)
            for (int j = 0; j < v->v.tensors.n; j++) b += perf_tensor_bytes(v->v.tensors.items[j]);
    }
    return b;
}

/* FLOPs of one matmul-family call (2*m*n*k, times the batch); 0 for
 * every other op, which is rated by bytes. */
static double perf_flops(const kv_op *op, const kv_case_inputs *in) {
    const char *name = kv_op_name(op);
    const size_t len = strcspn(name, ".");
    const kv_tensor *a = NULL, *b = NULL;
    int batch_dims = 0;
    if (len == 2 && strncmp(name, "mm", 2) == 0) {
        a = in->tensors[0], b = in->tensors[1];
    } else if (len == 3 && strncmp(name, "bmm", 3) == 0) {
        a = in->tensors[0], b = in->tensors[1], batch_dims = 1;
    } else if (len == 5 && strncmp(name, "addmm", 5) == 0) {
        a = in->tensors[1], b = in->tensors[2];
    } else {
        return 0.0;
    }
    if (a == NULL || b == NULL || a->ndim != 2 + batch_dims || b->ndim != 2 + batch_dims) return 0.0;
    const double batch = batch_dims ? (double)a->sizes[0] : 1.0;
    const double m = (double)a->sizes[batch_dims], k = (double)a->sizes[batch_dims + 1];
    const double n = (double)b->sizes[batch_dims + 1];
    return 2.0 * batch * m * n * k;
}

/* One call of variant `name`; the returns are released. *out_bytes gets
 * the bytes of the tensors it returned. */
static kv_status perf_call(const kv_op *op, kv_key key, const char *name, const kv_case_inputs *in,
                           double *out_bytes) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < in->nargs; i++) {
        if (kv_stack_push(&s, in->args[i]) != KV_OK) return kv_last_error();
    }
    const kv_status st = kv_tune_call_variant(op, key, name, &s);
    /* On an error the stack still holds the borrowed arguments: nothing
     * of it is ours to release. */
    if (st != KV_OK) return st;
    if (out_bytes != NULL) *out_bytes = perf_stack_bytes(&s);
    kv_stack_clear_returns(&s);
    return KV_OK;
}

static int perf_cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* One variant's measurement: its own inputs (an in-place op then starts
 * every variant from the same values), its timed calls so far. */
typedef struct perf_meas {
    kv_perf_row *row;
    kv_case_inputs own;
    kv_case_inputs *in; /* &own, or in rounds of an op that writes no argument, the first variant's */
    bool have_in;
    kv_status st;
    uint64_t *times;
    int done;
    double in_bytes, out_bytes, flops;
    uint64_t warm_ns; /* the last untimed call */
} perf_meas;

static void perf_fail(perf_meas *m, const char *what) {
    m->row->failed = true;
    snprintf(m->row->error, sizeof m->row->error, "%s%s", what, kv_last_error_message());
}

/* A failed call's message, taken at once (in rounds, the next variant's
 * calls would replace the thread's error). */
static void perf_check(perf_meas *m) {
    if (m->st == KV_OK || m->row->failed) return;
    m->row->failed = true;
    snprintf(m->row->error, sizeof m->row->error, "%s: %s", kv_status_name(m->st), kv_last_error_message());
}

/* Builds the variant's inputs and makes its untimed calls (at least one,
 * which also measures the outputs). */
static void perf_prepare(const kv_perf_options *o, const kv_case *c, const kv_op *op, kv_key key, perf_meas *m,
                         kv_case_inputs *shared) {
    const kv_device dev = { (kv_device_type)key, 0 };
    if (shared != NULL) {
        m->in = shared;
    } else if (kv_case_inputs_make(c, op, dev, false, &m->own) != KV_OK) {
        m->st = kv_last_error();
        perf_fail(m, "cannot build the inputs: ");
        return;
    } else {
        m->in = &m->own;
        m->have_in = true;
    }
    for (int i = 0; i < m->in->ntensors; i++) m->in_bytes += perf_tensor_bytes(m->in->tensors[i]);
    m->flops = perf_flops(op, m->in);
    const int warmup = o->warmup > 0 ? o->warmup : 1;
    for (int i = 0; m->st == KV_OK && i < warmup; i++) {
        const uint64_t t0 = perf_now(o);
        m->st = perf_call(op, key, m->row->variant, m->in, i == 0 ? &m->out_bytes : NULL);
        const uint64_t t1 = perf_now(o);
        m->warm_ns = t1 > t0 ? t1 - t0 : 0;
    }
    perf_check(m);
}

/* One measured call, the backend's synchronize around it: its time, or
 * the instructions of the call and the synchronize after it. */
static void perf_time_one(const kv_perf_options *o, const kv_op *op, kv_key key, perf_meas *m) {
    if (m->st != KV_OK) return;
    m->st = kv_backend_synchronize((kv_device_type)key);
    const bool counted = o->metric == KV_PERF_METRIC_INSTRUCTIONS && o->clock == NULL;
    uint64_t t0 = 0, t1 = 0;
    if (counted) kv_icount_start(o->icount);
    else t0 = perf_now(o);
    if (m->st == KV_OK) m->st = perf_call(op, key, m->row->variant, m->in, NULL);
    if (m->st == KV_OK) m->st = kv_backend_synchronize((kv_device_type)key);
    if (counted) {
        const kv_status cs = kv_icount_stop(o->icount, &t1);
        if (cs != KV_OK && m->st == KV_OK) m->st = cs;
    } else {
        t1 = perf_now(o);
    }
    m->times[m->done++] = t1 > t0 ? t1 - t0 : 0;
    perf_check(m);
}

/* The row's statistics (or its error), and the inputs freed. */
static void perf_finish(perf_meas *m) {
    kv_perf_row *row = m->row;
    if (!row->failed) {
        const int n = m->done;
        uint64_t *times = m->times;
        qsort(times, (size_t)n, sizeof *times, perf_cmp_u64);
        row->median_ns = n % 2 ? times[n / 2] : times[n / 2 - 1] + (times[n / 2] - times[n / 2 - 1]) / 2;
        row->min_ns = times[0];
        row->max_ns = times[n - 1];
        row->reps = n;
        /* Without memory for them the row keeps its statistics, and a
         * comparison treats it as having no samples. */
        row->samples_ns = malloc((size_t)n * sizeof *row->samples_ns);
        if (row->samples_ns != NULL) memcpy(row->samples_ns, times, (size_t)n * sizeof *times);
        row->is_flops = m->flops > 0.0;
        row->work = m->flops > 0.0 ? m->flops : m->in_bytes + m->out_bytes;
    }
    if (m->have_in) kv_case_inputs_free(&m->own);
    m->have_in = false;
}

/* Every variant of the pair, in a row each or in rounds (o->interleave). */
static void perf_measure(const kv_perf_options *o, const kv_case *c, const kv_op *op, kv_key key, perf_meas *ms,
                         int nm) {
    if (!o->interleave) {
        for (int v = 0; v < nm; v++) {
            perf_prepare(o, c, op, key, &ms[v], NULL);
            for (int i = 0; i < o->reps; i++) perf_time_one(o, op, key, &ms[v]);
            perf_finish(&ms[v]);
        }
        return;
    }
    /* An op that writes no argument: the variants share one set of
     * inputs, as the calls of a loop do. With one set each, a round of
     * 1M-element adds would walk 5 times 12 MB, more than the 32 MB cache,
     * and time the memory instead of the loop (measured: 250-360 us a
     * call against 150 us in a row). An in-place op's variants keep their
     * own, so each starts from the same values. */
    const kv_schema *sc = kv_op_schema(op);
    bool writes = sc == NULL;
    for (int i = 0; sc != NULL && i < sc->nargs; i++) writes |= sc->args[i].alias.is_write;
    for (int v = 0; v < nm; v++)
        perf_prepare(o, c, op, key, &ms[v], !writes && v > 0 && ms[0].have_in ? &ms[0].own : NULL);
    /* A variant more than 8 times slower than the fastest (the tuner's
     * rule: ref on a large problem, 25 ms against 0.2 ms for a 1M add) is
     * timed in a row after the rounds: between the others' calls, its long
     * ones would make the next variant's calls slower (on this machine the
     * next two 1M adds took 3.9x and 2.9x their steady time). */
    uint64_t fastest = UINT64_MAX;
    for (int v = 0; v < nm; v++)
        if (ms[v].st == KV_OK && ms[v].warm_ns < fastest) fastest = ms[v].warm_ns;
    bool in_rounds[KV_TUNE_MAX_VARIANTS] = { false };
    for (int v = 0; v < nm && v < KV_TUNE_MAX_VARIANTS; v++) in_rounds[v] = ms[v].warm_ns / 8 <= fastest;
    for (int i = 0; i < o->reps; i++)
        for (int v = 0; v < nm; v++) {
            if (!in_rounds[v]) continue;
            /* The timed call follows a call of its own variant, as in a row. */
            if (ms[v].st == KV_OK) ms[v].st = perf_call(op, key, ms[v].row->variant, ms[v].in, NULL);
            perf_check(&ms[v]);
            perf_time_one(o, op, key, &ms[v]);
        }
    for (int v = 0; v < nm; v++)
        for (int i = 0; !in_rounds[v] && i < o->reps; i++) perf_time_one(o, op, key, &ms[v]);
    for (int v = nm - 1; v >= 0; v--) perf_finish(&ms[v]); /* the first (the shared inputs' owner) last */
}

/* Speedups, the fastest row and the verdict of one pair's rows. The
 * tuner chooses by time, so instruction counts do not judge its choice
 * (fewer instructions can take longer: a vector unit's, another thread's). */
static void perf_judge(kv_perf_report *r, int first, const char *choice) {
    const kv_perf_row *ref = NULL, *fast = NULL, *chosen = NULL;
    int timed = 0;
    for (int i = first; i < r->n; i++) {
        kv_perf_row *row = &r->rows[i];
        if (row->failed) continue;
        timed++;
        if (ref == NULL && strcmp(row->variant, "ref") == 0) ref = row;
        if (fast == NULL || row->median_ns < fast->median_ns) fast = row;
        if (choice != NULL && strcmp(row->variant, choice) == 0) chosen = row, row->chosen = true;
    }
    const bool judged = timed >= 2 && chosen != NULL && r->metric == KV_PERF_METRIC_TIME;
    const bool within = judged && chosen->median_ns * 100 <= fast->median_ns * (100 + KV_PERF_WITHIN_PERCENT);
    for (int i = first; i < r->n; i++) {
        kv_perf_row *row = &r->rows[i];
        row->fastest = row == fast;
        row->judged = judged;
        row->within = within;
        if (!row->failed && ref != NULL && row->median_ns > 0)
            row->speedup = (double)ref->median_ns / (double)row->median_ns;
    }
    r->judged += judged;
    r->within += within;
}

static void perf_note(FILE *notes, const char *id, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void perf_note(FILE *notes, const char *id, const char *fmt, ...) {
    if (notes == NULL) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(notes, "perf: SKIP %s: ", id);
    vfprintf(notes, fmt, ap);
    fputc('\n', notes);
    va_end(ap);
}

/* Every compatible variant of (op, key) on case c. */
static kv_status perf_pair(const kv_perf_options *o, const kv_case *c, const kv_op *op, kv_key key, const char *id,
                           kv_perf_report *r, FILE *notes) {
    const kv_device dev = { (kv_device_type)key, 0 };
    kv_case_inputs in;
    kv_status st = kv_case_inputs_make(c, op, dev, false, &in);
    if (st != KV_OK) return st;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack probe = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < in.nargs; i++) kv_stack_push(&probe, in.args[i]);
    const int nv = kv_tune_variant_count(op, key);
    bool compat[KV_TUNE_MAX_VARIANTS] = { false };
    for (int i = 0; i < nv && i < KV_TUNE_MAX_VARIANTS; i++) compat[i] = kv_tune_variant_compatible(op, key, i, &probe);
    const char *choice = NULL;
    if (kv_tune_choice(op, key, &probe, &choice, NULL) != KV_OK) {
        if (notes != NULL)
            fprintf(notes, "perf: %s on %s: the tuner has no choice: %s\n", id, kv_key_name(key),
                    kv_last_error_message());
        choice = NULL;
    }
    kv_case_inputs_free(&in);
    int nm = 0;
    for (int i = 0; i < nv && i < KV_TUNE_MAX_VARIANTS; i++) nm += compat[i];
    perf_meas *ms = calloc((size_t)(nm > 0 ? nm : 1), sizeof *ms);
    uint64_t *times = malloc((size_t)(nm > 0 ? nm : 1) * (size_t)o->reps * sizeof *times);
    if (ms == NULL || times == NULL) {
        free(ms);
        free(times);
        return kv_error(KV_ERR_OOM, "perf: out of memory");
    }
    const int first = r->n;
    for (int i = 0, k = 0; i < nv && i < KV_TUNE_MAX_VARIANTS; i++) {
        if (!compat[i]) continue;
        kv_perf_row *row = perf_row_new(r);
        if (row == NULL) {
            free(ms);
            free(times);
            return kv_error(KV_ERR_OOM, "perf: out of memory");
        }
        snprintf(row->case_id, sizeof row->case_id, "%s", id);
        snprintf(row->op, sizeof row->op, "%s", kv_op_name(op));
        snprintf(row->variant, sizeof row->variant, "%s", kv_tune_variant_name(op, key, i));
        row->backend = key;
        row->case_index = r->pairs;
        ms[k].times = times + (size_t)k * (size_t)o->reps;
        k++;
    }
    /* Rows are in place now (perf_row_new may move them while adding). */
    for (int k = 0; k < nm; k++) ms[k].row = &r->rows[first + k];
    perf_measure(o, c, op, key, ms, nm);
    for (int k = 0; k < nm; k++) r->errors += ms[k].row->failed;
    free(ms);
    free(times);
    if (r->n == first) {
        perf_note(notes, id, "no variant on %s accepts the inputs", kv_key_name(key));
        return KV_OK;
    }
    perf_judge(r, first, choice);
    r->pairs++;
    return KV_OK;
}

kv_status kv_perf_case(const kv_perf_options *o, const kv_case *c, kv_perf_report *r, FILE *notes) {
    if (o->reps < 1 || o->reps > KV_PERF_MAX_REPS || o->warmup < 0)
        return kv_error(KV_ERR_INVALID_ARG, "perf: argument 'options': reps %d (1..%d), warmup %d (>= 0)", o->reps,
                        KV_PERF_MAX_REPS, o->warmup);
    if (o->metric == KV_PERF_METRIC_INSTRUCTIONS && o->clock == NULL && o->icount == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "perf: argument 'options': the instruction metric needs an open counter "
                                            "(kv_perf_run opens it)");
    r->metric = o->metric;
    char id[KV_CASE_ID_MAX];
    kv_case_id(c, id, sizeof id);
    if (c->device.type != KV_DEVICE_CPU) {
        r->skipped++;
        perf_note(notes, id, "device=%s: perf mode times the variants from cpu cases only",
                  kv_device_type_name(c->device.type));
        return KV_OK;
    }
    if (c->expect != KV_OK) {
        r->skipped++;
        perf_note(notes, id, "expect=%s: the case has no call to time", kv_case_expect_name(c->expect));
        return KV_OK;
    }
    const kv_op *op = kv_op_find(c->op);
    if (op == NULL) return kv_last_error();
    const int before = r->pairs;
    int sets = 0;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        if (!kv_tune_is_dispatching(op, (kv_key)k) || kv_allocator_for((kv_device_type)k) == NULL) continue;
        sets++;
        kv_status st = perf_pair(o, c, op, (kv_key)k, id, r, notes);
        if (st != KV_OK) return st;
    }
    if (r->pairs == before) r->skipped++;
    if (sets == 0) perf_note(notes, id, "%s has no variant set to time", c->op);
    return KV_OK;
}

/* Rounds of the machine-limit measurement: each about 20 ms per limit. */
#define KV_PERF_LIMIT_ROUNDS 5

int kv_perf_run(const kv_perf_options *o, const kv_case *const *cases, int n, FILE *out) {
    kv_perf_report r = { 0 };
    int rc = 0;
    r.warmup = o->warmup;
    r.reps = o->reps;
    r.interleave = o->interleave;
    r.metric = o->metric;
    kv_limits_machine(r.machine, (int)sizeof r.machine);
    kv_perf_options own = *o;
    kv_icount counter;
    if (o->metric == KV_PERF_METRIC_INSTRUCTIONS) {
        if (o->clock != NULL) {
            snprintf(r.counter, sizeof r.counter, "test");
        } else if (kv_icount_open(&counter, o->counter) != KV_OK) {
            fprintf(out, "perf: ERROR --perf-metric=instructions: %s\n", kv_last_error_message());
            return 2;
        } else {
            snprintf(r.counter, sizeof r.counter, "%s", kv_icount_source_name(counter.source));
            own.icount = &counter;
        }
        fprintf(out, "perf: instructions per call (retired, user space), counted by %s%s\n", r.counter,
                strcmp(r.counter, "hardware") == 0   ? " (perf_event_open: this thread and the threads it starts)"
                : strcmp(r.counter, "callgrind") == 0 ? " (Valgrind: every thread)"
                                                      : "");
        o = &own;
    }
    /* The roofs, with the real clock only: a fake clock (tests) says
     * nothing about the machine, and counted instructions have no roof.
     * A failure costs the roofline, not the run. */
    if (o->clock == NULL && o->metric == KV_PERF_METRIC_TIME) {
        if (kv_limits_measure(KV_PERF_LIMIT_ROUNDS, r.limits) == KV_OK) r.limits_measured = true;
        else fprintf(out, "perf: the machine limits were not measured: %s\n", kv_last_error_message());
    }
    for (int i = 0; i < n; i++) {
        if (kv_perf_case(o, cases[i], &r, out) != KV_OK) {
            char id[KV_CASE_ID_MAX];
            kv_case_id(cases[i], id, sizeof id);
            fprintf(out, "perf: ERROR %s: %s\n", id, kv_last_error_message());
            rc = 1;
        }
    }
    const char *dir = o->report_dir ? o->report_dir : KV_DRIVER_DEFAULT_REPORT_DIR;
    char path[4096];
    kv_status st = kv_report_mkdirs(dir);
    if (st == KV_OK) {
        snprintf(path, sizeof path, "%s/perf.jsonl", dir);
        st = kv_perf_write_jsonl(&r, path);
    }
    if (st == KV_OK) {
        snprintf(path, sizeof path, "%s/perf.html", dir);
        st = kv_perf_write_html(&r, path);
    }
    if (st != KV_OK) {
        fprintf(out, "perf: writing the reports to %s: %s\n", dir, kv_last_error_message());
        rc = 1;
    }
    kv_perf_console(out, &r);
    if (r.errors > 0) rc = 1;
    kv_perf_report_free(&r);
    if (own.icount != NULL) kv_icount_close(own.icount);
    return rc;
}
