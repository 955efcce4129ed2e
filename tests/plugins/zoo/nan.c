/* Bug zoo: maximum, minimum and relu written with fmax semantics: a NaN
 * operand loses to the other one (relu(NaN) = 0) instead of propagating.
 * Zeros keep IEEE 754-2019's order (-0 < +0), so NaN is the only bug.
 * Expected diagnosis: "NaN not propagated". */
#include "zoo.h"

static double nan_max(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    if (a == b) return signbit(a) ? b : a;
    return a > b ? a : b;
}
static double nan_min(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    if (a == b) return signbit(a) ? a : b;
    return a < b ? a : b;
}

static void max_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, nan_max(zoo_load(a, k), zoo_load(b, k)), ZOO_NEAREST_EVEN);
}
static void min_elem(const kv_tensor *a, const kv_tensor *b, kv_tensor *out, int64_t k, int64_t n) {
    (void)n;
    zoo_store(out, k, nan_min(zoo_load(a, k), zoo_load(b, k)), ZOO_NEAREST_EVEN);
}

static kv_status nan_maximum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "maximum", ZOO_FLOATS, false, max_elem);
}
static kv_status nan_minimum(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return zoo_map2(stack, "minimum", ZOO_FLOATS, false, min_elem);
}

static kv_status nan_relu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (!(ZOO_FLOATS & ZOO_DT(a->dtype)) || a->ndim == 0)
        return zoo_host->error(KV_ERR_MISSING_KERNEL, "relu: this zoo kernel takes real floating inputs only");
    kv_tensor *out = zoo_empty_like(a, a->dtype);
    if (out == NULL) return zoo_host->last_error();
    const int64_t n = zoo_host->tensor_numel(a);
    for (int64_t k = 0; k < n; k++) {
        const double x = zoo_load(a, k);
        zoo_store(out, k, x < 0 || isnan(x) ? 0.0 : x, ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status nan_reg(void) {
    kv_status st = zoo_host->register_kernel("maximum", (kv_key)zoo_type, nan_maximum);
    if (st == KV_OK) st = zoo_host->register_kernel("minimum", (kv_key)zoo_type, nan_minimum);
    if (st == KV_OK) st = zoo_host->register_kernel("relu", (kv_key)zoo_type, nan_relu);
    return st;
}

ZOO_PLUGIN("zoo_nan", nan_reg)
