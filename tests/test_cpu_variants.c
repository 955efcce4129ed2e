/* Every optimized CPU variant against "ref" (kernels/ref) on representative
 * inputs: contiguous, transposed, broadcast, sliced, 0-dim, odd sizes that
 * leave vector tails, special values, sizes past the threaded variant's
 * threshold and past the matmul block sizes.
 *
 * Rules (the tolerance table's, src/runner/tolerance.c): exact ops bitwise
 * (any NaN matches any NaN); f32 transcendental ops within 2 ulp (4 for
 * sigmoid/silu); gelu within 8u(|e| + |x|); reductions and matmul within
 * (n + 2) * u * sum|terms|, and bitwise for small-integer inputs;
 * softmax within (n + 6) * u * |e|; normalization within a relative 1e-5
 * (f32) of well-conditioned data. A variant that refuses a call must be
 * one the test expects to refuse it (an ISA the CPU lacks, a dtype or
 * geometry its predicate documents); every call must have at least one
 * compatible optimized variant, so the comparison never passes vacuously. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "kv/kv.h"
#include "test_util.h"

/* ---- inputs ---- */

static uint64_t g_rng = 0x1234567u;
static double rnd(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1p-53;
}

typedef enum fill { F_REAL, F_POS, F_INT, F_SPECIAL, F_BOOL, F_SMALLINT } fill;

static void put(kv_tensor *t, int64_t k, double v) {
    char *p = (char *)kv_tensor_data(t) + k * (int64_t)kv_dtype_size(t->dtype);
    switch (t->dtype) {
    case KV_F32: *(float *)p = (float)v; break;
    case KV_F64: *(double *)p = v; break;
    case KV_I32: *(int32_t *)p = (int32_t)v; break;
    case KV_I64: *(int64_t *)p = (int64_t)v; break;
    case KV_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: fail_msg("put: dtype %s", kv_dtype_name(t->dtype));
    }
}

static double special(int64_t k) {
    static const double v[] = { NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40, -1e-40, 3.0e38, -3.0e38, 1.0, -1.0, 0.5 };
    return v[k % 12];
}

/* A contiguous tensor of `sizes`, values by fill kind. */
static kv_tensor *mk(kv_dtype dt, int nd, const int64_t *sizes, fill f) {
    kv_tensor *t = kv_tensor_empty(sizes, nd, dt, KV_DEVICE_CPU0);
    assert_non_null(t);
    for (int64_t k = 0; k < kv_tensor_numel(t); k++) {
        double v;
        switch (f) {
        case F_REAL: v = rnd() * 8.0 - 4.0; break;
        case F_POS: v = rnd() * 4.0 + 0.01; break;
        case F_INT: v = floor(rnd() * 200.0) - 100.0; break;
        case F_SMALLINT: v = floor(rnd() * 7.0) - 3.0; break;
        case F_SPECIAL: v = special(k); break;
        case F_BOOL: v = rnd() < 0.5; break;
        }
        put(t, k, v);
    }
    return t;
}

#define S(...) ((const int64_t[]){ __VA_ARGS__ })

static kv_tensor *mk2(kv_dtype dt, int64_t a, int64_t b, fill f) { return mk(dt, 2, S(a, b), f); }

/* The transpose of a fresh [b, a] tensor: shape [a, b], strides (1, a). */
static kv_tensor *mk_t(kv_dtype dt, int64_t a, int64_t b, fill f) {
    kv_tensor *base = mk2(dt, b, a, f);
    kv_tensor *t = kv_tensor_view(base, S(a, b), S(1, a), 2, 0);
    kv_tensor_release(base);
    return t;
}

/* Every other column of a fresh [a, 2b+1] tensor, offset 1. */
static kv_tensor *mk_s(kv_dtype dt, int64_t a, int64_t b, fill f) {
    kv_tensor *base = mk2(dt, a, 2 * b + 1, f);
    kv_tensor *t = kv_tensor_view(base, S(a, b), S(2 * b + 1, 2), 2, 1);
    kv_tensor_release(base);
    return t;
}

/* ---- comparison ---- */

typedef enum rule { R_BITWISE, R_ULP, R_ABS } rule;

static uint64_t bits_of(const kv_tensor *t, const int64_t *idx) {
    uint64_t u = 0;
    memcpy(&u, kv_tensor_element(t, idx), kv_dtype_size(t->dtype));
    return u;
}

static double ulps(kv_dtype dt, double e, double g) {
    if (dt == KV_F32) {
        float a = (float)e, b = (float)g;
        int32_t ia, ib;
        memcpy(&ia, &a, 4);
        memcpy(&ib, &b, 4);
        const int64_t oa = ia < 0 ? (int64_t)INT32_MIN - ia : ia, ob = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
        return fabs((double)(oa - ob));
    }
    int64_t ia, ib;
    memcpy(&ia, &e, 8);
    memcpy(&ib, &g, 8);
    const double oa = ia < 0 ? -(double)(ia & INT64_MAX) : (double)ia, ob = ib < 0 ? -(double)(ib & INT64_MAX) : (double)ib;
    return fabs(oa - ob);
}

/* Compares got with expected; tol: ULP distance, or per-element absolute
 * bounds (bound NULL: tol itself). Returns the number of mismatches and
 * describes the first. */
static int64_t compare(const kv_tensor *e, const kv_tensor *g, rule r, double tol, const double *bound, char *why,
                       size_t cap) {
    if (e->dtype != g->dtype || e->ndim != g->ndim) {
        snprintf(why, cap, "dtype/rank %s/%d vs %s/%d", kv_dtype_name(e->dtype), e->ndim, kv_dtype_name(g->dtype),
                 g->ndim);
        return -1;
    }
    for (int d = 0; d < e->ndim; d++)
        if (e->sizes[d] != g->sizes[d]) {
            snprintf(why, cap, "size %lld vs %lld at dim %d", (long long)e->sizes[d], (long long)g->sizes[d], d);
            return -1;
        }
    const int64_t n = kv_tensor_numel(e);
    int64_t idx[KV_MAX_DIMS] = { 0 }, bad = 0;
    const bool fl = kv_dtype_is_floating(e->dtype);
    for (int64_t k = 0; k < n; k++) {
        bool ok;
        double ev = 0, gv = 0;
        if (fl) {
            ev = kv_tensor_get_f64(e, idx);
            gv = kv_tensor_get_f64(g, idx);
        }
        if (fl && isnan(ev)) ok = isnan(gv);
        else if (!fl || r == R_BITWISE) ok = bits_of(e, idx) == bits_of(g, idx);
        else if (isinf(ev) || isinf(gv)) ok = ev == gv;
        else if (r == R_ULP) ok = ulps(e->dtype, ev, gv) <= tol;
        else ok = fabs(ev - gv) <= (bound ? bound[k] : tol);
        if (!ok && bad++ == 0)
            snprintf(why, cap, "element %lld: expected %.17g (bits %llx) got %.17g (bits %llx)", (long long)k, ev,
                     (unsigned long long)bits_of(e, idx), gv, (unsigned long long)bits_of(g, idx));
        kv_test_next_index(e, idx);
    }
    return bad;
}

/* ---- running every variant of one call ---- */

