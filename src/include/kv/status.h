/* Errors are values: every entry point returns a kv_status (or NULL) and
 * leaves a thread-local message that names the op, the argument and the
 * reason. Nothing in libkv aborts on bad user input. */
#ifndef KV_STATUS_H
#define KV_STATUS_H

#include <stdarg.h>

typedef enum kv_status {
    KV_OK = 0,
    KV_ERR_INVALID_ARG,    /* an argument value is not allowed */
    KV_ERR_SHAPE,          /* shapes do not match or do not broadcast */
    KV_ERR_DIM,            /* a dimension index is out of range */
    KV_ERR_INDEX,          /* an index value (select, index_select) is out of range */
    KV_ERR_NEGATIVE_SIZE,  /* a size is negative */
    KV_ERR_DTYPE,          /* the dtype is not supported by this op */
    KV_ERR_DEVICE,         /* tensors on different devices */
    KV_ERR_OOM,            /* an allocator returned nothing */
    KV_ERR_SCHEMA,         /* a schema string is malformed */
    KV_ERR_UNKNOWN_OP,     /* no op of that name is registered */
    KV_ERR_MISSING_KERNEL, /* the op has no kernel for the selected key */
    KV_ERR_INTERNAL,       /* a bug in kvsuite itself */
    KV_STATUS_COUNT
} kv_status;

/* Short stable names ("shape", "dim", ...) used by case files (expect=). */
const char *kv_status_name(kv_status s);
/* Parses a name from kv_status_name; returns 0 on success, -1 if unknown. */
int kv_status_parse(const char *name, kv_status *out);

/* Records an error for this thread and returns `code`, so a failing path
 * reads `return kv_error(KV_ERR_DIM, "select.int: dim %d out of range", d);`.
 * The message should start with the op name and name the argument. */
kv_status kv_error(kv_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
kv_status kv_verror(kv_status code, const char *fmt, va_list ap);

/* The last error on this thread (KV_OK and "" when none). */
kv_status kv_last_error(void);
const char *kv_last_error_message(void);
void kv_error_clear(void);

/* Sets the thread's error to "<fmt>: <the previous message>" (or just
 * <fmt> when there was none), so a caller adds where it happened to what
 * went wrong below it. Returns `code`. */
kv_status kv_error_prefix(kv_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
