/* Comparing two finished runs (compare_runs.h): the policy, the
 * classification of a row, and the pass over both report folders. The old
 * run's rows are kept compact in a hash table (a few hundred bytes each);
 * the new run's rows are streamed against it, and only the rows with
 * something to say are kept for the reports. */
#include "runner/report/compare_internal.h"
#include "runner/report/jsonl_file.h"
#include "runner/report/merge.h"
#include "runner/report/report_internal.h"
#include "runner/golden/hash.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void kv_runcmp_policy_init(kv_runcmp_policy *p) {
    memset(p, 0, sizeof *p);
    /* Google Benchmark's compare.py defaults: 5% significance; 10% is the
     * slowdown issue 23 asks a user to be able to set, a default only. */
    p->perf_threshold = 0.1;
    p->perf_alpha = 0.05;
}

int kv_runcmp_policy_set_identical(kv_runcmp_policy *p, const char *list, char *why, int whycap) {
    const size_t n = strlen(list);
    if (n == 0 || n >= sizeof p->require_identical) {
        snprintf(why, (size_t)whycap, "--require-identical: %s", n == 0 ? "the list is empty" : "the list is too long");
        return -1;
    }
    size_t item = 0;
    for (size_t i = 0; i <= n; i++) {
        const char ch = list[i];
        if (ch == ',' || ch == '\0') {
            if (item == 0) {
                snprintf(why, (size_t)whycap, "--require-identical='%s': an empty item at byte %zu (items are "
                         "separated by ',')", list, i);
                return -1;
            }
            item = 0;
            continue;
        }
        if (!isalnum((unsigned char)ch) && strchr("_./*-", ch) == NULL) {
            snprintf(why, (size_t)whycap, "--require-identical='%s': '%c' at byte %zu is not allowed (a backend "
                     "label such as 'opencl', a key or key/variant such as 'CPU/avx2', or '*')", list, ch, i);
            return -1;
        }
        item++;
    }
    memcpy(p->require_identical, list, n + 1);
    return 0;
}

const char *kv_runcmp_kind_name(kv_runcmp_kind k) {
    switch (k) {
    case KV_RUNCMP_SAME: return "same";
    case KV_RUNCMP_REGRESSION: return "regression";
    case KV_RUNCMP_SUPPORT_REGRESSION: return "support-regression";
    case KV_RUNCMP_FIX: return "fix";
    case KV_RUNCMP_NEW_SUPPORT: return "new-support";
    case KV_RUNCMP_OTHER: return "status-change";
    case KV_RUNCMP_ADDED: return "added";
    case KV_RUNCMP_REMOVED: return "removed";
    case KV_RUNCMP_KIND_COUNT: break;
    }
    return "?";
}

/* The part of a variants/accuracy check name after its prefix: "CPU" or
 * "CPU/avx2" of "variants:CPU/avx2"; "" for other checks. */
static const char *runcmp_check_target(const char *check) {
    const char *colon = strchr(check, ':');
    if (colon == NULL) return "";
    if (strncmp(check, "variants:", 9) != 0 && strncmp(check, "accuracy:", 9) != 0) return "";
    return colon + 1;
}

bool kv_runcmp_identity_required(const kv_runcmp_policy *p, const char *check, const char *backend) {
    const char *list = p->require_identical;
    const char *target = runcmp_check_target(check);
    while (*list) {
        const char *end = strchr(list, ',');
        const size_t n = end ? (size_t)(end - list) : strlen(list);
        if (n == 1 && list[0] == '*') return true;
        if (strlen(backend) == n && strncasecmp(backend, list, n) == 0) return true;
        if (strlen(target) == n && strncmp(target, list, n) == 0) return true;
        /* A key names its variants too: "CPU" covers "CPU/avx2". */
        if (strncmp(target, list, n) == 0 && target[n] == '/') return true;
        list += n + (end ? 1 : 0);
    }
    return false;
}

static bool runcmp_passing(kv_result_status s) { return s == KV_RESULT_PASS || s == KV_RESULT_XPASS; }


static kv_runcmp_kind runcmp_transition(kv_result_status o, kv_result_status n) {
    if (o == n) return KV_RUNCMP_SAME;
    if (runcmp_passing(o) && kv_result_status_is_failure(n)) return KV_RUNCMP_REGRESSION;
    /* A perf_dispatch variant whose predicate stops accepting the inputs
     * makes its row SKIP, a backend without the kernel UNSUPPORTED: either
     * way what was checked is no longer run. */
    if (runcmp_passing(o) && (n == KV_RESULT_UNSUPPORTED || n == KV_RESULT_SKIP)) return KV_RUNCMP_SUPPORT_REGRESSION;
    if (kv_result_status_is_failure(o) && runcmp_passing(n)) return KV_RUNCMP_FIX;
    if ((o == KV_RESULT_UNSUPPORTED || o == KV_RESULT_SKIP) && runcmp_passing(n)) return KV_RUNCMP_NEW_SUPPORT;
    return KV_RUNCMP_OTHER;
}

