/* The counter-based RNG (src/core/rng.c), the input fill (runner/fill.c)
 * and building a case's inputs and layouts (runner/inputs.c): determinism
 * (same key + seed, same bytes; another seed, other bytes), every value
 * inside its domain, the special values present, exact fills exact, and
 * every layout holding the same logical values. Cases are built by hand. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/rng.h"
#include "runner/check/check.h"
#include "runner/check/compare.h"
#include "runner/exec/fill.h"
#include "runner/exec/inputs.h"
#include "runner/exec/lazy_inputs.h"
#include "test_util.h"

/* ---- helpers ---- */

static int64_t live_at_start;

static int setup(void **state) {
    (void)state;
    assert_int_equal(kv_init(), KV_OK);
    live_at_start = kv_allocator_stats_of(KV_DEVICE_CPU).live_count;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, live_at_start);
    return 0;
}

static void make(const kv_case *c, bool contiguous, kv_case_inputs *in) {
    const kv_op *op = kv_op_find(c->op);
    if (kv_case_inputs_make(c, op, KV_DEVICE_CPU0, contiguous, in) != KV_OK)
        fail_msg("inputs_make failed: %s", kv_last_error_message());
}

static double get(const kv_tensor *t, int64_t k) {
    int64_t idx[KV_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = k % t->sizes[d];
        k /= t->sizes[d];
    }
    return kv_tensor_get_f64(t, idx);
}

static bool same_bytes(const kv_tensor *a, const kv_tensor *b) {
    const size_t n = (size_t)kv_tensor_numel(a) * kv_dtype_size(a->dtype);
    return n == (size_t)kv_tensor_numel(b) * kv_dtype_size(b->dtype) && memcmp(kv_tensor_data(a), kv_tensor_data(b), n) == 0;
}

/* ---- the RNG ---- */

static void test_rng_known_values(void **state) {
    (void)state;
    /* SplitMix64 seeded with 0 outputs mix64(k * 0x9E3779B97F4A7C15) for
     * k = 1, 2, ...: the published sequence starts e220a8397b1dcdaf,
     * 6e789e6aa1b965f4. */
    assert_true(kv_rng_mix64(0x9E3779B97F4A7C15ull) == 0xE220A8397B1DCDAFull);
    assert_true(kv_rng_mix64(0x9E3779B97F4A7C15ull * 2u) == 0x6E789E6AA1B965F4ull);
    assert_true(kv_rng_mix64(0) == 0);
    /* XXH3-64 of the empty string with seed 0 (xxHash's test vector). */
    assert_true(kv_rng_key("", 0) == 0x2D06800538D394C2ull);
    assert_true(kv_rng_key("a", 0) != kv_rng_key("a", 1));
}

static void test_rng_ranges(void **state) {
    (void)state;
    const uint64_t key = kv_rng_key("range", 7);
    int hist[10] = { 0 };
    for (uint64_t c = 0; c < 2000; c++) {
        const double u = kv_rng_uniform(key, c);
        assert_true(u >= 0.0 && u < 1.0);
        const uint64_t b = kv_rng_below(key, c, 10);
        assert_true(b < 10);
        hist[b]++;
    }
    /* Each bucket expects 200; a broken mixer (constant, or stuck bits)
     * would leave some far off. 120..280 is > 5 sigma. */
    for (int i = 0; i < 10; i++) assert_true(hist[i] > 120 && hist[i] < 280);
    assert_true(kv_rng_below(key, 3, 0) == 0);
    /* Streams differ, and a value depends only on (key, counter). */
    assert_true(kv_rng_u64(key, 5) == kv_rng_u64(key, 5));
    assert_true(kv_rng_u64(key, 5) != kv_rng_u64(key, 6));
    assert_true(kv_rng_u64(kv_rng_substream(key, 0), 5) != kv_rng_u64(kv_rng_substream(key, 1), 5));
}

/* ---- determinism ---- */

