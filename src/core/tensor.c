/* Tensor creation, views, aliases, refcounts and element access.
 *
 * Ownership of autograd metadata: a tensor calls kv_tensor_autograd_free_hook
 * on its `autograd` pointer when its last reference goes. Views and aliases
 * made here start with autograd == NULL, so core never frees metadata it
 * did not get from its owner. Code that wants an alias to share metadata
 * (boxing) sets alias->autograd itself and must make the hook safe for
 * sharing (e.g. refcounted metadata in src/modes), or clear the pointer
 * before releasing the alias. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_cache.h"
#include "kv/tensor.h"

void (*kv_tensor_autograd_free_hook)(struct kv_autograd_meta *meta) = NULL;
void (*kv_tensor_batched_free_hook)(struct kv_batched_info *info) = NULL;

/* Validated geometry of a would-be tensor. */
typedef struct kv_geom_check {
    int64_t numel;
    int64_t extent; /* elements the storage must hold past the offset; 0 when empty */
} kv_geom_check;

static bool kv_dtype_valid(kv_dtype dt) { return (int)dt >= 0 && (int)dt < (int)KV_DTYPE_COUNT; }

/* Checks ndim, sizes, strides (NULL: contiguous) and overflow for `op`. */
static kv_status kv_check_geometry(const char *op, const int64_t *sizes, const int64_t *strides,
                                   int ndim, kv_dtype dtype, kv_geom_check *out) {
    char shape[160];
    if (ndim < 0 || ndim > KV_MAX_DIMS) {
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: argument 'size': %d dimensions is out of range (expected 0 to %d)",
                        op, ndim, KV_MAX_DIMS);
    }
    if (ndim > 0 && sizes == NULL) {
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'size': NULL sizes for %d dimensions", op, ndim);
    }
    if (!kv_dtype_valid(dtype)) {
        return kv_error(KV_ERR_DTYPE, "%s: argument 'dtype': unknown dtype %d", op, (int)dtype);
    }
    for (int d = 0; d < ndim; d++) {
        if (sizes[d] < 0) {
            kv_shape_format(sizes, ndim, shape, (int)sizeof shape);
            return kv_error(KV_ERR_NEGATIVE_SIZE,
                            "%s: argument 'size': negative dimension %" PRId64 " at dim %d in %s",
                            op, sizes[d], d, shape);
        }
        if (strides && strides[d] < 0) {
            kv_shape_format(strides, ndim, shape, (int)sizeof shape);
            return kv_error(KV_ERR_INVALID_ARG,
                            "%s: argument 'stride': negative stride %" PRId64 " at dim %d in %s is not supported",
                            op, strides[d], d, shape);
        }
    }
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (__builtin_mul_overflow(numel, sizes[d], &numel)) {
            kv_shape_format(sizes, ndim, shape, (int)sizeof shape);
            return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'size': number of elements of %s overflows int64",
                            op, shape);
        }
    }
    int64_t extent = 0;
    if (numel > 0) {
        extent = 1;
        int64_t expected = 1; /* contiguous stride, when strides is NULL */
        for (int d = ndim - 1; d >= 0; d--) {
            const int64_t st = strides ? strides[d] : expected;
            int64_t span;
            if (__builtin_mul_overflow(sizes[d] - 1, st, &span) ||
                __builtin_add_overflow(extent, span, &extent)) {
                kv_shape_format(sizes, ndim, shape, (int)sizeof shape);
                return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'stride': storage extent of %s overflows int64",
                                op, shape);
            }
            expected *= sizes[d]; /* cannot overflow: bounded by numel */
        }
    }
    int64_t nbytes;
    if (__builtin_mul_overflow(extent, (int64_t)kv_dtype_size(dtype), &nbytes) || (uint64_t)nbytes > SIZE_MAX / 2) {
        kv_shape_format(sizes, ndim, shape, (int)sizeof shape);
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'size': %s of %s needs more bytes than fit in memory",
                        op, shape, kv_dtype_name(dtype));
    }
    out->numel = numel;
    out->extent = extent;
    return KV_OK;
}

