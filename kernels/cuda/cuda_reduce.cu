// Reductions (sum, mean, amax): one thread per output element, reduced
// elements in the reference's row-major order.
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_reduce_kernel, kvc_reduce_args, kvc_reduce_one)

extern "C" int kvc_reduce(const kvc_reduce_args *a) { KVC_LAUNCH("reduce kernel", kvc_reduce_kernel, a, a->nout); }
