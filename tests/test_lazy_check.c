/* The lazy= and mode= case options and the lazy and grad checks, end to
 * end in this process (no golden store: the checks compare against the
 * live reference, which the golden check proves equal to the store).
 *
 * The checks must be able to fail: removing the Conjugate fallback, or
 * replacing it by one that gets the values right without being the
 * fallback, and a Negative-key kernel of a test op that handles the bit
 * itself, each make the lazy check FAIL with a message naming the path
 * that did not run. Every fallback and kernel is restored afterwards. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/check/check.h"
#include "runner/exec/driver.h"
#include "runner/case/expand.h"
#include "test_util.h"

/* ---- helpers ---- */

static kv_case one_case(const char *line) {
    kv_case_list l = { 0 };
    const kv_status st = kv_cases_from_text("t.case", line, &l);
    if (st != KV_OK) fail_msg("%s: %s", line, kv_last_error_message());
    assert_int_equal(l.n, 1);
    kv_case c = l.items[0];
    kv_case_list_free(&l);
    return c;
}

/* The message of a line that must not parse. */
static const char *parse_error(const char *line) {
    kv_case_list l = { 0 };
    const kv_status st = kv_cases_from_text("t.case", line, &l);
    kv_case_list_free(&l);
    assert_int_not_equal(st, KV_OK);
    return kv_last_error_message();
}

static void assert_contains(const char *text, const char *part) {
    if (strstr(text, part) == NULL) fail_msg("expected \"%s\" in \"%s\"", part, text);
}

static const kv_check_result *row(const kv_result_list *r, const char *check) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->items[i].check, check) == 0) return &r->items[i];
    fail_msg("no result row '%s'", check);
    return NULL;
}

/* Runs the case's checks and returns the row of `check` (copied). */
static kv_check_result run_row(const kv_case *c, const char *check) {
    static const kv_run_env env = { .golden = NULL };
    kv_result_list r = { 0 };
    kv_case_run(c, &env, &r);
    kv_check_result out = *row(&r, check);
    kv_result_list_free(&r);
    return out;
}

#define CK(k) (1u << (k))

/* ---- option grammar ---- */

static void test_lazy_alternatives_and_ids(void **state) {
    (void)state;
    kv_case_list l = { 0 };
    assert_int_equal(kv_cases_from_text("t.case", "--op=add.Tensor --dtype=c64 --shape=3x4 --lazy=conj@0+neg@1,zero,none",
                                        &l),
                     KV_OK);
    assert_int_equal(l.n, 3); /* the comma separates alternatives; '+' combines */
    char id[KV_CASE_ID_MAX];
    kv_case_id(&l.items[0], id, sizeof id);
    assert_string_equal(id, "add.Tensor(dtype=c64,shape=[3,4],lazy=conj@0+neg@1)");
    assert_int_equal(l.items[0].lazy[0], KV_CASE_LAZY_CONJ);
    assert_int_equal(l.items[0].lazy[1], KV_CASE_LAZY_NEG);
    kv_case_id(&l.items[1], id, sizeof id); /* bare `zero`: every eligible input */
    assert_string_equal(id, "add.Tensor(dtype=c64,shape=[3,4],lazy=zero@0+zero@1)");
    kv_case_id(&l.items[2], id, sizeof id);
    assert_string_equal(id, "add.Tensor(dtype=c64,shape=[3,4])");
    /* The golden key is the plain problem's. */
    char g0[KV_CASE_ID_MAX], g2[KV_CASE_ID_MAX];
    kv_case_golden_key(&l.items[0], g0, sizeof g0);
    kv_case_golden_key(&l.items[2], g2, sizeof g2);
    assert_string_equal(g0, g2);
    kv_case_list_free(&l);

    /* Canonical order: inputs ascending, bits conj, neg, zero; modes in table order. */
    kv_case c = one_case("--op=mul.Tensor --dtype=c64 --shape=3x4 --lazy=neg@1+neg@0+conj@0 --mode=vmap+trace+grad");
    kv_case_id(&c, id, sizeof id);
    assert_string_equal(id, "mul.Tensor(dtype=c64,shape=[3,4],lazy=conj@0+neg@0+neg@1,mode=grad+trace+vmap)");
    /* The DESIGN.md example ID spells the keys this way. */
    c = one_case("--op=add.Tensor --dtype=c64 --shape=64x33:33 --layout=t --lazy=conj@0 --mode=grad");
    kv_case_id(&c, id, sizeof id);
    assert_string_equal(id, "add.Tensor(dtype=c64,shape=[64,33]:[33],layout=t,lazy=conj@0,mode=grad)");
    char repro[KV_CASE_ID_MAX];
    kv_case_repro(&c, repro, sizeof repro);
    assert_string_equal(repro, "kvrun --op=add.Tensor --dtype=c64 --shape=64x33:33 --layout=t --lazy=conj@0 --mode=grad");
}

