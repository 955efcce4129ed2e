/* The oneDNN plugin's plumbing: the engine and per-thread streams,
 * memory descriptors over kvsuite tensors, running a primitive, and the
 * decline path (onednn.h). */
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "onednn/onednn.h"

/* ---- engine and streams ---- */

static dnnl_engine_t od_eng;
static dnnl_status_t od_eng_status = dnnl_success;
static pthread_key_t od_stream_key;
static pthread_once_t od_once = PTHREAD_ONCE_INIT;

static void od_stream_free(void *p) { dnnl_stream_destroy((dnnl_stream_t)p); }

static void od_init_once(void) {
    od_eng_status = dnnl_engine_create(&od_eng, dnnl_cpu, 0);
    pthread_key_create(&od_stream_key, od_stream_free);
}

kv_status kv_dnnl_fail(const char *op, const char *what, dnnl_status_t s) {
    return kv_dnnl_host->error(KV_ERR_INTERNAL, "%s: onednn: %s failed (dnnl_status_t %d)", op, what, (int)s);
}

dnnl_engine_t kv_dnnl_engine(void) {
    pthread_once(&od_once, od_init_once);
    if (od_eng_status != dnnl_success) {
        kv_dnnl_fail("onednn", "dnnl_engine_create(cpu)", od_eng_status);
        return NULL;
    }
    return od_eng;
}

/* One stream per thread: a CPU stream is cheap, and a stream shared
 * between threads would serialize them. Each thread also runs oneDNN's
 * OpenMP regions on one thread: kvrun forks its case workers, and a
 * libgomp thread pool left in a process that forks hangs the child's
 * first parallel region; one thread also makes every reduction order,
 * and so every result, the same from run to run. */
static dnnl_stream_t od_thread_stream(const char *op) {
    dnnl_engine_t eng = kv_dnnl_engine();
    if (eng == NULL) return NULL;
    dnnl_stream_t s = pthread_getspecific(od_stream_key);
    if (s != NULL) return s;
    omp_set_num_threads(1);
    const dnnl_status_t st = dnnl_stream_create(&s, eng, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        kv_dnnl_fail(op, "dnnl_stream_create", st);
        return NULL;
    }
    pthread_setspecific(od_stream_key, s);
    return s;
}

/* ---- dtypes and tensors ---- */

bool kv_dnnl_dtype(kv_dtype dt, dnnl_data_type_t *out) {
    switch (dt) {
    case KV_F32: *out = dnnl_f32; return true;
    case KV_BF16: *out = dnnl_bf16; return true;
    case KV_F16: *out = dnnl_f16; return true;
    case KV_I32: *out = dnnl_s32; return true;
    case KV_I8: *out = dnnl_s8; return true;
    case KV_U8:
    case KV_BOOL: *out = dnnl_u8; return true;
    case KV_I16:
    case KV_I64:
    case KV_F64:
    case KV_C64:
    case KV_C128:
    case KV_DTYPE_COUNT: break;
    }
    return false;
}

bool kv_dnnl_on_device(const kv_tensor *t) { return t != NULL && t->device.type == kv_dnnl_type; }

void *kv_dnnl_ptr(const kv_tensor *t) {
    return (char *)t->storage->data + t->offset * (int64_t)kv_dnnl_host->dtype_size(t->dtype);
}

kv_tensor *kv_dnnl_empty(const int64_t *sizes, int ndim, kv_dtype dt) {
    return kv_dnnl_host->tensor_empty(sizes, ndim, dt, (kv_device){ kv_dnnl_type, 0 });
}

kv_status kv_dnnl_return(kv_stack *stack, kv_tensor *out) {
    kv_dnnl_host->stack_return_tensors(stack, &out, 1);
    return KV_OK;
}

bool kv_dnnl_has_broadcast_dim(const kv_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->sizes[d] > 1 && t->strides[d] == 0) return true;
    return false;
}

bool kv_dnnl_may_overlap(const kv_tensor *t) { return !kv_tensor_strides_nested(t); }

