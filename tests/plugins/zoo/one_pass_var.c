/* Bug zoo: an f32 native_layer_norm that computes the variance in one
 * pass, as E[x^2] - E[x]^2 with f32 sums: where the mean is large against
 * the spread (fill=shifted) the two nearly equal terms cancel and the
 * variance keeps only about log2(v / (u * E[x^2])) bits. Everything else
 * (the mean, x - mean, the products) is what a correct f32 kernel does.
 * It meets the bound a one-pass variance meets but leaves the two-pass
 * one (src/runner/check/tol_bounds.c, tb_norm). Expected diagnosis:
 * "variance by E[x^2] - E[x]^2". */
#include "zoo.h"

/* weight or bias: absent, or f32 of the normalized shape. */
static bool opv_param_ok(const kv_tensor *p, const kv_tensor *x, kv_int_list ns) {
    if (p == NULL) return true;
    if (p->dtype != KV_F32 || p->ndim != ns.n) return false;
    for (int i = 0; i < ns.n; i++)
        if (p->sizes[i] != x->sizes[x->ndim - ns.n + i]) return false;
    return true;
}

static kv_status opv_layer_norm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    const kv_int_list ns = kv_arg_ints(stack, 1);
    const kv_tensor *w = kv_arg_is_none(stack, 2) ? NULL : kv_arg_tensor(stack, 2);
    const kv_tensor *b = kv_arg_is_none(stack, 3) ? NULL : kv_arg_tensor(stack, 3);
    const float eps = (float)kv_arg_double(stack, 4);
    const int axis = x != NULL ? x->ndim - ns.n : -1;
    bool ok = x != NULL && x->dtype == KV_F32 && ns.n >= 1 && axis >= 0 && opv_param_ok(w, x, ns) &&
              opv_param_ok(b, x, ns);
    for (int i = 0; ok && i < ns.n; i++) ok = x->sizes[axis + i] == ns.items[i];
    if (!ok || zoo_host->tensor_numel(x) == 0)
        return zoo_host->error(KV_ERR_MISSING_KERNEL,
                               "native_layer_norm: this zoo kernel takes non-empty f32 with matching f32 weight and bias");
    int64_t stat_sizes[KV_MAX_DIMS], rows = 1, n = 1;
    for (int d = 0; d < x->ndim; d++) {
        if (d < axis) rows *= x->sizes[d];
        else n *= x->sizes[d];
        stat_sizes[d] = d < axis ? x->sizes[d] : 1;
    }
    kv_tensor *res[3] = { zoo_empty_like(x, KV_F32),
                          zoo_host->tensor_empty(stat_sizes, x->ndim, KV_F32, (kv_device){ zoo_type, 0 }),
                          zoo_host->tensor_empty(stat_sizes, x->ndim, KV_F32, (kv_device){ zoo_type, 0 }) };
    if (res[0] == NULL || res[1] == NULL || res[2] == NULL) {
        for (int i = 0; i < 3; i++)
            if (res[i] != NULL) zoo_host->tensor_release(res[i]);
        return zoo_host->last_error();
    }
    for (int64_t r = 0; r < rows; r++) {
        float sum = 0.0f, sq = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            const float v = (float)zoo_load(x, r * n + j);
            sum += v;
            sq += v * v;
        }
        const float mean = sum / (float)n;
        /* The bug: the variance from the two sums, not from x - mean. */
        float var = sq / (float)n - mean * mean;
        if (var < 0.0f) var = 0.0f;
        const float rstd = 1.0f / sqrtf(var + eps);
        for (int64_t j = 0; j < n; j++) {
            float y = ((float)zoo_load(x, r * n + j) - mean) * rstd;
            if (w != NULL) y *= (float)zoo_load(w, j);
            if (b != NULL) y += (float)zoo_load(b, j);
            zoo_store(res[0], r * n + j, y, ZOO_NEAREST_EVEN);
        }
        zoo_store(res[1], r, mean, ZOO_NEAREST_EVEN);
        zoo_store(res[2], r, rstd, ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, res, 3);
    return KV_OK;
}

static kv_status opv_reg(void) {
    return zoo_host->register_kernel("native_layer_norm", (kv_key)zoo_type, opv_layer_norm);
}

ZOO_PLUGIN("zoo_one_pass_var", opv_reg)
