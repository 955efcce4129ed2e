/* Staging: an op run by its CPU reference on host copies of a backend's
 * tensors, with the results moved back. A backend registers it as its
 * backend FALLBACK (CUDA does): ops it has no kernel for still work on its
 * device (the accel device can box every op onto it), while the runner's
 * support matrix stays honest, because a fallback entry is not a kernel
 * (the variants check reports it UNSUPPORTED).
 *
 * Each device storage met in the arguments is copied to the host once
 * (whole, so views of it keep their geometry and share one host storage,
 * and the reference's aliasing checks see what they would see on the
 * CPU). After the call, storages the op may have written (a mutable
 * argument, or a version bump) are copied back and their versions bumped;
 * results are mapped as in kernels/sim/sim_generic.c: a returned argument
 * is the device argument, a view of a host copy is the same view of the
 * device tensor, a fresh result is copied to the device (unless the op's
 * Device argument asked for the CPU). */
#include <stdlib.h>
#include <string.h>

#include "backend/backend_internal.h"
#include "ref/ref.h"

typedef struct stage_map {
    kv_storage *dev;     /* a device storage met in the arguments */
    kv_tensor *first;    /* a device argument over it */
    kv_tensor *host;     /* its host copy (whole storage) */
    int64_t version0;
    bool written;        /* a mutable (a!) argument lives in it */
} stage_map;

typedef struct stage_pair {
    kv_tensor *dev;  /* borrowed argument */
    kv_tensor *host; /* owned stand-in */
} stage_pair;

typedef struct stage_call {
    kv_device_type type;
    stage_map *maps;
    int nmaps, capmaps;
    stage_pair *pairs;
    int npairs, cappairs;
    kv_tensor **lists[KV_SCHEMA_MAX_ARGS];
    int nlists;
    bool out_on_host;
} stage_call;

static void stage_free(stage_call *c) {
    for (int i = 0; i < c->npairs; i++) kv_tensor_release(c->pairs[i].host);
    for (int i = 0; i < c->nmaps; i++) kv_tensor_release(c->maps[i].host);
    for (int i = 0; i < c->nlists; i++) free(c->lists[i]);
    free(c->pairs);
    free(c->maps);
}

static bool stage_grow(void **items, int *cap, int n, size_t size) {
    if (n < *cap) return true;
    const int ncap = *cap ? 2 * *cap : 8;
    void *p = realloc(*items, (size_t)ncap * size);
    if (p == NULL) return false;
    *items = p;
    *cap = ncap;
    return true;
}

static kv_tensor *stage_in(stage_call *c, const char *op, kv_tensor *t, bool mutated) {
    stage_map *m = NULL;
    for (int i = 0; i < c->nmaps && m == NULL; i++)
        if (c->maps[i].dev == t->storage) m = &c->maps[i];
    if (!stage_grow((void **)&c->pairs, &c->cappairs, c->npairs, sizeof *c->pairs)) {
        kv_error(KV_ERR_OOM, "%s: staging: out of host memory", op);
        return NULL;
    }
    kv_tensor *h;
    if (m == NULL) {
        if (!stage_grow((void **)&c->maps, &c->capmaps, c->nmaps, sizeof *c->maps)) {
            kv_error(KV_ERR_OOM, "%s: staging: out of host memory", op);
            return NULL;
        }
        h = kv_backend_copy_to_host(t);
        if (h == NULL) return NULL;
        h->keys = (t->keys & ~KV_KEYSET_BACKENDS) | kv_keyset_of(KV_KEY_CPU);
        kv_tensor_retain(h); /* one for the map, one for the pair */
        c->maps[c->nmaps++] = (stage_map){ t->storage, t, h, kv_tensor_version(h), mutated };
    } else {
        h = kv_tensor_view(m->host, t->sizes, t->strides, t->ndim, t->offset);
        if (h == NULL) return NULL;
        h->keys = (t->keys & ~KV_KEYSET_BACKENDS) | kv_keyset_of(KV_KEY_CPU);
        m->written = m->written || mutated;
    }
    c->pairs[c->npairs++] = (stage_pair){ t, h };
    return h;
}

static kv_status stage_arg(stage_call *c, const kv_op *op, const kv_arg *a, kv_ivalue *v) {
    const char *name = kv_op_name(op);
    const bool mutated = a->alias.is_write;
    if (v->tag == KV_IV_TENSOR && v->v.tensor->device.type == c->type) {
        kv_tensor *h = stage_in(c, name, v->v.tensor, mutated);
        if (h == NULL) return kv_last_error();
        v->v.tensor = h;
    } else if (v->tag == KV_IV_TENSOR_LIST && v->v.tensors.n > 0) {
        kv_tensor **items = c->nlists < KV_SCHEMA_MAX_ARGS ? malloc((size_t)v->v.tensors.n * sizeof *items) : NULL;
        if (items == NULL) return kv_error(KV_ERR_OOM, "%s: staging: out of host memory", name);
        c->lists[c->nlists++] = items;
        for (int e = 0; e < v->v.tensors.n; e++) {
            kv_tensor *t = v->v.tensors.items[e];
            items[e] = t->device.type == c->type ? stage_in(c, name, t, mutated) : t;
            if (items[e] == NULL) return kv_last_error();
        }
        v->v.tensors.items = items;
    } else if (v->tag == KV_IV_DEVICE) {
        if (v->v.device.type == c->type) v->v.device = KV_DEVICE_CPU0;
        else if (v->v.device.type == KV_DEVICE_CPU) c->out_on_host = true;
    }
    return KV_OK;
}

