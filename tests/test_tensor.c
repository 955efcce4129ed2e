/* Storage, allocators, tensors, views, geometry and element access. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kv/tensor.h"

#define CPU KV_DEVICE_CPU0

static void assert_error(kv_status code, const char *needle) {
    assert_int_equal(kv_last_error(), code);
    if (needle && strstr(kv_last_error_message(), needle) == NULL) {
        fail_msg("error message '%s' lacks '%s'", kv_last_error_message(), needle);
    }
}

/* ---- allocators and storage ---- */

/* The caching CPU allocator: a freed large block serves the next request
 * of its class; off, everything goes back to libc; the variable's rule. */
static void test_cpu_cache(void **state) {
    (void)state;
    kv_cpu_cache_set_enabled(true);
    kv_cpu_cache_empty();
    const kv_cpu_cache_stats s0 = kv_cpu_cache_stats_get();
    assert_true(s0.enabled);
    assert_int_equal(s0.cached_blocks, 0);
    const int64_t n = (int64_t)1 << 20; /* 4 MiB of f32 */
    kv_tensor *a = kv_tensor_empty(&n, 1, KV_F32, CPU);
    assert_non_null(a);
    void *first = kv_tensor_data(a);
    kv_tensor_release(a);
    kv_cpu_cache_stats s1 = kv_cpu_cache_stats_get();
    assert_int_equal(s1.cached_blocks, 1);
    assert_true(s1.cached_bytes >= (int64_t)(4u << 20));
    /* Same class (a little smaller): the same block, a hit. */
    const int64_t m = n - 1000;
    kv_tensor *b = kv_tensor_empty(&m, 1, KV_F32, CPU);
    assert_ptr_equal(kv_tensor_data(b), first);
    const kv_cpu_cache_stats s2 = kv_cpu_cache_stats_get();
    assert_int_equal(s2.hits, s1.hits + 1);
    assert_int_equal(s2.cached_blocks, 0);
    /* Statistics count requests, whatever the cache does. */
    const kv_allocator_stats live = kv_allocator_stats_of(KV_DEVICE_CPU);
    kv_tensor_release(b);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, live.live_count - 1);
    /* Off: nothing is kept, and the held blocks are given back. */
    kv_cpu_cache_set_enabled(false);
    assert_int_equal(kv_cpu_cache_stats_get().cached_blocks, 0);
    kv_tensor *c = kv_tensor_empty(&n, 1, KV_F32, CPU);
    kv_tensor_release(c);
    assert_int_equal(kv_cpu_cache_stats_get().cached_blocks, 0);
    assert_true(kv_cpu_cache_stats_get().returned > s2.returned);
    kv_cpu_cache_set_enabled(true);
    /* KV_CACHING_ALLOCATOR: unset and "1" on, "0" off, else (the empty
     * string too: README "Exit codes") an error naming it. */
    bool on = false;
    assert_int_equal(kv_cpu_cache_parse_env(NULL, &on), KV_OK);
    assert_true(on);
    assert_int_equal(kv_cpu_cache_parse_env("", &on), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "KV_CACHING_ALLOCATOR");
    assert_int_equal(kv_cpu_cache_parse_env("0", &on), KV_OK);
    assert_false(on);
    assert_int_equal(kv_cpu_cache_parse_env("1", &on), KV_OK);
    assert_true(on);
    assert_int_equal(kv_cpu_cache_parse_env("no", &on), KV_ERR_INVALID_ARG);
    assert_error(KV_ERR_INVALID_ARG, "KV_CACHING_ALLOCATOR");
    assert_int_equal(kv_cpu_cache_parse_env(" 0", &on), KV_ERR_INVALID_ARG);
}

/* A small tensor is one block (header, storage, data) owned by its
 * storage: a view outlives the tensor it was made from, and every block
 * is 64-byte aligned and distinct. */
static void test_small_tensor_block(void **state) {
    (void)state;
    kv_cpu_cache_set_enabled(true);
    const kv_allocator_stats start = kv_allocator_stats_of(KV_DEVICE_CPU);
    const int64_t n = 8, zero = 0;
    kv_tensor *t = kv_tensor_empty(&n, 1, KV_F32, CPU);
    kv_tensor *z = kv_tensor_empty(&zero, 1, KV_F32, CPU);
    assert_non_null(t);
    assert_non_null(z);
    assert_int_equal((uintptr_t)kv_tensor_data(t) % 64, 0);
    assert_ptr_not_equal(kv_tensor_data(t), kv_tensor_data(z));
    float *p = kv_tensor_data(t);
    for (int i = 0; i < 8; i++) p[i] = (float)i;
    const int64_t vs = 4, vst = 2;
    kv_tensor *v = kv_tensor_view(t, &vs, &vst, 1, 1);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count - start.live_count, 2);
    kv_tensor_release(t); /* the view keeps the block */
    const int64_t idx = 3;
    assert_true(kv_tensor_get_f64(v, &idx) == 7.0);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count - start.live_count, 2);
    kv_tensor_release(v);
    kv_tensor_release(z);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, start.live_count);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_bytes, start.live_bytes);
}

static void test_allocator_stats_return_to_start(void **state) {
    (void)state;
    const kv_allocator_stats start = kv_allocator_stats_of(KV_DEVICE_CPU);
    const int64_t sizes[2] = { 2, 3 };
    kv_tensor *a = kv_tensor_empty(sizes, 2, KV_F32, CPU);
    assert_non_null(a);
    kv_allocator_stats mid = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(mid.live_bytes - start.live_bytes, 24); /* 6 x 4 bytes, as requested */
    assert_int_equal(mid.live_count - start.live_count, 1);
    assert_int_equal(mid.total_allocs - start.total_allocs, 1);
    kv_tensor *b = kv_tensor_empty(sizes, 2, KV_C128, CPU);
    mid = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(mid.live_bytes - start.live_bytes, 24 + 96);
    assert_int_equal(mid.live_count - start.live_count, 2);
    /* Views and aliases allocate no storage. */
    const int64_t vs[1] = { 3 }, vst[1] = { 1 };
    kv_tensor *v = kv_tensor_view(a, vs, vst, 1, 3);
    kv_tensor *al = kv_tensor_alias(b);
    assert_non_null(v);
    assert_non_null(al);
    mid = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(mid.live_count - start.live_count, 2);
    assert_int_equal(mid.total_allocs - start.total_allocs, 2);
    kv_tensor_release(a);   /* the view still holds a's storage */
    mid = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(mid.live_count - start.live_count, 2);
    kv_tensor_release(v);
    kv_tensor_release(b);
    kv_tensor_release(al);
    const kv_allocator_stats end = kv_allocator_stats_of(KV_DEVICE_CPU);
    assert_int_equal(end.live_bytes, start.live_bytes);
    assert_int_equal(end.live_count, start.live_count);
    assert_int_equal(end.total_allocs - start.total_allocs, 2); /* monotonic */
}

