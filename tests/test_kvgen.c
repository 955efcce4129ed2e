/* kvgen's naming, type mapping, return handling and emitted text. The
 * expected strings are written out by hand from the rules in kvgen.h and
 * DESIGN.md section 3, not copied from kvgen's output. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/kvgen/kvgen.h"

static const char *const kAddTensor = "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor";
static const char *const kLayerNorm =
    "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> "
    "(Tensor, Tensor, Tensor)";
static const char *const kClampInplace = "clamp_.Tensor(Tensor(a!) self, Tensor? min=None, Tensor? max=None) -> Tensor(a!)";

/* Loads `text`, failing the test with kvgen's message if it does not load. */
static void load_ok(const char *text, kv_gen_ops *ops) {
    kv_status st = kv_gen_load_text("t.schema", text, ops);
    if (st != KV_OK) fail_msg("load failed: %s", kv_last_error_message());
}

static const kv_gen_op *find_op(const kv_gen_ops *ops, const char *full_name) {
    for (int i = 0; i < ops->n; i++)
        if (strcmp(ops->items[i]->schema.full_name, full_name) == 0) return ops->items[i];
    fail_msg("op %s not loaded", full_name);
    return NULL;
}

/* ---- names ---- */

/* An out= overload is kv_<name>_<overload> and leaves its functional
 * twin's bare name alone (adding add.out must not rename kv_add). */
static void test_cname_out_rule(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_ok("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"
            "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)\n"
            "sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False) -> Tensor\n"
            "sum.IntList_out(Tensor self, int[1]? dim, bool keepdim=False, *, Tensor(a!) out) -> Tensor(a!)\n"
            "squeeze(Tensor(a) self) -> Tensor(a)\n"
            "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)\n",
            &ops);
    assert_string_equal(find_op(&ops, "add.Tensor")->cname, "kv_add");
    assert_string_equal(find_op(&ops, "add.out")->cname, "kv_add_out");
    assert_string_equal(find_op(&ops, "sum.dim_IntList")->cname, "kv_sum");
    assert_string_equal(find_op(&ops, "sum.IntList_out")->cname, "kv_sum_IntList_out");
    /* two functional overloads still share their base name */
    assert_string_equal(find_op(&ops, "squeeze.dim")->cname, "kv_squeeze_dim");
    kv_gen_ops_free(&ops);
}

static void test_cname_rule(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_ok("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"
            "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)\n"
            "squeeze(Tensor(a) self) -> Tensor(a)\n"
            "squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)\n"
            "_softmax(Tensor self, int dim, bool half_to_float) -> Tensor\n"
            "pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor\n"
            "pow.Scalar(Scalar self, Tensor exponent) -> Tensor\n"
            "empty.memory_format(SymInt[] size, *, ScalarType? dtype=None) -> Tensor\n"
            "neg(Tensor self) -> Tensor\n"
            "stack(Tensor[] tensors, int dim=0) -> Tensor\n",
            &ops);
    /* unique base name with an overload: the overload is dropped */
    assert_string_equal(find_op(&ops, "add.Tensor")->cname, "kv_add");
    assert_string_equal(find_op(&ops, "add_.Tensor")->cname, "kv_add_");
    assert_string_equal(find_op(&ops, "empty.memory_format")->cname, "kv_empty");
    /* shared base name: the default overload keeps the bare name */
    assert_string_equal(find_op(&ops, "squeeze")->cname, "kv_squeeze");
    assert_string_equal(find_op(&ops, "squeeze.dim")->cname, "kv_squeeze_dim");
    /* shared base name, no default: every one carries its overload */
    assert_string_equal(find_op(&ops, "pow.Tensor_Scalar")->cname, "kv_pow_Tensor_Scalar");
    assert_string_equal(find_op(&ops, "pow.Scalar")->cname, "kv_pow_Scalar");
    /* leading underscore stays */
    assert_string_equal(find_op(&ops, "_softmax")->cname, "kv__softmax");
    assert_string_equal(find_op(&ops, "neg")->cname, "kv_neg");
    /* kv_stack is libkv's stack type */
    assert_string_equal(find_op(&ops, "stack")->cname, "kv_stack_op");

    assert_string_equal(find_op(&ops, "add.Tensor")->id, "KV_OP_ADD_TENSOR");
    assert_string_equal(find_op(&ops, "add_.Tensor")->id, "KV_OP_ADD__TENSOR");
    assert_string_equal(find_op(&ops, "_softmax")->id, "KV_OP__SOFTMAX");
    assert_string_equal(find_op(&ops, "empty.memory_format")->id, "KV_OP_EMPTY_MEMORY_FORMAT");
    assert_string_equal(find_op(&ops, "pow.Tensor_Scalar")->id, "KV_OP_POW_TENSOR_SCALAR");

    /* sorted by full name, byte order: '_' (0x5f) sorts before 'a' */
    const char *order[] = { "_softmax", "add.Tensor", "add_.Tensor", "empty.memory_format", "neg",
                            "pow.Scalar", "pow.Tensor_Scalar", "squeeze", "squeeze.dim", "stack" };
    assert_int_equal(ops.n, 10);
    for (int i = 0; i < 10; i++) assert_string_equal(ops.items[i]->schema.full_name, order[i]);
    kv_gen_ops_free(&ops);
}

