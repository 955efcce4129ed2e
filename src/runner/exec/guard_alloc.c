/* The guarded allocator (runner/guard_alloc.h), for CPU memory and for
 * backends' memory.
 *
 * Block bookkeeping lives in separately allocated records, not in a
 * header before the block: a kernel that writes far before its output
 * could otherwise corrupt the list that is needed to report it. Lookups
 * are linear; a case has a handful of live blocks.
 *
 * CPU blocks come from aligned_alloc and are read and written directly.
 * Device blocks come from the backend's own allocator (the one installed
 * before the guard) and are only ever touched through the backend's
 * copies, so a backend whose memory the host cannot dereference (SIM, a
 * GPU) is guarded exactly like the host. */
#include "runner/exec/guard_alloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/backend.h"

typedef struct guard_rec {
    unsigned char *base;   /* aligned_alloc result, or the device address the backend returned */
    unsigned char *user;   /* base + KV_GUARD_REDZONE */
    size_t nbytes;         /* requested */
    size_t total;          /* allocated */
    uint64_t epoch;
    kv_device_type type;   /* whose memory */
    uint64_t freed_gen;    /* kept after its free: the kv_guard_release_freed call it came after */
    struct guard_rec *next;
} guard_rec;

/* One per device type: the allocator context identifies the type, and
 * `inner` is the backend allocator the guard wraps (NULL for the CPU). */
typedef struct guard_dev {
    kv_device_type type;
    kv_allocator *inner;
    bool added;
} guard_dev;

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static guard_rec *guard_live;
static uint64_t guard_epoch = 1;
static uint8_t guard_poison;
static int guard_free_damaged;
static char guard_free_msg[256];
static guard_dev guard_devs[KV_DEVICE_TYPE_COUNT];
/* Backend blocks freed while their device is guarded: kept, filled with
 * the pattern, until kv_guard_release_freed, so that a kernel writing
 * through a pointer it kept from an earlier call hits memory the guard
 * still owns and reads back, not a block the backend reused. */
static guard_rec *guard_freed;
static uint64_t guard_freed_gen;

#define GUARD_CHUNK 4096

/* Fills [dst, dst+n) of r's memory with `byte`. */
static kv_status guard_fill(const guard_rec *r, unsigned char *dst, int byte, size_t n) {
    if (r->type == KV_DEVICE_CPU) {
        memset(dst, byte, n);
        return KV_OK;
    }
    unsigned char buf[GUARD_CHUNK];
    memset(buf, byte, sizeof buf);
    for (size_t done = 0; done < n;) {
        const size_t k = n - done < sizeof buf ? n - done : sizeof buf;
        const kv_status st = kv_backend_mem_write(r->type, dst + done, buf, k);
        if (st != KV_OK) return st;
        done += k;
    }
    return KV_OK;
}

/* Index of the first byte of [p, p+n) of r's memory that is not the
 * pattern; n when all are; (size_t)-1 when it cannot be read. */
static size_t guard_scan(const guard_rec *r, const unsigned char *p, size_t n) {
    if (r->type == KV_DEVICE_CPU) {
        for (size_t i = 0; i < n; i++)
            if (p[i] != KV_GUARD_PATTERN) return i;
        return n;
    }
    unsigned char buf[GUARD_CHUNK];
    for (size_t done = 0; done < n;) {
        const size_t k = n - done < sizeof buf ? n - done : sizeof buf;
        if (kv_backend_mem_read(r->type, buf, p + done, k) != KV_OK) return (size_t)-1;
        for (size_t i = 0; i < k; i++)
            if (buf[i] != KV_GUARD_PATTERN) return done + i;
        done += k;
    }
    return n;
}

static const char *guard_where(const guard_rec *r) {
    return r->type == KV_DEVICE_CPU ? "" : kv_device_type_name(r->type);
}