static void test_storage_refcount(void **state) {
    (void)state;
    const int64_t sizes[1] = { 4 };
    kv_tensor *t = kv_tensor_empty(sizes, 1, KV_I32, CPU);
    kv_storage *s = t->storage;
    assert_int_equal(atomic_load(&s->refcount), 1);
    assert_int_equal(atomic_load(&t->refcount), 1);
    kv_tensor *v = kv_tensor_view(t, sizes, NULL, 1, 0);
    assert_ptr_equal(v->storage, s);
    assert_int_equal(atomic_load(&s->refcount), 2);
    kv_tensor *al = kv_tensor_alias(t);
    assert_int_equal(atomic_load(&s->refcount), 3);
    kv_tensor_retain(t);
    assert_int_equal(atomic_load(&t->refcount), 2);
    assert_int_equal(atomic_load(&s->refcount), 3); /* tensor refs do not touch the storage */
    kv_tensor_release(t);
    kv_tensor_release(al);
    assert_int_equal(atomic_load(&s->refcount), 2);
    kv_tensor_release(v);
    assert_int_equal(atomic_load(&s->refcount), 1);
    kv_tensor_release(t);
    kv_tensor_release(NULL); /* allowed */

    kv_storage *raw = kv_storage_new(10, CPU);
    assert_non_null(raw);
    assert_int_equal(raw->nbytes, 10);
    assert_int_equal(((uintptr_t)raw->data) % 64, 0); /* 64-byte aligned */
    kv_storage_retain(raw);
    kv_storage_release(raw);
    kv_storage_release(raw);
}

static void test_zero_byte_storage(void **state) {
    (void)state;
    const kv_allocator_stats start = kv_allocator_stats_of(KV_DEVICE_CPU);
    kv_storage *a = kv_storage_new(0, CPU);
    kv_storage *b = kv_storage_new(0, CPU);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(a->data);
    assert_non_null(b->data);
    assert_ptr_not_equal(a->data, b->data); /* unique, so aliasing checks work */
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count - start.live_count, 2);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_bytes, start.live_bytes);
    kv_storage_release(a);
    kv_storage_release(b);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, start.live_count);
}

/* A counting allocator for a plugin device; it can be told to fail. */
typedef struct counting_ctx {
    int allocs, frees;
    size_t last_free_bytes;
    bool fail;
} counting_ctx;

static void *counting_alloc(void *context, size_t nbytes) {
    counting_ctx *c = context;
    if (c->fail) return NULL;
    c->allocs++;
    return malloc(nbytes ? nbytes : 1);
}

static void counting_free(void *context, void *ptr, size_t nbytes) {
    counting_ctx *c = context;
    c->frees++;
    c->last_free_bytes = nbytes;
    free(ptr);
}

static const kv_allocator_iface counting_iface = { counting_alloc, counting_free };

static void test_installed_allocator(void **state) {
    (void)state;
    const kv_device p0 = { KV_DEVICE_PLUGIN0, 0 };
    const int64_t sizes[1] = { 5 };
    kv_allocator_install(KV_DEVICE_PLUGIN0, NULL, NULL);
    assert_null(kv_allocator_for(KV_DEVICE_PLUGIN0));
    kv_error_clear();
    assert_null(kv_tensor_empty(sizes, 1, KV_F32, p0));
    assert_error(KV_ERR_DEVICE, "plugin0");

    counting_ctx ca = { 0 }, cb = { 0 };
    kv_allocator_install(KV_DEVICE_PLUGIN0, &counting_iface, &ca);
    assert_non_null(kv_allocator_for(KV_DEVICE_PLUGIN0));
    const kv_allocator_stats start = kv_allocator_stats_of(KV_DEVICE_PLUGIN0);
    kv_tensor *t = kv_tensor_empty(sizes, 1, KV_F64, p0);
    assert_non_null(t);
    assert_int_equal(ca.allocs, 1);
    assert_true(kv_device_equal(t->device, p0));
    assert_true(t->keys == kv_keyset_of(KV_KEY_PLUGIN0));
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_PLUGIN0).live_bytes - start.live_bytes, 40);
    /* Replacing the allocator: the old storage still frees through its own. */
    kv_allocator_install(KV_DEVICE_PLUGIN0, &counting_iface, &cb);
    kv_tensor_release(t);
    assert_int_equal(ca.frees, 1);
    assert_int_equal(ca.last_free_bytes, 40);
    assert_int_equal(cb.frees, 0);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_PLUGIN0).live_bytes, start.live_bytes);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_PLUGIN0).live_count, start.live_count);
    /* An allocator that returns nothing is OOM, not a crash. */
    cb.fail = true;
    kv_error_clear();
    assert_null(kv_tensor_empty(sizes, 1, KV_F64, p0));
    assert_error(KV_ERR_OOM, "storage");
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_PLUGIN0).live_count, start.live_count);
    kv_allocator_install(KV_DEVICE_PLUGIN0, NULL, NULL);

    /* The CPU allocator can be swapped out and put back. */
    counting_ctx cc = { 0 };
    kv_allocator_install(KV_DEVICE_CPU, &counting_iface, &cc);
    kv_tensor *c = kv_tensor_empty(sizes, 1, KV_U8, CPU);
    assert_int_equal(cc.allocs, 1);
    kv_allocator_install(KV_DEVICE_CPU, kv_allocator_cpu_iface(), NULL);
    kv_tensor_release(c);
    assert_int_equal(cc.frees, 1);
    kv_tensor *d = kv_tensor_empty(sizes, 1, KV_U8, CPU);
    assert_int_equal(cc.allocs, 1);
    assert_int_equal(((uintptr_t)d->storage->data) % 64, 0);
    kv_tensor_release(d);
}

static void test_device_names(void **state) {
    (void)state;
    static const char *names[] = { "cpu", "cuda", "sim", "accel", "plugin0", "plugin1", "plugin2", "plugin3" };
    for (int t = 0; t < KV_DEVICE_TYPE_COUNT; t++) {
        assert_string_equal(kv_device_type_name((kv_device_type)t), names[t]);
        kv_device d = { KV_DEVICE_CPU, 99 };
        assert_int_equal(kv_device_parse(names[t], &d), 0);
        assert_int_equal(d.type, t);
        assert_int_equal(d.index, 0);
    }
    kv_device d;
    assert_int_equal(kv_device_parse("cuda:1", &d), 0);
    assert_int_equal(d.type, KV_DEVICE_CUDA);
    assert_int_equal(d.index, 1);
    assert_int_equal(kv_device_parse("sim:12", &d), 0);
    assert_int_equal(d.index, 12);
    const char *bad[] = { "", "gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "CPU", "cpu0", ":1", "cuda: 1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (kv_device_parse(bad[i], &d) != -1) fail_msg("'%s' parsed", bad[i]);
    }
}

