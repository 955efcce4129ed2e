/* The boxed value stack: push helpers for callers and return helpers for
 * kernels. Stacks live wherever the caller put them (usually the C stack),
 * so nothing here allocates. */
#include "kv/stack.h"

#include "kv/tensor.h"

const char *kv_ivalue_tag_name(kv_ivalue_tag tag) {
    switch (tag) {
    case KV_IV_NONE: return "None";
    case KV_IV_TENSOR: return "Tensor";
    case KV_IV_TENSOR_LIST: return "Tensor[]";
    case KV_IV_SCALAR: return "Scalar";
    case KV_IV_INT: return "int";
    case KV_IV_INT_LIST: return "int[]";
    case KV_IV_DOUBLE: return "float";
    case KV_IV_BOOL: return "bool";
    case KV_IV_DTYPE: return "ScalarType";
    case KV_IV_DEVICE: return "Device";
    case KV_IV_STR: return "str";
    }
    return "?";
}

kv_status kv_stack_push(kv_stack *s, kv_ivalue v) {
    if (s == NULL) return kv_error(KV_ERR_INTERNAL, "kv_stack_push: stack is NULL");
    if (s->size >= s->cap)
        return kv_error(KV_ERR_INTERNAL, "kv_stack_push: stack overflow (capacity %d) pushing %s", s->cap,
                        kv_ivalue_tag_name(v.tag));
    s->slots[s->size++] = v;
    return KV_OK;
}

kv_status kv_push_none(kv_stack *s) { return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_NONE }); }

kv_status kv_push_tensor(kv_stack *s, struct kv_tensor *t) {
    if (t == NULL) return kv_push_none(s);
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = t });
}

kv_status kv_push_tensors(kv_stack *s, kv_tensor_list list) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_TENSOR_LIST, .v.tensors = list });
}

kv_status kv_push_scalar(kv_stack *s, kv_scalar v) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_SCALAR, .v.scalar = v });
}

kv_status kv_push_opt_scalar(kv_stack *s, const kv_scalar *v) { return v ? kv_push_scalar(s, *v) : kv_push_none(s); }

kv_status kv_push_int(kv_stack *s, int64_t v) { return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_INT, .v.i = v }); }

kv_status kv_push_opt_int(kv_stack *s, const int64_t *v) { return v ? kv_push_int(s, *v) : kv_push_none(s); }

kv_status kv_push_ints(kv_stack *s, kv_int_list v) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_INT_LIST, .v.ints = v });
}

kv_status kv_push_opt_ints(kv_stack *s, const kv_int_list *v) { return v ? kv_push_ints(s, *v) : kv_push_none(s); }

kv_status kv_push_double(kv_stack *s, double v) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_DOUBLE, .v.d = v });
}

kv_status kv_push_opt_double(kv_stack *s, const double *v) { return v ? kv_push_double(s, *v) : kv_push_none(s); }

kv_status kv_push_bool(kv_stack *s, bool v) { return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = v }); }

kv_status kv_push_opt_bool(kv_stack *s, const bool *v) { return v ? kv_push_bool(s, *v) : kv_push_none(s); }

kv_status kv_push_dtype(kv_stack *s, kv_dtype v) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_DTYPE, .v.dtype = v });
}

kv_status kv_push_opt_dtype(kv_stack *s, const kv_dtype *v) { return v ? kv_push_dtype(s, *v) : kv_push_none(s); }

kv_status kv_push_device(kv_stack *s, kv_device v) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_DEVICE, .v.device = v });
}

kv_status kv_push_opt_device(kv_stack *s, const kv_device *v) { return v ? kv_push_device(s, *v) : kv_push_none(s); }

kv_status kv_push_str(kv_stack *s, const char *v) {
    if (v == NULL) return kv_push_none(s);
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_STR, .v.str = v });
}

/* Every schema has at least one argument slot or the caller sized the stack
 * with KV_STACK_MAX, so returns (at most KV_SCHEMA_MAX_RETURNS) fit. A
 * stack too small for them is a caller bug: the extra tensors are released
 * rather than leaked, and the dropped count shows in the stack size. */
void kv_stack_return_tensor(kv_stack *s, struct kv_tensor *owned) {
    s->size = 0;
    if (s->cap < 1) {
        kv_tensor_release(owned);
        return;
    }
    s->slots[0] = owned ? (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = owned } : (kv_ivalue){ .tag = KV_IV_NONE };
    s->size = 1;
}

void kv_stack_return_tensors(kv_stack *s, struct kv_tensor *const *owned, int n) {
    s->size = 0;
    for (int i = 0; i < n; i++) {
        if (i >= s->cap) {
            kv_tensor_release(owned[i]);
            continue;
        }
        s->slots[i] = owned[i] ? (kv_ivalue){ .tag = KV_IV_TENSOR, .v.tensor = owned[i] }
                               : (kv_ivalue){ .tag = KV_IV_NONE };
        s->size = i + 1;
    }
}

void kv_stack_return_bool(kv_stack *s, bool v) {
    s->size = 0;
    if (s->cap < 1) return;
    s->slots[0] = (kv_ivalue){ .tag = KV_IV_BOOL, .v.b = v };
    s->size = 1;
}

/* Returns own their tensors one per slot; tensor lists never appear among
 * returns (kernels return tuples as separate slots), so only TENSOR slots
 * hold references. */
void kv_stack_clear_returns(kv_stack *s) {
    if (s == NULL) return;
    for (int i = 0; i < s->size; i++) {
        if (s->slots[i].tag == KV_IV_TENSOR) kv_tensor_release(s->slots[i].v.tensor);
        s->slots[i].tag = KV_IV_NONE;
    }
    s->size = 0;
}