static void test_same_seed_same_bytes(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 4, 5 } }, { 2, { 4, 5 } } };
    kv_case c = kv_test_case_of("add.Tensor", KV_F32, 2, sh);
    kv_case_inputs a, b, d;
    make(&c, true, &a);
    make(&c, true, &b);
    assert_true(same_bytes(a.tensors[0], b.tensors[0]));
    assert_true(same_bytes(a.tensors[1], b.tensors[1]));
    /* The two inputs are different streams. */
    assert_false(same_bytes(a.tensors[0], a.tensors[1]));
    c.seed = 1;
    make(&c, true, &d);
    assert_false(same_bytes(a.tensors[0], d.tensors[0]));
    /* The layout and the device are not part of the values. */
    c.seed = 0;
    c.layouts[0] = KV_LAYOUT_TRANSPOSED;
    kv_case_inputs t;
    make(&c, false, &t);
    kv_cmp_report rep;
    const kv_cmp_rule strict = { KV_CMP_BITWISE, 0, false, true };
    assert_int_equal(kv_compare(a.tensors[0], t.tensors[0], &strict, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
    kv_case_inputs_free(&a);
    kv_case_inputs_free(&b);
    kv_case_inputs_free(&d);
    kv_case_inputs_free(&t);
}

/* ---- domains ---- */

static void test_real_domains(void **state) {
    (void)state;
    const kv_shape s1[1] = { { 1, { 200 } } };
    kv_case c = kv_test_case_of("log", KV_F32, 1, s1);
    kv_case_inputs in;
    make(&c, true, &in);
    for (int64_t k = 0; k < 200; k++) {
        const double v = get(in.tensors[0], k);
        assert_true(v >= 0.0625 && v < 4.0);
    }
    kv_case_inputs_free(&in);

    const kv_shape s2[2] = { { 1, { 200 } }, { 1, { 200 } } };
    c = kv_test_case_of("add.Tensor", KV_F64, 2, s2);
    make(&c, true, &in);
    double lo = 1e9, hi = -1e9;
    for (int64_t k = 0; k < 200; k++) {
        const double v = get(in.tensors[0], k);
        assert_true(v >= -2.0 && v < 2.0);
        lo = fmin(lo, v);
        hi = fmax(hi, v);
    }
    assert_true(lo < -1.5 && hi > 1.5); /* it is spread over the domain */
    kv_case_inputs_free(&in);

    c = kv_test_case_of("div.Tensor", KV_F32, 2, s2);
    make(&c, true, &in);
    int neg = 0;
    for (int64_t k = 0; k < 200; k++) {
        const double v = get(in.tensors[1], k);
        assert_true(fabs(v) >= 0.25 && fabs(v) < 2.0);
        neg += v < 0;
    }
    assert_true(neg > 50 && neg < 150);
    kv_case_inputs_free(&in);

    const kv_shape s3[3] = { { 1, { 64 } }, { 1, { 64 } }, { 1, { 64 } } };
    c = kv_test_case_of("where.self", KV_F32, 3, s3);
    c.dtypes[0] = KV_BOOL;
    make(&c, true, &in);
    int ones = 0;
    for (int64_t k = 0; k < 64; k++) {
        const uint8_t b = ((const uint8_t *)kv_tensor_data(in.tensors[0]))[k];
        assert_true(b == 0 || b == 1);
        ones += b;
    }
    assert_true(ones > 10 && ones < 54);
    kv_case_inputs_free(&in);
}

/* fill=shifted: the real fill's values moved by C = 2^(floor(p/2) - 2)
 * on real floating inputs, indices and integers left as real fills them. */
static void test_shifted(void **state) {
    (void)state;
    static const struct {
        kv_dtype dt;
        double c;
    } rows[] = { { KV_F16, 8.0 }, { KV_BF16, 4.0 }, { KV_F32, 1024.0 }, { KV_F64, 16777216.0 } };
    const kv_shape s2[2] = { { 1, { 200 } }, { 1, { 200 } } };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        kv_case c = kv_test_case_of("add.Tensor", rows[r].dt, 2, s2);
        kv_case_inputs sh;
        c.fill = KV_FILL_SHIFTED;
        make(&c, true, &sh);
        double lo = 1e300, hi = -1e300;
        for (int64_t k = 0; k < 200; k++) {
            const double v = get(sh.tensors[0], k);
            assert_true(v >= rows[r].c - 2.0 && v <= rows[r].c + 2.0);
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
        /* Spread over the real fill's whole width around C. */
        assert_true(lo < rows[r].c - 1.5 && hi > rows[r].c + 1.5);
        kv_case_inputs_free(&sh);
    }
    /* An index keeps its range; an integer input is not moved. */
    const kv_shape si[2] = { { 2, { 8, 4 } }, { 1, { 6 } } };
    kv_case c = kv_test_case_of("index_select", KV_F32, 2, si);
    kv_test_case_add_arg(&c, "dim", "0");
    c.dtypes[1] = KV_I64;
    c.fill = KV_FILL_SHIFTED;
    kv_case_inputs in;
    make(&c, true, &in);
    for (int64_t k = 0; k < 6; k++) {
        const double v = get(in.tensors[1], k);
        assert_true(v >= 0 && v < 8);
    }
    for (int64_t k = 0; k < 32; k++) assert_true(get(in.tensors[0], k) >= 1022.0);
    kv_case_inputs_free(&in);
    const kv_shape s1[2] = { { 1, { 64 } }, { 1, { 64 } } };
    c = kv_test_case_of("add.Tensor", KV_I32, 2, s1);
    c.fill = KV_FILL_SHIFTED;
    make(&c, true, &in);
    for (int64_t k = 0; k < 64; k++) assert_true(fabs(get(in.tensors[0], k)) <= 8.0);
    kv_case_inputs_free(&in);
}

static void test_index_domains(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 3, 7 } }, { 1, { 50 } } };
    for (int f = 0; f < 3; f++) {
        kv_case c = kv_test_case_of("index_select", KV_F32, 2, sh);
        c.dtypes[1] = KV_I64;
        c.fill = (kv_fill)f;
        kv_test_case_add_arg(&c, "dim", "-1");
        kv_case_inputs in;
        make(&c, true, &in);
        bool saw_last = false;
        for (int64_t k = 0; k < 50; k++) {
            const int64_t v = ((const int64_t *)kv_tensor_data(in.tensors[1]))[k];
            assert_true(v >= 0 && v < 7);
            saw_last |= v == 6;
        }
        assert_true(saw_last);
        /* The boxed arguments: self, dim, index in schema order. */
        assert_int_equal(in.nargs, 3);
        assert_int_equal(in.args[1].tag, KV_IV_INT);
        assert_int_equal(in.args[1].v.i, -1);
        assert_ptr_equal(in.args[2].v.tensor, in.tensors[1]);
        kv_case_inputs_free(&in);
    }
    const kv_shape se[2] = { { 2, { 5, 3 } }, { 2, { 4, 4 } } };
    kv_case c = kv_test_case_of("embedding", KV_F32, 2, se);
    c.dtypes[1] = KV_I32;
    kv_case_inputs in;
    make(&c, true, &in);
    for (int64_t k = 0; k < 16; k++) {
        const int32_t v = ((const int32_t *)kv_tensor_data(in.tensors[1]))[k];
        assert_true(v >= 0 && v < 5);
    }
    kv_case_inputs_free(&in);
}

