/* results.jsonl and meta.json. The field names and encodings here are the
 * contract merge.c reads back:
 *   - strings are UTF-8; bytes that are not UTF-8 become '?' (one byte for
 *     one, so a field never outgrows its buffer on the way back);
 *   - doubles are JSON numbers printed with 17 significant digits, so they
 *     read back bit for bit; NaN and infinities, which JSON lacks, are the
 *     strings "nan", "inf" and "-inf";
 *   - dtype and status are their short names ("f32", "FAIL");
 *   - mismatches is an array of {index, expected, got, abs_err, rel_err, ulps};
 *   - heat (rows with a wrong element) is one flat array of integers,
 *     [rows, cols, grows, gcols, cell, count, cell, count, ...] over the
 *     non-empty cells of the row's kv_heat (result.h), cell row-major;
 *   - outs (rows that judge outputs) is an array with one
 *     [hash, elements, max_ulp, p999_ulp, not_cr] per output, hash a
 *     16-hex-digit string or null; ulp_max and ulp_hist (accuracy rows)
 *     the row's histogram as [[bin, count], ...] over its non-empty bins.
 * One object per line, keys in a fixed order, so two runs diff cleanly. */
#include "runner/report/report.h"
#include "runner/report/report_internal.h"
#include "runner/report/report_agg.h"
#include "runner/golden/hash.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static json_t *str_json(const char *s) {
    size_t n = strlen(s);
    char *clean = malloc(n + 1);
    if (clean == NULL) return NULL;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int len = kv_report_utf8_decode(s + i, &cp);
        if (len == 0) {
            clean[i++] = '?';
        } else {
            memcpy(clean + i, s + i, (size_t)len);
            i += (size_t)len;
        }
    }
    clean[n] = '\0';
    json_t *j = json_stringn(clean, n);
    free(clean);
    return j;
}

static json_t *real_json(double v) {
    if (isnan(v)) return json_string("nan");
    if (isinf(v)) return json_string(v < 0 ? "-inf" : "inf");
    return json_real(v);
}

/* json_object_set_new steals the value even on failure, and a NULL value
 * (out of memory) makes it fail, so one check per field is enough. */
static int put(json_t *obj, const char *key, json_t *value) {
    return value == NULL || json_object_set_new(obj, key, value) != 0 ? -1 : 0;
}

