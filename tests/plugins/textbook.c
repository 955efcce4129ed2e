/* Textbook f32 kernels, for tests/ci/textbook.sh (issue 21, item 3;
 * docs/coverage.md): what correct kernels written the standard way
 * compute, every step in f32. _softmax and _log_softmax: m = max,
 * d = x - m rounded to f32, expf(d), an f32 sum in index order, one
 * division (log_softmax: d - logf(sum)). native_layer_norm and
 * native_group_norm: two-pass mean and biased variance as f32 sums,
 * rstd = 1/sqrtf(var + eps), y = (x - mean) * rstd * w + b in f32.
 * sum.dim_IntList and mean.dim over one dim: an f32 sum in index order
 * (mean: one division). gelu: its formula with erff or tanhf in f32. The
 * derived bounds (src/runner/check/tol_bounds.c) must accept them on the
 * suite's cases of those ops and the attention and unet_block programs;
 * before the x - max term, step 12 of cases/programs/attention.prog was
 * 53 ulp off and FAILed. Bad arguments fail as the reference's do; other
 * dtypes are declined (softmax) or run on the staged reference (the
 * rest), as are the reductions' other dims lists and dtype overrides. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kv/backend.h"
#include "host_mem.h"

static const kv_host_api *host;
static kv_device_type my_type;

static kv_status softmax_f32(kv_stack *stack, bool logsm) {
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    int64_t dim = kv_arg_int(stack, 1);
    const int nd = self->ndim;
    /* Bad arguments fail as the reference fails them (kernels/ref/ref_softmax.c). */
    if (dim < -(nd ? nd : 1) || dim >= (nd ? nd : 1))
        return host->error(KV_ERR_DIM, "softmax: argument 'dim': dim %lld out of range", (long long)dim);
    if (kv_arg_bool(stack, 2))
        return host->error(KV_ERR_INVALID_ARG, "softmax: argument 'half_to_float': not supported");
    if (self->dtype != KV_F16 && self->dtype != KV_BF16 && self->dtype != KV_F32 && self->dtype != KV_F64)
        return host->error(KV_ERR_DTYPE, "softmax: argument 'self': expected a floating dtype");
    if (self->dtype != KV_F32 || !host->tensor_is_contiguous(self))
        return host->error(KV_ERR_MISSING_KERNEL, "softmax: the textbook backend takes contiguous f32 only");
    if (dim < 0) dim += nd ? nd : 1;
    kv_tensor *out = host->tensor_empty(self->sizes, nd, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    int64_t n = nd ? self->sizes[dim] : 1, inner = 1, numel = host->tensor_numel(self);
    for (int d = (int)dim + 1; d < nd; d++) inner *= self->sizes[d];
    const float *x = (const float *)self->storage->data + self->offset;
    float *y = out->storage->data;
    const int64_t outer = n > 0 && inner > 0 ? numel / (n * inner) : 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = x + o * n * inner + i;
            float *ys = y + o * n * inner + i;
            float m = -INFINITY;
            for (int64_t j = 0; j < n; j++) m = xs[j * inner] > m || isnan(xs[j * inner]) ? xs[j * inner] : m;
            float sum = 0.0f;
            for (int64_t j = 0; j < n; j++) {
                const float d = xs[j * inner] - m;
                const float e = expf(d);
                ys[j * inner] = logsm ? d : e;
                sum += e;
            }
            const float ls = logf(sum);
            for (int64_t j = 0; j < n; j++) ys[j * inner] = logsm ? ys[j * inner] - ls : ys[j * inner] / sum;
        }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status my_softmax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return softmax_f32(stack, false);
}

static kv_status my_log_softmax(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)op;
    (void)ks;
    return softmax_f32(stack, true);
}

/* A parameter (weight or bias) the textbook norms take: absent, or f32
 * of n elements (any layout). */
static bool param_ok(const kv_tensor *p, int64_t n) {
    return p == NULL || (p->dtype == KV_F32 && host->tensor_numel(p) == n);
}

/* Element i (row-major) of an f32 tensor, through its strides: the
 * textbook kernels read any layout the same way, so a call gives the same
 * bits whichever path (and copy) brought its inputs. */
static float at(const kv_tensor *t, int64_t i) {
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->sizes[d]) * t->strides[d];
        i /= t->sizes[d];
    }
    return ((const float *)t->storage->data)[off];
}

static float param_at(const kv_tensor *p, int64_t i, float absent) { return p == NULL ? absent : at(p, i); }

/* One group of n elements at stride 1 (layer norm) or a group norm's
 * channels: mean = f32 sum / n; var = f32 sum of (x - mean)^2 / n;
 * rstd = 1 / sqrtf(var + eps); y = (x - mean) * rstd * w + b, in f32.
 * chan gives the parameter index of element j. */
