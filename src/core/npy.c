/* .npy reading and writing (format described in kv/npy.h). */
#include "kv/npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Element bytes are copied as they sit in memory; the format is
 * little-endian, so a big-endian host would need byte swapping that
 * nothing here does. Fail the build rather than write wrong files. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "kv npy I/O assumes a little-endian host");

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
/* Gather buffer for non-contiguous tensors: large enough that the
 * callback cost is amortized, small enough for the stack. */
#define NPY_GATHER_BYTES 4096

static const char *const descr_of[KV_DTYPE_COUNT] = {
    [KV_BOOL] = "|b1", [KV_U8] = "|u1",  [KV_I8] = "|i1",  [KV_I16] = "<i2",
    [KV_I32] = "<i4",  [KV_I64] = "<i8", [KV_F16] = "<f2", [KV_BF16] = "<u2",
    [KV_F32] = "<f4",  [KV_F64] = "<f8", [KV_C64] = "<c8", [KV_C128] = "<c16",
};

const char *kv_npy_descr(kv_dtype dt) {
    if ((int)dt < 0 || dt >= KV_DTYPE_COUNT) return NULL;
    return descr_of[dt];
}

/* The dtype a descr names, or -1. numpy writes '|' for one-byte types but
 * reads '<' for them too, so both spellings are accepted. */
static int descr_lookup(const char *d) {
    for (int i = 0; i < (int)KV_DTYPE_COUNT; i++) {
        if (strcmp(d, descr_of[i]) == 0) return i;
    }
    if (strcmp(d, "<b1") == 0) return KV_BOOL;
    if (strcmp(d, "<u1") == 0) return KV_U8;
    if (strcmp(d, "<i1") == 0) return KV_I8;
    return -1;
}

__attribute__((format(printf, 2, 3)))
static kv_status npy_fail(const char *name, const char *fmt, ...) {
    char reason[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return kv_error(KV_ERR_INVALID_ARG, "%s: %s", name ? name : "<npy>", reason);
}

static bool has_lazy_bit(const kv_tensor *t) {
    return kv_keyset_has(t->keys, KV_KEY_CONJUGATE) || kv_keyset_has(t->keys, KV_KEY_NEGATIVE) ||
           kv_keyset_has(t->keys, KV_KEY_ZERO_TENSOR);
}

/* ---- header text ---- */

/* Appends like snprintf into buf[*len..cap), always advancing *len by the
 * full length so the caller learns the size it needs. */
__attribute__((format(printf, 4, 5)))
static void append(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = (buf && *len < cap) ? buf + *len : NULL;
    size_t room = (buf && *len < cap) ? cap - *len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) *len += (size_t)n;
}

