/* The case grammar: lexing, defaults, includes, expansion, validation
 * errors with their exact FILE:LINE:COL, canonical IDs, repro lines and
 * filters. Every expected string here is written by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/init.h"
#include "kv/dispatch.h"
#include "kv/status.h"
#include "runner/case/case.h"
#include "runner/case/case_args.h"
#include "runner/case/expand.h"
#include "runner/case/filter.h"
#include "runner/case/grammar.h"

/* ---- helpers ---- */

static char tmpdir[256];
#define MAX_TMP_PATHS 64
static char tmp_paths[MAX_TMP_PATHS][320];
static int ntmp_paths;

static const char *tmp_path(const char *rel) {
    static char buf[4][320];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", tmpdir, rel);
    return p;
}

/* Writes tmpdir/rel (one sub-directory level allowed). */
static void write_file(const char *rel, const char *text) {
    const char *slash = strchr(rel, '/');
    if (slash) {
        char dir[320];
        snprintf(dir, sizeof dir, "%s/%.*s", tmpdir, (int)(slash - rel), rel);
        if (mkdir(dir, 0700) == 0) snprintf(tmp_paths[ntmp_paths++], sizeof tmp_paths[0], "%s", dir);
    }
    const char *path = tmp_path(rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    for (int i = 0; i < ntmp_paths; i++) {
        if (strcmp(tmp_paths[i], path) == 0) return;
    }
    assert_true(ntmp_paths < MAX_TMP_PATHS);
    snprintf(tmp_paths[ntmp_paths++], sizeof tmp_paths[0], "%s", path);
}

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/kv_test_grammar_XXXXXX");
    if (mkdtemp(tmpdir) == NULL) return -1;
    return kv_init() == KV_OK ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    /* Files first, then directories (created before the files in them). */
    for (int i = ntmp_paths - 1; i >= 0; i--) {
        if (unlink(tmp_paths[i]) != 0) rmdir(tmp_paths[i]);
    }
    rmdir(tmpdir);
    return 0;
}

static const char *id_of(const kv_case *c) {
    static char buf[4][KV_CASE_ID_MAX];
    static int k;
    char *p = buf[k++ % 4];
    kv_case_id(c, p, KV_CASE_ID_MAX);
    return p;
}

/* Expands `text` (as file "t.case") and checks the IDs, in order. */
static void expect_ids(const char *text, const char *const *ids, int n) {
    kv_case_list l = { 0 };
    kv_status st = kv_cases_from_text("t.case", text, &l);
    if (st != KV_OK) print_error("unexpected error: %s\n", kv_last_error_message());
    assert_int_equal(st, KV_OK);
    assert_int_equal(l.n, n);
    for (int i = 0; i < n; i++) assert_string_equal(id_of(&l.items[i]), ids[i]);
    kv_case_list_free(&l);
}

static void expect_one_id(const char *text, const char *id) { expect_ids(text, &id, 1); }

/* Expands `text` as "t.case" and checks the error message exactly. */
static void expect_error_code(const char *text, kv_status code, const char *msg) {
    kv_case_list l = { 0 };
    kv_error_clear();
    kv_status st = kv_cases_from_text("t.case", text, &l);
    assert_int_equal(st, code);
    assert_int_equal(kv_last_error(), code);
    assert_string_equal(kv_last_error_message(), msg);
    kv_case_list_free(&l);
}

static void expect_error(const char *text, const char *msg) {
    expect_error_code(text, KV_ERR_INVALID_ARG, msg);
}

/* ---- expansion ---- */

static void test_cartesian_order_and_count(void **state) {
    (void)state;
    static const char *const ids[] = {
        "add.Tensor(dtype=f32,shape=[4])", "add.Tensor(dtype=f32,shape=[])",
        "add.Tensor(dtype=f64,shape=[4])", "add.Tensor(dtype=f64,shape=[])",
        "mul.Tensor(dtype=f32,shape=[4])", "mul.Tensor(dtype=f32,shape=[])",
        "mul.Tensor(dtype=f64,shape=[4])", "mul.Tensor(dtype=f64,shape=[])",
    };
    expect_ids("--op=add.Tensor,mul.Tensor --dtype=f32,f64 --shape=4,[]\n", ids, 8);

    /* 2 ops x 3 dtypes x 2 shapes x 2 layouts x 3 seeds x 2 devices = 144 */
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case",
                                        "--op=add.Tensor,sub.Tensor --dtype=f32,i64,c64 "
                                        "--shape=4x5,[2,3]:[3] --layout=c,t --seed=0,1,2 "
                                        "--device=cpu,accel\n",
                                        &l),
                     KV_OK);
    assert_int_equal(l.n, 144);
    /* The last option (device) varies fastest, the first (op) slowest. */
    assert_string_equal(id_of(&l.items[1]), "add.Tensor(dtype=f32,shape=[4,5],device=accel)");
    assert_string_equal(id_of(&l.items[2]), "add.Tensor(dtype=f32,shape=[4,5],seed=1)");
    assert_string_equal(id_of(&l.items[72]), "sub.Tensor(dtype=f32,shape=[4,5])");
    assert_string_equal(id_of(&l.items[143]),
                        "sub.Tensor(dtype=c64,shape=[2,3]:[3],layout=t,seed=2,device=accel)");
    kv_case_list_free(&l);
}

