/* The fastpath check (DESIGN.md sections 5 and 6): on device=accel, every
 * fast path ON gives exactly what it gives OFF, and the counters show
 * which path ran.
 *
 * Configurations. The reference is "slow": the kill switch set and every
 * special path off, so every call is boxed and dispatched in full. Then,
 * under each gate asked for (kv_check_fastpath_set_gates; default both):
 *   on           everything on (the kill switch clear, every special path
 *                on, the dispatch cache on);
 *   no-cache     everything on but the dispatch cache (typed calls inside
 *                kernels and fallbacks look their op up by name);
 *   no-SPECIAL   everything on but one special path, for the specials that
 *                apply to the case: metadata for the hand-registered view
 *                ops, to_copy for _to_copy, cat for cat, group_norm for
 *                native_group_norm, and all four for a case with a mode
 *                (vmap's batching rules call view ops on accel tensors);
 *   kill         (once, when a special applies) only the kill switch set:
 *                the special paths that are not fast paths still run.
 * Every configuration runs the case from fresh inputs and is compared with
 * "slow", so every ON/OFF pair is compared transitively. Equal means bit
 * for bit: each output's element bytes (NaN payloads and signed zeros
 * included; values an op leaves unspecified, like empty's, are skipped),
 * dtype, device, sizes, strides, storage offset, key set (lazy bits and
 * Autograd included), whether it aliases an input (the same input, at the
 * same offset from it), requires_grad and grad_fn; a bool return; each
 * input's version counter after the call; when an input requires grad,
 * the status of a backward pass from output 0 (with ones) and each
 * input's .grad; and for a call that fails, the same code and message.
 *
 * Counters (kv_accel_counters_of the case's op, forward call only):
 *   - a plain case (no lazy bit, no mode) that must pass: with everything
 *     on, the fast or manual path fired at least once, under each gate:
 *     a fast path that never fires is a failure;
 *   - where a functionality key is live for the call (the key set kv_call
 *     computes on the accel arguments has a functionality key other than
 *     AccelBoxing; fallthrough keys are already gone from it): no fast or
 *     manual call, and (for a case that must pass) at least one slow
 *     call. Under vmap the batched call always goes below the boxing layer
 *     (one slow call at least); the batching rules then call the op on the
 *     physical accel tensors, whose key set is the one that must be empty
 *     for the fast path to fire there;
 *   - "slow" itself never counts a fast or manual call.
 * A case with lazy bits or modes whose key set has nothing live (a view op
 * falls through the lazy keys, autocast falls through `neg`) takes the
 * fast path under the exact gate and not under the seed gate; both are
 * correct, so neither is required.
 *
 * One row per gate, "fastpath:seed" and "fastpath:exact", carrying the
 * "on" run's counts (kv_check_result.fast_calls, ...) from which the
 * report computes each gate's hit rate. The check sets every switch
 * itself and restores the ambient ones afterwards, so KV_NO_REDISPATCH,
 * KV_REDISPATCH_GATE and KV_ACCEL_DISABLE affect the other checks only. */
#include "runner/check/check_fastpath.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boxing/hand_ops.h"
#include "kv/autograd.h"
#include "kv/backend.h"
#include "kv/dispatch.h"
#include "kv/vmap.h"
#include "runner/check/check_util.h"
#include "runner/check/compare.h"
#include "runner/exec/lazy_inputs.h"
#include "runner/exec/mode_session.h"
#include "runner/check/tolerance.h"

/* ---- gate sets ---- */

int kv_fastpath_gates_parse(const char *text, unsigned *out) {
    if (text == NULL) return -1;
    kv_accel_gate g;
    if (strcmp(text, "both") == 0) {
        *out = KV_FASTPATH_GATES_BOTH;
        return 0;
    }
    if (kv_accel_gate_parse(text, &g) != 0) return -1;
    *out = KV_FASTPATH_GATE_BIT(g);
    return 0;
}

const char *kv_fastpath_gates_name(unsigned gates) {
    if (gates == KV_FASTPATH_GATE_BIT(KV_ACCEL_GATE_SEED)) return "seed";
    if (gates == KV_FASTPATH_GATE_BIT(KV_ACCEL_GATE_EXACT)) return "exact";
    return "both";
}

static unsigned g_gates = KV_FASTPATH_GATES_BOTH;
static bool g_kill_all_for_tests;

void kv_check_fastpath_set_gates(unsigned gates) {
    gates &= KV_FASTPATH_GATES_BOTH;
    g_gates = gates != 0 ? gates : KV_FASTPATH_GATES_BOTH;
}

unsigned kv_check_fastpath_gates(void) { return g_gates; }

void kv_check_fastpath_kill_all_for_tests(bool on) { g_kill_all_for_tests = on; }
bool kv_check_fastpath_killed_for_tests(void) { return g_kill_all_for_tests; }

/* ---- configurations ---- */

typedef struct fp_config {
    char name[32];
    bool redispatch;
    bool special[KV_ACCEL_SPECIAL_COUNT];
    bool cache;
    bool gated;                  /* runs once per gate (else once in all) */
} fp_config;

