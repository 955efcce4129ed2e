/* Backend plugins (DESIGN.md section 8): the versioned ABI, the loader,
 * and the host<->device copies the runner uses.
 *
 * A backend is a shared library exporting one function,
 *
 *     int kv_backend_entry(kv_backend_desc *desc, int abi_version);
 *
 * The loader zero-fills a kv_backend_desc, sets desc->host, and calls it
 * with KV_BACKEND_ABI_VERSION. The plugin writes the version it was built
 * against into desc->abi_version (always the first field, in every ABI
 * version, so a mismatch is seen before anything else is read); when the
 * two differ it must write nothing else and return non-zero. Otherwise it
 * fills the rest and returns 0:
 *   name, device_type   "sim" on KV_DEVICE_SIM, "cuda" on KV_DEVICE_CUDA;
 *                       an out-of-tree backend asks for KV_BACKEND_SLOT_ANY
 *                       and is given a free PLUGIN0..3 slot, which then
 *                       goes by its name everywhere (device "npu", key
 *                       "npu", KV_ACCEL_TARGET=npu, report rows). A name
 *                       is lowercase letters, digits, '_' and '-',
 *                       starting with a letter, and must not be taken;
 *   version             optional free text, shown in reports;
 *   available, reason   0 plus a reason ("no CUDA device") when it cannot
 *                       run here: it is then skipped, nothing of it is
 *                       installed, and its cases are UNSUPPORTED;
 *   host_addressable    0 when the host must not dereference its memory:
 *                       kv_tensor_data() then returns NULL for its tensors
 *                       and only the copies below move data;
 *   context, mem        its memory operations (device addresses in and
 *                       out; never dereferenced by libkv unless
 *                       host_addressable);
 *   register_kernels    called once, after the allocator is installed:
 *                       registers its kernels at kv_key == device_type
 *                       through host->register_kernel.
 *
 * Why a function table (kv_host_api) rather than linking the plugin
 * against libkv's symbols: libkv is a static library inside kvrun and each
 * test program, and its state (op registry, allocator table, thread-local
 * error) must exist once per process. A plugin that linked its own copy
 * would register kernels into a registry nobody reads; one that resolved
 * libkv's symbols from the executable would need every program linked
 * with -rdynamic (and --whole-archive, or whatever it does not call is
 * missing). Through the table a plugin calls exactly the libkv that loaded
 * it, the ABI is the two structs below (versioned together), and plugins
 * link with -z defs, so an accidental direct call to libkv fails at
 * build time.
 *
 * Loading is explicit: kv_init never loads plugins; kvrun and the tests
 * call the loader. Registration is start-up work (single threaded), like
 * every other registration.
 *
 * What a plugin promises beyond the fields (docs/plugin-abi.md lists each
 * promise with the check that catches its breach): a kernel borrows its
 * tensor arguments for the call only. It must not change the geometry
 * (sizes, strides, offset, dtype, device, storage) of one the schema does
 * not mark written (a!), release a reference to one, or write through a
 * pointer into one after it returned. From its library's constructors on,
 * it leaves the FP environment (rounding mode, trap masks, FTZ/DAZ) and
 * the signal handlers and mask as it found them. It may set errno, print,
 * and call back into the dispatcher through the host table. */
#ifndef KV_BACKEND_H
#define KV_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kv/device.h"
#include "kv/dispatch.h"
#include "kv/tensor.h"

/* 2: kv_backend_desc gained `version`. 3: kv_host_api gained `out_run`.
 * 4: kv_backend_desc gained `no_default_fallback`, `support` and
 * `nsupport` (issue 21: the staged fallback by default, declared support). */
#define KV_BACKEND_ABI_VERSION 4
#define KV_BACKEND_ENTRY_NAME "kv_backend_entry"
#define KV_BACKEND_SLOT_ANY KV_DEVICE_TYPE_COUNT /* desc->device_type: any free PLUGINn slot */
#define KV_BACKEND_NAME_MAX 32
#define KV_BACKEND_REASON_MAX 256
#define KV_BACKEND_VERSION_MAX 64

