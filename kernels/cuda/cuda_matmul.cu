// mm, bmm, addmm: one thread per output element, k ascending in f64.
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_mm_kernel, kvc_mm_args, kvc_mm_one)

extern "C" int kvc_mm(const kvc_mm_args *a) { KVC_LAUNCH("matmul kernel", kvc_mm_kernel, a, a->batch * a->n * a->m); }