typedef struct call {
    const char *op;
    kv_ivalue args[KV_STACK_MAX];
    int nargs;
    kv_tensor *own[8];
    int nown;
    kv_tensor *list_items[8];
    rule r;
    double tol;
    /* Bound per element of output 0 (R_ABS), computed by the test. */
    double *(*bound)(const struct call *c, const kv_tensor *expected);
    double bound_scale;
    const char *may_refuse; /* variants allowed to refuse, "a,b", beyond ISA */
} call;

static void call_init(call *c, const char *op, rule r, double tol) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->r = r;
    c->tol = tol;
}

static void arg_t(call *c, kv_tensor *t) {
    c->args[c->nargs].tag = t ? KV_IV_TENSOR : KV_IV_NONE;
    c->args[c->nargs++].v.tensor = t;
    if (t) c->own[c->nown++] = t;
}
static void arg_list(call *c, int n, kv_tensor **ts) {
    for (int i = 0; i < n; i++) {
        c->list_items[i] = ts[i];
        c->own[c->nown++] = ts[i];
    }
    c->args[c->nargs].tag = KV_IV_TENSOR_LIST;
    c->args[c->nargs].v.tensors = (kv_tensor_list){ c->list_items, n };
    c->nargs++;
}
static void arg_s(call *c, kv_scalar v) {
    c->args[c->nargs].tag = KV_IV_SCALAR;
    c->args[c->nargs++].v.scalar = v;
}
static void arg_i(call *c, int64_t v) {
    c->args[c->nargs].tag = KV_IV_INT;
    c->args[c->nargs++].v.i = v;
}
static void arg_b(call *c, bool v) {
    c->args[c->nargs].tag = KV_IV_BOOL;
    c->args[c->nargs++].v.b = v;
}
static void arg_d(call *c, double v) {
    c->args[c->nargs].tag = KV_IV_DOUBLE;
    c->args[c->nargs++].v.d = v;
}
static void arg_none(call *c) { c->args[c->nargs++].tag = KV_IV_NONE; }
static void arg_str(call *c, const char *v) {
    c->args[c->nargs].tag = KV_IV_STR;
    c->args[c->nargs++].v.str = v;
}
/* int lists must outlive the call: tests pass static arrays. */
static void arg_ints(call *c, const int64_t *v, int n) {
    c->args[c->nargs].tag = KV_IV_INT_LIST;
    c->args[c->nargs++].v.ints = (kv_int_list){ v, n };
}
static void arg_dtype(call *c, kv_dtype d) {
    c->args[c->nargs].tag = KV_IV_DTYPE;
    c->args[c->nargs++].v.dtype = d;
}
/* Every remaining schema argument at its default. */
static void arg_defaults(call *c) {
    const kv_schema *s = kv_op_schema(kv_op_find(c->op));
    for (int i = c->nargs; i < s->nargs; i++) {
        if (s->args[i].has_default) c->args[c->nargs++] = s->args[i].default_value;
        else arg_none(c);
    }
}

static kv_status invoke(const kv_op *op, const call *c, const char *variant, kv_tensor **outs, int *nout, bool *b) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    /* Mutable arguments get a fresh copy each time, so every variant starts
     * from the same values. */
    const kv_schema *sc = kv_op_schema(op);
    kv_tensor *copies[KV_STACK_MAX] = { NULL };
    for (int i = 0; i < c->nargs; i++) {
        kv_ivalue v = c->args[i];
        if (i < sc->nargs && sc->args[i].alias.is_write && v.tag == KV_IV_TENSOR) {
            const kv_tensor *t = v.v.tensor;
            copies[i] = kv_tensor_empty_strided(t->sizes, t->strides, t->ndim, t->dtype, KV_DEVICE_CPU0);
            assert_non_null(copies[i]);
            memcpy(copies[i]->storage->data, (char *)t->storage->data, copies[i]->storage->nbytes < t->storage->nbytes
                                                                             ? copies[i]->storage->nbytes
                                                                             : t->storage->nbytes);
            copies[i]->offset = 0;
            /* Same element values at the same logical positions. */
            int64_t idx[KV_MAX_DIMS] = { 0 };
            for (int64_t k = 0; k < kv_tensor_numel(t); k++) {
                memcpy(kv_tensor_element(copies[i], idx), kv_tensor_element(t, idx), kv_dtype_size(t->dtype));
                kv_test_next_index(t, idx);
            }
            v.v.tensor = copies[i];
        }
        kv_stack_push(&s, v);
    }
    kv_status st = kv_tune_call_variant(op, KV_KEY_CPU, variant, &s);
    *nout = 0;
    if (st == KV_OK) {
        for (int i = 0; i < s.size; i++) {
            if (s.slots[i].tag == KV_IV_TENSOR) outs[(*nout)++] = s.slots[i].v.tensor;
            else if (s.slots[i].tag == KV_IV_BOOL) *b = s.slots[i].v.b;
        }
    }
    for (int i = 0; i < KV_STACK_MAX; i++) kv_tensor_release(copies[i]);
    return st;
}

static bool listed(const char *list, const char *name) {
    if (list == NULL) return false;
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
    return false;
}

static bool isa_refusal(const char *name) {
    if (strcmp(name, "avx512") == 0) return !kv_cpu_has(KV_CPU_ISA_AVX512);
    if (strcmp(name, "avx2") == 0) return !kv_cpu_has(KV_CPU_ISA_AVX2);
    return false;
}

static int g_compared, g_refused;

/* Runs every variant of the call and compares it with "ref". */
static void check_call(call *c, const char *what) {
    const kv_op *op = kv_op_find(c->op);
    assert_non_null(op);
    kv_tensor *ref[4] = { NULL };
    int nref = 0;
    bool rb = false;
    kv_status st = invoke(op, c, "ref", ref, &nref, &rb);
    if (st != KV_OK) fail_msg("%s (%s): ref failed: %s", c->op, what, kv_last_error_message());
    int optimized = 0;
    const int nv = kv_tune_variant_count(op, KV_KEY_CPU);
    for (int v = 1; v < nv; v++) {
        const char *name = kv_tune_variant_name(op, KV_KEY_CPU, v);
        kv_ivalue slots[KV_STACK_MAX];
        kv_stack probe = kv_stack_on(slots, KV_STACK_MAX);
        for (int i = 0; i < c->nargs; i++) kv_stack_push(&probe, c->args[i]);
        if (!kv_tune_variant_compatible(op, KV_KEY_CPU, v, &probe)) {
            const bool threads_small = strcmp(name, "threads") == 0;
            if (!isa_refusal(name) && !threads_small && !listed(c->may_refuse, name))
                fail_msg("%s (%s): variant '%s' unexpectedly refuses the call", c->op, what, name);
            g_refused++;
            continue;
        }
        optimized++;
        kv_tensor *got[4] = { NULL };
        int ngot = 0;
        bool gb = false;
        st = invoke(op, c, name, got, &ngot, &gb);
        if (st != KV_OK) fail_msg("%s (%s): variant '%s' failed: %s", c->op, what, name, kv_last_error_message());
        if (ngot != nref) fail_msg("%s (%s): variant '%s' returned %d tensors, ref %d", c->op, what, name, ngot, nref);
        if (nref == 0 && gb != rb) fail_msg("%s (%s): variant '%s' returned %d, ref %d", c->op, what, name, gb, rb);
        for (int i = 0; i < nref; i++) {
            double *bound = (c->r == R_ABS && c->bound) ? c->bound(c, ref[i]) : NULL;
            char why[256] = "";
            const int64_t bad = compare(ref[i], got[i], c->r, c->tol, bound, why, sizeof why);
            free(bound);
            if (bad != 0)
                fail_msg("%s (%s): variant '%s' output %d: %lld mismatches; %s", c->op, what, name, i, (long long)bad,
                         why);
            /* Lazy bits and, for views, the storage: the same tensor, not just the same values. */
            if (ref[i]->keys != got[i]->keys)
                fail_msg("%s (%s): variant '%s' output %d: keys differ", c->op, what, name, i);
            const kv_storage *in0 = c->args[0].tag == KV_IV_TENSOR ? c->args[0].v.tensor->storage : NULL;
            if (in0 && (ref[i]->storage == in0 || got[i]->storage == in0)) {
                if (ref[i]->storage != got[i]->storage || ref[i]->offset != got[i]->offset ||
                    memcmp(ref[i]->strides, got[i]->strides, sizeof(int64_t) * (size_t)ref[i]->ndim) != 0)
                    fail_msg("%s (%s): variant '%s' output %d: aliasing or geometry differs from ref", c->op, what, name, i);
            }
            kv_tensor_release(got[i]);
        }
        g_compared++;
    }
    if (optimized == 0) fail_msg("%s (%s): no optimized variant accepts the call", c->op, what);
    for (int i = 0; i < nref; i++) kv_tensor_release(ref[i]);
    for (int i = 0; i < c->nown; i++) kv_tensor_release(c->own[i]);
}

