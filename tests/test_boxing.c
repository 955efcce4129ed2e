/* The accel device: boxing, both gates, the kill switch, the special
 * paths, the counters and the environment (DESIGN.md section 5).
 *
 * Expected values are computed by hand; "equal to the CPU result" means
 * equal bit for bit to the same op run on the CPU tensors the accel ones
 * alias. Every test starts from the default state (exact gate, fast paths
 * on, counters zero). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/accel.h"
#include "kv/autograd.h"

#include "boxing/boxing_internal.h" /* the boxing steps, for one direct test */
#include "test_util.h"

static const kv_device kAccel = { KV_DEVICE_ACCEL, 0 };
static const kv_device kCpu = { KV_DEVICE_CPU, 0 };
#define KEYS_ACCEL (kv_keyset_of(KV_KEY_ACCEL) | kv_keyset_of(KV_KEY_ACCEL_BOXING))

/* ---- helpers ---- */

static void reset_state(void) {
    kv_accel_gate_set(KV_ACCEL_GATE_EXACT);
    kv_accel_redispatch_set_enabled(true);
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) kv_accel_special_set_enabled((kv_accel_special)i, true);
    kv_accel_counters_reset();
    kv_error_clear();
}

static int setup(void **state) {
    (void)state;
    reset_state();
    return 0;
}

static kv_tensor *cpu_f32(const float *v, const int64_t *sizes, int ndim) {
    kv_tensor *t = kv_tensor_from_data(v, sizes, ndim, KV_F32);
    assert_non_null(t);
    return t;
}

static kv_tensor *to_accel(const kv_tensor *cpu) {
    kv_tensor *a = kv_accel_to(cpu);
    if (a == NULL) fail_msg("kv_accel_to: %s", kv_last_error_message());
    return a;
}

static void check_ok(kv_status st) {
    if (st != KV_OK) fail_msg("unexpected error: %s", kv_last_error_message());
}

static kv_tensor *check_t(kv_tensor *t) {
    if (t == NULL) fail_msg("unexpected error: %s", kv_last_error_message());
    return t;
}

static void assert_accel(const kv_tensor *t) {
    assert_non_null(t);
    assert_int_equal(t->device.type, KV_DEVICE_ACCEL);
    assert_true(kv_keyset_has(t->keys, KV_KEY_ACCEL));
    assert_true(kv_keyset_has(t->keys, KV_KEY_ACCEL_BOXING));
    assert_false(kv_keyset_has(t->keys, KV_KEY_CPU));
}

/* Same dtype, shape and element bytes. */
static void assert_bitwise_equal(const kv_tensor *a, const kv_tensor *b) {
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++) assert_int_equal(a->sizes[d], b->sizes[d]);
    if (kv_tensor_numel(a) == 0) return;
    size_t isz = kv_dtype_size(a->dtype);
    int64_t idx[KV_MAX_DIMS] = { 0 };
    do {
        const void *pa = kv_tensor_element(a, idx), *pb = kv_tensor_element(b, idx);
        assert_non_null(pa);
        assert_non_null(pb);
        assert_memory_equal(pa, pb, isz);
    } while (kv_test_next_index(a, idx));
}

static void assert_values(const kv_tensor *t, const double *expect, int64_t n) {
    assert_int_equal(kv_tensor_numel(t), n);
    if (n == 0) return;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    int64_t i = 0;
    do {
        double got = kv_tensor_get_f64(t, idx);
        if (got != expect[i]) fail_msg("element %lld: got %.17g, expected %.17g", (long long)i, got, expect[i]);
        i++;
    } while (kv_test_next_index(t, idx));
}

static void assert_counts(const char *op, uint64_t fast, uint64_t slow, uint64_t manual) {
    kv_accel_counters c = kv_accel_counters_of(op);
    if (c.fast != fast || c.slow != slow || c.manual != manual)
        fail_msg("%s: counters fast=%llu slow=%llu manual=%llu, expected %llu/%llu/%llu", op,
                 (unsigned long long)c.fast, (unsigned long long)c.slow, (unsigned long long)c.manual,
                 (unsigned long long)fast, (unsigned long long)slow, (unsigned long long)manual);
}

/* What a caller can observe about its tensor, to prove boxing left it alone. */
typedef struct snapshot {
    const kv_tensor *t;
    kv_keyset keys;
    kv_device device;
    int ndim;
    int64_t sizes[KV_MAX_DIMS], strides[KV_MAX_DIMS], offset;
    kv_storage *storage;
    struct kv_autograd_meta *autograd;
    int refcount;
    unsigned char bytes[256];
    size_t nbytes;
} snapshot;

static snapshot take_snapshot(const kv_tensor *t) {
    snapshot s;
    memset(&s, 0, sizeof s);
    s.t = t;
    s.keys = t->keys;
    s.device = t->device;
    s.ndim = t->ndim;
    memcpy(s.sizes, t->sizes, sizeof s.sizes);
    memcpy(s.strides, t->strides, sizeof s.strides);
    s.offset = t->offset;
    s.storage = t->storage;
    s.autograd = t->autograd;
    s.refcount = atomic_load(&t->refcount);
    s.nbytes = t->storage->nbytes < sizeof s.bytes ? t->storage->nbytes : sizeof s.bytes;
    memcpy(s.bytes, t->storage->data, s.nbytes);
    return s;
}

static void assert_unchanged(const snapshot *s, bool values_too) {
    const kv_tensor *t = s->t;
    assert_int_equal(t->keys, s->keys);
    assert_true(kv_device_equal(t->device, s->device));
    assert_int_equal(t->ndim, s->ndim);
    assert_memory_equal(t->sizes, s->sizes, sizeof s->sizes);
    assert_memory_equal(t->strides, s->strides, sizeof s->strides);
    assert_int_equal(t->offset, s->offset);
    assert_ptr_equal(t->storage, s->storage);
    assert_ptr_equal(t->autograd, s->autograd);
    assert_int_equal(atomic_load(&t->refcount), s->refcount);
    if (values_too) assert_memory_equal(t->storage->data, s->bytes, s->nbytes);
}

static const float kA[6] = { 1, 2, 3, 4, 5, 6 };
static const float kB[6] = { 10, 20, 30, 40, 50, 60 };
static const int64_t k23[2] = { 2, 3 };

/* ---- functional, in-place, matmul ---- */