/* ---- creation errors ---- */

static void test_negative_size(void **state) {
    (void)state;
    const int64_t sizes[2] = { 2, -1 };
    kv_error_clear();
    assert_null(kv_tensor_empty(sizes, 2, KV_F32, CPU));
    assert_error(KV_ERR_NEGATIVE_SIZE, "empty: argument 'size': negative dimension -1 at dim 1 in [2, -1]");
    const int64_t strides[2] = { 1, 1 };
    kv_error_clear();
    assert_null(kv_tensor_empty_strided(sizes, strides, 2, KV_F32, CPU));
    assert_error(KV_ERR_NEGATIVE_SIZE, "empty_strided");
    kv_error_clear();
    assert_null(kv_tensor_from_data(NULL, sizes, 2, KV_F32));
    assert_error(KV_ERR_NEGATIVE_SIZE, "from_data");
}

static void test_bad_ndim_and_overflow(void **state) {
    (void)state;
    int64_t sizes[KV_MAX_DIMS + 1];
    for (int i = 0; i <= KV_MAX_DIMS; i++) sizes[i] = 1;
    kv_error_clear();
    assert_null(kv_tensor_empty(sizes, KV_MAX_DIMS + 1, KV_F32, CPU));
    assert_error(KV_ERR_INVALID_ARG, "9 dimensions");
    kv_error_clear();
    assert_null(kv_tensor_empty(sizes, -1, KV_F32, CPU));
    assert_error(KV_ERR_INVALID_ARG, "empty: argument 'size'");
    kv_tensor *eight = kv_tensor_empty(sizes, KV_MAX_DIMS, KV_F32, CPU); /* the maximum is fine */
    assert_non_null(eight);
    kv_tensor_release(eight);
    const int64_t huge[2] = { INT64_C(1) << 40, INT64_C(1) << 40 };
    kv_error_clear();
    assert_null(kv_tensor_empty(huge, 2, KV_F32, CPU));
    assert_error(KV_ERR_INVALID_ARG, "overflows");
    const int64_t big[1] = { INT64_C(1) << 62 };
    kv_error_clear();
    assert_null(kv_tensor_empty(big, 1, KV_F64, CPU)); /* numel fits, bytes do not */
    assert_error(KV_ERR_INVALID_ARG, "empty");
    kv_error_clear();
    const int64_t ok[1] = { 2 };
    assert_null(kv_tensor_empty(ok, 1, (kv_dtype)99, CPU));
    assert_error(KV_ERR_DTYPE, "dtype");
    kv_error_clear();
    assert_null(kv_tensor_empty(ok, 1, KV_F32, (kv_device){ KV_DEVICE_CPU, -1 }));
    assert_error(KV_ERR_DEVICE, "negative device index");
}

static void test_empty_strided(void **state) {
    (void)state;
    const kv_allocator_stats start = kv_allocator_stats_of(KV_DEVICE_CPU);
    const int64_t sizes[2] = { 2, 3 };
    const int64_t transposed[2] = { 1, 2 };
    kv_tensor *t = kv_tensor_empty_strided(sizes, transposed, 2, KV_F32, CPU);
    assert_non_null(t);
    assert_int_equal(t->storage->nbytes, 24);
    assert_false(kv_tensor_is_contiguous(t));
    const int64_t bcast[2] = { 0, 1 };
    kv_tensor *b = kv_tensor_empty_strided(sizes, bcast, 2, KV_F32, CPU);
    assert_int_equal(b->storage->nbytes, 12); /* only 3 distinct elements */
    const int64_t gaps[2] = { 10, 2 };
    kv_tensor *g = kv_tensor_empty_strided(sizes, gaps, 2, KV_I16, CPU);
    assert_int_equal(g->storage->nbytes, (1 + 10 + 4) * 2);
    const int64_t zero[2] = { 0, 3 };
    kv_tensor *z = kv_tensor_empty_strided(zero, gaps, 2, KV_I16, CPU);
    assert_int_equal(z->storage->nbytes, 0);
    const int64_t neg[2] = { 3, -1 };
    kv_error_clear();
    assert_null(kv_tensor_empty_strided(sizes, neg, 2, KV_F32, CPU));
    assert_error(KV_ERR_INVALID_ARG, "empty_strided: argument 'stride': negative stride -1");
    kv_tensor_release(t);
    kv_tensor_release(b);
    kv_tensor_release(g);
    kv_tensor_release(z);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_bytes, start.live_bytes);
}

/* ---- views, aliases, versions, autograd ownership ---- */

static int hook_calls;
static struct kv_autograd_meta *hook_last;
static void counting_hook(struct kv_autograd_meta *meta) {
    hook_calls++;
    hook_last = meta;
}

static void test_views_share_storage_and_version(void **state) {
    (void)state;
    const int64_t sizes[2] = { 3, 4 };
    kv_tensor *base = kv_tensor_empty(sizes, 2, KV_F32, CPU);
    base->keys = kv_keyset_add(base->keys, KV_KEY_CONJUGATE);
    /* Row 1 as a view: offset 4, one dim. */
    const int64_t rs[1] = { 4 }, rst[1] = { 1 };
    kv_tensor *row = kv_tensor_view(base, rs, rst, 1, 4);
    assert_non_null(row);
    assert_ptr_equal(row->storage, base->storage);
    assert_int_equal(row->dtype, KV_F32);
    assert_true(kv_device_equal(row->device, base->device));
    assert_true(row->keys == base->keys); /* lazy bits come along */
    assert_ptr_equal(kv_tensor_data(row), (char *)kv_tensor_data(base) + 16);
    /* Writes through the view are visible in the base. */
    const int64_t i2[1] = { 2 };
    kv_tensor_set_f64(row, i2, 7.5);
    const int64_t b12[2] = { 1, 2 };
    assert_true(kv_tensor_get_f64(base, b12) == 7.5);
    /* One version counter for all views. */
    assert_int_equal(kv_tensor_version(base), 0);
    kv_tensor_bump_version(row);
    assert_int_equal(kv_tensor_version(base), 1);
    kv_tensor *al = kv_tensor_alias(base);
    kv_tensor_bump_version(al);
    assert_int_equal(kv_tensor_version(row), 2);
    assert_int_equal(kv_tensor_version(al), 2);
    /* The alias has the same geometry in a new struct. */
    assert_ptr_not_equal(al, base);
    assert_int_equal(al->ndim, 2);
    assert_true(al->sizes[0] == 3 && al->sizes[1] == 4 && al->strides[0] == 4 && al->strides[1] == 1);
    assert_true(al->keys == base->keys);
    kv_tensor_release(row);
    kv_tensor_release(al);
    kv_tensor_release(base);
}

