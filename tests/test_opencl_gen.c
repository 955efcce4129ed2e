/* The OpenCL backend's kernel generator (kernels/opencl/ocl_gen.c) without
 * a device: which (op, dtype, width, layout) it has templates for, the
 * source text each template writes, the knobs (vector width, work-group
 * size) and the planted generator versions of KV_OPENCL_GENERATOR. The
 * suite's variants:opencl rows are the real test of what the text computes. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "opencl/ocl_gen.h"

static kv_ocl_spec spec(kv_ocl_kind kind, const char *fn, kv_dtype in, kv_dtype out, int vw, kv_ocl_layout layout,
                        kv_ocl_gen_version v) {
    return (kv_ocl_spec){ kind, fn, in, out, vw, layout, v, 0, 0 };
}

/* The source for s, which must exist. */
static const char *src_of(kv_ocl_spec s) {
    static char buf[8192];
    const int n = kv_ocl_gen_source(&s, buf, sizeof buf);
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(buf));
    return buf;
}

static void has(const char *src, const char *needle) {
    if (strstr(src, needle) == NULL) fail_msg("expected '%s' in:\n%s", needle, src);
}

static void lacks(const char *src, const char *needle) {
    if (strstr(src, needle) != NULL) fail_msg("did not expect '%s' in:\n%s", needle, src);
}

static void test_versions(void **state) {
    (void)state;
    const char *names[] = { "v1", "v2-tail8", "v2-rounding", "v2-slow-wg", "v2-drop-f16", "v2-drift" };
    for (int i = 0; i < KV_OCL_GEN_VERSION_COUNT; i++) {
        kv_ocl_gen_version v;
        assert_true(kv_ocl_gen_version_parse(names[i], &v));
        assert_int_equal(v, i);
        assert_string_equal(kv_ocl_gen_version_name(v), names[i]);
        has(kv_ocl_gen_version_list(), names[i]);
    }
    kv_ocl_gen_version v;
    assert_false(kv_ocl_gen_version_parse("", &v));
    assert_false(kv_ocl_gen_version_parse("v3", &v));
    assert_false(kv_ocl_gen_version_parse("V1", &v));
}

static void test_supports(void **state) {
    (void)state;
    const kv_ocl_gen_version v1 = KV_OCL_GEN_V1;
    kv_ocl_spec s = spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 8, KV_OCL_CONTIG, v1);
    assert_true(kv_ocl_gen_supports(&s));
    s.in = s.out = KV_I32;
    assert_false(kv_ocl_gen_supports(&s)); /* integer arithmetic is declined */
    s = spec(KV_OCL_BINARY, "pow", KV_F32, KV_F32, 1, KV_OCL_CONTIG, v1);
    assert_false(kv_ocl_gen_supports(&s));
    s = spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 2, KV_OCL_CONTIG, v1);
    assert_false(kv_ocl_gen_supports(&s)); /* widths 1, 4, 8 */
    s = spec(KV_OCL_UNARY, "exp", KV_F32, KV_F32, 4, KV_OCL_CONTIG, v1);
    assert_true(kv_ocl_gen_supports(&s));
    s.in = s.out = KV_F64; /* 3-ulp double built-ins vs the 1-ulp f64 row */
    assert_false(kv_ocl_gen_supports(&s));
    s = spec(KV_OCL_UNARY, "sqrt", KV_F64, KV_F64, 4, KV_OCL_CONTIG, v1);
    assert_true(kv_ocl_gen_supports(&s));
    s = spec(KV_OCL_COPY, "copy", KV_C64, KV_C64, 4, KV_OCL_CONTIG, v1);
    assert_true(kv_ocl_gen_supports(&s)); /* bits */
    s.in = s.out = KV_C128;
    assert_false(kv_ocl_gen_supports(&s));
    s = spec(KV_OCL_COPY, "copy", KV_I32, KV_F32, 1, KV_OCL_CONTIG, v1);
    assert_false(kv_ocl_gen_supports(&s)); /* conversions: floats only */
    s = spec(KV_OCL_COPY, "copy", KV_BF16, KV_F16, 1, KV_OCL_STRIDED, v1);
    assert_true(kv_ocl_gen_supports(&s));
    s.version = KV_OCL_GEN_V2_DROP_F16;
    assert_false(kv_ocl_gen_supports(&s));
    s.out = KV_F32;
    assert_true(kv_ocl_gen_supports(&s));
    char buf[64];
    s.fn = "nope";
    assert_int_equal(kv_ocl_gen_source(&s, buf, sizeof buf), -1);
}