static void test_add_fast_bitwise(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2), *b = cpu_f32(kB, k23, 2);
    kv_tensor *A = to_accel(a), *B = to_accel(b);
    snapshot sa = take_snapshot(A), sb = take_snapshot(B);
    kv_tensor *r = check_t(kv_add(A, B, kv_scalar_int(2)));
    assert_accel(r);
    assert_int_equal(r->keys, KEYS_ACCEL);
    const double expect[6] = { 21, 42, 63, 84, 105, 126 };
    assert_values(r, expect, 6);
    kv_tensor *ref = check_t(kv_add(a, b, kv_scalar_int(2)));
    assert_bitwise_equal(r, ref);
    assert_counts("add.Tensor", 1, 0, 0);
    assert_unchanged(&sa, true);
    assert_unchanged(&sb, true);
    kv_tensor_release(ref);
    kv_tensor_release(r);
    kv_tensor_release(A);
    kv_tensor_release(B);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static void test_add_inplace(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2), *b = cpu_f32(kB, k23, 2);
    kv_tensor *A = to_accel(a), *B = to_accel(b);
    snapshot sa = take_snapshot(A);
    int64_t v0 = kv_tensor_version(A);
    check_ok(kv_add_(A, B, kv_scalar_int(1)));
    /* The tensor itself is untouched; its storage was written. */
    assert_unchanged(&sa, false);
    assert_true(kv_tensor_version(A) > v0);
    const double expect[6] = { 11, 22, 33, 44, 55, 66 };
    assert_values(A, expect, 6);
    assert_values(a, expect, 6); /* the same storage */
    assert_counts("add_.Tensor", 1, 0, 0);
    kv_tensor_release(A);
    kv_tensor_release(B);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static void test_mm(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    const float bt[6] = { 1, 0, 0, 1, 1, 1 }; /* [3, 2] */
    kv_tensor *b = cpu_f32(bt, (int64_t[]){ 3, 2 }, 2);
    kv_tensor *A = to_accel(a), *B = to_accel(b);
    kv_tensor *r = check_t(kv_mm(A, B));
    assert_accel(r);
    /* [[1,2,3],[4,5,6]] @ [[1,0],[0,1],[1,1]] */
    const double expect[4] = { 4, 5, 10, 11 };
    assert_values(r, expect, 4);
    kv_tensor *ref = check_t(kv_mm(a, b));
    assert_bitwise_equal(r, ref);
    assert_counts("mm", 1, 0, 0);
    kv_tensor_release(ref);
    kv_tensor_release(r);
    kv_tensor_release(A);
    kv_tensor_release(B);
    kv_tensor_release(a);
    kv_tensor_release(b);
}

/* ---- cat ---- */

static kv_tensor *empty_1d(kv_dtype dt) {
    int64_t zero = 0;
    kv_tensor *e = kv_tensor_empty(&zero, 1, dt, kCpu);
    assert_non_null(e);
    kv_tensor *E = to_accel(e);
    kv_tensor_release(e);
    return E;
}

static void test_cat_legacy_empty(void **state) {
    (void)state;
    const float x[4] = { 1, 2, 3, 4 }, y[2] = { 5, 6 };
    kv_tensor *xc = cpu_f32(x, (int64_t[]){ 2, 2 }, 2), *yc = cpu_f32(y, (int64_t[]){ 1, 2 }, 2);
    kv_tensor *X = to_accel(xc), *Y = to_accel(yc), *E = empty_1d(KV_F32);
    kv_tensor *items[3] = { X, E, Y };
    kv_tensor_list list = { items, 3 };
    const double expect[6] = { 1, 2, 3, 4, 5, 6 };

    kv_tensor *fast = check_t(kv_cat(list, 0));
    assert_accel(fast);
    assert_int_equal(fast->sizes[0], 3);
    assert_values(fast, expect, 6);
    assert_counts("cat", 1, 0, 0);
    assert_int_equal(kv_accel_cat_dropped(), 1);

    /* The slow path gets the whole list and computes the same bits. */
    kv_accel_redispatch_set_enabled(false);
    kv_tensor *slow = check_t(kv_cat(list, 0));
    kv_accel_redispatch_set_enabled(true);
    assert_counts("cat", 1, 1, 0);
    assert_int_equal(kv_accel_cat_dropped(), 1);
    assert_bitwise_equal(fast, slow);

    /* Special path off: nothing dropped, same bits. */
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_CAT, false);
    kv_tensor *plain = check_t(kv_cat(list, 0));
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_CAT, true);
    assert_int_equal(kv_accel_cat_dropped(), 1);
    assert_bitwise_equal(fast, plain);

    /* An empty f64 input takes part in promotion, so it stays. */
    kv_tensor *E64 = empty_1d(KV_F64);
    kv_tensor *items64[3] = { X, E64, Y };
    kv_tensor *promoted = check_t(kv_cat((kv_tensor_list){ items64, 3 }, 0));
    assert_int_equal(promoted->dtype, KV_F64);
    assert_values(promoted, expect, 6);
    assert_int_equal(kv_accel_cat_dropped(), 1);

    /* Only empties: the list is kept whole and the result is [0]. */
    kv_tensor *only[2] = { E, E };
    kv_tensor *none = check_t(kv_cat((kv_tensor_list){ only, 2 }, 0));
    assert_accel(none);
    assert_int_equal(none->ndim, 1);
    assert_int_equal(none->sizes[0], 0);
    assert_int_equal(kv_accel_cat_dropped(), 1);

    kv_tensor *all[] = { fast, slow, plain, promoted, none, E64, X, Y, E, xc, yc };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

/* ---- optional tensors ---- */

