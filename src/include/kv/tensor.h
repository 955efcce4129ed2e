/* Storage and tensors (DESIGN.md section 2).
 *
 * A storage is a refcounted block of device memory with one version
 * counter that every view of it shares. A tensor is a refcounted view:
 * sizes, strides and offset in elements, dtype, device, key set, and an
 * optional autograd record owned by src/modes. 0-dim, zero-size, broadcast
 * (stride 0), transposed and sliced tensors are all ordinary tensors. */
#ifndef KV_TENSOR_H
#define KV_TENSOR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h> /* calloc: kv_tensor_internal_overlap is inline */

#include "kv/device.h"
#include "kv/dtype.h"
#include "kv/keys.h"
#include "kv/scalar.h"
#include "kv/status.h"

#define KV_MAX_DIMS 8

typedef struct kv_storage {
    atomic_int refcount;
    void *data;
    size_t nbytes;
    kv_device device;
    kv_allocator *allocator;   /* NULL for borrowed memory (never freed) */
    atomic_llong version;      /* bumped by every in-place write */
    /* NULL, except for a small tensor's storage (header, storage and data
     * in one block) that kv_storage_grow moved its data out of: the data
     * is then freed through this allocator, the block with the storage. */
    kv_allocator *grown_allocator;
} kv_storage;

struct kv_autograd_meta;       /* defined by src/modes; opaque here */
struct kv_batched_info;        /* vmap's (physical, bdim, level); src/modes/vmap_tensor.c */

typedef struct kv_tensor {
    atomic_int refcount;
    kv_storage *storage;
    int ndim;
    int64_t sizes[KV_MAX_DIMS];
    int64_t strides[KV_MAX_DIMS]; /* in elements; 0 for broadcast dims */
    int64_t offset;               /* storage offset, in elements */
    kv_dtype dtype;
    kv_device device;
    kv_keyset keys;               /* backend key | lazy bits | Autograd ... */
    struct kv_autograd_meta *autograd;
    /* Set only on vmap's batched wrappers (KV_KEY_BATCHED). Never copied
     * by kv_tensor_view / kv_tensor_alias; freed through
     * kv_tensor_batched_free_hook. */
    struct kv_batched_info *batched;
    /* Where the header's memory came from (src/core/tensor_cache.h); 0, a
     * calloc'd header's value, means malloc: kv_tensor_release frees it. */
    unsigned char origin;
} kv_tensor;

/* ---- storage ---- */
kv_storage *kv_storage_new(size_t nbytes, kv_device device); /* NULL + error on failure */
void kv_storage_retain(kv_storage *s);
void kv_storage_release(kv_storage *s);
/* Makes s hold at least nbytes, in place, as PyTorch's storage resize
 * does: every tensor over s sees the new memory, and the old bytes are
 * kept at its start (another view of s still reads its values). Borrowed
 * storage cannot grow (KV_ERR_INVALID_ARG). */
kv_status kv_storage_grow(kv_storage *s, size_t nbytes);
/* How kv_storage_grow copies bytes within memory the host cannot address
 * (a device's): set by the composition root to the backend layer's copy;
 * NULL makes growing such a storage an error. */
extern kv_status (*kv_storage_copy_hook)(const kv_storage *s, void *dst, const void *src, size_t nbytes);

/* ---- creation (new tensors hold one reference, owned by the caller) ---- */
/* Contiguous, uninitialized. Negative sizes, ndim > KV_MAX_DIMS or an
 * uninstalled device allocator are errors, not aborts. */
kv_tensor *kv_tensor_empty(const int64_t *sizes, int ndim, kv_dtype dtype, kv_device device);
/* Uninitialized with explicit strides; storage covers every reachable
 * element (strides may be 0 or out of row-major order, not negative). */
kv_tensor *kv_tensor_empty_strided(const int64_t *sizes, const int64_t *strides, int ndim,
                                   kv_dtype dtype, kv_device device);