/* ---- what the host offers a plugin (filled by the loader) ---- */
typedef struct kv_host_api {
    int abi_version; /* KV_BACKEND_ABI_VERSION */
    /* errors: set the thread's error, read it */
    kv_status (*error)(kv_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
    kv_status (*last_error)(void);
    const char *(*last_error_message)(void);
    /* ops and kernels */
    kv_status (*register_kernel)(const char *op_name, kv_key key, kv_kernel_fn fn);
    int (*op_count)(void);
    const kv_op *(*op_at)(int i);
    const char *(*op_name)(const kv_op *op);
    const kv_schema *(*op_schema)(const kv_op *op);
    int (*op_builtin_id)(const kv_op *op);
    kv_entry_kind (*op_entry_kind)(const kv_op *op, kv_key key);
    kv_status (*redispatch)(const kv_op *op, kv_keyset ks, kv_stack *stack);
    /* kv_backend_call_reference, below */
    kv_status (*call_reference)(const kv_op *op, kv_stack *stack);
    /* a backend fallback (kv_register_fallback), e.g. stage_reference */
    void (*register_fallback)(kv_key key, kv_kernel_fn fn);
    kv_kernel_fn stage_reference; /* kv_backend_stage_reference, below */
    /* kv/tune.h: a plugin's kernels may be perf_dispatch variants */
    kv_status (*tune_register_variant)(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                       bool (*pred)(const kv_op *op, const kv_stack *stack));
    const char *(*key_name)(kv_key k);
    const char *(*device_type_name)(kv_device_type t);
    /* stacks (kv/stack.h) */
    kv_status (*stack_push)(kv_stack *s, kv_ivalue v);
    void (*stack_return_tensors)(kv_stack *s, kv_tensor *const *owned, int n);
    void (*stack_return_bool)(kv_stack *s, bool v);
    /* tensors (kv/tensor.h) */
    kv_tensor *(*tensor_empty)(const int64_t *sizes, int ndim, kv_dtype dtype, kv_device device);
    kv_tensor *(*tensor_view)(const kv_tensor *base, const int64_t *sizes, const int64_t *strides, int ndim,
                              int64_t offset);
    void (*tensor_retain)(kv_tensor *t);
    void (*tensor_release)(kv_tensor *t);
    int64_t (*tensor_numel)(const kv_tensor *t);
    bool (*tensor_is_contiguous)(const kv_tensor *t);
    int64_t (*tensor_version)(const kv_tensor *t);
    void (*tensor_bump_version)(kv_tensor *t);
    /* kv_backend_host_view and kv_backend_copy_to_device, below */
    kv_tensor *(*host_view)(const kv_tensor *t, void *host_base);
    kv_tensor *(*copy_to_device)(const kv_tensor *t, kv_device device);
    /* shapes, dtypes, scalars */
    size_t (*dtype_size)(kv_dtype dt);
    const char *(*dtype_name)(kv_dtype dt);
    kv_dtype (*result_type)(const kv_tensor *const *tensors, int ntensors, const kv_scalar *scalars, int nscalars);
    bool (*can_cast)(kv_dtype from, kv_dtype to);
    kv_status (*broadcast_shapes)(const int64_t *a, int na, const int64_t *b, int nb, int64_t *out, int *nout);
    int (*wrap_dim)(int64_t dim, int ndim, const char *op, const char *arg);
    double (*scalar_to_double)(kv_scalar s);
    /* An out= op (add.out, ...) on `backend`: its functional op and copy_
     * there, with PyTorch's out= rules in between (resizing out included,
     * which a plugin cannot do itself); kernels/ref/ref_out.c. */
    kv_status (*out_run)(const kv_op *op, kv_key backend, kv_stack *stack);
} kv_host_api;

/* One (op, dtype) pair a plugin declares it supports (kv_backend_desc's
 * `support`): `op` an op's full name ("add.Tensor"), `dtype` the dtype of
 * the case's first input (the support matrix's column). */
typedef struct kv_backend_support {
    const char *op;
    kv_dtype dtype;
} kv_backend_support;

/* ---- what a plugin provides ---- */
/* Sizes are in bytes; device addresses are whatever alloc returned (plus
 * byte offsets). Each returns KV_OK or sets an error through host->error. */
typedef struct kv_backend_mem_ops {
    void *(*alloc)(void *context, size_t nbytes); /* NULL when out of memory */
    void (*free)(void *context, void *ptr, size_t nbytes);
    kv_status (*copy_to_device)(void *context, void *dst, const void *host_src, size_t nbytes);
    kv_status (*copy_to_host)(void *context, void *host_dst, const void *src, size_t nbytes);
    kv_status (*copy_on_device)(void *context, void *dst, const void *src, size_t nbytes);
    kv_status (*memset)(void *context, void *dst, int byte, size_t nbytes);
    kv_status (*synchronize)(void *context);
} kv_backend_mem_ops;

typedef struct kv_backend_desc {
    int abi_version;                      /* first, in every version */
    const kv_host_api *host;              /* set by the loader */
    char name[KV_BACKEND_NAME_MAX];
    kv_device_type device_type;           /* SIM, CUDA, PLUGIN0..3 or KV_BACKEND_SLOT_ANY */
    int available;                        /* 0: unavailable, see reason */
    char reason[KV_BACKEND_REASON_MAX];
    int host_addressable;
    void *context;
    kv_backend_mem_ops mem;
    /* `type` is the slot it got (its kernels' key). */
    kv_status (*register_kernels)(void *context, kv_device_type type);
    /* Free-form: the plugin's own version and what it runs on ("1.2 on
     * oneDNN 2.6.3"), shown in the run's header and meta.json. */
    char version[KV_BACKEND_VERSION_MAX];
    /* The loader registers kv_backend_stage_reference as the backend's
     * fallback before register_kernels runs, so every op the plugin has no
     * kernel of its own for still runs on its device (staged through the
     * host reference): an accel device boxed onto it, the lazy and grad
     * checks, and programs all work, while the runner keeps counting those
     * ops UNSUPPORTED for it (a fallback is not its kernel). A plugin may
     * register its own fallback instead (host->register_fallback), or set
     * this to 1 to have none: an op without its kernel is then
     * KV_ERR_MISSING_KERNEL on its device. */
    int no_default_fallback;
    /* Declared support (docs/bringup.md): nsupport (op, dtype) pairs the
     * plugin promises to run (the array must outlive the plugin; it is read
     * in place). A declared pair whose call declines, or that has no
     * kernel of the plugin's, is a FAIL "declared but declined" rather
     * than UNSUPPORTED, and --require-support fails the run on it. NULL/0
     * declares nothing: every decline is UNSUPPORTED, as before. */
    const kv_backend_support *support;
    int nsupport;
} kv_backend_desc;

typedef int (*kv_backend_entry_fn)(kv_backend_desc *desc, int abi_version);

/* What every plugin defines (and the only symbol it exports: plugins build
 * with -fvisibility=hidden). libkv itself does not define it. */
#define KV_BACKEND_EXPORT __attribute__((visibility("default")))
KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version);

