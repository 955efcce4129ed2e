// The strided copy behind copy_, clone, contiguous, _to_copy, cat and repeat: raw
// elements of any dtype, or f32 <-> f64 conversion.
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_copy_kernel, kvc_copy_args, kvc_copy_one)

extern "C" int kvc_copy(const kvc_copy_args *a) { KVC_LAUNCH("copy kernel", kvc_copy_kernel, a, a->n); }

// masked_fill: the value's bytes where the mask is set, src's elsewhere.
KVC_EACH_KERNEL(kvc_masked_fill_kernel, kvc_masked_fill_args, kvc_masked_fill_one)

extern "C" int kvc_masked_fill(const kvc_masked_fill_args *a) {
    KVC_LAUNCH("masked_fill kernel", kvc_masked_fill_kernel, a, a->n);
}
