/* The pieces of the plugin ABI's checks (docs/plugin-abi.md) that the
 * hostile plugins of tests/test_hostile.sh do not reach one by one: the FP
 * environment's read, compare, describe and restore for every part of it;
 * the registration scope outside a load; the mem ops' host paths. */
#define _GNU_SOURCE /* feenableexcept */
#include <fenv.h>

#include "test_util.h"

#include "backend/backend_internal.h"
#include "backend/fpenv.h"
#include "runner/exec/input_guard.h"
#include "runner/exec/sigstate.h"

#include <signal.h>

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

static void test_sig_handler(int sig) { (void)sig; }

/* A handler, an ignored signal and a blocked one are each seen, named and
 * put back; no change reads as none. */
static void test_sigstate_each_part(void **state) {
    (void)state;
    kv_sigstate before;
    char what[160];
    kv_sigstate_read(&before);
    assert_true(before.ok);
    assert_true(kv_sigstate_check_restore(&before, what, (int)sizeof what));

    struct sigaction old;
    sigaction(SIGUSR1, NULL, &old); /* not one of the signals read: ignored */
    signal(SIGSEGV, test_sig_handler);
    assert_false(kv_sigstate_check_restore(&before, what, (int)sizeof what));
    assert_non_null(strstr(what, "the handler of SIGSEGV (signal 11)"));
    assert_non_null(strstr(what, "another handler"));
    sigaction(SIGSEGV, NULL, &old);

    assert_true(old.sa_handler == before.act[0].sa_handler);

    signal(SIGPIPE, SIG_IGN);
    assert_false(kv_sigstate_check_restore(&before, what, (int)sizeof what));
    assert_non_null(strstr(what, "SIGPIPE"));
    assert_non_null(strstr(what, "-> ignored"));

    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    assert_false(kv_sigstate_check_restore(&before, what, (int)sizeof what));
    assert_non_null(strstr(what, "the signal mask: SIGTERM"));
    assert_non_null(strstr(what, "blocked"));
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    assert_false(sigismember(&now, SIGTERM));
    assert_true(kv_sigstate_check_restore(&before, what, (int)sizeof what));
}

/* Each part of an argument's geometry changed in place is seen, named and
 * put back; an argument the schema marks written (a!) may change; a
 * release the call did not own is given back. */
static void test_input_guard_each_part(void **state) {
    (void)state;
    const kv_op *add = kv_op_find("add.Tensor"), *add_ = kv_op_find("add_.Tensor");
    assert_non_null(add);
    assert_non_null(add_);
    const int64_t sizes[2] = { 4, 5 };
    kv_tensor *a = kv_tensor_empty(sizes, 2, KV_F32, (kv_device){ KV_DEVICE_CPU, 0 });
    assert_non_null(a);
    kv_case_inputs in;
    memset(&in, 0, sizeof in);
    in.nargs = 2;
    in.args[0] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a };
    in.args[1] = (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = a }; /* add(a, a): one snapshot, one reference */
    kv_input_snap snap;
    char msg[640];

    kv_input_guard_take(add, &in, &snap);
    assert_int_equal(snap.n, 1);
    assert_true(kv_input_guard_check(add, 0, &snap, msg, (int)sizeof msg));
    assert_int_equal(atomic_load(&a->refcount), 1);

    kv_input_guard_take(add, &in, &snap);
    a->offset = 3;
    a->dtype = KV_F64;
    assert_false(kv_input_guard_check(add, kv_keyset_of(KV_KEY_SIM), &snap, msg, (int)sizeof msg));
    assert_non_null(strstr(msg, "the add.Tensor kernel of SIM changed argument 'self' in place"));
    assert_non_null(strstr(msg, "storage offset 0 -> 3"));
    assert_non_null(strstr(msg, "dtype f32 -> f64"));
    assert_int_equal(a->offset, 0);
    assert_int_equal(a->dtype, KV_F32);

    kv_input_guard_take(add, &in, &snap);
    a->device.index = 1;
    kv_storage *s = a->storage;
    a->storage = NULL;
    assert_false(kv_input_guard_check(add, 0, &snap, msg, (int)sizeof msg));
    assert_non_null(strstr(msg, "the add.Tensor call changed"));
    assert_non_null(strstr(msg, "device changed; its storage replaced"));
    assert_true(a->storage == s);
    assert_int_equal(a->device.index, 0);

    kv_input_guard_take(add, &in, &snap);
    /* What a kernel that frees its input does: the guard's own reference
     * keeps the tensor alive, the caller's is given back. */
    kv_tensor_release(a);
    assert_false(kv_input_guard_check(add, 0, &snap, msg, (int)sizeof msg));
    assert_non_null(strstr(msg, "released argument 'self' 1 time more"));
    assert_int_equal(atomic_load(&a->refcount), 1);

    /* add_ writes self: its geometry is its own to change (a resize). */
    in.nargs = 3;
    in.args[2] = (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = kv_scalar_int(1) };
    kv_input_guard_take(add_, &in, &snap);
    a->sizes[0] = 2;
    assert_true(kv_input_guard_check(add_, 0, &snap, msg, (int)sizeof msg));
    assert_int_equal(a->sizes[0], 2);
    kv_tensor_release(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fpenv_each_part),
        cmocka_unit_test(test_scope_outside_a_load),
        cmocka_unit_test(test_mem_ops_on_host),
        cmocka_unit_test(test_sigstate_each_part),
        cmocka_unit_test(test_input_guard_each_part),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
