/* Modes around one call and the evidence that they ran
 * (runner/mode_session.h). */
#include "runner/exec/mode_session.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kv/functionalize.h"
#include "kv/vmap.h"

static const kv_key k_lazy_keys[3] = { KV_KEY_CONJUGATE, KV_KEY_NEGATIVE, KV_KEY_ZERO_TENSOR };
static const unsigned k_case_bits[3] = { KV_CASE_LAZY_CONJ, KV_CASE_LAZY_NEG, KV_CASE_LAZY_ZERO };

static bool has_mode(const kv_case *c, kv_case_mode m) { return (c->modes >> m) & 1u; }

kv_dtype kv_case_autocast_dtype(const kv_case *c) {
    if (has_mode(c, KV_MODE_AUTOCAST_F16)) return KV_F16;
    if (has_mode(c, KV_MODE_AUTOCAST_BF16)) return KV_BF16;
    return KV_DTYPE_COUNT;
}

int kv_autocast_expected_casts(const kv_case *c, const kv_op *op, kv_dtype autocast_dtype,
                               kv_dtype cast_to[KV_CASE_MAX_INPUTS]) {
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++) cast_to[i] = KV_DTYPE_COUNT;
    const kv_autocast_policy p = kv_autocast_policy_of(kv_op_name(op));
    kv_dtype target = KV_DTYPE_COUNT;
    switch (p) {
    case KV_AUTOCAST_NONE: return 0;
    case KV_AUTOCAST_LOWER: target = autocast_dtype; break;
    case KV_AUTOCAST_FP32: target = KV_F32; break;
    case KV_AUTOCAST_PROMOTE:
        for (int i = 0; i < c->ninputs; i++) {
            if (c->absent[i] || !kv_dtype_is_floating(c->dtypes[i])) continue;
            target = target == KV_DTYPE_COUNT ? c->dtypes[i] : kv_promote_types(target, c->dtypes[i]);
        }
        break;
    }
    if (target == KV_DTYPE_COUNT) return 0;
    int n = 0;
    for (int i = 0; i < c->ninputs; i++) {
        const kv_dtype d = c->dtypes[i];
        if (c->absent[i] || !kv_dtype_is_floating(d) || d == target) continue;
        if (p == KV_AUTOCAST_FP32 && d != KV_F16 && d != KV_BF16) continue;
        cast_to[i] = target;
        n++;
    }
    return n;
}

/* ---- counters ---- */

static void counts_take(const kv_mode_session *s, kv_mode_counts *k) {
    for (int i = 0; i < 3; i++) k->lazy[i] = kv_lazy_counters_get(k_lazy_keys[i]);
    k->ag = kv_autograd_counters_get();
    k->ac = kv_autocast_counters_get();
    k->vmap_rule = kv_vmap_rule_calls(kv_op_name(s->op));
    k->vmap_fallback = kv_vmap_fallback_calls(kv_op_name(s->op));
}

/* ---- entering and leaving ---- */

static void session_leave(kv_mode_session *s) {
    if (s->trace_started) {
        (void)kv_trace_recorder_stop(s->rec);
        s->trace_started = false;
    }
    if (s->functionalize) {
        (void)kv_functionalize_exit();
        s->functionalize = false;
    }
    if (s->autocast) {
        (void)kv_autocast_exit();
        s->autocast = false;
    }
    if (s->nograd) {
        kv_grad_mode_pop(s->nograd_saved);
        s->nograd = false;
    }
}