double kv_dnnl_max_finite_abs(const kv_tensor *t) {
    const int64_t n = kv_dnnl_host->tensor_numel(t);
    if (n == 0 || (t->dtype != KV_F32 && t->dtype != KV_BF16)) return 0.0;
    const char *base = kv_dnnl_ptr(t);
    const size_t esize = t->dtype == KV_F32 ? 4 : 2;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    double best = 0.0;
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        float v;
        if (esize == 4) {
            memcpy(&v, base + off * 4, 4);
        } else {
            uint16_t b;
            memcpy(&b, base + off * 2, 2);
            const uint32_t w = (uint32_t)b << 16;
            memcpy(&v, &w, 4);
        }
        if (isfinite(v) && fabs((double)v) > best) best = fabs((double)v);
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->sizes[d]) break;
            idx[d] = 0;
        }
    }
    return best;
}

bool kv_dnnl_scalar_f32(kv_scalar s, float *out) {
    switch (s.kind) {
    case KV_SCALAR_INT: *out = (float)s.v.i; return true;
    case KV_SCALAR_DOUBLE: *out = (float)s.v.d; return true;
    case KV_SCALAR_BOOL:
    case KV_SCALAR_COMPLEX: break;
    }
    return false;
}

/* ---- memory descriptors ---- */

kv_status kv_dnnl_md(const char *op, const int64_t *sizes, const int64_t *strides, int ndim, dnnl_data_type_t dt,
                     dnnl_memory_desc_t *md) {
    dnnl_dims_t d, s;
    if (ndim > DNNL_MAX_NDIMS)
        return kv_dnnl_host->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for %d dimensions", op, ndim);
    if (ndim == 0) {
        d[0] = 1;
        s[0] = 1;
        ndim = 1;
    } else {
        for (int i = 0; i < ndim; i++) {
            d[i] = sizes[i];
            s[i] = strides[i];
        }
    }
    const dnnl_status_t st = dnnl_memory_desc_init_by_strides(md, ndim, d, dt, s);
    /* Strides oneDNN cannot describe (overlapping, as in an unfold view)
     * are a layout this backend does not take: a decline, not a failure. */
    if (st == dnnl_invalid_arguments)
        return kv_dnnl_host->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for this layout (strides oneDNN "
                                   "cannot describe)", op);
    return st == dnnl_success ? KV_OK : kv_dnnl_fail(op, "dnnl_memory_desc_init_by_strides", st);
}

kv_status kv_dnnl_md_of(const char *op, const kv_tensor *t, dnnl_data_type_t dt, dnnl_memory_desc_t *md) {
    return kv_dnnl_md(op, t->sizes, t->strides, t->ndim, dt, md);
}

static void od_dense_strides(const int64_t *sizes, int ndim, int64_t *strides) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= sizes[d] > 1 ? sizes[d] : 1;
    }
}

kv_status kv_dnnl_md_dense(const char *op, const int64_t *sizes, int ndim, dnnl_data_type_t dt,
                           dnnl_memory_desc_t *md) {
    int64_t strides[KV_DNNL_MAX_DIMS];
    od_dense_strides(sizes, ndim, strides);
    return kv_dnnl_md(op, sizes, strides, ndim, dt, md);
}

