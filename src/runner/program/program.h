/* Program cases (issue 15): a short chain of op calls run as one case, so
 * that bugs which only show in chains (a view of a view reaching a boxed
 * op, a KV-cache cat with a legacy empty tensor at step 0) are caught, and
 * a failure names the first step that diverged.
 *
 * A program lives in a .prog file referenced by a case line
 * (`--program=programs/mlp.prog`, relative to the case file like --batch).
 * Format, one statement per line, `#` starts a comment:
 *
 *   program mlp                                  # the name (once, first)
 *   input x f32 [8,16]                           # NAME DTYPE SHAPE [fill=F] [domain=D] [layout=L] [lazy=B]
 *   input w1 f32 16x32 fill=exact
 *   h = addmm(b1, x, w1)                         # NAME[, NAME...] = OP(ARGS)
 *   a = gelu(h, approximate=tanh)
 *   m, _, _ = native_layer_norm(a, [32], w, b, 1e-05)
 *   output a, m                                  # what the program returns
 *   backward loss                                # optional: a one-element value
 *
 *   - OP is a full op name of kernels/ops.schema (add.Tensor, slice.Tensor);
 *   - ARGS are positional in schema order, then NAME=VALUE by schema name;
 *     a tensor argument takes an earlier value's name (`none` for an
 *     absent Tensor?), a Tensor[] a bracketed list of names ([k0, k1]),
 *     every other argument a literal in the case grammar's spelling
 *     (runner/case/case_args.h); arguments left out take the schema
 *     default;
 *   - the left side names every tensor the op returns (`_` drops one);
 *   - SHAPE is the case grammar's ([8,16], 8x16, [] 0-dim, [0] the legacy
 *     empty tensor); fill is real (default), exact or special; domain is
 *     all (default), positive or nonzero; layout is the case grammar's
 *     c (default), t, s, o or b (runner/exec/inputs.h): where the input
 *     is placed on a device (the truth and its golden never depend on
 *     it; b makes the values repeat along dim 0 in every run); lazy is
 *     neg, conj (complex only) or conj+neg: the input reaches accel
 *     carrying those lazy bits over stored values that read back as the
 *     same logical values (runner/exec/lazy_inputs.h), in the accel rows
 *     only (backend kernels never see a lazy bit); or zero (alone): a
 *     ZeroTensor, whose logical value, so its truth, is all zeros, and
 *     which never requires grad;
 *   - `backward NAME` (at most once, after the steps) makes every floating
 *     input require grad and runs backward from NAME, which must hold one
 *     element (a scalar loss; kv_program_check_loss checks it when a case
 *     file names the program); the accel fast path check then compares
 *     every step's requires_grad and grad_fn and every input's .grad too;
 *   - ops that write an argument (in-place, out=) are refused: a step's
 *     inputs are earlier values that later steps and the comparisons
 *     reuse, so nothing may change them.
 * Errors read "FILE:LINE:COL: message" (KV_ERR_INVALID_ARG; an unknown op
 * is KV_ERR_UNKNOWN_OP), as in the case grammar: kvrun exits 2 before
 * running anything. A program without steps or outputs is an error. */
#ifndef KV_RUNNER_PROGRAM_H
#define KV_RUNNER_PROGRAM_H

#include <stdbool.h>

#include "kv/dispatch.h"
#include "kv/schema.h"
#include "kv/status.h"
#include "runner/case/case.h"
#include "runner/check/check.h"
#include "runner/exec/fill.h"

#define KV_PROG_NAME_MAX 32
#define KV_PROG_MAX_INPUTS 16
#define KV_PROG_MAX_STEPS 48
#define KV_PROG_MAX_VALUES 96
#define KV_PROG_MAX_LIST KV_CASE_MAX_INPUTS
/* The largest .prog file read: programs are a few dozen lines. */
#define KV_PROG_MAX_FILE (256 * 1024)

typedef struct kv_prog_input {
    char name[KV_PROG_NAME_MAX];
    kv_dtype dtype;
    kv_shape shape;
    kv_fill fill;
    kv_fill_domain domain;
    kv_layout layout;
    unsigned lazy;               /* KV_CASE_LAZY_CONJ / _NEG bits */
} kv_prog_input;

typedef enum kv_prog_arg_kind {
    KV_PROG_ARG_DEFAULT,         /* not given: the schema default (or None) */
    KV_PROG_ARG_VALUE,           /* a tensor: an earlier value */
    KV_PROG_ARG_LIST,            /* a Tensor[]: earlier values */
    KV_PROG_ARG_NONE,            /* an absent Tensor? */
    KV_PROG_ARG_LITERAL          /* any other type: canonical text */
} kv_prog_arg_kind;

