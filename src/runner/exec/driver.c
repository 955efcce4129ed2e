/* The runner pipeline behind runner/driver.h: collection, selection, the
 * run, regeneration, baseline and reports. */
#include "runner/exec/driver.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kv/dispatch.h"
#include "runner/report/baseline.h"
#include "runner/check/check_fastpath.h"
#include "runner/case/filter.h"
#include "runner/golden/golden.h"
#include "runner/golden/exact.h"
#include "runner/report/report.h"
#include "runner/exec/budget.h"
#include "runner/exec/progress.h"
#include "runner/exec/last_failed.h"
#include "runner/check/row_select.h"
#include "runner/exec/resume.h"
#include "runner/exec/retry.h"

void kv_driver_options_init(kv_driver_options *o) {
    memset(o, 0, sizeof *o);
    o->isolate = KV_ISOLATE_FORK;
}

kv_status kv_driver_options_check(const kv_driver_options *o) {
    if (o->jobs < 0) return kv_error(KV_ERR_INVALID_ARG, "--jobs=%d: must be at least 1", o->jobs);
    if (o->shard_n < 0 || (o->shard_n > 0 && (o->shard_k < 1 || o->shard_k > o->shard_n))) {
        return kv_error(KV_ERR_INVALID_ARG, "--shard=%d/%d: K must be between 1 and N (N >= 1)", o->shard_k,
                        o->shard_n);
    }
    if (!(o->timeout_seconds >= 0) || o->timeout_seconds > 1e9) {
        return kv_error(KV_ERR_INVALID_ARG, "--timeout=%g: must be a positive number of seconds",
                        o->timeout_seconds);
    }
    if (o->retry < 0 || o->retry > KV_RETRY_MAX)
        return kv_error(KV_ERR_INVALID_ARG, "--retry=%d: must be a whole number from 0 to %d", o->retry, KV_RETRY_MAX);
    /* A regeneration records what the reference computes: there is no
     * failure to retry, and a rerun would write the store twice. */
    if (o->retry > 0 && o->regen_golden)
        return kv_error(KV_ERR_INVALID_ARG, "--retry=%d does not apply to --regen-golden", o->retry);
    if (!(o->deadline_seconds >= 0) || o->deadline_seconds > 1e7)
        return kv_error(KV_ERR_INVALID_ARG, "--deadline=%g: must be a number of seconds > 0 (at most 1e7)",
                        o->deadline_seconds);
    if (o->max_failures < 0)
        return kv_error(KV_ERR_INVALID_ARG, "--max-failures=%d: must be a whole number >= 1", o->max_failures);
    if (o->resume && o->regen_golden)
        return kv_error(KV_ERR_INVALID_ARG, "--resume does not apply to --regen-golden (it rewrites the store whole)");
    if (o->nfilters < 0 || (o->nfilters > 0 && o->filters == NULL)) {
        return kv_error(KV_ERR_INVALID_ARG, "driver: argument 'filters': NULL with a count of %d", o->nfilters);
    }
    if (o->nfilters_out < 0 || (o->nfilters_out > 0 && o->filters_out == NULL))
        return kv_error(KV_ERR_INVALID_ARG, "driver: argument 'filters_out': NULL with a count of %d",
                        o->nfilters_out);
    /* The interrupted run's results.jsonl is this run's: its failures are
     * not the ones the run started from. */
    if (o->resume && o->last_failed)
        return kv_error(KV_ERR_INVALID_ARG, "--last-failed does not apply to --resume (give the same arguments "
                                            "without --last-failed)");
    return KV_OK;
}

/* ---- paths ---- */

kv_status kv_path_list_push(kv_path_list *l, const char *path) {
    if (l->n == l->cap) {
        const int cap = l->cap ? l->cap * 2 : 16;
        char **items = realloc(l->items, (size_t)cap * sizeof *items);
        if (items == NULL) return kv_error(KV_ERR_OOM, "collect: out of memory");
        l->items = items;
        l->cap = cap;
    }
    char *s = strdup(path);
    if (s == NULL) return kv_error(KV_ERR_OOM, "collect: out of memory");
    l->items[l->n++] = s;
    return KV_OK;
}

