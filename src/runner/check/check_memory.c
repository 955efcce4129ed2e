/* The memory check: the case runs twice under the guarded CPU allocator
 * (runner/guard_alloc.h), once with new memory poisoned 0x00 and once
 * 0xFF. It fails when
 *   - a redzone around an output, an input or any other block is damaged
 *     (checked while the outputs are alive, naming them, and again as
 *     every block is freed);
 *   - an output element differs between the two runs: the kernel did not
 *     write it, so it kept the poison (skipped for ops whose values are
 *     unspecified, like empty);
 *   - an input's storage bytes changed (except arguments the schema marks
 *     as written, (a!)); the whole storage is compared, layout gaps too;
 *   - storage is still live after everything was released: a leak.
 * Expected-error cases run the same way: the call must fail without
 * leaking, damaging or modifying anything.
 *
 * The inputs are made under the guard too (their fill overwrites the
 * poison), so they get redzones.
 *
 * Every backend, not only the CPU: a cpu case also runs, for each backend
 * with a kernel of its own for the op, one "memory:<Key>" row with the
 * inputs on that backend and the kernel called on its key alone. The
 * guard then wraps the backend's allocator too (runner/guard_alloc.h:
 * blocks allocated larger through its ABI mem ops, redzones and poison
 * written and read back through its copies), inputs are copied back and
 * compared after the call, outputs are copied back for the two-run
 * comparison, and allocations through the ABI are counted: a block of
 * the backend's memory still live at the end is a leak naming the
 * backend. A kernel that declines the call (KV_ERR_MISSING_KERNEL) is
 * UNSUPPORTED there, as in the variants check. A device=accel case is
 * SKIP: its target's kernels get their own rows in the cpu twin. */
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/backend.h"
#include "runner/check/check_util.h"
#include "runner/check/row_select.h"
#include "runner/exec/guard_alloc.h"
#include "runner/exec/inflight.h"
#include "runner/exec/sigstate.h"
#include "runner/check/tolerance.h"

#define MEM_POISON_A 0x00
#define MEM_POISON_B 0xFF
/* Host heap growth per identical call that counts as a plugin leaking host
 * memory: past any one-time cache a kernel may fill on a new shape (those
 * stop growing after the first call), well under what a leak of one
 * output-sized buffer per call is on the suite's larger cases. */
#define MEM_HOST_LEAK_MIN (1 << 20)
/* glibc's initial mmap threshold (M_MMAP_THRESHOLD, 128 KiB): smaller
 * blocks come from the heap, never from a mapping of their own. */
#define MEM_MMAP_MIN (128 * 1024)

/* Bytes of host heap in use (glibc: arena chunks plus mmapped blocks),
 * exact, independent of fragmentation. */
static int64_t mem_host_heap(void) {
    const struct mallinfo2 mi = mallinfo2();
    return (int64_t)(mi.uordblks + mi.hblkhd);
}

/* Open file descriptors and memory mappings of this process (Linux
 * /proc; -1 when it cannot be read, which turns the comparison off). */
static int64_t mem_count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (d == NULL) return -1;
    int64_t n = 0;
    for (const struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n; /* the listing's own descriptor is counted every time */
}

/* A sanitizer's runtime maps its shadow and allocator regions lazily, as
 * the program first touches them: under ASan or TSan a new mapping after
 * a kernel call says nothing about the kernel, so the count is off there
 * (-1), as where /proc cannot be read. Valgrind keeps its own mappings out
 * of /proc/self/maps, and the normal build is what judges plugins. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KV_MEM_MAPS_COUNTED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KV_MEM_MAPS_COUNTED 0
#endif
#endif
#ifndef KV_MEM_MAPS_COUNTED
#define KV_MEM_MAPS_COUNTED 1
#endif

/* Read in blocks, not a getc per byte: a worker that set OpenCL up (PoCL,
 * LLVM) has some 500 mappings, 50 KB of text, and three counts per
 * memory row made getc's locked calls 59% of the OpenCL backend's time on
 * cases/binary.case. */
static int64_t mem_count_maps(void) {
    if (!KV_MEM_MAPS_COUNTED) return -1;
    const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int64_t n = 0;
    /* One page: the kernel hands /proc's text over about a page per read
     * anyway, and a larger stack buffer is a new stack page that a worker
     * at its KV_WORKER_MEM cap cannot map (a SIGSEGV instead of the
     * ERROR row tests/ci/write_errors.sh expects). */
    char buf[4096];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0)
        for (const char *p = buf, *end = buf + got; (p = memchr(p, '\n', (size_t)(end - p))) != NULL; p++) n++;
    close(fd);
    return got < 0 ? -1 : n;
}

