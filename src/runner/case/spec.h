/* Parsed, not yet expanded cases (DESIGN.md section 6).
 *
 * The grammar (runner/grammar.h) turns each case line into a kv_case_spec:
 * for every option the line sets (itself or through defaults), the list of
 * alternatives as written, each character tagged with its column so every
 * later error can say FILE:LINE:COL. Expansion (runner/expand.h) takes the
 * cartesian product into kv_case values.
 *
 * An option's alternatives are arranged in axes; the cartesian product runs
 * over every axis of every option. Most options have one axis (`dtype=f32,f64`
 * is one axis of two alternatives). `args=` has one axis per argument
 * (`args=dim=0,1,keepdim=0,1` is two axes of two). A set-valued option
 * (`check=golden,memory`) is one axis of one alternative.
 *
 * The option table
 * ----------------
 * kv_case_options[] lists every case option, one row each. The table order
 * is the order of the keys in canonical case IDs and the order of
 * expansion (the first row varies slowest). The tokenizer, the include
 * logic and the expansion loop never name an option (except `op`, which
 * makes a line a case line); they go through the rows. To add an option
 * (say `lazy=conj@0` or `mode=grad`):
 *   1. add a field to kv_case (runner/case.h) and its default to kv_case_init;
 *   2. write its callbacks: `check` (one alternative, no op known),
 *      `apply` (one chosen alternative into the case, op known), optionally
 *      `finish` (defaults and cross-option rules, run for every case whether
 *      or not the option was given) and `format` (canonical text, 0 when at
 *      its default so IDs leave it out);
 *   3. add the row at the place its key should take in case IDs, with the
 *      KV_TEXT_* flags saying whether it belongs in the ID, the golden key
 *      and the repro line.
 * Nothing else changes: grammar.c, expand.c and case_id.c loop over rows. */
#ifndef KV_RUNNER_SPEC_H
#define KV_RUNNER_SPEC_H

#include <stdbool.h>

#include "kv/dispatch.h"
#include "kv/schema.h"
#include "kv/status.h"
#include "runner/case/case.h"

#define KV_SPEC_MAX_OPTIONS 24

/* One alternative as written (quotes removed). */
typedef struct kv_spec_alt {
    char *text;
    int *cols;     /* cols[i]: column of text[i]; cols[strlen(text)]: one past the end */
} kv_spec_alt;

typedef struct kv_spec_axis {
    char *label;   /* args=: the argument name; NULL for other options */
    int label_col;
    kv_spec_alt *alts;
    int nalts;
} kv_spec_axis;

/* One `--key=value` token. Immutable once built and shared (refcounted)
 * between the defaults and every spec that inherits it. */
typedef struct kv_spec_option {
    int refs;
    int row;       /* index in kv_case_options */
    char *file;    /* for messages: the path as shown, or "<command line>" */
    int line;
    int col;       /* of the token's first character ("--dtype=...") */
    kv_spec_axis *axes;
    int naxes;
} kv_spec_option;

/* One case line with its defaults merged in: opts[row] is NULL where the
 * option is not given. inherited[row] says it came from a defaults line
 * (or a --batch line) rather than the case line itself. */
typedef struct kv_case_spec {
    kv_case_origin origin;
    int op_col;    /* column of --op=, where errors about the case as a whole point */
    kv_spec_option *opts[KV_SPEC_MAX_OPTIONS];
    bool inherited[KV_SPEC_MAX_OPTIONS];
} kv_case_spec;

typedef struct kv_spec_list {
    kv_case_spec *items;
    int n, cap;
} kv_spec_list;

/* ---- options, specs and lists (src/runner/spec.c) ---- */
kv_spec_option *kv_spec_option_new(int row, const char *file, int line, int col);
/* Appends an axis (label may be NULL) and returns its index, or -1 on OOM. */
int kv_spec_option_add_axis(kv_spec_option *o, const char *label, int label_col);
/* Appends an alternative to axis `axis`: len bytes of text with their columns. */
kv_status kv_spec_option_add_alt(kv_spec_option *o, int axis, const char *text,
                                 const int *cols, int len);
