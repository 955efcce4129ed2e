/* The partial backend of issue 21, as a new user writes it: kernels for
 * add.Tensor, mul.Tensor, relu and sum.dim_IntList in f32, written from
 * kv/backend.h and docs/bringup.md alone, built with the pkg-config
 * recipe, and KV_ERR_MISSING_KERNEL for everything else (other dtypes,
 * layouts it does not walk, and arguments it does not check: a minimal
 * plugin declines invalid input rather than copy the reference's checks).
 * No fallback is registered: the host's default staged reference is what
 * lets an accel device over it run every other op.
 *
 * tests/test_partial.sh runs the whole suite with it as a backend and as
 * the accel target and asserts that every row which is not UNSUPPORTED is
 * one of these four ops, with 0 FAIL and 0 ERROR. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"

static const kv_host_api *host;
static kv_device_type my_type;

static void *fo_alloc(void *ctx, size_t n) {
    (void)ctx;
    return malloc(n ? n : 1);
}
static void fo_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    free(p);
}
static kv_status fo_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memmove(dst, src, n);
    return KV_OK;
}

static const float *fo_in(const kv_tensor *t) { return (const float *)t->storage->data + t->offset; }

/* Contiguous f32 is all these kernels walk. */
static bool fo_plain(const kv_tensor *t) { return t->dtype == KV_F32 && host->tensor_is_contiguous(t); }

static kv_status fo_decline(const char *op) {
    return host->error(KV_ERR_MISSING_KERNEL, "%s: four_ops takes contiguous f32 of one shape only", op);
}

static kv_status fo_binary(kv_stack *stack, const char *op, double alpha, bool is_mul) {
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!fo_plain(a) || !fo_plain(b) || a->ndim != b->ndim ||
        memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) != 0)
        return fo_decline(op);
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    const float *x = fo_in(a), *y = fo_in(b);
    float *z = out->storage->data;
    const int64_t n = host->tensor_numel(a);
    /* In double, then one rounding to f32: x*y and x+alpha*y are exact in
     * double for f32 operands when alpha is 1 (add) or absent (mul). */
    for (int64_t i = 0; i < n; i++)
        z[i] = is_mul ? (float)((double)x[i] * (double)y[i]) : (float)((double)x[i] + alpha * (double)y[i]);
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status fo_add(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const double alpha = host->scalar_to_double(kv_arg_scalar(stack, 2));
    if (alpha != 1.0) return fo_decline("add.Tensor"); /* x + alpha*y would round twice */
    return fo_binary(stack, "add.Tensor", alpha, false);
}

static kv_status fo_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return fo_binary(stack, "mul.Tensor", 0.0, true);
}

static kv_status fo_relu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (!fo_plain(a)) return fo_decline("relu");
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    const float *x = fo_in(a);
    float *z = out->storage->data;
    const int64_t n = host->tensor_numel(a);
    /* x itself unless it is below 0: NaN and -0 pass through, as in the
     * reference (the suite's special fills caught a first version that
     * turned -0 into +0). */
    for (int64_t i = 0; i < n; i++) z[i] = x[i] < 0.0f ? 0.0f : x[i];
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* Reduces the dims listed (all when the list is absent or empty) of a
 * contiguous f32 tensor, summing each output element's inputs in double
 * (exact for up to 2^29 f32 terms of one binade; well inside the bound
 * for any other) and rounding once. */
