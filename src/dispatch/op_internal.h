/* The layout of an op, shared by registry.c (which builds it) and call.c
 * (which reads it on the hot path). Not part of the public API; tests may
 * include it to observe the registry. */
#ifndef KV_DISPATCH_OP_INTERNAL_H
#define KV_DISPATCH_OP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"

typedef struct kv_entry {
    kv_entry_kind kind;
    kv_kernel_fn fn; /* NULL unless kind is KERNEL or FALLBACK */
} kv_entry;

struct kv_op {
    /* Parsed in place: the defaults of the schema point into it. */
    kv_schema schema;
    int builtin_id; /* kv_op_id for ops of ops.schema, -1 otherwise */

    /* What was registered for this op itself. */
    kv_kernel_fn direct[KV_KEY_COUNT];
    kv_keyset direct_fallthrough;

    /* Computed from the above and the global fallbacks. */
    kv_entry table[KV_KEY_COUNT];
    kv_keyset fallthrough;  /* keys whose entry is KV_ENTRY_FALLTHROUGH */
    kv_keyset kernel_keys;  /* keys whose entry is KV_ENTRY_KERNEL */

    /* Argument positions the key set computation needs, precomputed at
     * registration so kv_call does not walk the schema's types. */
    int tensor_args[KV_SCHEMA_MAX_ARGS]; /* Tensor, Tensor?, Tensor[] */
    int ntensor_args;
    int device_arg; /* index of the Device argument, -1 if none */
    /* The value tag each argument takes and which may be None, so that
     * kv_call checks a well-formed stack with one compare per argument. */
    unsigned char arg_tag[KV_SCHEMA_MAX_ARGS];
    uint64_t arg_optional;
};

/* The value tag an argument of type t takes on a stack (call.c). */
kv_ivalue_tag kv_dispatch_tag_for(const kv_type *t);

/* KV_NO_DISPATCH_CACHE's parser (kv_init reads the variable once): NULL,
 * "" and "0" leave the handle cache on, "1" turns it off, anything else is
 * KV_ERR_INVALID_ARG naming the value. Pure, for tests and the fuzzer. */
kv_status kv_dispatch_parse_cache_env(const char *value, bool *enabled);

/* How many times kv_op_find has looked a name up (monotonic, all threads).
 * Lets tests prove the handle cache ON skips lookups and OFF does not. */
uint64_t kv_op_lookup_count(void);

#endif