/* Describes the first damaged byte of r's redzones; 0 when intact. */
static int guard_inspect(const guard_rec *r, char *msg, int cap) {
    const char *dev = guard_where(r);
    const char *sp = dev[0] ? " " : "";
    const size_t f = guard_scan(r, r->base, KV_GUARD_REDZONE);
    if (f == (size_t)-1) {
        if (msg && cap > 0)
            snprintf(msg, (size_t)cap, "cannot read the redzones of a %zu-byte %s block back: %s", r->nbytes, dev,
                     kv_last_error_message());
        return 1;
    }
    if (f < KV_GUARD_REDZONE) {
        if (msg && cap > 0)
            snprintf(msg, (size_t)cap, "front redzone of a %zu-byte%s%s block written at byte %td before its start",
                     r->nbytes, sp, dev, (ptrdiff_t)(KV_GUARD_REDZONE - f));
        return 1;
    }
    const size_t back = r->total - KV_GUARD_REDZONE - r->nbytes;
    const size_t b = guard_scan(r, r->user + r->nbytes, back);
    if (b != back) {
        if (msg && cap > 0) {
            if (b == (size_t)-1)
                snprintf(msg, (size_t)cap, "cannot read the back redzone of a %zu-byte %s block: %s", r->nbytes, dev,
                         kv_last_error_message());
            else
                snprintf(msg, (size_t)cap, "back redzone of a %zu-byte%s%s block written at byte %zu past its end",
                         r->nbytes, sp, dev, b);
        }
        return 1;
    }
    return 0;
}

static void *guard_alloc(void *context, size_t nbytes) {
    const guard_dev *d = context;
    const size_t body = (nbytes + 63u) & ~(size_t)63u;
    if (body < nbytes || body > SIZE_MAX - 2 * KV_GUARD_REDZONE) return NULL;
    const size_t total = body + 2 * KV_GUARD_REDZONE;
    guard_rec *r = malloc(sizeof *r);
    if (r == NULL) return NULL;
    r->type = d->type;
    r->base = d->type == KV_DEVICE_CPU ? aligned_alloc(64, total) : kv_allocator_alloc(d->inner, total);
    if (r->base == NULL) {
        free(r);
        return NULL;
    }
    r->user = r->base + KV_GUARD_REDZONE;
    r->nbytes = nbytes;
    r->total = total;
    pthread_mutex_lock(&guard_lock);
    const uint8_t poison = guard_poison;
    pthread_mutex_unlock(&guard_lock);
    if (guard_fill(r, r->base, KV_GUARD_PATTERN, KV_GUARD_REDZONE) != KV_OK ||
        guard_fill(r, r->user + nbytes, KV_GUARD_PATTERN, total - KV_GUARD_REDZONE - nbytes) != KV_OK ||
        guard_fill(r, r->user, poison, nbytes) != KV_OK) {
        if (d->type == KV_DEVICE_CPU) free(r->base);
        else kv_allocator_free(d->inner, r->base, total);
        free(r);
        return NULL;
    }
    pthread_mutex_lock(&guard_lock);
    r->epoch = guard_epoch;
    r->next = guard_live;
    guard_live = r;
    pthread_mutex_unlock(&guard_lock);
    return r->user;
}

static void guard_free(void *context, void *ptr, size_t nbytes) {
    const guard_dev *d = context;
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
    const bool quarantine = r->type != KV_DEVICE_CPU && d->added;
    pthread_mutex_unlock(&guard_lock);
    if (quarantine && guard_fill(r, r->base, KV_GUARD_PATTERN, r->total) == KV_OK) {
        pthread_mutex_lock(&guard_lock);
        r->freed_gen = guard_freed_gen;
        r->next = guard_freed;
        guard_freed = r;
        pthread_mutex_unlock(&guard_lock);
        return;
    }
    if (r->type == KV_DEVICE_CPU) free(r->base);
    else kv_allocator_free(d->inner, r->base, r->total);
    free(r);
}