static void test_args_alternatives(void **state) {
    (void)state;
    static const char *const ids[] = {
        "sum.dim_IntList(dtype=f32,shape=[4,5],args=dim=0)",
        "sum.dim_IntList(dtype=f32,shape=[4,5],args=dim=0;keepdim=1)",
        "sum.dim_IntList(dtype=f32,shape=[4,5],args=dim=1)",
        "sum.dim_IntList(dtype=f32,shape=[4,5],args=dim=1;keepdim=1)",
        "sum.dim_IntList(dtype=f32,shape=[4,5],args=dim=-1)",
        "sum.dim_IntList(dtype=f32,shape=[4,5],args=dim=-1;keepdim=1)",
    };
    expect_ids("--op=sum.dim_IntList --shape=4x5 --args=dim=0,1,-1,keepdim=0,1\n", ids, 6);

    /* int lists, brackets keep their commas, `;` also separates arguments */
    static const char *const ids2[] = {
        "sum.dim_IntList(dtype=f32,shape=[2,3,4],args=dim=[0,2])",
        "sum.dim_IntList(dtype=f32,shape=[2,3,4],args=dim=1)",
        "sum.dim_IntList(dtype=f32,shape=[2,3,4],args=dim=none)",
    };
    expect_ids("--op=sum.dim_IntList --shape=2x3x4 --args=dim=[0,2],[1],none;keepdim=false\n", ids2, 3);

    /* a bare value after an argument is one more alternative of it */
    static const char *const ids3[] = {
        "add.Tensor(dtype=f32,shape=[4],args=alpha=2)",
        "add.Tensor(dtype=f32,shape=[4],args=alpha=-3)",
    };
    expect_ids("--op=add.Tensor --shape=4 --args=alpha=2,-3\n", ids3, 2);

    /* values equal to the schema default leave the ID */
    expect_one_id("--op=add.Tensor --shape=4 --args=alpha=1\n", "add.Tensor(dtype=f32,shape=[4])");
    expect_one_id("--op=add.Tensor --shape=4 --args=alpha=1.0\n",
                  "add.Tensor(dtype=f32,shape=[4],args=alpha=1.0)");
    expect_one_id("--op=amax --shape=4x5 --args=dim=[]\n", "amax(dtype=f32,shape=[4,5])");
    expect_one_id("--op=amax --shape=4x5 --args=dim=[1],keepdim=true\n",
                  "amax(dtype=f32,shape=[4,5],args=dim=1;keepdim=1)");
    expect_one_id("--op=gelu --shape=[] --args=approximate='none'\n", "gelu(dtype=f32,shape=[])");
    expect_one_id("--op=gelu --shape=[] --args=approximate=tanh\n",
                  "gelu(dtype=f32,shape=[],args=approximate=tanh)");

    /* the values a runner needs: canonical text and stack values */
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case", "--op=sum.dim_IntList --shape=2x3 --args=dim=[0,-1],dtype=f64\n", &l),
                     KV_OK);
    assert_int_equal(l.n, 1);
    const kv_case *c = &l.items[0];
    assert_int_equal(c->nargs, 2);
    assert_string_equal(c->args[0].name, "dim");
    assert_string_equal(c->args[0].value, "[0,-1]");
    assert_string_equal(kv_case_arg_value(c, "dtype"), "f64");
    assert_null(kv_case_arg_value(c, "keepdim"));
    const kv_schema *s = kv_op_schema(kv_op_find("sum.dim_IntList"));
    kv_ivalue iv;
    int64_t ints[KV_CASE_ARG_MAX_INTS];
    assert_int_equal(kv_case_arg_ivalue(&s->args[kv_schema_arg_index(s, "dim")], "[0,-1]", &iv, ints,
                                        KV_CASE_ARG_MAX_INTS, NULL),
                     KV_OK);
    assert_int_equal(iv.tag, KV_IV_INT_LIST);
    assert_int_equal(iv.v.ints.n, 2);
    assert_int_equal(iv.v.ints.items[1], -1);
    assert_int_equal(kv_case_arg_ivalue(&s->args[kv_schema_arg_index(s, "dim")], "1", &iv, ints,
                                        KV_CASE_ARG_MAX_INTS, NULL),
                     KV_OK);
    assert_int_equal(iv.tag, KV_IV_INT_LIST); /* a bare int for int[1] */
    assert_int_equal(iv.v.ints.n, 1);
    assert_int_equal(kv_case_arg_ivalue(&s->args[kv_schema_arg_index(s, "dtype")], "f64", &iv, ints,
                                        KV_CASE_ARG_MAX_INTS, NULL),
                     KV_OK);
    assert_int_equal(iv.tag, KV_IV_DTYPE);
    assert_int_equal(iv.v.dtype, KV_F64);
    assert_int_equal(kv_case_arg_ivalue(&s->args[kv_schema_arg_index(s, "dtype")], "none", &iv, ints,
                                        KV_CASE_ARG_MAX_INTS, NULL),
                     KV_OK);
    assert_int_equal(iv.tag, KV_IV_NONE);
    kv_case_list_free(&l);
}

static void test_defaults_and_reset(void **state) {
    (void)state;
    static const char *const ids[] = {
        "neg(dtype=f64,shape=[4],fill=exact)",
        "neg(dtype=i32,shape=[4],fill=exact)",          /* own option wins */
        "neg(dtype=i64,shape=[4],fill=exact)",          /* later defaults: key by key */
        "neg(dtype=i64,shape=[4],fill=exact,seed=3)",
        "neg(dtype=f32,shape=[4])",                     /* after --reset */
        "neg(dtype=f32,shape=[2],device=sim)",          /* --reset, then its line's defaults */
    };
    expect_ids("# defaults\n"
               "--dtype=f64 --fill=exact\n"
               "--op=neg --shape=4\n"
               "--op=neg --shape=4 --dtype=i32\n"
               "--dtype=i64\n"
               "--op=neg --shape=4\n"
               "--seed=3\n"
               "--op=neg --shape=4\n"
               "--reset\n"
               "--op=neg --shape=4\n"
               "--reset --device=sim\n"
               "--op=neg --shape=2\n",
               ids, 6);

    /* a defaults shape is ignored by a factory; dtype and layout too */
    expect_one_id("--shape=4 --dtype=f64 --layout=t\n--op=zeros --args=size=[2,3]\n",
                  "zeros(args=size=[2,3])");
    /* and the default check set follows expect */
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case",
                                        "--op=neg --shape=4\n"
                                        "--op=neg --shape=4 --expect=dtype\n"
                                        "--op=neg --shape=4 --check=golden,memory --tol=ulp:2\n",
                                        &l),
                     KV_OK);
    assert_int_equal(l.n, 3);
    assert_int_equal(l.items[0].checks,
                     (1u << KV_CHECK_GOLDEN) | (1u << KV_CHECK_VARIANTS) | (1u << KV_CHECK_MEMORY));
    assert_int_equal(l.items[0].expect, KV_OK);
    assert_int_equal(l.items[1].checks, (1u << KV_CHECK_ERROR) | (1u << KV_CHECK_MEMORY));
    assert_int_equal(l.items[1].expect, KV_ERR_DTYPE);
    assert_int_equal(l.items[2].checks, (1u << KV_CHECK_GOLDEN) | (1u << KV_CHECK_MEMORY));
    assert_int_equal(l.items[2].tol.kind, KV_TOL_ULP);
    assert_true(l.items[2].tol.value == 2.0);
    assert_int_equal(l.items[2].origin.line, 3);
    assert_string_equal(l.items[2].origin.file, "t.case");
    kv_case_list_free(&l);
}

static void test_comments_continuations_quotes(void **state) {
    (void)state;
    static const char *const ids[] = {
        "neg(dtype=f32,shape=[4])",
        "neg(dtype=f32,shape=[4,5])",
        "sum.dim_IntList(dtype=f64,shape=[2,3],args=dim=[0,1])",
    };
    expect_ids("\n"
               "   # a comment line\n"
               "--op=neg --shape=4 # --dtype=f64\n"
               "--op=neg \\\n"
               "   --shape=4x5#trailing comment\n"
               "\t\n"
               "--op=sum.dim_IntList '--args=dim=[0,1]' \\  # comment after the backslash\n"
               "--dtype=f64 --shape='2x3'\n",
               ids, 3);

    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case", "\n--op=neg \\\n --shape=1\n--op=abs --shape=1\n", &l), KV_OK);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.items[0].origin.line, 2); /* a continued line starts where it starts */
    assert_int_equal(l.items[1].origin.line, 4);
    kv_case_list_free(&l);

    expect_error("--op=neg \\\n  --shape=4x5 --dtype=bad\n",
                 "t.case:2:23: --dtype: unknown dtype 'bad' (dtypes: bool, u8, i8, i16, i32, i64, f16, "
                 "bf16, f32, f64, c64, c128)");
    expect_error("--op=neg '--shape=4\n", "t.case:1:10: unterminated quote (a quote must close on its line)");
}