static void norm_group(const kv_tensor *x, int64_t x0, float *y, int64_t n, float eps, const kv_tensor *w,
                       const kv_tensor *b, int64_t per_param, int64_t param0, float *mean_out, float *rstd_out) {
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) sum += at(x, x0 + j);
    const float mean = sum / (float)n;
    float sq = 0.0f;
    for (int64_t j = 0; j < n; j++) sq += (at(x, x0 + j) - mean) * (at(x, x0 + j) - mean);
    const float rstd = 1.0f / sqrtf(sq / (float)n + eps);
    for (int64_t j = 0; j < n; j++) {
        const int64_t pi = param0 + (per_param > 0 ? j / per_param : j);
        y[j] = (at(x, x0 + j) - mean) * rstd * param_at(w, pi, 1.0f) + param_at(b, pi, 0.0f);
    }
    *mean_out = mean;
    *rstd_out = rstd;
}

static kv_status return3(kv_stack *stack, kv_tensor *out, kv_tensor *mean, kv_tensor *rstd) {
    kv_tensor *ts[3] = { out, mean, rstd };
    host->stack_return_tensors(stack, ts, 3);
    return KV_OK;
}

/* Anything but a valid f32 call (another dtype, bad input) is the
 * reference's, staged: its values and its errors. */
static kv_status my_layer_norm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    const kv_int_list ns = kv_arg_ints(stack, 1);
    const kv_tensor *w = kv_arg_tensor(stack, 2), *b = kv_arg_tensor(stack, 3);
    const float eps = (float)kv_arg_double(stack, 4);
    bool plain = x != NULL && x->dtype == KV_F32 && ns.n >= 1 && ns.n <= x->ndim;
    int64_t cols = 1;
    for (int i = 0; plain && i < ns.n; i++) {
        plain = ns.items[i] == x->sizes[x->ndim - ns.n + i];
        cols *= ns.items[i];
    }
    if (!plain || cols == 0 || !param_ok(w, cols) || !param_ok(b, cols)) return host->stage_reference(op, ks, stack);
    int64_t stat[KV_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) stat[d] = d < x->ndim - ns.n ? x->sizes[d] : 1;
    const kv_device dev = { my_type, 0 };
    kv_tensor *out = host->tensor_empty(x->sizes, x->ndim, KV_F32, dev);
    kv_tensor *mean = out ? host->tensor_empty(stat, x->ndim, KV_F32, dev) : NULL;
    kv_tensor *rstd = mean ? host->tensor_empty(stat, x->ndim, KV_F32, dev) : NULL;
    if (rstd == NULL) {
        host->tensor_release(out);
        host->tensor_release(mean);
        return host->last_error();
    }
    const int64_t rows = host->tensor_numel(x) / cols;
    for (int64_t r = 0; r < rows; r++)
        norm_group(x, r * cols, (float *)out->storage->data + r * cols, cols, eps, w, b, 0, 0,
                   (float *)mean->storage->data + r, (float *)rstd->storage->data + r);
    return return3(stack, out, mean, rstd);
}

static kv_status my_group_norm(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    const kv_tensor *w = kv_arg_tensor(stack, 1), *b = kv_arg_tensor(stack, 2);
    const int64_t n = kv_arg_int(stack, 3), c = kv_arg_int(stack, 4), hxw = kv_arg_int(stack, 5);
    const int64_t group = kv_arg_int(stack, 6);
    const float eps = (float)kv_arg_double(stack, 7);
    const bool plain = x != NULL && x->dtype == KV_F32 && x->ndim >= 2 && n > 0 &&
                       c > 0 && hxw > 0 && group > 0 && c % group == 0 && x->sizes[0] == n && x->sizes[1] == c &&
                       host->tensor_numel(x) == n * c * hxw && param_ok(w, c) && param_ok(b, c);
    if (!plain) return host->stage_reference(op, ks, stack);
    const int64_t stat[2] = { n, group };
    const kv_device dev = { my_type, 0 };
    kv_tensor *out = host->tensor_empty(x->sizes, x->ndim, KV_F32, dev);
    kv_tensor *mean = out ? host->tensor_empty(stat, 2, KV_F32, dev) : NULL;
    kv_tensor *rstd = mean ? host->tensor_empty(stat, 2, KV_F32, dev) : NULL;
    if (rstd == NULL) {
        host->tensor_release(out);
        host->tensor_release(mean);
        return host->last_error();
    }
    const int64_t len = c / group * hxw;
    for (int64_t g = 0; g < n * group; g++)
        norm_group(x, g * len, (float *)out->storage->data + g * len, len, eps, w, b, hxw, (g % group) * (c / group),
                   (float *)mean->storage->data + g, (float *)rstd->storage->data + g);
    return return3(stack, out, mean, rstd);
}

