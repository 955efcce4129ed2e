/* perf_dispatch: several named kernel variants per (op, backend)
 * (DESIGN.md section 7).
 *
 * A backend key's kernel for an op may be a set of VARIANTS, each a boxed
 * kernel with a name and an optional compatibility predicate ("needs
 * contiguous f32", "needs AVX2"). Registering the first variant of an
 * (op, backend) installs one dispatching kernel at that key; on every call
 * it picks a variant for the call's GEOMETRY:
 *   - the forced variant, when KV_PERFDISPATCH_FORCE names the op (an
 *     incompatible forced variant is an error for that call);
 *   - else the only compatible variant, used at once;
 *   - else the tuner's choice: each compatible variant runs `warmup`
 *     untimed times (`rewarmup` when re-tuning), then `reps` samples in
 *     interleaved rounds, each an untimed lead-in run and a timed one (a
 *     device sync before and after), a run being the call a cache hit
 *     makes (predicate, then kernel); the lowest median wins (ties: the
 *     earlier registered), a close call after `reps` more rounds
 *     (src/tune/tuner.c, README "Kernel variants"). The choice is
 *     cached per geometry and re-tuned after `retune_after` calls or
 *     `retune_ms` milliseconds since its last tuning (0 = never; the time
 *     is looked at every 64th call).
 * The geometry of a call is the dtype, sizes, strides and lazy bits of
 * every tensor argument (lists included), plus the values of only those
 * non-tensor arguments some variant declared (kv_tune_register_variant_args):
 * add with alpha 1..100 is one geometry. A cached choice is used only
 * while its predicate still accepts the call (aliasing and undeclared
 * values are not part of the geometry); when it refuses, the call runs the
 * fastest compatible variant of that geometry's timings, without tuning.
 *
 * While a variant runs for timing, mutable (a!) arguments are replaced by
 * copies with the same geometry, so tuning never changes a caller's data,
 * and ops called from inside a variant are not tuned (they use the cached
 * choice, or the last-registered compatible variant).
 *
 * Environment, read once (the first dispatch through a variant set, or
 * kv_tune_env_load):
 *   KV_PERFDISPATCH_FORCE=op:variant[,op:variant...]  pins choices;
 *       whitespace around names is ignored, empty entries are skipped; an
 *       entry without exactly one ':' or an op named twice makes every
 *       dispatch through a variant set fail, naming it. Each entry is
 *       judged when its op first dispatches: a variant the op has on no
 *       backend fails that op's calls (naming the entry); an op that does
 *       not exist fails nothing (kvrun reports it after loading
 *       everything, kv_tune_force_check). Ops and variants registered
 *       after the variable was read can be forced. "?" means: list every
 *       op and its variants (kvrun lists and exits 0; a library dispatch
 *       lists once and returns, unforced).
 *   KV_PERFDISPATCH_LOG=1      logs each choice (stderr by default);
 *   settings, each a comma list of "N" (every op) and "op:N" (one op):
 *   KV_PERFDISPATCH_RETUNE=N     re-tune after N calls (default 10000, 0 never);
 *   KV_PERFDISPATCH_RETUNE_MS=N  re-tune N ms after the last tuning (default 60000, 0 never);
 *   KV_PERFDISPATCH_WARMUP=N     untimed runs, first evaluation (default 2);
 *   KV_PERFDISPATCH_REWARMUP=N   untimed runs, re-evaluation (default 1);
 *   KV_PERFDISPATCH_REPS=N       timed runs (default 5, 1..101);
 *   KV_PERFDISPATCH_SAMPLE_NS=N  shortest timed sample, repeating short calls (default 2000, 0 = one run);
 *   KV_PERFDISPATCH_TUNE=0       no timing: the last-registered compatible
 *                                variant wins.
 * Registration is for start-up (and single-threaded tests); dispatch,
 * tuning and the queries below are thread-safe. */
#ifndef KV_TUNE_H
#define KV_TUNE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kv/dispatch.h"
#include "kv/keys.h"
#include "kv/stack.h"
#include "kv/status.h"

#define KV_TUNE_MAX_VARIANTS 16
#define KV_TUNE_NAME_MAX 32

/* Whether a variant can compute this call (argument values are those of
 * the boxed stack, borrowed). NULL means "always". Must not fail, allocate
 * or set the thread's error. */
typedef bool (*kv_tune_pred_fn)(const kv_op *op, const kv_stack *stack);