long kv_npy_format_header(kv_dtype dtype, const int64_t *sizes, int ndim, char *buf, size_t cap) {
    const char *descr = kv_npy_descr(dtype);
    if (descr == NULL) {
        kv_error(KV_ERR_DTYPE, "npy: argument 'dtype': unknown dtype %d", (int)dtype);
        return -1;
    }
    if (ndim < 0 || ndim > KV_MAX_DIMS || (ndim > 0 && sizes == NULL)) {
        kv_error(KV_ERR_INVALID_ARG, "npy: argument 'ndim': %d is outside 0..%d", ndim, KV_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < ndim; i++) {
        if (sizes[i] < 0) {
            kv_error(KV_ERR_NEGATIVE_SIZE, "npy: argument 'sizes': dimension %d is negative (%lld)", i,
                     (long long)sizes[i]);
            return -1;
        }
    }
    /* The dict is built after the preamble's 10 bytes; its text is what
     * Python's repr gives for the dict numpy writes (keys sorted). */
    char dict[512];
    size_t dlen = 0;
    append(dict, sizeof dict, &dlen, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < ndim; i++) {
        append(dict, sizeof dict, &dlen, i ? ", %lld" : "%lld", (long long)sizes[i]);
    }
    append(dict, sizeof dict, &dlen, ndim == 1 ? ",), }" : "), }");
    size_t unpadded = NPY_MAGIC_LEN + 2 + 2 + dlen + 1;
    size_t pad = (NPY_ALIGN - unpadded % NPY_ALIGN) % NPY_ALIGN;
    size_t total = unpadded + pad;
    size_t hlen = total - (NPY_MAGIC_LEN + 4);
    if (buf && cap >= total) {
        memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
        buf[6] = 1;
        buf[7] = 0;
        buf[8] = (char)(hlen & 0xff);
        buf[9] = (char)(hlen >> 8);
        memcpy(buf + 10, dict, dlen);
        memset(buf + 10 + dlen, ' ', pad);
        buf[total - 1] = '\n';
    }
    return (long)total;
}

/* ---- row-major traversal ---- */

typedef struct gather {
    unsigned char buf[NPY_GATHER_BYTES];
    size_t fill;
    kv_npy_visit_fn fn;
    void *ctx;
} gather;

static int gather_flush(gather *g) {
    if (g->fill == 0) return 0;
    int r = g->fn(g->ctx, g->buf, g->fill);
    g->fill = 0;
    return r;
}

static int gather_put(gather *g, const unsigned char *p, size_t n) {
    while (n > 0) {
        size_t take = sizeof g->buf - g->fill;
        if (take > n) take = n;
        memcpy(g->buf + g->fill, p, take);
        g->fill += take;
        p += take;
        n -= take;
        if (g->fill == sizeof g->buf) {
            int r = gather_flush(g);
            if (r) return r;
        }
    }
    return 0;
}

int kv_npy_visit(const kv_tensor *t, kv_npy_visit_fn fn, void *ctx) {
    if (t == NULL || fn == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "npy: argument 'tensor': NULL");
        return -1;
    }
    if (has_lazy_bit(t)) {
        kv_error(KV_ERR_INVALID_ARG,
                 "npy: argument 'tensor': carries a lazy bit (conj/neg/zero); resolve it before writing");
        return -1;
    }
    size_t esize = kv_dtype_size(t->dtype);
    if (kv_npy_descr(t->dtype) == NULL || esize == 0) {
        kv_error(KV_ERR_DTYPE, "npy: argument 'tensor': unknown dtype %d", (int)t->dtype);
        return -1;
    }
    if (kv_tensor_numel(t) == 0) return 0;
    const unsigned char *base = kv_tensor_data(t);
    if (base == NULL) {
        kv_error(KV_ERR_DEVICE, "npy: argument 'tensor': lives on %s:%d, which the host cannot read",
                 kv_device_type_name(t->device.type), t->device.index);
        return -1;
    }
    /* Drop size-1 dims and merge dims that are contiguous with the next,
     * so a contiguous tensor becomes one run whatever its shape. */
    int64_t sz[KV_MAX_DIMS], st[KV_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->sizes[i] == 1) continue;
        if (nd > 0 && st[nd - 1] == t->sizes[i] * t->strides[i]) {
            sz[nd - 1] *= t->sizes[i];
            st[nd - 1] = t->strides[i];
        } else {
            sz[nd] = t->sizes[i];
            st[nd] = t->strides[i];
            nd++;
        }
    }
    if (nd == 0) return fn(ctx, base, esize);
    if (nd == 1 && st[0] == 1) return fn(ctx, base, (size_t)sz[0] * esize);

    /* The innermost dim is a contiguous run when its stride is 1. */
    int64_t run = st[nd - 1] == 1 ? sz[nd - 1] : 1;
    int outer = st[nd - 1] == 1 ? nd - 1 : nd;
    gather *g = malloc(sizeof *g);
    if (g == NULL) {
        kv_error(KV_ERR_OOM, "npy: out of memory for the gather buffer");
        return -1;
    }
    g->fill = 0;
    g->fn = fn;
    g->ctx = ctx;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    int r = 0;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < outer; d++) off += idx[d] * st[d];
        r = gather_put(g, base + off * (int64_t)esize, (size_t)run * esize);
        if (r) break;
        int d = outer - 1;
        while (d >= 0 && ++idx[d] == sz[d]) idx[d--] = 0;
        if (d < 0) break;
    }
    if (r == 0) r = gather_flush(g);
    free(g);
    return r;
}

