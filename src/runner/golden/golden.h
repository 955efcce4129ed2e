/* The golden store (DESIGN.md section 6): committed reference outputs that
 * every ref-kernel result is checked against.
 *
 * On disk, under one directory (golden/ at the repo root):
 *   MANIFEST            text, one line per (golden key, output index),
 *                       sorted by key (bytewise) then output, tab-separated:
 *                         key  output  dtype  shape  hash  file
 *                       e.g. "add.Tensor(...)\t0\tf32\t[4,5]\t<16 hex>\tadd.Tensor/<16 hex>.npy"
 *                       hash: XXH3-64 of the row-major data bytes (runner/hash.h);
 *                       file: relative to the store, "-" when hash-only.
 *                       '#' lines are comments; the first line names the format.
 *   <op>/<K>.npy        output 0 of the key whose XXH3-64 is K (16 hex);
 *   <op>/<K>-<i>.npy    output i >= 1 of that key.
 * bf16 data is stored as '<u2' raw patterns; the dtype column says bf16.
 *
 * Outputs over max_file_bytes (default 64 KiB of data) are hash-only: the
 * store stays small enough to review in diffs and clone quickly, and a
 * large output still gets a bitwise check. For a hash-only entry an OK
 * verdict proves the live reference output equals the recorded one, so
 * the runner may use that live output as the golden tensor for tolerance
 * comparisons; a mismatch can only report the two hashes.
 *
 * Keys are opaque strings (kv_case_golden_key) of printable characters,
 * not starting with '#', without tabs or newlines.
 *
 * Concurrency: opening and verifying never write anything, and a store is
 * not modified by verify/lookup, so forked workers (or threads) may verify
 * against one store concurrently. put/save mutate the store and write the
 * directory: regeneration happens in the parent process only, with no
 * verify running at the same time. */
#ifndef KV_RUNNER_GOLDEN_H
#define KV_RUNNER_GOLDEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/tensor.h"

#define KV_GOLDEN_FORMAT 1
#define KV_GOLDEN_DEFAULT_MAX_FILE_BYTES ((size_t)64 * 1024)
#define KV_GOLDEN_MAX_OUTPUTS 64
#define KV_GOLDEN_MESSAGE_MAX 1024

typedef struct kv_golden_entry {
    const char *key;
    int output;                  /* output index of the op, 0-based */
    kv_dtype dtype;
    int ndim;
    int64_t sizes[KV_MAX_DIMS];
    uint64_t hash;
    const char *file;            /* relative to the store dir; NULL when hash-only */
} kv_golden_entry;

typedef struct kv_golden_store kv_golden_store;

/* Loads dir/MANIFEST. A missing MANIFEST (or missing dir) is an empty
 * store with kv_golden_has_manifest false, so a first --regen-golden
 * works; a malformed line is NULL + KV_ERR_INVALID_ARG "DIR/MANIFEST:LINE:
 * reason". .npy files are only read when verified. */
kv_golden_store *kv_golden_open(const char *dir);
void kv_golden_close(kv_golden_store *s); /* NULL is allowed */

bool kv_golden_has_manifest(const kv_golden_store *s);
const char *kv_golden_dir(const kv_golden_store *s);
/* Entries as loaded (or as of the last save), in MANIFEST order. */
int kv_golden_count(const kv_golden_store *s);
const kv_golden_entry *kv_golden_entry_at(const kv_golden_store *s, int i);
/* NULL when there is no such entry. Binary search: cheap per case. */
const kv_golden_entry *kv_golden_lookup(const kv_golden_store *s, const char *key, int output);
/* How many outputs are recorded for key (0 when none). */
int kv_golden_output_count(const kv_golden_store *s, const char *key);

/* ---- verification ---- */

typedef enum kv_golden_outcome {
    KV_GOLDEN_OK,        /* bitwise equal to the stored golden */
    KV_GOLDEN_MISSING,   /* no entry, or its .npy is missing: the case is ERROR */
    KV_GOLDEN_CORRUPT,   /* .npy malformed or its hash differs from MANIFEST: ERROR */
    KV_GOLDEN_STALE,     /* MANIFEST's dtype/shape differ from the output's: ERROR */
    KV_GOLDEN_DIFFERS    /* same dtype and shape, different data: the golden check FAILs */
} kv_golden_outcome;

