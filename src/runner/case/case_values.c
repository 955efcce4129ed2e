/* Text of a case's values: names and parsers of the case enums, shapes,
 * tolerances, seeds, and the per-row format callbacks of the option table
 * (case_options.c) that case IDs, golden keys and repro lines are made of
 * (case_id.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/dispatch.h"
#include "runner/case/case.h"
#include "runner/case/case_options.h"
#include "runner/case/spec.h"

/* ---- names ---- */

const char *kv_layout_name(kv_layout l) {
    switch (l) {
    case KV_LAYOUT_CONTIGUOUS: return "c";
    case KV_LAYOUT_TRANSPOSED: return "t";
    case KV_LAYOUT_STRIDED: return "s";
    case KV_LAYOUT_OFFSET: return "o";
    case KV_LAYOUT_BROADCAST: return "b";
    case KV_LAYOUT_WINDOW: return "w";
    }
    return "?";
}

static const char *kv_layout_long_name(kv_layout l) {
    switch (l) {
    case KV_LAYOUT_CONTIGUOUS: return "contiguous";
    case KV_LAYOUT_TRANSPOSED: return "transposed";
    case KV_LAYOUT_STRIDED: return "strided";
    case KV_LAYOUT_OFFSET: return "offset";
    case KV_LAYOUT_BROADCAST: return "broadcast";
    case KV_LAYOUT_WINDOW: return "windowed";
    }
    return "?";
}

int kv_layout_parse(const char *text, kv_layout *out) {
    for (int i = KV_LAYOUT_CONTIGUOUS; i <= KV_LAYOUT_WINDOW; i++) {
        if (strcmp(text, kv_layout_name((kv_layout)i)) == 0 ||
            strcmp(text, kv_layout_long_name((kv_layout)i)) == 0) {
            *out = (kv_layout)i;
            return 0;
        }
    }
    return -1;
}

int64_t kv_layout_window_step(const kv_shape *sh) {
    if (sh->ndim < 2 || sh->sizes[0] < 2) return 0;
    int64_t row = 1;
    for (int d = 1; d < sh->ndim; d++) row *= sh->sizes[d];
    return row >= 2 ? (row + 1) / 2 : 0;
}

const char *kv_fill_name(kv_fill f) {
    switch (f) {
    case KV_FILL_EXACT: return "exact";
    case KV_FILL_REAL: return "real";
    case KV_FILL_SPECIAL: return "special";
    case KV_FILL_SWEEP: return "sweep";
    case KV_FILL_SHIFTED: return "shifted";
    }
    return "?";
}

int kv_fill_parse(const char *text, kv_fill *out) {
    for (int i = KV_FILL_EXACT; i <= KV_FILL_SHIFTED; i++) {
        if (strcmp(text, kv_fill_name((kv_fill)i)) == 0) {
            *out = (kv_fill)i;
            return 0;
        }
    }
    return -1;
}

const char *kv_check_kind_name(kv_check_kind k) {
    switch (k) {
    case KV_CHECK_GOLDEN: return "golden";
    case KV_CHECK_VARIANTS: return "variants";
    case KV_CHECK_MEMORY: return "memory";
    case KV_CHECK_ERROR: return "error";
    case KV_CHECK_LAZY: return "lazy";
    case KV_CHECK_GRAD: return "grad";
    case KV_CHECK_FASTPATH: return "fastpath";
    case KV_CHECK_TUNE: return "tune";
    case KV_CHECK_ACCURACY: return "accuracy";
    case KV_CHECK_THREADS: return "threads";
    case KV_CHECK_KIND_COUNT: break;
    }
    return "?";
}

int kv_check_kind_parse(const char *text, kv_check_kind *out) {
    for (int i = 0; i < (int)KV_CHECK_KIND_COUNT; i++) {
        if (strcmp(text, kv_check_kind_name((kv_check_kind)i)) == 0) {
            *out = (kv_check_kind)i;
            return 0;
        }
    }
    return -1;
}

const char *kv_case_expect_name(kv_status expect) {
    return expect == KV_OK ? "pass" : kv_status_name(expect);
}


