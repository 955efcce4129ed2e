/* The OpenCL plugin across fork (kernels/opencl/README.md, "Per process,
 * lazily"): kvrun loads plugins in its parent and forks the case workers,
 * so each process sets OpenCL up at its first use, and a process forked
 * after its parent set OpenCL up must get KV_ERR_DEVICE naming the fork
 * instead of using its parent's queue (PoCL's threads are gone there).
 * The plugin keeps its process id in a fork handler rather than asking
 * getpid() on every copy: these tests fail if the child ever sees the
 * parent's id (it would take the parent's context as its own). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv/backend.h"
#include "kv/kv.h"

static kv_device ocl_dev;
/* The instrumented runs (tests/memcheck.sh, sanitize.sh, coverage.sh) set
 * KV_BACKEND_PATH without the OpenCL plugin: PoCL's LLVM and threads are
 * out of their reach (docs/opencl.md). There these tests skip, saying so. */
static bool left_out;

static int group_setup(void **state) {
    (void)state;
    if (kv_init() != KV_OK) return -1;
    char path[1024] = "build/backends/libkv_opencl.so";
    const char *env = getenv("KV_BACKEND_PATH");
    if (env != NULL) {
        const char *hit = strstr(env, "libkv_opencl.so");
        left_out = hit == NULL;
        if (left_out) return 0;
        const char *start = hit;
        while (start > env && start[-1] != ':') start--;
        snprintf(path, sizeof path, "%.*s", (int)(hit - start) + (int)strlen("libkv_opencl.so"), start);
    }
    /* The suite's own rule (run_tests.sh: --require-backend=opencl): the
     * driver is installed where the tests run. */
    if (kv_backend_load(path) != KV_OK) {
        fprintf(stderr, "test_opencl_fork: the OpenCL plugin did not load: %s\n", kv_last_error_message());
        return -1;
    }
    for (int i = 0; i < kv_backend_count(); i++)
        if (strcmp(kv_backend_at(i)->name, "opencl") == 0 && kv_backend_at(i)->state == KV_BACKEND_LOADED)
            ocl_dev = (kv_device){ kv_backend_at(i)->device_type, 0 };
    return kv_backend_available(ocl_dev.type) ? 0 : -1;
}

/* A tensor of n f32 values 0.5, 1.5, ... on the OpenCL device, read back
 * and checked; 0 when all of it worked, else 1 with the error printed. */
static int round_trip(int64_t n) {
    kv_tensor *h = kv_tensor_empty(&n, 1, KV_F32, KV_DEVICE_CPU0);
    if (h == NULL) return 1;
    float *hv = kv_tensor_data(h);
    for (int64_t i = 0; i < n; i++) hv[i] = (float)i + 0.5f;
    kv_tensor *d = kv_backend_copy_to_device(h, ocl_dev);
    kv_tensor *back = d != NULL ? kv_backend_copy_to_host(d) : NULL;
    int bad = back == NULL;
    if (back != NULL) {
        const float *bv = kv_tensor_data(back);
        for (int64_t i = 0; i < n; i++) bad |= bv[i] != hv[i];
    }
    if (back == NULL) fprintf(stderr, "round trip: %s\n", kv_last_error_message());
    if (back != NULL) kv_tensor_release(back);
    if (d != NULL) kv_tensor_release(d);
    kv_tensor_release(h);
    return bad;
}

/* Runs fn in a forked child (at most 60 s) and returns its exit code. */
static int in_child(int (*fn)(void)) {
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(60); /* a child on its parent's queue may wait forever */
        _exit(fn());
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    if (!WIFEXITED(ws)) fail_msg("the child did not exit (signal %d)", WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    return WEXITSTATUS(ws);
}

static int child_round_trip(void) { return round_trip(1000); }

/* Before the parent used OpenCL: the child sets it up for itself (as
 * every kvrun worker does). The parent's synchronize first takes the
 * plugin's process id without setting OpenCL up. */
static void skip_if_left_out(void) {
    if (!left_out) return;
    fprintf(stderr, "test_opencl_fork: KV_BACKEND_PATH leaves the OpenCL plugin out: skipped\n");
    skip();
}

static void test_child_sets_up_its_own(void **state) {
    (void)state;
    skip_if_left_out();
    assert_int_equal(kv_backend_synchronize(ocl_dev.type), KV_OK);
    assert_int_equal(in_child(child_round_trip), 0);
}

static kv_tensor *parent_tensor;

/* After the parent set OpenCL up: the child's allocation is refused
 * naming the fork, and the parent's memory is no address of the child's. */
static int child_refused(void) {
    /* The plugin's allocator itself: the storage layer above it reports
     * any failed allocation as its own KV_ERR_OOM. */
    kv_allocator *a = kv_allocator_for(ocl_dev.type);
    void *p = a != NULL ? kv_allocator_alloc(a, 16) : NULL;
    if (p != NULL) {
        fprintf(stderr, "child: an allocation on the parent's OpenCL context succeeded\n");
        kv_allocator_free(a, p, 16);
        return 1;
    }
    if (kv_last_error() != KV_ERR_DEVICE || strstr(kv_last_error_message(), "which forked this one") == NULL) {
        fprintf(stderr, "child: wrong error: %s\n", kv_last_error_message());
        return 2;
    }
    kv_tensor *back = kv_backend_copy_to_host(parent_tensor);
    if (back != NULL) {
        fprintf(stderr, "child: read the parent's device memory\n");
        kv_tensor_release(back);
        return 3;
    }
    return 0;
}

static void test_child_after_setup_is_refused(void **state) {
    (void)state;
    skip_if_left_out();
    assert_int_equal(round_trip(1000), 0); /* the parent sets OpenCL up */
    int64_t n = 4;
    parent_tensor = kv_tensor_empty(&n, 1, KV_F32, ocl_dev);
    assert_non_null(parent_tensor);
    assert_int_equal(in_child(child_refused), 0);
    /* The parent goes on using its own. */
    assert_int_equal(round_trip(1000), 0);
    kv_tensor_release(parent_tensor);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_child_sets_up_its_own),
        cmocka_unit_test(test_child_after_setup_is_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
