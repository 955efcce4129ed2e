/* Per-backend tolerance overrides (DESIGN.md section 6: "a backend may
 * carry overrides, each with a reason"), read from files: what a backend
 * owner changes without touching kvsuite's source.
 *
 * The tolerance table (runner/check/tolerance.h) states what a correct kernel
 * may differ by. A backend whose library has a documented, understood
 * deviation that the table's derivation does not cover (a flush of
 * subnormal results, say) carries an override: a line of a tolerances
 * file (tol_file.c has the grammar) naming ops, output dtypes, checks and
 * the backend, the absolute slack it adds to every element's bound, and
 * the reason. Overrides widen BOUND rules only (a bitwise or ulp rule
 * states exactness, which a slack would quietly void): an op whose
 * deviation breaks an exact rule stays unsupported on that backend
 * instead. The variants check applies the first matching row and names
 * it, with its reason, in the result's message; the row records which one
 * (kv_check_result.tol_override) so meta.json counts its uses. Backends
 * are matched by the name their plugin gives (kv_backend_desc.name),
 * which stays the same whatever slot it gets; a device=accel case uses its
 * target's rows (accel runs the target's kernels).
 *
 * The rows live in this process (loaded before any case runs, so forked
 * workers see the same table and indices). */
#ifndef KV_RUNNER_CHECK_TOL_BACKEND_H
#define KV_RUNNER_CHECK_TOL_BACKEND_H

#include "kv/dtype.h"
#include "kv/status.h"

/* More rows than any backend needs (oneDNN has 7): a bound keeps the row
 * index small enough for a result row and the counts a fixed table. */
#define KV_TOL_OVERRIDE_MAX 256

typedef struct kv_tol_override {
    char backend[32];     /* plugin name, e.g. "onednn" */
    char op[96];          /* op name glob (fnmatch) */
    char check[64];       /* check row glob, e.g. "variants*" */
    unsigned dtypes;      /* output dtypes (1u << kv_dtype) */
    double abs_slack;     /* added to every element's bound */
    char rule[48];        /* the rule as written: "abs+0x1p-126" */
    char reason[400];
    char source[300];     /* "FILE:LINE" of its line */
} kv_tol_override;

int kv_tol_override_count(void);
const kv_tol_override *kv_tol_override_at(int i);
/* Appends a row; KV_ERR_INVALID_ARG past KV_TOL_OVERRIDE_MAX rows. */
kv_status kv_tol_override_add(const kv_tol_override *o);
/* Keeps the first n rows (0: forgets every row). */
void kv_tol_override_truncate(int n);
/* The index of the first row for (backend, op, check row, output dtype),
 * or -1. backend may be NULL (the CPU, or a backend without a plugin):
 * never overridden. */
int kv_tol_override_find(const char *backend, const char *op, const char *check, kv_dtype out);

/* Reads a tolerances file (grammar in tol_file.c) and appends its rows.
 * Every row's backend must be one of `backends` (the loaded plugins'
 * names; a plugin's own file: that plugin's). A malformed line is
 * KV_ERR_INVALID_ARG, "FILE:LINE: what is wrong", and adds nothing. */
kv_status kv_tol_file_load(const char *path, const char *const *backends, int nbackends);
/* The same over text already read; `name` names it in errors. */
kv_status kv_tol_file_parse(const char *text, const char *name, const char *const *backends, int nbackends);
/* Loads the file each loaded plugin ships beside itself (PLUGIN.so's is
 * PLUGIN.tolerances in the same folder); a plugin without one is fine.
 * The console's run header names each file (report_console.c). */
kv_status kv_tol_file_load_plugins(void);
/* Loads --tolerances=FILE against every loaded plugin's name. */
kv_status kv_tol_file_load_user(const char *path);
/* The files loaded so far (the user's and the plugins'), in load order:
 * how many, and the i-th as "NAME#HASH" (its file name and the XXH3-64
 * of its bytes), what the run's fingerprint names; forget drops the list
 * (tests). */
int kv_tol_file_count(void);
void kv_tol_file_describe(int i, char *buf, int cap);
void kv_tol_file_forget(void);

#endif
