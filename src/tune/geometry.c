/* The geometry of a call: what the tuner's cache is keyed by and what the
 * log prints (kv/tune.h).
 *
 * Hashed: the tensor arguments (Tensor, Tensor?, Tensor[]) by tag,
 * dtype, sizes, strides and lazy bits (not data pointers or offsets: the
 * same problem on other memory is the same geometry), and of the other
 * arguments only those some variant declared its predicate reads
 * (kv_tune_register_variant_args): a value nobody declared (an alpha, a
 * clamp bound) is the same problem, so calling add with alpha 1..100 tunes
 * once, not a hundred times. A cached choice is still checked against its
 * predicate on every call, so an undeclared value can cost a choice,
 * never a wrong kernel. The mix is a multiply-xorshift per word and one
 * more at the end, cheap enough to run on every call: a tensor costs one
 * word for its tag, dtype and rank (one more when it has lazy bits) and
 * one per dimension, and a slot visits only the arguments its plan hashes
 * (kv_tune_slot_geometry_hash). */
#include "tune/tune_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kv/tensor.h"

static inline uint64_t geo_mix(uint64_t h, uint64_t x) {
    h ^= x;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
}

/* A tensor in one word for its tag, dtype and rank, one for its lazy bits
 * (only when it has some), one per dimension for its size and its stride
 * (the stride rotated into the high half: distinct for sizes and strides
 * under 2^32, and a hash word, so never more than a collision, beyond). */
static inline uint64_t geo_tensor(uint64_t h, const kv_tensor *t) {
    if (t == NULL) return geo_mix(h, 0xA5);
    h = geo_mix(h, (uint64_t)t->dtype | (uint64_t)t->ndim << 8 | (uint64_t)(KV_IV_TENSOR + 1) << 16);
    const uint64_t lazy = t->keys & KV_KEYSET_LAZY;
    if (lazy) h = geo_mix(h, lazy);
    for (int d = 0; d < t->ndim; d++) {
        const uint64_t st = (uint64_t)t->strides[d];
        h = geo_mix(h, (uint64_t)t->sizes[d] ^ (st << 32 | st >> 32));
    }
    return h;
}

static uint64_t geo_bytes(uint64_t h, const char *p) {
    size_t n = strlen(p);
    h = geo_mix(h, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i < 8 ? n - i : 8);
        h = geo_mix(h, w);
    }
    return h;
}

/* One argument into the hash. */
static uint64_t geo_value(uint64_t h, const kv_ivalue *v) {
    if (v->tag == KV_IV_TENSOR) return geo_tensor(h, v->v.tensor);
    h = geo_mix(h, (uint64_t)v->tag + 1);
    uint64_t bits = 0;
    switch (v->tag) {
    case KV_IV_NONE: break;
    case KV_IV_TENSOR: break; /* above */
    case KV_IV_TENSOR_LIST:
        h = geo_mix(h, (uint64_t)v->v.tensors.n);
        for (int e = 0; e < v->v.tensors.n; e++) h = geo_tensor(h, v->v.tensors.items[e]);
        break;
    case KV_IV_SCALAR:
        h = geo_mix(h, (uint64_t)v->v.scalar.kind);
        memcpy(&bits, &v->v.scalar.v.c.re, sizeof bits);
        h = geo_mix(h, bits);
        if (v->v.scalar.kind == KV_SCALAR_COMPLEX) {
            memcpy(&bits, &v->v.scalar.v.c.im, sizeof bits);
            h = geo_mix(h, bits);
        }
        break;
    case KV_IV_INT: h = geo_mix(h, (uint64_t)v->v.i); break;
    case KV_IV_INT_LIST:
        h = geo_mix(h, (uint64_t)v->v.ints.n);
        for (int e = 0; e < v->v.ints.n; e++) h = geo_mix(h, (uint64_t)v->v.ints.items[e]);
        break;
    case KV_IV_DOUBLE:
        memcpy(&bits, &v->v.d, sizeof bits);
        h = geo_mix(h, bits);
        break;
    case KV_IV_BOOL: h = geo_mix(h, v->v.b ? 1u : 2u); break;
    case KV_IV_DTYPE: h = geo_mix(h, (uint64_t)v->v.dtype); break;
    case KV_IV_DEVICE: h = geo_mix(h, (uint64_t)v->v.device.type << 32 | (uint32_t)v->v.device.index); break;
    case KV_IV_STR: h = geo_bytes(h, v->v.str ? v->v.str : ""); break;
    case KV_IV_GENERATOR: break; /* its state changes every call and costs nothing */
    }
    return h;
}

/* One argument: a tensor inline (every call hashes a few), the rest by
 * geo_value. A tensor's tag is in its first word. */
static inline uint64_t geo_arg(uint64_t h, const kv_ivalue *v) {
    return v->tag == KV_IV_TENSOR ? geo_tensor(h, v->v.tensor) : geo_value(h, v);
}

#define GEO_SEED 0x6b76676f65ull

/* The last word: one more round with a second odd constant, so that the
 * low bits (the cache's index) depend on every word, without a full
 * finalizer's call on every dispatch. */
static inline uint64_t geo_final(uint64_t h) {
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 31);
}

static inline bool geo_tensor_tag(const kv_ivalue *v) {
    return v->tag == KV_IV_TENSOR || v->tag == KV_IV_TENSOR_LIST;
}

