/* Fuzzes the .npy reader (kv/npy.h): an input is a whole file. Beyond not
 * crashing: kv_npy_parse and kv_npy_decode agree on whether the file is
 * valid, and a decoded tensor re-encodes to a file that decodes to the
 * same dtype, shape and bytes. */
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

#include "kv/kv.h"
#include "kv/npy.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    KV_FUZZ_CHECK(kv_init() == KV_OK, "kv_init: %s", kv_last_error_message());
    return 0;
}

static void check_same(const kv_tensor *a, const kv_tensor *b) {
    KV_FUZZ_CHECK(a->dtype == b->dtype, "dtype %d became %d", (int)a->dtype, (int)b->dtype);
    KV_FUZZ_CHECK(a->ndim == b->ndim, "ndim %d became %d", a->ndim, b->ndim);
    for (int d = 0; d < a->ndim; d++) KV_FUZZ_CHECK(a->sizes[d] == b->sizes[d], "size of dim %d", d);
    const size_t nbytes = (size_t)kv_tensor_numel(a) * kv_dtype_size(a->dtype);
    /* Both are new contiguous CPU tensors. */
    KV_FUZZ_CHECK(nbytes == 0 || memcmp(kv_tensor_data(a), kv_tensor_data(b), nbytes) == 0, "data differs");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kv_npy_info info;
    const kv_status parsed = kv_npy_parse(data, size, KV_NPY_ANY_DTYPE, "fuzz.npy", &info);
    kv_tensor *t = kv_npy_decode(data, size, KV_NPY_ANY_DTYPE, "fuzz.npy");
    KV_FUZZ_CHECK((parsed == KV_OK) == (t != NULL), "kv_npy_parse says %d, kv_npy_decode %s", (int)parsed,
                  t ? "decoded" : "failed");
    if (t != NULL) {
        KV_FUZZ_CHECK(t->dtype == info.dtype && t->ndim == info.ndim, "tensor and info disagree");
        void *enc = NULL;
        size_t len = 0;
        KV_FUZZ_CHECK(kv_npy_encode(t, &enc, &len) == KV_OK, "encode: %s", kv_last_error_message());
        kv_tensor *again = kv_npy_decode(enc, len, t->dtype, "encoded.npy");
        KV_FUZZ_CHECK(again != NULL, "re-decode: %s", kv_last_error_message());
        check_same(t, again);
        kv_tensor_release(again);
        free(enc);
        kv_tensor_release(t);
    }
    kv_error_clear();
    return 0;
}
