/* kvgen's accel part: kernels/accel.conf parsing, kind detection, the
 * text of generated boxing kernels, determinism, and that every op of
 * kernels/ops.schema is boxed. The expected kernel texts are written out
 * by hand from the sequence in src/boxing/boxing_internal.h. Runs from the
 * repository root (tests/run_tests.sh does). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "tools/kvgen/kvgen.h"

static const char *const kSchema =
    "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"
    "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)\n"
    "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)\n"
    "cat(Tensor[] tensors, int dim=0) -> Tensor\n"
    "stack(Tensor[] tensors, int dim=0) -> Tensor\n"
    "clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor\n"
    "clamp_.Tensor(Tensor(a!) self, Tensor? min=None, Tensor? max=None) -> Tensor(a!)\n"
    "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> "
    "(Tensor, Tensor, Tensor)\n"
    "zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? "
    "pin_memory=None) -> Tensor\n"
    "is_neg(Tensor self) -> bool\n"
    "view(Tensor(a) self, SymInt[] size) -> Tensor(a)\n"
    "neg(Tensor self) -> Tensor\n"
    "bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor\n"
    "_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()\n"
    "_foreach_mul.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]\n";

static void load_schema(kv_gen_ops *ops) {
    if (kv_gen_load_text("t.schema", kSchema, ops) != KV_OK) fail_msg("schema: %s", kv_last_error_message());
}

static void load_conf_ok(const kv_gen_ops *ops, const char *text, kv_gen_accel *conf) {
    if (kv_gen_accel_load_text("t.conf", text, ops, conf) != KV_OK) fail_msg("conf: %s", kv_last_error_message());
}

static const kv_gen_op *op_named(const kv_gen_ops *ops, const char *name) {
    for (int i = 0; i < ops->n; i++)
        if (strcmp(ops->items[i]->schema.full_name, name) == 0) return ops->items[i];
    fail_msg("no op %s", name);
    return NULL;
}

/* ---- parsing ---- */

static void test_conf_parses(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    kv_gen_accel conf;
    load_conf_ok(&ops,
                 "# a comment\n"
                 "\n"
                 "neg default   # trailing comment\n"
                 "\tzeros\tsim\n"
                 "add.Tensor cpu\r\n"
                 "   # indented comment\n"
                 "cat cuda",
                 &conf);
    assert_int_equal(conf.n, 4);
    /* sorted by full name */
    assert_string_equal(conf.items[0].op->schema.full_name, "add.Tensor");
    assert_int_equal(conf.items[0].target, KV_GEN_ACCEL_CPU);
    assert_int_equal(conf.items[0].line, 5);
    assert_string_equal(conf.items[1].op->schema.full_name, "cat");
    assert_int_equal(conf.items[1].target, KV_GEN_ACCEL_CUDA);
    assert_string_equal(conf.items[2].op->schema.full_name, "neg");
    assert_int_equal(conf.items[2].target, KV_GEN_ACCEL_DEFAULT);
    assert_int_equal(conf.items[2].line, 3);
    assert_string_equal(conf.items[3].op->schema.full_name, "zeros");
    assert_int_equal(conf.items[3].target, KV_GEN_ACCEL_SIM);
    kv_gen_accel_free(&conf);

    load_conf_ok(&ops, "", &conf);
    assert_int_equal(conf.n, 0);
    kv_gen_accel_free(&conf);
    kv_gen_ops_free(&ops);
}

static void expect_conf_error(const kv_gen_ops *ops, const char *text, const char *message) {
    kv_gen_accel conf;
    kv_status st = kv_gen_accel_load_text("t.conf", text, ops, &conf);
    kv_gen_accel_free(&conf);
    if (st != KV_ERR_SCHEMA) fail_msg("'%s': expected KV_ERR_SCHEMA, got %d", text, (int)st);
    assert_string_equal(kv_last_error_message(), message);
}

