/* What every bug-zoo plugin shares (tests/plugins/zoo/, docs/diagnosis.md):
 * host memory, element loads and stores with a chosen rounding, and the
 * argument checks of a same-shape element-wise kernel. Written from
 * kv/backend.h alone, as an outside author would; each plugin adds one
 * bug on top and declines (KV_ERR_MISSING_KERNEL) every call it does not
 * take, so its only wrong rows are its bug's. */
#ifndef KV_TEST_ZOO_H
#define KV_TEST_ZOO_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"

static const kv_host_api *zoo_host;
static kv_device_type zoo_type;

/* ---- memory: zeroed and padded, so a kernel that reads past an input
 * (the stride bugs) reads the same zeros every call instead of the heap ---- */

#define ZOO_PAD 65536

/* Set by a plugin that wants the padding to differ between allocations
 * (the stale bytes a real allocator hands out), so reading past an input
 * changes from call to call. */
static bool zoo_pad_varies;

static inline void *zoo_alloc(void *ctx, size_t n) {
    (void)ctx;
    static unsigned char stale = 1;
    unsigned char *p = calloc(1, n + ZOO_PAD);
    /* Bytes 1..63: every f32, f16 and bf16 made of them is finite, so
     * what the reader gets differs but is never NaN or Inf. */
    if (p != NULL && zoo_pad_varies) memset(p + n, stale++ % 63 + 1, ZOO_PAD);
    return p;
}
static inline void zoo_free(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    free(p);
}
static inline kv_status zoo_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    memcpy(dst, src, n);
    return KV_OK;
}

/* ---- floating formats ---- */

typedef enum zoo_round {
    ZOO_NEAREST_EVEN,   /* IEEE's default: what every correct kernel does */
    ZOO_TOWARD_ZERO,    /* truncation */
    ZOO_HALF_AWAY       /* ties away from zero (C's round()) */
} zoo_round;

typedef struct zoo_fmt {
    int man, ebits;     /* stored mantissa and exponent bits */
} zoo_fmt;

static inline zoo_fmt zoo_fmt_of(kv_dtype dt) {
    switch (dt) {
    case KV_F16: return (zoo_fmt){ 10, 5 };
    case KV_BF16: return (zoo_fmt){ 7, 8 };
    case KV_F32: return (zoo_fmt){ 23, 8 };
    default: return (zoo_fmt){ 52, 11 };
    }
}

static inline double zoo_decode(zoo_fmt f, uint64_t b) {
    const int bias = (1 << (f.ebits - 1)) - 1;
    const uint64_t man = b & ((1ull << f.man) - 1u);
    const int e = (int)((b >> f.man) & ((1u << f.ebits) - 1u));
    const double sign = (b >> (f.man + f.ebits)) & 1u ? -1.0 : 1.0;
    if (e == (1 << f.ebits) - 1) return man ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp((double)man, 1 - bias - f.man);
    return sign * ldexp((double)(man | 1ull << f.man), e - bias - f.man);
}

/* x (exact in double) rounded into format f by `mode`; overflow goes to
 * Inf except toward zero, which stops at the largest finite value. */
static inline uint64_t zoo_encode(zoo_fmt f, double x, zoo_round mode) {
    const int bias = (1 << (f.ebits - 1)) - 1, emax_field = (1 << f.ebits) - 1;
    const uint64_t sign = signbit(x) ? 1ull << (f.man + f.ebits) : 0;
    if (isnan(x)) return (uint64_t)emax_field << f.man | 1ull << (f.man - 1);
    const double a = fabs(x);
    if (isinf(a)) return sign | (uint64_t)emax_field << f.man;
    if (a == 0.0) return sign;
    int e;
    frexp(a, &e);
    e -= 1; /* a in [2^e, 2^(e+1)) */
    if (e < 1 - bias) e = 1 - bias;
    const double q = ldexp(1.0, e - f.man);
    const double m = a / q, fl = floor(m), frac = m - fl;
    double r = fl;
    switch (mode) {
    case ZOO_NEAREST_EVEN: r = frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0.0) ? fl + 1 : fl; break;
    case ZOO_TOWARD_ZERO: r = fl; break;
    case ZOO_HALF_AWAY: r = frac >= 0.5 ? fl + 1 : fl; break;
    }
    uint64_t sig = (uint64_t)r;
    if (sig >> (f.man + 1)) { /* carried into the next binade */
        sig >>= 1;
        e++;
    }
    if (sig < 1ull << f.man) return sign | sig; /* subnormal (or zero) */
    const int field = e + bias;
    if (field >= emax_field)
        return mode == ZOO_TOWARD_ZERO ? sign | ((uint64_t)(emax_field - 1) << f.man | ((1ull << f.man) - 1u))
                                       : sign | (uint64_t)emax_field << f.man;
    return sign | (uint64_t)field << f.man | (sig & ((1ull << f.man) - 1u));
}

/* ---- elements ---- */

/* Storage offset (in elements) of row-major element k of t. */
static inline int64_t zoo_offset(const kv_tensor *t, int64_t k) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        const int64_t i = k % t->sizes[d];
        k /= t->sizes[d];
        off += i * t->strides[d];
    }
    return off;
}

