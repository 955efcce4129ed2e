/* The reader of report folders (the encoding is described in
 * report_jsonl.c) and the shard merge on top of it. */
#include "runner/report/merge.h"
#include "runner/report/jsonl_file.h"
#include "runner/report/report_internal.h"

#include "runner/golden/hash.h"
#include "runner/check/tol_backend.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

/* ---- one line ---- */

static int fail(char *why, int whycap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, int whycap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, (size_t)whycap, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *type_name(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static int get_string(const json_t *o, const char *key, char *buf, size_t cap, char *why, int whycap) {
    const json_t *j = json_object_get(o, key);
    if (j == NULL) return fail(why, whycap, "missing key \"%s\"", key);
    if (!json_is_string(j)) return fail(why, whycap, "\"%s\": expected a string, got %s", key, type_name(j));
    const char *s = json_string_value(j);
    size_t n = json_string_length(j);
    if (strlen(s) != n) return fail(why, whycap, "\"%s\": contains a NUL character", key);
    if (n >= cap) return fail(why, whycap, "\"%s\": %zu bytes, longer than the %zu this field holds", key, n, cap - 1);
    memcpy(buf, s, n + 1);
    return 0;
}

/* A double: a JSON number, or one of the strings standing for the values
 * JSON has no literal for. */
static int real_of(const json_t *j, const char *key, double *out, char *why, int whycap) {
    if (j == NULL) return fail(why, whycap, "missing key \"%s\"", key);
    if (json_is_number(j)) {
        *out = json_number_value(j);
        return 0;
    }
    if (json_is_string(j)) {
        const char *s = json_string_value(j);
        if (strcmp(s, "nan") == 0) *out = NAN;
        else if (strcmp(s, "inf") == 0) *out = INFINITY;
        else if (strcmp(s, "-inf") == 0) *out = -INFINITY;
        else return fail(why, whycap, "\"%s\": expected a number, \"nan\", \"inf\" or \"-inf\", got \"%s\"", key, s);
        return 0;
    }
    return fail(why, whycap, "\"%s\": expected a number, got %s", key, type_name(j));
}

static int get_real(const json_t *o, const char *key, double *out, char *why, int whycap) {
    return real_of(json_object_get(o, key), key, out, why, whycap);
}

static int get_int(const json_t *o, const char *key, int64_t *out, char *why, int whycap) {
    const json_t *j = json_object_get(o, key);
    if (j == NULL) return fail(why, whycap, "missing key \"%s\"", key);
    if (!json_is_integer(j)) return fail(why, whycap, "\"%s\": expected an integer, got %s", key, type_name(j));
    *out = (int64_t)json_integer_value(j);
    return 0;
}

/* Unknown keys are errors: reader and writer are one program, so a key
 * this reader does not know means a foreign or corrupted file. */
static int only_keys(const json_t *o, const char *const *keys, int nkeys, const char *where, char *why,
                     int whycap) {
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        (void)v;
        int known = 0;
        for (int i = 0; i < nkeys && !known; i++) known = strcmp(key, keys[i]) == 0;
        if (!known) return fail(why, whycap, "%sunknown key \"%s\"", where, key);
    }
    return 0;
}

static int parse_mismatch(const json_t *j, int i, kv_mismatch *m, char *why, int whycap) {
    static const char *const keys[] = { "index", "expected", "got", "abs_err", "rel_err", "ulps" };
    char where[48];
    snprintf(where, sizeof where, "mismatches[%d]: ", i);
    char inner[384];
    if (!json_is_object(j)) return fail(why, whycap, "%sexpected an object, got %s", where, type_name(j));
    if (only_keys(j, keys, 6, where, why, whycap) != 0) return -1;
    const json_t *idx = json_object_get(j, "index");
    if (idx == NULL) return fail(why, whycap, "%smissing key \"index\"", where);
    if (!json_is_array(idx)) return fail(why, whycap, "%s\"index\": expected an array, got %s", where, type_name(idx));
    size_t nd = json_array_size(idx);
    if (nd > KV_MAX_DIMS) return fail(why, whycap, "%s\"index\": %zu dims, more than %d", where, nd, KV_MAX_DIMS);
    memset(m, 0, sizeof *m);
    m->ndim = (int)nd;
    for (size_t d = 0; d < nd; d++) {
        const json_t *e = json_array_get(idx, d);
        if (!json_is_integer(e))
            return fail(why, whycap, "%s\"index\"[%zu]: expected an integer, got %s", where, d, type_name(e));
        m->index[d] = (int64_t)json_integer_value(e);
    }
    if (get_real(j, "expected", &m->expected, inner, sizeof inner) != 0 ||
        get_real(j, "got", &m->got, inner, sizeof inner) != 0 ||
        get_real(j, "abs_err", &m->abs_err, inner, sizeof inner) != 0 ||
        get_real(j, "rel_err", &m->rel_err, inner, sizeof inner) != 0 ||
        get_real(j, "ulps", &m->ulps, inner, sizeof inner) != 0)
        return fail(why, whycap, "%s%s", where, inner);
    return 0;
}

/* "outs": [[hash|null, elements, max_ulp, p999_ulp, not_cr], ...]. */
static int parse_outs(const json_t *arr, kv_check_result *r, char *why, int whycap) {
    if (!json_is_array(arr)) return fail(why, whycap, "\"outs\": expected an array, got %s", type_name(arr));
    const size_t n = json_array_size(arr);
    if (n > KV_RESULT_MAX_OUTPUTS)
        return fail(why, whycap, "\"outs\": %zu entries, more than %d", n, KV_RESULT_MAX_OUTPUTS);
    r->nouts = (int)n;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i);
        kv_output_facts *f = &r->outs[i];
        if (!json_is_array(e) || json_array_size(e) != 5)
            return fail(why, whycap, "\"outs\"[%zu]: expected [hash, elements, max_ulp, p999_ulp, not_cr]", i);
        const json_t *h = json_array_get(e, 0);
        if (json_is_string(h)) {
            if (kv_hash_parse(json_string_value(h), &f->hash) != 0)
                return fail(why, whycap, "\"outs\"[%zu]: hash \"%s\" is not 16 hex digits", i, json_string_value(h));
            f->hash_set = true;
        } else if (!json_is_null(h)) {
            return fail(why, whycap, "\"outs\"[%zu]: hash: expected a string or null, got %s", i, type_name(h));
        }
        const json_t *ne = json_array_get(e, 1), *nc = json_array_get(e, 4);
        if (!json_is_integer(ne) || !json_is_integer(nc))
            return fail(why, whycap, "\"outs\"[%zu]: elements and not_cr must be integers", i);
        f->elements = (int64_t)json_integer_value(ne);
        f->not_cr = (int64_t)json_integer_value(nc);
        char inner[256];
        if (real_of(json_array_get(e, 2), "max_ulp", &f->max_ulp, inner, sizeof inner) != 0 ||
            real_of(json_array_get(e, 3), "p999_ulp", &f->p999_ulp, inner, sizeof inner) != 0)
            return fail(why, whycap, "\"outs\"[%zu]: %s", i, inner);
    }
    return 0;
}

