/* .npy writing and reading: exact header bytes, round trips of every
 * dtype and geometry, and one test per malformed-file error. Malformed
 * files are built here by hand from the format's definition, not by the
 * writer under test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/npy.h"
#include "kv/tensor.h"

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    strcpy(tmpdir, "/tmp/kv_test_npy.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void tmp_path(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", tmpdir, name); }

static void assert_error(kv_status code, const char *needle) {
    assert_int_equal(kv_last_error(), code);
    if (needle && strstr(kv_last_error_message(), needle) == NULL)
        fail_msg("error message '%s' lacks '%s'", kv_last_error_message(), needle);
}

/* A .npy image from its parts, the way the numpy spec describes it:
 * magic, version, little-endian header length, dict text padded with
 * spaces plus '\n' to a multiple of 64, data. */
static unsigned char *build_npy(int major, int minor, const char *dict, const void *data, size_t ndata,
                                size_t *len) {
    size_t pre = major == 1 ? 10 : 12;
    size_t dl = strlen(dict);
    size_t total_header = pre + dl + 1;
    total_header += (64 - total_header % 64) % 64;
    size_t hlen = total_header - pre;
    unsigned char *b = malloc(total_header + ndata + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major;
    b[7] = (unsigned char)minor;
    if (major == 1) {
        b[8] = (unsigned char)(hlen & 0xff);
        b[9] = (unsigned char)(hlen >> 8);
    } else {
        b[8] = (unsigned char)(hlen & 0xff);
        b[9] = (unsigned char)(hlen >> 8);
        b[10] = 0;
        b[11] = 0;
    }
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hlen - dl - 1);
    b[total_header - 1] = '\n';
    if (ndata) memcpy(b + total_header, data, ndata);
    *len = total_header + ndata;
    return b;
}

static const float f6[6] = { 1.0f, -2.0f, 0.5f, 3.0f, -0.0f, 8.0f };
#define DICT_F32_23 "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"

/* Decoding `dict` + data must fail with a message holding `needle`. */
static void expect_bad(const char *dict, const void *data, size_t ndata, kv_dtype expected, const char *needle) {
    size_t len;
    unsigned char *b = build_npy(1, 0, dict, data, ndata, &len);
    kv_error_clear();
    kv_tensor *t = kv_npy_decode(b, len, expected, "bad.npy");
    free(b);
    if (t != NULL) fail_msg("decoding '%s' succeeded", dict);
    assert_error(KV_ERR_INVALID_ARG, needle);
    assert_true(strncmp(kv_last_error_message(), "bad.npy: ", 9) == 0);
}

/* ---- the header, byte for byte ---- */

static void test_header_exact_bytes(void **state) {
    (void)state;
    /* The dict is 59 characters; 10 + 59 + 1 = 70, so 58 spaces pad the
     * header to 128 bytes and the length field is 128 - 10 = 118. */
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), }";
    assert_int_equal(strlen(dict), 59);
    unsigned char want[128];
    memcpy(want, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(want + 10, dict, 59);
    memset(want + 69, ' ', 58);
    want[127] = '\n';
    char got[256];
    const int64_t sizes[2] = { 4, 5 };
    assert_int_equal(kv_npy_format_header(KV_F32, sizes, 2, got, sizeof got), 128);
    assert_memory_equal(got, want, 128);
    /* Too small a buffer: the length is still reported, nothing written. */
    char tiny[8] = "unused";
    assert_int_equal(kv_npy_format_header(KV_F32, sizes, 2, tiny, sizeof tiny), 128);
    assert_string_equal(tiny, "unused");
}

