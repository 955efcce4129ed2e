// Elementwise kernels: unary ops (incl. pow, clamp) and binary ops with
// broadcasting, one thread per output element (cuda_elem.h).
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_unary_kernel, kvc_unary_args, kvc_unary_one)
KVC_EACH_KERNEL(kvc_binary_kernel, kvc_binary_args, kvc_binary_one)

extern "C" int kvc_unary(const kvc_unary_args *a) { KVC_LAUNCH("unary kernel", kvc_unary_kernel, a, a->n); }
extern "C" int kvc_binary(const kvc_binary_args *a) { KVC_LAUNCH("binary kernel", kvc_binary_kernel, a, a->n); }