static void mem_fail(kv_check_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mem_fail(kv_check_result *r, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* Both runs usually find the same problem: say it once. */
    if (r->status != KV_RESULT_PASS && strstr(r->message, text) != NULL) return;
    if (r->status == KV_RESULT_PASS) kv_check_result_set(r, KV_RESULT_FAIL, "%s", text);
    else kv_check_result_append(r, "; %s", text);
}

static bool mem_next(int64_t *idx, const int64_t *sizes, int nd) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* The output's element bytes, row-major, in a new buffer (NULL for an
 * empty or non-host tensor). */
static unsigned char *mem_logical_bytes(const kv_tensor *dev_t, size_t *len) {
    *len = 0;
    if (kv_tensor_numel(dev_t) == 0) return NULL;
    /* Device outputs come back through the backend's copies. */
    kv_tensor *t = kv_backend_readable(dev_t);
    if (t == NULL) return NULL;
    const int64_t numel = kv_tensor_numel(t);
    const size_t item = kv_dtype_size(t->dtype);
    unsigned char *buf = malloc((size_t)numel * item);
    if (buf == NULL) {
        kv_tensor_release(t);
        return NULL;
    }
    int64_t idx[KV_MAX_DIMS] = { 0 };
    size_t k = 0;
    do {
        memcpy(buf + k * item, kv_tensor_element(t, idx), item);
        k++;
    } while (mem_next(idx, t->sizes, t->ndim));
    *len = k * item;
    kv_tensor_release(t);
    return buf;
}

/* A host copy of t's whole storage (gaps included), or NULL. */
static unsigned char *mem_storage_bytes(const kv_tensor *t) {
    const size_t n = t->storage->nbytes;
    unsigned char *buf = malloc(n ? n : 1);
    if (buf == NULL) return NULL;
    if (kv_tensor_data(t) != NULL) memcpy(buf, t->storage->data, n);
    else if (n > 0 && kv_backend_mem_read(t->storage->device.type, buf, t->storage->data, n) != KV_OK) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* Where one memory row runs: the device its inputs live on, the key set
 * of the call (0: kv_call, the case's own row), and how messages name it
 * ("" for the case's own row, else "on <Key>: "). */
typedef struct mem_target {
    kv_device dev;
    kv_keyset ks;
    char who[KV_CASE_TEXT_MAX + 48];
} mem_target;

typedef struct mem_run {
    kv_status status;                           /* of the call */
    int nout;
    unsigned char *bytes[KV_CASE_MAX_OUTPUTS];  /* logical output bytes */
    size_t len[KV_CASE_MAX_OUTPUTS];
    kv_tensor meta[KV_CASE_MAX_OUTPUTS];        /* geometry only (no storage) for messages */
} mem_run;

static void mem_run_free(mem_run *m) {
    for (int i = 0; i < KV_CASE_MAX_OUTPUTS; i++) free(m->bytes[i]);
    memset(m, 0, sizeof *m);
}

/* One run; problems go into r. false when the run could not happen. */
static bool mem_one_run(const kv_check_ctx *ctx, const mem_target *tg, uint8_t poison, mem_run *m,
                        kv_check_result *r) {
    const kv_case *c = ctx->c;
    const kv_schema *s = kv_op_schema(ctx->op);
    kv_guard_set_poison(poison);
    kv_case_inputs in;
    if (kv_case_inputs_make(c, ctx->op, tg->dev, false, &in) != KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "cannot build the inputs: %s", kv_last_error_message());
        return false;
    }
    unsigned char *snap[KV_CASE_MAX_INPUTS] = { NULL };
    for (int i = 0; i < in.ntensors; i++) {
        const kv_tensor *t = in.tensors[i];
        /* Written: a mutated argument, and the input an aliased out is. */
        if (t == NULL || kv_check_arg_is_mutated(ctx->op, c->input_arg[i]) || c->out_alias == i + 1) continue;
        snap[i] = mem_storage_bytes(t);
    }
    kv_case_outputs out;
    m->status = kv_case_invoke(ctx->op, &in, tg->ks, &out);
    char msg[256];
    if (m->status == KV_OK) {
        m->nout = out.n;
        for (int j = 0; j < out.n; j++) {
            const kv_tensor *t = out.t[j];
            if (kv_guard_check_block(t->storage->data, msg, (int)sizeof msg) == 1)
                mem_fail(r, "%soutput %d: %s%s", tg->who, j,
                         strstr(msg, "front redzone") ? "the kernel wrote before its output: " : "", msg);
            m->bytes[j] = mem_logical_bytes(t, &m->len[j]);
            m->meta[j] = *t;
            m->meta[j].storage = NULL;
        }
    } else if (m->status == KV_ERR_MISSING_KERNEL && tg->ks != 0) {
        kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "the %s kernel declined the call: %s",
                            kv_key_name(kv_device_key(tg->dev)), kv_last_error_message());
    } else if (c->expect == KV_OK) {
        kv_check_result_set(r, KV_RESULT_ERROR, "%sthe call failed with '%s': %s", tg->who, kv_status_name(m->status),
                            kv_last_error_message());
    }
    for (int i = 0; i < in.ntensors; i++) {
        const kv_tensor *t = in.tensors[i];
        if (t == NULL) continue;
        const char *arg = s->args[c->input_arg[i]].name;
        if (kv_guard_check_block(t->storage->data, msg, (int)sizeof msg) == 1)
            mem_fail(r, "%sinput %d ('%s'): %s", tg->who, i, arg, msg);
        if (snap[i] == NULL) continue;
        unsigned char *now = mem_storage_bytes(t);
        for (size_t b = 0; now != NULL && b < t->storage->nbytes; b++) {
            if (now[b] != snap[i][b]) {
                mem_fail(r, "%sinput %d ('%s') was modified by the call: storage byte %zu (element %zu) changed from "
                            "0x%02X to 0x%02X",
                         tg->who, i, arg, b, b / kv_dtype_size(t->dtype), snap[i][b], now[b]);
                break;
            }
        }
        free(now);
        free(snap[i]);
    }
    /* Blocks that are neither inputs nor outputs (a kernel's scratch
     * still alive); only when the named ones were intact, to report each
     * damage once. */
    const bool named_damage = strstr(r->message, "redzone") != NULL;
    const int other = named_damage ? 0 : kv_guard_check_all(msg, (int)sizeof msg);
    if (other > 0) mem_fail(r, "%s%d live block%s damaged: %s", tg->who, other, other == 1 ? "" : "s", msg);
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&in);
    return true;
}