/* "ulp_hist": [[bin, count], ...]; ulp_elements is its total. */
static int parse_ulp_hist(const json_t *arr, kv_check_result *r, char *why, int whycap) {
    if (!json_is_array(arr)) return fail(why, whycap, "\"ulp_hist\": expected an array, got %s", type_name(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *p = json_array_get(arr, i);
        const json_t *b = json_is_array(p) && json_array_size(p) == 2 ? json_array_get(p, 0) : NULL;
        const json_t *c = b != NULL ? json_array_get(p, 1) : NULL;
        if (!json_is_integer(b) || !json_is_integer(c) || json_integer_value(b) < 0 ||
            json_integer_value(b) >= KV_ULP_BINS || json_integer_value(c) < 0)
            return fail(why, whycap, "\"ulp_hist\"[%zu]: expected [bin 0..%d, count >= 0]", i, KV_ULP_BINS - 1);
        r->ulp_hist[json_integer_value(b)] += (int64_t)json_integer_value(c);
        r->ulp_elements += (int64_t)json_integer_value(c);
    }
    return 0;
}

/* "heat": [rows, cols, grows, gcols, cell, count, ...] (report_jsonl.c),
 * checked against the grid kv_compare would have made for that shape. */
static int parse_heat(const json_t *arr, kv_heat *h, char *why, int whycap) {
    if (!json_is_array(arr)) return fail(why, whycap, "\"heat\": expected an array, got %s", type_name(arr));
    const size_t n = json_array_size(arr);
    if (n < 4 || n % 2 != 0)
        return fail(why, whycap, "\"heat\": expected [rows, cols, grows, gcols, cell, count, ...], got %zu numbers", n);
    int64_t v[4];
    for (size_t i = 0; i < n; i++)
        if (!json_is_integer(json_array_get(arr, i)) || json_integer_value(json_array_get(arr, i)) < 0)
            return fail(why, whycap, "\"heat\"[%zu]: expected an integer >= 0", i);
    for (int i = 0; i < 4; i++) v[i] = (int64_t)json_integer_value(json_array_get(arr, (size_t)i));
    if (v[0] < 1 || v[1] < 1 || v[2] != (v[0] < KV_HEAT_GRID ? v[0] : KV_HEAT_GRID) ||
        v[3] != (v[1] < KV_HEAT_GRID ? v[1] : KV_HEAT_GRID))
        return fail(why, whycap, "\"heat\": a %lldx%lld grid does not fit an output of %lld x %lld (at most %d each way)",
                    (long long)v[2], (long long)v[3], (long long)v[0], (long long)v[1], KV_HEAT_GRID);
    h->rows = v[0];
    h->cols = v[1];
    h->grows = (int)v[2];
    h->gcols = (int)v[3];
    for (size_t i = 4; i < n; i += 2) {
        const int64_t cell = (int64_t)json_integer_value(json_array_get(arr, i));
        const int64_t count = (int64_t)json_integer_value(json_array_get(arr, i + 1));
        if (cell >= (int64_t)h->grows * h->gcols || count < 1 || count > UINT16_MAX)
            return fail(why, whycap, "\"heat\"[%zu]: cell %lld of %d, count %lld (1..%d)", i, (long long)cell,
                        h->grows * h->gcols, (long long)count, UINT16_MAX);
        h->cells[cell] = (uint16_t)count;
    }
    return 0;
}

static int parse_object(const json_t *o, kv_check_result *r, char *why, int whycap) {
    static const char *const keys[] = { "case_id", "op",       "check",       "backend",  "dtype",
                                        "status",  "message",  "repro",       "seconds",  "compared",
                                        "mismatched", "max_abs_err", "max_ulps", "mismatches",
                                        "fast_calls", "manual_calls", "slow_calls", "output",
                                        "outs", "ulp_max", "ulp_hist", "tol_override", "heat" };
    if (!json_is_object(o)) return fail(why, whycap, "expected a JSON object, got %s", type_name(o));
    if (only_keys(o, keys, (int)(sizeof keys / sizeof keys[0]), "", why, whycap) != 0) return -1;
    memset(r, 0, sizeof *r);
    char name[32];
    if (get_string(o, "case_id", r->case_id, sizeof r->case_id, why, whycap) != 0 ||
        get_string(o, "op", r->op, sizeof r->op, why, whycap) != 0 ||
        get_string(o, "check", r->check, sizeof r->check, why, whycap) != 0 ||
        get_string(o, "backend", r->backend, sizeof r->backend, why, whycap) != 0)
        return -1;
    if (get_string(o, "dtype", name, sizeof name, why, whycap) != 0) return -1;
    if (kv_dtype_parse(name, &r->dtype) != 0) return fail(why, whycap, "\"dtype\": unknown dtype \"%s\"", name);
    if (get_string(o, "status", name, sizeof name, why, whycap) != 0) return -1;
    if (kv_result_status_parse(name, &r->status) != 0)
        return fail(why, whycap, "\"status\": unknown status \"%s\"", name);
    /* Left out by the writer (report_jsonl.c): "repro" on PASS, SKIP and
     * UNSUPPORTED rows, the difference fields on rows without one. */
    if ((json_object_get(o, "repro") && get_string(o, "repro", r->repro, sizeof r->repro, why, whycap) != 0) ||
        (json_object_get(o, "mismatched") && get_int(o, "mismatched", &r->mismatched, why, whycap) != 0) ||
        (json_object_get(o, "max_abs_err") && get_real(o, "max_abs_err", &r->max_abs_err, why, whycap) != 0) ||
        (json_object_get(o, "max_ulps") && get_real(o, "max_ulps", &r->max_ulps, why, whycap) != 0))
        return -1;
    if (get_string(o, "message", r->message, sizeof r->message, why, whycap) != 0 ||
        get_real(o, "seconds", &r->seconds, why, whycap) != 0 ||
        get_int(o, "compared", &r->compared, why, whycap) != 0)
        return -1;
    if (json_object_get(o, "output") && get_string(o, "output", r->output, sizeof r->output, why, whycap) != 0)
        return -1;
    /* Only the fastpath check's rows carry path counts. */
    if ((json_object_get(o, "fast_calls") && get_int(o, "fast_calls", &r->fast_calls, why, whycap) != 0) ||
        (json_object_get(o, "manual_calls") && get_int(o, "manual_calls", &r->manual_calls, why, whycap) != 0) ||
        (json_object_get(o, "slow_calls") && get_int(o, "slow_calls", &r->slow_calls, why, whycap) != 0))
        return -1;
    if (json_object_get(o, "tol_override")) {
        /* Counted when this process loaded the same file (a run reading
         * its own rows back); a merge of other runs' rows does not. */
        char src[sizeof ((kv_tol_override *)0)->source];
        if (get_string(o, "tol_override", src, sizeof src, why, whycap) != 0) return -1;
        for (int i = 0; i < kv_tol_override_count(); i++)
            if (strcmp(kv_tol_override_at(i)->source, src) == 0) r->tol_override = i + 1;
    }
    if (json_object_get(o, "outs") && parse_outs(json_object_get(o, "outs"), r, why, whycap) != 0) return -1;
    if (json_object_get(o, "ulp_hist") != NULL) {
        if (parse_ulp_hist(json_object_get(o, "ulp_hist"), r, why, whycap) != 0 ||
            get_real(o, "ulp_max", &r->ulp_max, why, whycap) != 0)
            return -1;
    }
    if (json_object_get(o, "heat") != NULL && parse_heat(json_object_get(o, "heat"), &r->heat, why, whycap) != 0)
        return -1;
    const json_t *arr = json_object_get(o, "mismatches");
    if (arr == NULL) return 0;
    if (!json_is_array(arr)) return fail(why, whycap, "\"mismatches\": expected an array, got %s", type_name(arr));
    size_t nm = json_array_size(arr);
    if (nm > KV_RESULT_MAX_MISMATCHES)
        return fail(why, whycap, "\"mismatches\": %zu entries, more than %d", nm, KV_RESULT_MAX_MISMATCHES);
    r->nmismatches = (int)nm;
    for (size_t i = 0; i < nm; i++)
        if (parse_mismatch(json_array_get(arr, i), (int)i, &r->mismatches[i], why, whycap) != 0) return -1;
    return 0;
}

int kv_merge_parse_line(const char *line, kv_check_result *out, char *why, int whycap) {
    if (line == NULL || out == NULL) return fail(why, whycap, "no line");
    json_error_t err;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &err);
    if (o == NULL) return fail(why, whycap, "column %d: not JSON: %s", err.column, err.text);
    int rc = parse_object(o, out, why, whycap);
    json_decref(o);
    return rc;
}

