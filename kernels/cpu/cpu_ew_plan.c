/* The elementwise variants' argument analysis and driver (cpu/cpu_ew.h).
 *
 * Analysis mirrors the reference's dtype rules for the calls it accepts
 * and refuses everything else, so results and errors stay the
 * reference's. The driver broadcasts, coalesces dims that are contiguous
 * with respect to each other in every operand, and hands rows of the
 * innermost dim to the ISA's loop; the threaded variant splits the
 * element range into one piece per thread. */
#include "cpu/cpu_ew.h"

#include <string.h>

#include "cpu/cpu.h"
#include "kv/op_ids.h"

static bool ew_dt_of(kv_dtype d, cpu_ew_dt *out) {
    switch (d) {
    case KV_F32: *out = CPU_DT_F32; return true;
    case KV_F64: *out = CPU_DT_F64; return true;
    case KV_I32: *out = CPU_DT_I32; return true;
    case KV_I64: *out = CPU_DT_I64; return true;
    case KV_BOOL:
    case KV_U8:
    case KV_I8:
    case KV_I16:
    case KV_F16:
    case KV_BF16:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: return false;
    }
    return false;
}

static bool ew_is_float(cpu_ew_dt dt) { return dt == CPU_DT_F32 || dt == CPU_DT_F64; }

static bool ew_tensor_slot(const kv_stack *s, int i, kv_tensor **out) {
    if (i >= s->size) return false;
    if (s->slots[i].tag == KV_IV_NONE) {
        *out = NULL;
        return true;
    }
    if (s->slots[i].tag != KV_IV_TENSOR || s->slots[i].v.tensor == NULL) return false;
    *out = s->slots[i].v.tensor;
    return kv_cpu_plain(*out);
}

/* The reference's rounding of a Scalar into the compute dtype. */
static double ew_real_scalar(kv_scalar v, cpu_ew_dt dt) {
    double d = kv_scalar_to_double(v);
    return dt == CPU_DT_F32 ? (double)(float)d : d;
}

/* add/sub's alpha, as the reference's alpha_check allows it. */
static bool ew_alpha(kv_scalar alpha, cpu_ew_dt dt, cpu_ew_args *a) {
    if (alpha.kind == KV_SCALAR_BOOL || alpha.kind == KV_SCALAR_COMPLEX) return false;
    if (!ew_is_float(dt) && alpha.kind == KV_SCALAR_DOUBLE) return false;
    a->alpha = ew_real_scalar(alpha, dt);
    a->alpha_one = a->alpha == 1.0;
    a->ialpha = kv_scalar_to_int(alpha);
    return true;
}

static bool ew_pow_args(const kv_tensor *self, kv_scalar e, cpu_ew_dt dt, cpu_ew_args *a) {
    if (e.kind == KV_SCALAR_COMPLEX) return false;
    const kv_tensor *ts[1] = { self };
    if (kv_result_type(ts, 1, &e, 1) != self->dtype) return false;
    if (!ew_is_float(dt)) {
        if (e.kind == KV_SCALAR_DOUBLE) return false;
        a->iexpo = kv_scalar_to_int(e);
        return a->iexpo >= 0;
    }
    a->expo = ew_real_scalar(e, dt);
    a->pow_mode = a->expo == 0.0    ? CPU_POW_ZERO
                  : a->expo == 1.0  ? CPU_POW_ONE
                  : a->expo == 2.0  ? CPU_POW_TWO
                  : a->expo == 0.5  ? CPU_POW_HALF
                  : a->expo == -1.0 ? CPU_POW_MINUS_ONE
                                    : CPU_POW_LIBM;
    return true;
}

static bool ew_int_bound(int64_t v, cpu_ew_dt dt) {
    return dt != CPU_DT_I32 || (v >= INT32_MIN && v <= INT32_MAX);
}

