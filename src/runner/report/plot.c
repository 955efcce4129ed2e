/* gnuplot as a child process behind plot.h: the batch's script goes to a
 * file, gnuplot runs on it with its output to a file too (no pipe to
 * deadlock on), and the parent waits with a deadline. */
#include "runner/report/plot.h"
#include "runner/report/report_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct kv_plot_batch {
    char dir[256];
    char *script;
    size_t len;
    FILE *mem;
    int n;
    bool ran, ok;
    char problem[512];
};

kv_plot_batch *kv_plot_batch_new(void) {
    kv_plot_batch *b = calloc(1, sizeof *b);
    if (b == NULL) {
        kv_error(KV_ERR_OOM, "plots: out of memory");
        return NULL;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(b->dir, sizeof b->dir, "%s/kvplot.XXXXXX", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp");
    b->mem = open_memstream(&b->script, &b->len);
    if (b->mem == NULL) {
        free(b);
        kv_error(KV_ERR_OOM, "plots: out of memory");
        return NULL;
    }
    /* Without a folder there are no plots, and each place says why. */
    if (mkdtemp(b->dir) == NULL) {
        snprintf(b->problem, sizeof b->problem, "no temporary folder for gnuplot's output (%s: %s), so this plot was not drawn",
                 b->dir, strerror(errno));
        b->ran = true;
    }
    return b;
}

void kv_plot_put_string(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        /* A line break would end the command. */
        fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    }
    fputc('\'', f);
}

int kv_plot_add(kv_plot_batch *b, int w, int h, const char *script) {
    const int k = b->n++;
    /* reset: nothing of the previous plot carries over; the terminal and
     * output are set after it (reset leaves them alone anyway). */
    fprintf(b->mem,
            "reset\nset encoding utf8\nset terminal svg size %d,%d fixed noenhanced font 'sans,11' background "
            "rgb 'white'\nset output '%s/p%d.svg'\n%s\nunset output\n",
            w, h, b->dir, k, script);
    return k;
}

static double plot_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The first line of gnuplot's messages, for the reason. */
static void plot_first_line(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[400];
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        /* gnuplot echoes the failing command and a caret line first. */
        const bool error_line = strstr(line, "line ") != NULL || strstr(line, "rror") != NULL;
        if (error_line || buf[0] == '\0') {
            const size_t n = strnlen(line, cap - 1);
            memcpy(buf, line, n);
            buf[n] = '\0';
        }
        if (error_line) break;
    }
    fclose(f);
}

/* Whether `name` is an executable file in a PATH folder. */
static bool plot_on_path(const char *name) {
    const char *path = getenv("PATH");
    if (path == NULL) return false;
    while (*path) {
        const size_t n = strcspn(path, ":");
        char full[1024];
        snprintf(full, sizeof full, "%.*s/%s", (int)n, path, name);
        if (n > 0 && access(full, X_OK) == 0) return true;
        path += n + (path[n] == ':');
    }
    return false;
}

bool kv_plot_run(kv_plot_batch *b) {
    if (b->ran) return b->ok;
    b->ran = true;
    fflush(b->mem);
    if (b->n == 0) return b->ok = true;
    if (!plot_on_path("gnuplot")) {
        snprintf(b->problem, sizeof b->problem,
                 "gnuplot is not installed (not found on PATH; Debian: apt-get install gnuplot-nox), so this plot "
                 "was not drawn");
        return false;
    }
    char sp[300], ep[300];
    snprintf(sp, sizeof sp, "%s/plots.gp", b->dir);
    snprintf(ep, sizeof ep, "%s/gnuplot.err", b->dir);
    FILE *f = fopen(sp, "w");
    if (f == NULL || fwrite(b->script, 1, b->len, f) != b->len) {
        snprintf(b->problem, sizeof b->problem, "the plot script could not be written to %s: %s", sp, strerror(errno));
        if (f != NULL) fclose(f);
        return false;
    }
    fclose(f);
    const pid_t pid = fork();
    if (pid < 0) {
        snprintf(b->problem, sizeof b->problem, "gnuplot could not be started: fork: %s", strerror(errno));
        return false;
    }
    if (pid == 0) {
        const int fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        const int null = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (null >= 0) dup2(null, 0);
        execlp("gnuplot", "gnuplot", sp, (char *)NULL);
        _exit(127);
    }
    const double deadline = plot_now() + KV_PLOT_TIMEOUT_SECONDS;
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, WNOHANG)) == 0 && plot_now() < deadline) {
        const struct timespec pause = { 0, 5 * 1000 * 1000 };
        nanosleep(&pause, NULL);
    }
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        snprintf(b->problem, sizeof b->problem, "gnuplot did not finish within %g s and was stopped, so this plot was not drawn",
                 KV_PLOT_TIMEOUT_SECONDS);
        return false;
    }
    if (got < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char first[300];
        plot_first_line(ep, first, sizeof first);
        if (got >= 0 && WIFSIGNALED(status))
            snprintf(b->problem, sizeof b->problem, "gnuplot died on signal %d%s%s, so this plot was not drawn",
                     WTERMSIG(status), first[0] ? ": " : "", first);
        else
            snprintf(b->problem, sizeof b->problem, "gnuplot failed (exit status %d)%s%s, so this plot was not drawn",
                     got < 0 ? -1 : WEXITSTATUS(status), first[0] ? ": " : "", first);
        return false;
    }
    return b->ok = true;
}

void kv_plot_put(kv_plot_batch *b, int k, FILE *f) {
    char path[300];
    snprintf(path, sizeof path, "%s/p%d.svg", b->dir, k);
    FILE *in = b->ran && k >= 0 && k < b->n ? fopen(path, "r") : NULL;
    char *svg = NULL;
    size_t cap = 0, len = 0;
    if (in != NULL) {
        char buf[8192];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0) {
            if (len + got + 1 > cap) {
                cap = (len + got + 1) * 2;
                char *ns = realloc(svg, cap);
                if (ns == NULL) break;
                svg = ns;
            }
            memcpy(svg + len, buf, got);
            len += got;
        }
        fclose(in);
        if (svg != NULL) svg[len] = '\0';
    }
    const char *start = svg != NULL ? strstr(svg, "<svg") : NULL;
    if (start != NULL && strstr(start, "</svg>") != NULL) {
        fputs(start, f);
    } else {
        fputs("<p class=\"noplot\">", f);
        kv_report_put_escaped(f, b->problem[0] ? b->problem : "gnuplot drew nothing for this plot", false);
        fputs("</p>\n", f);
    }
    free(svg);
}

const char *kv_plot_problem(const kv_plot_batch *b) { return b->problem; }

void kv_plot_batch_free(kv_plot_batch *b) {
    if (b == NULL) return;
    if (b->mem != NULL) fclose(b->mem);
    free(b->script);
    char path[300];
    for (int k = 0; k < b->n; k++) {
        snprintf(path, sizeof path, "%s/p%d.svg", b->dir, k);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/plots.gp", b->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/gnuplot.err", b->dir);
    unlink(path);
    rmdir(b->dir);
    free(b);
}