static void test_header_shapes_and_descrs(void **state) {
    (void)state;
    char got[256];
    const int64_t five = 5;
    /* 10 + 58 + 1 = 69 bytes: over one 64-byte block, so padded to 128. */
    long n = kv_npy_format_header(KV_C128, &five, 1, got, sizeof got);
    assert_int_equal(n, 128);
    got[n] = '\0';
    assert_non_null(strstr(got + 10, "{'descr': '<c16', 'fortran_order': False, 'shape': (5,), }"));
    n = kv_npy_format_header(KV_BF16, NULL, 0, got, sizeof got);
    assert_int_equal(n % 64, 0);
    got[n] = '\0';
    assert_non_null(strstr(got + 10, "{'descr': '<u2', 'fortran_order': False, 'shape': (), }"));
    assert_int_equal(got[n - 1], '\n');
    static const char *const want[KV_DTYPE_COUNT] = {
        [KV_BOOL] = "|b1", [KV_U8] = "|u1",  [KV_I8] = "|i1",  [KV_I16] = "<i2",
        [KV_I32] = "<i4",  [KV_I64] = "<i8", [KV_F16] = "<f2", [KV_BF16] = "<u2",
        [KV_F32] = "<f4",  [KV_F64] = "<f8", [KV_C64] = "<c8", [KV_C128] = "<c16",
    };
    for (int d = 0; d < KV_DTYPE_COUNT; d++) assert_string_equal(kv_npy_descr((kv_dtype)d), want[d]);
    const int64_t neg = -1;
    assert_int_equal(kv_npy_format_header(KV_F32, &neg, 1, got, sizeof got), -1);
    assert_error(KV_ERR_NEGATIVE_SIZE, "negative");
}

static void test_encode_exact_file(void **state) {
    (void)state;
    const int16_t v[3] = { 1, -2, 258 };
    const int64_t n = 3;
    kv_tensor *t = kv_tensor_from_data(v, &n, 1, KV_I16);
    void *buf;
    size_t len;
    assert_int_equal(kv_npy_encode(t, &buf, &len), KV_OK);
    const unsigned char data[6] = { 0x01, 0x00, 0xfe, 0xff, 0x02, 0x01 };
    size_t want_len;
    unsigned char *want = build_npy(1, 0, "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", data, 6,
                                    &want_len);
    assert_int_equal(len, want_len);
    assert_memory_equal(buf, want, len);
    free(want);
    free(buf);
    kv_tensor_release(t);
}

/* ---- round trips ---- */

static void fill_pattern(kv_dtype dt, unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) p[i] = dt == KV_BOOL ? (unsigned char)(i % 3 == 1) : (unsigned char)(i * 37 + 11);
}

static void round_trip_one(kv_dtype dt, const int64_t *sizes, int ndim) {
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= sizes[i];
    size_t nbytes = (size_t)numel * kv_dtype_size(dt);
    unsigned char data[512];
    fill_pattern(dt, data, nbytes);
    kv_tensor *t = kv_tensor_from_data(data, sizes, ndim, dt);
    assert_non_null(t);
    char path[128];
    tmp_path(path, sizeof path, "rt.npy");
    assert_int_equal(kv_npy_write(path, t), KV_OK);
    for (int pass = 0; pass < 2; pass++) {
        kv_tensor *r = kv_npy_read(path, pass == 0 ? dt : KV_NPY_ANY_DTYPE);
        if (r == NULL) fail_msg("read %s: %s", kv_dtype_name(dt), kv_last_error_message());
        assert_int_equal(r->dtype, dt);
        assert_int_equal(r->ndim, ndim);
        for (int i = 0; i < ndim; i++) assert_int_equal(r->sizes[i], sizes[i]);
        assert_true(kv_tensor_is_contiguous(r));
        assert_true(r->device.type == KV_DEVICE_CPU);
        if (nbytes) assert_memory_equal(kv_tensor_data(r), data, nbytes);
        kv_tensor_release(r);
    }
    /* The file is the header plus exactly the data. */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    long hlen = kv_npy_format_header(dt, sizes, ndim, NULL, 0);
    assert_int_equal(hlen % 64, 0);
    assert_int_equal((size_t)st.st_size, (size_t)hlen + nbytes);
    kv_tensor_release(t);
}