void kv_path_list_free(kv_path_list *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

static bool kv_ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static char *kv_path_join(const char *dir, const char *name) {
    const size_t n = strlen(dir);
    const bool slash = n > 0 && dir[n - 1] == '/';
    const size_t len = n + (slash ? 0 : 1) + strlen(name) + 1;
    char *p = malloc(len);
    if (p != NULL) snprintf(p, len, "%s%s%s", dir, slash ? "" : "/", name);
    return p;
}

/* Every *.case under dir, unsorted. Names starting with '.' (editor and
 * VCS files) are skipped; symbolic links to directories are not
 * followed, so a link cycle cannot make the walk endless. */
static kv_status kv_walk(const char *dir, kv_path_list *out) {
    DIR *d = opendir(dir);
    if (d == NULL) return kv_error(KV_ERR_INVALID_ARG, "%s: cannot open directory: %s", dir, strerror(errno));
    kv_status st = KV_OK;
    struct dirent *e;
    while (st == KV_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char *p = kv_path_join(dir, e->d_name);
        if (p == NULL) {
            st = kv_error(KV_ERR_OOM, "collect: out of memory");
            break;
        }
        struct stat lsb, sb;
        if (lstat(p, &lsb) == 0 && S_ISDIR(lsb.st_mode)) {
            st = kv_walk(p, out);
        } else if (kv_ends_with(e->d_name, ".case") && stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) {
            st = kv_path_list_push(out, p);
        }
        free(p);
    }
    closedir(d);
    return st;
}

static int kv_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

kv_status kv_driver_collect(const char *path, kv_path_list *files) {
    if (path == NULL || path[0] == '\0') return kv_error(KV_ERR_INVALID_ARG, "collect: argument 'path': empty");
    struct stat sb;
    if (stat(path, &sb) != 0) return kv_error(KV_ERR_INVALID_ARG, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return kv_path_list_push(files, path);
    kv_path_list found = { 0 };
    kv_status st = kv_walk(path, &found);
    if (st == KV_OK && found.n == 0) st = kv_error(KV_ERR_INVALID_ARG, "%s: no *.case files in this directory", path);
    if (st == KV_OK) qsort(found.items, (size_t)found.n, sizeof *found.items, kv_cmp_str);
    for (int i = 0; st == KV_OK && i < found.n; i++) st = kv_path_list_push(files, found.items[i]);
    kv_path_list_free(&found);
    return st;
}

/* ---- loading ---- */

typedef struct kv_load_skip {
    kv_grammar_skip_fn inner;
    void *ctx;
    const char *own;   /* the --batch=FILE token the driver appended */
} kv_load_skip;

static bool kv_claimed(const kv_load_skip *s, const char *arg) {
    return s->inner != NULL && s->inner(arg, s->ctx);
}

/* The per-file command line leaves the user's own --batch= includes out:
 * they are parsed once, not once per file. */
static bool kv_skip_batches(const char *arg, void *ctx) {
    const kv_load_skip *s = ctx;
    return arg != s->own && (kv_claimed(s, arg) || strncmp(arg, "--batch=", 8) == 0);
}

kv_status kv_driver_load(int argc, char *const argv[], kv_grammar_skip_fn skip, void *ctx,
                         const kv_path_list *files, kv_case_list *out) {
    const kv_load_skip sk = { skip, ctx, NULL };
    bool options = false, batches = false;
    int op_col = 0;
    int col = argc > 0 ? (int)strlen(argv[0]) + 2 : 1;
    for (int i = 1; i < argc; i++) {
        if (!kv_claimed(&sk, argv[i])) {
            if (strncmp(argv[i], "--batch=", 8) == 0) {
                batches = true;
            } else {
                options = true;
                if (strncmp(argv[i], "--op=", 5) == 0 && op_col == 0) op_col = col;
            }
        }
        col += (int)strlen(argv[i]) + 1;
    }
    kv_spec_list specs = { 0 };
    kv_status st = KV_OK;
    if (files == NULL || files->n == 0) {
        st = kv_grammar_parse_argv(argc, argv, skip, ctx, &specs);
    } else if (op_col > 0) {
        st = kv_spec_error(KV_ERR_INVALID_ARG, KV_GRAMMAR_CMDLINE, 1, op_col,
                           "--op= cannot be combined with case files (a case line cannot include files; "
                           "use --filter= to pick cases from files)");
    } else {
        if (batches) st = kv_grammar_parse_argv(argc, argv, skip, ctx, &specs);
        char **av = NULL;
        if (st == KV_OK && options) {
            av = malloc((size_t)(argc + 1) * sizeof *av);
            if (av == NULL) st = kv_error(KV_ERR_OOM, "load: out of memory");
        }
        for (int f = 0; st == KV_OK && f < files->n; f++) {
            const char *path = files->items[f];
            if (!options) {
                st = kv_grammar_parse_file(path, &specs);
                continue;
            }
            /* The grammar's --batch semantics make the command line's
             * options defaults over the file; the token goes last so the
             * columns of the real arguments stay what the user typed. */
            if (strpbrk(path, ",[]") != NULL) {
                st = kv_error(KV_ERR_INVALID_ARG,
                              "%s: a case file whose name holds ',', '[' or ']' cannot take command-line "
                              "case options (rename it, or drop the options)",
                              path);
                break;
            }
            const size_t len = strlen(path) + 9;
            char *tok = malloc(len);
            if (tok == NULL) {
                st = kv_error(KV_ERR_OOM, "load: out of memory");
                break;
            }
            snprintf(tok, len, "--batch=%s", path);
            for (int i = 0; i < argc; i++) av[i] = argv[i];
            av[argc] = tok;
            kv_load_skip inner = sk;
            inner.own = tok;
            st = kv_grammar_parse_argv(argc + 1, av, kv_skip_batches, &inner, &specs);
            free(tok);
        }
        free(av);
    }
    if (st == KV_OK) st = kv_spec_list_expand(&specs, out);
    kv_spec_list_free(&specs);
    return st;
}

/* ---- selection ---- */

typedef struct kv_id_ref {
    const char *id;
    int index;
} kv_id_ref;

static int kv_cmp_id(const void *a, const void *b) {
    const kv_id_ref *x = a, *y = b;
    const int c = strcmp(x->id, y->id);
    if (c != 0) return c;
    return (x->index > y->index) - (x->index < y->index);
}

kv_status kv_driver_select(const kv_driver_options *o, const kv_case_list *cases, int **sel, int *nsel,
                           FILE *err) {
    *sel = NULL;
    *nsel = 0;
    kv_filter filter = { 0 }, filter_out = { 0 };
    kv_id_set failed = { 0 };
    kv_status st = KV_OK;
    for (int i = 0; st == KV_OK && i < o->nfilters; i++) st = kv_filter_add(&filter, o->filters[i]);
    for (int i = 0; st == KV_OK && i < o->nfilters_out; i++) st = kv_filter_add(&filter_out, o->filters_out[i]);
    if (st == KV_OK && (o->last_failed || o->failed_first))
        st = kv_last_failed_load(o->report_dir ? o->report_dir : KV_DRIVER_DEFAULT_REPORT_DIR, o->last_failed,
                                 &failed);
    if (st != KV_OK) {
        kv_filter_free(&filter);
        kv_filter_free(&filter_out);
        return st;
    }
    const int n = cases->n;
    char **ids = calloc((size_t)(n > 0 ? n : 1), sizeof *ids);
    kv_id_ref *refs = malloc((size_t)(n > 0 ? n : 1) * sizeof *refs);
    bool *keep = malloc((size_t)(n > 0 ? n : 1) * sizeof *keep);
    int *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (ids == NULL || refs == NULL || keep == NULL || out == NULL) st = kv_error(KV_ERR_OOM, "select: out of memory");
    for (int i = 0; st == KV_OK && i < n; i++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(&cases->items[i], id, sizeof id);
        ids[i] = strdup(id);
        if (ids[i] == NULL) st = kv_error(KV_ERR_OOM, "select: out of memory");
        refs[i].id = ids[i];
        refs[i].index = i;
        keep[i] = true;
    }
    if (st == KV_OK) {
        /* Sorted by (ID, index): the first of a run of equal IDs is the
         * first occurrence, which is the one that stays. */
        qsort(refs, (size_t)n, sizeof *refs, kv_cmp_id);
        int dropped = 0;
        /* `first` is where the current run of equal IDs starts, kept as we
         * go: looking back from each duplicate made a line with many
         * identical alternatives quadratic. */
        for (int i = 1, first = 0; i < n; i++) {
            if (strcmp(refs[i].id, refs[i - 1].id) != 0) {
                first = i;
                continue;
            }
            keep[refs[i].index] = false;
            if (err != NULL && dropped < KV_DRIVER_DUPLICATES_SHOWN) {
                const kv_case *a = &cases->items[refs[first].index], *b = &cases->items[refs[i].index];
                fprintf(err, "kvrun: warning: %s:%d: duplicate case %s (first at %s:%d); it runs once\n",
                        b->origin.file, b->origin.line, refs[i].id, a->origin.file, a->origin.line);
            }
            dropped++;
        }
        if (err != NULL && dropped > KV_DRIVER_DUPLICATES_SHOWN) {
            fprintf(err, "kvrun: warning: %d duplicate cases in all (each runs once)\n", dropped);
        }
        int j = 0, m = 0;
        for (int i = 0; i < n; i++) {
            if (!keep[i] || !kv_filter_match(&filter, ids[i])) continue;
            if (filter_out.n > 0 && kv_filter_match(&filter_out, ids[i])) continue;
            if (o->last_failed && !kv_id_set_has(&failed, ids[i])) continue;
            if (o->shard_n <= 0 || j % o->shard_n == o->shard_k - 1) out[m++] = i;
            j++;
        }
        /* A stable partition: failed cases first, each part in file order. */
        if (o->failed_first && failed.n > 0) {
            int f = 0;
            for (int i = 0; i < m; i++) {
                if (!kv_id_set_has(&failed, ids[out[i]])) continue;
                const int v = out[i];
                memmove(&out[f + 1], &out[f], (size_t)(i - f) * sizeof *out);
                out[f++] = v;
            }
        }
        *sel = out;
        *nsel = m;
        out = NULL;
    }
    for (int i = 0; ids != NULL && i < n; i++) free(ids[i]);
    free(ids);
    free(refs);
    free(keep);
    free(out);
    kv_filter_free(&filter);
    kv_filter_free(&filter_out);
    kv_id_set_free(&failed);
    return st;
}

/* Why a selection came out empty, when it can be told: a glob without a
 * wildcard must match the whole ID ("mul.Tensor" selects nothing, every
 * ID goes on with its options), so the nearest wider glob that selects
 * cases is named with its count; --last-failed after a green run says so. */
static void kv_select_hint(const kv_driver_options *o, const kv_case_list *cases, FILE *err) {
    if (o->last_failed) {
        kv_id_set failed = { 0 };
        const char *dir = o->report_dir ? o->report_dir : KV_DRIVER_DEFAULT_REPORT_DIR;
        if (kv_last_failed_load(dir, true, &failed) == KV_OK)
            fprintf(err, "kvrun: hint: --last-failed: the previous run in %s/ had %d failed case%s (of %d rows)%s\n", dir,
                    failed.n, failed.n == 1 ? "" : "s", failed.rows,
                    failed.n > 0 ? "; none of them is among these cases and filters" : "");
        kv_id_set_free(&failed);
    }
    for (int p = 0; p < o->nfilters; p++) {
        const char *pat = o->filters[p];
        if (strncmp(pat, "re:", 3) == 0 || strpbrk(pat, "*?") != NULL) continue;
        /* The op's cases, then any ID starting so, then containing it. */
        static const char *const forms[][2] = { { "", "(*" }, { "", "*" }, { "*", "*" } };
        for (size_t f = 0; f < sizeof forms / sizeof forms[0]; f++) {
            char wider[KV_CASE_ID_MAX + 8];
            snprintf(wider, sizeof wider, "%s%s%s", forms[f][0], pat, forms[f][1]);
            kv_filter one = { 0 };
            if (kv_filter_add(&one, wider) != KV_OK) break;
            int hits = 0;
            char example[KV_CASE_ID_MAX] = "";
            for (int i = 0; i < cases->n; i++) {
                char id[KV_CASE_ID_MAX];
                kv_case_id(&cases->items[i], id, sizeof id);
                if (!kv_filter_match(&one, id)) continue;
                if (hits++ == 0) snprintf(example, sizeof example, "%s", id);
            }
            kv_filter_free(&one);
            if (hits == 0) continue;
            fprintf(err,
                    "kvrun: hint: --filter=%s is a glob over the whole case ID (such as '%s'); "
                    "--filter='%s' selects %d case%s\n",
                    pat, example, wider, hits, hits == 1 ? "" : "s");
            break;
        }
    }
}

/* ---- the run ---- */

static double kv_wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int kv_default_jobs(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 && n <= 1024 ? (int)n : 1;
}

static void kv_put_text(char *buf, int cap, int *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void kv_put_text(char *buf, int cap, int *n, const char *fmt, ...) {
    if (*n >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, (size_t)(cap - *n), fmt, ap);
    va_end(ap);
    if (k > 0) *n = *n + k < cap ? *n + k : cap - 1;
}

static void kv_fill_meta(kv_report_meta *meta, const kv_driver_options *o, const kv_case_list *cases, int nsel,
                         const kv_isolate_config *cfg) {
    kv_report_meta_init(meta);
    snprintf(meta->run_name, sizeof meta->run_name, "%s", o->run_name ? o->run_name : "");
    /* The seed every input case shares, else 0. Taken before filter and
     * shard so that every shard of one run reports the same seed (merge
     * refuses folders of different seeds). */
    uint64_t seed = cases->n > 0 ? cases->items[0].seed : 0;
    for (int i = 1; i < cases->n; i++) {
        if (cases->items[i].seed != seed) {
            seed = 0;
            break;
        }
    }
    meta->seed = seed;
    int n = 0;
    char *b = meta->options;
    const int cap = (int)sizeof meta->options;
    kv_put_text(b, cap, &n, "isolate=%s", kv_isolate_mode_name(cfg->mode));
    if (cfg->mode == KV_ISOLATE_FORK) {
        kv_put_text(b, cap, &n, " jobs=%d timeout=%gs", cfg->jobs, cfg->timeout_seconds);
        int mib = -1;
        if (kv_isolate_worker_mem(cfg, &mib) == KV_OK && mib > 0) kv_put_text(b, cap, &n, " worker-mem=%dMiB", mib);
        else kv_put_text(b, cap, &n, " worker-mem=none");
    }
    if (o->regen_golden) kv_put_text(b, cap, &n, " regen-golden");
    for (int i = 0; i < o->nfilters; i++) kv_put_text(b, cap, &n, " filter=%s", o->filters[i]);
    for (int i = 0; i < o->nfilters_out; i++) kv_put_text(b, cap, &n, " filter-out=%s", o->filters_out[i]);
    if (o->last_failed) kv_put_text(b, cap, &n, " last-failed");
    char rows[192];
    kv_row_select_describe(rows, (int)sizeof rows);
    kv_put_text(b, cap, &n, "%s", rows);
    if (o->baseline_path) kv_put_text(b, cap, &n, " baseline=%s", o->baseline_path);
    if (o->dump_dir) kv_put_text(b, cap, &n, " dump=%s", o->dump_dir);
    if (o->retry > 0) kv_put_text(b, cap, &n, " retry=%d flaky=%s", o->retry, o->flaky_fail ? "fail" : "pass");
    if (o->deadline_seconds > 0) kv_put_text(b, cap, &n, " deadline=%gs", o->deadline_seconds);
    if (o->max_failures > 0) kv_put_text(b, cap, &n, " max-failures=%d", o->max_failures);
    meta->flaky_fail = o->flaky_fail;
    meta->gzip_results = o->gzip_results;
    /* Which gates the fastpath check ran under, and what the other checks
     * on accel ran with (KV_REDISPATCH_GATE, KV_NO_REDISPATCH). */
    kv_put_text(b, cap, &n, " fastpath-gates=%s redispatch-gate=%s kill-switch=%s accel-target=%s",
                kv_fastpath_gates_name(o->fastpath_gates), kv_accel_gate_name(kv_accel_gate_get()),
                kv_accel_redispatch_enabled() ? "off" : "on", kv_key_name(kv_accel_target()));
    kv_driver_backends_meta(meta);
    kv_driver_fingerprint(meta, o, cases);
    meta->start_time = (int64_t)time(NULL);
    meta->ncases = nsel;
    if (o->shard_n > 0) {
        meta->shard_k = o->shard_k;
        meta->shard_n = o->shard_n;
    }
}

static void kv_print_refs(FILE *f, const char *what, const kv_golden_ref *refs, int n) {
    const int shown = n < 20 ? n : 20;
    for (int i = 0; i < shown; i++) fprintf(f, "  %s %s [output %d]\n", what, refs[i].key, refs[i].output);
    if (n > shown) fprintf(f, "  ... and %d more %s\n", n - shown, what);
}

static void kv_print_regen(FILE *f, const kv_golden_store *s, const kv_golden_summary *sum, bool full) {
    fprintf(f, "golden %s: %d added, %d changed, %d unchanged, %d removed, %d kept; %d files written, %d removed%s\n",
            kv_golden_dir(s), sum->added, sum->changed, sum->unchanged, sum->removed, sum->kept, sum->files_written,
            sum->files_removed, full ? "" : " (partial run: entries of unselected cases kept)");
    kv_print_refs(f, "added", sum->added_list, sum->added);
    kv_print_refs(f, "changed", sum->changed_list, sum->changed);
    kv_print_refs(f, "removed", sum->removed_list, sum->removed);
    fprintf(f, "exact goldens (correctly rounded, runner/golden/exact.h):\n");
    kv_exact_stats_print(f, kv_exact_run_stats());
    if (kv_exact_verify_bits() > 0) kv_exact_verify_print(f);
}

/* ---- interruption ---- */

/* The signal that stopped the run, 0 while none has. */
static volatile sig_atomic_t kv_driver_stop;

/* The first signal stays the reason; a second one (an impatient Ctrl-C,
 * a CI runner's SIGTERM after its SIGINT) must not end kvrun before it
 * has written the reports that say the run is incomplete. */
static void kv_driver_on_stop(int sig) {
    if (kv_driver_stop <= 0) kv_driver_stop = sig;
}

/* SIGHUP: the terminal or ssh session went away, as much an interruption
 * as Ctrl-C. */
static const int kv_driver_stop_signals[] = { SIGINT, SIGTERM, SIGHUP };
#define KV_DRIVER_NSTOP ((int)(sizeof kv_driver_stop_signals / sizeof kv_driver_stop_signals[0]))

typedef struct kv_driver_signals {
    struct sigaction old[KV_DRIVER_NSTOP];
} kv_driver_signals;

/* No SA_RESETHAND: should writing the reports hang, SIGKILL still ends
 * kvrun, and results.jsonl is valid up to its last whole case then. */
static void kv_driver_catch_stop(kv_driver_signals *s) {
    kv_driver_stop = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = kv_driver_on_stop;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < KV_DRIVER_NSTOP; i++) sigaction(kv_driver_stop_signals[i], &sa, &s->old[i]);
}

static void kv_driver_release_stop(const kv_driver_signals *s) {
    for (int i = 0; i < KV_DRIVER_NSTOP; i++) sigaction(kv_driver_stop_signals[i], &s->old[i], NULL);
}

static const char *kv_driver_stop_name(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
}

/* What the pool tells while cases run: each finished case's rows go to
 * results.jsonl at once, then to the progress line. */
typedef struct kv_driver_watch {
    kv_progress *prog;
    kv_report_stream *stream;
    int finished;
    bool stream_failed;
    FILE *err;
    const kv_driver_options *o;  /* the limits: --deadline, --max-failures */
    double t0;
    int64_t nbad;                /* FAIL, ERROR, CRASH, TIMEOUT rows so far */
    const int *sel_of;           /* the position in the selection of each case run */
    char *write_error;           /* the first append's error, KV_WATCH_ERROR_MAX bytes */
} kv_driver_watch;
#define KV_WATCH_ERROR_MAX 512

/* Stops the run (as a signal would) when a limit is reached; a signal
 * that came first stays the reason. */
static void kv_watch_limits(kv_driver_watch *w) {
    if (kv_driver_stop != 0) return;
    if (w->o->max_failures > 0 && w->nbad >= w->o->max_failures) kv_driver_stop = KV_STOP_MAX_FAILURES;
    else if (w->o->deadline_seconds > 0 && kv_wall_now() - w->t0 >= w->o->deadline_seconds)
        kv_driver_stop = KV_STOP_DEADLINE;
}

static void kv_watch_started(void *ctx, int ci) {
    kv_driver_watch *w = ctx;
    if (w->prog->observer.started) w->prog->observer.started(w->prog->observer.ctx, ci);
}

static void kv_watch_finished(void *ctx, int ci, const kv_result_list *rows) {
    kv_driver_watch *w = ctx;
    w->finished++;
    for (int i = 0; i < rows->n; i++) {
        const kv_result_status st = rows->items[i].status;
        w->nbad += st == KV_RESULT_FAIL || st == KV_RESULT_ERROR || st == KV_RESULT_CRASH || st == KV_RESULT_TIMEOUT;
    }
    kv_watch_limits(w);
    /* The rows live in results.jsonl from now on, not in this process. */
    if (kv_report_stream_case(w->stream, w->sel_of[ci], rows) != KV_OK && !w->stream_failed) {
        /* The run goes on: the rows the file cannot take are held in memory. */
        w->stream_failed = true;
        snprintf(w->write_error, KV_WATCH_ERROR_MAX, "%s", kv_last_error_message());
        fprintf(w->err, "kvrun: warning: %s (the rows results.jsonl cannot take are held in memory while the run goes on)\n",
                kv_last_error_message());
    }
    if (w->prog->observer.finished) w->prog->observer.finished(w->prog->observer.ctx, ci, rows);
}

static void kv_watch_tick(void *ctx) {
    kv_driver_watch *w = ctx;
    kv_watch_limits(w);
    if (w->prog->observer.tick) w->prog->observer.tick(w->prog->observer.ctx);
}

/* Every selected case gets one ERROR row: the store could not be opened,
 * so no case can be verified, and none may pass. */
static kv_status kv_error_rows(const kv_case *const *sel, int n, const char *why, kv_report_stream *s) {
    char msg[KV_RESULT_MESSAGE_MAX];
    snprintf(msg, sizeof msg, "golden store unusable: %s", why);
    int filled;
    return kv_budget_fill_not_run(sel, n, s, KV_RESULT_ERROR, msg, &filled);
}

/* --resume: the rows the interrupted run left in results.jsonl, indexed
 * by the selection's positions; *nresumed cases have them. */
static kv_status kv_driver_resume_scan(const kv_case *const *sel, int nsel, kv_report_stream *s, int *nresumed) {
    char **ids = calloc((size_t)nsel + 1, sizeof *ids);
    kv_status st = ids == NULL ? kv_error(KV_ERR_OOM, "--resume: out of memory") : KV_OK;
    for (int i = 0; st == KV_OK && i < nsel; i++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(sel[i], id, sizeof id);
        if ((ids[i] = strdup(id)) == NULL) st = kv_error(KV_ERR_OOM, "--resume: out of memory");
    }
    if (st == KV_OK) st = kv_report_stream_scan(s, (const char *const *)ids, nsel, nresumed);
    for (int i = 0; ids != NULL && i < nsel; i++) free(ids[i]);
    free(ids);
    return st;
}

/* --retry through results.jsonl: only the failing cases' rows are read
 * back, retried (retry.h) and appended again as those cases' rows. */
static kv_status kv_driver_retry(const kv_case *const *sel, int nsel, kv_report_stream *s, const kv_run_env *env,
                                 const kv_isolate_config *cfg, int retries, int *nflaky, int *nretried) {
    *nflaky = *nretried = 0;
    int *pos = malloc(((size_t)nsel + 1) * sizeof *pos);
    const kv_case **sub = malloc(((size_t)nsel + 1) * sizeof *sub);
    kv_result_list rows = { 0 };
    kv_status st = pos == NULL || sub == NULL ? kv_error(KV_ERR_OOM, "--retry: out of memory") : KV_OK;
    int n = 0;
    for (int i = 0; st == KV_OK && i < nsel; i++) {
        if (!kv_report_stream_bad(s, i)) continue;
        pos[n] = i;
        sub[n++] = sel[i];
        st = kv_report_stream_read_case(s, i, &rows);
    }
    if (st == KV_OK && n > 0) st = kv_retry_failing(sub, n, env, cfg, retries, &rows, nflaky, nretried);
    /* The rows come back in case order, each case's together. */
    int at = 0;
    for (int k = 0; st == KV_OK && k < n; k++) {
        char id[KV_CASE_ID_MAX];
        kv_case_id(sub[k], id, sizeof id);
        kv_result_list one = { 0 };
        for (; st == KV_OK && at < rows.n && strcmp(rows.items[at].case_id, id) == 0; at++)
            st = kv_result_list_push(&one, &rows.items[at]);
        if (st == KV_OK && kv_report_stream_case(s, pos[k], &one) != KV_OK && !kv_report_stream_has(s, pos[k]))
            st = kv_last_error();
        kv_result_list_free(&one);
    }
    kv_result_list_free(&rows);
    free(pos);
    free(sub);
    return st;
}

/* Reads every case's rows back in case order (then `extra`), applies the
 * baseline, and writes the report folder row by row: one case's rows in
 * memory at a time. The baseline needs every row before it can judge a
 * pass (a stale entry is one whose rows all passed), so with one the rows
 * are read twice. */
static kv_status kv_driver_reports(kv_report_build *b, kv_report_stream *s, int nsel, kv_result_list *extra,
                                   const kv_baseline *baseline) {
    kv_status st = KV_OK;
    kv_result_list rows = { 0 };
    if (baseline != NULL) {
        kv_baseline_reset(baseline);
        for (int i = 0; st == KV_OK && i < nsel; i++) {
            st = kv_report_stream_read_case(s, i, &rows);
            kv_baseline_tally(baseline, &rows);
            kv_result_list_free(&rows);
        }
        kv_baseline_tally(baseline, extra);
    }
    for (int i = 0; st == KV_OK && i <= nsel; i++) {
        kv_result_list *batch = i < nsel ? &rows : extra;
        if (i < nsel) st = kv_report_stream_read_case(s, i, &rows);
        if (baseline != NULL) kv_baseline_mark(baseline, batch, NULL, NULL);
        /* A row a report file cannot take (a full disk) fails the build,
         * which finish reports; the rest still reach the console's counts. */
        for (int k = 0; st == KV_OK && k < batch->n; k++) (void)kv_report_build_add(b, &batch->items[k]);
        kv_result_list_free(&rows);
    }
    kv_result_list_free(&rows);
    return st;
}

int kv_driver_run(const kv_driver_options *o, const kv_case_list *cases, FILE *out) {
    FILE *err = o->err ? o->err : stderr;
    double progress_seconds;
    if (kv_driver_options_check(o) != KV_OK || kv_exact_verify_env_check() != KV_OK ||
        kv_progress_seconds_env(&progress_seconds) != KV_OK) {
        fprintf(err, "kvrun: %s\n", kv_last_error_message());
        return 2;
    }
    static const kv_case_list none = { 0 };
    if (cases == NULL) cases = &none;
    int *idx = NULL, nsel = 0;
    if (kv_driver_select(o, cases, &idx, &nsel, err) != KV_OK) {
        fprintf(err, "kvrun: %s\n", kv_last_error_message());
        return 2;
    }
    if (nsel == 0) {
        if (cases->n == 0) {
            fprintf(err, "kvrun: no cases selected: the input holds no cases\n");
        } else {
            fprintf(err, "kvrun: no cases selected: none of the %d cases passes the filter%s\n", cases->n,
                    o->shard_n > 0 ? " and the shard" : "");
            kv_select_hint(o, cases, err);
        }
        free(idx);
        return 2;
    }
    const kv_case **sel = malloc((size_t)nsel * sizeof *sel);
    if (sel == NULL) {
        free(idx);
        fprintf(err, "kvrun: out of memory\n");
        return 1;
    }
    for (int i = 0; i < nsel; i++) sel[i] = &cases->items[idx[i]];
    free(idx);

    if (o->list_only) {
        for (int i = 0; i < nsel; i++) {
            char id[KV_CASE_ID_MAX];
            kv_case_id(sel[i], id, sizeof id);
            fprintf(out, "%s\n", id);
        }
        free(sel);
        return 0;
    }
    if (o->run_selected != NULL) {
        const int rc = o->run_selected(o->run_selected_ctx, sel, nsel, out);
        free(sel);
        return rc;
    }

    /* Folders first: a run that cannot write its report (or dump) should
     * say so before it spends an hour running cases. */
    const char *rdir = o->report_dir ? o->report_dir : KV_DRIVER_DEFAULT_REPORT_DIR;
    if (kv_report_mkdirs(rdir) != KV_OK) {
        fprintf(err, "kvrun: --report-dir=%s: %s\n", rdir, kv_last_error_message());
        free(sel);
        return 2;
    }
    if (o->dump_dir != NULL && kv_report_mkdirs(o->dump_dir) != KV_OK) {
        fprintf(err, "kvrun: --dump=%s: %s\n", o->dump_dir, kv_last_error_message());
        free(sel);
        return 2;
    }
    int rc = 0;
    kv_baseline *baseline = NULL;
    if (o->baseline_path != NULL) {
        baseline = kv_baseline_load(o->baseline_path);
        const char *names[KV_REPORT_MAX_BACKENDS + 2];
        const int nnames = kv_driver_backend_names(names, (int)(sizeof names / sizeof names[0]));
        if (baseline != NULL && kv_baseline_validate(baseline, names, nnames) != KV_OK) {
            kv_baseline_free(baseline);
            baseline = NULL;
        }
        if (baseline == NULL) {
            fprintf(err, "kvrun: --baseline=%s: %s\n", o->baseline_path, kv_last_error_message());
            free(sel);
            return 2;
        }
    }
    if (kv_row_select_active()) {
        const char *names[KV_REPORT_MAX_BACKENDS + 2];
        const int nnames = kv_driver_backend_names(names, (int)(sizeof names / sizeof names[0]));
        if (kv_row_select_validate(names, nnames) != KV_OK) {
            fprintf(err, "kvrun: %s\n", kv_last_error_message());
            kv_baseline_free(baseline);
            free(sel);
            return 2;
        }
    }

    kv_isolate_config cfg = {
        .mode = o->regen_golden ? KV_ISOLATE_NONE : o->isolate,
        .jobs = o->jobs > 0 ? o->jobs : kv_default_jobs(),
        .timeout_seconds = o->timeout_seconds > 0 ? o->timeout_seconds : KV_DRIVER_DEFAULT_TIMEOUT,
    };
    if (o->regen_golden && o->isolate == KV_ISOLATE_FORK) {
        fprintf(err, "kvrun: --regen-golden runs every case in this process (--isolate=none, no timeout)\n");
    }
    int worker_mib;
    if (cfg.mode == KV_ISOLATE_FORK && kv_isolate_worker_mem(&cfg, &worker_mib) != KV_OK) {
        fprintf(err, "kvrun: %s\n", kv_last_error_message());
        free(sel);
        return 2;
    }
    kv_report_meta meta;
    kv_fill_meta(&meta, o, cases, nsel, &cfg);
    if (o->resume && kv_resume_check(rdir, &meta) != KV_OK) {
        fprintf(err, "kvrun: %s\n", kv_last_error_message());
        kv_baseline_free(baseline);
        free(sel);
        return 2;
    }
    /* From here the folder says "in progress" and results.jsonl grows as
     * cases finish; the old reports are gone. Each case's rows are in
     * that file only: this process keeps counts and failures, never every
     * row, so its memory does not grow with the number of cases. */
    meta.incomplete = true;
    kv_report_stream stream;
    int nresumed = 0, nfinished = 0;
    char watch_error[KV_WATCH_ERROR_MAX] = "a --retry's rows could not be appended";
    kv_status st = kv_report_begin(rdir, &meta, o->resume, &stream);
    if (st == KV_OK) st = kv_report_stream_index(&stream, nsel);
    if (st == KV_OK && o->resume) st = kv_driver_resume_scan(sel, nsel, &stream, &nresumed);
    if (st == KV_OK && stream.ntorn > 0)
        fprintf(err, "kvrun: --resume: %s ended in a cut line: the last case in it runs again\n", stream.path);
    if (st == KV_OK && stream.nrerun > 0)
        fprintf(err, "kvrun: --resume: %d case%s found more than once in %s (e.g. %s): %s again\n", stream.nrerun,
                stream.nrerun == 1 ? "" : "s", stream.path, stream.rerun_id, stream.nrerun == 1 ? "it runs" : "they run");
    if (st != KV_OK) {
        fprintf(err, "kvrun: %s%s\n", o->resume ? "" : "--report-dir: ", kv_last_error_message());
        kv_report_stream_close(&stream);
        kv_baseline_free(baseline);
        free(sel);
        return 2;
    }
    kv_driver_signals sigs;
    kv_driver_catch_stop(&sigs);
    const double t0 = kv_wall_now();

    const char *gdir = o->golden_dir ? o->golden_dir : KV_DRIVER_DEFAULT_GOLDEN_DIR;
    kv_golden_store *store = kv_golden_open(gdir);
    if (store == NULL) {
        char why[KV_RESULT_MESSAGE_MAX - 64];
        snprintf(why, sizeof why, "%s", kv_last_error_message());
        fprintf(err, "kvrun: golden store %s: %s\n", gdir, why);
        if (o->regen_golden) {
            fprintf(err, "kvrun: cannot regenerate into it: fix or remove %s/MANIFEST\n", gdir);
            rc = 1;
        }
        st = kv_error_rows(sel, nsel, why, &stream);
    } else {
        /* A regeneration killed between writing and renaming left temp
         * files: named here, removed by the next regeneration. */
        char first[512];
        const int nstale = kv_golden_stale_temps(gdir, o->regen_golden, first, sizeof first);
        if (nstale > 0 && o->regen_golden)
            fprintf(err, "kvrun: %s: removed %d temp file%s left by an interrupted --regen-golden (e.g. %s)\n", gdir,
                    nstale, nstale == 1 ? "" : "s", first);
        else if (nstale > 0)
            fprintf(err,
                    "kvrun: warning: %s: %d temp file%s left by an interrupted --regen-golden (e.g. %s); the next "
                    "--regen-golden removes %s\n",
                    gdir, nstale, nstale == 1 ? "" : "s", first, nstale == 1 ? "it" : "them");
        const kv_run_env env = {
            .golden = store, .regen_golden = o->regen_golden, .dump_dir = o->dump_dir, .golden_mode = o->golden_mode
        };
        kv_check_fastpath_set_gates(o->fastpath_gates); /* the forked workers inherit it */
        /* --resume: only the cases the interrupted run did not finish. */
        const kv_case **todo = malloc(((size_t)nsel + 1) * sizeof *todo);
        int *sel_of = malloc(((size_t)nsel + 1) * sizeof *sel_of);
        int ntodo = 0;
        if (todo == NULL || sel_of == NULL) st = kv_error(KV_ERR_OOM, "kvrun: out of memory");
        for (int i = 0; st == KV_OK && i < nsel; i++) {
            if (kv_report_stream_has(&stream, i)) continue;
            sel_of[ntodo] = i;
            todo[ntodo++] = sel[i];
        }
        if (st == KV_OK && o->resume)
            fprintf(err, "kvrun: --resume: %d of %d cases finished before; running the other %d\n", nresumed, nsel,
                    ntodo);
        /* Progress for the run itself; the retries below are summed up in
         * one line of their own (their case indices are another list's). */
        kv_progress prog;
        kv_isolate_config run_cfg = cfg;
        kv_driver_watch watch = { &prog, &stream, 0, false, err, o, t0, 0, sel_of, watch_error };
        const kv_isolate_observer observer = { kv_watch_started, kv_watch_finished, kv_watch_tick, &watch };
        if (st == KV_OK)
            st = kv_progress_init(&prog, err, isatty(fileno(err)) == 1, todo, ntodo, (kv_progress_level)o->verbosity,
                                  progress_seconds);
        if (st == KV_OK) {
            run_cfg.observer = &observer;
            run_cfg.stop = &kv_driver_stop;
            st = kv_isolate_run(todo, ntodo, &env, &run_cfg, NULL);
            kv_progress_end(&prog);
        }
        nfinished = watch.finished;
        free(todo);
        free(sel_of);
        int nflaky = 0, nretried = 0;
        if (st == KV_OK && o->retry > 0 && !kv_driver_stop)
            st = kv_driver_retry(sel, nsel, &stream, &env, &cfg, o->retry, &nflaky, &nretried);
        if (st == KV_OK && nretried > 0)
            fprintf(err, "kvrun: --retry=%d: %d failing case%s run again: %d flaky (passed on a retry), %d failed every time\n",
                    o->retry, nretried, nretried == 1 ? "" : "s", nflaky, nretried - nflaky);
    }
    kv_result_list extra = { 0 };
    if (st == KV_OK) st = kv_driver_backend_rows(o, &extra);
    if (st == KV_OK && o->require_support) st = kv_driver_support_rows(&stream, nsel, &extra);
    if (st != KV_OK) {
        fprintf(err, "kvrun: %s\n", kv_last_error_message());
        rc = 1;
    }

    const int stop = kv_driver_stop;
    const int stopped = stop > 0 ? stop : 0; /* by a signal; a limit (< 0) ends the run complete */
    if (stop != 0 && o->regen_golden) fprintf(err, "kvrun: stopped early: the golden store is left as it was\n");
    if (stop < 0 && st == KV_OK) {
        char why[256];
        if (stop == KV_STOP_DEADLINE)
            snprintf(why, sizeof why, "not run: the run's --deadline of %g s had passed", o->deadline_seconds);
        else
            snprintf(why, sizeof why, "not run: --max-failures=%d failing rows reached", o->max_failures);
        int filled = 0;
        st = kv_budget_fill_not_run(sel, nsel, &stream, stop == KV_STOP_DEADLINE ? KV_RESULT_ERROR : KV_RESULT_SKIP,
                                    why, &filled);
        if (st != KV_OK) {
            fprintf(err, "kvrun: %s\n", kv_last_error_message());
            rc = 1;
        } else {
            fprintf(err, "kvrun: %s: %d of %d cases not run (%s rows)\n",
                    stop == KV_STOP_DEADLINE ? "--deadline reached" : "--max-failures reached", filled, nsel,
                    stop == KV_STOP_DEADLINE ? "ERROR" : "SKIP");
        }
    }
    if (store != NULL && o->regen_golden && st == KV_OK && stop == 0) {
        const bool full = o->regen_full && o->nfilters == 0 && o->nfilters_out == 0 && !o->last_failed && o->shard_n == 0;
        kv_golden_summary sum;
        memset(&sum, 0, sizeof sum);
        if (kv_golden_save(store, full, &sum) != KV_OK) {
            char why[KV_RESULT_MESSAGE_MAX / 2];
            snprintf(why, sizeof why, "%s", kv_last_error_message());
            fprintf(err, "kvrun: saving the golden store: %s\n", why);
            rc = 1;
            if (kv_driver_run_error_row(&extra, "golden-save", "saving the golden store %s failed: %s", gdir, why) != KV_OK)
                fprintf(err, "kvrun: %s\n", kv_last_error_message());
        } else {
            kv_print_regen(out, store, &sum, full);
            kv_golden_summary_free(&sum);
        }
    }
    kv_golden_close(store);

    meta.wall_seconds = kv_wall_now() - t0;
    meta.incomplete = stopped != 0;
    /* Rows results.jsonl could not take (a full disk): the reports may
     * still get them, but the folder's own record is short, so the run is
     * incomplete and an ERROR row says why in every report. */
    if (stream.mem != NULL) {
        int64_t ninfile = 0;
        for (int i = 0; i < nsel; i++) ninfile += stream.off[i] >= 0;
        if (!stopped) {
            meta.incomplete = true;
            snprintf(meta.interrupted, sizeof meta.interrupted, "write error");
            meta.ncases_done = ninfile;
        }
        if (kv_driver_run_error_row(&extra, "report", "%s could not take the rows of %lld of %d cases: %s",
                                    stream.path, (long long)(nsel - ninfile), nsel, watch_error) != KV_OK)
            fprintf(err, "kvrun: %s\n", kv_last_error_message());
        rc = 1;
    }
    if (stopped) {
        snprintf(meta.interrupted, sizeof meta.interrupted, "%s", kv_driver_stop_name(stopped));
        meta.ncases_done = nresumed + nfinished;
        fprintf(err,
                "kvrun: interrupted by %s: %lld of %d cases finished; the reports in %s are marked incomplete; "
                "kvrun --resume with the same arguments runs the other %lld\n",
                meta.interrupted, (long long)meta.ncases_done, nsel, rdir, (long long)(nsel - meta.ncases_done));
    }

    /* Every report, from the rows read back case by case. */
    kv_report_build *build = kv_report_build_begin(rdir, &meta);
    kv_status wst = build == NULL ? kv_last_error() : kv_driver_reports(build, &stream, nsel, &extra, baseline);
    if (wst == KV_OK) wst = kv_report_build_finish(build, &meta);
    char wwhy[512] = "";
    if (wst != KV_OK) {
        snprintf(wwhy, sizeof wwhy, "%s", kv_last_error_message());
        fprintf(err, "kvrun: writing reports to %s: %s\n", rdir, wwhy);
        rc = 1;
        /* The console is the one report left: it says so. */
        if (!meta.incomplete) {
            meta.incomplete = true;
            snprintf(meta.interrupted, sizeof meta.interrupted, "write error");
            meta.ncases_done = nresumed + nfinished;
        }
    }
    kv_report_stream_close(&stream);
    kv_result_list_free(&extra);
    fflush(err);
    /* On stderr, before the summary, so the console still ends with the
     * "N passed, N failed, N skipped" line. */
    if (baseline != NULL && kv_baseline_notes(baseline, err) > 0) fflush(err);
    if (build != NULL) kv_report_build_console(build, out, &meta);
    /* Last, so that a run whose reports are not on disk never ends with
     * a "N passed, 0 failed" line. */
    if (wst != KV_OK) fprintf(out, "== INCOMPLETE: the reports in %s could not be written: %s\n", rdir, wwhy);
    fflush(out);
    const int code = kv_report_build_exit_code(build, o->flaky_fail);
    if (code > rc) rc = code;
    kv_report_build_free(build);
    /* The shell's convention for a death by that signal: CI tells an
     * interrupted run from a failed one. */
    if (stopped) rc = 128 + stopped;
    kv_driver_release_stop(&sigs);
    kv_baseline_free(baseline);
    free(sel);
    return rc;
}
