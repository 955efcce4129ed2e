/* --dump=DIR writer (runner/dump.h). */
#include "runner/report/dump.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "kv/npy.h"
#include "runner/check/check.h"
#include "runner/check/check_util.h"
#include "runner/golden/hash.h"
#include "kv/tune.h"

#define DUMP_PATH_MAX 4096

/* mkdir -p: every prefix of path, ignoring those that exist. */
static kv_status dump_mkdirs(const char *path) {
    char buf[DUMP_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return kv_error(KV_ERR_INVALID_ARG, "dump: path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        const char saved = *p;
        if (saved != '/' && saved != '\0') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return kv_error(KV_ERR_INVALID_ARG, "dump: cannot create directory %s: %s", buf, strerror(errno));
        *p = saved;
        if (saved == '\0') break;
    }
    return KV_OK;
}

int kv_case_dump_dir(const kv_case *c, const char *dir, char *buf, int cap) {
    char id[KV_CASE_ID_MAX], hex[KV_HASH_HEX_LEN];
    kv_case_id(c, id, (int)sizeof id);
    kv_hash_format(kv_hash_string(id), hex);
    return snprintf(buf, (size_t)cap, "%s/%s/%s", dir, c->op, hex);
}

static json_t *dump_ints(const int64_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

static kv_status dump_write_npy(const char *dir, const char *name, const kv_tensor *t, json_t *obj) {
    char path[DUMP_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return kv_error(KV_ERR_INVALID_ARG, "dump: path too long under %s", dir);
    if (kv_npy_write(path, t) != KV_OK) return kv_error_prefix(kv_last_error(), "dump: %s", path);
    json_object_set_new(obj, "file", json_string(name));
    json_object_set_new(obj, "dtype", json_string(kv_dtype_name(t->dtype)));
    json_object_set_new(obj, "npy_descr", json_string(kv_npy_descr(t->dtype)));
    json_object_set_new(obj, "shape", dump_ints(t->sizes, t->ndim));
    return KV_OK;
}

kv_status kv_case_dump(const kv_case *c, const kv_op *op, const char *dir) {
    char out_dir[DUMP_PATH_MAX];
    if (kv_case_dump_dir(c, dir, out_dir, (int)sizeof out_dir) >= (int)sizeof out_dir)
        return kv_error(KV_ERR_INVALID_ARG, "dump: path too long under %s", dir);
    kv_status st = dump_mkdirs(out_dir);
    if (st != KV_OK) return st;

    char text[2 * KV_CASE_ID_MAX];
    json_t *root = json_object();
    kv_case_id(c, text, (int)sizeof text);
    json_object_set_new(root, "case_id", json_string(text));
    if (kv_check_golden_key(c, text, (int)sizeof text) == KV_OK) json_object_set_new(root, "golden_key", json_string(text));
    kv_case_repro(c, text, (int)sizeof text);
    json_object_set_new(root, "repro", json_string(text));
    json_object_set_new(root, "op", json_string(kv_op_name(op)));
    kv_schema_format(kv_op_schema(op), text, (int)sizeof text);
    json_object_set_new(root, "schema", json_string(text));
    json_object_set_new(root, "fill", json_string(kv_fill_name(c->fill)));
    snprintf(text, sizeof text, "%llu", (unsigned long long)c->seed);
    json_object_set_new(root, "seed", json_string(text));
    json_object_set_new(root, "expect", json_string(kv_case_expect_name(c->expect)));
    json_t *args = json_object();
    for (int i = 0; i < c->nargs; i++) json_object_set_new(args, c->args[i].name, json_string(c->args[i].value));
    json_object_set_new(root, "args", args);
    json_t *notes = json_array();
    json_array_append_new(notes, json_string("bf16 files hold raw '<u2' bit patterns: "
                                             "(x.astype(np.uint32) << 16).view(np.float32)"));
    json_array_append_new(notes, json_string("inputs hold logical values; rebuild the layout with "
                                             "torch.as_strided(storage, shape, strides, storage_offset)"));
    json_object_set_new(root, "notes", notes);

    /* Inputs in the case layout (on the CPU: the values are the same on
     * every device), for their strides and offsets. */
    const kv_schema *s = kv_op_schema(op);
    json_t *inputs = json_array();
    json_object_set_new(root, "inputs", inputs);
    kv_case_inputs in;
    st = kv_case_inputs_make(c, op, KV_DEVICE_CPU0, false, &in);
    for (int i = 0; st == KV_OK && i < in.ntensors; i++) {
        json_t *o = json_object();
        json_array_append_new(inputs, o);
        json_object_set_new(o, "arg", json_string(s->args[c->input_arg[i]].name));
        const kv_tensor *t = in.tensors[i];
        if (t == NULL) {
            json_object_set_new(o, "file", json_null());
            continue;
        }
        char name[32];
        snprintf(name, sizeof name, "input%d.npy", i);
        st = dump_write_npy(out_dir, name, t, o);
        json_object_set_new(o, "strides", dump_ints(t->strides, t->ndim));
        json_object_set_new(o, "storage_offset", json_integer((json_int_t)t->offset));
        json_object_set_new(o, "layout", json_string(kv_layout_name(c->layouts[i])));
    }
    kv_case_inputs_free(&in);

    /* Reference outputs of the golden problem. */
    json_t *outputs = json_array();
    json_object_set_new(root, "outputs", outputs);
    if (st == KV_OK) st = kv_case_inputs_make(c, op, KV_DEVICE_CPU0, true, &in);
    if (st == KV_OK) {
        kv_case_outputs out;
        const bool was_ref = kv_tune_reference_mode_set(true); /* "ref", not a tuned variant */
        const kv_status call = kv_case_invoke(op, &in, kv_keyset_of(KV_KEY_CPU), &out);
        kv_tune_reference_mode_set(was_ref);
        if (call != KV_OK || kv_check_box_bool(&out) != KV_OK || kv_check_materialize(&out) != KV_OK) {
            json_t *e = json_object();
            json_object_set_new(e, "code", json_string(kv_status_name(kv_last_error())));
            json_object_set_new(e, "message", json_string(kv_last_error_message()));
            json_object_set_new(root, "error", e);
        } else {
            for (int i = 0; i < out.n && st == KV_OK; i++) {
                json_t *o = json_object();
                json_array_append_new(outputs, o);
                char name[32];
                snprintf(name, sizeof name, "output%d.npy", i);
                st = dump_write_npy(out_dir, name, out.t[i], o);
            }
        }
        kv_case_outputs_free(&out);
        kv_case_inputs_free(&in);
    }
    if (st == KV_OK) {
        char path[DUMP_PATH_MAX];
        if (snprintf(path, sizeof path, "%s/case.json", out_dir) >= (int)sizeof path)
            st = kv_error(KV_ERR_INVALID_ARG, "dump: path too long under %s", out_dir);
        else if (json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
            st = kv_error(KV_ERR_INVALID_ARG, "dump: cannot write %s", path);
    }
    json_decref(root);
    return st;
}

/* "variants:CPU/avx2" -> "variants_CPU_avx2": a file name on any system. */
static void dump_label(const char *check, char *buf, size_t cap) {
    size_t n = 0;
    for (const char *p = check; *p && n + 1 < cap; p++) {
        const char ch = *p;
        const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                        ch == '.';
        buf[n++] = ok ? ch : '_';
    }
    buf[n] = '\0';
}

/* The row's verdict and its mismatching elements, as text. */
static kv_status dump_diff(const char *path, const kv_check_result *r) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return kv_error(KV_ERR_INVALID_ARG, "dump: cannot write %s: %s", path, strerror(errno));
    fprintf(f, "case:    %s\ncheck:   %s\nbackend: %s\nstatus:  %s\n%s\n", r->case_id, r->check, r->backend,
            kv_result_status_name(r->status), r->message);
    if (r->compared > 0 || r->mismatched > 0)
        fprintf(f, "%lld of %lld elements differ; max abs err %.9g, max ulp %.9g\n", (long long)r->mismatched,
                (long long)r->compared, r->max_abs_err, r->max_ulps);
    for (int i = 0; i < r->nmismatches && i < KV_RESULT_MAX_MISMATCHES; i++) {
        const kv_mismatch *m = &r->mismatches[i];
        fputs("at [", f);
        for (int d = 0; d < m->ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)m->index[d]);
        fprintf(f, "]: expected %.17g, got %.17g (abs err %.3g, rel err %.3g, ulp %.6g)\n", m->expected, m->got,
                m->abs_err, m->rel_err, m->ulps);
    }
    if (r->mismatched > r->nmismatches && r->nmismatches > 0)
        fprintf(f, "... and %lld more\n", (long long)(r->mismatched - r->nmismatches));
    fprintf(f, "repro: %s\n", r->repro);
    return fclose(f) == 0 ? KV_OK : kv_error(KV_ERR_INVALID_ARG, "dump: cannot write %s", path);
}

kv_status kv_case_dump_failure(const kv_case *c, const char *dir, const kv_check_result *r,
                               const kv_tensor *const *got, const kv_tensor *const *expected, int n) {
    char out_dir[DUMP_PATH_MAX], path[DUMP_PATH_MAX], label[64], name[128];
    if (kv_case_dump_dir(c, dir, out_dir, (int)sizeof out_dir) >= (int)sizeof out_dir)
        return kv_error(KV_ERR_INVALID_ARG, "dump: path too long under %s", dir);
    kv_status st = dump_mkdirs(out_dir);
    if (st != KV_OK) return st;
    if (snprintf(path, sizeof path, "%s/case.json", out_dir) >= (int)sizeof path)
        return kv_error(KV_ERR_INVALID_ARG, "dump: path too long under %s", out_dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr); /* written before the checks ran (check.c) */
    if (root == NULL) root = json_object();
    json_t *failures = json_object_get(root, "failures");
    if (!json_is_array(failures)) {
        failures = json_array();
        json_object_set_new(root, "failures", failures);
    }
    dump_label(r->check, label, sizeof label);
    json_t *entry = json_object();
    json_array_append_new(failures, entry);
    json_object_set_new(entry, "check", json_string(r->check));
    json_object_set_new(entry, "backend", json_string(r->backend));
    json_object_set_new(entry, "status", json_string(kv_result_status_name(r->status)));
    json_object_set_new(entry, "message", json_string(r->message));
    json_t *outs = json_array();
    json_object_set_new(entry, "outputs", outs);
    for (int i = 0; i < n && st == KV_OK; i++) {
        json_t *o = json_object();
        json_array_append_new(outs, o);
        json_object_set_new(o, "index", json_integer(i));
        if (got[i] != NULL) {
            snprintf(name, sizeof name, "%s.output%d.npy", label, i);
            st = dump_write_npy(out_dir, name, got[i], o);
        }
        if (st == KV_OK && expected != NULL && expected[i] != NULL) {
            /* What the row was compared against: the stored golden, or the
             * reference run live when the store has none (the notes of the
             * row say which). One file per output, shared by every row. */
            json_t *e = json_object();
            snprintf(name, sizeof name, "expected.output%d.npy", i);
            st = dump_write_npy(out_dir, name, expected[i], e);
            json_object_set_new(o, "expected_file", json_string(name));
            json_decref(e);
        }
    }
    if (st == KV_OK) {
        snprintf(name, sizeof name, "%s.diff.txt", label);
        if (snprintf(path, sizeof path, "%s/%s", out_dir, name) >= (int)sizeof path)
            st = kv_error(KV_ERR_INVALID_ARG, "dump: path too long under %s", out_dir);
        else st = dump_diff(path, r);
        json_object_set_new(entry, "diff", json_string(name));
    }
    json_t *files = json_object_get(root, "files");
    if (!json_is_object(files)) {
        files = json_object();
        json_object_set_new(root, "files", files);
        json_object_set_new(files, "input<i>.npy", json_string("tensor input i, logical values (inputs[i])"));
        json_object_set_new(files, "output<i>.npy", json_string("the reference kernel's output i (outputs[i])"));
        json_object_set_new(files, "expected.output<i>.npy",
                            json_string("what failing rows were compared against: the stored golden, or the "
                                        "reference run live when none is stored"));
        json_object_set_new(files, "<check>.output<i>.npy",
                            json_string("the failing backend's or variant's output i, one set per failures[] entry "
                                        "(check with ':' and '/' as '_', e.g. variants_CPU_avx2)"));
        json_object_set_new(files, "<check>.diff.txt", json_string("that row's verdict and mismatching elements"));
    }
    if (st == KV_OK) {
        if (snprintf(path, sizeof path, "%s/case.json", out_dir) >= (int)sizeof path ||
            json_dump_file(root, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0)
            st = kv_error(KV_ERR_INVALID_ARG, "dump: cannot write %s", path);
    }
    json_decref(root);
    return st;
}
