/* Keys, key sets and the thread-local include/exclude sets. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "kv/keys.h"
#include "kv/tls.h"

/* PyTorch's relative order, lowest first, written out by hand. */
static const kv_key expected_order[] = {
    KV_KEY_CPU,           KV_KEY_CUDA,          KV_KEY_SIM,      KV_KEY_ACCEL,
    KV_KEY_PLUGIN0,       KV_KEY_PLUGIN1,       KV_KEY_PLUGIN2,  KV_KEY_PLUGIN3,
    KV_KEY_BACKEND_SELECT, KV_KEY_TRACE,        KV_KEY_FUNCTIONALIZE, KV_KEY_CONJUGATE,
    KV_KEY_NEGATIVE,      KV_KEY_ZERO_TENSOR,   KV_KEY_AD_INPLACE_OR_VIEW, KV_KEY_AUTOGRAD,
    KV_KEY_AUTOCAST,      KV_KEY_BATCHED,       KV_KEY_VMAP_MODE, KV_KEY_ACCEL_BOXING,
};
static const char *const expected_names[] = {
    "CPU", "CUDA", "SIM", "Accel", "Plugin0", "Plugin1", "Plugin2", "Plugin3",
    "BackendSelect", "Trace", "Functionalize", "Conjugate", "Negative", "ZeroTensor",
    "ADInplaceOrView", "Autograd", "Autocast", "Batched", "VmapMode", "AccelBoxing",
};
#define NKEYS ((int)(sizeof expected_order / sizeof expected_order[0]))

static void test_priority_order(void **state) {
    (void)state;
    assert_int_equal(NKEYS, KV_KEY_COUNT);
    for (int i = 1; i < NKEYS; i++) {
        kv_keyset pair = kv_keyset_of(expected_order[i - 1]) | kv_keyset_of(expected_order[i]);
        assert_int_equal(kv_keyset_highest(pair), expected_order[i]);
    }
    assert_int_equal(kv_keyset_highest(KV_KEYSET_ALL), KV_KEY_ACCEL_BOXING);
    /* Every backend (Dense) key is below every functionality key. */
    for (int b = 0; b < KV_BACKEND_KEY_COUNT; b++) {
        assert_true(kv_key_is_backend((kv_key)b));
        kv_keyset ks = kv_keyset_of((kv_key)b) | kv_keyset_of(KV_KEY_BACKEND_SELECT);
        assert_int_equal(kv_keyset_highest(ks), KV_KEY_BACKEND_SELECT);
    }
    assert_false(kv_key_is_backend(KV_KEY_BACKEND_SELECT));
    assert_int_equal(KV_KEYSET_BACKENDS, 0xffu);
    assert_int_equal(KV_KEYSET_FUNCTIONALITY, 0xfff00u);
}

static void test_highest_and_below(void **state) {
    (void)state;
    assert_int_equal(kv_keyset_highest(KV_KEYSET_EMPTY), KV_KEY_NONE);
    kv_keyset ks = kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_CONJUGATE) | kv_keyset_of(KV_KEY_AUTOGRAD);
    assert_int_equal(kv_keyset_highest(ks), KV_KEY_AUTOGRAD);
    kv_keyset below = ks & kv_keyset_below(KV_KEY_AUTOGRAD);
    assert_int_equal(below, kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_CONJUGATE));
    assert_int_equal(kv_keyset_highest(below), KV_KEY_CONJUGATE);
    assert_int_equal(ks & kv_keyset_below(KV_KEY_CONJUGATE), kv_keyset_of(KV_KEY_CPU));
    assert_int_equal(kv_keyset_below(KV_KEY_CPU), KV_KEYSET_EMPTY);
    assert_int_equal(kv_keyset_below(KV_KEY_BACKEND_SELECT), KV_KEYSET_BACKENDS);
    assert_true(kv_keyset_has(ks, KV_KEY_CONJUGATE));
    assert_false(kv_keyset_has(kv_keyset_remove(ks, KV_KEY_CONJUGATE), KV_KEY_CONJUGATE));
    assert_int_equal(kv_keyset_add(KV_KEYSET_EMPTY, KV_KEY_SIM), 4u);
}