static void test_per_input_lists(void **state) {
    (void)state;
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case",
                                        "--op=where.self --dtype=bool:f32:i64 --shape=4x5:5:[]\n"
                                        "--op=where.self --dtype=bool:f32:f32 --shape=3x1\n"
                                        "--op=clamp_.Tensor --shape=4x5:none:5 --layout=s\n"
                                        "--op=clamp_.Tensor --shape=4x5:4x5:none\n"
                                        "--op=clamp_.Tensor --shape=4x5\n"
                                        "--op=cat --dtype=f16 --shape=2x3:2x3:1x3 --args=dim=0\n"
                                        "--op=native_layer_norm --shape=4x5:5:5 --args=normalized_shape=[5],eps=1e-5\n"
                                        "--op=add.Tensor --dtype=f32:f32 --shape=3:3 --layout=contiguous\n",
                                        &l),
                     KV_OK);
    assert_int_equal(l.n, 8);
    const kv_case *c = &l.items[0];
    assert_string_equal(id_of(c), "where.self(dtype=bool:f32:i64,shape=[4,5]:[5]:[])");
    assert_int_equal(c->ninputs, 3);
    assert_int_equal(c->dtypes[0], KV_BOOL);
    assert_int_equal(c->dtypes[2], KV_I64);
    assert_int_equal(c->shapes[1].ndim, 1);
    assert_int_equal(c->shapes[1].sizes[0], 5);
    assert_int_equal(c->shapes[2].ndim, 0);
    assert_int_equal(c->input_arg[2], 2);

    c = &l.items[1]; /* one shape for all three inputs */
    assert_string_equal(id_of(c), "where.self(dtype=bool:f32:f32,shape=[3,1])");
    assert_int_equal(c->ninputs, 3);
    assert_int_equal(c->shapes[2].sizes[0], 3);

    c = &l.items[2];
    assert_string_equal(id_of(c), "clamp_.Tensor(dtype=f32,shape=[4,5]:none:[5],layout=s)");
    assert_int_equal(c->ninputs, 3);
    assert_false(c->absent[0]);
    assert_true(c->absent[1]);
    assert_false(c->absent[2]);
    assert_int_equal(c->layouts[0], KV_LAYOUT_STRIDED);
    assert_int_equal(c->layouts[2], KV_LAYOUT_STRIDED);

    c = &l.items[3]; /* trailing absent inputs are dropped */
    assert_string_equal(id_of(c), "clamp_.Tensor(dtype=f32,shape=[4,5]:[4,5])");
    assert_int_equal(c->ninputs, 2);

    c = &l.items[4]; /* one shape: the required input only */
    assert_string_equal(id_of(c), "clamp_.Tensor(dtype=f32,shape=[4,5])");
    assert_int_equal(c->ninputs, 1);

    c = &l.items[5]; /* Tensor[]: every shape is an element */
    assert_string_equal(id_of(c), "cat(dtype=f16,shape=[2,3]:[2,3]:[1,3])");
    assert_int_equal(c->ninputs, 3);
    assert_int_equal(c->input_arg[0], 0);
    assert_int_equal(c->input_arg[2], 0);
    assert_int_equal(c->nargs, 0); /* dim=0 is the default */

    c = &l.items[6];
    assert_string_equal(id_of(c),
                        "native_layer_norm(dtype=f32,shape=[4,5]:[5]:[5],args=normalized_shape=[5];eps=1e-05)");
    assert_int_equal(c->input_arg[0], 0);
    assert_int_equal(c->input_arg[1], 2);
    assert_int_equal(c->input_arg[2], 3);

    c = &l.items[7]; /* equal per-input values collapse */
    assert_string_equal(id_of(c), "add.Tensor(dtype=f32,shape=[3])");
    assert_int_equal(c->ninputs, 2);
    kv_case_list_free(&l);
}

static void test_zero_dim_and_zero_size(void **state) {
    (void)state;
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case", "--op=neg --shape=[],0x3,[0,3],7,[1,0,2]\n", &l), KV_OK);
    assert_int_equal(l.n, 5);
    assert_int_equal(l.items[0].shapes[0].ndim, 0);
    assert_string_equal(id_of(&l.items[0]), "neg(dtype=f32,shape=[])");
    assert_int_equal(l.items[1].shapes[0].ndim, 2);
    assert_int_equal(l.items[1].shapes[0].sizes[0], 0);
    assert_int_equal(l.items[1].shapes[0].sizes[1], 3);
    assert_string_equal(id_of(&l.items[1]), "neg(dtype=f32,shape=[0,3])");
    assert_string_equal(id_of(&l.items[2]), "neg(dtype=f32,shape=[0,3])");
    assert_string_equal(id_of(&l.items[3]), "neg(dtype=f32,shape=[7])");
    assert_string_equal(id_of(&l.items[4]), "neg(dtype=f32,shape=[1,0,2])");
    kv_case_list_free(&l);
}

/* ---- includes ---- */

