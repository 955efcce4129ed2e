/* Content hashes: XXH3-64 over bytes, and over a tensor's element bytes in
 * row-major logical order (the stream kv_npy_visit defines), so a tensor
 * and the .npy file holding it hash alike whatever the tensor's strides.
 * Used by the golden store (content hashes, file names) and by reports.
 * XXH3 is specified byte-for-byte, so hashes agree across machines. */
#ifndef KV_RUNNER_HASH_H
#define KV_RUNNER_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "kv/tensor.h"

/* 16 lowercase hex digits and the terminator. */
#define KV_HASH_HEX_LEN 17

uint64_t kv_hash_bytes(const void *data, size_t n);
uint64_t kv_hash_string(const char *s);

/* Streaming: begin, feed bytes in any split, end. A stream is used by one
 * thread at a time; end frees it (also pass it to end on error paths). */
typedef struct kv_hash_stream kv_hash_stream;
kv_hash_stream *kv_hash_begin(void); /* NULL + KV_ERR_OOM */
void kv_hash_update(kv_hash_stream *h, const void *data, size_t n);
uint64_t kv_hash_end(kv_hash_stream *h);

/* Hash of t's element bytes, row-major (dtype and shape not included: the
 * golden MANIFEST records those separately). Errors as kv_npy_visit. */
kv_status kv_hash_tensor(const kv_tensor *t, uint64_t *out);

/* Writes 16 lowercase hex digits; returns buf. */
char *kv_hash_format(uint64_t h, char buf[KV_HASH_HEX_LEN]);
/* Parses exactly 16 hex digits (either case); 0 on success, -1 if not. */
int kv_hash_parse(const char *text, uint64_t *out);

#endif
