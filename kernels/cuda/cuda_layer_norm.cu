// native_layer_norm: one thread per row, two passes in f64.
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_layer_norm_kernel, kvc_layer_norm_args, kvc_layer_norm_one)

extern "C" int kvc_layer_norm(const kvc_layer_norm_args *a) {
    KVC_LAUNCH("layer_norm kernel", kvc_layer_norm_kernel, a, a->rows);
}
