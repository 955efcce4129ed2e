/* gradcheck: the analytical gradient (kv_backward) against central finite
 * differences in f64, as a vector-Jacobian product with fixed
 * pseudo-random weights (kv/autograd.h states the check and PyTorch's
 * default tolerances).
 *
 * Inputs. Each differentiable input is kept as a CPU f64 (c128 for
 * complex) "master" copy, which the numerical pass perturbs one element
 * at a time; every evaluation works on fresh copies of the masters on the
 * input's own device, so the op sees what it would see there and the
 * caller's tensors are never touched. L is evaluated on the host from the
 * outputs in the numerical pass and through dispatched ops (mul, sum,
 * add) in the analytical one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/accel.h"
#include "kv/gradcheck.h"
#include "kv/backend.h"
#include "kv/ops.h"
#include "modes/autograd_internal.h"

typedef struct gc_input {
    kv_tensor *master;  /* CPU, contiguous, f64 or c128 */
    kv_device device;
    char name[80];
} gc_input;

typedef struct gc_output {
    bool diff;
    bool complex;
    int64_t numel;
    double *w;          /* numel weights, pairs for complex outputs */
} gc_output;

typedef struct gc_state {
    const char *op;
    kv_gradcheck_fn fn;
    void *ctx;
    gc_input *in;
    int nin;
    kv_gradcheck_options o;
    int nout;
    gc_output out[KV_GRADCHECK_MAX_OUTPUTS];
    int failed; /* the input of the first mismatch, -1 */
} gc_state;

static kv_dtype wide_of(kv_dtype dt) { return kv_dtype_is_complex(dt) ? KV_C128 : KV_F64; }

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1), never exactly 0. */
static double weight(uint64_t *s) {
    double u = (double)(splitmix(s) >> 11) * 0x1.0p-53;
    double w = 2.0 * u - 1.0;
    return w == 0.0 ? 0.5 : w;
}

/* A copy of the CPU tensor h on `device`. The reference _to_copy makes
 * cpu tensors only, so other devices get it through the backend copies;
 * accel through its target, then re-tagged so it carries AccelBoxing. */
static kv_tensor *copy_to(const kv_tensor *h, kv_device device) {
    if (device.type == KV_DEVICE_CPU) return kv_clone((kv_tensor *)h, NULL);
    if (device.type != KV_DEVICE_ACCEL) return kv_backend_copy_to_device(h, device);
    kv_tensor *t = kv_backend_copy_to_device(h, (kv_device){ (kv_device_type)kv_accel_target(), 0 });
    kv_tensor *a = t ? kv_accel_to(t) : NULL;
    kv_tensor_release(t);
    return a;
}

/* A copy of master on `device` (a fresh leaf). */
static kv_tensor *materialize(const gc_input *in) {
    kv_tls_keys g = kv_no_grad_push();
    kv_tensor *t = copy_to(in->master, in->device);
    kv_grad_mode_pop(g);
    return t;
}

/* t as a CPU tensor of its wide dtype (new reference). */
static kv_tensor *to_host_wide(kv_tensor *t) {
    kv_tls_keys g = kv_no_grad_push();
    const kv_dtype dt = wide_of(t->dtype);
    const kv_device cpu = KV_DEVICE_CPU0;
    /* contiguous_format: the caller reads the elements in row-major order
     * (preserve, the default, keeps a transposed t transposed). */
    const int64_t rowmajor = KV_MEMORY_FORMAT_CONTIGUOUS;
    kv_tensor *h = kv__to_copy(t, &dt, NULL, &cpu, NULL, false, &rowmajor);
    kv_grad_mode_pop(g);
    return h;
}

static void release_all(kv_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        kv_tensor_release(t[i]);
        t[i] = NULL;
    }
}