typedef struct fp_ambient {
    kv_accel_gate gate;
    bool redispatch;
    bool special[KV_ACCEL_SPECIAL_COUNT];
    bool cache;
} fp_ambient;

static fp_ambient fp_save(void) {
    fp_ambient a;
    a.gate = kv_accel_gate_get();
    a.redispatch = kv_accel_redispatch_enabled();
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) a.special[i] = kv_accel_special_enabled((kv_accel_special)i);
    a.cache = kv_dispatch_cache_enabled();
    return a;
}

static void fp_restore(const fp_ambient *a) {
    kv_accel_gate_set(a->gate);
    kv_accel_redispatch_set_enabled(a->redispatch);
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) kv_accel_special_set_enabled((kv_accel_special)i, a->special[i]);
    kv_dispatch_cache_set_enabled(a->cache);
}

static void fp_apply(const fp_config *cfg, kv_accel_gate gate) {
    kv_accel_gate_set(gate);
    kv_accel_redispatch_set_enabled(cfg->redispatch && !g_kill_all_for_tests);
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) kv_accel_special_set_enabled((kv_accel_special)i, cfg->special[i]);
    kv_dispatch_cache_set_enabled(cfg->cache);
}

static bool fp_is_metadata_op(const char *name) {
#define KV_FP_HAND_ROW(op_name, is_metadata) \
    if ((is_metadata) && strcmp(name, op_name) == 0) return true;
    KV_ACCEL_HAND_OPS(KV_FP_HAND_ROW)
#undef KV_FP_HAND_ROW
    return false;
}

/* Whether switching `which` off can change anything for this case. */
static bool fp_special_applies(kv_accel_special which, const kv_case *c) {
    if (c->modes != 0) return true;
    switch (which) {
    case KV_ACCEL_SPECIAL_METADATA: return fp_is_metadata_op(c->op);
    case KV_ACCEL_SPECIAL_TO_COPY: return strcmp(c->op, "_to_copy") == 0;
    case KV_ACCEL_SPECIAL_CAT: return strcmp(c->op, "cat") == 0;
    case KV_ACCEL_SPECIAL_GROUP_NORM: return strcmp(c->op, "native_group_norm") == 0;
    case KV_ACCEL_SPECIAL_COUNT: break;
    }
    return false;
}

static fp_config fp_config_all(const char *name, bool on) {
    fp_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.name, sizeof cfg.name, "%s", name);
    cfg.redispatch = on;
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) cfg.special[i] = on;
    cfg.cache = true;
    cfg.gated = on;
    return cfg;
}

#define FP_MAX_CONFIGS (3 + KV_ACCEL_SPECIAL_COUNT)

/* The configurations compared with "slow" (which is not among them);
 * configs[0] is "on". */
static int fp_configs(const kv_case *c, fp_config *configs) {
    int n = 0;
    configs[n++] = fp_config_all("on", true);
    fp_config nc = fp_config_all("no-cache", true);
    nc.cache = false;
    configs[n++] = nc;
    bool any = false;
    for (int i = 0; i < KV_ACCEL_SPECIAL_COUNT; i++) {
        if (!fp_special_applies((kv_accel_special)i, c)) continue;
        any = true;
        char name[32];
        snprintf(name, sizeof name, "no-%s", kv_accel_special_name((kv_accel_special)i));
        fp_config off = fp_config_all(name, true);
        off.special[i] = false;
        configs[n++] = off;
    }
    if (any) {
        fp_config kill = fp_config_all("kill", true);
        kill.redispatch = false;
        kill.gated = false;
        configs[n++] = kill;
    }
    return n;
}

/* ---- what one run leaves behind ---- */

typedef struct fp_snap {
    bool present;
    kv_dtype dtype;
    kv_device device;
    kv_keyset keys;
    int ndim;
    int64_t sizes[KV_MAX_DIMS];
    int64_t strides[KV_MAX_DIMS];
    int64_t offset;
    int alias_of;                /* the input whose storage it shares; -1 */
    int64_t alias_delta;         /* its offset minus that input's */
    bool requires_grad;
    char grad_fn[64];
    bool values;                 /* bytes hold the element values (else unspecified) */
    unsigned char *bytes;        /* element bytes in row-major order */
    size_t nbytes;
} fp_snap;

typedef struct fp_run {
    char config[48];             /* "on, gate seed", for messages */
    char name[32];               /* "on" */
    bool harness;                /* could not even run: an ERROR, not a difference */
    kv_status st;
    char message[512];
    int nout;
    fp_snap out[KV_CASE_MAX_OUTPUTS];
    bool is_bool, b;
    bool has_gen;                /* the op took a Generator: its state after the call */
    kv_generator gen_after;
    int nin;
    bool in_present[KV_CASE_MAX_INPUTS];
    int64_t version[KV_CASE_MAX_INPUTS];
    bool backward;               /* an input required grad: a backward pass ran */
    kv_status bst;
    char bmessage[512];
    fp_snap grad[KV_CASE_MAX_INPUTS];
    kv_accel_counters calls;     /* of the case's op, the forward call only */
    kv_keyset live;              /* functionality keys live for the call */
} fp_run;

static void fp_snap_free(fp_snap *s) {
    free(s->bytes);
    s->bytes = NULL;
}

