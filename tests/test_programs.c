/* Program cases (src/runner/program/, src/runner/check/check_program.c):
 *   - .prog parse errors read FILE:LINE:COL: message, one per rule;
 *   - --program= lines: path relative to the case file, options a program
 *     does not take are errors, --op and --program together are an error,
 *     the case ID and repro line;
 *   - the suite's programs pass on the CPU (golden included) and on accel
 *     (teacher-forced rows and fast path ON vs OFF under both gates);
 *   - a broken fast path inside one step (the gate forced open with the
 *     test-only hook of src/boxing/gate.c, so a Negative bit reaches the
 *     target's mm kernel) fails the fastpath rows naming that step's op,
 *     not the steps before it, and passes again with the hook off; so does
 *     a layer the seed gate does not know, registered inside one step. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/accel.h"
#include "kv/backend.h"
#include "kv/kv.h"
#include "kv/tune.h"
#include "runner/case/expand.h"
#include "runner/check/check.h"
#include "runner/check/check_fastpath.h"
#include "runner/golden/golden.h"
#include "runner/program/program.h"

static kv_golden_store *store;
static char tmpdir[64];

static int group_setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    kv_backend_load_default(NULL, 0, NULL);
    store = kv_golden_open("golden");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kv_test_programs.XXXXXX");
    if (mkdtemp(tmpdir) == NULL) return -1;
    return store ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    kv_golden_close(store);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return -1;
    return 0;
}

static void write_file(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* ---- parse errors ---- */

typedef struct parse_error_row {
    const char *text;
    const char *message;   /* the whole error message, FILE:LINE:COL first */
} parse_error_row;

#define HEAD "program p\ninput x f32 [2,3]\n"

static const parse_error_row parse_errors[] = {
    { HEAD "y = nosuchop(x)\noutput y\n", "t.prog:3:5: unknown op 'nosuchop' (not in kernels/ops.schema)" },
    { HEAD "y = neg(z)\noutput y\n", "t.prog:3:9: unknown value 'z'" },
    { "program p\ninput x f99 [2,3]\n", "t.prog:2:9: unknown dtype 'f99'" },
    { "program p\ninput x f32 [2,-3]\n", NULL }, /* a bad shape: message from the shape parser */
    { HEAD "y = neg(x\noutput y\n", "t.prog:3:10: missing ')'" },
    { HEAD "y = add_.Tensor(x, x)\noutput y\n",
      "t.prog:3:5: add_.Tensor writes its argument 'self': in-place and out= ops are not allowed in programs" },
    { HEAD "output x\n", "t.prog:3:1: the program has no steps (a program that runs nothing proves nothing)" },
    { HEAD "y = neg(x)\n", "t.prog:3:1: the program has no 'output' line" },
    { HEAD "x = neg(x)\noutput x\n", "t.prog:3:1: 'x' is already defined" },
    { HEAD "y, z = neg(x)\noutput y\n", "t.prog:3:4: neg returns 1 tensor" },
    { HEAD "y = addmm(x, x)\noutput y\n", "t.prog:3:5: addmm: argument 'mat2' is required" },
    { HEAD "y = gelu(x, approximate=[1)\noutput y\n", NULL }, /* a bad literal */
    { HEAD "y = sum.dim_IntList(x, dim=zz)\noutput y\n", NULL },
    { HEAD "y = neg(x, x)\noutput y\n", "t.prog:3:12: neg takes at most 1 arguments" },
    { HEAD "y = neg(self=x, x)\noutput y\n", "t.prog:3:17: a positional argument after a keyword argument" },
    { HEAD "y = cat(x)\noutput y\n", "t.prog:3:9: argument 'tensors' is a Tensor[]: give [NAME, ...]" },
    { HEAD "y = neg(x)\noutput w\n", "t.prog:4:8: unknown value 'w'" },
    { "input x f32 [2]\ny = neg(x)\noutput y\n", "t.prog:1:1: missing 'program NAME'" },
    { HEAD "input w f32 [2] fill=sweep\n", "t.prog:3:22: unknown fill 'sweep' (real, exact or special)" },
    { HEAD "input w f32 [2] lazy=conj\n", "t.prog:3:22: lazy=conj: the Conjugate bit needs a complex dtype" },
    { HEAD "input w f32 [2] lazy=pos\n", "t.prog:3:22: unknown lazy bits 'pos' (neg, conj, conj+neg or zero)" },
    { HEAD "input w f32 [2] lazy=zero+neg\n",
      "t.prog:3:22: lazy=zero+neg: zero goes alone (a ZeroTensor's values are zeros whatever other bits say)" },
    { HEAD "input w i64 [2] lazy=zero\n", "t.prog:3:22: lazy=zero: input 'w' is i64: lazy bits go on floating and complex inputs only" },
    { HEAD "input w f32 [2] layout=q\n", "t.prog:3:24: unknown layout 'q' (c, t, s, o, b or w)" },
    { HEAD "input w f32 [2] colour=red\n", "t.prog:3:17: unknown input option 'colour=red' (fill=, domain=, layout= or lazy=)" },
    { HEAD "y = neg(x)\ninput w f32 [2]\noutput y\n", "t.prog:4:1: inputs must come before the first step" },
    { HEAD "y = neg(x)\noutput y\nbackward z\n", "t.prog:5:10: unknown value 'z'" },
    { HEAD "y = neg(x)\noutput y\nbackward x\n", "t.prog:5:10: 'x' is an input: backward needs a value a step made" },
    { HEAD "y = neg(x)\nbackward y\nz = neg(y)\noutput z\n", "t.prog:5:1: steps must come before the 'backward' line" },
    { HEAD "y = neg(x)\noutput y\nbackward y\nbackward y\n", "t.prog:6:1: a program has at most one 'backward' line" },
    { HEAD "input w f32 [2] domain=odd\n", "t.prog:3:24: unknown domain 'odd' (all, positive or nonzero)" },
    { HEAD "program q\n", "t.prog:3:1: the program is already named 'p'" },
    { "input x f32 [2]\nprogram p\n", "t.prog:2:1: 'program NAME' must come before inputs and steps" },
    { "program 9p\n", "t.prog:1:9: expected a program name after 'program'" },
    { HEAD "input abcdefghijabcdefghijabcdefghijabcdefghij f32 [2]\n", NULL },
    { HEAD "y = neg(x)\noutput y, y\n", "t.prog:4:11: 'y' is already an output" },
    { HEAD "y = is_conj(x)\noutput y\n", "t.prog:3:5: is_conj does not return tensors only: programs chain tensor values" },
    { HEAD "y = neg x\noutput y\n", "t.prog:3:9: expected '(' after the op name" },
    { HEAD "y = neg(x) z\noutput y\n", "t.prog:3:12: unexpected text after ')'" },
    { HEAD "y = neg(selfie=x)\noutput y\n", "t.prog:3:9: neg has no argument 'selfie'" },
    { HEAD "y = neg(x, self=x)\noutput y\n", "t.prog:3:12: argument 'self' given twice" },
    { HEAD "y = neg(none)\noutput y\n", "t.prog:3:9: argument 'self': a required tensor cannot be none" },
    { HEAD "y = cat([x, q])\noutput y\n", "t.prog:3:13: unknown value 'q'" },
    { HEAD "y = cat([])\noutput y\n", "t.prog:3:10: argument 'tensors': an empty tensor list" },
    { HEAD "y = cat([x x])\noutput y\n", "t.prog:3:12: argument 'tensors': expected ',' or ']'" },
    { HEAD "= neg(x)\noutput y\n", "t.prog:3:1: expected a value name (or _) before '='" },
    { HEAD "y = (x)\noutput y\n", NULL },
    { HEAD "y = neg(x)\noutput y\nbackward\n", NULL },
    { HEAD "frobnicate\n",
      "t.prog:3:1: expected 'program NAME', 'input NAME DTYPE SHAPE', 'NAME = OP(ARGS)' or 'output NAME'" },
};

