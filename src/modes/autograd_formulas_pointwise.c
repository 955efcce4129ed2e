/* Backward formulas of the pointwise ops (binary arithmetic, unary, clamp,
 * where, the lazy-bit ops, fills).
 *
 * Conventions (PyTorch's): for a holomorphic f the gradient is
 * grad * conj(f'(z)), which is grad * f'(x) for real dtypes (kv_ag_conj
 * is the identity there). Gradients come out in the broadcast shape of
 * the output; the engine sums them down to each input's shape and casts
 * them to its dtype. Argument slots follow ops.schema. */
#include "kv/ops.h"
#include "modes/autograd_internal.h"

static kv_tensor *one_like(kv_ag_fctx *c, const kv_tensor *t) {
    return t ? kv_ag_scalar(c, kv_scalar_int(1), t->dtype, t->device) : NULL;
}

static kv_tensor *zero_like(kv_ag_fctx *c, const kv_tensor *t) {
    return t ? kv_ag_scalar(c, kv_scalar_int(0), t->dtype, t->device) : NULL;
}

/* add.Tensor / add_.Tensor / sub.Tensor (self, other, alpha) */
static kv_status add_sub(kv_ag_fctx *c, bool subtract) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_ag_set(c, 0, g);
    if (kv_ag_needs(c, 1)) {
        kv_scalar alpha = kv_ag_arg(c, 2)->v.scalar;
        kv_tensor *go = kv_ag_scale_scalar(c, g, alpha, true);
        kv_ag_set(c, 1, subtract ? kv_ag_keep(c, kv_neg(go)) : go);
    }
    return KV_OK;
}

kv_status kv_ag_f_add(kv_ag_fctx *c) { return add_sub(c, false); }

/* _foreach_add.List / _foreach_add_.List (self[], other[], alpha): per
 * element add's: self[i] gets grad[i], other[i] grad[i] * conj(alpha)
 * (each reduced to its input's shape by the engine, as for add). */
kv_status kv_ag_f_foreach_add(kv_ag_fctx *c) {
    const kv_scalar alpha = kv_ag_arg(c, 2)->v.scalar;
    for (int i = 0; i < c->node->noutputs; i++) {
        kv_tensor *g = kv_ag_grad(c, i);
        if (g == NULL) continue;
        kv_ag_set_at(c, 0, i, g);
        if (kv_ag_needs_at(c, 1, i)) kv_ag_set_at(c, 1, i, kv_ag_scale_scalar(c, g, alpha, true));
    }
    return KV_OK;
}

/* _foreach_mul.Scalar (self[], scalar): self[i] gets grad[i] * conj(scalar). */
kv_status kv_ag_f_foreach_mul_scalar(kv_ag_fctx *c) {
    const kv_scalar scalar = kv_ag_arg(c, 1)->v.scalar;
    for (int i = 0; i < c->node->noutputs; i++) {
        kv_tensor *g = kv_ag_grad(c, i);
        if (g != NULL && kv_ag_needs_at(c, 0, i)) kv_ag_set_at(c, 0, i, kv_ag_scale_scalar(c, g, scalar, true));
    }
    return KV_OK;
}
kv_status kv_ag_f_sub(kv_ag_fctx *c) { return add_sub(c, true); }

/* mul.Tensor / mul_.Tensor: d(a*b) = grad*conj(b), grad*conj(a). For
 * mul_ the saved self is its value before the op. */
kv_status kv_ag_f_mul(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(g, kv_ag_conj(c, kv_ag_saved(c, 1)))));
    if (kv_ag_needs(c, 1)) kv_ag_set(c, 1, kv_ag_keep(c, kv_mul(g, kv_ag_conj(c, kv_ag_saved(c, 0)))));
    return KV_OK;
}

/* div.Tensor: grad / conj(b); -grad * conj(a / b / b). */
kv_status kv_ag_f_div(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *a = kv_ag_saved(c, 0), *b = kv_ag_saved(c, 1);
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_keep(c, kv_div(g, kv_ag_conj(c, b))));
    if (kv_ag_needs(c, 1)) {
        kv_tensor *q = kv_ag_keep(c, kv_div(kv_ag_keep(c, kv_div(a, b)), b));
        kv_ag_set(c, 1, kv_ag_keep(c, kv_neg(kv_ag_keep(c, kv_mul(g, kv_ag_conj(c, q))))));
    }
    return KV_OK;
}

