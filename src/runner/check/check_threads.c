/* The concurrency check ("threads"): every plugin backend's kernel for the
 * case's op, called from THREADS_N threads at once, each on inputs of its
 * own, must give what the same kernel gives on the same inputs called
 * alone. Real frameworks call a backend from several threads (inter-op
 * pools, autograd engine threads); kvrun's other checks never do, so a
 * kernel with static scratch memory passes all of them.
 *
 * Thread t's inputs are the case's with each input's storage rotated by t
 * elements: independent memory and different values (a race between two
 * threads computing the same values would be invisible), and still values
 * of the case's own kind (index inputs stay valid indices). The reference
 * is the kernel itself on the same rotated inputs, called alone first, so
 * the check needs no tolerance: the comparison is bitwise. A thread whose
 * inputs the kernel refuses alone is left out. Only plugin backends (not
 * the CPU, which has its own thread tests), only the kernel as dispatched
 * (no variant pins: those are per thread), and not ops that draw from a
 * generator (the default generator is shared state by design).
 *
 * Cost: a row is six calls and three thread starts and wake-ups, about
 * 2.5 ms on the 2 shared cores here against 0.015 ms for a variants row;
 * on every case that was over a quarter of the suite's time. So a case on
 * its default checks runs it when its canonical ID hashes into one bucket
 * of THREADS_SAMPLE (stable: the same cases every run, shard and resume),
 * which still reaches every op on many dtypes and layouts across the
 * suite; --check=threads runs it on any case. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"
#include "kv/tune.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"
#include "runner/exec/inflight.h"

/* Enough threads to overlap any two calls; few enough to stay cheap (the
 * suite's SIM and oneDNN rows: about 1 ms each). */
#define THREADS_N 3

typedef struct threads_job {
    const kv_op *op;
    kv_keyset ks;
    kv_case_inputs in;
    bool have_in;
    kv_case_outputs out;
    kv_status st;
    char message[256];
    pthread_barrier_t *start;
} threads_job;

static void *threads_worker(void *arg) {
    threads_job *j = arg;
    /* As the runner's own thread: the last compatible variant, no timing. */
    kv_tune_untimed_mode_set(true);
    pthread_barrier_wait(j->start);
    j->st = kv_case_invoke(j->op, &j->in, j->ks, &j->out);
    if (j->st != KV_OK) snprintf(j->message, sizeof j->message, "%s", kv_last_error_message());
    return NULL;
}

/* Rotates the storage of every tensor input by `by` elements (through the
 * backend's copies: inputs live on its device). */
