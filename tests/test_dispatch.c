/* The registry, dispatch tables, kv_call / kv_redispatch, the handle cache
 * and the boxed stack. Test ops are named kvt_* so they never clash with
 * kernels/ops.schema. Test kernels record which kernel ran (by identity,
 * not by the key set they were handed) and return a bool. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dispatch/op_internal.h"
#include "kv/init.h"
#include "kv/dispatch.h"
#include "kv/op_ids.h"
#include "kv/tensor.h"

/* ---- recording kernels ---- */

enum { K_CPU, K_CUDA, K_SIM, K_TRACE, K_NEGATIVE, K_AUTOGRAD, K_AUTOGRAD_REDISPATCH, K_FALLBACK_A, K_FALLBACK_B, K_COUNT };

#define MAX_RAN 16
static int g_ran[MAX_RAN];
static kv_keyset g_ran_ks[MAX_RAN];
static int g_nran;

static void ran_reset(void) { g_nran = 0; }

static void record(int who, kv_keyset ks) {
    if (g_nran < MAX_RAN) {
        g_ran[g_nran] = who;
        g_ran_ks[g_nran] = ks;
    }
    g_nran++;
}

#define RECORDING_KERNEL(fn, who)                                   \
    static kv_status fn(const kv_op *op, kv_keyset ks, kv_stack *s) { \
        (void)op;                                                   \
        record(who, ks);                                            \
        kv_stack_return_bool(s, true);                              \
        return KV_OK;                                               \
    }

RECORDING_KERNEL(k_cpu, K_CPU)
RECORDING_KERNEL(k_cuda, K_CUDA)
RECORDING_KERNEL(k_sim, K_SIM)
RECORDING_KERNEL(k_trace, K_TRACE)
RECORDING_KERNEL(k_negative, K_NEGATIVE)
RECORDING_KERNEL(k_autograd, K_AUTOGRAD)
RECORDING_KERNEL(k_fallback_a, K_FALLBACK_A)
RECORDING_KERNEL(k_fallback_b, K_FALLBACK_B)

/* An Autograd-like kernel: does its part, then runs the layers below it. */
static kv_status k_autograd_redispatch(const kv_op *op, kv_keyset ks, kv_stack *s) {
    record(K_AUTOGRAD_REDISPATCH, ks);
    return kv_redispatch(op, ks & kv_keyset_below(KV_KEY_AUTOGRAD), s);
}

/* ---- tensors ---- */

static kv_tensor *tensor_on(kv_device_type type, int ndim) {
    int64_t sizes[2] = { 2, 3 };
    kv_tensor *t = kv_tensor_empty(sizes, ndim, KV_F32, KV_DEVICE_CPU0);
    assert_non_null(t);
    /* Only the device and keys matter to dispatch; the memory stays CPU
     * memory, freed by the CPU allocator it came from. */
    t->device.type = type;
    t->keys = kv_keyset_of(kv_device_key(t->device));
    return t;
}

static int run_unary(const char *name, kv_tensor *t) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    assert_int_equal(kv_push_tensor(&s, t), KV_OK);
    ran_reset();
    kv_status st = kv_call_by_name(name, &s);
    if (st == KV_OK) {
        assert_int_equal(s.size, 1);
        assert_int_equal(s.slots[0].tag, KV_IV_BOOL);
    }
    return st;
}

static const kv_op *register_op(const char *schema) {
    const kv_op *op = NULL;
    kv_status st = kv_op_register(schema, &op);
    if (st != KV_OK) fail_msg("registering '%s': %s", schema, kv_last_error_message());
    assert_non_null(op);
    return op;
}

/* ---- init ---- */

static void *thread_init(void *arg) {
    *(kv_status *)arg = kv_init();
    return NULL;
}

/* Runs first: nothing before it has touched the registry. */
static void test_init_concurrent_and_idempotent(void **state) {
    (void)state;
    pthread_t th[4];
    kv_status st[4] = { KV_ERR_INTERNAL, KV_ERR_INTERNAL, KV_ERR_INTERNAL, KV_ERR_INTERNAL };
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, thread_init, &st[i]), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(st[i], KV_OK);
    }
    int n = kv_op_count();
    assert_int_equal(n, KV_OP_COUNT);
    assert_int_equal(kv_init(), KV_OK);
    assert_int_equal(kv_init(), KV_OK);
    assert_int_equal(kv_op_count(), n);
    /* Every builtin is there under its generated id, with a CPU kernel. */
    for (int id = 0; id < KV_OP_COUNT; id++) {
        const kv_op *op = kv_op_find(kv_op_names[id]);
        assert_non_null(op);
        assert_int_equal(kv_op_builtin_id(op), id);
        assert_string_equal(kv_op_name(op), kv_op_names[id]);
        assert_int_equal(kv_op_entry_kind(op, KV_KEY_CPU), KV_ENTRY_KERNEL);
        assert_non_null(kv_op_entry_fn(op, KV_KEY_CPU));
        assert_int_equal(kv_op_entry_kind(op, KV_KEY_SIM), KV_ENTRY_MISSING);
    }
    const kv_op *neg = kv_op_find("neg");
    assert_non_null(neg);
    assert_int_equal(kv_op_builtin_id(neg), KV_OP_NEG);
    assert_string_equal(kv_op_schema(neg)->full_name, "neg");
    assert_int_equal(kv_op_schema(neg)->nargs, 1);
}

