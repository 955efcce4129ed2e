/* Hostile backend plugins (tests/test_hostile.sh): one source, one fault
 * per build. build.ninja compiles this file once per fault with
 * -DHOSTILE_FAULT=<n> into build/tests/plugins/hostile/libhostile_<name>.so,
 * so each plugin misbehaves in exactly one way and kvsuite has to report
 * that way, naming this backend (its descriptor name is the .so's name
 * without "lib") and the op.
 *
 * Written from the ABI alone (kv/backend.h), like a vendor plugin: what
 * is not a fault is a correct backend. Its memory is "device" memory the
 * host must not dereference (host_addressable = 0), so the runner only
 * reaches it through the copy operations, as on a real accelerator. Its
 * kernels are add.Tensor and mul.Tensor on contiguous f32 tensors of one
 * shape (anything else is KV_ERR_MISSING_KERNEL: UNSUPPORTED); every other
 * op runs the host reference on copies (host->stage_reference as its
 * fallback, which the runner counts UNSUPPORTED, not as its kernel). Kernel
 * faults are in mul.Tensor only, so add.Tensor is the control: a report
 * that blames add, or every op, has the attribution wrong. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/backend.h"

/* At load (the entry point or registration). */
#define HOSTILE_LOAD_CRASH 1    /* SIGSEGV in the entry point */
#define HOSTILE_LOAD_EXIT 2     /* exit(0) in the entry point */
#define HOSTILE_LOAD_HANG 3     /* the entry point never returns */
#define HOSTILE_LOAD_ABI 4      /* built for the next ABI version */
#define HOSTILE_LOAD_FAIL 5     /* the entry point returns -1 */
#define HOSTILE_LOAD_REGISTER 6 /* register_kernels fails half way */
#define HOSTILE_LOAD_NOENTRY 7  /* exports a misspelt entry point */
#define HOSTILE_LOAD_UNAVAILABLE 8 /* loads, but says it cannot run here */
/* In mul.Tensor. */
#define HOSTILE_KERNEL_CRASH 11
#define HOSTILE_KERNEL_HANG 12
#define HOSTILE_KERNEL_EXIT 13     /* _exit(0) after half the output */
#define HOSTILE_KERNEL_INPUT 14    /* uses its input as scratch */
#define HOSTILE_KERNEL_STRIDES 15  /* right values, column-major output */
#define HOSTILE_KERNEL_OOB 16      /* writes one element past its output */
#define HOSTILE_KERNEL_DEVLEAK 17  /* a device workspace per call, never freed */
#define HOSTILE_KERNEL_HOSTLEAK 18 /* 4 MiB of host memory per call, never freed */
#define HOSTILE_KERNEL_NONDET 19   /* call k is k ulps off in element 0 */
#define HOSTILE_KERNEL_NOISE 20    /* prints to stdout and stderr on every call */
#define HOSTILE_KERNEL_ABORT 21    /* abort() half way (a vendor assert) */
#define HOSTILE_KERNEL_NORESULT 22 /* returns KV_OK and pushes no output */
#define HOSTILE_KERNEL_DTYPE 23    /* right values as f64 for an f32 op */
#define HOSTILE_KERNEL_DEVICE 24   /* returns its output in host (CPU) memory */
#define HOSTILE_KERNEL_UNWRITTEN 25 /* leaves the last output element unwritten */
#define HOSTILE_KERNEL_SILENT 26   /* fails without saying why (no host->error) */
#define HOSTILE_KERNEL_COPYFAIL 27 /* its copy to the host fails after a call (device lost) */

#ifndef HOSTILE_FAULT
#error "build with -DHOSTILE_FAULT=<n> (build.ninja)"
#endif

static const kv_host_api *host;
static kv_device_type my_type = KV_BACKEND_SLOT_ANY;

/* The descriptor name: which fault this is, so a report that names the
 * backend also says which plugin misbehaved. */
