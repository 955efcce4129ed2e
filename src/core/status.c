/* The thread-local last error. Kept free of generated headers because the
 * code generator (build/kvgen) links this file before anything else exists. */
#include "kv/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Messages name op, argument and reason; 512 bytes holds two formatted
 * shapes of KV_MAX_DIMS entries with room to spare. Longer text is cut. */
#define KV_ERROR_MESSAGE_CAP 512

static _Thread_local kv_status tls_code = KV_OK;
static _Thread_local char tls_message[KV_ERROR_MESSAGE_CAP];

const char *kv_status_name(kv_status s) {
    switch (s) {
    case KV_OK: return "ok";
    case KV_ERR_INVALID_ARG: return "invalid_arg";
    case KV_ERR_SHAPE: return "shape";
    case KV_ERR_DIM: return "dim";
    case KV_ERR_INDEX: return "index";
    case KV_ERR_NEGATIVE_SIZE: return "negative_size";
    case KV_ERR_DTYPE: return "dtype";
    case KV_ERR_DEVICE: return "device";
    case KV_ERR_OOM: return "oom";
    case KV_ERR_SCHEMA: return "schema";
    case KV_ERR_UNKNOWN_OP: return "unknown_op";
    case KV_ERR_MISSING_KERNEL: return "missing_kernel";
    case KV_ERR_INTERNAL: return "internal";
    case KV_STATUS_COUNT: break;
    }
    /* Reached only for values outside the enum (a corrupted status). */
    return "unknown";
}

int kv_status_parse(const char *name, kv_status *out) {
    if (name == NULL) return -1;
    for (int i = 0; i < (int)KV_STATUS_COUNT; i++) {
        if (strcmp(name, kv_status_name((kv_status)i)) == 0) {
            if (out) *out = (kv_status)i;
            return 0;
        }
    }
    return -1;
}

kv_status kv_verror(kv_status code, const char *fmt, va_list ap) {
    tls_code = code;
    if (fmt == NULL) {
        tls_message[0] = '\0';
    } else {
        vsnprintf(tls_message, sizeof tls_message, fmt, ap);
    }
    return code;
}

kv_status kv_error(kv_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    kv_status r = kv_verror(code, fmt, ap);
    va_end(ap);
    return r;
}

kv_status kv_last_error(void) { return tls_code; }

const char *kv_last_error_message(void) { return tls_code == KV_OK ? "" : tls_message; }

void kv_error_clear(void) {
    tls_code = KV_OK;
    tls_message[0] = '\0';
}

kv_status kv_error_prefix(kv_status code, const char *fmt, ...) {
    char prev[512], head[512];
    snprintf(prev, sizeof prev, "%s", kv_last_error_message());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    if (prev[0] == '\0') return kv_error(code, "%s", head);
    return kv_error(code, "%s: %s", head, prev);
}