static void test_batch_relative_paths(void **state) {
    (void)state;
    write_file("main.case",
               "--dtype=f64\n"
               "--batch=sub/inc.case --fill=special\n"
               "--op=exp --shape=1\n");
    write_file("sub/inc.case",
               "--seed=9\n"
               "--op=neg --shape=2\n"
               "--batch=../leaf.case\n");
    write_file("leaf.case", "--op=abs --shape=3 --dtype=i32\n");
    kv_case_list l = { 0 };
    kv_status st = kv_cases_from_file(tmp_path("main.case"), &l);
    if (st != KV_OK) print_error("%s\n", kv_last_error_message());
    assert_int_equal(st, KV_OK);
    assert_int_equal(l.n, 3);
    /* inherited defaults + the --batch line's options; the include's own
     * defaults (seed) reach its includes but do not leak back */
    assert_string_equal(id_of(&l.items[0]), "neg(dtype=f64,shape=[2],fill=special,seed=9)");
    assert_string_equal(id_of(&l.items[1]), "abs(dtype=i32,shape=[3],fill=special,seed=9)");
    assert_string_equal(id_of(&l.items[2]), "exp(dtype=f64,shape=[1])");
    assert_string_equal(l.items[0].origin.file, tmp_path("sub/inc.case"));
    assert_int_equal(l.items[0].origin.line, 2);
    assert_string_equal(l.items[1].origin.file, tmp_path("sub/../leaf.case"));
    kv_case_list_free(&l);

    /* from the command line paths are relative to the working directory */
    char arg[400];
    snprintf(arg, sizeof arg, "--batch=%s,%s", tmp_path("leaf.case"), tmp_path("leaf.case"));
    char *argv[] = { "kvrun", arg, "--device=accel", NULL };
    assert_int_equal(kv_cases_from_argv(3, argv, NULL, NULL, &l), KV_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(id_of(&l.items[1]), "abs(dtype=i32,shape=[3],device=accel)");
    kv_case_list_free(&l);

    write_file("missing.case", "--op=neg --shape=1\n--batch=nope.case\n");
    char msg[600];
    snprintf(msg, sizeof msg, "%s:2:9: --batch: cannot open '%s': No such file or directory",
             tmp_path("missing.case"), tmp_path("nope.case"));
    assert_int_equal(kv_cases_from_file(tmp_path("missing.case"), &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), msg);
    kv_case_list_free(&l);

    expect_error("--op=neg --shape=4 --batch=x.case\n",
                 "t.case:1:20: --batch cannot be on a case line (one with --op=)");
}

static void test_batch_cycle_and_depth(void **state) {
    (void)state;
    write_file("a.case", "--op=neg --shape=1\n--batch=b.case\n");
    write_file("b.case", "# b\n--batch=a.case\n");
    kv_case_list l = { 0 };
    char msg[800];
    snprintf(msg, sizeof msg, "%s:2:9: --batch include cycle: %s -> %s -> %s", tmp_path("b.case"),
             tmp_path("a.case"), tmp_path("b.case"), tmp_path("a.case"));
    assert_int_equal(kv_cases_from_file(tmp_path("a.case"), &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), msg);
    kv_case_list_free(&l);

    write_file("self.case", "  --batch=self.case\n");
    snprintf(msg, sizeof msg, "%s:1:11: --batch include cycle: %s -> %s", tmp_path("self.case"),
             tmp_path("self.case"), tmp_path("self.case"));
    assert_int_equal(kv_cases_from_file(tmp_path("self.case"), &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), msg);
    kv_case_list_free(&l);

    /* 16 files deep is fine, 17 is not */
    char name[32], text[64];
    for (int i = 0; i <= 16; i++) {
        snprintf(name, sizeof name, "d%02d.case", i);
        if (i == 16) {
            snprintf(text, sizeof text, "--op=neg --shape=1\n");
        } else {
            snprintf(text, sizeof text, "--batch=d%02d.case\n", i + 1);
        }
        write_file(name, text);
    }
    assert_int_equal(kv_cases_from_file(tmp_path("d01.case"), &l), KV_OK);
    assert_int_equal(l.n, 1);
    kv_case_list_free(&l);
    snprintf(msg, sizeof msg, "%s:1:9: --batch: includes nested deeper than 16", tmp_path("d15.case"));
    assert_int_equal(kv_cases_from_file(tmp_path("d00.case"), &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), msg);
    kv_case_list_free(&l);
}

/* ---- validation errors, each with its exact position ---- */

#define DTYPES "bool, u8, i8, i16, i32, i64, f16, bf16, f32, f64, c64, c128"

static void test_errors_options(void **state) {
    (void)state;
    expect_error("--op=neg --shape=4 --foo=1\n",
                 "t.case:1:20: unknown option '--foo' (options: op, program, dtype, shape, layout, args, fill, "
                 "seed, device, lazy, mode, out, check, tol, expect, batch, reset)");
    /* within two edits of an op: the nearest named; nothing near: none */
    expect_error_code("--op=nag --shape=4\n", KV_ERR_UNKNOWN_OP,
                      "t.case:1:6: --op: unknown op 'nag' (did you mean neg?)");
    expect_error_code("--op=zzzzzz --shape=4\n", KV_ERR_UNKNOWN_OP, "t.case:1:6: --op: unknown op 'zzzzzz'");
    expect_error_code("--shape=4\n--op=neg,add --dtype=f32\n", KV_ERR_UNKNOWN_OP,
                      "t.case:2:10: --op: unknown op 'add' (did you mean add.Tensor, add.out?)");
    expect_error("--op=neg --shape=4 --dtype=f32:f33\n",
                 "t.case:1:32: --dtype: unknown dtype 'f33' (dtypes: " DTYPES ")");
    expect_error("--op=neg --shape=4xa\n",
                 "t.case:1:20: --shape: expected a shape like 4x5, [4,5], [] (0-dim) or none, got '4xa'");
    expect_error("--op=neg --shape=[4,-1]\n", "t.case:1:21: --shape: negative size '-1' in '[4,-1]'");
    expect_error("--op=neg --shape=[4,5\n", "t.case:1:18: unclosed '[' in --shape");
    expect_error("--op=neg --shape=4 --layout=q\n",
                 "t.case:1:29: --layout: unknown layout 'q' (layouts: c, t, s, o, b, w or contiguous, "
                 "transposed, strided, offset, broadcast, windowed)");
    expect_error("--op=add.out --shape=4x5:4x5:4x4 --out=@0\n",
                 "t.case:1:34: add.out: --out=@0: the out slot's shape [4,4] is not [4,5] (input 0's)");
    expect_error("--op=neg --shape=4 --out=@0\n", "t.case:1:20: neg: --out=@0: the op has no out= argument");
    expect_error("--op=add.out --shape=4x5:4x5:4x5 --out=0\n",
                 "t.case:1:40: --out: unknown value '0' (new, @N: out is input N, @N.t: out is input N transposed, "
                 "@N.i: out interleaved with input N; N below 8)");
    expect_error("--op=add.out --shape=0x5:4x5:0x5 --out=@0.i\n",
                 "t.case:1:34: add.out: --out=@0.i: input 0 needs at least one dim and an element");
    expect_error("--op=neg --shape=4 --fill=rand\n",
                 "t.case:1:27: --fill: unknown fill 'rand' (fills: exact, real, special, sweep, shifted)");
    expect_error("--op=neg --shape=4 --seed=-1\n",
                 "t.case:1:27: --seed: expected an unsigned 64-bit decimal, got '-1'");
    expect_error("--op=neg --shape=4 --seed=1,18446744073709551616\n",
                 "t.case:1:29: --seed: expected an unsigned 64-bit decimal, got '18446744073709551616'");
    expect_error("--op=neg --shape=4 --device=tpu\n",
                 "t.case:1:29: --device: unknown device 'tpu' (devices: cpu, cuda, sim, accel, "
                 "plugin0..3, optionally :INDEX)");
    expect_error("--op=neg --shape=4 --tol=ulp\n",
                 "t.case:1:26: --tol: expected bitwise, ulp:N, abs:X or rel:X (N a count, X >= 0), got 'ulp'");
    expect_error("--op=neg --shape=4 --tol=abs:-1\n",
                 "t.case:1:26: --tol: expected bitwise, ulp:N, abs:X or rel:X (N a count, X >= 0), got 'abs:-1'");
    expect_error("--op=neg --shape=4 --expect=boom\n",
                 "t.case:1:29: --expect: unknown outcome 'boom' (pass, invalid_arg, shape, dim, index, "
                 "negative_size, dtype, device, oom, schema, unknown_op, missing_kernel, internal)");
    expect_error("--op=neg --shape=4 --check=golden,speed\n",
                 "t.case:1:35: --check: unknown check 'speed' (checks: golden, variants, memory, error, lazy, grad, fastpath, tune)");
    expect_error("--op=neg --shape=4 --expect=dtype --check=golden\n",
                 "t.case:1:35: --check=golden/variants cannot run on a case with --expect=dtype (it has "
                 "no output); use error and memory");
    expect_error("--op=neg --shape=4 --dtype=f32,,f64\n", "t.case:1:32: empty alternative in --dtype");
    expect_error("--op=neg shape=4\n", "t.case:1:10: expected an option --key=value, got 'shape=4'");
    expect_error("--op=neg --shape\n", "t.case:1:10: option '--shape' needs a value: --shape=...");
    expect_error("--op=neg --shape=\n", "t.case:1:10: option '--shape' has an empty value");
    expect_error("--op=neg --shape=4 --dtype=f32 --dtype=f64\n",
                 "t.case:1:32: option '--dtype' given twice on one line (first at column 20)");
    expect_error("--op=add.Tensor --shape=4 --args=alpha=1 --args=alpha=2\n",
                 "t.case:1:42: option '--args' given twice on one line (first at column 27)");
    expect_error("--op=add.Tensor --shape=4 --args=alpha=1,alpha=2\n",
                 "t.case:1:42: argument 'alpha' given twice in --args (first at column 34)");
    expect_error("--op=add.Tensor --shape=4 --args=alpha\n",
                 "t.case:1:34: expected name=value in --args, got 'alpha'");
    /* One separator rule: ',' between alternatives, the old '|' named. */
    expect_error("--op=add.Tensor --shape=4 --args=alpha=2|-3\n",
                 "t.case:1:41: '|' between alternatives is no longer accepted in --args: write them with ',' as in "
                 "every option (--args=dim=0,1,keepdim=0,1), got 'alpha=2|-3'");
    expect_error("--op=add.Tensor --shape=4 --args=alpha=\n", "t.case:1:34: empty value of 'alpha' in --args");
    expect_error("--reset=1\n", "t.case:1:1: --reset takes no value");
}

static void test_errors_inputs(void **state) {
    (void)state;
    expect_error("--op=add.Tensor --shape=4 --dtype=f32:f32:f32\n",
                 "t.case:1:35: add.Tensor: --dtype gives 3 values for 2 tensor inputs (self, other); give 1 or 2");
    expect_error("--op=add.Tensor --shape=4 --layout=t:t:t\n",
                 "t.case:1:36: add.Tensor: --layout gives 3 values for 2 tensor inputs (self, other); give 1 or 2");
    expect_error("--op=add.Tensor --shape=4:4:4\n",
                 "t.case:1:25: add.Tensor: --shape: 3 shapes for 2 tensor inputs (self, other); give 1 or 2");
    expect_error("--op=where.self --shape=4:4\n",
                 "t.case:1:25: where.self: --shape: 2 shapes for 3 tensor inputs (condition, self, other): "
                 "missing the shape of 'other'");
    expect_error("--op=add.Tensor --shape=4:none\n",
                 "t.case:1:25: add.Tensor: --shape: input 'other' cannot be none (it is not optional)");
    expect_error("--op=cat --shape=2:none\n",
                 "t.case:1:18: cat: --shape: input 'tensors' cannot be none (an element of a Tensor[])");
    expect_error("--op=neg\n", "t.case:1:1: neg: needs --shape= for its tensor inputs (self)");
    expect_error("--op=zeros --args=size=[2] --shape=4\n",
                 "t.case:1:28: zeros: a factory takes no --shape (give sizes in --args, e.g. --args=size=[2,3])");
    expect_error("--op=zeros --args=size=[2] --dtype=f64\n",
                 "t.case:1:28: zeros: --dtype does not apply: the op has no tensor inputs");
}

static void test_errors_args(void **state) {
    (void)state;
    expect_error("--op=add.Tensor --shape=4 --args=dim=1\n",
                 "t.case:1:34: add.Tensor: argument 'dim': not in the schema (arguments: alpha)");
    expect_error("--op=add.Tensor --shape=4 --args=other=1\n",
                 "t.case:1:34: add.Tensor: argument 'other': is a tensor; give its shape in --shape");
    expect_error("--op=sum.dim_IntList --shape=4x5 --args=dim=1.5\n",
                 "t.case:1:45: sum.dim_IntList: argument 'dim': expected an int or a list like [0,1], got '1.5'");
    expect_error("--op=sum.dim_IntList --shape=4x5 --args=dim=[0,x]\n",
                 "t.case:1:48: sum.dim_IntList: argument 'dim': expected an int, got 'x'");
    expect_error("--op=sum.dim_IntList --shape=4x5 --args=dim=1,keepdim=2\n",
                 "t.case:1:55: sum.dim_IntList: argument 'keepdim': expected a bool (0, 1, true, false), got '2'");
    expect_error("--op=sum.dim_IntList --shape=4x5 --args=dim=1,keepdim=none\n",
                 "t.case:1:55: sum.dim_IntList: argument 'keepdim': is not optional; 'none' is not allowed");
    expect_error("--op=sum.dim_IntList --shape=4x5 --args=dim=1,dtype=f99\n",
                 "t.case:1:53: sum.dim_IntList: argument 'dtype': expected a dtype (f32, i64, ...), got 'f99'");
    expect_error("--op=add.Tensor --shape=4 --args=alpha=abc\n",
                 "t.case:1:40: add.Tensor: argument 'alpha': expected a scalar (2, -1.5, true, 1+2j), got 'abc'");
    expect_error("--op=native_layer_norm --shape=4x5 --args=normalized_shape=[5],eps=x\n",
                 "t.case:1:68: native_layer_norm: argument 'eps': expected a float, got 'x'");
    expect_error("--op=permute --shape=4x5 --args=dims=1\n",
                 "t.case:1:38: permute: argument 'dims': expected a list like [0,1] or [], got '1'");
    expect_error("--op=sum.dim_IntList --shape=4x5\n",
                 "t.case:1:1: sum.dim_IntList: argument 'dim': has no default; give it with --args=dim=...");
    expect_error("--op=zeros\n", "t.case:1:1: zeros: argument 'size': has no default; give it with --args=size=...");
    /* an error in a defaults line points at the defaults line */
    expect_error("--args=dim=1\n--op=neg --shape=4\n",
                 "t.case:1:8: neg: argument 'dim': not in the schema (the op has no non-tensor arguments)");
    /* the second alternative is validated too */
    expect_error("--op=sum.dim_IntList --shape=4x5 --args=dim=0,y\n",
                 "t.case:1:47: sum.dim_IntList: argument 'dim': expected an int or a list like [0,1], got 'y'");
}

static void test_errors_command_line(void **state) {
    (void)state;
    kv_case_list l = { 0 };
    char *argv1[] = { "kvrun", "--dtype=f32", "--shape=4", NULL };
    assert_int_equal(kv_cases_from_argv(3, argv1, NULL, NULL, &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), "<command line>:1:7: nothing to run: give --op= or --batch=");
    char *argv2[] = { "kvrun", "--op=neg", "--shape=4", "--dtype=x", NULL };
    assert_int_equal(kv_cases_from_argv(4, argv2, NULL, NULL, &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(),
                        "<command line>:1:34: --dtype: unknown dtype 'x' (dtypes: " DTYPES ")");
    /* a '#' or a quote is an ordinary character in argv */
    char *argv3[] = { "./kvrun", "--op=neg", "--shape=4#5", NULL };
    assert_int_equal(kv_cases_from_argv(3, argv3, NULL, NULL, &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(),
                        "<command line>:1:26: --shape: expected a shape like 4x5, [4,5], [] (0-dim) or none, got '4#5'");
    assert_int_equal(l.n, 0);

    /* a spec built by hand without an op */
    kv_case_spec spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.origin.file, sizeof spec.origin.file, "x.case");
    spec.origin.line = 3;
    assert_int_equal(kv_spec_expand(&spec, &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), "x.case:3:1: a case line needs --op=");

    /* 2 x 12 x 5 x 3 x 4 x 100 = 144000 cases: refused before expanding */
    char line[1024];
    int n = snprintf(line, sizeof line,
                     "  --op=neg --shape=1,2 --dtype=bool,u8,i8,i16,i32,i64,f16,bf16,f32,f64,c64,c128 "
                     "--layout=c,t,s,o,b --fill=exact,real,special --device=cpu,sim,accel,cuda --seed=0");
    for (int i = 1; i < 100; i++) n += snprintf(line + n, sizeof line - (size_t)n, ",%d", i);
    expect_error(line, "t.case:1:3: this line expands to more than 100000 cases");
    kv_case_list_free(&l);
}

static bool skip_runner_flags(const char *arg, void *ctx) {
    int *count = ctx;
    if (strncmp(arg, "--filter=", 9) == 0 || strncmp(arg, "--jobs=", 7) == 0) {
        (*count)++;
        return true;
    }
    return false;
}

static void test_command_line(void **state) {
    (void)state;
    kv_case_list l = { 0 };
    int skipped = 0;
    char *argv[] = { "kvrun", "--filter=add*", "--op=add.Tensor", "--jobs=2", "--shape=4x5:5", "--layout=t,b", NULL };
    assert_int_equal(kv_cases_from_argv(6, argv, skip_runner_flags, &skipped, &l), KV_OK);
    assert_int_equal(skipped, 2);
    assert_int_equal(l.n, 2);
    assert_string_equal(id_of(&l.items[0]), "add.Tensor(dtype=f32,shape=[4,5]:[5],layout=t)");
    assert_string_equal(id_of(&l.items[1]), "add.Tensor(dtype=f32,shape=[4,5]:[5],layout=b)");
    assert_string_equal(l.items[0].origin.file, "<command line>");
    kv_case_list_free(&l);

    /* the skipped tokens still count for columns */
    char *bad[] = { "kvrun", "--filter=x", "--op=neg", "--shape=-3", NULL };
    skipped = 0;
    assert_int_equal(kv_cases_from_argv(4, bad, skip_runner_flags, &skipped, &l), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), "<command line>:1:35: --shape: negative size '-3' in '-3'");
    kv_case_list_free(&l);

    /* nothing but runner flags: no cases, no error */
    char *only[] = { "kvrun", "--jobs=4", NULL };
    assert_int_equal(kv_cases_from_argv(2, only, skip_runner_flags, &skipped, &l), KV_OK);
    assert_int_equal(l.n, 0);
    kv_case_list_free(&l);
}

/* ---- canonical IDs, golden keys, repro lines ---- */

typedef struct id_case {
    const char *line;
    const char *id;
    const char *golden;
    const char *repro;
} id_case;

static const id_case id_cases[] = {
    { "--op=add.Tensor --dtype=f32 --shape=64x33:33 --layout=t --device=accel",
      "add.Tensor(dtype=f32,shape=[64,33]:[33],layout=t,device=accel)",
      "add.Tensor(dtype=f32,shape=[64,33]:[33])",
      "kvrun --op=add.Tensor --dtype=f32 --shape=64x33:33 --layout=t --device=accel" },
    { "--op=sum.dim_IntList --dtype=f64 --shape=[2,3,4] --args=dim=[0,2],keepdim=true,dtype=f32 --fill=exact --seed=42",
      "sum.dim_IntList(dtype=f64,shape=[2,3,4],args=dim=[0,2];keepdim=1;dtype=f32,fill=exact,seed=42)",
      "sum.dim_IntList(dtype=f64,shape=[2,3,4],args=dim=[0,2];keepdim=1;dtype=f32,fill=exact,seed=42)",
      "kvrun --op=sum.dim_IntList --dtype=f64 --shape=2x3x4 '--args=dim=[0,2],keepdim=1,dtype=f32' --fill=exact --seed=42" },
    { "--op=where.self --dtype=bool:f32:f32 --shape=4x5 --layout=contiguous:transposed:c --device=cuda:1",
      "where.self(dtype=bool:f32:f32,shape=[4,5],layout=c:t:c,device=cuda:1)",
      "where.self(dtype=bool:f32:f32,shape=[4,5])",
      "kvrun --op=where.self --dtype=bool:f32:f32 --shape=4x5 --layout=c:t:c --device=cuda:1" },
    { "--op=clamp_.Tensor --shape=4x5:none:5 --layout=s --fill=special",
      "clamp_.Tensor(dtype=f32,shape=[4,5]:none:[5],layout=s,fill=special)",
      "clamp_.Tensor(dtype=f32,shape=[4,5]:none:[5],fill=special)",
      "kvrun --op=clamp_.Tensor --dtype=f32 --shape=4x5:none:5 --layout=s --fill=special" },
    { "--op=cat --dtype=f16 --shape=2x3:[]:0x3 --args=dim=1 --seed=18446744073709551615",
      "cat(dtype=f16,shape=[2,3]:[]:[0,3],args=dim=1,seed=18446744073709551615)",
      "cat(dtype=f16,shape=[2,3]:[]:[0,3],args=dim=1,seed=18446744073709551615)",
      "kvrun --op=cat --dtype=f16 '--shape=2x3:[]:0x3' --args=dim=1 --seed=18446744073709551615" },
    { "--op=zeros --args=size=[2,3],dtype=f64 --device=sim",
      "zeros(args=size=[2,3];dtype=f64,device=sim)",
      "zeros(args=size=[2,3];dtype=f64)",
      "kvrun --op=zeros '--args=size=[2,3],dtype=f64' --device=sim" },
    { "--op=add.Tensor --dtype=c128 --shape=4 --args=alpha=1+2j --tol=abs:1e-5",
      "add.Tensor(dtype=c128,shape=[4],args=alpha=1+2j,tol=abs:1e-05)",
      "add.Tensor(dtype=c128,shape=[4],args=alpha=1+2j)",
      "kvrun --op=add.Tensor --dtype=c128 --shape=4 --args=alpha=1+2j --tol=abs:1e-05" },
    { "--op=add.Tensor --shape=4:5 --expect=shape",
      "add.Tensor(dtype=f32,shape=[4]:[5],expect=shape)",
      "add.Tensor(dtype=f32,shape=[4]:[5])",
      "kvrun --op=add.Tensor --dtype=f32 --shape=4:5 --expect=shape" },
    { "--op=empty.memory_format --args=size=[0,2] --check=error",
      "empty.memory_format(args=size=[0,2],check=error)",
      "empty.memory_format(args=size=[0,2])",
      "kvrun --op=empty.memory_format '--args=size=[0,2]' --check=error" },
    { "--op=add.Tensor --shape=4:5 --expect=shape --check=error",
      "add.Tensor(dtype=f32,shape=[4]:[5],check=error,expect=shape)",
      "add.Tensor(dtype=f32,shape=[4]:[5])",
      "kvrun --op=add.Tensor --dtype=f32 --shape=4:5 --check=error --expect=shape" },
    { "--op=index_select --dtype=f32:i64 --shape=5x3:2 --args=dim=-1 --tol=bitwise --check=memory,golden",
      "index_select(dtype=f32:i64,shape=[5,3]:[2],args=dim=-1,check=golden+memory,tol=bitwise)",
      "index_select(dtype=f32:i64,shape=[5,3]:[2],args=dim=-1)",
      "kvrun --op=index_select --dtype=f32:i64 --shape=5x3:2 --args=dim=-1 --check=golden,memory --tol=bitwise" },
    { "--op=pow.Tensor_Scalar --shape=[] --args=exponent=0.5 --tol=ulp:4",
      "pow.Tensor_Scalar(dtype=f32,shape=[],args=exponent=0.5,tol=ulp:4)",
      "pow.Tensor_Scalar(dtype=f32,shape=[],args=exponent=0.5)",
      "kvrun --op=pow.Tensor_Scalar --dtype=f32 '--shape=[]' --args=exponent=0.5 --tol=ulp:4" },
    { "--op=_softmax --dtype=f16 --shape=8x8 --args=dim=1,half_to_float=false --layout=o",
      "_softmax(dtype=f16,shape=[8,8],layout=o,args=dim=1;half_to_float=0)",
      "_softmax(dtype=f16,shape=[8,8],args=dim=1;half_to_float=0)",
      "kvrun --op=_softmax --dtype=f16 --shape=8x8 --layout=o --args=dim=1,half_to_float=0" },
};

static void test_canonical_ids(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof id_cases / sizeof id_cases[0]; i++) {
        kv_case_list l = { 0 };
        kv_status st = kv_cases_from_text("t.case", id_cases[i].line, &l);
        if (st != KV_OK) print_error("%s: %s\n", id_cases[i].line, kv_last_error_message());
        assert_int_equal(st, KV_OK);
        assert_int_equal(l.n, 1);
        char buf[KV_CASE_ID_MAX];
        assert_int_equal(kv_case_id(&l.items[0], buf, sizeof buf), (int)strlen(id_cases[i].id));
        assert_string_equal(buf, id_cases[i].id);
        kv_case_golden_key(&l.items[0], buf, sizeof buf);
        assert_string_equal(buf, id_cases[i].golden);
        kv_case_repro(&l.items[0], buf, sizeof buf);
        assert_string_equal(buf, id_cases[i].repro);
        /* truncation: snprintf style, always terminated */
        char small[8];
        assert_int_equal(kv_case_id(&l.items[0], small, sizeof small), (int)strlen(id_cases[i].id));
        assert_int_equal(strlen(small), 7);
        kv_case_list_free(&l);
    }
}

