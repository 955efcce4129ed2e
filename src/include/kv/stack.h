/* The boxed calling convention: a stack of tagged values described by the
 * op's schema.
 *
 * Protocol. A caller pushes every argument of the schema in order (absent
 * optionals as NONE); argument values are borrowed. A kernel reads them,
 * then replaces the whole stack with the op's returns, which the caller
 * owns (tensors carry one reference each). On failure a kernel leaves no
 * owned values on the stack, so the caller has nothing to release. Typed
 * wrappers put the slots on the C stack: no heap traffic per call. */
#ifndef KV_STACK_H
#define KV_STACK_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/device.h"
#include "kv/dtype.h"
#include "kv/generator.h"
#include "kv/scalar.h"
#include "kv/status.h"

struct kv_tensor;

typedef enum kv_ivalue_tag {
    KV_IV_NONE,
    KV_IV_TENSOR,
    KV_IV_TENSOR_LIST,
    KV_IV_SCALAR,
    KV_IV_INT,      /* also Layout and MemoryFormat enums */
    KV_IV_INT_LIST,
    KV_IV_DOUBLE,
    KV_IV_BOOL,
    KV_IV_DTYPE,
    KV_IV_DEVICE,
    KV_IV_STR,
    KV_IV_GENERATOR /* Generator: a borrowed pointer, advanced by random kernels */
} kv_ivalue_tag;

typedef struct kv_tensor_list {
    struct kv_tensor *const *items; /* Tensor[]: entries never NULL */
    int n;
} kv_tensor_list;

typedef struct kv_int_list {
    const int64_t *items;
    int n;
} kv_int_list;

typedef struct kv_ivalue {
    kv_ivalue_tag tag;
    union {
        struct kv_tensor *tensor;
        kv_tensor_list tensors;
        kv_scalar scalar;
        int64_t i;
        kv_int_list ints;
        double d;
        bool b;
        kv_dtype dtype;
        kv_device device;
        const char *str;
        kv_generator *gen;
    } v;
} kv_ivalue;

const char *kv_ivalue_tag_name(kv_ivalue_tag tag);

typedef struct kv_stack {
    kv_ivalue *slots;
    int size;
    int cap;
} kv_stack;

#define KV_STACK_MAX 24 /* enough for every schema in ops.schema */

static inline kv_stack kv_stack_on(kv_ivalue *slots, int cap) { return (kv_stack){ slots, 0, cap }; }

/* Pushes; KV_ERR_INTERNAL (with a message) when the stack is full. */
kv_status kv_stack_push(kv_stack *s, kv_ivalue v);
kv_status kv_push_none(kv_stack *s);
kv_status kv_push_tensor(kv_stack *s, struct kv_tensor *t);     /* NULL pushes NONE (Tensor?) */
kv_status kv_push_tensors(kv_stack *s, kv_tensor_list list);
kv_status kv_push_scalar(kv_stack *s, kv_scalar v);
kv_status kv_push_opt_scalar(kv_stack *s, const kv_scalar *v); /* NULL pushes NONE */
kv_status kv_push_int(kv_stack *s, int64_t v);
kv_status kv_push_opt_int(kv_stack *s, const int64_t *v);
kv_status kv_push_ints(kv_stack *s, kv_int_list v);
kv_status kv_push_opt_ints(kv_stack *s, const kv_int_list *v);
kv_status kv_push_double(kv_stack *s, double v);
kv_status kv_push_opt_double(kv_stack *s, const double *v);
kv_status kv_push_bool(kv_stack *s, bool v);
kv_status kv_push_opt_bool(kv_stack *s, const bool *v);
kv_status kv_push_dtype(kv_stack *s, kv_dtype v);
kv_status kv_push_opt_dtype(kv_stack *s, const kv_dtype *v);
kv_status kv_push_device(kv_stack *s, kv_device v);
kv_status kv_push_opt_device(kv_stack *s, const kv_device *v);
kv_status kv_push_str(kv_stack *s, const char *v);               /* NULL pushes NONE */
kv_status kv_push_generator(kv_stack *s, kv_generator *g);      /* NULL pushes NONE (the default) */

/* Replaces the stack contents with owned returns (kernels use these). */
void kv_stack_return_tensor(kv_stack *s, struct kv_tensor *owned);
void kv_stack_return_tensors(kv_stack *s, struct kv_tensor *const *owned, int n);
void kv_stack_return_bool(kv_stack *s, bool v);
/* Releases every owned tensor on the stack and empties it (for returns). */
void kv_stack_clear_returns(kv_stack *s);

/* Argument accessors for kernels; they trust the schema-checked layout. */
static inline struct kv_tensor *kv_arg_tensor(const kv_stack *s, int i) {
    return s->slots[i].tag == KV_IV_TENSOR ? s->slots[i].v.tensor : (struct kv_tensor *)0;
}
static inline bool kv_arg_is_none(const kv_stack *s, int i) { return s->slots[i].tag == KV_IV_NONE; }
static inline int64_t kv_arg_int(const kv_stack *s, int i) { return s->slots[i].v.i; }
static inline double kv_arg_double(const kv_stack *s, int i) { return s->slots[i].v.d; }
static inline bool kv_arg_bool(const kv_stack *s, int i) { return s->slots[i].v.b; }
static inline kv_scalar kv_arg_scalar(const kv_stack *s, int i) { return s->slots[i].v.scalar; }
static inline kv_int_list kv_arg_ints(const kv_stack *s, int i) { return s->slots[i].v.ints; }
static inline kv_tensor_list kv_arg_tensors(const kv_stack *s, int i) { return s->slots[i].v.tensors; }
static inline const char *kv_arg_str(const kv_stack *s, int i) { return s->slots[i].v.str; }
static inline kv_dtype kv_arg_dtype(const kv_stack *s, int i) { return s->slots[i].v.dtype; }
static inline kv_device kv_arg_device(const kv_stack *s, int i) { return s->slots[i].v.device; }
/* A Generator? slot: the generator, or the thread's default for None. */
static inline kv_generator *kv_arg_generator(const kv_stack *s, int i) {
    return kv_generator_or_default(s->slots[i].tag == KV_IV_GENERATOR ? s->slots[i].v.gen : (kv_generator *)0);
}

#endif
