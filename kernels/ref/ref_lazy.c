/* Lazy-bit references: conj, _conj, conj_physical, resolve_conj,
 * _neg_view, resolve_neg, is_conj, is_neg, _efficientzerotensor,
 * _is_zerotensor.
 *
 * These are the backend halves of the ops: the lazy keys (src/modes/lazy_*)
 * resolve bits above them, so here a tensor normally carries none. The
 * bit-making ops (conj, _conj, _neg_view) are views that fall through the
 * lazy keys, so they do see bits, and toggle them: conj(conj(x)) has no
 * bit. Views are metadata only and work for tensors of any device;
 * conj_physical and the zero factory touch data and need the CPU.
 *
 * _efficientzerotensor allocates a real zero-filled contiguous storage
 * (not a zero-byte one with stride 0): every view op, and any reader that
 * ignores the bit, then sees zeros and stays in bounds. */
#include <string.h>

#include "ref/ref.h"
#include "ref/ref_kernels.h"

/* A new tensor struct over self's storage (a view with the same
 * geometry) whose keys differ from self's by `toggle`. */
static kv_status ref_return_alias(kv_stack *stack, const kv_tensor *self, kv_keyset toggle) {
    kv_tensor *v = kv_tensor_alias(self);
    if (v == NULL) return kv_last_error();
    v->keys ^= toggle;
    kv_stack_return_tensor(stack, v);
    return KV_OK;
}

/* PyTorch: conj is a lazy view for complex tensors and self for others. */
KV_REF_KERNEL(conj) {
    (void)op;
    (void)ks;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    return ref_return_alias(stack, self, kv_dtype_is_complex(self->dtype) ? kv_keyset_of(KV_KEY_CONJUGATE) : 0);
}

KV_REF_KERNEL(_conj) {
    (void)op;
    (void)ks;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    return ref_return_alias(stack, self, kv_dtype_is_complex(self->dtype) ? kv_keyset_of(KV_KEY_CONJUGATE) : 0);
}

static kv_ref_val ref_same_i(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return x[0];
}
static kv_ref_val ref_conj_c(const kv_ref_val *x, const void *ctx) {
    (void)ctx;
    return kv_ref_val_complex(x[0].re, -x[0].im);
}
static const kv_ref_ewise_fns fns_conj = { ref_same_i, ref_same_i, ref_conj_c };

/* A new tensor in every case, also for real dtypes (PyTorch copies). */
KV_REF_KERNEL(conj_physical) {
    (void)op;
    (void)ks;
    static const char *const name = "conj_physical";
    kv_tensor *self = kv_arg_tensor(stack, 0);
    kv_status st = kv_ref_check_cpu(name, "self", self);
    if (st != KV_OK) return st;
    kv_tensor *out = kv_ref_new_output(self->sizes, self->ndim, self->dtype);
    if (out == NULL) return kv_last_error();
    kv_tensor *inputs[1] = { self };
    if ((st = kv_ref_ewise_run(name, &fns_conj, NULL, self->dtype, out, inputs, 1)) != KV_OK) {
        kv_tensor_release(out);
        return st;
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}

/* With no bit to resolve, resolve_* return an alias of self, as PyTorch
 * returns self. */
KV_REF_KERNEL(resolve_conj) {
    (void)op;
    (void)ks;
    return ref_return_alias(stack, kv_arg_tensor(stack, 0), 0);
}

KV_REF_KERNEL(resolve_neg) {
    (void)op;
    (void)ks;
    return ref_return_alias(stack, kv_arg_tensor(stack, 0), 0);
}

/* Negation is undefined on bool (PyTorch: "Negation, the `-` operator, on
 * a bool tensor is not supported"), so bool cannot carry the bit. */
KV_REF_KERNEL(_neg_view) {
    (void)op;
    (void)ks;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (self->dtype == KV_BOOL)
        return kv_error(KV_ERR_DTYPE,
                        "_neg_view: argument 'self': negation, the `-` operator, on a bool tensor is not supported");
    return ref_return_alias(stack, self, kv_keyset_of(KV_KEY_NEGATIVE));
}

KV_REF_KERNEL(is_conj) {
    (void)op;
    (void)ks;
    kv_stack_return_bool(stack, kv_keyset_has(kv_arg_tensor(stack, 0)->keys, KV_KEY_CONJUGATE));
    return KV_OK;
}

KV_REF_KERNEL(is_neg) {
    (void)op;
    (void)ks;
    kv_stack_return_bool(stack, kv_keyset_has(kv_arg_tensor(stack, 0)->keys, KV_KEY_NEGATIVE));
    return KV_OK;
}

KV_REF_KERNEL(_is_zerotensor) {
    (void)op;
    (void)ks;
    kv_stack_return_bool(stack, kv_keyset_has(kv_arg_tensor(stack, 0)->keys, KV_KEY_ZERO_TENSOR));
    return KV_OK;
}

/* _efficientzerotensor(SymInt[] size, *, dtype, layout, device, pin_memory) */
KV_REF_KERNEL(_efficientzerotensor) {
    (void)op;
    (void)ks;
    static const char *const name = "_efficientzerotensor";
    kv_status st = kv_ref_check_tensor_options(name, stack, 2, 3, 4);
    if (st != KV_OK) return st;
    const kv_dtype dt = kv_arg_is_none(stack, 1) ? KV_F32 : kv_arg_dtype(stack, 1);
    const kv_int_list size = kv_arg_ints(stack, 0);
    if (size.n > KV_MAX_DIMS)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'size': %d dims, at most %d are supported", name, size.n,
                        KV_MAX_DIMS);
    for (int d = 0; d < size.n; d++) {
        if (size.items[d] < 0) {
            char buf[KV_REF_SHAPE_BUF];
            return kv_error(KV_ERR_NEGATIVE_SIZE, "%s: argument 'size': negative dimension %lld in %s", name,
                            (long long)size.items[d], kv_ref_format_shape(size.items, size.n, buf, sizeof buf));
        }
    }
    kv_tensor *out = kv_ref_new_output(size.items, size.n, dt);
    if (out == NULL) return kv_last_error();
    /* All-zero bytes are zero in every dtype (0.0, +0, false, 0+0i). */
    if (out->storage->nbytes > 0) memset(out->storage->data, 0, out->storage->nbytes);
    out->keys = kv_keyset_add(out->keys, KV_KEY_ZERO_TENSOR);
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
