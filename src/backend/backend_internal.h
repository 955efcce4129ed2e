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

#endif