/* Runs fn on fresh copies of the inputs; *outs gets its results. */
static kv_status evaluate(gc_state *s, bool requires_grad, kv_tensor **xs, kv_tensor **outs, int *nout) {
    for (int i = 0; i < s->nin; i++) xs[i] = NULL;
    kv_status st = KV_OK;
    for (int i = 0; i < s->nin && st == KV_OK; i++) {
        xs[i] = materialize(&s->in[i]);
        if (xs[i] == NULL) st = kv_last_error();
        else if (requires_grad) st = kv_tensor_set_requires_grad(xs[i], true);
    }
    *nout = 0;
    if (st == KV_OK) {
        kv_tls_keys g = requires_grad ? kv_enable_grad_push() : kv_no_grad_push();
        st = s->fn(s->ctx, xs, s->nin, outs, nout);
        kv_grad_mode_pop(g);
        if (st == KV_OK && (*nout < 0 || *nout > KV_GRADCHECK_MAX_OUTPUTS))
            st = kv_error(KV_ERR_INTERNAL, "gradcheck: %s: the function returned %d outputs", s->op, *nout);
    }
    if (st != KV_OK) {
        release_all(xs, s->nin);
        if (*nout > 0 && *nout <= KV_GRADCHECK_MAX_OUTPUTS) release_all(outs, *nout);
        *nout = 0;
    }
    return st;
}

/* sum_j Re(conj(w_j) * y_j) on the host. */
static kv_status host_loss(gc_state *s, kv_tensor **outs, int nout, double *loss) {
    if (nout != s->nout)
        return kv_error(KV_ERR_INTERNAL, "gradcheck: %s: %d outputs, the analytical pass had %d", s->op, nout, s->nout);
    double acc = 0.0;
    for (int k = 0; k < nout; k++) {
        if (!s->out[k].diff) continue;
        if (outs[k] == NULL || kv_tensor_numel(outs[k]) != s->out[k].numel)
            return kv_error(KV_ERR_INTERNAL, "gradcheck: %s: output %d changed shape between evaluations", s->op, k);
        kv_tensor *h = to_host_wide(outs[k]);
        if (h == NULL) return kv_last_error();
        const double *p = kv_tensor_data(h);
        const int64_t n = s->out[k].numel;
        if (s->out[k].complex)
            for (int64_t j = 0; j < n; j++) acc += s->out[k].w[2 * j] * p[2 * j] + s->out[k].w[2 * j + 1] * p[2 * j + 1];
        else
            for (int64_t j = 0; j < n; j++) acc += s->out[k].w[j] * p[j];
        kv_tensor_release(h);
    }
    *loss = acc;
    return KV_OK;
}

/* The same L through dispatched ops, so kv_backward can differentiate it. */
static kv_tensor *graph_loss(gc_state *s, kv_tensor **outs) {
    kv_tensor *loss = NULL;
    for (int k = 0; k < s->nout; k++) {
        const gc_output *o = &s->out[k];
        if (!o->diff) continue;
        const int64_t n = o->numel;
        double *wc = malloc((size_t)(n > 0 ? n : 1) * (o->complex ? 2 : 1) * sizeof *wc);
        if (wc == NULL) {
            kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
            goto fail;
        }
        for (int64_t j = 0; j < n; j++) {
            if (o->complex) {
                wc[2 * j] = o->w[2 * j];
                wc[2 * j + 1] = -o->w[2 * j + 1]; /* conj(w) */
            } else {
                wc[j] = o->w[j];
            }
        }
        kv_tensor *y = outs[k];
        kv_tensor *wt = kv_tensor_from_data(wc, y->sizes, y->ndim, o->complex ? KV_C128 : KV_F64);
        free(wc);
        if (wt && y->device.type != KV_DEVICE_CPU) {
            kv_tensor *moved = copy_to(wt, y->device);
            kv_tensor_release(wt);
            wt = moved;
        }
        if (wt == NULL) goto fail;
        kv_tensor *prod = kv_mul(y, wt);
        kv_tensor_release(wt);
        if (prod && o->complex) {
            const kv_dtype real = KV_F64;
            kv_tensor *re = kv__to_copy(prod, &real, NULL, NULL, NULL, false, NULL);
            kv_tensor_release(prod);
            prod = re;
        }
        kv_tensor *part = prod ? kv_sum(prod, NULL, false, NULL) : NULL;
        kv_tensor_release(prod);
        if (part == NULL) goto fail;
        if (loss) {
            kv_tensor *sum = kv_add(loss, part, kv_scalar_int(1));
            kv_tensor_release(part);
            kv_tensor_release(loss);
            loss = sum;
            if (loss == NULL) return NULL;
        } else {
            loss = part;
        }
    }
    return loss;
fail:
    kv_tensor_release(loss);
    return NULL;
}

