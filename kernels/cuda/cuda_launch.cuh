/* Shared by the .cu files: the launch of one thread per element over a
 * grid-stride loop, and error reporting into kvc_last_error(). */
#ifndef KV_CUDA_LAUNCH_CUH
#define KV_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>

#include "cuda/cuda_elem.h"

/* Records "what: <CUDA error>" for kvc_last_error(); returns non-zero. */
int kvc_fail(const char *what, cudaError_t e);

#define KVC_THREADS 256

static inline unsigned kvc_blocks(int64_t n) {
    const int64_t b = (n + KVC_THREADS - 1) / KVC_THREADS;
    return (unsigned)(b > (1 << 20) ? (1 << 20) : b);
}

/* A kernel calling fn(&args, i) for every i in [0, n). */
#define KVC_EACH_KERNEL(kname, Args, fn)                                                                   \
    __global__ void kname(Args a, int64_t n) {                                                           \
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)blockDim.x * gridDim.x) \
            fn(&a, i);                                                                                   \
    }

/* Launches kname over n elements; returns from the enclosing function. */
#define KVC_LAUNCH(what, kname, args, n)                                   \
    do {                                                                   \
        const int64_t n_ = (n);                                            \
        if (n_ > 0) {                                                      \
            kname<<<kvc_blocks(n_), KVC_THREADS>>>(*(args), n_);           \
            const cudaError_t e_ = cudaGetLastError();                     \
            if (e_ != cudaSuccess) return kvc_fail(what, e_);              \
        }                                                                  \
        return 0;                                                          \
    } while (0)

#endif