/* ---- writing ---- */

typedef struct membuf {
    unsigned char *p;
    size_t len;
} membuf;

static int membuf_put(void *ctx, const void *bytes, size_t n) {
    membuf *m = ctx;
    memcpy(m->p + m->len, bytes, n);
    m->len += n;
    return 0;
}

static kv_status check_writable(const kv_tensor *t, const char *what) {
    if (t == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: argument 'tensor': NULL", what);
    if (kv_npy_descr(t->dtype) == NULL)
        return kv_error(KV_ERR_DTYPE, "%s: argument 'tensor': unknown dtype %d", what, (int)t->dtype);
    return KV_OK;
}

kv_status kv_npy_encode(const kv_tensor *t, void **out, size_t *out_len) {
    if (out == NULL || out_len == NULL) return kv_error(KV_ERR_INVALID_ARG, "npy_encode: argument 'out': NULL");
    *out = NULL;
    *out_len = 0;
    kv_status s = check_writable(t, "npy_encode");
    if (s != KV_OK) return s;
    long hlen = kv_npy_format_header(t->dtype, t->sizes, t->ndim, NULL, 0);
    if (hlen < 0) return kv_last_error();
    size_t nbytes = (size_t)kv_tensor_numel(t) * kv_dtype_size(t->dtype);
    membuf m = { malloc((size_t)hlen + nbytes + 1), 0 };
    if (m.p == NULL) return kv_error(KV_ERR_OOM, "npy_encode: out of memory for %zu bytes", (size_t)hlen + nbytes);
    kv_npy_format_header(t->dtype, t->sizes, t->ndim, (char *)m.p, (size_t)hlen);
    m.len = (size_t)hlen;
    if (kv_npy_visit(t, membuf_put, &m) != 0) {
        free(m.p);
        return kv_last_error();
    }
    *out = m.p;
    *out_len = m.len;
    return KV_OK;
}

typedef struct filesink {
    FILE *f;
    int err;
} filesink;

static int filesink_put(void *ctx, const void *bytes, size_t n) {
    filesink *fs = ctx;
    if (fwrite(bytes, 1, n, fs->f) != n) {
        fs->err = errno ? errno : EIO;
        return 1;
    }
    return 0;
}

kv_status kv_npy_write(const char *path, const kv_tensor *t) {
    if (path == NULL) return kv_error(KV_ERR_INVALID_ARG, "npy_write: argument 'path': NULL");
    kv_status s = check_writable(t, "npy_write");
    if (s != KV_OK) return s;
    char header[1024];
    long hlen = kv_npy_format_header(t->dtype, t->sizes, t->ndim, header, sizeof header);
    if (hlen < 0) return kv_last_error();
    if ((size_t)hlen > sizeof header) return kv_error(KV_ERR_INTERNAL, "npy_write: header of %ld bytes", hlen);
    FILE *f = fopen(path, "wb");
    if (f == NULL) return npy_fail(path, "cannot open for writing: %s", strerror(errno));
    filesink fs = { f, 0 };
    errno = 0;
    int r = 0;
    if (fwrite(header, 1, (size_t)hlen, f) != (size_t)hlen) {
        fs.err = errno ? errno : EIO;
    } else {
        r = kv_npy_visit(t, filesink_put, &fs);
    }
    if (r < 0) {
        /* The tensor was refused (device, lazy bit); keep that error. */
        fclose(f);
        unlink(path);
        return kv_last_error();
    }
    if (fclose(f) != 0 && fs.err == 0) fs.err = errno ? errno : EIO;
    if (fs.err != 0) {
        unlink(path);
        return npy_fail(path, "write failed: %s", strerror(fs.err));
    }
    return KV_OK;
}

/* ---- parsing ---- */

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t')) c->p++;
}

