/* A counter-based random number generator (DESIGN.md section 6: "inputs
 * are filled from a counter-based RNG ... identical on every machine").
 *
 * A value is a pure function of (stream key, counter): no hidden state, so
 * element k of an input can be computed without generating elements
 * 0..k-1, in any order, on any thread, and the bytes are the same on every
 * machine and compiler (64-bit integer arithmetic only; the floating
 * helpers use exact power-of-two scaling). The mixer is SplitMix64's
 * finalizer applied twice with the counter folded in between, which passes
 * the usual avalanche tests for consecutive counters and keys.
 *
 * Stream keys come from text: XXH3-64 of the golden key of a case seeded
 * with --seed, so the same logical problem and seed give the same inputs,
 * and changing either gives unrelated ones. Sub-streams (one per tensor
 * input, one per component) are derived with kv_rng_substream. */
#ifndef KV_RNG_H
#define KV_RNG_H

#include <stdint.h>

/* The 64-bit value at `counter` of stream `key`. */
uint64_t kv_rng_u64(uint64_t key, uint64_t counter);
/* A uniform double in [0, 1) with 53 random bits. */
double kv_rng_uniform(uint64_t key, uint64_t counter);
/* A uniform integer in [0, n) (0 when n == 0), by a 128-bit multiply of
 * the value by n: the bias is below n / 2^64, far beneath anything a test
 * could notice, and the result never depends on the platform. */
uint64_t kv_rng_below(uint64_t key, uint64_t counter, uint64_t n);

/* The key of the stream for `text` (a case's golden key) and `seed`. */
uint64_t kv_rng_key(const char *text, uint64_t seed);
/* An independent stream derived from `key` (e.g. input i of a case). */
uint64_t kv_rng_substream(uint64_t key, uint64_t index);

/* The SplitMix64 finalizer: a bijection on 64 bits, for callers that need
 * to mix their own values. */
uint64_t kv_rng_mix64(uint64_t x);

#endif
