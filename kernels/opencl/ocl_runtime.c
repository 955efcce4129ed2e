/* The OpenCL runtime side of the plugin: the per-process context and
 * queue, device memory behind handle addresses, copies, and building,
 * caching and launching generated kernels (opencl.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "opencl/opencl.h"

/* ---- error names ---- */

const char *kv_ocl_error_name(cl_int err) {
#define N(x) \
    case x: return #x;
    switch (err) {
        N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE) N(CL_COMPILER_NOT_AVAILABLE)
        N(CL_MEM_OBJECT_ALLOCATION_FAILURE) N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
        N(CL_PROFILING_INFO_NOT_AVAILABLE) N(CL_MEM_COPY_OVERLAP) N(CL_IMAGE_FORMAT_MISMATCH)
        N(CL_IMAGE_FORMAT_NOT_SUPPORTED) N(CL_BUILD_PROGRAM_FAILURE) N(CL_MAP_FAILURE)
        N(CL_MISALIGNED_SUB_BUFFER_OFFSET) N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        N(CL_COMPILE_PROGRAM_FAILURE) N(CL_LINKER_NOT_AVAILABLE) N(CL_LINK_PROGRAM_FAILURE)
        N(CL_DEVICE_PARTITION_FAILED) N(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) N(CL_INVALID_VALUE)
        N(CL_INVALID_DEVICE_TYPE) N(CL_INVALID_PLATFORM) N(CL_INVALID_DEVICE) N(CL_INVALID_CONTEXT)
        N(CL_INVALID_QUEUE_PROPERTIES) N(CL_INVALID_COMMAND_QUEUE) N(CL_INVALID_HOST_PTR)
        N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) N(CL_INVALID_IMAGE_SIZE)
        N(CL_INVALID_SAMPLER) N(CL_INVALID_BINARY) N(CL_INVALID_BUILD_OPTIONS) N(CL_INVALID_PROGRAM)
        N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME) N(CL_INVALID_KERNEL_DEFINITION)
        N(CL_INVALID_KERNEL) N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
        N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE)
        N(CL_INVALID_WORK_ITEM_SIZE) N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT_WAIT_LIST)
        N(CL_INVALID_EVENT) N(CL_INVALID_OPERATION) N(CL_INVALID_GL_OBJECT) N(CL_INVALID_BUFFER_SIZE)
        N(CL_INVALID_MIP_LEVEL) N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_INVALID_PROPERTY)
        N(CL_INVALID_IMAGE_DESCRIPTOR) N(CL_INVALID_COMPILER_OPTIONS) N(CL_INVALID_LINKER_OPTIONS)
        N(CL_INVALID_DEVICE_PARTITION_COUNT)
    }
#undef N
    return "an unknown CL error";
}

kv_status kv_ocl_fail(const char *op, const char *call, cl_int err) {
    return kv_ocl_host->error(KV_ERR_DEVICE, "%s: opencl: %s failed: %s (%d)", op, call, kv_ocl_error_name(err),
                              (int)err);
}

/* ---- finding a device ---- */

/* The first device of the first platform with an fp64 device. The kernels
 * compute in double, as the references do, so a device without
 * cl_khr_fp64 cannot run them exactly. */
static cl_int ocl_find_device(cl_platform_id *plat, cl_device_id *dev, char *why, size_t wcap) {
    cl_platform_id plats[8];
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(8, plats, &np);
    if (e != CL_SUCCESS) {
        snprintf(why, wcap, "clGetPlatformIDs failed: %s (%d)", kv_ocl_error_name(e), (int)e);
        return e;
    }
    for (cl_uint p = 0; p < np && p < 8; p++) {
        cl_device_id devs[8];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 8, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd && d < 8; d++) {
            char ext[8192] = "";
            if (clGetDeviceInfo(devs[d], CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL) != CL_SUCCESS) continue;
            if (strstr(ext, "cl_khr_fp64") == NULL) continue;
            *plat = plats[p];
            *dev = devs[d];
            return CL_SUCCESS;
        }
    }
    snprintf(why, wcap, "no OpenCL device with cl_khr_fp64 (%u platform(s)); the kernels compute in double as the "
             "references do", (unsigned)np);
    return CL_DEVICE_NOT_FOUND;
}