/* ---- exact ---- */

static void test_exact_quarters_and_ints(void **state) {
    (void)state;
    const kv_shape s2[2] = { { 1, { 300 } }, { 1, { 300 } } };
    kv_case c = kv_test_case_of("mul.Tensor", KV_BF16, 2, s2);
    c.fill = KV_FILL_EXACT;
    kv_case_inputs in;
    make(&c, true, &in);
    bool frac = false;
    for (int64_t k = 0; k < 300; k++) {
        const double v = get(in.tensors[0], k);
        assert_true(fabs(v) <= 4.0);
        assert_true(v * 4.0 == floor(v * 4.0)); /* quarters */
        frac |= v != floor(v);
    }
    assert_true(frac);
    kv_case_inputs_free(&in);

    c = kv_test_case_of("mul.Tensor", KV_U8, 2, s2);
    c.fill = KV_FILL_EXACT;
    make(&c, true, &in);
    for (int64_t k = 0; k < 300; k++) assert_true(get(in.tensors[0], k) <= 8.0);
    kv_case_inputs_free(&in);
}

/* The range shrinks with the accumulation length, and the result of a
 * matmul is then exact: the f16 reference equals the f64 dot product. */
static void test_exact_matmul_is_exact(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 4, 128 } }, { 2, { 128, 3 } } };
    kv_case c = kv_test_case_of("mm", KV_F16, 2, sh);
    c.fill = KV_FILL_EXACT;
    kv_case_inputs in;
    make(&c, true, &in);
    int64_t maxv = 0;
    for (int64_t k = 0; k < 4 * 128; k++) {
        const double v = get(in.tensors[0], k);
        assert_true(v == floor(v) && fabs(v) <= 4.0);
        maxv = fabs(v) > (double)maxv ? (int64_t)fabs(v) : maxv;
    }
    assert_int_equal(maxv, 4); /* K = 128: 16 * 128 = 2048 = 2^11 */
    kv_tensor *out = kv_mm(in.tensors[0], in.tensors[1]);
    assert_non_null(out);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0.0;
            for (int k = 0; k < 128; k++) s += get(in.tensors[0], i * 128 + k) * get(in.tensors[1], k * 3 + j);
            assert_true(get(out, i * 3 + j) == s);
        }
    kv_tensor_release(out);
    kv_case_inputs_free(&in);

    /* bf16 (8 bits) with K = 64: 256/64 = 4 = R^2, so R = 2. */
    const kv_shape sb[2] = { { 2, { 2, 64 } }, { 2, { 64, 2 } } };
    c = kv_test_case_of("mm", KV_BF16, 2, sb);
    c.fill = KV_FILL_EXACT;
    make(&c, true, &in);
    for (int64_t k = 0; k < 128; k++) assert_true(fabs(get(in.tensors[0], k)) <= 2.0);
    kv_case_inputs_free(&in);

    /* sum over 256 bf16 elements: R = 256/256 = 1. */
    const kv_shape ss[1] = { { 1, { 256 } } };
    c = kv_test_case_of("sum.dim_IntList", KV_BF16, 1, ss);
    c.fill = KV_FILL_EXACT;
    make(&c, true, &in);
    for (int64_t k = 0; k < 256; k++) assert_true(fabs(get(in.tensors[0], k)) <= 1.0);
    kv_case_inputs_free(&in);

    /* prod: +-1 only. */
    const kv_shape sp[1] = { { 2, { 4, 8 } } };
    c = kv_test_case_of("prod.dim_int", KV_F16, 1, sp);
    c.fill = KV_FILL_EXACT;
    kv_test_case_add_arg(&c, "dim", "1");
    make(&c, true, &in);
    for (int64_t k = 0; k < 32; k++) assert_true(fabs(get(in.tensors[0], k)) == 1.0);
    kv_case_inputs_free(&in);
}