static void test_parse_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof parse_errors / sizeof parse_errors[0]; i++) {
        kv_program *p = NULL;
        const kv_status st = kv_program_parse_text("t.prog", parse_errors[i].text, &p);
        if (st == KV_OK) fprintf(stderr, "row %zu parsed: %s\n", i, parse_errors[i].text);
        assert_int_not_equal(st, KV_OK);
        assert_null(p);
        const char *msg = kv_last_error_message();
        /* Every message is FILE:LINE:COL: ... */
        int line = 0, col = 0;
        assert_int_equal(sscanf(msg, "t.prog:%d:%d:", &line, &col), 2);
        assert_true(line > 0 && col > 0);
        if (parse_errors[i].message && strcmp(msg, parse_errors[i].message) != 0) {
            fprintf(stderr, "row %zu: got '%s'\n  want '%s'\n", i, msg, parse_errors[i].message);
            fail();
        }
    }
}

/* Files: only regular files, without NUL bytes, of bounded size. */
static void test_parse_files(void **state) {
    (void)state;
    kv_program *p = NULL;
    assert_int_not_equal(kv_program_parse_file("/dev/zero", &p), KV_OK);
    assert_string_equal(kv_last_error_message(), "/dev/zero: not a regular file (a program must be one)");
    assert_int_not_equal(kv_program_parse_file("/nonexistent/x.prog", &p), KV_OK);
    assert_string_equal(kv_last_error_message(), "/nonexistent/x.prog: cannot open the program");
    char path[256];
    snprintf(path, sizeof path, "%s/nul.prog", tmpdir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fwrite("program a\0\n", 1, 12, f);
    fclose(f);
    assert_int_not_equal(kv_program_parse_file(path, &p), KV_OK);
    assert_non_null(strstr(kv_last_error_message(), "contains a NUL byte"));
    snprintf(path, sizeof path, "%s/big.prog", tmpdir);
    f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i <= KV_PROG_MAX_FILE / 8; i++) fputs("#######\n", f);
    fclose(f);
    assert_int_not_equal(kv_program_parse_file(path, &p), KV_OK);
    assert_non_null(strstr(kv_last_error_message(), "larger than"));
    char line[2048];
    memset(line, '#', sizeof line - 1);
    line[sizeof line - 1] = '\0';
    assert_int_not_equal(kv_program_parse_text("long.prog", line, &p), KV_OK);
    assert_string_equal(kv_last_error_message(), "long.prog:1:1: line too long (at most 1023 characters)");
    assert_null(p);
}

static void test_parse_ok(void **state) {
    (void)state;
    kv_program *p = NULL;
    const char *text = "# comment\nprogram ok   # trailing\ninput x f32 4x5 fill=exact domain=positive\n"
                       "input e f32 [0] layout=o\n"
                       "m, _, _ = native_layer_norm(x, [5], none, none, 1e-05)\n"
                       "y = cat([e, m], 0)\nz = slice.Tensor(y, dim=1, start=1)\noutput z, m\n";
    assert_int_equal(kv_program_parse_text("ok.prog", text, &p), KV_OK);
    assert_string_equal(p->name, "ok");
    assert_int_equal(p->ninputs, 2);
    assert_int_equal(p->inputs[0].fill, KV_FILL_EXACT);
    assert_int_equal(p->inputs[0].domain, KV_DOMAIN_POSITIVE);
    assert_int_equal(p->inputs[0].layout, KV_LAYOUT_CONTIGUOUS);
    assert_int_equal(p->inputs[1].layout, KV_LAYOUT_OFFSET);
    assert_int_equal(p->inputs[1].shape.ndim, 1);
    assert_int_equal(p->inputs[1].shape.sizes[0], 0);
    assert_int_equal(p->nsteps, 3);
    assert_int_equal(p->steps[0].nout, 3);
    assert_int_equal(p->steps[0].out[1], -1);
    assert_int_equal(p->steps[1].args[0].kind, KV_PROG_ARG_LIST);
    assert_int_equal(p->steps[1].args[0].nlist, 2);
    assert_int_equal(p->steps[2].args[1].kind, KV_PROG_ARG_LITERAL);
    assert_int_equal(p->steps[2].args[3].kind, KV_PROG_ARG_DEFAULT);
    assert_int_equal(p->noutputs, 2);
    kv_program_free(p);
}

/* ---- case lines ---- */

static kv_status cases_in_tmp(const char *text, kv_case_list *out) {
    char name[256];
    snprintf(name, sizeof name, "%s/t.case", tmpdir);
    memset(out, 0, sizeof *out);
    return kv_cases_from_text(name, text, out);
}