static void test_op_at_sorted(void **state) {
    (void)state;
    register_op("kvt_sorted_b(Tensor self) -> bool");
    register_op("kvt_sorted_a(Tensor self) -> bool");
    int n = kv_op_count();
    assert_true(n >= KV_OP_COUNT + 2);
    for (int i = 1; i < n; i++) assert_true(strcmp(kv_op_name(kv_op_at(i - 1)), kv_op_name(kv_op_at(i))) < 0);
    assert_null(kv_op_at(n));
    assert_null(kv_op_at(-1));
    assert_int_equal(kv_op_builtin_id(kv_op_find("kvt_sorted_a")), -1);
    /* The two were inserted next to each other, a before b. */
    int ia = -1;
    for (int i = 0; i < n; i++)
        if (strcmp(kv_op_name(kv_op_at(i)), "kvt_sorted_a") == 0) ia = i;
    assert_true(ia >= 0 && ia + 1 < n);
    assert_string_equal(kv_op_name(kv_op_at(ia + 1)), "kvt_sorted_b");
}

static void test_default_fallthroughs(void **state) {
    (void)state;
    const kv_op *add = kv_op_find("add.Tensor");
    assert_non_null(add);
    assert_int_equal(kv_op_entry_kind(add, KV_KEY_BACKEND_SELECT), KV_ENTRY_FALLTHROUGH);
    assert_int_equal(kv_op_entry_kind(add, KV_KEY_AD_INPLACE_OR_VIEW), KV_ENTRY_FALLTHROUGH);
    assert_int_equal(kv_op_entry_kind(add, KV_KEY_AUTOGRAD) == KV_ENTRY_FALLTHROUGH, 0);
    kv_keyset ft = kv_op_fallthrough_keys(add);
    assert_true(kv_keyset_has(ft, KV_KEY_BACKEND_SELECT));
    assert_true(kv_keyset_has(ft, KV_KEY_AD_INPLACE_OR_VIEW));
    assert_false(kv_keyset_has(ft, KV_KEY_CPU));
    /* An op registered now gets them too. */
    const kv_op *op = register_op("kvt_fresh(Tensor self) -> bool");
    assert_int_equal(kv_op_entry_kind(op, KV_KEY_BACKEND_SELECT), KV_ENTRY_FALLTHROUGH);
    assert_int_equal(kv_op_entry_kind(op, KV_KEY_CPU), KV_ENTRY_MISSING);
}

/* kernel > direct fallthrough > fallback > fallback fallthrough > missing,
 * walked up and back down on one key. */
static void test_table_precedence(void **state) {
    (void)state;
    const kv_op *op = register_op("kvt_table(Tensor self) -> bool");
    /* A key no mode or backend registers at, so the walk starts from missing. */
    const kv_key k = KV_KEY_PLUGIN3;
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_MISSING);
    assert_null(kv_op_entry_fn(op, k));

    kv_register_fallback_fallthrough(k);
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_FALLTHROUGH);
    assert_true(kv_keyset_has(kv_op_fallthrough_keys(op), k));

    kv_register_fallback(k, k_fallback_a);
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_FALLBACK);
    assert_ptr_equal(kv_op_entry_fn(op, k), k_fallback_a);
    assert_false(kv_keyset_has(kv_op_fallthrough_keys(op), k));
    /* Other ops, builtins included, see the fallback as well. */
    assert_int_equal(kv_op_entry_kind(kv_op_find("neg"), k), KV_ENTRY_FALLBACK);

    assert_int_equal(kv_register_fallthrough("kvt_table", k), KV_OK);
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_FALLTHROUGH);
    assert_true(kv_keyset_has(kv_op_fallthrough_keys(op), k));
    assert_int_equal(kv_op_entry_kind(kv_op_find("neg"), k), KV_ENTRY_FALLBACK);

    assert_int_equal(kv_register_kernel("kvt_table", k, k_negative), KV_OK);
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_KERNEL);
    assert_ptr_equal(kv_op_entry_fn(op, k), k_negative);
    assert_false(kv_keyset_has(kv_op_fallthrough_keys(op), k));

    /* Replacing the fallback does not touch a direct kernel. */
    kv_register_fallback(k, k_fallback_b);
    assert_ptr_equal(kv_op_entry_fn(op, k), k_negative);
    assert_ptr_equal(kv_op_entry_fn(kv_op_find("neg"), k), k_fallback_b);

    /* Removing the kernel removes the direct fallthrough too. */
    assert_int_equal(kv_register_kernel("kvt_table", k, NULL), KV_OK);
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_FALLBACK);
    assert_ptr_equal(kv_op_entry_fn(op, k), k_fallback_b);

    kv_register_fallback(k, NULL);
    assert_int_equal(kv_op_entry_kind(op, k), KV_ENTRY_MISSING);
    assert_int_equal(kv_op_entry_kind(kv_op_find("neg"), k), KV_ENTRY_MISSING);
    assert_false(kv_keyset_has(kv_op_fallthrough_keys(op), k));
}

static void test_fallback_runs_when_no_kernel(void **state) {
    (void)state;
    register_op("kvt_fb(Tensor self) -> bool");
    kv_register_fallback(KV_KEY_CUDA, k_fallback_a);
    kv_tensor *t = tensor_on(KV_DEVICE_CUDA, 2);
    assert_int_equal(run_unary("kvt_fb", t), KV_OK);
    assert_int_equal(g_nran, 1);
    assert_int_equal(g_ran[0], K_FALLBACK_A);
    /* A direct kernel wins over the fallback. */
    assert_int_equal(kv_register_kernel("kvt_fb", KV_KEY_CUDA, k_cuda), KV_OK);
    assert_int_equal(run_unary("kvt_fb", t), KV_OK);
    assert_int_equal(g_ran[0], K_CUDA);
    kv_register_fallback(KV_KEY_CUDA, NULL);
    kv_tensor_release(t);
}

