/* Which source counts a --perf-metric=instructions run, and the callgrind
 * re-execution (runner/exec/perf.h, kv_perf_icount_prepare). */
#include "runner/exec/perf.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runner/exec/icount.h"

/* The first executable NAME on PATH, into buf; false when none. */
static bool icount_find_on_path(const char *name, char *buf, size_t cap) {
    const char *path = getenv("PATH");
    if (path == NULL || path[0] == '\0') return false;
    while (*path) {
        const size_t len = strcspn(path, ":");
        /* An empty PATH entry is the working directory (POSIX). */
        const int n = len ? snprintf(buf, cap, "%.*s/%s", (int)len, path, name) : snprintf(buf, cap, "./%s", name);
        if (n > 0 && (size_t)n < cap && access(buf, X_OK) == 0) return true;
        path += len;
        if (*path == ':') path++;
    }
    return false;
}

/* Removes the dumps' folder (only files of its own, never nested). */
static void icount_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char path[4200];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Runs this kvrun again under callgrind with the same arguments and
 * returns its exit code. */
static int icount_run_callgrind(const char *valgrind, char *const *argv, FILE *err) {
    const char *tmp = getenv("TMPDIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/kv-icount.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(err, "kvrun: --perf-metric=instructions: cannot make a folder for callgrind's dumps (%s): %s\n", dir,
                strerror(errno));
        return 2;
    }
    char out[4200], exe[4096], outopt[4300], started[4300];
    snprintf(out, sizeof out, "%s/cg.out", dir);
    snprintf(outopt, sizeof outopt, "--callgrind-out-file=%s", out);
    snprintf(started, sizeof started, "%s.started", out);
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(err, "kvrun: --perf-metric=instructions: cannot find this program (/proc/self/exe): %s\n",
                strerror(errno));
        icount_remove_dir(dir);
        return 2;
    }
    exe[n] = '\0';
    int argc = 0;
    while (argv[argc] != NULL) argc++;
    static const char *const vg_args[] = { "-q", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=yes" };
    const int nvg = (int)(sizeof vg_args / sizeof vg_args[0]);
    char **args = calloc((size_t)(argc + nvg + 4), sizeof *args);
    if (args == NULL) {
        fprintf(err, "kvrun: out of memory\n");
        icount_remove_dir(dir);
        return 2;
    }
    int k = 0;
    args[k++] = (char *)valgrind;
    for (int i = 0; i < nvg; i++) args[k++] = (char *)vg_args[i];
    args[k++] = outopt;
    args[k++] = exe;
    for (int i = 1; i < argc; i++) args[k++] = argv[i];
    args[k] = NULL;
    fflush(stdout);
    fflush(err);
    int rc = 2;
    const pid_t pid = setenv(KV_ICOUNT_CALLGRIND_ENV, out, 1) == 0 ? fork() : -1;
    if (pid == 0) {
        execv(valgrind, args);
        fprintf(stderr, "kvrun: --perf-metric=instructions: cannot run %s: %s\n", valgrind, strerror(errno));
        _exit(127);
    }
    int status = 0;
    if (pid < 0) {
        fprintf(err, "kvrun: --perf-metric=instructions: cannot start %s: %s\n", valgrind, strerror(errno));
    } else if (waitpid(pid, &status, 0) < 0) {
        fprintf(err, "kvrun: --perf-metric=instructions: waiting for %s: %s\n", valgrind, strerror(errno));
    } else if (access(started, F_OK) != 0) {
        /* Valgrind itself failed (no callgrind tool, a bad option): its
         * message is above. */
        fprintf(err, "kvrun: --perf-metric=instructions: %s --tool=callgrind did not start kvrun (%s %d)\n", valgrind,
                WIFEXITED(status) ? "exit" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    } else if (WIFEXITED(status)) {
        rc = WEXITSTATUS(status);
    } else {
        fprintf(err, "kvrun: --perf-metric=instructions: the run under callgrind ended by signal %d\n",
                WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        rc = 1;
    }
    unsetenv(KV_ICOUNT_CALLGRIND_ENV);
    free(args);
    icount_remove_dir(dir);
    return rc;
}

int kv_perf_icount_prepare(kv_perf_options *o, char *const *argv, FILE *err) {
    kv_icount c;
    if (getenv(KV_ICOUNT_CALLGRIND_ENV) != NULL) {
        /* The run kvrun started under callgrind (or a user who set the
         * variable by hand, which the check refuses unless under it). */
        if (kv_icount_open(&c, KV_ICOUNT_CALLGRIND) != KV_OK) {
            fprintf(err, "kvrun: --perf-metric=instructions: %s\n", kv_last_error_message());
            return 2;
        }
        char started[sizeof c.out + 16];
        snprintf(started, sizeof started, "%s.started", c.out);
        FILE *f = fopen(started, "w");
        if (f != NULL) fclose(f);
        kv_icount_close(&c);
        o->counter = KV_ICOUNT_CALLGRIND;
        return -1;
    }
    char hw_why[1024] = "";
    if (o->counter != KV_ICOUNT_CALLGRIND) {
        if (kv_icount_open(&c, KV_ICOUNT_HARDWARE) == KV_OK) {
            kv_icount_close(&c);
            o->counter = KV_ICOUNT_HARDWARE;
            return -1;
        }
        snprintf(hw_why, sizeof hw_why, "%s", kv_last_error_message());
        if (o->counter == KV_ICOUNT_HARDWARE) {
            fprintf(err, "kvrun: --perf-metric=instructions:hardware: %s\n", hw_why);
            return 2;
        }
    }
    char valgrind[4096];
    if (!icount_find_on_path("valgrind", valgrind, sizeof valgrind)) {
        fprintf(err, "kvrun: --perf-metric=instructions%s: %s%scallgrind cannot count%s: valgrind is not on PATH "
                     "(Debian: apt-get install valgrind)\n",
                o->counter == KV_ICOUNT_CALLGRIND ? ":callgrind" : "", hw_why, hw_why[0] ? "; " : "",
                hw_why[0] ? " either" : "");
        return 2;
    }
    if (hw_why[0])
        fprintf(err, "kvrun: --perf-metric=instructions: %s; counting under callgrind instead (%s "
                     "--tool=callgrind, many times slower)\n",
                hw_why, valgrind);
    return icount_run_callgrind(valgrind, argv, err);
}