/* ---- elementwise ---- */

static const char *const k_unary_exact[] = { "neg", "abs", "relu", "sqrt", "rsqrt" };
static const char *const k_unary_transc[] = { "exp", "log", "sin", "cos", "tanh", "sigmoid", "silu" };
static const char *const k_binary_exact[] = { "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor",
                                              "maximum", "minimum", "eq.Tensor", "lt.Tensor" };

/* gelu: 8u(|e| + |x|) in f32's u, with x the call's input. */
static double *gelu_bound(const call *c, const kv_tensor *e) {
    const int64_t n = kv_tensor_numel(e);
    double *b = malloc(sizeof(double) * (size_t)n);
    const kv_tensor *x = c->args[0].v.tensor;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        b[k] = 8.0 * 0x1p-24 * (fabs(kv_tensor_get_f64(e, idx)) + fabs(kv_tensor_get_f64(x, idx))) + 1e-37;
        kv_test_next_index(e, idx);
    }
    return b;
}

/* gelu_backward: 8u(|e| + |grad|(1 + |x|)). */
static double *gelu_bwd_bound(const call *c, const kv_tensor *e) {
    const int64_t n = kv_tensor_numel(e);
    double *b = malloc(sizeof(double) * (size_t)n);
    const kv_tensor *g = c->args[0].v.tensor, *x = c->args[1].v.tensor;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < n; k++) {
        b[k] = 8.0 * 0x1p-24 *
                   (fabs(kv_tensor_get_f64(e, idx)) +
                    fabs(kv_tensor_get_f64(g, idx)) * (1.0 + fabs(kv_tensor_get_f64(x, idx)))) +
               1e-37;
        kv_test_next_index(e, idx);
    }
    return b;
}

/* Unary op on x, with the tolerance its class needs. */
static void unary_case(const char *op, kv_tensor *x, const char *what) {
    call c;
    const bool f64 = x->dtype == KV_F64;
    bool transc = false;
    for (size_t i = 0; i < sizeof k_unary_transc / sizeof *k_unary_transc; i++)
        transc = transc || strcmp(op, k_unary_transc[i]) == 0;
    const double ulp = strcmp(op, "sigmoid") == 0 || strcmp(op, "silu") == 0 ? 4 : 2;
    call_init(&c, op, transc && !f64 ? R_ULP : R_BITWISE, ulp);
    arg_t(&c, x);
    arg_defaults(&c);
    check_call(&c, what);
}

static void test_unary(void **state) {
    (void)state;
    const size_t nexact = sizeof k_unary_exact / sizeof *k_unary_exact;
    const size_t ntransc = sizeof k_unary_transc / sizeof *k_unary_transc;
    for (size_t i = 0; i < nexact + ntransc; i++) {
        const char *op = i < nexact ? k_unary_exact[i] : k_unary_transc[i - nexact];
        const bool pos = strcmp(op, "log") == 0 || strcmp(op, "sqrt") == 0 || strcmp(op, "rsqrt") == 0;
        const fill f = pos ? F_POS : F_REAL;
        unary_case(op, mk2(KV_F32, 33, 17, f), "f32 [33,17]");
        unary_case(op, mk_t(KV_F32, 9, 13, f), "f32 transposed");
        unary_case(op, mk_s(KV_F32, 5, 11, f), "f32 strided, offset");
        unary_case(op, mk(KV_F32, 0, NULL, f), "f32 0-dim");
        unary_case(op, mk2(KV_F64, 7, 19, f), "f64 [7,19]");
        unary_case(op, mk(KV_F32, 1, S(37), F_SPECIAL), "f32 specials");
        if (i < 3) unary_case(op, mk2(KV_I32, 6, 7, F_INT), "i32");
        if (i < 3) unary_case(op, mk2(KV_I64, 6, 7, F_INT), "i64");
    }
    /* Wide arguments: sin/cos past the Cody-Waite range, exp's extremes. */
    kv_tensor *w = mk(KV_F32, 1, S(64), F_REAL);
    for (int64_t k = 0; k < 64; k++) put(w, k, (k % 2 ? -1 : 1) * pow(10.0, (double)(k % 39)) * 3.3);
    kv_tensor_retain(w); /* each case releases its input */
    unary_case("sin", w, "f32 wide arguments");
    unary_case("cos", w, "f32 wide arguments");
    kv_tensor *e = mk(KV_F32, 1, S(64), F_REAL);
    for (int64_t k = 0; k < 64; k++) put(e, k, -110.0 + 3.4 * (double)k);
    unary_case("exp", e, "f32 over/underflow");
    /* gelu, both forms: its own bound. */
    for (int form = 0; form < 2; form++) {
        call c;
        call_init(&c, "gelu", R_ABS, 0);
        c.bound = gelu_bound;
        arg_t(&c, mk2(KV_F32, 31, 9, F_REAL));
        arg_str(&c, form ? "tanh" : "none");
        check_call(&c, form ? "tanh" : "none");
        call_init(&c, "gelu", R_BITWISE, 0);
        arg_t(&c, mk2(KV_F64, 3, 9, F_REAL));
        arg_str(&c, form ? "tanh" : "none");
        check_call(&c, "f64: libm as the reference, bitwise");
    }
}

static void test_unary_large_threads(void **state) {
    (void)state;
    /* Past KV_CPU_THREAD_MIN_NUMEL: the threaded variant takes part. */
    unary_case("neg", mk(KV_F32, 1, S(((int64_t)1 << 18) + 3), F_REAL), "f32 threaded size");
    unary_case("exp", mk2(KV_F32, 513, 513, F_REAL), "f32 threaded size");
    call c;
    call_init(&c, "add.Tensor", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 600, 500, F_REAL));
    arg_t(&c, mk(KV_F32, 1, S(500), F_REAL));
    arg_defaults(&c);
    check_call(&c, "f32 threaded size, broadcast");
}

