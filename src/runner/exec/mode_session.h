/* Running a case's call under its modes, and the evidence that each lazy
 * bit and mode actually did its work (the lazy check, check_lazy.c).
 *
 * A session snapshots every counter, enters the case's TLS modes
 * (no-grad guard, autocast, functionalize, a trace recorder; grad needs
 * no TLS, its inputs require grad; vmap is kv_vmap_call itself), and on
 * end leaves them in reverse order and snapshots again. The verdict then
 * compares the two snapshots, per bit and per mode:
 *
 *   lazy bit K   by the op's entry at K: a fallback must have run (its
 *                fallback_calls grew); a fallthrough (views) must have
 *                passed the bit on: an output shares the flagged input's
 *                storage (or, under vmap, the fallback materialized it
 *                when the loop-and-stack fallback stacked the samples); an
 *                op's own kernel at K (clone, contiguous, resolve_*, copy_)
 *                must have materialized the input, put the bit on an
 *                output, or, for an op that writes an argument, left that
 *                argument's own bits as they were (copy_'s XOR rule);
 *   grad         autograd recorded a node;
 *   no_grad      the Autograd kernel never ran and no output requires grad;
 *   autocast     an op on an autocast list ran an Autocast kernel that made
 *                exactly the casts its policy calls for (at least one per
 *                call under vmap, whose fallback calls the op per sample);
 *                any other op shows no Autocast call and no cast (under
 *                vmap: no cast; vmap's own stack may pass autocast);
 *   functionalize the graph holds the op, or for an in-place op its
 *                functional twin and the copy_ back (under vmap: not empty);
 *   trace        the recorder saw the op (the functional twin under
 *                functionalize; under vmap: any op);
 *   vmap         the op's batching rule or the loop-and-stack fallback ran.
 * A missing piece of evidence is a FAIL naming the bit or mode and what
 * did not happen: "lazy=conj@0: the Conjugate fallback never ran". */
#ifndef KV_RUNNER_MODE_SESSION_H
#define KV_RUNNER_MODE_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/autocast.h"
#include "kv/autograd.h"
#include "kv/lazy.h"
#include "kv/trace.h"
#include "runner/check/check.h"

typedef struct kv_mode_counts {
    kv_lazy_counters lazy[3]; /* Conjugate, Negative, ZeroTensor */
    kv_autograd_counters ag;
    kv_autocast_counters ac;
    uint64_t vmap_rule, vmap_fallback;
} kv_mode_counts;

typedef struct kv_mode_session {
    const kv_case *c;
    const kv_op *op;
    kv_mode_counts before, after;
    bool nograd, autocast, functionalize;
    kv_tls_keys nograd_saved;
    kv_trace_recorder *rec;       /* mode=trace; owned */
    bool trace_started;
    /* The graph as text, read at end (the next session's enter clears it). */
    int graph_count;
    bool graph_has_op, graph_has_functional, graph_has_copy;
} kv_mode_session;

/* Snapshots and enters the modes. On failure every mode entered so far is
 * left again. */
kv_status kv_mode_session_begin(kv_mode_session *s, const kv_case *c, const kv_op *op);
/* Leaves the modes (reverse order) and snapshots; safe to call once after
 * a successful begin. */
kv_status kv_mode_session_end(kv_mode_session *s);
void kv_mode_session_free(kv_mode_session *s);

/* What the verdict looks at besides the counters: the inputs as the op got
 * them (with their bits) and its raw outputs (before materialization). */
typedef struct kv_mode_call {
    const kv_case_inputs *in;
    const kv_case_outputs *out;
    kv_keyset in_bits_before[KV_CASE_MAX_INPUTS]; /* lazy bits of each input before the call */
} kv_mode_call;

/* Appends "; "-separated evidence to msg (snprintf style into msg+len)
 * and returns true when every bit and mode left its trace; on false,
 * `why` names the first one that did not. */
bool kv_mode_session_verdict(const kv_mode_session *s, const kv_mode_call *call, char *msg, int cap, char *why,
                             int whycap);

/* The casts the autocast policy of the op makes for these inputs (0 for
 * ops on no list), and the dtype each tensor input is cast to
 * (KV_DTYPE_COUNT where it is not cast). */
int kv_autocast_expected_casts(const kv_case *c, const kv_op *op, kv_dtype autocast_dtype,
                               kv_dtype cast_to[KV_CASE_MAX_INPUTS]);
/* The autocast dtype of the case's modes, KV_DTYPE_COUNT when none. */
kv_dtype kv_case_autocast_dtype(const kv_case *c);

#endif
