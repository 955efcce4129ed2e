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

void kv_perf_options_init(kv_perf_options *o) {
    memset(o, 0, sizeof *o);
    o->warmup = KV_PERF_DEFAULT_WARMUP;
    o->reps = KV_PERF_DEFAULT_REPS;
}

void kv_perf_report_free(kv_perf_report *r) {
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

/* Warm-up and timed calls of one variant on fresh inputs (an in-place op
 * then starts every variant from the same values). */
static void perf_variant(const kv_perf_options *o, const kv_case *c, const kv_op *op, kv_key key, kv_perf_row *row,
                         uint64_t *times) {
    const kv_device dev = { (kv_device_type)key, 0 };
    kv_case_inputs in;
    if (kv_case_inputs_make(c, op, dev, false, &in) != KV_OK) {
        row->failed = true;
        snprintf(row->error, sizeof row->error, "cannot build the inputs: %s", kv_last_error_message());
        return;
    }
    double in_bytes = 0.0, out_bytes = 0.0;
    for (int i = 0; i < in.ntensors; i++) in_bytes += perf_tensor_bytes(in.tensors[i]);
    const double flops = perf_flops(op, &in);
    kv_status st = KV_OK;
    /* At least one untimed call, which also measures the outputs. */
    const int warmup = o->warmup > 0 ? o->warmup : 1;
    for (int i = 0; st == KV_OK && i < warmup; i++)
        st = perf_call(op, key, row->variant, &in, i == 0 ? &out_bytes : NULL);
    for (int i = 0; st == KV_OK && i < o->reps; i++) {
        st = kv_backend_synchronize((kv_device_type)key);
        const uint64_t t0 = perf_now(o);
        if (st == KV_OK) st = perf_call(op, key, row->variant, &in, NULL);
        if (st == KV_OK) st = kv_backend_synchronize((kv_device_type)key);
        const uint64_t t1 = perf_now(o);
        times[i] = t1 > t0 ? t1 - t0 : 0;
    }
    if (st != KV_OK) {
        row->failed = true;
        snprintf(row->error, sizeof row->error, "%s: %s", kv_status_name(st), kv_last_error_message());
    } else {
        qsort(times, (size_t)o->reps, sizeof *times, perf_cmp_u64);
        const int n = o->reps;
        row->median_ns = n % 2 ? times[n / 2] : times[n / 2 - 1] + (times[n / 2] - times[n / 2 - 1]) / 2;
        row->min_ns = times[0];
        row->max_ns = times[n - 1];
        row->reps = n;
        row->is_flops = flops > 0.0;
        row->work = flops > 0.0 ? flops : in_bytes + out_bytes;
    }
    kv_case_inputs_free(&in);
}

/* Speedups, the fastest row and the verdict of one pair's rows. */
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
    const bool judged = timed >= 2 && chosen != NULL;
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
    uint64_t *times = malloc((size_t)o->reps * sizeof *times);
    if (times == NULL) return kv_error(KV_ERR_OOM, "perf: out of memory");
    const int first = r->n;
    for (int i = 0; i < nv && i < KV_TUNE_MAX_VARIANTS; i++) {
        if (!compat[i]) continue;
        kv_perf_row *row = perf_row_new(r);
        if (row == NULL) {
            free(times);
            return kv_error(KV_ERR_OOM, "perf: out of memory");
        }
        snprintf(row->case_id, sizeof row->case_id, "%s", id);
        snprintf(row->op, sizeof row->op, "%s", kv_op_name(op));
        snprintf(row->variant, sizeof row->variant, "%s", kv_tune_variant_name(op, key, i));
        row->backend = key;
        row->case_index = r->pairs;
        perf_variant(o, c, op, key, row, times);
        r->errors += row->failed;
    }
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
    kv_limits_machine(r.machine, (int)sizeof r.machine);
    /* The roofs, with the real clock only: a fake clock (tests) says
     * nothing about the machine. A failure costs the roofline, not the run. */
    if (o->clock == NULL) {
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
    return rc;
}
