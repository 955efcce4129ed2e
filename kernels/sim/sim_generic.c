/* The SIM generic kernel: an op's CPU reference kernel run on SIM memory.
 *
 * SIM memory is host memory behind an address bias (sim.h), so the plugin
 * can hand the CPU kernel host views of its tensors (kv_backend_host_view:
 * same geometry, borrowed storage, nothing copied) and map what comes
 * back:
 *   - a returned argument (in-place ops return self) is the SIM argument;
 *   - a result over an argument's storage (views) becomes the same view
 *     of the SIM tensor, with the result's keys (so conj's bit survives);
 *   - a fresh result is copied into new SIM memory, unless the op's
 *     Device argument asked for the CPU (_to_copy(sim, device=cpu)).
 * Tensors of one SIM storage share one host storage, so the CPU kernel's
 * overlap checks (an input aliasing the output) see what they would see
 * on the CPU; version bumps on it are replayed on the SIM storage, so
 * autograd's saved-tensor checks keep working.
 *
 * This is what makes SIM complete (every op of ops.schema) and bit-equal
 * to the reference. A real accelerator cannot do it (its memory is not
 * host memory); it registers only native kernels, and ops it lacks are
 * UNSUPPORTED in the runner. */
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

typedef struct sim_storage_map {
    const kv_storage *sim; /* a SIM storage met in the arguments */
    kv_tensor *first_sim;  /* an argument over it: the base for result views */
    kv_tensor *host_base;  /* its host view, owner of the borrowed storage */
    int64_t version0;
} sim_storage_map;

typedef struct sim_pair {
    kv_tensor *sim;  /* borrowed argument */
    kv_tensor *host; /* owned host view */
} sim_pair;

#define SIM_MAX_LIST_ARGS KV_SCHEMA_MAX_ARGS

typedef struct sim_call {
    kv_device_type type; /* SIM's device type (its key) */
    sim_storage_map *maps;
    int nmaps, capmaps;
    sim_pair *pairs;
    int npairs, cappairs;
    kv_tensor **lists[SIM_MAX_LIST_ARGS];
    int nlists;
    bool out_on_host;
} sim_call;

static kv_status sim_oom(const char *op) {
    return kv_sim_host->error(KV_ERR_OOM, "%s: sim: out of host memory for the call's bookkeeping", op);
}

static void sim_call_free(sim_call *c) {
    const kv_host_api *h = kv_sim_host;
    for (int i = 0; i < c->npairs; i++) h->tensor_release(c->pairs[i].host);
    for (int i = 0; i < c->nmaps; i++) h->tensor_release(c->maps[i].host_base);
    for (int i = 0; i < c->nlists; i++) free(c->lists[i]);
    free(c->pairs);
    free(c->maps);
}

/* The host view standing for SIM tensor t. */
static kv_tensor *sim_to_host(sim_call *c, const char *op, const char *arg, kv_tensor *t) {
    const kv_host_api *h = kv_sim_host;
    sim_storage_map *m = NULL;
    for (int i = 0; i < c->nmaps && m == NULL; i++)
        if (c->maps[i].sim == t->storage) m = &c->maps[i];
    if (c->npairs == c->cappairs) {
        const int cap = c->cappairs ? 2 * c->cappairs : 8;
        sim_pair *n = realloc(c->pairs, (size_t)cap * sizeof *n);
        if (n == NULL) {
            sim_oom(op);
            return NULL;
        }
        c->pairs = n;
        c->cappairs = cap;
    }
    kv_tensor *v;
    if (m == NULL) {
        void *base = kv_sim_storage_host(op, arg, t);
        if (base == NULL) return NULL;
        if (c->nmaps == c->capmaps) {
            const int cap = c->capmaps ? 2 * c->capmaps : 8;
            sim_storage_map *n = realloc(c->maps, (size_t)cap * sizeof *n);
            if (n == NULL) {
                sim_oom(op);
                return NULL;
            }
            c->maps = n;
            c->capmaps = cap;
        }
        v = h->host_view(t, base);
        if (v == NULL) return NULL;
        h->tensor_retain(v); /* one for the map, one for the pair */
        c->maps[c->nmaps++] = (sim_storage_map){ t->storage, t, v, h->tensor_version(v) };
    } else {
        v = h->tensor_view(m->host_base, t->sizes, t->strides, t->ndim, t->offset);
        if (v == NULL) return NULL;
        v->keys = (t->keys & ~KV_KEYSET_BACKENDS) | kv_keyset_of(KV_KEY_CPU);
    }
    c->pairs[c->npairs++] = (sim_pair){ t, v };
    return v;
}