/* Splits a repro line the way a POSIX shell would (blanks, '...'). */
static int shell_split(const char *line, char words[][KV_CASE_ID_MAX], int cap) {
    int n = 0;
    const char *p = line;
    while (*p) {
        while (*p == ' ') p++;
        if (*p == '\0') break;
        int len = 0;
        bool quoted = false;
        while (*p && (quoted || *p != ' ')) {
            if (*p == '\'') {
                quoted = !quoted;
            } else {
                words[n][len++] = *p;
            }
            p++;
        }
        words[n][len] = '\0';
        if (++n == cap) break;
    }
    return n;
}

static void test_repro_round_trip(void **state) {
    (void)state;
    kv_case_list all = { 0 };
    for (size_t i = 0; i < sizeof id_cases / sizeof id_cases[0]; i++) {
        assert_int_equal(kv_cases_from_text("t.case", id_cases[i].line, &all), KV_OK);
    }
    assert_int_equal(kv_cases_from_text("t.case",
                                        "--op=add.Tensor,mul.Tensor --dtype=f32,i64 --shape=4x5,[]:3 "
                                        "--layout=c,t:s,b --seed=0,7\n"
                                        "--op=where.self --dtype=bool:f32:f32,bool:i64:f64 --shape=4x5,[]:3:1 "
                                        "--layout=c,s:c:b\n"
                                        "--op=clamp_.Tensor --shape=4x5:5:none,4x5:none:5,4x5 --layout=c,t\n"
                                        "--op=cat,stack --shape=2x3:2x3,[1]:[2]:[3] --args=dim=0,-1\n"
                                        "--op=sum.dim_IntList,mean.dim --shape=2x3x4 --args=dim=0,[0,1],none,keepdim=0,1\n"
                                        "--op=native_group_norm --shape=2x4x3:4:4 --args=N=2,C=4,HxW=3,group=2,eps=1e-05\n"
                                        "--op=full --args=size=[2,3],fill_value=-0.5,nan,true,dtype=f64 --device=accel\n",
                                        &all),
                     KV_OK);
    assert_int_equal(all.n, 13 + 48 + 8 + 6 + 8 + 12 + 1 + 3);
    for (int i = 0; i < all.n; i++) {
        const kv_case *c = &all.items[i];
        char id[KV_CASE_ID_MAX], repro[KV_CASE_ID_MAX], id2[KV_CASE_ID_MAX], repro2[KV_CASE_ID_MAX];
        kv_case_id(c, id, sizeof id);
        kv_case_repro(c, repro, sizeof repro);
        assert_memory_equal(repro, "kvrun ", 6);

        /* pasted into a case file */
        kv_case_list back = { 0 };
        kv_status st = kv_cases_from_text("repro", repro + 6, &back);
        if (st != KV_OK) print_error("%s: %s\n", repro, kv_last_error_message());
        assert_int_equal(st, KV_OK);
        assert_int_equal(back.n, 1);
        kv_case_id(&back.items[0], id2, sizeof id2);
        kv_case_repro(&back.items[0], repro2, sizeof repro2);
        assert_string_equal(id2, id);
        assert_string_equal(repro2, repro);
        assert_int_equal(back.items[0].checks, c->checks);
        assert_int_equal(back.items[0].expect, c->expect);
        assert_int_equal(back.items[0].ninputs, c->ninputs);
        kv_case_list_free(&back);

        /* run through a shell */
        char words[24][KV_CASE_ID_MAX];
        char *argv[25];
        const int argc = shell_split(repro, words, 24);
        for (int k = 0; k < argc; k++) argv[k] = words[k];
        argv[argc] = NULL;
        st = kv_cases_from_argv(argc, argv, NULL, NULL, &back);
        if (st != KV_OK) print_error("%s: %s\n", repro, kv_last_error_message());
        assert_int_equal(st, KV_OK);
        assert_int_equal(back.n, 1);
        assert_string_equal(id_of(&back.items[0]), id);
        kv_case_list_free(&back);
    }
    kv_case_list_free(&all);
}