/* clamp's Scalar bounds. */
static bool ew_clamp_scalars(const kv_stack *s, const kv_tensor *self, cpu_ew_dt dt, cpu_ew_args *a) {
    if (s->size < 3) return false;
    a->has_lo = s->slots[1].tag == KV_IV_SCALAR;
    a->has_hi = s->slots[2].tag == KV_IV_SCALAR;
    if ((!a->has_lo && s->slots[1].tag != KV_IV_NONE) || (!a->has_hi && s->slots[2].tag != KV_IV_NONE)) return false;
    if (!a->has_lo && !a->has_hi) return false;
    kv_scalar b[2];
    int nb = 0;
    if (a->has_lo) b[nb++] = s->slots[1].v.scalar;
    if (a->has_hi) b[nb++] = s->slots[2].v.scalar;
    for (int i = 0; i < nb; i++)
        if (b[i].kind == KV_SCALAR_COMPLEX) return false;
    const kv_tensor *ts[1] = { self };
    if (kv_result_type(ts, 1, b, nb) != self->dtype) return false;
    if (a->has_lo) {
        a->lo = ew_real_scalar(s->slots[1].v.scalar, dt);
        a->ilo = kv_scalar_to_int(s->slots[1].v.scalar);
        if (!ew_is_float(dt) && !ew_int_bound(a->ilo, dt)) return false;
    }
    if (a->has_hi) {
        a->hi = ew_real_scalar(s->slots[2].v.scalar, dt);
        a->ihi = kv_scalar_to_int(s->slots[2].v.scalar);
        if (!ew_is_float(dt) && !ew_int_bound(a->ihi, dt)) return false;
    }
    return true;
}

/* `in` reads exactly the elements `self` writes (the reference's test
 * for reading and writing in one pass). */
static bool ew_same_elements(const kv_tensor *self, const kv_tensor *in) {
    if (in->dtype != self->dtype || in->offset != self->offset) return false;
    int64_t st[KV_MAX_DIMS];
    if (kv_broadcast_strides(in, self->sizes, self->ndim, st) != KV_OK) return false;
    for (int d = 0; d < self->ndim; d++)
        if (self->sizes[d] > 1 && st[d] != self->strides[d]) return false;
    return true;
}

static bool ew_inplace_ok(const cpu_ew_call *c) {
    const kv_tensor *self = c->in[0];
    if (self->ndim != c->ndim) return false;
    for (int d = 0; d < c->ndim; d++)
        if (self->sizes[d] != c->sizes[d]) return false;
    /* An overlapping self is the reference's to refuse. */
    if (kv_tensor_internal_overlap(self, NULL) != KV_OVERLAP_NO) return false;
    for (int k = 1; k < c->nin; k++)
        if (kv_cpu_same_storage(self, c->in[k]) && !ew_same_elements(self, c->in[k])) return false;
    return true;
}

typedef enum ew_shape { EW_UNARY_OP, EW_BINARY_OP, EW_SPECIAL } ew_shape;

static bool ew_kind_of(int id, cpu_ew_kind *kind, ew_shape *shape, bool *inplace) {
    *inplace = false;
    *shape = EW_UNARY_OP;
    switch (id) {
    case KV_OP_ADD__TENSOR: *inplace = true; /* fall through */
    case KV_OP_ADD_TENSOR: *kind = CPU_EW_ADD; *shape = EW_BINARY_OP; return true;
    case KV_OP_SUB_TENSOR: *kind = CPU_EW_SUB; *shape = EW_BINARY_OP; return true;
    case KV_OP_MUL__TENSOR: *inplace = true; /* fall through */
    case KV_OP_MUL_TENSOR: *kind = CPU_EW_MUL; *shape = EW_BINARY_OP; return true;
    case KV_OP_DIV_TENSOR: *kind = CPU_EW_DIV; *shape = EW_BINARY_OP; return true;
    case KV_OP_MAXIMUM: *kind = CPU_EW_MAX; *shape = EW_BINARY_OP; return true;
    case KV_OP_MINIMUM: *kind = CPU_EW_MIN; *shape = EW_BINARY_OP; return true;
    case KV_OP_EQ_TENSOR: *kind = CPU_EW_EQ; *shape = EW_BINARY_OP; return true;
    case KV_OP_LT_TENSOR: *kind = CPU_EW_LT; *shape = EW_BINARY_OP; return true;
    case KV_OP_GELU_BACKWARD: *kind = CPU_EW_GELU_BWD; *shape = EW_BINARY_OP; return true;
    case KV_OP_POW_TENSOR_SCALAR: *kind = CPU_EW_POW; return true;
    case KV_OP_NEG: *kind = CPU_EW_NEG; return true;
    case KV_OP_ABS: *kind = CPU_EW_ABS; return true;
    case KV_OP_RELU: *kind = CPU_EW_RELU; return true;
    case KV_OP_SQRT: *kind = CPU_EW_SQRT; return true;
    case KV_OP_RSQRT: *kind = CPU_EW_RSQRT; return true;
    case KV_OP_EXP: *kind = CPU_EW_EXP; return true;
    case KV_OP_LOG: *kind = CPU_EW_LOG; return true;
    case KV_OP_SIN: *kind = CPU_EW_SIN; return true;
    case KV_OP_COS: *kind = CPU_EW_COS; return true;
    case KV_OP_TANH: *kind = CPU_EW_TANH; return true;
    case KV_OP_SIGMOID: *kind = CPU_EW_SIGMOID; return true;
    case KV_OP_SILU: *kind = CPU_EW_SILU; return true;
    case KV_OP_GELU: *kind = CPU_EW_GELU; return true;
    case KV_OP_CLAMP: *kind = CPU_EW_CLAMP; return true;
    case KV_OP_CLAMP__TENSOR: *inplace = true; /* fall through */
    case KV_OP_CLAMP_TENSOR: *kind = CPU_EW_CLAMP; *shape = EW_SPECIAL; return true;
    case KV_OP_WHERE_SELF: *kind = CPU_EW_WHERE; *shape = EW_SPECIAL; return true;
    default: return false;
    }
}