static void test_case_lines(void **state) {
    (void)state;
    write_file("a.prog", "program a\ninput x f32 [3]\ny = neg(x)\noutput y\n");
    kv_case_list cl;
    /* Relative to the case file; inherited op options are dropped. */
    assert_int_equal(cases_in_tmp("--dtype=f64,f32 --device=accel\n--program=a.prog --seed=1,2\n", &cl), KV_OK);
    assert_int_equal(cl.n, 2);
    char id[KV_CASE_ID_MAX], want[KV_CASE_ID_MAX], repro[KV_CASE_REPRO_MAX];
    kv_case_id(&cl.items[0], id, (int)sizeof id);
    snprintf(want, sizeof want, "program:a(program=%s/a.prog,seed=1,device=accel)", tmpdir);
    assert_string_equal(id, want);
    kv_case_repro(&cl.items[1], repro, (int)sizeof repro);
    snprintf(want, sizeof want, "kvrun --program=%s/a.prog --seed=2 --device=accel", tmpdir);
    assert_string_equal(repro, want);
    kv_case_list_free(&cl);

    char msg[512];
    assert_int_not_equal(cases_in_tmp("--program=a.prog --dtype=f64\n", &cl), KV_OK);
    snprintf(want, sizeof want,
             "%s/t.case:1:18: --dtype: not valid on a --program= line (the program declares its inputs and arguments)",
             tmpdir);
    snprintf(msg, sizeof msg, "%s", kv_last_error_message());
    assert_string_equal(msg, want);
    kv_case_list_free(&cl);

    /* Modes apply (to the accel free runs); vmap (the whole program
     * batched) alone or with the other modes inside it. */
    assert_int_equal(cases_in_tmp("--program=a.prog --mode=autocast_f16,trace,vmap,vmap+grad+trace\n", &cl), KV_OK);
    assert_int_equal(cl.n, 4);
    assert_int_equal(cl.items[1].modes, 1u << KV_MODE_TRACE);
    assert_int_equal(cl.items[2].modes, 1u << KV_MODE_VMAP);
    assert_int_equal(cl.items[3].modes, (1u << KV_MODE_VMAP) | (1u << KV_MODE_GRAD) | (1u << KV_MODE_TRACE));
    kv_case_list_free(&cl);
    /* A program with `backward`: no_grad leaves nothing to differentiate,
     * and per-sample gradients under vmap are refused, naming why. */
    write_file("tr.prog", "program tr\ninput x f32 [3]\ny = neg(x)\nl = sum.dim_IntList(y, none)\noutput l\nbackward l\n");
    assert_int_equal(cases_in_tmp("--program=tr.prog --mode=vmap,autocast_bf16,functionalize,trace,grad\n", &cl), KV_OK);
    kv_case_list_free(&cl);
    static const char *const refused[][2] = {
        { "--program=tr.prog --mode=vmap+trace\n",
          "t.case:1:26: --mode=vmap+trace: the program runs 'backward l': vmap with another mode batches the forward "
          "steps only; per-sample gradients (functorch's vmap(grad(f))) need a grad transform kvsuite does not have "
          "(its Batched key sits above Autograd)" },
        { "--program=tr.prog --mode=no_grad\n",
          "t.case:1:26: --mode=no_grad: the program runs 'backward l', and under no_grad its steps record no graph to "
          "run it through" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        assert_int_not_equal(cases_in_tmp(refused[i][0], &cl), KV_OK);
        snprintf(want, sizeof want, "%s/%s", tmpdir, refused[i][1]);
        assert_string_equal(kv_last_error_message(), want);
        kv_case_list_free(&cl);
    }

    assert_int_not_equal(cases_in_tmp("--op=neg --program=a.prog\n", &cl), KV_OK);
    snprintf(want, sizeof want, "%s/t.case:1:10: --program and --op on one line: a case runs an op or a program", tmpdir);
    assert_string_equal(kv_last_error_message(), want);
    kv_case_list_free(&cl);

    assert_int_not_equal(cases_in_tmp("--program=missing.prog\n", &cl), KV_OK);
    snprintf(want, sizeof want, "%s/t.case:1:11: --program: cannot open '%s/missing.prog'", tmpdir, tmpdir);
    assert_string_equal(kv_last_error_message(), want);
    kv_case_list_free(&cl);

    assert_int_not_equal(cases_in_tmp("--program=/dev/zero\n", &cl), KV_OK);
    snprintf(want, sizeof want, "%s/t.case:1:11: --program: '/dev/zero' is not a regular file (a program must be one)",
             tmpdir);
    assert_string_equal(kv_last_error_message(), want);
    kv_case_list_free(&cl);

    /* A broken program is an error of the expansion, at its own line. */
    write_file("bad.prog", "program bad\ninput x f32 [3]\ny = neg(q)\noutput y\n");
    assert_int_not_equal(cases_in_tmp("--program=bad.prog\n", &cl), KV_OK);
    snprintf(want, sizeof want, "%s/bad.prog:3:9: unknown value 'q'", tmpdir);
    assert_string_equal(kv_last_error_message(), want);
    kv_case_list_free(&cl);
}

/* ---- running ---- */

static void run_text(const char *text, kv_result_list *res) {
    kv_case_list cl;
    const kv_status st = cases_in_tmp(text, &cl);
    if (st != KV_OK) fprintf(stderr, "%s\n", kv_last_error_message());
    assert_int_equal(st, KV_OK);
    assert_int_equal(cl.n, 1);
    const kv_run_env env = { store, false, NULL, KV_GOLDEN_MODE_AUTO };
    memset(res, 0, sizeof *res);
    kv_case_run(&cl.items[0], &env, res);
    kv_case_list_free(&cl);
}

static const kv_check_result *row_of(const kv_result_list *res, const char *check) {
    for (int i = 0; i < res->n; i++)
        if (strcmp(res->items[i].check, check) == 0) return &res->items[i];
    return NULL;
}

static void dump_rows(const kv_result_list *res) {
    for (int i = 0; i < res->n; i++)
        fprintf(stderr, "  %s %s: %s\n", kv_result_status_name(res->items[i].status), res->items[i].check,
                res->items[i].message);
}

static void assert_no_bad_row(const kv_result_list *res) {
    for (int i = 0; i < res->n; i++) {
        if (kv_result_status_is_bad(res->items[i].status)) {
            dump_rows(res);
            fail();
        }
    }
}

/* The suite's programs, from the repository root (where ninja test runs). */
static void test_suite_programs_pass(void **state) {
    (void)state;
    static const char *progs[] = { "mlp", "rotary", "kv_decode" };
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        for (int accel = 0; accel < 2; accel++) {
            char line[1024];
            snprintf(line, sizeof line, "--program=%s/cases/programs/%s.prog%s\n", cwd, progs[i],
                     accel ? " --device=accel" : "");
            kv_result_list res;
            run_text(line, &res);
            /* The golden key is the program's name and seed, not its
             * path: the absolute path finds the suite's goldens. */
            if (!accel) {
                assert_non_null(row_of(&res, "golden"));
                assert_int_equal(row_of(&res, "golden")->status, KV_RESULT_PASS);
            }
            assert_no_bad_row(&res);
            if (accel) {
                assert_non_null(row_of(&res, "program:Accel"));
                const kv_check_result *fp = row_of(&res, "fastpath:exact");
                assert_non_null(fp);
                assert_int_equal(fp->status, KV_RESULT_PASS);
                assert_true(fp->fast_calls + fp->manual_calls > 0);
            } else {
                const kv_check_result *ref = row_of(&res, "program:CPU/ref");
                assert_non_null(ref);
                assert_int_equal(ref->status, KV_RESULT_PASS);
            }
            kv_result_list_free(&res);
        }
    }
}