/* Fills header t over `storage` (whose reference it takes over). */
static kv_tensor *kv_tensor_fill(kv_tensor *t, unsigned char origin, kv_storage *storage, const int64_t *sizes,
                                 const int64_t *strides, int ndim, int64_t offset, kv_dtype dtype, kv_device device,
                                 kv_keyset keys) {
    /* Dims past ndim read as 0, as before; an initializer zeroes them with
     * a few inline stores where memset was a library call on every new
     * tensor. autograd and batched are NULL: views and aliases are never
     * batched wrappers. */
    *t = (kv_tensor){ .storage = storage,
                      .ndim = ndim,
                      .offset = offset,
                      .dtype = dtype,
                      .device = device,
                      .keys = keys,
                      .origin = origin };
    atomic_init(&t->refcount, 1);
    for (int d = 0; d < ndim; d++) {
        t->sizes[d] = sizes[d];
        t->strides[d] = strides[d];
    }
    return t;
}

/* A tensor struct over `storage` (whose reference it takes over), its
 * header from this thread's block list. */
static kv_tensor *kv_tensor_wrap(const char *op, kv_storage *storage, const int64_t *sizes,
                                 const int64_t *strides, int ndim, int64_t offset, kv_dtype dtype,
                                 kv_device device, kv_keyset keys) {
    kv_tensor_block *b = kv_tblock_get();
    if (b == NULL) {
        kv_storage_release(storage);
        kv_error(KV_ERR_OOM, "%s: out of host memory for the tensor header", op);
        return NULL;
    }
    return kv_tensor_fill(&b->t, KV_TENSOR_FROM_BLOCK, storage, sizes, strides, ndim, offset, dtype, device, keys);
}

/* A new tensor with its storage: a small CPU tensor on the built-in
 * allocator is one block (header, storage, data) and touches no lock;
 * anything else (large, another device, an installed allocator such as
 * the runner's redzones, KV_CACHING_ALLOCATOR=0) gets its storage from
 * the device's allocator. */
static kv_tensor *kv_tensor_new(const char *op, size_t nbytes, const int64_t *sizes, const int64_t *strides,
                                int ndim, kv_dtype dtype, kv_device device) {
    const kv_keyset keys = kv_keyset_of(kv_device_key(device));
    if (nbytes <= KV_TENSOR_SMALL_BYTES && device.type == KV_DEVICE_CPU && device.index == 0 &&
        kv_cpu_cache_enabled()) {
        kv_allocator *a = kv_allocator_for(KV_DEVICE_CPU);
        if (kv_allocator_is_builtin_cpu(a)) {
            kv_tensor_block *b = kv_tblock_get();
            if (b == NULL) {
                kv_error(KV_ERR_OOM, "%s: out of host memory for a %zu-byte tensor", op, nbytes);
                return NULL;
            }
            kv_storage *s = &b->s;
            atomic_init(&s->refcount, 1);
            atomic_init(&s->version, 0);
            s->data = b->data;
            s->nbytes = nbytes;
            s->device = device;
            s->allocator = kv_tblock_allocator();
            s->grown_allocator = NULL;
            kv_allocator_count(KV_DEVICE_CPU, (int64_t)nbytes, true);
            return kv_tensor_fill(&b->t, KV_TENSOR_EMBEDDED, s, sizes, strides, ndim, 0, dtype, device, keys);
        }
    }
    kv_storage *s = kv_storage_new(nbytes, device);
    if (s == NULL) return NULL;
    return kv_tensor_wrap(op, s, sizes, strides, ndim, 0, dtype, device, keys);
}