static void test_clamp_one_bound(void **state) {
    (void)state;
    const float s[4] = { -2.0f, -0.5f, 0.5f, 2.0f }, lo[4] = { -1, -1, 0, 0 }, hi[4] = { 1, 1, 1, 1 };
    int64_t n4 = 4;
    kv_tensor *sc = cpu_f32(s, &n4, 1), *lc = cpu_f32(lo, &n4, 1), *hc = cpu_f32(hi, &n4, 1);
    kv_tensor *S = to_accel(sc), *L = to_accel(lc), *H = to_accel(hc);
    check_ok(kv_clamp_(S, L, NULL));
    const double e1[4] = { -1.0, -0.5, 0.5, 2.0 };
    assert_values(S, e1, 4);
    assert_counts("clamp_.Tensor", 1, 0, 0);
    check_ok(kv_clamp_(S, NULL, H));
    const double e2[4] = { -1.0, -0.5, 0.5, 1.0 };
    assert_values(S, e2, 4);
    assert_counts("clamp_.Tensor", 2, 0, 0);
    assert_accel(S);
    kv_tensor *all[] = { S, L, H, sc, lc, hc };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

/* ---- factories ---- */

typedef struct op_log {
    int zeros;
    int neg;
    int any;
    bool saw_accel_device_arg;
} op_log;

static void log_op(void *ctx, const kv_op *op, kv_keyset ks, const kv_stack *args, const kv_stack *returns,
                   kv_status st) {
    (void)ks;
    (void)st;
    op_log *l = ctx;
    if (returns != NULL) return; /* count each op once, before it runs */
    l->any++;
    if (strcmp(kv_op_name(op), "zeros") == 0) {
        l->zeros++;
        if (args->slots[3].tag == KV_IV_DEVICE && args->slots[3].v.device.type == KV_DEVICE_ACCEL)
            l->saw_accel_device_arg = true;
    }
    if (strcmp(kv_op_name(op), "neg") == 0) l->neg++;
}

static void test_zeros_accel(void **state) {
    (void)state;
    kv_tensor *z = check_t(kv_zeros((kv_int_list){ k23, 2 }, NULL, NULL, &kAccel, NULL));
    assert_accel(z);
    const double expect[6] = { 0, 0, 0, 0, 0, 0 };
    assert_values(z, expect, 6);
    assert_counts("zeros", 1, 0, 0);

    /* Under Trace the factory is boxed first, so Trace sees it once, on
     * the target. */
    op_log log = { 0, 0, 0, false };
    check_ok(kv_trace_push(log_op, &log));
    kv_tensor *z2 = kv_zeros((kv_int_list){ k23, 2 }, NULL, NULL, &kAccel, NULL);
    check_ok(kv_trace_pop());
    check_t(z2);
    assert_accel(z2);
    assert_int_equal(log.zeros, 1);
    assert_false(log.saw_accel_device_arg);
    assert_counts("zeros", 1, 1, 0);
    kv_tensor_release(z);
    kv_tensor_release(z2);
}

/* ---- _to_copy ---- */

static void test_to_copy(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    snapshot sa = take_snapshot(A);
    const kv_dtype f64 = KV_F64;
    const double expect[6] = { 1, 2, 3, 4, 5, 6 };

    kv_tensor *d = check_t(kv__to_copy(A, &f64, NULL, NULL, NULL, false, NULL)); /* accel -> accel */
    assert_accel(d);
    assert_int_equal(d->dtype, KV_F64);
    assert_values(d, expect, 6);
    assert_ptr_not_equal(d->storage, A->storage);
    assert_counts("_to_copy", 1, 0, 0);

    kv_tensor *e = check_t(kv__to_copy(A, NULL, NULL, &kAccel, NULL, false, NULL)); /* device=accel */
    assert_accel(e);
    assert_values(e, expect, 6);
    assert_ptr_not_equal(e->storage, A->storage);

    kv_tensor *c = check_t(kv__to_copy(A, NULL, NULL, &kCpu, NULL, false, NULL)); /* accel -> target */
    assert_int_equal(c->device.type, KV_DEVICE_CPU);
    assert_int_equal(c->keys, kv_keyset_of(KV_KEY_CPU));
    assert_values(c, expect, 6);
    assert_ptr_not_equal(c->storage, A->storage);
    assert_counts("_to_copy", 3, 0, 0);

    /* The generic path (special off) and the slow path agree bit for bit. */
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_TO_COPY, false);
    kv_tensor *d2 = check_t(kv__to_copy(A, &f64, NULL, NULL, NULL, false, NULL));
    kv_tensor *c2 = check_t(kv__to_copy(A, NULL, NULL, &kCpu, NULL, false, NULL));
    assert_counts("_to_copy", 5, 0, 0);
    kv_accel_redispatch_set_enabled(false);
    kv_tensor *d3 = check_t(kv__to_copy(A, &f64, NULL, NULL, NULL, false, NULL));
    kv_tensor *c3 = check_t(kv__to_copy(A, NULL, NULL, &kCpu, NULL, false, NULL));
    assert_counts("_to_copy", 5, 2, 0);
    assert_accel(d2);
    assert_accel(d3);
    assert_int_equal(c2->device.type, KV_DEVICE_CPU);
    assert_int_equal(c3->device.type, KV_DEVICE_CPU);
    assert_bitwise_equal(d, d2);
    assert_bitwise_equal(d, d3);
    assert_bitwise_equal(c, c2);
    assert_bitwise_equal(c, c3);
    assert_unchanged(&sa, true);

    kv_tensor *all[] = { d, e, c, d2, c2, d3, c3, A, a };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

/* ---- native_group_norm ---- */

static void run_group_norm(kv_tensor *x, kv_tensor **out) {
    check_ok(kv_native_group_norm(x, NULL, NULL, 2, 4, 3, 2, 1e-5, &out[0], &out[1], &out[2]));
}

static void test_group_norm_noncontiguous(void **state) {
    (void)state;
    float v[24];
    for (int i = 0; i < 24; i++) v[i] = (float)((i * 7) % 11) - 3.0f;
    kv_tensor *base = cpu_f32(v, (int64_t[]){ 2, 3, 4 }, 3);
    const int64_t perm[3] = { 0, 2, 1 };
    kv_tensor *xc = check_t(kv_permute(base, (kv_int_list){ perm, 3 })); /* [2, 4, 3], not contiguous */
    kv_tensor *B = to_accel(base);
    kv_tensor *X = check_t(kv_permute(B, (kv_int_list){ perm, 3 }));
    assert_accel(X);
    assert_false(kv_tensor_is_contiguous(X));
    snapshot sx = take_snapshot(X);
    kv_accel_counters_reset();

    kv_tensor *ref[3], *got[3], *plain[3];
    run_group_norm(xc, ref);
    run_group_norm(X, got);
    assert_counts("native_group_norm", 1, 0, 0);
    assert_counts("contiguous", 1, 0, 0); /* made contiguous before boxing */
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_GROUP_NORM, false);
    run_group_norm(X, plain);
    assert_counts("contiguous", 1, 0, 0);
    assert_counts("native_group_norm", 2, 0, 0);
    for (int k = 0; k < 3; k++) {
        assert_accel(got[k]);
        assert_accel(plain[k]);
        assert_bitwise_equal(got[k], ref[k]);
        assert_bitwise_equal(plain[k], ref[k]);
    }
    assert_unchanged(&sx, true);
    for (int k = 0; k < 3; k++) {
        kv_tensor_release(ref[k]);
        kv_tensor_release(got[k]);
        kv_tensor_release(plain[k]);
    }
    kv_tensor *all[] = { X, B, xc, base };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

/* ---- metadata ops ---- */

typedef kv_tensor *(*view_fn)(kv_tensor *t);

static kv_tensor *v_transpose(kv_tensor *t) { return kv_transpose(t, 0, 1); }
static kv_tensor *v_view(kv_tensor *t) { return kv_view(t, (kv_int_list){ (int64_t[]){ 3, 2 }, 2 }); }
static kv_tensor *v_unsafe_view(kv_tensor *t) { return kv__unsafe_view(t, (kv_int_list){ (int64_t[]){ 6 }, 1 }); }
static kv_tensor *v_select(kv_tensor *t) { return kv_select(t, 0, 1); }
static kv_tensor *v_slice(kv_tensor *t) {
    int64_t start = 1, end = 3;
    return kv_slice(t, 1, &start, &end, 1);
}
static kv_tensor *v_unsqueeze(kv_tensor *t) { return kv_unsqueeze(t, 0); }
static kv_tensor *v_squeeze(kv_tensor *t) { return kv_squeeze(t); }
static kv_tensor *v_squeeze_dim(kv_tensor *t) { return kv_squeeze_dim(t, 0); }
static kv_tensor *v_permute(kv_tensor *t) { return kv_permute(t, (kv_int_list){ (int64_t[]){ 1, 0 }, 2 }); }
static kv_tensor *v_expand(kv_tensor *t) {
    return kv_expand(t, (kv_int_list){ (int64_t[]){ 2, 2, 3 }, 3 }, false);
}
static kv_tensor *v_as_strided(kv_tensor *t) {
    int64_t off = 1;
    return kv_as_strided(t, (kv_int_list){ (int64_t[]){ 2, 2 }, 2 }, (kv_int_list){ (int64_t[]){ 3, 1 }, 2 }, &off);
}
static kv_tensor *v_unfold(kv_tensor *t) { return kv_unfold(t, 1, 2, 1); }
static kv_tensor *v_detach(kv_tensor *t) { return kv_detach(t); }

static const struct {
    const char *op;
    view_fn fn;
} kViews[] = {
    { "transpose.int", v_transpose }, { "view", v_view },           { "_unsafe_view", v_unsafe_view },
    { "select.int", v_select },       { "slice.Tensor", v_slice },  { "unsqueeze", v_unsqueeze },
    { "squeeze", v_squeeze },         { "squeeze.dim", v_squeeze_dim }, { "permute", v_permute },
    { "expand", v_expand },           { "as_strided", v_as_strided }, { "unfold", v_unfold },
    { "detach", v_detach },
};

/* Runs every view on a [2, 3] accel tensor (squeeze on a [1, 2, 3] one)
 * and checks geometry, aliasing and values against the CPU view. */
static void check_views(kv_accel_path path) {
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *a1 = check_t(kv_tensor_view(a, (int64_t[]){ 1, 2, 3 }, NULL, 3, 0));
    kv_tensor *A = to_accel(a), *A1 = to_accel(a1);
    for (size_t i = 0; i < sizeof kViews / sizeof kViews[0]; i++) {
        bool squeezing = strncmp(kViews[i].op, "squeeze", 7) == 0;
        kv_tensor *src = squeezing ? A1 : A, *csrc = squeezing ? a1 : a;
        snapshot s = take_snapshot(src);
        kv_accel_counters_reset();
        kv_tensor *v = kViews[i].fn(src);
        if (v == NULL) fail_msg("%s: %s", kViews[i].op, kv_last_error_message());
        kv_tensor *cv = check_t(kViews[i].fn(csrc));
        assert_accel(v);
        assert_ptr_equal(v->storage, src->storage);
        assert_int_equal(v->offset, cv->offset);
        assert_int_equal(v->ndim, cv->ndim);
        for (int d = 0; d < v->ndim; d++) assert_int_equal(v->strides[d], cv->strides[d]);
        assert_bitwise_equal(v, cv);
        kv_accel_counters c = kv_accel_counters_of(kViews[i].op);
        uint64_t want[3] = { 0, 0, 0 };
        want[path] = 1;
        if (c.fast != want[0] || c.slow != want[1] || c.manual != want[2])
            fail_msg("%s: fast=%llu slow=%llu manual=%llu, expected path %s", kViews[i].op,
                     (unsigned long long)c.fast, (unsigned long long)c.slow, (unsigned long long)c.manual,
                     kv_accel_path_name(path));
        assert_unchanged(&s, true);
        kv_tensor_release(v);
        kv_tensor_release(cv);
    }
    kv_tensor_release(A);
    kv_tensor_release(A1);
    kv_tensor_release(a1);
    kv_tensor_release(a);
}

static void test_views_manual(void **state) {
    (void)state;
    check_views(KV_ACCEL_PATH_MANUAL);
}

static void test_views_boxed_when_switched_off(void **state) {
    (void)state;
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_METADATA, false);
    check_views(KV_ACCEL_PATH_FAST);
    kv_accel_redispatch_set_enabled(false);
    check_views(KV_ACCEL_PATH_SLOW);
    kv_accel_special_set_enabled(KV_ACCEL_SPECIAL_METADATA, true);
    check_views(KV_ACCEL_PATH_SLOW); /* the kill switch stops the manual path too */
}

