/* The line between the CUDA plugin's C shim (cuda_plugin.c, cuda_ops*.c,
 * built by gcc against kv/backend.h) and its device side (the .cu files,
 * built by nvcc). Plain C, no kvsuite headers: nvcc compiles C++, and
 * libkv's headers are C17 (stdatomic, _Atomic).
 *
 * The shim checks arguments, allocates outputs and fills these structs
 * with device addresses and element geometry; the device side launches
 * one thread per output element (cuda_elem.h holds what each thread
 * computes). A second implementation, cuda_emu.c, runs the same
 * per-element code in host loops, so the shim and the element code are
 * tested on machines without a GPU (build/tests/plugins/libkv_cuda_emu.so).
 *
 * Every function returns 0 on success, else non-zero with kvc_last_error()
 * describing the failure. */
#ifndef KV_CUDA_API_H
#define KV_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_MAX_DIMS 8

/* A strided view in elements; element i is the i-th in row-major order. */
typedef struct kvc_geom {
    int ndim;
    int64_t sizes[KVC_MAX_DIMS];
    int64_t strides[KVC_MAX_DIMS];
    int64_t offset;
} kvc_geom;

/* Compute dtypes; kvc_copy also moves raw elements of any size. */
enum { KVC_F32 = 0, KVC_F64 = 1, KVC_RAW = 2 };

/* ---- the implementation ---- */
const char *kvc_last_error(void);
const char *kvc_impl_name(void);  /* "cuda" or "cuda-emu" */
int kvc_impl_is_emulation(void);
/* 1 when a usable device exists; 0 with the reason in `reason`. */
int kvc_probe(char *reason, size_t cap);

void *kvc_alloc(size_t nbytes); /* NULL when out of memory */
void kvc_free(void *p);
int kvc_copy_h2d(void *dst, const void *src, size_t nbytes);
int kvc_copy_d2h(void *dst, const void *src, size_t nbytes);
int kvc_copy_d2d(void *dst, const void *src, size_t nbytes);
int kvc_memset(void *dst, int byte, size_t nbytes);
int kvc_synchronize(void);

/* ---- elementwise ---- */
enum {
    KVC_NEG, KVC_ABS, KVC_EXP, KVC_LOG, KVC_SQRT, KVC_RSQRT, KVC_SIN, KVC_COS, KVC_TANH, KVC_SIGMOID,
    KVC_RELU, KVC_SILU, KVC_GELU, KVC_GELU_TANH, KVC_POW, KVC_CLAMP
};
typedef struct kvc_unary_args {
    int op, dtype;
    int64_t n;
    void *out;
    kvc_geom og;
    const void *in;
    kvc_geom ig;
    double p0, p1;      /* pow: exponent; clamp: lo, hi */
    int has_lo, has_hi; /* clamp */
} kvc_unary_args;
int kvc_unary(const kvc_unary_args *a);

enum { KVC_ADD, KVC_SUB, KVC_MUL, KVC_DIV, KVC_MAXIMUM, KVC_MINIMUM };
typedef struct kvc_binary_args {
    int op, dtype;
    int64_t n;
    void *out;
    kvc_geom og;
    const void *a;
    kvc_geom ga; /* broadcast to og's sizes (stride 0 on broadcast dims) */
    const void *b;
    kvc_geom gb;
    double alpha;
} kvc_binary_args;
int kvc_binary(const kvc_binary_args *a);

/* out[og(i)] = in[ig(i)]: raw elements (both kinds KVC_RAW, esize bytes)
 * or a conversion between KVC_F32 and KVC_F64. */
typedef struct kvc_copy_args {
    int64_t n;
    int out_kind, in_kind, esize;
    void *out;
    kvc_geom og;
    const void *in;
    kvc_geom ig;
} kvc_copy_args;
int kvc_copy(const kvc_copy_args *a);

/* ---- reductions: one thread per output element ---- */
enum { KVC_SUM, KVC_MEAN, KVC_AMAX };
typedef struct kvc_reduce_args {
    int op, in_dtype, out_dtype;
    int64_t nout, nred;
    void *out; /* contiguous */
    const void *in;
    kvc_geom kept;    /* the kept dims of the input, offset = the input's */
    kvc_geom reduced; /* the reduced dims, offset 0 */
} kvc_reduce_args;
int kvc_reduce(const kvc_reduce_args *a);

/* out[b][i][j] = sum_k a[b][i][k] * b[b][k][j] (k ascending, f64);
 * addmm: scale -> alpha * acc, use_self -> beta * self + that. */
typedef struct kvc_mm_args {
    int dtype, use_self, scale;
    int64_t batch, n, k, m;
    const void *a;
    int64_t a_off, as_b, as0, as1;
    const void *b;
    int64_t b_off, bs_b, bs0, bs1;
    const void *self;
    int64_t s_off, ss0, ss1;
    double beta, alpha;
    void *out; /* contiguous [batch, n, m] */
} kvc_mm_args;
int kvc_mm(const kvc_mm_args *a);

/* ---- normalization: one thread per slice / row ---- */
typedef struct kvc_softmax_args {
    int dtype, log_form;
    int64_t nslices, len;
    const void *in;
    kvc_geom islices; /* the dims other than `dim`; offset = the input's */
    int64_t in_stride;
    void *out;
    kvc_geom oslices;
    int64_t out_stride;
} kvc_softmax_args;
int kvc_softmax(const kvc_softmax_args *a);

typedef struct kvc_layer_norm_args {
    int dtype, has_w, has_b;
    int64_t rows, cols;
    double eps;
    const void *x;
    kvc_geom xrow, xcol; /* outer dims (offset = x's), normalized dims (offset 0) */
    void *out;
    kvc_geom orow, ocol;
    const void *w;
    kvc_geom wg;
    const void *b;
    kvc_geom bg;
    void *mean, *rstd; /* contiguous, rows elements */
} kvc_layer_norm_args;
int kvc_layer_norm(const kvc_layer_norm_args *a);

/* ---- masked_fill and bernoulli (issue 15) ---- */
/* out[og(i)] = mask[gm(i)] ? value : src[gs(i)], raw elements of esize
 * bytes; in place (src NULL) only the masked elements are written. */
typedef struct kvc_masked_fill_args {
    int64_t n;
    int esize;
    void *out;
    kvc_geom og;
    const void *src;
    kvc_geom gs;
    const void *mask; /* bool, one byte per element */
    kvc_geom gm;
    uint64_t value[2]; /* the value's bytes in out's dtype */
} kvc_masked_fill_args;
int kvc_masked_fill(const kvc_masked_fill_args *a);

/* bernoulli.p on the generator stream of kv/generator.h: element i of the
 * contiguous out is `one` when the top 53 bits of value first + i of
 * stream `seed` are below limit = p * 2^53 (exact), else `zero`. */
typedef struct kvc_bernoulli_args {
    int64_t n;
    int esize;
    void *out;
    uint64_t seed, first;
    double limit;
    uint64_t one[2], zero[2]; /* the bytes of 1 and 0 in out's dtype */
} kvc_bernoulli_args;
int kvc_bernoulli(const kvc_bernoulli_args *a);

#ifdef __cplusplus
}
#endif

#endif
