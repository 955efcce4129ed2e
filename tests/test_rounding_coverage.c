/* The suite has no blind spot where results round (issue 21, item 3;
 * docs/coverage.md).
 *
 * Rounding: a kernel that rounds f16 add toward zero passed a suite whose
 * f16 add cases were all fill=exact, because no committed golden element
 * ever needed rounding. For every (op, output dtype) pair in f16, bf16,
 * f32 and f64 of an op the exact generator recomputes (the ops whose
 * results can round: runner/golden/exact.h), some case with a committed
 * golden must hold an element whose exact value differs from its rounded
 * value. The test knows that by running the generator on the case's
 * inputs and counting what its Ziv loop saw round
 * (kv_exact_inexact_count), not by trusting the case's fill.
 *
 * The test prints how many pairs it covers and fails naming each one
 * missing; an empty suite covers nothing and fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref.h"
#include "kv/kv.h"
#include "runner/check/check.h"
#include "runner/exec/fill.h"
#include "runner/golden/exact.h"
#include "runner/golden/golden.h"
#include "test_util.h"

/* Pairs whose results cannot round with any input the op accepts, each
 * with why. */
static const struct {
    const char *op;
    kv_dtype dtype;
    const char *why;
} always_exact[] = {
    /* |x| of a real is x or -x; only abs of a complex (a square root)
     * rounds, and its result is f32 or f64, never f16 or bf16. */
    { "abs", KV_F16, "|x| of a real is exact; complex abs gives f32/f64" },
    { "abs", KV_BF16, "|x| of a real is exact; complex abs gives f32/f64" },
    { NULL, KV_F32, NULL },
};

static bool is_always_exact(const char *op, kv_dtype dt) {
    for (size_t i = 0; always_exact[i].op != NULL; i++)
        if (strcmp(always_exact[i].op, op) == 0 && always_exact[i].dtype == dt) return true;
    return false;
}

static bool is_rounding_dtype(kv_dtype dt) { return dt == KV_F16 || dt == KV_BF16 || dt == KV_F32 || dt == KV_F64; }

/* An out= op rounds where its functional twin does (exact_ops.c
 * recomputes it through the twin). */
static bool op_rounds(const char *op) {
    if (kv_exact_family_of(op) != KV_EXACT_REF) return true;
    const char *fn = kv_ref_out_functional(op);
    return fn != NULL && kv_exact_family_of(fn) != KV_EXACT_REF;
}

static int64_t shape_numel(const kv_shape *s) {
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->sizes[d];
    return n;
}

/* The largest present tensor input, in elements. */
static int64_t case_numel(const kv_case *c) {
    int64_t n = 0;
    for (int i = 0; i < c->ninputs; i++)
        if (!c->absent[i] && shape_numel(&c->shapes[i]) > n) n = shape_numel(&c->shapes[i]);
    return n;
}

typedef struct pair {
    const char *op;
    kv_dtype dtype;
    bool covered;
    int cases;          /* cases with a committed golden tried */
    char by[160];       /* the case that covers it */
} pair;

typedef struct cand {
    const kv_case *c;
    const kv_golden_entry *e;
    int64_t numel;
    bool exact_fill;
} cand;

/* Random fills first, then smaller first: the first case that covers a
 * pair is usually found after one small recomputation. */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->exact_fill != y->exact_fill) return x->exact_fill ? 1 : -1;
    return (x->numel > y->numel) - (x->numel < y->numel);
}

static pair *pair_find(pair *ps, int *np, const char *op, kv_dtype dt) {
    for (int i = 0; i < *np; i++)
        if (ps[i].dtype == dt && strcmp(ps[i].op, op) == 0) return &ps[i];
    ps[*np] = (pair){ .op = op, .dtype = dt };
    return &ps[(*np)++];
}

/* Whether the exact generator sees at least one output element of the
 * case's golden problem round. */