/* ---- what makes the slow path run ---- */

static void test_lazy_bit_is_slow(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2), *b = cpu_f32(kB, k23, 2);
    kv_tensor *A = to_accel(a), *B = to_accel(b);
    for (int g = 0; g < 2; g++) {
        kv_accel_gate_set(g == 0 ? KV_ACCEL_GATE_EXACT : KV_ACCEL_GATE_SEED);
        kv_accel_counters_reset();
        kv_tensor *N = check_t(kv__neg_view(A));
        assert_accel(N);
        assert_true(kv_keyset_has(N->keys, KV_KEY_NEGATIVE));
        assert_ptr_equal(N->storage, A->storage);
        assert_counts("_neg_view", 1, 0, 0);
        kv_tensor *r = check_t(kv_add(N, B, kv_scalar_int(1)));
        assert_accel(r);
        assert_false(kv_keyset_has(r->keys, KV_KEY_NEGATIVE));
        const double expect[6] = { 9, 18, 27, 36, 45, 54 };
        assert_values(r, expect, 6);
        assert_counts("add.Tensor", 0, 1, 0);
        /* Views fall through the lazy keys: the exact gate lets the manual
         * path run, the seed gate (which sees the bit) does not. */
        kv_tensor *t = check_t(kv_transpose(N, 0, 1));
        assert_true(kv_keyset_has(t->keys, KV_KEY_NEGATIVE));
        assert_ptr_equal(t->storage, A->storage);
        if (g == 0) assert_counts("transpose.int", 0, 0, 1);
        else assert_counts("transpose.int", 0, 1, 0);
        kv_tensor_release(t);
        kv_tensor_release(r);
        kv_tensor_release(N);
    }
    kv_tensor *all[] = { A, B, a, b };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

static void test_trace_is_slow(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    for (int g = 0; g < 2; g++) {
        kv_accel_gate_set(g == 0 ? KV_ACCEL_GATE_EXACT : KV_ACCEL_GATE_SEED);
        kv_accel_counters_reset();
        op_log log = { 0, 0, 0, false };
        check_ok(kv_trace_push(log_op, &log));
        kv_tensor *r = kv_neg(A);
        check_ok(kv_trace_pop());
        check_t(r);
        assert_accel(r);
        assert_int_equal(log.neg, 1);
        assert_counts("neg", 0, 1, 0);
        kv_tensor *r2 = check_t(kv_neg(A));
        assert_counts("neg", 1, 1, 0);
        assert_bitwise_equal(r, r2);
        kv_tensor_release(r);
        kv_tensor_release(r2);
    }
    kv_tensor_release(A);
    kv_tensor_release(a);
}

