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
#include <time.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <fenv.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

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
#define HOSTILE_LOAD_OVERRUN 9  /* writes 512 bytes past kv_backend_desc (built against a longer struct) */
#define HOSTILE_LOAD_NONUL 10   /* a name that fills its field without a NUL */
#define HOSTILE_LOAD_FOREIGNKEY 28 /* also registers a 1-ulp-wrong mul.Tensor at the CPU key */
#define HOSTILE_LOAD_FOREIGNVAR 29 /* also registers a perf_dispatch variant of the CPU's mul.Tensor */
/* In mul.Tensor. */
#define HOSTILE_KERNEL_CRASH 11
#define HOSTILE_KERNEL_HANG 12
#define HOSTILE_KERNEL_EXIT 13     /* _exit(0) after half the output */
#define HOSTILE_KERNEL_INPUT 14    /* uses its input as scratch */
#define HOSTILE_KERNEL_STRIDES 15  /* right values, column-major output */
#define HOSTILE_KERNEL_OOB 16      /* writes one element past its output */
#define HOSTILE_KERNEL_DEVLEAK 17  /* a device workspace per call, never freed */
#define HOSTILE_KERNEL_HOSTLEAK 18 /* 2 MiB of host memory per call, never freed */
#define HOSTILE_KERNEL_NONDET 19   /* call k is k ulps off in element 0 */
#define HOSTILE_KERNEL_NOISE 20    /* prints to stdout and stderr on every call */
#define HOSTILE_KERNEL_ABORT 21    /* abort() half way (a vendor assert) */
#define HOSTILE_KERNEL_NORESULT 22 /* returns KV_OK and pushes no output */
#define HOSTILE_KERNEL_DTYPE 23    /* right values as f64 for an f32 op */
#define HOSTILE_KERNEL_DEVICE 24   /* returns its output in host (CPU) memory */
#define HOSTILE_KERNEL_UNWRITTEN 25 /* leaves the last output element unwritten */
#define HOSTILE_KERNEL_SILENT 26   /* fails without saying why (no host->error) */
#define HOSTILE_KERNEL_COPYFAIL 27 /* its copy to the host fails after a call (device lost) */
#define HOSTILE_KERNEL_DEVINDEX 30 /* its output says device index 1; its memory is index 0's */
#define HOSTILE_KERNEL_FPENV 31    /* leaves the rounding mode at toward-zero */
#define HOSTILE_KERNEL_UNDERRUN 32 /* writes one element before its output */
#define HOSTILE_KERNEL_FDLEAK 33   /* opens a file descriptor per call, never closes it */
#define HOSTILE_KERNEL_COPYCRASH 34 /* SIGSEGV in copy_to_host once mul.Tensor ran */
#define HOSTILE_MEM_HALFCOPY 35    /* copy_on_device copies half the bytes */
#define HOSTILE_MEM_MEMSET 36      /* memset ignores its byte (writes zeros) */
#define HOSTILE_KERNEL_RACE 37     /* one static scratch buffer: not thread-safe */
#define HOSTILE_KERNEL_MAPLEAK 38  /* maps a page per call, never unmaps it */
/* Issue 22, seen from a stranger's side: what docs/plugin-abi.md forbids
 * that the faults above do not reach. */
