/* The CPU's "elementwise" variant of the foreach ops: the list rules of
 * kernels/ref/ref_foreach.c around the CPU's own per-tensor kernels.
 * add/add_ elements go through the CPU key's dispatcher, so each runs
 * whichever add variant the tuner picks for that element (SSE2, AVX2,
 * AVX-512, threads, ref); a _foreach_mul.Scalar element of f32 or f64
 * with a real scalar is one flat multiply loop per element (one IEEE
 * multiplication each, as the reference rounds it: bitwise), anything
 * else the reference element. */
#include "cpu/cpu.h"
#include "ref/ref.h"

typedef struct cpu_foreach_ctx {
    const kv_op *add, *add_;
} cpu_foreach_ctx;

static kv_status cpu_foreach_add(bool inplace, kv_stack *one, const void *ctx) {
    const cpu_foreach_ctx *c = ctx;
    return kv_redispatch(inplace ? c->add_ : c->add, kv_keyset_of(KV_KEY_CPU), one);
}

static kv_tensor *cpu_foreach_mul_scalar(kv_tensor *self, kv_scalar scalar, const void *ctx) {
    (void)ctx;
    const kv_tensor *const tensors[1] = { self };
    const kv_dtype dt = kv_result_type(tensors, 1, &scalar, 1);
    const bool flat = kv_cpu_plain(self) && dt == self->dtype && (dt == KV_F32 || dt == KV_F64) &&
                      scalar.kind != KV_SCALAR_COMPLEX && kv_cpu_contig(self);
    if (!flat) return kv_ref_mul_scalar("mul.Tensor", self, scalar);
    kv_tensor *out = kv_cpu_new(self->sizes, self->ndim, dt);
    if (out == NULL) return NULL;
    const int64_t n = kv_tensor_numel(self);
    /* The scalar as the reference rounds it (to f32 for an f32 result). */
    const double c = kv_ref_val_of_scalar(scalar, dt).re;
    if (dt == KV_F32) {
        const float cf = (float)c, *x = kv_tensor_data(self);
        float *o = kv_tensor_data(out);
        for (int64_t i = 0; i < n; i++) o[i] = x[i] * cf;
    } else {
        const double *x = kv_tensor_data(self);
        double *o = kv_tensor_data(out);
        for (int64_t i = 0; i < n; i++) o[i] = x[i] * c;
    }
    return out;
}

kv_status kv_cpu_foreach_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    cpu_foreach_ctx c = { kv_op_find("add.Tensor"), kv_op_find("add_.Tensor") };
    if (c.add == NULL || c.add_ == NULL) return kv_last_error();
    const kv_ref_foreach_impl impl = { cpu_foreach_add, cpu_foreach_mul_scalar, &c };
    return kv_ref_foreach_run(op, stack, &impl);
}