static void test_conf_errors(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    expect_conf_error(&ops, "add.Tensor default\nnope cpu\n", "t.conf:2:1: unknown op 'nope' (not in t.schema)");
    expect_conf_error(&ops, "neg default\n\n  view default\n",
                      "t.conf:3:3: op 'view' is hand-registered by src/boxing (boxing/hand_ops.h); it cannot be "
                      "listed here");
    expect_conf_error(&ops, "add.Tensor cpu\n# again:\nadd.Tensor sim\n",
                      "t.conf:3:1: duplicate op 'add.Tensor' (first listed at line 1)");
    expect_conf_error(&ops, "add.Tensor\n",
                      "t.conf:1:11: op 'add.Tensor': expected a target (cpu, sim, cuda or default)");
    expect_conf_error(&ops, "add.Tensor   # no target\n",
                      "t.conf:1:14: op 'add.Tensor': expected a target (cpu, sim, cuda or default)");
    expect_conf_error(&ops, "neg cpu\n add.Tensor gpu\n",
                      "t.conf:2:13: op 'add.Tensor': unknown target 'gpu' (expected cpu, sim, cuda or default)");
    expect_conf_error(&ops, "add.Tensor cpu extra\n", "t.conf:1:16: op 'add.Tensor': unexpected 'extra' after the target");
    expect_conf_error(&ops, "add default\n", "t.conf:1:1: unknown op 'add' (not in t.schema)");
    kv_gen_ops_free(&ops);
}

static void test_hand_registered_list(void **state) {
    (void)state;
    const char *hand[] = { "_to_copy", "_unsafe_view", "as_strided", "detach", "expand", "permute", "select.int",
                           "slice.Tensor", "squeeze", "squeeze.dim", "transpose.int", "unfold", "unsqueeze", "view" };
    for (size_t i = 0; i < sizeof hand / sizeof hand[0]; i++) assert_true(kv_gen_accel_is_hand_registered(hand[i]));
    assert_false(kv_gen_accel_is_hand_registered("reshape"));
    assert_false(kv_gen_accel_is_hand_registered("t"));
    assert_false(kv_gen_accel_is_hand_registered("cat"));
    assert_false(kv_gen_accel_is_hand_registered("view.dtype"));
}

/* ---- kinds ---- */