static void binary_case(const char *op, kv_tensor *a, kv_tensor *b, const char *what) {
    call c;
    call_init(&c, op, R_BITWISE, 0);
    arg_t(&c, a);
    arg_t(&c, b);
    arg_defaults(&c);
    check_call(&c, what);
}

static void test_binary(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof k_binary_exact / sizeof *k_binary_exact; i++) {
        const char *op = k_binary_exact[i];
        binary_case(op, mk2(KV_F32, 33, 17, F_REAL), mk2(KV_F32, 33, 17, F_REAL), "f32 same shape");
        binary_case(op, mk2(KV_F32, 33, 17, F_REAL), mk(KV_F32, 1, S(17), F_REAL), "f32 broadcast row");
        binary_case(op, mk(KV_F32, 2, S(33, 1), F_REAL), mk2(KV_F32, 33, 17, F_REAL), "f32 broadcast column");
        binary_case(op, mk_t(KV_F32, 12, 10, F_REAL), mk_s(KV_F32, 12, 10, F_REAL), "f32 transposed x strided");
        binary_case(op, mk2(KV_F64, 5, 9, F_REAL), mk(KV_F64, 0, NULL, F_REAL), "f64 with a 0-dim");
        binary_case(op, mk(KV_F32, 1, S(144), F_SPECIAL), mk(KV_F32, 1, S(144), F_REAL), "f32 specials");
        kv_tensor *sp = mk(KV_F32, 1, S(144), F_SPECIAL);
        kv_tensor *sp2 = kv_tensor_view(sp, S(12, 12), S(1, 12), 2, 0);
        kv_tensor *sp3 = kv_tensor_view(sp, S(12, 12), S(12, 1), 2, 0);
        kv_tensor_release(sp);
        binary_case(op, sp2, sp3, "f32 specials x specials");
        if (strcmp(op, "div.Tensor") != 0) {
            binary_case(op, mk2(KV_I32, 8, 9, F_INT), mk2(KV_I32, 8, 9, F_INT), "i32");
            binary_case(op, mk2(KV_I64, 8, 9, F_INT), mk(KV_I64, 1, S(9), F_INT), "i64 broadcast");
        }
    }
    /* alpha != 1: computed in f64 like the reference: bitwise. */
    static const double alphas[] = { 2.5, -0.1, 3.0 };
    for (int k = 0; k < 3; k++) {
        call c;
        call_init(&c, k == 1 ? "sub.Tensor" : "add.Tensor", R_BITWISE, 0);
        arg_t(&c, mk2(KV_F32, 20, 21, F_REAL));
        arg_t(&c, mk2(KV_F32, 20, 21, F_REAL));
        arg_s(&c, kv_scalar_double(alphas[k]));
        check_call(&c, "f32 alpha");
        call_init(&c, "add.Tensor", R_BITWISE, 0);
        arg_t(&c, mk2(KV_I32, 4, 21, F_INT));
        arg_t(&c, mk2(KV_I32, 4, 21, F_INT));
        arg_s(&c, kv_scalar_int(-3));
        check_call(&c, "i32 alpha");
    }
    /* In place: the variant writes self; same elements of other allowed. */
    for (int k = 0; k < 2; k++) {
        call c;
        call_init(&c, k ? "mul_.Tensor" : "add_.Tensor", R_BITWISE, 0);
        arg_t(&c, mk_t(KV_F32, 11, 13, F_REAL));
        arg_t(&c, mk(KV_F32, 1, S(13), F_REAL));
        arg_defaults(&c);
        check_call(&c, "in place, transposed self");
    }
    /* pow with the special-cased exponents and a general one. */
    static const double ex[] = { 2.0, 0.5, -1.0, 1.0, 0.0, 3.7 };
    for (int k = 0; k < 6; k++) {
        call c;
        call_init(&c, "pow.Tensor_Scalar", k == 1 || k == 5 ? R_ULP : R_BITWISE, 2);
        arg_t(&c, mk2(KV_F32, 9, 10, k == 5 ? F_POS : F_REAL));
        arg_s(&c, kv_scalar_double(ex[k]));
        check_call(&c, "f32 exponent");
    }
    call c;
    call_init(&c, "pow.Tensor_Scalar", R_BITWISE, 0);
    arg_t(&c, mk2(KV_I64, 5, 5, F_SMALLINT));
    arg_s(&c, kv_scalar_int(5));
    check_call(&c, "i64 exponent 5");
    /* gelu_backward, both forms. */
    for (int form = 0; form < 2; form++) {
        call_init(&c, "gelu_backward", R_ABS, 0);
        c.bound = gelu_bwd_bound;
        arg_t(&c, mk2(KV_F32, 12, 12, F_REAL));
        arg_t(&c, mk2(KV_F32, 12, 12, F_REAL));
        arg_str(&c, form ? "tanh" : "none");
        check_call(&c, "f32");
    }
}

static void test_clamp_where(void **state) {
    (void)state;
    call c;
    call_init(&c, "clamp", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 1, S(60), F_SPECIAL));
    arg_s(&c, kv_scalar_double(-0.5));
    arg_s(&c, kv_scalar_double(0.75));
    check_call(&c, "f32 specials, both bounds");
    call_init(&c, "clamp", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_F32, 7, 8, F_REAL));
    arg_none(&c);
    arg_s(&c, kv_scalar_double(1.0));
    check_call(&c, "f32 transposed, max only");
    call_init(&c, "clamp", R_BITWISE, 0);
    arg_t(&c, mk2(KV_I32, 7, 8, F_INT));
    arg_s(&c, kv_scalar_int(-5));
    arg_none(&c);
    check_call(&c, "i32 min only");
    call_init(&c, "clamp", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 3, 4, F_REAL));
    arg_s(&c, kv_scalar_double(NAN));
    arg_s(&c, kv_scalar_double(1.0));
    check_call(&c, "f32 NaN bound");
    for (int k = 0; k < 2; k++) {
        call_init(&c, k ? "clamp_.Tensor" : "clamp.Tensor", R_BITWISE, 0);
        arg_t(&c, mk(KV_F32, 1, S(48), F_SPECIAL));
        arg_t(&c, mk(KV_F32, 1, S(48), F_REAL));
        arg_t(&c, k ? NULL : mk(KV_F32, 0, NULL, F_REAL));
        check_call(&c, "tensor bounds");
    }
    call_init(&c, "where.self", R_BITWISE, 0);
    arg_t(&c, mk2(KV_BOOL, 9, 10, F_BOOL));
    arg_t(&c, mk2(KV_F32, 9, 10, F_REAL));
    arg_t(&c, mk(KV_F32, 1, S(10), F_REAL));
    check_call(&c, "f32 broadcast other");
    call_init(&c, "where.self", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_BOOL, 6, 5, F_BOOL));
    arg_t(&c, mk2(KV_I64, 6, 5, F_INT));
    arg_t(&c, mk2(KV_I64, 6, 5, F_INT));
    check_call(&c, "i64 transposed condition");
}

/* ---- reductions ---- */

/* (n + 2) * u * sum|x| over each output's reduced elements, from the
 * call's input (sum over dims given by a mask computed by the test). */
typedef struct red_info {
    int ndim;
    bool reduce[KV_MAX_DIMS];
    bool mean;
} red_info;
static red_info g_red;

