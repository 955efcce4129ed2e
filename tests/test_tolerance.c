/* The tolerance table restated against the correctly rounded truth
 * (src/runner/check/tolerance.c, issue 14 item 2): one test per kind of
 * rule. Elementwise ops carry N ulp per dtype (CUDA's documented bound, or
 * glibc's, never below what the accuracy sweep measures); exact ops are
 * bitwise; fill=exact is bitwise only where the fill really keeps every
 * partial result on the output dtype's grid (addmm's scalings, long sums
 * and scatters into narrow dtypes fall back to the bound); and an
 * overflowing alpha*b fails a kernel that makes NaN of it. The bound scan
 * recomputes the error bound of every case of cases/ whose rule is a bound,
 * from its stored golden, and fails on any NaN or infinite bound where the
 * golden is finite (issue 22 item 4). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kv/kv.h"
#include "ref/ref.h"
#include "runner/case/expand.h"
#include "runner/check/check.h"
#include "runner/check/check_util.h"
#include "runner/golden/golden.h"
#include "runner/check/compare.h"
#include "runner/check/tolerance.h"
#include "test_util.h"

static int group_setup(void **state) {
    (void)state;
    return kv_init() == KV_OK ? 0 : -1;
}

static kv_cmp_rule rule_of(const kv_case *c, kv_dtype out, kv_bound_kind *bk) {
    return kv_tol_rule_for(c, out, bk, NULL);
}

/* The ulp bound of a unary op for a dtype (the case's input dtype). */
static double ulp_of(const char *op, kv_dtype dt) {
    const kv_shape sh[1] = { { 1, { 8 } } };
    kv_case c = kv_test_case_of(op, dt, 1, sh);
    kv_bound_kind bk;
    const kv_cmp_rule r = rule_of(&c, dt, &bk);
    assert_int_equal(r.kind, KV_CMP_ULP);
    return r.value;
}

static void test_elementwise_ulps(void **state) {
    (void)state;
    static const struct {
        const char *op;
        double f32, f64;
    } rows[] = {
        { "exp", 2, 1 },  { "log", 1, 1 },  { "sin", 2, 2 },     { "cos", 2, 2 },  { "tanh", 2, 2 },
        { "rsqrt", 2, 2 }, { "sigmoid", 4, 4 }, { "silu", 4, 4 },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (ulp_of(rows[i].op, KV_F32) != rows[i].f32) fail_msg("%s f32: %g", rows[i].op, ulp_of(rows[i].op, KV_F32));
        if (ulp_of(rows[i].op, KV_F64) != rows[i].f64) fail_msg("%s f64: %g", rows[i].op, ulp_of(rows[i].op, KV_F64));
        /* f16/bf16: computed wider and rounded once: 1 ulp. */
        assert_true(ulp_of(rows[i].op, KV_F16) == 1.0);
        assert_true(ulp_of(rows[i].op, KV_BF16) == 1.0);
    }
}

static void test_pow_rules(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 1, { 8 } } };
    kv_case c = kv_test_case_of("pow.Tensor_Scalar", KV_F32, 1, sh);
    kv_test_case_add_arg(&c, "exponent", "0.5");
    kv_bound_kind bk;
    kv_cmp_rule r = rule_of(&c, KV_F32, &bk);
    assert_int_equal(r.kind, KV_CMP_ULP);
    assert_true(r.value == 4.0); /* CUDA's powf */
    assert_true(rule_of(&c, KV_F64, &bk).value == 2.0);
    assert_true(rule_of(&c, KV_BF16, &bk).value == 1.0);
    r = rule_of(&c, KV_C64, &bk);
    assert_int_equal(r.kind, KV_CMP_REL);
    assert_true(r.value == 8 * 0x1p-24);
    assert_int_equal(rule_of(&c, KV_I32, &bk).kind, KV_CMP_BITWISE);
}

static void test_exact_ops_bitwise(void **state) {
    (void)state;
    static const char *const ops[] = { "sqrt", "neg", "relu", "mul.Tensor", "div.Tensor", "add.Tensor", "clamp" };
    const kv_shape sh[2] = { { 1, { 8 } }, { 1, { 8 } } };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        kv_case c = kv_test_case_of(ops[i], KV_F32, strcmp(ops[i], "sqrt") == 0 ? 1 : 2, sh);
        kv_bound_kind bk;
        if (rule_of(&c, KV_F32, &bk).kind != KV_CMP_BITWISE) fail_msg("%s is not bitwise", ops[i]);
        const kv_tol_entry *e = NULL;
        kv_tol_rule_for(&c, KV_F32, &bk, &e);
        assert_non_null(e);
        assert_non_null(strstr(e->reason, "bitwise"));
    }
}

