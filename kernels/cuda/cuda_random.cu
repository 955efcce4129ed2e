// bernoulli.p on the generator stream: one thread per element, each
// computing its own counter's value (no state shared between threads).
#include "cuda/cuda_launch.cuh"

KVC_EACH_KERNEL(kvc_bernoulli_kernel, kvc_bernoulli_args, kvc_bernoulli_one)

extern "C" int kvc_bernoulli(const kvc_bernoulli_args *a) { KVC_LAUNCH("bernoulli kernel", kvc_bernoulli_kernel, a, a->n); }