/* Elements that differ between the two runs: unwritten by the kernel. */
/* Whether two runs' outputs differ anywhere. */
static bool mem_runs_differ(const mem_run *a, const mem_run *b) {
    if (a->nout != b->nout) return true;
    for (int j = 0; j < a->nout; j++)
        if (a->len[j] != b->len[j] || (a->len[j] > 0 && memcmp(a->bytes[j], b->bytes[j], a->len[j]) != 0)) return true;
    return false;
}

/* `nondet`: a and b ran with the same poison, so a difference is the
 * kernel's nondeterminism, not unwritten elements. */
static void mem_compare_runs(const mem_target *tg, const mem_run *a, const mem_run *b, bool nondet, kv_check_result *r) {
    if (a->nout != b->nout) {
        mem_fail(r, "%sthe two runs returned %d and %d outputs", tg->who, a->nout, b->nout);
        return;
    }
    for (int j = 0; j < a->nout; j++) {
        const kv_tensor *t = &a->meta[j];
        if (a->len[j] != b->len[j]) {
            mem_fail(r, "%soutput %d: the two runs returned different sizes", tg->who, j);
            continue;
        }
        const size_t item = kv_dtype_size(t->dtype);
        int64_t count = 0, first = -1;
        for (size_t k = 0; k < a->len[j] / item; k++) {
            if (memcmp(a->bytes[j] + k * item, b->bytes[j] + k * item, item) != 0) {
                if (first < 0) first = (int64_t)k;
                count++;
            }
        }
        if (count == 0) continue;
        int64_t idx[KV_MAX_DIMS], rem = first;
        for (int d = t->ndim - 1; d >= 0; d--) {
            idx[d] = rem % t->sizes[d];
            rem /= t->sizes[d];
        }
        char at[KV_MAX_DIMS * 24];
        kv_shape_format(idx, t->ndim, at, (int)sizeof at);
        if (nondet)
            mem_fail(r,
                     "%snondeterministic: two identical calls (poison 0x%02X both times) gave different results in "
                     "%lld element%s of output %d, first at %s",
                     tg->who, MEM_POISON_B, (long long)count, count == 1 ? "" : "s", j, at);
        else
            mem_fail(r,
                     "%soutput %d: %lld element%s not written by the kernel (they differ between poison 0x%02X and "
                     "0x%02X), first at %s",
                     tg->who, j, (long long)count, count == 1 ? "" : "s", MEM_POISON_A, MEM_POISON_B, at);
    }
}