static void test_names(void **state) {
    (void)state;
    kv_layout l;
    assert_int_equal(kv_layout_parse("broadcast", &l), 0);
    assert_int_equal(l, KV_LAYOUT_BROADCAST);
    assert_string_equal(kv_layout_name(KV_LAYOUT_OFFSET), "o");
    assert_int_equal(kv_layout_parse("x", &l), -1);
    assert_int_equal(kv_layout_parse("windowed", &l), 0);
    assert_int_equal(l, KV_LAYOUT_WINDOW);
    assert_string_equal(kv_layout_name(KV_LAYOUT_WINDOW), "w");
    assert_string_equal(kv_fill_name(KV_FILL_SPECIAL), "special");
    assert_string_equal(kv_check_kind_name(KV_CHECK_VARIANTS), "variants");
    assert_string_equal(kv_case_expect_name(KV_OK), "pass");
    assert_string_equal(kv_case_expect_name(KV_ERR_NEGATIVE_SIZE), "negative_size");
    kv_tolerance t;
    char buf[32];
    assert_int_equal(kv_tolerance_parse("rel:0.001", &t), 0);
    assert_int_equal(t.kind, KV_TOL_REL);
    kv_tolerance_format(t, buf, sizeof buf);
    assert_string_equal(buf, "rel:0.001");
    assert_int_equal(kv_tolerance_parse("rel:nan", &t), -1);
    assert_int_equal(kv_tolerance_parse("ulp:1.5", &t), -1);
    kv_shape s;
    char why[128];
    int bad = 0;
    assert_int_equal(kv_case_shape_parse("1x2x3x4x5x6x7x8x9", &s, why, sizeof why, &bad), -1);
    assert_string_equal(why, "more than 8 dims in '1x2x3x4x5x6x7x8x9'");
    assert_int_equal(bad, 16);
    assert_int_equal(kv_case_shape_parse("[1,2,3,4,5,6,7,8]", &s, why, sizeof why, &bad), 0);
    assert_int_equal(s.ndim, 8);
    kv_case_shape_format(&s, true, buf, sizeof buf);
    assert_string_equal(buf, "1x2x3x4x5x6x7x8");
}

