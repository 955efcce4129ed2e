/* The OpenCL backend's boxed kernels: each checks that the call is one
 * the generator has a template for and whose result the reference's
 * semantics fix exactly (same float dtype on both sides, broadcasting,
 * alpha as the reference rounds it), builds the spec, and launches the
 * generated kernel; everything else is declined (kv_ocl_decline), which
 * gives bad input the reference's error and the rest an UNSUPPORTED row.
 *
 * Variants. Every op is a perf_dispatch variant set at this backend's key:
 * "ref" (the host reference staged through copies) and one variant per
 * value of its family's knob: the vector width of the elementwise and copy
 * families (vec1, vec4, vec8: the contiguous class's elements per
 * work-item; strided calls take one element per work-item whatever the
 * variant), the work-group size of the reductions, softmax and layer norm
 * (wg16, wg64, wg256), the tile edge of the matrix products (tile4, tile8,
 * tile16). The tuner times them per call shape,
 * KV_PERFDISPATCH_FORCE=add.Tensor:vec4 pins one, and the runner's untimed
 * rows run the last registered (vec8, wg256, tile16) wherever it accepts
 * the call. */
#include <stdio.h>
#include <string.h>

#include "opencl/opencl.h"
#include "ref/ref_shared.h"

kv_device_type kv_ocl_type = KV_DEVICE_TYPE_COUNT;

bool kv_ocl_on_device(const kv_tensor *t) {
    return t != NULL && t->device.type == kv_ocl_type && t->storage != NULL &&
           ((uintptr_t)t->storage->data & KV_OCL_ADDR_MASK) == KV_OCL_ADDR_BIAS;
}

static bool ocl_float(kv_dtype dt) { return dt == KV_F32 || dt == KV_F64 || dt == KV_F16 || dt == KV_BF16; }

static kv_tensor *ocl_empty(const int64_t *sizes, int ndim, kv_dtype dt) {
    return kv_ocl_host->tensor_empty(sizes, ndim, dt, (kv_device){ kv_ocl_type, 0 });
}

/* t's strides seen at `sizes` by numpy broadcasting (stride 0 on new and
 * expanded dims); false when t does not broadcast. */
static bool ocl_bcast_strides(const kv_tensor *t, const int64_t *sizes, int ndim, int64_t *strides) {
    if (t->ndim > ndim) return false;
    for (int d = 0; d < ndim; d++) {
        const int td = d - (ndim - t->ndim);
        strides[d] = 0;
        if (td < 0) continue;
        if (t->sizes[td] == sizes[d]) strides[d] = t->strides[td];
        else if (t->sizes[td] != 1) return false;
    }
    return true;
}

static kv_ocl_arg ocl_t(const kv_tensor *t) { return (kv_ocl_arg){ .kind = KV_OCL_ARG_TENSOR, .t = t }; }
static kv_ocl_arg ocl_l(int64_t v) { return (kv_ocl_arg){ .kind = KV_OCL_ARG_LONG, .l = v }; }
static kv_ocl_arg ocl_d(double v) { return (kv_ocl_arg){ .kind = KV_OCL_ARG_DOUBLE, .d = v }; }
static kv_ocl_arg ocl_l8(const int64_t *v, int n) {
    kv_ocl_arg a = { .kind = KV_OCL_ARG_LONG8 };
    for (int i = 0; i < 8; i++) a.l8[i] = i < n ? v[i] : 1;
    return a;
}

static int64_t ocl_numel(const int64_t *sizes, int ndim) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= sizes[d];
    return n;
}

/* Work-items for n elements at the spec's vector width. */
static int64_t ocl_items(const kv_ocl_spec *s, int64_t n) {
    const int64_t vw = s->layout == KV_OCL_CONTIG ? s->vw : 1;
    return (n + vw - 1) / vw;
}

/* What a kernel makes of a call. OCL_UNSUPPORTED (a valid call the
 * generator has no template for) is what the variants' predicates refuse,
 * so the tuner never picks a variant that cannot run and a call no
 * variant takes is KV_ERR_MISSING_KERNEL (UNSUPPORTED). OCL_INVALID (the
 * reference may reject it) is accepted by the predicates and declined by
 * the kernel, so bad input gets the reference's own error. */
typedef enum ocl_verdict { OCL_RUN, OCL_UNSUPPORTED, OCL_INVALID } ocl_verdict;

typedef struct ocl_plan {
    kv_ocl_spec spec;
    const kv_tensor *a, *b;
    int64_t sizes[KV_MAX_DIMS];
    int ndim;
    kv_dtype out_dt;
    bool preserve; /* copies: memory_format=preserve */
    bool alias;    /* contiguous of a contiguous tensor: self itself */
    double alpha, beta; /* addmm's beta; alpha is add/sub's too */
    bool reduce[KV_MAX_DIMS]; /* reductions: the dims reduced */
    bool keepdim;
    int dim; /* softmax: the dim, wrapped; layer norm: the first normalized dim */
    char why[160];
} ocl_plan;

static ocl_verdict ocl_refuse(ocl_plan *p, ocl_verdict v, const char *why) {
    snprintf(p->why, sizeof p->why, "%s", why);
    return v;
}