#define HOSTILE_KERNEL_INPUTMETA 39 /* flattens its input 0 in place (sizes, strides) and leaves it so */
#define HOSTILE_KERNEL_STALE 40    /* keeps a pointer to input 0; writes it on the next call */
#define HOSTILE_KERNEL_FTZ 41      /* sets MXCSR's FTZ and DAZ bits and leaves them */
#define HOSTILE_LOAD_FPENV 42      /* its entry point sets FTZ/DAZ (what -ffast-math's crtfastmath does) */
#define HOSTILE_KERNEL_SIGNAL 43   /* installs a SIGSEGV handler and leaves it */
#define HOSTILE_KERNEL_ERRNO 44    /* sets errno on every call (allowed: the row must pass) */
#define HOSTILE_KERNEL_EXITZERO 45 /* exit(0), atexit handlers and all, half way */
#define HOSTILE_LOAD_STDOUT 46     /* prints to stdout while loading */
#define HOSTILE_KERNEL_SLOW2 47    /* hangs on its second call only */
#define HOSTILE_KERNEL_REENTER 48  /* redispatches mul.Tensor to its own key: endless recursion */
#define HOSTILE_KERNEL_RELEASE 49  /* releases input 0, which it does not own */

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
    case HOSTILE_LOAD_OVERRUN: return "hostile_load_overrun";
    case HOSTILE_LOAD_NONUL: return "hostile_load_nonul";
    case HOSTILE_LOAD_FOREIGNKEY: return "hostile_load_foreignkey";
    case HOSTILE_LOAD_FOREIGNVAR: return "hostile_load_foreignvar";
    case HOSTILE_KERNEL_DEVINDEX: return "hostile_kernel_devindex";
    case HOSTILE_KERNEL_FPENV: return "hostile_kernel_fpenv";
    case HOSTILE_KERNEL_UNDERRUN: return "hostile_kernel_underrun";
    case HOSTILE_KERNEL_FDLEAK: return "hostile_kernel_fdleak";
    case HOSTILE_KERNEL_COPYCRASH: return "hostile_kernel_copycrash";
    case HOSTILE_MEM_HALFCOPY: return "hostile_mem_halfcopy";
    case HOSTILE_MEM_MEMSET: return "hostile_mem_memset";
    case HOSTILE_KERNEL_RACE: return "hostile_kernel_race";
    case HOSTILE_KERNEL_MAPLEAK: return "hostile_kernel_mapleak";
    case HOSTILE_KERNEL_INPUTMETA: return "hostile_kernel_inputmeta";
    case HOSTILE_KERNEL_STALE: return "hostile_kernel_stale";
    case HOSTILE_KERNEL_FTZ: return "hostile_kernel_ftz";
    case HOSTILE_LOAD_FPENV: return "hostile_load_fpenv";
    case HOSTILE_KERNEL_SIGNAL: return "hostile_kernel_signal";
    case HOSTILE_KERNEL_ERRNO: return "hostile_kernel_errno";
    case HOSTILE_KERNEL_EXITZERO: return "hostile_kernel_exitzero";
    case HOSTILE_LOAD_STDOUT: return "hostile_load_stdout";
    case HOSTILE_KERNEL_SLOW2: return "hostile_kernel_slow2";
    case HOSTILE_KERNEL_REENTER: return "hostile_kernel_reenter";
    case HOSTILE_KERNEL_RELEASE: return "hostile_kernel_release";
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
    /* Slack before the block too, for the underrun fault's stray element. */
    unsigned char *p = malloc(n + 2 * HOSTILE_SLACK);
    return p ? p + HOSTILE_SLACK : NULL;
}
static void mem_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    if (p != NULL) free((unsigned char *)p - HOSTILE_SLACK);
}
static kv_status mem_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memmove(dst, src, n);
    return KV_OK;
}
static kv_status mem_copy_on_device(void *ctx, void *dst, const void *src, size_t n) {
    if (HOSTILE_FAULT == HOSTILE_MEM_HALFCOPY) n /= 2;
    return mem_copy(ctx, dst, src, n);
}
/* Set by the copy-failure fault's kernel: from then on the device is gone
 * and nothing comes back to the host. */
static bool hostile_device_lost;
/* Set once mul.Tensor ran, for the copy-crash fault. */
static bool hostile_mul_ran;
static kv_status mem_copy_to_host(void *ctx, void *dst, const void *src, size_t n) {
    if (hostile_device_lost)
        return host->error(KV_ERR_DEVICE, "%s: copy_to_host: device lost (it stopped answering)", hostile_name());
    if (HOSTILE_FAULT == HOSTILE_KERNEL_COPYCRASH && hostile_mul_ran) *hostile_null = 1;
    return mem_copy(ctx, dst, src, n);
}
static kv_status mem_set(void *ctx, void *dst, int byte, size_t n) {
    (void)ctx;
    memset(dst, HOSTILE_FAULT == HOSTILE_MEM_MEMSET ? 0 : byte, n);
    return KV_OK;
}
static kv_status mem_sync(void *ctx) {
    (void)ctx;
    return KV_OK;
}