/* maximum / minimum: the gradient goes to the winner; a tie splits it. */
static kv_status max_min(kv_ag_fctx *c, bool is_max) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *a = kv_ag_saved(c, 0), *b = kv_ag_saved(c, 1);
    if (a == NULL || b == NULL) return KV_OK;
    kv_tensor *a_wins = kv_ag_keep(c, is_max ? kv_lt(b, a) : kv_lt(a, b));
    kv_tensor *b_wins = kv_ag_keep(c, is_max ? kv_lt(a, b) : kv_lt(b, a));
    kv_tensor *tie = kv_ag_keep(c, kv_eq(a, b));
    kv_tensor *half = kv_ag_mask(c, tie, kv_ag_scale(c, g, 0.5));
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_keep(c, kv_where(a_wins, g, half)));
    if (kv_ag_needs(c, 1)) kv_ag_set(c, 1, kv_ag_keep(c, kv_where(b_wins, g, half)));
    return KV_OK;
}

kv_status kv_ag_f_maximum(kv_ag_fctx *c) { return max_min(c, true); }
kv_status kv_ag_f_minimum(kv_ag_fctx *c) { return max_min(c, false); }

/* pow.Tensor_Scalar: grad * conj(e * x^(e-1)); exponent 0 gives zeros. */
kv_status kv_ag_f_pow(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *x = kv_ag_saved(c, 0);
    kv_scalar e = kv_ag_arg(c, 1)->v.scalar;
    double re, im;
    kv_scalar_to_complex(e, &re, &im);
    if (re == 0.0 && im == 0.0) {
        kv_ag_set(c, 0, kv_ag_zeros_meta(c, kv_ag_in(c, 0), g->dtype));
        return KV_OK;
    }
    /* e - 1 keeps e's kind, so an integer exponent stays an integer. */
    kv_scalar em1 = kv_scalar_double(re - 1.0);
    switch (e.kind) {
    case KV_SCALAR_BOOL: em1 = kv_scalar_int(e.v.b ? 0 : -1); break;
    case KV_SCALAR_INT: em1 = kv_scalar_int(e.v.i - 1); break;
    case KV_SCALAR_DOUBLE: break;
    case KV_SCALAR_COMPLEX: em1 = kv_scalar_complex(re - 1.0, im); break;
    }
    kv_tensor *d = kv_ag_scale_scalar(c, kv_ag_keep(c, kv_pow(x, em1)), e, false);
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(g, kv_ag_conj(c, d))));
    return KV_OK;
}

kv_status kv_ag_f_neg(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_neg(kv_ag_grad(c, 0))));
    return KV_OK;
}

/* abs: grad * sgn(x), sgn(0) = 0; sgn(z) = z / |z| for complex. */
kv_status kv_ag_f_abs(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *x = kv_ag_saved(c, 0);
    if (x == NULL) return KV_OK;
    if (kv_dtype_is_complex(x->dtype)) {
        kv_tensor *mag = kv_ag_keep(c, kv_abs(x));
        kv_tensor *is0 = kv_ag_keep(c, kv_eq(mag, zero_like(c, mag)));
        kv_tensor *sgn = kv_ag_mask_not(c, is0, kv_ag_keep(c, kv_div(x, mag)));
        kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(g, sgn)));
        return KV_OK;
    }
    kv_tensor *zero = zero_like(c, x);
    kv_tensor *pos = kv_ag_keep(c, kv_lt(zero, x));
    kv_tensor *neg = kv_ag_keep(c, kv_lt(x, zero));
    kv_tensor *gneg = kv_ag_mask(c, neg, kv_ag_keep(c, kv_neg(g)));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_where(pos, g, gneg)));
    return KV_OK;
}

/* exp: grad * conj(exp(x)), from the saved result. */
kv_status kv_ag_f_exp(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, kv_ag_result(c, 0)))));
    return KV_OK;
}

kv_status kv_ag_f_log(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_div(kv_ag_grad(c, 0), kv_ag_conj(c, kv_ag_saved(c, 0)))));
    return KV_OK;
}