static void test_requires_grad_is_slow(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2), *b = cpu_f32(kB, k23, 2);
    for (int g = 0; g < 2; g++) {
        kv_accel_gate_set(g == 0 ? KV_ACCEL_GATE_EXACT : KV_ACCEL_GATE_SEED);
        kv_accel_counters_reset();
        kv_tensor *A = to_accel(a), *B = to_accel(b);
        check_ok(kv_tensor_set_requires_grad(A, true));
        snapshot sa = take_snapshot(A);
        kv_tensor *r = check_t(kv_mul(A, A));
        assert_accel(r);
        assert_true(kv_tensor_requires_grad(r));
        assert_string_equal(kv_tensor_grad_fn_name(r), "MulBackward0");
        assert_counts("mul.Tensor", 0, 1, 0);
        assert_unchanged(&sa, true);
        /* No grad mode: nothing records, the fast path is exact. */
        kv_tls_keys saved = kv_no_grad_push();
        kv_tensor *r2 = check_t(kv_mul(A, A));
        kv_grad_mode_pop(saved);
        assert_counts("mul.Tensor", 1, 1, 0);
        assert_false(kv_tensor_requires_grad(r2));
        assert_bitwise_equal(r, r2);
        /* Backward through the accel graph: d/dA sum(A * A) = 2 A, an accel .grad. */
        kv_tensor *s = check_t(kv_sum(r, NULL, false, NULL));
        check_ok(kv_backward(s, NULL));
        kv_tensor *grad = kv_tensor_grad(A);
        assert_non_null(grad);
        assert_accel(grad);
        const double expect[6] = { 2, 4, 6, 8, 10, 12 };
        assert_values(grad, expect, 6);
        /* A view of a tensor that requires grad is recorded: the slow
         * path, not the manual one, and still an accel view of A. */
        kv_tensor_clear_grad(A);
        kv_tensor *v = check_t(kv_transpose(A, 0, 1));
        assert_accel(v);
        assert_ptr_equal(v->storage, A->storage);
        assert_string_equal(kv_tensor_grad_fn_name(v), "TransposeBackward0");
        assert_counts("transpose.int", 0, 1, 0);
        kv_tensor *vs = check_t(kv_sum(v, NULL, false, NULL));
        check_ok(kv_backward(vs, NULL));
        grad = kv_tensor_grad(A);
        assert_non_null(grad);
        assert_accel(grad);
        const double ones[6] = { 1, 1, 1, 1, 1, 1 };
        assert_values(grad, ones, 6);
        kv_tensor_release(vs);
        kv_tensor_release(v);
        kv_tensor_release(s);
        kv_tensor_release(r);
        kv_tensor_release(r2);
        kv_tensor_release(A);
        kv_tensor_release(B);
    }
    kv_tensor_release(a);
    kv_tensor_release(b);
}

static void test_inplace_takes_history(void **state) {
    (void)state;
    /* add_ with an input that requires grad gives self a history: the
     * caller's tensor is that self, so it carries it. */
    kv_tensor *a = cpu_f32(kA, k23, 2), *b = cpu_f32(kB, k23, 2);
    kv_tensor *A = to_accel(a), *B = to_accel(b);
    check_ok(kv_tensor_set_requires_grad(B, true));
    check_ok(kv_add_(A, B, kv_scalar_int(1)));
    assert_true(kv_tensor_requires_grad(A));
    assert_true(kv_keyset_has(A->keys, KV_KEY_AUTOGRAD));
    assert_non_null(kv_tensor_grad_fn_name(A));
    assert_counts("add_.Tensor", 0, 1, 0);
    kv_tensor *s = check_t(kv_sum(A, NULL, false, NULL));
    check_ok(kv_backward(s, NULL));
    kv_tensor *grad = kv_tensor_grad(B);
    assert_non_null(grad);
    assert_accel(grad);
    const double ones[6] = { 1, 1, 1, 1, 1, 1 };
    assert_values(grad, ones, 6);
    kv_tensor *all[] = { s, A, B, a, b };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

static void test_view_inplace_history(void **state) {
    (void)state;
    /* In-place on an accel view rebases the base (CopySlices); a view of a
     * base written in place regenerates its node. Both backward to an
     * accel .grad with PyTorch's values. */
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *X = to_accel(a);
    check_ok(kv_tensor_set_requires_grad(X, true));
    float two = 2.0f, three = 3.0f;
    kv_tensor *s2 = kv_tensor_from_data(&two, NULL, 0, KV_F32), *s3 = kv_tensor_from_data(&three, NULL, 0, KV_F32);
    kv_tensor *y = check_t(kv_mul(X, s2));
    kv_tensor *v = check_t(kv_select(y, 0, 0));
    check_ok(kv_mul_(v, s3));
    assert_string_equal(kv_tensor_grad_fn_name(y), "CopySlices");
    kv_tensor *s = check_t(kv_sum(y, NULL, false, NULL));
    check_ok(kv_backward(s, NULL));
    const double g1[6] = { 6, 6, 6, 2, 2, 2 };
    assert_accel(kv_tensor_grad(X));
    assert_values(kv_tensor_grad(X), g1, 6);

    kv_tensor_clear_grad(X);
    kv_tensor *y2 = check_t(kv_mul(X, s2));
    kv_tensor *v2 = check_t(kv_select(y2, 0, 1));
    check_ok(kv_mul_(y2, s3));
    kv_tensor *s4 = check_t(kv_sum(v2, NULL, false, NULL));
    check_ok(kv_backward(s4, NULL));
    assert_string_equal(kv_tensor_grad_fn_name(v2), "AsStridedBackward0");
    const double g2[6] = { 0, 0, 0, 6, 6, 6 };
    assert_accel(kv_tensor_grad(X));
    assert_values(kv_tensor_grad(X), g2, 6);
    kv_tensor *all[] = { s4, v2, y2, s, v, y, s2, s3, X, a };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

static void test_autocast_gates_differ(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    kv_tensor *At = check_t(kv_transpose(A, 0, 1));
    kv_tensor *results[2][2];
    for (int g = 0; g < 2; g++) {
        kv_accel_gate_set(g == 0 ? KV_ACCEL_GATE_EXACT : KV_ACCEL_GATE_SEED);
        kv_accel_counters_reset();
        check_ok(kv_autocast_enter(KV_F16));
        results[g][0] = kv_neg(A);     /* not on an autocast list */
        results[g][1] = kv_mm(A, At); /* lower precision */
        check_ok(kv_autocast_exit());
        check_t(results[g][0]);
        check_t(results[g][1]);
        assert_accel(results[g][0]);
        assert_accel(results[g][1]);
        assert_int_equal(results[g][0]->dtype, KV_F32);
        assert_int_equal(results[g][1]->dtype, KV_F16);
        /* The exact gate sees that Autocast falls through for neg. */
        if (g == 0) assert_counts("neg", 1, 0, 0);
        else assert_counts("neg", 0, 1, 0);
        assert_counts("mm", 0, 1, 0);
    }
    assert_bitwise_equal(results[0][0], results[1][0]);
    assert_bitwise_equal(results[0][1], results[1][1]);
    for (int g = 0; g < 2; g++) {
        kv_tensor_release(results[g][0]);
        kv_tensor_release(results[g][1]);
    }
    kv_tensor_release(At);
    kv_tensor_release(A);
    kv_tensor_release(a);
}

static void test_functionalize_is_slow(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2), *b = cpu_f32(kB, k23, 2);
    kv_tensor *A = to_accel(a), *B = to_accel(b);
    check_ok(kv_functionalize_enter());
    kv_status st = kv_add_(A, B, kv_scalar_int(1));
    check_ok(kv_functionalize_exit());
    check_ok(st);
    const double expect[6] = { 11, 22, 33, 44, 55, 66 };
    assert_values(A, expect, 6);
    assert_counts("add_.Tensor", 0, 1, 0);
    char graph[256];
    kv_functionalize_graph_format(graph, sizeof graph);
    assert_non_null(strstr(graph, "add.Tensor"));
    assert_non_null(strstr(graph, "copy_"));
    kv_tensor *all[] = { A, B, a, b };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

static void test_vmap_goes_below(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, (int64_t[]){ 3, 2 }, 2);
    kv_tensor *A = to_accel(a);
    const kv_op *neg = kv_op_find("neg");
    assert_non_null(neg);
    kv_ivalue slots[2];
    kv_stack st = kv_stack_on(slots, 2);
    check_ok(kv_push_tensor(&st, A));
    check_ok(kv_vmap_call(neg, &st, NULL, -1, 0, &st));
    assert_int_equal(st.size, 1);
    kv_tensor *r = st.slots[0].v.tensor;
    assert_accel(r);
    const double expect[6] = { -1, -2, -3, -4, -5, -6 };
    assert_values(r, expect, 6);
    kv_accel_counters c = kv_accel_counters_of("neg");
    assert_true(c.slow >= 1); /* the batched call went below the boxing layer */
    kv_tensor_release(r);
    kv_tensor_release(A);
    kv_tensor_release(a);
}

/* ---- the exact gate and a key the seed gate does not know ---- */

static atomic_int g_inplace_or_view_calls;

static kv_status counting_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    atomic_fetch_add(&g_inplace_or_view_calls, 1);
    return kv_redispatch(op, ks & kv_keyset_below(KV_KEY_AD_INPLACE_OR_VIEW), stack);
}

