/* The pieces of the plugin ABI's checks (docs/plugin-abi.md) that the
 * hostile plugins of tests/test_hostile.sh do not reach one by one: the FP
 * environment's read, compare, describe and restore for every part of it;
 * the registration scope outside a load; the mem ops' host paths. */
#define _GNU_SOURCE /* feenableexcept */
#include <fenv.h>

#include "test_util.h"

#include "backend/backend_internal.h"
#include "runner/exec/fpenv.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* Each part changed alone is seen, described, and put back. */
static void test_fpenv_each_part(void **state) {
    (void)state;
    const kv_fpenv before = kv_fpenv_read();
    char what[256];

    fesetround(FE_UPWARD);
    kv_fpenv now = kv_fpenv_read();
    assert_false(kv_fpenv_equal(&before, &now));
    kv_fpenv_describe(&before, &now, what, (int)sizeof what);
    assert_non_null(strstr(what, "rounding mode to-nearest -> upward"));
    kv_fpenv_restore(&before);
    now = kv_fpenv_read();
    assert_true(kv_fpenv_equal(&before, &now));
    assert_int_equal(fegetround(), FE_TONEAREST);

    feenableexcept(FE_DIVBYZERO);
    now = kv_fpenv_read();
    assert_false(kv_fpenv_equal(&before, &now));
    kv_fpenv_describe(&before, &now, what, (int)sizeof what);
    assert_non_null(strstr(what, "enabled exception traps"));
    kv_fpenv_restore(&before);
    assert_int_equal(fegetexcept(), 0);

#if defined(__x86_64__) || defined(__i386__)
    /* FTZ, what a vendor library sets for speed: only MXCSR differs. */
    _mm_setcsr(_mm_getcsr() | 0x8000u);
    now = kv_fpenv_read();
    assert_false(kv_fpenv_equal(&before, &now));
    kv_fpenv_describe(&before, &now, what, (int)sizeof what);
    assert_non_null(strstr(what, "MXCSR"));
    assert_null(strstr(what, "rounding mode"));
    kv_fpenv_restore(&before);
    assert_int_equal(_mm_getcsr() & 0x8000u, 0);

    /* x87 precision control to single (bits 8-9 = 00). */
    unsigned short cw;
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    const unsigned short single = (unsigned short)(cw & ~0x0300u);
    __asm__ volatile("fldcw %0" : : "m"(single));
    now = kv_fpenv_read();
    kv_fpenv_describe(&before, &now, what, (int)sizeof what);
    assert_non_null(strstr(what, "x87 control word"));
    kv_fpenv_restore(&before);
    now = kv_fpenv_read();
    assert_true(kv_fpenv_equal(&before, &now));
#endif
    /* Nothing changed: nothing described. */
    kv_fpenv_describe(&before, &now, what, (int)sizeof what);
    assert_string_equal(what, "");
}

static kv_status never_called(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    (void)stack;
    return KV_ERR_INTERNAL;
}

/* Outside a plugin's register_kernels, the host table registers nothing,
 * anywhere, and says why. */
static void test_scope_outside_a_load(void **state) {
    (void)state;
    const kv_host_api *h = kv_backend_host_api();
    const kv_op *neg = kv_op_find("neg");
    assert_non_null(neg);
    const kv_kernel_fn cpu_neg = kv_op_entry_fn(neg, KV_KEY_CPU);
    assert_int_equal(h->register_kernel("neg", KV_KEY_CPU, never_called), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "outside its register_kernels"));
    assert_true(kv_op_entry_fn(neg, KV_KEY_CPU) == cpu_neg);
    assert_int_equal(h->tune_register_variant("neg", KV_KEY_CPU, "x", never_called, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "perf_dispatch variant"));
    h->register_fallback(KV_KEY_SIM, never_called);
    assert_non_null(strstr(kv_last_error_message(), "a backend fallback"));
    assert_int_not_equal(kv_op_entry_kind(neg, KV_KEY_SIM), KV_ENTRY_FALLBACK);
    /* And inside one, only its own key. */
    kv_backend_scope_begin(KV_DEVICE_PLUGIN3, "probe");
    assert_int_equal(h->register_kernel("neg", KV_KEY_CPU, never_called), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_backend_scope_end(), "plugin 'probe' registered a kernel for neg at key CPU"));
    kv_backend_scope_begin(KV_DEVICE_PLUGIN3, "probe");
    assert_null(kv_backend_scope_end());
    /* The one foreign key offered: a CPU variant named after the plugin
     * ("probe", "probe_v2"), never one named otherwise ("probex" is
     * another name, not probe's). */
    kv_backend_scope_begin(KV_DEVICE_PLUGIN3, "probe");
    assert_int_equal(h->tune_register_variant("neg", KV_KEY_CPU, "probex", never_called, NULL), KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_backend_scope_end(), "variants at the CPU key named after it"));
    kv_backend_scope_begin(KV_DEVICE_PLUGIN3, "probe");
    assert_int_equal(h->tune_register_variant("neg", KV_KEY_CPU, "probe_v2", never_called, NULL), KV_OK);
    assert_null(kv_backend_scope_end());
}

/* Host memory: copy and memset are plain; every mem op has a name. */
static void test_mem_ops_on_host(void **state) {
    (void)state;
    unsigned char a[33], b[33];
    for (int i = 0; i < 33; i++) a[i] = (unsigned char)i;
    memset(b, 0, sizeof b);
    assert_int_equal(kv_backend_mem_copy(KV_DEVICE_CPU, b, a, sizeof a), KV_OK);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(kv_backend_mem_set(KV_DEVICE_CPU, b, 0x5C, sizeof b), KV_OK);
    for (int i = 0; i < 33; i++) assert_int_equal(b[i], 0x5C);
    assert_int_equal(kv_backend_mem_set(KV_DEVICE_CPU, b, 0x11, 0), KV_OK);
    assert_int_equal(b[0], 0x5C);
    static const char *const names[] = { "none", "copy_to_device", "copy_to_host", "copy_on_device", "memset",
                                         "synchronize" };
    for (int op = KV_BACKEND_MEM_NONE; op <= KV_BACKEND_MEM_SYNCHRONIZE; op++)
        assert_string_equal(kv_backend_mem_op_name((kv_backend_mem_op)op), names[op]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fpenv_each_part),
        cmocka_unit_test(test_scope_outside_a_load),
        cmocka_unit_test(test_mem_ops_on_host),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