/* The suite's own case lines: the golden row passes against the store.
 * One case per program file (its first line in cases/programs.case): what
 * this shows is that a case file's program finds its golden by name; every
 * expanded line on every device is the suite's job (`kvrun cases/` fails
 * on any golden row), and running all 83 here made this one test a third
 * of the unit tests' time (and 5 minutes under Valgrind). */
static bool program_seen_before(const kv_case_list *cl, int i) {
    for (int j = 0; j < i; j++)
        if (strcmp(cl->items[j].program, cl->items[i].program) == 0) return true;
    return false;
}

static void test_suite_golden(void **state) {
    (void)state;
    kv_case_list cl;
    memset(&cl, 0, sizeof cl);
    assert_int_equal(kv_cases_from_file("cases/programs.case", &cl), KV_OK);
    assert_true(cl.n >= 3);
    const kv_run_env env = { store, false, NULL, KV_GOLDEN_MODE_AUTO };
    int ran = 0;
    for (int i = 0; i < cl.n; i++) {
        if (program_seen_before(&cl, i)) continue;
        ran++;
        kv_result_list res;
        memset(&res, 0, sizeof res);
        kv_case_run(&cl.items[i], &env, &res);
        const kv_check_result *g = row_of(&res, "golden");
        assert_non_null(g);
        if (g->status != KV_RESULT_PASS) dump_rows(&res);
        assert_int_equal(g->status, KV_RESULT_PASS);
        assert_no_bad_row(&res);
        kv_result_list_free(&res);
    }
    assert_true(ran >= 3);
    kv_case_list_free(&cl);
}

/* A broken fast path inside one step: a layer at BackendSelect that the
 * seed gate's key list does not name (registered and included in TLS
 * inside this test only) rewrites gelu's `approximate` from tanh to none
 * before passing the call down. The slow path runs it, the seed gate's
 * fast path skips it, so under the seed gate step 2 (gelu) of the MLP
 * differs ON vs OFF, and the row must name that step — not step 1, whose
 * values are equal either way, nor step 3, which only inherits the
 * damage. The exact gate sees the key, takes the slow path for gelu on
 * both runs, and passes (addmm still takes the fast path). */
static kv_status approximate_rewriting_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_ivalue *a = &stack->slots[stack->size - 1];
    if (a->tag == KV_IV_STR) a->v.str = "none";
    return kv_redispatch(op, kv_keyset_remove(ks, KV_KEY_BACKEND_SELECT), stack);
}

static void test_broken_fast_path_names_step(void **state) {
    (void)state;
    char cwd[512], line[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(line, sizeof line, "--program=%s/cases/programs/mlp.prog --device=accel\n", cwd);
    kv_result_list res;
    run_text(line, &res);
    assert_no_bad_row(&res);
    kv_result_list_free(&res);

    assert_int_equal(kv_register_kernel("gelu", KV_KEY_BACKEND_SELECT, approximate_rewriting_layer), KV_OK);
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_BACKEND_SELECT));
    run_text(line, &res);
    kv_tls_pop(saved);
    assert_int_equal(kv_register_kernel("gelu", KV_KEY_BACKEND_SELECT, NULL), KV_OK);
    const kv_check_result *seed = row_of(&res, "fastpath:seed");
    const kv_check_result *exact = row_of(&res, "fastpath:exact");
    assert_non_null(seed);
    assert_non_null(exact);
    if (seed->status != KV_RESULT_FAIL || strstr(seed->message, "on vs slow (gate seed): step 2 (gelu, ") == NULL ||
        strstr(seed->message, "-> a diverged first") == NULL || exact->status != KV_RESULT_PASS) {
        dump_rows(&res);
        fail();
    }
    assert_true(seed->mismatched > 0);
    kv_result_list_free(&res);

    /* And the layer gone: green again. */
    run_text(line, &res);
    assert_no_bad_row(&res);
    kv_result_list_free(&res);
}

/* A broken CPU variant inside one step: a gelu variant "kvbroken" (this
 * test's, registered once; its predicate accepts calls only while
 * g_broken is set) returns the reference's result with its first element
 * off by one. The program's variant row program:CPU/kvbroken must fail
 * naming step 2 (gelu), and the rows of the other variants pass. */
static bool g_broken;
static bool broken_pred(const kv_op *op, const kv_stack *stack) {
    (void)op;
    (void)stack;
    return g_broken;
}
static kv_status broken_gelu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    kv_status st = kv_tune_call_variant(op, KV_KEY_CPU, "ref", stack);
    if (st != KV_OK) return st;
    kv_tensor *out = kv_arg_tensor(stack, 0);
    if (out->dtype == KV_F32 && kv_tensor_numel(out) > 0) ((float *)kv_tensor_data(out))[0] += 1.0f;
    return KV_OK;
}

