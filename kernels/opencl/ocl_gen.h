/* The OpenCL backend's kernel generator: OpenCL C source text from
 * templates, one kernel per (op, dtype, vector width, layout class) for
 * the elementwise and copy families, per (op, dtype, work-group size or
 * tile edge) for the reduction, softmax, norm and matmul families.
 *
 * It is plain C with no OpenCL dependency, so tests/test_opencl_gen.c
 * checks the text it writes without a device. The plugin builds what it
 * writes with clBuildProgram and caches the program per process, keyed by
 * the source text (ocl_runtime.c): the same source is the same kernel, so
 * a run reproduces whatever the driver's own cache holds.
 *
 * Numerics. Every generated kernel computes the way kernels/ref does:
 * inputs widen exactly to double (f16 through vload_half, bf16 by a
 * 16-bit shift, since the device has no cl_khr_fp16), the operation runs
 * in double (add/sub with alpha as one fma, as the reference), and the
 * result rounds once into the output dtype: f32 by the default
 * round-to-nearest-even conversion, f16 by vstore_half_rte of the double
 * (OpenCL C 1.2 section 6.12.7: one rounding from double), bf16 by bit
 * operations (round to odd into f32, then to nearest even into bf16,
 * which is one correct rounding because f32 keeps 16 more bits than
 * bf16). So the kernels are bitwise the reference wherever the operation
 * is (add, sub, mul, div, sqrt, neg, abs, relu, copies) and within the
 * table's ulp rows elsewhere (exp, log, sin, cos, tanh: OpenCL's double
 * built-ins are within 3 ulp of double, which after rounding to f32 or
 * narrower is at most 1 ulp of the output).
 *
 * The reduction, softmax, norm and matmul families accumulate in f32 for
 * f16, bf16 and f32 (f64 for f64) in work-group trees or tiles, so their
 * bits are not the reference's: each is within the error bound the suite
 * derives for its op (src/runner/check/tol_bounds.c), which admits any
 * summation order (ocl_gen.c says why per family). */
#ifndef KV_OCL_GEN_H
#define KV_OCL_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include "kv/dtype.h"

/* Generator versions (KV_OPENCL_GENERATOR). v1 is the correct one; each v2
 * plants one kind of regression for the generated-kernel workflow
 * (kernels/opencl/README.md). */
typedef enum kv_ocl_gen_version {
    KV_OCL_GEN_V1,
    KV_OCL_GEN_V2_TAIL8,    /* vector width 8: the tail drops alpha */
    KV_OCL_GEN_V2_ROUNDING, /* f16 stores truncate (vstore_half_rtz) */
    KV_OCL_GEN_V2_SLOW_WG,  /* work-groups of one work-item */
    KV_OCL_GEN_V2_DROP_F16, /* declines every f16 call */
    KV_OCL_GEN_V2_DRIFT,    /* add/sub: a + alpha*b in f32 with the product rounded first (bits move, within the axpy bound) */
    KV_OCL_GEN_VERSION_COUNT
} kv_ocl_gen_version;

/* Parses a KV_OPENCL_GENERATOR value; false for an unknown one. */
bool kv_ocl_gen_version_parse(const char *s, kv_ocl_gen_version *out);
const char *kv_ocl_gen_version_name(kv_ocl_gen_version v);
/* The accepted values, for error messages: "v1, v2-tail8, ...". */
const char *kv_ocl_gen_version_list(void);

typedef enum kv_ocl_kind {
    KV_OCL_BINARY, /* o = f(a, b[, alpha]) over a common shape */
    KV_OCL_UNARY,  /* o = f(a) */
    KV_OCL_COPY,   /* o = a converted to o's dtype (bit moves within one dtype) */
    KV_OCL_REDUCE, /* o[k] = sum (mean) of the elements of a reduced into k: a work-group tree */
    KV_OCL_MATMUL, /* o[p] = a[p] @ b[p] (mm: one batch), tiled through local memory */
    KV_OCL_SOFTMAX, /* softmax / log_softmax along one dim: max, sum of exp, divide, each a work-group tree */
    KV_OCL_NORM     /* layer_norm: out, mean, rstd per row, its sums by work-group trees */
} kv_ocl_kind;

/* Layout classes: every operand contiguous (vectorised), or any strides
 * (one element per work-item, offsets from the linear index). */
typedef enum kv_ocl_layout { KV_OCL_CONTIG, KV_OCL_STRIDED } kv_ocl_layout;

