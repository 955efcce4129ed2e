/* Comparison and selection references: eq.Tensor, lt.Tensor, where.self.
 *
 * Comparisons cast both operands to their promoted dtype and compare
 * there (so i64 16777217 == f32 16777216 is true, as in PyTorch); the
 * result is bool. Any comparison with NaN is false. Complex eq compares
 * both parts; complex lt is KV_ERR_DTYPE (complex numbers are unordered).
 * where casts self and other to their promoted dtype. */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

static kv_ref_val eq_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].i == x[1].i);
}
static kv_ref_val eq_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].re == x[1].re);
}
static kv_ref_val eq_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].re == x[1].re && x[0].im == x[1].im);
}
static kv_ref_val lt_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].i < x[1].i);
}
static kv_ref_val lt_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_int(x[0].re < x[1].re);
}
/* x[0] is the condition, already cast to the compute dtype: nonzero means
 * true whatever the category. */
static kv_ref_val where_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return x[0].i ? x[1] : x[2];
}
static kv_ref_val where_r(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return x[0].re != 0.0 ? x[1] : x[2];
}
static kv_ref_val where_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return x[0].re != 0.0 ? x[1] : x[2];
}

static const kv_ref_ewise_fns fns_eq = { eq_i, eq_r, eq_c };
static const kv_ref_ewise_fns fns_lt = { lt_i, lt_r, NULL };
static const kv_ref_ewise_fns fns_where = { where_i, where_r, where_c };

/* Shared body: the operands are stack slots [0, n), computed in `compute`
 * and stored as out_dt. */
static kv_status ref_compare_run(const char *op, const kv_ref_ewise_fns *fns, kv_stack *stack,
                                 const char *const *names, int n, kv_dtype compute, kv_dtype out_dt) {
    kv_tensor *args[3];
    kv_status st;
    for (int k = 0; k < n; k++) {
        args[k] = kv_arg_tensor(stack, k);
        if ((st = kv_ref_check_cpu(op, names[k], args[k])) != KV_OK) return st;
    }
    int64_t sizes[KV_MAX_DIMS];
    int ndim = 0;
    if ((st = kv_ref_broadcast_shape(op, args, names, n, sizes, &ndim)) != KV_OK) return st;
    kv_tensor *out = kv_ref_new_output(sizes, ndim, out_dt);
    if (out == NULL) return kv_last_error();
    if ((st = kv_ref_ewise_run(op, fns, NULL, compute, out, args, n)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

static kv_dtype ref_promoted(const kv_stack *stack, int first, int n) {
    const kv_tensor *t[2] = { kv_arg_tensor(stack, first), n > 1 ? kv_arg_tensor(stack, first + 1) : NULL };
    return kv_result_type(t, n, NULL, 0);
}

static const char *const ref_self_other[2] = { "self", "other" };

KV_REF_KERNEL(eq) {
    (void)op;
    (void)ks;
    return ref_compare_run("eq.Tensor", &fns_eq, stack, ref_self_other, 2, ref_promoted(stack, 0, 2), KV_BOOL);
}

KV_REF_KERNEL(lt) {
    (void)op;
    (void)ks;
    const kv_dtype dt = ref_promoted(stack, 0, 2);
    if (kv_dtype_is_complex(dt))
        return kv_error(KV_ERR_DTYPE, "lt.Tensor: arguments 'self' and 'other': complex dtype %s is not ordered",
                        kv_dtype_name(dt));
    return ref_compare_run("lt.Tensor", &fns_lt, stack, ref_self_other, 2, dt, KV_BOOL);
}

KV_REF_KERNEL(where) {
    (void)op;
    (void)ks;
    static const char *const names[3] = { "condition", "self", "other" };
    const kv_tensor *cond = kv_arg_tensor(stack, 0);
    if (cond->dtype != KV_BOOL)
        return kv_error(KV_ERR_DTYPE,
                        "where.self: argument 'condition': expected a bool tensor, got dtype %s",
                        kv_dtype_name(cond->dtype));
    const kv_dtype dt = ref_promoted(stack, 1, 2);
    return ref_compare_run("where.self", &fns_where, stack, names, 3, dt, dt);
}