void kv_spec_option_retain(kv_spec_option *o);
void kv_spec_option_release(kv_spec_option *o);   /* NULL is allowed */

/* Copies (retaining every option). */
void kv_case_spec_copy(kv_case_spec *dst, const kv_case_spec *src);
void kv_case_spec_clear(kv_case_spec *s);          /* releases every option */
kv_status kv_spec_list_push(kv_spec_list *l, const kv_case_spec *s); /* retains */
void kv_spec_list_free(kv_spec_list *l);

/* Records "FILE:LINE:COL: message" as this thread's error and returns code. */
kv_status kv_spec_error(kv_status code, const char *file, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Column of byte `offset` of an alternative (clamped to its text). */
int kv_spec_alt_col(const kv_spec_alt *a, int offset);

/* ---- the option table (src/runner/case_options.c) ---- */

/* How a value splits into alternatives. */
typedef enum kv_option_split {
    KV_SPLIT_LIST,     /* v1,v2,...: commas outside brackets; the cartesian axis */
    KV_SPLIT_WHOLE,    /* one alternative, the whole value (sets: check=a,b) */
    KV_SPLIT_ARGS      /* name=v1,v2,name=...: one axis per name; a bare value is one more alternative of the name before it */
} kv_option_split;

/* What a row's text is for: the canonical ID, the golden key, the repro line. */
enum {
    KV_TEXT_IN_ID = 1u << 0,
    KV_TEXT_IN_GOLDEN = 1u << 1,
    KV_TEXT_IN_REPRO = 1u << 2
};

typedef enum kv_text_form {
    KV_TEXT_ID,        /* case IDs and golden keys: shapes [4,5], args a=1;b=2 */
    KV_TEXT_REPRO      /* command lines: shapes 4x5, args a=1,b=2 */
} kv_text_form;

/* What row callbacks see. During parse-time checks only `opt` is set. */
typedef struct kv_option_ctx {
    const kv_case_spec *spec;
    const kv_spec_option *opt;   /* this row's option; NULL when not given */
    bool inherited;              /* opt came from defaults, not the case line */
    const kv_op *op;
    const kv_schema *schema;
} kv_option_ctx;

typedef struct kv_option_row {
    const char *name;
    kv_option_split split;
    /* Apply order: rows apply by (stage, table index) so that what others
     * depend on comes first: 0 the op, 1 the tensor inputs (shape), 2 the rest. */
    int stage;
    unsigned text;               /* KV_TEXT_IN_* */
    /* Validates one alternative without knowing the op (at parse time, so
     * a bad value in a defaults line is found even if no case uses it). */
    kv_status (*check)(const kv_option_ctx *ctx, int axis, const kv_spec_alt *alt);
    /* Writes the chosen alternatives (choice[axis]) into the case. */
    kv_status (*apply)(kv_case *c, const kv_option_ctx *ctx, const int *choice);
    /* Runs for every case after every apply, given or not (opt NULL). */
    kv_status (*finish)(kv_case *c, const kv_option_ctx *ctx);
    /* The value's canonical text (no key); 0 when at the default (left out).
     * `s` may be NULL when the op is not registered. snprintf style. */
    int (*format)(const kv_case *c, const kv_schema *s, kv_text_form form, char *buf, int cap);
} kv_option_row;

extern const kv_option_row kv_case_options[];
extern const int kv_case_option_count;
/* Row index of an option name, or -1. */
int kv_case_option_find(const char *name);
/* Row index of `op`, the option that makes a line a case line. */
int kv_case_option_op_row(void);
/* Row index of `program`, the other option that makes a line a case line
 * (runner/program/program.h). */
int kv_case_option_program_row(void);

#endif