static kv_status fo_sum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (!fo_plain(a) || !kv_arg_is_none(stack, 3)) return fo_decline("sum.dim_IntList");
    const bool keepdim = kv_arg_bool(stack, 2);
    bool reduce[KV_MAX_DIMS] = { false };
    const int nd = a->ndim;
    if (kv_arg_is_none(stack, 1) || kv_arg_ints(stack, 1).n == 0) {
        for (int d = 0; d < nd; d++) reduce[d] = true;
    } else {
        const kv_int_list dims = kv_arg_ints(stack, 1);
        for (int i = 0; i < dims.n; i++) {
            const int64_t d = dims.items[i] < 0 ? dims.items[i] + nd : dims.items[i];
            if (d < 0 || d >= nd || reduce[d]) return fo_decline("sum.dim_IntList");
            reduce[d] = true;
        }
    }
    int64_t osizes[KV_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < nd; d++)
        if (!reduce[d]) osizes[ond++] = a->sizes[d];
        else if (keepdim) osizes[ond++] = 1;
    kv_tensor *out = host->tensor_empty(osizes, ond, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    const int64_t on = host->tensor_numel(out), n = host->tensor_numel(a);
    double *acc = calloc((size_t)(on > 0 ? on : 1), sizeof *acc);
    if (acc == NULL) {
        host->tensor_release(out);
        return host->error(KV_ERR_OOM, "sum.dim_IntList: four_ops: no memory for %lld sums", (long long)on);
    }
    const float *x = fo_in(a);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        int64_t o = 0;
        for (int d = 0; d < nd; d++)
            if (!reduce[d]) o = o * a->sizes[d] + idx[d];
        acc[o] += x[i];
        for (int d = nd - 1; d >= 0; d--) {
            if (++idx[d] < a->sizes[d]) break;
            idx[d] = 0;
        }
    }
    float *z = out->storage->data;
    for (int64_t i = 0; i < on; i++) z[i] = (float)acc[i];
    free(acc);
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

#ifdef FOUR_OPS_BAD_DECLARE
/* "fourbad" (tests/test_declared.sh): declares an op that does not exist,
 * which the loader refuses. */
static const kv_backend_support fo_declared[] = { { "no_such_op", KV_F32 } };
#elif defined FOUR_OPS_DECLARE
/* "fourdecl", the declared-support test's build (tests/test_declared.sh):
 * the same kernels, declaring relu, mul.Tensor and exp in f32. relu keeps
 * the promise on contiguous inputs; mul.Tensor breaks it on broadcasts
 * (it declines them) and exp has no kernel at all: "declared but
 * declined" FAIL rows. */
static const kv_backend_support fo_declared[] = {
    { "relu", KV_F32 },
    { "mul.Tensor", KV_F32 },
    { "exp", KV_F32 },
};
#endif

static kv_status fo_register(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    const kv_key key = (kv_key)type;
    kv_status st = host->register_kernel("add.Tensor", key, fo_add);
    if (st == KV_OK) st = host->register_kernel("mul.Tensor", key, fo_mul);
    if (st == KV_OK) st = host->register_kernel("relu", key, fo_relu);
    if (st == KV_OK) st = host->register_kernel("sum.dim_IntList", key, fo_sum);
    return st;
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
#if defined FOUR_OPS_NO_FALLBACK
    /* "fournofb" (tests/test_partial.sh): opted out of the loader's
     * default staged fallback. */
    snprintf(desc->name, sizeof desc->name, "fournofb");
    desc->no_default_fallback = 1;
#elif defined FOUR_OPS_BAD_DECLARE
    snprintf(desc->name, sizeof desc->name, "fourbad");
    desc->support = fo_declared;
    desc->nsupport = 1;
#elif defined FOUR_OPS_DECLARE
    snprintf(desc->name, sizeof desc->name, "fourdecl");
    desc->support = fo_declared;
    desc->nsupport = (int)(sizeof fo_declared / sizeof fo_declared[0]);
#else
    snprintf(desc->name, sizeof desc->name, "four");
#endif
    snprintf(desc->version, sizeof desc->version, "four_ops 0.1");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 1;
    desc->mem.alloc = fo_alloc;
    desc->mem.free = fo_free;
    desc->mem.copy_to_device = fo_copy;
    desc->mem.copy_to_host = fo_copy;
    desc->mem.copy_on_device = fo_copy;
    desc->register_kernels = fo_register;
    return 0;
}