static void register_unary(void) {
    static bool done;
    if (done) return;
    done = true;
    register_op("kvt_unary(Tensor self) -> bool");
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_CPU, k_cpu), KV_OK);
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_SIM, k_sim), KV_OK);
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_AUTOGRAD, k_autograd), KV_OK);
}

static void test_call_selects_highest_key(void **state) {
    (void)state;
    register_unary();
    kv_tensor *cpu = tensor_on(KV_DEVICE_CPU, 2);
    kv_tensor *sim = tensor_on(KV_DEVICE_SIM, 2);
    assert_int_equal(run_unary("kvt_unary", cpu), KV_OK);
    assert_int_equal(g_nran, 1);
    assert_int_equal(g_ran[0], K_CPU);
    assert_int_equal(g_ran_ks[0], kv_keyset_of(KV_KEY_CPU));
    assert_int_equal(run_unary("kvt_unary", sim), KV_OK);
    assert_int_equal(g_ran[0], K_SIM);

    cpu->keys |= kv_keyset_of(KV_KEY_AUTOGRAD);
    assert_int_equal(run_unary("kvt_unary", cpu), KV_OK);
    assert_int_equal(g_nran, 1);
    assert_int_equal(g_ran[0], K_AUTOGRAD);
    assert_int_equal(g_ran_ks[0], kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_AUTOGRAD));

    /* A fallthrough key on the tensor is skipped, not dispatched to. */
    sim->keys |= kv_keyset_of(KV_KEY_AD_INPLACE_OR_VIEW) | kv_keyset_of(KV_KEY_BACKEND_SELECT);
    assert_int_equal(run_unary("kvt_unary", sim), KV_OK);
    assert_int_equal(g_ran[0], K_SIM);
    assert_int_equal(g_ran_ks[0], kv_keyset_of(KV_KEY_SIM));
    kv_tensor_release(cpu);
    kv_tensor_release(sim);
}

static void test_missing_kernel_message(void **state) {
    (void)state;
    register_unary();
    kv_tensor *cuda = tensor_on(KV_DEVICE_CUDA, 2);
    assert_int_equal(run_unary("kvt_unary", cuda), KV_ERR_MISSING_KERNEL);
    assert_int_equal(g_nran, 0);
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    assert_string_equal(kv_last_error_message(),
                        "op 'kvt_unary': no kernel for key CUDA (kernels registered for: CPU, SIM, Autograd)");

    register_op("kvt_bare(Tensor self) -> bool");
    assert_int_equal(run_unary("kvt_bare", cuda), KV_ERR_MISSING_KERNEL);
    assert_string_equal(kv_last_error_message(), "op 'kvt_bare': no kernel for key CUDA (kernels registered for: none)");

    /* Excluding every key leaves nothing to run. */
    kv_tls_keys saved = kv_tls_exclude_push(kv_keyset_of(KV_KEY_CUDA));
    assert_int_equal(run_unary("kvt_unary", cuda), KV_ERR_MISSING_KERNEL);
    assert_non_null(strstr(kv_last_error_message(), "op 'kvt_unary'"));
    assert_non_null(strstr(kv_last_error_message(), "empty"));
    kv_tls_pop(saved);
    kv_tensor_release(cuda);
}

static void test_tls_changes_selected_key(void **state) {
    (void)state;
    register_unary();
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_TRACE, k_trace), KV_OK);
    kv_tensor *t = tensor_on(KV_DEVICE_CPU, 2);

    kv_tls_keys outer = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(run_unary("kvt_unary", t), KV_OK);
    assert_int_equal(g_ran[0], K_TRACE);
    assert_int_equal(g_ran_ks[0], kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_TRACE));

    /* Excluded beats included. */
    kv_tls_keys inner = kv_tls_exclude_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(run_unary("kvt_unary", t), KV_OK);
    assert_int_equal(g_ran[0], K_CPU);
    kv_tls_pop(inner);
    assert_int_equal(run_unary("kvt_unary", t), KV_OK);
    assert_int_equal(g_ran[0], K_TRACE);
    kv_tls_pop(outer);
    assert_int_equal(run_unary("kvt_unary", t), KV_OK);
    assert_int_equal(g_ran[0], K_CPU);

    /* Excluding a tensor's own key (Autograd) drops to the backend. */
    t->keys |= kv_keyset_of(KV_KEY_AUTOGRAD);
    kv_tls_keys ex = kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD));
    assert_int_equal(run_unary("kvt_unary", t), KV_OK);
    assert_int_equal(g_ran[0], K_CPU);
    kv_tls_pop(ex);
    assert_int_equal(run_unary("kvt_unary", t), KV_OK);
    assert_int_equal(g_ran[0], K_AUTOGRAD);

    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_TRACE, NULL), KV_OK);
    kv_tensor_release(t);
}

/* kv_call_typed (the typed wrappers' call) runs the kernel kv_call runs,
 * with the same key set, under every TLS state and tensor key mix the
 * tests above use, and fails the same way when there is none. */
static void expect_typed_as_call(kv_tensor *t) {
    kv_status want = run_unary("kvt_unary", t);
    const int who = g_ran[0], nran = g_nran;
    const kv_keyset ks = g_ran_ks[0];
    kv_ivalue slots[1];
    kv_stack s = kv_stack_on(slots, 1);
    assert_int_equal(kv_push_tensor(&s, t), KV_OK);
    ran_reset();
    assert_int_equal(kv_call_typed(kv_op_find("kvt_unary"), t->keys, &s), want);
    assert_int_equal(g_nran, nran);
    if (want != KV_OK) return;
    assert_int_equal(g_ran[0], who);
    assert_int_equal(g_ran_ks[0], ks);
    assert_int_equal(s.size, 1);
}

