// _softmax and _log_softmax: one thread per slice along the dim.
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_softmax_kernel, kvc_softmax_args, kvc_softmax_one)

extern "C" int kvc_softmax(const kvc_softmax_args *a) {
    KVC_LAUNCH("softmax kernel", kvc_softmax_kernel, a, a->nslices);
}