kv_status kv_mode_session_begin(kv_mode_session *s, const kv_case *c, const kv_op *op) {
    memset(s, 0, sizeof *s);
    s->c = c;
    s->op = op;
    kv_status st = KV_OK;
    if (has_mode(c, KV_MODE_TRACE) && (s->rec = kv_trace_recorder_new()) == NULL) return kv_last_error();
    counts_take(s, &s->before);
    if (has_mode(c, KV_MODE_NO_GRAD)) {
        s->nograd_saved = kv_no_grad_push();
        s->nograd = true;
    }
    const kv_dtype ac = kv_case_autocast_dtype(c);
    if (ac != KV_DTYPE_COUNT) {
        if ((st = kv_autocast_enter(ac)) == KV_OK) s->autocast = true;
    }
    if (st == KV_OK && has_mode(c, KV_MODE_FUNCTIONALIZE)) {
        if ((st = kv_functionalize_enter()) == KV_OK) s->functionalize = true;
    }
    /* Innermost, so ops the session itself runs are never traced. */
    if (st == KV_OK && s->rec != NULL) {
        if ((st = kv_trace_recorder_start(s->rec)) == KV_OK) s->trace_started = true;
    }
    if (st != KV_OK) {
        session_leave(s);
        kv_trace_recorder_free(s->rec);
        s->rec = NULL;
    }
    return st;
}

static void graph_read(kv_mode_session *s) {
    const char *name = kv_op_name(s->op);
    const char *functional = kv_functionalize_functional_op(name);
    s->graph_count = kv_functionalize_graph_count();
    for (int i = 0; i < s->graph_count; i++) {
        const char *g = kv_functionalize_graph_op(i);
        if (g == NULL) continue;
        if (strcmp(g, name) == 0) s->graph_has_op = true;
        if (functional && strcmp(g, functional) == 0) s->graph_has_functional = true;
        if (strcmp(g, "copy_") == 0) s->graph_has_copy = true;
    }
}

kv_status kv_mode_session_end(kv_mode_session *s) {
    const bool functionalized = s->functionalize;
    session_leave(s);
    counts_take(s, &s->after);
    if (functionalized) graph_read(s);
    return KV_OK;
}

void kv_mode_session_free(kv_mode_session *s) {
    session_leave(s);
    kv_trace_recorder_free(s->rec);
    s->rec = NULL;
}

/* ---- the verdict ---- */

typedef struct verdict {
    char *msg;
    int cap, n;
    char *why;
    int whycap;
    bool ok;
} verdict;

static void say(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(verdict *v, const char *fmt, ...) {
    if (v->n >= v->cap) return;
    if (v->n > 0) v->n += snprintf(v->msg + v->n, (size_t)(v->cap - v->n), "; ");
    if (v->n >= v->cap) return;
    va_list ap;
    va_start(ap, fmt);
    const int w = vsnprintf(v->msg + v->n, (size_t)(v->cap - v->n), fmt, ap);
    va_end(ap);
    if (w > 0) v->n += w;
}

static void fail(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(verdict *v, const char *fmt, ...) {
    if (!v->ok) return; /* the first failure names the problem */
    v->ok = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, (size_t)v->whycap, fmt, ap);
    va_end(ap);
}

/* "conj@0+conj@2": the case's inputs with one bit. */
static void bit_inputs(const kv_case *c, unsigned bit, char *buf, int cap) {
    int n = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->ninputs && n < cap; i++)
        if (c->lazy[i] & bit) n += snprintf(buf + n, (size_t)(cap - n), "%s%s@%d", n ? "+" : "", kv_case_lazy_name(bit), i);
}

static bool output_shares_storage(const kv_mode_call *call, const kv_case *c, unsigned bit) {
    for (int i = 0; i < c->ninputs; i++) {
        const kv_tensor *t = call->in->tensors[i];
        if (!(c->lazy[i] & bit) || t == NULL) continue;
        for (int k = 0; k < call->out->n; k++)
            if (call->out->t[k] && call->out->t[k]->storage == t->storage) return true;
    }
    return false;
}

static bool output_has_key(const kv_mode_call *call, kv_key key) {
    for (int k = 0; k < call->out->n; k++)
        if (call->out->t[k] && kv_keyset_has(call->out->t[k]->keys, key)) return true;
    return false;
}

