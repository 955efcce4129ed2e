/* The optimized elementwise variants: one argument analysis and driver
 * (cpu_ew_plan.c), inner loops per ISA level (cpu_ew_impl.h, compiled
 * three times with per-function target attributes) and a threaded driver
 * (cpu_elementwise_threads.c).
 *
 * Scope (everything else is left to the reference, by the predicate):
 * every tensor operand has the compute dtype (f32, f64, i32 or i64; the
 * condition of where is bool, eq/lt write bool), any shape that
 * broadcasts, any non-negative strides. In-place ops also need the
 * broadcast shape to be self's, no stride-0 dim of size > 1 in self, and
 * no other operand sharing self's storage with a different geometry (the
 * reference copies those first).
 *
 * Numerics against the reference (which computes in f64 and rounds once):
 *   - exact ops (add/sub/mul with alpha 1, div, neg, abs, relu, max/min,
 *     clamp, where, eq, lt, sqrt) are bitwise: one correctly rounded IEEE
 *     operation in f32 equals the f64 result rounded (innocuous double
 *     rounding), and selections move bits;
 *   - add/sub with alpha != 1, rsqrt and pow with exponent 2, 0.5, -1
 *     compute in f64 with the reference's operations: bitwise;
 *   - f32 exp, log, sin, cos, tanh, sigmoid, silu, gelu and gelu_backward
 *     compute in f64 with the polynomial kernels of cpu_vmath.h (relative
 *     error below 1e-14 except erfc, 1.2e-7 relative, which gelu's bound
 *     8u(|e| + |x|) absorbs), then round once: within 1 ulp of the
 *     reference, inside the table's 2 ulp (4 for sigmoid/silu);
 *   - f64 transcendental ops call the same libm functions as the
 *     reference in the same order: bitwise.
 * Integer arithmetic wraps in the operand width, as the reference's
 * int64 arithmetic does after it is stored. */
#ifndef KV_CPU_EW_H
#define KV_CPU_EW_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/dispatch.h"
#include "kv/tensor.h"
#include "kv/tune.h"

typedef enum cpu_ew_kind {
    CPU_EW_ADD, /* also add_ */
    CPU_EW_SUB,
    CPU_EW_MUL, /* also mul_ */
    CPU_EW_DIV,
    CPU_EW_MAX,
    CPU_EW_MIN,
    CPU_EW_POW,
    CPU_EW_NEG,
    CPU_EW_ABS,
    CPU_EW_RELU,
    CPU_EW_SQRT,
    CPU_EW_RSQRT,
    CPU_EW_EXP,
    CPU_EW_LOG,
    CPU_EW_SIN,
    CPU_EW_COS,
    CPU_EW_TANH,
    CPU_EW_SIGMOID,
    CPU_EW_SILU,
    CPU_EW_GELU,
    CPU_EW_GELU_TANH,
    CPU_EW_CLAMP,      /* Scalar bounds (clamp) or tensor bounds (clamp.Tensor, clamp_.Tensor) */
    CPU_EW_WHERE,
    CPU_EW_EQ,
    CPU_EW_LT,
    CPU_EW_GELU_BWD,
    CPU_EW_GELU_TANH_BWD,
    CPU_EW_KIND_COUNT
} cpu_ew_kind;

typedef enum cpu_ew_dt { CPU_DT_F32, CPU_DT_F64, CPU_DT_I32, CPU_DT_I64, CPU_DT_COUNT } cpu_ew_dt;

/* pow's exponent, recognized so the common cases avoid libm. */
typedef enum cpu_pow_mode { CPU_POW_LIBM, CPU_POW_ZERO, CPU_POW_ONE, CPU_POW_TWO, CPU_POW_HALF, CPU_POW_MINUS_ONE } cpu_pow_mode;

typedef struct cpu_ew_args {
    double alpha;        /* add/sub, rounded as the reference rounds it */
    bool alpha_one;
    int64_t ialpha;
    double lo, hi;       /* clamp with Scalar bounds */
    int64_t ilo, ihi;
    bool has_lo, has_hi;
    bool bounds_are_tensors; /* clamp.Tensor: operands x, lo (if has_lo), hi (if has_hi) */
    double expo;         /* pow */
    int64_t iexpo;
    cpu_pow_mode pow_mode;
} cpu_ew_args;

/* One inner loop over n elements: p[0] the output, p[1..] the inputs in
 * operand order; s[k] the stride of operand k in ELEMENTS of its dtype. */
typedef void (*cpu_ew_loop)(int64_t n, char *const *p, const int64_t *s, const cpu_ew_args *a);

typedef struct cpu_ew_table {
    const char *isa;
    cpu_ew_loop loop[CPU_EW_KIND_COUNT][CPU_DT_COUNT];
} cpu_ew_table;

extern const cpu_ew_table kv_cpu_ew_sse2;
extern const cpu_ew_table kv_cpu_ew_avx2;
extern const cpu_ew_table kv_cpu_ew_avx512;

#define CPU_EW_MAX_OPS 4

/* A call, analyzed: what to compute and on which operands. */
typedef struct cpu_ew_call {
    cpu_ew_kind kind;
    cpu_ew_dt dt;
    kv_dtype out_dtype;
    bool inplace;             /* operand 1 (self) is also the output */
    int nin;
    kv_tensor *in[CPU_EW_MAX_OPS - 1];
    int64_t sizes[KV_MAX_DIMS];
    int ndim;
    cpu_ew_args a;
} cpu_ew_call;

/* Whether the elementwise variants cover this call (no allocation, no
 * error set); fills c when they do. */
bool kv_cpu_ew_analyze(const kv_op *op, const kv_stack *stack, cpu_ew_call *c);
/* The predicate body: analyze, and the table has the loop. */
bool kv_cpu_ew_supported(const kv_op *op, const kv_stack *stack, const cpu_ew_table *t);
/* The stash kind of the elementwise analysis (kv_tune_stash_*). */
extern const char kv_cpu_ew_stash_kind;
/* analyze, or the predicate's analysis of this very call when the tuner
 * stashed it (kv_tune_stash_take). */
bool kv_cpu_ew_analyze_once(const kv_op *op, const kv_stack *stack, cpu_ew_call *c);
/* Runs the call with table t on `nthreads` threads (1: this one); `pre`
 * is the call's analysis when the caller has it (NULL: analyze once). */
kv_status kv_cpu_ew_run(const kv_op *op, kv_stack *stack, const cpu_ew_table *t, int nthreads,
                        const cpu_ew_call *pre);

/* The threaded variant's threshold and thread count (cpu_elementwise_threads.c). */
#define KV_CPU_THREAD_MIN_NUMEL ((int64_t)1 << 18)
int kv_cpu_thread_count(int64_t work, int64_t grain);
/* Runs fn(i, ctx) for i in [0, n) on n threads (this one runs i = 0);
 * threads are created per call, so nothing exists across a fork. Returns
 * false when a thread could not be created (the caller's work for that
 * index is then run on this thread, so the result is complete anyway). */
bool kv_cpu_parallel(int n, void (*fn)(int i, void *ctx), void *ctx);

#endif