typedef struct kv_ocl_spec {
    kv_ocl_kind kind;
    const char *fn;   /* binary: add sub mul div; unary: neg abs relu sqrt exp log sin cos tanh; copy: "copy" */
    kv_dtype in;      /* the operands' dtype */
    kv_dtype out;     /* the result's dtype (== in except for copies) */
    int vw;           /* vector width: 1, 4 or 8 (contiguous only; strided uses 1) */
    kv_ocl_layout layout;
    kv_ocl_gen_version version;
    /* The reduction, softmax and matmul families' knobs (0 elsewhere;
     * vw and layout unused there): wg, a reduction's or softmax's
     * work-group size, which is also its trees' width (16, 64 or 256); tile, matmul's tile edge
     * (4, 8 or 16: work-groups of tile^2 work-items). */
    int wg;
    int tile;
} kv_ocl_spec;

/* Whether the generator has a template for spec (fn known for its kind,
 * dtypes it can load and store, vw in {1, 4, 8}). */
bool kv_ocl_gen_supports(const kv_ocl_spec *spec);

/* Kernel names: kv_<b|u|c>_<fn>_<in>_<out>_<c1|c4|c8|s> (binary, unary,
 * copy; contiguous at a width, or strided), the dtypes by tag (f32 f64
 * f16 bf16) or, for same-dtype copies, by the raw word moved (uchar
 * ushort uint ulong); kv_r_<sum|mean>_<in>_<out>_w<wg>,
 * kv_s_<softmax|log_softmax>_<in>_<out>_w<wg>, kv_n_layer_norm_<in>_<out>_w<wg> and
 * kv_m_mm_<in>_<out>_t<tile> for the reduction, softmax and matmul
 * families. */
#define KV_OCL_NAME_MAX 64
void kv_ocl_gen_kernel_name(const kv_ocl_spec *spec, char *buf, size_t cap);

/* Writes a program holding spec's kernel alone (with its helpers) into
 * buf (NUL-terminated) and returns its length, or -1 when spec is
 * unsupported or buf is too small. Arguments, in order:
 *   binary:  global a, long a_off, global b, long b_off, global o, long o_off, long n, double alpha
 *   unary, copy: global a, long a_off, global o, long o_off, long n
 * then, for the strided class, long ndim, long8 sizes, and one long8 of
 * strides per operand (a[, b], o), all in elements.
 *   reduce:  global a, long a_off, global o, long o_off, long nred,
 *            long nk, long8 kept sizes, long8 kept strides,
 *            long nr, long8 reduced sizes, long8 reduced strides
 *            (one work-group per output element, o contiguous)
 *   softmax: global a, long a_off, global o, long o_off, long len,
 *            long nk, long8 kept sizes, long8 a's kept strides, long8 o's,
 *            long a's stride along dim, long o's (one work-group per slice)
 *   norm:    global a, long a_off, global w, long w_off, global b, long b_off,
 *            global o, long o_off, global mean, long mean_off, global rstd,
 *            long rstd_off, long cols, long nk, long8 row sizes, long8 a's
 *            row strides, long nn, long8 normalized sizes, long8 a's, w's
 *            and b's strides over them, long flags (1: w, 2: b), double eps
 *            (one work-group per row; o, mean, rstd contiguous)
 *   matmul:  global a, long a_off, global b, long b_off, global o, long o_off,
 *            long M, long N, long K, long8 strides (a's batch, row, column,
 *            then b's; o contiguous [batch, M, N]); one work-group per
 *            (batch, tile row, tile column), row-major. */
int kv_ocl_gen_source(const kv_ocl_spec *spec, char *buf, size_t cap);

/* The program the plugin builds: every kernel the generator has for
 * `version` (every supported spec at widths 1, 4, 8 and strided), in one
 * source. One program because PoCL's clBuildProgram costs about 0.2 s
 * even when its kernel cache has the binary (3 s when not), nearly
 * whatever the program holds, and each case worker builds it once.
 * Returns the length (-1 when buf is too small) and the kernel count. */
int kv_ocl_gen_program(kv_ocl_gen_version version, char *buf, size_t cap, int *nkernels);

/* The options the program is built with: correctly rounded f32 divide and
 * sqrt, no fast-math (so the driver keeps IEEE semantics). */
const char *kv_ocl_gen_build_options(void);

/* The work-group size a launch of spec uses: 64 for the elementwise
 * families (v2-slow-wg: 1), the spec's wg for reductions and tile^2 for
 * matmul (their kernels are written for that size, so v2-slow-wg leaves
 * them alone). */
size_t kv_ocl_gen_wg_size(const kv_ocl_spec *spec);

#endif