static ocl_verdict ocl_check_spec(ocl_plan *p) {
    if (kv_ocl_gen_supports(&p->spec)) return OCL_RUN;
    snprintf(p->why, sizeof p->why, "%s %s -> %s (generator %s has no template for it)", p->spec.fn,
             kv_ocl_host->dtype_name(p->spec.in), kv_ocl_host->dtype_name(p->spec.out),
             kv_ocl_gen_version_name(p->spec.version));
    return OCL_UNSUPPORTED;
}

/* ---- binary: add, sub, mul, div ---- */

static const struct {
    const char *op, *fn;
    bool alpha;
} ocl_binaries[] = {
    { "add.Tensor", "add", true },
    { "sub.Tensor", "sub", true },
    { "mul.Tensor", "mul", false },
    { "div.Tensor", "div", false },
};

static ocl_verdict ocl_binary_plan(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    const char *name = h->op_name(op);
    int which = -1;
    for (size_t i = 0; i < sizeof ocl_binaries / sizeof ocl_binaries[0]; i++)
        if (strcmp(ocl_binaries[i].op, name) == 0) which = (int)i;
    if (which < 0) return ocl_refuse(p, OCL_UNSUPPORTED, "this op");
    const kv_tensor *a = kv_arg_tensor(stack, 0), *b = kv_arg_tensor(stack, 1);
    if (!kv_ocl_on_device(a) || !kv_ocl_on_device(b)) return ocl_refuse(p, OCL_UNSUPPORTED, "operands outside its memory");
    if (a->dtype != b->dtype || !ocl_float(a->dtype))
        return ocl_refuse(p, OCL_UNSUPPORTED, "these dtypes (one real float dtype only)");
    const kv_dtype dt = a->dtype;
    p->alpha = 1.0;
    if (ocl_binaries[which].alpha) {
        const kv_scalar s = kv_arg_scalar(stack, 2);
        if (s.kind != KV_SCALAR_INT && s.kind != KV_SCALAR_DOUBLE)
            return ocl_refuse(p, OCL_INVALID, "a bool or complex alpha");
        if (s.kind == KV_SCALAR_INT && (s.v.i > (INT64_C(1) << 53) || s.v.i < -(INT64_C(1) << 53)))
            return ocl_refuse(p, OCL_UNSUPPORTED, "an integer alpha beyond 2^53");
        p->alpha = h->scalar_to_double(s);
        /* The reference's opmath: scalars of f32/f16/bf16 ops are f32. */
        if (dt != KV_F64) p->alpha = (double)(float)p->alpha;
    }
    if (h->broadcast_shapes(a->sizes, a->ndim, b->sizes, b->ndim, p->sizes, &p->ndim) != KV_OK)
        return ocl_refuse(p, OCL_INVALID, "shapes that do not broadcast");
    p->a = a;
    p->b = b;
    p->spec = (kv_ocl_spec){ KV_OCL_BINARY, ocl_binaries[which].fn, dt, dt, vw, KV_OCL_CONTIG, kv_ocl_version, 0, 0 };
    const size_t bytes = sizeof(int64_t) * (size_t)p->ndim;
    const bool same = a->ndim == p->ndim && b->ndim == p->ndim && memcmp(a->sizes, p->sizes, bytes) == 0 &&
                      memcmp(b->sizes, p->sizes, bytes) == 0;
    if (!same || !h->tensor_is_contiguous(a) || !h->tensor_is_contiguous(b)) p->spec.layout = KV_OCL_STRIDED;
    return ocl_check_spec(p);
}

static kv_status ocl_binary_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    kv_tensor *out = ocl_empty(p->sizes, p->ndim, p->spec.out);
    if (out == NULL) return h->last_error();
    const int64_t n = ocl_numel(p->sizes, p->ndim);
    kv_ocl_arg args[12] = { ocl_t(p->a), ocl_t(p->b), ocl_t(out), ocl_l(n), ocl_d(p->alpha) };
    int nargs = 5;
    if (p->spec.layout == KV_OCL_STRIDED) {
        int64_t sa[KV_MAX_DIMS], sb[KV_MAX_DIMS];
        ocl_bcast_strides(p->a, p->sizes, p->ndim, sa);
        ocl_bcast_strides(p->b, p->sizes, p->ndim, sb);
        args[nargs++] = ocl_l(p->ndim);
        args[nargs++] = ocl_l8(p->sizes, p->ndim);
        args[nargs++] = ocl_l8(sa, p->ndim);
        args[nargs++] = ocl_l8(sb, p->ndim);
        args[nargs++] = ocl_l8(out->strides, p->ndim);
    }
    const kv_status st = kv_ocl_launch(h->op_name(op), &p->spec, args, nargs, ocl_items(&p->spec, n));
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    h->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* ---- unary ---- */

static const struct {
    const char *op, *fn;
} ocl_unaries[] = {
    { "neg", "neg" }, { "abs", "abs" }, { "relu", "relu" }, { "sqrt", "sqrt" }, { "exp", "exp" },
    { "log", "log" }, { "sin", "sin" }, { "cos", "cos" },   { "tanh", "tanh" },
};

