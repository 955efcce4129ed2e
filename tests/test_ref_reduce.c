/* Reference reductions, matmul, softmax and normalization against
 * hand-computed values: kernels/ref/ref_reduce.c, ref_matmul.c,
 * ref_softmax.c, ref_norm.c. Ops are called through the generated typed API
 * (the full dispatcher; one test uses kv_call_by_name); only the device
 * check calls kernels directly, since a non-CPU tensor would never be
 * dispatched to a CPU kernel. Every test also checks that it left no CPU
 * storage alive. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "kv/kv.h"
#include "ref/ref_kernels.h"

/* ---- helpers ---- */

static int64_t live_at_start;

static int setup(void **state) {
    (void)state;
    kv_error_clear();
    /* These test the reference kernels themselves: perf_dispatch must run
     * "ref", not whichever optimized CPU variant it would pick. */
    kv_tune_reference_mode_set(true);
    live_at_start = kv_allocator_stats_of(KV_DEVICE_CPU).live_count;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    /* An error path that forgets to release its outputs shows up here. */
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, live_at_start);
    return 0;
}

/* A contiguous tensor of dtype dt holding vals (which must be exact in dt). */
static kv_tensor *mk(kv_dtype dt, const int64_t *sizes, int nd, const double *vals) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= sizes[d];
    unsigned char buf[16 * 64];
    assert_true(n * (int64_t)kv_dtype_size(dt) <= (int64_t)sizeof buf);
    for (int64_t i = 0; i < n; i++) {
        void *p = buf + i * (int64_t)kv_dtype_size(dt);
        const double v = vals[i];
        switch (dt) {
        case KV_BOOL: *(uint8_t *)p = v != 0.0; break;
        case KV_U8: *(uint8_t *)p = (uint8_t)v; break;
        case KV_I8: *(int8_t *)p = (int8_t)v; break;
        case KV_I16: *(int16_t *)p = (int16_t)v; break;
        case KV_I32: *(int32_t *)p = (int32_t)v; break;
        case KV_I64: *(int64_t *)p = (int64_t)v; break;
        case KV_F16: *(kv_f16 *)p = kv_f32_to_f16((float)v); break;
        case KV_BF16: *(kv_bf16 *)p = kv_f32_to_bf16((float)v); break;
        case KV_F32: *(float *)p = (float)v; break;
        case KV_F64: *(double *)p = v; break;
        case KV_C64: ((float *)p)[0] = (float)v; ((float *)p)[1] = 0.0f; break;
        case KV_C128: ((double *)p)[0] = v; ((double *)p)[1] = 0.0; break;
        case KV_DTYPE_COUNT: fail(); break;
        }
    }
    kv_tensor *t = kv_tensor_from_data(buf, sizes, nd, dt);
    assert_non_null(t);
    return t;
}

#define SZ(...) ((const int64_t[]){ __VA_ARGS__ })
#define VALS(...) ((const double[]){ __VA_ARGS__ })
#define MK(dt, sizes, nd, ...) mk(dt, SZ sizes, nd, VALS(__VA_ARGS__))

/* The transpose of a 2-D tensor, as a view. */
static kv_tensor *tview(kv_tensor *t) {
    const int64_t sizes[2] = { t->sizes[1], t->sizes[0] };
    const int64_t strides[2] = { t->strides[1], t->strides[0] };
    kv_tensor *v = kv_tensor_view(t, sizes, strides, 2, t->offset);
    assert_non_null(v);
    return v;
}

/* Element lin of a contiguous result, as a double (complex: real part). */
static double at(const kv_tensor *t, int64_t lin) {
    assert_true(kv_tensor_is_contiguous(t));
    const char *p = (const char *)kv_tensor_data(t) + lin * (int64_t)kv_dtype_size(t->dtype);
    switch (t->dtype) {
    case KV_BOOL: return *(const uint8_t *)p;
    case KV_U8: return *(const uint8_t *)p;
    case KV_I8: return *(const int8_t *)p;
    case KV_I16: return *(const int16_t *)p;
    case KV_I32: return *(const int32_t *)p;
    case KV_I64: return (double)*(const int64_t *)p;
    case KV_F16: return kv_f16_to_f32(*(const kv_f16 *)p);
    case KV_BF16: return kv_bf16_to_f32(*(const kv_bf16 *)p);
    case KV_F32: return *(const float *)p;
    case KV_F64: return *(const double *)p;
    case KV_C64: return ((const float *)p)[0];
    case KV_C128: return ((const double *)p)[0];
    case KV_DTYPE_COUNT: break;
    }
    fail();
    return 0.0;
}

static int64_t at_i64(const kv_tensor *t, int64_t lin) {
    assert_int_equal(t->dtype, KV_I64);
    return ((const int64_t *)kv_tensor_data(t))[lin];
}

static void expect_shape(const kv_tensor *t, kv_dtype dt, const int64_t *sizes, int nd) {
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->ndim, nd);
    for (int d = 0; d < nd; d++) assert_int_equal(t->sizes[d], sizes[d]);
    assert_true(kv_tensor_is_contiguous(t));
    assert_int_equal(t->device.type, KV_DEVICE_CPU);
}

static void expect_vals(const kv_tensor *t, const double *want, int64_t n, double tol) {
    assert_int_equal(kv_tensor_numel(t), n);
    for (int64_t i = 0; i < n; i++) {
        const double got = at(t, i);
        if (isnan(want[i])) {
            if (!isnan(got)) fail_msg("element %lld: got %.17g, want NaN", (long long)i, got);
        } else if (!(fabs(got - want[i]) <= tol)) {
            fail_msg("element %lld: got %.17g, want %.17g", (long long)i, got, want[i]);
        }
    }
}
#define EXPECT(t, tol, ...) \
    expect_vals(t, VALS(__VA_ARGS__), (int64_t)(sizeof(VALS(__VA_ARGS__)) / sizeof(double)), tol)

static void expect_error(kv_status st, kv_status want, const char *op, const char *needle) {
    assert_int_equal(st, want);
    assert_int_equal(kv_last_error(), want);
    const char *msg = kv_last_error_message();
    if (!strstr(msg, op)) fail_msg("message does not name '%s': %s", op, msg);
    if (needle && !strstr(msg, needle)) fail_msg("message lacks '%s': %s", needle, msg);
}

/* ---- calls through the typed API (build/gen/kv/ops.h) ---- */

/* A NULL result must come with an error; the status is what tests check. */
static kv_status got(kv_tensor *r, kv_tensor **out) {
    *out = r;
    if (r) return KV_OK;
    assert_int_not_equal(kv_last_error(), KV_OK);
    return kv_last_error();
}

/* ndims < 0 passes None; 0 passes []. */
#define NODIMS NULL, -1

static kv_status call_sum(kv_tensor *x, const int64_t *dims, int ndims, bool keepdim, const kv_dtype *dtype,
                          kv_tensor **out) {
    const kv_int_list l = { dims, ndims };
    return got(kv_sum(x, ndims < 0 ? NULL : &l, keepdim, dtype), out);
}