/* copy_'s XOR rule: every written argument keeps the bits it had. */
static bool written_kept_bits(const kv_mode_call *call, const kv_case *c, const kv_schema *s, bool *any) {
    *any = false;
    for (int i = 0; i < c->ninputs; i++) {
        const int a = c->input_arg[i];
        const kv_tensor *t = call->in->tensors[i];
        if (a < 0 || t == NULL || !s->args[a].alias.is_write) continue;
        *any = true;
        if ((t->keys & KV_KEYSET_LAZY) != call->in_bits_before[i]) return false;
    }
    return *any;
}

static void verdict_lazy(verdict *v, const kv_mode_session *s, const kv_mode_call *call) {
    const kv_case *c = s->c;
    const kv_schema *sc = kv_op_schema(s->op);
    const bool vmap = has_mode(c, KV_MODE_VMAP);
    for (int b = 0; b < 3; b++) {
        bool used = false;
        for (int i = 0; i < c->ninputs; i++) used |= (c->lazy[i] & k_case_bits[b]) != 0;
        if (!used) continue;
        const kv_key key = k_lazy_keys[b];
        const char *kn = kv_key_name(key);
        char which[96];
        bit_inputs(c, k_case_bits[b], which, sizeof which);
        const int64_t calls = s->after.lazy[b].fallback_calls - s->before.lazy[b].fallback_calls;
        const int64_t mats = s->after.lazy[b].materializations - s->before.lazy[b].materializations;
        const int64_t backs = s->after.lazy[b].copy_backs - s->before.lazy[b].copy_backs;
        switch (kv_op_entry_kind(s->op, key)) {
        case KV_ENTRY_FALLBACK:
            if (calls > 0)
                say(v, "%s fallback ran %" PRId64 "x (%" PRId64 " materialization%s%s)", kn, calls, mats,
                    mats == 1 ? "" : "s", backs ? ", copied back" : "");
            else
                fail(v, "lazy=%s: the %s fallback never ran", which, kn);
            break;
        case KV_ENTRY_FALLTHROUGH:
            if (output_shares_storage(call, c, k_case_bits[b]) && calls == 0)
                say(v, "%s is a fallthrough: the view kept the input's storage and bit", kn);
            else if (vmap && calls > 0)
                say(v, "%s is a fallthrough; vmap's fallback stacked the samples through the %s fallback (%" PRId64
                       "x)", kn, kn, calls);
            else
                fail(v,
                     "lazy=%s: %s is a fallthrough at %s, but no output shares the flagged input's storage: the "
                     "bit was not passed on (fallback calls %" PRId64 ", materializations %" PRId64 ")",
                     which, kv_op_name(s->op), kn, calls, mats);
            break;
        case KV_ENTRY_KERNEL: {
            bool writes = false;
            const bool kept = written_kept_bits(call, c, sc, &writes);
            if (mats > 0)
                say(v, "the op's %s kernel materialized %" PRId64 " input%s", kn, mats, mats == 1 ? "" : "s");
            else if (output_has_key(call, key))
                say(v, "the op's %s kernel passed the bit on to the output", kn);
            else if (writes && kept)
                say(v, "the op's %s kernel wrote through the bits (the written argument kept its own bits)", kn);
            else
                fail(v,
                     "lazy=%s: the %s fallback never ran, and the op's own %s kernel neither materialized the input "
                     "nor passed the bit on",
                     which, kn, kn);
            break;
        }
        case KV_ENTRY_MISSING: fail(v, "lazy=%s: %s has no entry at %s", which, kv_op_name(s->op), kn); break;
        }
    }
}

static bool is_input(const kv_mode_call *call, const kv_tensor *t) {
    for (int i = 0; i < KV_CASE_MAX_INPUTS; i++)
        if (t != NULL && call->in->tensors[i] == t) return true;
    return false;
}