/* ---- files ---- */

/* Calls row(ctx, r, off) for every line of a results.jsonl file, with the
 * byte offset of the line, so the merge can come back to a row without
 * keeping it. Every line is checked as kv_merge_read_jsonl says. */
typedef kv_status (*merge_row_fn)(void *ctx, const kv_check_result *r, int64_t off);

static kv_status scan_jsonl(const char *path, merge_row_fn row, void *ctx) {
    kv_jsonl_reader rd;
    kv_status st = kv_jsonl_open(&rd, path, "merge");
    if (st != KV_OK) return st;
    int64_t len;
    char why[512];
    kv_check_result *r = malloc(sizeof *r);
    if (r == NULL) st = kv_error(KV_ERR_OOM, "merge: '%s': out of memory", path);
    while (st == KV_OK && (len = kv_jsonl_next(&rd)) >= 0) {
        const long long lineno = (long long)rd.lineno;
        if (rd.cut) {
            st = kv_error(KV_ERR_INVALID_ARG, "merge: %s:%lld: the last line has no newline (a truncated file?)",
                          path, lineno);
        } else if ((size_t)len != strlen(rd.line)) {
            st = kv_error(KV_ERR_INVALID_ARG, "merge: %s:%lld: the line contains a NUL byte", path, lineno);
        } else if (len == 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "merge: %s:%lld: empty line", path, lineno);
        } else if (kv_merge_parse_line(rd.line, r, why, sizeof why) != 0) {
            st = kv_error(KV_ERR_INVALID_ARG, "merge: %s:%lld: %s", path, lineno, why);
        } else {
            st = row(ctx, r, rd.off);
        }
    }
    if (st == KV_OK && len == -2) st = kv_last_error();
    free(r);
    kv_jsonl_close(&rd);
    return st;
}