/* The analytical pass: decides which outputs are differentiable, draws
 * their weights, and leaves dL/dx of every input in grads[] (host, wide
 * dtype; zeros when no gradient reached the input). */
static kv_status analytical(gc_state *s, kv_tensor **grads) {
    kv_tensor **xs = calloc((size_t)(s->nin > 0 ? s->nin : 1), sizeof *xs);
    if (xs == NULL) return kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
    kv_tensor *outs[KV_GRADCHECK_MAX_OUTPUTS] = { 0 };
    int nout = 0;
    kv_status st = evaluate(s, true, xs, outs, &nout);
    if (st != KV_OK) {
        free(xs);
        return st;
    }
    s->nout = nout;
    uint64_t seed = s->o.seed;
    bool any = false;
    for (int k = 0; k < nout && st == KV_OK; k++) {
        gc_output *o = &s->out[k];
        kv_tensor *y = outs[k];
        o->diff = y && kv_tensor_requires_grad(y);
        o->complex = y && kv_dtype_is_complex(y->dtype);
        o->numel = y ? kv_tensor_numel(y) : 0;
        if (!o->diff) continue;
        any = true;
        const int64_t nw = o->numel * (o->complex ? 2 : 1);
        o->w = malloc((size_t)(nw > 0 ? nw : 1) * sizeof *o->w);
        if (o->w == NULL) st = kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
        for (int64_t j = 0; st == KV_OK && j < nw; j++) o->w[j] = weight(&seed);
    }
    if (st == KV_OK && any) {
        kv_tls_keys g = kv_enable_grad_push();
        kv_tensor *loss = graph_loss(s, outs);
        kv_grad_mode_pop(g);
        if (loss == NULL) st = kv_last_error();
        else st = kv_backward(loss, NULL);
        kv_tensor_release(loss);
    }
    for (int i = 0; i < s->nin && st == KV_OK; i++) {
        kv_tensor *gi = kv_tensor_grad(xs[i]);
        if (gi) {
            grads[i] = to_host_wide(gi);
        } else {
            const kv_dtype dt = s->in[i].master->dtype;
            grads[i] = kv_zeros((kv_int_list){ s->in[i].master->sizes, s->in[i].master->ndim }, &dt, NULL, NULL,
                                NULL);
        }
        if (grads[i] == NULL) st = kv_last_error();
        else if (grads[i]->dtype != s->in[i].master->dtype || kv_tensor_numel(grads[i]) != kv_tensor_numel(s->in[i].master))
            st = kv_error(KV_ERR_INTERNAL, "gradcheck: %s: the gradient of %s has the wrong dtype or size", s->op,
                          s->in[i].name);
    }
    release_all(outs, nout);
    release_all(xs, s->nin);
    free(xs);
    return st;
}

static kv_status numerical_loss(gc_state *s, kv_tensor **xs, double *loss) {
    kv_tensor *outs[KV_GRADCHECK_MAX_OUTPUTS] = { 0 };
    int nout = 0;
    kv_status st = evaluate(s, false, xs, outs, &nout);
    if (st != KV_OK) return st;
    st = host_loss(s, outs, nout, loss);
    release_all(outs, nout);
    release_all(xs, s->nin);
    return st;
}

static void fill_failure(gc_state *s, kv_gradcheck_result *r, int i, int64_t e, bool imag, double a, double n) {
    r->passed = false;
    s->failed = i;
    r->element = e;
    r->imag = imag;
    r->analytical = a;
    r->numerical = n;
    snprintf(r->message, sizeof r->message,
             "gradcheck: %s: Jacobian mismatch for input %d (%s), element %lld%s: analytical %.10g, numerical %.10g "
             "(|a - n| = %.3g > atol %g + rtol %g * |n|)",
             s->op, i, s->in[i].name, (long long)e, imag ? " (imaginary part)" : "", a, n, fabs(a - n), s->o.atol,
             s->o.rtol);
}

/* Perturbs every element of every master and compares. Returns KV_OK
 * with r->passed false at the first mismatch. */