static void test_id_and_param_names(void **state) {
    (void)state;
    char buf[KV_GEN_IDENT_MAX];
    kv_gen_id_of("sum.dim_IntList", buf, sizeof buf);
    assert_string_equal(buf, "KV_OP_SUM_DIM_INTLIST");
    kv_gen_id_of("_to_copy", buf, sizeof buf);
    assert_string_equal(buf, "KV_OP__TO_COPY");
    kv_gen_param_name("default", buf, sizeof buf);
    assert_string_equal(buf, "default_");
    kv_gen_param_name("int", buf, sizeof buf);
    assert_string_equal(buf, "int_");
    kv_gen_param_name("op", buf, sizeof buf); /* a wrapper local */
    assert_string_equal(buf, "op_");
    kv_gen_param_name("self", buf, sizeof buf);
    assert_string_equal(buf, "self");
    kv_gen_param_name("min", buf, sizeof buf);
    assert_string_equal(buf, "min");
}

static void test_param_renames_stay_unique(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_ok("f(Tensor self, int default, int default_, int st) -> (Tensor self, Tensor)\n", &ops);
    const kv_gen_op *op = find_op(&ops, "f");
    assert_string_equal(op->params[0], "self");
    assert_string_equal(op->params[1], "default_");
    assert_string_equal(op->params[2], "default__");
    assert_string_equal(op->params[3], "st_");
    assert_string_equal(op->outs[0], "self_"); /* a return may not reuse an argument's name */
    assert_string_equal(op->outs[1], "out1");
    kv_gen_ops_free(&ops);
}

/* ---- type mapping ---- */

static kv_type ty(kv_type_kind kind, bool is_list, int fixed_len, bool optional) {
    return (kv_type){ .kind = kind, .is_list = is_list, .fixed_len = fixed_len, .optional = optional };
}

static void expect_arg(kv_type t, const char *ctype, const char *push) {
    kv_gen_arg_map m = { NULL, NULL };
    assert_true(kv_gen_map_arg(t, &m));
    assert_string_equal(m.ctype, ctype);
    assert_string_equal(m.push, push);
}