static void fp_run_free(fp_run *r) {
    for (int i = 0; i < KV_CASE_MAX_OUTPUTS; i++) fp_snap_free(&r->out[i]);
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) fp_snap_free(&r->grad[i]);
}

static bool fp_next_index(int64_t *idx, const int64_t *sizes, int nd) {
    for (int d = nd - 1; d >= 0; d--) {
        if (++idx[d] < sizes[d]) return true;
        idx[d] = 0;
    }
    return false;
}

static bool fp_values_unspecified(const kv_case *c, kv_dtype dt) {
    const kv_tol_entry *e = kv_tol_lookup(c->op, dt, c);
    return e != NULL && (e->uninitialized || e->kind == KV_CMP_META);
}

/* Metadata, aliasing and (when `values`) the element bytes of t. */
static kv_status fp_snap_take(const kv_tensor *t, const kv_case_inputs *in, bool values, fp_snap *s) {
    memset(s, 0, sizeof *s);
    s->alias_of = -1;
    if (t == NULL) return KV_OK;
    s->present = true;
    s->dtype = t->dtype;
    s->device = t->device;
    s->keys = t->keys;
    s->ndim = t->ndim;
    memcpy(s->sizes, t->sizes, sizeof s->sizes);
    memcpy(s->strides, t->strides, sizeof s->strides);
    s->offset = t->offset;
    for (int i = 0; in != NULL && i < in->ntensors && s->alias_of < 0; i++) {
        const kv_tensor *x = in->tensors[i];
        if (x != NULL && x->storage == t->storage) {
            s->alias_of = i;
            s->alias_delta = t->offset - x->offset;
        }
    }
    s->requires_grad = kv_tensor_requires_grad(t);
    const char *fn = kv_tensor_grad_fn_name((kv_tensor *)t);
    snprintf(s->grad_fn, sizeof s->grad_fn, "%s", fn ? fn : "");
    s->values = values;
    const int64_t numel = kv_tensor_numel(t);
    if (!values || numel == 0) return KV_OK;
    kv_tensor *h = kv_backend_readable(t);
    if (h == NULL) return kv_error_prefix(kv_last_error(), "cannot read the tensor back");
    const size_t item = kv_dtype_size(t->dtype);
    s->nbytes = (size_t)numel * item;
    s->bytes = malloc(s->nbytes);
    if (s->bytes == NULL) {
        kv_tensor_release(h);
        return kv_error(KV_ERR_OOM, "fastpath: out of memory copying %zu bytes", s->nbytes);
    }
    int64_t idx[KV_MAX_DIMS] = { 0 };
    size_t at = 0;
    do {
        const void *p = kv_tensor_element(h, idx);
        if (p == NULL) {
            kv_tensor_release(h);
            return kv_error(KV_ERR_INTERNAL, "fastpath: element not addressable after the read-back");
        }
        memcpy(s->bytes + at, p, item);
        at += item;
    } while (fp_next_index(idx, t->sizes, t->ndim));
    kv_tensor_release(h);
    return KV_OK;
}

/* A tensor of ones shaped like t, on accel: backward's grad_output. */
static kv_tensor *fp_ones_like(const kv_tensor *t) {
    kv_tensor *h = kv_tensor_empty(t->sizes, t->ndim, t->dtype, KV_DEVICE_CPU0);
    if (h == NULL) return NULL;
    if (h->storage->nbytes > 0) memset(h->storage->data, 0, h->storage->nbytes);
    if (kv_tensor_numel(h) > 0) {
        int64_t idx[KV_MAX_DIMS] = { 0 };
        do kv_tensor_set_f64(h, idx, 1.0);
        while (fp_next_index(idx, h->sizes, h->ndim));
    }
    const kv_key target = kv_accel_target();
    kv_tensor *d = h;
    if (target != KV_KEY_CPU) {
        d = kv_backend_copy_to_device(h, (kv_device){ (kv_device_type)target, 0 });
        kv_tensor_release(h);
        if (d == NULL) return NULL;
    }
    kv_tensor *a = kv_accel_to(d);
    kv_tensor_release(d);
    return a;
}

/* The key set kv_call computes for these arguments, functionality keys
 * only, AccelBoxing aside: what must make the boxing layer take the slow
 * path. The op's fallthrough keys are already gone from it. */
static kv_keyset fp_live_keys(const kv_op *op, const kv_case_inputs *in) {
    kv_ivalue slots[KV_STACK_MAX];
    kv_stack st = kv_stack_on(slots, KV_STACK_MAX);
    for (int i = 0; i < in->nargs; i++)
        if (kv_stack_push(&st, in->args[i]) != KV_OK) return 0;
    kv_keyset ks;
    if (kv_call_keyset(op, &st, &ks) != KV_OK) {
        kv_error_clear(); /* the call itself reports it */
        return 0;
    }
    return ks & KV_KEYSET_FUNCTIONALITY & ~kv_keyset_of(KV_KEY_ACCEL_BOXING);
}

/* The gradient lands on each input's leaf: the input itself, or under
 * lazy bits the tensor the input is a view chain of (runner/lazy_inputs.h). */