static double *sum_bound(const call *c, const kv_tensor *e) {
    const kv_tensor *x = c->args[0].v.tensor;
    const int64_t ne = kv_tensor_numel(e);
    double *b = calloc((size_t)(ne > 0 ? ne : 1), sizeof(double));
    const double u = x->dtype == KV_F32 ? 0x1p-24 : 0x1p-53;
    int64_t nred = 1;
    for (int d = 0; d < x->ndim; d++)
        if (g_red.reduce[d]) nred *= x->sizes[d];
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < kv_tensor_numel(x); k++) {
        int64_t o = 0;
        for (int d = 0; d < x->ndim; d++)
            if (!g_red.reduce[d]) o = o * x->sizes[d] + idx[d];
        b[o] += fabs(kv_tensor_get_f64(x, idx));
        kv_test_next_index(x, idx);
    }
    for (int64_t o = 0; o < ne; o++) b[o] = (double)(nred + 2) * u * b[o] / (g_red.mean ? (double)nred : 1.0) + 1e-300;
    return b;
}

static void red_case(const char *op, kv_tensor *x, const int64_t *dims, int ndims, bool keepdim, rule r,
                     const char *what) {
    call c;
    call_init(&c, op, r, r == R_ULP ? 100 : 0);
    c.bound = sum_bound;
    memset(&g_red, 0, sizeof g_red);
    g_red.mean = strcmp(op, "mean.dim") == 0;
    for (int d = 0; d < x->ndim; d++) g_red.reduce[d] = ndims == 0;
    for (int i = 0; i < ndims; i++) g_red.reduce[dims[i] < 0 ? dims[i] + x->ndim : dims[i]] = true;
    arg_t(&c, x);
    if (strcmp(op, "prod.dim_int") == 0 || strcmp(op, "argmax") == 0) {
        if (ndims) arg_i(&c, dims[0]);
        else arg_none(&c);
    } else {
        arg_ints(&c, dims, ndims);
    }
    arg_b(&c, keepdim);
    arg_defaults(&c);
    check_call(&c, what);
}

static void test_reductions(void **state) {
    (void)state;
    static const int64_t d1[1] = { 1 }, d0[1] = { 0 }, d01[2] = { 0, 1 }, dm1[1] = { -1 }, d02[2] = { 0, 2 };
    const char *ops[2] = { "sum.dim_IntList", "mean.dim" };
    for (int k = 0; k < 2; k++) {
        red_case(ops[k], mk2(KV_F32, 7, 300, F_REAL), d1, 1, false, R_ABS, "f32 rows");
        red_case(ops[k], mk2(KV_F32, 300, 7, F_REAL), d0, 1, true, R_ABS, "f32 columns");
        red_case(ops[k], mk_t(KV_F32, 40, 30, F_REAL), d1, 1, false, R_ABS, "f32 transposed");
        red_case(ops[k], mk_s(KV_F32, 6, 50, F_REAL), d01, 2, false, R_ABS, "f32 strided, all dims");
        red_case(ops[k], mk(KV_F32, 3, S(4, 5, 6), F_REAL), d02, 2, true, R_ABS, "f32 outer dims");
        red_case(ops[k], mk2(KV_F64, 9, 1000, F_REAL), dm1, 1, false, R_ABS, "f64 long rows");
        red_case(ops[k], mk(KV_F32, 2, S(3, 0), F_REAL), d1, 1, false, R_BITWISE, "empty");
    }
    /* Small integers: every partial sum exact, so bitwise. */
    red_case("sum.dim_IntList", mk2(KV_F32, 5, 999, F_SMALLINT), d1, 1, false, R_BITWISE, "f32 exact values");
    red_case("sum.dim_IntList", mk2(KV_I32, 5, 99, F_INT), d0, 1, false, R_BITWISE, "i32 to i64");
    red_case("sum.dim_IntList", mk2(KV_I64, 5, 99, F_INT), NULL, 0, false, R_BITWISE, "i64, every dim");
    red_case("prod.dim_int", mk2(KV_F32, 6, 40, F_SMALLINT), d1, 1, false, R_BITWISE, "f32 exact values");
    red_case("prod.dim_int", mk2(KV_I64, 6, 40, F_SMALLINT), d0, 1, false, R_BITWISE, "i64 wrapping");
    red_case("prod.dim_int", mk_t(KV_F64, 6, 40, F_POS), d1, 1, true, R_ULP, "f64 transposed");
    /* amax/argmax: exact, with ties, NaN and signed zeros. */
    const char *mx[2] = { "amax", "argmax" };
    for (int k = 0; k < 2; k++) {
        red_case(mx[k], mk2(KV_F32, 9, 5000, F_INT), d1, 1, false, R_BITWISE, "f32 ties, long rows");
        red_case(mx[k], mk2(KV_F32, 30, 7, F_REAL), d0, 1, true, R_BITWISE, "f32 columns");
        red_case(mx[k], mk(KV_F32, 2, S(12, 12), F_SPECIAL), d1, 1, false, R_BITWISE, "f32 specials");
        red_case(mx[k], mk_t(KV_I32, 8, 9, F_INT), d1, 1, false, R_BITWISE, "i32 transposed");
        kv_tensor *z = mk(KV_F32, 1, S(4100), F_REAL);
        for (int64_t i = 0; i < 4100; i++) put(z, i, i % 3 == 0 ? -0.0 : (i == 4000 ? NAN : -1.0));
        red_case(mx[k], z, d0, 1, false, R_BITWISE, "signed zeros, a late NaN");
    }
    red_case("argmax", mk(KV_F64, 3, S(3, 4, 5), F_INT), NULL, 0, false, R_BITWISE, "dim None");
}

/* ---- matmul ---- */

static double *mm_bound(const call *c, const kv_tensor *e) {
    const int a0 = strcmp(c->op, "addmm") == 0 ? 1 : 0;
    const kv_tensor *a = c->args[a0].v.tensor, *b = c->args[a0 + 1].v.tensor;
    const bool batched = a->ndim == 3;
    const int64_t B = batched ? a->sizes[0] : 1, n = a->sizes[a->ndim - 2], k = a->sizes[a->ndim - 1],
                  m = b->sizes[b->ndim - 1];
    const double u = a->dtype == KV_F32 ? 0x1p-24 : 0x1p-53;
    double *bd = malloc(sizeof(double) * (size_t)(B * n * m > 0 ? B * n * m : 1));
    for (int64_t bi = 0; bi < B; bi++)
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < m; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++) {
                    const int64_t ia[3] = { bi, i, p }, ib[3] = { bi, p, j };
                    s += fabs(kv_tensor_get_f64(a, batched ? ia : ia + 1)) * fabs(kv_tensor_get_f64(b, batched ? ib : ib + 1));
                }
                double extra = 0;
                if (a0) {
                    const kv_tensor *self = c->args[0].v.tensor;
                    const int64_t ix[2] = { i, j };
                    const int64_t *pi = self->ndim == 2 ? ix : ix + 1;
                    extra = self->ndim ? fabs(kv_tensor_get_f64(self, pi)) * 2.0 : 0;
                    s *= 2.0; /* |alpha| */
                }
                bd[(bi * n + i) * m + j] = (double)(k + 3) * u * (s + extra) + 1e-300;
            }
    (void)e;
    return bd;
}