bool kv_ocl_probe(char *reason, size_t rcap) {
    const char *env = getenv("OCL_ICD_VENDORS");
    const char *dir = env != NULL && env[0] != '\0' ? env : "/etc/OpenCL/vendors";
    DIR *d = opendir(dir);
    if (d == NULL) {
        /* ocl-icd also takes OCL_ICD_VENDORS naming one .icd file. */
        if (env != NULL && strstr(env, ".icd") != NULL && access(env, R_OK) == 0) return true;
        snprintf(reason, rcap, "no OpenCL driver: cannot open %s (install pocl-opencl-icd)", dir);
        return false;
    }
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d)) != NULL;) {
        const size_t n = strlen(e->d_name);
        found = n > 4 && strcmp(e->d_name + n - 4, ".icd") == 0;
    }
    closedir(d);
    if (!found) snprintf(reason, rcap, "no OpenCL driver: %s has no .icd file (install pocl-opencl-icd)", dir);
    return found;
}

/* ---- the per-process runtime ---- */

typedef struct ocl_kern {
    char name[KV_OCL_NAME_MAX];
    cl_kernel kern;
} ocl_kern;

static struct {
    pthread_mutex_t lock; /* everything below */
    pid_t pid;            /* the process that set it up; 0: not yet */
    cl_int status;        /* CL_SUCCESS once set up */
    char why[256];
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue q;
    cl_event last; /* the last launch's event, NULL when waited for */
    /* buffers by slot; free slots are NULL */
    cl_mem *bufs;
    size_t *sizes;
    uint32_t nslots;
    /* the generator's program (built once per process) and its kernels
     * made so far, by name */
    cl_program prog;
    ocl_kern *kerns;
    int nkerns, ckerns;
    int64_t built, hits;
} rt = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* This process's id, renewed in a fork's child by a pthread_atfork
 * handler. Every address resolved (each copy, each kernel argument) and
 * every launch checks that OpenCL was set up in this process, and
 * getpid() is a system call each time: 152737 of them on a sixteenth of
 * the OpenCL accel suite, 19% of its system-call time. The id changes
 * only in a fork's child, where the handler runs before fork returns. */
static pid_t ocl_pid;
static pthread_once_t ocl_pid_once = PTHREAD_ONCE_INIT;
static void ocl_pid_renew(void) { ocl_pid = getpid(); }
static void ocl_pid_init(void) {
    ocl_pid_renew();
    /* Without the handler a child would see its parent's id and use the
     * parent's queue (PoCL's threads are gone there): getpid() it is. */
    if (pthread_atfork(NULL, NULL, ocl_pid_renew) != 0) ocl_pid = 0;
}
static pid_t ocl_self(void) {
    pthread_once(&ocl_pid_once, ocl_pid_init);
    return ocl_pid != 0 ? ocl_pid : getpid();
}

/* Sets up (or finds) this process's context; call with rt.lock held. */
static kv_status ocl_rt_locked(const char *op) {
    const pid_t me = ocl_self();
    if (rt.pid == me) {
        if (rt.status != CL_SUCCESS)
            return kv_ocl_host->error(KV_ERR_DEVICE, "%s: opencl: the device is not usable in this process: %s", op,
                                      rt.why);
        return KV_OK;
    }
    if (rt.pid != 0)
        return kv_ocl_host->error(KV_ERR_DEVICE,
                                  "%s: opencl: OpenCL was set up in process %d, which forked this one (%d); PoCL's "
                                  "worker threads do not survive a fork, so this process cannot use it",
                                  op, (int)rt.pid, (int)me);
    rt.pid = me;
    cl_platform_id plat;
    rt.status = ocl_find_device(&plat, &rt.dev, rt.why, sizeof rt.why);
    if (rt.status == CL_SUCCESS) {
        const cl_context_properties props[] = { CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0 };
        rt.ctx = clCreateContext(props, 1, &rt.dev, NULL, NULL, &rt.status);
        if (rt.status != CL_SUCCESS)
            snprintf(rt.why, sizeof rt.why, "clCreateContext failed: %s (%d)", kv_ocl_error_name(rt.status),
                     (int)rt.status);
    }
    if (rt.status == CL_SUCCESS) {
        /* In order (no properties): a kernel never runs before the copies
         * enqueued ahead of it, nor a read before the kernel. */
        rt.q = clCreateCommandQueueWithProperties(rt.ctx, rt.dev, NULL, &rt.status);
        if (rt.status != CL_SUCCESS)
            snprintf(rt.why, sizeof rt.why, "clCreateCommandQueueWithProperties failed: %s (%d)",
                     kv_ocl_error_name(rt.status), (int)rt.status);
    }
    if (rt.status != CL_SUCCESS)
        return kv_ocl_host->error(KV_ERR_DEVICE, "%s: opencl: the device is not usable in this process: %s", op,
                                  rt.why);
    return KV_OK;
}