static bool ew_float_only(cpu_ew_kind k) {
    switch (k) {
    case CPU_EW_DIV:
    case CPU_EW_SQRT:
    case CPU_EW_RSQRT:
    case CPU_EW_EXP:
    case CPU_EW_LOG:
    case CPU_EW_SIN:
    case CPU_EW_COS:
    case CPU_EW_TANH:
    case CPU_EW_SIGMOID:
    case CPU_EW_SILU:
    case CPU_EW_GELU:
    case CPU_EW_GELU_TANH:
    case CPU_EW_GELU_BWD:
    case CPU_EW_GELU_TANH_BWD: return true;
    case CPU_EW_ADD:
    case CPU_EW_SUB:
    case CPU_EW_MUL:
    case CPU_EW_MAX:
    case CPU_EW_MIN:
    case CPU_EW_POW:
    case CPU_EW_NEG:
    case CPU_EW_ABS:
    case CPU_EW_RELU:
    case CPU_EW_CLAMP:
    case CPU_EW_WHERE:
    case CPU_EW_EQ:
    case CPU_EW_LT:
    case CPU_EW_KIND_COUNT: return false;
    }
    return false;
}

/* A str argument that is "none" (or None) or "tanh"; -1 otherwise. */
static int ew_approx(const kv_stack *s, int i) {
    if (i >= s->size) return -1;
    if (s->slots[i].tag == KV_IV_NONE) return 0;
    if (s->slots[i].tag != KV_IV_STR || s->slots[i].v.str == NULL) return -1;
    if (strcmp(s->slots[i].v.str, "none") == 0) return 0;
    if (strcmp(s->slots[i].v.str, "tanh") == 0) return 1;
    return -1;
}

/* Whether a tensor of `ndim` dims has exactly these sizes. */
static bool ew_shape_is(const kv_tensor *t, const int64_t *sizes, int ndim) {
    if (t->ndim != ndim) return false;
    for (int d = 0; d < ndim; d++)
        if (t->sizes[d] != sizes[d]) return false;
    return true;
}