/* ---- registration ---- */
/* Adds variant `name` of (op_name, backend). The first variant of a pair
 * installs the dispatching kernel at `backend` (whatever kernel was there
 * before is NOT kept: register it as a variant, e.g. "ref", if it should
 * stay selectable). Names are [A-Za-z0-9_]+ of at most KV_TUNE_NAME_MAX-1
 * characters, unique per pair. Errors: unknown op (KV_ERR_UNKNOWN_OP), a
 * non-backend key, fn NULL, a bad or duplicate name, more than
 * KV_TUNE_MAX_VARIANTS (KV_ERR_INVALID_ARG). */
kv_status kv_tune_register_variant(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                   kv_tune_pred_fn pred);
/* The same, declaring which non-tensor arguments the predicate (or the
 * variant's speed) depends on, so they join the geometry: a comma list of
 * argument names, "*" for every non-tensor argument, "*ints" for every
 * non-tensor argument but Scalars and floats (dims, sizes, flags, dtypes,
 * devices: what shapes the problem). NULL or "" declares none (what
 * kv_tune_register_variant does). A name that is not a non-tensor
 * argument of the op is KV_ERR_INVALID_ARG. */
kv_status kv_tune_register_variant_args(const char *op_name, kv_key backend, const char *name, kv_kernel_fn fn,
                                        kv_tune_pred_fn pred, const char *depends_on);
/* Marks variant `name` of (op_name, backend) a guest: registered by a
 * plugin at a key that is not its own (a generated kernel at the CPU key,
 * docs/generated-kernels.md). The tuner times it like any variant, but
 * untimed mode (every kvrun check but `tune`) passes over it while a host
 * variant accepts the call, so the backend's own rows (`variants:CPU`,
 * `memory`...) judge the backend's kernels and a guest's bug fails only
 * its own row, `variants:CPU/<name>`. KV_ERR_INVALID_ARG when there is no
 * such variant. */
kv_status kv_tune_variant_mark_guest(const char *op_name, kv_key backend, const char *name);
/* Removes every variant of (op_name, backend) and its dispatching kernel
 * (the key's entry becomes missing). For tests. */
kv_status kv_tune_unregister_all(const char *op_name, kv_key backend);

/* The device synchronization the tuner calls around each timed run of a
 * backend's variants (none for the CPU). fn NULL removes it. */
void kv_tune_set_sync(kv_key backend, void (*fn)(void));

/* ---- discovery ---- */
/* Variants of (op, backend) in registration order; 0 when the pair has no
 * variant set. */
int kv_tune_variant_count(const kv_op *op, kv_key backend);
/* Name of variant i, NULL when out of range. */
const char *kv_tune_variant_name(const kv_op *op, kv_key backend, int i);
/* Index of the variant named `name`, -1 when there is none. */
int kv_tune_variant_find(const kv_op *op, kv_key backend, const char *name);
/* Whether variant i accepts this call (false when out of range). */
bool kv_tune_variant_compatible(const kv_op *op, kv_key backend, int i, const kv_stack *stack);
/* Writes one line per op with variants on any backend, sorted by op name:
 * "mm: CPU[ref, blocked, avx2]" (what KV_PERFDISPATCH_FORCE=? prints). */
void kv_tune_list(FILE *out);

/* ---- analyse once ----
 * A predicate that analysed a call may leave the analysis for the kernel
 * of the same call, so that a tuner cache hit analyses its arguments once:
 *
 *   predicate:  my_call *c = kv_tune_stash_buffer(op, stack, sizeof *c);
 *               analyse into c (or into a local when c is NULL);
 *               if it accepts and c != NULL: kv_tune_stash_fill(op, stack, &MY_KIND);
 *   kernel:     const my_call *c = kv_tune_stash_take(op, stack, &MY_KIND);
 *               copy *c before calling any op, or analyse when NULL.
 *
 * `kind` is any address naming the analysis (variants that share one
 * analysis share it). Only the dispatcher arms the stash, for exactly the
 * call whose chosen variant it is about to check and run (and so do the
 * tuner's timed runs and kv_tune_call_variant, which make the same call),
 * so a NULL from either function is normal and means "analyse yourself". */
#define KV_TUNE_STASH_BYTES 512
void *kv_tune_stash_buffer(const kv_op *op, const kv_stack *stack, size_t size);
void kv_tune_stash_fill(const kv_op *op, const kv_stack *stack, const void *kind);
const void *kv_tune_stash_take(const kv_op *op, const kv_stack *stack, const void *kind);