/* The device tensor a host result stands for; owned. Takes over r. */
static kv_tensor *stage_out(stage_call *c, kv_tensor *r) {
    const kv_keyset backend = kv_keyset_of((kv_key)c->type);
    for (int i = 0; i < c->npairs; i++) {
        if (c->pairs[i].host != r) continue;
        kv_tensor_release(r);
        kv_tensor_retain(c->pairs[i].dev);
        return c->pairs[i].dev;
    }
    for (int i = 0; i < c->nmaps; i++) {
        const stage_map *m = &c->maps[i];
        if (m->host->storage != r->storage) continue;
        kv_tensor *out = r->dtype == m->first->dtype
                             ? kv_tensor_view(m->first, r->sizes, r->strides, r->ndim, r->offset)
                             : NULL;
        if (out == NULL && r->dtype != m->first->dtype)
            kv_error(KV_ERR_INTERNAL, "staging: a %s view of a %s tensor cannot be mapped back", kv_dtype_name(r->dtype),
                     kv_dtype_name(m->first->dtype));
        if (out != NULL) out->keys = (r->keys & ~KV_KEYSET_BACKENDS) | backend;
        kv_tensor_release(r);
        return out;
    }
    if (r->device.type != KV_DEVICE_CPU || c->out_on_host) return r;
    kv_tensor *out = kv_backend_copy_to_device(r, (kv_device){ c->type, 0 });
    if (out != NULL) out->keys = (r->keys & ~KV_KEYSET_BACKENDS) | backend;
    kv_tensor_release(r);
    return out;
}

static kv_status stage_write_back(stage_call *c) {
    for (int i = 0; i < c->nmaps; i++) {
        stage_map *m = &c->maps[i];
        const int64_t bumps = kv_tensor_version(m->host) - m->version0;
        if (!m->written && bumps == 0) continue;
        const kv_status st = kv_backend_storage_upload(m->dev, m->host->storage->data, m->host->storage->nbytes);
        if (st != KV_OK) return st;
        for (int64_t n = bumps; n > 0; n--) kv_tensor_bump_version(m->first);
    }
    return KV_OK;
}

kv_status kv_backend_stage_reference(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    stage_call c;
    memset(&c, 0, sizeof c);
    c.type = (kv_device_type)kv_keyset_highest(ks & KV_KEYSET_BACKENDS);
    if (c.type >= KV_DEVICE_TYPE_COUNT || c.type == KV_DEVICE_CPU)
        return kv_error(KV_ERR_INTERNAL, "%s: staging reached without a device backend in the key set", kv_op_name(op));
    /* An out= op may resize out, which a host copy cannot carry back: it
     * runs as its functional op and copy_ on the backend (each a kernel of
     * the backend's or staged in turn). */
    if (kv_ref_out_functional(kv_op_name(op)) != NULL) return kv_ref_out_on(op, (kv_key)c.type, stack);
    const kv_schema *s = kv_op_schema(op);
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack cpu = kv_stack_on(slots, KV_STACK_MAX);
    kv_status st = KV_OK;
    for (int i = 0; i < stack->size && st == KV_OK; i++) {
        kv_ivalue v = stack->slots[i];
        if (i < s->nargs) st = stage_arg(&c, op, &s->args[i], &v);
        if (st == KV_OK) st = kv_stack_push(&cpu, v);
    }
    if (st == KV_OK) st = kv_backend_call_reference(op, &cpu);
    if (st == KV_OK) {
        st = stage_write_back(&c);
        /* A foreach op returns one tensor per list element: as many as
         * the host stack held. */
        kv_tensor *outs[KV_STACK_MAX];
        int nout = 0;
        bool is_bool = false, b = false;
        for (int i = 0; i < cpu.size; i++) {
            kv_ivalue *v = &cpu.slots[i];
            if (v->tag == KV_IV_BOOL) {
                is_bool = true;
                b = v->v.b;
            } else if (v->tag == KV_IV_TENSOR) {
                if (st != KV_OK || nout == (int)(sizeof outs / sizeof outs[0])) {
                    kv_tensor_release(v->v.tensor);
                    if (st == KV_OK) st = kv_error(KV_ERR_INTERNAL, "%s: staging: too many returns", kv_op_name(op));
                    continue;
                }
                kv_tensor *o = stage_out(&c, v->v.tensor);
                if (o == NULL) st = kv_last_error();
                else outs[nout++] = o;
            }
        }
        if (st == KV_OK && nout > stack->cap)
            st = kv_error(KV_ERR_INVALID_ARG, "%s: staging: %d returns for a stack of %d", kv_op_name(op), nout,
                          stack->cap);
        if (st != KV_OK) {
            for (int i = 0; i < nout; i++) kv_tensor_release(outs[i]);
        } else if (is_bool && nout == 0) {
            kv_stack_return_bool(stack, b);
        } else {
            kv_stack_return_tensors(stack, outs, nout);
        }
    }
    stage_free(&c);
    return st;
}
