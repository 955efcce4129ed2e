/* Expansion: a parsed spec into concrete cases (DESIGN.md section 6).
 *
 * The cartesian product runs over every axis of every option the spec
 * sets, in option-table order with alternatives in the order written; the
 * first axis varies slowest, so
 *   --op=add.Tensor --dtype=f32,f64 --shape=4,[]
 * gives (f32,[4]), (f32,[]), (f64,[4]), (f64,[]). Each combination is
 * validated against the op schema before it becomes a case (tensor-input
 * counts, argument names and types, missing arguments); an error names
 * FILE:LINE:COL of the option (or value) at fault. */
#ifndef KV_RUNNER_EXPAND_H
#define KV_RUNNER_EXPAND_H

#include "kv/status.h"
#include "runner/case/case.h"
#include "runner/case/grammar.h"
#include "runner/case/spec.h"

/* A line may not expand to more cases than this (a typo such as a long
 * seed list would otherwise eat the machine). */
#define KV_EXPAND_MAX_CASES 100000

typedef struct kv_case_list {
    kv_case *items;
    int n, cap;
} kv_case_list;

kv_status kv_case_list_push(kv_case_list *l, const kv_case *c);
void kv_case_list_free(kv_case_list *l);

/* Appends the cases of one spec / of every spec. On error `out` keeps the
 * cases appended before it; free it either way. */
kv_status kv_spec_expand(const kv_case_spec *spec, kv_case_list *out);
kv_status kv_spec_list_expand(const kv_spec_list *specs, kv_case_list *out);

/* Parse and expand in one go. */
kv_status kv_cases_from_file(const char *path, kv_case_list *out);
kv_status kv_cases_from_text(const char *name, const char *text, kv_case_list *out);
kv_status kv_cases_from_argv(int argc, char *const argv[], kv_grammar_skip_fn skip, void *ctx,
                             kv_case_list *out);

#endif
