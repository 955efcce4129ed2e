/* --last-failed and --failed-first (README-less: docs/triage.md): the
 * cases the previous run in the report folder did not pass.
 *
 * The previous run is read from REPORT_DIR/results.jsonl before this run
 * starts writing there. A case "failed" when any of its rows is FAIL,
 * ERROR, CRASH or TIMEOUT: the statuses that make a run exit 1, less
 * XPASS (a stale baseline entry, fixed in the baseline, not by rerunning)
 * and FLAKY (it passed on a retry). An ERROR row "not run" (a deadline, a
 * --max-failures stop) counts: that case still has to run.
 * A last line cut by a kill is left out, as --resume leaves it out. */
#ifndef KV_RUNNER_LAST_FAILED_H
#define KV_RUNNER_LAST_FAILED_H

#include <stdbool.h>

#include "kv/status.h"

typedef struct kv_id_set {
    char **ids;   /* sorted, distinct */
    int n;
    int rows;     /* rows read, for the messages */
} kv_id_set;

/* Reads the failed case IDs of the run in `report_dir`. No results.jsonl
 * there: KV_ERR_INVALID_ARG naming the file when `required`, else an
 * empty set. A malformed line: KV_ERR_INVALID_ARG naming file and line. */
kv_status kv_last_failed_load(const char *report_dir, bool required, kv_id_set *out);
bool kv_id_set_has(const kv_id_set *s, const char *id);
void kv_id_set_free(kv_id_set *s);

#endif