static void test_round_trip_every_dtype(void **state) {
    (void)state;
    const int64_t s23[2] = { 2, 3 }, s0[1] = { 0 }, s30[2] = { 3, 0 }, s1111[4] = { 1, 2, 1, 2 };
    for (int d = 0; d < KV_DTYPE_COUNT; d++) {
        round_trip_one((kv_dtype)d, s23, 2);
        round_trip_one((kv_dtype)d, NULL, 0);  /* 0-dim */
        round_trip_one((kv_dtype)d, s0, 1);    /* zero-size */
        round_trip_one((kv_dtype)d, s30, 2);
        round_trip_one((kv_dtype)d, s1111, 4);
    }
}

static void test_transposed_and_strided_inputs(void **state) {
    (void)state;
    const int32_t v[6] = { 0, 1, 2, 3, 4, 5 };
    const int64_t s23[2] = { 2, 3 };
    kv_tensor *base = kv_tensor_from_data(v, s23, 2, KV_I32);
    /* base is [[0,1,2],[3,4,5]]; its transpose read row-major is 0 3 1 4 2 5. */
    const int64_t s32[2] = { 3, 2 }, st32[2] = { 1, 3 };
    kv_tensor *tr = kv_tensor_view(base, s32, st32, 2, 0);
    assert_non_null(tr);
    assert_false(kv_tensor_is_contiguous(tr));
    char path[128];
    tmp_path(path, sizeof path, "tr.npy");
    assert_int_equal(kv_npy_write(path, tr), KV_OK);
    kv_tensor *r = kv_npy_read(path, KV_I32);
    assert_non_null(r);
    assert_int_equal(r->sizes[0], 3);
    assert_int_equal(r->sizes[1], 2);
    const int32_t want[6] = { 0, 3, 1, 4, 2, 5 };
    assert_memory_equal(kv_tensor_data(r), want, sizeof want);
    kv_tensor_release(r);
    /* Every other element, from offset 1: 1 3 5. */
    const int64_t s3 = 3, st2 = 2;
    kv_tensor *sl = kv_tensor_view(base, &s3, &st2, 1, 1);
    void *buf;
    size_t len;
    assert_int_equal(kv_npy_encode(sl, &buf, &len), KV_OK);
    const int32_t want2[3] = { 1, 3, 5 };
    /* The i4 (3,) header is 10 + 57 + 1 bytes, padded to 128. */
    assert_int_equal(len, 128 + sizeof want2);
    assert_memory_equal((char *)buf + 128, want2, sizeof want2);
    free(buf);
    /* A broadcast (stride 0) row repeated twice. */
    const int64_t sb[2] = { 2, 3 }, stb[2] = { 0, 1 };
    kv_tensor *bc = kv_tensor_view(base, sb, stb, 2, 3);
    assert_int_equal(kv_npy_encode(bc, &buf, &len), KV_OK);
    const int32_t want3[6] = { 3, 4, 5, 3, 4, 5 };
    assert_int_equal(len, 128 + sizeof want3);
    assert_memory_equal((char *)buf + 128, want3, sizeof want3);
    free(buf);
    kv_tensor_release(bc);
    kv_tensor_release(sl);
    kv_tensor_release(tr);
    kv_tensor_release(base);
}

/* Larger than the writer's gather buffer, so chunk boundaries are crossed. */
static void test_large_transposed(void **state) {
    (void)state;
    enum { R = 40, C = 30 };
    double *v = malloc(sizeof(double) * R * C);
    for (int i = 0; i < R * C; i++) v[i] = i * 0.25 - 7.0;
    const int64_t s[2] = { R, C };
    kv_tensor *base = kv_tensor_from_data(v, s, 2, KV_F64);
    const int64_t ts[2] = { C, R }, tst[2] = { 1, C };
    kv_tensor *tr = kv_tensor_view(base, ts, tst, 2, 0);
    void *buf;
    size_t len;
    assert_int_equal(kv_npy_encode(tr, &buf, &len), KV_OK);
    kv_tensor *r = kv_npy_decode(buf, len, KV_F64, "mem");
    assert_non_null(r);
    const double *got = kv_tensor_data(r);
    for (int i = 0; i < C; i++) {
        for (int j = 0; j < R; j++) assert_true(got[i * R + j] == v[j * C + i]);
    }
    kv_tensor_release(r);
    free(buf);
    kv_tensor_release(tr);
    kv_tensor_release(base);
    free(v);
}

