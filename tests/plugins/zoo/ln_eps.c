/* Bug zoo: an f32 native_layer_norm computing rstd = 1 / (sqrt(var) + eps)
 * instead of 1 / sqrt(var + eps): eps outside the square root. With the
 * default eps 1e-5 and var near 1 the result is off by about 5e-6
 * relative, 80 f32 ulps; near var = 0 it is off by orders. */
#include "zoo.h"

static kv_status le_norm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    const kv_int_list ns = kv_arg_ints(stack, 1);
    const kv_tensor *w = kv_arg_is_none(stack, 2) ? NULL : kv_arg_tensor(stack, 2);
    const kv_tensor *bi = kv_arg_is_none(stack, 3) ? NULL : kv_arg_tensor(stack, 3);
    const double eps = kv_arg_double(stack, 4);
    bool ok = a->dtype == KV_F32 && ns.n >= 1 && ns.n <= a->ndim && (!w || w->dtype == KV_F32) &&
              (!bi || bi->dtype == KV_F32);
    const int axis = ok ? a->ndim - ns.n : 0;
    for (int i = 0; ok && i < ns.n; i++) ok = ns.items[i] > 0 && ns.items[i] == a->sizes[axis + i];
    /* weight and bias: exactly the normalized shape */
    for (int t = 0; ok && t < 2; t++) {
        const kv_tensor *wb = t == 0 ? w : bi;
        if (wb == NULL) continue;
        ok = wb->ndim == ns.n;
        for (int i = 0; ok && i < ns.n; i++) ok = wb->sizes[i] == ns.items[i];
    }
    if (!ok) return zoo_host->error(KV_ERR_MISSING_KERNEL, "native_layer_norm: zoo_ln_eps takes valid f32 only");
    int64_t stat_sizes[KV_MAX_DIMS];
    int64_t rows = 1, cols = 1;
    for (int d = 0; d < a->ndim; d++) {
        stat_sizes[d] = d < axis ? a->sizes[d] : 1;
        if (d < axis) rows *= a->sizes[d];
        else cols *= a->sizes[d];
    }
    const kv_device dev = { zoo_type, 0 };
    kv_tensor *outs[3] = { zoo_host->tensor_empty(a->sizes, a->ndim, KV_F32, dev),
                           zoo_host->tensor_empty(stat_sizes, a->ndim, KV_F32, dev),
                           zoo_host->tensor_empty(stat_sizes, a->ndim, KV_F32, dev) };
    if (!outs[0] || !outs[1] || !outs[2]) {
        for (int i = 0; i < 3; i++)
            if (outs[i]) zoo_host->tensor_release(outs[i]);
        return zoo_host->last_error();
    }
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0.0, var = 0.0; /* two passes in double */
        for (int64_t c = 0; c < cols; c++) mean += zoo_load(a, r * cols + c);
        mean = cols ? mean / (double)cols : 0.0;
        for (int64_t c = 0; c < cols; c++) {
            const double dx = zoo_load(a, r * cols + c) - mean;
            var += dx * dx;
        }
        var = cols ? var / (double)cols : 0.0;
        const double rstd = 1.0 / (sqrt(var) + eps); /* the planted bug */
        for (int64_t c = 0; c < cols; c++) {
            double y = (zoo_load(a, r * cols + c) - mean) * rstd;
            if (w) y *= zoo_load(w, c);
            if (bi) y += zoo_load(bi, c);
            zoo_store(outs[0], r * cols + c, y, ZOO_NEAREST_EVEN);
        }
        zoo_store(outs[1], r, mean, ZOO_NEAREST_EVEN);
        zoo_store(outs[2], r, rstd, ZOO_NEAREST_EVEN);
    }
    zoo_host->stack_return_tensors(stack, outs, 3);
    return KV_OK;
}

static kv_status le_reg(void) { return zoo_host->register_kernel("native_layer_norm", (kv_key)zoo_type, le_norm); }

ZOO_PLUGIN("zoo_ln_eps", le_reg)