/* The mem ops no kernel call reaches on its own: copy_on_device and
 * memset, each run on two fresh blocks of the backend's memory and read
 * back through copy_to_host. MEM_OPS_BYTES is odd so that a copy that
 * stops at half, a word or a vector width leaves bytes unwritten. */
#define MEM_OPS_BYTES 1027
#define MEM_OPS_BYTE 0x5C /* what memset is asked for: neither poison nor 0 */

/* "" when byte k of got is want[k] (or `fill` when want is NULL) for
 * every k; else describes the first that is not, in msg. */
static bool mem_ops_same(const unsigned char *got, const unsigned char *want, int fill, char *msg, int cap) {
    size_t bad = 0, first = MEM_OPS_BYTES;
    for (size_t k = 0; k < MEM_OPS_BYTES; k++) {
        const unsigned char w = want ? want[k] : (unsigned char)fill;
        if (got[k] != w) {
            if (first == MEM_OPS_BYTES) first = k;
            bad++;
        }
    }
    if (bad == 0) return true;
    snprintf(msg, (size_t)cap, "%zu of %d bytes wrong, first at byte %zu (0x%02X, expected 0x%02X)", bad,
             MEM_OPS_BYTES, first, got[first], want ? want[first] : (unsigned)fill);
    return false;
}

static void mem_ops_probe(kv_device_type dt, const char *who, kv_check_result *r) {
    const kv_device dev = { dt, 0 };
    kv_storage *a = kv_storage_new(MEM_OPS_BYTES, dev), *b = kv_storage_new(MEM_OPS_BYTES, dev);
    unsigned char src[MEM_OPS_BYTES], got[MEM_OPS_BYTES];
    char msg[160];
    const char *name = kv_device_type_name(dt);
    if (a == NULL || b == NULL) {
        mem_fail(r, "%scannot allocate two %d-byte blocks of %s memory to check its mem ops: %s", who, MEM_OPS_BYTES,
                 name, kv_last_error_message());
        goto done;
    }
    for (size_t k = 0; k < MEM_OPS_BYTES; k++) src[k] = (unsigned char)(k * 131u + 7u);
    memset(got, 0, sizeof got);
    /* b starts as the complement, so nothing copy_on_device skips can
     * match by chance. */
    unsigned char inv[MEM_OPS_BYTES];
    for (size_t k = 0; k < MEM_OPS_BYTES; k++) inv[k] = (unsigned char)~src[k];
    if (kv_backend_mem_write(dt, a->data, src, MEM_OPS_BYTES) != KV_OK ||
        kv_backend_mem_write(dt, b->data, inv, MEM_OPS_BYTES) != KV_OK) {
        mem_fail(r, "%s%s mem.copy_to_device failed: %s", who, name, kv_last_error_message());
        goto done;
    }
    if (kv_backend_mem_copy(dt, b->data, a->data, MEM_OPS_BYTES) != KV_OK)
        mem_fail(r, "%s%s mem.copy_on_device failed: %s", who, name, kv_last_error_message());
    else if (kv_backend_mem_read(dt, got, b->data, MEM_OPS_BYTES) != KV_OK)
        mem_fail(r, "%s%s mem.copy_to_host failed: %s", who, name, kv_last_error_message());
    else if (!mem_ops_same(got, src, 0, msg, (int)sizeof msg))
        mem_fail(r, "%sbackend %s: mem.copy_on_device of %d bytes did not copy them: %s", who, name, MEM_OPS_BYTES,
                 msg);
    if (kv_backend_mem_set(dt, a->data, MEM_OPS_BYTE, MEM_OPS_BYTES) != KV_OK)
        mem_fail(r, "%s%s mem.memset failed: %s", who, name, kv_last_error_message());
    else if (kv_backend_mem_read(dt, got, a->data, MEM_OPS_BYTES) != KV_OK)
        mem_fail(r, "%s%s mem.copy_to_host failed: %s", who, name, kv_last_error_message());
    else if (!mem_ops_same(got, NULL, MEM_OPS_BYTE, msg, (int)sizeof msg))
        mem_fail(r, "%sbackend %s: mem.memset of %d bytes to 0x%02X did not set them: %s", who, name, MEM_OPS_BYTES,
                 MEM_OPS_BYTE, msg);
done:
    if (a != NULL) kv_storage_release(a);
    if (b != NULL) kv_storage_release(b);
}