static void test_contiguous_text(void **state) {
    (void)state;
    const char *s = src_of(spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 8, KV_OCL_CONTIG, KV_OCL_GEN_V1));
    has(s, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable");
    has(s, "__kernel void kv_b_add_f32_f32_c8(__global const float *a, long a_off, __global const float *b, "
           "long b_off, __global float *o, long o_off, long n, double alpha)");
    has(s, "vload8(0, p + i)");
    has(s, "fma((double8)(alpha), y, x)");
    has(s, "fma((double)(alpha), y, x)"); /* the tail keeps alpha */
    has(s, "convert_float8_rte(v)");
    has(s, "get_global_id(0) * 8");
    lacks(s, "long8 sz");
    s = src_of(spec(KV_OCL_BINARY, "sub", KV_F64, KV_F64, 1, KV_OCL_CONTIG, KV_OCL_GEN_V1));
    has(s, "fma((double)(-alpha), y, x)");
    lacks(strstr(s, "__kernel"), "kv_ldv"); /* width 1: no vector loads in the kernel */
    s = src_of(spec(KV_OCL_BINARY, "div", KV_F32, KV_F32, 4, KV_OCL_CONTIG, KV_OCL_GEN_V1));
    has(s, "(x / y)");
    s = src_of(spec(KV_OCL_UNARY, "relu", KV_F32, KV_F32, 4, KV_OCL_CONTIG, KV_OCL_GEN_V1));
    /* -0 and NaN lanes keep their bits; negative lanes are cleared. */
    has(s, "as_double4(as_long4(x) & ~(x < (double4)(0.0)))");
    has(s, "(x < 0.0 ? 0.0 : x)");
}

static void test_strided_text(void **state) {
    (void)state;
    /* The strided class ignores the width: one element per work-item. */
    const char *s = src_of(spec(KV_OCL_BINARY, "mul", KV_BF16, KV_BF16, 8, KV_OCL_STRIDED, KV_OCL_GEN_V1));
    has(s, "__kernel void kv_b_mul_bf16_bf16_s(");
    has(s, "long nd, long8 sz, long8 sa, long8 sb, long8 so)");
    has(s, "ib += k * eb[d];");
    has(s, "get_global_id(0);");
    lacks(strstr(s, "__kernel"), "kv_ldv");
    has(s, "(double)as_float((uint)p[i] << 16)");
    has(s, "kv_bf16_rne");
    has(s, "convert_float_rtz(v)");
    s = src_of(spec(KV_OCL_COPY, "copy", KV_I64, KV_I64, 4, KV_OCL_STRIDED, KV_OCL_GEN_V1));
    has(s, "__kernel void kv_c_copy_ulong_ulong_s(__global const ulong *a");
    has(s, "o[io] = a[ia];");
    lacks(s, "double x");
}

static void test_half_text(void **state) {
    (void)state;
    const char *s = src_of(spec(KV_OCL_COPY, "copy", KV_F32, KV_F16, 4, KV_OCL_CONTIG, KV_OCL_GEN_V1));
    has(s, "vstore_half4_rte(v, 0, p + i)");
    has(s, "vstore_half_rte(v, 0, p + i)");
    lacks(s, "rtz");
    s = src_of(spec(KV_OCL_COPY, "copy", KV_F32, KV_F16, 4, KV_OCL_CONTIG, KV_OCL_GEN_V2_ROUNDING));
    has(s, "vstore_half4_rtz");
    has(s, "vstore_half_rtz");
    s = src_of(spec(KV_OCL_UNARY, "neg", KV_F16, KV_F16, 8, KV_OCL_CONTIG, KV_OCL_GEN_V1));
    has(s, "vload_half8(0, p + i)");
}

static void test_planted_versions(void **state) {
    (void)state;
    /* tail8: only the width-8 tail of add/sub forgets alpha. */
    const char *s = src_of(spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 8, KV_OCL_CONTIG, KV_OCL_GEN_V2_TAIL8));
    has(s, "fma((double)(1.0), y, x)");
    has(s, "fma((double8)(alpha), y, x)");
    s = src_of(spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 4, KV_OCL_CONTIG, KV_OCL_GEN_V2_TAIL8));
    lacks(s, "(1.0)");
    s = src_of(spec(KV_OCL_BINARY, "sub", KV_F32, KV_F32, 8, KV_OCL_CONTIG, KV_OCL_GEN_V2_TAIL8));
    has(s, "fma((double)(-1.0), y, x)");
    /* drift: the product rounded to f32 before an f32 add. */
    s = src_of(spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 8, KV_OCL_CONTIG, KV_OCL_GEN_V2_DRIFT));
    has(s, "convert_float8(x) + convert_float8((double8)(alpha) * y)");
    has(s, "(double)((float)x + (float)(alpha * y))");
    lacks(s, "fma(");
    s = src_of(spec(KV_OCL_BINARY, "mul", KV_F32, KV_F32, 8, KV_OCL_CONTIG, KV_OCL_GEN_V2_DRIFT));
    has(s, "(x * y)");
    /* Every version names itself in the program, so programs of two
     * versions never share a cache entry. */
    has(s, "generator v2-drift");
    const kv_ocl_spec slow = spec(KV_OCL_UNARY, "neg", KV_F32, KV_F32, 4, KV_OCL_CONTIG, KV_OCL_GEN_V2_SLOW_WG);
    const kv_ocl_spec fast = spec(KV_OCL_UNARY, "neg", KV_F32, KV_F32, 4, KV_OCL_CONTIG, KV_OCL_GEN_V1);
    assert_int_equal(kv_ocl_gen_wg_size(&slow), 1);
    assert_int_equal(kv_ocl_gen_wg_size(&fast), 64);
}