/* ---- filters ---- */

static void test_filters(void **state) {
    (void)state;
    const char *a = "add.Tensor(dtype=f32,shape=[4,5])";
    const char *b = "add.Tensor(dtype=f64,shape=[4,6],device=accel)";
    const char *c = "add_.Tensor(dtype=f32,shape=[4,5])";
    const char *d = "mul.Tensor(dtype=f16,shape=[])";
    kv_filter f = { 0 };
    assert_true(kv_filter_match(&f, a)); /* no pattern: everything */

    assert_int_equal(kv_filter_add(&f, "add.Tensor(dtype=f32,shape=[4,5])"), KV_OK);
    assert_true(kv_filter_match(&f, a)); /* brackets are literal */
    assert_false(kv_filter_match(&f, b));
    assert_false(kv_filter_match(&f, c));
    kv_filter_free(&f);

    assert_int_equal(kv_filter_add(&f, "add.*"), KV_OK);
    assert_true(kv_filter_match(&f, a));
    assert_true(kv_filter_match(&f, b));
    assert_false(kv_filter_match(&f, c)); /* '.' is literal in a glob */
    assert_false(kv_filter_match(&f, d));
    /* several patterns: any may match */
    assert_int_equal(kv_filter_add(&f, "*shape=[]*"), KV_OK);
    assert_true(kv_filter_match(&f, d));
    assert_false(kv_filter_match(&f, c));
    kv_filter_free(&f);

    assert_int_equal(kv_filter_add(&f, "*(dtype=f?2,*"), KV_OK);
    assert_true(kv_filter_match(&f, a));
    assert_true(kv_filter_match(&f, c));
    assert_false(kv_filter_match(&f, b));
    kv_filter_free(&f);

    assert_int_equal(kv_filter_add(&f, "a\\*b"), KV_OK);
    assert_true(kv_filter_match(&f, "a*b"));
    assert_false(kv_filter_match(&f, "axb"));
    kv_filter_free(&f);

    assert_int_equal(kv_filter_add(&f, "re:^add_?\\.Tensor\\(dtype=f32"), KV_OK);
    assert_true(kv_filter_match(&f, a));
    assert_true(kv_filter_match(&f, c));
    assert_false(kv_filter_match(&f, b));
    kv_filter_free(&f);

    assert_int_equal(kv_filter_add(&f, "re:device=(accel|sim)"), KV_OK); /* searched, not anchored */
    assert_true(kv_filter_match(&f, b));
    assert_false(kv_filter_match(&f, a));
    kv_filter_free(&f);

    assert_int_equal(kv_filter_add(&f, "re:(dtype"), KV_ERR_INVALID_ARG);
    assert_memory_equal(kv_last_error_message(), "--filter: bad regular expression '(dtype': ", 43);
    assert_int_equal(f.n, 0);
    assert_int_equal(kv_filter_add(&f, "re:"), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), "--filter: empty pattern 're:'");
    kv_filter_free(&f);
}