static const char *hostile_name(void) {
    switch (HOSTILE_FAULT) {
    case HOSTILE_LOAD_CRASH: return "hostile_load_crash";
    case HOSTILE_LOAD_EXIT: return "hostile_load_exit";
    case HOSTILE_LOAD_HANG: return "hostile_load_hang";
    case HOSTILE_LOAD_ABI: return "hostile_load_abi";
    case HOSTILE_LOAD_FAIL: return "hostile_load_fail";
    case HOSTILE_LOAD_REGISTER: return "hostile_load_register";
    case HOSTILE_LOAD_NOENTRY: return "hostile_load_noentry";
    case HOSTILE_LOAD_UNAVAILABLE: return "hostile_load_unavailable";
    case HOSTILE_KERNEL_CRASH: return "hostile_kernel_crash";
    case HOSTILE_KERNEL_HANG: return "hostile_kernel_hang";
    case HOSTILE_KERNEL_EXIT: return "hostile_kernel_exit";
    case HOSTILE_KERNEL_INPUT: return "hostile_kernel_input";
    case HOSTILE_KERNEL_STRIDES: return "hostile_kernel_strides";
    case HOSTILE_KERNEL_OOB: return "hostile_kernel_oob";
    case HOSTILE_KERNEL_DEVLEAK: return "hostile_kernel_devleak";
    case HOSTILE_KERNEL_HOSTLEAK: return "hostile_kernel_hostleak";
    case HOSTILE_KERNEL_NONDET: return "hostile_kernel_nondet";
    case HOSTILE_KERNEL_NOISE: return "hostile_kernel_noise";
    case HOSTILE_KERNEL_ABORT: return "hostile_kernel_abort";
    case HOSTILE_KERNEL_NORESULT: return "hostile_kernel_noresult";
    case HOSTILE_KERNEL_DTYPE: return "hostile_kernel_dtype";
    case HOSTILE_KERNEL_DEVICE: return "hostile_kernel_device";
    case HOSTILE_KERNEL_UNWRITTEN: return "hostile_kernel_unwritten";
    case HOSTILE_KERNEL_SILENT: return "hostile_kernel_silent";
    case HOSTILE_KERNEL_COPYFAIL: return "hostile_kernel_copyfail";
    default: return "hostile_unknown";
    }
}

/* A real null dereference (SIGSEGV), which the compiler cannot turn into
 * a trap instruction (SIGILL) because it cannot see the pointer's value. */
static int *volatile hostile_null;
static void hostile_segfault(void) { *hostile_null = 1; }

/* A hang that costs no CPU: the runner's timeout has to end it. */
_Noreturn static void hostile_hang(void) {
    for (;;) pause();
}

/* ---- memory: exact-size blocks in host memory the host must not touch ----
 * Each block has private slack after it, invisible to the runner, so the
 * out-of-bounds fault's stray element lands in memory we own: it can only
 * be seen by a guard band the runner places, never by corrupting malloc's
 * heap (which would turn it into a random crash elsewhere). */
#define HOSTILE_SLACK 64

static void *mem_alloc(void *ctx, size_t n) {
    (void)ctx;
    return malloc(n + HOSTILE_SLACK);
}
static void mem_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    free(p);
}
static kv_status mem_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memmove(dst, src, n);
    return KV_OK;
}
/* Set by the copy-failure fault's kernel: from then on the device is gone
 * and nothing comes back to the host. */
static bool hostile_device_lost;
static kv_status mem_copy_to_host(void *ctx, void *dst, const void *src, size_t n) {
    if (hostile_device_lost)
        return host->error(KV_ERR_DEVICE, "%s: copy_to_host: device lost (it stopped answering)", hostile_name());
    return mem_copy(ctx, dst, src, n);
}
static kv_status mem_set(void *ctx, void *dst, int byte, size_t n) {
    (void)ctx;
    memset(dst, byte, n);
    return KV_OK;
}
static kv_status mem_sync(void *ctx) {
    (void)ctx;
    return KV_OK;
}

/* ---- kernels ---- */
static bool mine(const kv_tensor *t, const kv_tensor *like) {
    return t->device.type == my_type && t->dtype == KV_F32 && host->tensor_is_contiguous(t) && t->ndim == like->ndim &&
           memcmp(t->sizes, like->sizes, sizeof(int64_t) * (size_t)t->ndim) == 0;
}

