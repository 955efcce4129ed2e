// The strided copy behind copy_, clone, contiguous, _to_copy and cat: raw
// elements of any dtype, or f32 <-> f64 conversion.
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_copy_kernel, kvc_copy_args, kvc_copy_one)

extern "C" int kvc_copy(const kvc_copy_args *a) { KVC_LAUNCH("copy kernel", kvc_copy_kernel, a, a->n); }
