/* The SIM accelerator's internals, shared by the files of kernels/sim.
 *
 * SIM is a backend plugin (kv/backend.h) whose "device" is host memory
 * seen through a translation: a SIM address is the host address plus
 * KV_SIM_ADDR_BIAS, which no CPU can dereference (non-canonical on
 * x86-64; beyond the 48-bit address space on aarch64). So libkv or runner
 * code that touches SIM memory without the plugin's copies faults at once
 * instead of working by accident, as it would on a real accelerator. The
 * plugin itself reaches its memory through kv_sim_host_ptr.
 *
 * Copy this folder to bring up a new backend: sim_plugin.c is the entry
 * point and the memory operations, sim_generic.c runs libkv's CPU
 * reference kernels on device memory (for a backend whose memory the host
 * can reach somehow; a real GPU drops it), sim_native.c holds device
 * kernels of its own and the registration. */
#ifndef KV_SIM_H
#define KV_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/backend.h"

#define KV_SIM_ADDR_BIAS ((uintptr_t)0x0051000000000000ull)
#define KV_SIM_ADDR_MASK ((uintptr_t)0xffff000000000000ull)

/* The host's function table, set by the entry point. */
extern const kv_host_api *kv_sim_host;
/* The device type (= key) the loader gave SIM, set at registration. */
extern kv_device_type kv_sim_type;

static inline bool kv_sim_is_device_ptr(const void *p) {
    return ((uintptr_t)p & KV_SIM_ADDR_MASK) == KV_SIM_ADDR_BIAS;
}
static inline void *kv_sim_host_ptr(const void *dev) { return (void *)((uintptr_t)dev - KV_SIM_ADDR_BIAS); }
static inline void *kv_sim_device_ptr(const void *host) { return (void *)((uintptr_t)host + KV_SIM_ADDR_BIAS); }

/* Host address of t's storage (SIM memory), or NULL + KV_ERR_DEVICE
 * naming op and arg when t's memory is not SIM memory. */
void *kv_sim_storage_host(const char *op, const char *arg, const kv_tensor *t);

/* The generic kernel (sim_generic.c): runs the op's CPU reference kernel
 * on host views of the SIM arguments and moves fresh results into SIM
 * memory. Registered for every op without a native kernel. */
kv_status kv_sim_generic(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* Registers every SIM kernel at `key` (sim_native.c). */
kv_status kv_sim_register_kernels(void *context, kv_device_type type);

#endif
