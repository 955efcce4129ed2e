/* The check table and running one case (runner/check.h).
 *
 * A new check is a row here plus its run function in its own file; the
 * loop below never names a check. Rows run in table order. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "runner/check/check.h"

#include "kv/tune.h"
#include "runner/check/check_util.h"
#include "runner/check/row_select.h"
#include "runner/exec/inflight.h"
#include "runner/program/program.h"
#include "runner/report/dump.h"

static const kv_check kv_checks[] = {
    { "golden", KV_CHECK_GOLDEN, kv_check_golden_run },
    { "variants", KV_CHECK_VARIANTS, kv_check_variants_run },
    { "memory", KV_CHECK_MEMORY, kv_check_memory_run },
    { "error", KV_CHECK_ERROR, kv_check_error_run },
    { "lazy", KV_CHECK_LAZY, kv_check_lazy_run },
    { "grad", KV_CHECK_GRAD, kv_check_grad_run },
    { "fastpath", KV_CHECK_FASTPATH, kv_check_fastpath_run },
    { "tune", KV_CHECK_TUNE, kv_check_tune_run },
    { "accuracy", KV_CHECK_ACCURACY, kv_check_accuracy_run },
    { "threads", KV_CHECK_THREADS, kv_check_threads_run },
};

#define KV_CHECKS_N ((int)(sizeof kv_checks / sizeof kv_checks[0]))

const kv_check *kv_check_find(kv_check_kind kind) {
    for (int i = 0; i < KV_CHECKS_N; i++)
        if (kv_checks[i].kind == kind) return &kv_checks[i];
    return NULL;
}

static double check_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An ERROR row for a check that could not even start. */
static void check_error_row(const kv_check_ctx *ctx, const char *check, const char *message) {
    kv_check_result r;
    kv_check_result_begin(&r, ctx, check, NULL);
    kv_check_result_set(&r, KV_RESULT_ERROR, "%s", message);
    kv_check_push(ctx, &r);
}

/* A kernel this check reached outside kv_case_invoke (a program, a
 * backward pass) left the FP environment changed: a FAIL row naming it
 * and its backend, so the rows it would have skewed are not the only
 * trace (inflight.c restored the environment when the kernel returned). */
static void check_fpenv_row(const kv_check_ctx *ctx, const char *check) {
    char msg[640];
    kv_key key;
    if (!kv_inflight_take_fpenv_violation(msg, (int)sizeof msg, &key)) return;
    kv_check_result r;
    kv_check_result_begin(&r, ctx, check, kv_key_name(key));
    kv_check_result_set(&r, KV_RESULT_FAIL, "%s", msg);
    kv_check_push(ctx, &r);
}

/* Every check runs in the tuner's untimed mode (kv/tune.h): a variant set
 * runs its last-registered compatible variant, not the timing-based pick,
 * so a row's verdict never depends on how fast a variant was this time.
 * The tune check, which judges the tuner's pick itself, leaves the mode.
 * (Set here rather than in a wrapper: a frame more would push the test
 * frames that tests/memcheck.supp names out of Valgrind's stack depth.) */
/* --only-backend / --only-check (row_select.h): drops the case's rows
 * from `at` on that the selection leaves out; when none is left, one SKIP
 * row says so (a case with no row reads as a worker that could not run
 * it). */
static void check_row_select(kv_check_ctx *ctx, int at) {
    if (!kv_row_select_active()) return;
    kv_result_list *rl = ctx->results;
    int m = at;
    for (int j = at; j < rl->n; j++)
        if (kv_row_select_keep(&rl->items[j])) rl->items[m++] = rl->items[j];
    rl->n = m;
    if (m > at) return;
    char sel[192];
    kv_row_select_describe(sel, (int)sizeof sel);
    kv_check_result r;
    kv_check_result_begin(&r, ctx, "selection", NULL);
    kv_check_result_set(&r, KV_RESULT_SKIP, "no row of this case is selected by%s", sel);
    (void)kv_result_list_push(rl, &r);
}