static kv_status compare(gc_state *s, kv_tensor **grads, kv_gradcheck_result *r) {
    kv_tensor **xs = calloc((size_t)(s->nin > 0 ? s->nin : 1), sizeof *xs);
    if (xs == NULL) return kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
    kv_status st = KV_OK;
    const double eps = s->o.eps;
    for (int i = 0; i < s->nin && st == KV_OK && r->passed; i++) {
        kv_tensor *m = s->in[i].master;
        const bool cplx = kv_dtype_is_complex(m->dtype);
        double *p = kv_tensor_data(m);
        const double *ga = kv_tensor_data(grads[i]);
        const int64_t n = kv_tensor_numel(m);
        for (int64_t e = 0; e < n && st == KV_OK && r->passed; e++) {
            for (int part = 0; part < (cplx ? 2 : 1) && st == KV_OK; part++) {
                double *v = &p[cplx ? 2 * e + part : e];
                const double orig = *v;
                double lp = 0.0, lm = 0.0;
                *v = orig + eps;
                st = numerical_loss(s, xs, &lp);
                *v = orig - eps;
                if (st == KV_OK) st = numerical_loss(s, xs, &lm);
                *v = orig;
                if (st != KV_OK) break;
                const double num = (lp - lm) / (2.0 * eps);
                const double ana = ga[cplx ? 2 * e + part : e];
                r->elements_checked++;
                if (!(fabs(ana - num) <= s->o.atol + s->o.rtol * fabs(num))) {
                    fill_failure(s, r, i, e, part == 1, ana, num);
                    break;
                }
            }
        }
    }
    free(xs);
    return st;
}

static kv_status gc_run(gc_state *s, kv_gradcheck_result *r) {
    kv_tensor **grads = calloc((size_t)(s->nin > 0 ? s->nin : 1), sizeof *grads);
    if (grads == NULL) return kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
    s->failed = -1;
    kv_status st = analytical(s, grads);
    if (st == KV_OK) {
        r->ran = true;
        r->passed = true;
        st = compare(s, grads, r);
        if (st != KV_OK) r->ran = false;
    }
    release_all(grads, s->nin);
    free(grads);
    for (int k = 0; k < KV_GRADCHECK_MAX_OUTPUTS; k++) free(s->out[k].w);
    if (st != KV_OK) {
        r->passed = false;
        return st;
    }
    if (!r->passed) return kv_error(KV_ERR_INVALID_ARG, "%s", r->message);
    return KV_OK;
}

static kv_status make_master(gc_input *in, const kv_tensor *t, const char *op) {
    if (!kv_dtype_is_floating(t->dtype) && !kv_dtype_is_complex(t->dtype))
        return kv_error(KV_ERR_DTYPE, "gradcheck: %s: input %s is %s; only floating and complex inputs are "
                        "differentiable", op, in->name, kv_dtype_name(t->dtype));
    const kv_dtype dt = wide_of(t->dtype);
    const kv_device cpu = KV_DEVICE_CPU0;
    kv_tls_keys g = kv_no_grad_push();
    const int64_t rowmajor = KV_MEMORY_FORMAT_CONTIGUOUS; /* perturbed element by element in row-major order */
    in->master = kv__to_copy((kv_tensor *)t, &dt, NULL, &cpu, NULL, false, &rowmajor);
    kv_grad_mode_pop(g);
    if (in->master == NULL) return kv_last_error();
    in->device = t->device;
    return KV_OK;
}

static void init_result(kv_gradcheck_result *r) {
    memset(r, 0, sizeof *r);
    r->slot = -1;
    r->list_index = -1;
    r->element = -1;
}