static const kv_tensor *fp_leaf(const kv_case_inputs *in, kv_tensor *const *leaves, int i) {
    return leaves[i] != NULL ? leaves[i] : in->tensors[i];
}

static void fp_backward(const kv_case_inputs *in, kv_tensor *const *leaves, const kv_case_outputs *out,
                        fp_run *run) {
    bool any = false;
    for (int i = 0; i < in->ntensors; i++) {
        const kv_tensor *l = fp_leaf(in, leaves, i);
        any |= l != NULL && kv_tensor_requires_grad(l);
    }
    if (!any || out->n == 0 || !kv_tensor_requires_grad(out->t[0])) return;
    run->backward = true;
    kv_tensor *g = fp_ones_like(out->t[0]);
    run->bst = g ? kv_backward(out->t[0], g) : kv_last_error();
    kv_tensor_release(g);
    if (run->bst != KV_OK) {
        snprintf(run->bmessage, sizeof run->bmessage, "%s", kv_last_error_message());
        return;
    }
    for (int i = 0; i < in->ntensors; i++) {
        const kv_tensor *l = fp_leaf(in, leaves, i);
        if (l == NULL) continue;
        kv_tensor *gr = NULL;
        kv_status st = leaves[i] != NULL ? kv_lazy_leaf_grad(l, &gr) : KV_OK;
        if (leaves[i] == NULL) {
            gr = kv_tensor_grad(l);
            kv_tensor_retain(gr);
        }
        if (st == KV_OK) st = fp_snap_take(gr, NULL, true, &run->grad[i]);
        kv_tensor_release(gr);
        if (st != KV_OK) {
            run->bst = st;
            snprintf(run->bmessage, sizeof run->bmessage, "input %d: .grad: %s", i, kv_last_error_message());
            return;
        }
    }
}

static void fp_run_one(const kv_check_ctx *ctx, const fp_config *cfg, kv_accel_gate gate, fp_run *run) {
    const kv_case *c = ctx->c;
    memset(run, 0, sizeof *run);
    snprintf(run->name, sizeof run->name, "%s", cfg->name);
    if (cfg->gated) snprintf(run->config, sizeof run->config, "%s, gate %s", cfg->name, kv_accel_gate_name(gate));
    else snprintf(run->config, sizeof run->config, "%s", cfg->name);
    fp_apply(cfg, gate);
    kv_case_inputs in;
    kv_tensor *leaves[KV_CASE_MAX_INPUTS] = { NULL };
    const bool vmap = (c->modes & (1u << KV_MODE_VMAP)) != 0;
    kv_status st;
    if (kv_case_has_lazy_or_mode(c)) {
        /* The lazy check's inputs (bits, leaves that require grad, vmap's
         * physical batch), placed on accel by kv_layout_place. */
        const unsigned grads = (1u << KV_MODE_GRAD) | (1u << KV_MODE_NO_GRAD);
        const kv_lazy_build b = { c->device, (c->modes & grads) != 0, vmap ? KV_CASE_VMAP_BATCH : 0 };
        st = kv_lazy_inputs_make(c, ctx->op, &b, &in, leaves);
    } else {
        st = kv_case_inputs_make(c, ctx->op, c->device, false, &in);
    }
    kv_mode_session session;
    if (st == KV_OK && (st = kv_mode_session_begin(&session, c, ctx->op)) != KV_OK) kv_case_inputs_free(&in);
    if (st != KV_OK) {
        run->harness = true;
        run->st = st;
        snprintf(run->message, sizeof run->message, "cannot build the inputs on accel or enter the modes: %s",
                 kv_last_error_message());
        for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(leaves[i]);
        return;
    }
    run->nin = in.ntensors;
    /* Under vmap these are the physical inputs: the key set of the calls
     * the batching rules make on them (the batched call itself always
     * goes below the boxing layer). */
    run->live = fp_live_keys(ctx->op, &in);
    kv_case_outputs out;
    kv_accel_counters_reset();
    st = vmap ? kv_check_vmap_invoke(ctx->op, &in, &out) : kv_case_invoke(ctx->op, &in, 0, &out);
    run->calls = kv_accel_counters_of(kv_op_name(ctx->op));
    run->st = st;
    if (st != KV_OK) snprintf(run->message, sizeof run->message, "%s", kv_last_error_message());
    kv_mode_session_end(&session);
    kv_mode_session_free(&session);
    if (st != KV_OK) {
        kv_case_inputs_free(&in);
        for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(leaves[i]);
        return;
    }
    run->is_bool = out.is_bool;
    run->b = out.b;
    run->has_gen = out.has_gen;
    run->gen_after = out.gen_after;
    run->nout = out.n;
    for (int i = 0; i < out.n && st == KV_OK; i++) {
        const bool values = !fp_values_unspecified(c, out.t[i]->dtype);
        st = fp_snap_take(out.t[i], &in, values, &run->out[i]);
        if (st != KV_OK) snprintf(run->message, sizeof run->message, "output %d: %s", i, kv_last_error_message());
    }
    for (int i = 0; i < in.ntensors; i++) {
        run->in_present[i] = in.tensors[i] != NULL;
        run->version[i] = in.tensors[i] ? kv_tensor_version(in.tensors[i]) : 0;
    }
    if (st == KV_OK) fp_backward(&in, leaves, &out, run);
    else run->harness = true;
    kv_case_outputs_free(&out);
    kv_case_inputs_free(&in);
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) kv_tensor_release(leaves[i]);
}

