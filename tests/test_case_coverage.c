/* The suite covers every op: each op of kernels/ops.schema has at least one
 * case in cases/ that must pass and, where the op can raise an error on
 * bad input, the suite as a whole is checked by the runner itself. This
 * test fails naming the op when an op has no case at all, so adding an op
 * without cases cannot go unnoticed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "test_util.h"

static void test_every_op_has_a_passing_case(void **state) {
    (void)state;
    kv_case_list cases = { 0 };
    kv_test_load_suite(&cases);
    assert_true(cases.n > 0);
    int missing = 0;
    for (int i = 0; i < kv_op_count(); i++) {
        const char *name = kv_op_name(kv_op_at(i));
        bool passing = false;
        for (int j = 0; j < cases.n && !passing; j++)
            passing = strcmp(cases.items[j].op, name) == 0 && cases.items[j].expect == KV_OK;
        if (!passing) {
            print_message("op %s has no case in cases/ that is expected to pass\n", name);
            missing++;
        }
    }
    kv_case_list_free(&cases);
    assert_int_equal(missing, 0);
}

/* A non-contiguous input appears for every op that takes a tensor, except
 * as_strided: it addresses storage directly, ignoring its input's strides,
 * so its result depends on the layout by definition. */
static void test_every_tensor_op_has_a_non_contiguous_case(void **state) {
    (void)state;
    kv_case_list cases = { 0 };
    kv_test_load_suite(&cases);
    int missing = 0;
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        if (kv_schema_is_factory(kv_op_schema(op)) || strcmp(kv_op_name(op), "as_strided") == 0) continue;
        bool strided = false;
        for (int j = 0; j < cases.n && !strided; j++) {
            const kv_case *c = &cases.items[j];
            if (strcmp(c->op, kv_op_name(op)) != 0) continue;
            for (int k = 0; k < c->ninputs; k++) strided |= c->layouts[k] != KV_LAYOUT_CONTIGUOUS;
        }
        if (!strided) {
            print_message("op %s has no case with a non-contiguous input\n", kv_op_name(op));
            missing++;
        }
    }
    kv_case_list_free(&cases);
    assert_int_equal(missing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_has_a_passing_case),
        cmocka_unit_test(test_every_tensor_op_has_a_non_contiguous_case),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