kv_status kv_gradcheck_fn_run(const char *name, kv_gradcheck_fn fn, void *ctx, kv_tensor *const *inputs,
                              int ninputs, const kv_gradcheck_options *opts, kv_gradcheck_result *result) {
    kv_gradcheck_result local;
    kv_gradcheck_result *r = result ? result : &local;
    init_result(r);
    kv_status st = kv_dispatch_init();
    if (st != KV_OK) return st;
    if (fn == NULL || ninputs < 0 || (ninputs > 0 && inputs == NULL))
        return kv_error(KV_ERR_INVALID_ARG, "gradcheck: %s: argument 'fn' or 'inputs' is NULL", name ? name : "fn");
    gc_state s = { .op = name ? name : "fn", .fn = fn, .ctx = ctx, .nin = ninputs };
    s.o = opts ? *opts : KV_GRADCHECK_DEFAULT_OPTIONS;
    s.in = calloc((size_t)(ninputs > 0 ? ninputs : 1), sizeof *s.in);
    if (s.in == NULL) return kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
    for (int i = 0; i < ninputs && st == KV_OK; i++) {
        snprintf(s.in[i].name, sizeof s.in[i].name, "input %d", i);
        st = inputs[i] ? make_master(&s.in[i], inputs[i], s.op)
                       : kv_error(KV_ERR_INVALID_ARG, "gradcheck: %s: input %d is NULL", s.op, i);
    }
    if (st == KV_OK) st = gc_run(&s, r);
    if (s.failed >= 0) r->slot = s.failed;
    for (int i = 0; i < ninputs; i++) kv_tensor_release(s.in[i].master);
    free(s.in);
    return st;
}

/* ---- kv_gradcheck: an op and a stack ---- */

typedef struct gc_op_ctx {
    const kv_op *op;
    const kv_schema *schema;
    kv_ivalue args[KV_SCHEMA_MAX_ARGS];    /* converted template */
    kv_tensor *owned[KV_SCHEMA_MAX_ARGS];   /* converted non-differentiable tensors */
    kv_tensor **list_items[KV_SCHEMA_MAX_ARGS];
    kv_tensor **list_owned[KV_SCHEMA_MAX_ARGS]; /* widened elements of non-differentiable lists */
    int in_slot[64];
    int in_index[64];
    int nin;
    /* A random op's generator (the thread's default one for None) as it
     * was when gradcheck started: every evaluation draws from a fresh copy,
     * so the perturbed calls see the same samples (PyTorch's OpInfo tests
     * reseed before each call for the same reason). */
    kv_generator gens[KV_SCHEMA_MAX_ARGS];
} gc_op_ctx;

static kv_status op_eval(void *vctx, kv_tensor *const *xs, int n, kv_tensor **outs, int *nout) {
    gc_op_ctx *c = vctx;
    const kv_schema *s = c->schema;
    kv_ivalue slots[KV_STACK_MAX];
    kv_tensor *clones[KV_SCHEMA_MAX_ARGS] = { 0 };
    kv_tensor **lists[KV_SCHEMA_MAX_ARGS] = { 0 };
    kv_generator gens[KV_SCHEMA_MAX_ARGS];
    kv_status st = KV_OK;
    memcpy(slots, c->args, (size_t)s->nargs * sizeof *slots);
    for (int a = 0; a < s->nargs; a++) {
        if (s->args[a].type.kind != KV_TYPE_GENERATOR) continue;
        gens[a] = c->gens[a];
        slots[a] = (kv_ivalue){ .tag = KV_IV_GENERATOR, .v.gen = &gens[a] };
    }
    for (int a = 0; a < s->nargs && st == KV_OK; a++) {
        if (c->list_items[a] == NULL) continue;
        const int len = c->args[a].v.tensors.n;
        lists[a] = malloc((size_t)(len > 0 ? len : 1) * sizeof *lists[a]);
        if (lists[a] == NULL) st = kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
        else memcpy(lists[a], c->list_items[a], (size_t)len * sizeof *lists[a]);
        slots[a].v.tensors.items = lists[a];
    }
    for (int i = 0; i < n && st == KV_OK; i++) {
        const int a = c->in_slot[i];
        if (c->in_index[i] >= 0) lists[a][c->in_index[i]] = xs[i];
        else slots[a].v.tensor = xs[i];
    }
    /* An in-place op writes a clone (a non-leaf), never the inputs; an
     * in-place foreach op a clone of each element (owned by `lists`,
     * released with the clones after the call). */
    int written = -1;
    for (int a = 0; a < s->nargs && st == KV_OK; a++) {
        if (s->args[a].type.kind != KV_TYPE_TENSOR || !s->args[a].alias.is_write) continue;
        if (slots[a].tag == KV_IV_TENSOR_LIST && lists[a] != NULL) {
            written = a;
            for (int e = 0; e < slots[a].v.tensors.n; e++) {
                /* After a failure the rest become NULL: the release below
                 * must meet only clones. */
                kv_tensor *cl = st == KV_OK ? kv_clone(lists[a][e], NULL) : NULL;
                if (cl == NULL && st == KV_OK) st = kv_last_error();
                lists[a][e] = cl;
            }
            continue;
        }
        if (slots[a].tag != KV_IV_TENSOR) continue;
        clones[a] = kv_clone(slots[a].v.tensor, NULL);
        if (clones[a] == NULL) st = kv_last_error();
        else slots[a].v.tensor = clones[a];
    }
    *nout = 0;
    if (st == KV_OK) {
        kv_stack stack = { slots, s->nargs, KV_STACK_MAX };
        st = kv_call(c->op, &stack);
        if (st == KV_OK) {
            for (int k = 0; k < stack.size; k++) {
                if (stack.slots[k].tag != KV_IV_TENSOR) continue;
                if (*nout == KV_GRADCHECK_MAX_OUTPUTS) {
                    kv_tensor_release(stack.slots[k].v.tensor);
                    continue;
                }
                outs[(*nout)++] = stack.slots[k].v.tensor;
            }
            /* An op that returns nothing: its outputs are the elements it wrote. */
            for (int e = 0; written >= 0 && s->nreturns == 0 && e < slots[written].v.tensors.n; e++) {
                if (*nout == KV_GRADCHECK_MAX_OUTPUTS) break;
                kv_tensor_retain(lists[written][e]);
                outs[(*nout)++] = lists[written][e];
            }
        }
    }
    for (int a = 0; a < s->nargs; a++) {
        kv_tensor_release(clones[a]);
        for (int e = 0; a == written && e < slots[a].v.tensors.n; e++) kv_tensor_release(lists[a][e]);
        free(lists[a]);
    }
    return st;
}

