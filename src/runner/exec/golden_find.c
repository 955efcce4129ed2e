/* Where the golden store is when --golden-dir is not given: ./golden in
 * the checkout, else the one next to this kvrun (EXE/../golden: kvrun is
 * build/kvrun in a checkout), so a run from another folder still checks
 * against the store instead of silently falling back to live references. */
#include "runner/exec/driver.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool has_manifest(const char *dir) {
    char path[4200];
    struct stat sb;
    snprintf(path, sizeof path, "%s/MANIFEST", dir);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *kv_golden_dir_default(char *buf, size_t cap, FILE *err) {
    if (has_manifest(KV_DRIVER_DEFAULT_GOLDEN_DIR)) return KV_DRIVER_DEFAULT_GOLDEN_DIR;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL) *slash = '\0';
        snprintf(buf, cap, "%s/../%s", exe, KV_DRIVER_DEFAULT_GOLDEN_DIR);
        if (has_manifest(buf)) {
            if (err != NULL)
                fprintf(err, "kvrun: no ./%s/MANIFEST here: using the golden store next to this kvrun, %s\n",
                        KV_DRIVER_DEFAULT_GOLDEN_DIR, buf);
            return buf;
        }
    }
    if (err != NULL)
        fprintf(err,
                "kvrun: warning: no golden store: neither ./%s/MANIFEST nor %s/MANIFEST exists (run from the "
                "checkout or give --golden-dir=DIR); case lines are compared against live references (their "
                "golden rows say so), cases from files are ERROR rows\n",
                KV_DRIVER_DEFAULT_GOLDEN_DIR, n > 0 ? buf : "EXE/../golden");
    return KV_DRIVER_DEFAULT_GOLDEN_DIR;
}