static void test_autograd_meta_ownership(void **state) {
    (void)state;
    void (*saved)(struct kv_autograd_meta *) = kv_tensor_autograd_free_hook;
    kv_tensor_autograd_free_hook = counting_hook;
    hook_calls = 0;
    static int fake_meta;
    struct kv_autograd_meta *meta = (struct kv_autograd_meta *)(void *)&fake_meta;
    const int64_t sizes[1] = { 4 };
    kv_tensor *t = kv_tensor_empty(sizes, 1, KV_F32, CPU);
    t->autograd = meta;
    kv_tensor *v = kv_tensor_view(t, sizes, NULL, 1, 0);
    kv_tensor *al = kv_tensor_alias(t);
    assert_null(v->autograd);   /* views do not inherit autograd metadata */
    assert_null(al->autograd);  /* nor do aliases: core never double-frees */
    kv_tensor_release(v);
    kv_tensor_release(al);
    assert_int_equal(hook_calls, 0);
    kv_tensor_retain(t);
    kv_tensor_release(t);
    assert_int_equal(hook_calls, 0); /* not the last reference yet */
    kv_tensor_release(t);
    assert_int_equal(hook_calls, 1);
    assert_ptr_equal(hook_last, meta);
    kv_tensor_autograd_free_hook = saved;
}

static void test_view_bounds(void **state) {
    (void)state;
    const int64_t sizes[1] = { 4 };
    kv_tensor *base = kv_tensor_empty(sizes, 1, KV_F32, CPU);
    const int64_t vs[2] = { 2, 2 }, vst[2] = { 2, 1 };
    kv_tensor *ok = kv_tensor_view(base, vs, vst, 2, 0); /* reaches element 3: fine */
    assert_non_null(ok);
    kv_tensor_release(ok);
    kv_error_clear();
    assert_null(kv_tensor_view(base, vs, vst, 2, 1)); /* reaches element 4 */
    assert_error(KV_ERR_INVALID_ARG, "view: argument 'size': size [2, 2] with stride [2, 1] and offset 1 reaches element 4 but the storage holds 4 elements");
    const int64_t wide[2] = { 3, 1 };
    kv_error_clear();
    assert_null(kv_tensor_view(base, vs, wide, 2, 0));
    assert_error(KV_ERR_INVALID_ARG, "reaches element 4");
    const int64_t negst[2] = { -1, 1 };
    kv_error_clear();
    assert_null(kv_tensor_view(base, vs, negst, 2, 2));
    assert_error(KV_ERR_INVALID_ARG, "negative stride");
    kv_error_clear();
    assert_null(kv_tensor_view(base, vs, vst, 2, -1));
    assert_error(KV_ERR_INVALID_ARG, "offset");
    const int64_t one[1] = { 1 }, st1[1] = { 1 };
    kv_error_clear();
    assert_null(kv_tensor_view(base, one, st1, 1, INT64_MAX)); /* no overflow in the check */
    assert_error(KV_ERR_INVALID_ARG, "reaches");
    /* Broadcast (stride 0) views reach only element offset. */
    const int64_t bs[2] = { 5, 7 }, bst[2] = { 0, 0 };
    kv_tensor *b = kv_tensor_view(base, bs, bst, 2, 3);
    assert_non_null(b);
    kv_tensor_release(b);
    /* An empty view reaches nothing, whatever its offset. */
    const int64_t es[2] = { 0, 9 }, est[2] = { 100, 100 };
    kv_tensor *e = kv_tensor_view(base, es, est, 2, 50);
    assert_non_null(e);
    kv_tensor_release(e);
    /* A 0-dim view of the last element. */
    kv_tensor *s = kv_tensor_view(base, NULL, NULL, 0, 3);
    assert_non_null(s);
    assert_int_equal(kv_tensor_numel(s), 1);
    kv_tensor_release(s);
    kv_error_clear();
    assert_null(kv_tensor_view(base, NULL, NULL, 0, 4));
    assert_error(KV_ERR_INVALID_ARG, "view");
    kv_error_clear();
    assert_null(kv_tensor_view(NULL, vs, vst, 2, 0));
    assert_error(KV_ERR_INVALID_ARG, "view: argument 'base'");
    kv_tensor_release(base);
}

/* ---- geometry ---- */

static void test_contiguity(void **state) {
    (void)state;
    const int64_t sizes[2] = { 3, 4 };
    kv_tensor *base = kv_tensor_empty(sizes, 2, KV_F32, CPU);
    assert_true(kv_tensor_is_contiguous(base));
    assert_true(base->strides[0] == 4 && base->strides[1] == 1);
    const int64_t ts[2] = { 4, 3 }, tst[2] = { 1, 4 };
    kv_tensor *tr = kv_tensor_view(base, ts, tst, 2, 0); /* transpose */
    assert_false(kv_tensor_is_contiguous(tr));
    const int64_t ss[2] = { 3, 2 }, sst[2] = { 4, 1 };
    kv_tensor *sl = kv_tensor_view(base, ss, sst, 2, 1); /* [:, 1:3] */
    assert_false(kv_tensor_is_contiguous(sl));
    const int64_t rs[2] = { 2, 4 }, rst[2] = { 4, 1 };
    kv_tensor *rows = kv_tensor_view(base, rs, rst, 2, 4); /* [1:3, :] */
    assert_true(kv_tensor_is_contiguous(rows));
    const int64_t one_s[3] = { 1, 3, 1 }, one_st[3] = { 100, 1, 7 };
    kv_tensor *ones = kv_tensor_view(base, one_s, one_st, 3, 0); /* size-1 strides are free */
    assert_true(kv_tensor_is_contiguous(ones));
    const int64_t one_bad[3] = { 1, 3, 1 }, one_bad_st[3] = { 100, 2, 7 };
    kv_tensor *ones_bad = kv_tensor_view(base, one_bad, one_bad_st, 3, 0);
    assert_false(kv_tensor_is_contiguous(ones_bad));
    const int64_t zs[2] = { 0, 3 }, zst[2] = { 7, 7 };
    kv_tensor *zero = kv_tensor_view(base, zs, zst, 2, 0); /* no elements: contiguous */
    assert_true(kv_tensor_is_contiguous(zero));
    assert_int_equal(kv_tensor_numel(zero), 0);
    const int64_t es[2] = { 3, 4 }, est[2] = { 0, 1 };
    kv_tensor *expanded = kv_tensor_view(base, es, est, 2, 0);
    assert_false(kv_tensor_is_contiguous(expanded));
    kv_tensor *scalar = kv_tensor_view(base, NULL, NULL, 0, 5);
    assert_true(kv_tensor_is_contiguous(scalar));
    kv_tensor *list[] = { tr, sl, rows, ones, ones_bad, zero, expanded, scalar, base };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) kv_tensor_release(list[i]);
}

