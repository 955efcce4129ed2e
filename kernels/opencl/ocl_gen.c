/* The kernel generator (ocl_gen.h): OpenCL C text from templates.
 *
 * A program is the fp64 pragma, the load/store helpers of its dtypes and
 * its kernels, each named by its spec, whose body comes from the layout
 * class: the
 * contiguous class handles vw elements per work-item with vloadN/vstoreN
 * and a scalar tail, the strided class one element per work-item with its
 * offsets computed from the linear index. Every piece is appended with
 * gen_put, which fails (and the whole source with it) when the buffer is
 * full, so a truncated program can never be built. */
#include "opencl/ocl_gen.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const gen_version_names[KV_OCL_GEN_VERSION_COUNT] = {
    "v1", "v2-tail8", "v2-rounding", "v2-slow-wg", "v2-drop-f16", "v2-drift",
};

bool kv_ocl_gen_version_parse(const char *s, kv_ocl_gen_version *out) {
    for (int v = 0; v < KV_OCL_GEN_VERSION_COUNT; v++) {
        if (strcmp(s, gen_version_names[v]) == 0) {
            *out = (kv_ocl_gen_version)v;
            return true;
        }
    }
    return false;
}

const char *kv_ocl_gen_version_name(kv_ocl_gen_version v) {
    return (int)v >= 0 && v < KV_OCL_GEN_VERSION_COUNT ? gen_version_names[v] : "unknown";
}

const char *kv_ocl_gen_version_list(void) { return "v1, v2-tail8, v2-rounding, v2-slow-wg, v2-drop-f16, v2-drift"; }

const char *kv_ocl_gen_build_options(void) { return "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"; }

size_t kv_ocl_gen_wg_size(const kv_ocl_spec *spec) {
    switch (spec->kind) {
    case KV_OCL_REDUCE:
    case KV_OCL_SOFTMAX:
    case KV_OCL_NORM: return (size_t)spec->wg;
    case KV_OCL_MATMUL: return (size_t)spec->tile * (size_t)spec->tile;
    case KV_OCL_BINARY:
    case KV_OCL_UNARY:
    case KV_OCL_COPY: break;
    }
    return spec->version == KV_OCL_GEN_V2_SLOW_WG ? 1 : 64;
}

/* ---- what the templates know ---- */

static const char *const gen_binary_fns[] = { "add", "sub", "mul", "div" };
/* Transcendental built-ins are within 3 ulp in double (OpenCL C spec,
 * table 7.2's double column, PoCL's SLEEF implementation is 1 ulp): one
 * more rounding into f32 or narrower keeps them within the table's ulp
 * rows (exp 2, log 1, sin/cos 2, tanh 2; 1 for f16/bf16), but not the f64
 * rows (1 ulp), so those take no f64. */
static const char *const gen_unary_exact[] = { "neg", "abs", "relu", "sqrt" };
static const char *const gen_unary_libm[] = { "exp", "log", "sin", "cos", "tanh" };
static const char *const gen_reduce_fns[] = { "sum", "mean" };
static const char *const gen_softmax_fns[] = { "softmax", "log_softmax" };
static const char *const gen_matmul_fns[] = { "mm", "addmm" };
/* The knobs of the tree families (sum, mean, softmax, layer norm: the
 * work-group size) and of matmul (the tile edge): their variants. */
static const int gen_tree_wgs[] = { 16, 64, 256 };
static const int gen_matmul_tiles[] = { 4, 8, 16 };

static bool gen_int_in(int v, const int *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v == list[i]) return true;
    return false;
}
#define GEN_INT_IN(v, list) gen_int_in(v, list, sizeof list / sizeof list[0])

static bool gen_in(const char *fn, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(fn, list[i]) == 0) return true;
    return false;
}
#define GEN_IN(fn, list) gen_in(fn, list, sizeof list / sizeof list[0])

static bool gen_float_dtype(kv_dtype dt) { return dt == KV_F32 || dt == KV_F64 || dt == KV_F16 || dt == KV_BF16; }