static kv_status call_mean(kv_tensor *x, const int64_t *dims, int ndims, bool keepdim, const kv_dtype *dtype,
                           kv_tensor **out) {
    const kv_int_list l = { dims, ndims };
    return got(kv_mean(x, ndims < 0 ? NULL : &l, keepdim, dtype), out);
}

static kv_status call_amax(kv_tensor *x, const int64_t *dims, int ndims, bool keepdim, kv_tensor **out) {
    return got(kv_amax(x, (kv_int_list){ dims, ndims }, keepdim), out);
}

static kv_status call_argmax(kv_tensor *x, const int64_t *dim, bool keepdim, kv_tensor **out) {
    return got(kv_argmax(x, dim, keepdim), out);
}

static kv_status call_prod(kv_tensor *x, int64_t dim, bool keepdim, const kv_dtype *dtype, kv_tensor **out) {
    return got(kv_prod(x, dim, keepdim, dtype), out);
}

static kv_status call_mm(const char *name, kv_tensor *a, kv_tensor *b, kv_tensor **out) {
    return got(strcmp(name, "bmm") == 0 ? kv_bmm(a, b) : kv_mm(a, b), out);
}

static kv_status call_addmm(kv_tensor *self, kv_tensor *a, kv_tensor *b, kv_scalar beta, kv_scalar alpha,
                            kv_tensor **out) {
    return got(kv_addmm(self, a, b, beta, alpha), out);
}

static kv_status call_softmax(const char *name, kv_tensor *x, int64_t dim, bool half_to_float, kv_tensor **out) {
    return got(strcmp(name, "_log_softmax") == 0 ? kv__log_softmax(x, dim, half_to_float)
                                                 : kv__softmax(x, dim, half_to_float),
               out);
}

static kv_status call_layer_norm(kv_tensor *x, const int64_t *shape, int n, kv_tensor *w, kv_tensor *b, double eps,
                                 kv_tensor **outs) {
    return kv_native_layer_norm(x, (kv_int_list){ shape, n }, w, b, eps, &outs[0], &outs[1], &outs[2]);
}

static kv_status call_group_norm(kv_tensor *x, kv_tensor *w, kv_tensor *b, int64_t N, int64_t C, int64_t HxW,
                                 int64_t group, double eps, kv_tensor **outs) {
    return kv_native_group_norm(x, w, b, N, C, HxW, group, eps, &outs[0], &outs[1], &outs[2]);
}

/* One op through the boxed entry point too: same kernel, same result. */
static void test_boxed_call(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 2), 2, 1, 2, 3, 4);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    const int64_t d = 0;
    kv_push_tensor(&s, x);
    kv_push_ints(&s, (kv_int_list){ &d, 1 });
    kv_push_bool(&s, false);
    kv_push_none(&s);
    assert_int_equal(kv_call_by_name("sum.dim_IntList", &s), KV_OK);
    assert_int_equal(s.size, 1);
    assert_int_equal(s.slots[0].tag, KV_IV_TENSOR);
    EXPECT(s.slots[0].v.tensor, 0, 4, 6);
    kv_stack_clear_returns(&s);
    kv_tensor_release(x);
}

static void release3(kv_tensor **t) {
    for (int i = 0; i < 3; i++) kv_tensor_release(t[i]);
}

static const kv_dtype DT_F32 = KV_F32, DT_F64 = KV_F64, DT_I32 = KV_I32, DT_I64 = KV_I64;

/* ---- sum ---- */