/* sqrt: grad / (2 conj(result)). */
kv_status kv_ag_f_sqrt(kv_ag_fctx *c) {
    kv_tensor *twice = kv_ag_scale(c, kv_ag_conj(c, kv_ag_result(c, 0)), 2.0);
    kv_ag_set(c, 0, kv_ag_keep(c, kv_div(kv_ag_grad(c, 0), twice)));
    return KV_OK;
}

/* rsqrt: grad * conj(-0.5 * result^3). */
kv_status kv_ag_f_rsqrt(kv_ag_fctx *c) {
    kv_tensor *y = kv_ag_result(c, 0);
    kv_tensor *y3 = kv_ag_keep(c, kv_mul(kv_ag_keep(c, kv_mul(y, y)), y));
    kv_tensor *d = kv_ag_scale(c, y3, -0.5);
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, d))));
    return KV_OK;
}

kv_status kv_ag_f_sin(kv_ag_fctx *c) {
    kv_tensor *d = kv_ag_keep(c, kv_cos(kv_ag_saved(c, 0)));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, d))));
    return KV_OK;
}

kv_status kv_ag_f_cos(kv_ag_fctx *c) {
    kv_tensor *d = kv_ag_keep(c, kv_sin(kv_ag_saved(c, 0)));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_neg(kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, d))))));
    return KV_OK;
}

/* tanh: grad * conj(1 - y^2). */
kv_status kv_ag_f_tanh(kv_ag_fctx *c) {
    kv_tensor *y = kv_ag_result(c, 0);
    kv_tensor *d = kv_ag_keep(c, kv_sub(one_like(c, y), kv_ag_keep(c, kv_mul(y, y)), kv_scalar_int(1)));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, d))));
    return KV_OK;
}

/* sigmoid: grad * conj(y * (1 - y)). */
kv_status kv_ag_f_sigmoid(kv_ag_fctx *c) {
    kv_tensor *y = kv_ag_result(c, 0);
    kv_tensor *d = kv_ag_keep(c, kv_mul(y, kv_ag_keep(c, kv_sub(one_like(c, y), y, kv_scalar_int(1)))));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, d))));
    return KV_OK;
}

/* relu (PyTorch's threshold_backward): grad where result > 0. */
kv_status kv_ag_f_relu(kv_ag_fctx *c) {
    kv_tensor *y = kv_ag_result(c, 0);
    kv_tensor *pos = kv_ag_keep(c, kv_lt(zero_like(c, y), y));
    kv_ag_set(c, 0, kv_ag_mask(c, pos, kv_ag_grad(c, 0)));
    return KV_OK;
}

kv_status kv_ag_f_gelu(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_keep(c, kv_gelu_backward(kv_ag_grad(c, 0), kv_ag_saved(c, 0), kv_ag_arg(c, 1)->v.str)));
    return KV_OK;
}

/* silu: grad * conj(s * (1 + x (1 - s))), s = sigmoid(x). */
kv_status kv_ag_f_silu(kv_ag_fctx *c) {
    kv_tensor *x = kv_ag_saved(c, 0);
    kv_tensor *s = kv_ag_keep(c, kv_sigmoid(x));
    kv_tensor *one = one_like(c, s);
    kv_tensor *t = kv_ag_keep(c, kv_mul(x, kv_ag_keep(c, kv_sub(one, s, kv_scalar_int(1)))));
    kv_tensor *d = kv_ag_keep(c, kv_mul(s, kv_ag_keep(c, kv_add(one, t, kv_scalar_int(1)))));
    kv_ag_set(c, 0, kv_ag_keep(c, kv_mul(kv_ag_grad(c, 0), kv_ag_conj(c, d))));
    return KV_OK;
}

/* clamp (Scalar bounds): grad where min <= x <= max. */
kv_status kv_ag_f_clamp(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *x = kv_ag_saved(c, 0);
    if (x == NULL) return KV_OK;
    const kv_ivalue *lo = kv_ag_arg(c, 1), *hi = kv_ag_arg(c, 2);
    if (lo->tag == KV_IV_SCALAR) {
        kv_tensor *below = kv_ag_keep(c, kv_lt(x, kv_ag_scalar(c, lo->v.scalar, x->dtype, x->device)));
        g = kv_ag_mask_not(c, below, g);
    }
    if (hi->tag == KV_IV_SCALAR) {
        kv_tensor *above = kv_ag_keep(c, kv_lt(kv_ag_scalar(c, hi->v.scalar, x->dtype, x->device), x));
        g = kv_ag_mask_not(c, above, g);
    }
    kv_ag_set(c, 0, g);
    return KV_OK;
}