kv_tensor *kv_tensor_empty_strided(const int64_t *sizes, const int64_t *strides, int ndim,
                                   kv_dtype dtype, kv_device device) {
    kv_geom_check g;
    if (kv_check_geometry("empty_strided", sizes, strides, ndim, dtype, &g) != KV_OK) return NULL;
    if (ndim > 0 && strides == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "empty_strided: argument 'stride': NULL strides for %d dimensions", ndim);
        return NULL;
    }
    return kv_tensor_new("empty_strided", (size_t)g.extent * kv_dtype_size(dtype), sizes, strides, ndim, dtype,
                         device);
}

/* kv_check_geometry and kv_contiguous_strides for a contiguous tensor in
 * one pass, for the common case only: false (nothing said) whenever the
 * full check might have something to say, which it then says. Every
 * output of an op goes through here, so on small tensors its passes over
 * the dims are a visible part of a call. */
static bool kv_contiguous_quick(const int64_t *sizes, int ndim, kv_dtype dtype, int64_t *strides, size_t *nbytes) {
    if (ndim < 0 || ndim > KV_MAX_DIMS || (ndim > 0 && sizes == NULL) || !kv_dtype_valid(dtype)) return false;
    int64_t numel = 1, stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        const int64_t n = sizes[d];
        strides[d] = stride;
        if (n < 0 || __builtin_mul_overflow(numel, n, &numel) || __builtin_mul_overflow(stride, n > 1 ? n : 1, &stride))
            return false;
    }
    int64_t nb;
    if (__builtin_mul_overflow(numel, (int64_t)kv_dtype_size(dtype), &nb) || (uint64_t)nb > SIZE_MAX / 2) return false;
    *nbytes = (size_t)nb;
    return true;
}

kv_tensor *kv_tensor_empty(const int64_t *sizes, int ndim, kv_dtype dtype, kv_device device) {
    int64_t quick_strides[KV_MAX_DIMS];
    size_t nbytes;
    if (kv_contiguous_quick(sizes, ndim, dtype, quick_strides, &nbytes))
        return kv_tensor_new("empty", nbytes, sizes, quick_strides, ndim, dtype, device);
    kv_geom_check g;
    if (kv_check_geometry("empty", sizes, NULL, ndim, dtype, &g) != KV_OK) return NULL;
    int64_t strides[KV_MAX_DIMS];
    kv_contiguous_strides(sizes, ndim, strides);
    return kv_tensor_new("empty", (size_t)g.extent * kv_dtype_size(dtype), sizes, strides, ndim, dtype, device);
}

kv_tensor *kv_tensor_from_data(const void *data, const int64_t *sizes, int ndim, kv_dtype dtype) {
    kv_geom_check g;
    if (kv_check_geometry("from_data", sizes, NULL, ndim, dtype, &g) != KV_OK) return NULL;
    if (data == NULL && g.numel > 0) {
        kv_error(KV_ERR_INVALID_ARG, "from_data: argument 'data': NULL for %" PRId64 " elements", g.numel);
        return NULL;
    }
    kv_tensor *t = kv_tensor_empty(sizes, ndim, dtype, KV_DEVICE_CPU0);
    if (t == NULL) return NULL;
    if (g.numel > 0) memcpy(t->storage->data, data, (size_t)g.numel * kv_dtype_size(dtype));
    return t;
}