static bool slot_differentiable(const kv_gradcheck_options *o, const kv_arg *a, const kv_ivalue *v, int slot) {
    if (a->type.kind != KV_TYPE_TENSOR) return false;
    if (o->differentiable) return (o->differentiable >> slot) & 1u;
    if (v->tag == KV_IV_TENSOR) return kv_dtype_is_floating(v->v.tensor->dtype) || kv_dtype_is_complex(v->v.tensor->dtype);
    if (v->tag == KV_IV_TENSOR_LIST) {
        for (int e = 0; e < v->v.tensors.n; e++) {
            const kv_tensor *t = v->v.tensors.items[e];
            if (!kv_dtype_is_floating(t->dtype) && !kv_dtype_is_complex(t->dtype)) return false;
        }
        return v->v.tensors.n > 0;
    }
    return false;
}

/* A floating argument that is not differentiated, widened like the others. */
static kv_tensor *widen(kv_tensor *t) {
    if (!kv_dtype_is_floating(t->dtype) && !kv_dtype_is_complex(t->dtype)) {
        kv_tensor_retain(t);
        return t;
    }
    const kv_dtype dt = wide_of(t->dtype);
    kv_tls_keys g = kv_no_grad_push();
    kv_tensor *w = kv__to_copy(t, &dt, NULL, NULL, NULL, false, NULL);
    kv_grad_mode_pop(g);
    return w;
}