static void test_lazy_and_mode_errors(void **state) {
    (void)state;
    assert_string_equal(parse_error("--op=add.Tensor --dtype=f32 --shape=3x4 --lazy=conj@0"),
                        "t.case:1:48: add.Tensor: --lazy=conj@0: input 0 ('self') is f32: the Conjugate bit needs a "
                        "complex dtype");
    assert_contains(parse_error("--op=add.Tensor --dtype=f32 --shape=3x4 --lazy=conj"),
                    "no input can carry the conj bit");
    assert_contains(parse_error("--op=index_select --dtype=f32:i64 --shape=5x4:3 --args=dim=0 --lazy=neg@1"),
                    "input 1 ('index') is i64: lazy bits go on floating and complex inputs only");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --lazy=neg@1"), "input 1 does not exist");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --lazy=pos@0"), "unknown lazy bit 'pos'");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --lazy=neg@x"), "expected an input index");
    assert_contains(parse_error("--op=neg --dtype=c64 --shape=3x4 --lazy=zero@0+conj@0"),
                    "zero replaces the input by a zero tensor");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --lazy=neg@0+neg@0"), "neg@0 is given twice");
    assert_contains(parse_error("--op=is_neg --dtype=f32 --shape=3x4 --lazy=neg"), "reports tensor metadata");
    assert_contains(parse_error("--op=add_.Tensor --dtype=f32 --shape=3x4 --lazy=zero@0"),
                    "writing to a ZeroTensor is an error: add --expect=invalid_arg");
    assert_contains(parse_error("--op=eq.Tensor --dtype=f32 --shape=3x4 --mode=grad"),
                    "eq.Tensor has no autograd formula (it is not differentiable)");
    assert_contains(parse_error("--op=add.Tensor --dtype=i32 --shape=3x4 --mode=grad"),
                    "no floating or complex input to differentiate");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --mode=grad+no_grad"), "contradict");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --mode=autocast_f16+autocast_bf16"),
                    "one autocast dtype at a time");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --mode=warp"), "unknown mode 'warp'");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=6x7 --layout=b --mode=vmap"), "layout b");
    assert_contains(parse_error("--op=neg --dtype=f32 --shape=3x4 --check=lazy"), "--check=lazy needs --lazy= or --mode=");
    assert_contains(parse_error("--op=argmax --dtype=f32 --shape=3x4 --check=grad"), "argmax has no autograd formula");
}

static void test_default_checks(void **state) {
    (void)state;
    kv_case c = one_case("--op=neg --dtype=f32 --shape=3x4 --lazy=neg");
    assert_int_equal(c.checks, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_LAZY));
    c = one_case("--op=neg --dtype=f32 --shape=3x4 --mode=grad");
    assert_int_equal(c.checks, CK(KV_CHECK_GOLDEN) | CK(KV_CHECK_LAZY) | CK(KV_CHECK_GRAD));
    c = one_case("--op=add_.Tensor --dtype=f32 --shape=3x4 --lazy=zero@0 --expect=invalid_arg");
    assert_int_equal(c.checks, CK(KV_CHECK_LAZY));
    c = one_case("--op=neg --dtype=f32 --shape=3x4");
    assert_int_equal(c.checks, kv_case_default_checks(KV_OK));
    /* Default checks stay out of repro lines. */
    c = one_case("--op=neg --dtype=f32 --shape=3x4 --mode=grad");
    char repro[KV_CASE_ID_MAX];
    kv_case_repro(&c, repro, sizeof repro);
    assert_string_equal(repro, "kvrun --op=neg --dtype=f32 --shape=3x4 --mode=grad");
}