static json_t *mismatch_json(const kv_mismatch *m) {
    json_t *o = json_object();
    json_t *idx = json_array();
    if (o == NULL || idx == NULL) {
        json_decref(o);
        json_decref(idx);
        return NULL;
    }
    int nd = m->ndim < 0 ? 0 : (m->ndim > KV_MAX_DIMS ? KV_MAX_DIMS : m->ndim);
    int bad = 0;
    for (int d = 0; d < nd; d++) bad |= json_array_append_new(idx, json_integer((json_int_t)m->index[d]));
    bad |= put(o, "index", idx);
    bad |= put(o, "expected", real_json(m->expected));
    bad |= put(o, "got", real_json(m->got));
    bad |= put(o, "abs_err", real_json(m->abs_err));
    bad |= put(o, "rel_err", real_json(m->rel_err));
    bad |= put(o, "ulps", real_json(m->ulps));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The heat grid, flat and sparse: a row with 39 wrong elements costs 39
 * pairs, a wholly wrong large output at most 1024. */
static json_t *heat_json(const kv_heat *h) {
    json_t *a = json_array();
    if (a == NULL) return NULL;
    int bad = json_array_append_new(a, json_integer((json_int_t)h->rows)) |
              json_array_append_new(a, json_integer((json_int_t)h->cols)) |
              json_array_append_new(a, json_integer(h->grows)) | json_array_append_new(a, json_integer(h->gcols));
    for (int k = 0; k < h->grows * h->gcols; k++) {
        if (h->cells[k] == 0) continue;
        bad |= json_array_append_new(a, json_integer(k)) | json_array_append_new(a, json_integer(h->cells[k]));
    }
    if (bad) {
        json_decref(a);
        return NULL;
    }
    return a;
}

/* The per-output facts and the accuracy histogram, only in the rows that
 * have them, as arrays rather than objects: they are in most rows of a
 * run, and results.jsonl must stay small (docs/compare.md gives the
 * layout). */
static int facts_put(json_t *o, const kv_check_result *r) {
    int bad = 0;
    const int nouts = r->nouts < 0 ? 0 : (r->nouts > KV_RESULT_MAX_OUTPUTS ? KV_RESULT_MAX_OUTPUTS : r->nouts);
    if (nouts > 0) {
        json_t *arr = json_array();
        for (int i = 0; arr != NULL && i < nouts; i++) {
            const kv_output_facts *f = &r->outs[i];
            char hex[KV_HASH_HEX_LEN];
            json_t *e = json_array();
            if (e == NULL) {
                bad = 1;
                break;
            }
            bad |= json_array_append_new(e, f->hash_set ? json_string(kv_hash_format(f->hash, hex)) : json_null());
            bad |= json_array_append_new(e, json_integer((json_int_t)f->elements));
            bad |= json_array_append_new(e, real_json(f->max_ulp));
            bad |= json_array_append_new(e, real_json(f->p999_ulp));
            bad |= json_array_append_new(e, json_integer((json_int_t)f->not_cr));
            bad |= json_array_append_new(arr, e);
        }
        bad |= put(o, "outs", arr);
    }
    if (r->ulp_elements > 0) {
        json_t *h = json_array();
        for (int b = 0; h != NULL && b < KV_ULP_BINS; b++) {
            if (r->ulp_hist[b] == 0) continue;
            json_t *pair = json_array();
            bad |= pair == NULL || json_array_append_new(pair, json_integer(b)) != 0 ||
                   json_array_append_new(pair, json_integer((json_int_t)r->ulp_hist[b])) != 0 ||
                   json_array_append_new(h, pair) != 0;
        }
        bad |= put(o, "ulp_max", real_json(r->ulp_max));
        bad |= put(o, "ulp_hist", h);
    }
    return bad;
}

static json_t *result_json(const kv_check_result *r) {
    json_t *o = json_object();
    if (o == NULL) return NULL;
    int bad = 0;
    bad |= put(o, "case_id", str_json(r->case_id));
    bad |= put(o, "op", str_json(r->op));
    bad |= put(o, "check", str_json(r->check));
    bad |= put(o, "backend", str_json(r->backend));
    bad |= put(o, "dtype", json_string(kv_dtype_name(r->dtype)));
    bad |= put(o, "status", json_string(kv_result_status_name(r->status)));
    bad |= put(o, "message", str_json(r->message));
    /* As in junit.xml: the repro line only where there is something to
     * reproduce. On the passing, skipped and unsupported rows it was over a
     * third of a full run's results.jsonl; readers take it as absent. */
    if (r->repro[0] && r->status != KV_RESULT_PASS && r->status != KV_RESULT_SKIP &&
        r->status != KV_RESULT_UNSUPPORTED)
        bad |= put(o, "repro", str_json(r->repro));
    /* Microseconds: the 17 digits of a double said nothing a clock that
     * coarse can back, in 3 MB of a full run. */
    bad |= put(o, "seconds", real_json(round(r->seconds * 1e6) / 1e6));
    bad |= put(o, "compared", json_integer((json_int_t)r->compared));
    int nm = r->nmismatches < 0 ? 0 : (r->nmismatches > KV_RESULT_MAX_MISMATCHES ? KV_RESULT_MAX_MISMATCHES : r->nmismatches);
    /* A row that found no difference leaves the difference fields out
     * (readers take them as 0 and no mismatches): most rows. */
    if (r->mismatched != 0 || r->max_abs_err != 0.0 || r->max_ulps != 0.0 || nm > 0) {
        bad |= put(o, "mismatched", json_integer((json_int_t)r->mismatched));
        bad |= put(o, "max_abs_err", real_json(r->max_abs_err));
        bad |= put(o, "max_ulps", real_json(r->max_ulps));
        json_t *arr = json_array();
        for (int i = 0; arr != NULL && i < nm; i++) {
            json_t *m = mismatch_json(&r->mismatches[i]);
            bad |= m == NULL || json_array_append_new(arr, m) != 0;
        }
        bad |= put(o, "mismatches", arr);
        if (kv_report_heat_recorded(&r->heat)) bad |= put(o, "heat", heat_json(&r->heat));
    }
    if (r->output[0]) bad |= put(o, "output", str_json(r->output));
    /* The override that widened the row, by its FILE:LINE: the rows reach
     * meta.json's counts through this file (kv_report_stream). */
    const kv_tol_override *ov = kv_tol_override_at(r->tol_override - 1);
    if (ov != NULL) bad |= put(o, "tol_override", str_json(ov->source));
    if (strncmp(r->check, "fastpath", 8) == 0) {
        /* The path counts of the fastpath check's rows (hit rates). */
        bad |= put(o, "fast_calls", json_integer((json_int_t)r->fast_calls));
        bad |= put(o, "manual_calls", json_integer((json_int_t)r->manual_calls));
        bad |= put(o, "slow_calls", json_integer((json_int_t)r->slow_calls));
    }
    bad |= facts_put(o, r);
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Writes one object as one line. */
static kv_status put_line(kv_report_file *rf, json_t *obj, const char *what) {
    char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(obj);
    if (text == NULL) return kv_error(KV_ERR_OOM, "report: '%s': cannot encode %s as JSON", rf->path, what);
    fputs(text, rf->f);
    fputc('\n', rf->f);
    free(text);
    return KV_OK;
}

char *kv_report_result_line(const kv_check_result *r) {
    json_t *o = result_json(r);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return text;
}

kv_status kv_report_write_jsonl(const kv_result_list *results, const char *path) {
    if (results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_jsonl: argument 'results': is NULL");
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) return st;
    for (int i = 0; i < results->n && st == KV_OK; i++)
        st = put_line(&rf, result_json(&results->items[i]), results->items[i].case_id);
    if (st != KV_OK) {
        kv_report_file_discard(&rf);
        return st;
    }
    return kv_report_file_close(&rf);
}

/* A seed is a full uint64; JSON integers here are int64, so a seed past
 * INT64_MAX is written as a decimal string (the reader takes both). */
static json_t *seed_json(uint64_t seed) {
    if (seed <= (uint64_t)INT64_MAX) return json_integer((json_int_t)seed);
    char buf[32];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)seed);
    return json_string(buf);
}