/* One memory row: two guarded runs on the target. */
static void mem_row(const kv_check_ctx *ctx, const mem_target *tg, const char *check) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    const kv_device_type dt = tg->dev.type;
    kv_check_result_begin(&r, ctx, check, kv_device_type_name(dt));
    kv_inflight_set_check(check);
    const kv_tol_entry *e = kv_tol_lookup(c->op, r.dtype, c);
    const bool unspecified = e != NULL && e->uninitialized;
    const int64_t live0 = kv_allocator_stats_of(KV_DEVICE_CPU).live_count;
    const int64_t dev0 = kv_allocator_stats_of(dt).live_count;
    mem_run runs[2];
    memset(runs, 0, sizeof runs);
    kv_guard_begin(MEM_POISON_A);
    if (dt != KV_DEVICE_CPU && kv_guard_add_device(dt) != KV_OK) {
        kv_guard_end();
        kv_check_result_set(&r, KV_RESULT_ERROR, "cannot guard %s memory: %s", kv_device_type_name(dt),
                            kv_last_error_message());
        kv_check_push(ctx, &r);
        return;
    }
    /* A plugin's kernel that mallocs host memory and keeps it (a staging
     * buffer never freed) is invisible to the allocator counts: the host
     * heap is measured around each run, less the output copies the run
     * keeps, and must not grow by the same large amount both times (a
     * one-time cache grows only on the first call). */
    /* Only a backend's row judges these (the tests below): the CPU rows,
     * most of the suite's, skip the three /proc reads per count. */
    const bool counted = dt != KV_DEVICE_CPU;
    int64_t heap[3] = { 0, 0, 0 }, fds[3] = { -1, -1, -1 }, maps[3] = { -1, -1, -1 };
    kv_sigstate sig0 = { .ok = false };
    if (dt != KV_DEVICE_CPU) kv_sigstate_read(&sig0);
    if (counted) {
        heap[0] = mem_host_heap();
        fds[0] = mem_count_entries("/proc/self/fd");
        maps[0] = mem_count_maps();
    }
    bool ran = mem_one_run(ctx, tg, MEM_POISON_A, &runs[0], &r);
    /* Keeps run 1's freed device blocks (kv_guard_release_freed). */
    char stale_msg[256];
    int stale = kv_guard_release_freed(false, stale_msg, (int)sizeof stale_msg);
    if (counted) {
        heap[1] = mem_host_heap();
        fds[1] = mem_count_entries("/proc/self/fd");
        maps[1] = mem_count_maps();
    }
    const bool go_on = r.status != KV_RESULT_ERROR && r.status != KV_RESULT_UNSUPPORTED;
    if (ran && go_on) ran = mem_one_run(ctx, tg, MEM_POISON_B, &runs[1], &r);
    /* Gives back run 1's, where a kernel that kept a pointer from run 1's
     * call wrote in run 2, and keeps run 2's: the heap and mapping counts
     * below see one run's kept blocks each time. */
    if (stale == 0) stale = kv_guard_release_freed(false, stale_msg, (int)sizeof stale_msg);
    else (void)kv_guard_release_freed(false, NULL, 0);
    /* Descriptors and mappings, like the heap: the same growth over two
     * identical calls is what the kernel keeps per call. A kept output
     * copy of MEM_MMAP_MIN bytes or more may be one mapping of its own
     * (glibc mmaps large blocks), so each such copy is allowed one. */
    int64_t kept_maps[2] = { 0, 0 };
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < runs[k].nout; j++) kept_maps[k] += runs[k].len[j] >= MEM_MMAP_MIN;
    if (counted) {
        heap[2] = mem_host_heap();
        fds[2] = mem_count_entries("/proc/self/fd");
        /* Growth over the first call alone never fails the test below, so
         * the third read (about 1 ms in a PoCL worker: the kernel formats
         * every mapping's path) is only made when the first call grew. */
        if (maps[0] >= 0 && maps[1] >= 0 && maps[1] - maps[0] > kept_maps[0]) maps[2] = mem_count_maps();
    }
    if (ran && go_on && dt != KV_DEVICE_CPU && runs[1].status == KV_OK && fds[0] >= 0 && fds[1] >= 0 &&
        fds[2] >= 0 && fds[1] > fds[0] && fds[2] > fds[1])
        mem_fail(&r,
                 "%sfile descriptors leaked: %lld and %lld more open after each of two identical calls of the %s "
                 "kernel (descriptors it opens and never closes; the process runs out of them)",
                 tg->who, (long long)(fds[1] - fds[0]), (long long)(fds[2] - fds[1]), kv_device_type_name(dt));
    if (ran && go_on && dt != KV_DEVICE_CPU && runs[1].status == KV_OK && maps[0] >= 0 && maps[1] >= 0 &&
        maps[2] >= 0 && maps[1] - maps[0] > kept_maps[0] && maps[2] - maps[1] > kept_maps[1])
        mem_fail(&r,
                 "%smemory mappings leaked: %lld and %lld more mappings after each of two identical calls of the %s "
                 "kernel (mappings it makes and never unmaps)",
                 tg->who, (long long)(maps[1] - maps[0]), (long long)(maps[2] - maps[1]), kv_device_type_name(dt));
    if (ran && go_on && dt != KV_DEVICE_CPU && runs[1].status == KV_OK) {
        int64_t grew[2];
        for (int k = 0; k < 2; k++) {
            grew[k] = heap[k + 1] - heap[k];
            for (int j = 0; j < runs[k].nout; j++) grew[k] -= (int64_t)runs[k].len[j];
        }
        if (grew[0] >= MEM_HOST_LEAK_MIN && grew[1] >= MEM_HOST_LEAK_MIN)
            mem_fail(&r,
                     "%shost memory leaked: the heap grew by %lld and %lld bytes over the two identical calls of "
                     "the %s kernel, beyond the output copies kept (memory it keeps per call)",
                     tg->who, (long long)grew[0], (long long)grew[1], kv_device_type_name(dt));
    }
    if (ran && go_on && runs[0].status == KV_OK && runs[1].status == KV_OK && !unspecified &&
        mem_runs_differ(&runs[0], &runs[1])) {
        /* Unwritten elements follow the poison; a nondeterministic kernel
         * differs even under the same poison: a third run tells which. */
        mem_run again;
        memset(&again, 0, sizeof again);
        if (mem_one_run(ctx, tg, MEM_POISON_B, &again, &r) && again.status == KV_OK &&
            mem_runs_differ(&runs[1], &again))
            mem_compare_runs(tg, &runs[1], &again, true, &r);
        else
            mem_compare_runs(tg, &runs[0], &runs[1], false, &r);
        mem_run_free(&again);
    }
    char msg[256];
    if (dt != KV_DEVICE_CPU && !kv_sigstate_check_restore(&sig0, msg, (int)sizeof msg))
        mem_fail(&r,
                 "%sthe %s kernel of %s changed %s and did not restore it (a kernel must leave signal handlers and "
                 "the signal mask as it found them)",
                 tg->who, c->op, kv_device_type_name(dt), msg);
    if (stale == 0) stale = kv_guard_release_freed(true, stale_msg, (int)sizeof stale_msg);
    else (void)kv_guard_release_freed(true, NULL, 0);
    if (stale > 0)
        mem_fail(&r,
                 "%s%d block%s of %s memory written after the call that freed %s returned: %s (a kernel kept a "
                 "pointer to an earlier call's tensor and wrote through it)",
                 tg->who, stale, stale == 1 ? "" : "s", kv_device_type_name(dt), stale == 1 ? "it" : "them",
                 stale_msg);
    const int damaged = kv_guard_free_damage(msg, (int)sizeof msg);
    if (damaged > 0) mem_fail(&r, "%s%d block%s damaged %s", tg->who, damaged, damaged == 1 ? "" : "s", msg);
    const int64_t leaked_dev = dt != KV_DEVICE_CPU ? kv_guard_live_blocks_of(dt) : 0;
    const int64_t leaked_dev_bytes = dt != KV_DEVICE_CPU ? kv_guard_live_bytes_of(dt) : 0;
    const int64_t leaked = kv_guard_live_blocks_of(KV_DEVICE_CPU),
                  leaked_bytes = kv_guard_live_bytes_of(KV_DEVICE_CPU);
    /* Leaked blocks are never freed, so verify them here. */
    const int leaked_damaged = leaked + leaked_dev > 0 ? kv_guard_check_all(msg, (int)sizeof msg) : 0;
    if (leaked_damaged > 0) mem_fail(&r, "%sa leaked block is damaged: %s", tg->who, msg);
    kv_guard_end();
    const int64_t live1 = kv_allocator_stats_of(KV_DEVICE_CPU).live_count;
    const int64_t dev1 = kv_allocator_stats_of(dt).live_count;
    if (leaked > 0 || live1 != live0)
        mem_fail(&r, "%sstorage leaked: %lld block%s (%lld bytes) still live after both runs released everything",
                 tg->who, (long long)(leaked > live1 - live0 ? leaked : live1 - live0), (leaked == 1) ? "" : "s",
                 (long long)leaked_bytes);
    if (dt != KV_DEVICE_CPU && (leaked_dev > 0 || dev1 != dev0))
        mem_fail(&r,
                 "%s%s memory leaked: %lld block%s (%lld bytes) allocated through the backend's ABI still live "
                 "after both runs released everything",
                 tg->who, kv_device_type_name(dt), (long long)(leaked_dev > 0 ? leaked_dev : dev1 - dev0),
                 leaked_dev == 1 ? "" : "s", (long long)leaked_dev_bytes);
    if (dt != KV_DEVICE_CPU && ran && go_on) mem_ops_probe(dt, tg->who, &r);
    if (r.status == KV_RESULT_PASS) {
        int64_t n = 0;
        for (int j = 0; j < runs[0].nout; j++)
            n += runs[0].len[j] / (kv_dtype_size(runs[0].meta[j].dtype) ? kv_dtype_size(runs[0].meta[j].dtype) : 1);
        r.compared = n;
        kv_check_result_set(&r, KV_RESULT_PASS,
                            "2 runs (poison 0x%02X, 0x%02X): redzones intact, %s, inputs unchanged, no leak", MEM_POISON_A,
                            MEM_POISON_B,
                            c->expect != KV_OK ? "the call failed as expected"
                            : unspecified     ? "values unspecified (not checked for unwritten elements)"
                                              : "every output element written");
    }
    mem_run_free(&runs[0]);
    mem_run_free(&runs[1]);
    kv_check_push(ctx, &r);
}