/* ---- the lazy check passes ---- */

static void test_lazy_check_passes(void **state) {
    (void)state;
    kv_case c = one_case("--op=mul.Tensor --dtype=c64 --shape=3x4 --fill=exact --lazy=conj@0 --check=lazy");
    kv_check_result r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "Conjugate fallback ran 1x (1 materialization)");
    assert_int_equal(r.compared, 12);

    /* A view keeps the bit: the fallthrough is the path. */
    c = one_case("--op=t --dtype=f32 --shape=3x4 --fill=exact --lazy=neg --check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "Negative is a fallthrough: the view kept the input's storage and bit");

    /* Zero: the reference on the zero input; in place on one is the error. */
    c = one_case("--op=add.Tensor --dtype=f32 --shape=3x4 --lazy=zero@1 --check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "bitwise equal to the reference on the zero inputs");
    c = one_case("--op=add_.Tensor --dtype=f32 --shape=3x4 --lazy=zero@0 --expect=invalid_arg");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "ZeroTensors are immutable");
}

static void test_mode_evidence(void **state) {
    (void)state;
    kv_case c = one_case("--op=mm --dtype=f32 --shape=3x4:4x2 --mode=autocast_f16 --check=lazy");
    kv_check_result r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "autocast (lower list) ran 1x and cast 2 inputs");
    c = one_case("--op=neg --dtype=f32 --shape=3x4 --mode=autocast_f16 --check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "autocast left the op alone");
    c = one_case("--op=add_.Tensor --dtype=f32 --shape=3x4 --mode=functionalize+trace --check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "functionalize ran add_.Tensor as add.Tensor + copy_ (2 nodes)");
    assert_contains(r.message, "trace saw add.Tensor 1x");
    c = one_case("--op=add.Tensor --dtype=f32 --shape=3x4 --mode=vmap --check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "3 samples x 1 output");
    assert_contains(r.message, "vmap: the batching rule ran 1x");
    assert_int_equal(r.compared, 36);
    c = one_case("--op=native_layer_norm --dtype=f32 --shape=3x4:4:4 --args=normalized_shape=[4],eps=1e-5 --mode=vmap "
                 "--check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "loop-and-stack fallback ran 1x");
    c = one_case("--op=exp --dtype=f32 --shape=3x4 --mode=no_grad --check=lazy");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "no-grad: the Autograd kernel never ran");
}

static void test_grad_check(void **state) {
    (void)state;
    kv_case c = one_case("--op=mul.Tensor --dtype=f32 --shape=3x4 --mode=grad --check=lazy,grad");
    kv_check_result r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "autograd recorded 1 node");
    r = run_row(&c, "grad:gradcheck");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_int_equal(r.compared, 24); /* both 3x4 inputs, every element */
    r = run_row(&c, "grad:dispatch_cache");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "2 gradients");
    /* Through lazy inputs: complex elements count twice (real, imaginary). */
    c = one_case("--op=mul.Tensor --dtype=c64 --shape=2x3 --lazy=conj@0+neg@1 --mode=grad --check=grad");
    r = run_row(&c, "grad:gradcheck");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "through the lazy inputs");
    assert_int_equal(r.compared, 24);
    assert_true(kv_dispatch_cache_enabled());
}

/* ---- the lazy check fails ---- */