/* Waits for the queue and checks the last launch. Lock held. */
static kv_status ocl_finish_locked(const char *op) {
    cl_int e = clFinish(rt.q);
    if (e != CL_SUCCESS) return kv_ocl_fail(op, "clFinish", e);
    if (rt.last != NULL) {
        cl_int st = CL_COMPLETE;
        e = clGetEventInfo(rt.last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
        clReleaseEvent(rt.last);
        rt.last = NULL;
        if (e != CL_SUCCESS) return kv_ocl_fail(op, "clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS)", e);
        if (st < 0) return kv_ocl_fail(op, "a kernel (clEnqueueNDRangeKernel's event)", st);
    }
    return KV_OK;
}

/* ---- memory ---- */

static void *ocl_addr(uint32_t slot) { return (void *)(KV_OCL_ADDR_BIAS + ((uintptr_t)slot << KV_OCL_SLOT_SHIFT)); }

static bool ocl_resolve_locked(const void *addr, cl_mem *mem, size_t *off) {
    const uintptr_t a = (uintptr_t)addr;
    if ((a & KV_OCL_ADDR_MASK) != KV_OCL_ADDR_BIAS) return false;
    const uint32_t slot = (uint32_t)((a & ~KV_OCL_ADDR_MASK) >> KV_OCL_SLOT_SHIFT);
    if (slot >= rt.nslots || rt.bufs[slot] == NULL || rt.pid != ocl_self()) return false;
    *mem = rt.bufs[slot];
    *off = (size_t)(a & KV_OCL_MAX_ALLOC);
    return *off <= rt.sizes[slot];
}

bool kv_ocl_resolve(const char *what, const void *addr, cl_mem *mem, size_t *off) {
    pthread_mutex_lock(&rt.lock);
    const bool ok = ocl_resolve_locked(addr, mem, off);
    pthread_mutex_unlock(&rt.lock);
    if (!ok) kv_ocl_host->error(KV_ERR_DEVICE, "opencl: %s: %p is not an address of this backend's memory", what, addr);
    return ok;
}

void *kv_ocl_alloc(void *context, size_t nbytes) {
    (void)context;
    if ((uint64_t)nbytes > KV_OCL_MAX_ALLOC) {
        kv_ocl_host->error(KV_ERR_OOM, "opencl: %zu bytes is over this backend's 4 GiB per-buffer limit", nbytes);
        return NULL;
    }
    pthread_mutex_lock(&rt.lock);
    void *addr = NULL;
    if (ocl_rt_locked("alloc") == KV_OK) {
        uint32_t slot = 0;
        while (slot < rt.nslots && rt.bufs[slot] != NULL) slot++;
        if (slot == rt.nslots && slot < 0xffffu) {
            const uint32_t n = rt.nslots ? rt.nslots * 2 : 64;
            cl_mem *b = realloc(rt.bufs, n * sizeof *b);
            if (b != NULL) rt.bufs = b;
            size_t *z = b ? realloc(rt.sizes, n * sizeof *z) : NULL;
            if (z != NULL) {
                rt.sizes = z;
                for (uint32_t i = rt.nslots; i < n; i++) rt.bufs[i] = NULL;
                rt.nslots = n;
            }
        }
        if (slot < rt.nslots) {
            /* A zero-byte request still gets a buffer (a unique address,
             * as every allocator here gives). */
            cl_int e;
            cl_mem m = clCreateBuffer(rt.ctx, CL_MEM_READ_WRITE, nbytes ? nbytes : 64, NULL, &e);
            if (e == CL_SUCCESS) {
                rt.bufs[slot] = m;
                rt.sizes[slot] = nbytes;
                addr = ocl_addr(slot);
            } else {
                kv_ocl_fail("alloc", "clCreateBuffer", e);
            }
        } else {
            kv_ocl_host->error(KV_ERR_OOM, "opencl: alloc: every buffer slot (65535) is in use");
        }
    }
    pthread_mutex_unlock(&rt.lock);
    return addr;
}

void kv_ocl_free(void *context, void *ptr, size_t nbytes) {
    (void)context;
    (void)nbytes;
    if (ptr == NULL) return;
    pthread_mutex_lock(&rt.lock);
    cl_mem m;
    size_t off;
    if (ocl_resolve_locked(ptr, &m, &off) && off == 0) {
        const uint32_t slot = (uint32_t)(((uintptr_t)ptr & ~KV_OCL_ADDR_MASK) >> KV_OCL_SLOT_SHIFT);
        /* A kernel still queued on it keeps the buffer alive: OpenCL
         * retains kernel arguments until the command completes. */
        clReleaseMemObject(m);
        rt.bufs[slot] = NULL;
    }
    pthread_mutex_unlock(&rt.lock);
}

static kv_status ocl_bad(const char *what, const void *p) {
    return kv_ocl_host->error(KV_ERR_DEVICE, "opencl: %s: %p is not an address of this backend's memory", what, p);
}

static bool ocl_fits(const void *addr, size_t off, size_t n) {
    const uint32_t slot = (uint32_t)(((uintptr_t)addr & ~KV_OCL_ADDR_MASK) >> KV_OCL_SLOT_SHIFT);
    return off + n >= off && off + n <= rt.sizes[slot];
}

kv_status kv_ocl_copy_to_device(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    pthread_mutex_lock(&rt.lock);
    cl_mem m;
    size_t off;
    kv_status st;
    if (!ocl_resolve_locked(dst, &m, &off) || !ocl_fits(dst, off, nbytes)) {
        st = ocl_bad("copy_to_device: argument 'dst'", dst);
    } else if (nbytes == 0) {
        st = KV_OK;
    } else {
        /* Blocking: the host memory may be gone when this returns. */
        const cl_int e = clEnqueueWriteBuffer(rt.q, m, CL_TRUE, off, nbytes, src, 0, NULL, NULL);
        st = e == CL_SUCCESS ? KV_OK : kv_ocl_fail("copy_to_device", "clEnqueueWriteBuffer", e);
    }
    pthread_mutex_unlock(&rt.lock);
    return st;
}

kv_status kv_ocl_copy_to_host(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    pthread_mutex_lock(&rt.lock);
    cl_mem m;
    size_t off;
    kv_status st;
    if (!ocl_resolve_locked(src, &m, &off) || !ocl_fits(src, off, nbytes)) {
        st = ocl_bad("copy_to_host: argument 'src'", src);
    } else if (nbytes == 0) {
        st = KV_OK;
    } else {
        /* After the kernels ahead of it (in-order queue); a failed one is
         * named here rather than read back as garbage. */
        st = ocl_finish_locked("copy_to_host");
        if (st == KV_OK) {
            const cl_int e = clEnqueueReadBuffer(rt.q, m, CL_TRUE, off, nbytes, dst, 0, NULL, NULL);
            st = e == CL_SUCCESS ? KV_OK : kv_ocl_fail("copy_to_host", "clEnqueueReadBuffer", e);
        }
    }
    pthread_mutex_unlock(&rt.lock);
    return st;
}

kv_status kv_ocl_copy_on_device(void *context, void *dst, const void *src, size_t nbytes) {
    (void)context;
    pthread_mutex_lock(&rt.lock);
    cl_mem md, ms;
    size_t od, os;
    kv_status st = KV_OK;
    if (!ocl_resolve_locked(dst, &md, &od) || !ocl_fits(dst, od, nbytes))
        st = ocl_bad("copy_on_device: argument 'dst'", dst);
    else if (!ocl_resolve_locked(src, &ms, &os) || !ocl_fits(src, os, nbytes))
        st = ocl_bad("copy_on_device: argument 'src'", src);
    if (st == KV_OK && nbytes > 0) {
        if (md == ms && od < os + nbytes && os < od + nbytes) {
            /* clEnqueueCopyBuffer forbids overlapping regions
             * (CL_MEM_COPY_OVERLAP); memmove's semantics through the host. */
            void *tmp = malloc(nbytes);
            if (tmp == NULL) {
                st = kv_ocl_host->error(KV_ERR_OOM, "opencl: copy_on_device: out of host memory");
            } else {
                st = ocl_finish_locked("copy_on_device");
                cl_int e = st == KV_OK ? clEnqueueReadBuffer(rt.q, ms, CL_TRUE, os, nbytes, tmp, 0, NULL, NULL)
                                       : CL_SUCCESS;
                if (st == KV_OK && e != CL_SUCCESS) st = kv_ocl_fail("copy_on_device", "clEnqueueReadBuffer", e);
                if (st == KV_OK) e = clEnqueueWriteBuffer(rt.q, md, CL_TRUE, od, nbytes, tmp, 0, NULL, NULL);
                if (st == KV_OK && e != CL_SUCCESS) st = kv_ocl_fail("copy_on_device", "clEnqueueWriteBuffer", e);
                free(tmp);
            }
        } else {
            const cl_int e = clEnqueueCopyBuffer(rt.q, ms, md, os, od, nbytes, 0, NULL, NULL);
            if (e != CL_SUCCESS) st = kv_ocl_fail("copy_on_device", "clEnqueueCopyBuffer", e);
        }
    }
    pthread_mutex_unlock(&rt.lock);
    return st;
}

kv_status kv_ocl_memset(void *context, void *dst, int byte, size_t nbytes) {
    (void)context;
    pthread_mutex_lock(&rt.lock);
    cl_mem m;
    size_t off;
    kv_status st = KV_OK;
    if (!ocl_resolve_locked(dst, &m, &off) || !ocl_fits(dst, off, nbytes)) {
        st = ocl_bad("memset: argument 'dst'", dst);
    } else if (nbytes > 0) {
        const unsigned char pat = (unsigned char)byte;
        const cl_int e = clEnqueueFillBuffer(rt.q, m, &pat, 1, off, nbytes, 0, NULL, NULL);
        if (e != CL_SUCCESS) st = kv_ocl_fail("memset", "clEnqueueFillBuffer", e);
    }
    pthread_mutex_unlock(&rt.lock);
    return st;
}

kv_status kv_ocl_synchronize(void *context) {
    (void)context;
    pthread_mutex_lock(&rt.lock);
    /* Nothing was ever queued in a process that never set OpenCL up. */
    const kv_status st = rt.pid == ocl_self() && rt.status == CL_SUCCESS ? ocl_finish_locked("synchronize") : KV_OK;
    pthread_mutex_unlock(&rt.lock);
    return st;
}

/* ---- programs ---- */

/* Builds the generator's program for this process's version. A build
 * failure is an error with the start of the driver's log (a generator
 * bug, never the user's). */
static kv_status ocl_program_locked(const char *op) {
    if (rt.prog != NULL) return KV_OK;
    size_t cap = 1u << 20;
    char *src = malloc(cap);
    int nk = 0;
    if (src == NULL || kv_ocl_gen_program(kv_ocl_version, src, cap, &nk) < 0) {
        free(src);
        return kv_ocl_host->error(KV_ERR_INTERNAL, "%s: opencl: the generator's program does not fit %zu bytes", op,
                                  cap);
    }
    cl_int e;
    const char *srcs[1] = { src };
    cl_program prog = clCreateProgramWithSource(rt.ctx, 1, srcs, NULL, &e);
    free(src);
    if (e != CL_SUCCESS) return kv_ocl_fail(op, "clCreateProgramWithSource", e);
    e = clBuildProgram(prog, 1, &rt.dev, kv_ocl_gen_build_options(), NULL, NULL);
    if (e != CL_SUCCESS) {
        char log[1024] = "";
        clGetProgramBuildInfo(prog, rt.dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        for (char *c = log; *c; c++)
            if (*c == '\n') *c = ' ';
        clReleaseProgram(prog);
        return kv_ocl_host->error(KV_ERR_DEVICE, "%s: opencl: clBuildProgram failed: %s (%d): %.600s", op,
                                  kv_ocl_error_name(e), (int)e, log);
    }
    rt.prog = prog;
    rt.built++;
    return KV_OK;
}

/* The kernel for spec, made on first use. */
static kv_status ocl_kernel_locked(const char *op, const kv_ocl_spec *spec, cl_kernel *out) {
    char name[KV_OCL_NAME_MAX];
    kv_ocl_gen_kernel_name(spec, name, sizeof name);
    for (int i = 0; i < rt.nkerns; i++) {
        if (strcmp(rt.kerns[i].name, name) == 0) {
            rt.hits++;
            *out = rt.kerns[i].kern;
            return KV_OK;
        }
    }
    kv_status st = ocl_program_locked(op);
    if (st != KV_OK) return st;
    if (rt.nkerns == rt.ckerns) {
        const int n = rt.ckerns ? rt.ckerns * 2 : 64;
        ocl_kern *k = realloc(rt.kerns, (size_t)n * sizeof *k);
        if (k == NULL) return kv_ocl_host->error(KV_ERR_OOM, "%s: opencl: out of host memory for the kernel cache", op);
        rt.kerns = k;
        rt.ckerns = n;
    }
    cl_int e;
    cl_kernel k = clCreateKernel(rt.prog, name, &e);
    if (e != CL_SUCCESS) return kv_ocl_fail(op, "clCreateKernel", e);
    snprintf(rt.kerns[rt.nkerns].name, sizeof rt.kerns[rt.nkerns].name, "%s", name);
    rt.kerns[rt.nkerns++].kern = k;
    *out = k;
    return KV_OK;
}

static kv_status ocl_set_args_locked(const char *op, cl_kernel k, const kv_ocl_arg *args, int nargs) {
    cl_uint idx = 0;
    for (int i = 0; i < nargs; i++) {
        const kv_ocl_arg *a = &args[i];
        cl_int e = CL_SUCCESS;
        switch (a->kind) {
        case KV_OCL_ARG_TENSOR: {
            cl_mem m;
            size_t off;
            if (!ocl_resolve_locked(a->t->storage->data, &m, &off))
                return ocl_bad("a kernel argument", a->t->storage->data);
            const size_t es = kv_ocl_host->dtype_size(a->t->dtype);
            const cl_long eoff = (cl_long)(off / es) + (cl_long)a->t->offset;
            e = clSetKernelArg(k, idx++, sizeof m, &m);
            if (e == CL_SUCCESS) e = clSetKernelArg(k, idx++, sizeof eoff, &eoff);
            break;
        }
        case KV_OCL_ARG_LONG: {
            const cl_long v = (cl_long)a->l;
            e = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        case KV_OCL_ARG_DOUBLE: {
            const cl_double v = a->d;
            e = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        case KV_OCL_ARG_LONG8: {
            cl_long8 v;
            for (int j = 0; j < 8; j++) v.s[j] = (cl_long)a->l8[j];
            e = clSetKernelArg(k, idx++, sizeof v, &v);
            break;
        }
        }
        if (e != CL_SUCCESS) return kv_ocl_fail(op, "clSetKernelArg", e);
    }
    return KV_OK;
}

kv_status kv_ocl_launch(const char *op, const kv_ocl_spec *spec, const kv_ocl_arg *args, int nargs, int64_t items) {
    if (!kv_ocl_gen_supports(spec))
        return kv_ocl_host->error(KV_ERR_INTERNAL, "%s: opencl: the generator has no template for this call", op);
    if (items <= 0) return KV_OK;
    pthread_mutex_lock(&rt.lock);
    kv_status st = ocl_rt_locked(op);
    cl_kernel k = NULL;
    if (st == KV_OK) st = ocl_kernel_locked(op, spec, &k);
    /* Arguments and the launch under one lock: a cached kernel object is
     * shared, and clSetKernelArg on it is not thread-safe. */
    if (st == KV_OK) st = ocl_set_args_locked(op, k, args, nargs);
    if (st == KV_OK) {
        const size_t wg = kv_ocl_gen_wg_size(spec);
        const size_t global = (size_t)((items + (int64_t)wg - 1) / (int64_t)wg) * wg;
        cl_event ev = NULL;
        const cl_int e = clEnqueueNDRangeKernel(rt.q, k, 1, NULL, &global, &wg, 0, NULL, &ev);
        if (e != CL_SUCCESS) {
            st = kv_ocl_fail(op, "clEnqueueNDRangeKernel", e);
        } else {
            if (rt.last != NULL) clReleaseEvent(rt.last);
            rt.last = ev;
        }
    }
    pthread_mutex_unlock(&rt.lock);
    return st;
}