static kv_status push_row(void *ctx, const kv_check_result *r, int64_t off) {
    (void)off;
    return kv_result_list_push(ctx, r);
}

kv_status kv_merge_read_jsonl(const char *path, kv_result_list *out) {
    if (path == NULL || out == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_merge_read_jsonl: argument '%s': is NULL",
                        path == NULL ? "path" : "out");
    const int n0 = out->n;
    kv_status st = scan_jsonl(path, push_row, out);
    if (st != KV_OK) out->n = n0;
    return st;
}

kv_status kv_merge_read_meta(const char *path, kv_report_meta *meta, int64_t *nresults) {
    if (path == NULL || meta == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_merge_read_meta: argument '%s': is NULL",
                        path == NULL ? "path" : "meta");
    json_error_t err;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (o == NULL) {
        /* jansson reports a missing file as a text, without errno. */
        return kv_error(KV_ERR_INVALID_ARG, "merge: %s:%d: %s", path, err.line, err.text);
    }
    char why[512] = "";
    int rc = 0;
    int64_t v = 0, k = 0, n = 0, merged = 0, count = 0, ncases = 0, start = 0;
    kv_report_meta m;
    kv_report_meta_init(&m);
    char fmt[32];
    const json_t *seed = json_object_get(o, "seed");
    if (!json_is_object(o)) {
        rc = fail(why, sizeof why, "expected a JSON object");
    } else if (get_string(o, "format", fmt, sizeof fmt, why, sizeof why) != 0) {
        rc = -1;
    } else if (strcmp(fmt, "kvsuite-report") != 0) {
        rc = fail(why, sizeof why, "\"format\" is \"%s\", not \"kvsuite-report\"", fmt);
    } else if (get_int(o, "version", &v, why, sizeof why) != 0) {
        rc = -1;
    } else if (v != 1) {
        rc = fail(why, sizeof why, "report format version %lld; this kvrun reads version 1", (long long)v);
    } else if (get_string(o, "run_name", m.run_name, sizeof m.run_name, why, sizeof why) != 0 ||
               get_string(o, "options", m.options, sizeof m.options, why, sizeof why) != 0 ||
               get_int(o, "start_time", &start, why, sizeof why) != 0 ||
               get_real(o, "wall_seconds", &m.wall_seconds, why, sizeof why) != 0 ||
               get_int(o, "ncases", &ncases, why, sizeof why) != 0 ||
               get_int(o, "shard_k", &k, why, sizeof why) != 0 ||
               get_int(o, "shard_n", &n, why, sizeof why) != 0 ||
               get_int(o, "merged_from", &merged, why, sizeof why) != 0 ||
               get_int(o, "results", &count, why, sizeof why) != 0) {
        rc = -1;
    } else if (seed == NULL) {
        rc = fail(why, sizeof why, "missing key \"seed\"");
    } else if (json_is_integer(seed) && json_integer_value(seed) >= 0) {
        m.seed = (uint64_t)json_integer_value(seed);
    } else if (json_is_string(seed)) {
        const char *s = json_string_value(seed);
        char *end = NULL;
        errno = 0;
        unsigned long long u = strtoull(s, &end, 10);
        if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0)
            rc = fail(why, sizeof why, "\"seed\": \"%s\" is not an unsigned 64-bit integer", s);
        else m.seed = (uint64_t)u;
    } else {
        rc = fail(why, sizeof why, "\"seed\": expected a non-negative integer or a decimal string");
    }
    /* Optional: a folder from before fingerprints reads as all "", which
     * differs from any folder that has one. */
    const json_t *fp = rc == 0 ? json_object_get(o, "fingerprint") : NULL;
    if (fp != NULL && !json_is_object(fp)) {
        rc = fail(why, sizeof why, "\"fingerprint\": expected an object, got %s", type_name(fp));
    } else if (fp != NULL) {
        kv_report_fingerprint *f = &m.fingerprint;
        if (get_string(fp, "version", f->version, sizeof f->version, why, sizeof why) != 0 ||
            get_string(fp, "cases", f->cases, sizeof f->cases, why, sizeof why) != 0 ||
            get_string(fp, "options", f->options, sizeof f->options, why, sizeof why) != 0 ||
            get_string(fp, "gates", f->gates, sizeof f->gates, why, sizeof why) != 0 ||
            get_string(fp, "backends", f->backends, sizeof f->backends, why, sizeof why) != 0 ||
            get_string(fp, "env", f->env, sizeof f->env, why, sizeof why) != 0)
            rc = -1;
    }
    /* Optional ("pass" when absent: folders from before --flaky). The
     * fingerprint's options hold it too, so shards always agree on it. */
    const json_t *flaky = rc == 0 ? json_object_get(o, "flaky") : NULL;
    if (flaky != NULL && !(json_is_string(flaky) && (strcmp(json_string_value(flaky), "pass") == 0 ||
                                                     strcmp(json_string_value(flaky), "fail") == 0)))
        rc = fail(why, sizeof why, "\"flaky\": expected \"pass\" or \"fail\"");
    else if (flaky != NULL) m.flaky_fail = strcmp(json_string_value(flaky), "fail") == 0;
    /* Optional (absent: plain, as before --gzip-results existed). A merge
     * of compressed shards writes its rows compressed too. */
    const json_t *rfile = rc == 0 ? json_object_get(o, "results_file") : NULL;
    if (rfile != NULL && !(json_is_string(rfile) && (strcmp(json_string_value(rfile), KV_REPORT_JSONL) == 0 ||
                                                     strcmp(json_string_value(rfile), KV_REPORT_JSONL_GZ) == 0)))
        rc = fail(why, sizeof why, "\"results_file\": expected \"" KV_REPORT_JSONL "\" or \"" KV_REPORT_JSONL_GZ "\"");
    else if (rfile != NULL) m.gzip_results = strcmp(json_string_value(rfile), KV_REPORT_JSONL_GZ) == 0;
    /* Optional (absent: complete, as before interrupted runs existed). */
    const json_t *complete = rc == 0 ? json_object_get(o, "complete") : NULL;
    if (complete != NULL && !json_is_boolean(complete)) {
        rc = fail(why, sizeof why, "\"complete\": expected true or false");
    } else if (complete != NULL && !json_is_true(complete)) {
        m.incomplete = true;
        const json_t *sig = json_object_get(o, "interrupted");
        if (json_is_string(sig)) snprintf(m.interrupted, sizeof m.interrupted, "%s", json_string_value(sig));
        const json_t *done = json_object_get(o, "cases_done");
        if (json_is_integer(done)) m.ncases_done = (int64_t)json_integer_value(done);
    }
    if (rc == 0 && (n < 0 || n > 1000000 || k < 0 || k > n || merged < 0 || count < 0 || ncases < 0))
        rc = fail(why, sizeof why, "shard %lld/%lld, merged_from %lld, results %lld, ncases %lld: out of range",
                  (long long)k, (long long)n, (long long)merged, (long long)count, (long long)ncases);
    json_decref(o);
    if (rc != 0) return kv_error(KV_ERR_INVALID_ARG, "merge: %s: %s", path, why);
    m.start_time = start;
    m.ncases = ncases;
    m.shard_k = (int)k;
    m.shard_n = (int)n;
    m.merged_from = (int)merged;
    *meta = m;
    if (nresults) *nresults = count;
    return KV_OK;
}