static void test_arg_type_mapping(void **state) {
    (void)state;
    expect_arg(ty(KV_TYPE_TENSOR, false, 0, false), "kv_tensor *", "kv_push_tensor");
    expect_arg(ty(KV_TYPE_TENSOR, false, 0, true), "kv_tensor *", "kv_push_tensor");
    expect_arg(ty(KV_TYPE_TENSOR, true, 0, false), "kv_tensor_list", "kv_push_tensors");
    expect_arg(ty(KV_TYPE_INT, false, 0, false), "int64_t", "kv_push_int");
    expect_arg(ty(KV_TYPE_INT, false, 0, true), "const int64_t *", "kv_push_opt_int");
    expect_arg(ty(KV_TYPE_INT, true, 0, false), "kv_int_list", "kv_push_ints");
    expect_arg(ty(KV_TYPE_INT, true, 2, false), "kv_int_list", "kv_push_ints");
    expect_arg(ty(KV_TYPE_INT, true, 0, true), "const kv_int_list *", "kv_push_opt_ints");
    expect_arg(ty(KV_TYPE_INT, true, 1, true), "const kv_int_list *", "kv_push_opt_ints");
    expect_arg(ty(KV_TYPE_FLOAT, false, 0, false), "double", "kv_push_double");
    expect_arg(ty(KV_TYPE_FLOAT, false, 0, true), "const double *", "kv_push_opt_double");
    expect_arg(ty(KV_TYPE_BOOL, false, 0, false), "bool", "kv_push_bool");
    expect_arg(ty(KV_TYPE_BOOL, false, 0, true), "const bool *", "kv_push_opt_bool");
    expect_arg(ty(KV_TYPE_STR, false, 0, false), "const char *", "kv_push_str");
    expect_arg(ty(KV_TYPE_STR, false, 0, true), "const char *", "kv_push_str");
    expect_arg(ty(KV_TYPE_SCALAR, false, 0, false), "kv_scalar", "kv_push_scalar");
    expect_arg(ty(KV_TYPE_SCALAR, false, 0, true), "const kv_scalar *", "kv_push_opt_scalar");
    expect_arg(ty(KV_TYPE_SCALAR_TYPE, false, 0, false), "kv_dtype", "kv_push_dtype");
    expect_arg(ty(KV_TYPE_SCALAR_TYPE, false, 0, true), "const kv_dtype *", "kv_push_opt_dtype");
    expect_arg(ty(KV_TYPE_DEVICE, false, 0, false), "kv_device", "kv_push_device");
    expect_arg(ty(KV_TYPE_DEVICE, false, 0, true), "const kv_device *", "kv_push_opt_device");
    expect_arg(ty(KV_TYPE_LAYOUT, false, 0, false), "int64_t", "kv_push_int");
    expect_arg(ty(KV_TYPE_LAYOUT, false, 0, true), "const int64_t *", "kv_push_opt_int");
    expect_arg(ty(KV_TYPE_MEMORY_FORMAT, false, 0, false), "int64_t", "kv_push_int");
    expect_arg(ty(KV_TYPE_MEMORY_FORMAT, false, 0, true), "const int64_t *", "kv_push_opt_int");
    /* A Generator is the caller's state, passed by pointer (NULL = None). */
    expect_arg(ty(KV_TYPE_GENERATOR, false, 0, false), "kv_generator *", "kv_push_generator");
    expect_arg(ty(KV_TYPE_GENERATOR, false, 0, true), "kv_generator *", "kv_push_generator");

    kv_gen_arg_map m;
    assert_false(kv_gen_map_arg(ty(KV_TYPE_TENSOR, true, 0, true), &m)); /* Tensor[]? */
    assert_false(kv_gen_map_arg(ty(KV_TYPE_FLOAT, true, 0, false), &m)); /* float[] */
    assert_false(kv_gen_map_arg(ty(KV_TYPE_BOOL, true, 3, false), &m));  /* bool[3] */
    assert_false(kv_gen_map_arg(ty(KV_TYPE_GENERATOR, true, 0, false), &m)); /* Generator[] */

    char buf[48];
    kv_gen_type_format(ty(KV_TYPE_INT, true, 1, true), buf, sizeof buf);
    assert_string_equal(buf, "int[1]?");
    kv_gen_type_format(ty(KV_TYPE_TENSOR, true, 0, false), buf, sizeof buf);
    assert_string_equal(buf, "Tensor[]");
}

static void test_return_type_mapping(void **state) {
    (void)state;
    kv_gen_ret_map m;
    assert_true(kv_gen_map_return(ty(KV_TYPE_TENSOR, false, 0, false), &m));
    assert_string_equal(m.ctype, "kv_tensor **");
    assert_string_equal(m.tag, "KV_IV_TENSOR");
    assert_string_equal(m.member, "tensor");
    assert_true(kv_gen_map_return(ty(KV_TYPE_BOOL, false, 0, false), &m));
    assert_string_equal(m.ctype, "bool *");
    assert_string_equal(m.tag, "KV_IV_BOOL");
    assert_string_equal(m.member, "b");
    assert_true(kv_gen_map_return(ty(KV_TYPE_INT, false, 0, false), &m));
    assert_string_equal(m.ctype, "int64_t *");
    assert_string_equal(m.tag, "KV_IV_INT");
    assert_true(kv_gen_map_return(ty(KV_TYPE_FLOAT, false, 0, false), &m));
    assert_string_equal(m.ctype, "double *");
    assert_string_equal(m.member, "d");
    assert_true(kv_gen_map_return(ty(KV_TYPE_SCALAR, false, 0, false), &m));
    assert_string_equal(m.ctype, "kv_scalar *");
    assert_false(kv_gen_map_return(ty(KV_TYPE_TENSOR, true, 0, false), &m));  /* Tensor[] */
    assert_false(kv_gen_map_return(ty(KV_TYPE_TENSOR, false, 0, true), &m));  /* Tensor? */
    assert_false(kv_gen_map_return(ty(KV_TYPE_STR, false, 0, false), &m));
}