static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A near-context snippet for syntax errors: the offending text up to 12
 * printable characters. */
static const char *near(const cursor *c, char *buf, size_t cap) {
    size_t n = 0;
    for (const char *q = c->p; q < c->end && n + 1 < cap && n < 12; q++) {
        buf[n++] = (*q >= 0x20 && *q < 0x7f) ? *q : '?';
    }
    buf[n] = '\0';
    return n ? buf : "end of header";
}

/* A Python string literal in single or double quotes, without escapes
 * (no key or descr numpy writes has any). */
static bool parse_string(cursor *c, char *out, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        char ch = *c->p;
        if (ch == '\\' || ch < 0x20 || ch >= 0x7f || n + 1 >= cap) return false;
        out[n++] = ch;
        c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    out[n] = '\0';
    return true;
}

static bool parse_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return false;
    const char *after = c->p + n;
    if (after < c->end && ((*after >= 'a' && *after <= 'z') || (*after >= 'A' && *after <= 'Z') ||
                           (*after >= '0' && *after <= '9') || *after == '_'))
        return false;
    c->p = after;
    return true;
}

/* Dims above this are refused outright; the size checks would reject them
 * anyway, but a bound keeps the arithmetic far from overflow. */
#define NPY_DIM_MAX ((int64_t)1 << 62)

static kv_status parse_shape(cursor *c, const char *name, kv_npy_info *info) {
    char nb[16];
    if (!eat(c, '(')) return npy_fail(name, "header: 'shape' is not a tuple (at '%s')", near(c, nb, sizeof nb));
    int n = 0;
    bool trailing_comma = false;
    for (;;) {
        skip_ws(c);
        if (eat(c, ')')) break;
        if (n > 0 && !trailing_comma)
            return npy_fail(name, "header: expected ',' or ')' in 'shape' (at '%s')", near(c, nb, sizeof nb));
        bool neg = false;
        if (c->p < c->end && *c->p == '-') {
            neg = true;
            c->p++;
        }
        if (c->p >= c->end || *c->p < '0' || *c->p > '9')
            return npy_fail(name, "header: expected an integer in 'shape' (at '%s')", near(c, nb, sizeof nb));
        if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
            return npy_fail(name, "header: integer with a leading zero in 'shape'");
        int64_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > NPY_DIM_MAX / 10)
                return npy_fail(name, "header: dimension %d of 'shape' is too large", n);
            v = v * 10 + (*c->p++ - '0');
        }
        if (v > NPY_DIM_MAX) return npy_fail(name, "header: dimension %d of 'shape' is too large", n);
        if (neg && v != 0)
            return npy_fail(name, "header: dimension %d of 'shape' is negative (-%lld)", n, (long long)v);
        if (n == KV_MAX_DIMS)
            return npy_fail(name, "header: 'shape' has more than %d dimensions", KV_MAX_DIMS);
        info->sizes[n++] = v;
        trailing_comma = eat(c, ',');
    }
    /* Python: (5) is an int, not a tuple; a 1-tuple needs its comma. */
    if (n == 1 && !trailing_comma) return npy_fail(name, "header: 'shape' (N) is not a tuple; write (N,)");
    info->ndim = n;
    return KV_OK;
}

