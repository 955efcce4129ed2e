/* Generator: the random state a random op consumes (PyTorch's
 * `Generator? generator`), on the counter-based RNG of kv/rng.h.
 *
 * A generator is a value: a seed and an offset, nothing hidden. A random
 * op that needs n values reserves them (kv_generator_reserve: the first
 * counter is the current offset, the offset advances by n), and value i
 * of the call is a pure function of (seed, first + i): kv_rng_u64(seed,
 * first + i). So every backend reproduces the stream bit for bit (64-bit
 * integer arithmetic only), the goldens of random ops are exact, and two
 * calls that start from equal generators give equal results and leave
 * equal generators, whichever path (fast, slow, staged) they took.
 *
 * Generator? None means the default generator: one per thread (PyTorch
 * has one per process; per thread keeps threads independent without a
 * lock), seed 0 and offset 0 when the thread starts. */
#ifndef KV_GENERATOR_H
#define KV_GENERATOR_H

#include <stdint.h>

typedef struct kv_generator {
    uint64_t seed;
    uint64_t offset; /* the counter of the next value */
} kv_generator;

/* The calling thread's default generator (never NULL). */
kv_generator *kv_generator_default(void);
/* g, or the default generator when g is NULL (Generator? None). */
kv_generator *kv_generator_or_default(kv_generator *g);
/* Sets the seed and rewinds the offset to 0 (PyTorch's manual_seed). */
void kv_generator_manual_seed(kv_generator *g, uint64_t seed);
/* Reserves n consecutive values: returns the first counter and advances
 * the offset by n (wrapping modulo 2^64, like the counter itself). */
uint64_t kv_generator_reserve(kv_generator *g, uint64_t n);
/* The uniform double in [0, 1) of counter c of g's seed (53 bits). */
double kv_generator_uniform_at(uint64_t seed, uint64_t c);

#endif