/* o = a converted (or transformed) into `out`'s dtype, any layouts. */
static kv_status ocl_map(const char *name, const kv_ocl_spec *spec0, const kv_tensor *a, kv_tensor *out) {
    kv_ocl_spec spec = *spec0;
    const int64_t n = kv_ocl_host->tensor_numel(out);
    const bool same = a->ndim == out->ndim && memcmp(a->sizes, out->sizes, sizeof(int64_t) * (size_t)a->ndim) == 0;
    if (!same || !kv_ocl_host->tensor_is_contiguous(a) || !kv_ocl_host->tensor_is_contiguous(out))
        spec.layout = KV_OCL_STRIDED;
    kv_ocl_arg args[8] = { ocl_t(a), ocl_t(out), ocl_l(n) };
    int nargs = 3;
    if (spec.layout == KV_OCL_STRIDED) {
        int64_t sa[KV_MAX_DIMS];
        ocl_bcast_strides(a, out->sizes, out->ndim, sa);
        args[nargs++] = ocl_l(out->ndim);
        args[nargs++] = ocl_l8(out->sizes, out->ndim);
        args[nargs++] = ocl_l8(sa, out->ndim);
        args[nargs++] = ocl_l8(out->strides, out->ndim);
    }
    return kv_ocl_launch(name, &spec, args, nargs, ocl_items(&spec, n));
}

static ocl_verdict ocl_unary_plan(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p) {
    const char *name = kv_ocl_host->op_name(op);
    const char *fn = NULL;
    for (size_t i = 0; i < sizeof ocl_unaries / sizeof ocl_unaries[0]; i++)
        if (strcmp(ocl_unaries[i].op, name) == 0) fn = ocl_unaries[i].fn;
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (fn == NULL) return ocl_refuse(p, OCL_UNSUPPORTED, "this op");
    if (!kv_ocl_on_device(a)) return ocl_refuse(p, OCL_UNSUPPORTED, "an operand outside its memory");
    if (!ocl_float(a->dtype)) return ocl_refuse(p, OCL_UNSUPPORTED, "this dtype (real float dtypes only)");
    p->a = a;
    p->spec = (kv_ocl_spec){ KV_OCL_UNARY, fn, a->dtype, a->dtype, vw, KV_OCL_CONTIG, kv_ocl_version, 0, 0 };
    return ocl_check_spec(p);
}

static kv_status ocl_unary_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    kv_tensor *out = ocl_empty(p->a->sizes, p->a->ndim, p->a->dtype);
    if (out == NULL) return h->last_error();
    const kv_status st = ocl_map(h->op_name(op), &p->spec, p->a, out);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    h->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* ---- copies and view materialisation ---- */

/* A new tensor shaped like self in dtype dt: contiguous, or in the
 * strides memory_format=preserve gives (the reference's rule, inline in
 * kv/tensor.h), over a dense storage. */
static kv_tensor *ocl_empty_like(const kv_tensor *self, kv_dtype dt, bool preserve) {
    const kv_host_api *h = kv_ocl_host;
    if (!preserve) return ocl_empty(self->sizes, self->ndim, dt);
    int64_t strides[KV_MAX_DIMS];
    kv_tensor_preserve_strides(self, strides);
    const int64_t n = ocl_numel(self->sizes, self->ndim);
    kv_tensor *flat = ocl_empty(&n, 1, dt);
    if (flat == NULL) return NULL;
    kv_tensor *v = h->tensor_view(flat, self->sizes, strides, self->ndim, 0);
    h->tensor_release(flat);
    return v;
}

/* A memory_format argument at `slot`: 0 contiguous, 1 preserve, -1 any
 * other value (the reference's error, through a decline). */
static int ocl_memory_format(const kv_stack *stack, int slot) {
    if (kv_arg_is_none(stack, slot)) return KV_MEMORY_FORMAT_PRESERVE;
    const int64_t mf = kv_arg_int(stack, slot);
    return mf == KV_MEMORY_FORMAT_CONTIGUOUS || mf == KV_MEMORY_FORMAT_PRESERVE ? (int)mf : -1;
}

static ocl_verdict ocl_copy_plan(ocl_plan *p, const kv_tensor *self, kv_dtype dt, int vw) {
    p->a = self;
    p->out_dt = dt;
    p->spec = (kv_ocl_spec){ KV_OCL_COPY, "copy", self->dtype, dt, vw, KV_OCL_CONTIG, kv_ocl_version, 0, 0 };
    return ocl_check_spec(p);
}

static kv_status ocl_copy_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    if (p->alias) {
        /* An alias of self, as the reference (and PyTorch) returns. */
        kv_tensor *self = kv_arg_tensor(stack, 0);
        h->tensor_retain(self);
        h->stack_return_tensors(stack, &self, 1);
        return KV_OK;
    }
    kv_tensor *out = ocl_empty_like(p->a, p->out_dt, p->preserve);
    if (out == NULL) return h->last_error();
    const kv_status st = ocl_map(h->op_name(op), &p->spec, p->a, out);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    h->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

static ocl_verdict ocl_clone_plan(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p) {
    (void)op;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    const int mf = ocl_memory_format(stack, 1);
    if (!kv_ocl_on_device(self)) return ocl_refuse(p, OCL_UNSUPPORTED, "an operand outside its memory");
    if (mf < 0) return ocl_refuse(p, OCL_INVALID, "this memory format");
    p->preserve = mf == KV_MEMORY_FORMAT_PRESERVE;
    return ocl_copy_plan(p, self, self->dtype, vw);
}