/* Every row states its reason against the truth: no row still speaks of
 * the reference rounding the golden. */
static void test_reasons_against_truth(void **state) {
    (void)state;
    for (int i = 0; i < kv_tol_count(); i++) {
        const kv_tol_entry *e = kv_tol_at(i);
        if (strstr(e->reason, "the reference rounds") != NULL) fail_msg("%s: %s", e->op, e->reason);
        assert_true(strlen(e->reason) > 10);
    }
}

/* ---- fill=exact shortcuts ---- */

static kv_cmp_kind exact_kind(kv_case *c, kv_dtype out) {
    c->fill = KV_FILL_EXACT;
    kv_bound_kind bk;
    return rule_of(c, out, &bk).kind;
}

static void test_exact_fill_addmm_scalings(void **state) {
    (void)state;
    /* f32, K = 5: every scaling of the small integers stays exact. */
    const kv_shape s32[3] = { { 2, { 4, 3 } }, { 2, { 4, 5 } }, { 2, { 5, 3 } } };
    kv_case c = kv_test_case_of("addmm", KV_F32, 3, s32);
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
    kv_test_case_add_arg(&c, "beta", "2");
    kv_test_case_add_arg(&c, "alpha", "-3");
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
    /* f16, K = 128: the fill takes R = 4 so that R^2 K = 2048 = 2^11, and
     * beta*c on top (2047 + 4 = 2051) leaves f16's grid: the bound. */
    const kv_shape s16[3] = { { 2, { 4, 3 } }, { 2, { 4, 128 } }, { 2, { 128, 3 } } };
    c = kv_test_case_of("addmm", KV_F16, 3, s16);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BOUND);
    kv_test_case_add_arg(&c, "beta", "0");
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BITWISE);
    /* A non-integral scaling never keeps the grid. */
    c = kv_test_case_of("addmm", KV_F32, 3, s32);
    kv_test_case_add_arg(&c, "alpha", "0.5");
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BOUND);
}

static void test_exact_fill_long_sum(void **state) {
    (void)state;
    /* 1024 integers in [-2, 2] fit f16's 2^11; 4096 values (R = 1) do not. */
    kv_shape sh[1] = { { 1, { 1024 } } };
    kv_case c = kv_test_case_of("sum.dim_IntList", KV_F16, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BITWISE);
    sh[0].sizes[0] = 4096;
    c = kv_test_case_of("sum.dim_IntList", KV_F16, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BOUND);
    c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
    /* mean divides: never bitwise. */
    sh[0].sizes[0] = 8;
    c = kv_test_case_of("mean.dim", KV_F32, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BOUND);
    /* prod of +-1: always exact. */
    c = kv_test_case_of("prod.dim_int", KV_F16, 1, sh);
    assert_int_equal(exact_kind(&c, KV_F16), KV_CMP_BITWISE);
}

static void test_exact_fill_scatter_narrow(void **state) {
    (void)state;
    /* Quarters up to 4: a sum of n is at most 16n quarters; bf16 holds 2^8. */
    const kv_shape small[2] = { { 2, { 3, 4 } }, { 1, { 3 } } };
    kv_case c = kv_test_case_of("index_select_backward", KV_BF16, 2, small);
    c.dtypes[1] = KV_I64;
    assert_int_equal(exact_kind(&c, KV_BF16), KV_CMP_BITWISE);
    const kv_shape big[2] = { { 2, { 32, 4 } }, { 1, { 32 } } };
    c = kv_test_case_of("index_select_backward", KV_BF16, 2, big);
    c.dtypes[1] = KV_I64;
    assert_int_equal(exact_kind(&c, KV_BF16), KV_CMP_BOUND);
    c = kv_test_case_of("index_select_backward", KV_F32, 2, big);
    c.dtypes[1] = KV_I64;
    assert_int_equal(exact_kind(&c, KV_F32), KV_CMP_BITWISE);
}

/* ---- overflow: alpha*b past the range ---- */

