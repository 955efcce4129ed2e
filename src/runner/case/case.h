/* The case model of the runner (DESIGN.md section 6).
 *
 * A case file line (or a kvrun command line) is a set of options. Parsing
 * turns it into a kv_case_spec: every option with its list of alternatives.
 * Expansion takes the cartesian product into concrete kv_case values, one
 * per problem. A concrete case knows its canonical ID (filtering, reports,
 * baselines, repro lines) and its golden key (the logical problem only:
 * op, dtypes, shapes, args, fill, seed; not device, layout or checks). */
#ifndef KV_RUNNER_CASE_H
#define KV_RUNNER_CASE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dtype.h"
#include "kv/status.h"
#include "kv/tensor.h"

#define KV_CASE_MAX_INPUTS 8     /* tensor inputs per case (Tensor[] elements count) */
#define KV_CASE_MAX_ARGS 12      /* non-tensor arguments given in args= */
#define KV_CASE_TEXT_MAX 96      /* one argument value, one op name */
#define KV_CASE_ID_MAX 512
/* A repro line: the program, its backends and settings, then the case. */
#define KV_CASE_REPRO_MAX 1536

/* Where a case came from, for file:line:col messages. */
typedef struct kv_case_origin {
    char file[256];              /* "<command line>" for argv */
    int line;
} kv_case_origin;

typedef enum kv_layout {
    KV_LAYOUT_CONTIGUOUS,        /* c: row-major */
    KV_LAYOUT_TRANSPOSED,        /* t: last two dims swapped in memory */
    KV_LAYOUT_STRIDED,           /* s: every other element of a wider buffer */
    KV_LAYOUT_OFFSET,            /* o: a non-zero storage offset */
    KV_LAYOUT_BROADCAST,         /* b: leading dim expanded from size 1 (stride 0) */
    KV_LAYOUT_WINDOW             /* w: dim-0 rows overlap, like unfold windows with step < size */
} kv_layout;

typedef enum kv_fill {
    KV_FILL_EXACT,               /* small dyadic values: results exact in the output dtype */
    KV_FILL_REAL,                /* uniform over the op's domain */
    KV_FILL_SPECIAL,             /* NaN, +-Inf, +-0, subnormals, extremes */
    KV_FILL_SWEEP,               /* a stratified walk over the dtype's bit patterns (accuracy sweeps) */
    KV_FILL_SHIFTED              /* real plus a large offset: mean large against the spread (variances) */
} kv_fill;

/* Checks a case can request (check=). A bit set: a case runs several. */
typedef enum kv_check_kind {
    KV_CHECK_GOLDEN,
    KV_CHECK_VARIANTS,
    KV_CHECK_MEMORY,
    KV_CHECK_ERROR,
    KV_CHECK_LAZY,               /* lazy bits and modes: golden values AND the path ran (check_lazy.c) */
    KV_CHECK_GRAD,               /* gradcheck, and gradients equal across paths (check_grad.c) */
    KV_CHECK_FASTPATH,           /* device=accel: every fast path ON vs OFF bit for bit, and the counters (check_fastpath.c) */
    KV_CHECK_TUNE,               /* perf_dispatch: the choice is compatible, forced variants equal direct calls (check_tune.c) */
    KV_CHECK_ACCURACY,           /* ulp error of every backend and variant against the truth (check_accuracy.c) */
    KV_CHECK_THREADS,            /* each plugin kernel from several threads at once (check_threads.c) */
    KV_CHECK_KIND_COUNT
} kv_check_kind;

/* Lazy bits a case puts on an input (lazy=), one bit set per input. */
enum {
    KV_CASE_LAZY_CONJ = 1u << 0, /* Conjugate: complex inputs only */
    KV_CASE_LAZY_NEG = 1u << 1,  /* Negative */
    KV_CASE_LAZY_ZERO = 1u << 2  /* ZeroTensor: the input's logical values become zeros */
};

/* Modes a case runs under (mode=); a case holds a bit set of 1u << mode.
 * The order is the order of the names in canonical IDs. */