/* ---- the loader ---- */
typedef enum kv_backend_state {
    KV_BACKEND_LOADED,      /* available: allocator installed, kernels registered */
    KV_BACKEND_UNAVAILABLE, /* loaded and asked, says it cannot run here */
    KV_BACKEND_FAILED       /* not loadable: no file, no entry, wrong ABI, ... */
} kv_backend_state;

typedef struct kv_backend_info {
    char path[512];
    char name[KV_BACKEND_NAME_MAX];   /* "" when it never said */
    char version[KV_BACKEND_VERSION_MAX]; /* "" when it never said */
    kv_device_type device_type;       /* KV_DEVICE_TYPE_COUNT when unknown */
    kv_backend_state state;
    kv_status status;                 /* KV_OK when loaded */
    char message[640];                /* one line: path and reason; "" when loaded */
} kv_backend_info;

/* Loads one plugin. KV_OK when it is available and registered. Otherwise
 * the plugin is skipped (nothing of it stays installed) and the error
 * names the path and the reason, as one line:
 *   KV_ERR_INVALID_ARG   the file cannot be opened (dlopen's reason),
 *                        exports no kv_backend_entry, or speaks another
 *                        ABI version ("built for ABI 7, this kvsuite
 *                        speaks 1"), or its entry failed;
 *   KV_ERR_DEVICE        it reports itself unavailable (its reason), or
 *                        its device slot is taken or not a plugin slot;
 *   other                its register_kernels failed (its status).
 * Every attempt is recorded (kv_backend_at). Calls kv_init. */