/* ---- comparing two runs ---- */

static void fp_format_dims(const int64_t *v, int n, char *buf, int cap) { kv_shape_format(v, n, buf, cap); }

/* Describes the first element whose bytes differ. */
static void fp_bytes_diff(const fp_snap *a, const fp_snap *b, char *why, int cap) {
    const size_t item = kv_dtype_size(a->dtype);
    size_t k = 0;
    while (k < a->nbytes && memcmp(a->bytes + k, b->bytes + k, item) == 0) k += item;
    const int64_t flat = item ? (int64_t)(k / item) : 0;
    int64_t idx[KV_MAX_DIMS] = { 0 };
    int64_t rem = flat;
    for (int d = a->ndim - 1; d >= 0; d--) {
        if (a->sizes[d] > 0) {
            idx[d] = rem % a->sizes[d];
            rem /= a->sizes[d];
        }
    }
    char at[KV_MAX_DIMS * 24], ha[40] = "", hb[40] = "";
    kv_shape_format(idx, a->ndim, at, (int)sizeof at);
    /* Little-endian hex of the element, most significant byte first. */
    for (size_t j = 0; j < item && j < 16; j++) {
        snprintf(ha + 2 * j, sizeof ha - 2 * j, "%02x", a->bytes[k + item - 1 - j]);
        snprintf(hb + 2 * j, sizeof hb - 2 * j, "%02x", b->bytes[k + item - 1 - j]);
    }
    snprintf(why, (size_t)cap, "element %s: bytes 0x%s vs 0x%s", at, ha, hb);
}

/* False with `why` set when the two snapshots differ. */
static bool fp_snap_same(const fp_snap *a, const fp_snap *b, char *why, int cap) {
    char x[128], y[128];
    if (a->present != b->present) {
        snprintf(why, (size_t)cap, "%s vs %s", a->present ? "a tensor" : "none", b->present ? "a tensor" : "none");
        return false;
    }
    if (!a->present) return true;
    if (a->dtype != b->dtype) {
        snprintf(why, (size_t)cap, "dtype %s vs %s", kv_dtype_name(a->dtype), kv_dtype_name(b->dtype));
        return false;
    }
    if (!kv_device_equal(a->device, b->device)) {
        snprintf(why, (size_t)cap, "device %s:%d vs %s:%d", kv_device_type_name(a->device.type), a->device.index,
                 kv_device_type_name(b->device.type), b->device.index);
        return false;
    }
    if (a->keys != b->keys) {
        kv_keyset_format(a->keys, x, (int)sizeof x);
        kv_keyset_format(b->keys, y, (int)sizeof y);
        snprintf(why, (size_t)cap, "keys %s vs %s", x, y);
        return false;
    }
    bool same = a->ndim == b->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = a->sizes[d] == b->sizes[d];
    if (!same) {
        fp_format_dims(a->sizes, a->ndim, x, (int)sizeof x);
        fp_format_dims(b->sizes, b->ndim, y, (int)sizeof y);
        snprintf(why, (size_t)cap, "sizes %s vs %s", x, y);
        return false;
    }
    for (int d = 0; same && d < a->ndim; d++) same = a->strides[d] == b->strides[d];
    if (!same) {
        fp_format_dims(a->strides, a->ndim, x, (int)sizeof x);
        fp_format_dims(b->strides, b->ndim, y, (int)sizeof y);
        snprintf(why, (size_t)cap, "strides %s vs %s", x, y);
        return false;
    }
    if (a->alias_of != b->alias_of || (a->alias_of >= 0 && a->alias_delta != b->alias_delta)) {
        if (a->alias_of >= 0) snprintf(x, sizeof x, "aliases input %d at offset %+lld", a->alias_of, (long long)a->alias_delta);
        else snprintf(x, sizeof x, "aliases no input");
        if (b->alias_of >= 0) snprintf(y, sizeof y, "aliases input %d at offset %+lld", b->alias_of, (long long)b->alias_delta);
        else snprintf(y, sizeof y, "aliases no input");
        snprintf(why, (size_t)cap, "%s vs %s", x, y);
        return false;
    }
    if (a->alias_of < 0 && a->offset != b->offset) {
        snprintf(why, (size_t)cap, "storage offset %lld vs %lld", (long long)a->offset, (long long)b->offset);
        return false;
    }
    if (a->requires_grad != b->requires_grad) {
        snprintf(why, (size_t)cap, "requires_grad %d vs %d", a->requires_grad, b->requires_grad);
        return false;
    }
    if (strcmp(a->grad_fn, b->grad_fn) != 0) {
        snprintf(why, (size_t)cap, "grad_fn '%s' vs '%s'", a->grad_fn, b->grad_fn);
        return false;
    }
    if (a->values && b->values && a->nbytes == b->nbytes && a->nbytes > 0 && memcmp(a->bytes, b->bytes, a->nbytes) != 0) {
        fp_bytes_diff(a, b, why, cap);
        return false;
    }
    return true;
}