static void test_call_typed_as_call(void **state) {
    (void)state;
    register_unary();
    kv_tensor *t = tensor_on(KV_DEVICE_CPU, 2);
    expect_typed_as_call(t);
    kv_tls_keys outer = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_TRACE, k_trace), KV_OK);
    expect_typed_as_call(t);
    assert_int_equal(g_ran[0], K_TRACE);
    kv_tls_keys inner = kv_tls_exclude_push(kv_keyset_of(KV_KEY_TRACE) | kv_keyset_of(KV_KEY_CPU));
    expect_typed_as_call(t); /* nothing left: the same error */
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    kv_tls_pop(inner);
    kv_tls_pop(outer);
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_TRACE, NULL), KV_OK);
    t->keys |= kv_keyset_of(KV_KEY_AUTOGRAD) | kv_keyset_of(KV_KEY_AD_INPLACE_OR_VIEW);
    expect_typed_as_call(t);
    assert_int_equal(g_ran[0], K_AUTOGRAD);
    kv_tls_keys ex = kv_tls_exclude_push(kv_keyset_of(KV_KEY_AUTOGRAD));
    expect_typed_as_call(t);
    assert_int_equal(g_ran[0], K_CPU);
    kv_tls_pop(ex);
    t->device.type = KV_DEVICE_CUDA;
    t->keys = kv_keyset_of(KV_KEY_CUDA);
    expect_typed_as_call(t);
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    t->device.type = KV_DEVICE_CPU;
    t->keys = kv_keyset_of(KV_KEY_CPU);
    kv_tensor_release(t);
}

static void test_redispatch_below_self(void **state) {
    (void)state;
    register_op("kvt_redisp(Tensor self) -> bool");
    assert_int_equal(kv_register_kernel("kvt_redisp", KV_KEY_CPU, k_cpu), KV_OK);
    assert_int_equal(kv_register_kernel("kvt_redisp", KV_KEY_SIM, k_sim), KV_OK);
    assert_int_equal(kv_register_kernel("kvt_redisp", KV_KEY_AUTOGRAD, k_autograd_redispatch), KV_OK);
    kv_tensor *t = tensor_on(KV_DEVICE_SIM, 2);
    t->keys |= kv_keyset_of(KV_KEY_AUTOGRAD);
    assert_int_equal(run_unary("kvt_redisp", t), KV_OK);
    assert_int_equal(g_nran, 2);
    assert_int_equal(g_ran[0], K_AUTOGRAD_REDISPATCH);
    assert_int_equal(g_ran[1], K_SIM);
    assert_int_equal(g_ran_ks[1], kv_keyset_of(KV_KEY_SIM));
    kv_tensor_release(t);
}

static void test_redispatch_uses_given_keyset(void **state) {
    (void)state;
    register_unary();
    const kv_op *op = kv_op_find("kvt_unary");
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_TRACE, k_trace), KV_OK);
    kv_tensor *t = tensor_on(KV_DEVICE_SIM, 2);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);

    /* TLS says Trace and the tensor says SIM; redispatch looks at neither. */
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(kv_push_tensor(&s, t), KV_OK);
    ran_reset();
    assert_int_equal(kv_redispatch(op, kv_keyset_of(KV_KEY_CPU), &s), KV_OK);
    assert_int_equal(g_nran, 1);
    assert_int_equal(g_ran[0], K_CPU);
    assert_int_equal(g_ran_ks[0], kv_keyset_of(KV_KEY_CPU));

    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    ran_reset();
    kv_keyset ks = kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_AUTOGRAD) | kv_keyset_of(KV_KEY_BACKEND_SELECT);
    assert_int_equal(kv_redispatch(op, ks, &s), KV_OK);
    assert_int_equal(g_ran[0], K_AUTOGRAD);
    /* The op's fallthrough keys are taken out of what the kernel sees. */
    assert_int_equal(g_ran_ks[0], kv_keyset_of(KV_KEY_CPU) | kv_keyset_of(KV_KEY_AUTOGRAD));

    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, t);
    assert_int_equal(kv_redispatch(op, kv_keyset_of(KV_KEY_BACKEND_SELECT), &s), KV_ERR_MISSING_KERNEL);
    assert_int_equal(kv_redispatch(op, kv_keyset_of(KV_KEY_CUDA), &s), KV_ERR_MISSING_KERNEL);
    assert_non_null(strstr(kv_last_error_message(), "no kernel for key CUDA"));
    kv_tls_pop(saved);
    assert_int_equal(kv_register_kernel("kvt_unary", KV_KEY_TRACE, NULL), KV_OK);
    kv_tensor_release(t);
}

static kv_status call_binary(kv_tensor *a, kv_tensor *b) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, a);
    kv_push_tensor(&s, b);
    kv_push_scalar(&s, kv_scalar_int(1));
    ran_reset();
    return kv_call_by_name("kvt_binary", &s);
}