static void mm_case(const char *op, kv_tensor *self, kv_tensor *a, kv_tensor *b, rule r, const char *what) {
    call c;
    call_init(&c, op, r, 0);
    c.bound = mm_bound;
    if (self) arg_t(&c, self);
    arg_t(&c, a);
    arg_t(&c, b);
    if (self) {
        arg_s(&c, kv_scalar_double(0.5));
        arg_s(&c, kv_scalar_double(2.0));
    }
    check_call(&c, what);
}

static void test_matmul(void **state) {
    (void)state;
    mm_case("mm", NULL, mk2(KV_F32, 37, 45, F_REAL), mk2(KV_F32, 45, 29, F_REAL), R_ABS, "f32 odd sizes");
    mm_case("mm", NULL, mk2(KV_F32, 130, 300, F_REAL), mk2(KV_F32, 300, 70, F_REAL), R_ABS, "f32 past MC and KC");
    /* The AVX-512 f32 driver's own blocks: MC 240, k in equal blocks of at
     * most KC 512 (600 = 2 x 300), NC 1536, 12 x 32 tiles. */
    mm_case("mm", NULL, mk2(KV_F32, 250, 600, F_REAL), mk2(KV_F32, 600, 45, F_REAL), R_ABS, "f32 past the AVX-512 MC/KC");
    mm_case("mm", NULL, mk2(KV_F32, 13, 9, F_REAL), mk2(KV_F32, 9, 1601, F_REAL), R_ABS, "f32 past the AVX-512 NC");
    mm_case("mm", NULL, mk_t(KV_F32, 20, 33, F_REAL), mk_s(KV_F32, 33, 17, F_REAL), R_ABS, "f32 transposed x strided");
    mm_case("mm", NULL, mk2(KV_F64, 19, 23, F_REAL), mk2(KV_F64, 23, 31, F_REAL), R_ABS, "f64");
    mm_case("mm", NULL, mk2(KV_F32, 21, 300, F_SMALLINT), mk2(KV_F32, 300, 19, F_SMALLINT), R_BITWISE,
            "f32 exact values, bitwise");
    mm_case("mm", NULL, mk2(KV_F32, 4, 0, F_REAL), mk2(KV_F32, 0, 5, F_REAL), R_BITWISE, "empty inner dim");
    /* An f32 partial sum that overflows while the f64 one does not. */
    kv_tensor *a = mk2(KV_F32, 2, 3, F_REAL), *b = mk2(KV_F32, 3, 2, F_REAL);
    const float av[6] = { 3e38f, 3e38f, -3e38f, 1, 2, 3 }, bv[6] = { 1, 1, 1, 1, 1, 1 };
    memcpy(kv_tensor_data(a), av, sizeof av);
    memcpy(kv_tensor_data(b), bv, sizeof bv);
    mm_case("mm", NULL, a, b, R_ABS, "f32 intermediate overflow");
    mm_case("bmm", NULL, mk(KV_F32, 3, S(3, 17, 9), F_REAL), mk(KV_F32, 3, S(3, 9, 21), F_REAL), R_ABS, "f32");
    mm_case("addmm", mk(KV_F32, 1, S(29), F_REAL), mk2(KV_F32, 13, 45, F_REAL), mk2(KV_F32, 45, 29, F_REAL), R_ABS,
            "f32 broadcast self");
    mm_case("addmm", mk2(KV_F64, 13, 29, F_REAL), mk_t(KV_F64, 13, 45, F_REAL), mk2(KV_F64, 45, 29, F_REAL), R_ABS,
            "f64 transposed mat1");
    /* beta = 0: self (NaN here) is never read. */
    call c;
    call_init(&c, "addmm", R_BITWISE, 0);
    kv_tensor *nan_self = mk2(KV_F32, 4, 6, F_REAL);
    for (int64_t i = 0; i < 24; i++) put(nan_self, i, NAN);
    arg_t(&c, nan_self);
    arg_t(&c, mk2(KV_F32, 4, 5, F_SMALLINT));
    arg_t(&c, mk2(KV_F32, 5, 6, F_SMALLINT));
    arg_s(&c, kv_scalar_int(0));
    arg_s(&c, kv_scalar_int(1));
    check_call(&c, "beta 0 ignores NaN self");
}

/* ---- softmax and normalization ---- */

static double *softmax_bound(const call *c, const kv_tensor *e) {
    const kv_tensor *x = c->args[0].v.tensor;
    const int64_t dim = c->args[1].v.i < 0 ? c->args[1].v.i + x->ndim : c->args[1].v.i;
    const int64_t n = x->ndim ? x->sizes[dim] : 1, ne = kv_tensor_numel(e);
    const double u = x->dtype == KV_F32 ? 0x1p-24 : 0x1p-53;
    const bool logf = strcmp(c->op, "_log_softmax") == 0;
    double *b = malloc(sizeof(double) * (size_t)(ne > 0 ? ne : 1));
    int64_t idx[KV_MAX_DIMS] = { 0 };
    for (int64_t k = 0; k < ne; k++) {
        const double ev = fabs(kv_tensor_get_f64(e, idx));
        b[k] = (double)(n + 6) * u * (logf ? ev + 2.0 * log((double)n) + 1.0 : ev) + 1e-300;
        kv_test_next_index(e, idx);
    }
    return b;
}

static void sm_case(const char *op, kv_tensor *x, int64_t dim, const char *what) {
    call c;
    call_init(&c, op, R_ABS, 0);
    c.bound = softmax_bound;
    arg_t(&c, x);
    arg_i(&c, dim);
    arg_b(&c, false);
    check_call(&c, what);
}

static double *rel_bound(const call *c, const kv_tensor *e) {
    const int64_t n = kv_tensor_numel(e);
    double *b = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    int64_t idx[KV_MAX_DIMS] = { 0 };
    const double r = e->dtype == KV_F32 ? 2e-6 : 1e-13;
    for (int64_t k = 0; k < n; k++) {
        b[k] = r * (fabs(kv_tensor_get_f64(e, idx)) + 1.0);
        kv_test_next_index(e, idx);
    }
    (void)c;
    return b;
}