/* The raw word a same-dtype copy moves per element (bits, never values). */
static const char *gen_raw_type(kv_dtype dt) {
    switch (dt) {
    case KV_BOOL:
    case KV_U8:
    case KV_I8: return "uchar";
    case KV_I16:
    case KV_F16:
    case KV_BF16: return "ushort";
    case KV_I32:
    case KV_F32: return "uint";
    case KV_I64:
    case KV_F64:
    case KV_C64: return "ulong";
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return NULL;
}

static bool gen_raw_copy(const kv_ocl_spec *s) { return s->kind == KV_OCL_COPY && s->in == s->out; }

bool kv_ocl_gen_supports(const kv_ocl_spec *s) {
    if (s->fn == NULL) return false;
    if (s->version == KV_OCL_GEN_V2_DROP_F16 && (s->in == KV_F16 || s->out == KV_F16)) return false;
    const bool one_float = s->in == s->out && gen_float_dtype(s->in);
    const bool width = s->vw == 1 || s->vw == 4 || s->vw == 8;
    switch (s->kind) {
    case KV_OCL_BINARY: return width && one_float && GEN_IN(s->fn, gen_binary_fns);
    case KV_OCL_UNARY:
        if (!width || !one_float) return false;
        if (GEN_IN(s->fn, gen_unary_exact)) return true;
        return GEN_IN(s->fn, gen_unary_libm) && s->in != KV_F64;
    case KV_OCL_COPY:
        if (!width || strcmp(s->fn, "copy") != 0) return false;
        if (s->in == s->out) return gen_raw_type(s->in) != NULL;
        return gen_float_dtype(s->in) && gen_float_dtype(s->out);
    /* The tree and tile families: one float dtype in and out (the
     * accumulator follows it: gen_acc_type), a knob from their list. */
    case KV_OCL_REDUCE: return one_float && GEN_IN(s->fn, gen_reduce_fns) && GEN_INT_IN(s->wg, gen_tree_wgs);
    case KV_OCL_SOFTMAX: return one_float && GEN_IN(s->fn, gen_softmax_fns) && GEN_INT_IN(s->wg, gen_tree_wgs);
    case KV_OCL_NORM: return one_float && strcmp(s->fn, "layer_norm") == 0 && GEN_INT_IN(s->wg, gen_tree_wgs);
    case KV_OCL_MATMUL: return one_float && GEN_IN(s->fn, gen_matmul_fns) && GEN_INT_IN(s->tile, gen_matmul_tiles);
    }
    return false;
}

/* ---- text assembly ---- */

typedef struct gen_buf {
    char *p;
    size_t cap, len;
    bool full;
} gen_buf;

static void gen_put(gen_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gen_put(gen_buf *b, const char *fmt, ...) {
    if (b->full) return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len) {
        b->full = true;
        return;
    }
    b->len += (size_t)n;
}

/* The storage type of a dtype in kernel arguments. half is legal as a
 * pointer target without cl_khr_fp16 (only vload_half/vstore_half touch
 * it); bf16 is its raw ushort. */
static const char *gen_storage_type(kv_dtype dt) {
    switch (dt) {
    case KV_F32: return "float";
    case KV_F64: return "double";
    case KV_F16: return "half";
    case KV_BF16: return "ushort";
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return NULL;
}

static const char *gen_arg_type(const kv_ocl_spec *s, kv_dtype dt) {
    return gen_raw_copy(s) ? gen_raw_type(dt) : gen_storage_type(dt);
}

/* Helpers: kv_ld_<tag>(p, i) -> double, kv_ldv_<tag>(p, i) -> doubleN,
 * kv_st_<tag>(p, i, v), kv_stv_<tag>(p, i, vN). Each dtype's helpers are
 * emitted once even when in == out. */
static const char *gen_tag(kv_dtype dt) {
    switch (dt) {
    case KV_F32: return "f32";
    case KV_F64: return "f64";
    case KV_F16: return "f16";
    case KV_BF16: return "bf16";
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return "raw";
}

static void gen_load_helpers(gen_buf *b, kv_dtype dt) {
    const char *t = gen_tag(dt);
    const char *st = gen_storage_type(dt);
    switch (dt) {
    case KV_F32:
    case KV_F64:
        gen_put(b, "static double kv_ld_%s(__global const %s *p, long i) { return (double)p[i]; }\n", t, st);
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static double%d kv_ldv%d_%s(__global const %s *p, long i) { return convert_double%d(vload%d(0, p + i)); }\n",
                    vw, vw, t, st, vw, vw);
        return;
    case KV_F16:
        gen_put(b, "static double kv_ld_f16(__global const half *p, long i) { return (double)vload_half(0, p + i); }\n");
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static double%d kv_ldv%d_f16(__global const half *p, long i) { return convert_double%d(vload_half%d(0, p + i)); }\n",
                    vw, vw, vw, vw);
        return;
    case KV_BF16:
        /* bf16 is the top half of an f32: widening is a shift, exact. */
        gen_put(b, "static double kv_ld_bf16(__global const ushort *p, long i) { return (double)as_float((uint)p[i] << 16); }\n");
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static double%d kv_ldv%d_bf16(__global const ushort *p, long i) { return convert_double%d(as_float%d(convert_uint%d(vload%d(0, p + i)) << %u)); }\n",
                    vw, vw, vw, vw, vw, vw, 16u);
        return;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
}

static void gen_store_helpers(gen_buf *b, kv_dtype dt, kv_ocl_gen_version version) {
    switch (dt) {
    case KV_F32:
        gen_put(b, "static void kv_st_f32(__global float *p, long i, double v) { p[i] = convert_float_rte(v); }\n");
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static void kv_stv%d_f32(__global float *p, long i, double%d v) { vstore%d(convert_float%d_rte(v), 0, p + i); }\n",
                    vw, vw, vw, vw);
        return;
    case KV_F64:
        gen_put(b, "static void kv_st_f64(__global double *p, long i, double v) { p[i] = v; }\n");
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static void kv_stv%d_f64(__global double *p, long i, double%d v) { vstore%d(v, 0, p + i); }\n", vw,
                    vw, vw);
        return;
    case KV_F16: {
        /* vstore_half_rte of a double rounds once, to nearest even (OpenCL
         * C 1.2, 6.12.7). v2-rounding plants the lost rounding step. */
        const char *mode = version == KV_OCL_GEN_V2_ROUNDING ? "rtz" : "rte";
        gen_put(b, "static void kv_st_f16(__global half *p, long i, double v) { vstore_half_%s(v, 0, p + i); }\n", mode);
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static void kv_stv%d_f16(__global half *p, long i, double%d v) { vstore_half%d_%s(v, 0, p + i); }\n",
                    vw, vw, vw, mode);
        return;
    }
    case KV_BF16:
        /* One rounding from double to bf16 without double rounding: round
         * to odd into f32 (truncate, then set the last bit when anything
         * was dropped), then to nearest even into bf16; f32 keeps 16 bits
         * more than bf16, so the sticky bit decides ties exactly (also for
         * subnormals, whose f32 quantum is 2^16 times finer, and overflow:
         * the truncation saturates to FLT_MAX, whose rounding is Inf).
         * NaN keeps its sign and top payload bits, quietened. */
        gen_put(b, "static ushort kv_bf16_rne(double v) {\n"
                   "    if (isnan(v)) { ulong u = as_ulong(v); return (ushort)(((u >> 48) & 0x8000) | 0x7fc0 | ((u >> 45) & 0x7f)); }\n"
                   "    float f = convert_float_rtz(v);\n"
                   "    uint u = as_uint(f);\n"
                   "    if ((double)f != v) u |= 1u;\n"
                   "    u += 0x7fffu + ((u >> 16) & 1u);\n"
                   "    return (ushort)(u >> 16);\n"
                   "}\n");
        gen_put(b, "static void kv_st_bf16(__global ushort *p, long i, double v) { p[i] = kv_bf16_rne(v); }\n");
        for (int vw = 4; vw <= 8; vw += 4)
            gen_put(b, "static void kv_stv%d_bf16(__global ushort *p, long i, double%d v) {\n"
                       "    double t[%d]; vstore%d(v, 0, t);\n"
                       "    for (int l = 0; l < %d; l++) p[i + l] = kv_bf16_rne(t[l]);\n"
                       "}\n",
                    vw, vw, vw, vw, vw);
        return;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_I32:
    case KV_I64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
}