/* ---- calling ---- */
/* Calls variant `name` of (op, backend) directly on the stack (the stack
 * protocol of any kernel: args borrowed, replaced by owned returns), the
 * way a tuner cache hit runs it: the predicate with the stash armed for
 * this call, then the kernel, which takes the predicate's analysis (so
 * kvrun's perf mode times what a dispatch costs). An unknown name, or a
 * variant whose predicate refuses the call, is KV_ERR_INVALID_ARG naming
 * op, backend and variant; nothing is called. */
kv_status kv_tune_call_variant(const kv_op *op, kv_key backend, const char *name, kv_stack *stack);
/* The variant the dispatcher would run for this call on `backend` (the
 * forced one, the only compatible one, or the tuner's choice, tuning now
 * when the geometry has no cached choice); *index may be NULL. Leaves the
 * stack as it was. Errors: no variant set, an error of the force map, a
 * forced variant that is incompatible, no compatible variant. */
kv_status kv_tune_choice(const kv_op *op, kv_key backend, const kv_stack *stack, const char **name, int *index);

/* Pins (op, backend) to variant `name` on this thread (one pin per
 * thread; NULL name removes it): the dispatcher then runs exactly that
 * variant for this thread's calls, an incompatible call being an error as
 * for a forced one. The runner's variants check calls each variant through
 * the dispatcher this way. Errors: no such variant (KV_ERR_INVALID_ARG). */
kv_status kv_tune_pin(const kv_op *op, kv_key backend, const char *name);
/* Whether the kernel at `backend` for op is the dispatcher (false when a
 * test or plugin registered another kernel over it since). */
bool kv_tune_is_dispatching(const kv_op *op, kv_key backend);

/* Reference mode (per thread): every variant set runs its "ref" variant
 * (its first variant when it has none), without tuning or forcing. The
 * runner computes golden outputs in it. Returns the previous setting. */
bool kv_tune_reference_mode_set(bool on);
bool kv_tune_reference_mode(void);

/* Untimed mode (per thread; pins and reference mode come first): every
 * variant set runs its last-registered variant whose predicate accepts the
 * call, asked on every call, ignoring timings, cached choices and the
 * force map: what `tuning=off` picks, but also where a choice was cached
 * or forced. The runner runs every check but `tune` in it, so no row's
 * verdict depends on the tuner's timing-based pick (README "Kernel
 * variants and perf_dispatch"). Returns the previous setting. */
bool kv_tune_untimed_mode_set(bool on);
bool kv_tune_untimed_mode(void);

/* ---- forcing ---- */
/* Replaces the force map with `spec` (the KV_PERFDISPATCH_FORCE grammar;
 * NULL or "" clears it). On an error nothing changes; the message names
 * the entry and lists what exists. "?" is not accepted here. Clears every
 * cached choice. */
kv_status kv_tune_force_set(const char *spec);
/* The forced variant of an op, NULL when it is not forced. */
const char *kv_tune_forced(const kv_op *op);
/* The current map in the grammar above ("mm:avx2,neg:ref"; "" when
 * empty), snprintf style, so a caller can change it and put it back. */
int kv_tune_force_format(char *buf, int cap);

typedef enum kv_tune_env_result {
    KV_TUNE_ENV_OK,     /* loaded (or nothing to load) */
    KV_TUNE_ENV_LIST,   /* KV_PERFDISPATCH_FORCE=?: the caller should list and exit 0 */
    KV_TUNE_ENV_ERROR   /* malformed: kv_last_error_message() says why */
} kv_tune_env_result;
/* Reads the environment variables above now (they are otherwise read at
 * the first dispatch through a variant set). kvrun calls it after kv_init
 * and exits 2 on an error. Later calls return the first call's result.
 * The library itself never exits: a "?" first read by a dispatch lists
 * once on stdout and the program carries on, unforced. */
kv_tune_env_result kv_tune_env_load(void);
/* Every entry of the force map against what is registered now: KV_OK, or
 * KV_ERR_INVALID_ARG naming the first entry whose op does not exist or has
 * its variant on no backend. kvrun calls it once every backend is loaded
 * (and exits 2); a dispatch judges only its own op's entry. */
kv_status kv_tune_force_check(void);