void kv_runcmp_classify(const kv_runcmp_row *old, const kv_runcmp_row *new_row, const char *check,
                        const char *backend, const kv_runcmp_policy *p, kv_runcmp_finding *out) {
    memset(out, 0, sizeof *out);
    if (old == NULL || new_row == NULL) {
        out->kind = old == NULL ? KV_RUNCMP_ADDED : KV_RUNCMP_REMOVED;
        return;
    }
    out->kind = runcmp_transition(old->status, new_row->status);
    out->identity_required = kv_runcmp_identity_required(p, check, backend);
    const int n = old->nouts < new_row->nouts ? old->nouts : new_row->nouts;
    out->nouts = n;
    for (int i = 0; i < n; i++) {
        const kv_output_facts *a = &old->outs[i], *b = &new_row->outs[i];
        kv_runcmp_out *o = &out->outs[i];
        o->bits_changed = a->hash_set && b->hash_set && a->hash != b->hash;
        /* Doubles read back bit for bit (report_jsonl.c), so != is exact. */
        o->drift = a->elements > 0 && b->elements > 0 &&
                   (a->max_ulp != b->max_ulp || a->p999_ulp != b->p999_ulp || a->not_cr != b->not_cr);
        out->any_bits_changed |= o->bits_changed;
        out->any_drift |= o->drift;
    }
    /* An output that appeared or vanished is a change of the bits too. */
    if (old->nouts != new_row->nouts && old->nouts > 0 && new_row->nouts > 0) out->any_bits_changed = true;
    out->regression = out->kind == KV_RUNCMP_REGRESSION || out->kind == KV_RUNCMP_SUPPORT_REGRESSION ||
                      (out->identity_required && out->any_bits_changed);
}

/* ---- the old run's rows ---- */

typedef struct runcmp_table {
    kv_runcmp_row *slots;
    bool *seen;
    size_t cap, n;
} runcmp_table;

static char *runcmp_key(const kv_check_result *r) {
    const size_t a = strlen(r->case_id), b = strlen(r->check), c = strlen(r->backend);
    char *k = malloc(a + b + c + 3);
    if (k == NULL) return NULL;
    memcpy(k, r->case_id, a);
    k[a] = '\t';
    memcpy(k + a + 1, r->check, b);
    k[a + 1 + b] = '\t';
    memcpy(k + a + b + 2, r->backend, c + 1);
    return k;
}

static size_t runcmp_find(const runcmp_table *t, const char *key) {
    size_t i = (size_t)kv_hash_string(key) & (t->cap - 1);
    while (t->slots[i].key != NULL && strcmp(t->slots[i].key, key) != 0) i = (i + 1) & (t->cap - 1);
    return i;
}

static kv_status runcmp_table_grow(runcmp_table *t) {
    runcmp_table g = { NULL, NULL, t->cap ? t->cap * 2 : 4096, t->n };
    g.slots = calloc(g.cap, sizeof *g.slots);
    g.seen = calloc(g.cap, sizeof *g.seen);
    if (g.slots == NULL || g.seen == NULL) {
        free(g.slots);
        free(g.seen);
        return kv_error(KV_ERR_OOM, "compare: out of memory for the old run's rows");
    }
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key != NULL) g.slots[runcmp_find(&g, t->slots[i].key)] = t->slots[i];
    free(t->slots);
    free(t->seen);
    *t = g;
    return KV_OK;
}

static void runcmp_table_free(runcmp_table *t) {
    for (size_t i = 0; i < t->cap; i++) free(t->slots[i].key);
    free(t->slots);
    free(t->seen);
    memset(t, 0, sizeof *t);
}

static void runcmp_row_of(const kv_check_result *r, kv_runcmp_row *row) {
    row->status = r->status;
    row->nouts = r->nouts < 0 ? 0 : (r->nouts > KV_RESULT_MAX_OUTPUTS ? KV_RESULT_MAX_OUTPUTS : r->nouts);
    memcpy(row->outs, r->outs, sizeof row->outs);
}

/* Calls each(ctx, r) for every row of DIR/results.jsonl; a malformed line
 * is an error naming path:line. */
