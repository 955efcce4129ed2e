/* runner/case_args.h: the args= values of a case, one schema type at a
 * time: the spellings each type accepts, their canonical text (what case
 * IDs show), the stack value, schema defaults as text, and the reason and
 * position of every rejection. Expected values come from the header's
 * table, written out here by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/schema.h"
#include "runner/case/case_args.h"

/* One argument of every type the grammar handles (a schema holds at most
 * KV_SCHEMA_MAX_ARGS), and arguments with defaults. */
static const char *const k_types =
    "f(Tensor self, int i, int[] il, int[2] i2, int[1] i1, float fl, bool b, Scalar s, ScalarType dt, str st, "
    "Device dev, Layout lay, MemoryFormat mf, int? oi, str? ost, Generator? gen) -> Tensor";
static const char *const k_defaults =
    "g(Tensor self, int i, float eps=1e-05, bool keep=True, int[2] k=[1,2], str mode=\"none\", "
    "ScalarType? odt=None, MemoryFormat mf2=contiguous_format) -> Tensor";

static kv_schema g_s, g_d;

static const kv_arg *arg(const char *name) {
    int i = kv_schema_arg_index(&g_s, name);
    if (i >= 0) return &g_s.args[i];
    i = kv_schema_arg_index(&g_d, name);
    if (i < 0) fail_msg("no argument '%s' in the test schemas", name);
    return &g_d.args[i];
}

/* text must be accepted with canonical text `want`. */
static void accepts(const char *name, const char *text, const char *want) {
    char out[128], why[256] = "";
    int bad_at = -7;
    if (kv_case_arg_canonical(arg(name), text, out, (int)sizeof out, why, (int)sizeof why, &bad_at) != 0)
        fail_msg("%s=%s rejected: %s", name, text, why);
    if (strcmp(out, want) != 0) fail_msg("%s=%s: canonical '%s', expected '%s'", name, text, out, want);
    /* The canonical text is a fixed point. */
    char again[128];
    assert_int_equal(kv_case_arg_canonical(arg(name), out, again, (int)sizeof again, why, (int)sizeof why, &bad_at), 0);
    assert_string_equal(again, out);
}

/* text must be rejected with `reason` in the message, at byte `at`. */
static void rejects(const char *name, const char *text, const char *reason, int at) {
    char out[128], why[256] = "";
    int bad_at = -7;
    if (kv_case_arg_canonical(arg(name), text, out, (int)sizeof out, why, (int)sizeof why, &bad_at) == 0)
        fail_msg("%s=%s accepted as '%s'", name, text, out);
    if (strstr(why, reason) == NULL) fail_msg("%s=%s: reason '%s' lacks '%s'", name, text, why, reason);
    if (at >= 0 && bad_at != at) fail_msg("%s=%s: problem at byte %d, expected %d", name, text, bad_at, at);
}

static void test_ints(void **state) {
    (void)state;
    accepts("i", "-1", "-1");
    accepts("i", "007", "7");
    accepts("i", "9223372036854775807", "9223372036854775807");
    rejects("i", "1.5", "int", -1);
    rejects("i", "", "int", -1);
    rejects("i", "99999999999999999999", "int", -1);
    accepts("il", "[0,1]", "[0,1]");
    accepts("il", "[]", "[]");
    accepts("il", "[-3]", "[-3]");
    /* int[N]: a bare int is N copies; int[1] prints as a bare int. */
    accepts("i2", "3", "[3,3]");
    accepts("i2", "[1,2]", "[1,2]");
    accepts("i1", "[5]", "5");
    accepts("i1", "5", "5");
    rejects("il", "[0,x]", "expected an int, got 'x'", 3);
    rejects("il", "[0,1", "", -1);
}

static void test_floats_bools_scalars(void **state) {
    (void)state;
    accepts("fl", "0.5", "0.5");
    accepts("fl", "1e-05", "1e-05");
    accepts("fl", "0.1", "0.1"); /* shortest text that reads back exactly */
    accepts("fl", "-2", "-2");
    accepts("fl", "nan", "nan");
    accepts("fl", "inf", "inf");
    rejects("fl", "abc", "", -1);
    accepts("b", "true", "1");
    accepts("b", "false", "0");
    accepts("b", "1", "1");
    accepts("b", "0", "0");
    rejects("b", "yes", "", -1);
    accepts("s", "2", "2");
    accepts("s", "2.5", "2.5");
    rejects("s", "two", "", -1);
}

static void test_named_types(void **state) {
    (void)state;
    accepts("dt", "f64", "f64");
    accepts("dt", "bf16", "bf16");
    rejects("dt", "float128", "expected a dtype (f32, i64, ...), got 'float128'", 0);
    accepts("st", "tanh", "tanh");
    rejects("st", "a b", "a str may not contain", 0);
    rejects("st", "a|b", "a str may not contain", 0);
    accepts("dev", "cpu", "cpu");
    accepts("dev", "cuda:1", "cuda:1");
    accepts("dev", "cuda:0", "cuda"); /* index 0 left out */
    rejects("dev", "tpu", "expected a device (cpu, sim, accel, cuda:1), got 'tpu'", 0);
    accepts("lay", "strided", "strided");
    accepts("lay", "0", "strided");
    accepts("lay", "3", "3");
    rejects("lay", "sparse", "expected a layout (strided), got 'sparse'", 0);
    accepts("mf", "channels_last", "channels_last");
    accepts("mf", "channels_last_3d", "channels_last_3d");
    accepts("mf", "1", "preserve_format");
    accepts("mf", "9", "9");
    rejects("mf", "nchw", "expected a memory format", 0);
}