kv_tensor *kv_tensor_view(const kv_tensor *base, const int64_t *sizes, const int64_t *strides,
                          int ndim, int64_t offset) {
    if (base == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "view: argument 'base': NULL tensor");
        return NULL;
    }
    kv_geom_check g;
    if (kv_check_geometry("view", sizes, strides, ndim, base->dtype, &g) != KV_OK) return NULL;
    if (offset < 0) {
        kv_error(KV_ERR_INVALID_ARG, "view: argument 'offset': negative storage offset %" PRId64, offset);
        return NULL;
    }
    const size_t itemsize = kv_dtype_size(base->dtype);
    const int64_t held = (int64_t)(base->storage->nbytes / itemsize);
    /* Like PyTorch's as_strided: a view with no elements reaches nothing,
     * so only non-empty views are bounds-checked. */
    if (g.numel > 0 && (offset > held || g.extent > held - offset)) {
        char shape[160], st[160];
        kv_shape_format(sizes, ndim, shape, (int)sizeof shape);
        int64_t cstrides[KV_MAX_DIMS];
        if (strides == NULL) kv_contiguous_strides(sizes, ndim, cstrides);
        kv_shape_format(strides ? strides : cstrides, ndim, st, (int)sizeof st);
        int64_t last;
        if (__builtin_add_overflow(offset, g.extent - 1, &last)) last = INT64_MAX;
        kv_error(KV_ERR_INVALID_ARG,
                 "view: argument 'size': size %s with stride %s and offset %" PRId64
                 " reaches element %" PRId64 " but the storage holds %" PRId64 " elements",
                 shape, st, offset, last, held);
        return NULL;
    }
    int64_t cstrides[KV_MAX_DIMS];
    if (strides == NULL) {
        kv_contiguous_strides(sizes, ndim, cstrides);
        strides = cstrides;
    }
    kv_storage_retain(base->storage);
    return kv_tensor_wrap("view", base->storage, sizes, strides, ndim, offset, base->dtype,
                          base->device, base->keys);
}

kv_tensor *kv_tensor_alias(const kv_tensor *t) {
    if (t == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "alias: argument 'self': NULL tensor");
        return NULL;
    }
    kv_storage_retain(t->storage);
    return kv_tensor_wrap("alias", t->storage, t->sizes, t->strides, t->ndim, t->offset, t->dtype,
                          t->device, t->keys);
}

void kv_tensor_retain(kv_tensor *t) {
    if (t) atomic_fetch_add_explicit(&t->refcount, 1, memory_order_relaxed);
}

void kv_tensor_release(kv_tensor *t) {
    if (t == NULL) return;
    /* Holding the only reference, nobody can take another: the last
     * release needs no locked instruction (most tensors die this way). */
    if (atomic_load_explicit(&t->refcount, memory_order_acquire) != 1 &&
        atomic_fetch_sub_explicit(&t->refcount, 1, memory_order_acq_rel) != 1)
        return;
    if (t->autograd != NULL && kv_tensor_autograd_free_hook != NULL) kv_tensor_autograd_free_hook(t->autograd);
    if (t->batched != NULL && kv_tensor_batched_free_hook != NULL) kv_tensor_batched_free_hook(t->batched);
    kv_storage *s = t->storage;
    switch (t->origin) {
    case KV_TENSOR_EMBEDDED: break; /* the storage owns the block: t dies with it */
    case KV_TENSOR_FROM_BLOCK: kv_tblock_put(kv_tblock_of_tensor(t)); break;
    default: free(t); break;
    }
    kv_storage_release(s); /* last: it may free the block t lived in */
}

/* ---- data ---- */

/* Per device type (kv_device_host_addressable: CUDA never, SIM not once
 * its plugin loads). The storage's device counts too, since an accel
 * tensor may live in its target's memory. */
static bool kv_host_addressable(const kv_tensor *t) {
    return kv_device_host_addressable(t->device.type) && kv_device_host_addressable(t->storage->device.type);
}

void *kv_tensor_data(const kv_tensor *t) {
    if (t == NULL || t->storage == NULL || !kv_host_addressable(t)) return NULL;
    return (char *)t->storage->data + (size_t)t->offset * kv_dtype_size(t->dtype);
}

void *kv_tensor_element(const kv_tensor *t, const int64_t *index) {
    char *p = kv_tensor_data(t);
    if (p == NULL) {
        kv_error(KV_ERR_DEVICE, "element: argument 'self': tensor memory is not host-addressable");
        return NULL;
    }
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (index[d] < 0 || index[d] >= t->sizes[d]) {
            kv_error(KV_ERR_INDEX,
                     "element: argument 'index': index %" PRId64 " is out of bounds for dimension %d with size %" PRId64,
                     index[d], d, t->sizes[d]);
            return NULL;
        }
        off += index[d] * t->strides[d];
    }
    return p + (size_t)off * kv_dtype_size(t->dtype);
}

