/* A run's report folder holds that run's reports and no other's: before a
 * run begins, the files kvrun writes there are removed, so a report the
 * new run does not write (accuracy.md of an earlier --check=accuracy run,
 * a failures.txt of a run that got further) or cannot finish (the run dies before writing junit.xml)
 * is never left to be read, or uploaded, as this run's. Only kvrun's own
 * file names: the folder may hold the user's files too. */
#include "runner/report/report.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Not perf.jsonl and perf.html: --mode=perf writes them into the same
 * folder by default, as a report of its own that a check run leaves be. */
static const char *const kv_report_files[] = {
    KV_REPORT_JSONL,    KV_REPORT_META,     KV_REPORT_JUNIT,          KV_REPORT_HTML,
    KV_REPORT_MATRIX,   KV_REPORT_FAILURES, KV_REPORT_ACCURACY, KV_REPORT_ACCURACY_JSONL,
};

kv_status kv_report_clear(const char *dir) {
    for (size_t i = 0; i < sizeof kv_report_files / sizeof kv_report_files[0]; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, kv_report_files[i]);
        if (unlink(path) != 0 && errno != ENOENT) {
            const int e = errno;
            return kv_error(KV_ERR_INVALID_ARG, "cannot remove the previous run's '%s': %s", path, strerror(e));
        }
    }
    return KV_OK;
}