void kv_case_run(const kv_case *c, const kv_run_env *env, kv_result_list *results) {
    if (c == NULL || results == NULL) return;
    const int first_row = results->n;
    const bool was_untimed = kv_tune_untimed_mode_set(true);
    static const kv_run_env no_env = { NULL, false, NULL, KV_GOLDEN_MODE_AUTO };
    kv_check_ctx ctx = { c, NULL, env ? env : &no_env, results };
    /* A program case is no op: it runs its own rows (check_program.c). */
    if (c->program[0] != '\0') {
        kv_check_program_run(&ctx);
        check_fpenv_row(&ctx, "program");
        check_row_select(&ctx, first_row);
        kv_tune_untimed_mode_set(was_untimed);
        return;
    }
    unsigned checks = c->checks ? c->checks : kv_case_default_checks(c->expect);
    /* A case on its default checks also runs the threads check when it is
     * one of the sampled ones (check_threads.c says why not every one). */
    if (checks == kv_case_default_checks_for(c) && kv_check_threads_sampled(c)) checks |= 1u << KV_CHECK_THREADS;
    /* A regeneration records goldens; checking against them is a normal
     * run's job. The golden check is the only one that records (programs
     * record theirs above), so a regeneration runs it alone: the rest would
     * check the backends against a store still being written, and cost
     * most of the time (the whole suite's checks under qemu for
     * tests/cross_golden.sh). */
    const unsigned skipped_by_regen = ctx.env->regen_golden ? checks & ~(1u << KV_CHECK_GOLDEN) : 0;
    checks &= ~skipped_by_regen;
    ctx.op = kv_op_find(c->op);
    if (ctx.op == NULL) {
        char msg[KV_RESULT_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "unknown op '%s': %s", c->op, kv_last_error_message());
        for (int i = 0; i < KV_CHECKS_N; i++)
            if (checks & (1u << kv_checks[i].kind)) check_error_row(&ctx, kv_checks[i].name, msg);
        kv_tune_untimed_mode_set(was_untimed);
        return;
    }
    if (ctx.env->dump_dir != NULL) {
        const double t0 = check_now();
        if (kv_case_dump(c, ctx.op, ctx.env->dump_dir) != KV_OK) {
            const int at = results->n;
            check_error_row(&ctx, "dump", kv_last_error_message());
            if (results->n > at) results->items[at].seconds = check_now() - t0;
        }
    }
    const int case_at = results->n;
    for (int i = 0; i < KV_CHECKS_N; i++) {
        const kv_check *k = &kv_checks[i];
        if (!(checks & (1u << k->kind)) || !kv_row_select_check_kind(k->name)) continue;
        const int at = results->n;
        kv_error_clear();
        const double t0 = check_now();
        kv_inflight_set_check(k->name);
        k->run(&ctx);
        kv_inflight_set_check("");
        check_fpenv_row(&ctx, k->name);
        const double dt = check_now() - t0;
        /* A check that appends several rows (one per backend) splits its
         * time evenly: reports sum seconds per case. */
        const int added = results->n - at;
        for (int j = at; j < results->n; j++) results->items[j].seconds = dt / (added > 0 ? added : 1);
    }
    check_row_select(&ctx, case_at);
    /* Checks that do not apply to a case add no row (threads on a case
     * that expects an error or has no plugin kernel): one SKIP row says
     * so, or the runner would read a case with no rows as a worker that
     * could not run it. */
    if (results->n == case_at) {
        const unsigned named = checks ? checks : skipped_by_regen;
        char names[64] = ""; /* the row's check field */
        int len = 0;
        for (int i = 0; i < KV_CHECKS_N && len < (int)sizeof names; i++)
            if (named & (1u << kv_checks[i].kind))
                len += snprintf(names + len, sizeof names - (size_t)len, "%s%s", len ? "+" : "", kv_checks[i].name);
        kv_check_result r;
        kv_check_result_begin(&r, &ctx, names, NULL);
        if (checks == 0 && skipped_by_regen != 0)
            kv_check_result_set(&r, KV_RESULT_SKIP, "--regen-golden runs only the golden check, and this case "
                                                    "has none: its checks (%s) run in a normal run", names);
        else
            kv_check_result_set(&r, KV_RESULT_SKIP, "no check of %s applies to this case (a check for an error, a "
                                                    "generator op or no plugin kernel for it): nothing ran", names);
        kv_check_push(&ctx, &r);
    }
    kv_tune_untimed_mode_set(was_untimed);
}
