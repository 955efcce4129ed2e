/* onednn_probe: the measurements behind kernels/onednn's choices, so they
 * can be redone on another CPU or oneDNN version (`ninja onednn-probe`,
 * then build/tools/onednn_probe; DNNL_MAX_CPU_ISA=AVX2 etc. narrows the
 * ISA oneDNN may use).
 *
 * Part 1: f32 eltwise accuracy against libm in double (rounded once to
 * f32, as the reference does), over 2^22 pseudo-random f32 bit patterns
 * (every class: normals, subnormals, zeros, infinities, NaN) and the
 * reference's rule: ulp distance, or for gelu the table's bound
 * |err| <= c*u*(|e| + |x|), reporting c.
 * Part 2: bf16 eltwise over all 65,536 bf16 patterns: how many results are
 * more than 1 bf16 ulp from the correctly rounded one.
 * Part 3: single special values where oneDNN's semantics differ from
 * PyTorch's (NaN, signed zeros, subnormals).
 *
 * A standalone program on oneDNN's C API: it does not use libkv. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static void die(const char *what, dnnl_status_t s) {
    fprintf(stderr, "onednn_probe: %s failed (dnnl_status_t %d)\n", what, (int)s);
    exit(1);
}

#define CK(call)                                  \
    do {                                          \
        const dnnl_status_t s_ = (call);          \
        if (s_ != dnnl_success) die(#call, s_);   \
    } while (0)

/* Runs a primitive for op_desc with (arg, md, ptr) triples. */
static int run(const_dnnl_op_desc_t d, int n, const int *arg, const dnnl_memory_desc_t *const *md, void **ptr) {
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, d, NULL, eng, NULL) != dnnl_success) return -1;
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    dnnl_exec_arg_t a[4];
    dnnl_memory_t m[4];
    for (int i = 0; i < n; i++) {
        CK(dnnl_memory_create(&m[i], md[i], eng, ptr[i]));
        a[i] = (dnnl_exec_arg_t){ arg[i], m[i] };
    }
    CK(dnnl_primitive_execute(p, strm, n, a));
    CK(dnnl_stream_wait(strm));
    for (int i = 0; i < n; i++) dnnl_memory_destroy(m[i]);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

static dnnl_memory_desc_t md1(int64_t n, dnnl_data_type_t dt) {
    dnnl_memory_desc_t md;
    const dnnl_dims_t d = { n }, s = { 1 };
    CK(dnnl_memory_desc_init_by_strides(&md, 1, d, dt, s));
    return md;
}

static int eltwise(dnnl_alg_kind_t alg, float alpha, float beta, dnnl_data_type_t dt, void *x, void *y, int64_t n) {
    const dnnl_memory_desc_t md = md1(n, dt);
    dnnl_eltwise_desc_t ed;
    if (dnnl_eltwise_forward_desc_init(&ed, dnnl_forward_inference, alg, &md, alpha, beta) != dnnl_success) return -1;
    const int arg[2] = { DNNL_ARG_SRC, DNNL_ARG_DST };
    const dnnl_memory_desc_t *mds[2] = { &md, &md };
    void *ptr[2] = { x, y };
    return run(&ed, 2, arg, mds, ptr);
}

static int binary(dnnl_alg_kind_t alg, dnnl_data_type_t dt, void *a, void *b, void *y, int64_t n) {
    const dnnl_memory_desc_t md = md1(n, dt);
    dnnl_binary_desc_t bd;
    CK(dnnl_binary_desc_init(&bd, alg, &md, &md, &md));
    const int arg[3] = { DNNL_ARG_SRC_0, DNNL_ARG_SRC_1, DNNL_ARG_DST };
    const dnnl_memory_desc_t *mds[3] = { &md, &md, &md };
    void *ptr[3] = { a, b, y };
    return run(&bd, 3, arg, mds, ptr);
}

static int reorder(dnnl_data_type_t from, dnnl_data_type_t to, void *x, void *y, int64_t n) {
    const dnnl_memory_desc_t a = md1(n, from), b = md1(n, to);
    dnnl_primitive_desc_t pd;
    if (dnnl_reorder_primitive_desc_create(&pd, &a, eng, &b, eng, NULL) != dnnl_success) return -1;
    dnnl_primitive_t p;
    CK(dnnl_primitive_create(&p, pd));
    dnnl_memory_t ma, mb;
    CK(dnnl_memory_create(&ma, &a, eng, x));
    CK(dnnl_memory_create(&mb, &b, eng, y));
    dnnl_exec_arg_t args[2] = { { DNNL_ARG_FROM, ma }, { DNNL_ARG_TO, mb } };
    CK(dnnl_primitive_execute(p, strm, 2, args));
    CK(dnnl_stream_wait(strm));
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_primitive_destroy(p);
    dnnl_primitive_desc_destroy(pd);
    return 0;
}