kv_status kv_backend_load(const char *path);
/* Before loading for real, kv_backend_load runs the whole load in a forked
 * child: a plugin that crashes, calls exit or hangs (longer than
 * KV_BACKEND_PROBE_TIMEOUT seconds, default 30) in its constructors, entry
 * point or registration is recorded as failed, naming what happened and
 * where, and never touches the calling process. This reads and checks the
 * variable (KV_ERR_INVALID_ARG naming it and the value). */
kv_status kv_backend_probe_timeout(double *seconds);

/* Attempts so far, in order (failures and unavailable ones included). */
int kv_backend_count(void);
const kv_backend_info *kv_backend_at(int i);
/* The backend that claims device type t (loaded or unavailable; the
 * loaded one when both exist), or NULL. */
const kv_backend_info *kv_backend_find(kv_device_type t);
/* Whether a plugin for t is loaded and available (its kernels are
 * registered and its allocator installed). CPU is always available. */
bool kv_backend_available(kv_device_type t);

/* Declared support (kv_backend_desc's `support`): 1 when the loaded
 * backend of type t declares (op, dt), 0 when it declares other pairs
 * only, -1 when it declares nothing (or none is loaded for t). */
int kv_backend_declared(kv_device_type t, const char *op, kv_dtype dt);
/* Its i-th declared pair, NULL past the end. */
const kv_backend_support *kv_backend_declared_at(kv_device_type t, int i);

/* ---- which plugins to load ---- */
typedef struct kv_backend_paths {
    char **items; /* owned */
    int n;
    int cap;
} kv_backend_paths;

void kv_backend_paths_free(kv_backend_paths *p);
/* Adds one colon-separated list (KV_BACKEND_PATH's syntax): empty entries
 * are ignored; an entry naming a directory adds every *.so in it, sorted
 * by name; any other entry is added as given, so a missing file is
 * reported by the loader rather than silently dropped. */
kv_status kv_backend_paths_add(kv_backend_paths *p, const char *spec);
/* The plugins a program loads: the --backend=PATH values when there are
 * any (each may itself be a list), else KV_BACKEND_PATH when it is set
 * (env may be NULL: unset; "" loads nothing), else every *.so in
 * default_dir (none when it does not exist). */
kv_status kv_backend_paths_resolve(const char *const *cli, int ncli, const char *env, const char *default_dir,
                                   kv_backend_paths *out);
/* build/backends next to the running program (the folder of
 * /proc/self/exe, then backends/, when it exists), else an installed
 * kvsuite's (that folder, then ../lib/kvsuite/backends), else
 * "build/backends" (relative: tests run from the repository root). */
const char *kv_backend_default_dir(void);
/* Loads every path in order; writes one line per skipped plugin to `log`
 * (when not NULL), re-selects the accel target (KV_ACCEL_TARGET or the
 * default rule) so a newly loaded SIM or CUDA becomes visible to it, and
 * returns how many loaded. */
int kv_backend_load_paths(const kv_backend_paths *p, FILE *log);
/* kv_backend_paths_resolve with getenv("KV_BACKEND_PATH") and
 * kv_backend_default_dir(), then kv_backend_load_paths. What kvrun and
 * the test programs call. Returns the number loaded, -1 on an error that
 * stopped it before loading anything (the error says why). */
int kv_backend_load_default(const char *const *cli, int ncli, FILE *log);

/* ---- moving tensors between host and devices ---- */
/* A new tensor on `device` holding a copy of t's whole storage, with t's
 * sizes, strides, offset and dtype (so layouts, gaps and broadcast dims
 * survive), keys the device's backend key plus t's lazy bits. Works
 * between any two devices: through the backends' copy operations, with a
 * host bounce when neither side is the host. NULL + error on failure. */