static void test_contiguous_strides(void **state) {
    (void)state;
    int64_t st[KV_MAX_DIMS];
    const int64_t a[3] = { 2, 3, 4 };
    assert_int_equal(kv_contiguous_strides(a, 3, st), 24);
    assert_true(st[0] == 12 && st[1] == 4 && st[2] == 1);
    const int64_t z[3] = { 2, 0, 3 };
    assert_int_equal(kv_contiguous_strides(z, 3, st), 0);
    assert_true(st[0] == 3 && st[1] == 3 && st[2] == 1); /* size 0 counts as 1, as in PyTorch */
    assert_int_equal(kv_contiguous_strides(NULL, 0, st), 1);
    const int64_t o[2] = { 1, 5 };
    assert_int_equal(kv_contiguous_strides(o, 2, st), 5);
    assert_true(st[0] == 5 && st[1] == 1);
}

static void test_broadcast_shapes(void **state) {
    (void)state;
    int64_t out[KV_MAX_DIMS];
    int n = -1;
    const int64_t a[3] = { 2, 1, 3 }, b[2] = { 4, 1 };
    assert_int_equal(kv_broadcast_shapes(a, 3, b, 2, out, &n), KV_OK);
    assert_int_equal(n, 3);
    assert_true(out[0] == 2 && out[1] == 4 && out[2] == 3);
    const int64_t five[1] = { 5 };
    assert_int_equal(kv_broadcast_shapes(NULL, 0, five, 1, out, &n), KV_OK);
    assert_int_equal(n, 1);
    assert_true(out[0] == 5);
    const int64_t zero[1] = { 0 }, one[1] = { 1 };
    assert_int_equal(kv_broadcast_shapes(zero, 1, one, 1, out, &n), KV_OK);
    assert_true(n == 1 && out[0] == 0); /* 1 broadcasts to 0 */
    assert_int_equal(kv_broadcast_shapes(NULL, 0, NULL, 0, out, &n), KV_OK);
    assert_int_equal(n, 0);
    /* out may be one of the inputs. */
    int64_t inout[3] = { 2, 1, 3 };
    const int64_t c[3] = { 1, 6, 1 };
    assert_int_equal(kv_broadcast_shapes(inout, 3, c, 3, inout, &n), KV_OK);
    assert_true(inout[0] == 2 && inout[1] == 6 && inout[2] == 3);
    /* Mismatch: both shapes named. */
    const int64_t s3[1] = { 3 }, s4[1] = { 4 };
    kv_error_clear();
    assert_int_equal(kv_broadcast_shapes(s3, 1, s4, 1, out, &n), KV_ERR_SHAPE);
    assert_error(KV_ERR_SHAPE, "shapes [3] and [4] are not broadcastable");
    const int64_t s23[2] = { 2, 3 };
    kv_error_clear();
    assert_int_equal(kv_broadcast_shapes(s23, 2, s4, 1, out, &n), KV_ERR_SHAPE);
    assert_error(KV_ERR_SHAPE, "[2, 3] and [4]");
    assert_error(KV_ERR_SHAPE, "size of a (3) must match the size of b (4) at non-singleton dimension 1");
    const int64_t zero2[1] = { 0 }, two[1] = { 2 };
    kv_error_clear();
    assert_int_equal(kv_broadcast_shapes(zero2, 1, two, 1, out, &n), KV_ERR_SHAPE); /* 0 vs 2 */
}

static void test_broadcast_strides(void **state) {
    (void)state;
    const int64_t sizes[2] = { 3, 1 };
    kv_tensor *t = kv_tensor_empty(sizes, 2, KV_F32, CPU);
    const int64_t target[3] = { 2, 3, 4 };
    int64_t st[3] = { -1, -1, -1 };
    assert_int_equal(kv_broadcast_strides(t, target, 3, st), KV_OK);
    assert_true(st[0] == 0 && st[1] == 1 && st[2] == 0);
    const int64_t same[2] = { 3, 1 };
    assert_int_equal(kv_broadcast_strides(t, same, 2, st), KV_OK);
    assert_true(st[0] == 1 && st[1] == 1);
    const int64_t bad[2] = { 4, 4 };
    kv_error_clear();
    assert_int_equal(kv_broadcast_strides(t, bad, 2, st), KV_ERR_SHAPE);
    assert_error(KV_ERR_SHAPE, "[3, 1] cannot be expanded to [4, 4]");
    const int64_t fewer[1] = { 3 };
    kv_error_clear();
    assert_int_equal(kv_broadcast_strides(t, fewer, 1, st), KV_ERR_SHAPE);
    kv_tensor_release(t);
}

static void test_wrap_dim(void **state) {
    (void)state;
    assert_int_equal(kv_wrap_dim(-1, 3, "sum", "dim"), 2);
    assert_int_equal(kv_wrap_dim(-3, 3, "sum", "dim"), 0);
    assert_int_equal(kv_wrap_dim(2, 3, "sum", "dim"), 2);
    kv_error_clear();
    assert_int_equal(kv_wrap_dim(3, 3, "sum.dim_IntList", "dim"), -1);
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    assert_string_equal(kv_last_error_message(),
                        "sum.dim_IntList: argument 'dim': dimension 3 out of range (expected to be in range of [-3, 2])");
    kv_error_clear();
    assert_int_equal(kv_wrap_dim(-4, 3, "transpose.int", "dim0"), -1);
    assert_string_equal(kv_last_error_message(),
                        "transpose.int: argument 'dim0': dimension -4 out of range (expected to be in range of [-3, 2])");
    /* 0-dim tensors accept -1 and 0. */
    assert_int_equal(kv_wrap_dim(-1, 0, "sum", "dim"), 0);
    assert_int_equal(kv_wrap_dim(0, 0, "sum", "dim"), 0);
    kv_error_clear();
    assert_int_equal(kv_wrap_dim(1, 0, "sum", "dim"), -1);
    assert_error(KV_ERR_DIM, "expected to be in range of [-1, 0]");
    kv_error_clear();
    assert_int_equal(kv_wrap_dim(INT64_C(1) << 40, 2, "select.int", "dim"), -1);
    assert_error(KV_ERR_DIM, "dimension 1099511627776 out of range");
}