/* clamp.Tensor / clamp_.Tensor (self, min?, max?): self gets grad where
 * min <= x <= max, min where x < min <= max, max where x > max or
 * max < min (PyTorch's clamp_backward_min_max). x is self before the op. */
kv_status kv_ag_f_clamp_tensor(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *x = kv_ag_saved(c, 0);
    if (x == NULL) return KV_OK;
    const bool has_lo = kv_ag_in(c, 1) && kv_ag_in(c, 1)->present;
    const bool has_hi = kv_ag_in(c, 2) && kv_ag_in(c, 2)->present;
    kv_tensor *below = has_lo ? kv_ag_keep(c, kv_lt(x, kv_ag_saved(c, 1))) : NULL;
    kv_tensor *above = has_hi ? kv_ag_keep(c, kv_lt(kv_ag_saved(c, 2), x)) : NULL;
    if (kv_ag_needs(c, 0)) {
        kv_tensor *gs = g;
        if (has_lo) gs = kv_ag_mask_not(c, below, gs);
        if (has_hi) gs = kv_ag_mask_not(c, above, gs);
        kv_ag_set(c, 0, gs);
    }
    /* With both bounds and max < min the result is max everywhere: min gets
     * nothing and max gets every gradient, as in PyTorch. */
    kv_tensor *inverted = has_lo && has_hi ? kv_ag_keep(c, kv_lt(kv_ag_saved(c, 2), kv_ag_saved(c, 1))) : NULL;
    if (has_lo && kv_ag_needs(c, 1)) {
        kv_tensor *gl = kv_ag_mask(c, below, g);
        kv_ag_set(c, 1, inverted ? kv_ag_mask_not(c, inverted, gl) : gl);
    }
    if (has_hi && kv_ag_needs(c, 2)) {
        kv_tensor *gh = kv_ag_mask(c, above, g);
        kv_ag_set(c, 2, inverted ? kv_ag_keep(c, kv_where(inverted, g, gh)) : gh);
    }
    return KV_OK;
}

/* where.self (condition, self, other). */
kv_status kv_ag_f_where(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    kv_tensor *cond = kv_ag_saved(c, 0);
    if (kv_ag_needs(c, 1)) kv_ag_set(c, 1, kv_ag_mask(c, cond, g));
    if (kv_ag_needs(c, 2)) kv_ag_set(c, 2, kv_ag_mask_not(c, cond, g));
    return KV_OK;
}

/* masked_fill.Scalar / masked_fill_.Scalar (self, mask, value): the
 * filled elements no longer depend on self; mask is not differentiable.
 * The engine sums the gradient down to self's shape when mask broadcast
 * it. */
kv_status kv_ag_f_masked_fill(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_mask_not(c, kv_ag_saved(c, 1), g));
    return KV_OK;
}

/* fill_ / zero_ (and copy_'s self): the old values no longer matter. */
kv_status kv_ag_f_zero_self(kv_ag_fctx *c) {
    kv_tensor *g = kv_ag_grad(c, 0);
    if (g && kv_ag_needs(c, 0)) kv_ag_set(c, 0, kv_ag_zeros_meta(c, kv_ag_in(c, 0), g->dtype));
    return KV_OK;
}

/* clone, contiguous, resolve_conj, resolve_neg: values unchanged. */
kv_status kv_ag_f_identity(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_grad(c, 0));
    return KV_OK;
}

/* conj, _conj, conj_physical. */
kv_status kv_ag_f_conj(kv_ag_fctx *c) {
    kv_ag_set(c, 0, kv_ag_conj(c, kv_ag_grad(c, 0)));
    return KV_OK;
}

/* _neg_view: the view's values are the negated base. */
kv_status kv_ag_f_neg_view(kv_ag_fctx *c) { return kv_ag_f_neg(c); }
