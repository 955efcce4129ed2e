/* .npy files (numpy's format, version 1.0 written, 1.0 and 2.0 read).
 *
 * A file is the magic "\x93NUMPY", a version byte pair, a little-endian
 * header length (u16 in 1.0, u32 in 2.0), then an ASCII Python dict
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (4, 5), }
 * padded with spaces and ending in '\n' so that the data starts at a
 * multiple of 64 bytes, then the elements in row-major (C) order.
 *
 * descr per dtype: bool '|b1', u8 '|u1', i8 '|i1', i16 '<i2', i32 '<i4',
 * i64 '<i8', f16 '<f2', f32 '<f4', f64 '<f8', c64 '<c8', c128 '<c16'.
 * bf16 has no numpy type: it is written as '<u2' (the raw 16-bit
 * patterns), and a reader has to be told that '<u2' means bf16 — which is
 * why every reader takes the dtype the caller expects.
 *
 * Everything read is validated (magic, version, header length, dict
 * syntax, keys, descr, fortran_order, shape, exact data size, bool bytes
 * 0/1); a failure is KV_ERR_INVALID_ARG with the message "NAME: reason",
 * NAME being the path or the name given for a memory buffer. The memory
 * decoder is the parse path of the file reader too, so fuzzing it covers
 * both. */
#ifndef KV_NPY_H
#define KV_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "kv/tensor.h"

/* Pass as `expected` to accept whatever dtype the file holds; '<u2' then
 * reads as bf16, the only kvsuite dtype stored that way. */
#define KV_NPY_ANY_DTYPE KV_DTYPE_COUNT

/* The header length field (dict + padding) may not exceed this on read
 * (so it only bounds 2.0 files): a KV_MAX_DIMS shape needs about 250
 * bytes, and a bound keeps a hostile length from driving the parser. */
#define KV_NPY_MAX_HEADER 65536

/* What a header says. */
typedef struct kv_npy_info {
    int version_major, version_minor;
    kv_dtype dtype;          /* after applying `expected` ('<u2' -> bf16) */
    char descr[8];           /* as written in the file, e.g. "<f4" */
    int ndim;
    int64_t sizes[KV_MAX_DIMS];
    size_t data_offset;      /* bytes before the first element */
    size_t data_nbytes;      /* numel * element size */
} kv_npy_info;

/* The .npy descr of a dtype ("<f4"; bf16 gives "<u2"). */
const char *kv_npy_descr(kv_dtype dt);

/* Writes the complete header (magic through the final '\n', a multiple of
 * 64 bytes) for dtype/shape into buf. snprintf style: returns the length
 * the header needs (buf holds it only if cap >= that), or -1 with an error
 * for a bad dtype or shape. */
long kv_npy_format_header(kv_dtype dtype, const int64_t *sizes, int ndim, char *buf, size_t cap);

/* Writes t to `path` (truncating). Any strides are fine: elements go out
 * in row-major logical order. t must be host-addressable and carry no
 * lazy bit (Conjugate/Negative/ZeroTensor: resolve them first). */
kv_status kv_npy_write(const char *path, const kv_tensor *t);
/* The same bytes into a new malloc'd buffer (the caller frees *out). */
kv_status kv_npy_encode(const kv_tensor *t, void **out, size_t *out_len);

/* Reads a file into a new contiguous CPU tensor; NULL + error on failure.
 * `expected` is the dtype the caller wants (a file holding another one is
 * an error) or KV_NPY_ANY_DTYPE. */
kv_tensor *kv_npy_read(const char *path, kv_dtype expected);
/* The same from memory; `name` stands for the path in messages. */
kv_tensor *kv_npy_decode(const void *buf, size_t len, kv_dtype expected, const char *name);
/* Validates the header and the total size of a complete buffer without
 * allocating a tensor (the data must be exactly len - data_offset bytes).
 * The fuzz target and kv_npy_decode share it. */
kv_status kv_npy_parse(const void *buf, size_t len, kv_dtype expected, const char *name,
                       kv_npy_info *info);

/* Visits t's element bytes in row-major logical order — the byte stream
 * .npy data and golden content hashes are defined over. `fn` gets the
 * stream in chunks (one chunk for a contiguous tensor; gathered pieces of
 * at most 4 KiB otherwise) and returns 0 to go on or a positive value to
 * stop the walk, which kv_npy_visit then returns. Zero-size tensors visit
 * nothing. Fails (-1, error set) when t is not host-addressable or has a
 * lazy bit. */
typedef int (*kv_npy_visit_fn)(void *ctx, const void *bytes, size_t n);
int kv_npy_visit(const kv_tensor *t, kv_npy_visit_fn fn, void *ctx);

#endif