static void verdict_autograd(verdict *v, const kv_mode_session *s, const kv_mode_call *call) {
    const kv_case *c = s->c;
    const int64_t rec = s->after.ag.kernel_recorded - s->before.ag.kernel_recorded;
    const int64_t ran = s->after.ag.kernel_calls - s->before.ag.kernel_calls;
    const int64_t nodes = s->after.ag.nodes_created - s->before.ag.nodes_created;
    bool returned_input = false;
    for (int k = 0; k < call->out->n; k++) returned_input |= is_input(call, call->out->t[k]);
    if (has_mode(c, KV_MODE_GRAD)) {
        if (rec > 0)
            say(v, "autograd recorded %" PRId64 " node%s", nodes, nodes == 1 ? "" : "s");
        else if (ran > 0 && returned_input && !kv_schema_is_inplace(kv_op_schema(s->op)))
            say(v, "the Autograd kernel ran; the op returned its input, which needs no node");
        else
            fail(v, "mode=grad: autograd recorded no node (the Autograd kernel ran %" PRId64 "x)", ran);
    }
    if (has_mode(c, KV_MODE_NO_GRAD)) {
        /* An in-place op returns its self, which required grad before. */
        bool rg = false;
        for (int k = 0; k < call->out->n; k++)
            rg |= call->out->t[k] && !is_input(call, call->out->t[k]) && kv_tensor_requires_grad(call->out->t[k]);
        if (ran == 0 && nodes == 0 && !rg)
            say(v, "no-grad: the Autograd kernel never ran");
        else
            fail(v,
                 "mode=no_grad: the Autograd kernel ran %" PRId64 "x and recorded %" PRId64
                 " node%s under the no-grad guard%s",
                 ran, nodes, nodes == 1 ? "" : "s", rg ? "; an output requires grad" : "");
    }
}

static void verdict_autocast(verdict *v, const kv_mode_session *s) {
    const kv_case *c = s->c;
    const kv_dtype ad = kv_case_autocast_dtype(c);
    if (ad == KV_DTYPE_COUNT) return;
    const char *mode = has_mode(c, KV_MODE_AUTOCAST_F16) ? "autocast_f16" : "autocast_bf16";
    kv_dtype to[KV_CASE_MAX_INPUTS];
    const int want = kv_autocast_expected_casts(c, s->op, ad, to);
    const kv_autocast_policy p = kv_autocast_policy_of(kv_op_name(s->op));
    const int64_t calls = s->after.ac.calls - s->before.ac.calls;
    const int64_t casts = s->after.ac.casts - s->before.ac.casts;
    if (p == KV_AUTOCAST_NONE) {
        if (calls == 0 && casts == 0)
            say(v, "autocast left the op alone (on no list)");
        else if (casts == 0 && has_mode(c, KV_MODE_VMAP))
            /* vmap's rule or loop-and-stack fallback calls ops of its own
             * (stack is on the promote list): they may pass autocast, but
             * must cast nothing, the samples having one dtype. */
            say(v, "autocast cast nothing (on no list; vmap's own calls passed autocast %" PRId64 "x)", calls);
        else
            fail(v, "mode=%s: %s is on no autocast list, yet autocast ran %" PRId64 "x and cast %" PRId64 " input%s",
                 mode, kv_op_name(s->op), calls, casts, casts == 1 ? "" : "s");
        return;
    }
    const bool vmap = has_mode(c, KV_MODE_VMAP);
    const bool right = calls > 0 && (vmap ? (casts > 0) == (want > 0) && casts >= want : casts == want);
    if (right)
        say(v, "autocast (%s list) ran %" PRId64 "x and cast %" PRId64 " input%s", kv_autocast_policy_name(p), calls,
            casts, casts == 1 ? "" : "s");
    else
        fail(v, "mode=%s: %s is on the %s list: expected %d cast%s%s, autocast ran %" PRId64 "x and cast %" PRId64,
             mode, kv_op_name(s->op), kv_autocast_policy_name(p), want, want == 1 ? "" : "s",
             vmap ? " per call" : "", calls, casts);
}

