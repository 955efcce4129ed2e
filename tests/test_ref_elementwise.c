/* The elementwise, factory and copy reference kernels, and the machinery
 * under them (element load/store/convert, the strided iterator).
 *
 * Ops are called through the typed API (kv/ops.h), so dispatch reaches the
 * CPU reference kernels. Every expected value is written out here by hand
 * (or is the C expression of the documented formula in double), never
 * taken from the code under test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "ref/ref.h"
#include "ref/ref_kernels.h"

/* ---- helpers ---- */

#define SZ(...) ((const int64_t[]){ __VA_ARGS__ })
#define NDIM(...) ((int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)))
#define LIST(...) ((kv_int_list){ SZ(__VA_ARGS__), NDIM(__VA_ARGS__) })

static kv_tensor *mk(kv_dtype dt, const int64_t *sizes, int ndim, const void *data) {
    kv_tensor *t = kv_tensor_from_data(data, sizes, ndim, dt);
    assert_non_null(t);
    return t;
}
static kv_tensor *f32t(const int64_t *sizes, int ndim, const float *v) { return mk(KV_F32, sizes, ndim, v); }
static kv_tensor *f64t(const int64_t *sizes, int ndim, const double *v) { return mk(KV_F64, sizes, ndim, v); }
static kv_tensor *i64t(const int64_t *sizes, int ndim, const int64_t *v) { return mk(KV_I64, sizes, ndim, v); }
static kv_tensor *i32t(const int64_t *sizes, int ndim, const int32_t *v) { return mk(KV_I32, sizes, ndim, v); }
static kv_tensor *boolt(const int64_t *sizes, int ndim, const uint8_t *v) { return mk(KV_BOOL, sizes, ndim, v); }

/* Checks shape, dtype and contiguity of a result. */
static void check_meta(const kv_tensor *t, kv_dtype dt, const int64_t *sizes, int ndim) {
    assert_non_null(t);
    assert_int_equal(t->dtype, dt);
    assert_int_equal(t->ndim, ndim);
    for (int d = 0; d < ndim; d++) assert_int_equal(t->sizes[d], sizes[d]);
    assert_true(kv_tensor_is_contiguous(t));
    assert_int_equal(t->device.type, KV_DEVICE_CPU);
}

static const float *f32d(const kv_tensor *t) { return kv_tensor_data(t); }
static const double *f64d(const kv_tensor *t) { return kv_tensor_data(t); }
static const int64_t *i64d(const kv_tensor *t) { return kv_tensor_data(t); }
static const int32_t *i32d(const kv_tensor *t) { return kv_tensor_data(t); }
static const uint8_t *u8d(const kv_tensor *t) { return kv_tensor_data(t); }
static const uint16_t *u16d(const kv_tensor *t) { return kv_tensor_data(t); }

/* Bitwise float equality, so -0.0 vs 0.0 and NaN are checked too. */
static void assert_f32_is(float got, float want) {
    if (isnan(want)) {
        assert_true(isnan(got));
        return;
    }
    uint32_t a, b;
    memcpy(&a, &got, 4);
    memcpy(&b, &want, 4);
    if (a != b) fail_msg("got %.9g (0x%08x), want %.9g (0x%08x)", (double)got, a, (double)want, b);
}

/* The status, the thread-local code, and the op's name in the message. */
static void expect_error(kv_status got, kv_status want, const char *op) {
    assert_int_equal(got, want);
    assert_int_equal(kv_last_error(), want);
    if (strstr(kv_last_error_message(), op) == NULL)
        fail_msg("message \"%s\" does not name %s", kv_last_error_message(), op);
}
static void expect_null_error(kv_tensor *r, kv_status want, const char *op) {
    assert_null(r);
    expect_error(kv_last_error(), want, op);
}

/* A transposed view of a contiguous [r, c] tensor: shape [c, r]. */
static kv_tensor *transposed(const kv_tensor *t) {
    kv_tensor *v = kv_tensor_view(t, SZ(t->sizes[1], t->sizes[0]), SZ(t->strides[1], t->strides[0]), 2, t->offset);
    assert_non_null(v);
    return v;
}

/* ---- element access ---- */

static void test_value_float_to_int(void **state) {
    (void)state;
    uint8_t u8;
    int8_t i8;
    int32_t i32;
    int64_t i64;
    kv_ref_store_f64(KV_U8, &u8, -1.0);
    assert_int_equal(u8, 255); /* through int64, as PyTorch casts */
    kv_ref_store_f64(KV_U8, &u8, 300.7);
    assert_int_equal(u8, 44); /* 300 mod 256 */
    kv_ref_store_f64(KV_I8, &i8, -129.9);
    assert_int_equal(i8, 127); /* -129 wraps */
    kv_ref_store_f64(KV_I32, &i32, -2.9);
    assert_int_equal(i32, -2); /* toward zero */
    kv_ref_store_f64(KV_I64, &i64, NAN);
    assert_int_equal(i64, 0);
    kv_ref_store_f64(KV_I64, &i64, -INFINITY);
    assert_int_equal(i64, 0);
    /* 2^64 + 2^12 reduces modulo 2^64 to 4096. */
    kv_ref_store_f64(KV_I64, &i64, 18446744073709555712.0);
    assert_int_equal(i64, 4096);
    /* 2^63 wraps to INT64_MIN. */
    kv_ref_store_f64(KV_I64, &i64, 9223372036854775808.0);
    assert_true(i64 == INT64_MIN);
    const float f = -3.75f;
    assert_int_equal(kv_ref_load_i64(KV_F32, &f), -3);
}

static void test_value_half_single_rounding(void **state) {
    (void)state;
    uint16_t h;
    /* 1 + 2^-11 + 2^-30: above the f16 midpoint, so it rounds up; through
     * f32 the 2^-30 would be lost and the tie would round down to 1.0. */
    kv_ref_store_f64(KV_F16, &h, 1.0 + ldexp(1, -11) + ldexp(1, -30));
    assert_int_equal(h, 0x3C01);
    kv_ref_store_f64(KV_BF16, &h, 1.0 + ldexp(1, -8) + ldexp(1, -30));
    assert_int_equal(h, 0x3F81);
    /* An exact tie goes to even. */
    kv_ref_store_f64(KV_BF16, &h, 1.0 + ldexp(1, -8));
    assert_int_equal(h, 0x3F80);
    const uint16_t half_two = 0x4000;
    assert_true(kv_ref_load_f64(KV_F16, &half_two) == 2.0);
}

static void test_value_convert(void **state) {
    (void)state;
    /* i64 -> f32 rounds once: 2^60 + 2^36 + 1 is just above the f32
     * midpoint (via double it would be a tie and round down to 2^60). */
    const int64_t big = (INT64_C(1) << 60) + (INT64_C(1) << 36) + 1;
    float f;
    kv_ref_convert(KV_F32, &f, KV_I64, &big);
    assert_true((double)f == ldexp(1, 60) + ldexp(1, 37));
    uint8_t b;
    const double nan = NAN;
    kv_ref_convert(KV_BOOL, &b, KV_F64, &nan);
    assert_int_equal(b, 1);
    const float c[2] = { 0.0f, 1.0f };
    kv_ref_convert(KV_BOOL, &b, KV_C64, c);
    assert_int_equal(b, 1);
    const double z[2] = { 2.5, -7.0 };
    double re;
    kv_ref_convert(KV_F64, &re, KV_C128, z);
    assert_true(re == 2.5);
    int16_t s;
    const double m = -40000.0;
    kv_ref_convert(KV_I16, &s, KV_F64, &m);
    assert_int_equal(s, 25536); /* -40000 + 65536 */
    double out[2];
    const int32_t seven = 7;
    kv_ref_convert(KV_C128, out, KV_I32, &seven);
    assert_true(out[0] == 7.0 && out[1] == 0.0);
}

/* ---- iterator ---- */

