/* Running one case: building its inputs, calling the op, and the checks.
 *
 * A check is a row in one table (check.c): a name, the kind it answers to
 * in a case's check= set, and a run function that appends one or more
 * results. Later checks (fastpath, lazy, grad, tune) are new rows and a
 * new kv_check_kind; the runner core never changes for them. */
#ifndef KV_RUNNER_CHECK_H
#define KV_RUNNER_CHECK_H

#include <stdbool.h>

#include "kv/dispatch.h"
#include "runner/case/case.h"
#include "runner/check/result.h"

struct kv_golden_store;

/* What the driver hands every case. */
/* What a case whose golden key has no entry in the store is compared
 * against (kvrun --golden=): ERROR (store), or the reference kernel run
 * live (live); auto is live only for cases typed on the command line, so
 * every case read from a file - the suite's own run - stays strict. */
typedef enum kv_golden_mode { KV_GOLDEN_MODE_AUTO, KV_GOLDEN_MODE_STORE, KV_GOLDEN_MODE_LIVE } kv_golden_mode;
/* "auto", "store", "live"; parse: 0, or -1 for another text. */
const char *kv_golden_mode_name(kv_golden_mode m);
int kv_golden_mode_parse(const char *text, kv_golden_mode *out);

typedef struct kv_run_env {
    struct kv_golden_store *golden; /* read-only in workers */
    bool regen_golden;              /* record ref outputs instead of verifying */
    const char *dump_dir;           /* --dump=DIR, or NULL */
    kv_golden_mode golden_mode;     /* --golden= */
} kv_run_env;

/* Whether case c, with no golden entry at all, is compared live. */
bool kv_golden_live_for(const kv_run_env *env, const kv_case *c);

/* The materialized inputs of a case, on one device with the case layout. */
typedef struct kv_case_inputs {
    int ntensors;
    kv_tensor *tensors[KV_CASE_MAX_INPUTS];  /* NULL for an absent Tensor? */
    /* Boxed arguments in schema order (tensors point into `tensors`). */
    kv_ivalue args[KV_SCHEMA_MAX_ARGS];
    int nargs;
    /* Storage the boxed args point into (int lists, strings, tensor lists). */
    int64_t int_lists[KV_SCHEMA_MAX_ARGS][KV_MAX_DIMS];
    char strs[KV_SCHEMA_MAX_ARGS][KV_CASE_TEXT_MAX];
    kv_tensor *list_items[KV_CASE_MAX_INPUTS];
    /* A Generator argument's state before the call: kv_case_invoke hands
     * each call a copy, so every call (variant, path, retry) starts from
     * the same state and the case's own value never moves. */
    kv_generator gens[KV_SCHEMA_MAX_ARGS];
} kv_case_inputs;

/* Fills inputs for `c` on `device` with `layout`s from the case (or all
 * contiguous when `contiguous` is true: the golden problem). Values depend
 * only on the golden key and seed, never on device or layout. */
kv_status kv_case_inputs_make(const kv_case *c, const kv_op *op, kv_device device,
                              bool contiguous, kv_case_inputs *out);
void kv_case_inputs_free(kv_case_inputs *in);

/* Calls the op (kv_call, or kv_redispatch on `ks` when ks != 0) and returns
 * its tensor outputs as owned references. For in-place and out= ops the
 * output is the mutated argument. */
#define KV_CASE_MAX_OUTPUTS 8 /* a foreach case's list has at most this many elements */
typedef struct kv_case_outputs {
    int n;
    kv_tensor *t[KV_CASE_MAX_OUTPUTS];
    bool is_bool;            /* the op returned a bool, stored in `b` */
    bool b;
    /* The op takes a Generator: its state after the call (the case's
     * generator, or the thread's default one for None, which
     * kv_case_invoke rewinds to seed 0, offset 0 before every call). */
    bool has_gen;
    kv_generator gen_after;
} kv_case_outputs;

kv_status kv_case_invoke(const kv_op *op, kv_case_inputs *in, kv_keyset ks, kv_case_outputs *out);
void kv_case_outputs_free(kv_case_outputs *out);
/* An op that returns nothing but writes a Tensor(a!)[] (the in-place
 * foreach ops): its outputs, for every check, are the written elements
 * (each retained), appended to `out` after a successful call. */
kv_status kv_case_outputs_add_written_list(const kv_op *op, const kv_case_inputs *in, kv_case_outputs *out);

/* One check. */
typedef struct kv_check_ctx {
    const kv_case *c;
    const kv_op *op;
    const kv_run_env *env;
    kv_result_list *results;
} kv_check_ctx;

typedef struct kv_check {
    const char *name;
    kv_check_kind kind;
    void (*run)(const kv_check_ctx *ctx);
} kv_check;

const kv_check *kv_check_find(kv_check_kind kind);

/* Runs every check the case asks for and appends their results. Never
 * fails as a whole: problems become ERROR results naming the case. */
void kv_case_run(const kv_case *c, const kv_run_env *env, kv_result_list *results);

#endif