/* A contiguous CPU tensor holding a copy of `data` (row-major, dtype's
 * in-memory layout). For tests and the runner. */
kv_tensor *kv_tensor_from_data(const void *data, const int64_t *sizes, int ndim, kv_dtype dtype);
/* A view of `base`'s storage: same dtype, device, keys and version counter.
 * Bounds are checked against the storage size. strides NULL means
 * contiguous. The view's autograd is NULL (metadata is never inherited). */
kv_tensor *kv_tensor_view(const kv_tensor *base, const int64_t *sizes, const int64_t *strides,
                          int ndim, int64_t offset);
/* A new tensor struct for the same storage and geometry ("shallow copy"):
 * what boxing uses to re-tag a tensor without touching the caller's.
 * Its autograd is NULL: a caller that shares t->autograd with the alias
 * must make kv_tensor_autograd_free_hook safe for that (refcounted meta). */
kv_tensor *kv_tensor_alias(const kv_tensor *t);

void kv_tensor_retain(kv_tensor *t);
void kv_tensor_release(kv_tensor *t); /* NULL is allowed */

/* Called (when set) as a tensor's last reference goes, so src/modes can
 * free the autograd record without core knowing its layout. */
extern void (*kv_tensor_autograd_free_hook)(struct kv_autograd_meta *meta);
/* The same for a batched wrapper's vmap record (set by src/modes/vmap). */
extern void (*kv_tensor_batched_free_hook)(struct kv_batched_info *info);

/* Gives t the shape `sizes` in place with row-major strides over its own
 * storage from its offset, growing the storage when too small (PyTorch's
 * resize_output on an out= argument): nothing happens when the shape is
 * already `sizes`. Errors name op and arg. */
kv_status kv_tensor_resize(kv_tensor *t, const int64_t *sizes, int ndim, const char *op, const char *arg);

/* ---- geometry ---- */
int64_t kv_tensor_numel(const kv_tensor *t);
bool kv_tensor_is_contiguous(const kv_tensor *t);
/* Writes row-major strides for sizes; returns numel (0 for zero-size). */
int64_t kv_contiguous_strides(const int64_t *sizes, int ndim, int64_t *strides_out);
/* Normalizes a possibly negative dim against ndim (PyTorch's wrap rule;
 * for 0-dim tensors dims -1 and 0 are valid). On error sets KV_ERR_DIM
 * with `op` and `arg` in the message and returns -1. */
int kv_wrap_dim(int64_t dim, int ndim, const char *op, const char *arg);
/* Broadcasts shapes a and b (numpy rules). KV_ERR_SHAPE on mismatch. */
kv_status kv_broadcast_shapes(const int64_t *a, int na, const int64_t *b, int nb,
                              int64_t *out, int *nout);
/* Strides that make `t` look like shape `sizes` (stride 0 on broadcast
 * dims). KV_ERR_SHAPE if t does not broadcast to it. */
kv_status kv_broadcast_strides(const kv_tensor *t, const int64_t *sizes, int ndim,
                               int64_t *strides_out);
bool kv_same_shape(const kv_tensor *a, const kv_tensor *b);
typedef enum kv_overlap { KV_OVERLAP_NO, KV_OVERLAP_YES, KV_OVERLAP_UNKNOWN } kv_overlap;
/* Whether t's strides, taken smallest first over its dims of size > 1,
 * each step past everything the smaller ones reach: then no two elements
 * share memory (contiguous, transposed, sliced views). Sufficient, not
 * necessary (kv_tensor_internal_overlap decides exactly). */
