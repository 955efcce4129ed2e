/* The "direct" variant of bernoulli.p: the reference's stream
 * (kernels/ref/ref_random.c) with the comparison done on the 53-bit
 * integer (u < p  <=>  bits < ceil(p * 2^53), p * 2^53 being exact for
 * p in [0, 1]) and one store per dtype, instead of a double and the
 * reference's generic store. Same values: bitwise. */
#include <math.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/generator.h"
#include "kv/op_ids.h"
#include "kv/rng.h"
#include "ref/ref.h"

bool kv_cpu_random_pred(const kv_op *op, const kv_stack *s) {
    if (kv_op_builtin_id(op) != KV_OP_BERNOULLI_P || s->size < 3) return false;
    if (s->slots[0].tag != KV_IV_TENSOR || s->slots[1].tag != KV_IV_DOUBLE) return false;
    const kv_tensor *self = s->slots[0].v.tensor;
    const double p = s->slots[1].v.d;
    if (self->device.type != KV_DEVICE_CPU || !(p >= 0.0 && p <= 1.0)) return false;
    return !kv_dtype_is_complex(self->dtype);
}

kv_status kv_cpu_random_kernel(const kv_op *op, kv_keyset ks, kv_stack *s) {
    (void)ks;
    if (!kv_cpu_random_pred(op, s))
        return kv_error(KV_ERR_INVALID_ARG, "bernoulli.p: the direct variant does not cover this call");
    const kv_tensor *self = s->slots[0].v.tensor;
    /* u = bits * 2^-53 < p  <=>  bits < p * 2^53 (exact product). */
    const double limit = ldexp(s->slots[1].v.d, 53);
    kv_tensor *out = kv_cpu_new(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return kv_last_error();
    kv_generator *gen = kv_arg_generator(s, 2);
    const int64_t n = kv_tensor_numel(out);
    const uint64_t first = kv_generator_reserve(gen, (uint64_t)n), seed = gen->seed;
    union { double d[2]; char b[16]; } one, zero;
    kv_ref_store_i64(out->dtype, one.b, 1);
    kv_ref_store_i64(out->dtype, zero.b, 0);
    const size_t es = kv_dtype_size(out->dtype);
    char *dst = kv_tensor_data(out);
    for (int64_t i = 0; i < n; i++) {
        const uint64_t bits = kv_rng_u64(seed, first + (uint64_t)i) >> 11;
        memcpy(dst + (size_t)i * es, (double)bits < limit ? one.b : zero.b, es);
    }
    kv_stack_return_tensor(s, out);
    return KV_OK;
}