/* ---- two Tensor[] lists (the foreach ops) ---- */

/* Expands `text`, expecting an error whose message contains `part`. */
static void expect_error_part(const char *text, const char *part) {
    kv_case_list l = { 0 };
    kv_error_clear();
    assert_int_not_equal(kv_cases_from_text("t.case", text, &l), KV_OK);
    if (strstr(kv_last_error_message(), part) == NULL) fail_msg("message '%s' lacks '%s'", kv_last_error_message(), part);
    kv_case_list_free(&l);
}

static void test_two_tensor_lists(void **state) {
    (void)state;
    /* A '/' splits the lists, always written back; without one the shapes
     * split in halves, and one shape is one element each. */
    static const char *const ids[] = {
        "_foreach_add.List(dtype=f32,shape=[2,3]:[4]/[2,3]:[1])",
        "_foreach_add.List(dtype=f32,shape=[2,3]:[4]/[5]:[1])",
        "_foreach_add.List(dtype=f32,shape=[2,3])", /* collapsed: one shape, one element each */
        "_foreach_add.List(dtype=f32,shape=[2,3]/)",
        "_foreach_add.List(dtype=f32,shape=/[2,3])",
        "_foreach_add.List(dtype=f32,shape=[2]:[3]/[4])",
    };
    expect_ids("--op=_foreach_add.List --shape=2x3:4/2x3:1,2x3:4:5:1,[2,3],2x3/,/2x3,2:3/4\n", ids, 6);
    /* Each element keeps its own dtype and layout, first list then second. */
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case", "--op=_foreach_add_.List --shape=2x3:4/2x3:4 --dtype=f32:i64:f64:f32\n", &l),
                     KV_OK);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.items[0].ninputs, 4);
    assert_int_equal(l.items[0].dtypes[1], KV_I64);
    assert_int_equal(l.items[0].input_arg[1], 0);
    assert_int_equal(l.items[0].input_arg[2], 1);
    kv_case_list_free(&l);
    expect_error_part("--op=_foreach_add.List --shape=2x3:4:5\n",
                      "3 shapes for the two lists 'self' and 'other': give an even number, or a '/'");
    expect_error_part("--op=_foreach_add.List --shape=2x3/4/5\n", "a second '/' (at most two Tensor[] lists)");
    expect_error_part("--op=_foreach_add.List --shape=2x3:/4\n", "empty value for an input");
    expect_error_part("--op=_foreach_mul.Scalar --shape=2x3/4 --args=scalar=2\n",
                      "a '/' separates two Tensor[] lists, and the op has one");
    expect_error_part("--op=add.Tensor --shape=2x3/4\n", "a '/' separates two Tensor[] lists, and the op has none");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cartesian_order_and_count),
        cmocka_unit_test(test_args_alternatives),
        cmocka_unit_test(test_defaults_and_reset),
        cmocka_unit_test(test_comments_continuations_quotes),
        cmocka_unit_test(test_per_input_lists),
        cmocka_unit_test(test_zero_dim_and_zero_size),
        cmocka_unit_test(test_batch_relative_paths),
        cmocka_unit_test(test_batch_cycle_and_depth),
        cmocka_unit_test(test_errors_options),
        cmocka_unit_test(test_errors_inputs),
        cmocka_unit_test(test_errors_args),
        cmocka_unit_test(test_errors_command_line),
        cmocka_unit_test(test_command_line),
        cmocka_unit_test(test_canonical_ids),
        cmocka_unit_test(test_repro_round_trip),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_two_tensor_lists),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
