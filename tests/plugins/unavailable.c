/* A backend whose device is absent: it loads, says so, and must be
 * skipped with its reason (tests/test_backend.c). */
#include "kv/backend.h"

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = KV_BACKEND_ABI_VERSION;
    if (abi_version != KV_BACKEND_ABI_VERSION) return -1;
    snprintf(desc->name, sizeof desc->name, "frob");
    desc->device_type = KV_DEVICE_PLUGIN3;
    desc->available = 0;
    snprintf(desc->reason, sizeof desc->reason, "no frobnicator attached (probe returned 0 devices)");
    return 0;
}