static float *f32_data(const kv_tensor *t) { return (float *)t->storage->data + t->offset; }

/* Column-major strides for t's sizes: the same values at the wrong places
 * for a caller that assumes the op's contiguous output. */
static void column_major(const kv_tensor *t, int64_t *strides) {
    int64_t s = 1;
    for (int d = 0; d < t->ndim; d++) {
        strides[d] = s;
        s *= t->sizes[d] > 0 ? t->sizes[d] : 1;
    }
}

/* Where row-major element i lives in a tensor with these strides. */
static int64_t strided_offset(const kv_tensor *t, const int64_t *strides, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->sizes[d]) * strides[d];
        i /= t->sizes[d];
    }
    return off;
}

/* Perturbs element 0 by `k` units in the last place. */
static float ulps_off(float v, uint32_t k) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits += k;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* The last host leak, kept in a volatile so the compiler cannot drop the
 * malloc; the previous one is lost on purpose. */
static void *volatile hostile_leaked;
static uint32_t hostile_calls;

static kv_status binary(const char *name, bool is_mul, kv_stack *stack) {
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!mine(a, a) || !mine(b, a))
        return host->error(KV_ERR_MISSING_KERNEL, "%s: %s takes contiguous f32 tensors of one shape on its device",
                           name, hostile_name());
    const float alpha = is_mul ? 1.0f : (float)host->scalar_to_double(kv_arg_scalar(stack, 2));
    const bool faulty = is_mul; /* add.Tensor is the control */
    const int fault = faulty ? HOSTILE_FAULT : 0;
    const kv_device dev = { my_type, 0 };
    const int64_t n = host->tensor_numel(a);

    if (fault == HOSTILE_KERNEL_SILENT) return KV_ERR_DEVICE; /* and no host->error: no message */
    if (fault == HOSTILE_KERNEL_NOISE) {
        printf("%s: stdout noise from %s, call %u\n", hostile_name(), name, hostile_calls);
        fflush(stdout);
        fprintf(stderr, "%s: stderr noise from %s, call %u\n", hostile_name(), name, hostile_calls);
    }
    if (fault == HOSTILE_KERNEL_HOSTLEAK) {
        const size_t leak = (size_t)4 << 20;
        void *p = malloc(leak);
        /* What a leaking vendor library does when the host runs dry. */
        if (p == NULL) return host->error(KV_ERR_DEVICE, "%s: %s: out of host memory", hostile_name(), name);
        memset(p, 0x5a, leak); /* touched, so it is resident */
        hostile_leaked = p;
    }
    if (fault == HOSTILE_KERNEL_DEVLEAK) {
        /* A workspace allocated through the ABI (the loader's allocator,
         * so mem.alloc) and never released: mem.free is never called. */
        if (host->tensor_empty(a->sizes, a->ndim, KV_F32, dev) == NULL) return host->last_error();
    }

    const bool as_f64 = fault == HOSTILE_KERNEL_DTYPE;
    const kv_device out_dev = fault == HOSTILE_KERNEL_DEVICE ? (kv_device){ KV_DEVICE_CPU, 0 } : dev;
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, as_f64 ? KV_F64 : KV_F32, out_dev);
    if (out == NULL) return host->last_error();
    int64_t strides[KV_MAX_DIMS];
    if (fault == HOSTILE_KERNEL_STRIDES && a->ndim >= 2) {
        column_major(a, strides);
        kv_tensor *view = host->tensor_view(out, a->sizes, strides, a->ndim, 0);
        host->tensor_release(out);
        if (view == NULL) return host->last_error();
        out = view;
    } else {
        for (int d = 0; d < a->ndim; d++) strides[d] = out->strides[d];
    }

    const float *x = f32_data(a), *y = f32_data(b);
    float *z = f32_data(out);
    double *z64 = (double *)out->storage->data + out->offset;
    for (int64_t i = 0; i < n; i++) {
        if (i == n / 2 && fault == HOSTILE_KERNEL_CRASH) hostile_segfault();
        if (i == n / 2 && fault == HOSTILE_KERNEL_HANG) hostile_hang();
        if (i == n / 2 && fault == HOSTILE_KERNEL_EXIT) _exit(0);
        if (i == n / 2 && fault == HOSTILE_KERNEL_ABORT) abort();
        if (i == n - 1 && fault == HOSTILE_KERNEL_UNWRITTEN) break;
        const float v = is_mul ? x[i] * y[i] : x[i] + alpha * y[i];
        if (as_f64) z64[i] = v;
        else z[strided_offset(a, strides, i)] = v;
    }
    if (fault == HOSTILE_KERNEL_OOB) z[n] = -1.0f;
    if (fault == HOSTILE_KERNEL_INPUT && n > 0) ((float *)x)[0] = z[0]; /* input reused as scratch */
    if (fault == HOSTILE_KERNEL_NONDET && n > 0) z[0] = ulps_off(z[0], hostile_calls);
    if (fault == HOSTILE_KERNEL_COPYFAIL) hostile_device_lost = true;
    if (faulty) hostile_calls++;
    if (fault == HOSTILE_KERNEL_NORESULT) {
        host->tensor_release(out);
        return KV_OK; /* says it worked, returns nothing */
    }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status k_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return binary("add.Tensor", false, stack);
}
static kv_status k_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return binary("mul.Tensor", true, stack);
}

