/* Random references: bernoulli.p.
 *
 * The stream is defined here and every backend reproduces it bit for
 * bit (kv/generator.h): a call reserves numel(self) values of its
 * generator (None: the thread's default one), and element i of the
 * contiguous result is 1 when kv_generator_uniform_at(seed, first + i),
 * a 53-bit dyadic uniform in [0, 1), is below p, else 0 — so p = 0 gives
 * all zeros and p = 1 all ones. The result has self's sizes and dtype;
 * self's values are not read (PyTorch: empty_like(self).bernoulli_(p)).
 * Bad arguments fail before the generator moves. */
#include <math.h>

#include "kv/generator.h"
#include "ref/ref.h"
#include "ref/ref_kernels.h"

KV_REF_KERNEL(bernoulli) {
    (void)op;
    (void)ks;
    static const char *const name = "bernoulli.p";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const double p = kv_arg_double(stack, 1);
    kv_status st;
    if ((st = kv_ref_check_cpu(name, "self", self)) != KV_OK) return st;
    if ((st = kv_ref_check_dtype(name, "self", self->dtype, KV_DTYPES_REAL | (1u << KV_BOOL))) != KV_OK) return st;
    if (!(p >= 0.0 && p <= 1.0))
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'p': expected a probability in [0, 1], got %g", name, p);
    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return kv_last_error();
    kv_generator *gen = kv_arg_generator(stack, 2);
    const int64_t n = kv_tensor_numel(out);
    const uint64_t first = kv_generator_reserve(gen, (uint64_t)n);
    const size_t es = kv_dtype_size(out->dtype);
    char *dst = kv_tensor_data(out);
    for (int64_t i = 0; i < n; i++)
        kv_ref_store_i64(out->dtype, dst + (size_t)i * es, kv_generator_uniform_at(gen->seed, first + (uint64_t)i) < p);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
