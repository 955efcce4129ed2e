/* Instruction counts per call (runner/exec/icount.h): the hardware
 * counter and callgrind's dumps. */
/* syscall() (perf_event_open has no libc wrapper) is not POSIX. */
#define _DEFAULT_SOURCE
#include "runner/exec/icount.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#endif
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define KV_ICOUNT_HAVE_CALLGRIND 1
#endif
#endif

const char *kv_icount_source_name(kv_icount_source s) {
    switch (s) {
    case KV_ICOUNT_AUTO: return "auto";
    case KV_ICOUNT_HARDWARE: return "hardware";
    case KV_ICOUNT_CALLGRIND: return "callgrind";
    }
    return "?";
}

int kv_icount_source_parse(const char *s, kv_icount_source *out) {
    static const kv_icount_source all[] = { KV_ICOUNT_AUTO, KV_ICOUNT_HARDWARE, KV_ICOUNT_CALLGRIND };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(s, kv_icount_source_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return -1;
}

/* What an errno of perf_event_open means here, for the error. */
static const char *icount_hw_why(int err, char *buf, size_t cap) {
    switch (err) {
    case EACCES:
    case EPERM: {
        char level[32] = "unreadable";
        FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
        if (f != NULL) {
            if (fgets(level, sizeof level, f) != NULL) level[strcspn(level, "\n")] = '\0';
            fclose(f);
        }
        snprintf(buf, cap, "not permitted: /proc/sys/kernel/perf_event_paranoid is %s (counting this process's "
                           "user-space instructions needs 2 or less, or CAP_PERFMON)", level);
        return buf;
    }
    case ENOENT:
    case ENODEV:
    case EOPNOTSUPP:
        /* What a VM without a virtual PMU answers (`perf stat` prints
         * "<not supported>"). */
        return "this CPU or virtual machine exposes no retired-instruction counter";
    case ENOSYS: return "the kernel has no perf_event_open";
    default: return "the counter cannot be opened";
    }
}

static kv_status icount_open_hardware(kv_icount *c) {
#ifdef __linux__
    struct perf_event_attr pe;
    memset(&pe, 0, sizeof pe);
    pe.type = PERF_TYPE_HARDWARE;
    pe.size = sizeof pe;
    pe.config = PERF_COUNT_HW_INSTRUCTIONS;
    pe.disabled = 1;
    pe.exclude_kernel = 1;
    pe.exclude_hv = 1;
    pe.inherit = 1; /* threads the call starts count too (summed when they exit) */
    const long fd = syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0);
    if (fd < 0) {
        const int err = errno;
        char buf[256];
        return kv_error(KV_ERR_INVALID_ARG, "the hardware instruction counter: %s (perf_event_open: %s)",
                        icount_hw_why(err, buf, sizeof buf), strerror(err));
    }
    c->fd = (int)fd;
    c->source = KV_ICOUNT_HARDWARE;
    /* A counter that opens but counts nothing (some hypervisors) would
     * report every call as free: tried once on a loop. */
    kv_icount_start(c);
    volatile unsigned sink = 0;
    for (unsigned i = 0; i < 1000; i++) sink += i;
    uint64_t n = 0;
    const kv_status st = kv_icount_stop(c, &n);
    if (st != KV_OK) {
        kv_icount_close(c);
        return st;
    }
    if (n == 0) {
        kv_icount_close(c);
        return kv_error(KV_ERR_INVALID_ARG, "the hardware instruction counter opened but counted 0 instructions of a "
                                            "1000-step loop: this CPU or virtual machine does not count");
    }
    return KV_OK;
#else
    (void)c;
    return kv_error(KV_ERR_INVALID_ARG, "the hardware instruction counter: perf_event_open is Linux's");
#endif
}

static kv_status icount_open_callgrind(kv_icount *c) {
    const char *out = getenv(KV_ICOUNT_CALLGRIND_ENV);
#ifdef KV_ICOUNT_HAVE_CALLGRIND
    const bool on_valgrind = RUNNING_ON_VALGRIND;
#else
    const bool on_valgrind = false;
#endif
    if (out == NULL || out[0] == '\0' || !on_valgrind)
        return kv_error(KV_ERR_INVALID_ARG,
                        "callgrind counts only a kvrun it runs: %s (kvrun --perf-metric=instructions starts it "
                        "itself)",
#ifdef KV_ICOUNT_HAVE_CALLGRIND
                        out == NULL ? KV_ICOUNT_CALLGRIND_ENV " is not set"
                        : out[0] == '\0' ? KV_ICOUNT_CALLGRIND_ENV " is empty"
                                         : "this process does not run under Valgrind"
#else
                        "kvsuite was built without Valgrind's headers (valgrind/callgrind.h)"
#endif
        );
    if (strlen(out) >= sizeof c->out)
        return kv_error(KV_ERR_INVALID_ARG, "%s: the path is longer than %zu bytes", KV_ICOUNT_CALLGRIND_ENV,
                        sizeof c->out - 1);
    snprintf(c->out, sizeof c->out, "%s", out);
    c->source = KV_ICOUNT_CALLGRIND;
    c->dumps = 0;
    return KV_OK;
}

