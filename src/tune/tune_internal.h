/* What the files of src/tune share: variant sets ("slots"), the geometry
 * cache, the force map, the tuner's settings and the log. Private. */
#ifndef KV_TUNE_INTERNAL_H
#define KV_TUNE_INTERNAL_H

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/tune.h"

typedef struct tune_variant {
    char name[KV_TUNE_NAME_MAX];
    kv_kernel_fn fn;
    kv_tune_pred_fn pred;
    uint32_t depends; /* non-tensor arguments its predicate reads (bit = argument index) */
    bool guest;       /* a plugin's, at a key not its own (kv_tune_variant_mark_guest) */
} tune_variant;

/* One cached choice. Fields are separate atomics: a reader may see a
 * writer's half-updated entry for another geometry, which is harmless
 * because a cached choice is used only after its predicate accepted the
 * call (see tune_select). */
typedef struct tune_entry {
    _Atomic uint64_t tag;    /* geometry hash with bit 0 set; 0 = empty */
    _Atomic uint32_t gen;    /* g_tune_gen when stored; older entries are misses */
    _Atomic int32_t choice;  /* variant index */
    _Atomic int64_t calls;   /* calls served since it was stored */
    _Atomic uint64_t tuned_at; /* kv_tune_now() when stored (the time trigger) */
    /* Variant indexes fastest first, 4 bits each, 0xF past the last
     * (0 when the choice was not timed): where a call goes when the
     * cached choice refuses it. */
    _Atomic uint64_t rank;
} tune_entry;

#define TUNE_CACHE_SIZE 64   /* per slot, a power of two */
#define TUNE_CACHE_PROBE 4

typedef struct tune_slot {
    const kv_op *op;
    kv_key key;
    _Atomic int n;                          /* published after v[n-1] is written */
    tune_variant v[KV_TUNE_MAX_VARIANTS];
    /* Serializes tuning of this slot, so two threads do not time each
     * other; recursive because a variant may call its own op. */
    pthread_mutex_t lock;
    tune_entry cache[TUNE_CACHE_SIZE];
    /* The force map resolved for this slot: the variant index, -1 when
     * the op is not forced or this backend lacks the forced name; valid
     * while force_gen equals g_tune_force_gen. */
    _Atomic int32_t forced;
    _Atomic uint32_t force_gen;
    _Atomic uint64_t calls, tunings, hits; /* calls: the ones that missed the cache */
    /* The non-tensor arguments in the geometry: the union of what the
     * variants declare (kv_tune_register_variant_args). */
    _Atomic uint32_t geo_mask;
    /* The op's schema, for the geometry hash (kv_tune_geometry_plan):
     * bit i when argument i is a tensor, and the schema's argument count
     * (-1: more than 32, the hash walks the schema instead). Set before
     * the slot is published, never changed. */
    uint32_t plan_tensors;
    int plan_nargs;
    /* Per-op settings (kv_tune_op_config_set), NULL: the global ones. */
    _Atomic(const kv_tune_config *) cfg;
    struct tune_slot *next;                 /* every slot, for listing */
} tune_slot;

/* ---- registry.c ---- */
/* The slot of (op, key); NULL when it has none. Lock-free. */
tune_slot *kv_tune_slot_find(const kv_op *op, kv_key key);
/* The first slot of the list of all slots (newest first). */
tune_slot *kv_tune_slot_first(void);
/* The union of geo_mask over every backend's slot of op. */
uint32_t kv_tune_op_geo_mask(const kv_op *op);
/* ---- geometry.c ---- */
/* The geometry hash with the non-tensor arguments of `mask`. */
uint64_t kv_tune_geometry_hash_mask(const kv_op *op, const kv_stack *stack, uint32_t mask);
/* The tensor arguments (bit i) and argument count of op's schema, what a
 * slot keeps to hash without walking the schema; *nargs -1 when the
 * schema has more than 32 arguments. */
void kv_tune_geometry_plan(const kv_op *op, uint32_t *tensor_args, int *nargs);
/* kv_tune_geometry_hash_mask(s->op, stack, s->geo_mask), from the slot's plan. */
uint64_t kv_tune_slot_geometry_hash(const tune_slot *s, const kv_stack *stack);

/* ---- dispatch.c ---- */
/* The kernel the registry installs at every key with a variant set. */
kv_status kv_tune_dispatch_kernel(const kv_op *op, kv_keyset ks, kv_stack *stack);

/* ---- select.c ---- */
/* The variant index to run for this call (see tune.h); -1 with the
 * thread's error set when there is none. `allow_tune` false never times
 * (ops called from inside a variant being timed). *only_choice_checked
 * says whether the chosen variant's predicate was the only one that ran
 * (a cache hit), so what it stashed is about this call and this variant. */