static void test_exact_gate_sees_any_key(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    check_ok(kv_register_kernel("neg", KV_KEY_AD_INPLACE_OR_VIEW, counting_kernel));
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_AD_INPLACE_OR_VIEW));
    atomic_store(&g_inplace_or_view_calls, 0);
    kv_tensor *r1 = kv_neg(A);
    int exact_calls = atomic_load(&g_inplace_or_view_calls);
    kv_accel_gate_set(KV_ACCEL_GATE_SEED);
    kv_tensor *r2 = kv_neg(A);
    int seed_calls = atomic_load(&g_inplace_or_view_calls) - exact_calls;
    kv_tls_pop(saved);
    check_ok(kv_register_kernel("neg", KV_KEY_AD_INPLACE_OR_VIEW, NULL));
    check_t(r1);
    check_t(r2);
    assert_int_equal(exact_calls, 1); /* exact: slow path, the kernel ran */
    assert_int_equal(seed_calls, 0);  /* seed: its list misses the key, fast path */
    assert_counts("neg", 1, 1, 0);
    kv_tensor_release(r1);
    kv_tensor_release(r2);
    kv_tensor_release(A);
    kv_tensor_release(a);
}

/* ---- the lean path's memo (boxing/lean.h) ---- */

/* Each step: a call that leaves this thread's memo for neg filled, one
 * change, and the next call must act on the change. Each change is seen
 * only through its own rule (the epoch a registration, the observer or a
 * switch advances; the TLS keys compared), so dropping any one of them
 * fails its step. */
static atomic_int g_target_calls, g_observed;
static kv_kernel_fn g_target_fn;

static kv_status wrapping_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    atomic_fetch_add(&g_target_calls, 1);
    return g_target_fn(op, ks, stack);
}

static void observe(const kv_op *op, kv_key key, bool enter) {
    if (enter && key == kv_accel_target() && strcmp(kv_op_name(op), "neg") == 0) atomic_fetch_add(&g_observed, 1);
}

/* kv_neg(A), which must have taken the given path (counted from zero). */
static void neg_takes(kv_tensor *A, kv_accel_path path) {
    kv_accel_counters_reset();
    kv_tensor_release(check_t(kv_neg(A)));
    assert_counts("neg", path == KV_ACCEL_PATH_FAST, path == KV_ACCEL_PATH_SLOW, 0);
}

static void test_lean_memo_sees_changes(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    const kv_key target = kv_accel_target();
    neg_takes(A, KV_ACCEL_PATH_FAST);

    /* an argument with other keys: a lazy bit the target must not see */
    kv_tensor *N = check_t(kv__neg_view(A));
    neg_takes(N, KV_ACCEL_PATH_SLOW);
    kv_tensor_release(N);
    neg_takes(A, KV_ACCEL_PATH_FAST);

    /* the kill switch, both ways */
    kv_accel_redispatch_set_enabled(false);
    neg_takes(A, KV_ACCEL_PATH_SLOW);
    kv_accel_redispatch_set_enabled(true);
    neg_takes(A, KV_ACCEL_PATH_FAST);

    /* a mode entered and left (the thread's TLS keys) */
    op_log log = { 0, 0, 0, false };
    check_ok(kv_trace_push(log_op, &log));
    neg_takes(A, KV_ACCEL_PATH_SLOW);
    check_ok(kv_trace_pop());
    assert_int_equal(log.neg, 1);
    neg_takes(A, KV_ACCEL_PATH_FAST);
    /* the target's key excluded: no kernel is left for the slow path */
    kv_tls_keys no_target = kv_tls_exclude_push(kv_keyset_of(target));
    assert_null(kv_neg(A));
    assert_int_equal(kv_last_error(), KV_ERR_MISSING_KERNEL);
    kv_tls_pop(no_target);
    neg_takes(A, KV_ACCEL_PATH_FAST);

    /* a kernel registered at the target, and the old one back */
    g_target_fn = kv_op_entry_fn(kv_op_find("neg"), target);
    assert_non_null(g_target_fn);
    atomic_store(&g_target_calls, 0);
    check_ok(kv_register_kernel("neg", target, wrapping_kernel));
    neg_takes(A, KV_ACCEL_PATH_FAST);
    assert_int_equal(atomic_load(&g_target_calls), 1);
    check_ok(kv_register_kernel("neg", target, g_target_fn));
    neg_takes(A, KV_ACCEL_PATH_FAST);
    assert_int_equal(atomic_load(&g_target_calls), 1);

    /* the kernel observer, installed and removed */
    atomic_store(&g_observed, 0);
    kv_dispatch_set_kernel_observer(observe);
    neg_takes(A, KV_ACCEL_PATH_FAST);
    kv_dispatch_set_kernel_observer(NULL);
    assert_int_equal(atomic_load(&g_observed), 1);
    neg_takes(A, KV_ACCEL_PATH_FAST);
    assert_int_equal(atomic_load(&g_observed), 1);

    /* The gate and the tests' forced path, with a key only the exact gate
     * sees (test_exact_gate_sees_any_key). A memo that declines only
     * costs time (the full box path's gate decides again); one that says
     * "fast" where the rule now says "slow" is wrong, so each switch is
     * turned after a decision made under its "fast" setting. */
    check_ok(kv_register_kernel("neg", KV_KEY_AD_INPLACE_OR_VIEW, counting_kernel));
    kv_tls_keys saved = kv_tls_include_push(kv_keyset_of(KV_KEY_AD_INPLACE_OR_VIEW));
    kv_accel_gate_set(KV_ACCEL_GATE_SEED);
    neg_takes(A, KV_ACCEL_PATH_FAST);
    kv_accel_gate_set(KV_ACCEL_GATE_EXACT);
    neg_takes(A, KV_ACCEL_PATH_SLOW);
    kv_accel_gate_force_for_tests(true);
    /* a key neg does not carry: only the TLS value changes, so the next
     * call decides afresh while forced */
    kv_tls_keys other = kv_tls_exclude_push(kv_keyset_of(KV_KEY_VMAP_MODE));
    neg_takes(A, KV_ACCEL_PATH_FAST);
    kv_accel_gate_force_for_tests(false);
    neg_takes(A, KV_ACCEL_PATH_SLOW);
    kv_tls_pop(other);
    kv_tls_pop(saved);
    check_ok(kv_register_kernel("neg", KV_KEY_AD_INPLACE_OR_VIEW, NULL));
    neg_takes(A, KV_ACCEL_PATH_FAST);
    kv_tensor_release(A);
    kv_tensor_release(a);
}