static ocl_verdict ocl_contiguous_plan(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p) {
    (void)op;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    if (!kv_ocl_on_device(self)) return ocl_refuse(p, OCL_UNSUPPORTED, "an operand outside its memory");
    if (!kv_arg_is_none(stack, 1) && kv_arg_int(stack, 1) != KV_MEMORY_FORMAT_CONTIGUOUS)
        return ocl_refuse(p, OCL_INVALID, "this memory format");
    p->alias = kv_ocl_host->tensor_is_contiguous(self);
    return ocl_copy_plan(p, self, self->dtype, vw);
}

/* _to_copy(self, dtype?, layout?, device?, pin_memory?, non_blocking,
 * memory_format?): this device only, strided layout, no pinning. */
static ocl_verdict ocl_to_copy_plan(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p) {
    (void)op;
    const kv_tensor *self = kv_arg_tensor(stack, 0);
    const int mf = ocl_memory_format(stack, 6);
    const bool here = kv_arg_is_none(stack, 3) ||
                      (kv_arg_device(stack, 3).type == kv_ocl_type && kv_arg_device(stack, 3).index == 0);
    const bool plain = kv_arg_is_none(stack, 2) && (kv_arg_is_none(stack, 4) || !kv_arg_bool(stack, 4));
    if (!kv_ocl_on_device(self)) return ocl_refuse(p, OCL_UNSUPPORTED, "an operand outside its memory");
    if (mf < 0 || !plain) return ocl_refuse(p, OCL_INVALID, "these options");
    if (!here) return ocl_refuse(p, OCL_UNSUPPORTED, "a copy to another device");
    p->preserve = mf == KV_MEMORY_FORMAT_PRESERVE;
    return ocl_copy_plan(p, self, kv_arg_is_none(stack, 1) ? self->dtype : kv_arg_dtype(stack, 1), vw);
}

/* copy_(self, src, non_blocking): src broadcast into self, converting. */
static ocl_verdict ocl_copy__plan(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p) {
    (void)op;
    const kv_tensor *self = kv_arg_tensor(stack, 0), *src = kv_arg_tensor(stack, 1);
    int64_t strides[KV_MAX_DIMS];
    if (!kv_ocl_on_device(self) || !kv_ocl_on_device(src))
        return ocl_refuse(p, OCL_UNSUPPORTED, "operands outside its memory");
    if (!ocl_bcast_strides(src, self->sizes, self->ndim, strides))
        return ocl_refuse(p, OCL_INVALID, "a source that does not broadcast");
    /* Overlaps need the reference's snapshot and overlap checks. */
    if (src->storage == self->storage || !kv_tensor_strides_nested(self))
        return ocl_refuse(p, OCL_INVALID, "overlapping or aliased operands");
    p->a = src;
    p->spec = (kv_ocl_spec){ KV_OCL_COPY, "copy", src->dtype, self->dtype, vw, KV_OCL_CONTIG, kv_ocl_version, 0, 0 };
    return ocl_check_spec(p);
}

static kv_status ocl_copy__run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    (void)op;
    const kv_host_api *h = kv_ocl_host;
    kv_tensor *self = kv_arg_tensor(stack, 0);
    const kv_status st = ocl_map("copy_", &p->spec, p->a, self);
    if (st != KV_OK) return st;
    h->tensor_bump_version(self);
    h->tensor_retain(self);
    h->stack_return_tensors(stack, &self, 1);
    return KV_OK;
}

/* ---- reductions: sum.dim_IntList, mean.dim ---- */

/* sum/mean(self, dim, keepdim, dtype): any dims and strides, the result's
 * dtype self's own (a dtype argument that converts is declined: the
 * reference converts each element first). The knob is the work-group
 * size, the width of the summation tree. */
static ocl_verdict ocl_reduce_plan(const kv_op *op, const kv_stack *stack, int wg, ocl_plan *p) {
    const char *name = kv_ocl_host->op_name(op);
    const bool mean = strcmp(name, "mean.dim") == 0;
    if (!mean && strcmp(name, "sum.dim_IntList") != 0) return ocl_refuse(p, OCL_UNSUPPORTED, "this op");
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a == NULL) return ocl_refuse(p, OCL_INVALID, "no input");
    if (!kv_ocl_on_device(a)) return ocl_refuse(p, OCL_UNSUPPORTED, "an operand outside its memory");
    bool given = false;
    int64_t bad = 0;
    if (kv_ref_dims_mask(&stack->slots[1], a->ndim, p->reduce, &given, &bad) != KV_REF_DIMS_OK)
        return ocl_refuse(p, OCL_INVALID, "these dims");
    if (!kv_arg_is_none(stack, 3) && kv_arg_dtype(stack, 3) != a->dtype)
        return ocl_refuse(p, OCL_UNSUPPORTED, "a dtype argument that converts (no conversion template)");
    if (!ocl_float(a->dtype)) return ocl_refuse(p, OCL_UNSUPPORTED, "this dtype (real float dtypes only)");
    p->a = a;
    p->keepdim = kv_arg_bool(stack, 2);
    p->spec = (kv_ocl_spec){ .kind = KV_OCL_REDUCE, .fn = mean ? "mean" : "sum", .in = a->dtype, .out = a->dtype,
                             .vw = 1, .layout = KV_OCL_CONTIG, .version = kv_ocl_version, .wg = wg };
    return ocl_check_spec(p);
}