static void test_no_conjugate_fallback_fails(void **state) {
    (void)state;
    kv_case c = one_case("--op=mul.Tensor --dtype=c64 --shape=3x4 --fill=exact --lazy=conj@0 --check=lazy");
    kv_register_fallback(KV_KEY_CONJUGATE, NULL);
    kv_check_result r = run_row(&c, "lazy");
    kv_register_fallback(KV_KEY_CONJUGATE, kv_lazy_fallback(KV_KEY_CONJUGATE));
    assert_int_equal(r.status, KV_RESULT_FAIL);
    assert_contains(r.message, "the call failed with 'missing_kernel'");
    assert_contains(r.message, "Conjugate");
    /* Restored: it passes again. */
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
}

/* Right values, but not the fallback: every conj input is resolved with
 * kv_lazy_materialize and the op goes below the key. */
static kv_status impostor_conj_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_tensor *made[KV_STACK_MAX] = { NULL };
    kv_ivalue saved[KV_STACK_MAX];
    memcpy(saved, stack->slots, sizeof(kv_ivalue) * (size_t)stack->size);
    for (int i = 0; i < stack->size; i++) {
        kv_tensor *t = kv_arg_tensor(stack, i);
        if (t == NULL || !kv_keyset_has(t->keys, KV_KEY_CONJUGATE)) continue;
        if ((made[i] = kv_lazy_materialize(t)) == NULL) return kv_last_error();
        stack->slots[i].v.tensor = made[i];
    }
    const int n = stack->size;
    const kv_status st = kv_redispatch(op, ks & kv_keyset_below(KV_KEY_CONJUGATE), stack);
    if (st != KV_OK) memcpy(stack->slots, saved, sizeof(kv_ivalue) * (size_t)n);
    for (int i = 0; i < n; i++) kv_tensor_release(made[i]);
    return st;
}

static void test_impostor_fallback_fails(void **state) {
    (void)state;
    kv_case c = one_case("--op=mul.Tensor --dtype=c64 --shape=3x4 --fill=exact --lazy=conj@0 --check=lazy");
    kv_register_fallback(KV_KEY_CONJUGATE, impostor_conj_fallback);
    kv_check_result r = run_row(&c, "lazy");
    kv_register_fallback(KV_KEY_CONJUGATE, kv_lazy_fallback(KV_KEY_CONJUGATE));
    assert_int_equal(r.status, KV_RESULT_FAIL);
    /* The values agree; only the evidence is missing. */
    assert_contains(r.message, "lazy=conj@0: the Conjugate fallback never ran");
    assert_contains(r.message, "the values agree");
}

/* kvtest_twice(x) = 2x, a run-time op with a CPU kernel; f32 only. */
static kv_status twice_cpu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_tensor *x = kv_arg_tensor(stack, 0);
    kv_tensor *out = kv_tensor_empty(x->sizes, x->ndim, x->dtype, x->device);
    if (out == NULL) return kv_last_error();
    int64_t idx[KV_MAX_DIMS] = { 0 };
    const int64_t n = kv_tensor_numel(x);
    for (int64_t e = 0; e < n; e++) {
        kv_tensor_set_f64(out, idx, 2.0 * kv_tensor_get_f64(x, idx));
        for (int d = x->ndim - 1; d >= 0 && ++idx[d] == x->sizes[d]; d--) idx[d] = 0;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

/* Handles the Negative bit itself, right values and no fallback: 2 * x
 * = -(2 * stored), computed on the stored values. */
static kv_status twice_negative(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_tensor *raw = kv_tensor_alias(self);
    if (raw == NULL) return kv_last_error();
    raw->keys = kv_keyset_remove(raw->keys, KV_KEY_NEGATIVE);
    stack->slots[0].v.tensor = raw;
    kv_status st = kv_redispatch(op, ks & kv_keyset_below(KV_KEY_NEGATIVE), stack);
    if (st != KV_OK) stack->slots[0].v.tensor = self;
    kv_tensor_release(raw);
    if (st != KV_OK) return st;
    kv_tensor *r = stack->slots[0].v.tensor;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t e = 0; e < kv_tensor_numel(r); e++) {
        kv_tensor_set_f64(r, idx, -kv_tensor_get_f64(r, idx));
        for (int d = r->ndim - 1; d >= 0 && ++idx[d] == r->sizes[d]; d--) idx[d] = 0;
    }
    return KV_OK;
}

