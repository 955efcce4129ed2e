/* --filter=PATTERN over case IDs (repeatable; a case is selected when it
 * matches ANY of the patterns; no pattern selects every case).
 *
 *   glob        fnmatch(3) over the whole ID with `*` and `?`. Brackets
 *               match themselves, because every case ID is full of them
 *               (shape=[4,5]); a backslash makes `*` or `?` literal.
 *   re:REGEX    a POSIX extended regex, searched anywhere in the ID
 *               (anchor with ^ and $). A bad regex is an error. */
#ifndef KV_RUNNER_FILTER_H
#define KV_RUNNER_FILTER_H

#include <stdbool.h>

#include "kv/status.h"

typedef struct kv_filter_pattern kv_filter_pattern;

typedef struct kv_filter {
    kv_filter_pattern *items;
    int n, cap;
} kv_filter;

/* Compiles one pattern into the filter; KV_ERR_INVALID_ARG naming the
 * pattern and the reason for a bad regex or an empty pattern. */
kv_status kv_filter_add(kv_filter *f, const char *pattern);
/* True when `id` matches any pattern, or when there is none. */
bool kv_filter_match(const kv_filter *f, const char *id);
void kv_filter_free(kv_filter *f);

#endif