typedef enum kv_case_mode {
    KV_MODE_GRAD,                /* inputs require grad; autograd records */
    KV_MODE_NO_GRAD,             /* inputs require grad; the op runs under a no-grad guard */
    KV_MODE_AUTOCAST_F16,
    KV_MODE_AUTOCAST_BF16,
    KV_MODE_FUNCTIONALIZE,
    KV_MODE_TRACE,               /* a trace recorder is on the callback stack */
    KV_MODE_VMAP,                /* kv_vmap_call over a batch of KV_CASE_VMAP_BATCH samples */
    KV_MODE_COUNT
} kv_case_mode;

#define KV_CASE_VMAP_BATCH 3

typedef struct kv_shape {
    int ndim;                    /* 0 for a 0-dim tensor */
    int64_t sizes[KV_MAX_DIMS];
} kv_shape;

/* One non-tensor op argument by schema name, as text ("1", "[0,1]", "none"). */
typedef struct kv_case_arg {
    char name[32];
    char value[KV_CASE_TEXT_MAX];
} kv_case_arg;

/* A tolerance override (tol=): "bitwise", "ulp:N", "abs:X", "rel:X". */
typedef enum kv_tol_kind {
    KV_TOL_DEFAULT,              /* the op x dtype table decides */
    KV_TOL_BITWISE,
    KV_TOL_ULP,
    KV_TOL_ABS,
    KV_TOL_REL
} kv_tol_kind;

typedef struct kv_tolerance {
    kv_tol_kind kind;
    double value;
} kv_tolerance;

/* A concrete, fully expanded case. */
typedef struct kv_case {
    char op[KV_CASE_TEXT_MAX];
    int ninputs;                 /* tensor inputs, in schema order (lists flattened) */
    kv_dtype dtypes[KV_CASE_MAX_INPUTS];
    kv_shape shapes[KV_CASE_MAX_INPUTS];
    kv_layout layouts[KV_CASE_MAX_INPUTS];
    /* Which schema argument input i feeds (every element of a Tensor[]
     * names the list argument), so the runner can build the stack. */
    int input_arg[KV_CASE_MAX_INPUTS];
    /* An absent optional tensor (`none`): pushed as None; its dtype,
     * shape and layout mean nothing. Tensor? arguments past ninputs are
     * absent too (trailing absent inputs are never stored). */
    bool absent[KV_CASE_MAX_INPUTS];
    int nargs;
    kv_case_arg args[KV_CASE_MAX_ARGS];
    kv_fill fill;
    uint64_t seed;
    kv_device device;
    unsigned char lazy[KV_CASE_MAX_INPUTS]; /* KV_CASE_LAZY_* bits of each input */
    unsigned modes;              /* bit set of 1u << kv_case_mode */
    unsigned checks;             /* bit set of 1u << kv_check_kind */
    kv_tolerance tol;
    kv_status expect;            /* KV_OK: must pass; else the error code it must raise */
    kv_case_origin origin;
    /* A program case (--program=, runner/program/program.h): the .prog
     * path as resolved against the case file; "" for a one-op case. Its
     * `op` is "program:NAME" and it has no tensor inputs of its own. */
    char program[256];
    /* --out=@N[.t] (case_out.c): out is input out_alias - 1 itself (0: a
     * tensor of its own), transposed when out_alias_t. */
    signed char out_alias;
    bool out_alias_t;
    /* out is the odd elements of the last dim of a storage whose even ones
     * are input N (placed in layout s in every run): interleaved views
     * that share no element. */
    bool out_alias_i;
} kv_case;

/* Canonical case ID: op(key=value,...) with keys in a fixed order, default
 * values left out, per-input lists collapsed to one value when all equal.
 * e.g. add.Tensor(dtype=f32,shape=[64,33]:[33],layout=t,device=accel) */
int kv_case_id(const kv_case *c, char *buf, int cap);
/* The golden key: the logical problem only (no device, layout, checks). */
int kv_case_golden_key(const kv_case *c, char *buf, int cap);
/* A repro line that kvrun accepts: `kvrun --op=... --dtype=...`, after
 * the prefix below (default "kvrun"). */