/* FTZ (bit 15) and DAZ (bit 6) of MXCSR: what a vendor library sets for
 * speed; on other machines the rounding mode stands in for it. */
static void hostile_set_ftz(void) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr(_mm_getcsr() | 0x8040u);
#else
    fesetround(FE_TOWARDZERO);
#endif
}

/* A vendor runtime's crash handler: it swallows the crash. */
static void hostile_on_segv(int sig) {
    (void)sig;
    _exit(0);
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
    if (fault == HOSTILE_KERNEL_SLOW2 && hostile_calls == 1) hostile_hang();
    if (fault == HOSTILE_KERNEL_STALE) {
        /* The input of the previous call, kept past its return: written
         * now, after the caller may have freed it. */
        static float *kept;
        if (kept != NULL) kept[0] = -1.0f;
        kept = f32_data(a);
    }
    if (fault == HOSTILE_KERNEL_NOISE) {
        printf("%s: stdout noise from %s, call %u\n", hostile_name(), name, hostile_calls);
        fflush(stdout);
        fprintf(stderr, "%s: stderr noise from %s, call %u\n", hostile_name(), name, hostile_calls);
    }
    if (fault == HOSTILE_KERNEL_HOSTLEAK) {
        /* Past the memory check's 1 MiB per call, and small enough that
         * the extra calls of the threads check stay cheap on a busy host. */
        const size_t leak = (size_t)2 << 20;
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
    if (fault == HOSTILE_KERNEL_RACE) {
        /* The product goes through one static scratch buffer, with a pause
         * between writing and reading it: two threads at once read each
         * other's values. 20 ms: with 2 ms, threads started further apart
         * than that on a loaded machine missed each other (a fresh-clone
         * CI run saw no race once). */
        static float scratch[4096];
        if (n <= 4096) {
            for (int64_t i = 0; i < n; i++) scratch[i] = x[i] * y[i];
            nanosleep(&(struct timespec){ 0, 20000000 }, NULL); /* 20 ms */
            for (int64_t i = 0; i < n; i++) z[i] = scratch[i];
            if (faulty) hostile_calls++;
            host->stack_return_tensors(stack, &out, 1);
            return KV_OK;
        }
    }
    double *z64 = (double *)out->storage->data + out->offset;
    for (int64_t i = 0; i < n; i++) {
        if (i == n / 2 && fault == HOSTILE_KERNEL_CRASH) hostile_segfault();
        if (i == n / 2 && fault == HOSTILE_KERNEL_HANG) hostile_hang();
        if (i == n / 2 && fault == HOSTILE_KERNEL_EXIT) _exit(0);
        if (i == n / 2 && fault == HOSTILE_KERNEL_ABORT) abort();
        if (i == n / 2 && fault == HOSTILE_KERNEL_EXITZERO) exit(0);
        if (i == n - 1 && fault == HOSTILE_KERNEL_UNWRITTEN) break;
        const float v = is_mul ? x[i] * y[i] : x[i] + alpha * y[i];
        if (as_f64) z64[i] = v;
        else z[strided_offset(a, strides, i)] = v;
    }
    if (fault == HOSTILE_KERNEL_OOB) z[n] = -1.0f;
    if (fault == HOSTILE_KERNEL_UNDERRUN) z[-1] = -1.0f;
    if (fault == HOSTILE_KERNEL_DEVINDEX) out->device.index = 1; /* its memory stays device 0's */
    if (fault == HOSTILE_KERNEL_FPENV) fesetround(FE_TOWARDZERO);
    if (fault == HOSTILE_KERNEL_FTZ) hostile_set_ftz();
    if (fault == HOSTILE_KERNEL_SIGNAL) signal(SIGSEGV, hostile_on_segv);
    if (fault == HOSTILE_KERNEL_ERRNO) errno = EIO;
    if (fault == HOSTILE_KERNEL_INPUTMETA && a->ndim > 1) {
        /* "Viewed as 1-D" by writing the caller's tensor: same storage,
         * same values, another shape. */
        kv_tensor *w = (kv_tensor *)a;
        w->sizes[0] = n;
        w->strides[0] = 1;
        w->ndim = 1;
    }
    if (fault == HOSTILE_KERNEL_RELEASE) host->tensor_release((kv_tensor *)a);
    if (fault == HOSTILE_KERNEL_FDLEAK) (void)open("/dev/null", O_RDONLY | O_CLOEXEC); /* never closed */
    if (fault == HOSTILE_KERNEL_MAPLEAK) {
        /* A page of /dev/zero (a file mapping merges with no neighbour):
         * one new mapping per call; its descriptor is closed, so only the
         * mapping leaks. */
        const int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            volatile const char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p != MAP_FAILED) (void)p[0];
            close(fd);
        }
    }
    if (faulty) hostile_mul_ran = true;
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
    (void)ks;
    /* "Falls back" to the dispatcher for its own op on its own key. */
    if (HOSTILE_FAULT == HOSTILE_KERNEL_REENTER) return host->redispatch(op, kv_keyset_of((kv_key)my_type), stack);
    (void)op;
    return binary("mul.Tensor", true, stack);
}