static void test_iter_order_and_broadcast(void **state) {
    (void)state;
    const float a[6] = { 0, 1, 2, 3, 4, 5 };     /* [3, 2], read transposed as [2, 3] */
    const float row[3] = { 10, 20, 30 };
    kv_tensor *base = f32t(SZ(3, 2), 2, a);
    kv_tensor *ta = transposed(base);
    kv_tensor *r = f32t(SZ(3), 1, row);
    kv_tensor *ops[2] = { ta, r };
    kv_ref_iter it;
    assert_int_equal(kv_ref_iter_init(&it, SZ(2, 3), 2, ops, 2), KV_OK);
    const float want_a[6] = { 0, 2, 4, 1, 3, 5 };
    const float want_r[6] = { 10, 20, 30, 10, 20, 30 };
    int n = 0;
    while (kv_ref_iter_next(&it)) {
        assert_true(n < 6);
        assert_true(*(const float *)it.ptr[0] == want_a[n]);
        assert_true(*(const float *)it.ptr[1] == want_r[n]);
        assert_int_equal(it.index[0], n / 3);
        assert_int_equal(it.index[1], n % 3);
        n++;
    }
    assert_int_equal(n, 6);
    kv_tensor_release(ta);
    kv_tensor_release(base);
    kv_tensor_release(r);
}

static void test_iter_zero_dim_and_zero_size(void **state) {
    (void)state;
    const float v = 4.0f;
    kv_tensor *s = f32t(NULL, 0, &v);
    kv_tensor *ops[1] = { s };
    kv_ref_iter it;
    assert_int_equal(kv_ref_iter_init(&it, NULL, 0, ops, 1), KV_OK);
    assert_true(kv_ref_iter_next(&it));
    assert_true(*(const float *)it.ptr[0] == 4.0f);
    assert_false(kv_ref_iter_next(&it));
    kv_tensor *e = kv_tensor_empty(SZ(2, 0, 3), 3, KV_F32, KV_DEVICE_CPU0);
    ops[0] = e;
    assert_int_equal(kv_ref_iter_init(&it, SZ(2, 0, 3), 3, ops, 1), KV_OK);
    assert_false(kv_ref_iter_next(&it));
    kv_tensor_release(s);
    kv_tensor_release(e);
}

/* ---- factories ---- */

static void test_factories(void **state) {
    (void)state;
    kv_tensor *z = kv_zeros(LIST(2, 3), NULL, NULL, NULL, NULL);
    check_meta(z, KV_F32, SZ(2, 3), 2);
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(z)[i], 0.0f);
    const kv_dtype i64 = KV_I64;
    kv_tensor *o = kv_ones(LIST(4), &i64, NULL, NULL, NULL);
    check_meta(o, KV_I64, SZ(4), 1);
    for (int i = 0; i < 4; i++) assert_int_equal(i64d(o)[i], 1);
    kv_tensor *e = kv_empty(LIST(3, 0), NULL, NULL, NULL, NULL, NULL);
    check_meta(e, KV_F32, SZ(3, 0), 2);
    const kv_device cpu = KV_DEVICE_CPU0;
    const int64_t strided = 0;
    const bool no = false;
    kv_tensor *s = kv_zeros((kv_int_list){ NULL, 0 }, NULL, &strided, &cpu, &no);
    check_meta(s, KV_F32, NULL, 0);
    kv_tensor_release(z);
    kv_tensor_release(o);
    kv_tensor_release(e);
    kv_tensor_release(s);
}

static void test_full_infers_dtype(void **state) {
    (void)state;
    kv_tensor *a = kv_full(LIST(2), kv_scalar_int(7), NULL, NULL, NULL, NULL);
    check_meta(a, KV_I64, SZ(2), 1);
    assert_int_equal(i64d(a)[1], 7);
    kv_tensor *b = kv_full(LIST(2), kv_scalar_bool(true), NULL, NULL, NULL, NULL);
    check_meta(b, KV_BOOL, SZ(2), 1);
    assert_int_equal(u8d(b)[0], 1);
    kv_tensor *c = kv_full(LIST(1), kv_scalar_double(0.1), NULL, NULL, NULL, NULL);
    check_meta(c, KV_F32, SZ(1), 1);
    assert_f32_is(f32d(c)[0], 0.1f);
    kv_tensor *d = kv_full(LIST(1), kv_scalar_complex(1.5, -2.0), NULL, NULL, NULL, NULL);
    check_meta(d, KV_C64, SZ(1), 1);
    assert_f32_is(f32d(d)[0], 1.5f);
    assert_f32_is(f32d(d)[1], -2.0f);
    const kv_dtype f16 = KV_F16;
    kv_tensor *h = kv_full(LIST(1), kv_scalar_double(1.0 / 3.0), &f16, NULL, NULL, NULL);
    assert_int_equal(u16d(h)[0], 0x3555); /* 1/3 in f16: 0.333251953125 */
    kv_tensor_release(a);
    kv_tensor_release(b);
    kv_tensor_release(c);
    kv_tensor_release(d);
    kv_tensor_release(h);
}

static void test_arange(void **state) {
    (void)state;
    kv_tensor *a = kv_arange(kv_scalar_int(5), NULL, NULL, NULL, NULL);
    check_meta(a, KV_I64, SZ(5), 1);
    for (int i = 0; i < 5; i++) assert_int_equal(i64d(a)[i], i);
    kv_tensor *b = kv_arange(kv_scalar_double(2.5), NULL, NULL, NULL, NULL);
    check_meta(b, KV_F32, SZ(3), 1);
    assert_f32_is(f32d(b)[2], 2.0f);
    const kv_dtype f16 = KV_F16;
    kv_tensor *h = kv_arange(kv_scalar_int(2050), &f16, NULL, NULL, NULL);
    check_meta(h, KV_F16, SZ(2050), 1);
    assert_int_equal(u16d(h)[2047], 0x67FF); /* 2047 */
    assert_int_equal(u16d(h)[2048], 0x6800); /* 2048 */
    assert_int_equal(u16d(h)[2049], 0x6800); /* 2049 ties to even: 2048 */
    kv_tensor *z = kv_arange(kv_scalar_int(0), NULL, NULL, NULL, NULL);
    check_meta(z, KV_I64, SZ(0), 1);
    kv_tensor_release(a);
    kv_tensor_release(b);
    kv_tensor_release(h);
    kv_tensor_release(z);
}

static void test_factory_errors(void **state) {
    (void)state;
    expect_null_error(kv_zeros(LIST(2, -1), NULL, NULL, NULL, NULL), KV_ERR_NEGATIVE_SIZE, "zeros");
    expect_null_error(kv_empty(LIST(-3), NULL, NULL, NULL, NULL, NULL), KV_ERR_NEGATIVE_SIZE, "empty");
    expect_null_error(kv_full(LIST(-1), kv_scalar_int(1), NULL, NULL, NULL, NULL), KV_ERR_NEGATIVE_SIZE, "full");
    const int64_t sparse = 1;
    expect_null_error(kv_zeros(LIST(2), NULL, &sparse, NULL, NULL), KV_ERR_INVALID_ARG, "zeros");
    const bool yes = true;
    expect_null_error(kv_zeros(LIST(2), NULL, NULL, NULL, &yes), KV_ERR_INVALID_ARG, "zeros");
    const int64_t channels_last = 2, preserve = 1;
    expect_null_error(kv_empty(LIST(1, 2, 3, 4), NULL, NULL, NULL, NULL, &channels_last), KV_ERR_INVALID_ARG,
                      "empty");
    expect_null_error(kv_empty(LIST(2), NULL, NULL, NULL, NULL, &preserve), KV_ERR_INVALID_ARG, "empty");
    const kv_dtype u8 = KV_U8;
    expect_null_error(kv_full(LIST(2), kv_scalar_int(300), &u8, NULL, NULL, NULL), KV_ERR_INVALID_ARG, "full");
    expect_null_error(kv_arange(kv_scalar_int(-1), NULL, NULL, NULL, NULL), KV_ERR_INVALID_ARG, "arange");
    expect_null_error(kv_arange(kv_scalar_double(-0.5), NULL, NULL, NULL, NULL), KV_ERR_INVALID_ARG, "arange");
    expect_null_error(kv_arange(kv_scalar_double(NAN), NULL, NULL, NULL, NULL), KV_ERR_INVALID_ARG, "arange");
    const kv_dtype b = KV_BOOL;
    expect_null_error(kv_arange(kv_scalar_int(3), &b, NULL, NULL, NULL), KV_ERR_DTYPE, "arange");
}

