/* foreach references: _foreach_add.List, _foreach_add_.List,
 * _foreach_mul.Scalar.
 *
 * PyTorch's semantics are its slow path's: the lists must be non-empty
 * and of one length (check_foreach_api_restrictions), and element i is the
 * per-tensor op on element i of each list, with that op's own rules (type
 * promotion and broadcasting per element: lists of mixed dtypes and
 * shapes are fine). So each element runs the add.Tensor / add_.Tensor
 * reference itself, and the results are bit for bit those of a loop of
 * add calls; an error names the element and then says what add said.
 *
 * A Tensor[] return is one stack slot per element (the stack's returns
 * convention, kv/stack.h), so the caller's stack must hold as many.
 *
 * The in-place op checks every element before it writes any: a failure
 * leaves every self as it was (PyTorch's slow path would have written
 * the elements before the failing one; all-or-nothing is what its fast
 * path gives and what a caller can reason about). */
#include "ref/ref.h"
#include "ref/ref_kernels.h"

#include "kv/op_ids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PyTorch's check_foreach_api_restrictions for one or two lists. */
static kv_status foreach_check_lists(const char *op, kv_tensor_list self, const kv_tensor_list *other) {
    if (self.n < 1)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'self': Tensor list must have at least one tensor.", op);
    if (other == NULL) return KV_OK;
    if (other->n < 1)
        return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'other': Tensor list must have at least one tensor.", op);
    if (other->n != self.n)
        return kv_error(KV_ERR_INVALID_ARG,
                        "%s: arguments 'self' and 'other': Tensor lists must have the same number of tensors, got "
                        "%d and %d",
                        op, self.n, other->n);
    return KV_OK;
}

/* The returns need one slot each: a caller's stack too small for them is
 * an error before anything is computed. */
static kv_status foreach_check_room(const char *op, const kv_stack *stack, int n) {
    if (stack->cap >= n) return KV_OK;
    return kv_error(KV_ERR_INVALID_ARG, "%s: the call's stack holds %d values, too few for the %d tensors returned", op,
                    stack->cap, n);
}

/* Re-raises the thread's error with the element that caused it in front. */
static kv_status foreach_element_error(const char *op, int i, kv_status st) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", kv_last_error_message());
    if (st == KV_OK) st = KV_ERR_INTERNAL;
    return kv_error(st, "%s: element %d: %s", op, i, msg);
}

/* Puts n owned results on the stack, or releases them on failure. */
static kv_status foreach_return(kv_stack *stack, kv_tensor **results, int n, kv_status st) {
    if (st == KV_OK) {
        kv_stack_return_tensors(stack, results, n);
    } else {
        for (int i = 0; i < n; i++) kv_tensor_release(results[i]);
    }
    free(results);
    return st;
}

/* One add/add_ call on element i's three slots. */
static kv_status foreach_add_one(const kv_ref_foreach_impl *impl, bool inplace, kv_tensor *self, kv_tensor *other,
                                 kv_scalar alpha, kv_tensor **result) {
    kv_ivalue slots[3] = { { .tag = KV_IV_TENSOR, .v.tensor = self },
                           { .tag = KV_IV_TENSOR, .v.tensor = other },
                           { .tag = KV_IV_SCALAR, .v.scalar = alpha } };
    kv_stack one = { slots, 3, 3 };
    kv_status st = impl->add(inplace, &one, impl->ctx);
    if (st != KV_OK) return st;
    if (one.size != 1 || slots[0].tag != KV_IV_TENSOR) {
        kv_stack_clear_returns(&one);
        return kv_error(KV_ERR_INTERNAL, "%s left %d values, not one tensor", inplace ? "add_.Tensor" : "add.Tensor",
                        one.size);
    }
    if (result != NULL) *result = slots[0].v.tensor;
    else kv_stack_clear_returns(&one); /* add_ returned self */
    return KV_OK;
}

static kv_status foreach_add(const kv_ref_foreach_impl *impl, kv_stack *stack) {
    static const char *const name = "_foreach_add.List";
    const kv_tensor_list self = kv_arg_tensors(stack, 0), other = kv_arg_tensors(stack, 1);
    const kv_scalar alpha = kv_arg_scalar(stack, 2);
    kv_status st = foreach_check_lists(name, self, &other);
    if (st == KV_OK) st = foreach_check_room(name, stack, self.n);
    if (st != KV_OK) return st;
    kv_tensor **results = calloc((size_t)self.n, sizeof *results);
    if (results == NULL) return kv_error(KV_ERR_OOM, "%s: out of host memory for %d results", name, self.n);
    for (int i = 0; i < self.n && st == KV_OK; i++) {
        st = foreach_add_one(impl, false, self.items[i], other.items[i], alpha, &results[i]);
        if (st != KV_OK) st = foreach_element_error(name, i, st);
    }
    return foreach_return(stack, results, self.n, st);
}