/* False with `why` set ("output 0: strides [5, 1] vs [1, 4]", ref's value
 * first) when the runs `ref` and `got` differ. */
static bool fp_runs_same(const fp_run *ref, const fp_run *got, char *why, int cap) {
    char w[400];
    if (ref->st != got->st) {
        snprintf(why, (size_t)cap, "status '%s' vs '%s': %s", ref->st == KV_OK ? "ok" : kv_status_name(ref->st),
                 got->st == KV_OK ? "ok" : kv_status_name(got->st), ref->st != KV_OK ? ref->message : got->message);
        return false;
    }
    if (ref->st != KV_OK) {
        if (strcmp(ref->message, got->message) != 0) {
            snprintf(why, (size_t)cap, "the same error code, but the message '%s' vs '%s'", ref->message, got->message);
            return false;
        }
        return true;
    }
    if (ref->is_bool != got->is_bool || ref->b != got->b || ref->nout != got->nout) {
        snprintf(why, (size_t)cap, "returns differ: %d tensor%s%s vs %d tensor%s%s", ref->nout, ref->nout == 1 ? "" : "s",
                 ref->is_bool ? (ref->b ? " and true" : " and false") : "", got->nout, got->nout == 1 ? "" : "s",
                 got->is_bool ? (got->b ? " and true" : " and false") : "");
        return false;
    }
    /* A random op's paths must consume the generator identically: the
     * same values drawn, and the same offset left behind. */
    if (ref->has_gen != got->has_gen ||
        (ref->has_gen && (ref->gen_after.seed != got->gen_after.seed || ref->gen_after.offset != got->gen_after.offset))) {
        snprintf(why, (size_t)cap, "the generator after the call: seed %llu offset %llu vs seed %llu offset %llu",
                 (unsigned long long)ref->gen_after.seed, (unsigned long long)ref->gen_after.offset,
                 (unsigned long long)got->gen_after.seed, (unsigned long long)got->gen_after.offset);
        return false;
    }
    for (int i = 0; i < ref->nout; i++) {
        if (!fp_snap_same(&ref->out[i], &got->out[i], w, (int)sizeof w)) {
            snprintf(why, (size_t)cap, "output %d: %s", i, w);
            return false;
        }
    }
    for (int i = 0; i < ref->nin; i++) {
        if (ref->in_present[i] && ref->version[i] != got->version[i]) {
            snprintf(why, (size_t)cap, "input %d: version counter %lld vs %lld after the call", i,
                     (long long)ref->version[i], (long long)got->version[i]);
            return false;
        }
    }
    if (ref->backward != got->backward) {
        snprintf(why, (size_t)cap, "backward %s vs %s", ref->backward ? "ran" : "did not run",
                 got->backward ? "ran" : "did not run");
        return false;
    }
    if (!ref->backward) return true;
    if (ref->bst != got->bst || (ref->bst != KV_OK && strcmp(ref->bmessage, got->bmessage) != 0)) {
        snprintf(why, (size_t)cap, "backward: '%.180s' vs '%.180s'", ref->bst == KV_OK ? "ok" : ref->bmessage,
                 got->bst == KV_OK ? "ok" : got->bmessage);
        return false;
    }
    for (int i = 0; i < ref->nin; i++) {
        if (!fp_snap_same(&ref->grad[i], &got->grad[i], w, (int)sizeof w)) {
            snprintf(why, (size_t)cap, "input %d: .grad: %s", i, w);
            return false;
        }
    }
    return true;
}

/* ---- the check ---- */

static uint64_t fp_fired(const fp_run *r) { return r->calls.fast + r->calls.manual; }

static void fp_calls_text(const fp_run *r, char *buf, int cap) {
    snprintf(buf, (size_t)cap, "%llu fast, %llu manual, %llu slow", (unsigned long long)r->calls.fast,
             (unsigned long long)r->calls.manual, (unsigned long long)r->calls.slow);
}

/* Whether an ON/OFF difference is the kernel's own nondeterminism: the
 * differing configuration run again, and slow run again, each compared
 * with its first run. true with what differs in why. */
static bool fp_nondeterministic(const kv_check_ctx *ctx, const fp_config *cfg, kv_accel_gate gate,
                                const fp_run *first, const fp_run *slow, char *why, int cap) {
    const fp_run *firsts[2] = { first, slow };
    const fp_config off = fp_config_all("slow", false);
    const fp_config *cfgs[2] = { cfg, &off };
    for (int k = 0; k < 2; k++) {
        fp_run *again = calloc(1, sizeof *again);
        if (again == NULL) return false;
        fp_run_one(ctx, cfgs[k], gate, again);
        char d[1200];
        const bool same = again->harness || fp_runs_same(again, firsts[k], d, (int)sizeof d);
        if (!same) snprintf(why, (size_t)cap, "%s twice: %s", firsts[k]->config, d);
        fp_run_free(again);
        free(again);
        if (!same) return true;
    }
    return false;
}

