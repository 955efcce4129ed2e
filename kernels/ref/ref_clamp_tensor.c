/* clamp.Tensor: the functional twin of clamp_.Tensor, which Functionalize
 * runs clamp_.Tensor as (src/modes/functionalize.c).
 *
 * Same semantics as clamp_.Tensor (ref_unary.c), out of place: the result
 * dtype is result_type(self, min, max), the shape their broadcast shape;
 * a NaN input, or a NaN bound that is present, gives NaN (the first NaN of
 * self, min, max, payload kept); otherwise min(max(x, lo), hi), so lo > hi
 * gives hi and signed zeros are kept as x has them (-0 clamped to [+0, 1]
 * stays -0, because -0 < +0 is false). Complex is KV_ERR_DTYPE. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

#include <math.h>

typedef struct ref_clamp_t_ctx {
    int lo, hi; /* index of the bound in x[], or -1 when absent */
} ref_clamp_t_ctx;

static kv_ref_val clamp_t_i(const kv_ref_val *x, const void *ctx) {
    const ref_clamp_t_ctx *c = ctx;
    int64_t v = x[0].i;
    if (c->lo >= 0 && v < x[c->lo].i) v = x[c->lo].i;
    if (c->hi >= 0 && x[c->hi].i < v) v = x[c->hi].i;
    return kv_ref_val_int(v);
}

static kv_ref_val clamp_t_r(const kv_ref_val *x, const void *ctx) {
    const ref_clamp_t_ctx *c = ctx;
    if (isnan(x[0].re)) return x[0];
    if (c->lo >= 0 && isnan(x[c->lo].re)) return x[c->lo];
    if (c->hi >= 0 && isnan(x[c->hi].re)) return x[c->hi];
    double v = x[0].re;
    if (c->lo >= 0 && v < x[c->lo].re) v = x[c->lo].re;
    if (c->hi >= 0 && x[c->hi].re < v) v = x[c->hi].re;
    return kv_ref_val_real(v);
}

static const kv_ref_ewise_fns fns_clamp_t = { clamp_t_i, clamp_t_r, NULL };

KV_REF_KERNEL(clamp_Tensor) {
    (void)op;
    (void)ks;
    static const char *const name = "clamp.Tensor";
    static const char *const names[3] = { "self", "min", "max" };
    kv_tensor *const args[3] = { kv_arg_tensor(stack, 0), kv_arg_tensor(stack, 1), kv_arg_tensor(stack, 2) };
    kv_status st;
    for (int k = 0; k < 3; k++)
        if (args[k] && (st = kv_ref_check_cpu(name, names[k], args[k])) != KV_OK) return st;
    if (args[1] == NULL && args[2] == NULL)
        return kv_error(KV_ERR_INVALID_ARG,
                        "clamp.Tensor: arguments 'min' and 'max': at least one of 'min' or 'max' must not be None");
    for (int k = 0; k < 3; k++)
        if (args[k] && kv_dtype_is_complex(args[k]->dtype))
            return kv_error(KV_ERR_DTYPE, "clamp.Tensor: argument '%s': complex dtype %s is not supported", names[k],
                            kv_dtype_name(args[k]->dtype));
    const kv_dtype dt = kv_result_type((const kv_tensor *const *)args, 3, NULL, 0);
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    if ((st = kv_ref_broadcast_shape(name, args, names, 3, sizes, &ndim)) != KV_OK) return st;

    kv_tensor *inputs[3] = { args[0] };
    int nin = 1;
    ref_clamp_t_ctx c = { -1, -1 };
    if (args[1]) {
        c.lo = nin;
        inputs[nin++] = args[1];
    }
    if (args[2]) {
        c.hi = nin;
        inputs[nin++] = args[2];
    }
    kv_tensor *out = kv_ref_new_output(sizes, ndim, dt);
    if (out == NULL) return kv_last_error();
    if ((st = kv_ref_ewise_run(name, &fns_clamp_t, &c, dt, out, inputs, nin)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
