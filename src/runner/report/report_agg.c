/* The aggregate of a run's rows behind report_agg.h: one pass, each row
 * looked at once and dropped unless it is one of the kept statuses. */
#include "runner/report/report_agg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kv_report_agg_init(kv_report_agg *a) {
    memset(a, 0, sizeof *a);
    a->last_op = a->last_opb = -1;
    kv_report_hits_init(a->hits);
}

void kv_report_agg_free(kv_report_agg *a) {
    if (a == NULL) return;
    kv_result_list_free(&a->kept);
    free(a->ops);
    free(a->opbs);
    free(a->fams);
    free(a->acc);
    kv_report_agg_init(a);
}

/* Grows *items (of `size` bytes each) to hold one more; false when out of
 * memory. */
static bool agg_grow(void **items, int n, int *cap, size_t size) {
    if (n < *cap) return true;
    const int ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*items, (size_t)ncap * size);
    if (p == NULL) return false;
    *items = p;
    *cap = ncap;
    return true;
}

int kv_report_agg_op_index(const kv_report_agg *a, const char *op) {
    if (a->last_op >= 0 && strcmp(a->ops[a->last_op].op, op) == 0) return a->last_op;
    for (int i = 0; i < a->nops; i++)
        if (strcmp(a->ops[i].op, op) == 0) return i;
    return -1;
}

static int agg_op(kv_report_agg *a, const char *op) {
    int i = kv_report_agg_op_index(a, op);
    if (i < 0) {
        if (!agg_grow((void **)&a->ops, a->nops, &a->cap_ops, sizeof *a->ops)) return -1;
        i = a->nops++;
        memset(&a->ops[i], 0, sizeof a->ops[i]);
        snprintf(a->ops[i].op, sizeof a->ops[i].op, "%s", op);
    }
    a->last_op = i;
    return i;
}

static int agg_opb(kv_report_agg *a, int op, const char *backend) {
    const int last = a->last_opb;
    if (last >= 0 && a->opbs[last].op == op && strcmp(a->opbs[last].backend, backend) == 0) return last;
    for (int i = 0; i < a->nopbs; i++)
        if (a->opbs[i].op == op && strcmp(a->opbs[i].backend, backend) == 0) return a->last_opb = i;
    if (!agg_grow((void **)&a->opbs, a->nopbs, &a->cap_opbs, sizeof *a->opbs)) return -1;
    kv_agg_opb *b = &a->opbs[a->nopbs];
    memset(b, 0, sizeof *b);
    b->op = op;
    snprintf(b->backend, sizeof b->backend, "%s", backend);
    return a->last_opb = a->nopbs++;
}

/* Checks are plotted by family: "variants:cpu/ref" and "variants:sim/x"
 * share one plot, since a per-variant plot would hold a handful of points. */
static void agg_family_name(const char *check, char *buf, size_t cap) {
    size_t n = strcspn(check, ":");
    if (n >= cap) n = cap - 1;
    memcpy(buf, check, n);
    buf[n] = '\0';
}

static kv_agg_family *agg_family(kv_report_agg *a, const char *check) {
    char name[32];
    agg_family_name(check, name, sizeof name);
    for (int i = 0; i < a->nfams; i++)
        if (strcmp(a->fams[i].name, name) == 0) return &a->fams[i];
    if (!agg_grow((void **)&a->fams, a->nfams, &a->cap_fams, sizeof *a->fams)) return NULL;
    kv_agg_family *f = &a->fams[a->nfams++];
    memset(f, 0, sizeof *f);
    memcpy(f->name, name, sizeof name);
    return f;
}

static void agg_dec_add(kv_agg_dec_hist *h, double v) {
    h->n++;
    if (!isfinite(v)) {
        h->nonfinite++;
    } else if (v == 0) {
        h->zero++;
    } else {
        int d = (int)floor(log10(fabs(v))) - KV_AGG_DEC_LO;
        if (d < 0) d = 0;
        if (d >= KV_AGG_DECADES) d = KV_AGG_DECADES - 1;
        h->bins[d]++;
    }
}