/* The operation on x (and y) of type `ty` (double or doubleN), as an
 * expression. `tail` marks the scalar tail of the contiguous class. */
static void gen_expr(gen_buf *b, const kv_ocl_spec *s, const char *ty, bool vec, bool tail) {
    const char *f = s->fn;
    if (s->kind == KV_OCL_COPY) {
        gen_put(b, "x");
        return;
    }
    if (s->kind == KV_OCL_BINARY) {
        const bool axpy = strcmp(f, "add") == 0 || strcmp(f, "sub") == 0;
        const char *sign = strcmp(f, "sub") == 0 ? "-" : "";
        if (axpy && s->version == KV_OCL_GEN_V2_TAIL8 && s->vw == 8 && tail) {
            /* The planted bug: the tail forgets alpha. */
            gen_put(b, "fma((%s)(%s1.0), y, x)", ty, sign);
        } else if (axpy && s->version == KV_OCL_GEN_V2_DRIFT) {
            /* A valid but different formulation: alpha*b rounded to f32,
             * then an f32 add; two roundings, inside the axpy bound. */
            if (vec)
                gen_put(b, "convert_double%d(convert_float%d(x) + convert_float%d((%s)(%salpha) * y))", s->vw, s->vw,
                        s->vw, ty, sign);
            else
                gen_put(b, "(double)((float)x + (float)(%salpha * y))", sign);
        } else if (axpy) {
            /* The reference's one rounding: fma in double (alpha*b exact
             * for f32 and narrower operands, and never overflowing alone). */
            gen_put(b, "fma((%s)(%salpha), y, x)", ty, sign);
        } else {
            gen_put(b, "(x %s y)", strcmp(f, "mul") == 0 ? "*" : "/");
        }
        return;
    }
    if (strcmp(f, "neg") == 0) gen_put(b, "(-x)");
    else if (strcmp(f, "abs") == 0) gen_put(b, "fabs(x)");
    /* relu's vector form clears the bits of negative lanes: a select()
     * came out +0 for -0 (PoCL's LLVM folds it into a max). */
    else if (strcmp(f, "relu") == 0 && vec)
        gen_put(b, "as_double%d(as_long%d(x) & ~(x < (%s)(0.0)))", s->vw, s->vw, ty);
    else if (strcmp(f, "relu") == 0) gen_put(b, "(x < 0.0 ? 0.0 : x)"); /* the reference's: -0 and NaN stay */
    else gen_put(b, "%s(x)", f);
}

static void gen_signature(gen_buf *b, const kv_ocl_spec *s) {
    const char *it = gen_arg_type(s, s->in), *ot = gen_arg_type(s, s->out);
    char name[KV_OCL_NAME_MAX];
    kv_ocl_gen_kernel_name(s, name, sizeof name);
    gen_put(b, "__kernel void %s(__global const %s *a, long a_off, ", name, it);
    if (s->kind == KV_OCL_BINARY) gen_put(b, "__global const %s *b, long b_off, ", it);
    gen_put(b, "__global %s *o, long o_off, long n", ot);
    if (s->kind == KV_OCL_BINARY) gen_put(b, ", double alpha");
    if (s->layout == KV_OCL_STRIDED) {
        gen_put(b, ", long nd, long8 sz, long8 sa");
        if (s->kind == KV_OCL_BINARY) gen_put(b, ", long8 sb");
        gen_put(b, ", long8 so");
    }
    gen_put(b, ") {\n");
}

/* One element at offsets ia (ib) -> io. */
static void gen_scalar_step(gen_buf *b, const kv_ocl_spec *s, const char *ia, const char *ib, const char *io,
                            bool tail) {
    if (gen_raw_copy(s)) {
        gen_put(b, "o[%s] = a[%s];", io, ia);
        return;
    }
    const char *ti = gen_tag(s->in), *to = gen_tag(s->out);
    gen_put(b, "{ double x = kv_ld_%s(a, %s); ", ti, ia);
    if (s->kind == KV_OCL_BINARY) gen_put(b, "double y = kv_ld_%s(b, %s); ", ti, ib);
    gen_put(b, "kv_st_%s(o, %s, ", to, io);
    gen_expr(b, s, "double", false, tail);
    gen_put(b, "); }");
}