static void test_version_2_and_variants_accepted(void **state) {
    (void)state;
    size_t len;
    unsigned char *b = build_npy(2, 0, DICT_F32_23, f6, sizeof f6, &len);
    kv_tensor *t = kv_npy_decode(b, len, KV_F32, "v2.npy");
    assert_non_null(t);
    assert_memory_equal(kv_tensor_data(t), f6, sizeof f6);
    kv_tensor_release(t);
    free(b);
    /* Key order, double quotes, no trailing comma, tabs: all Python. */
    b = build_npy(1, 0, "{\"shape\": (2,3),\t'fortran_order': False, 'descr': '<f4'}", f6, sizeof f6, &len);
    t = kv_npy_decode(b, len, KV_NPY_ANY_DTYPE, "alt.npy");
    assert_non_null(t);
    assert_int_equal(t->dtype, KV_F32);
    kv_tensor_release(t);
    free(b);
    /* '<u1' is what some writers use for one-byte types. */
    const unsigned char u[2] = { 7, 250 };
    b = build_npy(1, 0, "{'descr': '<u1', 'fortran_order': False, 'shape': (2,), }", u, 2, &len);
    t = kv_npy_decode(b, len, KV_U8, "u1.npy");
    assert_non_null(t);
    kv_tensor_release(t);
    free(b);
}

static void test_bf16_is_u2(void **state) {
    (void)state;
    const uint16_t v[2] = { 0x3f80, 0x7fc1 };
    const int64_t n = 2;
    kv_tensor *t = kv_tensor_from_data(v, &n, 1, KV_BF16);
    void *buf;
    size_t len;
    assert_int_equal(kv_npy_encode(t, &buf, &len), KV_OK);
    kv_tensor *r = kv_npy_decode(buf, len, KV_BF16, "b.npy");
    assert_non_null(r);
    assert_int_equal(r->dtype, KV_BF16);
    assert_memory_equal(kv_tensor_data(r), v, sizeof v);
    kv_tensor_release(r);
    /* '<u2' is not f16. */
    assert_null(kv_npy_decode(buf, len, KV_F16, "b.npy"));
    assert_error(KV_ERR_INVALID_ARG, "dtype mismatch");
    free(buf);
    kv_tensor_release(t);
}

/* ---- the row-major visitor ---- */

typedef struct visit_log {
    int calls;
    size_t bytes, max_chunk;
    const void *first;
    int stop_after;
} visit_log;

static int log_chunk(void *ctx, const void *bytes, size_t n) {
    visit_log *l = ctx;
    if (l->calls == 0) l->first = bytes;
    l->calls++;
    l->bytes += n;
    if (n > l->max_chunk) l->max_chunk = n;
    return l->stop_after && l->calls == l->stop_after ? 42 : 0;
}