static kv_status ocl_reduce_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    const kv_tensor *a = p->a;
    int64_t ksz[KV_MAX_DIMS], kst[KV_MAX_DIMS], rsz[KV_MAX_DIMS], rst[KV_MAX_DIMS], sizes[KV_MAX_DIMS];
    int nk = 0, nr = 0, nd = 0;
    int64_t nout = 1, nred = 1;
    for (int d = 0; d < a->ndim; d++) {
        if (p->reduce[d]) {
            rsz[nr] = a->sizes[d];
            rst[nr++] = a->strides[d];
            nred *= a->sizes[d];
            if (p->keepdim) sizes[nd++] = 1;
        } else {
            ksz[nk] = a->sizes[d];
            kst[nk++] = a->strides[d];
            nout *= a->sizes[d];
            sizes[nd++] = a->sizes[d];
        }
    }
    kv_tensor *out = ocl_empty(sizes, nd, p->spec.out);
    if (out == NULL) return h->last_error();
    const kv_ocl_arg args[] = { ocl_t(a),        ocl_t(out), ocl_l(nred),     ocl_l(nk),      ocl_l8(ksz, nk),
                                ocl_l8(kst, nk), ocl_l(nr),  ocl_l8(rsz, nr), ocl_l8(rst, nr) };
    const kv_status st = kv_ocl_launch(h->op_name(op), &p->spec, args, (int)(sizeof args / sizeof args[0]),
                                       nout * (int64_t)p->spec.wg);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    h->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* ---- softmax: _softmax, _log_softmax ---- */

/* _softmax(self, dim, half_to_float) of a real float dtype, any strides;
 * a dim out of range and half_to_float (which the reference refuses on
 * the host, as PyTorch's CPU kernel) go to the reference's error. The
 * knob is the work-group size. */
static ocl_verdict ocl_softmax_plan(const kv_op *op, const kv_stack *stack, int wg, ocl_plan *p) {
    const char *name = kv_ocl_host->op_name(op);
    const bool logf = strcmp(name, "_log_softmax") == 0;
    if (!logf && strcmp(name, "_softmax") != 0) return ocl_refuse(p, OCL_UNSUPPORTED, "this op");
    const kv_tensor *a = kv_arg_tensor(stack, 0);
    if (a == NULL) return ocl_refuse(p, OCL_INVALID, "no input");
    if (!kv_ocl_on_device(a)) return ocl_refuse(p, OCL_UNSUPPORTED, "an operand outside its memory");
    const int64_t lim = a->ndim > 0 ? a->ndim : 1, dim = kv_arg_int(stack, 1);
    if (dim < -lim || dim >= lim || kv_arg_bool(stack, 2)) return ocl_refuse(p, OCL_INVALID, "this dim or half_to_float");
    if (!ocl_float(a->dtype)) return ocl_refuse(p, OCL_UNSUPPORTED, "this dtype (real float dtypes only)");
    p->a = a;
    /* The dim, wrapped; a 0-dim input is one slice of one element. */
    p->dim = (int)(dim < 0 ? dim + lim : dim);
    p->spec = (kv_ocl_spec){ .kind = KV_OCL_SOFTMAX, .fn = logf ? "log_softmax" : "softmax", .in = a->dtype,
                             .out = a->dtype, .vw = 1, .layout = KV_OCL_CONTIG, .version = kv_ocl_version, .wg = wg };
    return ocl_check_spec(p);
}

static kv_status ocl_softmax_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    const kv_tensor *a = p->a;
    kv_tensor *out = ocl_empty(a->sizes, a->ndim, p->spec.out);
    if (out == NULL) return h->last_error();
    int64_t ksz[KV_MAX_DIMS], ksa[KV_MAX_DIMS], kso[KV_MAX_DIMS];
    int nk = 0;
    int64_t slices = 1;
    for (int d = 0; d < a->ndim; d++) {
        if (d == p->dim) continue;
        ksz[nk] = a->sizes[d];
        ksa[nk] = a->strides[d];
        kso[nk++] = out->strides[d];
        slices *= a->sizes[d];
    }
    const int64_t len = a->ndim ? a->sizes[p->dim] : 1;
    const int64_t sa = a->ndim ? a->strides[p->dim] : 0, so = a->ndim ? out->strides[p->dim] : 0;
    const kv_ocl_arg args[] = { ocl_t(a),         ocl_t(out),       ocl_l(len), ocl_l(nk), ocl_l8(ksz, nk),
                                ocl_l8(ksa, nk), ocl_l8(kso, nk), ocl_l(sa),  ocl_l(so) };
    const kv_status st = kv_ocl_launch(h->op_name(op), &p->spec, args, (int)(sizeof args / sizeof args[0]),
                                       len > 0 ? slices * (int64_t)p->spec.wg : 0);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    h->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* ---- native_layer_norm ---- */

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) of a
 * real float dtype with weight and bias (when given) of the same dtype,
 * any strides. Shapes the reference rejects go to its error; a mixed
 * call (f16/bf16 input, f32 parameters and statistics) is declined. The
 * knob is the work-group size. */