static kv_status parse_dict(const char *text, size_t len, const char *name, kv_npy_info *info,
                            int *descr_dtype) {
    cursor c = { text, text + len };
    char nb[16];
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    if (!eat(&c, '{')) return npy_fail(name, "header: not a dict (at '%s')", near(&c, nb, sizeof nb));
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_string(&c, key, sizeof key))
            return npy_fail(name, "header: expected a quoted key (at '%s')", near(&c, nb, sizeof nb));
        if (!eat(&c, ':')) return npy_fail(name, "header: expected ':' after '%s'", key);
        kv_status s = KV_OK;
        if (strcmp(key, "descr") == 0) {
            if (seen_descr) return npy_fail(name, "header: duplicate key 'descr'");
            seen_descr = true;
            if (!parse_string(&c, info->descr, sizeof info->descr))
                return npy_fail(name, "header: 'descr' is not a short string (at '%s')", near(&c, nb, sizeof nb));
        } else if (strcmp(key, "fortran_order") == 0) {
            if (seen_fortran) return npy_fail(name, "header: duplicate key 'fortran_order'");
            seen_fortran = true;
            if (parse_word(&c, "True"))
                return npy_fail(name, "fortran_order True (column-major data) is not supported");
            if (!parse_word(&c, "False"))
                return npy_fail(name, "header: 'fortran_order' is not True or False (at '%s')",
                                near(&c, nb, sizeof nb));
        } else if (strcmp(key, "shape") == 0) {
            if (seen_shape) return npy_fail(name, "header: duplicate key 'shape'");
            seen_shape = true;
            s = parse_shape(&c, name, info);
        } else {
            return npy_fail(name, "header: unexpected key '%s'", key);
        }
        if (s != KV_OK) return s;
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        return npy_fail(name, "header: expected ',' or '}' (at '%s')", near(&c, nb, sizeof nb));
    }
    skip_ws(&c);
    if (c.p != c.end) return npy_fail(name, "header: unexpected text after the dict (at '%s')", near(&c, nb, sizeof nb));
    if (!seen_descr || !seen_fortran || !seen_shape)
        return npy_fail(name, "header: missing key '%s'",
                        !seen_descr ? "descr" : !seen_fortran ? "fortran_order" : "shape");
    *descr_dtype = descr_lookup(info->descr);
    if (*descr_dtype < 0) {
        if (info->descr[0] == '>')
            return npy_fail(name, "big-endian descr '%s' is not supported", info->descr);
        return npy_fail(name, "unknown descr '%s' (kvsuite reads |b1 |u1 |i1 <i2 <i4 <i8 <f2 <u2 <f4 <f8 <c8 <c16)",
                        info->descr);
    }
    return KV_OK;
}