/* ---- fill_, zero_, copy_, clone, contiguous, _to_copy ---- */

static void test_fill_through_strides(void **state) {
    (void)state;
    const float v[6] = { 1, 2, 3, 4, 5, 6 };
    kv_tensor *base = f32t(SZ(2, 3), 2, v);
    /* Column 1 of the [2, 3] tensor: offset 1, stride 3. */
    kv_tensor *col = kv_tensor_view(base, SZ(2), SZ(3), 1, 1);
    const int64_t v0 = kv_tensor_version(base);
    assert_int_equal(kv_fill_(col, kv_scalar_double(-0.5)), KV_OK);
    const float want[6] = { 1, -0.5f, 3, 4, -0.5f, 6 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(base)[i], want[i]);
    assert_true(kv_tensor_version(base) > v0);
    assert_int_equal(kv_zero_(col), KV_OK);
    assert_f32_is(f32d(base)[4], 0.0f);
    assert_f32_is(f32d(base)[3], 4.0f);
    /* An expanded tensor may be filled: every write stores the same value. */
    kv_tensor *bc = kv_tensor_view(base, SZ(4), SZ(0), 1, 0);
    assert_int_equal(kv_fill_(bc, kv_scalar_int(9)), KV_OK);
    assert_f32_is(f32d(base)[0], 9.0f);
    const int32_t iv[2] = { 1, 2 };
    kv_tensor *it = i32t(SZ(2), 1, iv);
    assert_int_equal(kv_fill_(it, kv_scalar_double(2.7)), KV_OK);
    assert_int_equal(i32d(it)[1], 2);
    kv_tensor *u = kv_zeros(LIST(2), &(kv_dtype){ KV_U8 }, NULL, NULL, NULL);
    expect_error(kv_fill_(u, kv_scalar_int(256)), KV_ERR_INVALID_ARG, "fill_");
    kv_tensor_release(u);
    kv_tensor_release(it);
    kv_tensor_release(bc);
    kv_tensor_release(col);
    kv_tensor_release(base);
}

static void test_copy_broadcast_and_convert(void **state) {
    (void)state;
    kv_tensor *self = kv_zeros(LIST(2, 3), &(kv_dtype){ KV_I32 }, NULL, NULL, NULL);
    const double src_v[3] = { 1.9, -2.9, 300.0 };
    kv_tensor *src = f64t(SZ(3), 1, src_v);
    assert_int_equal(kv_copy_(self, src, false), KV_OK);
    const int32_t want[6] = { 1, -2, 300, 1, -2, 300 };
    for (int i = 0; i < 6; i++) assert_int_equal(i32d(self)[i], want[i]);
    /* Into a transposed destination. */
    const float m[6] = { 1, 2, 3, 4, 5, 6 };
    kv_tensor *mt = f32t(SZ(2, 3), 2, m);
    kv_tensor *dst_base = kv_zeros(LIST(3, 2), NULL, NULL, NULL, NULL);
    kv_tensor *dst = transposed(dst_base); /* [2, 3] view of a [3, 2] tensor */
    assert_int_equal(kv_copy_(dst, mt, false), KV_OK);
    const float want_t[6] = { 1, 4, 2, 5, 3, 6 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(dst_base)[i], want_t[i]);
    kv_tensor_release(dst);
    kv_tensor_release(dst_base);
    kv_tensor_release(mt);
    kv_tensor_release(self);
    kv_tensor_release(src);
}

static void test_copy_overlap(void **state) {
    (void)state;
    const float v[4] = { 1, 2, 3, 4 };
    kv_tensor *base = f32t(SZ(4), 1, v);
    /* dst = base[1:4], src = base[0:3]: a snapshot copy shifts right. */
    kv_tensor *dst = kv_tensor_view(base, SZ(3), SZ(1), 1, 1);
    kv_tensor *src = kv_tensor_view(base, SZ(3), SZ(1), 1, 0);
    assert_int_equal(kv_copy_(dst, src, false), KV_OK);
    const float want[4] = { 1, 1, 2, 3 };
    for (int i = 0; i < 4; i++) assert_f32_is(f32d(base)[i], want[i]);
    /* Writing through stride 0 is refused. */
    kv_tensor *bc = kv_tensor_view(base, SZ(3), SZ(0), 1, 0);
    expect_error(kv_copy_(bc, src, false), KV_ERR_INVALID_ARG, "copy_");
    kv_tensor *wrong = kv_zeros(LIST(2), NULL, NULL, NULL, NULL);
    expect_error(kv_copy_(wrong, src, false), KV_ERR_SHAPE, "copy_");
    kv_tensor_release(wrong);
    kv_tensor_release(bc);
    kv_tensor_release(dst);
    kv_tensor_release(src);
    kv_tensor_release(base);
}

static void test_clone_contiguous_to_copy(void **state) {
    (void)state;
    const float v[6] = { 1, 2, 3, 4, 5, 6 };
    kv_tensor *base = f32t(SZ(2, 3), 2, v);
    kv_tensor *t = transposed(base);
    /* memory_format=preserve, the default: a transposed (non-overlapping
     * and dense) self gives a transposed copy, its bytes in self's order;
     * contiguous_format gives row-major. */
    const int64_t rowmajor = KV_MEMORY_FORMAT_CONTIGUOUS, preserve = KV_MEMORY_FORMAT_PRESERVE;
    const int64_t *formats[2] = { NULL, &preserve };
    for (int f = 0; f < 2; f++) {
        kv_tensor *p = kv_clone(t, formats[f]);
        assert_non_null(p);
        assert_int_equal(p->strides[0], 1);
        assert_int_equal(p->strides[1], 3);
        assert_int_equal(p->offset, 0);
        for (int i = 0; i < 6; i++) assert_f32_is(f32d(p)[i], v[i]);
        assert_true(kv_tensor_data(p) != kv_tensor_data(base));
        kv_tensor *w = kv__to_copy(t, &(kv_dtype){ KV_F64 }, NULL, NULL, NULL, false, formats[f]);
        assert_non_null(w);
        assert_int_equal(w->strides[0], 1);
        assert_int_equal(w->strides[1], 3);
        for (int i = 0; i < 6; i++) assert_true(f64d(w)[i] == (double)v[i]);
        kv_tensor_release(w);
        kv_tensor_release(p);
    }
    /* Not dense (every other column): the dense strides of its order. */
    kv_tensor *gaps = kv_tensor_view(base, SZ(2, 2), SZ(3, 2), 2, 0);
    kv_tensor *g = kv_clone(gaps, NULL);
    check_meta(g, KV_F32, SZ(2, 2), 2);
    assert_f32_is(f32d(g)[1], 3.0f);
    kv_tensor_release(g);
    kv_tensor_release(gaps);
    kv_tensor *c = kv_clone(t, &rowmajor);
    check_meta(c, KV_F32, SZ(3, 2), 2);
    const float want[6] = { 1, 4, 2, 5, 3, 6 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(c)[i], want[i]);
    assert_true(kv_tensor_data(c) != kv_tensor_data(base));
    kv_tensor *same = kv_contiguous(base, 0);
    assert_non_null(same);
    assert_ptr_equal(kv_tensor_data(same), kv_tensor_data(base)); /* an alias */
    kv_tensor *copy = kv_contiguous(t, 0);
    check_meta(copy, KV_F32, SZ(3, 2), 2);
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(copy)[i], want[i]);
    expect_null_error(kv_contiguous(t, 1), KV_ERR_INVALID_ARG, "contiguous");
    expect_null_error(kv_clone(t, &(int64_t){ 2 }), KV_ERR_INVALID_ARG, "clone");

    const float r[2] = { 1.0f + 0x1p-11f + 0x1p-20f, 65520.0f };
    kv_tensor *rt = f32t(SZ(2), 1, r);
    kv_tensor *h = kv__to_copy(rt, &(kv_dtype){ KV_F16 }, NULL, NULL, NULL, false, NULL);
    check_meta(h, KV_F16, SZ(2), 1);
    assert_int_equal(u16d(h)[0], 0x3C01); /* above the midpoint: up */
    assert_int_equal(u16d(h)[1], 0x7C00); /* 65520 rounds to +inf */
    kv_tensor *same_dt = kv__to_copy(t, NULL, NULL, &(kv_device){ KV_DEVICE_CPU, 0 }, NULL, false, &rowmajor);
    check_meta(same_dt, KV_F32, SZ(3, 2), 2);
    assert_f32_is(f32d(same_dt)[1], 4.0f);
    expect_null_error(kv__to_copy(t, NULL, NULL, &(kv_device){ KV_DEVICE_SIM, 0 }, NULL, false, NULL), KV_ERR_DEVICE,
                      "_to_copy");
    kv_tensor_release(same_dt);
    kv_tensor_release(h);
    kv_tensor_release(rt);
    kv_tensor_release(copy);
    kv_tensor_release(same);
    kv_tensor_release(c);
    kv_tensor_release(t);
    kv_tensor_release(base);
}