typedef struct kv_prog_arg {
    kv_prog_arg_kind kind;
    int value;                   /* VALUE */
    int list[KV_PROG_MAX_LIST];  /* LIST */
    int nlist;
    char text[KV_CASE_TEXT_MAX]; /* LITERAL, canonical (case_args.h) */
} kv_prog_arg;

typedef struct kv_prog_step {
    char op[KV_CASE_TEXT_MAX];
    int line, col;               /* of the op name, for messages */
    kv_prog_arg args[KV_SCHEMA_MAX_ARGS]; /* in schema order */
    int nout;                    /* names on the left side */
    int out[KV_CASE_MAX_OUTPUTS]; /* value index, -1 for `_` */
} kv_prog_step;

typedef struct kv_program {
    char path[256];
    char name[KV_PROG_NAME_MAX];
    int ninputs;
    kv_prog_input inputs[KV_PROG_MAX_INPUTS];
    /* Values 0..ninputs-1 are the inputs; the others are step outputs. */
    int nvalues;
    char value_names[KV_PROG_MAX_VALUES][KV_PROG_NAME_MAX];
    int nsteps;
    kv_prog_step steps[KV_PROG_MAX_STEPS];
    int noutputs;
    int outputs[KV_PROG_MAX_VALUES];
    int backward;                /* the loss value of `backward NAME`; -1 when none */
    int backward_line, backward_col; /* of NAME, for messages */
} kv_program;

/* Parses a .prog file (program_parse.c). On success *out is a new program
 * (kv_program_free); on error NULL and the thread's error. */
kv_status kv_program_parse_file(const char *path, kv_program **out);
/* The same for text in memory; `name` stands for the file in messages. */
kv_status kv_program_parse_text(const char *name, const char *text, kv_program **out);
void kv_program_free(kv_program *p);

/* ---- running (program_exec.c) ---- */

/* Every value of one run: inputs and step outputs (owned references). */
typedef struct kv_prog_values {
    kv_tensor *v[KV_PROG_MAX_VALUES];
} kv_prog_values;

void kv_prog_values_free(kv_prog_values *vals);

/* The program's inputs as logical CPU tensors, filled from the case's
 * seed and the program's name (the same bytes on every machine). */
kv_status kv_program_inputs(const kv_program *p, const kv_case *c, kv_prog_values *vals);

/* The boxed arguments of step k over `vals` (each tensor retained into
 * in->tensors, so kv_case_inputs_free releases them), and a case that
 * describes the step as a one-op case (op, input dtypes and shapes,
 * literal arguments, fill real, the given device): what the tolerance
 * table, its bounds and the exact generator read. */
kv_status kv_program_step_inputs(const kv_program *p, int k, kv_tensor *const *vals, kv_case_inputs *in);
void kv_program_step_case(const kv_program *p, int k, const kv_case_inputs *in, kv_device device, kv_case *c);

/* Runs step k on `vals` (kv_call, or kv_redispatch on `ks` when not 0)
 * and stores its outputs into vals (owned). */
kv_status kv_program_step_run(const kv_program *p, int k, kv_prog_values *vals, kv_keyset ks);
/* Whether step s reads value v (a tensor argument or a Tensor[] entry). */
bool kv_program_step_reads(const kv_prog_step *s, int v);

/* Stores step k's outputs `out` (ownership passes; *out is left empty)
 * into vals; KV_ERR_INTERNAL when their count is not the step's. */
kv_status kv_program_step_store(const kv_program *p, int k, kv_case_outputs *out, kv_prog_values *vals);

/* `backward NAME` needs a one-element NAME, which only running the steps
 * tells: they run once on the CPU, on inputs filled from seed 0, up to the
 * step that makes NAME. Any other size is a "FILE:LINE:COL" error at NAME
 * (KV_ERR_INVALID_ARG); a step that fails here is left to the case's run
 * to report. Called when a case file names the program, so the error
 * comes before anything runs (kvrun exit 2). */
kv_status kv_program_check_loss(const kv_program *p);

/* The path the program of case c is read from (c->program). */
kv_status kv_program_load_for(const kv_case *c, kv_program **out);

/* The check of a program case (check_program.c): see there. */
void kv_check_program_run(const kv_check_ctx *ctx);

#endif