static void gen_contig_body(gen_buf *b, const kv_ocl_spec *s) {
    const int vw = s->vw;
    gen_put(b, "    long i = (long)get_global_id(0) * %d;\n    if (i >= n) return;\n", vw);
    if (vw == 1) {
        gen_put(b, "    ");
        gen_scalar_step(b, s, "i", "i", "i", false);
        gen_put(b, "\n");
        return;
    }
    gen_put(b, "    if (i + %d <= n) {\n        ", vw);
    if (gen_raw_copy(s)) {
        gen_put(b, "vstore%d(vload%d(0, a + i), 0, o + i);\n", vw, vw);
    } else {
        char ty[16];
        snprintf(ty, sizeof ty, "double%d", vw);
        const char *ti = gen_tag(s->in), *to = gen_tag(s->out);
        gen_put(b, "%s x = kv_ldv%d_%s(a, i); ", ty, vw, ti);
        if (s->kind == KV_OCL_BINARY) gen_put(b, "%s y = kv_ldv%d_%s(b, i); ", ty, vw, ti);
        gen_put(b, "kv_stv%d_%s(o, i, ", vw, to);
        gen_expr(b, s, ty, true, false);
        gen_put(b, ");\n");
    }
    gen_put(b, "    } else {\n        for (long j = i; j < n; j++) ");
    gen_scalar_step(b, s, "j", "j", "j", true);
    gen_put(b, "\n    }\n");
}

static void gen_strided_body(gen_buf *b, const kv_ocl_spec *s) {
    const bool bin = s->kind == KV_OCL_BINARY;
    gen_put(b, "    long g = get_global_id(0);\n    if (g >= n) return;\n");
    gen_put(b, "    long z[8], ea[8], eo[8]; vstore8(sz, 0, z); vstore8(sa, 0, ea); vstore8(so, 0, eo);\n");
    if (bin) gen_put(b, "    long eb[8]; vstore8(sb, 0, eb);\n");
    gen_put(b, "    long ia = 0, io = 0%s, r = g;\n", bin ? ", ib = 0" : "");
    gen_put(b, "    for (int d = (int)nd - 1; d >= 0; d--) {\n"
               "        long k = r %% z[d]; r /= z[d];\n"
               "        ia += k * ea[d]; io += k * eo[d];%s\n"
               "    }\n    ",
            bin ? " ib += k * eb[d];" : "");
    gen_scalar_step(b, s, "ia", "ib", "io", false);
    gen_put(b, "\n");
}

/* ---- the tree and tile families: sum, mean, softmax, layer norm, matmul ---- */

/* The accumulator: f32 for f16, bf16 and f32 (exact for their elements
 * and products of f16/bf16, PyTorch's acc_type), f64 for f64. */
static const char *gen_acc_type(kv_dtype dt) { return dt == KV_F64 ? "double" : "float"; }

/* The work-group's tree over part[]: `v` (each work-item's value) into
 * part[l], then log2(wg) halving steps part[l] = `combine` (of part[l]
 * and part[l + h]); part[0] holds the result, read by every work-item
 * after the last barrier. */
static void gen_tree(gen_buf *b, int wg, const char *v, const char *combine) {
    gen_put(b, "    part[l] = %s;\n    barrier(CLK_LOCAL_MEM_FENCE);\n", v);
    gen_put(b, "    for (int h = %d; h > 0; h >>= 1) {\n"
               "        if (l < h) part[l] = %s;\n"
               "        barrier(CLK_LOCAL_MEM_FENCE);\n"
               "    }\n",
            wg / 2, combine);
}

/* The offset of group g's slice from the kept dims (sizes z, strides
 * `strides`: long[8] in the kernel), into `var`. */
static void gen_kept_offset(gen_buf *b, const char *var, const char *strides) {
    gen_put(b, "    long %s = 0;\n"
               "    for (long d = nk - 1, r = g; d >= 0; d--) { %s += (r %% z[d]) * %s[d]; r /= z[d]; }\n",
            var, var, strides);
}

/* sum / mean: one work-group per output element. Work-item l adds the
 * reduced elements l, l + wg, l + 2wg, ... (row-major over the reduced
 * dims, as the reference visits them), then the work-group halves its
 * partial sums pairwise in local memory. Any order of n additions is
 * within gamma_{n-1} * sum|x| (tol_bounds.c, tb_sum), so the tree needs
 * no bound of its own; the order is fixed by wg, so a run reproduces.
 * mean divides the accumulated sum by n in double and rounds once. */
static void gen_reduce_kernel(gen_buf *b, const kv_ocl_spec *s) {
    const char *st = gen_storage_type(s->in), *ot = gen_storage_type(s->out);
    const char *acc = gen_acc_type(s->out);
    char name[KV_OCL_NAME_MAX];
    kv_ocl_gen_kernel_name(s, name, sizeof name);
    gen_put(b, "__kernel __attribute__((reqd_work_group_size(%d, 1, 1)))\n", s->wg);
    gen_put(b, "void %s(__global const %s *a, long a_off, __global %s *o, long o_off, long nred,\n"
               "        long nk, long8 ksz, long8 kst, long nr, long8 rsz, long8 rst) {\n",
            name, st, ot);
    gen_put(b, "    __local %s part[%d];\n", acc, s->wg);
    gen_put(b, "    a += a_off; o += o_off;\n"
               "    const long g = get_group_id(0); const int l = (int)get_local_id(0);\n"
               "    long z[8], e[8]; vstore8(ksz, 0, z); vstore8(kst, 0, e);\n");
    gen_kept_offset(b, "base", "e");
    gen_put(b, "    vstore8(rsz, 0, z); vstore8(rst, 0, e);\n");
    gen_put(b, "    %s acc = 0;\n", acc);
    gen_put(b, "    for (long j = l; j < nred; j += %d) {\n"
               "        long off = base, q = j;\n"
               "        for (int d = (int)nr - 1; d >= 0; d--) { off += (q %% z[d]) * e[d]; q /= z[d]; }\n"
               "        acc += (%s)kv_ld_%s(a, off);\n"
               "    }\n",
            s->wg, acc, gen_tag(s->in));
    gen_tree(b, s->wg, "acc", "part[l] + part[l + h]");
    if (strcmp(s->fn, "mean") == 0)
        gen_put(b, "    if (l == 0) kv_st_%s(o, g, (double)part[0] / (double)nred);\n", gen_tag(s->out));
    else
        gen_put(b, "    if (l == 0) kv_st_%s(o, g, (double)part[0]);\n", gen_tag(s->out));
    gen_put(b, "}\n");
}