bool kv_dnnl_broadcast_strides(const kv_tensor *t, const int64_t *sizes, int ndim, int64_t *strides) {
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

kv_status kv_dnnl_md_raw(const char *op, kv_dtype dt, const int64_t *sizes, const int64_t *strides, int ndim,
                         dnnl_memory_desc_t *md) {
    const size_t esize = kv_dnnl_host->dtype_size(dt);
    const bool words = esize % 4 == 0;
    const int64_t k = (int64_t)(words ? esize / 4 : esize);
    int64_t rs[KV_DNNL_MAX_DIMS], rz[KV_DNNL_MAX_DIMS];
    int n = 0;
    if (ndim == 0) {
        rz[n] = 1;
        rs[n++] = k;
    }
    for (int d = 0; d < ndim; d++) {
        rz[n] = sizes[d];
        rs[n++] = strides[d] * k;
    }
    if (k > 1) {
        rz[n] = k;
        rs[n++] = 1;
    }
    return kv_dnnl_md(op, rz, rs, n, words ? dnnl_s32 : dnnl_u8, md);
}

/* ---- running primitives ---- */

kv_status kv_dnnl_run_pd(const char *op, const char *what, dnnl_primitive_desc_t pd, const kv_dnnl_arg *args,
                         int nargs) {
    dnnl_engine_t eng = kv_dnnl_engine();
    dnnl_stream_t stream = eng ? od_thread_stream(op) : NULL;
    if (stream == NULL) {
        dnnl_primitive_desc_destroy(pd);
        return kv_dnnl_host->last_error();
    }
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t mems[16] = { NULL };
    dnnl_exec_arg_t exec[16];
    kv_status st = KV_OK;
    dnnl_status_t s = dnnl_primitive_create(&prim, pd);
    if (s != dnnl_success) st = kv_dnnl_fail(op, "dnnl_primitive_create", s);
    if (nargs > 16) st = kv_dnnl_host->error(KV_ERR_INTERNAL, "%s: onednn: %d arguments for %s", op, nargs, what);
    for (int i = 0; i < nargs && st == KV_OK; i++) {
        s = dnnl_memory_create(&mems[i], args[i].md, eng, args[i].ptr);
        if (s != dnnl_success) st = kv_dnnl_fail(op, "dnnl_memory_create", s);
        exec[i] = (dnnl_exec_arg_t){ args[i].arg, mems[i] };
    }
    if (st == KV_OK) {
        s = dnnl_primitive_execute(prim, stream, nargs, exec);
        if (s == dnnl_success) s = dnnl_stream_wait(stream);
        if (s != dnnl_success) st = kv_dnnl_fail(op, what, s);
    }
    for (int i = 0; i < nargs && i < 16; i++)
        if (mems[i] != NULL) dnnl_memory_destroy(mems[i]);
    if (prim != NULL) dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    return st;
}

static kv_status od_pd_failed(const char *op, const char *what, dnnl_status_t s) {
    if (s == dnnl_unimplemented)
        return kv_dnnl_host->error(KV_ERR_MISSING_KERNEL,
                                   "%s: no oneDNN kernel for this call: oneDNN has no %s implementation for these "
                                   "data types and layouts on this CPU",
                                   op, what);
    return kv_dnnl_fail(op, what, s);
}

kv_status kv_dnnl_run(const char *op, const char *what, const_dnnl_op_desc_t op_desc, const_dnnl_primitive_attr_t attr,
                      const kv_dnnl_arg *args, int nargs) {
    dnnl_engine_t eng = kv_dnnl_engine();
    if (eng == NULL) return kv_dnnl_host->last_error();
    dnnl_primitive_desc_t pd;
    const dnnl_status_t s = dnnl_primitive_desc_create(&pd, op_desc, attr, eng, NULL);
    if (s != dnnl_success) return od_pd_failed(op, what, s);
    return kv_dnnl_run_pd(op, what, pd, args, nargs);
}

kv_status kv_dnnl_reorder(const char *op, const dnnl_memory_desc_t *src_md, void *src, const dnnl_memory_desc_t *dst_md,
                          void *dst) {
    dnnl_engine_t eng = kv_dnnl_engine();
    if (eng == NULL) return kv_dnnl_host->last_error();
    dnnl_primitive_desc_t pd;
    const dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, src_md, eng, dst_md, eng, NULL);
    if (s != dnnl_success) return od_pd_failed(op, "reorder", s);
    const kv_dnnl_arg args[2] = { { DNNL_ARG_FROM, src_md, src }, { DNNL_ARG_TO, dst_md, dst } };
    return kv_dnnl_run_pd(op, "reorder", pd, args, 2);
}

