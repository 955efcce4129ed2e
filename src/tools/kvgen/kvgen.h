/* kvgen, the code generator: reads kernels/ops.schema and writes the op
 * ids, the op tables and the typed C API (DESIGN.md section 5).
 *
 * The loading, naming and emitting code lives apart from the CLI
 * (main.c) so tests can drive it on schema text of their own. kvgen links
 * only schema.c and status.c from libkv: it runs before any generated
 * header exists. Everything it writes is a pure function of the schema
 * text, so two runs produce byte-identical files. */
#ifndef KV_TOOLS_KVGEN_H
#define KV_TOOLS_KVGEN_H

#include <stdbool.h>
#include <stddef.h>

#include "kv/schema.h"
#include "kv/status.h"

/* ---- text buffers (buf.c) ---- */
/* A growing NUL-terminated buffer. An allocation failure sets `failed`
 * and turns later appends into no-ops, so emitters check once at the end. */
typedef struct kv_gen_buf {
    char *data;
    size_t len;
    size_t cap;
    bool failed;
} kv_gen_buf;

void kv_gen_buf_init(kv_gen_buf *b);
void kv_gen_buf_free(kv_gen_buf *b);
void kv_gen_buf_puts(kv_gen_buf *b, const char *s);
void kv_gen_buf_printf(kv_gen_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The contents ("" when empty), valid until the next append. */
const char *kv_gen_buf_str(const kv_gen_buf *b);

/* ---- the op list (load.c, names.c) ---- */
#define KV_GEN_IDENT_MAX 160

/* How the typed wrapper hands back the op's returns. */
typedef enum kv_gen_ret_kind {
    KV_GEN_RET_TENSOR,   /* one non-mutating Tensor: returns kv_tensor * (new reference) */
    KV_GEN_RET_ALIAS,    /* one Tensor(a!): returns kv_status, drops the alias */
    KV_GEN_RET_OUTPARAMS, /* none, several, or non-tensor: kv_status + trailing pointers */
    /* One Tensor[] (foreach): kv_status + a trailing kv_tensor ** array the
     * caller sizes to the length of the first Tensor[] argument, one new
     * reference per element. */
    KV_GEN_RET_TENSOR_LIST
} kv_gen_ret_kind;

typedef struct kv_gen_op {
    kv_schema schema;
    char *text;            /* the schema exactly as written (owned) */
    int line;              /* 1-based line of the schema file */
    int col;               /* 1-based column where the text starts */
    char cname[KV_GEN_IDENT_MAX];   /* "kv_add" */
    char id[KV_GEN_IDENT_MAX];      /* "KV_OP_ADD_TENSOR" */
    kv_gen_ret_kind ret_kind;
    char params[KV_SCHEMA_MAX_ARGS][KV_GEN_IDENT_MAX];   /* C names of the arguments */
    char outs[KV_SCHEMA_MAX_RETURNS][KV_GEN_IDENT_MAX];  /* trailing out parameters */
} kv_gen_op;

typedef struct kv_gen_ops {
    /* Sorted by full name once loaded. Pointers, so an op never moves:
     * a parsed kv_schema points into itself (list and string defaults). */
    kv_gen_op **items;
    int n;
    int cap;
    char *source;          /* the schema path as given, for banners and errors */
} kv_gen_ops;

void kv_gen_ops_init(kv_gen_ops *ops);
void kv_gen_ops_free(kv_gen_ops *ops);

/* Parses schema text (one schema per line; blank lines and lines whose
 * first non-blank character is '#' are skipped), names every op and
 * checks the list, then sorts it. Errors are KV_ERR_SCHEMA (malformed
 * schema, duplicate op, C name or id clash, a type with no C mapping, no
 * ops at all) or KV_ERR_OOM, with the message "SOURCE:LINE:COL: reason". */
kv_status kv_gen_load_text(const char *source, const char *text, kv_gen_ops *out);
/* Reads the file at `path`, then kv_gen_load_text. An unreadable file is
 * KV_ERR_INVALID_ARG, "PATH: reason". */
kv_status kv_gen_load_file(const char *path, kv_gen_ops *out);
/* The whole file at `path` as a NUL-terminated string (*text_out, the
 * caller frees). Unopenable, unreadable or holding a NUL byte:
 * KV_ERR_INVALID_ARG, "PATH: reason"; KV_ERR_OOM. Shared by the schema and
 * accel.conf loaders. */
kv_status kv_gen_read_text_file(const char *path, char **text_out);

/* Fills cname, id, ret_kind, params and outs of every op and checks for
 * duplicates, clashes and unmappable types (called by kv_gen_load_text;
 * exposed for tests that build ops by hand). */
kv_status kv_gen_prepare(kv_gen_ops *ops);

/* ---- names (names.c) ---- */
/* "add.Tensor" -> "KV_OP_ADD_TENSOR". */
void kv_gen_id_of(const char *full_name, char *buf, size_t cap);
/* The C name of the typed wrapper: kv_<name> when the op is the default
 * overload or no other op shares its base name, else kv_<name>_<overload>.
 * A result that would redeclare a libkv identifier (kv_stack is a type)
 * gets the suffix _op. */
void kv_gen_cname_of(const kv_schema *s, bool base_shared, char *buf, size_t cap);
/* A schema name usable as a C identifier in a wrapper: C keywords and the
 * wrapper's own locals get a trailing '_' ("default" -> "default_"). */
void kv_gen_param_name(const char *schema_name, char *buf, size_t cap);

/* ---- type mapping (types.c) ---- */
typedef struct kv_gen_arg_map {
    const char *ctype;   /* "kv_tensor *", "int64_t", "const kv_int_list *" */
    const char *push;    /* "kv_push_tensor", "kv_push_opt_ints" */
} kv_gen_arg_map;

typedef struct kv_gen_ret_map {
    const char *ctype;   /* of the out parameter: "kv_tensor **", "bool *" */
    const char *tag;     /* the tag the kernel must return: "KV_IV_TENSOR" */
    const char *member;  /* the kv_ivalue union member: "tensor", "b" */
} kv_gen_ret_map;

/* False when the type has no C mapping (float[], Tensor[]?, ...). */
bool kv_gen_map_arg(kv_type t, kv_gen_arg_map *out);
/* False for returns kvgen cannot hand back (lists, optionals, str). */
bool kv_gen_map_return(kv_type t, kv_gen_ret_map *out);
kv_gen_ret_kind kv_gen_return_kind(const kv_schema *s);
/* The index of the first Tensor[] argument, or -1. */
int kv_gen_first_list_arg(const kv_schema *s);
/* "int[1]?", "Tensor[]", for error messages. */
void kv_gen_type_format(kv_type t, char *buf, size_t cap);

/* ---- emitting (emit.c, emit_ids.c, emit_api.c) ---- */
typedef enum kv_gen_file {
    KV_GEN_FILE_OP_IDS_H,     /* kv/op_ids.h */
    KV_GEN_FILE_OPS_TABLE_C,  /* ops_table.c */
    KV_GEN_FILE_OPS_H,        /* kv/ops.h */
    KV_GEN_FILE_OPS_API_C,    /* ops_api.c */
    KV_GEN_FILE_COUNT
} kv_gen_file;

/* Path of the file relative to the output folder. */
const char *kv_gen_file_path(kv_gen_file which);
/* Appends the whole text of one generated file. KV_ERR_OOM on failure. */
kv_status kv_gen_emit(const kv_gen_ops *ops, kv_gen_file which, kv_gen_buf *out);

void kv_gen_emit_op_ids(const kv_gen_ops *ops, kv_gen_buf *out);
void kv_gen_emit_ops_table(const kv_gen_ops *ops, kv_gen_buf *out);
void kv_gen_emit_ops_h(const kv_gen_ops *ops, kv_gen_buf *out);
void kv_gen_emit_ops_api(const kv_gen_ops *ops, kv_gen_buf *out);
/* One op's piece of ops.h (schema comment + prototype) and of ops_api.c
 * (the wrapper definition), as they appear in those files. */
void kv_gen_emit_decl(const kv_gen_op *op, kv_gen_buf *out);
void kv_gen_emit_wrapper(const kv_gen_op *op, kv_gen_buf *out);

/* ---- accel boxing kernels (accel_conf.c, emit_accel.c) ----
 * kernels/accel.conf lists the ops the accel device boxes, one per line:
 *   OP_FULL_NAME TARGET      # a comment may follow
 * TARGET is cpu, sim, cuda, or default (the runtime target, picked by
 * KV_ACCEL_TARGET). Blank lines and '#' comments are skipped. An op that
 * is not in the schema, one of the hand-registered ops (boxing/hand_ops.h)
 * or an op listed twice is an error "FILE:LINE:COL: reason". */
typedef enum kv_gen_accel_target {
    KV_GEN_ACCEL_DEFAULT,
    KV_GEN_ACCEL_CPU,
    KV_GEN_ACCEL_SIM,
    KV_GEN_ACCEL_CUDA
} kv_gen_accel_target;

typedef struct kv_gen_accel_entry {
    const kv_gen_op *op;         /* borrowed from the kv_gen_ops it was loaded against */
    kv_gen_accel_target target;
    int line;
} kv_gen_accel_entry;

typedef struct kv_gen_accel {
    kv_gen_accel_entry *items;   /* sorted by the op's full name once loaded */
    int n;
    int cap;
    char *source;
} kv_gen_accel;

void kv_gen_accel_init(kv_gen_accel *conf);
void kv_gen_accel_free(kv_gen_accel *conf);
/* Parses accel.conf text against `ops`. KV_ERR_SCHEMA with
 * "SOURCE:LINE:COL: reason", or KV_ERR_OOM. */
kv_status kv_gen_accel_load_text(const char *source, const char *text, const kv_gen_ops *ops, kv_gen_accel *out);
kv_status kv_gen_accel_load_file(const char *path, const kv_gen_ops *ops, kv_gen_accel *out);
/* Whether src/boxing registers the op by hand (boxing/hand_ops.h). */
bool kv_gen_accel_is_hand_registered(const char *full_name);
const char *kv_gen_accel_target_name(kv_gen_accel_target t); /* "default", "cpu", ... */

/* How a boxing kernel treats the op, checked in this order: no tensor
 * argument (factory), a Tensor[] argument (tensor-list), a kwarg-only
 * mutable tensor (out=), an in-place op, a Tensor? argument
 * (optional-tensor), anything else (functional). */
typedef enum kv_gen_accel_kind {
    KV_GEN_ACCEL_FUNCTIONAL,
    KV_GEN_ACCEL_INPLACE,
    KV_GEN_ACCEL_OUT,
    KV_GEN_ACCEL_TENSOR_LIST,
    KV_GEN_ACCEL_OPTIONAL_TENSOR,
    KV_GEN_ACCEL_FACTORY,
    KV_GEN_ACCEL_KIND_COUNT
} kv_gen_accel_kind;

kv_gen_accel_kind kv_gen_accel_kind_of(const kv_schema *s);
/* "functional", "in-place", "out=", "tensor-list", "optional-tensor", "factory" */
const char *kv_gen_accel_kind_name(kv_gen_accel_kind k);
/* "accel_add_tensor": the kernel's static name, from the op id. */
void kv_gen_accel_kernel_name(const kv_gen_op *op, char *buf, size_t cap);
/* One kernel (schema comment + definition) as it appears in accel_boxing.c. */
void kv_gen_emit_accel_kernel(const kv_gen_accel_entry *e, kv_gen_buf *out);
/* The whole of accel_boxing.c: the kernels grouped by kind (in the enum's
 * order, sorted by full name within a kind) and the registration. */
void kv_gen_emit_accel_boxing(const kv_gen_ops *ops, const kv_gen_accel *conf, kv_gen_buf *out);
#define KV_GEN_ACCEL_BOXING_PATH "accel_boxing.c"

/* ---- output (write.c) ---- */
/* Writes `b` to `path` unless the file already holds exactly that text,
 * so build steps after a restat rule see an unchanged mtime. Creates the
 * parent folders. *written (may be NULL) says whether it wrote. */
kv_status kv_gen_write_if_changed(const char *path, const kv_gen_buf *b, bool *written);

#endif