/* softmax / log_softmax along one dim, one work-group per slice, in the
 * accumulator's precision (gen_acc_type), as the reference's steps: m,
 * the slice's max (NaN wins), by a tree; s = sum of exp(x - m) by a
 * tree; then exp(x - m) / s, or (x - m) - log(s). The rounding of x - m
 * is part of the derived bound (tol_bounds.c, tb_softmax), the rest is
 * within its gamma_{n+6} (OpenCL's exp and log are within 3 ulp,
 * PoCL's within 1). A slice of all -inf gives NaN (x - m = -inf - -inf),
 * as the reference. */
static void gen_softmax_kernel(gen_buf *b, const kv_ocl_spec *s) {
    const char *st = gen_storage_type(s->in), *ot = gen_storage_type(s->out), *t = gen_tag(s->in);
    const char *acc = gen_acc_type(s->out);
    const bool logf = strcmp(s->fn, "log_softmax") == 0;
    char name[KV_OCL_NAME_MAX], ld[64];
    kv_ocl_gen_kernel_name(s, name, sizeof name);
    snprintf(ld, sizeof ld, "(%s)kv_ld_%s(a, ia + j * sa)", acc, t);
    gen_put(b, "__kernel __attribute__((reqd_work_group_size(%d, 1, 1)))\n", s->wg);
    gen_put(b, "void %s(__global const %s *a, long a_off, __global %s *o, long o_off, long len,\n"
               "        long nk, long8 ksz, long8 ksa, long8 kso, long sa, long so) {\n",
            name, st, ot);
    gen_put(b, "    __local %s part[%d];\n", acc, s->wg);
    gen_put(b, "    a += a_off; o += o_off;\n"
               "    const long g = get_group_id(0); const int l = (int)get_local_id(0);\n"
               "    long z[8], ea[8], eo[8]; vstore8(ksz, 0, z); vstore8(ksa, 0, ea); vstore8(kso, 0, eo);\n");
    gen_kept_offset(b, "ia", "ea");
    gen_kept_offset(b, "io", "eo");
    gen_put(b, "    %s m = -INFINITY;\n"
               "    for (long j = l; j < len; j += %d) { %s x = %s; if (isnan(x) || x > m) m = isnan(m) ? m : x; }\n",
            acc, s->wg, acc, ld);
    gen_tree(b, s->wg, "m",
             "isnan(part[l]) ? part[l] : isnan(part[l + h]) || part[l + h] > part[l] ? part[l + h] : part[l]");
    gen_put(b, "    m = part[0];\n    barrier(CLK_LOCAL_MEM_FENCE);\n");
    gen_put(b, "    %s acc = 0;\n    for (long j = l; j < len; j += %d) acc += exp(%s - m);\n", acc, s->wg, ld);
    gen_tree(b, s->wg, "acc", "part[l] + part[l + h]");
    gen_put(b, "    const %s sum = part[0];\n", acc);
    if (logf) gen_put(b, "    const %s ls = log(sum);\n", acc);
    gen_put(b, "    for (long j = l; j < len; j += %d) {\n        const %s d = %s - m;\n", s->wg, acc, ld);
    gen_put(b, "        kv_st_%s(o, io + j * so, (double)(%s));\n    }\n}\n", gen_tag(s->out),
            logf ? "d - ls" : "exp(d) / sum");
}

/* layer_norm, one work-group per row, the reference's two passes with
 * its scaling: a group whose largest finite |x| is past 2^40 (f32
 * accumulator; 2^500 for f64, the reference's) is normalized as x * s,
 * s = 2^-e a power of two (exact but for elements that underflow, each
 * below 2^-148 of the group's largest), so neither the sum of squares
 * nor var + eps * s^2 overflows. The two sums (x * s, then (x * s -
 * mean)^2) run in the accumulator by trees; the statistics and the
 * output ((x * s - mean) * rstd) * w + b in double, rounded once on
 * store: within tb_norm's gamma_{2n+8} (tol_bounds.c). */