static void test_visit_chunks(void **state) {
    (void)state;
    /* Contiguous: one chunk, straight from the tensor's memory. */
    const int64_t s[3] = { 2, 1, 3 };
    kv_tensor *t = kv_tensor_from_data(f6, s, 3, KV_F32);
    visit_log l = { 0 };
    assert_int_equal(kv_npy_visit(t, log_chunk, &l), 0);
    assert_int_equal(l.calls, 1);
    assert_int_equal(l.bytes, 24);
    assert_ptr_equal(l.first, kv_tensor_data(t));
    kv_tensor_release(t);
    /* Transposed 64 x 64 f64 (32 KiB): gathered in chunks of at most 4 KiB. */
    double *v = calloc(64 * 64, sizeof *v);
    const int64_t sq[2] = { 64, 64 }, tst[2] = { 1, 64 };
    kv_tensor *base = kv_tensor_from_data(v, sq, 2, KV_F64);
    kv_tensor *tr = kv_tensor_view(base, sq, tst, 2, 0);
    memset(&l, 0, sizeof l);
    assert_int_equal(kv_npy_visit(tr, log_chunk, &l), 0);
    assert_int_equal(l.bytes, 64 * 64 * 8);
    assert_int_equal(l.max_chunk, 4096);
    assert_int_equal(l.calls, 8);
    /* A non-zero return stops the walk and is passed back. */
    memset(&l, 0, sizeof l);
    l.stop_after = 2;
    assert_int_equal(kv_npy_visit(tr, log_chunk, &l), 42);
    assert_int_equal(l.calls, 2);
    /* Zero-size: nothing visited. */
    const int64_t z[2] = { 0, 5 };
    kv_tensor *e = kv_tensor_empty(z, 2, KV_F32, KV_DEVICE_CPU0);
    memset(&l, 0, sizeof l);
    assert_int_equal(kv_npy_visit(e, log_chunk, &l), 0);
    assert_int_equal(l.calls, 0);
    kv_tensor_release(e);
    kv_tensor_release(tr);
    kv_tensor_release(base);
    free(v);
}

/* ---- malformed files ---- */

static void test_bad_magic(void **state) {
    (void)state;
    size_t len;
    unsigned char *b = build_npy(1, 0, DICT_F32_23, f6, sizeof f6, &len);
    b[1] = 'X';
    assert_null(kv_npy_decode(b, len, KV_F32, "m.npy"));
    assert_error(KV_ERR_INVALID_ARG, "m.npy: not a .npy file (bad magic)");
    assert_null(kv_npy_decode(b, 3, KV_F32, "m.npy"));
    assert_error(KV_ERR_INVALID_ARG, "bad magic");
    free(b);
}

static void test_bad_version(void **state) {
    (void)state;
    size_t len;
    unsigned char *b = build_npy(1, 0, DICT_F32_23, f6, sizeof f6, &len);
    b[6] = 3;
    assert_null(kv_npy_decode(b, len, KV_F32, "v.npy"));
    assert_error(KV_ERR_INVALID_ARG, "version 3.0");
    b[6] = 1;
    b[7] = 1;
    assert_null(kv_npy_decode(b, len, KV_F32, "v.npy"));
    assert_error(KV_ERR_INVALID_ARG, "version 1.1");
    free(b);
}

static void test_header_length_bounds(void **state) {
    (void)state;
    size_t len;
    unsigned char *b = build_npy(1, 0, DICT_F32_23, f6, sizeof f6, &len);
    b[8] = 0xff;
    b[9] = 0xff;
    assert_null(kv_npy_decode(b, len, KV_F32, "h.npy"));
    assert_error(KV_ERR_INVALID_ARG, "runs past the end");
    b[8] = 0;
    b[9] = 0;
    assert_null(kv_npy_decode(b, len, KV_F32, "h.npy"));
    assert_error(KV_ERR_INVALID_ARG, "header length is 0");
    free(b);
    b = build_npy(2, 0, DICT_F32_23, f6, sizeof f6, &len);
    b[11] = 0x10; /* 256 MiB header */
    assert_null(kv_npy_decode(b, len, KV_F32, "h.npy"));
    assert_error(KV_ERR_INVALID_ARG, "limit");
    free(b);
    /* The header must end in '\n'. */
    b = build_npy(1, 0, DICT_F32_23, f6, sizeof f6, &len);
    b[127] = ' '; /* the 59-character dict pads to 128 bytes */
    assert_null(kv_npy_decode(b, len, KV_F32, "h.npy"));
    assert_error(KV_ERR_INVALID_ARG, "newline");
    free(b);
}

static void test_truncated_data(void **state) {
    (void)state;
    size_t len;
    unsigned char *b = build_npy(1, 0, DICT_F32_23, f6, sizeof f6, &len);
    assert_null(kv_npy_decode(b, len - 1, KV_F32, "t.npy"));
    assert_error(KV_ERR_INVALID_ARG, "truncated data: the header needs 24 bytes, the file has 23");
    assert_null(kv_npy_decode(b, 9, KV_F32, "t.npy"));
    assert_error(KV_ERR_INVALID_ARG, "truncated");
    free(b);
}

