/* Generators and the random op bernoulli.p (kv/generator.h,
 * kernels/ref/ref_random.c): the stream is value i = f(seed, offset + i),
 * a call advances the offset by what it drew, None is the thread's
 * default generator, and the accel fast and slow paths (and the CPU
 * variants) draw the same values and leave the same generator. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/accel.h"
#include "kv/generator.h"
#include "kv/rng.h"
#include "test_util.h"

static kv_tensor *ones_f32(int64_t rows, int64_t cols) {
    const int64_t sizes[2] = { rows, cols };
    const kv_dtype f32 = KV_F32;
    kv_tensor *t = kv_ones((kv_int_list){ sizes, 2 }, &f32, NULL, NULL, NULL);
    if (t == NULL) fail_msg("kv_ones: %s", kv_last_error_message());
    return t;
}

static kv_tensor *ok(kv_tensor *t) {
    if (t == NULL) fail_msg("unexpected error: %s", kv_last_error_message());
    return t;
}

/* The stream as ref_random.c defines it, element by element. */
static void expect_stream(const kv_tensor *t, uint64_t seed, uint64_t first, double p) {
    const int64_t n = kv_tensor_numel(t);
    const float *v = kv_tensor_data(t);
    for (int64_t i = 0; i < n; i++) {
        const float want = kv_rng_uniform(seed, first + (uint64_t)i) < p ? 1.0f : 0.0f;
        if (v[i] != want) fail_msg("element %lld: %g, the stream says %g", (long long)i, v[i], want);
    }
}

static void expect_same_bytes(const kv_tensor *a, const kv_tensor *b) {
    assert_int_equal(kv_tensor_numel(a), kv_tensor_numel(b));
    assert_int_equal(a->dtype, b->dtype);
    const kv_tensor *ca = a, *cb = b;
    assert_memory_equal(kv_tensor_data(ca), kv_tensor_data(cb),
                        (size_t)kv_tensor_numel(a) * kv_dtype_size(a->dtype));
}

static void test_generator_reserve(void **state) {
    (void)state;
    kv_generator g = { 9, 0 };
    assert_int_equal(kv_generator_reserve(&g, 5), 0);
    assert_int_equal(kv_generator_reserve(&g, 3), 5);
    assert_int_equal(g.offset, 8);
    kv_generator_manual_seed(&g, 4);
    assert_int_equal(g.seed, 4);
    assert_int_equal(g.offset, 0);
    assert_ptr_equal(kv_generator_or_default(NULL), kv_generator_default());
    assert_ptr_equal(kv_generator_or_default(&g), &g);
}

static void test_schema_generator(void **state) {
    (void)state;
    static kv_schema s;
    assert_int_equal(kv_schema_parse("bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor", &s),
                     KV_OK);
    assert_int_equal(s.args[2].type.kind, KV_TYPE_GENERATOR);
    assert_true(s.args[2].type.optional);
    char text[256];
    kv_schema_format(&s, text, sizeof text);
    assert_string_equal(text, "bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor");
}

/* Value i of a call is f(seed, offset + i); the offset moves by numel,
 * so two calls continue one stream. */
static void test_bernoulli_stream(void **state) {
    (void)state;
    kv_tensor *x = ones_f32(4, 5);
    kv_generator g = { 7, 100 };
    kv_tensor *a = ok(kv_bernoulli(x, 0.5, &g));
    assert_int_equal(g.seed, 7);
    assert_int_equal(g.offset, 120);
    expect_stream(a, 7, 100, 0.5);
    kv_tensor *b = ok(kv_bernoulli(x, 0.25, &g));
    assert_int_equal(g.offset, 140);
    expect_stream(b, 7, 120, 0.25);
    /* p = 0 and p = 1 are exact; both still draw. */
    kv_tensor *z = ok(kv_bernoulli(x, 0.0, &g)), *o = ok(kv_bernoulli(x, 1.0, &g));
    assert_int_equal(g.offset, 180);
    for (int i = 0; i < 20; i++) {
        assert_true(((const float *)kv_tensor_data(z))[i] == 0.0f);
        assert_true(((const float *)kv_tensor_data(o))[i] == 1.0f);
    }
    /* A bad p fails before the generator moves. */
    assert_null(kv_bernoulli(x, 1.5, &g));
    assert_int_equal(kv_last_error(), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "argument 'p'"));
    assert_int_equal(g.offset, 180);
    kv_tensor *items[] = { a, b, z, o, x };
    for (int i = 0; i < 5; i++) kv_tensor_release(items[i]);
}

/* None draws from (and advances) the thread's default generator. */
static void test_bernoulli_default_generator(void **state) {
    (void)state;
    kv_tensor *x = ones_f32(3, 3);
    kv_generator_manual_seed(kv_generator_default(), 42);
    kv_tensor *a = ok(kv_bernoulli(x, 0.5, NULL));
    assert_int_equal(kv_generator_default()->offset, 9);
    expect_stream(a, 42, 0, 0.5);
    kv_generator g = { 42, 0 };
    kv_tensor *b = ok(kv_bernoulli(x, 0.5, &g));
    expect_same_bytes(a, b);
    kv_tensor_release(a);
    kv_tensor_release(b);
    kv_tensor_release(x);
}

