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

/* Reads DIR/meta.json and DIR/results.jsonl of each folder, in the order
 * given, and appends all results to `out` (in folder order, each folder in
 * file order). Errors, with `out` left as it was:
 *   - a missing or malformed file, or a results.jsonl whose line count is
 *     not the count in its meta.json (a truncated upload);
 *   - the same (case_id, check) in two places (overlapping shards, or a
 *     folder given twice), naming the case, the check and both folders;
 *   - folders of runs with different seeds;
 *   - shard folders that are not exactly one complete set: the same N,
 *     every K once, N folders (an unsharded folder may be merged only with
 *     other unsharded ones);
 *   - no results at all.
 * `meta_out` (may be NULL) gets the merged meta: run name and options of
 * the first folder, the common seed, the earliest start time, the longest
 * wall time (shards run in parallel), the sum of the case counts, no shard,
 * merged_from = ndirs. */
kv_status kv_merge_dirs(const char *const *dirs, int ndirs, kv_result_list *out,
                        kv_report_meta *meta_out);

#endif
