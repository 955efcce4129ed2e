/* Writing generated files only when their text changed: build.ninja's
 * kvgen rule uses restat, so an unchanged file keeps its mtime and
 * nothing that includes it is rebuilt. */
#include "tools/kvgen/kvgen.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Whether `path` holds exactly `len` bytes equal to `data`. */
static bool same_content(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    bool same = true;
    char chunk[8192];
    size_t off = 0;
    for (;;) {
        size_t got = fread(chunk, 1, sizeof chunk, f);
        if (got == 0) break;
        if (off + got > len || memcmp(chunk, data + off, got) != 0) {
            same = false;
            break;
        }
        off += got;
    }
    if (ferror(f) || off != len) same = false;
    fclose(f);
    return same;
}

/* mkdir -p of every folder above `path`. */
static kv_status make_parents(const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return kv_error(KV_ERR_INVALID_ARG, "%s: path too long", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return kv_error(KV_ERR_INVALID_ARG, "%s: cannot create folder: %s", dir, strerror(errno));
        *p = '/';
    }
    return KV_OK;
}

kv_status kv_gen_write_if_changed(const char *path, const kv_gen_buf *b, bool *written) {
    if (written) *written = false;
    const char *data = kv_gen_buf_str(b);
    if (same_content(path, data, b->len)) return KV_OK;
    kv_status st = make_parents(path);
    if (st != KV_OK) return st;
    /* Through a temporary and rename, so a reader (or an interrupted run)
     * never sees half a file. */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return kv_error(KV_ERR_INVALID_ARG, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot write: %s", tmp, strerror(errno));
    bool ok = fwrite(data, 1, b->len, f) == b->len;
    int err = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        remove(tmp);
        return kv_error(KV_ERR_INVALID_ARG, "%s: cannot write: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        return kv_error(KV_ERR_INVALID_ARG, "%s: cannot replace: %s", path, strerror(err));
    }
    if (written) *written = true;
    return KV_OK;
}