const char *kv_golden_outcome_name(kv_golden_outcome o); /* "ok", "missing", ... */

typedef struct kv_golden_verdict {
    kv_golden_outcome outcome;
    char message[KV_GOLDEN_MESSAGE_MAX]; /* "" for OK; else names key, output, file and the fix */
    uint64_t expected_hash;      /* MANIFEST's (0 when MISSING) */
    uint64_t actual_hash;        /* the output's (0 when not computed) */
    /* DIFFERS with a stored file: the golden tensor (contiguous CPU), for
     * the comparison code to list mismatches. Owned by the verdict:
     * kv_golden_verdict_release frees it. NULL otherwise. */
    kv_tensor *stored;
} kv_golden_verdict;

/* Checks `out` (output `output` of the case with golden key `key`)
 * against the store. Data equality is by bytes, row-major, so NaN
 * payloads and signed zeros count. Returns KV_OK when a verdict was
 * reached (whatever it is); an error (NULL arguments, an output the host
 * cannot read, a lazy bit) means no verdict. Read-only. */
kv_status kv_golden_verify(const kv_golden_store *s, const char *key, int output, const kv_tensor *out,
                           kv_golden_verdict *v);
void kv_golden_verdict_release(kv_golden_verdict *v);

/* ---- regeneration (parent process only) ---- */

/* Data size above which new entries are hash-only. */
void kv_golden_set_max_file_bytes(kv_golden_store *s, size_t nbytes);

/* Records the outputs of one golden key, replacing every output the key
 * had (an op that now has fewer outputs loses the rest). `op` names the
 * sub-directory ([A-Za-z0-9_.-], not starting with '.'). Putting a key
 * again with identical outputs is a no-op; with different outputs it is an
 * error (a non-deterministic reference). The data is copied: the tensors
 * may be freed after the call. Nothing is visible to lookup/verify and
 * nothing is written until kv_golden_save. */
kv_status kv_golden_put(kv_golden_store *s, const char *op, const char *key, const kv_tensor *const *outputs,
                        int noutputs);

typedef struct kv_golden_ref {
    char *key;
    int output;
} kv_golden_ref;

/* What a save changed, per (key, output) entry, for kvrun to print. */
typedef struct kv_golden_summary {
    int added;                   /* put, not in the store before */
    int changed;                 /* put, dtype/shape/hash/file differ from before */
    int unchanged;               /* put, identical to before */
    int removed;                 /* in the store before, gone now */
    int kept;                    /* not put in a partial run: left as they were */
    int files_written;           /* .npy files created or rewritten (repairs included) */
    int files_removed;           /* unreferenced .npy files deleted (full runs only) */
    kv_golden_ref *added_list, *changed_list, *removed_list; /* sorted like MANIFEST */
} kv_golden_summary;

/* Writes the .npy files of the entries put (only those whose bytes on
 * disk differ, each via a temp file + rename) and then MANIFEST (temp +
 * rename), so readers never see a torn file. An interrupted save can leave
 * new data next to the old MANIFEST; those entries then verify as CORRUPT,
 * never as a false OK, and rerunning the regeneration repairs them.
 * `full_run`: the whole suite was put, so entries not put are removed and
 * unreferenced .npy files in the op directories are deleted; otherwise
 * entries not put are kept as they are. On success the store holds the new
 * entries (visible to lookup/verify) and `summary` (may be NULL; free it
 * with kv_golden_summary_free) says what changed. On failure the store is
 * as before the call. */
kv_status kv_golden_save(kv_golden_store *s, bool full_run, kv_golden_summary *summary);
void kv_golden_summary_free(kv_golden_summary *sum);

/* The file name an entry of (op, key, output) gets, relative to the store:
 * "op/<16 hex>.npy" or "op/<16 hex>-<i>.npy". snprintf style. */
int kv_golden_file_name(const char *op, const char *key, int output, char *buf, size_t cap);

/* stale.c: temp files (.NAME.tmp.PID) that a --regen-golden killed
 * between writing and renaming left in the store `dir` and its op
 * folders, whose writer is gone: counted, or removed when `remove`.
 * `first` (may be NULL) gets the path of one. kvrun names them in a
 * normal run and removes them in a regeneration. */
int kv_golden_stale_temps(const char *dir, bool remove, char *first, size_t cap);

#endif