/* One f32 reduction of x over `dim` (in range), in index order: a sum (a
 * mean: then one division by the count) or a product. */
typedef enum { RED_SUM, RED_MEAN, RED_PROD } red_kind;

static kv_status reduce_dim_f32(const kv_tensor *x, int64_t dim, bool keepdim, red_kind kind, kv_stack *stack) {
    if (dim < 0) dim += x->ndim;
    int64_t osz[KV_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != dim) osz[ond++] = x->sizes[d];
        else if (keepdim) osz[ond++] = 1;
    kv_tensor *out = host->tensor_empty(osz, ond, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    const int64_t n = x->sizes[dim];
    int64_t inner = 1, outer = 1;
    for (int d = (int)dim + 1; d < x->ndim; d++) inner *= x->sizes[d];
    for (int d = 0; d < (int)dim; d++) outer *= x->sizes[d];
    float *y = out->storage->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            float acc = kind == RED_PROD ? 1.0f : 0.0f;
            for (int64_t j = 0; j < n; j++) {
                const float v = at(x, (o * n + j) * inner + i);
                acc = kind == RED_PROD ? acc * v : acc + v;
            }
            y[o * inner + i] = kind == RED_MEAN ? acc / (float)n : acc;
        }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* sum.dim_IntList and mean.dim over one dim (or a 1-dim input's all) of
 * f32 without a dtype: an f32 sum in index order (mean: then one division
 * by the count). Several dims, none, a dtype, other dtypes: the staged
 * reference. */
static kv_status reduce_f32(const kv_op *op, kv_keyset ks, kv_stack *stack, bool mean) {
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    const bool keepdim = kv_arg_bool(stack, 2);
    if (x == NULL || x->dtype != KV_F32 || x->ndim < 1 || kv_arg_is_none(stack, 1) || !kv_arg_is_none(stack, 3) ||
        kv_arg_ints(stack, 1).n != 1)
        return host->stage_reference(op, ks, stack);
    int64_t dim = kv_arg_ints(stack, 1).items[0];
    if (dim < -x->ndim || dim >= x->ndim) return host->stage_reference(op, ks, stack);
    return reduce_dim_f32(x, dim, keepdim, mean ? RED_MEAN : RED_SUM, stack);
}

static kv_status my_sum(const kv_op *op, kv_keyset ks, kv_stack *stack) { return reduce_f32(op, ks, stack, false); }
static kv_status my_mean(const kv_op *op, kv_keyset ks, kv_stack *stack) { return reduce_f32(op, ks, stack, true); }

/* gelu in f32 from its formula: 0.5 x (1 + erff(x / sqrt 2)), or with
 * approximate=tanh 0.5 x (1 + tanhf(sqrt(2/pi) (x + 0.044715 x^3))). */
static kv_status my_gelu(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    const char *ap = kv_arg_str(stack, 1);
    const bool tanh_form = ap != NULL && strcmp(ap, "tanh") == 0;
    if (x == NULL || x->dtype != KV_F32 || ap == NULL || (!tanh_form && strcmp(ap, "none") != 0))
        return host->stage_reference(op, ks, stack);
    kv_tensor *out = host->tensor_empty(x->sizes, x->ndim, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    float *y = out->storage->data;
    for (int64_t i = 0; i < host->tensor_numel(x); i++) {
        const float v = at(x, i);
        y[i] = tanh_form ? 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)))
                         : 0.5f * v * (1.0f + erff(v * 0.70710678f));
    }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* prod.dim_int over one dim of f32 without a dtype: an f32 product in
 * index order. Other dtypes or a dtype: the staged reference. */
static kv_status my_prod(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *x = kv_arg_tensor(stack, 0);
    int64_t dim = kv_arg_int(stack, 1);
    const bool keepdim = kv_arg_bool(stack, 2);
    if (x == NULL || x->dtype != KV_F32 || x->ndim < 1 || !kv_arg_is_none(stack, 3) || dim < -x->ndim ||
        dim >= x->ndim)
        return host->stage_reference(op, ks, stack);
    return reduce_dim_f32(x, dim, keepdim, RED_PROD, stack);
}

/* mm and bmm of f32: each output a dot product accumulated in f32 in k
 * order, one rounding per product and per sum (where the compiler fuses
 * them the bound, gamma_{K+1} * sum|a||b|, admits that too). Shape errors
 * and other dtypes: the staged reference, which raises the reference's
 * errors. */
static kv_status matmul_f32(const kv_op *op, kv_keyset ks, kv_stack *stack, bool batched) {
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    const int nd = batched ? 3 : 2;
    if (a == NULL || b == NULL || a->dtype != KV_F32 || b->dtype != KV_F32 || a->ndim != nd || b->ndim != nd ||
        a->sizes[nd - 1] != b->sizes[nd - 2] || (batched && a->sizes[0] != b->sizes[0]))
        return host->stage_reference(op, ks, stack);
    const int64_t batch = batched ? a->sizes[0] : 1, m = a->sizes[nd - 2], kk = a->sizes[nd - 1],
                  n = b->sizes[nd - 1];
    int64_t osz[3] = { batch, m, n };
    kv_tensor *out = host->tensor_empty(batched ? osz : osz + 1, nd, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    float *y = out->storage->data;
    for (int64_t p = 0; p < batch; p++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < kk; k++) {
                    acc += at(a, (p * m + i) * kk + k) * at(b, (p * kk + k) * n + j);
                }
                y[(p * m + i) * n + j] = acc;
            }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status my_mm(const kv_op *op, kv_keyset ks, kv_stack *stack) { return matmul_f32(op, ks, stack, false); }
static kv_status my_bmm(const kv_op *op, kv_keyset ks, kv_stack *stack) { return matmul_f32(op, ks, stack, true); }

/* gelu_backward in f32 from the derivative of the formula: grad * (cdf +
 * x * pdf), cdf = 0.5 (1 + erff(x / sqrt 2)), pdf = expf(-x^2 / 2) /
 * sqrt(2 pi); with approximate=tanh the derivative of the tanh form:
 * 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). Same
 * shapes only (broadcasts: the staged reference). */
static kv_status my_gelu_backward(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    const kv_tensor *g = kv_arg_tensor(stack, 0), *x = kv_arg_tensor(stack, 1);
    const char *ap = kv_arg_str(stack, 2);
    const bool tanh_form = ap != NULL && strcmp(ap, "tanh") == 0;
    if (g == NULL || x == NULL || g->dtype != KV_F32 || x->dtype != KV_F32 || g->ndim != x->ndim ||
        memcmp(g->sizes, x->sizes, sizeof(int64_t) * (size_t)x->ndim) != 0 || ap == NULL ||
        (!tanh_form && strcmp(ap, "none") != 0))
        return host->stage_reference(op, ks, stack);
    kv_tensor *out = host->tensor_empty(x->sizes, x->ndim, KV_F32, (kv_device){ my_type, 0 });
    if (out == NULL) return host->last_error();
    float *y = out->storage->data;
    for (int64_t i = 0; i < host->tensor_numel(x); i++) {
        const float v = at(x, i), gr = at(g, i);
        float d;
        if (tanh_form) {
            const float k = 0.7978845608f, c = 0.044715f;
            const float t = tanhf(k * (v + c * v * v * v));
            d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * c * v * v);
        } else {
            d = 0.5f * (1.0f + erff(v * 0.70710678f)) + v * expf(-0.5f * v * v) * 0.39894228f;
        }
        y[i] = gr * d;
    }
    host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static kv_status reg(void *ctx, kv_device_type type) {
    (void)ctx;
    my_type = type;
    kv_status st = host->register_kernel("_softmax", (kv_key)type, my_softmax);
    if (st == KV_OK) st = host->register_kernel("_log_softmax", (kv_key)type, my_log_softmax);
    if (st == KV_OK) st = host->register_kernel("native_layer_norm", (kv_key)type, my_layer_norm);
    if (st == KV_OK) st = host->register_kernel("native_group_norm", (kv_key)type, my_group_norm);
    if (st == KV_OK) st = host->register_kernel("sum.dim_IntList", (kv_key)type, my_sum);
    if (st == KV_OK) st = host->register_kernel("mean.dim", (kv_key)type, my_mean);
    if (st == KV_OK) st = host->register_kernel("gelu", (kv_key)type, my_gelu);
    if (st == KV_OK) st = host->register_kernel("prod.dim_int", (kv_key)type, my_prod);
    if (st == KV_OK) st = host->register_kernel("mm", (kv_key)type, my_mm);
    if (st == KV_OK) st = host->register_kernel("bmm", (kv_key)type, my_bmm);
    if (st == KV_OK) st = host->register_kernel("gelu_backward", (kv_key)type, my_gelu_backward);
    /* Every other op runs the reference on staged copies, so the programs'
     * other steps run here too and the softmax steps see real logits. */
    if (st == KV_OK) host->register_fallback((kv_key)type, host->stage_reference);
    return st;
}

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    host = desc->host;
    snprintf(desc->name, sizeof desc->name, "textbook");
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->available = 1;
    desc->host_addressable = 1;
    host_mem_install(desc);
    desc->register_kernels = reg;
    return 0;
}
