/* Every op of kernels/ops.schema is registered and has a CPU reference
 * kernel, nothing else is registered, and the generated typed wrappers
 * link and run. Reads the schema at run time (tests run from the repo
 * root), so an op added to the file without a kernel fails here even if
 * the generated code was not rebuilt. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/op_ids.h"

#define SCHEMA_PATH "kernels/ops.schema"
#define MAX_OPS 512

typedef struct schema_ops {
    char names[MAX_OPS][2 * KV_SCHEMA_NAME_MAX];
    int n;
} schema_ops;

/* The full names of the schema file, taken as the text before '(' of
 * each non-comment line: deliberately not through kv_schema_parse, so a
 * parser bug cannot hide an op from this test. */
static schema_ops *read_schema_ops(void) {
    FILE *f = fopen(SCHEMA_PATH, "r");
    if (!f) fail_msg("cannot open %s (run the tests from the repository root)", SCHEMA_PATH);
    schema_ops *ops = calloc(1, sizeof *ops);
    assert_non_null(ops);
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || *p == '\r' || *p == '\0') continue;
        char *paren = strchr(p, '(');
        if (!paren) fail_msg("%s:%d: no '(' in schema line", SCHEMA_PATH, lineno);
        char *end = paren;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t')) end--;
        size_t len = (size_t)(end - p);
        if (len == 0 || len >= sizeof ops->names[0]) fail_msg("%s:%d: bad op name", SCHEMA_PATH, lineno);
        if (ops->n == MAX_OPS) fail_msg("%s: more than %d ops", SCHEMA_PATH, MAX_OPS);
        memcpy(ops->names[ops->n], p, len);
        ops->names[ops->n][len] = '\0';
        ops->n++;
    }
    fclose(f);
    if (ops->n == 0) fail_msg("%s: no ops", SCHEMA_PATH);
    return ops;
}

static int setup(void **state) {
    if (kv_init() != KV_OK) {
        print_error("kv_init failed: %s\n", kv_last_error_message());
        return -1;
    }
    *state = read_schema_ops();
    return 0;
}

static int teardown(void **state) {
    free(*state);
    return 0;
}

static void test_every_schema_op_has_cpu_kernel(void **state) {
    const schema_ops *ops = *state;
    int bad = 0;
    for (int i = 0; i < ops->n; i++) {
        const kv_op *op = kv_op_find(ops->names[i]);
        if (!op) {
            print_error("%s: not registered (%s)\n", ops->names[i], kv_last_error_message());
            bad++;
            continue;
        }
        kv_entry_kind kind = kv_op_entry_kind(op, KV_KEY_CPU);
        if (kind != KV_ENTRY_KERNEL) {
            print_error("%s: no CPU kernel (entry kind %d)\n", ops->names[i], (int)kind);
            bad++;
        }
    }
    if (bad) fail_msg("%d of %d ops lack a registration or a CPU kernel (listed above)", bad, ops->n);
}

static void test_registry_matches_schema(void **state) {
    const schema_ops *ops = *state;
    int bad = 0;
    /* an op registered but absent from the schema */
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        assert_non_null(op);
        bool listed = false;
        for (int j = 0; j < ops->n && !listed; j++) listed = strcmp(kv_op_name(op), ops->names[j]) == 0;
        if (!listed) {
            print_error("%s: registered but not in %s\n", kv_op_name(op), SCHEMA_PATH);
            bad++;
        }
    }
    if (bad) fail_msg("%d registered ops are not in the schema (listed above)", bad);
    assert_int_equal(kv_op_count(), ops->n);
}

static void test_generated_ids_match_schema(void **state) {
    const schema_ops *ops = *state;
    /* A stale build/gen (kvgen not rerun after an edit) shows up here. */
    assert_int_equal(KV_OP_COUNT, ops->n);
    for (int id = 0; id < KV_OP_COUNT; id++) {
        bool listed = false;
        for (int j = 0; j < ops->n && !listed; j++) listed = strcmp(kv_op_names[id], ops->names[j]) == 0;
        if (!listed) fail_msg("kv_op_names[%d] = %s is not in %s", id, kv_op_names[id], SCHEMA_PATH);
        assert_non_null(kv_op_find(kv_op_names[id]));
    }
}

static kv_tensor *f32_vector(const float *v, int64_t n) {
    kv_tensor *t = kv_tensor_from_data(v, &n, 1, KV_F32);
    if (!t) fail_msg("kv_tensor_from_data: %s", kv_last_error_message());
    return t;
}

static void expect_values(const kv_tensor *t, const double *want, int64_t n) {
    assert_non_null(t);
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->sizes[0], n);
    for (int64_t i = 0; i < n; i++) assert_true(kv_tensor_get_f64(t, &i) == want[i]);
}

static void test_typed_wrappers_resolve_and_run(void **state) {
    (void)state;
    /* Names from the C name rule; a missing one is a link error. */
    void (*const wrappers[])(void) = {
        (void (*)(void))kv_add,         (void (*)(void))kv_add_,          (void (*)(void))kv_squeeze,
        (void (*)(void))kv_squeeze_dim, (void (*)(void))kv__softmax,      (void (*)(void))kv_empty,
        (void (*)(void))kv_stack_op,    (void (*)(void))kv_native_layer_norm, (void (*)(void))kv_neg,
    };
    for (size_t i = 0; i < sizeof wrappers / sizeof wrappers[0]; i++) assert_non_null(wrappers[i]);

    const float a_data[3] = { 1.0f, -2.0f, 0.5f };
    const float b_data[3] = { 4.0f, 8.0f, -1.0f };
    kv_tensor *a = f32_vector(a_data, 3);
    kv_tensor *b = f32_vector(b_data, 3);

    kv_tensor *n = kv_neg(a);
    if (!n) fail_msg("kv_neg: %s", kv_last_error_message());
    expect_values(n, (const double[]){ -1.0, 2.0, -0.5 }, 3);

    kv_tensor *s = kv_add(a, b, kv_scalar_int(2)); /* a + 2*b */
    if (!s) fail_msg("kv_add: %s", kv_last_error_message());
    expect_values(s, (const double[]){ 9.0, 14.0, -1.5 }, 3);

    /* in place: returns a status and writes the caller's tensor */
    assert_int_equal(kv_add_(a, b, kv_scalar_int(1)), KV_OK);
    expect_values(a, (const double[]){ 5.0, 6.0, -0.5 }, 3);

    /* errors come back as NULL plus the thread-local error */
    const float c_data[2] = { 1.0f, 2.0f };
    kv_tensor *c = f32_vector(c_data, 2);
    kv_error_clear();
    assert_null(kv_add(a, c, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);

    kv_tensor_release(c);
    kv_tensor_release(s);
    kv_tensor_release(n);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_schema_op_has_cpu_kernel),
        cmocka_unit_test(test_registry_matches_schema),
        cmocka_unit_test(test_generated_ids_match_schema),
        cmocka_unit_test(test_typed_wrappers_resolve_and_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