static void test_broken_variant_names_step(void **state) {
    (void)state;
    char cwd[512], line[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(line, sizeof line, "--program=%s/cases/programs/mlp.prog\n", cwd);
    assert_int_equal(kv_tune_register_variant("gelu", KV_KEY_CPU, "kvbroken", broken_gelu, broken_pred), KV_OK);
    kv_result_list res;
    g_broken = true;
    run_text(line, &res);
    g_broken = false;
    const kv_check_result *bad = row_of(&res, "program:CPU/kvbroken");
    const kv_check_result *avx2 = row_of(&res, "program:CPU/avx2");
    assert_non_null(bad);
    assert_non_null(avx2);
    if (bad->status != KV_RESULT_FAIL || strstr(bad->message, "step 2 (gelu, ") == NULL ||
        strstr(bad->message, "-> a diverged first") == NULL || avx2->status == KV_RESULT_FAIL) {
        dump_rows(&res);
        fail();
    }
    kv_result_list_free(&res);
    /* Refusing every call again: its row is SKIP, every other row green. */
    run_text(line, &res);
    assert_no_bad_row(&res);
    assert_int_equal(row_of(&res, "program:CPU/kvbroken")->status, KV_RESULT_SKIP);
    kv_result_list_free(&res);
}

/* ---- one layer broken inside a chain ----
 * Each test below puts a layer of its own at one dispatch key of one op
 * (in this test only; the entry it replaces is put back), runs a suite
 * program on the cpu and on accel, and expects the program green before
 * and one row failing with a message naming the step after. A layer that
 * must run the replaced entry finds it in g_replaced. */
static kv_kernel_fn g_replaced;

typedef struct layer_break {
    const char *op;          /* the op whose entry the layer replaces */
    kv_key key;
    kv_kernel_fn layer;
    const char *line;        /* "cases/programs/mlp.prog --mode=vmap": the case line after --program= */
    const char *row;         /* the row that must fail */
    const char *needles[4];  /* each must be in its message; NULL-terminated */
    const char *passes;      /* a row that must still pass on the cpu, or NULL */
    const char *accel_row;   /* the row on accel when its name differs, else NULL */
} layer_break;

static void expect_layer_breaks_row(const layer_break *b) {
    char cwd[512], line[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    const kv_op *op = kv_op_find(b->op);
    assert_non_null(op);
    const kv_entry_kind kind = kv_op_entry_kind(op, b->key);
    g_replaced = kv_op_entry_fn(op, b->key);
    for (int accel = 0; accel < 2; accel++) {
        snprintf(line, sizeof line, "--program=%s/%s%s\n", cwd, b->line, accel ? " --device=accel" : "");
        kv_result_list res;
        run_text(line, &res);
        assert_no_bad_row(&res);
        kv_result_list_free(&res);
        assert_int_equal(kv_register_kernel(b->op, b->key, b->layer), KV_OK);
        run_text(line, &res);
        assert_int_equal(kv_register_kernel(b->op, b->key, kind == KV_ENTRY_KERNEL ? g_replaced : NULL), KV_OK);
        const char *name = accel && b->accel_row ? b->accel_row : b->row;
        const kv_check_result *r = row_of(&res, name);
        bool ok = r != NULL && r->status == KV_RESULT_FAIL;
        for (int i = 0; ok && b->needles[i]; i++) ok = strstr(r->message, b->needles[i]) != NULL;
        const kv_check_result *other = b->passes && !accel ? row_of(&res, b->passes) : NULL;
        if (b->passes && !accel) ok = ok && other != NULL && other->status == KV_RESULT_PASS;
        if (!ok) {
            dump_rows(&res);
            fail_msg("%s at %s of %s: row %s did not fail as expected", b->line, kv_key_name(b->key), b->op, name);
        }
        kv_result_list_free(&res);
    }
}

/* A broken gradient: gelu's Autograd entry runs gelu below autograd and
 * records nothing, as a missing backward formula would. The forward values
 * are right; mlp_train's gradient row must name the input x, whose
 * gradient now stops at step 2. */
static kv_status autograd_dropping_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_redispatch(op, kv_keyset_remove(ks, KV_KEY_AUTOGRAD), stack);
}

static void test_broken_gradient_fails_gradcheck(void **state) {
    (void)state;
    const layer_break b = { "gelu", KV_KEY_AUTOGRAD, autograd_dropping_layer, "cases/programs/mlp_train.prog",
                            "grad:gradcheck", { "backward from loss: the gradient of input x, element ", NULL }, NULL, NULL };
    expect_layer_breaks_row(&b);
}

/* Under a mode other than grad a program with `backward` still runs its
 * steps with grad on: program:modes (here under trace) must see each
 * step record its node, and names step 2 (gelu) when gelu's Autograd
 * entry records nothing. */
static void test_backward_under_mode_names_step(void **state) {
    (void)state;
    const layer_break b = { "gelu", KV_KEY_AUTOGRAD, autograd_dropping_layer,
                            "cases/programs/mlp_train.prog --mode=trace", "program:modes",
                            { "step 2 (gelu, ", "mode=grad: autograd recorded no node", NULL }, NULL, NULL };
    expect_layer_breaks_row(&b);
}

/* A gradient broken in low precision only: gelu's Autograd entry records
 * nothing when its input is f16/bf16 (the f32/f64 path stays right, so
 * grad:gradcheck, in f64, passes). Under autocast the MLP's gelu gets
 * f16 from addmm: grad:autocast, whose truth is the cast problem's
 * gradient in f64, names input x and localizes it: the gradient reaching
 * h (step 1's output) is the first to diverge in backward order, made by
 * the backward of step 2 (gelu). */
static kv_status autograd_dropping_low_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_ivalue *self = &stack->slots[stack->size - 2];
    if (self->tag == KV_IV_TENSOR && (self->v.tensor->dtype == KV_F16 || self->v.tensor->dtype == KV_BF16))
        return kv_redispatch(op, kv_keyset_remove(ks, KV_KEY_AUTOGRAD), stack);
    return g_replaced(op, ks, stack);
}

static void test_broken_gradient_under_autocast_names_step(void **state) {
    (void)state;
    const layer_break b = { "gelu", KV_KEY_AUTOGRAD, autograd_dropping_low_layer,
                            "cases/programs/mlp_train.prog --mode=autocast_f16", "grad:autocast",
                            { "backward from loss: the .grad of input x is none under the modes",
                              "first diverges at h (", "made by the backward of step 2 (gelu, " },
                            "grad:gradcheck", NULL };
    expect_layer_breaks_row(&b);
}

/* A broken batching rule: gelu's Batched entry rewrites `approximate`
 * from tanh to none before the real batched kernel runs, so the batched
 * MLP differs from its samples at step 2 (gelu) only. */
static kv_status approximate_rewriting_batched(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_ivalue *a = &stack->slots[stack->size - 1];
    if (a->tag == KV_IV_STR) a->v.str = "none";
    return g_replaced(op, ks, stack);
}

static void test_broken_batching_rule_names_step(void **state) {
    (void)state;
    const layer_break b = { "gelu", KV_KEY_BATCHED, approximate_rewriting_batched,
                            "cases/programs/mlp.prog --mode=vmap", "program:vmap",
                            { "step 2 (gelu, ", "-> a diverged first", NULL }, NULL, NULL };
    expect_layer_breaks_row(&b);
}

/* Lazy bits on the cpu: program:CPU runs each step through kv_call, so
 * mlp_train's b1, carrying the Negative bit, reaches step 1 (addmm)
 * through the Negative fallback. A layer that passes addmm down without
 * resolving the bit lets it reach the kernel: program:CPU (and
 * program:Accel) must name step 1, while program:CPU/ref (the kernel
 * alone, no bits) passes. */
