/* The suite has no blind spot where sizes grow (issue 21, item 3;
 * docs/coverage.md): a mul kernel wrong only past element 4096 passed a
 * suite whose mul cases had at most 64 elements. Every op needs passing
 * cases past the sizes where real kernels change code path (above 4096
 * and above 65536 elements, one of them with a size that is no multiple
 * of 8, so every vector width leaves a tail), and the matmul ops a case
 * past each of the CPU variants' blocks. The size of a case is its
 * largest tensor input, or a factory's output. The test prints how many
 * ops it covers and fails naming what each op lacks; an empty suite
 * covers nothing and fails. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "runner/check/check.h"
#include "runner/golden/exact.h"
#include "test_util.h"

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

/* 4096 and 65536 elements: the sizes issue 21 names as where real
 * kernels change code path (one block or thread to several); 8 is the
 * narrowest vector width (AVX2 f32), so a size that is no multiple of 8
 * leaves a tail for every width. kvsuite's own threaded
 * elementwise variant starts at 2^18 elements (KV_CPU_THREAD_MIN_NUMEL,
 * kernels/cpu/cpu_ew.h): cases/sizes.case crosses it for a few ops, not
 * every op, to keep the suite cheap. The matmul blocks are cpu_matmul.c's
 * largest: rows MC512 = 240, depth KC512 = 512, columns NC = 2048. */
#define SIZE_MID 4096
#define SIZE_BIG 65536
#define TAIL_WIDTH 8
#define MM_ROWS 240
#define MM_DEPTH 512
#define MM_COLS 2048

/* A factory has no tensor input: its size is its output's, which the
 * reference gives. */
static int64_t factory_numel(const kv_case *c, const kv_op *op) {
    kv_case_inputs in;
    if (kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, &in) != KV_OK)
        fail_msg("%s: inputs: %s", c->op, kv_last_error_message());
    kv_case_outputs out = { 0 };
    const kv_status st = kv_case_invoke(op, &in, kv_keyset_of(KV_KEY_CPU), &out);
    if (st != KV_OK) fail_msg("%s: reference: %s", c->op, kv_last_error_message());
    const int64_t n = out.n > 0 && out.t[0] != NULL ? kv_tensor_numel(out.t[0]) : 0;
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&in);
    return n;
}

static void test_every_op_has_large_and_odd_cases(void **state) {
    (void)state;
    kv_case_list cases = { 0 };
    kv_test_load_suite(&cases);
    int ops = 0, covered = 0, missing = 0;
    for (int i = 0; i < kv_op_count(); i++) {
        const kv_op *op = kv_op_at(i);
        const char *name = kv_op_name(op);
        const bool factory = kv_schema_is_factory(kv_op_schema(op));
        const bool matmul = kv_exact_family_of(name) == KV_EXACT_MATMUL;
        bool mid = false, big = false, odd = false, rows = false, depth = false, cols = false, any = false;
        for (int j = 0; j < cases.n; j++) {
            const kv_case *c = &cases.items[j];
            if (strcmp(c->op, name) != 0 || c->expect != KV_OK || c->program[0] != '\0') continue;
            any = true;
            const int64_t n = factory ? factory_numel(c, op) : case_numel(c);
            mid |= n > SIZE_MID && n <= SIZE_BIG;
            big |= n > SIZE_BIG;
            odd |= n > SIZE_MID && n % TAIL_WIDTH != 0;
            if (matmul && c->ninputs >= 2) {
                const kv_shape *a = &c->shapes[c->ninputs - 2], *b = &c->shapes[c->ninputs - 1];
                if (a->ndim >= 2 && b->ndim >= 2) {
                    rows |= a->sizes[a->ndim - 2] > MM_ROWS;
                    depth |= a->sizes[a->ndim - 1] > MM_DEPTH;
                    cols |= b->sizes[b->ndim - 1] > MM_COLS;
                }
            }
        }
        if (!any) continue; /* test_case_coverage fails for it */
        ops++;
        const bool ok = mid && big && odd && (!matmul || (rows && depth && cols));
        if (ok) covered++;
        else {
            print_message("op %s lacks a passing case:%s%s%s%s%s%s\n", name,
                          mid ? "" : " with 4096 < elements <= 65536;", big ? "" : " with more than 65536 elements;",
                          odd ? "" : " above 4096 elements with no multiple of 8 as its size;",
                          !matmul || rows ? "" : " with more than 240 rows;",
                          !matmul || depth ? "" : " with depth above 512;",
                          !matmul || cols ? "" : " with more than 2048 columns;");
            missing++;
        }
    }
    print_message("size coverage: %d of %d ops have cases past 4096 and 65536 elements with a tail\n", covered, ops);
    kv_case_list_free(&cases);
    assert_true(ops > 0);
    assert_int_equal(missing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_has_large_and_odd_cases),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