int kv_tune_select(tune_slot *s, const kv_stack *stack, bool allow_tune, bool *only_choice_checked);
/* Bumped to invalidate every cached choice (and the force resolution). */
extern _Atomic uint32_t g_tune_gen;
extern _Atomic uint32_t g_tune_force_gen;

/* ---- tuner.c ---- */
typedef struct tune_timing {
    bool ran;             /* compatible and timed */
    bool failed;          /* a run returned an error */
    uint64_t median_ns;
} tune_timing;
/* Times every variant whose compat[i] is true on a copy of the call;
 * returns the winner (-1 when every one failed). */
int kv_tune_measure(tune_slot *s, const kv_stack *stack, const bool *compat, tune_timing *timings, bool first);
uint64_t kv_tune_now(void);
/* How deep this thread is in kv_tune_measure; whether it is inside one
 * (nested ops are not tuned), inline since every dispatch asks. */
extern _Thread_local int kv_tune_t_measure_depth;
static inline bool kv_tune_in_measure(void) { return kv_tune_t_measure_depth > 0; }
kv_tune_config kv_tune_config_snapshot(void);
/* The settings a slot runs with (its op's, else the global ones), without
 * a lock: every cached call reads them. Valid for the process's life. */
const kv_tune_config *kv_tune_slot_config(const tune_slot *s);
/* The per-op settings of op, NULL when it has none. */
const kv_tune_config *kv_tune_op_config_lookup(const kv_op *op);

/* ---- force.c ---- */
/* The forced variant of slot s (n variants): its index, -1 when the op is
 * not forced on this backend, TUNE_FORCE_ERROR when the entry names a
 * variant the op has on no backend (kv_tune_force_error says so). */
#define TUNE_FORCE_ERROR (-2)
int kv_tune_force_resolve(const tune_slot *s, int n);
kv_status kv_tune_force_error(const kv_op *op);
/* The forced variant name of op, NULL when none (lock-free). */
const char *kv_tune_force_lookup(const kv_op *op);
/* Parses and checks a force map (the KV_PERFDISPATCH_FORCE grammar, "?"
 * not included) without installing it; what kv_tune_force_set does first.
 * Nothing is allocated, so tests/fuzz/fuzz_env.c can call it at will
 * (kv_tune_force_set keeps every map it replaces, since readers may hold
 * one). */
kv_status kv_tune_force_parse(const char *spec);
/* Loads the environment once; KV_OK, or the stored error re-raised on
 * this thread. */
kv_status kv_tune_env_ready(void);
/* Set (release) once the environment loaded without error and, for "?",
 * the list was printed: from then on kv_tune_env_ready has nothing to do,
 * and a dispatch reads this flag (acquire) instead of calling it. */
extern _Atomic bool g_tune_env_ok;
/* Reads KV_PERFDISPATCH_RETUNE, _WARMUP, _REPS, _TUNE into the config
 * (tuner.c); KV_OK or an error naming the variable. */
kv_status kv_tune_config_from_env(void);

/* ---- log.c ---- */
typedef enum tune_how { TUNE_HOW_FORCED, TUNE_HOW_ONLY, TUNE_HOW_TUNED, TUNE_HOW_UNTUNED } tune_how;
void kv_tune_log_choice(const tune_slot *s, const kv_stack *stack, int choice, tune_how how, int ncompat,
                        const tune_timing *timings);

/* ---- stash.c ---- */
typedef struct tune_stash {
    const kv_op *op;
    const kv_stack *stack;
    const void *kind; /* what filled it; NULL while empty */
    alignas(16) unsigned char data[KV_TUNE_STASH_BYTES];
} tune_stash;
/* This thread's stash; only stash.c and the two below touch it. */
extern _Thread_local tune_stash kv_tune_t_stash;

/* Arms this thread's stash for the call (op, stack), dropping any fill.
 * Inline: every dispatch through a variant set arms and disarms it. */
static inline void kv_tune_stash_arm(const kv_op *op, const kv_stack *stack) {
    kv_tune_t_stash.op = op;
    kv_tune_t_stash.stack = stack;
    kv_tune_t_stash.kind = NULL;
}

static inline void kv_tune_stash_disarm(void) { kv_tune_stash_arm(NULL, NULL); }

/* ---- one call as a cache hit makes it (dispatch.c) ---- */
/* Variant i of s on the stack the way a tuner cache hit runs it: the
 * stash armed for this call, the predicate, then (when it accepts) the
 * kernel, the stash disarmed. Returns whether the predicate accepted;
 * *st is the kernel's status (KV_OK when it did not run). What the tuner
 * times and what kv_tune_call_variant (kvrun's perf mode) runs, so both
 * measure the call a dispatch pays for. */
bool kv_tune_run_as_hit(const tune_slot *s, int i, kv_keyset ks, kv_stack *stack, kv_status *st);

/* ---- pin (dispatch.c) ---- */
/* This thread's pin for (op, key): a variant index, or -1. */
int kv_tune_pinned(const kv_op *op, kv_key key);

#endif
