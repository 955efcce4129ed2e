/* The guarded CPU allocator (runner/guard_alloc.h).
 *
 * Block bookkeeping lives in separately allocated records, not in a
 * header before the block: a kernel that writes far before its output
 * could otherwise corrupt the list that is needed to report it. Lookups
 * are linear; a case has a handful of live blocks. */
#include "runner/exec/guard_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/device.h"

typedef struct guard_rec {
    unsigned char *base;   /* aligned_alloc result */
    unsigned char *user;   /* base + KV_GUARD_REDZONE */
    size_t nbytes;         /* requested */
    size_t total;          /* allocated */
    uint64_t epoch;
    struct guard_rec *next;
} guard_rec;

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static guard_rec *guard_live;
static uint64_t guard_epoch = 1;
static uint8_t guard_poison;
static int guard_free_damaged;
static char guard_free_msg[256];
/* The allocator context: its address identifies the guard. */
static int guard_context;

/* Describes the first damaged byte of r's redzones; 0 when intact. */
static int guard_inspect(const guard_rec *r, char *msg, int cap) {
    for (size_t i = 0; i < KV_GUARD_REDZONE; i++) {
        if (r->base[i] != KV_GUARD_PATTERN) {
            if (msg && cap > 0)
                snprintf(msg, (size_t)cap, "front redzone of a %zu-byte block written at byte %td before its start",
                         r->nbytes, (ptrdiff_t)(KV_GUARD_REDZONE - i));
            return 1;
        }
    }
    const unsigned char *end = r->user + r->nbytes;
    const size_t back = r->total - KV_GUARD_REDZONE - r->nbytes;
    for (size_t i = 0; i < back; i++) {
        if (end[i] != KV_GUARD_PATTERN) {
            if (msg && cap > 0)
                snprintf(msg, (size_t)cap, "back redzone of a %zu-byte block written at byte %zu past its end", r->nbytes,
                         i);
            return 1;
        }
    }
    return 0;
}

static void *guard_alloc(void *context, size_t nbytes) {
    (void)context;
    const size_t body = (nbytes + 63u) & ~(size_t)63u;
    if (body < nbytes || body > SIZE_MAX - 2 * KV_GUARD_REDZONE) return NULL;
    const size_t total = body + 2 * KV_GUARD_REDZONE;
    guard_rec *r = malloc(sizeof *r);
    if (r == NULL) return NULL;
    r->base = aligned_alloc(64, total);
    if (r->base == NULL) {
        free(r);
        return NULL;
    }
    r->user = r->base + KV_GUARD_REDZONE;
    r->nbytes = nbytes;
    r->total = total;
    memset(r->base, KV_GUARD_PATTERN, KV_GUARD_REDZONE);
    memset(r->user + nbytes, KV_GUARD_PATTERN, total - KV_GUARD_REDZONE - nbytes);
    pthread_mutex_lock(&guard_lock);
    memset(r->user, guard_poison, nbytes);
    r->epoch = guard_epoch;
    r->next = guard_live;
    guard_live = r;
    pthread_mutex_unlock(&guard_lock);
    return r->user;
}

static void guard_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    (void)nbytes;
    if (ptr == NULL) return;
    pthread_mutex_lock(&guard_lock);
    guard_rec **pp = &guard_live;
    while (*pp && (*pp)->user != ptr) pp = &(*pp)->next;
    guard_rec *r = *pp;
    if (r == NULL) {
        /* Not ours: a double free or a foreign pointer. Freeing it would
         * corrupt the heap; recording it is all that is safe. */
        if (guard_free_damaged++ == 0)
            snprintf(guard_free_msg, sizeof guard_free_msg, "free of a pointer the guard did not allocate (double free?)");
        pthread_mutex_unlock(&guard_lock);
        return;
    }
    *pp = r->next;
    char msg[200];
    if (guard_inspect(r, msg, (int)sizeof msg)) {
        if (guard_free_damaged++ == 0) snprintf(guard_free_msg, sizeof guard_free_msg, "on free: %s", msg);
    }
    pthread_mutex_unlock(&guard_lock);
    free(r->base);
    free(r);
}

static const kv_allocator_iface guard_iface = { guard_alloc, guard_free };

void kv_guard_begin(uint8_t poison) {
    pthread_mutex_lock(&guard_lock);
    guard_epoch++;
    guard_poison = poison;
    guard_free_damaged = 0;
    guard_free_msg[0] = '\0';
    pthread_mutex_unlock(&guard_lock);
    kv_allocator_install(KV_DEVICE_CPU, &guard_iface, &guard_context);
}

void kv_guard_set_poison(uint8_t poison) {
    pthread_mutex_lock(&guard_lock);
    guard_poison = poison;
    pthread_mutex_unlock(&guard_lock);
}

void kv_guard_end(void) { kv_allocator_install(KV_DEVICE_CPU, kv_allocator_cpu_iface(), NULL); }

int64_t kv_guard_live_blocks(void) {
    int64_t n = 0;
    pthread_mutex_lock(&guard_lock);
    for (const guard_rec *r = guard_live; r; r = r->next) n += r->epoch == guard_epoch;
    pthread_mutex_unlock(&guard_lock);
    return n;
}

int64_t kv_guard_live_bytes(void) {
    int64_t n = 0;
    pthread_mutex_lock(&guard_lock);
    for (const guard_rec *r = guard_live; r; r = r->next)
        if (r->epoch == guard_epoch) n += (int64_t)r->nbytes;
    pthread_mutex_unlock(&guard_lock);
    return n;
}

int kv_guard_check_block(const void *ptr, char *msg, int cap) {
    int res = -1;
    pthread_mutex_lock(&guard_lock);
    for (const guard_rec *r = guard_live; r; r = r->next) {
        if (r->user == ptr) {
            res = guard_inspect(r, msg, cap);
            break;
        }
    }
    pthread_mutex_unlock(&guard_lock);
    return res;
}

int kv_guard_check_all(char *msg, int cap) {
    int n = 0;
    pthread_mutex_lock(&guard_lock);
    for (const guard_rec *r = guard_live; r; r = r->next) {
        if (r->epoch != guard_epoch) continue;
        if (guard_inspect(r, n == 0 ? msg : NULL, cap)) n++;
    }
    pthread_mutex_unlock(&guard_lock);
    return n;
}

int kv_guard_free_damage(char *msg, int cap) {
    pthread_mutex_lock(&guard_lock);
    const int n = guard_free_damaged;
    if (msg && cap > 0) snprintf(msg, (size_t)cap, "%s", guard_free_msg);
    pthread_mutex_unlock(&guard_lock);
    return n;
}