kv_status kv_npy_parse(const void *buf, size_t len, kv_dtype expected, const char *name, kv_npy_info *info) {
    if (name == NULL) name = "<memory>";
    if (info == NULL) return kv_error(KV_ERR_INVALID_ARG, "npy_parse: argument 'info': NULL");
    memset(info, 0, sizeof *info);
    if ((int)expected < 0 || expected > KV_NPY_ANY_DTYPE)
        return kv_error(KV_ERR_DTYPE, "npy_parse: argument 'expected': unknown dtype %d", (int)expected);
    if (buf == NULL && len > 0) return kv_error(KV_ERR_INVALID_ARG, "npy_parse: argument 'buf': NULL");
    const unsigned char *b = buf;
    if (len < NPY_MAGIC_LEN || memcmp(b, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return npy_fail(name, "not a .npy file (bad magic)");
    if (len < NPY_MAGIC_LEN + 2) return npy_fail(name, "truncated before the version");
    info->version_major = b[6];
    info->version_minor = b[7];
    size_t pre;
    size_t hlen;
    if (b[6] == 1 && b[7] == 0) {
        pre = 10;
        if (len < pre) return npy_fail(name, "truncated before the header length");
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if (b[6] == 2 && b[7] == 0) {
        pre = 12;
        if (len < pre) return npy_fail(name, "truncated before the header length");
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        return npy_fail(name, "unsupported format version %d.%d (kvsuite reads 1.0 and 2.0)", b[6], b[7]);
    }
    if (hlen == 0) return npy_fail(name, "header length is 0");
    if (hlen > KV_NPY_MAX_HEADER)
        return npy_fail(name, "header length %zu exceeds the %d-byte limit", hlen, KV_NPY_MAX_HEADER);
    if (hlen > len - pre)
        return npy_fail(name, "header length %zu runs past the end of the file (%zu bytes)", hlen, len);
    const char *text = (const char *)b + pre;
    if (text[hlen - 1] != '\n') return npy_fail(name, "header does not end with a newline");
    for (size_t i = 0; i + 1 < hlen; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch != '\t' && (ch < 0x20 || ch >= 0x7f))
            return npy_fail(name, "header byte %zu is 0x%02x, not printable ASCII", i, ch);
    }
    int file_dtype = -1;
    kv_status s = parse_dict(text, hlen - 1, name, info, &file_dtype);
    if (s != KV_OK) return s;
    if (expected != KV_NPY_ANY_DTYPE && (kv_dtype)file_dtype != expected)
        return npy_fail(name, "dtype mismatch: file holds '%s' (%s), expected %s ('%s')", info->descr,
                        kv_dtype_name((kv_dtype)file_dtype), kv_dtype_name(expected), kv_npy_descr(expected));
    info->dtype = (kv_dtype)file_dtype;
    /* The product of the non-zero dims bounds what strides can reach, so
     * it must stay representable even when another dim is 0. */
    size_t esize = kv_dtype_size(info->dtype);
    int64_t reach = (int64_t)esize;
    bool zero = false;
    for (int i = 0; i < info->ndim; i++) {
        if (info->sizes[i] == 0) {
            zero = true;
            continue;
        }
        if (reach > INT64_MAX / info->sizes[i]) return npy_fail(name, "shape is too large");
        reach *= info->sizes[i];
    }
    info->data_offset = pre + hlen;
    info->data_nbytes = zero ? 0 : (size_t)reach;
    size_t have = len - info->data_offset;
    if (have < info->data_nbytes)
        return npy_fail(name, "truncated data: the header needs %zu bytes, the file has %zu", info->data_nbytes, have);
    if (have > info->data_nbytes)
        return npy_fail(name, "%zu trailing bytes after the %zu bytes of data", have - info->data_nbytes,
                        info->data_nbytes);
    if (info->dtype == KV_BOOL) {
        const unsigned char *d = b + info->data_offset;
        for (size_t i = 0; i < info->data_nbytes; i++) {
            if (d[i] > 1) return npy_fail(name, "bool element %zu is 0x%02x, not 0 or 1", i, d[i]);
        }
    }
    return KV_OK;
}

kv_tensor *kv_npy_decode(const void *buf, size_t len, kv_dtype expected, const char *name) {
    kv_npy_info info;
    if (kv_npy_parse(buf, len, expected, name, &info) != KV_OK) return NULL;
    kv_tensor *t = kv_tensor_empty(info.sizes, info.ndim, info.dtype, KV_DEVICE_CPU0);
    if (t == NULL) return NULL;
    if (info.data_nbytes > 0) memcpy(kv_tensor_data(t), (const char *)buf + info.data_offset, info.data_nbytes);
    return t;
}

kv_tensor *kv_npy_read(const char *path, kv_dtype expected) {
    if (path == NULL) {
        kv_error(KV_ERR_INVALID_ARG, "npy_read: argument 'path': NULL");
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        npy_fail(path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        npy_fail(path, "cannot stat: %s", strerror(errno));
        fclose(f);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        npy_fail(path, "not a regular file");
        fclose(f);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    /* One extra byte detects a file that grew after fstat. */
    unsigned char *buf = malloc(size + 1);
    if (buf == NULL) {
        kv_error(KV_ERR_OOM, "%s: out of memory reading %zu bytes", path, size);
        fclose(f);
        return NULL;
    }
    size_t got = fread(buf, 1, size + 1, f);
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (err != 0) {
        npy_fail(path, "read failed: %s", strerror(err));
        free(buf);
        return NULL;
    }
    if (got != size) {
        npy_fail(path, "file changed size while being read (%zu bytes, then %zu)", size, got);
        free(buf);
        return NULL;
    }
    kv_tensor *t = kv_npy_decode(buf, size, expected, path);
    free(buf);
    return t;
}