static ocl_verdict ocl_norm_plan(const kv_op *op, const kv_stack *stack, int wg, ocl_plan *p) {
    if (strcmp(kv_ocl_host->op_name(op), "native_layer_norm") != 0) return ocl_refuse(p, OCL_UNSUPPORTED, "this op");
    const kv_tensor *x = kv_arg_tensor(stack, 0), *w = kv_arg_tensor(stack, 2), *b = kv_arg_tensor(stack, 3);
    if (x == NULL) return ocl_refuse(p, OCL_INVALID, "no input");
    if (!kv_ocl_on_device(x) || (w != NULL && !kv_ocl_on_device(w)) || (b != NULL && !kv_ocl_on_device(b)))
        return ocl_refuse(p, OCL_UNSUPPORTED, "operands outside its memory");
    const kv_int_list ns = kv_arg_ints(stack, 1);
    if (ns.n < 1 || !kv_ref_ln_trailing_match(x, ns) || (w != NULL && !kv_ref_sizes_are(w, ns)) ||
        (b != NULL && !kv_ref_sizes_are(b, ns)))
        return ocl_refuse(p, OCL_INVALID, "these shapes");
    if (!ocl_float(x->dtype)) return ocl_refuse(p, OCL_UNSUPPORTED, "this dtype (real float dtypes only)");
    if ((w != NULL && w->dtype != x->dtype) || (b != NULL && b->dtype != x->dtype))
        return ocl_refuse(p, OCL_UNSUPPORTED, "mixed dtypes (no template for f32 statistics of f16/bf16)");
    p->a = x;
    p->dim = x->ndim - ns.n;
    p->spec = (kv_ocl_spec){ .kind = KV_OCL_NORM, .fn = "layer_norm", .in = x->dtype, .out = x->dtype, .vw = 1,
                             .layout = KV_OCL_CONTIG, .version = kv_ocl_version, .wg = wg };
    return ocl_check_spec(p);
}

static kv_status ocl_norm_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    const kv_tensor *x = p->a, *w = kv_arg_tensor(stack, 2), *b = kv_arg_tensor(stack, 3);
    const int axis = p->dim, nn = x->ndim - axis;
    int64_t stat_sizes[KV_MAX_DIMS], rows, cols;
    kv_ref_ln_split(x, axis, stat_sizes, &rows, &cols);
    kv_tensor *res[3] = { ocl_empty(x->sizes, x->ndim, x->dtype), NULL, NULL };
    if (res[0] != NULL) res[1] = ocl_empty(stat_sizes, x->ndim, x->dtype);
    if (res[1] != NULL) res[2] = ocl_empty(stat_sizes, x->ndim, x->dtype);
    kv_status st = res[2] != NULL ? KV_OK : h->last_error();
    if (st == KV_OK) {
        const int64_t *zn = x->sizes + axis;
        const kv_ocl_arg args[] = {
            ocl_t(x),
            ocl_t(w != NULL ? w : x), /* unread without its flag */
            ocl_t(b != NULL ? b : x),
            ocl_t(res[0]),
            ocl_t(res[1]),
            ocl_t(res[2]),
            ocl_l(cols),
            ocl_l(axis),
            ocl_l8(x->sizes, axis),
            ocl_l8(x->strides, axis),
            ocl_l(nn),
            ocl_l8(zn, nn),
            ocl_l8(x->strides + axis, nn),
            ocl_l8(w != NULL ? w->strides : zn, nn),
            ocl_l8(b != NULL ? b->strides : zn, nn),
            ocl_l((w != NULL ? 1 : 0) | (b != NULL ? 2 : 0)),
            ocl_d(kv_arg_double(stack, 4)),
        };
        st = kv_ocl_launch(h->op_name(op), &p->spec, args, (int)(sizeof args / sizeof args[0]),
                           rows * (int64_t)p->spec.wg);
    }
    if (st != KV_OK) {
        for (int i = 0; i < 3; i++)
            if (res[i] != NULL) h->tensor_release(res[i]);
        return st;
    }
    h->stack_return_tensors(stack, res, 3);
    return KV_OK;
}

/* ---- matrix products: mm, bmm, addmm ---- */

/* mm(self, mat2), bmm(self, mat2) and addmm(self, mat1, mat2, beta,
 * alpha) of one real float dtype, any strides, addmm's self broadcast;
 * what the reference rejects (ranks, shapes, dtypes, scalars) goes to its
 * error. The knob is the tile edge. */