static void test_same_shape_and_format(void **state) {
    (void)state;
    const int64_t a[2] = { 2, 3 }, b[2] = { 3, 2 };
    kv_tensor *x = kv_tensor_empty(a, 2, KV_F32, CPU);
    kv_tensor *y = kv_tensor_empty(a, 2, KV_I8, CPU);
    kv_tensor *z = kv_tensor_empty(b, 2, KV_F32, CPU);
    kv_tensor *w = kv_tensor_empty(a, 1, KV_F32, CPU);
    assert_true(kv_same_shape(x, y));
    assert_false(kv_same_shape(x, z));
    assert_false(kv_same_shape(x, w));
    char buf[32];
    assert_int_equal(kv_shape_format(a, 2, buf, (int)sizeof buf), 6);
    assert_string_equal(buf, "[2, 3]");
    assert_int_equal(kv_shape_format(NULL, 0, buf, (int)sizeof buf), 2);
    assert_string_equal(buf, "[]");
    char tiny[4];
    assert_int_equal(kv_shape_format(a, 2, tiny, (int)sizeof tiny), 6);
    assert_string_equal(tiny, "[2,");
    kv_tensor_release(x);
    kv_tensor_release(y);
    kv_tensor_release(z);
    kv_tensor_release(w);
}

/* ---- data ---- */

static void test_from_data_get_set_every_dtype(void **state) {
    (void)state;
    const int64_t sizes[1] = { 3 };
    const int64_t i0[1] = { 0 }, i1[1] = { 1 }, i2[1] = { 2 };
    {
        const uint8_t d[3] = { 0, 1, 1 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_BOOL);
        assert_true(kv_tensor_get_f64(t, i0) == 0.0 && kv_tensor_get_f64(t, i2) == 1.0);
        kv_tensor_set_f64(t, i0, -3.0);
        assert_int_equal(((uint8_t *)kv_tensor_data(t))[0], 1);
        kv_tensor_set_f64(t, i1, 0.0);
        assert_int_equal(((uint8_t *)kv_tensor_data(t))[1], 0);
        kv_tensor_release(t);
    }
    {
        const uint8_t d[3] = { 0, 200, 255 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_U8);
        assert_true(kv_tensor_get_f64(t, i1) == 200.0 && kv_tensor_get_f64(t, i2) == 255.0);
        kv_tensor_set_f64(t, i0, 17.9); /* truncates */
        assert_int_equal(((uint8_t *)kv_tensor_data(t))[0], 17);
        kv_tensor_set_f64(t, i1, 257.0); /* wraps like a C cast through int64 */
        assert_int_equal(((uint8_t *)kv_tensor_data(t))[1], 1);
        kv_tensor_release(t);
    }
    {
        const int8_t d[3] = { -128, -1, 127 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_I8);
        assert_true(kv_tensor_get_f64(t, i0) == -128.0 && kv_tensor_get_f64(t, i2) == 127.0);
        kv_tensor_set_f64(t, i1, -5.5);
        assert_int_equal(((int8_t *)kv_tensor_data(t))[1], -5);
        kv_tensor_release(t);
    }
    {
        const int16_t d[3] = { -32768, 12345, 7 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_I16);
        assert_true(kv_tensor_get_f64(t, i0) == -32768.0 && kv_tensor_get_f64(t, i1) == 12345.0);
        kv_tensor_set_f64(t, i2, -300.0);
        assert_int_equal(((int16_t *)kv_tensor_data(t))[2], -300);
        kv_tensor_release(t);
    }
    {
        const int32_t d[3] = { INT32_MIN, 0, 100000 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_I32);
        assert_true(kv_tensor_get_f64(t, i0) == -2147483648.0 && kv_tensor_get_f64(t, i2) == 100000.0);
        kv_tensor_set_f64(t, i1, 65536.0);
        assert_int_equal(((int32_t *)kv_tensor_data(t))[1], 65536);
        kv_tensor_release(t);
    }
    {
        const int64_t d[3] = { INT64_C(1) << 53, -9, 0 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_I64);
        assert_true(kv_tensor_get_f64(t, i0) == 9007199254740992.0 && kv_tensor_get_f64(t, i1) == -9.0);
        kv_tensor_set_f64(t, i2, NAN); /* defined: 0 */
        assert_true(((int64_t *)kv_tensor_data(t))[2] == 0);
        kv_tensor_set_f64(t, i2, -1e300); /* saturates */
        assert_true(((int64_t *)kv_tensor_data(t))[2] == INT64_MIN);
        kv_tensor_release(t);
    }
    {
        const uint16_t d[3] = { 0x3c00, 0xc100, 0x7c00 }; /* 1, -2.5, inf */
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_F16);
        assert_true(kv_tensor_get_f64(t, i0) == 1.0 && kv_tensor_get_f64(t, i1) == -2.5);
        assert_true(isinf(kv_tensor_get_f64(t, i2)));
        kv_tensor_set_f64(t, i0, 1.5);
        assert_int_equal(((uint16_t *)kv_tensor_data(t))[0], 0x3e00);
        kv_tensor_set_f64(t, i1, 1.0 + 0x1p-11 + 0x1p-40); /* one rounding from double */
        assert_int_equal(((uint16_t *)kv_tensor_data(t))[1], 0x3c01);
        kv_tensor_release(t);
    }
    {
        const uint16_t d[3] = { 0x3f80, 0xc020, 0x0000 }; /* 1, -2.5, 0 */
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_BF16);
        assert_true(kv_tensor_get_f64(t, i0) == 1.0 && kv_tensor_get_f64(t, i1) == -2.5);
        kv_tensor_set_f64(t, i2, 1.5);
        assert_int_equal(((uint16_t *)kv_tensor_data(t))[2], 0x3fc0);
        kv_tensor_release(t);
    }
    {
        const float d[3] = { 0.25f, -1e30f, 3.0f };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_F32);
        assert_true(kv_tensor_get_f64(t, i0) == 0.25 && kv_tensor_get_f64(t, i1) == (double)-1e30f);
        kv_tensor_set_f64(t, i2, 0.1);
        assert_true(((float *)kv_tensor_data(t))[2] == 0.1f);
        kv_tensor_release(t);
    }
    {
        const double d[3] = { 0.1, -0.0, 1e300 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_F64);
        assert_true(kv_tensor_get_f64(t, i0) == 0.1 && kv_tensor_get_f64(t, i2) == 1e300);
        assert_true(signbit(kv_tensor_get_f64(t, i1)));
        kv_tensor_set_f64(t, i1, 42.0);
        assert_true(((double *)kv_tensor_data(t))[1] == 42.0);
        kv_tensor_release(t);
    }
    {
        const float d[6] = { 1.0f, 2.0f, -3.0f, 4.0f, 5.5f, -6.0f };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_C64);
        assert_true(kv_tensor_get_f64(t, i0) == 1.0 && kv_tensor_get_f64(t, i1) == -3.0);
        kv_tensor_set_f64(t, i2, 9.0); /* writes the real part, zeroes the imaginary */
        assert_true(((float *)kv_tensor_data(t))[4] == 9.0f && ((float *)kv_tensor_data(t))[5] == 0.0f);
        kv_tensor_release(t);
    }
    {
        const double d[6] = { 1.0, 2.0, -3.0, 4.0, 5.5, -6.0 };
        kv_tensor *t = kv_tensor_from_data(d, sizes, 1, KV_C128);
        assert_true(kv_tensor_get_f64(t, i2) == 5.5);
        kv_tensor_set_f64(t, i0, -1.25);
        assert_true(((double *)kv_tensor_data(t))[0] == -1.25 && ((double *)kv_tensor_data(t))[1] == 0.0);
        kv_tensor_release(t);
    }
}

