/* Helpers several test programs share: tensor makers, element checks,
 * fixtures and case builders. Static inline, so a test that includes this
 * links only what it calls (a function it does not use is never emitted,
 * and brings in no runner or backend symbol).
 *
 * Include after cmocka.h's prerequisites, as every test does. */
#ifndef KV_TEST_UTIL_H
#define KV_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/backend.h"
#include "kv/kv.h"
#include "runner/case/case.h"
#include "runner/case/expand.h"
#include "runner/exec/driver.h"

/* ---- fixtures ---- */

/* A group setup that initializes kvsuite, saying why when it cannot. */
static inline int kv_test_setup_init(void **state) {
    (void)state;
    if (kv_init() != KV_OK) {
        print_error("kv_init failed: %s\n", kv_last_error_message());
        return -1;
    }
    return 0;
}

/* ---- results that must succeed ---- */

/* t, or a failure naming the expression `what` and the error. */
static inline kv_tensor *kv_test_ok_tensor(kv_tensor *t, const char *what) {
    if (!t) fail_msg("%s failed: %s", what, kv_last_error_message());
    return t;
}
/* A tensor-returning call that must succeed; a kv_status that must be OK. */
#define KV_TEST_OK(expr) kv_test_ok_tensor((expr), #expr)
#define KV_TEST_OKS(expr)                                                                \
    do {                                                                                 \
        kv_status st_ = (expr);                                                          \
        if (st_ != KV_OK) fail_msg("%s failed: %s", #expr, kv_last_error_message());     \
    } while (0)

/* ---- tensor makers ---- */

/* A contiguous f32 CPU tensor of `sizes` holding vals (at most 64, written
 * as doubles so expected values read the same in every test). */
static inline kv_tensor *kv_test_f32_of(kv_int_list sizes, const double *vals, int n) {
    float v[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++) v[i] = (float)vals[i];
    kv_tensor *t = kv_tensor_from_data(v, sizes.items, sizes.n, KV_F32);
    assert_non_null(t);
    return t;
}

/* A contiguous i32 CPU tensor of `sizes` holding vals. */
static inline kv_tensor *kv_test_i32_of(kv_int_list sizes, const int32_t *vals) {
    kv_tensor *t = kv_tensor_from_data(vals, sizes.items, sizes.n, KV_I32);
    assert_non_null(t);
    return t;
}

/* ---- test kernels ---- */

/* A boxed CPU kernel computing x * x through kv_mul: an op with no
 * autograd formula of its own for tests to register. */
static inline kv_status kv_test_kernel_square(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    kv_tensor *x = kv_arg_tensor(stack, 0);
    kv_tensor *y = kv_mul(x, x);
    if (y == NULL) return kv_last_error();
    kv_stack_return_tensor(stack, y);
    return KV_OK;
}

/* ---- element checks ---- */

/* Steps idx to t's next logical element in row-major order; false (idx
 * back at all zeros) after the last. */
static inline bool kv_test_next_index(const kv_tensor *t, int64_t *idx) {
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (++idx[d] < t->sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* t (on any device: read through kv_backend_readable) equals want within
 * tol, element by element in row-major order. */
static inline void kv_test_expect_values_on(const kv_tensor *t, const double *want, int64_t n, double tol) {
    assert_non_null(t);
    kv_tensor *h = kv_backend_readable(t);
    assert_non_null(h);
    assert_int_equal(kv_tensor_numel(h), n);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        const double got = kv_tensor_get_f64(h, idx);
        if (fabs(got - want[i]) > tol) fail_msg("element %lld: got %.17g, want %.17g", (long long)i, got, want[i]);
        kv_test_next_index(h, idx);
    }
    kv_tensor_release(h);
}

/* ---- files ---- */

/* The whole contents of a tmpfile written by the code under test (the
 * caller frees). */
static inline char *kv_test_slurp_stream(FILE *f) {
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *b = calloc((size_t)n + 1, 1);
    assert_non_null(b);
    if (n > 0) assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    return b;
}

/* Runs bin with args (NULL-terminated; argv[0] added, at most 30 more) in
 * a child, its stdout and stderr captured into *out and *err (the caller
 * frees both). Returns the waitpid status. The caller checks first that
 * bin exists, with a hint of where it comes from. */
static inline int kv_test_run_captured(const char *bin, const char *const *args, char **out, char **err) {
    const char *argv[32];
    int n = 0;
    argv[n++] = bin;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    FILE *fo = tmpfile(), *fe = tmpfile();
    assert_non_null(fo);
    assert_non_null(fe);
    /* Nothing buffered may be written twice, by the child as well. */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fileno(fo), 1);
        dup2(fileno(fe), 2);
        execv(bin, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    /* The child wrote through a shared offset: read up to where it ended. */
    fseek(fo, 0, SEEK_END);
    fseek(fe, 0, SEEK_END);
    *out = kv_test_slurp_stream(fo);
    *err = kv_test_slurp_stream(fe);
    fclose(fo);
    fclose(fe);
    return status;
}

/* ---- cases ---- */

/* A case of `op` whose first n tensor inputs (schema order) get dtype dt
 * and shapes[0..n). */
static inline kv_case kv_test_case_of(const char *op, kv_dtype dt, int n, const kv_shape *shapes) {
    kv_case c;
    kv_case_init(&c);
    strcpy(c.op, op);
    const kv_op *o = kv_op_find(op);
    assert_non_null(o);
    const kv_schema *s = kv_op_schema(o);
    int k = 0;
    for (int a = 0; a < s->nargs && k < n; a++) {
        if (s->args[a].type.kind != KV_TYPE_TENSOR) continue;
        c.input_arg[k] = a;
        c.dtypes[k] = dt;
        c.shapes[k] = shapes[k];
        k++;
    }
    c.ninputs = k;
    return c;
}

/* Every case of the suite: each case file under cases/ (the accel twins of
 * cases/accel.case included), read as kvrun reads them, appended to
 * `cases`; a file that does not load fails the test naming it. */
static inline void kv_test_load_suite(kv_case_list *cases) {
    kv_path_list files = { 0 };
    assert_int_equal(kv_driver_collect("cases", &files), KV_OK);
    assert_true(files.n > 0);
    for (int i = 0; i < files.n; i++) {
        const kv_status st = kv_cases_from_file(files.items[i], cases);
        if (st != KV_OK) fail_msg("%s: %s", files.items[i], kv_last_error_message());
    }
    kv_path_list_free(&files);
}

/* Adds the non-tensor argument name=value (as a case file spells it). */
static inline void kv_test_case_add_arg(kv_case *c, const char *name, const char *value) {
    strcpy(c->args[c->nargs].name, name);
    strcpy(c->args[c->nargs].value, value);
    c->nargs++;
}

#endif