/* Whether any op has a Dense kernel on `key` (as in the variants sweep). */
static bool mem_is_kernel_backend(kv_key key) {
    for (int i = 0; i < kv_op_count(); i++)
        if (kv_op_entry_kind(kv_op_at(i), key) == KV_ENTRY_KERNEL) return true;
    return false;
}

void kv_check_memory_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    if (c->device.type == KV_DEVICE_ACCEL) {
        kv_check_result r;
        kv_check_result_begin(&r, ctx, "memory", NULL);
        kv_check_result_set(&r, KV_RESULT_SKIP,
                            "device=accel: the target's kernels get their own memory:<Key> rows in the cpu case");
        kv_check_push(ctx, &r);
        return;
    }
    mem_target own = { c->device, 0, "" };
    /* --only-backend: a row that would be dropped is not run (row_select.h). */
    if (kv_row_select_backend(kv_device_type_name(c->device.type))) mem_row(ctx, &own, "memory");
    if (c->device.type != KV_DEVICE_CPU) return;
    for (int k = 0; k < KV_BACKEND_KEY_COUNT; k++) {
        if (k == KV_KEY_CPU || k == KV_KEY_ACCEL || kv_allocator_for((kv_device_type)k) == NULL) continue;
        if (!mem_is_kernel_backend((kv_key)k) || kv_op_entry_kind(ctx->op, (kv_key)k) != KV_ENTRY_KERNEL) continue;
        if (kv_inflight_excluded() & kv_keyset_of((kv_key)k)) continue; /* it crashed this case: the rerun */
        if (!kv_row_select_backend(kv_device_type_name((kv_device_type)k))) continue;
        mem_target tg = { { (kv_device_type)k, 0 }, kv_keyset_of((kv_key)k), "" };
        snprintf(tg.who, sizeof tg.who, "%s on %s: ", c->op, kv_key_name((kv_key)k));
        char check[48];
        snprintf(check, sizeof check, "memory:%s", kv_key_name((kv_key)k));
        mem_row(ctx, &tg, check);
    }
}