static kv_status negative_ignoring_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_redispatch(op, kv_keyset_remove(ks, KV_KEY_NEGATIVE), stack);
}

static void test_cpu_lazy_bits_reach_dispatcher(void **state) {
    (void)state;
    const layer_break b = { "addmm", KV_KEY_NEGATIVE, negative_ignoring_layer, "cases/programs/mlp_train.prog",
                            "program:CPU", { "step 1 (addmm, ", NULL }, "program:CPU/ref", "program:Accel" };
    expect_layer_breaks_row(&b);
}

/* A broken mode: addmm's Autocast entry passes the call down uncast, as a
 * missing autocast rule would; the MLP's program:modes row under
 * autocast_f16 must name step 1 (addmm). */
static kv_status autocast_skipping_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    return kv_redispatch(op, kv_keyset_remove(ks, KV_KEY_AUTOCAST), stack);
}

static void test_broken_mode_names_step(void **state) {
    (void)state;
    const layer_break b = { "addmm", KV_KEY_AUTOCAST, autocast_skipping_layer,
                            "cases/programs/mlp.prog --mode=autocast_f16", "program:modes",
                            { "step 1 (addmm, ", NULL }, NULL, NULL };
    expect_layer_breaks_row(&b);
}

/* The same broken Autocast entry under vmap: the batched steps run with
 * autocast inside the vmap level, and program:vmap must name step 1
 * (addmm) both where it compares bit for bit with the per-sample runs
 * (the cpu: the values agree, as those runs lack the casts too, so the
 * step's autocast evidence must catch it) and where it is teacher-forced
 * against the cast problem's truth (accel over SIM). */
static void test_broken_mode_under_vmap_names_step(void **state) {
    (void)state;
    const layer_break b = { "addmm", KV_KEY_AUTOCAST, autocast_skipping_layer,
                            "cases/programs/mlp.prog --mode=vmap+autocast_f16", "program:vmap",
                            { "step 1 (addmm, ", "mode=autocast_f16", NULL }, NULL, NULL };
    expect_layer_breaks_row(&b);
}

/* The gate itself broken (the test-only hook of src/boxing/gate.c forces
 * every gate open): the Negative bit that step 1 (_neg_view) makes on
 * accel reaches the target's mm kernel in step 2 on the fast path, which
 * the slow path would have resolved first. Both gates' rows fail naming
 * step 2 (mm), not step 1, whose values are equal either way. */
static void test_forced_gate_names_step(void **state) {
    (void)state;
    write_file("negview.prog", "program negview\n"
                               "input x f32 [4,5]\n"
                               "input w f32 [5,3]\n"
                               "n = _neg_view(x)\n"
                               "m = mm(n, w)\n"
                               "y = add.Tensor(m, m)\n"
                               "output y\n");
    kv_result_list res;
    run_text("--program=negview.prog --device=accel\n", &res);
    assert_no_bad_row(&res);
    kv_result_list_free(&res);
    kv_accel_gate_force_for_tests(true);
    run_text("--program=negview.prog --device=accel\n", &res);
    kv_accel_gate_force_for_tests(false);
    static const char *gates[] = { "fastpath:seed", "fastpath:exact" };
    for (int g = 0; g < 2; g++) {
        const kv_check_result *r = row_of(&res, gates[g]);
        assert_non_null(r);
        if (r->status != KV_RESULT_FAIL || strstr(r->message, "step 2 (mm, ") == NULL) {
            dump_rows(&res);
            fail();
        }
    }
    kv_result_list_free(&res);
}

/* A suite program on accel (`prog`, from the repository root): green,
 * `unforced` in its fastpath:exact message; then with the gate forced
 * open (kv_accel_gate_force_for_tests) both gates' rows FAIL with every
 * needle (NULL-terminated) in the message. */