/* ---- values ---- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
/* double -> bf16, rounded once to nearest even (NaN stays NaN). */
static uint16_t bf16_round(double d) {
    if (isnan(d)) return 0x7fc0;
    const double a = fabs(d);
    uint16_t best = 0;
    /* Binary search over the positive patterns, which are ordered. */
    int lo = 0, hi = 0x7f80;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (bf16_value((uint16_t)mid) <= a) lo = mid;
        else hi = mid - 1;
    }
    best = (uint16_t)lo;
    if (best < 0x7f80) {
        const double below = bf16_value(best), above = bf16_value((uint16_t)(best + 1));
        if (a - below > above - a || (a - below == above - a && (best & 1))) best++;
    }
    return (uint16_t)(best | (signbit(d) ? 0x8000 : 0));
}
/* Distance in units in the last place between two values of one format,
 * as integers on the sign-magnitude line; NaN matches NaN; a NaN against a
 * number is "infinitely" far. */
static double ulp_distance(int64_t a_bits, int64_t b_bits, int64_t sign, bool a_nan, bool b_nan) {
    if (a_nan || b_nan) return a_nan && b_nan ? 0.0 : INFINITY;
    const int64_t a = a_bits & sign ? -(a_bits & (sign - 1)) : a_bits;
    const int64_t b = b_bits & sign ? -(b_bits & (sign - 1)) : b_bits;
    return (double)llabs(a - b);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

typedef double (*ref_fn)(double x, double p);
static double r_exp(double x, double p) { (void)p; return exp(x); }
static double r_log(double x, double p) { (void)p; return log(x); }
static double r_tanh(double x, double p) { (void)p; return tanh(x); }
static double r_sigmoid(double x, double p) { (void)p; return 1.0 / (1.0 + exp(-x)); }
static double r_silu(double x, double p) { (void)p; return x / (1.0 + exp(-x)); }
static double r_sqrt(double x, double p) { (void)p; return sqrt(x); }
static double r_abs(double x, double p) { (void)p; return fabs(x); }
static double r_rsqrt(double x, double p) { (void)p; return 1.0 / sqrt(x); }
static double r_pow(double x, double p) { return pow(x, p); }
static double r_gelu(double x, double p) { (void)p; return x * 0.5 * (1.0 + erf(x / sqrt(2.0))); }
static double r_gelu_tanh(double x, double p) {
    (void)p;
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

typedef struct probe {
    const char *name;
    dnnl_alg_kind_t alg;
    float alpha, beta;
    ref_fn ref;
    bool input_bound; /* gelu: report c of c*u*(|e|+|x|) instead of ulp */
} probe;

static const probe probes[] = {
    { "exp", dnnl_eltwise_exp, 0, 0, r_exp, false },
    { "log", dnnl_eltwise_log, 0, 0, r_log, false },
    { "tanh", dnnl_eltwise_tanh, 0, 0, r_tanh, false },
    { "sigmoid", dnnl_eltwise_logistic, 0, 0, r_sigmoid, false },
    { "silu", dnnl_eltwise_swish, 1, 0, r_silu, false },
    { "sqrt", dnnl_eltwise_sqrt, 0, 0, r_sqrt, false },
    { "abs", dnnl_eltwise_abs, 0, 0, r_abs, false },
    { "rsqrt=pow-0.5", dnnl_eltwise_pow, 1, -0.5f, r_rsqrt, false },
    { "pow 1", dnnl_eltwise_pow, 1, 1, r_pow, false },
    { "pow 2", dnnl_eltwise_pow, 1, 2, r_pow, false },
    { "pow 3", dnnl_eltwise_pow, 1, 3, r_pow, false },
    { "pow -1", dnnl_eltwise_pow, 1, -1, r_pow, false },
    { "pow 0.5", dnnl_eltwise_pow, 1, 0.5f, r_pow, false },
    { "gelu erf", dnnl_eltwise_gelu_erf, 0, 0, r_gelu, true },
    { "gelu tanh", dnnl_eltwise_gelu_tanh, 0, 0, r_gelu_tanh, true },
};

static void part1(void) {
    const int64_t n = (int64_t)1 << 22;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    if (x == NULL || y == NULL) exit(1);
    printf("f32 eltwise over 2^22 random bit patterns (worst element):\n");
    for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
        const probe *p = &probes[k];
        for (int64_t i = 0; i < n; i++) {
            const uint32_t u = next_u32();
            memcpy(&x[i], &u, sizeof u);
        }
        if (eltwise(p->alg, p->alpha, p->beta, dnnl_f32, x, y, n) != 0) {
            printf("  %-14s no oneDNN kernel\n", p->name);
            continue;
        }
        double worst = 0.0;
        int64_t at = 0;
        for (int64_t i = 0; i < n; i++) {
            const double e = (float)p->ref(x[i], p->beta);
            double d;
            if (p->input_bound) {
                if (isnan(e) || isnan(y[i]) || isinf(e) || isinf(y[i]))
                    d = (isnan(e) && isnan(y[i])) || e == y[i] ? 0.0 : INFINITY;
                else d = fabs(y[i] - e) / (0x1p-24 * (fabs(e) + fabs(x[i])) + 1e-300);
            } else {
                d = ulp_distance(f32_bits((float)e), f32_bits(y[i]), 0x80000000ll, isnan(e), isnan(y[i]));
            }
            if (d > worst) {
                worst = d;
                at = i;
            }
        }
        printf("  %-14s %s %-10g at x = %a: got %a, want %a\n", p->name, p->input_bound ? "c =" : "ulp", worst,
               x[at], y[at], (float)p->ref(x[at], p->beta));
    }
    free(x);
    free(y);
}

static void part2(void) {
    const int64_t n = 65536;
    uint16_t *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
    if (x == NULL || y == NULL) exit(1);
    for (int64_t i = 0; i < n; i++) x[i] = (uint16_t)i;
    printf("bf16 eltwise over all 65,536 patterns (results more than 1 bf16 ulp off; worst):\n");
    for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
        const probe *p = &probes[k];
        if (p->input_bound) continue;
        if (eltwise(p->alg, p->alpha, p->beta, dnnl_bf16, x, y, n) != 0) {
            printf("  %-14s no oneDNN kernel\n", p->name);
            continue;
        }
        int64_t bad = 0, at = 0;
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const uint16_t e = bf16_round(p->ref(bf16_value(x[i]), p->beta));
            const double d = ulp_distance(e, y[i], 0x8000, isnan(bf16_value(e)), isnan(bf16_value(y[i])));
            bad += d > 1.0;
            if (d > worst) {
                worst = d;
                at = i;
            }
        }
        printf("  %-14s %6lld off, worst %g ulp at x = %a: got %a\n", p->name, (long long)bad, worst,
               bf16_value(x[at]), bf16_value(y[at]));
    }
    free(x);
    free(y);
}