static void test_none(void **state) {
    (void)state;
    /* None only for optional arguments; a plain str "none" is a string. */
    accepts("oi", "none", "none");
    accepts("ost", "none", "none");
    accepts("st", "none", "none");
    rejects("i", "none", "", -1);
}

/* Generator: none, SEED or SEED:OFFSET (decimal uint64s); the canonical
 * text drops a zero offset. */
static void test_generator(void **state) {
    (void)state;
    accepts("gen", "none", "none");
    accepts("gen", "7", "7");
    accepts("gen", "7:0", "7");
    accepts("gen", "007:12", "7:12");
    accepts("gen", "18446744073709551615:18446744073709551615", "18446744073709551615:18446744073709551615");
    rejects("gen", "-1", "expected a generator", -1);
    rejects("gen", "7:", "expected a generator", -1);
    rejects("gen", "18446744073709551616", "expected a generator", -1);
    rejects("gen", "x", "expected a generator", -1);
    kv_ivalue v;
    kv_generator g = { 0, 0 };
    int64_t ints[KV_CASE_ARG_MAX_INTS];
    assert_int_equal(kv_case_arg_ivalue(arg("gen"), "5:9", &v, ints, KV_CASE_ARG_MAX_INTS, &g), KV_OK);
    assert_int_equal(v.tag, KV_IV_GENERATOR);
    assert_ptr_equal(v.v.gen, &g);
    assert_int_equal(g.seed, 5);
    assert_int_equal(g.offset, 9);
    /* No storage for the state is an error, not a crash. */
    assert_int_equal(kv_case_arg_ivalue(arg("gen"), "5", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_case_arg_ivalue(arg("gen"), "none", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_NONE);
}

static void test_stack_values(void **state) {
    (void)state;
    kv_ivalue v;
    int64_t ints[KV_CASE_ARG_MAX_INTS];
    assert_int_equal(kv_case_arg_ivalue(arg("il"), "[4,-2]", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_INT_LIST);
    assert_int_equal(v.v.ints.n, 2);
    assert_int_equal(v.v.ints.items[0], 4);
    assert_int_equal(v.v.ints.items[1], -2);
    assert_int_equal(kv_case_arg_ivalue(arg("i"), "-3", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_INT);
    assert_int_equal(v.v.i, -3);
    assert_int_equal(kv_case_arg_ivalue(arg("fl"), "0.5", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_DOUBLE);
    assert_true(v.v.d == 0.5);
    assert_int_equal(kv_case_arg_ivalue(arg("b"), "1", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_BOOL);
    assert_true(v.v.b);
    assert_int_equal(kv_case_arg_ivalue(arg("dt"), "f64", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_DTYPE);
    assert_int_equal(v.v.dtype, KV_F64);
    const char *text = "tanh";
    assert_int_equal(kv_case_arg_ivalue(arg("st"), text, &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_STR);
    assert_string_equal(v.v.str, "tanh");
    assert_int_equal(kv_case_arg_ivalue(arg("dev"), "cuda:1", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_DEVICE);
    assert_int_equal(v.v.device.type, KV_DEVICE_CUDA);
    assert_int_equal(v.v.device.index, 1);
    /* Layouts and memory formats are ints, c10's numbering. */
    assert_int_equal(kv_case_arg_ivalue(arg("mf"), "channels_last", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_INT);
    assert_int_equal(v.v.i, 2);
    assert_int_equal(kv_case_arg_ivalue(arg("lay"), "strided", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_INT);
    assert_int_equal(v.v.i, 0);
    assert_int_equal(kv_case_arg_ivalue(arg("oi"), "none", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_NONE);
    assert_int_equal(kv_case_arg_ivalue(arg("s"), "2.5", &v, ints, KV_CASE_ARG_MAX_INTS, NULL), KV_OK);
    assert_int_equal(v.tag, KV_IV_SCALAR);
    assert_true(kv_scalar_to_double(v.v.scalar) == 2.5);
}

static void test_default_text(void **state) {
    (void)state;
    char out[64];
    assert_true(kv_case_arg_default_text(arg("eps"), out, (int)sizeof out) >= 0);
    assert_string_equal(out, "1e-05");
    assert_true(kv_case_arg_default_text(arg("keep"), out, (int)sizeof out) >= 0);
    assert_string_equal(out, "1");
    assert_true(kv_case_arg_default_text(arg("k"), out, (int)sizeof out) >= 0);
    assert_string_equal(out, "[1,2]");
    assert_true(kv_case_arg_default_text(arg("mode"), out, (int)sizeof out) >= 0);
    assert_string_equal(out, "none");
    assert_true(kv_case_arg_default_text(arg("odt"), out, (int)sizeof out) >= 0);
    assert_string_equal(out, "none");
    assert_true(kv_case_arg_default_text(arg("mf2"), out, (int)sizeof out) >= 0);
    assert_string_equal(out, "contiguous_format");
    /* No default: -1. */
    assert_int_equal(kv_case_arg_default_text(arg("i"), out, (int)sizeof out), -1);
}

static int setup(void **state) {
    (void)state;
    if (kv_schema_parse(k_types, &g_s) != KV_OK || kv_schema_parse(k_defaults, &g_d) != KV_OK) {
        fprintf(stderr, "test schema: %s\n", kv_last_error_message());
        return -1;
    }
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ints),
        cmocka_unit_test(test_floats_bools_scalars),
        cmocka_unit_test(test_named_types),
        cmocka_unit_test(test_none),
        cmocka_unit_test(test_stack_values),
        cmocka_unit_test(test_generator),
        cmocka_unit_test(test_default_text),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
