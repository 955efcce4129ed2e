/* What the check implementations (check_*.c) share: result rows, error
 * wrapping, and the reference run of a case's golden problem. Private to
 * src/runner. */
#ifndef KV_RUNNER_CHECK_UTIL_H
#define KV_RUNNER_CHECK_UTIL_H

#include <stdbool.h>

#include "runner/check/check.h"

/* Sets the thread's error to "<formatted>: <the previous message>" (the
 * previous message is copied first, so it may be the argument buffer).
 * Returns code. */

/* A result row for the case with every identity field filled (case ID,
 * op, check, backend, dtype of the first present input, repro line);
 * status PASS, empty message. */
void kv_check_result_begin(kv_check_result *r, const kv_check_ctx *ctx, const char *check, const char *backend);
/* Sets status and message (printf style; cut at the message capacity). */
void kv_check_result_set(kv_check_result *r, kv_result_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Appends more text to the message. */
/* Appends the row to ctx->results (an ERROR row naming the problem is
 * impossible if even that fails; the failure is ignored). */
void kv_check_push(const kv_check_ctx *ctx, const kv_check_result *r);

/* The golden problem of a case: contiguous CPU inputs and the CPU
 * kernel's outputs. Holds pointers into itself: never copy it. */
typedef struct kv_check_ref {
    kv_case_inputs in;
    kv_case_outputs out;
    kv_status call_status;      /* of the CPU call; KV_OK when out is valid */
    char message[512];          /* why it failed, when it did */
} kv_check_ref;

/* Builds the inputs and calls the op's CPU kernel (kv_redispatch on the
 * CPU key). KV_OK when the inputs could be built (ref->call_status then
 * says how the call went); otherwise the error, with ref->message. A bool
 * return becomes output 0, a 0-dim bool tensor. */
kv_status kv_check_ref_run(const kv_check_ctx *ctx, kv_check_ref *ref);
void kv_check_ref_free(kv_check_ref *ref);

/* Turns a bool return into a 0-dim bool CPU tensor (output 0), so every
 * output compares as a tensor. */
kv_status kv_check_box_bool(kv_case_outputs *out);

/* Replaces outputs that carry a lazy bit (Conjugate, Negative,
 * ZeroTensor) by materialized tensors (clone for ZeroTensor, then
 * resolve_conj, resolve_neg), so data comparisons, the golden store and
 * .npy files see the logical values. */
kv_status kv_check_materialize(kv_case_outputs *out);

/* kv_vmap_call over the physical inputs (batch dim 0 on every mapped
 * argument), its returns as case outputs: how the lazy and fastpath checks
 * run a vmap case. */
kv_status kv_check_vmap_invoke(const kv_op *op, kv_case_inputs *in, kv_case_outputs *out);

/* Whether two calls' outputs (host-readable) are the same bit for bit;
 * false with what differs in msg. Unspecified values (empty) are not
 * compared. With `diagnose`, a cause the differences show (a kernel that
 * ignores strides reads past a stride-0 input, so its calls differ) is
 * named before the listing. */
bool kv_check_outputs_identical(const kv_check_ctx *ctx, const kv_case_outputs *a, const kv_case_outputs *b,
                                bool diagnose, char *msg, int cap);

/* Whether schema argument `a` of the op is written by the call (a!). */
bool kv_check_arg_is_mutated(const kv_op *op, int a);

/* Golden key (kv_fill_golden_key) into buf; KV_OK or an error if it does
 * not fit. */
kv_status kv_check_golden_key(const kv_case *c, char *buf, int cap);

/* What variants are compared against (check_golden.c): per output the
 * stored golden tensor when the live reference differs from a stored
 * file, otherwise the live reference output (which the golden check
 * proves equal to the stored golden, hash-only entries included).
 * expected[i] are new references (release them). `note` says where the
 * golden could not be used ("" when it could). */
kv_status kv_check_golden_expected(const kv_check_ctx *ctx, const kv_check_ref *ref,
                                   kv_tensor *expected[KV_CASE_MAX_OUTPUTS], char *note, int cap);

/* One visit of kv_check_each_backend: a backend key, and a variant name
 * (NULL: the backend's kernel as dispatched). */
typedef void (*kv_check_backend_fn)(const kv_check_ctx *ctx, kv_key key, const char *variant, void *user);
/* Visits every backend and variant the case runs on (check_backend.c):
 * what the variants and accuracy checks share. */
void kv_check_each_backend(const kv_check_ctx *ctx, kv_check_backend_fn fn, void *user);
/* The backend column of a row on `key`: its device type's name, or the
 * plugin's own name when it loaded unavailable (it holds no slot). */
const char *kv_check_backend_label(kv_key key);
/* "<prefix>:<Key>" or "<prefix>:<Key>/<variant>" into buf. */
void kv_check_backend_row_name(const char *prefix, kv_key key, const char *variant, char *buf, int cap);
/* What one backend call brings back (kv_check_backend_call). The caller
 * sets meta and twice; the call fills the rest. */
typedef struct kv_check_call {
    /* The reference's output metadata (check_meta.h): the call's outputs
     * must match it; NULL: not checked. */
    const struct kv_meta_expect *meta;
    /* Call the op a second time on fresh inputs and fail a kernel whose
     * two identical calls disagree: nondeterminism no tolerance covers,
     * and which other checks would misreport (fast path ON vs OFF). */
    bool twice;
    kv_case_outputs out;  /* on success: host-readable, free them */
    char meta_diff[512];  /* "" or how the metadata differs from meta */
} kv_check_call;

/* Calls the op on `key` (pinned to `variant` when not NULL) with the
 * case's layouts and brings the outputs to the host. true: call->out
 * holds nref_out outputs (free them) and call->meta_diff says whether
 * their metadata is wrong. false: nothing to free, and `r` has the row's
 * status (UNSUPPORTED, SKIP, ERROR or FAIL) and message. A crash or hang
 * in here is attributed to `r->check` and `variant` (runner/exec/
 * inflight.h). */
bool kv_check_backend_call(const kv_check_ctx *ctx, int nref_out, kv_key key, const char *variant,
                           kv_check_call *call, kv_check_result *r);

/* The run functions of the check table (check.c), one per file. */
void kv_check_golden_run(const kv_check_ctx *ctx);
void kv_check_variants_run(const kv_check_ctx *ctx);
void kv_check_memory_run(const kv_check_ctx *ctx);
void kv_check_error_run(const kv_check_ctx *ctx);
void kv_check_fastpath_run(const kv_check_ctx *ctx);
void kv_check_lazy_run(const kv_check_ctx *ctx);  /* check_lazy.c */
void kv_check_grad_run(const kv_check_ctx *ctx);  /* check_grad.c */
void kv_check_tune_run(const kv_check_ctx *ctx);  /* check_tune.c */
void kv_check_accuracy_run(const kv_check_ctx *ctx);  /* check_accuracy.c */
void kv_check_threads_run(const kv_check_ctx *ctx);   /* check_threads.c */
/* Whether a case on its default checks runs the threads check too. */
bool kv_check_threads_sampled(const kv_case *c);

/* The status of a row whose call failed with `st` where a failure was
 * not expected: UNSUPPORTED when a device backend has no kernel for the
 * call (KV_ERR_MISSING_KERNEL off the CPU: a plugin lacking an op or a
 * dtype, as its variants rows count it), else `otherwise`. */
kv_result_status kv_check_status_of_failure(const kv_case *c, kv_status st, kv_result_status otherwise);

#endif
