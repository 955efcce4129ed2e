/* The OpenCL backend plugin's entry point (opencl.h): the generator
 * version, the driver check, PoCL's kernel cache folder, the memory
 * operations and registration. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl/opencl.h"

const kv_host_api *kv_ocl_host;
kv_ocl_gen_version kv_ocl_version = KV_OCL_GEN_V1;

/* PoCL keeps compiled kernels in POCL_CACHE_DIR (default ~/.cache/pocl):
 * without it every process would pay LLVM's 3 s per program build again.
 * Unless the user set it, it goes next to this plugin's folder
 * (build/pocl-cache for build/backends/libkv_opencl.so), so a checkout
 * keeps its own cache and `rm -rf build` clears it. Set here, before any
 * OpenCL call, in the process that later forks the case workers. */
static void ocl_default_cache_dir(void) {
    if (getenv("POCL_CACHE_DIR") != NULL) return;
    Dl_info info;
    if (dladdr((void *)ocl_default_cache_dir, &info) == 0 || info.dli_fname == NULL) return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash == NULL) return;
    *slash = '\0';
    char cache[1100];
    snprintf(cache, sizeof cache, "%s/../pocl-cache", dir);
    setenv("POCL_CACHE_DIR", cache, 0);
}

/* PoCL's default CPU device ("pthread") hands every kernel to a pool of
 * one thread per core. kvrun already runs one case worker per core, and
 * the suite's kernels are small, so the pool oversubscribes the cores and
 * its hand-offs dominate: on slices of the accel suite, PoCL's "basic"
 * CPU device (each kernel on the calling thread, at clFinish) took 2.5 s
 * where "pthread" took 4.4 s, and 2.7-5.0 s where it took 4.9-5.8 s.
 * Unless the user chose (POCL_DEVICES=pthread
 * for one big problem), the plugin asks for "basic". Set before any
 * OpenCL call, as the cache folder. */
static void ocl_default_device(void) { setenv("POCL_DEVICES", "basic", 0); }

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1; /* the loader reports both versions */
    kv_ocl_host = desc->host;
    snprintf(desc->name, sizeof desc->name, "opencl");
    /* KV_OPENCL_GENERATOR picks the generator version (README: v1 unless
     * a planted regression is asked for); empty or unknown fails the load,
     * naming the variable, rather than quietly running v1. */
    const char *gen = getenv("KV_OPENCL_GENERATOR");
    if (gen != NULL && !kv_ocl_gen_version_parse(gen, &kv_ocl_version)) {
        snprintf(desc->reason, sizeof desc->reason, "KV_OPENCL_GENERATOR='%s' is no generator version (one of %s)",
                 gen, kv_ocl_gen_version_list());
        return 1;
    }
    desc->available = kv_ocl_probe(desc->reason, sizeof desc->reason) ? 1 : 0;
    snprintf(desc->version, sizeof desc->version, "generator %s, OpenCL C 1.2 kernels built at run time",
             kv_ocl_gen_version_name(kv_ocl_version));
    ocl_default_cache_dir();
    ocl_default_device();
    desc->device_type = KV_BACKEND_SLOT_ANY;
    desc->host_addressable = 0; /* device memory: every transfer is a clEnqueueRead/WriteBuffer */
    desc->context = NULL;
    desc->mem = (kv_backend_mem_ops){
        .alloc = kv_ocl_alloc,
        .free = kv_ocl_free,
        .copy_to_device = kv_ocl_copy_to_device,
        .copy_to_host = kv_ocl_copy_to_host,
        .copy_on_device = kv_ocl_copy_on_device,
        .memset = kv_ocl_memset,
        .synchronize = kv_ocl_synchronize,
    };
    desc->register_kernels = kv_ocl_register_kernels;
    return 0;
}
