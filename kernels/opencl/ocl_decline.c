/* Declining a call (opencl.h): bad input fails with the reference's own
 * error, anything else the generator has no template for is
 * KV_ERR_MISSING_KERNEL (an UNSUPPORTED row). The reference runs on host
 * copies of the device tensors, so the kernels' acceptance tests only
 * have to be conservative, never complete. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "opencl/opencl.h"

typedef struct ocl_host_args {
    kv_tensor *copies[KV_STACK_MAX * 4];
    int ncopies;
    kv_tensor **lists[KV_STACK_MAX];
    int nlists;
} ocl_host_args;

static kv_tensor *ocl_to_host(ocl_host_args *h, kv_tensor *t) {
    if (t == NULL || !kv_ocl_on_device(t)) return t;
    if (h->ncopies == (int)(sizeof h->copies / sizeof h->copies[0])) {
        kv_ocl_host->error(KV_ERR_INTERNAL, "opencl: too many tensor arguments to check on the host");
        return NULL;
    }
    kv_tensor *c = kv_ocl_host->copy_to_device(t, KV_DEVICE_CPU0);
    if (c != NULL) h->copies[h->ncopies++] = c;
    return c;
}

/* v with its device tensors replaced by host copies (a list gets a new
 * item array). A device argument naming this backend becomes the host,
 * so the reference makes its result where it can. */
static kv_status ocl_arg_to_host(ocl_host_args *h, kv_ivalue *v) {
    if (v->tag == KV_IV_TENSOR && v->v.tensor != NULL) {
        v->v.tensor = ocl_to_host(h, v->v.tensor);
        return v->v.tensor != NULL ? KV_OK : kv_ocl_host->last_error();
    }
    if (v->tag == KV_IV_TENSOR_LIST && v->v.tensors.n > 0) {
        kv_tensor **items = malloc((size_t)v->v.tensors.n * sizeof *items);
        if (items == NULL) return kv_ocl_host->error(KV_ERR_OOM, "opencl: out of memory checking a tensor list");
        h->lists[h->nlists++] = items;
        for (int i = 0; i < v->v.tensors.n; i++) {
            items[i] = ocl_to_host(h, v->v.tensors.items[i]);
            if (items[i] == NULL && v->v.tensors.items[i] != NULL) return kv_ocl_host->last_error();
        }
        v->v.tensors.items = items;
        return KV_OK;
    }
    if (v->tag == KV_IV_DEVICE && v->v.device.type == kv_ocl_type && v->v.device.index == 0)
        v->v.device = KV_DEVICE_CPU0;
    return KV_OK;
}

/* Runs the reference on host copies of the call's arguments: KV_OK when
 * it takes the call (its results are dropped), else its error. */
static kv_status ocl_reference_check(const kv_op *op, const kv_stack *stack) {
    const kv_host_api *host = kv_ocl_host;
    ocl_host_args h = { .ncopies = 0, .nlists = 0 };
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack cpu = kv_stack_on(slots, KV_STACK_MAX);
    kv_status st = KV_OK;
    for (int i = 0; i < stack->size && st == KV_OK && h.nlists < KV_STACK_MAX; i++) {
        kv_ivalue v = stack->slots[i];
        st = ocl_arg_to_host(&h, &v);
        if (st == KV_OK) st = host->stack_push(&cpu, v);
    }
    if (st == KV_OK) st = host->call_reference(op, &cpu);
    if (st == KV_OK)
        for (int i = 0; i < cpu.size; i++)
            if (cpu.slots[i].tag == KV_IV_TENSOR && cpu.slots[i].v.tensor != NULL)
                host->tensor_release(cpu.slots[i].v.tensor);
    for (int i = 0; i < h.ncopies; i++) host->tensor_release(h.copies[i]);
    for (int i = 0; i < h.nlists; i++) free(h.lists[i]);
    return st;
}

bool kv_ocl_reference_rejects(const kv_op *op, const kv_stack *stack) { return ocl_reference_check(op, stack) != KV_OK; }

kv_status kv_ocl_decline(const kv_op *op, kv_stack *stack, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    const kv_status st = ocl_reference_check(op, stack);
    if (st != KV_OK) return st; /* the reference's error: bad input */
    return kv_ocl_host->error(KV_ERR_MISSING_KERNEL, "%s: no OpenCL kernel for %s", kv_ocl_host->op_name(op), why);
}