static void test_return_kinds(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_ok("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"
            "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)\n"
            "add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)\n"
            "transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)\n"
            "native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> "
            "(Tensor, Tensor, Tensor)\n"
            "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)\n"
            "is_nonzero(Tensor self) -> bool\n"
            "_nothing(Tensor self) -> ()\n"
            "_foreach_mul.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]\n",
            &ops);
    assert_int_equal(find_op(&ops, "add.Tensor")->ret_kind, KV_GEN_RET_TENSOR);
    assert_int_equal(find_op(&ops, "add_.Tensor")->ret_kind, KV_GEN_RET_ALIAS);
    assert_int_equal(find_op(&ops, "add.out")->ret_kind, KV_GEN_RET_ALIAS);
    assert_int_equal(find_op(&ops, "transpose.int")->ret_kind, KV_GEN_RET_TENSOR);

    const kv_gen_op *ln = find_op(&ops, "native_layer_norm");
    assert_int_equal(ln->ret_kind, KV_GEN_RET_OUTPARAMS);
    assert_string_equal(ln->outs[0], "out0");
    assert_string_equal(ln->outs[2], "out2");
    const kv_gen_op *mx = find_op(&ops, "max.dim");
    assert_int_equal(mx->ret_kind, KV_GEN_RET_OUTPARAMS);
    assert_string_equal(mx->outs[0], "values");
    assert_string_equal(mx->outs[1], "indices");
    const kv_gen_op *nz = find_op(&ops, "is_nonzero");
    assert_int_equal(nz->ret_kind, KV_GEN_RET_OUTPARAMS);
    assert_string_equal(nz->outs[0], "out");
    assert_int_equal(find_op(&ops, "_nothing")->ret_kind, KV_GEN_RET_OUTPARAMS);
    /* A Tensor[] return: a result array as long as the first list. */
    const kv_gen_op *fe = find_op(&ops, "_foreach_mul.Scalar");
    assert_int_equal(fe->ret_kind, KV_GEN_RET_TENSOR_LIST);
    kv_gen_buf fb;
    kv_gen_buf_init(&fb);
    kv_gen_emit_decl(fe, &fb);
    assert_non_null(strstr(kv_gen_buf_str(&fb), "kv_status kv__foreach_mul(kv_tensor_list self, kv_scalar scalar, kv_tensor **out);\n"));
    kv_gen_buf_free(&fb);
    kv_gen_buf_init(&fb);
    kv_gen_emit_wrapper(fe, &fb);
    assert_non_null(strstr(kv_gen_buf_str(&fb), "gen_list_slots(inline_slots, 2, self.n, \"_foreach_mul.Scalar\")"));
    assert_non_null(strstr(kv_gen_buf_str(&fb), "rc = gen_take_list(&st, \"_foreach_mul.Scalar\", self.n, out);"));
    kv_gen_buf_free(&fb);

    /* the signatures that follow from those kinds */
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_decl(find_op(&ops, "transpose.int"), &b);
    kv_gen_emit_decl(find_op(&ops, "add.out"), &b);
    kv_gen_emit_decl(mx, &b);
    kv_gen_emit_decl(nz, &b);
    kv_gen_emit_decl(find_op(&ops, "_nothing"), &b);
    assert_string_equal(kv_gen_buf_str(&b),
                        "/* transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a) */\n"
                        "kv_tensor *kv_transpose(kv_tensor *self, int64_t dim0, int64_t dim1);\n"
                        "/* add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!) */\n"
                        "kv_status kv_add_out(kv_tensor *self, kv_tensor *other, kv_scalar alpha, kv_tensor *out);\n"
                        "/* max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices) */\n"
                        "kv_status kv_max(kv_tensor *self, int64_t dim, bool keepdim, kv_tensor **values, "
                        "kv_tensor **indices);\n"
                        "/* is_nonzero(Tensor self) -> bool */\n"
                        "kv_status kv_is_nonzero(kv_tensor *self, bool *out);\n"
                        "/* _nothing(Tensor self) -> () */\n"
                        "kv_status kv__nothing(kv_tensor *self);\n");
    kv_gen_buf_free(&b);
    kv_gen_ops_free(&ops);
}

/* ---- exact text ---- */

static void expect_op_text(const char *schema, const char *decl, const char *wrapper) {
    kv_gen_ops ops;
    load_ok(schema, &ops);
    assert_int_equal(ops.n, 1);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_decl(ops.items[0], &b);
    assert_string_equal(kv_gen_buf_str(&b), decl);
    kv_gen_buf_free(&b);
    kv_gen_emit_wrapper(ops.items[0], &b);
    assert_string_equal(kv_gen_buf_str(&b), wrapper);
    assert_false(b.failed);
    kv_gen_buf_free(&b);
    kv_gen_ops_free(&ops);
}