static void test_trailing_data(void **state) {
    (void)state;
    unsigned char d[25];
    memcpy(d, f6, 24);
    d[24] = 0;
    expect_bad(DICT_F32_23, d, 25, KV_F32, "1 trailing bytes after the 24 bytes of data");
}

static void test_unknown_descr(void **state) {
    (void)state;
    expect_bad("{'descr': '<f3', 'fortran_order': False, 'shape': (2, 3), }", f6, 24, KV_NPY_ANY_DTYPE,
               "unknown descr '<f3'");
    expect_bad("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", f6, 24, KV_NPY_ANY_DTYPE,
               "big-endian");
    expect_bad("{'descr': '<U8', 'fortran_order': False, 'shape': (2, 3), }", f6, 24, KV_NPY_ANY_DTYPE,
               "unknown descr");
}

static void test_fortran_order_true(void **state) {
    (void)state;
    expect_bad("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", f6, 24, KV_F32, "fortran_order True");
    expect_bad("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }", f6, 24, KV_F32, "not True or False");
}

static void test_dtype_mismatch(void **state) {
    (void)state;
    expect_bad(DICT_F32_23, f6, 24, KV_F64, "dtype mismatch: file holds '<f4' (f32), expected f64 ('<f8')");
    expect_bad(DICT_F32_23, f6, 24, KV_I32, "dtype mismatch");
}

static void test_negative_and_oversized_shape(void **state) {
    (void)state;
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 3), }", f6, 24, KV_F32,
               "dimension 0 of 'shape' is negative");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }", f6, 24,
               KV_F32, "too large");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", f6, 24, KV_F32,
               "too large");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", f6, 4, KV_F32,
               "more than 8 dimensions");
    /* A zero dim makes the data empty but the rest must still be sane. */
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4611686018427387904, 4), }", NULL, 0, KV_F32,
               "too large");
}

static void test_garbage_dict(void **state) {
    (void)state;
    expect_bad("hello", f6, 24, KV_F32, "not a dict");
    expect_bad("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }", f6, 24, KV_F32, "expected ','");
    expect_bad("{'descr': '<f4', 'fortran_order': False, }", f6, 24, KV_F32, "missing key 'shape'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1, }", f6, 24, KV_F32,
               "unexpected key 'extra'");
    expect_bad("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f6, 24, KV_F32,
               "duplicate key 'descr'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", f6, 24, KV_F32, "not a tuple");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", f6, 24, KV_F32, "not a tuple");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", f6, 24, KV_F32, "expected an integer");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", f6, 24, KV_F32, "expected ',' or ')'");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } junk", f6, 24, KV_F32,
               "after the dict");
    expect_bad("{'descr': <f4, 'fortran_order': False, 'shape': (2, 3), }", f6, 24, KV_F32, "not a short string");
    expect_bad("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3), }", f6, 24, KV_F32, "not True or False");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (02, 3), }", f6, 24, KV_F32, "leading zero");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),", f6, 24, KV_F32, "expected a quoted key");
    expect_bad("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\x01", f6, 24, KV_F32, "not printable");
}

static void test_bool_bytes_validated(void **state) {
    (void)state;
    const unsigned char v[3] = { 0, 1, 2 };
    expect_bad("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", v, 3, KV_BOOL,
               "bool element 2 is 0x02");
}