int kv_guard_release_freed(bool all, char *msg, int cap) {
    pthread_mutex_lock(&guard_lock);
    /* The blocks to give back: all, or those freed before the last call;
     * the rest stay kept. */
    guard_rec *list = NULL, **keep = &guard_freed;
    while (*keep != NULL) {
        guard_rec *r = *keep;
        if (all || r->freed_gen < guard_freed_gen) {
            *keep = r->next;
            r->next = list;
            list = r;
        } else {
            keep = &r->next;
        }
    }
    guard_freed_gen++;
    pthread_mutex_unlock(&guard_lock);
    int n = 0;
    if (msg && cap > 0) msg[0] = '\0';
    while (list != NULL) {
        guard_rec *r = list;
        list = r->next;
        const size_t at = guard_scan(r, r->base, r->total);
        if (at != r->total && at != (size_t)-1 && n++ == 0 && msg && cap > 0)
            snprintf(msg, (size_t)cap, "a %zu-byte %s block was written after it was freed, at byte %td of it",
                     r->nbytes, guard_where(r), (ptrdiff_t)at - KV_GUARD_REDZONE);
        kv_allocator_free(guard_devs[r->type].inner, r->base, r->total);
        free(r);
    }
    return n;
}

static const kv_allocator_iface guard_iface = { guard_alloc, guard_free };

void kv_guard_begin(uint8_t poison) {
    pthread_mutex_lock(&guard_lock);
    guard_epoch++;
    guard_poison = poison;
    guard_free_damaged = 0;
    guard_free_msg[0] = '\0';
    pthread_mutex_unlock(&guard_lock);
    guard_devs[KV_DEVICE_CPU].type = KV_DEVICE_CPU;
    kv_allocator_install(KV_DEVICE_CPU, &guard_iface, &guard_devs[KV_DEVICE_CPU]);
}

kv_status kv_guard_add_device(kv_device_type t) {
    if ((int)t <= (int)KV_DEVICE_CPU || t >= KV_DEVICE_TYPE_COUNT)
        return kv_error(KV_ERR_INVALID_ARG, "guard: argument 't': %d is not a device type other than cpu", (int)t);
    guard_dev *d = &guard_devs[t];
    if (d->added) return KV_OK;
    kv_allocator *inner = kv_allocator_for(t);
    if (inner == NULL)
        return kv_error(KV_ERR_DEVICE, "guard: device %s has no allocator to wrap", kv_device_type_name(t));
    d->type = t;
    d->inner = inner;
    d->added = true;
    kv_allocator_install(t, &guard_iface, d);
    return KV_OK;
}

void kv_guard_set_poison(uint8_t poison) {
    pthread_mutex_lock(&guard_lock);
    guard_poison = poison;
    pthread_mutex_unlock(&guard_lock);
}

void kv_guard_end(void) {
    kv_allocator_install(KV_DEVICE_CPU, kv_allocator_cpu_iface(), NULL);
    for (int t = KV_DEVICE_CPU + 1; t < KV_DEVICE_TYPE_COUNT; t++) {
        if (!guard_devs[t].added) continue;
        kv_allocator_reinstall((kv_device_type)t, guard_devs[t].inner);
        /* The record stays valid (inner) for blocks freed later. */
        guard_devs[t].added = false;
    }
}

static int64_t guard_count(int all_types, kv_device_type t, bool bytes) {
    int64_t n = 0;
    pthread_mutex_lock(&guard_lock);
    for (const guard_rec *r = guard_live; r; r = r->next)
        if (r->epoch == guard_epoch && (all_types || r->type == t)) n += bytes ? (int64_t)r->nbytes : 1;
    pthread_mutex_unlock(&guard_lock);
    return n;
}

int64_t kv_guard_live_blocks(void) { return guard_count(1, KV_DEVICE_CPU, false); }
int64_t kv_guard_live_bytes(void) { return guard_count(1, KV_DEVICE_CPU, true); }
int64_t kv_guard_live_blocks_of(kv_device_type t) { return guard_count(0, t, false); }
int64_t kv_guard_live_bytes_of(kv_device_type t) { return guard_count(0, t, true); }

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