static void test_kernel_that_skips_the_fallback_fails(void **state) {
    (void)state;
    const kv_op *op = kv_op_find("kvtest_twice");
    if (op == NULL) {
        kv_error_clear();
        assert_int_equal(kv_op_register("kvtest_twice(Tensor self) -> Tensor", &op), KV_OK);
        assert_int_equal(kv_register_kernel("kvtest_twice", KV_KEY_CPU, twice_cpu), KV_OK);
    }
    kv_case c = one_case("--op=kvtest_twice --dtype=f32 --shape=3x4 --fill=exact --lazy=neg@0 --check=lazy");
    /* Through the Negative fallback: passes. */
    kv_check_result r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
    assert_contains(r.message, "Negative fallback ran 1x");
    /* A kernel at Negative that skips the fallback: the values are right,
     * the path is not the one the case asks for. */
    assert_int_equal(kv_register_kernel("kvtest_twice", KV_KEY_NEGATIVE, twice_negative), KV_OK);
    r = run_row(&c, "lazy");
    assert_int_equal(kv_register_kernel("kvtest_twice", KV_KEY_NEGATIVE, NULL), KV_OK);
    assert_int_equal(r.status, KV_RESULT_FAIL);
    assert_contains(r.message, "lazy=neg@0: the Negative fallback never ran, and the op's own Negative kernel neither "
                               "materialized the input nor passed the bit on");
    r = run_row(&c, "lazy");
    assert_int_equal(r.status, KV_RESULT_PASS);
}

/* A wrong value through the lazy path is a data FAIL, not only evidence. */
static kv_status sloppy_neg_fallback(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    kv_tensor *raw[KV_STACK_MAX] = { NULL };
    kv_ivalue saved[KV_STACK_MAX];
    const int n = stack->size;
    memcpy(saved, stack->slots, sizeof(kv_ivalue) * (size_t)n);
    for (int i = 0; i < n; i++) {
        kv_tensor *t = kv_arg_tensor(stack, i);
        if (t == NULL || !kv_keyset_has(t->keys, KV_KEY_NEGATIVE)) continue;
        raw[i] = kv_tensor_alias(t); /* drops the bit: computes on -x */
        raw[i]->keys = kv_keyset_remove(raw[i]->keys, KV_KEY_NEGATIVE);
        stack->slots[i].v.tensor = raw[i];
    }
    kv_status st = kv_redispatch(op, ks & kv_keyset_below(KV_KEY_NEGATIVE), stack);
    if (st != KV_OK) memcpy(stack->slots, saved, sizeof(kv_ivalue) * (size_t)n);
    for (int i = 0; i < n; i++) kv_tensor_release(raw[i]);
    return st;
}

static void test_wrong_values_fail(void **state) {
    (void)state;
    kv_case c = one_case("--op=exp --dtype=f32 --shape=3x4 --fill=exact --lazy=neg --check=lazy");
    kv_register_fallback(KV_KEY_NEGATIVE, sloppy_neg_fallback);
    kv_check_result r = run_row(&c, "lazy");
    kv_register_fallback(KV_KEY_NEGATIVE, kv_lazy_fallback(KV_KEY_NEGATIVE));
    assert_int_equal(r.status, KV_RESULT_FAIL);
    assert_contains(r.message, "differs from the expected values (bitwise)");
    assert_true(r.mismatched > 0);
}

/* ---- the suite covers the modes ---- */

static bool case_has_complex_input(const kv_case *c) {
    for (int i = 0; i < c->ninputs; i++)
        if (!c->absent[i] && kv_dtype_is_complex(c->dtypes[i])) return true;
    return false;
}