/* ---- binary ---- */

static void test_add_broadcast_alpha(void **state) {
    (void)state;
    const float a[6] = { 1, 2, 3, 4, 5, 6 };
    const float b[3] = { 10, 20, 30 };
    kv_tensor *ta = f32t(SZ(2, 3), 2, a), *tb = f32t(SZ(3), 1, b);
    kv_tensor *r = kv_add(ta, tb, kv_scalar_double(0.5));
    check_meta(r, KV_F32, SZ(2, 3), 2);
    const float want[6] = { 6, 12, 18, 9, 15, 21 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(r)[i], want[i]);
    /* A transposed operand: [3, 2]^T + [2, 3]. */
    kv_tensor *base = f32t(SZ(3, 2), 2, a);
    kv_tensor *t = transposed(base); /* [[1, 3, 5], [2, 4, 6]] */
    kv_tensor *r2 = kv_sub(t, ta, kv_scalar_int(1));
    const float want2[6] = { 0, 1, 2, -2, -1, 0 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(r2)[i], want2[i]);
    kv_tensor_release(r2);
    kv_tensor_release(t);
    kv_tensor_release(base);
    kv_tensor_release(r);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_integer_wrap(void **state) {
    (void)state;
    const int8_t a[3] = { 100, -128, 127 }, b[3] = { 100, -1, 1 };
    kv_tensor *ta = mk(KV_I8, SZ(3), 1, a), *tb = mk(KV_I8, SZ(3), 1, b);
    kv_tensor *r = kv_add(ta, tb, kv_scalar_int(1));
    check_meta(r, KV_I8, SZ(3), 1);
    const int8_t *rd = kv_tensor_data(r);
    assert_int_equal(rd[0], -56);
    assert_int_equal(rd[1], 127);
    assert_int_equal(rd[2], -128);
    const int64_t x[2] = { INT64_MAX, INT64_MIN }, y[2] = { 1, 1 };
    kv_tensor *tx = i64t(SZ(2), 1, x), *ty = i64t(SZ(2), 1, y);
    kv_tensor *s = kv_add(tx, ty, kv_scalar_int(1));
    assert_true(i64d(s)[0] == INT64_MIN);
    kv_tensor *d = kv_sub(tx, ty, kv_scalar_int(3));
    assert_true(i64d(d)[1] == INT64_MAX - 2);
    const int32_t m[1] = { 65536 };
    kv_tensor *tm = i32t(SZ(1), 1, m);
    kv_tensor *p = kv_mul(tm, tm);
    assert_int_equal(i32d(p)[0], 0); /* 2^32 wraps to 0 */
    kv_tensor *n = kv_neg(ta);
    assert_int_equal(((const int8_t *)kv_tensor_data(n))[1], -128);
    kv_tensor_release(n);
    kv_tensor_release(p);
    kv_tensor_release(tm);
    kv_tensor_release(d);
    kv_tensor_release(s);
    kv_tensor_release(tx);
    kv_tensor_release(ty);
    kv_tensor_release(r);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_promotion_casts_first(void **state) {
    (void)state;
    /* i64 + f32 -> f32, the i64 cast to f32 first: f32(16777217) = 2^24,
     * + 1 is a tie that rounds to even, 2^24. */
    const int64_t a[1] = { 16777217 };
    const float b[1] = { 1.0f };
    kv_tensor *ta = i64t(SZ(1), 1, a), *tb = f32t(SZ(1), 1, b);
    kv_tensor *r = kv_add(ta, tb, kv_scalar_int(1));
    check_meta(r, KV_F32, SZ(1), 1);
    assert_f32_is(f32d(r)[0], 16777216.0f);
    const float z[1] = { 16777216.0f };
    kv_tensor *tz = f32t(SZ(1), 1, z);
    kv_tensor *e = kv_eq(ta, tz);
    check_meta(e, KV_BOOL, SZ(1), 1);
    assert_int_equal(u8d(e)[0], 1);
    /* bool + bool stays bool (logical or). */
    const uint8_t t1[2] = { 1, 0 };
    kv_tensor *tt = boolt(SZ(2), 1, t1);
    kv_tensor *bb = kv_add(tt, tt, kv_scalar_bool(true));
    check_meta(bb, KV_BOOL, SZ(2), 1);
    assert_int_equal(u8d(bb)[0], 1);
    assert_int_equal(u8d(bb)[1], 0);
    kv_tensor_release(bb);
    kv_tensor_release(tt);
    kv_tensor_release(e);
    kv_tensor_release(tz);
    kv_tensor_release(r);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_half_rounding(void **state) {
    (void)state;
    /* bf16: (1 + 2^-7) + 2^-8 = 1 + 3*2^-8, a tie -> even 1 + 2^-6. */
    const uint16_t a[1] = { 0x3F81 }, b[1] = { 0x3B80 };
    kv_tensor *ta = mk(KV_BF16, SZ(1), 1, a), *tb = mk(KV_BF16, SZ(1), 1, b);
    kv_tensor *r = kv_add(ta, tb, kv_scalar_int(1));
    check_meta(r, KV_BF16, SZ(1), 1);
    assert_int_equal(u16d(r)[0], 0x3F82);
    /* f16: (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 -> 1 + 2^-9. */
    const uint16_t h[1] = { 0x3C01 };
    kv_tensor *th = mk(KV_F16, SZ(1), 1, h);
    kv_tensor *p = kv_mul(th, th);
    check_meta(p, KV_F16, SZ(1), 1);
    assert_int_equal(u16d(p)[0], 0x3C02);
    /* f16 / f16: 1/3 -> 0x3555. */
    const uint16_t one[1] = { 0x3C00 }, three[1] = { 0x4200 };
    kv_tensor *t1 = mk(KV_F16, SZ(1), 1, one), *t3 = mk(KV_F16, SZ(1), 1, three);
    kv_tensor *q = kv_div(t1, t3);
    assert_int_equal(u16d(q)[0], 0x3555);
    kv_tensor_release(q);
    kv_tensor_release(t1);
    kv_tensor_release(t3);
    kv_tensor_release(p);
    kv_tensor_release(th);
    kv_tensor_release(r);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_inplace_add_mul(void **state) {
    (void)state;
    const float a[6] = { 1, 2, 3, 4, 5, 6 };
    const float b[3] = { 1, 2, 3 };
    kv_tensor *ta = f32t(SZ(2, 3), 2, a), *tb = f32t(SZ(3), 1, b);
    const int64_t v0 = kv_tensor_version(ta);
    assert_int_equal(kv_add_(ta, tb, kv_scalar_int(2)), KV_OK);
    const float want[6] = { 3, 6, 9, 6, 9, 12 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(ta)[i], want[i]);
    assert_true(kv_tensor_version(ta) > v0);
    assert_int_equal(kv_mul_(ta, tb), KV_OK);
    assert_f32_is(f32d(ta)[5], 36.0f);
    /* f16 self with an f32 other: computed as f32, stored as f16. */
    const uint16_t h[1] = { 0x3C00 };
    kv_tensor *th = mk(KV_F16, SZ(1), 1, h);
    const float third[1] = { 1.0f / 3.0f };
    kv_tensor *tt = f32t(SZ(1), 1, third);
    assert_int_equal(kv_mul_(th, tt), KV_OK);
    assert_int_equal(u16d(th)[0], 0x3555);
    /* self = self.t() + self would read what it already wrote; the driver
     * snapshots the aliased operand. */
    const float sq[4] = { 1, 2, 3, 4 };
    kv_tensor *s = f32t(SZ(2, 2), 2, sq);
    kv_tensor *st = transposed(s);
    assert_int_equal(kv_add_(s, st, kv_scalar_int(1)), KV_OK);
    const float want_sq[4] = { 2, 5, 5, 8 };
    for (int i = 0; i < 4; i++) assert_f32_is(f32d(s)[i], want_sq[i]);
    kv_tensor_release(st);
    kv_tensor_release(s);
    kv_tensor_release(tt);
    kv_tensor_release(th);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_div_max_min_pow(void **state) {
    (void)state;
    const int64_t a[3] = { 7, -7, 1 }, b[3] = { 2, 2, 0 };
    kv_tensor *ta = i64t(SZ(3), 1, a), *tb = i64t(SZ(3), 1, b);
    kv_tensor *q = kv_div(ta, tb);
    check_meta(q, KV_F32, SZ(3), 1);
    assert_f32_is(f32d(q)[0], 3.5f);
    assert_f32_is(f32d(q)[1], -3.5f);
    assert_f32_is(f32d(q)[2], INFINITY);
    const float x[4] = { 1, NAN, -0.0f, 5 }, y[4] = { 2, 1, 0.0f, NAN };
    kv_tensor *tx = f32t(SZ(4), 1, x), *ty = f32t(SZ(4), 1, y);
    kv_tensor *mx = kv_maximum(tx, ty), *mn = kv_minimum(tx, ty);
    assert_f32_is(f32d(mx)[0], 2.0f);
    assert_true(isnan(f32d(mx)[1]));
    assert_f32_is(f32d(mx)[2], 0.0f);
    assert_true(isnan(f32d(mx)[3]));
    assert_f32_is(f32d(mn)[0], 1.0f);
    assert_f32_is(f32d(mn)[2], -0.0f);
    assert_true(isnan(f32d(mn)[3]));
    kv_tensor *mi = kv_maximum(ta, tb);
    check_meta(mi, KV_I64, SZ(3), 1);
    assert_int_equal(i64d(mi)[1], 2);
    /* pow: integer by squaring with wrap, float via pow(). */
    const uint8_t u[3] = { 2, 3, 0 };
    kv_tensor *tu = mk(KV_U8, SZ(3), 1, u);
    kv_tensor *p9 = kv_pow(tu, kv_scalar_int(9));
    check_meta(p9, KV_U8, SZ(3), 1);
    assert_int_equal(u8d(p9)[0], 0);   /* 512 mod 256 */
    assert_int_equal(u8d(p9)[1], 227); /* 19683 mod 256 */
    kv_tensor *p0 = kv_pow(tu, kv_scalar_int(0));
    assert_int_equal(u8d(p0)[2], 1);   /* 0^0 */
    const int64_t three[1] = { 3 };
    kv_tensor *t3 = i64t(SZ(1), 1, three);
    kv_tensor *p41 = kv_pow(t3, kv_scalar_int(41));
    /* 3^41 = 36472996377170786403 = 2^64 + 18026252303461234787. */
    assert_true((uint64_t)i64d(p41)[0] == UINT64_C(18026252303461234787));
    kv_tensor *pf = kv_pow(t3, kv_scalar_double(0.5));
    check_meta(pf, KV_F32, SZ(1), 1);
    assert_f32_is(f32d(pf)[0], (float)sqrt(3.0));
    const float two[1] = { 2.0f };
    kv_tensor *t2 = f32t(SZ(1), 1, two);
    kv_tensor *pc = kv_pow(t2, kv_scalar_complex(0.0, 1.0)); /* 2^i = e^(i ln 2) */
    check_meta(pc, KV_C64, SZ(1), 1);
    assert_true(fabs(f32d(pc)[0] - cos(log(2.0))) < 1e-6);
    assert_true(fabs(f32d(pc)[1] - sin(log(2.0))) < 1e-6);
    kv_tensor_release(pc);
    kv_tensor_release(t2);
    kv_tensor_release(pf);
    kv_tensor_release(p41);
    kv_tensor_release(t3);
    kv_tensor_release(p0);
    kv_tensor_release(p9);
    kv_tensor_release(tu);
    kv_tensor_release(mi);
    kv_tensor_release(mx);
    kv_tensor_release(mn);
    kv_tensor_release(tx);
    kv_tensor_release(ty);
    kv_tensor_release(q);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_complex_arith(void **state) {
    (void)state;
    const float a[2] = { 1, 2 }, b[2] = { 3, -1 }; /* (1+2i), (3-i) */
    kv_tensor *ta = mk(KV_C64, SZ(1), 1, a), *tb = mk(KV_C64, SZ(1), 1, b);
    kv_tensor *p = kv_mul(ta, tb);          /* 5 + 5i */
    assert_f32_is(f32d(p)[0], 5.0f);
    assert_f32_is(f32d(p)[1], 5.0f);
    kv_tensor *q = kv_div(ta, tb);          /* (1+2i)/(3-i) = (1 + 7i)/10 */
    assert_f32_is(f32d(q)[0], 0.1f);
    assert_f32_is(f32d(q)[1], 0.7f);
    kv_tensor *s = kv_add(ta, tb, kv_scalar_complex(0, 1)); /* 1+2i + i(3-i) = 2 + 5i */
    assert_f32_is(f32d(s)[0], 2.0f);
    assert_f32_is(f32d(s)[1], 5.0f);
    kv_tensor_release(s);
    kv_tensor_release(q);
    kv_tensor_release(p);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_binary_errors(void **state) {
    (void)state;
    const float a[6] = { 0 };
    const int64_t ia[3] = { 1, 2, 3 };
    const uint8_t ba[3] = { 1, 0, 1 };
    kv_tensor *f23 = f32t(SZ(2, 3), 2, a), *f4 = f32t(SZ(4), 1, a), *f3 = f32t(SZ(3), 1, a);
    kv_tensor *i3 = i64t(SZ(3), 1, ia), *b3 = boolt(SZ(3), 1, ba);
    kv_tensor *c3 = kv_zeros(LIST(3), &(kv_dtype){ KV_C64 }, NULL, NULL, NULL);
    expect_null_error(kv_add(f23, f4, kv_scalar_int(1)), KV_ERR_SHAPE, "add.Tensor");
    assert_non_null(strstr(kv_last_error_message(), "[2, 3]"));
    assert_non_null(strstr(kv_last_error_message(), "[4]"));
    expect_null_error(kv_mul(f4, f3), KV_ERR_SHAPE, "mul.Tensor");
    expect_null_error(kv_add(i3, i3, kv_scalar_double(1.5)), KV_ERR_INVALID_ARG, "add.Tensor");
    expect_null_error(kv_sub(i3, i3, kv_scalar_bool(true)), KV_ERR_INVALID_ARG, "sub.Tensor");
    expect_null_error(kv_add(f3, f3, kv_scalar_complex(1, 1)), KV_ERR_INVALID_ARG, "add.Tensor");
    expect_null_error(kv_sub(b3, b3, kv_scalar_int(1)), KV_ERR_DTYPE, "sub.Tensor");
    expect_null_error(kv_sub(b3, f3, kv_scalar_int(1)), KV_ERR_DTYPE, "sub.Tensor");
    expect_null_error(kv_maximum(c3, f3), KV_ERR_DTYPE, "maximum");
    expect_null_error(kv_minimum(f3, c3), KV_ERR_DTYPE, "minimum");
    expect_null_error(kv_pow(i3, kv_scalar_int(-2)), KV_ERR_INVALID_ARG, "pow.Tensor_Scalar");
    expect_error(kv_add_(i3, f3, kv_scalar_int(1)), KV_ERR_DTYPE, "add_.Tensor");
    assert_non_null(strstr(kv_last_error_message(), "f32"));
    expect_error(kv_mul_(i3, f3), KV_ERR_DTYPE, "mul_.Tensor");
    expect_error(kv_add_(f3, f23, kv_scalar_int(1)), KV_ERR_SHAPE, "add_.Tensor");
    kv_tensor *bc = kv_tensor_view(f3, SZ(3), SZ(0), 1, 0);
    expect_error(kv_mul_(bc, f3), KV_ERR_INVALID_ARG, "mul_.Tensor");
    kv_tensor_release(bc);
    kv_tensor_release(c3);
    kv_tensor_release(b3);
    kv_tensor_release(i3);
    kv_tensor_release(f23);
    kv_tensor_release(f4);
    kv_tensor_release(f3);
}

/* An input on another device reaches the kernel only when called directly
 * (dispatch would pick that device's kernel). */
static void *fake_alloc(void *ctx, size_t n) {
    (void)ctx;
    return calloc(1, n ? n : 1);
}
static void fake_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    free(p);
}

static void test_device_errors(void **state) {
    (void)state;
    static const kv_allocator_iface iface = { fake_alloc, fake_free };
    kv_allocator_install(KV_DEVICE_SIM, &iface, NULL);
    kv_tensor *s = kv_tensor_empty(SZ(2), 1, KV_F32, (kv_device){ KV_DEVICE_SIM, 0 });
    assert_non_null(s);
    kv_tensor *c = kv_zeros(LIST(2), NULL, NULL, NULL, NULL);
    kv_ivalue slots[6];
    kv_stack st = kv_stack_on(slots, 6);
    kv_push_tensor(&st, c);
    kv_push_tensor(&st, s);
    kv_push_scalar(&st, kv_scalar_int(1));
    expect_error(kv_ref_add(NULL, 0, &st), KV_ERR_DEVICE, "add.Tensor");
    st = kv_stack_on(slots, 6);
    kv_push_tensor(&st, s);
    expect_error(kv_ref_exp(NULL, 0, &st), KV_ERR_DEVICE, "exp");
    st = kv_stack_on(slots, 6);
    kv_push_tensor(&st, c);
    kv_push_tensor(&st, s);
    kv_push_bool(&st, false);
    expect_error(kv_ref_copy_(NULL, 0, &st), KV_ERR_DEVICE, "copy_");
    /* A factory asked for another device (dispatch would route it to
     * that device's kernel, so call the reference directly). */
    st = kv_stack_on(slots, 6);
    kv_push_ints(&st, LIST(2));
    kv_push_none(&st);
    kv_push_none(&st);
    kv_push_device(&st, (kv_device){ KV_DEVICE_SIM, 0 });
    kv_push_none(&st);
    expect_error(kv_ref_ones(NULL, 0, &st), KV_ERR_DEVICE, "ones");
    kv_tensor_release(s);
    kv_tensor_release(c);
    kv_allocator_install(KV_DEVICE_SIM, NULL, NULL);
}

/* ---- unary ---- */

static void test_unary_math(void **state) {
    (void)state;
    const int64_t iv[2] = { 1, 4 };
    kv_tensor *ti = i64t(SZ(2), 1, iv);
    kv_tensor *e = kv_exp(ti);
    check_meta(e, KV_F32, SZ(2), 1);
    assert_f32_is(f32d(e)[0], (float)exp(1.0));
    kv_tensor *sq = kv_sqrt(ti);
    assert_f32_is(f32d(sq)[1], 2.0f);
    kv_tensor *rs = kv_rsqrt(ti);
    assert_f32_is(f32d(rs)[1], 0.5f);
    kv_tensor *lg = kv_log(ti);
    assert_f32_is(f32d(lg)[0], 0.0f);
    assert_f32_is(f32d(lg)[1], (float)log(4.0));
    const double dv[3] = { 0.0, 1.0, -2.0 };
    kv_tensor *td = f64t(SZ(3), 1, dv);
    kv_tensor *sn = kv_sin(td), *cs = kv_cos(td), *th = kv_tanh(td), *sg = kv_sigmoid(td);
    check_meta(sn, KV_F64, SZ(3), 1);
    assert_true(f64d(sn)[1] == sin(1.0));
    assert_true(f64d(cs)[0] == 1.0);
    assert_true(f64d(th)[2] == tanh(-2.0));
    assert_true(f64d(sg)[0] == 0.5);
    assert_true(f64d(sg)[2] == 1.0 / (1.0 + exp(2.0)));
    const uint8_t bv[2] = { 1, 0 };
    kv_tensor *tb = boolt(SZ(2), 1, bv);
    kv_tensor *eb = kv_exp(tb);
    check_meta(eb, KV_F32, SZ(2), 1);
    assert_f32_is(f32d(eb)[1], 1.0f);
    /* A sliced view (offset 1, stride 2) of an f32 tensor. */
    const float fv[5] = { 9, -1, 9, 4, 9 };
    kv_tensor *fb = f32t(SZ(5), 1, fv);
    kv_tensor *sl = kv_tensor_view(fb, SZ(2), SZ(2), 1, 1); /* [-1, 4] */
    kv_tensor *ng = kv_neg(sl), *ab = kv_abs(sl);
    check_meta(ng, KV_F32, SZ(2), 1);
    assert_f32_is(f32d(ng)[0], 1.0f);
    assert_f32_is(f32d(ng)[1], -4.0f);
    assert_f32_is(f32d(ab)[0], 1.0f);
    kv_tensor_release(ng);
    kv_tensor_release(ab);
    kv_tensor_release(sl);
    kv_tensor_release(fb);
    kv_tensor_release(eb);
    kv_tensor_release(tb);
    kv_tensor_release(sn);
    kv_tensor_release(cs);
    kv_tensor_release(th);
    kv_tensor_release(sg);
    kv_tensor_release(td);
    kv_tensor_release(lg);
    kv_tensor_release(rs);
    kv_tensor_release(sq);
    kv_tensor_release(e);
    kv_tensor_release(ti);
}

static void test_unary_complex(void **state) {
    (void)state;
    const float z[4] = { 3, 4, 0, (float)3.14159265358979323846 }; /* 3+4i, i*pi */
    kv_tensor *tz = mk(KV_C64, SZ(2), 1, z);
    kv_tensor *ab = kv_abs(tz);
    check_meta(ab, KV_F32, SZ(2), 1);
    assert_f32_is(f32d(ab)[0], 5.0f);
    kv_tensor *e = kv_exp(tz);
    check_meta(e, KV_C64, SZ(2), 1);
    assert_true(fabsf(f32d(e)[2] + 1.0f) < 1e-6f); /* e^(i pi) = -1 */
    assert_true(fabsf(f32d(e)[3]) < 1e-6f);
    const double w[2] = { -4.0, 0.0 };
    kv_tensor *tw = mk(KV_C128, SZ(1), 1, w);
    kv_tensor *s = kv_sqrt(tw);
    assert_true(f64d(s)[0] == 0.0 && f64d(s)[1] == 2.0); /* sqrt(-4) = 2i */
    kv_tensor *n = kv_neg(tw);
    assert_true(f64d(n)[0] == 4.0);
    kv_tensor_release(n);
    kv_tensor_release(s);
    kv_tensor_release(tw);
    kv_tensor_release(e);
    kv_tensor_release(ab);
    kv_tensor_release(tz);
}

static void test_relu_gelu_silu(void **state) {
    (void)state;
    const float v[5] = { -1.0f, 0.0f, 2.0f, -0.0f, NAN };
    kv_tensor *t = f32t(SZ(5), 1, v);
    kv_tensor *r = kv_relu(t);
    check_meta(r, KV_F32, SZ(5), 1);
    assert_f32_is(f32d(r)[0], 0.0f);
    assert_f32_is(f32d(r)[2], 2.0f);
    assert_f32_is(f32d(r)[3], -0.0f);
    assert_true(isnan(f32d(r)[4]));
    const int32_t iv[2] = { -5, 5 };
    kv_tensor *ti = i32t(SZ(2), 1, iv);
    kv_tensor *ri = kv_relu(ti);
    check_meta(ri, KV_I32, SZ(2), 1);
    assert_int_equal(i32d(ri)[0], 0);
    assert_int_equal(i32d(ri)[1], 5);
    const double x[2] = { 1.0, -0.5 };
    kv_tensor *tx = f64t(SZ(2), 1, x);
    kv_tensor *g = kv_gelu(tx, "none"), *gt = kv_gelu(tx, "tanh");
    /* x * Phi(x): Phi(1) = 0.8413447460685429..., Phi(-0.5) = 0.3085375387259869... */
    assert_true(fabs(f64d(g)[0] - 0.8413447460685429) < 1e-15);
    assert_true(fabs(f64d(g)[1] - (-0.5 * 0.3085375387259869)) < 1e-15);
    /* 0.5 * (1 + tanh(sqrt(2/pi) * 1.044715)) = 0.8411919906082768... */
    assert_true(fabs(f64d(gt)[0] - 0.8411919906082768) < 1e-15);
    kv_tensor *si = kv_silu(tx);
    assert_true(fabs(f64d(si)[0] - 0.7310585786300049) < 1e-15); /* 1 / (1 + e^-1) */
    kv_tensor_release(si);
    kv_tensor_release(g);
    kv_tensor_release(gt);
    kv_tensor_release(tx);
    kv_tensor_release(ri);
    kv_tensor_release(ti);
    kv_tensor_release(r);
    kv_tensor_release(t);
}

static void test_clamp(void **state) {
    (void)state;
    const float v[4] = { -2.0f, 0.5f, 3.0f, NAN };
    kv_tensor *t = f32t(SZ(4), 1, v);
    const kv_scalar lo = kv_scalar_int(-1), hi = kv_scalar_double(1.0);
    kv_tensor *c = kv_clamp(t, &lo, &hi);
    check_meta(c, KV_F32, SZ(4), 1);
    assert_f32_is(f32d(c)[0], -1.0f);
    assert_f32_is(f32d(c)[1], 0.5f);
    assert_f32_is(f32d(c)[2], 1.0f);
    assert_true(isnan(f32d(c)[3]));
    const kv_scalar big = kv_scalar_int(5), small = kv_scalar_int(2);
    kv_tensor *inv = kv_clamp(t, &big, &small); /* lo > hi: hi everywhere */
    assert_f32_is(f32d(inv)[0], 2.0f);
    assert_f32_is(f32d(inv)[2], 2.0f);
    const int64_t iv[3] = { -3, 1, 9 };
    kv_tensor *ti = i64t(SZ(3), 1, iv);
    const kv_scalar half = kv_scalar_double(1.5);
    kv_tensor *cf = kv_clamp(ti, &half, NULL); /* promotes to f32 */
    check_meta(cf, KV_F32, SZ(3), 1);
    assert_f32_is(f32d(cf)[0], 1.5f);
    assert_f32_is(f32d(cf)[2], 9.0f);
    kv_tensor *ci = kv_clamp(ti, NULL, &small);
    check_meta(ci, KV_I64, SZ(3), 1);
    assert_int_equal(i64d(ci)[2], 2);
    assert_int_equal(i64d(ci)[0], -3);
    kv_tensor_release(ci);
    kv_tensor_release(cf);
    kv_tensor_release(ti);
    kv_tensor_release(inv);
    kv_tensor_release(c);
    kv_tensor_release(t);
}

static void test_clamp_tensor_inplace(void **state) {
    (void)state;
    const float v[6] = { -5, 0, 5, -5, 0, 5 };
    const float lo[3] = { -1, -2, -3 };
    const float hi[2] = { 1, 4 };
    kv_tensor *t = f32t(SZ(2, 3), 2, v), *tlo = f32t(SZ(3), 1, lo);
    kv_tensor *thi_col = f32t(SZ(2, 1), 2, hi);
    const int64_t v0 = kv_tensor_version(t);
    assert_int_equal(kv_clamp_(t, tlo, thi_col), KV_OK);
    /* Rows clamp to [lo[j], hi[i]]: hi is 1 on row 0 and 4 on row 1. */
    const float want[6] = { -1, 0, 1, -1, 0, 4 };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(t)[i], want[i]);
    assert_true(kv_tensor_version(t) > v0);
    assert_int_equal(kv_clamp_(t, NULL, tlo), KV_OK); /* max only */
    assert_f32_is(f32d(t)[1], -2.0f);
    assert_f32_is(f32d(t)[5], -3.0f);
    kv_tensor_release(thi_col);
    kv_tensor_release(tlo);
    kv_tensor_release(t);
}

static void test_unary_errors(void **state) {
    (void)state;
    const uint8_t bv[2] = { 1, 0 };
    const float fv[3] = { 0 };
    const int64_t iv[3] = { 1, 2, 3 };
    kv_tensor *tb = boolt(SZ(2), 1, bv), *tf = f32t(SZ(3), 1, fv), *ti = i64t(SZ(3), 1, iv);
    kv_tensor *tc = kv_zeros(LIST(3), &(kv_dtype){ KV_C64 }, NULL, NULL, NULL);
    expect_null_error(kv_neg(tb), KV_ERR_DTYPE, "neg");
    expect_null_error(kv_abs(tb), KV_ERR_DTYPE, "abs");
    expect_null_error(kv_relu(tb), KV_ERR_DTYPE, "relu");
    expect_null_error(kv_relu(tc), KV_ERR_DTYPE, "relu");
    expect_null_error(kv_gelu(ti, "none"), KV_ERR_DTYPE, "gelu");
    expect_null_error(kv_gelu(tf, "erf"), KV_ERR_INVALID_ARG, "gelu");
    expect_null_error(kv_silu(tc), KV_ERR_DTYPE, "silu");
    expect_null_error(kv_silu(ti), KV_ERR_DTYPE, "silu");
    expect_null_error(kv_clamp(tf, NULL, NULL), KV_ERR_INVALID_ARG, "clamp");
    const kv_scalar one = kv_scalar_int(1);
    expect_null_error(kv_clamp(tc, &one, NULL), KV_ERR_DTYPE, "clamp");
    expect_error(kv_clamp_(tf, NULL, NULL), KV_ERR_INVALID_ARG, "clamp_.Tensor");
    expect_error(kv_clamp_(ti, tf, NULL), KV_ERR_DTYPE, "clamp_.Tensor");
    kv_tensor *f23 = kv_zeros(LIST(2, 3), NULL, NULL, NULL, NULL);
    expect_error(kv_clamp_(tf, f23, NULL), KV_ERR_SHAPE, "clamp_.Tensor");
    kv_tensor *f4 = kv_zeros(LIST(4), NULL, NULL, NULL, NULL);
    expect_error(kv_clamp_(tf, NULL, f4), KV_ERR_SHAPE, "clamp_.Tensor");
    expect_error(kv_clamp_(tc, tc, NULL), KV_ERR_DTYPE, "clamp_.Tensor");
    kv_tensor_release(f4);
    kv_tensor_release(f23);
    kv_tensor_release(tc);
    kv_tensor_release(tb);
    kv_tensor_release(tf);
    kv_tensor_release(ti);
}

/* ---- compare and where ---- */

static void test_compare(void **state) {
    (void)state;
    const float a[6] = { 1, 2, 3, NAN, 5, 6 };
    const float b[3] = { 2, 2, NAN };
    kv_tensor *ta = f32t(SZ(2, 3), 2, a), *tb = f32t(SZ(3), 1, b);
    kv_tensor *e = kv_eq(ta, tb), *l = kv_lt(ta, tb);
    check_meta(e, KV_BOOL, SZ(2, 3), 2);
    check_meta(l, KV_BOOL, SZ(2, 3), 2);
    const uint8_t we[6] = { 0, 1, 0, 0, 0, 0 }, wl[6] = { 1, 0, 0, 0, 0, 0 };
    for (int i = 0; i < 6; i++) {
        assert_int_equal(u8d(e)[i], we[i]);
        assert_int_equal(u8d(l)[i], wl[i]);
    }
    /* Transposed operand: [[1, 3], [2, 4]] < [[2, 2], [2, 2]]. */
    const int32_t sq[4] = { 1, 2, 3, 4 }, two[1] = { 2 };
    kv_tensor *ts = i32t(SZ(2, 2), 2, sq), *t2 = i32t(NULL, 0, two);
    kv_tensor *tt = transposed(ts);
    kv_tensor *lt2 = kv_lt(tt, t2);
    check_meta(lt2, KV_BOOL, SZ(2, 2), 2);
    const uint8_t wl2[4] = { 1, 0, 0, 0 };
    for (int i = 0; i < 4; i++) assert_int_equal(u8d(lt2)[i], wl2[i]);
    const float z[4] = { 1, 2, 1, 3 };
    kv_tensor *tz = mk(KV_C64, SZ(2), 1, z);
    kv_tensor *ez = kv_eq(tz, tz);
    assert_int_equal(u8d(ez)[0], 1);
    const float z2[2] = { 1, 2 };
    kv_tensor *tz2 = mk(KV_C64, SZ(1), 1, z2);
    kv_tensor *ez2 = kv_eq(tz, tz2);
    assert_int_equal(u8d(ez2)[0], 1);
    assert_int_equal(u8d(ez2)[1], 0);
    expect_null_error(kv_lt(tz, tz), KV_ERR_DTYPE, "lt.Tensor");
    expect_null_error(kv_eq(ta, tz), KV_ERR_SHAPE, "eq.Tensor");
    kv_tensor_release(ez2);
    kv_tensor_release(tz2);
    kv_tensor_release(ez);
    kv_tensor_release(tz);
    kv_tensor_release(lt2);
    kv_tensor_release(tt);
    kv_tensor_release(ts);
    kv_tensor_release(t2);
    kv_tensor_release(e);
    kv_tensor_release(l);
    kv_tensor_release(ta);
    kv_tensor_release(tb);
}

static void test_where(void **state) {
    (void)state;
    const uint8_t c[2] = { 1, 0 };               /* [2, 1] */
    const int32_t s[3] = { 1, 2, 3 };            /* [3] */
    const float o = 0.5f;                        /* 0-dim */
    kv_tensor *tc = boolt(SZ(2, 1), 2, c), *ts = i32t(SZ(3), 1, s), *to = f32t(NULL, 0, &o);
    kv_tensor *w = kv_where(tc, ts, to);
    check_meta(w, KV_F32, SZ(2, 3), 2);
    const float want[6] = { 1, 2, 3, 0.5f, 0.5f, 0.5f };
    for (int i = 0; i < 6; i++) assert_f32_is(f32d(w)[i], want[i]);
    /* i32 dim tensors with a 0-dim f32: result_type gives f32. With two
     * i32 dim operands the result stays i32. */
    kv_tensor *wi = kv_where(tc, ts, ts);
    check_meta(wi, KV_I32, SZ(2, 3), 2);
    assert_int_equal(i32d(wi)[4], 2);
    kv_tensor *bad = f32t(SZ(3), 1, (const float[]){ 1, 0, 1 });
    expect_null_error(kv_where(bad, ts, ts), KV_ERR_DTYPE, "where.self");
    kv_tensor *t4 = kv_zeros(LIST(4), NULL, NULL, NULL, NULL);
    expect_null_error(kv_where(tc, ts, t4), KV_ERR_SHAPE, "where.self");
    kv_tensor_release(t4);
    kv_tensor_release(bad);
    kv_tensor_release(wi);
    kv_tensor_release(w);
    kv_tensor_release(tc);
    kv_tensor_release(ts);
    kv_tensor_release(to);
}

static void test_zero_size_and_zero_dim(void **state) {
    (void)state;
    kv_tensor *e = kv_zeros(LIST(0, 3), NULL, NULL, NULL, NULL);
    const float one = 1.0f;
    kv_tensor *s = f32t(NULL, 0, &one);
    kv_tensor *r = kv_add(e, s, kv_scalar_int(1));
    check_meta(r, KV_F32, SZ(0, 3), 2);
    kv_tensor *x = kv_exp(s);
    check_meta(x, KV_F32, NULL, 0);
    assert_f32_is(f32d(x)[0], (float)exp(1.0));
    kv_tensor *ss = kv_mul(s, s);
    check_meta(ss, KV_F32, NULL, 0);
    kv_tensor_release(ss);
    kv_tensor_release(x);
    kv_tensor_release(r);
    kv_tensor_release(s);
    kv_tensor_release(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_float_to_int),
        cmocka_unit_test(test_value_half_single_rounding),
        cmocka_unit_test(test_value_convert),
        cmocka_unit_test(test_iter_order_and_broadcast),
        cmocka_unit_test(test_iter_zero_dim_and_zero_size),
        cmocka_unit_test(test_factories),
        cmocka_unit_test(test_full_infers_dtype),
        cmocka_unit_test(test_arange),
        cmocka_unit_test(test_factory_errors),
        cmocka_unit_test(test_fill_through_strides),
        cmocka_unit_test(test_copy_broadcast_and_convert),
        cmocka_unit_test(test_copy_overlap),
        cmocka_unit_test(test_clone_contiguous_to_copy),
        cmocka_unit_test(test_add_broadcast_alpha),
        cmocka_unit_test(test_integer_wrap),
        cmocka_unit_test(test_promotion_casts_first),
        cmocka_unit_test(test_half_rounding),
        cmocka_unit_test(test_inplace_add_mul),
        cmocka_unit_test(test_div_max_min_pow),
        cmocka_unit_test(test_complex_arith),
        cmocka_unit_test(test_binary_errors),
        cmocka_unit_test(test_device_errors),
        cmocka_unit_test(test_unary_math),
        cmocka_unit_test(test_unary_complex),
        cmocka_unit_test(test_relu_gelu_silu),
        cmocka_unit_test(test_clamp),
        cmocka_unit_test(test_clamp_tensor_inplace),
        cmocka_unit_test(test_unary_errors),
        cmocka_unit_test(test_compare),
        cmocka_unit_test(test_where),
        cmocka_unit_test(test_zero_size_and_zero_dim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