static bool case_rounds(const kv_case *c, const kv_op *op) {
    kv_case_inputs in;
    if (kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, &in) != KV_OK)
        fail_msg("%s: inputs: %s", c->op, kv_last_error_message());
    kv_case_outputs out = { 0 };
    const bool was_ref = kv_tune_reference_mode_set(true);
    const kv_status st = kv_case_invoke(op, &in, kv_keyset_of(KV_KEY_CPU), &out);
    kv_tune_reference_mode_set(was_ref);
    if (st != KV_OK) fail_msg("%s: reference: %s", c->op, kv_last_error_message());
    const int64_t before = kv_exact_inexact_count();
    if (kv_exact_golden(c, op, &out, NULL) != KV_OK) fail_msg("%s: exact golden: %s", c->op, kv_last_error_message());
    const bool rounds = kv_exact_inexact_count() > before;
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&in);
    return rounds;
}

static void test_every_rounding_pair_has_a_rounded_golden(void **state) {
    (void)state;
    kv_case_list cases = { 0 };
    kv_test_load_suite(&cases);
    kv_golden_store *store = kv_golden_open("golden");
    if (store == NULL) fail_msg("golden store: %s", kv_last_error_message());
    cand *cs = calloc((size_t)cases.n, sizeof *cs);
    pair *ps = calloc((size_t)cases.n + 4 * (size_t)kv_op_count(), sizeof *ps);
    assert_non_null(cs);
    assert_non_null(ps);
    int ncand = 0, npairs = 0;
    /* Every rounding op in every dtype, whether or not the suite has a
     * case for it: a pair the suite never runs is missing too. */
    static const kv_dtype dts[] = { KV_F16, KV_BF16, KV_F32, KV_F64 };
    for (int i = 0; i < kv_op_count(); i++)
        if (op_rounds(kv_op_name(kv_op_at(i))))
            for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) pair_find(ps, &npairs, kv_op_name(kv_op_at(i)), dts[d]);
    char key[1024];
    for (int j = 0; j < cases.n; j++) {
        const kv_case *c = &cases.items[j];
        if (c->program[0] != '\0' || c->expect != KV_OK || !(c->checks & (1u << KV_CHECK_GOLDEN))) continue;
        if (!op_rounds(c->op)) continue;
        const int n = kv_fill_golden_key(c, key, (int)sizeof key);
        assert_true(n > 0 && n < (int)sizeof key);
        const kv_golden_entry *e = kv_golden_lookup(store, key, 0);
        if (e == NULL || !is_rounding_dtype(e->dtype)) continue;
        pair_find(ps, &npairs, c->op, e->dtype);
        cs[ncand++] = (cand){ c, e, case_numel(c), c->fill == KV_FILL_EXACT || c->fill == KV_FILL_SPECIAL };
    }
    qsort(cs, (size_t)ncand, sizeof *cs, cand_cmp);
    for (int j = 0; j < ncand; j++) {
        pair *p = pair_find(ps, &npairs, cs[j].c->op, cs[j].e->dtype);
        if (p->covered) continue;
        p->cases++;
        const kv_op *op = kv_op_find(cs[j].c->op);
        assert_non_null(op);
        if (case_rounds(cs[j].c, op)) {
            p->covered = true;
            snprintf(p->by, sizeof p->by, "%s", cs[j].e->key);
        }
    }
    int covered = 0, missing = 0, excepted = 0;
    for (int i = 0; i < npairs; i++) {
        if (ps[i].covered) covered++;
        else if (is_always_exact(ps[i].op, ps[i].dtype)) excepted++;
        else {
            print_message("(%s, %s): none of its %d cases with a committed golden has an element that rounds\n",
                          ps[i].op, kv_dtype_name(ps[i].dtype), ps[i].cases);
            missing++;
        }
    }
    print_message("rounding coverage: %d of %d (op, dtype) pairs in f16/bf16/f32/f64 have a golden element that "
                  "rounds (%d always exact, %d missing)\n",
                  covered, npairs, excepted, missing);
    free(cs);
    free(ps);
    kv_golden_close(store);
    kv_case_list_free(&cases);
    assert_true(npairs > 0);
    assert_int_equal(missing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rounding_pair_has_a_rounded_golden),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
