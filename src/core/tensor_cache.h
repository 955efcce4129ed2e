/* Tensor headers without a trip to malloc (private to src/core).
 *
 * Every tensor header libkv makes comes from a kv_tensor_block, taken from
 * a per-thread free list. A small CPU tensor also puts its storage header
 * and its data in the same block: one allocation for the whole tensor.
 * The block then belongs to the storage (views may outlive the tensor):
 * the tensor's death releases the storage, and the storage's death gives
 * the block back. */
#ifndef KV_CORE_TENSOR_CACHE_H
#define KV_CORE_TENSOR_CACHE_H

#include <stdalign.h>
#include <stddef.h>

#include "kv/tensor.h"

/* Data bytes a block holds: 32 f32 or 16 f64 elements. */
#define KV_TENSOR_SMALL_BYTES 128

typedef struct kv_tensor_block {
    kv_tensor t;
    kv_storage s;
    alignas(64) unsigned char data[KV_TENSOR_SMALL_BYTES];
} kv_tensor_block;

/* kv_tensor.origin */
enum {
    KV_TENSOR_FROM_MALLOC = 0, /* a header someone built with malloc (kv_tensor_release frees it) */
    KV_TENSOR_FROM_BLOCK = 1,  /* the header of a block whose storage part is unused */
    KV_TENSOR_EMBEDDED = 2,    /* header, storage and data in one block, which the storage owns */
};

/* A block (uninitialized), NULL when out of memory. */
kv_tensor_block *kv_tblock_get(void);
/* Gives a block back: to this thread's list, or to libc past its cap or
 * when the CPU cache is off (KV_CACHING_ALLOCATOR=0). */
void kv_tblock_put(kv_tensor_block *b);
/* Gives this thread's list back to libc (kv_cpu_cache_empty). */
void kv_tblock_drain_mine(void);
/* Reads KV_CACHING_ALLOCATOR once (cpu_alloc.c); cheap after the first
 * call. Called on every miss, so no block is kept before it is read. */
void kv_cpu_cache_env_read(void);
/* The marker allocator of embedded storages (never installed anywhere). */
kv_allocator *kv_tblock_allocator(void);

static inline kv_tensor_block *kv_tblock_of_tensor(kv_tensor *t) { return (kv_tensor_block *)(void *)t; }

static inline kv_tensor_block *kv_tblock_of_storage(kv_storage *s) {
    return (kv_tensor_block *)(void *)((char *)s - offsetof(kv_tensor_block, s));
}

#endif