/* ---- special ---- */

static void test_special_values_present(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 1, { 169 } }, { 1, { 169 } } };
    kv_case c = kv_test_case_of("add.Tensor", KV_F32, 2, sh);
    c.fill = KV_FILL_SPECIAL;
    kv_case_inputs in;
    make(&c, true, &in);
    const uint32_t *a = kv_tensor_data(in.tensors[0]), *b = kv_tensor_data(in.tensors[1]);
    static const uint32_t want[13] = { 0x7FC00000u, 0x7F800000u, 0xFF800000u, 0x00000000u, 0x80000000u,
                                       0x00000001u, 0x80000001u, 0x00800000u, 0x80800000u, 0x7F7FFFFFu,
                                       0xFF7FFFFFu, 0x3F800000u, 0xBF800000u };
    for (int w = 0; w < 13; w++) {
        bool found = false;
        for (int k = 0; k < 169 && !found; k++) found = a[k] == want[w];
        if (!found) fail_msg("special value 0x%08x missing", want[w]);
    }
    /* Input 0 takes digit 0, input 1 digit 1: all 13 x 13 pairs occur. */
    int pairs = 0;
    for (int x = 0; x < 13; x++)
        for (int y = 0; y < 13; y++) {
            bool found = false;
            for (int k = 0; k < 169 && !found; k++) found = a[k] == want[x] && b[k] == want[y];
            pairs += found;
        }
    assert_int_equal(pairs, 169);
    kv_case_inputs_free(&in);

    /* f16 and bf16 extremes. */
    c = kv_test_case_of("add.Tensor", KV_F16, 2, sh);
    c.fill = KV_FILL_SPECIAL;
    make(&c, true, &in);
    const uint16_t *h = kv_tensor_data(in.tensors[0]);
    static const uint16_t hw[5] = { 0x0001u, 0x0400u, 0x7BFFu, 0xFC00u, 0x8000u };
    for (int w = 0; w < 5; w++) {
        bool found = false;
        for (int k = 0; k < 13 && !found; k++) found = h[k] == hw[w];
        assert_true(found);
    }
    kv_case_inputs_free(&in);
    c = kv_test_case_of("add.Tensor", KV_BF16, 2, sh);
    c.fill = KV_FILL_SPECIAL;
    make(&c, true, &in);
    h = kv_tensor_data(in.tensors[0]);
    static const uint16_t bw[3] = { 0x0001u, 0x0080u, 0x7F7Fu };
    for (int w = 0; w < 3; w++) {
        bool found = false;
        for (int k = 0; k < 13 && !found; k++) found = h[k] == bw[w];
        assert_true(found);
    }
    kv_case_inputs_free(&in);

    /* Integers: min, max, 0, -1, 1; bools both. */
    c = kv_test_case_of("add.Tensor", KV_I8, 2, sh);
    c.fill = KV_FILL_SPECIAL;
    make(&c, true, &in);
    const int8_t *i8 = kv_tensor_data(in.tensors[0]);
    static const int8_t iw[5] = { -128, 127, 0, -1, 1 };
    for (int w = 0; w < 5; w++) {
        bool found = false;
        for (int k = 0; k < 5 && !found; k++) found = i8[k] == iw[w];
        assert_true(found);
    }
    kv_case_inputs_free(&in);
    c = kv_test_case_of("eq.Tensor", KV_BOOL, 2, sh);
    c.fill = KV_FILL_SPECIAL;
    make(&c, true, &in);
    const uint8_t *bb = kv_tensor_data(in.tensors[0]);
    assert_true(bb[0] != bb[1]);
    kv_case_inputs_free(&in);
}

/* ---- layouts ---- */

/* What every mutated input under grad must be: a non-leaf that needs a
 * gradient, with the leaf's strides and offset, holding `values` bit for
 * bit. */
static void assert_nonleaf_like_leaf(kv_tensor *in, const kv_tensor *leaf, const kv_tensor *values) {
    assert_non_null(in);
    assert_non_null(leaf);
    assert_true(in != leaf);
    assert_false(kv_tensor_is_leaf(in));
    assert_true(kv_tensor_requires_grad(in));
    assert_memory_equal(in->strides, leaf->strides, 2 * sizeof(int64_t));
    assert_int_equal(in->offset, leaf->offset);
    const kv_cmp_rule strict = { KV_CMP_BITWISE, 0, false, true };
    kv_cmp_report rep;
    assert_int_equal(kv_compare(values, in, &strict, NULL, &rep), KV_OK);
    assert_int_equal(rep.mismatched, 0);
}

/* Under grad an in-place op's self cannot be the leaf: it gets a
 * non-leaf copy, which must keep the case's layout (a clone would be
 * contiguous, and the op would never see the strides the case asks
 * about), hold the same values and lead back to the leaf. */