typedef kv_status (*runcmp_each_fn)(void *ctx, const kv_check_result *r);

static kv_status runcmp_scan(const char *dir, runcmp_each_fn each, void *ctx) {
    char *path = kv_jsonl_path_in(dir);
    kv_check_result *r = malloc(sizeof *r);
    if (path == NULL || r == NULL) {
        free(path);
        free(r);
        return kv_error(KV_ERR_OOM, "compare: out of memory");
    }
    kv_jsonl_reader rd;
    kv_status st = kv_jsonl_open(&rd, path, ""); /* the caller says "compare: not comparable" */
    if (st == KV_OK) {
        int64_t len;
        char why[512];
        while (st == KV_OK && (len = kv_jsonl_next(&rd)) >= 0) {
            if (kv_merge_parse_line(rd.line, r, why, sizeof why) != 0)
                st = kv_error(KV_ERR_INVALID_ARG, "'%s':%lld: %s", path, (long long)rd.lineno, why);
            else
                st = each(ctx, r);
        }
        if (st == KV_OK && len == -2) st = kv_last_error();
        kv_jsonl_close(&rd);
    }
    free(path);
    free(r);
    return st;
}

static kv_status runcmp_add_old(void *ctx, const kv_check_result *r) {
    runcmp_table *t = ctx;
    if ((t->n + 1) * 2 > t->cap && runcmp_table_grow(t) != KV_OK) return kv_last_error();
    char *key = runcmp_key(r);
    if (key == NULL) return kv_error(KV_ERR_OOM, "compare: out of memory");
    const size_t i = runcmp_find(t, key);
    if (t->slots[i].key != NULL) {
        /* The same row twice (a backend's load row repeated): the last wins. */
        free(key);
    } else {
        t->slots[i].key = key;
        t->n++;
    }
    runcmp_row_of(r, &t->slots[i]);
    return KV_OK;
}