static void test_from_data_layout_and_element(void **state) {
    (void)state;
    const int32_t d[6] = { 10, 11, 12, 20, 21, 22 };
    const int64_t sizes[2] = { 2, 3 };
    kv_tensor *t = kv_tensor_from_data(d, sizes, 2, KV_I32);
    assert_non_null(t);
    assert_true(t->keys == kv_keyset_of(KV_KEY_CPU));
    assert_true(kv_device_equal(t->device, KV_DEVICE_CPU0));
    assert_int_equal(t->offset, 0);
    assert_null(t->autograd);
    const int64_t at12[2] = { 1, 2 };
    assert_int_equal(*(int32_t *)kv_tensor_element(t, at12), 22);
    /* Through a transposed view with an offset: element [2][0] of t.T[:, :] */
    const int64_t ts[2] = { 3, 2 }, tst[2] = { 1, 3 };
    kv_tensor *tt = kv_tensor_view(t, ts, tst, 2, 0);
    const int64_t at20[2] = { 2, 0 }, at21[2] = { 2, 1 };
    assert_true(kv_tensor_get_f64(tt, at20) == 12.0);
    assert_true(kv_tensor_get_f64(tt, at21) == 22.0);
    const int64_t ss[1] = { 2 }, sst[1] = { 1 };
    kv_tensor *tail = kv_tensor_view(t, ss, sst, 1, 4);
    const int64_t at1[1] = { 1 };
    assert_true(kv_tensor_get_f64(tail, at1) == 22.0);
    /* Out-of-range indices are errors, not reads. */
    const int64_t bad[2] = { 2, 0 };
    kv_error_clear();
    assert_null(kv_tensor_element(t, bad));
    assert_error(KV_ERR_INDEX, "index 2 is out of bounds for dimension 0 with size 2");
    const int64_t neg[2] = { 0, -1 };
    kv_error_clear();
    assert_true(isnan(kv_tensor_get_f64(t, neg)));
    assert_error(KV_ERR_INDEX, "index -1");
    /* A 0-dim tensor: the empty index. */
    const float one = 3.5f;
    kv_tensor *s = kv_tensor_from_data(&one, NULL, 0, KV_F32);
    assert_true(kv_tensor_get_f64(s, NULL) == 3.5);
    assert_int_equal(kv_tensor_numel(s), 1);
    /* Zero-size from NULL data is fine; non-empty from NULL is not. */
    const int64_t zs[2] = { 0, 4 };
    kv_tensor *z = kv_tensor_from_data(NULL, zs, 2, KV_F64);
    assert_non_null(z);
    assert_int_equal(kv_tensor_numel(z), 0);
    kv_error_clear();
    assert_null(kv_tensor_from_data(NULL, sizes, 2, KV_F64));
    assert_error(KV_ERR_INVALID_ARG, "from_data: argument 'data'");
    kv_tensor *list[] = { t, tt, tail, s, z };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) kv_tensor_release(list[i]);
}

/* CUDA memory is never handed out as a host pointer. */
static void test_cuda_data_not_host(void **state) {
    (void)state;
    counting_ctx c = { 0 };
    kv_allocator *saved = kv_allocator_for(KV_DEVICE_CUDA);
    kv_allocator_install(KV_DEVICE_CUDA, &counting_iface, &c);
    const int64_t sizes[1] = { 2 };
    kv_tensor *t = kv_tensor_empty(sizes, 1, KV_F32, (kv_device){ KV_DEVICE_CUDA, 0 });
    assert_non_null(t);
    assert_null(kv_tensor_data(t));
    kv_error_clear();
    const int64_t i0[1] = { 0 };
    assert_null(kv_tensor_element(t, i0));
    assert_error(KV_ERR_DEVICE, "host");
    kv_tensor_release(t);
    assert_int_equal(c.frees, 1);
    if (saved == NULL) kv_allocator_install(KV_DEVICE_CUDA, NULL, NULL);
}

/* ---- thread-local errors ---- */

static void *other_thread(void *arg) {
    kv_status *seen = arg;
    seen[0] = kv_last_error();           /* the main thread's error is not visible */
    kv_error(KV_ERR_SHAPE, "other: argument 'x': from the other thread");
    seen[1] = kv_last_error();
    return NULL;
}

static void test_error_is_thread_local(void **state) {
    (void)state;
    kv_error(KV_ERR_DIM, "main: argument 'dim': here");
    kv_status seen[2] = { KV_ERR_INTERNAL, KV_ERR_INTERNAL };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, other_thread, seen), 0);
    pthread_join(th, NULL);
    assert_int_equal(seen[0], KV_OK);
    assert_int_equal(seen[1], KV_ERR_SHAPE);
    assert_int_equal(kv_last_error(), KV_ERR_DIM);
    assert_string_equal(kv_last_error_message(), "main: argument 'dim': here");
    kv_error_clear();
}

/* Refcounts are atomic: many threads retaining and releasing one tensor. */
static void *churn(void *arg) {
    kv_tensor *t = arg;
    for (int i = 0; i < 20000; i++) {
        kv_tensor_retain(t);
        kv_tensor *a = kv_tensor_alias(t);
        kv_tensor_release(a);
        kv_tensor_release(t);
    }
    return NULL;
}