static void test_axpy_overflow(void **state) {
    (void)state;
    /* inf + (-2.5)*DBL_MAX: the truth is +inf; a kernel that rounds
     * alpha*b first makes inf - inf = NaN and must fail. */
    const int64_t sz[1] = { 1 };
    const double av[1] = { INFINITY }, bv[1] = { DBL_MAX };
    const kv_shape sh[2] = { { 1, { 1 } }, { 1, { 1 } } };
    kv_case c = kv_test_case_of("add.Tensor", KV_F64, 2, sh);
    kv_test_case_add_arg(&c, "alpha", "-2.5");
    kv_bound_kind bk;
    const kv_tol_entry *e = NULL;
    const kv_cmp_rule r = kv_tol_rule_for(&c, KV_F64, &bk, &e);
    assert_int_equal(r.kind, KV_CMP_BOUND);
    assert_int_equal(bk, KV_BOUND_AXPY);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 2;
    in.tensors[0] = kv_tensor_from_data(av, sz, 1, KV_F64);
    in.tensors[1] = kv_tensor_from_data(bv, sz, 1, KV_F64);
    in.nargs = 3;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[1] };
    in.args[2] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = kv_scalar_double(-2.5) };
    const double tv[1] = { INFINITY }, nv[1] = { NAN };
    kv_tensor *truth = kv_tensor_from_data(tv, sz, 1, KV_F64);
    kv_tensor *bad = kv_tensor_from_data(nv, sz, 1, KV_F64);
    double *bound = NULL;
    assert_int_equal(kv_tol_bounds(bk, e->value, &c, &in, truth, 0, &bound), KV_OK);
    kv_cmp_report rep;
    assert_int_equal(kv_compare(truth, bad, &r, bound, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    assert_int_equal(kv_compare(truth, truth, &r, bound, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    free(bound);
    kv_tensor_release(truth);
    kv_tensor_release(bad);
    kv_case_inputs_free(&in);
}

/* ---- bounds near the range's end ---- */

/* A sum whose terms' magnitudes add past DBL_MAX while the sum itself is
 * finite (max − max + max = max), and x + alpha·y with |x| + |alpha·y|
 * past it: the derived bounds stay finite and below DBL_MAX (gamma times
 * each term before the sum), not inf and not the DBL_MAX clamp. */
static void test_bounds_near_overflow(void **state) {
    (void)state;
    const int64_t sz[1] = { 3 };
    const double xv[3] = { DBL_MAX, -DBL_MAX, DBL_MAX };
    kv_tensor *x = kv_tensor_from_data(xv, sz, 1, KV_F64);
    const kv_shape sh[1] = { { 1, { 3 } } };
    kv_case c = kv_test_case_of("sum.dim_IntList", KV_F64, 1, sh);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.ntensors = 1;
    in.tensors[0] = x;
    in.nargs = 2;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = x };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_NONE };
    const double tv[1] = { DBL_MAX };
    const int64_t one[1] = { 1 };
    kv_tensor *truth = kv_tensor_from_data(tv, one, 0, KV_F64);
    double *b = NULL;
    for (int mean = 0; mean < 2; mean++) {
        assert_int_equal(kv_tol_bounds(mean ? KV_BOUND_MEAN : KV_BOUND_SUM, 0, &c, &in, truth, 0, &b), KV_OK);
        if (!(isfinite(b[0]) && b[0] < DBL_MAX)) fail_msg("%s bound %g", mean ? "mean" : "sum", b[0]);
        free(b);
    }
    kv_tensor_release(truth);
    kv_case_inputs_free(&in);

    const double av[1] = { DBL_MAX }, yv[1] = { -DBL_MAX / 2 };
    const kv_shape sh2[2] = { { 1, { 1 } }, { 1, { 1 } } };
    c = kv_test_case_of("add.Tensor", KV_F64, 2, sh2);
    memset(&in, 0, sizeof in);
    in.ntensors = 2;
    in.tensors[0] = kv_tensor_from_data(av, one, 1, KV_F64);
    in.tensors[1] = kv_tensor_from_data(yv, one, 1, KV_F64);
    in.nargs = 3;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[1] };
    in.args[2] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = kv_scalar_double(1.0) };
    const double hv[1] = { DBL_MAX / 2 };
    truth = kv_tensor_from_data(hv, one, 1, KV_F64);
    assert_int_equal(kv_tol_bounds(KV_BOUND_AXPY, 0, &c, &in, truth, 0, &b), KV_OK);
    if (!(isfinite(b[0]) && b[0] < DBL_MAX)) fail_msg("axpy bound %g", b[0]);
    free(b);
    kv_tensor_release(truth);
    kv_case_inputs_free(&in);

    /* [max, -max]·[2, 2]ᵀ = 0 exactly, but γ·Σ|a||b| = γ·4·max is past
     * the range: said as DBL_MAX, which an inf or NaN output still fails. */
    const double mv[2] = { DBL_MAX, -DBL_MAX }, tw[2] = { 2.0, 2.0 };
    const int64_t s12[2] = { 1, 2 }, s21[2] = { 2, 1 }, s11[2] = { 1, 1 };
    const kv_shape sh3[2] = { { 2, { 1, 2 } }, { 2, { 2, 1 } } };
    c = kv_test_case_of("mm", KV_F64, 2, sh3);
    memset(&in, 0, sizeof in);
    in.ntensors = 2;
    in.tensors[0] = kv_tensor_from_data(mv, s12, 2, KV_F64);
    in.tensors[1] = kv_tensor_from_data(tw, s21, 2, KV_F64);
    in.nargs = 2;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[0] };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = in.tensors[1] };
    const double zv[1] = { 0.0 }, iv[1] = { INFINITY };
    truth = kv_tensor_from_data(zv, s11, 2, KV_F64);
    kv_tensor *inf = kv_tensor_from_data(iv, s11, 2, KV_F64);
    assert_int_equal(kv_tol_bounds(KV_BOUND_MATMUL, 0, &c, &in, truth, 0, &b), KV_OK);
    assert_true(b[0] == DBL_MAX);
    const kv_cmp_rule rule = { .kind = KV_CMP_BOUND };
    kv_cmp_report rep;
    assert_int_equal(kv_compare(truth, inf, &rule, b, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 1);
    free(b);
    kv_tensor_release(truth);
    kv_tensor_release(inf);
    kv_case_inputs_free(&in);
}

