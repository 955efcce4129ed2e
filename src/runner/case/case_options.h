/* The callbacks behind the option table (runner/spec.h), shared between
 * the files that implement them: case_options.c (check/apply/finish, the
 * table), case_id.c (format) and expand.c (input canonicalization). */
#ifndef KV_RUNNER_CASE_OPTIONS_H
#define KV_RUNNER_CASE_OPTIONS_H

#include <stdbool.h>

#include "kv/schema.h"
#include "runner/case/case.h"
#include "runner/case/spec.h"

/* How written shapes map onto an op's tensor arguments.
 *   - No Tensor[] argument: one shape for every required tensor argument
 *     (optional ones absent), or one shape per argument in order, where
 *     the arguments past the last shape must be optional (absent).
 *   - One Tensor[] argument (cat, stack): plain tensor arguments take one
 *     shape each; the list takes the rest (at least one).
 * `is_none[i]` marks written shape i as `none`. */
typedef struct kv_input_plan {
    int n;                               /* inputs, trailing absent ones included */
    int arg[KV_CASE_MAX_INPUTS];         /* schema argument of each input */
    int src[KV_CASE_MAX_INPUTS];         /* which written shape feeds it */
    bool absent[KV_CASE_MAX_INPUTS];
} kv_input_plan;

/* The schema's tensor arguments: their count and whether any is a list. */
int kv_schema_tensor_args(const kv_schema *s, int *idx, int cap, int *list_pos, int *nrequired);
/* 0 on success; -1 with a message in `why`. */
int kv_input_plan_make(const kv_schema *s, int nshapes, const bool *is_none, kv_input_plan *plan,
                       char *why, int whycap);
/* The same, for shapes written with a '/' before the first shape of an
 * op's second Tensor[] list (list_break: its index, -1 when not written).
 * An op whose tensor arguments are two lists (the foreach ops) splits
 * the shapes there, or without a '/' in halves (one shape: one element
 * each); a '/' for any other op is an error. */
/* The schema index of an op's second Tensor[] argument, or -1. */
int kv_case_second_list_arg(const kv_schema *s);
int kv_input_plan_make_lists(const kv_schema *s, int nshapes, const bool *is_none, int list_break,
                             kv_input_plan *plan, char *why, int whycap);
/* Comma-free list of the tensor argument names, for messages: "self, other". */
void kv_schema_tensor_names(const kv_schema *s, char *buf, int cap);

/* Final shape of a case's inputs: absent ones get the first present
 * input's dtype and layout c, trailing absent ones are dropped. */
void kv_case_canonicalize_inputs(kv_case *c);

/* ---- row callbacks: format (case_id.c) ---- */
/* Appends printf-style text at buf[*n] within cap, advancing *n by what it
 * would have written (so a cut is seen as *n >= cap). case_values.c. */
void kv_case_put(char *buf, int cap, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

int kv_case_format_dtype(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_shape(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_layout(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_args(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_fill(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_seed(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_device(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_check(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_tol(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
int kv_case_format_expect(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);

/* ---- lazy= and mode= (case_lazy_mode.c) ---- */
kv_status kv_case_lazy_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt);
kv_status kv_case_lazy_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice);
kv_status kv_case_lazy_finish(kv_case *c, const kv_option_ctx *ctx);
int kv_case_format_lazy(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
kv_status kv_case_mode_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt);
kv_status kv_case_mode_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice);
int kv_case_format_mode(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);
/* 0 when gradients of the case can be checked (the op has an autograd
 * formula and a floating or complex input that is not zero); -1 with the
 * reason in `why`. */
int kv_case_grad_why_not(const kv_case *c, const kv_op *op, char *why, int cap);

/* ---- out= (case_out.c) ---- */
kv_status kv_case_out_check(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt);
kv_status kv_case_out_apply(kv_case *c, const kv_option_ctx *ctx, const int *choice);
kv_status kv_case_out_finish(kv_case *c, const kv_option_ctx *ctx);
int kv_case_format_out(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap);

/* Shortest text that strtod reads back as exactly d ("nan", "inf" too). */
int kv_case_format_double(double d, char *buf, int cap);

/* Parses a seed: decimal uint64. */
int kv_case_seed_parse(const char *text, uint64_t *out);
/* Parses expect=: "pass" (or "ok") or a kv_status_name. */
int kv_case_expect_parse(const char *text, kv_status *out);

#endif