/* The verdict of one gate's row; runs[0] is "on" under that gate. */
static void fp_judge(const kv_check_ctx *ctx, kv_accel_gate gate, const fp_run *slow, const fp_run *runs,
                     const fp_config *configs, int nruns, kv_check_result *r) {
    const kv_case *c = ctx->c;
    const char *op = kv_op_name(ctx->op);
    const fp_run *on = &runs[0];
    char why[600], calls[96], live[160];
    fp_calls_text(on, calls, (int)sizeof calls);
    kv_keyset_format(on->live, live, (int)sizeof live);
    r->fast_calls = (int64_t)on->calls.fast;
    r->slow_calls = (int64_t)on->calls.slow;
    r->manual_calls = (int64_t)on->calls.manual;

    /* Inputs the target could not be given (a plugin that opted out of
     * the default fallback and lacks clone, as_strided, ...): its decline,
     * UNSUPPORTED like any other (issue 21); anything else is ERROR. */
    if (slow->harness) {
        kv_check_result_set(r, kv_check_status_of_failure(c, slow->st, KV_RESULT_ERROR), "%s: %s", slow->config,
                            slow->message);
        return;
    }
    for (int i = 0; i < nruns; i++) {
        if (runs[i].harness) {
            kv_check_result_set(r, kv_check_status_of_failure(c, runs[i].st, KV_RESULT_ERROR), "%s: %s",
                                runs[i].config, runs[i].message);
            return;
        }
    }
    if (fp_fired(slow) > 0) {
        char sc[96];
        fp_calls_text(slow, sc, (int)sizeof sc);
        kv_check_result_set(r, KV_RESULT_FAIL, "every fast path is off (%s), yet %s took the fast path: %s", slow->config,
                            op, sc);
        return;
    }
    for (int i = 0; i < nruns; i++) {
        if (!fp_runs_same(&runs[i], slow, why, (int)sizeof why)) {
            /* A target kernel that takes the call as one path boxes it and
             * declines it as the other does (the fast path's cat drops
             * legacy empty inputs, boxing/cat.c): the target lacks a
             * kernel for one of the two calls, so ON vs OFF has nothing to
             * compare. Counted as UNSUPPORTED, like any missing kernel. */
            /* Both declined (by different ops: a target without the
             * staged fallback lacks what each path needs): nothing to
             * compare either. */
            if (runs[i].st == KV_ERR_MISSING_KERNEL && slow->st == KV_ERR_MISSING_KERNEL &&
                kv_check_status_of_failure(c, KV_ERR_MISSING_KERNEL, KV_RESULT_FAIL) == KV_RESULT_UNSUPPORTED) {
                kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "%s on accel (target %s): both paths declined: %s; %s",
                                    op, kv_accel_target_name(), slow->message, runs[i].message);
                return;
            }
            if ((runs[i].st == KV_ERR_MISSING_KERNEL) != (slow->st == KV_ERR_MISSING_KERNEL) &&
                kv_check_status_of_failure(c, KV_ERR_MISSING_KERNEL, KV_RESULT_FAIL) == KV_RESULT_UNSUPPORTED) {
                const bool off_declined = slow->st == KV_ERR_MISSING_KERNEL;
                kv_check_result_set(r, KV_RESULT_UNSUPPORTED,
                                    "%s on accel (target %s): its kernel declines the call as the %s path boxes it "
                                    "and takes the %s path's, so ON vs OFF cannot be compared: %s",
                                    op, kv_accel_target_name(), off_declined ? "slow" : "fast",
                                    off_declined ? "fast" : "slow", off_declined ? slow->message : runs[i].message);
                return;
            }
            char nd[1300];
            if (fp_nondeterministic(ctx, &configs[i], gate, &runs[i], slow, nd, (int)sizeof nd)) {
                const kv_key t = kv_accel_target();
                kv_check_result_set(r, KV_RESULT_FAIL,
                                    "%s is nondeterministic on the accel target (%s): two identical calls gave "
                                    "different results (%s), so ON vs OFF cannot be judged",
                                    op, t == KV_KEY_NONE ? "none" : kv_key_name(t), nd);
                return;
            }
            kv_check_result_set(r, KV_RESULT_FAIL, "fast path ON (%s) differs from OFF (%s), ON vs OFF: %s",
                                runs[i].config, slow->config, why);
            return;
        }
    }
    if (c->expect == KV_OK && slow->st != KV_OK) {
        if (slow->st == KV_ERR_MISSING_KERNEL) {
            kv_check_result_set(r, KV_RESULT_UNSUPPORTED, "%s on accel (target %s): %s", op, kv_accel_target_name(),
                                slow->message);
        } else {
            kv_check_result_set(r, KV_RESULT_FAIL, "the case must pass, but %s fails the same way on every path: '%s': %s",
                                op, kv_status_name(slow->st), slow->message);
        }
        return;
    }
    const bool plain = !kv_case_has_lazy_or_mode(c);
    const bool vmap = (c->modes & (1u << KV_MODE_VMAP)) != 0;
    if (vmap) {
        const size_t n = strlen(live);
        snprintf(live + n, sizeof live - n, "%sBatched", n ? "|" : "");
    }
    if (on->live != 0 && fp_fired(on) > 0) {
        kv_check_result_set(r, KV_RESULT_FAIL,
                            "the fast path fired where a functionality key was live (%s): %s calls of %s with "
                            "everything on (%s); the slow path must run",
                            live, calls, op, on->config);
        return;
    }
    if ((on->live != 0 || vmap) && c->expect == KV_OK && on->calls.slow == 0) {
        kv_check_result_set(r, KV_RESULT_FAIL,
                            "a functionality key was live (%s) but the slow path of %s never ran (%s; %s)", live, op,
                            calls, on->config);
        return;
    }
    /* The fast path redispatches to the target's own kernel: a target
     * without one for this op (a plugin that lacks it, served by a
     * fallback) can only take the slow path, which the comparison below
     * still checks. */
    const kv_key target = kv_accel_target();
    const bool target_has_kernel =
        target != KV_KEY_NONE && kv_op_entry_kind(ctx->op, target) == KV_ENTRY_KERNEL;
    if (plain && c->expect == KV_OK && fp_fired(on) == 0 && target_has_kernel) {
        if (on->live != 0)
            kv_check_result_set(r, KV_RESULT_FAIL,
                                "fast path never fired: %s with everything on (%s): the plain case's key set has "
                                "%s live",
                                calls, on->config, live);
        else
            kv_check_result_set(r, KV_RESULT_FAIL, "fast path never fired: %s calls of %s with everything on (%s)", calls,
                                op, on->config);
        return;
    }
    char names[256];
    int n = 0;
    names[0] = '\0';
    for (int i = 0; i < nruns && n < (int)sizeof names; i++)
        n += snprintf(names + n, sizeof names - (size_t)n, "%s%s", i ? ", " : "", runs[i].name);
    const char *path = on->live != 0 || vmap ? "slow path ran" : fp_fired(on) > 0 ? "fast path fired" : "no fast path";
    kv_check_result_set(r, KV_RESULT_PASS, "%s (%s); %d configuration%s equal the slow path bit for bit (%s; gate %s)%s",
                        path, calls, nruns, nruns == 1 ? "" : "s", names, kv_accel_gate_name(gate),
                        slow->backward ? ", gradients included" : "");
    if (on->live != 0 || vmap) kv_check_result_append(r, "; live: %s", live);
}