static ocl_verdict ocl_matmul_plan(const kv_op *op, const kv_stack *stack, int tile, ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    const char *name = h->op_name(op);
    const bool batched = strcmp(name, "bmm") == 0, addmm = strcmp(name, "addmm") == 0;
    if (!batched && !addmm && strcmp(name, "mm") != 0) return ocl_refuse(p, OCL_UNSUPPORTED, "this op");
    const int m0 = addmm ? 1 : 0; /* the first matrix's slot */
    const kv_tensor *a = kv_arg_tensor(stack, m0), *b = kv_arg_tensor(stack, m0 + 1);
    if (a == NULL || b == NULL) return ocl_refuse(p, OCL_INVALID, "a missing operand");
    if (!kv_ocl_on_device(a) || !kv_ocl_on_device(b)) return ocl_refuse(p, OCL_UNSUPPORTED, "operands outside its memory");
    const int nd = batched ? 3 : 2;
    if (a->ndim != nd || b->ndim != nd || a->dtype != b->dtype || a->sizes[nd - 1] != b->sizes[nd - 2] ||
        (batched && a->sizes[0] != b->sizes[0]))
        return ocl_refuse(p, OCL_INVALID, "these shapes or dtypes");
    if (!ocl_float(a->dtype)) return ocl_refuse(p, OCL_UNSUPPORTED, "this dtype (real float dtypes only)");
    if (addmm) {
        const kv_tensor *c = kv_arg_tensor(stack, 0);
        int64_t cs[2];
        if (c == NULL || c->dtype != a->dtype || !kv_ref_addmm_self_strides(c, a->sizes[0], b->sizes[1], cs))
            return ocl_refuse(p, OCL_INVALID, "this self");
        if (!kv_ocl_on_device(c)) return ocl_refuse(p, OCL_UNSUPPORTED, "operands outside its memory");
        const kv_scalar beta = kv_arg_scalar(stack, 3), alpha = kv_arg_scalar(stack, 4);
        if ((beta.kind != KV_SCALAR_INT && beta.kind != KV_SCALAR_DOUBLE) ||
            (alpha.kind != KV_SCALAR_INT && alpha.kind != KV_SCALAR_DOUBLE))
            return ocl_refuse(p, OCL_UNSUPPORTED, "a bool or complex beta or alpha");
        p->alpha = h->scalar_to_double(alpha);
        p->beta = h->scalar_to_double(beta);
    }
    p->a = a;
    p->b = b;
    p->ndim = nd;
    p->spec = (kv_ocl_spec){ .kind = KV_OCL_MATMUL, .fn = addmm ? "addmm" : "mm", .in = a->dtype, .out = a->dtype, .vw = 1,
                             .layout = KV_OCL_CONTIG, .version = kv_ocl_version, .tile = tile };
    return ocl_check_spec(p);
}

static kv_status ocl_matmul_run(const kv_op *op, kv_stack *stack, const ocl_plan *p) {
    const kv_host_api *h = kv_ocl_host;
    const kv_tensor *a = p->a, *b = p->b;
    const int nd = p->ndim;
    const int64_t batch = nd == 3 ? a->sizes[0] : 1, m = a->sizes[nd - 2], k = a->sizes[nd - 1],
                  n = b->sizes[nd - 1];
    const int64_t sizes[3] = { batch, m, n };
    kv_tensor *out = ocl_empty(nd == 3 ? sizes : sizes + 1, nd, p->spec.out);
    if (out == NULL) return h->last_error();
    const int64_t sx[6] = { nd == 3 ? a->strides[0] : 0, a->strides[nd - 2], a->strides[nd - 1],
                            nd == 3 ? b->strides[0] : 0, b->strides[nd - 2], b->strides[nd - 1] };
    const int64_t t = p->spec.tile, tiles = batch * ((m + t - 1) / t) * ((n + t - 1) / t);
    kv_ocl_arg args[12] = { ocl_t(a), ocl_t(b), ocl_t(out), ocl_l(m), ocl_l(n), ocl_l(k), ocl_l8(sx, 6) };
    int nargs = 7;
    if (strcmp(p->spec.fn, "addmm") == 0) {
        const kv_tensor *c = kv_arg_tensor(stack, 0);
        int64_t cs[2];
        kv_ref_addmm_self_strides(c, m, n, cs);
        args[nargs++] = ocl_t(c);
        args[nargs++] = ocl_l(cs[0]);
        args[nargs++] = ocl_l(cs[1]);
        args[nargs++] = ocl_d(p->beta);
        args[nargs++] = ocl_d(p->alpha);
    }
    const kv_status st = kv_ocl_launch(h->op_name(op), &p->spec, args, nargs, tiles * t * t);
    if (st != KV_OK) {
        h->tensor_release(out);
        return st;
    }
    h->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

/* ---- registration ---- */

typedef ocl_verdict (*ocl_plan_fn)(const kv_op *op, const kv_stack *stack, int vw, ocl_plan *p);
typedef kv_status (*ocl_run_fn)(const kv_op *op, kv_stack *stack, const ocl_plan *p);

static kv_status ocl_kernel(const kv_op *op, kv_stack *stack, int vw, ocl_plan_fn plan, ocl_run_fn run) {
    ocl_plan p;
    memset(&p, 0, sizeof p);
    if (plan(op, stack, vw, &p) != OCL_RUN) return kv_ocl_decline(op, stack, "%s", p.why);
    return run(op, stack, &p);
}

static bool ocl_accepts(const kv_op *op, const kv_stack *stack, int vw, ocl_plan_fn plan) {
    ocl_plan p;
    memset(&p, 0, sizeof p);
    if (plan(op, stack, vw, &p) != OCL_UNSUPPORTED) return true;
    /* Bad input of a dtype it has no kernel for (relu of bool): taken, so
     * that the kernel's decline gives the reference's error. */
    return kv_ocl_reference_rejects(op, stack);
}

/* Per op family: a kernel per value of the family's knob (the vector
 * width of the elementwise families, a reduction's work-group size,
 * matmul's tile edge) and one predicate. The knob's values accept the
 * same calls (a strided call runs one element per work-item whatever the
 * width), so the tuner chooses among all three. */
#define OCL_VARIANTS(fam, planfn, runfn, k0, k1, k2)                                                        \
    static kv_status fam##_k0(const kv_op *op, kv_keyset ks, kv_stack *stack) {                            \
        (void)ks;                                                                                           \
        return ocl_kernel(op, stack, k0, planfn, runfn);                                                    \
    }                                                                                                       \
    static kv_status fam##_k1(const kv_op *op, kv_keyset ks, kv_stack *stack) {                            \
        (void)ks;                                                                                           \
        return ocl_kernel(op, stack, k1, planfn, runfn);                                                    \
    }                                                                                                       \
    static kv_status fam##_k2(const kv_op *op, kv_keyset ks, kv_stack *stack) {                            \
        (void)ks;                                                                                           \
        return ocl_kernel(op, stack, k2, planfn, runfn);                                                    \
    }                                                                                                       \
    static bool fam##_ok(const kv_op *op, const kv_stack *stack) { return ocl_accepts(op, stack, k0, planfn); }

