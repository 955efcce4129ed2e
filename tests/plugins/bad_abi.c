/* A backend built against a future ABI: it states version 99 and fills
 * nothing else, as the ABI asks (tests/test_backend.c). */
#include "kv/backend.h"

KV_BACKEND_EXPORT int kv_backend_entry(kv_backend_desc *desc, int abi_version) {
    desc->abi_version = 99;
    return abi_version == 99 ? 0 : -1;
}