static void test_refcount_threads(void **state) {
    (void)state;
    const kv_allocator_stats start = kv_allocator_stats_of(KV_DEVICE_CPU);
    const int64_t sizes[1] = { 8 };
    kv_tensor *t = kv_tensor_empty(sizes, 1, KV_F32, CPU);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) assert_int_equal(pthread_create(&th[i], NULL, churn, t), 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&t->refcount), 1);
    assert_int_equal(atomic_load(&t->storage->refcount), 1);
    kv_tensor_release(t);
    assert_int_equal(kv_allocator_stats_of(KV_DEVICE_CPU).live_count, start.live_count);
}

/* Exact: nested strides never overlap, stride 0 and windows do, and an
 * interleaving that never meets ([2, 3] over [3, 2]: 0 2 4 3 5 7) does not. */
/* PyTorch's is_non_overlapping_and_dense and the strides preserve_format
 * gives (infer_dense_strides), on bare geometries. */
static void test_preserve_strides(void **state) {
    (void)state;
    const struct {
        int ndim;
        int64_t sizes[5], strides[5];
        bool dense;
        int64_t want[5];
    } rows[] = {
        { 3, { 2, 3, 4 }, { 12, 4, 1 }, true, { 12, 4, 1 } },          /* contiguous */
        { 2, { 4, 3 }, { 1, 4 }, true, { 1, 4 } },                      /* transposed: kept */
        { 3, { 3, 1, 4 }, { 4, 100, 1 }, true, { 4, 100, 1 } },         /* a size-1 dim's stride is free */
        { 2, { 3, 4 }, { 8, 2 }, false, { 4, 1 } },                     /* every other element */
        { 2, { 3, 4 }, { 1, 6 }, false, { 1, 3 } },                     /* column-major with gaps */
        { 2, { 6, 7 }, { 4, 1 }, false, { 7, 1 } },                     /* overlapping windows */
        { 2, { 6, 7 }, { 0, 1 }, false, { 7, 1 } },                     /* broadcast */
        { 1, { 5 }, { 2 }, false, { 1 } },                              /* one dim */
        /* PyTorch's own example: stride-0 dims keep their place */
        { 5, { 6, 5, 4, 3, 2 }, { 6, 0, 120, 0, 1 }, false, { 6, 36, 180, 2, 1 } },
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        kv_tensor t;
        memset(&t, 0, sizeof t);
        t.ndim = rows[r].ndim;
        memcpy(t.sizes, rows[r].sizes, sizeof(int64_t) * (size_t)t.ndim);
        memcpy(t.strides, rows[r].strides, sizeof(int64_t) * (size_t)t.ndim);
        if (kv_tensor_non_overlapping_and_dense(&t) != rows[r].dense) fail_msg("row %zu: dense?", r);
        int64_t got[KV_MAX_DIMS];
        kv_tensor_preserve_strides(&t, got);
        for (int d = 0; d < t.ndim; d++)
            if (got[d] != rows[r].want[d])
                fail_msg("row %zu: dim %d: stride %lld, want %lld", r, d, (long long)got[d], (long long)rows[r].want[d]);
    }
}

static void test_internal_overlap(void **state) {
    (void)state;
    const int64_t n = 64;
    kv_tensor *base = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    assert_non_null(base);
    const struct {
        int64_t sizes[2], strides[2];
        kv_overlap want;
        int dim;
    } rows[] = {
        { { 6, 7 }, { 7, 1 }, KV_OVERLAP_NO, -1 },  /* contiguous */
        { { 6, 7 }, { 1, 6 }, KV_OVERLAP_NO, -1 },  /* transposed */
        { { 6, 7 }, { 4, 1 }, KV_OVERLAP_YES, -1 }, /* layout w */
        { { 6, 7 }, { 0, 1 }, KV_OVERLAP_YES, 0 },  /* layout b */
        { { 3, 2 }, { 2, 3 }, KV_OVERLAP_NO, -1 },  /* interleaved, disjoint */
        { { 4, 3 }, { 2, 3 }, KV_OVERLAP_YES, -1 }, /* 6 = 3*2 + 0*3 = 0*2 + 2*3 */
        { { 1, 7 }, { 0, 1 }, KV_OVERLAP_NO, -1 },  /* size-1 dims do not count */
        { { 0, 7 }, { 0, 0 }, KV_OVERLAP_NO, -1 },  /* no elements */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kv_tensor *v = kv_tensor_view(base, rows[i].sizes, rows[i].strides, 2, 0);
        assert_non_null(v);
        int dim = 99;
        assert_int_equal(kv_tensor_internal_overlap(v, &dim), rows[i].want);
        assert_int_equal(dim, rows[i].dim);
        const kv_status st = kv_tensor_check_no_internal_overlap("op", "self", v);
        assert_int_equal(st, rows[i].want == KV_OVERLAP_YES ? KV_ERR_INVALID_ARG : KV_OK);
        if (st != KV_OK) assert_non_null(strstr(kv_last_error_message(), "single memory location"));
        kv_tensor_release(v);
    }
    kv_tensor_release(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocator_stats_return_to_start),
        cmocka_unit_test(test_storage_refcount),
        cmocka_unit_test(test_zero_byte_storage),
        cmocka_unit_test(test_installed_allocator),
        cmocka_unit_test(test_device_names),
        cmocka_unit_test(test_negative_size),
        cmocka_unit_test(test_bad_ndim_and_overflow),
        cmocka_unit_test(test_empty_strided),
        cmocka_unit_test(test_views_share_storage_and_version),
        cmocka_unit_test(test_autograd_meta_ownership),
        cmocka_unit_test(test_view_bounds),
        cmocka_unit_test(test_contiguity),
        cmocka_unit_test(test_contiguous_strides),
        cmocka_unit_test(test_broadcast_shapes),
        cmocka_unit_test(test_broadcast_strides),
        cmocka_unit_test(test_wrap_dim),
        cmocka_unit_test(test_same_shape_and_format),
        cmocka_unit_test(test_from_data_get_set_every_dtype),
        cmocka_unit_test(test_from_data_layout_and_element),
        cmocka_unit_test(test_cuda_data_not_host),
        cmocka_unit_test(test_error_is_thread_local),
        cmocka_unit_test(test_refcount_threads),
        cmocka_unit_test(test_cpu_cache),
        cmocka_unit_test(test_small_tensor_block),
        cmocka_unit_test(test_internal_overlap),
        cmocka_unit_test(test_preserve_strides),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
