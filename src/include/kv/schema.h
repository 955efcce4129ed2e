/* Op schemas in PyTorch's syntax:
 *   name.overload(Tensor(a!) self, Tensor? w=None, *, Scalar alpha=1) -> Tensor(a!)
 * Types: Tensor, int, SymInt (= int), float, bool, str, Scalar, ScalarType,
 * Device, Layout, MemoryFormat, Generator; suffixes `?` (optional), `[]` and `[N]`
 * (lists, `int[1]?` too); alias annotations `(a)`, `(a!)`; defaults;
 * `*` for keyword-only; tuple returns `(Tensor, Tensor)` with optional
 * names. A malformed schema is KV_ERR_SCHEMA with the column in the
 * message ("col 17: expected ')'"). */
#ifndef KV_SCHEMA_H
#define KV_SCHEMA_H

#include <stdbool.h>

#include "kv/stack.h"
#include "kv/status.h"

#define KV_SCHEMA_MAX_ARGS 16
#define KV_SCHEMA_MAX_RETURNS 4
#define KV_SCHEMA_NAME_MAX 64

typedef enum kv_type_kind {
    KV_TYPE_TENSOR,
    KV_TYPE_INT,
    KV_TYPE_FLOAT,
    KV_TYPE_BOOL,
    KV_TYPE_STR,
    KV_TYPE_SCALAR,
    KV_TYPE_SCALAR_TYPE,
    KV_TYPE_DEVICE,
    KV_TYPE_LAYOUT,
    KV_TYPE_MEMORY_FORMAT,
    KV_TYPE_GENERATOR
} kv_type_kind;

typedef struct kv_type {
    kv_type_kind kind;
    bool is_list;     /* T[] or T[N] */
    int fixed_len;    /* N of T[N]; 0 otherwise */
    bool optional;    /* T? (applies to the list as a whole for T[]?) */
} kv_type;

typedef struct kv_alias_info {
    char set;         /* 'a', 'b', ...; 0 when the argument has no annotation */
    bool is_write;    /* (a!) */
} kv_alias_info;

typedef struct kv_arg {
    char name[KV_SCHEMA_NAME_MAX];  /* empty for unnamed returns */
    kv_type type;
    kv_alias_info alias;
    bool kwarg_only;
    bool has_default;
    /* The default as a value. Int lists point into default_ints;
     * strings into default_str. Memory formats and layouts are ints
     * (c10's numbering: strided = 0; contiguous_format = 0,
     * preserve_format = 1, channels_last = 2, channels_last_3d = 3). */
    kv_ivalue default_value;
    int64_t default_ints[8];
    char default_str[32];
} kv_arg;

typedef struct kv_schema {
    char name[KV_SCHEMA_NAME_MAX];      /* "add" */
    char overload[KV_SCHEMA_NAME_MAX];  /* "Tensor"; "" for the default overload */
    char full_name[2 * KV_SCHEMA_NAME_MAX]; /* "add.Tensor" or "neg" */
    kv_arg args[KV_SCHEMA_MAX_ARGS];
    int nargs;
    kv_arg returns[KV_SCHEMA_MAX_RETURNS];
    int nreturns;
} kv_schema;

kv_status kv_schema_parse(const char *text, kv_schema *out);
/* Canonical text; parsing it gives an equal schema. Returns the length
 * (truncated output is still NUL-terminated when cap > 0). */
int kv_schema_format(const kv_schema *s, char *buf, int cap);

/* Classification used by the runner and by kvgen. */
bool kv_schema_is_inplace(const kv_schema *s); /* name ends in '_', returns self (a!) */
bool kv_schema_is_out(const kv_schema *s);     /* has a kwarg-only mutable Tensor arg */
bool kv_schema_is_view(const kv_schema *s);    /* returns alias a non-mutated input */
bool kv_schema_is_factory(const kv_schema *s); /* no Tensor arguments */
int kv_schema_arg_index(const kv_schema *s, const char *name); /* -1 if none */
/* Tensor[] returns (the foreach ops). A call leaves one stack slot per
 * element of the op's first Tensor[] argument in place of the Tensor[]
 * return; kv_schema_return_count gives the slots a successful call leaves
 * for the arguments `args` (-1 when they have no such list). */
int kv_schema_first_list_arg(const kv_schema *s);     /* -1 if none */
bool kv_schema_returns_list(const kv_schema *s);
int kv_schema_return_count(const kv_schema *s, const kv_stack *args);
/* A Tensor(a!)[] argument (the in-place foreach ops, which return
 * nothing: the elements are what they write), or -1. */
int kv_schema_mutable_list_arg(const kv_schema *s);
const char *kv_type_kind_name(kv_type_kind k);

#endif