static void test_grad_mutated_input_keeps_layout(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 2, { 4, 5 } } };
    const kv_layout lays[3] = { KV_LAYOUT_TRANSPOSED, KV_LAYOUT_STRIDED, KV_LAYOUT_OFFSET };
    for (int l = 0; l < 3; l++) {
        kv_case c = kv_test_case_of("neg", KV_F32, 1, sh);
        kv_case_inputs gold;
        make(&c, true, &gold);
        const kv_tensor *logical = gold.tensors[0];
        kv_tensor *leaf = NULL;
        kv_tensor *in = kv_lazy_input_build(logical, 0, lays[l], KV_DEVICE_CPU0, true, true, &leaf);
        assert_nonleaf_like_leaf(in, leaf, logical);
        assert_false(kv_tensor_is_contiguous(in) && in->offset == 0);
        kv_tensor_release(in);
        kv_tensor_release(leaf);
        kv_case_inputs_free(&gold);
    }
}

/* Off the host a leaf that requires grad under conj/neg is the input
 * itself, carrying its bits (no op runs on the device to build it), and
 * kv_lazy_leaf_grad maps its gradient back to the stored values: bit for
 * bit the host's, whose leaf is the stored values under a recorded
 * conj/_neg_view chain. Complex values and weights, so a map that
 * dropped the conj or the negation shows. */
static void test_grad_lazy_leaf_off_host(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 3, 4 } }, { 2, { 3, 4 } } };
    kv_case c = kv_test_case_of("mul.Tensor", KV_C64, 2, sh);
    kv_case_inputs gold;
    make(&c, true, &gold);
    assert_int_equal(kv_accel_select_target("cpu"), KV_OK);
    const unsigned bits[3] = { KV_CASE_LAZY_CONJ, KV_CASE_LAZY_NEG, KV_CASE_LAZY_CONJ | KV_CASE_LAZY_NEG };
    const kv_device devs[2] = { KV_DEVICE_CPU0, { KV_DEVICE_ACCEL, 0 } };
    for (int b = 0; b < 3; b++) {
        kv_tensor *grads[2] = { NULL, NULL };
        for (int d = 0; d < 2; d++) {
            kv_tensor *leaf = NULL;
            kv_tensor *in =
                kv_lazy_input_build(gold.tensors[0], bits[b], KV_LAYOUT_CONTIGUOUS, devs[d], true, false, &leaf);
            if (in == NULL) fail_msg("bits %u on device %d: %s", bits[b], d, kv_last_error_message());
            assert_non_null(leaf);
            /* On accel: the leaf itself, carrying the bits. */
            assert_int_equal(kv_tensor_is_leaf(in), d == 1);
            if (d == 1) {
                assert_ptr_equal(in, leaf);
                assert_int_equal(kv_keyset_has(in->keys, KV_KEY_CONJUGATE), (bits[b] & KV_CASE_LAZY_CONJ) != 0);
                assert_int_equal(kv_keyset_has(in->keys, KV_KEY_NEGATIVE), (bits[b] & KV_CASE_LAZY_NEG) != 0);
            }
            kv_tensor *w = kv_layout_place(gold.tensors[1], KV_LAYOUT_CONTIGUOUS, devs[d]);
            assert_non_null(w);
            kv_tensor *y = kv_mul(in, w);
            if (y == NULL) fail_msg("mul: %s", kv_last_error_message());
            if (kv_backward(y, w) != KV_OK) fail_msg("backward: %s", kv_last_error_message());
            assert_int_equal(kv_lazy_leaf_grad(leaf, &grads[d]), KV_OK);
            assert_non_null(grads[d]);
            assert_int_equal(grads[d]->device.type, KV_DEVICE_CPU);
            kv_tensor_release(y);
            kv_tensor_release(w);
            kv_tensor_release(in);
            kv_tensor_release(leaf);
        }
        const kv_cmp_rule strict = { KV_CMP_BITWISE, 0, false, true };
        kv_cmp_report rep;
        assert_int_equal(kv_compare(grads[0], grads[1], &strict, NULL, &rep), KV_OK);
        assert_int_equal(rep.mismatched, 0);
        kv_tensor_release(grads[0]);
        kv_tensor_release(grads[1]);
    }
    assert_int_equal(kv_accel_select_target(NULL), KV_OK);
    kv_case_inputs_free(&gold);
}

/* Off the host an in-place op's self under grad is built without an op
 * on the device: placed with the copy ABI like the leaf and recorded as
 * a copy of it (kv_autograd_record_copy). It must be a non-leaf in the
 * case's layout holding the leaf's values, and an in-place op through it
 * must give the leaf bit for bit the gradient the host's recorded copy_
 * gives. Real values and weights in every non-overlapping layout. */