static void test_sum_all_dims(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 3), 2, 1, 2, 3, 4, 5, 6), *r;
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F32, NULL, 0);
    EXPECT(r, 0, 21);
    kv_tensor_release(r);
    /* [] means every dim as well; keepdim keeps them as size 1. */
    assert_int_equal(call_sum(x, SZ(0), 0, true, NULL, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(1, 1), 2);
    EXPECT(r, 0, 21);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_sum_transposed_keepdim(void **state) {
    (void)state;
    kv_tensor *base = MK(KV_F64, (2, 3), 2, 1, 2, 3, 4, 5, 6);
    kv_tensor *x = tview(base), *r; /* [[1,4],[2,5],[3,6]] */
    assert_int_equal(call_sum(x, SZ(1), 1, true, NULL, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(3, 1), 2);
    EXPECT(r, 0, 5, 7, 9);
    kv_tensor_release(r);
    assert_int_equal(call_sum(x, SZ(-2), 1, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(2), 1);
    EXPECT(r, 0, 6, 15);
    kv_tensor_release(r);
    kv_tensor_release(x);
    kv_tensor_release(base);
}

static void test_sum_two_dims_of_three(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_I64, (2, 2, 2), 3, 1, 2, 3, 4, 5, 6, 7, 8), *r;
    assert_int_equal(call_sum(x, SZ(0, -1), 2, false, NULL, &r), KV_OK);
    expect_shape(r, KV_I64, SZ(2), 1);
    EXPECT(r, 0, 1 + 2 + 5 + 6, 3 + 4 + 7 + 8);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_sum_integral_accumulates_in_i64(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_I32, (3), 1, 2147483647.0, 2147483647.0, 2), *r;
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    expect_shape(r, KV_I64, NULL, 0);
    assert_int_equal(at_i64(r, 0), 4294967296LL);
    kv_tensor_release(r);
    /* dtype=i32 asks for a 32-bit result: the exact sum wraps to 0. */
    assert_int_equal(call_sum(x, NODIMS, false, &DT_I32, &r), KV_OK);
    expect_shape(r, KV_I32, NULL, 0);
    EXPECT(r, 0, 0);
    kv_tensor_release(r);
    kv_tensor_release(x);

    x = MK(KV_U8, (2), 1, 200, 100);
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    assert_int_equal(at_i64(r, 0), 300);
    kv_tensor_release(r);
    kv_tensor_release(x);

    x = MK(KV_BOOL, (4), 1, 1, 0, 1, 1);
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    expect_shape(r, KV_I64, NULL, 0);
    assert_int_equal(at_i64(r, 0), 3);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_sum_dtype_override(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_I32, (3), 1, 1, 2, 4), *r;
    assert_int_equal(call_sum(x, NODIMS, false, &DT_F64, &r), KV_OK);
    expect_shape(r, KV_F64, NULL, 0);
    EXPECT(r, 0, 7);
    kv_tensor_release(r);
    kv_tensor_release(x);
    /* Elements convert to the dtype first (PyTorch's self.to(dtype)):
     * int(1.5) + int(1.5) = 2, not int(3.0). */
    x = MK(KV_F64, (2), 1, 1.5, 1.5);
    assert_int_equal(call_sum(x, NODIMS, false, &DT_I32, &r), KV_OK);
    expect_shape(r, KV_I32, NULL, 0);
    EXPECT(r, 0, 2);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_sum_f32_accumulates_in_f64(void **state) {
    (void)state;
    /* 1e8 is exact in f32 and its ulp is 8: a f32 running sum never moves
     * off 1e8, the f64 sum is 100000016, exact in f32. */
    double v[17];
    v[0] = 1e8;
    for (int i = 1; i < 17; i++) v[i] = 1.0;
    kv_tensor *x = mk(KV_F32, SZ(17), 1, v), *r;
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    assert_true(((const float *)kv_tensor_data(r))[0] == 100000016.0f);
    kv_tensor_release(r);
    kv_tensor_release(x);
    /* f16: 1024 + 0.5 ties to even (1024) at every f16 step; the wide sum
     * 1025 is exact in f16. */
    x = MK(KV_F16, (3), 1, 1024, 0.5, 0.5);
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F16, NULL, 0);
    EXPECT(r, 0, 1025);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_sum_zero_size_and_0dim(void **state) {
    (void)state;
    kv_tensor *x = mk(KV_F32, SZ(2, 0), 2, NULL), *r;
    assert_int_equal(call_sum(x, SZ(1), 1, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(2), 1);
    EXPECT(r, 0, 0, 0);
    kv_tensor_release(r);
    assert_int_equal(call_sum(x, SZ(0), 1, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(0), 1);
    kv_tensor_release(r);
    kv_tensor_release(x);

    x = mk(KV_F64, SZ(0), 0, VALS(2.5));
    for (int64_t d = -1; d <= 0; d++) {
        assert_int_equal(call_sum(x, &d, 1, true, NULL, &r), KV_OK);
        expect_shape(r, KV_F64, NULL, 0);
        EXPECT(r, 0, 2.5);
        kv_tensor_release(r);
    }
    expect_error(call_sum(x, SZ(1), 1, false, NULL, &r), KV_ERR_DIM, "sum", NULL);
    kv_tensor_release(x);
}

static void test_sum_complex(void **state) {
    (void)state;
    const float data[4] = { 1, 2, 3, -1 };
    kv_tensor *x = kv_tensor_from_data(data, SZ(2), 1, KV_C64), *r;
    assert_int_equal(call_sum(x, NODIMS, false, NULL, &r), KV_OK);
    expect_shape(r, KV_C64, NULL, 0);
    const float *p = kv_tensor_data(r);
    assert_true(p[0] == 4.0f && p[1] == 1.0f);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_sum_errors(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 3), 2, 1, 2, 3, 4, 5, 6), *r;
    expect_error(call_sum(x, SZ(1, -1), 2, false, NULL, &r), KV_ERR_DIM, "sum", "multiple times");
    expect_error(call_sum(x, SZ(2), 1, false, NULL, &r), KV_ERR_DIM, "sum", NULL);
    expect_error(call_sum(x, SZ(-3), 1, false, NULL, &r), KV_ERR_DIM, "sum", NULL);
    kv_tensor_release(x);
}

/* ---- mean ---- */

static void test_mean(void **state) {
    (void)state;
    kv_tensor *base = MK(KV_F32, (2, 3), 2, 1, 2, 3, 4, 5, 9);
    kv_tensor *x = tview(base), *r; /* [[1,4],[2,5],[3,9]] */
    assert_int_equal(call_mean(x, SZ(0), 1, true, NULL, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(1, 2), 2);
    EXPECT(r, 0, 2, 6);
    kv_tensor_release(r);
    assert_int_equal(call_mean(x, NODIMS, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F32, NULL, 0);
    EXPECT(r, 0, 4);
    kv_tensor_release(r);
    kv_tensor_release(x);
    kv_tensor_release(base);

    /* Integral input with a floating dtype: converted, then averaged. */
    x = MK(KV_I64, (2), 1, 1, 2);
    assert_int_equal(call_mean(x, NODIMS, false, &DT_F64, &r), KV_OK);
    expect_shape(r, KV_F64, NULL, 0);
    EXPECT(r, 0, 1.5);
    kv_tensor_release(r);
    kv_tensor_release(x);

    /* An empty mean is 0/0. */
    x = mk(KV_F64, SZ(3, 0), 2, NULL);
    assert_int_equal(call_mean(x, SZ(1), 1, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(3), 1);
    EXPECT(r, 0, NAN, NAN, NAN);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_mean_errors(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_I64, (2), 1, 1, 2), *r;
    expect_error(call_mean(x, NODIMS, false, NULL, &r), KV_ERR_DTYPE, "mean",
                 "Input dtype must be either a floating point or complex dtype. Got: Long");
    expect_error(call_mean(x, NODIMS, false, &DT_I64, &r), KV_ERR_DTYPE, "mean", "Got: Long");
    kv_tensor_release(x);
    x = MK(KV_F32, (2, 2), 2, 1, 2, 3, 4);
    expect_error(call_mean(x, SZ(0, 0), 2, false, NULL, &r), KV_ERR_DIM, "mean", NULL);
    kv_tensor_release(x);
}

/* ---- amax ---- */

static void test_amax(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 3), 2, 1, 3, 2, 4, NAN, 5), *r;
    assert_int_equal(call_amax(x, SZ(1), 1, false, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(2), 1);
    EXPECT(r, 0, 3, NAN);
    kv_tensor_release(r);
    kv_tensor *xt = tview(x); /* [[1,4],[3,NaN],[2,5]] */
    assert_int_equal(call_amax(xt, SZ(1), 1, true, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(3, 1), 2);
    EXPECT(r, 0, 4, NAN, 5);
    kv_tensor_release(r);
    kv_tensor_release(xt);
    kv_tensor_release(x);

    x = MK(KV_I16, (2, 2), 2, -7, -3, -5, -9);
    assert_int_equal(call_amax(x, SZ(0), 0, false, &r), KV_OK); /* [] = all dims */
    expect_shape(r, KV_I16, NULL, 0);
    EXPECT(r, 0, -3);
    kv_tensor_release(r);
    kv_tensor_release(x);

    x = MK(KV_BOOL, (2, 2), 2, 0, 1, 0, 0);
    assert_int_equal(call_amax(x, SZ(1), 1, false, &r), KV_OK);
    expect_shape(r, KV_BOOL, SZ(2), 1);
    EXPECT(r, 0, 1, 0);
    kv_tensor_release(r);
    kv_tensor_release(x);

    /* A zero-size tensor is fine as long as the reduced dim is not empty. */
    x = mk(KV_F32, SZ(0, 3), 2, NULL);
    assert_int_equal(call_amax(x, SZ(1), 1, false, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(0), 1);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_amax_errors(void **state) {
    (void)state;
    const float data[2] = { 1, 2 };
    kv_tensor *x = kv_tensor_from_data(data, SZ(1), 1, KV_C64), *r;
    expect_error(call_amax(x, SZ(0), 0, false, &r), KV_ERR_DTYPE, "amax", NULL);
    kv_tensor_release(x);
    x = mk(KV_F32, SZ(2, 0), 2, NULL);
    expect_error(call_amax(x, SZ(1), 1, false, &r), KV_ERR_INVALID_ARG, "amax", "non-zero size");
    expect_error(call_amax(x, SZ(0), 0, false, &r), KV_ERR_INVALID_ARG, "amax", NULL);
    kv_tensor_release(x);
}

/* ---- argmax ---- */

static void test_argmax(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (4), 1, 1, 5, 5, 2), *r;
    assert_int_equal(call_argmax(x, NULL, false, &r), KV_OK);
    expect_shape(r, KV_I64, NULL, 0);
    assert_int_equal(at_i64(r, 0), 1); /* first of the ties */
    kv_tensor_release(r);
    kv_tensor_release(x);

    x = MK(KV_F64, (4), 1, 1, NAN, 3, NAN);
    assert_int_equal(call_argmax(x, NULL, false, &r), KV_OK);
    assert_int_equal(at_i64(r, 0), 1); /* NaN is the max; the first wins */
    kv_tensor_release(r);
    kv_tensor_release(x);

    /* dim=None flattens the logical (not the memory) order. */
    kv_tensor *base = MK(KV_I32, (2, 3), 2, 3, 1, 7, 9, 2, 8);
    x = tview(base); /* [[3,9],[1,2],[7,8]] */
    assert_int_equal(call_argmax(x, NULL, false, &r), KV_OK);
    assert_int_equal(at_i64(r, 0), 1);
    kv_tensor_release(r);
    assert_int_equal(call_argmax(x, NULL, true, &r), KV_OK);
    expect_shape(r, KV_I64, SZ(1, 1), 2);
    assert_int_equal(at_i64(r, 0), 1);
    kv_tensor_release(r);
    const int64_t d0 = 0, dm1 = -1;
    assert_int_equal(call_argmax(x, &d0, true, &r), KV_OK);
    expect_shape(r, KV_I64, SZ(1, 2), 2);
    assert_int_equal(at_i64(r, 0), 2);
    assert_int_equal(at_i64(r, 1), 0);
    kv_tensor_release(r);
    assert_int_equal(call_argmax(x, &dm1, false, &r), KV_OK);
    expect_shape(r, KV_I64, SZ(3), 1);
    assert_int_equal(at_i64(r, 0), 1);
    assert_int_equal(at_i64(r, 1), 1);
    assert_int_equal(at_i64(r, 2), 1);
    kv_tensor_release(r);
    kv_tensor_release(x);
    kv_tensor_release(base);
}

static void test_argmax_errors(void **state) {
    (void)state;
    const double data[2] = { 1, 2 };
    kv_tensor *x = kv_tensor_from_data(data, SZ(1), 1, KV_C128), *r;
    expect_error(call_argmax(x, NULL, false, &r), KV_ERR_DTYPE, "argmax", NULL);
    kv_tensor_release(x);
    x = MK(KV_BOOL, (2), 1, 0, 1);
    expect_error(call_argmax(x, NULL, false, &r), KV_ERR_DTYPE, "argmax", NULL);
    kv_tensor_release(x);
    x = mk(KV_F32, SZ(0, 2), 2, NULL);
    expect_error(call_argmax(x, NULL, false, &r), KV_ERR_INVALID_ARG, "argmax", NULL);
    const int64_t d0 = 0, d1 = 1, d2 = 2;
    expect_error(call_argmax(x, &d0, false, &r), KV_ERR_INVALID_ARG, "argmax", "non-zero size");
    expect_error(call_argmax(x, &d2, false, &r), KV_ERR_DIM, "argmax", NULL);
    assert_int_equal(call_argmax(x, &d1, false, &r), KV_OK);
    expect_shape(r, KV_I64, SZ(0), 1);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

/* ---- prod ---- */

static void test_prod(void **state) {
    (void)state;
    kv_tensor *base = MK(KV_F64, (2, 3), 2, 1, 2, 3, 4, 5, 6);
    kv_tensor *x = tview(base), *r; /* [[1,4],[2,5],[3,6]] */
    assert_int_equal(call_prod(x, 0, false, NULL, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(2), 1);
    EXPECT(r, 0, 6, 120);
    kv_tensor_release(r);
    assert_int_equal(call_prod(x, -1, true, &DT_F32, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(3, 1), 2);
    EXPECT(r, 0, 4, 10, 18);
    kv_tensor_release(r);
    kv_tensor_release(x);
    kv_tensor_release(base);

    /* 100000^2 overflows i32 but not the i64 result. */
    x = MK(KV_I32, (2), 1, 100000, 100000);
    assert_int_equal(call_prod(x, 0, false, NULL, &r), KV_OK);
    expect_shape(r, KV_I64, NULL, 0);
    assert_int_equal(at_i64(r, 0), 10000000000LL);
    kv_tensor_release(r);
    kv_tensor_release(x);

    x = mk(KV_F32, SZ(2, 0), 2, NULL);
    assert_int_equal(call_prod(x, 1, false, NULL, &r), KV_OK);
    EXPECT(r, 0, 1, 1);
    kv_tensor_release(r);
    expect_error(call_prod(x, 2, false, NULL, &r), KV_ERR_DIM, "prod", NULL);
    kv_tensor_release(x);
}

/* ---- mm / bmm / addmm ---- */

static void test_mm(void **state) {
    (void)state;
    kv_tensor *a = MK(KV_F32, (2, 3), 2, 1, 2, 3, 4, 5, 6);
    kv_tensor *bt = MK(KV_F32, (2, 3), 2, 7, 9, 11, 8, 10, 12);
    kv_tensor *b = tview(bt), *r; /* [[7,8],[9,10],[11,12]], non-contiguous */
    assert_int_equal(call_mm("mm", a, b, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(2, 2), 2);
    EXPECT(r, 0, 58, 64, 139, 154);
    kv_tensor_release(r);
    kv_tensor_release(b);
    kv_tensor_release(bt);
    kv_tensor_release(a);

    a = MK(KV_I64, (1, 2), 2, 3000000000.0, 1);
    b = MK(KV_I64, (2, 1), 2, 3, 5);
    assert_int_equal(call_mm("mm", a, b, &r), KV_OK);
    expect_shape(r, KV_I64, SZ(1, 1), 2);
    assert_int_equal(at_i64(r, 0), 9000000005LL);
    kv_tensor_release(r);
    kv_tensor_release(b);
    kv_tensor_release(a);

    /* A f32 running sum stays at 1e8 (each +3 rounds away); the f64 sum
     * 100000009 rounds once to 100000008. */
    a = MK(KV_F32, (1, 4), 2, 1e8, 3, 3, 3);
    b = MK(KV_F32, (4, 1), 2, 1, 1, 1, 1);
    assert_int_equal(call_mm("mm", a, b, &r), KV_OK);
    assert_true(((const float *)kv_tensor_data(r))[0] == 100000008.0f);
    kv_tensor_release(r);
    kv_tensor_release(b);
    kv_tensor_release(a);

    /* Empty inner dim: zeros. */
    a = mk(KV_F64, SZ(2, 0), 2, NULL);
    b = mk(KV_F64, SZ(0, 3), 2, NULL);
    assert_int_equal(call_mm("mm", a, b, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(2, 3), 2);
    EXPECT(r, 0, 0, 0, 0, 0, 0, 0);
    kv_tensor_release(r);
    kv_tensor_release(b);
    kv_tensor_release(a);

    /* (1+2i)(3+4i) = -5+10i */
    const float ca[2] = { 1, 2 }, cb[2] = { 3, 4 };
    a = kv_tensor_from_data(ca, SZ(1, 1), 2, KV_C64);
    b = kv_tensor_from_data(cb, SZ(1, 1), 2, KV_C64);
    assert_int_equal(call_mm("mm", a, b, &r), KV_OK);
    const float *p = kv_tensor_data(r);
    assert_true(p[0] == -5.0f && p[1] == 10.0f);
    kv_tensor_release(r);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_mm_errors(void **state) {
    (void)state;
    kv_tensor *a = MK(KV_F32, (2, 3), 2, 1, 2, 3, 4, 5, 6), *r;
    kv_tensor *b = MK(KV_F32, (4, 2), 2, 1, 2, 3, 4, 5, 6, 7, 8);
    expect_error(call_mm("mm", a, b, &r), KV_ERR_SHAPE, "mm", "[2, 3]");
    assert_non_null(strstr(kv_last_error_message(), "[4, 2]"));
    kv_tensor *d = MK(KV_F64, (3, 2), 2, 1, 2, 3, 4, 5, 6);
    expect_error(call_mm("mm", a, d, &r), KV_ERR_DTYPE, "mm", "float != double");
    kv_tensor *v = MK(KV_F32, (3), 1, 1, 2, 3);
    expect_error(call_mm("mm", a, v, &r), KV_ERR_SHAPE, "mm", "2-D");
    kv_tensor *ba = MK(KV_BOOL, (1, 1), 2, 1), *bb = MK(KV_BOOL, (1, 1), 2, 1);
    expect_error(call_mm("mm", ba, bb, &r), KV_ERR_DTYPE, "mm", NULL);
    kv_tensor_release(bb);
    kv_tensor_release(ba);
    kv_tensor_release(v);
    kv_tensor_release(d);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_bmm(void **state) {
    (void)state;
    kv_tensor *a = MK(KV_F64, (2, 1, 2), 3, 1, 2, 5, 6);
    kv_tensor *b = MK(KV_F64, (2, 2, 1), 3, 3, 4, 7, 8), *r;
    assert_int_equal(call_mm("bmm", a, b, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(2, 1, 1), 3);
    EXPECT(r, 0, 11, 83);
    kv_tensor_release(r);
    kv_tensor *b3 = MK(KV_F64, (3, 2, 1), 3, 1, 2, 3, 4, 5, 6);
    expect_error(call_mm("bmm", a, b3, &r), KV_ERR_SHAPE, "bmm", "batches");
    kv_tensor *bk = MK(KV_F64, (2, 3, 1), 3, 1, 2, 3, 4, 5, 6);
    expect_error(call_mm("bmm", a, bk, &r), KV_ERR_SHAPE, "bmm", NULL);
    kv_tensor *m2 = MK(KV_F64, (2, 1), 2, 1, 2);
    expect_error(call_mm("bmm", a, m2, &r), KV_ERR_SHAPE, "bmm", "3-D");
    kv_tensor_release(m2);
    kv_tensor_release(bk);
    kv_tensor_release(b3);
    kv_tensor_release(b);
    kv_tensor_release(a);
}

static void test_addmm(void **state) {
    (void)state;
    kv_tensor *self = MK(KV_F32, (2), 1, 10, 20);
    kv_tensor *a = MK(KV_F32, (2, 2), 2, 1, 2, 3, 4);
    kv_tensor *b = MK(KV_F32, (2, 2), 2, 1, 0, 0, 1), *r;
    assert_int_equal(call_addmm(self, a, b, kv_scalar_int(2), kv_scalar_double(3), &r), KV_OK);
    expect_shape(r, KV_F32, SZ(2, 2), 2);
    EXPECT(r, 0, 23, 46, 29, 52);
    kv_tensor_release(r);
    kv_tensor_release(self);

    /* beta = 0: self is not read, its NaN and Inf do not leak. */
    self = MK(KV_F32, (2, 1), 2, NAN, INFINITY);
    assert_int_equal(call_addmm(self, a, b, kv_scalar_int(0), kv_scalar_int(1), &r), KV_OK);
    EXPECT(r, 0, 1, 2, 3, 4);
    kv_tensor_release(r);
    /* but it still has to broadcast */
    kv_tensor *bad = MK(KV_F32, (3), 1, 1, 2, 3);
    expect_error(call_addmm(bad, a, b, kv_scalar_int(0), kv_scalar_int(1), &r), KV_ERR_SHAPE, "addmm", NULL);
    kv_tensor_release(bad);
    kv_tensor_release(self);
    kv_tensor_release(b);
    kv_tensor_release(a);

    /* Empty inner dim: beta * self. */
    self = MK(KV_F64, (1, 2), 2, 1.5, -2);
    a = mk(KV_F64, SZ(3, 0), 2, NULL);
    b = mk(KV_F64, SZ(0, 2), 2, NULL);
    assert_int_equal(call_addmm(self, a, b, kv_scalar_double(2), kv_scalar_int(1), &r), KV_OK);
    expect_shape(r, KV_F64, SZ(3, 2), 2);
    EXPECT(r, 0, 3, -4, 3, -4, 3, -4);
    kv_tensor_release(r);
    kv_tensor_release(b);
    kv_tensor_release(a);
    kv_tensor_release(self);

    /* Integral: beta and alpha must be integral. */
    self = MK(KV_I32, (1, 1), 2, 5);
    a = MK(KV_I32, (1, 2), 2, 2, 3);
    b = MK(KV_I32, (2, 1), 2, 4, 5);
    assert_int_equal(call_addmm(self, a, b, kv_scalar_int(-1), kv_scalar_int(2), &r), KV_OK);
    expect_shape(r, KV_I32, SZ(1, 1), 2);
    EXPECT(r, 0, -5 + 2 * 23);
    kv_tensor_release(r);
    expect_error(call_addmm(self, a, b, kv_scalar_double(0.5), kv_scalar_int(1), &r), KV_ERR_INVALID_ARG,
                 "addmm", "beta");
    expect_error(call_addmm(self, a, b, kv_scalar_int(1), kv_scalar_double(2.0), &r), KV_ERR_INVALID_ARG,
                 "addmm", "alpha");
    kv_tensor *sf = MK(KV_F32, (1, 1), 2, 5);
    expect_error(call_addmm(sf, a, b, kv_scalar_int(1), kv_scalar_int(1), &r), KV_ERR_DTYPE, "addmm", NULL);
    kv_tensor_release(sf);
    kv_tensor_release(b);
    kv_tensor_release(a);
    kv_tensor_release(self);
}

/* ---- softmax ---- */

/* The floating mm/addmm's bits: every output is the products added from
 * k = 0 up in one f64 accumulator, alpha and beta*self applied in f64, one
 * rounding on store (the reference's stated order, which its widened fast
 * path must keep). Magnitudes spread over 2^-40..2^30 with both signs
 * (f16: 2^-20..2^15), so another order rounds differently; b is a
 * transposed view. */
static double mm_elem(const kv_tensor *t, int64_t i, int64_t j) {
    const char *p = (const char *)kv_tensor_data(t) +
                    (i * t->strides[0] + j * t->strides[1]) * (int64_t)kv_dtype_size(t->dtype);
    if (t->dtype == KV_F16) return kv_f16_to_f32(*(const kv_f16 *)p);
    if (t->dtype == KV_BF16) return kv_bf16_to_f32(*(const kv_bf16 *)p);
    if (t->dtype == KV_F32) return *(const float *)p;
    assert_int_equal(t->dtype, KV_F64);
    return *(const double *)p;
}

static void expect_rounded(const kv_tensor *r, int64_t lin, double v) {
    const char *p = (const char *)kv_tensor_data(r) + lin * (int64_t)kv_dtype_size(r->dtype);
    if (r->dtype == KV_F16) {
        assert_int_equal(*(const kv_f16 *)p, kv_f64_to_f16(v));
    } else if (r->dtype == KV_BF16) {
        assert_int_equal(*(const kv_bf16 *)p, kv_f64_to_bf16(v));
    } else if (r->dtype == KV_F32) {
        const float f = (float)v;
        assert_memory_equal(p, &f, sizeof f);
    } else {
        assert_int_equal(r->dtype, KV_F64);
        assert_memory_equal(p, &v, sizeof v);
    }
}

static void test_mm_sum_order_bits(void **state) {
    (void)state;
    enum { N = 4, K = 23, M = 5 };
    const kv_dtype dts[] = { KV_F64, KV_F32, KV_F16, KV_BF16 };
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        double av[N * K], bv[M * K], sv[M];
        for (int i = 0; i < N * K + M * K + M; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            /* f16 keeps 2^-20..2^15 (under its 65504); products then span
             * 70 bits and more, past f64's 53: the sums round. */
            const int e = dts[d] == KV_F16 ? (int)((x >> 20) % 26) - 20 : (int)((x >> 20) % 61) - 40;
            const double v = ldexp((double)(int)((x >> 33) % 2001) - 1000.0, e);
            if (i < N * K) av[i] = v;
            else if (i < N * K + M * K) bv[i - N * K] = v;
            else sv[i - N * K - M * K] = v;
        }
        kv_tensor *a = mk(dts[d], SZ(N, K), 2, av);
        kv_tensor *bt = mk(dts[d], SZ(M, K), 2, bv);
        kv_tensor *b = tview(bt);
        kv_tensor *self = mk(dts[d], SZ(M), 1, sv);
        kv_tensor *r, *r2;
        assert_int_equal(call_mm("mm", a, b, &r), KV_OK);
        assert_int_equal(call_addmm(self, a, b, kv_scalar_double(-2.0), kv_scalar_double(3.0), &r2), KV_OK);
        for (int64_t i = 0; i < N; i++) {
            for (int64_t j = 0; j < M; j++) {
                double acc = 0.0;
                for (int64_t p = 0; p < K; p++) acc = acc + mm_elem(a, i, p) * mm_elem(b, p, j);
                expect_rounded(r, i * M + j, acc);
                expect_rounded(r2, i * M + j, -2.0 * at(self, j) + 3.0 * acc);
            }
        }
        kv_tensor_release(r);
        kv_tensor_release(r2);
        kv_tensor_release(self);
        kv_tensor_release(b);
        kv_tensor_release(bt);
        kv_tensor_release(a);
    }
}

static void test_softmax(void **state) {
    (void)state;
    const double l2 = log(2.0);
    kv_tensor *x = MK(KV_F64, (2, 2), 2, 0, 0, -INFINITY, -INFINITY), *r;
    assert_int_equal(call_softmax("_softmax", x, 1, false, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(2, 2), 2);
    EXPECT(r, 0, 0.5, 0.5, NAN, NAN); /* a row of -inf gives NaN */
    kv_tensor_release(r);
    assert_int_equal(call_softmax("_log_softmax", x, -1, false, &r), KV_OK);
    EXPECT(r, 1e-14, -l2, -l2, NAN, NAN);
    kv_tensor_release(r);
    kv_tensor_release(x);

    /* Transposed input: X = [[0,0,ln2],[ln2,0,0]] */
    kv_tensor *base = MK(KV_F64, (3, 2), 2, 0, l2, 0, 0, l2, 0);
    x = tview(base);
    assert_int_equal(call_softmax("_softmax", x, 1, false, &r), KV_OK);
    expect_shape(r, KV_F64, SZ(2, 3), 2);
    EXPECT(r, 1e-14, 0.25, 0.25, 0.5, 0.5, 0.25, 0.25);
    kv_tensor_release(r);
    assert_int_equal(call_softmax("_log_softmax", x, 0, false, &r), KV_OK);
    /* columns: {0,ln2} {0,0} {ln2,0}: log_softmax of {0,ln2} is
     * {-ln3, ln2-ln3} */
    const double l3 = log(3.0);
    EXPECT(r, 1e-14, -l3, -l2, l2 - l3, l2 - l3, -l2, -l3);
    kv_tensor_release(r);
    kv_tensor_release(x);
    kv_tensor_release(base);

    /* f32 result rounded once: 1/4 and 3/4 are exact. */
    x = MK(KV_F32, (2), 1, 0, 0);
    assert_int_equal(call_softmax("_softmax", x, 0, false, &r), KV_OK);
    expect_shape(r, KV_F32, SZ(2), 1);
    EXPECT(r, 0, 0.5, 0.5);
    kv_tensor_release(r);
    kv_tensor_release(x);

    /* 0-dim */
    x = mk(KV_F32, SZ(0), 0, VALS(7));
    assert_int_equal(call_softmax("_softmax", x, -1, false, &r), KV_OK);
    expect_shape(r, KV_F32, NULL, 0);
    EXPECT(r, 0, 1);
    kv_tensor_release(r);
    assert_int_equal(call_softmax("_log_softmax", x, 0, false, &r), KV_OK);
    EXPECT(r, 0, 0);
    kv_tensor_release(r);
    kv_tensor_release(x);
}

static void test_softmax_errors(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_I64, (2), 1, 1, 2), *r;
    expect_error(call_softmax("_softmax", x, 0, false, &r), KV_ERR_DTYPE, "_softmax", NULL);
    expect_error(call_softmax("_log_softmax", x, 0, false, &r), KV_ERR_DTYPE, "_log_softmax", NULL);
    kv_tensor_release(x);
    x = MK(KV_F16, (2), 1, 1, 2);
    expect_error(call_softmax("_softmax", x, 0, true, &r), KV_ERR_INVALID_ARG, "_softmax",
                 "softmax with half to float conversion is not supported on CPU");
    expect_error(call_softmax("_log_softmax", x, 0, true, &r), KV_ERR_INVALID_ARG, "_log_softmax",
                 "half to float");
    expect_error(call_softmax("_softmax", x, 1, false, &r), KV_ERR_DIM, "_softmax", NULL);
    kv_tensor_release(x);
}

/* ---- layer norm ---- */

static void test_layer_norm_exact(void **state) {
    (void)state;
    /* rows {1,3} and {5,9}: means 2 and 7, biased variances 1 and 4. */
    kv_tensor *x = MK(KV_F32, (2, 2), 2, 1, 3, 5, 9), *o[3];
    assert_int_equal(call_layer_norm(x, SZ(2), 1, NULL, NULL, 0.0, o), KV_OK);
    expect_shape(o[0], KV_F32, SZ(2, 2), 2);
    expect_shape(o[1], KV_F32, SZ(2, 1), 2);
    expect_shape(o[2], KV_F32, SZ(2, 1), 2);
    EXPECT(o[0], 0, -1, 1, -1, 1);
    EXPECT(o[1], 0, 2, 7);
    EXPECT(o[2], 0, 1, 0.5);
    release3(o);
    kv_tensor *w = MK(KV_F32, (2), 1, 2, 3), *b = MK(KV_F32, (2), 1, 1, -1);
    assert_int_equal(call_layer_norm(x, SZ(2), 1, w, b, 0.0, o), KV_OK);
    EXPECT(o[0], 0, -1, 2, -1, 2);
    release3(o);
    assert_int_equal(call_layer_norm(x, SZ(2), 1, NULL, b, 0.0, o), KV_OK);
    EXPECT(o[0], 0, 0, 0, 0, 0);
    release3(o);
    /* Normalizing every dim: one group of 4, mean 4.5, biased variance
     * (12.25 + 2.25 + 0.25 + 20.25) / 4 = 8.75; eps 7.25 makes rstd 1/4. */
    assert_int_equal(call_layer_norm(x, SZ(2, 2), 2, NULL, NULL, 7.25, o), KV_OK);
    expect_shape(o[1], KV_F32, SZ(1, 1), 2);
    EXPECT(o[0], 0, -0.875, -0.375, 0.125, 1.125);
    EXPECT(o[1], 0, 4.5);
    EXPECT(o[2], 0, 0.25);
    release3(o);
    kv_tensor_release(b);
    kv_tensor_release(w);
    kv_tensor_release(x);
}

static void test_layer_norm_strided_eps(void **state) {
    (void)state;
    /* X = transpose(base) = [[1,2,3,4],[2,2,2,2]] */
    kv_tensor *base = MK(KV_F64, (4, 2), 2, 1, 2, 2, 2, 3, 2, 4, 2);
    kv_tensor *x = tview(base), *o[3];
    const double eps = 1e-5;
    kv_tensor *w = MK(KV_F64, (4), 1, 1, 2, 3, 4);
    assert_int_equal(call_layer_norm(x, SZ(4), 1, w, NULL, eps, o), KV_OK);
    const double r0 = 1.0 / sqrt(1.25 + eps), r1 = 1.0 / sqrt(eps);
    EXPECT(o[0], 1e-12, -1.5 * r0 * 1, -0.5 * r0 * 2, 0.5 * r0 * 3, 1.5 * r0 * 4, 0, 0, 0, 0);
    EXPECT(o[1], 0, 2.5, 2);
    EXPECT(o[2], 1e-12, r0, r1);
    release3(o);
    kv_tensor_release(w);
    kv_tensor_release(x);
    kv_tensor_release(base);
}

static void test_layer_norm_half_dtypes(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_BF16, (1, 2), 2, 1, 3), *o[3];
    assert_int_equal(call_layer_norm(x, SZ(2), 1, NULL, NULL, 0.0, o), KV_OK);
    /* PyTorch CPU keeps mean/rstd in the input dtype (bf16 here). */
    expect_shape(o[0], KV_BF16, SZ(1, 2), 2);
    expect_shape(o[1], KV_BF16, SZ(1, 1), 2);
    expect_shape(o[2], KV_BF16, SZ(1, 1), 2);
    EXPECT(o[0], 0, -1, 1);
    EXPECT(o[1], 0, 2);
    release3(o);
    /* mixed: bf16 input with f32 weight -> f32 statistics */
    kv_tensor *w = MK(KV_F32, (2), 1, 1, 1);
    assert_int_equal(call_layer_norm(x, SZ(2), 1, w, NULL, 0.0, o), KV_OK);
    expect_shape(o[0], KV_BF16, SZ(1, 2), 2);
    expect_shape(o[1], KV_F32, SZ(1, 1), 2);
    expect_shape(o[2], KV_F32, SZ(1, 1), 2);
    release3(o);
    kv_tensor_release(w);
    kv_tensor_release(x);
}

static void test_layer_norm_errors(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 3), 2, 1, 2, 3, 4, 5, 6), *o[3];
    expect_error(call_layer_norm(x, SZ(4), 1, NULL, NULL, 1e-5, o), KV_ERR_SHAPE, "native_layer_norm",
                 "expected input with shape [*, 4], but got input of size [2, 3]");
    expect_error(call_layer_norm(x, SZ(1, 2, 3), 3, NULL, NULL, 1e-5, o), KV_ERR_SHAPE, "native_layer_norm", NULL);
    expect_error(call_layer_norm(x, SZ(0), 0, NULL, NULL, 1e-5, o), KV_ERR_SHAPE, "native_layer_norm", NULL);
    kv_tensor *w = MK(KV_F32, (2), 1, 1, 1);
    expect_error(call_layer_norm(x, SZ(3), 1, w, NULL, 1e-5, o), KV_ERR_SHAPE, "native_layer_norm", "weight");
    expect_error(call_layer_norm(x, SZ(3), 1, NULL, w, 1e-5, o), KV_ERR_SHAPE, "native_layer_norm", "bias");
    kv_tensor_release(w);
    w = MK(KV_F64, (3), 1, 1, 1, 1);
    expect_error(call_layer_norm(x, SZ(3), 1, w, NULL, 1e-5, o), KV_ERR_DTYPE, "native_layer_norm", "mixed dtype");
    kv_tensor_release(w);
    kv_tensor_release(x);
    x = MK(KV_I32, (3), 1, 1, 2, 3);
    expect_error(call_layer_norm(x, SZ(3), 1, NULL, NULL, 1e-5, o), KV_ERR_DTYPE, "native_layer_norm", NULL);
    kv_tensor_release(x);
}

/* ---- group norm ---- */

static void test_group_norm(void **state) {
    (void)state;
    /* N=2, C=2, HxW=1, one group: n0 {1,3} (mean 2, var 1), n1 {5,9}
     * (mean 7, var 4). */
    kv_tensor *x = MK(KV_F32, (2, 2, 1), 3, 1, 3, 5, 9), *o[3];
    assert_int_equal(call_group_norm(x, NULL, NULL, 2, 2, 1, 1, 0.0, o), KV_OK);
    expect_shape(o[0], KV_F32, SZ(2, 2, 1), 3);
    expect_shape(o[1], KV_F32, SZ(2, 1), 2);
    expect_shape(o[2], KV_F32, SZ(2, 1), 2);
    EXPECT(o[0], 0, -1, 1, -1, 1);
    EXPECT(o[1], 0, 2, 7);
    EXPECT(o[2], 0, 1, 0.5);
    release3(o);
    kv_tensor_release(x);

    /* A permuted input [1, 4, 2] (strides [8, 1, 4]) whose channels are
     * {1,2} {3,4} {10,10} {10,10}; two groups. */
    kv_tensor *base = MK(KV_F64, (1, 2, 4), 3, 1, 3, 10, 10, 2, 4, 10, 10);
    x = kv_tensor_view(base, SZ(1, 4, 2), SZ(8, 1, 4), 3, 0);
    assert_non_null(x);
    kv_tensor *w = MK(KV_F64, (4), 1, 1, 1, 2, 2), *b = MK(KV_F64, (4), 1, 0, 0, 1, 1);
    const double eps = 1e-5, r0 = 1.0 / sqrt(1.25 + eps), r1 = 1.0 / sqrt(eps);
    assert_int_equal(call_group_norm(x, w, b, 1, 4, 2, 2, eps, o), KV_OK);
    expect_shape(o[0], KV_F64, SZ(1, 4, 2), 3);
    expect_shape(o[1], KV_F64, SZ(1, 2), 2);
    EXPECT(o[0], 1e-12, -1.5 * r0, -0.5 * r0, 0.5 * r0, 1.5 * r0, 1, 1, 1, 1);
    EXPECT(o[1], 0, 2.5, 10);
    EXPECT(o[2], 1e-9, r0, r1);
    release3(o);
    kv_tensor_release(b);
    kv_tensor_release(w);
    kv_tensor_release(x);
    kv_tensor_release(base);
}

static void test_group_norm_errors(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (1, 6, 2), 3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12), *o[3];
    expect_error(call_group_norm(x, NULL, NULL, 1, 6, 2, 4, 1e-5, o), KV_ERR_INVALID_ARG, "native_group_norm",
                 "divisible by num_groups");
    expect_error(call_group_norm(x, NULL, NULL, 1, 6, 3, 3, 1e-5, o), KV_ERR_SHAPE, "native_group_norm", NULL);
    expect_error(call_group_norm(x, NULL, NULL, 2, 6, 2, 3, 1e-5, o), KV_ERR_SHAPE, "native_group_norm", NULL);
    expect_error(call_group_norm(x, NULL, NULL, 1, 6, 2, 0, 1e-5, o), KV_ERR_INVALID_ARG, "native_group_norm",
                 NULL);
    kv_tensor *w = MK(KV_F32, (3), 1, 1, 1, 1);
    expect_error(call_group_norm(x, w, NULL, 1, 6, 2, 3, 1e-5, o), KV_ERR_SHAPE, "native_group_norm", "weight");
    kv_tensor_release(w);
    kv_tensor_release(x);
    x = MK(KV_I64, (1, 2, 1), 3, 1, 2);
    expect_error(call_group_norm(x, NULL, NULL, 1, 2, 1, 1, 1e-5, o), KV_ERR_DTYPE, "native_group_norm", NULL);
    kv_tensor_release(x);
}

/* ---- device ---- */

/* The dispatcher never sends a non-CPU tensor to a CPU kernel, so call the
 * kernels directly with a tensor relabelled as living on SIM. */
static void test_non_cpu_inputs(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 2), 2, 1, 2, 3, 4);
    kv_tensor *y = kv_tensor_alias(x);
    assert_non_null(y);
    y->device = (kv_device){ KV_DEVICE_SIM, 0 };
    kv_keyset ks = kv_keyset_of(KV_KEY_CPU);
    struct {
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack s;
    } c;

    c.s = kv_stack_on(c.slots, KV_STACK_MAX);
    kv_push_tensor(&c.s, y);
    kv_push_none(&c.s);
    kv_push_bool(&c.s, false);
    kv_push_none(&c.s);
    expect_error(kv_ref_sum(NULL, ks, &c.s), KV_ERR_DEVICE, "sum", NULL);

    c.s = kv_stack_on(c.slots, KV_STACK_MAX);
    kv_push_tensor(&c.s, x);
    kv_push_tensor(&c.s, y);
    expect_error(kv_ref_mm(NULL, ks, &c.s), KV_ERR_DEVICE, "mm", NULL);

    c.s = kv_stack_on(c.slots, KV_STACK_MAX);
    kv_push_tensor(&c.s, y);
    kv_push_int(&c.s, 0);
    kv_push_bool(&c.s, false);
    expect_error(kv_ref__softmax(NULL, ks, &c.s), KV_ERR_DEVICE, "_softmax", NULL);

    c.s = kv_stack_on(c.slots, KV_STACK_MAX);
    kv_push_tensor(&c.s, x);
    kv_push_ints(&c.s, (kv_int_list){ SZ(2), 1 });
    kv_push_tensor(&c.s, NULL);
    kv_push_tensor(&c.s, NULL);
    kv_push_double(&c.s, 1e-5);
    /* a SIM weight next to a CPU input */
    const int64_t wsizes[1] = { 2 }, wstrides[1] = { 1 };
    kv_tensor *wv = kv_tensor_view(x, wsizes, wstrides, 1, 0);
    assert_non_null(wv);
    wv->device = (kv_device){ KV_DEVICE_SIM, 0 };
    c.s.slots[2] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = wv };
    expect_error(kv_ref_native_layer_norm(NULL, ks, &c.s), KV_ERR_DEVICE, "native_layer_norm", "weight");
    kv_tensor_release(wv);

    kv_tensor_release(y);
    kv_tensor_release(x);
}

/* ---- allocation failure ---- */

static int allocs_left;

static void *failing_alloc(void *ctx, size_t nbytes) {
    if (allocs_left-- <= 0) return NULL;
    return kv_allocator_cpu_iface()->alloc(ctx, nbytes);
}

static void failing_free(void *ctx, void *ptr, size_t nbytes) { kv_allocator_cpu_iface()->free(ctx, ptr, nbytes); }

/* When the second of three outputs cannot be allocated, the first is
 * released (teardown checks) and the status says why. */
static void test_alloc_failure_releases(void **state) {
    (void)state;
    kv_tensor *x = MK(KV_F32, (2, 2), 2, 1, 3, 5, 9), *o[3] = { NULL, NULL, NULL };
    static const kv_allocator_iface failing = { failing_alloc, failing_free };
    for (int ok_allocs = 0; ok_allocs < 3; ok_allocs++) {
        allocs_left = ok_allocs;
        kv_allocator_install(KV_DEVICE_CPU, &failing, NULL);
        kv_status st = call_layer_norm(x, SZ(2), 1, NULL, NULL, 0.0, o);
        kv_status st2 = call_group_norm(x, NULL, NULL, 2, 2, 1, 1, 0.0, o);
        kv_allocator_install(KV_DEVICE_CPU, kv_allocator_cpu_iface(), NULL);
        assert_int_equal(st, KV_ERR_OOM);
        assert_int_equal(st2, KV_ERR_OOM);
    }
    kv_tensor_release(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_sum_all_dims),
        T(test_sum_transposed_keepdim),
        T(test_sum_two_dims_of_three),
        T(test_sum_integral_accumulates_in_i64),
        T(test_sum_dtype_override),
        T(test_sum_f32_accumulates_in_f64),
        T(test_sum_zero_size_and_0dim),
        T(test_sum_complex),
        T(test_sum_errors),
        T(test_mean),
        T(test_mean_errors),
        T(test_amax),
        T(test_amax_errors),
        T(test_argmax),
        T(test_argmax_errors),
        T(test_prod),
        T(test_mm),
        T(test_mm_errors),
        T(test_bmm),
        T(test_addmm),
        T(test_mm_sum_order_bits),
        T(test_softmax),
        T(test_softmax_errors),
        T(test_layer_norm_exact),
        T(test_layer_norm_strided_eps),
        T(test_layer_norm_half_dtypes),
        T(test_layer_norm_errors),
        T(test_group_norm),
        T(test_group_norm_errors),
        T(test_non_cpu_inputs),
        T(test_boxed_call),
        T(test_alloc_failure_releases),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