static int agg_ulp_bin(double u) {
    if (!isfinite(u)) return KV_AGG_ULP_BINS - 1;
    if (u <= 0) return 0;
    if (u <= 1) return 1;
    int k = 2;
    for (double top = 10; u > top && k < KV_AGG_ULP_BINS - 2; top *= 10) k++;
    return k;
}

/* accuracy.md's label: the op with the case's args= (from its ID, where
 * pairs are joined by ';'), so gelu's two approximations and pow's
 * exponents get rows of their own. */
static void agg_acc_label(const kv_check_result *r, char *buf, int cap) {
    const char *p = strstr(r->case_id, ",args=");
    if (p == NULL) p = strstr(r->case_id, "(args=");
    if (p == NULL) {
        snprintf(buf, (size_t)cap, "%s", r->op);
        return;
    }
    p += strlen(",args=");
    const size_t n = strcspn(p, ",)");
    snprintf(buf, (size_t)cap, "%s (%.*s)", r->op, (int)n, p);
}

#define AGG_ACC_PREFIX "accuracy:"

static kv_status agg_acc_add(kv_report_agg *a, const kv_check_result *r) {
    if (strncmp(r->check, AGG_ACC_PREFIX, strlen(AGG_ACC_PREFIX)) != 0 || r->ulp_elements <= 0) return KV_OK;
    const char *variant = r->check + strlen(AGG_ACC_PREFIX);
    char label[KV_AGG_ACC_LABEL_MAX];
    agg_acc_label(r, label, (int)sizeof label);
    kv_agg_acc *g = NULL;
    for (int j = 0; j < a->nacc && g == NULL; j++)
        if (strcmp(a->acc[j].op, label) == 0 && a->acc[j].dtype == r->dtype && strcmp(a->acc[j].variant, variant) == 0)
            g = &a->acc[j];
    if (g == NULL) {
        if (!agg_grow((void **)&a->acc, a->nacc, &a->cap_acc, sizeof *a->acc))
            return kv_error(KV_ERR_OOM, "accuracy report: out of memory");
        g = &a->acc[a->nacc++];
        memset(g, 0, sizeof *g);
        memcpy(g->op, label, sizeof label);
        g->dtype = r->dtype;
        snprintf(g->variant, sizeof g->variant, "%s", variant);
        a->acc_sorted = false;
    }
    g->cases++;
    if (kv_result_status_is_bad(r->status)) g->failed++;
    g->elements += r->ulp_elements;
    if (r->ulp_max > g->max) g->max = r->ulp_max;
    for (int b = 0; b < KV_ULP_BINS; b++) g->hist[b] += r->ulp_hist[b];
    return KV_OK;
}

static void agg_output(kv_report_agg *a, const kv_check_result *r) {
    /* Rows of one case are adjacent: a case counts once. */
    if (!r->output[0] || strcmp(a->last_output_case, r->case_id) == 0) return;
    snprintf(a->last_output_case, sizeof a->last_output_case, "%s", r->case_id);
    if (a->output_cases < KV_AGG_OUTPUTS_SHOWN) {
        const int k = (int)a->output_cases;
        snprintf(a->output_ids[k], sizeof a->output_ids[k], "%s", r->case_id);
        const char *nl = strchr(r->output, '\n');
        snprintf(a->output_first[k], sizeof a->output_first[k], "%.*s%s",
                 (int)(nl ? nl - r->output : (ptrdiff_t)strlen(r->output)), r->output, nl ? " ..." : "");
    }
    a->output_cases++;
}

static bool agg_keeps(kv_result_status s) {
    switch (s) {
    case KV_RESULT_PASS:
    case KV_RESULT_SKIP:
    case KV_RESULT_UNSUPPORTED: return false;
    case KV_RESULT_FAIL:
    case KV_RESULT_ERROR:
    case KV_RESULT_CRASH:
    case KV_RESULT_TIMEOUT:
    case KV_RESULT_XFAIL:
    case KV_RESULT_XPASS:
    case KV_RESULT_FLAKY:
    case KV_RESULT_STATUS_COUNT: return true;
    }
    return true;
}