/* ---- tolerances ---- */

int kv_tolerance_format(kv_tolerance t, char *buf, int cap) {
    char v[40];
    switch (t.kind) {
    case KV_TOL_DEFAULT: return snprintf(buf, (size_t)cap, "%s", "");
    case KV_TOL_BITWISE: return snprintf(buf, (size_t)cap, "bitwise");
    case KV_TOL_ULP: return snprintf(buf, (size_t)cap, "ulp:%.0f", t.value);
    case KV_TOL_ABS:
        kv_case_format_double(t.value, v, sizeof v);
        return snprintf(buf, (size_t)cap, "abs:%s", v);
    case KV_TOL_REL:
        kv_case_format_double(t.value, v, sizeof v);
        return snprintf(buf, (size_t)cap, "rel:%s", v);
    }
    return snprintf(buf, (size_t)cap, "?");
}

int kv_tolerance_parse(const char *text, kv_tolerance *out) {
    if (strcmp(text, "bitwise") == 0) {
        *out = (kv_tolerance){ KV_TOL_BITWISE, 0.0 };
        return 0;
    }
    static const struct { const char *prefix; kv_tol_kind kind; } kinds[] = {
        { "ulp:", KV_TOL_ULP }, { "abs:", KV_TOL_ABS }, { "rel:", KV_TOL_REL }
    };
    for (int i = 0; i < 3; i++) {
        const size_t n = strlen(kinds[i].prefix);
        if (strncmp(text, kinds[i].prefix, n) != 0) continue;
        const char *v = text + n;
        if (kinds[i].kind == KV_TOL_ULP) {
            uint64_t u;
            if (kv_case_seed_parse(v, &u) != 0 || u > (1ull << 52)) return -1;
            *out = (kv_tolerance){ KV_TOL_ULP, (double)u };
            return 0;
        }
        char *end = NULL;
        const double d = strtod(v, &end);
        /* !(d >= 0) also rejects NaN. */
        if (end == v || *end != '\0' || !(d >= 0) || d > 1e308) return -1;
        *out = (kv_tolerance){ kinds[i].kind, d };
        return 0;
    }
    return -1;
}

/* ---- shapes ---- */