static inline bool kv_tensor_strides_nested(const kv_tensor *t) {
    bool used[KV_MAX_DIMS] = { false };
    int64_t span = 0;
    for (int k = 0; k < t->ndim; k++) {
        int best = -1;
        for (int d = 0; d < t->ndim; d++)
            if (!used[d] && t->sizes[d] > 1 && (best < 0 || t->strides[d] < t->strides[best])) best = d;
        if (best < 0) return true;
        used[best] = true;
        if (t->strides[best] <= span) return false;
        span += (t->sizes[best] - 1) * t->strides[best];
    }
    return true;
}
/* Whether two elements of t address one storage element (its writes
 * would race): a stride-0 dim of size > 1, or strides that make windows
 * overlap (an unfold or as_strided view with step < size). Exact: when
 * the strides are not nested (above), every element's offset is marked
 * in a bitmap of t's span, at most the storage t reaches. Sets *dim to
 * the first stride-0 dim of size > 1, else -1. KV_OVERLAP_UNKNOWN only
 * when that bitmap cannot be allocated (PyTorch's "too hard": callers let
 * the write go ahead). Inline, like the rule above, so that the plugins,
 * which do not link libkv, judge writes exactly as the reference does. */
static inline kv_overlap kv_tensor_internal_overlap(const kv_tensor *t, int *dim) {
    if (dim) *dim = -1;
    int64_t numel = 1, span = 0;
    for (int d = 0; d < t->ndim; d++) numel *= t->sizes[d];
    if (numel <= 1) return KV_OVERLAP_NO;
    for (int d = 0; d < t->ndim; d++) {
        if (t->sizes[d] > 1 && t->strides[d] == 0) {
            if (dim) *dim = d;
            return KV_OVERLAP_YES;
        }
        span += (t->sizes[d] - 1) * t->strides[d];
    }
    if (kv_tensor_strides_nested(t)) return KV_OVERLAP_NO;
    unsigned char *seen = (unsigned char *)calloc((size_t)(span / 8 + 1), 1);
    if (seen == NULL) return KV_OVERLAP_UNKNOWN;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    int64_t off = 0;
    kv_overlap result = KV_OVERLAP_NO;
    for (;;) {
        const unsigned char bit = (unsigned char)(1u << (off % 8));
        if (seen[off / 8] & bit) {
            result = KV_OVERLAP_YES;
            break;
        }
        seen[off / 8] |= bit;
        int d = t->ndim - 1;
        for (; d >= 0; d--) {
            off += t->strides[d];
            if (++idx[d] < t->sizes[d]) break;
            off -= t->sizes[d] * t->strides[d];
            idx[d] = 0;
        }
        if (d < 0) break;
    }
    free(seen);
    return result;
}
/* PyTorch's is_non_overlapping_and_dense: the dims of size >= 2, taken by
 * increasing stride, have strides 1, size, size*size', ... (a permutation
 * of a contiguous tensor, size-1 dims anywhere). One dim: size < 2 or
 * stride 1. */
static inline bool kv_tensor_non_overlapping_and_dense(const kv_tensor *t) {
    if (t->ndim == 1) return t->sizes[0] < 2 || t->strides[0] == 1;
    bool used[KV_MAX_DIMS] = { false };
    int64_t want = 1;
    for (int k = 0; k < t->ndim; k++) {
        int best = -1;
        for (int d = 0; d < t->ndim; d++)
            if (!used[d] && t->sizes[d] >= 2 && (best < 0 || t->strides[d] < t->strides[best])) best = d;
        if (best < 0) return true; /* only dims of size 0 or 1 left */
        used[best] = true;
        if (t->strides[best] != want) return false;
        want *= t->sizes[best];
    }
    return true;
}

/* MemoryFormat values (PyTorch's enum order) as a MemoryFormat argument
 * carries them. */
#define KV_MEMORY_FORMAT_CONTIGUOUS 0
#define KV_MEMORY_FORMAT_PRESERVE 1

/* The strides memory_format=preserve gives a new tensor shaped like t
 * (clone, _to_copy; PyTorch's empty_like): t's own strides when t is
 * non-overlapping and dense (a transposed or permuted t stays so), else
 * PyTorch's infer_dense_strides: the dims ordered by increasing stride
 * with an insertion sort that keeps the original order (last dim first)
 * where strides tie on size or either stride is 0, then dense strides in
 * that order (a dim of size 0 or 1 takes the running stride and does not
 * grow it). Inline, so the plugins give exactly the reference's strides. */