OCL_VARIANTS(ocl_binary, ocl_binary_plan, ocl_binary_run, 1, 4, 8)
OCL_VARIANTS(ocl_unary, ocl_unary_plan, ocl_unary_run, 1, 4, 8)
OCL_VARIANTS(ocl_clone, ocl_clone_plan, ocl_copy_run, 1, 4, 8)
OCL_VARIANTS(ocl_contiguous, ocl_contiguous_plan, ocl_copy_run, 1, 4, 8)
OCL_VARIANTS(ocl_to_copy, ocl_to_copy_plan, ocl_copy_run, 1, 4, 8)
OCL_VARIANTS(ocl_copy_, ocl_copy__plan, ocl_copy__run, 1, 4, 8)
OCL_VARIANTS(ocl_reduce, ocl_reduce_plan, ocl_reduce_run, 16, 64, 256)
OCL_VARIANTS(ocl_softmax, ocl_softmax_plan, ocl_softmax_run, 16, 64, 256)
OCL_VARIANTS(ocl_norm, ocl_norm_plan, ocl_norm_run, 16, 64, 256)
OCL_VARIANTS(ocl_matmul, ocl_matmul_plan, ocl_matmul_run, 4, 8, 16)

/* The variants' names, in the order of the knobs above. */
static const char *const ocl_vec_names[3] = { "vec1", "vec4", "vec8" };
static const char *const ocl_wg_names[3] = { "wg16", "wg64", "wg256" };
static const char *const ocl_tile_names[3] = { "tile4", "tile8", "tile16" };

typedef struct ocl_reg {
    const char *op;
    const char *const *names;
    kv_kernel_fn k[3];
    bool (*ok)(const kv_op *op, const kv_stack *stack);
} ocl_reg;

#define OCL_REG(name, fam, names) { name, names, { fam##_k0, fam##_k1, fam##_k2 }, fam##_ok }
#define OCL_VEC(name, fam) OCL_REG(name, fam, ocl_vec_names)

static const ocl_reg ocl_regs[] = {
    OCL_VEC("add.Tensor", ocl_binary), OCL_VEC("sub.Tensor", ocl_binary), OCL_VEC("mul.Tensor", ocl_binary),
    OCL_VEC("div.Tensor", ocl_binary), OCL_VEC("neg", ocl_unary),         OCL_VEC("abs", ocl_unary),
    OCL_VEC("relu", ocl_unary),        OCL_VEC("sqrt", ocl_unary),        OCL_VEC("exp", ocl_unary),
    OCL_VEC("log", ocl_unary),         OCL_VEC("sin", ocl_unary),         OCL_VEC("cos", ocl_unary),
    OCL_VEC("tanh", ocl_unary),        OCL_VEC("clone", ocl_clone),       OCL_VEC("contiguous", ocl_contiguous),
    OCL_VEC("_to_copy", ocl_to_copy),  OCL_VEC("copy_", ocl_copy_),
    OCL_REG("sum.dim_IntList", ocl_reduce, ocl_wg_names),
    OCL_REG("mean.dim", ocl_reduce, ocl_wg_names),
    OCL_REG("_softmax", ocl_softmax, ocl_wg_names),
    OCL_REG("_log_softmax", ocl_softmax, ocl_wg_names),
    OCL_REG("native_layer_norm", ocl_norm, ocl_wg_names),
    OCL_REG("mm", ocl_matmul, ocl_tile_names),
    OCL_REG("bmm", ocl_matmul, ocl_tile_names),
    OCL_REG("addmm", ocl_matmul, ocl_tile_names),
};

kv_status kv_ocl_register_kernels(void *context, kv_device_type type) {
    (void)context;
    const kv_host_api *h = kv_ocl_host;
    kv_ocl_type = type;
    const kv_key key = (kv_key)type;
    for (size_t i = 0; i < sizeof ocl_regs / sizeof ocl_regs[0]; i++) {
        const ocl_reg *r = &ocl_regs[i];
        /* "ref" first: reference mode runs a set's "ref" variant on every
         * call (gradcheck's truth, copies of gradients to the host), and
         * untimed mode runs it where no width accepts the call: the host
         * reference on copies, as the backend fallback does. */
        kv_status st = h->tune_register_variant(r->op, key, "ref", h->stage_reference, NULL);
        for (int k = 0; k < 3 && st == KV_OK; k++) st = h->tune_register_variant(r->op, key, r->names[k], r->k[k], r->ok);
        if (st != KV_OK) return st;
    }
    /* Ops without a kernel here still run on this backend's tensors
     * (through the host reference on copies), so the accel device boxed
     * onto it runs every op; the runner counts those UNSUPPORTED here. */
    h->register_fallback(key, h->stage_reference);
    return KV_OK;
}
