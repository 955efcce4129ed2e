/* A backend whose kernels misbehave on demand, one fault at a time, for
 * the runner's fault detection (tests/test_faulty_plugin.c, README
 * "Faults in backend kernels").
 *
 * Memory is like SIM's: host memory behind an address bias the host cannot
 * dereference, so the runner reaches it only through the copies (mem ops),
 * as it would on a real accelerator. Kernels: add.Tensor and mul.Tensor
 * (f32, equal shapes, any strides) and exp (f32, any strides); every other
 * op runs through host->stage_reference, registered as the backend
 * fallback (so with KV_TEST_FAULT_SLOT=sim the plugin can stand in for SIM
 * as the accel target and the whole suite runs on it), and transpose.int,
 * a view.
 *
 * KV_TEST_FAULT, read at every call, picks what goes wrong; unset or ""
 * is a correct backend. KV_TEST_FAULT_OP (default add.Tensor) names the
 * kernel that misbehaves; the others stay correct.
 *   write_input  writes into element 0 of input 'self' after computing
 *   strides      right values in column-major (transposed) output strides
 *   offset       right values, contiguous, at storage offset 1
 *   oob          writes one element past the end of its output
 *   unwritten    leaves the last output element unwritten
 *   leak         allocates a device tensor per call and never frees it
 *   hostleak     mallocs and touches 64 MiB of host memory per call, never
 *                freed; aborts when malloc fails
 *   crash        dereferences NULL (SIGSEGV)
 *   hang         never returns
 *   nondet       element 0 is off by one more ulp on each call (mod 64)
 *   noise        prints a line to stdout and one to stderr per call
 *   copyview     transpose.int only: a new tensor instead of a view of self
 *   ulp          one ulp above the correctly rounded result (exp within its
 *                table's 2 ulp; add/mul outside their bitwise rows)
 *   scatter      add/mul only: elements 52, 157, ... (every 105th from 52)
 *                one ulp above, so a 64x64 output has 39 wrong elements
 *                spread over its rows and columns (the report's heat map) */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/backend.h"

#define FAULTY_BIAS ((uintptr_t)0x0052000000000000ull)
#define FAULTY_MASK ((uintptr_t)0xffff000000000000ull)

static const kv_host_api *host;
static kv_device_type my_type;

static bool is_dev(const void *p) { return ((uintptr_t)p & FAULTY_MASK) == FAULTY_BIAS; }
static void *to_host(const void *dev) { return (void *)((uintptr_t)dev - FAULTY_BIAS); }

static void *mem_alloc(void *ctx, size_t n) {
    (void)ctx;
    size_t r = (n + 63u) & ~(size_t)63u;
    if (r < n) return NULL;
    if (r == 0) r = 64;
    void *p = aligned_alloc(64, r);
    return p ? (void *)((uintptr_t)p + FAULTY_BIAS) : NULL;
}
static void mem_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    if (p != NULL && is_dev(p)) free(to_host(p));
}
static kv_status bad_addr(const char *what, const void *p) {
    return host->error(KV_ERR_DEVICE, "faulty: %s: %p is not a faulty-device address", what, p);
}
static kv_status mem_to_device(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (!is_dev(dst)) return bad_addr("copy_to_device", dst);
    memcpy(to_host(dst), src, n);
    return KV_OK;
}
static kv_status mem_to_host(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (!is_dev(src)) return bad_addr("copy_to_host", src);
    memcpy(dst, to_host(src), n);
    return KV_OK;
}
static kv_status mem_on_device(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (!is_dev(dst) || !is_dev(src)) return bad_addr("copy_on_device", is_dev(dst) ? src : dst);
    memmove(to_host(dst), to_host(src), n);
    return KV_OK;
}
static kv_status mem_set(void *ctx, void *dst, int byte, size_t n) {
    (void)ctx;
    if (!is_dev(dst)) return bad_addr("memset", dst);
    memset(to_host(dst), byte, n);
    return KV_OK;
}
static kv_status mem_sync(void *ctx) {
    (void)ctx;
    return KV_OK;
}

/* The fault for this kernel ("" for none). */
static const char *fault_for(const char *op) {
    const char *f = getenv("KV_TEST_FAULT");
    const char *which = getenv("KV_TEST_FAULT_OP");
    if (f == NULL || strcmp(op, which && *which ? which : "add.Tensor") != 0) return "";
    return f;
}

static float *data_of(const kv_tensor *t) { return (float *)to_host(t->storage->data) + t->offset; }