static int kv_parse_dim(const char *s, int len, int64_t *out) {
    if (len <= 0 || len > 18) return -1; /* no overflow; sizes past 1e18 are not real */
    int64_t v = 0;
    for (int i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int kv_case_shape_parse(const char *text, kv_shape *out, char *why, int whycap, int *bad_at) {
    memset(out, 0, sizeof *out);
    const int len = (int)strlen(text);
    const bool bracket = text[0] == '[';
    if (bracket && (len < 2 || text[len - 1] != ']')) {
        snprintf(why, (size_t)whycap, "expected ']' to close '%s'", text);
        *bad_at = len;
        return -1;
    }
    if (bracket && len == 2) return 0; /* [] : 0-dim */
    const char sep = bracket ? ',' : 'x';
    const int first = bracket ? 1 : 0, last = bracket ? len - 1 : len;
    int start = first;
    for (int i = first; i <= last; i++) {
        if (i < last && text[i] != sep) continue;
        if (out->ndim == KV_MAX_DIMS) {
            snprintf(why, (size_t)whycap, "more than %d dims in '%s'", KV_MAX_DIMS, text);
            *bad_at = start;
            return -1;
        }
        int64_t d;
        if (kv_parse_dim(text + start, i - start, &d) != 0) {
            if (i > start && text[start] == '-') {
                snprintf(why, (size_t)whycap, "negative size '%.*s' in '%s'", i - start, text + start, text);
            } else {
                snprintf(why, (size_t)whycap,
                         "expected a shape like 4x5, [4,5], [] (0-dim) or none, got '%s'", text);
            }
            *bad_at = start;
            return -1;
        }
        out->sizes[out->ndim++] = d;
        start = i + 1;
    }
    return 0;
}

int kv_case_shape_format(const kv_shape *s, bool x_form, char *buf, int cap) {
    char tmp[KV_MAX_DIMS * 21 + 4];
    int n = 0;
    if (s->ndim == 0) {
        n = snprintf(tmp, sizeof tmp, "[]");
    } else {
        if (!x_form) n += snprintf(tmp + n, sizeof tmp - (size_t)n, "[");
        for (int i = 0; i < s->ndim; i++) {
            n += snprintf(tmp + n, sizeof tmp - (size_t)n, "%s%" PRId64,
                          i ? (x_form ? "x" : ",") : "", s->sizes[i]);
        }
        if (!x_form) snprintf(tmp + n, sizeof tmp - (size_t)n, "]");
    }
    return snprintf(buf, cap > 0 ? (size_t)cap : 0, "%s", tmp);
}

static bool kv_shape_equal(const kv_shape *a, const kv_shape *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++) {
        if (a->sizes[i] != b->sizes[i]) return false;
    }
    return true;
}

/* ---- format callbacks ---- */

/* Appends to buf at *n, snprintf style (the length keeps counting past cap). */
void kv_case_put(char *buf, int cap, int *n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    const int room = *n < cap ? cap - *n : 0;
    const int w = vsnprintf(room ? buf + *n : NULL, (size_t)room, fmt, ap);
    va_end(ap);
    if (w > 0) *n += w;
}

static int kv_first_present(const kv_case *c) {
    for (int i = 0; i < c->ninputs; i++) {
        if (!c->absent[i]) return i;
    }
    return -1;
}

int kv_case_format_dtype(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    const int first = kv_first_present(c);
    if (cap > 0) buf[0] = '\0';
    if (first < 0) return 0;
    bool same = true;
    for (int i = 0; i < c->ninputs; i++) {
        if (!c->absent[i] && c->dtypes[i] != c->dtypes[first]) same = false;
    }
    int n = 0;
    if (same) {
        kv_case_put(buf, cap, &n, "%s", kv_dtype_name(c->dtypes[first]));
        return n;
    }
    for (int i = 0; i < c->ninputs; i++) kv_case_put(buf, cap, &n, "%s%s", i ? ":" : "", kv_dtype_name(c->dtypes[i]));
    return n;
}

/* Whether one shape, read back, gives exactly these inputs. */
static bool kv_shape_collapses(const kv_case *c, const kv_schema *s) {
    const int first = kv_first_present(c);
    if (s == NULL || first < 0) return false;
    for (int i = 0; i < c->ninputs; i++) {
        if (!c->absent[i] && !kv_shape_equal(&c->shapes[i], &c->shapes[first])) return false;
    }
    const bool none = false;
    kv_input_plan p;
    char why[256];
    if (kv_input_plan_make(s, 1, &none, &p, why, sizeof why) != 0) return false;
    while (p.n > 0 && p.absent[p.n - 1]) p.n--;
    if (p.n != c->ninputs) return false;
    for (int i = 0; i < p.n; i++) {
        if (p.absent[i] != c->absent[i]) return false;
    }
    return true;
}

int kv_case_format_shape(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    if (cap > 0) buf[0] = '\0';
    if (kv_first_present(c) < 0) return 0;
    const bool x_form = f == KV_TEXT_REPRO;
    char one[KV_MAX_DIMS * 21 + 4];
    int n = 0;
    if (kv_shape_collapses(c, s)) {
        kv_case_shape_format(&c->shapes[kv_first_present(c)], x_form, one, sizeof one);
        kv_case_put(buf, cap, &n, "%s", one);
        return n;
    }
    /* Two Tensor[] lists (the foreach ops): a '/' before the second
     * list's first shape, always written, so an empty list shows too. */
    const int second = s != NULL ? kv_case_second_list_arg(s) : -1;
    bool broke = false;
    for (int i = 0; i < c->ninputs; i++) {
        if (c->absent[i]) {
            snprintf(one, sizeof one, "none");
        } else {
            kv_case_shape_format(&c->shapes[i], x_form, one, sizeof one);
        }
        const bool at_break = second >= 0 && !broke && c->input_arg[i] == second;
        broke = broke || at_break;
        kv_case_put(buf, cap, &n, "%s%s", at_break ? "/" : i ? ":" : "", one);
    }
    if (second >= 0 && !broke) kv_case_put(buf, cap, &n, "/");
    return n;
}

int kv_case_second_list_arg(const kv_schema *s) {
    int lists = 0;
    for (int a = 0; a < s->nargs; a++)
        if (s->args[a].type.kind == KV_TYPE_TENSOR && s->args[a].type.is_list && ++lists == 2) return a;
    return -1;
}

int kv_case_format_layout(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    if (cap > 0) buf[0] = '\0';
    const int first = kv_first_present(c);
    if (first < 0) return 0;
    bool same = true, all_c = true;
    for (int i = 0; i < c->ninputs; i++) {
        if (c->absent[i]) continue;
        if (c->layouts[i] != c->layouts[first]) same = false;
        if (c->layouts[i] != KV_LAYOUT_CONTIGUOUS) all_c = false;
    }
    if (all_c) return 0;
    int n = 0;
    if (same) {
        kv_case_put(buf, cap, &n, "%s", kv_layout_name(c->layouts[first]));
        return n;
    }
    for (int i = 0; i < c->ninputs; i++) kv_case_put(buf, cap, &n, "%s%s", i ? ":" : "", kv_layout_name(c->layouts[i]));
    return n;
}

int kv_case_format_args(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    if (cap > 0) buf[0] = '\0';
    int n = 0;
    for (int i = 0; i < c->nargs; i++) {
        kv_case_put(buf, cap, &n, "%s%s=%s", i ? (f == KV_TEXT_ID ? ";" : ",") : "", c->args[i].name,
               c->args[i].value);
    }
    return n;
}

int kv_case_format_fill(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    if (c->fill == KV_FILL_REAL) {
        if (cap > 0) buf[0] = '\0';
        return 0;
    }
    return snprintf(buf, (size_t)cap, "%s", kv_fill_name(c->fill));
}

int kv_case_format_seed(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    if (c->seed == 0) {
        if (cap > 0) buf[0] = '\0';
        return 0;
    }
    return snprintf(buf, (size_t)cap, "%" PRIu64, c->seed);
}

int kv_case_format_device(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    if (c->device.type == KV_DEVICE_CPU && c->device.index == 0) {
        if (cap > 0) buf[0] = '\0';
        return 0;
    }
    if (c->device.index == 0) return snprintf(buf, (size_t)cap, "%s", kv_device_type_name(c->device.type));
    return snprintf(buf, (size_t)cap, "%s:%d", kv_device_type_name(c->device.type), c->device.index);
}

int kv_case_format_check(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    if (cap > 0) buf[0] = '\0';
    if (c->checks == kv_case_default_checks_for(c)) return 0;
    int n = 0;
    /* In the ID `,` separates keys, so the set is joined with `+` there
     * (check=error+memory); the repro line keeps the grammar's `,`. */
    const char *sep = f == KV_TEXT_ID ? "+" : ",";
    for (int k = 0; k < (int)KV_CHECK_KIND_COUNT; k++) {
        if (c->checks & (1u << k)) kv_case_put(buf, cap, &n, "%s%s", n ? sep : "", kv_check_kind_name((kv_check_kind)k));
    }
    return n;
}

int kv_case_format_tol(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    return kv_tolerance_format(c->tol, buf, cap);
}

int kv_case_format_expect(const kv_case *c, const kv_schema *s, kv_text_form f, char *buf, int cap) {
    (void)s;
    (void)f;
    if (c->expect == KV_OK) {
        if (cap > 0) buf[0] = '\0';
        return 0;
    }
    return snprintf(buf, (size_t)cap, "%s", kv_status_name(c->expect));
}

int kv_case_seed_parse(const char *text, uint64_t *out) {
    if (text[0] < '0' || text[0] > '9') return -1;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
    }
    errno = 0;
    char *end = NULL;
    const unsigned long long v = strtoull(text, &end, 10);
    if (errno == ERANGE || *end != '\0') return -1;
    *out = (uint64_t)v;
    return 0;
}
