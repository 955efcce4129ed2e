/* The golden store: MANIFEST format, verification outcomes, regeneration
 * summaries and determinism, plus the content-hash helpers. Expected
 * hashes and file names come from libxxhash directly, not from the
 * wrapper under test. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "kv/npy.h"
#include "kv/tensor.h"
#include "runner/golden/exact.h"
#include "runner/golden/golden.h"
#include "runner/golden/hash.h"

static char root[64];
static int store_counter;

static int setup_root(void **state) {
    (void)state;
    strcpy(root, "/tmp/kv_test_golden.XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown_root(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* A fresh, not yet existing store directory per call. */
static void new_store_dir(char *buf, size_t cap) { snprintf(buf, cap, "%s/golden%d", root, ++store_counter); }

static void assert_error(kv_status code, const char *needle) {
    assert_int_equal(kv_last_error(), code);
    if (needle && strstr(kv_last_error_message(), needle) == NULL)
        fail_msg("error message '%s' lacks '%s'", kv_last_error_message(), needle);
}

static void assert_contains(const char *text, const char *needle) {
    if (strstr(text, needle) == NULL) fail_msg("'%s' lacks '%s'", text, needle);
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = '\0';
    *len = got;
    return b;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

static char *hex_of(uint64_t h, char buf[17]) {
    snprintf(buf, 17, "%016llx", (unsigned long long)h);
    return buf;
}

/* "DIR/OP/<xxh3 of key>.npy" or "...-<i>.npy", computed independently. */
static void entry_path(char *buf, size_t cap, const char *dir, const char *op, const char *key, int output) {
    char hex[17];
    hex_of(XXH3_64bits(key, strlen(key)), hex);
    if (output == 0) snprintf(buf, cap, "%s/%s/%s.npy", dir, op, hex);
    else snprintf(buf, cap, "%s/%s/%s-%d.npy", dir, op, hex, output);
}

static const char *const K_ADD = "add.Tensor(dtype=f32,shape=[2,3])";
static const char *const K_MAX = "max.dim(dtype=f32,shape=[4],args=dim=0)";
static const float add_out[6] = { 1.0f, 2.5f, -3.0f, 0.0f, -0.0f, 1e-3f };
static const float max_val = 7.0f;
static const int64_t max_idx = 2;

static kv_tensor *f32_23(const float *v) {
    const int64_t s[2] = { 2, 3 };
    return kv_tensor_from_data(v, s, 2, KV_F32);
}

/* add: one f32 [2,3] output; max.dim: two 0-dim outputs (f32, i64). */
static kv_golden_store *build_basic_store(const char *dir) {
    kv_golden_store *s = kv_golden_open(dir);
    assert_non_null(s);
    kv_tensor *a = f32_23(add_out);
    kv_tensor *mv = kv_tensor_from_data(&max_val, NULL, 0, KV_F32);
    kv_tensor *mi = kv_tensor_from_data(&max_idx, NULL, 0, KV_I64);
    const kv_tensor *one[1] = { a };
    const kv_tensor *two[2] = { mv, mi };
    assert_int_equal(kv_golden_put(s, "max.dim", K_MAX, two, 2), KV_OK);
    assert_int_equal(kv_golden_put(s, "add.Tensor", K_ADD, one, 1), KV_OK);
    kv_tensor_release(a);
    kv_tensor_release(mv);
    kv_tensor_release(mi);
    kv_golden_summary sum;
    assert_int_equal(kv_golden_save(s, true, &sum), KV_OK);
    assert_int_equal(sum.added, 3);
    kv_golden_summary_free(&sum);
    return s;
}

static kv_golden_outcome verify_f32_23(const kv_golden_store *s, const float *v, kv_golden_verdict *vd) {
    kv_tensor *t = f32_23(v);
    assert_int_equal(kv_golden_verify(s, K_ADD, 0, t, vd), KV_OK);
    kv_tensor_release(t);
    return vd->outcome;
}

/* ---- hash helpers ---- */

static void test_hash_helpers(void **state) {
    (void)state;
    /* The published XXH3-64 of empty input (seed 0). */
    assert_true(kv_hash_bytes("", 0) == 0x2D06800538D394C2ull);
    assert_true(kv_hash_string("") == 0x2D06800538D394C2ull);
    assert_true(kv_hash_string("abc") == XXH3_64bits("abc", 3));
    kv_hash_stream *h = kv_hash_begin();
    kv_hash_update(h, "hello ", 6);
    kv_hash_update(h, "world", 5);
    assert_true(kv_hash_end(h) == XXH3_64bits("hello world", 11));
    char buf[KV_HASH_HEX_LEN];
    assert_string_equal(kv_hash_format(0x00ab00000000cd01ull, buf), "00ab00000000cd01");
    uint64_t v = 0;
    assert_int_equal(kv_hash_parse("00AB00000000cd01", &v), 0);
    assert_true(v == 0x00ab00000000cd01ull);
    assert_int_equal(kv_hash_parse("00ab", &v), -1);
    assert_int_equal(kv_hash_parse("00ab00000000cd012", &v), -1);
    assert_int_equal(kv_hash_parse("00ab00000000cd0g", &v), -1);
    /* A tensor hashes as its row-major bytes, whatever the strides. */
    const int32_t d[6] = { 0, 1, 2, 3, 4, 5 };
    const int64_t s23[2] = { 2, 3 }, s32[2] = { 3, 2 }, st32[2] = { 1, 3 };
    kv_tensor *base = kv_tensor_from_data(d, s23, 2, KV_I32);
    kv_tensor *tr = kv_tensor_view(base, s32, st32, 2, 0);
    const int32_t rowmajor[6] = { 0, 3, 1, 4, 2, 5 };
    uint64_t ht = 0;
    assert_int_equal(kv_hash_tensor(tr, &ht), KV_OK);
    assert_true(ht == XXH3_64bits(rowmajor, sizeof rowmajor));
    assert_int_equal(kv_hash_tensor(base, &ht), KV_OK);
    assert_true(ht == XXH3_64bits(d, sizeof d));
    kv_tensor_release(tr);
    kv_tensor_release(base);
}

/* ---- opening ---- */

static void test_missing_manifest_is_empty_store(void **state) {
    (void)state;
    char dir[128];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = kv_golden_open(dir);
    assert_non_null(s);
    assert_false(kv_golden_has_manifest(s));
    assert_int_equal(kv_golden_count(s), 0);
    assert_null(kv_golden_lookup(s, K_ADD, 0));
    kv_golden_verdict v;
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_MISSING);
    assert_contains(v.message, "does not exist");
    assert_contains(v.message, "kvrun --regen-golden");
    kv_golden_close(s);
    assert_false(exists(dir)); /* opening wrote nothing */
}