/* ---- merging folders ----
 * Two passes over the folders, so that no row is held: the first checks
 * every file and keeps, per row, a hash of its (case, check, backend) and where it
 * is (24 bytes a row: duplicates can only be found by looking at all
 * rows); the second reads the rows again and hands them on in folder
 * order. Rows whose hashes meet are read back and compared exactly, so a
 * hash collision is never taken for a duplicate. */

typedef struct merge_key {
    uint64_t hash;               /* of case_id and check */
    int64_t off;                 /* of the row's line in its folder's results.jsonl */
    int dir;
} merge_key;

typedef struct merge_where {
    int64_t off;
    int dir;
} merge_where;

struct kv_merge {
    char **jsonl;                /* each folder's results.jsonl */
    int ndirs;
    const char *const *dirs;
    merge_where *drop;           /* rows left out, sorted by (dir, off): backend rows after their first copy */
    int ndrop;
    int64_t rows;
};

static uint64_t merge_key_hash(const kv_check_result *r) {
    return (kv_hash_string(r->case_id) * 0x9E3779B97F4A7C15ull ^ kv_hash_string(r->check)) * 0xC2B2AE3D27D4EB4Full ^
           kv_hash_string(r->backend);
}

static int cmp_key(const void *a, const void *b) {
    const merge_key *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    if (x->dir != y->dir) return x->dir < y->dir ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

static int cmp_where(const void *a, const void *b) {
    const merge_where *x = a, *y = b;
    if (x->dir != y->dir) return x->dir < y->dir ? -1 : 1;
    return (x->off > y->off) - (x->off < y->off);
}

/* A backend's load row ("backend(<name>)", check "load") is a fact of the
 * run, not of a case: every shard reports it. Identical copies are one
 * row; copies that disagree (the plugin loaded in one shard, failed in
 * another) stay a duplicate, which merging refuses. */
static bool same_backend_row(const kv_check_result *a, const kv_check_result *b) {
    return strcmp(a->check, "load") == 0 && strncmp(a->case_id, "backend(", 8) == 0 && a->status == b->status &&
           strcmp(a->message, b->message) == 0;
}

typedef struct key_sink {
    merge_key *keys;
    int64_t n, cap;
    int dir;
} key_sink;

static kv_status sink_key(void *ctx, const kv_check_result *r, int64_t off) {
    key_sink *k = ctx;
    if (k->n == k->cap) {
        int64_t cap = k->cap ? 2 * k->cap : 1024;
        merge_key *grown = realloc(k->keys, (size_t)cap * sizeof *grown);
        if (grown == NULL) return kv_error(KV_ERR_OOM, "merge: out of memory for %lld results", (long long)cap);
        k->keys = grown;
        k->cap = cap;
    }
    k->keys[k->n++] = (merge_key){ merge_key_hash(r), off, k->dir };
    return KV_OK;
}

/* The row at byte `off` of a results.jsonl checked by the first pass. */
static kv_status read_row_at(const char *path, int64_t off, kv_check_result *r) {
    kv_jsonl_reader rd;
    kv_status st = kv_jsonl_open(&rd, path, "merge");
    if (st != KV_OK) return st;
    char why[512];
    if (kv_jsonl_seek(&rd, off) != KV_OK || kv_jsonl_next(&rd) < 0 || rd.cut)
        st = kv_error(KV_ERR_INVALID_ARG, "merge: '%s' changed while being merged", path);
    else if (kv_merge_parse_line(rd.line, r, why, sizeof why) != 0)
        st = kv_error(KV_ERR_INVALID_ARG, "merge: '%s' changed while being merged: %s", path, why);
    kv_jsonl_close(&rd);
    return st;
}

/* First pass over one folder: meta.json, then every row's key. */
static kv_status check_dir(const char *dir, const char *jsonl, int d, kv_report_meta *meta, key_sink *keys) {
    char *mp = kv_report_path_in(dir, KV_REPORT_META);
    kv_status st = KV_OK;
    int64_t expect = 0;
    if (mp == NULL) st = kv_error(KV_ERR_OOM, "merge: '%s': out of memory", dir);
    if (st == KV_OK) st = kv_merge_read_meta(mp, meta, &expect);
    /* An interrupted shard lacks cases: merged, its missing rows would
     * read as cases that never existed. */
    if (st == KV_OK && meta->incomplete)
        st = kv_error(KV_ERR_INVALID_ARG,
                      "merge: '%s' holds an incomplete run (%s%s, %lld of %lld cases): finish it with kvrun --resume "
                      "first",
                      dir, meta->interrupted[0] ? "interrupted by " : "not finished", meta->interrupted,
                      (long long)meta->ncases_done, (long long)meta->ncases);
    const int64_t first = keys->n;
    keys->dir = d;
    if (st == KV_OK) st = scan_jsonl(jsonl, sink_key, keys);
    if (st == KV_OK && keys->n - first != expect)
        st = kv_error(KV_ERR_INVALID_ARG, "merge: %s has %lld results but %s records %lld (an incomplete upload?)",
                      jsonl, (long long)(keys->n - first), mp, (long long)expect);
    free(mp);
    return st;
}

/* Among keys with one hash (sorted by folder and place), a second copy of
 * a (case, check, backend) is dropped when it is an identical backend row, and is
 * an error otherwise. Runs of equal hashes are a handful of rows: the
 * backend rows of each shard, or a real duplicate. */
static kv_status judge_equal_hashes(kv_merge *m, const merge_key *run, int64_t n) {
    kv_check_result *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    kv_status st = a && b ? KV_OK : kv_error(KV_ERR_OOM, "merge: out of memory");
    for (int64_t j = 1; st == KV_OK && j < n; j++) {
        st = read_row_at(m->jsonl[run[j].dir], run[j].off, b);
        for (int64_t i = 0; st == KV_OK && i < j; i++) {
            st = read_row_at(m->jsonl[run[i].dir], run[i].off, a);
            if (st != KV_OK || strcmp(a->case_id, b->case_id) != 0 || strcmp(a->check, b->check) != 0 ||
                strcmp(a->backend, b->backend) != 0)
                continue;
            if (!same_backend_row(a, b)) {
                st = kv_error(KV_ERR_INVALID_ARG,
                              "merge: duplicate result for case '%s' check '%s' backend '%s': in '%s' and in '%s'",
                              b->case_id, b->check, b->backend, m->dirs[run[i].dir], m->dirs[run[j].dir]);
                break;
            }
            merge_where *grown = realloc(m->drop, (size_t)(m->ndrop + 1) * sizeof *grown);
            if (grown == NULL) {
                st = kv_error(KV_ERR_OOM, "merge: out of memory");
                break;
            }
            m->drop = grown;
            m->drop[m->ndrop++] = (merge_where){ run[j].off, run[j].dir };
            break;
        }
    }
    free(a);
    free(b);
    return st;
}

static kv_status check_shards(const char *const *dirs, int ndirs, const kv_report_meta *metas) {
    int sharded = -1;
    for (int i = 0; i < ndirs; i++) {
        if (metas[i].shard_n > 0) {
            sharded = i;
            break;
        }
    }
    if (sharded < 0) return KV_OK;
    const int n = metas[sharded].shard_n;
    for (int i = 0; i < ndirs; i++) {
        if (metas[i].shard_n == 0)
            return kv_error(KV_ERR_INVALID_ARG,
                            "merge: '%s' is shard %d/%d but '%s' is not a shard; merge one shard set at a time",
                            dirs[sharded], metas[sharded].shard_k, n, dirs[i]);
        if (metas[i].shard_n != n)
            return kv_error(KV_ERR_INVALID_ARG, "merge: '%s' is shard %d/%d but '%s' is shard %d/%d", dirs[sharded],
                            metas[sharded].shard_k, n, dirs[i], metas[i].shard_k, metas[i].shard_n);
        for (int j = 0; j < i; j++)
            if (metas[j].shard_k == metas[i].shard_k)
                return kv_error(KV_ERR_INVALID_ARG, "merge: shard %d/%d given twice: '%s' and '%s'", metas[i].shard_k,
                                n, dirs[j], dirs[i]);
    }
    if (ndirs != n) {
        char have[256] = "";
        int used = 0;
        for (int i = 0; i < ndirs && used >= 0 && used < (int)sizeof have; i++)
            used += snprintf(have + used, sizeof have - (size_t)used, "%s%d", i ? "," : "", metas[i].shard_k);
        return kv_error(KV_ERR_INVALID_ARG, "merge: incomplete shard set: %d of %d shards given (K = %s)", ndirs, n,
                        have);
    }
    return KV_OK;
}

/* Shards of one run agree on every fingerprint field; the first that
 * differs is named with both values, so mixing a `cases/binary.case`
 * shard or a `--gate=seed` run into a `cases/` merge is refused. */
static kv_status check_fingerprint(const char *d0, const kv_report_meta *m0, const char *di, const kv_report_meta *mi) {
    const kv_report_fingerprint *a = &m0->fingerprint, *b = &mi->fingerprint;
    const struct {
        const char *name, *x, *y;
    } fields[] = {
        { "version", a->version, b->version },   { "case set", a->cases, b->cases },
        { "options", a->options, b->options },   { "gates", a->gates, b->gates },
        { "backends", a->backends, b->backends }, { "environment", a->env, b->env },
    };
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        if (strcmp(fields[k].x, fields[k].y) == 0) continue;
        return kv_error(KV_ERR_INVALID_ARG,
                        "merge: '%s' and '%s' are not shards of one run: they differ in the %s: '%s' vs '%s'", d0, di,
                        fields[k].name, fields[k].x[0] ? fields[k].x : "(no fingerprint)",
                        fields[k].y[0] ? fields[k].y : "(no fingerprint)");
    }
    return KV_OK;
}