/* ---- the tuner ---- */
/* Settings, global or per op (the first four fields keep their old
 * order; the time trigger and the re-evaluation warm-up came later).
 *
 * Why the defaults differ from perf_dispatch's re-tune after 300 calls: a
 * tuning here times every compatible variant (warm-up, then reps samples
 * of a lead-in and a timed run each, twice that on a close call: 12 to 22
 * runs per variant, 48 to 88 calls' worth for 4 variants, and a call
 * shorter than min_sample_ns is repeated within a sample), so re-tuning
 * every 300 calls would spend 15-30% of an op's time in the tuner; every
 * 10,000 calls keeps it near 1% (a 300 ns call, whose samples repeat it
 * about 7 times: 1.5-3%). The time trigger catches what a count cannot (a
 * machine whose load changed under a long-running process). */
typedef struct kv_tune_config {
    int warmup;              /* untimed runs per variant when a geometry is first evaluated (default 2) */
    int reps;                /* timed runs per variant, >= 1 (default 5) */
    int64_t retune_after;    /* calls of one geometry since its last tuning before it is re-tuned; 0 = never
                                (default 10000) */
    bool tuning;             /* false: no timing, the last-registered compatible variant wins (default true) */
    int64_t retune_ms;       /* milliseconds since a geometry's last tuning before it is re-tuned; 0 = never
                                (default 60000). Looked at every 64th call of the geometry, so the clock stays off
                                the hot path */
    int rewarmup;            /* untimed runs per variant when re-tuning (default 1) */
    int64_t min_sample_ns;   /* a timed sample repeats a call that takes less (as timed in warm-up) until it
                                lasts about this long, at most 256 runs, and counts the time per run: a
                                300 ns call timed alone is mostly clock noise (default 2000; 0 = one run) */
} kv_tune_config;
#define KV_TUNE_CONFIG_DEFAULT { 2, 5, 10000, true, 60000, 1, 2000 }

/* The global settings (what an op without its own uses). */
kv_tune_config kv_tune_config_get(void);
/* KV_ERR_INVALID_ARG for warmup or rewarmup < 0, reps outside [1, 101],
 * retune_after or retune_ms < 0. Clears every cached choice. */
kv_status kv_tune_config_set(const kv_tune_config *config);
/* Settings of one op (every backend's variant set of it, including ones
 * registered later); NULL puts the op back on the global settings. Same
 * errors; clears every cached choice. */
kv_status kv_tune_op_config_set(const kv_op *op, const kv_tune_config *config);
/* The settings op runs with: its own, else the global ones. */
kv_tune_config kv_tune_op_config_get(const kv_op *op);

/* The tuner's clock, in nanoseconds (monotonic by default). Tests inject
 * a fake one: fn NULL restores the monotonic clock. */
typedef uint64_t (*kv_tune_clock_fn)(void *ctx);
void kv_tune_set_clock(kv_tune_clock_fn fn, void *ctx);

/* Forgets every cached choice (all ops, all backends). */
void kv_tune_cache_clear(void);

/* Statistics of one (op, backend) since the last clear: dispatched calls,
 * tunings run, cache hits. */
typedef struct kv_tune_stats {
    uint64_t calls;
    uint64_t tunings;
    uint64_t cache_hits;
} kv_tune_stats;
kv_tune_stats kv_tune_stats_of(const kv_op *op, kv_key backend);

/* ---- the log ----
 * One line per choice (a geometry seen for the first time, or re-tuned):
 *   perf_dispatch: mm CPU (f32[64,32]:[32,1], f32[32,16]:[16,1]) -> avx2
 *       [tuned, 3 of 4 compatible: ref=120400ns blocked=20300ns avx2=8100ns]
 * (on one line), "[forced, 3 of 4 compatible]" or "[only, 1 of 4
 * compatible]". Tensors print as dtype[sizes]:[strides], with "+conj",
 * "+neg", "+zero" for lazy bits, lists in brackets, absent ones as None. */
bool kv_tune_log_enabled(void);
void kv_tune_log_set_enabled(bool on);
/* Where lines go (without their newline); NULL restores stderr. */
typedef void (*kv_tune_log_fn)(void *ctx, const char *line);
void kv_tune_set_log_sink(kv_tune_log_fn fn, void *ctx);
/* Writes the geometry text of a call ("(f32[2,3]:[3,1], None)"), snprintf
 * style. */
int kv_tune_geometry_format(const kv_op *op, const kv_stack *stack, char *buf, int cap);
/* The 64-bit geometry hash the cache is keyed by. */
uint64_t kv_tune_geometry_hash(const kv_op *op, const kv_stack *stack);

#endif