static inline double zoo_load_at(kv_dtype dt, const void *base, int64_t pos) {
    const char *p = (const char *)base + pos * (int64_t)zoo_host->dtype_size(dt);
    switch (dt) {
    case KV_F16:
    case KV_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return zoo_decode(zoo_fmt_of(dt), h);
    }
    case KV_F32: {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static inline double zoo_load(const kv_tensor *t, int64_t k) {
    return zoo_load_at(t->dtype, t->storage->data, zoo_offset(t, k));
}

static inline void zoo_store(kv_tensor *out, int64_t k, double v, zoo_round mode) {
    char *p = (char *)out->storage->data + (out->offset + k) * (int64_t)zoo_host->dtype_size(out->dtype);
    switch (out->dtype) {
    case KV_F16:
    case KV_BF16: {
        const uint16_t h = (uint16_t)zoo_encode(zoo_fmt_of(out->dtype), v, mode);
        memcpy(p, &h, 2);
        return;
    }
    case KV_F32: {
        const uint32_t u = (uint32_t)zoo_encode(zoo_fmt_of(KV_F32), v, mode);
        memcpy(p, &u, 4);
        return;
    }
    default: memcpy(p, &v, 8); return;
    }
}

/* ---- arguments ---- */

/* A real floating dtype in `mask` (bit per kv_dtype value). */
#define ZOO_DT(d) (1u << (unsigned)(d))
#define ZOO_FLOATS (ZOO_DT(KV_F16) | ZOO_DT(KV_BF16) | ZOO_DT(KV_F32) | ZOO_DT(KV_F64))

static inline bool zoo_same_shape(const kv_tensor *a, const kv_tensor *b) {
    return a->ndim == b->ndim && memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) == 0;
}

/* Two inputs of one dtype in `mask` and one shape (no broadcasting), and,
 * where the op has an alpha (arg 2), alpha 1: what the zoo's binary
 * kernels take; the rest they decline. */
static inline kv_status zoo_binary_args(const char *op, const kv_stack *stack, unsigned mask, bool alpha) {
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (a == NULL || b == NULL || a->dtype != b->dtype || !(mask & ZOO_DT(a->dtype)) || !zoo_same_shape(a, b) ||
        a->ndim == 0)
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "%s: this zoo kernel takes two same-shape inputs of its dtypes",
                               op);
    if (alpha && zoo_host->scalar_to_double(kv_arg_scalar(stack, 2)) != 1.0)
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "%s: this zoo kernel takes alpha 1 only", op);
    return KV_OK;
}

static inline kv_tensor *zoo_empty_like(const kv_tensor *a, kv_dtype dt) {
    return zoo_host->tensor_empty(a->sizes, a->ndim, dt, (kv_device){ zoo_type, 0 });
}

/* a op b as a correct kernel computes it before the store: f32 in f32
 * (rounded to nearest even), f64 in f64; f16 and bf16 exactly in double
 * (their sums and products fit), so the store's rounding is the only one. */
static inline double zoo_add(kv_dtype dt, double x, double y) {
    return dt == KV_F32 ? (double)((float)x + (float)y) : x + y;
}
static inline double zoo_mul(kv_dtype dt, double x, double y) {
    return dt == KV_F32 ? (double)((float)x * (float)y) : x * y;
}

/* Element k of a fresh contiguous output from inputs a and b. */
typedef void (*zoo_elem_fn)(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n);

/* A same-shape binary kernel's frame: checks (zoo_binary_args), a fresh
 * output of a's shape and dtype, fn per element, the return. */
static inline kv_status zoo_map2(kv_stack *stack, const char *op, unsigned mask, bool alpha, zoo_elem_fn fn) {
    const kv_status st = zoo_binary_args(op, stack, mask, alpha);
    if (st != KV_OK) return st;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    kv_tensor *out = zoo_empty_like(a, a->dtype);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a);
    for (int64_t k = 0; k < n; k++) fn(a, b, out, k, n);
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* The entry every zoo plugin has: its name, host memory, `reg`. */
#define ZOO_PLUGIN(NAME, REG)                                                                                  \
    static kv_status zoo_reg(void *ctx, kv_device_type type) {                                                 \
        (void)ctx;                                                                                             \
        zoo_type = type;                                                                                       \
        return REG();                                                                                          \
    }                                                                                                          \
    KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {                           \
        desc->abi_version = KV_BACKEND_ABI_VERSION;                                                            \
        if (abi_version != KV_BACKEND_ABI_VERSION) return -1;                                                  \
        zoo_host = desc->host;                                                                                 \
        snprintf(desc->name, sizeof desc->name, "%s", NAME);                                                   \
        desc->device_type = KV_BACKEND_SLOT_ANY;                                                               \
        desc->available = 1;                                                                                   \
        desc->host_addressable = 1;                                                                            \
        desc->mem.alloc = zoo_alloc;                                                                           \
        desc->mem.free = zoo_free;                                                                             \
        desc->mem.copy_to_device = zoo_copy;                                                                   \
        desc->mem.copy_to_host = zoo_copy;                                                                     \
        desc->register_kernels = zoo_reg;                                                                      \
        return 0;                                                                                              \
    }

#endif