/* ---- errors ---- */

static void test_errors_match_slow_path(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    int64_t n4 = 4;
    kv_tensor *c = cpu_f32(kB, &n4, 1);
    kv_tensor *A = to_accel(a), *C = to_accel(c);
    assert_null(kv_add(A, C, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    char fast_msg[512];
    snprintf(fast_msg, sizeof fast_msg, "%s", kv_last_error_message());
    kv_accel_redispatch_set_enabled(false);
    assert_null(kv_add(A, C, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_SHAPE);
    assert_string_equal(kv_last_error_message(), fast_msg);
    kv_accel_redispatch_set_enabled(true);
    /* accel next to a (non 0-dim) CPU tensor: the dispatcher's device error */
    assert_null(kv_add(A, a, kv_scalar_int(1)));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    /* a 0-dim CPU tensor rides along */
    float two = 2.0f;
    kv_tensor *s = kv_tensor_from_data(&two, NULL, 0, KV_F32);
    kv_tensor *r = check_t(kv_mul(A, s));
    assert_accel(r);
    const double expect[6] = { 2, 4, 6, 8, 10, 12 };
    assert_values(r, expect, 6);
    kv_tensor *all[] = { r, s, A, C, a, c };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

/* ---- switches, environment, target ---- */

static void clear_env(void) {
    unsetenv("KV_NO_REDISPATCH");
    unsetenv("KV_REDISPATCH_GATE");
    unsetenv("KV_ACCEL_DISABLE");
    unsetenv("KV_ACCEL_TARGET");
}

static void test_kill_switch_values(void **state) {
    (void)state;
    static const struct {
        const char *value; /* NULL: unset */
        bool enabled;
    } cases[] = { { NULL, true },    { "0", true },      { "1", false },  { "yes", false },
                  { "00", false },   /* README: any other non-empty value disables, the words that */
                  { "false", false }, /* read as "off" included: a parser that took them as "keep the */
                  { "off", false },   /* fast paths" would silently leave them on */
                  { "no", false } };
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clear_env();
        if (cases[i].value) setenv("KV_NO_REDISPATCH", cases[i].value, 1);
        check_ok(kv_accel_env_reload());
        if (kv_accel_redispatch_enabled() != cases[i].enabled)
            fail_msg("KV_NO_REDISPATCH=%s: expected %s", cases[i].value ? cases[i].value : "(unset)",
                     cases[i].enabled ? "enabled" : "disabled");
        kv_accel_counters_reset();
        kv_tensor *r = check_t(kv_neg(A));
        assert_counts("neg", cases[i].enabled ? 1 : 0, cases[i].enabled ? 0 : 1, 0);
        kv_tensor_release(r);
    }
    clear_env();
    check_ok(kv_accel_env_reload());
    assert_true(kv_accel_redispatch_enabled());
    kv_tensor_release(A);
    kv_tensor_release(a);
}

static void expect_env_error(const char *var, const char *value, const char *needle) {
    clear_env();
    setenv(var, value, 1);
    assert_int_equal(kv_accel_env_reload(), KV_ERR_INVALID_ARG);
    const char *msg = kv_last_error_message();
    if (strstr(msg, var) == NULL || strstr(msg, needle) == NULL)
        fail_msg("%s=%s: message '%s' should name the variable and '%s'", var, value, msg, needle);
}

static void test_environment(void **state) {
    (void)state;
    kv_accel_gate_set(KV_ACCEL_GATE_SEED);
    expect_env_error("KV_REDISPATCH_GATE", "foo", "'foo'");
    assert_int_equal(kv_accel_gate_get(), KV_ACCEL_GATE_SEED); /* unchanged */
    expect_env_error("KV_REDISPATCH_GATE", "", "''");
    expect_env_error("KV_ACCEL_DISABLE", "cat,bogus", "'bogus'");
    /* Set but empty is an error for every variable (README "Exit codes"). */
    expect_env_error("KV_ACCEL_DISABLE", "", "empty value");
    expect_env_error("KV_ACCEL_DISABLE", " , ", "empty value");
    expect_env_error("KV_NO_REDISPATCH", "", "empty value");
    /* Any backend name is a valid request (a plugin may load later); a
     * string that cannot be one is not. */
    expect_env_error("KV_ACCEL_TARGET", "Tpu!", "'Tpu!'");
    expect_env_error("KV_ACCEL_TARGET", "accel", "'accel'");
    assert_int_equal(kv_accel_gate_get(), KV_ACCEL_GATE_SEED);

    clear_env();
    check_ok(kv_accel_env_reload());
    assert_int_equal(kv_accel_gate_get(), KV_ACCEL_GATE_EXACT); /* the default */
    setenv("KV_REDISPATCH_GATE", "seed", 1);
    check_ok(kv_accel_env_reload());
    assert_int_equal(kv_accel_gate_get(), KV_ACCEL_GATE_SEED);
    setenv("KV_ACCEL_DISABLE", " metadata, cat ,", 1); /* blanks and empty entries as in the force map */
    check_ok(kv_accel_env_reload());
    assert_false(kv_accel_special_enabled(KV_ACCEL_SPECIAL_METADATA));
    assert_false(kv_accel_special_enabled(KV_ACCEL_SPECIAL_CAT));
    assert_true(kv_accel_special_enabled(KV_ACCEL_SPECIAL_TO_COPY));
    assert_true(kv_accel_special_enabled(KV_ACCEL_SPECIAL_GROUP_NORM));
    clear_env();
    check_ok(kv_accel_env_reload());
    assert_true(kv_accel_special_enabled(KV_ACCEL_SPECIAL_METADATA));

    kv_accel_gate g;
    assert_int_equal(kv_accel_gate_parse("exact", &g), 0);
    assert_int_equal(g, KV_ACCEL_GATE_EXACT);
    assert_int_equal(kv_accel_gate_parse("Exact", &g), -1);
    assert_string_equal(kv_accel_gate_name(KV_ACCEL_GATE_SEED), "seed");
}

static void test_target(void **state) {
    (void)state;
    assert_int_equal(kv_accel_target(), KV_KEY_CPU);
    assert_string_equal(kv_accel_target_name(), "cpu");
    /* No SIM backend is registered in this build. */
    assert_int_equal(kv_accel_select_target("sim"), KV_ERR_DEVICE);
    assert_int_equal(kv_accel_target(), KV_KEY_CPU);
    /* A backend name nothing registered, then one no backend can have. */
    assert_int_equal(kv_accel_select_target("npu"), KV_ERR_DEVICE);
    assert_int_equal(kv_accel_select_target("Not a name"), KV_ERR_INVALID_ARG);
    check_ok(kv_accel_select_target("cpu"));
    check_ok(kv_accel_select_target(NULL));
    assert_int_equal(kv_accel_target(), KV_KEY_CPU);

    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    clear_env();
    setenv("KV_ACCEL_TARGET", "sim", 1);
    check_ok(kv_accel_env_reload());
    assert_int_equal(kv_accel_target(), KV_KEY_NONE);
    assert_string_equal(kv_accel_target_name(), "none");
    assert_null(kv_neg(A));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "KV_ACCEL_TARGET=sim"));
    assert_null(kv_accel_to(a));
    clear_env();
    check_ok(kv_accel_env_reload());
    assert_int_equal(kv_accel_target(), KV_KEY_CPU);
    kv_tensor *r = check_t(kv_neg(A));
    kv_tensor_release(r);
    kv_tensor_release(A);
    kv_tensor_release(a);
}

static void test_conf_target_across_memory(void **state) {
    (void)state;
    /* An accel.conf line may name another target, but not one in another
     * memory space than the runtime target's. */
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    const kv_op *neg = kv_op_find("neg");
    assert_non_null(neg);
    kv_ivalue slots[2];
    kv_stack st = kv_stack_on(slots, 2);
    check_ok(kv_push_tensor(&st, A));
    kv_accel_box b;
    assert_true(kv_accel_box_begin(&b, neg, KEYS_ACCEL, &st, KV_KEY_CUDA));
    assert_int_equal(b.st, KV_ERR_DEVICE);
    assert_non_null(strstr(kv_last_error_message(), "accel.conf boxes it to CUDA"));
    assert_int_equal(kv_accel_box_tensor(&b, 0), KV_ERR_DEVICE);
    assert_int_equal(kv_accel_box_end(&b, KV_OK), KV_ERR_DEVICE);
    assert_int_equal(st.size, 1); /* the caller's arguments are still there */
    assert_ptr_equal(st.slots[0].v.tensor, A);
    kv_tensor_release(A);
    kv_tensor_release(a);
}

static void test_converters_and_allocator(void **state) {
    (void)state;
    kv_tensor *a = cpu_f32(kA, k23, 2);
    kv_tensor *A = to_accel(a);
    assert_int_equal(A->keys, KEYS_ACCEL);
    assert_ptr_equal(A->storage, a->storage);
    assert_true(kv_tensor_is_accel(A));
    assert_false(kv_tensor_is_accel(a));
    kv_tensor *back = kv_accel_from(A);
    assert_non_null(back);
    assert_int_equal(back->device.type, KV_DEVICE_CPU);
    assert_int_equal(back->keys, kv_keyset_of(KV_KEY_CPU));
    assert_ptr_equal(back->storage, a->storage);
    assert_null(kv_accel_from(a));
    assert_int_equal(kv_last_error(), KV_ERR_DEVICE);
    kv_tensor *again = kv_accel_to(A);
    assert_non_null(again);
    assert_int_equal(again->keys, KEYS_ACCEL);

    /* Accel storage comes from the forwarding allocator. */
    kv_allocator_stats before = kv_allocator_stats_of(KV_DEVICE_ACCEL);
    kv_tensor *e = kv_tensor_empty(k23, 2, KV_F32, kAccel);
    assert_non_null(e);
    kv_allocator_stats during = kv_allocator_stats_of(KV_DEVICE_ACCEL);
    assert_int_equal(during.live_count, before.live_count + 1);
    assert_int_equal(during.live_bytes, before.live_bytes + 24);
    /* Made by core with the device's backend key only: its ops reach the
     * boxing kernels at the ACCEL key, after the layers above ran. */
    assert_int_equal(e->keys, kv_keyset_of(KV_KEY_ACCEL));
    check_ok(kv_fill_(e, kv_scalar_double(1.5)));
    assert_counts("fill_.Scalar", 0, 1, 0);
    kv_tensor *ne = check_t(kv_neg(e));
    assert_accel(ne);
    const double expect[6] = { -1.5, -1.5, -1.5, -1.5, -1.5, -1.5 };
    assert_values(ne, expect, 6);
    assert_counts("neg", 0, 1, 0);
    kv_tensor_release(ne);
    kv_tensor_release(e);
    kv_allocator_stats after = kv_allocator_stats_of(KV_DEVICE_ACCEL);
    assert_int_equal(after.live_count, before.live_count);
    kv_tensor *all[] = { again, back, A, a };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kv_tensor_release(all[i]);
}

int main(void) {
    if (kv_init() != KV_OK) {
        fprintf(stderr, "kv_init: %s\n", kv_last_error_message());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_add_fast_bitwise, setup),
        cmocka_unit_test_setup(test_add_inplace, setup),
        cmocka_unit_test_setup(test_mm, setup),
        cmocka_unit_test_setup(test_cat_legacy_empty, setup),
        cmocka_unit_test_setup(test_clamp_one_bound, setup),
        cmocka_unit_test_setup(test_zeros_accel, setup),
        cmocka_unit_test_setup(test_to_copy, setup),
        cmocka_unit_test_setup(test_group_norm_noncontiguous, setup),
        cmocka_unit_test_setup(test_views_manual, setup),
        cmocka_unit_test_setup(test_views_boxed_when_switched_off, setup),
        cmocka_unit_test_setup(test_lazy_bit_is_slow, setup),
        cmocka_unit_test_setup(test_trace_is_slow, setup),
        cmocka_unit_test_setup(test_requires_grad_is_slow, setup),
        cmocka_unit_test_setup(test_inplace_takes_history, setup),
        cmocka_unit_test_setup(test_view_inplace_history, setup),
        cmocka_unit_test_setup(test_autocast_gates_differ, setup),
        cmocka_unit_test_setup(test_functionalize_is_slow, setup),
        cmocka_unit_test_setup(test_vmap_goes_below, setup),
        cmocka_unit_test_setup(test_exact_gate_sees_any_key, setup),
        cmocka_unit_test_setup(test_lean_memo_sees_changes, setup),
        cmocka_unit_test_setup(test_errors_match_slow_path, setup),
        cmocka_unit_test_setup(test_kill_switch_values, setup),
        cmocka_unit_test_setup(test_environment, setup),
        cmocka_unit_test_setup(test_target, setup),
        cmocka_unit_test_setup(test_conf_target_across_memory, setup),
        cmocka_unit_test_setup(test_converters_and_allocator, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