static void test_names_round_trip(void **state) {
    (void)state;
    for (int i = 0; i < NKEYS; i++) {
        assert_string_equal(kv_key_name(expected_order[i]), expected_names[i]);
        kv_key k = KV_KEY_NONE;
        assert_int_equal(kv_key_parse(expected_names[i], &k), 0);
        assert_int_equal(k, expected_order[i]);
    }
    kv_key k = KV_KEY_CPU;
    assert_int_equal(kv_key_parse("Python", &k), -1);
    assert_int_equal(kv_key_parse("cpu", &k), -1);
    assert_int_equal(kv_key_parse("", &k), -1);
    assert_int_equal(kv_key_parse(NULL, &k), -1);
    assert_int_equal(k, KV_KEY_CPU);
}

static void test_keyset_format(void **state) {
    (void)state;
    char buf[256];
    kv_keyset ks = kv_keyset_of(KV_KEY_AUTOGRAD) | kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_CONJUGATE);
    assert_int_equal(kv_keyset_format(ks, buf, sizeof buf), 22);
    assert_string_equal(buf, "CPU|Conjugate|Autograd");
    assert_int_equal(kv_keyset_format(KV_KEYSET_EMPTY, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    assert_int_equal(kv_keyset_format(kv_keyset_of(KV_KEY_ACCEL_BOXING), buf, sizeof buf), 11);
    assert_string_equal(buf, "AccelBoxing");
    /* Truncation keeps a terminated prefix and reports the full length. */
    char small[8];
    assert_int_equal(kv_keyset_format(ks, small, sizeof small), 22);
    assert_string_equal(small, "CPU|Con");
}

static void test_tls_push_pop_nesting(void **state) {
    (void)state;
    kv_tls_keys s0 = kv_tls_get();
    assert_int_equal(s0.included, 0);
    assert_int_equal(s0.excluded, 0);

    kv_tls_keys g1 = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(g1.included, 0);
    assert_int_equal(kv_tls_get().included, kv_keyset_of(KV_KEY_TRACE));

    kv_tls_keys g2 = kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD));
    kv_tls_keys g3 = kv_tls_include_push(kv_keyset_of(KV_KEY_AUTOCAST));
    kv_tls_keys now = kv_tls_get();
    assert_int_equal(now.included, kv_keyset_of(KV_KEY_TRACE) | kv_keyset_of(KV_KEY_AUTOCAST));
    assert_int_equal(now.excluded, kv_keyset_of(KV_KEY_AUTOGRAD));

    /* Pushing an already-included key and popping must not drop it. */
    kv_tls_keys g4 = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    kv_tls_pop(g4);
    assert_int_equal(kv_tls_get().included, kv_keyset_of(KV_KEY_TRACE) | kv_keyset_of(KV_KEY_AUTOCAST));

    kv_tls_pop(g3);
    assert_int_equal(kv_tls_get().included, kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(kv_tls_get().excluded, kv_keyset_of(KV_KEY_AUTOGRAD));
    kv_tls_pop(g2);
    assert_int_equal(kv_tls_get().excluded, 0);
    assert_int_equal(kv_tls_get().included, kv_keyset_of(KV_KEY_TRACE));
    kv_tls_pop(g1);
    assert_int_equal(kv_tls_get().included, 0);

    kv_tls_set((kv_tls_keys){ 3, 5 });
    assert_int_equal(kv_tls_get().included, 3);
    assert_int_equal(kv_tls_get().excluded, 5);
    kv_tls_set(s0);
    assert_int_equal(kv_tls_get().included, 0);
}

static void *thread_reads_tls(void *arg) {
    kv_tls_keys *seen = arg;
    seen[0] = kv_tls_get();
    kv_tls_include_push(kv_keyset_of(KV_KEY_BATCHED));
    seen[1] = kv_tls_get();
    return NULL;
}

static void test_tls_is_per_thread(void **state) {
    (void)state;
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_FUNCTIONALIZE));
    kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD));
    kv_tls_keys seen[2] = { { 99, 99 }, { 99, 99 } };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, thread_reads_tls, seen), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(seen[0].included, 0);
    assert_int_equal(seen[0].excluded, 0);
    assert_int_equal(seen[1].included, kv_keyset_of(KV_KEY_BATCHED));
    /* The other thread's push did not leak into this one. */
    assert_int_equal(kv_tls_get().included, kv_keyset_of(KV_KEY_FUNCTIONALIZE));
    assert_int_equal(kv_tls_get().excluded, kv_keyset_of(KV_KEY_AUTOGRAD));
    kv_tls_pop(saved);
    assert_int_equal(kv_tls_get().included, 0);
    assert_int_equal(kv_tls_get().excluded, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_priority_order),
        cmocka_unit_test(test_highest_and_below),
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_keyset_format),
        cmocka_unit_test(test_tls_push_pop_nesting),
        cmocka_unit_test(test_tls_is_per_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