kv_status kv_gradcheck(const kv_op *op, const kv_stack *args, const kv_gradcheck_options *opts,
                       kv_gradcheck_result *result) {
    kv_gradcheck_result local;
    kv_gradcheck_result *r = result ? result : &local;
    init_result(r);
    kv_status st = kv_dispatch_init();
    if (st != KV_OK) return st;
    if (op == NULL || args == NULL) return kv_error(KV_ERR_INVALID_ARG, "gradcheck: argument 'op' or 'args' is NULL");
    const kv_schema *s = kv_op_schema(op);
    if (args->size != s->nargs)
        return kv_error(KV_ERR_INVALID_ARG, "gradcheck: %s: expected %d arguments on the stack, got %d", kv_op_name(op),
                        s->nargs, args->size);
    const kv_gradcheck_options o = opts ? *opts : KV_GRADCHECK_DEFAULT_OPTIONS;
    gc_op_ctx *c = calloc(1, sizeof *c);
    gc_input *in = calloc(64, sizeof *in);
    if (c == NULL || in == NULL) {
        free(c);
        free(in);
        return kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
    }
    c->op = op;
    c->schema = s;
    memcpy(c->args, args->slots, (size_t)s->nargs * sizeof *c->args);
    for (int a = 0; a < s->nargs; a++)
        if (s->args[a].type.kind == KV_TYPE_GENERATOR)
            c->gens[a] = *kv_generator_or_default(args->slots[a].tag == KV_IV_GENERATOR ? args->slots[a].v.gen : NULL);
    int nin = 0;
    for (int a = 0; a < s->nargs && st == KV_OK; a++) {
        const kv_ivalue *v = &args->slots[a];
        const bool diff = slot_differentiable(&o, &s->args[a], v, a);
        if (v->tag == KV_IV_TENSOR) {
            if (diff) {
                if (nin == 64) {
                    st = kv_error(KV_ERR_INVALID_ARG, "gradcheck: %s: more than 64 differentiable inputs", s->full_name);
                    break;
                }
                snprintf(in[nin].name, sizeof in[nin].name, "'%s'", s->args[a].name);
                c->in_slot[nin] = a;
                c->in_index[nin] = -1;
                st = make_master(&in[nin], v->v.tensor, s->full_name);
                nin++;
            } else {
                c->owned[a] = widen(v->v.tensor);
                if (c->owned[a] == NULL) st = kv_last_error();
                else c->args[a].v.tensor = c->owned[a];
            }
        } else if (v->tag == KV_IV_TENSOR_LIST) {
            const int len = v->v.tensors.n;
            c->list_items[a] = calloc((size_t)(len > 0 ? len : 1), sizeof *c->list_items[a]);
            c->list_owned[a] = calloc((size_t)(len > 0 ? len : 1), sizeof *c->list_owned[a]);
            if (c->list_items[a] == NULL || c->list_owned[a] == NULL) {
                st = kv_error(KV_ERR_OOM, "gradcheck: out of host memory");
                break;
            }
            for (int e = 0; e < len && st == KV_OK; e++) {
                kv_tensor *t = v->v.tensors.items[e];
                if (diff) {
                    if (nin == 64) {
                        st = kv_error(KV_ERR_INVALID_ARG, "gradcheck: %s: more than 64 differentiable inputs",
                                      s->full_name);
                        break;
                    }
                    snprintf(in[nin].name, sizeof in[nin].name, "'%s'[%d]", s->args[a].name, e);
                    c->in_slot[nin] = a;
                    c->in_index[nin] = e;
                    st = make_master(&in[nin], t, s->full_name);
                    nin++;
                } else {
                    c->list_owned[a][e] = widen(t);
                    if (c->list_owned[a][e] == NULL) st = kv_last_error();
                    c->list_items[a][e] = c->list_owned[a][e];
                }
            }
        } else if (diff && o.differentiable) {
            st = kv_error(KV_ERR_INVALID_ARG, "gradcheck: %s: argument '%s' is marked differentiable but holds no tensor",
                          s->full_name, s->args[a].name);
        }
    }
    c->nin = nin;
    if (st == KV_OK) {
        gc_state gs = { .op = s->full_name, .fn = op_eval, .ctx = c, .in = in, .nin = nin, .o = o };
        st = gc_run(&gs, r);
        if (gs.failed >= 0) {
            r->slot = c->in_slot[gs.failed];
            r->list_index = c->in_index[gs.failed];
        }
    }
    for (int i = 0; i < nin; i++) kv_tensor_release(in[i].master);
    for (int a = 0; a < KV_SCHEMA_MAX_ARGS; a++) {
        kv_tensor_release(c->owned[a]);
        if (c->list_owned[a])
            for (int e = 0; e < args->slots[a].v.tensors.n; e++) kv_tensor_release(c->list_owned[a][e]);
        free(c->list_owned[a]);
        free(c->list_items[a]);
    }
    free(in);
    free(c);
    return st;
}