kv_status kv_runcmp_item_push(kv_runcmp_result *res, const kv_runcmp_item *it) {
    if (res->nitems == res->capitems) {
        const int cap = res->capitems ? res->capitems * 2 : 64;
        kv_runcmp_item *items = realloc(res->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_error(KV_ERR_OOM, "compare: out of memory for the changed rows");
        res->items = items;
        res->capitems = cap;
    }
    res->items[res->nitems++] = *it;
    return KV_OK;
}

void kv_runcmp_result_free(kv_runcmp_result *res) {
    free(res->items);
    free(res->perf);
    memset(res, 0, sizeof *res);
}

typedef struct runcmp_pass {
    runcmp_table *old;
    kv_runcmp_result *res;
} runcmp_pass;

static void runcmp_count(kv_runcmp_result *res, const kv_runcmp_finding *f) {
    res->counts[f->kind]++;
    res->bits_changed += f->any_bits_changed;
    res->drifted += f->any_drift;
    res->identity_violations += f->identity_required && f->any_bits_changed;
    res->regressions += f->regression;
}

static kv_status runcmp_add_new(void *ctx, const kv_check_result *r) {
    runcmp_pass *pass = ctx;
    char *key = runcmp_key(r);
    if (key == NULL) return kv_error(KV_ERR_OOM, "compare: out of memory");
    const size_t i = runcmp_find(pass->old, key);
    free(key);
    const kv_runcmp_row *old = pass->old->slots[i].key != NULL ? &pass->old->slots[i] : NULL;
    kv_runcmp_row now;
    runcmp_row_of(r, &now);
    kv_runcmp_item it;
    memset(&it, 0, sizeof it);
    kv_runcmp_classify(old, &now, r->check, r->backend, pass->res->policy, &it.f);
    if (old != NULL) {
        if (pass->old->seen[i]) return KV_OK; /* a repeated row: counted once */
        pass->old->seen[i] = true;
        pass->res->compared++;
    }
    runcmp_count(pass->res, &it.f);
    if (it.f.kind == KV_RUNCMP_SAME && !it.f.any_bits_changed && !it.f.any_drift) return KV_OK;
    snprintf(it.case_id, sizeof it.case_id, "%s", r->case_id);
    snprintf(it.check, sizeof it.check, "%s", r->check);
    snprintf(it.backend, sizeof it.backend, "%s", r->backend);
    it.has_new = true;
    it.new_status = r->status;
    it.has_old = old != NULL;
    if (old != NULL) {
        it.old_status = old->status;
        memcpy(it.old_outs, old->outs, sizeof it.old_outs);
    }
    memcpy(it.new_outs, now.outs, sizeof it.new_outs);
    it.nouts = now.nouts > (old ? old->nouts : 0) ? now.nouts : (old ? old->nouts : 0);
    return kv_runcmp_item_push(pass->res, &it);
}

/* The rows of the old run the new one lacks. */
static kv_status runcmp_removed(runcmp_table *t, kv_runcmp_result *res) {
    for (size_t i = 0; i < t->cap; i++) {
        if (t->slots[i].key == NULL || t->seen[i]) continue;
        kv_runcmp_item it;
        memset(&it, 0, sizeof it);
        kv_runcmp_classify(&t->slots[i], NULL, "", "", res->policy, &it.f);
        runcmp_count(res, &it.f);
        /* key is case_id \t check \t backend */
        const char *k = t->slots[i].key;
        const char *t1 = strchr(k, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (t1 == NULL || t2 == NULL) continue;
        snprintf(it.case_id, sizeof it.case_id, "%.*s", (int)(t1 - k), k);
        snprintf(it.check, sizeof it.check, "%.*s", (int)(t2 - t1 - 1), t1 + 1);
        snprintf(it.backend, sizeof it.backend, "%s", t2 + 1);
        it.has_old = true;
        it.old_status = t->slots[i].status;
        it.nouts = t->slots[i].nouts;
        memcpy(it.old_outs, t->slots[i].outs, sizeof it.old_outs);
        if (kv_runcmp_item_push(res, &it) != KV_OK) return kv_last_error();
    }
    return KV_OK;
}

/* ---- comparability ---- */

static void runcmp_fp_field(kv_runcmp_result *res, const char *name, const char *a, const char *b) {
    if (strcmp(a, b) == 0) return;
    const size_t n = strlen(res->fp_diff);
    snprintf(res->fp_diff + n, sizeof res->fp_diff - n, "%s: '%s' -> '%s'\n", name, a, b);
}

/* 0 when comparable, else -1 with the reason. */
static int runcmp_metas(const char *old_dir, const char *new_dir, kv_runcmp_result *res, char *why, int whycap) {
    kv_report_meta m[2];
    const char *dirs[2] = { old_dir, new_dir };
    for (int i = 0; i < 2; i++) {
        char *path = kv_report_dup_join(dirs[i], "/" KV_REPORT_META);
        const kv_status st = path ? kv_merge_read_meta(path, &m[i], NULL) : KV_ERR_OOM;
        free(path);
        if (st != KV_OK) {
            snprintf(why, (size_t)whycap, "the %s run '%s' is not a readable kvsuite report: %s", i ? "new" : "old",
                     dirs[i], kv_last_error_message());
            return -1;
        }
        if (m[i].incomplete) {
            snprintf(why, (size_t)whycap, "the %s run '%s' did not finish (%lld of %lld cases): compare complete runs",
                     i ? "new" : "old", dirs[i], (long long)m[i].ncases_done, (long long)m[i].ncases);
            return -1;
        }
    }
    if (m[0].seed != m[1].seed) {
        snprintf(why, (size_t)whycap,
                 "the seeds differ (old %llu, new %llu): the inputs are derived from the seed, so no output can be "
                 "compared; run the new one with --seed=%llu",
                 (unsigned long long)m[0].seed, (unsigned long long)m[1].seed, (unsigned long long)m[0].seed);
        return -1;
    }
    const kv_report_fingerprint *a = &m[0].fingerprint, *b = &m[1].fingerprint;
    runcmp_fp_field(res, "version", a->version, b->version);
    runcmp_fp_field(res, "cases", a->cases, b->cases);
    runcmp_fp_field(res, "options", a->options, b->options);
    runcmp_fp_field(res, "gates", a->gates, b->gates);
    runcmp_fp_field(res, "backends", a->backends, b->backends);
    runcmp_fp_field(res, "env", a->env, b->env);
    return 0;
}

/* A --mode=perf folder: perf.jsonl and no meta.json. */
static bool runcmp_perf_only(const char *dir) {
    char *meta = kv_report_dup_join(dir, "/" KV_REPORT_META), *perf = kv_report_dup_join(dir, "/perf.jsonl");
    FILE *m = meta ? fopen(meta, "r") : NULL, *p = perf ? fopen(perf, "r") : NULL;
    const bool only = m == NULL && p != NULL;
    if (m) fclose(m);
    if (p) fclose(p);
    free(meta);
    free(perf);
    return only;
}

static kv_status runcmp_write_all(const kv_runcmp_result *res, const char *out_dir) {
    static const char *const names[] = { "compare.md", "compare.jsonl", "compare.junit.xml", "report.html" };
    kv_status first = kv_report_mkdirs(out_dir);
    if (first != KV_OK) return first;
    for (int i = 0; i < 4; i++) {
        char *slash = kv_report_dup_join(out_dir, "/");
        char *path = slash ? kv_report_dup_join(slash, names[i]) : NULL;
        free(slash);
        if (path == NULL) return kv_error(KV_ERR_OOM, "compare: out of memory");
        kv_status st = KV_OK;
        switch (i) {
        case 0: st = kv_runcmp_write_md(res, path); break;
        case 1: st = kv_runcmp_write_jsonl(res, path); break;
        case 2: st = kv_runcmp_write_junit(res, path); break;
        default: st = kv_runcmp_write_html_section(res, path); break;
        }
        free(path);
        if (st != KV_OK && first == KV_OK) first = st;
    }
    return first;
}

kv_status kv_runcmp_dirs(const char *old_dir, const char *new_dir, const char *out_dir, const kv_runcmp_policy *p,
                         FILE *console, int *exit_code) {
    if (old_dir == NULL || new_dir == NULL || out_dir == NULL || p == NULL || exit_code == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "kv_runcmp_dirs: an argument is NULL");
    kv_runcmp_result *res = calloc(1, sizeof *res);
    if (res == NULL) return kv_error(KV_ERR_OOM, "compare: out of memory");
    res->policy = p;
    snprintf(res->old_dir, sizeof res->old_dir, "%s", old_dir);
    snprintf(res->new_dir, sizeof res->new_dir, "%s", new_dir);
    char why[1024] = "";
    runcmp_table old = { 0 };
    kv_status st = KV_OK;
    if (runcmp_perf_only(old_dir) && runcmp_perf_only(new_dir)) {
        /* Two --mode=perf folders: their timings are all there is. */
        st = kv_runcmp_perf_dirs(old_dir, new_dir, res);
        if (st != KV_OK) {
            snprintf(why, sizeof why, "%s", kv_last_error_message());
            if (st != KV_ERR_OOM) st = KV_OK;
        } else if (res->nperf == 0) {
            snprintf(why, sizeof why, "the perf runs have no (case, backend, variant) with samples in common");
        }
    } else if (runcmp_metas(old_dir, new_dir, res, why, (int)sizeof why) == 0) {
        st = runcmp_scan(old_dir, runcmp_add_old, &old);
        runcmp_pass pass = { &old, res };
        if (st == KV_OK) st = runcmp_scan(new_dir, runcmp_add_new, &pass);
        if (st == KV_OK) st = runcmp_removed(&old, res);
        if (st == KV_OK) st = kv_runcmp_perf_dirs(old_dir, new_dir, res);
        if (st != KV_OK) {
            snprintf(why, sizeof why, "%s", kv_last_error_message());
            if (st != KV_ERR_OOM) st = KV_OK; /* unreadable input: not comparable */
        } else if (res->compared == 0) {
            snprintf(why, sizeof why, "the runs have no (case, check, backend) row in common");
        }
    }
    runcmp_table_free(&old);
    if (st == KV_OK && why[0]) {
        fprintf(console, "kvrun: compare: not comparable: %s\n", why);
        *exit_code = KV_RUNCMP_EXIT_NOT_COMPARABLE;
    } else if (st == KV_OK) {
        st = runcmp_write_all(res, out_dir);
        const int64_t regs = res->regressions + res->perf_regressions;
        fprintf(console,
                "== compare with %s: %lld rows in both runs; %lld regression%s (%lld failing, %lld support, %lld "
                "identity, %lld perf), %lld fix%s, %lld with changed bits, %lld with accuracy drift; %s/compare.md\n",
                old_dir, (long long)res->compared, (long long)regs, regs == 1 ? "" : "s",
                (long long)res->counts[KV_RUNCMP_REGRESSION], (long long)res->counts[KV_RUNCMP_SUPPORT_REGRESSION],
                (long long)res->identity_violations, (long long)res->perf_regressions,
                (long long)res->counts[KV_RUNCMP_FIX], res->counts[KV_RUNCMP_FIX] == 1 ? "" : "es",
                (long long)res->bits_changed, (long long)res->drifted, out_dir);
        if (res->fp_diff[0]) fprintf(console, "kvrun: compare: fingerprints differ:\n%s", res->fp_diff);
        *exit_code = regs > 0 ? KV_RUNCMP_EXIT_REGRESSION : KV_RUNCMP_EXIT_OK;
    }
    kv_runcmp_result_free(res);
    free(res);
    return st;
}
