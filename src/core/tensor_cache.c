/* Per-thread free lists of tensor blocks (tensor_cache.h).
 *
 * A block freed on another thread than the one that made it joins that
 * thread's list; lists are capped, and a thread's list goes back to libc
 * when the thread exits. No lock and no atomic on either path. */
#include "core/tensor_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define TBLOCK_CAP 256 /* blocks per thread (about 100 KiB) */

typedef struct free_tblock {
    struct free_tblock *next;
} free_tblock;

typedef struct tblock_list {
    free_tblock *head;
    int n;
} tblock_list;

static _Thread_local tblock_list t_list;
static _Thread_local bool t_hooked;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static bool g_key_ok;

static void drain(void *p) {
    tblock_list *l = p;
    while (l->head != NULL) {
        free_tblock *f = l->head;
        l->head = f->next;
        free(f);
    }
    l->n = 0;
}

static void make_key(void) { g_key_ok = pthread_key_create(&g_key, drain) == 0; }

kv_tensor_block *kv_tblock_get(void) {
    free_tblock *f = t_list.head;
    if (f != NULL) {
        t_list.head = f->next;
        t_list.n--;
        return (kv_tensor_block *)(void *)f;
    }
    kv_cpu_cache_env_read(); /* the first miss reads KV_CACHING_ALLOCATOR, before any block is kept */
    return aligned_alloc(alignof(kv_tensor_block), sizeof(kv_tensor_block));
}

void kv_tblock_drain_mine(void) { drain(&t_list); }

void kv_tblock_put(kv_tensor_block *b) {
    if (b == NULL) return;
    if (t_list.n < TBLOCK_CAP && kv_cpu_cache_enabled()) {
        if (!t_hooked) {
            pthread_once(&g_once, make_key);
            t_hooked = g_key_ok && pthread_setspecific(g_key, &t_list) == 0;
        }
        if (t_hooked) {
            free_tblock *f = (free_tblock *)(void *)b;
            f->next = t_list.head;
            t_list.head = f;
            t_list.n++;
            return;
        }
    }
    free(b);
}