static bool any_lazy(const kv_case *c, unsigned bit) {
    for (int i = 0; i < c->ninputs; i++)
        if (c->lazy[i] & bit) return true;
    return false;
}

/* Per op, what cases/ holds: conj for every op with a passing complex
 * case, neg, zero and vmap for every op with tensor inputs and tensor
 * returns, grad for every op with an autograd formula, functionalize for
 * every in-place op, autocast for every op on an autocast list. */
static void test_suite_covers_every_op(void **state) {
    (void)state;
    kv_case_list cases = { 0 };
    kv_test_load_suite(&cases);
    int missing = 0;
    for (int k = 0; k < kv_op_count(); k++) {
        const kv_op *op = kv_op_at(k);
        const kv_schema *s = kv_op_schema(op);
        const char *name = kv_op_name(op);
        if (kv_schema_is_factory(s) || strncmp(name, "kvtest_", 7) == 0) continue;
        const bool bool_return = s->nreturns == 1 && s->returns[0].type.kind == KV_TYPE_BOOL;
        bool complex = false, conj = false, neg = false, zero = false, vmap = false, grad = false, func = false,
             cast = false;
        for (int j = 0; j < cases.n; j++) {
            const kv_case *c = &cases.items[j];
            if (strcmp(c->op, name) != 0) continue;
            complex |= c->expect == KV_OK && case_has_complex_input(c) && !kv_case_has_lazy_or_mode(c);
            conj |= any_lazy(c, KV_CASE_LAZY_CONJ);
            neg |= any_lazy(c, KV_CASE_LAZY_NEG);
            zero |= any_lazy(c, KV_CASE_LAZY_ZERO);
            vmap |= (c->modes >> KV_MODE_VMAP) & 1u;
            grad |= (c->modes >> KV_MODE_GRAD) & 1u;
            func |= (c->modes >> KV_MODE_FUNCTIONALIZE) & 1u;
            cast |= (c->modes & ((1u << KV_MODE_AUTOCAST_F16) | (1u << KV_MODE_AUTOCAST_BF16))) != 0;
        }
        const struct {
            bool needed, have;
            const char *what;
        } need[] = {
            { !bool_return && complex, conj, "lazy=conj (it takes complex inputs)" },
            { !bool_return, neg, "lazy=neg" },
            { !bool_return, zero, "lazy=zero" },
            { !bool_return, vmap, "mode=vmap" },
            { kv_autograd_has_formula(op), grad, "mode=grad (it has an autograd formula)" },
            { kv_schema_is_inplace(s), func, "mode=functionalize (it is in-place)" },
            { kv_schema_is_out(s), func, "mode=functionalize (it is an out= op)" },
            { kv_schema_is_out(s), grad, "mode=grad (it is an out= op: autograd must refuse it)" },
            { kv_autocast_policy_of(name) != KV_AUTOCAST_NONE, cast, "mode=autocast_* (it is on an autocast list)" },
        };
        for (size_t n = 0; n < sizeof need / sizeof need[0]; n++) {
            if (!need[n].needed || need[n].have) continue;
            print_message("op %s has no case with %s in cases/\n", name, need[n].what);
            missing++;
        }
    }
    kv_case_list_free(&cases);
    assert_int_equal(missing, 0);
}

int main(void) {
    if (kv_init() != KV_OK) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lazy_alternatives_and_ids),
        cmocka_unit_test(test_lazy_and_mode_errors),
        cmocka_unit_test(test_default_checks),
        cmocka_unit_test(test_lazy_check_passes),
        cmocka_unit_test(test_mode_evidence),
        cmocka_unit_test(test_grad_check),
        cmocka_unit_test(test_no_conjugate_fallback_fails),
        cmocka_unit_test(test_impostor_fallback_fails),
        cmocka_unit_test(test_kernel_that_skips_the_fallback_fails),
        cmocka_unit_test(test_wrong_values_fail),
        cmocka_unit_test(test_suite_covers_every_op),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
