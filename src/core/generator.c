/* Generators on the counter-based RNG (kv/generator.h). */
#include "kv/generator.h"

#include "kv/rng.h"

static _Thread_local kv_generator t_default;

kv_generator *kv_generator_default(void) { return &t_default; }

kv_generator *kv_generator_or_default(kv_generator *g) { return g ? g : &t_default; }

void kv_generator_manual_seed(kv_generator *g, uint64_t seed) {
    g->seed = seed;
    g->offset = 0;
}

uint64_t kv_generator_reserve(kv_generator *g, uint64_t n) {
    const uint64_t first = g->offset;
    g->offset = first + n;
    return first;
}

double kv_generator_uniform_at(uint64_t seed, uint64_t c) { return kv_rng_uniform(seed, c); }