static void test_grad_mutated_nonleaf_off_host(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 4, 5 } }, { 2, { 4, 5 } } };
    kv_case c = kv_test_case_of("mul_.Tensor", KV_F32, 2, sh);
    kv_case_inputs gold;
    make(&c, true, &gold);
    assert_int_equal(kv_accel_select_target("cpu"), KV_OK);
    const kv_layout lays[4] = { KV_LAYOUT_CONTIGUOUS, KV_LAYOUT_TRANSPOSED, KV_LAYOUT_STRIDED, KV_LAYOUT_OFFSET };
    const kv_device devs[2] = { KV_DEVICE_CPU0, { KV_DEVICE_ACCEL, 0 } };
    for (int l = 0; l < 4; l++) {
        kv_tensor *grads[2] = { NULL, NULL };
        for (int d = 0; d < 2; d++) {
            kv_tensor *leaf = NULL;
            kv_tensor *in = kv_lazy_input_build(gold.tensors[0], 0, lays[l], devs[d], true, true, &leaf);
            if (in == NULL) fail_msg("layout %d on device %d: %s", l, d, kv_last_error_message());
            assert_non_null(leaf);
            assert_true(in != leaf);
            assert_false(kv_tensor_is_leaf(in));
            assert_true(kv_tensor_requires_grad(in));
            assert_memory_equal(in->strides, leaf->strides, 2 * sizeof(int64_t));
            assert_int_equal(in->offset, leaf->offset);
            if (d == 1) assert_string_equal(kv_tensor_grad_fn_name(in), "CopyBackwards");
            kv_tensor *hin = kv_backend_copy_to_host(in);
            assert_non_null(hin);
            const kv_cmp_rule same = { KV_CMP_BITWISE, 0, false, true };
            kv_cmp_report vrep;
            assert_int_equal(kv_compare(gold.tensors[0], hin, &same, NULL, &vrep), KV_OK);
            assert_int_equal(vrep.mismatched, 0);
            kv_tensor_release(hin);
            kv_tensor *w = kv_layout_place(gold.tensors[1], KV_LAYOUT_CONTIGUOUS, devs[d]);
            assert_non_null(w);
            if (kv_mul_(in, w) != KV_OK) fail_msg("mul_: %s", kv_last_error_message());
            if (kv_backward(in, w) != KV_OK) fail_msg("backward: %s", kv_last_error_message());
            assert_int_equal(kv_lazy_leaf_grad(leaf, &grads[d]), KV_OK);
            assert_non_null(grads[d]);
            kv_tensor *h = kv_backend_copy_to_host(grads[d]);
            kv_tensor_release(grads[d]);
            grads[d] = h;
            kv_tensor_release(w);
            kv_tensor_release(in);
            kv_tensor_release(leaf);
        }
        const kv_cmp_rule strict = { KV_CMP_BITWISE, 0, false, true };
        kv_cmp_report rep;
        assert_int_equal(kv_compare(grads[0], grads[1], &strict, NULL, &rep), KV_OK);
        assert_int_equal(rep.compared, 20);
        assert_int_equal(rep.mismatched, 0);
        kv_tensor_release(grads[0]);
        kv_tensor_release(grads[1]);
    }
    assert_int_equal(kv_accel_select_target(NULL), KV_OK);
    /* What kv_autograd_record_copy refuses, each by name. */
    kv_tensor *src = kv_clone(gold.tensors[0], NULL), *dst = kv_clone(gold.tensors[0], NULL);
    assert_int_equal(kv_autograd_record_copy(NULL, src), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_autograd_record_copy(dst, src), KV_ERR_INVALID_ARG); /* src needs no grad */
    assert_non_null(strstr(kv_last_error_message(), "'src': does not require grad"));
    assert_int_equal(kv_tensor_set_requires_grad(src, true), KV_OK);
    kv_tensor *row = kv_select(gold.tensors[0], 0, 0);
    assert_int_equal(kv_autograd_record_copy(row, src), KV_ERR_SHAPE);
    assert_int_equal(kv_autograd_record_copy(dst, src), KV_OK);
    assert_false(kv_tensor_is_leaf(dst));
    assert_int_equal(kv_autograd_record_copy(dst, src), KV_ERR_INVALID_ARG); /* dst has history now */
    assert_non_null(strstr(kv_last_error_message(), "already has autograd history"));
    kv_error_clear();
    kv_tensor_release(row);
    kv_tensor_release(dst);
    kv_tensor_release(src);
    kv_case_inputs_free(&gold);
}

/* Under grad an in-place op's self in an overlapping layout (b, w) is a
 * non-leaf with the leaf's exact strides and values (an as_strided view
 * of a clone of its storage), so a write into it is refused as without
 * the mode, fill_ still runs, and the gradient reaches the leaf. */
