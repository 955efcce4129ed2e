/* Shared by the files of src/backend; not part of the public API. */
#ifndef KV_BACKEND_INTERNAL_H
#define KV_BACKEND_INTERNAL_H

#include "kv/backend.h"

/* The table every plugin gets (host_api.c). */
const kv_host_api *kv_backend_host_api(void);
/* The descriptor of the loaded, available plugin of device type t, or
 * NULL (loader.c). */
const kv_backend_desc *kv_backend_desc_of(kv_device_type t);
/* Re-selects the accel target after a plugin came or went, and makes
 * ACCEL's host addressability follow the target's (loader.c). */
void kv_backend_reselect_accel(void);
/* Copies host bytes over the start of a device storage through its
 * backend's copy operation (copy.c). */
kv_status kv_backend_storage_upload(kv_storage *dst, const void *host_src, size_t nbytes);

/* Whether d's declared support names only real ops and dtypes; the load
 * fails with the error otherwise (support.c). */
kv_status kv_backend_support_check(const kv_backend_desc *d, const char *path);
/* ---- registration scope (scope.c) ----
 * Between begin and end, the host table's register_kernel,
 * register_fallback and tune_register_variant accept only `type`'s key;
 * outside, nothing. end returns the first refusal's message (naming the
 * plugin, what, the op and the key) or NULL. */
void kv_backend_scope_begin(kv_device_type type, const char *name);
const char *kv_backend_scope_end(void);
kv_status kv_backend_scope_register_kernel(const char *op_name, kv_key key, kv_kernel_fn fn);
void kv_backend_scope_register_fallback(kv_key key, kv_kernel_fn fn);
kv_status kv_backend_scope_register_variant(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                            bool (*pred)(const kv_op *op, const kv_stack *stack));

/* ---- the probe (probe.c) ----
 * Runs load(path) in a forked child with a timeout (KV_BACKEND_PROBE_TIMEOUT
 * seconds, default 30). 0 when the child came back with an answer (the
 * load's own status, good or bad: the parent may now load it itself);
 * -1 when it crashed, exited or hung, with the reason and the stage it
 * was in written to why. */
int kv_backend_probe(const char *path, kv_status (*load)(const char *path), char *why, size_t cap);
/* In the probing child, tells the parent which stage the load is in. */
void kv_backend_probe_stage(const char *stage);

#endif