uint64_t kv_tune_geometry_hash(const kv_op *op, const kv_stack *stack) {
    return kv_tune_geometry_hash_mask(op, stack, kv_tune_op_geo_mask(op));
}

/* Any schema: arguments the schema types as tensors, past the schema's
 * arguments those tagged as tensors, and the non-tensor ones of `mask`. */
uint64_t kv_tune_geometry_hash_mask(const kv_op *op, const kv_stack *stack, uint32_t mask) {
    const kv_schema *sc = kv_op_schema(op);
    uint64_t h = GEO_SEED;
    for (int i = 0; i < stack->size; i++) {
        const kv_ivalue *v = &stack->slots[i];
        const bool tensor_arg = sc && i < sc->nargs ? sc->args[i].type.kind == KV_TYPE_TENSOR : geo_tensor_tag(v);
        if (tensor_arg || (i < 32 && (mask >> i & 1u))) h = geo_arg(h, v);
    }
    return geo_final(h);
}

void kv_tune_geometry_plan(const kv_op *op, uint32_t *tensor_args, int *nargs) {
    const kv_schema *sc = kv_op_schema(op);
    *tensor_args = 0;
    *nargs = sc ? sc->nargs : 0;
    if (*nargs > 32) {
        *nargs = -1;
        return;
    }
    for (int i = 0; i < *nargs; i++)
        if (sc->args[i].type.kind == KV_TYPE_TENSOR) *tensor_args |= 1u << i;
}

/* The same hash as kv_tune_geometry_hash_mask(s->op, stack, s->geo_mask),
 * without the schema walk: the slot's plan says which of the first nargs
 * arguments are hashed, so only those are visited, in order. Every cached
 * call runs this. */
uint64_t kv_tune_slot_geometry_hash(const tune_slot *s, const kv_stack *stack) {
    const uint32_t mask = atomic_load_explicit(&s->geo_mask, memory_order_relaxed);
    if (s->plan_nargs < 0) return kv_tune_geometry_hash_mask(s->op, stack, mask);
    const int n = stack->size, lim = n < s->plan_nargs ? n : s->plan_nargs;
    uint32_t pick = s->plan_tensors | mask;
    if (lim < 32) pick &= (1u << lim) - 1;
    uint64_t h = GEO_SEED;
    for (; pick != 0; pick &= pick - 1) h = geo_arg(h, &stack->slots[__builtin_ctz(pick)]);
    for (int i = lim; i < n; i++) /* past the schema: as kv_tune_geometry_hash_mask */
        if (geo_tensor_tag(&stack->slots[i]) || (i < 32 && (mask >> i & 1u))) h = geo_arg(h, &stack->slots[i]);
    return geo_final(h);
}

/* ---- text ---- */

typedef struct geo_buf {
    char *p;
    int cap, len;
} geo_buf;

static void geo_put(geo_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void geo_put(geo_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int room = b->len < b->cap ? b->cap - b->len : 0;
    const int n = vsnprintf(room > 0 ? b->p + b->len : NULL, (size_t)room, fmt, ap);
    va_end(ap);
    if (n > 0) b->len += n;
}

static void geo_put_ints(geo_buf *b, const int64_t *v, int n) {
    geo_put(b, "[");
    for (int d = 0; d < n; d++) geo_put(b, "%s%lld", d ? "," : "", (long long)v[d]);
    geo_put(b, "]");
}

static void geo_put_tensor(geo_buf *b, const kv_tensor *t) {
    if (t == NULL) {
        geo_put(b, "None");
        return;
    }
    geo_put(b, "%s", kv_dtype_name(t->dtype));
    geo_put_ints(b, t->sizes, t->ndim);
    geo_put(b, ":");
    geo_put_ints(b, t->strides, t->ndim);
    if (kv_keyset_has(t->keys, KV_KEY_CONJUGATE)) geo_put(b, "+conj");
    if (kv_keyset_has(t->keys, KV_KEY_NEGATIVE)) geo_put(b, "+neg");
    if (kv_keyset_has(t->keys, KV_KEY_ZERO_TENSOR)) geo_put(b, "+zero");
}

int kv_tune_geometry_format(const kv_op *op, const kv_stack *stack, char *buf, int cap) {
    geo_buf b = { buf, cap, 0 };
    if (cap > 0) buf[0] = '\0';
    const kv_schema *sc = kv_op_schema(op);
    geo_put(&b, "(");
    bool first = true;
    for (int i = 0; i < stack->size; i++) {
        const kv_ivalue *v = &stack->slots[i];
        const bool tensor_arg = sc && i < sc->nargs && sc->args[i].type.kind == KV_TYPE_TENSOR;
        if (!tensor_arg && v->tag != KV_IV_TENSOR && v->tag != KV_IV_TENSOR_LIST) continue;
        geo_put(&b, "%s", first ? "" : ", ");
        first = false;
        if (v->tag == KV_IV_TENSOR_LIST) {
            geo_put(&b, "[");
            for (int e = 0; e < v->v.tensors.n; e++) {
                geo_put(&b, "%s", e ? ", " : "");
                geo_put_tensor(&b, v->v.tensors.items[e]);
            }
            geo_put(&b, "]");
        } else {
            geo_put_tensor(&b, v->tag == KV_IV_TENSOR ? v->v.tensor : NULL);
        }
    }
    geo_put(&b, ")");
    return b.len;
}