static void test_grad_mutated_input_keeps_overlap(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 2, { 6, 7 } } };
    const kv_layout lays[2] = { KV_LAYOUT_BROADCAST, KV_LAYOUT_WINDOW };
    for (int l = 0; l < 2; l++) {
        kv_case c = kv_test_case_of("neg", KV_F32, 1, sh);
        c.layouts[0] = lays[l];
        kv_case_inputs lay;
        make(&c, false, &lay);
        const kv_tensor *placed = lay.tensors[0];
        kv_tensor *leaf = NULL;
        kv_tensor *in = kv_lazy_input_build(placed, 0, lays[l], KV_DEVICE_CPU0, true, true, &leaf);
        assert_nonleaf_like_leaf(in, leaf, placed);
        assert_int_equal(kv_tensor_internal_overlap(in, NULL), KV_OVERLAP_YES);
        /* add_ refused as without grad; fill_ writes one value. */
        kv_tensor *one = kv_ones((kv_int_list){ sh[0].sizes, 2 }, NULL, NULL, NULL, NULL);
        assert_int_not_equal(kv_add_(in, one, kv_scalar_int(1)), KV_OK);
        assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
        assert_int_equal(kv_fill_(in, kv_scalar_double(2.5)), KV_OK);
        assert_true(kv_tensor_get_f64(in, (int64_t[]){ 5, 6 }) == 2.5);
        /* sum(in * one) after the fill does not depend on the leaf: its
         * gradient is zero, through as_strided's backward. */
        kv_tensor *y = kv_mul(in, one);
        kv_tensor *loss = y ? kv_sum(y, NULL, false, NULL) : NULL;
        assert_non_null(loss);
        if (kv_backward(loss, NULL) != KV_OK) fail_msg("backward: %s", kv_last_error_message());
        kv_tensor *g = kv_tensor_grad(leaf);
        if (g != NULL) {
            for (int64_t i = 0; i < 6; i++)
                for (int64_t j = 0; j < 7; j++) assert_true(kv_tensor_get_f64(g, (int64_t[]){ i, j }) == 0.0);
        }
        kv_tensor_release(loss);
        kv_tensor_release(y);
        kv_tensor_release(one);
        kv_tensor_release(in);
        kv_tensor_release(leaf);
        kv_case_inputs_free(&lay);
    }
}

static void test_layouts_same_values(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 3, { 3, 4, 5 } } };
    const kv_layout all[6] = { KV_LAYOUT_CONTIGUOUS, KV_LAYOUT_TRANSPOSED, KV_LAYOUT_STRIDED, KV_LAYOUT_OFFSET,
                               KV_LAYOUT_BROADCAST, KV_LAYOUT_WINDOW };
    const kv_cmp_rule strict = { KV_CMP_BITWISE, 0, false, true };
    for (int l = 0; l < 6; l++) {
        kv_case c = kv_test_case_of("neg", KV_F32, 1, sh);
        c.layouts[0] = all[l];
        kv_case_inputs gold, lay;
        make(&c, true, &gold);
        make(&c, false, &lay);
        const kv_tensor *g = gold.tensors[0], *t = lay.tensors[0];
        assert_true(kv_tensor_is_contiguous(g));
        kv_cmp_report rep;
        assert_int_equal(kv_compare(g, t, &strict, NULL, &rep), KV_OK);
        assert_int_equal(rep.mismatched, 0);
        assert_int_equal(rep.compared, 60);
        switch (all[l]) {
        case KV_LAYOUT_CONTIGUOUS: assert_true(kv_tensor_is_contiguous(t)); break;
        case KV_LAYOUT_TRANSPOSED:
            assert_int_equal(t->strides[1], 1);
            assert_int_equal(t->strides[2], 4);
            assert_int_equal(t->strides[0], 20);
            break;
        case KV_LAYOUT_STRIDED:
            assert_int_equal(t->strides[2], 2);
            assert_int_equal(t->strides[1], 10);
            break;
        case KV_LAYOUT_OFFSET: assert_int_equal(t->offset, KV_LAYOUT_OFFSET_ELEMS); break;
        case KV_LAYOUT_BROADCAST:
            assert_int_equal(t->strides[0], 0);
            /* Values repeat along dim 0, in the golden run too. */
            for (int64_t k = 0; k < 20; k++) {
                assert_true(get(g, k) == get(g, k + 20));
                assert_true(get(g, k) == get(g, k + 40));
            }
            break;
        case KV_LAYOUT_WINDOW:
            /* Rows of 20 elements, 10 apart in 40: row i's second half is
             * row i + 1's first, in the golden run too. */
            assert_int_equal(t->strides[0], 10);
            assert_int_equal(t->strides[2], 1);
            assert_int_equal((int64_t)t->storage->nbytes, 40 * (int64_t)sizeof(float));
            for (int64_t k = 0; k < 10; k++) {
                assert_true(get(g, 10 + k) == get(g, 20 + k));
                assert_true(get(g, 30 + k) == get(g, 40 + k));
            }
            assert_true(get(g, 0) != get(g, 20) || get(g, 1) != get(g, 21));
            break;
        }
        kv_case_inputs_free(&gold);
        kv_case_inputs_free(&lay);
    }
    /* A 1-d tensor in layout t is just contiguous. */
    const kv_shape s1[1] = { { 1, { 6 } } };
    kv_case c = kv_test_case_of("neg", KV_F32, 1, s1);
    c.layouts[0] = KV_LAYOUT_TRANSPOSED;
    kv_case_inputs in;
    make(&c, false, &in);
    assert_true(kv_tensor_is_contiguous(in.tensors[0]));
    kv_case_inputs_free(&in);
}