static void test_softmax_norm(void **state) {
    (void)state;
    const char *ops[2] = { "_softmax", "_log_softmax" };
    for (int k = 0; k < 2; k++) {
        sm_case(ops[k], mk2(KV_F32, 5, 100, F_REAL), 1, "f32 last dim");
        sm_case(ops[k], mk2(KV_F32, 100, 5, F_REAL), 0, "f32 first dim (strided slices)");
        sm_case(ops[k], mk_t(KV_F64, 9, 33, F_REAL), -1, "f64 transposed");
        sm_case(ops[k], mk(KV_F32, 0, NULL, F_REAL), 0, "0-dim");
        kv_tensor *x = mk2(KV_F32, 4, 10, F_REAL);
        for (int j = 0; j < 10; j++) {
            put(x, j, -INFINITY);                          /* row 0: all -inf */
            put(x, 10 + j, j == 3 ? NAN : 1.0);            /* row 1: a NaN */
            put(x, 20 + j, j < 5 ? -INFINITY : 0.5 * j);   /* row 2: leading -inf */
            put(x, 30 + j, j == 7 ? INFINITY : 1.0);       /* row 3: +inf */
        }
        sm_case(ops[k], x, 1, "f32 non-finite rows");
    }
    /* layer norm: trailing dims, weight and bias, strided input. */
    static const int64_t ns1[1] = { 40 }, ns2[2] = { 3, 10 };
    call c;
    call_init(&c, "native_layer_norm", R_ABS, 0);
    c.bound = rel_bound;
    arg_t(&c, mk2(KV_F32, 6, 40, F_REAL));
    arg_ints(&c, ns1, 1);
    arg_t(&c, mk(KV_F32, 1, S(40), F_REAL));
    arg_t(&c, mk(KV_F32, 1, S(40), F_REAL));
    arg_d(&c, 1e-5);
    check_call(&c, "f32 [6,40] with weight and bias");
    call_init(&c, "native_layer_norm", R_ABS, 0);
    c.bound = rel_bound;
    arg_t(&c, mk(KV_F64, 3, S(4, 3, 10), F_REAL));
    arg_ints(&c, ns2, 2);
    arg_none(&c);
    arg_none(&c);
    arg_d(&c, 1e-6);
    check_call(&c, "f64 two normalized dims");
    call_init(&c, "native_layer_norm", R_ABS, 0);
    c.bound = rel_bound;
    arg_t(&c, mk_t(KV_F32, 12, 40, F_REAL));
    arg_ints(&c, ns1, 1);
    arg_t(&c, mk(KV_F32, 1, S(40), F_REAL));
    arg_none(&c);
    arg_d(&c, 1e-5);
    check_call(&c, "f32 transposed input");
    call_init(&c, "native_group_norm", R_ABS, 0);
    c.bound = rel_bound;
    arg_t(&c, mk(KV_F32, 4, S(2, 6, 5, 3), F_REAL));
    arg_t(&c, mk(KV_F32, 1, S(6), F_REAL));
    arg_t(&c, mk(KV_F32, 1, S(6), F_REAL));
    arg_i(&c, 2);
    arg_i(&c, 6);
    arg_i(&c, 15);
    arg_i(&c, 3);
    arg_d(&c, 1e-5);
    check_call(&c, "f32 [2,6,5,3] 3 groups");
}

/* ---- memory movement, factories, views, lazy ops, backward ---- */

static void exact_case(call *c, const char *what) {
    arg_defaults(c);
    check_call(c, what);
}

static void test_copies_and_factories(void **state) {
    (void)state;
    call c;
    static const int64_t sz[2] = { 3, 5 };
    const char *fac[3] = { "zeros", "ones", "_efficientzerotensor" };
    for (int k = 0; k < 3; k++) {
        call_init(&c, fac[k], R_BITWISE, 0);
        arg_ints(&c, sz, 2);
        arg_dtype(&c, k == 1 ? KV_I32 : KV_F64);
        exact_case(&c, "factory");
    }
    call_init(&c, "full", R_BITWISE, 0);
    arg_ints(&c, sz, 2);
    arg_s(&c, kv_scalar_double(-2.5));
    exact_case(&c, "full f32");
    call_init(&c, "arange", R_BITWISE, 0);
    arg_s(&c, kv_scalar_int(1000));
    arg_dtype(&c, KV_F32);
    exact_case(&c, "arange f32");
    call_init(&c, "fill_.Scalar", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_F32, 4, 6, F_REAL));
    arg_s(&c, kv_scalar_int(7));
    exact_case(&c, "fill transposed");
    call_init(&c, "zero_", R_BITWISE, 0);
    arg_t(&c, mk_s(KV_F64, 4, 6, F_REAL));
    exact_case(&c, "zero strided");
    call_init(&c, "copy_", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_F32, 6, 7, F_REAL));
    arg_t(&c, mk(KV_F32, 1, S(7), F_SPECIAL));
    exact_case(&c, "copy_ broadcast into transposed");
    const char *copies[3] = { "clone", "contiguous", "_to_copy" };
    for (int k = 0; k < 3; k++) {
        call_init(&c, copies[k], R_BITWISE, 0);
        arg_t(&c, mk_s(KV_F32, 5, 9, F_SPECIAL));
        exact_case(&c, "strided");
    }
    kv_tensor *parts[3] = { mk_t(KV_F32, 3, 4, F_REAL), mk2(KV_F32, 3, 2, F_REAL), mk_s(KV_F32, 3, 5, F_REAL) };
    call_init(&c, "cat", R_BITWISE, 0);
    arg_list(&c, 3, parts);
    arg_i(&c, 1);
    exact_case(&c, "cat dim 1 mixed layouts");
    kv_tensor *same[2] = { mk_t(KV_I64, 3, 4, F_INT), mk2(KV_I64, 3, 4, F_INT) };
    call_init(&c, "stack", R_BITWISE, 0);
    arg_list(&c, 2, same);
    arg_i(&c, -1);
    exact_case(&c, "stack last dim");
    kv_tensor *index = mk(KV_I64, 1, S(5), F_INT);
    const int64_t iv[5] = { 3, 0, 3, 1, 2 };
    memcpy(kv_tensor_data(index), iv, sizeof iv);
    call_init(&c, "index_select", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_F32, 4, 6, F_REAL));
    arg_i(&c, 0);
    arg_t(&c, index);
    exact_case(&c, "index_select rows of a transposed tensor");
    kv_tensor *ind = mk2(KV_I32, 2, 3, F_INT);
    const int32_t jv[6] = { 1, 0, 3, 3, 2, 1 };
    memcpy(kv_tensor_data(ind), jv, sizeof jv);
    call_init(&c, "embedding", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 4, 7, F_REAL));
    arg_t(&c, ind);
    exact_case(&c, "embedding");
}

static void test_views_and_lazy(void **state) {
    (void)state;
    call c;
    static const int64_t shape[3] = { 2, -1, 5 }, perm[3] = { 2, 0, 1 }, ex[3] = { 4, 3, -1 };
    static const int64_t asz[2] = { 3, 2 }, ast[2] = { 2, 1 };
    call_init(&c, "view", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 2, S(6, 5), F_REAL));
    arg_ints(&c, shape, 3);
    exact_case(&c, "view");
    call_init(&c, "reshape", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 2, S(6, 5), F_REAL));
    arg_ints(&c, shape, 3);
    exact_case(&c, "reshape contiguous");
    call_init(&c, "transpose.int", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 3, S(2, 3, 5), F_REAL));
    arg_i(&c, 0);
    arg_i(&c, -1);
    exact_case(&c, "transpose");
    call_init(&c, "permute", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 3, S(2, 3, 5), F_REAL));
    arg_ints(&c, perm, 3);
    exact_case(&c, "permute");
    call_init(&c, "t", R_BITWISE, 0);
    arg_t(&c, mk_s(KV_F32, 3, 4, F_REAL));
    exact_case(&c, "t of strided");
    call_init(&c, "select.int", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 3, S(2, 3, 5), F_REAL));
    arg_i(&c, 1);
    arg_i(&c, -1);
    exact_case(&c, "select");
    call_init(&c, "slice.Tensor", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 10, 5, F_REAL));
    arg_i(&c, 0);
    arg_i(&c, 1);
    arg_i(&c, 9);
    arg_i(&c, 3);
    exact_case(&c, "slice with step");
    call_init(&c, "squeeze", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 4, S(1, 3, 1, 2), F_REAL));
    exact_case(&c, "squeeze");
    call_init(&c, "squeeze.dim", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 3, S(3, 1, 2), F_REAL));
    arg_i(&c, 1);
    exact_case(&c, "squeeze.dim");
    call_init(&c, "unsqueeze", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_F32, 3, 2, F_REAL));
    arg_i(&c, 2);
    exact_case(&c, "unsqueeze");
    call_init(&c, "expand", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 3, S(4, 1, 2), F_REAL));
    arg_ints(&c, ex, 3);
    exact_case(&c, "expand");
    call_init(&c, "as_strided", R_BITWISE, 0);
    arg_t(&c, mk(KV_F32, 1, S(8), F_REAL));
    arg_ints(&c, asz, 2);
    arg_ints(&c, ast, 2);
    arg_i(&c, 1);
    exact_case(&c, "as_strided");
    call_init(&c, "detach", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 2, 2, F_REAL));
    exact_case(&c, "detach");
    call_init(&c, "unfold", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 3, 10, F_REAL));
    arg_i(&c, 1);
    arg_i(&c, 3);
    arg_i(&c, 2);
    exact_case(&c, "unfold");
    const char *lz[9] = { "conj", "_conj", "conj_physical", "resolve_conj", "_neg_view", "resolve_neg",
                          "is_conj", "is_neg", "_is_zerotensor" };
    for (int k = 0; k < 9; k++) {
        call_init(&c, lz[k], R_BITWISE, 0);
        arg_t(&c, mk_t(KV_F64, 3, 4, F_REAL));
        exact_case(&c, "f64 transposed");
    }
    /* conj_physical of a complex tensor flips the imaginary parts. */
    kv_tensor *z = kv_tensor_empty(S(3, 4), 2, KV_C64, KV_DEVICE_CPU0);
    float *zp = kv_tensor_data(z);
    for (int i = 0; i < 24; i++) zp[i] = (float)(i - 11) * 0.25f;
    zp[5] = -0.0f;
    call_init(&c, "conj_physical", R_BITWISE, 0);
    arg_t(&c, z);
    exact_case(&c, "c64");
}