int kv_case_repro(const kv_case *c, char *buf, int cap);
/* What every repro line starts with (repro.c): the program as invoked and
 * whatever else makes the case run the same way — environment variables,
 * --backend=, --accel-target=, --gate= — as one shell-ready text. kvrun
 * sets it once its plugins are loaded; NULL restores "kvrun". */
void kv_case_repro_set_prefix(const char *prefix);
const char *kv_case_repro_prefix(void);

const char *kv_layout_name(kv_layout l);        /* short: "c", "t", "s", "o", "b", "w" */
/* Layout w over shape sh: the stride of dim 0, in elements, when the
 * layout makes rows overlap there (at least 2 dims, dim 0 of size >= 2,
 * rows of R >= 2 elements, inner dims row-major: stride ceil(R/2), so
 * consecutive rows share their last floor(R/2) elements, the windows of
 * unfold(size=R, step=ceil(R/2)) over one long row); 0 when w does not
 * apply to sh (then it is laid out contiguous, as t is on fewer than two
 * dims). */
int64_t kv_layout_window_step(const kv_shape *sh);
/* The tensor --out=@N[.t] makes out: input N of `tensors` itself (a new
 * reference) or its transposed view. NULL + error when it is none. */
kv_tensor *kv_case_out_alias_of(const kv_case *c, kv_tensor *const *tensors);
const char *kv_fill_name(kv_fill f);
const char *kv_check_kind_name(kv_check_kind k);

/* ---- additions (src/runner/case_id.c, case_options.c) ---- */

/* Every field at its default: fill real, seed 0, device cpu, layouts c,
 * dtypes f32, expect pass, no checks yet (expansion fills them in). */
void kv_case_init(kv_case *c);
/* Parsers for the names above; 0 on success, -1 if unknown. Layouts take
 * the short and the long names ("t", "transposed"). */
int kv_layout_parse(const char *text, kv_layout *out);
int kv_fill_parse(const char *text, kv_fill *out);
int kv_check_kind_parse(const char *text, kv_check_kind *out);
/* "bitwise", "ulp:4", "abs:1e-05", "rel:0.001"; "" for KV_TOL_DEFAULT. */
int kv_tolerance_format(kv_tolerance t, char *buf, int cap);
int kv_tolerance_parse(const char *text, kv_tolerance *out);
/* "pass" for KV_OK, else kv_status_name. */
const char *kv_case_expect_name(kv_status expect);
/* The checks a case runs when check= is not given: golden, variants and
 * memory for expect=pass; error and memory for an expected error. */
unsigned kv_case_default_checks(kv_status expect);
/* The checks a case runs when check= is not given, mode and lazy bits
 * considered: kv_case_default_checks for a plain case; golden and lazy
 * (and grad under mode=grad) for a case with lazy= or mode=; lazy alone
 * when such a case expects an error (the plain inputs would not raise it). */
unsigned kv_case_default_checks_for(const kv_case *c);
/* Whether the case has lazy bits or modes (what the lazy check proves). */
bool kv_case_has_lazy_or_mode(const kv_case *c);
/* "grad", "no_grad", "autocast_f16", ...; parse returns 0, or -1 if unknown. */
const char *kv_case_mode_name(kv_case_mode m);
int kv_case_mode_parse(const char *text, kv_case_mode *out);
/* "conj", "neg", "zero" for one KV_CASE_LAZY_* bit. */
const char *kv_case_lazy_name(unsigned bit);
/* Shape text: "[4,5]", "[]" (0-dim), "[0,3]"; with `x_form` "4x5", "[]",
 * "0x3" (no shell metacharacters, for repro lines). snprintf style. */
int kv_case_shape_format(const kv_shape *s, bool x_form, char *buf, int cap);
/* Parses "4x5", "[4,5]", "[]", "7". 0 on success; -1 with a reason in
 * `why` and the byte offset of the problem in *bad_at. */
int kv_case_shape_parse(const char *text, kv_shape *out, char *why, int whycap, int *bad_at);

#endif