bool kv_cpu_ew_analyze(const kv_op *op, const kv_stack *stack, cpu_ew_call *c) {
    /* Only the arguments are zeroed (the loops read fields of other ops'
     * arguments as defaults); the rest is set below, sizes up to ndim:
     * this runs on every call, so its fixed cost is every small call's. */
    c->a = (cpu_ew_args){ 0 };
    const int id = kv_op_builtin_id(op);
    ew_shape shape;
    bool inplace;
    if (!ew_kind_of(id, &c->kind, &shape, &inplace)) return false;
    c->inplace = inplace;
    kv_tensor *t[3] = { NULL, NULL, NULL };
    int first = 0; /* slot of the first operand whose dtype is the compute dtype */
    switch (shape) {
    case EW_UNARY_OP:
        if (!ew_tensor_slot(stack, 0, &t[0]) || t[0] == NULL) return false;
        c->nin = 1;
        break;
    case EW_BINARY_OP:
        if (!ew_tensor_slot(stack, 0, &t[0]) || !ew_tensor_slot(stack, 1, &t[1]) || !t[0] || !t[1]) return false;
        c->nin = 2;
        break;
    case EW_SPECIAL:
        for (int k = 0; k < 3; k++)
            if (!ew_tensor_slot(stack, k, &t[k])) return false;
        if (c->kind == CPU_EW_WHERE) {
            if (!t[0] || !t[1] || !t[2] || t[0]->dtype != KV_BOOL) return false;
            first = 1;
            c->nin = 3;
        } else {
            if (!t[0] || (!t[1] && !t[2])) return false;
            c->a.bounds_are_tensors = true;
            c->a.has_lo = t[1] != NULL;
            c->a.has_hi = t[2] != NULL;
            if (!t[1]) {
                t[1] = t[2];
                t[2] = NULL;
            }
            c->nin = t[2] ? 3 : 2;
        }
        break;
    }
    const kv_dtype dtype = t[first]->dtype;
    if (!ew_dt_of(dtype, &c->dt)) return false;
    for (int k = first; k < c->nin; k++)
        if (t[k]->dtype != dtype) return false;
    if (ew_float_only(c->kind) && !ew_is_float(c->dt)) return false;
    c->out_dtype = (c->kind == CPU_EW_EQ || c->kind == CPU_EW_LT) ? KV_BOOL : dtype;
    c->in[0] = t[0]; /* all three: a fixed copy costs less than a loop up to nin */
    c->in[1] = t[1];
    c->in[2] = t[2];

    switch (id) {
    case KV_OP_ADD_TENSOR:
    case KV_OP_ADD__TENSOR:
    case KV_OP_SUB_TENSOR:
        if (stack->size < 3 || stack->slots[2].tag != KV_IV_SCALAR) return false;
        if (!ew_alpha(stack->slots[2].v.scalar, c->dt, &c->a)) return false;
        break;
    case KV_OP_POW_TENSOR_SCALAR:
        if (stack->size < 2 || stack->slots[1].tag != KV_IV_SCALAR) return false;
        if (!ew_pow_args(t[0], stack->slots[1].v.scalar, c->dt, &c->a)) return false;
        break;
    case KV_OP_CLAMP:
        if (!ew_clamp_scalars(stack, t[0], c->dt, &c->a)) return false;
        break;
    case KV_OP_GELU: {
        const int ap = ew_approx(stack, 1);
        if (ap < 0) return false;
        if (ap == 1) c->kind = CPU_EW_GELU_TANH;
        break;
    }
    case KV_OP_GELU_BACKWARD: {
        if (stack->size < 3 || stack->slots[2].tag != KV_IV_STR) return false;
        const int ap = ew_approx(stack, 2);
        if (ap < 0) return false;
        if (ap == 1) c->kind = CPU_EW_GELU_TANH_BWD;
        break;
    }
    default: break;
    }

    /* The broadcast shape of every operand (an operand of that very
     * shape, the common case, changes nothing). */
    c->ndim = c->in[0]->ndim;
    for (int d = 0; d < c->ndim; d++) c->sizes[d] = c->in[0]->sizes[d];
    for (int k = 1; k < c->nin; k++) {
        if (ew_shape_is(c->in[k], c->sizes, c->ndim)) continue;
        int64_t out[KV_MAX_DIMS];
        int nout = 0;
        if (kv_broadcast_shapes(c->sizes, c->ndim, c->in[k]->sizes, c->in[k]->ndim, out, &nout) != KV_OK) {
            kv_error_clear();
            return false;
        }
        memcpy(c->sizes, out, sizeof(int64_t) * (size_t)nout);
        c->ndim = nout;
    }
    if (c->inplace && !ew_inplace_ok(c)) return false;
    return true;
}

/* Names the analysis in the tuner's stash (kv_tune_stash_*): every
 * elementwise variant analyses a call the same way. */