static void test_backward(void **state) {
    (void)state;
    call c;
    static const int64_t in[2] = { 4, 6 }, st[2] = { 6, 1 }, osz[2] = { 3, 3 }, ost[2] = { 2, 5 }, ufin[2] = { 3, 10 };
    call_init(&c, "as_strided_backward", R_BITWISE, 0);
    arg_t(&c, mk2(KV_F32, 3, 3, F_REAL));
    arg_ints(&c, in, 2);
    arg_ints(&c, st, 2);
    arg_i(&c, 0);
    arg_ints(&c, osz, 2);
    arg_ints(&c, ost, 2);
    arg_i(&c, 1);
    exact_case(&c, "overlapping windows");
    call_init(&c, "unfold_backward", R_BITWISE, 0);
    arg_t(&c, mk(KV_F64, 3, S(3, 4, 3), F_REAL));
    arg_ints(&c, ufin, 2);
    arg_i(&c, 1);
    arg_i(&c, 3);
    arg_i(&c, 2);
    exact_case(&c, "unfold windows");
    kv_tensor *index = mk(KV_I64, 1, S(5), F_INT);
    const int64_t iv[5] = { 3, 0, 3, 1, 2 };
    memcpy(kv_tensor_data(index), iv, sizeof iv);
    call_init(&c, "index_select_backward", R_BITWISE, 0);
    arg_t(&c, mk_t(KV_F32, 5, 6, F_REAL));
    arg_ints(&c, in, 2);
    arg_i(&c, 0);
    arg_t(&c, index);
    exact_case(&c, "repeated indices");
    for (int scale = 0; scale < 2; scale++) {
        kv_tensor *ind = mk2(KV_I64, 2, 3, F_INT);
        const int64_t jv[6] = { 1, 0, 3, 3, 2, 1 };
        memcpy(kv_tensor_data(ind), jv, sizeof jv);
        call_init(&c, "embedding_dense_backward", R_BITWISE, 0);
        arg_t(&c, mk(KV_F32, 3, S(2, 3, 7), F_REAL));
        arg_t(&c, ind);
        arg_i(&c, 5);
        arg_i(&c, 2);
        arg_b(&c, scale);
        exact_case(&c, scale ? "scale by frequency" : "padding row");
    }
}

/* Predicates keep what they cannot do to the reference. */
static void test_predicates_exclude(void **state) {
    (void)state;
    const kv_op *add = kv_op_find("add.Tensor");
    kv_tensor *a = mk2(KV_F32, 2, 2, F_REAL), *h = kv_tensor_empty(S(2, 2), 2, KV_F16, KV_DEVICE_CPU0);
    kv_tensor *i = mk2(KV_I64, 2, 2, F_INT);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack s = kv_stack_on(slots, KV_STACK_MAX);
    kv_push_tensor(&s, a);
    kv_push_tensor(&s, i); /* mixed dtypes: promotion is the reference's */
    kv_push_scalar(&s, kv_scalar_int(1));
    for (int v = 1; v < kv_tune_variant_count(add, KV_KEY_CPU); v++) assert_false(kv_tune_variant_compatible(add, KV_KEY_CPU, v, &s));
    s.slots[1].v.tensor = h; /* f16 */
    for (int v = 1; v < kv_tune_variant_count(add, KV_KEY_CPU); v++) assert_false(kv_tune_variant_compatible(add, KV_KEY_CPU, v, &s));
    s.slots[1].v.tensor = a;
    s.slots[2].v.scalar = kv_scalar_bool(true); /* an error case: the reference reports it */
    for (int v = 1; v < kv_tune_variant_count(add, KV_KEY_CPU); v++) assert_false(kv_tune_variant_compatible(add, KV_KEY_CPU, v, &s));
    /* ISA caps: a capped CPU makes the higher variants refuse. */
    s.slots[2].v.scalar = kv_scalar_int(1);
    const kv_cpu_isa prev = kv_cpu_set_isa_cap(KV_CPU_ISA_SSE2);
    assert_true(kv_tune_variant_compatible(add, KV_KEY_CPU, kv_tune_variant_find(add, KV_KEY_CPU, "sse2"), &s));
    assert_false(kv_tune_variant_compatible(add, KV_KEY_CPU, kv_tune_variant_find(add, KV_KEY_CPU, "avx2"), &s));
    assert_false(kv_tune_variant_compatible(add, KV_KEY_CPU, kv_tune_variant_find(add, KV_KEY_CPU, "avx512"), &s));
    kv_cpu_set_isa_cap(prev);
    /* The threaded variant only for large tensors. */
    assert_false(kv_tune_variant_compatible(add, KV_KEY_CPU, kv_tune_variant_find(add, KV_KEY_CPU, "threads"), &s));
    kv_tensor_release(a);
    kv_tensor_release(h);
    kv_tensor_release(i);
}

static void test_report(void **state) {
    (void)state;
    /* Not a check: how much was compared, visible in the test log. */
    print_message("compared %d variant calls, %d refusals (AVX-512 %s on this CPU)\n", g_compared, g_refused,
                  kv_cpu_has(KV_CPU_ISA_AVX512) ? "present" : "absent");
    assert_true(g_compared > 300);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_unary_large_threads),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_clamp_where),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_softmax_norm),
        cmocka_unit_test(test_copies_and_factories),
        cmocka_unit_test(test_views_and_lazy),
        cmocka_unit_test(test_backward),
        cmocka_unit_test(test_predicates_exclude),
        cmocka_unit_test(test_report),
    };
    return cmocka_run_group_tests(tests, kv_test_setup_init, NULL);
}