static void test_kind_detection(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    static const struct {
        const char *op;
        kv_gen_accel_kind kind;
        const char *name;
    } cases[] = {
        { "add.Tensor", KV_GEN_ACCEL_FUNCTIONAL, "functional" },
        { "neg", KV_GEN_ACCEL_FUNCTIONAL, "functional" },
        { "is_neg", KV_GEN_ACCEL_FUNCTIONAL, "functional" },
        { "add_.Tensor", KV_GEN_ACCEL_INPLACE, "in-place" },
        { "clamp_.Tensor", KV_GEN_ACCEL_INPLACE, "in-place" }, /* in-place wins over optional */
        { "add.out", KV_GEN_ACCEL_OUT, "out=" },
        { "cat", KV_GEN_ACCEL_TENSOR_LIST, "tensor-list" },
        { "stack", KV_GEN_ACCEL_TENSOR_LIST, "tensor-list" },
        { "clamp.Tensor", KV_GEN_ACCEL_OPTIONAL_TENSOR, "optional-tensor" },
        { "native_layer_norm", KV_GEN_ACCEL_OPTIONAL_TENSOR, "optional-tensor" },
        { "zeros", KV_GEN_ACCEL_FACTORY, "factory" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kv_gen_accel_kind k = kv_gen_accel_kind_of(&op_named(&ops, cases[i].op)->schema);
        if (k != cases[i].kind) fail_msg("%s: kind %s, expected %s", cases[i].op, kv_gen_accel_kind_name(k), cases[i].name);
        assert_string_equal(kv_gen_accel_kind_name(k), cases[i].name);
    }
    char name[KV_GEN_IDENT_MAX];
    kv_gen_accel_kernel_name(op_named(&ops, "add_.Tensor"), name, sizeof name);
    assert_string_equal(name, "accel_add__tensor");
    kv_gen_ops_free(&ops);
}

/* ---- generated text ---- */

static void expect_kernel(const kv_gen_ops *ops, const char *op, kv_gen_accel_target target, const char *text) {
    kv_gen_accel_entry e = { op_named(ops, op), target, 1 };
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_accel_kernel(&e, &b);
    assert_false(b.failed);
    assert_string_equal(kv_gen_buf_str(&b), text);
    kv_gen_buf_free(&b);
}

static void test_generated_functional(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    expect_kernel(&ops, "add.Tensor", KV_GEN_ACCEL_DEFAULT,
                  "/* add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"
                  " * kind: functional; target: default */\n"
                  "static const kv_accel_lean_plan lean_accel_add_tensor = { KV_OP_ADD_TENSOR, KV_ACCEL_TARGET_DEFAULT, 3, 2, { 0, 1 }, 1, { -1 } };\n"
                  "static kv_status accel_add_tensor(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_status lean;\n"
                  "    if (kv_accel_lean(&lean_accel_add_tensor, op, stack, &lean)) return lean;\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP_ADD_TENSOR);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_tensor(&b, 0); /* self */\n"
                  "    st = kv_accel_box_tensor(&b, 1); /* other */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_ADD_TENSOR, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_ADD_TENSOR, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_tensor(&b, 0);\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    expect_kernel(&ops, "is_neg", KV_GEN_ACCEL_DEFAULT,
                  "/* is_neg(Tensor self) -> bool\n"
                  " * kind: functional; target: default */\n"
                  "static const kv_accel_lean_plan lean_accel_is_neg = { KV_OP_IS_NEG, KV_ACCEL_TARGET_DEFAULT, 1, 1, { 0 }, 1, { -1 } };\n"
                  "static kv_status accel_is_neg(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_status lean;\n"
                  "    if (kv_accel_lean(&lean_accel_is_neg, op, stack, &lean)) return lean;\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP_IS_NEG);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_tensor(&b, 0); /* self */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_IS_NEG, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_IS_NEG, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_value(&b, 0);\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    kv_gen_ops_free(&ops);
}

/* A Generator argument gets no boxing step: the kernel's stack slot (the
 * caller's generator) reaches the target untouched on every path (lean,
 * fast, slow), so all advance the same state. */
static void test_generated_generator_passes_through(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    assert_int_equal(kv_gen_accel_kind_of(&op_named(&ops, "bernoulli.p")->schema), KV_GEN_ACCEL_FUNCTIONAL);
    expect_kernel(&ops, "bernoulli.p", KV_GEN_ACCEL_DEFAULT,
                  "/* bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor\n"
                  " * kind: functional; target: default */\n"
                  "static const kv_accel_lean_plan lean_accel_bernoulli_p = { KV_OP_BERNOULLI_P, KV_ACCEL_TARGET_DEFAULT, 3, 1, { 0 }, 1, { -1 } };\n"
                  "static kv_status accel_bernoulli_p(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_status lean;\n"
                  "    if (kv_accel_lean(&lean_accel_bernoulli_p, op, stack, &lean)) return lean;\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP_BERNOULLI_P);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_tensor(&b, 0); /* self */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_BERNOULLI_P, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_BERNOULLI_P, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_tensor(&b, 0);\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    kv_gen_ops_free(&ops);
}

static void test_generated_inplace_and_out(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    expect_kernel(&ops, "clamp_.Tensor", KV_GEN_ACCEL_CPU,
                  "/* clamp_.Tensor(Tensor(a!) self, Tensor? min=None, Tensor? max=None) -> Tensor(a!)\n"
                  " * kind: in-place; target: cpu */\n"
                  "static kv_status accel_clamp__tensor(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_KEY_CPU)) return "
                  "kv_accel_box_below(&b, KV_OP_CLAMP__TENSOR);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_mutable(&b, 0); /* self */\n"
                  "    st = kv_accel_box_optional(&b, 1); /* min */\n"
                  "    st = kv_accel_box_optional(&b, 2); /* max */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_CLAMP__TENSOR, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_CLAMP__TENSOR, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_alias(&b, 0, 0); /* the caller's self */\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    /* out= takes no lean path: only kv_accel_unbox_out gives the caller's
     * out the shape the target resized its stand-in to. */
    expect_kernel(&ops, "add.out", KV_GEN_ACCEL_DEFAULT,
                  "/* add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)\n"
                  " * kind: out=; target: default */\n"
                  "static kv_status accel_add_out(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP_ADD_OUT);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_tensor(&b, 0); /* self */\n"
                  "    st = kv_accel_box_tensor(&b, 1); /* other */\n"
                  "    st = kv_accel_box_mutable(&b, 3); /* out */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_ADD_OUT, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_ADD_OUT, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_out(&b, 0, 3); /* the caller's out */\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    kv_gen_ops_free(&ops);
}

static void test_generated_list_and_factory(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    expect_kernel(&ops, "cat", KV_GEN_ACCEL_DEFAULT,
                  "/* cat(Tensor[] tensors, int dim=0) -> Tensor\n"
                  " * kind: tensor-list; target: default */\n"
                  "static kv_status accel_cat(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP_CAT);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_cat_list(&b, 0); /* tensors */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_CAT, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_CAT, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_tensor(&b, 0);\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    /* foreach: a mutable list is boxed element by element as mutable
     * arguments, a Tensor[] return unboxed element by element; the
     * in-place op returns nothing. */
    expect_kernel(&ops, "_foreach_add_.List", KV_GEN_ACCEL_DEFAULT,
                  "/* _foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()\n"
                  " * kind: tensor-list; target: default */\n"
                  "static kv_status accel__foreach_add__list(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP__FOREACH_ADD__LIST);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_mutable_list(&b, 0); /* self */\n"
                  "    st = kv_accel_box_list(&b, 1); /* other */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP__FOREACH_ADD__LIST, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP__FOREACH_ADD__LIST, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    expect_kernel(&ops, "_foreach_mul.Scalar", KV_GEN_ACCEL_DEFAULT,
                  "/* _foreach_mul.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]\n"
                  " * kind: tensor-list; target: default */\n"
                  "static kv_status accel__foreach_mul_scalar(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_ACCEL_TARGET_DEFAULT)) return "
                  "kv_accel_box_below(&b, KV_OP__FOREACH_MUL_SCALAR);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_list(&b, 0); /* self */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP__FOREACH_MUL_SCALAR, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP__FOREACH_MUL_SCALAR, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_list(&b, 0); /* one return per element */\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    expect_kernel(&ops, "zeros", KV_GEN_ACCEL_SIM,
                  "/* zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
                  "bool? pin_memory=None) -> Tensor\n"
                  " * kind: factory; target: sim */\n"
                  "static kv_status accel_zeros(const kv_op *op, kv_keyset ks, kv_stack *stack) {\n"
                  "    kv_accel_box b;\n"
                  "    if (!kv_accel_box_begin(&b, op, ks, stack, KV_KEY_SIM)) return kv_accel_box_below(&b, "
                  "KV_OP_ZEROS);\n"
                  "    kv_status st = KV_OK;\n"
                  "    st = kv_accel_box_device(&b, 3); /* device */\n"
                  "    if (st == KV_OK && kv_accel_gate_allows(&b)) {\n"
                  "        kv_accel_count(KV_OP_ZEROS, KV_ACCEL_PATH_FAST);\n"
                  "        st = kv_accel_box_fast(&b);\n"
                  "    } else if (st == KV_OK) {\n"
                  "        kv_accel_count(KV_OP_ZEROS, KV_ACCEL_PATH_SLOW);\n"
                  "        st = kv_accel_box_slow(&b);\n"
                  "    }\n"
                  "    st = kv_accel_unbox_tensor(&b, 0);\n"
                  "    return kv_accel_box_end(&b, st);\n"
                  "}\n");
    kv_gen_ops_free(&ops);
}

/* ---- the whole file ---- */

static char *emit_file(const kv_gen_ops *ops, const char *conf_text) {
    kv_gen_accel conf;
    load_conf_ok(ops, conf_text, &conf);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_accel_boxing(ops, &conf, &b);
    assert_false(b.failed);
    char *copy = strdup(kv_gen_buf_str(&b));
    kv_gen_buf_free(&b);
    kv_gen_accel_free(&conf);
    assert_non_null(copy);
    return copy;
}

static void test_file_layout_and_determinism(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_schema(&ops);
    const char *conf1 = "zeros default\nneg default\nadd_.Tensor default\ncat default\nadd.Tensor default\n";
    const char *conf2 = "# same ops, another order\nadd.Tensor default\ncat default\n\nadd_.Tensor default\n"
                        "neg default\nzeros default\n";
    char *a = emit_file(&ops, conf1), *again = emit_file(&ops, conf1), *b = emit_file(&ops, conf2);
    assert_string_equal(a, again);
    /* Only the banner names the source; the rest must not depend on order. */
    assert_string_equal(a, b);
    /* Kinds in order, names sorted within a kind. */
    const char *order[] = { "/* ---- functional ---- */", "accel_add_tensor(", "accel_neg(", "/* ---- in-place ---- */",
                            "accel_add__tensor(", "/* ---- tensor-list ---- */", "accel_cat(",
                            "/* ---- factory ---- */", "accel_zeros(", "/* ---- registration ---- */" };
    const char *at = a;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *p = strstr(at, order[i]);
        if (p == NULL) fail_msg("'%s' missing or out of order", order[i]);
        at = p;
    }
    assert_null(strstr(a, "/* ---- out= ---- */")); /* empty kinds get no header */
    const char *table = "    } kernels[] = {\n"
                        "        { \"add.Tensor\", accel_add_tensor },\n"
                        "        { \"add_.Tensor\", accel_add__tensor },\n"
                        "        { \"cat\", accel_cat },\n"
                        "        { \"neg\", accel_neg },\n"
                        "        { \"zeros\", accel_zeros },\n"
                        "    };\n";
    assert_non_null(strstr(a, table));
    assert_non_null(strstr(a, "kv_register_kernel(kernels[i].name, KV_KEY_ACCEL_BOXING, kernels[i].fn)"));
    free(a);
    free(again);
    free(b);

    char *empty = emit_file(&ops, "# nothing\n");
    assert_non_null(strstr(empty, "kv_status kv_accel_register_generated(void) {\n    return KV_OK;"));
    free(empty);
    kv_gen_ops_free(&ops);
}

/* ---- the real files ---- */

static void test_every_op_is_boxed(void **state) {
    (void)state;
    kv_gen_ops ops;
    if (kv_gen_load_file("kernels/ops.schema", &ops) != KV_OK) fail_msg("%s", kv_last_error_message());
    kv_gen_accel conf;
    if (kv_gen_accel_load_file("kernels/accel.conf", &ops, &conf) != KV_OK) fail_msg("%s", kv_last_error_message());
    int missing = 0;
    for (int i = 0; i < ops.n; i++) {
        const char *name = ops.items[i]->schema.full_name;
        bool listed = false;
        for (int j = 0; j < conf.n && !listed; j++) listed = conf.items[j].op == ops.items[i];
        if (!listed && !kv_gen_accel_is_hand_registered(name)) {
            print_error("op '%s' of kernels/ops.schema is neither in kernels/accel.conf nor hand-registered\n", name);
            missing++;
        }
    }
    assert_int_equal(missing, 0);
    kv_gen_accel_free(&conf);
    kv_gen_ops_free(&ops);

    /* And at run time every op has a boxing kernel (generated or by hand)
     * and the dense-key kernel. */
    assert_int_equal(kv_init(), KV_OK);
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (kv_op_builtin_id(op) < 0) continue;
        if (kv_op_entry_kind(op, KV_KEY_ACCEL_BOXING) != KV_ENTRY_KERNEL)
            fail_msg("op '%s' has no AccelBoxing kernel", kv_op_name(op));
        if (kv_op_entry_kind(op, KV_KEY_ACCEL) != KV_ENTRY_KERNEL)
            fail_msg("op '%s' has no Accel kernel", kv_op_name(op));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conf_parses),
        cmocka_unit_test(test_conf_errors),
        cmocka_unit_test(test_hand_registered_list),
        cmocka_unit_test(test_kind_detection),
        cmocka_unit_test(test_generated_generator_passes_through),
        cmocka_unit_test(test_generated_functional),
        cmocka_unit_test(test_generated_inplace_and_out),
        cmocka_unit_test(test_generated_list_and_factory),
        cmocka_unit_test(test_file_layout_and_determinism),
        cmocka_unit_test(test_every_op_is_boxed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