/* Offset (in elements) of row-major element k of t. */
static int64_t at(const kv_tensor *t, int64_t k) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (k % t->sizes[d]) * t->strides[d];
        k /= t->sizes[d];
    }
    return off;
}

/* The faults that act before the computation (crash and hang never
 * return from here). */
static void fault_enter(const char *f) {
    if (strcmp(f, "crash") == 0) {
        volatile int *p = NULL;
        *p = 1;
    }
    if (strcmp(f, "hang") == 0)
        for (;;) pause();
    if (strcmp(f, "noise") == 0) {
        printf("faulty: a vendor debug line on stdout\n");
        fflush(stdout);
        fprintf(stderr, "faulty: a vendor warning on stderr\n");
    }
    if (strcmp(f, "hostleak") == 0) {
        const size_t n = (size_t)64 << 20;
        char *p = malloc(n);
        if (p == NULL) abort(); /* what a vendor library's xmalloc does */
        memset(p, 1, n);        /* leaked on purpose */
    }
    if (strcmp(f, "leak") == 0) {
        const int64_t sz[1] = { 1024 };
        (void)host->tensor_empty(sz, 1, KV_F32, (kv_device){ my_type, 0 }); /* never released */
    }
}

/* The output for a result of t's sizes, shaped as the fault wants. */
static kv_tensor *make_out(const kv_tensor *like, const char *f) {
    const kv_device dev = { my_type, 0 };
    if (strcmp(f, "strides") == 0 && like->ndim >= 2) {
        kv_tensor *base = host->tensor_empty(like->sizes, like->ndim, KV_F32, dev);
        if (base == NULL) return NULL;
        int64_t st[KV_MAX_DIMS], s = 1;
        for (int d = 0; d < like->ndim; d++) {
            st[d] = s;
            s *= like->sizes[d];
        }
        kv_tensor *v = host->tensor_view(base, like->sizes, st, like->ndim, 0);
        host->tensor_release(base);
        return v;
    }
    if (strcmp(f, "offset") == 0) {
        const int64_t n = host->tensor_numel(like) + 1;
        kv_tensor *base = host->tensor_empty(&n, 1, KV_F32, dev);
        if (base == NULL) return NULL;
        int64_t st[KV_MAX_DIMS], s = 1;
        for (int d = like->ndim - 1; d >= 0; d--) {
            st[d] = s;
            s *= like->sizes[d];
        }
        kv_tensor *v = host->tensor_view(base, like->sizes, st, like->ndim, 1);
        host->tensor_release(base);
        return v;
    }
    return host->tensor_empty(like->sizes, like->ndim, KV_F32, dev);
}

/* Writes element k of out; the faults that touch memory happen here. */
static void fault_after(const char *f, kv_tensor *out, const kv_tensor *self) {
    static unsigned calls;
    const int64_t n = host->tensor_numel(out);
    if (strcmp(f, "write_input") == 0 && host->tensor_numel(self) > 0) data_of(self)[at(self, 0)] += 1.0f;
    if (strcmp(f, "oob") == 0) data_of(out)[n] = 12345.0f;
    if (strcmp(f, "nondet") == 0 && n > 0) {
        /* Element 0 moves up by one more ulp per call (mod 64), as if an
         * accumulation order changed: no two calls in a row agree. */
        float *p = &data_of(out)[at(out, 0)];
        for (unsigned k = calls++ % 64u; k > 0; k--) *p = nextafterf(*p, INFINITY);
    }
}

static bool plain_f32(const kv_tensor *t) { return t->dtype == KV_F32; }

static kv_status binary(const kv_op *op, kv_keyset ks, kv_stack *stack, bool is_mul) {
    const char *name = host->op_name(op);
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    /* What it does not cover runs through the host's reference, as a
     * vendor library falls back (gradcheck's f64, broadcasting). */
    if (!plain_f32(a) || !plain_f32(b) || a->ndim != b->ndim ||
        memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) != 0)
        return host->stage_reference(op, ks, stack);
    const float alpha = is_mul ? 1.0f : (float)host->scalar_to_double(kv_arg_scalar(stack, 2));
    const char *f = fault_for(name);
    fault_enter(f);
    kv_tensor *out = make_out(a, f);
    if (out == NULL) return host->last_error();
    const int64_t n = host->tensor_numel(a);
    const bool skip_last = strcmp(f, "unwritten") == 0;
    float *y = data_of(out);
    const float *x = data_of(a), *z = data_of(b);
    for (int64_t k = 0; k < n - (skip_last ? 1 : 0); k++) {
        const float u = x[at(a, k)], v = z[at(b, k)];
        const float w = is_mul ? u * v : u + alpha * v;
        const bool off = strcmp(f, "ulp") == 0 || (strcmp(f, "scatter") == 0 && k % 105 == 52);
        y[at(out, k)] = off && isfinite(w) && w != 0.0f ? nextafterf(w, INFINITY) : w;
    }
    fault_after(f, out, a);
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status k_add(const kv_op *op, kv_keyset ks, kv_stack *stack) { return binary(op, ks, stack, false); }
static kv_status k_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) { return binary(op, ks, stack, true); }