void kv_check_fastpath_run(const kv_check_ctx *ctx) {
    const kv_case *c = ctx->c;
    kv_check_result r;
    if (c->device.type != KV_DEVICE_ACCEL) {
        kv_check_result_begin(&r, ctx, "fastpath", NULL);
        kv_check_result_set(&r, KV_RESULT_SKIP, "the fastpath check runs on device=accel cases (this one is on %s)",
                            kv_device_type_name(c->device.type));
        kv_check_push(ctx, &r);
        return;
    }
    const unsigned gates = g_gates;
    if (kv_accel_target() == KV_KEY_NONE) {
        kv_check_result_begin(&r, ctx, "fastpath", NULL);
        kv_check_result_set(&r, KV_RESULT_UNSUPPORTED, "the accel device has no target");
        kv_check_push(ctx, &r);
        return;
    }
    const fp_ambient ambient = fp_save();
    fp_config configs[FP_MAX_CONFIGS];
    const int nconfigs = fp_configs(c, configs);

    fp_run *slow = calloc(1, sizeof *slow);
    fp_run *shared = calloc(FP_MAX_CONFIGS, sizeof *shared);  /* ungated runs, made once */
    fp_run *runs = calloc(FP_MAX_CONFIGS, sizeof *runs);
    if (slow == NULL || shared == NULL || runs == NULL) {
        kv_check_result_begin(&r, ctx, "fastpath", NULL);
        kv_check_result_set(&r, KV_RESULT_ERROR, "out of memory");
        kv_check_push(ctx, &r);
        free(slow);
        free(shared);
        free(runs);
        return;
    }
    const fp_config off = fp_config_all("slow", false);
    fp_run_one(ctx, &off, ambient.gate, slow);
    for (int i = 0; i < nconfigs; i++)
        if (!configs[i].gated) fp_run_one(ctx, &configs[i], ambient.gate, &shared[i]);

    for (int g = KV_ACCEL_GATE_SEED; g <= KV_ACCEL_GATE_EXACT; g++) {
        if (!(gates & KV_FASTPATH_GATE_BIT(g))) continue;
        char name[32];
        snprintf(name, sizeof name, "fastpath:%s", kv_accel_gate_name((kv_accel_gate)g));
        kv_check_result_begin(&r, ctx, name, NULL);
        for (int i = 0; i < nconfigs; i++) {
            if (configs[i].gated) fp_run_one(ctx, &configs[i], (kv_accel_gate)g, &runs[i]);
            else runs[i] = shared[i]; /* borrowed: freed once, below */
        }
        fp_judge(ctx, (kv_accel_gate)g, slow, runs, configs, nconfigs, &r);
        for (int i = 0; i < nconfigs; i++) {
            if (configs[i].gated) fp_run_free(&runs[i]);
            memset(&runs[i], 0, sizeof runs[i]);
        }
        kv_check_push(ctx, &r);
    }
    for (int i = 0; i < nconfigs; i++) fp_run_free(&shared[i]);
    fp_run_free(slow);
    free(slow);
    free(shared);
    free(runs);
    fp_restore(&ambient);
    kv_accel_counters_reset();
}