kv_tensor *kv_backend_copy_to_device(const kv_tensor *t, kv_device device);
/* kv_backend_copy_to_device(t, cpu:0), the runner's way back. */
kv_tensor *kv_backend_copy_to_host(const kv_tensor *t);
/* nbytes from src to dst, both in the memory of storage s (an accel
 * storage: its target's): what core's kv_storage_copy_hook is, so a
 * device storage keeps its bytes when it grows. */
kv_status kv_backend_storage_copy(const kv_storage *s, void *dst, const void *src, size_t nbytes);
/* t itself (retained) when its memory is host-addressable, else a host
 * copy: what code that must read a tensor calls first. */
kv_tensor *kv_backend_readable(const kv_tensor *t);
/* ---- watching the mem ops (the runner's in-flight record) ----
 * An observer called just before (enter) and after every call libkv makes
 * into a plugin's copy_to_device, copy_to_host, copy_on_device, memset
 * and synchronize, on the calling thread: the runner's worker records it,
 * so a crash inside one names the plugin and the op. NULL: none (the
 * default; one atomic load per copy when none is set). */
typedef enum kv_backend_mem_op {
    KV_BACKEND_MEM_NONE,
    KV_BACKEND_MEM_COPY_TO_DEVICE,
    KV_BACKEND_MEM_COPY_TO_HOST,
    KV_BACKEND_MEM_COPY_ON_DEVICE,
    KV_BACKEND_MEM_MEMSET,
    KV_BACKEND_MEM_SYNCHRONIZE,
} kv_backend_mem_op;
typedef void (*kv_backend_mem_observer)(kv_device_type t, kv_backend_mem_op op, bool enter);
void kv_backend_set_mem_observer(kv_backend_mem_observer fn);
/* "copy_to_host", ...: the descriptor's field name. */
const char *kv_backend_mem_op_name(kv_backend_mem_op op);

/* Waits for the device of type t to finish queued work (no-op for host
 * memory). */
kv_status kv_backend_synchronize(kv_device_type t);
/* Raw bytes between the host and memory of device type t (a device
 * address as its allocator returned it, plus a byte offset), through its
 * backend's copy operations; plain memcpy for host memory. For code that
 * owns device blocks below the tensor level: the runner's guarded
 * allocator writes and reads its redzones with these. */
kv_status kv_backend_mem_write(kv_device_type t, void *dst, const void *host_src, size_t nbytes);
kv_status kv_backend_mem_read(kv_device_type t, void *host_dst, const void *src, size_t nbytes);
/* nbytes from src to dst, both in memory of device type t: the backend's
 * mem.copy_on_device (a host bounce when it has none). */
kv_status kv_backend_mem_copy(kv_device_type t, void *dst, const void *src, size_t nbytes);
/* nbytes of memory of device type t set to `byte`: the backend's
 * mem.memset (a host buffer copied over when it has none). The memory
 * check calls both and reads the result back (runner/check/check_memory.c). */
kv_status kv_backend_mem_set(kv_device_type t, void *dst, int byte, size_t nbytes);

/* Runs op's CPU reference kernel on the stack (the perf_dispatch "ref"
 * variant when the CPU key holds a variant set, so no tuning and no
 * optimized variant): what a plugin calls to reuse the references. */
kv_status kv_backend_call_reference(const kv_op *op, kv_stack *stack);

/* A kernel (kv_kernel_fn) for any op on the backend that the key set's
 * highest backend key names: the op's CPU reference on host copies of its
 * device tensors, with written arguments copied back and results moved to
 * the device. Registered as a backend's fallback (CUDA), ops it lacks
 * still run on it, while the runner still counts them UNSUPPORTED for it
 * (a fallback is not a kernel of the backend's own). */
kv_status kv_backend_stage_reference(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* For plugins whose memory the host can reach through a translation (SIM):
 * a CPU tensor with t's geometry, dtype and functionality keys over a
 * borrowed storage whose data is `host_base` (t's storage, as the host
 * sees it; same size). Nothing is copied and the view frees nothing; it
 * must not outlive t's storage. NULL + error on failure. */
kv_tensor *kv_backend_host_view(const kv_tensor *t, void *host_base);

#endif
