/* Values of a case's non-tensor op arguments (args=), checked against the
 * op schema's types and kept in one canonical spelling, so equal values
 * give equal case IDs and the ID text parses back.
 *
 * Accepted spellings, by schema type:
 *   int, SymInt     decimal, optional '-'                    dim=-1
 *   int[], int[N]   [a,b,...] or [] ; a bare int for int[N]  dim=[0,1], dim=1
 *   float           strtod syntax, nan, inf                  eps=1e-05
 *   bool            0, 1, true, false                        keepdim=1
 *   Scalar          kv_scalar_parse                          alpha=2, alpha=1+2j
 *   ScalarType      a dtype name                             dtype=f64
 *   str             text without , ; | ( ) [ ] or blanks     approximate=tanh
 *   Device          kv_device_parse                          device=cuda:1
 *   Layout          strided or an int
 *   MemoryFormat    contiguous_format, preserve_format, channels_last,
 *                   channels_last_3d, or an int
 *   none            None, only for optional arguments (T?); for a plain str
 *                   "none" is the string "none".
 * Canonical text: ints in decimal; int lists "[0,1]", a one-element list of
 * an int[1] as a bare int and a bare int of an int[N>1] as N copies; floats
 * in the shortest form that reads back exactly; bools 0/1; scalars as
 * kv_scalar_format; dtypes and devices by name (index 0 left out). */
#ifndef KV_RUNNER_CASE_ARGS_H
#define KV_RUNNER_CASE_ARGS_H

#include <stdint.h>

#include "kv/schema.h"
#include "kv/stack.h"
#include "runner/case/case.h"

#define KV_CASE_ARG_MAX_INTS 16

/* Checks `text` as a value of schema argument `a` and writes its canonical
 * text. 0 on success; -1 with a reason in `why` and the byte offset of the
 * problem in *bad_at. */
int kv_case_arg_canonical(const kv_arg *a, const char *text, char *out, int cap, char *why,
                          int whycap, int *bad_at);
/* Canonical text of the schema default of `a` (a->has_default); -1 if it
 * has none. */
int kv_case_arg_default_text(const kv_arg *a, char *out, int cap);
/* The stack value of canonical text `text` for argument `a`. Int lists go
 * into ints[] (cap entries), a Generator's state into *gen; strings point
 * into `text`, which must outlive the value. */
kv_status kv_case_arg_ivalue(const kv_arg *a, const char *text, kv_ivalue *out, int64_t *ints,
                             int cap, kv_generator *gen);
/* The value given for argument `name` in the case (canonical text), or
 * NULL when the schema default applies. */
const char *kv_case_arg_value(const kv_case *c, const char *name);

#endif