static void test_broadcast_golden_key(void **state) {
    (void)state;
    const kv_shape sh[2] = { { 2, { 4, 5 } }, { 2, { 4, 5 } } };
    kv_case c = kv_test_case_of("add.Tensor", KV_F32, 2, sh);
    char plain[1024], bk[1024];
    kv_fill_golden_key(&c, plain, (int)sizeof plain);
    c.layouts[0] = KV_LAYOUT_TRANSPOSED;
    kv_fill_golden_key(&c, bk, (int)sizeof bk);
    assert_string_equal(plain, bk); /* t does not change the problem */
    c.layouts[1] = KV_LAYOUT_BROADCAST;
    kv_fill_golden_key(&c, bk, (int)sizeof bk);
    assert_int_equal(strncmp(plain, bk, strlen(plain)), 0);
    assert_string_equal(bk + strlen(plain), "+bcast0=1");
    /* w marks its input too; on a shape it does not apply to (one dim) it
     * is contiguous and the key stays plain. */
    c.layouts[0] = KV_LAYOUT_WINDOW;
    kv_fill_golden_key(&c, bk, (int)sizeof bk);
    assert_string_equal(bk + strlen(plain), "+bcast0=1+win0=0");
    const kv_shape one[1] = { { 1, { 6 } } };
    kv_case d = kv_test_case_of("neg", KV_F32, 1, one);
    kv_fill_golden_key(&d, plain, (int)sizeof plain);
    d.layouts[0] = KV_LAYOUT_WINDOW;
    kv_fill_golden_key(&d, bk, (int)sizeof bk);
    assert_string_equal(plain, bk);
}

/* ---- arguments and bad cases ---- */

static void test_args_boxing(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 2, { 2, 3 } } };
    kv_case c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    kv_test_case_add_arg(&c, "dim", "[0,1]");
    kv_test_case_add_arg(&c, "keepdim", "1");
    kv_case_inputs in;
    make(&c, true, &in);
    assert_int_equal(in.args[1].tag, KV_IV_INT_LIST);
    assert_int_equal(in.args[1].v.ints.n, 2);
    assert_int_equal(in.args[1].v.ints.items[1], 1);
    assert_int_equal(in.args[2].tag, KV_IV_BOOL);
    assert_true(in.args[2].v.b);
    assert_int_equal(in.args[3].tag, KV_IV_NONE); /* dtype=None */
    kv_case_inputs_free(&in);

    kv_case g = kv_test_case_of("gelu", KV_F32, 1, sh);
    make(&g, true, &in);
    assert_int_equal(in.args[1].tag, KV_IV_STR);
    assert_string_equal(in.args[1].v.str, "none"); /* the schema default */
    kv_case_inputs_free(&in);
    kv_test_case_add_arg(&g, "approximate", "tanh");
    make(&g, true, &in);
    assert_string_equal(in.args[1].v.str, "tanh");
    kv_case_inputs_free(&in);
}

static void test_bad_cases_are_errors(void **state) {
    (void)state;
    const kv_shape sh[1] = { { 2, { 2, 3 } } };
    const kv_op *op = kv_op_find("sum.dim_IntList");
    kv_case_inputs in;
    kv_case c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    kv_test_case_add_arg(&c, "dim", "abc");
    assert_int_equal(kv_case_inputs_make(&c, op, KV_DEVICE_CPU0, true, &in), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "dim"));
    c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    kv_test_case_add_arg(&c, "nosuch", "1");
    assert_int_equal(kv_case_inputs_make(&c, op, KV_DEVICE_CPU0, true, &in), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "nosuch"));
    c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    c.input_arg[0] = 2; /* keepdim: not a tensor */
    assert_int_equal(kv_case_inputs_make(&c, op, KV_DEVICE_CPU0, true, &in), KV_ERR_INVALID_ARG);
    c = kv_test_case_of("sum.dim_IntList", KV_F32, 1, sh);
    c.shapes[0].sizes[1] = -3;
    assert_true(kv_case_inputs_make(&c, op, KV_DEVICE_CPU0, true, &in) != KV_OK);
    assert_non_null(strstr(kv_last_error_message(), "input 0"));
    /* A required tensor the case does not give. */
    const kv_shape s2[1] = { { 1, { 3 } } };
    c = kv_test_case_of("add.Tensor", KV_F32, 1, s2);
    assert_int_equal(kv_case_inputs_make(&c, kv_op_find("add.Tensor"), KV_DEVICE_CPU0, true, &in), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "other"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rng_known_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rng_ranges, setup, teardown),
        cmocka_unit_test_setup_teardown(test_same_seed_same_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_real_domains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_domains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shifted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_quarters_and_ints, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exact_matmul_is_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_special_values_present, setup, teardown),
        cmocka_unit_test_setup_teardown(test_layouts_same_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grad_mutated_input_keeps_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grad_mutated_input_keeps_overlap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grad_lazy_leaf_off_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grad_mutated_nonleaf_off_host, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broadcast_golden_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_args_boxing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_cases_are_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