static inline void kv_tensor_preserve_strides(const kv_tensor *t, int64_t *strides) {
    const int n = t->ndim;
    if (kv_tensor_non_overlapping_and_dense(t)) {
        for (int d = 0; d < n; d++) strides[d] = t->strides[d];
        return;
    }
    if (n == 1) {
        strides[0] = 1;
        return;
    }
    int perm[KV_MAX_DIMS]; /* perm[0] is the fastest-moving dim */
    for (int i = 0; i < n; i++) perm[i] = n - 1 - i;
    for (int i = 1; i < n; i++) {
        int at = i;
        for (int j = i - 1; j >= 0; j--) {
            const int64_t s0 = t->strides[perm[j]], s1 = t->strides[perm[at]];
            int cmp = 0; /* > 0: perm[j] goes after perm[at] */
            if (s0 != 0 && s1 != 0) cmp = s0 < s1 ? -1 : s0 > s1 ? 1 : t->sizes[perm[j]] > t->sizes[perm[at]] ? 1 : 0;
            if (cmp > 0) {
                const int tmp = perm[j];
                perm[j] = perm[at];
                perm[at] = tmp;
                at = j;
            } else if (cmp < 0) {
                break;
            }
        }
    }
    int64_t run = 1;
    for (int i = 0; i < n; i++) {
        strides[perm[i]] = run;
        if (t->sizes[perm[i]] > 1) run *= t->sizes[perm[i]];
    }
}

/* KV_ERR_INVALID_ARG naming op, arg and why (PyTorch's "more than one
 * element of the written-to tensor refers to a single memory location")
 * when t, about to be written, overlaps itself; KV_OK otherwise. */
kv_status kv_tensor_check_no_internal_overlap(const char *op, const char *arg, const kv_tensor *t);
/* Writes "[2, 3]" ("[]" for 0-dim) into buf, snprintf style: returns the
 * length the full text needs. For error messages and reports. */
int kv_shape_format(const int64_t *sizes, int ndim, char *buf, int cap);

/* ---- data (host devices only) ---- */
/* Address of the element at `offset` (i.e. logical index 0). NULL for
 * devices whose memory the host cannot address. */
void *kv_tensor_data(const kv_tensor *t);
/* Address of the element at a multi-index. */
void *kv_tensor_element(const kv_tensor *t, const int64_t *index);
/* Element read/write through doubles, for tests (complex: real part). */
double kv_tensor_get_f64(const kv_tensor *t, const int64_t *index);
void kv_tensor_set_f64(kv_tensor *t, const int64_t *index, double v);

/* ---- versions ---- */
int64_t kv_tensor_version(const kv_tensor *t);
void kv_tensor_bump_version(kv_tensor *t);

/* ---- type promotion (PyTorch's result_type) ---- */
/* The promoted type of two dtypes (torch.promote_types). */
kv_dtype kv_promote_types(kv_dtype a, kv_dtype b);
/* torch.result_type over tensors and scalars: dimensioned tensors take
 * priority over 0-dim tensors, which take priority over scalars; a lower
 * group only matters when its category is higher than every category
 * above it (then it contributes its category's default: f32 for floats,
 * c64 for complex, or the 0-dim tensor's own dtype). `tensors` may hold
 * NULL entries (absent optional tensors), which are ignored. With no
 * operand at all it returns the default dtype, f32. */
kv_dtype kv_result_type(const kv_tensor *const *tensors, int ntensors,
                        const kv_scalar *scalars, int nscalars);
/* Whether a value of type `from` may be written into `to` by an in-place
 * op (torch.can_cast: no category demotion, e.g. float into int). */
bool kv_can_cast(kv_dtype from, kv_dtype to);

#endif