/* ---- every bound of the suite is finite where the golden is ---- */

typedef struct scan_tally {
    int cases;        /* golden problems whose rule for an output is a bound */
    int64_t elements; /* bound elements scanned (finite golden) */
    int64_t bad;      /* of them NaN or infinite, plus bounds that could not be computed */
    int64_t at_max;   /* of them DBL_MAX: a derivation past the range, said as the largest double */
} scan_tally;

/* Golden keys seen: the same problem reached through another layout,
 * device or check list has the same bound. */
typedef struct key_set {
    char **keys;
    size_t n, cap;
} key_set;

static bool key_set_add(key_set *s, const char *key) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = key; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    if (2 * (s->n + 1) > s->cap) {
        key_set g = { calloc(s->cap ? 2 * s->cap : 4096, sizeof(char *)), 0, s->cap ? 2 * s->cap : 4096 };
        assert_non_null(g.keys);
        for (size_t i = 0; i < s->cap; i++)
            if (s->keys[i] != NULL) {
                uint64_t hh = 1469598103934665603ull;
                for (const char *p = s->keys[i]; *p; p++) hh = (hh ^ (unsigned char)*p) * 1099511628211ull;
                size_t j = hh % g.cap;
                while (g.keys[j] != NULL) j = (j + 1) % g.cap;
                g.keys[j] = s->keys[i];
                g.n++;
            }
        free(s->keys);
        *s = g;
    }
    size_t j = h % s->cap;
    for (; s->keys[j] != NULL; j = (j + 1) % s->cap)
        if (strcmp(s->keys[j], key) == 0) return false;
    s->keys[j] = strdup(key);
    assert_non_null(s->keys[j]);
    s->n++;
    return true;
}

static void key_set_free(key_set *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->keys[i]);
    free(s->keys);
}