static void test_text_add_tensor(void **state) {
    (void)state;
    expect_op_text(kAddTensor,
                   "/* add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor */\n"
                   "kv_tensor *kv_add(kv_tensor *self, kv_tensor *other, kv_scalar alpha);\n",
                   "kv_tensor *kv_add(kv_tensor *self, kv_tensor *other, kv_scalar alpha) {\n"
                   "    static _Atomic(const kv_op *) handle;\n"
                   "    const kv_op *op = atomic_load_explicit(&handle, memory_order_acquire);\n"
                   "    if (!op || !atomic_load_explicit(&kv_dispatch_cache_on, memory_order_relaxed))\n"
                   "        op = kv_api_op(&handle, \"add.Tensor\");\n"
                   "    if (!op) return NULL;\n"
                   "    kv_ivalue slots[3];\n"
                   "    kv_stack st = kv_stack_on(slots, 3);\n"
                   "    gen_push_tensor(&st, self);\n"
                   "    gen_push_tensor(&st, other);\n"
                   "    gen_push_scalar(&st, alpha);\n"
                   "    const bool typed = self && other && kv_device_equal(self->device, other->device) && "
                   "gen_scalar_known(alpha);\n"
                   "    if ((typed ? kv_call_typed(op, self->keys | other->keys, &st) : kv_call(op, &st)) != KV_OK) "
                   "return NULL;\n"
                   "    return gen_take_tensor(&st, \"add.Tensor\");\n"
                   "}\n");
}

static void test_text_native_layer_norm(void **state) {
    (void)state;
    expect_op_text(kLayerNorm,
                   "/* native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, "
                   "float eps) -> (Tensor, Tensor, Tensor) */\n"
                   "kv_status kv_native_layer_norm(kv_tensor *input, kv_int_list normalized_shape, "
                   "kv_tensor *weight, kv_tensor *bias, double eps, kv_tensor **out0, kv_tensor **out1, "
                   "kv_tensor **out2);\n",
                   "kv_status kv_native_layer_norm(kv_tensor *input, kv_int_list normalized_shape, "
                   "kv_tensor *weight, kv_tensor *bias, double eps, kv_tensor **out0, kv_tensor **out1, "
                   "kv_tensor **out2) {\n"
                   "    static _Atomic(const kv_op *) handle;\n"
                   "    const kv_op *op = atomic_load_explicit(&handle, memory_order_acquire);\n"
                   "    if (!op || !atomic_load_explicit(&kv_dispatch_cache_on, memory_order_relaxed))\n"
                   "        op = kv_api_op(&handle, \"native_layer_norm\");\n"
                   "    if (!op) return kv_last_error();\n"
                   "    kv_ivalue slots[5];\n"
                   "    kv_stack st = kv_stack_on(slots, 5);\n"
                   "    gen_push_tensor(&st, input);\n"
                   "    kv_push_ints(&st, normalized_shape);\n"
                   "    gen_push_tensor(&st, weight);\n"
                   "    gen_push_tensor(&st, bias);\n"
                   "    gen_push_double(&st, eps);\n"
                   "    kv_status rc = kv_call(op, &st);\n"
                   "    if (rc != KV_OK) return rc;\n"
                   "    static const kv_ivalue_tag tags[3] = { KV_IV_TENSOR, KV_IV_TENSOR, KV_IV_TENSOR };\n"
                   "    rc = gen_check_returns(&st, \"native_layer_norm\", tags, 3);\n"
                   "    if (rc != KV_OK) return rc;\n"
                   "    gen_put_tensor(out0, st.slots[0].v.tensor);\n"
                   "    gen_put_tensor(out1, st.slots[1].v.tensor);\n"
                   "    gen_put_tensor(out2, st.slots[2].v.tensor);\n"
                   "    return KV_OK;\n"
                   "}\n");
}

static void test_text_clamp_inplace(void **state) {
    (void)state;
    expect_op_text(kClampInplace,
                   "/* clamp_.Tensor(Tensor(a!) self, Tensor? min=None, Tensor? max=None) -> Tensor(a!) */\n"
                   "kv_status kv_clamp_(kv_tensor *self, kv_tensor *min, kv_tensor *max);\n",
                   "kv_status kv_clamp_(kv_tensor *self, kv_tensor *min, kv_tensor *max) {\n"
                   "    static _Atomic(const kv_op *) handle;\n"
                   "    const kv_op *op = atomic_load_explicit(&handle, memory_order_acquire);\n"
                   "    if (!op || !atomic_load_explicit(&kv_dispatch_cache_on, memory_order_relaxed))\n"
                   "        op = kv_api_op(&handle, \"clamp_.Tensor\");\n"
                   "    if (!op) return kv_last_error();\n"
                   "    kv_ivalue slots[3];\n"
                   "    kv_stack st = kv_stack_on(slots, 3);\n"
                   "    gen_push_tensor(&st, self);\n"
                   "    gen_push_tensor(&st, min);\n"
                   "    gen_push_tensor(&st, max);\n"
                   "    kv_status rc = kv_call(op, &st);\n"
                   "    if (rc != KV_OK) return rc;\n"
                   "    return gen_drop_alias(&st, \"clamp_.Tensor\");\n"
                   "}\n");
}