kv_status kv_dnnl_copy_dense(const char *op, const kv_tensor *t, void *dst) {
    dnnl_memory_desc_t smd, dmd;
    int64_t dense[KV_MAX_DIMS];
    od_dense_strides(t->sizes, t->ndim, dense);
    kv_status st = kv_dnnl_md_raw(op, t->dtype, t->sizes, t->strides, t->ndim, &smd);
    if (st == KV_OK) st = kv_dnnl_md_raw(op, t->dtype, t->sizes, dense, t->ndim, &dmd);
    if (st == KV_OK) st = kv_dnnl_reorder(op, &smd, kv_dnnl_ptr(t), &dmd, dst);
    return st;
}

/* ---- declining ---- */

/* Host copies of the call's device arguments, for the reference. */
typedef struct od_probe {
    kv_tensor *owned[KV_STACK_MAX * 4];
    int nowned;
    kv_tensor **lists[KV_STACK_MAX];
    int nlists;
} od_probe;

static kv_tensor *od_probe_copy(od_probe *p, kv_tensor *t) {
    if (!kv_dnnl_on_device(t)) return t;
    if (p->nowned == (int)(sizeof p->owned / sizeof p->owned[0])) {
        kv_dnnl_host->error(KV_ERR_INTERNAL, "onednn: too many tensor arguments to check");
        return NULL;
    }
    kv_tensor *c = kv_dnnl_host->copy_to_device(t, KV_DEVICE_CPU0);
    if (c != NULL) p->owned[p->nowned++] = c;
    return c;
}

static kv_status od_probe_arg(od_probe *p, kv_ivalue *v) {
    if (v->tag == KV_IV_TENSOR) {
        v->v.tensor = od_probe_copy(p, v->v.tensor);
        return v->v.tensor ? KV_OK : kv_dnnl_host->last_error();
    }
    if (v->tag == KV_IV_TENSOR_LIST && v->v.tensors.n > 0) {
        kv_tensor **items = malloc((size_t)v->v.tensors.n * sizeof *items);
        if (items == NULL) return kv_dnnl_host->error(KV_ERR_OOM, "onednn: out of memory checking a tensor list");
        p->lists[p->nlists++] = items;
        for (int e = 0; e < v->v.tensors.n; e++) {
            items[e] = od_probe_copy(p, v->v.tensors.items[e]);
            if (items[e] == NULL) return kv_dnnl_host->last_error();
        }
        v->v.tensors.items = items;
        return KV_OK;
    }
    /* A result asked for on this device is made on the host by the
     * reference; another index keeps its device and the reference's
     * device error. */
    if (v->tag == KV_IV_DEVICE && v->v.device.type == kv_dnnl_type && v->v.device.index == 0)
        v->v.device = KV_DEVICE_CPU0;
    return KV_OK;
}

kv_status kv_dnnl_decline(const kv_op *op, kv_stack *stack, const char *fmt, ...) {
    const kv_host_api *h = kv_dnnl_host;
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    od_probe p;
    p.nowned = 0;
    p.nlists = 0;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack cpu = kv_stack_on(slots, KV_STACK_MAX);
    kv_status st = KV_OK;
    for (int i = 0; i < stack->size && st == KV_OK; i++) {
        kv_ivalue v = stack->slots[i];
        st = od_probe_arg(&p, &v);
        if (st == KV_OK) st = h->stack_push(&cpu, v);
    }
    if (st == KV_OK) st = h->call_reference(op, &cpu);
    if (st == KV_OK)
        for (int i = 0; i < cpu.size; i++)
            if (cpu.slots[i].tag == KV_IV_TENSOR) h->tensor_release(cpu.slots[i].v.tensor);
    for (int i = 0; i < p.nowned; i++) h->tensor_release(p.owned[i]);
    for (int i = 0; i < p.nlists; i++) free(p.lists[i]);
    if (st != KV_OK) return st; /* the reference's error: bad input */
    return h->error(KV_ERR_MISSING_KERNEL, "%s: no oneDNN kernel for %s", h->op_name(op), why);
}

kv_status kv_dnnl_register_table(kv_key key, const kv_dnnl_reg *rows, int n) {
    for (int i = 0; i < n; i++) {
        const kv_status st = kv_dnnl_host->register_kernel(rows[i].op, key, rows[i].fn);
        if (st != KV_OK) return st;
    }
    return KV_OK;
}