void kv_merge_close(kv_merge *m) {
    if (m == NULL) return;
    for (int i = 0; m->jsonl != NULL && i < m->ndirs; i++) free(m->jsonl[i]);
    free(m->jsonl);
    free(m->drop);
    free(m);
}

kv_merge *kv_merge_open(const char *const *dirs, int ndirs, kv_report_meta *meta_out) {
    if (dirs == NULL || ndirs <= 0) {
        kv_error(KV_ERR_INVALID_ARG, "kv_merge_open: argument 'dirs': %s",
                 dirs == NULL ? "is NULL" : "no report folders given");
        return NULL;
    }
    kv_merge *m = calloc(1, sizeof *m);
    kv_report_meta *metas = calloc((size_t)ndirs, sizeof *metas);
    key_sink keys = { 0 };
    kv_status st = KV_OK;
    if (m == NULL || metas == NULL || (m->jsonl = calloc((size_t)ndirs, sizeof *m->jsonl)) == NULL)
        st = kv_error(KV_ERR_OOM, "merge: out of memory");
    if (st == KV_OK) {
        m->ndirs = ndirs;
        m->dirs = dirs;
    }
    for (int i = 0; i < ndirs && st == KV_OK; i++) {
        if (dirs[i] == NULL) st = kv_error(KV_ERR_INVALID_ARG, "kv_merge_open: argument 'dirs[%d]': is NULL", i);
        else if ((m->jsonl[i] = kv_jsonl_path_in(dirs[i])) == NULL)
            st = kv_error(KV_ERR_OOM, "merge: '%s': out of memory", dirs[i]);
        else st = check_dir(dirs[i], m->jsonl[i], i, &metas[i], &keys);
    }
    for (int i = 1; i < ndirs && st == KV_OK; i++)
        if (metas[i].seed != metas[0].seed)
            st = kv_error(KV_ERR_INVALID_ARG, "merge: '%s' ran with seed %llu but '%s' with seed %llu: not one run",
                          dirs[0], (unsigned long long)metas[0].seed, dirs[i], (unsigned long long)metas[i].seed);
    for (int i = 1; i < ndirs && st == KV_OK; i++) st = check_fingerprint(dirs[0], &metas[0], dirs[i], &metas[i]);
    if (st == KV_OK) st = check_shards(dirs, ndirs, metas);
    if (st == KV_OK && keys.n == 0)
        st = kv_error(KV_ERR_INVALID_ARG, "merge: the %d report folder%s hold no results", ndirs, ndirs == 1 ? "" : "s");
    if (st == KV_OK) {
        qsort(keys.keys, (size_t)keys.n, sizeof *keys.keys, cmp_key);
        for (int64_t i = 0, j; st == KV_OK && i < keys.n; i = j) {
            for (j = i + 1; j < keys.n && keys.keys[j].hash == keys.keys[i].hash;) j++;
            if (j - i > 1) st = judge_equal_hashes(m, keys.keys + i, j - i);
        }
        if (m->ndrop > 1) qsort(m->drop, (size_t)m->ndrop, sizeof *m->drop, cmp_where);
        m->rows = keys.n - m->ndrop;
    }
    if (st == KV_OK && meta_out) {
        kv_report_meta mm = metas[0];
        for (int i = 1; i < ndirs; i++) {
            if (metas[i].start_time != 0 && (mm.start_time == 0 || metas[i].start_time < mm.start_time))
                mm.start_time = metas[i].start_time;
            if (metas[i].wall_seconds > mm.wall_seconds) mm.wall_seconds = metas[i].wall_seconds;
            mm.ncases += metas[i].ncases;
        }
        mm.shard_k = mm.shard_n = 0;
        mm.merged_from = ndirs;
        *meta_out = mm;
    }
    free(keys.keys);
    free(metas);
    if (st != KV_OK) {
        kv_merge_close(m);
        return NULL;
    }
    return m;
}