static kv_status threads_rotate(kv_case_inputs *in, int by) {
    if (by == 0) return KV_OK;
    for (int i = 0; i < in->ntensors; i++) {
        const kv_tensor *t = in->tensors[i];
        if (t == NULL || t->storage == NULL) continue;
        const size_t item = kv_dtype_size(t->dtype), n = t->storage->nbytes;
        /* A view's storage holds bytes outside it (the memory check's
         * poison among them): rotated into a bool input they would be
         * neither 0 nor 1, which no kernel need accept. Bools stay. */
        if (item == 0 || n < 2 * item || t->dtype == KV_BOOL) continue;
        unsigned char *a = malloc(n), *b = malloc(n);
        kv_status st = a && b ? KV_OK : kv_error(KV_ERR_OOM, "threads: no memory to rotate an input");
        const kv_device_type dt = t->storage->device.type;
        if (st == KV_OK) st = kv_backend_mem_read(dt, a, t->storage->data, n);
        if (st == KV_OK) {
            const size_t shift = ((size_t)by * item) % (n - n % item);
            memcpy(b, a + shift, n - shift);
            memcpy(b + (n - shift), a, shift);
            st = kv_backend_mem_write(dt, t->storage->data, b, n);
        }
        free(a);
        free(b);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}

/* Fresh inputs for thread t on dev. */
static kv_status threads_inputs(const kv_check_ctx *ctx, kv_device dev, int t, kv_case_inputs *in) {
    kv_status st = kv_case_inputs_make(ctx->c, ctx->op, dev, false, in);
    if (st != KV_OK) return st;
    st = threads_rotate(in, t);
    if (st != KV_OK) kv_case_inputs_free(in);
    return st;
}

/* Host-readable, materialized outputs. */
static kv_status threads_readable(kv_case_outputs *out) {
    kv_status st = kv_check_box_bool(out);
    if (st == KV_OK) st = kv_check_materialize(out);
    for (int i = 0; st == KV_OK && i < out->n; i++) {
        kv_tensor *h = kv_backend_readable(out->t[i]);
        if (h == NULL) return kv_last_error();
        kv_tensor_release(out->t[i]);
        out->t[i] = h;
    }
    return st;
}

static bool threads_is_plugin(kv_key key) {
    return key != KV_KEY_CPU && key != KV_KEY_ACCEL && kv_backend_available((kv_device_type)key);
}

static void threads_backend(const kv_check_ctx *ctx, kv_key key, const char *variant, void *user) {
    (void)user;
    if (variant != NULL || !threads_is_plugin(key)) return;
    if (kv_op_entry_kind(ctx->op, key) != KV_ENTRY_KERNEL) return; /* the variants row says UNSUPPORTED */
    char check[64];
    kv_check_backend_row_name("threads", key, NULL, check, (int)sizeof check);
    kv_check_result r;
    kv_check_result_begin(&r, ctx, check, kv_check_backend_label(key));
    kv_inflight_set_check(check);
    const kv_device dev = { (kv_device_type)key, 0 };
    const kv_keyset only = kv_keyset_of(key);
    kv_case_outputs alone[THREADS_N];
    bool have_alone[THREADS_N] = { false };
    memset(alone, 0, sizeof alone);
    threads_job jobs[THREADS_N];
    memset(jobs, 0, sizeof jobs);
    pthread_barrier_t start;
    int usable = 0;
    /* Alone first, on the main thread. */
    for (int t = 0; t < THREADS_N; t++) {
        kv_case_inputs in;
        if (threads_inputs(ctx, dev, t, &in) != KV_OK) continue;
        const kv_status st = kv_case_invoke(ctx->op, &in, only, &alone[t]);
        if (st == KV_OK && threads_readable(&alone[t]) == KV_OK)
            have_alone[t] = true;
        else
            kv_case_outputs_free(&alone[t]);
        kv_case_inputs_free(&in);
        /* The case's own inputs declined: as in the variants check. */
        if (t == 0 && st == KV_ERR_MISSING_KERNEL) {
            kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "the %s kernel declined the call: %s", kv_key_name(key),
                                kv_last_error_message());
            goto done;
        }
        if (have_alone[t] && threads_inputs(ctx, dev, t, &jobs[t].in) == KV_OK) {
            jobs[t].have_in = true;
            usable++;
        }
    }
    if (usable < 2) {
        kv_check_result_set(&r, KV_RESULT_SKIP,
                            "the %s kernel accepted fewer than 2 of %d input sets alone: nothing to run at once",
                            kv_key_name(key), THREADS_N);
        goto done;
    }
    pthread_barrier_init(&start, NULL, (unsigned)usable);
    pthread_t tid[THREADS_N];
    bool started[THREADS_N] = { false };
    for (int t = 0; t < THREADS_N; t++) {
        if (!jobs[t].have_in) continue;
        jobs[t] = (threads_job){ ctx->op, only, jobs[t].in, true, { 0 }, KV_OK, "", &start };
        started[t] = pthread_create(&tid[t], NULL, threads_worker, &jobs[t]) == 0;
        if (!started[t]) {
            /* The barrier counts it: run its share here, or the others wait forever. */
            kv_check_result_set(&r, KV_RESULT_ERROR, "cannot start thread %d of %d", t, usable);
            threads_worker(&jobs[t]);
        }
    }
    for (int t = 0; t < THREADS_N; t++)
        if (started[t]) pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&start);
    int bad = 0;
    for (int t = 0; t < THREADS_N; t++) {
        if (!jobs[t].have_in) continue;
        char why[KV_RESULT_MESSAGE_MAX / 2];
        const kv_status st = jobs[t].st == KV_OK ? threads_readable(&jobs[t].out) : jobs[t].st;
        const bool ok = st == KV_OK ? kv_check_outputs_identical(ctx, &alone[t], &jobs[t].out, false, why, (int)sizeof why) : false;
        if (st != KV_OK)
            snprintf(why, sizeof why, "failed with '%s' (alone it passed): %s", kv_status_name(st),
                     jobs[t].st != KV_OK ? jobs[t].message : kv_last_error_message());
        if (!ok && bad++ == 0)
            kv_check_result_set(&r, KV_RESULT_FAIL,
                                "the %s kernel of %s is not thread-safe: called from %d threads at once on "
                                "independent inputs, thread %d's result differs from the same call alone: %s",
                                ctx->c->op, kv_key_name(key), usable, t, why);
    }
    if (bad > 1) kv_check_result_append(&r, " (%d of %d threads differ)", bad, usable);
    if (r.status == KV_RESULT_PASS)
        kv_check_result_set(&r, KV_RESULT_PASS, "%d threads at once on independent inputs: each as the call alone",
                            usable);
done:
    for (int t = 0; t < THREADS_N; t++) {
        kv_case_outputs_free(&alone[t]);
        kv_case_outputs_free(&jobs[t].out);
        if (jobs[t].have_in) kv_case_inputs_free(&jobs[t].in);
    }
    kv_inflight_set_check("threads");
    kv_check_push(ctx, &r);
}

/* One case in THREADS_SAMPLE runs it by default. */
#define THREADS_SAMPLE 8

bool kv_check_threads_sampled(const kv_case *c) {
    if (c->expect != KV_OK) return false;
    char id[2048];
    if (kv_case_id(c, id, (int)sizeof id) < 0) return false;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h % THREADS_SAMPLE == 0;
}

void kv_check_threads_run(const kv_check_ctx *ctx) {
    if (ctx->c->expect != KV_OK) return; /* the error check calls the failing path */
    const kv_schema *s = kv_op_schema(ctx->op);
    for (int a = 0; s != NULL && a < s->nargs; a++)
        if (s->args[a].type.kind == KV_TYPE_GENERATOR) return;
    kv_check_each_backend(ctx, threads_backend, NULL);
}