static void test_file_errors(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "does-not-exist.npy");
    assert_null(kv_npy_read(path, KV_F32));
    assert_error(KV_ERR_INVALID_ARG, "No such file or directory");
    assert_true(strncmp(kv_last_error_message(), path, strlen(path)) == 0);
    assert_null(kv_npy_read(tmpdir, KV_F32));
    assert_error(KV_ERR_INVALID_ARG, "not a regular file");
    const int64_t n = 2;
    kv_tensor *t = kv_tensor_from_data(f6, &n, 1, KV_F32);
    tmp_path(path, sizeof path, "no-such-dir/x.npy");
    assert_int_equal(kv_npy_write(path, t), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "cannot open for writing");
    /* A lazy bit would make the stored bytes lie about the values. */
    kv_tensor *c = kv_tensor_alias(t);
    c->keys = kv_keyset_add(c->keys, KV_KEY_NEGATIVE);
    tmp_path(path, sizeof path, "lazy.npy");
    assert_int_equal(kv_npy_write(path, c), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "lazy bit");
    assert_int_equal(access(path, F_OK), -1);
    kv_tensor_release(c);
    kv_tensor_release(t);
    /* A file on disk with trailing bytes fails through the same parser. */
    size_t len;
    unsigned char *b = build_npy(1, 0, DICT_F32_23, f6, sizeof f6, &len);
    tmp_path(path, sizeof path, "trail.npy");
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fputc(0, f);
    fclose(f);
    free(b);
    assert_null(kv_npy_read(path, KV_F32));
    assert_error(KV_ERR_INVALID_ARG, "trailing");
}

/* ---- cross-check with numpy, where it exists ---- */

static void test_numpy_reads_our_files(void **state) {
    (void)state;
    if (system("python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
        skip(); /* no numpy on this machine: only this cross-check is skipped */
    }
    const int64_t s[2] = { 2, 3 };
    kv_tensor *t = kv_tensor_from_data(f6, s, 2, KV_F32);
    char path[128], cmd[512];
    tmp_path(path, sizeof path, "np.npy");
    assert_int_equal(kv_npy_write(path, t), KV_OK);
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import numpy as np; a = np.load('%s'); "
             "assert a.dtype == np.float32 and a.shape == (2, 3), a; "
             "assert a.tolist() == [[1.0, -2.0, 0.5], [3.0, -0.0, 8.0]], a\"",
             path);
    assert_int_equal(system(cmd), 0);
    /* And we read what numpy writes (its padding differs from ours). */
    tmp_path(path, sizeof path, "from_np.npy");
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import numpy as np; np.save('%s', np.arange(6, dtype=np.int64).reshape(3, 2).T)\"", path);
    assert_int_equal(system(cmd), 0);
    kv_tensor *r = kv_npy_read(path, KV_I64);
    kv_tensor_release(t);
    if (r == NULL) {
        /* numpy writes a transposed array as fortran_order True. */
        assert_error(KV_ERR_INVALID_ARG, "fortran_order");
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import numpy as np; np.save('%s', np.arange(6, dtype=np.int64).reshape(3, 2))\"",
                 path);
        assert_int_equal(system(cmd), 0);
        r = kv_npy_read(path, KV_I64);
    }
    assert_non_null(r);
    const int64_t want[6] = { 0, 1, 2, 3, 4, 5 };
    assert_memory_equal(kv_tensor_data(r), want, sizeof want);
    kv_tensor_release(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_exact_bytes),
        cmocka_unit_test(test_header_shapes_and_descrs),
        cmocka_unit_test(test_encode_exact_file),
        cmocka_unit_test(test_round_trip_every_dtype),
        cmocka_unit_test(test_transposed_and_strided_inputs),
        cmocka_unit_test(test_large_transposed),
        cmocka_unit_test(test_version_2_and_variants_accepted),
        cmocka_unit_test(test_bf16_is_u2),
        cmocka_unit_test(test_visit_chunks),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_bad_version),
        cmocka_unit_test(test_header_length_bounds),
        cmocka_unit_test(test_truncated_data),
        cmocka_unit_test(test_trailing_data),
        cmocka_unit_test(test_unknown_descr),
        cmocka_unit_test(test_fortran_order_true),
        cmocka_unit_test(test_dtype_mismatch),
        cmocka_unit_test(test_negative_and_oversized_shape),
        cmocka_unit_test(test_garbage_dict),
        cmocka_unit_test(test_bool_bytes_validated),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_numpy_reads_our_files),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
