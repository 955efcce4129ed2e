/* The OpenCL backend plugin's internals, shared by the files of
 * kernels/opencl (OpenCL 3.0 C API through the ICD loader; PoCL's CPU
 * device here).
 *
 * Memory is device memory. Each allocation is one cl_mem buffer; what
 * the host gets back is a handle address, KV_OCL_ADDR_BIAS + (slot << 32),
 * that no CPU can dereference (like SIM's), and a tensor's byte offset
 * rides in the low 32 bits. So host_addressable = 0, every transfer goes
 * through the copy ABI (clEnqueueRead/WriteBuffer), and runner code that
 * touched the memory directly would fault at once.
 *
 * One in-order queue per process. Kernels are enqueued without waiting;
 * the last launch's event is kept, and synchronize (and every read back)
 * waits on the queue and checks that event's status, so a failed
 * execution is named at the next sync point. Every failing OpenCL call is
 * KV_ERR_DEVICE naming the call and its CL error name.
 *
 * Per process, lazily. kvrun loads plugins in its parent and forks its
 * case workers afterwards; PoCL's CPU device runs on a pool of threads
 * created at initialisation, and a forked child has none of them (its
 * first clFinish would wait forever). So the entry point only checks that
 * a driver is installed, each process sets OpenCL up on its first use,
 * and a process that finds OpenCL set up by its parent before a fork says
 * so (KV_ERR_DEVICE) instead of hanging. */
#ifndef KV_OPENCL_H
#define KV_OPENCL_H

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/backend.h"
#include "opencl/ocl_gen.h"

#define KV_OCL_ADDR_BIAS ((uintptr_t)0x0052000000000000ull)
#define KV_OCL_ADDR_MASK ((uintptr_t)0xffff000000000000ull)
#define KV_OCL_SLOT_SHIFT 32
/* One buffer holds at most 4 GiB - 1 (its offsets are the low 32 bits). */
#define KV_OCL_MAX_ALLOC ((uint64_t)0xffffffffu)

extern const kv_host_api *kv_ocl_host;
extern kv_device_type kv_ocl_type;
/* KV_OPENCL_GENERATOR, read by the entry point. */
extern kv_ocl_gen_version kv_ocl_version;

/* ---- ocl_runtime.c ---- */

/* The CL error name of a status ("CL_OUT_OF_RESOURCES"). */
const char *kv_ocl_error_name(cl_int err);
/* KV_ERR_DEVICE "<op>: opencl: <call> failed: <CL name> (<code>)". */
kv_status kv_ocl_fail(const char *op, const char *call, cl_int err);

/* Whether an OpenCL driver is installed (an ICD file in OCL_ICD_VENDORS or
 * /etc/OpenCL/vendors); false with a one-line reason otherwise. Cheap on
 * purpose: every kvrun loads this plugin, and setting PoCL up costs 0.3 s
 * (LLVM), so the device itself is checked at first use in each process. */
bool kv_ocl_probe(char *reason, size_t rcap);

/* The buffer and byte offset behind a device address; false + error
 * naming `what` when it is no address of this backend. */
bool kv_ocl_resolve(const char *what, const void *addr, cl_mem *mem, size_t *off);

void *kv_ocl_alloc(void *context, size_t nbytes);
void kv_ocl_free(void *context, void *ptr, size_t nbytes);
kv_status kv_ocl_copy_to_device(void *context, void *dst, const void *src, size_t nbytes);
kv_status kv_ocl_copy_to_host(void *context, void *dst, const void *src, size_t nbytes);
kv_status kv_ocl_copy_on_device(void *context, void *dst, const void *src, size_t nbytes);
kv_status kv_ocl_memset(void *context, void *dst, int byte, size_t nbytes);
kv_status kv_ocl_synchronize(void *context);

/* A kernel argument: a tensor's buffer and element offset, a long, a
 * double, or a long8. */
typedef enum kv_ocl_arg_kind { KV_OCL_ARG_TENSOR, KV_OCL_ARG_LONG, KV_OCL_ARG_DOUBLE, KV_OCL_ARG_LONG8 } kv_ocl_arg_kind;
typedef struct kv_ocl_arg {
    kv_ocl_arg_kind kind;
    const kv_tensor *t;
    int64_t l;
    double d;
    int64_t l8[8];
} kv_ocl_arg;

/* Enqueues spec's kernel over `items` work-items (rounded up to the
 * work-group size the generator asks for). The first launch in a process
 * builds the generator's whole program (kv_ocl_gen_program: one build per
 * process, the per-run cache); each kernel object is made once, by name. */
kv_status kv_ocl_launch(const char *op, const kv_ocl_spec *spec, const kv_ocl_arg *args, int nargs, int64_t items);

/* ---- ocl_decline.c ---- */

/* Declines a call: the reference's error when it rejects the arguments
 * (run on host copies, so nothing of the caller's changes), else
 * KV_ERR_MISSING_KERNEL "op: no OpenCL kernel for <why>". */
kv_status kv_ocl_decline(const kv_op *op, kv_stack *stack, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Whether the reference rejects the call (bad input), run the same way:
 * the variants' predicates take such calls, so their kernels can give
 * the reference's error instead of the dispatcher's "no variant". */
bool kv_ocl_reference_rejects(const kv_op *op, const kv_stack *stack);

/* ---- ocl_ops.c ---- */

bool kv_ocl_on_device(const kv_tensor *t);
/* Registers every kernel at `type` (the slot the loader gave). */
kv_status kv_ocl_register_kernels(void *context, kv_device_type type);

#endif