double kv_tensor_get_f64(const kv_tensor *t, const int64_t *index) {
    const void *p = kv_tensor_element(t, index);
    if (p == NULL) return NAN;
    switch (t->dtype) {
    case KV_BOOL: { uint8_t v; memcpy(&v, p, 1); return v ? 1.0 : 0.0; }
    case KV_U8: { uint8_t v; memcpy(&v, p, sizeof v); return v; }
    case KV_I8: { int8_t v; memcpy(&v, p, sizeof v); return v; }
    case KV_I16: { int16_t v; memcpy(&v, p, sizeof v); return v; }
    case KV_I32: { int32_t v; memcpy(&v, p, sizeof v); return v; }
    case KV_I64: { int64_t v; memcpy(&v, p, sizeof v); return (double)v; }
    case KV_F16: { kv_f16 v; memcpy(&v, p, sizeof v); return kv_f16_to_f32(v); }
    case KV_BF16: { kv_bf16 v; memcpy(&v, p, sizeof v); return kv_bf16_to_f32(v); }
    case KV_F32: { float v; memcpy(&v, p, sizeof v); return v; }
    case KV_F64: { double v; memcpy(&v, p, sizeof v); return v; }
    case KV_C64: { float v[2]; memcpy(v, p, sizeof v); return v[0]; }
    case KV_C128: { double v[2]; memcpy(v, p, sizeof v); return v[0]; }
    case KV_DTYPE_COUNT: break;
    }
    return NAN;
}

/* Saturating double -> int64 (NaN -> 0), so narrowing below is a defined
 * two's-complement wrap instead of C's undefined out-of-range cast. */
static int64_t kv_f64_to_i64_total(double v) {
    if (isnan(v)) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

void kv_tensor_set_f64(kv_tensor *t, const int64_t *index, double v) {
    void *p = kv_tensor_element(t, index);
    if (p == NULL) return;
    const uint64_t w = (uint64_t)kv_f64_to_i64_total(v);
    switch (t->dtype) {
    case KV_BOOL: { uint8_t x = v != 0.0; memcpy(p, &x, 1); return; }
    case KV_U8: { uint8_t x = (uint8_t)w; memcpy(p, &x, sizeof x); return; }
    case KV_I8: { int8_t x = (int8_t)(uint8_t)w; memcpy(p, &x, sizeof x); return; }
    case KV_I16: { int16_t x = (int16_t)(uint16_t)w; memcpy(p, &x, sizeof x); return; }
    case KV_I32: { int32_t x = (int32_t)(uint32_t)w; memcpy(p, &x, sizeof x); return; }
    case KV_I64: { int64_t x = (int64_t)w; memcpy(p, &x, sizeof x); return; }
    case KV_F16: { kv_f16 x = kv_f64_to_f16(v); memcpy(p, &x, sizeof x); return; }
    case KV_BF16: { kv_bf16 x = kv_f64_to_bf16(v); memcpy(p, &x, sizeof x); return; }
    case KV_F32: { float x = (float)v; memcpy(p, &x, sizeof x); return; }
    case KV_F64: memcpy(p, &v, sizeof v); return;
    case KV_C64: { float x[2] = { (float)v, 0.0f }; memcpy(p, x, sizeof x); return; }
    case KV_C128: { double x[2] = { v, 0.0 }; memcpy(p, x, sizeof x); return; }
    case KV_DTYPE_COUNT: return;
    }
}

/* ---- versions ---- */

int64_t kv_tensor_version(const kv_tensor *t) { return (int64_t)atomic_load(&t->storage->version); }

void kv_tensor_bump_version(kv_tensor *t) { atomic_fetch_add(&t->storage->version, 1); }
