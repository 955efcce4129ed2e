/* results.jsonl and results.jsonl.gz read back line by line (jsonl_file.h). */
#include "runner/report/jsonl_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "runner/report/report_internal.h"

/* gzread's unit: large enough that a 40 MB file is a few hundred reads. */
enum { KV_JSONL_CHUNK = 1 << 16 };

char *kv_jsonl_path_in(const char *dir) {
    char *gz = kv_report_path_in(dir, KV_REPORT_JSONL_GZ);
    if (gz == NULL || access(gz, F_OK) == 0) return gz;
    free(gz);
    return kv_report_path_in(dir, KV_REPORT_JSONL);
}

kv_status kv_jsonl_open(kv_jsonl_reader *r, const char *path, const char *who) {
    memset(r, 0, sizeof *r);
    r->who = who;
    if ((r->path = strdup(path)) == NULL || (r->buf = malloc(KV_JSONL_CHUNK)) == NULL) {
        kv_jsonl_close(r);
        return kv_error(KV_ERR_OOM, "%s%s'%s': out of memory", who, who[0] ? ": " : "", path);
    }
    errno = 0;
    r->gz = gzopen(path, "rb");
    if (r->gz == NULL) {
        const int e = errno;
        kv_jsonl_close(r);
        return kv_error(KV_ERR_INVALID_ARG, "%s%scannot read '%s': %s", who, who[0] ? ": " : "", path,
                        e ? strerror(e) : "out of memory");
    }
    gzbuffer(r->gz, KV_JSONL_CHUNK);
    return KV_OK;
}

static kv_status kv_jsonl_read_error(kv_jsonl_reader *r) {
    int zerr = Z_OK;
    const char *msg = gzerror(r->gz, &zerr);
    if (zerr == Z_ERRNO) msg = strerror(errno);
    if (zerr == Z_BUF_ERROR)
        return kv_error(KV_ERR_INVALID_ARG, "%s%s'%s': the gzip stream ends inside line %lld (a truncated file?)",
                        r->who, r->who[0] ? ": " : "", r->path, (long long)r->lineno + 1);
    return kv_error(KV_ERR_INVALID_ARG, "%s%s'%s': reading line %lld failed: %s", r->who, r->who[0] ? ": " : "", r->path,
                    (long long)r->lineno + 1, msg && msg[0] ? msg : "read error");
}

static bool kv_jsonl_grow(kv_jsonl_reader *r, size_t need) {
    if (need <= r->cap) return true;
    size_t cap = r->cap ? r->cap : 4096;
    while (cap < need) cap *= 2;
    char *p = realloc(r->line, cap);
    if (p == NULL) return false;
    r->line = p;
    r->cap = cap;
    return true;
}

int64_t kv_jsonl_next(kv_jsonl_reader *r) {
    size_t len = 0;
    bool newline = false;
    while (!newline) {
        if (r->pos == r->end) {
            const int n = gzread(r->gz, r->buf, KV_JSONL_CHUNK);
            int zerr = Z_OK;
            /* A cut stream reads as an end of file that leaves Z_BUF_ERROR
             * behind (zlib.h, gzread): the end of a file being written. */
            if (n == 0) gzerror(r->gz, &zerr);
            if (n < 0 || zerr != Z_OK) {
                kv_jsonl_read_error(r);
                return -2;
            }
            r->pos = 0;
            r->end = (size_t)n;
            if (n == 0) break;
        }
        const unsigned char *at = r->buf + r->pos;
        const unsigned char *nl = memchr(at, '\n', r->end - r->pos);
        const size_t take = nl ? (size_t)(nl - at) + 1 : r->end - r->pos;
        if (!kv_jsonl_grow(r, len + take + 1)) {
            kv_error(KV_ERR_OOM, "%s%s'%s': out of memory for line %lld", r->who, r->who[0] ? ": " : "", r->path,
                     (long long)r->lineno + 1);
            return -2;
        }
        memcpy(r->line + len, at, take);
        len += take;
        r->pos += take;
        newline = nl != NULL;
    }
    if (len == 0) return -1;
    r->lineno++;
    r->off = r->next_off;
    r->next_off += (int64_t)len;
    r->cut = !newline;
    if (newline) len--;
    r->line[len] = '\0';
    return (int64_t)len;
}

kv_status kv_jsonl_seek(kv_jsonl_reader *r, int64_t off) {
    if (gzseek(r->gz, (z_off_t)off, SEEK_SET) != (z_off_t)off) return kv_jsonl_read_error(r);
    r->pos = r->end = 0;
    r->off = r->next_off = off;
    return KV_OK;
}

void kv_jsonl_close(kv_jsonl_reader *r) {
    if (r->gz != NULL) gzclose_r(r->gz);
    free(r->path);
    free(r->line);
    free(r->buf);
    memset(r, 0, sizeof *r);
}
