/* A results.jsonl read back, plain or gzip-compressed (kvrun
 * --gzip-results writes results.jsonl.gz): the one reader behind every
 * kvrun that takes an earlier run's rows (--merge, --compare,
 * --last-failed). zlib reads a plain file through unchanged, so both kinds
 * go down one path and a reader never has to be told which it has. */
#ifndef KV_RUNNER_JSONL_FILE_H
#define KV_RUNNER_JSONL_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/status.h"

typedef struct kv_jsonl_reader {
    void *gz;                    /* zlib's gzFile, kept out of this header */
    char *path;
    const char *who;             /* names the reader in its errors: "merge" */
    char *line;                  /* the current line, NUL-terminated, no '\n' */
    size_t cap;
    unsigned char *buf;          /* decompressed bytes not yet handed out */
    size_t pos, end;
    int64_t lineno;              /* of the current line, from 1 */
    int64_t off;                 /* byte offset of the current line in the plain text */
    int64_t next_off;
    bool cut;                    /* the current line had no '\n': the file ends inside it */
} kv_jsonl_reader;

/* DIR/results.jsonl.gz when the folder holds one, else DIR/results.jsonl
 * (malloc'd; NULL when out of memory). A run removes both at its start,
 * so a folder never holds one of each from different runs. */
char *kv_jsonl_path_in(const char *dir);

/* Opens PATH; WHO (a string literal, e.g. "merge"; "" for none) starts
 * every error. */
kv_status kv_jsonl_open(kv_jsonl_reader *r, const char *path, const char *who);

/* The next line in r->line, without its newline: returns its length (a
 * line may hold NUL bytes; the length counts them), -1 at the end, -2 on
 * a read error or a gzip stream that ends early (kv_error names who, the
 * file and the line; kv_last_error() is its status). */
int64_t kv_jsonl_next(kv_jsonl_reader *r);

/* Moves to the line starting at plain-text offset OFF (from an earlier
 * r->off). A gzip file is read forward from its start: cheap enough for
 * the few rows a merge reads twice. */
kv_status kv_jsonl_seek(kv_jsonl_reader *r, int64_t off);

void kv_jsonl_close(kv_jsonl_reader *r);

#endif