const char kv_cpu_ew_stash_kind = 0;

bool kv_cpu_ew_supported(const kv_op *op, const kv_stack *stack, const cpu_ew_table *t) {
    cpu_ew_call local;
    cpu_ew_call *c = kv_tune_stash_buffer(op, stack, sizeof *c);
    if (c == NULL) c = &local;
    if (!kv_cpu_ew_analyze(op, stack, c) || t->loop[c->kind][c->dt] == NULL) return false;
    if (c != &local) kv_tune_stash_fill(op, stack, &kv_cpu_ew_stash_kind);
    return true;
}

bool kv_cpu_ew_analyze_once(const kv_op *op, const kv_stack *stack, cpu_ew_call *c) {
    const cpu_ew_call *pre = kv_tune_stash_take(op, stack, &kv_cpu_ew_stash_kind);
    if (pre != NULL) {
        *c = *pre;
        return true;
    }
    return kv_cpu_ew_analyze(op, stack, c);
}

/* ---- the driver ---- */

typedef struct ew_plan {
    int nops, ndim;
    int64_t sizes[KV_MAX_DIMS];
    int64_t strides[CPU_EW_MAX_OPS][KV_MAX_DIMS]; /* elements */
    char *base[CPU_EW_MAX_OPS];
    int64_t esize[CPU_EW_MAX_OPS];
    int64_t numel;
    cpu_ew_loop loop;
    const cpu_ew_args *a;
} ew_plan;

static void ew_plan_init(ew_plan *p, kv_tensor *const *ops, int nops, const int64_t *sizes, int ndim) {
    p->nops = nops;
    int64_t st[CPU_EW_MAX_OPS][KV_MAX_DIMS];
    for (int k = 0; k < nops; k++) {
        kv_broadcast_strides(ops[k], sizes, ndim, st[k]);
        p->base[k] = kv_tensor_data(ops[k]);
        p->esize[k] = (int64_t)kv_dtype_size(ops[k]->dtype);
    }
    /* Drop size-1 dims, then merge a dim into the next inner one when
     * every operand steps over it as one run. */
    int nd = 0;
    p->numel = 1;
    for (int d = 0; d < ndim; d++) {
        p->numel *= sizes[d];
        if (sizes[d] == 1) continue;
        if (nd > 0) {
            bool merge = true;
            for (int k = 0; k < nops && merge; k++) merge = p->strides[k][nd - 1] == st[k][d] * sizes[d];
            if (merge) {
                p->sizes[nd - 1] *= sizes[d];
                for (int k = 0; k < nops; k++) p->strides[k][nd - 1] = st[k][d];
                continue;
            }
        }
        p->sizes[nd] = sizes[d];
        for (int k = 0; k < nops; k++) p->strides[k][nd] = st[k][d];
        nd++;
    }
    if (nd == 0) {
        p->sizes[0] = 1;
        for (int k = 0; k < nops; k++) p->strides[k][0] = 0;
        nd = 1;
    }
    p->ndim = nd;
}

/* Elements [start, end) in row-major order. */
static void ew_plan_range(const ew_plan *p, int64_t start, int64_t end) {
    const int in = p->ndim - 1;
    const int64_t inner = p->sizes[in];
    int64_t idx[KV_MAX_DIMS];
    int64_t rest = start / inner, col = start % inner;
    for (int d = in - 1; d >= 0; d--) {
        idx[d] = rest % p->sizes[d];
        rest /= p->sizes[d];
    }
    int64_t s[CPU_EW_MAX_OPS];
    for (int k = 0; k < p->nops; k++) s[k] = p->strides[k][in];
    int64_t pos = start;
    while (pos < end) {
        const int64_t n = inner - col < end - pos ? inner - col : end - pos;
        char *ptr[CPU_EW_MAX_OPS];
        for (int k = 0; k < p->nops; k++) {
            int64_t off = col * p->strides[k][in];
            for (int d = 0; d < in; d++) off += idx[d] * p->strides[k][d];
            ptr[k] = p->base[k] + off * p->esize[k];
        }
        p->loop(n, ptr, s, p->a);
        pos += n;
        col = 0;
        for (int d = in - 1; d >= 0; d--) {
            if (++idx[d] < p->sizes[d]) break;
            idx[d] = 0;
        }
    }
}