static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    /* Every other op runs the host reference on copies of its memory (as
     * CUDA does for ops it lacks), so a case on this backend as the accel
     * target gets as far as the backward passes that call its mul.Tensor;
     * the runner still counts those ops UNSUPPORTED for it. */
    host->register_fallback((kv_key)type, host->stage_reference);
    kv_status st = host->register_kernel("add.Tensor", (kv_key)type, k_add);
    if (st != KV_OK) return st;
    if (HOSTILE_FAULT == HOSTILE_LOAD_REGISTER)
        return host->error(KV_ERR_DEVICE, "%s: register_kernels: device firmware did not answer", hostile_name());
    return host->register_kernel("mul.Tensor", (kv_key)type, k_mul);
}

/* The misspelt-entry fault exports this name instead of the ABI's. */
#if HOSTILE_FAULT == HOSTILE_LOAD_NOENTRY
#define HOSTILE_ENTRY kv_backend_entry_v2
KV_BACKEND_EXPORT int kv_backend_entry_v2(kv_backend_desc *desc, int abi_version);
#else
#define HOSTILE_ENTRY kv_backend_entry
#endif

KV_BACKEND_EXPORT int HOSTILE_ENTRY(kv_backend_desc *desc, int abi_version) {
    if (HOSTILE_FAULT == HOSTILE_LOAD_CRASH) hostile_segfault();
    if (HOSTILE_FAULT == HOSTILE_LOAD_EXIT) exit(0);
    if (HOSTILE_FAULT == HOSTILE_LOAD_HANG) hostile_hang();
    if (HOSTILE_FAULT == HOSTILE_LOAD_ABI) {
        /* What a plugin built against the next kv/backend.h does: writes
         * its version, nothing else, and refuses. */
        desc->abi_version = KV_BACKEND_ABI_VERSION + 1;
        return -1;
    }
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "%s", hostile_name());
    snprintf(desc->version, sizeof desc->version, "kvsuite hostile test plugin, fault %d", HOSTILE_FAULT);
    /* A driver that failed to initialise, after saying who it is. */
    if (HOSTILE_FAULT == HOSTILE_LOAD_FAIL) return -1;
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 0;
    if (HOSTILE_FAULT == HOSTILE_LOAD_UNAVAILABLE) {
        /* Not a fault of the plugin: a machine without its device. */
        desc->available = 0;
        snprintf(desc->reason, sizeof desc->reason, "no hostile device on this machine");
    }
    desc->mem = (kv_backend_mem_ops){
        .alloc = mem_alloc,
        .free = mem_free,
        .copy_to_device = mem_copy,
        .copy_to_host = mem_copy_to_host,
        .copy_on_device = mem_copy,
        .memset = mem_set,
        .synchronize = mem_sync,
    };
    desc->register_kernels = reg;
    return 0;
}