/* Every CPU variant (ref and direct, forced) draws the same stream. */
static void test_bernoulli_variants(void **state) {
    (void)state;
    const kv_op *op = kv_op_find("bernoulli.p");
    assert_non_null(op);
    assert_true(kv_tune_variant_count(op, KV_KEY_CPU) >= 2);
    kv_tensor *x = ones_f32(8, 9);
    kv_tensor *first = NULL;
    for (int v = 0; v < kv_tune_variant_count(op, KV_KEY_CPU); v++) {
        kv_generator g = { 3, 11 };
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
        kv_push_tensor(&st, x);
        kv_push_double(&st, 0.3);
        kv_push_generator(&st, &g);
        const char *name = kv_tune_variant_name(op, KV_KEY_CPU, v);
        if (kv_tune_call_variant(op, KV_KEY_CPU, name, &st) != KV_OK)
            fail_msg("variant %s: %s", name, kv_last_error_message());
        assert_int_equal(g.offset, 11 + 72);
        kv_tensor *r = st.slots[0].v.tensor;
        expect_stream(r, 3, 11, 0.3);
        if (first) {
            expect_same_bytes(first, r);
            kv_tensor_release(r);
        } else {
            first = r;
        }
    }
    kv_tensor_release(first);
    kv_tensor_release(x);
}

/* The accel fast path (redispatch to the target) and the slow path (kill
 * switch: full dispatch) draw the same values and leave the same
 * generator. */
static void test_bernoulli_fast_vs_slow(void **state) {
    (void)state;
    kv_tensor *x = ones_f32(6, 7);
    kv_tensor *ax = kv_accel_to(x);
    if (ax == NULL) fail_msg("kv_accel_to: %s", kv_last_error_message());
    kv_accel_counters_reset();
    kv_accel_redispatch_set_enabled(true);
    kv_generator gf = { 5, 1000 }, gs = { 5, 1000 };
    kv_tensor *fast = ok(kv_bernoulli(ax, 0.4, &gf));
    kv_accel_counters c = kv_accel_counters_of("bernoulli.p");
    assert_int_equal(c.fast, 1);
    assert_int_equal(c.slow, 0);
    kv_accel_redispatch_set_enabled(false);
    kv_tensor *slow = ok(kv_bernoulli(ax, 0.4, &gs));
    kv_accel_redispatch_set_enabled(true);
    c = kv_accel_counters_of("bernoulli.p");
    assert_int_equal(c.fast, 1);
    assert_int_equal(c.slow, 1);
    assert_int_equal(fast->device.type, KV_DEVICE_ACCEL);
    assert_int_equal(slow->device.type, KV_DEVICE_ACCEL);
    kv_tensor *hf = ok(kv_accel_from(fast)), *hs = ok(kv_accel_from(slow));
    expect_same_bytes(hf, hs);
    expect_stream(hf, 5, 1000, 0.4);
    assert_int_equal(gf.seed, gs.seed);
    assert_int_equal(gf.offset, gs.offset);
    assert_int_equal(gf.offset, 1042);
    /* Under grad mode the slow path runs autograd, which records a node
     * and still draws exactly once. */
    kv_generator gg = { 5, 1000 };
    kv_tensor *leaf = ok(kv_clone(x, NULL));
    kv_tensor_set_requires_grad(leaf, true);
    kv_tensor *aleaf = ok(kv_accel_to(leaf));
    kv_tensor *graded = ok(kv_bernoulli(aleaf, 0.4, &gg));
    assert_int_equal(gg.offset, 1042);
    kv_tensor *hg = ok(kv_accel_from(graded));
    expect_same_bytes(hf, hg);
    kv_tensor *items[] = { x, ax, fast, slow, hf, hs, leaf, aleaf, graded, hg };
    for (int i = 0; i < 10; i++) kv_tensor_release(items[i]);
}

/* vmap refuses a random op (PyTorch's randomness='error'). */
static void test_bernoulli_vmap_refused(void **state) {
    (void)state;
    kv_tensor *x = ones_f32(3, 4);
    kv_generator g = { 1, 0 };
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&st, x);
    kv_push_double(&st, 0.5);
    kv_push_generator(&st, &g);
    const int in_dims[3] = { 0, KV_VMAP_UNBATCHED, KV_VMAP_UNBATCHED };
    kv_ivalue rslots[KV_STACK_MAX];
    kv_stack rs = kv_stack_on(rslots, KV_STACK_MAX);
    assert_int_equal(kv_vmap_call(kv_op_find("bernoulli.p"), &st, in_dims, -1, 0, &rs), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "randomness"));
    assert_int_equal(g.offset, 0);
    kv_tensor_release(x);
}

int main(void) {
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kv_init: %s\n", kv_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generator_reserve),
        cmocka_unit_test(test_schema_generator),
        cmocka_unit_test(test_bernoulli_stream),
        cmocka_unit_test(test_bernoulli_default_generator),
        cmocka_unit_test(test_bernoulli_variants),
        cmocka_unit_test(test_bernoulli_fast_vs_slow),
        cmocka_unit_test(test_bernoulli_vmap_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