int64_t kv_merge_rows(const kv_merge *m) { return m == NULL ? 0 : m->rows; }

typedef struct emit_ctx {
    const kv_merge *m;
    int dir;
    int next_drop;
    kv_status (*each)(void *ctx, const kv_check_result *r);
    void *ctx;
} emit_ctx;

static kv_status emit_row(void *ctx, const kv_check_result *r, int64_t off) {
    emit_ctx *e = ctx;
    const kv_merge *m = e->m;
    const int k = e->next_drop;
    if (k < m->ndrop && m->drop[k].dir == e->dir && m->drop[k].off == off) {
        e->next_drop++;
        return KV_OK;
    }
    return e->each(e->ctx, r);
}

kv_status kv_merge_emit(const kv_merge *m, kv_status (*each)(void *ctx, const kv_check_result *r), void *ctx) {
    if (m == NULL || each == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_merge_emit: argument '%s': is NULL", m == NULL ? "m" : "each");
    emit_ctx e = { m, 0, 0, each, ctx };
    kv_status st = KV_OK;
    for (int d = 0; d < m->ndirs && st == KV_OK; d++) {
        e.dir = d;
        st = scan_jsonl(m->jsonl[d], emit_row, &e);
    }
    return st;
}

static kv_status push_merged(void *ctx, const kv_check_result *r) { return kv_result_list_push(ctx, r); }

kv_status kv_merge_dirs(const char *const *dirs, int ndirs, kv_result_list *out, kv_report_meta *meta_out) {
    if (dirs == NULL || out == NULL || ndirs <= 0)
        return kv_error(KV_ERR_INVALID_ARG, "kv_merge_dirs: argument '%s': %s",
                        out == NULL ? "out" : "dirs", out == NULL ? "is NULL" : "no report folders given");
    kv_report_meta meta;
    kv_merge *m = kv_merge_open(dirs, ndirs, &meta);
    if (m == NULL) return kv_last_error();
    const int n0 = out->n;
    kv_status st = kv_merge_emit(m, push_merged, out);
    kv_merge_close(m);
    if (st != KV_OK) out->n = n0;
    else if (meta_out) *meta_out = meta;
    return st;
}

static kv_status add_to_build(void *ctx, const kv_check_result *r) { return kv_report_build_add(ctx, r); }

kv_status kv_merge_write(const char *const *dirs, int ndirs, const char *rdir, bool gzip_results, FILE *console,
                         int *exit_code) {
    *exit_code = 2;
    kv_report_meta meta;
    kv_report_meta_init(&meta);
    kv_merge *m = kv_merge_open(dirs, ndirs, &meta);
    if (m == NULL) return kv_last_error();
    meta.gzip_results |= gzip_results; /* compressed shards merge compressed */
    *exit_code = 1;
    kv_status st = KV_OK;
    kv_report_build *b = kv_report_build_begin(rdir, &meta);
    if (b == NULL) st = kv_last_error();
    if (st == KV_OK) st = kv_merge_emit(m, add_to_build, b);
    if (st == KV_OK) st = kv_report_build_finish(b, &meta);
    if (st != KV_OK) {
        char why[1024];
        snprintf(why, sizeof why, "%s", kv_last_error_message());
        st = kv_error(st, "writing reports to %s: %s", rdir, why);
    }
    kv_merge_close(m);
    if (b != NULL) {
        kv_report_build_console(b, console, &meta);
        const int code = kv_report_build_exit_code(b, meta.flaky_fail);
        if (st == KV_OK || code > *exit_code) *exit_code = code;
    }
    kv_report_build_free(b);
    return st;
}
