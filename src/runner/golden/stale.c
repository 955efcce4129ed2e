/* Temp files a killed --regen-golden left in a golden store (golden.h,
 * kv_golden_stale_temps): the store writes each file as .NAME.tmp.PID
 * next to it and renames it into place, so a kill between the two leaves
 * that name behind, which no later run would otherwise notice. */
#include "runner/golden/golden.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* ".MANIFEST.tmp.1234", ".f32_4x5.npy.tmp.1234": a dot, a name, ".tmp."
 * and the writer's PID, whose process is gone (a live one may be a
 * regeneration running now: its temp files are not stale). */
static bool kv_stale_name(const char *name) {
    if (name[0] != '.') return false;
    const char *t = strstr(name, ".tmp.");
    if (t == NULL || t == name) return false;
    char *end = NULL;
    errno = 0;
    const long pid = strtol(t + 5, &end, 10);
    if (end == t + 5 || *end != '\0' || errno != 0 || pid <= 0) return false;
    if (pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* The stale temp files directly in `dir`; removed when `remove`. */
static int kv_stale_in(const char *dir, bool remove, char *first, size_t cap, int depth) {
    DIR *d = opendir(dir);
    if (d == NULL) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char path[4096];
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        struct stat sb;
        if (lstat(path, &sb) != 0) continue;
        /* The store is one level of op folders: no deeper walk. */
        if (S_ISDIR(sb.st_mode)) {
            if (depth == 0 && e->d_name[0] != '.') n += kv_stale_in(path, remove, first, cap, 1);
            continue;
        }
        if (!S_ISREG(sb.st_mode) || !kv_stale_name(e->d_name)) continue;
        if (remove && unlink(path) != 0) continue;
        if (n == 0 && first != NULL && cap > 0 && first[0] == '\0') snprintf(first, cap, "%s", path);
        n++;
    }
    closedir(d);
    return n;
}

int kv_golden_stale_temps(const char *dir, bool remove, char *first, size_t cap) {
    if (first != NULL && cap > 0) first[0] = '\0';
    if (dir == NULL) return 0;
    return kv_stale_in(dir, remove, first, cap, 0);
}