static void gen_norm_kernel(gen_buf *b, const kv_ocl_spec *s) {
    const char *st = gen_storage_type(s->in), *ot = gen_storage_type(s->out), *t = gen_tag(s->in);
    const char *acc = gen_acc_type(s->out), *to = gen_tag(s->out);
    char name[KV_OCL_NAME_MAX], ld[96];
    kv_ocl_gen_kernel_name(s, name, sizeof name);
    snprintf(ld, sizeof ld, "(%s)kv_ld_%s(a, ia + kv_off(j, nn, zn, en))", acc, t);
    gen_put(b, "__kernel __attribute__((reqd_work_group_size(%d, 1, 1)))\n", s->wg);
    gen_put(b, "void %s(__global const %s *a, long a_off, __global const %s *w, long w_off, __global const %s *b, long b_off,\n"
               "        __global %s *o, long o_off, __global %s *mo, long mo_off, __global %s *ro, long ro_off,\n"
               "        long cols, long nk, long8 ksz, long8 ksa, long nn, long8 nsz, long8 nsa, long8 nsw, long8 nsb,\n"
               "        long flags, double eps) {\n",
            name, st, st, st, ot, ot, ot);
    gen_put(b, "    __local %s part[%d];\n", acc, s->wg);
    gen_put(b, "    a += a_off; w += w_off; b += b_off; o += o_off; mo += mo_off; ro += ro_off;\n"
               "    const long g = get_group_id(0); const int l = (int)get_local_id(0);\n"
               "    long z[8], ea[8], zn[8], en[8], ew[8], eb[8];\n"
               "    vstore8(ksz, 0, z); vstore8(ksa, 0, ea); vstore8(nsz, 0, zn); vstore8(nsa, 0, en);\n"
               "    vstore8(nsw, 0, ew); vstore8(nsb, 0, eb);\n");
    gen_kept_offset(b, "ia", "ea");
    /* pass 0: the largest finite |x|, for the scale */
    gen_put(b, "    %s big = 0;\n"
               "    for (long j = l; j < cols; j += %d) { %s v = fabs(%s); if (isfinite(v) && v > big) big = v; }\n",
            acc, s->wg, acc, ld);
    gen_tree(b, s->wg, "big", "part[l + h] > part[l] ? part[l + h] : part[l]");
    gen_put(b, "    const %s sc = part[0] > 0x1p%d ? ldexp((%s)1, -(ilogb(part[0]) + 1)) : (%s)1;\n"
               "    barrier(CLK_LOCAL_MEM_FENCE);\n",
            acc, s->out == KV_F64 ? 500 : 40, acc, acc);
    gen_put(b, "    %s acc = 0;\n    for (long j = l; j < cols; j += %d) acc += %s * sc;\n", acc, s->wg, ld);
    gen_tree(b, s->wg, "acc", "part[l] + part[l + h]");
    gen_put(b, "    const double mean_s = (double)part[0] / (double)cols;\n"
               "    const %s ms = (%s)mean_s;\n"
               "    barrier(CLK_LOCAL_MEM_FENCE);\n",
            acc, acc);
    gen_put(b, "    acc = 0;\n    for (long j = l; j < cols; j += %d) { const %s d = %s * sc - ms; acc += d * d; }\n",
            s->wg, acc, ld);
    gen_tree(b, s->wg, "acc", "part[l] + part[l + h]");
    gen_put(b, "    const double rstd_s = 1.0 / sqrt((double)part[0] / (double)cols + eps * (double)sc * (double)sc);\n"
               "    if (l == 0) { kv_st_%s(mo, g, mean_s / (double)sc); kv_st_%s(ro, g, rstd_s * (double)sc); }\n",
            to, to);
    gen_put(b, "    for (long j = l; j < cols; j += %d) {\n"
               "        double v = ((double)(%s * sc) - mean_s) * rstd_s;\n"
               "        if (flags & 1) v = v * kv_ld_%s(w, kv_off(j, nn, zn, ew));\n"
               "        if (flags & 2) v = v + kv_ld_%s(b, kv_off(j, nn, zn, eb));\n"
               "        kv_st_%s(o, g * cols + j, v);\n"
               "    }\n}\n",
            s->wg, ld, t, t, to);
}

/* mm / bmm / addmm: a tile x tile block of the result per work-group. Each step
 * stages a tile of a and of b in local memory (zeros past the edges:
 * both factors of a padded k are 0, so no 0 * inf enters), then every
 * work-item adds its row-by-column products in k order. The products of
 * f16/bf16 values are exact in f32; the sum's error is within
 * gamma_K * sum|a||b| in the accumulator's precision, inside the
 * matmul bound (tol_bounds.c, tb_matmul: gamma_{K+1} in the output's).
 * addmm then takes alpha * acc + beta * self in double, as the
 * reference, self unread when beta is 0 (PyTorch's rule: its NaN and Inf
 * do not leak), rounded once: within tb_matmul's gamma_{K+3}. */