static kv_status k_exp(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->dtype != KV_F32) return host->stage_reference(op, ks, stack);
    const char *f = fault_for(host->op_name(op));
    fault_enter(f);
    kv_tensor *out = make_out(a, f);
    if (out == NULL) return host->last_error();
    const int64_t n = host->tensor_numel(a);
    const bool off = strcmp(f, "ulp") == 0;
    float *y = data_of(out);
    const float *x = data_of(a);
    for (int64_t k = 0; k < n; k++) {
        /* The reference's own rounding (exp in double, rounded once), so
         * "ulp" is exactly one ulp away from it. */
        float e = (float)exp((double)x[at(a, k)]);
        if (off && isfinite(e) && e != 0.0f) e = nextafterf(e, INFINITY);
        y[at(out, k)] = e;
    }
    fault_after(f, out, a);
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* A view op: the result must alias self (README, the variants check's
 * metadata rule). "copyview" returns a new tensor with the right values. */
static kv_status k_transpose(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a->ndim < 1) return host->stage_reference(op, ks, stack);
    const int d0 = host->wrap_dim(kv_arg_int(stack, 1), a->ndim, "transpose.int", "dim0");
    const int d1 = host->wrap_dim(kv_arg_int(stack, 2), a->ndim, "transpose.int", "dim1");
    if (d0 < 0 || d1 < 0) return host->last_error();
    int64_t sz[KV_MAX_DIMS], st[KV_MAX_DIMS];
    memcpy(sz, a->sizes, sizeof sz);
    memcpy(st, a->strides, sizeof st);
    sz[d0] = a->sizes[d1], sz[d1] = a->sizes[d0];
    st[d0] = a->strides[d1], st[d1] = a->strides[d0];
    kv_tensor *out;
    if (strcmp(fault_for(host->op_name(op)), "copyview") == 0) {
        out = host->tensor_empty(sz, a->ndim, a->dtype, (kv_device){ my_type, 0 });
        if (out == NULL) return host->last_error();
        kv_tensor *v = host->tensor_view(a, sz, st, a->ndim, a->offset);
        if (v == NULL) {
            host->tensor_release(out);
            return host->last_error();
        }
        const size_t item = host->dtype_size(a->dtype);
        const char *src = to_host(v->storage->data);
        char *dst = to_host(out->storage->data);
        for (int64_t k = 0; k < host->tensor_numel(v); k++)
            memcpy(dst + (size_t)k * item, src + (size_t)(v->offset + at(v, k)) * item, item);
        host->tensor_release(v);
    } else {
        out = host->tensor_view(a, sz, st, a->ndim, a->offset);
        if (out == NULL) return host->last_error();
    }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    kv_status st = host->register_kernel("add.Tensor", (kv_key)type, k_add);
    if (st == KV_OK) st = host->register_kernel("mul.Tensor", (kv_key)type, k_mul);
    if (st == KV_OK) st = host->register_kernel("exp", (kv_key)type, k_exp);
    if (st == KV_OK) st = host->register_kernel("transpose.int", (kv_key)type, k_transpose);
    if (st == KV_OK) host->register_fallback((kv_key)type, host->stage_reference);
    return st;
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "faulty");
    const char *slot = getenv("KV_TEST_FAULT_SLOT");
    desc->device_type = slot && strcmp(slot, "sim") == 0 ? KV_DEVICE_SIM : KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 0;
    desc->mem = (kv_backend_mem_ops){
        .alloc = mem_alloc,
        .free = mem_free,
        .copy_to_device = mem_to_device,
        .copy_to_host = mem_to_host,
        .copy_on_device = mem_on_device,
        .memset = mem_set,
        .synchronize = mem_sync,
    };
    desc->register_kernels = reg;
    return 0;
}