kv_status kv_icount_open(kv_icount *c, kv_icount_source source) {
    memset(c, 0, sizeof *c);
    c->fd = -1;
    switch (source) {
    case KV_ICOUNT_HARDWARE: return icount_open_hardware(c);
    case KV_ICOUNT_CALLGRIND: return icount_open_callgrind(c);
    case KV_ICOUNT_AUTO: break;
    }
    return kv_error(KV_ERR_INTERNAL, "kv_icount_open: no source chosen (auto is kvrun's to resolve)");
}

void kv_icount_start(kv_icount *c) {
    switch (c->source) {
    case KV_ICOUNT_HARDWARE:
#ifdef __linux__
        ioctl(c->fd, PERF_EVENT_IOC_RESET, 0);
        ioctl(c->fd, PERF_EVENT_IOC_ENABLE, 0);
#endif
        return;
    case KV_ICOUNT_CALLGRIND:
#ifdef KV_ICOUNT_HAVE_CALLGRIND
        /* Instrumenting only the call keeps the rest of the run at
         * Valgrind's uninstrumented speed (the switch discards the
         * translations, which costs time, not counted instructions). */
        CALLGRIND_START_INSTRUMENTATION;
        CALLGRIND_ZERO_STATS;
#endif
        return;
    case KV_ICOUNT_AUTO: return;
    }
}

kv_status kv_icount_stop(kv_icount *c, uint64_t *count) {
    *count = 0;
    switch (c->source) {
    case KV_ICOUNT_HARDWARE: {
#ifdef __linux__
        ioctl(c->fd, PERF_EVENT_IOC_DISABLE, 0);
        uint64_t v = 0;
        if (read(c->fd, &v, sizeof v) != (ssize_t)sizeof v)
            return kv_error(KV_ERR_INVALID_ARG, "the hardware instruction counter cannot be read: %s",
                            strerror(errno));
        *count = v;
#endif
        return KV_OK;
    }
    case KV_ICOUNT_CALLGRIND: {
#ifdef KV_ICOUNT_HAVE_CALLGRIND
        CALLGRIND_STOP_INSTRUMENTATION;
        CALLGRIND_DUMP_STATS_AT("kvrun perf: one call");
#endif
        char path[sizeof c->out + 16];
        snprintf(path, sizeof path, "%s.%d", c->out, ++c->dumps);
        const kv_status st = kv_icount_read_dump(path, count);
        if (st != KV_OK) return st;
        unlink(path);
        return KV_OK;
    }
    case KV_ICOUNT_AUTO: break;
    }
    return kv_error(KV_ERR_INTERNAL, "kv_icount_stop: the counter is not open");
}

void kv_icount_close(kv_icount *c) {
    if (c->source == KV_ICOUNT_HARDWARE && c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->source = KV_ICOUNT_AUTO;
}

/* A "KEY: N" line's N, when the line starts with key. */
static bool icount_line_count(const char *line, const char *key, uint64_t *out) {
    const size_t n = strlen(key);
    if (strncmp(line, key, n) != 0) return false;
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(line + n, &end, 10);
    if (end == line + n || errno != 0 || (*end != '\0' && *end != '\n')) return false;
    *out = v;
    return true;
}

kv_status kv_icount_read_dump(const char *path, uint64_t *count) {
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "callgrind wrote no dump '%s' (%s): is the tool callgrind "
                                            "(valgrind --tool=callgrind)?", path, strerror(errno));
    char line[512];
    bool have_totals = false, have_summary = false, first = true, callgrind = false;
    uint64_t totals = 0, summary = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        if (first) callgrind = strncmp(line, "# callgrind format", 18) == 0;
        first = false;
        have_totals |= icount_line_count(line, "totals: ", &totals);
        have_summary |= icount_line_count(line, "summary: ", &summary);
    }
    fclose(f);
    if (!callgrind) return kv_error(KV_ERR_INVALID_ARG, "'%s': not a callgrind dump (no '# callgrind format' line)", path);
    /* Valgrind 3.19 writes "summary: 0" in a dump made by a client
     * request and the real count on the "totals:" line. */
    if (have_totals) *count = totals;
    else if (have_summary) *count = summary;
    else return kv_error(KV_ERR_INVALID_ARG, "'%s': a callgrind dump without a 'totals:' line of one count", path);
    return KV_OK;
}