static void verdict_functionalize(verdict *v, const kv_mode_session *s) {
    if (!has_mode(s->c, KV_MODE_FUNCTIONALIZE)) return;
    const char *name = kv_op_name(s->op);
    const char *functional = kv_functionalize_functional_op(name);
    if (s->graph_count == 0) {
        fail(v, "mode=functionalize: the functional graph is empty: %s never reached Functionalize", name);
    } else if (functional) {
        if (s->graph_has_functional && s->graph_has_copy)
            say(v, "functionalize ran %s as %s + copy_ (%d node%s)", name, functional, s->graph_count,
                s->graph_count == 1 ? "" : "s");
        else if (has_mode(s->c, KV_MODE_VMAP))
            say(v, "functionalize recorded %d node%s under vmap", s->graph_count, s->graph_count == 1 ? "" : "s");
        else
            fail(v, "mode=functionalize: %s mutates an argument, but the graph (%d nodes) has %s%s", name, s->graph_count,
                 s->graph_has_functional ? "no copy_ back" : "no ", s->graph_has_functional ? "" : functional);
    } else if (s->graph_has_op) {
        say(v, "functionalize recorded %s (%d node%s)", name, s->graph_count, s->graph_count == 1 ? "" : "s");
    } else if (has_mode(s->c, KV_MODE_VMAP)) {
        say(v, "functionalize recorded %d node%s under vmap", s->graph_count, s->graph_count == 1 ? "" : "s");
    } else {
        fail(v, "mode=functionalize: the graph (%d nodes) has no %s node", s->graph_count, name);
    }
}

static void verdict_trace(verdict *v, const kv_mode_session *s) {
    if (!has_mode(s->c, KV_MODE_TRACE) || s->rec == NULL) return;
    const char *name = kv_op_name(s->op);
    const char *functional = kv_functionalize_functional_op(name);
    const char *want = has_mode(s->c, KV_MODE_FUNCTIONALIZE) && functional ? functional : name;
    const int seen = kv_trace_recorder_count_op(s->rec, want);
    const int total = kv_trace_recorder_count(s->rec);
    if (seen > 0) {
        say(v, "trace saw %s %dx (%d op%s in all)", want, seen, total, total == 1 ? "" : "s");
    } else if (has_mode(s->c, KV_MODE_VMAP) && total > 0) {
        say(v, "trace saw %d op%s under vmap", total, total == 1 ? "" : "s");
    } else {
        char ops[256];
        kv_trace_recorder_format(s->rec, ops, sizeof ops);
        fail(v, "mode=trace: the recorder never saw %s (it saw %d op%s%s%s)", want, total, total == 1 ? "" : "s",
             total ? ": " : "", ops);
    }
}

static void verdict_vmap(verdict *v, const kv_mode_session *s) {
    if (!has_mode(s->c, KV_MODE_VMAP)) return;
    const char *name = kv_op_name(s->op);
    const uint64_t rule = s->after.vmap_rule - s->before.vmap_rule;
    const uint64_t fb = s->after.vmap_fallback - s->before.vmap_fallback;
    const bool has_rule = kv_vmap_has_rule(name);
    if (rule > 0)
        say(v, "vmap: the batching rule ran %" PRIu64 "x", rule);
    else if (fb > 0)
        say(v, "vmap: the loop-and-stack fallback ran %" PRIu64 "x%s", fb,
            has_rule ? " (the rule handed the call on)" : "");
    else
        fail(v, "mode=vmap: neither %s's batching rule nor the fallback ran", name);
}

bool kv_mode_session_verdict(const kv_mode_session *s, const kv_mode_call *call, char *msg, int cap, char *why,
                             int whycap) {
    verdict v = { msg, cap, (int)strlen(msg), why, whycap, true };
    if (whycap > 0) why[0] = '\0';
    verdict_lazy(&v, s, call);
    verdict_autograd(&v, s, call);
    verdict_autocast(&v, s);
    verdict_functionalize(&v, s);
    verdict_trace(&v, s);
    verdict_vmap(&v, s);
    return v.ok;
}