static void gen_matmul_kernel(gen_buf *b, const kv_ocl_spec *s) {
    const char *st = gen_storage_type(s->in), *ot = gen_storage_type(s->out), *t = gen_tag(s->in);
    const char *acc = gen_acc_type(s->out);
    const int T = s->tile;
    const bool addmm = strcmp(s->fn, "addmm") == 0;
    char name[KV_OCL_NAME_MAX];
    kv_ocl_gen_kernel_name(s, name, sizeof name);
    gen_put(b, "__kernel __attribute__((reqd_work_group_size(%d, 1, 1)))\n", T * T);
    gen_put(b, "void %s(__global const %s *a, long a_off, __global const %s *b, long b_off, __global %s *o, long o_off,\n"
               "        long M, long N, long K, long8 sx",
            name, st, st, ot);
    if (addmm) gen_put(b, ",\n        __global const %s *c, long c_off, long cs0, long cs1, double beta, double alpha", st);
    gen_put(b, ") {\n");
    gen_put(b, "    __local %s ta[%d][%d], tb[%d][%d];\n", acc, T, T, T, T);
    gen_put(b, "    a += a_off; b += b_off; o += o_off;\n"
               "    const long g = get_group_id(0); const int l = (int)get_local_id(0);\n"
               "    const int li = l / %d, lj = l %% %d;\n"
               "    const long tm = (M + %d) / %d, tn = (N + %d) / %d;\n"
               "    const long p = g / (tm * tn), tt = g %% (tm * tn);\n"
               "    const long i = (tt / tn) * %d + li, j = (tt %% tn) * %d + lj;\n"
               "    a += p * sx.s0; b += p * sx.s3;\n",
            T, T, T - 1, T, T - 1, T, T, T);
    gen_put(b, "    %s acc = 0;\n", acc);
    gen_put(b, "    for (long k0 = 0; k0 < K; k0 += %d) {\n"
               "        const long ka = k0 + lj, kb = k0 + li;\n"
               "        ta[li][lj] = i < M && ka < K ? (%s)kv_ld_%s(a, i * sx.s1 + ka * sx.s2) : 0;\n"
               "        tb[li][lj] = kb < K && j < N ? (%s)kv_ld_%s(b, kb * sx.s4 + j * sx.s5) : 0;\n"
               "        barrier(CLK_LOCAL_MEM_FENCE);\n"
               "        for (int k = 0; k < %d; k++) acc += ta[li][k] * tb[k][lj];\n"
               "        barrier(CLK_LOCAL_MEM_FENCE);\n"
               "    }\n",
            T, acc, t, acc, t, T);
    if (!addmm) {
        gen_put(b, "    if (i < M && j < N) kv_st_%s(o, (p * M + i) * N + j, (double)acc);\n}\n", gen_tag(s->out));
        return;
    }
    gen_put(b, "    if (i >= M || j >= N) return;\n"
               "    double v = alpha * (double)acc;\n"
               "    if (beta != 0.0) v = beta * kv_ld_%s(c + c_off, i * cs0 + j * cs1) + v;\n"
               "    kv_st_%s(o, i * N + j, v);\n}\n",
            t, gen_tag(s->out));
}

void kv_ocl_gen_kernel_name(const kv_ocl_spec *spec, char *buf, size_t cap) {
    if (spec->kind == KV_OCL_REDUCE) {
        snprintf(buf, cap, "kv_r_%s_%s_%s_w%d", spec->fn, gen_tag(spec->in), gen_tag(spec->out), spec->wg);
        return;
    }
    if (spec->kind == KV_OCL_SOFTMAX) {
        snprintf(buf, cap, "kv_s_%s_%s_%s_w%d", spec->fn, gen_tag(spec->in), gen_tag(spec->out), spec->wg);
        return;
    }
    if (spec->kind == KV_OCL_NORM) {
        snprintf(buf, cap, "kv_n_%s_%s_%s_w%d", spec->fn, gen_tag(spec->in), gen_tag(spec->out), spec->wg);
        return;
    }
    if (spec->kind == KV_OCL_MATMUL) {
        snprintf(buf, cap, "kv_m_%s_%s_%s_t%d", spec->fn, gen_tag(spec->in), gen_tag(spec->out), spec->tile);
        return;
    }
    const char kind = spec->kind == KV_OCL_BINARY ? 'b' : spec->kind == KV_OCL_UNARY ? 'u' : 'c';
    const bool raw = gen_raw_copy(spec);
    const char *in = raw ? gen_raw_type(spec->in) : gen_tag(spec->in);
    const char *out = raw ? gen_raw_type(spec->out) : gen_tag(spec->out);
    if (spec->layout == KV_OCL_STRIDED) snprintf(buf, cap, "kv_%c_%s_%s_%s_s", kind, spec->fn, in, out);
    else snprintf(buf, cap, "kv_%c_%s_%s_%s_c%d", kind, spec->fn, in, out, spec->vw);
}

/* One kernel; the helpers it calls are the program's. */
static void gen_kernel(gen_buf *b, const kv_ocl_spec *spec) {
    if (spec->kind == KV_OCL_REDUCE) {
        gen_reduce_kernel(b, spec);
        return;
    }
    if (spec->kind == KV_OCL_SOFTMAX) {
        gen_softmax_kernel(b, spec);
        return;
    }
    if (spec->kind == KV_OCL_NORM) {
        gen_norm_kernel(b, spec);
        return;
    }
    if (spec->kind == KV_OCL_MATMUL) {
        gen_matmul_kernel(b, spec);
        return;
    }
    kv_ocl_spec s = *spec;
    if (s.layout == KV_OCL_STRIDED) s.vw = 1;
    gen_signature(b, &s);
    gen_put(b, "    a += a_off; o += o_off;%s\n", s.kind == KV_OCL_BINARY ? " b += b_off;" : "");
    if (s.layout == KV_OCL_CONTIG) gen_contig_body(b, &s);
    else gen_strided_body(b, &s);
    gen_put(b, "}\n");
}