static void test_device_mismatch(void **state) {
    (void)state;
    static bool done;
    if (!done) {
        done = true;
        register_op("kvt_binary(Tensor self, Tensor other, *, Scalar alpha=1) -> bool");
        register_op("kvt_list(Tensor[] tensors, Tensor? extra=None) -> bool");
        for (int i = 0; i < 2; i++) {
            const char *name = i ? "kvt_list" : "kvt_binary";
            assert_int_equal(kv_register_kernel(name, KV_KEY_CPU, k_cpu), KV_OK);
            assert_int_equal(kv_register_kernel(name, KV_KEY_SIM, k_sim), KV_OK);
        }
    }
    kv_tensor *cpu = tensor_on(KV_DEVICE_CPU, 2);
    kv_tensor *sim = tensor_on(KV_DEVICE_SIM, 2);
    kv_tensor *cpu0 = tensor_on(KV_DEVICE_CPU, 0);

    assert_int_equal(call_binary(cpu, sim), KV_ERR_DEVICE);
    assert_int_equal(g_nran, 0);
    assert_string_equal(kv_last_error_message(),
                        "kvt_binary: expected all tensors to be on the same device, but found at least two devices, "
                        "cpu and sim (argument 'other')");
    assert_int_equal(call_binary(sim, cpu), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "sim and cpu (argument 'other')"));

    /* A 0-dim CPU tensor joins another device, on either side. */
    assert_int_equal(call_binary(sim, cpu0), KV_OK);
    assert_int_equal(g_ran[0], K_SIM);
    assert_int_equal(call_binary(cpu0, sim), KV_OK);
    assert_int_equal(g_ran[0], K_SIM);
    assert_int_equal(call_binary(cpu0, cpu), KV_OK);
    assert_int_equal(g_ran[0], K_CPU);
    /* ... but a 0-dim SIM tensor is an ordinary SIM tensor. */
    kv_tensor *sim0 = tensor_on(KV_DEVICE_SIM, 0);
    assert_int_equal(call_binary(cpu, sim0), KV_ERR_DEVICE);
    /* Same type, different index. */
    kv_tensor *sim1 = tensor_on(KV_DEVICE_SIM, 2);
    sim1->device.index = 1;
    assert_int_equal(call_binary(sim, sim1), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "sim:0 and sim:1 (argument 'other')"));

    /* Tensor[] elements are checked one by one; None optionals are skipped. */
    kv_ivalue slots[KV_STACK_MAX];
    kv_tensor *mixed[3] = { sim, cpu0, cpu };
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&s, (kv_tensor_list){ mixed, 3 });
    kv_push_tensor(&s, NULL);
    assert_int_equal(s.slots[1].tag, KV_IV_NONE);
    assert_int_equal(kv_call_by_name("kvt_list", &s), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "kvt_list: "));
    assert_non_null(strstr(kv_last_error_message(), "sim and cpu (argument 'tensors')"));

    kv_tensor *sims[2] = { sim, cpu0 };
    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&s, (kv_tensor_list){ sims, 2 });
    kv_push_tensor(&s, NULL);
    ran_reset();
    assert_int_equal(kv_call_by_name("kvt_list", &s), KV_OK);
    assert_int_equal(g_ran[0], K_SIM);

    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&s, (kv_tensor_list){ sims, 2 });
    kv_push_tensor(&s, cpu);
    assert_int_equal(kv_call_by_name("kvt_list", &s), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "(argument 'extra')"));

    kv_tensor_release(cpu);
    kv_tensor_release(sim);
    kv_tensor_release(cpu0);
    kv_tensor_release(sim0);
    kv_tensor_release(sim1);
}

static void test_factory_dispatch_by_device(void **state) {
    (void)state;
    const kv_op *op = register_op("kvt_factory(int n, *, Device? device=None) -> bool");
    assert_int_equal(kv_register_kernel("kvt_factory", KV_KEY_CPU, k_cpu), KV_OK);
    assert_int_equal(kv_register_kernel("kvt_factory", KV_KEY_SIM, k_sim), KV_OK);
    kv_ivalue slots[KV_STACK_MAX];

    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_int(&s, 3);
    kv_push_opt_device(&s, NULL);
    kv_keyset ks = 0;
    assert_int_equal(kv_call_keyset(op, &s, &ks), KV_OK);
    assert_int_equal(ks, kv_keyset_of(KV_KEY_CPU));
    ran_reset();
    assert_int_equal(kv_call(op, &s), KV_OK);
    assert_int_equal(g_ran[0], K_CPU);

    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_int(&s, 3);
    kv_push_device(&s, (kv_device){ KV_DEVICE_SIM, 0 });
    assert_int_equal(kv_call_keyset(op, &s, &ks), KV_OK);
    assert_int_equal(ks, kv_keyset_of(KV_KEY_SIM));
    ran_reset();
    assert_int_equal(kv_call(op, &s), KV_OK);
    assert_int_equal(g_ran[0], K_SIM);

    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_int(&s, 3);
    kv_push_device(&s, (kv_device){ KV_DEVICE_CUDA, 0 });
    assert_int_equal(kv_call(op, &s), KV_ERR_MISSING_KERNEL);
    assert_non_null(strstr(kv_last_error_message(), "no kernel for key CUDA"));

    /* The builtin factory: zeros(size, *, dtype, layout, device, pin_memory). */
    const kv_op *zeros = kv_op_find("zeros");
    assert_non_null(zeros);
    int64_t size[1] = { 4 };
    s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_ints(&s, (kv_int_list){ size, 1 });
    kv_push_none(&s);
    kv_push_none(&s);
    kv_push_device(&s, (kv_device){ KV_DEVICE_SIM, 0 });
    kv_push_none(&s);
    assert_int_equal(kv_call_keyset(zeros, &s, &ks), KV_OK);
    assert_int_equal(ks, kv_keyset_of(KV_KEY_SIM));

    /* TLS included keys join a factory's key set too. */
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_TRACE));
    assert_int_equal(kv_call_keyset(zeros, &s, &ks), KV_OK);
    assert_int_equal(ks, kv_keyset_of(KV_KEY_SIM) | kv_keyset_of(KV_KEY_TRACE));
    kv_tls_pop(saved);
}