kv_status kv_report_agg_add(kv_report_agg *a, const kv_check_result *r) {
    const kv_result_status s = r->status;
    const bool known = (int)s >= 0 && s < KV_RESULT_STATUS_COUNT;
    a->nrows++;
    if (known) a->counts[s]++;
    if (agg_keeps(s)) {
        kv_status st = kv_result_list_push(&a->kept, r);
        if (st != KV_OK) return st;
    }
    const int op = agg_op(a, r->op);
    const int ob = op < 0 ? -1 : agg_opb(a, op, r->backend);
    if (ob < 0) return kv_error(KV_ERR_OOM, "report: out of memory");
    kv_agg_op *o = &a->ops[op];
    if (known) o->status[s]++;
    o->seconds += r->seconds;
    kv_agg_opb *b = &a->opbs[ob];
    if (known && (int)r->dtype >= 0 && r->dtype < KV_DTYPE_COUNT) {
        b->seen[r->dtype] |= (uint16_t)(1u << s);
        b->rows[r->dtype]++;
    }
    if (r->compared > 0) {
        kv_agg_family *f = agg_family(a, r->check);
        if (f == NULL) return kv_error(KV_ERR_OOM, "report: out of memory");
        if (r->max_ulps >= 0 || isnan(r->max_ulps)) {
            agg_dec_add(&f->ulps, r->max_ulps);
            b->ulp_rows++;
            b->ulp_bins[agg_ulp_bin(r->max_ulps)]++;
        }
        agg_dec_add(&f->abs, r->max_abs_err);
    }
    kv_report_hits_add(a->hits, r);
    if (r->tol_override > 0 && r->tol_override <= KV_TOL_OVERRIDE_MAX) a->tol_uses[r->tol_override - 1]++;
    agg_output(a, r);
    if (s == KV_RESULT_SKIP && strncmp(r->message, "live reference:", 15) == 0 && a->live++ == 0)
        snprintf(a->first_live, sizeof a->first_live, "%s", r->case_id);
    return agg_acc_add(a, r);
}

kv_status kv_report_agg_of(kv_report_agg *a, const kv_result_list *results) {
    kv_report_agg_init(a);
    for (int i = 0; results != NULL && i < results->n; i++) {
        kv_status st = kv_report_agg_add(a, &results->items[i]);
        if (st != KV_OK) {
            kv_report_agg_free(a);
            return st;
        }
    }
    kv_report_agg_finish(a);
    return KV_OK;
}

static int agg_acc_cmp(const void *pa, const void *pb) {
    const kv_agg_acc *x = pa, *y = pb;
    int c = strcmp(x->op, y->op);
    if (c == 0) c = (int)x->dtype - (int)y->dtype;
    if (c == 0) c = strcmp(x->variant, y->variant);
    return c;
}

void kv_report_agg_finish(kv_report_agg *a) {
    if (a->acc_sorted) return;
    if (a->nacc > 1) qsort(a->acc, (size_t)a->nacc, sizeof *a->acc, agg_acc_cmp);
    a->acc_sorted = true;
}

kv_report_totals kv_report_agg_totals(const kv_report_agg *a) {
    const int64_t *c = a->counts;
    kv_report_totals t = {
        .passed = c[KV_RESULT_PASS] + c[KV_RESULT_XFAIL],
        .failed = c[KV_RESULT_FAIL] + c[KV_RESULT_ERROR] + c[KV_RESULT_CRASH] + c[KV_RESULT_TIMEOUT] + c[KV_RESULT_XPASS],
        .skipped = c[KV_RESULT_SKIP] + c[KV_RESULT_UNSUPPORTED],
        .flaky = c[KV_RESULT_FLAKY],
    };
    return t;
}

int kv_report_agg_exit_code(const kv_report_agg *a, bool flaky_fail) {
    if (a->nrows == 0) return 1;
    /* Every kept row is at hand: a status this build does not know fails
     * the run as kv_result_status_is_bad says. */
    for (int i = 0; i < a->kept.n; i++)
        if (kv_result_status_is_bad(a->kept.items[i].status)) return 1;
    return flaky_fail && a->counts[KV_RESULT_FLAKY] > 0 ? 1 : 0;
}
