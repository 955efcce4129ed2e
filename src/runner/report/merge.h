/* Reading report folders back: `kvrun --merge DIR...` combines the report
 * folders of the shards of one run (a CI matrix) into one result list,
 * which kvrun then writes with kv_report_write_all and kv_report_console.
 *
 * Strict on purpose: a merged report that silently lost a shard or a line
 * would turn a red run green. Errors (KV_ERR_INVALID_ARG) name the file
 * and, for results.jsonl, the line: "merge: DIR/results.jsonl:7: ...". */
#ifndef KV_RUNNER_MERGE_H
#define KV_RUNNER_MERGE_H

#include <stdint.h>
#include <stdio.h>

#include "runner/report/report.h"
#include "runner/check/result.h"

/* Parses one results.jsonl line (without its newline) in the encoding of
 * report_jsonl.c. Every field must be present with the right type; unknown
 * keys, unknown dtype/status names and strings longer than their field are
 * errors. On error returns -1 with the reason in `why`. */
int kv_merge_parse_line(const char *line, kv_check_result *out, char *why, int whycap);

/* Appends every result of a results.jsonl file to `out`. A malformed
 * line, an empty line or a last line without its newline (a truncated
 * file) is an error naming path:line; `out` is then left as it was. */
kv_status kv_merge_read_jsonl(const char *path, kv_result_list *out);

/* Reads a meta.json; *nresults (may be NULL) gets the result count it
 * records. */
kv_status kv_merge_read_meta(const char *path, kv_report_meta *meta, int64_t *nresults);

/* Merging the folders of one run. kv_merge_open reads DIR/meta.json and
 * DIR/results.jsonl of each folder, in the order given, and checks them;
 * kv_merge_emit then hands every merged row to `each` (in folder order,
 * each folder in file order; an identical copy of a backend's load row
 * after the first is left out), reading the files again rather than
 * holding the rows: the open merge keeps only where the left-out rows are,
 * and checking for duplicates takes 24 bytes a row while it runs.
 * kv_merge_open fails (NULL, message set) on:
 *   - a missing or malformed file, or a results.jsonl whose line count is
 *     not the count in its meta.json (a truncated upload);
 *   - the same (case_id, check) in two places (overlapping shards, or a
 *     folder given twice), naming the case, the check and both folders;
 *   - folders of runs with different seeds or fingerprints;
 *   - shard folders that are not exactly one complete set: the same N,
 *     every K once, N folders (an unsharded folder may be merged only with
 *     other unsharded ones);
 *   - no results at all.
 * `meta_out` (may be NULL) gets the merged meta: run name and options of
 * the first folder, the common seed, the earliest start time, the longest
 * wall time (shards run in parallel), the sum of the case counts, no shard,
 * merged_from = ndirs. `dirs` must outlive the merge. */
typedef struct kv_merge kv_merge;
kv_merge *kv_merge_open(const char *const *dirs, int ndirs, kv_report_meta *meta_out);
/* Stops at the first error of `each` or of reading (a file that changed
 * since kv_merge_open). */
kv_status kv_merge_emit(const kv_merge *m, kv_status (*each)(void *ctx, const kv_check_result *r), void *ctx);
/* The number of rows kv_merge_emit hands on. */
int64_t kv_merge_rows(const kv_merge *m);
void kv_merge_close(kv_merge *m);

/* The merged rows appended to `out` (a list: for tests and small merges);
 * errors as kv_merge_open, with `out` left as it was. */
kv_status kv_merge_dirs(const char *const *dirs, int ndirs, kv_result_list *out,
                        kv_report_meta *meta_out);

/* `kvrun --merge`: the merged report folder written into `rdir` row by row
 * (kv_report_build: results.jsonl and junit.xml as the rows pass, the
 * other reports from counts and the failing rows), so the memory does not
 * grow with the number of rows, and the console summary printed to
 * `console`. *exit_code gets kvrun's exit code: 2 when the folders do not
 * merge (nothing written; the error is returned), 1 when writing failed
 * (error returned, "writing reports to RDIR: ..."), else the merged run's
 * own code (0, or 1 for failures). */
kv_status kv_merge_write(const char *const *dirs, int ndirs, const char *rdir, bool gzip_results, FILE *console,
                         int *exit_code);

#endif