static void test_options_and_limits(void **state) {
    (void)state;
    has(kv_ocl_gen_build_options(), "-cl-fp32-correctly-rounded-divide-sqrt");
    lacks(kv_ocl_gen_build_options(), "fast-relaxed");
    lacks(kv_ocl_gen_build_options(), "mad-enable");
    /* A buffer too small for the text gives -1, never a truncated program. */
    kv_ocl_spec s = spec(KV_OCL_BINARY, "add", KV_F32, KV_F32, 8, KV_OCL_CONTIG, KV_OCL_GEN_V1);
    char small[200];
    assert_int_equal(kv_ocl_gen_source(&s, small, sizeof small), -1);
    /* The same spec gives the same text (the program cache's key). */
    char a[8192], b[8192];
    assert_true(kv_ocl_gen_source(&s, a, sizeof a) > 0);
    assert_true(kv_ocl_gen_source(&s, b, sizeof b) > 0);
    assert_string_equal(a, b);
}

/* The program the plugin builds: every supported spec once, each kernel
 * name once, helpers once per dtype. */
static void test_program(void **state) {
    (void)state;
    static char prog[1 << 20];
    int nk = 0;
    const int len = kv_ocl_gen_program(KV_OCL_GEN_V1, prog, sizeof prog, &nk);
    assert_true(len > 0);
    /* 4 float dtypes x (4 binary + 4 exact unary + 12 conversions), 3
     * dtypes x 5 libm unary, 4 raw words; 4 kernels (3 widths + strided)
     * each. Then 4 float dtypes x (sum, mean, softmax, log_softmax,
     * layer_norm, mm, addmm) at 3 knob values each. */
    assert_int_equal(nk, 4 * (4 * (4 + 4 + 3) + 3 * 5 + 4) + 4 * 7 * 3);
    /* The runtime builds it from a buffer of 1 MiB (ocl_runtime.c). */
    assert_true(len < (1 << 20));
    int kernels = 0;
    for (const char *p = prog; (p = strstr(p, "__kernel ")) != NULL; p++) kernels++;
    assert_int_equal(kernels, nk);
    const char *names[] = { "kv_b_add_f32_f32_c1(", "kv_b_div_bf16_bf16_s(", "kv_u_tanh_f16_f16_c8(",
                            "kv_c_copy_f64_bf16_c4(", "kv_c_copy_uchar_uchar_s(", "kv_r_mean_bf16_bf16_w16(",
                            "kv_s_log_softmax_f64_f64_w256(", "kv_n_layer_norm_f16_f16_w64(", "kv_m_addmm_f32_f32_t4(" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *at = strstr(prog, names[i]);
        if (at == NULL) fail_msg("no kernel %s", names[i]);
        assert_null(strstr(at + 1, names[i]));
    }
    assert_null(strstr(prog, "kv_u_exp_f64_f64"));
    const char *st = strstr(prog, "static void kv_st_f16(");
    assert_non_null(st);
    assert_null(strstr(st + 1, "static void kv_st_f16("));
    /* The version reaches the program (a different cache entry), and a
     * dropped dtype drops its kernels. */
    static char drop[1 << 20];
    int nd = 0;
    assert_true(kv_ocl_gen_program(KV_OCL_GEN_V2_DROP_F16, drop, sizeof drop, &nd) > 0);
    assert_true(nd < nk);
    assert_null(strstr(drop, "_f16_f16_"));
    has(drop, "generator v2-drop-f16");
    char small[4096];
    assert_int_equal(kv_ocl_gen_program(KV_OCL_GEN_V1, small, sizeof small, NULL), -1);
}

/* The reduction, softmax, norm and matmul families: their knobs, names,
 * work-group sizes and the text that fixes their numerics. */
static kv_ocl_spec fam(kv_ocl_kind kind, const char *fn, kv_dtype dt, int wg, int tile, kv_ocl_gen_version v) {
    return (kv_ocl_spec){ .kind = kind, .fn = fn, .in = dt, .out = dt, .vw = 1, .version = v, .wg = wg, .tile = tile };
}