kv_status kv_report_write_meta(const kv_report_meta *meta, const kv_result_list *results,
                               const char *path) {
    if (meta == NULL || results == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_report_write_meta: argument '%s': is NULL",
                        meta == NULL ? "meta" : "results");
    kv_report_agg a;
    kv_status st = kv_report_agg_of(&a, results);
    if (st == KV_OK) st = kv_report_meta_agg(meta, &a, path);
    kv_report_agg_free(&a);
    return st;
}

kv_status kv_report_meta_agg(const kv_report_meta *meta, const kv_report_agg *a, const char *path) {
    json_t *o = json_object();
    json_t *counts = json_object();
    if (o == NULL || counts == NULL) {
        json_decref(o);
        json_decref(counts);
        return kv_error(KV_ERR_OOM, "report: '%s': out of memory", path);
    }
    const int64_t *c = a->counts;
    int bad = 0;
    for (int s = 0; s < (int)KV_RESULT_STATUS_COUNT; s++)
        bad |= put(counts, kv_result_status_name((kv_result_status)s), json_integer((json_int_t)c[s]));
    bad |= put(o, "format", json_string("kvsuite-report"));
    bad |= put(o, "version", json_integer(1));
    bad |= put(o, "run_name", str_json(meta->run_name));
    bad |= put(o, "seed", seed_json(meta->seed));
    bad |= put(o, "options", str_json(meta->options));
    bad |= put(o, "start_time", json_integer((json_int_t)meta->start_time));
    bad |= put(o, "wall_seconds", real_json(meta->wall_seconds));
    bad |= put(o, "ncases", json_integer((json_int_t)meta->ncases));
    bad |= put(o, "shard_k", json_integer(meta->shard_k));
    bad |= put(o, "shard_n", json_integer(meta->shard_n));
    bad |= put(o, "merged_from", json_integer(meta->merged_from));
    bad |= put(o, "flaky", json_string(meta->flaky_fail ? "fail" : "pass"));
    bad |= put(o, "complete", json_boolean(!meta->incomplete));
    if (meta->incomplete) {
        bad |= put(o, "interrupted", str_json(meta->interrupted));
        bad |= put(o, "cases_done", json_integer((json_int_t)meta->ncases_done));
    }
    bad |= put(o, "results", json_integer((json_int_t)a->nrows));
    /* Which file holds them: a run in progress appends to the plain one. */
    bad |= put(o, "results_file",
               json_string(meta->gzip_results && !meta->incomplete ? KV_REPORT_JSONL_GZ : KV_REPORT_JSONL));
    bad |= put(o, "counts", counts);
    /* The merge compares these (merge.c); written by every run. */
    json_t *fp = json_object();
    bad |= fp == NULL;
    if (fp != NULL) {
        const kv_report_fingerprint *f = &meta->fingerprint;
        bad |= put(fp, "version", str_json(f->version));
        bad |= put(fp, "cases", str_json(f->cases));
        bad |= put(fp, "options", str_json(f->options));
        bad |= put(fp, "gates", str_json(f->gates));
        bad |= put(fp, "backends", str_json(f->backends));
        bad |= put(fp, "env", str_json(f->env));
        bad |= put(o, "fingerprint", fp);
    }
    if (meta->nbackends > 0) {
        json_t *list = json_array();
        for (int i = 0; list != NULL && i < meta->nbackends; i++) {
            const kv_report_backend *b = &meta->backends[i];
            json_t *e = json_object();
            if (e == NULL) continue;
            bad |= put(e, "name", str_json(b->name));
            bad |= put(e, "version", str_json(b->version));
            bad |= put(e, "path", str_json(b->path));
            bad |= put(e, "state", str_json(b->state));
            bad |= put(e, "reason", str_json(b->reason));
            bad |= json_array_append_new(list, e) != 0;
        }
        bad |= put(o, "backends", list);
        bad |= put(o, "plugin_abi", json_integer(meta->abi_version));
        bad |= put(o, "accel_requested", str_json(meta->accel_requested));
        bad |= put(o, "accel_target", str_json(meta->accel_target));
    }
    if (kv_tol_override_count() > 0) {
        /* The per-backend tolerance overrides of this run, with the rows
         * each widened: what a reader weighs a green row of that backend by. */
        json_t *list = json_array();
        bad |= list == NULL;
        for (int i = 0; list != NULL && i < kv_tol_override_count(); i++) {
            const kv_tol_override *t = kv_tol_override_at(i);
            json_t *e = json_object();
            bad |= e == NULL;
            if (e == NULL) continue;
            char dts[160] = "";
            for (int dt = 0, n = 0; dt < KV_DTYPE_COUNT; dt++)
                if (t->dtypes & (1u << dt))
                    n += snprintf(dts + n, sizeof dts - (size_t)n, "%s%s", n ? "," : "", kv_dtype_name((kv_dtype)dt));
            bad |= put(e, "source", str_json(t->source));
            bad |= put(e, "backend", str_json(t->backend));
            bad |= put(e, "op", str_json(t->op));
            bad |= put(e, "dtypes", str_json(dts));
            bad |= put(e, "check", str_json(t->check));
            bad |= put(e, "rule", str_json(t->rule));
            bad |= put(e, "reason", str_json(t->reason));
            bad |= put(e, "rows", json_integer((json_int_t)a->tol_uses[i]));
            bad |= json_array_append_new(list, e) != 0;
        }
        bad |= put(o, "tolerance_overrides", list);
    }
    const kv_report_hits *hits = a->hits;
    if (hits[0].cases > 0 || hits[1].cases > 0) {
        /* Only runs with a fastpath check have it (older readers skip it). */
        json_t *rates = json_object();
        bad |= rates == NULL;
        for (int g = 0; rates != NULL && g < KV_REPORT_GATES; g++) {
            const kv_report_hits *h = &hits[g];
            if (h->cases == 0) continue;
            json_t *one = json_object();
            bad |= one == NULL;
            if (one == NULL) continue;
            const int64_t calls = h->fast + h->manual + h->slow;
            bad |= put(one, "cases", json_integer((json_int_t)h->cases));
            bad |= put(one, "cases_hit", json_integer((json_int_t)h->cases_hit));
            bad |= put(one, "case_rate", real_json(h->cases > 0 ? (double)h->cases_hit / (double)h->cases : 0.0));
            bad |= put(one, "plain_cases", json_integer((json_int_t)h->plain_cases));
            bad |= put(one, "plain_hit", json_integer((json_int_t)h->plain_hit));
            bad |= put(one, "fast_calls", json_integer((json_int_t)h->fast));
            bad |= put(one, "manual_calls", json_integer((json_int_t)h->manual));
            bad |= put(one, "slow_calls", json_integer((json_int_t)h->slow));
            bad |= put(one, "call_rate", real_json(calls > 0 ? (double)(h->fast + h->manual) / (double)calls : 0.0));
            bad |= put(rates, h->gate, one);
        }
        if (rates != NULL) bad |= put(o, "fastpath_hit_rates", rates);
    }
    if (bad) {
        json_decref(o);
        return kv_error(KV_ERR_OOM, "report: '%s': cannot encode the meta data as JSON", path);
    }
    kv_report_file rf;
    kv_status st = kv_report_file_open(&rf, path);
    if (st != KV_OK) {
        json_decref(o);
        return st;
    }
    st = put_line(&rf, o, "meta");
    if (st != KV_OK) {
        kv_report_file_discard(&rf);
        return st;
    }
    return kv_report_file_close(&rf);
}