static void test_argument_checking(void **state) {
    (void)state;
    const kv_op *op = register_op("kvt_types(Tensor self, int i, float f, bool b, str s, Scalar sc, "
                                  "ScalarType? dt, int[] l, Device? dev=None) -> bool");
    assert_int_equal(kv_register_kernel("kvt_types", KV_KEY_CPU, k_cpu), KV_OK);
    kv_tensor *t = tensor_on(KV_DEVICE_CPU, 2);
    int64_t l[2] = { 1, 2 };
    kv_ivalue good[9] = {
        { .tag = KV_IV_TENSOR, .v.tensor = t },
        { .tag = KV_IV_INT, .v.i = 1 },
        { .tag = KV_IV_DOUBLE, .v.d = 0.5 },
        { .tag = KV_IV_BOOL, .v.b = true },
        { .tag = KV_IV_STR, .v.str = "x" },
        { .tag = KV_IV_SCALAR, .v.scalar = { .kind = KV_SCALAR_INT, .v.i = 2 } },
        { .tag = KV_IV_NONE },
        { .tag = KV_IV_INT_LIST, .v.ints = { l, 2 } },
        { .tag = KV_IV_NONE },
    };
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s;
#define RESET_STACK()                                      \
    do {                                                   \
        memcpy(slots, good, sizeof good);                  \
        s = (kv_stack){ slots, 9, KV_STACK_MAX };          \
    } while (0)

    RESET_STACK();
    ran_reset();
    assert_int_equal(kv_call(op, &s), KV_OK);
    assert_int_equal(g_nran, 1);

    static const struct {
        int slot;
        kv_ivalue v;
        const char *msg;
    } bad[] = {
        { 0, { .tag = KV_IV_INT, .v.i = 1 }, "kvt_types: argument 'self': expected Tensor, got int" },
        { 0, { .tag = KV_IV_NONE }, "kvt_types: argument 'self': expected Tensor, got None" },
        { 0, { .tag = KV_IV_TENSOR, .v.tensor = NULL }, "kvt_types: argument 'self': expected Tensor, got a NULL tensor" },
        { 1, { .tag = KV_IV_DOUBLE, .v.d = 1.0 }, "kvt_types: argument 'i': expected int, got float" },
        { 2, { .tag = KV_IV_INT, .v.i = 1 }, "kvt_types: argument 'f': expected float, got int" },
        { 3, { .tag = KV_IV_INT, .v.i = 1 }, "kvt_types: argument 'b': expected bool, got int" },
        { 4, { .tag = KV_IV_STR, .v.str = NULL }, "kvt_types: argument 's': expected str, got a NULL string" },
        { 5, { .tag = KV_IV_DOUBLE, .v.d = 1.0 }, "kvt_types: argument 'sc': expected Scalar, got float" },
        { 6, { .tag = KV_IV_INT, .v.i = 1 }, "kvt_types: argument 'dt': expected ScalarType?, got int" },
        { 6, { .tag = KV_IV_DTYPE, .v.dtype = (kv_dtype)99 },
          "kvt_types: argument 'dt': expected ScalarType?, got unknown dtype value 99" },
        { 7, { .tag = KV_IV_INT, .v.i = 1 }, "kvt_types: argument 'l': expected int[], got int" },
        { 7, { .tag = KV_IV_NONE }, "kvt_types: argument 'l': expected int[], got None" },
        { 8, { .tag = KV_IV_STR, .v.str = "cpu" }, "kvt_types: argument 'dev': expected Device?, got str" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        RESET_STACK();
        slots[bad[i].slot] = bad[i].v;
        ran_reset();
        assert_int_equal(kv_call(op, &s), KV_ERR_INVALID_ARG);
        assert_int_equal(g_nran, 0);
        assert_string_equal(kv_last_error_message(), bad[i].msg);
        /* kv_call_keyset checks the same way. */
        kv_keyset ks;
        assert_int_equal(kv_call_keyset(op, &s, &ks), KV_ERR_INVALID_ARG);
    }

    RESET_STACK();
    s.size = 8;
    assert_int_equal(kv_call(op, &s), KV_ERR_INTERNAL);
    assert_non_null(strstr(kv_last_error_message(), "kvt_types: expected 9 arguments on the stack, got 8"));
    RESET_STACK();
    s.size = 10;
    assert_int_equal(kv_call(op, &s), KV_ERR_INTERNAL);
    assert_non_null(strstr(kv_last_error_message(), "kvt_types"));

    /* Tensor[] entries must not be NULL. */
    register_op("kvt_tl(Tensor[] tensors) -> bool");
    kv_tensor *items[2] = { t, NULL };
    kv_stack s2 = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensors(&s2, (kv_tensor_list){ items, 2 });
    assert_int_equal(kv_call_by_name("kvt_tl", &s2), KV_ERR_INVALID_ARG);
    assert_string_equal(kv_last_error_message(),
                        "kvt_tl: argument 'tensors': expected Tensor[], got a NULL tensor at element 1");
    assert_int_equal(kv_call(NULL, &s2), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_call(op, NULL), KV_ERR_INVALID_ARG);
#undef RESET_STACK
    kv_tensor_release(t);
}

static void test_handle_cache_on_and_off(void **state) {
    (void)state;
    const kv_op *neg = kv_op_find("neg");
    assert_non_null(neg);
    assert_true(kv_dispatch_cache_enabled()); /* the environment leaves it on */

    static _Atomic(const kv_op *) cache_on;
    uint64_t c0 = kv_op_lookup_count();
    assert_ptr_equal(kv_op_handle(&cache_on, "neg"), neg);
    assert_ptr_equal(atomic_load(&cache_on), neg);
    for (int i = 0; i < 5; i++) assert_ptr_equal(kv_op_handle(&cache_on, "neg"), neg);
    assert_int_equal(kv_op_lookup_count() - c0, 1);

    kv_dispatch_cache_set_enabled(false);
    assert_false(kv_dispatch_cache_enabled());
    static _Atomic(const kv_op *) cache_off;
    c0 = kv_op_lookup_count();
    for (int i = 0; i < 5; i++) assert_ptr_equal(kv_op_handle(&cache_off, "neg"), neg);
    assert_int_equal(kv_op_lookup_count() - c0, 5);
    assert_null(atomic_load(&cache_off));
    /* A handle cached earlier is not used either. */
    c0 = kv_op_lookup_count();
    assert_ptr_equal(kv_op_handle(&cache_on, "neg"), neg);
    assert_int_equal(kv_op_lookup_count() - c0, 1);

    kv_dispatch_cache_set_enabled(true);
    c0 = kv_op_lookup_count();
    assert_ptr_equal(kv_op_handle(&cache_on, "neg"), neg);
    assert_int_equal(kv_op_lookup_count() - c0, 0);

    /* An unknown name is not cached and fails every time. */
    static _Atomic(const kv_op *) cache_bad;
    assert_null(kv_op_handle(&cache_bad, "kvt_no_such_op"));
    assert_int_equal(kv_last_error(), KV_ERR_UNKNOWN_OP);
    assert_null(atomic_load(&cache_bad));
}

static void test_unknown_op_and_bad_registrations(void **state) {
    (void)state;
    kv_error_clear();
    assert_null(kv_op_find("kvt_no_such_op"));
    assert_int_equal(kv_last_error(), KV_ERR_UNKNOWN_OP);
    assert_non_null(strstr(kv_last_error_message(), "'kvt_no_such_op'"));
    assert_null(kv_op_find(NULL));
    assert_int_equal(kv_last_error(), KV_ERR_UNKNOWN_OP);

    assert_int_equal(kv_register_kernel("kvt_no_such_op", KV_KEY_CPU, k_cpu), KV_ERR_UNKNOWN_OP);
    assert_non_null(strstr(kv_last_error_message(), "'kvt_no_such_op'"));
    assert_int_equal(kv_register_fallthrough("kvt_no_such_op", KV_KEY_CPU), KV_ERR_UNKNOWN_OP);

    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    assert_int_equal(kv_call_by_name("kvt_no_such_op", &s), KV_ERR_UNKNOWN_OP);
    assert_non_null(strstr(kv_last_error_message(), "'kvt_no_such_op'"));

    int n = kv_op_count();
    assert_int_equal(kv_op_register("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor", NULL),
                     KV_ERR_INVALID_ARG);
    assert_non_null(strstr(kv_last_error_message(), "'add.Tensor' is already registered"));
    assert_int_equal(kv_op_register("kvt_broken(Tensor self -> bool", NULL), KV_ERR_SCHEMA);
    assert_int_equal(kv_op_count(), n);
    assert_null(kv_op_find("kvt_broken"));

    assert_int_equal(kv_register_kernel("neg", KV_KEY_COUNT, k_cpu), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_register_kernel("neg", (kv_key)-1, k_cpu), KV_ERR_INVALID_ARG);
    assert_int_equal(kv_op_entry_kind(kv_op_find("neg"), KV_KEY_COUNT), KV_ENTRY_MISSING);
}

/* ---- stack ---- */

static void test_stack_push_and_overflow(void **state) {
    (void)state;
    kv_ivalue slots[3];
    kv_stack s = kv_stack_on(slots, 3);
    int64_t v = 7;
    assert_int_equal(kv_push_opt_int(&s, &v), KV_OK);
    assert_int_equal(kv_push_opt_int(&s, NULL), KV_OK);
    assert_int_equal(kv_push_str(&s, NULL), KV_OK);
    assert_int_equal(s.size, 3);
    assert_int_equal(slots[0].tag, KV_IV_INT);
    assert_int_equal(slots[0].v.i, 7);
    assert_int_equal(slots[1].tag, KV_IV_NONE);
    assert_int_equal(slots[2].tag, KV_IV_NONE);
    kv_error_clear();
    assert_int_equal(kv_push_double(&s, 1.0), KV_ERR_INTERNAL);
    assert_int_equal(s.size, 3);
    assert_non_null(strstr(kv_last_error_message(), "stack overflow"));

    kv_ivalue more[KV_STACK_MAX];
    s = kv_stack_on(more, KV_STACK_MAX);
    kv_dtype dt = KV_F64;
    bool b = true;
    double d = 2.5;
    kv_scalar sc = kv_scalar_double(1.5);
    kv_device dev = { KV_DEVICE_SIM, 0 };
    kv_int_list il = { &v, 1 };
    kv_push_opt_dtype(&s, &dt);
    kv_push_opt_bool(&s, &b);
    kv_push_opt_double(&s, &d);
    kv_push_opt_scalar(&s, &sc);
    kv_push_opt_device(&s, &dev);
    kv_push_opt_ints(&s, &il);
    kv_push_str(&s, "abc");
    kv_push_opt_dtype(&s, NULL);
    assert_int_equal(s.size, 8);
    static const kv_ivalue_tag tags[] = { KV_IV_DTYPE, KV_IV_BOOL,     KV_IV_DOUBLE, KV_IV_SCALAR,
                                          KV_IV_DEVICE, KV_IV_INT_LIST, KV_IV_STR,    KV_IV_NONE };
    for (int i = 0; i < 8; i++) assert_int_equal(more[i].tag, tags[i]);
    assert_int_equal(kv_arg_dtype(&s, 0), KV_F64);
    assert_true(kv_arg_bool(&s, 1));
    assert_true(kv_arg_double(&s, 2) == 2.5);
    assert_true(kv_arg_scalar(&s, 3).v.d == 1.5);
    assert_int_equal(kv_arg_device(&s, 4).type, KV_DEVICE_SIM);
    assert_int_equal(kv_arg_ints(&s, 5).items[0], 7);
    assert_string_equal(kv_arg_str(&s, 6), "abc");
    assert_true(kv_arg_is_none(&s, 7));
    assert_null(kv_arg_tensor(&s, 7));

    assert_string_equal(kv_ivalue_tag_name(KV_IV_TENSOR_LIST), "Tensor[]");
    assert_string_equal(kv_ivalue_tag_name(KV_IV_DOUBLE), "float");
    assert_string_equal(kv_ivalue_tag_name(KV_IV_NONE), "None");
}

static void test_stack_returns(void **state) {
    (void)state;
    kv_tensor *a = tensor_on(KV_DEVICE_CPU, 2);
    kv_tensor *b = tensor_on(KV_DEVICE_CPU, 1);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, a);
    kv_push_int(&s, 1);
    kv_push_int(&s, 2);

    kv_tensor_retain(a);
    kv_stack_return_tensor(&s, a);
    assert_int_equal(s.size, 1);
    assert_ptr_equal(kv_arg_tensor(&s, 0), a);
    assert_int_equal(atomic_load(&a->refcount), 2);
    kv_stack_clear_returns(&s);
    assert_int_equal(s.size, 0);
    assert_int_equal(atomic_load(&a->refcount), 1);

    kv_tensor_retain(a);
    kv_tensor_retain(b);
    kv_tensor *three[3] = { a, b, a };
    kv_tensor_retain(a);
    kv_stack_return_tensors(&s, three, 3);
    assert_int_equal(s.size, 3);
    assert_ptr_equal(kv_arg_tensor(&s, 2), a);
    assert_int_equal(atomic_load(&a->refcount), 3);
    kv_stack_clear_returns(&s);
    assert_int_equal(atomic_load(&a->refcount), 1);
    assert_int_equal(atomic_load(&b->refcount), 1);

    kv_stack_return_bool(&s, true);
    assert_int_equal(s.size, 1);
    assert_int_equal(s.slots[0].tag, KV_IV_BOOL);
    kv_stack_clear_returns(&s);
    assert_int_equal(s.size, 0);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* ---- KV_NO_DISPATCH_CACHE, read once per process: checked in children ---- */

static int env_child(const char *mode) {
    kv_status st = kv_init();
    if (strcmp(mode, "bad") == 0) {
        if (st != KV_ERR_INVALID_ARG) return 10;
        const char *want = "KV_NO_DISPATCH_CACHE: expected 0 or 1, got '";
        if (strncmp(kv_last_error_message(), want, strlen(want)) != 0) return 11;
        /* Every later call reports the same failure. */
        kv_error_clear();
        if (kv_init() != KV_ERR_INVALID_ARG) return 12;
        if (kv_op_find("neg") != NULL || kv_last_error() != KV_ERR_INVALID_ARG) return 13;
        return 0;
    }
    if (st != KV_OK) return 20;
    bool want = strcmp(mode, "off") != 0;
    if (kv_dispatch_cache_enabled() != want) return 21;
    static _Atomic(const kv_op *) cache;
    uint64_t c0 = kv_op_lookup_count();
    for (int i = 0; i < 3; i++)
        if (kv_op_handle(&cache, "neg") == NULL) return 22;
    if (kv_op_lookup_count() - c0 != (want ? 1u : 3u)) return 23;
    return 0;
}

static const char *g_self;

static int run_env_child(const char *value, const char *mode) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (value) setenv("KV_NO_DISPATCH_CACHE", value, 1);
        else unsetenv("KV_NO_DISPATCH_CACHE");
        execl(g_self, g_self, "--env-child", mode, (char *)NULL);
        _exit(99);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_no_dispatch_cache_env(void **state) {
    (void)state;
    assert_int_equal(run_env_child("1", "off"), 0);
    assert_int_equal(run_env_child("0", "on"), 0);
    assert_int_equal(run_env_child("", "bad"), 0); /* set but empty: an error, not "0" */
    assert_int_equal(run_env_child(NULL, "on"), 0);
    assert_int_equal(run_env_child("yes", "bad"), 0);
}

int main(int argc, char **argv) {
    g_self = argv[0];
    if (argc == 3 && strcmp(argv[1], "--env-child") == 0) return env_child(argv[2]);
    /* The parent's own run must not inherit a setting from the caller. */
    unsetenv("KV_NO_DISPATCH_CACHE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_concurrent_and_idempotent),
        cmocka_unit_test(test_op_at_sorted),
        cmocka_unit_test(test_default_fallthroughs),
        cmocka_unit_test(test_table_precedence),
        cmocka_unit_test(test_fallback_runs_when_no_kernel),
        cmocka_unit_test(test_call_selects_highest_key),
        cmocka_unit_test(test_missing_kernel_message),
        cmocka_unit_test(test_tls_changes_selected_key),
        cmocka_unit_test(test_call_typed_as_call),
        cmocka_unit_test(test_redispatch_below_self),
        cmocka_unit_test(test_redispatch_uses_given_keyset),
        cmocka_unit_test(test_device_mismatch),
        cmocka_unit_test(test_factory_dispatch_by_device),
        cmocka_unit_test(test_argument_checking),
        cmocka_unit_test(test_handle_cache_on_and_off),
        cmocka_unit_test(test_unknown_op_and_bad_registrations),
        cmocka_unit_test(test_stack_push_and_overflow),
        cmocka_unit_test(test_stack_returns),
        cmocka_unit_test(test_no_dispatch_cache_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