static kv_status foreach_add_(const kv_ref_foreach_impl *impl, kv_stack *stack) {
    static const char *const name = "_foreach_add_.List";
    const kv_tensor_list self = kv_arg_tensors(stack, 0), other = kv_arg_tensors(stack, 1);
    const kv_scalar alpha = kv_arg_scalar(stack, 2);
    kv_status st = foreach_check_lists(name, self, &other);
    for (int i = 0; i < self.n && st == KV_OK; i++) {
        st = kv_ref_add_check_inplace("add_.Tensor", self.items[i], other.items[i], alpha);
        if (st != KV_OK) st = foreach_element_error(name, i, st);
    }
    /* In list order, as a loop of add_ calls: an element that is also a
     * later `other` is read after it was written. */
    for (int i = 0; i < self.n && st == KV_OK; i++) {
        st = foreach_add_one(impl, true, self.items[i], other.items[i], alpha, NULL);
        if (st != KV_OK) st = foreach_element_error(name, i, st);
    }
    if (st == KV_OK) stack->size = 0; /* -> () */
    return st;
}

static kv_status foreach_mul(const kv_ref_foreach_impl *impl, kv_stack *stack) {
    static const char *const name = "_foreach_mul.Scalar";
    const kv_tensor_list self = kv_arg_tensors(stack, 0);
    const kv_scalar scalar = kv_arg_scalar(stack, 1);
    kv_status st = foreach_check_lists(name, self, NULL);
    if (st == KV_OK) st = foreach_check_room(name, stack, self.n);
    if (st != KV_OK) return st;
    kv_tensor **results = calloc((size_t)self.n, sizeof *results);
    if (results == NULL) return kv_error(KV_ERR_OOM, "%s: out of host memory for %d results", name, self.n);
    for (int i = 0; i < self.n && st == KV_OK; i++) {
        results[i] = impl->mul_scalar(self.items[i], scalar, impl->ctx);
        if (results[i] == NULL) st = foreach_element_error(name, i, kv_last_error());
    }
    return foreach_return(stack, results, self.n, st);
}

kv_status kv_ref_foreach_run(const kv_op *op, kv_stack *stack, const kv_ref_foreach_impl *impl) {
    const int id = kv_op_builtin_id(op);
    if (id == KV_OP__FOREACH_ADD_LIST) return foreach_add(impl, stack);
    if (id == KV_OP__FOREACH_ADD__LIST) return foreach_add_(impl, stack);
    if (id == KV_OP__FOREACH_MUL_SCALAR) return foreach_mul(impl, stack);
    return kv_error(KV_ERR_INTERNAL, "%s: not a foreach op", kv_op_name(op));
}

/* The reference elements: add.Tensor's and add_.Tensor's reference kernels
 * and the reference self * scalar. */
static kv_status ref_add_element(bool inplace, kv_stack *one, const void *ctx) {
    (void)ctx;
    return inplace ? kv_ref_add_(NULL, 0, one) : kv_ref_add(NULL, 0, one);
}

static kv_tensor *ref_mul_scalar_element(kv_tensor *self, kv_scalar scalar, const void *ctx) {
    (void)ctx;
    return kv_ref_mul_scalar("mul.Tensor", self, scalar);
}

static const kv_ref_foreach_impl ref_impl = { ref_add_element, ref_mul_scalar_element, NULL };

KV_REF_KERNEL(_foreach_add) {
    (void)ks;
    return kv_ref_foreach_run(op, stack, &ref_impl);
}

KV_REF_KERNEL(_foreach_add_) {
    (void)ks;
    return kv_ref_foreach_run(op, stack, &ref_impl);
}

KV_REF_KERNEL(_foreach_mul) {
    (void)ks;
    return kv_ref_foreach_run(op, stack, &ref_impl);
}

const char *kv_ref_foreach_element_op(const char *op) {
    static const char *const pairs[][2] = {
        { "_foreach_add.List", "add.Tensor" },
        { "_foreach_add_.List", "add_.Tensor" },
        { "_foreach_mul.Scalar", "mul.Tensor" },
    };
    for (size_t i = 0; op != NULL && i < sizeof pairs / sizeof pairs[0]; i++)
        if (strcmp(pairs[i][0], op) == 0) return pairs[i][1];
    return NULL;
}