/* ---- a full round trip ---- */

static void test_put_save_reopen_ok(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = build_basic_store(dir);
    kv_golden_close(s);

    /* MANIFEST: header block, then lines sorted by key. */
    char h_add[17], h_mv[17], h_mi[17], n_add[17], n_max[17];
    hex_of(XXH3_64bits(add_out, sizeof add_out), h_add);
    hex_of(XXH3_64bits(&max_val, sizeof max_val), h_mv);
    hex_of(XXH3_64bits(&max_idx, sizeof max_idx), h_mi);
    hex_of(XXH3_64bits(K_ADD, strlen(K_ADD)), n_add);
    hex_of(XXH3_64bits(K_MAX, strlen(K_MAX)), n_max);
    char want[2048];
    snprintf(want, sizeof want,
             "%s\t0\tf32\t[2,3]\t%s\tadd.Tensor/%s.npy\n"
             "%s\t0\tf32\t[]\t%s\tmax.dim/%s.npy\n"
             "%s\t1\ti64\t[]\t%s\tmax.dim/%s-1.npy\n",
             K_ADD, h_add, n_add, K_MAX, h_mv, n_max, K_MAX, h_mi, n_max);
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    size_t len;
    char *text = (char *)slurp(path, &len);
    assert_non_null(text);
    assert_true(strncmp(text, "# kvsuite golden MANIFEST, format 1\n", 36) == 0);
    assert_contains(text, "\n# generated by kvrun --regen-golden; do not edit\n");
    assert_contains(text, "bf16");
    char *body = strstr(text, K_ADD);
    assert_non_null(body);
    assert_true(body[-1] == '\n');
    assert_string_equal(body, want);
    for (char *c = text; c < body; c = strchr(c, '\n') + 1) assert_true(*c == '#');
    free(text);

    /* The files are where the key's hash says, and hold the data. */
    entry_path(path, sizeof path, dir, "add.Tensor", K_ADD, 0);
    kv_tensor *back = kv_npy_read(path, KV_F32);
    assert_non_null(back);
    assert_memory_equal(kv_tensor_data(back), add_out, sizeof add_out);
    kv_tensor_release(back);
    entry_path(path, sizeof path, dir, "max.dim", K_MAX, 1);
    assert_true(exists(path));

    s = kv_golden_open(dir);
    assert_non_null(s);
    assert_true(kv_golden_has_manifest(s));
    assert_int_equal(kv_golden_count(s), 3);
    assert_int_equal(kv_golden_output_count(s, K_MAX), 2);
    assert_int_equal(kv_golden_output_count(s, K_ADD), 1);
    assert_int_equal(kv_golden_output_count(s, "nope"), 0);
    const kv_golden_entry *e = kv_golden_lookup(s, K_MAX, 1);
    assert_non_null(e);
    assert_int_equal(e->dtype, KV_I64);
    assert_int_equal(e->ndim, 0);
    assert_true(e->hash == XXH3_64bits(&max_idx, sizeof max_idx));
    assert_null(kv_golden_lookup(s, K_MAX, 2));
    kv_golden_verdict v;
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_OK);
    assert_string_equal(v.message, "");
    assert_null(v.stored);
    kv_tensor *mv = kv_tensor_from_data(&max_val, NULL, 0, KV_F32);
    kv_tensor *mi = kv_tensor_from_data(&max_idx, NULL, 0, KV_I64);
    assert_int_equal(kv_golden_verify(s, K_MAX, 0, mv, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    assert_int_equal(kv_golden_verify(s, K_MAX, 1, mi, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    /* An output index the key does not have. */
    assert_int_equal(kv_golden_verify(s, K_MAX, 2, mi, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_MISSING);
    kv_tensor_release(mv);
    kv_tensor_release(mi);
    /* Equal data through a non-contiguous view is still OK. */
    const float tdata[6] = { add_out[0], add_out[3], add_out[1], add_out[4], add_out[2], add_out[5] };
    const int64_t s32[2] = { 3, 2 }, s23[2] = { 2, 3 }, st23[2] = { 1, 2 };
    kv_tensor *tb = kv_tensor_from_data(tdata, s32, 2, KV_F32);
    kv_tensor *tv = kv_tensor_view(tb, s23, st23, 2, 0);
    assert_int_equal(kv_golden_verify(s, K_ADD, 0, tv, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    kv_tensor_release(tv);
    kv_tensor_release(tb);
    kv_golden_close(s);
}

/* ---- the failure outcomes ---- */

static void test_corrupt_file(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    kv_golden_close(build_basic_store(dir));
    entry_path(path, sizeof path, dir, "add.Tensor", K_ADD, 0);
    size_t len;
    unsigned char *orig = slurp(path, &len);
    /* One flipped data byte: a valid .npy whose hash is wrong. */
    unsigned char *b = malloc(len);
    memcpy(b, orig, len);
    b[len - 3] ^= 0x01;
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    kv_golden_store *s = kv_golden_open(dir);
    kv_golden_verdict v;
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_CORRUPT);
    assert_contains(v.message, "content hash");
    assert_contains(v.message, path);
    assert_contains(v.message, "kvrun --regen-golden");
    assert_null(v.stored);
    /* A broken header: the npy reader's reason comes through. */
    memcpy(b, orig, len);
    b[0] = 'X';
    f = fopen(path, "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_CORRUPT);
    assert_contains(v.message, "bad magic");
    /* A valid file of another shape. */
    const int64_t s32[2] = { 3, 2 };
    kv_tensor *other = kv_tensor_from_data(add_out, s32, 2, KV_F32);
    assert_int_equal(kv_npy_write(path, other), KV_OK);
    kv_tensor_release(other);
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_CORRUPT);
    assert_contains(v.message, "holds shape [3,2], MANIFEST says [2,3]");
    /* A valid file of another dtype (the manifest says f32). */
    const int32_t i6[6] = { 0 };
    kv_tensor *oi = kv_tensor_from_data(i6, (const int64_t[]){ 2, 3 }, 2, KV_I32);
    assert_int_equal(kv_npy_write(path, oi), KV_OK);
    kv_tensor_release(oi);
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_CORRUPT);
    assert_contains(v.message, "dtype mismatch");
    kv_golden_close(s);
    free(b);
    free(orig);
}

static void test_missing_file(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    kv_golden_close(build_basic_store(dir));
    entry_path(path, sizeof path, dir, "add.Tensor", K_ADD, 0);
    assert_int_equal(unlink(path), 0);
    kv_golden_store *s = kv_golden_open(dir);
    kv_golden_verdict v;
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_MISSING);
    assert_contains(v.message, "is missing");
    assert_contains(v.message, path);
    assert_true(v.expected_hash == XXH3_64bits(add_out, sizeof add_out));
    /* No entry at all. */
    kv_tensor *t = f32_23(add_out);
    assert_int_equal(kv_golden_verify(s, "sub.Tensor(dtype=f32)", 0, t, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_MISSING);
    assert_contains(v.message, "no entry for key 'sub.Tensor(dtype=f32)' output 0");
    kv_tensor_release(t);
    kv_golden_close(s);
}

static void test_stale_entry(void **state) {
    (void)state;
    char dir[128];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = build_basic_store(dir);
    kv_golden_verdict v;
    const int64_t s32[2] = { 3, 2 };
    kv_tensor *t = kv_tensor_from_data(add_out, s32, 2, KV_F32);
    assert_int_equal(kv_golden_verify(s, K_ADD, 0, t, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_STALE);
    assert_contains(v.message, "MANIFEST records f32 [2,3], the reference output is f32 [3,2]");
    assert_contains(v.message, "regenerate with kvrun --regen-golden");
    kv_tensor_release(t);
    const double d6[6] = { 0 };
    t = kv_tensor_from_data(d6, (const int64_t[]){ 2, 3 }, 2, KV_F64);
    assert_int_equal(kv_golden_verify(s, K_ADD, 0, t, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_STALE);
    assert_contains(v.message, "the reference output is f64 [2,3]");
    kv_tensor_release(t);
    /* 0-dim vs 1-element 1-d is a shape change too. */
    t = kv_tensor_from_data(&max_val, (const int64_t[]){ 1 }, 1, KV_F32);
    assert_int_equal(kv_golden_verify(s, K_MAX, 0, t, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_STALE);
    kv_tensor_release(t);
    kv_golden_close(s);
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_differs_returns_stored(void **state) {
    (void)state;
    char dir[128];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = build_basic_store(dir);
    float w[6];
    memcpy(w, add_out, sizeof w);
    w[2] = -3.0000002f;
    kv_golden_verdict v;
    assert_int_equal(verify_f32_23(s, w, &v), KV_GOLDEN_DIFFERS);
    assert_non_null(v.stored);
    assert_int_equal(v.stored->dtype, KV_F32);
    assert_int_equal(v.stored->ndim, 2);
    assert_memory_equal(kv_tensor_data(v.stored), add_out, sizeof add_out);
    assert_true(v.expected_hash == XXH3_64bits(add_out, sizeof add_out));
    assert_true(v.actual_hash == XXH3_64bits(w, sizeof w));
    assert_contains(v.message, "differs");
    kv_golden_verdict_release(&v);
    assert_null(v.stored);
    /* Bitwise: +0 for -0 differs, though they compare equal as floats. */
    memcpy(w, add_out, sizeof w);
    assert_true(f32_bits(w[4]) == 0x80000000u);
    w[4] = 0.0f;
    assert_true(w[4] == add_out[4]);
    assert_int_equal(verify_f32_23(s, w, &v), KV_GOLDEN_DIFFERS);
    kv_golden_verdict_release(&v);
    kv_golden_close(s);

    /* NaN payloads count: store one NaN, verify with another. */
    new_store_dir(dir, sizeof dir);
    s = kv_golden_open(dir);
    float n1[6];
    memcpy(n1, add_out, sizeof n1);
    n1[1] = bits_f32(0x7fc00001u);
    kv_tensor *t = f32_23(n1);
    const kv_tensor *outs[1] = { t };
    assert_int_equal(kv_golden_put(s, "add.Tensor", K_ADD, outs, 1), KV_OK);
    kv_tensor_release(t);
    assert_int_equal(kv_golden_save(s, true, NULL), KV_OK);
    assert_int_equal(verify_f32_23(s, n1, &v), KV_GOLDEN_OK);
    n1[1] = bits_f32(0x7fc00000u);
    assert_true(isnan(n1[1]));
    assert_int_equal(verify_f32_23(s, n1, &v), KV_GOLDEN_DIFFERS);
    assert_non_null(v.stored);
    assert_true(f32_bits(((const float *)kv_tensor_data(v.stored))[1]) == 0x7fc00001u);
    kv_golden_verdict_release(&v);
    kv_golden_close(s);
}

static void test_hash_only_entries(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = kv_golden_open(dir);
    kv_golden_set_max_file_bytes(s, 16); /* 24 data bytes: over the limit */
    kv_tensor *t = f32_23(add_out);
    kv_tensor *small = kv_tensor_from_data(&max_val, NULL, 0, KV_F32); /* 4 bytes: stored */
    const kv_tensor *one[1] = { t }, *other[1] = { small };
    assert_int_equal(kv_golden_put(s, "add.Tensor", K_ADD, one, 1), KV_OK);
    assert_int_equal(kv_golden_put(s, "max.dim", K_MAX, other, 1), KV_OK);
    kv_tensor_release(small);
    kv_golden_summary sum;
    assert_int_equal(kv_golden_save(s, true, &sum), KV_OK);
    assert_int_equal(sum.added, 2);
    assert_int_equal(sum.files_written, 1);
    kv_golden_summary_free(&sum);
    kv_golden_close(s);
    entry_path(path, sizeof path, dir, "add.Tensor", K_ADD, 0);
    assert_false(exists(path));
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    size_t len;
    char *text = (char *)slurp(path, &len);
    char h[17], line[512];
    snprintf(line, sizeof line, "%s\t0\tf32\t[2,3]\t%s\t-\n", K_ADD, hex_of(XXH3_64bits(add_out, 24), h));
    assert_contains(text, line);
    assert_contains(text, "outputs over 16 data bytes are hash-only");
    free(text);

    s = kv_golden_open(dir);
    const kv_golden_entry *e = kv_golden_lookup(s, K_ADD, 0);
    assert_non_null(e);
    assert_null(e->file);
    kv_golden_verdict v;
    assert_int_equal(kv_golden_verify(s, K_ADD, 0, t, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    kv_tensor_release(t);
    float w[6];
    memcpy(w, add_out, sizeof w);
    w[0] = 2.0f;
    assert_int_equal(verify_f32_23(s, w, &v), KV_GOLDEN_DIFFERS);
    assert_null(v.stored);
    assert_contains(v.message, "hash-only");
    assert_contains(v.message, hex_of(XXH3_64bits(w, 24), h));
    kv_golden_close(s);
}

/* ---- regeneration ---- */

static void put1(kv_golden_store *s, const char *op, const char *key, const float *v) {
    kv_tensor *t = f32_23(v);
    const kv_tensor *o[1] = { t };
    assert_int_equal(kv_golden_put(s, op, key, o, 1), KV_OK);
    kv_tensor_release(t);
}

static void test_regen_summary(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    const float z[6] = { 0 }, o[6] = { 1, 1, 1, 1, 1, 1 };
    const char *KA = "a(x)", *KB = "b(x)", *KC = "c(x)", *KD = "d(x)";
    kv_golden_store *s = kv_golden_open(dir);
    put1(s, "a", KA, z);
    kv_tensor *b0 = f32_23(z), *b1 = f32_23(o);
    const kv_tensor *bo[2] = { b0, b1 };
    assert_int_equal(kv_golden_put(s, "b", KB, bo, 2), KV_OK);
    put1(s, "c", KC, z);
    assert_int_equal(kv_golden_save(s, true, NULL), KV_OK);
    kv_golden_close(s);

    /* Next run: A same, B output 0 changed and output 1 gone, C not run,
     * D new; a full run removes C and B's output 1 with their files. */
    s = kv_golden_open(dir);
    put1(s, "a", KA, z);
    put1(s, "b", KB, o);
    put1(s, "d", KD, o);
    /* Nothing changes before save. */
    assert_null(kv_golden_lookup(s, KD, 0));
    assert_non_null(kv_golden_lookup(s, KC, 0));
    kv_golden_summary sum;
    assert_int_equal(kv_golden_save(s, true, &sum), KV_OK);
    assert_int_equal(sum.added, 1);
    assert_int_equal(sum.changed, 1);
    assert_int_equal(sum.unchanged, 1);
    assert_int_equal(sum.removed, 2);
    assert_int_equal(sum.kept, 0);
    assert_int_equal(sum.files_written, 2); /* b, d */
    assert_int_equal(sum.files_removed, 2); /* b-1, c */
    assert_string_equal(sum.added_list[0].key, KD);
    assert_string_equal(sum.changed_list[0].key, KB);
    assert_int_equal(sum.changed_list[0].output, 0);
    assert_string_equal(sum.removed_list[0].key, KB);
    assert_int_equal(sum.removed_list[0].output, 1);
    assert_string_equal(sum.removed_list[1].key, KC);
    kv_golden_summary_free(&sum);
    entry_path(path, sizeof path, dir, "b", KB, 1);
    assert_false(exists(path));
    entry_path(path, sizeof path, dir, "c", KC, 0);
    assert_false(exists(path));
    snprintf(path, sizeof path, "%s/c", dir);
    assert_false(exists(path)); /* the emptied op directory went too */
    /* The saved state is what lookup sees now. */
    assert_int_equal(kv_golden_count(s), 3);
    assert_non_null(kv_golden_lookup(s, KD, 0));
    assert_null(kv_golden_lookup(s, KC, 0));
    kv_golden_verdict v;
    kv_tensor *t = f32_23(o);
    assert_int_equal(kv_golden_verify(s, KB, 0, t, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    kv_tensor_release(t);
    kv_golden_close(s);

    /* A partial run keeps what it did not put, files included. */
    s = kv_golden_open(dir);
    put1(s, "a", KA, o);
    assert_int_equal(kv_golden_save(s, false, &sum), KV_OK);
    assert_int_equal(sum.changed, 1);
    assert_int_equal(sum.kept, 2);
    assert_int_equal(sum.removed, 0);
    assert_int_equal(sum.files_removed, 0);
    kv_golden_summary_free(&sum);
    kv_golden_close(s);
    s = kv_golden_open(dir);
    assert_int_equal(kv_golden_count(s), 3);
    entry_path(path, sizeof path, dir, "d", KD, 0);
    assert_true(exists(path));
    kv_golden_close(s);

    /* Stray files: an unreferenced .npy goes on a full run, other files stay. */
    snprintf(path, sizeof path, "%s/d/0000000000000000.npy", dir);
    spit(path, "x");
    char keep[256];
    snprintf(keep, sizeof keep, "%s/d/README", dir);
    spit(keep, "mine");
    s = kv_golden_open(dir);
    put1(s, "a", KA, o);
    put1(s, "b", KB, o);
    put1(s, "d", KD, o);
    assert_int_equal(kv_golden_save(s, true, &sum), KV_OK);
    assert_int_equal(sum.unchanged, 3);
    assert_int_equal(sum.files_written, 0);
    assert_int_equal(sum.files_removed, 1);
    kv_golden_summary_free(&sum);
    assert_false(exists(path));
    assert_true(exists(keep));
    kv_golden_close(s);
    kv_tensor_release(b0);
    kv_tensor_release(b1);
}

static void test_regen_repairs_damaged_file(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    kv_golden_close(build_basic_store(dir));
    entry_path(path, sizeof path, dir, "add.Tensor", K_ADD, 0);
    spit(path, "garbage");
    kv_golden_store *s = kv_golden_open(dir);
    put1(s, "add.Tensor", K_ADD, add_out);
    kv_golden_summary sum;
    assert_int_equal(kv_golden_save(s, false, &sum), KV_OK);
    assert_int_equal(sum.unchanged, 1);
    assert_int_equal(sum.files_written, 1);
    kv_golden_summary_free(&sum);
    kv_golden_verdict v;
    assert_int_equal(verify_f32_23(s, add_out, &v), KV_GOLDEN_OK);
    kv_golden_close(s);
}

static void test_deterministic_output(void **state) {
    (void)state;
    char d1[128], d2[128], p1[256], p2[256];
    new_store_dir(d1, sizeof d1);
    new_store_dir(d2, sizeof d2);
    kv_golden_close(build_basic_store(d1));
    /* The same entries put in the other order, into another store. */
    kv_golden_store *s = kv_golden_open(d2);
    put1(s, "add.Tensor", K_ADD, add_out);
    kv_tensor *mv = kv_tensor_from_data(&max_val, NULL, 0, KV_F32);
    kv_tensor *mi = kv_tensor_from_data(&max_idx, NULL, 0, KV_I64);
    const kv_tensor *two[2] = { mv, mi };
    assert_int_equal(kv_golden_put(s, "max.dim", K_MAX, two, 2), KV_OK);
    assert_int_equal(kv_golden_save(s, true, NULL), KV_OK);
    kv_golden_close(s);
    const char *files[2] = { "MANIFEST", NULL };
    char rel[128];
    entry_path(rel, sizeof rel, ".", "max.dim", K_MAX, 1);
    files[1] = rel + 2;
    for (int i = 0; i < 2; i++) {
        snprintf(p1, sizeof p1, "%s/%s", d1, files[i]);
        snprintf(p2, sizeof p2, "%s/%s", d2, files[i]);
        size_t l1, l2;
        unsigned char *a = slurp(p1, &l1), *b = slurp(p2, &l2);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(l1, l2);
        assert_memory_equal(a, b, l1);
        free(a);
        free(b);
    }
    /* Saving again changes no byte. */
    snprintf(p1, sizeof p1, "%s/MANIFEST", d2);
    size_t l1, l2;
    unsigned char *before = slurp(p1, &l1);
    s = kv_golden_open(d2);
    put1(s, "add.Tensor", K_ADD, add_out);
    assert_int_equal(kv_golden_put(s, "max.dim", K_MAX, two, 2), KV_OK);
    kv_golden_summary sum;
    assert_int_equal(kv_golden_save(s, true, &sum), KV_OK);
    assert_int_equal(sum.unchanged, 3);
    assert_int_equal(sum.added + sum.changed + sum.removed + sum.files_written + sum.files_removed, 0);
    kv_golden_summary_free(&sum);
    assert_int_equal(kv_golden_save(s, true, &sum), KV_OK); /* nothing put: a full run empties it */
    assert_int_equal(sum.removed, 3);
    kv_golden_summary_free(&sum);
    kv_golden_close(s);
    unsigned char *after = slurp(p1, &l2);
    assert_true(l2 < l1);
    free(after);
    free(before);
    kv_tensor_release(mv);
    kv_tensor_release(mi);
}

static void test_put_errors(void **state) {
    (void)state;
    char dir[128];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = kv_golden_open(dir);
    kv_tensor *t = f32_23(add_out);
    const kv_tensor *o[1] = { t };
    assert_int_equal(kv_golden_put(s, "add", "a\tb", o, 1), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "contains a tab");
    assert_int_equal(kv_golden_put(s, "add", "a\nb", o, 1), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "line break");
    assert_int_equal(kv_golden_put(s, "add", "#x", o, 1), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "starts with '#'");
    assert_int_equal(kv_golden_put(s, "add", "", o, 1), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_golden_put(s, "../etc", "k", o, 1), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "argument 'op'");
    assert_int_equal(kv_golden_put(s, "a/b", "k", o, 1), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_golden_put(s, "add", "k", o, 0), KV_ERR_INVALID_ARG);
    const kv_tensor *none[1] = { NULL };
    assert_int_equal(kv_golden_put(s, "add", "k", none, 1), KV_ERR_INVALID_ARG);
    kv_tensor *lazy = kv_tensor_alias(t);
    lazy->keys = kv_keyset_add(lazy->keys, KV_KEY_CONJUGATE);
    const kv_tensor *lz[1] = { lazy };
    assert_int_equal(kv_golden_put(s, "add", "k", lz, 1), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "lazy bit");
    /* The same key twice: identical is fine, different is an error. */
    assert_int_equal(kv_golden_put(s, "add", "k", o, 1), KV_OK);
    assert_int_equal(kv_golden_put(s, "add", "k", o, 1), KV_OK);
    float w[6];
    memcpy(w, add_out, sizeof w);
    w[5] = 9.0f;
    kv_tensor *t2 = f32_23(w);
    const kv_tensor *o2[1] = { t2 };
    assert_int_equal(kv_golden_put(s, "add", "k", o2, 1), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "put twice with different outputs");
    /* verify refuses what it cannot read, with an error, not a verdict. */
    kv_golden_verdict v;
    assert_int_equal(kv_golden_verify(s, "k", 0, NULL, &v), KV_ERR_INVALID_ARG);
    kv_tensor_release(lazy);
    kv_tensor_release(t2);
    kv_tensor_release(t);
    kv_golden_close(s);
}

static void test_bf16_and_empty_entries(void **state) {
    (void)state;
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    kv_golden_store *s = kv_golden_open(dir);
    const uint16_t bits[3] = { 0x3f80, 0xc000, 0x7fc0 };
    kv_tensor *b = kv_tensor_from_data(bits, (const int64_t[]){ 3 }, 1, KV_BF16);
    kv_tensor *e = kv_tensor_from_data(NULL, (const int64_t[]){ 0, 3 }, 2, KV_F32);
    const kv_tensor *ob[1] = { b }, *oe[1] = { e };
    assert_int_equal(kv_golden_put(s, "to.dtype", "to(bf16)", ob, 1), KV_OK);
    assert_int_equal(kv_golden_put(s, "empty", "empty(0,3)", oe, 1), KV_OK);
    assert_int_equal(kv_golden_save(s, true, NULL), KV_OK);
    kv_golden_close(s);
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    size_t len;
    char *text = (char *)slurp(path, &len);
    char h[17], line[256];
    snprintf(line, sizeof line, "to(bf16)\t0\tbf16\t[3]\t%s\t", hex_of(XXH3_64bits(bits, 6), h));
    assert_contains(text, line);
    snprintf(line, sizeof line, "empty(0,3)\t0\tf32\t[0,3]\t%s\t", hex_of(XXH3_64bits("", 0), h));
    assert_contains(text, line);
    free(text);
    entry_path(path, sizeof path, dir, "to.dtype", "to(bf16)", 0);
    text = (char *)slurp(path, &len);
    assert_contains(text + 10, "'descr': '<u2'");
    free(text);
    s = kv_golden_open(dir);
    kv_golden_verdict v;
    assert_int_equal(kv_golden_verify(s, "to(bf16)", 0, b, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    assert_int_equal(kv_golden_verify(s, "empty(0,3)", 0, e, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_OK);
    /* The same bits as f16 are stale, not equal. */
    kv_tensor *h16 = kv_tensor_from_data(bits, (const int64_t[]){ 3 }, 1, KV_F16);
    assert_int_equal(kv_golden_verify(s, "to(bf16)", 0, h16, &v), KV_OK);
    assert_int_equal(v.outcome, KV_GOLDEN_STALE);
    kv_tensor_release(h16);
    kv_golden_close(s);
    kv_tensor_release(b);
    kv_tensor_release(e);
}

/* ---- malformed MANIFEST ---- */

static void expect_manifest_error(const char *text, const char *needle) {
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    assert_int_equal(mkdir(dir, 0777), 0);
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    spit(path, text);
    kv_error_clear();
    kv_golden_store *s = kv_golden_open(dir);
    if (s != NULL) fail_msg("MANIFEST accepted:\n%s", text);
    assert_error(KV_ERR_INVALID_ARG, needle);
    assert_true(strncmp(kv_last_error_message(), path, strlen(path)) == 0);
}

#define HDR "# kvsuite golden MANIFEST, format 1\n# comment\n"
#define GOODHASH "0123456789abcdef"

static void test_manifest_malformed_lines(void **state) {
    (void)state;
    char good[256], h[17];
    /* A well-formed line for key "k": its file name is the key's hash. */
    snprintf(good, sizeof good, "k\t0\tf32\t[2,3]\t" GOODHASH "\tadd/%s.npy\n", hex_of(XXH3_64bits("k", 1), h));
    char text[1024];
    snprintf(text, sizeof text, HDR "%s", good);
    char dir[128], path[256];
    new_store_dir(dir, sizeof dir);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    spit(path, text);
    kv_golden_store *s = kv_golden_open(dir);
    assert_non_null(s); /* the baseline parses */
    assert_int_equal(kv_golden_count(s), 1);
    kv_golden_close(s);

    expect_manifest_error(HDR "k\t0\tf32\t[2,3]\t" GOODHASH "\n", "MANIFEST:3: expected 6 tab-separated fields");
    expect_manifest_error(HDR "\n# x\nk\t0\tf99\t[2,3]\t" GOODHASH "\t-\n", "MANIFEST:5: unknown dtype 'f99'");
    expect_manifest_error(HDR "k\tx\tf32\t[2,3]\t" GOODHASH "\t-\n", "MANIFEST:3: output index 'x'");
    expect_manifest_error(HDR "k\t0\tf32\t(2,3)\t" GOODHASH "\t-\n", "MANIFEST:3: shape '(2,3)'");
    expect_manifest_error(HDR "k\t0\tf32\t[2,-3]\t" GOODHASH "\t-\n", "MANIFEST:3: shape");
    expect_manifest_error(HDR "k\t0\tf32\t[2,]\t" GOODHASH "\t-\n", "MANIFEST:3: shape");
    expect_manifest_error(HDR "k\t0\tf32\t[2,3]\t0123\t-\n", "MANIFEST:3: hash '0123'");
    expect_manifest_error(HDR "k\t0\tf32\t[2,3]\t" GOODHASH "\t../../etc/passwd\n", "MANIFEST:3: file");
    expect_manifest_error(HDR "k\t0\tf32\t[2,3]\t" GOODHASH "\tadd/0000000000000000.npy\n", "MANIFEST:3: file");
    expect_manifest_error(HDR "\tk\t0\tf32\t[2,3]\t" GOODHASH "\t-\n", "MANIFEST:3: expected 6");
    expect_manifest_error(HDR "k\t0\tf32\t[2,3]\t" GOODHASH "\t-\r\n", "MANIFEST:3: contains a carriage return");
    snprintf(text, sizeof text, HDR "%sz\t0\tf32\t[1]\t" GOODHASH "\t-\n%s", good, good);
    expect_manifest_error(text, "MANIFEST:5: duplicate entry for key 'k' output 0 (first at line 3)");
    expect_manifest_error("k\t0\tf32\t[2,3]\t" GOODHASH "\t-\n", "MANIFEST:1: not a kvsuite golden MANIFEST");
    expect_manifest_error("# kvsuite golden MANIFEST, format 2\n", "MANIFEST:1: MANIFEST format '2' is not supported");
    expect_manifest_error("", "MANIFEST:1: empty file");
}

/* The exact generator's families (runner/golden/exact.h): the ops of each
 * map to it, an op it does not recompute is exact in double (ref), and
 * every family has a name of its own (messages and stats name them). */
static void test_exact_families(void **state) {
    (void)state;
    static const struct {
        const char *op;
        kv_exact_family family;
        const char *name;
    } rows[] = {
        { "neg", KV_EXACT_REF, "ref" },
        { "gelu", KV_EXACT_UNARY, "unary" },
        { "add.Tensor", KV_EXACT_BINARY, "binary" },
        { "gelu_backward", KV_EXACT_GELU_BACKWARD, "gelu_backward" },
        { "sum.dim_IntList", KV_EXACT_REDUCE, "reduce" },
        { "addmm", KV_EXACT_MATMUL, "matmul" },
        { "_softmax", KV_EXACT_SOFTMAX, "softmax" },
        { "native_layer_norm", KV_EXACT_NORM, "norm" },
        { "unfold_backward", KV_EXACT_SCATTER, "scatter" },
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        assert_int_equal(kv_exact_family_of(rows[i].op), rows[i].family);
        assert_string_equal(kv_exact_family_name(rows[i].family), rows[i].name);
    }
    assert_string_equal(kv_exact_family_name((kv_exact_family)99), "?");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_helpers),
        cmocka_unit_test(test_exact_families),
        cmocka_unit_test(test_missing_manifest_is_empty_store),
        cmocka_unit_test(test_put_save_reopen_ok),
        cmocka_unit_test(test_corrupt_file),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_stale_entry),
        cmocka_unit_test(test_differs_returns_stored),
        cmocka_unit_test(test_hash_only_entries),
        cmocka_unit_test(test_regen_summary),
        cmocka_unit_test(test_regen_repairs_damaged_file),
        cmocka_unit_test(test_deterministic_output),
        cmocka_unit_test(test_put_errors),
        cmocka_unit_test(test_bf16_and_empty_entries),
        cmocka_unit_test(test_manifest_malformed_lines),
    };
    return cmocka_run_group_tests(tests, setup_root, teardown_root);
}