typedef struct ew_job {
    const ew_plan *p;
    int n;
} ew_job;

static void ew_piece(int i, void *ctx) {
    const ew_job *j = ctx;
    const int64_t total = j->p->numel;
    ew_plan_range(j->p, total * i / j->n, total * (i + 1) / j->n);
}

/* Whether operands ops[first..nops) are row-major contiguous over the
 * call's own shape (no broadcast): the loop then runs once over every
 * element with unit strides, which is what ew_plan_init's merging
 * arrives at for them, without its per-dim work. Small calls are mostly
 * this, and for them that work is most of the call. */
static bool ew_dense(kv_tensor *const *ops, int first, int nops, const int64_t *sizes, int ndim) {
    for (int k = first; k < nops; k++)
        if (!ew_shape_is(ops[k], sizes, ndim) || !kv_cpu_contig(ops[k])) return false;
    return true;
}

/* Bytes per element of a compute dtype. */
static int64_t ew_dt_size(cpu_ew_dt dt) {
    switch (dt) {
    case CPU_DT_F32:
    case CPU_DT_I32: return 4;
    case CPU_DT_F64:
    case CPU_DT_I64: return 8;
    case CPU_DT_COUNT: break;
    }
    return 0;
}

/* An operand's first element. The analysis checked it is a plain CPU
 * tensor (host memory) of the compute dtype or bool (eq/lt's output,
 * where's condition), the only dtypes an operand can have. */
static char *ew_data(const kv_tensor *t, cpu_ew_dt dt) {
    return (char *)t->storage->data + t->offset * (t->dtype == KV_BOOL ? 1 : ew_dt_size(dt));
}

/* Runs the loop over every element of the call's operands. */
static void ew_compute(kv_tensor *const *ops, const cpu_ew_call *c, cpu_ew_loop loop, int nthreads) {
    /* A new output is contiguous over the call's shape by construction. */
    if (nthreads <= 1 && ew_dense(ops, c->inplace ? 0 : 1, c->nin + 1, c->sizes, c->ndim)) {
        int64_t numel = 1;
        for (int d = 0; d < c->ndim; d++) numel *= c->sizes[d];
        char *ptr[CPU_EW_MAX_OPS];
        const int64_t unit[CPU_EW_MAX_OPS] = { 1, 1, 1, 1 };
        for (int k = 0; k <= c->nin; k++) ptr[k] = ew_data(ops[k], c->dt);
        if (numel > 0) loop(numel, ptr, unit, &c->a);
        return;
    }
    ew_plan p;
    ew_plan_init(&p, ops, c->nin + 1, c->sizes, c->ndim);
    p.loop = loop;
    p.a = &c->a;
    if (p.numel == 0) return;
    if (nthreads > 1) {
        ew_job job = { &p, nthreads };
        kv_cpu_parallel(nthreads, ew_piece, &job);
    } else {
        ew_plan_range(&p, 0, p.numel);
    }
}

kv_status kv_cpu_ew_run(const kv_op *op, kv_stack *stack, const cpu_ew_table *t, int nthreads,
                        const cpu_ew_call *pre) {
    cpu_ew_call c;
    if (pre != NULL) c = *pre;
    if ((pre == NULL && !kv_cpu_ew_analyze_once(op, stack, &c)) || t->loop[c.kind][c.dt] == NULL)
        return kv_error(KV_ERR_INVALID_ARG, "%s: the %s elementwise variant does not cover this call", kv_op_name(op),
                        t->isa);
    kv_tensor *out = c.inplace ? c.in[0] : kv_cpu_new(c.sizes, c.ndim, c.out_dtype);
    if (out == NULL) return kv_last_error();
    kv_tensor *const ops[CPU_EW_MAX_OPS] = { out, c.in[0], c.in[1], c.in[2] }; /* those past nin unused */
    ew_compute(ops, &c, t->loop[c.kind][c.dt], nthreads);
    if (c.inplace) {
        kv_tensor_bump_version(out);
        kv_tensor_retain(out);
    }
    kv_stack_return_tensor(stack, out);
    return KV_OK;
}
