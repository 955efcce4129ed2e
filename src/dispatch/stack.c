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
    case KV_IV_GENERATOR: return "Generator";
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

kv_status kv_push_generator(kv_stack *s, kv_generator *g) {
    if (g == NULL) return kv_push_none(s);
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_GENERATOR, .v.gen = g });
}

kv_status kv_push_tensors(kv_stack *s, kv_tensor_list list) {
    return kv_stack_push(s, (kv_ivalue){ .tag = KV_IV_TENSOR_LIST, .v.tensors = list });
}

/* kv_push_NAME(s, v) and kv_push_opt_NAME(s, &v or NULL) for each value
 * type stored by value: one definition, so the tag and union member of a
 * type cannot drift between the two. */
#define KV_DEFINE_PUSH(name, ctype, ivtag, member)                                                        \
    kv_status kv_push_##name(kv_stack *s, ctype v) {                                                   \
        return kv_stack_push(s, (kv_ivalue){ .tag = ivtag, .v.member = v });                           \
    }                                                                                                  \
    kv_status kv_push_opt_##name(kv_stack *s, const ctype *v) { return v ? kv_push_##name(s, *v) : kv_push_none(s); }

KV_DEFINE_PUSH(scalar, kv_scalar, KV_IV_SCALAR, scalar)
KV_DEFINE_PUSH(int, int64_t, KV_IV_INT, i)
KV_DEFINE_PUSH(ints, kv_int_list, KV_IV_INT_LIST, ints)
KV_DEFINE_PUSH(double, double, KV_IV_DOUBLE, d)
KV_DEFINE_PUSH(bool, bool, KV_IV_BOOL, b)
KV_DEFINE_PUSH(dtype, kv_dtype, KV_IV_DTYPE, dtype)
KV_DEFINE_PUSH(device, kv_device, KV_IV_DEVICE, device)

#undef KV_DEFINE_PUSH

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