/* Rewrites one argument slot for the CPU kernel. */
static kv_status sim_arg(sim_call *c, const kv_op *op, const kv_arg *a, kv_ivalue *v) {
    const kv_host_api *h = kv_sim_host;
    const char *name = h->op_name(op);
    if (v->tag == KV_IV_TENSOR && v->v.tensor->device.type == c->type) {
        kv_tensor *hv = sim_to_host(c, name, a->name, v->v.tensor);
        if (hv == NULL) return h->last_error();
        v->v.tensor = hv;
    } else if (v->tag == KV_IV_TENSOR_LIST && v->v.tensors.n > 0) {
        if (c->nlists == SIM_MAX_LIST_ARGS) return sim_oom(name);
        kv_tensor **items = malloc((size_t)v->v.tensors.n * sizeof *items);
        if (items == NULL) return sim_oom(name);
        c->lists[c->nlists++] = items;
        for (int e = 0; e < v->v.tensors.n; e++) {
            kv_tensor *t = v->v.tensors.items[e];
            items[e] = t->device.type == c->type ? sim_to_host(c, name, a->name, t) : t;
            if (items[e] == NULL) return h->last_error();
        }
        v->v.tensors.items = items;
    } else if (v->tag == KV_IV_DEVICE) {
        const kv_device d = v->v.device;
        if (d.type == c->type) {
            if (d.index != 0)
                return h->error(KV_ERR_DEVICE, "%s: argument '%s': sim has one device, sim:0; got sim:%d", name,
                                a->name, d.index);
            v->v.device = KV_DEVICE_CPU0; /* made on the host, moved to SIM below */
        } else if (d.type == KV_DEVICE_CPU) {
            c->out_on_host = true;
        }
    }
    return KV_OK;
}

/* The SIM tensor a CPU result stands for; owned. Takes over `r`. */
static kv_tensor *sim_from_host(sim_call *c, kv_tensor *r) {
    const kv_host_api *h = kv_sim_host;
    for (int i = 0; i < c->npairs; i++) {
        if (c->pairs[i].host != r) continue;
        h->tensor_release(r);
        h->tensor_retain(c->pairs[i].sim);
        return c->pairs[i].sim;
    }
    for (int i = 0; i < c->nmaps; i++) {
        const sim_storage_map *m = &c->maps[i];
        if (m->host_base->storage != r->storage) continue;
        kv_tensor *out = NULL;
        if (r->dtype != m->first_sim->dtype)
            h->error(KV_ERR_INTERNAL, "sim: a %s view of a %s SIM tensor cannot be mapped back",
                     h->dtype_name(r->dtype), h->dtype_name(m->first_sim->dtype));
        else
            out = h->tensor_view(m->first_sim, r->sizes, r->strides, r->ndim, r->offset);
        if (out != NULL) out->keys = (r->keys & ~KV_KEYSET_BACKENDS) | kv_keyset_of((kv_key)c->type);
        h->tensor_release(r);
        return out;
    }
    if (r->device.type != KV_DEVICE_CPU || c->out_on_host) return r;
    kv_tensor *out = h->copy_to_device(r, (kv_device){ c->type, 0 });
    if (out != NULL) out->keys = (r->keys & ~KV_KEYSET_BACKENDS) | kv_keyset_of((kv_key)c->type);
    h->tensor_release(r);
    return out;
}

/* Maps every return of the CPU stack onto `stack`. */
static kv_status sim_returns(sim_call *c, const kv_op *op, kv_stack *cpu, kv_stack *stack) {
    const kv_host_api *h = kv_sim_host;
    kv_tensor *outs[KV_STACK_MAX]; /* a foreach op: one return per list element */
    int nout = 0;
    kv_status st = KV_OK;
    bool is_bool = false, b = false;
    for (int i = 0; i < cpu->size; i++) {
        kv_ivalue *v = &cpu->slots[i];
        if (v->tag == KV_IV_BOOL) {
            is_bool = true;
            b = v->v.b;
            continue;
        }
        if (v->tag != KV_IV_TENSOR) continue;
        kv_tensor *r = v->v.tensor;
        if (st != KV_OK || nout == (int)(sizeof outs / sizeof outs[0])) {
            h->tensor_release(r);
            if (st == KV_OK) st = h->error(KV_ERR_INTERNAL, "%s: sim: too many returns", h->op_name(op));
            continue;
        }
        kv_tensor *o = sim_from_host(c, r);
        if (o == NULL) st = h->last_error();
        else outs[nout++] = o;
    }
    if (st == KV_OK && nout > stack->cap)
        st = h->error(KV_ERR_INVALID_ARG, "%s: sim: %d returns for a stack of %d", h->op_name(op), nout, stack->cap);
    if (st != KV_OK) {
        for (int i = 0; i < nout; i++) h->tensor_release(outs[i]);
        return st;
    }
    if (is_bool && nout == 0) h->stack_return_bool(stack, b);
    else h->stack_return_tensors(stack, outs, nout);
    return KV_OK;
}

kv_status kv_sim_generic(const kv_op *op, kv_keyset ks, kv_stack *stack) {
    (void)ks;
    const kv_host_api *h = kv_sim_host;
    const kv_schema *s = h->op_schema(op);
    sim_call c;
    memset(&c, 0, sizeof c);
    c.type = kv_sim_type;
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack cpu = kv_stack_on(slots, KV_STACK_MAX);
    kv_status st = KV_OK;
    for (int i = 0; i < stack->size && st == KV_OK; i++) {
        kv_ivalue v = stack->slots[i];
        if (i < s->nargs) st = sim_arg(&c, op, &s->args[i], &v);
        if (st == KV_OK) st = h->stack_push(&cpu, v);
    }
    if (st == KV_OK) st = h->call_reference(op, &cpu);
    if (st == KV_OK) {
        /* Writes through a host view count on the SIM storage. */
        for (int i = 0; i < c.nmaps; i++)
            for (int64_t n = h->tensor_version(c.maps[i].host_base) - c.maps[i].version0; n > 0; n--)
                h->tensor_bump_version(c.maps[i].first_sim);
        st = sim_returns(&c, op, &cpu, stack);
    }
    sim_call_free(&c);
    return st;
}
