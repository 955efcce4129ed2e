/* A backend whose mul.Tensor is flaky, for the --retry test
 * (tests/ci/flaky.sh). Its first KV_TEST_FLAKY_FAILS calls (default 2),
 * counted across every process in the file KV_TEST_FLAKY_DIR/calls, add 1
 * to element 0; every later call is right. The count lives in a file, not
 * in memory, because each attempt of a case runs in a fresh forked worker;
 * two wrong calls cover the variants check's two identical calls, so the
 * first attempt fails as a plain wrong result (not as nondeterminism) and
 * the retry passes. Without KV_TEST_FLAKY_DIR the kernel is always right.
 * A huge KV_TEST_FLAKY_FAILS makes a kernel that never recovers.
 * KV_TEST_FLAKY_SLEEP_MS makes every call that slow (right or wrong), so
 * tests/ci/resume.sh can interrupt a run half-way. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "kv/backend.h"
#include "host_mem.h"

static const kv_host_api *host;
static kv_device_type my_type;

/* The calls made so far (all processes), counting this one; -1 when the
 * counter is off or unusable (then the kernel is right). flock keeps two
 * workers from reading the same count. */
static long flaky_tick(void) {
    const char *dir = getenv("KV_TEST_FLAKY_DIR");
    if (dir == NULL || dir[0] == '\0') return -1;
    char path[512];
    snprintf(path, sizeof path, "%s/calls", dir);
    const int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) return -1;
    long n = -1;
    if (flock(fd, LOCK_EX) == 0) {
        char buf[32] = { 0 };
        const ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
        n = k > 0 ? strtol(buf, NULL, 10) : 0;
        const int len = snprintf(buf, sizeof buf, "%ld\n", n + 1);
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)len, 0) != len) n = -1;
        flock(fd, LOCK_UN);
    }
    close(fd);
    return n;
}

static kv_status flaky_mul(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (a->dtype != KV_F32 || b->dtype != KV_F32 || !host->tensor_is_contiguous(a) ||
        !host->tensor_is_contiguous(b) || a->ndim != b->ndim || memcmp(a->sizes, b->sizes, sizeof(int64_t) * (size_t)a->ndim) != 0)
        return host->error(KV_ERR_MISSING_KERNEL, "mul: the flaky backend takes contiguous f32 of one shape only");
    kv_tensor *out = host->tensor_empty(a->sizes, a->ndim, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    const float *x = (const float *)a->storage->data + a->offset;
    const float *y = (const float *)b->storage->data + b->offset;
    float *z = out->storage->data;
    const int64_t n = host->tensor_numel(a);
    for (int64_t i = 0; i < n; i++) z[i] = x[i] * y[i];
    const char *sleep_ms = getenv("KV_TEST_FLAKY_SLEEP_MS");
    if (sleep_ms != NULL && sleep_ms[0] != '\0') {
        const long ms = strtol(sleep_ms, NULL, 10);
        const struct timespec ts = { ms / 1000, ms % 1000 * 1000000L };
        nanosleep(&ts, NULL);
    }
    const char *fails = getenv("KV_TEST_FLAKY_FAILS");
    const long nfail = fails != NULL && fails[0] != '\0' ? strtol(fails, NULL, 10) : 2;
    const long call = flaky_tick();
    if (call >= 0 && call < nfail && n > 0) z[0] += 1.0f;
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    return host->register_kernel("mul.Tensor", (kv_key)type, flaky_mul);
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "flaky");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 1;
    host_mem_install(desc);
    desc->register_kernels = reg;
    return 0;
}