static void gen_prelude(gen_buf *b, kv_ocl_gen_version v, const char *what) {
    gen_put(b, "/* kvsuite OpenCL generator %s: %s */\n", kv_ocl_gen_version_name(v), what);
    gen_put(b, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
    /* The offset of row-major index j over n dims (sizes z, strides e). */
    gen_put(b, "static long kv_off(long j, long n, const long *z, const long *e) {\n"
               "    long off = 0;\n"
               "    for (long d = n - 1; d >= 0; d--) { off += (j %% z[d]) * e[d]; j /= z[d]; }\n"
               "    return off;\n"
               "}\n");
}

int kv_ocl_gen_source(const kv_ocl_spec *spec, char *buf, size_t cap) {
    if (!kv_ocl_gen_supports(spec) || cap == 0) return -1;
    gen_buf b = { buf, cap, 0, false };
    char name[KV_OCL_NAME_MAX];
    kv_ocl_gen_kernel_name(spec, name, sizeof name);
    gen_prelude(&b, spec->version, name);
    if (!gen_raw_copy(spec)) {
        gen_load_helpers(&b, spec->in);
        gen_store_helpers(&b, spec->out, spec->version);
    }
    gen_kernel(&b, spec);
    if (b.full) return -1;
    return (int)b.len;
}

static const kv_dtype gen_floats[] = { KV_F32, KV_F64, KV_F16, KV_BF16 };
/* One dtype per raw word size: the same-dtype copies of every other
 * dtype are the same kernels (named by the word). */
static const kv_dtype gen_raws[] = { KV_U8, KV_I16, KV_I32, KV_I64 };

/* Every layout class and width of one (kind, fn, in, out). */
static void gen_all_layouts(gen_buf *b, kv_ocl_spec s, int *count) {
    static const int widths[] = { 1, 4, 8 };
    if (!kv_ocl_gen_supports(&s)) return;
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        s.vw = widths[w];
        s.layout = KV_OCL_CONTIG;
        gen_kernel(b, &s);
        (*count)++;
    }
    s.vw = 1;
    s.layout = KV_OCL_STRIDED;
    gen_kernel(b, &s);
    (*count)++;
}

/* One kernel of a family with no layout classes, when supported. */
static void gen_one(gen_buf *b, kv_ocl_spec s, int *count) {
    if (!kv_ocl_gen_supports(&s)) return;
    gen_kernel(b, &s);
    (*count)++;
}

int kv_ocl_gen_program(kv_ocl_gen_version version, char *buf, size_t cap, int *nkernels) {
    if (cap == 0) return -1;
    gen_buf b = { buf, cap, 0, false };
    int count = 0;
    gen_prelude(&b, version, "every template");
    for (size_t i = 0; i < sizeof gen_floats / sizeof gen_floats[0]; i++) {
        gen_load_helpers(&b, gen_floats[i]);
        gen_store_helpers(&b, gen_floats[i], version);
    }
    for (size_t i = 0; i < sizeof gen_floats / sizeof gen_floats[0]; i++) {
        const kv_dtype dt = gen_floats[i];
        for (size_t f = 0; f < sizeof gen_binary_fns / sizeof gen_binary_fns[0]; f++)
            gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_BINARY, gen_binary_fns[f], dt, dt, 1, KV_OCL_CONTIG, version, 0, 0 },
                            &count);
        for (size_t f = 0; f < sizeof gen_unary_exact / sizeof gen_unary_exact[0]; f++)
            gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_UNARY, gen_unary_exact[f], dt, dt, 1, KV_OCL_CONTIG, version, 0, 0 },
                            &count);
        for (size_t f = 0; f < sizeof gen_unary_libm / sizeof gen_unary_libm[0]; f++)
            gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_UNARY, gen_unary_libm[f], dt, dt, 1, KV_OCL_CONTIG, version, 0, 0 },
                            &count);
        for (size_t j = 0; j < sizeof gen_floats / sizeof gen_floats[0]; j++)
            if (gen_floats[j] != dt)
                gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_COPY, "copy", dt, gen_floats[j], 1, KV_OCL_CONTIG, version, 0, 0 },
                                &count);
    }
    /* The reduction and matmul families at every knob. */
    for (size_t i = 0; i < sizeof gen_floats / sizeof gen_floats[0]; i++) {
        const kv_dtype dt = gen_floats[i];
        for (size_t f = 0; f < sizeof gen_reduce_fns / sizeof gen_reduce_fns[0]; f++)
            for (size_t w = 0; w < sizeof gen_tree_wgs / sizeof gen_tree_wgs[0]; w++)
                gen_one(&b, (kv_ocl_spec){ .kind = KV_OCL_REDUCE, .fn = gen_reduce_fns[f], .in = dt, .out = dt,
                                           .vw = 1, .version = version, .wg = gen_tree_wgs[w] },
                        &count);
        for (size_t f = 0; f < sizeof gen_softmax_fns / sizeof gen_softmax_fns[0]; f++)
            for (size_t w = 0; w < sizeof gen_tree_wgs / sizeof gen_tree_wgs[0]; w++)
                gen_one(&b, (kv_ocl_spec){ .kind = KV_OCL_SOFTMAX, .fn = gen_softmax_fns[f], .in = dt, .out = dt,
                                           .vw = 1, .version = version, .wg = gen_tree_wgs[w] },
                        &count);
        for (size_t w = 0; w < sizeof gen_tree_wgs / sizeof gen_tree_wgs[0]; w++)
            gen_one(&b, (kv_ocl_spec){ .kind = KV_OCL_NORM, .fn = "layer_norm", .in = dt, .out = dt, .vw = 1,
                                       .version = version, .wg = gen_tree_wgs[w] },
                    &count);
        for (size_t t = 0; t < sizeof gen_matmul_tiles / sizeof gen_matmul_tiles[0]; t++)
            for (size_t f = 0; f < sizeof gen_matmul_fns / sizeof gen_matmul_fns[0]; f++)
                gen_one(&b, (kv_ocl_spec){ .kind = KV_OCL_MATMUL, .fn = gen_matmul_fns[f], .in = dt, .out = dt,
                                           .vw = 1, .version = version, .tile = gen_matmul_tiles[t] },
                        &count);
    }
    for (size_t i = 0; i < sizeof gen_raws / sizeof gen_raws[0]; i++)
        gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_COPY, "copy", gen_raws[i], gen_raws[i], 1, KV_OCL_CONTIG, version, 0, 0 },
                        &count);
    if (b.full) return -1;
    if (nkernels != NULL) *nkernels = count;
    return (int)b.len;
}