/* kv_call_typed only where the wrapper can vouch for its stack: plain
 * tensors and tag-checked values, each tensor non-NULL and on the first
 * one's device, Scalars checked whatever their place. */
static void test_text_typed_call(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_ok("f(int k, Scalar s, Tensor a, float x, Tensor b, bool c, Tensor d) -> Tensor\n"
            "g(Tensor a, int[] dims) -> Tensor\n"
            "h(Tensor? a) -> Tensor\n"
            "u(Tensor a, ScalarType dtype) -> Tensor\n"
            "v(int k) -> Tensor\n",
            &ops);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_wrapper(find_op(&ops, "f"), &b);
    assert_non_null(strstr(kv_gen_buf_str(&b),
                           "    const bool typed = gen_scalar_known(s) && a && b && kv_device_equal(a->device, "
                           "b->device) && d && kv_device_equal(a->device, d->device);\n"
                           "    if ((typed ? kv_call_typed(op, a->keys | b->keys | d->keys, &st) : kv_call(op, &st)) "
                           "!= KV_OK) return NULL;\n"));
    kv_gen_buf_free(&b);
    const char *untyped[] = { "g", "h", "u", "v" };
    for (size_t i = 0; i < sizeof untyped / sizeof untyped[0]; i++) {
        kv_gen_emit_wrapper(find_op(&ops, untyped[i]), &b);
        assert_null(strstr(kv_gen_buf_str(&b), "typed"));
        assert_non_null(strstr(kv_gen_buf_str(&b), "    if (kv_call(op, &st) != KV_OK) return NULL;\n"));
        kv_gen_buf_free(&b);
    }
    kv_gen_ops_free(&ops);
}

static void test_text_stack_sized_for_returns(void **state) {
    (void)state;
    /* one argument, two returns: the stack must hold the returns */
    kv_gen_ops ops;
    load_ok("f(Tensor self) -> (Tensor, bool)\ng() -> Tensor\n", &ops);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_wrapper(find_op(&ops, "f"), &b);
    assert_non_null(strstr(kv_gen_buf_str(&b), "    kv_ivalue slots[2];\n"));
    assert_non_null(strstr(kv_gen_buf_str(&b), "    if (out1) *out1 = st.slots[1].v.b;\n"));
    kv_gen_buf_free(&b);
    kv_gen_emit_decl(find_op(&ops, "g"), &b);
    assert_string_equal(kv_gen_buf_str(&b), "/* g() -> Tensor */\nkv_tensor *kv_g(void);\n");
    kv_gen_buf_free(&b);
    kv_gen_emit_wrapper(find_op(&ops, "g"), &b);
    assert_non_null(strstr(kv_gen_buf_str(&b), "    kv_ivalue slots[1];\n"));
    kv_gen_buf_free(&b);
    kv_gen_ops_free(&ops);
}