static void part3(void) {
    printf("special values:\n");
    float s[4] = { NAN, -0.0f, -1.5f, 2.0f }, o[4];
    if (eltwise(dnnl_eltwise_relu, 0, 0, dnnl_f32, s, o, 4) == 0)
        printf("  relu(NaN, -0, -1.5, 2) = %g %g %g %g (PyTorch: nan -0 0 2)\n", o[0], o[1], o[2], o[3]);
    if (eltwise(dnnl_eltwise_clip, -1, 1, dnnl_f32, s, o, 4) == 0)
        printf("  clip[-1,1](NaN) = %g (PyTorch: nan)\n", o[0]);
    if (eltwise(dnnl_eltwise_linear, -1, 0, dnnl_f32, (float[]){ 0.0f }, o, 1) == 0)
        printf("  linear(-1, 0)(+0) = %s0 (neg: -0)\n", signbit(o[0]) ? "-" : "+");
    if (eltwise(dnnl_eltwise_exp, 0, 0, dnnl_f32, s, o, 1) == 0) printf("  exp(NaN) = %g\n", o[0]);
    float a[2] = { NAN, 0.0f }, b[2] = { 1.0f, -0.0f };
    if (binary(dnnl_binary_max, dnnl_f32, a, b, o, 2) == 0)
        printf("  binary max(NaN, 1) = %g, max(+0, -0) = %s0 (IEEE maximum: nan, +0)\n", o[0], signbit(o[1]) ? "-" : "+");
    uint16_t h[2] = { 0x0001, 0x0040 }, z[2] = { 0, 0 }, hy[2];
    if (binary(dnnl_binary_add, dnnl_bf16, h, z, hy, 2) == 0)
        printf("  bf16 add(subnormal 0x0001 + 0) = 0x%04x (exact: 0x0001)\n", hy[0]);
    float tiny = 1e-39f;
    if (reorder(dnnl_f32, dnnl_bf16, &tiny, hy, 1) == 0) printf("  f32 -> bf16 of 1e-39 = 0x%04x (RNE: 0x000b)\n", hy[0]);
    uint16_t hm0 = 0x8000;
    float f;
    if (reorder(dnnl_f16, dnnl_f32, &hm0, &f, 1) == 0) printf("  f16 -> f32 of -0 = %s0\n", signbit(f) ? "-" : "+");
    if (reorder(dnnl_bf16, dnnl_f32, &hm0, &f, 1) == 0) printf("  bf16 -> f32 of -0 = %s0\n", signbit(f) ? "-" : "+");
    float neg[2] = { -1e-30f, -0.0f };
    if (reorder(dnnl_f32, dnnl_f16, neg, hy, 2) == 0)
        printf("  f32 -> f16 of -1e-30, -0 = 0x%04x 0x%04x (RNE: 0x8000 0x8000)\n", hy[0], hy[1]);
    float m0 = -0.0f, m1 = -INFINITY;
    if (eltwise(dnnl_eltwise_pow, 1, -0.5f, dnnl_f32, &m0, o, 1) == 0 &&
        eltwise(dnnl_eltwise_pow, 1, -0.5f, dnnl_f32, &m1, o + 1, 1) == 0)
        printf("  pow(-0, -0.5) = %g, pow(-Inf, -0.5) = %g (rsqrt = 1/sqrt: -inf, nan)\n", o[0], o[1]);
}

int main(void) {
    CK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    CK(dnnl_stream_create(&strm, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d (%s)\n", v->major, v->minor, v->patch, v->hash);
    part1();
    part2();
    part3();
    dnnl_stream_destroy(strm);
    dnnl_engine_destroy(eng);
    return 0;
}