static void scan_case(const kv_case *c, const kv_run_env *env, key_set *seen, scan_tally *t) {
    if (c->expect != KV_OK || c->program[0] != '\0') return;
    char key[2 * KV_CASE_ID_MAX];
    if (kv_check_golden_key(c, key, (int)sizeof key) != KV_OK || !key_set_add(seen, key)) return;
    const kv_op *op = kv_op_find(c->op);
    assert_non_null(op);
    const kv_check_ctx ctx = { c, op, env, NULL };
    kv_check_ref ref;
    memset(&ref, 0, sizeof ref);
    if (kv_check_ref_run(&ctx, &ref) != KV_OK || ref.call_status != KV_OK) {
        kv_check_ref_free(&ref);
        return;
    }
    kv_tensor *expected[KV_CASE_MAX_OUTPUTS] = { NULL };
    char note[256];
    assert_int_equal(kv_check_golden_expected(&ctx, &ref, expected, note, (int)sizeof note), KV_OK);
    bool counted = false;
    for (int i = 0; i < ref.out.n; i++) {
        const kv_tensor *e = expected[i];
        kv_bound_kind bk = KV_BOUND_NONE;
        const kv_tol_entry *entry = NULL;
        if (!kv_dtype_is_floating(e->dtype) || kv_tol_rule_for(c, e->dtype, &bk, &entry).kind != KV_CMP_BOUND)
            continue;
        char id[KV_CASE_ID_MAX];
        kv_case_id(c, id, sizeof id);
        t->cases += !counted;
        counted = true;
        double *b = NULL;
        if (kv_tol_bounds(bk, entry ? entry->value : 0.0, c, &ref.in, e, i, &b) != KV_OK) {
            fprintf(stderr, "bound scan: %s output %d: %s\n", id, i, kv_last_error_message());
            t->bad++;
            continue;
        }
        const int64_t n = kv_tensor_numel(e);
        int64_t bad = 0, first = -1;
        for (int64_t k = 0; k < n; k++) {
            if (!kv_tol_elem_finite(e, k)) continue;
            t->elements++;
            t->at_max += b[k] == DBL_MAX;
            if (!isfinite(b[k])) {
                bad++;
                if (first < 0) first = k;
            }
        }
        if (bad > 0)
            fprintf(stderr, "bound scan: %s output %d: %lld of %lld bounds NaN or infinite (first: element %lld, %g)\n",
                    id, i, (long long)bad, (long long)n, (long long)first, b[first]);
        t->bad += bad;
        free(b);
    }
    for (int i = 0; i < ref.out.n; i++) kv_tensor_release(expected[i]);
    kv_check_ref_free(&ref);
}

/* Every *.case under dir, recursively; cases/accel.case reruns the other
 * files on accel, whose golden problems are the same. */
static void scan_dir(const char *dir, const kv_run_env *env, key_set *seen, scan_tally *t, int *files) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (ent->d_name[0] == '.') continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, ent->d_name);
        const size_t len = strlen(ent->d_name);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        if (S_ISDIR(sb.st_mode)) {
            scan_dir(path, env, seen, t, files);
            continue;
        }
        if (len < 6 || strcmp(ent->d_name + len - 5, ".case") != 0 || strcmp(path, "cases/accel.case") == 0) continue;
        kv_case_list cl;
        memset(&cl, 0, sizeof cl);
        if (kv_cases_from_file(path, &cl) != KV_OK) fail_msg("%s: %s", path, kv_last_error_message());
        (*files)++;
        for (int i = 0; i < cl.n; i++) scan_case(&cl.items[i], env, seen, t);
        kv_case_list_free(&cl);
    }
    closedir(d);
}

static void test_suite_bounds_finite(void **state) {
    (void)state;
    kv_golden_store *store = kv_golden_open("golden");
    assert_non_null(store);
    const kv_run_env env = { store, false, NULL, KV_GOLDEN_MODE_STORE };
    key_set seen = { NULL, 0, 0 };
    scan_tally t = { 0, 0, 0, 0 };
    int files = 0;
    scan_dir("cases", &env, &seen, &t, &files);
    fprintf(stderr, "bound scan: %d case files, %zu golden problems, %d with a bound rule, %lld bound elements "
                    "scanned where the golden is finite, %lld NaN or infinite, %lld at DBL_MAX\n",
            files, seen.n, t.cases, (long long)t.elements, (long long)t.bad, (long long)t.at_max);
    key_set_free(&seen);
    kv_golden_close(store);
    /* Not an empty corpus: the suite has hundreds of sum, mm, norm,
     * softmax and gelu cases under a bound. */
    assert_true(t.cases > 100);
    assert_int_equal(t.bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_elementwise_ulps),
        cmocka_unit_test(test_pow_rules),
        cmocka_unit_test(test_exact_ops_bitwise),
        cmocka_unit_test(test_reasons_against_truth),
        cmocka_unit_test(test_exact_fill_addmm_scalings),
        cmocka_unit_test(test_exact_fill_long_sum),
        cmocka_unit_test(test_exact_fill_scatter_narrow),
        cmocka_unit_test(test_axpy_overflow),
        cmocka_unit_test(test_bounds_near_overflow),
        cmocka_unit_test(test_suite_bounds_finite),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