static void test_tables_text(void **state) {
    (void)state;
    kv_gen_ops ops;
    load_ok("  neg(Tensor self) -> Tensor   \r\n"
            "# a comment\n"
            "\n"
            "f(Tensor self, str s=\"q\\\\\") -> Tensor\n",
            &ops);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    assert_int_equal(kv_gen_emit(&ops, KV_GEN_FILE_OPS_TABLE_C, &b), KV_OK);
    assert_string_equal(kv_gen_buf_str(&b),
                        "/* generated by kvgen from t.schema; do not edit. */\n"
                        "#include \"kv/op_ids.h\"\n"
                        "\n"
                        "const char *const kv_op_schemas[KV_OP_COUNT] = {\n"
                        "    [KV_OP_F] = \"f(Tensor self, str s=\\\"q\\\\\\\\\\\") -> Tensor\",\n"
                        "    [KV_OP_NEG] = \"neg(Tensor self) -> Tensor\",\n"
                        "};\n"
                        "\n"
                        "const char *const kv_op_names[KV_OP_COUNT] = {\n"
                        "    [KV_OP_F] = \"f\",\n"
                        "    [KV_OP_NEG] = \"neg\",\n"
                        "};\n");
    kv_gen_buf_free(&b);
    assert_int_equal(kv_gen_emit(&ops, KV_GEN_FILE_OP_IDS_H, &b), KV_OK);
    const char *ids = kv_gen_buf_str(&b);
    assert_non_null(strstr(ids, "generated by kvgen from t.schema; do not edit"));
    assert_non_null(strstr(ids, "typedef enum kv_op_id {\n    KV_OP_F,\n    KV_OP_NEG,\n    KV_OP_COUNT\n} kv_op_id;\n"));
    assert_non_null(strstr(ids, "extern const char *const kv_op_schemas[KV_OP_COUNT];\n"));
    assert_non_null(strstr(ids, "extern const char *const kv_op_names[KV_OP_COUNT];\n"));
    kv_gen_buf_free(&b);
    assert_int_equal(kv_gen_emit(&ops, KV_GEN_FILE_OPS_H, &b), KV_OK);
    assert_non_null(strstr(kv_gen_buf_str(&b), "generated by kvgen from t.schema; do not edit"));
    assert_non_null(strstr(kv_gen_buf_str(&b), "/* neg(Tensor self) -> Tensor */\nkv_tensor *kv_neg(kv_tensor *self);\n"));
    kv_gen_buf_free(&b);
    assert_int_equal(kv_gen_emit(&ops, KV_GEN_FILE_OPS_API_C, &b), KV_OK);
    const char *api = kv_gen_buf_str(&b);
    assert_non_null(strstr(api, "#include \"kv/dispatch.h\"\n#include \"kv/init.h\"\n#include \"kv/tensor.h\"\n#include \"kv/ops.h\"\n"));
    /* only helpers some wrapper calls: no in-place or tuple op here */
    assert_non_null(strstr(api, "static inline kv_tensor *gen_take_tensor("));
    assert_null(strstr(api, "gen_drop_alias"));
    assert_null(strstr(api, "gen_put_tensor"));
    kv_gen_buf_free(&b);
    kv_gen_ops_free(&ops);
}

static void test_escapes_in_generated_text(void **state) {
    (void)state;
    /* a string default holding a comment end and a trigraph start */
    kv_gen_ops ops;
    load_ok("f(Tensor self, str s='*/?\?/') -> Tensor\n", &ops); /* the escape keeps a trigraph out of this source */
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_emit_decl(ops.items[0], &b);
    assert_string_equal(kv_gen_buf_str(&b),
                        "/* f(Tensor self, str s='* /? ?/') -> Tensor */\n"
                        "kv_tensor *kv_f(kv_tensor *self, const char *s);\n");
    kv_gen_buf_free(&b);
    assert_int_equal(kv_gen_emit(&ops, KV_GEN_FILE_OPS_TABLE_C, &b), KV_OK);
    assert_non_null(strstr(kv_gen_buf_str(&b), "    [KV_OP_F] = \"f(Tensor self, str s='*/?\\?/') -> Tensor\",\n"));
    kv_gen_buf_free(&b);
    kv_gen_ops_free(&ops);
}

/* ---- determinism ---- */

static char *emit_all(const char *text) {
    kv_gen_ops ops;
    load_ok(text, &ops);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    for (int f = 0; f < KV_GEN_FILE_COUNT; f++) assert_int_equal(kv_gen_emit(&ops, (kv_gen_file)f, &b), KV_OK);
    kv_gen_ops_free(&ops);
    char *s = strdup(kv_gen_buf_str(&b));
    kv_gen_buf_free(&b);
    return s;
}

static void test_deterministic(void **state) {
    (void)state;
    const char *forward = "neg(Tensor self) -> Tensor\n"
                          "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n"
                          "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)\n"
                          "_softmax(Tensor self, int dim, bool half_to_float) -> Tensor\n";
    const char *shuffled = "_softmax(Tensor self, int dim, bool half_to_float) -> Tensor\n"
                           "add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)\n"
                           "neg(Tensor self) -> Tensor\n"
                           "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor\n";
    char *a = emit_all(forward), *b = emit_all(forward), *c = emit_all(shuffled);
    assert_string_equal(a, b);
    assert_string_equal(a, c); /* the file order does not leak into the output */
    /* sorted: _softmax, add.Tensor, add_.Tensor, neg */
    const char *p1 = strstr(a, "KV_OP__SOFTMAX,"), *p2 = strstr(a, "KV_OP_ADD_TENSOR,");
    const char *p3 = strstr(a, "KV_OP_ADD__TENSOR,"), *p4 = strstr(a, "KV_OP_NEG,");
    assert_true(p1 && p2 && p3 && p4);
    assert_true(p1 < p2 && p2 < p3 && p3 < p4);
    free(a);
    free(b);
    free(c);
}

