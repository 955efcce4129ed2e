// The CUDA plugin's device runtime: the probe, device memory, copies and
// the error text. Kernels live in the other .cu files.
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/cuda_launch.cuh"

static thread_local char kvc_error_text[256] = "";

int kvc_fail(const char *what, cudaError_t e) {
    snprintf(kvc_error_text, sizeof kvc_error_text, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
    return 1;
}

extern "C" const char *kvc_last_error(void) { return kvc_error_text; }
extern "C" const char *kvc_impl_name(void) { return "cuda"; }
extern "C" int kvc_impl_is_emulation(void) { return 0; }

__global__ void kvc_probe_kernel(int *flag) {
    if (flag != nullptr) *flag = 1;
}

static int kvc_probe_here(char *reason, size_t cap) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(reason, cap, "no usable CUDA device: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        return 0;
    }
    if (n == 0) {
        snprintf(reason, cap, "no CUDA device (cudaGetDeviceCount found 0)");
        return 0;
    }
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        snprintf(reason, cap, "cudaGetDeviceProperties(0) failed: %s", cudaGetErrorString(e));
        return 0;
    }
    if (p.major < 9) {
        snprintf(reason, cap,
                 "device 0 (%s) has compute capability %d.%d; this plugin carries sm_90 code and compute_90 PTX, "
                 "which need 9.0 or newer",
                 p.name, p.major, p.minor);
        return 0;
    }
    if ((e = cudaSetDevice(0)) != cudaSuccess) {
        snprintf(reason, cap, "cudaSetDevice(0) failed: %s", cudaGetErrorString(e));
        return 0;
    }
    // One launch proves the kernel image loads on this device.
    kvc_probe_kernel<<<1, 1>>>(nullptr);
    if ((e = cudaGetLastError()) == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        snprintf(reason, cap, "device 0 (%s) cannot run this plugin's kernels: %s", p.name, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

// CUDA cannot be used in a child forked after its parent initialized it,
// and kvrun forks its workers after loading the plugins. So the probe runs
// in a child process of its own: the loading process never touches CUDA,
// and each worker initializes it on first use.
extern "C" int kvc_probe(char *reason, size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) return kvc_probe_here(reason, cap);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return kvc_probe_here(reason, cap);
    }
    char msg[256] = "";
    int ok = 0;
    if (pid == 0) {
        close(fds[0]);
        ok = kvc_probe_here(msg, sizeof msg);
        const ssize_t w1 = write(fds[1], &ok, sizeof ok), w2 = write(fds[1], msg, sizeof msg);
        _exit(w1 == (ssize_t)sizeof ok && w2 == (ssize_t)sizeof msg ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    char buf[sizeof ok + sizeof msg];
    while (got < sizeof buf) {
        const ssize_t r = read(fds[0], buf + got, sizeof buf - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != sizeof buf) {
        snprintf(reason, cap, "the CUDA probe process failed (%s %d)", WIFSIGNALED(status) ? "signal" : "exit status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        return 0;
    }
    memcpy(&ok, buf, sizeof ok);
    memcpy(msg, buf + sizeof ok, sizeof msg);
    msg[sizeof msg - 1] = '\0';
    if (!ok) snprintf(reason, cap, "%s", msg);
    return ok;
}

extern "C" void *kvc_alloc(size_t nbytes) {
    void *p = nullptr;
    if (cudaMalloc(&p, nbytes ? nbytes : 1) != cudaSuccess) {
        cudaGetLastError(); // clear the sticky-free error state of a failed allocation
        return nullptr;
    }
    return p;
}

extern "C" void kvc_free(void *p) {
    if (p != nullptr) cudaFree(p);
}

static int kvc_copy_bytes(const char *what, void *dst, const void *src, size_t n, cudaMemcpyKind kind) {
    if (n == 0) return 0;
    const cudaError_t e = cudaMemcpy(dst, src, n, kind);
    return e == cudaSuccess ? 0 : kvc_fail(what, e);
}

extern "C" int kvc_copy_h2d(void *dst, const void *src, size_t n) {
    return kvc_copy_bytes("copy to device", dst, src, n, cudaMemcpyHostToDevice);
}
extern "C" int kvc_copy_d2h(void *dst, const void *src, size_t n) {
    return kvc_copy_bytes("copy to host", dst, src, n, cudaMemcpyDeviceToHost);
}
extern "C" int kvc_copy_d2d(void *dst, const void *src, size_t n) {
    return kvc_copy_bytes("copy on device", dst, src, n, cudaMemcpyDeviceToDevice);
}

extern "C" int kvc_memset(void *dst, int byte, size_t n) {
    if (n == 0) return 0;
    const cudaError_t e = cudaMemset(dst, byte, n);
    return e == cudaSuccess ? 0 : kvc_fail("memset", e);
}

extern "C" int kvc_synchronize(void) {
    const cudaError_t e = cudaDeviceSynchronize();
    return e == cudaSuccess ? 0 : kvc_fail("synchronize", e);
}
