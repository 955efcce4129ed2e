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

size_t kv_ocl_gen_wg_size(const kv_ocl_spec *spec) { return spec->version == KV_OCL_GEN_V2_SLOW_WG ? 1 : 64; }

/* ---- what the templates know ---- */

static const char *const gen_binary_fns[] = { "add", "sub", "mul", "div" };
/* Transcendental built-ins are within 3 ulp in double (OpenCL C spec,
 * table 7.2's double column, PoCL's SLEEF implementation is 1 ulp): one
 * more rounding into f32 or narrower keeps them within the table's ulp
 * rows (exp 2, log 1, sin/cos 2, tanh 2; 1 for f16/bf16), but not the f64
 * rows (1 ulp), so those take no f64. */
static const char *const gen_unary_exact[] = { "neg", "abs", "relu", "sqrt" };
static const char *const gen_unary_libm[] = { "exp", "log", "sin", "cos", "tanh" };

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
    if (s->fn == NULL || (s->vw != 1 && s->vw != 4 && s->vw != 8)) return false;
    if (s->version == KV_OCL_GEN_V2_DROP_F16 && (s->in == KV_F16 || s->out == KV_F16)) return false;
    switch (s->kind) {
    case KV_OCL_BINARY:
        return GEN_IN(s->fn, gen_binary_fns) && s->in == s->out && gen_float_dtype(s->in);
    case KV_OCL_UNARY:
        if (s->in != s->out || !gen_float_dtype(s->in)) return false;
        if (GEN_IN(s->fn, gen_unary_exact)) return true;
        return GEN_IN(s->fn, gen_unary_libm) && s->in != KV_F64;
    case KV_OCL_COPY:
        if (strcmp(s->fn, "copy") != 0) return false;
        if (s->in == s->out) return gen_raw_type(s->in) != NULL;
        return gen_float_dtype(s->in) && gen_float_dtype(s->out);
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

void kv_ocl_gen_kernel_name(const kv_ocl_spec *spec, char *buf, size_t cap) {
    const char kind = spec->kind == KV_OCL_BINARY ? 'b' : spec->kind == KV_OCL_UNARY ? 'u' : 'c';
    const bool raw = gen_raw_copy(spec);
    const char *in = raw ? gen_raw_type(spec->in) : gen_tag(spec->in);
    const char *out = raw ? gen_raw_type(spec->out) : gen_tag(spec->out);
    if (spec->layout == KV_OCL_STRIDED) snprintf(buf, cap, "kv_%c_%s_%s_%s_s", kind, spec->fn, in, out);
    else snprintf(buf, cap, "kv_%c_%s_%s_%s_c%d", kind, spec->fn, in, out, spec->vw);
}

/* One kernel; the helpers it calls are the program's. */
static void gen_kernel(gen_buf *b, const kv_ocl_spec *spec) {
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
            gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_BINARY, gen_binary_fns[f], dt, dt, 1, KV_OCL_CONTIG, version },
                            &count);
        for (size_t f = 0; f < sizeof gen_unary_exact / sizeof gen_unary_exact[0]; f++)
            gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_UNARY, gen_unary_exact[f], dt, dt, 1, KV_OCL_CONTIG, version },
                            &count);
        for (size_t f = 0; f < sizeof gen_unary_libm / sizeof gen_unary_libm[0]; f++)
            gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_UNARY, gen_unary_libm[f], dt, dt, 1, KV_OCL_CONTIG, version },
                            &count);
        for (size_t j = 0; j < sizeof gen_floats / sizeof gen_floats[0]; j++)
            if (gen_floats[j] != dt)
                gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_COPY, "copy", dt, gen_floats[j], 1, KV_OCL_CONTIG, version },
                                &count);
    }
    for (size_t i = 0; i < sizeof gen_raws / sizeof gen_raws[0]; i++)
        gen_all_layouts(&b, (kv_ocl_spec){ KV_OCL_COPY, "copy", gen_raws[i], gen_raws[i], 1, KV_OCL_CONTIG, version },
                        &count);
    if (b.full) return -1;
    if (nkernels != NULL) *nkernels = count;
    return (int)b.len;
}