/* ---- errors ---- */

static void expect_load_error(const char *text, kv_status code, const char *message) {
    kv_gen_ops ops;
    assert_int_equal(kv_gen_load_text("t.schema", text, &ops), code);
    assert_string_equal(kv_last_error_message(), message);
    kv_gen_ops_free(&ops);
}

static void test_cname_clash(void **state) {
    (void)state;
    expect_load_error("squeeze_dim(Tensor self) -> Tensor\n"
                      "squeeze(Tensor self) -> Tensor\n"
                      "squeeze.dim(Tensor self, int dim) -> Tensor\n",
                      KV_ERR_SCHEMA, "t.schema:3:1: C name kv_squeeze_dim of 'squeeze.dim' clashes with 'squeeze_dim' (line 1)");
    expect_load_error("a.b(Tensor self) -> Tensor\n"
                      "# a_b gets kv_a_b, a.b gets kv_a: only the ids clash\n"
                      "  a_b(Tensor self) -> Tensor\n",
                      KV_ERR_SCHEMA, "t.schema:3:3: op id KV_OP_A_B of 'a_b' clashes with 'a.b' (line 1)");
}

static void test_other_errors(void **state) {
    (void)state;
    expect_load_error("neg(Tensor self) -> Tensor\nabs(Tensor self) -> Tensor\nneg(Tensor x) -> Tensor\n",
                      KV_ERR_SCHEMA, "t.schema:3:1: duplicate op 'neg' (first defined at line 1)");
    /* the column is the parser's, shifted by the line's indentation */
    expect_load_error("neg(Tensor self) -> Tensor\n\n    add(Tensor self Tensor other) -> Tensor\n", KV_ERR_SCHEMA,
                      "t.schema:3:21: expected ',' or ')'");
    expect_load_error("f(Tensor self) -> Tensor[]\n", KV_ERR_SCHEMA,
                      "t.schema:1:1: f: return 0: type Tensor[] cannot be returned by the typed API");
    expect_load_error("# only a comment\n\n", KV_ERR_SCHEMA,
                      "t.schema:1:1: no ops (the generated tables would be empty)");

    kv_gen_ops ops;
    assert_int_equal(kv_gen_load_file("/nonexistent/ops.schema", &ops), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(), "/nonexistent/ops.schema: cannot open: No such file or directory");
    kv_gen_ops_free(&ops);
}

/* ---- writing ---- */

static void test_write_if_changed(void **state) {
    (void)state;
    char dir[] = "/tmp/kvgen_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/kv/x.h", dir);
    kv_gen_buf b;
    kv_gen_buf_init(&b);
    kv_gen_buf_puts(&b, "one\n");
    bool written = false;
    assert_int_equal(kv_gen_write_if_changed(path, &b, &written), KV_OK);
    assert_true(written); /* new file, parent folder created */
    assert_int_equal(kv_gen_write_if_changed(path, &b, &written), KV_OK);
    assert_false(written); /* same text: left alone */
    kv_gen_buf_puts(&b, "two\n");
    assert_int_equal(kv_gen_write_if_changed(path, &b, &written), KV_OK);
    assert_true(written);
    char got[64] = "";
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    assert_string_equal(got, "one\ntwo\n");
    /* a shorter text is a change too */
    kv_gen_buf_free(&b);
    kv_gen_buf_puts(&b, "one\n");
    assert_int_equal(kv_gen_write_if_changed(path, &b, &written), KV_OK);
    assert_true(written);
    kv_gen_buf_free(&b);
    unlink(path);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/kv", dir);
    rmdir(sub);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cname_out_rule),
        cmocka_unit_test(test_cname_rule),
        cmocka_unit_test(test_id_and_param_names),
        cmocka_unit_test(test_param_renames_stay_unique),
        cmocka_unit_test(test_arg_type_mapping),
        cmocka_unit_test(test_return_type_mapping),
        cmocka_unit_test(test_return_kinds),
        cmocka_unit_test(test_text_add_tensor),
        cmocka_unit_test(test_text_native_layer_norm),
        cmocka_unit_test(test_text_clamp_inplace),
        cmocka_unit_test(test_text_typed_call),
        cmocka_unit_test(test_text_stack_sized_for_returns),
        cmocka_unit_test(test_tables_text),
        cmocka_unit_test(test_escapes_in_generated_text),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_cname_clash),
        cmocka_unit_test(test_other_errors),
        cmocka_unit_test(test_write_if_changed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