static void expect_forced_gate_fails(const char *prog, const char *unforced, const char *const *needles) {
    char cwd[512], line[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(line, sizeof line, "--program=%s/%s --device=accel\n", cwd, prog);
    kv_result_list res;
    run_text(line, &res);
    assert_no_bad_row(&res);
    assert_non_null(strstr(row_of(&res, "fastpath:exact")->message, unforced));
    kv_result_list_free(&res);
    kv_accel_gate_force_for_tests(true);
    run_text(line, &res);
    kv_accel_gate_force_for_tests(false);
    static const char *gates[] = { "fastpath:seed", "fastpath:exact" };
    for (int g = 0; g < 2; g++) {
        const kv_check_result *r = row_of(&res, gates[g]);
        assert_non_null(r);
        bool ok = r->status == KV_RESULT_FAIL;
        for (int i = 0; ok && needles[i]; i++) ok = strstr(r->message, needles[i]) != NULL;
        if (!ok) {
            dump_rows(&res);
            fail_msg("%s: %s did not fail as expected", prog, gates[g]);
        }
    }
    kv_result_list_free(&res);
}

/* ZeroTensor inputs: kv_decode_zero's cache is a ZeroTensor; with the
 * gate forced open the fast path hands step 3's mm (reading the
 * transposed slice of the cache) to the target's kernel with the bit on,
 * which the slow path would have sent through the ZeroTensor fallback:
 * both gates' rows name step 3 (mm). */
static void test_forced_gate_zero_names_step(void **state) {
    (void)state;
    static const char *needles[] = { "step 3 (mm, ", "ZeroTensor", NULL };
    expect_forced_gate_fails("cases/programs/kv_decode_zero.prog", "steps read a ZeroTensor", needles);
}

/* The ZeroTensor evidence itself: a kernel registered at mm's ZeroTensor
 * key that strips the bit and passes the call down computes the right
 * values (the stored values are zeros) without the fallback or a
 * materialization. Only the fastpath rows' per-step evidence sees it:
 * both gates' rows name step 3 (mm). */
static kv_status zero_stripping_layer(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_tensor *stripped[KV_CASE_MAX_INPUTS];
    int n = 0;
    for (int i = 0; i < stack->size && n < KV_CASE_MAX_INPUTS; i++) {
        kv_ivalue *a = &stack->slots[i];
        if (a->tag != KV_IV_TENSOR || !kv_keyset_has(a->v.tensor->keys, KV_KEY_ZERO_TENSOR)) continue;
        a->v.tensor->keys = kv_keyset_remove(a->v.tensor->keys, KV_KEY_ZERO_TENSOR);
        stripped[n++] = a->v.tensor;
    }
    const kv_status st = kv_redispatch(op, kv_keyset_remove(ks, KV_KEY_ZERO_TENSOR), stack);
    /* The program's values own the inputs: the bit goes back on them. */
    for (int i = 0; i < n; i++) stripped[i]->keys = kv_keyset_add(stripped[i]->keys, KV_KEY_ZERO_TENSOR);
    return st;
}

static void test_zero_evidence_names_step(void **state) {
    (void)state;
    assert_int_equal(kv_op_entry_kind(kv_op_find("mm"), KV_KEY_ZERO_TENSOR), KV_ENTRY_FALLBACK);
    assert_int_equal(kv_register_kernel("mm", KV_KEY_ZERO_TENSOR, zero_stripping_layer), KV_OK);
    char cwd[512], line[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(line, sizeof line, "--program=%s/cases/programs/kv_decode_zero.prog --device=accel\n", cwd);
    kv_result_list res;
    run_text(line, &res);
    assert_int_equal(kv_register_kernel("mm", KV_KEY_ZERO_TENSOR, NULL), KV_OK);
    static const char *gates[] = { "fastpath:seed", "fastpath:exact" };
    for (int g = 0; g < 2; g++) {
        const kv_check_result *r = row_of(&res, gates[g]);
        assert_non_null(r);
        if (r->status != KV_RESULT_FAIL || strstr(r->message, "step 3 (mm, ") == NULL ||
            strstr(r->message, "read a ZeroTensor: lazy=zero@1: the ZeroTensor fallback never ran") == NULL) {
            dump_rows(&res);
            fail();
        }
    }
    /* The values agree: the accel teacher-forced row passes. */
    assert_int_equal(row_of(&res, "program:Accel")->status, KV_RESULT_PASS);
    kv_result_list_free(&res);
}

/* Training: with the gate forced open the forward addmm of step 1 takes
 * the fast path although its inputs require grad (and b1 carries the
 * Negative bit), so the target's kernel gets the bit and autograd would
 * record nothing: both rows name step 1 (addmm). */
static void test_forced_gate_backward_names_step(void **state) {
    (void)state;
    static const char *needles[] = { "step 1 (addmm, ", NULL };
    expect_forced_gate_fails("cases/programs/mlp_train.prog", "and the inputs' gradients equal", needles);
}

/* The golden row against a store of its own: recorded under regen, then
 * equal; a changed program (same name and seed, so the same key) whose
 * step 2 now computes something else FAILs naming step 2; a program with
 * another number of step outputs is ERROR; no store at all is ERROR; and
 * under --golden=live a key with no entry is SKIP. */
static void run_env(const char *text, const kv_run_env *env, kv_result_list *res) {
    kv_case_list cl;
    assert_int_equal(cases_in_tmp(text, &cl), KV_OK);
    assert_int_equal(cl.n, 1);
    memset(res, 0, sizeof *res);
    kv_case_run(&cl.items[0], env, res);
    kv_case_list_free(&cl);
}

static void test_golden_row(void **state) {
    (void)state;
    char dir[256];
    snprintf(dir, sizeof dir, "%s/golden", tmpdir);
    kv_golden_store *g = kv_golden_open(dir);
    assert_non_null(g);
    write_file("gold.prog", "program gold\ninput x f32 [3,4]\nh = neg(x)\na = gelu(h)\noutput a\n");
    kv_run_env env = { g, true, NULL, KV_GOLDEN_MODE_STORE };
    kv_result_list res;
    run_env("--program=gold.prog\n", &env, &res);
    const kv_check_result *r = row_of(&res, "golden");
    assert_non_null(r);
    assert_int_equal(r->status, KV_RESULT_PASS);
    assert_non_null(strstr(r->message, "recorded 2 step outputs"));
    assert_int_equal(res.n, 1); /* regeneration records only */
    kv_result_list_free(&res);
    assert_int_equal(kv_golden_save(g, true, NULL), KV_OK);

    env.regen_golden = false;
    run_env("--program=gold.prog\n", &env, &res);
    assert_no_bad_row(&res);
    assert_non_null(strstr(row_of(&res, "golden")->message, "2 step outputs of 2 steps equal the store"));
    kv_result_list_free(&res);

    write_file("gold.prog", "program gold\ninput x f32 [3,4]\nh = neg(x)\na = gelu(h, approximate=tanh)\noutput a\n");
    run_env("--program=gold.prog\n", &env, &res);
    r = row_of(&res, "golden");
    if (r->status != KV_RESULT_FAIL || strstr(r->message, "step 2 (gelu, ") == NULL) {
        dump_rows(&res);
        fail();
    }
    kv_result_list_free(&res);

    write_file("gold.prog", "program gold\ninput x f32 [3,4]\nh = neg(x)\noutput h\n");
    run_env("--program=gold.prog\n", &env, &res);
    r = row_of(&res, "golden");
    assert_int_equal(r->status, KV_RESULT_ERROR);
    assert_non_null(strstr(r->message, "the store has 2 outputs for key program:gold(), the program 1"));
    kv_result_list_free(&res);

    write_file("new.prog", "program new\ninput x f32 [3]\nh = neg(x)\noutput h\n");
    run_env("--program=new.prog\n", &env, &res);
    assert_int_equal(row_of(&res, "golden")->status, KV_RESULT_ERROR);
    kv_result_list_free(&res);
    env.golden_mode = KV_GOLDEN_MODE_LIVE;
    run_env("--program=new.prog\n", &env, &res);
    r = row_of(&res, "golden");
    assert_int_equal(r->status, KV_RESULT_SKIP);
    assert_non_null(strstr(r->message, "live reference: no stored golden for key program:new()"));
    assert_int_equal(row_of(&res, "program:CPU/ref")->status, KV_RESULT_PASS);
    kv_result_list_free(&res);

    env.golden = NULL;
    run_env("--program=new.prog\n", &env, &res);
    assert_int_equal(row_of(&res, "golden")->status, KV_RESULT_ERROR);
    kv_result_list_free(&res);
    kv_golden_close(g);
}

/* A step the reference itself refuses (mm of [2,3] by [4,5]) is ERROR
 * naming the step; so is a program file gone by the time the case runs. */
static void test_reference_failure(void **state) {
    (void)state;
    write_file("shape.prog", "program shape\ninput a f32 [2,3]\ninput b f32 [4,5]\nn = neg(a)\ny = mm(n, b)\noutput y\n");
    kv_result_list res;
    run_text("--program=shape.prog\n", &res);
    assert_int_equal(res.n, 1);
    assert_string_equal(res.items[0].check, "program");
    assert_int_equal(res.items[0].status, KV_RESULT_ERROR);
    assert_non_null(strstr(res.items[0].message, "step 2 (mm, "));
    assert_non_null(strstr(res.items[0].message, "the reference failed"));
    kv_result_list_free(&res);

    kv_case_list cl;
    write_file("gone.prog", "program gone\ninput x f32 [3]\ny = neg(x)\noutput y\n");
    assert_int_equal(cases_in_tmp("--program=gone.prog\n", &cl), KV_OK);
    char path[256];
    snprintf(path, sizeof path, "%s/gone.prog", tmpdir);
    assert_int_equal(unlink(path), 0);
    const kv_run_env env = { store, false, NULL, KV_GOLDEN_MODE_AUTO };
    memset(&res, 0, sizeof res);
    kv_case_run(&cl.items[0], &env, &res);
    assert_int_equal(res.n, 1);
    assert_int_equal(res.items[0].status, KV_RESULT_ERROR);
    if (strstr(res.items[0].message, "cannot open the program") == NULL) dump_rows(&res);
    assert_non_null(strstr(res.items[0].message, "cannot open the program"));
    kv_result_list_free(&res);
    kv_case_list_free(&cl);
}

/* The kill switch kept on in the "on" runs (test-only): a program whose
 * fast path never fires fails saying so, under both gates. */
static void test_never_fired(void **state) {
    (void)state;
    char cwd[512], line[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(line, sizeof line, "--program=%s/cases/programs/mlp.prog --device=accel\n", cwd);
    kv_check_fastpath_kill_all_for_tests(true);
    kv_result_list res;
    run_text(line, &res);
    kv_check_fastpath_kill_all_for_tests(false);
    static const char *gates[] = { "fastpath:seed", "fastpath:exact" };
    for (int g = 0; g < 2; g++) {
        const kv_check_result *r = row_of(&res, gates[g]);
        assert_non_null(r);
        assert_int_equal(r->status, KV_RESULT_FAIL);
        assert_string_equal(r->message, "fast path never fired in any of the 3 steps");
    }
    kv_result_list_free(&res);
}

/* More step outputs than a golden key holds (64) is ERROR, never a cut. */
static void test_too_many_outputs(void **state) {
    (void)state;
    char text[4096];
    int n = snprintf(text, sizeof text, "program many\ninput x f32 [2,3]\n");
    for (int i = 0; i < 22; i++) n += snprintf(text + n, sizeof text - (size_t)n, "a%d, b%d, c%d = native_layer_norm(x, [3], none, none, 1e-05)\n", i, i, i);
    snprintf(text + n, sizeof text - (size_t)n, "output a0\n");
    write_file("many.prog", text);
    kv_result_list res;
    run_text("--program=many.prog\n", &res);
    const kv_check_result *r = row_of(&res, "golden");
    assert_non_null(r);
    assert_int_equal(r->status, KV_RESULT_ERROR);
    assert_string_equal(r->message, "more than 64 step outputs to store");
    kv_result_list_free(&res);
}

/* backward from a value with more than one element: the slow run itself
 * fails, so the rows are ERROR (a harness problem, not a fast path's). */
/* A backward from a non-scalar is an error of the case file's expansion,
 * at the backward line's value (issue 22): a run would go green, both
 * runs failing alike. */
static void test_backward_needs_scalar(void **state) {
    (void)state;
    write_file("vec.prog", "program vec\ninput x f32 [3]\ny = neg(x)\noutput y\nbackward y\n");
    kv_case_list cl;
    assert_int_equal(cases_in_tmp("--program=vec.prog --device=accel\n", &cl), KV_ERR_INVALID_ARG);
    char want[512];
    snprintf(want, sizeof want,
             "%s/vec.prog:5:10: backward: 'y' holds 3 elements (shape [3]): backward needs a one-element value (a "
             "scalar loss)",
             tmpdir);
    assert_string_equal(kv_last_error_message(), want);
    kv_case_list_free(&cl);
}

/* The forced gate in a training program without lazy bits: the forward
 * mm runs on the target directly, autograd records nothing, and the row
 * names step 2 (mm) by its requires_grad and grad_fn. */
static void test_forced_gate_grad_fn(void **state) {
    (void)state;
    write_file("train.prog", "program train\ninput x f32 [4,5]\ninput w f32 [5,3]\n"
                             "n = neg(x)\nm = mm(n, w)\nl = sum.dim_IntList(m, none)\noutput l\nbackward l\n");
    kv_result_list res;
    run_text("--program=train.prog --device=accel\n", &res);
    assert_no_bad_row(&res);
    kv_result_list_free(&res);
    kv_accel_gate_force_for_tests(true);
    run_text("--program=train.prog --device=accel\n", &res);
    kv_accel_gate_force_for_tests(false);
    const kv_check_result *r = row_of(&res, "fastpath:exact");
    assert_non_null(r);
    if (r->status != KV_RESULT_FAIL || strstr(r->message, "step 1 (neg, ") == NULL ||
        strstr(r->message, "grad_fn") == NULL) {
        dump_rows(&res);
        fail();
    }
    kv_result_list_free(&res);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_files),
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_case_lines),
        cmocka_unit_test(test_suite_programs_pass),
        cmocka_unit_test(test_suite_golden),
        cmocka_unit_test(test_broken_fast_path_names_step),
        cmocka_unit_test(test_forced_gate_names_step),
        cmocka_unit_test(test_forced_gate_backward_names_step),
        cmocka_unit_test(test_forced_gate_zero_names_step),
        cmocka_unit_test(test_zero_evidence_names_step),
        cmocka_unit_test(test_golden_row),
        cmocka_unit_test(test_reference_failure),
        cmocka_unit_test(test_never_fired),
        cmocka_unit_test(test_too_many_outputs),
        cmocka_unit_test(test_backward_needs_scalar),
        cmocka_unit_test(test_forced_gate_grad_fn),
        cmocka_unit_test(test_broken_variant_names_step),
        cmocka_unit_test(test_broken_gradient_fails_gradcheck),
        cmocka_unit_test(test_broken_gradient_under_autocast_names_step),
        cmocka_unit_test(test_backward_under_mode_names_step),
        cmocka_unit_test(test_broken_batching_rule_names_step),
        cmocka_unit_test(test_cpu_lazy_bits_reach_dispatcher),
        cmocka_unit_test(test_broken_mode_names_step),
        cmocka_unit_test(test_broken_mode_under_vmap_names_step),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