/* A CPU mul.Tensor one ulp off in element 0 (the foreign-key faults). */
static kv_status k_cpu_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (a->dtype != KV_F32 || !host->tensor_is_contiguous(a) || !host->tensor_is_contiguous(b) ||
        host->tensor_numel(a) != host->tensor_numel(b))
        return host->error(KV_ERR_MISSING_KERNEL, "%s: CPU mul.Tensor: f32, contiguous, one shape", hostile_name());
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, (kv_device){ KV_DEVICE_CPU, 0 });
    if (out == NULL) return host->last_error();
    const int64_t n = host->tensor_numel(a);
    for (int64_t i = 0; i < n; i++) f32_data(out)[i] = f32_data(a)[i] * f32_data(b)[i];
    if (n > 0) f32_data(out)[0] = ulps_off(f32_data(out)[0], 1);
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    if (HOSTILE_FAULT == HOSTILE_LOAD_STDOUT) {
        printf("%s: registering kernels\n", hostile_name());
        fflush(stdout);
    }
    /* Every other op runs the host reference on copies of its memory (as
     * CUDA does for ops it lacks), so a case on this backend as the accel
     * target gets as far as the backward passes that call its mul.Tensor;
     * the runner still counts those ops UNSUPPORTED for it. */
    host->register_fallback((kv_key)type, host->stage_reference);
    kv_status st = host->register_kernel("add.Tensor", (kv_key)type, k_add);
    if (st != KV_OK) return st;
    /* "Fixing" the CPU's kernel: ignores what the host says. */
    if (HOSTILE_FAULT == HOSTILE_LOAD_FOREIGNKEY) (void)host->register_kernel("mul.Tensor", KV_KEY_CPU, k_cpu_mul);
    if (HOSTILE_FAULT == HOSTILE_LOAD_FOREIGNVAR)
        (void)host->tune_register_variant("mul.Tensor", KV_KEY_CPU, "hostile", k_cpu_mul, NULL);
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
    if (HOSTILE_FAULT == HOSTILE_LOAD_FPENV) hostile_set_ftz();
    if (HOSTILE_FAULT == HOSTILE_LOAD_STDOUT) {
        printf("%s: hello from the entry point\n", hostile_name());
        fflush(stdout);
    }
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
        .copy_on_device = mem_copy_on_device,
        .memset = mem_set,
        .synchronize = mem_sync,
    };
    desc->register_kernels = reg;
    if (HOSTILE_FAULT == HOSTILE_LOAD_OVERRUN) memset(desc + 1, 0x5a, 512); /* the longer struct's tail */
    if (HOSTILE_FAULT == HOSTILE_LOAD_NONUL) memset(desc->name, 'h', sizeof desc->name);
    return 0;
}