static void test_families(void **state) {
    (void)state;
    const kv_ocl_gen_version v1 = KV_OCL_GEN_V1;
    kv_ocl_spec s = fam(KV_OCL_REDUCE, "sum", KV_F16, 64, 0, v1);
    assert_true(kv_ocl_gen_supports(&s));
    s.wg = 32; /* knobs: 16, 64, 256 */
    assert_false(kv_ocl_gen_supports(&s));
    s = fam(KV_OCL_REDUCE, "sum", KV_I32, 64, 0, v1);
    assert_false(kv_ocl_gen_supports(&s)); /* integer sums: no template */
    s = fam(KV_OCL_REDUCE, "prod", KV_F32, 64, 0, v1);
    assert_false(kv_ocl_gen_supports(&s));
    s = fam(KV_OCL_REDUCE, "mean", KV_F32, 16, 0, v1);
    s.out = KV_F64; /* conversions are declined */
    assert_false(kv_ocl_gen_supports(&s));
    s = fam(KV_OCL_MATMUL, "mm", KV_BF16, 0, 8, v1);
    assert_true(kv_ocl_gen_supports(&s));
    s.tile = 64;
    assert_false(kv_ocl_gen_supports(&s));
    s = fam(KV_OCL_SOFTMAX, "softmax", KV_F16, 16, 0, KV_OCL_GEN_V2_DROP_F16);
    assert_false(kv_ocl_gen_supports(&s));
    /* Work-groups: a reduction's knob, matmul's tile squared; v2-slow-wg
     * leaves them alone (their kernels are written for that size). */
    s = fam(KV_OCL_NORM, "layer_norm", KV_F32, 256, 0, KV_OCL_GEN_V2_SLOW_WG);
    assert_int_equal(kv_ocl_gen_wg_size(&s), 256);
    s = fam(KV_OCL_MATMUL, "addmm", KV_F32, 0, 16, KV_OCL_GEN_V2_SLOW_WG);
    assert_int_equal(kv_ocl_gen_wg_size(&s), 256);

    /* sum: f32 accumulator for f16, a tree of the knob's width. */
    const char *t = src_of(fam(KV_OCL_REDUCE, "sum", KV_F16, 64, 0, v1));
    has(t, "kv_r_sum_f16_f16_w64(");
    has(t, "reqd_work_group_size(64, 1, 1)");
    has(t, "__local float part[64];");
    has(t, "acc += (float)kv_ld_f16(a, off);");
    has(t, "for (int h = 32; h > 0; h >>= 1)");
    lacks(t, "/ (double)nred");
    t = src_of(fam(KV_OCL_REDUCE, "mean", KV_F64, 16, 0, v1));
    has(t, "__local double part[16];");
    has(t, "kv_st_f64(o, g, (double)part[0] / (double)nred)");
    /* softmax: NaN wins the max; log_softmax subtracts log(sum). */
    t = src_of(fam(KV_OCL_SOFTMAX, "softmax", KV_F32, 256, 0, v1));
    has(t, "if (isnan(x) || x > m) m = isnan(m) ? m : x;");
    has(t, "acc += exp((float)kv_ld_f32(a, ia + j * sa) - m);");
    has(t, "exp(d) / sum");
    t = src_of(fam(KV_OCL_SOFTMAX, "log_softmax", KV_BF16, 16, 0, v1));
    has(t, "const float ls = log(sum);");
    has(t, "d - ls");
    /* layer_norm: the scaling threshold per accumulator, statistics in
     * double. */
    t = src_of(fam(KV_OCL_NORM, "layer_norm", KV_F32, 64, 0, v1));
    has(t, "part[0] > 0x1p40 ?");
    has(t, "const double rstd_s = 1.0 / sqrt(");
    t = src_of(fam(KV_OCL_NORM, "layer_norm", KV_F64, 64, 0, v1));
    has(t, "part[0] > 0x1p500 ?");
    /* matmul: tiles in local memory; addmm reads self only for beta != 0. */
    t = src_of(fam(KV_OCL_MATMUL, "mm", KV_F16, 0, 8, v1));
    has(t, "__local float ta[8][8], tb[8][8];");
    has(t, "reqd_work_group_size(64, 1, 1)");
    lacks(t, "beta");
    t = src_of(fam(KV_OCL_MATMUL, "addmm", KV_F64, 0, 4, v1));
    has(t, "__local double ta[4][4], tb[4][4];");
    has(t, "if (beta != 0.0) v = beta * kv_ld_f64(c + c_off, i * cs0 + j * cs1) + v;");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions),         cmocka_unit_test(test_supports),
        cmocka_unit_test(test_contiguous_text),  cmocka_unit_test(test_strided_text),
        cmocka_unit_test(test_half_text),        cmocka_unit_test(test_planted_versions),
        cmocka_unit_test(test_options_and_limits), cmocka_unit_test(test_program),
        cmocka_unit_test(test_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
